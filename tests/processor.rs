//! The processor's rules over HTTP against the simulated API server (P3, P5, P6 in
//! `docs/semantics.md`): per-handler resync periods, routing of sync notifications, and
//! per-registration `has_synced`. "Never happens" assertions wait for a later positive event
//! (another handler's resync, a later notification), never for a sleep.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kinformer::notification::Notification;
use kinformer_actors::{
    InformerConfig, ListenerConfig, ResourceEventHandler, SharedIndexInformer, handler_fn,
};
use kinformer_sim::Verb;
use kube::ResourceExt;

/// What one handler saw, by kind of notification.
#[derive(Clone, Default)]
struct Counts {
    adds: Arc<AtomicU64>,
    updates: Arc<AtomicU64>,
    /// Updates with the very same object (a FIFO resync).
    resyncs: Arc<AtomicU64>,
    /// Updates with a new object of the same resourceVersion (an unchanged relist).
    unchanged: Arc<AtomicU64>,
    deletes: Arc<AtomicU64>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Counts {
    fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::SeqCst)
    }
    fn adds(&self) -> u64 {
        Self::get(&self.adds)
    }
    fn resyncs(&self) -> u64 {
        Self::get(&self.resyncs)
    }
    fn unchanged(&self) -> u64 {
        Self::get(&self.unchanged)
    }
    fn updates(&self) -> u64 {
        Self::get(&self.updates)
    }
    fn handler(&self) -> impl ResourceEventHandler<Pod> {
        let c = self.clone();
        handler_fn(move |n: &Notification<Pod>| {
            let what = match n {
                Notification::Add { .. } => {
                    c.adds.fetch_add(1, Ordering::SeqCst);
                    "add"
                }
                Notification::Update { old, new } if Arc::ptr_eq(old, new) => {
                    c.resyncs.fetch_add(1, Ordering::SeqCst);
                    "resync"
                }
                Notification::Update { old, new }
                    if old.resource_version() == new.resource_version() =>
                {
                    c.unchanged.fetch_add(1, Ordering::SeqCst);
                    "unchanged"
                }
                Notification::Update { .. } => {
                    c.updates.fetch_add(1, Ordering::SeqCst);
                    "update"
                }
                Notification::Delete { .. } => {
                    c.deletes.fetch_add(1, Ordering::SeqCst);
                    "delete"
                }
            };
            c.log
                .lock()
                .unwrap()
                .push(format!("{what} {}", n.object().name_any()));
        })
    }
}

fn with_resync(resync: Option<Duration>) -> InformerConfig {
    let mut c = fast_config();
    c.resync = resync;
    c
}

async fn synced(informer: &SharedIndexInformer<Pod>) {
    start_synced(informer).await;
}

#[actix::test]
async fn p6_handler_without_period_gets_the_informer_default() {
    let sim = sim().await;
    create_pods(&sim.client(), "a", 2).await;
    let informer = SharedIndexInformer::<Pod>::with_config(
        sim.client(),
        None,
        with_resync(Some(Duration::from_secs(1))),
    );
    let before = Counts::default();
    informer
        .add_event_handler(before.handler())
        .await
        .expect("handler");
    synced(&informer).await;
    // Added after start without a period: the informer default too.
    let after = Counts::default();
    informer
        .add_event_handler(after.handler())
        .await
        .expect("handler");
    eventually("both handlers resync on the default period", || {
        before.resyncs() >= 4 && after.resyncs() >= 4
    })
    .await;
    assert!(informer.indexer_status().resyncs() >= 2);
    informer.shutdown().await;
}

#[actix::test]
async fn p6_handler_asking_never_never_resyncs() {
    let sim = sim().await;
    create_pods(&sim.client(), "a", 2).await;
    let informer = SharedIndexInformer::<Pod>::with_config(
        sim.client(),
        None,
        with_resync(Some(Duration::from_secs(1))),
    );
    let witness = Counts::default();
    let never = Counts::default();
    informer
        .add_event_handler(witness.handler())
        .await
        .expect("handler");
    informer
        .add_event_handler_with(never.handler(), ListenerConfig::default().never_resync())
        .await
        .expect("handler");
    synced(&informer).await;
    // Three resyncs of the witness (each reaches the 2 pods): three periods have passed.
    eventually("the witness resynced three times", || {
        witness.resyncs() >= 6
    })
    .await;
    assert_eq!(never.resyncs(), 0, "P6: never means never");
    assert_eq!(never.adds(), 2);
    informer.shutdown().await;
}

#[actix::test]
async fn p6_informer_with_resync_zero_never_resyncs_even_handlers_that_ask() {
    let sim = sim().await;
    create_pods(&sim.client(), "a", 2).await;
    let quiet = SharedIndexInformer::<Pod>::with_config(sim.client(), None, with_resync(None));
    let asks = Counts::default();
    quiet
        .add_event_handler_with(
            asks.handler(),
            ListenerConfig::default().resync(Duration::from_secs(1)),
        )
        .await
        .expect("handler");
    synced(&quiet).await;
    let late = Counts::default();
    quiet
        .add_event_handler_with(
            late.handler(),
            ListenerConfig::default().resync(Duration::from_secs(1)),
        )
        .await
        .expect("handler");
    // A second informer with resync as a clock: three of its periods pass.
    let clock = SharedIndexInformer::<Pod>::with_config(
        sim.client(),
        None,
        with_resync(Some(Duration::from_secs(1))),
    );
    let witness = Counts::default();
    clock
        .add_event_handler_with(
            witness.handler(),
            ListenerConfig::default().resync(Duration::from_secs(1)),
        )
        .await
        .expect("handler");
    synced(&clock).await;
    eventually("the witness informer resynced three times", || {
        witness.resyncs() >= 6
    })
    .await;
    assert_eq!(asks.resyncs(), 0, "P6: informer resync 0 resyncs nobody");
    assert_eq!(late.resyncs(), 0, "P6: not even handlers added later");
    assert_eq!(quiet.indexer_status().resyncs(), 0, "no FIFO resync asked");
    clock.shutdown().await;
    quiet.shutdown().await;
}

#[actix::test]
async fn p5_handler_whose_initial_notification_panics_never_has_synced() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    let calls = Arc::new(AtomicU64::new(0));
    let c = Arc::clone(&calls);
    let bad = informer
        .add_event_handler(handler_fn(move |n: &Notification<Pod>| {
            c.fetch_add(1, Ordering::SeqCst);
            if n.object().name_any() == "pod-1" {
                panic!("handler bug on an initial add");
            }
        }))
        .await
        .expect("handler");
    let good = Counts::default();
    let good_reg = informer
        .add_event_handler(good.handler())
        .await
        .expect("handler");
    synced(&informer).await;
    eventually("the good handler synced", || good_reg.has_synced()).await;
    eventually("the bad handler handled its initial list", || {
        bad.stats().delivered() == 3
    })
    .await;
    assert_eq!(bad.stats().panics(), 1);
    assert!(bad.stats().initial_failed());
    assert!(!bad.has_synced(), "P5: kubernetes#129024");
    // Later notifications are handled (P7) but do not make it synced.
    create_pods(&client, "b", 1).await;
    eventually("the bad handler keeps receiving", || {
        calls.load(Ordering::SeqCst) == 4
    })
    .await;
    assert!(!bad.has_synced(), "still not synced");
    assert!(good_reg.has_synced(), "sticky");
    informer.shutdown().await;
}

#[actix::test]
async fn p3_unchanged_rv_relist_update_reaches_only_syncing_listeners() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    let informer = SharedIndexInformer::<Pod>::with_config(
        client.clone(),
        None,
        with_resync(Some(Duration::from_secs(1))),
    );
    // Period = check period: due at every check, so syncing from the first check on.
    let syncing = Counts::default();
    let quiet = Counts::default();
    informer
        .add_event_handler(syncing.handler())
        .await
        .expect("handler");
    informer
        .add_event_handler_with(quiet.handler(), ListenerConfig::default().never_resync())
        .await
        .expect("handler");
    synced(&informer).await;
    watching(&sim).await;
    eventually("the first resync check passed", || syncing.resyncs() >= 3).await;
    // A 410 on the watch forces a relist of the unchanged pods: Replaced deltas whose
    // objects have the RV already cached. Since P10 they are the cached objects themselves,
    // so the syncing handler sees them as updates whose old and new are one object, as a
    // resync's; the quiet handler must see none of them.
    let before = syncing.resyncs() + syncing.unchanged();
    sim.faults().expire_watches();
    eventually("the relist reached the syncing handler", || {
        sim.requests().count("pods", Verb::List) >= 2
            && syncing.resyncs() + syncing.unchanged() >= before + 3
    })
    .await;
    // A later real change reaches both; once the quiet handler has it, it has seen everything
    // that came before.
    create_pods(&client, "b", 1).await;
    eventually("the quiet handler sees the new pod", || quiet.adds() == 4).await;
    assert_eq!(
        (quiet.unchanged(), quiet.resyncs(), quiet.updates()),
        (0, 0, 0),
        "P3: no sync notification for a listener that is not syncing: {:?}",
        quiet.log.lock().unwrap()
    );
    informer.shutdown().await;
}

/// A handler blocked in a callback until `gate` opens; counts the callbacks it finished.
/// A handler that blocks in every callback until the gate opens; `entered` counts callbacks
/// started (the witness that the handler thread is inside one), `finished` those completed.
fn gated(
    gate: Arc<(Mutex<bool>, std::sync::Condvar)>,
    entered: Arc<AtomicU64>,
    finished: Arc<AtomicU64>,
) -> impl ResourceEventHandler<Pod> {
    handler_fn(move |_n: &Notification<Pod>| {
        entered.fetch_add(1, Ordering::SeqCst);
        let (open, cv) = &*gate;
        let mut open = open.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
        finished.fetch_add(1, Ordering::SeqCst);
    })
}

fn open_gate(gate: &(Mutex<bool>, std::sync::Condvar)) {
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
}

#[actix::test]
async fn p5_remove_returns_at_once_and_drops_the_handlers_buffer() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 5).await;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let entered = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicU64::new(0));
    let stuck = informer
        .add_event_handler_with(
            gated(
                Arc::clone(&gate),
                Arc::clone(&entered),
                Arc::clone(&finished),
            ),
            ListenerConfig::default().policy(kinformer_actors::OverflowPolicy::Unbounded),
        )
        .await
        .expect("handler");
    let other = Counts::default();
    informer
        .add_event_handler(other.handler())
        .await
        .expect("handler");
    synced(&informer).await;
    eventually(
        "the stuck handler holds the rest of its initial list",
        || stuck.stats().received() == 5 && entered.load(Ordering::SeqCst) == 1,
    )
    .await;
    // Returns although the handler is blocked in its first callback (it would hang otherwise).
    let removed = tokio::time::timeout(DEADLINE, stuck.remove())
        .await
        .expect("remove returns at once although the handler is blocked");
    assert!(removed.expect("remove"), "removed");
    create_pods(&client, "b", 1).await;
    eventually("the other handler carries on", || other.adds() == 6).await;
    open_gate(&gate);
    eventually("the removed listener stopped", || stuck.stats().stopped()).await;
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1,
        "only the callback in progress ran to its end"
    );
    assert_eq!(stuck.stats().dropped(), 4, "the buffered rest was dropped");
    informer.shutdown().await;
}

#[actix::test]
async fn p5_shut_down_waits_for_the_callback_in_progress() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let entered = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicU64::new(0));
    let stuck = informer
        .add_event_handler(gated(
            Arc::clone(&gate),
            Arc::clone(&entered),
            Arc::clone(&finished),
        ))
        .await
        .expect("handler");
    let other = Counts::default();
    informer
        .add_event_handler(other.handler())
        .await
        .expect("handler");
    synced(&informer).await;
    eventually("the stuck handler is inside its first callback", || {
        entered.load(Ordering::SeqCst) >= 1
    })
    .await;
    let shutting = tokio::spawn({
        let stuck_id = stuck.id();
        async move {
            let ok = stuck.shut_down().await.expect("shut down");
            (stuck_id, ok, stuck)
        }
    });
    // Meanwhile the informer and the other handler carry on.
    create_pods(&client, "b", 1).await;
    eventually("the other handler carries on", || other.adds() == 4).await;
    assert!(!shutting.is_finished(), "shut_down waits for the callback");
    open_gate(&gate);
    let (_, ok, stuck) = tokio::time::timeout(DEADLINE, shutting)
        .await
        .expect("shut_down returns")
        .expect("task");
    assert!(ok);
    assert!(stuck.stats().stopped(), "stopped when shut_down returned");
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1,
        "the callback ran to its end"
    );
    informer.shutdown().await;
}
