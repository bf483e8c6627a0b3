//! Tests of the coalescing buffer, named after docs/semantics.md B3's rules, and property tests against
//! a model handler.

use std::{collections::HashMap, sync::Arc};

use proptest::prelude::*;

use super::*;
use crate::DeletedFinalStateUnknown;

type Obj = Arc<u32>;

fn key(name: &str) -> ObjectKey {
    ObjectKey::new(Some("ns"), name)
}

fn obj(v: u32) -> Obj {
    Arc::new(v)
}

fn add(o: &Obj, initial: bool) -> Notification<u32> {
    Notification::Add {
        obj: Arc::clone(o),
        is_in_initial_list: initial,
    }
}

fn update(old: &Obj, new: &Obj) -> Notification<u32> {
    Notification::Update {
        old: Arc::clone(old),
        new: Arc::clone(new),
    }
}

fn delete(o: &Obj) -> Notification<u32> {
    Notification::Delete {
        obj: DeltaObject::Object(Arc::clone(o)),
    }
}

fn tombstone(name: &str, o: &Obj) -> Notification<u32> {
    Notification::Delete {
        obj: DeltaObject::Tombstone(DeletedFinalStateUnknown {
            key: key(name),
            obj: Arc::clone(o),
        }),
    }
}

fn drain(c: &mut Coalescer<u32>) -> Vec<(ObjectKey, Notification<u32>, TraceId)> {
    std::iter::from_fn(|| c.pop()).collect()
}

/// A compact rendering for assertions: `A3`, `A3i` (initial), `U1>2`, `D2`, `T2` (tombstone).
fn show(n: &Notification<u32>) -> String {
    match n {
        Notification::Add {
            obj,
            is_in_initial_list,
        } => format!("A{obj}{}", if *is_in_initial_list { "i" } else { "" }),
        Notification::Update { old, new } => format!("U{old}>{new}"),
        Notification::Delete { obj } if obj.is_tombstone() => format!("T{}", obj.object()),
        Notification::Delete { obj } => format!("D{}", obj.object()),
    }
}

fn shown(c: &mut Coalescer<u32>) -> Vec<String> {
    drain(c).iter().map(|(_, n, _)| show(n)).collect()
}

#[test]
fn b3_add_then_update_is_add_of_newest_object() {
    let (v1, v2, v3) = (obj(1), obj(2), obj(3));
    let mut c = Coalescer::new();
    c.push(key("a"), add(&v1, false), TraceId(1));
    c.push(key("a"), update(&v1, &v2), TraceId(2));
    c.push(key("a"), update(&v2, &v3), TraceId(3));
    assert_eq!(c.len(), 1);
    let (_, n, _) = c.pop().unwrap();
    assert!(Arc::ptr_eq(n.object(), &v3), "newest object, no copy");
    assert_eq!(show(&n), "A3");
}

#[test]
fn b3_add_then_update_keeps_is_in_initial_list_of_the_add() {
    let (v1, v2) = (obj(1), obj(2));
    let mut c = Coalescer::new();
    c.push(key("a"), add(&v1, true), TraceId(1));
    c.push(key("a"), update(&v1, &v2), TraceId(2));
    assert_eq!(shown(&mut c), ["A2i"]);
}

#[test]
fn b3_update_then_update_keeps_oldest_old_and_newest_new() {
    let (v1, v2, v3) = (obj(1), obj(2), obj(3));
    let mut c = Coalescer::new();
    c.push(key("a"), update(&v1, &v2), TraceId(1));
    c.push(key("a"), update(&v2, &v3), TraceId(2));
    let (_, n, _) = c.pop().unwrap();
    match n {
        Notification::Update { old, new } => {
            assert!(Arc::ptr_eq(&old, &v1));
            assert!(Arc::ptr_eq(&new, &v3));
        }
        other => panic!("expected update, got {other:?}"),
    }
}

#[test]
fn b3_resync_updates_merge_like_updates() {
    let (v1, v2) = (obj(1), obj(2));
    let mut c = Coalescer::new();
    // resync, then a real change, then another resync of the new object
    c.push(key("a"), update(&v1, &v1), TraceId(1));
    c.push(key("a"), update(&v1, &v2), TraceId(2));
    c.push(key("a"), update(&v2, &v2), TraceId(3));
    let (_, n, trace) = c.pop().unwrap();
    assert_eq!(show(&n), "U1>2");
    assert!(!n.is_resync());
    assert_eq!(trace, TraceId(3));
    // Two resyncs of the same object stay a resync.
    c.push(key("b"), update(&v1, &v1), TraceId(4));
    c.push(key("b"), update(&v1, &v1), TraceId(5));
    assert!(c.pop().unwrap().1.is_resync());
}

#[test]
fn b3_add_then_delete_cancels() {
    let v1 = obj(1);
    let mut c = Coalescer::new();
    c.push(key("a"), add(&v1, false), TraceId(1));
    c.push(key("a"), delete(&v1), TraceId(2));
    assert!(c.is_empty());
    assert_eq!(c.keys(), 0);
    assert!(c.pop().is_none());
    assert_eq!(c.stats().cancelled, 1);
}

#[test]
fn b3_add_update_then_delete_cancels() {
    let (v1, v2) = (obj(1), obj(2));
    let mut c = Coalescer::new();
    c.push(key("a"), add(&v1, false), TraceId(1));
    c.push(key("a"), update(&v1, &v2), TraceId(2));
    c.push(key("a"), delete(&v2), TraceId(3));
    assert!(c.is_empty());
}

#[test]
fn b3_update_then_delete_is_delete() {
    let (v1, v2) = (obj(1), obj(2));
    let mut c = Coalescer::new();
    c.push(key("a"), update(&v1, &v2), TraceId(1));
    c.push(key("a"), delete(&v2), TraceId(2));
    assert_eq!(shown(&mut c), ["D2"]);
}

#[test]
fn b3_update_then_tombstone_delete_keeps_the_tombstone() {
    let (v1, v2) = (obj(1), obj(2));
    let mut c = Coalescer::new();
    c.push(key("a"), update(&v1, &v2), TraceId(1));
    c.push(key("a"), tombstone("a", &v2), TraceId(2));
    assert_eq!(shown(&mut c), ["T2"]);
}

#[test]
fn b3_delete_then_add_keeps_both_in_order() {
    let (v1, v2) = (obj(1), obj(2));
    let mut c = Coalescer::new();
    c.push(key("a"), delete(&v1), TraceId(1));
    c.push(key("a"), add(&v2, false), TraceId(2));
    assert_eq!(c.len(), 2);
    assert_eq!(c.keys(), 1);
    let popped = drain(&mut c);
    let got: Vec<_> = popped.iter().map(|(_, n, t)| (show(n), *t)).collect();
    assert_eq!(got, [("D1".into(), TraceId(1)), ("A2".into(), TraceId(2))]);
}

#[test]
fn b3_delete_add_update_is_delete_then_add_of_newest() {
    let (v1, v2, v3) = (obj(1), obj(2), obj(3));
    let mut c = Coalescer::new();
    c.push(key("a"), delete(&v1), TraceId(1));
    c.push(key("a"), add(&v2, false), TraceId(2));
    c.push(key("a"), update(&v2, &v3), TraceId(3));
    assert_eq!(c.len(), 2);
    assert_eq!(shown(&mut c), ["D1", "A3"]);
}

#[test]
fn b3_delete_add_delete_is_the_first_delete_with_newest_trace() {
    let (v1, v2) = (obj(1), obj(2));
    let mut c = Coalescer::new();
    c.push(key("a"), delete(&v1), TraceId(1));
    c.push(key("a"), add(&v2, false), TraceId(2));
    c.push(key("a"), delete(&v2), TraceId(3));
    let popped = drain(&mut c);
    assert_eq!(popped.len(), 1);
    assert_eq!(show(&popped[0].1), "D1", "the object the handler knew");
    assert_eq!(popped[0].2, TraceId(3));
}

#[test]
fn b3_merge_keeps_the_newest_trace() {
    let (v1, v2, v3) = (obj(1), obj(2), obj(3));
    let mut c = Coalescer::new();
    c.push(key("a"), add(&v1, false), TraceId(10));
    c.push(key("a"), update(&v1, &v2), TraceId(11));
    c.push(key("b"), update(&v1, &v2), TraceId(20));
    c.push(key("b"), update(&v2, &v3), TraceId(21));
    c.push(key("c"), update(&v1, &v2), TraceId(30));
    c.push(key("c"), delete(&v2), TraceId(31));
    let traces: Vec<_> = drain(&mut c).into_iter().map(|(_, _, t)| t).collect();
    assert_eq!(traces, [TraceId(11), TraceId(21), TraceId(31)]);
}

#[test]
fn b3_keys_pop_in_order_of_first_arrival() {
    let (v1, v2) = (obj(1), obj(2));
    let mut c = Coalescer::new();
    c.push(key("a"), update(&v1, &v2), TraceId(1));
    c.push(key("b"), update(&v1, &v2), TraceId(2));
    c.push(key("c"), update(&v1, &v2), TraceId(3));
    // A later notification for "a" does not move it back.
    c.push(key("a"), update(&v2, &v1), TraceId(4));
    let keys: Vec<_> = drain(&mut c).into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(keys, [key("a"), key("b"), key("c")]);
}

#[test]
fn b3_delete_then_add_keeps_its_place_for_the_add() {
    let (v1, v2) = (obj(1), obj(2));
    let mut c = Coalescer::new();
    c.push(key("a"), delete(&v1), TraceId(1));
    c.push(key("b"), update(&v1, &v2), TraceId(2));
    c.push(key("a"), add(&v2, false), TraceId(3));
    let got: Vec<_> = drain(&mut c)
        .into_iter()
        .map(|(k, n, _)| format!("{k}:{}", show(&n)))
        .collect();
    assert_eq!(got, ["ns/a:D1", "ns/a:A2", "ns/b:U1>2"]);
}

#[test]
fn b3_a_cancelled_key_that_returns_queues_at_the_back() {
    let (v1, v2) = (obj(1), obj(2));
    let mut c = Coalescer::new();
    c.push(key("a"), add(&v1, false), TraceId(1));
    c.push(key("b"), update(&v1, &v2), TraceId(2));
    c.push(key("a"), delete(&v1), TraceId(3));
    c.push(key("a"), add(&v2, false), TraceId(4));
    let keys: Vec<_> = drain(&mut c).into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(keys, [key("b"), key("a")]);
}

#[test]
fn b3_memory_is_bounded_by_keys_under_churn() {
    let v = obj(1);
    let mut c = Coalescer::new();
    for i in 0..10_000u64 {
        c.push(key("a"), add(&v, false), TraceId(2 * i));
        c.push(key("a"), delete(&v), TraceId(2 * i + 1));
    }
    assert!(c.is_empty());
    assert_eq!(c.order.len(), 0, "no stale order entries");
    for i in 0..1_000u64 {
        c.push(key("k"), update(&v, &v), TraceId(i));
    }
    assert_eq!((c.len(), c.keys(), c.order.len()), (1, 1, 1));
}

#[test]
fn b3_ill_formed_sequences_are_handled_within_the_bound() {
    let (v1, v2, v3) = (obj(1), obj(2), obj(3));
    let cases: Vec<(Vec<Notification<u32>>, Vec<&str>)> = vec![
        // add+add merges like add+update (keeps the first add's initial flag)
        (vec![add(&v1, true), add(&v2, false)], vec!["A2i"]),
        // update+add merges like update+update
        (vec![update(&v1, &v2), add(&v3, false)], vec!["U1>3"]),
        // delete+update becomes delete+add
        (vec![delete(&v1), update(&v1, &v2)], vec!["D1", "A2"]),
        // delete+delete keeps one delete, a real object over a tombstone (F2)
        (vec![delete(&v1), delete(&v2)], vec!["D1"]),
        (vec![tombstone("a", &v1), delete(&v2)], vec!["D2"]),
        (vec![delete(&v1), tombstone("a", &v2)], vec!["D1"]),
        // delete, add, add
        (
            vec![delete(&v1), add(&v2, false), add(&v3, false)],
            vec!["D1", "A3"],
        ),
    ];
    for (pushes, want) in cases {
        let mut c = Coalescer::new();
        for (i, n) in pushes.into_iter().enumerate() {
            c.push(key("a"), n, TraceId(i as u64 + 1));
            assert!(c.len() <= 2);
        }
        assert_eq!(shown(&mut c), want);
    }
}

#[test]
fn b3_stats_count_pushes_merges_cancels_and_pops() {
    let (v1, v2) = (obj(1), obj(2));
    let mut c = Coalescer::new();
    c.push(key("a"), add(&v1, false), TraceId(1)); // queued
    c.push(key("a"), update(&v1, &v2), TraceId(2)); // merged
    c.push(key("b"), add(&v1, false), TraceId(3)); // queued
    c.push(key("b"), delete(&v1), TraceId(4)); // cancelled
    c.push(key("c"), delete(&v1), TraceId(5)); // queued
    c.push(key("c"), add(&v2, false), TraceId(6)); // queued (second)
    c.pop();
    assert_eq!(
        c.stats(),
        CoalesceStats {
            pushed: 6,
            merged: 1,
            cancelled: 1,
            popped: 1
        }
    );
    let s = c.stats();
    assert_eq!(
        c.len() as u64,
        s.pushed - s.merged - 2 * s.cancelled - s.popped
    );
}

// ---------------------------------------------------------------- property tests

/// One step of a generated scenario: a change to one of a few keys, or a pop by the handler.
#[derive(Debug, Clone)]
enum Step {
    /// Create (if absent) or modify (if present) key `k`.
    Change(usize, bool),
    /// Resync key `k` if present (else create it).
    Resync(usize),
    /// Delete key `k` if present (as a tombstone when the flag is set), else create it.
    Remove(usize, bool),
    /// The handler pops one notification.
    Pop,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..4usize, any::<bool>()).prop_map(|(k, i)| Step::Change(k, i)),
        1 => (0..4usize).prop_map(Step::Resync),
        3 => (0..4usize, any::<bool>()).prop_map(|(k, t)| Step::Remove(k, t)),
        3 => Just(Step::Pop),
    ]
}

/// The handler side: applies popped notifications, checking that each is valid against what
/// it has seen so far, and that a key's notifications arrive in push order.
#[derive(Default)]
struct Handler {
    state: HashMap<ObjectKey, Obj>,
    last_trace: HashMap<ObjectKey, TraceId>,
}

impl Handler {
    fn apply(
        &mut self,
        raw_initial: &HashMap<ObjectKey, bool>,
        (key, n, trace): (ObjectKey, Notification<u32>, TraceId),
    ) -> Result<(), TestCaseError> {
        if let Some(prev) = self.last_trace.insert(key.clone(), trace) {
            prop_assert!(prev < trace, "per-key order kept: {prev:?} then {trace:?}");
        }
        match n {
            Notification::Add {
                obj,
                is_in_initial_list,
            } => {
                prop_assert!(!self.state.contains_key(&key), "add of a known object");
                prop_assert_eq!(Some(&is_in_initial_list), raw_initial.get(&key));
                self.state.insert(key, obj);
            }
            Notification::Update { old, new } => {
                let known = self.state.get(&key);
                prop_assert!(
                    known.is_some_and(|k| Arc::ptr_eq(k, &old)),
                    "update's old is what the handler last saw"
                );
                self.state.insert(key, new);
            }
            Notification::Delete { .. } => {
                prop_assert!(
                    self.state.remove(&key).is_some(),
                    "delete of an unknown object"
                );
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// B3 against a model: for well-formed notification sequences (as an informer produces),
    /// a handler that applies the coalesced output ends in the same state as one applying the
    /// raw sequence, never sees an invalid transition, sees each key's survivors in push order,
    /// and the buffer holds at most two notifications per key.
    #[test]
    fn b3_coalesced_output_reaches_the_same_state_as_the_raw_sequence(
        steps in prop::collection::vec(step(), 0..80),
    ) {
        let mut c = Coalescer::new();
        let mut raw: HashMap<ObjectKey, Obj> = HashMap::new();
        // is_in_initial_list of each key's latest raw Add.
        let mut raw_initial: HashMap<ObjectKey, bool> = HashMap::new();
        let mut handler = Handler::default();
        let mut next = 0u32;
        let mut trace = 0u64;
        for s in steps {
            let k = match &s {
                Step::Change(k, _) | Step::Resync(k) | Step::Remove(k, _) => key(&format!("k{k}")),
                Step::Pop => {
                    if let Some(item) = c.pop() {
                        handler.apply(&raw_initial, item)?;
                    }
                    continue;
                }
            };
            next += 1;
            trace += 1;
            let fresh = obj(next);
            let n = match (raw.get(&k).cloned(), s) {
                (None, Step::Change(_, initial)) | (None, Step::Remove(_, initial)) => {
                    raw_initial.insert(k.clone(), initial);
                    raw.insert(k.clone(), Arc::clone(&fresh));
                    add(&fresh, initial)
                }
                (None, _) => {
                    raw_initial.insert(k.clone(), false);
                    raw.insert(k.clone(), Arc::clone(&fresh));
                    add(&fresh, false)
                }
                (Some(cur), Step::Change(..)) => {
                    raw.insert(k.clone(), Arc::clone(&fresh));
                    update(&cur, &fresh)
                }
                (Some(cur), Step::Resync(_)) => update(&cur, &cur),
                (Some(cur), remove) => {
                    raw.remove(&k);
                    if matches!(remove, Step::Remove(_, true)) {
                        tombstone(k.name(), &cur)
                    } else {
                        delete(&cur)
                    }
                }
            };
            c.push(k, n, TraceId(trace));
            prop_assert!(c.len() <= 2 * c.keys());
            let st = c.stats();
            prop_assert_eq!(c.len() as u64, st.pushed - st.merged - 2 * st.cancelled - st.popped);
        }
        while let Some(item) = c.pop() {
            handler.apply(&raw_initial, item)?;
        }
        prop_assert!(c.is_empty() && c.keys() == 0);
        prop_assert_eq!(handler.state.len(), raw.len());
        for (k, v) in &raw {
            prop_assert!(handler.state.get(k).is_some_and(|h| Arc::ptr_eq(h, v)), "final state of {k}");
        }
    }

    /// Arbitrary (also ill-formed) sequences: never panics, at most two notifications per key,
    /// and two only as Delete then Add; pops drain exactly `len()`.
    #[test]
    fn b3_any_sequence_stays_bounded(
        pushes in prop::collection::vec((0..3usize, 0..4u8, any::<bool>()), 0..60),
    ) {
        let mut c = Coalescer::new();
        let (v1, v2) = (obj(1), obj(2));
        for (i, (k, kind, flag)) in pushes.into_iter().enumerate() {
            let n = match kind {
                0 => add(&v1, flag),
                1 => update(&v1, &v2),
                2 => update(&v2, &v2),
                _ if flag => tombstone("x", &v1),
                _ => delete(&v2),
            };
            c.push(key(&format!("k{k}")), n, TraceId(i as u64));
            prop_assert!(c.len() <= 2 * c.keys());
            for e in c.entries.values() {
                if let Some(second) = &e.second {
                    let shape_ok = matches!(e.first.notification, Notification::Delete { .. })
                        && matches!(second.notification, Notification::Add { .. });
                    prop_assert!(shape_ok, "two pending only as Delete, Add");
                }
            }
        }
        let len = c.len();
        prop_assert_eq!(drain(&mut c).len(), len);
    }
}
