//! What a replica of a sharded controller owns: the handle its workqueue, workers and informers
//! read (issue "Scale out").
//!
//! A [`ShardOwnership`] is published by whoever decides the ranges (a fixed shard with
//! [`ShardOwnership::fixed`], or the Lease-based membership ring) and read, lock-free, on every
//! hot path of the controller:
//!
//! - the workqueue drops keys whose object is not [`owns_value`](ShardOwnership::owns_value);
//! - a worker re-checks ownership right before it writes;
//! - informers cache [`wanted`](OwnershipView::wanted) (what the replica holds plus what is about
//!   to move in, so the cache is warm at the hand-over);
//! - when ranges move away, the controller stops its workers for keys in
//!   [`draining`](OwnershipView::draining) and says so with
//!   [`ack_drained`](ShardOwnership::ack_drained); only then does the ring let another replica
//!   take them;
//! - when ranges move in, [`handover_rv`](ShardOwnership::handover_rv) names the previous owner's
//!   last write, which the cache must have seen before a key there is reconciled (KEP-5647).
//!
//! ```
//! use kinformer::shard::{ShardField, ShardSelector};
//! use kinformer_actors::ShardOwnership;
//! let mine = ShardSelector::nth_of(ShardField::Namespace, 0, 2).unwrap();
//! let ownership = ShardOwnership::fixed(mine.clone());
//! assert_eq!(ownership.view().held, mine);
//! assert_eq!(ownership.owns_value("demo"), mine.matches_value("demo"));
//! ```

use std::{
    sync::{Arc, Mutex},
    time::Instant,
};

use arc_swap::ArcSwap;
use kinformer::{
    resource_version::compare_resource_version,
    shard::{HashRange, ShardField, ShardSelector, fnv1a64},
};

/// One published state of a replica's ownership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnershipView {
    /// Ranges this replica may act on now.
    pub held: ShardSelector,
    /// Ranges its informers should cache: `held`, plus ranges about to move in.
    pub wanted: ShardSelector,
    /// Held ranges the ring has moved away: stop the workers for their keys, then
    /// [`ShardOwnership::ack_drained`]. Still part of `held` until the ack (a write already
    /// started may finish), never acted on anew.
    pub draining: ShardSelector,
    /// Ranges that moved in, each with the previous owner's last write (a resourceVersion) that
    /// the cache must have seen before a key there is reconciled.
    pub handover: Vec<(HashRange, String)>,
    /// Held ranges are valid until then (the replica's Lease may be taken over after it): past
    /// it, [`ShardOwnership::owns_value`] answers false. `None`: no deadline (a fixed shard).
    pub valid_until: Option<Instant>,
    /// Incremented on every publication.
    pub generation: u64,
}

impl OwnershipView {
    fn fixed(selector: ShardSelector) -> Self {
        let field = selector.field();
        OwnershipView {
            wanted: selector.clone(),
            held: selector,
            draining: ShardSelector::nothing(field),
            handover: Vec::new(),
            valid_until: None,
            generation: 0,
        }
    }
}

struct Inner {
    view: ArcSwap<OwnershipView>,
    changed: tokio::sync::watch::Sender<u64>,
    /// Draining ranges the controller has acknowledged (read by the membership ring).
    drained: Mutex<ShardSelector>,
    /// The newest resourceVersion this replica wrote (numeric when the server's RVs are).
    last_write: Mutex<Option<String>>,
    /// Woken by every ack (the ring hands drained ranges over without waiting for a round).
    acked: tokio::sync::Notify,
}

/// A replica's ownership of a sharded kind, shared by its controller, workqueue and informers.
/// Cheap to clone; reads take no lock.
#[derive(Clone)]
pub struct ShardOwnership {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ShardOwnership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardOwnership")
            .field("view", &*self.inner.view.load())
            .finish()
    }
}

impl ShardOwnership {
    /// A fixed shard (static sharding: replica `i` of `n` with [`ShardSelector::nth_of`]); no
    /// Lease, no deadline, nothing ever moves unless [`publish`](Self::publish) is called.
    pub fn fixed(selector: ShardSelector) -> Self {
        let (changed, _) = tokio::sync::watch::channel(0);
        let field = selector.field();
        ShardOwnership {
            inner: Arc::new(Inner {
                view: ArcSwap::from_pointee(OwnershipView::fixed(selector)),
                changed,
                drained: Mutex::new(ShardSelector::nothing(field)),
                last_write: Mutex::new(None),
                acked: tokio::sync::Notify::new(),
            }),
        }
    }

    /// The hashed field.
    pub fn field(&self) -> ShardField {
        self.inner.view.load().held.field()
    }

    /// The current view.
    pub fn view(&self) -> Arc<OwnershipView> {
        self.inner.view.load_full()
    }

    /// Whether this replica may act now on an object whose hashed field (its namespace or uid,
    /// see [`ShardField::value`]) is `value`: held, not draining, and the Lease still valid.
    pub fn owns_value(&self, value: &str) -> bool {
        self.owns_hash(fnv1a64(value), Instant::now())
    }

    /// [`owns_value`](Self::owns_value) for an object's `uid` and `namespace`.
    pub fn owns(&self, uid: Option<&str>, namespace: Option<&str>) -> bool {
        self.owns_value(self.field().value(uid, namespace))
    }

    /// [`owns_value`](Self::owns_value) for a kube object.
    pub fn owns_object<K: kube::Resource>(&self, obj: &K) -> bool {
        let m = obj.meta();
        self.owns(m.uid.as_deref(), m.namespace.as_deref())
    }

    /// Whether `hash` is owned at `now` (the pure form, for tests with a fake clock).
    pub fn owns_hash(&self, hash: u64, now: Instant) -> bool {
        let v = self.inner.view.load();
        v.valid_until.is_none_or(|t| now < t)
            && v.held.contains_hash(hash)
            && !v.draining.contains_hash(hash)
    }

    /// The previous owner's last write for a key whose hashed field is `value`, when its range
    /// moved in: the cache must have seen it before the key is reconciled (KEP-5647).
    pub fn handover_rv(&self, value: &str) -> Option<String> {
        let h = fnv1a64(value);
        self.inner
            .view
            .load()
            .handover
            .iter()
            .find(|(r, _)| r.contains(h))
            .map(|(_, rv)| rv.clone())
    }

    /// Waits for the next publication (returns at once if one happened since the last call on
    /// this receiver). Usable from any runtime.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    /// The controller has stopped its workers for keys in `ranges` (a part of
    /// [`OwnershipView::draining`]); the ring may now hand them over.
    pub fn ack_drained(&self, ranges: &ShardSelector) {
        let mut d = self.inner.drained.lock().unwrap_or_else(|e| e.into_inner());
        match d.union(ranges) {
            Ok(u) => *d = u,
            // Ranges over another field than the ring's: not ours to ack; said, not dropped
            // silently (the ring keeps waiting for the right ack).
            Err(e) => {
                tracing::warn!(error = %e, "ack_drained with ranges over another field ignored")
            }
        }
        drop(d);
        // notify_one keeps a permit when nobody waits: an ack is never missed.
        self.inner.acked.notify_one();
    }

    /// Completes after the next [`ack_drained`](Self::ack_drained) (at once if one came since
    /// the last wait). For the one task that collects acks (the membership ring).
    pub async fn acked(&self) {
        self.inner.acked.notified().await
    }

    /// The draining ranges acknowledged so far (for the ring), and forgets them.
    pub fn take_drained(&self) -> ShardSelector {
        let mut d = self.inner.drained.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *d, ShardSelector::nothing(self.field()))
    }

    /// Records a write this replica made (the resourceVersion the server answered), so the next
    /// owner of its range waits until its cache has seen it.
    pub fn record_write(&self, resource_version: &str) {
        let mut last = self
            .inner
            .last_write
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Ordered as apimachinery's `CompareResourceVersion`; one that does not compare
        // (not a server-issued integer) replaces the last, as nothing better is known.
        let newer = last.as_deref().is_none_or(|prev| {
            compare_resource_version(resource_version, prev)
                .map_or(true, |o| o == std::cmp::Ordering::Greater)
        });
        if newer {
            *last = Some(resource_version.to_string());
        }
    }

    /// The newest resourceVersion this replica wrote.
    pub fn last_write(&self) -> Option<String> {
        self.inner
            .last_write
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Publishes a new view (the membership ring does; tests and static setups may). The
    /// generation is set here.
    pub fn publish(&self, mut view: OwnershipView) {
        let generation = self.inner.view.load().generation + 1;
        view.generation = generation;
        self.inner.view.store(Arc::new(view));
        self.inner.changed.send_replace(generation);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn draining_and_expired_ranges_are_not_owned() {
        let all = ShardSelector::everything(ShardField::Namespace);
        let o = ShardOwnership::fixed(all.clone());
        let now = Instant::now();
        let h = fnv1a64("demo");
        assert!(o.owns_hash(h, now));
        let rx = o.subscribe();
        let mut v = (*o.view()).clone();
        v.draining = all.clone();
        o.publish(v);
        assert!(rx.has_changed().unwrap());
        assert!(!o.owns_hash(h, now), "draining is not acted on");
        let mut v = (*o.view()).clone();
        v.draining = ShardSelector::nothing(ShardField::Namespace);
        v.valid_until = Some(now + Duration::from_secs(1));
        o.publish(v);
        assert!(o.owns_hash(h, now));
        assert!(
            !o.owns_hash(h, now + Duration::from_secs(1)),
            "lease ran out"
        );
        assert_eq!(o.view().generation, 2);
    }

    #[test]
    fn acks_accumulate_and_last_write_keeps_the_newest() {
        let o = ShardOwnership::fixed(ShardSelector::everything(ShardField::Uid));
        o.ack_drained(&ShardSelector::nth_of(ShardField::Uid, 0, 4).unwrap());
        o.ack_drained(&ShardSelector::nth_of(ShardField::Uid, 1, 4).unwrap());
        assert_eq!(
            o.take_drained(),
            ShardSelector::nth_of(ShardField::Uid, 0, 2).unwrap()
        );
        assert!(o.take_drained().is_empty());
        o.record_write("17");
        o.record_write("9");
        assert_eq!(o.last_write().as_deref(), Some("17"));
        o.record_write("170");
        assert_eq!(o.last_write().as_deref(), Some("170"));
    }
}
