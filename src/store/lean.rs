//! The lean cache mode (docs/semantics.md I7): the store keeps each object in a compact,
//! serialised form and decodes it when a reader asks for it.
//!
//! # Why
//!
//! A decoded k8s-openapi `Pod` is several times the size of its JSON (about 33 KB against
//! 4.8 KB for a typical pod: every string, map and optional field is its own allocation).
//! A store of 50,000 such pods holds 1.66 GB typed; the same pods as JSON bytes hold 240 MB.
//! Users who cache many objects and read few of them (admission webhooks, providers that
//! reconcile on events) would rather pay a decode per read than hold every object decoded.
//!
//! # What is stored
//!
//! Each object is one [`LeanObject`]: its encoding (by default JSON, [`JsonCodec`]) and the
//! values it has in every index of the store, computed at write time while the typed object
//! is at hand. So index maintenance (update, delete, replace) never decodes, and
//! `by_index`/`index_keys` decode only the objects they return.
//!
//! # The hot cache
//!
//! A bounded [`HotCache`] keeps the typed form of recently used objects: the object the
//! writer just stored (the next update of a busy key usually follows soon, and the Indexer
//! needs the *old* object for its `Update` notification: what the cache held) and the objects
//! point reads (`get`, `get_by_key`) decoded. It is keyed by the identity of the stored
//! [`LeanObject`] (an `Arc` the cache also holds, so an address is never reused while cached),
//! so it can never return a stale version: a newer write stores a new `LeanObject`.
//!
//! Choice (stated because readers must not lock, I6): the cache is split into shards, each a
//! `Mutex` taken with `try_lock` only. A reader or the writer that finds its shard busy skips
//! the cache (decodes, or does not remember) instead of waiting. Within a shard, eviction is
//! CLOCK (second chance): an entry read since the hand last passed survives one more round.
//! Multi-object reads (`list`, `by_index`, label selection) look objects up in the cache but
//! do not insert what they decode, so one `list` does not flush the hot set.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    fmt,
    marker::PhantomData,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use serde::{Serialize, de::DeserializeOwned};

/// How a store keeps its objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheMode {
    /// Every object as the decoded `Arc<K>` (the default): reads cost a reference-count
    /// increment; memory is the decoded size of every object.
    #[default]
    Typed,
    /// Every object serialised (I7): about a sixth of the memory of a typed k8s-openapi `Pod`,
    /// reads of objects outside the hot cache decode them.
    Lean(LeanConfig),
}

impl CacheMode {
    /// Lean mode with the default [`LeanConfig`].
    pub fn lean() -> Self {
        CacheMode::Lean(LeanConfig::default())
    }
}

/// Options of the lean mode (I7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeanConfig {
    /// Most objects the hot cache keeps decoded (rounded up to a multiple of the shard count).
    /// Zero disables the cache: every read and every `Update` of a stored key decodes.
    /// Default [`DEFAULT_HOT_OBJECTS`].
    pub hot_objects: usize,
}

/// Default size of the lean mode's hot cache: 1,024 objects (about 34 MB of typed pods of the
/// size the docs use as an example, against 240 MB for 50,000 lean pods).
pub const DEFAULT_HOT_OBJECTS: usize = 1024;

impl Default for LeanConfig {
    fn default() -> Self {
        LeanConfig {
            hot_objects: DEFAULT_HOT_OBJECTS,
        }
    }
}

impl LeanConfig {
    /// With a hot cache of `n` objects (0: none).
    pub fn hot_objects(mut self, n: usize) -> Self {
        self.hot_objects = n;
        self
    }
}

/// Why a [`Codec`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(pub String);

/// Turns objects into bytes and back, for the lean mode (I7).
///
/// `decode(encode(x))` must equal `x` for every object the store is given; the format must be
/// self-describing if `K` is a k8s-openapi type (their `Deserialize` asks for maps by name).
pub trait Codec<K>: Send + Sync {
    /// The compact form of `obj`.
    ///
    /// # Errors
    /// When `obj` cannot be encoded; the store then keeps that object typed.
    fn encode(&self, obj: &K) -> Result<Vec<u8>, CodecError>;

    /// The object `bytes` encode.
    ///
    /// # Errors
    /// When `bytes` do not decode (a codec that does not round-trip `K`); reads then skip the
    /// object and count it in [`LeanStats::decode_failures`].
    fn decode(&self, bytes: &[u8]) -> Result<K, CodecError>;
}

/// The default [`Codec`]: compact JSON with `serde_json`, which every kube resource type
/// round-trips.
pub struct JsonCodec<K>(PhantomData<fn() -> K>);

impl<K> Default for JsonCodec<K> {
    fn default() -> Self {
        JsonCodec(PhantomData)
    }
}

impl<K> fmt::Debug for JsonCodec<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JsonCodec")
    }
}

impl<K: Serialize + DeserializeOwned> Codec<K> for JsonCodec<K> {
    fn encode(&self, obj: &K) -> Result<Vec<u8>, CodecError> {
        serde_json::to_vec(obj).map_err(|e| CodecError(e.to_string()))
    }

    fn decode(&self, bytes: &[u8]) -> Result<K, CodecError> {
        serde_json::from_slice(bytes).map_err(|e| CodecError(e.to_string()))
    }
}

/// One object as the lean store keeps it: its encoding and its index values (one list per
/// index of the store, in the store's index order; computed when it was written).
pub(crate) struct LeanObject {
    pub(crate) bytes: Box<[u8]>,
    pub(crate) values: Box<[Vec<String>]>,
}

/// Counters of a lean store (I7); cumulative since the store was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeanStats {
    /// Objects decoded (reads that missed the hot cache, `Update`s of a cold key).
    pub decodes: u64,
    /// Reads answered by the hot cache.
    pub hits: u64,
    /// Objects that did not decode (skipped by the read). Nonzero means the codec does not
    /// round-trip the type.
    pub decode_failures: u64,
    /// Objects that did not encode; each is kept typed instead.
    pub encode_failures: u64,
    /// Objects stored lean now (the rest, if any, are typed after an encode failure).
    pub objects: u64,
    /// Bytes of their encodings.
    pub bytes: u64,
}

#[derive(Default)]
struct Counters {
    decodes: AtomicU64,
    hits: AtomicU64,
    decode_failures: AtomicU64,
    encode_failures: AtomicU64,
}

/// Shards of the hot cache: enough that two to a few dozen reader threads rarely meet on one.
const SHARDS: usize = 16;

/// What the lean mode shares between the writer and every published version: the codec, the
/// hot cache and the counters.
pub(crate) struct Lean<K> {
    pub(crate) codec: Arc<dyn Codec<K>>,
    cache: HotCache<K>,
    counters: Counters,
}

/// Whether a read that decodes an object remembers it in the hot cache.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Remember {
    /// Point reads and the writer: yes.
    Yes,
    /// Multi-object reads: no (a `list` must not flush the hot set).
    No,
}

impl<K> Lean<K> {
    pub(crate) fn new(codec: Arc<dyn Codec<K>>, config: LeanConfig) -> Self {
        Lean {
            codec,
            cache: HotCache::new(config.hot_objects),
            counters: Counters::default(),
        }
    }

    /// The typed form of `obj`: from the hot cache, else decoded (and remembered if asked).
    /// None when it does not decode (counted).
    pub(crate) fn object(&self, obj: &Arc<LeanObject>, remember: Remember) -> Option<Arc<K>> {
        if let Some(hit) = self.cache.get(obj) {
            self.counters.hits.fetch_add(1, Ordering::Relaxed);
            return Some(hit);
        }
        self.counters.decodes.fetch_add(1, Ordering::Relaxed);
        match self.codec.decode(&obj.bytes) {
            Ok(typed) => {
                let typed = Arc::new(typed);
                if remember == Remember::Yes {
                    self.cache.insert(obj, &typed);
                }
                Some(typed)
            }
            Err(_) => {
                self.counters
                    .decode_failures
                    .fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// The typed form of `obj`, which just left the store: taken out of the hot cache (it
    /// holds only live versions), else decoded.
    pub(crate) fn take(&self, obj: &Arc<LeanObject>) -> Option<Arc<K>> {
        if let Some(hit) = self.cache.remove(obj) {
            self.counters.hits.fetch_add(1, Ordering::Relaxed);
            return Some(hit);
        }
        self.object(obj, Remember::No)
    }

    /// The typed object the hot cache holds for `obj`, without decoding.
    pub(crate) fn cached(&self, obj: &Arc<LeanObject>) -> Option<Arc<K>> {
        self.cache.get(obj)
    }

    /// Remembers `typed` as the decoded form of `obj` (the writer, right after storing it).
    pub(crate) fn remember(&self, obj: &Arc<LeanObject>, typed: &Arc<K>) {
        self.cache.insert(obj, typed);
    }

    pub(crate) fn encode_failed(&self) {
        self.counters
            .encode_failures
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The counters; `objects` and `bytes` are the caller's.
    pub(crate) fn stats(&self, objects: u64, bytes: u64) -> LeanStats {
        LeanStats {
            decodes: self.counters.decodes.load(Ordering::Relaxed),
            hits: self.counters.hits.load(Ordering::Relaxed),
            decode_failures: self.counters.decode_failures.load(Ordering::Relaxed),
            encode_failures: self.counters.encode_failures.load(Ordering::Relaxed),
            objects,
            bytes,
        }
    }
}

/// The identity of a stored [`LeanObject`]: its address (valid as a key while the cache holds
/// the `Arc`).
fn identity(obj: &Arc<LeanObject>) -> usize {
    Arc::as_ptr(obj) as usize
}

/// Bounded cache of decoded objects, sharded, never waited on (see the module docs).
struct HotCache<K> {
    shards: Box<[Mutex<Shard<K>>]>,
    per_shard: usize,
}

struct Shard<K> {
    /// Identity → (the stored object, kept so its address stays unique; its typed form;
    /// CLOCK's reference bit).
    map: HashMap<usize, (Arc<LeanObject>, Arc<K>, bool)>,
    /// CLOCK's ring of identities, the hand at the front.
    ring: VecDeque<usize>,
}

impl<K> HotCache<K> {
    fn new(capacity: usize) -> Self {
        let per_shard = capacity.div_ceil(SHARDS);
        let shards = if per_shard == 0 {
            Vec::new()
        } else {
            (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        map: HashMap::with_capacity(per_shard),
                        ring: VecDeque::with_capacity(per_shard),
                    })
                })
                .collect()
        };
        HotCache {
            shards: shards.into_boxed_slice(),
            per_shard,
        }
    }

    fn shard(&self, id: usize) -> Option<&Mutex<Shard<K>>> {
        if self.shards.is_empty() {
            return None;
        }
        // Allocations are at least 8-byte aligned: mix the address so neighbours spread.
        let h = ((id as u64) >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.shards.get((h >> 32) as usize % SHARDS)
    }

    fn get(&self, obj: &Arc<LeanObject>) -> Option<Arc<K>> {
        let id = identity(obj);
        let mut shard = self.shard(id)?.try_lock().ok()?;
        let (stored, typed, referenced) = shard.map.get_mut(&id)?;
        // The cache holds `stored`, so no other live object has this address.
        debug_assert!(Arc::ptr_eq(stored, obj));
        *referenced = true;
        Some(Arc::clone(typed))
    }

    /// Takes `obj`'s typed form out of the cache (its ring slot is dropped when the hand
    /// passes it).
    fn remove(&self, obj: &Arc<LeanObject>) -> Option<Arc<K>> {
        let id = identity(obj);
        let mut shard = self.shard(id)?.try_lock().ok()?;
        shard.map.remove(&id).map(|(_, typed, _)| typed)
    }

    fn insert(&self, obj: &Arc<LeanObject>, typed: &Arc<K>) {
        let id = identity(obj);
        let Some(Ok(mut shard)) = self.shard(id).map(Mutex::try_lock) else {
            return;
        };
        if let Some(entry) = shard.map.get_mut(&id) {
            entry.1 = Arc::clone(typed);
            entry.2 = true;
            return;
        }
        // `remove` leaves its id in the ring for the hand to drop, but the hand only moves
        // when the shard is full: in a store smaller than the cache, every write of a hot key
        // (a `remove` of the old version, an `insert` of the new) would grow the ring by one id
        // for good. Compact it (stale and repeated ids out, order kept) once it holds twice the
        // shard's capacity: amortised O(1) per insert, and the ring stays bounded.
        if shard.ring.len() >= 2 * self.per_shard {
            let Shard { map, ring } = &mut *shard;
            let mut kept = HashSet::with_capacity(map.len());
            ring.retain(|id| map.contains_key(id) && kept.insert(*id));
        }
        while shard.map.len() >= self.per_shard {
            let Some(victim) = shard.ring.pop_front() else {
                break;
            };
            let keep = match shard.map.get_mut(&victim) {
                Some(entry) if entry.2 => {
                    entry.2 = false;
                    true
                }
                _ => false,
            };
            if keep {
                shard.ring.push_back(victim);
            } else {
                shard.map.remove(&victim);
            }
        }
        shard
            .map
            .insert(id, (Arc::clone(obj), Arc::clone(typed), false));
        shard.ring.push_back(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lean_object() -> Arc<LeanObject> {
        Arc::new(LeanObject {
            bytes: Box::new([]),
            values: Box::new([]),
        })
    }

    /// I7: a hot key written again and again (each write takes the old version out and puts
    /// the new one in) keeps every shard's ring bounded, though the cache never fills.
    #[test]
    fn i7_hot_cache_ring_stays_bounded_when_writes_replace_entries() {
        let cache = HotCache::<u32>::new(4 * SHARDS);
        let typed = Arc::new(7);
        let mut live = lean_object();
        cache.insert(&live, &typed);
        for _ in 0..10_000 {
            let next = lean_object();
            assert!(cache.remove(&live).is_some(), "the live version is cached");
            cache.insert(&next, &typed);
            live = next;
        }
        for shard in cache.shards.iter() {
            let shard = shard.lock().unwrap();
            assert!(shard.map.len() <= cache.per_shard);
            assert!(
                shard.ring.len() <= 2 * cache.per_shard,
                "ring of {} ids for {} entries",
                shard.ring.len(),
                shard.map.len()
            );
        }
        assert!(Arc::ptr_eq(&cache.get(&live).unwrap(), &typed));
    }
}
