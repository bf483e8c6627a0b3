//! The deployment controller, used as a crate, against the simulated API server: create, scale,
//! roll out (RollingUpdate and Recreate), delete, malformed input, injected 409s and watch
//! failures, with the embedded cluster simulation running what the sim does not.
//!
//! Every wait is on a condition with a deadline; nothing sleeps to synchronise.

use crate::common;

use std::{
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use crate::common::{DEADLINE, eventually, fast_config, watching};
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
use kinformer_actors::{CacheMode, InformerConfig, LeanConfig, SharedIndexInformer, handler_fn};
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

/// [`env`] with the controller's informers in the lean cache mode (I7: the server's bytes,
/// managedFields cut out; its key mappers read owners and labels without decoding).
async fn lean_env() -> Env {
    let lean = LeanConfig::default().strip_managed_fields(true);
    env_with_informer(true, fast_config().cache(CacheMode::Lean(lean))).await
}

/// A sim, the cluster simulation (pods Ready at once) and the controller (2 workers, fast
/// reflector restarts), started and synced.
async fn env_with(garbage_collect: bool) -> Env {
    env_with_informer(garbage_collect, fast_config()).await
}

async fn env_with_informer(garbage_collect: bool, informer: InformerConfig) -> Env {
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
            informer,
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

    /// Creates a `RollingUpdate` Deployment as the demo does and waits until it converged at
    /// generation 1.
    async fn create_converged(&self, name: &str, replicas: i32, image: &str) -> Deployment {
        self.create(&demo::deployment(name, replicas, image, None, true))
            .await;
        self.wait_converged(name, 1).await
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
            // The ReplicaSet's own status counts too: after a release the Deployment's status
            // still holds the counts of the ReplicaSet it had (a collision only raises
            // collisionCount), so a new ReplicaSet with its pods created but not yet available
            // would read as converged until the controller's next status write.
            [rs] => {
                let want = sync::deployment_replicas(&d);
                rs.status.as_ref().and_then(|s| s.available_replicas) == Some(want)
                    && self.pods_of(rs).await.len() as i32 == want
            }
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
    let d = env.create_converged("web", 3, "nginx:1").await;
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
    let d = env.create_converged("web", 2, "nginx:1").await;
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
    rolling_update(env().await).await;
}

/// The same rollout with the controller's informers in the lean mode (I7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_update_with_lean_informers() {
    rolling_update(lean_env().await).await;
}

async fn rolling_update(env: Env) {
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
    let d = env.create_converged("web", 2, "nginx:1").await;
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
    let d = env.create_converged("web", 2, "nginx:1").await;
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
    let d = env.create_converged("web", 2, "nginx:1").await;
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
    let d = env.create_converged("web", 2, "nginx:1").await;
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
    env.create_converged("web", 2, "nginx:1").await;
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
    // The selector does not select the template's labels: API validation refuses it, so it is
    // seeded through the sim's harness (as an older or buggy server might have stored it).
    let mut bad = demo::deployment("bad", 2, "bad:1", None, true);
    bad.spec.selector.match_labels = Some(
        [
            ("app".to_string(), "bad".to_string()),
            ("tier".to_string(), "x".to_string()),
        ]
        .into(),
    );
    bad.metadata.namespace = Some(NS.to_string());
    let refused = env.deployments().create(&PostParams::default(), &bad).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422),
        "the API refuses it: {refused:?}"
    );
    let bad: Deployment = serde_json::from_value(
        env.sim
            .create_object(
                "deployments.apps",
                Some(NS),
                serde_json::to_value(&bad).expect("json"),
            )
            .expect("seeded"),
    )
    .expect("a deployment");
    env.create_converged("web", 1, "nginx:1").await;
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

    // Fixed (the selector is immutable: the template's labels change): it is reconciled like
    // any other.
    let patch = serde_json::json!({"spec": {"template": {"metadata": {"labels": {"tier": "x"}}}}});
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

// ---- Adoption, proportional scaling, revisions, minReadySeconds, paused, rollback ----

impl Env {
    fn replica_sets(&self) -> Api<ReplicaSet> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// Merge-patches the Deployment; returns the new generation.
    async fn patch(&self, name: &str, patch: serde_json::Value) -> i64 {
        self.deployments()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch deployment")
            .metadata
            .generation
            .unwrap_or(0)
    }

    /// Replaces the Deployment's image (and change cause); returns the new generation.
    async fn roll(&self, name: &str, image: &str, cause: Option<&str>) -> i64 {
        let mut d = self.get(name).await;
        demo::set_template_image(&mut d, image);
        if let Some(cause) = cause {
            d.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(sync::CHANGE_CAUSE_ANNOTATION.into(), cause.into());
        }
        self.deployments()
            .replace(name, &PostParams::default(), &d)
            .await
            .expect("replace deployment")
            .metadata
            .generation
            .unwrap_or(0)
    }

    /// Waits until the Deployment's status observed `generation`.
    async fn observed(&self, name: &str, generation: i64) -> Deployment {
        until(
            &format!("{name} observes generation {generation}"),
            || async {
                self.get(name)
                    .await
                    .status
                    .and_then(|s| s.observed_generation)
                    .unwrap_or(0)
                    >= generation
            },
        )
        .await;
        self.get(name).await
    }
}

fn image_of(rs: &ReplicaSet) -> Option<String> {
    rs.spec
        .template
        .as_ref()?
        .spec
        .as_ref()?
        .containers
        .first()?
        .image
        .clone()
}

fn progressing_reason(d: &Deployment) -> Option<String> {
    d.status
        .as_ref()
        .and_then(|s| sync::condition(s, sync::reason::PROGRESSING))
        .and_then(|c| c.reason.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_replica_set_matching_the_selector_is_adopted() {
    orphan_adoption(env().await).await;
}

/// Adoption with lean informers: the orphan is found from its labels, read off the parsed
/// metadata (I7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_replica_set_is_adopted_with_lean_informers() {
    orphan_adoption(lean_env().await).await;
}

async fn orphan_adoption(env: Env) {
    // A ReplicaSet nobody controls, with the Deployment's template (and its own hash label),
    // already running 2 pods.
    let d = demo::deployment("web", 3, "nginx:1", None, true);
    let mut labels = d
        .spec
        .template
        .metadata
        .clone()
        .unwrap_or_default()
        .labels
        .unwrap_or_default();
    labels.insert(sync::POD_TEMPLATE_HASH_LABEL.into(), "orphan".into());
    let mut template = d.spec.template.clone();
    template
        .metadata
        .get_or_insert_with(Default::default)
        .labels = Some(labels.clone());
    let orphan = ReplicaSet {
        metadata: kube::api::ObjectMeta {
            name: Some("web-orphan".into()),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        spec: k8s_openapi::api::apps::v1::ReplicaSetSpec {
            replicas: Some(2),
            selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some(labels),
                ..Default::default()
            },
            template: Some(template),
            ..Default::default()
        },
        status: None,
    };
    let orphan = env
        .replica_sets()
        .create(&PostParams::default(), &orphan)
        .await
        .expect("create orphan");
    until("the orphan runs its pods", || async {
        env.pods_of(&orphan).await.len() == 2
    })
    .await;

    let created = env.create(&d).await;
    let uid = created.uid().expect("uid");
    until("the orphan is adopted and scaled to 3", || async {
        env.replica_sets_of(&uid)
            .await
            .iter()
            .any(|rs| rs.name_any() == "web-orphan" && sync::rs_replicas(rs) == 3)
    })
    .await;
    let d = env.wait_converged("web", 1).await;
    let rss = env.replica_sets_of(&uid).await;
    assert_eq!(
        rss.len(),
        1,
        "the adopted one is the new ReplicaSet: {rss:?}"
    );
    let rs = &rss[0];
    assert_eq!(rs.uid(), orphan.uid(), "the same object, adopted");
    let owner = sync::controller_of(&rs.metadata).expect("controller ownerReference");
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str(),
            owner.block_owner_deletion
        ),
        ("Deployment", "web", uid.as_str(), Some(true))
    );
    assert_eq!(revision(rs).as_deref(), Some("1"));
    assert_eq!(env.pods_of(rs).await.len(), 3, "its 2 pods kept, 1 added");
    assert_eq!(d.status.and_then(|s| s.available_replicas), Some(3));
    // The adoption is checked on the server above. The counter may say 2: a sync retried
    // (after a 409) before the informer delivered the adoption repeats the idempotent patch,
    // as upstream's ClaimReplicaSets would.
    let s = env.controller.stats();
    assert!(s.rs_adopted >= 1 && s.rs_created == 0, "{s:?}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_set_whose_labels_no_longer_match_is_released() {
    let env = env().await;
    let d = env.create_converged("web", 2, "nginx:1").await;
    let uid = d.uid().expect("uid");
    let first = assert_converged_shape(&env, &d, 2, "nginx:1").await;

    // Someone relabels the ReplicaSet out of the Deployment's selector.
    let patch = serde_json::json!({"metadata": {"labels": {"app": "other"}}});
    env.replica_sets()
        .patch(
            &first.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("relabel");
    until(
        "released: no longer controlled by the Deployment",
        || async {
            env.replica_sets()
                .get(&first.name_any())
                .await
                .is_ok_and(|rs| !sync::is_controlled_by(&rs.metadata, &uid))
        },
    )
    .await;
    let released = env
        .replica_sets()
        .get(&first.name_any())
        .await
        .expect("get");
    assert!(
        released.owner_references().iter().all(|o| o.uid != uid),
        "the ownerReference is gone: {:?}",
        released.owner_references()
    );
    // The Deployment has no ReplicaSet now: it makes a new one (its name is taken by the
    // released one, so under a raised collision count) and converges on it.
    until("a new ReplicaSet converges", || async {
        let d = env.get("web").await;
        d.status.as_ref().and_then(|s| s.collision_count) == Some(1)
            && env.converged("web", 1).await
    })
    .await;
    let d = env.get("web").await;
    let new = assert_converged_shape(&env, &d, 2, "nginx:1").await;
    assert_ne!(new.uid(), first.uid());
    // Released once on the server (checked above); a retried sync with a stale cache may
    // repeat the idempotent release patch, so the counter says at least 1.
    let s = env.controller.stats();
    assert!(s.rs_released >= 1 && s.rs_adopted == 0, "{s:?}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_mid_rollout_is_proportional() {
    let env = env().await;
    let strategy = demo::rolling(IntOrString::Int(3), IntOrString::Int(0));
    let created = env
        .create(&demo::deployment("api", 10, "api:1", strategy, true))
        .await;
    let uid = created.uid().expect("uid");
    env.wait_converged("api", 1).await;

    // A rollout that cannot finish: the new pods never become available (minReadySeconds of
    // an hour), and maxUnavailable 0 keeps the old ReplicaSet at 10. maxSurge 3: new at 3.
    let mut d = env.get("api").await;
    d.spec.min_ready_seconds = Some(3600);
    if let Some(c) = d.spec.template.spec.as_mut().map(|s| &mut s.containers[0]) {
        c.image = Some("api:2".into());
    }
    let g = env
        .deployments()
        .replace("api", &PostParams::default(), &d)
        .await
        .expect("roll")
        .metadata
        .generation
        .unwrap_or(0);
    env.observed("api", g).await;
    let sizes = || async {
        env.replica_sets_of(&uid)
            .await
            .iter()
            .map(|rs| {
                (
                    image_of(rs).unwrap_or_default(),
                    sync::rs_replicas(rs),
                    sync::desired_replicas_annotation(rs),
                )
            })
            .collect::<Vec<_>>()
    };
    until("the rollout is stuck at 10 old + 3 new", || async {
        sizes().await
            == vec![
                ("api:1".into(), 10, Some(10)),
                ("api:2".into(), 3, Some(10)),
            ]
    })
    .await;

    // Scale 10 → 20: allowed 20 + 3 = 23, 10 to add. Largest first: old round(10·23/13) - 10
    // = 8, new round(3·23/13) - 3 = 5 - 3 = 2 → 18 and 5 (upstream's arithmetic; the rolling
    // arithmetic would have grown the new one to 13 instead).
    let g = demo::scale(&env.client, NS, "api", 20)
        .await
        .expect("scale");
    env.observed("api", g).await;
    until("both ReplicaSets scaled for 20", || async {
        sizes()
            .await
            .iter()
            .all(|(_, _, desired)| *desired == Some(20))
    })
    .await;
    assert_eq!(
        sizes().await,
        vec![
            ("api:1".into(), 18, Some(20)),
            ("api:2".into(), 5, Some(20))
        ]
    );
    for rs in env.replica_sets_of(&uid).await {
        assert_eq!(sync::max_replicas_annotation(&rs), Some(23));
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revision_history_limit_keeps_only_the_newest_old_replica_sets() {
    let env = env().await;
    let mut d = demo::deployment("web", 1, "web:1", None, true);
    d.spec.revision_history_limit = Some(1);
    let uid = env.create(&d).await.uid().expect("uid");
    env.wait_converged("web", 1).await;
    for v in 2..=4 {
        let g = env
            .roll("web", &format!("web:{v}"), Some(&format!("image web:{v}")))
            .await;
        env.wait_converged("web", g).await;
    }
    until("only 1 old ReplicaSet is left", || async {
        env.replica_sets_of(&uid).await.len() == 2
    })
    .await;
    let rss = env.replica_sets_of(&uid).await;
    let h = sync::history(&uid, &rss);
    assert_eq!(
        h.iter()
            .map(|r| (r.revision, r.change_cause.as_deref()))
            .collect::<Vec<_>>(),
        vec![(3, Some("image web:3")), (4, Some("image web:4"))],
        "the oldest revisions went first"
    );
    assert_eq!(
        rss.iter().map(image_of).collect::<Vec<_>>(),
        vec![Some("web:3".into()), Some("web:4".into())]
    );
    assert!(env.controller.stats().rs_deleted >= 2);
    until("the Deployment's revision is 4", || async {
        env.get("web")
            .await
            .annotations()
            .get(sync::REVISION_ANNOTATION)
            .map(String::as_str)
            == Some("4")
    })
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_ready_seconds_delays_availability() {
    let env = env().await;
    let mut d = demo::deployment("slow", 2, "slow:1", None, true);
    // Pod condition times have second precision (metav1.Time), so a pod may count as Ready up
    // to a second before it was: with 2 s, it is available no sooner than 1 s after creation.
    d.spec.min_ready_seconds = Some(2);
    let started = std::time::Instant::now();
    env.create(&d).await;
    let ready_not_available = Arc::new(Mutex::new(false));
    let seen = ready_not_available.clone();
    until("Available=True with 2 available", || async {
        let s = env.get("slow").await.status.unwrap_or_default();
        if s.ready_replicas == Some(2) && s.available_replicas == Some(0) {
            *seen.lock().unwrap() = true;
        }
        s.available_replicas == Some(2)
            && sync::condition(&s, sync::reason::AVAILABLE)
                .is_some_and(|c| c.status.as_deref() == Some("True"))
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "available after {:?}, before minReadySeconds",
        started.elapsed()
    );
    assert!(
        *ready_not_available.lock().unwrap(),
        "the status showed the pods Ready but not yet available"
    );
    let d = env.wait_converged("slow", 1).await;
    let rs = assert_converged_shape(&env, &d, 2, "slow:1").await;
    assert_eq!(
        rs.spec.min_ready_seconds,
        Some(2),
        "copied to the ReplicaSet"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_deployment_scales_but_does_not_roll_out() {
    let env = env().await;
    let uid = env
        .create_converged("web", 2, "nginx:1")
        .await
        .uid()
        .expect("uid");

    let g = env
        .patch("web", serde_json::json!({"spec": {"paused": true}}))
        .await;
    let d = env.observed("web", g).await;
    until("Progressing says DeploymentPaused", || async {
        progressing_reason(&env.get("web").await).as_deref() == Some(sync::reason::PAUSED)
    })
    .await;
    assert_eq!(d.spec.paused, Some(true));

    // A template change while paused: no new ReplicaSet.
    let g = env.roll("web", "nginx:2", None).await;
    env.observed("web", g).await;
    // A scale while paused: the existing ReplicaSet follows.
    let g = demo::scale(&env.client, NS, "web", 3).await.expect("scale");
    env.observed("web", g).await;
    until("the old ReplicaSet scaled to 3", || async {
        let rss = env.replica_sets_of(&uid).await;
        rss.len() == 1 && sync::rs_replicas(&rss[0]) == 3 && env.pods_of(&rss[0]).await.len() == 3
    })
    .await;
    let rss = env.replica_sets_of(&uid).await;
    assert_eq!(rss.len(), 1, "no rollout while paused: {rss:?}");
    assert_eq!(image_of(&rss[0]).as_deref(), Some("nginx:1"));
    assert_eq!(env.controller.stats().rs_created, 1);

    // Resumed: the rollout happens.
    let g = env
        .patch("web", serde_json::json!({"spec": {"paused": false}}))
        .await;
    let d = env.wait_converged("web", g).await;
    assert_converged_shape(&env, &d, 3, "nginx:2").await;
    assert_eq!(env.replica_sets_of(&uid).await.len(), 2);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_back_the_template_scales_the_old_replica_set_up_under_the_next_revision() {
    let env = env().await;
    let uid = env
        .create_converged("web", 2, "nginx:1")
        .await
        .uid()
        .expect("uid");
    let g = env.roll("web", "nginx:2", Some("to v2")).await;
    env.wait_converged("web", g).await;
    let rss = env.replica_sets_of(&uid).await;
    let (v1, v2) = (rss[0].clone(), rss[1].clone());
    assert_eq!(
        (revision(&v1).as_deref(), revision(&v2).as_deref()),
        (Some("1"), Some("2"))
    );

    // What `kubectl rollout undo` does for apps/v1: the template (without its hash label) and
    // annotations of revision 1 written back into the Deployment.
    let mut d = env.get("web").await;
    let patch = sync::rollback_patch(&d, &v1).expect("template");
    d.spec.template = serde_json::from_value(patch[0]["value"].clone()).expect("template");
    d.metadata.annotations = serde_json::from_value(patch[1]["value"].clone()).expect("ann");
    let g = env
        .deployments()
        .replace("web", &PostParams::default(), &d)
        .await
        .expect("rollback")
        .metadata
        .generation
        .unwrap_or(0);
    let d = env.wait_converged("web", g).await;
    let rs = assert_converged_shape(&env, &d, 2, "nginx:1").await;
    assert_eq!(
        rs.uid(),
        v1.uid(),
        "the old ReplicaSet is the new one again"
    );
    assert_eq!(
        revision(&rs).as_deref(),
        Some("3"),
        "under the next revision"
    );
    assert_eq!(
        rs.annotations()
            .get(sync::REVISION_HISTORY_ANNOTATION)
            .map(String::as_str),
        Some("1")
    );
    let rss = env.replica_sets_of(&uid).await;
    assert_eq!(rss.len(), 2, "nothing created");
    assert_eq!(sync::rs_replicas(&rss[0]), 0, "v2 scaled down");
    until("the Deployment's revision is 3", || async {
        env.get("web")
            .await
            .annotations()
            .get(sync::REVISION_ANNOTATION)
            .map(String::as_str)
            == Some("3")
    })
    .await;
    env.stop().await;
}

/// The demo's read-modify-write edit retries a conflict on a fresh read, as client-go's
/// `retry.RetryOnConflict` does, and gives up with the conflict after its five attempts.
#[tokio::test]
async fn demo_edits_retry_on_conflict_then_give_up() {
    let sim = Sim::start(Default::default()).await.expect("sim starts");
    let client = sim.client();
    let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    api.create(
        &PostParams::default(),
        &demo::deployment("web", 1, "nginx:1.27", None, true),
    )
    .await
    .expect("create");

    // Four conflicts, then the fifth attempt writes.
    sim.faults()
        .fail_next(Some("deployments"), Verb::Update, 4, 409, 0);
    demo::set_image(&client, "default", "web", "nginx:1.28")
        .await
        .expect("the edit lands on its fifth attempt");
    let image = |d: &Deployment| {
        d.spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.containers[0].image.clone())
    };
    assert_eq!(
        image(&api.get("web").await.unwrap()).as_deref(),
        Some("nginx:1.28")
    );
    assert_eq!(sim.requests().count("deployments", Verb::Update), 5);

    // Five conflicts: the caller sees the last one.
    sim.faults()
        .fail_next(Some("deployments"), Verb::Update, 5, 409, 0);
    let err = demo::set_image(&client, "default", "web", "nginx:1.29")
        .await
        .expect_err("five conflicts exhaust the retry");
    assert!(deployment_controller::retry::is_conflict(&err), "{err}");
    assert_eq!(
        image(&api.get("web").await.unwrap()).as_deref(),
        Some("nginx:1.28")
    );
    assert_eq!(sim.requests().count("deployments", Verb::Update), 10);

    // Anything but a conflict is not retried.
    sim.faults()
        .fail_next(Some("deployments"), Verb::Update, 1, 500, 0);
    demo::set_image(&client, "default", "web", "nginx:1.30")
        .await
        .expect_err("a 500 is returned at once");
    assert_eq!(sim.requests().count("deployments", Verb::Update), 11);
    sim.shutdown().await;
}

/// Issue 31 item 2: `status.terminatingReplicas` is written as kube 1.36 writes it, the sum of
/// the ReplicaSets' (pods being deleted, as the ReplicaSet controller counts them), and goes
/// back to 0 once they are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_replicas_follow_the_pods_being_deleted() {
    let env = env().await;
    // Scheduled pods (a nodeName): the sim's kubelet stand-in keeps a deleted one terminating
    // for a while (`SimConfig::pod_termination`) instead of removing it at once.
    let mut d = demo::deployment("web", 3, "nginx:1", None, true);
    if let Some(spec) = d.spec.template.spec.as_mut() {
        spec.node_name = Some("node-1".into());
    }
    env.create(&d).await;
    env.wait_converged("web", 1).await;
    let terminating = |d: &Deployment| d.status.as_ref().and_then(|s| s.terminating_replicas);
    assert_eq!(terminating(&env.get("web").await), Some(0));

    // Two pods deleted gracefully (as `kubectl delete pod` does; the demo's own simulated
    // ReplicaSet controller deletes with grace 0): they terminate while replacements start.
    let web = env.get("web").await;
    let rss = env.replica_sets_of(&web.uid().unwrap_or_default()).await;
    let rs = rss.last().expect("web's ReplicaSet");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    for p in env.pods_of(rs).await.iter().take(2) {
        pods.delete(&p.name_any(), &DeleteParams::default())
            .await
            .expect("graceful delete");
    }
    until("the Deployment counts terminating pods", || async {
        terminating(&env.get("web").await).unwrap_or(0) > 0
    })
    .await;
    until("no terminating pods left", || async {
        terminating(&env.get("web").await) == Some(0)
    })
    .await;
    env.stop().await;
}

/// Issue 31 item 3: resuming writes `Progressing=Unknown, DeploymentResumed` on its own status
/// write first, as upstream's `checkPausedConditions` does, before the rollout's conditions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_writes_the_deployment_resumed_condition() {
    let env = env().await;
    env.create_converged("web", 2, "nginx:1").await;
    let g = env
        .patch("web", serde_json::json!({"spec": {"paused": true}}))
        .await;
    env.observed("web", g).await;
    until("Progressing says DeploymentPaused", || async {
        progressing_reason(&env.get("web").await).as_deref() == Some(sync::reason::PAUSED)
    })
    .await;
    let g = env.roll("web", "nginx:2", None).await;
    env.observed("web", g).await;

    // Every Progressing condition the server holds from here on, in order.
    let informer =
        SharedIndexInformer::<Deployment>::with_config(env.client.clone(), Some(NS), fast_config());
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let s = seen.clone();
    informer
        .add_event_handler(handler_fn(move |n: &Notification<Deployment>| {
            let c = n
                .object()
                .status
                .as_ref()
                .and_then(|st| sync::condition(st, sync::reason::PROGRESSING).cloned());
            if let Some(c) = c {
                let entry = (c.status.unwrap_or_default(), c.reason.unwrap_or_default());
                let mut s = s.lock().unwrap();
                if s.last() != Some(&entry) {
                    s.push(entry);
                }
            }
        }))
        .await
        .expect("handler");
    common::start_synced(&informer).await;

    let g = env
        .patch("web", serde_json::json!({"spec": {"paused": false}}))
        .await;
    env.wait_converged("web", g).await;
    let seen = seen.lock().unwrap().clone();
    let resumed = seen
        .iter()
        .position(|(_, r)| r == sync::reason::RESUMED)
        .unwrap_or_else(|| panic!("no DeploymentResumed among {seen:?}"));
    assert_eq!(seen[resumed].0, "Unknown", "{seen:?}");
    assert!(
        seen[resumed..]
            .iter()
            .any(|(_, r)| r == sync::reason::NEW_RS_AVAILABLE),
        "the rollout's conditions follow it: {seen:?}"
    );
    informer.shutdown().await;
    env.stop().await;
}

/// Issue 31 item 4: a sync plans only from a cache that holds the controller's own last write
/// to the Deployment (`wait_for_resource_version`, K3). With every watch event late, planning
/// from the cache as it is made most status writes after the first a 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_waits_for_its_own_last_write_before_planning() {
    let env = env().await;
    env.create_converged("web", 2, "nginx:1").await;
    let before = env.controller.stats();
    // Every watch event reaches the caches late.
    env.sim
        .faults()
        .slow_watches(Some(Duration::from_millis(30)));
    let g = demo::scale(&env.client, NS, "web", 6).await.expect("scale");
    env.wait_converged("web", g).await;
    let g = demo::scale(&env.client, NS, "web", 3).await.expect("scale");
    env.wait_converged("web", g).await;
    env.sim.faults().slow_watches(None);

    let s = env.controller.stats();
    let (conflicts, writes) = (
        s.conflicts - before.conflicts,
        s.status_updates - before.status_updates,
    );
    assert!(writes >= 4, "status writes {writes}");
    assert!(
        conflicts * 10 <= writes,
        "{conflicts} conflicts on {writes} status writes ({s:?})"
    );
    assert!(s.own_write_waits > before.own_write_waits, "{s:?}");
    env.stop().await;
}
