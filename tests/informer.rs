//! End-to-end tests of the actor pipeline over HTTP against the simulated API server.
//! Each test names the docs/semantics.md ids it checks.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use crate::common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kinformer::notification::Notification;
use kinformer_actors::{
    CacheMode, ListenerConfig, SharedIndexInformer, SharedInformerFactory, handler_fn,
};
use kinformer_sim::Verb;
use kube::{
    Api, ResourceExt,
    api::{ApiResource, PostParams},
};

async fn started(sim: &kinformer_sim::Sim, view: &View) -> SharedIndexInformer<Pod> {
    let informer = SharedIndexInformer::<Pod>::with_config(sim.client(), None, fast_config());
    informer
        .add_event_handler(view.handler())
        .await
        .expect("handler");
    start_synced(&informer).await;
    informer
}

#[actix::test]
async fn e2e_churn_cache_and_handler_views_equal_the_server() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 20).await;
    create_pods(&client, "b", 10).await;
    let view = View::default();
    let informer = started(&sim, &view).await;
    assert_eq!(
        informer.lister().len(),
        30,
        "F5: synced means the whole list is cached"
    );

    // Deterministic churn: updates, deletes, creates.
    churn_pods(&client, 7, 150, 20).await;
    let truth = server_pods(&client).await;
    eventually("cache equals server (every key and RV)", || {
        cache_pods(&informer) == truth
    })
    .await;
    eventually("handler view equals server", || view.snapshot() == truth).await;
    assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
    // The reflector moves its RV once the FIFO accepted the events, on its own thread, so
    // this can trail the cache by a moment.
    let server_rv = sim.resource_version().to_string();
    eventually("R3: the last RV follows every event", || {
        informer.last_sync_resource_version() == server_rv
    })
    .await;
    informer.shutdown().await;
}

#[actix::test]
async fn r3_watch_410_relists_and_converges() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 5).await;
    let view = View::default();
    let informer = started(&sim, &view).await;
    assert_eq!(sim.requests().count("pods", Verb::List), 1);
    watching(&sim).await;
    sim.faults().expire_watches();
    eventually("a relist after 410", || {
        informer.health().expired >= 1 && sim.requests().count("pods", Verb::List) >= 2
    })
    .await;
    create_pods(&client, "c", 3).await;
    let truth = server_pods(&client).await;
    eventually("cache converges after relist", || {
        cache_pods(&informer) == truth
    })
    .await;
    eventually("view converges after relist", || view.snapshot() == truth).await;
    assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
    informer.shutdown().await;
}

#[actix::test]
async fn r4_dropped_watch_resumes_from_last_rv_without_relist() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 5).await;
    let view = View::default();
    let informer = started(&sim, &view).await;
    watching(&sim).await;
    let watches = sim.requests().count("pods", Verb::Watch);
    sim.faults().drop_watches();
    eventually("a new watch", || {
        sim.requests().count("pods", Verb::Watch) > watches
    })
    .await;
    touch_pod(&client, "a", "pod-1", "x").await;
    let truth = server_pods(&client).await;
    eventually("cache converges", || cache_pods(&informer) == truth).await;
    assert_eq!(
        sim.requests().count("pods", Verb::List),
        2,
        "R4: no relist (one LIST by the informer, one by this test): {:?}",
        informer.health()
    );
    // A clean end is not a failure, except client-go's "very short watch" (ended in under a
    // second with no event), which this test can provoke: it backs off, it does not relist.
    let h = informer.health();
    assert_eq!(h.failures, h.very_short_watches, "{h:?}");
    informer.shutdown().await;
}

#[actix::test]
async fn s1_s2_failed_lists_restart_with_backoff_and_are_visible() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 4).await;
    sim.faults().fail_next_lists(2, 500);
    let view = View::default();
    let informer = started(&sim, &view).await;
    let h = informer.health();
    assert_eq!(h.restarts, 2, "S1: one restart per failed list");
    assert!(h.last_error.is_some(), "S2: the last error is visible");
    assert_eq!(informer.lister().len(), 4);
    informer.shutdown().await;
}

#[actix::test]
async fn s1_failed_watch_restarts_and_resumes_from_last_rv() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 4).await;
    let view = View::default();
    let informer = started(&sim, &view).await;
    watching(&sim).await;
    sim.faults().fail_next_watches(1, 500);
    sim.faults().drop_watches();
    eventually("the reflector restarted", || {
        informer.health().restarts >= 1
    })
    .await;
    touch_pod(&client, "a", "pod-2", "after-restart").await;
    let truth = server_pods(&client).await;
    eventually("cache converges after restart", || {
        cache_pods(&informer) == truth
    })
    .await;
    assert_eq!(
        sim.requests().count("pods", Verb::List),
        2,
        "S1: a restart resumes the watch; only 410 relists (one LIST is this test's): {:?}",
        informer.health()
    );
    informer.shutdown().await;
}

#[actix::test]
async fn s1_malformed_watch_line_restarts_and_loses_nothing() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    let view = View::default();
    let informer = started(&sim, &view).await;
    watching(&sim).await;
    let restarts = informer.health().restarts;
    let watches = sim.requests().count("pods", Verb::Watch);
    // The bad line precedes the first of several events written back to back, so events are
    // in flight behind it when the reflector meets it.
    sim.faults().malformed_next_event();
    create_pods(&client, "m", 5).await;
    let truth = server_pods(&client).await;
    eventually(
        "cache and handler have every pod despite the bad line",
        || cache_pods(&informer) == truth && view.snapshot() == truth,
    )
    .await;
    assert_eq!(
        sim.faults().counters().malformed_events,
        1,
        "the fault happened"
    );
    let health = informer.health();
    assert!(
        health.restarts > restarts,
        "S1: a malformed line restarts the reflector: {health:?}"
    );
    assert!(
        health
            .last_error
            .as_ref()
            .is_some_and(|(_, e)| e.contains("malformed event")),
        "the decode error is the one recorded: {health:?}"
    );
    assert!(
        sim.requests().count("pods", Verb::Watch) > watches,
        "the watch was reopened"
    );
    assert_eq!(health.lists, 1, "resumed from the last RV: no relist");
    assert_eq!(view.seen(), 3 + 5, "each pod notified once");
    assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
    informer.shutdown().await;
}

#[actix::test]
async fn p7_s3_panicking_handler_is_isolated() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 6).await;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    let calls = Arc::new(AtomicU64::new(0));
    let c = Arc::clone(&calls);
    let bad = informer
        .add_event_handler(handler_fn(move |_n: &Notification<Pod>| {
            if c.fetch_add(1, Ordering::SeqCst) % 2 == 0 {
                panic!("handler bug");
            }
        }))
        .await
        .unwrap();
    let good = View::default();
    informer.add_event_handler(good.handler()).await.unwrap();
    informer.start().unwrap();
    create_pods(&client, "b", 4).await;
    let truth = server_pods(&client).await;
    eventually("the good handler sees everything", || {
        good.snapshot() == truth
    })
    .await;
    eventually("the bad handler got every notification", || {
        calls.load(Ordering::SeqCst) == 10
    })
    .await;
    assert_eq!(bad.stats().panics(), 5, "P7: panics are counted");
    assert_eq!(
        informer.health().restarts,
        0,
        "S3: handler failures never stop the informer"
    );
    informer.shutdown().await;
}

#[actix::test]
async fn p4_handler_added_mid_stream_has_no_gap_and_no_duplicate() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 20).await;
    let first = View::default();
    let informer = started(&sim, &first).await;
    let churn_client = client.clone();
    let churn = tokio::spawn(async move {
        for i in 0..100 {
            touch_pod(
                &churn_client,
                "a",
                &format!("pod-{}", i % 20),
                &i.to_string(),
            )
            .await;
        }
    });
    let late = View::default();
    let reg = informer.add_event_handler(late.handler()).await.unwrap();
    churn.await.unwrap();
    let truth = server_pods(&client).await;
    eventually("late handler converges", || late.snapshot() == truth).await;
    assert!(late.anomalies().is_empty(), "P4: {:?}", late.anomalies());
    assert!(
        reg.has_synced(),
        "P5: the late handler synced after its replay"
    );
    informer.shutdown().await;
}

#[actix::test]
async fn p5_removing_one_handler_stops_only_it() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    let keep = View::default();
    let informer = started(&sim, &keep).await;
    let gone = View::default();
    let reg = informer.add_event_handler(gone.handler()).await.unwrap();
    eventually("second handler replayed", || gone.seen() == 3).await;
    assert!(reg.shut_down().await.unwrap(), "removed");
    assert!(
        reg.stats().stopped(),
        "shut_down waits until its listener stopped"
    );
    create_pods(&client, "b", 2).await;
    let truth = server_pods(&client).await;
    eventually("the kept handler still receives", || {
        keep.snapshot() == truth
    })
    .await;
    assert_eq!(gone.seen(), 3, "the removed handler receives nothing more");
    informer.shutdown().await;
}

#[actix::test]
async fn p6_p3_resync_reaches_only_handlers_that_asked() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 2).await;
    let mut config = fast_config();
    config.resync = Some(Duration::from_secs(1));
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, config);
    let resyncing = View::default();
    let quiet = View::default();
    informer
        .add_event_handler_with(
            resyncing.handler(),
            // Below the 1 s minimum: raised to it (P6).
            ListenerConfig::default().resync(Duration::from_millis(10)),
        )
        .await
        .unwrap();
    informer
        .add_event_handler_with(quiet.handler(), ListenerConfig::default().never_resync())
        .await
        .unwrap();
    informer.start().unwrap();
    eventually("resync notifications arrive", || resyncing.resyncs() >= 4).await;
    assert_eq!(
        quiet.resyncs(),
        0,
        "P3: no resync for a handler that asked for none"
    );
    assert!(resyncing.anomalies().is_empty());
    informer.shutdown().await;
}

/// A handler can be held inside its callback until the test lets it go.
#[derive(Clone, Default)]
struct Gate(Arc<(std::sync::Mutex<(bool, bool)>, std::sync::Condvar)>);

impl Gate {
    /// Closes (`true`) or opens the gate.
    fn set(&self, closed: bool) {
        let (st, cv) = &*self.0;
        st.lock().unwrap().0 = closed;
        cv.notify_all();
    }
    /// True while a callback is held at the gate.
    fn holding(&self) -> bool {
        self.0.0.lock().unwrap().1
    }
    /// Called by the handler: waits while the gate is closed; true if it had to wait.
    fn pass(&self) -> bool {
        let (st, cv) = &*self.0;
        let mut g = st.lock().unwrap();
        let mut held = false;
        while g.0 {
            held = true;
            g.1 = true;
            g = cv.wait(g).unwrap();
        }
        g.1 = false;
        held
    }
}

#[actix::test]
async fn p9_shutdown_stops_every_actor_and_closes_the_watch() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 2).await;
    let view = View::default();
    let informer = started(&sim, &view).await;
    // A second handler that will be inside a callback when shutdown starts.
    let gate = Gate::default();
    let held = View::default();
    let (g, h2) = (gate.clone(), held.clone());
    let reg = informer
        .add_event_handler(handler_fn(move |n: &Notification<Pod>| {
            if g.pass() {
                // The held notification's work, once released: long enough that a shutdown
                // that did not wait for it would return first.
                std::thread::sleep(Duration::from_millis(300));
            }
            h2.apply(n);
        }))
        .await
        .unwrap();
    eventually("watch open, the late handler replayed", || {
        sim.requests().open_watches() == 1 && held.seen() == 2
    })
    .await;
    gate.set(true);
    touch_pod(&client, "a", "pod-0", "in-flight").await;
    eventually("the handler is inside its callback", || gate.holding()).await;
    // Shutdown starts while the handler is mid-notification; the gate opens only once the
    // shutdown is under way (the watch is closed), so a shutdown that did not wait for the
    // callback would return before it finished.
    let shut = async {
        let report = informer.shutdown().await;
        (held.seen(), gate.holding(), report)
    };
    let release = async {
        eventually("the server sees the watch closed", || {
            sim.requests().open_watches() == 0
        })
        .await;
        gate.set(false);
    };
    let ((seen_at_return, holding_at_return, report), ()) = tokio::join!(shut, release);
    assert!(
        !holding_at_return && seen_at_return == 3,
        "P9: shutdown returned only after the handler finished its current notification \
         (seen {seen_at_return}, still held: {holding_at_return})"
    );
    assert!(
        report.unfinished.is_empty(),
        "no handler left unfinished: {report:?}"
    );
    assert!(reg.stats().stopped(), "listener stopped");
    assert!(!informer.is_running());
    assert_eq!(sim.requests().open_watches(), 0, "the watch is closed");
    assert_eq!(informer.lister().len(), 2, "the cache stays readable");
    informer.shutdown().await; // idempotent
}

#[actix::test]
async fn r7_watch_list_syncs_without_a_list_request() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 7).await;
    let mut config = fast_config();
    config.reflector.watch_list = true;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, config);
    start_synced(&informer).await;
    assert_eq!(informer.lister().len(), 7);
    assert_eq!(sim.requests().count("pods", Verb::List), 0, "R7: no LIST");
    create_pods(&client, "b", 1).await;
    let truth = server_pods(&client).await;
    eventually("live events after the initial bookmark", || {
        cache_pods(&informer) == truth
    })
    .await;
    informer.shutdown().await;
}

#[actix::test]
async fn r1_consistent_list_is_paged() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 23).await;
    let mut config = fast_config();
    config.reflector.initial_list = kinformer::reflector::InitialList::Consistent;
    config.reflector.page_size = Some(5);
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, config);
    start_synced(&informer).await;
    assert_eq!(informer.lister().len(), 23);
    assert_eq!(
        sim.requests().count("pods", Verb::List),
        5,
        "R1: 5 pages of 5"
    );
    informer.shutdown().await;
}

#[actix::test]
async fn x1_x3_factory_shares_one_list_and_one_watch() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    let factory = SharedInformerFactory::new(client.clone());
    // Two "controllers" ask for the same informer.
    let a = factory.informer::<Pod>();
    let b = factory.informer::<Pod>();
    assert!(a.same_as(&b), "X1: the same shared instance");
    let cms = factory.informer::<ConfigMap>();
    assert_eq!(factory.len(), 2);
    let va = View::default();
    let vb = View::default();
    a.add_event_handler(va.handler()).await.unwrap();
    b.add_event_handler(vb.handler()).await.unwrap();
    factory.start().unwrap();
    factory.start().unwrap(); // X3: idempotent
    let synced = factory.wait_for_cache_sync(DEADLINE).await;
    assert_eq!(synced.len(), 2);
    assert!(synced.values().all(|s| *s), "X3: per type: {synced:?}");
    eventually("both controllers see the pods", || {
        va.seen() == 3 && vb.seen() == 3
    })
    .await;
    // Sync comes after the LIST and before the WATCH opens: wait for both watches (pods, configmaps).
    eventually("both informers watching", || {
        sim.requests().open_watches() == 2
    })
    .await;
    assert_eq!(sim.requests().count("pods", Verb::List), 1, "one LIST");
    assert_eq!(
        sim.requests().count("pods", Verb::Watch),
        1,
        "one WATCH: {:?}",
        a.health()
    );
    assert!(cms.has_synced());
    factory.shutdown().await;
    assert!(!a.is_running());
}

#[actix::test]
async fn x2_namespace_selector_dynamic_and_metadata_informers() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    create_pods(&client, "b", 2).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "b");
    let mut other = pod("b", "other");
    other.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
    api.create(&PostParams::default(), &other).await.unwrap();

    let in_a = SharedInformerFactory::new(client.clone()).with_namespace("a");
    let web = SharedInformerFactory::new(client.clone()).with_label_selector("app=db");
    let all = SharedInformerFactory::new(client.clone());
    let pods_a = in_a.informer::<Pod>();
    let db = web.informer::<Pod>();
    let dynamic = all.for_resource(&ApiResource::erase::<Pod>(&()));
    let meta = all.metadata_informer::<Pod>();
    for f in [&in_a, &web, &all] {
        f.start().unwrap();
        assert!(f.wait_for_cache_sync(DEADLINE).await.values().all(|s| *s));
    }
    assert_eq!(pods_a.lister().len(), 3, "namespace scope");
    assert_eq!(db.lister().len(), 1, "label selector");
    assert_eq!(dynamic.lister().len(), 6, "dynamic objects");
    assert_eq!(meta.lister().len(), 6, "metadata only");
    let m = meta.lister().get("b", "other").expect("metadata object");
    assert_eq!(m.labels().get("app").map(String::as_str), Some("db"));
    for f in [&in_a, &web, &all] {
        f.shutdown().await;
    }
}

/// R5, in both cache modes (I7): a dynamic informer that expects Pods, pointed at configmaps,
/// drops every object (two listed: the list's item type says ConfigMap; three watched: each
/// event says so), caches none and reports each.
#[actix::test]
async fn r5_objects_of_an_unexpected_kind_are_dropped_not_cached() {
    for cache in [CacheMode::Typed, CacheMode::lean()] {
        r5_drops_every_configmap(cache).await;
    }
}

async fn r5_drops_every_configmap(cache: CacheMode) {
    let lean = matches!(cache, CacheMode::Lean(_));
    let sim = sim().await;
    let client = sim.client();
    // Two objects come through the LIST (items without a kind: the list's kind stands in)...
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "a");
    for i in 0..2 {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(format!("listed-{i}"));
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    // A dynamic informer that expects Pods but is pointed at configmaps.
    let mut wrong = ApiResource::erase::<ConfigMap>(&());
    wrong.kind = "Pod".into();
    let factory =
        SharedInformerFactory::new(client.clone()).with_config(fast_config().cache(cache));
    let informer = factory.for_resource(&wrong);
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let e = Arc::clone(&errors);
    informer
        .set_watch_error_handler(move |err| e.lock().unwrap().push(err.to_string()))
        .unwrap();
    factory.start().unwrap();
    factory.wait_for_cache_sync(DEADLINE).await;
    watching(&sim).await;
    // ...and three through the WATCH (events carry their apiVersion/kind).
    for i in 0..3 {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(format!("cm-{i}"));
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    eventually("five drops", || informer.health().dropped_objects == 5).await;
    assert_eq!(informer.lister().len(), 0, "R5: not cached (lean: {lean})");
    let errors = errors.lock().unwrap().clone();
    assert_eq!(
        errors.len(),
        5,
        "each drop is reported (lean: {lean}): {errors:?}"
    );
    if lean {
        // The lean mode reads the kind from the metadata, so its reports can name it.
        assert!(
            errors.iter().all(|e| e.contains("ConfigMap")),
            "the reports say what came: {errors:?}"
        );
        let stats = informer.lean_stats().expect("a lean informer");
        assert_eq!((stats.objects, stats.encode_failures), (0, 0), "{stats:?}");
    }
    factory.shutdown().await;
}

#[actix::test]
async fn r3_bookmarks_move_the_rv_without_events() {
    let sim = sim_with(kinformer_sim::SimConfig {
        bookmark_interval: Duration::from_millis(20),
        ..Default::default()
    })
    .await;
    let client = sim.client();
    create_pods(&client, "a", 2).await;
    let view = View::default();
    let informer = started(&sim, &view).await;
    watching(&sim).await;
    // Changes to another resource move the global RV; only bookmarks tell the pod watch.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "a");
    for i in 0..3 {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(format!("cm-{i}"));
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let target = sim.resource_version().to_string();
    eventually("a bookmark carries the RV forward", || {
        informer.last_sync_resource_version() == target
    })
    .await;
    assert_eq!(view.seen(), 2, "bookmarks reach no handler");
    assert_eq!(informer.lister().len(), 2);
    informer.shutdown().await;
}

#[actix::test]
async fn r4_silent_watch_is_dropped_client_side_and_reopened() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    let mut config = fast_config();
    config.reflector.idle_timeout = Duration::from_secs(1);
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, config);
    start_synced(&informer).await;
    watching(&sim).await;
    sim.faults().stall_watches(true);
    touch_pod(&client, "a", "pod-0", "while-stalled").await;
    eventually("the silent watch was dropped client-side", || {
        informer.health().stalls >= 1
    })
    .await;
    sim.faults().stall_watches(false);
    let truth = server_pods(&client).await;
    eventually("the reopened watch delivers what was withheld", || {
        cache_pods(&informer) == truth
    })
    .await;
    let h = informer.health();
    assert!(
        h.restarts >= 1 && h.failures >= 1,
        "R8: an idle watch is reopened after the backoff: {h:?}"
    );
    assert_eq!(
        h.lists, 1,
        "R4: reopened from the last RV, no relist: {h:?}"
    );
    informer.shutdown().await;
}

#[actix::test]
async fn r8_a_failed_list_waits_the_default_backoff() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 1).await;
    sim.faults().fail_next_lists(1, 500);
    // Default config: R8's 800 ms base with up to 100 % jitter.
    let informer = SharedIndexInformer::<Pod>::with_config(
        client.clone(),
        None,
        kinformer_actors::InformerConfig::default(),
    );
    informer.start().unwrap();
    eventually("backing off", || {
        matches!(
            informer.health().phase,
            kinformer_actors::ReflectorPhase::BackingOff(_)
        )
    })
    .await;
    let kinformer_actors::ReflectorPhase::BackingOff(d) = informer.health().phase else {
        unreachable!("checked above")
    };
    assert!(
        d >= Duration::from_millis(800) && d <= Duration::from_millis(1600),
        "R8: first restart delay {d:?} is 800 ms plus up to 100 % jitter"
    );
    tokio::time::timeout(DEADLINE, informer.wait_for_sync())
        .await
        .unwrap();
    assert_eq!(informer.health().restarts, 1);
    informer.shutdown().await;
}

#[actix::test]
async fn p9_shutting_down_one_informer_leaves_a_shared_clients_connections_alone() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 2).await;
    let cms = SharedIndexInformer::<ConfigMap>::with_config(client.clone(), None, fast_config());
    let view = View::default();
    let pods = started(&sim, &view).await;
    start_synced(&cms).await;
    eventually("both watching", || sim.requests().open_watches() == 2).await;
    // Stopping one informer must not cut pooled connections the other reuses.
    cms.shutdown().await;
    for round in 0..3 {
        sim.faults().drop_watches();
        touch_pod(&client, "a", "pod-0", &round.to_string()).await;
        let truth = server_pods(&client).await;
        eventually("the other informer carries on", || {
            cache_pods(&pods) == truth
        })
        .await;
    }
    // No cut connection: the only failures are very short watches (watches this test dropped
    // within a second of opening; R4 backs off from those).
    let h = pods.health();
    assert_eq!(h.failures, h.very_short_watches, "{h:?}");
    assert_eq!(h.lists, 1, "{h:?}");
    pods.shutdown().await;
}

/// From a plain tokio runtime (no actix System on the thread) informers run on kinformer's
/// background actix System.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_informer_works_from_plain_tokio() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    let view = View::default();
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    informer.add_event_handler(view.handler()).await.unwrap();
    start_synced(&informer).await;
    create_pods(&client, "b", 1).await;
    let truth = server_pods(&client).await;
    eventually("events flow", || view.snapshot() == truth).await;
    informer.shutdown().await;
    assert!(!informer.is_running());
}

/// P10: a relist holds one copy of each unchanged object. An object the cache already holds
/// with the same uid and resourceVersion comes back from the LIST as the cached `Arc` (the
/// copy just read is dropped at once), so after the relist the lister hands out the very same
/// object; a changed object is the new one.
#[actix::test]
async fn p10_a_relist_keeps_the_cached_copy_of_each_unchanged_object() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    start_synced(&informer).await;
    watching(&sim).await;
    let lister = informer.lister();
    let before = |name: &str| lister.get("a", name).expect("cached");
    let (unchanged, changed) = (before("pod-0"), before("pod-1"));
    let lists = informer.health().lists;
    // A restart: the watch breaks, pod-1 changes meanwhile, and the watch from the old
    // resourceVersion is answered 410, so the informer relists.
    sim.faults().go_down();
    sim.patch_object(
        "pods",
        Some("a"),
        "pod-1",
        &serde_json::json!({"metadata": {"annotations": {"p10": "changed"}}}),
    )
    .expect("patch while down");
    sim.faults().come_back();
    eventually("the relist brought pod-1's change", || {
        informer.health().lists > lists
            && lister
                .get("a", "pod-1")
                .is_some_and(|p| p.metadata.annotations.is_some())
    })
    .await;
    let after = lister.get("a", "pod-0").expect("still cached");
    assert!(
        Arc::ptr_eq(&after, &unchanged),
        "the unchanged pod is the cached copy, not a second one"
    );
    let after = lister.get("a", "pod-1").expect("still cached");
    assert!(!Arc::ptr_eq(&after, &changed), "the changed pod is new");
    assert_eq!(informer.health().expired, 1, "one relist after a 410");
    informer.shutdown().await;
}
