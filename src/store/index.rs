//! Index functions and the index data structure (docs/semantics.md I2–I4, I7).
//!
//! An index maps each *index value* (what an [`IndexFunc`] returns for an object) to the set
//! of object keys that produced it. Indices are persistent (`imbl`) maps so that a published
//! store version shares all untouched nodes with the writer's working copy.

use std::{collections::HashMap, fmt, sync::Arc};

use kube_core::Resource;

use crate::{
    ObjectKey,
    lean::{LazyObject, Remember},
};

type ObjectFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;
type MetaFn<K> = Arc<dyn Fn(&LazyObject<K>) -> Vec<String> + Send + Sync>;

/// An index function: the values under which an object is indexed (client-go's `IndexFunc`).
///
/// Two kinds, which differ only in the lean mode (I7):
/// - [`index_func`]: a function of the typed object. In the lean mode the object is decoded for
///   it when it is stored (and its values kept, so the old object is never decoded again);
/// - [`meta_index_func`]: a function of the [`LazyObject`], meant to read its metadata (name,
///   namespace, labels, owners): it never decodes unless it calls `object()` itself. The
///   built-in [`namespace_index_func`] is one.
///
/// Infallible by design: an object that has nothing to index returns an empty `Vec` and is
/// simply absent from that index. Duplicate values are allowed and ignored. The function must
/// be pure (same object, same values): the store recomputes an object's old values from the
/// old object to keep indices exact, exactly like client-go.
pub struct IndexFunc<K>(Kind<K>);

enum Kind<K> {
    Object(ObjectFn<K>),
    Meta(MetaFn<K>),
}

impl<K> Clone for IndexFunc<K> {
    fn clone(&self) -> Self {
        IndexFunc(match &self.0 {
            Kind::Object(f) => Kind::Object(Arc::clone(f)),
            Kind::Meta(f) => Kind::Meta(Arc::clone(f)),
        })
    }
}

impl<K> fmt::Debug for IndexFunc<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Kind::Object(_) => "IndexFunc(object)",
            Kind::Meta(_) => "IndexFunc(metadata)",
        })
    }
}

impl<K> IndexFunc<K> {
    /// The values of `obj` (decoding it for a typed function; an object that does not decode
    /// has no values).
    pub fn values(&self, obj: &LazyObject<K>) -> Vec<String> {
        match &self.0 {
            // Decoded for the function and not kept in the hot cache (the object keeps it for
            // its other readers, typed handlers, until they are done).
            Kind::Object(f) => obj
                .object_with(Remember::No)
                .map(|o| f(&o))
                .unwrap_or_default(),
            Kind::Meta(f) => f(obj),
        }
    }

    /// The values of a typed object.
    pub fn values_of(&self, obj: &Arc<K>) -> Vec<String> {
        match &self.0 {
            Kind::Object(f) => f(obj),
            Kind::Meta(f) => f(&LazyObject::from_object(Arc::clone(obj))),
        }
    }

    /// True for a function of the typed object ([`index_func`]): in the lean mode it decodes.
    pub fn reads_object(&self) -> bool {
        matches!(self.0, Kind::Object(_))
    }
}

/// Named index functions (client-go's `Indexers`).
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use kinformer::store::{Indexers, NAMESPACE_INDEX, index_func, meta_index_func, namespace_index_func};
///
/// let mut indexers: Indexers<Pod> = Indexers::new();
/// indexers.insert(NAMESPACE_INDEX.into(), namespace_index_func());
/// indexers.insert(
///     "node".into(),
///     index_func(|p: &Pod| p.spec.iter().filter_map(|s| s.node_name.clone()).collect()),
/// );
/// indexers.insert(
///     "app".into(),
///     meta_index_func(|p| p.labels().get("app").map(String::from).into_iter().collect()),
/// );
/// assert_eq!(indexers.len(), 3);
/// ```
pub type Indexers<K> = HashMap<String, IndexFunc<K>>;

/// The name of the namespace index (client-go's `cache.NamespaceIndex`).
pub const NAMESPACE_INDEX: &str = "namespace";

/// An [`IndexFunc`] of the typed object (in the lean mode the object is decoded for it).
pub fn index_func<K, F>(f: F) -> IndexFunc<K>
where
    F: Fn(&K) -> Vec<String> + Send + Sync + 'static,
{
    IndexFunc(Kind::Object(Arc::new(f)))
}

/// An [`IndexFunc`] of the object's metadata, read through the [`LazyObject`]: in the lean
/// mode it runs on the parsed metadata and never decodes (unless it calls `object()`).
pub fn meta_index_func<K, F>(f: F) -> IndexFunc<K>
where
    F: Fn(&LazyObject<K>) -> Vec<String> + Send + Sync + 'static,
{
    IndexFunc(Kind::Meta(Arc::new(f)))
}

/// client-go's `MetaNamespaceIndexFunc`: indexes every object under its namespace; a
/// cluster-scoped object is indexed under `""` (as in client-go). Reads the metadata only.
///
/// ```
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::Pod;
/// use kinformer::store::namespace_index_func;
///
/// let mut pod = Pod::default();
/// pod.metadata.namespace = Some("default".into());
/// assert_eq!(namespace_index_func::<Pod>().values_of(&Arc::new(pod)), vec!["default".to_string()]);
/// ```
pub fn namespace_index_func<K: Resource>() -> IndexFunc<K> {
    meta_index_func(|obj: &LazyObject<K>| vec![obj.namespace().unwrap_or_default().to_string()])
}

/// The keys under one index value. Most values of selective indices (a uid, a
/// pod-template-hash, a node with few pods) hold a single key, so that case is stored inline
/// instead of allocating a persistent set (a HAMT root node is several hundred bytes).
#[derive(Clone, Debug)]
pub(crate) enum KeySet {
    One(ObjectKey),
    Many(imbl::HashSet<ObjectKey>),
}

impl KeySet {
    fn insert(&mut self, key: &ObjectKey) {
        match self {
            KeySet::One(k) if k == key => {}
            KeySet::One(k) => {
                let mut set = imbl::HashSet::new();
                set.insert(k.clone());
                set.insert(key.clone());
                *self = KeySet::Many(set);
            }
            KeySet::Many(set) => {
                set.insert(key.clone());
            }
        }
    }

    /// Removes `key`; returns true when the set is now empty (the caller drops the value).
    fn remove(&mut self, key: &ObjectKey) -> bool {
        match self {
            KeySet::One(k) => k == key,
            KeySet::Many(set) => {
                set.remove(key);
                let last = if set.len() == 1 {
                    set.iter().next().cloned()
                } else {
                    None
                };
                if let Some(last) = last {
                    *self = KeySet::One(last);
                }
                set_is_empty(self)
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            KeySet::One(_) => 1,
            KeySet::Many(set) => set.len(),
        }
    }

    /// Calls `f` for every key (no allocation).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&ObjectKey)) {
        match self {
            KeySet::One(k) => f(k),
            KeySet::Many(set) => set.iter().for_each(f),
        }
    }
}

fn set_is_empty(set: &KeySet) -> bool {
    matches!(set, KeySet::Many(s) if s.is_empty())
}

/// One index: index value → keys of the objects that produce it.
pub(crate) type Index = imbl::HashMap<String, KeySet>;

/// A named index with its function: one entry of the store's indices.
pub(crate) struct IndexSlot<K> {
    pub(crate) name: Arc<str>,
    pub(crate) func: IndexFunc<K>,
    pub(crate) index: Index,
    /// A lean store's values of a typed function, by key: computed (decoding) when an object
    /// is stored, so removing or replacing it never decodes the old object (I7). None in a
    /// typed store and for metadata functions.
    pub(crate) kept: Option<imbl::HashMap<ObjectKey, Box<[String]>>>,
}

impl<K> Clone for IndexSlot<K> {
    fn clone(&self) -> Self {
        IndexSlot {
            name: Arc::clone(&self.name),
            func: self.func.clone(),
            index: self.index.clone(),
            kept: self.kept.clone(),
        }
    }
}

impl<K> IndexSlot<K> {
    /// An empty slot; `lean`: the store keeps objects lean (typed functions keep values).
    pub(crate) fn new(name: Arc<str>, func: IndexFunc<K>, lean: bool) -> Self {
        let kept = (lean && func.reads_object()).then(imbl::HashMap::new);
        IndexSlot {
            name,
            func,
            index: Index::new(),
            kept,
        }
    }

    /// The values `key`'s stored object `old` is indexed under.
    fn old_values(&self, key: &ObjectKey, old: &LazyObject<K>) -> Vec<String> {
        match &self.kept {
            Some(kept) => kept.get(key).map(|v| v.to_vec()).unwrap_or_default(),
            None => self.func.values(old),
        }
    }

    /// Moves `key` from the values of `old` to those of `new` (None: absent), touching only
    /// the values that differ, and dropping values whose key set becomes empty (I2).
    pub(crate) fn reindex(
        &mut self,
        key: &ObjectKey,
        old: Option<&LazyObject<K>>,
        new: Option<&LazyObject<K>>,
    ) {
        let mut old_values = old.map(|o| self.old_values(key, o)).unwrap_or_default();
        let mut new_values = new.map(|n| self.func.values(n)).unwrap_or_default();
        if let Some(kept) = &mut self.kept {
            match new {
                Some(_) if !new_values.is_empty() => {
                    kept.insert(key.clone(), new_values.clone().into_boxed_slice());
                }
                _ => {
                    kept.remove(key);
                }
            }
        }
        // Fast path: the common update (status, resourceVersion) leaves index values alone,
        // so the persistent index is not touched (no copy-on-write of its nodes).
        if old_values == new_values {
            return;
        }
        normalize(&mut old_values);
        normalize(&mut new_values);
        self.move_key(key, &old_values, new_values);
    }

    /// Moves `key` between normalized (sorted, deduplicated) value lists.
    fn move_key(&mut self, key: &ObjectKey, old_values: &[String], new_values: Vec<String>) {
        for value in old_values {
            if new_values.binary_search(value).is_err() {
                remove_key(&mut self.index, value, key);
            }
        }
        for value in new_values {
            if old_values.binary_search(&value).is_err() {
                insert_key(&mut self.index, value, key);
            }
        }
    }
}

fn normalize(values: &mut Vec<String>) {
    if values.len() > 1 {
        values.sort_unstable();
        values.dedup();
    }
}

fn insert_key(index: &mut Index, value: String, key: &ObjectKey) {
    match index.get_mut(value.as_str()) {
        Some(set) => set.insert(key),
        None => {
            index.insert(value, KeySet::One(key.clone()));
        }
    }
}

fn remove_key(index: &mut Index, value: &str, key: &ObjectKey) {
    let now_empty = match index.get_mut(value) {
        Some(set) => set.remove(key),
        None => false,
    };
    if now_empty {
        index.remove(value);
    }
}
