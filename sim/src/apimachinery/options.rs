//! List and watch options as kube-apiserver decodes and validates them.
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

use crate::apimachinery::errors::{ApiError, FieldError};
use crate::apimachinery::util::Query;

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

    /// Decodes and validates: the options, or the error kube-apiserver answers.
    pub(crate) fn parse(query: &Query, watch: bool) -> Result<Self, ApiError> {
        let o = Self::decode(query, watch)?;
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
        let e = ListOptions::parse(&q("resourceVersionMatch=Exact"), true).unwrap_err();
        assert_eq!(
            e.details
                .as_ref()
                .map(|d| d["causes"].as_array().map(Vec::len)),
            Some(Some(2))
        );
    }
}
