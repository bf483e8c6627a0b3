//! Fault injection: failed requests, dropped/expired/corrupted/slow watch streams, compaction.
//! Every fault that takes effect is counted, so tests can assert it really happened.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

use crate::counters::Verb;
use crate::status::ApiError;
use crate::store::Store;

/// How many times each fault took effect (not how often it was requested).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultCounters {
    /// Watch streams aborted by [`Faults::drop_watches`].
    pub watches_dropped: u64,
    /// List requests failed by [`Faults::fail_next_lists`] / [`Faults::fail_next`].
    pub lists_failed: u64,
    /// Watch requests failed by [`Faults::fail_next_watches`] / [`Faults::fail_next`].
    pub watches_failed: u64,
    /// Other requests failed by [`Faults::fail_next`].
    pub others_failed: u64,
    /// Watch streams ended with ERROR 410 by [`Faults::expire_watches`].
    pub watches_expired: u64,
    /// Calls to [`Faults::compact`].
    pub compactions: u64,
    /// Malformed lines written by [`Faults::malformed_next_event`].
    pub malformed_events: u64,
    /// Streams cut mid-object by [`Faults::close_mid_object_next`].
    pub closed_mid_object: u64,
    /// Events delayed by [`Faults::slow_watches`].
    pub slowed_events: u64,
    /// Watch streams that went silent under [`Faults::stall_watches`] (once per stall).
    pub stalled_watches: u64,
    /// Watches that got ERROR 410 because their resourceVersion was older than the window
    /// (at start, or by falling behind); not an injected fault, counted for convenience.
    pub too_old_watches: u64,
    /// Lists that got 410 for a continue token older than the window.
    pub expired_continues: u64,
}

#[derive(Debug, Default)]
struct Counts {
    watches_dropped: AtomicU64,
    lists_failed: AtomicU64,
    watches_failed: AtomicU64,
    others_failed: AtomicU64,
    watches_expired: AtomicU64,
    compactions: AtomicU64,
    malformed_events: AtomicU64,
    closed_mid_object: AtomicU64,
    slowed_events: AtomicU64,
    stalled_watches: AtomicU64,
    too_old_watches: AtomicU64,
    expired_continues: AtomicU64,
}

/// A counter kind, for internal increments.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Count {
    WatchesDropped,
    WatchesExpired,
    MalformedEvents,
    ClosedMidObject,
    SlowedEvents,
    StalledWatches,
    TooOldWatches,
    ExpiredContinues,
}

#[derive(Debug, Clone)]
struct FailRule {
    resource: Option<String>,
    verb: Verb,
    remaining: u32,
    code: u16,
    retry_after: u64,
}

/// A one-shot fault applied to the next event a watch stream writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamFault {
    /// Write a line that is not valid JSON before the event.
    Malformed,
    /// Write half of the event, then abort the connection.
    CloseMidObject,
}

#[derive(Debug)]
pub(crate) struct FaultState {
    rules: Mutex<Vec<FailRule>>,
    armed: AtomicUsize,
    stream_faults: Mutex<Vec<(StreamFault, Option<String>)>>,
    slow_nanos: AtomicU64,
    pub(crate) drop_tx: watch::Sender<u64>,
    pub(crate) expire_tx: watch::Sender<u64>,
    pub(crate) stall_tx: watch::Sender<bool>,
    counts: Counts,
}

impl FaultState {
    pub(crate) fn new() -> Self {
        Self {
            rules: Mutex::new(Vec::new()),
            armed: AtomicUsize::new(0),
            stream_faults: Mutex::new(Vec::new()),
            slow_nanos: AtomicU64::new(0),
            drop_tx: watch::channel(0).0,
            expire_tx: watch::channel(0).0,
            stall_tx: watch::channel(false).0,
            counts: Counts::default(),
        }
    }

    pub(crate) fn bump(&self, c: Count) {
        let a = match c {
            Count::WatchesDropped => &self.counts.watches_dropped,
            Count::WatchesExpired => &self.counts.watches_expired,
            Count::MalformedEvents => &self.counts.malformed_events,
            Count::ClosedMidObject => &self.counts.closed_mid_object,
            Count::SlowedEvents => &self.counts.slowed_events,
            Count::StalledWatches => &self.counts.stalled_watches,
            Count::TooOldWatches => &self.counts.too_old_watches,
            Count::ExpiredContinues => &self.counts.expired_continues,
        };
        a.fetch_add(1, Ordering::Relaxed);
    }

    /// If a failure rule matches this request, consumes one and returns the error to send.
    pub(crate) fn take_failure(&self, resource: &str, verb: Verb) -> Option<ApiError> {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let i = rules.iter().position(|r| {
            r.verb == verb && r.remaining > 0 && r.resource.as_deref().is_none_or(|x| x == resource)
        })?;
        let rule = &mut rules[i];
        rule.remaining -= 1;
        let err = ApiError::injected(rule.code, rule.retry_after);
        if rule.remaining == 0 {
            rules.remove(i);
        }
        let c = match verb {
            Verb::List => &self.counts.lists_failed,
            Verb::Watch => &self.counts.watches_failed,
            _ => &self.counts.others_failed,
        };
        c.fetch_add(1, Ordering::Relaxed);
        Some(err)
    }

    /// Claims a pending stream fault for a watch of `resource`, if any.
    pub(crate) fn claim_stream_fault(&self, resource: &str) -> Option<StreamFault> {
        if self.armed.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut pending = self.stream_faults.lock().unwrap_or_else(|e| e.into_inner());
        let i = pending
            .iter()
            .position(|(_, r)| r.as_deref().is_none_or(|x| x == resource))?;
        let (f, _) = pending.remove(i);
        self.armed.store(pending.len(), Ordering::Release);
        Some(f)
    }

    /// The per-event delay of slowed watches.
    pub(crate) fn slow(&self) -> Option<Duration> {
        match self.slow_nanos.load(Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_nanos(n)),
        }
    }

    fn snapshot(&self) -> FaultCounters {
        let c = &self.counts;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FaultCounters {
            watches_dropped: l(&c.watches_dropped),
            lists_failed: l(&c.lists_failed),
            watches_failed: l(&c.watches_failed),
            others_failed: l(&c.others_failed),
            watches_expired: l(&c.watches_expired),
            compactions: l(&c.compactions),
            malformed_events: l(&c.malformed_events),
            closed_mid_object: l(&c.closed_mid_object),
            slowed_events: l(&c.slowed_events),
            stalled_watches: l(&c.stalled_watches),
            too_old_watches: l(&c.too_old_watches),
            expired_continues: l(&c.expired_continues),
        }
    }
}

/// Injects faults into a running sim. Cheap to clone; all clones act on the same server.
#[derive(Clone)]
pub struct Faults {
    pub(crate) state: Arc<FaultState>,
    pub(crate) store: Arc<Store>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("counters", &self.counters())
            .finish_non_exhaustive()
    }
}

impl Faults {
    /// Aborts every open watch stream now (the connection closes without the final chunk, as
    /// when a proxy or the network drops it). Counted per stream in `watches_dropped`.
    pub fn drop_watches(&self) {
        self.state.drop_tx.send_modify(|n| *n += 1);
    }

    /// Fails the next `n` list requests (any resource) with `code` (500, 429 with
    /// `Retry-After: 1`, 503, ...).
    pub fn fail_next_lists(&self, n: u32, code: u16) {
        self.fail_next(None, Verb::List, n, code, 1);
    }

    /// Fails the next `n` watch requests (any resource) with `code`, before the stream starts.
    pub fn fail_next_watches(&self, n: u32, code: u16) {
        self.fail_next(None, Verb::Watch, n, code, 1);
    }

    /// Fails the next `n` requests of `verb` on `resource` (any resource when `None`) with an
    /// HTTP `code`; a 429 or 503 carries `Retry-After: retry_after_secs`.
    pub fn fail_next(
        &self,
        resource: Option<&str>,
        verb: Verb,
        n: u32,
        code: u16,
        retry_after_secs: u64,
    ) {
        if n == 0 {
            return;
        }
        self.state
            .rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(FailRule {
                resource: resource.map(str::to_string),
                verb,
                remaining: n,
                code,
                retry_after: retry_after_secs,
            });
    }

    /// Ends every open watch stream with an ERROR event carrying a `410 Expired` Status (as
    /// kube-apiserver does when a watcher falls out of the watch cache). Counted per stream.
    pub fn expire_watches(&self) {
        self.state.expire_tx.send_modify(|n| *n += 1);
    }

    /// Compacts: every resourceVersion older than the current one leaves the watch-cache window,
    /// so watches from it and continue tokens at it get 410. Returns the current RV.
    pub fn compact(&self) -> u64 {
        let rv = self.store.compact();
        self.state
            .counts
            .compactions
            .fetch_add(1, Ordering::Relaxed);
        rv
    }

    fn arm(&self, f: StreamFault, resource: Option<&str>) {
        let mut pending = self
            .state
            .stream_faults
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        pending.push((f, resource.map(str::to_string)));
        self.state.armed.store(pending.len(), Ordering::Release);
    }

    /// The next event written by any watch stream (open now or opened later) is preceded by a
    /// line that is not valid JSON; the stream then goes on normally.
    pub fn malformed_next_event(&self) {
        self.arm(StreamFault::Malformed, None);
    }

    /// Like [`Faults::malformed_next_event`], only on a watch of `resource` (plural).
    pub fn malformed_next_event_of(&self, resource: &str) {
        self.arm(StreamFault::Malformed, Some(resource));
    }

    /// The next event written by any watch stream is cut in half and the connection aborted
    /// (the event was not delivered, so a client resuming from its last RV gets it again).
    pub fn close_mid_object_next(&self) {
        self.arm(StreamFault::CloseMidObject, None);
    }

    /// Like [`Faults::close_mid_object_next`], only on a watch of `resource` (plural).
    pub fn close_mid_object_next_of(&self, resource: &str) {
        self.arm(StreamFault::CloseMidObject, Some(resource));
    }

    /// Delays every watch event by `per_event` (`None` restores full speed).
    pub fn slow_watches(&self, per_event: Option<Duration>) {
        let n = per_event.map_or(0, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
        });
        self.state.slow_nanos.store(n, Ordering::Relaxed);
    }

    /// Every watch stream (open or new) goes silent: no events, no bookmarks, and no clean end
    /// at `timeoutSeconds`, like a hung server or a half-open connection; `false` resumes them
    /// (nothing is lost). [`Faults::drop_watches`] still cuts them. For client-side
    /// silent-watch detection.
    pub fn stall_watches(&self, stalled: bool) {
        self.state.stall_tx.send_replace(stalled);
    }

    /// Disarms every pending failure and stream fault, the slowdown and the stall (counters stay).
    pub fn clear(&self) {
        self.state.stall_tx.send_replace(false);
        self.state
            .rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let mut pending = self
            .state
            .stream_faults
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        pending.clear();
        self.state.armed.store(0, Ordering::Release);
        self.state.slow_nanos.store(0, Ordering::Relaxed);
    }

    /// How many times each fault took effect so far.
    pub fn counters(&self) -> FaultCounters {
        self.state.snapshot()
    }
}
