//! JSON decoding with every `Vec` allocated at its exact size, as fast as this machine's SIMD
//! units allow.
//!
//! # Why
//!
//! serde builds a `Vec<T>` with `Vec::with_capacity(size_hint)`, and serde_json cannot say
//! how long an array is before it has read it, so every vector grows by pushes: a one-element
//! array takes four slots, a five-element one eight. k8s-openapi's element types are large
//! (an `EnvVar` is 360 bytes inline, a `ContainerStatus` 752), so a decoded pod of the shared
//! benchmark carries 6.3 KB of empty slots (17% of its 37 KB). kube-rs's store does not,
//! because it keeps a clone of each object (a clone allocates exactly), at the price of a second
//! pass as expensive as two thirds of the decode.
//!
//! Here the decode itself allocates exactly. simd-json (runtime-detected AVX2 or SSE4.2, a
//! portable fallback elsewhere) first finds every value's place in one vectorised pass, so it
//! knows each array's length before serde asks, and decodes a benchmark pod in 0.58x the time
//! of serde_json (`benches/decode.rs`). Input simd-json refuses is decoded again with
//! serde_json, after a scan of the bytes for the length of each array (about 1 µs for 5 KB)
//! handed to serde as size hints: an error is always serde_json's (the one kube reports), and
//! the result never depends on which decoder read it.
//!
//! The hints only size allocations: the values are the decoder's, whatever the scan finds (a
//! malformed document fails in serde_json as it would without hints; serde caps any hint at
//! 1 MB worth of elements).

use std::{
    cell::Cell,
    fmt,
    sync::atomic::{AtomicU64, Ordering},
};

use serde::{
    Deserializer,
    de::{
        DeserializeOwned, DeserializeSeed, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
    },
};

/// Decodes `json` as serde_json does, with every vector allocated at its exact size.
///
/// simd-json's serde deserializer reads it first (its tape knows each array's length, which
/// serde is given as the size hint). Whatever simd-json refuses is decoded again by
/// serde_json with the lengths of a pre-scan as size hints, so the error, when there is one, is
/// serde_json's, as kube's decoder would report it.
///
/// # Errors
/// What `serde_json::from_slice` returns for the same input.
///
/// ```
/// let v: Vec<Vec<u8>> = kinformer::exact::from_slice(b"[[1],[2,3,4,5,6]]").unwrap();
/// assert_eq!(v, vec![vec![1], vec![2, 3, 4, 5, 6]]);
/// assert_eq!((v[0].capacity(), v[1].capacity()), (1, 5));
/// ```
pub fn from_slice<T: DeserializeOwned>(json: &[u8]) -> serde_json::Result<T> {
    if let Some(value) = simd::from_slice(json) {
        return Ok(value);
    }
    FALLBACKS.fetch_add(1, Ordering::Relaxed);
    from_slice_serde_json(json)
}

/// Documents [`from_slice`] decoded again with serde_json because simd-json refused them.
static FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// How many documents [`from_slice`] has decoded a second time, with serde_json, since the
/// process started: input simd-json refused (not JSON, not of the type asked for, or beyond
/// what it reads) or a decode nested in another on the same thread. Objects an API server
/// sends should never need it; a count that rises with the events means each is decoded
/// twice. (kinformer-actors exports it as `kinformer_decode_fallbacks_total`.)
///
/// ```
/// let before = kinformer::exact::fallbacks();
/// assert!(kinformer::exact::from_slice::<u8>(b"300").is_err());
/// assert!(kinformer::exact::fallbacks() > before);
/// ```
pub fn fallbacks() -> u64 {
    FALLBACKS.load(Ordering::Relaxed)
}

/// [`from_slice`] with serde_json alone: each array's length from a pre-scan as serde's size
/// hint.
fn from_slice_serde_json<T: DeserializeOwned>(json: &[u8]) -> serde_json::Result<T> {
    let lengths = Lengths {
        all: array_lengths(json),
        next: Cell::new(0),
    };
    // Valid UTF-8 (always, from an API server): checked once here, faster than string by
    // string as serde_json does on bytes; otherwise serde_json reports where it is not.
    match std::str::from_utf8(json) {
        Ok(text) => decode(serde_json::Deserializer::from_str(text), &lengths),
        Err(_) => decode(serde_json::Deserializer::from_slice(json), &lengths),
    }
}

/// The simd-json path of [`from_slice`].
mod simd {
    use std::cell::RefCell;

    use serde::de::DeserializeOwned;

    /// A decode thread's scratch space, kept between decodes so that simd-json allocates
    /// nothing of its own per object: the copy of the input (simd-json rewrites its input in
    /// place) and its tape and string buffers.
    struct Scratch {
        input: Vec<u8>,
        buffers: simd_json::Buffers,
    }

    /// Scratch space above this is given back after the decode rather than kept for the
    /// thread's next one (objects are a few KB; a rare large one should not pin its size).
    const KEEP: usize = 1 << 20;

    thread_local! {
        static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
    }

    /// `json` decoded by simd-json, or `None` when simd-json refuses it (the caller decodes
    /// it again with serde_json, whose answer stands) or the scratch space is in use (a
    /// `Deserialize` impl that decodes JSON itself, on the same thread).
    pub(super) fn from_slice<T: DeserializeOwned>(json: &[u8]) -> Option<T> {
        SCRATCH
            .try_with(|cell| {
                let mut slot = cell.try_borrow_mut().ok()?;
                let scratch = slot.get_or_insert_with(|| Scratch {
                    input: Vec::new(),
                    buffers: simd_json::Buffers::new(json.len()),
                });
                scratch.input.clear();
                scratch.input.extend_from_slice(json);
                let value = simd_json::serde::from_slice_with_buffers::<T>(
                    &mut scratch.input,
                    &mut scratch.buffers,
                )
                .ok();
                if scratch.input.capacity() > KEEP {
                    *slot = None;
                }
                value
            })
            .ok()
            .flatten()
    }
}

fn decode<'de, R: serde_json::de::Read<'de>, T: DeserializeOwned>(
    mut de: serde_json::Deserializer<R>,
    lengths: &Lengths,
) -> serde_json::Result<T> {
    let value = T::deserialize(Hinted {
        de: &mut de,
        lengths,
    })?;
    de.end()?;
    Ok(value)
}

/// The length of every array of `json`, in the order of their opening brackets. Tolerant:
/// malformed input gives wrong or missing lengths, never a panic.
fn array_lengths(json: &[u8]) -> Vec<u32> {
    /// An open array: its index in the output, the commas seen at its level, whether it has
    /// an element.
    struct Open {
        at: usize,
        commas: u32,
        any: bool,
    }
    let mut out = Vec::new();
    // One entry per open bracket: Some for arrays, None for objects.
    let mut stack: Vec<Option<Open>> = Vec::new();
    let mut i = 0;
    while let Some(&b) = json.get(i) {
        match b {
            b'"' => {
                if let Some(Some(a)) = stack.last_mut() {
                    a.any = true;
                }
                // Skip the string: to the next quote not escaped (most of a document's
                // bytes are in strings: jump with memchr).
                i += 1;
                while let Some(at) = json
                    .get(i..)
                    .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
                {
                    i += at;
                    if json[i] == b'"' {
                        break;
                    }
                    i += 2;
                }
                if i >= json.len() {
                    break;
                }
            }
            b'[' => {
                if let Some(Some(a)) = stack.last_mut() {
                    a.any = true;
                }
                stack.push(Some(Open {
                    at: out.len(),
                    commas: 0,
                    any: false,
                }));
                out.push(0);
            }
            b'{' => {
                if let Some(Some(a)) = stack.last_mut() {
                    a.any = true;
                }
                stack.push(None);
            }
            b']' | b'}' => {
                if let Some(Some(a)) = stack.pop()
                    && let Some(len) = out.get_mut(a.at)
                {
                    *len = a.commas + u32::from(a.any);
                }
            }
            b',' => {
                if let Some(Some(a)) = stack.last_mut() {
                    a.commas += 1;
                }
            }
            b' ' | b'\n' | b'\r' | b'\t' | b':' => {}
            _ => {
                if let Some(Some(a)) = stack.last_mut() {
                    a.any = true;
                }
            }
        }
        i += 1;
    }
    out
}

/// The scanned lengths and the next one to hand out (arrays are met in document order).
struct Lengths {
    all: Vec<u32>,
    next: Cell<usize>,
}

impl Lengths {
    fn take(&self) -> Option<usize> {
        let i = self.next.get();
        self.next.set(i + 1);
        self.all.get(i).map(|&n| n as usize)
    }
}

/// A deserializer that hands each sequence its scanned length; everything else passes through.
struct Hinted<'l, D> {
    de: D,
    lengths: &'l Lengths,
}

/// A visitor wrapped so that the values it is handed are [`Hinted`] in turn.
struct Wrap<'l, V> {
    visitor: V,
    lengths: &'l Lengths,
}

struct Seed<'l, S> {
    seed: S,
    lengths: &'l Lengths,
}

struct Seq<'l, A> {
    seq: A,
    remaining: Option<usize>,
    lengths: &'l Lengths,
}

struct Map<'l, A> {
    map: A,
    lengths: &'l Lengths,
}

struct Enum<'l, A> {
    data: A,
    lengths: &'l Lengths,
}

impl<'l, V> Wrap<'l, V> {
    fn new(visitor: V, lengths: &'l Lengths) -> Self {
        Wrap { visitor, lengths }
    }
}

macro_rules! forward {
    ($($method:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                self.de.$method(Wrap::new(visitor, self.lengths))
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Hinted<'_, D> {
    type Error = D::Error;

    forward! {
        deserialize_any, deserialize_bool, deserialize_i8, deserialize_i16, deserialize_i32,
        deserialize_i64, deserialize_i128, deserialize_u8, deserialize_u16, deserialize_u32,
        deserialize_u64, deserialize_u128, deserialize_f32, deserialize_f64, deserialize_char,
        deserialize_str, deserialize_string, deserialize_bytes, deserialize_byte_buf,
        deserialize_option, deserialize_unit, deserialize_seq, deserialize_map,
        deserialize_identifier,
    }

    /// Skipped values are walked, not skipped by serde_json: the arrays inside them take
    /// their lengths too, so the ones after them get theirs.
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.de.deserialize_any(Wrap::new(visitor, self.lengths))
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_unit_struct(name, Wrap::new(visitor, self.lengths))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_newtype_struct(name, Wrap::new(visitor, self.lengths))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_tuple(len, Wrap::new(visitor, self.lengths))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_tuple_struct(name, len, Wrap::new(visitor, self.lengths))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_struct(name, fields, Wrap::new(visitor, self.lengths))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_enum(name, variants, Wrap::new(visitor, self.lengths))
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

macro_rules! pass {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(
            fn $method<E: serde::de::Error>(self, v: $ty) -> Result<Self::Value, E> {
                self.visitor.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    pass! {
        visit_bool: bool, visit_i8: i8, visit_i16: i16, visit_i32: i32, visit_i64: i64,
        visit_i128: i128, visit_u8: u8, visit_u16: u16, visit_u32: u32, visit_u64: u64,
        visit_u128: u128, visit_f32: f32, visit_f64: f64, visit_char: char, visit_str: &str,
        visit_borrowed_str: &'de str, visit_string: String, visit_bytes: &[u8],
        visit_borrowed_bytes: &'de [u8], visit_byte_buf: Vec<u8>,
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.visitor.visit_none()
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.visitor.visit_unit()
    }

    fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
        self.visitor.visit_some(Hinted {
            de: d,
            lengths: self.lengths,
        })
    }

    fn visit_newtype_struct<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
        self.visitor.visit_newtype_struct(Hinted {
            de: d,
            lengths: self.lengths,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let remaining = self.lengths.take();
        self.visitor.visit_seq(Seq {
            seq,
            remaining,
            lengths: self.lengths,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.visitor.visit_map(Map {
            map,
            lengths: self.lengths,
        })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.visitor.visit_enum(Enum {
            data,
            lengths: self.lengths,
        })
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<'_, S> {
    type Value = S::Value;

    fn deserialize<D2: Deserializer<'de>>(self, d: D2) -> Result<S::Value, D2::Error> {
        self.seed.deserialize(Hinted {
            de: d,
            lengths: self.lengths,
        })
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Seq<'_, A> {
    type Error = A::Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        let next = self.seq.next_element_seed(Seed {
            seed,
            lengths: self.lengths,
        })?;
        if next.is_some() {
            self.remaining = self.remaining.map(|n| n.saturating_sub(1));
        }
        Ok(next)
    }

    fn size_hint(&self) -> Option<usize> {
        self.remaining.or_else(|| self.seq.size_hint())
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Map<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.map.next_key_seed(Seed {
            seed,
            lengths: self.lengths,
        })
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.map.next_value_seed(Seed {
            seed,
            lengths: self.lengths,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

impl<'de, 'l, A: EnumAccess<'de>> EnumAccess<'de> for Enum<'l, A> {
    type Error = A::Error;
    type Variant = Enum<'l, A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), A::Error> {
        let lengths = self.lengths;
        let (value, variant) = self.data.variant_seed(Seed { seed, lengths })?;
        Ok((
            value,
            Enum {
                data: variant,
                lengths,
            },
        ))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Enum<'_, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.data.unit_variant()
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        self.data.newtype_variant_seed(Seed {
            seed,
            lengths: self.lengths,
        })
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.data
            .tuple_variant(len, Wrap::new(visitor, self.lengths))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.data
            .struct_variant(fields, Wrap::new(visitor, self.lengths))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::Pod;
    use proptest::prelude::*;
    use serde::{Deserialize, Serialize};

    use super::*;

    #[test]
    fn array_lengths_in_document_order() {
        assert_eq!(
            array_lengths(br#"{"a":[1,[2,3],[]],"b":["x,]","y\"]"],"c":{"d":[{}]}}"#),
            [3, 2, 0, 2, 1]
        );
        // Malformed input: wrong lengths at worst, never a panic.
        for bad in [&b"]]]"[..], b"[[[", b"\"\\", b"[\"", b"{,}"] {
            let _ = array_lengths(bad);
        }
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Doc {
        ints: Vec<u32>,
        nested: Vec<Vec<String>>,
        #[serde(default)]
        maybe: Option<Vec<Inner>>,
        map: BTreeMap<String, Vec<bool>>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Inner {
        Unit,
        Tuple(u8, Vec<u8>),
        Struct { v: Vec<i64> },
    }

    #[test]
    fn vectors_are_allocated_at_their_exact_size() {
        let json = br#"{"skipped":{"x":[1,2,[3]]},"ints":[1,2,3,4,5],
            "nested":[["a"],["b","c","d","e","f"]],"maybe":[{"Struct":{"v":[1]}},{"Tuple":[1,[2,3]]},"Unit"],
            "map":{"k":[true]}}"#;
        let d: Doc = from_slice(json).expect("decodes");
        let plain: Doc = serde_json::from_slice(json).expect("decodes");
        assert_eq!(d, plain);
        assert_eq!(d.ints.capacity(), 5);
        assert_eq!(d.nested[0].capacity(), 1);
        assert_eq!(d.nested[1].capacity(), 5);
        assert_eq!(d.maybe.as_ref().map(Vec::capacity), Some(3));
        match &d.maybe.as_ref().unwrap()[0] {
            Inner::Struct { v } => assert_eq!(v.capacity(), 1),
            other => panic!("{other:?}"),
        }
        assert_eq!(d.map["k"].capacity(), 1);
        assert!(plain.ints.capacity() > 5, "serde_json alone over-allocates");
        // The serde_json path (what simd-json refuses) sizes the same vectors exactly.
        let fallback: Doc = from_slice_serde_json(json).expect("decodes");
        assert_eq!(fallback, plain);
        assert_eq!(fallback.ints.capacity(), 5);
        assert_eq!(fallback.nested[1].capacity(), 5);
    }

    #[test]
    fn a_pod_decodes_equal_and_smaller() {
        let json = serde_json::json!({
            "metadata": {"name": "p", "ownerReferences": [{"apiVersion": "v1", "kind": "K",
                "name": "n", "uid": "u"}]},
            "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"},
                {"name": "B", "value": "2"}], "ports": [{"containerPort": 80}]}]},
            "status": {"podIPs": [{"ip": "10.0.0.1"}]}
        })
        .to_string();
        let exact: Pod = from_slice(json.as_bytes()).expect("decodes");
        let plain: Pod = serde_json::from_slice(json.as_bytes()).expect("decodes");
        assert_eq!(exact, plain);
        let c = &exact.spec.as_ref().unwrap().containers[0];
        assert_eq!(c.env.as_ref().map(Vec::capacity), Some(2));
        assert_eq!(c.ports.as_ref().map(Vec::capacity), Some(1));
        assert_eq!(
            exact.metadata.owner_references.as_ref().map(Vec::capacity),
            Some(1)
        );
    }

    #[test]
    fn simd_json_reads_a_pod_with_exact_vectors() {
        let json = serde_json::json!({
            "metadata": {"name": "p", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"},
                {"name": "B", "value": "2"}], "ports": [{"containerPort": 80}]}]},
            "status": {"podIPs": [{"ip": "10.0.0.1"}], "startTime": "2025-01-01T00:00:00Z"}
        })
        .to_string();
        let simd: Pod = simd::from_slice(json.as_bytes()).expect("simd-json reads it");
        let plain: Pod = serde_json::from_slice(json.as_bytes()).expect("decodes");
        assert_eq!(simd, plain);
        let c = &simd.spec.as_ref().unwrap().containers[0];
        assert_eq!(c.env.as_ref().map(Vec::capacity), Some(2));
        // Refused by simd-json: the caller's serde_json decode gives the error.
        assert!(simd::from_slice::<Pod>(b"{\"metadata\":").is_none());
        assert!(from_slice::<Pod>(b"{\"metadata\":").unwrap_err().is_eof());
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i32>().prop_map(serde_json::Value::from),
            "[a-z\"\\\\,\\[\\]{}:]{0,6}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::from),
                prop::collection::btree_map("[a-z]{1,3}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any document decodes to what serde_json gives, as a `Value` (which walks every
        /// array) and as a skipped value; mutated documents fail as serde_json fails.
        #[test]
        fn same_result_as_serde_json(v in json_value(), cut in any::<prop::sample::Index>()) {
            let json = serde_json::to_vec(&v).unwrap();
            let exact: serde_json::Value = from_slice(&json).unwrap();
            prop_assert_eq!(&exact, &v);
            let fallback: serde_json::Value = from_slice_serde_json(&json).unwrap();
            prop_assert_eq!(&fallback, &v);
            let _: serde::de::IgnoredAny = from_slice(&json).unwrap();
            let cut = &json[..cut.index(json.len() + 1)];
            let a = from_slice::<serde_json::Value>(cut).map_err(|e| e.classify());
            let b = serde_json::from_slice::<serde_json::Value>(cut).map_err(|e| e.classify());
            prop_assert_eq!(a, b);
        }
    }
}
