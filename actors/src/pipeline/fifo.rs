//! The DeltaFifo actor (F1–F9, B1, B2, B4 of `docs/semantics.md`): owns the core
//! [`kinformer::fifo::DeltaFifo`] and pushes popped batches to the indexer, one or two at a time.
//!
//! Each popped batch is one [`ProcessDeltas`] message; an atomic relist (F9) is popped whole, so
//! the indexer applies it as one store batch and listers never see half of it. Flow control runs
//! both ways:
//! - downstream, at most `max_in_flight` batches are outstanding at the indexer; the indexer's
//!   answer is the acknowledgement (`done`) that `HasSynced` counts (F5);
//! - upstream, once more than `capacity` deltas are pending, the answer to the reflector's
//!   `Replace`/`Events` is held back until the indexer drained below it, so the socket pushes
//!   back (B4) and memory stays bounded by the number of objects plus `capacity` (B2).

use std::sync::{Arc, atomic::Ordering::Relaxed};

use actix::prelude::*;
use kinformer::{
    fifo::{DeltaFifo as CoreFifo, FifoError},
    lean::LazyObject,
    trace::TraceId,
};

use crate::{
    config::FifoConfig,
    object::InformerObject,
    pipeline::messages::{
        Barrier, Bookmark, EventKind, Events, ProcessDeltas, Replace, Resync, ShardShrunk, Stop,
    },
    pipeline::waiters::Waiters,
    telemetry::stats::FifoStatus,
    telemetry::trace::Tracer,
};

/// The DeltaFifo actor.
pub(crate) struct DeltaFifo<K: InformerObject> {
    fifo: CoreFifo<LazyObject<K>>,
    indexer: Recipient<ProcessDeltas<K>>,
    config: FifoConfig,
    in_flight: usize,
    /// Writers (the reflector) waiting for room (B4).
    writers: Waiters,
    status: Arc<FifoStatus>,
    kind: Arc<str>,
    /// The `fifo` hop of this informer (T1): queued objects and pending-delta depth.
    tracer: Tracer,
    /// Entries popped so far (the position of the next pop in the queue's order, K3).
    popped: u64,
    /// Batches at the indexer: the position of their first entry (K3).
    in_flight_from: std::collections::BTreeMap<u64, usize>,
    /// Barriers waiting: released once every entry before the position was acknowledged (K3).
    barriers: Vec<(u64, tokio::sync::oneshot::Sender<()>)>,
}

impl<K: InformerObject> DeltaFifo<K> {
    /// An actor around `fifo` that feeds `indexer`.
    pub(crate) fn new(
        fifo: CoreFifo<LazyObject<K>>,
        indexer: Recipient<ProcessDeltas<K>>,
        config: FifoConfig,
        status: Arc<FifoStatus>,
        kind: Arc<str>,
        tracer: Tracer,
    ) -> Self {
        let writers = Waiters::default();
        let in_flight = 0;
        DeltaFifo {
            fifo,
            indexer,
            config,
            in_flight,
            writers,
            status,
            kind,
            tracer,
            popped: 0,
            in_flight_from: std::collections::BTreeMap::new(),
            barriers: Vec::new(),
        }
    }

    /// Releases the barriers whose entries have all been popped and acknowledged (K3).
    fn release_barriers(&mut self) {
        let oldest_unacked = self
            .in_flight_from
            .first_key_value()
            .map_or(self.popped, |(k, _)| *k);
        let mut i = 0;
        while i < self.barriers.len() {
            if self.barriers[i].0 <= oldest_unacked {
                let (_, tx) = self.barriers.swap_remove(i);
                let _ = tx.send(());
            } else {
                i += 1;
            }
        }
    }

    /// Pops batches while fewer than `max_in_flight` are at the indexer.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        while self.in_flight < self.config.max_in_flight.max(1) {
            let is_in_initial_list = !self.fifo.has_synced();
            let Some(popped) = self.fifo.pop_batch(self.config.batch_size.max(1)) else {
                break;
            };
            self.in_flight += 1;
            let (n, token, batch) = (popped.items.len(), popped.token, popped.items);
            let start = self.popped;
            self.popped += n as u64;
            self.in_flight_from.insert(start, n);
            self.status.popped.fetch_add(n as u64, Relaxed);
            let send = self.indexer.send(ProcessDeltas {
                batch,
                is_in_initial_list,
            });
            ctx.spawn(send.into_actor(self).map(move |res, act, ctx| {
                act.in_flight -= 1;
                // An indexer that stopped (shutdown) applied nothing.
                let failed = res.map_or(n, |report| report.failed);
                act.status.failed.fetch_add(failed as u64, Relaxed);
                act.fifo.done(token, failed);
                act.in_flight_from.remove(&start);
                act.release_barriers();
                act.status.publish(&act.fifo);
                if act.fifo.pending_deltas() <= act.config.capacity {
                    act.writers.release();
                }
                act.pump(ctx);
            }));
        }
        self.status.publish(&self.fifo);
        self.tracer.depth(self.fifo.pending_deltas());
    }

    /// Pumps, then answers a writer: now, or once the indexer drained below capacity (B4).
    fn room(&mut self, ctx: &mut Context<Self>) -> ResponseFuture<Result<(), FifoError>> {
        self.pump(ctx);
        if self.fifo.pending_deltas() <= self.config.capacity {
            return Box::pin(async { Ok(()) });
        }
        self.status.writer_waits.fetch_add(1, Relaxed);
        let room = self.writers.wait();
        // Dropped unreleased: the FIFO stopped.
        Box::pin(async move { room.await.map_err(|_| FifoError::Closed) })
    }

    fn reject(&self, trace: TraceId, e: &FifoError) {
        self.status.rejected.fetch_add(1, Relaxed);
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
        self.tracer.items(&msg.items, "replaced");
        match self.fifo.replace(msg.items, &msg.resource_version) {
            Ok(summary) => summary
                .rejected
                .iter()
                .for_each(|r| self.reject(r.trace, &FifoError::Key(r.error.clone()))),
            Err(e) => return Box::pin(async move { Err(e) }),
        }
        self.tracer.depth(self.fifo.pending_deltas());
        self.room(ctx)
    }
}

impl<K: InformerObject> Handler<Events<K>> for DeltaFifo<K> {
    type Result = ResponseFuture<Result<(), FifoError>>;

    fn handle(&mut self, msg: Events<K>, ctx: &mut Context<Self>) -> Self::Result {
        for ev in msg.events {
            self.tracer.object(ev.trace, &ev.obj, "queued");
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
        self.tracer.depth(self.fifo.pending_deltas());
        self.room(ctx)
    }
}

impl<K: InformerObject> Handler<Bookmark> for DeltaFifo<K> {
    type Result = ();

    fn handle(&mut self, msg: Bookmark, _: &mut Context<Self>) {
        tracing::trace!(kind = %self.kind, resource_version = %msg.resource_version, "bookmark");
    }
}

impl<K: InformerObject> Handler<ShardShrunk> for DeltaFifo<K> {
    type Result = ResponseFuture<Result<usize, FifoError>>;

    fn handle(&mut self, msg: ShardShrunk, ctx: &mut Context<Self>) -> Self::Result {
        let selector = msg.selector;
        // K2: what left the shard, by the same hash the server uses; it leaves the store
        // without a notification (the objects still exist).
        let n = match self
            .fifo
            .leave_unless(|o| selector.matches(o.uid(), o.namespace()))
        {
            Ok(n) => n,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        tracing::debug!(kind = %self.kind, left = n, %selector, "shard shrank");
        let room = self.room(ctx);
        Box::pin(async move { room.await.map(|()| n) })
    }
}

impl<K: InformerObject> Handler<Barrier> for DeltaFifo<K> {
    type Result = ResponseFuture<Result<(), FifoError>>;

    fn handle(&mut self, _: Barrier, ctx: &mut Context<Self>) -> Self::Result {
        if self.fifo.is_closed() {
            return Box::pin(async { Err(FifoError::Closed) });
        }
        // K3: every entry queued now sits before this position in pop order.
        let at = self.popped + self.fifo.len() as u64;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.barriers.push((at, tx));
        self.release_barriers();
        self.pump(ctx);
        Box::pin(async move { rx.await.map_err(|_| FifoError::Closed) })
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
        self.writers.clear();
        self.barriers.clear();
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use tokio::sync::mpsc;

    use kinformer::fifo::{DeltaFifoOptions, FifoMode};

    use super::*;
    use crate::pipeline::messages::ProcessReport;

    /// A stand-in indexer that reports the size of every `ProcessDeltas` it receives.
    struct Recorder(mpsc::UnboundedSender<usize>);

    impl Actor for Recorder {
        type Context = Context<Self>;
    }

    impl Handler<ProcessDeltas<ConfigMap>> for Recorder {
        type Result = MessageResult<ProcessDeltas<ConfigMap>>;

        fn handle(&mut self, msg: ProcessDeltas<ConfigMap>, _: &mut Context<Self>) -> Self::Result {
            let _ = self.0.send(msg.batch.len());
            MessageResult(ProcessReport::default())
        }
    }

    fn cm(name: &str) -> Arc<LazyObject<ConfigMap>> {
        let mut c = ConfigMap::default();
        c.metadata.namespace = Some("ns".into());
        c.metadata.name = Some(name.into());
        c.metadata.resource_version = Some("1".into());
        Arc::new(LazyObject::from_object(Arc::new(c)))
    }

    /// Starts a FIFO actor with `config` in front of a recorder, sends one relist of `n`
    /// objects and returns the sizes of the `ProcessDeltas` messages that carried them.
    async fn relist_batches(config: FifoConfig, n: usize) -> Vec<usize> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let indexer = Recorder(tx).start();
        let core = CoreFifo::new(
            config.fifo_options(DeltaFifoOptions::new(kinformer::key::lazy_key_func())),
        );
        let status = Arc::new(FifoStatus::default());
        let fifo = DeltaFifo::new(
            core,
            indexer.recipient(),
            config,
            status,
            "ConfigMap".into(),
            Tracer::new(
                crate::telemetry::trace::Hop::Fifo,
                "v1/ConfigMap".into(),
                "ConfigMap".into(),
            ),
        );
        let fifo = fifo.start();
        let items = (0..n)
            .map(|i| (cm(&format!("o{i}")), TraceId(i as u64 + 1)))
            .collect();
        fifo.send(Replace {
            items,
            resource_version: "1".into(),
        })
        .await
        .expect("FIFO running")
        .expect("FIFO open");
        let mut sizes = Vec::new();
        while sizes.iter().sum::<usize>() < n {
            let size = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .expect("every listed object reaches the indexer within the deadline")
                .expect("recorder running");
            sizes.push(size);
        }
        sizes
    }

    #[test]
    fn f9_fifo_config_defaults_and_options() {
        let c = FifoConfig::default();
        assert_eq!(c.mode, FifoMode::PerKey);
        assert!(!c.atomic_replace);
        assert!(c.emit_delta_type_replaced);
        let opts = FifoConfig {
            mode: FifoMode::InOrder,
            atomic_replace: true,
            emit_delta_type_replaced: false,
            ..FifoConfig::default()
        }
        .fifo_options(DeltaFifoOptions::<ConfigMap>::default());
        assert_eq!(opts.mode, FifoMode::InOrder);
        assert!(opts.atomic_replace);
        assert!(!opts.emit_delta_type_replaced);
    }

    #[actix::test]
    async fn f9_atomic_relist_reaches_the_indexer_as_one_message() {
        for mode in [FifoMode::PerKey, FifoMode::InOrder] {
            let config = FifoConfig {
                batch_size: 2,
                mode,
                atomic_replace: true,
                ..FifoConfig::default()
            };
            assert_eq!(relist_batches(config, 5).await, [5], "{mode:?}");
        }
    }

    #[actix::test]
    async fn f6_relist_without_atomic_replace_is_cut_at_batch_size() {
        let config = FifoConfig {
            batch_size: 2,
            ..FifoConfig::default()
        };
        assert_eq!(relist_batches(config, 5).await, [2, 2, 1]);
    }
}
