//! Record, replay, compare (issue 21, "Replay"): the deployment controller runs a short
//! scenario on an embedded sim with the trace sink on and bodies opted in; the trace is then
//! replayed (`kinformer_trace::replay`, what `kinformer-trace replay` does) into a fresh sim with
//! a fresh controller, and the two runs' writes are compared.
//!
//! What is replayed: the Deployments only (`--kinds Deployment`), at the recorded pace. They are
//! the scenario's inputs: the user's creates, scale and image changes. The ReplicaSets and Pods
//! come from the controller itself and from the embedded cluster simulation (the ReplicaSet
//! controller, the kubelet's readiness), which runs fresh beside the fresh controller, as the
//! rest of a cluster would; replaying them as well would hand the fresh controller the recorded
//! one's ReplicaSets. The recorded controller's own Deployment writes (its status, its revision
//! annotations) are left out by `replay` itself, from the trace's `write` lines (T7); the test,
//! which knows the controller is the only writer of those fields, checks that none is left in
//! the plan. So the status compared below is the fresh controller's, not a played copy of the
//! recorded one's.
//!
//! What is compared, once the fresh controller has converged: for every Deployment, the
//! ReplicaSets it controls (name — which holds the pod-template hash —, `spec.replicas`, image,
//! revision annotation) and its status counts (replicas, updated, ready, available). The names
//! and revisions say the fresh controller made the same rollouts in the same order (a missed
//! step would leave out a ReplicaSet or shift a revision), the replicas and counts that it ended
//! on the same scale; uids, resourceVersions, generations and timestamps differ by nature and
//! are left out. The unlabelled Deployment shows on both sides with no ReplicaSet.
//!
//! Every wait is on a condition with a deadline; the only sleeps are the replay's recorded gaps.

use crate::common;

use std::{collections::BTreeMap, time::Duration};

use crate::common::{DEADLINE, fast_config};
use deployment_controller::{
    controller::{ControllerOptions, DeploymentController},
    embedded::{
        cluster::{ClusterOptions, ClusterSim},
        demo,
    },
    reconcile as sync,
};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kinformer_actors::trace::{TraceSink, TraceSinkConfig};
use kinformer_sim::Sim;
use kinformer_trace::replay::{Pace, PlannedEvent, Player, RecordedType, Recording, ReplayOptions};
use kube::{Api, Client, ResourceExt, api::ListParams};
use serde_json::Value;

const NS: &str = demo::NAMESPACE;

/// A ReplicaSet as the comparison sees it: name, `spec.replicas`, image, revision.
type RsView = (String, i32, String, String);

/// A Deployment's part of the comparison: its ReplicaSets (by name) and its status counts
/// (replicas, updated, ready, available).
#[derive(Debug, PartialEq, Eq)]
struct Writes {
    replica_sets: Vec<RsView>,
    status: [i32; 4],
}

/// The controller's writes as the server holds them, by Deployment name.
async fn writes(client: &Client) -> BTreeMap<String, Writes> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    let rss = replica_sets
        .list(&ListParams::default())
        .await
        .expect("list replicasets")
        .items;
    let mut out = BTreeMap::new();
    for d in deployments
        .list(&ListParams::default())
        .await
        .expect("list deployments")
    {
        let uid = d.uid().unwrap_or_default();
        let mut owned: Vec<RsView> = rss
            .iter()
            .filter(|rs| sync::is_controlled_by(&rs.metadata, &uid))
            .map(|rs| {
                let image = rs
                    .spec
                    .template
                    .as_ref()
                    .and_then(|t| t.spec.as_ref())
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.image.clone())
                    .unwrap_or_default();
                let revision = rs
                    .annotations()
                    .get(sync::REVISION_ANNOTATION)
                    .cloned()
                    .unwrap_or_default();
                (rs.name_any(), sync::rs_replicas(rs), image, revision)
            })
            .collect();
        owned.sort();
        let s = d.status.clone().unwrap_or_default();
        let status = [
            s.replicas.unwrap_or(0),
            s.updated_replicas.unwrap_or(0),
            s.ready_replicas.unwrap_or(0),
            s.available_replicas.unwrap_or(0),
        ];
        out.insert(
            d.name_any(),
            Writes {
                replica_sets: owned,
                status,
            },
        );
    }
    out
}

/// A Deployment without its status, server fields and the controller's annotations: what the
/// scenario (the user) writes.
fn user_part(d: &Value) -> Value {
    let mut d = d.clone();
    if let Some(o) = d.as_object_mut() {
        o.remove("status");
    }
    if let Some(meta) = d.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["resourceVersion", "generation", "managedFields"] {
            meta.remove(k);
        }
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.retain(|k, _| !k.starts_with("deployment.kubernetes.io/"));
            if a.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    d
}

/// A Deployment event that changed only what the deployment controller writes: one of the
/// recorded controller's own writes.
fn controllers_write(p: &PlannedEvent) -> bool {
    let (Some(before), Some(after)) = (p.previous.as_deref(), p.event.body.as_deref()) else {
        return false;
    };
    p.event.kind == "Deployment"
        && p.event.what == RecordedType::Modified
        && user_part(before) == user_part(after)
}

/// The cluster simulation (pods Ready at once) and the controller on `sim`, started and synced.
async fn start(sim: &Sim) -> (ClusterSim, DeploymentController) {
    let cluster = ClusterSim::start(
        Client::try_from(sim.kube_config()).expect("client"),
        ClusterOptions {
            ready_after: Duration::ZERO,
            workers: 2,
            garbage_collect: true,
            informer: fast_config(),
        },
    )
    .await
    .expect("cluster simulation starts");
    let controller = DeploymentController::new(
        sim.client(),
        ControllerOptions {
            workers: 2,
            informer: fast_config(),
            sync_timeout: DEADLINE,
            ..ControllerOptions::default()
        },
    )
    .await
    .expect("controller builds");
    controller.start().await.expect("controller starts");
    (cluster, controller)
}

/// Waits until the controller's caches show `name` converged at the server's generation.
async fn converged(client: &Client, controller: &DeploymentController, name: &str) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let generation = api
        .get(name)
        .await
        .expect("get deployment")
        .metadata
        .generation
        .unwrap_or(0);
    let (d, r) = (controller.deployments(), controller.replica_sets());
    common::eventually(&format!("{name} converged at {generation}"), || {
        demo::converged(&d, &r, NS, name, generation)
    })
    .await;
}

/// Create web (RollingUpdate), api (Recreate) and an unlabelled one; scale web; change api's
/// image; change web's image. Each step waits until the controller converged.
async fn scenario(client: &Client, controller: &DeploymentController) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    for d in [
        demo::deployment("web", 2, "nginx:1.27", None, true),
        demo::deployment("api", 1, "api:1.0", demo::recreate(), true),
        demo::deployment("legacy", 1, "legacy:0.9", None, false),
    ] {
        api.create(&Default::default(), &d)
            .await
            .expect("create deployment");
    }
    converged(client, controller, "web").await;
    converged(client, controller, "api").await;
    demo::scale(client, NS, "web", 4).await.expect("scale web");
    converged(client, controller, "web").await;
    demo::set_image(client, NS, "api", "api:2.0")
        .await
        .expect("api image");
    converged(client, controller, "api").await;
    demo::set_image(client, NS, "web", "nginx:1.28")
        .await
        .expect("web image");
    converged(client, controller, "web").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_recording_leads_a_fresh_controller_to_the_same_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("recording.jsonl");

    // Record. The sink is process-wide: it is closed before the replay starts.
    let sink = TraceSink::start_with(
        &path,
        TraceSinkConfig {
            bodies: true,
            ..TraceSinkConfig::default()
        },
    )
    .expect("trace sink starts");
    let sim = common::sim().await;
    let (cluster, controller) = start(&sim).await;
    scenario(&sim.client(), &controller).await;
    let recorded = writes(&sim.client()).await;
    controller.shutdown().await;
    cluster.shutdown().await;
    let stats = sink.close().expect("trace sink closes");
    assert_eq!(stats.dropped, 0, "the recording lost records");
    sim.shutdown().await;
    assert_eq!(
        recorded.keys().collect::<Vec<_>>(),
        ["api", "legacy", "web"]
    );
    assert_eq!(
        recorded["web"].replica_sets.len(),
        2,
        "web rolled out twice: {recorded:?}"
    );

    // Replay the inputs into a fresh sim, a fresh cluster simulation and a fresh controller.
    let recording = Recording::open(&path).expect("the recording reads");
    let mut plan = recording.plan(&ReplayOptions {
        kinds: vec!["Deployment".into()],
        ..ReplayOptions::default()
    });
    // The sink is process-wide: the scenarios that run beside this test in the same binary
    // (the ring and the sharded controllers, in namespaces of their own) were recorded too.
    // This scenario is its namespace's.
    plan.seed.retain(|p| p.event.ns == NS);
    plan.events.retain(|p| p.event.ns == NS);
    // The controller records its writes (T6), so `replay` itself leaves them out (T7); the
    // test's own judgement of what the controller wrote checks that none is left, and that
    // what is left is the scenario's three creates, one scale and two image changes.
    assert!(
        !recording.writes.is_empty(),
        "the recording holds the controller's write lines"
    );
    assert!(plan.skipped.own_writes > 0);
    let own: Vec<_> = plan
        .events
        .iter()
        .filter(|p| controllers_write(p))
        .collect();
    assert!(own.is_empty(), "own writes left in the plan: {own:?}");
    let left: Vec<_> = plan
        .events
        .iter()
        .map(|p| (p.event.what, p.event.name.as_str()))
        .collect();
    assert_eq!(left.len(), 6, "{left:?}");
    assert!(
        plan.events
            .iter()
            .any(|e| e.event.name == "web" && e.event.body.is_some()),
        "the recording holds web's events with bodies"
    );
    let sim = common::sim().await;
    let player = Player::new(&sim).await.expect("player");
    let seeded = player.seed(&plan);
    assert!(
        seeded.failed.is_empty(),
        "seed failures: {:?}",
        seeded.failed
    );
    let (cluster, controller) = start(&sim).await;
    let report = player.play(&plan, Pace::Recorded { speed: 1.0 }).await;
    assert!(
        report.failed.is_empty(),
        "replay failures: {:?}",
        report.failed
    );
    assert!(
        report.created >= 3,
        "the three Deployments were created: {report}"
    );

    let client = sim.client();
    for name in ["web", "api"] {
        converged(&client, &controller, name).await;
    }
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let replayed = loop {
        let now = writes(&client).await;
        if now == recorded || tokio::time::Instant::now() >= deadline {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    controller.shutdown().await;
    cluster.shutdown().await;
    sim.shutdown().await;
    assert_eq!(replayed, recorded);
}
