//! The reflector against misbehaving servers, over HTTP through the real informer: watches that
//! end at once (R4, the "very short watch" rule), 410 on every watch (R8: relists back off),
//! watch-list rejected with 422 or ignored (R7: fall back to LIST+WATCH and sync), objects
//! without resourceVersion (R4: delivered like any other) and 429 with Retry-After (R8:
//! honoured). Each test names the ids of `docs/semantics.md` it checks.
//!
//! Rates are measured with the sim's request arrival times, never with sleeps: a test waits
//! (with a deadline) until the reflector made N requests, then checks that the time between
//! them is at least the sum of the smallest backoff delays the config allows.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kinformer::notification::Notification;
use kinformer_actors::{
    InformerConfig, ReflectorHealth, ReflectorPhase, SharedIndexInformer, handler_fn,
};
use kinformer_sim::{ExpireMode, Sim, Verb};
use kube::{Client, ResourceExt};

// =============================================================================================
// ADJUST HERE if the reflector's names change: what this file reads from the reflector beyond
// the basic health counters is in this block.
// =============================================================================================

/// Health counter: watches that ended in under a second with no event (client-go's "very
/// short watch"), each counted as a failure (R4).
fn short_watches(h: &ReflectorHealth) -> u64 {
    h.very_short_watches
}
/// Health counter: waits imposed by a 429's `Retry-After` (R8).
fn retry_after_waits(h: &ReflectorHealth) -> u64 {
    h.retry_after_waits
}
/// Health counter: watch-lists that fell back to LIST+WATCH (rejected, or no
/// initial-events-end bookmark in time) (R7).
fn watch_list_fallbacks(h: &ReflectorHealth) -> u64 {
    h.watch_list_fallbacks
}
/// What the health's last error says about a very short watch (client-go's wording).
const VERY_SHORT_WATCH: &str = "very short watch";

/// How long a watch-list waits for the initial-events-end bookmark before falling back to
/// LIST+WATCH (R7, a server that ignores `sendInitialEvents`).
fn set_watch_list_timeout(cfg: &mut InformerConfig, timeout: Duration) {
    cfg.reflector.watch_list_timeout = timeout;
}

// =============================================================================================

/// Backoff for tests that need several cycles: 100 ms doubling to 400 ms, no jitter (so the
/// smallest delay the reflector may wait is exactly the schedule).
fn backoff_config() -> InformerConfig {
    let mut c = InformerConfig::default();
    c.backoff.initial = Duration::from_millis(100);
    c.backoff.max = Duration::from_millis(400);
    c.backoff.factor = 2.0;
    c.backoff.jitter = 0.0;
    c
}

/// The smallest total wait before the (i+1)-th of `n` consecutive failures' retries, for
/// i in 0..n: 0, 100, 300, 700, 1100, ... ms under [`backoff_config`].
fn min_cumulative_backoff(cfg: &InformerConfig, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    let mut total = Duration::ZERO;
    let mut delay = cfg.backoff.initial;
    for _ in 0..n {
        out.push(total);
        total += delay;
        delay = delay.mul_f64(cfg.backoff.factor).min(cfg.backoff.max);
    }
    out
}

/// Asserts that `arrivals` (request times, oldest first) are no faster than the backoff:
/// the i-th came at least 90 % of the i-th cumulative minimal delay after the first.
fn assert_paced(what: &str, arrivals: &[Instant], cfg: &InformerConfig, h: &ReflectorHealth) {
    let bounds = min_cumulative_backoff(cfg, arrivals.len());
    let first = arrivals[0];
    let offsets: Vec<Duration> = arrivals.iter().map(|t| *t - first).collect();
    for (i, (got, min)) in offsets.iter().zip(&bounds).enumerate() {
        assert!(
            *got >= min.mul_f64(0.9),
            "R8: {what} #{i} came {got:?} after the first, before the backoff allows ({min:?}); \
             all offsets {offsets:?}; health {h:?}"
        );
    }
}

/// A kube client without kube's own retry of 429/503/504, so the reflector sees them.
fn client_without_retry(sim: &Sim) -> Client {
    let mut cfg = sim.kube_config();
    cfg.default_retry = false;
    Client::try_from(cfg).expect("client")
}

fn informer(client: Client, config: InformerConfig) -> SharedIndexInformer<Pod> {
    SharedIndexInformer::<Pod>::with_config(client, None, config)
}

async fn synced(informer: &SharedIndexInformer<Pod>) {
    tokio::time::timeout(DEADLINE, informer.wait_for_sync())
        .await
        .unwrap_or_else(|_| panic!("never synced: {:?}", informer.health()));
}

/// Waits until the sim saw at least `n` requests of `verb` on pods; returns their arrivals.
async fn wait_requests(
    sim: &Sim,
    verb: Verb,
    n: u64,
    informer: &SharedIndexInformer<Pod>,
) -> Vec<Instant> {
    let deadline = Instant::now() + DEADLINE;
    while sim.requests().count("pods", verb) < n {
        assert!(
            Instant::now() < deadline,
            "only {} {verb:?} requests, waiting for {n}: {:?}",
            sim.requests().count("pods", verb),
            informer.health()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sim.requests().arrivals("pods", verb)
}

fn keys(m: &std::collections::BTreeMap<String, String>) -> BTreeSet<String> {
    m.keys().cloned().collect()
}

#[actix::test]
async fn r4_watches_that_end_at_once_back_off() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    sim.faults().end_watches_at_once(true);
    let config = backoff_config();
    let informer = informer(client.clone(), config.clone());
    informer.start().unwrap();
    synced(&informer).await;
    assert_eq!(informer.lister().len(), 3, "the LIST works");

    // Six watches, each ended at once with no event: every one is a failure (client-go's
    // "very short watch"), so they are spaced by the backoff, not ~800 a second.
    let watches = wait_requests(&sim, Verb::Watch, 6, &informer).await;
    let h = informer.health();
    assert_paced("WATCH", &watches[..6], &config, &h);
    assert!(sim.faults().counters().watches_ended_at_once >= 6);
    let mentions_short = h
        .last_error
        .as_ref()
        .is_some_and(|(_, e)| e.to_lowercase().contains(VERY_SHORT_WATCH));
    assert!(
        h.restarts >= 1 || mentions_short,
        "S2: the failures are visible: {h:?}"
    );
    assert!(
        short_watches(&h) >= 5,
        "the short watches are counted: {h:?}"
    );

    // The server behaves again: the informer watches normally and sees a new object.
    sim.faults().clear();
    eventually("a watch stays open", || {
        sim.requests().open_watches_of("pods") == 1
    })
    .await;
    create_pods(&client, "b", 1).await;
    eventually("the new pod reaches the cache", || {
        informer.lister().get("b", "pod-0").is_some()
    })
    .await;
    eventually("watching", || {
        informer.health().phase == ReflectorPhase::Watching
    })
    .await;
    let n = sim.requests().count("pods", Verb::Watch);
    touch_pod(&client, "b", "pod-0", "again").await;
    eventually("the update reaches the cache", || {
        informer
            .lister()
            .get("b", "pod-0")
            .is_some_and(|p| p.annotations().get("touched").map(String::as_str) == Some("again"))
    })
    .await;
    assert_eq!(
        sim.requests().count("pods", Verb::Watch),
        n,
        "the same watch delivered it"
    );
    informer.shutdown().await;
}

#[actix::test]
async fn r8_410_on_every_watch_relists_with_backoff() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 4).await;
    sim.faults().expire_every_watch(Some(ExpireMode::Http));
    let config = backoff_config();
    let informer = informer(client.clone(), config.clone());
    informer.start().unwrap();
    synced(&informer).await;

    // Every watch gets 410, so every cycle relists: the LISTs come at the backoff's pace.
    let lists = wait_requests(&sim, Verb::List, 6, &informer).await;
    let h = informer.health();
    assert_paced("LIST after 410", &lists[..6], &config, &h);
    assert!(h.expired >= 5, "R3: each 410 is counted: {h:?}");
    assert!(sim.faults().counters().watches_refused_expired >= 5);
    let watches = sim.requests().arrivals("pods", Verb::Watch);
    assert_paced("WATCH after 410", &watches[..5], &config, &h);

    // The server changes meanwhile; once it behaves again the cache converges to it.
    create_pods(&client, "b", 2).await;
    delete_pod(&client, "a", "pod-0").await;
    touch_pod(&client, "a", "pod-1", "during-410").await;
    sim.faults().clear();
    eventually("a watch stays open", || {
        sim.requests().open_watches_of("pods") == 1
    })
    .await;
    let truth = server_pods(&client).await;
    eventually("the cache converges to the server", || {
        cache_pods(&informer) == truth
    })
    .await;
    informer.shutdown().await;
}

/// The shared body of the two R7 fallback tests.
async fn watch_list_falls_back(sim: &Sim, config: InformerConfig, fault_counter: fn(&Sim) -> u64) {
    let client = sim.client();
    let informer = informer(client.clone(), config);
    let view = View::default();
    informer.add_event_handler(view.handler()).await.unwrap();
    informer.start().unwrap();
    synced(&informer).await;
    assert!(fault_counter(sim) >= 1, "the fault took effect");
    assert!(
        sim.requests().count("pods", Verb::List) >= 1,
        "R7: the fallback LISTs: {:?}",
        informer.health()
    );
    let h = informer.health();
    assert!(
        watch_list_fallbacks(&h) >= 1,
        "the fallback is counted: {h:?}"
    );
    let truth = server_pods(&client).await;
    assert_eq!(cache_pods(&informer), truth, "F5: synced means complete");
    // Then it watches: live events arrive.
    create_pods(&client, "b", 2).await;
    let truth = server_pods(&client).await;
    eventually("live events after the fallback", || {
        cache_pods(&informer) == truth
    })
    .await;
    eventually("the handler's view too", || view.snapshot() == truth).await;
    assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
    informer.shutdown().await;
}

#[actix::test]
async fn r7_watch_list_rejected_falls_back_to_list_and_syncs() {
    let sim = sim().await;
    create_pods(&sim.client(), "a", 5).await;
    sim.faults().reject_watch_list(true);
    let mut config = backoff_config();
    config.reflector.watch_list = true;
    watch_list_falls_back(&sim, config, |s| s.faults().counters().watch_lists_rejected).await;
}

#[actix::test]
async fn r7_watch_list_ignored_falls_back_to_list_and_syncs() {
    let sim = sim().await;
    create_pods(&sim.client(), "a", 5).await;
    sim.faults().ignore_watch_list(true);
    let mut config = backoff_config();
    config.reflector.watch_list = true;
    set_watch_list_timeout(&mut config, Duration::from_millis(500));
    // Watches end (cleanly) within 5-10 s, so a reflector that falls back when a watch-list
    // ends without the bookmark (rather than on a timer) also passes within the deadline.
    config.reflector.min_watch_timeout = Duration::from_secs(5);
    watch_list_falls_back(&sim, config, |s| s.faults().counters().watch_lists_ignored).await;
}

#[actix::test]
async fn r4_objects_without_resource_version_converge() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    sim.faults().strip_resource_versions(true);
    let informer = informer(client.clone(), backoff_config());
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s = Arc::clone(&seen);
    informer
        .add_event_handler(handler_fn(move |n: &Notification<Pod>| {
            let o = n.object();
            let what = match n {
                Notification::Add { .. } => "add",
                Notification::Update { .. } => "update",
                Notification::Delete { .. } => "delete",
            };
            let key = format!(
                "{what} {}/{}",
                o.namespace().unwrap_or_default(),
                o.name_any()
            );
            s.lock().unwrap().push(key);
        }))
        .await
        .unwrap();
    let view = View::default();
    informer.add_event_handler(view.handler()).await.unwrap();
    informer.start().unwrap();
    synced(&informer).await;
    assert_eq!(
        informer.lister().len(),
        3,
        "listed items without RV are cached"
    );
    watching(&sim).await;

    // Create, update and delete while objects carry no resourceVersion.
    create_pods(&client, "b", 1).await;
    touch_pod(&client, "a", "pod-1", "no-rv").await;
    delete_pod(&client, "a", "pod-2").await;
    let has = |k: &str| seen.lock().unwrap().iter().any(|s| s == k);
    eventually("the handler sees the create and the delete", || {
        has("add b/pod-0") && has("delete a/pod-2")
    })
    .await;
    eventually("the update reaches the cache", || {
        informer
            .lister()
            .get("a", "pod-1")
            .is_some_and(|p| p.annotations().get("touched").map(String::as_str) == Some("no-rv"))
    })
    .await;
    // With no RV on either side client-go would take the update for a resync and withhold it
    // from handlers that did not ask for resyncs; we deliver it (docs/semantics.md P1, R4).
    eventually("the handler sees the update", || has("update a/pod-1")).await;
    let truth = keys(&server_pods(&client).await);
    eventually("the cache converges", || {
        keys(&cache_pods(&informer)) == truth
    })
    .await;
    eventually("the handler's view converges", || {
        keys(&view.snapshot()) == truth
    })
    .await;
    assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
    assert!(sim.faults().counters().objects_without_resource_version >= 6);
    assert_eq!(
        informer.health().dropped_objects,
        0,
        "nothing is dropped for a missing RV"
    );
    informer.shutdown().await;
}

#[actix::test]
async fn r8_429_retry_after_is_honoured() {
    let sim = sim().await;
    let client = client_without_retry(&sim);
    create_pods(&sim.client(), "a", 2).await;
    // Backoff alone would retry after 50 ms; Retry-After asks for a second.
    let mut config = InformerConfig::default();
    config.backoff.initial = Duration::from_millis(50);
    config.backoff.max = Duration::from_millis(100);
    config.backoff.jitter = 0.0;
    let retry_after = Duration::from_secs(1);
    // A little under a second: Retry-After has whole-second resolution and the reflector may
    // start its wait a moment before the server stamped the request.
    let min_gap = Duration::from_millis(950);

    // The next LIST is throttled.
    sim.faults()
        .throttle(Some("pods"), &[Verb::List], Some(1), retry_after.as_secs());
    let informer = informer(client.clone(), config);
    informer.start().unwrap();
    synced(&informer).await;
    assert_eq!(informer.lister().len(), 2);
    let lists = sim.requests().arrivals("pods", Verb::List);
    assert_eq!(sim.faults().counters().throttled, 1);
    assert!(lists.len() >= 2, "{lists:?}");
    let gap = lists[1] - lists[0];
    assert!(
        gap >= min_gap,
        "R8: the LIST was retried {gap:?} after a 429 with Retry-After: 1: {:?}",
        informer.health()
    );

    // The next WATCH is throttled: cut the open one so the reflector opens another.
    watching(&sim).await;
    let before = sim.requests().count("pods", Verb::Watch) as usize;
    sim.faults()
        .throttle(Some("pods"), &[Verb::Watch], Some(1), retry_after.as_secs());
    sim.faults().drop_watches();
    let watches = wait_requests(&sim, Verb::Watch, before as u64 + 2, &informer).await;
    assert_eq!(sim.faults().counters().throttled, 2);
    let gap = watches[before + 1] - watches[before];
    assert!(
        gap >= min_gap,
        "R8: the WATCH was retried {gap:?} after a 429 with Retry-After: 1: {:?}",
        informer.health()
    );
    // And it carries on.
    create_pods(&sim.client(), "b", 1).await;
    eventually("events flow after the throttling", || {
        informer.lister().get("b", "pod-0").is_some()
    })
    .await;
    let h = informer.health();
    assert!(
        retry_after_waits(&h) >= 2,
        "each Retry-After wait is counted: {h:?}"
    );
    informer.shutdown().await;
}
