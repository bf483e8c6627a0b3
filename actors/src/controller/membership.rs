//! A replica's membership in a sharded controller's ring: the core's
//! [`MembershipMachine`] driven over `kube::Api<Lease>`, publishing into a [`ShardOwnership`].
//!
//! The protocol (Leases, member states, the ring, drains, claims, validity; docs/semantics.md
//! H1–H11) is `kinformer::membership`. This module moves the machine's requests to the API
//! server (LIST with the ring's label selector, CREATE, PUT with the `resourceVersion`), bounds
//! each by the machine's deadline, collects the controller's drain acks
//! ([`ShardOwnership::ack_drained`]) and its last write ([`ShardOwnership::record_write`]), and
//! publishes every change of the machine's view into the [`ShardOwnership`] the controller reads.
//!
//! ```no_run
//! use kinformer::{membership::MembershipConfig, shard::ShardField};
//! use kinformer_actors::ShardMember;
//! # async fn demo(client: kube::Client) -> Result<(), kinformer_actors::ShardMemberError> {
//! let config = MembershipConfig::new("default", "my-controller", "replica-a", ShardField::Namespace);
//! let member = ShardMember::new(config, client)?;
//! let ownership = member.ownership(); // give it to the workqueue, workers and informers
//! let handle = member.start()?;
//! # let _ = ownership;
//! // ... on shutdown: drain (the controller acks), hand everything over, release the Lease.
//! handle.stop().await?;
//! # Ok(()) }
//! ```
//!
//! Dropping a [`ShardMemberHandle`] without [`stop`](ShardMemberHandle::stop) ends the member
//! like a crashed process: nothing drained or released; the others take its Lease over after
//! twice its duration.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, Arbiter, AsyncContext, Context, Handler, Message,
    System, WrapFuture,
};
use arc_swap::ArcSwap;
use k8s_openapi::api::coordination::v1::Lease;
use kinformer::{
    leader_election::LeaseError,
    membership::{
        MemberEvent, MemberRequest, MemberStatus, MembershipConfig, MembershipConfigError,
        MembershipMachine,
    },
    shard::ShardSelector,
};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use tokio::sync::{oneshot, watch};

use super::{
    leader_election::{classify, on_io, sleep, wall_now},
    ownership::{OwnershipView, ShardOwnership},
};
use crate::{error::InformerError, runtime};

/// The `tracing` target of the member's logs.
const TARGET: &str = "kinformer::membership";

/// How long [`ShardMemberHandle::stop`] waits for the controller's drain acks by default.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a member could not start or stop.
#[derive(Debug, thiserror::Error)]
pub enum ShardMemberError {
    /// The config cannot work.
    #[error(transparent)]
    Config(#[from] MembershipConfigError),
    /// No actix System could be joined or started.
    #[error(transparent)]
    Runtime(#[from] InformerError),
    /// The member's actor is gone.
    #[error("the shard member has stopped")]
    Gone,
}

/// A point-in-time copy of the member's health, for telemetry.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardMemberHealth {
    /// This replica's identity.
    pub identity: String,
    /// Whether it holds its Lease.
    pub joined: bool,
    /// The other members as last observed, with their states.
    pub members: Vec<MemberStatus>,
    /// The ranges held.
    pub held: ShardSelector,
    /// The fraction of the hash space held.
    pub held_fraction: f64,
    /// Ranges received from other members.
    pub handovers: u64,
    /// Drains completed.
    pub drains: u64,
    /// When the last drain completed.
    pub last_drain: Option<SystemTime>,
    /// Members declared Dead by this replica.
    pub takeovers: u64,
    /// Times its own Lease was lost.
    pub lost_leases: u64,
    /// 409s (optimistic concurrency at work).
    pub conflicts: u64,
    /// Other failed requests.
    pub failures: u64,
    /// The last failure other than a 409, with when it was seen.
    pub last_error: Option<(SystemTime, String)>,
    /// Whether the member has stopped.
    pub stopped: bool,
}

/// The member's health, readable from any thread without locks.
#[derive(Clone, Debug)]
pub struct ShardMemberStatus {
    inner: Arc<ArcSwap<ShardMemberHealth>>,
}

impl ShardMemberStatus {
    fn new(config: &MembershipConfig) -> Self {
        ShardMemberStatus {
            inner: Arc::new(ArcSwap::from_pointee(ShardMemberHealth {
                identity: config.identity.clone(),
                joined: false,
                members: Vec::new(),
                held: ShardSelector::nothing(config.field),
                held_fraction: 0.0,
                handovers: 0,
                drains: 0,
                last_drain: None,
                takeovers: 0,
                lost_leases: 0,
                conflicts: 0,
                failures: 0,
                last_error: None,
                stopped: false,
            })),
        }
    }

    /// A copy of the whole health.
    pub fn health(&self) -> ShardMemberHealth {
        ShardMemberHealth::clone(&self.inner.load())
    }

    fn publish(&self, m: &MembershipMachine, last_error: &Option<(SystemTime, String)>) {
        let now = Instant::now();
        let stats = m.stats();
        self.inner.store(Arc::new(ShardMemberHealth {
            identity: m.config().identity.clone(),
            joined: m.is_joined(),
            members: m.members(now),
            held: m.held().clone(),
            held_fraction: m.held().fraction(),
            handovers: stats.handovers,
            drains: stats.drains,
            last_drain: stats
                .last_drain
                .map(|t| SystemTime::now() - now.saturating_duration_since(t)),
            takeovers: stats.takeovers,
            lost_leases: stats.lost_leases,
            conflicts: stats.conflicts,
            failures: stats.failures,
            last_error: last_error.clone(),
            stopped: m.is_stopped(),
        }));
    }
}

/// How a member stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopMode {
    /// Drain everything (waiting up to this long for the controller's acks), then release the
    /// Lease so the others claim at once (H11).
    Release(Duration),
    /// Stop at once, nothing released: the others take over after the Lease expires.
    Abandon,
}

/// A configured member: [`run_until`](Self::run_until) it on the caller's task, or
/// [`start`](Self::start) it as an actor.
pub struct ShardMember {
    machine: MembershipMachine,
    api: Api<Lease>,
    ownership: ShardOwnership,
    status: ShardMemberStatus,
}

impl std::fmt::Debug for ShardMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardMember")
            .field("config", self.machine.config())
            .finish_non_exhaustive()
    }
}

impl ShardMember {
    /// A member of `config.ring` in `config.namespace`; its ownership starts empty.
    pub fn new(config: MembershipConfig, client: Client) -> Result<Self, ShardMemberError> {
        let ownership = ShardOwnership::fixed(ShardSelector::nothing(config.field));
        Self::with_ownership(config, client, ownership)
    }

    /// A member that publishes into `ownership` (its field must be the config's). The first
    /// publication replaces whatever it held.
    pub fn with_ownership(
        config: MembershipConfig,
        client: Client,
        ownership: ShardOwnership,
    ) -> Result<Self, ShardMemberError> {
        let api = Api::namespaced(client, &config.namespace);
        let status = ShardMemberStatus::new(&config);
        let machine = MembershipMachine::new(config, rand::random())?;
        let member = ShardMember {
            machine,
            api,
            ownership,
            status,
        };
        publish_view(&member.machine, &member.ownership);
        Ok(member)
    }

    /// The ownership handle the controller reads.
    pub fn ownership(&self) -> ShardOwnership {
        self.ownership.clone()
    }

    /// The health handle.
    pub fn status(&self) -> ShardMemberStatus {
        self.status.clone()
    }

    /// Runs until `stop` completes with how to stop; returns once stopped.
    pub async fn run_until(self, stop: impl Future<Output = StopMode>) {
        drive(self.machine, self.api, self.ownership, self.status, stop).await
    }

    /// Starts the member as an actor on an arbiter (thread) of its own, in the current actix
    /// System or kinformer's background one: a busy application cannot delay its renews.
    pub fn start(self) -> Result<ShardMemberHandle, ShardMemberError> {
        if System::try_current().is_none() {
            System::set_current(runtime::system()?);
        }
        let arbiter = Arbiter::new();
        let status = self.status.clone();
        let ownership = self.ownership.clone();
        let (done_tx, done_rx) = watch::channel(false);
        let (stop_tx, stop_rx) = oneshot::channel::<StopMode>();
        let actor = ShardMemberActor {
            member: Some(self),
            stop: Some(stop_tx),
            stop_rx: Some(stop_rx),
            done_tx: Some(done_tx),
            done: done_rx,
        };
        let addr = ShardMemberActor::start_in_arbiter(&arbiter.handle(), move |_| actor);
        Ok(ShardMemberHandle {
            addr,
            status,
            ownership,
            arbiter: Some(arbiter),
        })
    }
}

/// The actor that drives a [`ShardMember`]; stop it with [`StopMember`].
pub struct ShardMemberActor {
    member: Option<ShardMember>,
    stop: Option<oneshot::Sender<StopMode>>,
    stop_rx: Option<oneshot::Receiver<StopMode>>,
    done_tx: Option<watch::Sender<bool>>,
    done: watch::Receiver<bool>,
}

impl Actor for ShardMemberActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let (Some(m), Some(stop_rx), Some(done_tx)) =
            (self.member.take(), self.stop_rx.take(), self.done_tx.take())
        else {
            return;
        };
        let stop = async move {
            // A dropped sender (the handle gone without stop) never stops the loop: the
            // arbiter's stop ends the task instead, like a crash.
            match stop_rx.await {
                Ok(mode) => mode,
                Err(_) => std::future::pending().await,
            }
        };
        let fut = drive(m.machine, m.api, m.ownership, m.status, stop);
        ctx.spawn(fut.into_actor(self).map(move |(), _, ctx| {
            let _ = done_tx.send(true);
            ctx.stop();
        }));
    }
}

/// Stops the member as `mode` says, answering once done.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopMember(pub StopMode);

impl Handler<StopMember> for ShardMemberActor {
    type Result = actix::ResponseFuture<()>;

    fn handle(&mut self, msg: StopMember, _ctx: &mut Context<Self>) -> Self::Result {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(msg.0);
        }
        let mut done = self.done.clone();
        Box::pin(async move {
            let _ = done.wait_for(|d| *d).await;
        })
    }
}

/// A started member: its ownership, health, and how to stop it.
#[derive(Debug)]
pub struct ShardMemberHandle {
    addr: Addr<ShardMemberActor>,
    status: ShardMemberStatus,
    ownership: ShardOwnership,
    arbiter: Option<Arbiter>,
}

impl ShardMemberHandle {
    /// The ownership handle the controller reads.
    pub fn ownership(&self) -> &ShardOwnership {
        &self.ownership
    }

    /// The health handle.
    pub fn status(&self) -> &ShardMemberStatus {
        &self.status
    }

    /// The actor's address.
    pub fn addr(&self) -> &Addr<ShardMemberActor> {
        &self.addr
    }

    /// Leaves the ring: drains everything (waiting up to [`DEFAULT_DRAIN_TIMEOUT`] for the
    /// controller's acks), releases the Lease; returns once done.
    pub async fn stop(self) -> Result<(), ShardMemberError> {
        self.shutdown(StopMode::Release(DEFAULT_DRAIN_TIMEOUT))
            .await
    }

    /// Stops as `mode` says.
    pub async fn shutdown(mut self, mode: StopMode) -> Result<(), ShardMemberError> {
        let sent = self.addr.send(StopMember(mode)).await;
        if let Some(a) = self.arbiter.take() {
            a.stop();
            runtime::join_arbiters(vec![a]).await;
        }
        sent.map_err(|_| ShardMemberError::Gone)
    }
}

impl Drop for ShardMemberHandle {
    fn drop(&mut self) {
        if let Some(a) = self.arbiter.take() {
            a.stop();
        }
    }
}

/// One answer of the API server, classified for the machine.
enum Answer {
    List(Result<Vec<Lease>, LeaseError>),
    Write(Box<Result<Lease, LeaseError>>),
}

type Call = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// The machine's view into the ownership handle, when it changed.
fn publish_view(m: &MembershipMachine, ownership: &ShardOwnership) {
    let v = m.view();
    // Not valid: a deadline already past (None would mean "no deadline" to the readers).
    let valid_until = Some(v.valid_until.unwrap_or_else(Instant::now));
    let current = ownership.view();
    let same = current.held == v.held
        && current.wanted == v.wanted
        && current.draining == v.draining
        && current.handover == v.handover
        && (current.valid_until == valid_until
            || (v.valid_until.is_none()
                && current.valid_until.is_some_and(|t| t <= Instant::now())));
    if same {
        return;
    }
    ownership.publish(OwnershipView {
        held: v.held,
        wanted: v.wanted,
        draining: v.draining,
        handover: v.handover,
        valid_until,
        generation: 0,
    });
}

/// The driver: the machine's requests to kube, its timers, the controller's acks, the view out.
async fn drive(
    mut m: MembershipMachine,
    api: Api<Lease>,
    ownership: ShardOwnership,
    status: ShardMemberStatus,
    stop: impl Future<Output = StopMode>,
) {
    let ring = m.config().ring.clone();
    let selector = m.config().label_selector();
    tracing::info!(target: TARGET, ring = %ring, identity = %m.config().identity, "joining the ring");
    let mut stop = std::pin::pin!(stop);
    let mut stopping = false;
    let mut last_error = None;
    let mut call: Option<Call> = None;
    loop {
        let drained = ownership.take_drained();
        if !drained.is_empty() {
            m.handle_drained(Instant::now(), &drained);
        }
        m.set_last_write(ownership.last_write());
        while let Some(e) = m.poll_event() {
            log_event(&ring, &e, &mut last_error);
        }
        publish_view(&m, &ownership);
        status.publish(&m, &last_error);
        if m.is_stopped() {
            return;
        }
        if call.is_none()
            && let Some(mut request) = m.poll_request(Instant::now())
        {
            request.stamp(wall_now());
            call = Some(Box::pin(perform(api.clone(), selector.clone(), request)));
        }
        let wake = m.poll_timeout();
        tokio::select! {
            answer = async { call.as_mut().expect("guarded by the select's condition").await }, if call.is_some() => {
                call = None;
                match answer {
                    Answer::List(r) => m.handle_list(Instant::now(), r),
                    Answer::Write(r) => m.handle_write_result(Instant::now(), *r),
                }
            }
            () = sleep(wake) => {
                m.handle_timeout(Instant::now());
                if !m.awaiting_response() {
                    call = None; // abandoned at its deadline
                }
            }
            () = ownership.acked() => {}
            mode = &mut stop, if !stopping => {
                stopping = true;
                let now = Instant::now();
                match mode {
                    StopMode::Release(wait) => m.handle_cancel(now, true, now + wait),
                    StopMode::Abandon => m.handle_cancel(now, false, now),
                }
                tracing::info!(target: TARGET, ring = %ring, ?mode, "leaving the ring");
            }
        }
    }
}

fn log_event(ring: &str, e: &MemberEvent, last_error: &mut Option<(SystemTime, String)>) {
    match e {
        MemberEvent::Joined => tracing::info!(target: TARGET, ring, "joined"),
        MemberEvent::LostLease => {
            tracing::warn!(target: TARGET, ring, "own Lease taken over: dropped every range")
        }
        MemberEvent::TookOver(who) => {
            tracing::info!(target: TARGET, ring, member = %who, "declared a member dead")
        }
        MemberEvent::Claimed(r, rv) => {
            tracing::info!(target: TARGET, ring, range = %r, handover = ?rv, "claimed")
        }
        MemberEvent::DrainStarted(r) => {
            tracing::debug!(target: TARGET, ring, range = %r, "draining")
        }
        MemberEvent::Drained(r) => tracing::info!(target: TARGET, ring, range = %r, "handed over"),
        MemberEvent::Released => tracing::info!(target: TARGET, ring, "released the Lease"),
        MemberEvent::RequestFailed(err) if err.is_lost_race() => {
            tracing::debug!(target: TARGET, ring, error = %err, "lost a race")
        }
        MemberEvent::RequestFailed(err) => {
            tracing::warn!(target: TARGET, ring, error = %err, "lease request failed");
            *last_error = Some((SystemTime::now(), err.to_string()));
        }
    }
}

/// Sends one request on kinformer's I/O runtime.
async fn perform(api: Api<Lease>, selector: String, request: MemberRequest) -> Answer {
    match request {
        MemberRequest::List => {
            let lp = ListParams::default().labels(&selector);
            Answer::List(
                on_io(async move { api.list(&lp).await })
                    .await
                    .map(|l| l.items)
                    .map_err(classify),
            )
        }
        MemberRequest::Create(lease) => Answer::Write(Box::new(
            on_io(async move { api.create(&PostParams::default(), &lease).await })
                .await
                .map_err(classify),
        )),
        MemberRequest::Update(lease) | MemberRequest::TakeOver(lease) => {
            let name = lease.metadata.name.clone().unwrap_or_default();
            Answer::Write(Box::new(
                on_io(async move { api.replace(&name, &PostParams::default(), &lease).await })
                    .await
                    .map_err(classify),
            ))
        }
    }
}
