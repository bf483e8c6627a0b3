//! The indexed store: client-go's `threadSafeStore` + `Indexer` + listers (docs/semantics.md I1–I6).
//!
//! # Design: one writer, lock-free readers
//!
//! [`Store`] is the single writer (owned by the Indexer actor). It keeps a *working copy* of
//! the contents (objects by key, plus every index) in persistent `imbl` maps and, after each
//! operation (or once per [`Batch`]), publishes an immutable version through an
//! [`arc_swap::ArcSwap`]. Cloning a persistent map is O(1) (structural sharing), so publishing
//! costs one small allocation; the next write copies only the O(log n) nodes on its path.
//!
//! [`Lister`]s read the latest published version: a read is an `ArcSwap::load` (no lock, no
//! waiting on the writer or on other readers) followed by a lookup in an immutable map.
//! [`Lister::snapshot`] pins one version for multi-call reads. Because a version is published
//! whole, [`Store::replace`] is atomic for readers (I5): they see the old contents or the new
//! ones, never a mix, and an index never names a key that the same version lacks.
//!
//! Objects are `Arc<K>`: storing or handing out an object never deep-copies it, and `K` need
//! not be `Clone`.
//!
//! # Lean mode (I7)
//!
//! [`Store::lean`] (or [`Store::with_mode`] with [`CacheMode::Lean`]) keeps each object as
//! the bytes the server sent, compressed, with its metadata parsed ([`RawObject`]): the same
//! API, the same lock-free readers, a few percent of the memory of k8s-openapi types, and a
//! decode (tens of microseconds for a pod) per typed read of an object outside the bounded
//! hot cache. Metadata-only reads ([`Lister::lazy`]) and key reads never decode. Indexes made
//! with [`meta_index_func`] (the built-in [`namespace_index_func`] among them) are computed
//! from the parsed metadata; a typed [`index_func`] decodes the object once when it is stored.
//! See the [`lean`](crate::lean) module for the design and `benches/lean.rs` for the costs.
//!
//! ```
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::Pod;
//! use kinformer::key::default_key_func;
//! use kinformer::store::{Indexers, NAMESPACE_INDEX, Store, namespace_index_func};
//!
//! let mut indexers = Indexers::new();
//! indexers.insert(NAMESPACE_INDEX.to_string(), namespace_index_func::<Pod>());
//! let mut store = Store::new(default_key_func::<Pod>(), indexers);
//! let lister = store.lister(); // cheap to clone, hand it to any thread
//!
//! let mut pod = Pod::default();
//! pod.metadata.namespace = Some("default".into());
//! pod.metadata.name = Some("web-0".into());
//! assert!(store.add(Arc::new(pod)).unwrap().is_none());
//!
//! assert!(lister.get("default", "web-0").is_some());
//! assert_eq!(lister.by_index(NAMESPACE_INDEX, "default").unwrap().len(), 1);
//! assert_eq!(lister.namespaced("default").list().len(), 1);
//! ```

mod index;
#[cfg(test)]
mod lean_tests;
mod lister;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::{collections::HashSet, sync::Arc};

use arc_swap::ArcSwap;
use serde::{Serialize, de::DeserializeOwned};

use crate::{
    KeyError, KeyFunc, ObjectKey,
    lean::{DecodeError, LazyObject, LeanState, RawObject, Remember, StoredSizes},
};
use index::IndexSlot;

pub use crate::lean::{CacheMode, DEFAULT_HOT_OBJECTS, LeanConfig, LeanStats};
pub use index::{
    IndexFunc, Indexers, NAMESPACE_INDEX, index_func, meta_index_func, namespace_index_func,
};
pub use lister::{LazyRead, Lister, NamespacedLister, ReadAs, Snapshot, TypedRead};

/// Errors of the store and its listers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The key function rejected the object (e.g. it has no name); nothing was stored.
    #[error("cannot key object: {0}")]
    Key(#[from] KeyError),
    /// A read named an index that the store does not have (I3).
    #[error("index {0:?} does not exist")]
    UnknownIndex(String),
    /// [`Store::add_indexers`] named an index that already exists; no indexer was added.
    #[error("index {0:?} already exists")]
    IndexExists(String),
    /// A typed store was given a lean object that does not decode; nothing was stored.
    #[error("cannot decode object: {0}")]
    Decode(#[from] DecodeError),
}

/// What [`Store::replace`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaceReport {
    /// Number of objects the store now holds (distinct keys; the last object wins a duplicate).
    pub stored: usize,
    /// Objects the key function rejected; they were left out, the rest was stored.
    pub skipped: Vec<SkippedObject>,
}

/// An object that [`Store::replace`] left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedObject {
    /// Its position in the list given to `replace`.
    pub position: usize,
    /// Why the key function rejected it.
    pub error: KeyError,
}

/// One stored object: the decoded object (typed mode), or its stored bytes (lean mode, I7; a
/// lean store keeps an object typed only if it could not be encoded).
pub(crate) enum Entry<K> {
    Typed(Arc<K>),
    Lean(Arc<RawObject>),
}

impl<K> Clone for Entry<K> {
    fn clone(&self) -> Self {
        match self {
            Entry::Typed(o) => Entry::Typed(Arc::clone(o)),
            Entry::Lean(l) => Entry::Lean(Arc::clone(l)),
        }
    }
}

impl<K> Entry<K> {
    /// True when this entry stores `obj` itself (the same `Arc`): a resync re-storing it.
    fn holds(&self, obj: &LazyObject<K>) -> bool {
        match (self, obj.raw(), obj.decoded()) {
            (Entry::Lean(r), Some(raw), _) => Arc::ptr_eq(r, raw),
            (Entry::Typed(o), None, Some(typed)) => Arc::ptr_eq(o, &typed),
            _ => false,
        }
    }
}

/// One version of the store's contents. Immutable once published.
pub(crate) struct Inner<K> {
    /// Objects by key.
    pub(crate) items: imbl::HashMap<ObjectKey, Entry<K>>,
    /// The indices, one slot per index name (few: a linear scan beats hashing the name).
    pub(crate) indices: Vec<IndexSlot<K>>,
    /// Incremented at every publish; lets readers tell versions apart.
    pub(crate) version: u64,
    /// Lean mode's encoder, hot cache and counters, shared by every version; None in typed
    /// mode, where no entry is [`Entry::Lean`].
    pub(crate) lean: Option<Arc<LeanState<K>>>,
    /// Lean mode: what the lean entries of this version hold.
    pub(crate) sizes: StoredSizes,
}

impl<K> Clone for Inner<K> {
    fn clone(&self) -> Self {
        Inner {
            items: self.items.clone(),
            indices: self.indices.clone(),
            version: self.version,
            lean: self.lean.clone(),
            sizes: self.sizes,
        }
    }
}

impl<K> Inner<K> {
    /// The typed form of a stored entry (lean: from the hot cache or decoded; None if it does
    /// not decode, which [`LeanStats::decode_failures`] counts).
    #[inline]
    pub(crate) fn object(&self, entry: &Entry<K>, remember: Remember) -> Option<Arc<K>> {
        match entry {
            Entry::Typed(o) => Some(Arc::clone(o)),
            Entry::Lean(l) => self.lean.as_ref()?.decode(l, remember).ok(),
        }
    }

    /// A stored entry as a lazy object (never decodes).
    #[inline]
    pub(crate) fn lazy(&self, entry: &Entry<K>) -> Option<LazyObject<K>> {
        match entry {
            Entry::Typed(o) => Some(LazyObject::from_object(Arc::clone(o))),
            Entry::Lean(l) => Some(LazyObject::from_raw(
                Arc::clone(l),
                Arc::clone(self.lean.as_ref()?),
            )),
        }
    }

    /// The object an entry that just left the store held, as a lazy object: its hot-cache
    /// copy moves into it (the cache keeps only live versions, and a reader of the old object
    /// does not decode it again).
    fn departed(&self, entry: Entry<K>) -> Option<LazyObject<K>> {
        match entry {
            Entry::Typed(o) => Some(LazyObject::from_object(o)),
            Entry::Lean(l) => {
                let state = Arc::clone(self.lean.as_ref()?);
                let typed = state.take(&l);
                Some(LazyObject::from_raw_decoded(l, state, typed))
            }
        }
    }

    /// Lean mode's counters with this version's sizes.
    pub(crate) fn lean_stats(&self) -> Option<LeanStats> {
        Some(self.lean.as_ref()?.stats(&self.sizes))
    }

    fn count(&mut self, entry: &Entry<K>, sign: i8) {
        if let Entry::Lean(l) = entry {
            self.sizes.count(l, sign);
        }
    }

    /// The entry that stores `obj`: its bytes in a lean store (a typed object is encoded;
    /// one that does not encode is kept typed, counted), the decoded object in a typed store.
    fn entry_for(&self, obj: &LazyObject<K>) -> Result<Entry<K>, StoreError> {
        match (&self.lean, obj.raw()) {
            (Some(_), Some(raw)) => Ok(Entry::Lean(Arc::clone(raw))),
            (Some(state), None) => {
                let typed = obj.object()?;
                Ok(match state.encode_object(&typed) {
                    Ok(raw) => {
                        let raw = Arc::new(raw);
                        // The writer has the object at hand: the next read need not decode.
                        state.remember(&raw, &typed);
                        Entry::Lean(raw)
                    }
                    Err(_) => Entry::Typed(typed),
                })
            }
            (None, _) => Ok(Entry::Typed(obj.object()?)),
        }
    }

    /// Stores `obj` under `key` and moves the key between index values; returns the previous
    /// object.
    fn put(
        &mut self,
        key: ObjectKey,
        obj: &LazyObject<K>,
    ) -> Result<Option<LazyObject<K>>, StoreError> {
        // A resync re-stores the very object stored: its index values cannot have changed.
        if let Some(current) = self.items.get(key.as_str())
            && current.holds(obj)
        {
            return Ok(self.lazy(current));
        }
        let entry = self.entry_for(obj)?;
        self.count(&entry, 1);
        let old = self.items.insert(key.clone(), entry);
        if let Some(old) = &old {
            self.count(old, -1);
        }
        let old = old.and_then(|o| self.departed(o));
        for slot in &mut self.indices {
            slot.reindex(&key, old.as_ref(), Some(obj));
        }
        Ok(old)
    }

    /// Removes `key` from the objects and from every index value it was under; returns the
    /// object that was stored.
    fn remove(&mut self, key: &str) -> Option<LazyObject<K>> {
        let (key, old) = self.items.remove_with_key(key)?;
        self.count(&old, -1);
        let old = self.departed(old);
        for slot in &mut self.indices {
            slot.reindex(&key, old.as_ref(), None);
        }
        old
    }

    /// Replaces all objects; indices are rebuilt from scratch over the new contents.
    fn replace(&mut self, key_func: &KeyFunc<K>, objs: Vec<Arc<K>>) -> ReplaceReport {
        let mut items = imbl::HashMap::new();
        let mut skipped = Vec::new();
        for (position, obj) in objs.into_iter().enumerate() {
            match key_func(&obj) {
                Ok(key) => {
                    // A typed object always has an entry (kept typed if it does not encode).
                    if let Ok(entry) = self.entry_for(&LazyObject::from_object(obj)) {
                        items.insert(key, entry);
                    }
                }
                Err(error) => skipped.push(SkippedObject { position, error }),
            }
        }
        for (_, old) in std::mem::replace(&mut self.items, items) {
            if let (Entry::Lean(l), Some(state)) = (old, &self.lean) {
                state.take(&l);
            }
        }
        self.sizes = StoredSizes::default();
        let entries: Vec<Entry<K>> = self.items.values().cloned().collect();
        for e in &entries {
            self.count(e, 1);
        }
        let lean = self.lean.is_some();
        let slots: Vec<_> = self
            .indices
            .iter()
            .map(|s| (Arc::clone(&s.name), s.func.clone()))
            .collect();
        self.indices = slots
            .into_iter()
            .map(|(name, func)| self.build_slot(name, func, lean))
            .collect();
        ReplaceReport {
            stored: self.items.len(),
            skipped,
        }
    }

    /// A slot indexing every stored object (I4). Typed index functions decode lean objects
    /// once here, without remembering them.
    fn build_slot(&self, name: Arc<str>, func: IndexFunc<K>, lean: bool) -> IndexSlot<K> {
        let mut slot = IndexSlot::new(name, func, lean);
        for (key, entry) in self.items.iter() {
            let obj = match entry {
                Entry::Lean(_) if slot.func.reads_object() => {
                    match self.object(entry, Remember::No) {
                        Some(typed) => LazyObject::from_object(typed),
                        None => continue,
                    }
                }
                _ => match self.lazy(entry) {
                    Some(obj) => obj,
                    None => continue,
                },
            };
            slot.reindex(key, None, Some(&obj));
        }
        slot
    }

    /// Adds indices over the current contents; all-or-nothing on a name conflict.
    fn add_indexers(&mut self, more: Indexers<K>) -> Result<(), StoreError> {
        if let Some(name) = more
            .keys()
            .find(|name| self.indices.iter().any(|s| &*s.name == name.as_str()))
        {
            return Err(StoreError::IndexExists(name.clone()));
        }
        let mut more: Vec<_> = more.into_iter().collect();
        more.sort_by(|a, b| a.0.cmp(&b.0));
        let lean = self.lean.is_some();
        for (name, func) in more {
            let slot = self.build_slot(Arc::from(name), func, lean);
            self.indices.push(slot);
        }
        Ok(())
    }
}

/// The single writer of an indexed store (client-go's `threadSafeStore` + `Indexer`).
///
/// Owned by one task (the Indexer actor); not `Clone`. Every mutation is published to the
/// [`Lister`]s at once; use [`Store::batch`] to apply many and publish once.
pub struct Store<K> {
    key_func: KeyFunc<K>,
    /// The writer's working copy; equal to the published version outside a batch.
    working: Inner<K>,
    shared: Arc<ArcSwap<Inner<K>>>,
}

impl<K> Store<K> {
    /// An empty store that keys objects with `key_func` (usually
    /// [`default_key_func`](crate::key::default_key_func), I1) and maintains `indexers`.
    pub fn new(key_func: KeyFunc<K>, indexers: Indexers<K>) -> Self {
        Self::build(key_func, indexers, None)
    }

    fn build(key_func: KeyFunc<K>, indexers: Indexers<K>, lean: Option<Arc<LeanState<K>>>) -> Self {
        let mut indexers: Vec<_> = indexers.into_iter().collect();
        indexers.sort_by(|a, b| a.0.cmp(&b.0));
        let is_lean = lean.is_some();
        let working = Inner {
            items: imbl::HashMap::new(),
            indices: indexers
                .into_iter()
                .map(|(name, func)| IndexSlot::new(Arc::from(name), func, is_lean))
                .collect(),
            version: 0,
            lean,
            sizes: StoredSizes::default(),
        };
        let shared = Arc::new(ArcSwap::from_pointee(working.clone()));
        Store {
            key_func,
            working,
            shared,
        }
    }

    /// An empty store in the given [`CacheMode`]: [`Store::new`] for
    /// [`CacheMode::Typed`], [`Store::lean`] for [`CacheMode::Lean`].
    pub fn with_mode(key_func: KeyFunc<K>, indexers: Indexers<K>, mode: CacheMode) -> Self
    where
        K: Serialize + DeserializeOwned,
    {
        match mode {
            CacheMode::Typed => Store::new(key_func, indexers),
            CacheMode::Lean(config) => Store::lean(key_func, indexers, config),
        }
    }

    /// An empty store in lean mode (I7): objects are kept as compressed JSON with their
    /// metadata parsed; readers get them decoded (from a hot cache of `config.hot_objects`
    /// objects when they are there).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use k8s_openapi::api::core::v1::Pod;
    /// use kinformer::key::default_key_func;
    /// use kinformer::store::{Indexers, LeanConfig, Store};
    ///
    /// let mut store = Store::lean(
    ///     default_key_func::<Pod>(),
    ///     Indexers::new(),
    ///     LeanConfig::default().hot_objects(0),
    /// );
    /// let mut pod = Pod::default();
    /// pod.metadata.name = Some("web-0".into());
    /// store.add(Arc::new(pod.clone())).unwrap();
    /// let read = store.lister().get("", "web-0").unwrap();
    /// assert_eq!(*read, pod); // decoded: equal, not the same allocation
    /// assert_eq!(store.lean_stats().unwrap().decodes, 1);
    /// // Metadata reads never decode.
    /// assert_eq!(store.lister().lazy().get("", "web-0").unwrap().name(), Some("web-0"));
    /// assert_eq!(store.lean_stats().unwrap().decodes, 1);
    /// ```
    pub fn lean(key_func: KeyFunc<K>, indexers: Indexers<K>, config: LeanConfig) -> Self
    where
        K: Serialize + DeserializeOwned,
    {
        Self::with_lean_state(key_func, indexers, Arc::new(LeanState::new(config)))
    }

    /// An empty lean store over an existing [`LeanState`] (the informer builds the state
    /// first, to encode objects on its decode pool).
    pub fn with_lean_state(
        key_func: KeyFunc<K>,
        indexers: Indexers<K>,
        state: Arc<LeanState<K>>,
    ) -> Self {
        Self::build(key_func, indexers, Some(state))
    }

    /// True in lean mode (I7).
    pub fn is_lean(&self) -> bool {
        self.working.lean.is_some()
    }

    /// Lean mode's counters (None in typed mode).
    pub fn lean_stats(&self) -> Option<LeanStats> {
        self.working.lean_stats()
    }

    /// Lean mode's shared state (None in typed mode).
    pub fn lean_state(&self) -> Option<&Arc<LeanState<K>>> {
        self.working.lean.as_ref()
    }

    /// Adds or replaces `obj` under its key and publishes; returns the previous object (the
    /// Indexer actor needs it for Update notifications).
    ///
    /// # Errors
    /// [`StoreError::Key`] when the key function rejects the object; nothing changes.
    pub fn add(&mut self, obj: Arc<K>) -> Result<Option<Arc<K>>, StoreError> {
        let old = self.put(obj)?;
        self.publish();
        Ok(old)
    }

    /// Same as [`Store::add`] (as in client-go, add and update are both upserts).
    ///
    /// # Errors
    /// [`StoreError::Key`] when the key function rejects the object; nothing changes.
    pub fn update(&mut self, obj: Arc<K>) -> Result<Option<Arc<K>>, StoreError> {
        self.add(obj)
    }

    /// Removes the object with `obj`'s key; returns what was stored (None: nothing was).
    ///
    /// # Errors
    /// [`StoreError::Key`] when the key function rejects the object.
    pub fn delete(&mut self, obj: &K) -> Result<Option<Arc<K>>, StoreError> {
        let key = (self.key_func)(obj)?;
        Ok(self.delete_key(key.as_str()))
    }

    /// Removes the object stored under `key`; returns it (None: nothing was stored).
    ///
    /// In lean mode, returning the object may decode it; [`Batch::remove_key`] does not.
    pub fn delete_key(&mut self, key: &str) -> Option<Arc<K>> {
        let old = self.working.remove(key)?;
        self.publish();
        old.object().ok()
    }

    /// Replaces the whole contents with `objs` and rebuilds every index, then publishes once:
    /// readers see the old contents or the new ones, never a mix (I5).
    ///
    /// Objects the key function rejects are skipped and listed in the report; the rest is
    /// stored. To know what was there before (e.g. to notify deletions), take
    /// [`Store::snapshot`] first: it is O(1).
    ///
    /// # Errors
    /// None today: a rejected object is reported, not fatal. The `Result` keeps the signature
    /// in line with the other writes.
    pub fn replace(&mut self, objs: Vec<Arc<K>>) -> Result<ReplaceReport, StoreError> {
        let report = self.working.replace(&self.key_func, objs);
        self.publish();
        Ok(report)
    }

    /// Adds indices and indexes the objects already stored (I4).
    ///
    /// # Errors
    /// [`StoreError::IndexExists`] when a name is already an index; then nothing is added.
    pub fn add_indexers(&mut self, more: Indexers<K>) -> Result<(), StoreError> {
        self.working.add_indexers(more)?;
        self.publish();
        Ok(())
    }

    /// Starts a batch: its operations are published together, once, when it is committed or
    /// dropped. Readers see none of them until then.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::Pod;
    /// # use kinformer::{key::default_key_func, store::{Indexers, Store}};
    /// # fn pod(name: &str) -> Arc<Pod> {
    /// #     let mut p = Pod::default();
    /// #     p.metadata.namespace = Some("ns".into());
    /// #     p.metadata.name = Some(name.into());
    /// #     Arc::new(p)
    /// # }
    /// let mut store = Store::new(default_key_func::<Pod>(), Indexers::new());
    /// let lister = store.lister();
    /// let mut batch = store.batch();
    /// batch.add(pod("a")).unwrap();
    /// batch.add(pod("b")).unwrap();
    /// assert_eq!(lister.len(), 0); // not yet published
    /// batch.commit();
    /// assert_eq!(lister.len(), 2);
    /// ```
    pub fn batch(&mut self) -> Batch<'_, K> {
        Batch {
            store: self,
            dirty: false,
        }
    }

    /// The object stored under `key` (the writer's view).
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        let entry = self.working.items.get(key)?;
        self.working.object(entry, Remember::Yes)
    }

    /// Number of objects stored.
    pub fn len(&self) -> usize {
        self.working.items.len()
    }

    /// True when no object is stored.
    pub fn is_empty(&self) -> bool {
        self.working.items.is_empty()
    }

    /// Names of the indices, sorted.
    pub fn index_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .working
            .indices
            .iter()
            .map(|s| s.name.to_string())
            .collect();
        names.sort_unstable();
        names
    }

    /// A reader of the published contents; clone it freely and send it to any thread.
    pub fn lister(&self) -> Lister<K> {
        Lister::new(Arc::clone(&self.shared))
    }

    /// A point-in-time view of the writer's current contents (O(1)).
    pub fn snapshot(&self) -> Snapshot<K> {
        Snapshot::new(Arc::new(self.working.clone()))
    }

    fn put(&mut self, obj: Arc<K>) -> Result<Option<Arc<K>>, StoreError> {
        let key = (self.key_func)(&obj)?;
        let old = self.working.put(key, &LazyObject::from_object(obj))?;
        Ok(old.and_then(|o| o.object().ok()))
    }

    /// Publishes the working copy: O(number of indices), independent of the store size.
    fn publish(&mut self) {
        self.working.version += 1;
        self.shared.store(Arc::new(self.working.clone()));
    }
}

/// A group of writes published once (see [`Store::batch`]); the Indexer actor applies a popped
/// FIFO batch this way, amortising the publish and the copy-on-write of shared nodes.
///
/// Publishes when [`Batch::commit`]ted or dropped, and only if something changed.
pub struct Batch<'a, K> {
    store: &'a mut Store<K>,
    dirty: bool,
}

impl<K> Batch<'_, K> {
    /// Like [`Store::add`], published at commit.
    ///
    /// # Errors
    /// [`StoreError::Key`] when the key function rejects the object; nothing changes.
    pub fn add(&mut self, obj: Arc<K>) -> Result<Option<Arc<K>>, StoreError> {
        let old = self.store.put(obj)?;
        self.dirty = true;
        Ok(old)
    }

    /// Like [`Store::update`], published at commit.
    ///
    /// # Errors
    /// [`StoreError::Key`] when the key function rejects the object; nothing changes.
    pub fn update(&mut self, obj: Arc<K>) -> Result<Option<Arc<K>>, StoreError> {
        self.add(obj)
    }

    /// Stores `obj` under a key the caller already computed with this store's key function
    /// (the Indexer actor gets it with the FIFO's deltas): no second key computation, and the
    /// store shares the FIFO's key allocation. Returns the previous object; published at commit.
    pub fn put_keyed(&mut self, key: ObjectKey, obj: Arc<K>) -> Option<Arc<K>> {
        self.dirty = true;
        let old = self
            .store
            .working
            .put(key, &LazyObject::from_object(obj))
            .ok()
            .flatten();
        old.and_then(|o| o.object().ok())
    }

    /// Stores a lazy object under a key the caller computed (the Indexer actor's write: in a
    /// lean store the object's bytes are stored as they are, nothing is decoded unless a
    /// typed index function needs it). Returns the previous object, without decoding it.
    ///
    /// # Errors
    /// [`StoreError::Decode`] when a typed store is given a lean object that does not decode;
    /// nothing changes.
    pub fn put_object(
        &mut self,
        key: ObjectKey,
        obj: &LazyObject<K>,
    ) -> Result<Option<LazyObject<K>>, StoreError> {
        let old = self.store.working.put(key, obj)?;
        self.dirty = true;
        Ok(old)
    }

    /// Like [`Store::delete`], published at commit.
    ///
    /// # Errors
    /// [`StoreError::Key`] when the key function rejects the object.
    pub fn delete(&mut self, obj: &K) -> Result<Option<Arc<K>>, StoreError> {
        let key = (self.store.key_func)(obj)?;
        Ok(self.delete_key(key.as_str()))
    }

    /// Like [`Store::delete_key`], published at commit.
    pub fn delete_key(&mut self, key: &str) -> Option<Arc<K>> {
        let old = self.store.working.remove(key)?;
        self.dirty = true;
        old.object().ok()
    }

    /// Removes the object stored under `key` without returning it (in lean mode, no decode);
    /// true if there was one. Published at commit.
    pub fn remove_key(&mut self, key: &str) -> bool {
        let removed = self.store.working.remove(key).is_some();
        self.dirty |= removed;
        removed
    }

    /// Like [`Store::replace`], published at commit (still atomic for readers).
    ///
    /// # Errors
    /// None today (see [`Store::replace`]).
    pub fn replace(&mut self, objs: Vec<Arc<K>>) -> Result<ReplaceReport, StoreError> {
        let store = &mut *self.store;
        let report = store.working.replace(&store.key_func, objs);
        self.dirty = true;
        Ok(report)
    }

    /// The object under `key` in the batch's view (includes its unpublished writes).
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.store.get_by_key(key)
    }

    /// Publishes the batch (same as dropping it; this names the intent).
    pub fn commit(self) {}
}

impl<K> Drop for Batch<'_, K> {
    fn drop(&mut self) {
        if self.dirty {
            self.store.publish();
        }
    }
}

/// Keys of the objects under any of `values` in one index, deduplicated.
pub(crate) fn union_keys<K>(slot: &IndexSlot<K>, values: &[String]) -> Vec<ObjectKey> {
    match values {
        [] => Vec::new(),
        [value] => slot_keys(slot, value),
        _ => {
            let mut seen = HashSet::new();
            let mut keys = Vec::new();
            for value in values {
                if let Some(set) = slot.index.get(value.as_str()) {
                    set.for_each(|k| {
                        if seen.insert(k.clone()) {
                            keys.push(k.clone());
                        }
                    });
                }
            }
            keys
        }
    }
}

/// Keys of the objects under one index value.
pub(crate) fn slot_keys<K>(slot: &IndexSlot<K>, value: &str) -> Vec<ObjectKey> {
    match slot.index.get(value) {
        Some(set) => {
            let mut keys = Vec::with_capacity(set.len());
            set.for_each(|k| keys.push(k.clone()));
            keys
        }
        None => Vec::new(),
    }
}
