//! The async front of client-go's workqueue (docs/semantics.md W1–W4): [`AsyncWorkQueue`].
//!
//! The name says what sets it apart from the core's [`kinformer::workqueue::WorkQueue`], the
//! clock-injected machine (`&mut self`, time passed in) that it drives: workers `await` it, its
//! clones share one queue, and its time is tokio's.
//!
//! [`AsyncWorkQueue`] wraps the clock-injected core in a `std::sync::Mutex` and wakes waiting
//! workers with [`tokio::sync::Notify`]. There is no background task: a worker blocked in
//! [`AsyncWorkQueue::get`] sleeps until an add, a `done` that re-queues, a shutdown, or the
//! deadline of the earliest delayed item, whichever comes first. The lock is held only for one call
//! into the core, never across an `.await`.
//!
//! Time is tokio's clock ([`tokio::time::Instant::now`]), so tests can pause and advance it.
//!
//! The controller pattern:
//!
//! ```
//! use kinformer_actors::workqueue::AsyncWorkQueue;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let queue: AsyncWorkQueue<String> = AsyncWorkQueue::new();
//! let worker = tokio::spawn({
//!     let queue = queue.clone();
//!     async move {
//!         let mut handled = Vec::new();
//!         while let Some(key) = queue.get().await {
//!             let ok = true; // reconcile `key` here
//!             if ok {
//!                 queue.forget(&key); // reset its backoff
//!             } else {
//!                 queue.add_rate_limited(key.clone()); // retry later
//!             }
//!             handled.push(key.clone());
//!             queue.done(&key);
//!         }
//!         handled
//!     }
//! });
//! queue.add("default/web".to_string());
//! queue.add("default/web".to_string()); // deduplicated while queued (W1)
//! queue.shut_down_with_drain().await; // W3
//! // Items queued before the shutdown are still handed out.
//! assert_eq!(worker.await.unwrap(), vec!["default/web".to_string()]);
//! # }
//! ```

use std::{
    collections::HashMap,
    fmt,
    hash::Hash,
    ops::{Deref, DerefMut},
    sync::{Arc, Mutex, MutexGuard, PoisonError, Weak},
    time::{Duration, Instant},
};

use kinformer::{
    ObjectKey, TraceId,
    workqueue::{self as core, AddOutcome, GetResult, RateLimiter, WorkQueueMetrics},
};
use tokio::sync::Notify;

use crate::{
    controller::ownership::ShardOwnership,
    handler::EnqueueKeys,
    telemetry::{
        metrics::{Telemetry, TelemetryError},
        probe::WorkQueueProbe,
        trace::{self, QueueEvent, QueueLine, WorkerName},
    },
};

/// client-go's rate-limiting workqueue for async workers (W1–W4).
///
/// Cheap to clone; all clones are the same queue. Usable from any tokio runtime (actix
/// arbiters included) and from several worker tasks at once; the non-async methods never
/// block for longer than a short critical section, so they can be called from handlers,
/// actors and plain threads alike.
///
/// - W1: an item is queued at most once; an item re-added while a worker processes it is
///   queued again when that worker calls [`done`](Self::done), so no two workers ever hold
///   the same item.
/// - W2: [`add_after`](Self::add_after), [`add_rate_limited`](Self::add_rate_limited),
///   [`forget`](Self::forget).
/// - W3: [`shut_down`](Self::shut_down), [`shut_down_with_drain`](Self::shut_down_with_drain).
/// - W4: [`metrics`](Self::metrics).
///
/// ```
/// use kinformer_actors::workqueue::AsyncWorkQueue;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let q = AsyncWorkQueue::new();
/// q.add("a");
/// q.add("a");
/// assert_eq!(q.len(), 1);
/// let item = q.get().await;
/// assert_eq!(item, Some("a"));
/// q.done(&"a");
/// q.shut_down();
/// assert_eq!(q.get().await, None);
/// # }
/// ```
pub struct AsyncWorkQueue<T> {
    shared: Arc<Shared<T>>,
}

struct Shared<T> {
    core: Mutex<Locked<T>>,
    /// Wakes workers blocked in `get`.
    ready: Notify,
    /// Wakes callers of `shut_down_with_drain`.
    drained: Notify,
    /// Wakes callers of `drain_not_owned` after every `done`.
    finished: Notify,
}

/// What the queue's lock guards: the core, and the trace ids its items carry (T5).
struct Locked<T> {
    core: core::WorkQueue<T>,
    /// Set by [`AsyncWorkQueue::with_name`]: only a named queue records trace lines.
    trace: Option<QueueTrace<T>>,
}

impl<T> Deref for Locked<T> {
    type Target = core::WorkQueue<T>;
    fn deref(&self) -> &Self::Target {
        &self.core
    }
}

impl<T> DerefMut for Locked<T> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.core
    }
}

/// A named queue's trace state (T5). `items` holds entries only while tracing is on: the
/// off path touches nothing but an empty map (no allocation).
struct QueueTrace<T> {
    name: Arc<str>,
    /// The key as written on `queue` lines (the item's `Display`).
    key: fn(&T) -> String,
    items: HashMap<T, ItemTraces>,
}

/// The most trace ids one item keeps (T5). A hot key fed by many events before a worker takes
/// it (every Pod of a Deployment in an initial list) would otherwise grow its list, and each
/// `merged` line's copy of it, without bound; past this the ids are counted, not kept.
pub const MAX_ITEM_TRACES: usize = 64;

/// The trace ids an item carries, and its times, while tracing is on.
#[derive(Debug, Default)]
struct ItemTraces {
    /// What the next `got` hands out: the traces merged into the pending item, oldest first.
    pending: Vec<TraceId>,
    /// Traces of `add_after`s not yet due: they join `pending` when the item is taken after
    /// its deadline.
    delayed: Vec<TraceId>,
    /// When `done` queued it again (it was dirty): its wait starts there, not at the add.
    requeued_at: Option<Instant>,
    /// Trace ids not kept because the item already carried [`MAX_ITEM_TRACES`] (written on
    /// its `got` line as `untraced`).
    untraced: u32,
}

fn display_key<T: fmt::Display>(item: &T) -> String {
    item.to_string()
}

/// Adds `trace` to `traces` once; past [`MAX_ITEM_TRACES`] counts it in `untraced` instead.
fn push_unique(traces: &mut Vec<TraceId>, trace: TraceId, untraced: &mut u32) {
    if trace.is_none() || traces.contains(&trace) {
        return;
    }
    if traces.len() < MAX_ITEM_TRACES {
        traces.push(trace);
    } else {
        *untraced = untraced.saturating_add(1);
    }
}

impl<T: Clone + Eq + Hash> Locked<T> {
    /// True when this operation records lines: the queue is named and tracing is on. When
    /// tracing went off, drops what it kept, so nothing lingers (clearing does not allocate).
    fn traced(&mut self, on: bool) -> bool {
        match &mut self.trace {
            None => false,
            Some(_) if on => true,
            Some(t) => {
                if !t.items.is_empty() {
                    t.items.clear();
                }
                false
            }
        }
    }

    /// The event of an add (`add`, an immediate `add_after`) and its outcome.
    fn on_add(&mut self, item: &T, trace: TraceId, outcome: AddOutcome) -> Option<QueueEvent> {
        let t = self.trace.as_mut()?;
        let op = match outcome {
            AddOutcome::Queued => {
                let e = t.items.entry(item.clone()).or_default();
                e.pending.clear();
                e.untraced = 0;
                e.requeued_at = None;
                push_unique(&mut e.pending, trace, &mut e.untraced);
                QueueLine::Added { trace }
            }
            AddOutcome::AlreadyQueued => {
                let e = t.items.entry(item.clone()).or_default();
                let into = e.pending.clone();
                push_unique(&mut e.pending, trace, &mut e.untraced);
                QueueLine::Merged { trace, into }
            }
            AddOutcome::Deferred => {
                let e = t.items.entry(item.clone()).or_default();
                push_unique(&mut e.pending, trace, &mut e.untraced);
                QueueLine::Dirty { trace }
            }
            AddOutcome::Delayed { ready_at } => {
                let e = t.items.entry(item.clone()).or_default();
                push_unique(&mut e.delayed, trace, &mut e.untraced);
                QueueLine::Delayed {
                    trace,
                    delay: ready_at.saturating_duration_since(now()),
                }
            }
            AddOutcome::NotOwned => QueueLine::DroppedNotOwned,
            AddOutcome::ShuttingDown => return None,
        };
        Some(t.event(item, op))
    }

    /// Removes the traces of items the owner filter refuses now (they were purged), then
    /// purges (W5).
    fn purge_not_owned(&mut self) -> usize {
        let purged = self.core.purge_not_owned();
        if let Some(t) = &mut self.trace
            && !t.items.is_empty()
        {
            let core = &self.core;
            t.items
                .retain(|item, _| core.is_owned(item) || core.is_processing(item));
        }
        purged
    }
}

impl<T> QueueTrace<T> {
    fn event(&self, item: &T, op: QueueLine) -> QueueEvent {
        QueueEvent {
            queue: Arc::clone(&self.name),
            key: (self.key)(item),
            op,
        }
    }
}

/// An item a worker took with [`AsyncWorkQueue::get_traced`]: the item, the trace ids of the
/// events merged into it (oldest first; empty when tracing is off or no traced event added
/// it), the worker, and the queue's name. Start a
/// [`ReconcileSpan`](crate::trace::ReconcileSpan) with it; call
/// [`done`](AsyncWorkQueue::done) with [`item`](Self::item) when finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken<T> {
    item: T,
    traces: Vec<TraceId>,
    worker: Option<u32>,
    queue: Option<Arc<str>>,
}

impl<T> Taken<T> {
    /// The item.
    pub fn item(&self) -> &T {
        &self.item
    }

    /// The item, owned.
    pub fn into_item(self) -> T {
        self.item
    }

    /// The trace ids merged into the item while it was pending, oldest first (as on its
    /// `got` line).
    pub fn traces(&self) -> &[TraceId] {
        &self.traces
    }

    /// The worker that took it (what it gave [`get_traced`](AsyncWorkQueue::get_traced));
    /// `None` for a plain [`get`](AsyncWorkQueue::get).
    pub fn worker(&self) -> Option<u32> {
        self.worker
    }

    /// The queue's name ([`with_name`](AsyncWorkQueue::with_name)), if it has one.
    pub fn queue_name(&self) -> Option<&Arc<str>> {
        self.queue.as_ref()
    }
}

/// What [`AsyncWorkQueue::drain_not_owned`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct DrainReport {
    /// The draining ranges acknowledged (empty: nothing was draining, nothing was acked).
    pub acked: kinformer::shard::ShardSelector,
    /// Queued, delayed or re-added keys removed.
    pub purged: usize,
    /// Keys that were being processed when the drain started, waited for.
    pub waited_for: usize,
    /// From the start of the drain to the ack (tokio's clock).
    pub took: Duration,
}

/// The current instant on tokio's clock (paused and advanced in tests), as the core wants it.
fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> AsyncWorkQueue<T> {
    /// A queue with client-go's default controller rate limiter: the max of a per-item
    /// exponential backoff (5 ms doubling to 1000 s) and a 10 qps / burst 100 token bucket.
    ///
    /// ```
    /// use kinformer_actors::workqueue::AsyncWorkQueue;
    /// let q: AsyncWorkQueue<String> = AsyncWorkQueue::new();
    /// assert!(q.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::from_core(core::WorkQueue::with_default_rate_limiter())
    }

    /// A queue whose [`add_rate_limited`](Self::add_rate_limited) delays come from `rl`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use kinformer::workqueue::ItemExponentialFailureRateLimiter;
    /// use kinformer_actors::workqueue::AsyncWorkQueue;
    ///
    /// let rl = ItemExponentialFailureRateLimiter::new(
    ///     Duration::from_millis(100),
    ///     Duration::from_secs(60),
    /// );
    /// let q: AsyncWorkQueue<String> = AsyncWorkQueue::with_rate_limiter(Box::new(rl));
    /// # let _ = q;
    /// ```
    pub fn with_rate_limiter(rl: Box<dyn RateLimiter<T> + Send>) -> Self {
        Self::from_core(core::WorkQueue::new(rl))
    }

    fn from_core(core: core::WorkQueue<T>) -> Self {
        Self {
            shared: Arc::new(Shared {
                core: Mutex::new(Locked { core, trace: None }),
                ready: Notify::new(),
                drained: Notify::new(),
                finished: Notify::new(),
            }),
        }
    }

    /// Names the queue, for its trace lines (T5, docs/trace-format.md `queue`): a named queue
    /// records each add, take, `done` and `forget` of a key, with the trace ids the key
    /// carries, while tracing is on. Use the name it has in
    /// [`Telemetry::register_workqueue`] (one name per queue). Keys are written with their
    /// `Display` (`ns/name` for an [`ObjectKey`]).
    ///
    /// ```
    /// use kinformer::ObjectKey;
    /// use kinformer_actors::workqueue::AsyncWorkQueue;
    /// let q = AsyncWorkQueue::<ObjectKey>::new().with_name("deployments");
    /// assert_eq!(q.name().as_deref(), Some("deployments"));
    /// ```
    pub fn with_name(self, name: impl Into<Arc<str>>) -> Self
    where
        T: fmt::Display,
    {
        self.lock().trace = Some(QueueTrace {
            name: name.into(),
            key: display_key::<T>,
            items: HashMap::new(),
        });
        self
    }

    /// The queue's name, if [`with_name`](Self::with_name) gave it one.
    pub fn name(&self) -> Option<Arc<str>> {
        self.lock().trace.as_ref().map(|t| Arc::clone(&t.name))
    }

    /// Gives the queue an owner filter (a sharded controller's replica): `add`, `add_after`
    /// and `add_rate_limited` drop the items `owned` refuses (counted in
    /// [`WorkQueueMetrics::dropped_not_owned`]), as do delayed items at their deadline and a
    /// re-added item at its `done` (W5). `owned` is read at each of those calls, so it may
    /// follow changing ownership; [`purge_not_owned`](Self::purge_not_owned) removes what
    /// is already queued.
    ///
    /// ```
    /// use kinformer_actors::workqueue::AsyncWorkQueue;
    /// let q = AsyncWorkQueue::new().with_owner_filter(|k: &&str| k.starts_with("mine/"));
    /// q.add("mine/a");
    /// q.add("theirs/b");
    /// assert_eq!((q.len(), q.metrics().dropped_not_owned), (1, 1));
    /// ```
    pub fn with_owner_filter(self, owned: impl Fn(&T) -> bool + Send + Sync + 'static) -> Self {
        self.lock().set_owner_filter(Some(Box::new(owned)));
        self
    }

    /// [`with_owner_filter`](Self::with_owner_filter) by a replica's [`ShardOwnership`]: an
    /// item is owned when [`ShardOwnership::owns_value`] holds for the value `hashed` gives
    /// it (its namespace for namespace shards; for uid shards, a lookup of the object's uid).
    ///
    /// ```
    /// use kinformer::{ObjectKey, shard::{ShardField, ShardSelector}};
    /// use kinformer_actors::{ShardOwnership, workqueue::AsyncWorkQueue};
    /// let mine = ShardSelector::nth_of(ShardField::Namespace, 0, 2).unwrap();
    /// let ownership = ShardOwnership::fixed(mine.clone());
    /// let q = AsyncWorkQueue::new()
    ///     .with_owner(ownership, |k: &ObjectKey| k.split().0.unwrap_or_default());
    /// for ns in ["a", "b", "c", "d"] {
    ///     q.add(ObjectKey::new(Some(ns), "web"));
    /// }
    /// let owned = ["a", "b", "c", "d"].iter().filter(|ns| mine.matches_value(ns)).count();
    /// assert_eq!(q.len(), owned);
    /// ```
    pub fn with_owner<F>(self, ownership: ShardOwnership, hashed: F) -> Self
    where
        F: Fn(&T) -> &str + Send + Sync + 'static,
    {
        self.with_owner_filter(move |item| ownership.owns_value(hashed(item)))
    }

    /// Removes every queued or delayed item the owner filter refuses now, and makes sure an
    /// item being processed that it refuses is not queued again by its
    /// [`done`](Self::done) (W5). Returns how many were removed. Call it when ownership
    /// shrinks; without an owner filter it does nothing.
    pub fn purge_not_owned(&self) -> usize {
        self.lock().purge_not_owned()
    }

    /// Items being processed that the owner filter refuses now.
    pub fn processing_not_owned(&self) -> usize {
        self.lock().processing_not_owned()
    }

    /// Drains the ranges `ownership` marks [`draining`](crate::OwnershipView::draining): purges
    /// their keys ([`purge_not_owned`](Self::purge_not_owned); the owner filter must follow
    /// `ownership`, as [`with_owner`](Self::with_owner) does), waits until every key being
    /// processed that is not owned any more is [`done`](Self::done) (a write already started
    /// finishes; none starts anew, as the workers re-check ownership), then
    /// [`ack_drained`](ShardOwnership::ack_drained)s them so the ring may hand them over.
    /// Returns at once, acking nothing, when nothing drains. A shutdown does not end the wait:
    /// the workers still call `done`.
    ///
    /// ```
    /// use kinformer::{ObjectKey, shard::{ShardField, ShardSelector}};
    /// use kinformer_actors::{ShardOwnership, workqueue::AsyncWorkQueue};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let all = ShardSelector::everything(ShardField::Namespace);
    /// let ownership = ShardOwnership::fixed(all.clone());
    /// let q = AsyncWorkQueue::new()
    ///     .with_owner(ownership.clone(), |k: &ObjectKey| k.split().0.unwrap_or_default());
    /// q.add(ObjectKey::new(Some("demo"), "web"));
    /// let mut view = (*ownership.view()).clone();
    /// view.draining = all.clone();
    /// ownership.publish(view);
    /// let report = q.drain_not_owned(&ownership).await;
    /// assert_eq!((report.purged, q.len()), (1, 0));
    /// assert_eq!(ownership.take_drained(), all);
    /// # }
    /// ```
    pub async fn drain_not_owned(&self, ownership: &ShardOwnership) -> DrainReport {
        let started = tokio::time::Instant::now();
        let draining = ownership.view().draining.clone();
        if draining.is_empty() {
            return DrainReport {
                acked: draining,
                purged: 0,
                waited_for: 0,
                took: Duration::ZERO,
            };
        }
        let (purged, waited_for) = {
            let mut core = self.lock();
            (core.purge_not_owned(), core.processing_not_owned())
        };
        loop {
            let finished = self.shared.finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            if self.processing_not_owned() == 0 {
                break;
            }
            finished.await;
        }
        ownership.ack_drained(&draining);
        DrainReport {
            acked: draining,
            purged,
            waited_for,
            took: started.elapsed(),
        }
    }

    /// Locks the core. A panic elsewhere while the lock was held cannot leave the core
    /// half-updated in a way that matters more than losing the queue, so a poisoned lock is
    /// recovered rather than propagated.
    fn lock(&self) -> MutexGuard<'_, Locked<T>> {
        self.shared
            .core
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes whoever needs to react to an add's outcome.
    fn wake_for(&self, outcome: AddOutcome, new_earliest: bool) {
        match outcome {
            AddOutcome::Queued => self.shared.ready.notify_one(),
            // Every waiting worker re-arms its timer to the new earliest deadline, so that
            // no worker is left sleeping past it even if one of them is cancelled.
            AddOutcome::Delayed { .. } if new_earliest => self.shared.ready.notify_waiters(),
            _ => {}
        }
    }

    /// Queues `item` for a worker (W1, client-go's `Add`).
    ///
    /// Deduplicated while queued; if a worker is processing `item`, it is queued again once
    /// that worker calls [`done`](Self::done). Ignored after a shutdown.
    ///
    /// ```
    /// use kinformer_actors::workqueue::AsyncWorkQueue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let q = AsyncWorkQueue::new();
    /// q.add("a");
    /// let a = q.get().await.unwrap();
    /// q.add("a"); // being processed: deferred
    /// assert_eq!(q.len(), 0);
    /// q.done(&a); // queued again
    /// assert_eq!(q.len(), 1);
    /// # }
    /// ```
    pub fn add(&self, item: T) {
        self.add_traced(item, TraceId::NONE);
    }

    /// [`add`](Self::add) for the event `trace` (T5): a named queue records the add as
    /// `added`, `merged` or `dirty`, and the item carries `trace` to the worker that takes
    /// it ([`get_traced`](Self::get_traced)). A key sink calls it with the notification's
    /// trace id. [`TraceId::NONE`]: no traced event caused the add.
    pub fn add_traced(&self, item: T, trace: TraceId) {
        let on = trace::queue_tracing();
        let (outcome, event) = {
            let mut l = self.lock();
            if l.traced(on) {
                let outcome = l.core.add(item.clone(), now());
                (outcome, l.on_add(&item, trace, outcome))
            } else {
                (l.core.add(item, now()), None)
            }
        };
        if let Some(e) = event {
            e.emit();
        }
        self.wake_for(outcome, false);
    }

    /// Queues `item` once `delay` has passed (W2, client-go's `AddAfter`). If the item is
    /// already waiting, the earlier deadline wins. A zero delay is an immediate
    /// [`add`](Self::add). Ignored after a shutdown; delayed items are dropped by a shutdown.
    ///
    /// ```
    /// use std::time::Duration;
    /// use kinformer_actors::workqueue::AsyncWorkQueue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let q = AsyncWorkQueue::new();
    /// q.add_after("a", Duration::from_millis(10));
    /// assert_eq!(q.len(), 0); // not ready yet
    /// assert_eq!(q.get().await, Some("a")); // wakes up after 10 ms
    /// # }
    /// ```
    pub fn add_after(&self, item: T, delay: Duration) {
        self.add_after_traced(item, delay, TraceId::NONE);
    }

    /// [`add_after`](Self::add_after) for the event `trace` (T5): a named queue records a
    /// `delayed` line (or, for a zero delay, what an [`add_traced`](Self::add_traced)
    /// records), and the item taken after the deadline carries `trace`.
    pub fn add_after_traced(&self, item: T, delay: Duration, trace: TraceId) {
        let on = trace::queue_tracing();
        let (outcome, new_earliest, event) = {
            let mut l = self.lock();
            let (outcome, event) = if l.traced(on) {
                let outcome = l.core.add_after(item.clone(), delay, now());
                (outcome, l.on_add(&item, trace, outcome))
            } else {
                (l.core.add_after(item, delay, now()), None)
            };
            (outcome, is_new_earliest(&l.core, outcome), event)
        };
        if let Some(e) = event {
            e.emit();
        }
        self.wake_for(outcome, new_earliest);
    }

    /// Queues `item` after the rate limiter's delay for it, counting one more failure
    /// (W2, client-go's `AddRateLimited`). With the default limiter: 5 ms, 10 ms, 20 ms, …
    /// up to 1000 s per item, and at most 10 qps (burst 100) overall. Ignored after a shutdown.
    ///
    /// ```
    /// use kinformer_actors::workqueue::AsyncWorkQueue;
    /// let q = AsyncWorkQueue::new();
    /// q.add_rate_limited("a");
    /// q.add_rate_limited("a");
    /// assert_eq!(q.num_requeues(&"a"), 2);
    /// q.forget(&"a");
    /// assert_eq!(q.num_requeues(&"a"), 0);
    /// ```
    pub fn add_rate_limited(&self, item: T) {
        let on = trace::queue_tracing();
        let (outcome, new_earliest, event) = {
            let mut l = self.lock();
            let (outcome, event) = if l.traced(on) {
                let requeues = l.core.num_requeues(&item);
                let added = l.core.add_rate_limited(item.clone(), now());
                let line = match added.outcome {
                    AddOutcome::ShuttingDown => None,
                    AddOutcome::NotOwned => Some(QueueLine::DroppedNotOwned),
                    _ => Some(QueueLine::RateLimited {
                        delay: added.delay,
                        requeues,
                    }),
                };
                let event = line.and_then(|op| l.trace.as_ref().map(|t| t.event(&item, op)));
                (added.outcome, event)
            } else {
                (l.core.add_rate_limited(item, now()).outcome, None)
            };
            (outcome, is_new_earliest(&l.core, outcome), event)
        };
        if let Some(e) = event {
            e.emit();
        }
        self.wake_for(outcome, new_earliest);
    }

    /// Resets the rate limiter's failure count for `item`: call it once `item` was processed
    /// successfully. Does not remove `item` from the queue. See
    /// [`add_rate_limited`](Self::add_rate_limited).
    pub fn forget(&self, item: &T) {
        let on = trace::queue_tracing();
        let event = {
            let mut l = self.lock();
            l.core.forget(item);
            if l.traced(on) {
                l.trace.as_ref().map(|t| t.event(item, QueueLine::Forget))
            } else {
                None
            }
        };
        if let Some(e) = event {
            e.emit();
        }
    }

    /// How many times `item` went through [`add_rate_limited`](Self::add_rate_limited) since
    /// it was last [`forget`](Self::forget)-ed.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.lock().num_requeues(item)
    }

    /// Waits for the next item and marks it as being processed (client-go's `Get`): call
    /// [`done`](Self::done) when finished with it. Returns `None` once the queue is shut down
    /// and nothing is left in it (W3): items queued before the shutdown are still handed out.
    ///
    /// Cancel-safe: dropping the future before it completes takes no item.
    ///
    /// ```
    /// use kinformer_actors::workqueue::AsyncWorkQueue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let q = AsyncWorkQueue::new();
    /// q.add(1);
    /// q.shut_down();
    /// assert_eq!(q.get().await, Some(1)); // queued before the shutdown
    /// q.done(&1);
    /// assert_eq!(q.get().await, None);
    /// # }
    /// ```
    pub async fn get(&self) -> Option<T> {
        self.take(WorkerName(None)).await.map(Taken::into_item)
    }

    /// [`get`](Self::get) for the worker numbered `worker` (the caller's own numbering, e.g.
    /// 0..n for n worker tasks; written on the `got` line), with the trace ids the item
    /// carries: the events whose adds were merged into it while it was pending (T5). Start a
    /// [`ReconcileSpan`](crate::trace::ReconcileSpan) with the result.
    ///
    /// ```
    /// use kinformer::{ObjectKey, TraceId};
    /// use kinformer_actors::workqueue::AsyncWorkQueue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let q = AsyncWorkQueue::<ObjectKey>::new().with_name("deployments");
    /// q.add_traced(ObjectKey::new(Some("demo"), "web"), TraceId(7));
    /// let taken = q.get_traced(2).await.unwrap();
    /// assert_eq!(taken.item().to_string(), "demo/web");
    /// assert_eq!(taken.worker(), Some(2));
    /// // The trace ids are kept only while tracing is on (a sink runs or a subscriber wants
    /// // the trace target); here it is off.
    /// assert!(taken.traces().is_empty());
    /// q.done(taken.item());
    /// # }
    /// ```
    pub async fn get_traced(&self, worker: u32) -> Option<Taken<T>> {
        self.take(WorkerName(Some(worker))).await
    }

    async fn take(&self, worker: WorkerName) -> Option<Taken<T>> {
        loop {
            // Registered before looking at the queue, so a wake-up between the look and the
            // wait is not lost.
            let notified = self.shared.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();

            let next_ready_at = {
                let on = trace::queue_tracing();
                let mut l = self.lock();
                let at = now();
                match l.core.get_timed(at) {
                    GetResult::Item((item, waited)) => {
                        let more = !l.core.is_empty();
                        let (traces, event) = if l.traced(on) {
                            l.on_got(&item, waited, at, worker)
                        } else {
                            (Vec::new(), None)
                        };
                        let queue = l.trace.as_ref().map(|t| Arc::clone(&t.name));
                        drop(l);
                        if let Some(e) = event {
                            e.emit();
                        }
                        if more {
                            // Pass the baton: several items may have become ready at once
                            // (delayed items promoted here, or wake-ups that raced).
                            self.shared.ready.notify_one();
                        }
                        return Some(Taken {
                            item,
                            traces,
                            worker: worker.0,
                            queue,
                        });
                    }
                    GetResult::ShutDown => return None,
                    GetResult::Empty => l.core.next_ready_at(),
                }
            };

            match next_ready_at {
                Some(at) => {
                    let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(at));
                    tokio::select! {
                        () = &mut notified => {}
                        () = sleep => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `item` as finished (W1, client-go's `Done`). If it was re-added while being
    /// processed it is queued again now. Completes a pending
    /// [`shut_down_with_drain`](Self::shut_down_with_drain) when it was the last item in
    /// flight. A `done` for an item not being processed does nothing.
    pub fn done(&self, item: &T) {
        let on = trace::queue_tracing();
        let (requeued, drained, event) = {
            let mut l = self.lock();
            let at = now();
            // The core knows since when it was processed: the `done` line's duration.
            let took = if l.traced(on) {
                l.core.processing_for(item, at)
            } else {
                None
            };
            let requeued = l.core.done(item, at);
            let event = took.and_then(|dur| l.on_done(item, dur, at, requeued));
            (requeued, l.core.is_drained(), event)
        };
        if let Some(e) = event {
            e.emit();
        }
        if requeued {
            self.shared.ready.notify_one();
        }
        if drained {
            self.shared.drained.notify_waiters();
        }
        self.shared.finished.notify_waiters();
    }

    /// Starts shutting down (W3, client-go's `ShutDown`) and returns at once: later adds are
    /// ignored, delayed items are dropped, workers blocked in [`get`](Self::get) wake up, take
    /// what is still queued and then get `None`. Also ends the wait of a pending
    /// [`shut_down_with_drain`](Self::shut_down_with_drain).
    ///
    /// ```
    /// use kinformer_actors::workqueue::AsyncWorkQueue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let q: AsyncWorkQueue<u32> = AsyncWorkQueue::new();
    /// let worker = tokio::spawn({
    ///     let q = q.clone();
    ///     async move { q.get().await }
    /// });
    /// q.shut_down();
    /// assert_eq!(worker.await.unwrap(), None);
    /// q.add(1); // ignored
    /// assert!(q.is_empty());
    /// # }
    /// ```
    pub fn shut_down(&self) {
        self.lock().shut_down();
        self.shared.ready.notify_waiters();
        self.shared.drained.notify_waiters();
    }

    /// Shuts down like [`shut_down`](Self::shut_down), then waits until no item is being
    /// processed, i.e. every item handed out by [`get`](Self::get) is [`done`](Self::done)
    /// (W3, client-go's `ShutDownWithDrain`). As in client-go, items still queued may remain
    /// (workers keep taking them until `get` returns `None`). A concurrent
    /// [`shut_down`](Self::shut_down) ends the wait early.
    ///
    /// ```
    /// use kinformer_actors::workqueue::AsyncWorkQueue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let q = AsyncWorkQueue::new();
    /// q.add("a");
    /// let a = q.get().await.unwrap();
    /// let worker = tokio::spawn({
    ///     let q = q.clone();
    ///     async move { q.done(&a) }
    /// });
    /// q.shut_down_with_drain().await; // returns once "a" is done
    /// worker.await.unwrap();
    /// assert_eq!(q.metrics().processing, 0);
    /// # }
    /// ```
    pub async fn shut_down_with_drain(&self) {
        self.lock().shut_down_with_drain();
        self.shared.ready.notify_waiters();
        loop {
            let drained = self.shared.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.lock().is_drained() {
                return;
            }
            drained.await;
        }
    }

    /// True after [`shut_down`](Self::shut_down) or
    /// [`shut_down_with_drain`](Self::shut_down_with_drain).
    pub fn is_shutting_down(&self) -> bool {
        self.lock().is_shutting_down()
    }

    /// Items ready for a worker (client-go's `Len`): neither delayed items nor items being
    /// processed are counted.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no item is ready for a worker.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// A snapshot of the metrics (W4): depth, adds, retries, queue latency, work duration,
    /// unfinished work, items processing and waiting, and (W5) keys dropped as not owned.
    ///
    /// ```
    /// use kinformer_actors::workqueue::AsyncWorkQueue;
    /// let q = AsyncWorkQueue::new();
    /// q.add("a");
    /// q.add("a");
    /// q.add("b");
    /// let m = q.metrics();
    /// assert_eq!((m.depth, m.adds), (2, 2));
    /// ```
    pub fn metrics(&self) -> WorkQueueMetrics {
        self.lock().metrics(now())
    }
}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> AsyncWorkQueue<T> {
    /// The type-erased, weak view of this queue that [`Telemetry`] reads at
    /// scrape time (a dropped queue yields no series).
    pub(crate) fn probe(&self) -> Weak<dyn WorkQueueProbe> {
        let weak: Weak<Shared<T>> = Arc::downgrade(&self.shared);
        weak
    }
}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> WorkQueueProbe for Shared<T> {
    fn metrics(&self) -> WorkQueueMetrics {
        self.core
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .metrics(now())
    }
}

// Defined here rather than in `telemetry/metrics.rs`, so that telemetry never imports the
// workqueue (it reads queues through their `WorkQueueProbe`).
impl Telemetry {
    /// Registers a workqueue under `name` (the `name` label of client-go's `workqueue_*`
    /// series). Its series go away when the queue is dropped. Fails if a live queue already
    /// has that name.
    pub fn register_workqueue<T>(
        &self,
        name: &str,
        queue: &AsyncWorkQueue<T>,
    ) -> Result<(), TelemetryError>
    where
        T: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
    {
        self.register_queue_probe(name, queue.probe())
    }
}

impl<T: Clone + Eq + Hash> Locked<T> {
    /// The traces a taken item carries, and its `got` line.
    fn on_got(
        &mut self,
        item: &T,
        waited: Duration,
        at: Instant,
        worker: WorkerName,
    ) -> (Vec<TraceId>, Option<QueueEvent>) {
        // Its delayed add fired (it is not waiting any more): those traces caused it too.
        let delayed_fired = self.core.ready_at(item).is_none();
        let Some(t) = self.trace.as_mut() else {
            return (Vec::new(), None);
        };
        let e = t.items.entry(item.clone()).or_default();
        let mut traces = std::mem::take(&mut e.pending);
        let mut untraced = std::mem::take(&mut e.untraced);
        if delayed_fired {
            for d in e.delayed.drain(..) {
                push_unique(&mut traces, d, &mut untraced);
            }
        }
        let wait = e
            .requeued_at
            .take()
            .map_or(waited, |r| at.saturating_duration_since(r));
        let event = t.event(
            item,
            QueueLine::Got {
                traces: traces.clone(),
                untraced,
                wait,
                worker,
            },
        );
        (traces, Some(event))
    }

    /// The `done` line; forgets the item's traces unless it is queued again or still delayed.
    fn on_done(
        &mut self,
        item: &T,
        dur: Duration,
        at: Instant,
        requeued: bool,
    ) -> Option<QueueEvent> {
        let t = self.trace.as_mut()?;
        if let Some(e) = t.items.get_mut(item) {
            if requeued {
                e.requeued_at = Some(at);
            } else if e.delayed.is_empty() {
                t.items.remove(item);
            } else {
                e.pending.clear();
            }
        }
        Some(t.event(item, QueueLine::Done { dur, requeued }))
    }
}

/// True if a delayed add made its item the earliest waiting one (waiting workers must re-arm).
fn is_new_earliest<T: Clone + Eq + Hash>(core: &core::WorkQueue<T>, outcome: AddOutcome) -> bool {
    match outcome {
        AddOutcome::Delayed { ready_at } => core.next_ready_at() == Some(ready_at),
        _ => false,
    }
}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> Default for AsyncWorkQueue<T> {
    /// Same as [`AsyncWorkQueue::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for AsyncWorkQueue<T> {
    /// Another handle on the same queue.
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T: Clone + Eq + Hash> fmt::Debug for AsyncWorkQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.shared.core.try_lock() {
            Ok(l) => fmt::Debug::fmt(&l.core, f),
            Err(std::sync::TryLockError::Poisoned(p)) => fmt::Debug::fmt(&p.into_inner().core, f),
            Err(std::sync::TryLockError::WouldBlock) => {
                f.debug_struct("AsyncWorkQueue").finish_non_exhaustive()
            }
        }
    }
}

/// Lets an informer feed the queue: `informer.add_key_sink(queue.clone(), mapper, config)`
/// [`add`](AsyncWorkQueue::add)s the key of every notified object.
///
/// ```
/// use kinformer::ObjectKey;
/// use kinformer_actors::{EnqueueKeys, workqueue::AsyncWorkQueue};
///
/// let q: AsyncWorkQueue<ObjectKey> = AsyncWorkQueue::new();
/// q.enqueue(ObjectKey::new(Some("default"), "web"));
/// assert_eq!(q.len(), 1);
/// ```
impl EnqueueKeys for AsyncWorkQueue<ObjectKey> {
    fn enqueue(&self, key: ObjectKey) {
        self.add(key);
    }

    /// [`add_traced`](AsyncWorkQueue::add_traced): the key carries the notification's trace
    /// id to the worker (T5).
    fn enqueue_traced(&self, key: ObjectKey, trace: TraceId) {
        self.add_traced(key, trace);
    }
}

#[cfg(test)]
mod tests {
    use kinformer::shard::{ShardField, ShardSelector};

    use super::*;

    /// Two namespaces in different halves of the hash space, and the halves. The varying part
    /// comes first: FNV-1a barely moves the high bits for a change in the last bytes, so
    /// `ns-0`…`ns-99` all land in the lower half.
    fn two_halves() -> (ShardSelector, ShardSelector, &'static str, &'static str) {
        let low = ShardSelector::nth_of(ShardField::Namespace, 0, 2).unwrap();
        let high = ShardSelector::nth_of(ShardField::Namespace, 1, 2).unwrap();
        let names = (0..100).map(|i| format!("{i:02}-ns")).collect::<Vec<_>>();
        let pick = |sel: &ShardSelector| -> &'static str {
            let n = names.iter().find(|n| sel.matches_value(n)).unwrap();
            Box::leak(n.clone().into_boxed_str())
        };
        let (a, b) = (pick(&low), pick(&high));
        (low, high, a, b)
    }

    fn key(ns: &str, name: &str) -> ObjectKey {
        ObjectKey::new(Some(ns), name)
    }

    fn ns_of(k: &ObjectKey) -> &str {
        k.split().0.unwrap_or_default()
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn drain_purges_waits_for_in_flight_keys_then_acks() {
        let (low, high, a, b) = two_halves();
        let all = ShardSelector::everything(ShardField::Namespace);
        let ownership = ShardOwnership::fixed(all.clone());
        let q = AsyncWorkQueue::new().with_owner(ownership.clone(), ns_of);
        q.add(key(a, "in-flight"));
        let held = q.get().await.unwrap();
        q.add(key(a, "in-flight")); // re-added while processed
        q.add(key(a, "queued"));
        q.add_after(key(a, "delayed"), Duration::from_secs(1));
        q.add(key(b, "stays"));

        let mut view = (*ownership.view()).clone();
        view.draining = low.clone();
        ownership.publish(view);
        q.add(key(a, "late")); // refused at once: draining is not owned
        let drain = tokio::spawn({
            let (q, o) = (q.clone(), ownership.clone());
            async move { q.drain_not_owned(&o).await }
        });
        tokio::task::yield_now().await;
        assert!(!drain.is_finished(), "the in-flight key is not done yet");
        assert!(ownership.take_drained().is_empty(), "no ack before done");
        tokio::time::advance(Duration::from_millis(30)).await;
        q.done(&held);
        let report = drain.await.unwrap();
        assert_eq!(report.acked, low);
        assert_eq!((report.purged, report.waited_for), (3, 1));
        assert_eq!(report.took, Duration::from_millis(30));
        assert_eq!(ownership.take_drained(), low);
        assert_eq!(q.len(), 1, "only the other half's key is left");
        assert_eq!(q.get().await, Some(key(b, "stays")));
        assert_eq!(q.metrics().dropped_not_owned, 4);
        let _ = high;
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn drain_without_draining_ranges_acks_nothing() {
        let ownership = ShardOwnership::fixed(ShardSelector::everything(ShardField::Namespace));
        let q = AsyncWorkQueue::new().with_owner(ownership.clone(), ns_of);
        q.add(key("x", "y"));
        let report = q.drain_not_owned(&ownership).await;
        assert_eq!((report.purged, q.len()), (0, 1));
        assert!(report.acked.is_empty() && ownership.take_drained().is_empty());
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn an_owned_in_flight_key_does_not_hold_up_a_drain() {
        let (low, _high, a, b) = two_halves();
        let ownership = ShardOwnership::fixed(ShardSelector::everything(ShardField::Namespace));
        let q = AsyncWorkQueue::new().with_owner(ownership.clone(), ns_of);
        q.add(key(b, "busy"));
        let _busy = q.get().await.unwrap();
        q.add(key(a, "queued"));
        let mut view = (*ownership.view()).clone();
        view.draining = low.clone();
        ownership.publish(view);
        let report = q.drain_not_owned(&ownership).await;
        assert_eq!((report.purged, report.waited_for), (1, 0));
        assert_eq!(ownership.take_drained(), low);
    }
}
