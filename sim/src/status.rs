//! Kubernetes `Status` errors with the codes and reasons kube-apiserver uses.

use serde_json::{Value, json};

/// An API error, rendered as a `Status` object with the matching HTTP code.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `Conflict`, ...).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details` of the Status, if any.
    pub details: Option<Value>,
    /// Seconds for a `Retry-After` header (429).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A plain error with no details.
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 404 for an object: `pods "x" not found`.
    pub(crate) fn not_found(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, plural)),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// 404 for a path the server does not serve.
    pub(crate) fn unknown_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 409 AlreadyExists.
    pub(crate) fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, plural)),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// 409 Conflict for a stale resourceVersion or failed precondition.
    pub(crate) fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, plural)
            ),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// The usual optimistic-concurrency conflict message.
    pub(crate) fn stale(group: &str, plural: &str, name: &str) -> Self {
        Self::conflict(
            group,
            plural,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 400 BadRequest.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 410 Expired.
    pub(crate) fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 422 Invalid with one field cause.
    pub(crate) fn invalid(
        kind: &str,
        group: &str,
        name: &str,
        field: &str,
        value: &str,
        why: &str,
    ) -> Self {
        let cause = format!("Invalid value: {value:?}: {why}");
        Self::new(
            422,
            "Invalid",
            format!("{kind} {name:?} is invalid: {field}: {cause}"),
        )
        .with_details(json!({
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [{"reason": "FieldValueInvalid", "message": cause, "field": field}]
        }))
    }

    /// 422 Invalid for a missing required field.
    pub(crate) fn required(kind: &str, group: &str, name: &str, field: &str, why: &str) -> Self {
        Self::new(422, "Invalid", format!("{kind} {name:?} is invalid: {field}: Required value: {why}")).with_details(
            json!({
                "name": name,
                "group": group,
                "kind": kind,
                "causes": [{"reason": "FieldValueRequired", "message": format!("Required value: {why}"), "field": field}]
            }),
        )
    }

    /// 422 for a watch-list request to a server without the WatchList feature (what
    /// kube-apiserver's ListOptions validation answers when the feature gate is off).
    pub(crate) fn watch_list_forbidden() -> Self {
        let why =
            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled";
        Self::new(
            422,
            "Invalid",
            format!("ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: {why}"),
        )
        .with_details(json!({
            "group": "meta.k8s.io",
            "kind": "ListOptions",
            "causes": [{"reason": "FieldValueForbidden", "message": format!("Forbidden: {why}"), "field": "sendInitialEvents"}]
        }))
    }

    /// 405 MethodNotAllowed.
    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }

    /// 413 RequestEntityTooLarge.
    pub(crate) fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 415 UnsupportedMediaType.
    pub(crate) fn unsupported_media(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {ct:?})"
            ),
        )
    }

    /// 429 TooManyRequests with a Retry-After.
    pub(crate) fn too_many_requests(retry_after: u64) -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        )
        .with_details(json!({"retryAfterSeconds": retry_after}));
        e.retry_after = Some(retry_after);
        e
    }

    /// 500 InternalError.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(json!({"causes": [{"message": message}]}))
    }

    /// An injected failure with an arbitrary code.
    pub(crate) fn injected(code: u16, retry_after: u64) -> Self {
        match code {
            429 => Self::too_many_requests(retry_after),
            500 => Self::internal("injected fault (kinformer-sim)"),
            503 => {
                let mut e = Self::new(503, "ServiceUnavailable", "injected fault (kinformer-sim)");
                e.retry_after = Some(retry_after);
                e
            }
            504 => Self::new(504, "Timeout", "injected fault (kinformer-sim)"),
            c => Self::new(
                c,
                "InternalError",
                format!("injected fault {c} (kinformer-sim)"),
            ),
        }
    }

    /// The `Status` object.
    pub(crate) fn to_status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let (Some(d), Some(obj)) = (&self.details, v.as_object_mut()) {
            obj.insert("details".into(), d.clone());
        }
        v
    }
}

fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}
