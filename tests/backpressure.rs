//! Backpressure (docs/semantics.md B1–B4) over HTTP against the simulated API server. Counts and final
//! states are asserted, never wall-clock thresholds. The slow handlers' sleeps are their
//! workload, not synchronisation.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kinformer::notification::Notification;
use kinformer_actors::{ListenerConfig, OverflowPolicy, SharedIndexInformer, handler_fn};

const KEYS: usize = 10;
const ROUNDS: usize = 12;

async fn churn(client: &kube::Client) {
    for r in 0..ROUNDS {
        for k in 0..KEYS {
            touch_pod(client, "a", &format!("pod-{k}"), &r.to_string()).await;
        }
    }
}

fn slow_view(delay: Duration) -> (View, impl kinformer_actors::ResourceEventHandler<Pod>) {
    let v = View::default();
    let v2 = v.clone();
    (
        v,
        handler_fn(move |n: &Notification<Pod>| {
            std::thread::sleep(delay);
            v2.apply(n);
        }),
    )
}

#[actix::test]
async fn b3_coalesce_slow_handler_does_not_hold_up_a_fast_one() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", KEYS).await;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    let (slow, slow_handler) = slow_view(Duration::from_millis(50));
    let slow_reg = informer
        .add_event_handler_with(
            slow_handler,
            ListenerConfig::default().policy(OverflowPolicy::Coalesce),
        )
        .await
        .unwrap();
    // Unbounded: the fast handler must be handed every notification whatever the machine's load.
    let fast = View::default();
    informer
        .add_event_handler_with(
            fast.handler(),
            ListenerConfig::default().policy(OverflowPolicy::Unbounded),
        )
        .await
        .unwrap();
    informer.start().unwrap();
    tokio::time::timeout(DEADLINE, informer.wait_for_sync())
        .await
        .unwrap();
    watching(&sim).await;
    churn(&client).await;
    let truth = server_pods(&client).await;
    eventually("the fast handler saw every change", || {
        fast.snapshot() == truth
    })
    .await;
    let total = (KEYS + KEYS * ROUNDS) as u64;
    assert_eq!(
        fast.seen(),
        total,
        "the fast handler got every notification"
    );
    assert!(
        slow.seen() < total,
        "the slow handler was not waited for: it had handled {} of {total} when the fast one finished",
        slow.seen()
    );
    assert!(
        slow_reg.stats().peak_buffered() <= KEYS as u64,
        "B3: buffered ≤ keys, was {}",
        slow_reg.stats().peak_buffered()
    );
    eventually("the slow handler converges to the final state", || {
        slow.snapshot() == truth
    })
    .await;
    assert!(slow.anomalies().is_empty(), "{:?}", slow.anomalies());
    informer.shutdown().await;
}

#[actix::test]
async fn b3_b4_block_slows_the_pipeline_and_bounds_the_fifo() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", KEYS).await;
    let mut config = fast_config();
    config.fifo.capacity = 4;
    config.fifo.batch_size = 2;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, config);
    // The slow handler is held at a gate until the test opens it: a deterministic "slow".
    let gate = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let slow = View::default();
    let (g, s2) = (Arc::clone(&gate), slow.clone());
    informer
        .add_event_handler_with(
            handler_fn(move |n: &Notification<Pod>| {
                let (open, cv) = &*g;
                let mut o = open.lock().unwrap();
                while !*o {
                    o = cv.wait(o).unwrap();
                }
                drop(o);
                s2.apply(n);
            }),
            ListenerConfig::default()
                .policy(OverflowPolicy::Block)
                .capacity(2),
        )
        .await
        .unwrap();
    let fast = View::default();
    let fast_count = Arc::new(AtomicU64::new(0));
    let fc = Arc::clone(&fast_count);
    let f2 = fast.clone();
    informer
        .add_event_handler_with(
            handler_fn(move |n: &Notification<Pod>| {
                fc.fetch_add(1, Ordering::SeqCst);
                f2.apply(n);
            }),
            ListenerConfig::default().policy(OverflowPolicy::Unbounded),
        )
        .await
        .unwrap();
    informer.start().unwrap();
    watching(&sim).await;
    churn(&client).await;
    let total = (KEYS + KEYS * ROUNDS) as u64;
    // B4: with the slow handler stuck, the indexer waits, the FIFO fills past its capacity and
    // holds back the reflector's answer.
    eventually("backpressure reached the reflector", || {
        informer.fifo_status().writer_waits() >= 1
    })
    .await;
    assert!(
        fast_count.load(Ordering::SeqCst) < total,
        "Block slows the whole pipeline: the fast handler cannot run ahead"
    );
    {
        let (open, cv) = &*gate;
        *open.lock().unwrap() = true;
        cv.notify_all();
    }
    let truth = server_pods(&client).await;
    eventually("both handlers converge", || {
        slow.snapshot() == truth && fast.snapshot() == truth
    })
    .await;
    assert_eq!(slow.seen(), total, "Block loses nothing");
    assert_eq!(fast_count.load(Ordering::SeqCst), total);
    informer.shutdown().await;
}

#[actix::test]
async fn b3_unbounded_loses_nothing() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", KEYS).await;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    let (slow, slow_handler) = slow_view(Duration::from_millis(2));
    informer
        .add_event_handler_with(
            slow_handler,
            ListenerConfig::default().policy(OverflowPolicy::Unbounded),
        )
        .await
        .unwrap();
    informer.start().unwrap();
    tokio::time::timeout(DEADLINE, informer.wait_for_sync())
        .await
        .unwrap();
    watching(&sim).await;
    churn(&client).await;
    let truth = server_pods(&client).await;
    eventually("the slow handler converges", || slow.snapshot() == truth).await;
    assert_eq!(
        slow.seen(),
        (KEYS + KEYS * ROUNDS) as u64,
        "every notification delivered"
    );
    assert!(slow.anomalies().is_empty());
    informer.shutdown().await;
}
