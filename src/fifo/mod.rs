//! The `DeltaFifo` state machine: client-go's `DeltaFIFO` as a plain struct (F1–F9 of
//! `docs/semantics.md`).
//!
//! The reflector feeds it (`add`/`update`/`delete` for watch events, `replace` for a relist,
//! `resync` on the resync period); the consumer (the indexer actor) pulls [`PopBatch`]es out of
//! it, applies them to the store and acknowledges each batch with [`DeltaFifo::done`].
//!
//! There are no locks and no condition variable: the owning actor serialises every call, and
//! [`DeltaFifo::pop`] never blocks (it returns `None` when nothing is queued; the actor pops
//! again when the next event arrives).
//!
//! # Semantics (ids of `docs/semantics.md`)
//!
//! - **F1** A map key → [`Deltas`] (oldest first) plus a queue of keys. A key is in the queue at
//!   most once; new deltas for a queued key are appended to it and the key keeps its position.
//! - **F2** When the last two deltas of a key are both `Deleted` they collapse into one: the one
//!   that is not a [`DeletedFinalStateUnknown`] tombstone is kept (the older one when neither
//!   is; the newer when both are tombstones), exactly as client-go's `dedupDeltas`.
//! - **F3** A delete of an object that is not queued and not *known* (see below) is ignored.
//! - **F4** [`DeltaFifo::replace`] queues `Replaced` (or `Sync`, see
//!   [`DeltaFifoOptions::emit_delta_type_replaced`]) for every listed object, then a `Deleted`
//!   tombstone for every queued key missing from the list (carrying the newest queued object),
//!   then a `Deleted` tombstone for every known key that is neither listed nor queued.
//! - **F5** [`DeltaFifo::has_synced`]: populated, and every item queued by the first replace
//!   has been popped **and acknowledged**.
//! - **F6** Pop hands out whole [`Deltas`] of one key, or a batch of keys in queue order. There is
//!   no requeue: failures reported to [`DeltaFifo::done`] are counted.
//! - **F7** [`DeltaFifo::resync`] queues `Sync` for every known key without queued deltas.
//! - **F8** [`DeltaFifo::close`] refuses new input; what was queued before still pops.
//! - **F9** [`FifoMode::InOrder`] (client-go's `RealFIFO`): one queue entry per event, strict
//!   order across keys, one delta per popped [`Deltas`]; F2–F8 unchanged. The default
//!   [`FifoMode::PerKey`] is the `DeltaFIFO` above. With
//!   [`DeltaFifoOptions::with_atomic_replace`] (client-go's `AtomicFIFO`, its `ReplacedAll`
//!   delta) a relist is queued as one *group* that pops as one [`PopBatch`] flagged
//!   [`PopBatch::replace_all`], so a consumer that applies a batch in one store batch never
//!   shows a reader half a relist. See [Atomic relist](#atomic-relist-f9).
//!
//! # Atomic relist (F9)
//!
//! client-go's `RealFIFO` with atomic events queues a relist as a single `ReplacedAll` delta
//! carrying the list, and its consumer diffs it against the store. Our group carries what
//! [`DeltaFifo::replace`] queues anyway (F4: `Replaced`/`Sync` per listed object, a tombstone
//! per known object missing from the list), so the consumer keeps one code path and the FIFO's
//! F2–F8 bookkeeping (in-flight state, F5 counts) is unchanged.
//!
//! - A group pops as one batch whatever `max_keys` says: never split, never merged with
//!   entries outside it. `pop` returns it whole too.
//! - [`FifoMode::InOrder`]: the group is exactly the entries the relist appended, after
//!   everything queued before it and before everything queued after it. A relist tombstone
//!   for a key whose newest queued delta is already a delete collapses into that delete (F2),
//!   so the deletion is applied ahead of the group: the store state after the group is the same.
//! - [`FifoMode::PerKey`]: a per-key relist appends to every queued key, so the group is the
//!   whole queue at the time of the relist (the relist's deltas together with what those keys
//!   had queued before). Events after it open new entries behind the group, even for keys in
//!   it; a key can then be queued twice (once in the group), and F1's "at most once" holds per
//!   group and for the rest of the queue.
//! - In both modes a watch delete arriving after the relist for a key the group tombstones
//!   takes the tombstone's place inside the group (F2: the real object wins over a tombstone).
//!   The group's membership and the store state it leads to are unchanged.
//! - Resync is not atomic (client-go's `SyncAll` is not offered): it queues one `Sync` entry
//!   per key as without the option.
//!
//! # In-flight tracking: why the FIFO remembers what it handed out
//!
//! client-go's `Pop` held the FIFO lock while the consumer's `process` ran, so the store was
//! always up to date with everything popped by the time the FIFO consulted it again. Our
//! consumer is another actor: between [`pop`](DeltaFifo::pop) and [`done`](DeltaFifo::done)
//! the popped deltas are neither in the queue nor (necessarily) in the store. A relist that
//! arrives in that window would otherwise see a freshly added object nowhere, queue no
//! tombstone for it, and the consumer would then apply the in-flight `Added` and keep a
//! deleted object forever.
//!
//! So for every in-flight key the FIFO keeps the *effective newest state* the consumer will
//! reach after applying what it was handed (the newest object, or "deleted" when the newest
//! in-flight delta is `Deleted`), with a reference count because the same key can be in two
//! unacknowledged batches. Wherever client-go consulted `knownObjects` (F3, F4, F7), the FIFO
//! consults the in-flight state first and `known_objects` only for keys not in flight.
//!
//! # Memory (B2)
//!
//! Memory is bounded by the number of keys, not of events, **except** that the deltas of one
//! queued key accumulate until it is popped (only consecutive deletes collapse): a key updated
//! a thousand times between two pops holds a thousand deltas. This is client-go's behaviour too;
//! a consumer that keeps popping keeps it small. In [`FifoMode::InOrder`] every event is its own
//! queue entry, so memory grows with the events queued between pops (as in client-go's
//! `RealFIFO`); bound it upstream (B4) by pausing the watch when `pending_deltas` is high.

use std::{
    collections::{HashMap, HashSet, hash_map::Entry},
    fmt,
    sync::Arc,
};

use kube_core::Resource;

use crate::{
    DeletedFinalStateUnknown, Delta, DeltaObject, DeltaType, Deltas, KeyError, KeyFunc, ObjectKey,
    TraceId, key::default_key_func, known::KnownObjects,
};

mod queue;

use queue::{InOrderQueue, PerKeyQueue, Pushed, Queue};

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

/// The queue layout of a [`DeltaFifo`] (F9).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum FifoMode {
    /// client-go's `DeltaFIFO` (the default): one queue entry per key holding all its deltas,
    /// oldest first; a key keeps its queue position when more deltas arrive, so a busy key
    /// cannot starve others and memory is bounded by keys between pops.
    #[default]
    PerKey,
    /// client-go's `RealFIFO` (in-order FIFO): one queue entry per event, strict order across
    /// keys; every popped [`Deltas`] holds exactly one delta. Consecutive deletes of a key
    /// still collapse (F2); F3/F4/F5/F7 apply unchanged. Memory grows with events between pops.
    InOrder,
}

/// How a [`DeltaFifo`] is built.
pub struct DeltaFifoOptions<K> {
    /// Computes an object's key (default: `namespace/name`, [`crate::meta_namespace_key`]).
    pub key_func: KeyFunc<K>,
    /// The consumer's store, consulted to ignore deletes of unknown objects (F3), to find
    /// objects missing from a relist (F4) and to resync (F7). Without it deletions missed by
    /// the watch are only detected for keys still queued or in flight, and resync is a no-op.
    pub known_objects: Option<Arc<dyn KnownObjects<K>>>,
    /// When true (the default, like kube-rs and current client-go) a relist queues
    /// [`DeltaType::Replaced`] deltas; when false it queues [`DeltaType::Sync`] (old client-go).
    pub emit_delta_type_replaced: bool,
    /// Per-key queue (default) or in-order queue (F9).
    pub mode: FifoMode,
    /// When true, a relist is queued and popped as one group, an atomic relist (F9); default
    /// false. Works in both modes; see the [module docs](self#atomic-relist-f9).
    pub atomic_replace: bool,
}

impl<K> DeltaFifoOptions<K> {
    /// Options with the given key function, no known objects, `Replaced` deltas and the
    /// per-key mode.
    pub fn new(key_func: KeyFunc<K>) -> Self {
        DeltaFifoOptions {
            key_func,
            known_objects: None,
            emit_delta_type_replaced: true,
            mode: FifoMode::PerKey,
            atomic_replace: false,
        }
    }

    /// Sets [`mode`](Self::mode).
    pub fn with_mode(mut self, mode: FifoMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets [`known_objects`](Self::known_objects).
    pub fn with_known_objects(mut self, known_objects: Arc<dyn KnownObjects<K>>) -> Self {
        self.known_objects = Some(known_objects);
        self
    }

    /// Sets [`emit_delta_type_replaced`](Self::emit_delta_type_replaced).
    pub fn with_emit_delta_type_replaced(mut self, emit: bool) -> Self {
        self.emit_delta_type_replaced = emit;
        self
    }

    /// Sets [`atomic_replace`](Self::atomic_replace): each relist pops as one
    /// [`PopBatch`] flagged [`PopBatch::replace_all`] (F9).
    pub fn with_atomic_replace(mut self, atomic: bool) -> Self {
        self.atomic_replace = atomic;
        self
    }
}

impl<K: Resource + 'static> Default for DeltaFifoOptions<K> {
    /// The default key function (`namespace/name`), no known objects, `Replaced` deltas.
    fn default() -> Self {
        DeltaFifoOptions::new(default_key_func::<K>())
    }
}

impl<K> Clone for DeltaFifoOptions<K> {
    fn clone(&self) -> Self {
        DeltaFifoOptions {
            key_func: Arc::clone(&self.key_func),
            known_objects: self.known_objects.clone(),
            emit_delta_type_replaced: self.emit_delta_type_replaced,
            mode: self.mode,
            atomic_replace: self.atomic_replace,
        }
    }
}

impl<K> fmt::Debug for DeltaFifoOptions<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeltaFifoOptions")
            .field("known_objects", &self.known_objects.is_some())
            .field("emit_delta_type_replaced", &self.emit_delta_type_replaced)
            .field("mode", &self.mode)
            .field("atomic_replace", &self.atomic_replace)
            .finish_non_exhaustive()
    }
}

/// Errors of the [`DeltaFifo`]. None of them loses anything already queued.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FifoError {
    /// The FIFO was closed; nothing was queued (F8).
    #[error("the DeltaFIFO is closed")]
    Closed,
    /// The key function rejected the object; nothing was queued.
    #[error("cannot key object: {0}")]
    Key(#[from] KeyError),
}

/// One listed object that [`DeltaFifo::replace`] skipped because its key could not be computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedItem {
    /// Its index in the list given to `replace`.
    pub index: usize,
    /// Its trace id, as given to `replace`.
    pub trace: TraceId,
    /// Why the key function rejected it.
    pub error: KeyError,
}

/// What a [`DeltaFifo::replace`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaceSummary {
    /// `Replaced` (or `Sync`) deltas queued for listed objects.
    pub listed: usize,
    /// `Deleted` tombstones queued for keys missing from the list (before F2 deduplication).
    pub tombstoned: usize,
    /// Listed objects skipped because the key function failed (the rest of the relist is kept).
    pub rejected: Vec<RejectedItem>,
    /// `Some(n)` when this replace set the initial population (F5): `n` queue entries must be
    /// popped and acknowledged before [`DeltaFifo::has_synced`] is true.
    pub initial_population: Option<usize>,
}

/// Counters of a [`DeltaFifo`] since it was created (all monotonic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FifoStats {
    /// `Added` deltas queued.
    pub added: u64,
    /// `Updated` deltas queued.
    pub updated: u64,
    /// `Deleted` deltas queued: accepted deletes plus relist tombstones (before F2 dedup).
    pub deleted: u64,
    /// Of `deleted`, the `DeletedFinalStateUnknown` tombstones queued by replace (F4).
    pub tombstones: u64,
    /// `LeftShard` deltas queued: objects that left a shard that shrank (K2), removed from the
    /// store without a notification.
    pub left_shard: u64,
    /// `Replaced` (or `Sync` when `emit_delta_type_replaced` is off) deltas queued by replace.
    pub replaced: u64,
    /// `Sync` deltas queued by resync (F7).
    pub synced: u64,
    /// Items ([`Deltas`], one key each) handed out by pop.
    pub popped: u64,
    /// Items acknowledged through [`DeltaFifo::done`].
    pub acked: u64,
    /// Items reported failed through [`DeltaFifo::done`] (F6).
    pub failed: u64,
    /// Deletes ignored because the object was unknown (F3).
    pub ignored_deletes: u64,
    /// Consecutive `Deleted` deltas collapsed into one (F2).
    pub deduped_deletes: u64,
    /// Objects rejected by the key function (calls that returned `FifoError::Key`, and items
    /// skipped by replace).
    pub key_errors: u64,
    /// Calls to replace accepted.
    pub replaces: u64,
    /// Calls to resync accepted.
    pub resyncs: u64,
}

/// A popped batch: the items to process and the token to return to [`DeltaFifo::done`].
pub struct PopBatch<K> {
    /// The popped items in queue order, each the whole [`Deltas`] of one key (never empty).
    pub items: Vec<Deltas<K>>,
    /// Return it to [`DeltaFifo::done`] once the items were applied to the store.
    pub token: PopToken,
    /// `Some(resource version given to the relist)` when the batch is one whole atomic relist
    /// (F9, [`DeltaFifoOptions::atomic_replace`]): apply it in one store batch, so readers see
    /// the store before or after the relist, never half of it. `None` for other batches.
    pub replace_all: Option<String>,
}

impl<K> PopBatch<K> {
    /// True when the batch is one whole atomic relist (see [`replace_all`](Self::replace_all)).
    pub fn is_replace_all(&self) -> bool {
        self.replace_all.is_some()
    }
}

impl<K> fmt::Debug for PopBatch<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PopBatch")
            .field("items", &self.items)
            .field("token", &self.token)
            .field("replace_all", &self.replace_all)
            .finish()
    }
}

/// Proof that a batch was popped; hand it back to [`DeltaFifo::done`] exactly once, after the
/// batch was applied to the store. Not `Clone`, so it cannot be acknowledged twice.
///
/// Until it is returned, the batch's keys count as in flight (their newest popped state is what
/// the FIFO treats as known) and its initial-list items keep [`DeltaFifo::has_synced`] false.
#[derive(Debug)]
pub struct PopToken {
    id: u64,
    keys: Vec<ObjectKey>,
    initial: usize,
}

impl PopToken {
    /// The batch id, unique per FIFO (1, 2, 3, … in pop order).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The number of items in the batch.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Always false: a popped batch has at least one item.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// How many items of the batch belong to the initial population (F5).
    pub fn initial_items(&self) -> usize {
        self.initial
    }
}

/// The effective state of an in-flight key (popped, not yet acknowledged).
struct InFlight<K> {
    /// The newest popped object, or None when the newest popped delta was `Deleted`.
    state: Option<Arc<K>>,
    /// Number of unacknowledged batches that contain the key.
    refs: u32,
}

/// client-go's `DeltaFIFO` as a runtime-free state machine; see the [module docs](self).
///
/// ```
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kinformer::{DeltaType, TraceId, fifo::{DeltaFifo, DeltaFifoOptions}};
///
/// let cm = |name: &str| {
///     let mut c = ConfigMap::default();
///     c.metadata.namespace = Some("default".into());
///     c.metadata.name = Some(name.into());
///     Arc::new(c)
/// };
/// let mut fifo = DeltaFifo::new(DeltaFifoOptions::<ConfigMap>::default());
/// fifo.replace(vec![(cm("a"), TraceId(1))], "10").unwrap(); // the initial list
/// fifo.update(cm("a"), TraceId(2)).unwrap();
/// assert!(!fifo.has_synced());
///
/// let batch = fifo.pop_batch(256).unwrap();
/// let deltas = &batch.items[0];
/// assert_eq!(deltas.key.as_str(), "default/a");
/// let types: Vec<_> = deltas.deltas.iter().map(|d| d.delta_type).collect();
/// assert_eq!(types, [DeltaType::Replaced, DeltaType::Updated]);
/// // ... apply the batch to the store, then acknowledge it:
/// fifo.done(batch.token, 0);
/// assert!(fifo.has_synced());
/// ```
pub struct DeltaFifo<K> {
    key_func: KeyFunc<K>,
    known_objects: Option<Arc<dyn KnownObjects<K>>>,
    emit_delta_type_replaced: bool,

    mode: FifoMode,
    /// F9: each relist is queued as one group.
    atomic_replace: bool,
    /// The queued deltas, per key or in order.
    queue: Queue<K>,

    /// key → state handed out and not yet acknowledged.
    in_flight: HashMap<ObjectKey, InFlight<K>>,
    /// Items popped and not yet acknowledged.
    in_flight_items: usize,
    /// Batches popped and not yet acknowledged.
    in_flight_batches: usize,
    next_batch: u64,

    populated: bool,
    /// Popped initial items not yet acknowledged.
    initial_unacked: usize,

    closed: bool,
    last_sync_resource_version: Option<String>,
    stats: FifoStats,
    /// Listed keys of the current replace; kept to reuse its allocation.
    scratch_keys: HashSet<ObjectKey>,
}

impl<K> fmt::Debug for DeltaFifo<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeltaFifo")
            .field("mode", &self.mode)
            .field("atomic_replace", &self.atomic_replace)
            .field("queued", &self.queue.len())
            .field("pending_deltas", &self.queue.pending())
            .field("in_flight", &self.in_flight_items)
            .field("populated", &self.populated)
            .field("has_synced", &self.has_synced())
            .field("closed", &self.closed)
            .field(
                "last_sync_resource_version",
                &self.last_sync_resource_version,
            )
            .finish_non_exhaustive()
    }
}

impl<K> DeltaFifo<K> {
    /// An empty, open, unpopulated FIFO.
    pub fn new(opts: DeltaFifoOptions<K>) -> Self {
        DeltaFifo {
            key_func: opts.key_func,
            known_objects: opts.known_objects,
            emit_delta_type_replaced: opts.emit_delta_type_replaced,
            mode: opts.mode,
            atomic_replace: opts.atomic_replace,
            queue: match opts.mode {
                FifoMode::PerKey => Queue::PerKey(PerKeyQueue::new()),
                FifoMode::InOrder => Queue::InOrder(InOrderQueue::new()),
            },
            in_flight: HashMap::new(),
            in_flight_items: 0,
            in_flight_batches: 0,
            next_batch: 1,
            populated: false,
            initial_unacked: 0,
            closed: false,
            last_sync_resource_version: None,
            stats: FifoStats::default(),
            scratch_keys: HashSet::new(),
        }
    }

    /// The key of an object under this FIFO's key function (client-go's `KeyOf`).
    pub fn key_of(&self, obj: &K) -> Result<ObjectKey, KeyError> {
        (self.key_func)(obj)
    }

    /// The key of a delta's object: a tombstone's own key, else the key function's.
    pub fn key_of_object(&self, obj: &DeltaObject<K>) -> Result<ObjectKey, KeyError> {
        match obj {
            DeltaObject::Object(o) => (self.key_func)(o),
            DeltaObject::Tombstone(t) => Ok(t.key.clone()),
        }
    }

    /// Queues an `Added` delta (watch ADDED).
    pub fn add(&mut self, obj: Arc<K>, trace: TraceId) -> Result<(), FifoError> {
        let key = self.accept(&obj)?;
        self.stats.added += 1;
        self.queue_action(key, Delta::new(DeltaType::Added, obj, trace), false);
        Ok(())
    }

    /// Queues an `Updated` delta (watch MODIFIED).
    pub fn update(&mut self, obj: Arc<K>, trace: TraceId) -> Result<(), FifoError> {
        let key = self.accept(&obj)?;
        self.stats.updated += 1;
        self.queue_action(key, Delta::new(DeltaType::Updated, obj, trace), false);
        Ok(())
    }

    /// Queues a `Deleted` delta (watch DELETED).
    ///
    /// F3: when the key is not queued and not known (in flight with a live state, or, when not
    /// in flight, present in `known_objects`), the delete is ignored and counted in
    /// [`FifoStats::ignored_deletes`]: the deletion was presumably already reported by a relist.
    pub fn delete(&mut self, obj: Arc<K>, trace: TraceId) -> Result<(), FifoError> {
        let key = self.accept(&obj)?;
        if !self.queue.contains(key.as_str()) && !self.is_known(key.as_str()) {
            self.stats.ignored_deletes += 1;
            return Ok(());
        }
        self.stats.deleted += 1;
        self.queue_action(key, Delta::new(DeltaType::Deleted, obj, trace), false);
        Ok(())
    }

    /// Replaces the FIFO's view with a complete list (a relist), F4.
    ///
    /// In order: a `Replaced` delta (`Sync` when `emit_delta_type_replaced` is false) for each
    /// listed object; a `Deleted` [`DeletedFinalStateUnknown`] tombstone for each queued key
    /// missing from the list, carrying the newest queued object; a `Deleted` tombstone for each
    /// known key (in flight with a live state, or in `known_objects` and not in flight) that is
    /// neither listed nor queued, carrying the known object, in key order.
    ///
    /// Listed objects whose key cannot be computed are skipped and reported in
    /// [`ReplaceSummary::rejected`]; the rest of the relist is applied (losing a whole relist
    /// over one bad object would be worse). Since their key is unknown, a cached object they
    /// would have replaced is missing from the list and gets a tombstone like any other.
    ///
    /// The first replace of an unpopulated FIFO sets the initial population (F5).
    ///
    /// With [`DeltaFifoOptions::atomic_replace`] all of it is queued as one group that pops as
    /// one [`PopBatch`] with [`PopBatch::replace_all`] set (F9, see the
    /// [module docs](self#atomic-relist-f9)).
    pub fn replace(
        &mut self,
        list: Vec<(Arc<K>, TraceId)>,
        resource_version: &str,
    ) -> Result<ReplaceSummary, FifoError> {
        if self.closed {
            return Err(FifoError::Closed);
        }
        let initial = !self.populated;
        self.populated = true;
        self.stats.replaces += 1;
        let action = if self.emit_delta_type_replaced {
            DeltaType::Replaced
        } else {
            DeltaType::Sync
        };

        if self.atomic_replace {
            self.queue.begin_group();
        }
        let mut summary = ReplaceSummary::default();
        let mut listed = std::mem::take(&mut self.scratch_keys);
        listed.clear();
        listed.reserve(list.len());

        for (index, (obj, trace)) in list.into_iter().enumerate() {
            match (self.key_func)(&obj) {
                Ok(key) => {
                    listed.insert(key.clone());
                    self.queue_action(key, Delta::new(action, obj, trace), initial);
                    summary.listed += 1;
                }
                Err(error) => {
                    self.stats.key_errors += 1;
                    summary.rejected.push(RejectedItem {
                        index,
                        trace,
                        error,
                    });
                }
            }
        }
        self.stats.replaced += summary.listed as u64;

        // Queued keys missing from the list. Every listed key is queued now, so there are
        // exactly `items.len() - listed.len()` of them: skip the scan when there are none.
        let mut tombstones: Vec<(ObjectKey, Arc<K>)> = Vec::new();
        if self.queue.key_count() > listed.len() {
            self.queue.for_each_newest(|key, newest| {
                // An object that left the shard (K2) is no longer followed: its absence from
                // a list of the new shard is no deletion.
                if !listed.contains(key) && newest.delta_type != DeltaType::LeftShard {
                    tombstones.push((key.clone(), Arc::clone(newest.object.object())));
                }
            });
        }
        let queued_missing = tombstones.len();

        // Known keys neither listed nor queued: in flight first, then the store.
        for (key, flight) in &self.in_flight {
            if listed.contains(key) || self.queue.contains(key.as_str()) {
                continue;
            }
            if let Some(obj) = &flight.state {
                tombstones.push((key.clone(), Arc::clone(obj)));
            }
        }
        if let Some(known) = &self.known_objects {
            for key in known.list_keys() {
                if listed.contains(&key)
                    || self.queue.contains(key.as_str())
                    || self.in_flight.contains_key(&key)
                {
                    continue;
                }
                if let Some(obj) = known.get_by_key(key.as_str()) {
                    tombstones.push((key, obj));
                }
            }
        }
        // Deterministic order: key order within each part (per key, queued keys keep their
        // position anyway; in order, and behind an atomic relist's group, they do not).
        tombstones[..queued_missing].sort_unstable_by(|a, b| a.0.cmp(&b.0));
        tombstones[queued_missing..].sort_unstable_by(|a, b| a.0.cmp(&b.0));

        summary.tombstoned = tombstones.len();
        self.stats.deleted += tombstones.len() as u64;
        self.stats.tombstones += tombstones.len() as u64;
        for (key, obj) in tombstones {
            let delta = Delta {
                delta_type: DeltaType::Deleted,
                object: DeltaObject::Tombstone(DeletedFinalStateUnknown {
                    key: key.clone(),
                    obj,
                }),
                trace: TraceId::NONE,
            };
            self.queue_action(key, delta, initial);
        }

        listed.clear();
        self.scratch_keys = listed;
        if self.atomic_replace {
            self.queue.end_group(resource_version);
        }
        if initial {
            summary.initial_population = Some(self.queue.initial());
        }
        match &mut self.last_sync_resource_version {
            Some(rv) => {
                rv.clear();
                rv.push_str(resource_version);
            }
            None => self.last_sync_resource_version = Some(resource_version.to_owned()),
        }
        Ok(summary)
    }

    /// Queues a `LeftShard` delta (trace [`TraceId::NONE`]) for every queued or known object
    /// that `keep` rejects; returns how many (K2: the objects that left a shard that shrank;
    /// they leave the store and no handler hears of it). A queued key is judged by its newest
    /// queued object (skipped when that removes it already); a known key that is not queued by
    /// its known object (the in-flight state when in flight, skipped when that is "gone").
    /// Keys in key order.
    pub fn leave_unless(&mut self, keep: impl Fn(&K) -> bool) -> Result<usize, FifoError> {
        if self.closed {
            return Err(FifoError::Closed);
        }
        let mut leaving: Vec<(ObjectKey, Arc<K>)> = Vec::new();
        self.queue.for_each_newest(|key, newest| {
            if !newest.delta_type.removes()
                && let DeltaObject::Object(o) = &newest.object
                && !keep(o)
            {
                leaving.push((key.clone(), Arc::clone(o)));
            }
        });
        for (key, flight) in &self.in_flight {
            if self.queue.contains(key.as_str()) {
                continue;
            }
            if let Some(o) = &flight.state
                && !keep(o)
            {
                leaving.push((key.clone(), Arc::clone(o)));
            }
        }
        if let Some(known) = &self.known_objects {
            for key in known.list_keys() {
                if self.queue.contains(key.as_str()) || self.in_flight.contains_key(&key) {
                    continue;
                }
                if let Some(o) = known.get_by_key(key.as_str())
                    && !keep(&o)
                {
                    leaving.push((key, o));
                }
            }
        }
        leaving.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        leaving.dedup_by(|a, b| a.0 == b.0);
        let n = leaving.len();
        self.stats.left_shard += n as u64;
        for (key, obj) in leaving {
            self.queue_action(
                key,
                Delta::new(DeltaType::LeftShard, obj, TraceId::NONE),
                false,
            );
        }
        Ok(n)
    }

    /// Queues a `Sync` delta (trace [`TraceId::NONE`]) for every known key that has no queued
    /// deltas, F7; returns how many. Known keys are the store's (`known_objects`) plus keys in
    /// flight; a key whose in-flight state is "deleted" is skipped, and the object synced is the
    /// in-flight one when the key is in flight. Without `known_objects` this is a no-op.
    pub fn resync(&mut self) -> Result<usize, FifoError> {
        if self.closed {
            return Err(FifoError::Closed);
        }
        self.stats.resyncs += 1;
        let Some(known) = &self.known_objects else {
            return Ok(0);
        };
        let mut syncs: Vec<(ObjectKey, Arc<K>)> = Vec::new();
        for key in known.list_keys() {
            if self.queue.contains(key.as_str()) || self.in_flight.contains_key(&key) {
                continue;
            }
            if let Some(obj) = known.get_by_key(key.as_str()) {
                syncs.push((key, obj));
            }
        }
        let from_store = syncs.len();
        for (key, flight) in &self.in_flight {
            if self.queue.contains(key.as_str()) {
                continue;
            }
            if let Some(obj) = &flight.state {
                syncs.push((key.clone(), Arc::clone(obj)));
            }
        }
        syncs[from_store..].sort_unstable_by(|a, b| a.0.cmp(&b.0));

        let n = syncs.len();
        self.stats.synced += n as u64;
        for (key, obj) in syncs {
            self.queue_action(key, Delta::new(DeltaType::Sync, obj, TraceId::NONE), false);
        }
        Ok(n)
    }

    /// Pops the oldest queue entry (F6): one key's [`Deltas`], or one event in
    /// [`FifoMode::InOrder`], or a whole atomic relist (F9); `None` when nothing is queued.
    pub fn pop(&mut self) -> Option<PopBatch<K>> {
        self.pop_batch(1)
    }

    /// Pops up to `max_keys` queue entries (at least one) in queue order: keys with all their
    /// deltas, or single events in [`FifoMode::InOrder`] (then a key may appear more than once
    /// in a batch, oldest first); `None` when nothing is queued. After [`close`](Self::close)
    /// it keeps draining what was queued before (F8).
    ///
    /// An atomic relist (F9) pops alone and whole, whatever `max_keys`, with
    /// [`PopBatch::replace_all`] set; a batch of other entries stops in front of it.
    ///
    /// The batch is in flight until its token is returned to [`done`](Self::done).
    pub fn pop_batch(&mut self, max_keys: usize) -> Option<PopBatch<K>> {
        let n = max_keys.max(1).min(self.queue.len());
        if n == 0 {
            return None;
        }
        let mut items = Vec::with_capacity(n);
        let mut keys = Vec::with_capacity(n);
        let mut initial = 0;
        let in_flight = &mut self.in_flight;
        let replace_all = self.queue.pop_into(n, |slot| {
            initial += usize::from(slot.initial);
            let state = match slot.deltas.newest() {
                Some(d) if !d.delta_type.removes() => Some(Arc::clone(d.object.object())),
                _ => None,
            };
            match in_flight.entry(slot.deltas.key.clone()) {
                Entry::Occupied(mut e) => {
                    let flight = e.get_mut();
                    flight.state = state;
                    flight.refs += 1;
                    keys.push(e.key().clone());
                }
                Entry::Vacant(e) => {
                    keys.push(e.key().clone());
                    e.insert(InFlight { state, refs: 1 });
                }
            }
            items.push(slot.deltas);
        });
        if items.is_empty() {
            return None;
        }
        let id = self.next_batch;
        self.next_batch += 1;
        self.in_flight_items += items.len();
        self.in_flight_batches += 1;
        self.initial_unacked += initial;
        self.stats.popped += items.len() as u64;
        Some(PopBatch {
            items,
            token: PopToken { id, keys, initial },
            replace_all,
        })
    }

    /// Acknowledges a popped batch once it was applied to the store; `failed` items of it could
    /// not be processed (counted in [`FifoStats::failed`], capped at the batch size; there is
    /// no requeue, F6). Releases the batch's keys from the in-flight set and its initial items
    /// from the F5 count. Works after close.
    pub fn done(&mut self, batch: PopToken, failed: usize) {
        let len = batch.keys.len();
        for key in batch.keys {
            if let Entry::Occupied(mut e) = self.in_flight.entry(key) {
                let flight = e.get_mut();
                flight.refs -= 1;
                if flight.refs == 0 {
                    e.remove();
                }
            }
        }
        self.in_flight_items = self.in_flight_items.saturating_sub(len);
        self.in_flight_batches = self.in_flight_batches.saturating_sub(1);
        self.initial_unacked = self.initial_unacked.saturating_sub(batch.initial);
        self.stats.acked += len as u64;
        self.stats.failed += failed.min(len) as u64;
    }

    /// Closes the FIFO (F8): later `add`/`update`/`delete`/`replace`/`resync` return
    /// [`FifoError::Closed`]; pop keeps draining. Returns the number of queue entries still
    /// queued (keys; events in [`FifoMode::InOrder`]).
    pub fn close(&mut self) -> usize {
        self.closed = true;
        self.queue.len()
    }

    /// True once [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// F5 (client-go's `HasSynced`): true once the FIFO was populated (by a replace, or by an
    /// add/update/delete before any replace) and every item queued by the first replace has been
    /// popped and acknowledged with [`done`](Self::done).
    pub fn has_synced(&self) -> bool {
        self.populated && self.queue.initial() == 0 && self.initial_unacked == 0
    }

    /// Number of queue entries: queued keys, or queued events in [`FifoMode::InOrder`].
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when nothing is queued (items may still be in flight).
    pub fn is_empty(&self) -> bool {
        self.queue.len() == 0
    }

    /// Total number of queued deltas, over all keys.
    pub fn pending_deltas(&self) -> usize {
        self.queue.pending()
    }

    /// Number of popped items (entries) not yet acknowledged with [`done`](Self::done).
    pub fn in_flight(&self) -> usize {
        self.in_flight_items
    }

    /// Number of popped batches not yet acknowledged.
    pub fn in_flight_batches(&self) -> usize {
        self.in_flight_batches
    }

    /// The distinct queued keys, in queue order (of their oldest entry in
    /// [`FifoMode::InOrder`]).
    pub fn list_keys(&self) -> Vec<ObjectKey> {
        self.queue.list_keys()
    }

    /// The queued deltas of `key`, if it is queued; in [`FifoMode::InOrder`], its newest
    /// queued entry.
    pub fn get_by_key(&self, key: &str) -> Option<&Deltas<K>> {
        self.queue.get(key)
    }

    /// The queue layout this FIFO was built with.
    pub fn mode(&self) -> FifoMode {
        self.mode
    }

    /// True when relists are queued as one group (F9, [`DeltaFifoOptions::atomic_replace`]).
    pub fn atomic_replace(&self) -> bool {
        self.atomic_replace
    }

    /// The resource version given to the last [`replace`](Self::replace).
    pub fn last_sync_resource_version(&self) -> Option<&str> {
        self.last_sync_resource_version.as_deref()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> FifoStats {
        self.stats
    }

    /// Checks the FIFO is open and keys the object; marks the FIFO populated (F5).
    fn accept(&mut self, obj: &K) -> Result<ObjectKey, FifoError> {
        if self.closed {
            return Err(FifoError::Closed);
        }
        match (self.key_func)(obj) {
            Ok(key) => {
                self.populated = true;
                Ok(key)
            }
            Err(e) => {
                self.stats.key_errors += 1;
                Err(FifoError::Key(e))
            }
        }
    }

    /// F3/F4/F7's "known": the in-flight state if the key is in flight, else `known_objects`.
    fn is_known(&self, key: &str) -> bool {
        match self.in_flight.get(key) {
            Some(flight) => flight.state.is_some(),
            None => self
                .known_objects
                .as_ref()
                .is_some_and(|known| known.get_by_key(key).is_some()),
        }
    }

    /// Queues a delta for `key`, collapsing consecutive deletes (F2); `initial` marks the
    /// entry as part of the initial population (F5).
    #[inline]
    fn queue_action(&mut self, key: ObjectKey, delta: Delta<K>, initial: bool) {
        if self.queue.push(key, delta, initial) == Pushed::Collapsed {
            self.stats.deduped_deletes += 1;
        }
    }

    /// Test-only consistency check of the internal invariants.
    #[cfg(test)]
    fn check_invariants(&self) {
        self.queue.check_invariants();
        let refs: usize = self.in_flight.values().map(|f| f.refs as usize).sum();
        assert_eq!(
            refs, self.in_flight_items,
            "in-flight refcounts out of sync"
        );
    }
}
