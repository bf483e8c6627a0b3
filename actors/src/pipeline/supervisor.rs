//! The reflector's supervisor (docs/semantics.md S1, S2).
//!
//! The supervisor owns the reflector's [`ReflectorMachine`](kinformer::reflector::ReflectorMachine)
//! across restarts. A reflector whose machine starts backing off (a failed list or watch, a very
//! short or idle watch, a 410, a 429) ends and hands the machine back with the reason; the
//! supervisor records it (restarts, last error) and starts a fresh reflector with the same machine
//! when the machine's backoff is over, so the new one resumes from the last synced
//! resourceVersion and relists only after a 410. Only the reflector restarts: the FIFO, the
//! indexer, the cache and the handlers keep running (S3).
//!
//! R11: when the informer shares its API server's health, the supervisor follows its
//! announcements. A return cuts the backoff it waits in after an outage short
//! (`handle_server_back`: the next reflector starts within the return jitter); when a backoff
//! ends while the shared probe has just found the server down, it backs off again without
//! starting a reflector (`handle_server_down`: the probe was this retry).

use std::{
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant, SystemTime},
};

use actix::prelude::*;
use kinformer::backoff::{Backoff, BackoffConfig};

use crate::{
    error::ReflectorError,
    listwatch::server_health::ServerNotice,
    object::InformerObject,
    pipeline::messages::{ReflectorFailed, Stop},
    pipeline::reflector::{Machine, Reflector, note_watching},
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
    /// The pending restart (cancelled when the server's return cuts the backoff, R11).
    restart: Option<SpawnHandle>,
    /// When the machine last failed (or backed off again for a probe): a probe that found the
    /// server down after this stands for the next retry (R11).
    failed_at: Option<Instant>,
    /// The last return announced (R11) this supervisor acted on.
    epoch: u64,
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
            restart: None,
            failed_at: None,
            epoch: 0,
        }
    }

    /// Starts the next reflector `delay` from now (replacing a pending start).
    fn schedule(&mut self, ctx: &mut Context<Self>, delay: Duration) {
        if let Some(h) = self.restart.take() {
            ctx.cancel_future(h);
        }
        self.cx.status.set_phase(ReflectorPhase::BackingOff(delay));
        self.restart = Some(ctx.run_later(delay, |act, ctx| {
            act.restart = None;
            act.backoff_over(ctx);
        }));
    }

    /// The backoff is over: start the reflector, unless the client's shared probe found the
    /// server down since the last failure (R11): then the machine backs off again, no request.
    fn backoff_over(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        if let (Some(server), Some(failed_at), Some(m)) =
            (&self.cx.server, self.failed_at, self.machine.as_mut())
            && !server.retry_allowed(now, failed_at)
            && let Some(until) = m.handle_server_down(now)
        {
            self.failed_at = Some(now);
            self.cx.status.publish(m.counters());
            tracing::debug!(resource = %self.cx.resource,
                retry_in_ms = until.saturating_duration_since(now).as_millis() as u64,
                "API server still down (shared probe); backing off again without a request (R11)");
            self.schedule(ctx, until.saturating_duration_since(now));
            return;
        }
        self.spawn_reflector(ctx);
    }

    /// The server is back (R11): a backoff after an outage ends within the return jitter.
    fn server_back(&mut self, ctx: &mut Context<Self>) {
        if self.restart.is_none() {
            return;
        }
        let Some(m) = self.machine.as_mut() else {
            return;
        };
        let now = Instant::now();
        if let Some(until) = m.handle_server_back(now) {
            self.cx.status.publish(m.counters());
            let delay = until.saturating_duration_since(now);
            tracing::info!(resource = %self.cx.resource, retry_in_ms = delay.as_millis() as u64,
                "API server back; retrying now (R11)");
            self.schedule(ctx, delay);
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
        if let Some(server) = &self.cx.server {
            let rx = server.handle().subscribe();
            self.epoch = rx.borrow().epoch;
            let notices = futures::stream::unfold(rx, |mut rx| async move {
                rx.changed().await.ok()?;
                let n = *rx.borrow_and_update();
                Some((n, rx))
            });
            ctx.add_stream(notices);
        }
        self.spawn_reflector(ctx);
    }
}

impl<K: InformerObject> StreamHandler<ServerNotice> for Supervisor<K> {
    fn handle(&mut self, n: ServerNotice, ctx: &mut Context<Self>) {
        self.cx
            .status
            .record_server_watching_again(n.all_watching_after);
        if n.epoch > self.epoch {
            self.epoch = n.epoch;
            self.server_back(ctx);
        }
    }

    fn finished(&mut self, _ctx: &mut Context<Self>) {
        // The handle lives as long as this supervisor's context: nothing to do (and the
        // supervisor must not stop with the stream, as actix's default would).
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
        self.failed_at = Some(now);
        let delay = match msg.retry_at {
            Some(at) => at.saturating_duration_since(now),
            None => self.backoff.next_delay(now, rand::random::<f64>()),
        };
        tracing::warn!(
            resource = %self.cx.resource,
            reason = msg.error.reason(),
            error = %msg.error,
            retry_in_ms = delay.as_millis() as u64,
            "reflector failed; restarting after backoff"
        );
        self.schedule(ctx, delay);
        if let (Some(server), Some(m)) = (&self.cx.server, &self.machine) {
            // This informer is not watching now (R11's measure).
            note_watching(&self.cx, m);
            // A return announced between this failure and now was missed: the server is no
            // longer taken to be down although this failure was an outage (R11).
            if m.backing_off_after_outage() && !server.handle().is_down() {
                self.server_back(ctx);
            }
        }
    }
}

impl<K: InformerObject> Handler<Stop> for Supervisor<K> {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        if let Some(h) = self.restart.take() {
            ctx.cancel_future(h);
        }
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
