//! Stored objects: serialized once, with the few parsed fields selectors need.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use crate::apimachinery::errors::ApiError;
use crate::apimachinery::schema::ResourceDef;

/// Store key: (namespace, or "" for cluster-scoped objects; name). Orders like etcd keys.
pub(crate) type Key = (String, String);

/// One stored version of an object. Immutable; shared by the store, the watch-cache window and
/// open watches.
#[derive(Debug)]
pub(crate) struct StoredObject {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub rv: u64,
    pub labels: BTreeMap<String, String>,
    /// Selectable field values (kind-specific paths such as `spec.nodeName`).
    pub fields: Vec<(&'static str, String)>,
    /// Has finalizers.
    pub has_finalizers: bool,
    /// Has a deletionTimestamp.
    pub deleting: bool,
    /// The JSON object without `apiVersion`/`kind` and without its opening brace: `}` for an
    /// empty rest, else `"metadata":{...},...}`.
    rest: Bytes,
}

/// Serializes a JSON object skipping `apiVersion` and `kind`.
struct WithoutTypeMeta<'a>(&'a Map<String, Value>);

impl Serialize for WithoutTypeMeta<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in self.0 {
            if k != "apiVersion" && k != "kind" {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

fn field_value(v: &Value, path: &str) -> Option<String> {
    let mut cur = v;
    for part in path.split('.') {
        cur = cur.get(part)?;
    }
    match cur {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl StoredObject {
    /// Builds the stored form of `value` (a JSON object whose metadata is already final).
    pub(crate) fn from_value(def: &ResourceDef, value: &Value, rv: u64) -> Result<Self, ApiError> {
        let map = value
            .as_object()
            .ok_or_else(|| ApiError::internal("stored object is not a JSON object"))?;
        let meta = map.get("metadata");
        let text = |k: &str| {
            meta.and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let labels = meta
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .map(|l| {
                l.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let fields = def
            .field_labels
            .iter()
            .filter_map(|p| Some((*p, field_value(value, p)?)))
            .collect();
        let has_finalizers = meta
            .and_then(|m| m.get("finalizers"))
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        let deleting = meta
            .and_then(|m| m.get("deletionTimestamp"))
            .is_some_and(|d| !d.is_null());
        let mut buf = Vec::with_capacity(1024);
        serde_json::to_writer(&mut buf, &WithoutTypeMeta(map))
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let rest = Bytes::from(buf).slice(1..);
        Ok(Self {
            namespace: text("namespace"),
            name: text("name"),
            uid: text("uid"),
            rv,
            labels,
            fields,
            has_finalizers,
            deleting,
            rest,
        })
    }

    /// The store key.
    pub(crate) fn key(&self) -> Key {
        (self.namespace.clone(), self.name.clone())
    }

    /// Approximate serialized size.
    pub(crate) fn len(&self) -> usize {
        self.rest.len() + 64
    }

    /// Appends the full object (with apiVersion and kind).
    pub(crate) fn write_full(&self, def: &ResourceDef, out: &mut BytesMut) {
        out.put_slice(&def.typemeta_prefix);
        if self.rest.as_ref() != b"}" {
            out.put_u8(b',');
        }
        out.put_slice(&self.rest);
    }

    /// Appends the object as a list item: built-in kinds carry no apiVersion/kind in lists
    /// (like kube-apiserver); custom kinds do.
    pub(crate) fn write_list_item(&self, def: &ResourceDef, out: &mut BytesMut) {
        if def.builtin {
            out.put_u8(b'{');
            out.put_slice(&self.rest);
        } else {
            self.write_full(def, out);
        }
    }

    /// Appends the object without `metadata.resourceVersion` (see
    /// `Faults::strip_resource_versions`): the full object, or as a list item when `list_item`.
    /// Slow path: parses and re-serializes.
    pub(crate) fn write_without_rv(&self, def: &ResourceDef, list_item: bool, out: &mut BytesMut) {
        let Ok(mut v) = serde_json::from_slice::<Value>(&self.full_bytes(def)) else {
            // Our own serialization always parses; keep the object rather than lose it.
            self.write_full(def, out);
            return;
        };
        strip_rv(&mut v);
        if list_item
            && def.builtin
            && let Some(m) = v.as_object_mut()
        {
            m.remove("apiVersion");
            m.remove("kind");
        }
        // Serializing a Value cannot fail (string keys only).
        out.put_slice(&serde_json::to_vec(&v).unwrap_or_default());
    }

    /// The full object as bytes.
    pub(crate) fn full_bytes(&self, def: &ResourceDef) -> Bytes {
        let mut out = BytesMut::with_capacity(self.rest.len() + def.typemeta_prefix.len() + 1);
        self.write_full(def, &mut out);
        out.freeze()
    }

    /// The full object, parsed.
    pub(crate) fn to_value(&self, def: &ResourceDef) -> Result<Value, ApiError> {
        serde_json::from_slice(&self.full_bytes(def)).map_err(|e| ApiError::internal(e.to_string()))
    }

    /// A field for field selectors.
    pub(crate) fn field(&self, path: &str) -> Option<&str> {
        match path {
            "metadata.name" => Some(&self.name),
            "metadata.namespace" => Some(&self.namespace),
            _ => self
                .fields
                .iter()
                .find(|(p, _)| *p == path)
                .map(|(_, v)| v.as_str()),
        }
    }
}

/// Removes `metadata.resourceVersion` from an object (a no-op if it has none).
pub(crate) fn strip_rv(v: &mut Value) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
}

/// Reads `metadata.<field>` as a string.
pub(crate) fn meta_str<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get("metadata")?.get(field)?.as_str()
}

/// Mutable `metadata` map, created if missing (or replaced if not an object).
pub(crate) fn meta_mut(v: &mut Value) -> Option<&mut Map<String, Value>> {
    let obj = v.as_object_mut()?;
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut()
}
