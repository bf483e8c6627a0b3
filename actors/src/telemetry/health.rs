//! The reflector's health as the informer handle reads it (S2): phase, restarts, last error and
//! the machine's counters, published by the reflector and its supervisor without sharing the
//! protocol state itself.
//!
//! # Failing
//!
//! A reflector is *failing* from its first failure (it backs off: a failed LIST or WATCH, a
//! watch that ended too soon or went silent, a 410) until its next success: a LIST whose items
//! reached the FIFO, watch events that did, or a watch that opened. Retries in between do not
//! restart the clock. [`ReflectorStatus::failing_for`] is what the telemetry's `/healthz`
//! compares with its grace period ([`TelemetryOptions::failing_grace`]); it flips back as soon
//! as a list or watch succeeds.
//!
//! # Stale
//!
//! Failing says whether requests succeed; *stale* says whether the cache follows the server
//! (docs/semantics.md R10). The cache is not known current from the first failure after it
//! last was until a watch opens from a complete LIST's resourceVersion or a watch delivers an
//! event or a bookmark. A restarted API server shows the difference: the watch reopens (no
//! longer failing) and is answered 410 at once, and the cache stays stale until the relist
//! is done and watched from. [`ReflectorStatus::stale_for`] is what `/readyz` compares with
//! [`TelemetryOptions::stale_threshold`] and what `kinformer_informer_stale_seconds` shows.
//! `has_synced` is another thing again: true from the first sync on, as in client-go.
//!
//! [`TelemetryOptions::failing_grace`]: crate::TelemetryOptions::failing_grace
//! [`TelemetryOptions::stale_threshold`]: crate::TelemetryOptions::stale_threshold

use std::{
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use arc_swap::ArcSwap;
use kinformer::reflector::{Phase, ReflectorCounters};

/// What the reflector is doing now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReflectorPhase {
    /// Not started yet.
    Idle,
    /// Listing.
    Listing,
    /// Watching.
    Watching,
    /// Failed; restarting after the given delay.
    BackingOff(Duration),
    /// Shut down.
    Stopped,
}

impl From<Phase> for ReflectorPhase {
    fn from(p: Phase) -> Self {
        match p {
            Phase::Listing => ReflectorPhase::Listing,
            Phase::Watching => ReflectorPhase::Watching,
            Phase::BackingOff { until } => {
                ReflectorPhase::BackingOff(until.saturating_duration_since(Instant::now()))
            }
        }
    }
}

/// Who filters the informer's shard (KEP-5866, K1), as the last LIST showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardFiltering {
    /// The server: the last LIST carried `metadata.shardInfo` (gate `ShardedListAndWatch`).
    Server,
    /// The informer: the server ignored `shardSelector` (no `shardInfo`), or the list came by
    /// a watch-list, which has no list metadata; objects outside the shard are dropped on
    /// arrival.
    Client,
}

impl ShardFiltering {
    /// `"server"` or `"client"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ShardFiltering::Server => "server",
            ShardFiltering::Client => "client",
        }
    }
}

/// Watch events received, by type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventsByType {
    /// ADDED (watch-list initial events included).
    pub added: u64,
    /// MODIFIED.
    pub modified: u64,
    /// DELETED.
    pub deleted: u64,
}

/// A point-in-time copy of a reflector's health (S2).
#[derive(Clone, Debug)]
pub struct ReflectorHealth {
    /// Current phase.
    pub phase: ReflectorPhase,
    /// How many times the supervisor restarted the reflector.
    pub restarts: u64,
    /// The last failure, if any, with when it happened.
    pub last_error: Option<(SystemTime, String)>,
    /// The resourceVersion the cache is synced to.
    pub last_sync_resource_version: String,
    /// LIST requests issued (pages count individually).
    pub lists: u64,
    /// WATCH requests opened.
    pub watches: u64,
    /// Watch events received (ADDED, MODIFIED, DELETED).
    pub events: u64,
    /// Watch events by type: ADDED, MODIFIED, DELETED.
    pub events_by_type: EventsByType,
    /// Relists caused by 410 Expired.
    pub expired: u64,
    /// Watches dropped client-side because they went silent (R4).
    pub stalls: u64,
    /// Objects dropped because of an unexpected type (R5).
    pub dropped_objects: u64,
    /// Watch items or streams that could not be decoded (a skipped object, or a stream that
    /// failed on undecodable data).
    pub decode_errors: u64,
    /// Bookmarks received.
    pub bookmarks: u64,
    /// Watches that ended in under a second with no event (R4).
    pub very_short_watches: u64,
    /// Failures the reflector backed off from (every cause, R8).
    pub failures: u64,
    /// 429 answers whose Retry-After set the wait (R8).
    pub retry_after_waits: u64,
    /// Watch-lists that fell back to LIST (R7).
    pub watch_list_fallbacks: u64,
    /// Who filters the shard (K1); None: the informer has no shard, or has not listed yet.
    pub shard_filtering: Option<ShardFiltering>,
    /// Objects (LIST items and watch events) outside the shard that the informer dropped
    /// because the server did not filter (K1; `shard_filtered_total` in the metrics).
    pub shard_filtered: u64,
    /// Objects outside the shard that a filtering server sent anyway (kept: the server is
    /// trusted; non-zero means the two hash differently).
    pub shard_mismatches: u64,
    /// Shard changes applied (K2).
    pub shard_changes: u64,
    /// Shard changes that relisted because ranges grew (K2).
    pub shard_relists: u64,
    /// Since when the reflector has been failing: the first failure (a backoff) after its last
    /// success (a LIST whose items reached the FIFO, watch events that did, or a watch that
    /// opened). None while healthy (S2). The telemetry's `/healthz` compares its age with
    /// [`TelemetryOptions::failing_grace`](crate::TelemetryOptions::failing_grace).
    pub failing_since: Option<SystemTime>,
    /// Since when the cache has not been known current (R10): the first failure after it last
    /// was, until a watch opened from a complete LIST or delivered an event or a bookmark.
    /// None while current. Unlike `has_synced`, it turns back on after the first sync.
    pub stale_since: Option<SystemTime>,
    /// How long the cache has not been known current, in seconds, as of this snapshot (0 while
    /// current; see `stale_since`).
    pub stale_seconds: f64,
    /// Relists after a 410 that followed an outage, sent after the recovery jitter instead of
    /// the grown backoff (R9).
    pub recovery_relists: u64,
    /// Backoffs after an outage cut short because the API server's return was announced by
    /// the client's shared health (R11).
    pub server_returns: u64,
    /// Retries not sent because the client's shared probe had just found the server down
    /// (R11).
    pub probed_retries: u64,
    /// From the API server's last return (R11) until this informer watched again (a watch
    /// open, the cache known current, R10), in seconds; None before any return.
    pub watching_again_seconds: Option<f64>,
    /// From the API server's last return until every informer of its client watched again,
    /// in seconds; None before any, or while one still does not.
    pub server_watching_again_seconds: Option<f64>,
}

/// Shared, lock-light status of one informer's reflector, published by the reflector and read
/// by the informer handle (health). The protocol state itself is not shared: the machine is
/// owned by the running reflector, or by the supervisor between two reflectors.
#[derive(Debug)]
pub struct ReflectorStatus {
    phase: Mutex<ReflectorPhase>,
    pub(crate) last_error: Mutex<Option<(SystemTime, String)>>,
    resource_version: ArcSwap<String>,
    pub(crate) restarts: AtomicU64,
    pub(crate) dropped_objects: AtomicU64,
    decode_errors: AtomicU64,
    lists: AtomicU64,
    watches: AtomicU64,
    events: AtomicU64,
    added: AtomicU64,
    modified: AtomicU64,
    deleted: AtomicU64,
    bookmarks: AtomicU64,
    expired: AtomicU64,
    stalls: AtomicU64,
    very_short_watches: AtomicU64,
    failures: AtomicU64,
    retry_after_waits: AtomicU64,
    watch_list_fallbacks: AtomicU64,
    recovery_relists: AtomicU64,
    server_returns: AtomicU64,
    probed_retries: AtomicU64,
    /// R11's figures in nanoseconds (`u64::MAX`: none yet).
    watching_again_ns: AtomicU64,
    server_watching_again_ns: AtomicU64,
    /// True while `stale_since` is set: lets the current path skip the lock.
    stale: AtomicBool,
    /// Since when the cache has not been known current (R10), as the machine says: monotonic
    /// (for the gauge and the threshold) and wall clock (for people).
    stale_since: Mutex<Option<(Instant, SystemTime)>>,
    /// 0: no shard / not listed yet; 1: server filters; 2: client filters (K1).
    shard_filtering: AtomicU8,
    pub(crate) shard_filtered: AtomicU64,
    pub(crate) shard_mismatches: AtomicU64,
    shard_changes: AtomicU64,
    shard_relists: AtomicU64,
    /// Woken whenever the published resourceVersion moves (KEP-5647 waiters, K3).
    rv_moved: tokio::sync::Notify,
    /// True while `failing_since` is set: lets the success path skip the lock.
    failing: AtomicBool,
    /// The first failure since the last success: monotonic (for the grace period) and wall
    /// clock (for people).
    failing_since: Mutex<Option<(Instant, SystemTime)>>,
    /// The namespace the reflector lists (unset: all namespaces, or unknown for a custom
    /// lister-watcher); set once, when the informer is made.
    namespace: OnceLock<String>,
}

impl Default for ReflectorStatus {
    fn default() -> Self {
        ReflectorStatus {
            phase: Mutex::new(ReflectorPhase::Idle),
            last_error: Mutex::new(None),
            resource_version: ArcSwap::from_pointee(String::new()),
            restarts: AtomicU64::new(0),
            dropped_objects: AtomicU64::new(0),
            decode_errors: AtomicU64::new(0),
            lists: AtomicU64::new(0),
            watches: AtomicU64::new(0),
            events: AtomicU64::new(0),
            added: AtomicU64::new(0),
            modified: AtomicU64::new(0),
            deleted: AtomicU64::new(0),
            bookmarks: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            very_short_watches: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            retry_after_waits: AtomicU64::new(0),
            watch_list_fallbacks: AtomicU64::new(0),
            recovery_relists: AtomicU64::new(0),
            server_returns: AtomicU64::new(0),
            probed_retries: AtomicU64::new(0),
            watching_again_ns: AtomicU64::new(u64::MAX),
            server_watching_again_ns: AtomicU64::new(u64::MAX),
            stale: AtomicBool::new(false),
            stale_since: Mutex::new(None),
            shard_filtering: AtomicU8::new(0),
            shard_filtered: AtomicU64::new(0),
            shard_mismatches: AtomicU64::new(0),
            shard_changes: AtomicU64::new(0),
            shard_relists: AtomicU64::new(0),
            rv_moved: tokio::sync::Notify::new(),
            failing: AtomicBool::new(false),
            failing_since: Mutex::new(None),
            namespace: OnceLock::new(),
        }
    }
}

impl ReflectorStatus {
    /// Sets the phase. A backoff starts the failing period (if none is running); an opened
    /// watch ends it.
    pub(crate) fn set_phase(&self, p: ReflectorPhase) {
        match p {
            ReflectorPhase::BackingOff(_) => self.mark_failing(),
            ReflectorPhase::Watching => self.mark_succeeded(),
            _ => {}
        }
        if let Ok(mut g) = self.phase.lock() {
            *g = p;
        }
    }

    /// A failure: starts the failing period unless one is running.
    fn mark_failing(&self) {
        if let Ok(mut g) = self.failing_since.lock()
            && g.is_none()
        {
            *g = Some((Instant::now(), SystemTime::now()));
            self.failing.store(true, Ordering::Release);
        }
    }

    /// A success: ends the failing period. One relaxed load when healthy.
    fn mark_succeeded(&self) {
        if self.failing.load(Ordering::Acquire)
            && let Ok(mut g) = self.failing_since.lock()
        {
            *g = None;
            self.failing.store(false, Ordering::Release);
        }
    }

    /// How long the reflector has been failing at `now`: since the first failure (backoff)
    /// after its last success (a LIST or watch events handed to the FIFO, or a watch opened).
    /// None while healthy. `/healthz` compares it with a grace period.
    pub fn failing_for(&self, now: Instant) -> Option<Duration> {
        if !self.failing.load(Ordering::Acquire) {
            return None;
        }
        self.failing_since
            .lock()
            .ok()
            .and_then(|g| g.map(|(at, _)| now.saturating_duration_since(at)))
    }

    /// The wall-clock time of the first failure since the last success (see
    /// [`failing_for`](Self::failing_for)).
    pub fn failing_since(&self) -> Option<SystemTime> {
        if !self.failing.load(Ordering::Acquire) {
            return None;
        }
        self.failing_since
            .lock()
            .ok()
            .and_then(|g| g.map(|(_, wall)| wall))
    }

    /// Publishes the machine's [`stale_since`](kinformer::reflector::ReflectorMachine::stale_since)
    /// (R10). One relaxed load while the cache stays current.
    pub(crate) fn set_stale_since(&self, since: Option<Instant>) {
        if since.is_none() && !self.stale.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut g) = self.stale_since.lock() {
            match since {
                None => *g = None,
                Some(at) if g.is_none_or(|(was, _)| was != at) => {
                    // The wall-clock time of `at`: now, less how long ago it was.
                    let ago = Instant::now().saturating_duration_since(at);
                    let wall = SystemTime::now()
                        .checked_sub(ago)
                        .unwrap_or(SystemTime::now());
                    *g = Some((at, wall));
                }
                Some(_) => {}
            }
            self.stale.store(g.is_some(), Ordering::Release);
        }
    }

    /// How long the cache has not been known current at `now` (R10); None while it is.
    pub fn stale_for(&self, now: Instant) -> Option<Duration> {
        if !self.stale.load(Ordering::Acquire) {
            return None;
        }
        self.stale_since
            .lock()
            .ok()
            .and_then(|g| g.map(|(at, _)| now.saturating_duration_since(at)))
    }

    /// The wall-clock time since which the cache has not been known current (see
    /// [`stale_for`](Self::stale_for)).
    pub fn stale_since(&self) -> Option<SystemTime> {
        if !self.stale.load(Ordering::Acquire) {
            return None;
        }
        self.stale_since
            .lock()
            .ok()
            .and_then(|g| g.map(|(_, wall)| wall))
    }

    /// Counts one item or stream the reflector could not decode.
    pub(crate) fn record_decode_error(&self) {
        self.decode_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Records the namespace the reflector lists (once; later calls are ignored).
    pub(crate) fn set_namespace(&self, namespace: Option<&str>) {
        if let Some(ns) = namespace {
            let _ = self.namespace.set(ns.to_string());
        }
    }

    /// The namespace the reflector lists; None for all namespaces (or a custom lister-watcher
    /// that did not say).
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.get().map(String::as_str)
    }

    /// Records the resourceVersion after outputs reached the FIFO: a success (ends a failing
    /// period).
    pub(crate) fn set_resource_version(&self, rv: &str) {
        self.mark_succeeded();
        if self.resource_version.load().as_str() != rv {
            self.resource_version.store(Arc::new(rv.to_string()));
            self.rv_moved.notify_waiters();
        }
    }

    /// Resolves at the next move of the published resourceVersion. Create it (and `enable` it)
    /// before reading the RV, so a move in between is not missed.
    pub(crate) fn rv_moved(&self) -> tokio::sync::futures::Notified<'_> {
        self.rv_moved.notified()
    }

    /// Wakes every resourceVersion waiter (the informer stopped: they re-check and give up).
    pub(crate) fn wake_rv_waiters(&self) {
        self.rv_moved.notify_waiters();
    }

    /// Records who filters the shard, as the last LIST showed (K1).
    pub(crate) fn set_shard_filtering(&self, f: Option<ShardFiltering>) {
        let v = match f {
            None => 0,
            Some(ShardFiltering::Server) => 1,
            Some(ShardFiltering::Client) => 2,
        };
        self.shard_filtering.store(v, Ordering::Relaxed);
    }

    /// Who filters the shard (K1), as the last LIST showed.
    pub fn shard_filtering(&self) -> Option<ShardFiltering> {
        match self.shard_filtering.load(Ordering::Relaxed) {
            1 => Some(ShardFiltering::Server),
            2 => Some(ShardFiltering::Client),
            _ => None,
        }
    }

    /// Copies the machine's counters (a handful of relaxed stores, once per handed-over group).
    pub(crate) fn publish(&self, c: &ReflectorCounters) {
        let set = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        set(&self.lists, c.lists);
        set(&self.watches, c.watches);
        set(&self.events, c.events);
        set(&self.added, c.added);
        set(&self.modified, c.modified);
        set(&self.deleted, c.deleted);
        set(&self.bookmarks, c.bookmarks);
        set(&self.expired, c.expired);
        set(&self.stalls, c.stalls);
        set(&self.very_short_watches, c.very_short_watches);
        set(&self.failures, c.failures);
        set(&self.retry_after_waits, c.retry_after_waits);
        set(&self.watch_list_fallbacks, c.watch_list_fallbacks);
        set(&self.recovery_relists, c.recovery_relists);
        set(&self.shard_changes, c.shard_changes);
        set(&self.shard_relists, c.shard_relists);
        set(&self.server_returns, c.server_returns);
        set(&self.probed_retries, c.probed_retries);
    }

    /// R11: this informer watched again `after` the API server's last return.
    pub(crate) fn record_watching_again(&self, after: Duration) {
        self.watching_again_ns
            .store(duration_ns(after), Ordering::Relaxed);
    }

    /// R11: every informer of the client watched again `after` the API server's last return
    /// (None: a return is announced and some informer does not watch yet).
    pub(crate) fn record_server_watching_again(&self, after: Option<Duration>) {
        self.server_watching_again_ns
            .store(after.map_or(u64::MAX, duration_ns), Ordering::Relaxed);
    }

    /// The resourceVersion the cache is synced to.
    pub fn last_sync_resource_version(&self) -> String {
        self.resource_version.load().as_ref().clone()
    }

    /// A snapshot of every counter and the phase.
    pub fn health(&self) -> ReflectorHealth {
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ReflectorHealth {
            phase: self
                .phase
                .lock()
                .map(|g| g.clone())
                .unwrap_or(ReflectorPhase::Idle),
            restarts: c(&self.restarts),
            last_error: self.last_error.lock().ok().and_then(|g| g.clone()),
            last_sync_resource_version: self.last_sync_resource_version(),
            lists: c(&self.lists),
            watches: c(&self.watches),
            events: c(&self.events),
            events_by_type: EventsByType {
                added: c(&self.added),
                modified: c(&self.modified),
                deleted: c(&self.deleted),
            },
            expired: c(&self.expired),
            stalls: c(&self.stalls),
            dropped_objects: c(&self.dropped_objects),
            decode_errors: c(&self.decode_errors),
            bookmarks: c(&self.bookmarks),
            very_short_watches: c(&self.very_short_watches),
            failures: c(&self.failures),
            retry_after_waits: c(&self.retry_after_waits),
            watch_list_fallbacks: c(&self.watch_list_fallbacks),
            shard_filtering: self.shard_filtering(),
            shard_filtered: c(&self.shard_filtered),
            shard_mismatches: c(&self.shard_mismatches),
            shard_changes: c(&self.shard_changes),
            shard_relists: c(&self.shard_relists),
            failing_since: self.failing_since(),
            stale_since: self.stale_since(),
            stale_seconds: self
                .stale_for(Instant::now())
                .map_or(0.0, |d| d.as_secs_f64()),
            recovery_relists: c(&self.recovery_relists),
            server_returns: c(&self.server_returns),
            probed_retries: c(&self.probed_retries),
            watching_again_seconds: seconds_ns(c(&self.watching_again_ns)),
            server_watching_again_seconds: seconds_ns(c(&self.server_watching_again_ns)),
        }
    }
}

/// A duration in nanoseconds, saturating below `u64::MAX` (which means "none").
fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos())
        .unwrap_or(u64::MAX - 1)
        .min(u64::MAX - 1)
}

/// Seconds from nanoseconds, `u64::MAX` being "none".
fn seconds_ns(ns: u64) -> Option<f64> {
    (ns != u64::MAX).then(|| Duration::from_nanos(ns).as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The failing period starts at the first backoff, survives retries and further
    /// failures, and ends with an opened watch or outputs handed to the FIFO.
    #[test]
    fn failing_period_spans_retries_and_ends_with_a_success() {
        let s = ReflectorStatus::default();
        assert_eq!(s.failing_for(Instant::now()), None);
        s.set_phase(ReflectorPhase::Listing);
        assert_eq!(s.failing_since(), None, "listing is not failing");

        s.set_phase(ReflectorPhase::BackingOff(Duration::from_millis(5)));
        let since = s.failing_since().expect("failing after a backoff");
        let later = Instant::now() + Duration::from_secs(10);
        let d = s.failing_for(later).expect("failing_for");
        assert!(d >= Duration::from_secs(10), "{d:?}");
        s.set_phase(ReflectorPhase::Listing);
        s.set_phase(ReflectorPhase::BackingOff(Duration::from_millis(10)));
        assert_eq!(
            s.failing_since(),
            Some(since),
            "a retry keeps the first failure"
        );
        assert_eq!(s.health().failing_since, Some(since));

        s.set_phase(ReflectorPhase::Watching);
        assert_eq!(s.failing_for(later), None, "an opened watch is a success");

        s.set_phase(ReflectorPhase::BackingOff(Duration::from_millis(5)));
        assert!(s.failing_since().is_some());
        s.set_resource_version("7");
        assert_eq!(
            s.failing_since(),
            None,
            "a LIST handed to the FIFO is a success"
        );
        assert_eq!(s.health().failing_since, None);
    }

    /// Staleness follows what the machine publishes: set once (a later publication of the
    /// same start keeps it), cleared by None, and shown in the health snapshot.
    #[test]
    fn stale_since_follows_the_machine() {
        let s = ReflectorStatus::default();
        s.set_stale_since(None);
        assert_eq!(s.stale_for(Instant::now()), None);
        assert_eq!(s.health().stale_seconds, 0.0);
        let at = Instant::now();
        s.set_stale_since(Some(at));
        let wall = s.stale_since().expect("stale");
        s.set_stale_since(Some(at));
        assert_eq!(s.stale_since(), Some(wall), "the same start is kept");
        let d = s.stale_for(at + Duration::from_secs(3)).expect("stale_for");
        assert_eq!(d, Duration::from_secs(3));
        assert!(s.health().stale_since.is_some());
        s.set_stale_since(None);
        assert_eq!(s.stale_for(at + Duration::from_secs(4)), None);
        assert_eq!(s.health().stale_since, None);
        assert_eq!(s.health().stale_seconds, 0.0);
    }
}
