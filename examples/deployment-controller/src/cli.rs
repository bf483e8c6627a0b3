//! deployment-controller: kube-controller-manager's deployment controller on kinformer's shared
//! informers, listers and workqueue.
//!
//! ```text
//! cargo run -p deployment-controller                 # embedded demo, exits by itself
//! cargo run -p deployment-controller -- --workers 4 --duration 30
//! cargo run -p deployment-controller -- --serve --write-kubeconfig /tmp/demo.kubeconfig
//! KUBECONFIG=~/.kube/config cargo run -p deployment-controller -- --selector app.kubernetes.io/managed-by=kinformer
//! ```
//!
//! Without a kubeconfig (`KUBECONFIG` or `~/.kube/config`), or with `--embedded`, it starts
//! kinformer's simulated API server in-process, plus a simulation of what the sim does not run
//! (ReplicaSet controller, kubelet readiness, garbage collector: `embedded/cluster.rs`), and plays a short
//! scenario (`embedded/demo.rs`) before printing a summary. With a kubeconfig it manages the Deployments
//! matching `--selector` in that cluster until Ctrl-C (or `--duration`); the cluster's own
//! deployment controller must be off there (see the README).
//!
//! Leader election (`--leader-elect`, on by default against a cluster, off in the embedded demo
//! unless asked): every replica starts its informers, only the holder of the Lease runs the
//! workers, and a replica that loses the lease exits with status 1 (`crate::leader`).
//!
//! The controller itself is the `deployment_controller` library (`src/lib.rs`); this binary only
//! parses flags and wires it to a cluster or to the embedded simulation.

use std::{future::Future, path::Path, path::PathBuf, time::Duration, time::Instant};

use anyhow::Context as _;
use clap::Parser;
use kinformer_actors::{
    CacheMode, LeaderElectionConfig, LeanConfig, Telemetry,
    trace::{TraceSink, TraceSinkConfig, close_env_sink},
};
use kinformer_sim::logging::{self, LogFormat};
use kinformer_sim::{Sim, SimConfig};
use kube::Client;

use crate::{
    controller::{
        ControllerOptions, DEFAULT_SELECTOR, DeploymentController, DeploymentSummary, Stats,
        summarize,
    },
    embedded::{
        cluster::{ClusterOptions, ClusterSim},
        demo,
    },
    leader::{self, LeaderElected, LeaderError, parse_duration},
    ring::{self, RingOptions, RingReplica},
    shard::ShardOptions,
};

/// A Deployment controller built on kinformer's shared informers, listers and workqueue.
#[derive(Parser, Debug)]
#[command(
    name = "deployment-controller",
    version,
    after_help = "\
Embedded mode for kubectl:
  deployment-controller --serve --write-kubeconfig /tmp/demo.kubeconfig
  kubectl --kubeconfig /tmp/demo.kubeconfig -n demo rollout history deployment/web
  kubectl --kubeconfig /tmp/demo.kubeconfig -n demo set image deployment/web app=nginx:1.29
  kubectl --kubeconfig /tmp/demo.kubeconfig -n demo rollout undo deployment/web
The demo plays its scenario, then (with --serve) keeps the simulated API server, the cluster
simulation and the controller running until Ctrl-C or --duration.

Leader election (a coordination.k8s.io/v1 Lease): every replica starts its informers; only the
holder runs the workers; a replica that loses the lease exits with status 1."
)]
struct Args {
    /// Concurrent reconciles.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Log lines (on stderr) as `text` (human-readable; coloured only on a terminal without
    /// `NO_COLOR`) or `json` (one object a line, for a log collector).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Use the embedded simulated API server even if a kubeconfig exists.
    #[arg(long)]
    embedded: bool,
    /// Run this long (seconds, or humantime: 90s, 2m), then shut down and print the summary
    /// (with the peak RSS); Ctrl-C and SIGTERM end the run the same way. Default: until Ctrl-C;
    /// the embedded demo ends by itself once its scenario is done.
    // `--run-for` was a second flag for the same thing: kept as a hidden alias for scripts.
    #[arg(long, alias = "run-for", value_name = "DURATION", value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Manage only Deployments matching this label selector ("" for all).
    #[arg(long, default_value = DEFAULT_SELECTOR)]
    selector: String,
    /// Manage only this namespace (default: all).
    #[arg(long)]
    namespace: Option<String>,
    /// Embedded mode: how long a simulated pod takes to become Ready, in milliseconds.
    #[arg(long, default_value_t = 300, value_name = "MS")]
    pod_ready_ms: u64,
    /// Serve /metrics, /healthz, /readyz and /debug/informers on this address, e.g.
    /// 127.0.0.1:9090; a non-loopback one (0.0.0.0:9090 in a pod, for Prometheus and the
    /// kubelet's probes) shows object names and errors to whoever can reach it.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Write a message trace of every event's path (JSON lines) to FILE; read it with
    /// `kinformer-trace` (follow, why, stats, slow, chrome, html, replay). `KINFORMER_TRACE=FILE`
    /// does the same.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// With --trace: record each object's body too (never a Secret's), so that
    /// `kinformer-trace replay FILE` can play the run back into a fresh simulated API server.
    #[arg(long, requires = "trace")]
    trace_bodies: bool,
    /// Embedded mode: keep the simulated API server, the cluster simulation and the controller
    /// running after the demo scenario, until Ctrl-C (or --duration), for kubectl.
    #[arg(long)]
    serve: bool,
    /// Embedded mode: write the simulated API server's kubeconfig to FILE (default: a temporary
    /// file, removed at exit).
    #[arg(long, value_name = "FILE")]
    write_kubeconfig: Option<PathBuf>,
    /// Leader election: run the workers only while holding the Lease. Default: on against a
    /// cluster, off in the embedded demo; `--leader-elect` or `--leader-elect=true|false` decides.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    leader_elect: Option<bool>,
    /// How long other replicas wait from the last renew they observed before taking the lease
    /// over (seconds, or humantime: 15s, 1m).
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    leader_elect_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it steps down (below the lease duration).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    leader_elect_renew_deadline: Duration,
    /// Time between acquire and renew attempts.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    leader_elect_retry_period: Duration,
    /// Namespace of the Lease (default: kube-system against a cluster, the demo namespace
    /// embedded).
    #[arg(long, value_name = "NS")]
    leader_elect_resource_namespace: Option<String>,
    /// Name of the Lease (every replica uses the same).
    #[arg(long, value_name = "NAME", default_value = leader::DEFAULT_LEASE_NAME)]
    leader_elect_resource_name: String,
    /// This replica's identity in the Lease (default: hostname_UUID, as kube-controller-manager).
    #[arg(long, value_name = "ID")]
    leader_elect_identity: Option<String>,
    /// How the informers keep objects: `typed` (decoded, the default) or `lean` (the bytes the
    /// server sent, compressed, managedFields cut out; decoded when the controller reads them).
    #[arg(long, value_enum, default_value_t = Cache::Typed)]
    cache: Cache,
    /// Scale out (docs/scaling-out.md): run `--replicas` replicas in this process (or one,
    /// `--replica-id`), each with its own informers, workqueue, workers and field manager
    /// (`deployment-controller-<i>`), splitting the Deployments by the hash of their namespace.
    /// Not with leader election.
    #[arg(long)]
    sharded: bool,
    /// With --sharded: how many replicas in this process.
    #[arg(long, default_value_t = 3, value_name = "N")]
    replicas: u64,
    /// With --sharded: where the ranges come from. `ring`: each replica holds a Lease of the
    /// ring and the live replicas split the hash space, moving ranges as replicas come and go;
    /// `static`: replica i of N holds a fixed 1/N (nothing moves).
    #[arg(long, value_enum, default_value_t = Shards::Ring)]
    shards: Shards,
    /// With --sharded: run only replica ID in this process (one process per replica; its ring
    /// identity and field manager are `deployment-controller-ID`). At exit it prints its peak
    /// RSS and what it owned.
    #[arg(long, value_name = "ID")]
    replica_id: Option<String>,
    /// The ring's name: its Leases are `<name>-deployment-controller-<i>`, labelled
    /// `kinformer.io/ring=<name>`, in the `--leader-elect-resource-namespace` (default
    /// kube-system).
    #[arg(long, value_name = "NAME", default_value = ring::DEFAULT_RING)]
    ring_name: String,
    /// The ring: a replica silent this long is Expired, twice this long taken over (short by
    /// default, for the demo; 15s is the membership default).
    #[arg(long, value_name = "DURATION", default_value = "4s", value_parser = parse_duration)]
    ring_lease_duration: Duration,
    /// The ring: held ranges stay valid this long after a renew was sent (below the lease
    /// duration).
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    ring_renew_deadline: Duration,
    /// The ring: time between rounds (list the Leases, renew, claim, hand over).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    ring_retry_period: Duration,
    /// The ring: tokens per replica (more: a more even split, more ranges).
    #[arg(long, value_name = "N", default_value_t = 32)]
    ring_virtual_nodes: u32,
    /// Embedded only: play the scale-out scenario instead of the demo: 3 ring replicas, a few
    /// hundred Deployments over ~30 namespaces, one replica crashes, two more start (3 → 2 →
    /// 4); a report after each phase; exit status 1 if a phase does not converge or two
    /// replicas wrote in overlapping ownership windows.
    #[arg(long)]
    scale_scenario: bool,
    /// With --scale-scenario: log at INFO on stderr too (default: warnings only; the tables
    /// and a line per phase are on stdout). RUST_LOG overrides either.
    #[arg(long, short)]
    verbose: bool,
    /// With --scale-scenario or --seed-deployments: how many Deployments.
    #[arg(long, value_name = "N", default_value_t = 300)]
    scale_deployments: usize,
    /// With --scale-scenario or --seed-deployments: over how many namespaces
    /// (`00-scale`, `01-scale`, …).
    #[arg(long, value_name = "N", default_value_t = 30)]
    scale_namespaces: usize,
    /// Against a kubeconfig: create the `--scale-deployments` Deployments over
    /// `--scale-namespaces` namespaces, then run the cluster simulation (ReplicaSet
    /// controller, kubelet readiness, garbage collector) for a server that has none (the sim
    /// binary) until Ctrl-C, SIGTERM or --duration; no controller runs. For scripts/scale-out.sh.
    #[arg(long)]
    seed_and_simulate: bool,
}

/// `--shards`: where a sharded replica's ranges come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Shards {
    /// The Lease ring (`ShardMember`).
    Ring,
    /// Fixed shards (`ShardSelector::nth_of`).
    Static,
}

/// `--cache`: the informers' cache mode (docs/semantics.md I7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Cache {
    /// Decoded objects.
    Typed,
    /// The server's bytes, compressed, metadata parsed.
    Lean,
}

impl Args {
    /// The ring's options: the Lease namespace is leader election's flag, else kube-system.
    fn ring(&self) -> RingOptions {
        RingOptions {
            namespace: self
                .leader_elect_resource_namespace
                .clone()
                .unwrap_or_else(|| leader::DEFAULT_LEASE_NAMESPACE.into()),
            ring: self.ring_name.clone(),
            lease_duration: self.ring_lease_duration,
            renew_deadline: self.ring_renew_deadline,
            retry_period: self.ring_retry_period,
            virtual_nodes: self.ring_virtual_nodes,
            ..RingOptions::default()
        }
    }

    /// How long to run: `--duration` (or its alias `--run-for`).
    fn run_for(&self) -> Option<Duration> {
        self.duration
    }

    /// The leader election config, if leader election is on.
    fn leader_election(&self, embedded: bool) -> Option<LeaderElectionConfig> {
        if !self.leader_elect.unwrap_or(!embedded) {
            return None;
        }
        let namespace = self
            .leader_elect_resource_namespace
            .clone()
            .unwrap_or_else(|| {
                if embedded {
                    demo::NAMESPACE.into()
                } else {
                    leader::DEFAULT_LEASE_NAMESPACE.into()
                }
            });
        let identity = self
            .leader_elect_identity
            .clone()
            .unwrap_or_else(leader::default_identity);
        let mut c =
            LeaderElectionConfig::new(namespace, self.leader_elect_resource_name.clone(), identity);
        c.lease_duration = self.leader_elect_lease_duration;
        c.renew_deadline = self.leader_elect_renew_deadline;
        c.retry_period = self.leader_elect_retry_period;
        // Safe: the run stops the workers before the elector (LeaderElected::run_until), so
        // another replica may take over at once on Ctrl-C.
        c.release_on_cancel = true;
        Some(c)
    }
}

fn kubeconfig_present() -> bool {
    std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty())
        || std::env::var_os("HOME").is_some_and(|h| Path::new(&h).join(".kube/config").exists())
}

/// Resolves on Ctrl-C or (on unix) SIGTERM: a process manager's stop, or `kill`.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
        match term {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The process's peak resident set size in KiB (`VmHWM` in /proc/self/status; Linux only).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Resolves when `f` does, or never when there is none.
async fn maybe<F: Future>(f: Option<F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// The `deployment-controller` program: parses the flags (`std::env::args`), runs, and returns
/// what the process should report. The binary and the `deployment-controller` example both call it,
/// so the program is compiled once, in the library.
#[tokio::main]
pub async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // The scale scenario's output is its tables (stdout): its thousands of INFO lines only
    // with -v (or RUST_LOG).
    let default_filter = if args.scale_scenario && !args.verbose {
        "warn"
    } else {
        "info"
    };
    logging::init(args.log_format, default_filter)?;
    let started = Instant::now();
    if args.scale_scenario {
        return scale_scenario(&args).await;
    }
    if args.seed_and_simulate {
        return seed_and_simulate(&args).await;
    }
    let embedded = args.embedded || !kubeconfig_present();
    if !embedded {
        anyhow::ensure!(
            !args.serve && args.write_kubeconfig.is_none(),
            "--serve and --write-kubeconfig are for the embedded mode (add --embedded)"
        );
    }
    let election = args.leader_election(embedded);
    anyhow::ensure!(
        !args.sharded || election.is_none(),
        "--sharded replicas split the work instead of electing a leader (add --leader-elect=false)"
    );
    anyhow::ensure!(
        !args.sharded || args.replicas >= 1,
        "--replicas must be at least 1"
    );
    anyhow::ensure!(
        args.replica_id.is_none() || (args.sharded && args.shards == Shards::Ring),
        "--replica-id runs one replica of the ring: add --sharded (with --shards ring)"
    );

    let (client, sim) = if embedded {
        let sim = Sim::start(SimConfig {
            write_kubeconfig: args.write_kubeconfig.clone(),
            ..SimConfig::default()
        })
        .await
        .context("starting the embedded simulated API server")?;
        let kubectl = format!(
            "kubectl --kubeconfig {} -n {}",
            sim.kubeconfig_path().display(),
            demo::NAMESPACE
        );
        // The kubectl hint only while the server stays up: without --serve the demo ends in
        // seconds, and with it the server (and a temporary kubeconfig).
        if args.serve {
            tracing::info!(url = sim.url(), kubeconfig = %sim.kubeconfig_path().display(),
                "embedded mode: simulated API server; try: {kubectl} get deploy,rs,pods");
            tracing::info!(
                "serving until Ctrl-C{}; try: {kubectl} rollout history deployment/web ; {kubectl} set image deployment/web app=nginx:1.29 ; {kubectl} rollout undo deployment/web ; {kubectl} rollout status deployment/web",
                args.duration
                    .map(|d| format!(" or {}", humantime::format_duration(d)))
                    .unwrap_or_default()
            );
        } else {
            tracing::info!(
                url = sim.url(),
                "embedded mode: simulated API server, up until the demo scenario ends (--serve keeps it up for kubectl)"
            );
        }
        (sim.client(), Some(sim))
    } else {
        let client = Client::try_default()
            .await
            .context("loading the kubeconfig")?;
        tracing::info!(selector = %args.selector, "cluster mode: managing the Deployments matching the selector");
        (client, None)
    };

    // Before any informer starts, so the trace holds the first list too.
    let trace = match &args.trace {
        Some(path) => Some(
            TraceSink::start_with(
                path,
                TraceSinkConfig {
                    bodies: args.trace_bodies,
                    ..TraceSinkConfig::default()
                },
            )
            .with_context(|| format!("starting the trace sink on {}", path.display()))?,
        ),
        None => None,
    };
    let telemetry = args.metrics_addr.map(|_| Telemetry::new());
    let mut options = ControllerOptions {
        workers: args.workers,
        selector: Some(args.selector.clone()),
        namespace: args.namespace.clone(),
        telemetry: telemetry.clone(),
        ..ControllerOptions::default()
    };
    if args.cache == Cache::Lean {
        let lean = LeanConfig::default().strip_managed_fields(true);
        options.informer = options.informer.cache(CacheMode::Lean(lean));
    }
    // Sharded: the other replicas (replica 0 is `controller` below, which the scenario and
    // the summary read: every replica caches every namespace for now).
    let mut replicas: Vec<DeploymentController> = Vec::new();
    // The ring's replicas (the same controllers as `replicas`, with their members).
    let mut ring_replicas: Vec<RingReplica> = Vec::new();
    if args.sharded && args.shards == Shards::Ring {
        let ids: Vec<String> = match &args.replica_id {
            Some(id) => vec![id.clone()],
            None => (0..args.replicas).map(|i| i.to_string()).collect(),
        };
        let ring = args.ring();
        tracing::info!(ring = %ring.ring, namespace = %ring.namespace, replicas = ?ids,
            lease_duration = ?ring.lease_duration, "sharded on the Lease ring");
        for id in ids {
            let r = RingReplica::new(client.clone(), id, &ring, options.clone(), None).await?;
            replicas.push(r.controller().clone());
            ring_replicas.push(r);
        }
        if let Some(t) = &telemetry {
            DeploymentController::register_shard_metrics(t, &replicas);
        }
    } else if args.sharded {
        for i in 0..args.replicas {
            let shard = ShardOptions::nth_of(i, args.replicas)?;
            let o = ControllerOptions {
                shard: Some(shard),
                ..options.clone()
            };
            replicas.push(DeploymentController::new(client.clone(), o).await?);
        }
        if let Some(t) = &telemetry {
            DeploymentController::register_shard_metrics(t, &replicas);
        }
    }
    // Under leader election the run owns the controller: informers now, workers while leading.
    let (controller, elected) = match election {
        _ if args.sharded => (replicas.remove(0), None),
        Some(config) => {
            let elected = LeaderElected::start(client.clone(), options, config)
                .await
                .context("starting leader election")?;
            (elected.controller().clone(), Some(elected))
        }
        None => (
            DeploymentController::new(client.clone(), options).await?,
            None,
        ),
    };
    // Served once the controller registered its informers (neither constructor waits for a
    // sync): before that, /readyz would answer ok with nothing registered to wait for.
    let endpoint = match (&telemetry, args.metrics_addr) {
        (Some(t), Some(addr)) => {
            // The library refuses a non-loopback address unless asked; naming one in the
            // flag is asking (as kube-controller-manager's --bind-address).
            let serving = if addr.ip().is_loopback() {
                t.serve(addr).await
            } else {
                tracing::warn!(%addr, "telemetry served beyond this host (not a loopback address)");
                t.serve_on_any_interface(addr).await
            };
            let e = serving.with_context(|| format!("serving metrics on {addr}"))?;
            tracing::info!(
                "metrics: http://{0}/metrics  health: http://{0}/healthz http://{0}/readyz  debug: http://{0}/debug/informers",
                e.local_addr()
            );
            Some(e)
        }
        _ => None,
    };
    let cluster = match &sim {
        // Its own client (own connection pool), as a separate process would have.
        Some(sim) => Some(
            ClusterSim::start(
                Client::try_from(sim.kube_config()).context("cluster simulation client")?,
                ClusterOptions {
                    ready_after: Duration::from_millis(args.pod_ready_ms),
                    ..ClusterOptions::default()
                },
            )
            .await?,
        ),
        None => None,
    };

    let mut interrupted = false;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut elected_run = match elected {
        Some(e) => Some(tokio::spawn(e.run_until(async {
            let _ = stop_rx.await;
        }))),
        None => {
            let all = async {
                if ring_replicas.is_empty() {
                    controller.start().await?;
                    for r in &replicas {
                        r.start().await?;
                    }
                } else {
                    // Each syncs its caches, then joins the ring.
                    for r in &mut ring_replicas {
                        r.start().await?;
                    }
                }
                Ok::<(), anyhow::Error>(())
            };
            tokio::select! {
                r = all => r?,
                _ = shutdown_signal() => interrupted = true,
            }
            None
        }
    };

    // Sharded, each replica caches its ranges only: the demo watches convergence through an
    // observer's informers of every namespace.
    let observer = (embedded && args.sharded).then(|| {
        let f = kinformer_actors::SharedInformerFactory::new(client.clone());
        // The Deployments the replicas manage, as their informers select them.
        let d = f.informer_with::<k8s_openapi::api::apps::v1::Deployment>(
            kinformer_actors::InformerOptions {
                label_selector: Some(args.selector.clone()).filter(|s| !s.is_empty()),
                ..kinformer_actors::InformerOptions::default()
            },
        );
        let rs = f.informer::<k8s_openapi::api::apps::v1::ReplicaSet>();
        (f, d.lister(), rs.lister())
    });
    if let Some((f, _, _)) = &observer {
        f.start().context("starting the observer's informers")?;
    }
    let mut scenario = (embedded && args.replica_id.is_none()).then(|| {
        let (deployments, replica_sets) = match &observer {
            Some((_, d, rs)) => (d.clone(), rs.clone()),
            None => (controller.deployments(), controller.replica_sets()),
        };
        tokio::spawn(crate::embedded::demo::scenario(
            client.clone(),
            deployments,
            replica_sets,
        ))
    });
    // A failed scenario is a failed run: reported, cleaned up after, and the exit status is 1.
    let mut scenario_failed: Option<anyhow::Error> = None;
    if !interrupted {
        let duration = args.run_for().map(tokio::time::sleep);
        let mut duration = std::pin::pin!(maybe(duration));
        loop {
            tokio::select! {
                _ = shutdown_signal() => {
                    tracing::info!("Ctrl-C or SIGTERM: shutting down");
                    break;
                }
                _ = &mut duration => {
                    tracing::info!("duration elapsed: shutting down");
                    break;
                }
                r = maybe(scenario.as_mut()) => {
                    match r {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tracing::error!(error = %e, "demo scenario failed");
                            scenario_failed = Some(e);
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "demo scenario task failed");
                            scenario_failed = Some(e.into());
                        }
                    }
                    scenario = None;
                    // The scenario ends the run unless a duration was given or --serve asked
                    // to keep serving.
                    if args.run_for().is_none() && !args.serve {
                        break;
                    }
                    if args.serve {
                        tracing::info!("demo scenario done; still serving (Ctrl-C to stop)");
                    }
                }
                r = maybe(elected_run.as_mut()) => {
                    elected_run = None;
                    leader_run_ended(r);
                }
            }
        }
    }
    if let Some(s) = scenario {
        if s.is_finished() {
            match s.await {
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "demo scenario failed");
                    scenario_failed = Some(e);
                }
                Err(e) => scenario_failed = Some(e.into()),
                Ok(Ok(())) => {}
            }
        } else {
            s.abort();
        }
    }

    // What each replica owned, before the ring's replicas leave (and own nothing).
    if args.sharded {
        for c in std::iter::once(&controller).chain(&replicas) {
            let Some(s) = c.shard_stats() else { continue };
            println!(
                "replica {}: held {:.3} of the namespace hash space ({})  Deployments owned {}  dropped not owned {}  writes skipped {}  hand-overs {}  drains {} ({:?})",
                s.id,
                s.held_fraction,
                s.held,
                s.keys_owned,
                s.dropped_not_owned,
                s.skipped_not_owned,
                s.handovers,
                s.drains,
                s.drain_time
            );
            if let Some(o) = c.ownership() {
                let owned: std::collections::BTreeSet<String> = c
                    .deployments()
                    .list()
                    .iter()
                    .filter_map(|d| d.metadata.namespace.clone())
                    .filter(|ns| o.owns_value(ns))
                    .collect();
                println!(
                    "replica {} owned namespaces ({}): {}  lists {}",
                    s.id,
                    owned.len(),
                    owned.into_iter().collect::<Vec<_>>().join(" "),
                    c.list_requests()
                );
            }
        }
    }
    // The ring's replicas leave in order: each drains and releases its Lease, the others
    // (still running) take its ranges at once.
    for r in &mut ring_replicas {
        if let Err(e) = r.leave().await {
            tracing::warn!(replica = r.id(), error = %e, "leaving the ring");
        }
    }
    match elected_run {
        Some(run) => {
            let _ = stop_tx.send(());
            leader_run_ended(run.await);
        }
        None => {
            controller.shutdown().await;
            for r in &replicas {
                r.shutdown().await;
            }
        }
    }
    if let Some(c) = &cluster {
        c.shutdown().await;
    }
    if let Some((f, _, _)) = &observer {
        f.shutdown().await;
    }
    // Sharded, the work is every replica's and no replica's cache holds every Deployment (its
    // own ranges only, and only while it held them): the counters are added up and the
    // Deployments listed from the observer, which watched every namespace to the end.
    let all: Vec<&DeploymentController> = std::iter::once(&controller).chain(&replicas).collect();
    let listing = match &observer {
        Some((_, d, rs)) => summarize(d, rs),
        None => controller.summary(),
    };
    print_summary(
        &all,
        &listing,
        cluster.as_ref(),
        &args,
        embedded,
        started.elapsed(),
    );
    if let Some(e) = endpoint {
        e.shutdown().await;
    }
    // Close the trace (its `end` line) whether it was asked by flag or by KINFORMER_TRACE.
    let closed = match trace {
        Some(guard) => Some(guard.close()),
        None => close_env_sink(),
    };
    match closed {
        Some(Ok(stats)) => tracing::info!(
            written = stats.written,
            dropped = stats.dropped,
            "trace closed"
        ),
        Some(Err(e)) => tracing::error!(error = %e, "closing the trace"),
        None => {}
    }
    if let Some(sim) = sim {
        sim.shutdown().await;
    }
    match scenario_failed {
        Some(e) => Err(e.context("the demo scenario failed")),
        None => Ok(()),
    }
}

/// Handles the end of a leader-elected run: a lost lease (or any failure of the election) ends
/// the process at once with status 1, as client-go's `OnStoppedLeading` (`klog.Fatalf`) does;
/// nothing is drained, the controller's writes are already refused.
fn leader_run_ended(r: Result<Result<leader::RunSummary, LeaderError>, tokio::task::JoinError>) {
    match r {
        Ok(Ok(s)) => tracing::info!(led = s.led, "leader election: stopped"),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "leader election: exiting");
            std::process::exit(1);
        }
        Err(e) => {
            tracing::error!(error = %e, "leader election task failed: exiting");
            std::process::exit(1);
        }
    }
}

fn print_summary(
    controllers: &[&DeploymentController],
    deployments: &[DeploymentSummary],
    cluster: Option<&ClusterSim>,
    args: &Args,
    embedded: bool,
    elapsed: Duration,
) {
    let stats: Vec<Stats> = controllers.iter().map(|c| c.stats()).collect();
    let s = Stats::sum(&stats);
    println!();
    println!("== deployment-controller summary ==");
    println!(
        "ran {:.1}s with {} workers{} against {}",
        elapsed.as_secs_f64(),
        args.workers.max(1),
        if controllers.len() > 1 {
            format!(" in each of {} replicas", controllers.len())
        } else {
            String::new()
        },
        if embedded {
            "the embedded simulated API server"
        } else {
            "the kubeconfig's cluster"
        }
    );
    println!(
        "reconciles {} (of deleted Deployments: {})  errors {}  409 conflicts retried {}  malformed skipped {}  dropped {}",
        s.syncs, s.gone, s.errors, s.conflicts, s.invalid, s.dropped
    );
    let informers: usize = controllers.iter().map(|c| c.factory().len()).sum();
    let watches: u64 = controllers.iter().map(|c| c.watch_requests()).sum();
    let left: usize = controllers.iter().map(|c| c.queue().len()).sum();
    println!(
        "queue: adds {}  rate-limited requeues {}  left {}  (informers: {}, watches opened {})",
        s.queue_adds, s.requeues, left, informers, watches
    );
    println!(
        "writes: ReplicaSets created {}  scaled {}  deleted {}  status updates {}",
        s.rs_created, s.rs_scaled, s.rs_deleted, s.status_updates
    );
    println!(
        "conflicts per status write: {}  (waits for the cache to hold our own write: {}, ran out: {}; stale plans not written: {})",
        match s.conflict_rate() {
            Some(r) => format!("{:.1}% ({} / {})", r * 100.0, s.conflicts, s.status_updates),
            None => "- (no status write)".into(),
        },
        s.own_write_waits,
        s.own_write_timeouts,
        s.stale_plans
    );
    if let Some(c) = cluster.map(ClusterSim::stats) {
        println!(
            "cluster simulation: pods created {}  deleted {}  marked ready {}  garbage-collected ReplicaSets {}  pods {}",
            c.pods_created, c.pods_deleted, c.pods_ready, c.rs_collected, c.pods_collected
        );
    }
    match peak_rss_kib() {
        Some(kib) => println!("peak RSS: {:.1} MiB (VmHWM {kib} kB)", kib as f64 / 1024.0),
        None => println!("peak RSS: unknown (no /proc/self/status)"),
    }
    if deployments.len() > 50 {
        println!(
            "deployments ({}; complete {}): not listed (more than 50)",
            deployments.len(),
            deployments.iter().filter(|d| d.complete).count()
        );
        return;
    }
    println!("deployments ({}):", deployments.len());
    for d in deployments {
        let rss: Vec<String> = d
            .replica_sets
            .iter()
            .map(|(name, replicas, ready)| format!("{name}={replicas}({ready} ready)"))
            .collect();
        println!(
            "  {:<16} {}/{} updated {} available {}  gen {}/{} {}  image {}  rs [{}]",
            d.key,
            d.ready,
            d.replicas,
            d.updated,
            d.available,
            d.observed_generation,
            d.generation,
            if d.complete {
                "complete"
            } else {
                "progressing"
            },
            d.image,
            rss.join(" ")
        );
    }
}

/// `--scale-scenario`: the embedded server and cluster simulation, the scale-out scenario
/// (`embedded::scale`), a report after each phase; an error (exit status 1) when a phase does
/// not converge or the write log shows overlapping ownership.
async fn scale_scenario(args: &Args) -> anyhow::Result<()> {
    use crate::embedded::scale;
    let sim = std::sync::Arc::new(
        Sim::start(SimConfig {
            write_kubeconfig: args.write_kubeconfig.clone(),
            // A replica's KEP-5647 wait completes on a quiet shard at the next bookmark.
            bookmark_interval: Duration::from_secs(1),
            ..SimConfig::default()
        })
        .await
        .context("starting the embedded simulated API server")?,
    );
    tracing::info!(url = sim.url(), kubeconfig = %sim.kubeconfig_path().display(),
        "scale scenario: embedded simulated API server");
    let cluster = ClusterSim::start(
        Client::try_from(sim.kube_config()).context("cluster simulation client")?,
        ClusterOptions {
            ready_after: Duration::from_millis(args.pod_ready_ms),
            workers: 4,
            ..ClusterOptions::default()
        },
    )
    .await?;
    let options = scale::ScaleOptions {
        deployments: args.scale_deployments,
        namespaces: args.scale_namespaces,
        ring: args.ring(),
        workers: args.workers,
        ..scale::ScaleOptions::default()
    };
    println!(
        "scale scenario: {} Deployments over {} namespaces; ring {} (lease {:?}, renew {:?}, rounds {:?}, {} tokens per replica)",
        options.deployments,
        options.namespaces,
        options.ring.ring,
        options.ring.lease_duration,
        options.ring.renew_deadline,
        options.ring.retry_period,
        options.ring.virtual_nodes
    );
    let result = scale::run_with_progress(
        sim.client(),
        scale::sim_rv(&sim),
        options,
        |start| println!("{start}"),
        |p| println!("{p}"),
    )
    .await;
    cluster.shutdown().await;
    if let Ok(sim) = std::sync::Arc::try_unwrap(sim) {
        sim.shutdown().await;
    }
    let report = result?;
    anyhow::ensure!(
        scale::print_summary(&report),
        "replicas wrote in overlapping ownership windows"
    );
    Ok(())
}

/// `--seed-and-simulate`: against a kubeconfig, creates the scale scenario's Deployments, then
/// runs the cluster simulation until Ctrl-C, SIGTERM or `--duration`.
async fn seed_and_simulate(args: &Args) -> anyhow::Result<()> {
    use crate::embedded::scale;
    let client = Client::try_default()
        .await
        .context("loading the kubeconfig")?;
    scale::create_deployments(&client, args.scale_deployments, args.scale_namespaces)
        .await
        .context("creating the Deployments")?;
    println!(
        "seeded {} Deployments over {} namespaces",
        args.scale_deployments, args.scale_namespaces
    );
    let cluster = ClusterSim::start(
        client,
        ClusterOptions {
            ready_after: Duration::from_millis(args.pod_ready_ms),
            workers: 4,
            ..ClusterOptions::default()
        },
    )
    .await?;
    let run_for = maybe(args.run_for().map(tokio::time::sleep));
    tokio::select! {
        _ = shutdown_signal() => {}
        _ = run_for => {}
    }
    cluster.shutdown().await;
    let s = cluster.stats();
    println!(
        "cluster simulation: pods created {}  deleted {}  marked ready {}",
        s.pods_created, s.pods_deleted, s.pods_ready
    );
    Ok(())
}
