//! The per-key coalescing buffer of docs/semantics.md B3: the `Coalesce` overflow policy of a slow
//! handler.
//!
//! When a handler's mailbox is full, its listener parks notifications here instead of
//! blocking the informer or growing an unbounded ring. Pending notifications of the same
//! object are merged so that memory is bounded by the number of distinct keys (at most two
//! notifications per key), while a handler that applies what it pops still ends in the same
//! state as if it had seen every notification.
//!
//! # Merge rules (incoming notification onto the newest pending one of its key)
//!
//! | pending          | incoming | result                                 |
//! |------------------|----------|----------------------------------------|
//! | Add              | Update   | Add(newest object, the Add's `is_in_initial_list`) |
//! | Update(o1, n1)   | Update(o2, n2) | Update(o1, n2)                   |
//! | Add              | Delete   | nothing (the key is dropped)           |
//! | Update           | Delete   | Delete                                 |
//! | Delete           | Add      | Delete, Add (both kept, in order)      |
//! | Delete, Add      | Update   | Delete, Add(newest)                    |
//! | Delete, Add      | Delete   | the first Delete                       |
//!
//! Why:
//! - **add+update→add**: the handler never saw the object, so "it appeared, and this is what
//!   it looks like now" is the whole story; `is_in_initial_list` is about *when* it appeared,
//!   which the Add knows.
//! - **update+update→update(oldest old, newest new)**: `old` must be what the handler last
//!   saw (so diffs such as "spec changed" still fire) and `new` the current state. Resync
//!   updates (`old` and `new` the same object) merge the same way: a resync of a pending
//!   change is that change.
//! - **add+delete→nothing**: the handler never saw the object and it is gone; telling it
//!   about an object that no longer exists would only make it act on stale state.
//! - **update+delete→delete**: the handler knew the object; it is gone; the delete carries the
//!   final state.
//! - **delete+add→both**: a deleted-and-recreated object is a *different* object (new uid);
//!   a handler must see the delete (to release what it held for the old one) before the add.
//!   This is why a key holds at most two notifications: only `[Delete, Add]` has two.
//! - **delete,add+delete→delete**: the recreated object cancels out (as add+delete); the
//!   handler still learns that the object it knew is gone, carried by the first Delete,
//!   whose object is the one the handler knew.
//!
//! Sequences that a well-formed informer never produces (an add over a pending add or update,
//! an update or a second delete over a pending delete) are still handled totally, without
//! panicking and within the same bound: add+add merges like add+update, update+add like
//! update+update (`new` = the added object), delete+update becomes delete+add, and
//! delete+delete keeps one Delete (the one carrying a real object over a tombstone, as the
//! FIFO's F2).
//!
//! Every merge keeps the **newest trace id**, so the trace shows the event the handler
//! finally acts on. Keys are popped in order of their first arrival (FIFO); a `[Delete, Add]`
//! key yields its Delete, then keeps its place for the Add.
//!
//! ```
//! use std::sync::Arc;
//! use kinformer::{ObjectKey, TraceId, coalesce::Coalescer, notification::Notification};
//!
//! let key = ObjectKey::new(Some("ns"), "a");
//! let mut c = Coalescer::new();
//! let v1 = Arc::new("v1");
//! let v2 = Arc::new("v2");
//! c.push(key.clone(), Notification::Add { obj: v1.clone(), is_in_initial_list: false }, TraceId(1));
//! c.push(key.clone(), Notification::Update { old: v1, new: v2.clone() }, TraceId(2));
//! assert_eq!(c.len(), 1);
//! let (k, n, trace) = c.pop().unwrap();
//! assert_eq!((k, trace), (key, TraceId(2)));
//! assert!(matches!(n, Notification::Add { obj, .. } if Arc::ptr_eq(&obj, &v2)));
//! assert!(c.is_empty());
//! ```

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    sync::Arc,
};

use crate::{DeltaObject, ObjectKey, TraceId, notification::Notification};

/// Counters of a [`Coalescer`] since it was created.
///
/// Invariant: `len() == pushed - merged - 2 * cancelled - popped` (a cancelling delete removes
/// the pending add and is not queued itself).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoalesceStats {
    /// Notifications pushed.
    pub pushed: u64,
    /// Pushes folded into a pending notification of the same key.
    pub merged: u64,
    /// Pushes (deletes) that cancelled a pending add: neither is delivered.
    pub cancelled: u64,
    /// Notifications popped.
    pub popped: u64,
}

struct Pending<K> {
    notification: Notification<K>,
    trace: TraceId,
}

/// The pending notifications of one key: one, or a Delete followed by an Add.
struct Entry<K> {
    /// Arrival order of the key; the position in `Coalescer::order`.
    seq: u64,
    first: Pending<K>,
    /// Only ever `Some(Add)` after a `first` Delete.
    second: Option<Pending<K>>,
}

/// A per-key buffer of pending notifications for one slow handler (docs/semantics.md B3): bounded by
/// the number of distinct keys, popped in order of each key's first arrival. See the module
/// documentation for the merge rules.
pub struct Coalescer<K> {
    entries: HashMap<ObjectKey, Entry<K>>,
    /// Keys by arrival sequence: a BTreeMap (not a VecDeque with lazy deletion) so that a key
    /// cancelled and re-added any number of times never leaves stale entries: memory stays
    /// bounded by the live keys.
    order: BTreeMap<u64, ObjectKey>,
    next_seq: u64,
    pending: usize,
    stats: CoalesceStats,
}

impl<K> Default for Coalescer<K> {
    fn default() -> Self {
        Coalescer {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
            pending: 0,
            stats: CoalesceStats::default(),
        }
    }
}

impl<K> fmt::Debug for Coalescer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coalescer")
            .field("keys", &self.entries.len())
            .field("pending", &self.pending)
            .field("stats", &self.stats)
            .finish()
    }
}

/// What a push does to the pending notifications of its key.
enum Outcome<K> {
    /// Folded into the newest pending notification (which was replaced in place).
    Merged,
    /// A pending Add was cancelled by a Delete.
    Cancelled,
    /// Queued after the pending Delete (`[Delete, Add]`).
    Appended(Pending<K>),
}

impl<K> Coalescer<K> {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `n` for `key`, merging it with the key's pending notifications (see the module
    /// documentation for the rules).
    pub fn push(&mut self, key: ObjectKey, n: Notification<K>, trace: TraceId) {
        self.stats.pushed += 1;
        let incoming = Pending {
            notification: n,
            trace,
        };
        let Some(entry) = self.entries.get_mut(&key) else {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.order.insert(seq, key.clone());
            self.entries.insert(
                key,
                Entry {
                    seq,
                    first: incoming,
                    second: None,
                },
            );
            self.pending += 1;
            return;
        };
        let newest = entry.second.as_mut().unwrap_or(&mut entry.first);
        match merge(newest, incoming) {
            Outcome::Merged => self.stats.merged += 1,
            Outcome::Appended(add) => {
                entry.second = Some(add);
                self.pending += 1;
            }
            Outcome::Cancelled => {
                self.stats.cancelled += 1;
                self.pending -= 1;
                match entry.second.take() {
                    // [Delete, Add] + Delete: the first Delete stays, with the newest trace.
                    Some(_) => entry.first.trace = trace,
                    None => {
                        let seq = entry.seq;
                        self.entries.remove(&key);
                        self.order.remove(&seq);
                    }
                }
            }
        }
    }

    /// The oldest pending notification (by first arrival of its key).
    pub fn pop(&mut self) -> Option<(ObjectKey, Notification<K>, TraceId)> {
        let first = self.order.first_entry()?;
        let key = first.get().clone();
        let Some(entry) = self.entries.get_mut(&key) else {
            // Unreachable: `order` and `entries` are updated together. Heal rather than panic.
            first.remove();
            return self.pop();
        };
        let popped = match entry.second.take() {
            // [Delete, Add]: hand out the Delete; the Add keeps the key's place at the front.
            Some(add) => std::mem::replace(&mut entry.first, add),
            None => {
                first.remove();
                match self.entries.remove(&key) {
                    Some(entry) => entry.first,
                    None => return None, // unreachable: just looked it up
                }
            }
        };
        self.pending -= 1;
        self.stats.popped += 1;
        Some((key, popped.notification, popped.trace))
    }

    /// Number of pending notifications (at most `2 * keys()`).
    pub fn len(&self) -> usize {
        self.pending
    }

    /// Number of keys with pending notifications.
    pub fn keys(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.pending == 0
    }

    /// Counters since creation.
    pub fn stats(&self) -> CoalesceStats {
        self.stats
    }

    /// Lowers the capacity of the per-key map to at most what `keys` keys need (or what the
    /// keys pending now need, if more): after a long backlog, gives its memory back.
    pub fn shrink_to(&mut self, keys: usize) {
        self.entries.shrink_to(keys);
    }
}

/// Folds `incoming` into `newest`, the newest pending notification of the key.
fn merge<K>(newest: &mut Pending<K>, incoming: Pending<K>) -> Outcome<K> {
    use Notification::{Add, Delete, Update};
    let trace = incoming.trace;
    let merged = match (&newest.notification, incoming.notification) {
        // add+update → add(newest object, keep is_in_initial_list); add+add (ill-formed) alike.
        (
            Add {
                is_in_initial_list, ..
            },
            Update { new: obj, .. } | Add { obj, .. },
        ) => Add {
            obj,
            is_in_initial_list: *is_in_initial_list,
        },
        // add+delete → nothing.
        (Add { .. }, Delete { .. }) => return Outcome::Cancelled,
        // update+update → update(oldest old, newest new); resyncs alike; update+add
        // (ill-formed) alike with the added object as new.
        (Update { old, .. }, Update { new, .. } | Add { obj: new, .. }) => Update {
            old: Arc::clone(old),
            new,
        },
        // update+delete → delete (carrying the final state).
        (Update { .. }, Delete { obj }) => Delete { obj },
        // delete+add → keep both: a recreated object is a different object.
        (Delete { .. }, add @ Add { .. }) => {
            return Outcome::Appended(Pending {
                notification: add,
                trace,
            });
        }
        // delete+update (ill-formed: an update of a deleted object) → delete+add.
        (Delete { .. }, Update { new, .. }) => {
            return Outcome::Appended(Pending {
                notification: Add {
                    obj: new,
                    is_in_initial_list: false,
                },
                trace,
            });
        }
        // delete+delete (ill-formed) → one delete; prefer a real object over a tombstone (F2).
        (Delete { obj: kept }, Delete { obj }) => Delete {
            obj: if kept.is_tombstone() && !obj.is_tombstone() {
                obj
            } else {
                DeltaObject::clone(kept)
            },
        },
    };
    newest.notification = merged;
    newest.trace = trace;
    Outcome::Merged
}

#[cfg(test)]
mod tests;
