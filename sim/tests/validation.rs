//! Validation as kube-apiserver does it: schema decoding of write bodies under
//! `fieldValidation` (unknown, duplicate and wrongly typed fields, `Warning` headers), object
//! metadata, and the per-kind rules of pods, config maps, secrets, deployments and replica sets.
//! Checked over raw HTTP where the status code, headers or the exact Status matter, and through
//! `kube::Api`.

use crate::common;

use crate::common::{RawResponse, raw};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
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
        assert_eq!(
            stored["spec"]["replicas"], 1,
            "defaulted as without the field"
        );
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
    assert!(
        msg.starts_with(r#" "" is invalid: patch: Invalid value: "{"#),
        "{msg}"
    );
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
    let made = api
        .create(&PostParams::default(), &d)
        .await
        .expect("create");
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

const LABEL_KEY_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const CMS: &str = "/api/v1/namespaces/default/configmaps";
const PODS: &str = "/api/v1/namespaces/default/pods";

/// The (reason, field, message) of each cause of a 422.
fn causes(r: &RawResponse) -> Vec<(String, String, String)> {
    r.json()["details"]["causes"]
        .as_array()
        .unwrap_or_else(|| panic!("no causes: {}", text(r)))
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
            (s("reason"), s("field"), s("message"))
        })
        .collect()
}

fn cause(reason: &str, field: &str, message: &str) -> (String, String, String) {
    (reason.into(), field.into(), message.into())
}

async fn post(sim: &Sim, path: &str, body: Value) -> RawResponse {
    raw(sim, "POST", path, &[CT_JSON], body.to_string()).await
}

async fn merge(sim: &Sim, path: &str, body: Value) -> RawResponse {
    raw(
        sim,
        "PATCH",
        path,
        &[("content-type", "application/merge-patch+json")],
        body.to_string(),
    )
    .await
}

#[tokio::test]
async fn object_metadata_is_validated_like_validate_object_meta() {
    let sim = common::sim().await;
    // The example of the brief: one bad label key.
    let r = post(
        &sim,
        CMS,
        json!({"metadata": {"name": "c", "labels": {"-x": "v"}}}),
    )
    .await;
    assert_status(
        &r,
        422,
        "Invalid",
        &format!(
            "ConfigMap \"c\" is invalid: metadata.labels: Invalid value: \"-x\": {LABEL_KEY_MSG}"
        ),
    );
    let d = r.json()["details"].clone();
    assert_eq!((&d["name"], &d["kind"]), (&json!("c"), &json!("ConfigMap")));
    assert!(d.get("group").is_none(), "the core group is omitted: {d}");
    // Every error at once, in ValidateObjectMeta's order (labels in key order).
    let r = post(
        &sim,
        CMS,
        json!({"metadata": {
            "name": "c",
            "labels": {"-x": "v", "a": "-bad"},
            "annotations": {"a b": "1"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p"}],
            "finalizers": ["foo", "example.com/ok"]
        }}),
    )
    .await;
    assert_eq!(r.status, 422, "{}", text(&r));
    assert_eq!(
        causes(&r),
        vec![
            cause(
                "FieldValueInvalid",
                "metadata.labels",
                &format!("Invalid value: \"-x\": {LABEL_KEY_MSG}")
            ),
            cause(
                "FieldValueInvalid",
                "metadata.labels",
                &format!("Invalid value: \"-bad\": {LABEL_VALUE_MSG}")
            ),
            cause(
                "FieldValueInvalid",
                "metadata.annotations",
                &format!("Invalid value: \"a b\": {LABEL_KEY_MSG}")
            ),
            cause(
                "FieldValueRequired",
                "metadata.ownerReferences[0].uid",
                "Required value: must not be empty"
            ),
            cause(
                "FieldValueInvalid",
                "metadata.finalizers[0]",
                "Invalid value: \"foo\": name is neither a standard finalizer name nor is it fully qualified"
            ),
        ]
    );
    let msg = r.json()["message"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("ConfigMap \"c\" is invalid: [metadata.labels: Invalid value: \"-x\""),
        "{msg}"
    );
    assert!(
        msg.ends_with("name is neither a standard finalizer name nor is it fully qualified]"),
        "{msg}"
    );
    // Names by kind: a Service's is a DNS-1035 label; generateName is checked too (a trailing
    // dash allowed), and the generated name with it.
    let r = post(
        &sim,
        "/api/v1/namespaces/default/services",
        json!({"metadata": {"name": "1svc"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .await;
    assert_status(
        &r,
        422,
        "Invalid",
        "Service \"1svc\" is invalid: metadata.name: Invalid value: \"1svc\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
    );
    let r = post(&sim, CMS, json!({"metadata": {"generateName": "Bad-"}})).await;
    assert_eq!(r.status, 422, "{}", text(&r));
    let c = causes(&r);
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!(
        (c[0].1.as_str(), c[1].1.as_str()),
        ("metadata.generateName", "metadata.name")
    );
    assert!(
        c[0].2
            .starts_with("Invalid value: \"Bad-\": a lowercase RFC 1123 subdomain")
    );
    let r = post(&sim, CMS, json!({"metadata": {"generateName": "ok-"}})).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    // Neither name nor generateName.
    let r = post(&sim, CMS, json!({"metadata": {}})).await;
    assert_status(
        &r,
        422,
        "Invalid",
        "ConfigMap \"\" is invalid: metadata.name: Required value: name or generateName is required",
    );
    // Nothing was stored by the refused creates.
    let list = raw(&sim, "GET", CMS, &[], "").await.json();
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
}

#[tokio::test]
async fn metadata_updates_keep_the_uid_and_are_validated_too() {
    let sim = common::sim().await;
    let r = post(&sim, CMS, json!({"metadata": {"name": "c"}})).await;
    assert_eq!(r.status, 201);
    // A PATCH that changes the uid meets the validation (a PUT fails its uid precondition
    // first: tests/kube_differences.rs).
    let r = merge(
        &sim,
        &format!("{CMS}/c"),
        json!({"metadata": {"uid": "other"}}),
    )
    .await;
    assert_status(
        &r,
        422,
        "Invalid",
        "ConfigMap \"c\" is invalid: metadata.uid: Invalid value: \"other\": field is immutable",
    );
    let r = merge(
        &sim,
        &format!("{CMS}/c"),
        json!({"metadata": {"labels": {"ok": "-no"}}}),
    )
    .await;
    assert_status(
        &r,
        422,
        "Invalid",
        &format!(
            "ConfigMap \"c\" is invalid: metadata.labels: Invalid value: \"-no\": {LABEL_VALUE_MSG}"
        ),
    );
    // A deleting object takes no new finalizer.
    let r = merge(
        &sim,
        &format!("{CMS}/c"),
        json!({"metadata": {"finalizers": ["example.com/a"]}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let r = raw(&sim, "DELETE", &format!("{CMS}/c"), &[], "").await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let r = merge(
        &sim,
        &format!("{CMS}/c"),
        json!({"metadata": {"finalizers": ["example.com/a", "example.com/b"]}}),
    )
    .await;
    assert_status(
        &r,
        422,
        "Invalid",
        "ConfigMap \"c\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/b\"}",
    );
}

fn pod(name: &str, containers: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": containers}})
}

#[tokio::test]
async fn pod_containers_are_validated_like_validate_pod_spec() {
    let sim = common::sim().await;
    let r = post(&sim, PODS, pod("p", json!([]))).await;
    assert_status(
        &r,
        422,
        "Invalid",
        "Pod \"p\" is invalid: spec.containers: Required value",
    );
    let mut body = pod(
        "p",
        json!([{"name": "a", "image": "i"}, {"name": "a"}, {"name": "B_c", "image": "i"}, {"image": "i"}]),
    );
    body["spec"]["initContainers"] = json!([{"name": "a", "image": "i"}]);
    let r = post(&sim, PODS, body).await;
    assert_eq!(r.status, 422, "{}", text(&r));
    assert_eq!(
        causes(&r),
        vec![
            cause(
                "FieldValueRequired",
                "spec.containers[1].image",
                "Required value"
            ),
            cause(
                "FieldValueDuplicate",
                "spec.containers[1].name",
                "Duplicate value: \"a\""
            ),
            cause(
                "FieldValueInvalid",
                "spec.containers[2].name",
                "Invalid value: \"B_c\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ),
            cause(
                "FieldValueRequired",
                "spec.containers[3].name",
                "Required value"
            ),
            cause(
                "FieldValueDuplicate",
                "spec.initContainers[0].name",
                "Duplicate value: \"a\""
            ),
        ]
    );
}

#[tokio::test]
async fn pod_updates_may_change_only_what_validate_pod_update_allows() {
    let sim = common::sim().await;
    let r = post(&sim, PODS, pod("p", json!([{"name": "a", "image": "i:1"}]))).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let path = format!("{PODS}/p");
    // The image, the deadline, added tolerations: allowed.
    let r = merge(
        &sim,
        &path,
        json!({"spec": {"containers": [{"name": "a", "image": "i:2"}], "activeDeadlineSeconds": 30,
            "tolerations": [{"key": "k", "operator": "Exists"}]}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let before = r.json();
    assert_eq!(before["metadata"]["generation"], 2);
    // Anything else: refused, nothing stored, no generation bump.
    for patch in [
        json!({"spec": {"nodeName": "elsewhere"}}),
        json!({"spec": {"containers": [{"name": "a", "image": "i:2", "ports": [{"containerPort": 80}]}]}}),
        json!({"spec": {"tolerations": null}}),
    ] {
        let r = merge(&sim, &path, patch.clone()).await;
        assert_eq!(r.status, 422, "{patch}: {}", text(&r));
        let s = r.json();
        let msg = s["message"].as_str().unwrap();
        assert!(
            msg.starts_with("Pod \"p\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n"),
            "{msg}"
        );
        assert_eq!(s["details"]["causes"][0]["reason"], "FieldValueForbidden");
        assert_eq!(s["details"]["causes"][0]["field"], "spec");
        let now = get(&sim, &path).await;
        assert_eq!(now, before, "a refused update stores nothing");
    }
}

#[tokio::test]
async fn immutable_config_maps_and_secrets() {
    let sim = common::sim().await;
    let r = post(
        &sim,
        CMS,
        json!({"metadata": {"name": "c"}, "data": {"a": "1"}, "immutable": true}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let path = format!("{CMS}/c");
    let r = merge(&sim, &path, json!({"data": {"a": "2"}})).await;
    assert_status(
        &r,
        422,
        "Invalid",
        "ConfigMap \"c\" is invalid: data: Forbidden: field is immutable when `immutable` is set",
    );
    let r = merge(
        &sim,
        &path,
        json!({"immutable": false, "binaryData": {"b": "AA=="}}),
    )
    .await;
    assert_status(
        &r,
        422,
        "Invalid",
        "ConfigMap \"c\" is invalid: [immutable: Forbidden: field is immutable when `immutable` is set, binaryData: Forbidden: field is immutable when `immutable` is set]",
    );
    // Metadata still changes.
    let r = merge(&sim, &path, json!({"metadata": {"labels": {"a": "b"}}})).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    // A config map's keys are config keys.
    let r = post(
        &sim,
        CMS,
        json!({"metadata": {"name": "k"}, "data": {"a b": "1"}}),
    )
    .await;
    assert_status(
        &r,
        422,
        "Invalid",
        "ConfigMap \"k\" is invalid: data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
    );
    // Secrets: the type never changes; data not once immutable.
    let secrets = "/api/v1/namespaces/default/secrets";
    let r = post(
        &sim,
        secrets,
        json!({"metadata": {"name": "s"}, "data": {"a": "MQ=="}, "immutable": true}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let r = merge(
        &sim,
        &format!("{secrets}/s"),
        json!({"type": "example.com/other", "data": {"a": "Mg=="}}),
    )
    .await;
    assert_status(
        &r,
        422,
        "Invalid",
        "Secret \"s\" is invalid: [type: Invalid value: \"example.com/other\": field is immutable, data: Forbidden: field is immutable when `immutable` is set]",
    );
}

#[tokio::test]
async fn deployment_and_replica_set_selectors() {
    let sim = common::sim().await;
    let mut d = deployment("web");
    d["spec"]["template"]["metadata"]["labels"] = json!({"app": "other"});
    let r = post(&sim, DEPLOYS, d).await;
    assert_status(
        &r,
        422,
        "Invalid",
        "Deployment.apps \"web\" is invalid: spec.template.metadata.labels: Invalid value: {\"app\":\"other\"}: `selector` does not match template `labels`",
    );
    assert_eq!(r.json()["details"]["group"], "apps");
    let mut d = deployment("web");
    d["spec"].as_object_mut().unwrap().remove("selector");
    let r = post(&sim, DEPLOYS, d).await;
    assert_status(
        &r,
        422,
        "Invalid",
        "Deployment.apps \"web\" is invalid: spec.selector: Required value",
    );
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs"},
        "spec": {"selector": {"matchLabels": {"app": "rs"}}, "template": {"metadata": {"labels": {"app": "rs"}}, "spec": {"containers": []}}}});
    let r = post(&sim, "/apis/apps/v1/namespaces/default/replicasets", rs).await;
    assert_status(
        &r,
        422,
        "Invalid",
        "ReplicaSet.apps \"rs\" is invalid: spec.template.spec.containers: Required value",
    );
    // apps/v1: the selector is immutable.
    let mut d = deployment("web");
    d["spec"]["template"]["metadata"]["labels"]["tier"] = json!("x");
    let r = post(&sim, DEPLOYS, d).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let r = merge(
        &sim,
        &format!("{DEPLOYS}/web"),
        json!({"spec": {"selector": {"matchLabels": {"tier": "x"}}}}),
    )
    .await;
    assert_status(
        &r,
        422,
        "Invalid",
        "Deployment.apps \"web\" is invalid: spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"web\",\"tier\":\"x\"}}: field is immutable",
    );
}

#[tokio::test]
async fn kube_client_sees_the_422() {
    let sim = common::sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c", "labels": {"-x": "v"}}})).unwrap();
    match api.create(&PostParams::default(), &cm).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422);
            assert_eq!(s.reason, "Invalid");
            assert_eq!(
                s.message,
                format!(
                    "ConfigMap \"c\" is invalid: metadata.labels: Invalid value: \"-x\": {LABEL_KEY_MSG}"
                )
            );
        }
        other => panic!("expected a 422: {other:?}"),
    }
}
