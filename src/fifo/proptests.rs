//! Property tests: random reflector/consumer interleavings against a model of the API server.
//!
//! The harness plays three parts: the API server (the model: name → resourceVersion), the
//! reflector (tells the FIFO about server changes, sometimes misses some, relists), and the
//! consumer (pops batches, keeps some in flight, applies them to its store in order and
//! acknowledges them). Whatever the interleaving, once the reflector has relisted after its
//! last missed change and the consumer has drained the FIFO, the consumer's store must equal
//! the server.
//!
//! With atomic relists (F9) the consumer also checks, when it applies a relist's batch, that
//! its store then equals the server as listed: a reader never sees half a relist.

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex},
};

use k8s_openapi::api::core::v1::ConfigMap;
use proptest::prelude::*;

use super::*;

type Cm = ConfigMap;

const NAMES: u8 = 8;

fn cm(name: &str, rv: u64) -> Arc<Cm> {
    let mut c = ConfigMap::default();
    c.metadata.namespace = Some("ns".into());
    c.metadata.name = Some(name.into());
    c.metadata.resource_version = Some(rv.to_string());
    Arc::new(c)
}

fn rv_of(o: &Cm) -> u64 {
    o.metadata
        .resource_version
        .as_deref()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[derive(Default, Clone)]
struct Store(Arc<Mutex<HashMap<ObjectKey, Arc<Cm>>>>);

impl Store {
    fn apply(&self, d: &Deltas<Cm>) {
        let mut m = self.0.lock().unwrap();
        for delta in &d.deltas {
            match delta.delta_type {
                DeltaType::Deleted => {
                    m.remove(&d.key);
                }
                _ => {
                    m.insert(d.key.clone(), delta.object.object().clone());
                }
            }
        }
    }

    fn contents(&self) -> BTreeMap<String, u64> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.name().to_string(), rv_of(v)))
            .collect()
    }
}

impl KnownObjects<Cm> for Store {
    fn list_keys(&self) -> Vec<ObjectKey> {
        self.0.lock().unwrap().keys().cloned().collect()
    }

    fn get_by_key(&self, key: &str) -> Option<Arc<Cm>> {
        self.0.lock().unwrap().get(key).cloned()
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Server creates (or, if present, modifies) the object; the watch reports it.
    Add(u8),
    /// Server modifies the object if present; the watch reports it.
    Update(u8),
    /// Server deletes the object if present; the watch reports it.
    Delete(u8),
    /// The watch reports a delete of an object the server does not have (F3 fodder).
    SpuriousDelete(u8),
    /// Server changes the object (true: create/modify, false: delete) and the watch misses it.
    Missed(u8, bool),
    /// The reflector relists.
    Relist,
    /// The resync period fires.
    Resync,
    /// The consumer pops a batch of up to n keys and keeps it in flight.
    Pop(u8),
    /// The consumer applies its oldest in-flight batch and acknowledges it.
    Ack,
}

fn op(missed: bool) -> impl Strategy<Value = Op> {
    let n = 0..NAMES;
    let missed_weight = if missed { 2 } else { 0 };
    prop_oneof![
        4 => n.clone().prop_map(Op::Add),
        4 => n.clone().prop_map(Op::Update),
        3 => n.clone().prop_map(Op::Delete),
        1 => n.clone().prop_map(Op::SpuriousDelete),
        missed_weight => (n, any::<bool>()).prop_map(|(n, b)| Op::Missed(n, b)),
        2 => Just(Op::Relist),
        1 => Just(Op::Resync),
        4 => (1u8..5).prop_map(Op::Pop),
        4 => Just(Op::Ack),
    ]
}

struct Batch {
    batch: PopBatch<Cm>,
    initial: usize,
    /// For an atomic relist: the server's contents it listed.
    listed: Option<BTreeMap<String, u64>>,
}

struct Harness {
    fifo: DeltaFifo<Cm>,
    store: Store,
    server: BTreeMap<String, u64>,
    next_rv: u64,
    next_trace: u64,
    /// The server changed without the FIFO being told since the last relist.
    dirty: bool,
    in_flight: VecDeque<Batch>,
    // has_synced model
    populated: bool,
    with_known: bool,
    /// Names whose delete was ignored (F3): without known objects the consumer may keep them.
    ghosts: HashSet<String>,
    initial_pending: HashSet<ObjectKey>,
    // pending-deltas bound: FIFO calls so far, and the call count when each key was popped
    calls: usize,
    popped_at: HashMap<ObjectKey, usize>,
    // order checks: newest popped trace per key, and overall (F9)
    last_trace: HashMap<ObjectKey, TraceId>,
    last_trace_overall: TraceId,
    /// Atomic relists (F9): the server's contents listed, by the resource version given.
    relists: HashMap<String, BTreeMap<String, u64>>,
}

impl Harness {
    fn new(with_known: bool, mode: FifoMode) -> Self {
        Harness::with_options(with_known, mode, false)
    }

    fn with_options(with_known: bool, mode: FifoMode, atomic: bool) -> Self {
        let store = Store::default();
        let mut opts = DeltaFifoOptions::<Cm>::default()
            .with_mode(mode)
            .with_atomic_replace(atomic);
        if with_known {
            opts = opts.with_known_objects(Arc::new(store.clone()));
        }
        Harness {
            fifo: DeltaFifo::new(opts),
            store,
            server: BTreeMap::new(),
            next_rv: 1,
            next_trace: 1,
            dirty: false,
            in_flight: VecDeque::new(),
            populated: false,
            with_known,
            ghosts: HashSet::new(),
            initial_pending: HashSet::new(),
            calls: 0,
            popped_at: HashMap::new(),
            last_trace: HashMap::new(),
            last_trace_overall: TraceId::NONE,
            relists: HashMap::new(),
        }
    }

    fn rv(&mut self) -> u64 {
        self.next_rv += 1;
        self.next_rv
    }

    fn trace(&mut self) -> TraceId {
        self.next_trace += 1;
        TraceId(self.next_trace)
    }

    fn run(&mut self, op: &Op) {
        match *op {
            Op::Add(n) | Op::Update(n) => {
                let name = format!("o{n}");
                let exists = self.server.contains_key(&name);
                if !exists && matches!(op, Op::Update(_)) {
                    return;
                }
                let rv = self.rv();
                self.server.insert(name.clone(), rv);
                let trace = self.trace();
                self.call();
                if exists {
                    self.fifo.update(cm(&name, rv), trace).unwrap();
                } else {
                    self.fifo.add(cm(&name, rv), trace).unwrap();
                }
                self.populated = true;
            }
            Op::Delete(n) => {
                let name = format!("o{n}");
                if self.server.remove(&name).is_none() {
                    return;
                }
                self.delete(&name);
            }
            Op::SpuriousDelete(n) => {
                let name = format!("o{n}");
                if self.server.contains_key(&name) {
                    return;
                }
                self.delete(&name);
            }
            Op::Missed(n, upsert) => {
                let name = format!("o{n}");
                if upsert {
                    let rv = self.rv();
                    self.server.insert(name, rv);
                } else if self.server.remove(&name).is_none() {
                    return;
                }
                self.dirty = true;
            }
            Op::Relist => self.relist(),
            Op::Resync => {
                self.call();
                self.fifo.resync().unwrap();
            }
            Op::Pop(n) => self.pop(n as usize),
            Op::Ack => self.ack(),
        }
    }

    /// Reports a delete and checks F3: it is ignored exactly when the key is neither queued nor
    /// known, where known means the newest in-flight state if in flight, else the store (with
    /// known objects only).
    fn delete(&mut self, name: &str) {
        let key = ObjectKey::new(Some("ns"), name);
        let queued = self.fifo.get_by_key(key.as_str()).is_some();
        let in_flight = self
            .in_flight
            .iter()
            .rev()
            .flat_map(|b| b.batch.items.iter().rev())
            .find(|d| d.key == key)
            .map(|d| d.deltas.last().unwrap().delta_type != DeltaType::Deleted);
        let known = match in_flight {
            Some(alive) => alive,
            None => self.with_known && self.store.get_by_key(key.as_str()).is_some(),
        };
        let rv = self.rv();
        let trace = self.trace();
        self.call();
        let before = self.fifo.stats().ignored_deletes;
        self.fifo.delete(cm(name, rv), trace).unwrap();
        let ignored = self.fifo.stats().ignored_deletes - before == 1;
        assert_eq!(ignored, !queued && !known, "F3 for {key}");
        if ignored {
            self.ghosts.insert(name.to_string());
        }
        self.populated = true;
    }

    fn call(&mut self) {
        self.calls += 1;
    }

    fn relist(&mut self) {
        let list: Vec<_> = self
            .server
            .clone()
            .into_iter()
            .map(|(name, rv)| (cm(&name, rv), self.trace()))
            .collect();
        let listed = list.len();
        self.call();
        let first = !self.populated;
        // A distinct resource version per relist names its listing.
        let rv = format!("{}.{}", self.next_rv, self.relists.len());
        self.relists.insert(rv.clone(), self.server.clone());
        let sum = self.fifo.replace(list, &rv).unwrap();
        assert_eq!(sum.listed, listed);
        assert!(sum.rejected.is_empty());
        if first {
            // Nothing was queued, in flight or stored before: the initial population is the
            // listed keys (one entry each, in both modes: the server has no duplicates).
            self.initial_pending = self
                .server
                .keys()
                .map(|n| ObjectKey::new(Some("ns"), n))
                .collect();
            assert_eq!(sum.initial_population, Some(self.initial_pending.len()));
        } else {
            assert_eq!(sum.initial_population, None);
        }
        self.populated = true;
        self.dirty = false;
    }

    fn pop(&mut self, n: usize) {
        let Some(batch) = self.fifo.pop_batch(n) else {
            assert!(self.fifo.is_empty());
            return;
        };
        assert!(!batch.items.is_empty());
        let listed = match &batch.replace_all {
            Some(rv) => {
                assert!(
                    self.fifo.atomic_replace(),
                    "F9: a group without atomic relists"
                );
                Some(self.relists[rv].clone())
            }
            None => {
                assert!(batch.items.len() <= n, "F6: batch over its bound");
                None
            }
        };
        let in_order = self.fifo.mode() == FifoMode::InOrder;
        let mut initial = 0;
        for item in &batch.items {
            assert!(!item.deltas.is_empty());
            if in_order {
                assert_eq!(item.deltas.len(), 1, "F9: one delta per entry");
            }
            if self.initial_pending.remove(&item.key) {
                initial += 1;
            }
            self.popped_at.insert(item.key.clone(), self.calls);
            for d in item.deltas.iter().filter(|d| !d.trace.is_none()) {
                // Per key, deltas come out in the order the events happened (both modes).
                let last = self.last_trace.entry(item.key.clone()).or_default();
                assert!(
                    d.trace > *last,
                    "{}: {:?} after {:?}",
                    item.key,
                    d.trace,
                    *last
                );
                *last = d.trace;
                // F9: across keys too. A delete may take the place of an older queued
                // tombstone of its key (F2), so deletes are exempt.
                if in_order && d.delta_type != DeltaType::Deleted {
                    assert!(d.trace > self.last_trace_overall, "F9: out of order");
                    self.last_trace_overall = d.trace;
                }
            }
        }
        assert_eq!(batch.token.initial_items(), initial);
        self.in_flight.push_back(Batch {
            batch,
            initial,
            listed,
        });
    }

    fn ack(&mut self) {
        let Some(Batch { batch, listed, .. }) = self.in_flight.pop_front() else {
            return;
        };
        for item in &batch.items {
            self.store.apply(item);
        }
        if let Some(listed) = listed {
            // F9: everything queued before the relist was applied before it, and the relist
            // as a whole now: the store is the server as listed.
            assert_eq!(
                self.consumer_view(&listed),
                listed,
                "F9: store after an atomic relist differs from the list"
            );
        }
        self.fifo.done(batch.token, 0);
    }

    /// The consumer's store, less the objects it may keep because their delete was ignored
    /// without known objects (F3), unless `server` has them.
    fn consumer_view(&self, server: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
        let mut store = self.store.contents();
        if !self.with_known {
            store.retain(|name, _| server.contains_key(name) || !self.ghosts.contains(name));
        }
        store
    }

    fn check(&self) {
        self.fifo.check_invariants();
        if self.fifo.mode() == FifoMode::PerKey && !self.fifo.atomic_replace() {
            // B2: bounded by keys, and a key holds at most one delta per FIFO call since its
            // pop.
            assert!(self.fifo.len() <= NAMES as usize);
            for key in self.fifo.list_keys() {
                let since = self.calls - self.popped_at.get(&key).copied().unwrap_or(0);
                let n = self.fifo.get_by_key(key.as_str()).unwrap().deltas.len();
                assert!(n <= since, "{key}: {n} deltas after {since} calls");
            }
        } else if self.fifo.mode() == FifoMode::InOrder {
            assert_eq!(self.fifo.pending_deltas(), self.fifo.len());
            assert!(self.fifo.list_keys().len() <= NAMES as usize);
        } else {
            // Per key with atomic relists, a key may be queued in a relist and after it.
            assert!(self.fifo.list_keys().len() <= NAMES as usize);
        }
        let in_flight: usize = self.in_flight.iter().map(|b| b.batch.items.len()).sum();
        assert_eq!(self.fifo.in_flight(), in_flight);
        // F5: synced exactly when every initial item was popped and acknowledged.
        let want = self.populated
            && self.initial_pending.is_empty()
            && self.in_flight.iter().all(|b| b.initial == 0);
        assert_eq!(self.fifo.has_synced(), want, "has_synced");
    }

    /// Relists if a change was missed, acknowledges everything and drains the FIFO.
    fn finish(&mut self) {
        if self.dirty {
            self.relist();
            self.check();
        }
        while !self.in_flight.is_empty() {
            self.ack();
            self.check();
        }
        while !self.fifo.is_empty() {
            self.pop(7);
            self.ack();
            self.check();
        }
        assert_eq!(self.fifo.in_flight(), 0);
        assert!(self.fifo.in_flight.is_empty(), "in-flight state leaked");
        assert_eq!(self.fifo.pending_deltas(), 0);
        // client-go without knownObjects: a delete of an object that is no longer queued is
        // dropped, so the consumer keeps it. Those are the only extra objects allowed.
        let store = self.consumer_view(&self.server);
        assert_eq!(
            store,
            self.server
                .iter()
                .map(|(n, rv)| (n.clone(), *rv))
                .collect::<BTreeMap<_, _>>(),
            "consumer store differs from the server"
        );
        if self.populated {
            assert!(self.fifo.has_synced());
        }
    }
}

fn run_all(with_known: bool, mode: FifoMode, ops: &[Op]) {
    run_with(Harness::new(with_known, mode), ops);
}

fn run_with(mut h: Harness, ops: &[Op]) {
    for op in ops {
        h.run(op);
        h.check();
    }
    h.finish();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// With the consumer's store as known objects, missed watch events included: after a final
    /// relist and a full drain the store equals the server.
    #[test]
    fn f1_f8_model_with_known_objects(ops in prop::collection::vec(op(true), 1..80)) {
        run_all(true, FifoMode::PerKey, &ops);
    }

    /// Without known objects (and so without missed events, which client-go cannot detect then
    /// either): the drained store equals the server, except for objects whose delete arrived
    /// after they were processed (ignored by F3, exactly as client-go).
    #[test]
    fn f1_f8_model_without_known_objects(ops in prop::collection::vec(op(false), 1..80)) {
        run_all(false, FifoMode::PerKey, &ops);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    /// F9: the in-order mode under the same model, plus strict order across keys.
    #[test]
    fn f9_model_in_order_with_known_objects(ops in prop::collection::vec(op(true), 1..80)) {
        run_all(true, FifoMode::InOrder, &ops);
    }

    /// F9 without known objects.
    #[test]
    fn f9_model_in_order_without_known_objects(ops in prop::collection::vec(op(false), 1..80)) {
        run_all(false, FifoMode::InOrder, &ops);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Relist-heavy sequences starting with the initial list: has_synced tracks exactly the
    /// acknowledgement of the first list's items.
    #[test]
    fn f5_model_initial_list_then_events(
        initial in prop::collection::btree_set(0..NAMES, 0..NAMES as usize),
        ops in prop::collection::vec(op(true), 0..60),
        in_order in any::<bool>(),
    ) {
        let mode = if in_order { FifoMode::InOrder } else { FifoMode::PerKey };
        let mut h = Harness::new(true, mode);
        for n in initial {
            let rv = h.rv();
            h.server.insert(format!("o{n}"), rv);
        }
        h.relist();
        h.check();
        for op in &ops {
            h.run(op);
            h.check();
        }
        h.finish();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// F9 atomic relist, both modes, with known objects: the model above, and after each
    /// relist's batch the store equals what was listed.
    #[test]
    fn f9_model_atomic_replace_with_known_objects(
        ops in prop::collection::vec(op(true), 1..80),
        in_order in any::<bool>(),
    ) {
        let mode = if in_order { FifoMode::InOrder } else { FifoMode::PerKey };
        run_with(Harness::with_options(true, mode, true), &ops);
    }

    /// F9 atomic relist without known objects.
    #[test]
    fn f9_model_atomic_replace_without_known_objects(
        ops in prop::collection::vec(op(false), 1..80),
        in_order in any::<bool>(),
    ) {
        let mode = if in_order { FifoMode::InOrder } else { FifoMode::PerKey };
        run_with(Harness::with_options(false, mode, true), &ops);
    }
}
