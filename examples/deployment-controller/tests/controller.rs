//! The deployment controller, used as a crate, against the simulated API server: create, scale,
//! roll out (RollingUpdate and Recreate), delete, malformed input, injected 409s and watch
//! failures, with the embedded cluster simulation running what the sim does not.
//!
//! Every wait is on a condition with a deadline; nothing sleeps to synchronise.

// The workspace's shared integration-test helpers (sim start, waits with deadlines).
#[path = "../../../tests/common/mod.rs"]
mod common;

use std::{
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use common::{DEADLINE, eventually, fast_config, watching};
use deployment_controller::{
    controller::{ControllerOptions, DeploymentController},
    embedded::{
        cluster::{ClusterOptions, ClusterSim},
        demo,
    },
    reconcile as sync,
};
use k8s_openapi::{
    api::{
        apps::v1::{Deployment, ReplicaSet},
        core::v1::Pod,
    },
    apimachinery::pkg::util::intstr::IntOrString,
};
use kinformer::notification::Notification;
use kinformer_actors::{SharedIndexInformer, handler_fn};
use kinformer_sim::{Sim, Verb};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};

const NS: &str = "apps";

struct Env {
    sim: Sim,
    client: Client,
    controller: DeploymentController,
    cluster: ClusterSim,
}

async fn env() -> Env {
    env_with(true).await
}

/// A sim, the cluster simulation (pods Ready at once) and the controller (2 workers, fast
/// reflector restarts), started and synced.
async fn env_with(garbage_collect: bool) -> Env {
    let sim = common::sim().await;
    let client = sim.client();
    // Its own client (own connection pool), as a separate process would have.
    let cluster_client = Client::try_from(sim.kube_config()).expect("client");
    let cluster = ClusterSim::start(
        cluster_client,
        ClusterOptions {
            ready_after: Duration::ZERO,
            workers: 2,
            garbage_collect,
            informer: fast_config(),
        },
    )
    .await
    .expect("cluster simulation starts");
    let controller = DeploymentController::new(
        client.clone(),
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
    Env {
        sim,
        client,
        controller,
        cluster,
    }
}

/// Polls an async condition every 10 ms; panics after `DEADLINE`.
async fn until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    kinformer_sim::wait_until_async(DEADLINE, || {
        let f = cond();
        async move {
            let ok = f.await;
            if !ok {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            ok
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for: {what}"));
}

impl Env {
    fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn create(&self, d: &Deployment) -> Deployment {
        self.deployments()
            .create(&PostParams::default(), d)
            .await
            .expect("create deployment")
    }

    async fn get(&self, name: &str) -> Deployment {
        self.deployments().get(name).await.expect("get deployment")
    }

    /// The server's ReplicaSets controlled by `uid`, oldest first.
    async fn replica_sets_of(&self, uid: &str) -> Vec<ReplicaSet> {
        let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), NS);
        let mut rss: Vec<ReplicaSet> = api
            .list(&ListParams::default())
            .await
            .expect("list replicasets")
            .items
            .into_iter()
            .filter(|rs| sync::is_controlled_by(&rs.metadata, uid))
            .collect();
        rss.sort_by_key(|rs| {
            rs.annotations()
                .get(sync::REVISION_ANNOTATION)
                .and_then(|r| r.parse::<i64>().ok())
        });
        rss
    }

    async fn pods_of(&self, rs: &ReplicaSet) -> Vec<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        let uid = rs.uid().unwrap_or_default();
        api.list(&ListParams::default())
            .await
            .expect("list pods")
            .items
            .into_iter()
            .filter(|p| sync::is_controlled_by(&p.metadata, &uid))
            .collect()
    }

    /// Server-side convergence: `generation` observed, rollout complete, one active ReplicaSet
    /// (none for 0 replicas) with exactly its pods.
    async fn converged(&self, name: &str, generation: i64) -> bool {
        let Ok(d) = self.deployments().get(name).await else {
            return false;
        };
        if d.metadata.generation.unwrap_or(0) < generation || !sync::rollout_complete(&d) {
            return false;
        }
        let rss = self.replica_sets_of(&d.uid().unwrap_or_default()).await;
        let active: Vec<&ReplicaSet> = rss.iter().filter(|rs| sync::rs_replicas(rs) > 0).collect();
        match active.as_slice() {
            [] => sync::deployment_replicas(&d) == 0,
            [rs] => self.pods_of(rs).await.len() as i32 == sync::deployment_replicas(&d),
            _ => false,
        }
    }

    async fn wait_converged(&self, name: &str, generation: i64) -> Deployment {
        until(
            &format!("{name} converges at generation {generation}"),
            || self.converged(name, generation),
        )
        .await;
        self.get(name).await
    }

    async fn stop(self) {
        self.controller.shutdown().await;
        self.cluster.shutdown().await;
        self.sim.shutdown().await;
    }
}

/// Asserts the converged shape of a Deployment on the server: its status, and its one active
/// ReplicaSet's name, hash, selector, template, replicas, owner and pods. Returns that ReplicaSet.
async fn assert_converged_shape(
    env: &Env,
    d: &Deployment,
    replicas: i32,
    image: &str,
) -> ReplicaSet {
    let name = d.name_any();
    let s = d.status.clone().expect("status");
    assert_eq!(
        s.observed_generation, d.metadata.generation,
        "{name}: observedGeneration"
    );
    assert_eq!(
        (
            s.replicas,
            s.updated_replicas,
            s.ready_replicas,
            s.available_replicas
        ),
        (
            Some(replicas),
            Some(replicas),
            Some(replicas),
            Some(replicas)
        ),
        "{name}: status counts"
    );
    assert_eq!(s.unavailable_replicas, Some(0));
    let cond = |t: &str| {
        s.conditions
            .as_ref()
            .and_then(|cs| cs.iter().find(|c| c.type_.as_deref() == Some(t)))
            .map(|c| {
                (
                    c.status.clone().unwrap_or_default(),
                    c.reason.clone().unwrap_or_default(),
                )
            })
    };
    assert_eq!(
        cond("Available"),
        Some(("True".into(), "MinimumReplicasAvailable".into()))
    );
    assert_eq!(
        cond("Progressing"),
        Some(("True".into(), "NewReplicaSetAvailable".into()))
    );

    let spec = d.spec.clone();
    assert_eq!(
        spec.template
            .spec
            .as_ref()
            .and_then(|p| p.containers[0].image.as_deref()),
        Some(image)
    );
    let hash = sync::compute_hash(&spec.template, s.collision_count);
    let uid = d.uid().expect("uid");
    let rss = env.replica_sets_of(&uid).await;
    let new: Vec<&ReplicaSet> = rss
        .iter()
        .filter(|rs| rs.name_any() == format!("{name}-{hash}"))
        .collect();
    assert_eq!(
        new.len(),
        1,
        "{name}: the new ReplicaSet is {name}-{hash}: {rss:?}"
    );
    let rs = new[0].clone();
    for other in rss.iter().filter(|o| o.name_any() != rs.name_any()) {
        assert_eq!(
            sync::rs_replicas(other),
            0,
            "old ReplicaSet {} scaled to 0",
            other.name_any()
        );
    }
    let rs_spec = rs.spec.clone();
    assert_eq!(rs_spec.replicas, Some(replicas));
    let sel = rs_spec.selector.match_labels.clone().expect("selector");
    assert_eq!(sel.get(sync::POD_TEMPLATE_HASH_LABEL), Some(&hash));
    assert_eq!(sel.get("app"), Some(&name));
    let tl = rs_spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .expect("template labels");
    assert_eq!(tl.get(sync::POD_TEMPLATE_HASH_LABEL), Some(&hash));
    assert_eq!(
        rs.labels(),
        &tl,
        "ReplicaSet labels = template labels + hash"
    );
    assert!(sync::equal_ignore_hash(
        rs_spec.template.as_ref().expect("template"),
        &spec.template
    ));
    let owner = sync::controller_of(&rs.metadata).expect("controller ownerReference");
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str()
        ),
        ("apps/v1", "Deployment", name.as_str(), uid.as_str())
    );
    assert_eq!(owner.block_owner_deletion, Some(true));
    assert_eq!(env.pods_of(&rs).await.len() as i32, replicas);
    rs
}

fn revision(rs: &ReplicaSet) -> Option<String> {
    rs.annotations().get(sync::REVISION_ANNOTATION).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_makes_one_owned_replica_set_and_the_status_converges() {
    let env = env().await;
    assert_eq!(
        env.controller.factory().len(),
        3,
        "one informer (one watch) per kind"
    );
    let legacy = env
        .create(&demo::deployment("legacy", 1, "legacy:1", None, false))
        .await;
    env.create(&demo::deployment("web", 3, "nginx:1", None, true))
        .await;
    let d = env.wait_converged("web", 1).await;
    let rs = assert_converged_shape(&env, &d, 3, "nginx:1").await;
    assert_eq!(revision(&rs).as_deref(), Some("1"));
    assert_eq!(
        env.replica_sets_of(&d.uid().unwrap_or_default())
            .await
            .len(),
        1
    );

    // The Deployment without the managed label is not ours: no ReplicaSet, no status written.
    assert!(
        env.replica_sets_of(&legacy.uid().unwrap_or_default())
            .await
            .is_empty()
    );
    let status = env.get("legacy").await.status.unwrap_or_default();
    assert_eq!(status, Default::default(), "status never written");
    assert!(
        env.controller.deployments().get(NS, "legacy").is_none(),
        "not even cached"
    );
    let s = env.controller.stats();
    assert_eq!((s.rs_created, s.errors, s.dropped), (1, 0, 0), "{s:?}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_up_and_down_resizes_the_same_replica_set() {
    let env = env().await;
    env.create(&demo::deployment("web", 2, "nginx:1", None, true))
        .await;
    let d = env.wait_converged("web", 1).await;
    let first = assert_converged_shape(&env, &d, 2, "nginx:1").await;

    let g = demo::scale(&env.client, NS, "web", 5).await.expect("scale");
    let d = env.wait_converged("web", g).await;
    let rs = assert_converged_shape(&env, &d, 5, "nginx:1").await;
    assert_eq!(rs.uid(), first.uid(), "same ReplicaSet");
    assert_eq!(
        rs.annotations()
            .get(sync::DESIRED_REPLICAS_ANNOTATION)
            .map(String::as_str),
        Some("5")
    );

    let g = demo::scale(&env.client, NS, "web", 1).await.expect("scale");
    let d = env.wait_converged("web", g).await;
    let rs = assert_converged_shape(&env, &d, 1, "nginx:1").await;
    assert_eq!(rs.uid(), first.uid(), "same ReplicaSet");

    let g = demo::scale(&env.client, NS, "web", 0).await.expect("scale");
    let d = env.wait_converged("web", g).await;
    let rs = assert_converged_shape(&env, &d, 0, "nginx:1").await;
    assert_eq!(rs.uid(), first.uid(), "scaled to zero, not deleted");
    assert_eq!(
        env.replica_sets_of(&d.uid().unwrap_or_default())
            .await
            .len(),
        1
    );
    env.stop().await;
}

/// Watches a Deployment's ReplicaSets from a separate informer and records, at every change,
/// the total spec replicas and the total available replicas across them.
struct RolloutWatch {
    informer: SharedIndexInformer<ReplicaSet>,
    max_spec: Arc<Mutex<i32>>,
    min_available: Arc<Mutex<i32>>,
    violations: Arc<Mutex<Vec<String>>>,
}

async fn watch_rollout(
    env: &Env,
    uid: &str,
    on_new: impl Fn(&ReplicaSet, &kinformer::store::Lister<ReplicaSet>) -> Option<String>
    + Send
    + 'static,
) -> RolloutWatch {
    let informer =
        SharedIndexInformer::<ReplicaSet>::with_config(env.client.clone(), Some(NS), fast_config());
    let (max_spec, min_available, violations) = (
        Arc::new(Mutex::new(0)),
        Arc::new(Mutex::new(i32::MAX)),
        Arc::new(Mutex::new(Vec::new())),
    );
    let lister = informer.lister();
    let (ms, ma, v, uid) = (
        max_spec.clone(),
        min_available.clone(),
        violations.clone(),
        uid.to_string(),
    );
    informer
        .add_event_handler(handler_fn(move |n: &Notification<ReplicaSet>| {
            let mine: Vec<_> = lister
                .list()
                .into_iter()
                .filter(|rs| sync::is_controlled_by(&rs.metadata, &uid))
                .collect();
            let spec: i32 = mine.iter().map(|rs| sync::rs_replicas(rs)).sum();
            let available: i32 = mine
                .iter()
                .map(|rs| {
                    rs.status
                        .as_ref()
                        .and_then(|s| s.available_replicas)
                        .unwrap_or(0)
                })
                .sum();
            let mut m = ms.lock().unwrap();
            *m = (*m).max(spec);
            let mut a = ma.lock().unwrap();
            *a = (*a).min(available);
            if let Notification::Add {
                obj,
                is_in_initial_list: false,
            } = n
                && sync::is_controlled_by(&obj.metadata, &uid)
                && let Some(problem) = on_new(obj, &lister)
            {
                v.lock().unwrap().push(problem);
            }
        }))
        .await
        .expect("handler");
    informer.start().expect("start");
    tokio::time::timeout(DEADLINE, informer.wait_for_sync())
        .await
        .expect("synced");
    RolloutWatch {
        informer,
        max_spec,
        min_available,
        violations,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_update_replaces_the_replica_set_within_surge_and_unavailability() {
    let env = env().await;
    let strategy = demo::rolling(IntOrString::Int(1), IntOrString::Int(0));
    env.create(&demo::deployment("api", 3, "api:1", strategy, true))
        .await;
    let d = env.wait_converged("api", 1).await;
    let old = assert_converged_shape(&env, &d, 3, "api:1").await;
    let uid = d.uid().expect("uid");
    let watch = watch_rollout(&env, &uid, |_, _| None).await;

    let g = demo::set_image(&env.client, NS, "api", "api:2")
        .await
        .expect("set image");
    let d = env.wait_converged("api", g).await;
    let new = assert_converged_shape(&env, &d, 3, "api:2").await;
    assert_ne!(
        new.name_any(),
        old.name_any(),
        "a new hash, a new ReplicaSet"
    );
    let rss = env.replica_sets_of(&uid).await;
    assert_eq!(rss.len(), 2, "the old one is kept (revision history)");
    assert_eq!(rss[0].uid(), old.uid());
    assert_eq!(sync::rs_replicas(&rss[0]), 0);
    assert_eq!(revision(&rss[0]).as_deref(), Some("1"));
    assert_eq!(revision(&rss[1]).as_deref(), Some("2"));
    // maxSurge 1: never more than 4 pods asked for; maxUnavailable 0: never fewer than 3
    // available, in every state of the ReplicaSets this test's own informer saw.
    assert!(
        *watch.max_spec.lock().unwrap() <= 4,
        "surge exceeded: {}",
        watch.max_spec.lock().unwrap()
    );
    assert!(
        *watch.max_spec.lock().unwrap() >= 4,
        "the rollout did surge"
    );
    assert!(
        *watch.min_available.lock().unwrap() >= 3,
        "availability dropped to {}",
        watch.min_available.lock().unwrap()
    );
    watch.informer.shutdown().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_scales_old_to_zero_before_the_new_replica_set_appears() {
    let env = env().await;
    env.create(&demo::deployment(
        "worker",
        2,
        "worker:1",
        demo::recreate(),
        true,
    ))
    .await;
    let d = env.wait_converged("worker", 1).await;
    let old = assert_converged_shape(&env, &d, 2, "worker:1").await;
    let old_name = old.name_any();
    let seen_new = Arc::new(Mutex::new(false));
    let seen = seen_new.clone();
    // When the new ReplicaSet first appears, the old one must already be at 0, with no pods.
    let watch = watch_rollout(&env, &d.uid().expect("uid"), move |new, lister| {
        *seen.lock().unwrap() = true;
        let old = lister.get(NS, &old_name)?;
        let status = old.status.as_ref().map_or(0, |s| s.replicas);
        (sync::rs_replicas(&old) != 0 || status != 0).then(|| {
            format!(
                "{} appeared while {old_name} had spec {} / status {status}",
                new.name_any(),
                sync::rs_replicas(&old)
            )
        })
    })
    .await;

    let g = demo::set_image(&env.client, NS, "worker", "worker:2")
        .await
        .expect("set image");
    let d = env.wait_converged("worker", g).await;
    assert_converged_shape(&env, &d, 2, "worker:2").await;
    eventually("the watch saw the new ReplicaSet", || {
        *seen_new.lock().unwrap()
    })
    .await;
    assert!(
        watch.violations.lock().unwrap().is_empty(),
        "{:?}",
        watch.violations.lock().unwrap()
    );
    assert_eq!(
        *watch.max_spec.lock().unwrap(),
        2,
        "Recreate never runs old and new together"
    );
    watch.informer.shutdown().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_deployment_leaves_its_replica_sets_to_the_garbage_collector() {
    let env = env_with(false).await;
    env.create(&demo::deployment("web", 2, "nginx:1", None, true))
        .await;
    let d = env.wait_converged("web", 1).await;
    let rs = assert_converged_shape(&env, &d, 2, "nginx:1").await;
    env.deployments()
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("the controller reconciled the deleted key", || {
        env.controller.stats().gone >= 1
    })
    .await;
    let left = env.replica_sets_of(&d.uid().unwrap_or_default()).await;
    assert_eq!(
        left.len(),
        1,
        "the ReplicaSet is the garbage collector's, not ours"
    );
    assert_eq!((left[0].uid(), sync::rs_replicas(&left[0])), (rs.uid(), 2));
    let s = env.controller.stats();
    assert_eq!((s.rs_deleted, s.errors), (0, 0), "{s:?}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_garbage_collector_simulation_removes_what_a_deleted_deployment_owned() {
    let env = env().await;
    env.create(&demo::deployment("web", 2, "nginx:1", None, true))
        .await;
    let d = env.wait_converged("web", 1).await;
    let rs = assert_converged_shape(&env, &d, 2, "nginx:1").await;
    env.deployments()
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    until("ReplicaSet and pods collected", || async {
        env.replica_sets_of(&d.uid().unwrap_or_default())
            .await
            .is_empty()
            && env.pods_of(&rs).await.is_empty()
    })
    .await;
    assert_eq!(env.controller.stats().rs_deleted, 0);
    assert!(env.cluster.stats().rs_collected >= 1);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_409_on_status_or_scale_is_retried() {
    let env = env().await;
    env.sim
        .faults()
        .fail_next(Some("deployments/status"), Verb::Update, 1, 409, 0);
    env.create(&demo::deployment("web", 2, "nginx:1", None, true))
        .await;
    let d = env.wait_converged("web", 1).await;
    assert_converged_shape(&env, &d, 2, "nginx:1").await;
    assert_eq!(
        env.sim.faults().counters().others_failed,
        1,
        "the 409 was served"
    );
    assert!(env.controller.stats().conflicts >= 1);

    env.sim
        .faults()
        .fail_next(Some("replicasets"), Verb::Update, 1, 409, 0);
    let g = demo::scale(&env.client, NS, "web", 4).await.expect("scale");
    let d = env.wait_converged("web", g).await;
    assert_converged_shape(&env, &d, 4, "nginx:1").await;
    assert_eq!(
        env.sim.faults().counters().others_failed,
        2,
        "the scale's 409 was served"
    );
    let s = env.controller.stats();
    assert!(s.conflicts >= 2, "{s:?}");
    assert!(
        s.requeues >= 2,
        "conflicts are requeued rate-limited: {s:?}"
    );
    assert_eq!((s.errors, s.dropped), (0, 0), "{s:?}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_write_is_never_overwritten() {
    // A writer races the controller on the ReplicaSet. The controller's update carries the
    // resourceVersion it cached: if its copy predates the other write the server answers 409
    // and the retry works from the newer object; either way the other write survives.
    let env = env().await;
    env.create(&demo::deployment("web", 2, "nginx:1", None, true))
        .await;
    let d = env.wait_converged("web", 1).await;
    let rs = assert_converged_shape(&env, &d, 2, "nginx:1").await;
    let rs_api: Api<ReplicaSet> = Api::namespaced(env.client.clone(), NS);
    // Hold the controller's scale back with injected 409s while someone else writes the
    // ReplicaSet, so its cached copy is stale when it retries.
    env.sim
        .faults()
        .fail_next(Some("replicasets"), Verb::Update, 1, 409, 0);
    let g = demo::scale(&env.client, NS, "web", 3).await.expect("scale");
    let patch = serde_json::json!({"metadata": {"annotations": {"touched-by": "someone-else"}}});
    rs_api
        .patch(
            &rs.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("concurrent write");
    let d = env.wait_converged("web", g).await;
    let rs = assert_converged_shape(&env, &d, 3, "nginx:1").await;
    assert_eq!(
        rs.annotations().get("touched-by").map(String::as_str),
        Some("someone-else"),
        "the other writer's change survived (no blind overwrite)"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_failures_do_not_lose_a_reconcile() {
    let env = env().await;
    env.create(&demo::deployment("web", 2, "nginx:1", None, true))
        .await;
    env.wait_converged("web", 1).await;
    watching(&env.sim).await;
    // Cut every watch and fail the next reconnects; change the Deployment meanwhile.
    env.sim.faults().fail_next_watches(3, 500);
    env.sim.faults().drop_watches();
    let g = demo::scale(&env.client, NS, "web", 4).await.expect("scale");
    let d = env.wait_converged("web", g).await;
    assert_converged_shape(&env, &d, 4, "nginx:1").await;
    let c = env.sim.faults().counters();
    assert!(c.watches_dropped >= 1, "{c:?}");
    eventually("the failing re-watches were served", || {
        env.sim.faults().counters().watches_failed == 3
    })
    .await;
    let s = env.controller.stats();
    assert_eq!((s.errors, s.dropped), (0, 0), "{s:?}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_deployment_is_skipped_until_fixed() {
    let env = env().await;
    // The selector does not select the template's labels (API validation would refuse it;
    // the sim does not validate).
    let mut bad = demo::deployment("bad", 2, "bad:1", None, true);
    bad.spec.selector.match_labels = Some([("app".to_string(), "other".to_string())].into());
    let bad = env.create(&bad).await;
    env.create(&demo::deployment("web", 1, "nginx:1", None, true))
        .await;
    env.wait_converged("web", 1).await;
    eventually("the malformed Deployment was seen and skipped", || {
        env.controller.stats().invalid >= 1
    })
    .await;
    assert!(
        env.replica_sets_of(&bad.uid().unwrap_or_default())
            .await
            .is_empty()
    );
    let status = env.get("bad").await.status.unwrap_or_default();
    assert_eq!(status, Default::default(), "status never written");

    // Fixed: it is reconciled like any other.
    let patch = serde_json::json!({"spec": {"selector": {"matchLabels": {"app": "bad"}}}});
    let fixed = env
        .deployments()
        .patch("bad", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("fix");
    let d = env
        .wait_converged("bad", fixed.metadata.generation.unwrap_or(0))
        .await;
    assert_converged_shape(&env, &d, 2, "bad:1").await;
    env.stop().await;
}
