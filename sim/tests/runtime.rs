//! The sim on every kind of runtime, its shutdown, and churn.

use crate::common;

use std::time::Duration;

use crate::common::{DEADLINE, next};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kinformer_sim::{ChurnConfig, ChurnKind, Sim, SimConfig, wait_until};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

async fn roundtrip(client: kube::Client) {
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let c: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "rt"}})).unwrap();
    cms.create(&PostParams::default(), &c).await.unwrap();
    let mut w = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(next(&mut w).await, Some(Ok(WatchEvent::Added(_)))));
}

#[tokio::test(flavor = "current_thread")]
async fn current_thread_runtime() {
    let sim = common::sim().await;
    roundtrip(sim.client()).await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_thread_runtime() {
    let sim = common::sim().await;
    roundtrip(sim.client()).await;
}

#[actix::test]
async fn actix_runtime() {
    let sim = common::sim().await;
    roundtrip(sim.client()).await;
}

#[test]
fn background_thread_from_plain_test() {
    let sim = Sim::start_background(SimConfig::default()).unwrap();
    // A client used from another runtime entirely.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(roundtrip(sim.client()));
    // A client built by the caller from the kube config works too.
    let rt2 = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt2.block_on(async {
        let client = kube::Client::try_from(sim.kube_config()).unwrap();
        let cms: Api<ConfigMap> = Api::namespaced(client, "default");
        assert_eq!(
            cms.list(&ListParams::default()).await.unwrap().items.len(),
            1
        );
    });
    let addr = sim.addr();
    sim.shutdown();
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "the port is closed after shutdown"
    );
}

#[actix::test]
async fn background_thread_beside_actix() {
    let sim = Sim::start_background(SimConfig::default()).unwrap();
    roundtrip(sim.client()).await;
    drop(sim);
}

#[tokio::test]
async fn shutdown_ends_open_watches_and_frees_the_port() {
    let sim = common::sim().await;
    let path = sim.kubeconfig_path().to_path_buf();
    assert!(std::fs::read_to_string(&path).unwrap().contains(sim.url()));
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let mut w = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    common::wait_open_watches(&sim, 1).await;
    // A watch from "0" with bookmarks is a watch-list (1.34): no objects, then its end bookmark.
    match next(&mut w).await {
        Some(Ok(WatchEvent::Bookmark(_))) => {}
        e => panic!("expected the initial-events-end bookmark, got {e:?}"),
    }
    let addr = sim.addr();
    sim.shutdown().await;
    match next(&mut w).await {
        None | Some(Err(_)) => {}
        Some(Ok(e)) => panic!("unexpected event after shutdown: {e:?}"),
    }
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    assert!(!path.exists(), "the temporary kubeconfig is removed");
}

#[tokio::test]
async fn kubeconfig_file_loads_with_kube() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kc.yaml");
    let sim = Sim::start(SimConfig {
        write_kubeconfig: Some(file.clone()),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    assert_eq!(sim.kubeconfig_path(), file);
    let kc = kube::config::Kubeconfig::read_from(&file).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(cfg).unwrap();
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "34")
    );
    assert!(version.git_version.starts_with("v1.34."), "{version:?}");
}

#[tokio::test]
async fn churn_creates_updates_and_deletes() {
    let sim = common::sim().await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "churn-a");
    let lp = pods.list(&ListParams::default()).await;
    assert!(lp.is_ok());
    let mut w = Api::<Pod>::all(sim.client())
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();
    let churn = sim.start_churn(ChurnConfig {
        rate_per_sec: 2000.0,
        namespaces: vec!["churn-a".into(), "churn-b".into()],
        kinds: vec![ChurnKind::Pods, ChurnKind::ConfigMaps],
        seed: 42,
        max_objects: 5,
    });
    wait_until(DEADLINE, || {
        let c = churn.counts();
        c.created >= 10 && c.updated >= 10 && c.deleted >= 5
    })
    .await
    .unwrap();
    churn.stop();
    wait_until(DEADLINE, || !churn.is_running()).await.unwrap();
    let counts = churn.counts();
    assert_eq!(counts.errors, 0);
    let live = sim.object_count("pods").unwrap() + sim.object_count("configmaps").unwrap();
    assert_eq!(live as u64, counts.created - counts.deleted);
    // The watch saw churned pods.
    match next(&mut w).await {
        Some(Ok(WatchEvent::Added(p))) => {
            assert!(p.metadata.name.unwrap().starts_with("churn-pod-"))
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(churn.counts(), counts, "no more operations after stop");
    let _ = Duration::ZERO;
}
