//! Leader election for the deployment controller, wired as kube-controller-manager wires it
//! (`leaderElectAndRun`): every replica starts its informers at once, so a new leader has warm
//! caches, but only the holder of the Lease (`coordination.k8s.io/v1`, semantics L1–L4) runs the
//! workers that write. Losing the lease ends the run with [`LeaderError::LostLease`], and the
//! binary exits non-zero at once, as client-go's `OnStoppedLeading` does (`klog.Fatalf`): a
//! controller that was not leading for a while must not carry on from its stale view, and a
//! fresh process rejoins as a candidate.
//!
//! One addition to upstream: the controller's kube `Client` is *write-gated*. Every request
//! other than GET/HEAD/OPTIONS first checks [`LeaderElectionStatus::is_leader`] (which checks the
//! renew deadline itself, L2) and fails with [`NotLeading`] when this replica does not lead.
//! Upstream relies on the process exiting; the gate also covers the moments between losing the
//! lease and that exit (a worker in the middle of a reconcile, keys still queued), and it is what
//! lets two instances share one process in the tests. Reads (the informers' lists and watches)
//! are never gated. The elector uses its own, ungated client.
//!
//! ```no_run
//! use deployment_controller::{controller::ControllerOptions, leader::{self, LeaderElected}};
//! use kinformer_actors::LeaderElectionConfig;
//! # async fn demo(client: kube::Client) -> Result<(), leader::LeaderError> {
//! let election = LeaderElectionConfig::new(
//!     "kube-system",
//!     leader::DEFAULT_LEASE_NAME,
//!     leader::default_identity(),
//! );
//! let run = LeaderElected::start(client, ControllerOptions::default(), election).await?;
//! run.run_until(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```

use std::{
    future::Future,
    pin::pin,
    task::{Context, Poll},
    time::Duration,
};

use futures::future::BoxFuture;
use http::{Method, Request, Response};
use kinformer_actors::{
    InformerError, LeaderCallbacks, LeaderElectionConfig, LeaderElectionError,
    LeaderElectionStatus, LeaderElector, LeaderElectorHandle,
};
use kube::{Client, client::Body};
use tokio::sync::mpsc;

use crate::controller::{ControllerOptions, DeploymentController};

/// The Lease's default name (the binary's `--leader-elect-resource-name`).
pub const DEFAULT_LEASE_NAME: &str = "kinformer-deployment-controller";

/// The Lease's default namespace against a real cluster (kube-controller-manager's).
pub const DEFAULT_LEASE_NAMESPACE: &str = "kube-system";

/// A write refused because this replica does not lead (see the module docs).
#[derive(Debug, Clone, thiserror::Error)]
#[error("not the leader: {method} {path} refused (leader election)")]
pub struct NotLeading {
    /// The refused request's method.
    pub method: Method,
    /// The refused request's path.
    pub path: String,
}

/// Why a leader-elected run ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The elector could not start or stop (invalid config, actor gone).
    #[error(transparent)]
    Election(#[from] LeaderElectionError),
    /// The informers could not start.
    #[error("starting the informers: {0}")]
    Informers(#[from] InformerError),
    /// Building or starting the controller failed (cache sync timeout, handler registration).
    #[error("starting the controller: {0}")]
    Controller(#[source] crate::controller::ControllerError),
    /// This replica led and stopped leading (renew deadline passed, or another holder): the
    /// process must exit (client-go's `OnStoppedLeading`). The controller's writes are already
    /// refused and its queue shut down.
    #[error("leader election lost: {identity} no longer holds the lease {namespace}/{name}")]
    LostLease {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// This replica's identity.
        identity: String,
    },
    /// The elector stopped on its own (its actor is gone) before the run ended.
    #[error("the leader elector stopped unexpectedly")]
    ElectorGone,
}

/// How a run that ended without error went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSummary {
    /// Whether this replica led at some point (and ran the workers).
    pub led: bool,
}

/// A candidate identity as kube-controller-manager makes one: `hostname + "_" + UUID` (the
/// UUID keeps two replicas on one host apart, and a restarted process apart from its past self).
pub fn default_identity() -> String {
    let host = hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}_{}", uuid_v4())
}

/// A random (version 4, RFC 9562) UUID in its usual text form.
fn uuid_v4() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// A kube client service that refuses writes while `status` says this replica does not lead.
#[derive(Clone)]
struct WriteGate {
    inner: Client,
    status: LeaderElectionStatus,
}

impl tower::Service<Request<Body>> for WriteGate {
    type Response = Response<Body>;
    type Error = tower::BoxError;
    type Future = BoxFuture<'static, Result<Response<Body>, tower::BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // `Client::send` drives the inner service's readiness itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let read = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        if !read && !self.status.is_leader() {
            let refused = NotLeading {
                method: req.method().clone(),
                path: req.uri().path().to_string(),
            };
            tracing::warn!(error = %refused, "write refused");
            return Box::pin(std::future::ready(Err(refused.into())));
        }
        let client = self.inner.clone();
        Box::pin(async move { client.send(req).await.map_err(Into::into) })
    }
}

/// `client`, with its writes refused unless `status` says this replica leads.
pub fn write_gated(client: Client, status: LeaderElectionStatus) -> Client {
    let ns = client.default_namespace().to_string();
    Client::new(
        WriteGate {
            inner: client,
            status,
        },
        ns,
    )
}

/// What the elector's callbacks report to the run.
#[derive(Debug)]
enum Event {
    NewLeader(String),
    Started,
    Stopped,
}

/// A deployment controller under leader election: informers running, workers only while
/// leading. Start it with [`start`](Self::start), drive it with [`run_until`](Self::run_until).
pub struct LeaderElected {
    controller: DeploymentController,
    elector: LeaderElectorHandle,
    events: mpsc::UnboundedReceiver<Event>,
    config: LeaderElectionConfig,
}

impl LeaderElected {
    /// Builds the controller on a write-gated clone of `client`, starts its informers, and
    /// starts the elector (on its own actor thread, with its own clone of `client`). The workers
    /// start in [`run_until`](Self::run_until) once this replica leads.
    pub async fn start(
        client: Client,
        options: ControllerOptions,
        election: LeaderElectionConfig,
    ) -> Result<Self, LeaderError> {
        let (tx, events) = mpsc::unbounded_channel();
        let (t1, t2, t3) = (tx.clone(), tx.clone(), tx);
        let callbacks = LeaderCallbacks::new(
            move || {
                let _ = t1.send(Event::Started);
            },
            move || {
                let _ = t2.send(Event::Stopped);
            },
        )
        .on_new_leader(move |who| {
            let _ = t3.send(Event::NewLeader(who.to_string()));
        });
        let elector = LeaderElector::new(election.clone(), client.clone(), callbacks)?;
        let gated = write_gated(client, elector.status());
        let controller = DeploymentController::new(gated, options)
            .await
            .map_err(LeaderError::Controller)?;
        // Warm caches on every replica (the events queue up; nobody works them off until a
        // replica leads).
        controller.factory().start()?;
        let elector = elector.start()?;
        tracing::info!(identity = %election.identity, lease = %format!("{}/{}", election.lease_namespace, election.lease_name),
            "leader election: candidate started; attempting to acquire the lease");
        Ok(LeaderElected {
            controller,
            elector,
            events,
            config: election,
        })
    }

    /// The controller (its listers, stats and queue); its workers run only while leading.
    pub fn controller(&self) -> &DeploymentController {
        &self.controller
    }

    /// The elector's health (holder, transitions, whether this replica leads).
    pub fn status(&self) -> &LeaderElectionStatus {
        self.elector.status()
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    fn lost(&self) -> LeaderError {
        LeaderError::LostLease {
            namespace: self.config.lease_namespace.clone(),
            name: self.config.lease_name.clone(),
            identity: self.config.identity.clone(),
        }
    }

    fn log_new_leader(&self, who: &str) {
        if who == self.config.identity {
            tracing::info!(identity = %who, "leader election: this replica is the new leader");
        } else {
            tracing::info!(leader = %who, "leader election: new leader elected");
        }
    }

    /// Competes for the lease until `shutdown` completes; runs the workers while leading.
    ///
    /// - `shutdown` first: the controller stops gracefully (queue drained while the writes are
    ///   still allowed), then the elector stops, releasing the lease if
    ///   `release_on_cancel` (safe here: nothing it guards runs any more), so another replica
    ///   takes over on its next retry instead of after the lease duration.
    /// - Lost lease first: the queue is shut down, writes are refused from that instant
    ///   (the gate), and [`LeaderError::LostLease`] is returned at once, without draining or
    ///   stopping the informers: the caller exits the process (or, in a test, shuts the
    ///   controller down itself).
    pub async fn run_until(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<RunSummary, LeaderError> {
        let mut shutdown = pin!(shutdown);
        // Following: wait to lead.
        loop {
            tokio::select! {
                ev = self.events.recv() => match ev {
                    Some(Event::Started) => break,
                    Some(Event::NewLeader(who)) => self.log_new_leader(&who),
                    Some(Event::Stopped) => {}
                    None => return Err(LeaderError::ElectorGone),
                },
                () = &mut shutdown => {
                    self.controller.shutdown().await;
                    self.elector.stop().await?;
                    return Ok(RunSummary { led: false });
                }
            }
        }
        tracing::info!(identity = %self.config.identity, "leader election: started leading; starting the workers");
        // Leading: the workers (the caches are warm, so this is quick).
        {
            let controller = self.controller.clone();
            let start = controller.start();
            let mut start = pin!(start);
            loop {
                tokio::select! {
                    r = &mut start => {
                        r.map_err(LeaderError::Controller)?;
                        break;
                    }
                    ev = self.events.recv() => match ev {
                        Some(Event::Stopped) | None => return Err(self.stop_acting()),
                        Some(Event::NewLeader(who)) => self.log_new_leader(&who),
                        Some(Event::Started) => {}
                    },
                    () = &mut shutdown => return self.step_down().await,
                }
            }
        }
        loop {
            tokio::select! {
                ev = self.events.recv() => match ev {
                    Some(Event::Stopped) | None => return Err(self.stop_acting()),
                    Some(Event::NewLeader(who)) => self.log_new_leader(&who),
                    Some(Event::Started) => {}
                },
                () = &mut shutdown => return self.step_down().await,
            }
        }
    }

    /// Lost the lease: stop taking keys; the gate already refuses writes.
    fn stop_acting(&self) -> LeaderError {
        self.controller.queue().shut_down();
        let e = self.lost();
        tracing::error!(error = %e, "leader election lost");
        e
    }

    /// Shutdown while leading: stop the workers (drained while still leading), then the elector.
    async fn step_down(self) -> Result<RunSummary, LeaderError> {
        tracing::info!("shutting down: stopping the workers, then the leader elector");
        self.controller.shutdown().await;
        self.elector.stop().await?;
        Ok(RunSummary { led: true })
    }
}

/// Parses a duration as the binary's flags take it: seconds (`15`, `0.5`) or humantime
/// (`15s`, `1m30s`, `300ms`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.trim().parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"));
    }
    humantime::parse_duration(s.trim()).map_err(|e| format!("{s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_host_underscore_uuid_and_unique() {
        let a = default_identity();
        let b = default_identity();
        assert_ne!(a, b);
        let (host, uuid) = a.rsplit_once('_').unwrap_or(("", ""));
        assert!(!host.is_empty(), "{a}");
        assert_eq!(uuid.len(), 36, "{a}");
        assert_eq!(uuid.as_bytes()[14], b'4', "version 4: {a}");
        assert!(
            matches!(uuid.as_bytes()[19], b'8' | b'9' | b'a' | b'b'),
            "{a}"
        );
    }

    #[test]
    fn durations_in_seconds_or_humantime() {
        assert_eq!(parse_duration("15"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("0.3"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("300ms"), Ok(Duration::from_millis(300)));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
