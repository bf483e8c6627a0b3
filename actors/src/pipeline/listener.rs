//! The ProcessorListener actor (`docs/semantics.md` B3, P5–P8): one per registered handler,
//! client-go's `processorListener`.
//!
//! client-go gives each listener two goroutines and an unbounded ring buffer between them. Here
//! the actor owns the buffer, the core's [`ListenerBuffer`] (a queue; under
//! [`OverflowPolicy::Coalesce`] merged per key once [`ListenerConfig::capacity`] notifications
//! wait, and a queue again when drained), which also keeps the registration's `HasSynced`
//! bookkeeping exact (P5), and offers the buffered notifications one at a time to its [`Destination`].
//! Under [`OverflowPolicy::Block`] the indexer's message is answered only once the buffer has
//! room. After each batch a coalescing listener publishes how many notifications its buffer
//! merged away ([`ListenerStats::coalesced`]).

use std::sync::{Arc, atomic::Ordering};

use actix::prelude::*;
use kinformer::{
    lean::LazyObject,
    processor::{Delivery, ListenerBuffer},
};

use crate::{
    config::{ListenerConfig, OverflowPolicy},
    object::InformerObject,
    pipeline::destination::{Destination, HandlerKind, Offered},
    pipeline::messages::{Notifications, Stop},
    pipeline::waiters::Waiters,
    telemetry::stats::ListenerStats,
    telemetry::trace::{self, Hop, Tracer},
};

/// A listener's name: its config's, or `<kind>-handler-<id>`.
pub(crate) fn listener_name(config: &ListenerConfig, kind: &str, id: u64) -> Arc<str> {
    config
        .name
        .clone()
        .unwrap_or_else(|| format!("{kind}-handler-{id}"))
        .into()
}

/// The ProcessorListener actor.
pub(crate) struct ProcessorListener<K: InformerObject> {
    name: Arc<str>,
    config: ListenerConfig,
    buffer: ListenerBuffer<LazyObject<K>>,
    destination: Destination<K>,
    /// A notification is on its way to the destination: offer nothing more until it arrived.
    delivering: bool,
    /// The indexer, waiting for room under `Block` (B3).
    blocked_indexer: Waiters,
    /// Callers of `Stop`, answered once the listener stopped.
    stop_waiters: Waiters,
    stats: Arc<ListenerStats>,
    /// The `listener` hop of this listener (T1): accepted notifications, buffer depth.
    tracer: Tracer,
    /// The `handler` hop of this listener, for destinations delivered from the actor.
    handler_tracer: Tracer,
}

impl<K: InformerObject> ProcessorListener<K> {
    /// A listener delivering to `handler`. Spawns the handler thread when there is one; the
    /// handler reaches it when the actor starts. On failure the handler is handed back.
    pub(crate) fn new(
        handler: HandlerKind<K>,
        config: ListenerConfig,
        stats: Arc<ListenerStats>,
        kind: Arc<str>,
        id: u64,
    ) -> Result<Self, (std::io::Error, HandlerKind<K>)> {
        let name = listener_name(&config, &kind, id);
        let tracer = Tracer::new(
            Hop::Listener,
            Arc::clone(&name),
            trace::object_kind::<K>(&kind),
        );
        let handler_tracer = tracer.at(Hop::Handler);
        let destination =
            Destination::new(handler, &stats, &name, &handler_tracer, config.panic_pause)?;
        let tracker = Arc::clone(&stats.sync);
        let buffer = match config.policy {
            // B3: merging starts once `capacity` notifications wait; a handler that keeps up
            // gets a plain queue, as under Unbounded.
            OverflowPolicy::Coalesce => ListenerBuffer::coalescing(tracker, config.capacity.max(1)),
            _ => ListenerBuffer::queue(tracker),
        };
        Ok(ProcessorListener {
            name,
            config,
            buffer,
            destination,
            delivering: false,
            blocked_indexer: Waiters::default(),
            stop_waiters: Waiters::default(),
            stats,
            tracer,
            handler_tracer,
        })
    }

    /// The handler of a listener never started (a start that failed), with its options.
    pub(crate) fn into_handler(self) -> Option<(HandlerKind<K>, ListenerConfig)> {
        let config = self.config;
        self.destination.take_back().map(|h| (h, config))
    }

    /// Buffers one notification (already counted as received by the caller, per batch).
    fn accept(&mut self, p: Delivery<LazyObject<K>>) {
        let what = trace::notification_name(&p.notification);
        self.tracer.object(p.trace, p.notification.object(), what);
        self.buffer.push(p);
    }

    /// Moves buffered notifications to the destination as far as it accepts them without waiting.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        while !self.delivering {
            let Some(p) = self.buffer.pop() else { break };
            match self.destination.offer(p, &self.stats, &self.handler_tracer) {
                Offered::Taken => {}
                Offered::Gone => self.destination_gone(),
                Offered::Later(delivery) => {
                    self.delivering = true;
                    ctx.spawn(delivery.into_actor(self).map(|ok, act, ctx| {
                        act.delivering = false;
                        if !ok {
                            act.destination_gone();
                        }
                        act.pump(ctx);
                    }));
                }
            }
        }
        // One wake for what was offered, before anything waits (a `Later` delivery awaits room
        // the thread makes only once awake).
        self.destination.flush();
        // Publishes the gauges, releases a waiting indexer.
        let n = self.buffer.len();
        self.stats.publish_buffered(n);
        self.tracer.depth(n);
        if n < self.config.capacity.max(1) {
            self.blocked_indexer.release();
        }
    }

    fn destination_gone(&mut self) {
        if self.destination.is_recipient() {
            // S3: already reported; the buffer drains through the destination, which counts each
            // notification as undeliverable without sending it.
            return;
        }
        tracing::warn!(handler = %self.name, "handler sink closed; dropping its buffered notifications");
        self.clear_buffer();
    }

    fn clear_buffer(&mut self) {
        self.buffer.clear();
        self.stats.publish_buffered(0);
        self.tracer.depth(0);
    }

    /// Closes the destination, waits for the handler thread to finish its current notification, stops.
    fn finish(&mut self, ctx: &mut Context<Self>) {
        let exited = self.destination.close();
        let exited = async move {
            if let Some(e) = exited {
                let _ = e.await;
            }
        };
        ctx.spawn(exited.into_actor(self).map(|_, act, ctx| {
            act.stats.mark_stopped();
            act.stop_waiters.release();
            ctx.stop();
        }));
    }
}

impl<K: InformerObject> Actor for ProcessorListener<K> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(16);
        self.destination.arm();
    }
}

impl<K: InformerObject> Handler<Notifications<K>> for ProcessorListener<K> {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: Notifications<K>, ctx: &mut Context<Self>) -> Self::Result {
        // Counted before anything is delivered, so `received` never trails `delivered`.
        let n = msg.items.len() as u64;
        self.stats.received.fetch_add(n, Ordering::Relaxed);
        msg.items.into_iter().for_each(|p| self.accept(p));
        // 0 for a plain queue: one relaxed store per batch whatever the policy.
        self.stats.publish_coalesced(self.buffer.coalesced());
        self.tracer.depth(self.buffer.len());
        self.pump(ctx);
        let full = self.buffer.len() >= self.config.capacity.max(1);
        if self.config.policy == OverflowPolicy::Block && full {
            let room = self.blocked_indexer.wait();
            return Box::pin(async move {
                let _ = room.await;
            });
        }
        Box::pin(async {})
    }
}

impl<K: InformerObject> Handler<Stop> for ProcessorListener<K> {
    type Result = ResponseFuture<()>;

    /// Removal (P5) and shutdown (P9): drops what is buffered, lets the handler finish its
    /// current notification, stops; answers once the handler's thread has exited.
    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) -> Self::Result {
        self.destination.abort();
        self.clear_buffer();
        self.blocked_indexer.release();
        let stopped = self.stop_waiters.wait();
        if self.stop_waiters.len() == 1 {
            self.finish(ctx);
        }
        Box::pin(async move {
            let _ = stopped.await;
        })
    }
}
