//! A minimal OpenAPI v3 document: enough for kubectl's field-validation check, which looks for
//! the `fieldValidation` query parameter on each kind's PATCH operation to decide that the
//! server validates (so kubectl skips client-side schema validation, which would need the full
//! schema), and for `kubectl explain` of the kinds given schemas here (Deployment with its
//! spec, ConfigMap, ObjectMeta); the other kinds' schemas are open objects
//! (`x-kubernetes-preserve-unknown-fields`), so `kubectl explain pod.spec` answers that the
//! field does not exist. PATCH operations declare no request body, so `kubectl apply` builds
//! its strategic merge patch from its compiled-in types (as with a server whose OpenAPI lacks
//! patch metadata). `/openapi/v2` is not served (404).

use serde_json::{Value, json};

use crate::apimachinery::schema::{Registry, ResourceDef};

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
        let schema_name = schema_name(d);
        let mut schema = kind_schema(d).unwrap_or_else(
            || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
        if let Some(o) = schema.as_object_mut() {
            o.insert("x-kubernetes-group-version-kind".into(), json!([gvk]));
        }
        schemas.insert(schema_name, schema);
        if d.builtin && d.kind == "Deployment" {
            schemas.insert(
                "io.k8s.api.apps.v1.DeploymentSpec".into(),
                deployment_spec(),
            );
        }
    }
    schemas.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".into(),
        object_meta(),
    );
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (kinformer-sim)", "version": super::discovery::KUBERNETES_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// The schema name kube-apiserver uses: `io.k8s.api.<group>.<version>.<Kind>` for built-ins
/// (`core` for the core group), the reversed group for custom kinds (`com.example.v1.Widget`).
fn schema_name(d: &ResourceDef) -> String {
    if d.builtin {
        let g = if d.group.is_empty() {
            "core"
        } else {
            d.group.split('.').next().unwrap_or(&d.group)
        };
        format!("io.k8s.api.{g}.{}.{}", d.version, d.kind)
    } else {
        let reversed: Vec<&str> = d.group.split('.').rev().collect();
        format!("{}.{}.{}", reversed.join("."), d.version, d.kind)
    }
}

fn reference(name: &str, description: &str) -> Value {
    json!({"allOf": [{"$ref": format!("#/components/schemas/{name}")}], "default": {}, "description": description})
}

fn string(description: &str) -> Value {
    json!({"type": "string", "default": "", "description": description})
}

fn string_map(description: &str) -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": description})
}

fn type_meta() -> [(&'static str, Value); 2] {
    [
        (
            "apiVersion",
            string("The versioned schema of this representation of an object."),
        ),
        (
            "kind",
            string("The REST resource this object represents, in CamelCase."),
        ),
    ]
}

fn metadata_ref() -> Value {
    reference(
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "Standard object's metadata.",
    )
}

/// The schemas `kubectl explain` can walk (descriptions shortened).
fn kind_schema(d: &ResourceDef) -> Option<Value> {
    if !d.builtin {
        return None;
    }
    let mut props: serde_json::Map<String, Value> = type_meta()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    props.insert("metadata".into(), metadata_ref());
    let description = match (d.group.as_str(), d.kind.as_str()) {
        ("apps", "Deployment") => {
            props.insert(
                "spec".into(),
                reference(
                    "io.k8s.api.apps.v1.DeploymentSpec",
                    "Specification of the desired behavior of the Deployment.",
                ),
            );
            props.insert(
                "status".into(),
                json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                       "description": "Most recently observed status of the Deployment."}),
            );
            "Deployment enables declarative updates for Pods and ReplicaSets."
        }
        ("", "ConfigMap") => {
            props.insert(
                "data".into(),
                string_map("Data contains the configuration data, UTF-8 strings by key."),
            );
            props.insert(
                "binaryData".into(),
                json!({"type": "object", "additionalProperties": {"type": "string", "format": "byte"},
                       "description": "BinaryData contains the binary data, base64-encoded by key."}),
            );
            props.insert(
                "immutable".into(),
                json!({"type": "boolean", "description": "Immutable, if set to true, ensures that data stored in the ConfigMap cannot be updated."}),
            );
            "ConfigMap holds configuration data for pods to consume."
        }
        _ => return None,
    };
    Some(json!({"type": "object", "description": description, "properties": props}))
}

fn deployment_spec() -> Value {
    json!({
        "type": "object",
        "description": "DeploymentSpec is the specification of the desired behavior of the Deployment.",
        "required": ["selector", "template"],
        "properties": {
            "replicas": {"type": "integer", "format": "int32",
                         "description": "Number of desired pods. Defaults to 1."},
            "selector": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                         "description": "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment."},
            "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                         "description": "Template describes the pods that will be created."},
            "strategy": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                         "description": "The deployment strategy to use to replace existing pods with new ones."},
            "minReadySeconds": {"type": "integer", "format": "int32",
                                "description": "Minimum number of seconds for which a newly created pod should be ready to be considered available. Defaults to 0."},
            "revisionHistoryLimit": {"type": "integer", "format": "int32",
                                     "description": "The number of old ReplicaSets to retain to allow rollback. Defaults to 10."},
            "paused": {"type": "boolean", "description": "Indicates that the deployment is paused."},
            "progressDeadlineSeconds": {"type": "integer", "format": "int32",
                                        "description": "The maximum time in seconds for a deployment to make progress before it is considered to be failed. Defaults to 600s."}
        }
    })
}

fn object_meta() -> Value {
    json!({
        "type": "object",
        "description": "ObjectMeta is metadata that all persisted resources must have.",
        "properties": {
            "name": string("Name must be unique within a namespace."),
            "generateName": string("An optional prefix used by the server to generate a unique name."),
            "namespace": string("The namespace the object lives in."),
            "uid": string("The unique in time and space value for this object, set by the server."),
            "resourceVersion": string("An opaque value for optimistic concurrency, change detection and watches."),
            "generation": {"type": "integer", "format": "int64", "description": "A sequence number representing a specific generation of the desired state."},
            "creationTimestamp": {"type": "string", "format": "date-time", "description": "When this object was created."},
            "deletionTimestamp": {"type": "string", "format": "date-time", "description": "When this object will be deleted, set by the server when a graceful deletion is requested."},
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64", "description": "Seconds allowed for this object to terminate gracefully before it is removed."},
            "labels": string_map("Map of string keys and values to organize and categorize objects."),
            "annotations": string_map("Unstructured key value map of arbitrary metadata."),
            "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "x-kubernetes-list-type": "set",
                           "description": "Must be empty before the object is deleted from the registry."},
            "ownerReferences": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                                "x-kubernetes-patch-merge-key": "uid", "x-kubernetes-patch-strategy": "merge",
                                "description": "Objects depended on by this object."}
        }
    })
}
