//! deployment-controller: kube-controller-manager's deployment controller on kinformer's shared
//! informers, listers and workqueue.
//!
//! ```text
//! cargo run --release -p deployment-controller                 # embedded demo, exits by itself
//! cargo run --release -p deployment-controller -- --workers 4 --duration 30
//! KUBECONFIG=~/.kube/config cargo run --release -p deployment-controller -- --selector app.kubernetes.io/managed-by=kinformer
//! ```
//!
//! Without a kubeconfig (`KUBECONFIG` or `~/.kube/config`), or with `--embedded`, it starts
//! kinformer's simulated API server in-process, plus a simulation of what the sim does not run
//! (ReplicaSet controller, kubelet readiness, garbage collector: `embedded/cluster.rs`), and plays a short
//! scenario (`embedded/demo.rs`) before printing a summary. With a kubeconfig it manages the Deployments
//! matching `--selector` in that cluster until Ctrl-C (or `--duration`); the cluster's own
//! deployment controller must be off there (see the README).
//!
//! The controller itself is the `deployment_controller` library (`src/lib.rs`); this binary only
//! parses flags and wires it to a cluster or to the embedded simulation.

use std::{future::Future, path::Path, time::Duration, time::Instant};

use anyhow::Context as _;
use clap::Parser;
use kinformer_actors::{
    Telemetry,
    trace::{TraceSink, close_env_sink},
};
use kinformer_sim::{Sim, SimConfig};
use kube::Client;

use deployment_controller::{
    controller::{ControllerOptions, DEFAULT_SELECTOR, DeploymentController},
    embedded::cluster::{ClusterOptions, ClusterSim},
};

/// A Deployment controller built on kinformer's shared informers, listers and workqueue.
#[derive(Parser, Debug)]
#[command(name = "deployment-controller", version)]
struct Args {
    /// Concurrent reconciles.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Use the embedded simulated API server even if a kubeconfig exists.
    #[arg(long)]
    embedded: bool,
    /// Run this many seconds, then shut down and print the summary (default: until Ctrl-C; the
    /// embedded demo ends by itself once its scenario is done).
    #[arg(long, value_name = "SECS")]
    duration: Option<u64>,
    /// Manage only Deployments matching this label selector ("" for all).
    #[arg(long, default_value = DEFAULT_SELECTOR)]
    selector: String,
    /// Manage only this namespace (default: all).
    #[arg(long)]
    namespace: Option<String>,
    /// Embedded mode: how long a simulated pod takes to become Ready, in milliseconds.
    #[arg(long, default_value_t = 300, value_name = "MS")]
    pod_ready_ms: u64,
    /// Serve /metrics, /healthz, /readyz and /debug/informers on this address (loopback only,
    /// e.g. 127.0.0.1:9090).
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Write a message trace of every event's path (JSON lines) to FILE; read it with
    /// `kinformer-trace` (follow, stats, slow, chrome, html). `KINFORMER_TRACE=FILE` does the same.
    #[arg(long, value_name = "FILE")]
    trace: Option<std::path::PathBuf>,
}

fn kubeconfig_present() -> bool {
    std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty())
        || std::env::var_os("HOME").is_some_and(|h| Path::new(&h).join(".kube/config").exists())
}

/// Resolves when `f` does, or never when there is none.
async fn maybe<F: Future>(f: Option<F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let started = Instant::now();
    let embedded = args.embedded || !kubeconfig_present();

    let (client, sim) = if embedded {
        let sim = Sim::start(SimConfig::default())
            .await
            .context("starting the embedded simulated API server")?;
        tracing::info!(url = sim.url(), kubeconfig = %sim.kubeconfig_path().display(),
            "embedded mode: simulated API server (try: kubectl --kubeconfig <that file> get deploy,rs,pods -n demo)");
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
            TraceSink::start(path)
                .with_context(|| format!("starting the trace sink on {}", path.display()))?,
        ),
        None => None,
    };
    let telemetry = args.metrics_addr.map(|_| Telemetry::new());
    let endpoint = match (&telemetry, args.metrics_addr) {
        (Some(t), Some(addr)) => {
            let e = t
                .serve(addr)
                .await
                .with_context(|| format!("serving metrics on {addr}"))?;
            tracing::info!(
                "metrics: http://{0}/metrics  health: http://{0}/healthz http://{0}/readyz  debug: http://{0}/debug/informers",
                e.local_addr()
            );
            Some(e)
        }
        _ => None,
    };
    let controller = DeploymentController::new(
        client.clone(),
        ControllerOptions {
            workers: args.workers,
            selector: Some(args.selector.clone()),
            namespace: args.namespace.clone(),
            telemetry,
            ..ControllerOptions::default()
        },
    )
    .await?;
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
    tokio::select! {
        r = controller.start() => r?,
        _ = tokio::signal::ctrl_c() => interrupted = true,
    }

    let mut scenario = embedded.then(|| {
        tokio::spawn(deployment_controller::embedded::demo::scenario(
            client.clone(),
            controller.deployments(),
            controller.replica_sets(),
        ))
    });
    if !interrupted {
        let duration = args
            .duration
            .map(|s| tokio::time::sleep(Duration::from_secs(s)));
        // The scenario ends the run only when no duration was given.
        let scenario_ends = scenario.as_mut().filter(|_| args.duration.is_none());
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("Ctrl-C: shutting down"),
            _ = maybe(duration) => tracing::info!("duration elapsed: shutting down"),
            r = maybe(scenario_ends) => {
                match r {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::error!(error = %e, "demo scenario failed"),
                    Err(e) => tracing::error!(error = %e, "demo scenario task failed"),
                }
                scenario = None;
            }
        }
    }
    if let Some(s) = scenario {
        if s.is_finished() {
            if let Ok(Err(e)) = s.await {
                tracing::error!(error = %e, "demo scenario failed");
            }
        } else {
            s.abort();
        }
    }

    controller.shutdown().await;
    if let Some(c) = &cluster {
        c.shutdown().await;
    }
    print_summary(
        &controller,
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
    Ok(())
}

fn print_summary(
    controller: &DeploymentController,
    cluster: Option<&ClusterSim>,
    args: &Args,
    embedded: bool,
    elapsed: Duration,
) {
    let s = controller.stats();
    println!();
    println!("== deployment-controller summary ==");
    println!(
        "ran {:.1}s with {} workers against {}",
        elapsed.as_secs_f64(),
        args.workers.max(1),
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
    println!(
        "queue: adds {}  rate-limited requeues {}  left {}  (informers: {}, one watch each)",
        s.queue_adds,
        s.requeues,
        controller.queue().len(),
        controller.factory().len()
    );
    println!(
        "writes: ReplicaSets created {}  scaled {}  deleted {}  status updates {}",
        s.rs_created, s.rs_scaled, s.rs_deleted, s.status_updates
    );
    if let Some(c) = cluster.map(ClusterSim::stats) {
        println!(
            "cluster simulation: pods created {}  deleted {}  marked ready {}  garbage-collected ReplicaSets {}  pods {}",
            c.pods_created, c.pods_deleted, c.pods_ready, c.rs_collected, c.pods_collected
        );
    }
    let deployments = controller.summary();
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
