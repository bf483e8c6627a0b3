//! A stand-in for kube-controller-manager's namespace controller
//! (`pkg/controller/namespace/namespace_controller.go` and
//! `pkg/controller/namespace/deletion/namespaced_resources_deleter.go` `Delete`). kube-apiserver
//! only marks a deleted namespace (`deletionTimestamp`, `status.phase: Terminating`, its
//! `spec.finalizers: ["kubernetes"]` kept); the controller then deletes every namespaced object
//! in it (`deleteAllContent`: a delete-collection per resource, with the default, background
//! propagation, so pods terminate gracefully and their kubelet removes them), waits until none
//! is left (objects held by finalizers hold the namespace), removes the `kubernetes` finalizer
//! (`finalizeNamespace`, through the `finalize` subresource) and deletes the namespace again,
//! which the registry then removes (unless `metadata.finalizers` hold it).
//!
//! Like the kubelet stand-in it works as a client would: it watches namespaces from the
//! watch-cache window (a relist from a snapshot when it falls out of it) and writes through the
//! registry's generic store. Where the real controller requeues a namespace whose content is
//! not gone yet (with the grace period of what remains as its estimate), this one looks again
//! every few milliseconds while a namespace terminates. It writes no `status.conditions`
//! (`NamespaceDeletionDiscoveryFailure`, `NamespaceContentRemaining`, ...): see the fidelity
//! table.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::apimachinery::options::DeleteOptions;
use crate::apimachinery::schema::ResourceDef;
use crate::registry::generic as ops;
use crate::storage::object::Key;
use crate::storage::store::Store;

/// How many events one read of the window takes.
const BATCH: usize = 1024;
/// How often a terminating namespace's content is looked at again.
const RECHECK: Duration = Duration::from_millis(5);
/// The finalizer the namespace controller owns (`v1.FinalizerKubernetes`).
const KUBERNETES: &str = "kubernetes";

/// The terminating namespaces (name to uid) and the watch position.
struct Controller {
    def: Arc<ResourceDef>,
    /// Whether a kubelet stand-in finishes graceful pod deletion: without one, pods are deleted
    /// with grace period 0 so that a namespace can still go away.
    graceful_pods: bool,
    terminating: BTreeMap<String, String>,
    cursor: u64,
}

impl Controller {
    /// Reads the namespace events after the cursor: a namespace marked for deletion with the
    /// `kubernetes` finalizer is queued; one deleted is forgotten.
    fn sync(&mut self, store: &Store) {
        loop {
            match store.events_after(&self.def, self.cursor, BATCH) {
                Ok((events, _)) => {
                    let Some(last) = events.last() else { return };
                    self.cursor = last.rv;
                    for ev in &events {
                        self.observe(&ev.object.name, &ev.object.uid, store);
                    }
                    if events.len() < BATCH {
                        return;
                    }
                }
                Err(_) => {
                    let (all, rv) = store.snapshot(&self.def, false);
                    self.cursor = rv;
                    self.terminating.clear();
                    for ns in all.values() {
                        self.observe(&ns.name, &ns.uid, store);
                    }
                    return;
                }
            }
        }
    }

    /// Queues or forgets `name` from its current state.
    fn observe(&mut self, name: &str, uid: &str, store: &Store) {
        let key: Key = (String::new(), name.to_string());
        match store.get(&self.def, &key) {
            Some(ns)
                if ns.uid == uid && ns.deleting && has_kubernetes_finalizer(&self.def, &ns) =>
            {
                self.terminating.insert(name.to_string(), uid.to_string());
            }
            Some(ns) if ns.uid == uid => {
                self.terminating.remove(name);
            }
            Some(_) => {}
            None => {
                self.terminating.remove(name);
            }
        }
    }

    /// One pass over the terminating namespaces: deletes what is in them, and finalizes and
    /// deletes the ones found empty.
    fn work(&mut self, store: &Store) {
        let names: Vec<(String, String)> = self
            .terminating
            .iter()
            .map(|(n, u)| (n.clone(), u.clone()))
            .collect();
        for (name, uid) in names {
            if delete_content(store, &name, self.graceful_pods) > 0 {
                continue;
            }
            // `finalizeNamespace`, then `deleteNamespace` once no finalizer is left.
            match ops::finalize_namespace(store, &name, &uid, KUBERNETES) {
                Ok(_) => {
                    let opts = DeleteOptions {
                        uid: Some(uid.clone()),
                        ..DeleteOptions::default()
                    };
                    if let Err(e) = ops::delete(store, &self.def, None, &name, &opts)
                        && e.code != 404
                        && e.code != 409
                    {
                        tracing::warn!(namespace = %name, error = %e.message, "namespace controller stand-in could not delete a namespace");
                    }
                }
                Err(e) if e.code == 404 => {}
                Err(e) => {
                    tracing::warn!(namespace = %name, error = %e.message, "namespace controller stand-in could not finalize a namespace");
                }
            }
            self.terminating.remove(&name);
        }
    }
}

/// Whether the namespace's `spec.finalizers` still has `kubernetes`.
fn has_kubernetes_finalizer(def: &ResourceDef, ns: &crate::storage::object::StoredObject) -> bool {
    ns.to_value(def).ok().is_some_and(|v| {
        v.get("spec")
            .and_then(|s| s.get("finalizers"))
            .and_then(serde_json::Value::as_array)
            .is_some_and(|f| f.iter().any(|x| x == KUBERNETES))
    })
}

/// Deletes every namespaced object in `ns` not already being deleted (`deleteAllContent`);
/// returns how many objects are still in it.
fn delete_content(store: &Store, ns: &str, graceful_pods: bool) -> usize {
    let defs: Vec<Arc<ResourceDef>> = store
        .registry
        .all()
        .iter()
        .filter(|d| d.namespaced)
        .cloned()
        .collect();
    let mut left = 0;
    for def in defs {
        let is_pod = def.builtin && def.group.is_empty() && def.plural == "pods";
        let opts = DeleteOptions {
            grace_period_seconds: (is_pod && !graceful_pods).then_some(0),
            ..DeleteOptions::default()
        };
        let (map, _) = store.snapshot(&def, false);
        for ((n, name), obj) in map.range((ns.to_string(), String::new())..) {
            if n != ns {
                break;
            }
            left += 1;
            if obj.deleting {
                continue;
            }
            let opts = DeleteOptions {
                uid: Some(obj.uid.clone()),
                ..opts.clone()
            };
            if let Err(e) = ops::delete(store, &def, Some(n), name, &opts)
                && e.code != 404
                && e.code != 409
            {
                tracing::warn!(namespace = %ns, object = %name, error = %e.message, "namespace controller stand-in could not delete an object");
            }
        }
    }
    left
}

/// Starts the stand-in on the current tokio runtime; it ends when the store is dropped.
/// `graceful_pods`: whether a kubelet stand-in runs (else pods go with grace period 0).
pub(crate) fn start(store: &Arc<Store>, graceful_pods: bool) {
    let Some(def) = store.registry.namespaces().cloned() else {
        return;
    };
    let Some(changes) = store.subscribe(def.idx) else {
        return;
    };
    let c = Controller {
        def,
        graceful_pods,
        terminating: BTreeMap::new(),
        cursor: store.resource_version(),
    };
    tokio::spawn(run(Arc::downgrade(store), changes, c));
}

async fn run(
    store: Weak<Store>,
    mut changes: tokio::sync::watch::Receiver<u64>,
    mut c: Controller,
) {
    loop {
        let busy = !c.terminating.is_empty();
        tokio::select! {
            changed = changes.changed() => {
                // The sender is the store's: an error means the store is gone.
                if changed.is_err() {
                    return;
                }
                let Some(store) = store.upgrade() else { return };
                c.sync(&store);
                c.work(&store);
            }
            () = async {
                if busy {
                    tokio::time::sleep(RECHECK).await;
                } else {
                    std::future::pending::<()>().await;
                }
            } => {
                let Some(store) = store.upgrade() else { return };
                c.work(&store);
            }
        }
    }
}
