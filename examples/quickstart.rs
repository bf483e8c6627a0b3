//! A Pod informer with a handler and a lister.
//!
//! `cargo run --example quickstart` runs against the cluster of your kubeconfig
//! (`KUBECONFIG` or `~/.kube/config`), or, when there is none (or with `--embedded`), against
//! kinformer's simulated API server started in-process with a little churn to watch.

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use kinformer_actors::{ResourceEventHandlerFuncs, SharedInformerFactory};
use kinformer_sim::{ChurnConfig, Sim, SimConfig};
use kube::{Client, ResourceExt};

fn has_kubeconfig() -> bool {
    std::env::var_os("KUBECONFIG").is_some()
        || std::env::var_os("HOME")
            .map(|h| std::path::Path::new(&h).join(".kube/config").exists())
            .unwrap_or(false)
}

#[actix::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        // Colour only on a terminal, and never with NO_COLOR: redirected logs stay plain text.
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .init();

    let embedded = std::env::args().any(|a| a == "--embedded") || !has_kubeconfig();
    let (client, sim) = if embedded {
        let sim = Sim::start(SimConfig {
            seed_demo: true,
            ..SimConfig::default()
        })
        .await
        .context("starting the simulated API server")?;
        tracing::info!(
            url = sim.url(),
            "no kubeconfig: using the embedded simulated API server"
        );
        (sim.client(), Some(sim))
    } else {
        (Client::try_default().await.context("kubeconfig")?, None)
    };

    let factory = SharedInformerFactory::new(client);
    let pods = factory.informer::<Pod>();
    pods.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .on_add(|pod: &Arc<Pod>, initial| {
                tracing::info!(pod = %pod.name_any(), ns = ?pod.namespace(), initial, "added")
            })
            .on_update(|_old: &Arc<Pod>, new: &Arc<Pod>| {
                tracing::info!(pod = %new.name_any(), rv = ?new.resource_version(), "updated")
            })
            .on_delete(|obj| tracing::info!(pod = %obj.object().name_any(), "deleted")),
    )
    .await?;

    factory.start()?;
    let synced = factory.wait_for_cache_sync(Duration::from_secs(60)).await;
    // Counts, not the map's debug print (one entry per informer, with its full type).
    let ok = synced.values().filter(|s| **s).count();
    tracing::info!(
        "caches synced: {ok} of {} informers, {} pods cached",
        synced.len(),
        pods.lister().len()
    );

    let churn = sim.as_ref().map(|s| {
        s.start_churn(ChurnConfig {
            rate_per_sec: 20.0,
            ..ChurnConfig::default()
        })
    });
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let lister = pods.lister();
        tracing::info!(
            cached = lister.len(),
            rv = %pods.last_sync_resource_version(),
            "lister: pods in cache"
        );
    }
    if let Some(c) = churn {
        c.stop();
    }
    let cached = pods.lister().len();
    factory.shutdown().await;
    if let Some(s) = sim {
        s.shutdown().await;
    }
    // The closing line, on stdout (the log is on stderr): the run ended by itself.
    println!(
        "quickstart: done after 5 s; {cached} pods in the lister at the end; informers shut down"
    );
    Ok(())
}
