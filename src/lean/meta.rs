//! The metadata a lean object keeps parsed (docs/semantics.md I7): what admission, keys,
//! indexes, label selection and owner mapping read, parsed once from the server's JSON without
//! building the typed object, and kept in two allocations per object.
//!
//! The parse also finds `metadata.managedFields`, so that it can be cut out of the bytes that
//! are kept ([`strip_managed_fields`]) without re-serialising the object.

use std::{borrow::Cow, fmt};

use serde::{
    Deserialize, Deserializer,
    de::{MapAccess, Visitor, value::MapAccessDeserializer},
};
use serde_json::value::RawValue;

/// Why an object's metadata could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    /// The bytes are not a JSON object with a well-formed `metadata` (the message says where).
    #[error("not an object with well-formed metadata: {0}")]
    Json(String),
    /// The bytes are not a protobuf object message with well-formed metadata (lean objects
    /// stored as protobuf, I7).
    #[error("not a protobuf object with well-formed metadata: {0}")]
    Protobuf(#[from] crate::protobuf::ProtobufError),
    /// The metadata's strings add up to more than 4 GiB (no API server sends such an object).
    #[error("metadata too large to index")]
    TooLarge,
}

/// The fixed string fields, in their order in [`CompactMeta`]'s text.
const NAME: usize = 0;
const NAMESPACE: usize = 1;
const UID: usize = 2;
const RESOURCE_VERSION: usize = 3;
const CREATION: usize = 4;
const DELETION: usize = 5;
const API_VERSION: usize = 6;
const KIND: usize = 7;
const FIXED: usize = 8;
/// Strings per owner reference: apiVersion, kind, name, uid.
const OWNER_STRINGS: usize = 4;
/// Table entries before the string ends: the label count and the owner count.
const HEADER: usize = 2;

const CONTROLLER_SET: u32 = 1;
const CONTROLLER: u32 = 2;
const BLOCK_SET: u32 = 4;
const BLOCK: u32 = 8;

/// An object's metadata as the lean mode keeps it: name, namespace, uid, resourceVersion,
/// creation and deletion timestamps, `apiVersion`/`kind`, labels and owner references.
///
/// Compact by construction: every string lives in one text buffer and a small table of offsets
/// says where each ends (two allocations for the lot; a k8s-openapi `ObjectMeta` alone is 360
/// bytes before its strings, maps and vectors). An absent field and an empty one read the
/// same (`None`), as they mean the same to the API server.
///
/// Read it through [`LazyObject`](crate::lean::LazyObject)'s accessors, which also serve
/// typed objects.
#[derive(Clone, PartialEq, Eq)]
pub struct CompactMeta {
    text: Box<str>,
    /// `[labels, owners, end of each string (FIXED + 2 × labels + 4 × owners), owner flags]`.
    table: Box<[u32]>,
}

impl fmt::Debug for CompactMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompactMeta")
            .field("name", &self.name())
            .field("namespace", &self.namespace())
            .field("resource_version", &self.resource_version())
            .field("labels", &self.labels().collect::<Vec<_>>())
            .field("owners", &self.owner_references().count())
            .finish_non_exhaustive()
    }
}

impl CompactMeta {
    fn count(&self, i: usize) -> usize {
        self.table.get(i).map_or(0, |&n| n as usize)
    }

    fn label_count(&self) -> usize {
        self.count(0)
    }

    fn owner_count(&self) -> usize {
        self.count(1)
    }

    /// String `s` (in text order); empty when out of range.
    fn string(&self, s: usize) -> &str {
        let end = self.table.get(HEADER + s).map_or(0, |&e| e as usize);
        let start = match s {
            0 => 0,
            _ => self.table.get(HEADER + s - 1).map_or(0, |&e| e as usize),
        };
        self.text.get(start..end).unwrap_or("")
    }

    fn optional(&self, s: usize) -> Option<&str> {
        Some(self.string(s)).filter(|v| !v.is_empty())
    }

    /// `metadata.name`.
    pub fn name(&self) -> Option<&str> {
        self.optional(NAME)
    }

    /// `metadata.namespace`; None for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&str> {
        self.optional(NAMESPACE)
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Option<&str> {
        self.optional(UID)
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        self.optional(RESOURCE_VERSION)
    }

    /// `metadata.creationTimestamp`, as the server wrote it (RFC 3339).
    pub fn creation_timestamp(&self) -> Option<&str> {
        self.optional(CREATION)
    }

    /// `metadata.deletionTimestamp`, as the server wrote it: set once deletion started.
    pub fn deletion_timestamp(&self) -> Option<&str> {
        self.optional(DELETION)
    }

    /// The object's `apiVersion`, when it carries one (list items usually do not).
    pub fn api_version(&self) -> Option<&str> {
        self.optional(API_VERSION)
    }

    /// The object's `kind`, when it carries one (list items usually do not).
    pub fn kind(&self) -> Option<&str> {
        self.optional(KIND)
    }

    /// The labels, sorted by key (a key given twice keeps its last value, as a map would).
    pub fn labels(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        (0..self.label_count())
            .map(move |i| (self.string(FIXED + 2 * i), self.string(FIXED + 2 * i + 1)))
    }

    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        let (mut lo, mut hi) = (0, self.label_count());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.string(FIXED + 2 * mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(self.string(FIXED + 2 * mid + 1)),
            }
        }
        None
    }

    /// The owner references, in the object's order.
    pub fn owner_references(&self) -> impl ExactSizeIterator<Item = OwnerRef<'_>> + '_ {
        let first = FIXED + 2 * self.label_count();
        let flags_at = HEADER + first + OWNER_STRINGS * self.owner_count();
        (0..self.owner_count()).map(move |i| {
            let s = first + OWNER_STRINGS * i;
            let flags = self.table.get(flags_at + i).copied().unwrap_or(0);
            OwnerRef {
                api_version: self.string(s),
                kind: self.string(s + 1),
                name: self.string(s + 2),
                uid: self.string(s + 3),
                controller: (flags & CONTROLLER_SET != 0).then_some(flags & CONTROLLER != 0),
                block_owner_deletion: (flags & BLOCK_SET != 0).then_some(flags & BLOCK != 0),
            }
        })
    }

    /// Heap bytes this metadata holds (its text and its table), for the store's accounting.
    pub fn heap_bytes(&self) -> usize {
        self.text.len() + self.table.len() * std::mem::size_of::<u32>()
    }
}

/// One owner reference of a lean object, borrowed from its [`CompactMeta`] (or built from a
/// typed object's `ownerReferences`): the protobuf reader's type, one for both encodings.
pub use crate::protobuf::OwnerRef;

/// What [`parse`] found besides the metadata.
pub(crate) struct Parsed {
    pub(crate) meta: CompactMeta,
    /// The byte range of `"managedFields":<value>` to cut out, with one adjacent comma, when
    /// the object has managed fields; None when it has none, or when they could not be located
    /// in the text (then [`strip_managed_fields`] re-serialises).
    pub(crate) managed_fields: Option<ManagedFields>,
}

/// Where `metadata.managedFields` is in the object's bytes.
pub(crate) enum ManagedFields {
    /// The range to remove (key, value and one separating comma).
    At(std::ops::Range<usize>),
    /// Present, but not where a byte cut can take it out safely.
    Elsewhere,
}

#[derive(Deserialize)]
struct TopIn<'a> {
    #[serde(rename = "apiVersion", default, borrow)]
    api_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    metadata: Option<MapOnly<MetaIn<'a>>>,
}

/// A struct read from a JSON object only (serde's derive also takes an array of the fields
/// in order; k8s-openapi's types, like the API, do not).
struct MapOnly<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for MapOnly<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData)).map(MapOnly)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaIn<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    namespace: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    uid: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    resource_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    creation_timestamp: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    deletion_timestamp: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    labels: Option<LabelsIn<'a>>,
    #[serde(default, borrow)]
    owner_references: Option<Vec<MapOnly<OwnerIn<'a>>>>,
    #[serde(default, borrow)]
    managed_fields: Option<&'a RawValue>,
}

/// `ownerReferences[]`: the API requires the four strings, but k8s-openapi reads a missing one
/// as empty, and so does this (an object the typed mode caches is cached here too).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OwnerIn<'a> {
    #[serde(default, borrow)]
    api_version: Cow<'a, str>,
    #[serde(default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    uid: Cow<'a, str>,
    #[serde(default)]
    controller: Option<bool>,
    #[serde(default)]
    block_owner_deletion: Option<bool>,
}

/// `labels`: a map of strings, read into a vector (sorted later).
struct LabelsIn<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'de: 'a, 'a> Deserialize<'de> for LabelsIn<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = LabelsIn<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(k) = map.next_key::<Borrowed<'a>>()? {
                    let v: Borrowed<'a> = map.next_value()?;
                    out.push((k.0, v.0));
                }
                Ok(LabelsIn(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// A string borrowed from the input when it has no escapes.
struct Borrowed<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Borrowed<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct W<'a>(#[serde(borrow)] Cow<'a, str>);
        W::deserialize(d).map(|w| Borrowed(w.0))
    }
}

/// Parses the metadata of one object from its JSON bytes: a scan of the whole object, but no
/// typed object and no allocation beyond the compact result (strings with escapes aside).
///
/// # Errors
/// [`MetaError::Json`] when `json` is not an object or its `metadata`, `apiVersion` or `kind`
/// have the wrong shape (labels not strings, an owner reference without a uid, ...).
pub(crate) fn parse(json: &[u8]) -> Result<Parsed, MetaError> {
    let MapOnly(top): MapOnly<TopIn<'_>> =
        serde_json::from_slice(json).map_err(|e| MetaError::Json(e.to_string()))?;
    let meta_in = top.metadata.map(|m| m.0);
    let managed_fields = meta_in
        .as_ref()
        .and_then(|m| m.managed_fields)
        .filter(|raw| raw.get() != "null")
        .map(|raw| locate_field(json, raw.get(), "managedFields"));
    let m = meta_in.as_ref();
    let labels: Vec<(&str, &str)> = m
        .and_then(|m| m.labels.as_ref())
        .map(|l| l.0.iter().map(|(k, v)| (&**k, &**v)).collect())
        .unwrap_or_default();
    let owners = m.and_then(|m| m.owner_references.as_deref()).unwrap_or(&[]);
    let meta = build(
        [
            m.and_then(|m| m.name.as_deref()),
            m.and_then(|m| m.namespace.as_deref()),
            m.and_then(|m| m.uid.as_deref()),
            m.and_then(|m| m.resource_version.as_deref()),
            m.and_then(|m| m.creation_timestamp.as_deref()),
            m.and_then(|m| m.deletion_timestamp.as_deref()),
            top.api_version.as_deref(),
            top.kind.as_deref(),
        ],
        labels,
        owners.iter().map(|MapOnly(o)| OwnerRef {
            api_version: &o.api_version,
            kind: &o.kind,
            name: &o.name,
            uid: &o.uid,
            controller: o.controller,
            block_owner_deletion: o.block_owner_deletion,
        }),
    )?;
    Ok(Parsed {
        meta,
        managed_fields,
    })
}

/// Parses the metadata of one object from its protobuf message (no envelope: a list item, or
/// an envelope's `raw`; `types`: the envelope's apiVersion and kind, which the object's JSON
/// would carry): only the message's top-level keys and its `metadata` field are read. Gives the
/// [`CompactMeta`] the object's JSON gives, and whether it has `managedFields`.
///
/// # Errors
/// [`MetaError::Protobuf`] when the message or its metadata is malformed or truncated.
pub(crate) fn parse_protobuf<'a>(
    message: &'a [u8],
    types: Option<(&'a str, &'a str)>,
) -> Result<(CompactMeta, bool), MetaError> {
    let crate::protobuf::MetaView {
        name,
        namespace,
        uid,
        resource_version,
        creation_timestamp,
        deletion_timestamp,
        labels,
        owner_references,
        managed_fields,
    } = crate::protobuf::object_meta(message)?;
    let some = |s: &'a str| Some(s).filter(|s| !s.is_empty());
    let owners = owner_references.iter().map(|o| OwnerRef {
        api_version: o.api_version,
        kind: o.kind,
        name: o.name,
        uid: o.uid,
        controller: o.controller,
        block_owner_deletion: o.block_owner_deletion,
    });
    let meta = build(
        [
            some(name),
            some(namespace),
            some(uid),
            some(resource_version),
            creation_timestamp.as_deref(),
            deletion_timestamp.as_deref(),
            types.map(|t| t.0),
            types.map(|t| t.1),
        ],
        labels,
        owners,
    )?;
    Ok((meta, managed_fields))
}

/// The compact form of the fixed strings (in [`CompactMeta`]'s text order), the labels (in
/// the object's order; sorted here, a repeated key keeping its last value, as a map would)
/// and the owner references.
fn build<'s>(
    fixed: [Option<&'s str>; FIXED],
    mut labels: Vec<(&'s str, &'s str)>,
    owners: impl ExactSizeIterator<Item = OwnerRef<'s>>,
) -> Result<CompactMeta, MetaError> {
    let mut b = Builder::default();
    for s in fixed {
        b.push(s);
    }
    // Sorted for binary search; a repeated key keeps its last value, as a map would.
    labels.reverse();
    labels.sort_by(|a, b| a.0.cmp(b.0));
    labels.dedup_by(|a, b| a.0 == b.0);
    for (k, v) in &labels {
        b.push(Some(k));
        b.push(Some(v));
    }
    let mut flags = Vec::with_capacity(owners.len());
    for o in owners {
        b.push(Some(o.api_version));
        b.push(Some(o.kind));
        b.push(Some(o.name));
        b.push(Some(o.uid));
        let mut f = 0;
        if let Some(c) = o.controller {
            f |= CONTROLLER_SET | if c { CONTROLLER } else { 0 };
        }
        if let Some(bod) = o.block_owner_deletion {
            f |= BLOCK_SET | if bod { BLOCK } else { 0 };
        }
        flags.push(f);
    }
    b.finish(labels.len(), &flags)
}

#[derive(Default)]
struct Builder {
    text: String,
    ends: Vec<usize>,
}

impl Builder {
    fn push(&mut self, s: Option<&str>) {
        self.text.push_str(s.unwrap_or(""));
        self.ends.push(self.text.len());
    }

    fn finish(self, labels: usize, flags: &[u32]) -> Result<CompactMeta, MetaError> {
        let small = |n: usize| u32::try_from(n).map_err(|_| MetaError::TooLarge);
        let mut table = Vec::with_capacity(HEADER + self.ends.len() + flags.len());
        table.push(small(labels)?);
        table.push(small(flags.len())?);
        for e in self.ends {
            table.push(small(e)?);
        }
        table.extend_from_slice(flags);
        Ok(CompactMeta {
            text: self.text.into_boxed_str(),
            table: table.into_boxed_slice(),
        })
    }
}

/// The range of `"<key>":<value>` and one separating comma in `json`, where `value` is a slice
/// of `json` (a borrowed raw value). [`ManagedFields::Elsewhere`] when the text around it is
/// not the plain `"key":value` an API server writes (escaped key, comments, ...).
fn locate_field(json: &[u8], value: &str, key: &str) -> ManagedFields {
    let located = (|| {
        // The value is borrowed from `json`: its address says where it is.
        let start = (value.as_ptr() as usize).checked_sub(json.as_ptr() as usize)?;
        let end = start.checked_add(value.len())?;
        if json.get(start..end)? != value.as_bytes() {
            return None;
        }
        let mut k = skip_ws_back(json, start);
        if k == 0 || json[k - 1] != b':' {
            return None;
        }
        k = skip_ws_back(json, k - 1);
        let quoted_len = key.len() + 2;
        let key_start = k.checked_sub(quoted_len)?;
        let quoted = json.get(key_start..k)?;
        if quoted.first() != Some(&b'"')
            || quoted.last() != Some(&b'"')
            || &quoted[1..quoted.len() - 1] != key.as_bytes()
        {
            return None;
        }
        let before = skip_ws_back(json, key_start);
        match json.get(before.checked_sub(1)?)? {
            // `,"key":value`: take the comma before it (and the blanks before the comma).
            b',' => Some(skip_ws_back(json, before - 1)..end),
            // `{"key":value` then `,` or `}`.
            b'{' => {
                let after = skip_ws(json, end);
                match json.get(after)? {
                    b',' => Some(key_start..after + 1),
                    b'}' => Some(key_start..end),
                    _ => None,
                }
            }
            _ => None,
        }
    })();
    match located {
        Some(r) => ManagedFields::At(r),
        None => ManagedFields::Elsewhere,
    }
}

fn skip_ws_back(json: &[u8], mut i: usize) -> usize {
    while i > 0 && json[i - 1].is_ascii_whitespace() {
        i -= 1;
    }
    i
}

fn skip_ws(json: &[u8], mut i: usize) -> usize {
    while json.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// `json` without `metadata.managedFields`: cut out of the bytes when [`parse`] located it,
/// else re-serialised through `serde_json::Value` (same JSON, without the field).
///
/// # Errors
/// [`MetaError::Json`] when the fallback cannot parse `json`.
pub(crate) fn strip_managed_fields<'a>(
    json: &'a [u8],
    at: &Option<ManagedFields>,
) -> Result<Cow<'a, [u8]>, MetaError> {
    match at {
        None => Ok(Cow::Borrowed(json)),
        Some(ManagedFields::At(range)) => {
            let mut out = Vec::with_capacity(json.len() - range.len());
            out.extend_from_slice(&json[..range.start]);
            out.extend_from_slice(&json[range.end..]);
            Ok(Cow::Owned(out))
        }
        Some(ManagedFields::Elsewhere) => {
            let mut v: serde_json::Value =
                serde_json::from_slice(json).map_err(|e| MetaError::Json(e.to_string()))?;
            if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                m.remove("managedFields");
            }
            serde_json::to_vec(&v)
                .map(Cow::Owned)
                .map_err(|e| MetaError::Json(e.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(json: &str) -> CompactMeta {
        parse(json.as_bytes()).expect("parses").meta
    }

    #[test]
    fn i7_meta_parse_reads_every_kept_field() {
        let m = meta(
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"demo",
            "uid":"u-1","resourceVersion":"42","creationTimestamp":"2025-01-01T00:00:00Z",
            "deletionTimestamp":"2025-01-02T00:00:00Z","labels":{"b":"2","a":"1"},
            "annotations":{"x":"y"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet",
            "name":"web-abc","uid":"rs-1","controller":true},{"apiVersion":"v1","kind":"Node",
            "name":"n","uid":"n-1","blockOwnerDeletion":false}]},"spec":{"containers":[]}}"#,
        );
        assert_eq!(m.name(), Some("web-0"));
        assert_eq!(m.namespace(), Some("demo"));
        assert_eq!(m.uid(), Some("u-1"));
        assert_eq!(m.resource_version(), Some("42"));
        assert_eq!(m.creation_timestamp(), Some("2025-01-01T00:00:00Z"));
        assert_eq!(m.deletion_timestamp(), Some("2025-01-02T00:00:00Z"));
        assert_eq!(m.api_version(), Some("v1"));
        assert_eq!(m.kind(), Some("Pod"));
        assert_eq!(m.labels().collect::<Vec<_>>(), [("a", "1"), ("b", "2")]);
        assert_eq!(m.label("b"), Some("2"));
        assert_eq!(m.label("c"), None);
        let owners: Vec<_> = m.owner_references().collect();
        assert_eq!(owners.len(), 2);
        assert_eq!(owners[0].name, "web-abc");
        assert_eq!(owners[0].controller, Some(true));
        assert_eq!(owners[0].block_owner_deletion, None);
        assert_eq!(owners[1].kind, "Node");
        assert_eq!(owners[1].controller, None);
        assert_eq!(owners[1].block_owner_deletion, Some(false));
    }

    #[test]
    fn i7_meta_parse_handles_absent_null_and_escaped_fields() {
        let m = meta(r#"{"metadata":{"name":"a\"b","labels":null,"ownerReferences":null}}"#);
        assert_eq!(m.name(), Some("a\"b"));
        assert_eq!(m.namespace(), None);
        assert_eq!(m.labels().count(), 0);
        assert_eq!(m.owner_references().count(), 0);
        let empty = meta("{}");
        assert_eq!(empty.name(), None);
        // A repeated label key keeps its last value, as the typed map does.
        let dup = meta(r#"{"metadata":{"labels":{"k":"1","k":"2"}}}"#);
        assert_eq!(dup.labels().collect::<Vec<_>>(), [("k", "2")]);
    }

    #[test]
    fn i7_meta_parse_rejects_malformed_metadata() {
        for bad in [
            "[]",
            "not json",
            r#"{"metadata":{"name":5}}"#,
            r#"{"metadata":{"labels":{"a":1}}}"#,
            r#"{"metadata":{"ownerReferences":[{"kind":5,"name":"n","uid":"u"}]}}"#,
            r#"{"kind":7}"#,
            r#"{"metadata":[]}"#,
            r#"{"metadata":{"ownerReferences":[["v1","Node","n","u"]]}}"#,
            "null",
        ] {
            assert!(
                matches!(parse(bad.as_bytes()), Err(MetaError::Json(_))),
                "{bad}"
            );
        }
    }

    fn stripped(json: &str) -> String {
        let p = parse(json.as_bytes()).expect("parses");
        let out = strip_managed_fields(json.as_bytes(), &p.managed_fields).expect("strips");
        String::from_utf8(out.into_owned()).expect("utf-8")
    }

    #[test]
    fn i7_managed_fields_are_cut_out_of_the_bytes() {
        let mf = r#"[{"manager":"m","fieldsV1":{"f:a":{}}}]"#;
        for (json, want) in [
            (
                format!(r#"{{"metadata":{{"name":"a","managedFields":{mf},"uid":"u"}},"x":1}}"#),
                r#"{"metadata":{"name":"a","uid":"u"},"x":1}"#,
            ),
            (
                format!(r#"{{"metadata":{{"managedFields":{mf},"name":"a"}}}}"#),
                r#"{"metadata":{"name":"a"}}"#,
            ),
            (
                format!(r#"{{"metadata":{{"name":"a","managedFields":{mf}}}}}"#),
                r#"{"metadata":{"name":"a"}}"#,
            ),
            (
                format!(r#"{{"metadata":{{"managedFields":{mf}}}}}"#),
                r#"{"metadata":{}}"#,
            ),
            (
                format!(r#"{{ "metadata" : {{ "name" : "a" , "managedFields" : {mf} }} }}"#),
                r#"{ "metadata" : { "name" : "a" } }"#,
            ),
            // An escaped key is not cut: re-serialised without it instead.
            (
                format!(r#"{{"metadata":{{"name":"a","managed\u0046ields":{mf}}}}}"#),
                r#"{"metadata":{"name":"a"}}"#,
            ),
            (
                r#"{"metadata":{"name":"a"}}"#.to_string(),
                r#"{"metadata":{"name":"a"}}"#,
            ),
        ] {
            let out = stripped(&json);
            assert_eq!(out, want, "{json}");
            let v: serde_json::Value = serde_json::from_str(&out).expect("still JSON");
            assert!(v["metadata"].get("managedFields").is_none());
        }
    }

    #[test]
    fn i7_a_managed_fields_value_elsewhere_is_not_cut() {
        // The same text under another key must not be mistaken for the metadata's.
        let json = r#"{"spec":{"managedFields":[1]},"metadata":{"name":"a"}}"#;
        assert_eq!(stripped(json), json);
    }
}
