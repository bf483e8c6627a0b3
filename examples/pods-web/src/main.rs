//! `pods-web`: an actix-web service on kinformer's Pod informer.
//!
//! `cargo run -p pods-web` serves on 127.0.0.1:8080: against the cluster of your kubeconfig
//! (`KUBECONFIG` or `~/.kube/config`), or, without one (or with `--embedded`), against
//! kinformer's simulated API server started in-process, with pods churning so the page moves.
//! Stdout gets one line `pods-web listening on http://ADDR` once bound, and one line
//! `shutdown report: ...` at the end; logs go to stderr. SIGTERM or Ctrl-C stops it in order
//! (server, handlers, informers) and it exits 0.

use std::{net::SocketAddr, time::Duration};

use anyhow::Context as _;
use clap::Parser;
use kinformer_sim::logging::{self, LogFormat};
use kinformer_sim::{ChurnConfig, ChurnKind, Sim, SimConfig};
use pods_web::{Options, PodsWeb};

#[derive(Parser, Debug)]
#[command(about = "An actix-web service answering from kinformer's Pod informer")]
struct Args {
    /// Where to listen (port 0: any free port, printed on stdout).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Use the embedded simulated API server even if a kubeconfig exists.
    #[arg(long)]
    embedded: bool,
    /// Embedded mode: pod changes per second made by the sim's churn (0: none).
    #[arg(long, default_value_t = 5.0)]
    churn_rate: f64,
    /// Only this namespace.
    #[arg(long)]
    namespace: Option<String>,
    /// HTTP worker threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Log lines as `text` (human-readable; coloured only on a terminal without `NO_COLOR`)
    /// or `json` (one object a line, for a log collector).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

fn has_kubeconfig() -> bool {
    std::env::var_os("KUBECONFIG").is_some()
        || std::env::var_os("HOME")
            .map(|h| std::path::Path::new(&h).join(".kube/config").exists())
            .unwrap_or(false)
}

/// SIGTERM and Ctrl-C (SIGINT), installed at once so that neither kills the process before it
/// can stop in order.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        Ok(Signals {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .context("installing the SIGTERM handler")?,
        })
    }

    /// Waits for either; says which.
    async fn recv(&mut self) -> anyhow::Result<&'static str> {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => Ok("SIGTERM"),
                r = tokio::signal::ctrl_c() => r.map(|()| "Ctrl-C").context("waiting for Ctrl-C"),
            }
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c()
                .await
                .context("waiting for Ctrl-C")?;
            Ok("Ctrl-C")
        }
    }
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    logging::init(args.log_format, "info")?;
    let mut signals = Signals::install()?;

    let embedded = args.embedded || !has_kubeconfig();
    let (client, sim) = if embedded {
        let sim = Sim::start(SimConfig {
            seed_demo: true,
            ..SimConfig::default()
        })
        .await
        .context("starting the simulated API server")?;
        tracing::info!(url = sim.url(), "using the embedded simulated API server");
        (sim.client(), Some(sim))
    } else {
        (
            kube::Client::try_default().await.context("kubeconfig")?,
            None,
        )
    };

    let app = PodsWeb::start(
        client,
        Options {
            addr: args.addr,
            workers: args.workers,
            namespace: args.namespace,
            ..Options::default()
        },
    )
    .await?;
    // The one line a script (or the tests) reads for the address.
    println!("pods-web listening on http://{}", app.local_addr());

    let churn = sim.as_ref().filter(|_| args.churn_rate > 0.0).map(|s| {
        s.start_churn(ChurnConfig {
            rate_per_sec: args.churn_rate,
            namespaces: vec!["shop".into(), "blog".into()],
            kinds: vec![ChurnKind::Pods],
            max_objects: 12,
            ..ChurnConfig::default()
        })
    });
    let pods = app.pods().clone();
    actix_web::rt::spawn(async move {
        match tokio::time::timeout(Duration::from_secs(60), pods.wait_for_sync()).await {
            Ok(()) => tracing::info!(cached = pods.lister().len(), "pod informer synced"),
            Err(_) => {
                tracing::warn!("the pod informer has not synced within 60 s; /readyz says so")
            }
        }
    });

    let signal = signals.recv().await?;
    tracing::info!(signal, "shutting down");
    if let Some(c) = churn {
        c.stop();
    }
    let report = app.shutdown().await;
    tracing::info!(%report, "shutdown report");
    println!("shutdown report: {report}");
    if let Some(s) = sim {
        s.shutdown().await;
    }
    Ok(())
}
