//! Comparing resourceVersions (KEP-5647): apimachinery's `resourceversion.CompareResourceVersion`.
//!
//! A resourceVersion is opaque to clients in general, but KEP-5647 (client-go 1.35+) lets a
//! client order two of the *same resource*: both must be well-formed positive integers (digits
//! only, no leading zero, not `"0"`, any length); then the shorter is smaller and equal lengths
//! compare lexically. Anything else is not comparable, and says so with a typed error.
//!
//! ```
//! use std::cmp::Ordering;
//! use kinformer::resource_version::compare_resource_version;
//! assert_eq!(compare_resource_version("99", "100"), Ok(Ordering::Less));
//! assert!(compare_resource_version("0", "1").is_err());
//! ```

use std::cmp::Ordering;

/// A resourceVersion that is not a well-formed positive integer (apimachinery's
/// `InvalidResourceVersion`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("resource version is not well formed: {0:?}")]
pub struct InvalidResourceVersion(pub String);

/// Whether `rv` is a well-formed positive integer: digits only, no leading zero, not empty.
pub fn is_well_formed(rv: &str) -> bool {
    !rv.is_empty() && !rv.starts_with('0') && rv.bytes().all(|b| b.is_ascii_digit())
}

/// Orders `a` and `b` as apimachinery's `CompareResourceVersion` does; errors when either is not
/// well formed (see [`is_well_formed`]).
pub fn compare_resource_version(a: &str, b: &str) -> Result<Ordering, InvalidResourceVersion> {
    for rv in [a, b] {
        if !is_well_formed(rv) {
            return Err(InvalidResourceVersion(rv.to_string()));
        }
    }
    Ok(a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k3_resource_versions_compare_as_apimachinery_does() {
        use Ordering::*;
        let cases = [
            ("1", "1", Equal),
            ("9", "10", Less),
            ("100", "99", Greater),
            ("12345678901234567890123", "12345678901234567890124", Less),
            ("20", "19", Greater),
        ];
        for (a, b, want) in cases {
            assert_eq!(compare_resource_version(a, b), Ok(want), "{a} vs {b}");
        }
        for bad in ["", "0", "01", "1a", "-1", " 1", "1.0"] {
            assert_eq!(
                compare_resource_version(bad, "1"),
                Err(InvalidResourceVersion(bad.to_string())),
                "{bad:?}"
            );
            assert!(compare_resource_version("1", bad).is_err(), "{bad:?}");
        }
    }
}
