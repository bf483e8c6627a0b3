//! Two deployment-controller instances under leader election against one simulated API server
//! (with the cluster simulation), in one process: each with its own kube `Client`, as two
//! replicas would have. Exactly one leads; only the leader writes (its counters, the follower's
//! counters, and the sim's record of the writes); stopping the leader hands over within the
//! lease duration plus a retry period, and the new leader reconciles a change; a leader whose
//! Lease writes fail ends its run with `LostLease` and the other takes over.
//!
//! Short timings (lease 2 s, renew deadline 1.5 s, retry 0.3 s); every wait is on a condition
//! with a deadline.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::{DEADLINE, eventually, fast_config};
use deployment_controller::{
    controller::{ControllerOptions, DeploymentController},
    embedded::{
        cluster::{ClusterOptions, ClusterSim},
        demo,
    },
    leader::{LeaderElected, LeaderError, RunSummary},
};
use k8s_openapi::api::{apps::v1::Deployment, coordination::v1::Lease};
use kinformer_actors::{LeaderElectionConfig, LeaderElectionStatus};
use kinformer_sim::{Sim, Verb};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use tokio::{sync::oneshot, task::JoinHandle};

const NS: &str = "apps";
const LEASE_NS: &str = "kube-system";
const LEASE: &str = "dc-lease";
const LEASE_DURATION: Duration = Duration::from_secs(2);
const RENEW_DEADLINE: Duration = Duration::from_millis(1_500);
const RETRY_PERIOD: Duration = Duration::from_millis(300);
/// Scheduling and HTTP round trips on a busy 2-core machine.
const SLACK: Duration = Duration::from_millis(700);

struct Instance {
    id: &'static str,
    controller: DeploymentController,
    status: LeaderElectionStatus,
    stop: Option<oneshot::Sender<()>>,
    run: JoinHandle<Result<RunSummary, LeaderError>>,
}

async fn instance(sim: &Sim, id: &'static str) -> Instance {
    let client = Client::try_from(sim.kube_config()).expect("client");
    let mut election = LeaderElectionConfig::new(LEASE_NS, LEASE, id);
    election.lease_duration = LEASE_DURATION;
    election.renew_deadline = RENEW_DEADLINE;
    election.retry_period = RETRY_PERIOD;
    let elected = LeaderElected::start(
        client,
        ControllerOptions {
            workers: 2,
            informer: fast_config(),
            sync_timeout: DEADLINE,
            ..ControllerOptions::default()
        },
        election,
    )
    .await
    .expect("leader-elected controller starts");
    let controller = elected.controller().clone();
    let status = elected.status().clone();
    let (tx, rx) = oneshot::channel();
    let run = tokio::spawn(elected.run_until(async {
        let _ = rx.await;
    }));
    Instance {
        id,
        controller,
        status,
        stop: Some(tx),
        run,
    }
}

/// Writes a controller made through the API (ReplicaSets, Deployment status).
fn writes(c: &DeploymentController) -> u64 {
    let s = c.stats();
    s.rs_created + s.rs_scaled + s.rs_deleted + s.status_updates
}

async fn cluster(sim: &Sim) -> ClusterSim {
    ClusterSim::start(
        Client::try_from(sim.kube_config()).expect("client"),
        ClusterOptions {
            ready_after: Duration::ZERO,
            informer: fast_config(),
            ..ClusterOptions::default()
        },
    )
    .await
    .expect("cluster simulation starts")
}

async fn lease_holder(client: &Client) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(client.clone(), LEASE_NS);
    api.get_opt(LEASE)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

/// Waits until `d` observed its latest generation with `replicas` available.
async fn rolled_out(client: &Client, name: &str, replicas: i32) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + DEADLINE;
    loop {
        let d = api.get(name).await.expect("get deployment");
        let s = d.status.clone().unwrap_or_default();
        if s.observed_generation == d.metadata.generation
            && s.available_replicas == Some(replicas)
            && s.updated_replicas == Some(replicas)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} did not roll out to {replicas}: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_the_other_takes_over_when_it_stops() {
    let sim = common::sim().await;
    let client = sim.client();
    let cluster = cluster(&sim).await;
    let mut a = instance(&sim, "replica-a").await;
    let mut b = instance(&sim, "replica-b").await;

    eventually("one replica leads", || {
        a.status.is_leader() || b.status.is_leader()
    })
    .await;
    let (leader, follower) = if a.status.is_leader() {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert!(
        !follower.status.is_leader(),
        "both lead: {} and {}",
        leader.id,
        follower.id
    );
    assert_eq!(lease_holder(&client).await.as_deref(), Some(leader.id));

    sim.requests().reset();
    Api::<Deployment>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &demo::deployment("web", 2, "nginx:1.27", None, true),
        )
        .await
        .expect("create");
    rolled_out(&client, "web", 2).await;
    assert!(!follower.status.is_leader(), "{} leads too", follower.id);
    // Only the leader wrote: the follower reconciled nothing and never tried a write (its
    // workers never ran, the gate refused nothing either: no errors).
    let fs = follower.controller.stats();
    assert_eq!(
        (fs.syncs, writes(&follower.controller), fs.errors),
        (0, 0, 0),
        "the follower acted: {fs:?}"
    );
    assert!(writes(&leader.controller) > 0, "the leader wrote nothing");
    // The server saw the leader's writes and no more. A write still in flight is counted at
    // the server before the leader counts its answer, so the two are compared once they agree
    // (the leader's counters read after the server's), within the deadline.
    // (A create or status write that lost a race is counted at the server and in `conflicts`.)
    let accounted = || {
        let r = sim.requests();
        let ls = leader.controller.stats();
        let attempts = |ok: u64| ok + ls.conflicts + ls.errors;
        let creates = r.count("replicasets", Verb::Create);
        let status_writes = r.count("deployments/status", Verb::Update);
        let ok = creates >= ls.rs_created
            && creates <= attempts(ls.rs_created)
            && status_writes >= ls.status_updates
            && status_writes > 0
            && status_writes <= attempts(ls.status_updates);
        (
            ok,
            format!(
                "server: {creates} replica set creates, {status_writes} deployment status writes; leader: {ls:?}"
            ),
        )
    };
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (ok, detail) = accounted();
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "server writes beyond the leader's: {detail}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Stop the leader like a crash of its elector (no release): the follower takes over once
    // the lease expires.
    let leader_writes = writes(&leader.controller);
    let stopped = Instant::now();
    let _ = leader.stop.take().map(|tx| tx.send(()));
    let summary = (&mut leader.run)
        .await
        .expect("run task")
        .expect("leader's run ends cleanly");
    assert!(summary.led);
    eventually("the follower takes over", || follower.status.is_leader()).await;
    let took = stopped.elapsed();
    assert!(
        took <= LEASE_DURATION + RETRY_PERIOD.mul_f64(1.2) + SLACK,
        "hand-over took {took:?}"
    );
    assert_eq!(lease_holder(&client).await.as_deref(), Some(follower.id));

    // The new leader reconciles a change; the old one writes nothing more.
    Api::<Deployment>::namespaced(client.clone(), NS)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scale");
    rolled_out(&client, "web", 3).await;
    assert!(
        writes(&follower.controller) > 0,
        "the new leader wrote nothing"
    );
    assert_eq!(writes(&leader.controller), leader_writes);

    let _ = follower.stop.take().map(|tx| tx.send(()));
    let _ = (&mut follower.run).await;
    cluster.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_ends_its_run_with_lost_lease() {
    let sim = common::sim().await;
    let mut a = instance(&sim, "replica-a").await;
    eventually("a leads", || a.status.is_leader()).await;
    let mut b = instance(&sim, "replica-b").await;

    // Every Lease update fails: a cannot renew and steps down by its renew deadline.
    let failing = Instant::now();
    // (A 500, which kube's client does not retry; far more than a's renew attempts.)
    sim.faults()
        .fail_next(Some("leases"), Verb::Update, 1_000, 500, 0);
    let ended = tokio::time::timeout(DEADLINE, &mut a.run)
        .await
        .expect("a's run ends")
        .expect("run task");
    let took = failing.elapsed();
    assert!(
        matches!(ended, Err(LeaderError::LostLease { ref identity, .. }) if identity == "replica-a"),
        "{ended:?}"
    );
    assert!(
        took <= RENEW_DEADLINE + RETRY_PERIOD + SLACK,
        "stepped down after {took:?}"
    );
    assert!(!a.status.is_leader());
    assert!(!b.status.is_leader(), "b leads while updates fail");
    // The lost replica's queue is shut down: keys are not accepted any more.
    assert!(a.controller.queue().is_shutting_down());

    sim.faults().clear();
    eventually("b takes over", || b.status.is_leader()).await;
    a.controller.shutdown().await;
    let _ = b.stop.take().map(|tx| tx.send(()));
    let _ = (&mut b.run).await;
    sim.shutdown().await;
}
