//! An object's `metadata` read from its protobuf message without decoding the object, and
//! `managedFields` cut out of the message's bytes (the lean cache mode's needs, I7).
//!
//! Every top-level Kubernetes object message has its `ObjectMeta` as field 1 (`metadata`);
//! only that field is read (the others are stepped over by their length prefixes). Numbers
//! are those of `k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto`, checked against the
//! schema tables by a test.

use std::ops::Range;

use prost::encoding::encode_varint;

use super::{
    ProtobufError,
    de::{timestamp, zero_time},
    wire::{Fields, Val, bytes, string, varint},
};

/// `metadata` in every top-level object message.
const METADATA: u32 = 1;
/// ObjectMeta's fields read here.
pub(crate) const NAME: u32 = 1;
pub(crate) const NAMESPACE: u32 = 3;
pub(crate) const UID: u32 = 5;
pub(crate) const RESOURCE_VERSION: u32 = 6;
pub(crate) const CREATION_TIMESTAMP: u32 = 8;
pub(crate) const DELETION_TIMESTAMP: u32 = 9;
pub(crate) const LABELS: u32 = 11;
pub(crate) const OWNER_REFERENCES: u32 = 13;
pub(crate) const MANAGED_FIELDS: u32 = 17;
/// OwnerReference's fields.
pub(crate) const OWNER_KIND: u32 = 1;
pub(crate) const OWNER_NAME: u32 = 3;
pub(crate) const OWNER_UID: u32 = 4;
pub(crate) const OWNER_API_VERSION: u32 = 5;
pub(crate) const OWNER_CONTROLLER: u32 = 6;
pub(crate) const OWNER_BLOCK: u32 = 7;

/// An object's `metadata`, borrowed from its message: the fields the lean mode keeps. Empty
/// strings stand for absent ones, as in Go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetaView<'a> {
    /// `name`.
    pub name: &'a str,
    /// `namespace`.
    pub namespace: &'a str,
    /// `uid`.
    pub uid: &'a str,
    /// `resourceVersion`.
    pub resource_version: &'a str,
    /// `creationTimestamp` as RFC 3339 (as the JSON writes it); None when zero or absent.
    pub creation_timestamp: Option<String>,
    /// `deletionTimestamp` as RFC 3339; None when absent.
    pub deletion_timestamp: Option<String>,
    /// `labels`, in wire order (a key given twice appears twice; the last one is the value).
    pub labels: Vec<(&'a str, &'a str)>,
    /// `ownerReferences`, in order.
    pub owner_references: Vec<OwnerRef<'a>>,
    /// Whether it has `managedFields`.
    pub managed_fields: bool,
}

/// One owner reference, borrowed: from a protobuf message's `metadata`, a lean object's
/// compact metadata (`kinformer::lean::CompactMeta::owner_references`), or a typed object's
/// `ownerReferences` (`From`). Empty strings stand for absent fields, as in Go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnerRef<'a> {
    /// The owner's `apiVersion`, e.g. `apps/v1`.
    pub api_version: &'a str,
    /// The owner's kind, e.g. `ReplicaSet`.
    pub kind: &'a str,
    /// The owner's name.
    pub name: &'a str,
    /// The owner's uid.
    pub uid: &'a str,
    /// `controller`: true for the managing controller; None when not set.
    pub controller: Option<bool>,
    /// `blockOwnerDeletion`; None when not set.
    pub block_owner_deletion: Option<bool>,
}

impl<'a> From<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> for OwnerRef<'a> {
    /// A typed object's owner reference, borrowed (e.g. to compare a typed object's owners
    /// with a lean object's).
    fn from(o: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference) -> Self {
        OwnerRef {
            api_version: &o.api_version,
            kind: &o.kind,
            name: &o.name,
            uid: &o.uid,
            controller: o.controller,
            block_owner_deletion: o.block_owner_deletion,
        }
    }
}

/// Reads the `metadata` (field 1) of one object's message (no envelope: a list item, or an
/// envelope's `raw`), without decoding the rest. A message without metadata gives the empty
/// view; one whose metadata occurs twice gives the last, as the decoder keeps it.
///
/// # Errors
/// [`ProtobufError::Wire`] for malformed or truncated bytes (in the message's top-level fields
/// or anywhere in its metadata), strings that are not UTF-8, values of the wrong wire type.
pub fn object_meta(message: &[u8]) -> Result<MetaView<'_>, ProtobufError> {
    let mut meta: Option<&[u8]> = None;
    for f in Fields::new(message) {
        if let (METADATA, v) = f? {
            meta = Some(bytes(v, "metadata")?);
        }
    }
    let mut out = MetaView::default();
    let Some(meta) = meta else {
        return Ok(out);
    };
    for f in Fields::new(meta) {
        match f? {
            (NAME, v) => out.name = string(v, "ObjectMeta.name")?,
            (NAMESPACE, v) => out.namespace = string(v, "ObjectMeta.namespace")?,
            (UID, v) => out.uid = string(v, "ObjectMeta.uid")?,
            (RESOURCE_VERSION, v) => {
                out.resource_version = string(v, "ObjectMeta.resourceVersion")?;
            }
            (CREATION_TIMESTAMP, v) => out.creation_timestamp = time(v)?,
            (DELETION_TIMESTAMP, v) => out.deletion_timestamp = time(v)?,
            (LABELS, v) => {
                let (mut key, mut value) = ("", "");
                for e in Fields::new(bytes(v, "ObjectMeta.labels")?) {
                    match e? {
                        (1, v) => key = string(v, "labels key")?,
                        (2, v) => value = string(v, "labels value")?,
                        _ => {}
                    }
                }
                out.labels.push((key, value));
            }
            (OWNER_REFERENCES, v) => {
                let mut o = OwnerRef::default();
                for e in Fields::new(bytes(v, "ObjectMeta.ownerReferences")?) {
                    match e? {
                        (OWNER_KIND, v) => o.kind = string(v, "OwnerReference.kind")?,
                        (OWNER_NAME, v) => o.name = string(v, "OwnerReference.name")?,
                        (OWNER_UID, v) => o.uid = string(v, "OwnerReference.uid")?,
                        (OWNER_API_VERSION, v) => {
                            o.api_version = string(v, "OwnerReference.apiVersion")?;
                        }
                        (OWNER_CONTROLLER, v) => {
                            o.controller = Some(varint(v, "OwnerReference.controller")? != 0);
                        }
                        (OWNER_BLOCK, v) => {
                            o.block_owner_deletion =
                                Some(varint(v, "OwnerReference.blockOwnerDeletion")? != 0);
                        }
                        _ => {}
                    }
                }
                out.owner_references.push(o);
            }
            (MANAGED_FIELDS, v) => {
                bytes(v, "ObjectMeta.managedFields")?;
                out.managed_fields = true;
            }
            _ => {}
        }
    }
    Ok(out)
}

/// A `metav1.Time` as its JSON says it: RFC 3339 in whole seconds, None when zero.
fn time(v: Val<'_>) -> Result<Option<String>, ProtobufError> {
    if zero_time(v) {
        return Ok(None);
    }
    let (secs, _) = timestamp(bytes(v, "Time")?)?;
    super::time::rfc3339(secs, None).map(Some)
}

/// Where each field's bytes (key, length and value) are in `buf`, by field.
fn spans(buf: &[u8]) -> impl Iterator<Item = Result<(u32, Range<usize>, Val<'_>), ProtobufError>> {
    let mut fields = Fields::new(buf);
    std::iter::from_fn(move || {
        let start = buf.len() - fields.buf.len();
        let f = fields.next()?;
        let end = buf.len() - fields.buf.len();
        Some(f.map(|(n, v)| (n, start..end, v)))
    })
}

/// `message` (one object's, no envelope) without `metadata.managedFields`: its occurrences
/// cut out of the metadata's bytes and the metadata's length prefix written again (fields are
/// tag-delimited, so nothing else changes). None when it has none (nothing to cut).
///
/// # Errors
/// [`ProtobufError::Wire`] for malformed bytes in the top-level fields or the metadata's.
pub fn strip_managed_fields(message: &[u8]) -> Result<Option<Vec<u8>>, ProtobufError> {
    let mut out: Option<Vec<u8>> = None;
    // Up to here `message` is copied to `out` as it is.
    let mut copied = 0;
    for f in spans(message) {
        let (n, span, v) = f?;
        if n != METADATA {
            continue;
        }
        let meta = bytes(v, "metadata")?;
        let mut cut = Vec::new();
        for g in spans(meta) {
            let (m, range, _) = g?;
            if m == MANAGED_FIELDS {
                cut.push(range);
            }
        }
        if cut.is_empty() {
            continue;
        }
        let kept = meta.len() - cut.iter().map(Range::len).sum::<usize>();
        let o = out.get_or_insert_with(|| Vec::with_capacity(message.len()));
        o.extend_from_slice(&message[copied..span.start]);
        // The key of field 1, length-delimited: one byte.
        o.push((METADATA << 3 | 2) as u8);
        encode_varint(kept as u64, o);
        let mut at = 0;
        for r in cut {
            o.extend_from_slice(&meta[at..r.start]);
            at = r.end;
        }
        o.extend_from_slice(&meta[at..]);
        copied = span.end;
    }
    Ok(out.map(|mut o| {
        o.extend_from_slice(&message[copied..]);
        o
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::protobuf::{
        Kind, decode_message, object_message,
        schema::{CORE_V1_POD, META_V1_OBJECT_META, META_V1_OWNER_REFERENCE},
    };

    #[test]
    fn field_numbers_are_the_schemas() {
        let meta = |n: u32| META_V1_OBJECT_META.field(n).map(|f| f.name);
        assert_eq!(meta(NAME), Some("name"));
        assert_eq!(meta(NAMESPACE), Some("namespace"));
        assert_eq!(meta(UID), Some("uid"));
        assert_eq!(meta(RESOURCE_VERSION), Some("resourceVersion"));
        assert_eq!(meta(CREATION_TIMESTAMP), Some("creationTimestamp"));
        assert_eq!(meta(DELETION_TIMESTAMP), Some("deletionTimestamp"));
        assert_eq!(meta(LABELS), Some("labels"));
        assert_eq!(meta(OWNER_REFERENCES), Some("ownerReferences"));
        assert_eq!(meta(MANAGED_FIELDS), Some("managedFields"));
        let owner = |n: u32| META_V1_OWNER_REFERENCE.field(n).map(|f| f.name);
        assert_eq!(owner(OWNER_KIND), Some("kind"));
        assert_eq!(owner(OWNER_NAME), Some("name"));
        assert_eq!(owner(OWNER_UID), Some("uid"));
        assert_eq!(owner(OWNER_API_VERSION), Some("apiVersion"));
        assert_eq!(owner(OWNER_CONTROLLER), Some("controller"));
        assert_eq!(owner(OWNER_BLOCK), Some("blockOwnerDeletion"));
        // Field 1 of every kind's message is its ObjectMeta (but `Status`'s, a ListMeta).
        let mut others = Vec::new();
        for (v, k, m) in crate::protobuf::schema::KINDS {
            let meta = m.field(METADATA).is_some_and(|f| {
                f.name == "metadata"
                    && matches!(f.kind, Kind::Message(m) if std::ptr::eq(m, &META_V1_OBJECT_META))
            });
            if !meta && !k.ends_with("List") {
                others.push(format!("{v}/{k}"));
            }
        }
        assert_eq!(others, ["v1/Status"]);
    }

    fn pod() -> serde_json::Value {
        json!({"metadata": {"name": "p", "namespace": "n", "uid": "u", "resourceVersion": "7",
            "creationTimestamp": "2025-01-01T00:00:00Z", "labels": {"b": "2", "a": "1"},
            "managedFields": [{"manager": "m", "operation": "Update"}],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r",
                "uid": "ru", "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "i"}]}})
    }

    #[test]
    fn metadata_is_read_and_managed_fields_cut() {
        let msg = object_message("v1", "Pod", &pod()).expect("encodes");
        let m = object_meta(&msg).expect("reads");
        assert_eq!((m.name, m.namespace, m.uid), ("p", "n", "u"));
        assert_eq!(
            m.creation_timestamp.as_deref(),
            Some("2025-01-01T00:00:00Z")
        );
        assert_eq!(m.labels, [("a", "1"), ("b", "2")]);
        assert_eq!(m.owner_references[0].controller, Some(true));
        assert!(m.managed_fields);
        let cut = strip_managed_fields(&msg).expect("cuts").expect("had some");
        assert!(!object_meta(&cut).expect("reads").managed_fields);
        let mut want = pod();
        want["metadata"]
            .as_object_mut()
            .expect("an object")
            .remove("managedFields");
        let got: k8s_openapi::api::core::v1::Pod =
            decode_message(&cut, &CORE_V1_POD, None).expect("decodes");
        assert_eq!(got, serde_json::from_value(want).expect("a pod"));
        assert_eq!(strip_managed_fields(&cut).expect("reads"), None);
    }
}
