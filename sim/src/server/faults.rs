//! The fault injection points of the server: what the accept loop, the handlers and the watch
//! streams consult (an outage, failed requests, watch faults, dropped, expired, corrupted, slow
//! or stalled streams, stripped resourceVersions) and the counters of every fault that took effect, so tests can
//! assert it really happened. The test harness arms them through [`crate::Faults`]; the server
//! only reads them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

use super::counters::Verb;
use crate::apimachinery::errors::ApiError;

/// How many times each fault took effect (not how often it was requested).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultCounters {
    /// Watch streams aborted by [`crate::Faults::drop_watches`].
    pub watches_dropped: u64,
    /// List requests failed by [`crate::Faults::fail_next_lists`] / [`crate::Faults::fail_next`].
    pub lists_failed: u64,
    /// Watch requests failed by [`crate::Faults::fail_next_watches`] / [`crate::Faults::fail_next`].
    pub watches_failed: u64,
    /// Other requests failed by [`crate::Faults::fail_next`].
    pub others_failed: u64,
    /// Watch streams ended with ERROR 410 by [`crate::Faults::expire_watches`].
    pub watches_expired: u64,
    /// Calls to [`crate::Faults::compact`].
    pub compactions: u64,
    /// Malformed lines written by [`crate::Faults::malformed_next_event`].
    pub malformed_events: u64,
    /// Streams cut mid-object by [`crate::Faults::close_mid_object_next`].
    pub closed_mid_object: u64,
    /// Events delayed by [`crate::Faults::slow_watches`].
    pub slowed_events: u64,
    /// Watch streams that went silent under [`crate::Faults::stall_watches`] (once per stall).
    pub stalled_watches: u64,
    /// Watches that got ERROR 410 because their resourceVersion was older than the window
    /// (at start, or by falling behind); not an injected fault, counted for convenience.
    pub too_old_watches: u64,
    /// Lists that got 410 for a continue token older than the window.
    pub expired_continues: u64,
    /// Watch requests answered 200 with a stream that ended at once, by
    /// [`crate::Faults::end_watches_at_once`].
    pub watches_ended_at_once: u64,
    /// Watch requests answered with 410 (HTTP status or first ERROR event), by
    /// [`crate::Faults::expire_every_watch`].
    pub watches_refused_expired: u64,
    /// Watch-list requests answered 422, by [`crate::Faults::reject_watch_list`].
    pub watch_lists_rejected: u64,
    /// Watch-list requests served as plain watches, by [`crate::Faults::ignore_watch_list`].
    pub watch_lists_ignored: u64,
    /// Objects served (list items, watch events) without `metadata.resourceVersion`, by
    /// [`crate::Faults::strip_resource_versions`].
    pub objects_without_resource_version: u64,
    /// Requests answered `429 TooManyRequests` by [`crate::Faults::throttle`] or a 429 [`crate::Faults::fail_next`].
    pub throttled: u64,
    /// Outages begun by [`crate::Faults::go_down`] (and so by [`crate::Sim::restart`]).
    pub outages: u64,
    /// Connections reset at accept while the server was down.
    pub connections_refused: u64,
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
    outages: AtomicU64,
    connections_refused: AtomicU64,
}

impl Counts {
    fn of(&self, c: Count) -> &AtomicU64 {
        match c {
            Count::WatchesDropped => &self.watches_dropped,
            Count::Compactions => &self.compactions,
            Count::WatchesExpired => &self.watches_expired,
            Count::MalformedEvents => &self.malformed_events,
            Count::ClosedMidObject => &self.closed_mid_object,
            Count::SlowedEvents => &self.slowed_events,
            Count::StalledWatches => &self.stalled_watches,
            Count::TooOldWatches => &self.too_old_watches,
            Count::ExpiredContinues => &self.expired_continues,
            Count::WatchesEndedAtOnce => &self.watches_ended_at_once,
            Count::WatchesRefusedExpired => &self.watches_refused_expired,
            Count::WatchListsRejected => &self.watch_lists_rejected,
            Count::WatchListsIgnored => &self.watch_lists_ignored,
            Count::ConnectionsRefused => &self.connections_refused,
        }
    }

    /// A failed request of `verb` (429 counted as throttled too).
    fn failed(&self, verb: Verb, code: u16) {
        if code == 429 {
            self.throttled.fetch_add(1, Ordering::Relaxed);
        }
        let c = match verb {
            Verb::List => &self.lists_failed,
            Verb::Watch => &self.watches_failed,
            _ => &self.others_failed,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> FaultCounters {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FaultCounters {
            watches_dropped: l(&self.watches_dropped),
            lists_failed: l(&self.lists_failed),
            watches_failed: l(&self.watches_failed),
            others_failed: l(&self.others_failed),
            watches_expired: l(&self.watches_expired),
            compactions: l(&self.compactions),
            malformed_events: l(&self.malformed_events),
            closed_mid_object: l(&self.closed_mid_object),
            slowed_events: l(&self.slowed_events),
            stalled_watches: l(&self.stalled_watches),
            too_old_watches: l(&self.too_old_watches),
            expired_continues: l(&self.expired_continues),
            watches_ended_at_once: l(&self.watches_ended_at_once),
            watches_refused_expired: l(&self.watches_refused_expired),
            watch_lists_rejected: l(&self.watch_lists_rejected),
            watch_lists_ignored: l(&self.watch_lists_ignored),
            objects_without_resource_version: l(&self.objects_without_resource_version),
            throttled: l(&self.throttled),
            outages: l(&self.outages),
            connections_refused: l(&self.connections_refused),
        }
    }
}

/// A counter kind, for internal increments.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Count {
    WatchesDropped,
    Compactions,
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
    ConnectionsRefused,
}

/// How [`crate::Faults::expire_every_watch`] answers a watch request.
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

/// A switchable fault on every watch request (see [`crate::Faults::end_watches_at_once`],
/// [`crate::Faults::expire_every_watch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchFault {
    /// Answer 200 and end the stream with no event.
    EndAtOnce,
    /// Answer 410.
    Expire(ExpireMode),
}

/// A rule failing the requests it matches.
#[derive(Debug, Clone)]
pub(crate) struct FailRule {
    resource: Option<String>,
    /// The verbs it applies to; empty means every verb.
    verbs: Vec<Verb>,
    /// Requests left to fail; `None` fails every matching request until [`crate::Faults::clear`].
    remaining: Option<u32>,
    code: u16,
    retry_after: u64,
}

impl FailRule {
    /// Fails requests of `verbs` (every verb when empty) on `resource` (any when `None`): the
    /// next `remaining` of them, or every one when `None`, with `code` and `Retry-After`.
    pub(crate) fn new(
        resource: Option<&str>,
        verbs: Vec<Verb>,
        remaining: Option<u32>,
        code: u16,
        retry_after: u64,
    ) -> Self {
        Self {
            resource: resource.map(str::to_string),
            verbs,
            remaining,
            code,
            retry_after,
        }
    }

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

/// The armed faults and the counters, shared by every connection.
#[derive(Debug)]
pub(crate) struct FaultState {
    rules: Mutex<Vec<FailRule>>,
    armed: AtomicUsize,
    stream_faults: Mutex<Vec<(StreamFault, Option<String>)>>,
    slow_nanos: AtomicU64,
    pub(crate) drop_tx: watch::Sender<u64>,
    pub(crate) expire_tx: watch::Sender<u64>,
    pub(crate) stall_tx: watch::Sender<bool>,
    /// True while the server is down ([`crate::Faults::go_down`]): the accept loop resets new
    /// connections and, when it turns true, aborts every open one.
    pub(crate) down_tx: watch::Sender<bool>,
    /// 0: off, 1: end at once, 2: 410 over HTTP, 3: 410 as the first ERROR event.
    watch_fault: AtomicU8,
    reject_watch_list: AtomicBool,
    ignore_watch_list: AtomicBool,
    strip_rv: AtomicBool,
    /// The `ShardedListAndWatch` feature gate: not a fault, but kept here so every handle
    /// (server, [`crate::Faults`], control endpoint) reaches it; [`Self::clear`] leaves it.
    sharded_list_and_watch: AtomicBool,
    counts: Counts,
    /// The same counts, of the faults that hit a request answered (or to be answered) in
    /// protobuf only.
    protobuf_counts: Counts,
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
            down_tx: watch::channel(false).0,
            watch_fault: AtomicU8::new(0),
            reject_watch_list: AtomicBool::new(false),
            ignore_watch_list: AtomicBool::new(false),
            strip_rv: AtomicBool::new(false),
            sharded_list_and_watch: AtomicBool::new(true),
            counts: Counts::default(),
            protobuf_counts: Counts::default(),
        }
    }

    pub(crate) fn bump(&self, c: Count) {
        self.counts.of(c).fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a fault that took effect on a request or stream; in the protobuf counts too when
    /// `protobuf` (the client was answered, or was to be answered, in kube's protobuf).
    pub(crate) fn bump_on(&self, c: Count, protobuf: bool) {
        self.bump(c);
        if protobuf {
            self.protobuf_counts.of(c).fetch_add(1, Ordering::Relaxed);
        }
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

    /// Whether the `ShardedListAndWatch` gate is on (`shardSelector` served).
    pub(crate) fn shards_lists_and_watches(&self) -> bool {
        self.sharded_list_and_watch.load(Ordering::Relaxed)
    }

    /// Turns the `ShardedListAndWatch` gate on or off.
    pub(crate) fn set_sharded_list_and_watch(&self, on: bool) {
        self.sharded_list_and_watch.store(on, Ordering::Relaxed);
    }

    /// Whether `sendInitialEvents` is ignored (served as a plain watch).
    pub(crate) fn ignores_watch_list(&self) -> bool {
        self.ignore_watch_list.load(Ordering::Relaxed)
    }

    /// Whether objects are served without `metadata.resourceVersion`.
    pub(crate) fn strips_resource_versions(&self) -> bool {
        self.strip_rv.load(Ordering::Relaxed)
    }

    /// Counts `n` objects served without their resourceVersion (in protobuf when `protobuf`).
    pub(crate) fn stripped(&self, n: usize, protobuf: bool) {
        self.counts
            .objects_without_resource_version
            .fetch_add(n as u64, Ordering::Relaxed);
        if protobuf {
            self.protobuf_counts
                .objects_without_resource_version
                .fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// If a failure rule matches this request, consumes one and returns the error to send
    /// (counted in the protobuf counts too when `protobuf`: it is answered in protobuf).
    pub(crate) fn take_failure(
        &self,
        resource: &str,
        verb: Verb,
        protobuf: bool,
    ) -> Option<ApiError> {
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
        self.counts.failed(verb, err.code);
        if protobuf {
            self.protobuf_counts.failed(verb, err.code);
        }
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

    /// Aborts every open watch stream.
    pub(crate) fn drop_watches(&self) {
        self.drop_tx.send_modify(|n| *n += 1);
    }

    /// Ends every open watch stream with an ERROR 410.
    pub(crate) fn expire_watches(&self) {
        self.expire_tx.send_modify(|n| *n += 1);
    }

    /// Whether the server is down (an outage: every connection refused).
    pub(crate) fn is_down(&self) -> bool {
        *self.down_tx.borrow()
    }

    /// Takes the server down (`true`: open connections are aborted, new ones reset) or brings
    /// it back. Returns whether this changed anything.
    pub(crate) fn set_down(&self, down: bool) -> bool {
        let changed = self
            .down_tx
            .send_if_modified(|d| std::mem::replace(d, down) != down);
        if changed && down {
            self.counts.outages.fetch_add(1, Ordering::Relaxed);
        }
        changed
    }

    /// Silences (or resumes) every watch stream.
    pub(crate) fn set_stalled(&self, stalled: bool) {
        self.stall_tx.send_replace(stalled);
    }

    /// Adds a failure rule (after the ones already armed).
    pub(crate) fn add_rule(&self, rule: FailRule) {
        self.rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(rule);
    }

    /// Sets the fault every watch request gets (`None`: none).
    pub(crate) fn set_watch_fault(&self, fault: Option<WatchFault>) {
        let c = match fault {
            None => 0,
            Some(WatchFault::EndAtOnce) => 1,
            Some(WatchFault::Expire(mode)) => mode.code() + 1,
        };
        self.watch_fault.store(c, Ordering::Relaxed);
    }

    /// Answers watch-list requests 422 while on.
    pub(crate) fn set_reject_watch_list(&self, on: bool) {
        self.reject_watch_list.store(on, Ordering::Relaxed);
    }

    /// Serves watch-list requests as plain watches while on.
    pub(crate) fn set_ignore_watch_list(&self, on: bool) {
        self.ignore_watch_list.store(on, Ordering::Relaxed);
    }

    /// Serves objects without `metadata.resourceVersion` while on.
    pub(crate) fn set_strip_resource_versions(&self, on: bool) {
        self.strip_rv.store(on, Ordering::Relaxed);
    }

    /// Arms a one-shot stream fault for the next event of a watch of `resource` (any when
    /// `None`).
    pub(crate) fn arm(&self, f: StreamFault, resource: Option<&str>) {
        let mut pending = self.stream_faults.lock().unwrap_or_else(|e| e.into_inner());
        pending.push((f, resource.map(str::to_string)));
        self.armed.store(pending.len(), Ordering::Release);
    }

    /// Sets the per-event delay of every watch stream (`None`: full speed).
    pub(crate) fn set_slow(&self, per_event: Option<Duration>) {
        let n = per_event.map_or(0, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
        });
        self.slow_nanos.store(n, Ordering::Relaxed);
    }

    /// Disarms everything (counters stay).
    pub(crate) fn clear(&self) {
        self.stall_tx.send_replace(false);
        self.watch_fault.store(0, Ordering::Relaxed);
        self.reject_watch_list.store(false, Ordering::Relaxed);
        self.ignore_watch_list.store(false, Ordering::Relaxed);
        self.strip_rv.store(false, Ordering::Relaxed);
        self.rules.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let mut pending = self.stream_faults.lock().unwrap_or_else(|e| e.into_inner());
        pending.clear();
        self.armed.store(0, Ordering::Release);
        self.slow_nanos.store(0, Ordering::Relaxed);
    }

    /// How many times each fault took effect so far.
    pub(crate) fn counters(&self) -> FaultCounters {
        self.counts.snapshot()
    }

    /// How many times each fault took effect on a request answered in protobuf (a LIST, a
    /// WATCH stream, the failure of either); `compactions`, `outages` and
    /// `connections_refused` are not per request and stay 0.
    pub(crate) fn protobuf_counters(&self) -> FaultCounters {
        self.protobuf_counts.snapshot()
    }
}
