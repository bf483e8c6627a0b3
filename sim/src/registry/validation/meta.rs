//! Object metadata validation: `k8s.io/apimachinery/pkg/api/validation/objectmeta.go`
//! (`ValidateObjectMetaAccessor`, `ValidateObjectMetaAccessorUpdate`) and, for the built-in
//! kinds, the finalizer name check `pkg/apis/core/validation/validation.go` adds
//! (`ValidateObjectMeta`, `validateKubeFinalizerName`).

use serde_json::{Map, Value};

use crate::apimachinery::errors::{FieldError, go_string_slice};
use crate::apimachinery::schema::{NameRule, ResourceDef};
use crate::apimachinery::util::string_list;
use crate::apimachinery::validation::{
    is_dns1035_label, is_dns1123_label, is_dns1123_subdomain, is_qualified_name,
    is_valid_label_value,
};

/// `TotalAnnotationSizeLimitB`.
const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * (1 << 10);

/// `metav1.FinalizerOrphanDependents`, `metav1.FinalizerDeleteDependents` and
/// `core.FinalizerKubernetes`: the finalizer names that need no domain.
const STANDARD_FINALIZERS: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];

/// The kind's name check (`ValidateNameFunc`): `NameIsDNSSubdomain`, `NameIsDNSLabel` or
/// `NameIsDNS1035Label`; with `prefix` (a `generateName`) a trailing `-` is allowed
/// (`maskTrailingDash`).
pub(crate) fn name_errors(def: &ResourceDef, name: &str, prefix: bool) -> Vec<String> {
    let masked;
    let name = if prefix && name.len() > 1 && name.ends_with('-') {
        masked = format!("{}a", &name[..name.len() - 1]);
        masked.as_str()
    } else {
        name
    };
    match def.name_rule {
        NameRule::Subdomain => is_dns1123_subdomain(name),
        NameRule::Label => is_dns1123_label(name),
        NameRule::Dns1035Label => is_dns1035_label(name),
    }
}

fn str_of<'a>(meta: &'a Map<String, Value>, k: &str) -> &'a str {
    meta.get(k).and_then(Value::as_str).unwrap_or("")
}

/// `ValidateObjectMetaAccessor` of a create (after name generation).
pub(crate) fn validate_create(
    def: &ResourceDef,
    meta: &Map<String, Value>,
    errs: &mut Vec<FieldError>,
) {
    let generate = str_of(meta, "generateName");
    if !generate.is_empty() {
        for m in name_errors(def, generate, true) {
            errs.push(FieldError::invalid("metadata.generateName", generate, m));
        }
    }
    let name = str_of(meta, "name");
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for m in name_errors(def, name, false) {
            errs.push(FieldError::invalid("metadata.name", name, m));
        }
    }
    if def.namespaced {
        let ns = str_of(meta, "namespace");
        if ns.is_empty() {
            errs.push(FieldError::required("metadata.namespace", ""));
        } else {
            for m in is_dns1123_label(ns) {
                errs.push(FieldError::invalid("metadata.namespace", ns, m));
            }
        }
    }
    common(meta, errs);
    finalizers(meta, errs);
    kube_finalizer_names(def, meta, errs);
}

/// `ValidateObjectMetaAccessorUpdate` (name and namespace are checked before, by the
/// handlers' `checkName` and the patcher); `sent_uid` is the uid the request carried, which
/// `rest.BeforeUpdate` keeps when it is set.
pub(crate) fn validate_update(
    def: &ResourceDef,
    new: &Map<String, Value>,
    old: &Map<String, Value>,
    sent_uid: Option<&str>,
    errs: &mut Vec<FieldError>,
) {
    if old.get("deletionTimestamp").is_some_and(|v| !v.is_null()) {
        // ValidateNoNewFinalizers: the new ones, sorted (`sets.String.List`).
        let old_f = string_list(old.get("finalizers"));
        let mut extra: Vec<String> = string_list(new.get("finalizers"))
            .into_iter()
            .filter(|f| !old_f.contains(f))
            .collect();
        extra.sort();
        extra.dedup();
        if !extra.is_empty() {
            errs.push(FieldError::forbidden(
                "metadata.finalizers",
                format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers {}",
                    go_string_slice(&extra)
                ),
            ));
        }
    }
    if let Some(uid) = sent_uid
        && !uid.is_empty()
        && uid != str_of(old, "uid")
    {
        errs.push(FieldError::invalid(
            "metadata.uid",
            uid,
            "field is immutable",
        ));
    }
    common(new, errs);
    kube_finalizer_names(def, new, errs);
}

/// Labels, annotations and owner references, checked on create and update alike.
fn common(meta: &Map<String, Value>, errs: &mut Vec<FieldError>) {
    // ValidateLabels: Go walks the map in random order; here in key order.
    if let Some(Value::Object(labels)) = meta.get("labels") {
        for (k, v) in labels {
            for m in is_qualified_name(k) {
                errs.push(FieldError::invalid("metadata.labels", k, m));
            }
            let v = v.as_str().unwrap_or("");
            for m in is_valid_label_value(v) {
                errs.push(FieldError::invalid("metadata.labels", v, m));
            }
        }
    }
    // ValidateAnnotations: keys checked lower-cased, and their total size.
    if let Some(Value::Object(ann)) = meta.get("annotations") {
        let mut total = 0usize;
        for (k, v) in ann {
            for m in is_qualified_name(&k.to_lowercase()) {
                errs.push(FieldError::invalid("metadata.annotations", k, m));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > TOTAL_ANNOTATION_SIZE_LIMIT {
            errs.push(FieldError::too_long(
                "metadata.annotations",
                TOTAL_ANNOTATION_SIZE_LIMIT,
            ));
        }
    }
    // ValidateOwnerReferences.
    if let Some(Value::Array(refs)) = meta.get("ownerReferences") {
        let mut first_controller: Option<String> = None;
        for (i, r) in refs.iter().enumerate() {
            let path = format!("metadata.ownerReferences[{i}]");
            let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
            let api_version = s("apiVersion");
            if api_version.is_empty() {
                errs.push(FieldError::required(
                    format!("{path}.apiVersion"),
                    "must not be empty",
                ));
            } else if !valid_group_version(api_version) {
                errs.push(FieldError::invalid(
                    format!("{path}.apiVersion"),
                    api_version,
                    "must be <group>/<version> or <version>",
                ));
            }
            for k in ["kind", "name", "uid"] {
                if s(k).is_empty() {
                    errs.push(FieldError::required(
                        format!("{path}.{k}"),
                        "must not be empty",
                    ));
                }
            }
            if r.get("controller").and_then(Value::as_bool) == Some(true) {
                let cur = format!("{}/{}", s("kind"), s("name"));
                match &first_controller {
                    Some(first) => errs.push(FieldError::invalid_printed(
                        "metadata.ownerReferences",
                        serde_json::to_string(refs).unwrap_or_default(),
                        format!("Only one reference can have Controller set to true. Found \"true\" in references for {first} and {cur}"),
                    )),
                    None => first_controller = Some(cur),
                }
            }
        }
    }
}

/// `schema.ParseGroupVersion` succeeds with a version: `v`, or `group/v`.
fn valid_group_version(s: &str) -> bool {
    match s.split('/').collect::<Vec<_>>().as_slice() {
        [v] => !v.is_empty(),
        [_, v] => !v.is_empty(),
        _ => false,
    }
}

/// `ValidateFinalizers` (create only, in apimachinery's `validateObjectMetaAccessorWithOptsCommon`).
fn finalizers(meta: &Map<String, Value>, errs: &mut Vec<FieldError>) {
    let list = string_list(meta.get("finalizers"));
    for f in &list {
        for m in is_qualified_name(f) {
            errs.push(FieldError::invalid("metadata.finalizers", f, m));
        }
    }
    if list.iter().any(|f| f == "orphan") && list.iter().any(|f| f == "foregroundDeletion") {
        errs.push(FieldError::invalid_printed(
            "metadata.finalizers",
            serde_json::to_string(&list).unwrap_or_default(),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
}

/// `validateKubeFinalizerName` of the built-in kinds: a finalizer without a `/` must be a
/// standard one.
fn kube_finalizer_names(def: &ResourceDef, meta: &Map<String, Value>, errs: &mut Vec<FieldError>) {
    if !def.builtin {
        return;
    }
    for (i, f) in string_list(meta.get("finalizers")).iter().enumerate() {
        if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f.as_str()) {
            errs.push(FieldError::invalid(
                format!("metadata.finalizers[{i}]"),
                f,
                "name is neither a standard finalizer name nor is it fully qualified",
            ));
        }
    }
}
