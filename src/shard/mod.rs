//! Shards of one kind's objects: KEP-5866's hash ranges over `metadata.uid` or
//! `metadata.namespace`, as a client holds, sends and checks them.
//!
//! A shard is a set of half-open ranges `[start, end)` over the 64-bit FNV-1a hash of one field
//! of the object ([`ShardField`]); the whole space is `[0, 2^64)`. The API server (gate
//! `ShardedListAndWatch`, alpha in 1.36) takes it as the `shardSelector` parameter of LIST and
//! WATCH in the form [`ShardSelector::wire`] writes:
//!
//! ```text
//! shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(...)
//! ```
//!
//! and echoes it in the list's `metadata.shardInfo.selector`. A server without the gate ignores
//! the parameter and answers with everything, so a client filters by itself with
//! [`ShardSelector::matches_value`] (the same hash) whenever `shardInfo` is absent.
//!
//! A [`ShardSelector`] keeps its ranges sorted and merged (adjacent or overlapping ranges become
//! one), so two selectors that select the same hashes are equal and write the same wire form;
//! the range algebra ([`union`](ShardSelector::union), [`difference`](ShardSelector::difference),
//! [`intersection`](ShardSelector::intersection)) is what an informer needs when its ranges
//! change, and what a membership ring needs when ranges move between replicas.
//!
//! ```
//! use kinformer::shard::{HashRange, ShardField, ShardSelector};
//! let lower = ShardSelector::nth_of(ShardField::Uid, 0, 2).unwrap();
//! assert_eq!(
//!     lower.wire().unwrap(),
//!     "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
//! );
//! let parsed: ShardSelector = lower.wire().unwrap().parse().unwrap();
//! assert_eq!(parsed, lower);
//! assert!(lower.contains_hash(0x7fff_ffff_ffff_ffff) && !lower.contains_hash(1 << 63));
//! ```

use std::{fmt, str::FromStr};

#[cfg(test)]
mod tests;

/// The exclusive upper bound of the hash space, `2^64`.
pub const HASH_SPACE_END: u128 = 1 << 64;

/// 64-bit FNV-1a of `value`'s bytes: the hash KEP-5866 ranges are over (Go's `hash/fnv`
/// `New64a`).
pub fn fnv1a64(value: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    value
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// Which field of an object is hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum ShardField {
    /// `object.metadata.uid`: an even spread, but an object and the objects it owns land in
    /// different shards.
    #[default]
    Uid,
    /// `object.metadata.namespace`: everything in a namespace lands in one shard (a Deployment,
    /// its ReplicaSets and Pods co-locate); as even as the namespaces are. Cluster-scoped objects
    /// hash `""`.
    Namespace,
}

impl ShardField {
    /// The CEL-style path the wire form uses (`object.metadata.uid`).
    pub fn path(self) -> &'static str {
        match self {
            ShardField::Uid => "object.metadata.uid",
            ShardField::Namespace => "object.metadata.namespace",
        }
    }

    /// The field from its wire path.
    pub fn from_path(path: &str) -> Result<Self, ShardError> {
        match path {
            "object.metadata.uid" => Ok(ShardField::Uid),
            "object.metadata.namespace" => Ok(ShardField::Namespace),
            other => Err(ShardError::UnsupportedField(other.to_string())),
        }
    }

    /// The value hashed for an object with this `uid` and `namespace` (`None`: absent, hashed
    /// as `""` as kube-apiserver's accessor returns for an unset field).
    pub fn value<'a>(self, uid: Option<&'a str>, namespace: Option<&'a str>) -> &'a str {
        match self {
            ShardField::Uid => uid.unwrap_or(""),
            ShardField::Namespace => namespace.unwrap_or(""),
        }
    }
}

/// One half-open range `[start, end)` of the hash space; never empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HashRange {
    start: u64,
    end: u128,
}

impl HashRange {
    /// The whole space `[0, 2^64)`.
    pub const FULL: HashRange = HashRange {
        start: 0,
        end: HASH_SPACE_END,
    };

    /// `[start, end)`; `end` may be `2^64` ([`HASH_SPACE_END`]). Errors when the range is empty
    /// or ends past the space.
    pub fn new(start: u64, end: u128) -> Result<Self, ShardError> {
        if end > HASH_SPACE_END {
            return Err(ShardError::OutOfSpace { end });
        }
        if u128::from(start) >= end {
            return Err(ShardError::EmptyRange {
                start: start.into(),
                end,
            });
        }
        Ok(HashRange { start, end })
    }

    /// The inclusive lower bound.
    pub fn start(self) -> u64 {
        self.start
    }

    /// The exclusive upper bound (at most `2^64`).
    pub fn end(self) -> u128 {
        self.end
    }

    /// How many hashes the range holds.
    pub fn len(self) -> u128 {
        self.end - u128::from(self.start)
    }

    /// Never true (a range is never empty); here because clippy pairs `len` with it.
    pub fn is_empty(self) -> bool {
        false
    }

    /// Whether `hash` falls in `[start, end)`.
    pub fn contains(self, hash: u64) -> bool {
        hash >= self.start && u128::from(hash) < self.end
    }

    /// The `i`-th of `n` equal parts of the space (the last takes the remainder), as the KEP's
    /// examples split it. `None` when `i >= n` or `n == 0`.
    pub fn nth_of(i: u64, n: u64) -> Option<HashRange> {
        if n == 0 || i >= n {
            return None;
        }
        let width = HASH_SPACE_END / u128::from(n);
        let start = u128::from(i) * width;
        let end = if i + 1 == n {
            HASH_SPACE_END
        } else {
            start + width
        };
        // start < 2^64 because i < n, so the conversion cannot fail.
        let start = u64::try_from(start).ok()?;
        HashRange::new(start, end).ok()
    }

    fn wire(self, field: ShardField) -> String {
        format!(
            "shardRange({}, '{}', '{}')",
            field.path(),
            hex_bound(u128::from(self.start)),
            hex_bound(self.end)
        )
    }
}

impl fmt::Display for HashRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}, {})",
            hex_bound(u128::from(self.start)),
            hex_bound(self.end)
        )
    }
}

/// A bound as the KEP writes it: `0x` and 16 lowercase hex digits, or `0x10000000000000000`.
fn hex_bound(v: u128) -> String {
    if v == HASH_SPACE_END {
        "0x10000000000000000".to_string()
    } else {
        format!("0x{v:016x}")
    }
}

/// A shard: sorted, merged ranges over one field's hash. Empty ranges select nothing (and have
/// no wire form: the server refuses an empty selector).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ShardSelector {
    field: ShardField,
    ranges: Vec<HashRange>,
}

impl ShardSelector {
    /// The ranges over `field`, sorted and merged.
    pub fn new(field: ShardField, ranges: impl IntoIterator<Item = HashRange>) -> Self {
        ShardSelector {
            field,
            ranges: normalize(ranges.into_iter().collect()),
        }
    }

    /// The whole space over `field` (selects every object).
    pub fn everything(field: ShardField) -> Self {
        ShardSelector::new(field, [HashRange::FULL])
    }

    /// Nothing over `field`.
    pub fn nothing(field: ShardField) -> Self {
        ShardSelector {
            field,
            ranges: Vec::new(),
        }
    }

    /// The `i`-th of `n` equal shards (static sharding: replica `i` of `n`).
    pub fn nth_of(field: ShardField, i: u64, n: u64) -> Result<Self, ShardError> {
        HashRange::nth_of(i, n)
            .map(|r| ShardSelector::new(field, [r]))
            .ok_or(ShardError::NoSuchShard { i, n })
    }

    /// The hashed field.
    pub fn field(&self) -> ShardField {
        self.field
    }

    /// The ranges, sorted and disjoint, none adjacent to the next.
    pub fn ranges(&self) -> &[HashRange] {
        &self.ranges
    }

    /// True when nothing is selected.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// True when every hash is selected.
    pub fn is_everything(&self) -> bool {
        self.ranges == [HashRange::FULL]
    }

    /// The fraction of the space selected, in `[0, 1]` (for reports).
    pub fn fraction(&self) -> f64 {
        let n: u128 = self.ranges.iter().map(|r| r.len()).sum();
        n as f64 / HASH_SPACE_END as f64
    }

    /// Whether `hash` is selected.
    pub fn contains_hash(&self, hash: u64) -> bool {
        // Ranges are sorted by start: the candidate is the last range starting at or below.
        let i = self.ranges.partition_point(|r| r.start <= hash);
        i > 0 && self.ranges[i - 1].contains(hash)
    }

    /// Whether an object whose hashed field (see [`ShardField::value`]) is `value` is selected.
    pub fn matches_value(&self, value: &str) -> bool {
        self.contains_hash(fnv1a64(value))
    }

    /// Whether an object with this `uid` and `namespace` is selected.
    pub fn matches(&self, uid: Option<&str>, namespace: Option<&str>) -> bool {
        self.matches_value(self.field.value(uid, namespace))
    }

    /// Whether a kube object is selected.
    pub fn matches_object<K: kube_core::Resource>(&self, obj: &K) -> bool {
        let m = obj.meta();
        self.matches(m.uid.as_deref(), m.namespace.as_deref())
    }

    /// The hashes in either. Errors when the fields differ.
    pub fn union(&self, other: &ShardSelector) -> Result<ShardSelector, ShardError> {
        self.same_field(other)?;
        Ok(ShardSelector::new(
            self.field,
            self.ranges.iter().chain(&other.ranges).copied(),
        ))
    }

    /// The hashes in `self` and not in `other` (what enters when moving from `other` to `self`).
    pub fn difference(&self, other: &ShardSelector) -> Result<ShardSelector, ShardError> {
        self.same_field(other)?;
        let mut out = Vec::new();
        for r in &self.ranges {
            let mut pieces = vec![(u128::from(r.start), r.end)];
            for o in &other.ranges {
                let (os, oe) = (u128::from(o.start), o.end);
                pieces = pieces
                    .into_iter()
                    .flat_map(|(s, e)| {
                        let mut keep = Vec::with_capacity(2);
                        if oe <= s || os >= e {
                            keep.push((s, e));
                        } else {
                            if s < os {
                                keep.push((s, os));
                            }
                            if oe < e {
                                keep.push((oe, e));
                            }
                        }
                        keep
                    })
                    .collect();
            }
            for (s, e) in pieces {
                // s < e ≤ 2^64, so s fits in a u64 and the range is valid.
                if let Ok(s) = u64::try_from(s)
                    && let Ok(r) = HashRange::new(s, e)
                {
                    out.push(r);
                }
            }
        }
        Ok(ShardSelector::new(self.field, out))
    }

    /// The hashes in both.
    pub fn intersection(&self, other: &ShardSelector) -> Result<ShardSelector, ShardError> {
        let outside = ShardSelector::everything(self.field).difference(other)?;
        self.difference(&outside)
    }

    fn same_field(&self, other: &ShardSelector) -> Result<(), ShardError> {
        if self.field == other.field {
            Ok(())
        } else {
            Err(ShardError::MixedFields {
                first: self.field.path().to_string(),
                second: other.field.path().to_string(),
            })
        }
    }

    /// The `shardSelector` parameter as the KEP writes it (and as the server echoes it in
    /// `shardInfo.selector`): the ranges in order joined by ` || `. `None` when empty.
    pub fn wire(&self) -> Option<String> {
        if self.ranges.is_empty() {
            return None;
        }
        Some(
            self.ranges
                .iter()
                .map(|r| r.wire(self.field))
                .collect::<Vec<_>>()
                .join(" || "),
        )
    }

    /// Parses the wire form (the grammar and checks of kube-apiserver's `sharding.Parse`: only
    /// `shardRange(path, 'start', 'end')` joined by `||`, parentheses allowed, bounds `0x` and 16
    /// lowercase hex digits or `0x10000000000000000`, start < end, one field throughout).
    pub fn parse(s: &str) -> Result<Self, ShardError> {
        let mut p = Parser {
            src: s,
            pos: 0,
            ranges: Vec::new(),
            field: None,
        };
        p.skip_ws();
        if p.at_end() {
            return Err(ShardError::Empty);
        }
        p.or_expr()?;
        p.skip_ws();
        if !p.at_end() {
            return Err(p.syntax("unexpected input after the expression"));
        }
        let field = p.field.unwrap_or_default();
        Ok(ShardSelector::new(field, p.ranges))
    }
}

impl fmt::Display for ShardSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.wire() {
            Some(w) => f.write_str(&w),
            None => write!(f, "no shard of {}", self.field.path()),
        }
    }
}

impl FromStr for ShardSelector {
    type Err = ShardError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ShardSelector::parse(s)
    }
}

/// Sorted, with overlapping and adjacent ranges merged.
fn normalize(mut ranges: Vec<HashRange>) -> Vec<HashRange> {
    ranges.sort();
    let mut out: Vec<HashRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if u128::from(r.start) <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// Why a shard selector is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// The expression is empty (kube-apiserver: omit the parameter instead).
    #[error("empty shard selector is not allowed; omit the parameter for unfiltered lists")]
    Empty,
    /// Not the `shardRange(...) || ...` grammar.
    #[error("shard selector syntax error at byte {at}: {message}")]
    Syntax {
        /// Byte offset in the input.
        at: usize,
        /// What was expected.
        message: String,
    },
    /// A function other than `shardRange`.
    #[error("unsupported function {0:?}; only shardRange() and || are allowed")]
    UnsupportedFunction(String),
    /// A path other than `object.metadata.uid` or `object.metadata.namespace`.
    #[error(
        "unsupported field path {0:?}; supported: object.metadata.uid, object.metadata.namespace"
    )]
    UnsupportedField(String),
    /// A bound that is not `0x` and 16 lowercase hex digits (or `0x10000000000000000`).
    #[error("{which}{message}")]
    BadBound {
        /// `hexStart` or `hexEnd`.
        which: &'static str,
        /// What is wrong with it, as kube-apiserver words it (with its leading `:` or space).
        message: String,
    },
    /// `start >= end`.
    #[error("shard range start {start:#x} must be less than end {end:#x}")]
    EmptyRange {
        /// The start.
        start: u128,
        /// The end.
        end: u128,
    },
    /// An end past `2^64`.
    #[error("shard range end {end:#x} is past the hash space (2^64)")]
    OutOfSpace {
        /// The end.
        end: u128,
    },
    /// Ranges over two different fields.
    #[error("all shard ranges must use the same field, got {first:?} and {second:?}")]
    MixedFields {
        /// The first field's path.
        first: String,
        /// The other field's path.
        second: String,
    },
    /// `i >= n` or `n == 0` in [`ShardSelector::nth_of`].
    #[error("no shard {i} of {n}")]
    NoSuchShard {
        /// The index asked for.
        i: u64,
        /// The number of shards.
        n: u64,
    },
}

/// A recursive-descent parser of the CEL subset kube-apiserver accepts for `shardSelector`.
struct Parser<'a> {
    src: &'a str,
    pos: usize,
    ranges: Vec<HashRange>,
    field: Option<ShardField>,
}

impl Parser<'_> {
    fn at_end(&self) -> bool {
        self.pos >= self.src.len()
    }

    fn rest(&self) -> &str {
        &self.src[self.pos..]
    }

    fn skip_ws(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.src.len() - trimmed.len();
    }

    fn syntax(&self, message: &str) -> ShardError {
        ShardError::Syntax {
            at: self.pos,
            message: message.to_string(),
        }
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str) -> Result<(), ShardError> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(self.syntax(&format!("expected {token:?}")))
        }
    }

    /// `or := term ('||' term)*`
    fn or_expr(&mut self) -> Result<(), ShardError> {
        self.term()?;
        while self.eat("||") {
            self.term()?;
        }
        Ok(())
    }

    /// `term := '(' or ')' | ident '(' args ')'`
    fn term(&mut self) -> Result<(), ShardError> {
        if self.eat("(") {
            self.or_expr()?;
            return self.expect(")");
        }
        let name = self.path()?;
        if name != "shardRange" {
            return Err(ShardError::UnsupportedFunction(name));
        }
        self.expect("(")?;
        let path = self.path()?;
        let field = ShardField::from_path(&path)?;
        self.expect(",")?;
        let start = self.bound("hexStart")?;
        self.expect(",")?;
        let end = self.bound("hexEnd")?;
        self.expect(")")?;
        if start >= end {
            return Err(ShardError::EmptyRange { start, end });
        }
        match self.field {
            Some(f) if f != field => {
                return Err(ShardError::MixedFields {
                    first: f.path().to_string(),
                    second: field.path().to_string(),
                });
            }
            _ => self.field = Some(field),
        }
        // start < end ≤ 2^64, so start fits in a u64.
        let start = u64::try_from(start).map_err(|_| ShardError::EmptyRange { start, end })?;
        self.ranges.push(HashRange::new(start, end)?);
        Ok(())
    }

    /// A dotted identifier (`shardRange`, `object.metadata.uid`).
    fn path(&mut self) -> Result<String, ShardError> {
        self.skip_ws();
        let len = self
            .rest()
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(self.rest().len());
        if len == 0 {
            return Err(self.syntax("expected an identifier"));
        }
        let ident = self.rest()[..len].to_string();
        self.pos += len;
        Ok(ident)
    }

    /// A single-quoted bound, checked as kube-apiserver's `extractHexLiteral`.
    fn bound(&mut self, which: &'static str) -> Result<u128, ShardError> {
        self.skip_ws();
        let quote = match self.rest().chars().next() {
            Some(q @ ('\'' | '"')) => q,
            _ => {
                return Err(ShardError::BadBound {
                    which,
                    message: " must be a string literal (e.g. '0xff')".to_string(),
                });
            }
        };
        self.pos += 1;
        let Some(close) = self.rest().find(quote) else {
            return Err(self.syntax("unterminated string literal"));
        };
        let lit = self.rest()[..close].to_string();
        self.pos += close + 1;
        parse_bound(which, &lit)
    }
}

/// Checks one bound literal as kube-apiserver's `extractHexLiteral` does.
fn parse_bound(which: &'static str, s: &str) -> Result<u128, ShardError> {
    let bad = |message: String| ShardError::BadBound { which, message };
    let Some(hex) = s.strip_prefix("0x") else {
        return Err(bad(format!(" must have '0x' prefix, got {s:?}")));
    };
    if hex.is_empty() {
        return Err(bad(": hex value is required after '0x'".to_string()));
    }
    if hex.len() > 17 {
        return Err(bad(format!(
            ": hex value too long ({} chars, max 17): {hex:?}",
            hex.len()
        )));
    }
    if let Some(c) = hex
        .chars()
        .find(|c| !(c.is_ascii_digit() || ('a'..='f').contains(c)))
    {
        return Err(bad(format!(": invalid hex character {c:?} in {s:?}")));
    }
    if hex.len() == 17 {
        if s != "0x10000000000000000" {
            return Err(bad(format!(
                ": 17-digit hex value must be '0x10000000000000000' (2^64), got {s:?}"
            )));
        }
        return Ok(HASH_SPACE_END);
    }
    if hex.len() != 16 {
        let padded = format!("0x{}{hex}", "0".repeat(16 - hex.len()));
        return Err(bad(format!(
            " must be a 0x-prefixed 16-digit hex value, got {s:?} (did you mean {padded:?}?)"
        )));
    }
    // 16 lowercase hex digits always fit in a u128.
    u128::from_str_radix(hex, 16).map_err(|e| bad(format!(": {e}")))
}
