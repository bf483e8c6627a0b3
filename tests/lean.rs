//! The lean cache mode end to end (docs/semantics.md I7), over HTTP against the simulated API
//! server: a lean informer syncs, follows adds, updates and deletes, hands its handlers the
//! right old and new objects, and its lister returns the same objects as a typed informer's.

mod common;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kinformer_actors::{
    CacheMode, InformerConfig, LeanConfig, NAMESPACE_INDEX, Notification, SharedIndexInformer,
    handler_fn, namespace_index_func,
};
use kube::{Api, ResourceExt, api::ListParams};

/// What a handler saw, checked as it goes: every `Update`'s old object must be the last
/// object this handler was given for that key (client-go: old is what the cache held).
#[derive(Clone, Default)]
struct OldNewView {
    last: Arc<Mutex<BTreeMap<String, Arc<Pod>>>>,
    anomalies: Arc<Mutex<Vec<String>>>,
    updates: Arc<Mutex<u64>>,
}

impl OldNewView {
    fn apply(&self, n: &Notification<Pod>) {
        let key = format!(
            "{}/{}",
            n.object().namespace().unwrap_or_default(),
            n.object().name_any()
        );
        let mut last = self.last.lock().unwrap();
        let bad = |m: String| self.anomalies.lock().unwrap().push(m);
        match n {
            Notification::Add { obj, .. } => {
                last.insert(key, Arc::clone(obj));
            }
            Notification::Update { old, new } => {
                *self.updates.lock().unwrap() += 1;
                match last.get(&key) {
                    Some(prev) if **prev == **old => {}
                    Some(prev) => bad(format!(
                        "{key}: old rv {:?}, last seen rv {:?}",
                        old.resource_version(),
                        prev.resource_version()
                    )),
                    None => bad(format!("{key}: update of an unknown key")),
                }
                last.insert(key, Arc::clone(new));
            }
            Notification::Delete { .. } => {
                if last.remove(&key).is_none() {
                    bad(format!("{key}: delete of an unknown key"));
                }
            }
        }
    }

    fn rvs(&self) -> BTreeMap<String, String> {
        self.last
            .lock()
            .unwrap()
            .iter()
            .map(|(k, p)| (k.clone(), p.resource_version().unwrap_or_default()))
            .collect()
    }
}

async fn informer(
    sim: &kinformer_sim::Sim,
    config: InformerConfig,
    view: &OldNewView,
) -> SharedIndexInformer<Pod> {
    let informer = SharedIndexInformer::<Pod>::with_config(sim.client(), None, config);
    informer
        .add_indexers([(NAMESPACE_INDEX.to_string(), namespace_index_func())].into())
        .await
        .expect("indexers");
    let v = view.clone();
    informer
        .add_event_handler(handler_fn(move |n: &Notification<Pod>| v.apply(n)))
        .await
        .expect("handler");
    start_synced(&informer).await;
    informer
}

#[actix::test]
async fn i7_lean_informer_follows_the_server_like_a_typed_one() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 15).await;
    create_pods(&client, "b", 10).await;
    // A hot cache smaller than the store: most updates decode their old object.
    let lean_config = fast_config().cache(CacheMode::Lean(LeanConfig::default().hot_objects(4)));
    let (lean_view, typed_view) = (OldNewView::default(), OldNewView::default());
    let lean = informer(&sim, lean_config, &lean_view).await;
    let typed = informer(&sim, fast_config(), &typed_view).await;
    assert_eq!(
        lean.lister().len(),
        25,
        "F5: synced means the whole list is cached"
    );

    // Deterministic churn: updates, deletes, creates.
    churn_pods(&client, 11, 120, 15).await;
    let truth = server_pods(&client).await;
    eventually("lean cache equals server", || cache_pods(&lean) == truth).await;
    eventually("typed cache equals server", || cache_pods(&typed) == truth).await;
    eventually("lean handler view equals server", || {
        lean_view.rvs() == truth
    })
    .await;
    assert!(
        lean_view.anomalies.lock().unwrap().is_empty(),
        "{:?}",
        lean_view.anomalies.lock().unwrap()
    );
    assert!(
        *lean_view.updates.lock().unwrap() > 50,
        "the churn was seen"
    );

    // Every read of the lean lister returns what the server and the typed lister hold.
    let (l, t) = (lean.lister(), typed.lister());
    let api: Api<Pod> = Api::all(client.clone());
    for server in api.list(&ListParams::default()).await.expect("list").items {
        let (ns, name) = (server.namespace().unwrap_or_default(), server.name_any());
        let got = l.get(&ns, &name).expect("cached");
        assert_eq!(
            *got, server,
            "{ns}/{name}: lean lister equals the server's object"
        );
        assert_eq!(got, t.get(&ns, &name).expect("typed cached"));
    }
    for ns in ["a", "b"] {
        let mut lean_names: Vec<String> = l
            .by_index(NAMESPACE_INDEX, ns)
            .expect("index")
            .iter()
            .map(|p| p.name_any())
            .collect();
        let mut typed_names: Vec<String> = t
            .by_index(NAMESPACE_INDEX, ns)
            .expect("index")
            .iter()
            .map(|p| p.name_any())
            .collect();
        lean_names.sort();
        typed_names.sort();
        assert_eq!(lean_names, typed_names);
        assert_eq!(l.namespaced(ns).list().len(), typed_names.len());
    }
    // The cache is lean: every object stored as bytes, and reads decoded some.
    let stats = l.lean_stats().expect("lean mode");
    assert_eq!(stats.objects as usize, truth.len());
    assert!(stats.decodes > 0 && stats.bytes > 0, "{stats:?}");
    assert_eq!(stats.decode_failures + stats.encode_failures, 0);
    assert!(t.lean_stats().is_none(), "the default is typed");
    lean.shutdown().await;
    typed.shutdown().await;
}
