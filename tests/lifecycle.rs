//! Handler lifecycle over HTTP against the sim (`docs/semantics.md` P5, P7, P9, S3, X2, X3):
//! key sinks, key mappers and user actors isolated like closure handlers; the factory reporting
//! per informer identity and reporting resync conflicts; shutdown bounded under a slow `Block`
//! handler's backlog, counting exactly what it dropped and leaving no handler thread behind.

mod common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use actix::prelude::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use kinformer::{ObjectKey, notification::Notification};
use kinformer_actors::{
    InformerOptions, KeyMapper, LazyObject, ListenerConfig, Notify, OverflowPolicy,
    SharedIndexInformer, SharedInformerFactory, Telemetry, handler_fn,
};

/// Keys a sink received, in order.
#[derive(Clone, Default)]
struct Keys(Arc<Mutex<Vec<String>>>);

impl Keys {
    fn has(&self, name: &str) -> bool {
        self.0
            .lock()
            .unwrap()
            .iter()
            .any(|k| k.ends_with(&format!("/{name}")))
    }
}

async fn synced(informer: &SharedIndexInformer<Pod>) {
    tokio::time::timeout(DEADLINE, informer.wait_for_sync())
        .await
        .expect("informer synced");
}

/// Names of this process's threads (Linux: truncated to 15 bytes).
fn thread_names() -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

#[actix::test]
async fn p7_key_sink_and_key_mapper_panics_are_counted_and_the_next_notification_arrives() {
    let sim = sim().await;
    let client = sim.client();
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    // A sink whose enqueue panics on one key.
    let sink_keys = Keys::default();
    let k = sink_keys.clone();
    let sink = informer
        .add_key_sink(
            move |key: ObjectKey| {
                assert!(key.name() != "boom", "the sink panics on boom");
                k.0.lock().unwrap().push(key.to_string());
            },
            None,
            ListenerConfig::default(),
        )
        .await
        .unwrap();
    // A mapper that panics on the same key, in front of a sink that never does.
    let mapped_keys = Keys::default();
    let m = mapped_keys.clone();
    let mapper: KeyMapper<Pod> = Arc::new(|key: &ObjectKey, _: &Notification<LazyObject<Pod>>| {
        assert!(key.name() != "boom", "the mapper panics on boom");
        vec![key.clone()]
    });
    let mapped = informer
        .add_key_sink(
            move |key: ObjectKey| m.0.lock().unwrap().push(key.to_string()),
            Some(mapper),
            ListenerConfig::default(),
        )
        .await
        .unwrap();
    informer.start().unwrap();
    synced(&informer).await;
    for name in ["before", "boom", "after"] {
        let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), "a");
        api.create(&Default::default(), &pod("a", name))
            .await
            .unwrap();
    }
    eventually("both sinks hear of the pod after the panic", || {
        sink_keys.has("after") && mapped_keys.has("after")
    })
    .await;
    assert!(sink_keys.has("before") && !sink_keys.has("boom"));
    assert_eq!(sink.stats().sink_panics(), 1, "the sink's panic, counted");
    assert_eq!(
        mapped.stats().sink_panics(),
        1,
        "the mapper's panic, counted"
    );
    assert_eq!(sink.stats().panics(), 0, "not a handler-thread panic");
    assert_eq!(sink.stats().delivered(), 3);
    informer.shutdown().await;
}

/// A user's actor that panics on `boom` (actix stops it: its mailbox closes).
struct Panicky {
    seen: Arc<AtomicU64>,
}

impl Actor for Panicky {
    type Context = Context<Self>;
}

impl Handler<Notify<Pod>> for Panicky {
    type Result = ();

    fn handle(&mut self, msg: Notify<Pod>, _: &mut Context<Self>) {
        assert!(msg.key.name() != "boom", "the user's actor panics on boom");
        self.seen.fetch_add(1, Ordering::SeqCst);
    }
}

#[actix::test]
async fn s3_a_user_actor_that_panics_is_a_gone_recipient_and_the_informer_carries_on() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 2).await;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    let telemetry = Telemetry::new();
    telemetry.register_informer(&informer);
    let seen = Arc::new(AtomicU64::new(0));
    let arbiter = Arbiter::new();
    let s = Arc::clone(&seen);
    let actor = Panicky::start_in_arbiter(&arbiter.handle(), move |_| Panicky { seen: s });
    let user = informer
        .add_recipient(actor.recipient(), ListenerConfig::default().name("panicky"))
        .await
        .unwrap();
    let others = Arc::new(AtomicU64::new(0));
    let o = Arc::clone(&others);
    informer
        .add_event_handler(handler_fn(move |_: &Notification<Pod>| {
            o.fetch_add(1, Ordering::SeqCst);
        }))
        .await
        .unwrap();
    informer.start().unwrap();
    synced(&informer).await;
    // The actor counts before it answers, and the listener marks itself synced only once the
    // answer is back, so the two are waited for together rather than one asserted after the other.
    eventually("the user's actor had the initial list", || {
        seen.load(Ordering::SeqCst) == 2 && user.has_synced()
    })
    .await;
    let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), "a");
    api.create(&Default::default(), &pod("a", "boom"))
        .await
        .unwrap();
    eventually("the dead actor is seen as gone", || {
        user.stats().recipient_gone()
    })
    .await;
    api.create(&Default::default(), &pod("a", "after"))
        .await
        .unwrap();
    eventually("the other handler and the cache carry on", || {
        others.load(Ordering::SeqCst) == 4 && informer.lister().len() == 4
    })
    .await;
    eventually("the next notification is counted, not sent", || {
        user.stats().undeliverable() == 2
    })
    .await;
    assert_eq!(user.stats().panics(), 0, "a gone actor is not a panic");
    assert_eq!(user.stats().delivered(), 2, "only what the actor handled");
    // Not retried: every later notification is counted once and the buffer stays empty.
    for name in ["later-1", "later-2", "later-3"] {
        api.create(&Default::default(), &pod("a", name))
            .await
            .unwrap();
    }
    eventually("each later notification is counted once", || {
        others.load(Ordering::SeqCst) == 7 && user.stats().undeliverable() == 5
    })
    .await;
    let s = user.stats();
    assert_eq!(s.buffered(), 0);
    assert_eq!(s.received(), s.delivered() + s.undeliverable());
    // Reported beside the other listeners' state (M1, M2).
    let report = telemetry.informers();
    let l = report[0]
        .listeners
        .iter()
        .find(|l| l.name == "panicky")
        .expect("listed in the debug view");
    assert!(l.recipient_gone && l.undeliverable == 5, "{l:?}");
    let metrics = telemetry.encode_metrics().unwrap();
    assert!(
        metrics.lines().any(|l| {
            l.starts_with("kinformer_listener_undeliverable_total{")
                && l.contains("listener=\"panicky\"")
                && l.ends_with(" 5")
        }),
        "{metrics}"
    );
    assert!(informer.is_running());
    let report = informer.shutdown().await;
    assert_eq!(
        report.dropped, 0,
        "undeliverable is not counted again as dropped"
    );
    arbiter.stop();
}

#[actix::test]
async fn x3_wait_for_cache_sync_reports_each_informer_of_one_kind() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 2).await;
    create_pods(&client, "b", 1).await;
    let factory = SharedInformerFactory::new(client.clone());
    let in_a = factory.informer_with::<Pod>(InformerOptions {
        namespace: Some("a".into()),
        ..Default::default()
    });
    let in_b = factory.informer_with::<Pod>(InformerOptions {
        namespace: Some("b".into()),
        ..Default::default()
    });
    let web = factory.informer_with::<Pod>(InformerOptions {
        label_selector: Some("app=web".into()),
        ..Default::default()
    });
    factory.start().unwrap();
    let synced = factory.wait_for_cache_sync(DEADLINE).await;
    assert_eq!(synced.len(), 3, "one entry per informer: {synced:?}");
    assert!(synced.values().all(|s| *s), "{synced:?}");
    let mut scopes: Vec<_> = synced
        .keys()
        .map(|id| (id.namespace.clone(), id.label_selector.clone()))
        .collect();
    scopes.sort();
    assert_eq!(
        scopes,
        vec![
            (None, Some("app=web".to_string())),
            (Some("a".to_string()), None),
            (Some("b".to_string()), None),
        ]
    );
    assert!(synced.keys().all(|id| id.resource == "pods"));
    assert_eq!(
        (in_a.lister().len(), in_b.lister().len(), web.lister().len()),
        (2, 1, 3)
    );
    factory.shutdown().await;
}

#[actix::test]
async fn x2_a_resync_asked_for_an_existing_shared_informer_is_reported() {
    let sim = sim().await;
    let factory = SharedInformerFactory::new(sim.client());
    let pods = factory.informer::<Pod>();
    // set_resync_for after the informer exists: reported, not silently dropped.
    let conflict = factory
        .set_resync_for::<Pod>(Duration::from_secs(10))
        .expect_err("a conflict");
    assert_eq!(conflict.requested, Some(Duration::from_secs(10)));
    assert_eq!(conflict.existing, None);
    assert_eq!(conflict.informer.resource, "pods");
    // A different resync for the same shared instance: an error, and the same informer.
    let opts = InformerOptions {
        resync: Some(Duration::from_secs(5)),
        ..Default::default()
    };
    let err = factory
        .try_informer_with::<Pod>(opts.clone())
        .expect_err("a conflict");
    assert_eq!(err.requested, Some(Duration::from_secs(5)));
    assert!(factory.informer_with::<Pod>(opts).same_as(&pods), "X1");
    // Asking again for what exists is no conflict; nor is a type with no informer yet.
    assert!(factory.try_informer_with::<Pod>(Default::default()).is_ok());
    factory
        .set_resync_for::<k8s_openapi::api::core::v1::ConfigMap>(Duration::from_secs(10))
        .expect("no ConfigMap informer yet");
    assert_eq!(factory.len(), 1);
}

#[actix::test]
async fn p9_shutdown_under_a_slow_block_handlers_backlog_is_bounded_and_counts_the_drops() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 300).await;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    let calls = Arc::new(AtomicU64::new(0));
    let c = Arc::clone(&calls);
    let slow = informer
        .add_event_handler_with(
            handler_fn(move |_: &Notification<Pod>| {
                c.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(50));
            }),
            ListenerConfig::default()
                .policy(OverflowPolicy::Block)
                .capacity(200)
                .name("slow"),
        )
        .await
        .unwrap();
    informer.start().unwrap();
    eventually(
        "the slow handler has a backlog and holds the indexer",
        || slow.stats().received() >= 200 && calls.load(Ordering::SeqCst) >= 1,
    )
    .await;
    assert!(
        thread_names().iter().any(|n| n == "kinformer-slow"),
        "the handler's thread runs"
    );
    let started = Instant::now();
    let report = tokio::time::timeout(Duration::from_secs(10), informer.shutdown())
        .await
        .expect("shutdown returns");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "shutdown took {took:?}");
    assert!(report.unfinished.is_empty(), "{report:?}");
    let stats = slow.stats();
    assert!(stats.stopped());
    let delivered = stats.delivered();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        delivered,
        "nothing ran after shutdown"
    );
    assert_eq!(
        stats.dropped(),
        stats.received() - delivered,
        "every drop counted"
    );
    assert_eq!(report.dropped, stats.dropped());
    assert!(
        stats.dropped() >= 100,
        "a backlog of hundreds: {}",
        stats.dropped()
    );
    assert!(
        !thread_names().iter().any(|n| n == "kinformer-slow"),
        "no handler thread left behind"
    );
}

#[actix::test]
async fn p9_shutdown_stops_waiting_for_a_stuck_handler_after_its_timeout_and_names_it() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    let mut config = fast_config();
    config.shutdown_timeout = Duration::from_millis(200);
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, config);
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let (entered, finished) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (g, e, f) = (
        Arc::clone(&gate),
        Arc::clone(&entered),
        Arc::clone(&finished),
    );
    let stuck = informer
        .add_event_handler_with(
            handler_fn(move |_: &Notification<Pod>| {
                e.fetch_add(1, Ordering::SeqCst);
                let (open, cv) = &*g;
                let mut open = open.lock().unwrap();
                while !*open {
                    open = cv.wait(open).unwrap();
                }
                f.fetch_add(1, Ordering::SeqCst);
            }),
            ListenerConfig::default().name("stuck"),
        )
        .await
        .unwrap();
    informer.start().unwrap();
    eventually("the handler is inside its first callback", || {
        entered.load(Ordering::SeqCst) == 1
    })
    .await;
    let started = Instant::now();
    let report = tokio::time::timeout(Duration::from_secs(10), informer.shutdown())
        .await
        .expect("shutdown returns although a handler never finishes");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(report.unfinished, vec!["stuck".to_string()]);
    assert!(stuck.stats().stop_timed_out());
    assert_eq!(
        report.dropped, 2,
        "the two notifications behind the stuck one"
    );
    // Accounted for: the thread finishes its callback alone, then runs nothing more.
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    eventually("the handler thread exits", || {
        !thread_names().iter().any(|n| n == "kinformer-stuck")
    })
    .await;
    assert_eq!(finished.load(Ordering::SeqCst), 1);
    assert_eq!(entered.load(Ordering::SeqCst), 1, "nothing after shutdown");
}
