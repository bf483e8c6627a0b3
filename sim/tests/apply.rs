//! Server-side apply and `metadata.managedFields` as kube-apiserver's field manager keeps them
//! (`k8s.io/apimachinery/pkg/util/managedfields`, structured-merge-diff), and the answers of
//! DELETE (`handlers/delete.go`, the generic store's `finalizeDelete`), over HTTP.

use crate::common;

use crate::common::{RawResponse, raw};
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer_sim::Sim;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const PODS: &str = "/api/v1/namespaces/default/pods";

async fn send(sim: &Sim, method: &str, path: &str, ua: &str, ct: &str, body: Value) -> RawResponse {
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    raw(
        sim,
        method,
        path,
        &[("content-type", ct), ("user-agent", ua)],
        body,
    )
    .await
}

async fn apply(sim: &Sim, path: &str, manager: &str, force: bool, body: Value) -> RawResponse {
    let q = format!(
        "{path}?fieldManager={manager}{}",
        if force { "&force=true" } else { "" }
    );
    send(
        sim,
        "PATCH",
        &q,
        "test/1",
        "application/apply-patch+yaml",
        body,
    )
    .await
}

fn ok(r: &RawResponse, code: u16) -> Value {
    assert_eq!(r.status, code, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

/// The entry of `manager` (and `operation`), without its time.
fn entry(obj: &Value, manager: &str, operation: &str) -> Option<Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
        .map(|e| {
            let mut e = e.clone();
            if let Some(o) = e.as_object_mut() {
                o.remove("time");
            }
            e
        })
}

fn managers(obj: &Value) -> Vec<String> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            format!(
                "{}/{}",
                e["manager"].as_str().unwrap_or(""),
                e["operation"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[tokio::test]
async fn every_write_records_its_update_manager() {
    let sim = common::sim().await;
    // Create: the manager is the User-Agent's prefix; it owns every field it set, with `.` on
    // the maps it added.
    let cm = ok(
        &send(
            &sim,
            "POST",
            CMS,
            "kubectl-create/v1.34.0 (linux/amd64)",
            "application/json",
            json!({"metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"x": "1"}}),
        )
        .await,
        201,
    );
    assert_eq!(
        entry(&cm, "kubectl-create", "Update"),
        Some(
            json!({"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {".": {}, "f:x": {}}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}}})
        ),
        "{cm}"
    );
    assert!(cm["metadata"]["managedFields"][0]["time"].is_string());
    // PUT with fieldManager: the changed field moves to the editor.
    let mut edited = cm.clone();
    edited["data"]["x"] = json!("2");
    let cm = ok(
        &send(
            &sim,
            "PUT",
            &format!("{CMS}/c?fieldManager=editor"),
            "ignored/1",
            "application/json",
            edited,
        )
        .await,
        200,
    );
    assert_eq!(
        entry(&cm, "editor", "Update").unwrap()["fieldsV1"],
        json!({"f:data": {"f:x": {}}})
    );
    assert_eq!(
        entry(&cm, "kubectl-create", "Update").unwrap()["fieldsV1"],
        json!({"f:data": {}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}})
    );
    // A merge patch by the User-Agent's manager adds its field; an unchanged write adds none.
    let cm = ok(
        &send(
            &sim,
            "PATCH",
            &format!("{CMS}/c"),
            "patcher/2.0",
            "application/merge-patch+json",
            json!({"data": {"y": "1"}}),
        )
        .await,
        200,
    );
    assert_eq!(
        entry(&cm, "patcher", "Update").unwrap()["fieldsV1"],
        json!({"f:data": {"f:y": {}}})
    );
    let again = ok(
        &send(
            &sim,
            "PATCH",
            &format!("{CMS}/c"),
            "other/2.0",
            "application/merge-patch+json",
            json!({"data": {"y": "1"}}),
        )
        .await,
        200,
    );
    assert_eq!(
        again["metadata"]["resourceVersion"],
        cm["metadata"]["resourceVersion"]
    );
    assert_eq!(managers(&again), managers(&cm));
    // Removing a field takes it from its owner; an entry left empty goes.
    let cm = ok(
        &send(
            &sim,
            "PATCH",
            &format!("{CMS}/c?fieldManager=cleaner"),
            "x/1",
            "application/json-patch+json",
            json!([{"op": "remove", "path": "/data/y"}]),
        )
        .await,
        200,
    );
    assert!(entry(&cm, "patcher", "Update").is_none(), "{cm}");
    assert!(
        entry(&cm, "cleaner", "Update").is_none(),
        "a removal owns nothing: {cm}"
    );

    // `/status` and `/scale` writes name their subresource.
    let d = ok(
        &send(&sim, "POST", &format!("{DEPLOYS}?fieldManager=creator"), "x/1", "application/json",
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 1,
                "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})).await,
        201,
    );
    let created = entry(&d, "creator", "Update").unwrap();
    assert_eq!(
        created["fieldsV1"]["f:spec"]["f:selector"],
        json!({}),
        "LabelSelector is atomic"
    );
    assert_eq!(
        created["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"]
            ["f:image"],
        json!({})
    );
    assert!(created["fieldsV1"].get("f:status").is_none(), "{created}");
    let d = ok(
        &send(
            &sim,
            "PATCH",
            &format!("{DEPLOYS}/d/status?fieldManager=controller"),
            "x/1",
            "application/merge-patch+json",
            json!({"status": {"replicas": 1}}),
        )
        .await,
        200,
    );
    assert_eq!(
        entry(&d, "controller", "Update"),
        Some(
            json!({"manager": "controller", "operation": "Update", "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:replicas": {}}}, "subresource": "status"})
        )
    );
    let scale = ok(
        &send(
            &sim,
            "PATCH",
            &format!("{DEPLOYS}/d/scale?fieldManager=scaler"),
            "x/1",
            "application/merge-patch+json",
            json!({"spec": {"replicas": 3}}),
        )
        .await,
        200,
    );
    assert_eq!(scale["spec"]["replicas"], 3);
    let (_, d) = common::get_json(&sim, &format!("{DEPLOYS}/d")).await;
    assert_eq!(
        entry(&d, "scaler", "Update"),
        Some(
            json!({"manager": "scaler", "operation": "Update", "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}, "subresource": "scale"})
        )
    );
    assert!(
        entry(&d, "creator", "Update").unwrap()["fieldsV1"]["f:spec"]
            .get("f:replicas")
            .is_none(),
        "{d}"
    );
    // A request that resets the managed fields with `[{}]` leaves the object unmanaged, and
    // later updates then record nothing.
    let mut reset = d.clone();
    reset["metadata"]["managedFields"] = json!([{}]);
    let d = ok(
        &send(
            &sim,
            "PUT",
            &format!("{DEPLOYS}/d"),
            "x/1",
            "application/json",
            reset,
        )
        .await,
        200,
    );
    assert!(d["metadata"].get("managedFields").is_none(), "{d}");
    let d = ok(
        &send(
            &sim,
            "PATCH",
            &format!("{DEPLOYS}/d?fieldManager=late"),
            "x/1",
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"l": "1"}}}),
        )
        .await,
        200,
    );
    assert!(d["metadata"].get("managedFields").is_none(), "{d}");
    sim.shutdown().await;
}

#[tokio::test]
async fn appliers_share_sets_and_associative_lists() {
    let sim = common::sim().await;
    let cm = |fin: &[&str]| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "f", "finalizers": fin}})
    };
    // An apply that creates the object is a 201, one that updates it a 200.
    ok(
        &apply(
            &sim,
            &format!("{CMS}/f"),
            "a",
            false,
            cm(&["example.com/a"]),
        )
        .await,
        201,
    );
    let both = ok(
        &apply(
            &sim,
            &format!("{CMS}/f"),
            "b",
            false,
            cm(&["example.com/b"]),
        )
        .await,
        200,
    );
    assert_eq!(
        both["metadata"]["finalizers"],
        json!(["example.com/a", "example.com/b"])
    );
    assert_eq!(
        entry(&both, "b", "Apply").unwrap()["fieldsV1"],
        json!({"f:metadata": {"f:finalizers": {"v:\"example.com/b\"": {}}}})
    );
    let one = ok(
        &apply(&sim, &format!("{CMS}/f"), "a", false, cm(&[])).await,
        200,
    );
    assert_eq!(
        one["metadata"]["finalizers"],
        json!(["example.com/b"]),
        "{one}"
    );
    assert_eq!(managers(&one), ["b/Apply"]);

    // Containers are merged by name: each applier owns its own.
    let dep = |containers: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}}}})
    };
    let path = format!("{DEPLOYS}/web");
    ok(
        &apply(
            &sim,
            &path,
            "one",
            false,
            dep(json!([{"name": "a", "image": "a:1",
        "ports": [{"containerPort": 80}]}])),
        )
        .await,
        201,
    );
    let d = ok(&apply(&sim, &path, "two", false, json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"}, "spec": {"template": {"spec": {"containers": [{"name": "b", "image": "b:1"}]}}}})).await, 200);
    let names: Vec<&str> = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["a", "b"], "{d}");
    assert_eq!(
        entry(&d, "one", "Apply").unwrap()["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"],
        json!({"k:{\"name\":\"a\"}": {".": {}, "f:image": {}, "f:name": {},
            "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}})
    );
    assert_eq!(
        entry(&d, "two", "Apply").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"b\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}})
    );
    // "one" drops its container: it goes, "two"'s stays.
    let d = ok(&apply(&sim, &path, "one", false, dep(json!([]))).await, 200);
    let names: Vec<&str> = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["b"], "{d}");
    sim.shutdown().await;
}

#[tokio::test]
async fn apply_conflicts_with_update_managers_unless_forced() {
    let sim = common::sim().await;
    let path = format!("{DEPLOYS}/r");
    let cfg = |replicas: i64| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "r"}, "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "r"}},
        "template": {"metadata": {"labels": {"app": "r"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
    };
    ok(&apply(&sim, &path, "ssa", false, cfg(1)).await, 201);
    ok(
        &send(
            &sim,
            "PATCH",
            &format!("{path}?fieldManager=kubectl-edit"),
            "x/1",
            "application/merge-patch+json",
            json!({"spec": {"replicas": 3}}),
        )
        .await,
        200,
    );
    let r = apply(&sim, &path, "ssa", false, cfg(2)).await;
    let e = r.json();
    assert_eq!(r.status, 409, "{e}");
    assert_eq!(
        e["message"],
        r#"Apply failed with 1 conflict: conflict with "kubectl-edit" using apps/v1: .spec.replicas"#
    );
    assert_eq!(
        e["details"]["causes"],
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"kubectl-edit\" using apps/v1", "field": ".spec.replicas"}])
    );
    // The same value as the live one is shared ownership, not a conflict.
    ok(&apply(&sim, &path, "ssa", false, cfg(3)).await, 200);
    let d = ok(&apply(&sim, &path, "ssa", true, cfg(2)).await, 200);
    assert_eq!(d["spec"]["replicas"], 2);
    assert!(
        entry(&d, "kubectl-edit", "Update").is_none(),
        "its only field moved: {d}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn delete_answers_a_status_or_the_object_per_kind() {
    let sim = common::sim().await;
    let del = |path: String, body: Value| {
        let sim = &sim;
        async move { send(sim, "DELETE", &path, "x/1", "application/json", body).await }
    };
    let cm = ok(
        &send(
            &sim,
            "POST",
            CMS,
            "x/1",
            "application/json",
            json!({"metadata": {"name": "gone"}}),
        )
        .await,
        201,
    );
    // A completed delete of a kind without ReturnDeletedObject: a Status naming the resource.
    let s = ok(&del(format!("{CMS}/gone"), Value::Null).await, 200);
    assert_eq!(
        s,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": "gone", "kind": "configmaps", "uid": cm["metadata"]["uid"]}})
    );
    ok(&send(&sim, "POST", DEPLOYS, "x/1", "application/json", json!({"metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}}})).await, 201);
    let s = ok(&del(format!("{DEPLOYS}/d"), Value::Null).await, 200);
    assert_eq!(s["details"]["group"], "apps");
    assert_eq!(s["details"]["kind"], "deployments");
    // A pod (ReturnDeletedObject) answers with itself.
    ok(&send(&sim, "POST", PODS, "x/1", "application/json",
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})).await, 201);
    let p = ok(
        &del(format!("{PODS}/p?gracePeriodSeconds=0"), Value::Null).await,
        200,
    );
    assert_eq!(p["kind"], "Pod");
    // A delete held by a finalizer answers with the marked object: 200, or 202 when the request
    // asked for orphanDependents=false.
    ok(
        &send(
            &sim,
            "POST",
            CMS,
            "x/1",
            "application/json",
            json!({"metadata": {"name": "held", "finalizers": ["example.com/f"]}}),
        )
        .await,
        201,
    );
    let held = ok(
        &del(format!("{CMS}/held"), json!({"orphanDependents": false})).await,
        202,
    );
    assert_eq!(held["kind"], "ConfigMap");
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    let held = ok(&del(format!("{CMS}/held"), Value::Null).await, 200);
    assert_eq!(held["kind"], "ConfigMap");
    // kube's Api::delete sees the Status as Right.
    ok(
        &send(
            &sim,
            "POST",
            CMS,
            "x/1",
            "application/json",
            json!({"metadata": {"name": "k"}}),
        )
        .await,
        201,
    );
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let out = api
        .delete("k", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(out.is_right(), "{out:?}");
    // deletecollection answers the objects as they were listed.
    for n in ["l1", "l2"] {
        ok(
            &send(
                &sim,
                "POST",
                CMS,
                "x/1",
                "application/json",
                json!({"metadata": {"name": n, "labels": {"del": "y"}}}),
            )
            .await,
            201,
        );
    }
    let list = ok(
        &del(format!("{CMS}?labelSelector=del%3Dy"), Value::Null).await,
        200,
    );
    assert_eq!(list["kind"], "ConfigMapList");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["l1", "l2"]);
    assert!(
        list["items"][0]["metadata"]
            .get("deletionTimestamp")
            .is_none()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn kubectl_applies_sync_the_client_side_annotation() {
    let sim = common::sim().await;
    const KEY: &str = "kubectl.kubernetes.io/last-applied-configuration";
    ok(
        &send(&sim, "POST", CMS, "kubectl-client-side-apply/v1.34.0", "application/json",
            json!({"metadata": {"name": "csa", "annotations": {KEY: "{\"old\":true}\n"}}, "data": {"a": "1"}})).await,
        201,
    );
    // Another manager's apply leaves the annotation alone.
    let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "csa"}, "data": {"a": "1", "b": "2"}});
    let cm = ok(
        &apply(&sim, &format!("{CMS}/csa"), "other", false, cfg.clone()).await,
        200,
    );
    assert_eq!(cm["metadata"]["annotations"][KEY], "{\"old\":true}\n");
    // kubectl's rewrites it to what it applied.
    let cm = ok(
        &apply(&sim, &format!("{CMS}/csa"), "kubectl", false, cfg.clone()).await,
        200,
    );
    assert_eq!(
        cm["metadata"]["annotations"][KEY],
        format!("{cfg}\n"),
        "{cm}"
    );
    sim.shutdown().await;
}
