//! Readers of the store: [`Lister`] (always the latest published version), [`Snapshot`] (one
//! pinned version) and [`NamespacedLister`] (docs/semantics.md I3, I6).
//!
//! No read takes a lock: a [`Lister`] call is one `ArcSwap::load` (a few atomic operations on
//! a per-thread debt slot, never waiting on the writer or on other readers) followed by
//! lookups in immutable persistent maps.

use std::{collections::BTreeMap, fmt, sync::Arc};

use arc_swap::ArcSwap;
use kube_core::{Resource, Selector, SelectorExt};

use super::{
    Entry, Inner, LeanStats, NAMESPACE_INDEX, Remember, StoreError, index::IndexSlot, slot_keys,
    union_keys,
};
use crate::{ObjectKey, known::KnownObjects};

/// Longest `namespace/name` key built on the stack by [`Lister::get`]; namespaces are at most
/// 63 bytes and names at most 253, so every valid Kubernetes key fits.
const STACK_KEY_LEN: usize = 320;

/// Calls `f` with the key of `namespace/name` (just `name` when `namespace` is empty) without
/// allocating for any valid Kubernetes name.
fn with_key<R>(namespace: &str, name: &str, f: impl FnOnce(&str) -> R) -> R {
    if namespace.is_empty() {
        return f(name);
    }
    let len = namespace.len() + 1 + name.len();
    if len <= STACK_KEY_LEN {
        let mut buf = [0u8; STACK_KEY_LEN];
        buf[..namespace.len()].copy_from_slice(namespace.as_bytes());
        buf[namespace.len()] = b'/';
        buf[namespace.len() + 1..len].copy_from_slice(name.as_bytes());
        // Two valid UTF-8 strings joined by an ASCII byte are valid UTF-8: this never fails.
        if let Ok(key) = std::str::from_utf8(&buf[..len]) {
            return f(key);
        }
    }
    f(&format!("{namespace}/{name}"))
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

fn labels_match<K: Resource>(selector: &Selector, obj: &K) -> bool {
    selector.matches(obj.meta().labels.as_ref().unwrap_or(&NO_LABELS))
}

// The read operations, shared by Lister (latest version) and Snapshot (pinned version).
impl<K> Inner<K> {
    fn slot(&self, index: &str) -> Option<&IndexSlot<K>> {
        self.indices.iter().find(|s| &*s.name == index)
    }

    fn known_slot(&self, index: &str) -> Result<&IndexSlot<K>, StoreError> {
        self.slot(index)
            .ok_or_else(|| StoreError::UnknownIndex(index.to_string()))
    }

    /// A point read: a lean object it decodes is remembered in the hot cache.
    fn get(&self, key: &str) -> Option<Arc<K>> {
        self.object(self.items.get(key)?, Remember::Yes)
    }

    /// A read of many objects: lean objects are looked up in the hot cache, and decoded
    /// without being remembered when absent.
    fn get_many(&self, key: &str) -> Option<Arc<K>> {
        self.object(self.items.get(key)?, Remember::No)
    }

    fn list(&self) -> Vec<Arc<K>> {
        // A typed entry is one reference-count increment here, as before lean mode.
        self.items
            .values()
            .filter_map(|e| self.object(e, Remember::No))
            .collect()
    }

    fn list_keys(&self) -> Vec<ObjectKey> {
        self.items.keys().cloned().collect()
    }

    fn resolve(&self, keys: Vec<ObjectKey>) -> Vec<Arc<K>> {
        // Every indexed key is stored in the same version (I2), so nothing is filtered out.
        keys.iter()
            .filter_map(|k| self.get_many(k.as_str()))
            .collect()
    }

    fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, StoreError> {
        let slot = self.known_slot(index)?;
        let mut objs = Vec::new();
        if let Some(set) = slot.index.get(value) {
            objs.reserve(set.len());
            set.for_each(|k| objs.extend(self.get_many(k.as_str())));
        }
        Ok(objs)
    }

    fn index_keys(&self, index: &str, value: &str) -> Result<Vec<ObjectKey>, StoreError> {
        Ok(slot_keys(self.known_slot(index)?, value))
    }

    fn list_index_func_values(&self, index: &str) -> Vec<String> {
        self.slot(index)
            .map(|s| s.index.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn index(&self, index: &str, obj: &K) -> Result<Vec<Arc<K>>, StoreError> {
        let slot = self.known_slot(index)?;
        let values = (slot.func)(obj);
        Ok(self.resolve(union_keys(slot, &values)))
    }
}

impl<K: Resource> Inner<K> {
    fn list_selected(&self, selector: &Selector) -> Vec<Arc<K>> {
        if selector.selects_all() {
            return self.list();
        }
        self.items
            .values()
            .filter_map(|e| match e {
                Entry::Typed(o) => labels_match(selector, &**o).then(|| Arc::clone(o)),
                Entry::Lean(_) => self
                    .object(e, Remember::No)
                    .filter(|o| labels_match(selector, &**o)),
            })
            .collect()
    }

    /// Objects of one namespace (all objects for `""`, client-go's `NamespaceAll`), using the
    /// namespace index when the store has one, else scanning.
    fn list_namespace(&self, namespace: &str, selector: Option<&Selector>) -> Vec<Arc<K>> {
        let selector = selector.filter(|s| !s.selects_all());
        if namespace.is_empty() {
            return match selector {
                Some(sel) => self.list_selected(sel),
                None => self.list(),
            };
        }
        let keep = |o: &Arc<K>| selector.is_none_or(|sel| labels_match(sel, &**o));
        match self.slot(NAMESPACE_INDEX) {
            Some(slot) => {
                let mut objs = Vec::new();
                if let Some(set) = slot.index.get(namespace) {
                    set.for_each(|k| objs.extend(self.get_many(k.as_str()).filter(keep)));
                }
                objs
            }
            None => {
                let wanted =
                    |o: &Arc<K>| o.meta().namespace.as_deref() == Some(namespace) && keep(o);
                self.items
                    .values()
                    .filter_map(|e| match e {
                        Entry::Typed(o) => wanted(o).then(|| Arc::clone(o)),
                        Entry::Lean(_) => self.object(e, Remember::No).filter(wanted),
                    })
                    .collect()
            }
        }
    }
}

/// A reader of the latest published contents of a [`Store`](super::Store) (client-go's
/// listers and the read side of `Indexer`).
///
/// Cheap to clone (one `Arc`), `Send + Sync`. Reads never block: not on the writer, not on
/// other readers (I6). Each call reads one consistent version; consecutive calls may see
/// different versions: use [`Lister::snapshot`] to pin one.
pub struct Lister<K> {
    shared: Arc<ArcSwap<Inner<K>>>,
}

impl<K> Clone for Lister<K> {
    fn clone(&self) -> Self {
        Lister {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K> fmt::Debug for Lister<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.shared.load();
        f.debug_struct("Lister")
            .field("len", &inner.items.len())
            .field("version", &inner.version)
            .finish()
    }
}

impl<K> Lister<K> {
    pub(super) fn new(shared: Arc<ArcSwap<Inner<K>>>) -> Self {
        Lister { shared }
    }

    /// The object `namespace/name`; an empty `namespace` looks up a cluster-scoped `name`.
    /// Builds the key on the stack: no allocation.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        let inner = self.shared.load();
        with_key(namespace, name, |key| inner.get(key))
    }

    /// The cluster-scoped object `name`.
    pub fn get_cluster(&self, name: &str) -> Option<Arc<K>> {
        self.shared.load().get(name)
    }

    /// The object stored under `key` (`namespace/name` or `name`).
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.shared.load().get(key)
    }

    /// Every object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.shared.load().list()
    }

    /// Every key, in no particular order.
    pub fn list_keys(&self) -> Vec<ObjectKey> {
        self.shared.load().list_keys()
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.shared.load().items.len()
    }

    /// True when the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.shared.load().items.is_empty()
    }

    /// The objects under `value` in index `index` (client-go's `ByIndex`).
    ///
    /// # Errors
    /// [`StoreError::UnknownIndex`] when there is no index named `index` (I3).
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, StoreError> {
        self.shared.load().by_index(index, value)
    }

    /// The keys under `value` in index `index` (client-go's `IndexKeys`).
    ///
    /// # Errors
    /// [`StoreError::UnknownIndex`] when there is no index named `index` (I3).
    pub fn index_keys(&self, index: &str, value: &str) -> Result<Vec<ObjectKey>, StoreError> {
        self.shared.load().index_keys(index, value)
    }

    /// Every value index `index` currently holds (client-go's `ListIndexFuncValues`); empty
    /// for an unknown index, as in client-go.
    pub fn list_index_func_values(&self, index: &str) -> Vec<String> {
        self.shared.load().list_index_func_values(index)
    }

    /// The objects that share at least one value of index `index` with `obj` (client-go's
    /// `Index`); `obj` itself need not be stored.
    ///
    /// # Errors
    /// [`StoreError::UnknownIndex`] when there is no index named `index` (I3).
    pub fn index(&self, index: &str, obj: &K) -> Result<Vec<Arc<K>>, StoreError> {
        self.shared.load().index(index, obj)
    }

    /// Names of the indices, sorted.
    pub fn index_names(&self) -> Vec<String> {
        self.snapshot().index_names()
    }

    /// Pins the current version for a series of consistent reads (O(1)).
    pub fn snapshot(&self) -> Snapshot<K> {
        Snapshot::new(self.shared.load_full())
    }

    /// The number of versions published so far (grows with every write or batch).
    pub fn version(&self) -> u64 {
        self.shared.load().version
    }

    /// Lean mode's counters (I7): decodes, hot-cache hits, objects and bytes stored; None in
    /// typed mode.
    pub fn lean_stats(&self) -> Option<LeanStats> {
        self.shared.load().lean_stats()
    }
}

impl<K: Resource> Lister<K> {
    /// Objects whose `metadata.labels` match `selector`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::Pod;
    /// # use kinformer::{key::default_key_func, store::{Indexers, Store}};
    /// use kube_core::{Expression, Selector};
    /// let mut store = Store::new(default_key_func::<Pod>(), Indexers::new());
    /// let mut pod = Pod::default();
    /// pod.metadata.name = Some("web-0".into());
    /// pod.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    /// store.add(Arc::new(pod)).unwrap();
    /// let web: Selector = Expression::Equal("app".into(), "web".into()).into();
    /// assert_eq!(store.lister().list_selected(&web).len(), 1);
    /// ```
    pub fn list_selected(&self, selector: &Selector) -> Vec<Arc<K>> {
        self.shared.load().list_selected(selector)
    }

    /// A lister restricted to `namespace` (`""`: all namespaces, client-go's `NamespaceAll`).
    pub fn namespaced(&self, namespace: &str) -> NamespacedLister<K> {
        NamespacedLister {
            source: Source::Live(self.clone()),
            namespace: Arc::from(namespace),
        }
    }
}

impl<K: Send + Sync> KnownObjects<K> for Lister<K> {
    fn list_keys(&self) -> Vec<ObjectKey> {
        Lister::list_keys(self)
    }

    fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        Lister::get_by_key(self, key)
    }
}

/// One published version of the store, pinned: every call sees the same contents, so
/// multi-call reads are consistent (a key from [`Snapshot::index_keys`] always resolves with
/// [`Snapshot::get_by_key`]). Holding it keeps that version alive; drop it when done.
pub struct Snapshot<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for Snapshot<K> {
    fn clone(&self) -> Self {
        Snapshot {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K> fmt::Debug for Snapshot<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("len", &self.inner.items.len())
            .field("version", &self.inner.version)
            .finish()
    }
}

impl<K> Snapshot<K> {
    pub(super) fn new(inner: Arc<Inner<K>>) -> Self {
        Snapshot { inner }
    }

    /// The object `namespace/name` (cluster-scoped `name` when `namespace` is empty).
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        with_key(namespace, name, |key| self.inner.get(key))
    }

    /// The object stored under `key`.
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.inner.get(key)
    }

    /// Every object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.inner.list()
    }

    /// Every key, in no particular order.
    pub fn list_keys(&self) -> Vec<ObjectKey> {
        self.inner.list_keys()
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.inner.items.len()
    }

    /// True when this version holds no object.
    pub fn is_empty(&self) -> bool {
        self.inner.items.is_empty()
    }

    /// See [`Lister::by_index`].
    ///
    /// # Errors
    /// [`StoreError::UnknownIndex`] when there is no index named `index`.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, StoreError> {
        self.inner.by_index(index, value)
    }

    /// See [`Lister::index_keys`].
    ///
    /// # Errors
    /// [`StoreError::UnknownIndex`] when there is no index named `index`.
    pub fn index_keys(&self, index: &str, value: &str) -> Result<Vec<ObjectKey>, StoreError> {
        self.inner.index_keys(index, value)
    }

    /// See [`Lister::list_index_func_values`].
    pub fn list_index_func_values(&self, index: &str) -> Vec<String> {
        self.inner.list_index_func_values(index)
    }

    /// See [`Lister::index`].
    ///
    /// # Errors
    /// [`StoreError::UnknownIndex`] when there is no index named `index`.
    pub fn index(&self, index: &str, obj: &K) -> Result<Vec<Arc<K>>, StoreError> {
        self.inner.index(index, obj)
    }

    /// Names of the indices, sorted.
    pub fn index_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .inner
            .indices
            .iter()
            .map(|s| s.name.to_string())
            .collect();
        names.sort_unstable();
        names
    }

    /// The version number of this snapshot (see [`Lister::version`]).
    pub fn version(&self) -> u64 {
        self.inner.version
    }
}

impl<K: Resource> Snapshot<K> {
    /// See [`Lister::list_selected`].
    pub fn list_selected(&self, selector: &Selector) -> Vec<Arc<K>> {
        self.inner.list_selected(selector)
    }

    /// A namespaced lister over this pinned version.
    pub fn namespaced(&self, namespace: &str) -> NamespacedLister<K> {
        NamespacedLister {
            source: Source::Pinned(self.clone()),
            namespace: Arc::from(namespace),
        }
    }
}

impl<K: Send + Sync> KnownObjects<K> for Snapshot<K> {
    fn list_keys(&self) -> Vec<ObjectKey> {
        Snapshot::list_keys(self)
    }

    fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        Snapshot::get_by_key(self, key)
    }
}

enum Source<K> {
    Live(Lister<K>),
    Pinned(Snapshot<K>),
}

impl<K> Clone for Source<K> {
    fn clone(&self) -> Self {
        match self {
            Source::Live(l) => Source::Live(l.clone()),
            Source::Pinned(s) => Source::Pinned(s.clone()),
        }
    }
}

impl<K> Source<K> {
    fn read<R>(&self, f: impl FnOnce(&Inner<K>) -> R) -> R {
        match self {
            Source::Live(l) => f(&l.shared.load()),
            Source::Pinned(s) => f(&s.inner),
        }
    }
}

/// A lister restricted to one namespace (client-go's `<Kind>NamespaceLister`), from
/// [`Lister::namespaced`] (live) or [`Snapshot::namespaced`] (pinned).
///
/// Lists use the [`NAMESPACE_INDEX`] when the store has it, else scan all objects.
pub struct NamespacedLister<K> {
    source: Source<K>,
    namespace: Arc<str>,
}

impl<K> Clone for NamespacedLister<K> {
    fn clone(&self) -> Self {
        NamespacedLister {
            source: self.source.clone(),
            namespace: Arc::clone(&self.namespace),
        }
    }
}

impl<K> fmt::Debug for NamespacedLister<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NamespacedLister")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl<K: Resource> NamespacedLister<K> {
    /// The namespace this lister reads (`""`: all).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The object `name` in this namespace (no allocation).
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        self.source
            .read(|inner| with_key(&self.namespace, name, |key| inner.get(key)))
    }

    /// Every object in this namespace.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.source
            .read(|inner| inner.list_namespace(&self.namespace, None))
    }

    /// Objects in this namespace whose labels match `selector`.
    pub fn list_selected(&self, selector: &Selector) -> Vec<Arc<K>> {
        self.source
            .read(|inner| inner.list_namespace(&self.namespace, Some(selector)))
    }
}
