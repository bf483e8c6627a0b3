//! The assembly of an informer's actors (client-go's `sharedIndexInformer.Run`): the state behind
//! a [`SharedIndexInformer`](crate::SharedIndexInformer) handle, and how its Reflector (with its
//! Supervisor), DeltaFifo, Indexer and ProcessorListener actors are started, wired through
//! `Recipient`s, and stopped.
//!
//! Threads: the reflector (and its supervisor) runs on one arbiter, so JSON decoding never
//! competes with applying deltas; the FIFO, the indexer and the listener actors share a second
//! arbiter (none of them blocks); every closure/trait handler has a thread of its own.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, atomic::AtomicU64},
    time::Duration,
};

use actix::prelude::*;
use futures::future::join_all;
use kinformer::{
    KeyFunc,
    fifo::{DeltaFifo as CoreFifo, DeltaFifoOptions},
    key::{lazy_key_func, lazy_key_func_of},
    known::KnownObjects,
    lean::LazyObject,
    processor::Processor,
    reflector::ReflectorMachine,
    store::Lister,
};
use kube::api::TypeMeta;

use crate::{
    config::{InformerConfig, ListenerConfig},
    error::InformerError,
    listwatch::lister_watcher::{ItemCodec, ListerWatcher},
    listwatch::server_health::ServerHealthHandle,
    object::InformerObject,
    pipeline::destination::HandlerKind,
    pipeline::fifo::DeltaFifo,
    pipeline::indexer::Indexer,
    pipeline::listener::{ProcessorListener, listener_name},
    pipeline::messages::{AttachFifo, FifoRecipients, ListenerRecipients, Stop},
    pipeline::reflector::{Transform, Validate, WatchErrorHandler},
    pipeline::reflector_io::{CachedObjects, ReflectorContext},
    pipeline::supervisor::Supervisor,
    runtime,
    telemetry::health::ReflectorStatus,
    telemetry::stats::{FifoStatus, IndexerStatus, ListenerStats},
    telemetry::trace::{self, Hop, TraceIds, Tracer},
};

/// What [`SharedIndexInformer::shutdown`](crate::SharedIndexInformer::shutdown) did to the handlers running at that moment (P9).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Handlers (by listener name) still inside a callback when the shutdown timeout ran
    /// out; their threads finish that callback alone and run nothing more.
    pub unfinished: Vec<String>,
    /// Notifications accepted by the handlers' listeners but never delivered (their backlog).
    pub dropped: u64,
}

/// The inputs of a started listener, as the indexer holds them.
pub(crate) fn listener_recipients<K: InformerObject>(
    addr: &Addr<ProcessorListener<K>>,
) -> ListenerRecipients<K> {
    ListenerRecipients {
        notifications: addr.clone().recipient(),
        stop: addr.clone().recipient(),
    }
}

pub(crate) struct PendingHandler<K: InformerObject> {
    pub(crate) id: u64,
    pub(crate) handler: HandlerKind<K>,
    pub(crate) config: ListenerConfig,
    pub(crate) stats: Arc<ListenerStats>,
}

pub(crate) struct Idle<K: InformerObject> {
    /// The processor machine (it owns the store); moves into the Indexer actor at start.
    pub(crate) processor: Processor<K>,
    /// A custom key function (None: `namespace/name`, read from the metadata).
    pub(crate) key_func: Option<KeyFunc<K>>,
    pub(crate) handlers: Vec<PendingHandler<K>>,
    pub(crate) transform: Option<Transform<K>>,
    pub(crate) validate: Option<Validate<K>>,
    pub(crate) on_error: Option<WatchErrorHandler>,
    /// The informer's own `apiVersion`/`kind`, when its type says (R5 in the lean mode).
    pub(crate) expected_type: Option<TypeMeta>,
    /// The API server's shared health (R11), when the informer shares one.
    pub(crate) server_health: Option<ServerHealthHandle>,
}

pub(crate) struct Running<K: InformerObject> {
    pub(crate) pipeline: Arbiter,
    pub(crate) reflector_arbiter: Arbiter,
    pub(crate) supervisor: Addr<Supervisor<K>>,
    pub(crate) fifo: Addr<DeltaFifo<K>>,
    pub(crate) indexer: Addr<Indexer<K>>,
    /// Every running listener, by registration id.
    pub(crate) listeners: BTreeMap<u64, ListenerHandle>,
}

pub(crate) enum State<K: InformerObject> {
    Idle(Box<Idle<K>>),
    Running(Box<Running<K>>),
    Stopped,
}

pub(crate) struct Inner<K: InformerObject> {
    pub(crate) kind: Arc<str>,
    pub(crate) lw: Arc<dyn ListerWatcher<K>>,
    pub(crate) config: InformerConfig,
    pub(crate) lister: Lister<K>,
    pub(crate) reflector: Arc<ReflectorStatus>,
    pub(crate) fifo: Arc<FifoStatus>,
    pub(crate) indexer: Arc<IndexerStatus>,
    pub(crate) state: Mutex<State<K>>,
    pub(crate) next_id: AtomicU64,
    /// The shard the informer wants (K2): `set_shard` writes it, the running reflector follows.
    pub(crate) shard: tokio::sync::watch::Sender<Option<kinformer::shard::ShardSelector>>,
    /// The kube-rs interop's hub (`interop/kube_runtime.rs`): one per informer, made on first
    /// use. Type-erased because kube's `Store<K>` asks more of `K::DynamicType` than
    /// `InformerObject` does.
    #[cfg(feature = "kube-runtime")]
    pub(crate) kube_hub: tokio::sync::OnceCell<Arc<dyn std::any::Any + Send + Sync>>,
}

/// What the assembly keeps of a running listener: its name, its `Stop` input (shutdown and
/// removal reach it directly, never behind the indexer's batches) and its counters.
pub(crate) struct ListenerHandle {
    pub(crate) name: Arc<str>,
    pub(crate) stop: Recipient<Stop>,
    pub(crate) stats: Arc<ListenerStats>,
}

/// Starts a listener on the pipeline's arbiter; returns its inputs, as the indexer holds them,
/// and its handle. On failure the handler is handed back.
pub(crate) fn start_listener<K: InformerObject>(
    pipeline: &Arbiter,
    handler: HandlerKind<K>,
    config: ListenerConfig,
    stats: Arc<ListenerStats>,
    kind: Arc<str>,
    id: u64,
) -> Result<(ListenerRecipients<K>, ListenerHandle), (std::io::Error, HandlerKind<K>)> {
    let name = listener_name(&config, &kind, id);
    let listener = ProcessorListener::new(handler, config, Arc::clone(&stats), kind, id)?;
    Ok(run_listener(pipeline, listener, name, stats))
}

fn run_listener<K: InformerObject>(
    pipeline: &Arbiter,
    listener: ProcessorListener<K>,
    name: Arc<str>,
    stats: Arc<ListenerStats>,
) -> (ListenerRecipients<K>, ListenerHandle) {
    let addr = ProcessorListener::start_in_arbiter(&pipeline.handle(), move |_| listener);
    let handle = ListenerHandle {
        name,
        stop: addr.clone().recipient(),
        stats,
    };
    (listener_recipients(&addr), handle)
}

#[cfg(test)]
thread_local! {
    /// Test seam: the next `start` on this thread fails as if its arbiters could not spawn.
    pub(crate) static FAIL_NEXT_START: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Two fresh arbiters, or the error (test seam: [`FAIL_NEXT_START`]).
fn arbiters(kind: &str) -> Result<(Arbiter, Arbiter), InformerError> {
    #[cfg(test)]
    if FAIL_NEXT_START.with(|f| f.replace(false)) {
        return Err(InformerError::Spawn(std::io::Error::other(
            "injected arbiter failure",
        )));
    }
    runtime::new_arbiters(kind)
}

/// Starts the actors of an idle informer: its listeners, the Indexer (which takes the
/// processor and its store), the DeltaFifo feeding it, and the Supervisor, which starts the
/// Reflector feeding the FIFO. Nothing is consumed unless it succeeds (X3): on failure (a
/// handler thread or an arbiter that cannot spawn) the idle state comes back whole, every
/// handler registered before included, so `start` can be retried.
pub(crate) fn start<K: InformerObject>(
    inner: &Inner<K>,
    mut idle: Box<Idle<K>>,
) -> Result<Running<K>, (InformerError, Box<Idle<K>>)> {
    // T2: `KINFORMER_TRACE=path` turns the trace sink on without code (read once).
    if let Err(e) = trace::init_from_env() {
        tracing::warn!(error = %e, "KINFORMER_TRACE is set but the trace sink did not start");
    }
    // Phase 1: every handler's thread is spawned (the handlers stay here until the listeners
    // run), then the arbiters. Any failure hands everything back.
    let mut built = Vec::with_capacity(idle.handlers.len());
    let mut failure = None;
    let mut rest = std::mem::take(&mut idle.handlers).into_iter();
    for h in rest.by_ref() {
        let kind = Arc::clone(&inner.kind);
        let name = listener_name(&h.config, &kind, h.id);
        match ProcessorListener::new(
            h.handler,
            h.config.clone(),
            Arc::clone(&h.stats),
            kind,
            h.id,
        ) {
            Ok(l) => built.push((h.id, name, h.stats, l)),
            Err((e, handler)) => {
                failure = Some((
                    InformerError::Spawn(e),
                    PendingHandler {
                        id: h.id,
                        handler,
                        config: h.config,
                        stats: h.stats,
                    },
                ));
                break;
            }
        }
    }
    let arbiters = match failure {
        Some((e, h)) => Err((e, Some(h))),
        None => arbiters(&inner.kind).map_err(|e| (e, None)),
    };
    let (pipeline, reflector_arbiter) = match arbiters {
        Ok(a) => a,
        Err((e, failed)) => {
            let mut handlers = Vec::new();
            for (id, _, stats, l) in built {
                if let Some((handler, config)) = l.into_handler() {
                    handlers.push(PendingHandler {
                        id,
                        handler,
                        config,
                        stats,
                    });
                }
            }
            handlers.extend(failed);
            handlers.extend(rest);
            idle.handlers = handlers;
            tracing::error!(kind = %inner.kind, error = %e, "informer start failed; nothing consumed, start may be retried");
            return Err((e, idle));
        }
    };
    let Idle {
        processor,
        key_func,
        handlers: _,
        transform,
        validate,
        on_error,
        expected_type,
        server_health,
    } = *idle;
    // I7: the lean mode's state, shared by the store and the decode pool that encodes for it.
    let codec = match processor.store().lean_state() {
        Some(state) => ItemCodec::Lean(Arc::clone(state)),
        None => ItemCodec::Typed,
    };

    // Phase 2: the listeners registered before start (the processor already knows their
    // periods) run, and their handlers reach their threads.
    let mut listeners = BTreeMap::new();
    let mut handles = BTreeMap::new();
    for (id, name, stats, l) in built {
        let (recipients, handle) = run_listener(&pipeline, l, name, stats);
        listeners.insert(id, recipients);
        handles.insert(id, handle);
    }
    // T1: the informer's instance and its objects' kind, built once for its three hops.
    let trace_kind = trace::object_kind::<K>(&inner.kind);
    let trace_inst = trace::informer_instance::<K>(
        &inner.kind,
        inner.reflector.namespace(),
        inner.config.reflector.label_selector.as_deref(),
        inner.config.reflector.field_selector.as_deref(),
    );
    let tracer = |hop| Tracer::new(hop, Arc::clone(&trace_inst), Arc::clone(&trace_kind));
    let (status, kind, mailbox, indexer_tracer) = (
        Arc::clone(&inner.indexer),
        Arc::clone(&inner.kind),
        inner.config.indexer_mailbox,
        tracer(Hop::Indexer),
    );
    let indexer = Indexer::start_in_arbiter(&pipeline.handle(), move |_| {
        Indexer::new(processor, listeners, status, kind, mailbox, indexer_tracer)
    });

    let known: Arc<dyn KnownObjects<LazyObject<K>>> = Arc::new(inner.lister.lazy());
    // The default key reads the metadata: a lean object is not decoded to be queued.
    let key_func = match key_func {
        None => lazy_key_func::<K>(),
        Some(f) => lazy_key_func_of(f),
    };
    // F9: the FIFO's mode, atomic relist and Replaced-vs-Sync choice come from the config.
    let core = CoreFifo::new(inner.config.fifo.fifo_options(
        DeltaFifoOptions::new(key_func.clone()).with_known_objects(Arc::clone(&known)),
    ));
    let (recipient, cfg, status, kind, fifo_tracer) = (
        indexer.clone().recipient(),
        inner.config.fifo.clone(),
        Arc::clone(&inner.fifo),
        Arc::clone(&inner.kind),
        tracer(Hop::Fifo),
    );
    let fifo = DeltaFifo::start_in_arbiter(&pipeline.handle(), move |_| {
        DeltaFifo::new(core, recipient, cfg, status, kind, fifo_tracer)
    });
    indexer.do_send(AttachFifo(fifo.clone().recipient()));

    let cx = Arc::new(ReflectorContext {
        resource: inner.lw.resource_name(),
        lw: Arc::clone(&inner.lw),
        fifo: FifoRecipients {
            replace: fifo.clone().recipient(),
            events: fifo.clone().recipient(),
            bookmark: fifo.clone().recipient(),
            shard_shrunk: fifo.clone().recipient(),
        },
        status: Arc::clone(&inner.reflector),
        trace_ids: TraceIds::new(),
        tracer: tracer(Hop::Reflector),
        transform,
        validate,
        on_error,
        codec,
        expected_type,
        shard: inner.shard.subscribe(),
        cached: Some(CachedObjects { key_func, known }),
        server: server_health.as_ref().map(ServerHealthHandle::register),
    });
    let (reflector_config, backoff) =
        (inner.config.reflector.clone(), inner.config.backoff.clone());
    // The supervisor owns the machine across restarts; `fresh` builds one (seeded from the
    // OS) at start, and again only if a reflector panicked and lost its own.
    let fresh_backoff = backoff.clone();
    let fresh = Box::new(move || {
        ReflectorMachine::new(
            reflector_config.clone(),
            fresh_backoff.clone(),
            rand::random(),
        )
    });
    let supervisor = Supervisor::start_in_arbiter(&reflector_arbiter.handle(), move |_| {
        Supervisor::new(cx, fresh, backoff)
    });
    Ok(Running {
        pipeline,
        reflector_arbiter,
        supervisor,
        fifo,
        indexer,
        listeners: handles,
    })
}

impl<K: InformerObject> Running<K> {
    /// Stops every actor and joins the arbiters' threads (P9). The listeners are stopped first
    /// and directly (not through the indexer, whose mailbox may hold a batch waiting for a
    /// `Block` listener): each drops its backlog (counted in [`ListenerStats::dropped`]) and
    /// waits only for its handler's current notification, at most `timeout`; handlers still
    /// busy then are named in the report and left to finish that callback alone.
    pub(crate) async fn shutdown(self, kind: &str, timeout: Duration) -> ShutdownReport {
        let Running {
            pipeline,
            reflector_arbiter,
            supervisor,
            fifo,
            indexer,
            listeners,
        } = self;
        let _ = supervisor.send(Stop).await;
        let stops = listeners.values().map(|l| {
            let stopped = l.stop.send(Stop);
            async move { crate::runtime::timeout(timeout, stopped).await.is_some() }
        });
        let finished = join_all(stops).await;
        let mut report = ShutdownReport::default();
        for (l, finished) in listeners.values().zip(finished) {
            if !finished {
                l.stats.mark_timed_out();
                tracing::warn!(kind = %kind, handler = %l.name, ?timeout,
                    "handler did not finish its current notification in time; left to finish alone (P9)");
                report.unfinished.push(l.name.to_string());
            }
            report.dropped += l.stats.dropped();
        }
        let _ = fifo.send(Stop).await;
        let _ = indexer.send(Stop).await;
        pipeline.stop();
        reflector_arbiter.stop();
        runtime::join_arbiters(vec![pipeline, reflector_arbiter]).await;
        report
    }
}
