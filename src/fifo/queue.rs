//! The two queue layouts behind a [`DeltaFifo`](super::DeltaFifo):
//!
//! - [`PerKeyQueue`] (the default, client-go's `DeltaFIFO`): one queue entry per key holding all
//!   its deltas; a key keeps its position when more deltas arrive (F1).
//! - [`InOrderQueue`] (F9, client-go's `RealFIFO`): one queue entry per event, strict order
//!   across keys; a per-key index (entry count and position of the newest entry) answers "is it
//!   queued" and "what is its newest queued delta" in O(1).
//!
//! Both collapse consecutive deletes of one key (F2) and count the deltas and the initial-list
//! entries they hold. [`Queue`] dispatches with one `match` per call, so the default layout pays
//! a predictable branch and nothing else for the existence of the other.

use std::collections::{HashMap, HashSet, VecDeque, hash_map::Entry};

use crate::{Delta, DeltaType, Deltas, ObjectKey};

/// One queue entry: the deltas handed out by one pop, and whether it counts toward the
/// initial population (F5).
pub(super) struct Slot<K> {
    pub(super) deltas: Deltas<K>,
    pub(super) initial: bool,
}

impl<K> Slot<K> {
    fn new(key: ObjectKey, delta: Delta<K>, initial: bool) -> Self {
        Slot {
            deltas: Deltas {
                key,
                deltas: vec![delta],
            },
            initial,
        }
    }
}

/// F2 (client-go's `isDeletionDup`): when `last` and `delta` are both `Deleted`, collapse them
/// into `last`, keeping the older unless it is a tombstone, and return `None`. Otherwise hand
/// `delta` back.
fn collapse_deletes<K>(last: &mut Delta<K>, delta: Delta<K>) -> Option<Delta<K>> {
    if last.delta_type == DeltaType::Deleted && delta.delta_type == DeltaType::Deleted {
        if last.object.is_tombstone() {
            *last = delta;
        }
        None
    } else {
        Some(delta)
    }
}

/// What [`Queue::push`] did with a delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pushed {
    /// Queued as a new delta.
    Appended,
    /// Collapsed into the key's newest queued delete (F2).
    Collapsed,
}

/// The default layout: one entry per key (client-go's `DeltaFIFO`).
pub(super) struct PerKeyQueue<K> {
    /// key → queued deltas; exactly the keys of `order` (F1).
    items: HashMap<ObjectKey, Slot<K>>,
    /// Queue order; every key at most once.
    order: VecDeque<ObjectKey>,
    /// Total deltas in `items`.
    pending: usize,
    /// Slots flagged initial.
    initial: usize,
}

impl<K> PerKeyQueue<K> {
    pub(super) fn new() -> Self {
        PerKeyQueue {
            items: HashMap::new(),
            order: VecDeque::new(),
            pending: 0,
            initial: 0,
        }
    }

    fn push(&mut self, key: ObjectKey, delta: Delta<K>, initial: bool) -> Pushed {
        match self.items.entry(key) {
            Entry::Occupied(mut e) => {
                let slot = e.get_mut();
                let deltas = &mut slot.deltas.deltas;
                let pushed = match deltas.last_mut() {
                    Some(last) => match collapse_deletes(last, delta) {
                        None => Pushed::Collapsed,
                        Some(delta) => {
                            deltas.push(delta);
                            Pushed::Appended
                        }
                    },
                    None => {
                        deltas.push(delta);
                        Pushed::Appended
                    }
                };
                if pushed == Pushed::Appended {
                    self.pending += 1;
                }
                if initial && !slot.initial {
                    slot.initial = true;
                    self.initial += 1;
                }
                pushed
            }
            Entry::Vacant(e) => {
                let key = e.key().clone();
                self.order.push_back(key.clone());
                e.insert(Slot::new(key, delta, initial));
                self.pending += 1;
                self.initial += usize::from(initial);
                Pushed::Appended
            }
        }
    }

    fn pop_front(&mut self) -> Option<Slot<K>> {
        loop {
            let key = self.order.pop_front()?;
            // Invariant F1: every queued key has a slot. Should it ever be broken, skip the
            // key rather than panic (client-go logs and continues the same way).
            if let Some(slot) = self.items.remove(&key) {
                self.pending -= slot.deltas.deltas.len();
                self.initial -= usize::from(slot.initial);
                return Some(slot);
            }
        }
    }
}

/// Where a key's entries are in an [`InOrderQueue`].
struct KeyRef {
    /// Number of queued entries of the key.
    count: usize,
    /// Sequence number of its newest entry.
    newest: u64,
}

/// F9: one entry per event, strict order across keys (client-go's `RealFIFO`).
pub(super) struct InOrderQueue<K> {
    /// The entries, one delta each; `queue[i]` has sequence number `head + i`.
    queue: VecDeque<Slot<K>>,
    /// Sequence number of `queue[0]`.
    head: u64,
    /// Queued keys.
    keys: HashMap<ObjectKey, KeyRef>,
    /// Slots flagged initial.
    initial: usize,
}

impl<K> InOrderQueue<K> {
    pub(super) fn new() -> Self {
        InOrderQueue {
            queue: VecDeque::new(),
            head: 0,
            keys: HashMap::new(),
            initial: 0,
        }
    }

    fn slot(&self, seq: u64) -> Option<&Slot<K>> {
        usize::try_from(seq.wrapping_sub(self.head))
            .ok()
            .and_then(|i| self.queue.get(i))
    }

    fn push(&mut self, key: ObjectKey, delta: Delta<K>, initial: bool) -> Pushed {
        let seq = self.head + self.queue.len() as u64;
        match self.keys.entry(key) {
            Entry::Occupied(mut e) => {
                let r = e.get_mut();
                let idx = usize::try_from(r.newest.wrapping_sub(self.head)).ok();
                // Invariant: `newest` is a queued entry of this key. Were it broken, the delta
                // is appended instead of collapsed (nothing is lost).
                let delta = match idx.and_then(|i| self.queue.get_mut(i)) {
                    Some(slot) => match slot.deltas.deltas.last_mut() {
                        Some(last) => match collapse_deletes(last, delta) {
                            None => {
                                if initial && !slot.initial {
                                    slot.initial = true;
                                    self.initial += 1;
                                }
                                return Pushed::Collapsed;
                            }
                            Some(delta) => delta,
                        },
                        None => delta,
                    },
                    None => delta,
                };
                r.count += 1;
                r.newest = seq;
                self.queue
                    .push_back(Slot::new(e.key().clone(), delta, initial));
            }
            Entry::Vacant(e) => {
                self.queue
                    .push_back(Slot::new(e.key().clone(), delta, initial));
                e.insert(KeyRef {
                    count: 1,
                    newest: seq,
                });
            }
        }
        self.initial += usize::from(initial);
        Pushed::Appended
    }

    fn pop_front(&mut self) -> Option<Slot<K>> {
        let slot = self.queue.pop_front()?;
        self.head += 1;
        self.initial -= usize::from(slot.initial);
        if let Entry::Occupied(mut e) = self.keys.entry(slot.deltas.key.clone()) {
            let r = e.get_mut();
            r.count -= 1;
            if r.count == 0 {
                e.remove();
            }
        }
        Some(slot)
    }
}

/// The queue of a [`DeltaFifo`](super::DeltaFifo), in one of the two layouts.
pub(super) enum Queue<K> {
    PerKey(PerKeyQueue<K>),
    InOrder(InOrderQueue<K>),
}

impl<K> Queue<K> {
    /// Queues a delta for `key` (collapsing consecutive deletes, F2); `initial` marks the entry
    /// as part of the initial population (F5).
    #[inline]
    pub(super) fn push(&mut self, key: ObjectKey, delta: Delta<K>, initial: bool) -> Pushed {
        match self {
            Queue::PerKey(q) => q.push(key, delta, initial),
            Queue::InOrder(q) => q.push(key, delta, initial),
        }
    }

    /// Removes the oldest entry.
    #[inline]
    pub(super) fn pop_front(&mut self) -> Option<Slot<K>> {
        match self {
            Queue::PerKey(q) => q.pop_front(),
            Queue::InOrder(q) => q.pop_front(),
        }
    }

    /// True when `key` has queued deltas.
    #[inline]
    pub(super) fn contains(&self, key: &str) -> bool {
        match self {
            Queue::PerKey(q) => q.items.contains_key(key),
            Queue::InOrder(q) => q.keys.contains_key(key),
        }
    }

    /// Queue entries: keys (per key) or events (in order).
    pub(super) fn len(&self) -> usize {
        match self {
            Queue::PerKey(q) => q.order.len(),
            Queue::InOrder(q) => q.queue.len(),
        }
    }

    /// Distinct queued keys.
    pub(super) fn key_count(&self) -> usize {
        match self {
            Queue::PerKey(q) => q.items.len(),
            Queue::InOrder(q) => q.keys.len(),
        }
    }

    /// Queued deltas.
    pub(super) fn pending(&self) -> usize {
        match self {
            Queue::PerKey(q) => q.pending,
            Queue::InOrder(q) => q.queue.len(),
        }
    }

    /// Queued entries flagged initial.
    pub(super) fn initial(&self) -> usize {
        match self {
            Queue::PerKey(q) => q.initial,
            Queue::InOrder(q) => q.initial,
        }
    }

    /// The distinct queued keys, in the order of their oldest entry.
    pub(super) fn list_keys(&self) -> Vec<ObjectKey> {
        match self {
            Queue::PerKey(q) => q.order.iter().cloned().collect(),
            Queue::InOrder(q) => {
                let mut seen = HashSet::with_capacity(q.keys.len());
                q.queue
                    .iter()
                    .filter(|s| seen.insert(&s.deltas.key))
                    .map(|s| s.deltas.key.clone())
                    .collect()
            }
        }
    }

    /// The queued deltas of `key` (per key), or its newest entry (in order).
    pub(super) fn get(&self, key: &str) -> Option<&Deltas<K>> {
        match self {
            Queue::PerKey(q) => q.items.get(key).map(|s| &s.deltas),
            Queue::InOrder(q) => q
                .keys
                .get(key)
                .and_then(|r| q.slot(r.newest))
                .map(|s| &s.deltas),
        }
    }

    /// Calls `f` with every queued key and its newest queued delta.
    pub(super) fn for_each_newest(&self, mut f: impl FnMut(&ObjectKey, &Delta<K>)) {
        match self {
            Queue::PerKey(q) => {
                for (key, slot) in &q.items {
                    if let Some(d) = slot.deltas.newest() {
                        f(key, d);
                    }
                }
            }
            Queue::InOrder(q) => {
                for (key, r) in &q.keys {
                    if let Some(d) = q.slot(r.newest).and_then(|s| s.deltas.newest()) {
                        f(key, d);
                    }
                }
            }
        }
    }

    /// Test-only consistency check of the layout's invariants.
    #[cfg(test)]
    pub(super) fn check_invariants(&self) {
        let no_double_delete = |key: &ObjectKey, deltas: &[&Delta<K>]| {
            for pair in deltas.windows(2) {
                assert!(
                    !(pair[0].delta_type == DeltaType::Deleted
                        && pair[1].delta_type == DeltaType::Deleted),
                    "F2: consecutive deletes for {key}"
                );
            }
        };
        match self {
            Queue::PerKey(q) => {
                let mut seen = HashSet::new();
                for key in &q.order {
                    assert!(seen.insert(key.clone()), "F1: key {key} queued twice");
                    assert!(
                        q.items.contains_key(key),
                        "F1: queued key {key} has no item"
                    );
                }
                assert_eq!(seen.len(), q.items.len(), "F1: item without queue entry");
                let (mut pending, mut initial) = (0, 0);
                for (key, slot) in &q.items {
                    assert_eq!(&slot.deltas.key, key);
                    assert!(!slot.deltas.deltas.is_empty(), "F1: empty deltas for {key}");
                    no_double_delete(key, &slot.deltas.deltas.iter().collect::<Vec<_>>());
                    pending += slot.deltas.deltas.len();
                    initial += usize::from(slot.initial);
                }
                assert_eq!(pending, q.pending, "pending deltas out of sync");
                assert_eq!(initial, q.initial, "initial count out of sync");
            }
            Queue::InOrder(q) => {
                let mut per_key: HashMap<&ObjectKey, (usize, u64, Vec<&Delta<K>>)> = HashMap::new();
                let mut initial = 0;
                for (i, slot) in q.queue.iter().enumerate() {
                    assert_eq!(slot.deltas.deltas.len(), 1, "F9: one delta per entry");
                    let e = per_key.entry(&slot.deltas.key).or_default();
                    e.0 += 1;
                    e.1 = q.head + i as u64;
                    e.2.push(&slot.deltas.deltas[0]);
                    initial += usize::from(slot.initial);
                }
                assert_eq!(per_key.len(), q.keys.len(), "F9: key index out of sync");
                for (key, (count, newest, deltas)) in per_key {
                    let r = q.keys.get(key).expect("indexed key");
                    assert_eq!((r.count, r.newest), (count, newest), "F9: index of {key}");
                    no_double_delete(key, &deltas);
                }
                assert_eq!(initial, q.initial, "initial count out of sync");
            }
        }
    }
}
