//! A minimal OpenAPI v3 document: enough for kubectl's field-validation check, which looks for
//! the `fieldValidation` query parameter on each kind's PATCH operation to decide that the
//! server validates (so kubectl skips client-side schema validation, which would need the full
//! schema). `/openapi/v2` is not served (404); kubectl does not need it for the verbs we test.

use serde_json::{Value, json};

use crate::resources::{Registry, ResourceDef};

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the index of group-version documents.
pub(crate) fn root(reg: &Registry) -> Value {
    let mut paths = serde_json::Map::new();
    for d in reg.all() {
        let p = gv_path(&d.group, &d.version);
        paths
            .entry(p.clone())
            .or_insert_with(|| json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=kinformer-sim-{}", env!("CARGO_PKG_VERSION"))}));
    }
    json!({"paths": paths})
}

fn param(name: &str, location: &str) -> Value {
    json!({"name": name, "in": location, "schema": {"type": "string", "uniqueItems": true}})
}

fn object_path(d: &ResourceDef) -> String {
    let base = if d.group.is_empty() {
        "/api/v1".to_string()
    } else {
        format!("/apis/{}/{}", d.group, d.version)
    };
    if d.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}/{{name}}", d.plural)
    } else {
        format!("{base}/{}/{{name}}", d.plural)
    }
}

/// `/openapi/v3/{api/v1 | apis/g/v}`.
pub(crate) fn group_version(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    if !reg.has_group_version(group, version) {
        return None;
    }
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for d in reg
        .all()
        .iter()
        .filter(|d| d.group == group && d.version == version)
    {
        let gvk = json!({"group": d.group, "version": d.version, "kind": d.kind});
        let mut params = vec![param("name", "path"), param("pretty", "query")];
        if d.namespaced {
            params.push(param("namespace", "path"));
        }
        let op_params = vec![
            param("dryRun", "query"),
            param("fieldManager", "query"),
            param("fieldValidation", "query"),
            param("force", "query"),
        ];
        let op = |action: &str| {
            json!({
                "operationId": format!("{action}{}", d.kind),
                "parameters": op_params,
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
            })
        };
        paths.insert(
            object_path(d),
            json!({"parameters": params, "get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}),
        );
        let schema_name = if d.group.is_empty() {
            format!("io.k8s.api.core.{}.{}", d.version, d.kind)
        } else {
            format!("{}.{}.{}", d.group, d.version, d.kind)
        };
        schemas.insert(
            schema_name,
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "x-kubernetes-group-version-kind": [gvk]}),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (kinformer-sim)", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}
