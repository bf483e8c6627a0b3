//! Three replicas of the deployment controller on fixed namespace shards, against the simulated
//! API server (docs/scaling-out.md): every Deployment converges, each namespace is written by
//! exactly one replica's field manager, and a range moved at run time (drain → ack → hand-over)
//! mid-rollout is never written by two replicas in overlapping ownership windows.
//!
//! Every wait is on a condition with a deadline; nothing sleeps to synchronise.

use crate::common;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use crate::common::{DEADLINE, fast_config};
use deployment_controller::{
    controller::{ControllerOptions, DeploymentController},
    embedded::{
        cluster::{ClusterOptions, ClusterSim},
        demo,
    },
    shard::{ShardOptions, WriteRecord, field_manager},
};
use futures::FutureExt as _;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kinformer::shard::{ShardField, ShardSelector};
use kinformer_actors::OwnershipView;
use kube::{
    Api, Client, Resource,
    api::{ListParams, PostParams},
};

const REPLICAS: u64 = 3;
const NAMESPACES: usize = 20;
const PER_NAMESPACE: usize = 10;

/// Namespaces whose varying part comes first: FNV-1a spreads those over the hash space (a
/// suffix that varies, `team-00`…, barely moves the high bits and lands in one shard).
fn namespaces() -> Vec<String> {
    (0..NAMESPACES).map(|i| format!("{i:02}-team")).collect()
}

fn owner_of(ns: &str) -> u64 {
    (0..REPLICAS)
        .find(|i| {
            ShardSelector::nth_of(ShardField::Namespace, *i, REPLICAS)
                .unwrap()
                .matches_value(ns)
        })
        .unwrap()
}

/// Polls `cond` every 20 ms; panics after `deadline`.
async fn until(what: &str, deadline: Duration, mut cond: impl FnMut() -> bool) {
    let end = tokio::time::Instant::now() + deadline;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Managers of the controller's replicas in an object's managedFields.
fn controller_managers<K: Resource>(obj: &K) -> BTreeSet<String> {
    obj.meta()
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|e| e.manager.clone())
        .filter(|m| m.starts_with("deployment-controller-"))
        .collect()
}

/// Per namespace, the controller managers found on its Deployments and ReplicaSets.
async fn managers_by_namespace(client: &Client) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let ds = Api::<Deployment>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    for d in &ds.items {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        out.entry(ns).or_default().extend(controller_managers(d));
    }
    let rss = Api::<ReplicaSet>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    for rs in &rss.items {
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        out.entry(ns).or_default().extend(controller_managers(rs));
    }
    out
}

fn rv(w: &WriteRecord) -> u64 {
    w.resource_version.parse().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_split_by_namespace_and_hand_a_range_over_mid_rollout() {
    let sim = common::sim().await;
    let client = sim.client();
    let cluster = ClusterSim::start(
        Client::try_from(sim.kube_config()).unwrap(),
        ClusterOptions {
            ready_after: Duration::ZERO,
            workers: 4,
            garbage_collect: true,
            informer: fast_config(),
        },
    )
    .await
    .unwrap();

    let writes: Arc<Mutex<Vec<WriteRecord>>> = Arc::default();
    let waited_for: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut replicas = Vec::new();
    for i in 0..REPLICAS {
        let mut shard = ShardOptions::nth_of(i, REPLICAS).unwrap();
        let log = Arc::clone(&writes);
        shard.on_write = Some(Arc::new(move |w| log.lock().unwrap().push(w.clone())));
        let waits = Arc::clone(&waited_for);
        shard.wait_for_cache = Some(Arc::new(move |rv| {
            waits.lock().unwrap().push(rv.to_string());
            async { true }.boxed()
        }));
        let c = DeploymentController::new(
            client.clone(),
            ControllerOptions {
                workers: 2,
                informer: fast_config(),
                sync_timeout: DEADLINE,
                shard: Some(shard),
                ..ControllerOptions::default()
            },
        )
        .await
        .unwrap();
        c.start().await.unwrap();
        replicas.push(c);
    }

    // A few hundred Deployments across the namespaces, one pod each.
    let nss = namespaces();
    futures::future::join_all(nss.iter().map(|ns| {
        let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
        async move {
            for j in 0..PER_NAMESPACE {
                let d = demo::deployment(&format!("app-{j}"), 1, "app:1", None, true);
                api.create(&PostParams::default(), &d).await.unwrap();
            }
        }
    }))
    .await;
    // Each replica caches its shard only: convergence is read from an observer's informers of
    // every namespace.
    let observer =
        kinformer_actors::SharedInformerFactory::new(client.clone()).with_config(fast_config());
    let (od, ors) = (
        observer.informer::<Deployment>(),
        observer.informer::<ReplicaSet>(),
    );
    observer.start().unwrap();
    let (dl, rl) = (od.lister(), ors.lister());
    let all_converged = |generation: i64| {
        let (dl, rl, nss) = (dl.clone(), rl.clone(), nss.clone());
        move || {
            nss.iter().all(|ns| {
                (0..PER_NAMESPACE)
                    .all(|j| demo::converged(&dl, &rl, ns, &format!("app-{j}"), generation))
            })
        }
    };
    until(
        "every Deployment rolled out",
        Duration::from_secs(60),
        all_converged(1),
    )
    .await;

    // Each namespace was written by exactly its owner's field manager.
    let managers = managers_by_namespace(&client).await;
    for ns in &nss {
        let want = BTreeSet::from([field_manager(&owner_of(ns).to_string())]);
        assert_eq!(managers.get(ns), Some(&want), "namespace {ns}");
    }
    for (i, r) in replicas.iter().enumerate() {
        let s = r.shard_stats().unwrap();
        let owned = nss.iter().filter(|ns| owner_of(ns) == i as u64).count();
        assert_eq!(s.keys_owned as usize, owned * PER_NAMESPACE, "replica {i}");
        // Its informers cache its shard only (KEP-5866): other namespaces never reach it.
        assert_eq!(
            r.deployments().len(),
            owned * PER_NAMESPACE,
            "replica {i} caches its own namespaces only"
        );
    }

    // Mid-rollout (half the namespaces updated, the other half after the hand-over), replica
    // 0's range moves to replica 1: drain, ack, hand over.
    let roll = |nss: Vec<String>| {
        let client = client.clone();
        async move {
            futures::future::join_all(nss.iter().map(|ns| {
                let client = client.clone();
                async move {
                    for j in 0..PER_NAMESPACE {
                        demo::set_image(&client, ns, &format!("app-{j}"), "app:2")
                            .await
                            .unwrap();
                    }
                }
            }))
            .await;
        }
    };
    let (first, second) = nss.split_at(NAMESPACES / 2);
    roll(first.to_vec()).await;
    let (o0, o1) = (
        replicas[0].ownership().unwrap().clone(),
        replicas[1].ownership().unwrap().clone(),
    );
    let moved = o0.view().held.clone();
    let mut v = (*o0.view()).clone();
    v.draining = moved.clone();
    o0.publish(v);
    let mut acked = ShardSelector::nothing(ShardField::Namespace);
    until("replica 0 acks the drain", DEADLINE, || {
        acked = acked.union(&o0.take_drained()).unwrap();
        acked == moved
    })
    .await;
    // Every write replica 0 made happened before this resourceVersion.
    let acked_at = sim.resource_version();
    o0.publish(OwnershipView {
        held: ShardSelector::nothing(ShardField::Namespace),
        wanted: ShardSelector::nothing(ShardField::Namespace),
        draining: ShardSelector::nothing(ShardField::Namespace),
        handover: Vec::new(),
        valid_until: None,
        generation: 0,
    });
    let last_write = o0.last_write().expect("replica 0 wrote");
    let held1 = o1.view().held.union(&moved).unwrap();
    o1.publish(OwnershipView {
        wanted: held1.clone(),
        held: held1,
        draining: ShardSelector::nothing(ShardField::Namespace),
        handover: moved
            .ranges()
            .iter()
            .map(|r| (*r, last_write.clone()))
            .collect(),
        valid_until: None,
        generation: 0,
    });
    roll(second.to_vec()).await;
    until(
        "every Deployment rolled out again",
        Duration::from_secs(60),
        all_converged(2),
    )
    .await;

    // No overlapping windows: in the moved namespaces, replica 0 wrote only before its ack
    // and replica 1 only after it.
    let (m0, m1) = (field_manager("0"), field_manager("1"));
    let log = writes.lock().unwrap().clone();
    let moved_ns: Vec<&String> = nss.iter().filter(|ns| moved.matches_value(ns)).collect();
    assert!(
        !moved_ns.is_empty(),
        "the test moves at least one namespace"
    );
    for ns in &moved_ns {
        let of = |m: &str| -> Vec<u64> {
            log.iter()
                .filter(|w| &w.namespace == *ns && w.manager == m)
                .map(rv)
                .collect()
        };
        let (w0, w1) = (of(&m0), of(&m1));
        assert!(!w0.is_empty(), "{ns}: replica 0 rolled it out first");
        if second.contains(*ns) {
            assert!(
                !w1.is_empty(),
                "{ns}: replica 1 rolled it out after the hand-over"
            );
        }
        assert!(
            w0.iter().all(|rv| *rv <= acked_at),
            "{ns}: replica 0 wrote after its ack"
        );
        assert!(
            w1.iter().all(|rv| *rv > acked_at),
            "{ns}: replica 1 wrote before the hand-over"
        );
    }
    // Every other namespace still has one writer.
    let managers = managers_by_namespace(&client).await;
    for ns in nss.iter().filter(|ns| !moved.matches_value(ns)) {
        let want = BTreeSet::from([field_manager(&owner_of(ns).to_string())]);
        assert_eq!(managers.get(ns), Some(&want), "namespace {ns}");
    }
    assert!(
        moved_ns.iter().any(|ns| second.contains(*ns)),
        "a namespace moved before its rollout started"
    );
    for ns in &moved_ns {
        let got = managers.get(*ns).cloned().unwrap_or_default();
        assert!(got.contains(&m0), "{ns}: {got:?}");
        assert!(
            got.is_subset(&BTreeSet::from([m0.clone(), m1.clone()])),
            "{ns}: {got:?}"
        );
    }
    let (s0, s1) = (
        replicas[0].shard_stats().unwrap(),
        replicas[1].shard_stats().unwrap(),
    );
    assert_eq!((s0.drains, s0.keys_owned), (1, 0));
    assert_eq!(s1.handovers, 1);
    assert!(s1.handover_waits >= 1);
    assert!(
        waited_for
            .lock()
            .unwrap()
            .iter()
            .all(|rv| *rv == last_write)
    );

    for r in &replicas {
        r.shutdown().await;
    }
    observer.shutdown().await;
    cluster.shutdown().await;
    sim.shutdown().await;
}
