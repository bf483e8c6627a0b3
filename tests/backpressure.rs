//! Backpressure (docs/semantics.md B1–B4) over HTTP against the simulated API server. Counts and final
//! states are asserted, never wall-clock thresholds. The slow handlers' sleeps are their
//! workload, not synchronisation.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use crate::common::*;
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

/// A handler can be held inside its callback until the test lets it go: a deterministic "slow".
#[derive(Clone, Default)]
struct Gate(Arc<(std::sync::Mutex<GateState>, std::sync::Condvar)>);

#[derive(Default)]
struct GateState {
    closed: bool,
    inside: bool,
}

impl Gate {
    fn set(&self, closed: bool) {
        let (st, cv) = &*self.0;
        st.lock().unwrap().closed = closed;
        cv.notify_all();
    }
    /// True while a callback is held at the gate.
    fn holding(&self) -> bool {
        self.0.0.lock().unwrap().inside
    }
    /// Called by the handler: waits while the gate is closed.
    fn pass(&self) {
        let (st, cv) = &*self.0;
        let mut g = st.lock().unwrap();
        while g.closed {
            g.inside = true;
            g = cv.wait(g).unwrap();
        }
        g.inside = false;
    }
}

#[actix::test]
async fn b3_coalesce_slow_handler_does_not_hold_up_a_fast_one() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", KEYS).await;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    // The slow handler is held inside a callback for the whole churn. Its capacity is tiny, so
    // a Coalesce listener that held up the indexer like Block would stall the fast one at once.
    let gate = Gate::default();
    let slow = View::default();
    let (g, s2) = (gate.clone(), slow.clone());
    let slow_reg = informer
        .add_event_handler_with(
            handler_fn(move |n: &Notification<Pod>| {
                g.pass();
                s2.apply(n);
            }),
            ListenerConfig::default()
                .policy(OverflowPolicy::Coalesce)
                .capacity(2),
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
    start_synced(&informer).await;
    watching(&sim).await;
    eventually("both handlers saw the initial list", || {
        slow.seen() == KEYS as u64 && fast.seen() == KEYS as u64
    })
    .await;
    gate.set(true);
    touch_pod(&client, "a", "pod-0", "held").await;
    eventually("the slow handler is held inside a callback", || {
        gate.holding()
    })
    .await;
    churn(&client).await;
    let truth = server_pods(&client).await;
    let total = (KEYS + 1 + KEYS * ROUNDS) as u64;
    eventually(
        "the fast handler saw every change while the slow one was held",
        || fast.snapshot() == truth && fast.seen() == total,
    )
    .await;
    assert_eq!(
        slow.seen(),
        KEYS as u64,
        "the slow handler was still inside its callback"
    );
    assert!(
        slow_reg.stats().peak_buffered() <= KEYS as u64,
        "B3: buffered ≤ keys, was {}",
        slow_reg.stats().peak_buffered()
    );
    gate.set(false);
    eventually("the slow handler converges to the final state", || {
        slow.snapshot() == truth
    })
    .await;
    // After the initial list: the held notification, up to 64 in the handler thread's channel
    // (its capacity under every policy), one in the send awaiting that channel, then at most
    // one merged notification per key.
    assert!(
        slow.seen() <= (KEYS + 66 + KEYS) as u64,
        "Coalesce merged per key: {} notifications of {total}",
        slow.seen()
    );
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
    start_synced(&informer).await;
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
