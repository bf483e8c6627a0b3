//! Message traces (docs/semantics.md T1, T3, T4).
//!
//! Every watch event gets a [`TraceId`] in the reflector; the id travels inside every message
//! (`Replace`, `Events`, `ProcessDeltas`, `Notifications`) so each hop can emit one structured
//! `tracing` event on the target [`TRACE_TARGET`]. A sink subscribed to that target (at TRACE
//! level) sees an object's whole path: `reflector → fifo → indexer → listener → handler`.
//!
//! Only identity travels: kind, namespace/name key, uid, resourceVersion, delta type and hop.
//! Object bodies never enter a trace (T3: Secrets). When the target is disabled, the cost of a
//! hop is one relaxed load of tracing's cached callsite interest (T4).

use std::sync::atomic::{AtomicU64, Ordering};

use kinformer::{DeltaType, Deltas, ObjectKey, TraceId};
use kube::Resource;

/// The `tracing` target of hop events. Enable with e.g. `RUST_LOG=kinformer::trace=trace`.
pub const TRACE_TARGET: &str = "kinformer::trace";

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
    pub fn as_str(self) -> &'static str {
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
    /// A generator whose ids start at a process-unique base, so ids from several informers in
    /// one process do not collide.
    pub fn new() -> Self {
        static INFORMERS: AtomicU64 = AtomicU64::new(1);
        let base = INFORMERS.fetch_add(1, Ordering::Relaxed) << 40;
        TraceIds {
            next: AtomicU64::new(base | 1),
        }
    }

    /// The next id.
    pub fn next(&self) -> TraceId {
        TraceId(self.next.fetch_add(1, Ordering::Relaxed))
    }
}

impl Default for TraceIds {
    fn default() -> Self {
        Self::new()
    }
}

/// True when hop events would be recorded; lets callers skip computing fields.
#[inline]
pub(crate) fn enabled() -> bool {
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
    }
}

/// Emits one hop event for an object: identity only, never the body (T3).
/// `key` is computed from the object's metadata when not given.
#[inline]
pub(crate) fn hop<K: Resource>(
    hop: Hop,
    trace: TraceId,
    kind: &str,
    key: Option<&ObjectKey>,
    obj: &K,
    what: &'static str,
) {
    if !enabled() {
        return;
    }
    let meta = obj.meta();
    let computed;
    let key = match key {
        Some(k) => k.as_str(),
        None => {
            computed = ObjectKey::new(
                meta.namespace.as_deref(),
                meta.name.as_deref().unwrap_or(""),
            );
            computed.as_str()
        }
    };
    tracing::event!(
        target: TRACE_TARGET,
        tracing::Level::TRACE,
        trace_id = trace.0,
        hop = hop.as_str(),
        kind,
        key,
        uid = meta.uid.as_deref().unwrap_or(""),
        rv = meta.resource_version.as_deref().unwrap_or(""),
        what,
    );
}

/// Emits a hop event that carries a mailbox depth (for "mailbox depth over time").
#[inline]
pub(crate) fn depth(hop: Hop, kind: &str, depth: usize) {
    if !enabled() {
        return;
    }
    tracing::event!(
        target: TRACE_TARGET,
        tracing::Level::TRACE,
        hop = hop.as_str(),
        kind,
        depth = depth as u64,
        what = "depth",
    );
}

/// Emits a hop event for every delta of a popped batch (the indexer's hop).
pub(crate) fn deltas<K: Resource>(hop_: Hop, kind: &str, batch: &[Deltas<K>]) {
    if !enabled() {
        return;
    }
    for deltas in batch {
        for d in &deltas.deltas {
            let what = delta_name(d.delta_type);
            hop(
                hop_,
                d.trace,
                kind,
                Some(&deltas.key),
                &**d.object.object(),
                what,
            );
        }
    }
}

/// Emits a hop event for every `(object, trace id)` of a list (the FIFO's hop for a relist).
pub(crate) fn items<K: Resource>(
    hop_: Hop,
    kind: &str,
    items: &[(std::sync::Arc<K>, TraceId)],
    what: &'static str,
) {
    if !enabled() {
        return;
    }
    for (obj, t) in items {
        hop(hop_, *t, kind, None, &**obj, what);
    }
}
