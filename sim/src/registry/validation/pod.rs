//! Pod rules of `pkg/apis/core/validation/validation.go`: the containers of a pod spec
//! (`validateContainers`, `validateInitContainers`, `validateContainerCommon`) and what an
//! update may change (`ValidatePodUpdate`).

use serde_json::Value;

use crate::apimachinery::errors::FieldError;
use crate::apimachinery::validation::is_dns1123_label;
use crate::registry::strategy::semantically_equal;

/// `ValidatePodSpec`'s container checks of the spec at `path` (`spec` or
/// `spec.template.spec`): at least one container, names required, DNS labels and unique
/// across containers and init containers, images required.
pub(crate) fn validate_spec(spec: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let list = |k: &str| -> &[Value] {
        spec.and_then(|s| s.get(k))
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    };
    let containers = list("containers");
    let mut names: Vec<&str> = Vec::new();
    if containers.is_empty() {
        errs.push(FieldError::required(format!("{path}.containers"), ""));
    } else {
        for (i, c) in containers.iter().enumerate() {
            let p = format!("{path}.containers[{i}]");
            let name = common(c, &p, errs);
            // validateContainers: a repeat among the regular containers.
            if names.contains(&name) {
                errs.push(FieldError::duplicate(format!("{p}.name"), name));
            } else {
                names.push(name);
            }
        }
    }
    // validateInitContainers: unique among init and regular containers.
    for (i, c) in list("initContainers").iter().enumerate() {
        let p = format!("{path}.initContainers[{i}]");
        let name = common(c, &p, errs);
        if names.contains(&name) {
            errs.push(FieldError::duplicate(format!("{p}.name"), name));
        } else if !name.is_empty() {
            names.push(name);
        }
    }
}

/// `validateContainerCommon`: the name and the image; returns the name.
fn common<'a>(c: &'a Value, path: &str, errs: &mut Vec<FieldError>) -> &'a str {
    let name = c.get("name").and_then(Value::as_str).unwrap_or("");
    if name.is_empty() {
        errs.push(FieldError::required(format!("{path}.name"), ""));
    } else {
        for m in is_dns1123_label(name) {
            errs.push(FieldError::invalid(format!("{path}.name"), name, m));
        }
    }
    if c.get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        errs.push(FieldError::required(format!("{path}.image"), ""));
    }
    name
}

/// The fields `ValidatePodUpdate` lets an update change, as its message lists them.
const UPDATABLE: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// `ValidatePodUpdate`'s spec rule: the new spec with what may change taken from the old one
/// must equal the old spec, else `spec: Forbidden: pod updates may not change fields other
/// than ...` followed by a diff (Go prints `cmp.Diff` of the Go structs; here one line per
/// changed field, `- path: old` / `+ path: new`).
pub(crate) fn validate_update(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    let (Some(new_spec), Some(old_spec)) = (new.get("spec"), old.get("spec")) else {
        return;
    };
    let mut munged = new_spec.clone();
    if let (Some(m), Some(o)) = (munged.as_object_mut(), old_spec.as_object()) {
        // Images: each container takes the old one's image (when the lists line up).
        for k in ["containers", "initContainers"] {
            if let (Some(Value::Array(nc)), Some(Value::Array(oc))) = (m.get_mut(k), o.get(k))
                && nc.len() == oc.len()
            {
                for (n, o) in nc.iter_mut().zip(oc) {
                    if let (Some(n), Some(img)) = (n.as_object_mut(), o.get("image")) {
                        n.insert("image".into(), img.clone());
                    }
                }
            }
        }
        // activeDeadlineSeconds may change (its own rules are not checked here).
        match o.get("activeDeadlineSeconds") {
            Some(v) => m.insert("activeDeadlineSeconds".into(), v.clone()),
            None => m.remove("activeDeadlineSeconds"),
        };
        // Tolerations: additions only.
        let old_t = o.get("tolerations").and_then(Value::as_array);
        let new_t = m.get("tolerations").and_then(Value::as_array);
        let additions_only = match (old_t, new_t) {
            (None, _) => true,
            (Some(ot), Some(nt)) => ot.iter().all(|t| nt.contains(t)),
            (Some(ot), None) => ot.is_empty(),
        };
        if additions_only {
            match o.get("tolerations") {
                Some(v) => m.insert("tolerations".into(), v.clone()),
                None => m.remove("tolerations"),
            };
        }
        // terminationGracePeriodSeconds: from negative to 1.
        let old_g = o
            .get("terminationGracePeriodSeconds")
            .and_then(Value::as_i64);
        let new_g = m
            .get("terminationGracePeriodSeconds")
            .and_then(Value::as_i64);
        if old_g.is_some_and(|g| g < 0) && new_g == Some(1) {
            m.insert("terminationGracePeriodSeconds".into(), Value::from(old_g));
        }
    }
    if semantically_equal(Some(old_spec), Some(&munged)) {
        return;
    }
    let mut diff = Vec::new();
    diff_lines("spec", Some(old_spec), Some(&munged), &mut diff);
    errs.push(FieldError::forbidden(
        "spec",
        format!(
            "pod updates may not change fields other than {UPDATABLE}\n{}",
            diff.join("\n")
        ),
    ));
}

/// One `- path: old` / `+ path: new` pair per leaf that differs.
fn diff_lines(path: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<String>) {
    if semantically_equal(a, b) {
        return;
    }
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                diff_lines(&format!("{path}.{k}"), x.get(k), y.get(k), out);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff_lines(&format!("{path}[{i}]"), Some(p), Some(q), out);
            }
        }
        _ => {
            let show = |v: Option<&Value>| v.map_or("nil".to_string(), Value::to_string);
            out.push(format!("- {path}: {}", show(a)));
            out.push(format!("+ {path}: {}", show(b)));
        }
    }
}
