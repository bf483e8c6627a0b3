//! The scale-out scenario (`--scale-scenario`, docs/scaling-out.md): replicas on the Lease ring
//! go 3 → 2 (one crashes) → 4 (two start) while every Deployment keeps being rolled out, and a
//! report after each phase says who holds what, how ranges moved, and what it cost.
//!
//! Convergence is read from an observer's own informers (every namespace), not from a
//! replica's caches: with sharded informers a replica caches only its ranges.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kinformer_actors::{InformerConfig, Lister, SharedInformerFactory};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};

use crate::{
    controller::ControllerOptions,
    embedded::demo,
    ring::{
        OverlapReport, OwnershipLog, RingError, RingOptions, RingReplica, RvSource, WriteLog,
        settled,
    },
};

/// What the scenario runs.
#[derive(Clone, Debug)]
pub struct ScaleOptions {
    /// Deployments created, spread evenly over the namespaces.
    pub deployments: usize,
    /// Namespaces (`00-scale`, `01-scale`, …: the varying part first, so FNV-1a spreads them).
    pub namespaces: usize,
    /// Replicas at the start.
    pub initial: usize,
    /// Replicas started after the crash.
    pub added: usize,
    /// The ring's name, Lease namespace and timings.
    pub ring: RingOptions,
    /// Workers per replica.
    pub workers: usize,
    /// The informers' config (the replicas' and the observer's).
    pub informer: InformerConfig,
    /// How long each phase may take to settle and converge.
    pub deadline: Duration,
}

impl Default for ScaleOptions {
    fn default() -> Self {
        ScaleOptions {
            deployments: 300,
            namespaces: 30,
            initial: 3,
            added: 2,
            ring: RingOptions::default(),
            workers: 2,
            informer: InformerConfig::default(),
            deadline: Duration::from_secs(120),
        }
    }
}

/// One replica at the end of a phase.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaRow {
    /// The replica's id.
    pub id: String,
    /// Whether it is in the ring (false once crashed).
    pub running: bool,
    /// Fraction of the hash space it holds.
    pub held_fraction: f64,
    /// The scenario's namespaces it owns.
    pub namespaces: usize,
    /// The Deployments it owns.
    pub deployments: usize,
    /// The Deployments its informer caches (0 once crashed): its shard only, whether the
    /// server filtered or the informer did (K1), so equal to `deployments` once settled.
    pub cached: usize,
    /// Ranges it received from other members (the ring's count).
    pub handovers_in: u64,
    /// Drains it completed (ranges handed over to others).
    pub drains_out: u64,
    /// Time its controller spent draining, summed.
    pub drain_time: Duration,
    /// LIST requests its informers sent (initial lists and relists).
    pub lists: u64,
}

/// One phase of the scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseReport {
    /// What changed.
    pub name: String,
    /// From the change to every running replica holding exactly its share of the ring.
    pub settled_after: Duration,
    /// From the change to every Deployment converged.
    pub converged_after: Duration,
    /// Every replica so far.
    pub replicas: Vec<ReplicaRow>,
}

impl std::fmt::Display for PhaseReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "== {}: ring settled after {:.1}s, all Deployments converged after {:.1}s",
            self.name,
            self.settled_after.as_secs_f64(),
            self.converged_after.as_secs_f64()
        )?;
        writeln!(
            f,
            "  replica  state    held   namespaces  deployments  cached  handovers in/out  drain time  LISTs"
        )?;
        for r in &self.replicas {
            writeln!(
                f,
                "  {:<8} {:<8} {:>5.3}  {:>10}  {:>11}  {:>6}  {:>9}/{:<6}  {:>9.3}s  {:>5}",
                r.id,
                if r.running { "running" } else { "crashed" },
                r.held_fraction,
                r.namespaces,
                r.deployments,
                r.cached,
                r.handovers_in,
                r.drains_out,
                r.drain_time.as_secs_f64(),
                r.lists
            )?;
        }
        Ok(())
    }
}

/// The whole run.
#[derive(Clone, Debug)]
pub struct ScaleReport {
    /// Phase by phase.
    pub phases: Vec<PhaseReport>,
    /// Writes the replicas made.
    pub writes: usize,
    /// The write log checked against the ownership windows.
    pub overlap: OverlapReport,
}

/// The scenario's namespaces.
pub fn namespaces(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{i:02}-scale")).collect()
}

/// The Deployments (namespace, name), `deployments` of them spread over `namespaces`.
pub fn deployment_keys(deployments: usize, namespaces: usize) -> Vec<(String, String)> {
    let nss = self::namespaces(namespaces.max(1));
    (0..deployments)
        .map(|i| (nss[i % nss.len()].clone(), format!("app-{}", i / nss.len())))
        .collect()
}

/// Creates the scenario's Deployments (one replica each), many at a time.
pub async fn create_deployments(
    client: &Client,
    deployments: usize,
    namespaces: usize,
) -> anyhow::Result<()> {
    use futures::StreamExt as _;
    let keys = deployment_keys(deployments, namespaces);
    let results: Vec<kube::Result<()>> = futures::stream::iter(keys)
        .map(|(ns, name)| {
            let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
            async move {
                let d = demo::deployment(&name, 1, "app:1", None, true);
                match api.create(&PostParams::default(), &d).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                    Err(e) => Err(e),
                }
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect::<kube::Result<()>>()?;
    Ok(())
}

/// Sets every Deployment's image (a new rollout each), many at a time.
async fn roll_out(client: &Client, keys: &[(String, String)], image: &str) -> anyhow::Result<()> {
    use futures::StreamExt as _;
    let results: Vec<kube::Result<i64>> = futures::stream::iter(keys.iter().cloned())
        .map(|(ns, name)| async move { demo::set_image(client, &ns, &name, image).await })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect::<kube::Result<Vec<i64>>>()?;
    Ok(())
}

/// Polls `cond` every 50 ms; fails after `deadline`.
async fn wait_for(
    what: &str,
    deadline: Duration,
    mut cond: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let end = tokio::time::Instant::now() + deadline;
    while !cond() {
        anyhow::ensure!(
            tokio::time::Instant::now() < end,
            "scale scenario: not {what} within {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

fn rows(replicas: &[RingReplica], nss: &[String]) -> Vec<ReplicaRow> {
    replicas
        .iter()
        .map(|r| {
            let health = r.status().health();
            let stats = r.controller().shard_stats();
            let o = r.ownership();
            ReplicaRow {
                id: r.id().to_string(),
                running: r.is_running(),
                held_fraction: if r.is_running() {
                    o.view().held.fraction()
                } else {
                    0.0
                },
                namespaces: nss.iter().filter(|ns| o.owns_value(ns)).count(),
                deployments: stats.as_ref().map_or(0, |s| s.keys_owned as usize),
                cached: if r.is_running() {
                    r.controller().deployments().len()
                } else {
                    0
                },
                handovers_in: health.handovers,
                drains_out: health.drains,
                drain_time: stats.map_or(Duration::ZERO, |s| s.drain_time),
                lists: r.controller().list_requests(),
            }
        })
        .collect()
}

/// Plays the scenario against `client` (a server with a ReplicaSet controller and kubelet:
/// the embedded cluster simulation), reading its resourceVersion from `rv`. `on_phase` sees
/// each phase's report as it ends. Fails when a phase does not settle and converge within
/// `options.deadline`; the overlap check is in the report.
pub async fn run(
    client: Client,
    rv: RvSource,
    options: ScaleOptions,
    on_phase: impl FnMut(&PhaseReport),
) -> anyhow::Result<ScaleReport> {
    run_with_progress(client, rv, options, |_| {}, on_phase).await
}

/// [`run`], with `on_start` told what each phase does as it begins (`phase 1/3: …`): a phase
/// waits up to `options.deadline` for the ring and the Deployments, and a run without a line
/// until its first report looks stuck.
pub async fn run_with_progress(
    client: Client,
    rv: RvSource,
    options: ScaleOptions,
    mut on_start: impl FnMut(&str),
    mut on_phase: impl FnMut(&PhaseReport),
) -> anyhow::Result<ScaleReport> {
    let nss = namespaces(options.namespaces);
    let keys = deployment_keys(options.deployments, options.namespaces);
    // The observer: every namespace, its own informers.
    let observer = SharedInformerFactory::new(client.clone()).with_config(options.informer.clone());
    let (od, ors) = (
        observer.informer::<Deployment>(),
        observer.informer::<ReplicaSet>(),
    );
    observer.start()?;
    let (dl, rl): (Lister<Deployment>, Lister<ReplicaSet>) = (od.lister(), ors.lister());
    let converged = |generation: i64| {
        let (dl, rl, keys) = (dl.clone(), rl.clone(), keys.clone());
        move || {
            keys.iter()
                .all(|(ns, name)| demo::converged(&dl, &rl, ns, name, generation))
        }
    };

    let writes = WriteLog::default();
    let log = OwnershipLog::new();
    let monitor = log.spawn(rv, Duration::from_millis(5));
    let controller_options = ControllerOptions {
        workers: options.workers,
        informer: options.informer.clone(),
        sync_timeout: options.deadline,
        ..ControllerOptions::default()
    };
    // A replica joins: on the ring, its ownership followed by the overlap check, its writes
    // logged.
    let join = async |i: usize| -> Result<RingReplica, RingError> {
        let mut r = RingReplica::new(
            client.clone(),
            i.to_string(),
            &options.ring,
            controller_options.clone(),
            Some(writes.hook()),
        )
        .await?;
        log.track(r.identity(), r.ownership().clone());
        r.start().await?;
        Ok(r)
    };
    let mut replicas: Vec<RingReplica> = Vec::new();
    let mut phases = Vec::new();
    let outcome = async {
        // Phase 1: the first replicas, then the Deployments.
        on_start(&format!(
            "phase 1/3: {} replicas join the ring, {} Deployments created over {} namespaces; \
             waiting for the ring to settle and every Deployment to converge",
            options.initial, options.deployments, options.namespaces
        ));
        let change = Instant::now();
        for i in 0..options.initial {
            replicas.push(join(i).await?);
        }
        create_deployments(&client, options.deployments, options.namespaces).await?;
        let report = run_phase(
            format!("{} replicas", options.initial),
            change,
            &replicas,
            &options,
            &nss,
            converged(1),
        )
        .await?;
        on_phase(&report);
        phases.push(report);

        // Phase 2: the last one crashes while every Deployment rolls out.
        on_start(&format!(
            "phase 2/3: replica {} crashes while every Deployment rolls out app:2",
            options.initial.saturating_sub(1)
        ));
        let change = Instant::now();
        if let Some(victim) = replicas.last_mut() {
            victim.crash().await;
        }
        roll_out(&client, &keys, "app:2").await?;
        let report = run_phase(
            format!(
                "replica {} crashed ({} left)",
                options.initial.saturating_sub(1),
                options.initial.saturating_sub(1)
            ),
            change,
            &replicas,
            &options,
            &nss,
            converged(2),
        )
        .await?;
        on_phase(&report);
        phases.push(report);

        // Phase 3: more replicas join while every Deployment rolls out again.
        on_start(&format!(
            "phase 3/3: {} replicas join while every Deployment rolls out app:3",
            options.added
        ));
        let change = Instant::now();
        for i in options.initial..options.initial + options.added {
            replicas.push(join(i).await?);
        }
        roll_out(&client, &keys, "app:3").await?;
        let running = replicas.iter().filter(|r| r.is_running()).count();
        let report = run_phase(
            format!("{} replicas started ({running} running)", options.added),
            change,
            &replicas,
            &options,
            &nss,
            converged(3),
        )
        .await?;
        on_phase(&report);
        phases.push(report);
        Ok::<(), anyhow::Error>(())
    }
    .await;
    // Leave in order (each drains and releases; the others take its ranges), then stop.
    for r in &mut replicas {
        if let Err(e) = r.leave().await {
            tracing::warn!(replica = r.id(), error = %e, "leaving the ring");
        }
    }
    for r in &mut replicas {
        r.stop().await.ok();
    }
    monitor.abort();
    observer.shutdown().await;
    outcome?;
    let records = writes.records();
    Ok(ScaleReport {
        phases,
        writes: records.len(),
        overlap: log.check(&records),
    })
}

/// Waits for the ring to settle, then for every Deployment to converge; reports the phase.
async fn run_phase(
    name: String,
    change: Instant,
    replicas: &[RingReplica],
    options: &ScaleOptions,
    nss: &[String],
    converged: impl FnMut() -> bool,
) -> anyhow::Result<PhaseReport> {
    wait_for("settled", options.deadline, || {
        settled(replicas, &options.ring)
    })
    .await?;
    let settled_after = change.elapsed();
    wait_for("converged", options.deadline, converged).await?;
    let converged_after = change.elapsed();
    Ok(PhaseReport {
        name,
        settled_after,
        converged_after,
        replicas: rows(replicas, nss),
    })
}

/// Every Deployment the scenario created is in the server (a sanity check for callers).
pub async fn count_deployments(client: &Client) -> anyhow::Result<usize> {
    let list = Api::<Deployment>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    Ok(list.items.len())
}

/// Prints the final lines of a report; true when the run is clean.
pub fn print_summary(report: &ScaleReport) -> bool {
    println!(
        "writes by replicas: {}  checked against the ownership windows: {}",
        report.writes, report.overlap.checked
    );
    println!(
        "writes by replica whose ownership windows overlap: {}",
        report.overlap.overlapping.len()
    );
    println!(
        "writes outside the writer's own ownership window: {}",
        report.overlap.outside_own_window.len()
    );
    for (w, other) in report.overlap.overlapping.iter().take(10) {
        println!(
            "  overlap: {} wrote {} {}/{} at rv {} while {} held it",
            w.manager, w.resource, w.namespace, w.name, w.resource_version, other
        );
    }
    for w in report.overlap.outside_own_window.iter().take(10) {
        println!(
            "  outside: {} wrote {} {}/{} at rv {}",
            w.manager, w.resource, w.namespace, w.name, w.resource_version
        );
    }
    report.overlap.is_clean()
}

/// The scenario's resourceVersion source over a shared in-process sim.
pub fn sim_rv(sim: &Arc<kinformer_sim::Sim>) -> RvSource {
    let sim = Arc::clone(sim);
    Arc::new(move || sim.resource_version())
}
