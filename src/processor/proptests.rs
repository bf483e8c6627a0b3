//! Property tests of the processor against a model: random batches of deltas over a few keys;
//! after every batch the store equals a `HashMap` model (P1), every listener received every
//! non-sync notification in order, and sync notifications reached only the syncing listener (P3).

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use proptest::prelude::*;

use super::tests::{Obj, key, pod, processor};
use super::*;
use crate::{DeletedFinalStateUnknown, Delta, DeltaObject};

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

#[derive(Debug, Clone)]
struct Op {
    name: usize,
    kind: u8,
    /// None: no resourceVersion; the values are few so that unchanged RVs happen often.
    rv: Option<u8>,
    tombstone: bool,
}

fn op() -> impl Strategy<Value = Op> {
    (
        0..NAMES.len(),
        0u8..5,
        proptest::option::of(0u8..3),
        any::<bool>(),
    )
        .prop_map(|(name, kind, rv, tombstone)| Op {
            name,
            kind,
            rv,
            tombstone,
        })
}

fn delta_type(kind: u8) -> DeltaType {
    match kind {
        0 => DeltaType::Added,
        1 => DeltaType::Updated,
        2 => DeltaType::Replaced,
        3 => DeltaType::Sync,
        _ => DeltaType::Deleted,
    }
}

/// What the model expects a listener to see: (kind, key, is_sync).
fn expect(
    model: &mut HashMap<&'static str, Arc<Obj>>,
    name: &'static str,
    t: DeltaType,
    obj: &Arc<Obj>,
) -> (&'static str, &'static str, bool) {
    if t == DeltaType::Deleted {
        model.remove(name);
        return ("delete", name, false);
    }
    match model.insert(name, Arc::clone(obj)) {
        Some(old) => {
            let rv_old = old.resource_version().unwrap_or("");
            let rv_new = obj.resource_version().unwrap_or("");
            let sync = !rv_old.is_empty() && rv_old == rv_new;
            ("update", name, sync)
        }
        None => ("add", name, false),
    }
}

fn kind(d: &Delivery<Obj>) -> &'static str {
    match d.notification {
        Notification::Add { .. } => "add",
        Notification::Update { .. } => "update",
        Notification::Delete { .. } => "delete",
    }
}

proptest! {
    #[test]
    fn p1_p3_store_matches_model_and_routing_is_exact(
        batches in proptest::collection::vec(proptest::collection::vec(op(), 1..8), 1..20),
        check_after in 0usize..20,
    ) {
        let t0 = Instant::now();
        let mut p = processor(Some(Duration::from_secs(1)));
        p.add_listener(1, ResyncPeriod::Default, t0); // resyncs: syncing after a check
        p.add_listener(2, ResyncPeriod::Never, t0);
        p.start(t0);
        let mut model: HashMap<&'static str, Arc<Obj>> = HashMap::new();
        for (i, ops) in batches.into_iter().enumerate() {
            if i == check_after {
                prop_assert!(p.handle_resync_check(t0 + Duration::from_secs(1)));
            }
            let syncing = p.is_syncing(1);
            let mut expected = Vec::new();
            let mut batch = Vec::new();
            for o in ops {
                let name = NAMES[o.name];
                let t = delta_type(o.kind);
                let rv = o.rv.map(|r| r.to_string());
                let obj = pod(name, rv.as_deref());
                expected.push(expect(&mut model, name, t, &obj));
                let object = if t == DeltaType::Deleted && o.tombstone {
                    DeltaObject::Tombstone(DeletedFinalStateUnknown { key: key(name), obj })
                } else {
                    DeltaObject::Object(obj)
                };
                batch.push(Deltas {
                    key: key(name),
                    deltas: vec![Delta { delta_type: t, object, trace: TraceId(i as u64) }],
                });
            }
            let d = p.handle_deltas(batch, false);
            for (id, gets_syncs) in [(1, syncing), (2, false)] {
                let want: Vec<(&str, &str)> = expected
                    .iter()
                    .filter(|(_, _, s)| !s || gets_syncs)
                    .map(|(k, n, _)| (*k, *n))
                    .collect();
                let got: Vec<(&str, &str)> = d
                    .per_listener
                    .iter()
                    .find(|(l, _)| *l == id)
                    .map(|(_, items)| {
                        items
                            .iter()
                            .map(|d| (kind(d), NAMES[NAMES.iter().position(|n| *n == d.key.name()).unwrap_or(0)]))
                            .collect()
                    })
                    .unwrap_or_default();
                prop_assert_eq!(got, want, "listener {}", id);
            }
            let mut stored: Vec<(String, Option<String>)> = p
                .lister()
                .list()
                .iter()
                .map(|o| (o.metadata.name.clone().unwrap_or_default(), o.metadata.resource_version.clone()))
                .collect();
            stored.sort();
            let mut want: Vec<(String, Option<String>)> = model
                .iter()
                .map(|(n, o)| (n.to_string(), o.resource_version().map(str::to_string)))
                .collect();
            want.sort();
            prop_assert_eq!(stored, want);
        }
    }
}

// ------------------------------------------------- B3, P5: the listener buffer against a model

mod buffer {
    use std::{
        collections::{HashMap, VecDeque},
        sync::{Arc, Weak},
    };

    use proptest::prelude::*;

    use crate::{
        DeletedFinalStateUnknown, DeltaObject, ObjectKey, TraceId,
        coalesce::Coalescer,
        notification::Notification,
        processor::{Delivery, ListenerBuffer, SyncTracker},
    };

    const KEYS: usize = 4;

    /// One step: a change to one of a few keys (as the processor produces them), or a pop by
    /// the handler.
    #[derive(Debug, Clone)]
    enum Step {
        /// Create key `k` (initial-list when the flag is set) or update it.
        Change(usize, bool),
        /// Resync key `k` if present (`old` and `new` the same object), else create it.
        Resync(usize),
        /// Delete key `k` if present (as a tombstone when the flag is set), else create it.
        Remove(usize, bool),
        /// The handler pops one notification.
        Pop,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0..KEYS, any::<bool>()).prop_map(|(k, i)| Step::Change(k, i)),
            1 => (0..KEYS).prop_map(Step::Resync),
            3 => (0..KEYS, any::<bool>()).prop_map(|(k, t)| Step::Remove(k, t)),
            5 => Just(Step::Pop),
        ]
    }

    fn key(k: usize) -> ObjectKey {
        ObjectKey::new(Some("ns"), &format!("k{k}"))
    }

    /// The handler: applies what it pops, checking each notification against what it saw.
    #[derive(Default)]
    struct Handler {
        state: HashMap<ObjectKey, Arc<u32>>,
        last_trace: HashMap<ObjectKey, TraceId>,
    }

    impl Handler {
        fn apply(&mut self, d: &Delivery<u32>, tracker: &SyncTracker) -> Result<(), TestCaseError> {
            if let Some(prev) = self.last_trace.insert(d.key.clone(), d.trace) {
                prop_assert!(
                    prev < d.trace,
                    "per-key order kept: {prev:?} then {:?}",
                    d.trace
                );
            }
            match &d.notification {
                Notification::Add {
                    obj,
                    is_in_initial_list,
                } => {
                    prop_assert!(!self.state.contains_key(&d.key), "add of a known object");
                    prop_assert_eq!(
                        d.initial,
                        *is_in_initial_list,
                        "P5: initial iff initial-list Add"
                    );
                    self.state.insert(d.key.clone(), Arc::clone(obj));
                }
                Notification::Update { old, new } => {
                    prop_assert!(!d.initial);
                    let known = self.state.get(&d.key);
                    prop_assert!(
                        known.is_some_and(|k| Arc::ptr_eq(k, old)),
                        "update's old is what the handler last saw"
                    );
                    self.state.insert(d.key.clone(), Arc::clone(new));
                }
                Notification::Delete { .. } => {
                    prop_assert!(!d.initial);
                    prop_assert!(
                        self.state.remove(&d.key).is_some(),
                        "delete of an unknown object"
                    );
                }
            }
            if d.initial {
                tracker.finished(true);
            }
            Ok(())
        }
    }

    fn show(d: &Delivery<u32>) -> (ObjectKey, String, TraceId, bool) {
        let n = match &d.notification {
            Notification::Add {
                obj,
                is_in_initial_list,
            } => format!("A{obj}{is_in_initial_list}"),
            Notification::Update { old, new } => format!("U{old}>{new}"),
            Notification::Delete { obj } => format!("D{}{}", obj.object(), obj.is_tombstone()),
        };
        (d.key.clone(), n, d.trace, d.initial)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// B3 and P5 for the `Coalesce` buffer with any backlog, against a model handler, for
        /// well-formed sequences of pushes and pops:
        /// - the handler never sees an invalid transition (add of a known object, update whose
        ///   `old` is not what it last saw, delete of an unknown one), sees each key's survivors
        ///   in push order, and once drained holds exactly the latest state of every key;
        /// - while not merging the buffer is a FIFO of at most `backlog` notifications, it starts
        ///   merging only at a push that finds `backlog` waiting and stops when drained; while
        ///   merging it holds at most two notifications per key;
        /// - no object is kept alive beyond what the semantics need: while merging, apart from
        ///   the handler's and the latest state, at most one object per key (a pending Delete's);
        ///   once drained, none;
        /// - the tracker ends exact (no initial Add lost or counted twice), and
        ///   `pushed = popped + len + coalesced` at every step;
        /// - with `backlog` 0 the output is exactly the [`Coalescer`]'s.
        #[test]
        fn b3_p5_coalescing_buffer_matches_the_model(
            backlog in 0usize..6,
            steps in prop::collection::vec(step(), 0..120),
        ) {
            let tracker = Arc::new(SyncTracker::new());
            let mut b: ListenerBuffer<u32> = ListenerBuffer::coalescing(Arc::clone(&tracker), backlog);
            let mut reference: Coalescer<u32> = Coalescer::new();
            let mut raw: HashMap<ObjectKey, Arc<u32>> = HashMap::new();
            let mut handler = Handler::default();
            let mut made: Vec<Weak<u32>> = Vec::new();
            // Pushes since the buffer was last empty, while it has not merged since then.
            let mut fifo: VecDeque<TraceId> = VecDeque::new();
            let mut merged_since_empty = false;
            let (mut pushed, mut popped, mut started) = (0u64, 0u64, 0i64);
            for (i, s) in steps.into_iter().enumerate() {
                let trace = TraceId(i as u64 + 1);
                let k = match s {
                    Step::Change(k, _) | Step::Resync(k) | Step::Remove(k, _) => key(k),
                    Step::Pop => {
                        let was_merging = b.is_merging();
                        let Some(d) = b.pop() else {
                            prop_assert!(reference.pop().is_none() || backlog > 0);
                            continue;
                        };
                        popped += 1;
                        if backlog == 0 {
                            let (rk, rn, rt) = reference.pop().ok_or_else(|| TestCaseError::fail("reference empty"))?;
                            let initial = matches!(rn, Notification::Add { is_in_initial_list: true, .. });
                            let want = show(&Delivery { key: rk, notification: rn, trace: rt, initial });
                            prop_assert_eq!(show(&d), want, "backlog 0 is the Coalescer");
                        }
                        if !merged_since_empty {
                            prop_assert!(!was_merging);
                            prop_assert_eq!(Some(d.trace), fifo.pop_front(), "a FIFO while not merging");
                        }
                        handler.apply(&d, &tracker)?;
                        drop(d);
                        if b.is_empty() {
                            prop_assert!(!b.is_merging(), "back to the queue once drained");
                            fifo.clear();
                            merged_since_empty = false;
                        } else if was_merging {
                            prop_assert!(b.is_merging(), "merging until drained");
                        }
                        continue;
                    }
                };
                // A new object, tracked (weakly) to see who keeps it alive.
                let mut fresh = || {
                    let o = Arc::new(i as u32);
                    made.push(Arc::downgrade(&o));
                    o
                };
                let (notification, initial) = match (raw.get(&k).cloned(), s) {
                    (None, Step::Change(_, initial)) | (None, Step::Remove(_, initial)) => {
                        let fresh = fresh();
                        raw.insert(k.clone(), Arc::clone(&fresh));
                        (Notification::Add { obj: fresh, is_in_initial_list: initial }, initial)
                    }
                    (None, _) => {
                        let fresh = fresh();
                        raw.insert(k.clone(), Arc::clone(&fresh));
                        (Notification::Add { obj: fresh, is_in_initial_list: false }, false)
                    }
                    (Some(cur), Step::Change(..)) => {
                        let fresh = fresh();
                        raw.insert(k.clone(), Arc::clone(&fresh));
                        (Notification::Update { old: cur, new: fresh }, false)
                    }
                    (Some(cur), Step::Resync(_)) => {
                        (Notification::Update { old: Arc::clone(&cur), new: cur }, false)
                    }
                    (Some(cur), remove) => {
                        raw.remove(&k);
                        let obj = if matches!(remove, Step::Remove(_, true)) {
                            DeltaObject::Tombstone(DeletedFinalStateUnknown { key: k.clone(), obj: cur })
                        } else {
                            DeltaObject::Object(cur)
                        };
                        (Notification::Delete { obj }, false)
                    }
                };
                if backlog == 0 {
                    reference.push(k.clone(), notification.clone(), trace);
                }
                let (len_before, was_merging) = (b.len(), b.is_merging());
                b.push(Delivery { key: k, notification, trace, initial });
                pushed += 1;
                started += i64::from(initial);
                if b.is_empty() {
                    // An add+delete cancelled out: nothing waits, so no merging either.
                    prop_assert!(!b.is_merging(), "back to the queue once drained");
                    fifo.clear();
                    merged_since_empty = false;
                } else if b.is_merging() {
                    prop_assert!(was_merging || len_before >= backlog, "merging only under a backlog");
                    prop_assert!(b.len() <= 2 * KEYS, "merging: at most two per key");
                    merged_since_empty = true;
                } else {
                    prop_assert!(b.len() <= backlog, "unmerged: at most `backlog` wait");
                    fifo.push_back(trace);
                }
                // Objects alive apart from the latest state and the handler's.
                let extra = made
                    .iter()
                    .filter_map(Weak::upgrade)
                    .filter(|o| {
                        !raw.values().any(|r| Arc::ptr_eq(r, o))
                            && !handler.state.values().any(|h| Arc::ptr_eq(h, o))
                    })
                    .count();
                if b.is_merging() {
                    prop_assert!(extra <= KEYS, "a merged notification keeps no intermediate object ({extra})");
                } else {
                    prop_assert!(extra <= 2 * b.len());
                }
                prop_assert_eq!(pushed, popped + b.len() as u64 + b.coalesced());
                prop_assert!(tracker.pending() >= 0);
            }
            while let Some(d) = b.pop() {
                popped += 1;
                if backlog == 0 {
                    let (rk, rn, rt) = reference.pop().ok_or_else(|| TestCaseError::fail("reference empty"))?;
                    let initial = matches!(rn, Notification::Add { is_in_initial_list: true, .. });
                    let want = show(&Delivery { key: rk, notification: rn, trace: rt, initial });
                    prop_assert_eq!(show(&d), want, "backlog 0 is the Coalescer");
                }
                handler.apply(&d, &tracker)?;
            }
            prop_assert!(reference.is_empty());
            prop_assert!(!b.is_merging());
            prop_assert_eq!(pushed, popped + b.coalesced());
            prop_assert_eq!(tracker.pending(), 0, "P5: every initial Add handled or cancelled ({} started)", started);
            prop_assert!(tracker.has_synced(true));
            prop_assert_eq!(handler.state.len(), raw.len());
            for (k, v) in &raw {
                prop_assert!(handler.state.get(k).is_some_and(|h| Arc::ptr_eq(h, v)), "final state of {k}");
            }
            drop((raw, handler));
            prop_assert!(made.iter().all(|w| w.upgrade().is_none()), "drained: nothing kept alive");
        }
    }
}
