//! Object validation as kube-apiserver's strategies run it on every write (`rest.BeforeCreate`
//! calls the strategy's `Validate`, `rest.BeforeUpdate` its `ValidateUpdate`): object metadata
//! for every kind (`meta`), and per kind the rules of `pkg/apis/core/validation` and
//! `pkg/apis/apps/validation` (`pod`, `config`, `apps`). A failure is a `422 Invalid`
//! (`errors.NewInvalid(kind.GroupKind(), name, errs)`) listing every error found.

mod apps;
mod config;
mod meta;
mod pod;

use serde_json::{Map, Value};

use crate::apimachinery::errors::{ApiError, FieldError};
use crate::apimachinery::schema::ResourceDef;

fn meta_of(v: &Value) -> Map<String, Value> {
    v.get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn result(def: &ResourceDef, obj: &Value, errs: &[FieldError]) -> Result<(), ApiError> {
    if errs.is_empty() {
        return Ok(());
    }
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    Err(ApiError::invalid_errors(&def.group, &def.kind, name, errs))
}

fn kind_of(def: &ResourceDef) -> Option<&str> {
    def.builtin.then_some(def.kind.as_str())
}

/// The strategy's `Validate` of a create: `ValidatePodCreate`, `ValidateConfigMap`,
/// `ValidateSecret`, `ValidateDeployment`, `ValidateReplicaSet`, and `ValidateObjectMeta`
/// for every kind (custom resources: `customResourceStrategy.Validate`, metadata only).
pub(crate) fn validate_create(def: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
    let mut errs = Vec::new();
    meta::validate_create(def, &meta_of(obj), &mut errs);
    match kind_of(def) {
        Some("Pod") => pod::validate_spec(obj.get("spec"), "spec", &mut errs),
        Some("ConfigMap") => config::validate_keys(obj, &["data", "binaryData"], &mut errs),
        Some("Secret") => config::validate_keys(obj, &["data"], &mut errs),
        Some("Deployment") => apps::validate_spec(obj, "deployment", &mut errs),
        Some("ReplicaSet") => apps::validate_spec(obj, "replicaset", &mut errs),
        _ => {}
    }
    result(def, obj, &errs)
}

/// The strategy's `ValidateUpdate` of a main write (`status`: false) or a `/status` write's
/// `ValidateStatusUpdate` (metadata only here). `sent_uid` is the uid the request carried.
pub(crate) fn validate_update(
    def: &ResourceDef,
    new: &Value,
    old: &Value,
    status: bool,
    sent_uid: Option<&str>,
) -> Result<(), ApiError> {
    let mut errs = Vec::new();
    meta::validate_update(def, &meta_of(new), &meta_of(old), sent_uid, &mut errs);
    if !status {
        match kind_of(def) {
            Some("Pod") => pod::validate_update(new, old, &mut errs),
            Some("ConfigMap") => {
                config::validate_update(new, old, false, &mut errs);
                config::validate_keys(new, &["data", "binaryData"], &mut errs);
            }
            Some("Secret") => {
                config::validate_update(new, old, true, &mut errs);
                config::validate_keys(new, &["data"], &mut errs);
            }
            Some("Deployment") => {
                apps::validate_spec(new, "deployment", &mut errs);
                apps::validate_update(new, old, &mut errs);
            }
            Some("ReplicaSet") => {
                apps::validate_spec(new, "replicaset", &mut errs);
                apps::validate_update(new, old, &mut errs);
            }
            _ => {}
        }
    }
    result(def, new, &errs)
}
