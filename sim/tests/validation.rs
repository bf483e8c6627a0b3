//! Validation as kube-apiserver does it: schema decoding of write bodies under
//! `fieldValidation` (unknown, duplicate and wrongly typed fields, `Warning` headers), object
//! metadata, and the per-kind rules of pods, config maps, secrets, deployments and replica sets.
//! Checked over raw HTTP where the status code, headers or the exact Status matter, and through
//! `kube::Api`.

mod common;

use common::{RawResponse, raw};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kinformer_sim::{CustomResource, Scope, Sim, SimConfig};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const CT_JSON: (&str, &str) = ("content-type", "application/json");

fn deployment(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}
            }
        }
    })
}

/// A deployment body with a misspelt `spec.replica` and a misspelt container `imagez`.
fn misspelt(name: &str) -> String {
    let mut d = deployment(name);
    d["spec"]["replica"] = json!(3);
    d["spec"]["template"]["spec"]["containers"][0]["imagez"] = json!("x");
    d.to_string()
}

fn warnings(r: &RawResponse) -> Vec<String> {
    r.headers
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

fn text(r: &RawResponse) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

fn assert_status(r: &RawResponse, code: u16, reason: &str, message: &str) {
    assert_eq!(r.status, code, "{}", text(r));
    let s = r.json();
    assert_eq!(s["kind"], "Status");
    assert_eq!(s["code"], code);
    assert_eq!(s["message"], message, "{}", text(r));
    if reason.is_empty() {
        assert!(s.get("reason").is_none(), "{s}");
    } else {
        assert_eq!(s["reason"], reason);
    }
}

async fn get(sim: &Sim, path: &str) -> Value {
    let r = raw(sim, "GET", path, &[], "").await;
    assert_eq!(r.status, 200, "{}", text(&r));
    r.json()
}

#[tokio::test]
async fn strict_create_refuses_unknown_fields_with_kube_apiservers_words() {
    let sim = common::sim().await;
    let r = raw(
        &sim,
        "POST",
        &format!("{DEPLOYS}?fieldValidation=Strict"),
        &[CT_JSON],
        misspelt("web"),
    )
    .await;
    // createHandler: transformDecodeError over runtime.NewStrictDecodingError, errors in the
    // order of the body, joined with ", ".
    assert_status(
        &r,
        400,
        "BadRequest",
        r#"Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: unknown field "spec.replica", unknown field "spec.template.spec.containers[0].imagez""#,
    );
    assert!(warnings(&r).is_empty());
    let r = raw(&sim, "GET", &format!("{DEPLOYS}/web"), &[], "").await;
    assert_eq!(r.status, 404, "nothing stored");
}

#[tokio::test]
async fn warn_is_the_default_one_warning_per_field_and_the_fields_are_dropped() {
    let sim = common::sim().await;
    for (query, name) in [("", "dflt"), ("?fieldValidation=Warn", "warn")] {
        let r = raw(
            &sim,
            "POST",
            &format!("{DEPLOYS}{query}"),
            &[CT_JSON],
            misspelt(name),
        )
        .await;
        assert_eq!(r.status, 201, "{}", text(&r));
        assert_eq!(
            warnings(&r),
            vec![
                r#"299 - "unknown field \"spec.replica\"""#,
                r#"299 - "unknown field \"spec.template.spec.containers[0].imagez\"""#,
            ]
        );
        let created = r.json();
        assert!(created["spec"].get("replica").is_none(), "{created}");
        let stored = get(&sim, &format!("{DEPLOYS}/{name}")).await;
        assert!(stored["spec"].get("replica").is_none());
        assert!(
            stored["spec"]["template"]["spec"]["containers"][0]
                .get("imagez")
                .is_none()
        );
        assert_eq!(stored["spec"]["replicas"], 1, "defaulted as without the field");
    }
}

#[tokio::test]
async fn ignore_accepts_silently_and_still_drops_the_fields() {
    let sim = common::sim().await;
    let r = raw(
        &sim,
        "POST",
        &format!("{DEPLOYS}?fieldValidation=Ignore"),
        &[CT_JSON],
        misspelt("web"),
    )
    .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    assert!(warnings(&r).is_empty());
    let stored = get(&sim, &format!("{DEPLOYS}/web")).await;
    assert!(stored["spec"].get("replica").is_none());
}

#[tokio::test]
async fn duplicate_fields_are_found_in_the_raw_body() {
    let sim = common::sim().await;
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","labels":{"a":"1","a":"2"}},"data":{"k":"1"},"data":{"k":"2"}}"#;
    let path = "/api/v1/namespaces/default/configmaps";
    let r = raw(
        &sim,
        "POST",
        &format!("{path}?fieldValidation=Strict"),
        &[CT_JSON],
        body,
    )
    .await;
    assert_status(
        &r,
        400,
        "BadRequest",
        r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: duplicate field "metadata.labels.a", duplicate field "data""#,
    );
    let r = raw(&sim, "POST", path, &[CT_JSON], body).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(
        warnings(&r),
        vec![
            r#"299 - "duplicate field \"metadata.labels.a\"""#,
            r#"299 - "duplicate field \"data\"""#,
        ]
    );
    // The last value wins, as in Go.
    let cm = r.json();
    assert_eq!(cm["data"]["k"], "2");
    assert_eq!(cm["metadata"]["labels"]["a"], "2");
}

#[tokio::test]
async fn wrongly_typed_values_are_refused_whatever_field_validation_says() {
    let sim = common::sim().await;
    let mut d = deployment("web");
    d["spec"]["replicas"] = json!("3");
    for query in ["", "?fieldValidation=Ignore", "?fieldValidation=Strict"] {
        let r = raw(
            &sim,
            "POST",
            &format!("{DEPLOYS}{query}"),
            &[CT_JSON],
            d.to_string(),
        )
        .await;
        assert_status(
            &r,
            400,
            "BadRequest",
            "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32",
        );
    }
    // A list where a string is wanted, deep in the template.
    let mut d = deployment("web");
    d["spec"]["template"]["spec"]["containers"][0]["image"] = json!(["a"]);
    let r = raw(&sim, "POST", DEPLOYS, &[CT_JSON], d.to_string()).await;
    assert_eq!(r.status, 400, "{}", text(&r));
    assert_eq!(
        r.json()["message"],
        "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal array into Go struct field Container.spec.template.spec.containers.image of type string"
    );
}

#[tokio::test]
async fn update_decodes_like_create() {
    let sim = common::sim().await;
    let r = raw(
        &sim,
        "POST",
        DEPLOYS,
        &[CT_JSON],
        deployment("web").to_string(),
    )
    .await;
    assert_eq!(r.status, 201);
    let mut d = r.json();
    d["spec"]["replica"] = json!(5);
    d["metadata"]["labelz"] = json!({});
    let path = format!("{DEPLOYS}/web");
    let r = raw(
        &sim,
        "PUT",
        &format!("{path}?fieldValidation=Strict"),
        &[CT_JSON],
        d.to_string(),
    )
    .await;
    assert_status(
        &r,
        400,
        "BadRequest",
        r#"Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: unknown field "metadata.labelz", unknown field "spec.replica""#,
    );
    let r = raw(&sim, "PUT", &path, &[CT_JSON], d.to_string()).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(warnings(&r).len(), 2);
    assert!(r.json()["spec"].get("replica").is_none());
    // The status subresource decodes the same object.
    let mut d = r.json();
    d["status"]["replicaz"] = json!(1);
    let r = raw(
        &sim,
        "PUT",
        &format!("{path}/status?fieldValidation=Strict"),
        &[CT_JSON],
        d.to_string(),
    )
    .await;
    assert_status(
        &r,
        400,
        "BadRequest",
        r#"Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: unknown field "status.replicaz""#,
    );
    // The scale subresource decodes an autoscaling/v1 Scale.
    let scale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web"}, "spec": {"replicas": 2, "replica": 3}});
    let r = raw(
        &sim,
        "PUT",
        &format!("{path}/scale?fieldValidation=Strict"),
        &[CT_JSON],
        scale.to_string(),
    )
    .await;
    assert_status(
        &r,
        400,
        "BadRequest",
        r#"Scale in version "v1" cannot be handled as a Scale: strict decoding error: unknown field "spec.replica""#,
    );
    let r = raw(
        &sim,
        "PUT",
        &format!("{path}/scale"),
        &[CT_JSON],
        scale.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(
        warnings(&r),
        vec![r#"299 - "unknown field \"spec.replica\"""#]
    );
}

#[tokio::test]
async fn patches_decode_the_patched_object() {
    let sim = common::sim().await;
    let r = raw(
        &sim,
        "POST",
        DEPLOYS,
        &[CT_JSON],
        deployment("web").to_string(),
    )
    .await;
    assert_eq!(r.status, 201);
    let path = format!("{DEPLOYS}/web");
    let merge = ("content-type", "application/merge-patch+json");
    // Strict: 422 with the `patch` field holding the patched object (jsonPatcher).
    let r = raw(
        &sim,
        "PATCH",
        &format!("{path}?fieldValidation=Strict"),
        &[merge],
        r#"{"spec":{"replica":2}}"#,
    )
    .await;
    assert_eq!(r.status, 422, "{}", text(&r));
    let s = r.json();
    assert_eq!(s["reason"], "Invalid");
    let msg = s["message"].as_str().unwrap();
    assert!(msg.starts_with(r#" "" is invalid: patch: Invalid value: "{"#), "{msg}");
    assert!(
        msg.ends_with(r#"": strict decoding error: unknown field "spec.replica""#),
        "{msg}"
    );
    assert_eq!(s["details"]["causes"][0]["field"], "patch");
    assert_eq!(s["details"]["causes"][0]["reason"], "FieldValueInvalid");
    // Warn: the patch's duplicates first (applyJSPatch), then the patched object's unknowns.
    let r = raw(
        &sim,
        "PATCH",
        &path,
        &[merge],
        r#"{"spec":{"replica":2,"paused":true,"paused":false}}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(
        warnings(&r),
        vec![
            r#"299 - "duplicate field \"spec.paused\"""#,
            r#"299 - "unknown field \"spec.replica\"""#,
        ]
    );
    assert!(r.json()["spec"].get("replica").is_none());
    // A JSON patch's unknown operation fields are prefixed `json patch`.
    let r = raw(
        &sim,
        "PATCH",
        &path,
        &[("content-type", "application/json-patch+json")],
        r#"[{"op":"add","path":"/metadata/labels","value":{"a":"b"},"valu":1}]"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(
        warnings(&r),
        vec![r#"299 - "json patch unknown field \"[0].valu\"""#]
    );
    // A strategic merge patch prints the patch map (`%+v`).
    let r = raw(
        &sim,
        "PATCH",
        &format!("{path}?fieldValidation=Strict"),
        &[("content-type", "application/strategic-merge-patch+json")],
        r#"{"spec":{"replica":2}}"#,
    )
    .await;
    assert_status(
        &r,
        422,
        "Invalid",
        r#" "" is invalid: patch: Invalid value: "map[spec:map[replica:2]]": strict decoding error: unknown field "spec.replica""#,
    );
    // A wrongly typed value is a 422 whatever fieldValidation says.
    let r = raw(
        &sim,
        "PATCH",
        &format!("{path}?fieldValidation=Ignore"),
        &[merge],
        r#"{"spec":{"paused":"yes"}}"#,
    )
    .await;
    assert_eq!(r.status, 422, "{}", text(&r));
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .ends_with("json: cannot unmarshal string into Go struct field DeploymentSpec.spec.paused of type bool"),
        "{}",
        text(&r)
    );
    // Ignore: silently dropped.
    let r = raw(
        &sim,
        "PATCH",
        &format!("{path}?fieldValidation=Ignore"),
        &[merge],
        r#"{"spec":{"replica":2}}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(warnings(&r).is_empty());
}

#[tokio::test]
async fn apply_refuses_fields_the_schema_does_not_declare() {
    let sim = common::sim().await;
    let mut d = deployment("web");
    d["spec"]["replica"] = json!(3);
    for query in ["", "&fieldValidation=Ignore"] {
        let r = raw(
            &sim,
            "PATCH",
            &format!("{DEPLOYS}/web?fieldManager=me{query}"),
            &[("content-type", "application/apply-patch+yaml")],
            d.to_string(),
        )
        .await;
        // structuredMergeManager.Apply: a plain error, a 500 without a reason.
        assert_status(
            &r,
            500,
            "",
            "failed to create typed patch object (/web; apps/v1, Kind=Deployment): .spec.replica: field not declared in schema",
        );
    }
}

#[tokio::test]
async fn warning_headers_reach_kubes_client() {
    let sim = common::sim().await;
    let req = http::Request::post(DEPLOYS)
        .header("content-type", "application/json")
        .body(misspelt("web").into_bytes())
        .unwrap();
    let resp = sim.client().send(req.map(Into::into)).await.expect("send");
    assert_eq!(resp.status(), 201);
    let w: Vec<&str> = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        w,
        vec![
            r#"299 - "unknown field \"spec.replica\"""#,
            r#"299 - "unknown field \"spec.template.spec.containers[0].imagez\"""#,
        ]
    );
    // And through Api: the typed client never sends unknown fields, the created object is
    // what was sent.
    let api: Api<Deployment> = Api::default_namespaced(sim.client());
    let d: Deployment = serde_json::from_value(deployment("typed")).unwrap();
    let made = api.create(&PostParams::default(), &d).await.expect("create");
    assert_eq!(made.spec.replicas, Some(1));
    // A merge patch with a misspelt field through Api::patch succeeds (Warn) and drops it.
    let p = api
        .patch(
            "typed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replica": 4}})),
        )
        .await
        .expect("patch");
    assert_eq!(p.spec.replicas, Some(1));
}

#[tokio::test]
async fn custom_resources_keep_unknown_fields() {
    let sim = Sim::start(SimConfig {
        custom_resources: vec![CustomResource::new(
            "example.com",
            "v1",
            "Widget",
            "widgets",
            Scope::Namespaced,
        )],
        ..SimConfig::default()
    })
    .await
    .expect("sim");
    let body = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"anything": 1}});
    let r = raw(
        &sim,
        "POST",
        "/apis/example.com/v1/namespaces/default/widgets?fieldValidation=Strict",
        &[CT_JSON],
        body.to_string(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    assert!(warnings(&r).is_empty());
    assert_eq!(r.json()["spec"]["anything"], 1);
}

#[allow(dead_code)]
fn unused(_: Option<(ConfigMap, Pod)>) {}
