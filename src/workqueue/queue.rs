//! [`WorkQueue`]: the combined dedup (W1), delaying (W2), rate-limiting (W2) queue with
//! shutdown (W3) and metrics (W4).

use std::{
    collections::{HashMap, VecDeque},
    fmt,
    hash::Hash,
    time::{Duration, Instant},
};

use super::{
    delaying::{Waiting, deadline},
    metrics::{DurationHistogram, WorkQueueMetrics},
    rate_limiter::{RateLimiter, default_controller_rate_limiter},
};

/// What an add did; tells the front whether to wake a worker or re-arm its timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "an AddOutcome says whether a worker should be woken"]
pub enum AddOutcome {
    /// The item entered the queue: a worker can [`get`](WorkQueue::get) it now.
    Queued,
    /// The item was already queued and not yet handed out: nothing changed.
    AlreadyQueued,
    /// The item is being processed: it is marked dirty and will be queued again when
    /// [`done`](WorkQueue::done) is called for it (repeated adds still queue it once).
    Deferred,
    /// The item waits until `ready_at` (its earliest deadline: an earlier pending deadline
    /// is kept). The front should wake at [`next_ready_at`](WorkQueue::next_ready_at).
    Delayed {
        /// When the item becomes ready.
        ready_at: Instant,
    },
    /// The queue is shutting down: the item was ignored.
    ShuttingDown,
    /// The queue's owner filter refused the item (a sharded controller's replica does not own
    /// its object): ignored, counted in
    /// [`WorkQueueMetrics::dropped_not_owned`](super::WorkQueueMetrics::dropped_not_owned).
    NotOwned,
}

impl AddOutcome {
    /// True when the item is ready for a worker now ([`AddOutcome::Queued`]).
    pub fn is_ready(&self) -> bool {
        matches!(self, AddOutcome::Queued)
    }

    /// False only when the add was ignored: the queue is shutting down, or its owner filter
    /// refused the item.
    pub fn is_accepted(&self) -> bool {
        !matches!(self, AddOutcome::ShuttingDown | AddOutcome::NotOwned)
    }
}

/// The result of [`WorkQueue::add_rate_limited`]: the limiter's delay and what the add did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "the outcome says whether a worker should be woken"]
pub struct RateLimitedAdd {
    /// The delay the rate limiter asked for (zero when shutting down: the limiter is not
    /// consulted then).
    pub delay: Duration,
    /// What the delayed add did ([`AddOutcome::Queued`] etc. for a zero delay).
    pub outcome: AddOutcome,
}

/// The result of [`WorkQueue::get`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GetResult<T> {
    /// An item, now being processed: call [`done`](WorkQueue::done) when finished.
    Item(T),
    /// Nothing is ready; not shutting down. Wait for an add or for
    /// [`next_ready_at`](WorkQueue::next_ready_at).
    Empty,
    /// Shutting down and nothing is left in the queue: the worker should exit.
    ShutDown,
}

impl<T> GetResult<T> {
    /// The item, if any.
    pub fn item(self) -> Option<T> {
        match self {
            GetResult::Item(item) => Some(item),
            _ => None,
        }
    }
}

/// Which items a queue accepts: true for an item whose object this replica owns (see
/// [`WorkQueue::set_owner_filter`]).
pub type OwnerFilter<T> = Box<dyn Fn(&T) -> bool + Send + Sync>;

#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    dropped_not_owned: u64,
    adds: u64,
    retries: u64,
    queue_latency: DurationHistogram,
    work_duration: DurationHistogram,
}

/// client-go's rate-limiting delaying workqueue, as a clock-injected state machine.
///
/// Three sets, as in client-go's `Type`: the FIFO *queue* of items ready for a worker, the
/// *dirty* set of items that need processing (the queued ones plus those re-added while being
/// processed), and the *processing* set of items handed out by [`get`](Self::get) and not yet
/// [`done`](Self::done). The queue is always exactly `dirty \ processing`, in order of the add
/// that made each item dirty, so an item is queued at most once and never handed to two
/// workers at once. Delayed items wait in a separate set until their deadline.
///
/// Nothing here blocks, sleeps or reads a clock: every method that depends on time takes
/// `now`. An async front holds the queue behind a mutex (or in an actor), wakes workers when
/// an add returns [`AddOutcome::Queued`] or [`done`](Self::done) returns true, and sleeps until
/// [`next_ready_at`](Self::next_ready_at) to [`promote_ready`](Self::promote_ready) delayed
/// items ([`get`](Self::get) promotes them as well).
///
/// ```
/// use std::time::{Duration, Instant};
/// use kinformer::workqueue::{AddOutcome, GetResult, WorkQueue};
///
/// let t0 = Instant::now();
/// let mut q = WorkQueue::with_default_rate_limiter();
/// assert_eq!(q.add("a", t0), AddOutcome::Queued);
/// assert_eq!(q.add("a", t0), AddOutcome::AlreadyQueued);
///
/// assert_eq!(q.get(t0), GetResult::Item("a"));
/// assert_eq!(q.add("a", t0), AddOutcome::Deferred); // being processed: queued again on done
/// assert!(q.done(&"a", t0));
///
/// // A failing item is retried after the limiter's backoff.
/// assert_eq!(q.get(t0), GetResult::Item("a"));
/// let r = q.add_rate_limited("a", t0);
/// assert_eq!(r.delay, Duration::from_millis(5));
/// assert!(!q.done(&"a", t0));
/// assert_eq!(q.get(t0), GetResult::Empty);
/// assert_eq!(q.next_ready_at(), Some(t0 + Duration::from_millis(5)));
/// assert_eq!(q.get(t0 + Duration::from_millis(5)), GetResult::Item("a"));
/// q.forget(&"a");
/// assert!(!q.done(&"a", t0 + Duration::from_millis(6)));
///
/// q.shut_down();
/// assert_eq!(q.get(t0), GetResult::ShutDown);
/// ```
pub struct WorkQueue<T> {
    queue: VecDeque<T>,
    /// Item → instant of the add that made it dirty (queue latency starts there).
    dirty: HashMap<T, Instant>,
    /// Item → instant it was handed out (work duration starts there).
    processing: HashMap<T, Instant>,
    waiting: Waiting<T>,
    rate_limiter: Box<dyn RateLimiter<T> + Send>,
    shutting_down: bool,
    drain: bool,
    counters: Counters,
    /// None: every item is accepted (an unsharded controller).
    owner: Option<OwnerFilter<T>>,
}

impl<T: Clone + Eq + Hash + Send + 'static> WorkQueue<T> {
    /// A queue with client-go's default controller rate limiter: the max of a per-item
    /// exponential backoff (5 ms doubling to 1000 s) and a 10 qps / burst 100 token bucket.
    pub fn with_default_rate_limiter() -> Self {
        Self::new(Box::new(default_controller_rate_limiter()))
    }
}

impl<T: Clone + Eq + Hash + Send + 'static> Default for WorkQueue<T> {
    /// Same as [`WorkQueue::with_default_rate_limiter`].
    fn default() -> Self {
        Self::with_default_rate_limiter()
    }
}

impl<T: Clone + Eq + Hash> WorkQueue<T> {
    /// An empty queue whose [`add_rate_limited`](Self::add_rate_limited) delays come from
    /// `rate_limiter`.
    pub fn new(rate_limiter: Box<dyn RateLimiter<T> + Send>) -> Self {
        Self {
            queue: VecDeque::new(),
            dirty: HashMap::new(),
            processing: HashMap::new(),
            waiting: Waiting::new(),
            rate_limiter,
            shutting_down: false,
            drain: false,
            counters: Counters::default(),
            owner: None,
        }
    }

    /// Sets (or with `None` removes) the owner filter of a sharded controller's replica: an
    /// item the filter refuses is not added (`add`, `add_after`, `add_rate_limited` answer
    /// [`AddOutcome::NotOwned`]), a delayed item it refuses at its deadline is dropped, and an
    /// item re-added while processed is not queued again by [`done`](Self::done) if refused
    /// by then. The filter is read at each of those calls, so it may follow ownership that
    /// changes; items already queued are removed only by
    /// [`purge_not_owned`](Self::purge_not_owned). Every item dropped this way is counted in
    /// [`WorkQueueMetrics::dropped_not_owned`] and its rate-limiter history forgotten.
    pub fn set_owner_filter(&mut self, owner: Option<OwnerFilter<T>>) {
        self.owner = owner;
    }

    /// Whether the owner filter accepts `item` (always true without a filter).
    pub fn is_owned(&self, item: &T) -> bool {
        self.owner.as_ref().is_none_or(|f| f(item))
    }

    /// Counts a dropped item and forgets its failures: a replica that owns it again later
    /// starts its backoff afresh, as a new owner would.
    fn drop_not_owned(&mut self, item: &T) {
        self.counters.dropped_not_owned = self.counters.dropped_not_owned.saturating_add(1);
        self.rate_limiter.forget(item);
    }

    /// Removes every queued or delayed item the owner filter refuses now, and un-marks items
    /// being processed that were re-added, so their [`done`](Self::done) does not queue them
    /// again (the worker holding one finishes it). Call it when ownership shrinks. Returns how
    /// many items were removed (each counted in [`WorkQueueMetrics::dropped_not_owned`]).
    pub fn purge_not_owned(&mut self) -> usize {
        let Some(owner) = self.owner.take() else {
            return 0;
        };
        let mut gone: Vec<T> = Vec::new();
        self.queue.retain(|item| {
            let keep = owner(item);
            if !keep {
                gone.push(item.clone());
            }
            keep
        });
        for item in &gone {
            self.dirty.remove(item);
        }
        let rearmed: Vec<T> = self
            .dirty
            .keys()
            .filter(|item| self.processing.contains_key(*item) && !owner(item))
            .cloned()
            .collect();
        for item in &rearmed {
            self.dirty.remove(item);
        }
        gone.extend(rearmed);
        gone.extend(self.waiting.remove_unless(|item| owner(item)));
        self.owner = Some(owner);
        for item in &gone {
            self.drop_not_owned(item);
        }
        gone.len()
    }

    /// Items being processed that the owner filter refuses now: what a drain waits for (0
    /// without a filter).
    pub fn processing_not_owned(&self) -> usize {
        match &self.owner {
            None => 0,
            Some(owner) => self.processing.keys().filter(|i| !owner(i)).count(),
        }
    }

    /// Marks `item` as needing processing (W1).
    ///
    /// - shutting down: ignored ([`AddOutcome::ShuttingDown`]);
    /// - already queued: no-op ([`AddOutcome::AlreadyQueued`]);
    /// - being processed: marked dirty, queued again by [`done`](Self::done)
    ///   ([`AddOutcome::Deferred`]);
    /// - otherwise appended to the queue ([`AddOutcome::Queued`]).
    ///
    /// A delayed copy of the item, if any, keeps waiting and will add it again at its deadline
    /// (as in client-go).
    pub fn add(&mut self, item: T, now: Instant) -> AddOutcome {
        if self.shutting_down {
            return AddOutcome::ShuttingDown;
        }
        if !self.is_owned(&item) {
            self.drop_not_owned(&item);
            return AddOutcome::NotOwned;
        }
        self.add_unchecked(item, now)
    }

    /// [`add`](Self::add) without the shutdown check; `at` starts the queue latency clock.
    fn add_unchecked(&mut self, item: T, at: Instant) -> AddOutcome {
        if self.dirty.contains_key(&item) {
            return if self.processing.contains_key(&item) {
                AddOutcome::Deferred
            } else {
                AddOutcome::AlreadyQueued
            };
        }
        self.counters.adds = self.counters.adds.saturating_add(1);
        let processing = self.processing.contains_key(&item);
        if processing {
            self.dirty.insert(item, at);
            AddOutcome::Deferred
        } else {
            self.dirty.insert(item.clone(), at);
            self.queue.push_back(item);
            AddOutcome::Queued
        }
    }

    /// Adds `item` once `delay` has passed (W2, client-go's `AddAfter`).
    ///
    /// A zero delay is an immediate [`add`](Self::add). Otherwise the item waits until
    /// `now + delay`; if it is already waiting, only the earlier of the two deadlines is kept.
    /// Waiting does not affect the item's queued or processing state. Ignored while shutting
    /// down; otherwise counted as a retry in the metrics.
    pub fn add_after(&mut self, item: T, delay: Duration, now: Instant) -> AddOutcome {
        if self.shutting_down {
            return AddOutcome::ShuttingDown;
        }
        if !self.is_owned(&item) {
            self.drop_not_owned(&item);
            return AddOutcome::NotOwned;
        }
        self.counters.retries = self.counters.retries.saturating_add(1);
        if delay.is_zero() {
            return self.add_unchecked(item, now);
        }
        let ready_at = self.waiting.insert(item, deadline(now, delay));
        AddOutcome::Delayed { ready_at }
    }

    /// Adds `item` after the rate limiter's delay for it (W2, client-go's `AddRateLimited`):
    /// the limiter records one more failure of the item.
    ///
    /// While shutting down the item is ignored and, unlike client-go, the limiter is not
    /// consulted (its failure count does not grow).
    pub fn add_rate_limited(&mut self, item: T, now: Instant) -> RateLimitedAdd {
        if self.shutting_down {
            return RateLimitedAdd {
                delay: Duration::ZERO,
                outcome: AddOutcome::ShuttingDown,
            };
        }
        if !self.is_owned(&item) {
            // Not consulted either: the failure would be forgotten at once.
            self.drop_not_owned(&item);
            return RateLimitedAdd {
                delay: Duration::ZERO,
                outcome: AddOutcome::NotOwned,
            };
        }
        let delay = self.rate_limiter.when(&item, now);
        let outcome = self.add_after(item, delay, now);
        RateLimitedAdd { delay, outcome }
    }

    /// Resets the rate limiter's failure count for `item` (call it when processing
    /// succeeded). Does not remove the item from the queue or the waiting set.
    pub fn forget(&mut self, item: &T) {
        self.rate_limiter.forget(item);
    }

    /// The rate limiter's failure count for `item`.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.rate_limiter.num_requeues(item)
    }

    /// Hands the next ready item to a worker (client-go's `Get`, minus the blocking).
    ///
    /// First promotes delayed items due at `now`. Then pops the head of the queue and marks it
    /// as processing: it will not be handed out again before [`done`](Self::done). Returns
    /// [`GetResult::Empty`] when nothing is ready, and [`GetResult::ShutDown`] when shutting
    /// down *and* the queue is empty: after a shutdown, items already queued (and items
    /// re-queued by `done`) are still handed out, exactly as client-go's `Get` does.
    pub fn get(&mut self, now: Instant) -> GetResult<T> {
        match self.get_timed(now) {
            GetResult::Item((item, _)) => GetResult::Item(item),
            GetResult::Empty => GetResult::Empty,
            GetResult::ShutDown => GetResult::ShutDown,
        }
    }

    /// [`get`](Self::get), also saying how long the item waited: its queue latency (W4),
    /// from the add that made it dirty (a delayed item's deadline) to `now`. A trace (T5)
    /// writes it on the worker's `got` line.
    pub fn get_timed(&mut self, now: Instant) -> GetResult<(T, Duration)> {
        self.promote_ready(now);
        let Some(item) = self.queue.pop_front() else {
            return if self.shutting_down {
                GetResult::ShutDown
            } else {
                GetResult::Empty
            };
        };
        let mut waited = Duration::ZERO;
        if let Some(added) = self.dirty.remove(&item) {
            waited = now.saturating_duration_since(added);
            self.counters.queue_latency.observe(waited);
        }
        self.processing.insert(item.clone(), now);
        GetResult::Item((item, waited))
    }

    /// Marks `item` as finished (client-go's `Done`).
    ///
    /// How long `item` has been processed (since the `get` that took it), if it is.
    pub fn processing_for(&self, item: &T, now: Instant) -> Option<Duration> {
        self.processing
            .get(item)
            .map(|started| now.saturating_duration_since(*started))
    }

    /// If it was re-added while being processed, it goes back to the tail of the queue and
    /// this returns true (wake a worker). `done` for an item that is not being processed is a
    /// no-op returning false (client-go would queue a dirty item twice there).
    pub fn done(&mut self, item: &T, now: Instant) -> bool {
        let Some(started) = self.processing.remove(item) else {
            return false;
        };
        self.counters
            .work_duration
            .observe(now.saturating_duration_since(started));
        if !self.dirty.contains_key(item) {
            return false;
        }
        if !self.is_owned(item) {
            self.dirty.remove(item);
            self.drop_not_owned(item);
            return false;
        }
        self.queue.push_back(item.clone());
        true
    }

    /// Moves every delayed item whose deadline is at or before `now` into the queue, earliest
    /// deadline first, as [`add`](Self::add)s stamped with their deadline. Returns how many
    /// items became ready for a worker (items already queued or being processed are not
    /// counted).
    pub fn promote_ready(&mut self, now: Instant) -> usize {
        let mut ready = 0;
        while let Some((item, at)) = self.waiting.pop_due(now) {
            if !self.is_owned(&item) {
                self.drop_not_owned(&item);
                continue;
            }
            if self.add_unchecked(item, at).is_ready() {
                ready += 1;
            }
        }
        ready
    }

    /// The earliest deadline of the delayed items: when the front should next call
    /// [`promote_ready`](Self::promote_ready) (or [`get`](Self::get)). None when nothing is
    /// delayed. It may be in the past if promotion is late.
    pub fn next_ready_at(&self) -> Option<Instant> {
        self.waiting.next_ready_at()
    }

    /// The deadline of `item` if it is delayed.
    pub fn ready_at(&self, item: &T) -> Option<Instant> {
        self.waiting.ready_at(item)
    }

    /// Starts shutting down (W3, client-go's `ShutDown`).
    ///
    /// - every later add (`add`, `add_after`, `add_rate_limited`) is ignored and reports
    ///   [`AddOutcome::ShuttingDown`];
    /// - delayed items are dropped (client-go's delaying queue stops its waiting loop and
    ///   never adds them);
    /// - items already queued are still handed out by [`get`](Self::get), and an item re-added
    ///   while being processed is still queued again by [`done`](Self::done); once the queue
    ///   is empty `get` returns [`GetResult::ShutDown`];
    /// - cancels the wait of an earlier [`shut_down_with_drain`](Self::shut_down_with_drain):
    ///   [`is_drained`](Self::is_drained) becomes true at once.
    pub fn shut_down(&mut self) {
        self.drain = false;
        self.start_shutdown();
    }

    /// Like [`shut_down`](Self::shut_down), but the front waits, polling
    /// [`is_drained`](Self::is_drained) after each [`done`](Self::done), until no item is
    /// being processed (client-go's `ShutDownWithDrain`).
    pub fn shut_down_with_drain(&mut self) {
        self.drain = true;
        self.start_shutdown();
    }

    fn start_shutdown(&mut self) {
        self.shutting_down = true;
        self.waiting.clear();
    }

    /// True once a shutdown no longer needs waiting for: shutting down and either no item is
    /// being processed or the drain was not asked for (plain [`shut_down`](Self::shut_down),
    /// possibly after [`shut_down_with_drain`](Self::shut_down_with_drain)). This is exactly
    /// when client-go's `ShutDownWithDrain` returns; as there, items may still be queued
    /// ([`get`](Self::get) keeps handing them out until it returns [`GetResult::ShutDown`]).
    pub fn is_drained(&self) -> bool {
        self.shutting_down && (!self.drain || self.processing.is_empty())
    }

    /// True after [`shut_down`](Self::shut_down) or
    /// [`shut_down_with_drain`](Self::shut_down_with_drain).
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// Items ready for a worker (client-go's `Len`): neither delayed nor processing items.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when no item is ready for a worker.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Items handed out and not yet done.
    pub fn processing(&self) -> usize {
        self.processing.len()
    }

    /// True if `item` is handed out and not yet done.
    pub fn is_processing(&self, item: &T) -> bool {
        self.processing.contains_key(item)
    }

    /// Delayed items not yet promoted.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// A snapshot of the metrics (W4); `now` measures the work in progress.
    pub fn metrics(&self, now: Instant) -> WorkQueueMetrics {
        let (unfinished_work, longest_running_processor) = self.processing.values().fold(
            (Duration::ZERO, Duration::ZERO),
            |(sum, longest), started| {
                let d = now.saturating_duration_since(*started);
                (sum.saturating_add(d), longest.max(d))
            },
        );
        WorkQueueMetrics {
            depth: self.dirty.len(),
            adds: self.counters.adds,
            retries: self.counters.retries,
            queue_latency: self.counters.queue_latency,
            work_duration: self.counters.work_duration,
            unfinished_work,
            longest_running_processor,
            processing: self.processing.len(),
            waiting: self.waiting.len(),
            dropped_not_owned: self.counters.dropped_not_owned,
        }
    }
}

impl<T: Clone + Eq + Hash> fmt::Debug for WorkQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueue")
            .field("queued", &self.queue.len())
            .field("dirty", &self.dirty.len())
            .field("processing", &self.processing.len())
            .field("waiting", &self.waiting.len())
            .field("shutting_down", &self.shutting_down)
            .field("drain", &self.drain)
            .field("owner_filter", &self.owner.is_some())
            .finish_non_exhaustive()
    }
}
