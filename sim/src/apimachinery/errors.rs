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
    /// The Status's `metadata.continue` (its `ListMeta`), which etcd3's expired-continue error
    /// carries (`handleCompactedErrorForPaging`).
    pub continue_token: Option<String>,
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
            continue_token: None,
        }
    }

    /// The same error with a Status `details` object.
    pub(crate) fn with_details(mut self, details: Value) -> Self {
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

    /// 422 Invalid with one `field.Invalid` cause of a string value (see
    /// [`Self::invalid_errors`]).
    pub(crate) fn invalid(
        kind: &str,
        group: &str,
        name: &str,
        field: &str,
        value: &str,
        why: &str,
    ) -> Self {
        Self::invalid_errors(group, kind, name, &[FieldError::invalid(field, value, why)])
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

    /// 422 Invalid for a request's list options, as `ListResource` answers a
    /// `ValidateListOptions` failure (`staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go`,
    /// `NewInvalid` with the GroupKind `ListOptions.meta.k8s.io` and an empty name): one cause per
    /// error, and the message aggregating them (`[a, b]` when several, duplicates dropped).
    pub(crate) fn invalid_list_options(errs: &[FieldError]) -> Self {
        Self::invalid_options("ListOptions", errs)
    }

    /// 422 Invalid for the options of a request (`ListOptions`, `DeleteOptions`,
    /// `CreateOptions`, ...), as the handlers answer them: `errors.NewInvalid(schema.GroupKind{
    /// Group: "meta.k8s.io", Kind: kind}, "", errs)`, whose message aggregates the errors like
    /// `field.ErrorList.ToAggregate` (duplicates dropped, `[a, b]` when several).
    pub(crate) fn invalid_options(kind: &str, errs: &[FieldError]) -> Self {
        Self::invalid_errors("meta.k8s.io", kind, "", errs)
    }

    /// 422 Invalid for an object, as `errors.NewInvalid(qualifiedKind, name, errs)`
    /// (`staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go`): one cause per error (its
    /// type, `ErrorBody` and field), and the message `Kind.group "name" is invalid: ...`
    /// aggregating the errors as `field.ErrorList.ToAggregate` does (duplicates dropped,
    /// `[a, b]` when several).
    pub(crate) fn invalid_errors(group: &str, kind: &str, name: &str, errs: &[FieldError]) -> Self {
        let mut msgs: Vec<String> = Vec::new();
        for e in errs {
            let m = e.error();
            if !msgs.contains(&m) {
                msgs.push(m);
            }
        }
        let agg = match msgs.as_slice() {
            [] => String::new(),
            [one] => format!(": {one}"),
            many => format!(": [{}]", many.join(", ")),
        };
        let causes: Vec<Value> = errs
            .iter()
            .map(|e| json!({"reason": e.cause_type(), "message": e.body(), "field": e.field}))
            .collect();
        // `schema.GroupKind.String()`: `Kind.group`, or the kind alone in the core group.
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut details = serde_json::Map::new();
        // `StatusDetails` omits empty strings.
        for (k, v) in [("name", name), ("group", group), ("kind", kind)] {
            if !v.is_empty() {
                details.insert(k.into(), json!(v));
            }
        }
        details.insert("causes".into(), Value::Array(causes));
        Self::new(
            422,
            "Invalid",
            format!("{qualified} {} is invalid{agg}", go_quote(name)),
        )
        .with_details(Value::Object(details))
    }

    /// 504 Timeout for a read at a resourceVersion the server has not reached
    /// (`staging/src/k8s.io/apiserver/pkg/storage/errors.go`, `NewTooLargeResourceVersionError`,
    /// over `errors.NewTimeoutError`): the cause `ResourceVersionTooLarge`, and `retryAfterSeconds`
    /// (with a `Retry-After` header) when not 0.
    pub(crate) fn too_large_resource_version(requested: u64, current: u64, retry: u64) -> Self {
        let mut details = json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]});
        if retry > 0
            && let Some(d) = details.as_object_mut()
        {
            d.insert("retryAfterSeconds".into(), json!(retry));
        }
        let mut e = Self::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
        )
        .with_details(details);
        e.retry_after = (retry > 0).then_some(retry);
        e
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

    /// What `responsewriters.ErrorToAPIStatus` makes of an error that is not a `Status`
    /// (a plain `fmt.Errorf` from the storage): 500, reason `StatusReasonUnknown` (""), the
    /// error's text as the message, no details.
    pub(crate) fn not_a_status(message: impl Into<String>) -> Self {
        Self::new(500, "", message)
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
        if let (Some(c), Some(obj)) = (&self.continue_token, v.as_object_mut()) {
            obj.insert("metadata".into(), json!({"continue": c}));
        }
        // `StatusReasonUnknown` is the empty string, omitted from JSON.
        if self.reason.is_empty()
            && let Some(obj) = v.as_object_mut()
        {
            obj.remove("reason");
        }
        v
    }
}

/// One `field.Error` of apimachinery's validation (`staging/src/k8s.io/apimachinery/pkg/util/validation/field/errors.go`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    /// The field path, e.g. `resourceVersionMatch` or `metadata.labels`.
    pub field: String,
    kind: FieldErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum FieldErrorKind {
    Forbidden(String),
    /// `field.Duplicate(path, value)`: the value as printed.
    Duplicate(String),
    /// The bad value as Go's `ErrorBody` prints it (quoted strings, `%#v` of slices).
    NotSupported {
        value: String,
        supported: Vec<&'static str>,
    },
    /// `field.Invalid`: the value as printed, and the detail.
    Invalid {
        value: String,
        detail: String,
    },
    /// `field.Required(path, detail)`.
    Required(String),
    /// `field.TooLong(path, value, max)`: the value is omitted from the message.
    TooLong(usize),
}

impl FieldError {
    /// `field.Forbidden(path, detail)`.
    pub(crate) fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            kind: FieldErrorKind::Forbidden(detail.into()),
        }
    }

    /// `field.Duplicate(path, value)` of a string value.
    pub(crate) fn duplicate(field: impl Into<String>, value: &str) -> Self {
        Self {
            field: field.into(),
            kind: FieldErrorKind::Duplicate(go_quote(value)),
        }
    }

    /// `field.Invalid(path, value, detail)` of a value already printed as `ErrorBody` prints
    /// it (a number as `%v`, a struct as its JSON).
    pub(crate) fn invalid_printed(
        field: impl Into<String>,
        value: String,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            kind: FieldErrorKind::Invalid {
                value,
                detail: detail.into(),
            },
        }
    }

    /// `field.NotSupported(path, value, supported)` of a string value.
    pub(crate) fn not_supported(
        field: impl Into<String>,
        value: &str,
        supported: &[&'static str],
    ) -> Self {
        Self::not_supported_printed(field, go_quote(value), supported)
    }

    /// `field.NotSupported` of a value already printed as `ErrorBody` prints it.
    pub(crate) fn not_supported_printed(
        field: impl Into<String>,
        value: String,
        supported: &[&'static str],
    ) -> Self {
        Self {
            field: field.into(),
            kind: FieldErrorKind::NotSupported {
                value,
                supported: supported.to_vec(),
            },
        }
    }

    /// `field.Required(path, detail)`.
    pub(crate) fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            kind: FieldErrorKind::Required(detail.into()),
        }
    }

    /// `field.TooLong(path, value, max)`.
    pub(crate) fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self {
            field: field.into(),
            kind: FieldErrorKind::TooLong(max),
        }
    }

    /// `field.Invalid(path, value, detail)` of a string value.
    pub(crate) fn invalid(
        field: impl Into<String>,
        value: &str,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            kind: FieldErrorKind::Invalid {
                value: go_quote(value),
                detail: detail.into(),
            },
        }
    }

    /// `ErrorType.String()`.
    fn type_name(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Forbidden(_) => "Forbidden",
            FieldErrorKind::Duplicate(_) => "Duplicate value",
            FieldErrorKind::NotSupported { .. } => "Unsupported value",
            FieldErrorKind::Invalid { .. } => "Invalid value",
            FieldErrorKind::Required(_) => "Required value",
            FieldErrorKind::TooLong(_) => "Too long",
        }
    }

    /// The cause type (`metav1.CauseType(err.Type)`).
    pub(crate) fn cause_type(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Forbidden(_) => "FieldValueForbidden",
            FieldErrorKind::Duplicate(_) => "FieldValueDuplicate",
            FieldErrorKind::NotSupported { .. } => "FieldValueNotSupported",
            FieldErrorKind::Invalid { .. } => "FieldValueInvalid",
            FieldErrorKind::Required(_) => "FieldValueRequired",
            FieldErrorKind::TooLong(_) => "FieldValueTooLong",
        }
    }

    /// `ErrorBody()`: the type, the quoted value where the type carries one, then the detail
    /// (`: detail`, when there is one).
    pub(crate) fn body(&self) -> String {
        match &self.kind {
            FieldErrorKind::Forbidden(d) | FieldErrorKind::Required(d) if d.is_empty() => {
                self.type_name().to_string()
            }
            FieldErrorKind::Forbidden(d) => format!("Forbidden: {d}"),
            FieldErrorKind::Duplicate(v) => format!("Duplicate value: {v}"),
            FieldErrorKind::NotSupported { value, supported } => {
                let quoted: Vec<String> = supported.iter().map(|v| format!("{v:?}")).collect();
                format!(
                    "Unsupported value: {value}: supported values: {}",
                    quoted.join(", ")
                )
            }
            FieldErrorKind::Invalid { value, detail } => {
                format!("Invalid value: {value}: {detail}")
            }
            FieldErrorKind::Required(d) => format!("Required value: {d}"),
            FieldErrorKind::TooLong(max) => {
                let unit = if *max == 1 { "byte" } else { "bytes" };
                format!("Too long: may not be more than {max} {unit}")
            }
        }
    }

    /// `Error()`: `field: body`.
    pub(crate) fn error(&self) -> String {
        format!("{}: {}", self.field, self.body())
    }
}

/// A string as Go's `%q` (and `%#v` of a string kind) prints it (`strconv.Quote`): printable
/// characters as they are, `\"` and `\\`, the C escapes `\a \b \f \n \r \t \v`, other
/// characters below U+0080 as `\xHH`, the rest as `\uHHHH` or `\UHHHHHHHH`.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if go_is_print(c) => out.push(c),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// The format characters (general category Cf) of Unicode 15.0, the version of Go's
/// `unicode` tables since Go 1.21, as inclusive ranges.
const FORMAT_CHARS: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Go's `unicode.IsPrint`: letters, marks, numbers, punctuation, symbols and the ASCII space;
/// not the other spaces (Z*), control, format, private-use or unassigned characters (C*).
/// Rust's standard library has no general categories: spaces are its `White_Space`
/// characters (a superset of Z* that adds only controls), format characters come from
/// [`FORMAT_CHARS`], private use from its three blocks, and of the unassigned code points only
/// the noncharacters are known (others count as printable, where Go would refuse them).
pub(crate) fn go_is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    let u = c as u32;
    let private_use =
        (0xE000..=0xF8FF).contains(&u) || (0xF0000..=0xFFFFD).contains(&u) || u >= 0x100000;
    let noncharacter = (0xFDD0..=0xFDEF).contains(&u) || u & 0xFFFE == 0xFFFE;
    !(c.is_control()
        || c.is_whitespace()
        || private_use
        || noncharacter
        || FORMAT_CHARS.iter().any(|&(lo, hi)| (lo..=hi).contains(&u)))
}

/// A `[]string` as Go's `%#v` prints it (`[]string{"a", "b"}`), as `ErrorBody` prints a
/// slice value.
pub(crate) fn go_string_slice(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| go_quote(s)).collect();
    format!("[]string{{{}}}", items.join(", "))
}

fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_is_print_follows_unicode_is_print() {
        for c in ['a', ' ', '~', 'é', '日', '😀', '\u{A1}'] {
            assert!(go_is_print(c), "{c:?}");
        }
        for c in [
            '\t',
            '\n',
            '\0',
            '\u{7f}',
            '\u{85}',
            '\u{A0}',
            '\u{AD}',
            '\u{200B}',
            '\u{2028}',
            '\u{3000}',
            '\u{FEFF}',
            '\u{E000}',
            '\u{FFFF}',
            '\u{E0041}',
            '\u{10FFFD}',
        ] {
            assert!(!go_is_print(c), "{c:?}");
        }
    }

    #[test]
    fn go_quote_escapes_like_strconv_quote() {
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("é日"), "\"é日\"");
        assert_eq!(go_quote("\u{7}\t\n\u{1}\u{7f}"), r#""\a\t\n\x01\x7f""#);
        assert_eq!(go_quote("\u{85}\u{200b}"), r#""\u0085\u200b""#);
        assert_eq!(go_quote("\u{E0041}"), r#""\U000e0041""#);
    }
}
