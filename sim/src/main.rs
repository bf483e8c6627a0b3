//! `kinformer-sim`: run the simulated Kubernetes API server from the command line.
//!
//! ```text
//! kinformer-sim --port 8080 --write-kubeconfig /tmp/sim.kubeconfig --churn 20/s --seed-demo
//! kubectl --kubeconfig /tmp/sim.kubeconfig get pods -A
//! curl -X POST http://127.0.0.1:8080/sim/faults/drop-watches
//! ```

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use kinformer_sim::logging::{self, LogFormat};
use kinformer_sim::{ChurnConfig, Sim, SimConfig, parse_rate};

/// A simulated Kubernetes API server speaking the real HTTP protocol (list/watch, discovery,
/// status, fault injection under /sim/...).
#[derive(Debug, Parser)]
#[command(name = "kinformer-sim", version)]
struct Args {
    /// TCP port (0 = ephemeral).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Write a kubeconfig for this server to FILE.
    #[arg(long, value_name = "FILE")]
    write_kubeconfig: Option<PathBuf>,
    /// Churn pods and configmaps at this rate (e.g. `20/s`).
    #[arg(long, value_name = "N/s", value_parser = parse_rate)]
    churn: Option<f64>,
    /// Namespaces for --churn (comma-separated).
    #[arg(long, default_value = "churn", value_delimiter = ',')]
    churn_namespaces: Vec<String>,
    /// Seed of the churn sequence.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Create demo namespaces, nodes, deployments, replica sets and pods.
    #[arg(long)]
    seed_demo: bool,
    /// Events kept per resource for watch resumption.
    #[arg(long, default_value_t = 10_000)]
    watch_cache_size: usize,
    /// Seconds between BOOKMARK events on watches that allow them.
    #[arg(long, default_value_t = 60.0)]
    bookmark_interval_secs: f64,
    /// kube-apiserver's `ShardedListAndWatch` feature gate (`shardSelector` on LIST and
    /// WATCH); `--sharded-list-and-watch=false` plays a server without it.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    sharded_list_and_watch: bool,
    /// Log lines as `text` (human-readable; coloured only on a terminal without `NO_COLOR`)
    /// or `json` (one object a line, for a log collector).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    logging::init(args.log_format, "info")?;
    let bookmark = Duration::try_from_secs_f64(args.bookmark_interval_secs)
        .context("--bookmark-interval-secs")?;
    let cfg = SimConfig {
        port: args.port,
        bind: args.bind,
        watch_cache_size: args.watch_cache_size,
        bookmark_interval: bookmark,
        write_kubeconfig: args.write_kubeconfig.clone(),
        seed_demo: args.seed_demo,
        sharded_list_and_watch: args.sharded_list_and_watch,
        ..SimConfig::default()
    };
    let sim = Sim::start(cfg)
        .await
        .context("starting the simulated API server")?;
    println!("kinformer-sim listening on {}", sim.url());
    println!("kubeconfig: {}", sim.kubeconfig_path().display());
    if let Some(rate) = args.churn {
        println!("churn: {rate}/s in {:?}", args.churn_namespaces);
        sim.start_managed_churn(ChurnConfig {
            rate_per_sec: rate,
            namespaces: args.churn_namespaces.clone(),
            seed: args.seed,
            ..ChurnConfig::default()
        });
    }
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    if let Some(c) = sim.managed_churn_counts() {
        eprintln!("churn: {c:?}");
    }
    sim.shutdown().await;
    Ok(())
}
