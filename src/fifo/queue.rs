//! The two queue layouts behind a [`DeltaFifo`](super::DeltaFifo):
//!
//! - [`PerKeyQueue`] (the default, client-go's `DeltaFIFO`): one queue entry per key holding all
//!   its deltas; a key keeps its position when more deltas arrive (F1).
//! - [`InOrderQueue`] (F9, client-go's `RealFIFO`): one queue entry per event, strict order
//!   across keys; a per-key index (entry count and position of the newest entry) answers "is it
//!   queued" and "what is its newest queued delta" in O(1).
//!
//! Both collapse consecutive deletes of one key (F2) and count the deltas and the initial-list
//! entries they hold. Both can hold *groups* (F9's atomic relist): the entries queued by one
//! relist, handed out by [`Queue::pop_into`] as one batch, never split and never mixed with
//! entries outside the group. [`Queue`] dispatches with one `match` per call, so the default layout pays
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
/// into `last`, keeping the older unless it is a tombstone, and return `None`. A `LeftShard`
/// (K2) next to a `Deleted` collapses the same way, keeping whichever came first: an object
/// deleted before it left the shard was deleted (handlers hear it once), and one that left
/// before a delete arrived is no longer followed (handlers hear nothing, and the relist
/// tombstone queued behind it for the missing key is not a deletion they should see).
/// Otherwise hand `delta` back.
fn collapse_deletes<K>(last: &mut Delta<K>, delta: Delta<K>) -> Option<Delta<K>> {
    if !(last.delta_type.removes() && delta.delta_type.removes()) {
        return Some(delta);
    }
    if last.delta_type == DeltaType::Deleted
        && delta.delta_type == DeltaType::Deleted
        && last.object.is_tombstone()
    {
        *last = delta;
    }
    None
}

/// F2 against a queued slot: collapses `delta` into the slot's newest delta when both are
/// deletes (marking the slot initial if the collapsed delta was, and counting it in `initial`),
/// or hands `delta` back.
fn collapse_into<K>(
    slot: Option<&mut Slot<K>>,
    delta: Delta<K>,
    initial: bool,
    initial_count: &mut usize,
) -> Result<Pushed, Delta<K>> {
    let Some(slot) = slot else {
        return Err(delta);
    };
    let Some(last) = slot.deltas.deltas.last_mut() else {
        return Err(delta);
    };
    match collapse_deletes(last, delta) {
        None => {
            if initial && !slot.initial {
                slot.initial = true;
                *initial_count += 1;
            }
            Ok(Pushed::Collapsed)
        }
        Some(delta) => Err(delta),
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

/// A sealed relist of a [`PerKeyQueue`] (F9 atomic relist): per-key entries that pop as one
/// batch, ahead of everything queued after the relist.
struct Group<K> {
    /// key → deltas; exactly the keys of `order`.
    items: HashMap<ObjectKey, Slot<K>>,
    /// Order within the group; every key once.
    order: VecDeque<ObjectKey>,
    /// The resource version given to the relist.
    resource_version: String,
}

/// The default layout: one entry per key (client-go's `DeltaFIFO`).
///
/// With atomic relists a key can be queued twice: once in a sealed [`Group`] and once in
/// `items` (events that arrived after the relist). Its deltas, read oldest group first and
/// `items` last, are still in event order, and F2 holds across that boundary.
pub(super) struct PerKeyQueue<K> {
    /// key → queued deltas not in a sealed group; exactly the keys of `order` (F1).
    items: HashMap<ObjectKey, Slot<K>>,
    /// Queue order of `items`; every key at most once.
    order: VecDeque<ObjectKey>,
    /// Sealed relists, oldest first; all of them pop before `order`. Usually empty.
    sealed: VecDeque<Group<K>>,
    /// Entries (keys) in `sealed`.
    sealed_len: usize,
    /// Total deltas in `items` and `sealed`.
    pending: usize,
    /// Slots flagged initial, in `items` and `sealed`.
    initial: usize,
}

impl<K> PerKeyQueue<K> {
    pub(super) fn new() -> Self {
        PerKeyQueue {
            items: HashMap::new(),
            order: VecDeque::new(),
            sealed: VecDeque::new(),
            sealed_len: 0,
            pending: 0,
            initial: 0,
        }
    }

    /// The newest sealed slot of `key`, if any.
    fn sealed_slot(&self, key: &str) -> Option<&Slot<K>> {
        self.sealed.iter().rev().find_map(|g| g.items.get(key))
    }

    fn push(&mut self, key: ObjectKey, delta: Delta<K>, initial: bool) -> Pushed {
        // A key not in `items` may still have its newest deltas in a sealed group: a delete
        // following a queued delete collapses into it there (F2), anything else opens a new
        // entry after the groups.
        let delta = if self.sealed.is_empty() || self.items.contains_key(&key) {
            delta
        } else {
            let slot = self
                .sealed
                .iter_mut()
                .rev()
                .find_map(|g| g.items.get_mut(&key));
            match collapse_into(slot, delta, initial, &mut self.initial) {
                Ok(pushed) => return pushed,
                Err(delta) => delta,
            }
        };
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

    /// Seals everything in `items` as one group. Called at the end of an atomic relist, when
    /// every queued key holds the relist's delta for it (listed or tombstoned), so the whole
    /// unsealed queue belongs to the relist. Nothing is sealed when nothing is queued.
    fn seal(&mut self, resource_version: &str) {
        if self.order.is_empty() {
            return;
        }
        self.sealed_len += self.order.len();
        self.sealed.push_back(Group {
            items: std::mem::take(&mut self.items),
            order: std::mem::take(&mut self.order),
            resource_version: resource_version.to_owned(),
        });
    }

    fn pop_into(&mut self, max: usize, mut f: impl FnMut(Slot<K>)) -> Option<String> {
        if let Some(mut group) = self.sealed.pop_front() {
            self.sealed_len -= group.order.len();
            for key in group.order {
                if let Some(slot) = group.items.remove(&key) {
                    self.pending -= slot.deltas.deltas.len();
                    self.initial -= usize::from(slot.initial);
                    f(slot);
                }
            }
            return Some(group.resource_version);
        }
        for _ in 0..max {
            match self.pop_front() {
                Some(slot) => f(slot),
                None => break,
            }
        }
        None
    }
}

/// Where a key's entries are in an [`InOrderQueue`].
struct KeyRef {
    /// Number of queued entries of the key.
    count: usize,
    /// Sequence number of its newest entry.
    newest: u64,
}

/// The entries of one atomic relist in an [`InOrderQueue`]: sequence numbers `start..end`.
struct Span {
    start: u64,
    end: u64,
    /// The resource version given to the relist.
    resource_version: String,
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
    /// Atomic relists still queued, oldest first: non-empty, disjoint, ascending spans with
    /// `start >= head` (a group is only ever popped whole).
    groups: VecDeque<Span>,
    /// Sequence number where the relist being queued started, between `begin_group` and
    /// `end_group`.
    group_start: Option<u64>,
}

impl<K> InOrderQueue<K> {
    pub(super) fn new() -> Self {
        InOrderQueue {
            queue: VecDeque::new(),
            head: 0,
            keys: HashMap::new(),
            initial: 0,
            groups: VecDeque::new(),
            group_start: None,
        }
    }

    fn tail(&self) -> u64 {
        self.head + self.queue.len() as u64
    }

    fn begin_group(&mut self) {
        self.group_start = Some(self.tail());
    }

    /// Closes the relist opened by `begin_group`: the entries appended since form one group.
    /// (Deltas that collapsed into older entries, F2, are not part of it: their key's deletion
    /// is already queued ahead of the group.)
    fn end_group(&mut self, resource_version: &str) {
        let Some(start) = self.group_start.take() else {
            return;
        };
        let end = self.tail();
        if end > start {
            self.groups.push_back(Span {
                start,
                end,
                resource_version: resource_version.to_owned(),
            });
        }
    }

    fn pop_into(&mut self, max: usize, mut f: impl FnMut(Slot<K>)) -> Option<String> {
        match self.groups.front() {
            Some(g) if g.start == self.head => {
                let g = self.groups.pop_front()?;
                for _ in g.start..g.end {
                    match self.pop_front() {
                        Some(slot) => f(slot),
                        None => break,
                    }
                }
                Some(g.resource_version)
            }
            next => {
                // Stop in front of the next group.
                let limit = next.map_or(usize::MAX, |g| {
                    usize::try_from(g.start - self.head).unwrap_or(usize::MAX)
                });
                for _ in 0..max.min(limit) {
                    match self.pop_front() {
                        Some(slot) => f(slot),
                        None => break,
                    }
                }
                None
            }
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
                let slot = idx.and_then(|i| self.queue.get_mut(i));
                let delta = match collapse_into(slot, delta, initial, &mut self.initial) {
                    Ok(pushed) => return pushed,
                    Err(delta) => delta,
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

    /// Starts queuing an atomic relist: the entries pushed until [`end_group`](Self::end_group)
    /// form one group.
    pub(super) fn begin_group(&mut self) {
        match self {
            // Per key, the group is the whole queue at `end_group`.
            Queue::PerKey(_) => {}
            Queue::InOrder(q) => q.begin_group(),
        }
    }

    /// Ends the atomic relist started by [`begin_group`](Self::begin_group). Per key, the
    /// whole queue becomes the group: a per-key relist appends to every queued key (a
    /// `Replaced` delta or a tombstone), so everything queued is part of it.
    pub(super) fn end_group(&mut self, resource_version: &str) {
        match self {
            Queue::PerKey(q) => q.seal(resource_version),
            Queue::InOrder(q) => q.end_group(resource_version),
        }
    }

    /// Removes entries from the front and hands them to `f` in queue order: a whole group
    /// (whatever `max`), returning `Some(resource version of its relist)`, or else up to `max`
    /// entries, stopping in front of the next group, returning `None`.
    #[inline]
    pub(super) fn pop_into(&mut self, max: usize, f: impl FnMut(Slot<K>)) -> Option<String> {
        match self {
            Queue::PerKey(q) => q.pop_into(max, f),
            Queue::InOrder(q) => q.pop_into(max, f),
        }
    }

    /// True when `key` has queued deltas.
    #[inline]
    pub(super) fn contains(&self, key: &str) -> bool {
        match self {
            Queue::PerKey(q) => {
                q.items.contains_key(key)
                    || (!q.sealed.is_empty() && q.sealed.iter().any(|g| g.items.contains_key(key)))
            }
            Queue::InOrder(q) => q.keys.contains_key(key),
        }
    }

    /// Queue entries: keys (per key, a key in a sealed relist and queued again after it
    /// counting twice) or events (in order).
    pub(super) fn len(&self) -> usize {
        match self {
            Queue::PerKey(q) => q.order.len() + q.sealed_len,
            Queue::InOrder(q) => q.queue.len(),
        }
    }

    /// Distinct queued keys, or more: per key, a key both in a sealed relist and queued after
    /// it counts twice (an upper bound is all `replace` needs).
    pub(super) fn key_count(&self) -> usize {
        match self {
            Queue::PerKey(q) => q.items.len() + q.sealed_len,
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
            Queue::PerKey(q) if q.sealed.is_empty() => q.order.iter().cloned().collect(),
            Queue::PerKey(q) => {
                let mut seen = HashSet::with_capacity(q.items.len() + q.sealed_len);
                q.sealed
                    .iter()
                    .flat_map(|g| g.order.iter())
                    .chain(q.order.iter())
                    .filter(|k| seen.insert(*k))
                    .cloned()
                    .collect()
            }
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
            Queue::PerKey(q) => q
                .items
                .get(key)
                .or_else(|| q.sealed_slot(key))
                .map(|s| &s.deltas),
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
                if !q.sealed.is_empty() {
                    // Newest first: `items`, then the groups from the newest.
                    let mut seen: HashSet<&ObjectKey> = q.items.keys().collect();
                    for g in q.sealed.iter().rev() {
                        for (key, slot) in &g.items {
                            if seen.insert(key) {
                                if let Some(d) = slot.deltas.newest() {
                                    f(key, d);
                                }
                            }
                        }
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
                    !(pair[0].delta_type.removes() && pair[1].delta_type.removes()),
                    "F2: consecutive deletes for {key}"
                );
            }
        };
        match self {
            Queue::PerKey(q) => {
                // Each part (a sealed group, then the unsealed queue) holds a key at most once;
                // a key's deltas read across the parts, oldest first, never hold two
                // consecutive deletes.
                let parts = q
                    .sealed
                    .iter()
                    .map(|g| (&g.order, &g.items))
                    .chain(std::iter::once((&q.order, &q.items)));
                let (mut pending, mut initial, mut sealed_len) = (0, 0, 0);
                let mut per_key: HashMap<&ObjectKey, Vec<&Delta<K>>> = HashMap::new();
                for (i, (order, items)) in parts.enumerate() {
                    let is_group = i < q.sealed.len();
                    assert!(!(is_group && order.is_empty()), "F9: empty sealed group");
                    let mut seen = HashSet::new();
                    for key in order {
                        assert!(seen.insert(key.clone()), "F1: key {key} queued twice");
                        assert!(items.contains_key(key), "F1: queued key {key} has no item");
                    }
                    assert_eq!(seen.len(), items.len(), "F1: item without queue entry");
                    if is_group {
                        sealed_len += order.len();
                    }
                    for key in order {
                        let slot = &items[key];
                        assert_eq!(&slot.deltas.key, key);
                        assert!(!slot.deltas.deltas.is_empty(), "F1: empty deltas for {key}");
                        per_key
                            .entry(key)
                            .or_default()
                            .extend(slot.deltas.deltas.iter());
                        pending += slot.deltas.deltas.len();
                        initial += usize::from(slot.initial);
                    }
                }
                for (key, deltas) in per_key {
                    no_double_delete(key, &deltas);
                }
                assert_eq!(sealed_len, q.sealed_len, "sealed entry count out of sync");
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
                let mut at = q.head;
                for g in &q.groups {
                    assert!(
                        g.start >= at && g.end > g.start,
                        "F9: group spans out of order"
                    );
                    at = g.end;
                }
                assert!(at <= q.tail(), "F9: group past the queue's end");
                assert!(q.group_start.is_none(), "F9: group left open");
            }
        }
    }
}
