//! Deltas: what happened to an object, as queued in the [`DeltaFifo`](crate::fifo::DeltaFifo).

use std::{fmt, sync::Arc};

use crate::{
    DeletedFinalStateUnknown, ObjectKey, TraceId,
    lean::{DecodeError, LazyObject},
};

/// The kind of change a [`Delta`] records (client-go's `DeltaType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeltaType {
    /// The object was added (watch ADDED).
    Added,
    /// The object was updated (watch MODIFIED).
    Updated,
    /// The object was deleted (watch DELETED, or missing from a relist: then a tombstone).
    Deleted,
    /// The object was listed by a relist (`Replace`); client-go's `Replaced`.
    Replaced,
    /// A periodic resync re-delivers the cached object.
    Sync,
    /// The object left the informer's shard (K2): it is removed from the store and no handler
    /// is told, as when a client-go informer is replaced by one with a narrower selector. The
    /// object still exists on the server; only this informer stops following it. No client-go
    /// counterpart (client-go has no sharded informer).
    LeftShard,
}

impl DeltaType {
    /// True for the deltas after which the key is gone from the store: `Deleted` and
    /// `LeftShard`.
    pub fn removes(self) -> bool {
        matches!(self, DeltaType::Deleted | DeltaType::LeftShard)
    }
}

/// The object a delta carries: the object itself, or a tombstone for a deletion that the
/// watch missed ([`DeletedFinalStateUnknown`]).
pub enum DeltaObject<K> {
    /// The object as received.
    Object(Arc<K>),
    /// A deletion found on relist; carries the last known state.
    Tombstone(DeletedFinalStateUnknown<K>),
}

impl<K> DeltaObject<K> {
    /// The object, or the tombstone's last known state.
    pub fn object(&self) -> &Arc<K> {
        match self {
            DeltaObject::Object(o) => o,
            DeltaObject::Tombstone(t) => &t.obj,
        }
    }

    /// True for a [`DeletedFinalStateUnknown`] tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, DeltaObject::Tombstone(_))
    }
}

impl<K> DeltaObject<LazyObject<K>> {
    /// The typed form: the object (or the tombstone's last state) decoded, in the lean mode
    /// (I7); in the typed mode a reference-count increment.
    ///
    /// # Errors
    /// [`DecodeError`] when the stored bytes do not decode into `K`.
    pub fn decode(&self) -> Result<DeltaObject<K>, DecodeError> {
        Ok(match self {
            DeltaObject::Object(o) => DeltaObject::Object(o.object()?),
            DeltaObject::Tombstone(t) => DeltaObject::Tombstone(DeletedFinalStateUnknown {
                key: t.key.clone(),
                obj: t.obj.object()?,
            }),
        })
    }
}

impl<K> Clone for DeltaObject<K> {
    fn clone(&self) -> Self {
        match self {
            DeltaObject::Object(o) => DeltaObject::Object(Arc::clone(o)),
            DeltaObject::Tombstone(t) => DeltaObject::Tombstone(t.clone()),
        }
    }
}

impl<K> fmt::Debug for DeltaObject<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeltaObject::Object(_) => f.write_str("Object(..)"),
            DeltaObject::Tombstone(t) => write!(f, "Tombstone({:?})", t.key),
        }
    }
}

/// One change to one object.
pub struct Delta<K> {
    /// What happened.
    pub delta_type: DeltaType,
    /// The object after the change (for `Deleted`: the last state, possibly a tombstone).
    pub object: DeltaObject<K>,
    /// The watch event (or listed item) this delta came from.
    pub trace: TraceId,
}

impl<K> Delta<K> {
    /// A delta carrying a plain object.
    pub fn new(delta_type: DeltaType, obj: Arc<K>, trace: TraceId) -> Self {
        Delta {
            delta_type,
            object: DeltaObject::Object(obj),
            trace,
        }
    }
}

impl<K> Clone for Delta<K> {
    fn clone(&self) -> Self {
        Delta {
            delta_type: self.delta_type,
            object: self.object.clone(),
            trace: self.trace,
        }
    }
}

impl<K> fmt::Debug for Delta<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}({:?}, {})",
            self.delta_type, self.object, self.trace
        )
    }
}

/// All pending changes of one key, oldest first, as popped from the FIFO.
pub struct Deltas<K> {
    /// The key all these deltas belong to.
    pub key: ObjectKey,
    /// The deltas, oldest first; never empty when handed out by the FIFO.
    pub deltas: Vec<Delta<K>>,
}

impl<K> Deltas<K> {
    /// The oldest delta.
    pub fn oldest(&self) -> Option<&Delta<K>> {
        self.deltas.first()
    }

    /// The newest delta.
    pub fn newest(&self) -> Option<&Delta<K>> {
        self.deltas.last()
    }
}

impl<K> Clone for Deltas<K> {
    fn clone(&self) -> Self {
        Deltas {
            key: self.key.clone(),
            deltas: self.deltas.clone(),
        }
    }
}

impl<K> fmt::Debug for Deltas<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deltas")
            .field("key", &self.key)
            .field("deltas", &self.deltas)
            .finish()
    }
}
