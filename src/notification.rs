//! Handler notifications (client-go's `addNotification` / `updateNotification` /
//! `deleteNotification`); [`crate::coalesce`] holds the per-key coalescing buffer of docs/semantics.md B3.

use std::{fmt, sync::Arc};

use crate::{
    DeltaObject,
    lean::{DecodeError, LazyObject},
};

/// What a handler is told about one object.
pub enum Notification<K> {
    /// The object appeared. `is_in_initial_list` is true for objects of the informer's first
    /// list and for the replay a late-added handler receives (P4).
    Add {
        /// The new object.
        obj: Arc<K>,
        /// True when delivered as part of the initial list (client-go's `isInInitialList`).
        is_in_initial_list: bool,
    },
    /// The object changed, or a resync re-delivered it (then `old` and `new` are the same `Arc`).
    Update {
        /// The previously cached object.
        old: Arc<K>,
        /// The new object.
        new: Arc<K>,
    },
    /// The object was deleted; a tombstone when the deletion was only found on relist.
    Delete {
        /// The last state of the object, or a `DeletedFinalStateUnknown` tombstone.
        obj: DeltaObject<K>,
    },
}

impl<K> Notification<K> {
    /// The newest object this notification carries (the tombstone's last state for deletes).
    pub fn object(&self) -> &Arc<K> {
        match self {
            Notification::Add { obj, .. } => obj,
            Notification::Update { new, .. } => new,
            Notification::Delete { obj } => obj.object(),
        }
    }

    /// True for an update whose old and new are the same object: a resync, or an object a
    /// relist found unchanged (same uid and resourceVersion, P10).
    pub fn is_resync(&self) -> bool {
        matches!(self, Notification::Update { old, new } if Arc::ptr_eq(old, new))
    }
}

impl<K> Notification<LazyObject<K>> {
    /// The typed notification a typed handler is given: its objects
    /// decoded (in the lean mode, I7, each once, shared with every other reader of the same
    /// lazy object; in the typed mode, reference-count increments). A resync's old and new stay
    /// one `Arc`, so [`is_resync`](Notification::is_resync) still holds.
    ///
    /// An `Update` whose old object does not decode (the server sent an invalid object, then
    /// a valid one) becomes the `Add` a typed-mode informer gives, which never cached the
    /// invalid one.
    ///
    /// # Errors
    /// [`DecodeError`] when the notification's (new) object does not decode into `K`.
    pub fn decode(&self) -> Result<Notification<K>, DecodeError> {
        Ok(match self {
            Notification::Add {
                obj,
                is_in_initial_list,
            } => Notification::Add {
                obj: obj.object()?,
                is_in_initial_list: *is_in_initial_list,
            },
            Notification::Update { old, new } if Arc::ptr_eq(old, new) => {
                let obj = new.object()?;
                Notification::Update {
                    old: Arc::clone(&obj),
                    new: obj,
                }
            }
            // An old object that does not decode was never seen by a typed handler (typed
            // mode drops it when it arrives): its valid successor is an Add, as it would be
            // there.
            Notification::Update { old, new } => match (old.object(), new.object()?) {
                (Ok(old), new) => Notification::Update { old, new },
                (Err(_), obj) => Notification::Add {
                    obj,
                    is_in_initial_list: false,
                },
            },
            Notification::Delete { obj } => Notification::Delete { obj: obj.decode()? },
        })
    }
}

impl<K> Clone for Notification<K> {
    fn clone(&self) -> Self {
        match self {
            Notification::Add {
                obj,
                is_in_initial_list,
            } => Notification::Add {
                obj: Arc::clone(obj),
                is_in_initial_list: *is_in_initial_list,
            },
            Notification::Update { old, new } => Notification::Update {
                old: Arc::clone(old),
                new: Arc::clone(new),
            },
            Notification::Delete { obj } => Notification::Delete { obj: obj.clone() },
        }
    }
}

impl<K> fmt::Debug for Notification<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notification::Add {
                is_in_initial_list, ..
            } => write!(f, "Add(initial={is_in_initial_list})"),
            Notification::Update { .. } if self.is_resync() => f.write_str("Update(resync)"),
            Notification::Update { .. } => f.write_str("Update"),
            Notification::Delete { obj } => write!(f, "Delete({obj:?})"),
        }
    }
}
