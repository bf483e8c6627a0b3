//! Telemetry: Prometheus metrics, health and a debug view of informers and workqueues
//! (issue 10).
//!
//! See [`Telemetry`].

use std::{
    fmt::{self, Write as _},
    sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak},
    time::{Duration, Instant, SystemTime},
};

use kinformer::{
    series::SeriesConfig,
    workqueue::{DurationHistogram, HISTOGRAM_BOUNDS, WorkQueueMetrics},
};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet},
    metrics::MetricType,
    registry::Registry,
};
use serde::Serialize;

use crate::{
    config::OverflowPolicy,
    telemetry::{
        health::{ReflectorHealth, ReflectorPhase},
        probe::{InformerProbe, Lifecycle, WorkQueueProbe},
        series::{Live, SeriesReport, SeriesSampler},
        stats::{LATENCY_BUCKETS, LatencyHistogram, ListenerStats},
    },
};

/// Errors of [`Telemetry`] and its HTTP endpoint.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// [`Telemetry::serve`] was asked for an address that is not loopback; use
    /// [`Telemetry::serve_on_any_interface`] to expose telemetry beyond this host.
    #[error(
        "refusing to serve telemetry on {0}: not a loopback address (use serve_on_any_interface to expose it)"
    )]
    NotLoopback(std::net::SocketAddr),
    /// The endpoint could not bind its address.
    #[error("cannot bind the telemetry endpoint to {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A live workqueue is already registered under this name (series would collide).
    #[error("a workqueue named {0:?} is already registered")]
    DuplicateWorkQueue(String),
    /// Encoding the metrics failed (a user collector returned an error).
    #[error("encoding the metrics failed")]
    Encode(#[from] fmt::Error),
}

/// The shortest [`TelemetryOptions::series_interval`]: shorter values are raised to it.
pub const MIN_SERIES_INTERVAL: Duration = Duration::from_millis(10);

/// Options of a [`Telemetry`].
#[derive(Clone, Debug)]
pub struct TelemetryOptions {
    /// How long a reflector may fail (back off, with no successful LIST, watch events or opened
    /// watch since its first failure) before `/healthz` reports the process unhealthy.
    /// Default 60 s: above a few of the reflector's backoff steps (R8), so a single failed
    /// request or a short API server restart never fails a liveness probe.
    pub failing_grace: Duration,
    /// How long an informer's cache may be not known current (docs/semantics.md R10: since a
    /// failure, until a watch follows the server again) before `/readyz` reports it not ready.
    /// Default 60 s: a restarted API server is back and relisted well within it (R9).
    pub stale_threshold: Duration,
    /// How often the live series of the debug page's charts are sampled
    /// (`/debug/informers/series`, [`Telemetry::series`]): by the endpoint's timer while it
    /// runs, and by requests for the series, at most once per interval. Default 1 s; at least
    /// `MIN_SERIES_INTERVAL` (10 ms).
    pub series_interval: Duration,
    /// Points kept per series: the charts reach `series_interval × series_points` back.
    /// Default 300 (5 minutes at 1 s). Memory: 24 bytes a point (7.2 KB a series by default);
    /// an informer has 2 series plus 2 per listener, a workqueue 4, and the series of a
    /// source that is gone are dropped at the next sample.
    pub series_points: usize,
}

impl Default for TelemetryOptions {
    fn default() -> Self {
        TelemetryOptions {
            failing_grace: Duration::from_secs(60),
            stale_threshold: Duration::from_secs(60),
            series_interval: Duration::from_secs(1),
            series_points: 300,
        }
    }
}

struct InformerEntry {
    name: Arc<str>,
    probe: Weak<dyn InformerProbe>,
}

struct QueueEntry {
    name: Arc<str>,
    probe: Weak<dyn WorkQueueProbe>,
}

/// The registered sources, shared by the telemetry handle and its collector.
#[derive(Default)]
struct Sources {
    informers: Mutex<Vec<InformerEntry>>,
    queues: Mutex<Vec<QueueEntry>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The lists stay consistent whatever panicked while one was held (pushes and retains).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Sources {
    /// The informers still alive and not shut down, by registration order; forgets the
    /// others (their series disappear).
    fn live_informers(&self) -> Vec<(Arc<str>, Arc<dyn InformerProbe>)> {
        let mut live = Vec::new();
        lock(&self.informers).retain(|e| match e.probe.upgrade() {
            Some(p) if p.lifecycle() != Lifecycle::Stopped => {
                live.push((Arc::clone(&e.name), p));
                true
            }
            _ => false,
        });
        live
    }

    /// The workqueues still alive; forgets dropped ones.
    fn live_queues(&self) -> Vec<(Arc<str>, Arc<dyn WorkQueueProbe>)> {
        let mut live = Vec::new();
        lock(&self.queues).retain(|e| match e.probe.upgrade() {
            Some(p) => {
                live.push((Arc::clone(&e.name), p));
                true
            }
            None => false,
        });
        live
    }
}

struct TelemetryInner {
    options: TelemetryOptions,
    sources: Arc<Sources>,
    registry: Mutex<Registry>,
    series: SeriesSampler,
}

/// Metrics, health and a debug view of informers and workqueues, collected at scrape time.
/// Cheap to clone; every clone is the same registry.
///
/// A [`Telemetry`] is a registry of informers and workqueues. Nothing is counted for it on the
/// hot path: at each scrape its collector reads the counters the actors already publish
/// ([`ReflectorHealth`], [`FifoStatus`](crate::FifoStatus), [`ListenerStats`],
/// [`AsyncWorkQueue::metrics`](crate::AsyncWorkQueue::metrics)) through `Weak` references.
/// An informer that was shut down or dropped yields no series from the next scrape on (and
/// is forgotten): client-go's reflector metrics leaked such series forever
/// (kubernetes#73587). A dropped workqueue's series go the same way.
///
/// ```no_run
/// use k8s_openapi::api::core::v1::Pod;
/// use kinformer_actors::{SharedInformerFactory, Telemetry, AsyncWorkQueue, ObjectKey};
/// # async fn demo(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let telemetry = Telemetry::new();
/// let factory = SharedInformerFactory::new(client).with_telemetry(telemetry.clone());
/// let pods = factory.informer::<Pod>(); // registered by the factory
/// let queue: AsyncWorkQueue<ObjectKey> = AsyncWorkQueue::new();
/// telemetry.register_workqueue("pods", &queue)?;
/// let endpoint = telemetry.serve("127.0.0.1:9090".parse()?).await?;
/// println!("metrics on http://{}/metrics", endpoint.local_addr());
/// # let _ = pods;
/// # Ok(()) }
/// ```
///
/// # Series
///
/// Informer series carry `informer` (the name it was registered under, unique in the
/// telemetry), `resource` (plural) and `namespace` (empty: all namespaces); listener series
/// add `listener`; workqueue series carry `name`, with client-go's names, semantics and
/// buckets (`workqueue_depth`, `workqueue_adds_total`, `workqueue_queue_duration_seconds`,
/// `workqueue_work_duration_seconds`, `workqueue_retries_total`,
/// `workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds`).
///
/// | series | type | what |
/// |---|---|---|
/// | `kinformer_informer_up` | gauge | 1 while running, 0 registered but not started |
/// | `kinformer_informer_synced` | gauge | 1 once synced (F5) |
/// | `kinformer_reflector_lists_total` | counter | LIST requests (pages count) |
/// | `kinformer_reflector_watches_total` | counter | WATCH requests |
/// | `kinformer_reflector_restarts_total` | counter | supervisor restarts (S1) |
/// | `kinformer_reflector_relists_total` | counter | relists after 410 Expired |
/// | `kinformer_reflector_stalls_total` | counter | silent watches dropped (R4) |
/// | `kinformer_reflector_failures_total` | counter | failures backed off from (R8) |
/// | `kinformer_reflector_watch_events_total` | counter | watch events, label `type`: ADDED, MODIFIED, DELETED |
/// | `kinformer_reflector_bookmarks_total` | counter | bookmarks |
/// | `kinformer_reflector_dropped_objects_total` | counter | objects dropped (R5) |
/// | `kinformer_reflector_decode_errors_total` | counter | items or streams not decodable |
/// | `kinformer_reflector_watch_list_fallbacks_total` | counter | watch-lists fallen back to LIST (R7) |
/// | `kinformer_reflector_shard_filtered_total` | counter | objects outside the shard dropped by the informer (K1: the server did not filter) |
/// | `kinformer_reflector_very_short_watches_total` | counter | watches ended at once with no event (R4) |
/// | `kinformer_reflector_retry_after_waits_total` | counter | 429 Retry-After honoured (R8) |
/// | `kinformer_reflector_failing_seconds` | gauge | time since the first failure after the last success (0: healthy) |
/// | `kinformer_informer_stale_seconds` | gauge | how long the cache has not been known current (R10; 0: current) |
/// | `kinformer_reflector_recovery_relists_total` | counter | relists after the 410 that ended an outage, sent after a jitter (R9) |
/// | `kinformer_reflector_server_returns_total` | counter | backoffs after an outage cut short by the API server's return (R11) |
/// | `kinformer_reflector_probed_retries_total` | counter | retries not sent because the client's shared probe found the server down (R11) |
/// | `kinformer_reflector_watching_again_seconds` | gauge | from the API server's last return until this informer watched again (R11; absent before any return) |
/// | `kinformer_server_watching_again_seconds` | gauge | from the API server's last return until every informer of its client watched again (R11; absent before any, or while one does not) |
/// | `kinformer_reflector_last_sync_resource_version` | gauge | the synced resourceVersion, when numeric |
/// | `kinformer_fifo_queued_keys` | gauge | keys in the DeltaFIFO |
/// | `kinformer_fifo_pending_deltas` | gauge | deltas in the DeltaFIFO |
/// | `kinformer_store_objects` | gauge | objects in the cache |
/// | `kinformer_lean_stored_bytes` | gauge | lean mode (I7): bytes of the stored (compressed) objects |
/// | `kinformer_lean_json_bytes` | gauge | lean mode: bytes of their JSON (uncompressed) |
/// | `kinformer_lean_metadata_bytes` | gauge | lean mode: bytes of their parsed metadata |
/// | `kinformer_lean_hot_objects` | gauge | lean mode: objects the hot cache holds decoded |
/// | `kinformer_lean_decodes_total` | counter | lean mode: objects decoded (typed reads, typed handlers, typed index functions) |
/// | `kinformer_lean_hot_hits_total` | counter | lean mode: typed reads answered by the hot cache |
/// | `kinformer_lean_decode_failures_total` | counter | lean mode: stored objects that did not decode into the type |
/// | `kinformer_listener_buffered` | gauge | notifications waiting for the handler (B3) |
/// | `kinformer_listener_received_total` | counter | notifications accepted |
/// | `kinformer_listener_delivered_total` | counter | notifications handled |
/// | `kinformer_listener_dropped_total` | counter | notifications dropped at removal/shutdown (P9) |
/// | `kinformer_listener_coalesced_total` | counter | notifications folded by Coalesce (B3) |
/// | `kinformer_listener_panics_total` | counter | handler panics, a key sink's or key mapper's included (P7) |
/// | `kinformer_listener_decode_failures_total` | counter | lean mode: notifications a typed handler was not given (an object that does not decode) |
/// | `kinformer_listener_undeliverable_total` | counter | notifications a gone user actor (`Recipient`, mailbox closed) was not given (S3) |
/// | `kinformer_listener_handle_duration_seconds` | histogram | handler time per notification |
/// | `kinformer_decode_fallbacks_total` | counter | process-wide, no labels: objects decoded a second time by serde_json because simd-json refused them (`kinformer::exact::fallbacks`) |
/// | `kinformer_shard_dropped_not_owned_total` | counter | workqueue (label `name`): keys dropped or purged as not owned by this replica (W5) |
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<TelemetryInner>,
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl Default for Telemetry {
    /// Same as [`Telemetry::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl Telemetry {
    /// A telemetry registry with default options.
    pub fn new() -> Self {
        Self::with_options(TelemetryOptions::default())
    }

    /// A telemetry registry with the given options.
    pub fn with_options(mut options: TelemetryOptions) -> Self {
        // One floor for the endpoint's sampling timer and the sampler: a zero interval would
        // panic tokio's interval and leave the sampler a zero window (every point dropped).
        options.series_interval = options.series_interval.max(MIN_SERIES_INTERVAL);
        let sources = Arc::new(Sources::default());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(KinformerCollector {
            sources: Arc::clone(&sources),
        }));
        let series = SeriesSampler::new(SeriesConfig {
            interval: options.series_interval,
            capacity: options.series_points,
        });
        Telemetry {
            inner: Arc::new(TelemetryInner {
                options,
                sources,
                registry: Mutex::new(registry),
                series,
            }),
        }
    }

    /// The process-wide telemetry, for programs that want one without passing it around.
    pub fn global() -> &'static Telemetry {
        static GLOBAL: OnceLock<Telemetry> = OnceLock::new();
        GLOBAL.get_or_init(Telemetry::new)
    }

    /// The options in force.
    pub fn options(&self) -> &TelemetryOptions {
        &self.inner.options
    }

    // The public registrations are defined beside what they register, so that telemetry
    // imports neither the informer nor the workqueue: `register_informer` and
    // `register_informer_as` in `informer/shared_informer.rs`, `register_workqueue` in
    // `controller/workqueue.rs`. They come down to these two.

    /// Registers an informer's probe under `name`, made unique; returns the name used.
    pub(crate) fn register_probe(&self, name: &str, probe: Weak<dyn InformerProbe>) -> String {
        let mut informers = lock(&self.inner.sources.informers);
        informers.retain(|e| e.probe.strong_count() > 0);
        if let Some(e) = informers.iter().find(|e| Weak::ptr_eq(&e.probe, &probe)) {
            return e.name.to_string();
        }
        let taken = |n: &str| informers.iter().any(|e| &*e.name == n);
        let mut unique = name.to_string();
        let mut i = 2;
        while taken(&unique) {
            unique = format!("{name}#{i}");
            i += 1;
        }
        informers.push(InformerEntry {
            name: unique.as_str().into(),
            probe,
        });
        unique
    }

    /// Registers a workqueue's probe under `name`; fails if another live queue has that name.
    pub(crate) fn register_queue_probe(
        &self,
        name: &str,
        probe: Weak<dyn WorkQueueProbe>,
    ) -> Result<(), TelemetryError> {
        let mut queues = lock(&self.inner.sources.queues);
        queues.retain(|e| e.probe.strong_count() > 0);
        if let Some(e) = queues.iter().find(|e| &*e.name == name) {
            if Weak::ptr_eq(&e.probe, &probe) {
                return Ok(());
            }
            return Err(TelemetryError::DuplicateWorkQueue(name.to_string()));
        }
        queues.push(QueueEntry {
            name: name.into(),
            probe,
        });
        Ok(())
    }

    /// Runs `f` on the underlying `prometheus-client` registry, e.g. to register a
    /// controller's own metrics, served with kinformer's on `/metrics`.
    pub fn with_registry<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        f(&mut lock(&self.inner.registry))
    }

    /// Every metric in the OpenMetrics text format (what `/metrics` serves), `# EOF` included.
    pub fn encode_metrics(&self) -> Result<String, TelemetryError> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &lock(&self.inner.registry))?;
        Ok(out)
    }

    /// A report of every registered informer still alive (what `/debug/informers` serves).
    pub fn informers(&self) -> Vec<InformerReport> {
        let now = Instant::now();
        self.inner
            .sources
            .live_informers()
            .into_iter()
            .map(|(name, p)| informer_report(&name, &*p, now))
            .collect()
    }

    /// Takes a sample of the live series (the debug page's charts) if one is due, i.e. if
    /// [`TelemetryOptions::series_interval`] passed since the last one; true if it did. The
    /// endpoint calls it on a timer while it runs and before answering for the series; an
    /// application that mounts the routes in its own server (and so runs no endpoint) calls
    /// it on its own timer, or before [`series`](Self::series).
    pub fn sample_series(&self) -> bool {
        let informers = self.inner.sources.live_informers();
        let queues = self.inner.sources.live_queues();
        self.inner.series.sample(
            Instant::now(),
            &Live {
                informers: &informers,
                queues: &queues,
            },
        )
    }

    /// The live series of every registered informer and workqueue over the last
    /// `series_interval × series_points` (what `/debug/informers/series` serves), as sampled
    /// so far by [`sample_series`](Self::sample_series) (reading them takes no sample).
    /// Events per second, FIFO depth, each listener's buffer and mean handler latency; each
    /// workqueue's depth, adds per second, mean queue wait and mean work duration (get →
    /// done: a reconcile).
    pub fn series(&self) -> SeriesReport {
        let informers = self.inner.sources.live_informers();
        let queues = self.inner.sources.live_queues();
        self.inner.series.report(
            Instant::now(),
            &Live {
                informers: &informers,
                queues: &queues,
            },
        )
    }

    /// Liveness (what `/healthz` serves): unhealthy when any registered informer's reflector
    /// has been failing for longer than [`TelemetryOptions::failing_grace`].
    pub fn health(&self) -> HealthReport {
        let now = Instant::now();
        let grace = self.inner.options.failing_grace;
        let mut failing = Vec::new();
        for (name, p) in self.inner.sources.live_informers() {
            let status = p.reflector();
            if let Some(d) = status.failing_for(now).filter(|d| *d > grace) {
                let error = status
                    .health()
                    .last_error
                    .map(|(_, e)| e)
                    .unwrap_or_else(|| "no error recorded".to_string());
                failing.push(format!(
                    "{name}: reflector failing for {:.1}s (grace {grace:?}): {error}",
                    d.as_secs_f64()
                ));
            }
        }
        HealthReport { failing }
    }

    /// Readiness (what `/readyz` serves): ready once every registered informer has synced
    /// (F5) and none has been not known current (R10) for longer than
    /// [`TelemetryOptions::stale_threshold`].
    pub fn readiness(&self) -> ReadinessReport {
        let now = Instant::now();
        let threshold = self.inner.options.stale_threshold;
        let mut report = ReadinessReport::default();
        for (name, p) in self.inner.sources.live_informers() {
            if !p.fifo().has_synced() {
                report.unsynced.push(name.to_string());
            } else if let Some(d) = p.reflector().stale_for(now).filter(|d| *d > threshold) {
                report.stale.push(format!(
                    "{name}: not known current for {:.1}s (threshold {threshold:?})",
                    d.as_secs_f64()
                ));
            }
        }
        report
    }
}

/// The default `informer` label of an informer: `[namespace/]resource`, then its selectors
/// when set (as the factory names its informers).
pub(crate) fn default_informer_name(p: &dyn InformerProbe) -> String {
    let mut name = match p.reflector().namespace() {
        Some(ns) => format!("{ns}/{}", p.resource()),
        None => p.resource().to_string(),
    };
    if let Some(l) = p.label_selector() {
        let _ = write!(name, " labels={l}");
    }
    if let Some(f) = p.field_selector() {
        let _ = write!(name, " fields={f}");
    }
    name
}

/// `/healthz`'s answer: the informers whose reflector failed past the grace period.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HealthReport {
    /// One line per failing informer: name, for how long, the last error.
    pub failing: Vec<String>,
}

impl HealthReport {
    /// True when no reflector failed past the grace period.
    pub fn is_healthy(&self) -> bool {
        self.failing.is_empty()
    }
}

/// `/readyz`'s answer: the informers not synced yet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReadinessReport {
    /// Names of the registered informers that have not synced (F5).
    pub unsynced: Vec<String>,
    /// One line per synced informer whose cache has not been known current for longer than
    /// the stale threshold (R10): name and for how long.
    pub stale: Vec<String>,
}

impl ReadinessReport {
    /// True when every registered informer has synced and none is stale past the threshold.
    pub fn is_ready(&self) -> bool {
        self.unsynced.is_empty() && self.stale.is_empty()
    }
}

/// One informer in the debug view (`/debug/informers`).
#[derive(Clone, Debug, Serialize)]
pub struct InformerReport {
    /// The name it was registered under (the `informer` label).
    pub name: String,
    /// The resource (plural).
    pub resource: String,
    /// The Rust type cached.
    pub type_name: String,
    /// Namespace scope; None: all namespaces.
    pub namespace: Option<String>,
    /// Label selector.
    pub label_selector: Option<String>,
    /// Field selector.
    pub field_selector: Option<String>,
    /// `idle` (not started) or `running`.
    pub state: String,
    /// True once the first list reached every handler (F5).
    pub synced: bool,
    /// The resourceVersion the cache is synced to.
    pub last_sync_resource_version: String,
    /// The reflector's phase: `idle`, `listing`, `watching`, `backing_off` or `stopped`.
    pub phase: String,
    /// While backing off: seconds until the retry, as of the phase change.
    pub backoff_seconds: Option<f64>,
    /// Reflector restarts by the supervisor (S1).
    pub restarts: u64,
    /// The first failure since the last success (RFC 3339), while failing.
    pub failing_since: Option<String>,
    /// Seconds since `failing_since`.
    pub failing_seconds: Option<f64>,
    /// Since when the cache has not been known current (RFC 3339), while stale (R10).
    pub stale_since: Option<String>,
    /// Seconds the cache has not been known current (0: current).
    pub stale_seconds: f64,
    /// From the API server's last return until this informer watched again, in seconds (R11;
    /// None before any return).
    pub watching_again_seconds: Option<f64>,
    /// From the API server's last return until every informer of its client watched again,
    /// in seconds (R11; None before any, or while one does not).
    pub server_watching_again_seconds: Option<f64>,
    /// The last error with its time.
    pub last_error: Option<ErrorReport>,
    /// The reflector's counters.
    pub reflector: ReflectorCountersReport,
    /// Keys queued in the FIFO.
    pub fifo_queued_keys: u64,
    /// Deltas pending in the FIFO.
    pub fifo_pending_deltas: u64,
    /// Objects in the cache.
    pub store_objects: u64,
    /// The lean mode's figures (I7); absent for a typed informer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lean: Option<LeanReport>,
    /// Every listener (handler registration).
    pub listeners: Vec<ListenerReport>,
}

/// A lean informer's store in the debug view (I7).
#[derive(Clone, Debug, Serialize)]
pub struct LeanReport {
    /// Bytes of the stored (compressed) objects.
    pub stored_bytes: u64,
    /// Bytes of their JSON, uncompressed.
    pub json_bytes: u64,
    /// Bytes of their parsed metadata.
    pub metadata_bytes: u64,
    /// Size of the trained compression dictionary (0: none yet).
    pub dictionary_bytes: u64,
    /// Objects the hot cache holds decoded.
    pub hot_objects: u64,
    /// Objects decoded so far.
    pub decodes: u64,
    /// Typed reads answered by the hot cache.
    pub hot_hits: u64,
    /// Stored objects that did not decode into the type.
    pub decode_failures: u64,
}

/// An error with its time.
#[derive(Clone, Debug, Serialize)]
pub struct ErrorReport {
    /// When (RFC 3339, UTC).
    pub at: String,
    /// The error.
    pub message: String,
}

/// The reflector's counters in the debug view.
#[derive(Clone, Debug, Serialize)]
pub struct ReflectorCountersReport {
    /// LIST requests (pages count individually).
    pub lists: u64,
    /// WATCH requests.
    pub watches: u64,
    /// Watch events (ADDED, MODIFIED, DELETED).
    pub events: u64,
    /// Bookmarks.
    pub bookmarks: u64,
    /// Relists after 410 Expired.
    pub relists: u64,
    /// Watches dropped as silent (R4).
    pub stalls: u64,
    /// Failures backed off from (R8).
    pub failures: u64,
    /// Objects dropped (R5).
    pub dropped_objects: u64,
    /// Items or streams that could not be decoded.
    pub decode_errors: u64,
    /// Watch-lists that fell back to LIST (R7).
    pub watch_list_fallbacks: u64,
    /// Relists after the 410 that ended an outage, sent after a jitter (R9).
    pub recovery_relists: u64,
    /// Backoffs after an outage cut short by the API server's return (R11).
    pub server_returns: u64,
    /// Retries not sent because the client's shared probe found the server down (R11).
    pub probed_retries: u64,
}

/// One listener in the debug view.
#[derive(Clone, Debug, Serialize)]
pub struct ListenerReport {
    /// Its name.
    pub name: String,
    /// Its overflow policy (B3): `block`, `coalesce` or `unbounded`.
    pub policy: String,
    /// Notifications waiting in its buffer.
    pub buffered: u64,
    /// Notifications accepted.
    pub received: u64,
    /// Notifications the handler finished.
    pub delivered: u64,
    /// Notifications folded into another by `Coalesce` (B3).
    pub coalesced: u64,
    /// Notifications dropped at removal or shutdown (P9).
    pub dropped: u64,
    /// Handler panics (P7), a key sink's or key mapper's included.
    pub panics: u64,
    /// The registration's `HasSynced` (P5).
    pub synced: bool,
    /// True once the listener stopped.
    pub stopped: bool,
    /// True once the user's actor behind a `Recipient` handler was found gone (S3).
    pub recipient_gone: bool,
    /// Notifications a gone user actor was not given (S3).
    pub undeliverable: u64,
}

/// A listener's handler panics as a user counts them (P7): its callback's, or for a key sink
/// (a workqueue) its key mapper's or enqueue's, which `ListenerStats` keeps apart. Without
/// the second, a controller fed by key sinks always showed 0 panics.
fn handler_panics(l: &ListenerStats) -> u64 {
    l.panics().saturating_add(l.sink_panics())
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn phase_name(p: &ReflectorPhase) -> (&'static str, Option<f64>) {
    match p {
        ReflectorPhase::Idle => ("idle", None),
        ReflectorPhase::Listing => ("listing", None),
        ReflectorPhase::Watching => ("watching", None),
        ReflectorPhase::BackingOff(d) => ("backing_off", Some(d.as_secs_f64())),
        ReflectorPhase::Stopped => ("stopped", None),
    }
}

fn policy_name(p: OverflowPolicy) -> &'static str {
    match p {
        OverflowPolicy::Block => "block",
        OverflowPolicy::Coalesce => "coalesce",
        OverflowPolicy::Unbounded => "unbounded",
    }
}

fn informer_report(name: &str, p: &dyn InformerProbe, now: Instant) -> InformerReport {
    let status = p.reflector();
    let h = status.health();
    let (phase, backoff_seconds) = phase_name(&h.phase);
    let synced = p.fifo().has_synced();
    InformerReport {
        name: name.to_string(),
        resource: p.resource().to_string(),
        type_name: p.type_name().to_string(),
        namespace: status.namespace().map(str::to_string),
        label_selector: p.label_selector().map(str::to_string),
        field_selector: p.field_selector().map(str::to_string),
        state: p.lifecycle().as_str().to_string(),
        synced,
        last_sync_resource_version: h.last_sync_resource_version.clone(),
        phase: phase.to_string(),
        backoff_seconds,
        restarts: h.restarts,
        failing_since: h.failing_since.map(rfc3339),
        failing_seconds: status.failing_for(now).map(|d| d.as_secs_f64()),
        stale_since: h.stale_since.map(rfc3339),
        stale_seconds: status.stale_for(now).map_or(0.0, |d| d.as_secs_f64()),
        watching_again_seconds: h.watching_again_seconds,
        server_watching_again_seconds: h.server_watching_again_seconds,
        last_error: h.last_error.as_ref().map(|(at, message)| ErrorReport {
            at: rfc3339(*at),
            message: message.clone(),
        }),
        reflector: ReflectorCountersReport {
            lists: h.lists,
            watches: h.watches,
            events: h.events,
            bookmarks: h.bookmarks,
            relists: h.expired,
            stalls: h.stalls,
            failures: h.failures,
            dropped_objects: h.dropped_objects,
            decode_errors: h.decode_errors,
            watch_list_fallbacks: h.watch_list_fallbacks,
            recovery_relists: h.recovery_relists,
            server_returns: h.server_returns,
            probed_retries: h.probed_retries,
        },
        fifo_queued_keys: p.fifo().queued_keys(),
        fifo_pending_deltas: p.fifo().pending_deltas(),
        store_objects: p.store_objects() as u64,
        lean: p.lean_stats().map(|l| LeanReport {
            stored_bytes: l.bytes,
            json_bytes: l.json_bytes,
            metadata_bytes: l.meta_bytes,
            dictionary_bytes: l.dictionary_bytes,
            hot_objects: l.hot_objects,
            decodes: l.decodes,
            hot_hits: l.hits,
            decode_failures: l.decode_failures,
        }),
        listeners: p
            .listeners()
            .iter()
            .map(|l| ListenerReport {
                name: l.name().to_string(),
                policy: policy_name(l.policy()).to_string(),
                buffered: l.buffered(),
                received: l.received(),
                delivered: l.delivered(),
                coalesced: l.coalesced(),
                dropped: l.dropped(),
                panics: handler_panics(l),
                synced: l.sync_tracker().has_synced(synced),
                stopped: l.stopped(),
                recipient_gone: l.recipient_gone(),
                undeliverable: l.undeliverable(),
            })
            .collect(),
    }
}

/// The collector registered in every [`Telemetry`]'s registry: reads the live counters at
/// each scrape.
struct KinformerCollector {
    sources: Arc<Sources>,
}

impl fmt::Debug for KinformerCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KinformerCollector").finish_non_exhaustive()
    }
}

/// One sample's value.
enum Value {
    Counter(u64),
    Gauge(f64),
    /// Sum (seconds), count, and per-bucket (non-cumulative) counts with their upper bounds,
    /// `+Inf` last.
    Histogram(f64, u64, Vec<(f64, u64)>),
}

/// Writes one metric family, unless it has no sample.
fn family<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    ty: MetricType,
    rows: Vec<(L, Value)>,
) -> fmt::Result {
    if rows.is_empty() {
        return Ok(());
    }
    let mut metric = enc.encode_descriptor(name, help, None, ty)?;
    for (labels, value) in rows {
        let mut m = metric.encode_family(&labels)?;
        match value {
            Value::Counter(v) => m.encode_counter::<NoLabelSet, u64, u64>(&v, None)?,
            Value::Gauge(v) => m.encode_gauge(&v)?,
            Value::Histogram(sum, count, buckets) => {
                m.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?
            }
        }
    }
    Ok(())
}

fn latency_buckets(h: &LatencyHistogram) -> Value {
    let mut prev = 0;
    let mut buckets: Vec<(f64, u64)> = h
        .cumulative()
        .into_iter()
        .map(|(le, acc)| {
            let n = acc.saturating_sub(prev);
            prev = acc;
            (le, n)
        })
        .collect();
    let count = h.count();
    buckets.push((f64::INFINITY, count.saturating_sub(prev)));
    debug_assert_eq!(buckets.len(), LATENCY_BUCKETS.len() + 1);
    Value::Histogram(h.sum_seconds(), count, buckets)
}

fn duration_buckets(h: &DurationHistogram) -> Value {
    let buckets = HISTOGRAM_BOUNDS
        .iter()
        .map(Duration::as_secs_f64)
        .chain(std::iter::once(f64::INFINITY))
        .zip(h.buckets)
        .collect();
    Value::Histogram(h.sum.as_secs_f64(), h.count, buckets)
}

type InformerLabels<'a> = [(&'static str, &'a str); 3];
type ListenerLabels<'a> = [(&'static str, &'a str); 4];

/// One informer's values read once per scrape.
struct InformerSample {
    name: Arc<str>,
    resource: String,
    namespace: String,
    health: ReflectorHealth,
    up: bool,
    synced: bool,
    failing_seconds: f64,
    stale_seconds: f64,
    queued_keys: u64,
    pending_deltas: u64,
    store_objects: u64,
    lean: Option<kinformer::lean::LeanStats>,
    listeners: Vec<Arc<ListenerStats>>,
}

impl Collector for KinformerCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let now = Instant::now();
        let informers: Vec<InformerSample> = self
            .sources
            .live_informers()
            .into_iter()
            .map(|(name, p)| {
                let status = p.reflector();
                InformerSample {
                    name,
                    resource: p.resource().to_string(),
                    namespace: status.namespace().unwrap_or("").to_string(),
                    health: status.health(),
                    up: p.lifecycle() == Lifecycle::Running,
                    synced: p.fifo().has_synced(),
                    failing_seconds: status.failing_for(now).map_or(0.0, |d| d.as_secs_f64()),
                    stale_seconds: status.stale_for(now).map_or(0.0, |d| d.as_secs_f64()),
                    queued_keys: p.fifo().queued_keys(),
                    pending_deltas: p.fifo().pending_deltas(),
                    store_objects: p.store_objects() as u64,
                    lean: p.lean_stats(),
                    listeners: p.listeners(),
                }
            })
            .collect();
        encode_informers(&mut enc, &informers)?;
        // Process-wide, so no labels (and no `{}`, which some parsers refuse).
        enc.encode_descriptor(
            "kinformer_decode_fallbacks",
            "Objects decoded a second time, by serde_json, because simd-json refused them \
             (process-wide; a count rising with the events means each is decoded twice).",
            None,
            MetricType::Counter,
        )?
        .encode_counter::<NoLabelSet, u64, u64>(&kinformer::exact::fallbacks(), None)?;
        let queues: Vec<(Arc<str>, WorkQueueMetrics)> = self
            .sources
            .live_queues()
            .into_iter()
            .map(|(name, p)| (name, p.metrics()))
            .collect();
        encode_queues(&mut enc, &queues)
    }
}

fn informer_labels(s: &InformerSample) -> InformerLabels<'_> {
    [
        ("informer", &*s.name),
        ("resource", s.resource.as_str()),
        ("namespace", s.namespace.as_str()),
    ]
}

fn encode_informers(enc: &mut DescriptorEncoder<'_>, informers: &[InformerSample]) -> fmt::Result {
    let labels = informer_labels;
    let per = |f: &dyn Fn(&InformerSample) -> Value| -> Vec<(InformerLabels<'_>, Value)> {
        informers.iter().map(|s| (labels(s), f(s))).collect()
    };
    use MetricType::{Counter, Gauge};
    let gauge = |b: bool| Value::Gauge(if b { 1.0 } else { 0.0 });
    family(
        enc,
        "kinformer_informer_up",
        "1 while the informer runs (0: registered, not started).",
        Gauge,
        per(&|s| gauge(s.up)),
    )?;
    family(
        enc,
        "kinformer_informer_synced",
        "1 once the first list reached every handler (F5).",
        Gauge,
        per(&|s| gauge(s.synced)),
    )?;
    family(
        enc,
        "kinformer_reflector_lists",
        "LIST requests (each page counts).",
        Counter,
        per(&|s| Value::Counter(s.health.lists)),
    )?;
    family(
        enc,
        "kinformer_reflector_watches",
        "WATCH requests opened.",
        Counter,
        per(&|s| Value::Counter(s.health.watches)),
    )?;
    family(
        enc,
        "kinformer_reflector_restarts",
        "Reflector restarts by the supervisor (S1).",
        Counter,
        per(&|s| Value::Counter(s.health.restarts)),
    )?;
    family(
        enc,
        "kinformer_reflector_relists",
        "Relists after 410 Expired (R3).",
        Counter,
        per(&|s| Value::Counter(s.health.expired)),
    )?;
    family(
        enc,
        "kinformer_reflector_stalls",
        "Watches dropped client-side because they went silent (R4).",
        Counter,
        per(&|s| Value::Counter(s.health.stalls)),
    )?;
    family(
        enc,
        "kinformer_reflector_failures",
        "Failures the reflector backed off from, every cause (R8).",
        Counter,
        per(&|s| Value::Counter(s.health.failures)),
    )?;
    family(
        enc,
        "kinformer_reflector_watch_events",
        "Watch events received, by type (ADDED, MODIFIED, DELETED).",
        Counter,
        informers
            .iter()
            .flat_map(|s| {
                let [a, b, c] = labels(s);
                let e = s.health.events_by_type;
                [
                    ("ADDED", e.added),
                    ("MODIFIED", e.modified),
                    ("DELETED", e.deleted),
                ]
                .map(|(t, v)| ([a, b, c, ("type", t)], Value::Counter(v)))
            })
            .collect(),
    )?;
    family(
        enc,
        "kinformer_reflector_bookmarks",
        "Watch bookmarks received.",
        Counter,
        per(&|s| Value::Counter(s.health.bookmarks)),
    )?;
    family(
        enc,
        "kinformer_reflector_dropped_objects",
        "Objects dropped: unexpected type or undecodable item (R5).",
        Counter,
        per(&|s| Value::Counter(s.health.dropped_objects)),
    )?;
    family(
        enc,
        "kinformer_reflector_decode_errors",
        "Watch items or streams that could not be decoded.",
        Counter,
        per(&|s| Value::Counter(s.health.decode_errors)),
    )?;
    family(
        enc,
        "kinformer_reflector_watch_list_fallbacks",
        "Watch-lists that fell back to LIST (R7).",
        Counter,
        per(&|s| Value::Counter(s.health.watch_list_fallbacks)),
    )?;
    family(
        enc,
        "kinformer_reflector_shard_filtered",
        "Objects outside the informer's shard that it dropped because the server did not filter (K1).",
        Counter,
        per(&|s| Value::Counter(s.health.shard_filtered)),
    )?;
    family(
        enc,
        "kinformer_reflector_very_short_watches",
        "Watches that ended in under a second with no event (R4).",
        Counter,
        per(&|s| Value::Counter(s.health.very_short_watches)),
    )?;
    family(
        enc,
        "kinformer_reflector_retry_after_waits",
        "429 answers whose Retry-After set the wait (R8).",
        Counter,
        per(&|s| Value::Counter(s.health.retry_after_waits)),
    )?;
    family(
        enc,
        "kinformer_reflector_failing_seconds",
        "Seconds since the reflector's first failure after its last success (0: healthy).",
        Gauge,
        per(&|s| Value::Gauge(s.failing_seconds)),
    )?;
    family(
        enc,
        "kinformer_informer_stale_seconds",
        "Seconds the informer's cache has not been known current: since a failure, until a watch follows the server again (R10; 0: current).",
        Gauge,
        per(&|s| Value::Gauge(s.stale_seconds)),
    )?;
    family(
        enc,
        "kinformer_reflector_recovery_relists",
        "Relists after the 410 that ended an outage, sent after a jitter instead of the grown backoff (R9).",
        Counter,
        per(&|s| Value::Counter(s.health.recovery_relists)),
    )?;
    family(
        enc,
        "kinformer_reflector_server_returns",
        "Backoffs after an outage cut short because the API server's return was announced (R11).",
        Counter,
        per(&|s| Value::Counter(s.health.server_returns)),
    )?;
    family(
        enc,
        "kinformer_reflector_probed_retries",
        "Retries not sent because the client's shared probe had found the API server down (R11).",
        Counter,
        per(&|s| Value::Counter(s.health.probed_retries)),
    )?;
    // R11's figures exist only after a return.
    let some = |f: &dyn Fn(&InformerSample) -> Option<f64>| -> Vec<(InformerLabels<'_>, Value)> {
        informers
            .iter()
            .filter_map(|s| Some((labels(s), Value::Gauge(f(s)?))))
            .collect()
    };
    family(
        enc,
        "kinformer_reflector_watching_again_seconds",
        "Seconds from the API server's last return until this informer watched again: a watch open, the cache known current (R11).",
        Gauge,
        some(&|s| s.health.watching_again_seconds),
    )?;
    family(
        enc,
        "kinformer_server_watching_again_seconds",
        "Seconds from the API server's last return until every informer of its client watched again (R11).",
        Gauge,
        some(&|s| s.health.server_watching_again_seconds),
    )?;
    let rv: Vec<_> = informers
        .iter()
        .filter_map(|s| {
            let v = s.health.last_sync_resource_version.parse::<u64>().ok()?;
            Some((labels(s), Value::Gauge(v as f64)))
        })
        .collect();
    family(
        enc,
        "kinformer_reflector_last_sync_resource_version",
        "The resourceVersion the cache is synced to, when numeric (etcd's revision).",
        Gauge,
        rv,
    )?;
    family(
        enc,
        "kinformer_fifo_queued_keys",
        "Keys queued in the DeltaFIFO.",
        Gauge,
        per(&|s| Value::Gauge(s.queued_keys as f64)),
    )?;
    family(
        enc,
        "kinformer_fifo_pending_deltas",
        "Deltas pending in the DeltaFIFO.",
        Gauge,
        per(&|s| Value::Gauge(s.pending_deltas as f64)),
    )?;
    family(
        enc,
        "kinformer_store_objects",
        "Objects in the informer's cache.",
        Gauge,
        per(&|s| Value::Gauge(s.store_objects as f64)),
    )?;
    // Lean informers only (I7): a typed informer has none of these series.
    let lean =
        |f: &dyn Fn(&kinformer::lean::LeanStats) -> Value| -> Vec<(InformerLabels<'_>, Value)> {
            informers
                .iter()
                .filter_map(|s| Some((labels(s), f(s.lean.as_ref()?))))
                .collect()
        };
    family(
        enc,
        "kinformer_lean_stored_bytes",
        "Lean mode: bytes of the stored (compressed) objects.",
        Gauge,
        lean(&|l| Value::Gauge(l.bytes as f64)),
    )?;
    family(
        enc,
        "kinformer_lean_json_bytes",
        "Lean mode: bytes of the stored objects' JSON, uncompressed.",
        Gauge,
        lean(&|l| Value::Gauge(l.json_bytes as f64)),
    )?;
    family(
        enc,
        "kinformer_lean_metadata_bytes",
        "Lean mode: bytes of the stored objects' parsed metadata.",
        Gauge,
        lean(&|l| Value::Gauge(l.meta_bytes as f64)),
    )?;
    family(
        enc,
        "kinformer_lean_hot_objects",
        "Lean mode: objects the hot cache holds decoded.",
        Gauge,
        lean(&|l| Value::Gauge(l.hot_objects as f64)),
    )?;
    family(
        enc,
        "kinformer_lean_decodes",
        "Lean mode: objects decoded (typed reads, typed handlers, typed index functions).",
        Counter,
        lean(&|l| Value::Counter(l.decodes)),
    )?;
    family(
        enc,
        "kinformer_lean_hot_hits",
        "Lean mode: typed reads answered by the hot cache.",
        Counter,
        lean(&|l| Value::Counter(l.hits)),
    )?;
    family(
        enc,
        "kinformer_lean_decode_failures",
        "Lean mode: stored objects that did not decode into the informer's type.",
        Counter,
        lean(&|l| Value::Counter(l.decode_failures)),
    )?;

    let listener_rows = |f: &dyn Fn(&ListenerStats) -> Value| -> Vec<(ListenerLabels<'_>, Value)> {
        informers
            .iter()
            .flat_map(|s| {
                s.listeners.iter().map(move |l| {
                    let [a, b, c] = labels(s);
                    ([a, b, c, ("listener", l.name())], f(l))
                })
            })
            .collect()
    };
    family(
        enc,
        "kinformer_listener_buffered",
        "Notifications waiting in the listener's buffer (B3).",
        Gauge,
        listener_rows(&|l| Value::Gauge(l.buffered() as f64)),
    )?;
    family(
        enc,
        "kinformer_listener_received",
        "Notifications the listener accepted.",
        Counter,
        listener_rows(&|l| Value::Counter(l.received())),
    )?;
    family(
        enc,
        "kinformer_listener_delivered",
        "Notifications the handler finished (panicked ones included).",
        Counter,
        listener_rows(&|l| Value::Counter(l.delivered())),
    )?;
    family(
        enc,
        "kinformer_listener_dropped",
        "Notifications dropped at removal or shutdown (P9).",
        Counter,
        listener_rows(&|l| Value::Counter(l.dropped())),
    )?;
    family(
        enc,
        "kinformer_listener_coalesced",
        "Notifications folded into another one by the Coalesce policy (B3).",
        Counter,
        listener_rows(&|l| Value::Counter(l.coalesced())),
    )?;
    family(
        enc,
        "kinformer_listener_panics",
        "Notifications whose handler, key sink or key mapper panicked (P7).",
        Counter,
        listener_rows(&|l| Value::Counter(handler_panics(l))),
    )?;
    family(
        enc,
        "kinformer_listener_decode_failures",
        "Lean mode: notifications a typed handler was not given (an object that does not decode).",
        Counter,
        listener_rows(&|l| Value::Counter(l.decode_failures())),
    )?;
    family(
        enc,
        "kinformer_listener_undeliverable",
        "Notifications a gone user actor (a Recipient whose mailbox closed) was not given (S3).",
        Counter,
        listener_rows(&|l| Value::Counter(l.undeliverable())),
    )?;
    family(
        enc,
        "kinformer_listener_handle_duration_seconds",
        "How long the handler took per notification.",
        MetricType::Histogram,
        listener_rows(&|l| latency_buckets(l.handle_latency())),
    )?;
    Ok(())
}

fn encode_queues(
    enc: &mut DescriptorEncoder<'_>,
    queues: &[(Arc<str>, WorkQueueMetrics)],
) -> fmt::Result {
    let per = |f: &dyn Fn(&WorkQueueMetrics) -> Value| -> Vec<([(&'static str, &str); 1], Value)> {
        queues
            .iter()
            .map(|(n, m)| ([("name", &**n)], f(m)))
            .collect()
    };
    use MetricType::{Counter, Gauge, Histogram};
    family(
        enc,
        "workqueue_depth",
        "Current depth of workqueue",
        Gauge,
        per(&|m| Value::Gauge(m.depth as f64)),
    )?;
    family(
        enc,
        "workqueue_adds",
        "Total number of adds handled by workqueue",
        Counter,
        per(&|m| Value::Counter(m.adds)),
    )?;
    family(
        enc,
        "workqueue_queue_duration_seconds",
        "How long in seconds an item stays in workqueue before being requested.",
        Histogram,
        per(&|m| duration_buckets(&m.queue_latency)),
    )?;
    family(
        enc,
        "workqueue_work_duration_seconds",
        "How long in seconds processing an item from workqueue takes.",
        Histogram,
        per(&|m| duration_buckets(&m.work_duration)),
    )?;
    family(
        enc,
        "workqueue_unfinished_work_seconds",
        "How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
        Gauge,
        per(&|m| Value::Gauge(m.unfinished_work.as_secs_f64())),
    )?;
    family(
        enc,
        "workqueue_longest_running_processor_seconds",
        "How many seconds has the longest running processor for workqueue been running.",
        Gauge,
        per(&|m| Value::Gauge(m.longest_running_processor.as_secs_f64())),
    )?;
    family(
        enc,
        "workqueue_retries",
        "Total number of retries handled by workqueue",
        Counter,
        per(&|m| Value::Counter(m.retries)),
    )?;
    family(
        enc,
        "kinformer_shard_dropped_not_owned",
        "Keys a sharded replica's workqueue dropped because it does not own their object (W5)",
        Counter,
        per(&|m| Value::Counter(m.dropped_not_owned)),
    )?;
    Ok(())
}
