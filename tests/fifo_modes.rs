//! F9 over HTTP: the informer's FIFO options (per-key DeltaFifo by default, or the in-order FIFO
//! with an atomic relist) keep the cache and every handler equal to the server through churn
//! and a forced relist (410).

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kinformer::fifo::FifoMode;
use kinformer_actors::{InformerConfig, SharedIndexInformer};

async fn churn_relist_converge(config: InformerConfig) {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 20).await;
    let view = View::default();
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, config);
    informer.add_event_handler(view.handler()).await.unwrap();
    start_synced(&informer).await;
    watching(&sim).await;
    for i in 0..10 {
        touch_pod(&client, "a", &format!("pod-{i}"), "v1").await;
    }
    delete_pod(&client, "a", "pod-19").await;
    // A 410 forces a relist while the server moved on: tombstones and Replaced deltas.
    sim.faults().compact();
    sim.faults().expire_watches();
    delete_pod(&client, "a", "pod-18").await;
    touch_pod(&client, "a", "pod-0", "v2").await;
    let truth = server_pods(&client).await;
    eventually("the cache converges", || cache_pods(&informer) == truth).await;
    eventually("the handler converges", || view.snapshot() == truth).await;
    assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
    eventually("a relist happened", || informer.health().expired >= 1).await;
    informer.shutdown().await;
}

#[actix::test]
async fn f9_per_key_delta_fifo_is_the_default_and_converges() {
    let config = fast_config();
    assert_eq!(config.fifo.mode, FifoMode::PerKey);
    assert!(!config.fifo.atomic_replace);
    churn_relist_converge(config).await;
}

#[actix::test]
async fn f9_in_order_fifo_with_atomic_relist_converges() {
    let mut config = fast_config();
    config.fifo.mode = FifoMode::InOrder;
    config.fifo.atomic_replace = true;
    churn_relist_converge(config).await;
}

#[actix::test]
async fn f9_sync_deltas_instead_of_replaced_still_converge() {
    let mut config = fast_config();
    config.fifo.emit_delta_type_replaced = false;
    config.resync = Some(Duration::from_secs(3600));
    churn_relist_converge(config).await;
}
