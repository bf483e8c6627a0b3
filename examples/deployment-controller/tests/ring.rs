//! Ring replicas of the deployment controller against the simulated API server
//! (docs/scaling-out.md): three replicas on the Lease ring split ~100 Deployments over 15
//! namespaces; one crashes and its ranges move to the others within the takeover bound; a
//! fourth joins and takes ranges only from the others (consistent hashing: nobody else gains
//! anything); every phase converges, and the write log shows no Deployment written by a replica
//! while another held its namespace.
//!
//! The scenario runs twice: against a server that filters by `shardSelector` (the
//! `ShardedListAndWatch` gate on, KEP-5866) and against one that ignores it (the gate off), where
//! each replica's informers filter by themselves (K1). Either way each replica caches its shard
//! only.
//!
//! Every wait is on a condition with a deadline (inside `scale::run`); nothing sleeps to
//! synchronise.

use crate::common;

use std::{sync::Arc, time::Duration};

use crate::common::fast_config;
use deployment_controller::{
    embedded::{
        cluster::{ClusterOptions, ClusterSim},
        scale::{self, ScaleOptions},
    },
    ring::RingOptions,
};
use kinformer_sim::SimConfig;
use kube::Client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_replicas_survive_a_crash_and_a_scale_out_without_overlapping_writes() {
    ring_scenario(true, 105, 15).await;
}

/// The same against a server without the gate: it sends every object whatever the
/// `shardSelector`, so each replica's informers drop what is outside their shard (smaller, to
/// keep the suite quick).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_replicas_filter_by_themselves_when_the_server_ignores_shard_selectors() {
    ring_scenario(false, 60, 12).await;
}

async fn ring_scenario(server_filters: bool, deployments: usize, namespaces: usize) {
    // Bookmarks every second: a replica's KEP-5647 wait for the previous owner's last write
    // completes on a quiet shard too.
    let sim = Arc::new(
        common::sim_with(SimConfig {
            bookmark_interval: Duration::from_secs(1),
            sharded_list_and_watch: server_filters,
            ..SimConfig::default()
        })
        .await,
    );
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
    // Short timings: a crashed replica is taken over 2 × 2 s after its last renew.
    let ring = RingOptions {
        namespace: "kube-system".into(),
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(500),
        ..RingOptions::default()
    };
    let options = ScaleOptions {
        deployments,
        namespaces,
        initial: 3,
        added: 1,
        ring: ring.clone(),
        workers: 2,
        informer: fast_config(),
        deadline: Duration::from_secs(60),
    };
    let mut seen = Vec::new();
    let report = scale::run(sim.client(), scale::sim_rv(&sim), options, |p| {
        seen.push(p.name.clone())
    })
    .await
    .expect("every phase settles and converges");
    assert_eq!(seen.len(), 3, "three phases reported: {seen:?}");
    // In every phase each running replica caches exactly the Deployments it owns: the server
    // filtered, or (gate off) its informers did.
    for p in &report.phases {
        for r in p.replicas.iter().filter(|r| r.running) {
            assert_eq!(
                r.cached, r.deployments,
                "{}: replica {} caches its shard only (server filters: {server_filters})",
                p.name, r.id
            );
        }
    }
    // The selectors went out either way; the gate decides who applied them.
    let selectors = sim
        .requests()
        .shard_selectors("deployments", kinformer_sim::Verb::List);
    assert!(
        selectors.iter().any(Option::is_some),
        "the replicas sent shardSelector on LIST"
    );
    let [start, crash, grow] = &report.phases[..] else {
        panic!("three phases: {:?}", report.phases);
    };

    // Phase 1: three replicas, each holding a share, together everything; every namespace of
    // the scenario owned by exactly one.
    let running = |p: &scale::PhaseReport| -> Vec<scale::ReplicaRow> {
        p.replicas.iter().filter(|r| r.running).cloned().collect()
    };
    let rows = running(start);
    assert_eq!(rows.len(), 3);
    let total: f64 = rows.iter().map(|r| r.held_fraction).sum();
    assert!(
        (total - 1.0).abs() < 1e-9,
        "the ring covers the space: {total}"
    );
    assert_eq!(rows.iter().map(|r| r.namespaces).sum::<usize>(), namespaces);
    assert_eq!(
        rows.iter().map(|r| r.deployments).sum::<usize>(),
        deployments
    );
    assert!(rows.iter().all(|r| r.held_fraction > 0.0));

    // Phase 2: replica 2 crashed; its ranges moved to 0 and 1 within the takeover bound
    // (2 × lease after its last renew) plus rounds to claim its ~32 arcs, with slack for a
    // loaded machine.
    let rows = running(crash);
    assert_eq!(
        rows.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["0", "1"]
    );
    let total: f64 = rows.iter().map(|r| r.held_fraction).sum();
    assert!((total - 1.0).abs() < 1e-9, "the survivors cover the space");
    assert_eq!(
        rows.iter().map(|r| r.deployments).sum::<usize>(),
        deployments
    );
    let bound = 2 * ring.lease_duration + 10 * ring.retry_period + Duration::from_secs(15);
    assert!(
        crash.settled_after <= bound,
        "the crashed replica's ranges moved after {:?} (bound {bound:?})",
        crash.settled_after
    );
    for (before, after) in running(start).iter().zip(&rows) {
        assert!(
            after.held_fraction > before.held_fraction,
            "replica {} took part of the crashed replica's ranges",
            after.id
        );
        assert_eq!(
            after.drains_out, before.drains_out,
            "nothing moved away from a survivor"
        );
    }

    // Phase 3: replica 3 joined; it took ranges from 0 and 1 only, in a bounded number of
    // hand-overs (at most one per arc the ring gives it), and 0 and 1 gained nothing.
    let rows = running(grow);
    assert_eq!(rows.len(), 3);
    let new = rows.iter().find(|r| r.id == "3").expect("replica 3 runs");
    assert!(new.held_fraction > 0.0);
    assert!(
        new.handovers_in >= 1 && new.handovers_in <= 2 * u64::from(ring.virtual_nodes),
        "replica 3 received {} ranges",
        new.handovers_in
    );
    for old in rows.iter().filter(|r| r.id != "3") {
        let before = running(crash).into_iter().find(|r| r.id == old.id).unwrap();
        assert_eq!(
            old.handovers_in, before.handovers_in,
            "replica {} gained nothing when 3 joined",
            old.id
        );
        assert!(old.held_fraction <= before.held_fraction);
    }
    let moved_out: u64 = rows
        .iter()
        .filter(|r| r.id != "3")
        .map(|r| r.drains_out)
        .sum();
    assert!(moved_out >= 1, "ranges were drained to the newcomer");
    assert_eq!(
        rows.iter().map(|r| r.deployments).sum::<usize>(),
        deployments
    );

    // No write by one replica while another held the namespace, and none outside the
    // writer's own window.
    assert!(
        report.overlap.checked > deployments,
        "{}",
        report.overlap.checked
    );
    assert!(
        report.overlap.is_clean(),
        "overlapping: {:?}\noutside: {:?}",
        report.overlap.overlapping,
        report.overlap.outside_own_window
    );

    cluster.shutdown().await;
    if let Ok(sim) = Arc::try_unwrap(sim) {
        sim.shutdown().await;
    }
}
