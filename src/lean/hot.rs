//! The hot cache of the lean mode (docs/semantics.md I7): a bounded set of recently used
//! objects kept decoded, keyed by the identity of the stored [`RawObject`].
//!
//! Keyed by identity (the cache holds the `Arc`, so an address is never reused while cached),
//! it can never return a stale version: a newer write stores a new `RawObject`.
//!
//! Choice (stated because readers must not lock, I6): the cache is split into shards, each a
//! `Mutex` taken with `try_lock` only. A reader or the writer that finds its shard busy skips
//! the cache (decodes, or does not remember) instead of waiting. Within a shard, eviction is
//! CLOCK (second chance): an entry read since the hand last passed survives one more round.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex},
};

use super::codec::RawObject;

/// Shards of the hot cache: enough that two to a few dozen reader threads rarely meet on one.
const SHARDS: usize = 16;

/// The identity of a stored [`RawObject`]: its address (valid as a key while the cache holds
/// the `Arc`).
fn identity(obj: &Arc<RawObject>) -> usize {
    Arc::as_ptr(obj) as usize
}

/// Bounded cache of decoded objects, sharded, never waited on (see the module docs).
pub(crate) struct HotCache<K> {
    shards: Box<[Mutex<Shard<K>>]>,
    per_shard: usize,
}

struct Shard<K> {
    /// Identity → (the stored object, kept so its address stays unique; its typed form;
    /// CLOCK's reference bit).
    map: HashMap<usize, (Arc<RawObject>, Arc<K>, bool)>,
    /// CLOCK's ring of identities, the hand at the front.
    ring: VecDeque<usize>,
}

impl<K> HotCache<K> {
    /// A cache of at most `capacity` objects (rounded up to a multiple of the shard count;
    /// zero: no cache).
    pub(crate) fn new(capacity: usize) -> Self {
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

    /// The typed form of `obj`, if cached (marks it used).
    pub(crate) fn get(&self, obj: &Arc<RawObject>) -> Option<Arc<K>> {
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
    pub(crate) fn remove(&self, obj: &Arc<RawObject>) -> Option<Arc<K>> {
        let id = identity(obj);
        let mut shard = self.shard(id)?.try_lock().ok()?;
        shard.map.remove(&id).map(|(_, typed, _)| typed)
    }

    /// Remembers `typed` as the decoded form of `obj`. The objects it evicts are dropped
    /// after the shard is unlocked: freeing a decoded object takes microseconds, and readers
    /// that find the shard busy skip the cache.
    pub(crate) fn insert(&self, obj: &Arc<RawObject>, typed: &Arc<K>) {
        let _evicted = self.insert_evicting(obj, typed);
    }

    fn insert_evicting(&self, obj: &Arc<RawObject>, typed: &Arc<K>) -> Vec<Arc<K>> {
        let mut evicted = Vec::new();
        let id = identity(obj);
        let Some(Ok(mut shard)) = self.shard(id).map(Mutex::try_lock) else {
            return evicted;
        };
        if let Some(entry) = shard.map.get_mut(&id) {
            evicted.push(std::mem::replace(&mut entry.1, Arc::clone(typed)));
            entry.2 = true;
            return evicted;
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
            } else if let Some((_, typed, _)) = shard.map.remove(&victim) {
                evicted.push(typed);
            }
        }
        shard
            .map
            .insert(id, (Arc::clone(obj), Arc::clone(typed), false));
        shard.ring.push_back(id);
        evicted
    }

    /// Objects cached now (for the counters; skips shards busy at the moment).
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .filter_map(|s| s.try_lock().ok().map(|s| s.map.len()))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lean::codec::Encoder;

    fn raw() -> Arc<RawObject> {
        Arc::new(
            Encoder::new(1, false, false)
                .encode(br#"{"metadata":{"name":"a"}}"#)
                .expect("encodes"),
        )
    }

    /// I7: a hot key written again and again (each write takes the old version out and puts
    /// the new one in) keeps every shard's ring bounded, though the cache never fills.
    #[test]
    fn i7_hot_cache_ring_stays_bounded_when_writes_replace_entries() {
        let cache = HotCache::<u32>::new(4 * SHARDS);
        let typed = Arc::new(7);
        let mut live = raw();
        cache.insert(&live, &typed);
        for _ in 0..10_000 {
            let next = raw();
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

    #[test]
    fn i7_hot_cache_is_bounded_and_keeps_what_is_read() {
        let cache = HotCache::<u32>::new(SHARDS);
        let objs: Vec<_> = (0..200).map(|_| raw()).collect();
        for (i, o) in objs.iter().enumerate() {
            cache.insert(o, &Arc::new(i as u32));
        }
        assert!(cache.len() <= SHARDS, "{} cached", cache.len());
        let zero = HotCache::<u32>::new(0);
        zero.insert(&objs[0], &Arc::new(1));
        assert!(
            zero.get(&objs[0]).is_none(),
            "a cache of zero keeps nothing"
        );
    }
}
