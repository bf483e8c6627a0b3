//! Continue tokens (`k8s.io/apiserver/pkg/storage/continue.go`): the resourceVersion a paged list
//! was read at and the key it goes on after, as kube-apiserver encodes and checks them.

use base64::Engine as _;
use serde_json::Value;

use super::object::StoredObject;
use crate::apimachinery::errors::ApiError;

/// `storage.EncodeContinue` (`staging/src/k8s.io/apiserver/pkg/storage/continue.go`): the JSON
/// `{"v","rv","start"}` in that order, base64 URL-safe without padding, `start` being the next
/// key relative to the list's prefix (the name in a namespaced list, `namespace/name` in one
/// across namespaces) plus a NUL, the smallest key after it.
pub(crate) fn encode(rv: u64, last: &StoredObject, namespaced_request: bool) -> String {
    let start = if namespaced_request || last.namespace.is_empty() {
        format!("{}\u{0}", last.name)
    } else {
        format!("{}/{}\u{0}", last.namespace, last.name)
    };
    encode_start(i64::try_from(rv).unwrap_or(i64::MAX), &start)
}

/// `storage.EncodeContinue` of a start key as it is encoded (`start` of a decoded token); a
/// negative `rv` asks for the rest of the list at the latest resourceVersion.
pub(crate) fn encode_start(rv: i64, start: &str) -> String {
    let start = serde_json::to_string(start).unwrap_or_default();
    let token = format!(r#"{{"v":"meta.k8s.io/v1","rv":{rv},"start":{start}}}"#);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token)
}

/// A decoded continue token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Continue {
    /// The resourceVersion the list was read at; negative: the latest (a token etcd3 hands out
    /// with its expired-continue error).
    pub rv: i64,
    /// The start key as encoded (`name\0` or `namespace/name\0`).
    pub start: String,
    /// The (namespace, name) key the rest of the list goes on after.
    pub key: (String, String),
}

/// `storage.DecodeContinue` with the errors `storage.ValidateListOptions` answers (400
/// `invalid continue token: continue key is not valid...`); `ns` is the request's namespace.
pub(crate) fn decode(token: &str, ns: Option<&str>) -> Result<Continue, ApiError> {
    let bad = |why: String| {
        ApiError::bad_request(format!(
            "invalid continue token: continue key is not valid{why}"
        ))
    };
    // base64.RawURLEncoding: Go reports the first byte it cannot use.
    let alphabet = |c: u8| c.is_ascii_alphanumeric() || c == b'-' || c == b'_';
    if let Some(i) = token.bytes().position(|c| !alphabet(c)) {
        return Err(bad(format!(": illegal base64 data at input byte {i}")));
    }
    if token.len() % 4 == 1 {
        return Err(bad(format!(
            ": illegal base64 data at input byte {}",
            token.len() - 1
        )));
    }
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|e| bad(format!(": {e}")))?;
    let v: Value = serde_json::from_slice(&raw).map_err(|e| bad(format!(": {e}")))?;
    if v.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
        let version = v.get("v").and_then(Value::as_str).unwrap_or("");
        return Err(bad(format!(
            ": server does not recognize this encoded version {version}"
        )));
    }
    let rv = v.get("rv").and_then(Value::as_i64).unwrap_or(0);
    if rv == 0 {
        return Err(bad(
            ": incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into(),
        ));
    }
    let raw_start = v.get("start").and_then(Value::as_str).unwrap_or("");
    if raw_start.is_empty() {
        return Err(bad(
            ": encoded start key empty (version meta.k8s.io/v1)".into()
        ));
    }
    let start = raw_start.trim_end_matches('\u{0}');
    let key = match (ns, start.split_once('/')) {
        (Some(ns), _) => (ns.to_string(), start.to_string()),
        (None, Some((ns, name))) => (ns.to_string(), name.to_string()),
        (None, None) => (String::new(), start.to_string()),
    };
    Ok(Continue {
        rv,
        start: raw_start.to_string(),
        key,
    })
}
