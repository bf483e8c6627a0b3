//! Deletion lifecycles as kube-apiserver and kube-controller-manager run them, over HTTP:
//! namespaces through `Terminating` (the namespace controller stand-in empties them and removes
//! the `kubernetes` finalizer), creates refused in a terminating namespace, the garbage
//! collector stand-in's foreground, orphan and background propagation, and the answer of a
//! write that removes the last finalizer of a terminating object.

use std::process::Command;

use crate::common;
use crate::common::{DEADLINE, get_json, next_event, raw, raw_watch};
use kinformer_sim::{Sim, SimConfig, wait_until_async};
use serde_json::{Value, json};

async fn post(sim: &Sim, path: &str, body: Value) -> Value {
    let r = raw(
        sim,
        "POST",
        path,
        &[("content-type", "application/json")],
        body.to_string(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

async fn delete(sim: &Sim, path: &str) -> (u16, Value) {
    let r = raw(sim, "DELETE", path, &[], "").await;
    (r.status, r.json())
}

async fn gone(sim: &Sim, path: &str) {
    wait_until_async(DEADLINE, || async { get_json(sim, path).await.0 == 404 })
        .await
        .unwrap_or_else(|_| panic!("{path} is still there"));
}

fn cm(name: &str, owners: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "ownerReferences": owners}, "data": {"a": "1"}})
}

fn owner_ref(owner: &Value, block: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
           "uid": owner["metadata"]["uid"], "blockOwnerDeletion": block})
}

#[tokio::test]
async fn a_namespace_terminates_then_its_controller_empties_and_removes_it() {
    let sim = common::sim().await;
    post(
        &sim,
        "/api/v1/namespaces/team/configmaps",
        cm("c", json!([])),
    )
    .await;
    post(
        &sim,
        "/api/v1/namespaces/team/pods",
        json!({"metadata": {"name": "p"},
               "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]}}),
    )
    .await;
    let (_, mut w) = raw_watch(
        &sim,
        &format!(
            "/api/v1/namespaces?watch=true&fieldSelector=metadata.name%3Dteam&resourceVersion={}",
            sim.resource_version()
        ),
    )
    .await;
    // `REST.Delete`: 200 with the namespace, Terminating.
    let (code, ns) = delete(&sim, "/api/v1/namespaces/team").await;
    assert_eq!(code, 200, "{ns}");
    assert_eq!(ns["kind"], "Namespace");
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert!(ns["metadata"]["deletionTimestamp"].is_string(), "{ns}");
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    assert!(ns["metadata"].get("deletionGracePeriodSeconds").is_none());
    // NamespaceLifecycle admission: no new content.
    let r = raw(
        &sim,
        "POST",
        "/api/v1/namespaces/team/configmaps",
        &[("content-type", "application/json")],
        cm("late", json!([])).to_string(),
    )
    .await;
    let st = r.json();
    assert_eq!(
        (r.status, st["reason"].as_str()),
        (403, Some("Forbidden")),
        "{st}"
    );
    assert_eq!(
        st["message"],
        "configmaps \"late\" is forbidden: unable to create new content in namespace team because it is being terminated"
    );
    assert_eq!(st["details"]["causes"][0]["reason"], "NamespaceTerminating");
    // The controller stand-in: contents deleted (the pod gracefully, by its kubelet), the
    // finalizer removed, the namespace deleted.
    gone(&sim, "/api/v1/namespaces/team").await;
    assert!(
        sim.get_object("configmaps", Some("team"), "c")
            .unwrap()
            .is_none()
    );
    assert!(sim.get_object("pods", Some("team"), "p").unwrap().is_none());
    let e = next_event(&mut w).await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["status"]["phase"].as_str()),
        (Some("MODIFIED"), Some("Terminating"))
    );
    let e = next_event(&mut w).await;
    assert_eq!(e["type"], "MODIFIED");
    assert!(e["object"]["spec"].get("finalizers").is_none(), "{e}");
    let e = next_event(&mut w).await;
    assert_eq!(e["type"], "DELETED");
    sim.shutdown().await;
}

#[tokio::test]
async fn without_the_namespace_controller_a_namespace_stays_terminating() {
    let sim = Sim::start(SimConfig {
        namespace_controller: false,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    post(
        &sim,
        "/api/v1/namespaces/team/configmaps",
        cm("c", json!([])),
    )
    .await;
    let (code, ns) = delete(&sim, "/api/v1/namespaces/team").await;
    assert_eq!(
        (code, ns["status"]["phase"].as_str()),
        (200, Some("Terminating"))
    );
    // A second delete answers with the namespace as it is: the finalizer still holds it.
    let (code, again) = delete(&sim, "/api/v1/namespaces/team").await;
    assert_eq!(
        (code, &again["metadata"]["resourceVersion"]),
        (200, &ns["metadata"]["resourceVersion"])
    );
    assert!(
        sim.get_object("configmaps", Some("team"), "c")
            .unwrap()
            .is_some()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn kubectl_delete_namespace_waits_for_terminating_to_end() {
    if Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        assert!(std::env::var("CI").is_err(), "kubectl is needed under CI");
        return;
    }
    let sim = common::sim().await;
    post(
        &sim,
        "/api/v1/namespaces/team/configmaps",
        cm("c", json!([])),
    )
    .await;
    let kubeconfig = sim.kubeconfig_path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["delete", "namespace", "team", "--timeout=20s"])
            .output()
            .expect("kubectl runs")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "namespace \"team\" deleted"
    );
    // kubectl returned once the namespace was gone.
    assert_eq!(get_json(&sim, "/api/v1/namespaces/team").await.0, 404);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_generated_namespace_name_gets_its_name_label() {
    let sim = common::sim().await;
    let ns = post(
        &sim,
        "/api/v1/namespaces",
        json!({"metadata": {"generateName": "gen-"}}),
    )
    .await;
    let name = ns["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-"));
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        name
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn removing_the_last_finalizer_answers_with_the_patched_object() {
    let sim = common::sim().await;
    let path = "/api/v1/namespaces/default/configmaps/c";
    post(
        &sim,
        "/api/v1/namespaces/default/configmaps",
        json!({"metadata": {"name": "c", "finalizers": ["example.com/x"]}}),
    )
    .await;
    let (code, _) = delete(&sim, path).await;
    assert_eq!(code, 200);
    let r = raw(
        &sim,
        "PATCH",
        path,
        &[("content-type", "application/merge-patch+json")],
        json!({"metadata": {"finalizers": null}}).to_string(),
    )
    .await;
    let o = r.json();
    assert_eq!(r.status, 200, "{o}");
    assert!(o["metadata"].get("finalizers").is_none(), "{o}");
    assert!(o["metadata"]["deletionTimestamp"].is_string(), "{o}");
    assert_eq!(get_json(&sim, path).await.0, 404);
    sim.shutdown().await;
}

async fn gc_sim() -> Sim {
    Sim::start(SimConfig {
        garbage_collector: true,
        ..SimConfig::default()
    })
    .await
    .unwrap()
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let sim = gc_sim().await;
    let owner = post(&sim, CMS, cm("owner", json!([]))).await;
    post(&sim, CMS, cm("blocking", json!([owner_ref(&owner, true)]))).await;
    post(&sim, CMS, cm("free", json!([owner_ref(&owner, false)]))).await;
    let r = raw(
        &sim,
        "DELETE",
        &format!("{CMS}/owner?propagationPolicy=Foreground"),
        &[],
        "",
    )
    .await;
    let o = r.json();
    assert_eq!(r.status, 200, "{o}");
    assert_eq!(
        o["metadata"]["finalizers"],
        json!(["foregroundDeletion"]),
        "{o}"
    );
    assert!(o["metadata"]["deletionTimestamp"].is_string());
    gone(&sim, &format!("{CMS}/owner")).await;
    // The owner went only after its blocking dependent.
    assert_eq!(get_json(&sim, &format!("{CMS}/blocking")).await.0, 404);
    gone(&sim, &format!("{CMS}/free")).await;
    sim.shutdown().await;
}

#[tokio::test]
async fn orphan_deletion_removes_the_owner_references_first() {
    let sim = gc_sim().await;
    let owner = post(&sim, CMS, cm("owner", json!([]))).await;
    post(&sim, CMS, cm("dep", json!([owner_ref(&owner, true)]))).await;
    let r = raw(
        &sim,
        "DELETE",
        &format!("{CMS}/owner?propagationPolicy=Orphan"),
        &[],
        "",
    )
    .await;
    let o = r.json();
    assert_eq!(r.status, 200, "{o}");
    assert_eq!(o["metadata"]["finalizers"], json!(["orphan"]), "{o}");
    gone(&sim, &format!("{CMS}/owner")).await;
    let (code, dep) = get_json(&sim, &format!("{CMS}/dep")).await;
    assert_eq!(code, 200);
    assert!(dep["metadata"].get("ownerReferences").is_none(), "{dep}");
    sim.shutdown().await;
}

#[tokio::test]
async fn background_deletion_deletes_at_once_and_dependents_after() {
    let sim = gc_sim().await;
    let owner = post(&sim, CMS, cm("owner", json!([]))).await;
    post(&sim, CMS, cm("dep", json!([owner_ref(&owner, true)]))).await;
    let (code, st) = delete(&sim, &format!("{CMS}/owner")).await;
    assert_eq!((code, st["kind"].as_str()), (200, Some("Status")), "{st}");
    gone(&sim, &format!("{CMS}/dep")).await;
    sim.shutdown().await;
}

#[tokio::test]
async fn without_a_garbage_collector_propagation_changes_nothing() {
    let sim = common::sim().await;
    let owner = post(&sim, CMS, cm("owner", json!([]))).await;
    post(&sim, CMS, cm("dep", json!([owner_ref(&owner, true)]))).await;
    let r = raw(
        &sim,
        "DELETE",
        &format!("{CMS}/owner?propagationPolicy=Foreground"),
        &[],
        "",
    )
    .await;
    assert_eq!((r.status, r.json()["kind"].as_str()), (200, Some("Status")));
    assert_eq!(get_json(&sim, &format!("{CMS}/dep")).await.0, 200);
    sim.shutdown().await;
}
