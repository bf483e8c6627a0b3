//! OpenTelemetry export of message traces (feature `otel`; docs/tracing.md, docs/semantics.md T8).
//!
//! [`KinformerOtelLayer`] is a [`tracing_subscriber::Layer`] that reads the records kinformer
//! sends to `tracing` on the target [`TRACE_TARGET`] (the hops of T1 and the `queue`,
//! `reconcile` and `write` records of T5–T7, with the fields of `docs/trace-format.md`) and
//! builds OpenTelemetry spans from them with the user's [`Tracer`], so a trace shows up in the
//! tracing backend the user already runs:
//!
//! - one OTel trace per kinformer trace id, whose root span `kinformer.event {kind} {ns}/{name}
//!   {what}` runs from the first hop to the last handler, with a child span per hop
//!   (`kinformer.reflector`, `kinformer.fifo`, `kinformer.indexer`, `kinformer.listener`,
//!   `kinformer.handler`): a hop's span runs from the hop before it (the `indexer` for a
//!   listener) to the hop; a handler's span is the `dur` the handler took;
//! - a zero-length child span `kinformer.queue {what}` for each workqueue operation caused by
//!   the trace (`added`, `merged`, `dirty`, `delayed`);
//! - a span `kinformer.reconcile {queue} {key}` per reconcile, from its start to its end, whose
//!   parent is the root of the first trace it took and which carries links to the others; the
//!   worker's `got`, and the `rate_limited`, `forget` and `done` of its key, are events on it;
//! - a zero-length child span `kinformer.write {verb} {kind} {ns}/{name}` of the reconcile per
//!   API write; the root of the watch event that brings the write back (same kind, namespace,
//!   name and resourceVersion: T7) links to it (`kinformer.link` = `own_write`).
//!
//! OTel ids: the OpenTelemetry API lets the SDK choose trace and span ids (a `SpanBuilder` has
//! no id fields since opentelemetry 0.28), so the layer keeps the root span context of each
//! kinformer trace id it saw in a bounded map, and finds parents and link targets there; every
//! span carries `kinformer.trace_id` (the 16 hex digits of the trace files) to search by.
//!
//! Next to whatever the subscriber already runs (here a `fmt` layer), with the SDK's batch
//! exporter in a real program (an OTLP exporter from `opentelemetry-otlp`, docs/tracing.md); the
//! SDK's in-memory exporter here:
//!
//! ```
//! use kinformer_actors::otel::{KinformerOtelLayer, trace_filter};
//! use opentelemetry::trace::TracerProvider as _;
//! use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
//! use tracing_subscriber::{Layer as _, filter::LevelFilter, layer::SubscriberExt as _};
//!
//! let exporter = InMemorySpanExporter::default(); // e.g. opentelemetry_otlp::SpanExporter
//! let provider = SdkTracerProvider::builder()
//!     .with_simple_exporter(exporter.clone()) // with_batch_exporter in production
//!     .build();
//! let otel = KinformerOtelLayer::new(provider.tracer("kinformer"));
//! let otel_handle = otel.handle();
//! let subscriber = tracing_subscriber::registry()
//!     .with(tracing_subscriber::fmt::layer().with_filter(LevelFilter::INFO))
//!     .with(otel.with_filter(trace_filter()));
//! tracing::subscriber::set_global_default(subscriber).expect("the first subscriber");
//!
//! // ... run informers and controllers ...
//!
//! otel_handle.flush(); // end the spans still open
//! provider.shutdown().expect("exported");
//! ```
//!
//! Memory is bounded ([`OtelLayerConfig`]): open roots, open reconciles, the contexts of past
//! roots and of past writes live in maps of fixed capacity; when one is full its oldest entry is
//! evicted (an open span is ended at its last hop). A root still open after
//! [`OtelLayerConfig::idle`] without a hop is ended too, and [`KinformerOtelLayer::flush`] (or
//! dropping the layer) ends every open span.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    hash::Hash,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, SystemTime},
};

use opentelemetry::{
    Context, KeyValue,
    trace::{Link, Span, SpanBuilder, SpanContext, Status, TraceContextExt, Tracer},
};
use tracing::{
    Event, Subscriber,
    field::{Field, Visit},
};
use tracing_subscriber::{filter::Targets, layer::Context as LayerContext};

use super::trace::TRACE_TARGET;

/// The capacities and the idle limit of a [`KinformerOtelLayer`]'s maps: its memory bound.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct OtelLayerConfig {
    /// Root spans kept open at once (one per kinformer trace in flight). Default 4096.
    pub max_open_traces: usize,
    /// Reconcile spans kept open at once. Default 1024.
    pub max_open_reconciles: usize,
    /// Span contexts remembered after their root ended, so that later queue operations and
    /// reconciles of the trace find their parent. Default 65 536 (about 3 MiB).
    pub max_known_traces: usize,
    /// Writes remembered until the watch event that brings them back arrives (own-write
    /// links). Default 4096.
    pub max_known_writes: usize,
    /// A root span with no hop for this long is ended at its last hop (a trace that stopped at
    /// the indexer, or at a listener whose notification was merged). Default 30 s.
    pub idle: Duration,
}

impl Default for OtelLayerConfig {
    fn default() -> Self {
        OtelLayerConfig {
            max_open_traces: 4096,
            max_open_reconciles: 1024,
            max_known_traces: 65_536,
            max_known_writes: 4096,
            idle: Duration::from_secs(30),
        }
    }
}

/// A `tracing` filter that passes exactly kinformer's trace records (target
/// [`TRACE_TARGET`] at TRACE): put it on the layer with
/// [`with_filter`](tracing_subscriber::Layer::with_filter), so the layer turns trace records on
/// without turning on anything else for the subscriber's other layers.
pub fn trace_filter() -> Targets {
    Targets::new().with_target(TRACE_TARGET, tracing::Level::TRACE)
}

/// A [`tracing_subscriber::Layer`] that exports kinformer's message traces as OpenTelemetry
/// spans through `tracer` (see the module documentation for the spans it makes).
pub struct KinformerOtelLayer<T: Tracer> {
    tracer: T,
    config: OtelLayerConfig,
    state: Arc<Mutex<State<T::Span>>>,
}

/// A handle on a [`KinformerOtelLayer`] that stays with the caller once the layer is in the
/// subscriber: [`flush`](Self::flush) at shutdown, before the tracer provider's own shutdown.
#[derive(Clone)]
pub struct OtelLayerHandle(Arc<dyn OpenSpans>);

impl fmt::Debug for OtelLayerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (roots, reconciles) = self.0.open();
        f.debug_struct("OtelLayerHandle")
            .field("open_roots", &roots)
            .field("open_reconciles", &reconciles)
            .finish()
    }
}

impl OtelLayerHandle {
    /// Ends every span still open (roots at their last hop, reconciles at their end or last
    /// record), so they reach the exporter.
    pub fn flush(&self) {
        self.0.flush();
    }

    /// The number of root spans and of reconcile spans open now.
    pub fn open_spans(&self) -> (usize, usize) {
        self.0.open()
    }

    /// Entries the layer's bounded maps pushed out so far ([`OtelLayerConfig`]'s limits):
    /// open spans ended early, and contexts forgotten (a later reconcile or own write then
    /// has no parent or link). Above zero, the limits are too small for the load.
    pub fn evicted(&self) -> u64 {
        self.0.evicted()
    }
}

/// What a handle does with the layer's state, whatever its span type.
trait OpenSpans: Send + Sync {
    fn flush(&self);
    fn open(&self) -> (usize, usize);
    fn evicted(&self) -> u64;
}

impl<S: Span + Send> OpenSpans for Mutex<State<S>> {
    fn flush(&self) {
        lock(self).flush();
    }

    fn open(&self) -> (usize, usize) {
        lock(self).open()
    }

    fn evicted(&self) -> u64 {
        lock(self).evicted()
    }
}

fn lock<S>(m: &Mutex<State<S>>) -> MutexGuard<'_, State<S>> {
    // A panic while the lock was held leaves at worst a span unfinished: keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<T: Tracer> fmt::Debug for KinformerOtelLayer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KinformerOtelLayer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<T: Tracer> KinformerOtelLayer<T> {
    /// A layer exporting through `tracer` (e.g. `SdkTracerProvider::tracer("kinformer")`),
    /// with the default [`OtelLayerConfig`].
    pub fn new(tracer: T) -> Self {
        Self::with_config(tracer, OtelLayerConfig::default())
    }

    /// A layer exporting through `tracer` with the given bounds.
    pub fn with_config(tracer: T, config: OtelLayerConfig) -> Self {
        let state = State::new(&config);
        KinformerOtelLayer {
            tracer,
            config,
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// Ends every span still open (roots at their last hop, reconciles at their end or last
    /// record), so they reach the exporter; call before shutting the tracer provider down.
    pub fn flush(&self) {
        lock(&self.state).flush();
    }

    /// The number of root spans and of reconcile spans open now.
    pub fn open_spans(&self) -> (usize, usize) {
        lock(&self.state).open()
    }

    /// Entries the bounded maps pushed out so far (see [`OtelLayerHandle::evicted`]).
    pub fn evicted(&self) -> u64 {
        lock(&self.state).evicted()
    }

    /// A handle to [`flush`](OtelLayerHandle::flush) the layer once it is in the subscriber.
    pub fn handle(&self) -> OtelLayerHandle
    where
        T::Span: Send + 'static,
    {
        OtelLayerHandle(Arc::clone(&self.state) as Arc<dyn OpenSpans>)
    }

    fn record(&self, rec: Fields, name: &str, now: SystemTime) {
        let mut s = lock(&self.state);
        s.expire_idle(now, self.config.idle);
        match name {
            "queue" => s.queue(&self.tracer, rec, now),
            "reconcile" => s.reconcile(&self.tracer, rec, now),
            "write" => s.write(&self.tracer, rec, now),
            // A hop (a `depth` sample has no trace id and is not a span).
            _ if rec.hop.is_some() && rec.depth.is_none() => s.hop(&self.tracer, rec, now),
            _ => {}
        }
    }
}

impl<T: Tracer> Drop for KinformerOtelLayer<T> {
    fn drop(&mut self) {
        self.flush();
    }
}

impl<T, S> tracing_subscriber::Layer<S> for KinformerOtelLayer<T>
where
    T: Tracer + Send + Sync + 'static,
    T::Span: Send + Sync + 'static,
    S: Subscriber,
{
    fn on_event(&self, event: &Event<'_>, _ctx: LayerContext<'_, S>) {
        let meta = event.metadata();
        if meta.target() != TRACE_TARGET {
            return;
        }
        // The hop's time: `tracing` calls layers on the emitting thread, at the hop.
        let now = SystemTime::now();
        let mut rec = Fields::default();
        event.record(&mut rec);
        self.record(rec, meta.name(), now);
    }
}

/// The fields of one trace record, as docs/trace-format.md names them.
#[derive(Debug, Default)]
struct Fields {
    trace: Option<String>,
    hop: Option<String>,
    inst: Option<String>,
    kind: Option<String>,
    ns: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    rv: Option<String>,
    what: Option<String>,
    dur: Option<u64>,
    depth: Option<u64>,
    queue: Option<String>,
    key: Option<String>,
    into: Option<String>,
    traces: Option<String>,
    delay: Option<u64>,
    requeues: Option<u64>,
    reason: Option<String>,
    wait: Option<u64>,
    worker: Option<String>,
    requeued: Option<bool>,
    span: Option<String>,
    result: Option<String>,
    error: Option<String>,
    requeue_after: Option<u64>,
    verb: Option<String>,
}

impl Fields {
    fn set_str(&mut self, field: &str, v: String) {
        let slot = match field {
            "trace" => &mut self.trace,
            "hop" => &mut self.hop,
            "inst" => &mut self.inst,
            "kind" => &mut self.kind,
            "ns" => &mut self.ns,
            "name" => &mut self.name,
            "uid" => &mut self.uid,
            "rv" => &mut self.rv,
            "what" => &mut self.what,
            "queue" => &mut self.queue,
            "key" => &mut self.key,
            "into" => &mut self.into,
            "traces" => &mut self.traces,
            "reason" => &mut self.reason,
            "worker" => &mut self.worker,
            "span" => &mut self.span,
            "result" => &mut self.result,
            "error" => &mut self.error,
            "verb" => &mut self.verb,
            _ => return,
        };
        *slot = Some(v);
    }

    fn set_u64(&mut self, field: &str, v: u64) {
        let slot = match field {
            // `dur_ns` on hop events, `dur` on the others.
            "dur" | "dur_ns" => &mut self.dur,
            "depth" => &mut self.depth,
            "delay" => &mut self.delay,
            "requeues" => &mut self.requeues,
            "wait" => &mut self.wait,
            "requeue_after" => &mut self.requeue_after,
            // A worker written as a number.
            "worker" => {
                self.worker = Some(v.to_string());
                return;
            }
            _ => return,
        };
        *slot = Some(v);
    }

    fn s(v: &Option<String>) -> &str {
        v.as_deref().unwrap_or("")
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set_str(field.name(), value.to_owned());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set_u64(field.name(), value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if let Ok(v) = u64::try_from(value) {
            self.set_u64(field.name(), v);
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if field.name() == "requeued" {
            self.requeued = Some(value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%value` fields (trace ids, span ids, id lists) arrive here, formatted by Display.
        self.set_str(field.name(), format!("{value:?}"));
    }
}

/// A trace or span id as written in traces: 16 hex digits.
fn parse_id(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim(), 16).ok().filter(|&v| v != 0)
}

/// A list of ids: comma-separated hex (how the `tracing` records write `traces` and `into`);
/// brackets, quotes and spaces are tolerated.
fn parse_ids(s: &str) -> Vec<u64> {
    s.split(|c: char| !c.is_ascii_hexdigit())
        .filter_map(parse_id)
        .collect()
}

fn hex(id: u64) -> String {
    format!("{id:016x}")
}

/// A map of bounded size that evicts its oldest entry (in insertion order) when full.
struct Bounded<K, V> {
    cap: usize,
    /// Entries pushed out by the capacity (not replaced): what the bound cost.
    evicted: u64,
    next: u64,
    map: HashMap<K, (u64, V)>,
    order: BTreeMap<u64, K>,
}

impl<K: Hash + Eq + Clone, V> Bounded<K, V> {
    fn new(cap: usize) -> Self {
        Bounded {
            cap: cap.max(1),
            evicted: 0,
            next: 0,
            map: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    /// Inserts (replacing and re-ordering an existing entry); returns what was evicted.
    fn insert(&mut self, k: K, v: V) -> Vec<V> {
        let mut out: Vec<V> = self.remove(&k).into_iter().collect();
        while self.map.len() >= self.cap {
            match self.pop_oldest() {
                Some(v) => {
                    self.evicted += 1;
                    out.push(v);
                }
                None => break,
            }
        }
        self.next += 1;
        self.order.insert(self.next, k.clone());
        self.map.insert(k, (self.next, v));
        out
    }

    fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k).map(|(_, v)| v)
    }

    fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.map.get_mut(k).map(|(_, v)| v)
    }

    fn remove(&mut self, k: &K) -> Option<V> {
        let (seq, v) = self.map.remove(k)?;
        self.order.remove(&seq);
        Some(v)
    }

    fn oldest(&self) -> Option<&V> {
        let (_, k) = self.order.first_key_value()?;
        self.get(k)
    }

    fn pop_oldest(&mut self) -> Option<V> {
        let (_, k) = self.order.pop_first()?;
        self.map.remove(&k).map(|(_, v)| v)
    }
}

/// An open root span: one kinformer trace in flight.
struct Root<S> {
    span: S,
    /// The time of the last hop (the root ends there when it is evicted or idle).
    last: SystemTime,
    /// The time of the indexer hop: where a listener's span starts.
    indexer: Option<SystemTime>,
    /// Listener hops not yet followed by their handler hop; the root ends when a handler
    /// brings it to zero.
    pending: u32,
}

impl<S: Span> Root<S> {
    fn end(mut self) {
        self.span.end_with_timestamp(self.last);
    }
}

/// An open reconcile span.
struct Reconcile<S> {
    span: S,
    ctx: SpanContext,
    /// The queue and key, to find the span from their `queue` records.
    queue_key: (String, String),
    /// The time of its last record.
    last: SystemTime,
    /// The time of its `end` record: it is kept open after it until the worker's `done` (so the
    /// `rate_limited`/`forget`/`done` of its key land on it), then ended at this time.
    ended: Option<SystemTime>,
    /// The worker's `done` came before the `end`.
    done: bool,
}

impl<S: Span> Reconcile<S> {
    fn end(mut self) {
        let at = self.ended.unwrap_or(self.last);
        self.span.end_with_timestamp(at);
    }
}

/// A `got` waiting for its reconcile's `start`.
struct Got {
    t: SystemTime,
    wait: Option<u64>,
    worker: String,
    traces: String,
}

struct State<S> {
    /// Open roots by kinformer trace id.
    roots: Bounded<u64, Root<S>>,
    /// Root span contexts by kinformer trace id, open or ended.
    known: Bounded<u64, SpanContext>,
    /// Open reconciles by kinformer span id.
    reconciles: Bounded<u64, Reconcile<S>>,
    /// The open reconcile of a (queue, key); entries are removed with their reconcile, so this
    /// map is no larger than `reconciles`.
    by_key: HashMap<(String, String), u64>,
    /// `got` records by (queue, key) until their reconcile starts.
    got: Bounded<(String, String), Got>,
    /// Write span contexts by (kind, ns, name, rv), until the watch event that brings the
    /// write back.
    writes: Bounded<(String, String, String, String), SpanContext>,
}

impl<S: Span> State<S> {
    /// Open roots and open reconciles.
    fn open(&self) -> (usize, usize) {
        (self.roots.len(), self.reconciles.len())
    }

    /// Entries every bounded map pushed out.
    fn evicted(&self) -> u64 {
        self.roots.evicted
            + self.known.evicted
            + self.reconciles.evicted
            + self.got.evicted
            + self.writes.evicted
    }

    fn new(c: &OtelLayerConfig) -> Self {
        State {
            roots: Bounded::new(c.max_open_traces),
            known: Bounded::new(c.max_known_traces),
            reconciles: Bounded::new(c.max_open_reconciles),
            by_key: HashMap::new(),
            got: Bounded::new(c.max_open_reconciles),
            writes: Bounded::new(c.max_known_writes),
        }
    }

    fn flush(&mut self) {
        while let Some(r) = self.roots.pop_oldest() {
            r.end();
        }
        while let Some(r) = self.reconciles.pop_oldest() {
            r.end();
        }
        self.by_key.clear();
    }

    /// Ends the roots that had no hop for `idle` (oldest first: insertion order is close to
    /// age order for traces this short-lived).
    fn expire_idle(&mut self, now: SystemTime, idle: Duration) {
        while let Some(r) = self.roots.oldest() {
            let stale = now.duration_since(r.last).is_ok_and(|d| d >= idle);
            if !stale {
                break;
            }
            if let Some(r) = self.roots.pop_oldest() {
                r.end();
            }
        }
    }

    fn end_reconcile(&mut self, id: u64) {
        if let Some(r) = self.reconciles.remove(&id) {
            self.by_key.remove(&r.queue_key);
            r.end();
        }
    }

    fn insert_reconcile(&mut self, id: u64, r: Reconcile<S>) {
        self.by_key.insert(r.queue_key.clone(), id);
        for old in self.reconciles.insert(id, r) {
            if self.by_key.get(&old.queue_key) != Some(&id) {
                self.by_key.remove(&old.queue_key);
            }
            old.end();
        }
    }

    /// The parent context of a child of kinformer trace `id`, if the trace is known.
    fn parent(&self, id: u64) -> Option<Context> {
        self.known
            .get(&id)
            .map(|sc| Context::new().with_remote_span_context(sc.clone()))
    }

    fn hop<T: Tracer<Span = S>>(&mut self, tracer: &T, f: Fields, now: SystemTime) {
        let Some(id) = f.trace.as_deref().and_then(parse_id) else {
            return;
        };
        let hop = Fields::s(&f.hop).to_owned();
        let (kind, ns, name) = (Fields::s(&f.kind), Fields::s(&f.ns), Fields::s(&f.name));
        let (what, rv) = (Fields::s(&f.what), Fields::s(&f.rv));

        if self.roots.get(&id).is_none() {
            // The first hop of this trace (or a late one of an ended trace: it becomes a child
            // of the old root when its context is still known).
            if self.known.get(&id).is_none() {
                self.open_root(tracer, id, &f, now);
            }
        }

        let start = match (self.roots.get(&id), hop.as_str()) {
            (_, "handler") => f
                .dur
                .and_then(|d| now.checked_sub(Duration::from_nanos(d)))
                .unwrap_or(now),
            (Some(r), "listener") => r.indexer.unwrap_or(r.last),
            (Some(r), _) => r.last.min(now),
            (None, _) => now,
        };
        if let Some(cx) = self.parent(id) {
            let mut attrs = vec![
                KeyValue::new("kinformer.trace_id", hex(id)),
                KeyValue::new("kinformer.hop", hop.clone()),
                KeyValue::new("kinformer.inst", Fields::s(&f.inst).to_owned()),
                KeyValue::new("kinformer.what", what.to_owned()),
                KeyValue::new("kinformer.kind", kind.to_owned()),
                KeyValue::new("k8s.namespace.name", ns.to_owned()),
                KeyValue::new("kinformer.name", name.to_owned()),
                KeyValue::new("kinformer.rv", rv.to_owned()),
            ];
            if let Some(d) = f.dur {
                attrs.push(KeyValue::new("kinformer.dur_ns", d as i64));
            }
            let builder = SpanBuilder::from_name(format!("kinformer.{hop}"))
                .with_start_time(start)
                .with_attributes(attrs);
            let mut span = tracer.build_with_context(builder, &cx);
            if what == "panicked" {
                span.set_status(Status::error("the handler panicked"));
            }
            span.end_with_timestamp(now);
        }

        let mut finished = false;
        if let Some(r) = self.roots.get_mut(&id) {
            r.last = now;
            match hop.as_str() {
                "indexer" => r.indexer = Some(now),
                "listener" => r.pending += 1,
                "handler" => {
                    r.pending = r.pending.saturating_sub(1);
                    finished = r.pending == 0;
                }
                _ => {}
            }
        }
        if finished {
            if let Some(r) = self.roots.remove(&id) {
                r.end();
            }
        }
    }

    fn open_root<T: Tracer<Span = S>>(&mut self, tracer: &T, id: u64, f: &Fields, now: SystemTime) {
        let (kind, ns, name) = (Fields::s(&f.kind), Fields::s(&f.ns), Fields::s(&f.name));
        let (what, rv) = (Fields::s(&f.what), Fields::s(&f.rv));
        let object = if ns.is_empty() {
            name.to_owned()
        } else {
            format!("{ns}/{name}")
        };
        let mut attrs = vec![
            KeyValue::new("kinformer.trace_id", hex(id)),
            KeyValue::new("kinformer.kind", kind.to_owned()),
            KeyValue::new("k8s.namespace.name", ns.to_owned()),
            KeyValue::new("kinformer.name", name.to_owned()),
            KeyValue::new("kinformer.uid", Fields::s(&f.uid).to_owned()),
            KeyValue::new("kinformer.rv", rv.to_owned()),
            KeyValue::new("kinformer.what", what.to_owned()),
            KeyValue::new("kinformer.first_hop", Fields::s(&f.hop).to_owned()),
        ];
        // OTel's semantic conventions name the common workload kinds.
        if let Some(key) = semconv_name_key(kind) {
            attrs.push(KeyValue::new(key, name.to_owned()));
        }
        let mut links = Vec::new();
        if f.hop.as_deref() == Some("reflector") && !rv.is_empty() {
            let w = (
                kind.to_owned(),
                ns.to_owned(),
                name.to_owned(),
                rv.to_owned(),
            );
            if let Some(sc) = self.writes.remove(&w) {
                attrs.push(KeyValue::new("kinformer.own_write", true));
                links.push(Link::new(
                    sc,
                    vec![KeyValue::new("kinformer.link", "own_write")],
                    0,
                ));
            }
        }
        let builder = SpanBuilder::from_name(format!("kinformer.event {kind} {object} {what}"))
            .with_start_time(now)
            .with_attributes(attrs)
            .with_links(links);
        let span = tracer.build_with_context(builder, &Context::new());
        self.known.insert(id, span.span_context().clone());
        let root = Root {
            span,
            last: now,
            indexer: None,
            pending: 0,
        };
        for old in self.roots.insert(id, root) {
            old.end();
        }
    }

    fn queue<T: Tracer<Span = S>>(&mut self, tracer: &T, f: Fields, now: SystemTime) {
        let what = Fields::s(&f.what).to_owned();
        let qk = (Fields::s(&f.queue).to_owned(), Fields::s(&f.key).to_owned());
        let mut attrs = vec![
            KeyValue::new("kinformer.queue", qk.0.clone()),
            KeyValue::new("kinformer.key", qk.1.clone()),
            KeyValue::new("kinformer.what", what.clone()),
        ];
        if let Some(d) = f.delay {
            attrs.push(KeyValue::new("kinformer.delay_ns", d as i64));
        }
        if let Some(into) = &f.into {
            attrs.push(KeyValue::new("kinformer.into", into.clone()));
        }
        match what.as_str() {
            "added" | "merged" | "dirty" | "delayed" => {
                // Caused by a traced event: a child of its root.
                let Some(id) = f.trace.as_deref().and_then(parse_id) else {
                    return;
                };
                let Some(cx) = self.parent(id) else { return };
                attrs.push(KeyValue::new("kinformer.trace_id", hex(id)));
                let builder = SpanBuilder::from_name(format!("kinformer.queue {what}"))
                    .with_start_time(now)
                    .with_attributes(attrs);
                tracer
                    .build_with_context(builder, &cx)
                    .end_with_timestamp(now);
                if let Some(r) = self.roots.get_mut(&id) {
                    r.last = now;
                }
            }
            "got" => {
                let got = Got {
                    t: now,
                    wait: f.wait,
                    worker: Fields::s(&f.worker).to_owned(),
                    traces: Fields::s(&f.traces).to_owned(),
                };
                // Superseded `got`s of the key (its reconcile never started) are dropped.
                drop(self.got.insert(qk, got));
            }
            _ => {
                // rate_limited, forget, done, dropped: events of the key's open reconcile.
                let Some(&sid) = self.by_key.get(&qk) else {
                    return;
                };
                if let Some(r) = f.requeues {
                    attrs.push(KeyValue::new("kinformer.requeues", r as i64));
                }
                if let Some(r) = f.requeued {
                    attrs.push(KeyValue::new("kinformer.requeued", r));
                }
                if let Some(r) = &f.reason {
                    attrs.push(KeyValue::new("kinformer.reason", r.clone()));
                }
                let mut end = false;
                if let Some(r) = self.reconciles.get_mut(&sid) {
                    r.span
                        .add_event_with_timestamp(format!("kinformer.queue {what}"), now, attrs);
                    r.last = now;
                    if what == "done" {
                        r.done = true;
                        end = r.ended.is_some();
                    }
                }
                if end {
                    self.end_reconcile(sid);
                }
            }
        }
    }

    fn reconcile<T: Tracer<Span = S>>(&mut self, tracer: &T, f: Fields, now: SystemTime) {
        let Some(sid) = f.span.as_deref().and_then(parse_id) else {
            return;
        };
        let qk = (Fields::s(&f.queue).to_owned(), Fields::s(&f.key).to_owned());
        match f.what.as_deref() {
            Some("start") => {
                // A reconcile of the same key still waiting for its `done` is over.
                if let Some(&old) = self.by_key.get(&qk) {
                    self.end_reconcile(old);
                }
                let traces = parse_ids(Fields::s(&f.traces));
                let known: Vec<(u64, SpanContext)> = traces
                    .iter()
                    .filter_map(|t| self.known.get(t).map(|sc| (*t, sc.clone())))
                    .collect();
                // The parent: the root of the first trace it took (the oldest), if known; the
                // others are links.
                let parent_trace = traces.first().copied();
                let (cx, links) = match known.split_first() {
                    Some(((t, sc), rest)) if Some(*t) == parent_trace => (
                        Context::new().with_remote_span_context(sc.clone()),
                        rest.to_vec(),
                    ),
                    _ => (Context::new(), known),
                };
                let links = links
                    .into_iter()
                    .map(|(t, sc)| {
                        Link::new(
                            sc,
                            vec![
                                KeyValue::new("kinformer.link", "cause"),
                                KeyValue::new("kinformer.trace_id", hex(t)),
                            ],
                            0,
                        )
                    })
                    .collect();
                let ids: Vec<String> = traces.iter().map(|t| hex(*t)).collect();
                let mut attrs = vec![
                    KeyValue::new("kinformer.span_id", hex(sid)),
                    KeyValue::new("kinformer.queue", qk.0.clone()),
                    KeyValue::new("kinformer.key", qk.1.clone()),
                    KeyValue::new("kinformer.worker", Fields::s(&f.worker).to_owned()),
                    KeyValue::new("kinformer.traces", ids.join(",")),
                ];
                if let Some(t) = parent_trace {
                    attrs.push(KeyValue::new("kinformer.trace_id", hex(t)));
                }
                let (q, k) = (&qk.0, &qk.1);
                let builder = SpanBuilder::from_name(format!("kinformer.reconcile {q} {k}"))
                    .with_start_time(now)
                    .with_attributes(attrs)
                    .with_links(links);
                let mut span = tracer.build_with_context(builder, &cx);
                if let Some(g) = self.got.remove(&qk) {
                    let mut attrs = vec![
                        KeyValue::new("kinformer.worker", g.worker),
                        KeyValue::new("kinformer.traces", g.traces),
                    ];
                    if let Some(w) = g.wait {
                        attrs.push(KeyValue::new("kinformer.wait_ns", w as i64));
                    }
                    span.add_event_with_timestamp("kinformer.queue got", g.t, attrs);
                }
                let ctx = span.span_context().clone();
                let r = Reconcile {
                    span,
                    ctx,
                    queue_key: qk,
                    last: now,
                    ended: None,
                    done: false,
                };
                self.insert_reconcile(sid, r);
            }
            Some("end") => {
                let Some(r) = self.reconciles.get_mut(&sid) else {
                    return;
                };
                let result = Fields::s(&f.result).to_owned();
                r.span
                    .set_attribute(KeyValue::new("kinformer.result", result.clone()));
                if let Some(d) = f.requeue_after {
                    r.span
                        .set_attribute(KeyValue::new("kinformer.requeue_after_ns", d as i64));
                }
                if result == "error" {
                    let msg = f.error.clone().unwrap_or_default();
                    r.span
                        .set_attribute(KeyValue::new("error.type", "reconcile"));
                    r.span.set_status(Status::error(msg));
                }
                r.last = now;
                r.ended = Some(now);
                // An unnamed queue records no `done`; nor does a worker that already sent it.
                if r.done || r.queue_key.0.is_empty() {
                    self.end_reconcile(sid);
                }
            }
            _ => {}
        }
    }

    fn write<T: Tracer<Span = S>>(&mut self, tracer: &T, f: Fields, now: SystemTime) {
        let (verb, kind) = (Fields::s(&f.verb), Fields::s(&f.kind));
        let (ns, name, rv) = (Fields::s(&f.ns), Fields::s(&f.name), Fields::s(&f.rv));
        let sid = f.span.as_deref().and_then(parse_id);
        let object = if ns.is_empty() {
            name.to_owned()
        } else {
            format!("{ns}/{name}")
        };
        let mut attrs = vec![
            KeyValue::new("kinformer.verb", verb.to_owned()),
            KeyValue::new("kinformer.kind", kind.to_owned()),
            KeyValue::new("k8s.namespace.name", ns.to_owned()),
            KeyValue::new("kinformer.name", name.to_owned()),
            KeyValue::new("kinformer.rv", rv.to_owned()),
        ];
        if let Some(s) = sid {
            attrs.push(KeyValue::new("kinformer.span_id", hex(s)));
        }
        // A write outside any (known) reconcile is a root of its own.
        let cx = match sid.and_then(|s| self.reconciles.get_mut(&s)) {
            Some(r) => {
                r.last = now;
                Context::new().with_remote_span_context(r.ctx.clone())
            }
            None => Context::new(),
        };
        let builder = SpanBuilder::from_name(format!("kinformer.write {verb} {kind} {object}"))
            .with_start_time(now)
            .with_attributes(attrs);
        let mut span = tracer.build_with_context(builder, &cx);
        span.end_with_timestamp(now);
        if !rv.is_empty() {
            let w = (
                kind.to_owned(),
                ns.to_owned(),
                name.to_owned(),
                rv.to_owned(),
            );
            drop(self.writes.insert(w, span.span_context().clone()));
        }
    }
}

/// The OTel semantic-convention attribute naming an object of `kind`, where one exists
/// (`k8s.pod.name`, `k8s.deployment.name`, ...).
fn semconv_name_key(kind: &str) -> Option<&'static str> {
    let key = match kind {
        "Pod" => "k8s.pod.name",
        "Deployment" => "k8s.deployment.name",
        "ReplicaSet" => "k8s.replicaset.name",
        "StatefulSet" => "k8s.statefulset.name",
        "DaemonSet" => "k8s.daemonset.name",
        "Job" => "k8s.job.name",
        "CronJob" => "k8s.cronjob.name",
        "Node" => "k8s.node.name",
        _ => return None,
    };
    Some(key)
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanId, TracerProvider as _};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
    use tracing::Level;
    use tracing_subscriber::{Layer as _, layer::SubscriberExt as _};

    use super::*;

    const A: &str = "0000010000000001";
    const B: &str = "0000010000000002";
    const C: &str = "0000010000000003";
    const S: &str = "00000a0000000001";

    /// Runs `emit` under a subscriber whose only layer is a [`KinformerOtelLayer`] with
    /// `config`; returns the spans exported once the subscriber (and so the layer) is dropped.
    fn export(config: OtelLayerConfig, emit: impl FnOnce(&OtelLayerHandle)) -> Vec<SpanData> {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = KinformerOtelLayer::with_config(provider.tracer("kinformer-test"), config);
        let handle = layer.handle();
        let subscriber = tracing_subscriber::registry().with(layer.with_filter(trace_filter()));
        tracing::subscriber::with_default(subscriber, || emit(&handle));
        exporter.get_finished_spans().expect("the exporter is up")
    }

    fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
        spans.iter().filter(|s| s.name == name).collect()
    }

    fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
        let found = named(spans, name);
        assert_eq!(found.len(), 1, "one span {name:?} in {:#?}", names(spans));
        found[0]
    }

    fn names(spans: &[SpanData]) -> Vec<&str> {
        spans.iter().map(|s| &*s.name).collect()
    }

    fn attr(span: &SpanData, key: &str) -> Option<String> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    }

    /// A hop exactly as `trace::Tracer::emit` sends it.
    fn hop(trace: &str, hop: &str, inst: &str, kind: &str, name: &str, rv: &str, what: &str) {
        let dur_ns = (hop == "handler").then_some(2_000_000u64);
        tracing::event!(
            target: TRACE_TARGET,
            Level::TRACE,
            trace = %trace,
            hop,
            inst,
            kind,
            ns = "demo",
            name,
            uid = "u-1",
            rv,
            what,
            dur_ns,
        );
    }

    /// T8: the records of the "Beyond the handler" contract, emitted by hand with its field
    /// names, make a reconcile span under the root of the first trace it took, linked to the
    /// other, with its write as a child; the watch event bringing the write back links to it.
    #[test]
    fn t8_reconcile_span_parent_links_and_writes() {
        let spans = export(OtelLayerConfig::default(), |handle| {
            let inst = "apps/v1/Deployment ns=demo";
            for (t, rv, what) in [(A, "10", "added"), (B, "11", "modified")] {
                hop(t, "reflector", inst, "Deployment", "web", rv, what);
                hop(t, "fifo", inst, "Deployment", "web", rv, "queued");
            }
            hop(A, "indexer", inst, "Deployment", "web", "10", "added");
            hop(A, "listener", "to-queue", "Deployment", "web", "10", "add");
            tracing::trace!(name: "queue", target: TRACE_TARGET, queue = "deployments",
                key = "demo/web", what = "added", trace = %A);
            hop(
                A,
                "handler",
                "to-queue",
                "Deployment",
                "web",
                "10",
                "handled",
            );
            hop(B, "indexer", inst, "Deployment", "web", "11", "updated");
            hop(
                B,
                "listener",
                "to-queue",
                "Deployment",
                "web",
                "11",
                "update",
            );
            tracing::trace!(name: "queue", target: TRACE_TARGET, queue = "deployments",
                key = "demo/web", what = "merged", trace = %B, into = %A);
            hop(
                B,
                "handler",
                "to-queue",
                "Deployment",
                "web",
                "11",
                "handled",
            );
            assert_eq!(
                handle.open_spans(),
                (0, 0),
                "both traces ended at their handler"
            );

            let traces = format!("{A},{B}");
            tracing::trace!(name: "queue", target: TRACE_TARGET, queue = "deployments",
                key = "demo/web", what = "got", traces = %traces, wait = 1_000u64,
                worker = "2");
            tracing::trace!(name: "reconcile", target: TRACE_TARGET, what = "start",
                span = %S, queue = "deployments", key = "demo/web", traces = %traces,
                worker = "2");
            tracing::trace!(name: "write", target: TRACE_TARGET, span = %S, verb = "create",
                kind = "ReplicaSet", ns = "demo", name = "web-5d4f8", rv = "12");
            tracing::trace!(name: "reconcile", target: TRACE_TARGET, what = "end", span = %S,
                queue = "deployments", key = "demo/web", result = "requeue",
                requeue_after = 5_000_000_000u64, dur = 500_000u64);
            assert_eq!(
                handle.open_spans(),
                (0, 1),
                "the reconcile waits for `done`"
            );
            tracing::trace!(name: "queue", target: TRACE_TARGET, queue = "deployments",
                key = "demo/web", what = "done", dur = 600_000u64, requeued = false);
            assert_eq!(handle.open_spans(), (0, 0), "`done` ends the reconcile");

            // The write comes back through the watch (T7).
            let rs = "apps/v1/ReplicaSet ns=demo";
            hop(C, "reflector", rs, "ReplicaSet", "web-5d4f8", "12", "added");
        });

        let root_a = one(&spans, "kinformer.event Deployment demo/web added");
        let root_b = one(&spans, "kinformer.event Deployment demo/web modified");
        assert_eq!(root_a.parent_span_id, SpanId::INVALID, "a root");
        assert_eq!(attr(root_a, "kinformer.trace_id").as_deref(), Some(A));
        assert_eq!(attr(root_a, "k8s.deployment.name").as_deref(), Some("web"));
        assert_eq!(attr(root_a, "k8s.namespace.name").as_deref(), Some("demo"));
        assert_ne!(
            root_a.span_context.trace_id(),
            root_b.span_context.trace_id(),
            "one OTel trace per kinformer trace"
        );
        for hop in ["reflector", "fifo", "indexer", "listener", "handler"] {
            let spans = named(&spans, &format!("kinformer.{hop}"));
            let of_a: Vec<_> = spans
                .iter()
                .filter(|s| attr(s, "kinformer.trace_id").as_deref() == Some(A))
                .collect();
            assert_eq!(of_a.len(), 1, "one {hop} span of trace A");
            assert_eq!(of_a[0].parent_span_id, root_a.span_context.span_id());
            assert_eq!(
                of_a[0].span_context.trace_id(),
                root_a.span_context.trace_id()
            );
            assert_eq!(attr(of_a[0], "kinformer.hop").as_deref(), Some(hop));
        }
        let handler = named(&spans, "kinformer.handler")[0];
        let took = handler.end_time.duration_since(handler.start_time).ok();
        assert_eq!(took, Some(Duration::from_millis(2)), "the handler's `dur`");

        let added = one(&spans, "kinformer.queue added");
        assert_eq!(added.parent_span_id, root_a.span_context.span_id());
        let merged = one(&spans, "kinformer.queue merged");
        assert_eq!(merged.parent_span_id, root_b.span_context.span_id());
        assert_eq!(attr(merged, "kinformer.into").as_deref(), Some(A));

        let rec = one(&spans, "kinformer.reconcile deployments demo/web");
        assert_eq!(rec.parent_span_id, root_a.span_context.span_id());
        assert_eq!(rec.span_context.trace_id(), root_a.span_context.trace_id());
        let links: Vec<_> = rec.links.iter().map(|l| &l.span_context).collect();
        assert_eq!(links, [&root_b.span_context], "linked to the other trace");
        assert_eq!(attr(rec, "kinformer.result").as_deref(), Some("requeue"));
        assert_eq!(
            attr(rec, "kinformer.traces"),
            Some(format!("{A},{B}")),
            "every trace it took"
        );
        let events: Vec<_> = rec.events.iter().map(|e| &*e.name).collect();
        assert_eq!(events, ["kinformer.queue got", "kinformer.queue done"]);

        let write = one(&spans, "kinformer.write create ReplicaSet demo/web-5d4f8");
        assert_eq!(write.parent_span_id, rec.span_context.span_id());
        assert_eq!(attr(write, "kinformer.verb").as_deref(), Some("create"));
        assert_eq!(attr(write, "kinformer.rv").as_deref(), Some("12"));

        let back = one(&spans, "kinformer.event ReplicaSet demo/web-5d4f8 added");
        let links: Vec<_> = back.links.iter().map(|l| &l.span_context).collect();
        assert_eq!(links, [&write.span_context], "the own write is linked");
        assert_eq!(attr(back, "kinformer.own_write").as_deref(), Some("true"));
    }

    /// T8, bounded memory: with room for two open roots, a third trace evicts (ends) the
    /// oldest; flushing ends the rest.
    #[test]
    fn t8_open_roots_are_bounded() {
        let config = OtelLayerConfig {
            max_open_traces: 2,
            ..OtelLayerConfig::default()
        };
        let spans = export(config, |handle| {
            for (t, name) in [(A, "a"), (B, "b"), (C, "c")] {
                hop(t, "reflector", "v1/Pod", "Pod", name, "1", "added");
                assert!(handle.open_spans().0 <= 2, "at most two open roots");
            }
            assert_eq!(handle.open_spans(), (2, 0));
            assert_eq!(handle.evicted(), 1, "the eviction is counted");
            handle.flush();
            assert_eq!(handle.open_spans(), (0, 0));
            assert_eq!(handle.evicted(), 1, "a flush is not an eviction");
        });
        let roots: Vec<_> = spans
            .iter()
            .filter(|s| s.name.starts_with("kinformer.event"))
            .map(|s| &*s.name)
            .collect();
        assert_eq!(
            roots,
            [
                "kinformer.event Pod demo/a added",
                "kinformer.event Pod demo/b added",
                "kinformer.event Pod demo/c added"
            ],
            "the oldest ended first (evicted), the others at the flush"
        );
    }
}
