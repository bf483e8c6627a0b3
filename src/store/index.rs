//! Index functions and the index data structure (docs/semantics.md I2–I4).
//!
//! An index maps each *index value* (what an [`IndexFunc`] returns for an object) to the set
//! of object keys that produced it. Indices are persistent (`imbl`) maps so that a published
//! store version shares all untouched nodes with the writer's working copy.

use std::{collections::HashMap, sync::Arc};

use kube_core::Resource;

use super::Entry;
use crate::ObjectKey;

/// An index function: the values under which an object is indexed (client-go's `IndexFunc`).
///
/// Infallible by design: an object that has nothing to index returns an empty `Vec` and is
/// simply absent from that index. Duplicate values are allowed and ignored. The function must
/// be pure (same object, same values): the store recomputes an object's old values from the
/// old object to keep indices exact, exactly like client-go.
pub type IndexFunc<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// Named index functions (client-go's `Indexers`).
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use kinformer::store::{Indexers, NAMESPACE_INDEX, index_func, namespace_index_func};
///
/// let mut indexers: Indexers<Pod> = Indexers::new();
/// indexers.insert(NAMESPACE_INDEX.into(), namespace_index_func());
/// indexers.insert(
///     "node".into(),
///     index_func(|p: &Pod| p.spec.iter().filter_map(|s| s.node_name.clone()).collect()),
/// );
/// assert_eq!(indexers.len(), 2);
/// ```
pub type Indexers<K> = HashMap<String, IndexFunc<K>>;

/// The name of the namespace index (client-go's `cache.NamespaceIndex`).
pub const NAMESPACE_INDEX: &str = "namespace";

/// Wraps a closure as an [`IndexFunc`] (saves spelling out the `Arc<dyn Fn ..>` coercion).
pub fn index_func<K, F>(f: F) -> IndexFunc<K>
where
    F: Fn(&K) -> Vec<String> + Send + Sync + 'static,
{
    Arc::new(f)
}

/// client-go's `MetaNamespaceIndexFunc`: indexes every object under its namespace; a
/// cluster-scoped object is indexed under `""` (as in client-go).
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use kinformer::store::namespace_index_func;
///
/// let mut pod = Pod::default();
/// pod.metadata.namespace = Some("default".into());
/// assert_eq!(namespace_index_func::<Pod>()(&pod), vec!["default".to_string()]);
/// ```
pub fn namespace_index_func<K: Resource>() -> IndexFunc<K> {
    Arc::new(|obj: &K| vec![obj.meta().namespace.clone().unwrap_or_default()])
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
}

impl<K> Clone for IndexSlot<K> {
    fn clone(&self) -> Self {
        IndexSlot {
            name: Arc::clone(&self.name),
            func: Arc::clone(&self.func),
            index: self.index.clone(),
        }
    }
}

impl<K> IndexSlot<K> {
    /// A slot whose index is built from `items` (I4: indexes what is already there); the
    /// slot is at `position` in the store's indices (where lean entries keep its values).
    pub(crate) fn build<'a>(
        name: Arc<str>,
        func: IndexFunc<K>,
        position: usize,
        items: impl IntoIterator<Item = (&'a ObjectKey, &'a Entry<K>)>,
    ) -> Self
    where
        K: 'a,
    {
        let mut index = Index::new();
        for (key, entry) in items {
            match entry {
                Entry::Typed(obj) => {
                    for value in func(obj) {
                        insert_key(&mut index, value, key);
                    }
                }
                Entry::Lean(l) => {
                    for value in l.values.get(position).into_iter().flatten() {
                        insert_key(&mut index, value.clone(), key);
                    }
                }
            }
        }
        IndexSlot { name, func, index }
    }

    /// Moves `key` from the values of `old` to those of `new` (None: absent), touching only
    /// the values that differ, and dropping values whose key set becomes empty (I2).
    pub(crate) fn reindex(&mut self, key: &ObjectKey, old: Option<&K>, new: Option<&K>) {
        let mut old_values = old.map(|o| (self.func)(o)).unwrap_or_default();
        let mut new_values = new.map(|n| (self.func)(n)).unwrap_or_default();
        // Fast path: the common update (status, resourceVersion) leaves index values alone,
        // so the persistent index is not touched (no copy-on-write of its nodes).
        if old_values == new_values {
            return;
        }
        normalize(&mut old_values);
        normalize(&mut new_values);
        self.move_key(key, &old_values, new_values);
    }

    /// [`reindex`](Self::reindex) with values already computed (lean mode keeps them with
    /// each object, I7).
    pub(crate) fn reindex_values(&mut self, key: &ObjectKey, old: &[String], new: &[String]) {
        if old == new {
            return;
        }
        let mut old_values = old.to_vec();
        let mut new_values = new.to_vec();
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
