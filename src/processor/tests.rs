//! Deterministic tests of the processor machine, named after the ids of `docs/semantics.md`.
//! Time is a fake clock: a base `Instant` plus offsets.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;

use super::*;
use crate::{DeletedFinalStateUnknown, Delta, DeltaObject, key::default_key_func, store::Indexers};

/// The object the pipeline carries: a typed pod, as the typed mode hands it over.
pub(super) type Obj = LazyObject<Pod>;

pub(super) fn pod(name: &str, rv: Option<&str>) -> Arc<Obj> {
    let mut p = Pod::default();
    p.metadata.namespace = Some("ns".into());
    p.metadata.name = Some(name.into());
    p.metadata.resource_version = rv.map(str::to_string);
    Arc::new(LazyObject::from_object(Arc::new(p)))
}

pub(super) fn key(name: &str) -> ObjectKey {
    ObjectKey::new(Some("ns"), name)
}

pub(super) fn deltas(name: &str, ds: Vec<(DeltaType, Arc<Obj>)>) -> Deltas<Obj> {
    Deltas {
        key: key(name),
        deltas: ds
            .into_iter()
            .enumerate()
            .map(|(i, (t, o))| Delta::new(t, o, TraceId(i as u64 + 1)))
            .collect(),
    }
}

pub(super) fn processor(default: Option<Duration>) -> Processor<Pod> {
    Processor::new(Store::new(default_key_func(), Indexers::new()), default)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

/// The notifications listener `id` got, as short strings ("add(a,init)", "update(a)",
/// "sync(a)", "delete(a)", "delete(a,tombstone)").
fn seen(d: &Dispatch<Obj>, id: u64) -> Vec<String> {
    d.per_listener
        .iter()
        .find(|(l, _)| *l == id)
        .map(|(_, items)| items.iter().map(describe).collect())
        .unwrap_or_default()
}

fn describe(d: &Delivery<Obj>) -> String {
    let name = d.key.name().to_string();
    match &d.notification {
        Notification::Add {
            is_in_initial_list: true,
            ..
        } => format!("add({name},init)"),
        Notification::Add { .. } => format!("add({name})"),
        Notification::Update { .. } => format!("update({name})"),
        Notification::Delete { obj } if obj.is_tombstone() => format!("delete({name},tombstone)"),
        Notification::Delete { .. } => format!("delete({name})"),
    }
}

/// A started processor with one listener (id 1) that never resyncs.
fn started_with_one_listener() -> (Processor<Pod>, Instant) {
    let t0 = Instant::now();
    let mut p = processor(None);
    p.add_listener(1, ResyncPeriod::Never, t0);
    p.start(t0);
    (p, t0)
}

// ---------------------------------------------------------------- P1

#[test]
fn p1_upserts_add_when_absent_and_update_when_present_for_every_delta_type() {
    for t in [
        DeltaType::Sync,
        DeltaType::Replaced,
        DeltaType::Added,
        DeltaType::Updated,
    ] {
        // Listener 1 is syncing, so it also receives the Sync delta's update (P3).
        let t0 = Instant::now();
        let mut p = processor(Some(secs(1)));
        p.add_listener(1, ResyncPeriod::Default, t0);
        p.start(t0);
        assert!(p.handle_resync_check(t0 + secs(1)));
        let d = p.handle_deltas(vec![deltas("a", vec![(t, pod("a", Some("1")))])], false);
        assert_eq!(seen(&d, 1), ["add(a)"], "{t:?} on an absent key");
        let d = p.handle_deltas(vec![deltas("a", vec![(t, pod("a", Some("2")))])], false);
        assert_eq!(seen(&d, 1), ["update(a)"], "{t:?} on a present key");
        assert_eq!(
            p.store()
                .get_by_key("ns/a")
                .unwrap()
                .metadata
                .resource_version,
            Some("2".into()),
            "{t:?} stores the new object"
        );
    }
}

#[test]
fn p1_update_carries_the_old_and_the_new_object() {
    let (mut p, _) = started_with_one_listener();
    let (v1, v2) = (pod("a", Some("1")), pod("a", Some("2")));
    p.handle_deltas(
        vec![deltas("a", vec![(DeltaType::Added, v1.clone())])],
        false,
    );
    let d = p.handle_deltas(
        vec![deltas("a", vec![(DeltaType::Updated, v2.clone())])],
        false,
    );
    let Notification::Update { old, new } = &d.per_listener[0].1[0].notification else {
        panic!("not an update")
    };
    assert!(old.same_object(&v1) && Arc::ptr_eq(new, &v2));
}

#[test]
fn p1_adds_carry_the_batch_initial_list_flag_and_count_for_p5() {
    let (mut p, _) = started_with_one_listener();
    let d = p.handle_deltas(
        vec![deltas(
            "a",
            vec![(DeltaType::Replaced, pod("a", Some("1")))],
        )],
        true,
    );
    assert_eq!(seen(&d, 1), ["add(a,init)"]);
    assert!(d.per_listener[0].1[0].initial);
    let d = p.handle_deltas(
        vec![deltas("b", vec![(DeltaType::Added, pod("b", Some("1")))])],
        false,
    );
    assert_eq!(seen(&d, 1), ["add(b)"]);
    assert!(!d.per_listener[0].1[0].initial);
}

/// The isSync rule (client-go's OnUpdate): for every delta type, a sync when old and new share a
/// non-empty resourceVersion (or are the very same object, a resync); never when both RVs are
/// empty or missing on different objects (deliberate difference, R4). A Sync delta of a changed
/// object (a relist queued as Sync) is a real update.
#[test]
fn p1_is_sync_rule_per_delta_type() {
    use DeltaType::*;
    let cases: &[(DeltaType, Option<&str>, Option<&str>, bool)] = &[
        (Sync, Some("1"), Some("1"), true),
        (Sync, Some("1"), Some("2"), false),
        (Sync, None, None, false),
        (Replaced, Some("1"), Some("1"), true),
        (Added, Some("1"), Some("1"), true),
        (Updated, Some("1"), Some("1"), true),
        (Replaced, Some("1"), Some("2"), false),
        (Added, Some("1"), Some("2"), false),
        (Updated, Some("1"), Some("2"), false),
        (Updated, None, None, false),
        (Replaced, Some(""), Some(""), false),
        (Updated, Some(""), Some(""), false),
        (Replaced, None, Some("1"), false),
    ];
    for &(t, old_rv, new_rv, is_sync) in cases {
        let (mut p, _) = started_with_one_listener();
        p.handle_deltas(vec![deltas("a", vec![(Added, pod("a", old_rv))])], false);
        let d = p.handle_deltas(vec![deltas("a", vec![(t, pod("a", new_rv))])], false);
        assert_eq!(
            d.syncs,
            usize::from(is_sync),
            "{t:?} {old_rv:?}->{new_rv:?}"
        );
        // P3: listener 1 is not syncing, so it gets the update only when it is not a sync.
        let expected: &[&str] = if is_sync { &[] } else { &["update(a)"] };
        assert_eq!(seen(&d, 1), expected, "{t:?} {old_rv:?}->{new_rv:?}");
        assert_eq!(
            p.store()
                .get_by_key("ns/a")
                .unwrap()
                .metadata
                .resource_version,
            new_rv.map(str::to_string),
            "a sync still stores the object"
        );
    }
}

#[test]
fn p1_deleted_removes_and_notifies_the_object_or_the_tombstone() {
    let (mut p, _) = started_with_one_listener();
    p.handle_deltas(
        vec![
            deltas("a", vec![(DeltaType::Added, pod("a", Some("1")))]),
            deltas("b", vec![(DeltaType::Added, pod("b", Some("1")))]),
        ],
        false,
    );
    let d = p.handle_deltas(
        vec![deltas("a", vec![(DeltaType::Deleted, pod("a", Some("2")))])],
        false,
    );
    assert_eq!(seen(&d, 1), ["delete(a)"]);
    let tomb = Deltas {
        key: key("b"),
        deltas: vec![Delta {
            delta_type: DeltaType::Deleted,
            object: DeltaObject::Tombstone(DeletedFinalStateUnknown {
                key: key("b"),
                obj: pod("b", Some("1")),
            }),
            trace: TraceId(9),
        }],
    };
    let d = p.handle_deltas(vec![tomb], false);
    assert_eq!(seen(&d, 1), ["delete(b,tombstone)"]);
    assert!(p.store().is_empty());
    // client-go notifies a delete even for a key the store did not hold.
    let d = p.handle_deltas(
        vec![deltas("c", vec![(DeltaType::Deleted, pod("c", Some("1")))])],
        false,
    );
    assert_eq!(seen(&d, 1), ["delete(c)"]);
}

/// K2 (issue 31): an object that left the shard leaves the store and no listener is told.
#[test]
fn k2_left_shard_removes_without_a_notification() {
    let (mut p, _) = started_with_one_listener();
    p.handle_deltas(
        vec![
            deltas("a", vec![(DeltaType::Added, pod("a", Some("1")))]),
            deltas("b", vec![(DeltaType::Added, pod("b", Some("1")))]),
        ],
        false,
    );
    let d = p.handle_deltas(
        vec![deltas(
            "a",
            vec![
                (DeltaType::Updated, pod("a", Some("2"))),
                (DeltaType::LeftShard, pod("a", Some("2"))),
            ],
        )],
        false,
    );
    assert_eq!(
        seen(&d, 1),
        ["update(a)"],
        "the update before it is still told"
    );
    assert_eq!(p.store().len(), 1);
    assert!(p.store().get_by_key("ns/a").is_none(), "a is still cached");
    assert!(p.store().get_by_key("ns/b").is_some());
}

#[test]
fn p1_a_batch_is_one_publish_with_every_delta_in_order() {
    let (mut p, _) = started_with_one_listener();
    let lister = p.lister();
    let before = lister.version();
    let d = p.handle_deltas(
        vec![
            deltas(
                "a",
                vec![
                    (DeltaType::Added, pod("a", Some("1"))),
                    (DeltaType::Updated, pod("a", Some("2"))),
                    (DeltaType::Deleted, pod("a", Some("2"))),
                ],
            ),
            deltas("b", vec![(DeltaType::Replaced, pod("b", Some("5")))]),
        ],
        false,
    );
    assert_eq!(lister.version(), before + 1, "one publish per batch");
    assert_eq!(d.applied, 4);
    assert_eq!(seen(&d, 1), ["add(a)", "update(a)", "delete(a)", "add(b)"]);
    assert_eq!(lister.list_keys(), [key("b")]);
}

// ---------------------------------------------------------------- P3

#[test]
fn p3_non_sync_notifications_reach_every_listener_sync_only_the_due_ones() {
    let t0 = Instant::now();
    let mut p = processor(Some(secs(10)));
    p.add_listener(1, ResyncPeriod::Default, t0); // 10 s
    p.add_listener(2, ResyncPeriod::Never, t0);
    p.add_listener(3, ResyncPeriod::Every(secs(20)), t0);
    p.start(t0);
    p.handle_deltas(
        vec![deltas("a", vec![(DeltaType::Added, pod("a", Some("1")))])],
        false,
    );
    assert!(p.handle_resync_check(t0 + secs(10)), "listener 1 is due");
    assert!(p.is_syncing(1) && !p.is_syncing(2) && !p.is_syncing(3));
    let stored = p
        .store()
        .get_by_key("ns/a")
        .map(|o| Arc::new(LazyObject::from_object(o)))
        .unwrap();
    let d = p.handle_deltas(vec![deltas("a", vec![(DeltaType::Sync, stored)])], false);
    assert_eq!(seen(&d, 1), ["update(a)"]);
    assert!(seen(&d, 2).is_empty() && seen(&d, 3).is_empty());
    // A relist with the same RV is a sync too; a real change goes to everyone.
    let d = p.handle_deltas(
        vec![
            deltas("a", vec![(DeltaType::Replaced, pod("a", Some("1")))]),
            deltas("a", vec![(DeltaType::Updated, pod("a", Some("2")))]),
        ],
        false,
    );
    assert_eq!(seen(&d, 1), ["update(a)", "update(a)"]);
    assert_eq!(seen(&d, 2), ["update(a)"]);
    assert_eq!(seen(&d, 3), ["update(a)"]);
    // At 20 s both 1 and 3 are due; at the next check nobody.
    assert!(p.handle_resync_check(t0 + secs(20)));
    assert!(p.is_syncing(1) && !p.is_syncing(2) && p.is_syncing(3));
    assert!(!p.handle_resync_check(t0 + secs(21)));
    assert!(!p.is_syncing(1) && !p.is_syncing(3), "flags last one check");
}

#[test]
fn p3_new_listeners_are_not_syncing_before_a_check() {
    let (mut p, _) = started_with_one_listener();
    p.handle_deltas(
        vec![deltas("a", vec![(DeltaType::Added, pod("a", Some("1")))])],
        false,
    );
    let d = p.handle_deltas(
        vec![deltas(
            "a",
            vec![(DeltaType::Replaced, pod("a", Some("1")))],
        )],
        false,
    );
    assert!(
        d.per_listener.is_empty(),
        "an unchanged relist reaches nobody"
    );
}

// ---------------------------------------------------------------- P4

#[test]
fn p4_listener_added_after_start_gets_the_cache_as_initial_adds_then_only_later_changes() {
    let (mut p, t0) = started_with_one_listener();
    p.handle_deltas(
        vec![
            deltas("a", vec![(DeltaType::Added, pod("a", Some("1")))]),
            deltas("b", vec![(DeltaType::Added, pod("b", Some("1")))]),
        ],
        false,
    );
    let reg = p.add_listener(2, ResyncPeriod::Never, t0 + secs(1));
    let mut replay: Vec<String> = reg.replay.iter().map(describe).collect();
    replay.sort();
    assert_eq!(replay, ["add(a,init)", "add(b,init)"]);
    assert!(reg.replay.iter().all(|d| d.initial));
    let d = p.handle_deltas(
        vec![deltas("a", vec![(DeltaType::Updated, pod("a", Some("2")))])],
        false,
    );
    assert_eq!(seen(&d, 2), ["update(a)"], "no gap, no duplicate");
}

#[test]
fn p4_listener_added_before_start_gets_no_replay() {
    let t0 = Instant::now();
    let mut p = processor(None);
    p.store_mut()
        .add(pod("a", Some("1")).object().unwrap())
        .unwrap();
    assert!(p.add_listener(1, ResyncPeriod::Never, t0).replay.is_empty());
}

#[test]
fn p5_removed_listener_is_forgotten() {
    let (mut p, _) = started_with_one_listener();
    assert!(p.remove_listener(1));
    assert!(!p.remove_listener(1));
    let d = p.handle_deltas(
        vec![deltas("a", vec![(DeltaType::Added, pod("a", Some("1")))])],
        false,
    );
    assert!(d.per_listener.is_empty());
    assert!(p.listener_ids().is_empty());
}

// ---------------------------------------------------------------- P5

#[test]
fn p5_has_synced_needs_the_informer_and_every_initial_notification_handled() {
    let t = SyncTracker::new();
    assert!(!t.has_synced(false));
    t.start();
    t.start();
    assert!(!t.has_synced(true), "two outstanding");
    t.finished(true);
    assert!(!t.has_synced(true), "one outstanding");
    t.finished(true);
    assert!(!t.has_synced(false), "the informer has not synced");
    assert!(t.has_synced(true));
}

#[test]
fn p5_has_synced_is_sticky() {
    let t = SyncTracker::new();
    assert!(t.has_synced(true));
    t.start();
    assert!(t.has_synced(false), "sticky once true");
}

#[test]
fn p5_a_panicking_initial_notification_never_syncs() {
    let t = SyncTracker::new();
    t.start();
    t.start();
    t.finished(false);
    t.finished(true);
    assert_eq!(t.pending(), 0);
    assert!(t.failed());
    assert!(!t.has_synced(true), "kubernetes#129024");
}

fn add(name: &str, initial: bool) -> Delivery<Obj> {
    Delivery {
        key: key(name),
        notification: Notification::Add {
            obj: pod(name, Some("1")),
            is_in_initial_list: initial,
        },
        trace: TraceId::NONE,
        initial,
    }
}

fn del(name: &str) -> Delivery<Obj> {
    Delivery {
        key: key(name),
        notification: Notification::Delete {
            obj: DeltaObject::Object(pod(name, Some("2"))),
        },
        trace: TraceId::NONE,
        initial: false,
    }
}

fn upd(name: &str) -> Delivery<Obj> {
    Delivery {
        key: key(name),
        notification: Notification::Update {
            old: pod(name, Some("1")),
            new: pod(name, Some("2")),
        },
        trace: TraceId::NONE,
        initial: false,
    }
}

/// Drains `b` as a handler would, reporting each initial notification as handled.
fn handle_all(b: &mut ListenerBuffer<Obj>) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(d) = b.pop() {
        if d.initial {
            b.tracker().finished(true);
        }
        out.push(describe(&d));
    }
    out
}

#[test]
fn p5_queue_buffer_counts_each_initial_notification() {
    let t = Arc::new(SyncTracker::new());
    let mut b = ListenerBuffer::queue(Arc::clone(&t));
    b.push(add("a", true));
    b.push(add("b", true));
    b.push(del("a"));
    assert_eq!(t.pending(), 2);
    assert!(!t.has_synced(true));
    assert_eq!(
        handle_all(&mut b),
        ["add(a,init)", "add(b,init)", "delete(a)"]
    );
    assert!(t.has_synced(true));
}

#[test]
fn p5_coalesced_away_initial_add_does_not_hold_up_has_synced() {
    let t = Arc::new(SyncTracker::new());
    let mut b = ListenerBuffer::coalescing(Arc::clone(&t), 0);
    b.push(add("a", true));
    b.push(add("b", true));
    b.push(upd("b"));
    b.push(del("a")); // cancels the pending initial Add of a
    assert_eq!(t.pending(), 1);
    assert_eq!(handle_all(&mut b), ["add(b,init)"]);
    assert!(t.has_synced(true));
}

#[test]
fn p5_coalescing_delete_then_initial_add_counts_the_add_once() {
    let t = Arc::new(SyncTracker::new());
    let mut b = ListenerBuffer::coalescing(Arc::clone(&t), 0);
    b.push(del("a"));
    b.push(add("a", true));
    assert_eq!(t.pending(), 1);
    assert_eq!(handle_all(&mut b), ["delete(a)", "add(a,init)"]);
    assert_eq!(t.pending(), 0);
    assert!(t.has_synced(true));
}

#[test]
fn p5_cleared_buffer_never_syncs() {
    let t = Arc::new(SyncTracker::new());
    let mut b = ListenerBuffer::coalescing(Arc::clone(&t), 0);
    b.push(add("a", true));
    b.clear();
    assert!(b.is_empty());
    assert!(!t.has_synced(true));
}

/// An update of `name` from resourceVersion `from` to `to`.
fn upd_rv(name: &str, from: &str, to: &str) -> Delivery<Obj> {
    Delivery {
        key: key(name),
        notification: Notification::Update {
            old: pod(name, Some(from)),
            new: pod(name, Some(to)),
        },
        trace: TraceId::NONE,
        initial: false,
    }
}

/// Drains `b` as [`handle_all`] does, showing an update's resourceVersions (`update(a,1>2)`).
fn handle_all_rv(b: &mut ListenerBuffer<Obj>) -> Vec<String> {
    let rv = |p: &Obj| p.resource_version().unwrap_or_default().to_string();
    let mut out = Vec::new();
    while let Some(d) = b.pop() {
        if d.initial {
            b.tracker().finished(true);
        }
        out.push(match &d.notification {
            Notification::Update { old, new } => {
                format!("update({},{}>{})", d.key.name(), rv(old), rv(new))
            }
            _ => describe(&d),
        });
    }
    out
}

#[test]
fn b3_coalesce_buffer_is_a_queue_below_its_backlog() {
    let t = Arc::new(SyncTracker::new());
    let mut b = ListenerBuffer::coalescing(Arc::clone(&t), 3);
    // A handler that keeps up: every notification, none merged.
    for (from, to) in [("1", "2"), ("2", "3"), ("3", "4")] {
        b.push(upd_rv("a", from, to));
        assert!(!b.is_merging());
        assert_eq!(handle_all_rv(&mut b), [format!("update(a,{from}>{to})")]);
    }
    // A backlog of up to 3 waits unmerged, in order.
    b.push(add("b", true));
    b.push(upd_rv("b", "1", "2"));
    b.push(upd_rv("b", "2", "3"));
    assert!(!b.is_merging());
    assert_eq!(b.len(), 3);
    assert_eq!(
        handle_all_rv(&mut b),
        ["add(b,init)", "update(b,1>2)", "update(b,2>3)"]
    );
    assert_eq!(b.coalesced(), 0);
    assert!(t.has_synced(true));
}

#[test]
fn b3_coalesce_buffer_merges_from_the_backlog_until_drained() {
    let t = Arc::new(SyncTracker::new());
    let mut b = ListenerBuffer::coalescing(Arc::clone(&t), 2);
    b.push(add("a", true));
    b.push(upd_rv("a", "1", "2"));
    assert!(!b.is_merging());
    // The third push finds the backlog: what waits is folded, in order, with it.
    b.push(add("b", true));
    assert!(b.is_merging());
    assert_eq!(b.len(), 2);
    assert_eq!(b.coalesced(), 1);
    b.push(upd_rv("a", "2", "3"));
    b.push(del("b")); // cancels the pending initial Add of b (P5)
    assert_eq!(b.len(), 1);
    assert_eq!(b.coalesced(), 4);
    assert_eq!(t.pending(), 1);
    // Drained: a queue again, merging nothing below the backlog.
    assert_eq!(handle_all_rv(&mut b), ["add(a,init)"]);
    assert!(!b.is_merging());
    assert!(t.has_synced(true));
    b.push(upd_rv("a", "3", "4"));
    b.push(upd_rv("a", "4", "5"));
    assert!(!b.is_merging());
    assert_eq!(b.len(), 2);
    assert_eq!(handle_all_rv(&mut b), ["update(a,3>4)", "update(a,4>5)"]);
    assert_eq!(b.coalesced(), 4);
}

#[test]
fn b3_queue_buffer_never_merges() {
    let t = Arc::new(SyncTracker::new());
    let mut b = ListenerBuffer::queue(Arc::clone(&t));
    for i in 0..10 {
        b.push(upd_rv("a", &i.to_string(), &(i + 1).to_string()));
    }
    assert!(!b.is_merging());
    assert_eq!(b.len(), 10);
    assert_eq!(b.coalesced(), 0);
}

// ---------------------------------------------------------------- P6

struct Case {
    name: &'static str,
    /// The informer's default resync period.
    default: Option<Duration>,
    /// Periods asked for by listeners registered before start, then after.
    before: &'static [ResyncPeriod],
    after: &'static [ResyncPeriod],
    /// Effective periods, listeners in registration order.
    expect: &'static [Option<Duration>],
    expect_check: Option<Duration>,
}

#[test]
fn p6_resync_period_rules() {
    use ResyncPeriod::{Default, Every, Never};
    const S1: Duration = Duration::from_secs(1);
    const S5: Duration = Duration::from_secs(5);
    const S7: Duration = Duration::from_secs(7);
    const S10: Duration = Duration::from_secs(10);
    const S20: Duration = Duration::from_secs(20);
    const S30: Duration = Duration::from_secs(30);
    const MS100: Duration = Duration::from_millis(100);
    let cases = [
        Case {
            name: "default only",
            default: Some(S30),
            before: &[Default],
            after: &[],
            expect: &[Some(S30)],
            expect_check: Some(S30),
        },
        Case {
            name: "a handler without a period added after start gets the default",
            default: Some(S30),
            before: &[],
            after: &[Default],
            expect: &[Some(S30)],
            expect_check: Some(S30),
        },
        Case {
            name: "never",
            default: Some(S30),
            before: &[Never],
            after: &[Never],
            expect: &[None, None],
            expect_check: Some(S30),
        },
        Case {
            name: "zero is never",
            default: Some(S30),
            before: &[Every(Duration::ZERO)],
            after: &[Every(Duration::ZERO)],
            expect: &[None, None],
            expect_check: Some(S30),
        },
        Case {
            name: "below 1 s is raised to 1 s (and shrinks the check period before start)",
            default: Some(S30),
            before: &[Every(MS100)],
            after: &[],
            expect: &[Some(S1)],
            expect_check: Some(S1),
        },
        Case {
            name: "before start a smaller period shrinks the check period",
            default: Some(S30),
            before: &[Default, Every(S20), Every(S10)],
            after: &[],
            expect: &[Some(S30), Some(S20), Some(S10)],
            expect_check: Some(S10),
        },
        Case {
            name: "after start a smaller period is raised to the check period",
            default: Some(S30),
            before: &[],
            after: &[Every(S10), Every(MS100)],
            expect: &[Some(S30), Some(S30)],
            expect_check: Some(S30),
        },
        Case {
            name: "after a shrink before start, later periods are raised to the shrunk check",
            default: Some(S30),
            before: &[Every(S5)],
            after: &[Every(S1), Every(S7), Default],
            expect: &[Some(S5), Some(S5), Some(S7), Some(S30)],
            expect_check: Some(S5),
        },
        Case {
            name: "an informer created with resync 0 never resyncs, even handlers that ask",
            default: None,
            before: &[Every(S5), Default],
            after: &[Every(S5), Default],
            expect: &[None, None, None, None],
            expect_check: None,
        },
        Case {
            name: "an informer created with resync ZERO is the same",
            default: Some(Duration::ZERO),
            before: &[Every(S1)],
            after: &[],
            expect: &[None],
            expect_check: None,
        },
        Case {
            name: "a default below 1 s gives handlers 1 s",
            default: Some(MS100),
            before: &[Default],
            after: &[Default],
            expect: &[Some(S1), Some(S1)],
            expect_check: Some(MS100),
        },
    ];
    for c in cases {
        let t0 = Instant::now();
        let mut p = processor(c.default);
        let mut id = 0;
        for r in c.before {
            id += 1;
            p.add_listener(id, *r, t0);
        }
        p.start(t0);
        for r in c.after {
            id += 1;
            p.add_listener(id, *r, t0 + secs(1));
        }
        let got: Vec<_> = (1..=id).map(|i| p.resync_period(i)).collect();
        assert_eq!(got, c.expect, "{}", c.name);
        assert_eq!(p.check_period(), c.expect_check, "{}: check period", c.name);
        if c.expect.iter().all(Option::is_none) {
            assert_eq!(p.poll_timeout(), None, "{}: no check needed", c.name);
            assert!(!p.handle_resync_check(t0 + secs(3600)), "{}", c.name);
        }
    }
}

#[test]
fn p6_registration_reports_the_requested_and_the_used_period() {
    let t0 = Instant::now();
    let mut p = processor(Some(secs(30)));
    p.start(t0);
    let r = p.add_listener(1, ResyncPeriod::Every(secs(10)), t0);
    assert_eq!((r.requested, r.resync), (Some(secs(30)), Some(secs(30))));
    let mut p = processor(None);
    let r = p.add_listener(1, ResyncPeriod::Every(ms(10)), t0);
    assert_eq!((r.requested, r.resync), (Some(secs(1)), None));
}

#[test]
fn p6_first_resync_is_due_one_period_after_registration() {
    let t0 = Instant::now();
    let mut p = processor(Some(secs(10)));
    p.add_listener(1, ResyncPeriod::Default, t0);
    p.start(t0);
    assert_eq!(p.next_resync(1), Some(t0 + secs(10)));
    assert_eq!(p.poll_timeout(), Some(t0 + secs(10)));
    assert!(!p.handle_resync_check(t0 + secs(9)));
    assert!(p.handle_resync_check(t0 + secs(10)));
    assert_eq!(p.next_resync(1), Some(t0 + secs(20)));
}

#[test]
fn p6_no_check_before_start() {
    let t0 = Instant::now();
    let mut p = processor(Some(secs(1)));
    p.add_listener(1, ResyncPeriod::Default, t0);
    assert_eq!(p.poll_timeout(), None);
    p.start(t0);
    assert_eq!(p.poll_timeout(), Some(t0 + secs(1)));
}

/// A tiny deterministic generator for jitter (no dependency on a seeded RNG crate here).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

/// Re-arm from the due time: a 1 s handler resyncs exactly 10 times in 10 s when each check
/// runs up to 200 ms late (re-arming from `now` would lose one every few seconds).
#[test]
fn p6_rearms_from_the_due_time_ten_syncs_in_ten_seconds_with_late_checks() {
    for seed in 0..20 {
        let mut rng = Lcg(seed);
        let t0 = Instant::now();
        let mut p = processor(Some(secs(1)));
        p.add_listener(1, ResyncPeriod::Default, t0);
        p.start(t0);
        let mut syncs = 0;
        loop {
            let due = p.poll_timeout().expect("a check is scheduled");
            let now = due + ms(rng.next(200));
            if now > t0 + ms(10_500) {
                break;
            }
            if p.handle_resync_check(now) {
                syncs += 1;
            }
        }
        assert_eq!(syncs, 10, "seed {seed}");
    }
}

/// The same with checks at random times, more often than the period.
#[test]
fn p6_rearms_from_the_due_time_with_checks_at_jittered_times() {
    for seed in 0..20 {
        let mut rng = Lcg(seed);
        let t0 = Instant::now();
        let mut p = processor(Some(secs(1)));
        p.add_listener(1, ResyncPeriod::Default, t0);
        p.start(t0);
        let (mut now, mut syncs) = (t0, 0);
        while now <= t0 + ms(10_250) {
            if p.handle_resync_check(now) {
                syncs += 1;
            }
            now += ms(1 + rng.next(250));
        }
        assert_eq!(syncs, 10, "seed {seed}");
    }
}

#[test]
fn p6_a_late_check_syncs_once_and_keeps_the_schedule() {
    let t0 = Instant::now();
    let mut p = processor(Some(secs(1)));
    p.add_listener(1, ResyncPeriod::Default, t0);
    p.start(t0);
    assert!(p.handle_resync_check(t0 + ms(3500)), "due since 1 s");
    assert_eq!(
        p.next_resync(1),
        Some(t0 + secs(4)),
        "whole periods, no drift"
    );
    assert!(
        !p.handle_resync_check(t0 + ms(3900)),
        "at most one sync per check"
    );
    assert!(p.handle_resync_check(t0 + secs(4)));
}

#[test]
fn p6_checks_fall_on_the_check_period_grid_and_share_one_resync() {
    let t0 = Instant::now();
    let mut p = processor(Some(secs(10)));
    p.start(t0);
    // Added after start at 3 s and 7 s: due at 13 s and 17 s; both checked at the 20 s tick.
    p.add_listener(1, ResyncPeriod::Default, t0 + secs(3));
    p.add_listener(2, ResyncPeriod::Default, t0 + secs(7));
    assert_eq!(p.poll_timeout(), Some(t0 + secs(20)));
    assert!(p.handle_resync_check(t0 + secs(20)));
    assert!(
        p.is_syncing(1) && p.is_syncing(2),
        "one FIFO resync for both"
    );
    // Re-armed from their due times: 23 s and 27 s, both at the 30 s tick.
    assert_eq!(p.next_resync(1), Some(t0 + secs(23)));
    assert_eq!(p.next_resync(2), Some(t0 + secs(27)));
    assert_eq!(p.poll_timeout(), Some(t0 + secs(30)));
}

#[test]
fn p6_removing_the_only_resyncing_listener_stops_the_checks() {
    let t0 = Instant::now();
    let mut p = processor(Some(secs(1)));
    p.add_listener(1, ResyncPeriod::Default, t0);
    p.add_listener(2, ResyncPeriod::Never, t0);
    p.start(t0);
    assert!(p.poll_timeout().is_some());
    p.remove_listener(1);
    assert_eq!(p.poll_timeout(), None);
}

#[test]
fn p6_shrinking_before_start_recomputes_existing_listeners() {
    let t0 = Instant::now();
    // Check period 0 first (no default): a listener asking 5 s gets never…
    let mut p = processor(None);
    p.add_listener(1, ResyncPeriod::Every(secs(5)), t0);
    assert_eq!(p.resync_period(1), None);
    // …and with a default, a later shrink keeps larger periods and sets the check.
    let mut p = processor(Some(secs(30)));
    p.add_listener(1, ResyncPeriod::Every(secs(40)), t0);
    p.add_listener(2, ResyncPeriod::Every(secs(2)), t0 + secs(1));
    assert_eq!(p.check_period(), Some(secs(2)));
    assert_eq!(p.resync_period(1), Some(secs(40)));
    assert_eq!(p.next_resync(1), Some(t0 + secs(40)));
    assert_eq!(p.next_resync(2), Some(t0 + secs(3)));
}

#[test]
fn p6_determine_resync_period_is_client_gos() {
    assert_eq!(
        determine_resync_period(Duration::ZERO, secs(1)),
        Duration::ZERO
    );
    assert_eq!(
        determine_resync_period(secs(5), Duration::ZERO),
        Duration::ZERO
    );
    assert_eq!(determine_resync_period(secs(1), secs(5)), secs(5));
    assert_eq!(determine_resync_period(secs(9), secs(5)), secs(9));
}

/// A resync re-delivers the cached object itself: a sync even without a resourceVersion.
#[test]
fn p1_a_resync_of_an_object_without_rv_is_a_sync() {
    let (mut p, _) = started_with_one_listener();
    p.handle_deltas(
        vec![deltas("a", vec![(DeltaType::Added, pod("a", None))])],
        false,
    );
    let cached = p
        .store()
        .get_by_key("ns/a")
        .map(|o| Arc::new(LazyObject::from_object(o)))
        .expect("cached");
    let d = p.handle_deltas(vec![deltas("a", vec![(DeltaType::Sync, cached)])], false);
    assert_eq!(d.syncs, 1);
    assert!(
        seen(&d, 1).is_empty(),
        "P3: not delivered to a listener that is not syncing"
    );
}
