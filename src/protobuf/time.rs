//! The JSON text of Kubernetes' time types, as Go writes it: `metav1.Time` (RFC 3339 in whole
//! seconds, UTC), `metav1.MicroTime` (six fractional digits) and `metav1.Duration`
//! (`time.Duration.String`).

use super::ProtobufError;

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The longest text [`rfc3339_into`] writes (`9999-12-31T23:59:59.999999Z`).
pub(crate) const RFC3339_MAX: usize = 27;

/// `secs` since the Unix epoch as RFC 3339 in UTC (`2006-01-02T15:04:05Z`), with
/// `.µµµµµµ` when `micros` is given. Years outside 0..=9999 (which RFC 3339 cannot write,
/// and Go refuses to marshal) are an error.
pub fn rfc3339(secs: i64, micros: Option<u32>) -> Result<String, ProtobufError> {
    let mut buf = [0u8; RFC3339_MAX];
    rfc3339_into(secs, micros, &mut buf).map(str::to_string)
}

/// [`rfc3339`] written into `buf` (no allocation: the decoder lends the text to the target,
/// which parses it).
pub(crate) fn rfc3339_into(
    secs: i64,
    micros: Option<u32>,
    buf: &mut [u8; RFC3339_MAX],
) -> Result<&str, ProtobufError> {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        return Err(ProtobufError::Value(format!(
            "Time: year {y} outside of [0,9999]"
        )));
    }
    fn digits(out: &mut [u8], mut v: u64) {
        for b in out.iter_mut().rev() {
            *b = b'0' + (v % 10) as u8;
            v /= 10;
        }
    }
    // Every value below is in range: the year was checked, the rest come from div/rem.
    digits(&mut buf[0..4], y as u64);
    buf[4] = b'-';
    digits(&mut buf[5..7], u64::from(m));
    buf[7] = b'-';
    digits(&mut buf[8..10], u64::from(d));
    buf[10] = b'T';
    digits(&mut buf[11..13], (rem / 3600) as u64);
    buf[13] = b':';
    digits(&mut buf[14..16], (rem % 3600 / 60) as u64);
    buf[16] = b':';
    digits(&mut buf[17..19], (rem % 60) as u64);
    let end = match micros {
        None => 19,
        Some(us) => {
            buf[19] = b'.';
            digits(&mut buf[20..26], u64::from(us.min(999_999)));
            26
        }
    };
    buf[end] = b'Z';
    // ASCII digits and separators only.
    std::str::from_utf8(&buf[..=end]).map_err(|e| ProtobufError::Value(e.to_string()))
}

/// Go's `time.Duration.String()`: `0s`, `1.5µs`, `2ms`, `1m30s`, `-1h0m0.5s`.
pub fn go_duration(ns: i64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let neg = ns < 0;
    let u = ns.unsigned_abs();
    let sign = if neg { "-" } else { "" };
    /// `v / 10^prec` with the fraction's trailing zeros dropped.
    fn frac(v: u64, prec: u32) -> String {
        let p = 10u64.pow(prec);
        let (w, f) = (v / p, v % p);
        if f == 0 {
            return w.to_string();
        }
        let fs = format!("{f:0width$}", width = prec as usize);
        format!("{w}.{}", fs.trim_end_matches('0'))
    }
    if u < 1_000 {
        return format!("{sign}{u}ns");
    }
    if u < 1_000_000 {
        return format!("{sign}{}µs", frac(u, 3));
    }
    if u < 1_000_000_000 {
        return format!("{sign}{}ms", frac(u, 6));
    }
    let secs_ns = u % 60_000_000_000;
    let mins = u / 60_000_000_000;
    let s = format!("{}s", frac(secs_ns, 9));
    if mins == 0 {
        return format!("{sign}{s}");
    }
    let (h, m) = (mins / 60, mins % 60);
    if h == 0 {
        format!("{sign}{m}m{s}")
    } else {
        format!("{sign}{h}h{m}m{s}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_go_writes_them() {
        assert_eq!(rfc3339(0, None).unwrap(), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(1_700_000_000, None).unwrap(),
            "2023-11-14T22:13:20Z"
        );
        assert_eq!(
            rfc3339(951_782_400, Some(7)).unwrap(),
            "2000-02-29T00:00:00.000007Z"
        );
        assert_eq!(rfc3339(-1, None).unwrap(), "1969-12-31T23:59:59Z");
        assert!(rfc3339(i64::MAX, None).is_err());
        assert!(rfc3339(i64::MIN, None).is_err());
    }

    #[test]
    fn durations_are_written_as_go_writes_them() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(1), "1ns");
        assert_eq!(go_duration(1_500), "1.5µs");
        assert_eq!(go_duration(2_000_000), "2ms");
        assert_eq!(go_duration(90_000_000_000), "1m30s");
        assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
        assert_eq!(go_duration(-500_000_000), "-500ms");
        assert_eq!(go_duration(i64::MIN), "-2562047h47m16.854775808s");
    }
}
