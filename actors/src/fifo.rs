//! The DeltaFifo actor (DESIGN.md F1–F8, B1, B2, B4): owns the core
//! [`kinformer::fifo::DeltaFifo`] and pushes popped batches to the indexer, one or two at a time.
//!
//! Flow control runs both ways:
//! - downstream, at most `max_in_flight` batches are outstanding at the indexer; the indexer's
//!   answer is the acknowledgement (`done`) that `HasSynced` counts (F5);
//! - upstream, once more than `capacity` deltas are pending, the answer to the reflector's
//!   `Replace`/`Events` is held back until the indexer drained below it. The reflector awaits
//!   that answer before reading the watch again, so the socket pushes back (B4) and the FIFO's
//!   memory stays bounded by the number of objects plus `capacity` (B2).

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicU64, Ordering},
};

use actix::prelude::*;
use kinformer::{
    fifo::{DeltaFifo as CoreFifo, FifoError},
    trace::TraceId,
};
use tokio::sync::oneshot;

use crate::{
    InformerObject,
    messages::{Bookmark, EventKind, Events, ProcessDeltas, Replace, Resync, Stop},
    trace::{self, Hop},
};

/// DeltaFifo actor options.
#[derive(Clone, Debug)]
pub struct FifoConfig {
    /// Most keys handed to the indexer in one `ProcessDeltas` message (F6). Default 256.
    pub batch_size: usize,
    /// Batches outstanding at the indexer at once (pipelining). Default 2.
    pub max_in_flight: usize,
    /// Pending deltas above which writers wait (B4). Default 10,000.
    pub capacity: usize,
    /// Mailbox capacity (B1). Default 64.
    pub mailbox: usize,
}

impl Default for FifoConfig {
    fn default() -> Self {
        FifoConfig {
            batch_size: 256,
            max_in_flight: 2,
            capacity: 10_000,
            mailbox: 64,
        }
    }
}

/// Live counters of a DeltaFifo actor, shared with the informer handle.
#[derive(Debug, Default)]
pub struct FifoStatus {
    pub(crate) has_synced: AtomicBool,
    pub(crate) synced_notify: tokio::sync::Notify,
    pub(crate) queued_keys: AtomicU64,
    pub(crate) pending_deltas: AtomicU64,
    pub(crate) peak_pending_deltas: AtomicU64,
    pub(crate) popped: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) writer_waits: AtomicU64,
}

impl FifoStatus {
    /// F5: the first list was popped and processed.
    pub fn has_synced(&self) -> bool {
        self.has_synced.load(Ordering::Acquire)
    }
    /// Resolves once [`has_synced`](Self::has_synced) is true.
    pub async fn synced(&self) {
        loop {
            let notified = self.synced_notify.notified();
            if self.has_synced() {
                return;
            }
            notified.await;
        }
    }
    /// Keys queued now.
    pub fn queued_keys(&self) -> u64 {
        self.queued_keys.load(Ordering::Relaxed)
    }
    /// Deltas queued now.
    pub fn pending_deltas(&self) -> u64 {
        self.pending_deltas.load(Ordering::Relaxed)
    }
    /// The most deltas ever queued at once (B2: bounded by objects + capacity).
    pub fn peak_pending_deltas(&self) -> u64 {
        self.peak_pending_deltas.load(Ordering::Relaxed)
    }
    /// Keys handed to the indexer so far.
    pub fn popped(&self) -> u64 {
        self.popped.load(Ordering::Relaxed)
    }
    /// Deltas the indexer reported as failed (F6).
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
    /// Objects rejected because they could not be keyed.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }
    /// Times a writer (the reflector) had to wait for room (B4).
    pub fn writer_waits(&self) -> u64 {
        self.writer_waits.load(Ordering::Relaxed)
    }
}

/// The DeltaFifo actor.
pub struct DeltaFifo<K: InformerObject> {
    fifo: CoreFifo<K>,
    indexer: Recipient<ProcessDeltas<K>>,
    config: FifoConfig,
    in_flight: usize,
    waiting_writers: Vec<oneshot::Sender<()>>,
    status: Arc<FifoStatus>,
    kind: Arc<str>,
}

impl<K: InformerObject> DeltaFifo<K> {
    /// An actor around `fifo` that feeds `indexer`.
    pub fn new(
        fifo: CoreFifo<K>,
        indexer: Recipient<ProcessDeltas<K>>,
        config: FifoConfig,
        status: Arc<FifoStatus>,
        kind: Arc<str>,
    ) -> Self {
        DeltaFifo {
            fifo,
            indexer,
            config,
            in_flight: 0,
            waiting_writers: Vec::new(),
            status,
            kind,
        }
    }

    fn publish(&self) {
        let s = &self.status;
        let pending = self.fifo.pending_deltas() as u64;
        s.queued_keys
            .store(self.fifo.len() as u64, Ordering::Relaxed);
        s.pending_deltas.store(pending, Ordering::Relaxed);
        s.peak_pending_deltas.fetch_max(pending, Ordering::Relaxed);
        let synced = self.fifo.has_synced();
        if synced && !s.has_synced.swap(true, Ordering::AcqRel) {
            s.synced_notify.notify_waiters();
        }
    }

    /// Pops batches while fewer than `max_in_flight` are at the indexer.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        while self.in_flight < self.config.max_in_flight.max(1) {
            let is_in_initial_list = !self.fifo.has_synced();
            let Some(batch) = self.fifo.pop_batch(self.config.batch_size.max(1)) else {
                break;
            };
            self.in_flight += 1;
            let n = batch.items.len();
            self.status.popped.fetch_add(n as u64, Ordering::Relaxed);
            let token = batch.token;
            let send = self.indexer.send(ProcessDeltas {
                batch: batch.items,
                is_in_initial_list,
            });
            ctx.spawn(send.into_actor(self).map(move |res, act, ctx| {
                act.in_flight -= 1;
                let failed = match res {
                    Ok(report) => report.failed,
                    // The indexer stopped (shutdown): nothing was applied.
                    Err(_) => n,
                };
                if failed > 0 {
                    act.status
                        .failed
                        .fetch_add(failed as u64, Ordering::Relaxed);
                }
                act.fifo.done(token, failed);
                act.publish();
                act.release_writers();
                act.pump(ctx);
            }));
        }
        self.publish();
        trace::depth(Hop::Fifo, &self.kind, self.fifo.pending_deltas());
    }

    fn release_writers(&mut self) {
        if self.fifo.pending_deltas() <= self.config.capacity {
            for w in self.waiting_writers.drain(..) {
                let _ = w.send(());
            }
        }
    }

    /// The answer to a writer: now, or once the indexer drained below capacity (B4).
    fn room(&mut self) -> ResponseFuture<Result<(), FifoError>> {
        if self.fifo.pending_deltas() <= self.config.capacity {
            return Box::pin(async { Ok(()) });
        }
        self.status.writer_waits.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting_writers.push(tx);
        Box::pin(async move {
            // A dropped sender means the FIFO stopped.
            rx.await.map_err(|_| FifoError::Closed)
        })
    }

    fn reject(&self, trace: TraceId, e: &FifoError) {
        self.status.rejected.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(kind = %self.kind, trace_id = trace.0, error = %e, "object not queued");
    }
}

impl<K: InformerObject> Actor for DeltaFifo<K> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(self.config.mailbox.max(1));
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        let left = self.fifo.close();
        if left > 0 {
            tracing::debug!(kind = %self.kind, keys = left, "DeltaFifo stopped with keys queued");
        }
    }
}

impl<K: InformerObject> Handler<Replace<K>> for DeltaFifo<K> {
    type Result = ResponseFuture<Result<(), FifoError>>;

    fn handle(&mut self, msg: Replace<K>, ctx: &mut Context<Self>) -> Self::Result {
        if trace::enabled() {
            for (obj, t) in &msg.items {
                trace::hop(Hop::Fifo, *t, &self.kind, None, &**obj, "replaced");
            }
        }
        match self.fifo.replace(msg.items, &msg.resource_version) {
            Ok(summary) => {
                for r in &summary.rejected {
                    self.reject(r.trace, &FifoError::Key(r.error.clone()));
                }
            }
            Err(e) => return Box::pin(async move { Err(e) }),
        }
        self.pump(ctx);
        self.room()
    }
}

impl<K: InformerObject> Handler<Events<K>> for DeltaFifo<K> {
    type Result = ResponseFuture<Result<(), FifoError>>;

    fn handle(&mut self, msg: Events<K>, ctx: &mut Context<Self>) -> Self::Result {
        let tracing_on = trace::enabled();
        for ev in msg.events {
            if tracing_on {
                trace::hop(Hop::Fifo, ev.trace, &self.kind, None, &*ev.obj, "queued");
            }
            let r = match ev.kind {
                EventKind::Add => self.fifo.add(ev.obj, ev.trace),
                EventKind::Update => self.fifo.update(ev.obj, ev.trace),
                EventKind::Delete => self.fifo.delete(ev.obj, ev.trace),
            };
            match r {
                Ok(()) => {}
                Err(FifoError::Closed) => return Box::pin(async { Err(FifoError::Closed) }),
                Err(e) => self.reject(ev.trace, &e),
            }
        }
        self.pump(ctx);
        self.room()
    }
}

impl<K: InformerObject> Handler<Bookmark> for DeltaFifo<K> {
    type Result = ();

    fn handle(&mut self, msg: Bookmark, _: &mut Context<Self>) {
        tracing::trace!(kind = %self.kind, resource_version = %msg.resource_version, "bookmark");
    }
}

impl<K: InformerObject> Handler<Resync> for DeltaFifo<K> {
    type Result = Result<usize, FifoError>;

    fn handle(&mut self, _: Resync, ctx: &mut Context<Self>) -> Self::Result {
        let n = self.fifo.resync()?;
        self.pump(ctx);
        Ok(n)
    }
}

impl<K: InformerObject> Handler<Stop> for DeltaFifo<K> {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        self.waiting_writers.clear();
        ctx.stop();
    }
}
