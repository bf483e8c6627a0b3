//! Typed errors of the actor layer.

/// Why a reflector stopped (S1): the supervisor restarts it with backoff, resuming from the last
/// resourceVersion; only an expired RV (410) makes the next start a relist.
#[derive(Debug, thiserror::Error)]
pub enum ReflectorError {
    /// The LIST request failed (network, 5xx, 429, …).
    #[error("list {resource} failed: {source}")]
    List {
        /// The resource's plural.
        resource: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// Opening the WATCH failed.
    #[error("watch {resource} failed: {source}")]
    Watch {
        /// The resource's plural.
        resource: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// The watch stream sent an ERROR event other than 410 (R3: re-watch after backoff).
    #[error("watch {resource} ERROR event: {code} {reason}: {message}")]
    WatchErrorEvent {
        /// The resource's plural.
        resource: String,
        /// HTTP-like status code of the Status object.
        code: u16,
        /// The Status reason.
        reason: String,
        /// The Status message.
        message: String,
    },
    /// A watch line was not valid JSON: the stream is restarted from the last RV so the server
    /// replays whatever that line was (nothing is lost).
    #[error("watch {resource}: malformed event: {source}")]
    Decode {
        /// The resource's plural.
        resource: String,
        /// serde's error.
        #[source]
        source: serde_json::Error,
    },
    /// The watch stream failed while reading (connection reset mid-stream, …).
    #[error("watch {resource} stream failed: {source}")]
    Stream {
        /// The resource's plural.
        resource: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// The watch ended in under a second with no event (client-go's "very short watch", R4):
    /// the server is ending watches at once; reopening is backed off.
    #[error("watch {resource}: very short watch: ended in under a second with no event")]
    VeryShortWatch {
        /// The resource's plural.
        resource: String,
    },
    /// No event or bookmark for the idle timeout: dropped client-side, reopened (R4).
    #[error("watch {resource}: idle for {after:?} (no event or bookmark); reopening")]
    Idle {
        /// The resource's plural.
        resource: String,
        /// The idle timeout.
        after: std::time::Duration,
    },
    /// The server said our resourceVersion is too old (410): relisting after the backoff.
    #[error("{resource}: resourceVersion expired (410); relisting")]
    Expired {
        /// The resource's plural.
        resource: String,
    },
    /// A server failure the machine reported without a kube error at hand.
    #[error("{resource}: {message}")]
    Server {
        /// The resource's plural.
        resource: String,
        /// What the server said.
        message: String,
    },
    /// The reflector panicked (in a transform or validator): restarted from a relist.
    #[error("{resource}: the reflector panicked (transform or validator)")]
    Panicked {
        /// The resource's plural.
        resource: String,
    },
    /// The reflector had neither a request nor a timer (a bug): restarted after backoff.
    #[error("the reflector machine had nothing to do")]
    Stuck,
    /// The DeltaFifo actor is gone (the informer is shutting down).
    #[error("the DeltaFifo actor stopped")]
    FifoStopped,
}

impl ReflectorError {
    /// A short machine-readable reason, for metrics and traces.
    pub fn reason(&self) -> &'static str {
        match self {
            ReflectorError::List { .. } => "list",
            ReflectorError::Watch { .. } => "watch",
            ReflectorError::WatchErrorEvent { .. } => "watch_error_event",
            ReflectorError::Decode { .. } => "decode",
            ReflectorError::Stream { .. } => "stream",
            ReflectorError::VeryShortWatch { .. } => "very_short_watch",
            ReflectorError::Idle { .. } => "idle_watch",
            ReflectorError::Expired { .. } => "expired",
            ReflectorError::Server { .. } => "server",
            ReflectorError::Panicked { .. } => "panicked",
            ReflectorError::Stuck => "stuck",
            ReflectorError::FifoStopped => "fifo_stopped",
        }
    }
}

/// A problem the reflector reports without stopping: an object it dropped (R5) or a watch it
/// ended and reopened (R4). Passed to the watch error handler.
#[derive(Debug, thiserror::Error)]
pub enum WatchWarning {
    /// An event whose object is not of the informer's type/GVK, or does not decode as one (R5).
    #[error("{resource}: dropped an object of an unexpected type: {detail}")]
    UnexpectedObject {
        /// The resource's plural.
        resource: String,
        /// What was wrong.
        detail: String,
    },
    /// No event or bookmark arrived within the idle timeout: dropped client-side and reopened
    /// from the last RV after the backoff (R4).
    #[error("{resource}: watch went silent past its idle timeout; reopening")]
    Stalled {
        /// The resource's plural.
        resource: String,
    },
    /// The server said our resourceVersion is too old (410): relisting.
    #[error("{resource}: resourceVersion expired (410); relisting")]
    Expired {
        /// The resource's plural.
        resource: String,
    },
    /// The server rejected or ignored a watch-list (R7): listing instead.
    #[error("{resource}: watch-list not served ({reason}); falling back to LIST+WATCH")]
    WatchListFallback {
        /// The resource's plural.
        resource: String,
        /// Why.
        reason: String,
    },
}

/// Errors of the informer and factory API.
#[derive(Debug, thiserror::Error)]
pub enum InformerError {
    /// The informer was shut down.
    #[error("the informer has been shut down")]
    ShutDown,
    /// The operation is only allowed before `start`.
    #[error("the informer is already started")]
    AlreadyStarted,
    /// A handler thread or an arbiter could not be spawned.
    #[error("cannot spawn a thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// An actor did not answer (it stopped).
    #[error("actor mailbox: {0}")]
    Mailbox(#[from] actix::MailboxError),
    /// The store rejected an indexer change.
    #[error(transparent)]
    Store(#[from] kinformer::store::StoreError),
    /// No actix System is running on this thread and none was given.
    #[error(
        "no actix System on this thread: run inside actix (#[actix::main]) or use kinformer_actors::runtime::ActixRuntime"
    )]
    NoSystem,
}
