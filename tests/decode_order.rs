//! P8/R3 with parallel decode, over HTTP: watch events and LIST items decoded on several threads
//! (`runtime::set_decode_threads`) still reach the FIFO, and so a handler, in the server's order.
//!
//! Thousands of events for a few keys are written while the watch is stalled, then released at
//! once, so they arrive in large already-available batches (decoded on the pool); the in-order
//! FIFO (F9) and an unbounded listener (B3) let the handler see every event, so its sequence of
//! resourceVersions must be exactly the server's, globally and per key.

use std::sync::{Arc, Mutex};

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kinformer::{fifo::FifoMode, notification::Notification};
use kinformer_actors::{
    ListenerConfig, OverflowPolicy, SharedIndexInformer, handler_fn, runtime::set_decode_threads,
};
use kube::{Api, ResourceExt, api::ListParams};
use serde_json::json;

/// What the handler saw, in order: (kind, key, resourceVersion).
type Seen = Arc<Mutex<Vec<(&'static str, String, u64)>>>;

fn pod_json(name: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "labels": {"app": "order"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}
    })
}

fn rv_of(v: &serde_json::Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("numeric resourceVersion")
}

/// An informer with the in-order FIFO and one unbounded handler recording every notification.
async fn recording_informer(sim: &kinformer_sim::Sim) -> (SharedIndexInformer<Pod>, Seen) {
    // Several threads even on a one-core machine (a no-op after the first call in this process).
    set_decode_threads(4);
    let mut config = fast_config();
    config.fifo.mode = FifoMode::InOrder;
    let informer = SharedIndexInformer::<Pod>::with_config(sim.client(), None, config);
    let seen: Seen = Arc::default();
    let s = Arc::clone(&seen);
    informer
        .add_event_handler_with(
            handler_fn(move |n: &Notification<Pod>| {
                let (kind, obj) = match n {
                    Notification::Add { obj, .. } => ("add", obj),
                    Notification::Update { new, .. } => ("update", new),
                    Notification::Delete { .. } => return,
                };
                let key = format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
                let rv = obj.resource_version().and_then(|r| r.parse().ok());
                s.lock().unwrap().push((kind, key, rv.unwrap_or(0)));
            }),
            ListenerConfig::default().policy(OverflowPolicy::Unbounded),
        )
        .await
        .expect("handler registered");
    informer.start().expect("informer starts");
    (informer, seen)
}

/// P8: a LIST of a few thousand items, decoded in batches on the pool, is admitted and
/// delivered in the list's order.
#[actix::test]
async fn p8_list_items_decoded_in_parallel_arrive_in_the_servers_order() {
    let sim = sim().await;
    for i in 0..3000 {
        sim.create_object("pods", Some("a"), pod_json(&format!("p-{i:05}")))
            .expect("create");
    }
    let server_order: Vec<String> = Api::<Pod>::all(sim.client())
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    assert_eq!(server_order.len(), 3000);
    let (informer, seen) = recording_informer(&sim).await;
    tokio::time::timeout(DEADLINE, informer.wait_for_sync())
        .await
        .expect("synced");
    eventually("every listed pod was notified", || {
        seen.lock().unwrap().len() >= 3000
    })
    .await;
    let got: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, k, _)| k.clone())
        .collect();
    assert_eq!(got.len(), server_order.len());
    if let Some(i) = (0..got.len()).find(|&i| got[i] != server_order[i]) {
        panic!(
            "notification {i} is {}, the server listed {} there",
            got[i], server_order[i]
        );
    }
    informer.shutdown().await;
}

/// P8, R3: thousands of watch events for a few keys, released at once, are decoded in batches
/// on the pool and reach the handler exactly in the server's order (globally and per key).
#[actix::test]
async fn p8_watch_events_decoded_in_parallel_arrive_in_the_servers_order() {
    const KEYS: usize = 4;
    const EVENTS: usize = 4000;
    let sim = sim().await;
    for k in 0..KEYS {
        sim.create_object("pods", Some("a"), pod_json(&format!("k-{k}")))
            .expect("create");
    }
    let (informer, seen) = recording_informer(&sim).await;
    tokio::time::timeout(DEADLINE, informer.wait_for_sync())
        .await
        .expect("synced");
    watching(&sim).await;
    eventually("the initial adds", || seen.lock().unwrap().len() >= KEYS).await;
    // Held back while written, then released together: the client reads large batches.
    sim.faults().stall_watches(true);
    let mut written = Vec::with_capacity(EVENTS);
    for i in 0..EVENTS {
        let name = format!("k-{}", (i * 7 + i / 3) % KEYS);
        let patch = json!({"metadata": {"annotations": {"i": i.to_string()}}});
        let obj = sim
            .patch_object("pods", Some("a"), &name, &patch)
            .expect("patch");
        written.push((format!("a/{name}"), rv_of(&obj)));
    }
    sim.faults().stall_watches(false);
    eventually("every event reached the handler", || {
        seen.lock().unwrap().len() >= KEYS + EVENTS
    })
    .await;
    let seen = seen.lock().unwrap().clone();
    let updates: Vec<(String, u64)> = seen
        .iter()
        .filter(|(kind, _, _)| *kind == "update")
        .map(|(_, k, rv)| (k.clone(), *rv))
        .collect();
    assert_eq!(updates.len(), EVENTS, "one update per event");
    for (i, (got, want)) in updates.iter().zip(&written).enumerate() {
        assert_eq!(got, want, "event {i}: the handler's order is the server's");
    }
    for k in 0..KEYS {
        let key = format!("a/k-{k}");
        let rvs: Vec<u64> = updates
            .iter()
            .filter(|(kk, _)| *kk == key)
            .map(|(_, rv)| *rv)
            .collect();
        assert!(rvs.windows(2).all(|w| w[0] < w[1]), "{key}: RVs increase");
    }
    informer.shutdown().await;
}
