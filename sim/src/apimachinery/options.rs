//! The options of a request as kube-apiserver decodes and validates them: list and watch
//! (`ListOptions`), delete (`DeleteOptions`), create, update and patch (`CreateOptions`,
//! `UpdateOptions`, `PatchOptions`), and the patch types.
//!
//! Decoding follows apimachinery's query-parameter conversions
//! (`staging/src/k8s.io/apimachinery/pkg/runtime/conversion.go`: `Convert_Slice_string_To_bool`,
//! `Convert_Slice_string_To_Pointer_bool`, `Convert_Slice_string_To_int64`,
//! `Convert_Slice_string_To_Pointer_int64`); a value that does not convert is a `400 BadRequest`
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/get.go`, `ListResource`, which wraps the
//! `DecodeParameters` error in `errors.NewBadRequest`). Validation follows
//! `staging/src/k8s.io/apimachinery/pkg/apis/meta/internalversion/validation/validation.go`
//! (`ValidateListOptions`, `validateWatchOptions`, with the WatchList feature enabled) and is
//! answered as `ListResource` answers it: `errors.NewInvalid(schema.GroupKind{Group:
//! "meta.k8s.io", Kind: "ListOptions"}, "", errs)`, a `422 Invalid` listing every error.

use serde_json::Value;

use super::errors::{ApiError, FieldError, go_is_print, go_string_slice};
use super::util::{Query, string_list};

/// Patch flavours, by Content-Type (`k8s.io/apimachinery/pkg/types` `PatchType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/strategic-merge-patch+json`: merged by the built-in kinds' patch strategies
    /// and merge keys (see `crate::registry::smp`); custom kinds refuse it with 415, as
    /// kube-apiserver does.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply), approximated: the applied config is
    /// merge-patched onto the live object, or creates it, and the fields its manager stops
    /// applying are removed (see `crate::registry::apply`). Only JSON syntax is accepted.
    Apply,
}

impl PatchKind {
    /// From a Content-Type header value.
    pub(crate) fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Parsed `DeleteOptions` (`metav1.DeleteOptions`).
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// `dryRun` as sent (any value makes a dry run, as `dryrun.IsDryRun`; see `is_dry_run`).
    pub dry_run: Vec<String>,
    /// `gracePeriodSeconds` (for pods: see `crate::registry::strategy::pod_grace_period`).
    pub grace_period_seconds: Option<i64>,
    /// `propagationPolicy` (acted on only with the garbage collector stand-in).
    pub propagation_policy: Option<String>,
    /// `orphanDependents` (as `propagationPolicy`).
    pub orphan_dependents: Option<bool>,
}

impl DeleteOptions {
    /// `dryrun.IsDryRun`: whether any `dryRun` value was sent.
    pub(crate) fn is_dry_run(&self) -> bool {
        !self.dry_run.is_empty()
    }

    /// From a request body that is not empty.
    fn from_body(body: &[u8]) -> Result<Self, ApiError> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
        let pre = v.get("preconditions");
        let s = |k: &str| {
            pre.and_then(|p| p.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let dry_run = string_list(v.get("dryRun"));
        Ok(Self {
            uid: s("uid"),
            resource_version: s("resourceVersion"),
            dry_run,
            grace_period_seconds: v.get("gracePeriodSeconds").and_then(Value::as_i64),
            propagation_policy: v
                .get("propagationPolicy")
                .and_then(Value::as_str)
                .map(str::to_string),
            orphan_dependents: v.get("orphanDependents").and_then(Value::as_bool),
        })
    }

    /// As kube-apiserver's `DeleteResource` reads them
    /// (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/delete.go`): from the body when it
    /// has one, else from the query parameters (`DecodeParameters`, whose bad numbers are a
    /// `400`), so `?gracePeriodSeconds=0` counts only on a request without a body; then
    /// validated (see `errors`).
    pub(crate) fn from_request(body: &[u8], query: &Query) -> Result<Self, ApiError> {
        let opts = if body.iter().all(u8::is_ascii_whitespace) {
            Self::from_query(query)?
        } else {
            Self::from_body(body)?
        };
        let errs = opts.errors();
        if errs.is_empty() {
            Ok(opts)
        } else {
            Err(ApiError::invalid_options("DeleteOptions", &errs))
        }
    }

    /// From the query parameters of a request without a body.
    fn from_query(query: &Query) -> Result<Self, ApiError> {
        let grace_period_seconds = query
            .get("gracePeriodSeconds")
            .map(parse_int64)
            .transpose()?;
        Ok(Self {
            dry_run: query_dry_run(query),
            grace_period_seconds,
            propagation_policy: query.get("propagationPolicy").map(str::to_string),
            orphan_dependents: query.get("orphanDependents").map(parse_bool),
            ..Self::default()
        })
    }

    /// `ValidateDeleteOptions`
    /// (`staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go`), which the
    /// delete handlers answer with a `422` naming `DeleteOptions.meta.k8s.io`.
    fn errors(&self) -> Vec<FieldError> {
        const PP: &str = "propagationPolicy";
        let mut errs = Vec::new();
        if let (Some(_), Some(p)) = (self.orphan_dependents, &self.propagation_policy) {
            errs.push(FieldError::invalid(
                PP,
                p,
                "orphanDependents and deletionPropagation cannot be both set",
            ));
        }
        if let Some(p) = &self.propagation_policy
            && !matches!(p.as_str(), "Foreground" | "Background" | "Orphan")
        {
            errs.push(FieldError::not_supported(
                PP,
                p,
                &["Foreground", "Background", "Orphan", "nil"],
            ));
        }
        errs.extend(dry_run_errors(&self.dry_run));
        errs
    }
}

/// The `dryRun` values of a query (`Query` keeps the first value of each parameter).
pub(crate) fn query_dry_run(query: &Query) -> Vec<String> {
    query
        .get("dryRun")
        .map(str::to_string)
        .into_iter()
        .collect()
}

/// `ValidateDryRun`: every `dryRun` value must be `All`
/// (`staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go`).
pub(crate) fn dry_run_errors(values: &[String]) -> Vec<FieldError> {
    if values.iter().all(|v| v == "All") {
        Vec::new()
    } else {
        vec![FieldError::not_supported_printed(
            "dryRun",
            go_string_slice(values),
            &["All"],
        )]
    }
}

/// The write options of a create, update or patch, validated as the handlers do
/// (`staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go`:
/// `ValidateCreateOptions`, `ValidateUpdateOptions`, `ValidatePatchOptions`, answered with a
/// `422` naming `CreateOptions.meta.k8s.io` and so on): whether the write is a dry run.
pub(crate) fn write_options(
    query: &Query,
    kind: &'static str,
    patch: Option<PatchKind>,
) -> Result<bool, ApiError> {
    let manager = query.get("fieldManager").unwrap_or("");
    let mut errs = Vec::new();
    match patch {
        Some(PatchKind::Apply) if manager.is_empty() => {
            errs.push(FieldError::required(
                "fieldManager",
                "is required for apply patch",
            ));
        }
        Some(PatchKind::Apply) | None => {}
        Some(_) => {
            if query.get("force").is_some() {
                errs.push(FieldError::forbidden(
                    "force",
                    "may not be specified for non-apply patch",
                ));
            }
        }
    }
    errs.extend(field_manager_errors(manager));
    let dry_run = query_dry_run(query);
    errs.extend(dry_run_errors(&dry_run));
    let validation = query.get("fieldValidation").unwrap_or("");
    if !matches!(validation, "" | "Ignore" | "Warn" | "Strict") {
        errs.push(FieldError::not_supported(
            "fieldValidation",
            validation,
            &["", "Ignore", "Strict", "Warn"],
        ));
    }
    if errs.is_empty() {
        Ok(!dry_run.is_empty())
    } else {
        Err(ApiError::invalid_options(kind, &errs))
    }
}

/// `ValidateFieldManager`
/// (`staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go`): at most
/// 128 bytes, and every character printable by `unicode.IsPrint`, one error per other
/// character with its `%#U` form and byte position.
/// The manager a write is recorded for (`handlers/rest.go` `managerOrUserAgent`): the
/// `fieldManager` parameter, else the User-Agent before its first `/`, without unprintable
/// characters, cut to 128 bytes (`prefixFromUserAgent`).
pub(crate) fn manager_or_user_agent(query: &Query, user_agent: &str) -> String {
    if let Some(m) = query.non_empty("fieldManager") {
        return m.to_string();
    }
    let prefix = user_agent.split('/').next().unwrap_or("");
    let mut out = String::new();
    for c in prefix.chars().filter(|&c| go_is_print(c)) {
        if out.len() + c.len_utf8() > 128 {
            break;
        }
        out.push(c);
    }
    out
}

fn field_manager_errors(manager: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if manager.len() > 128 {
        errs.push(FieldError::too_long("fieldManager", 128));
    }
    for (i, c) in manager.char_indices() {
        if !go_is_print(c) {
            // `%#U` adds the quoted character only when it is printable, never here.
            let why = format!("invalid character U+{:04X} (at position {i})", c as u32);
            errs.push(FieldError::invalid("fieldManager", manager, why));
        }
    }
    errs
}

/// The list/watch options of one request (`metainternalversion.ListOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ListOptions {
    /// `watch`.
    pub watch: bool,
    /// `allowWatchBookmarks`.
    pub allow_watch_bookmarks: bool,
    /// `resourceVersion` (empty when unset).
    pub resource_version: String,
    /// `resourceVersionMatch` (empty when unset).
    pub resource_version_match: String,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<i64>,
    /// `limit` (0 when unset; not positive means no limit).
    pub limit: i64,
    /// `continue` (empty when unset).
    pub continue_token: String,
    /// `sendInitialEvents` (a pointer in kube: unset differs from false).
    pub send_initial_events: Option<bool>,
    /// `shardSelector` as sent (empty when unset; KEP-5866, parsed by the registry's store
    /// only under the `ShardedListAndWatch` gate, see `crate::registry::generic::shard_selector`).
    pub shard_selector: String,
}

/// `Convert_Slice_string_To_bool`: only `0` and `false` (any case) are false; any other value,
/// the empty one included, is true.
pub(crate) fn parse_bool(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

/// `strconv.ParseInt(s, 10, 64)` with Go's error text.
pub(crate) fn parse_int64(s: &str) -> Result<i64, ApiError> {
    s.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        ApiError::bad_request(format!("strconv.ParseInt: parsing {s:?}: {why}"))
    })
}

impl ListOptions {
    /// Decodes the options of a request (the first value of a repeated parameter counts, as
    /// with Go's `url.Values`). `watch` is forced for the watch verb (the legacy `/watch/`
    /// paths and `?watch=` alike reach `ListResource` with the watch flag).
    pub(crate) fn decode(query: &Query, watch: bool) -> Result<Self, ApiError> {
        let mut o = ListOptions {
            watch: watch || query.get("watch").is_some_and(parse_bool),
            allow_watch_bookmarks: query.get("allowWatchBookmarks").is_some_and(parse_bool),
            resource_version: query.get("resourceVersion").unwrap_or("").to_string(),
            resource_version_match: query.get("resourceVersionMatch").unwrap_or("").to_string(),
            continue_token: query.get("continue").unwrap_or("").to_string(),
            send_initial_events: query.get("sendInitialEvents").map(parse_bool),
            shard_selector: query.get("shardSelector").unwrap_or("").to_string(),
            ..ListOptions::default()
        };
        if let Some(v) = query.get("limit") {
            o.limit = parse_int64(v)?;
        }
        if let Some(v) = query.get("timeoutSeconds") {
            o.timeout_seconds = Some(parse_int64(v)?);
        }
        Ok(o)
    }

    /// `SetListOptionsDefaults` (`staging/src/k8s.io/apimachinery/pkg/apis/meta/internalversion/
    /// defaults.go`, with the WatchList feature on, as in 1.34), which `ListResource` and
    /// `DeleteCollection` apply before validating: a watch from resourceVersion "" or "0" that
    /// sets neither `sendInitialEvents` nor `resourceVersionMatch` becomes a watch-list
    /// (`sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan`).
    pub(crate) fn set_defaults(&mut self) {
        if self.send_initial_events.is_some() || !self.resource_version_match.is_empty() {
            return;
        }
        let legacy = self.resource_version.is_empty() || self.resource_version == "0";
        if self.watch && legacy {
            self.send_initial_events = Some(true);
            self.resource_version_match = "NotOlderThan".to_string();
        }
    }

    /// `ValidateListOptions` (WatchList feature enabled): every error, in the real order.
    pub(crate) fn errors(&self) -> Vec<FieldError> {
        const RVM: &str = "resourceVersionMatch";
        let mut errs = Vec::new();
        let m = self.resource_version_match.as_str();
        if self.watch {
            // validateWatchOptions
            if self.send_initial_events.is_some() && m != "NotOlderThan" {
                errs.push(FieldError::forbidden(
                    RVM,
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if !m.is_empty() {
                if self.send_initial_events.is_none() {
                    errs.push(FieldError::forbidden(
                        RVM,
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    ));
                }
                if m != "NotOlderThan" {
                    errs.push(FieldError::not_supported(RVM, m, &["NotOlderThan"]));
                }
                if !self.continue_token.is_empty() {
                    errs.push(FieldError::forbidden(
                        RVM,
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
            return errs;
        }
        if !m.is_empty() {
            if self.resource_version.is_empty() {
                errs.push(FieldError::forbidden(
                    RVM,
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if !self.continue_token.is_empty() {
                errs.push(FieldError::forbidden(
                    RVM,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if m != "Exact" && m != "NotOlderThan" {
                errs.push(FieldError::not_supported(
                    RVM,
                    m,
                    &["Exact", "NotOlderThan", ""],
                ));
            }
            if m == "Exact" && self.resource_version == "0" {
                errs.push(FieldError::forbidden(
                    RVM,
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if self.send_initial_events.is_some() {
            errs.push(FieldError::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
        errs
    }

    /// Decodes, defaults and validates: the options, or the error kube-apiserver answers.
    pub(crate) fn parse(query: &Query, watch: bool) -> Result<Self, ApiError> {
        let mut o = Self::decode(query, watch)?;
        o.set_defaults();
        let errs = o.errors();
        if errs.is_empty() {
            Ok(o)
        } else {
            Err(ApiError::invalid_list_options(&errs))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Query {
        Query::parse(Some(s))
    }

    #[test]
    fn bools_like_apimachinery() {
        for (v, want) in [
            ("true", true),
            ("1", true),
            ("", true),
            ("yes", true),
            ("0", false),
            ("false", false),
            ("FALSE", false),
        ] {
            assert_eq!(parse_bool(v), want, "{v:?}");
        }
    }

    #[test]
    fn ints_like_strconv() {
        let e = ListOptions::decode(&q("limit=abc"), false).unwrap_err();
        assert_eq!((e.code, e.reason), (400, "BadRequest"));
        assert_eq!(
            e.message,
            r#"strconv.ParseInt: parsing "abc": invalid syntax"#
        );
        let e = ListOptions::decode(&q("timeoutSeconds=99999999999999999999"), true).unwrap_err();
        assert_eq!(
            e.message,
            r#"strconv.ParseInt: parsing "99999999999999999999": value out of range"#
        );
        let o = ListOptions::decode(&q("limit=-3&timeoutSeconds=%2B5"), false).unwrap();
        assert_eq!((o.limit, o.timeout_seconds), (-3, Some(5)));
    }

    #[test]
    fn list_rules() {
        let e = ListOptions::parse(&q("resourceVersionMatch=Bogus&continue=x"), false).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided, resourceVersionMatch: Unsupported value: \"Bogus\": supported values: \"Exact\", \"NotOlderThan\", \"\"]"
        );
        assert!(
            ListOptions::parse(&q("resourceVersion=5&resourceVersionMatch=Exact"), false).is_ok()
        );
        assert!(
            ListOptions::parse(&q("resourceVersion=0&resourceVersionMatch=Exact"), false).is_err()
        );
        assert!(ListOptions::parse(&q("sendInitialEvents=false"), false).is_err());
    }

    #[test]
    fn watch_rules() {
        // Watch-list does not need allowWatchBookmarks.
        assert!(
            ListOptions::parse(
                &q("sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
                true
            )
            .is_ok()
        );
        let e = ListOptions::parse(&q("sendInitialEvents=true"), true).unwrap_err();
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
        );
        // SetListOptionsDefaults: a watch from "" or "0" is a watch-list, so that the
        // resourceVersionMatch it sets meets a continue token.
        let e = ListOptions::parse(&q("watch=true&continue=x"), false).unwrap_err();
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided"
        );
        assert!(ListOptions::parse(&q("watch=true&resourceVersion=5&continue=x"), false).is_ok());
        let e = ListOptions::parse(&q("resourceVersionMatch=Exact"), true).unwrap_err();
        assert_eq!(
            e.details
                .as_ref()
                .map(|d| d["causes"].as_array().map(Vec::len)),
            Some(Some(2))
        );
    }
}
