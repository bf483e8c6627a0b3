//! Small helpers: RFC 3339 timestamps, UIDs, name validation, percent-decoding and query strings.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch, now.
pub(crate) fn now_unix() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(_) => 0,
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// (year, month, day) to days since 1970-01-01.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats Unix seconds as Kubernetes does (`2006-01-02T15:04:05Z`).
pub(crate) fn format_rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// The current time formatted as a Kubernetes timestamp.
pub(crate) fn now_rfc3339() -> String {
    format_rfc3339(now_unix())
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` into Unix seconds.
pub(crate) fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse::<i64>().ok() };
    let y = num(0..4)?;
    let mo = u32::try_from(num(5..7)?).ok()?;
    let d = u32::try_from(num(8..10)?).ok()?;
    let h = num(11..13)?;
    let mi = num(14..16)?;
    let se = num(17..19)?;
    if b[4] != b'-' || b[7] != b'-' || (b[10] != b'T' && b[10] != b't') {
        return None;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    let offset = match b.get(i) {
        Some(b'Z' | b'z') => 0,
        Some(sign @ (b'+' | b'-')) => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            let o = oh * 3600 + om * 60;
            if *sign == b'+' { o } else { -o }
        }
        _ => return None,
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset)
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

/// A random RFC 4122 version 4 UID.
pub(crate) fn new_uid() -> String {
    let mut v: u128 = rand::random();
    v &= !(0xF_u128 << 76);
    v |= 0x4_u128 << 76;
    v &= !(0x3_u128 << 62);
    v |= 0x2_u128 << 62;
    let h = format!("{v:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Five random lowercase alphanumerics, the suffix `generateName` gets.
pub(crate) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Validates a DNS-1123 subdomain (most object names); returns the message kube-apiserver gives.
pub(crate) fn validate_subdomain(name: &str) -> Result<(), String> {
    const MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    if name.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    let ok = !name.is_empty()
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        });
    if ok { Ok(()) } else { Err(MSG.into()) }
}

/// Validates a DNS-1123 label (namespace and service names).
pub(crate) fn validate_label(name: &str) -> Result<(), String> {
    const MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    if name.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok { Ok(()) } else { Err(MSG.into()) }
}

/// Decodes `%XX` escapes (and `+` as a space when `plus_is_space`); invalid escapes are kept as is.
pub(crate) fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                    }
                    _ => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parsed query string: the first value wins for repeated keys, as kube-apiserver reads
/// parameters (Go's `url.Values.Get`, and `(*in)[0]` in apimachinery's query conversions).
#[derive(Debug, Default, Clone)]
pub(crate) struct Query(HashMap<String, String>);

impl Query {
    /// Parses `a=b&c=d`.
    pub(crate) fn parse(q: Option<&str>) -> Self {
        let mut map = HashMap::new();
        if let Some(q) = q {
            for pair in q.split('&').filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                map.entry(percent_decode(k, true))
                    .or_insert_with(|| percent_decode(v, true));
            }
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
    }

    #[test]
    fn uid_shape() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }

    #[test]
    fn names() {
        assert!(validate_subdomain("a.b-c.d1").is_ok());
        assert!(validate_subdomain("Bad_Name").is_err());
        assert!(validate_subdomain("-a").is_err());
        assert!(validate_subdomain("").is_err());
        assert!(validate_label("a.b").is_err());
        assert!(validate_label("ab-1").is_ok());
    }

    #[test]
    fn query_decoding() {
        let q = Query::parse(Some(
            "labelSelector=app%3Dweb%2Ctier+in+%28a%2Cb%29&watch=1&x",
        ));
        assert_eq!(q.get("labelSelector"), Some("app=web,tier in (a,b)"));
        assert_eq!(q.get("watch"), Some("1"));
        assert_eq!(q.get("x"), Some(""));
        assert_eq!(percent_decode("%zz%4", false), "%zz%4");
    }
}
