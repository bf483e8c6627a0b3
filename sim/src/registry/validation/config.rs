//! ConfigMap and Secret rules of `pkg/apis/core/validation/validation.go`: data keys
//! (`ValidateConfigMap`, `ValidateSecret`), and what an update of an immutable one may change
//! (`ValidateConfigMapUpdate`, `ValidateSecretUpdate`).

use serde_json::Value;

use crate::apimachinery::errors::FieldError;
use crate::apimachinery::validation::is_config_map_key;

const IMMUTABLE: &str = "field is immutable when `immutable` is set";

/// The keys of `data` (and `binaryData`) must be config keys (`IsConfigMapKey`).
pub(crate) fn validate_keys(obj: &Value, fields: &[&str], errs: &mut Vec<FieldError>) {
    for f in fields {
        if let Some(Value::Object(m)) = obj.get(*f) {
            for k in m.keys() {
                for msg in is_config_map_key(k) {
                    errs.push(FieldError::invalid(format!("{f}[{k}]"), k, msg));
                }
            }
        }
    }
}

fn immutable(v: &Value) -> bool {
    v.get("immutable").and_then(Value::as_bool) == Some(true)
}

/// `reflect.DeepEqual` of two maps of the objects (absent and null are both nil).
fn same(new: &Value, old: &Value, k: &str) -> bool {
    let get = |v: &Value| v.get(k).filter(|x| !x.is_null()).cloned();
    get(new) == get(old)
}

/// `ValidateConfigMapUpdate` (`secret`: false) or `ValidateSecretUpdate` (`type` immutable;
/// only `data` compared, `stringData` having been folded into it).
pub(crate) fn validate_update(new: &Value, old: &Value, secret: bool, errs: &mut Vec<FieldError>) {
    if secret {
        let t = |v: &Value| {
            v.get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        if t(new) != t(old) {
            errs.push(FieldError::invalid("type", &t(new), "field is immutable"));
        }
    }
    if immutable(old) {
        if !immutable(new) {
            errs.push(FieldError::forbidden("immutable", IMMUTABLE));
        }
        let fields: &[&str] = if secret {
            &["data"]
        } else {
            &["data", "binaryData"]
        };
        for f in fields {
            if !same(new, old, f) {
                errs.push(FieldError::forbidden(*f, IMMUTABLE));
            }
        }
    }
}
