//! Live counters of the DeltaFifo, Indexer and ProcessorListener actors, shared with the
//! informer handle ([`SharedIndexInformer::fifo_status`](crate::SharedIndexInformer::fifo_status),
//! [`indexer_status`](crate::SharedIndexInformer::indexer_status)) and each
//! [`HandlerRegistration::stats`](crate::HandlerRegistration::stats). Written by the actors,
//! read without locks.

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicU64, Ordering},
};

use std::time::Duration;

use kinformer::{fifo::DeltaFifo, processor::SyncTracker};

use crate::config::OverflowPolicy;

/// Live counters of a DeltaFifo actor, shared with the informer handle.
#[derive(Debug, Default)]
pub struct FifoStatus {
    pub(crate) has_synced: AtomicBool,
    pub(crate) synced_notify: tokio::sync::Notify,
    pub(crate) queued_keys: AtomicU64,
    pub(crate) pending_deltas: AtomicU64,
    pub(crate) peak_pending_deltas: AtomicU64,
    pub(crate) popped: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) writer_waits: AtomicU64,
}

impl FifoStatus {
    /// Publishes the core FIFO's gauges and, the first time it has synced, wakes
    /// [`synced`](Self::synced) waiters (F5).
    pub(crate) fn publish<K>(&self, fifo: &DeltaFifo<K>) {
        let pending = fifo.pending_deltas() as u64;
        self.queued_keys.store(fifo.len() as u64, Ordering::Relaxed);
        self.pending_deltas.store(pending, Ordering::Relaxed);
        self.peak_pending_deltas
            .fetch_max(pending, Ordering::Relaxed);
        if fifo.has_synced() && !self.has_synced.swap(true, Ordering::AcqRel) {
            self.synced_notify.notify_waiters();
        }
    }
    /// F5: the first list was popped and processed.
    pub fn has_synced(&self) -> bool {
        self.has_synced.load(Ordering::Acquire)
    }
    /// Resolves once [`has_synced`](Self::has_synced) is true.
    pub async fn synced(&self) {
        loop {
            let notified = self.synced_notify.notified();
            if self.has_synced() {
                return;
            }
            notified.await;
        }
    }
    /// Keys queued now.
    pub fn queued_keys(&self) -> u64 {
        self.queued_keys.load(Ordering::Relaxed)
    }
    /// Deltas queued now.
    pub fn pending_deltas(&self) -> u64 {
        self.pending_deltas.load(Ordering::Relaxed)
    }
    /// The most deltas ever queued at once (B2: bounded by objects + capacity).
    pub fn peak_pending_deltas(&self) -> u64 {
        self.peak_pending_deltas.load(Ordering::Relaxed)
    }
    /// Keys handed to the indexer so far.
    pub fn popped(&self) -> u64 {
        self.popped.load(Ordering::Relaxed)
    }
    /// Deltas the indexer reported as failed (F6).
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
    /// Objects rejected because they could not be keyed.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }
    /// Times a writer (the reflector) had to wait for room (B4).
    pub fn writer_waits(&self) -> u64 {
        self.writer_waits.load(Ordering::Relaxed)
    }
}

/// Live counters of the indexer, shared with the informer handle.
#[derive(Debug, Default)]
pub struct IndexerStatus {
    pub(crate) batches: AtomicU64,
    pub(crate) applied: AtomicU64,
    pub(crate) resyncs: AtomicU64,
}

impl IndexerStatus {
    /// Counts one applied batch of `applied` deltas.
    pub(crate) fn record_batch(&self, applied: u64) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.applied.fetch_add(applied, Ordering::Relaxed);
    }
    /// Batches applied.
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }
    /// Deltas applied.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }
    /// Resyncs requested from the FIFO.
    pub fn resyncs(&self) -> u64 {
        self.resyncs.load(Ordering::Relaxed)
    }
}

/// Live counters of one listener, shared with its registration handle.
#[derive(Debug, Default)]
pub struct ListenerStats {
    pub(crate) received: AtomicU64,
    pub(crate) delivered: AtomicU64,
    pub(crate) panics: AtomicU64,
    pub(crate) buffered: AtomicU64,
    pub(crate) peak_buffered: AtomicU64,
    pub(crate) sync: Arc<SyncTracker>,
    pub(crate) dropped: AtomicU64,
    pub(crate) stopped: AtomicBool,
    pub(crate) sink_panics: AtomicU64,
    pub(crate) recipient_gone: AtomicBool,
    pub(crate) undeliverable: AtomicU64,
    pub(crate) stop_timed_out: AtomicBool,
    pub(crate) decode_failures: AtomicU64,
    pub(crate) handle_latency: LatencyHistogram,
    coalesced: AtomicU64,
    /// The listener's name (logs, metrics, `/debug/informers`).
    name: Option<Arc<str>>,
    /// The listener's overflow policy (B3).
    policy: OverflowPolicy,
}

impl ListenerStats {
    /// The counters of a new listener named `name` with `policy`.
    pub(crate) fn for_listener(name: Arc<str>, policy: OverflowPolicy) -> Self {
        ListenerStats {
            name: Some(name),
            policy,
            ..ListenerStats::default()
        }
    }

    /// The listener's name: its [`ListenerConfig::name`](crate::ListenerConfig::name), or
    /// `<resource>-handler-<id>`.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    /// The listener's overflow policy (B3).
    pub fn policy(&self) -> OverflowPolicy {
        self.policy
    }

    /// Records how long the handler took on one notification.
    pub(crate) fn record_handled(&self, elapsed: Duration) {
        self.handle_latency.observe(elapsed);
    }

    /// How long the handler took per notification, as a cumulative histogram.
    pub fn handle_latency(&self) -> &LatencyHistogram {
        &self.handle_latency
    }

    /// Publishes how many notifications the coalescing buffer folded away so far: its
    /// `CoalesceStats` `merged + 2 * cancelled` (a cancelling delete removes itself and the
    /// pending add).
    ///
    /// Called by the listener after each batch it accepted (0 unless its buffer coalesces:
    /// [`ListenerBuffer::coalesced`](kinformer::processor::ListenerBuffer::coalesced)).
    pub(crate) fn publish_coalesced(&self, n: u64) {
        self.coalesced.store(n, Ordering::Relaxed);
    }

    /// Notifications folded into another one by [`OverflowPolicy::Coalesce`] (B3) and so
    /// never delivered on their own: `received = delivered + buffered + coalesced + dropped`
    /// (plus those on their way to the handler: at most the handler thread's channel of 64).
    pub fn coalesced(&self) -> u64 {
        self.coalesced.load(Ordering::Relaxed)
    }

    /// Publishes the buffer's length (and its peak).
    pub(crate) fn publish_buffered(&self, n: usize) {
        self.buffered.store(n as u64, Ordering::Relaxed);
        self.peak_buffered.fetch_max(n as u64, Ordering::Relaxed);
    }

    /// The listener stopped: what was accepted and never handed to the handler is counted as
    /// dropped (P9), except what a gone recipient could not be given (S3: `undeliverable`).
    pub(crate) fn mark_stopped(&self) {
        let dropped = self
            .received()
            .saturating_sub(self.delivered())
            .saturating_sub(self.undeliverable());
        self.dropped.store(dropped, Ordering::Relaxed);
        self.stopped.store(true, Ordering::Release);
    }

    /// Shutdown stopped waiting for the handler's current callback (P9): everything accepted
    /// but that callback is dropped (the handler runs nothing after it).
    pub(crate) fn mark_timed_out(&self) {
        let dropped = self
            .received()
            .saturating_sub(self.delivered())
            .saturating_sub(1);
        self.dropped.store(dropped, Ordering::Relaxed);
        self.stop_timed_out.store(true, Ordering::Release);
    }

    /// Notifications accepted from the indexer.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }
    /// Notifications the handler finished (including ones that panicked).
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }
    /// Notifications whose handler panicked (P7).
    pub fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }
    /// Notifications waiting in the buffer now.
    pub fn buffered(&self) -> u64 {
        self.buffered.load(Ordering::Relaxed)
    }
    /// The most notifications ever waiting at once (B3: bounded by keys under Coalesce).
    pub fn peak_buffered(&self) -> u64 {
        self.peak_buffered.load(Ordering::Relaxed)
    }
    /// Initial-list notifications not yet handled (P5).
    pub fn initial_pending(&self) -> i64 {
        self.sync.pending()
    }
    /// True when the handler failed (panicked) on an initial-list notification: its
    /// registration never reports synced (P5).
    pub fn initial_failed(&self) -> bool {
        self.sync.failed()
    }
    /// The registration's `HasSynced` bookkeeping (P5).
    pub fn sync_tracker(&self) -> &SyncTracker {
        &self.sync
    }
    /// Notifications accepted but never handed to the handler because it was removed or shut
    /// down with a backlog (P5, P9); set when the listener stopped.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
    /// True once the listener stopped.
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
    /// Notifications on which a key sink's `enqueue` or its key mapper panicked (P7): caught,
    /// logged, and the next notification is delivered as usual.
    pub fn sink_panics(&self) -> u64 {
        self.sink_panics.load(Ordering::Relaxed)
    }
    /// Notifications a typed handler or actor could not be given because an object did not
    /// decode into its type (lean mode, I7: the server sent an object that is not a valid
    /// `K`); skipped and logged. Always 0 in the typed mode, which drops such objects on
    /// arrival (R5).
    pub fn decode_failures(&self) -> u64 {
        self.decode_failures.load(Ordering::Relaxed)
    }
    /// True once the user's actor behind a `Recipient` handler was found gone (its mailbox
    /// closed: it stopped or panicked); not a panic of this listener (S3).
    pub fn recipient_gone(&self) -> bool {
        self.recipient_gone.load(Ordering::Acquire)
    }
    /// Notifications that could not be handed to a gone recipient (S3): the one whose send
    /// found the mailbox closed and every later one, counted and never sent.
    pub fn undeliverable(&self) -> u64 {
        self.undeliverable.load(Ordering::Relaxed)
    }
    /// True when shutdown stopped waiting for this handler's current callback after the
    /// informer's `shutdown_timeout` (P9): its thread is left to finish that callback alone and
    /// then exits without running anything more.
    pub fn stop_timed_out(&self) -> bool {
        self.stop_timed_out.load(Ordering::Acquire)
    }
}

/// Upper bounds (seconds) of [`LatencyHistogram`]'s buckets: client-go's workqueue latency
/// buckets (10 µs to 10 s, ×10), with the halves in between where handler times usually fall.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.000_01, 0.000_1, 0.000_5, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0,
];

/// A fixed-bucket latency histogram written with relaxed atomics (no lock on the hot path) and
/// read as a Prometheus-style cumulative histogram.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Non-cumulative counts per bucket of [`LATENCY_BUCKETS`], plus one for `+Inf`.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl LatencyHistogram {
    /// Counts one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|&le| secs <= le)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Sum of all observations, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9
    }

    /// Sum of all observations.
    pub fn sum(&self) -> Duration {
        Duration::from_nanos(self.sum_nanos.load(Ordering::Relaxed))
    }

    /// `(upper bound in seconds, cumulative count)` per bucket of [`LATENCY_BUCKETS`] (the
    /// `+Inf` bucket is [`count`](Self::count)).
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0;
        LATENCY_BUCKETS
            .iter()
            .zip(&self.buckets)
            .map(|(&le, b)| {
                acc += b.load(Ordering::Relaxed);
                (le, acc)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_sum_in_seconds() {
        let h = LatencyHistogram::default();
        h.observe(Duration::from_micros(5)); // <= 10 µs
        h.observe(Duration::from_millis(3)); // <= 5 ms
        h.observe(Duration::from_secs(20)); // +Inf only
        let c = h.cumulative();
        assert_eq!(c[0], (0.000_01, 1));
        assert_eq!(c[3].1, 1); // <= 1 ms
        assert_eq!(c[4].1, 2); // <= 5 ms
        assert_eq!(c.last().map(|x| x.1), Some(2));
        assert_eq!(h.count(), 3);
        assert!((h.sum_seconds() - 20.003_005).abs() < 1e-6);
    }
}
