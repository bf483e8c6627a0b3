//! Property tests of the processor against a model: random batches of deltas over a few keys;
//! after every batch the store equals a `HashMap` model (P1), every listener received every
//! non-sync notification in order, and sync notifications reached only the syncing listener (P3).

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;

use super::tests::{key, pod, processor};
use super::*;
use crate::{DeletedFinalStateUnknown, Delta, DeltaObject};

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

#[derive(Debug, Clone)]
struct Op {
    name: usize,
    kind: u8,
    /// None: no resourceVersion; the values are few so that unchanged RVs happen often.
    rv: Option<u8>,
    tombstone: bool,
}

fn op() -> impl Strategy<Value = Op> {
    (
        0..NAMES.len(),
        0u8..5,
        proptest::option::of(0u8..3),
        any::<bool>(),
    )
        .prop_map(|(name, kind, rv, tombstone)| Op {
            name,
            kind,
            rv,
            tombstone,
        })
}

fn delta_type(kind: u8) -> DeltaType {
    match kind {
        0 => DeltaType::Added,
        1 => DeltaType::Updated,
        2 => DeltaType::Replaced,
        3 => DeltaType::Sync,
        _ => DeltaType::Deleted,
    }
}

/// What the model expects a listener to see: (kind, key, is_sync).
fn expect(
    model: &mut HashMap<&'static str, Arc<Pod>>,
    name: &'static str,
    t: DeltaType,
    obj: &Arc<Pod>,
) -> (&'static str, &'static str, bool) {
    if t == DeltaType::Deleted {
        model.remove(name);
        return ("delete", name, false);
    }
    match model.insert(name, Arc::clone(obj)) {
        Some(old) => {
            let rv_old = old.metadata.resource_version.as_deref().unwrap_or("");
            let rv_new = obj.metadata.resource_version.as_deref().unwrap_or("");
            let sync = !rv_old.is_empty() && rv_old == rv_new;
            ("update", name, sync)
        }
        None => ("add", name, false),
    }
}

fn kind(d: &Delivery<Pod>) -> &'static str {
    match d.notification {
        Notification::Add { .. } => "add",
        Notification::Update { .. } => "update",
        Notification::Delete { .. } => "delete",
    }
}

proptest! {
    #[test]
    fn p1_p3_store_matches_model_and_routing_is_exact(
        batches in proptest::collection::vec(proptest::collection::vec(op(), 1..8), 1..20),
        check_after in 0usize..20,
    ) {
        let t0 = Instant::now();
        let mut p = processor(Some(Duration::from_secs(1)));
        p.add_listener(1, ResyncPeriod::Default, t0); // resyncs: syncing after a check
        p.add_listener(2, ResyncPeriod::Never, t0);
        p.start(t0);
        let mut model: HashMap<&'static str, Arc<Pod>> = HashMap::new();
        for (i, ops) in batches.into_iter().enumerate() {
            if i == check_after {
                prop_assert!(p.handle_resync_check(t0 + Duration::from_secs(1)));
            }
            let syncing = p.is_syncing(1);
            let mut expected = Vec::new();
            let mut batch = Vec::new();
            for o in ops {
                let name = NAMES[o.name];
                let t = delta_type(o.kind);
                let rv = o.rv.map(|r| r.to_string());
                let obj = pod(name, rv.as_deref());
                expected.push(expect(&mut model, name, t, &obj));
                let object = if t == DeltaType::Deleted && o.tombstone {
                    DeltaObject::Tombstone(DeletedFinalStateUnknown { key: key(name), obj })
                } else {
                    DeltaObject::Object(obj)
                };
                batch.push(Deltas {
                    key: key(name),
                    deltas: vec![Delta { delta_type: t, object, trace: TraceId(i as u64) }],
                });
            }
            let d = p.handle_deltas(batch, false);
            for (id, gets_syncs) in [(1, syncing), (2, false)] {
                let want: Vec<(&str, &str)> = expected
                    .iter()
                    .filter(|(_, _, s)| !s || gets_syncs)
                    .map(|(k, n, _)| (*k, *n))
                    .collect();
                let got: Vec<(&str, &str)> = d
                    .per_listener
                    .iter()
                    .find(|(l, _)| *l == id)
                    .map(|(_, items)| {
                        items
                            .iter()
                            .map(|d| (kind(d), NAMES[NAMES.iter().position(|n| *n == d.key.name()).unwrap_or(0)]))
                            .collect()
                    })
                    .unwrap_or_default();
                prop_assert_eq!(got, want, "listener {}", id);
            }
            let mut stored: Vec<(String, Option<String>)> = p
                .lister()
                .list()
                .iter()
                .map(|o| (o.metadata.name.clone().unwrap_or_default(), o.metadata.resource_version.clone()))
                .collect();
            stored.sort();
            let mut want: Vec<(String, Option<String>)> = model
                .iter()
                .map(|(n, o)| (n.to_string(), o.metadata.resource_version.clone()))
                .collect();
            want.sort();
            prop_assert_eq!(stored, want);
        }
    }
}
