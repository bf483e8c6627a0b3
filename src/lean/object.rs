//! [`LazyObject`]: an object whose metadata is at hand and whose typed form is decoded on first
//! use (docs/semantics.md I7).

use std::{borrow::Cow, collections::BTreeMap, fmt, sync::Arc};

use kube_core::Resource;
use serde::Serialize;

use super::{
    codec::{DecodeError, RawObject},
    meta::{CompactMeta, OwnerRef},
    state::{LeanState, Remember},
    window::Slot,
};
use crate::{KeyError, ObjectKey, selector::LabelMatcher};

/// An object as the informer's pipeline carries it: its metadata at hand, its typed form
/// `Arc<K>` decoded on first use and then shared.
///
/// In the typed cache mode an informer's objects are decoded when they arrive, and a
/// `LazyObject` just holds the `Arc<K>`. In the lean mode (docs/semantics.md I7) it holds the
/// stored bytes ([`RawObject`]: the server's JSON or protobuf message, compressed, and its
/// parsed metadata):
/// [`object`](Self::object) decodes them once (or finds them in the store's hot cache) and
/// every later call, from any thread, gets the same `Arc<K>` while the object is among the
/// last [`LeanConfig::shared_decodes`](super::LeanConfig::shared_decodes) objects decoded;
/// after that it holds its bytes again and a later call decodes again. One `LazyObject` is
/// made per watch event and shared by every handler, so handlers that read the body decode it
/// once between them (unless one is further behind than that window), and handlers that read
/// only keys, labels or owners never decode it.
///
/// The metadata accessors ([`name`](Self::name), [`namespace`](Self::namespace),
/// [`labels`](Self::labels), [`owner_references`](Self::owner_references), ...) read the same
/// fields as kube's `ResourceExt` and never decode.
///
/// ```
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::Pod;
/// use kinformer::lean::LazyObject;
///
/// let mut pod = Pod::default();
/// pod.metadata.name = Some("web-0".into());
/// pod.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
/// let lazy = LazyObject::from_object(Arc::new(pod));
/// assert_eq!(lazy.name(), Some("web-0"));
/// assert_eq!(lazy.labels().get("app"), Some("web"));
/// assert_eq!(lazy.object().unwrap().metadata.name.as_deref(), Some("web-0"));
/// ```
pub struct LazyObject<K> {
    repr: Repr<K>,
}

enum Repr<K> {
    Typed(Arc<K>),
    Lean {
        raw: Arc<RawObject>,
        state: Arc<LeanState<K>>,
        /// Its typed form once decoded, until the shared-decode window releases it
        /// ([`LeanConfig::shared_decodes`](super::LeanConfig::shared_decodes)).
        slot: Arc<Slot<K>>,
        /// Still stored: its decode is remembered in the hot cache. Not for an object that
        /// left the store (an `Update`'s old object): the cache keeps live versions only, and
        /// a departed one would only push them out.
        live: bool,
    },
}

impl<K> Clone for LazyObject<K> {
    fn clone(&self) -> Self {
        match &self.repr {
            Repr::Typed(o) => LazyObject::from_object(Arc::clone(o)),
            Repr::Lean {
                raw,
                state,
                slot,
                live,
            } => {
                let decoded = slot.get();
                let shared = matches!(decoded, Some(Ok(_)));
                let slot = Slot::new(decoded);
                if shared {
                    state.shared(&slot, false);
                }
                LazyObject {
                    repr: Repr::Lean {
                        raw: Arc::clone(raw),
                        state: Arc::clone(state),
                        slot,
                        live: *live,
                    },
                }
            }
        }
    }
}

impl<K> From<Arc<K>> for LazyObject<K> {
    fn from(obj: Arc<K>) -> Self {
        LazyObject::from_object(obj)
    }
}

impl<K> LazyObject<K> {
    /// An object already decoded (the typed cache mode's).
    pub fn from_object(obj: Arc<K>) -> Self {
        LazyObject {
            repr: Repr::Typed(obj),
        }
    }

    /// A lean object: `raw`, decoded through `state` (its store's hot cache and counters) on
    /// first use.
    pub fn from_raw(raw: Arc<RawObject>, state: Arc<LeanState<K>>) -> Self {
        LazyObject {
            repr: Repr::Lean {
                raw,
                state,
                slot: Slot::new(None),
                live: true,
            },
        }
    }

    /// A lean object that just left the store (its typed form taken from the hot cache when it
    /// was there): decoding it later does not fill the hot cache.
    pub(crate) fn from_raw_decoded(
        raw: Arc<RawObject>,
        state: Arc<LeanState<K>>,
        typed: Option<Arc<K>>,
    ) -> Self {
        let shared = typed.is_some();
        let slot = Slot::new(typed.map(Ok));
        if shared {
            // Pinned like a decode: the window bounds how long it stays.
            state.shared(&slot, false);
        }
        LazyObject {
            repr: Repr::Lean {
                raw,
                state,
                slot,
                live: false,
            },
        }
    }

    /// The typed object: at once in typed mode; in lean mode decoded on the first call (or
    /// found in the hot cache) and shared by every later call, on any thread, until the
    /// shared-decode window releases it
    /// ([`LeanConfig::shared_decodes`](super::LeanConfig::shared_decodes)).
    ///
    /// # Errors
    /// [`DecodeError`] when the stored JSON (or protobuf) does not decode into `K` (an object the server
    /// sent that is not a valid `K`: lean mode checks only the metadata when it stores one).
    /// The failure is remembered and counted once
    /// ([`LeanStats::decode_failures`](super::LeanStats::decode_failures)).
    pub fn object(&self) -> Result<Arc<K>, DecodeError> {
        self.object_with(Remember::Yes)
    }

    /// [`object`](Self::object), remembering a decode in the hot cache only if `remember`
    /// (and the object is still stored).
    pub(crate) fn object_with(&self, remember: Remember) -> Result<Arc<K>, DecodeError> {
        match &self.repr {
            Repr::Typed(o) => Ok(Arc::clone(o)),
            Repr::Lean {
                raw,
                state,
                slot,
                live,
            } => {
                // Readers arriving meanwhile wait on the slot for this decode.
                let mut held = slot.lock();
                if let Some(d) = &*held {
                    return d.clone();
                }
                let again = slot.was_released();
                let d = state.decode(raw, Remember::No);
                *held = Some(d.clone());
                drop(held);
                // After the waiting readers are released: remembering it in the hot cache and
                // registering it in the window may free evicted objects.
                if let Ok(typed) = &d {
                    if *live && remember == Remember::Yes {
                        state.remember(raw, typed);
                    }
                    state.shared(slot, again);
                }
                d
            }
        }
    }

    /// True for the first caller while the object is not decoded yet: that caller should
    /// decode it now ([`object`](Self::object)). Readers that work through several objects
    /// (the informer's typed handler threads) claim them one at a time, so that two of them
    /// decode different objects at once instead of one waiting for the other.
    pub fn claim_decode(&self) -> bool {
        match &self.repr {
            Repr::Typed(_) => false,
            Repr::Lean { slot, .. } => slot.claim(),
        }
    }

    /// True when [`object`](Self::object) would not decode: typed mode, or already decoded.
    pub fn is_decoded(&self) -> bool {
        match &self.repr {
            Repr::Typed(_) => true,
            Repr::Lean { slot, .. } => slot.is_decoded(),
        }
    }

    /// The stored form, in lean mode.
    pub fn raw(&self) -> Option<&Arc<RawObject>> {
        match &self.repr {
            Repr::Typed(_) => None,
            Repr::Lean { raw, .. } => Some(raw),
        }
    }

    /// The typed object if it is at hand (typed mode, or decoded already and not released by
    /// the shared-decode window).
    pub fn decoded(&self) -> Option<Arc<K>> {
        match &self.repr {
            Repr::Typed(o) => Some(Arc::clone(o)),
            Repr::Lean { slot, .. } => slot.get().and_then(Result::ok),
        }
    }

    /// True when both are the same stored object (the same `Arc<K>`, or the same stored
    /// bytes): what a resync re-delivers.
    pub fn same_object(&self, other: &Self) -> bool {
        match (&self.repr, &other.repr) {
            (Repr::Typed(a), Repr::Typed(b)) => Arc::ptr_eq(a, b),
            (Repr::Lean { raw: a, .. }, Repr::Lean { raw: b, .. }) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The object as JSON: the stored JSON decompressed in lean mode (without
    /// `managedFields` if the store strips them), serialised in typed mode. A lean object
    /// stored as protobuf ([`Encoding::Protobuf`](super::Encoding::Protobuf)) is decoded (its
    /// typed form reused if at hand, else decoded for this call alone: a decode's cost, counted
    /// in [`LeanStats::decodes`](super::LeanStats::decodes), not kept) and serialised, as in
    /// typed mode.
    ///
    /// # Errors
    /// [`DecodeError`] when the stored bytes do not decompress or decode, or the object does
    /// not serialise.
    pub fn to_json(&self) -> Result<Vec<u8>, DecodeError>
    where
        K: Serialize,
    {
        match &self.repr {
            Repr::Typed(o) => serde_json::to_vec(&**o).map_err(DecodeError::new),
            Repr::Lean { raw, state, .. } => match raw.encoding() {
                super::Encoding::Json => raw.json().map(Cow::into_owned),
                super::Encoding::Protobuf => {
                    let typed = match self.decoded() {
                        Some(t) => t,
                        None => state.decode(raw, Remember::No)?,
                    };
                    serde_json::to_vec(&*typed).map_err(DecodeError::new)
                }
            },
        }
    }
}

impl<K: Resource> LazyObject<K> {
    fn compact(&self) -> Option<&CompactMeta> {
        match &self.repr {
            Repr::Typed(_) => None,
            Repr::Lean { raw, .. } => Some(raw.meta()),
        }
    }

    fn typed_meta(&self) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta> {
        match &self.repr {
            Repr::Typed(o) => Some(o.meta()),
            Repr::Lean { .. } => None,
        }
    }

    /// `metadata.name`.
    pub fn name(&self) -> Option<&str> {
        match self.compact() {
            Some(m) => m.name(),
            None => self.typed_meta()?.name.as_deref(),
        }
    }

    /// `metadata.namespace` (None for cluster-scoped objects).
    pub fn namespace(&self) -> Option<&str> {
        match self.compact() {
            Some(m) => m.namespace(),
            None => self
                .typed_meta()?
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty()),
        }
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Option<&str> {
        match self.compact() {
            Some(m) => m.uid(),
            None => self.typed_meta()?.uid.as_deref(),
        }
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        match self.compact() {
            Some(m) => m.resource_version(),
            None => self.typed_meta()?.resource_version.as_deref(),
        }
    }

    /// `metadata.creationTimestamp` in RFC 3339 (as the server wrote it in lean mode).
    pub fn creation_timestamp(&self) -> Option<Cow<'_, str>> {
        match self.compact() {
            Some(m) => m.creation_timestamp().map(Cow::Borrowed),
            None => timestamp(self.typed_meta()?.creation_timestamp.as_ref()?),
        }
    }

    /// `metadata.deletionTimestamp` in RFC 3339: set once the object's deletion started.
    pub fn deletion_timestamp(&self) -> Option<Cow<'_, str>> {
        match self.compact() {
            Some(m) => m.deletion_timestamp().map(Cow::Borrowed),
            None => timestamp(self.typed_meta()?.deletion_timestamp.as_ref()?),
        }
    }

    /// True once the object's deletion started (`deletionTimestamp` set).
    pub fn is_deleting(&self) -> bool {
        match self.compact() {
            Some(m) => m.deletion_timestamp().is_some(),
            None => self
                .typed_meta()
                .is_some_and(|m| m.deletion_timestamp.is_some()),
        }
    }

    /// `metadata.labels`.
    pub fn labels(&self) -> Labels<'_> {
        match self.compact() {
            Some(m) => Labels(LabelsRepr::Compact(m)),
            None => Labels(LabelsRepr::Map(
                self.typed_meta().and_then(|m| m.labels.as_ref()),
            )),
        }
    }

    /// `metadata.ownerReferences`, in order.
    pub fn owner_references(&self) -> Vec<OwnerRef<'_>> {
        match self.compact() {
            Some(m) => m.owner_references().collect(),
            None => self
                .typed_meta()
                .and_then(|m| m.owner_references.as_ref())
                .map(|owners| owners.iter().map(OwnerRef::from).collect())
                .unwrap_or_default(),
        }
    }

    /// The owner reference marked `controller: true`, if any (kube's `controller_owner_ref`).
    pub fn controller_ref(&self) -> Option<OwnerRef<'_>> {
        self.owner_references()
            .into_iter()
            .find(|o| o.controller == Some(true))
    }

    /// The key client-go's `MetaNamespaceKeyFunc` gives it.
    ///
    /// # Errors
    /// [`KeyError::MissingName`] when it has no name.
    pub fn key(&self) -> Result<ObjectKey, KeyError> {
        match self.name() {
            Some(name) if !name.is_empty() => Ok(ObjectKey::new(self.namespace(), name)),
            _ => Err(KeyError::MissingName),
        }
    }
}

fn timestamp(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Option<Cow<'_, str>> {
    match serde_json::to_value(t).ok()? {
        serde_json::Value::String(s) => Some(Cow::Owned(s)),
        _ => None,
    }
}

impl<K: Resource> fmt::Debug for LazyObject<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LazyObject")
            .field("namespace", &self.namespace())
            .field("name", &self.name())
            .field("resource_version", &self.resource_version())
            .field("decoded", &self.is_decoded())
            .finish()
    }
}

/// An object's labels, read without decoding it ([`LazyObject::labels`]).
#[derive(Clone, Copy)]
pub struct Labels<'a>(LabelsRepr<'a>);

#[derive(Clone, Copy)]
enum LabelsRepr<'a> {
    Map(Option<&'a BTreeMap<String, String>>),
    Compact(&'a CompactMeta),
}

impl<'a> Labels<'a> {
    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        match self.0 {
            LabelsRepr::Map(m) => m?.get(key).map(String::as_str),
            LabelsRepr::Compact(m) => m.label(key),
        }
    }

    /// Every label, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let (map, compact) = match self.0 {
            LabelsRepr::Map(m) => (m, None),
            LabelsRepr::Compact(m) => (None, Some(m)),
        };
        map.into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(compact.into_iter().flat_map(|m| m.labels()))
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        match self.0 {
            LabelsRepr::Map(m) => m.map_or(0, BTreeMap::len),
            LabelsRepr::Compact(m) => m.labels().len(),
        }
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The labels as kube's map type.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// True when `selector` matches these labels (as kube's `SelectorExt::matches`).
    pub fn matches(&self, selector: &LabelMatcher) -> bool {
        selector.matches(|k| self.get(k))
    }
}

impl fmt::Debug for Labels<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;
    use crate::lean::LeanConfig;

    fn lazy(state: &Arc<LeanState<ConfigMap>>, name: &str) -> LazyObject<ConfigMap> {
        let json =
            format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"data":{{"k":"v"}}}}"#);
        let raw = state.encode(json.as_bytes()).expect("encodes");
        LazyObject::from_raw(Arc::new(raw), Arc::clone(state))
    }

    /// I7: readers of one lazy object share one decode while it is among the window's last
    /// decodes; past the window it holds its bytes again (not decoded, claimable), and the
    /// next reader decodes it again into an equal object.
    #[test]
    fn i7_lazy_object_shares_its_decode_within_the_window_only() {
        let state = Arc::new(LeanState::new(
            LeanConfig::default().hot_objects(0).shared_decodes(2),
        ));
        let objs: Vec<_> = (0..5).map(|i| lazy(&state, &format!("p{i}"))).collect();
        let first = objs[0].object().expect("decodes");
        assert!(Arc::ptr_eq(&first, &objs[0].object().expect("decodes")));
        for o in &objs[1..] {
            o.object().expect("decodes");
        }
        let decoded: Vec<bool> = objs.iter().map(LazyObject::is_decoded).collect();
        assert_eq!(decoded, [false, false, false, true, true]);
        assert!(objs[0].decoded().is_none() && objs[0].claim_decode());
        let again = objs[0].object().expect("decodes again");
        assert!(!Arc::ptr_eq(&first, &again) && first == again);
        let stats = state.stats(&Default::default());
        assert_eq!((stats.decodes, stats.released, stats.redecodes), (6, 4, 1));
    }

    /// `shared_decodes(usize::MAX)`: every decode stays with its object.
    #[test]
    fn i7_unbounded_window_keeps_every_decode() {
        let state = Arc::new(LeanState::new(
            LeanConfig::default()
                .hot_objects(0)
                .shared_decodes(usize::MAX),
        ));
        let objs: Vec<_> = (0..50).map(|i| lazy(&state, &format!("p{i}"))).collect();
        objs.iter().for_each(|o| drop(o.object()));
        assert!(objs.iter().all(LazyObject::is_decoded));
        assert_eq!(state.stats(&Default::default()).released, 0);
    }
}
