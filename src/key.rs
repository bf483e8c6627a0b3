//! Object keys and tombstones (docs/semantics.md I1).
//!
//! A key is `namespace/name` for namespaced objects and `name` for cluster-scoped ones, exactly
//! as client-go's `MetaNamespaceKeyFunc`, so keys printed by kinformer match client-go's and
//! kubectl's. Keys are reference-counted strings: the FIFO queue, the item map, the store and
//! every index share one allocation per key.

use std::{borrow::Borrow, fmt, sync::Arc};

use kube_core::Resource;

use crate::lean::LazyObject;

/// Errors from building or parsing an [`ObjectKey`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The object has no `metadata.name` (and so cannot be keyed or cached).
    #[error("object has no metadata.name")]
    MissingName,
    /// A key string that is not `name` or `namespace/name` with non-empty parts.
    #[error("invalid object key {0:?}: expected \"name\" or \"namespace/name\"")]
    Invalid(String),
    /// A custom key function needed the typed object, and the lean object did not decode (I7).
    #[error("cannot key object: it does not decode: {0}")]
    Undecodable(String),
}

/// The key of an object in the FIFO and the store: `namespace/name`, or `name` when
/// cluster-scoped.
///
/// Cloning is a reference-count increment.
///
/// ```
/// use kinformer::ObjectKey;
/// let k = ObjectKey::new(Some("default"), "web-0");
/// assert_eq!(k.as_str(), "default/web-0");
/// assert_eq!(k.namespace(), Some("default"));
/// assert_eq!(k.name(), "web-0");
/// assert_eq!(ObjectKey::new(None, "node-1").as_str(), "node-1");
/// assert_eq!(ObjectKey::parse("default/web-0").unwrap(), k);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(Arc<str>);

impl ObjectKey {
    /// Builds the key of an object with the given namespace (None or empty: cluster-scoped) and name.
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        match namespace {
            Some(ns) if !ns.is_empty() => {
                let mut s = String::with_capacity(ns.len() + 1 + name.len());
                s.push_str(ns);
                s.push('/');
                s.push_str(name);
                ObjectKey(Arc::from(s))
            }
            _ => ObjectKey(Arc::from(name)),
        }
    }

    /// Parses `name` or `namespace/name`; rejects empty parts and more than one `/`.
    pub fn parse(key: &str) -> Result<Self, KeyError> {
        let mut parts = key.split('/');
        let ok = match (parts.next(), parts.next(), parts.next()) {
            (Some(name), None, None) => !name.is_empty(),
            (Some(ns), Some(name), None) => !ns.is_empty() && !name.is_empty(),
            _ => false,
        };
        if ok {
            Ok(ObjectKey(Arc::from(key)))
        } else {
            Err(KeyError::Invalid(key.to_string()))
        }
    }

    /// The key as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Splits into (namespace, name); namespace is None for cluster-scoped keys.
    pub fn split(&self) -> (Option<&str>, &str) {
        match self.0.split_once('/') {
            Some((ns, name)) => (Some(ns), name),
            None => (None, &self.0),
        }
    }

    /// The namespace part, None for cluster-scoped keys.
    pub fn namespace(&self) -> Option<&str> {
        self.split().0
    }

    /// The name part.
    pub fn name(&self) -> &str {
        self.split().1
    }
}

impl Borrow<str> for ObjectKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for ObjectKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

/// A key function: computes an object's key. The default is [`meta_namespace_key`].
pub type KeyFunc<K> = Arc<dyn Fn(&K) -> Result<ObjectKey, KeyError> + Send + Sync>;

/// client-go's `MetaNamespaceKeyFunc` over any kube [`Resource`] (every k8s-openapi type,
/// `DynamicObject`, `PartialObjectMeta`): `namespace/name`, or `name` when cluster-scoped.
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use kinformer::meta_namespace_key;
/// let mut pod = Pod::default();
/// pod.metadata.namespace = Some("default".into());
/// pod.metadata.name = Some("web-0".into());
/// assert_eq!(meta_namespace_key(&pod).unwrap().as_str(), "default/web-0");
/// ```
pub fn meta_namespace_key<K: Resource>(obj: &K) -> Result<ObjectKey, KeyError> {
    let meta = obj.meta();
    match meta.name.as_deref() {
        Some(name) if !name.is_empty() => Ok(ObjectKey::new(meta.namespace.as_deref(), name)),
        _ => Err(KeyError::MissingName),
    }
}

/// The default [`KeyFunc`] for a kube resource type.
pub fn default_key_func<K: Resource + 'static>() -> KeyFunc<K> {
    Arc::new(meta_namespace_key::<K>)
}

/// [`meta_namespace_key`] over the pipeline's [`LazyObject`]s: reads the metadata only, so a
/// lean object (I7) is never decoded to be keyed.
pub fn lazy_key_func<K: Resource + 'static>() -> KeyFunc<LazyObject<K>> {
    Arc::new(LazyObject::key)
}

/// A key function of the typed object, over [`LazyObject`]s: a lean object (I7) is decoded
/// for it (shared with the object's other readers).
pub fn lazy_key_func_of<K: 'static>(key_func: KeyFunc<K>) -> KeyFunc<LazyObject<K>> {
    Arc::new(move |o: &LazyObject<K>| {
        let typed = o
            .object()
            .map_err(|e| KeyError::Undecodable(e.to_string()))?;
        key_func(&typed)
    })
}

/// client-go's `DeletedFinalStateUnknown`: the object was deleted but the watch missed the
/// deletion (found on relist), so `obj` is the last state the cache knew and may be stale.
pub struct DeletedFinalStateUnknown<K> {
    /// The key of the deleted object.
    pub key: ObjectKey,
    /// The last known state of the object.
    pub obj: Arc<K>,
}

impl<K> Clone for DeletedFinalStateUnknown<K> {
    fn clone(&self) -> Self {
        DeletedFinalStateUnknown {
            key: self.key.clone(),
            obj: Arc::clone(&self.obj),
        }
    }
}

impl<K> fmt::Debug for DeletedFinalStateUnknown<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeletedFinalStateUnknown")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};

    fn pod(ns: &str, name: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.name = Some(name.into());
        p
    }

    #[test]
    fn i1_default_key_is_namespace_slash_name() {
        assert_eq!(
            meta_namespace_key(&pod("ns", "a")).unwrap().as_str(),
            "ns/a"
        );
    }

    #[test]
    fn i1_cluster_scoped_key_is_name() {
        let mut n = Node::default();
        n.metadata.name = Some("node-1".into());
        assert_eq!(meta_namespace_key(&n).unwrap().as_str(), "node-1");
    }

    #[test]
    fn i1_missing_name_is_an_error() {
        assert_eq!(
            meta_namespace_key(&Pod::default()),
            Err(KeyError::MissingName)
        );
    }

    #[test]
    fn parse_rejects_bad_keys() {
        for bad in ["", "/", "a/", "/b", "a/b/c"] {
            assert!(ObjectKey::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(ObjectKey::parse("n").unwrap().split(), (None, "n"));
        assert_eq!(ObjectKey::parse("ns/n").unwrap().split(), (Some("ns"), "n"));
    }

    #[test]
    fn key_borrows_as_str_for_map_lookups() {
        let mut m = std::collections::HashMap::new();
        m.insert(ObjectKey::new(Some("ns"), "a"), 1);
        assert_eq!(m.get("ns/a"), Some(&1));
    }
}
