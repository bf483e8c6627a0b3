//! A stand-in for the kubelet's part in pod deletion. The API server only marks a scheduled pod
//! for deletion (`deletionTimestamp`, `deletionGracePeriodSeconds`); the kubelet on its node
//! sees the mark on its pod watch, stops the containers and then deletes the pod with grace
//! period 0 and a UID precondition (kubelet's `pkg/kubelet/status/status_manager.go`
//! `syncPod`, which calls `Delete` with `metav1.NewDeleteOptions(0)` and `Preconditions.UID`).
//! The sim runs no kubelet, so this task does that last delete after the pod's grace period,
//! capped at [`crate::SimConfig::pod_termination`] so that tests stay fast.
//!
//! It works as a client of the server would: it watches pods from the watch-cache window (a
//! relist from a snapshot when it falls out of it) and deletes through the registry's generic
//! store, the path a `DELETE` request takes. The storage does not know it exists.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::apimachinery::options::DeleteOptions;
use crate::apimachinery::schema::ResourceDef;
use crate::registry::generic as ops;
use crate::storage::object::{Key, StoredObject};
use crate::storage::store::{EventType, Store};

/// How many events one read of the window takes.
const BATCH: usize = 1024;

/// A pod the kubelet stand-in is to delete.
#[derive(Debug)]
struct Termination {
    key: Key,
    uid: String,
}

struct Due {
    at: Instant,
    seq: u64,
    t: Termination,
}

impl PartialEq for Due {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Due {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// The grace period a terminating pod carries (`deletionGracePeriodSeconds`), if it is
/// terminating.
fn grace_of(def: &ResourceDef, pod: &StoredObject) -> Option<i64> {
    if !pod.deleting {
        return None;
    }
    let v = pod.to_value(def).ok()?;
    v.get("metadata")?
        .get("deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
}

/// The pods to delete, the earliest deadline of each (by UID) and the watch position.
struct Kubelet {
    def: Arc<ResourceDef>,
    cap: Duration,
    queue: BinaryHeap<Reverse<Due>>,
    /// The earliest deadline queued for each pod UID.
    pending: HashMap<String, Instant>,
    seq: u64,
    /// The resourceVersion the pod watch has seen up to.
    cursor: u64,
}

impl Kubelet {
    /// Queues the grace-0 delete of `pod` after `min(grace, cap)`.
    fn schedule(&mut self, pod: &StoredObject, grace: i64) {
        let grace = Duration::from_secs(u64::try_from(grace).unwrap_or(0));
        let at = Instant::now() + grace.min(self.cap);
        self.pending
            .entry(pod.uid.clone())
            .and_modify(|a| *a = (*a).min(at))
            .or_insert(at);
        self.seq += 1;
        self.queue.push(Reverse(Due {
            at,
            seq: self.seq,
            t: Termination {
                key: pod.key(),
                uid: pod.uid.clone(),
            },
        }));
    }

    /// Reads the pod events after the cursor: a pod newly marked with a grace period, or
    /// whose period a later delete shortened, is queued (as the kubelet's pod worker restarts
    /// its kill with the shorter period). Falling out of the window relists: every terminating
    /// pod not yet queued is queued.
    fn sync(&mut self, store: &Store) {
        loop {
            match store.events_after(&self.def, self.cursor, BATCH) {
                Ok((events, _)) => {
                    let Some(last) = events.last() else { return };
                    self.cursor = last.rv;
                    for ev in &events {
                        if ev.etype != EventType::Modified {
                            continue;
                        }
                        let Some(grace) = grace_of(&self.def, &ev.object).filter(|g| *g > 0) else {
                            continue;
                        };
                        let before = ev.prev.as_ref().and_then(|p| grace_of(&self.def, p));
                        if before.is_none_or(|b| grace < b) {
                            self.schedule(&ev.object, grace);
                        }
                    }
                    if events.len() < BATCH {
                        return;
                    }
                }
                Err(_) => {
                    let (pods, rv) = store.snapshot(&self.def, false);
                    self.cursor = rv;
                    for pod in pods.values() {
                        if let Some(grace) = grace_of(&self.def, pod).filter(|g| *g > 0)
                            && !self.pending.contains_key(&pod.uid)
                        {
                            self.schedule(pod, grace);
                        }
                    }
                    return;
                }
            }
        }
    }

    /// Deletes the pod whose time has come, as the kubelet's status manager does.
    fn terminate(&mut self, store: &Store, due: Due) {
        if self.pending.get(&due.t.uid) == Some(&due.at) {
            self.pending.remove(&due.t.uid);
        }
        let t = due.t;
        let opts = DeleteOptions {
            uid: Some(t.uid.clone()),
            grace_period_seconds: Some(0),
            ..DeleteOptions::default()
        };
        let ns = (!t.key.0.is_empty()).then_some(t.key.0.as_str());
        // NotFound (deleted meanwhile, or an earlier, shorter schedule already ran) and
        // Conflict (the name now holds another pod) are the kubelet's expected races.
        if let Err(e) = ops::delete(store, &self.def, ns, &t.key.1, &opts)
            && e.code != 404
            && e.code != 409
        {
            tracing::warn!(pod = %t.key.1, error = %e.message, "kubelet stand-in could not delete a pod");
        }
    }
}

/// Starts the stand-in on the current tokio runtime: pods marked for graceful deletion from
/// now on are deleted after `min(grace, cap)`. It ends when the store is dropped.
pub(crate) fn start(store: &Arc<Store>, cap: Duration) {
    let Some(def) = store.registry.find("", "v1", "pods").cloned() else {
        return;
    };
    let Some(changes) = store.subscribe(def.idx) else {
        return;
    };
    let kubelet = Kubelet {
        def,
        cap,
        queue: BinaryHeap::new(),
        pending: HashMap::new(),
        seq: 0,
        cursor: store.resource_version(),
    };
    tokio::spawn(run(Arc::downgrade(store), changes, kubelet));
}

async fn run(store: Weak<Store>, mut changes: tokio::sync::watch::Receiver<u64>, mut k: Kubelet) {
    loop {
        let next = k.queue.peek().map(|Reverse(d)| d.at);
        tokio::select! {
            changed = changes.changed() => {
                // The sender is the store's: an error means the store is gone.
                if changed.is_err() {
                    return;
                }
                let Some(store) = store.upgrade() else { return };
                k.sync(&store);
            }
            () = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                let Some(Reverse(due)) = k.queue.pop() else { continue };
                let Some(store) = store.upgrade() else { return };
                k.terminate(&store, due);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::apimachinery::schema::Registry;

    fn pod(store: &Store, def: &ResourceDef, name: &str) {
        let body = json!({"metadata": {"name": name},
                          "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]}});
        ops::create(store, def, Some("default"), body, false, true, None).unwrap();
    }

    async fn gone(store: &Store, def: &ResourceDef, name: &str) -> bool {
        let key = ops::key_of(def, Some("default"), name);
        crate::wait_until(Duration::from_secs(5), || store.get(def, &key).is_none())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn deletes_marked_pods_from_its_watch_and_after_a_relist() {
        let store = Arc::new(Store::new(Registry::new(&[]).unwrap(), 100));
        let def = store.registry.find("", "v1", "pods").unwrap().clone();
        start(&store, Duration::from_millis(20));
        let graceful = DeleteOptions::default();
        // Seen on the watch: marked with 30 s, deleted after the 20 ms cap.
        pod(&store, &def, "a");
        ops::delete(&store, &def, Some("default"), "a", &graceful).unwrap();
        assert!(
            store
                .get(&def, &ops::key_of(&def, Some("default"), "a"))
                .is_some()
        );
        assert!(gone(&store, &def, "a").await, "deleted from the watch");
        // Marked, then the window compacted before the stand-in read it: found by the relist.
        pod(&store, &def, "b");
        ops::delete(&store, &def, Some("default"), "b", &graceful).unwrap();
        store.compact();
        assert!(gone(&store, &def, "b").await, "deleted after a relist");
    }
}
