//! The notification buffer of one listener (B3), with the P5 accounting of initial-list
//! notifications in the same place as the buffering that can drop them.
//!
//! Under the `Coalesce` policy the buffer is a plain queue while the handler keeps up, and
//! merges per key only under a backlog: a push that finds `backlog` notifications already
//! waiting folds the whole queue, in order, into a [`Coalescer`], which takes every later push
//! until the handler has drained it; then the buffer is a plain queue again. So a handler that
//! keeps up pays what a `VecDeque` costs (no hashing, no key copies), and a slow one is still
//! bounded by its keys.

use std::{
    collections::{HashSet, VecDeque},
    sync::Arc,
};

use super::{Delivery, SyncTracker};
use crate::{ObjectKey, coalesce::Coalescer, notification::Notification};

/// Keys the coalescer's map keeps room for once drained, whatever the backlog.
const KEPT_KEYS: usize = 64;

/// The merging side of a `Coalesce` buffer.
struct Merging<K> {
    c: Coalescer<K>,
    /// Keys whose pending notification is an initial-list Add. Invariant: a key is here
    /// iff the coalescer holds an `Add { is_in_initial_list: true }` for it that was
    /// counted by [`SyncTracker::start`] and not yet popped or cancelled.
    initial_keys: HashSet<ObjectKey>,
    /// Notifications that may wait unmerged: a push that finds this many in the queue starts
    /// merging.
    backlog: usize,
}

impl<K> Merging<K> {
    /// Merging now: the coalescer holds something, and then the queue is empty (everything
    /// waits in `c`). Derived, so it cannot drift from what `c` holds.
    fn active(&self) -> bool {
        !self.c.is_empty()
    }

    /// Queues `d` (already counted by the tracker when initial) in the coalescer, cancelling
    /// the pending initial Add of its key when `d` is a Delete (add+delete, B3).
    fn push(&mut self, d: Delivery<K>, tracker: &SyncTracker) {
        if d.initial {
            self.initial_keys.insert(d.key.clone());
        } else if matches!(d.notification, Notification::Delete { .. })
            && self.initial_keys.remove(&d.key)
        {
            // add+delete cancel out (B3): the initial Add will never be handled.
            tracker.cancelled();
        }
        self.c.push(d.key, d.notification, d.trace);
    }

    /// Back to the plain queue once nothing waits (popped, or cancelled by add+delete). Gives
    /// back what a long backlog grew, keeping room for the next backlog of `backlog` keys (at
    /// least [`KEPT_KEYS`], so that a small backlog does not free and regrow the map each time).
    fn stop_if_drained(&mut self) {
        if self.c.is_empty() {
            self.c.shrink_to(self.backlog.max(KEPT_KEYS));
            self.initial_keys.shrink_to_fit();
        }
    }

    fn pop(&mut self) -> Option<Delivery<K>> {
        let (key, notification, trace) = self.c.pop()?;
        let initial = matches!(
            notification,
            Notification::Add {
                is_in_initial_list: true,
                ..
            }
        ) && self.initial_keys.remove(&key);
        self.stop_if_drained();
        Some(Delivery {
            key,
            notification,
            trace,
            initial,
        })
    }
}

/// What one listener holds for its handler: a plain queue, merged per key by a [`Coalescer`]
/// under a backlog when the policy is `Coalesce`, and the handler's [`SyncTracker`], kept exact
/// whatever the buffer merges or drops.
///
/// [`push`](Self::push) counts initial-list notifications as started; a coalescing Delete that
/// cancels a pending initial Add counts it as cancelled; [`pop`](Self::pop) marks what it
/// returns as `initial` exactly when the handler must [`SyncTracker::finished`] it.
pub struct ListenerBuffer<K> {
    /// Every notification in order; empty while merging.
    queue: VecDeque<Delivery<K>>,
    /// `None` for a plain queue (the `Block` and `Unbounded` policies).
    merging: Option<Merging<K>>,
    tracker: Arc<SyncTracker>,
}

impl<K> ListenerBuffer<K> {
    /// A buffer that keeps every notification in order.
    pub fn queue(tracker: Arc<SyncTracker>) -> Self {
        ListenerBuffer {
            queue: VecDeque::new(),
            merging: None,
            tracker,
        }
    }

    /// A buffer that merges the notifications of each key (B3 `Coalesce`) once `backlog`
    /// notifications wait: up to `backlog` wait unmerged, in a plain queue, as under
    /// [`queue`](Self::queue); a push that finds `backlog` waiting folds them all, in order, into
    /// a [`Coalescer`], which takes every later push until the handler drained it. With
    /// `backlog` 0 every notification is merged.
    pub fn coalescing(tracker: Arc<SyncTracker>, backlog: usize) -> Self {
        ListenerBuffer {
            queue: VecDeque::new(),
            merging: Some(Merging {
                c: Coalescer::new(),
                initial_keys: HashSet::new(),
                backlog,
            }),
            tracker,
        }
    }

    /// The tracker this buffer reports to.
    pub fn tracker(&self) -> &Arc<SyncTracker> {
        &self.tracker
    }

    /// Accepts one notification from the processor.
    pub fn push(&mut self, d: Delivery<K>) {
        if d.initial {
            self.tracker.start();
        }
        match &mut self.merging {
            Some(m) if m.active() => {
                m.push(d, &self.tracker);
                m.stop_if_drained();
            }
            Some(m) if self.queue.len() >= m.backlog => {
                // A backlog: from now on, merge, starting with what waits, in order.
                for q in self.queue.drain(..) {
                    m.push(q, &self.tracker);
                }
                m.push(d, &self.tracker);
                m.stop_if_drained();
            }
            _ => self.queue.push_back(d),
        }
    }

    /// The next notification for the handler. When `initial` is set, the handler's caller must
    /// report [`SyncTracker::finished`] once the handler returned.
    pub fn pop(&mut self) -> Option<Delivery<K>> {
        match &mut self.merging {
            Some(m) if m.active() => m.pop(),
            _ => self.queue.pop_front(),
        }
    }

    /// Notifications waiting.
    pub fn len(&self) -> usize {
        match &self.merging {
            Some(m) if m.active() => m.c.len(),
            _ => self.queue.len(),
        }
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True while a `Coalesce` buffer merges (from a push that found its backlog waiting until
    /// the handler drained it).
    pub fn is_merging(&self) -> bool {
        self.merging.as_ref().is_some_and(|m| m.active())
    }

    /// Notifications merged away since the buffer was created (cumulative, never delivered on
    /// their own): one per push folded into a pending notification of its key, two per Delete
    /// that cancelled a pending Add (neither is delivered). Always 0 for a plain queue.
    pub fn coalesced(&self) -> u64 {
        self.merging.as_ref().map_or(0, |m| {
            let s = m.c.stats();
            s.merged + 2 * s.cancelled
        })
    }

    /// Drops everything waiting (shutdown, or a handler that is gone). Dropped initial
    /// notifications stay outstanding: a listener cleared this way never syncs.
    pub fn clear(&mut self) {
        self.queue.clear();
        if let Some(m) = &mut self.merging {
            while m.c.pop().is_some() {}
            m.initial_keys.clear();
        }
    }
}
