//! Deployment and ReplicaSet rules of `pkg/apis/apps/validation/validation.go`: the selector
//! (`ValidateDeploymentSpec`, `ValidateReplicaSetSpec`: required, not empty, matching the
//! template's labels: `ValidatePodTemplateSpecForReplicaSet`), the template's pod spec, and
//! the selector's immutability in apps/v1 (`pkg/registry/apps/deployment/strategy.go`,
//! `pkg/registry/apps/replicaset/strategy.go` `ValidateUpdate`).

use serde_json::Value;

use crate::apimachinery::errors::FieldError;
use crate::registry::strategy::semantically_equal;

use super::pod;

/// Whether `labels` satisfy the label selector `sel` (`metav1.LabelSelectorAsSelector` and
/// `Matches`: every matchLabels pair, every matchExpressions requirement).
fn selector_matches(sel: &Value, labels: Option<&Value>) -> bool {
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    if let Some(Value::Object(ml)) = sel.get("matchLabels") {
        for (k, v) in ml {
            if get(k) != v.as_str() {
                return false;
            }
        }
    }
    if let Some(Value::Array(exprs)) = sel.get("matchExpressions") {
        for e in exprs {
            let key = e.get("key").and_then(Value::as_str).unwrap_or("");
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let ok = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                "In" => get(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => get(key).is_none_or(|v| !values.contains(&v)),
                "Exists" => get(key).is_some(),
                "DoesNotExist" => get(key).is_none(),
                _ => false,
            };
            if !ok {
                return false;
            }
        }
    }
    true
}

fn selector_empty(sel: &Value) -> bool {
    let n = |k: &str| {
        sel.get(k).and_then(Value::as_object).map_or(0, |m| m.len())
            + sel.get(k).and_then(Value::as_array).map_or(0, Vec::len)
    };
    n("matchLabels") + n("matchExpressions") == 0
}

/// The spec checks shared by Deployment and ReplicaSet (`kind` names the empty-selector
/// message).
pub(crate) fn validate_spec(obj: &Value, kind: &str, errs: &mut Vec<FieldError>) {
    let spec = obj.get("spec");
    if let Some(r) = spec.and_then(|s| s.get("replicas")).and_then(Value::as_i64)
        && r < 0
    {
        errs.push(FieldError::invalid_printed(
            "spec.replicas",
            r.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    let sel = spec
        .and_then(|s| s.get("selector"))
        .filter(|s| !s.is_null());
    match sel {
        None => errs.push(FieldError::required("spec.selector", "")),
        Some(sel) if selector_empty(sel) => errs.push(FieldError::invalid_printed(
            "spec.selector",
            sel.to_string(),
            format!("empty selector is invalid for {kind}"),
        )),
        Some(_) => {}
    }
    let template = spec.and_then(|s| s.get("template"));
    let labels = template
        .and_then(|t| t.get("metadata"))
        .and_then(|m| m.get("labels"));
    if let Some(sel) = sel
        && !selector_empty(sel)
        && !selector_matches(sel, labels)
    {
        errs.push(FieldError::invalid_printed(
            "spec.template.metadata.labels",
            labels.map_or("null".to_string(), Value::to_string),
            "`selector` does not match template `labels`",
        ));
    }
    pod::validate_spec(
        template.and_then(|t| t.get("spec")),
        "spec.template.spec",
        errs,
    );
}

/// apps/v1 refuses a selector change (`ValidateImmutableField`).
pub(crate) fn validate_update(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    let sel = |v: &Value| v.get("spec").and_then(|s| s.get("selector")).cloned();
    let (n, o) = (sel(new), sel(old));
    if !semantically_equal(n.as_ref(), o.as_ref()) {
        errs.push(FieldError::invalid_printed(
            "spec.selector",
            n.map_or("null".to_string(), |v| v.to_string()),
            "field is immutable",
        ));
    }
}
