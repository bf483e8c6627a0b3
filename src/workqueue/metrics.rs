//! Workqueue metrics (docs/semantics.md W4), computed from the injected clock.
//!
//! The same quantities as client-go's `workqueue/metrics.go`: depth, adds, queue latency
//! (add → get), work duration (get → done), retries, unfinished work and the longest running
//! processor. Histograms use client-go's buckets (`ExponentialBuckets(10e-9, 10, 10)`: 10 ns
//! to 10 s) plus an overflow bucket, and also keep count, sum and max.

use std::time::Duration;

/// Upper bounds (inclusive) of the [`DurationHistogram`] buckets: 10 ns, 100 ns, … 10 s, as in
/// client-go. A last, unbounded bucket catches longer durations.
pub const HISTOGRAM_BOUNDS: [Duration; 10] = [
    Duration::from_nanos(10),
    Duration::from_nanos(100),
    Duration::from_micros(1),
    Duration::from_micros(10),
    Duration::from_micros(100),
    Duration::from_millis(1),
    Duration::from_millis(10),
    Duration::from_millis(100),
    Duration::from_secs(1),
    Duration::from_secs(10),
];

/// Number of buckets of a [`DurationHistogram`]: one per bound plus the overflow bucket.
pub const HISTOGRAM_BUCKETS: usize = HISTOGRAM_BOUNDS.len() + 1;

/// A small fixed histogram of durations, with count, sum and max.
///
/// ```
/// use std::time::Duration;
/// use kinformer::workqueue::DurationHistogram;
///
/// let mut h = DurationHistogram::default();
/// h.observe(Duration::from_micros(50));
/// h.observe(Duration::from_secs(60));
/// assert_eq!(h.count, 2);
/// assert_eq!(h.max, Duration::from_secs(60));
/// assert_eq!(h.buckets[4], 1); // ≤ 100 µs
/// assert_eq!(h.buckets[10], 1); // > 10 s
/// assert_eq!(h.cumulative()[10], 2);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurationHistogram {
    /// Observations.
    pub count: u64,
    /// Sum of all observations (saturating).
    pub sum: Duration,
    /// Largest observation.
    pub max: Duration,
    /// Observations per bucket (not cumulative): `buckets[i]` counts durations in
    /// `(HISTOGRAM_BOUNDS[i-1], HISTOGRAM_BOUNDS[i]]`; the last counts those above 10 s.
    pub buckets: [u64; HISTOGRAM_BUCKETS],
}

impl DurationHistogram {
    /// Records one duration.
    pub fn observe(&mut self, d: Duration) {
        self.count = self.count.saturating_add(1);
        self.sum = self.sum.saturating_add(d);
        self.max = self.max.max(d);
        let i = HISTOGRAM_BOUNDS.partition_point(|bound| *bound < d);
        self.buckets[i] = self.buckets[i].saturating_add(1);
    }

    /// Mean observation, None when empty.
    pub fn mean(&self) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        let nanos = self.sum.as_nanos() / u128::from(self.count);
        // The mean is at most the max, which is a Duration.
        Some(Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)).min(self.max))
    }

    /// Cumulative bucket counts (Prometheus style: `[i]` counts observations ≤ bound `i`;
    /// the last equals `count` unless a counter saturated).
    pub fn cumulative(&self) -> [u64; HISTOGRAM_BUCKETS] {
        let mut out = self.buckets;
        for i in 1..out.len() {
            out[i] = out[i].saturating_add(out[i - 1]);
        }
        out
    }
}

/// A snapshot of a [`WorkQueue`](super::WorkQueue)'s metrics, see
/// [`WorkQueue::metrics`](super::WorkQueue::metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkQueueMetrics {
    /// client-go's `depth` gauge: items waiting to be handed out, i.e. the queue length plus
    /// the items re-added while being processed (they are queued again on `done`). Delayed
    /// items are not counted (see `waiting`).
    pub depth: usize,
    /// client-go's `adds_total`: adds that were not deduplicated (including delayed items
    /// becoming ready), since creation.
    pub adds: u64,
    /// client-go's `retries_total`: calls to `add_after` / `add_rate_limited` accepted while
    /// not shutting down.
    pub retries: u64,
    /// client-go's `queue_duration_seconds`: time from the add that queued an item to the
    /// `get` that handed it out. For a delayed item the clock starts at its deadline.
    pub queue_latency: DurationHistogram,
    /// client-go's `work_duration_seconds`: time from `get` to `done`.
    pub work_duration: DurationHistogram,
    /// client-go's `unfinished_work_seconds`: total time the items being processed have been
    /// in progress so far.
    pub unfinished_work: Duration,
    /// client-go's `longest_running_processor_seconds`: how long the oldest item being
    /// processed has been in progress.
    pub longest_running_processor: Duration,
    /// Items being processed right now.
    pub processing: usize,
    /// Delayed items not yet due.
    pub waiting: usize,
    /// Adds refused because the queue's owner filter refused the item (a sharded controller's
    /// key whose object this replica does not own), delayed items and re-adds dropped at their
    /// promotion for the same reason, and items removed by
    /// [`purge_not_owned`](super::WorkQueue::purge_not_owned). Not in client-go.
    pub dropped_not_owned: u64,
}
