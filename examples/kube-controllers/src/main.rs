//! `cargo run -p kube-controllers`: two kube-rs Controllers and a kinformer handler on one Pod
//! informer, against kinformer's simulated API server started in-process. It creates pods
//! (some before the informer starts, some after), waits until both controllers reconciled every
//! pod and the handler heard of each, prints what each did and how many LISTs and WATCHes of
//! pods the server saw (one of each), and exits (status 1 if that did not happen in time).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kinformer_sim::{Sim, SimConfig, Verb};
use kube::api::{Api, PostParams};

const PODS_BEFORE: usize = 4;
const PODS_AFTER: usize = 4;
const DEADLINE: Duration = Duration::from_secs(30);

async fn create(api: &Api<Pod>, name: &str) -> anyhow::Result<()> {
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.into());
    pod.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into())]));
    // One container: kube-apiserver (and the sim) refuse a pod without.
    pod.spec = Some(PodSpec {
        containers: vec![Container {
            name: "app".into(),
            image: Some("registry.example/app:1".into()),
            ..Container::default()
        }],
        ..PodSpec::default()
    });
    api.create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("creating pod {name}"))?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs on stderr, coloured only on a terminal without NO_COLOR (the sim's binary's setup).
    kinformer_sim::logging::init(kinformer_sim::logging::LogFormat::Text, "info")?;
    let sim = Sim::start(SimConfig::default())
        .await
        .context("starting the simulated API server")?;
    let client = sim.client();
    let api: Api<Pod> = Api::namespaced(client.clone(), "demo");
    for i in 0..PODS_BEFORE {
        create(&api, &format!("before-{i}")).await?;
    }
    let running = kube_controllers::start(client).await?;
    for i in 0..PODS_AFTER {
        create(&api, &format!("after-{i}")).await?;
    }

    let total = PODS_BEFORE + PODS_AFTER;
    let counts = running.counts.clone();
    let started = Instant::now();
    let done = || {
        counts.annotated().len() == total
            && counts.counted().len() == total
            && counts.heard().len() == total
    };
    while !done() && started.elapsed() < DEADLINE {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ok = done();
    println!("pods: {total} ({PODS_BEFORE} before the informer started, {PODS_AFTER} after)");
    println!(
        "annotator (Controller::for_shared_stream): {} reconciles, {} pods annotated",
        counts
            .annotator_reconciles
            .load(std::sync::atomic::Ordering::Relaxed),
        counts.annotated().len()
    );
    println!(
        "counter (Controller::for_stream + predicate_filter(labels)): reconciles per pod {:?}",
        counts.counted().values().collect::<Vec<_>>()
    );
    println!(
        "kinformer handler: {} pods heard, {} notifications",
        counts.heard().len(),
        counts
            .notifications
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    println!(
        "server: {} LIST and {} WATCH of pods",
        sim.requests().count("pods", Verb::List),
        sim.requests().count("pods", Verb::Watch)
    );
    running.shutdown().await;
    if !ok {
        bail!("not every pod was reconciled by both controllers within {DEADLINE:?}");
    }
    Ok(())
}
