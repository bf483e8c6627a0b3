//! Small helpers: RFC 3339 timestamps, UIDs, string lists of JSON, percent-decoding and query
//! strings.
//! Dates are jiff's, UIDs uuid's and the decoding percent-encoding's and form_urlencoded's: only
//! what kube-apiserver prints is decided here.

use std::collections::HashMap;

use jiff::Timestamp;

/// Seconds since the Unix epoch, now.
pub(crate) fn now_unix() -> i64 {
    Timestamp::now().as_second()
}

/// Formats Unix seconds as `metav1.Time` marshals them (`2006-01-02T15:04:05Z`: RFC 3339 in UTC,
/// whole seconds). A time outside jiff's range (years -9999 to 9999) is clamped to its ends.
pub(crate) fn format_rfc3339(secs: i64) -> String {
    let ts = Timestamp::from_second(secs).unwrap_or(if secs < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    });
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The current time formatted as a Kubernetes timestamp.
pub(crate) fn now_rfc3339() -> String {
    format_rfc3339(now_unix())
}

/// Parses an RFC 3339 timestamp (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`) into Unix seconds
/// (a fraction is dropped).
pub(crate) fn parse_rfc3339(s: &str) -> Option<i64> {
    s.parse::<Timestamp>().ok().map(Timestamp::as_second)
}

/// A human age like kubectl prints (`5s`, `3m`, `2h`, `4d`).
pub(crate) fn human_age(secs: i64) -> String {
    let secs = secs.max(0);
    if secs < 120 {
        format!("{secs}s")
    } else if secs < 3600 * 2 {
        format!("{}m", secs / 60)
    } else if secs < 86_400 * 2 {
        format!("{}h", secs / 3600)
    } else {
        format!("{}d", secs / 86_400)
    }
}

/// A random RFC 4122 version 4 UID, lowercase and hyphenated as kube-apiserver writes them.
pub(crate) fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Five random lowercase alphanumerics, the suffix `generateName` gets.
pub(crate) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The strings of a JSON array of strings (`finalizers`, `dryRun`, ...): others skipped,
/// empty when `v` is absent or not an array.
pub(crate) fn string_list(v: Option<&serde_json::Value>) -> Vec<String> {
    v.and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(serde_json::Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Decodes the `%XX` escapes of a path segment (invalid escapes are kept as they are; bytes
/// that are not UTF-8 become U+FFFD).
pub(crate) fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Parsed query string: the first value wins for repeated keys, as kube-apiserver reads
/// parameters (Go's `url.Values.Get`, and `(*in)[0]` in apimachinery's query conversions).
#[derive(Debug, Default, Clone)]
pub(crate) struct Query(HashMap<String, String>);

impl Query {
    /// Parses `a=b&c=d`.
    pub(crate) fn parse(q: Option<&str>) -> Self {
        let mut map = HashMap::new();
        // `application/x-www-form-urlencoded`: `+` is a space, invalid escapes stay as they are.
        for (k, v) in form_urlencoded::parse(q.unwrap_or("").as_bytes()) {
            map.entry(k.into_owned()).or_insert_with(|| v.into_owned());
        }
        Self(map)
    }

    /// The value of `key`, if present.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// The value of `key` if present and not empty.
    pub(crate) fn non_empty(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|v| !v.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_round_trip() {
        for secs in [0_i64, 1_700_000_000, 951_782_400, 4_102_444_800, 86_399] {
            let s = format_rfc3339(secs);
            assert_eq!(parse_rfc3339(&s), Some(secs), "{s}");
        }
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(
            parse_rfc3339("2000-02-29T01:00:00.123+01:00"),
            Some(951_782_400)
        );
        assert_eq!(parse_rfc3339("garbage"), None);
        assert_eq!(format_rfc3339(-1), "1969-12-31T23:59:59Z");
        assert_eq!(format_rfc3339(i64::MAX), "9999-12-30T22:00:00Z");
    }

    #[test]
    fn uid_shape() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"), "{u}");
        assert_eq!(u, u.to_lowercase());
    }

    #[test]
    fn query_decoding() {
        let q = Query::parse(Some(
            "labelSelector=app%3Dweb%2Ctier+in+%28a%2Cb%29&watch=1&x",
        ));
        assert_eq!(q.get("labelSelector"), Some("app=web,tier in (a,b)"));
        assert_eq!(q.get("watch"), Some("1"));
        assert_eq!(q.get("x"), Some(""));
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("a%2Fb+c"), "a/b+c");
        let q = Query::parse(Some("a=%zz&a=2&b=%E2%82%AC&&c"));
        assert_eq!(
            (q.get("a"), q.get("b"), q.get("c")),
            (Some("%zz"), Some("€"), Some(""))
        );
    }
}
