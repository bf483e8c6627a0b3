//! Fault injection: failed requests, dropped/expired/corrupted/slow watch streams, compaction.
//! Every fault that takes effect is counted, so tests can assert it really happened.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

use crate::apimachinery::errors::ApiError;
use crate::server::counters::Verb;
use crate::storage::store::Store;

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
    /// Watch requests answered 200 with a stream that ended at once, by
    /// [`Faults::end_watches_at_once`].
    pub watches_ended_at_once: u64,
    /// Watch requests answered with 410 (HTTP status or first ERROR event), by
    /// [`Faults::expire_every_watch`].
    pub watches_refused_expired: u64,
    /// Watch-list requests answered 422, by [`Faults::reject_watch_list`].
    pub watch_lists_rejected: u64,
    /// Watch-list requests served as plain watches, by [`Faults::ignore_watch_list`].
    pub watch_lists_ignored: u64,
    /// Objects served (list items, watch events) without `metadata.resourceVersion`, by
    /// [`Faults::strip_resource_versions`].
    pub objects_without_resource_version: u64,
    /// Requests answered `429 TooManyRequests` by [`Faults::throttle`] or a 429 [`Faults::fail_next`].
    pub throttled: u64,
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
    watches_ended_at_once: AtomicU64,
    watches_refused_expired: AtomicU64,
    watch_lists_rejected: AtomicU64,
    watch_lists_ignored: AtomicU64,
    objects_without_resource_version: AtomicU64,
    throttled: AtomicU64,
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
    WatchesEndedAtOnce,
    WatchesRefusedExpired,
    WatchListsRejected,
    WatchListsIgnored,
}

/// How [`Faults::expire_every_watch`] answers a watch request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpireMode {
    /// An HTTP `410 Gone` response with an `Expired` Status body (no stream).
    Http,
    /// A `200` stream whose first and only event is an ERROR carrying a `410 Expired` Status.
    ErrorEvent,
}

impl ExpireMode {
    /// Parses `http` or `event` (the control endpoint's `mode`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "http" => Some(Self::Http),
            "event" => Some(Self::ErrorEvent),
            _ => None,
        }
    }

    fn code(self) -> u8 {
        match self {
            Self::Http => 1,
            Self::ErrorEvent => 2,
        }
    }

    fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(Self::Http),
            2 => Some(Self::ErrorEvent),
            _ => None,
        }
    }
}

/// A switchable fault on every watch request (see [`Faults::end_watches_at_once`],
/// [`Faults::expire_every_watch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchFault {
    /// Answer 200 and end the stream with no event.
    EndAtOnce,
    /// Answer 410.
    Expire(ExpireMode),
}

#[derive(Debug, Clone)]
struct FailRule {
    resource: Option<String>,
    /// The verbs it applies to; empty means every verb.
    verbs: Vec<Verb>,
    /// Requests left to fail; `None` fails every matching request until [`Faults::clear`].
    remaining: Option<u32>,
    code: u16,
    retry_after: u64,
}

impl FailRule {
    fn matches(&self, resource: &str, verb: Verb) -> bool {
        (self.verbs.is_empty() || self.verbs.contains(&verb))
            && self.remaining != Some(0)
            && self.resource.as_deref().is_none_or(|x| x == resource)
    }
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
    /// 0: off, 1: end at once, 2: 410 over HTTP, 3: 410 as the first ERROR event.
    watch_fault: AtomicU8,
    reject_watch_list: AtomicBool,
    ignore_watch_list: AtomicBool,
    strip_rv: AtomicBool,
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
            watch_fault: AtomicU8::new(0),
            reject_watch_list: AtomicBool::new(false),
            ignore_watch_list: AtomicBool::new(false),
            strip_rv: AtomicBool::new(false),
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
            Count::WatchesEndedAtOnce => &self.counts.watches_ended_at_once,
            Count::WatchesRefusedExpired => &self.counts.watches_refused_expired,
            Count::WatchListsRejected => &self.counts.watch_lists_rejected,
            Count::WatchListsIgnored => &self.counts.watch_lists_ignored,
        };
        a.fetch_add(1, Ordering::Relaxed);
    }

    /// The fault every watch request gets now, if any.
    pub(crate) fn watch_fault(&self) -> Option<WatchFault> {
        match self.watch_fault.load(Ordering::Relaxed) {
            0 => None,
            1 => Some(WatchFault::EndAtOnce),
            c => ExpireMode::from_code(c - 1).map(WatchFault::Expire),
        }
    }

    /// Whether watch-list requests are answered 422.
    pub(crate) fn rejects_watch_list(&self) -> bool {
        self.reject_watch_list.load(Ordering::Relaxed)
    }

    /// Whether `sendInitialEvents` is ignored (served as a plain watch).
    pub(crate) fn ignores_watch_list(&self) -> bool {
        self.ignore_watch_list.load(Ordering::Relaxed)
    }

    /// Whether objects are served without `metadata.resourceVersion`.
    pub(crate) fn strips_resource_versions(&self) -> bool {
        self.strip_rv.load(Ordering::Relaxed)
    }

    /// Counts `n` objects served without their resourceVersion.
    pub(crate) fn stripped(&self, n: usize) {
        self.counts
            .objects_without_resource_version
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// If a failure rule matches this request, consumes one and returns the error to send.
    pub(crate) fn take_failure(&self, resource: &str, verb: Verb) -> Option<ApiError> {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let i = rules.iter().position(|r| r.matches(resource, verb))?;
        let rule = &mut rules[i];
        let err = ApiError::injected(rule.code, rule.retry_after);
        if let Some(n) = rule.remaining.as_mut() {
            *n -= 1;
            if *n == 0 {
                rules.remove(i);
            }
        }
        if err.code == 429 {
            self.counts.throttled.fetch_add(1, Ordering::Relaxed);
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
            watches_ended_at_once: l(&c.watches_ended_at_once),
            watches_refused_expired: l(&c.watches_refused_expired),
            watch_lists_rejected: l(&c.watch_lists_rejected),
            watch_lists_ignored: l(&c.watch_lists_ignored),
            objects_without_resource_version: l(&c.objects_without_resource_version),
            throttled: l(&c.throttled),
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
        self.push_rule(FailRule {
            resource: resource.map(str::to_string),
            verbs: vec![verb],
            remaining: Some(n),
            code,
            retry_after: retry_after_secs,
        });
    }

    fn push_rule(&self, rule: FailRule) {
        self.state
            .rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(rule);
    }

    /// Answers requests `429 TooManyRequests` with `Retry-After: retry_after_secs` and a
    /// `TooManyRequests` Status (details `retryAfterSeconds`), as kube-apiserver's priority and
    /// fairness does: requests of any of `verbs` (every verb when empty) on `resource` (any when
    /// `None`); the next `n` of them, or every one until [`Faults::clear`] when `n` is `None`.
    /// Counted in `throttled` (and in `lists_failed` / `watches_failed` / `others_failed`).
    pub fn throttle(
        &self,
        resource: Option<&str>,
        verbs: &[Verb],
        n: Option<u32>,
        retry_after_secs: u64,
    ) {
        if n == Some(0) {
            return;
        }
        self.push_rule(FailRule {
            resource: resource.map(str::to_string),
            verbs: verbs.to_vec(),
            remaining: n,
            code: 429,
            retry_after: retry_after_secs,
        });
    }

    /// While on, every watch request (any resource) is answered `200` with a stream that ends at
    /// once, without any event: a server (or proxy) that ends every watch immediately. Checked
    /// after request validation; injected failures ([`Faults::fail_next`],
    /// [`Faults::throttle`]) come first. Such watches never count as started or open.
    /// Counted in `watches_ended_at_once`. Replaces [`Faults::expire_every_watch`].
    pub fn end_watches_at_once(&self, on: bool) {
        self.state
            .watch_fault
            .store(if on { 1 } else { 0 }, Ordering::Relaxed);
    }

    /// While `Some`, every watch request is answered with `410 Expired` (a watch RV that is
    /// always too old): an HTTP 410 response ([`ExpireMode::Http`]) or a 200 stream whose only
    /// event is an ERROR with a 410 Status ([`ExpireMode::ErrorEvent`]). Lists keep working.
    /// Counted in `watches_refused_expired`. `None` turns it off; replaces
    /// [`Faults::end_watches_at_once`].
    pub fn expire_every_watch(&self, mode: Option<ExpireMode>) {
        let c = mode.map_or(0, |m| m.code() + 1);
        self.state.watch_fault.store(c, Ordering::Relaxed);
    }

    /// While on, a watch with `sendInitialEvents=true` (watch-list) is answered `422 Invalid`
    /// with the Status a server without the WatchList feature sends (a `FieldValueForbidden`
    /// cause on `sendInitialEvents`); other watches work. Counted in `watch_lists_rejected`.
    pub fn reject_watch_list(&self, on: bool) {
        self.state.reject_watch_list.store(on, Ordering::Relaxed);
    }

    /// While on, `sendInitialEvents` and `resourceVersionMatch` of a watch are ignored, like a
    /// server that predates watch-list: the watch is served as if they were absent (a watch from
    /// RV unset or `0` starts with synthetic ADDED events for every object, as for any watch),
    /// and no BOOKMARK annotated `k8s.io/initial-events-end` is ever sent. Counted in
    /// `watch_lists_ignored`.
    pub fn ignore_watch_list(&self, on: bool) {
        self.state.ignore_watch_list.store(on, Ordering::Relaxed);
    }

    /// While on, objects in list responses and watch events (ADDED, MODIFIED, DELETED) carry no
    /// `metadata.resourceVersion` (the field is removed from the JSON); the list's own
    /// `metadata.resourceVersion` and BOOKMARKs keep theirs. Stored objects are unchanged. Table
    /// output is not affected. Counted per object in `objects_without_resource_version`.
    pub fn strip_resource_versions(&self, on: bool) {
        self.state.strip_rv.store(on, Ordering::Relaxed);
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

    /// Disarms every pending failure (throttling included) and stream fault, the slowdown, the
    /// stall and every switch (watch faults, watch-list faults, stripped resourceVersions);
    /// counters stay.
    pub fn clear(&self) {
        self.state.stall_tx.send_replace(false);
        self.state.watch_fault.store(0, Ordering::Relaxed);
        self.state.reject_watch_list.store(false, Ordering::Relaxed);
        self.state.ignore_watch_list.store(false, Ordering::Relaxed);
        self.state.strip_rv.store(false, Ordering::Relaxed);
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
