//! The reflector's supervisor (DESIGN.md S1, S2).
//!
//! A reflector that fails (list, watch, decode) tells its supervisor why and stops; the
//! supervisor starts a fresh reflector after the R8 backoff. The fresh one resumes from the last
//! synced resourceVersion, held in the shared [`ReflectorStatus`], so a restart re-watches
//! without relisting unless the server had answered 410. Only the reflector restarts: the FIFO,
//! the indexer, the cache and the handlers keep running (S3).

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use actix::prelude::*;
use kinformer::{
    backoff::{Backoff, BackoffConfig},
    reflector::ReflectorState,
};

use crate::{
    InformerObject,
    error::ReflectorError,
    messages::Stop,
    reflector::{Reflector, ReflectorContext},
};

/// What the reflector is doing now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReflectorPhase {
    /// Not started yet.
    Idle,
    /// Listing.
    Listing,
    /// Watching.
    Watching,
    /// Failed; restarting after the given delay.
    BackingOff(Duration),
    /// Shut down.
    Stopped,
}

/// A point-in-time copy of a reflector's health (S2).
#[derive(Clone, Debug)]
pub struct ReflectorHealth {
    /// Current phase.
    pub phase: ReflectorPhase,
    /// How many times the supervisor restarted the reflector.
    pub restarts: u64,
    /// The last failure, if any, with when it happened.
    pub last_error: Option<(SystemTime, String)>,
    /// The resourceVersion the cache is synced to.
    pub last_sync_resource_version: String,
    /// LIST requests issued (pages count individually).
    pub lists: u64,
    /// WATCH requests opened.
    pub watches: u64,
    /// Watch events received (ADDED, MODIFIED, DELETED).
    pub events: u64,
    /// Relists caused by 410 Expired.
    pub expired: u64,
    /// Watches dropped client-side because they went silent (R4).
    pub stalls: u64,
    /// Objects dropped because of an unexpected type (R5).
    pub dropped_objects: u64,
}

/// Shared, lock-light status of one informer's reflector: the supervisor, the reflector and the
/// informer handle all see it. Counters are atomics; phase and error sit behind short mutexes
/// that are touched only on state changes, never per event.
#[derive(Debug)]
pub struct ReflectorStatus {
    pub(crate) state: Mutex<ReflectorState>,
    pub(crate) phase: Mutex<ReflectorPhase>,
    pub(crate) last_error: Mutex<Option<(SystemTime, String)>>,
    pub(crate) restarts: AtomicU64,
    pub(crate) lists: AtomicU64,
    pub(crate) watches: AtomicU64,
    pub(crate) events: AtomicU64,
    pub(crate) expired: AtomicU64,
    pub(crate) stalls: AtomicU64,
    pub(crate) dropped_objects: AtomicU64,
}

impl ReflectorStatus {
    pub(crate) fn new(state: ReflectorState) -> Self {
        ReflectorStatus {
            state: Mutex::new(state),
            phase: Mutex::new(ReflectorPhase::Idle),
            last_error: Mutex::new(None),
            restarts: AtomicU64::new(0),
            lists: AtomicU64::new(0),
            watches: AtomicU64::new(0),
            events: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            dropped_objects: AtomicU64::new(0),
        }
    }

    pub(crate) fn set_phase(&self, p: ReflectorPhase) {
        if let Ok(mut g) = self.phase.lock() {
            *g = p;
        }
    }

    /// Runs `f` on the RV state; a poisoned lock (a panic elsewhere) still yields the state.
    pub(crate) fn with_state<R>(&self, f: impl FnOnce(&mut ReflectorState) -> R) -> R {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    /// The resourceVersion the cache is synced to.
    pub fn last_sync_resource_version(&self) -> String {
        self.with_state(|s| s.last_sync_resource_version().to_string())
    }

    /// A snapshot of every counter and the phase.
    pub fn health(&self) -> ReflectorHealth {
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ReflectorHealth {
            phase: self
                .phase
                .lock()
                .map(|g| g.clone())
                .unwrap_or(ReflectorPhase::Idle),
            restarts: c(&self.restarts),
            last_error: self.last_error.lock().ok().and_then(|g| g.clone()),
            last_sync_resource_version: self.last_sync_resource_version(),
            lists: c(&self.lists),
            watches: c(&self.watches),
            events: c(&self.events),
            expired: c(&self.expired),
            stalls: c(&self.stalls),
            dropped_objects: c(&self.dropped_objects),
        }
    }
}

/// Reflector → Supervisor: "I failed with this reason and am stopping".
pub struct ReflectorFailed(pub ReflectorError);

impl Message for ReflectorFailed {
    type Result = ();
}

/// Restarts a failed reflector with R8 backoff (S1) and records restarts and errors (S2).
pub struct Supervisor<K: InformerObject> {
    cx: Arc<ReflectorContext<K>>,
    backoff: Backoff,
    current: Option<Addr<Reflector<K>>>,
    stopping: bool,
}

impl<K: InformerObject> Supervisor<K> {
    /// A supervisor for reflectors built from `cx`.
    pub fn new(cx: Arc<ReflectorContext<K>>, backoff: BackoffConfig) -> Self {
        Supervisor {
            cx,
            backoff: Backoff::new(backoff),
            current: None,
            stopping: false,
        }
    }

    fn spawn_reflector(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        let supervisor = ctx.address().recipient();
        self.current = Some(Reflector::new(Arc::clone(&self.cx), supervisor).start());
    }
}

impl<K: InformerObject> Actor for Supervisor<K> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.spawn_reflector(ctx);
    }
}

impl<K: InformerObject> Handler<ReflectorFailed> for Supervisor<K> {
    type Result = ();

    fn handle(&mut self, msg: ReflectorFailed, ctx: &mut Context<Self>) {
        self.current = None;
        if self.stopping {
            return;
        }
        let status = &self.cx.status;
        status.restarts.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut g) = status.last_error.lock() {
            *g = Some((SystemTime::now(), msg.0.to_string()));
        }
        let delay = self
            .backoff
            .next_delay(Instant::now(), rand::random::<f64>());
        status.set_phase(ReflectorPhase::BackingOff(delay));
        tracing::warn!(
            resource = %self.cx.resource,
            reason = msg.0.reason(),
            error = %msg.0,
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
