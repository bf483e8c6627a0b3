//! The etcd-like store: one global resourceVersion, objects per resource in persistent maps
//! (cheap snapshots for paginated lists), and a per-resource window of recent events (the watch
//! cache) that watches replay from and continue tokens are checked against.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{BufMut, BytesMut};
use imbl::OrdMap;
use serde_json::Value;
use tokio::sync::watch;

use crate::apimachinery::errors::ApiError;
use crate::apimachinery::schema::{Registry, ResourceDef};
use crate::storage::object::{Key, StoredObject, meta_mut};

/// A persistent map of one resource's objects.
pub(crate) type ObjectMap = OrdMap<Key, Arc<StoredObject>>;

/// Watch event types stored in the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// The wire name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the watch-cache window.
#[derive(Debug)]
pub(crate) struct Event {
    pub rv: u64,
    pub etype: EventType,
    /// The object after the change (for DELETED: the last state, at the deletion's RV).
    pub object: Arc<StoredObject>,
    /// The object before the change (None for ADDED).
    pub prev: Option<Arc<StoredObject>>,
}

/// Appends one watch event line: `{"type":T,"object":{...}}\n`.
pub(crate) fn write_event_line(
    def: &ResourceDef,
    etype: &str,
    obj: &StoredObject,
    out: &mut BytesMut,
) {
    out.put_slice(b"{\"type\":\"");
    out.put_slice(etype.as_bytes());
    out.put_slice(b"\",\"object\":");
    obj.write_full(def, out);
    out.put_slice(b"}\n");
}

/// The window start moved past a requested resourceVersion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expired {
    /// The oldest resourceVersion still served.
    pub oldest: u64,
}

#[derive(Debug, Default)]
struct ResourceState {
    objects: ObjectMap,
    log: VecDeque<Arc<Event>>,
    /// Every event of this resource with rv > log_start is in `log`.
    log_start: u64,
    /// An event left `log` since it was started (at creation or by `compact`): the watch
    /// cache's `removedEventSinceRelist`.
    trimmed: bool,
    /// Recent list snapshots for continue tokens, newest last.
    snapshots: VecDeque<(u64, ObjectMap)>,
}

const SNAPSHOT_CACHE: usize = 8;

#[derive(Debug)]
struct Inner {
    rv: u64,
    resources: Vec<ResourceState>,
}

/// What a write closure decided.
pub(crate) enum Write {
    /// Store this object (its metadata is final except resourceVersion, which the store sets).
    Put(Value),
    /// Remove the current object (the DELETED event carries its last stored state).
    Delete,
    /// Change nothing.
    Noop,
}

/// What a write did.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    Created(Arc<StoredObject>),
    Updated(Arc<StoredObject>),
    Deleted(Arc<StoredObject>),
    Unchanged(Option<Arc<StoredObject>>),
}

/// The store shared by the server, faults and churn.
#[derive(Debug)]
pub(crate) struct Store {
    pub registry: Registry,
    window: usize,
    inner: Mutex<Inner>,
    notifiers: Vec<watch::Sender<u64>>,
    /// kube-apiserver's `--enable-garbage-collector` (the generic store's
    /// `EnableGarbageCollection`): whether deletes add the `orphan`/`foregroundDeletion`
    /// finalizers a garbage collector removes. The registry reads it; the store only keeps it,
    /// beside the objects, so that every layer holding the store sees the same setting.
    garbage_collection: std::sync::atomic::AtomicBool,
}

impl Store {
    /// An empty store over `registry` with a watch window of `window` events per resource.
    pub(crate) fn new(registry: Registry, window: usize) -> Self {
        let n = registry.all().len();
        Self {
            registry,
            window: window.max(1),
            inner: Mutex::new(Inner {
                rv: 1,
                resources: (0..n).map(|_| ResourceState::default()).collect(),
            }),
            notifiers: (0..n).map(|_| watch::channel(0).0).collect(),
            garbage_collection: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether a garbage collector runs (see the field): deletes with `propagationPolicy`
    /// `Foreground` or `Orphan` then leave the finalizer it removes.
    pub(crate) fn garbage_collection(&self) -> bool {
        self.garbage_collection
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Turns the garbage-collection finalizers on or off (set once, before serving).
    pub(crate) fn set_garbage_collection(&self, on: bool) {
        self.garbage_collection
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps half-written (every mutation is a
        // single insert/remove after all fallible work), so a poisoned lock is safe to reuse.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current global resourceVersion.
    pub(crate) fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Subscribes to "resource `idx` changed" (the value is its latest event RV).
    pub(crate) fn subscribe(&self, idx: usize) -> Option<watch::Receiver<u64>> {
        self.notifiers.get(idx).map(watch::Sender::subscribe)
    }

    /// The current object at `key`.
    pub(crate) fn get(&self, def: &ResourceDef, key: &Key) -> Option<Arc<StoredObject>> {
        self.lock()
            .resources
            .get(def.idx)?
            .objects
            .get(key)
            .cloned()
    }

    /// The number of objects of a resource.
    pub(crate) fn count(&self, def: &ResourceDef) -> usize {
        self.lock()
            .resources
            .get(def.idx)
            .map_or(0, |r| r.objects.len())
    }

    /// A snapshot of all objects of a resource and the global RV it corresponds to; when
    /// `remember` the snapshot is kept for continue tokens.
    pub(crate) fn snapshot(&self, def: &ResourceDef, remember: bool) -> (ObjectMap, u64) {
        let mut inner = self.lock();
        let rv = inner.rv;
        let Some(state) = inner.resources.get_mut(def.idx) else {
            return (ObjectMap::new(), rv);
        };
        let map = state.objects.clone();
        if remember && state.snapshots.back().is_none_or(|(r, _)| *r != rv) {
            state.snapshots.push_back((rv, map.clone()));
            if state.snapshots.len() > SNAPSHOT_CACHE {
                state.snapshots.pop_front();
            }
        }
        (map, rv)
    }

    /// The objects of a resource as they were at global RV `rv`, if `rv` is inside the window.
    pub(crate) fn snapshot_at(&self, def: &ResourceDef, rv: u64) -> Result<ObjectMap, Expired> {
        let mut inner = self.lock();
        let current = inner.rv;
        let Some(state) = inner.resources.get_mut(def.idx) else {
            return Ok(ObjectMap::new());
        };
        if rv < state.log_start {
            return Err(Expired {
                oldest: state.log_start,
            });
        }
        if let Some((_, m)) = state.snapshots.iter().find(|(r, _)| *r == rv) {
            return Ok(m.clone());
        }
        let mut map = state.objects.clone();
        if rv >= current {
            return Ok(map);
        }
        for ev in state.log.iter().rev().take_while(|e| e.rv > rv) {
            let key = ev.object.key();
            match (&ev.etype, &ev.prev) {
                (EventType::Added, _) | (_, None) => {
                    map.remove(&key);
                }
                (_, Some(prev)) => {
                    map.insert(key, prev.clone());
                }
            }
        }
        state.snapshots.push_back((rv, map.clone()));
        if state.snapshots.len() > SNAPSHOT_CACHE {
            state.snapshots.pop_front();
        }
        Ok(map)
    }

    /// Events of a resource after `cursor` (at most `max`), and the global RV when read; Expired
    /// if `cursor` is older than the window.
    pub(crate) fn events_after(
        &self,
        def: &ResourceDef,
        cursor: u64,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, u64), Expired> {
        let inner = self.lock();
        let Some(state) = inner.resources.get(def.idx) else {
            return Ok((Vec::new(), inner.rv));
        };
        if cursor < state.log_start {
            return Err(Expired {
                oldest: state.log_start,
            });
        }
        let start = state.log.partition_point(|e| e.rv <= cursor);
        let events = state.log.range(start..).take(max).cloned().collect();
        Ok((events, inner.rv))
    }

    /// Whether a watch may start at `rv`: not before the window, as
    /// `watchCache.getAllEventsSinceLocked` (`staging/src/k8s.io/apiserver/pkg/storage/cacher/
    /// watch_cache.go`) decides it. Until an event has left the window the oldest RV served is
    /// the window's start (the cache's list RV); after, one less than the oldest event kept,
    /// which is also what `too old resource version: RV (OLDEST)` prints.
    pub(crate) fn check_window(&self, def: &ResourceDef, rv: u64) -> Result<(), Expired> {
        let inner = self.lock();
        let Some(state) = inner.resources.get(def.idx) else {
            return Ok(());
        };
        let oldest = match (state.trimmed, state.log.front()) {
            (true, Some(first)) => first.rv.saturating_sub(1),
            _ => state.log_start,
        };
        if rv < oldest {
            Err(Expired { oldest })
        } else {
            Ok(())
        }
    }

    /// Drops every window so that any resourceVersion older than now is expired.
    pub(crate) fn compact(&self) -> u64 {
        let mut inner = self.lock();
        let rv = inner.rv;
        for state in &mut inner.resources {
            state.log.clear();
            state.snapshots.clear();
            state.log_start = rv;
            state.trimmed = false;
        }
        rv
    }

    /// Atomically reads the object at `key`, lets `decide` choose a write, and applies it:
    /// assigns the next resourceVersion, records the event, wakes watchers.
    pub(crate) fn write<F>(
        &self,
        def: &ResourceDef,
        key: &Key,
        dry_run: bool,
        decide: F,
    ) -> Result<Outcome, ApiError>
    where
        F: FnOnce(Option<&Arc<StoredObject>>) -> Result<Write, ApiError>,
    {
        let (outcome, rv) = {
            let mut inner = self.lock();
            let inner_rv = inner.rv;
            let next_rv = inner_rv + 1;
            let window = self.window;
            let state = inner
                .resources
                .get_mut(def.idx)
                .ok_or_else(|| ApiError::internal("unknown resource index"))?;
            let current = state.objects.get(key).cloned();
            let (event, outcome) = match decide(current.as_ref())? {
                Write::Noop => return Ok(Outcome::Unchanged(current)),
                Write::Put(mut value) => {
                    let rv = if dry_run { inner_rv } else { next_rv };
                    if let Some(meta) = meta_mut(&mut value) {
                        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
                    }
                    let obj = Arc::new(StoredObject::from_value(def, &value, rv)?);
                    if dry_run {
                        return Ok(if current.is_some() {
                            Outcome::Updated(obj)
                        } else {
                            Outcome::Created(obj)
                        });
                    }
                    state.objects.insert(key.clone(), obj.clone());
                    match current {
                        None => (
                            Event {
                                rv: next_rv,
                                etype: EventType::Added,
                                object: obj.clone(),
                                prev: None,
                            },
                            Outcome::Created(obj),
                        ),
                        Some(prev) => (
                            Event {
                                rv: next_rv,
                                etype: EventType::Modified,
                                object: obj.clone(),
                                prev: Some(prev),
                            },
                            Outcome::Updated(obj),
                        ),
                    }
                }
                Write::Delete => {
                    let Some(prev) = current else {
                        return Err(ApiError::not_found(&def.group, &def.plural, &key.1));
                    };
                    if dry_run {
                        return Ok(Outcome::Deleted(prev));
                    }
                    // The DELETED event carries the last state at the deletion's resourceVersion.
                    let mut value = prev.to_value(def)?;
                    if let Some(meta) = meta_mut(&mut value) {
                        meta.insert("resourceVersion".into(), Value::String(next_rv.to_string()));
                    }
                    let obj = Arc::new(StoredObject::from_value(def, &value, next_rv)?);
                    state.objects.remove(key);
                    (
                        Event {
                            rv: next_rv,
                            etype: EventType::Deleted,
                            object: obj.clone(),
                            prev: Some(prev),
                        },
                        Outcome::Deleted(obj),
                    )
                }
            };
            state.log.push_back(Arc::new(event));
            while state.log.len() > window {
                if let Some(old) = state.log.pop_front() {
                    state.log_start = old.rv;
                    state.trimmed = true;
                }
            }
            let log_start = state.log_start;
            state.snapshots.retain(|(r, _)| *r >= log_start);
            inner.rv = next_rv;
            (outcome, next_rv)
        };
        if let Some(n) = self.notifiers.get(def.idx) {
            n.send_replace(rv);
        }
        Ok(outcome)
    }
}
