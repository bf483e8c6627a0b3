//! The reflector's protocol as a pure state machine (docs/semantics.md R1–R8, S1).
//!
//! client-go's `Reflector.ListAndWatch` decides, after every server answer, what to ask next:
//! LIST (from which resourceVersion, paged or not), WATCH (from which RV, for how long), or
//! nothing yet (back off). [`ReflectorMachine`] makes every one of those decisions and performs
//! none of the I/O, in the shape of quinn-proto: it has no clock and no network of its own.
//!
//! - Inputs are `handle_*` calls, each with `now`: a LIST page or a LIST error, a watch opened,
//!   a group of decoded watch events, a watch that ended cleanly, a watch error, the FIFO having
//!   accepted what it was handed, a timer firing.
//! - Outputs are `poll_*` calls: [`poll_request`](ReflectorMachine::poll_request) (the next
//!   LIST or WATCH to send, only when it is due), [`poll_timeout`](ReflectorMachine::poll_timeout)
//!   (when to call [`handle_timeout`](ReflectorMachine::handle_timeout)),
//!   [`poll_output`](ReflectorMachine::poll_output) (what to hand the DeltaFifo: `Replace`,
//!   `Events`, `Bookmark`) and [`poll_event`](ReflectorMachine::poll_event) (phase changes,
//!   warnings, failures).
//! - Randomness (watch timeouts, backoff jitter) comes from a generator seeded by the caller,
//!   so a test replays a scenario exactly.
//!
//! The driver (the Reflector actor) loops: hand every `poll_output` to the FIFO and wait for its
//! answer (B4), report every `poll_event`, send the `poll_request` if there is one, and otherwise
//! wait for the server or for `poll_timeout`, whichever comes first.
//!
//! # The rules it owns
//!
//! - **R1** The first LIST reads from the watch cache (`resourceVersion=0`, unpaged) or, when
//!   asked, consistently (`""`, paged with `limit`/`continue`). A relist resumes from the last
//!   synced RV (`NotOlderThan`). An expired continue token (410 mid-list) restarts the list at
//!   once, unpaged.
//! - **R2** After the list: `Replace(items, listRV)`, then WATCH from listRV with bookmarks and a
//!   random `timeoutSeconds` in `[min, 2·min)` (so a fleet of informers does not reconnect in
//!   lockstep).
//! - **R3** ADDED/MODIFIED/DELETED become `Events`; a BOOKMARK only moves the RV; an ERROR 410
//!   (or an HTTP 410) makes the next LIST read the latest state (`""`), after the backoff.
//! - **R4** A watch that ends normally is reopened from the last RV at once — unless it ended in
//!   under a second with no event ("very short watch", client-go's rule): that is a failure and
//!   backs off. A watch with no event or bookmark for `idle_timeout` is dropped client-side (the
//!   idle timer restarts with every event, every bookmark and every time the FIFO lets the
//!   reflector read again). Objects without a resourceVersion are delivered like any other; the
//!   RV simply does not move.
//! - **R7** Watch-list (`sendInitialEvents=true`): the initial events up to the bookmark annotated
//!   `k8s.io/initial-events-end` are the list. A server that rejects the request (4xx) or ignores
//!   the parameter (a bookmark without the annotation, or no annotated bookmark within
//!   `watch_list_timeout`, or a watch that ends first) makes the machine fall back to LIST+WATCH
//!   for good, as client-go does; a transient failure falls back for that cycle only.
//! - **R8** One backoff ([`Backoff`]) for every failure path: list errors, watch errors, very
//!   short watches, idle watches, 410 relists; and never less than a 429's Retry-After.
//! - **R9** Recovery: a 410 that answers the first request after an *outage* (failures where the
//!   server did not answer or said it was unavailable: transport errors, 5xx, undecodable
//!   answers, idle watches) proves the server is back, so the relist it asks for waits only a
//!   jitter in `[0, recovery_jitter)`, not the backoff the outage grew. Once per outage: a 410
//!   that follows anything else (another 410, a very short watch, a 429) backs off as usual.
//! - **R10** Staleness: the cache is *not known current* from the first failure after it was
//!   last known current until a watch opens from a completed LIST's RV, or a watch delivers an
//!   event or a bookmark ([`stale_since`](ReflectorMachine::stale_since)).
//! - **K1** A shard selector (KEP-5866) goes on every LIST page and every WATCH;
//!   [`handle_shard_change`](ReflectorMachine::handle_shard_change) changes it on a running
//!   machine: ranges that only shrink hand the FIFO a [`FifoCommand::ShardShrunk`] (what left
//!   leaves the cache; no handler hears of it: the objects still exist) and re-watch from the
//!   last RV without a LIST; an empty shard sends nothing at all (it would be a request for
//!   everything) and waits for the next change, synced with an empty cache; ranges that grow relist the new
//!   selector from the last RV (entering objects become Adds, unchanged ones syncs).
//! - **S1** A failure is reported as [`ReflectorEvent::Failed`] with the time of the retry; the
//!   machine then waits in [`Phase::BackingOff`]. The actor layer ends the reflector actor there
//!   and its supervisor (which keeps this machine across restarts) starts a new one when the
//!   backoff is over: the new one resumes from the last RV and relists only after a 410.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use kinformer::reflector::*;
//!
//! #[derive(Debug)]
//! struct Obj(&'static str); // the resourceVersion of a decoded object
//! impl Versioned for Obj {
//!     fn resource_version(&self) -> Option<&str> { Some(self.0) }
//! }
//!
//! let t0 = Instant::now();
//! let mut m = ReflectorMachine::<Obj>::new(ReflectorConfig::default(), Default::default(), 7);
//! // R1: the first LIST is served from the watch cache.
//! let Some(Request::List(l)) = m.poll_request(t0) else { panic!() };
//! assert_eq!(l.resource_version.as_deref(), Some("0"));
//! m.handle_list_page(t0, ListPage { items: vec![Obj("5")], resource_version: "10".into(), continue_token: None });
//! assert!(matches!(m.poll_output(), Some(FifoCommand::Replace { .. })));
//! // R2: then WATCH from the list's RV.
//! let Some(Request::Watch(w)) = m.poll_request(t0) else { panic!() };
//! assert_eq!(w.resource_version, "10");
//! m.handle_watch_opened(t0);
//! // R4: a watch that ends within a second without events is a failure: back off.
//! m.handle_watch_ended(t0 + Duration::from_millis(10));
//! assert!(m.poll_request(t0 + Duration::from_millis(10)).is_none());
//! assert!(matches!(m.phase(), Phase::BackingOff { .. }));
//! ```

use std::{collections::VecDeque, fmt, sync::Arc, time::Duration, time::Instant};

use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::{
    TraceId,
    backoff::{Backoff, BackoffConfig},
    shard::ShardSelector,
};

mod server_back;
#[cfg(test)]
mod shard_tests;
#[cfg(test)]
mod tests;

/// The annotation on the BOOKMARK that ends a watch-list's initial events (R7).
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// A watch that ends sooner than this without any event is a failure (client-go's "very short
/// watch", R4).
pub const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);

/// How the reflector's first LIST reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum InitialList {
    /// `resourceVersion=0`: served from the API server's watch cache; cheap, possibly stale
    /// (client-go's default).
    #[default]
    FromCache,
    /// `resourceVersion=""`: a consistent (quorum) read, paged with limit/continue.
    Consistent,
}

/// Reflector options (R1–R8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReflectorConfig {
    /// How the first LIST reads (R1). Default: from the watch cache (`resourceVersion=0`).
    pub initial_list: InitialList,
    /// Page size for LIST (`limit`) when listing at a resourceVersion other than `"0"` (a
    /// `resourceVersion=0` list is served whole from the watch cache, as in client-go). Default 500.
    pub page_size: Option<u32>,
    /// Use a watch-list (`sendInitialEvents=true`) instead of LIST (R7). Default false.
    pub watch_list: bool,
    /// How long a watch-list may take to deliver its initial-events-end bookmark before the
    /// server is taken to ignore `sendInitialEvents` and the reflector falls back to LIST (R7).
    /// Default 60 s.
    pub watch_list_timeout: Duration,
    /// Watches ask for a random `timeoutSeconds` in `[min, 2·min)` (R2), capped below kube's
    /// 295 s read timeout. Default 145 s.
    pub min_watch_timeout: Duration,
    /// A watch with no event or bookmark for this long is dropped client-side and reopened after
    /// the backoff (R4). The API server bookmarks idle watches about once a minute, so the default
    /// (90 s) notices a dead connection within 90 s without reopening healthy quiet watches.
    pub idle_timeout: Duration,
    /// How long the server may take to answer a LIST or a WATCH request (its response headers;
    /// a LIST body being streamed and decoded is not cut). A request that takes longer is a
    /// transport failure and backs off (R8). Default 30 s: a server that never answers is
    /// noticed within half a minute instead of the HTTP client's read timeout (295 s in kube).
    pub request_timeout: Duration,
    /// Most events put into one `Events` message (only events already decoded are batched).
    pub event_batch: usize,
    /// Label selector for list and watch.
    pub label_selector: Option<String>,
    /// Field selector for list and watch.
    pub field_selector: Option<String>,
    /// The shard (KEP-5866 hash ranges) listed and watched; `None`: every object (K1).
    pub shard_selector: Option<ShardSelector>,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        ReflectorConfig {
            initial_list: InitialList::FromCache,
            page_size: Some(500),
            watch_list: false,
            watch_list_timeout: Duration::from_secs(60),
            min_watch_timeout: Duration::from_secs(145),
            idle_timeout: Duration::from_secs(90),
            request_timeout: Duration::from_secs(30),
            event_batch: 256,
            label_selector: None,
            field_selector: None,
            shard_selector: None,
        }
    }
}

/// What the machine needs to know of a decoded object: its resourceVersion.
pub trait Versioned {
    /// `metadata.resourceVersion`, if the object has one.
    fn resource_version(&self) -> Option<&str>;
}

impl<K: kube_core::Resource> Versioned for (Arc<K>, TraceId) {
    fn resource_version(&self) -> Option<&str> {
        self.0.meta().resource_version.as_deref()
    }
}

impl<K: kube_core::Resource> Versioned for (Arc<crate::lean::LazyObject<K>>, TraceId) {
    fn resource_version(&self) -> Option<&str> {
        self.0.resource_version()
    }
}

/// `resourceVersionMatch` of a LIST.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionMatch {
    /// Any state not older than the given RV.
    NotOlderThan,
}

/// A LIST request (one page).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ListRequest {
    /// `resourceVersion` (`None`: unset, a consistent read).
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub version_match: Option<VersionMatch>,
    /// `limit` (page size).
    pub limit: Option<u32>,
    /// `continue` token of the next page.
    pub continue_token: Option<String>,
    /// `labelSelector`.
    pub label_selector: Option<String>,
    /// `fieldSelector`.
    pub field_selector: Option<String>,
    /// `shardSelector` (KEP-5866, K1).
    pub shard_selector: Option<ShardSelector>,
}

/// A WATCH request.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct WatchRequest {
    /// `resourceVersion` to watch from (`""`: a watch-list of the latest state).
    pub resource_version: String,
    /// `timeoutSeconds`.
    pub timeout_seconds: u32,
    /// `allowWatchBookmarks` (always true).
    pub allow_bookmarks: bool,
    /// `sendInitialEvents` (watch-list, R7).
    pub send_initial_events: bool,
    /// `labelSelector`.
    pub label_selector: Option<String>,
    /// `fieldSelector`.
    pub field_selector: Option<String>,
    /// `shardSelector` (KEP-5866, K1).
    pub shard_selector: Option<ShardSelector>,
}

/// The next request to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// LIST one page.
    List(ListRequest),
    /// Open a WATCH (or a watch-list).
    Watch(WatchRequest),
}

/// One page of a LIST response, its items already decoded (and transformed).
#[derive(Debug)]
pub struct ListPage<T> {
    /// The page's items.
    pub items: Vec<T>,
    /// The list's `metadata.resourceVersion`.
    pub resource_version: String,
    /// The list's `metadata.continue` (`None` or empty: last page).
    pub continue_token: Option<String>,
}

/// How a request or a watch failed, as the driver classifies the server's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// 410 Gone / Expired: the resourceVersion (or continue token) is too old.
    Gone,
    /// 429 Too Many Requests, with the server's Retry-After if it gave one.
    TooManyRequests {
        /// How long the server asked us to wait.
        retry_after: Option<Duration>,
    },
    /// Any other 4xx: the server will not serve this request as asked (e.g. 422 for a
    /// watch-list it does not support, 403).
    Rejected {
        /// The HTTP status code.
        code: u16,
    },
    /// 5xx.
    Server {
        /// The HTTP status code.
        code: u16,
    },
    /// The connection failed, was reset, or timed out.
    Transport,
    /// The response was not valid JSON (a malformed watch line, a truncated list body).
    Decode,
    /// 504 `ResourceVersionTooLarge`: we asked for a resourceVersion the server has not reached
    /// (its watch cache is behind ours, e.g. another apiserver behind a load balancer, or a
    /// restored etcd). Like a 410, the next LIST reads the latest state.
    TooLargeResourceVersion,
}

impl ErrorKind {
    /// True for the failures of an *outage* (R9): the server did not answer (transport), said
    /// it was unavailable (5xx), or its answer broke off (decode). A 410 that follows one
    /// relists after the recovery jitter instead of the grown backoff.
    pub fn is_outage(&self) -> bool {
        matches!(
            self,
            ErrorKind::Transport | ErrorKind::Server { .. } | ErrorKind::Decode
        )
    }
}

/// The message kube-apiserver gives a `ResourceVersionTooLarge` error (apiserver's
/// `storage.NewTooLargeResourceVersionError`); client-go's `isTooLargeResourceVersionError`
/// matches on it too, for servers that send no cause.
pub const TOO_LARGE_RESOURCE_VERSION: &str = "Too large resource version";

/// A failed request or watch, as fed to the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestError {
    /// The class of failure, which decides what comes next.
    pub kind: ErrorKind,
    /// A human-readable description (for health and logs).
    pub message: String,
}

impl RequestError {
    /// An error of `kind` described by `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        RequestError {
            kind,
            message: message.into(),
        }
    }

    /// Classifies an HTTP status code (410, 429, other 4xx, 5xx) and its message (a 504 or
    /// 500 saying "Too large resource version", as client-go's `isTooLargeResourceVersionError`).
    pub fn from_status(
        code: u16,
        retry_after: Option<Duration>,
        message: impl Into<String>,
    ) -> Self {
        let message = message.into();
        let kind = match code {
            410 => ErrorKind::Gone,
            500 | 504 if message.contains(TOO_LARGE_RESOURCE_VERSION) => {
                ErrorKind::TooLargeResourceVersion
            }
            429 => ErrorKind::TooManyRequests { retry_after },
            400..=499 => ErrorKind::Rejected { code },
            _ => ErrorKind::Server { code },
        };
        RequestError { kind, message }
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// One decoded watch event.
#[derive(Debug)]
pub enum WatchEvent<T> {
    /// ADDED.
    Added(T),
    /// MODIFIED.
    Modified(T),
    /// DELETED.
    Deleted(T),
    /// BOOKMARK: only the resourceVersion moves.
    Bookmark {
        /// The bookmark's resourceVersion.
        resource_version: String,
        /// Annotated `k8s.io/initial-events-end: "true"` (R7).
        initial_events_end: bool,
    },
    /// An ERROR event (a `Status`), or a failure while reading the stream.
    Error(RequestError),
}

/// What a watch event did to an object, as handed to the FIFO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Watch ADDED.
    Add,
    /// Watch MODIFIED.
    Update,
    /// Watch DELETED.
    Delete,
}

/// What to hand the DeltaFifo, in order.
#[derive(Debug)]
pub enum FifoCommand<T> {
    /// A complete list at `resource_version` (R2, F4).
    Replace {
        /// Every listed object.
        items: Vec<T>,
        /// The list's resourceVersion.
        resource_version: String,
    },
    /// Watch events, in watch order (R3).
    Events {
        /// The events.
        events: Vec<(EventKind, T)>,
        /// The newest resourceVersion among them and the bookmarks received with them, if any
        /// carried one (objects without RV do not move it, R4).
        resource_version: Option<String>,
    },
    /// Only bookmarks arrived: the RV moves, nothing else (R3).
    Bookmark {
        /// The bookmark's resourceVersion.
        resource_version: String,
    },
    /// The shard shrank (K2): every queued or known object that `selector` does not match
    /// leaves the cache (a `LeftShard` delta: no handler is told, the objects still exist).
    ShardShrunk {
        /// The new, narrower shard.
        selector: ShardSelector,
    },
}

/// What the reflector is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Listing (a LIST, or a watch-list's initial events).
    Listing,
    /// Watching (or parked on an empty shard, K1: nothing to watch, nothing missed).
    Watching,
    /// Waiting after a failure until the given time (R8).
    BackingOff {
        /// When the next request may go out.
        until: Instant,
    },
}

/// Why the machine backs off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureCause {
    /// A LIST failed.
    List,
    /// A WATCH could not be opened, or failed while streaming.
    Watch,
    /// The server answered 410: the next LIST reads the latest state (R3).
    Expired,
    /// The watch ended in under a second with no event (R4).
    VeryShortWatch,
    /// The watch was silent for `idle_timeout` (R4).
    Idle,
}

impl FailureCause {
    /// A short machine-readable reason.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureCause::List => "list",
            FailureCause::Watch => "watch",
            FailureCause::Expired => "expired",
            FailureCause::VeryShortWatch => "very_short_watch",
            FailureCause::Idle => "idle_watch",
        }
    }
}

/// Why a watch-list fell back to LIST (R7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FallbackReason {
    /// The server refused the watch-list request (e.g. 422): fall back for good.
    Rejected(u16),
    /// The server ignored `sendInitialEvents` (no initial-events-end bookmark): for good.
    Ignored(&'static str),
    /// The watch-list failed transiently: this cycle lists instead.
    Failed(String),
}

/// What the machine reports besides requests and FIFO commands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReflectorEvent {
    /// The phase changed.
    Phase(Phase),
    /// A failure: the machine waits `delay` (until `retry_at`) before the next request (R8, S1).
    Failed {
        /// What failed.
        cause: FailureCause,
        /// The server's error, or what the machine observed.
        message: String,
        /// The backoff chosen (at least the server's Retry-After).
        delay: Duration,
        /// When the next request may go out.
        retry_at: Instant,
    },
    /// The watch-list fell back to LIST+WATCH (R7).
    WatchListFallback(FallbackReason),
    /// A 429's Retry-After was longer than the backoff and was honoured (R8).
    RetryAfterHonoured(Duration),
}

/// Counters of what the machine did (health, S2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReflectorCounters {
    /// LIST requests issued (each page counts).
    pub lists: u64,
    /// WATCH requests issued (watch-lists included).
    pub watches: u64,
    /// Watch events received (ADDED, MODIFIED, DELETED).
    pub events: u64,
    /// ADDED events received (watch-list initial events included).
    pub added: u64,
    /// MODIFIED events received.
    pub modified: u64,
    /// DELETED events received.
    pub deleted: u64,
    /// Bookmarks received.
    pub bookmarks: u64,
    /// 410 answers (each leads to a relist).
    pub expired: u64,
    /// Watches dropped because they were idle (R4).
    pub stalls: u64,
    /// Watches that ended in under a second with no event (R4).
    pub very_short_watches: u64,
    /// Failures that backed off (every cause).
    pub failures: u64,
    /// 429 answers whose Retry-After set the wait (R8).
    pub retry_after_waits: u64,
    /// Watch-lists that fell back to LIST (R7).
    pub watch_list_fallbacks: u64,
    /// Relists after a 410 that followed an outage, sent after the recovery jitter instead of
    /// the grown backoff (R9).
    pub recovery_relists: u64,
    /// Shard changes applied (K2).
    pub shard_changes: u64,
    /// Shard changes that needed a relist because ranges grew (K2).
    pub shard_relists: u64,
    /// Backoffs after an outage cut short because the server's return was announced (R11).
    pub server_returns: u64,
    /// Retries not sent because the client's shared probe had found the server down (R11).
    pub probed_retries: u64,
}

/// What comes after the current wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    List,
    Watch,
}

enum State<T> {
    /// Nothing in flight; `Next` goes out once `not_before` has passed.
    Idle {
        next: Next,
        not_before: Option<Instant>,
    },
    /// A LIST page is in flight.
    Listing {
        items: Vec<T>,
        continue_token: Option<String>,
        paged: bool,
    },
    /// The next page of a LIST is due now.
    ListPageDue {
        items: Vec<T>,
        continue_token: String,
        paged: bool,
    },
    /// A WATCH request is in flight.
    Opening { watch_list: bool },
    /// The shard is empty (K1): nothing to list or watch until it changes.
    Parked,
    /// A watch is streaming.
    Watching {
        opened: Instant,
        /// Events and bookmarks received on this watch.
        received: u64,
        last_activity: Instant,
        /// Watch-list: the initial objects so far and the deadline for the end bookmark.
        initial: Option<Initial<T>>,
    },
}

struct Initial<T> {
    items: Vec<T>,
    /// DELETED events during the initial phase, applied after the Replace.
    deletions: Vec<T>,
    deadline: Instant,
}

/// The reflector's protocol machine. See the [module docs](self).
pub struct ReflectorMachine<T> {
    config: ReflectorConfig,
    state: State<T>,
    backoff: Backoff,
    rng: StdRng,
    /// The RV the cache is synced to (client-go's `lastSyncResourceVersion`).
    last_sync_resource_version: String,
    /// The server said `last_sync_resource_version` is gone: relist at `""` (R3).
    last_sync_unavailable: bool,
    /// False once the server showed it does not support watch-list (R7).
    watch_list: bool,
    /// A transient watch-list failure: list this once.
    list_once: bool,
    /// A continue token expired: the restarted list is unpaged (R1).
    unpaged_restart: bool,
    /// The last failure was an outage (the server did not answer, or said it was unavailable)
    /// and nothing but that has happened since: a 410 now relists after the recovery jitter,
    /// not the grown backoff (R9).
    after_outage: bool,
    /// The server's return was announced (R11) since the last failure: the 410 that answers
    /// the retry relists at once (the return jitter already spread the client's loops).
    returned: bool,
    /// Since when the cache has not been known current (R10); None while it is.
    stale_since: Option<Instant>,
    /// A LIST completed and no watch has opened from its RV yet: the next open makes the cache
    /// known current (R10).
    listed_unconfirmed: bool,
    /// A `Replace` was handed to the FIFO (a LIST, a watch-list, or an empty shard parked).
    replaced_once: bool,
    /// The phase last reported.
    phase: Phase,
    outputs: VecDeque<FifoCommand<T>>,
    events: VecDeque<ReflectorEvent>,
    counters: ReflectorCounters,
}

impl<T> fmt::Debug for ReflectorMachine<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReflectorMachine")
            .field("phase", &self.phase)
            .field(
                "last_sync_resource_version",
                &self.last_sync_resource_version,
            )
            .field("watch_list", &self.watch_list)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl<T: Versioned> ReflectorMachine<T> {
    /// A machine that has not listed yet; `seed` seeds its random choices (timeouts, jitter).
    pub fn new(config: ReflectorConfig, backoff: BackoffConfig, seed: u64) -> Self {
        let watch_list = config.watch_list;
        ReflectorMachine {
            config,
            state: State::Idle {
                next: Next::List,
                not_before: None,
            },
            backoff: Backoff::new(backoff),
            rng: StdRng::seed_from_u64(seed),
            last_sync_resource_version: String::new(),
            last_sync_unavailable: false,
            watch_list,
            list_once: false,
            unpaged_restart: false,
            after_outage: false,
            returned: false,
            stale_since: None,
            listed_unconfirmed: false,
            replaced_once: false,
            phase: Phase::Listing,
            outputs: VecDeque::new(),
            events: VecDeque::new(),
            counters: ReflectorCounters::default(),
        }
    }

    /// The options.
    pub fn config(&self) -> &ReflectorConfig {
        &self.config
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// What the machine did so far.
    pub fn counters(&self) -> &ReflectorCounters {
        &self.counters
    }

    /// The resourceVersion the cache is synced to.
    pub fn last_sync_resource_version(&self) -> &str {
        &self.last_sync_resource_version
    }

    /// Since when the cache has not been known current (R10): the first failure after it last
    /// was, until a watch opens from a completed LIST's RV or a watch delivers an event or a
    /// bookmark. None while known current, and before the first failure (before the first
    /// sync, `has_synced` says more).
    ///
    /// Unlike `has_synced`, which stays true after the first sync (client-go's meaning), this
    /// says whether the cache follows the server *now*.
    pub fn stale_since(&self) -> Option<Instant> {
        self.stale_since
    }

    /// True while a watch is open: the driver reads it until this turns false (the machine
    /// abandons a watch on an idle timeout, an ERROR event or a watch-list fallback).
    pub fn is_watching(&self) -> bool {
        matches!(self.state, State::Watching { .. })
    }

    /// True while the shard is empty (K1): no request is due until
    /// [`handle_shard_change`](Self::handle_shard_change); [`poll_timeout`](Self::poll_timeout)
    /// is `None`, and the driver waits for the shard to change.
    pub fn is_parked(&self) -> bool {
        matches!(self.state, State::Parked)
    }

    /// True while a LIST (all its pages) is in progress.
    pub fn is_listing(&self) -> bool {
        matches!(
            self.state,
            State::Listing { .. } | State::ListPageDue { .. }
        )
    }

    /// Whether the server still counts as supporting watch-list (R7).
    pub fn uses_watch_list(&self) -> bool {
        self.watch_list && !self.list_once
    }

    /// The resourceVersion the next LIST reads at (client-go's `relistResourceVersion`).
    pub fn relist_resource_version(&self) -> &str {
        if self.last_sync_unavailable {
            // The RV we had is gone from the server: ask for the latest consistent state.
            ""
        } else if self.last_sync_resource_version.is_empty() {
            match self.config.initial_list {
                InitialList::FromCache => "0",
                InitialList::Consistent => "",
            }
        } else {
            &self.last_sync_resource_version
        }
    }

    // ---- outputs -------------------------------------------------------------------------

    /// The next request, if one is due at `now`. Call again after every input.
    pub fn poll_request(&mut self, now: Instant) -> Option<Request> {
        match &self.state {
            State::Idle { not_before, .. } if not_before.is_some_and(|t| now < t) => None,
            State::Idle { .. } if self.shard_is_empty() => {
                self.park();
                None
            }
            State::Idle { next, .. } => {
                let next = *next;
                Some(match next {
                    Next::List if self.uses_watch_list() => self.start_watch(true),
                    Next::List => self.start_list(),
                    Next::Watch => self.start_watch(false),
                })
            }
            State::ListPageDue { .. } => {
                let State::ListPageDue {
                    items,
                    continue_token,
                    paged,
                } = std::mem::replace(&mut self.state, State::Opening { watch_list: false })
                else {
                    // Matched just above.
                    return None;
                };
                self.counters.lists += 1;
                let req = ListRequest {
                    limit: self.config.page_size.filter(|_| paged),
                    continue_token: Some(continue_token.clone()),
                    label_selector: self.config.label_selector.clone(),
                    field_selector: self.config.field_selector.clone(),
                    shard_selector: self.config.shard_selector.clone(),
                    ..ListRequest::default()
                };
                self.state = State::Listing {
                    items,
                    continue_token: Some(continue_token),
                    paged,
                };
                Some(Request::List(req))
            }
            _ => None,
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due: the end of a backoff, a watch's
    /// idle deadline, a watch-list's deadline for its initial events.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.state {
            State::Idle { not_before, .. } => *not_before,
            State::Watching {
                last_activity,
                initial,
                ..
            } => {
                let idle = *last_activity + self.config.idle_timeout;
                Some(match initial {
                    Some(i) => idle.min(i.deadline),
                    None => idle,
                })
            }
            _ => None,
        }
    }

    /// The next command for the DeltaFifo, in order. The driver hands each one over and awaits
    /// the FIFO's answer before reading the server again (B4), then calls
    /// [`handle_delivered`](Self::handle_delivered).
    pub fn poll_output(&mut self) -> Option<FifoCommand<T>> {
        self.outputs.pop_front()
    }

    /// The next phase change, warning or failure.
    pub fn poll_event(&mut self) -> Option<ReflectorEvent> {
        self.events.pop_front()
    }

    // ---- inputs --------------------------------------------------------------------------

    /// A timer fired: a backoff ended, or a watch went idle, or a watch-list's initial events
    /// did not end in time.
    pub fn handle_timeout(&mut self, now: Instant) {
        let (idle, initial_late) = match &self.state {
            State::Watching {
                last_activity,
                initial,
                ..
            } => (
                now >= *last_activity + self.config.idle_timeout,
                initial.as_ref().is_some_and(|i| now >= i.deadline),
            ),
            _ => return,
        };
        if initial_late {
            self.fall_back(FallbackReason::Ignored(
                "no initial-events-end bookmark in time",
            ));
        } else if idle {
            self.counters.stalls += 1;
            let msg = format!(
                "watch idle for {:?} (no event or bookmark); reopening",
                self.config.idle_timeout
            );
            // A silent watch is most often a connection the server (or a proxy) lost: an outage.
            self.fail(now, FailureCause::Idle, msg, None, Next::Watch, true);
        }
    }

    /// A LIST page arrived.
    pub fn handle_list_page(&mut self, _now: Instant, page: ListPage<T>) {
        if !matches!(self.state, State::Listing { .. }) {
            // Not listing: a stray page is ignored (the driver only sends pages it asked for),
            // and must not cancel a backoff.
            return;
        }
        let State::Listing {
            mut items, paged, ..
        } = std::mem::replace(
            &mut self.state,
            State::Idle {
                next: Next::Watch,
                not_before: None,
            },
        )
        else {
            // Checked just above.
            return;
        };
        if items.is_empty() {
            items = page.items;
        } else {
            items.extend(page.items);
        }
        match page.continue_token {
            Some(c) if !c.is_empty() => {
                self.state = State::ListPageDue {
                    items,
                    continue_token: c,
                    paged,
                };
            }
            _ => self.listed(items, page.resource_version),
        }
    }

    /// A LIST request failed.
    pub fn handle_list_error(&mut self, now: Instant, error: RequestError) {
        let State::Listing {
            continue_token,
            paged,
            ..
        } = &self.state
        else {
            return;
        };
        if error.kind == ErrorKind::Gone && continue_token.is_some() && *paged {
            // R1: the continue token expired mid-list: start over at once, unpaged, so this
            // cannot repeat within the cycle.
            self.unpaged_restart = true;
            self.state = State::Idle {
                next: Next::List,
                not_before: None,
            };
            return;
        }
        self.request_failed(now, FailureCause::List, error, Next::List);
    }

    /// The WATCH request was answered 200: the stream is open.
    pub fn handle_watch_opened(&mut self, now: Instant) {
        let State::Opening { watch_list } = self.state else {
            return;
        };
        let initial = watch_list.then(|| Initial {
            items: Vec::new(),
            deletions: Vec::new(),
            deadline: now + self.config.watch_list_timeout,
        });
        self.state = State::Watching {
            opened: now,
            received: 0,
            last_activity: now,
            initial,
        };
        if !watch_list {
            self.set_phase(Phase::Watching);
            if std::mem::take(&mut self.listed_unconfirmed) {
                // R10: watching from the RV of a complete list: the cache follows the server.
                self.known_current();
            }
        }
    }

    /// The WATCH request failed, or the stream failed (network, decode, ERROR event) after it
    /// opened.
    pub fn handle_watch_error(&mut self, now: Instant, error: RequestError) {
        if !matches!(self.state, State::Opening { .. } | State::Watching { .. }) {
            return;
        }
        if self.in_watch_list() {
            self.watch_list_failed(now, error);
        } else {
            self.request_failed(now, FailureCause::Watch, error, Next::Watch);
        }
    }

    /// Decoded watch events, in stream order (a group that arrived together).
    pub fn handle_watch_events(&mut self, now: Instant, events: Vec<WatchEvent<T>>) {
        if !self.is_watching() {
            return;
        }
        let mut batch: Vec<(EventKind, T)> = Vec::with_capacity(events.len());
        // The newest RV of the group: a bookmark's (owned), or the index of the newest event
        // carrying one, read once at the end (no string copied per event on the hot path).
        let mut rv: Option<String> = None;
        let mut rv_at: Option<usize> = None;
        let mut failure: Option<RequestError> = None;
        let mut initial_end: Option<String> = None;
        let mut unannotated_bookmark = false;
        let in_initial = self.in_watch_list();
        let mut received = 0u64;
        let mut events = events.into_iter();
        for ev in events.by_ref() {
            let (kind, obj) = match ev {
                WatchEvent::Added(o) => (EventKind::Add, o),
                WatchEvent::Modified(o) => (EventKind::Update, o),
                WatchEvent::Deleted(o) => (EventKind::Delete, o),
                WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end,
                } => {
                    received += 1;
                    self.counters.bookmarks += 1;
                    if in_initial && initial_end.is_none() {
                        if initial_events_end {
                            initial_end = Some(resource_version);
                            // Events after the end bookmark are ordinary watch events; the
                            // initial list must be handed over first.
                            break;
                        }
                        unannotated_bookmark = true;
                        break;
                    }
                    if !resource_version.is_empty() {
                        rv = Some(resource_version);
                        rv_at = None;
                    }
                    continue;
                }
                WatchEvent::Error(e) => {
                    failure = Some(e);
                    break;
                }
            };
            received += 1;
            self.counters.events += 1;
            match kind {
                EventKind::Add => self.counters.added += 1,
                EventKind::Update => self.counters.modified += 1,
                EventKind::Delete => self.counters.deleted += 1,
            }
            if in_initial {
                if let State::Watching {
                    initial: Some(i), ..
                } = &mut self.state
                {
                    match kind {
                        EventKind::Delete => i.deletions.push(obj),
                        _ => i.items.push(obj),
                    }
                }
                continue;
            }
            if obj.resource_version().is_some_and(|v| !v.is_empty()) {
                rv = None;
                rv_at = Some(batch.len());
            }
            batch.push((kind, obj));
        }
        if let State::Watching {
            received: r,
            last_activity,
            ..
        } = &mut self.state
        {
            *r += received;
            *last_activity = now;
        }
        let rv = rv
            .or_else(|| rv_at.and_then(|i| batch.get(i)?.1.resource_version().map(str::to_string)));
        if !in_initial && received > 0 {
            // R10: the watch delivers from our RV: whatever happened before, the cache follows
            // the server again (an ERROR later in the group makes it stale again).
            self.known_current();
        }
        self.emit_events(batch, rv);
        if unannotated_bookmark {
            self.fall_back(FallbackReason::Ignored(
                "bookmark without the initial-events-end annotation",
            ));
            return;
        }
        if let Some(end_rv) = initial_end {
            self.initial_events_ended(end_rv);
            // The rest of the group belongs to the watch proper.
            let rest: Vec<WatchEvent<T>> = events.collect();
            if !rest.is_empty() {
                self.handle_watch_events(now, rest);
            }
            return;
        }
        if let Some(e) = failure {
            self.handle_watch_error(now, e);
        }
    }

    /// The watch stream ended without an error (server timeout or close).
    pub fn handle_watch_ended(&mut self, now: Instant) {
        let State::Watching {
            opened, received, ..
        } = &self.state
        else {
            return;
        };
        let (opened, received) = (*opened, *received);
        if self.in_watch_list() {
            self.fall_back(FallbackReason::Ignored(
                "watch ended before the initial-events-end bookmark",
            ));
            return;
        }
        if received == 0 && now.saturating_duration_since(opened) < VERY_SHORT_WATCH {
            // R4: client-go's "very short watch": the server ends watches at once; reopening
            // immediately would hammer it.
            self.counters.very_short_watches += 1;
            self.fail(
                now,
                FailureCause::VeryShortWatch,
                "very short watch: the watch ended in under a second with no event".to_string(),
                None,
                Next::Watch,
                false,
            );
            return;
        }
        // R4: a normal end: re-watch from the last RV at once.
        self.state = State::Idle {
            next: Next::Watch,
            not_before: None,
        };
    }

    /// The shard changes to `selector` (`None`: every object), K2.
    ///
    /// What left (old ranges not in the new ones) is handed to the FIFO as one
    /// [`FifoCommand::ShardShrunk`], behind everything already output: they leave the cache and
    /// no handler is told (they still exist on the server). Then:
    /// - ranges that only shrank: no LIST; an open (or opening) watch is abandoned and the next
    ///   request is a WATCH of the new selector from the last synced RV;
    /// - ranges that grew (or the hashed field changed): the next request is a LIST of the new
    ///   selector from the last synced RV (`NotOlderThan`), whose `Replace` makes entering
    ///   objects Adds and leaves unchanged ones as syncs (P1, P3: not re-announced);
    /// - a LIST (or a watch-list's initial events) in progress is abandoned and starts over
    ///   with the new selector.
    ///
    /// An empty selector sends nothing: the machine parks ([`is_parked`](Self::is_parked))
    /// until the next change. A backoff in progress is kept (R8). The same selector again is a
    /// no-op.
    pub fn handle_shard_change(&mut self, _now: Instant, selector: Option<ShardSelector>) {
        if self.config.shard_selector == selector {
            return;
        }
        let old = self.config.shard_selector.take();
        // Nothing leaves when the new shard is everything; otherwise what the old shard (or
        // everything) had outside the new one leaves. Mixed fields: everything may move.
        let left = match (&old, &selector) {
            (_, None) => false,
            (None, Some(n)) => !n.is_everything(),
            (Some(o), Some(n)) => o.difference(n).map_or(true, |d| !d.is_empty()),
        };
        let grew = match (&old, &selector) {
            (None, _) => false,
            (Some(o), None) => !o.is_everything(),
            (Some(o), Some(n)) => n.difference(o).map_or(true, |d| !d.is_empty()),
        };
        self.config.shard_selector = selector;
        self.counters.shard_changes += 1;
        if left && let Some(selector) = self.config.shard_selector.clone() {
            self.outputs
                .push_back(FifoCommand::ShardShrunk { selector });
        }
        let listing = self.is_listing() || self.in_watch_list();
        let next = if grew || listing {
            if grew {
                self.counters.shard_relists += 1;
            }
            Next::List
        } else {
            Next::Watch
        };
        match &mut self.state {
            State::Idle { next: n, .. } => {
                // Keep a backoff; a pending LIST stays a LIST.
                if next == Next::List {
                    *n = Next::List;
                }
            }
            _ => {
                if next == Next::List {
                    self.set_phase(Phase::Listing);
                }
                self.state = State::Idle {
                    next,
                    not_before: None,
                };
            }
        }
    }

    /// The FIFO accepted everything handed to it: reading resumes at `now`, so the time spent
    /// waiting on the FIFO (B4) does not count as the server being silent.
    pub fn handle_delivered(&mut self, now: Instant) {
        if let State::Watching { last_activity, .. } = &mut self.state {
            *last_activity = (*last_activity).max(now);
        }
    }

    // ---- internals -----------------------------------------------------------------------

    fn in_watch_list(&self) -> bool {
        matches!(
            self.state,
            State::Watching {
                initial: Some(_),
                ..
            } | State::Opening { watch_list: true }
        )
    }

    fn shard_is_empty(&self) -> bool {
        self.config
            .shard_selector
            .as_ref()
            .is_some_and(ShardSelector::is_empty)
    }

    /// K1: an empty shard selects nothing, so nothing is asked of the server (a request without
    /// ranges would be a request for everything). The first time, an empty `Replace` syncs the
    /// informer; the RV stays where it was, so a later shard change lists from it.
    fn park(&mut self) {
        if !self.replaced_once {
            self.replaced_once = true;
            self.outputs.push_back(FifoCommand::Replace {
                items: Vec::new(),
                resource_version: self.last_sync_resource_version.clone(),
            });
        }
        self.listed_unconfirmed = false;
        self.known_current();
        self.state = State::Parked;
        self.set_phase(Phase::Watching);
    }

    fn set_phase(&mut self, phase: Phase) {
        if self.phase != phase {
            self.phase = phase;
            self.events.push_back(ReflectorEvent::Phase(phase));
        }
    }

    fn start_list(&mut self) -> Request {
        let rv = self.relist_resource_version().to_string();
        let paged = self.config.page_size.is_some() && rv != "0" && !self.unpaged_restart;
        self.unpaged_restart = false;
        self.counters.lists += 1;
        self.set_phase(Phase::Listing);
        let req = self.list_request(&rv, paged);
        self.state = State::Listing {
            items: Vec::new(),
            continue_token: None,
            paged,
        };
        Request::List(req)
    }

    fn list_request(&self, rv: &str, paged: bool) -> ListRequest {
        ListRequest {
            // R1: resourceVersion=0 is served whole from the watch cache (a limit would turn it
            // into a consistent, paged read), so no limit then.
            limit: self.config.page_size.filter(|_| paged && rv != "0"),
            resource_version: (!rv.is_empty()).then(|| rv.to_string()),
            version_match: (!rv.is_empty() && rv != "0").then_some(VersionMatch::NotOlderThan),
            continue_token: None,
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            shard_selector: self.config.shard_selector.clone(),
        }
    }

    fn start_watch(&mut self, watch_list: bool) -> Request {
        let min = self.config.min_watch_timeout.as_secs().max(1);
        // R2: a random timeout in [min, 2·min), below kube's 295 s read timeout.
        let timeout = self.rng.random_range(min..min * 2).min(290) as u32;
        let resource_version = if watch_list {
            // Watch-list: the server sends the state not older than this RV ("" = latest).
            match self.relist_resource_version() {
                "0" => String::new(),
                rv => rv.to_string(),
            }
        } else {
            self.last_sync_resource_version.clone()
        };
        self.counters.watches += 1;
        if watch_list {
            self.set_phase(Phase::Listing);
        }
        self.state = State::Opening { watch_list };
        Request::Watch(WatchRequest {
            resource_version,
            timeout_seconds: timeout,
            allow_bookmarks: true,
            send_initial_events: watch_list,
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            shard_selector: self.config.shard_selector.clone(),
        })
    }

    fn listed(&mut self, items: Vec<T>, resource_version: String) {
        self.list_once = false;
        self.listed_unconfirmed = true;
        self.replaced_once = true;
        self.last_sync_resource_version = resource_version.clone();
        self.last_sync_unavailable = false;
        self.outputs.push_back(FifoCommand::Replace {
            items,
            resource_version,
        });
        self.state = State::Idle {
            next: Next::Watch,
            not_before: None,
        };
    }

    fn initial_events_ended(&mut self, resource_version: String) {
        let State::Watching {
            initial: initial @ Some(_),
            ..
        } = &mut self.state
        else {
            return;
        };
        let Some(i) = initial.take() else { return };
        self.last_sync_resource_version = resource_version.clone();
        self.last_sync_unavailable = false;
        // R10: a watch-list's initial events ended on an open watch: the cache is current.
        self.known_current();
        self.replaced_once = true;
        self.outputs.push_back(FifoCommand::Replace {
            items: i.items,
            resource_version: resource_version.clone(),
        });
        if !i.deletions.is_empty() {
            let events = i
                .deletions
                .into_iter()
                .map(|o| (EventKind::Delete, o))
                .collect();
            self.outputs.push_back(FifoCommand::Events {
                events,
                resource_version: Some(resource_version),
            });
        }
        self.set_phase(Phase::Watching);
    }

    fn emit_events(&mut self, batch: Vec<(EventKind, T)>, rv: Option<String>) {
        if let Some(v) = &rv {
            self.last_sync_resource_version.clone_from(v);
        }
        if !batch.is_empty() {
            self.outputs.push_back(FifoCommand::Events {
                events: batch,
                resource_version: rv,
            });
        } else if let Some(resource_version) = rv {
            self.outputs
                .push_back(FifoCommand::Bookmark { resource_version });
        }
    }

    fn request_failed(&mut self, now: Instant, cause: FailureCause, e: RequestError, next: Next) {
        match e.kind {
            ErrorKind::Gone => {
                // R3: our RV is older than the server keeps: relist the latest state, after
                // the backoff (R8: a server answering 410 to everything must not be hammered).
                self.counters.expired += 1;
                self.last_sync_unavailable = true;
                self.fail(
                    now,
                    FailureCause::Expired,
                    e.message,
                    None,
                    Next::List,
                    false,
                );
            }
            ErrorKind::TooManyRequests { retry_after } => {
                self.fail(now, cause, e.message, retry_after, next, false)
            }
            ErrorKind::TooLargeResourceVersion => {
                // Our RV is ahead of this server's: resuming from it would fail again; relist
                // the latest state, after the backoff.
                self.last_sync_unavailable = true;
                self.fail(now, cause, e.message, None, Next::List, false)
            }
            _ => {
                let outage = e.kind.is_outage();
                self.fail(now, cause, e.message, None, next, outage)
            }
        }
    }

    fn watch_list_failed(&mut self, now: Instant, e: RequestError) {
        match e.kind {
            ErrorKind::Rejected { code } => {
                self.fall_back(FallbackReason::Rejected(code));
            }
            ErrorKind::Gone => {
                // The RV we asked for is gone: the fallback LIST reads the latest state.
                self.counters.expired += 1;
                self.last_sync_unavailable = true;
                self.note_fallback(FallbackReason::Failed(e.message.clone()), false);
                self.fail(
                    now,
                    FailureCause::Expired,
                    e.message,
                    None,
                    Next::List,
                    false,
                );
            }
            ErrorKind::TooManyRequests { retry_after } => {
                self.note_fallback(FallbackReason::Failed(e.message.clone()), false);
                self.fail(
                    now,
                    FailureCause::Watch,
                    e.message,
                    retry_after,
                    Next::List,
                    false,
                );
            }
            ErrorKind::TooLargeResourceVersion => {
                self.last_sync_unavailable = true;
                self.note_fallback(FallbackReason::Failed(e.message.clone()), false);
                self.fail(now, FailureCause::Watch, e.message, None, Next::List, false);
            }
            _ => {
                // client-go: "making progress is better than deadlocking": list this cycle.
                let outage = e.kind.is_outage();
                self.note_fallback(FallbackReason::Failed(e.message.clone()), false);
                self.fail(
                    now,
                    FailureCause::Watch,
                    e.message,
                    None,
                    Next::List,
                    outage,
                );
            }
        }
    }

    /// The server does not do watch-list: LIST now and from now on (R7).
    fn fall_back(&mut self, reason: FallbackReason) {
        self.note_fallback(reason, true);
        self.set_phase(Phase::Listing);
        self.state = State::Idle {
            next: Next::List,
            not_before: None,
        };
    }

    fn note_fallback(&mut self, reason: FallbackReason, for_good: bool) {
        self.counters.watch_list_fallbacks += 1;
        if for_good {
            self.watch_list = false;
        } else {
            self.list_once = true;
        }
        self.events
            .push_back(ReflectorEvent::WatchListFallback(reason));
    }

    /// R10: the cache follows the server again; an outage before it is over (R9).
    fn known_current(&mut self) {
        self.stale_since = None;
        self.after_outage = false;
        self.returned = false;
    }

    /// Backs off (R8) and reports the failure (S1). `outage`: the server did not answer, or
    /// said it was unavailable (R9).
    fn fail(
        &mut self,
        now: Instant,
        cause: FailureCause,
        message: String,
        retry_after: Option<Duration>,
        next: Next,
        outage: bool,
    ) {
        self.counters.failures += 1;
        // R10: the cache is not known current from the first failure on.
        self.stale_since.get_or_insert(now);
        let r: f64 = self.rng.random();
        let recovering = cause == FailureCause::Expired && self.after_outage;
        let returned = std::mem::take(&mut self.returned);
        // R9: one quick relist per outage; anything that is not an outage (this 410 included)
        // ends the exception, so a server answering 410 to everything meets the backoff.
        self.after_outage = outage;
        let mut delay = if recovering {
            // The 410 proves the server is back: the backoff the outage grew would only keep
            // the cache stale. A jitter spreads a fleet's relists.
            self.counters.recovery_relists += 1;
            if returned {
                // R11: the announced return already spread the loops (return jitter).
                Duration::ZERO
            } else {
                self.backoff.recovery_delay(r)
            }
        } else {
            self.backoff.next_delay(now, r)
        };
        if let Some(ra) = retry_after
            && ra > delay
        {
            self.counters.retry_after_waits += 1;
            self.events
                .push_back(ReflectorEvent::RetryAfterHonoured(ra));
            delay = ra;
        }
        let retry_at = now + delay;
        self.state = State::Idle {
            next,
            not_before: Some(retry_at),
        };
        self.events.push_back(ReflectorEvent::Failed {
            cause,
            message,
            delay,
            retry_at,
        });
        self.set_phase(Phase::BackingOff { until: retry_at });
    }
}
