//! resourceVersions as text (`k8s.io/apiserver/pkg/storage/api_object_versioner.go`), with the
//! errors the watch cache and `storage.ValidateListOptions` give for a malformed one.

use crate::apimachinery::errors::{ApiError, go_quote};

/// `APIObjectVersioner.ParseResourceVersion`
/// (`staging/src/k8s.io/apiserver/pkg/storage/api_object_versioner.go`): a `storage.InvalidError`
/// over `strconv.ParseUint`'s error. The watch cache (gets, watches) returns it unconverted,
/// which the handlers answer as a 500 without a reason (kubernetes issue 139485).
pub(crate) fn parse_rv(s: &str) -> Result<u64, ApiError> {
    parse_uint(s).map_err(|why| ApiError::new(500, "", why))
}

/// The same parse for every list: `storage.ValidateListOptions`, which 1.34's
/// `CacheDelegator.GetList` runs first, wraps it in a 400 "invalid resource version: ...".
pub(crate) fn parse_rv_etcd(s: &str) -> Result<u64, ApiError> {
    parse_uint(s).map_err(|why| ApiError::bad_request(format!("invalid resource version: {why}")))
}

/// `strconv.ParseUint(s, 10, 64)` (no sign accepted), its error as the field error prints it.
fn parse_uint(s: &str) -> Result<u64, String> {
    // Rust's parse takes a leading `+`, Go's ParseUint does not (even before an overflow).
    let why = match s.parse::<u64>() {
        _ if s.starts_with('+') => "invalid syntax",
        Ok(n) => return Ok(n),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => "value out of range",
        Err(_) => "invalid syntax",
    };
    let q = go_quote(s);
    Err(format!(
        "resourceVersion: Invalid value: {q}: strconv.ParseUint: parsing {q}: {why}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_uint_like_go() {
        assert_eq!(parse_uint("12"), Ok(12));
        let why = |s: &str| {
            parse_uint(s)
                .unwrap_err()
                .rsplit(": ")
                .next()
                .map(str::to_string)
        };
        assert_eq!(why("x1").as_deref(), Some("invalid syntax"));
        assert_eq!(why("-1").as_deref(), Some("invalid syntax"));
        assert_eq!(
            why("99999999999999999999").as_deref(),
            Some("value out of range")
        );
        // Go refuses the sign before it reads any digit.
        assert_eq!(why("+5").as_deref(), Some("invalid syntax"));
        assert_eq!(
            why("+99999999999999999999").as_deref(),
            Some("invalid syntax")
        );
    }
}
