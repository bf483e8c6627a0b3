//! The Indexer actor: client-go's `sharedIndexInformer.HandleDeltas` plus its `sharedProcessor`,
//! as a thin driver of the core's [`Processor`] machine (P1–P6 in `docs/semantics.md`).
//!
//! The machine owns the [`Store`](kinformer::store::Store) (its single writer) and the listener
//! registry; the actor owns what the machine cannot: the listeners' and the FIFO's inputs
//! (`Recipient`s) and the resync timer, armed at [`Processor::poll_timeout`] (re-armed after every
//! check and registration change, so the schedule never drifts; R6, F7). Each popped batch is one
//! store publish and one message per listener. Batches are atomic with respect to the actor's
//! other messages (client-go's `blockDeltas`): a late listener's replay has no gap and no
//! duplicate (P4).

use std::{
    collections::BTreeMap,
    sync::{Arc, atomic::Ordering},
    time::Instant,
};

use actix::prelude::*;
use futures::future::join_all;
use kinformer::{processor::Processor, store::StoreError};

use crate::{
    object::InformerObject,
    pipeline::messages::{
        AddIndexers, AddListener, AttachFifo, ListenerRecipients, Notifications, ProcessDeltas,
        ProcessReport, RemoveListener, Resync, Stop,
    },
    pipeline::waiters::Deadline,
    telemetry::stats::IndexerStatus,
    telemetry::trace::{TraceIds, Tracer},
};

/// The Indexer actor.
pub(crate) struct Indexer<K: InformerObject> {
    processor: Processor<K>,
    /// The inputs of every listener the processor knows, by registration id.
    listeners: BTreeMap<u64, ListenerRecipients<K>>,
    /// Where resyncs are asked for (the DeltaFifo).
    fifo: Option<Recipient<Resync>>,
    /// The armed resync check.
    timer: Deadline,
    status: Arc<IndexerStatus>,
    kind: Arc<str>,
    mailbox: usize,
    /// The `indexer` hop of this informer (T1).
    tracer: Tracer,
    /// Trace ids for what has none when it reaches the store: a resync's Sync deltas, a
    /// relist's tombstones, a late listener's replay (T1).
    trace_ids: TraceIds,
}

impl<K: InformerObject> Indexer<K> {
    /// An indexer driving `processor`, with the listeners registered with it before start
    /// (their inputs). The processor's resync schedule starts when the actor starts.
    pub(crate) fn new(
        processor: Processor<K>,
        listeners: BTreeMap<u64, ListenerRecipients<K>>,
        status: Arc<IndexerStatus>,
        kind: Arc<str>,
        mailbox: usize,
        tracer: Tracer,
    ) -> Self {
        Indexer {
            processor,
            listeners,
            fifo: None,
            timer: Deadline::default(),
            status,
            kind,
            mailbox,
            tracer,
            trace_ids: TraceIds::new(),
        }
    }

    /// Arms the timer at the processor's next check time, if it changed.
    fn rearm(&mut self, ctx: &mut Context<Self>) {
        let next = self.processor.poll_timeout();
        self.timer.arm(next, ctx, |act: &mut Self, ctx| {
            act.timer.fired();
            act.resync_check(ctx);
        });
    }

    /// P3/P6: client-go's `shouldResync`; asks the FIFO for Sync deltas if a listener is due.
    fn resync_check(&mut self, ctx: &mut Context<Self>) {
        if self.processor.handle_resync_check(Instant::now())
            && let Some(fifo) = self.fifo.clone()
        {
            self.status.resyncs.fetch_add(1, Ordering::Relaxed);
            ctx.spawn(
                async move {
                    let _ = fifo.send(Resync).await;
                }
                .into_actor(self),
            );
        }
        self.rearm(ctx);
    }
}

impl<K: InformerObject> Actor for Indexer<K> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(self.mailbox.max(1));
        self.processor.start(Instant::now());
        self.rearm(ctx);
    }
}

impl<K: InformerObject> Handler<ProcessDeltas<K>> for Indexer<K> {
    type Result = AtomicResponse<Self, ProcessReport>;

    fn handle(&mut self, mut msg: ProcessDeltas<K>, _: &mut Context<Self>) -> Self::Result {
        // T1: a resync's Sync deltas and a relist's tombstones are born here.
        for d in msg.batch.iter_mut().flat_map(|ds| ds.deltas.iter_mut()) {
            self.trace_ids.fill(&mut d.trace);
        }
        self.tracer.deltas(&msg.batch);
        let dispatch = self
            .processor
            .handle_deltas(msg.batch, msg.is_in_initial_list);
        self.status.record_batch(dispatch.applied);
        let failed = dispatch.failed;
        let sends: Vec<_> = dispatch
            .per_listener
            .into_iter()
            .filter_map(|(id, items)| {
                let listener = self.listeners.get(&id)?;
                Some(listener.notifications.send(Notifications { items }))
            })
            .collect();
        AtomicResponse::new(Box::pin(
            async move {
                // A listener that stopped (removed) simply no longer receives.
                join_all(sends).await;
                // A keyed delta fails only when its object cannot be stored (a typed store
                // given a lean object that does not decode: never in an informer); a batch
                // fails whole only if this actor stops first (the FIFO then counts it, F6).
                ProcessReport { failed }
            }
            .into_actor(self),
        ))
    }
}

impl<K: InformerObject> Handler<AddListener<K>> for Indexer<K> {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: AddListener<K>, ctx: &mut Context<Self>) -> Self::Result {
        let registered = self
            .processor
            .add_listener(msg.id, msg.resync, Instant::now());
        if registered.resync != registered.requested {
            tracing::warn!(kind = %self.kind, requested = ?registered.requested,
                used = ?registered.resync, check = ?self.processor.check_period(),
                "handler resync period adjusted to the informer's resync check period (P6)");
        }
        let addr = msg.listener.notifications.clone();
        self.listeners.insert(msg.id, msg.listener);
        self.rearm(ctx);
        // P4: the replay goes out before any later batch reaches this listener. T1: each
        // replayed object gets a trace id of its own, first seen at the listener.
        let mut items = registered.replay;
        for d in &mut items {
            self.trace_ids.fill(&mut d.trace);
        }
        AtomicResponse::new(Box::pin(
            async move {
                if !items.is_empty() {
                    let _ = addr.send(Notifications { items }).await;
                }
            }
            .into_actor(self),
        ))
    }
}

impl<K: InformerObject> Handler<RemoveListener> for Indexer<K> {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, msg: RemoveListener, ctx: &mut Context<Self>) -> Self::Result {
        self.processor.remove_listener(msg.id);
        self.rearm(ctx);
        let Some(listener) = self.listeners.remove(&msg.id) else {
            return Box::pin(async { false });
        };
        // Not atomic: waiting for one handler's current callback never holds up the others.
        let stopped = listener.stop.send(Stop);
        Box::pin(async move {
            if msg.wait {
                let _ = stopped.await;
            } else {
                actix::spawn(async move {
                    let _ = stopped.await;
                });
            }
            true
        })
    }
}

impl<K: InformerObject> Handler<AttachFifo> for Indexer<K> {
    type Result = ();

    fn handle(&mut self, msg: AttachFifo, _: &mut Context<Self>) {
        self.fifo = Some(msg.0);
    }
}

impl<K: InformerObject> Handler<AddIndexers<K>> for Indexer<K> {
    type Result = Result<(), StoreError>;

    fn handle(&mut self, msg: AddIndexers<K>, _: &mut Context<Self>) -> Self::Result {
        self.processor.store_mut().add_indexers(msg.0)
    }
}

impl<K: InformerObject> Handler<Stop> for Indexer<K> {
    type Result = ();

    /// Shutdown (P9): the assembly has already stopped the listeners directly (a `Block`
    /// listener waiting on its handler would otherwise hold this message behind a batch); any
    /// listener still running is told to stop, without waiting for it.
    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        self.timer.cancel(ctx);
        for (id, listener) in std::mem::take(&mut self.listeners) {
            self.processor.remove_listener(id);
            let _ = listener.stop.try_send(Stop);
        }
        ctx.stop();
    }
}
