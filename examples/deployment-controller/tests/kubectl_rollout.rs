//! kubectl (client-go, written by none of us) drives the deployment controller in its embedded
//! setup (simulated API server, cluster simulation, controller, all in-process): create a
//! Deployment, two `set image` revisions, `rollout status`, `rollout history`, `rollout undo`,
//! a second `rollout status`, and the Deployment ends on the previous template, served by the
//! old ReplicaSet scaled up under a new revision.
//!
//! A second test reads `kubectl get pods -o wide` as a newcomer does: each pod of a rolled-out
//! Deployment READY 1/1, Running, with its own IP and a node that exists.
//!
//! Without kubectl on PATH the test says so loudly and returns; it fails only when `CI=true`.

use crate::common;

use std::{path::PathBuf, process::Command, time::Duration};

use crate::common::{DEADLINE, fast_config};
use deployment_controller::{
    controller::{ControllerOptions, DeploymentController},
    embedded::{
        cluster::{ClusterOptions, ClusterSim},
        demo,
    },
};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::{Api, Client, ResourceExt, api::ListParams};

const NS: &str = "rollout";
const REVISION: &str = "deployment.kubernetes.io/revision";

fn kubectl_missing() -> bool {
    let ok = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("\n!! kubectl is not on PATH: kubectl_rollout is SKIPPED (fails when CI=true)\n");
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kubectl is required when CI=true"
        );
    }
    !ok
}

/// Runs kubectl off the async workers; asserts success; returns stdout.
async fn kubectl(kubeconfig: &PathBuf, cache: &PathBuf, args: &[&str]) -> String {
    let mut c = Command::new("kubectl");
    c.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .arg("--request-timeout=30s")
        .args(["-n", NS])
        .args(args)
        .env_remove("KUBECONFIG");
    let shown = format!("{args:?}");
    let out = tokio::task::spawn_blocking(move || c.output())
        .await
        .expect("kubectl task")
        .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "kubectl {shown} failed: {}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    eprintln!("$ kubectl -n {NS} {}\n{stdout}", args.join(" "));
    stdout
}

fn image(d: &Deployment) -> Option<String> {
    d.spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_status_history_undo_against_the_embedded_setup() {
    if kubectl_missing() {
        return;
    }
    let sim = common::sim().await;
    let cluster = ClusterSim::start(
        Client::try_from(sim.kube_config()).expect("client"),
        ClusterOptions {
            ready_after: Duration::from_millis(50),
            informer: fast_config(),
            ..ClusterOptions::default()
        },
    )
    .await
    .expect("cluster simulation");
    // Every Deployment (kubectl's carry no label of ours).
    let controller = DeploymentController::new(
        sim.client(),
        ControllerOptions {
            workers: 2,
            selector: None,
            informer: fast_config(),
            sync_timeout: DEADLINE,
            ..ControllerOptions::default()
        },
    )
    .await
    .expect("controller");
    controller.start().await.expect("controller starts");

    let kubeconfig = sim.kubeconfig_path().to_path_buf();
    let cache = std::env::temp_dir().join(format!("kubectl-rollout-cache-{}", std::process::id()));
    let k = |args: &'static [&'static str]| {
        let (kc, cache) = (kubeconfig.clone(), cache.clone());
        async move { kubectl(&kc, &cache, args).await }
    };

    // Created as the embedded demo creates its Deployments: from Rust structs, so the stored
    // template has no `resources: {}` nor `creationTimestamp: null`, while the template
    // `kubectl rollout undo` writes back (serialised from Go structs) has both. The controller
    // must still recognise the old ReplicaSet (EqualIgnoreHash compares as Go does).
    Api::<Deployment>::namespaced(sim.client(), NS)
        .create(
            &Default::default(),
            &demo::deployment("web", 2, "app:1", None, false),
        )
        .await
        .expect("create the Deployment");
    k(&["rollout", "status", "deployment/web", "--timeout=60s"]).await;
    k(&["set", "image", "deployment/web", "app=app:2"]).await;
    k(&["rollout", "status", "deployment/web", "--timeout=60s"]).await;
    k(&["set", "image", "deployment/web", "app=app:3"]).await;
    k(&["rollout", "status", "deployment/web", "--timeout=60s"]).await;

    let history = k(&["rollout", "history", "deployment/web"]).await;
    let revisions: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.chars().all(|c| c.is_ascii_digit()))
        .collect();
    assert_eq!(revisions, ["1", "2", "3"], "history:\n{history}");
    let rev2 = k(&["rollout", "history", "deployment/web", "--revision=2"]).await;
    assert!(rev2.contains("app:2"), "revision 2:\n{rev2}");

    k(&["rollout", "undo", "deployment/web"]).await;
    k(&["rollout", "status", "deployment/web", "--timeout=60s"]).await;

    // On the previous template, served by the old ReplicaSet under a new revision.
    let client = sim.client();
    let d = Api::<Deployment>::namespaced(client.clone(), NS)
        .get("web")
        .await
        .expect("get");
    assert_eq!(image(&d).as_deref(), Some("app:2"));
    assert_eq!(d.annotations().get(REVISION).map(String::as_str), Some("4"));
    let rss = Api::<ReplicaSet>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    let of_image = |img: &str| {
        rss.iter()
            .filter(|rs| {
                rs.spec
                    .template
                    .as_ref()
                    .and_then(|t| t.spec.as_ref())
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.image.as_deref())
                    == Some(img)
            })
            .collect::<Vec<_>>()
    };
    let v2 = of_image("app:2");
    assert_eq!(
        v2.len(),
        1,
        "one ReplicaSet for app:2 (the old one, reused)"
    );
    assert_eq!(v2[0].spec.replicas, Some(2));
    assert_eq!(
        v2[0].annotations().get(REVISION).map(String::as_str),
        Some("4")
    );
    for img in ["app:1", "app:3"] {
        for rs in of_image(img) {
            assert_eq!(rs.spec.replicas, Some(0), "{} still scaled", rs.name_any());
        }
    }
    let history = k(&["rollout", "history", "deployment/web"]).await;
    let revisions: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.chars().all(|c| c.is_ascii_digit()))
        .collect();
    assert_eq!(revisions, ["1", "3", "4"], "history after undo:\n{history}");

    controller.shutdown().await;
    cluster.shutdown().await;
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&cache);
}

/// Waits (up to `DEADLINE`) until `kubectl get pods -o wide` shows `n` pods, each READY 1/1 and
/// Running; returns the rows as columns. Panics at the deadline with the last output.
async fn running_pods(kubeconfig: &PathBuf, cache: &PathBuf, n: usize) -> Vec<Vec<String>> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let out = kubectl(
            kubeconfig,
            cache,
            &["get", "pods", "-o", "wide", "--no-headers"],
        )
        .await;
        let rows: Vec<Vec<String>> = out
            .lines()
            .map(|l| l.split_whitespace().map(String::from).collect())
            .collect();
        // NAME READY STATUS RESTARTS AGE IP NODE
        if rows.len() == n
            && rows
                .iter()
                .all(|r| r.len() >= 7 && r[1] == "1/1" && r[2] == "Running")
        {
            return rows;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {n} pods READY 1/1 and Running before the deadline; last:\n{out}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_pods_shows_ready_pods_with_an_ip_and_a_node_each() {
    if kubectl_missing() {
        return;
    }
    let sim = common::sim().await;
    let cluster = ClusterSim::start(
        Client::try_from(sim.kube_config()).expect("client"),
        ClusterOptions {
            ready_after: Duration::from_millis(50),
            informer: fast_config(),
            ..ClusterOptions::default()
        },
    )
    .await
    .expect("cluster simulation");
    let controller = DeploymentController::new(
        sim.client(),
        ControllerOptions {
            workers: 2,
            selector: None,
            informer: fast_config(),
            sync_timeout: DEADLINE,
            ..ControllerOptions::default()
        },
    )
    .await
    .expect("controller");
    controller.start().await.expect("controller starts");
    let kubeconfig = sim.kubeconfig_path().to_path_buf();
    let cache = std::env::temp_dir().join(format!("kubectl-pods-cache-{}", std::process::id()));

    Api::<Deployment>::namespaced(sim.client(), NS)
        .create(
            &Default::default(),
            &demo::deployment("web", 4, "app:1", None, false),
        )
        .await
        .expect("create the Deployment");
    kubectl(
        &kubeconfig,
        &cache,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
    )
    .await;
    let rows = running_pods(&kubeconfig, &cache, 4).await;

    let mut ips: Vec<&str> = rows.iter().map(|r| r[5].as_str()).collect();
    assert!(
        ips.iter().all(|ip| *ip != "<none>"),
        "every pod has an IP: {rows:?}"
    );
    ips.sort_unstable();
    ips.dedup();
    assert_eq!(ips.len(), 4, "each pod its own IP: {rows:?}");
    for node in rows.iter().map(|r| r[6].as_str()) {
        assert_ne!(node, "<none>", "every pod is on a node: {rows:?}");
        // The node exists (kubectl exits non-zero otherwise).
        kubectl(&kubeconfig, &cache, &["get", "node", node]).await;
    }

    controller.shutdown().await;
    cluster.shutdown().await;
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&cache);
}
