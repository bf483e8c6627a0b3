//! Object semantics as kube-apiserver's registry strategies decide them, checked through
//! `kube::Api` and raw HTTP: `metadata.generation` per kind, graceful pod deletion (two writes,
//! the grace period, the kubelet stand-in), finalizers holding deletion, the metadata each
//! kind's status write takes, and strategic merge patch with kubectl's directives.

use crate::common;
use std::time::{Duration, Instant};

use crate::common::{Chunk, next_event, raw, raw_watch};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Service};
use kinformer_sim::{CustomResource, Scope, Sim, SimConfig};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

const PODS: &str = "/api/v1/namespaces/default/pods";

async fn sim_with(pod_termination: Option<Duration>) -> Sim {
    Sim::start(SimConfig {
        pod_termination,
        custom_resources: vec![
            CustomResource::new("example.com", "v1", "Widget", "widgets", Scope::Namespaced),
            CustomResource::new("example.com", "v1", "Gadget", "gadgets", Scope::Namespaced)
                .with_status_subresource(),
        ],
        ..SimConfig::default()
    })
    .await
    .expect("sim starts")
}

fn generation(v: &Value) -> Option<i64> {
    v["metadata"]["generation"].as_i64()
}

async fn merge(sim: &Sim, path: &str, body: Value) -> Value {
    let r = raw(
        sim,
        "PATCH",
        path,
        &[("content-type", "application/merge-patch+json")],
        body.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

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

async fn delete(sim: &Sim, path: &str, grace: Option<i64>) -> (u16, Value) {
    let body = match grace {
        Some(g) => json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": g})
            .to_string(),
        None => String::new(),
    };
    let r = raw(
        sim,
        "DELETE",
        path,
        &[("content-type", "application/json")],
        body,
    )
    .await;
    (r.status, r.json())
}

/// A valid Deployment or ReplicaSet spec (1 replica) whose selector and template label
/// `app: <app>`, as kube-apiserver's validation wants.
fn apps_spec(app: &str) -> Value {
    json!({
        "replicas": 1,
        "selector": {"matchLabels": {"app": app}},
        "template": {
            "metadata": {"labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "img:1"}]}
        }
    })
}

fn pod_body(name: &str, node: Option<&str>, extra_meta: Value) -> Value {
    let mut meta = json!({"name": name});
    if let (Some(m), Some(e)) = (meta.as_object_mut(), extra_meta.as_object()) {
        m.extend(e.clone());
    }
    let mut spec = json!({"containers": [{"name": "c", "image": "img:1"}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
}

/// The next watch event, as (type, object).
async fn event<S: futures::Stream<Item = Chunk> + Unpin>(s: &mut S) -> (String, Value) {
    let e = next_event(s).await;
    (
        e["type"].as_str().unwrap_or("").to_string(),
        e["object"].clone(),
    )
}

fn grace(o: &Value) -> Option<i64> {
    o["metadata"]["deletionGracePeriodSeconds"].as_i64()
}

fn deletion_ts(o: &Value) -> Option<i64> {
    // `YYYY-MM-DDTHH:MM:SSZ` to Unix seconds (days from civil: Howard Hinnant's algorithm).
    let s = o["metadata"]["deletionTimestamp"].as_str()?;
    let (date, time) = s.strip_suffix('Z')?.split_once('T')?;
    let d: Vec<i64> = date.split('-').filter_map(|x| x.parse().ok()).collect();
    let t: Vec<i64> = time.split(':').filter_map(|x| x.parse().ok()).collect();
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    Some(days * 86_400 + t[0] * 3600 + t[1] * 60 + t[2])
}

#[tokio::test]
async fn generation_follows_each_kinds_strategy() {
    let sim = sim_with(Some(Duration::from_millis(200))).await;
    let deploys: Api<Deployment> = Api::default_namespaced(sim.client());
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": {"a": "1"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "img:1"}]}}}
    }))
    .unwrap();
    let d = deploys.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    let path = "/apis/apps/v1/namespaces/default/deployments/web";
    // Deployment: an annotation change bumps (PrepareForUpdate compares annotations too) ...
    let v = merge(&sim, path, json!({"metadata": {"annotations": {"a": "2"}}})).await;
    assert_eq!(generation(&v), Some(2), "annotation change on a Deployment");
    // ... a label change does not ...
    let v = merge(&sim, path, json!({"metadata": {"labels": {"l": "x"}}})).await;
    assert_eq!(generation(&v), Some(2), "label change on a Deployment");
    // ... nor does a status write ...
    let v = merge(
        &sim,
        &format!("{path}/status"),
        json!({"status": {"observedGeneration": 2, "replicas": 1}}),
    )
    .await;
    assert_eq!(generation(&v), Some(2), "status update");
    // ... the scale subresource does (a spec.replicas change), and a spec change by JSON patch.
    deploys
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(
        deploys.get("web").await.unwrap().metadata.generation,
        Some(3)
    );
    let r = raw(
        &sim,
        "PATCH",
        path,
        &[("content-type", "application/json-patch+json")],
        r#"[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"img:2"}]"#,
    )
    .await;
    assert_eq!(generation(&r.json()), Some(4), "spec change by JSON patch");
    // An update that changes nothing keeps generation and resourceVersion.
    let cur = deploys.get("web").await.unwrap();
    let same = deploys
        .replace("web", &PostParams::default(), &cur)
        .await
        .unwrap();
    assert_eq!(
        (same.metadata.generation, same.metadata.resource_version),
        (Some(4), cur.metadata.resource_version)
    );

    // ReplicaSet: spec only (annotations do not bump).
    let rs = post(
        &sim,
        "/apis/apps/v1/namespaces/default/replicasets",
        json!({"metadata": {"name": "rs"}, "spec": apps_spec("b")}),
    )
    .await;
    assert_eq!(generation(&rs), Some(1));
    let rs_path = "/apis/apps/v1/namespaces/default/replicasets/rs";
    let v = merge(
        &sim,
        rs_path,
        json!({"metadata": {"annotations": {"x": "y"}}}),
    )
    .await;
    assert_eq!(generation(&v), Some(1), "annotation change on a ReplicaSet");
    let v = merge(&sim, rs_path, json!({"spec": {"replicas": 2}})).await;
    assert_eq!(generation(&v), Some(2));

    // ConfigMap: no generation at all, whatever changes.
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "c", "generation": 7}, "data": {"k": "v"}}),
    )
    .unwrap();
    let cm = cms.create(&PostParams::default(), &cm).await.unwrap();
    assert_eq!(
        cm.metadata.generation, None,
        "a ConfigMap keeps no generation"
    );
    let v = merge(
        &sim,
        "/api/v1/namespaces/default/configmaps/c",
        json!({"data": {"k": "w"}, "metadata": {"annotations": {"a": "b"}}}),
    )
    .await;
    assert_eq!(generation(&v), None);

    // Pod: spec changes bump, metadata and status do not.
    let p = post(&sim, PODS, pod_body("p", None, json!({}))).await;
    assert_eq!(generation(&p), Some(1));
    let v = merge(
        &sim,
        &format!("{PODS}/p"),
        json!({"metadata": {"labels": {"a": "b"}}}),
    )
    .await;
    assert_eq!(generation(&v), Some(1));
    let v = merge(
        &sim,
        &format!("{PODS}/p/status"),
        json!({"status": {"phase": "Running"}}),
    )
    .await;
    assert_eq!(generation(&v), Some(1));
    let v = merge(
        &sim,
        &format!("{PODS}/p"),
        json!({"spec": {"activeDeadlineSeconds": 60}}),
    )
    .await;
    assert_eq!(generation(&v), Some(2));

    // Custom kinds: anything but metadata; with a status subresource, status through the main
    // resource is ignored (so no bump), without one a status change bumps.
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    let w = post(
        &sim,
        widgets,
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"n": 1}}),
    )
    .await;
    assert_eq!(generation(&w), Some(1));
    let v = merge(
        &sim,
        &format!("{widgets}/w"),
        json!({"status": {"ok": true}}),
    )
    .await;
    assert_eq!(
        generation(&v),
        Some(2),
        "status of a kind without status subresource"
    );
    let v = merge(
        &sim,
        &format!("{widgets}/w"),
        json!({"metadata": {"annotations": {"a": "b"}}}),
    )
    .await;
    assert_eq!(generation(&v), Some(2));
    let v = merge(&sim, &format!("{widgets}/w"), json!({"extra": [1]})).await;
    assert_eq!(generation(&v), Some(3), "any non-metadata field");
    let gadgets = "/apis/example.com/v1/namespaces/default/gadgets";
    post(
        &sim,
        gadgets,
        json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"n": 1}}),
    )
    .await;
    let v = merge(
        &sim,
        &format!("{gadgets}/g"),
        json!({"status": {"ok": true}}),
    )
    .await;
    assert_eq!(
        generation(&v),
        Some(1),
        "status ignored through the main resource"
    );
    let v = merge(
        &sim,
        &format!("{gadgets}/g/status"),
        json!({"status": {"ok": true}}),
    )
    .await;
    assert_eq!(
        (generation(&v), v["status"]["ok"].as_bool()),
        (Some(1), Some(true))
    );
    let v = merge(&sim, &format!("{gadgets}/g"), json!({"spec": {"n": 2}})).await;
    assert_eq!(generation(&v), Some(2));

    // Service: no generation.
    let s = post(
        &sim,
        "/api/v1/namespaces/default/services",
        json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .await;
    assert_eq!(generation(&s), None);
    sim.shutdown().await;
}

#[tokio::test]
async fn scheduled_pod_is_marked_then_deleted_by_the_kubelet_stand_in() {
    let sim = sim_with(Some(Duration::from_millis(300))).await;
    post(&sim, PODS, pod_body("p", Some("node-1"), json!({}))).await;
    let (status, mut w) = raw_watch(
        &sim,
        &format!(
            "{PODS}?watch=true&resourceVersion={}",
            sim.resource_version()
        ),
    )
    .await;
    assert_eq!(status, 200);
    // Through kube::Api: the answer is the pod, still there, marked.
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let started = Instant::now();
    let answer = pods.delete("p", &DeleteParams::default()).await.unwrap();
    let marked = answer
        .left()
        .expect("a graceful delete answers with the object");
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(30));
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(
        marked.metadata.generation,
        Some(2),
        "BeforeDelete bumps a set generation"
    );
    let (t, o) = event(&mut w).await;
    assert_eq!((t.as_str(), grace(&o)), ("MODIFIED", Some(30)), "{o}");
    assert!(
        pods.get_opt("p").await.unwrap().is_some(),
        "terminating, not gone"
    );
    // The kubelet stand-in deletes it with grace 0: MODIFIED (grace 0), then DELETED.
    let (t, o) = event(&mut w).await;
    assert_eq!((t.as_str(), grace(&o)), ("MODIFIED", Some(0)), "{o}");
    let (t, o) = event(&mut w).await;
    assert_eq!(t, "DELETED", "{o}");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "deleted after the capped grace period, not at once ({:?})",
        started.elapsed()
    );
    assert!(pods.get_opt("p").await.unwrap().is_none());
    sim.shutdown().await;
}

#[tokio::test]
async fn unscheduled_and_terminal_pods_get_grace_zero_in_two_events() {
    let sim = sim_with(None).await;
    post(&sim, PODS, pod_body("unscheduled", None, json!({}))).await;
    sim.create_object(
        "pods",
        Some("default"),
        json!({"metadata": {"name": "done"}, "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i"}]},
               "status": {"phase": "Succeeded"}}),
    )
    .unwrap();
    let (_, mut w) = raw_watch(
        &sim,
        &format!(
            "{PODS}?watch=true&resourceVersion={}",
            sim.resource_version()
        ),
    )
    .await;
    for name in ["unscheduled", "done"] {
        // Even an explicit long grace period is 0 for these (CheckGracefulDelete).
        let (code, _) = delete(&sim, &format!("{PODS}/{name}"), Some(60)).await;
        assert_eq!(code, 200);
        let (t, o) = event(&mut w).await;
        assert_eq!(
            (t.as_str(), grace(&o)),
            ("MODIFIED", Some(0)),
            "{name}: {o}"
        );
        assert!(o["metadata"]["deletionTimestamp"].is_string());
        let (t, o) = event(&mut w).await;
        assert_eq!(
            (t.as_str(), o["metadata"]["name"].as_str()),
            ("DELETED", Some(name))
        );
        // Gone when the DELETE answered.
        assert!(
            sim.get_object("pods", Some("default"), name)
                .unwrap()
                .is_none()
        );
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn explicit_grace_periods_and_shortening() {
    // No kubelet stand-in: the pod stays terminating until a grace-0 delete.
    let sim = sim_with(None).await;
    let mut body = pod_body("p", Some("node-1"), json!({}));
    body["spec"]["terminationGracePeriodSeconds"] = json!(45);
    post(&sim, PODS, body).await;
    let (_, mut w) = raw_watch(
        &sim,
        &format!(
            "{PODS}?watch=true&resourceVersion={}",
            sim.resource_version()
        ),
    )
    .await;
    // No gracePeriodSeconds: the pod's own terminationGracePeriodSeconds.
    let (_, o) = delete(&sim, &format!("{PODS}/p"), None).await;
    assert_eq!(grace(&o), Some(45));
    let first = deletion_ts(&o).unwrap();
    let (t, _) = event(&mut w).await;
    assert_eq!(t, "MODIFIED");
    // A longer or equal period changes nothing (no event; the next one proves it).
    let rv = o["metadata"]["resourceVersion"].clone();
    let (code, o) = delete(&sim, &format!("{PODS}/p"), Some(100)).await;
    assert_eq!(
        (code, grace(&o), &o["metadata"]["resourceVersion"]),
        (200, Some(45), &rv)
    );
    // A shorter one moves deletionTimestamp back by the difference.
    let (_, o) = delete(&sim, &format!("{PODS}/p"), Some(5)).await;
    assert_eq!(grace(&o), Some(5));
    assert_eq!(deletion_ts(&o).unwrap(), first - 40);
    let (t, o) = event(&mut w).await;
    assert_eq!((t.as_str(), grace(&o)), ("MODIFIED", Some(5)));
    assert_eq!(
        o["metadata"]["generation"], 2,
        "bumped once, on the first mark"
    );
    // Grace 0 (kubectl delete --grace-period=0 --force, or the kubelet): mark with 0, delete.
    let (code, _) = delete(&sim, &format!("{PODS}/p"), Some(0)).await;
    assert_eq!(code, 200);
    let (t, o) = event(&mut w).await;
    assert_eq!((t.as_str(), grace(&o)), ("MODIFIED", Some(0)));
    let (t, _) = event(&mut w).await;
    assert_eq!(t, "DELETED");
    sim.shutdown().await;
}

#[tokio::test]
async fn finalizers_hold_deletion() {
    let sim = sim_with(Some(Duration::from_millis(100))).await;
    let cm_path = "/api/v1/namespaces/default/configmaps";
    post(
        &sim,
        cm_path,
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "data": {}}),
    )
    .await;
    post(
        &sim,
        PODS,
        pod_body(
            "held",
            Some("node-1"),
            json!({"finalizers": ["example.com/hold"]}),
        ),
    )
    .await;
    let (_, mut cw) = raw_watch(
        &sim,
        &format!(
            "{cm_path}?watch=true&resourceVersion={}",
            sim.resource_version()
        ),
    )
    .await;
    let (_, mut pw) = raw_watch(
        &sim,
        &format!(
            "{PODS}?watch=true&resourceVersion={}",
            sim.resource_version()
        ),
    )
    .await;

    // A ConfigMap (no graceful deletion): marked with grace 0 and kept.
    let (code, o) = delete(&sim, &format!("{cm_path}/held"), None).await;
    assert_eq!((code, grace(&o)), (200, Some(0)));
    let (t, o) = event(&mut cw).await;
    assert_eq!(t, "MODIFIED");
    assert!(o["metadata"]["deletionTimestamp"].is_string());
    // A second delete changes nothing.
    let (_, again) = delete(&sim, &format!("{cm_path}/held"), None).await;
    assert_eq!(
        again["metadata"]["resourceVersion"],
        o["metadata"]["resourceVersion"]
    );
    // Removing the last finalizer deletes it (one DELETED event, which carries the last stored
    // state, finalizer included, at the deletion's resourceVersion).
    let answer = merge(
        &sim,
        &format!("{cm_path}/held"),
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    let (t, o) = event(&mut cw).await;
    assert_eq!(t, "DELETED");
    assert_eq!(
        o["metadata"]["finalizers"],
        json!(["example.com/hold"]),
        "{o}"
    );
    // The answer is the patched object, at the resourceVersion it was patched from
    // (`deleteWithoutFinalizers` returns the request's object).
    assert!(answer["metadata"].get("finalizers").is_none(), "{answer}");
    assert_eq!(
        answer["metadata"]["resourceVersion"],
        again["metadata"]["resourceVersion"]
    );
    assert_ne!(
        o["metadata"]["resourceVersion"],
        again["metadata"]["resourceVersion"]
    );

    // A pod with a finalizer: graceful mark; the kubelet's grace-0 delete only marks again;
    // the finalizer's removal then deletes it.
    let (_, o) = delete(&sim, &format!("{PODS}/held"), None).await;
    assert_eq!(grace(&o), Some(30));
    let (t, o) = event(&mut pw).await;
    assert_eq!((t.as_str(), grace(&o)), ("MODIFIED", Some(30)));
    let (t, o) = event(&mut pw).await;
    assert_eq!(
        (t.as_str(), grace(&o)),
        ("MODIFIED", Some(0)),
        "the kubelet stand-in"
    );
    assert!(
        sim.get_object("pods", Some("default"), "held")
            .unwrap()
            .is_some()
    );
    merge(
        &sim,
        &format!("{PODS}/held"),
        json!({"metadata": {"finalizers": []}}),
    )
    .await;
    let (t, _) = event(&mut pw).await;
    assert_eq!(t, "DELETED");
    sim.shutdown().await;
}

#[tokio::test]
async fn finalizer_removal_during_the_grace_period_waits_for_the_kubelet() {
    let sim = sim_with(None).await;
    post(
        &sim,
        PODS,
        pod_body(
            "p",
            Some("node-1"),
            json!({"finalizers": ["example.com/hold"]}),
        ),
    )
    .await;
    delete(&sim, &format!("{PODS}/p"), None).await;
    // shouldDeleteDuringUpdate: the stored grace period is 30, so the pod stays.
    let v = merge(
        &sim,
        &format!("{PODS}/p"),
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    assert_eq!(grace(&v), Some(30));
    assert!(
        sim.get_object("pods", Some("default"), "p")
            .unwrap()
            .is_some()
    );
    let (code, _) = delete(&sim, &format!("{PODS}/p"), Some(0)).await;
    assert_eq!(code, 200);
    assert!(
        sim.get_object("pods", Some("default"), "p")
            .unwrap()
            .is_none()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn strategic_merge_patch_by_merge_keys_and_directives() {
    let sim = sim_with(None).await;
    let deploys: Api<Deployment> = Api::default_namespaced(sim.client());
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "finalizers": ["a/b"]},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [
                                  {"name": "app", "image": "app:1",
                                   "env": [{"name": "A", "value": "1"}],
                                   "ports": [{"containerPort": 80}]},
                                  {"name": "sidecar", "image": "side:1"}]}}}
    }))
    .unwrap();
    deploys.create(&PostParams::default(), &d).await.unwrap();
    // What kubectl apply sends when `sidecar` is replaced by `log` listed first, app's image
    // changes and env gains B (kubectl's three-way strategic patch).
    let patch = json!({
        "metadata": {"finalizers": ["c/d"]},
        "spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "log"}, {"name": "app"}],
            "containers": [
                {"name": "app", "image": "app:2",
                 "$setElementOrder/env": [{"name": "A"}, {"name": "B"}],
                 "env": [{"name": "B", "value": "2"}]},
                {"name": "log", "image": "log:1"},
                {"$patch": "delete", "name": "sidecar"}
            ]}}}
    });
    let out = deploys
        .patch("web", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
    let v = serde_json::to_value(&out).unwrap();
    let cs = &v["spec"]["template"]["spec"]["containers"];
    assert_eq!(cs[0]["name"], "log", "{cs}");
    assert_eq!(cs[1]["name"], "app");
    assert_eq!(cs[1]["image"], "app:2");
    assert_eq!(
        cs[1]["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}]),
        "kept by the merge (the protocol defaulted on create)"
    );
    assert_eq!(
        cs[1]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    );
    assert_eq!(cs.as_array().map(Vec::len), Some(2));
    assert_eq!(
        v["metadata"]["finalizers"],
        json!(["c/d", "a/b"]),
        "finalizers merge as a set, the new one first (`normalizeElementOrder`)"
    );
    // $patch: replace on a list and a malformed patch (no merge key): 400.
    let r = raw(
        &sim,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/web",
        &[("content-type", "application/strategic-merge-patch+json")],
        json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}).to_string(),
    )
    .await;
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    // Custom kinds have no strategic merge patch: 415, as on kube-apiserver.
    let widgets = Api::<DynamicObject>::namespaced_with(
        sim.client(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("example.com", "v1", "Widget"),
            "widgets",
        ),
    );
    let w: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}
    }))
    .unwrap();
    widgets.create(&PostParams::default(), &w).await.unwrap();
    let e = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"a": 1}})),
        )
        .await
        .unwrap_err();
    match e {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (415, "UnsupportedMediaType"))
        }
        other => panic!("{other:?}"),
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn namespace_deletion_removes_even_scheduled_pods_without_a_kubelet() {
    // No kubelet stand-in: the namespace controller stand-in deletes pods with grace 0 then
    // (else the namespace would stay Terminating for ever).
    let sim = sim_with(None).await;
    post(
        &sim,
        "/api/v1/namespaces/team/pods",
        pod_body("p", Some("node-1"), json!({})),
    )
    .await;
    let (_, mut w) = raw_watch(
        &sim,
        &format!(
            "/api/v1/namespaces/team/pods?watch=true&resourceVersion={}",
            sim.resource_version()
        ),
    )
    .await;
    let (code, ns) = delete(&sim, "/api/v1/namespaces/team", None).await;
    assert_eq!(
        (code, ns["status"]["phase"].as_str()),
        (200, Some("Terminating"))
    );
    let (t, o) = event(&mut w).await;
    assert_eq!((t.as_str(), grace(&o)), ("MODIFIED", Some(0)));
    let (t, _) = event(&mut w).await;
    assert_eq!(t, "DELETED");
    kinformer_sim::wait_until(common::DEADLINE, || {
        sim.get_object("namespaces", None, "team")
            .unwrap()
            .is_none()
    })
    .await
    .expect("the namespace is removed");
    sim.shutdown().await;
}

fn now_secs() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

/// Waits (bounded) until the wall clock has reached Unix second `t`.
async fn wait_for_second(t: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while now_secs() < t {
        assert!(Instant::now() < deadline, "the clock never reached {t}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn shortening_a_grace_period_never_moves_deletion_into_the_past() {
    // rest.BeforeDelete: a shorter period whose deletionTimestamp would already be past sets it
    // to now, and a graceful one (not 0) becomes 1 second.
    let sim = sim_with(None).await;
    let mut body = pod_body("p", Some("node-1"), json!({}));
    body["spec"]["terminationGracePeriodSeconds"] = json!(30);
    post(&sim, PODS, body).await;
    let (_, o) = delete(&sim, &format!("{PODS}/p"), None).await;
    let started = deletion_ts(&o).unwrap() - 30;
    // A period of 2 ends at started + 2: wait until that lies in the past.
    wait_for_second(started + 3).await;
    let (code, o) = delete(&sim, &format!("{PODS}/p"), Some(2)).await;
    let at = now_secs();
    assert_eq!(code, 200);
    assert_eq!(grace(&o), Some(1), "{o}");
    let ts = deletion_ts(&o).unwrap();
    assert!(
        ts >= started + 3 && ts <= at,
        "deletionTimestamp {ts} is now ({at}), not the past {}",
        started + 2
    );
    // The final grace-0 delete: the timestamp is now too, then the pod goes.
    wait_for_second(ts + 1).await;
    let (_, mut w) = raw_watch(
        &sim,
        &format!(
            "{PODS}?watch=true&resourceVersion={}",
            sim.resource_version()
        ),
    )
    .await;
    let (code, _) = delete(&sim, &format!("{PODS}/p"), Some(0)).await;
    assert_eq!(code, 200);
    let (t, o) = event(&mut w).await;
    assert_eq!((t.as_str(), grace(&o)), ("MODIFIED", Some(0)));
    assert!(deletion_ts(&o).unwrap() > ts, "{o}");
    let (t, _) = event(&mut w).await;
    assert_eq!(t, "DELETED");
    sim.shutdown().await;
}

#[tokio::test]
async fn delete_options_come_from_the_body_or_else_the_query() {
    // handlers/delete.go DeleteResource: the body's DeleteOptions when there is a body,
    // otherwise the query parameters.
    let sim = sim_with(None).await;
    post(&sim, PODS, pod_body("q", Some("node-1"), json!({}))).await;
    post(&sim, PODS, pod_body("b", Some("node-1"), json!({}))).await;
    let r = raw(
        &sim,
        "DELETE",
        &format!("{PODS}/q?gracePeriodSeconds=0"),
        &[],
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        sim.get_object("pods", Some("default"), "q")
            .unwrap()
            .is_none(),
        "gracePeriodSeconds=0 in the query deletes at once"
    );
    let r = raw(
        &sim,
        "DELETE",
        &format!("{PODS}/b?gracePeriodSeconds=0"),
        &[("content-type", "application/json")],
        "{}",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        grace(&r.json()),
        Some(30),
        "with a body the query is not read: {}",
        r.json()
    );
    // A bad number in the query is strconv's 400.
    let r = raw(
        &sim,
        "DELETE",
        &format!("{PODS}/b?gracePeriodSeconds=soon"),
        &[],
        "",
    )
    .await;
    assert_eq!(
        (r.status, r.json()["message"].clone()),
        (
            400,
            json!("strconv.ParseInt: parsing \"soon\": invalid syntax")
        )
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn delete_preconditions_answer_like_before_delete() {
    let sim = sim_with(None).await;
    let d = post(
        &sim,
        "/apis/apps/v1/namespaces/default/deployments",
        json!({"metadata": {"name": "d"}, "spec": apps_spec("d")}),
    )
    .await;
    let rv = d["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let uid = d["metadata"]["uid"].as_str().unwrap().to_string();
    let del = |body: Value| {
        let sim = &sim;
        async move {
            raw(
                sim,
                "DELETE",
                "/apis/apps/v1/namespaces/default/deployments/d",
                &[("content-type", "application/json")],
                body.to_string(),
            )
            .await
        }
    };
    let r = del(json!({"preconditions": {"uid": "other"}})).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json()["message"],
        format!(
            "Operation cannot be fulfilled on Deployment.apps \"d\": the UID in the precondition (other) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
        )
    );
    assert_eq!(
        r.json()["details"],
        json!({"name": "d", "group": "apps", "kind": "Deployment"})
    );
    let r = del(json!({"preconditions": {"resourceVersion": "1"}})).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json()["message"],
        format!(
            "Operation cannot be fulfilled on Deployment.apps \"d\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({rv}). The object might have been modified"
        )
    );
    let r = del(json!({"preconditions": {"uid": uid, "resourceVersion": rv}})).await;
    assert_eq!(r.status, 200);
    sim.shutdown().await;
}

#[tokio::test]
async fn server_side_apply_removes_what_a_manager_stops_applying() {
    let sim = sim_with(None).await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let apply = |manager: &'static str, v: Value| {
        let api = api.clone();
        async move {
            api.patch("c", &PatchParams::apply(manager), &Patch::Apply(v))
                .await
                .expect("apply")
        }
    };
    let full = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "1", "b": "2"}}, "data": {"x": "1", "y": "2", "z": "3"}});
    apply("one", full).await;
    // Another manager applies z too: it stays when "one" drops it.
    apply("two", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"z": "3"}})).await;
    let cm = apply("one", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"x": "1"}})).await;
    let data: Vec<&str> = cm
        .data
        .as_ref()
        .map(|d| d.keys().map(String::as_str).collect())
        .unwrap_or_default();
    assert_eq!(data, ["x", "z"], "{cm:?}");
    let labels: Vec<&str> = cm
        .metadata
        .labels
        .as_ref()
        .map(|l| l.keys().map(String::as_str).collect())
        .unwrap_or_default();
    assert_eq!(labels, ["a"]);
    let mut managers: Vec<(String, String)> = cm
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            (
                e.manager.unwrap_or_default(),
                e.operation.unwrap_or_default(),
            )
        })
        .collect();
    // Sorted by time (seconds), then manager: "one" applied last, possibly a second later.
    managers.sort();
    assert_eq!(
        managers,
        [
            ("one".to_string(), "Apply".to_string()),
            ("two".to_string(), "Apply".to_string())
        ]
    );
    // A client-side update that leaves managedFields out keeps them.
    let mut plain = api.get("c").await.unwrap();
    plain.metadata.managed_fields = None;
    let updated = api
        .replace("c", &PostParams::default(), &plain)
        .await
        .unwrap();
    assert_eq!(updated.metadata.managed_fields.map(|m| m.len()), Some(2));
    sim.shutdown().await;
}

#[tokio::test]
async fn empty_metadata_maps_are_not_stored() {
    // ObjectMeta's labels, annotations, finalizers, ownerReferences are omitempty: the real
    // server never returns them empty.
    let sim = sim_with(None).await;
    let o = post(
        &sim,
        "/api/v1/namespaces/default/configmaps",
        json!({"metadata": {"name": "c", "labels": {}, "annotations": {"a": "1"}, "finalizers": []}}),
    )
    .await;
    assert!(o["metadata"].get("labels").is_none(), "{o}");
    assert!(o["metadata"].get("finalizers").is_none(), "{o}");
    let o = merge(
        &sim,
        "/api/v1/namespaces/default/configmaps/c",
        json!({"metadata": {"annotations": {"a": null}}}),
    )
    .await;
    assert!(o["metadata"].get("annotations").is_none(), "{o}");
    sim.shutdown().await;
}

#[tokio::test]
async fn built_in_kinds_are_defaulted_like_the_real_server() {
    let sim = sim_with(None).await;
    let deploys = "/apis/apps/v1/namespaces/default/deployments";
    let bare = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {"metadata": {"labels": {"app": "d"}},
        "spec": {"containers": [{"name": "c", "image": "img", "ports": [{"containerPort": 80}]}]}}}});
    let d = post(&sim, deploys, bare.clone()).await;
    let spec = &d["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["strategy"]["type"], "RollingUpdate");
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxSurge"], "25%");
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(spec["progressDeadlineSeconds"], 600);
    let c = &spec["template"]["spec"]["containers"][0];
    assert_eq!(c["imagePullPolicy"], "Always", "no tag means latest");
    assert_eq!(c["terminationMessagePolicy"], "File");
    assert_eq!(c["ports"][0]["protocol"], "TCP");
    assert_eq!(
        spec["template"]["spec"]["schedulerName"],
        "default-scheduler"
    );
    // A controller that PUTs its desired object without the defaults changes nothing: the
    // body is defaulted before the strategy compares specs (no new generation).
    let mut put = bare.clone();
    put["metadata"]["resourceVersion"] = d["metadata"]["resourceVersion"].clone();
    let r = raw(
        &sim,
        "PUT",
        &format!("{deploys}/d"),
        &[("content-type", "application/json")],
        put.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(generation(&r.json()), Some(1), "{}", r.json());
    assert_eq!(
        r.json()["metadata"]["resourceVersion"],
        d["metadata"]["resourceVersion"]
    );

    // Pods: SetDefaults_Pod, and the create strategy's QoS class.
    let mut body = pod_body("p", None, json!({}));
    body["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "1", "memory": "1Gi"}});
    let p = post(&sim, PODS, body).await;
    assert_eq!(p["spec"]["enableServiceLinks"], true);
    assert_eq!(p["spec"]["terminationGracePeriodSeconds"], 30);
    assert_eq!(
        p["spec"]["containers"][0]["resources"]["requests"],
        json!({"cpu": "1", "memory": "1Gi"})
    );
    assert_eq!(
        p["status"],
        json!({"phase": "Pending", "qosClass": "Guaranteed"})
    );
    let ns = post(
        &sim,
        "/api/v1/namespaces",
        json!({"metadata": {"name": "team"}}),
    )
    .await;
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team"
    );
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    let svc = post(
        &sim,
        "/api/v1/namespaces/default/services",
        json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 8080}]}}),
    )
    .await;
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert_eq!(
        svc["spec"]["ports"][0],
        json!({"port": 8080, "protocol": "TCP", "targetPort": 8080})
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn status_writes_take_the_metadata_each_status_strategy_allows() {
    let sim = sim_with(None).await;
    let put_status = |path: String, mut obj: Value| {
        let sim = &sim;
        async move {
            obj["metadata"]["labels"] = json!({"l": "new"});
            obj["metadata"]["annotations"] = json!({"a": "new"});
            obj["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"}]);
            obj["status"] = json!({"replicas": 1, "phase": "Running"});
            let r = raw(
                sim,
                "PUT",
                &format!("{path}/status"),
                &[("content-type", "application/json")],
                obj.to_string(),
            )
            .await;
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
            r.json()
        }
    };
    let meta = json!({"labels": {"l": "old"}, "annotations": {"a": "old"}});
    // ReplicaSet: only the spec is reset (rsStatusStrategy).
    let rs = post(
        &sim,
        "/apis/apps/v1/namespaces/default/replicasets",
        json!({"metadata": {"name": "r", "labels": meta["labels"], "annotations": meta["annotations"]}, "spec": apps_spec("r")}),
    )
    .await;
    let out = put_status("/apis/apps/v1/namespaces/default/replicasets/r".into(), rs).await;
    assert_eq!(
        (
            &out["metadata"]["labels"]["l"],
            &out["metadata"]["annotations"]["a"]
        ),
        (&json!("new"), &json!("new"))
    );
    assert_eq!(out["metadata"]["ownerReferences"][0]["name"], "x");
    // Deployment: the labels are reset too (deploymentStatusStrategy).
    let d = post(
        &sim,
        "/apis/apps/v1/namespaces/default/deployments",
        json!({"metadata": {"name": "d", "labels": meta["labels"], "annotations": meta["annotations"]}, "spec": apps_spec("d")}),
    )
    .await;
    let out = put_status("/apis/apps/v1/namespaces/default/deployments/d".into(), d).await;
    assert_eq!(
        (
            &out["metadata"]["labels"]["l"],
            &out["metadata"]["annotations"]["a"]
        ),
        (&json!("old"), &json!("new"))
    );
    assert_eq!(generation(&out), Some(1), "a status write never bumps it");
    // Pod: the owner references are reset (podStatusStrategy).
    let mut body = pod_body("p", None, json!({}));
    body["metadata"]["labels"] = meta["labels"].clone();
    let p = post(&sim, PODS, body).await;
    let out = put_status(format!("{PODS}/p"), p).await;
    assert_eq!(out["metadata"]["labels"]["l"], "new");
    assert!(out["metadata"].get("ownerReferences").is_none(), "{out}");
    assert_eq!(out["status"]["phase"], "Running");
    // A custom resource keeps all its metadata (the CRD statusStrategy copies the stored object).
    let g = post(
        &sim,
        "/apis/example.com/v1/namespaces/default/gadgets",
        json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g", "labels": meta["labels"]}, "spec": {}}),
    )
    .await;
    let out = put_status(
        "/apis/example.com/v1/namespaces/default/gadgets/g".into(),
        g,
    )
    .await;
    assert_eq!(out["metadata"]["labels"]["l"], "old");
    assert!(out["metadata"].get("annotations").is_none(), "{out}");
    sim.shutdown().await;
}

/// Metadata a status write sends: labels, annotations, finalizers and owner references all
/// different from the stored ones.
fn status_write_meta() -> Value {
    json!({
        "labels": {"l": "new"},
        "annotations": {"a": "new"},
        "finalizers": ["example.com/f"],
        "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"}],
    })
}

/// The four metadata collections a status write may carry, as (labels.l, annotations.a,
/// finalizers, ownerReferences[0].name).
fn status_meta_of(v: &Value) -> (Value, Value, Value, Value) {
    let m = &v["metadata"];
    (
        m["labels"]["l"].clone(),
        m["annotations"]["a"].clone(),
        m["finalizers"].clone(),
        m["ownerReferences"][0]["name"].clone(),
    )
}

fn all_new() -> (Value, Value, Value, Value) {
    (
        json!("new"),
        json!("new"),
        json!(["example.com/f"]),
        json!("x"),
    )
}

/// Creates `obj` through `api`, then replaces its status with the stored object carrying
/// [`status_write_meta`] and `edit`'s changes, checks the answer took all of that metadata and
/// returns it as JSON.
async fn status_write_taking_all_metadata<K>(
    api: &Api<K>,
    obj: Value,
    edit: impl FnOnce(&mut Value),
) -> Value
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(obj).unwrap(),
        )
        .await
        .unwrap();
    let name = created.meta().name.clone().unwrap();
    let mut v = serde_json::to_value(&created).unwrap();
    v["metadata"]
        .as_object_mut()
        .unwrap()
        .extend(status_write_meta().as_object().unwrap().clone());
    edit(&mut v);
    let out = api
        .replace_status(
            &name,
            &PostParams::default(),
            &serde_json::from_value(v).unwrap(),
        )
        .await
        .unwrap();
    let out = serde_json::to_value(&out).unwrap();
    assert_eq!(status_meta_of(&out), all_new(), "{out}");
    out
}

/// A merge patch of the status subresource, the answer as JSON.
async fn merge_status<K>(api: &Api<K>, name: &str, patch: Value) -> Value
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let out = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    serde_json::to_value(&out).unwrap()
}

#[tokio::test]
async fn service_status_writes_take_all_the_metadata() {
    // serviceStatusStrategy.PrepareForUpdate resets only the spec.
    let sim = sim_with(None).await;
    let api: Api<Service> = Api::default_namespaced(sim.client());
    let obj = json!({
        "metadata": {"name": "s", "labels": {"l": "old"}, "annotations": {"a": "old"}},
        "spec": {"selector": {"app": "s"}, "ports": [{"port": 80}]}
    });
    let out = status_write_taking_all_metadata(&api, obj, |v| {
        v["spec"]["selector"] = json!({"app": "other"});
        v["status"] = json!({"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}});
    })
    .await;
    assert_eq!(
        out["spec"]["selector"]["app"], "s",
        "the spec is the stored one"
    );
    assert_eq!(out["status"]["loadBalancer"]["ingress"][0]["ip"], "1.2.3.4");
    // A merge patch of the status subresource changes the labels too.
    let out = merge_status(&api, "s", json!({"metadata": {"labels": {"l": "patched"}}})).await;
    assert_eq!(out["metadata"]["labels"]["l"], "patched");
    sim.shutdown().await;
}

#[tokio::test]
async fn namespace_status_writes_take_all_the_metadata_and_keep_the_name_label() {
    // namespaceStatusStrategy.PrepareForUpdate resets only the spec; the body is defaulted
    // like any decoded object (SetDefaults_Namespace puts the name label back).
    let sim = sim_with(None).await;
    let api: Api<Namespace> = Api::all(sim.client());
    let obj = json!({
        "metadata": {"name": "team", "labels": {"l": "old"}, "annotations": {"a": "old"}}
    });
    let out = status_write_taking_all_metadata(&api, obj, |v| {
        v["spec"]["finalizers"] = json!([]);
        v["status"] = json!({"phase": "Active", "conditions": [{"type": "T", "status": "True"}]});
    })
    .await;
    assert_eq!(
        out["metadata"]["labels"]["kubernetes.io/metadata.name"], "team",
        "{out}"
    );
    assert_eq!(
        out["spec"]["finalizers"],
        json!(["kubernetes"]),
        "the stored spec"
    );
    assert_eq!(out["status"]["conditions"][0]["type"], "T");
    let out = merge_status(
        &api,
        "team",
        json!({"metadata": {"annotations": {"a": "patched"}}}),
    )
    .await;
    assert_eq!(out["metadata"]["annotations"]["a"], "patched");
    sim.shutdown().await;
}

#[tokio::test]
async fn node_status_writes_take_all_the_metadata() {
    // nodeStatusStrategy.PrepareForUpdate resets only the spec.
    let sim = sim_with(None).await;
    let api: Api<Node> = Api::all(sim.client());
    let obj = json!({
        "metadata": {"name": "n1", "labels": {"l": "old"}, "annotations": {"a": "old"}},
        "spec": {"unschedulable": false}
    });
    let out = status_write_taking_all_metadata(&api, obj, |v| {
        v["spec"]["unschedulable"] = json!(true);
        v["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
    })
    .await;
    assert_ne!(
        out["spec"]["unschedulable"],
        json!(true),
        "the stored spec: {out}"
    );
    assert_eq!(out["status"]["conditions"][0]["type"], "Ready");
    let out = merge_status(
        &api,
        "n1",
        json!({"metadata": {"labels": {"l": "patched"}}}),
    )
    .await;
    assert_eq!(out["metadata"]["labels"]["l"], "patched");
    sim.shutdown().await;
}
