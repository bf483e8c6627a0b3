//! Requests where the sim answered unlike kube-apiserver 1.34 (issue 29, item 3), over HTTP:
//! DELETE of a subresource, a PUT that changes the uid, pod status defaulting, where strategic
//! merge patch puts new list elements, server-side apply of a body without its type, and the
//! legacy `/watch/` paths.

use crate::common;
use crate::common::{get_json, next_event, raw, raw_watch};
use serde_json::{Value, json};

const PODS: &str = "/api/v1/namespaces/default/pods";
const CMS: &str = "/api/v1/namespaces/default/configmaps";

async fn send(
    sim: &kinformer_sim::Sim,
    method: &str,
    path: &str,
    ct: &str,
    body: Value,
) -> (u16, Value) {
    let r = raw(sim, method, path, &[("content-type", ct)], body.to_string()).await;
    (r.status, r.json())
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [{"name": "c", "image": "i"}]}})
}

#[tokio::test]
async fn delete_of_a_status_subresource_is_405() {
    let sim = common::sim().await;
    send(&sim, "POST", PODS, "application/json", pod("p")).await;
    let r = raw(&sim, "DELETE", &format!("{PODS}/p/status"), &[], "").await;
    let st = r.json();
    assert_eq!(
        (r.status, st["reason"].as_str()),
        (405, Some("MethodNotAllowed")),
        "{st}"
    );
    assert_eq!(st["kind"], "Status");
    // The pod is still there.
    assert_eq!(get_json(&sim, &format!("{PODS}/p")).await.0, 200);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_put_that_changes_the_uid_fails_its_precondition() {
    let sim = common::sim().await;
    let (_, mut cm) = send(
        &sim,
        "POST",
        CMS,
        "application/json",
        json!({"metadata": {"name": "c"}}),
    )
    .await;
    let uid = cm["metadata"]["uid"].as_str().unwrap().to_string();
    cm["metadata"]["uid"] = json!("00000000-0000-0000-0000-000000000000");
    let (code, st) = send(&sim, "PUT", &format!("{CMS}/c"), "application/json", cm).await;
    assert_eq!(
        (code, st["reason"].as_str()),
        (409, Some("Conflict")),
        "{st}"
    );
    assert_eq!(
        st["message"],
        format!(
            "Operation cannot be fulfilled on configmaps \"c\": StorageError: invalid object, Code: 4, Key: /registry/configmaps/default/c, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: 00000000-0000-0000-0000-000000000000, UID in object meta: {uid}"
        )
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn pod_status_gets_pod_ips_and_keeps_its_qos_class() {
    let sim = common::sim().await;
    let (_, created) = send(&sim, "POST", PODS, "application/json", pod("p")).await;
    assert_eq!(created["status"]["qosClass"], "BestEffort");
    let mut p = created.clone();
    p["status"] = json!({"phase": "Running", "podIP": "10.0.0.7", "hostIP": "192.168.0.2"});
    let (code, o) = send(
        &sim,
        "PUT",
        &format!("{PODS}/p/status"),
        "application/json",
        p,
    )
    .await;
    assert_eq!(code, 200, "{o}");
    assert_eq!(o["status"]["podIPs"], json!([{"ip": "10.0.0.7"}]));
    assert_eq!(o["status"]["hostIPs"], json!([{"ip": "192.168.0.2"}]));
    assert_eq!(
        o["status"]["qosClass"], "BestEffort",
        "kept from the stored pod"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn strategic_merge_patch_puts_new_items_where_kube_does() {
    let sim = common::sim().await;
    send(
        &sim,
        "POST",
        CMS,
        "application/json",
        json!({"metadata": {"name": "c", "finalizers": ["example.com/a", "example.com/b"]}}),
    )
    .await;
    let smp = "application/strategic-merge-patch+json";
    let (code, o) = send(
        &sim,
        "PATCH",
        &format!("{CMS}/c"),
        smp,
        json!({"metadata": {"finalizers": ["example.com/c"]}}),
    )
    .await;
    assert_eq!(code, 200, "{o}");
    assert_eq!(
        o["metadata"]["finalizers"],
        json!(["example.com/c", "example.com/a", "example.com/b"])
    );
    send(&sim, "POST", PODS, "application/json", pod("p")).await;
    let conditions = |o: &Value| -> Vec<String> {
        o["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, o) = send(
        &sim,
        "PATCH",
        &format!("{PODS}/p/status"),
        smp,
        json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]}}),
    )
    .await;
    assert_eq!(conditions(&o), ["Ready", "Initialized"]);
    let (_, o) = send(
        &sim,
        "PATCH",
        &format!("{PODS}/p/status"),
        smp,
        json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}}),
    )
    .await;
    assert_eq!(conditions(&o), ["PodScheduled", "Ready", "Initialized"]);
    sim.shutdown().await;
}

#[tokio::test]
async fn apply_needs_the_endpoints_kind_and_api_version() {
    let sim = common::sim().await;
    let apply = "application/apply-patch+yaml";
    let path = format!("{CMS}/c?fieldManager=test");
    let (code, st) = send(
        &sim,
        "PATCH",
        &path,
        apply,
        json!({"apiVersion": "v1", "metadata": {"name": "c"}}),
    )
    .await;
    assert_eq!(
        (code, st["message"].as_str()),
        (400, Some("invalid object type: /v1, Kind=")),
        "{st}"
    );
    let (code, st) = send(
        &sim,
        "PATCH",
        &path,
        apply,
        json!({"kind": "ConfigMap", "metadata": {"name": "c"}}),
    )
    .await;
    assert_eq!(
        (code, st["message"].as_str()),
        (400, Some("invalid object type: /, Kind=ConfigMap")),
        "{st}"
    );
    let (code, _) = send(
        &sim,
        "PATCH",
        &path,
        apply,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
    )
    .await;
    assert_eq!(code, 201);
    sim.shutdown().await;
}

#[tokio::test]
async fn legacy_watch_paths_are_watches() {
    let sim = common::sim().await;
    let rv = sim.resource_version();
    let (code, mut all) = raw_watch(
        &sim,
        &format!("/api/v1/watch/namespaces/default/configmaps?resourceVersion={rv}"),
    )
    .await;
    assert_eq!(code, 200);
    let (code, mut one) = raw_watch(
        &sim,
        &format!("/api/v1/watch/namespaces/default/configmaps/b?resourceVersion={rv}"),
    )
    .await;
    assert_eq!(code, 200);
    let (code, mut apps) = raw_watch(
        &sim,
        &format!("/apis/apps/v1/watch/deployments?resourceVersion={rv}"),
    )
    .await;
    assert_eq!(code, 200);
    send(
        &sim,
        "POST",
        CMS,
        "application/json",
        json!({"metadata": {"name": "a"}}),
    )
    .await;
    send(
        &sim,
        "POST",
        CMS,
        "application/json",
        json!({"metadata": {"name": "b"}}),
    )
    .await;
    let e = next_event(&mut all).await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("a"))
    );
    let e = next_event(&mut one).await;
    assert_eq!(
        e["object"]["metadata"]["name"], "b",
        "only the named object"
    );
    send(
        &sim,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        "application/json",
        json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
               "template": {"metadata": {"labels": {"a": "b"}},
                            "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
    )
    .await;
    let e = next_event(&mut apps).await;
    assert_eq!(e["object"]["metadata"]["name"], "d");
    // Only GET is served there.
    let r = raw(
        &sim,
        "POST",
        "/api/v1/watch/namespaces/default/configmaps",
        &[],
        "{}",
    )
    .await;
    assert_eq!(r.status, 405);
    sim.shutdown().await;
}
