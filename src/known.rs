//! The read-only view of the store that the [`DeltaFifo`](crate::fifo::DeltaFifo) consults
//! (client-go's `KeyListerGetter` / `knownObjects`): to ignore deletes of unknown objects (F3),
//! to find keys missing from a relist (F4), and to resync (F7).

use std::{collections::HashMap, sync::Arc};

use crate::ObjectKey;

/// A read-only view of the objects the consumer of the FIFO already holds.
///
/// Implemented by [`Lister`](crate::store::Lister) (lock-free reads of the indexed store) and,
/// for tests and simple uses, by a `HashMap<ObjectKey, Arc<K>>`.
pub trait KnownObjects<K>: Send + Sync {
    /// Every key currently held.
    fn list_keys(&self) -> Vec<ObjectKey>;
    /// The object held under `key`, if any.
    fn get_by_key(&self, key: &str) -> Option<Arc<K>>;
}

impl<K: Send + Sync> KnownObjects<K> for HashMap<ObjectKey, Arc<K>> {
    fn list_keys(&self) -> Vec<ObjectKey> {
        self.keys().cloned().collect()
    }

    fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.get(key).cloned()
    }
}
