//! Leader election among a controller's replicas: client-go's `tools/leaderelection` over a
//! `coordination.k8s.io/v1` Lease, driven by an actix actor or by a plain async call.
//!
//! The protocol (every decision, the timings, the rules and our differences from client-go) is
//! the core's [`LeaderElectionMachine`]; see `kinformer::leader_election`. This module only
//! moves its requests to the API server through `kube::Api<Lease>` (GET, CREATE, PUT with the
//! `resourceVersion`), bounds each request by the machine's deadline (a hung request is dropped
//! and never holds a leader past its renew deadline), sleeps until the machine's next timer,
//! and turns its events into the user's [`LeaderCallbacks`] and a lock-free
//! [`LeaderElectionStatus`].
//!
//! ```no_run
//! use kinformer_actors::{LeaderCallbacks, LeaderElectionConfig, LeaderElector};
//! # async fn demo(client: kube::Client) -> Result<(), kinformer_actors::LeaderElectionError> {
//! let config = LeaderElectionConfig::new("kube-system", "my-controller", "replica-a");
//! let callbacks = LeaderCallbacks::new(
//!     || println!("leading: start the controllers"),
//!     || println!("stopped leading: stop acting at once"),
//! )
//! .on_new_leader(|who| println!("the leader is {who}"));
//! // On an actor of its own (its own thread), stopped through the handle:
//! let elector = LeaderElector::new(config, client, callbacks)?.start()?;
//! assert!(!elector.is_leader() || elector.status().holder().is_some());
//! elector.release().await?; // steps down, then empties holderIdentity for a quick hand-over
//! # Ok(()) }
//! ```
//!
//! Or without actix, on the caller's task: `LeaderElector::new(..)?.run_until(shutdown).await`.
//!
//! # Callbacks
//!
//! They run on the elector's own task, in order (`on_new_leader`, then `on_started_leading`;
//! `on_stopped_leading` before any release): they must return quickly (spawn the work they
//! start). `on_stopped_leading` means "stop acting now": the lease may be taken over
//! `lease_duration − renew_deadline` later. [`LeaderElectionStatus::is_leader`] checks the
//! renew deadline itself, so it is right even while the elector's thread is stalled.
//!
//! # Recovery
//!
//! Failed requests (5xx, timeouts, transport) are retried every `retry_period`; a leader that
//! cannot renew within `renew_deadline` steps down (`on_stopped_leading`) and becomes a
//! candidate again. Dropping a [`LeaderElectorHandle`] without [`stop`](LeaderElectorHandle::stop)
//! ends the elector like a crashed process: no callback, no release.

use std::{
    future::Future,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, Arbiter, AsyncContext, Context, Handler, Message,
    System, WrapFuture,
};
use arc_swap::ArcSwap;
use k8s_openapi::{
    api::coordination::v1::Lease, apimachinery::pkg::apis::meta::v1::MicroTime, jiff::Timestamp,
};
use kinformer::leader_election::{
    ConfigError, ElectionEvent, ElectionPhase, LeaderElectionConfig, LeaderElectionMachine,
    LeaseError, LeaseRequest,
};
use kube::{Api, Client, api::PostParams};
use tokio::sync::{oneshot, watch};

use crate::{error::InformerError, runtime};

/// The `tracing` target of the elector's logs.
const TARGET: &str = "kinformer::leader_election";

/// Why the elector could not start or stop.
#[derive(Debug, thiserror::Error)]
pub enum LeaderElectionError {
    /// The config breaks one of client-go's rules.
    #[error("invalid leader election config: {0}")]
    Config(#[from] ConfigError),
    /// No actix System could be joined or started.
    #[error(transparent)]
    Runtime(#[from] InformerError),
    /// The elector's actor is gone (its arbiter stopped).
    #[error("the leader elector has stopped")]
    Gone,
}

type Callback = Box<dyn Fn() + Send + Sync>;
type LeaderCallback = Box<dyn Fn(&str) + Send + Sync>;

/// What to run when leadership changes (client-go's `LeaderCallbacks`). They run on the
/// elector's task: return quickly.
pub struct LeaderCallbacks {
    on_started_leading: Callback,
    on_stopped_leading: Callback,
    on_new_leader: Option<LeaderCallback>,
}

impl LeaderCallbacks {
    /// `on_started_leading`: we lead from now on. `on_stopped_leading`: we no longer lead
    /// (renew deadline passed, another holder, or shutdown): stop acting at once.
    pub fn new(
        on_started_leading: impl Fn() + Send + Sync + 'static,
        on_stopped_leading: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        LeaderCallbacks {
            on_started_leading: Box::new(on_started_leading),
            on_stopped_leading: Box::new(on_stopped_leading),
            on_new_leader: None,
        }
    }

    /// Called with the holder's identity whenever the observed holder changes (ourselves
    /// included, before `on_started_leading`).
    pub fn on_new_leader(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_new_leader = Some(Box::new(f));
        self
    }
}

impl std::fmt::Debug for LeaderCallbacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderCallbacks")
            .field("on_new_leader", &self.on_new_leader.is_some())
            .finish_non_exhaustive()
    }
}

/// A point-in-time copy of the elector's health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionHealth {
    /// The identity of this candidate.
    pub identity: String,
    /// The Lease's holder as last observed (`None`: none, released, or not read yet).
    pub holder: Option<String>,
    /// Whether this candidate leads now (renew deadline checked).
    pub is_leader: bool,
    /// What the elector is doing.
    pub phase: ElectionPhase,
    /// The Lease's `leaseTransitions` as last observed.
    pub transitions: Option<i32>,
    /// Times this candidate became leader.
    pub acquisitions: u64,
    /// Successful renews while leading.
    pub renewals: u64,
    /// Lost races (409 on CREATE or PUT): optimistic concurrency at work, not errors.
    pub conflicts: u64,
    /// Failed requests other than lost races.
    pub failures: u64,
    /// The last failure other than a lost race, with when it was seen.
    pub last_error: Option<(SystemTime, String)>,
    /// When the last successful acquire or renew was sent.
    pub last_renew: Option<SystemTime>,
}

/// The elector's health, readable from any thread without locks (atomics and `arc-swap`).
#[derive(Clone, Debug)]
pub struct LeaderElectionStatus {
    inner: Arc<StatusInner>,
}

#[derive(Debug)]
struct StatusInner {
    /// Nanoseconds after [`epoch`] until which we lead; 0: not leading.
    leading_until: AtomicU64,
    snapshot: ArcSwap<LeaderElectionHealth>,
}

/// The instant `leading_until` counts from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl LeaderElectionStatus {
    fn new(identity: &str) -> Self {
        LeaderElectionStatus {
            inner: Arc::new(StatusInner {
                leading_until: AtomicU64::new(0),
                snapshot: ArcSwap::from_pointee(LeaderElectionHealth {
                    identity: identity.to_string(),
                    holder: None,
                    is_leader: false,
                    phase: ElectionPhase::Following,
                    transitions: None,
                    acquisitions: 0,
                    renewals: 0,
                    conflicts: 0,
                    failures: 0,
                    last_error: None,
                    last_renew: None,
                }),
            }),
        }
    }

    /// Whether this candidate leads now: it acquired or renewed the lease and its renew
    /// deadline has not passed (checked here, not only by the elector's task).
    pub fn is_leader(&self) -> bool {
        let until = self.inner.leading_until.load(Ordering::Acquire);
        until != 0 && Instant::now() < epoch() + Duration::from_nanos(until)
    }

    /// The Lease's holder as last observed.
    pub fn holder(&self) -> Option<String> {
        self.inner.snapshot.load().holder.clone()
    }

    /// The Lease's `leaseTransitions` as last observed.
    pub fn transitions(&self) -> Option<i32> {
        self.inner.snapshot.load().transitions
    }

    /// A copy of the whole health.
    pub fn health(&self) -> LeaderElectionHealth {
        let mut h = LeaderElectionHealth::clone(&self.inner.snapshot.load());
        h.is_leader = self.is_leader();
        h
    }

    /// Publishes the machine's state (after every step of the driver).
    fn publish(&self, m: &LeaderElectionMachine, last_error: &Option<(SystemTime, String)>) {
        let until = m
            .leading_until()
            .map(|u| {
                let nanos = u.saturating_duration_since(epoch()).as_nanos();
                u64::try_from(nanos).unwrap_or(u64::MAX).max(1)
            })
            .unwrap_or(0);
        self.inner.leading_until.store(until, Ordering::Release);
        let now = Instant::now();
        let stats = m.stats();
        self.inner.snapshot.store(Arc::new(LeaderElectionHealth {
            identity: m.config().identity.clone(),
            holder: m.holder().map(str::to_string),
            is_leader: m.is_leader(now),
            phase: m.phase(),
            transitions: m.lease_transitions(),
            acquisitions: stats.acquisitions,
            renewals: stats.renewals,
            conflicts: stats.conflicts,
            failures: stats.failures,
            last_error: last_error.clone(),
            last_renew: stats
                .last_renew
                .map(|t| SystemTime::now() - now.saturating_duration_since(t)),
        }));
    }
}

/// A configured candidate: [`run`](Self::run) / [`run_until`](Self::run_until) it on the
/// caller's task, or [`start`](Self::start) it as an actor.
pub struct LeaderElector {
    machine: LeaderElectionMachine,
    api: Api<Lease>,
    callbacks: LeaderCallbacks,
    status: LeaderElectionStatus,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("config", self.machine.config())
            .finish_non_exhaustive()
    }
}

impl LeaderElector {
    /// A candidate for the Lease `config.lease_namespace/config.lease_name`; the config is
    /// validated as client-go's `NewLeaderElector` does.
    pub fn new(
        config: LeaderElectionConfig,
        client: Client,
        callbacks: LeaderCallbacks,
    ) -> Result<Self, LeaderElectionError> {
        let api = Api::namespaced(client, &config.lease_namespace);
        let status = LeaderElectionStatus::new(&config.identity);
        let machine = LeaderElectionMachine::new(config, rand::random())?;
        Ok(LeaderElector {
            machine,
            api,
            callbacks,
            status,
        })
    }

    /// The health handle (clone it before `run`/`start`).
    pub fn status(&self) -> LeaderElectionStatus {
        self.status.clone()
    }

    /// Competes for the lease forever, on the caller's task.
    pub async fn run(self) {
        self.run_until(std::future::pending()).await
    }

    /// Competes for the lease until `cancel` completes; then stops leading
    /// (`on_stopped_leading`), releases the lease if `release_on_cancel`, and returns.
    pub async fn run_until(self, cancel: impl Future<Output = ()>) {
        let release = self.machine.config().release_on_cancel;
        let cancel = async move {
            cancel.await;
            release
        };
        drive(self.machine, self.api, self.callbacks, self.status, cancel).await
    }

    /// Starts the elector as an actor on an arbiter (thread) of its own, in the current actix
    /// System or kinformer's background one: a busy application cannot delay its renews.
    pub fn start(self) -> Result<LeaderElectorHandle, LeaderElectionError> {
        if System::try_current().is_none() {
            // Arbiter::new registers with the thread's current System.
            System::set_current(runtime::system()?);
        }
        let arbiter = Arbiter::new();
        let status = self.status.clone();
        let (done_tx, done_rx) = watch::channel(false);
        let (cancel_tx, cancel_rx) = oneshot::channel::<bool>();
        let actor = LeaderElectorActor {
            release_on_cancel: self.machine.config().release_on_cancel,
            elector: Some(self),
            cancel: Some(cancel_tx),
            cancel_rx: Some(cancel_rx),
            done_tx: Some(done_tx),
            done: done_rx,
        };
        let addr = LeaderElectorActor::start_in_arbiter(&arbiter.handle(), move |_| actor);
        Ok(LeaderElectorHandle {
            addr,
            status,
            arbiter: Some(arbiter),
        })
    }
}

/// The actor that drives a [`LeaderElector`]; stop it with [`StopElection`] (or through its
/// [`LeaderElectorHandle`]).
pub struct LeaderElectorActor {
    elector: Option<LeaderElector>,
    release_on_cancel: bool,
    cancel: Option<oneshot::Sender<bool>>,
    cancel_rx: Option<oneshot::Receiver<bool>>,
    done_tx: Option<watch::Sender<bool>>,
    done: watch::Receiver<bool>,
}

impl Actor for LeaderElectorActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let (Some(e), Some(cancel_rx), Some(done_tx)) = (
            self.elector.take(),
            self.cancel_rx.take(),
            self.done_tx.take(),
        ) else {
            return;
        };
        let cancel = async move {
            // A dropped sender (the handle gone without stop) never cancels: the arbiter's
            // stop ends the task instead, like a crash.
            match cancel_rx.await {
                Ok(release) => release,
                Err(_) => std::future::pending().await,
            }
        };
        let fut = drive(e.machine, e.api, e.callbacks, e.status, cancel);
        ctx.spawn(fut.into_actor(self).map(move |(), _, ctx| {
            let _ = done_tx.send(true);
            ctx.stop();
        }));
    }
}

/// Stops the elector: stop leading (`on_stopped_leading`), release the lease if asked, and
/// answer once done.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopElection {
    /// Release the lease; `None`: as `release_on_cancel` says.
    pub release: Option<bool>,
}

impl Handler<StopElection> for LeaderElectorActor {
    type Result = actix::ResponseFuture<()>;

    fn handle(&mut self, msg: StopElection, _ctx: &mut Context<Self>) -> Self::Result {
        if let Some(cancel) = self.cancel.take() {
            let release = msg.release.unwrap_or(self.release_on_cancel);
            let _ = cancel.send(release);
        }
        let mut done = self.done.clone();
        Box::pin(async move {
            let _ = done.wait_for(|d| *d).await;
        })
    }
}

/// A started elector: its health, and how to stop it.
#[derive(Debug)]
pub struct LeaderElectorHandle {
    addr: Addr<LeaderElectorActor>,
    status: LeaderElectionStatus,
    arbiter: Option<Arbiter>,
}

impl LeaderElectorHandle {
    /// The lock-free health handle.
    pub fn status(&self) -> &LeaderElectionStatus {
        &self.status
    }

    /// Whether this candidate leads now.
    pub fn is_leader(&self) -> bool {
        self.status.is_leader()
    }

    /// The actor's address.
    pub fn addr(&self) -> &Addr<LeaderElectorActor> {
        &self.addr
    }

    /// Stops: `on_stopped_leading` if leading, the lease released if `release_on_cancel`;
    /// returns once done and the elector's thread has ended.
    pub async fn stop(self) -> Result<(), LeaderElectionError> {
        self.shutdown(None).await
    }

    /// Stops and releases the lease (if we hold it) whatever `release_on_cancel` says, so
    /// another candidate takes over on its next retry.
    pub async fn release(self) -> Result<(), LeaderElectionError> {
        self.shutdown(Some(true)).await
    }

    async fn shutdown(mut self, release: Option<bool>) -> Result<(), LeaderElectionError> {
        let sent = self.addr.send(StopElection { release }).await;
        if let Some(a) = self.arbiter.take() {
            a.stop();
            runtime::join_arbiters(vec![a]).await;
        }
        sent.map_err(|_| LeaderElectionError::Gone)
    }
}

impl Drop for LeaderElectorHandle {
    fn drop(&mut self) {
        if let Some(a) = self.arbiter.take() {
            a.stop();
        }
    }
}

/// One answer of the API server, classified for the machine.
enum Answer {
    Get(Result<Option<Lease>, LeaseError>),
    Write(Result<Lease, LeaseError>),
}

/// The driver: the machine's requests to kube, its timers, its events to the callbacks.
async fn drive(
    mut m: LeaderElectionMachine,
    api: Api<Lease>,
    callbacks: LeaderCallbacks,
    status: LeaderElectionStatus,
    cancel: impl Future<Output = bool>,
) {
    let name = m.config().name.clone();
    let lease = m.config().lease_name.clone();
    tracing::info!(target: TARGET, name = %name, identity = %m.config().identity, "attempting to acquire leader lease");
    let mut cancel = std::pin::pin!(cancel);
    let mut cancelled = false;
    let mut last_error = None;
    loop {
        while let Some(e) = m.poll_event() {
            status.publish(&m, &last_error);
            match e {
                ElectionEvent::NewLeader(who) => {
                    tracing::info!(target: TARGET, name = %name, leader = %who, "new leader");
                    if let Some(f) = &callbacks.on_new_leader {
                        f(&who);
                    }
                }
                ElectionEvent::StartedLeading => {
                    tracing::info!(target: TARGET, name = %name, "successfully acquired lease");
                    (callbacks.on_started_leading)();
                }
                ElectionEvent::StoppedLeading(reason) => {
                    tracing::info!(target: TARGET, name = %name, ?reason, "stopped leading");
                    (callbacks.on_stopped_leading)();
                }
                ElectionEvent::AttemptFailed(err) => {
                    if err.is_lost_race() {
                        tracing::debug!(target: TARGET, name = %name, error = %err, "lost a race for the lease");
                    } else {
                        tracing::warn!(target: TARGET, name = %name, error = %err, "lease request failed");
                        last_error = Some((SystemTime::now(), err.to_string()));
                    }
                }
                ElectionEvent::Released => {
                    tracing::info!(target: TARGET, name = %name, "released the lease");
                }
            }
        }
        status.publish(&m, &last_error);
        if m.is_stopped() {
            return;
        }
        if let Some(request) = m.poll_request(Instant::now()) {
            let deadline = m.poll_timeout();
            let call = perform(api.clone(), lease.clone(), request);
            tokio::select! {
                answer = until(deadline, call) => match answer {
                    Some(Answer::Get(r)) => m.handle_get(Instant::now(), r),
                    Some(Answer::Write(r)) => m.handle_write_result(Instant::now(), r),
                    None => m.handle_timeout(Instant::now()),
                },
                release = &mut cancel, if !cancelled => {
                    cancelled = true;
                    m.handle_cancel_with(Instant::now(), release);
                }
            }
            continue;
        }
        let wake = m.poll_timeout();
        tokio::select! {
            () = sleep(wake) => m.handle_timeout(Instant::now()),
            release = &mut cancel, if !cancelled => {
                cancelled = true;
                m.handle_cancel_with(Instant::now(), release);
            }
        }
    }
}

/// `fut`'s output, or `None` at `deadline`.
pub(super) async fn until<T>(deadline: Option<Instant>, fut: impl Future<Output = T>) -> Option<T> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d.into(), fut).await.ok(),
        None => Some(fut.await),
    }
}

pub(super) async fn sleep(wake: Option<Instant>) {
    match wake {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        // Nothing scheduled (cannot happen while running): yield rather than spin.
        None => tokio::time::sleep(Duration::from_millis(10)).await,
    }
}

/// The wall clock as a MicroTime (for `renewTime`/`acquireTime`).
pub(super) fn wall_now() -> MicroTime {
    let micros = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    MicroTime(Timestamp::from_microsecond(micros).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Sends one request on kinformer's I/O runtime (its connections outlive this task); the
/// request is aborted if this future is dropped at its deadline.
async fn perform(api: Api<Lease>, name: String, request: LeaseRequest) -> Answer {
    match request {
        LeaseRequest::Get => Answer::Get(
            on_io(async move { api.get_opt(&name).await })
                .await
                .map_err(classify),
        ),
        LeaseRequest::Create(w) => {
            let lease = w.into_lease(wall_now());
            Answer::Write(
                on_io(async move { api.create(&PostParams::default(), &lease).await })
                    .await
                    .map_err(classify),
            )
        }
        LeaseRequest::Update(w) => {
            let lease = w.into_lease(wall_now());
            Answer::Write(
                on_io(async move { api.replace(&name, &PostParams::default(), &lease).await })
                    .await
                    .map_err(classify),
            )
        }
    }
}

/// Runs `fut` on the I/O runtime, aborting it when dropped.
pub(super) async fn on_io<T: Send + 'static>(
    fut: impl Future<Output = Result<T, kube::Error>> + Send + 'static,
) -> Result<T, kube::Error> {
    struct AbortOnDrop(tokio::task::AbortHandle);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    match runtime::io() {
        Some(h) => {
            let task = h.spawn(fut);
            let _guard = AbortOnDrop(task.abort_handle());
            task.await.map_err(|e| kube::Error::Service(Box::new(e)))?
        }
        None => fut.await,
    }
}

/// kube's error as the machine sees it: a 409 is a lost race, not a failure.
pub(super) fn classify(e: kube::Error) -> LeaseError {
    match e {
        kube::Error::Api(s) if s.is_already_exists() => LeaseError::AlreadyExists(s.message),
        kube::Error::Api(s) if s.is_conflict() => LeaseError::Conflict(s.message),
        kube::Error::Api(s) if s.is_not_found() => LeaseError::NotFound(s.message),
        kube::Error::Api(s) => LeaseError::Api {
            code: s.code,
            message: s.message,
        },
        other => LeaseError::Transport(other.to_string()),
    }
}
