//! The waiting set of the delaying queue (docs/semantics.md W2).
//!
//! client-go's `delaying_queue.go` keeps a heap of `waitFor{data, readyAt}` plus a map from
//! item to entry, so that re-adding a waiting item only ever moves its deadline *earlier*.
//! Here the heap is a `BTreeMap` ordered by `(deadline, sequence)`: ties fire in the order the
//! items first started waiting, which makes promotion deterministic.

use std::{
    collections::{BTreeMap, HashMap},
    hash::Hash,
    time::{Duration, Instant},
};

/// `now + delay`, saturating to a far-future instant when the sum is not representable
/// (e.g. `Duration::MAX` from a limiter that says "never").
pub(crate) fn deadline(now: Instant, delay: Duration) -> Instant {
    const FALLBACKS: [Duration; 4] = [
        Duration::from_secs(100 * 365 * 24 * 3600),
        Duration::from_secs(365 * 24 * 3600),
        Duration::from_secs(24 * 3600),
        Duration::from_secs(3600),
    ];
    now.checked_add(delay)
        .or_else(|| {
            FALLBACKS
                .iter()
                .filter(|f| **f < delay)
                .find_map(|f| now.checked_add(*f))
        })
        .unwrap_or(now)
}

/// Delayed items by deadline; each item at most once, with its earliest deadline.
#[derive(Debug, Clone)]
pub(crate) struct Waiting<T> {
    by_deadline: BTreeMap<(Instant, u64), T>,
    by_item: HashMap<T, (Instant, u64)>,
    next_seq: u64,
}

impl<T: Clone + Eq + Hash> Waiting<T> {
    pub(crate) fn new() -> Self {
        Self {
            by_deadline: BTreeMap::new(),
            by_item: HashMap::new(),
            next_seq: 0,
        }
    }

    /// Makes `item` wait until `ready_at`, or keeps its current deadline if that is earlier.
    /// Returns the deadline in force.
    pub(crate) fn insert(&mut self, item: T, ready_at: Instant) -> Instant {
        if let Some(entry) = self.by_item.get_mut(&item) {
            let (current, seq) = *entry;
            if ready_at < current {
                if let Some(item) = self.by_deadline.remove(&(current, seq)) {
                    self.by_deadline.insert((ready_at, seq), item);
                }
                entry.0 = ready_at;
                return ready_at;
            }
            return current;
        }
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.by_deadline.insert((ready_at, seq), item.clone());
        self.by_item.insert(item, (ready_at, seq));
        ready_at
    }

    /// Removes and returns the earliest item whose deadline is at or before `now`, with its
    /// deadline.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(T, Instant)> {
        let (&(at, _), _) = self.by_deadline.first_key_value()?;
        if at > now {
            return None;
        }
        let ((at, _), item) = self.by_deadline.pop_first()?;
        self.by_item.remove(&item);
        Some((item, at))
    }

    /// The earliest deadline.
    pub(crate) fn next_ready_at(&self) -> Option<Instant> {
        self.by_deadline.first_key_value().map(|(&(at, _), _)| at)
    }

    /// The deadline of `item`, if it is waiting.
    pub(crate) fn ready_at(&self, item: &T) -> Option<Instant> {
        self.by_item.get(item).map(|&(at, _)| at)
    }

    pub(crate) fn len(&self) -> usize {
        self.by_item.len()
    }

    /// Removes the items `keep` refuses; returns them.
    pub(crate) fn remove_unless(&mut self, keep: impl Fn(&T) -> bool) -> Vec<T> {
        let gone: Vec<T> = self.by_item.keys().filter(|i| !keep(i)).cloned().collect();
        for item in &gone {
            if let Some(at) = self.by_item.remove(item) {
                self.by_deadline.remove(&at);
            }
        }
        gone
    }

    pub(crate) fn clear(&mut self) {
        self.by_deadline.clear();
        self.by_item.clear();
    }
}
