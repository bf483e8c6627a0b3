//! Text formatting of times, durations and object keys.

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

/// `ns/name`, or `name` for a cluster-scoped object (client-go's key).
pub fn path(ns: &str, name: &str) -> String {
    if ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}/{name}")
    }
}

/// A wall time (nanoseconds since the Unix epoch) as RFC 3339 UTC with microseconds.
pub fn wall(t: u64) -> String {
    let mut out = String::new();
    let time = UNIX_EPOCH + Duration::from_nanos(t);
    // humantime returns a formatting error past year 9999 (a u64 of nanoseconds never gets
    // there, but the fallback costs nothing): then the raw number is shown.
    if write!(out, "{}", humantime::format_rfc3339_micros(time)).is_err() {
        out.clear();
        let _ = write!(out, "{t}ns");
    }
    out
}

/// A duration in nanoseconds, with a unit that keeps it short: `850ns`, `12.5µs`, `1.234ms`,
/// `2.500s`.
pub fn duration(nanos: i64) -> String {
    let abs = nanos.unsigned_abs();
    let sign = if nanos < 0 { "-" } else { "" };
    if abs < 1_000 {
        format!("{sign}{abs}ns")
    } else if abs < 1_000_000 {
        format!("{sign}{:.1}µs", abs as f64 / 1e3)
    } else if abs < 1_000_000_000 {
        format!("{sign}{:.3}ms", abs as f64 / 1e6)
    } else {
        format!("{sign}{:.3}s", abs as f64 / 1e9)
    }
}

/// A latency with its sign always shown: `+1.234ms`, `-20ns`.
pub fn latency(nanos: i64) -> String {
    if nanos < 0 {
        duration(nanos)
    } else {
        format!("+{}", duration(nanos))
    }
}

/// A latency in milliseconds with microsecond digits, its sign always shown: `+0.035ms`,
/// `+120.787ms`, `-0.002ms` (one unit, so a column of them reads at a glance).
pub fn millis(nanos: i64) -> String {
    let sign = if nanos < 0 { "-" } else { "+" };
    let abs = nanos.unsigned_abs();
    format!(
        "{sign}{}.{:03}ms",
        abs / 1_000_000,
        (abs % 1_000_000) / 1_000
    )
}

/// `b - a` in nanoseconds, signed, saturating at the ends of `i64`.
pub fn diff(a: u64, b: u64) -> i64 {
    let d = i128::from(b) - i128::from(a);
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}

/// Nanoseconds from a file (`u64`) as the signed value the formatters take, saturating.
pub fn nanos(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
