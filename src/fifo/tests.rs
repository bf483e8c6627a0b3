//! Deterministic tests of the DeltaFifo, named after the ids of `docs/semantics.md` (F1–F9)
//! and, in spirit, after client-go's `delta_fifo_test.go`.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
};

use k8s_openapi::api::core::v1::ConfigMap;

use super::*;

type Cm = ConfigMap;

const NS: &str = "ns";

/// A ConfigMap `ns/<name>` whose resourceVersion is `rv`.
fn cm(name: &str, rv: u64) -> Arc<Cm> {
    let mut c = ConfigMap::default();
    c.metadata.namespace = Some(NS.into());
    c.metadata.name = Some(name.into());
    c.metadata.resource_version = Some(rv.to_string());
    Arc::new(c)
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new(Some(NS), name)
}

fn t(n: u64) -> TraceId {
    TraceId(n)
}

fn describe_obj(o: &Cm) -> String {
    format!(
        "{}@{}",
        o.metadata.name.as_deref().unwrap_or("?"),
        o.metadata.resource_version.as_deref().unwrap_or("?")
    )
}

/// One delta as `"Added foo@10"`; tombstones as `"Deleted ~foo@10"`.
fn describe(d: &Delta<Cm>) -> String {
    let tomb = if d.object.is_tombstone() { "~" } else { "" };
    format!(
        "{:?} {tomb}{}",
        d.delta_type,
        describe_obj(d.object.object())
    )
}

fn describe_all(d: &Deltas<Cm>) -> Vec<String> {
    d.deltas.iter().map(describe).collect()
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// A consumer store shared with the FIFO as its `known_objects`.
#[derive(Default, Clone)]
struct TestStore(Arc<Mutex<HashMap<ObjectKey, Arc<Cm>>>>);

impl TestStore {
    fn with(objs: &[Arc<Cm>]) -> Self {
        let st = TestStore::default();
        for o in objs {
            st.insert(o.clone());
        }
        st
    }

    fn insert(&self, o: Arc<Cm>) {
        let k = meta_key(&o);
        self.0.lock().unwrap().insert(k, o);
    }

    /// Applies popped deltas the way the indexer does.
    fn apply(&self, d: &Deltas<Cm>) {
        let mut m = self.0.lock().unwrap();
        for delta in &d.deltas {
            match delta.delta_type {
                t if t.removes() => {
                    m.remove(&d.key);
                }
                _ => {
                    m.insert(d.key.clone(), delta.object.object().clone());
                }
            }
        }
    }

    fn contents(&self) -> BTreeMap<String, String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.to_string(), describe_obj(v)))
            .collect()
    }
}

impl KnownObjects<Cm> for TestStore {
    fn list_keys(&self) -> Vec<ObjectKey> {
        let mut keys: Vec<_> = self.0.lock().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    }

    fn get_by_key(&self, key: &str) -> Option<Arc<Cm>> {
        self.0.lock().unwrap().get(key).cloned()
    }
}

fn meta_key(o: &Cm) -> ObjectKey {
    crate::meta_namespace_key(o).unwrap()
}

fn fifo() -> DeltaFifo<Cm> {
    DeltaFifo::new(DeltaFifoOptions::default())
}

fn fifo_with(store: &TestStore) -> DeltaFifo<Cm> {
    DeltaFifo::new(DeltaFifoOptions::default().with_known_objects(Arc::new(store.clone())))
}

fn fifo_sync_with(store: &TestStore) -> DeltaFifo<Cm> {
    DeltaFifo::new(
        DeltaFifoOptions::default()
            .with_known_objects(Arc::new(store.clone()))
            .with_emit_delta_type_replaced(false),
    )
}

/// Pops one key and acknowledges it at once.
fn pop1(f: &mut DeltaFifo<Cm>) -> Deltas<Cm> {
    let mut b = f.pop().expect("something queued");
    assert_eq!(b.items.len(), 1);
    let item = b.items.pop().unwrap();
    f.done(b.token, 0);
    f.check_invariants();
    item
}

/// Pops everything, one key at a time, acknowledging each; returns the described deltas.
fn drain(f: &mut DeltaFifo<Cm>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    while let Some(mut b) = f.pop() {
        let item = b.items.pop().unwrap();
        out.push(describe_all(&item));
        f.done(b.token, 0);
        f.check_invariants();
    }
    out
}

/// Pops everything, applies it to `store`, acknowledges it.
fn drain_into(f: &mut DeltaFifo<Cm>, store: &TestStore) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    while let Some(b) = f.pop_batch(3) {
        for item in &b.items {
            store.apply(item);
            out.push(describe_all(item));
        }
        f.done(b.token, 0);
        f.check_invariants();
    }
    out
}

// ---------------------------------------------------------------- F1: map + queue

#[test]
fn f1_client_go_basic() {
    // TestDeltaFIFO_basic, without the goroutines: adds of many keys and updates of them pop
    // in first-queued order with every delta of the key.
    let mut f = fifo();
    for i in 0..50u64 {
        f.add(cm(&format!("a{i}"), i), t(i + 1)).unwrap();
    }
    for i in 0..50u64 {
        f.update(cm(&format!("a{i}"), i + 100), t(i + 101)).unwrap();
    }
    f.check_invariants();
    assert_eq!(f.len(), 50);
    assert_eq!(f.pending_deltas(), 100);
    for i in 0..50u64 {
        let d = pop1(&mut f);
        assert_eq!(d.key, key(&format!("a{i}")));
        assert_eq!(
            describe_all(&d),
            vec![
                format!("Added a{i}@{i}"),
                format!("Updated a{i}@{}", i + 100)
            ]
        );
        assert_eq!(d.deltas[0].trace, t(i + 1));
        assert_eq!(d.deltas[1].trace, t(i + 101));
    }
    assert!(f.pop().is_none());
    assert_eq!(f.pending_deltas(), 0);
}

#[test]
fn f1_client_go_add_update() {
    // TestDeltaFIFO_addUpdate: add then update of one key pop together; a delete of an unknown
    // key queues nothing.
    let mut f = fifo();
    f.add(cm("foo", 10), t(1)).unwrap();
    f.update(cm("foo", 12), t(2)).unwrap();
    f.delete(cm("foo", 15), t(3)).unwrap();
    assert_eq!(f.list_keys(), vec![key("foo")]);
    assert_eq!(
        describe_all(f.get_by_key("ns/foo").unwrap()),
        s(&["Added foo@10", "Updated foo@12", "Deleted foo@15"])
    );
    f.delete(cm("bar", 1), t(4)).unwrap();
    assert!(f.get_by_key("ns/bar").is_none());
    assert_eq!(f.len(), 1);
    let d = pop1(&mut f);
    assert_eq!(d.key, key("foo"));
    assert!(f.pop().is_none());
}

#[test]
fn f1_client_go_detect_line_jumpers() {
    // TestDeltaFIFO_detectLineJumpers: a queued key keeps its position however often it is
    // updated.
    let mut f = fifo();
    f.add(cm("foo", 10), t(1)).unwrap();
    f.add(cm("bar", 1), t(2)).unwrap();
    f.add(cm("foo", 11), t(3)).unwrap();
    f.add(cm("foo", 13), t(4)).unwrap();
    f.add(cm("zab", 30), t(5)).unwrap();
    f.check_invariants();
    assert_eq!(f.list_keys(), vec![key("foo"), key("bar"), key("zab")]);

    assert_eq!(
        describe_all(&pop1(&mut f)),
        s(&["Added foo@10", "Added foo@11", "Added foo@13"])
    );
    f.add(cm("foo", 14), t(6)).unwrap(); // foo is behind zab now
    assert_eq!(describe_all(&pop1(&mut f)), s(&["Added bar@1"]));
    assert_eq!(describe_all(&pop1(&mut f)), s(&["Added zab@30"]));
    assert_eq!(describe_all(&pop1(&mut f)), s(&["Added foo@14"]));
    assert!(f.is_empty());
}

#[test]
fn f1_client_go_key_of() {
    // TestDeltaFIFO_KeyOf: objects are keyed namespace/name; a tombstone by its own key.
    let f = fifo();
    assert_eq!(f.key_of(&cm("foo", 1)).unwrap(), key("foo"));
    let tomb = DeltaObject::Tombstone(DeletedFinalStateUnknown {
        key: ObjectKey::parse("other/bar").unwrap(),
        obj: cm("baz", 1),
    });
    assert_eq!(f.key_of_object(&tomb).unwrap().as_str(), "other/bar");
    assert_eq!(
        f.key_of_object(&DeltaObject::Object(cm("q", 1)))
            .unwrap()
            .as_str(),
        "ns/q"
    );
    let mut cluster = ConfigMap::default();
    cluster.metadata.name = Some("c".into());
    assert_eq!(f.key_of(&cluster).unwrap().as_str(), "c");
}

#[test]
fn f1_key_error_is_returned_and_queues_nothing() {
    let mut f = fifo();
    let nameless = Arc::new(ConfigMap::default());
    assert_eq!(
        f.add(nameless.clone(), t(1)),
        Err(FifoError::Key(KeyError::MissingName))
    );
    assert!(matches!(
        f.update(nameless.clone(), t(2)),
        Err(FifoError::Key(_))
    ));
    assert!(matches!(f.delete(nameless, t(3)), Err(FifoError::Key(_))));
    assert!(f.is_empty());
    assert_eq!(f.stats().key_errors, 3);
    assert!(!f.has_synced(), "rejected objects do not populate the FIFO");
}

#[test]
fn f1_custom_key_func() {
    let kf: KeyFunc<Cm> = Arc::new(|o: &Cm| {
        o.metadata
            .resource_version
            .as_deref()
            .map(|rv| ObjectKey::new(None, rv))
            .ok_or(KeyError::MissingName)
    });
    let mut f = DeltaFifo::new(DeltaFifoOptions::new(kf));
    f.add(cm("a", 1), t(1)).unwrap();
    f.add(cm("b", 1), t(2)).unwrap();
    f.add(cm("c", 2), t(3)).unwrap();
    assert_eq!(
        f.list_keys(),
        vec![ObjectKey::new(None, "1"), ObjectKey::new(None, "2")]
    );
}

// ---------------------------------------------------------------- F2: delete dedup

#[test]
fn f2_dedup_deltas_table() {
    // client-go's TestDedupDeltas: (older, newer) → what remains.
    enum D {
        Add(u64),
        Upd(u64),
        Del(u64),
        Tomb(u64),
    }
    fn mk(d: &D) -> Delta<Cm> {
        match *d {
            D::Add(v) => Delta::new(DeltaType::Added, cm("foo", v), t(v)),
            D::Upd(v) => Delta::new(DeltaType::Updated, cm("foo", v), t(v)),
            D::Del(v) => Delta::new(DeltaType::Deleted, cm("foo", v), t(v)),
            D::Tomb(v) => Delta {
                delta_type: DeltaType::Deleted,
                object: DeltaObject::Tombstone(DeletedFinalStateUnknown {
                    key: key("foo"),
                    obj: cm("foo", v),
                }),
                trace: t(v),
            },
        }
    }
    let cases: Vec<(D, D, Vec<&str>, u64)> = vec![
        // two real deletes: the older stays
        (D::Del(10), D::Del(15), vec!["Deleted foo@10"], 1),
        // tombstone then real: the real one wins
        (D::Tomb(10), D::Del(15), vec!["Deleted foo@15"], 1),
        // real then tombstone: the real one stays
        (D::Del(10), D::Tomb(15), vec!["Deleted foo@10"], 1),
        // two tombstones: the newer wins
        (D::Tomb(10), D::Tomb(15), vec!["Deleted ~foo@15"], 1),
        // not deletes or not both: untouched
        (
            D::Add(10),
            D::Del(15),
            vec!["Added foo@10", "Deleted foo@15"],
            0,
        ),
        (
            D::Del(10),
            D::Add(15),
            vec!["Deleted foo@10", "Added foo@15"],
            0,
        ),
        (
            D::Upd(10),
            D::Upd(15),
            vec!["Updated foo@10", "Updated foo@15"],
            0,
        ),
        (
            D::Tomb(10),
            D::Upd(15),
            vec!["Deleted ~foo@10", "Updated foo@15"],
            0,
        ),
    ];
    for (i, (older, newer, want, deduped)) in cases.iter().enumerate() {
        let mut f = fifo();
        f.queue_action(key("foo"), mk(older), false);
        f.queue_action(key("foo"), mk(newer), false);
        f.check_invariants();
        let d = f.get_by_key("ns/foo").unwrap();
        assert_eq!(describe_all(d), s(want), "case {i}");
        assert_eq!(f.stats().deduped_deletes, *deduped, "case {i}");
        assert_eq!(f.pending_deltas(), want.len(), "case {i}");
    }
}

#[test]
fn f2_only_the_last_two_collapse() {
    let store = TestStore::with(&[cm("foo", 1)]);
    let mut f = fifo_with(&store);
    f.delete(cm("foo", 2), t(1)).unwrap();
    f.add(cm("foo", 3), t(2)).unwrap();
    f.delete(cm("foo", 4), t(3)).unwrap();
    f.delete(cm("foo", 5), t(4)).unwrap();
    assert_eq!(
        describe_all(f.get_by_key("ns/foo").unwrap()),
        s(&["Deleted foo@2", "Added foo@3", "Deleted foo@4"])
    );
    assert_eq!(f.stats().deduped_deletes, 1);
}

#[test]
fn f2_relist_tombstone_after_queued_delete_collapses() {
    // A delete queued, then a relist without the object: the tombstone collapses into the real
    // delete, which keeps its trace.
    let store = TestStore::with(&[cm("foo", 1)]);
    let mut f = fifo_with(&store);
    f.delete(cm("foo", 2), t(7)).unwrap();
    let sum = f.replace(vec![], "5").unwrap();
    assert_eq!(sum.tombstoned, 1);
    let d = pop1(&mut f);
    assert_eq!(describe_all(&d), s(&["Deleted foo@2"]));
    assert_eq!(d.deltas[0].trace, t(7));
    assert_eq!(f.stats().deduped_deletes, 1);
}

// ---------------------------------------------------------------- F3: unknown deletes

#[test]
fn f3_client_go_enqueueing_no_lister() {
    // TestDeltaFIFO_enqueueingNoLister.
    let mut f = fifo();
    f.add(cm("foo", 10), t(1)).unwrap();
    f.update(cm("bar", 15), t(2)).unwrap();
    f.add(cm("qux", 17), t(3)).unwrap();
    f.delete(cm("qux", 18), t(4)).unwrap();
    // This delete does not enqueue anything because baz doesn't exist.
    f.delete(cm("baz", 20), t(5)).unwrap();
    assert_eq!(f.stats().ignored_deletes, 1);
    assert_eq!(
        drain(&mut f),
        vec![
            s(&["Added foo@10"]),
            s(&["Updated bar@15"]),
            s(&["Added qux@17", "Deleted qux@18"]),
        ]
    );
}

#[test]
fn f3_client_go_enqueueing_with_lister() {
    // TestDeltaFIFO_enqueueingWithLister.
    let store = TestStore::with(&[cm("foo", 5), cm("bar", 6), cm("baz", 7)]);
    let mut f = fifo_with(&store);
    f.add(cm("foo", 10), t(1)).unwrap();
    f.update(cm("bar", 15), t(2)).unwrap();
    // This delete does enqueue the deletion, because "baz" is in the store.
    f.delete(cm("baz", 20), t(3)).unwrap();
    // This one is ignored: unknown everywhere.
    f.delete(cm("qux", 20), t(4)).unwrap();
    assert_eq!(f.stats().ignored_deletes, 1);
    assert_eq!(
        drain(&mut f),
        vec![
            s(&["Added foo@10"]),
            s(&["Updated bar@15"]),
            s(&["Deleted baz@20"]),
        ]
    );
}

#[test]
fn f3_client_go_delete_existing_non_propagated() {
    // TestDeltaFIFO_DeleteExistingNonPropagated: without a lister, a delete of a queued key is
    // queued.
    let mut f = fifo();
    f.add(cm("foo", 5), t(1)).unwrap();
    f.delete(cm("foo", 6), t(2)).unwrap();
    assert_eq!(drain(&mut f), vec![s(&["Added foo@5", "Deleted foo@6"])]);
}

#[test]
fn f3_delete_of_in_flight_object_is_queued() {
    // Popped but not yet in the store: the in-flight state makes it known.
    let store = TestStore::default();
    let mut f = fifo_with(&store);
    f.add(cm("foo", 1), t(1)).unwrap();
    let b = f.pop().unwrap();
    f.delete(cm("foo", 2), t(2)).unwrap();
    assert_eq!(f.stats().ignored_deletes, 0);
    assert_eq!(
        describe_all(f.get_by_key("ns/foo").unwrap()),
        s(&["Deleted foo@2"])
    );
    store.apply(&b.items[0]);
    f.done(b.token, 0);
    drain_into(&mut f, &store);
    assert!(store.contents().is_empty());
}

#[test]
fn f3_delete_of_in_flight_object_is_queued_without_lister() {
    let mut f = fifo();
    f.add(cm("foo", 1), t(1)).unwrap();
    let b = f.pop().unwrap();
    f.delete(cm("foo", 2), t(2)).unwrap();
    assert_eq!(f.len(), 1);
    f.done(b.token, 0);
    // Once acknowledged, nothing is known without a lister: a second delete is ignored.
    pop1(&mut f);
    f.delete(cm("foo", 3), t(3)).unwrap();
    assert!(f.is_empty());
    assert_eq!(f.stats().ignored_deletes, 1);
}

#[test]
fn f3_delete_after_in_flight_delete_is_ignored() {
    // The store still holds foo, but the in-flight batch deletes it: a second delete is a
    // duplicate report and is ignored.
    let store = TestStore::with(&[cm("foo", 1)]);
    let mut f = fifo_with(&store);
    f.delete(cm("foo", 2), t(1)).unwrap();
    let b = f.pop().unwrap();
    f.delete(cm("foo", 3), t(2)).unwrap();
    assert!(f.is_empty());
    assert_eq!(f.stats().ignored_deletes, 1);
    f.done(b.token, 0);
}

#[test]
fn f3_ignored_delete_still_populates() {
    // client-go marks the FIFO populated before deciding to ignore the delete.
    let mut f = fifo();
    assert!(!f.has_synced());
    f.delete(cm("foo", 1), t(1)).unwrap();
    assert!(f.has_synced());
    assert!(f.is_empty());
}

// ---------------------------------------------------------------- F4: replace

#[test]
fn f4_replace_queues_replaced_for_listed() {
    let mut f = fifo();
    let sum = f
        .replace(vec![(cm("a", 1), t(1)), (cm("b", 2), t(2))], "100")
        .unwrap();
    assert_eq!(sum.listed, 2);
    assert_eq!(sum.tombstoned, 0);
    assert!(sum.rejected.is_empty());
    assert_eq!(
        drain(&mut f),
        vec![s(&["Replaced a@1"]), s(&["Replaced b@2"])]
    );
    assert_eq!(f.last_sync_resource_version(), Some("100"));
    assert_eq!(f.stats().replaced, 2);
}

#[test]
fn f4_replace_emits_sync_when_replaced_disabled() {
    let mut f =
        DeltaFifo::new(DeltaFifoOptions::<Cm>::default().with_emit_delta_type_replaced(false));
    f.replace(vec![(cm("a", 1), t(1))], "1").unwrap();
    assert_eq!(drain(&mut f), vec![s(&["Sync a@1"])]);
}

#[test]
fn f4_client_go_add_replace() {
    // TestDeltaFIFO_addReplace.
    let mut f = fifo();
    f.add(cm("foo", 10), t(1)).unwrap();
    f.replace(vec![(cm("foo", 15), t(2))], "0").unwrap();
    assert_eq!(drain(&mut f), vec![s(&["Added foo@10", "Replaced foo@15"])]);
}

#[test]
fn f4_replace_tombstones_missing_keys() {
    // Queued and known keys missing from the list get tombstones; listed ones do not.
    let store = TestStore::with(&[cm("known", 1), cm("kept", 2)]);
    let mut f = fifo_with(&store);
    f.add(cm("queued", 3), t(1)).unwrap();
    let sum = f.replace(vec![(cm("kept", 4), t(2))], "9").unwrap();
    assert_eq!((sum.listed, sum.tombstoned), (1, 2));
    assert_eq!(
        drain(&mut f),
        vec![
            s(&["Added queued@3", "Deleted ~queued@3"]),
            s(&["Replaced kept@4"]),
            s(&["Deleted ~known@1"]),
        ]
    );
    assert_eq!(f.stats().tombstones, 2);
}

/// K2 (issue 31): what leaves a shard leaves as `LeftShard` (removed without a notification),
/// judged by its newest queued state; a delete already queued is kept; a relist of the new shard
/// tombstones nothing that left.
#[test]
fn k2_leave_unless_queues_left_shard_and_a_relist_tombstones_nothing_that_left() {
    let store = TestStore::with(&[cm("a", 1), cm("b", 2), cm("gone", 3), cm("stay", 4)]);
    let mut f = fifo_with(&store);
    f.update(cm("a", 5), t(1)).unwrap();
    f.delete(cm("gone", 3), t(2)).unwrap();
    let keep = |o: &Cm| o.metadata.name.as_deref() == Some("stay");
    assert_eq!(
        f.leave_unless(keep).unwrap(),
        2,
        "a and b leave; gone is deleted already"
    );
    assert_eq!(f.stats().left_shard, 2);
    // The new shard lists `stay` and a newcomer only.
    let sum = f
        .replace(vec![(cm("stay", 4), t(3)), (cm("new", 6), t(4))], "9")
        .unwrap();
    // One tombstone: gone's, which collapses into its queued delete (F2); none for a or b.
    assert_eq!(sum.tombstoned, 1, "a relist tombstoned an object that left");
    assert_eq!(
        drain_into(&mut f, &store),
        vec![
            s(&["Updated a@5", "LeftShard a@5"]),
            s(&["Deleted gone@3"]),
            s(&["LeftShard b@2"]),
            s(&["Replaced stay@4"]),
            s(&["Replaced new@6"]),
        ]
    );
    assert_eq!(
        store.contents().into_keys().collect::<Vec<_>>(),
        ["ns/new", "ns/stay"]
    );
    // A watch DELETE of an object that already left collapses into its LeftShard (F2).
    store.insert(cm("c", 7));
    f.leave_unless(|o: &Cm| o.metadata.name.as_deref() != Some("c"))
        .unwrap();
    f.delete(cm("c", 8), t(5)).unwrap();
    assert_eq!(drain(&mut f), vec![s(&["LeftShard c@7"])]);
}

#[test]
fn f4_replace_tombstone_unwraps_queued_tombstone() {
    // The newest queued delta is itself a tombstone: the new tombstone carries its object, not
    // a tombstone of a tombstone (and the two collapse, F2).
    let store = TestStore::with(&[cm("foo", 1)]);
    let mut f = fifo_with(&store);
    f.replace(vec![], "1").unwrap();
    f.replace(vec![], "2").unwrap();
    let d = pop1(&mut f);
    assert_eq!(describe_all(&d), s(&["Deleted ~foo@1"]));
    match &d.deltas[0].object {
        DeltaObject::Tombstone(t) => assert_eq!(t.key, key("foo")),
        other => panic!("expected a tombstone, got {other:?}"),
    }
}

#[test]
fn f4_client_go_replace_makes_deletions() {
    // TestDeltaFIFO_ReplaceMakesDeletions (emitDeltaTypeReplaced = false: Sync deltas).
    let known = || TestStore::with(&[cm("foo", 5), cm("bar", 6), cm("baz", 7)]);

    let store = known();
    let mut f = fifo_sync_with(&store);
    f.delete(cm("baz", 10), t(1)).unwrap();
    f.replace(vec![(cm("foo", 5), t(2))], "0").unwrap();
    assert_eq!(
        drain(&mut f),
        vec![
            s(&["Deleted baz@10"]),
            s(&["Sync foo@5"]),
            // bar had no delete event and was not listed: a tombstone with the known object.
            s(&["Deleted ~bar@6"]),
        ]
    );

    // Now try starting with an Add instead of a Delete.
    let store = known();
    let mut f = fifo_sync_with(&store);
    f.add(cm("baz", 10), t(1)).unwrap();
    f.replace(vec![(cm("foo", 5), t(2))], "0").unwrap();
    assert_eq!(
        drain(&mut f),
        vec![
            s(&["Added baz@10", "Deleted ~baz@10"]),
            s(&["Sync foo@5"]),
            s(&["Deleted ~bar@6"]),
        ]
    );

    // Delete and recreate the object in the queue, then delete it by a Replace call.
    let store = known();
    let mut f = fifo_sync_with(&store);
    f.delete(cm("bar", 6), t(1)).unwrap();
    f.add(cm("bar", 100), t(2)).unwrap();
    f.replace(vec![(cm("foo", 5), t(3))], "0").unwrap();
    assert_eq!(
        drain(&mut f),
        vec![
            // The newest queued object, not the store's, goes into the tombstone.
            s(&["Deleted bar@6", "Added bar@100", "Deleted ~bar@100"]),
            s(&["Sync foo@5"]),
            s(&["Deleted ~baz@7"]),
        ]
    );

    // Sync first, to make sure the delete uses the latest version.
    let store = known();
    let mut f = fifo_sync_with(&store);
    f.replace(vec![(cm("bar", 100), t(1)), (cm("foo", 5), t(2))], "0")
        .unwrap();
    f.replace(vec![(cm("foo", 5), t(3))], "0").unwrap();
    assert_eq!(
        drain(&mut f),
        vec![
            s(&["Sync bar@100", "Deleted ~bar@100"]),
            s(&["Sync foo@5", "Sync foo@5"]),
            s(&["Deleted ~baz@7"]),
        ]
    );

    // Without a lister only queued keys are tombstoned.
    let mut f =
        DeltaFifo::new(DeltaFifoOptions::<Cm>::default().with_emit_delta_type_replaced(false));
    f.add(cm("baz", 10), t(1)).unwrap();
    f.replace(vec![(cm("foo", 5), t(2))], "0").unwrap();
    assert_eq!(
        drain(&mut f),
        vec![s(&["Added baz@10", "Deleted ~baz@10"]), s(&["Sync foo@5"])]
    );
}

#[test]
fn f4_client_go_replace_makes_deletions_replaced() {
    // TestDeltaFIFO_ReplaceMakesDeletionsReplaced (emitDeltaTypeReplaced = true).
    let store = TestStore::with(&[cm("foo", 5), cm("bar", 6), cm("baz", 7)]);
    let mut f = fifo_with(&store);
    f.delete(cm("baz", 10), t(1)).unwrap();
    f.replace(vec![(cm("foo", 6), t(2))], "0").unwrap();
    assert_eq!(
        drain(&mut f),
        vec![
            s(&["Deleted baz@10"]),
            s(&["Replaced foo@6"]),
            s(&["Deleted ~bar@6"]),
        ]
    );
}

#[test]
fn f4_new_tombstones_are_queued_in_key_order() {
    let store = TestStore::with(&[cm("d", 1), cm("b", 1), cm("c", 1)]);
    let mut f = fifo_with(&store);
    f.add(cm("a", 1), t(1)).unwrap();
    let b = f.pop().unwrap(); // "a" in flight
    f.add(cm("z", 1), t(2)).unwrap();
    f.replace(vec![], "1").unwrap();
    assert_eq!(
        f.list_keys(),
        vec![key("z"), key("a"), key("b"), key("c"), key("d")]
    );
    f.done(b.token, 0);
}

#[test]
fn f4_replace_skips_bad_keys_and_reports_them() {
    let store = TestStore::with(&[cm("a", 1)]);
    let mut f = fifo_with(&store);
    let nameless = Arc::new(ConfigMap::default());
    let sum = f
        .replace(
            vec![(cm("a", 2), t(1)), (nameless, t(2)), (cm("b", 3), t(3))],
            "7",
        )
        .unwrap();
    assert_eq!(sum.listed, 2);
    assert_eq!(
        sum.rejected,
        vec![RejectedItem {
            index: 1,
            trace: t(2),
            error: KeyError::MissingName
        }]
    );
    assert_eq!(sum.tombstoned, 0);
    assert_eq!(f.stats().key_errors, 1);
    assert_eq!(f.last_sync_resource_version(), Some("7"));
    assert_eq!(
        drain(&mut f),
        vec![s(&["Replaced a@2"]), s(&["Replaced b@3"])]
    );
}

#[test]
fn f4_relist_racing_in_flight_add_tombstones_it() {
    // The race the in-flight tracking exists for: foo's Add is popped (in flight, not yet in
    // the store) when a relist without foo arrives. Without in-flight tracking foo is neither
    // queued nor known, no tombstone is queued, and the consumer then caches foo forever.
    let store = TestStore::default();
    let mut f = fifo_with(&store);
    f.replace(vec![], "1").unwrap();
    f.add(cm("foo", 2), t(1)).unwrap();
    let batch = f.pop().unwrap();
    assert_eq!(f.in_flight(), 1);

    let sum = f.replace(vec![], "3").unwrap(); // foo was deleted while we were not watching
    assert_eq!(sum.tombstoned, 1);

    // The consumer finishes the in-flight batch only now.
    store.apply(&batch.items[0]);
    f.done(batch.token, 0);
    assert_eq!(drain_into(&mut f, &store), vec![s(&["Deleted ~foo@2"])]);
    assert!(
        store.contents().is_empty(),
        "stale object left in the store"
    );
}

#[test]
fn f4_relist_racing_in_flight_add_without_lister() {
    // Same race without known_objects: the in-flight set alone detects it.
    let store = TestStore::default();
    let mut f = fifo();
    f.add(cm("foo", 2), t(1)).unwrap();
    let batch = f.pop().unwrap();
    f.replace(vec![], "3").unwrap();
    store.apply(&batch.items[0]);
    f.done(batch.token, 0);
    drain_into(&mut f, &store);
    assert!(store.contents().is_empty());
}

#[test]
fn f4_relist_racing_in_flight_update_uses_in_flight_object() {
    // The store has foo@1, foo@2 is in flight: the tombstone carries foo@2.
    let store = TestStore::with(&[cm("foo", 1)]);
    let mut f = fifo_with(&store);
    f.update(cm("foo", 2), t(1)).unwrap();
    let batch = f.pop().unwrap();
    f.replace(vec![], "3").unwrap();
    assert_eq!(
        describe_all(f.get_by_key("ns/foo").unwrap()),
        s(&["Deleted ~foo@2"])
    );
    f.done(batch.token, 0);
}

#[test]
fn f4_relist_with_in_flight_delete_does_not_tombstone() {
    // The store still has foo, but the in-flight batch deletes it: no second deletion.
    let store = TestStore::with(&[cm("foo", 1)]);
    let mut f = fifo_with(&store);
    f.delete(cm("foo", 2), t(1)).unwrap();
    let batch = f.pop().unwrap();
    let sum = f.replace(vec![], "3").unwrap();
    assert_eq!(sum.tombstoned, 0);
    assert!(f.is_empty());
    store.apply(&batch.items[0]);
    f.done(batch.token, 0);
    assert!(store.contents().is_empty());
}

#[test]
fn f4_listed_in_flight_key_is_replaced_not_tombstoned() {
    let store = TestStore::default();
    let mut f = fifo_with(&store);
    f.add(cm("foo", 1), t(1)).unwrap();
    let batch = f.pop().unwrap();
    let sum = f.replace(vec![(cm("foo", 2), t(2))], "3").unwrap();
    assert_eq!((sum.listed, sum.tombstoned), (1, 0));
    store.apply(&batch.items[0]);
    f.done(batch.token, 0);
    drain_into(&mut f, &store);
    assert_eq!(
        store.contents(),
        BTreeMap::from([("ns/foo".to_string(), "foo@2".to_string())])
    );
}

#[test]
fn f4_duplicate_listed_keys_queue_once() {
    let mut f = fifo();
    let sum = f
        .replace(vec![(cm("a", 1), t(1)), (cm("a", 2), t(2))], "0")
        .unwrap();
    assert_eq!(sum.listed, 2);
    assert_eq!(sum.initial_population, Some(1));
    assert_eq!(f.len(), 1);
    assert_eq!(drain(&mut f), vec![s(&["Replaced a@1", "Replaced a@2"])]);
}

// ---------------------------------------------------------------- F5: has_synced

#[test]
fn f5_client_go_has_synced_table() {
    // TestDeltaFIFO_HasSynced, where every pop is acknowledged at once.
    type Action = fn(&mut DeltaFifo<Cm>);
    let cases: Vec<(Vec<Action>, bool)> = vec![
        (vec![], false),
        (vec![|f| f.add(cm("a", 1), t(1)).unwrap()], true),
        (vec![|f| drop(f.replace(vec![], "0").unwrap())], true),
        (
            vec![|f| drop(f.replace(vec![(cm("a", 1), t(1)), (cm("b", 2), t(2))], "0"))],
            false,
        ),
        (
            vec![
                |f| drop(f.replace(vec![(cm("a", 1), t(1)), (cm("b", 2), t(2))], "0")),
                |f| drop(pop1(f)),
            ],
            false,
        ),
        (
            vec![
                |f| drop(f.replace(vec![(cm("a", 1), t(1)), (cm("b", 2), t(2))], "0")),
                |f| drop(pop1(f)),
                |f| drop(pop1(f)),
            ],
            true,
        ),
        (
            // Duplicate keys in a list (a broken apiserver): one queue entry, one pop.
            vec![
                |f| drop(f.replace(vec![(cm("a", 1), t(1)), (cm("a", 2), t(2))], "0")),
                |f| drop(pop1(f)),
            ],
            true,
        ),
        (
            // Events after the initial list queued behind it do not delay has_synced.
            vec![
                |f| drop(f.replace(vec![(cm("a", 1), t(1))], "0")),
                |f| f.add(cm("b", 1), t(2)).unwrap(),
                |f| drop(pop1(f)),
            ],
            true,
        ),
        (
            // An update of an initial key keeps it initial until it is popped.
            vec![|f| drop(f.replace(vec![(cm("a", 1), t(1))], "0")), |f| {
                f.update(cm("a", 2), t(2)).unwrap()
            }],
            false,
        ),
        (
            // A later replace does not reset the initial population.
            vec![|f| drop(f.replace(vec![], "0")), |f| {
                drop(f.replace(vec![(cm("a", 1), t(1))], "1"))
            }],
            true,
        ),
    ];
    for (i, (actions, want)) in cases.into_iter().enumerate() {
        let mut f = fifo();
        for a in actions {
            a(&mut f);
        }
        f.check_invariants();
        assert_eq!(f.has_synced(), want, "case {i}");
    }
}

#[test]
fn f5_has_synced_waits_for_done() {
    let mut f = fifo();
    let sum = f
        .replace(vec![(cm("a", 1), t(1)), (cm("b", 2), t(2))], "0")
        .unwrap();
    assert_eq!(sum.initial_population, Some(2));
    let b = f.pop_batch(10).unwrap();
    assert!(f.is_empty());
    assert_eq!(b.token.initial_items(), 2);
    assert!(!f.has_synced(), "popped is not processed");
    f.done(b.token, 0);
    assert!(f.has_synced());
}

#[test]
fn f5_failed_items_still_count_as_processed() {
    let mut f = fifo();
    f.replace(vec![(cm("a", 1), t(1))], "0").unwrap();
    let b = f.pop().unwrap();
    f.done(b.token, 1);
    assert!(f.has_synced());
    assert_eq!(f.stats().failed, 1);
}

#[test]
fn f5_initial_population_counts_tombstones() {
    // Keys known before the first list (e.g. a store seeded from elsewhere) and missing from it
    // are part of the initial population.
    let store = TestStore::with(&[cm("gone", 1)]);
    let mut f = fifo_with(&store);
    let sum = f.replace(vec![(cm("a", 1), t(1))], "0").unwrap();
    assert_eq!(sum.initial_population, Some(2));
    pop1(&mut f);
    assert!(!f.has_synced());
    let b = f.pop().unwrap();
    assert_eq!(b.token.initial_items(), 1);
    assert_eq!(describe_all(&b.items[0]), s(&["Deleted ~gone@1"]));
    f.done(b.token, 0);
    assert!(f.has_synced());
}

#[test]
fn f5_only_initial_items_are_counted_in_tokens() {
    let mut f = fifo();
    f.replace(vec![(cm("a", 1), t(1))], "0").unwrap();
    f.add(cm("b", 1), t(2)).unwrap();
    f.replace(vec![(cm("a", 1), t(3)), (cm("c", 1), t(4))], "1")
        .unwrap();
    let b = f.pop_batch(10).unwrap();
    assert_eq!(b.token.len(), 3);
    assert_eq!(b.token.initial_items(), 1);
    assert!(!f.has_synced());
    f.done(b.token, 0);
    assert!(f.has_synced());
}

#[test]
fn f5_unpopulated_until_first_event() {
    let mut f = fifo();
    assert!(!f.has_synced());
    assert!(f.resync().is_ok());
    assert!(!f.has_synced(), "resync does not populate");
    f.update(cm("a", 1), t(1)).unwrap();
    assert!(f.has_synced());
}

// ---------------------------------------------------------------- F6: pop

#[test]
fn f6_pop_hands_out_whole_deltas_of_one_key() {
    let mut f = fifo();
    f.add(cm("a", 1), t(1)).unwrap();
    f.update(cm("a", 2), t(2)).unwrap();
    f.add(cm("b", 1), t(3)).unwrap();
    let b = f.pop().unwrap();
    assert_eq!(b.items.len(), 1);
    assert_eq!(b.items[0].key, key("a"));
    assert_eq!(b.items[0].deltas.len(), 2);
    assert_eq!(b.token.len(), 1);
    assert_eq!(f.len(), 1);
    assert_eq!(f.pending_deltas(), 1);
    assert_eq!(f.in_flight(), 1);
    f.done(b.token, 0);
    assert_eq!(f.in_flight(), 0);
    assert_eq!(f.stats().popped, 1);
    assert_eq!(f.stats().acked, 1);
}

#[test]
fn f6_pop_batch_in_queue_order_up_to_max() {
    let mut f = fifo();
    for (i, n) in ["c", "a", "b", "e", "d"].iter().enumerate() {
        f.add(cm(n, i as u64), t(i as u64 + 1)).unwrap();
    }
    let b1 = f.pop_batch(3).unwrap();
    let keys: Vec<_> = b1.items.iter().map(|d| d.key.name().to_string()).collect();
    assert_eq!(keys, ["c", "a", "b"]);
    let b2 = f.pop_batch(3).unwrap();
    assert_eq!(b2.items.len(), 2);
    assert!(f.pop_batch(3).is_none());
    assert_eq!(f.in_flight(), 5);
    assert_eq!(f.in_flight_batches(), 2);
    assert!(b2.token.id() > b1.token.id());
    f.done(b1.token, 0);
    f.done(b2.token, 0);
    assert_eq!(f.in_flight(), 0);
    f.check_invariants();
}

#[test]
fn f6_pop_batch_zero_pops_one() {
    let mut f = fifo();
    f.add(cm("a", 1), t(1)).unwrap();
    f.add(cm("b", 1), t(2)).unwrap();
    let b = f.pop_batch(0).unwrap();
    assert_eq!(b.items.len(), 1);
    f.done(b.token, 0);
}

#[test]
fn f6_pop_on_empty_returns_none() {
    let mut f = fifo();
    assert!(f.pop().is_none());
    assert!(f.pop_batch(10).is_none());
    assert_eq!(f.stats().popped, 0);
}

#[test]
fn f6_failures_are_counted_not_requeued() {
    // The requeueOnPop-less variant: a failed item is reported to done and gone.
    let mut f = fifo();
    f.add(cm("a", 1), t(1)).unwrap();
    f.add(cm("b", 1), t(2)).unwrap();
    let b = f.pop_batch(2).unwrap();
    f.done(b.token, 1);
    assert!(f.is_empty());
    assert!(f.pop().is_none());
    assert_eq!(f.stats().failed, 1);
    // Failures are capped at the batch size.
    f.add(cm("c", 1), t(3)).unwrap();
    let b = f.pop().unwrap();
    f.done(b.token, 99);
    assert_eq!(f.stats().failed, 2);
}

#[test]
fn f6_same_key_in_two_batches_is_refcounted() {
    let store = TestStore::default();
    let mut f = fifo_with(&store);
    f.add(cm("a", 1), t(1)).unwrap();
    let b1 = f.pop().unwrap();
    f.update(cm("a", 2), t(2)).unwrap();
    let b2 = f.pop().unwrap();
    assert_eq!(f.in_flight(), 2);
    f.check_invariants();
    f.done(b1.token, 0);
    // Still in flight through b2 (newest state a@2): a relist without it tombstones a@2.
    f.replace(vec![], "1").unwrap();
    assert_eq!(
        describe_all(f.get_by_key("ns/a").unwrap()),
        s(&["Deleted ~a@2"])
    );
    f.done(b2.token, 0);
    assert_eq!(f.in_flight(), 0);
    f.check_invariants();
    assert!(f.in_flight.is_empty());
}

// ---------------------------------------------------------------- F7: resync

#[test]
fn f7_client_go_resync() {
    // TestDeltaFIFO_Resync.
    let store = TestStore::with(&[cm("foo", 5)]);
    let mut f = fifo_with(&store);
    assert_eq!(f.resync().unwrap(), 1);
    let d = pop1(&mut f);
    assert_eq!(describe_all(&d), s(&["Sync foo@5"]));
    assert!(d.deltas[0].trace.is_none());
    assert_eq!(f.stats().synced, 1);
}

#[test]
fn f7_client_go_resync_non_existing() {
    // TestDeltaFIFO_ResyncNonExisting: a queued delete is not followed by a Sync.
    let store = TestStore::with(&[cm("foo", 5)]);
    let mut f = fifo_with(&store);
    f.delete(cm("foo", 10), t(1)).unwrap();
    assert_eq!(f.resync().unwrap(), 0);
    assert_eq!(drain(&mut f), vec![s(&["Deleted foo@10"])]);
}

#[test]
fn f7_client_go_update_resync_race() {
    // TestDeltaFIFO_UpdateResyncRace: a queued update is not followed by a Sync.
    let store = TestStore::with(&[cm("foo", 5)]);
    let mut f = fifo_with(&store);
    f.update(cm("foo", 6), t(1)).unwrap();
    assert_eq!(f.resync().unwrap(), 0);
    assert_eq!(drain(&mut f), vec![s(&["Updated foo@6"])]);
}

#[test]
fn f7_resync_without_known_objects_is_a_noop() {
    let mut f = fifo();
    f.add(cm("a", 1), t(1)).unwrap();
    pop1(&mut f);
    assert_eq!(f.resync().unwrap(), 0);
    assert!(f.is_empty());
}

#[test]
fn f7_resync_follows_in_flight_state() {
    let store = TestStore::with(&[cm("gone", 1), cm("upd", 1), cm("still", 1)]);
    let mut f = fifo_with(&store);
    f.delete(cm("gone", 2), t(1)).unwrap();
    f.update(cm("upd", 2), t(2)).unwrap();
    f.add(cm("new", 1), t(3)).unwrap();
    let b = f.pop_batch(3).unwrap(); // none of it applied to the store yet
    assert_eq!(f.resync().unwrap(), 3);
    assert_eq!(
        f.list_keys(),
        vec![key("still"), key("new"), key("upd")],
        "store keys first, then in-flight keys in key order"
    );
    assert_eq!(
        describe_all(f.get_by_key("ns/upd").unwrap()),
        s(&["Sync upd@2"]),
        "the in-flight object, not the store's"
    );
    assert!(f.get_by_key("ns/gone").is_none(), "deleted in flight");
    f.done(b.token, 0);
}

// ---------------------------------------------------------------- F8: close

#[test]
fn f8_close_rejects_new_input() {
    let store = TestStore::with(&[cm("k", 1)]);
    let mut f = fifo_with(&store);
    f.add(cm("a", 1), t(1)).unwrap();
    assert_eq!(f.close(), 1);
    assert!(f.is_closed());
    assert_eq!(f.add(cm("b", 1), t(2)), Err(FifoError::Closed));
    assert_eq!(f.update(cm("a", 2), t(3)), Err(FifoError::Closed));
    assert_eq!(f.delete(cm("a", 3), t(4)), Err(FifoError::Closed));
    assert_eq!(f.replace(vec![], "9"), Err(FifoError::Closed));
    assert_eq!(f.resync(), Err(FifoError::Closed));
    assert_eq!(f.last_sync_resource_version(), None);
    assert_eq!(f.len(), 1);
    assert_eq!(f.pending_deltas(), 1);
}

#[test]
fn f8_pop_drains_after_close() {
    let mut f = fifo();
    f.replace(vec![(cm("a", 1), t(1)), (cm("b", 1), t(2))], "1")
        .unwrap();
    let in_flight = f.pop().unwrap();
    assert_eq!(f.close(), 1);
    assert_eq!(drain(&mut f), vec![s(&["Replaced b@1"])]);
    assert!(f.pop().is_none());
    assert!(!f.has_synced());
    f.done(in_flight.token, 0);
    assert!(f.has_synced());
    assert_eq!(f.close(), 0, "closing twice is harmless");
}

// ---------------------------------------------------------------- misc

#[test]
fn stats_count_every_kind() {
    let store = TestStore::with(&[cm("k", 1)]);
    let mut f = fifo_with(&store);
    f.add(cm("a", 1), t(1)).unwrap();
    f.update(cm("a", 2), t(2)).unwrap();
    f.delete(cm("a", 3), t(3)).unwrap();
    f.delete(cm("zz", 1), t(4)).unwrap();
    f.replace(vec![(cm("b", 1), t(5))], "1").unwrap();
    let st = f.stats();
    assert_eq!(
        (st.added, st.updated, st.deleted, st.tombstones, st.replaced),
        (1, 1, 3, 2, 1)
    );
    assert_eq!((st.ignored_deletes, st.deduped_deletes), (1, 1));
    assert_eq!((st.replaces, st.resyncs), (1, 0));
    assert_eq!(f.resync().unwrap(), 0); // k is queued (tombstoned)
    assert_eq!(f.stats().resyncs, 1);
}

#[test]
fn debug_output_has_no_object_bodies() {
    let mut f = fifo();
    f.add(cm("secret", 1), t(1)).unwrap();
    let dbg = format!("{f:?}");
    assert!(dbg.contains("queued: 1"), "{dbg}");
    let b = f.pop().unwrap();
    let dbg = format!("{b:?}");
    assert!(dbg.contains("ns/secret"), "{dbg}");
    assert!(!dbg.contains("resource_version"), "{dbg}");
    f.done(b.token, 0);
}

// ---------------------------------------------------------------- F9: in-order mode

fn in_order() -> DeltaFifo<Cm> {
    DeltaFifo::new(DeltaFifoOptions::default().with_mode(FifoMode::InOrder))
}

fn in_order_with(store: &TestStore) -> DeltaFifo<Cm> {
    DeltaFifo::new(
        DeltaFifoOptions::default()
            .with_mode(FifoMode::InOrder)
            .with_known_objects(Arc::new(store.clone())),
    )
}

#[test]
fn f9_default_mode_is_per_key() {
    assert_eq!(fifo().mode(), FifoMode::PerKey);
    assert_eq!(DeltaFifoOptions::<Cm>::default().mode, FifoMode::PerKey);
    assert_eq!(in_order().mode(), FifoMode::InOrder);
}

#[test]
fn f9_in_order_pops_one_event_per_entry_in_strict_order() {
    let mut f = in_order();
    f.add(cm("a", 1), t(1)).unwrap();
    f.add(cm("b", 1), t(2)).unwrap();
    f.update(cm("a", 2), t(3)).unwrap();
    f.delete(cm("b", 3), t(4)).unwrap();
    f.check_invariants();
    assert_eq!(f.len(), 4, "one entry per event");
    assert_eq!(f.pending_deltas(), 4);
    assert_eq!(f.list_keys(), vec![key("a"), key("b")]);
    assert_eq!(
        drain(&mut f),
        vec![
            s(&["Added a@1"]),
            s(&["Added b@1"]),
            s(&["Updated a@2"]),
            s(&["Deleted b@3"]),
        ]
    );
}

#[test]
fn f9_in_order_get_by_key_returns_newest_entry() {
    let mut f = in_order();
    f.add(cm("a", 1), t(1)).unwrap();
    f.update(cm("a", 2), t(2)).unwrap();
    assert_eq!(
        describe_all(f.get_by_key("ns/a").unwrap()),
        s(&["Updated a@2"])
    );
    pop1(&mut f);
    assert_eq!(
        describe_all(f.get_by_key("ns/a").unwrap()),
        s(&["Updated a@2"])
    );
    pop1(&mut f);
    assert!(f.get_by_key("ns/a").is_none());
}

#[test]
fn f9_in_order_batch_may_hold_a_key_twice() {
    let store = TestStore::default();
    let mut f = in_order_with(&store);
    f.add(cm("a", 1), t(1)).unwrap();
    f.add(cm("b", 1), t(2)).unwrap();
    f.update(cm("a", 2), t(3)).unwrap();
    let b = f.pop_batch(10).unwrap();
    let got: Vec<_> = b.items.iter().map(describe_all).collect();
    assert_eq!(
        got,
        vec![s(&["Added a@1"]), s(&["Added b@1"]), s(&["Updated a@2"])]
    );
    assert_eq!(f.in_flight(), 3);
    f.check_invariants();
    // The in-flight state of a is its newest popped entry.
    f.replace(vec![(cm("b", 1), t(4))], "1").unwrap();
    assert_eq!(
        describe_all(f.get_by_key("ns/a").unwrap()),
        s(&["Deleted ~a@2"])
    );
    f.done(b.token, 0);
    assert!(f.in_flight.is_empty());
    f.check_invariants();
}

#[test]
fn f9_in_order_collapses_consecutive_deletes() {
    // F2 in order: a real delete followed by a relist tombstone stays one entry.
    let store = TestStore::with(&[cm("foo", 1), cm("bar", 1)]);
    let mut f = in_order_with(&store);
    f.delete(cm("foo", 2), t(1)).unwrap();
    f.replace(vec![(cm("bar", 1), t(2))], "1").unwrap();
    assert_eq!(f.stats().deduped_deletes, 1);
    assert_eq!(
        drain(&mut f),
        vec![s(&["Deleted foo@2"]), s(&["Replaced bar@1"])]
    );

    // A tombstone followed by the watch's real delete: the real one takes the tombstone's
    // place, so the deletion is still reported once, at its first position.
    let store = TestStore::with(&[cm("foo", 1), cm("bar", 1)]);
    let mut f = in_order_with(&store);
    f.replace(vec![(cm("bar", 1), t(1))], "1").unwrap();
    f.add(cm("baz", 1), t(2)).unwrap();
    f.delete(cm("foo", 3), t(3)).unwrap();
    f.check_invariants();
    assert_eq!(
        drain(&mut f),
        vec![
            s(&["Replaced bar@1"]),
            s(&["Deleted foo@3"]),
            s(&["Added baz@1"]),
        ]
    );

    // Not consecutive for the key: both kept.
    let mut f = in_order();
    f.add(cm("foo", 1), t(1)).unwrap();
    f.delete(cm("foo", 2), t(2)).unwrap();
    f.add(cm("foo", 3), t(3)).unwrap();
    f.delete(cm("foo", 4), t(4)).unwrap();
    assert_eq!(f.len(), 4);
}

#[test]
fn f9_in_order_ignores_unknown_deletes() {
    let store = TestStore::with(&[cm("known", 1)]);
    let mut f = in_order_with(&store);
    f.delete(cm("nope", 1), t(1)).unwrap();
    f.delete(cm("known", 2), t(2)).unwrap();
    f.add(cm("q", 1), t(3)).unwrap();
    f.add(cm("other", 1), t(4)).unwrap();
    f.delete(cm("q", 2), t(5)).unwrap(); // queued (not newest entry overall): accepted
    assert_eq!(f.stats().ignored_deletes, 1);
    assert_eq!(f.len(), 4);
}

#[test]
fn f9_in_order_replace_tombstones_from_newest_entry() {
    let store = TestStore::with(&[cm("k", 1)]);
    let mut f = in_order_with(&store);
    f.add(cm("q", 1), t(1)).unwrap();
    f.update(cm("q", 2), t(2)).unwrap();
    let sum = f.replace(vec![(cm("z", 1), t(3))], "5").unwrap();
    assert_eq!((sum.listed, sum.tombstoned), (1, 2));
    assert_eq!(f.last_sync_resource_version(), Some("5"));
    assert_eq!(
        drain(&mut f),
        vec![
            s(&["Added q@1"]),
            s(&["Updated q@2"]),
            s(&["Replaced z@1"]),
            s(&["Deleted ~q@2"]),
            s(&["Deleted ~k@1"]),
        ]
    );
}

#[test]
fn f9_in_order_has_synced_counts_initial_entries() {
    let mut f = in_order();
    let sum = f
        .replace(vec![(cm("a", 1), t(1)), (cm("a", 2), t(2))], "0")
        .unwrap();
    assert_eq!(
        sum.initial_population,
        Some(2),
        "one entry per listed object"
    );
    f.add(cm("b", 1), t(3)).unwrap();
    let b1 = f.pop().unwrap();
    assert_eq!(b1.token.initial_items(), 1);
    f.done(b1.token, 0);
    assert!(!f.has_synced());
    let b2 = f.pop_batch(5).unwrap();
    assert_eq!((b2.token.len(), b2.token.initial_items()), (2, 1));
    assert!(!f.has_synced());
    f.done(b2.token, 0);
    assert!(f.has_synced());
}

#[test]
fn f9_in_order_resync_skips_keys_with_queued_events() {
    let store = TestStore::with(&[cm("a", 1), cm("b", 1)]);
    let mut f = in_order_with(&store);
    f.update(cm("a", 2), t(1)).unwrap();
    assert_eq!(f.resync().unwrap(), 1);
    assert_eq!(drain(&mut f), vec![s(&["Updated a@2"]), s(&["Sync b@1"])]);
}

#[test]
fn f9_in_order_relist_racing_in_flight_add() {
    let store = TestStore::default();
    let mut f = in_order_with(&store);
    f.add(cm("foo", 1), t(1)).unwrap();
    let b = f.pop().unwrap();
    f.replace(vec![], "2").unwrap();
    store.apply(&b.items[0]);
    f.done(b.token, 0);
    drain_into(&mut f, &store);
    assert!(store.contents().is_empty());
}

#[test]
fn f9_in_order_close_drains() {
    let mut f = in_order();
    f.add(cm("a", 1), t(1)).unwrap();
    f.update(cm("a", 2), t(2)).unwrap();
    assert_eq!(f.close(), 2);
    assert_eq!(f.add(cm("b", 1), t(3)), Err(FifoError::Closed));
    assert_eq!(drain(&mut f).len(), 2);
    assert!(f.pop().is_none());
}

// ---------------------------------------------------------------- F9: atomic relist

fn atomic(mode: FifoMode, store: &TestStore) -> DeltaFifo<Cm> {
    DeltaFifo::new(
        DeltaFifoOptions::default()
            .with_mode(mode)
            .with_atomic_replace(true)
            .with_known_objects(Arc::new(store.clone())),
    )
}

const MODES: [FifoMode; 2] = [FifoMode::PerKey, FifoMode::InOrder];

/// Pops one batch (up to `max`), acknowledges it; returns its relist RV and described items.
fn pop_described(f: &mut DeltaFifo<Cm>, max: usize) -> (Option<String>, Vec<Vec<String>>) {
    let b = f.pop_batch(max).expect("something queued");
    assert_eq!(b.is_replace_all(), b.replace_all.is_some());
    let items = b.items.iter().map(describe_all).collect();
    f.done(b.token, 0);
    f.check_invariants();
    (b.replace_all, items)
}

#[test]
fn f9_atomic_replace_is_off_by_default() {
    assert!(!DeltaFifoOptions::<Cm>::default().atomic_replace);
    let store = TestStore::default();
    let mut f = in_order_with(&store);
    assert!(!f.atomic_replace());
    f.replace(vec![(cm("a", 1), t(1)), (cm("b", 1), t(2))], "1")
        .unwrap();
    let (rv, items) = pop_described(&mut f, 1);
    assert_eq!((rv, items), (None, vec![s(&["Replaced a@1"])]));
}

#[test]
fn f9_atomic_in_order_relist_pops_as_one_batch_between_its_neighbours() {
    let store = TestStore::with(&[cm("k", 1)]);
    let mut f = atomic(FifoMode::InOrder, &store);
    assert!(f.atomic_replace());
    f.add(cm("x1", 1), t(1)).unwrap();
    f.add(cm("x2", 1), t(2)).unwrap();
    let sum = f
        .replace(
            vec![(cm("a", 1), t(3)), (cm("b", 1), t(4)), (cm("c", 1), t(5))],
            "7",
        )
        .unwrap();
    assert_eq!(
        (sum.listed, sum.tombstoned),
        (3, 3),
        "x1, x2 and k are not listed"
    );
    f.add(cm("y", 1), t(6)).unwrap();
    f.check_invariants();
    assert_eq!(f.len(), 9);

    // The batch before the group stops in front of it, whatever the bound.
    assert_eq!(
        pop_described(&mut f, 10),
        (None, vec![s(&["Added x1@1"]), s(&["Added x2@1"])])
    );
    // The group pops whole, whatever the bound.
    assert_eq!(
        pop_described(&mut f, 1),
        (
            Some("7".to_string()),
            vec![
                s(&["Replaced a@1"]),
                s(&["Replaced b@1"]),
                s(&["Replaced c@1"]),
                s(&["Deleted ~x1@1"]),
                s(&["Deleted ~x2@1"]),
                s(&["Deleted ~k@1"]),
            ]
        )
    );
    assert_eq!(pop_described(&mut f, 10), (None, vec![s(&["Added y@1"])]));
    assert!(f.pop().is_none());
}

#[test]
fn f9_atomic_per_key_relist_seals_the_whole_queue() {
    let store = TestStore::with(&[cm("k", 1)]);
    let mut f = atomic(FifoMode::PerKey, &store);
    f.add(cm("a", 1), t(1)).unwrap();
    f.add(cm("x", 1), t(2)).unwrap();
    f.replace(vec![(cm("a", 2), t(3))], "9").unwrap();
    // After the relist: a new entry behind the group, even for a key in it.
    f.update(cm("a", 3), t(4)).unwrap();
    f.add(cm("z", 1), t(5)).unwrap();
    f.check_invariants();
    assert_eq!(f.len(), 5, "a counts twice: in the group and after it");
    assert_eq!(f.list_keys(), vec![key("a"), key("x"), key("k"), key("z")]);
    assert_eq!(
        describe_all(f.get_by_key("ns/a").unwrap()),
        s(&["Updated a@3"]),
        "the newest entry"
    );
    assert_eq!(
        describe_all(f.get_by_key("ns/x").unwrap()),
        s(&["Added x@1", "Deleted ~x@1"])
    );
    assert_eq!(
        pop_described(&mut f, 1),
        (
            Some("9".to_string()),
            vec![
                s(&["Added a@1", "Replaced a@2"]),
                s(&["Added x@1", "Deleted ~x@1"]),
                s(&["Deleted ~k@1"]),
            ]
        )
    );
    assert_eq!(
        pop_described(&mut f, 10),
        (None, vec![s(&["Updated a@3"]), s(&["Added z@1"])])
    );
}

#[test]
fn f9_atomic_back_to_back_relists_are_two_groups() {
    for mode in MODES {
        let store = TestStore::default();
        let mut f = atomic(mode, &store);
        f.replace(vec![(cm("a", 1), t(1))], "1").unwrap();
        f.replace(vec![(cm("a", 2), t(2)), (cm("b", 2), t(3))], "2")
            .unwrap();
        f.check_invariants();
        assert_eq!(
            describe_all(f.get_by_key("ns/a").unwrap()),
            s(&["Replaced a@2"]),
            "{mode:?}"
        );
        assert_eq!(
            pop_described(&mut f, 10),
            (Some("1".to_string()), vec![s(&["Replaced a@1"])]),
            "{mode:?}"
        );
        assert_eq!(
            pop_described(&mut f, 10),
            (
                Some("2".to_string()),
                vec![s(&["Replaced a@2"]), s(&["Replaced b@2"])]
            ),
            "{mode:?}"
        );
        assert!(f.pop().is_none());
    }
}

#[test]
fn f9_atomic_watch_delete_takes_the_group_tombstone_place() {
    for mode in MODES {
        let store = TestStore::with(&[cm("k", 1), cm("j", 1)]);
        let mut f = atomic(mode, &store);
        f.replace(vec![(cm("j", 1), t(1))], "3").unwrap();
        f.delete(cm("k", 2), t(2)).unwrap();
        f.add(cm("n", 1), t(3)).unwrap();
        f.check_invariants();
        assert_eq!(f.stats().deduped_deletes, 1, "{mode:?}");
        assert_eq!(
            pop_described(&mut f, 10),
            (
                Some("3".to_string()),
                vec![s(&["Replaced j@1"]), s(&["Deleted k@2"])]
            ),
            "{mode:?}: F2 inside the group, the group unchanged otherwise"
        );
        assert_eq!(pop_described(&mut f, 10), (None, vec![s(&["Added n@1"])]));
    }
}

#[test]
fn f9_atomic_in_order_tombstone_of_a_queued_delete_collapses_ahead_of_the_group() {
    let store = TestStore::with(&[cm("foo", 1), cm("bar", 1)]);
    let mut f = atomic(FifoMode::InOrder, &store);
    f.delete(cm("foo", 2), t(1)).unwrap();
    f.replace(vec![(cm("bar", 1), t(2))], "4").unwrap();
    assert_eq!(f.stats().deduped_deletes, 1);
    assert_eq!(
        pop_described(&mut f, 10),
        (None, vec![s(&["Deleted foo@2"])])
    );
    assert_eq!(
        pop_described(&mut f, 10),
        (Some("4".to_string()), vec![s(&["Replaced bar@1"])])
    );
}

#[test]
fn f9_atomic_store_jumps_from_before_to_after_the_relist() {
    // The consumer applies each batch at once: after the group it equals the list.
    for mode in MODES {
        let store = TestStore::with(&[cm("a", 1), cm("b", 1), cm("c", 1)]);
        let mut f = atomic(mode, &store);
        f.update(cm("a", 2), t(1)).unwrap();
        let list = vec![(cm("a", 3), t(2)), (cm("d", 1), t(3))];
        f.replace(list, "8").unwrap();
        f.add(cm("e", 1), t(4)).unwrap();
        let mut seen = Vec::new();
        while let Some(b) = f.pop_batch(1) {
            for item in &b.items {
                store.apply(item);
            }
            seen.push((b.replace_all.clone(), store.contents()));
            f.done(b.token, 0);
        }
        let after_relist: BTreeMap<String, String> = [("ns/a", "a@3"), ("ns/d", "d@1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let group = seen
            .iter()
            .find(|(rv, _)| rv.as_deref() == Some("8"))
            .expect("the relist popped as a group");
        assert_eq!(group.1, after_relist, "{mode:?}");
        assert_eq!(seen.iter().filter(|(rv, _)| rv.is_some()).count(), 1);
        assert_eq!(seen.last().unwrap().1.len(), 3, "{mode:?}: plus e");
    }
}

#[test]
fn f9_atomic_initial_list_syncs_when_its_group_is_acknowledged() {
    for mode in MODES {
        let store = TestStore::default();
        let mut f = atomic(mode, &store);
        let sum = f
            .replace(vec![(cm("a", 1), t(1)), (cm("b", 1), t(2))], "1")
            .unwrap();
        assert_eq!(sum.initial_population, Some(2));
        f.add(cm("c", 1), t(3)).unwrap();
        let b = f.pop().unwrap();
        assert!(b.is_replace_all());
        assert_eq!((b.token.len(), b.token.initial_items()), (2, 2));
        assert!(!f.has_synced(), "{mode:?}: popped, not acknowledged");
        f.done(b.token, 0);
        assert!(f.has_synced(), "{mode:?}");
        assert!(!f.pop().unwrap().is_replace_all());
    }
}

#[test]
fn f9_atomic_empty_relist_queues_no_group() {
    for mode in MODES {
        let store = TestStore::default();
        let mut f = atomic(mode, &store);
        f.replace(vec![], "1").unwrap();
        f.check_invariants();
        assert!(f.pop().is_none());
        assert!(f.has_synced(), "{mode:?}");
    }
}

#[test]
fn f9_atomic_relist_racing_in_flight_add_tombstones_it() {
    for mode in MODES {
        let store = TestStore::default();
        let mut f = atomic(mode, &store);
        f.add(cm("foo", 1), t(1)).unwrap();
        let b = f.pop().unwrap();
        f.replace(vec![(cm("bar", 1), t(2))], "2").unwrap();
        store.apply(&b.items[0]);
        f.done(b.token, 0);
        let (rv, items) = pop_described(&mut f, 10);
        assert_eq!(rv.as_deref(), Some("2"));
        assert_eq!(items, vec![s(&["Replaced bar@1"]), s(&["Deleted ~foo@1"])]);
        assert!(f.in_flight.is_empty());
    }
}

#[test]
fn f9_atomic_relist_with_sync_deltas_and_resync_stays_per_key() {
    for mode in MODES {
        let store = TestStore::with(&[cm("a", 1), cm("b", 1)]);
        let mut f = DeltaFifo::new(
            DeltaFifoOptions::default()
                .with_mode(mode)
                .with_atomic_replace(true)
                .with_emit_delta_type_replaced(false)
                .with_known_objects(Arc::new(store.clone())),
        );
        f.replace(vec![(cm("a", 2), t(1))], "5").unwrap();
        assert_eq!(
            pop_described(&mut f, 10),
            (
                Some("5".to_string()),
                vec![s(&["Sync a@2"]), s(&["Deleted ~b@1"])]
            )
        );
        // Resync is not atomic: one entry per key, popped in ordinary batches.
        assert_eq!(f.resync().unwrap(), 2);
        assert_eq!(
            pop_described(&mut f, 1),
            (None, vec![s(&["Sync a@1"])]),
            "{mode:?}"
        );
    }
}

#[test]
fn f9_atomic_group_drains_after_close() {
    for mode in MODES {
        let store = TestStore::default();
        let mut f = atomic(mode, &store);
        f.replace(vec![(cm("a", 1), t(1)), (cm("b", 1), t(2))], "1")
            .unwrap();
        assert_eq!(f.close(), 2);
        let (rv, items) = pop_described(&mut f, 1);
        assert_eq!((rv.as_deref(), items.len()), (Some("1"), 2), "{mode:?}");
    }
}
