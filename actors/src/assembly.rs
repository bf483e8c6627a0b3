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
};

use actix::prelude::*;
use kinformer::{
    KeyFunc,
    fifo::{DeltaFifo as CoreFifo, DeltaFifoOptions},
    known::KnownObjects,
    processor::Processor,
    reflector::ReflectorMachine,
    store::Lister,
};

use crate::{
    config::{InformerConfig, ListenerConfig},
    error::InformerError,
    fifo::DeltaFifo,
    health::ReflectorStatus,
    indexer::Indexer,
    listener::ProcessorListener,
    lister_watcher::ListerWatcher,
    messages::{AttachFifo, FifoRecipients, ListenerRecipients, Stop},
    object::InformerObject,
    reflector::{Transform, Validate, WatchErrorHandler},
    reflector_io::ReflectorContext,
    runtime,
    sink::HandlerKind,
    stats::{FifoStatus, IndexerStatus, ListenerStats},
    supervisor::Supervisor,
    trace::TraceIds,
};

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
    pub(crate) key_func: KeyFunc<K>,
    pub(crate) handlers: Vec<PendingHandler<K>>,
    pub(crate) transform: Option<Transform<K>>,
    pub(crate) validate: Option<Validate<K>>,
    pub(crate) on_error: Option<WatchErrorHandler>,
}

pub(crate) struct Running<K: InformerObject> {
    pub(crate) pipeline: Arbiter,
    pub(crate) reflector_arbiter: Arbiter,
    pub(crate) supervisor: Addr<Supervisor<K>>,
    pub(crate) fifo: Addr<DeltaFifo<K>>,
    pub(crate) indexer: Addr<Indexer<K>>,
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
}

/// Starts a listener on the pipeline's arbiter; returns its inputs, as the indexer holds them.
pub(crate) fn start_listener<K: InformerObject>(
    pipeline: &Arbiter,
    handler: HandlerKind<K>,
    config: ListenerConfig,
    stats: Arc<ListenerStats>,
    kind: Arc<str>,
    id: u64,
) -> std::io::Result<ListenerRecipients<K>> {
    let listener = ProcessorListener::new(handler, config, stats, kind, id)?;
    let addr = ProcessorListener::start_in_arbiter(&pipeline.handle(), move |_| listener);
    Ok(listener_recipients(&addr))
}

/// Starts the actors of an idle informer: its listeners, the Indexer (which takes the
/// processor and its store), the DeltaFifo feeding it, and the Supervisor, which starts the
/// Reflector feeding the FIFO.
pub(crate) fn start<K: InformerObject>(
    inner: &Inner<K>,
    idle: Idle<K>,
) -> Result<Running<K>, InformerError> {
    let Idle {
        mut processor,
        key_func,
        handlers,
        transform,
        validate,
        on_error,
    } = idle;
    let (pipeline, reflector_arbiter) = runtime::new_arbiters(&inner.kind)?;

    // The listeners registered before start (the processor already knows their periods).
    let mut listeners = BTreeMap::new();
    for h in handlers {
        let kind = Arc::clone(&inner.kind);
        match start_listener(&pipeline, h.handler, h.config, h.stats, kind, h.id) {
            Ok(listener) => {
                listeners.insert(h.id, listener);
            }
            Err(e) => {
                processor.remove_listener(h.id);
                tracing::error!(kind = %inner.kind, error = %e, "cannot start handler thread; handler not registered")
            }
        }
    }
    let (status, kind, mailbox) = (
        Arc::clone(&inner.indexer),
        Arc::clone(&inner.kind),
        inner.config.indexer_mailbox,
    );
    let indexer = Indexer::start_in_arbiter(&pipeline.handle(), move |_| {
        Indexer::new(processor, listeners, status, kind, mailbox)
    });

    let known: Arc<dyn KnownObjects<K>> = Arc::new(inner.lister.clone());
    // F9: the FIFO's mode, atomic relist and Replaced-vs-Sync choice come from the config.
    let core = CoreFifo::new(
        inner
            .config
            .fifo
            .fifo_options(DeltaFifoOptions::new(key_func).with_known_objects(known)),
    );
    let (recipient, cfg, status, kind) = (
        indexer.clone().recipient(),
        inner.config.fifo.clone(),
        Arc::clone(&inner.fifo),
        Arc::clone(&inner.kind),
    );
    let fifo = DeltaFifo::start_in_arbiter(&pipeline.handle(), move |_| {
        DeltaFifo::new(core, recipient, cfg, status, kind)
    });
    indexer.do_send(AttachFifo(fifo.clone().recipient()));

    let cx = Arc::new(ReflectorContext {
        resource: inner.lw.resource_name(),
        kind: Arc::clone(&inner.kind),
        lw: Arc::clone(&inner.lw),
        fifo: FifoRecipients {
            replace: fifo.clone().recipient(),
            events: fifo.clone().recipient(),
            bookmark: fifo.clone().recipient(),
        },
        status: Arc::clone(&inner.reflector),
        trace_ids: TraceIds::new(),
        transform,
        validate,
        on_error,
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
    })
}

impl<K: InformerObject> Running<K> {
    /// Stops every actor, lets each handler finish its current notification, and joins the
    /// arbiters' threads (P9).
    pub(crate) async fn shutdown(self) {
        let Running {
            pipeline,
            reflector_arbiter,
            supervisor,
            fifo,
            indexer,
        } = self;
        let _ = supervisor.send(Stop).await;
        let _ = fifo.send(Stop).await;
        let _ = indexer.send(Stop).await;
        pipeline.stop();
        reflector_arbiter.stop();
        runtime::join_arbiters(vec![pipeline, reflector_arbiter]).await;
    }
}
