//! The notification buffer of one listener (B3), with the P5 accounting of initial-list
//! notifications in the same place as the buffering that can drop them.

use std::{
    collections::{HashSet, VecDeque},
    sync::Arc,
};

use super::{Delivery, SyncTracker};
use crate::{ObjectKey, coalesce::Coalescer, notification::Notification};

enum Inner<K> {
    /// Every notification, in order (the `Block` and `Unbounded` policies).
    Queue(VecDeque<Delivery<K>>),
    /// Per-key merging (the `Coalesce` policy).
    Coalesce {
        c: Coalescer<K>,
        /// Keys whose pending notification is an initial-list Add. Invariant: a key is here
        /// iff the coalescer holds an `Add { is_in_initial_list: true }` for it that was
        /// counted by [`SyncTracker::start`] and not yet popped or cancelled.
        initial_keys: HashSet<ObjectKey>,
    },
}

/// What one listener holds for its handler: a plain queue or a [`Coalescer`], and the handler's
/// [`SyncTracker`], kept exact whatever the buffer merges or drops.
///
/// [`push`](Self::push) counts initial-list notifications as started; a coalescing Delete that
/// cancels a pending initial Add counts it as cancelled; [`pop`](Self::pop) marks what it
/// returns as `initial` exactly when the handler must [`SyncTracker::finished`] it.
pub struct ListenerBuffer<K> {
    inner: Inner<K>,
    tracker: Arc<SyncTracker>,
}

impl<K> ListenerBuffer<K> {
    /// A buffer that keeps every notification in order.
    pub fn queue(tracker: Arc<SyncTracker>) -> Self {
        ListenerBuffer {
            inner: Inner::Queue(VecDeque::new()),
            tracker,
        }
    }

    /// A buffer that merges the notifications of each key (B3 `Coalesce`).
    pub fn coalescing(tracker: Arc<SyncTracker>) -> Self {
        ListenerBuffer {
            inner: Inner::Coalesce {
                c: Coalescer::new(),
                initial_keys: HashSet::new(),
            },
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
        match &mut self.inner {
            Inner::Queue(q) => q.push_back(d),
            Inner::Coalesce { c, initial_keys } => {
                if d.initial {
                    initial_keys.insert(d.key.clone());
                } else if matches!(d.notification, Notification::Delete { .. })
                    && initial_keys.remove(&d.key)
                {
                    // add+delete cancel out (B3): the initial Add will never be handled.
                    self.tracker.cancelled();
                }
                c.push(d.key, d.notification, d.trace);
            }
        }
    }

    /// The next notification for the handler. When `initial` is set, the handler's caller must
    /// report [`SyncTracker::finished`] once the handler returned.
    pub fn pop(&mut self) -> Option<Delivery<K>> {
        match &mut self.inner {
            Inner::Queue(q) => q.pop_front(),
            Inner::Coalesce { c, initial_keys } => {
                let (key, notification, trace) = c.pop()?;
                let initial = matches!(
                    notification,
                    Notification::Add {
                        is_in_initial_list: true,
                        ..
                    }
                ) && initial_keys.remove(&key);
                Some(Delivery {
                    key,
                    notification,
                    trace,
                    initial,
                })
            }
        }
    }

    /// Notifications waiting.
    pub fn len(&self) -> usize {
        match &self.inner {
            Inner::Queue(q) => q.len(),
            Inner::Coalesce { c, .. } => c.len(),
        }
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops everything waiting (shutdown, or a handler that is gone). Dropped initial
    /// notifications stay outstanding: a listener cleared this way never syncs.
    pub fn clear(&mut self) {
        match &mut self.inner {
            Inner::Queue(q) => q.clear(),
            Inner::Coalesce { c, initial_keys } => {
                while c.pop().is_some() {}
                initial_keys.clear();
            }
        }
    }
}
