//! A stand-in for kube-controller-manager's garbage collector
//! (`pkg/controller/garbagecollector/garbagecollector.go`), for the deletion lifecycles a
//! controller under test sees: dependents (objects whose `metadata.ownerReferences` name an
//! owner by uid) of a deleted owner are deleted afterwards (background propagation); an owner
//! deleted with `propagationPolicy=Foreground` keeps its `foregroundDeletion` finalizer until
//! its dependents with `blockOwnerDeletion: true` are gone, its dependents being deleted in
//! the foreground too (`processDeletingDependentsItem`, `attemptToDeleteItem`); one deleted
//! with `Orphan` keeps its `orphan` finalizer until its dependents' references to it are
//! removed (`orphanDependents`), then the finalizer goes (`removeFinalizer`) and the registry
//! removes the owner.
//!
//! The real collector keeps a graph fed by informers; this one looks at every object after
//! each change (it is off by default, [`crate::SimConfig::garbage_collector`], and meant for
//! tests with tens of objects, not for throughput runs). Writes go through the registry's
//! generic store as a client's would (merge patches carrying the resourceVersion they read, as
//! the collector's `patch`/`removeFinalizer`; a conflict is retried on the next look). An
//! owner reference to a kind the sim does not serve is never judged dangling (the real
//! collector cannot resolve it either and retries).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{Value, json};

use crate::apimachinery::options::{DeleteOptions, PatchKind};
use crate::apimachinery::schema::ResourceDef;
use crate::registry::generic::{self as ops, Part};
use crate::registry::strategy::{FOREGROUND, ORPHAN};
use crate::storage::store::Store;

/// How soon a look that could not finish (a conflict) is repeated.
const RETRY: Duration = Duration::from_millis(10);

/// One object as the collector sees it.
struct Item {
    def: Arc<ResourceDef>,
    namespace: String,
    name: String,
    uid: String,
    rv: String,
    value: Value,
}

impl Item {
    fn ns(&self) -> Option<&str> {
        (!self.namespace.is_empty()).then_some(self.namespace.as_str())
    }

    fn finalizers(&self) -> Vec<&str> {
        self.value
            .get("metadata")
            .and_then(|m| m.get("finalizers"))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    fn deleting(&self) -> bool {
        self.value
            .get("metadata")
            .and_then(|m| m.get("deletionTimestamp"))
            .is_some_and(|d| !d.is_null())
    }

    fn owner_refs(&self) -> Vec<Value> {
        self.value
            .get("metadata")
            .and_then(|m| m.get("ownerReferences"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    /// `isDeletingDependents`: being deleted in the foreground.
    fn deleting_dependents(&self) -> bool {
        self.deleting() && self.finalizers().contains(&FOREGROUND)
    }
}

fn ref_uid(r: &Value) -> &str {
    r.get("uid").and_then(Value::as_str).unwrap_or("")
}

/// Every object of every kind, by uid.
fn all_items(store: &Store) -> HashMap<String, Item> {
    let mut out = HashMap::new();
    for def in store.registry.all() {
        let (map, _) = store.snapshot(def, false);
        for o in map.values() {
            let Ok(value) = o.to_value(def) else { continue };
            out.insert(
                o.uid.clone(),
                Item {
                    def: def.clone(),
                    namespace: o.namespace.clone(),
                    name: o.name.clone(),
                    uid: o.uid.clone(),
                    rv: o.rv.to_string(),
                    value,
                },
            );
        }
    }
    out
}

/// Whether the sim serves the kind an owner reference names (else it is never dangling).
fn resolvable(store: &Store, r: &Value) -> bool {
    let api_version = r.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    store
        .registry
        .all()
        .iter()
        .any(|d| d.group == group && d.version == version && d.kind == kind)
}

/// A merge patch carrying the resourceVersion read (a conflict if the object moved on).
fn patch(store: &Store, item: &Item, meta: Value) -> bool {
    let mut meta = meta;
    if let Some(m) = meta.as_object_mut() {
        m.insert("resourceVersion".into(), json!(item.rv));
        m.insert("uid".into(), json!(item.uid));
    }
    let body = json!({ "metadata": meta });
    let Ok(bytes) = serde_json::to_vec(&body) else {
        return false;
    };
    match ops::patch(
        store,
        &item.def,
        item.ns(),
        &item.name,
        Part::Main,
        PatchKind::Merge,
        &bytes,
        false,
        false,
        None,
        false,
    ) {
        Ok(_) => true,
        Err(e) if e.code == 404 => true,
        Err(e) => {
            if e.code != 409 {
                tracing::warn!(object = %item.name, error = %e.message, "garbage collector stand-in could not patch an object");
            }
            false
        }
    }
}

/// Removes `finalizer` from the item (`removeFinalizer`).
fn remove_finalizer(store: &Store, item: &Item, finalizer: &str) -> bool {
    let left: Vec<&str> = item
        .finalizers()
        .into_iter()
        .filter(|f| *f != finalizer)
        .collect();
    patch(store, item, json!({ "finalizers": left }))
}

/// Deletes the item with a uid precondition and `policy` (`deleteObject`).
fn delete(store: &Store, item: &Item, policy: &str) -> bool {
    let opts = DeleteOptions {
        uid: Some(item.uid.clone()),
        propagation_policy: Some(policy.to_string()),
        ..DeleteOptions::default()
    };
    match ops::delete(store, &item.def, item.ns(), &item.name, &opts) {
        Ok(_) => true,
        Err(e) if e.code == 404 => true,
        Err(e) => {
            if e.code != 409 {
                tracing::warn!(object = %item.name, error = %e.message, "garbage collector stand-in could not delete an object");
            }
            false
        }
    }
}

/// `attemptToDeleteItem` for a dependent: its owner references are sorted into solid (the
/// owner exists and is not deleting its dependents), dangling (gone) and waiting (deleting
/// in the foreground) ones (`classifyReferences`). With a solid owner, references to the
/// others are removed; with none, the dependent is deleted: in the foreground if an owner
/// waits for it, else by its own finalizers' policy, else in the background.
fn attempt_to_delete(store: &Store, items: &HashMap<String, Item>, dep: &Item) -> bool {
    if dep.deleting() {
        // Being deleted already; its own foreground deletion is handled as an owner.
        return true;
    }
    let refs = dep.owner_refs();
    let (mut solid, mut gone) = (0, Vec::new());
    let mut waiting = false;
    for r in &refs {
        match items.get(ref_uid(r)) {
            Some(owner) if owner.deleting_dependents() => {
                waiting = true;
                gone.push(ref_uid(r).to_string());
            }
            Some(_) => solid += 1,
            None if resolvable(store, r) => gone.push(ref_uid(r).to_string()),
            None => solid += 1,
        }
    }
    if gone.is_empty() {
        return true;
    }
    if solid > 0 {
        let keep: Vec<&Value> = refs
            .iter()
            .filter(|r| !gone.iter().any(|g| g == ref_uid(r)))
            .collect();
        return patch(store, dep, json!({ "ownerReferences": keep }));
    }
    let fin = dep.finalizers();
    let policy = if waiting || fin.contains(&FOREGROUND) {
        "Foreground"
    } else if fin.contains(&ORPHAN) {
        "Orphan"
    } else {
        "Background"
    };
    delete(store, dep, policy)
}

/// One look at every object; returns whether everything it tried went through.
fn pass(store: &Store) -> bool {
    let items = all_items(store);
    let mut dependents: HashMap<&str, Vec<&Item>> = HashMap::new();
    for item in items.values() {
        for r in item.owner_refs() {
            if let Some(owner) = items.get(ref_uid(&r)) {
                dependents.entry(owner.uid.as_str()).or_default().push(item);
            }
        }
    }
    let mut ok = true;
    for owner in items.values().filter(|i| i.deleting()) {
        let fin = owner.finalizers();
        let deps = dependents
            .get(owner.uid.as_str())
            .cloned()
            .unwrap_or_default();
        if fin.contains(&ORPHAN) {
            // `orphanDependents`: every reference to the owner removed, then the finalizer.
            let mut all = true;
            for d in &deps {
                let keep: Vec<Value> = d
                    .owner_refs()
                    .into_iter()
                    .filter(|r| ref_uid(r) != owner.uid)
                    .collect();
                all &= patch(store, d, json!({ "ownerReferences": keep }));
            }
            ok &= all && remove_finalizer(store, owner, ORPHAN);
        } else if fin.contains(&FOREGROUND) {
            // `processDeletingDependentsItem`: dependents go (in the foreground); the
            // finalizer stays while a dependent that blocks owner deletion exists.
            for d in &deps {
                ok &= attempt_to_delete(store, &items, d);
            }
            let blocked = deps.iter().any(|d| {
                d.owner_refs().iter().any(|r| {
                    ref_uid(r) == owner.uid
                        && r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
                })
            });
            if !blocked {
                ok &= remove_finalizer(store, owner, FOREGROUND);
            }
        }
    }
    // Dependents whose owners are gone (or waiting for them).
    for item in items.values() {
        if item.deleting() || item.owner_refs().is_empty() {
            continue;
        }
        let needs = item
            .owner_refs()
            .iter()
            .any(|r| match items.get(ref_uid(r)) {
                Some(owner) => owner.deleting_dependents(),
                None => resolvable(store, r),
            });
        if needs {
            ok &= attempt_to_delete(store, &items, item);
        }
    }
    ok
}

/// Starts the stand-in on the current tokio runtime; it ends when the store is dropped.
pub(crate) fn start(store: &Arc<Store>) {
    let receivers: Vec<_> = store
        .registry
        .all()
        .iter()
        .filter_map(|d| store.subscribe(d.idx))
        .collect();
    tokio::spawn(run(Arc::downgrade(store), receivers));
}

async fn run(store: Weak<Store>, mut receivers: Vec<tokio::sync::watch::Receiver<u64>>) {
    if receivers.is_empty() {
        return;
    }
    let mut retry = false;
    loop {
        let changed =
            futures::future::select_all(receivers.iter_mut().map(|r| Box::pin(r.changed())));
        tokio::select! {
            (res, _, _) = changed => {
                // The senders are the store's: an error means the store is gone.
                if res.is_err() {
                    return;
                }
            }
            () = async {
                if retry {
                    tokio::time::sleep(RETRY).await;
                } else {
                    std::future::pending::<()>().await;
                }
            } => {}
        }
        let Some(store) = store.upgrade() else { return };
        retry = !pass(&store);
    }
}
