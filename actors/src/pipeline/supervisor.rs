//! The reflector's supervisor (docs/semantics.md S1, S2).
//!
//! The supervisor owns the reflector's [`ReflectorMachine`](kinformer::reflector::ReflectorMachine)
//! across restarts. A reflector whose machine starts backing off (a failed list or watch, a very
//! short or idle watch, a 410, a 429) ends and hands the machine back with the reason; the
//! supervisor records it (restarts, last error) and starts a fresh reflector with the same machine
//! when the machine's backoff is over, so the new one resumes from the last synced
//! resourceVersion and relists only after a 410. Only the reflector restarts: the FIFO, the
//! indexer, the cache and the handlers keep running (S3).

use std::{
    sync::{Arc, atomic::Ordering},
    time::{Instant, SystemTime},
};

use actix::prelude::*;
use kinformer::backoff::{Backoff, BackoffConfig};

use crate::{
    error::ReflectorError,
    object::InformerObject,
    pipeline::messages::{ReflectorFailed, Stop},
    pipeline::reflector::{Machine, Reflector},
    pipeline::reflector_io::ReflectorContext,
    telemetry::health::ReflectorPhase,
};

/// Restarts a reflector when its machine's backoff is over (S1) and records restarts and errors
/// (S2).
pub struct Supervisor<K: InformerObject> {
    cx: Arc<ReflectorContext<K>>,
    /// The machine between two reflectors.
    machine: Option<Machine<K>>,
    /// Builds a fresh machine when a reflector panicked and lost its own.
    fresh: Box<dyn Fn() -> Machine<K> + Send>,
    /// Backoff for failures the machine did not time (a panic): a panicking transform must not
    /// spin.
    backoff: Backoff,
    current: Option<Addr<Reflector<K>>>,
    stopping: bool,
}

impl<K: InformerObject> Supervisor<K> {
    pub(crate) fn new(
        cx: Arc<ReflectorContext<K>>,
        fresh: Box<dyn Fn() -> Machine<K> + Send>,
        backoff: BackoffConfig,
    ) -> Self {
        Supervisor {
            cx,
            machine: Some(fresh()),
            fresh,
            backoff: Backoff::new(backoff),
            current: None,
            stopping: false,
        }
    }

    fn spawn_reflector(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        let machine = self.machine.take().unwrap_or_else(|| (self.fresh)());
        let supervisor = ctx.address().recipient();
        self.current = Some(Reflector::new(Arc::clone(&self.cx), machine, supervisor).start());
    }
}

impl<K: InformerObject> Actor for Supervisor<K> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.spawn_reflector(ctx);
    }
}

impl<K: InformerObject> Handler<ReflectorFailed<K>> for Supervisor<K> {
    type Result = ();

    fn handle(&mut self, msg: ReflectorFailed<K>, ctx: &mut Context<Self>) {
        self.current = None;
        self.machine = msg.machine;
        if self.stopping {
            return;
        }
        let status = &self.cx.status;
        if matches!(msg.error, ReflectorError::FifoStopped) {
            // The informer is shutting down: nothing to restart.
            status.set_phase(ReflectorPhase::Stopped);
            return;
        }
        status.restarts.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut g) = status.last_error.lock() {
            *g = Some((SystemTime::now(), msg.error.to_string()));
        }
        let now = Instant::now();
        let delay = match msg.retry_at {
            Some(at) => at.saturating_duration_since(now),
            None => self.backoff.next_delay(now, rand::random::<f64>()),
        };
        status.set_phase(ReflectorPhase::BackingOff(delay));
        tracing::warn!(
            resource = %self.cx.resource,
            reason = msg.error.reason(),
            error = %msg.error,
            retry_in_ms = delay.as_millis() as u64,
            "reflector failed; restarting after backoff"
        );
        ctx.run_later(delay, |act, ctx| act.spawn_reflector(ctx));
    }
}

impl<K: InformerObject> Handler<Stop> for Supervisor<K> {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Stop, _ctx: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        self.cx.status.set_phase(ReflectorPhase::Stopped);
        let current = self.current.take();
        Box::pin(
            async move {
                if let Some(r) = current {
                    let _ = r.send(Stop).await;
                }
            }
            .into_actor(self)
            .map(|_, _act, ctx| ctx.stop()),
        )
    }
}
