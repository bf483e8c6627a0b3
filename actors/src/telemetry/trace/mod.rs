//! Message traces (docs/semantics.md T1–T7).
//!
//! Every watch event and listed object gets a [`TraceId`] in the reflector; deltas a resync
//! or a relist makes (Sync deltas, tombstones) get theirs in the indexer, and a late
//! listener's replay in the indexer too. The id travels inside every message (`Replace`,
//! `Events`, `ProcessDeltas`, `Notifications`, [`Notify`](crate::Notify)) so each hop records
//! where the object is: `reflector → fifo → indexer → listener → handler`, each hop with its
//! actor instance (the informer for the first three, the listener's name for the last two).
//!
//! A hop goes to two places, each switched on separately:
//! - a `tracing` event on the target [`TRACE_TARGET`] at TRACE level, for any subscriber;
//! - the process-wide [`TraceSink`], a JSON-lines file written off the hot path in the format
//!   of `docs/trace-format.md` (on with [`TraceSink::start`] or `KINFORMER_TRACE=path`, see
//!   [`init_from_env`]).
//!
//! Only identity travels: kind, namespace, name, uid, resourceVersion, delta or notification
//! type and hop. Object bodies enter the sink only when opted in
//! ([`TraceSinkConfig::bodies`]), and never for Secrets (T3). With neither on, a hop costs one
//! relaxed load and tracing's cached callsite check, and allocates nothing (T4; measured by
//! `actors/benches/trace_hop.rs`).
//!
//! Beyond the handler (T5–T7): a named workqueue records what it does with each key and the
//! trace ids a key carries to the worker; a [`ReconcileSpan`] marks a reconcile's start and
//! end under those ids, and [`record_write`] the API writes it makes with the
//! resourceVersion the server answered, so a reader links the watch event that brings the
//! write back ("own write"). See the `controller` section below ([`ReconcileSpan`]).

mod controller;
mod sink;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use kinformer::{DeltaType, Deltas, TraceId, lean::LazyObject, notification::Notification};

use crate::object::InformerObject;

pub(crate) use controller::{QueueEvent, QueueLine, WorkerName, queue_tracing};
pub use controller::{
    ReconcileResult, ReconcileSpan, SpanId, WriteVerb, current_span, record_write,
};
pub use sink::{
    FLUSH_EVERY, TraceError, TraceSink, TraceSinkConfig, TraceSinkGuard, TraceStats,
    close_env_sink, init_from_env,
};

/// The `tracing` target of hop events. Enable with e.g. `RUST_LOG=kinformer::trace=trace`.
pub const TRACE_TARGET: &str = "kinformer::trace";

/// The environment variable naming the file [`init_from_env`] starts the sink on.
pub const TRACE_ENV: &str = "KINFORMER_TRACE";

/// Where in the pipeline a trace event was emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Hop {
    /// The reflector decoded a watch event or a listed object.
    Reflector,
    /// The DeltaFifo actor queued the delta.
    Fifo,
    /// The indexer applied the delta to the store.
    Indexer,
    /// A processor listener accepted the notification into its buffer.
    Listener,
    /// A handler finished processing the notification.
    Handler,
}

impl Hop {
    /// The hop's name as written in trace events.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Hop::Reflector => "reflector",
            Hop::Fifo => "fifo",
            Hop::Indexer => "indexer",
            Hop::Listener => "listener",
            Hop::Handler => "handler",
        }
    }
}

/// Allocates trace ids: unique per process, never [`TraceId::NONE`].
#[derive(Debug)]
pub(crate) struct TraceIds {
    next: AtomicU64,
}

impl TraceIds {
    /// A generator whose ids start at a process-unique base (the generator's number in the
    /// top 24 bits), so ids from several informers in one process do not collide.
    pub(crate) fn new() -> Self {
        static GENERATORS: AtomicU64 = AtomicU64::new(1);
        let base = GENERATORS.fetch_add(1, Ordering::Relaxed) << 40;
        TraceIds {
            next: AtomicU64::new(base | 1),
        }
    }

    /// The next id.
    pub(crate) fn next(&self) -> TraceId {
        TraceId(self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// Gives `trace` an id if it has none (a resync's Sync delta, a relist's tombstone, a
    /// replay): T1, every hop of every object is traced.
    #[inline]
    pub(crate) fn fill(&self, trace: &mut TraceId) {
        if trace.is_none() {
            *trace = self.next();
        }
    }
}

impl Default for TraceIds {
    fn default() -> Self {
        Self::new()
    }
}

/// True when hop records are wanted by the sink or by a `tracing` subscriber; callers skip
/// computing fields (and timing handlers) otherwise. One relaxed load, then tracing's cached
/// callsite interest (T4).
#[inline]
pub(crate) fn enabled() -> bool {
    sink::is_on() || tracing_enabled()
}

#[inline]
fn tracing_enabled() -> bool {
    tracing::enabled!(target: TRACE_TARGET, tracing::Level::TRACE)
}

/// A short lowercase name for a delta type, as written in traces.
pub(crate) fn delta_name(t: DeltaType) -> &'static str {
    match t {
        DeltaType::Added => "added",
        DeltaType::Updated => "updated",
        DeltaType::Deleted => "deleted",
        DeltaType::Replaced => "replaced",
        DeltaType::Sync => "sync",
        DeltaType::LeftShard => "left_shard",
    }
}

/// A notification's type, as written on `listener` hops.
pub(crate) fn notification_name<K>(n: &Notification<K>) -> &'static str {
    match n {
        Notification::Add { .. } => "add",
        Notification::Update { .. } => "update",
        Notification::Delete { .. } => "delete",
    }
}

/// The kind of the objects `K` caches, for traces: the type's own name (`Pod` for
/// `k8s_openapi::api::core::v1::Pod`, also inside `PartialObjectMeta<…>`), or the resource
/// plural for dynamic objects, whose kind is only known at run time.
pub(crate) fn object_kind<K>(resource: &str) -> Arc<str> {
    match openapi_path::<K>() {
        Some((_, kind)) => kind.into(),
        None => resource.into(),
    }
}

/// The informer's instance name on `reflector`, `fifo` and `indexer` hops: `v1/Pod ns=demo`,
/// `apps/v1/Deployment` (from the k8s-openapi type; the resource plural for other types), with
/// ` ns=…` for a namespaced informer and ` labels=…` / ` fields=…` for its selectors.
pub(crate) fn informer_instance<K>(
    resource: &str,
    namespace: Option<&str>,
    label_selector: Option<&str>,
    field_selector: Option<&str>,
) -> Arc<str> {
    let mut inst = match openapi_path::<K>() {
        Some((api_version, kind)) => format!("{api_version}/{kind}"),
        None => resource.to_owned(),
    };
    if let Some(ns) = namespace {
        inst.push_str(" ns=");
        inst.push_str(ns);
    }
    if let Some(l) = label_selector {
        inst.push_str(" labels=");
        inst.push_str(l);
    }
    if let Some(f) = field_selector {
        inst.push_str(" fields=");
        inst.push_str(f);
    }
    inst.into()
}

/// `(apiVersion, Kind)` of a k8s-openapi type, read from its Rust path
/// (`k8s_openapi::v1_37::api::apps::v1::deployment::Deployment` → `apps/v1`, `Deployment`;
/// the core group is `v1`); `PartialObjectMeta<T>` is looked through. `None` for other types.
/// Only a label for people: the group is the module's name (`networking`, not
/// `networking.k8s.io`).
fn openapi_path<K>() -> Option<(String, String)> {
    let mut name = std::any::type_name::<K>();
    if let Some(inner) = name
        .strip_prefix("kube_core::metadata::PartialObjectMeta<")
        .and_then(|s| s.strip_suffix('>'))
    {
        name = inner;
    }
    if !name.starts_with("k8s_openapi::") || name.contains('<') {
        return None;
    }
    let (_, rest) = name.split_once("::api::")?;
    let mut parts = rest.split("::");
    let (group, version, kind) = (parts.next()?, parts.next()?, parts.last()?);
    let api_version = match group {
        "core" => version.to_owned(),
        g => format!("{g}/{version}"),
    };
    Some((api_version, kind.to_owned()))
}

/// One actor instance's hop emitter: which hop, which instance, which kind. Cheap to clone
/// (two `Arc`s); built once per actor.
#[derive(Clone, Debug)]
pub(crate) struct Tracer {
    hop: Hop,
    inst: Arc<str>,
    kind: Arc<str>,
    /// The last depth sampled, so a sample is recorded only when the depth changed.
    last_depth: Option<usize>,
}

impl Tracer {
    /// The emitter of `hop` for the instance `inst`, caching objects of `kind`.
    pub(crate) fn new(hop: Hop, inst: Arc<str>, kind: Arc<str>) -> Self {
        Tracer {
            hop,
            inst,
            kind,
            last_depth: None,
        }
    }

    /// The same instance at another hop (a listener's handler).
    pub(crate) fn at(&self, hop: Hop) -> Self {
        Tracer::new(hop, Arc::clone(&self.inst), Arc::clone(&self.kind))
    }

    /// Records one object at this hop.
    #[inline]
    pub(crate) fn object<K: InformerObject>(
        &self,
        trace: TraceId,
        obj: &Arc<LazyObject<K>>,
        what: &'static str,
    ) {
        if enabled() {
            self.emit(trace, obj, what, None);
        }
    }

    /// Records a handler's end: how long the callback took, handled or panicked.
    #[inline]
    pub(crate) fn handled<K: InformerObject>(
        &self,
        trace: TraceId,
        obj: &Arc<LazyObject<K>>,
        dur: Duration,
        panicked: bool,
    ) {
        if enabled() {
            let what = if panicked { "panicked" } else { "handled" };
            self.emit(trace, obj, what, Some(dur));
        }
    }

    /// Records the instance's depth (pending deltas, buffered notifications) if it changed
    /// since the last sample.
    #[inline]
    pub(crate) fn depth(&mut self, depth: usize) {
        if enabled() && self.last_depth != Some(depth) {
            self.last_depth = Some(depth);
            self.emit_depth(depth);
        }
    }

    /// Records every delta of a popped batch (the indexer's hop).
    pub(crate) fn deltas<K: InformerObject>(&self, batch: &[Deltas<LazyObject<K>>]) {
        if !enabled() {
            return;
        }
        for d in batch.iter().flat_map(|ds| &ds.deltas) {
            self.emit(d.trace, d.object.object(), delta_name(d.delta_type), None);
        }
    }

    /// Records every `(object, trace id)` of a list (the FIFO's hop for a relist).
    pub(crate) fn items<K: InformerObject>(
        &self,
        items: &[(Arc<LazyObject<K>>, TraceId)],
        what: &'static str,
    ) {
        if !enabled() {
            return;
        }
        for (obj, t) in items {
            self.emit(*t, obj, what, None);
        }
    }

    #[cold]
    #[inline(never)]
    fn emit<K: InformerObject>(
        &self,
        trace: TraceId,
        obj: &Arc<LazyObject<K>>,
        what: &'static str,
        dur: Option<Duration>,
    ) {
        // The metadata only: a lean object (I7) is never decoded for a trace.
        let ns = obj.namespace().unwrap_or("");
        let name = obj.name().unwrap_or("");
        let uid = obj.uid().unwrap_or("");
        let rv = obj.resource_version().unwrap_or("");
        let dur_ns = dur.map(|d| d.as_nanos() as u64);
        if tracing_enabled() {
            tracing::event!(
                target: TRACE_TARGET,
                tracing::Level::TRACE,
                trace = %trace,
                hop = self.hop.as_str(),
                inst = &*self.inst,
                kind = &*self.kind,
                ns,
                name,
                uid,
                rv,
                what,
                dur_ns,
            );
        }
        sink::record_hop(sink::HopFields {
            trace,
            hop: self.hop,
            inst: &self.inst,
            kind: &self.kind,
            ns,
            name,
            uid,
            rv,
            what,
            dur_ns,
            obj,
        });
    }

    #[cold]
    #[inline(never)]
    fn emit_depth(&self, depth: usize) {
        if tracing_enabled() {
            tracing::event!(
                target: TRACE_TARGET,
                tracing::Level::TRACE,
                hop = self.hop.as_str(),
                inst = &*self.inst,
                depth = depth as u64,
                what = "depth",
            );
        }
        sink::record_depth(self.hop, &self.inst, depth as u64);
    }
}

/// The hop emitter, for `actors/benches/trace_hop.rs` (T4); not an API.
#[doc(hidden)]
pub struct BenchHop(Tracer);

#[doc(hidden)]
impl BenchHop {
    /// A `fifo` hop of informer `inst` over objects of `kind`.
    pub fn new(inst: &str, kind: &str) -> Self {
        BenchHop(Tracer::new(Hop::Fifo, inst.into(), kind.into()))
    }

    /// One hop for `obj`.
    #[inline]
    pub fn hop<K: InformerObject>(&self, trace: TraceId, obj: &Arc<LazyObject<K>>) {
        self.0.object(trace, obj, "queued");
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
    use kube::api::{DynamicObject, PartialObjectMeta};

    use super::*;

    #[test]
    fn t1_instance_and_kind_from_the_type() {
        assert_eq!(
            &*informer_instance::<Pod>("pods", None, None, None),
            "v1/Pod"
        );
        assert_eq!(
            &*informer_instance::<Pod>("pods", Some("demo"), None, None),
            "v1/Pod ns=demo"
        );
        assert_eq!(
            &*informer_instance::<Deployment>("deployments", None, Some("app=web"), None),
            "apps/v1/Deployment labels=app=web"
        );
        assert_eq!(&*object_kind::<PartialObjectMeta<Pod>>("pods"), "Pod");
        assert_eq!(&*object_kind::<DynamicObject>("widgets"), "widgets");
        assert_eq!(
            &*informer_instance::<DynamicObject>("widgets", None, None, Some("a=b")),
            "widgets fields=a=b"
        );
    }

    #[test]
    fn t1_fill_gives_an_id_only_to_untraced_deltas() {
        let ids = TraceIds::new();
        let mut none = TraceId::NONE;
        ids.fill(&mut none);
        assert!(!none.is_none());
        let mut some = TraceId(7);
        ids.fill(&mut some);
        assert_eq!(some, TraceId(7));
    }
}
