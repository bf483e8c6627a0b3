//! Telemetry over HTTP against the sim (issue 10): `/metrics` parsed back with a Prometheus
//! text parser (informer, listener and client-go workqueue series, and the informer's series
//! gone after its shutdown, kubernetes#73587), `/healthz` turning unhealthy while the sim fails
//! every list and watch past a short grace period and healthy again once the faults are
//! cleared, `/readyz` before and after sync, the `/debug/informers` JSON, and its HTML page
//! rendered by a real headless Chromium.
//!
//! The endpoint is fetched with a plain HTTP/1.1 GET over a `TcpStream` (`Connection: close`).

use std::{
    collections::BTreeMap,
    path::PathBuf,
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kinformer::notification::Notification;
use kinformer_actors::{
    AsyncWorkQueue, EndpointHandle, KeyMapper, LazyObject, ListenerConfig, ObjectKey,
    OverflowPolicy, ReflectorPhase, SharedIndexInformer, SharedInformerFactory, Telemetry,
    TelemetryError, TelemetryOptions, handler_fn,
};
use kinformer_sim::Sim;
use prometheus_parse::{Sample, Scrape, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP answer.
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

/// `method path` with `Accept: accept`, over a fresh connection.
async fn request(addr: std::net::SocketAddr, method: &str, path: &str, accept: &str) -> Answer {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.expect("write request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.expect("read answer");
    let raw = String::from_utf8(raw).expect("utf-8 answer");
    let (head, body) = raw.split_once("\r\n\r\n").expect("head and body");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_string(),
    }
}

async fn get(addr: std::net::SocketAddr, path: &str) -> Answer {
    request(addr, "GET", path, "*/*").await
}

/// Polls `path` until `cond` holds on the answer; panics after `DEADLINE`.
async fn until(
    addr: std::net::SocketAddr,
    path: &str,
    what: &str,
    cond: impl Fn(&Answer) -> bool,
) -> Answer {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let a = get(addr, path).await;
        if cond(&a) {
            return a;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: {what}; last answer {} {}",
            a.status,
            a.body
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `/metrics`, checked for OpenMetrics' content type and end marker, parsed.
async fn scrape(addr: std::net::SocketAddr) -> Scrape {
    let a = get(addr, "/metrics").await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(
        a.headers["content-type"].starts_with("application/openmetrics-text"),
        "content type {}",
        a.headers["content-type"]
    );
    assert!(a.body.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    Scrape::parse(a.body.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text parses")
}

fn matches(s: &Sample, name: &str, labels: &[(&str, &str)]) -> bool {
    s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
}

/// The value of the one sample `name{labels}` (counter, gauge or untyped).
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let found: Vec<_> = scrape
        .samples
        .iter()
        .filter(|s| matches(s, name, labels))
        .collect();
    assert!(
        found.len() <= 1,
        "{name}{labels:?} is not unique: {found:?}"
    );
    found.first().map(|s| match &s.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        other => panic!("{name} is not a scalar: {other:?}"),
    })
}

fn must(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    value(scrape, name, labels).unwrap_or_else(|| panic!("no sample {name}{labels:?}"))
}

/// The `+Inf` bucket and the bucket bounds of histogram `name{labels}`.
fn histogram(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> (f64, Vec<f64>) {
    let s = scrape
        .samples
        .iter()
        .find(|s| matches(s, name, labels))
        .unwrap_or_else(|| panic!("no histogram {name}{labels:?}"));
    let Value::Histogram(buckets) = &s.value else {
        panic!("{name} is not a histogram: {:?}", s.value)
    };
    let inf = buckets
        .iter()
        .find(|b| b.less_than.is_infinite())
        .map(|b| b.count)
        .expect("+Inf bucket");
    (inf, buckets.iter().map(|b| b.less_than).collect())
}

fn informer_series(scrape: &Scrape, informer: &str) -> Vec<String> {
    scrape
        .samples
        .iter()
        .filter(|s| s.labels.get("informer") == Some(informer))
        .map(|s| s.metric.clone())
        .collect()
}

/// Registers `informer` with a new `Telemetry` served on an ephemeral loopback port, then
/// starts the informer; the endpoint (shut it down at the end) and its address.
async fn serve_and_start(
    informer: &SharedIndexInformer<Pod>,
) -> (EndpointHandle, std::net::SocketAddr) {
    let telemetry = Telemetry::new();
    telemetry.register_informer(informer);
    let endpoint = telemetry
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let addr = endpoint.local_addr();
    informer.start().expect("start");
    (endpoint, addr)
}

async fn started(sim: &Sim, ns: &str, pods: usize) -> SharedIndexInformer<Pod> {
    create_pods(&sim.client(), ns, pods).await;
    SharedIndexInformer::<Pod>::with_config(sim.client(), Some(ns), fast_config())
}

/// `/metrics` against the live counters: informer, listener and workqueue series under
/// client-go's names; a stopped informer's series and a dropped queue's series are gone.
#[actix::test]
async fn metrics_parse_back_and_vanish_after_shutdown() {
    let sim = sim().await;
    let informer = started(&sim, "a", 5).await;
    let view = View::default();
    informer
        .add_event_handler_with(
            view.handler(),
            ListenerConfig::default()
                .name("view")
                .policy(OverflowPolicy::Unbounded),
        )
        .await
        .expect("handler");
    let telemetry = Telemetry::new();
    assert_eq!(telemetry.register_informer(&informer), "a/pods");
    assert_eq!(
        telemetry.register_informer(&informer),
        "a/pods",
        "same informer, same name"
    );

    // A workqueue through client-go's cycle: 3 adds (one deduplicated), a rate-limited retry,
    // two items done and one still in progress.
    let queue: AsyncWorkQueue<String> = AsyncWorkQueue::new();
    telemetry
        .register_workqueue("test-queue", &queue)
        .expect("register queue");
    assert!(matches!(
        telemetry.register_workqueue("test-queue", &AsyncWorkQueue::<String>::new()),
        Err(TelemetryError::DuplicateWorkQueue(_))
    ));
    queue.add("a".into());
    queue.add("b".into());
    queue.add("a".into());
    let a = queue.get().await.expect("a");
    queue.done(&a);
    queue.add_rate_limited("c".into());
    let b = queue.get().await.expect("b");
    assert_eq!(b, "b");
    let c = queue.get().await.expect("c, after its 5 ms backoff");
    queue.done(&c);

    let endpoint = telemetry
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let addr = endpoint.local_addr();

    // Readiness: registered and not started is not ready.
    let r = get(addr, "/readyz").await;
    assert_eq!(
        (r.status, r.body.contains("a/pods")),
        (503, true),
        "{}",
        r.body
    );
    let m = scrape(addr).await;
    let inf = [
        ("informer", "a/pods"),
        ("resource", "pods"),
        ("namespace", "a"),
    ];
    assert_eq!(must(&m, "kinformer_informer_up", &inf), 0.0, "idle");

    informer.start().expect("start");
    until(addr, "/readyz", "ready after sync", |a| a.status == 200).await;
    eventually("the handler saw 5 pods", || view.seen() == 5).await;

    let m = scrape(addr).await;
    assert_eq!(must(&m, "kinformer_informer_up", &inf), 1.0);
    assert_eq!(must(&m, "kinformer_informer_synced", &inf), 1.0);
    assert_eq!(must(&m, "kinformer_store_objects", &inf), 5.0);
    assert!(must(&m, "kinformer_reflector_lists_total", &inf) >= 1.0);
    // Process-wide, no labels; the sim's pods are decoded by simd-json, so it is not counted
    // per object (other tests in this process may have fed it bad input).
    assert!(value(&m, "kinformer_decode_fallbacks_total", &[]).is_some());
    assert_eq!(must(&m, "kinformer_reflector_restarts_total", &inf), 0.0);
    assert_eq!(
        must(&m, "kinformer_reflector_last_sync_resource_version", &inf),
        informer
            .last_sync_resource_version()
            .parse::<f64>()
            .expect("numeric RV")
    );
    assert_eq!(must(&m, "kinformer_fifo_pending_deltas", &inf), 0.0);
    let lis = [("informer", "a/pods"), ("listener", "view")];
    assert_eq!(must(&m, "kinformer_listener_received_total", &lis), 5.0);
    assert_eq!(must(&m, "kinformer_listener_delivered_total", &lis), 5.0);
    assert_eq!(must(&m, "kinformer_listener_dropped_total", &lis), 0.0);
    assert_eq!(must(&m, "kinformer_listener_coalesced_total", &lis), 0.0);
    assert_eq!(
        must(&m, "kinformer_reflector_decode_errors_total", &inf),
        0.0
    );
    assert_eq!(must(&m, "kinformer_listener_panics_total", &lis), 0.0);
    assert_eq!(must(&m, "kinformer_listener_buffered", &lis), 0.0);
    let (handled, _) = histogram(&m, "kinformer_listener_handle_duration_seconds", &lis);
    assert_eq!(handled, 5.0, "one handler latency per notification");
    assert_eq!(
        must(&m, "kinformer_listener_handle_duration_seconds_count", &lis),
        5.0
    );

    // client-go's workqueue series.
    let q = [("name", "test-queue")];
    assert_eq!(must(&m, "workqueue_depth", &q), 0.0);
    assert_eq!(must(&m, "workqueue_adds_total", &q), 3.0);
    assert_eq!(must(&m, "workqueue_retries_total", &q), 1.0);
    let (queued, bounds) = histogram(&m, "workqueue_queue_duration_seconds", &q);
    assert_eq!(queued, 3.0, "a, b and c were handed out");
    assert_eq!(
        bounds.len(),
        11,
        "client-go's 10 buckets (10 ns .. 10 s) and +Inf"
    );
    assert!((bounds[0] - 1e-8).abs() < 1e-12 && (bounds[9] - 10.0).abs() < 1e-9);
    let (worked, _) = histogram(&m, "workqueue_work_duration_seconds", &q);
    assert_eq!(worked, 2.0, "a and c are done, b is in progress");
    assert!(
        must(&m, "workqueue_work_duration_seconds_sum", &q) >= 0.0,
        "sum present"
    );
    let before = must(&m, "workqueue_longest_running_processor_seconds", &q);
    assert!(must(&m, "workqueue_unfinished_work_seconds", &q) >= before);
    // The in-progress time is real: it grows while b is held.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let m = scrape(addr).await;
    assert!(must(&m, "workqueue_longest_running_processor_seconds", &q) >= before + 0.019);
    queue.done(&b);

    // Live values: one more pod shows up at the next scrape.
    kube::Api::<Pod>::namespaced(sim.client(), "a")
        .create(&Default::default(), &pod("a", "extra"))
        .await
        .expect("create");
    let deadline = Instant::now() + DEADLINE;
    while value(&scrape(addr).await, "kinformer_store_objects", &inf) != Some(6.0) {
        assert!(Instant::now() < deadline, "store_objects reaches 6");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // It came as a watch ADDED event (the first 5 were listed, not watched).
    let by_type = |m: &Scrape, t: &str| {
        let mut l = inf.to_vec();
        l.push(("type", t));
        must(m, "kinformer_reflector_watch_events_total", &l)
    };
    let m = scrape(addr).await;
    assert_eq!(
        (
            by_type(&m, "ADDED"),
            by_type(&m, "MODIFIED"),
            by_type(&m, "DELETED")
        ),
        (1.0, 0.0, 0.0)
    );

    // kubernetes#73587: a stopped informer's series are removed; the queue's stay.
    informer.shutdown().await;
    let m = scrape(addr).await;
    assert_eq!(informer_series(&m, "a/pods"), Vec::<String>::new());
    assert!(value(&m, "workqueue_depth", &q).is_some());
    assert_eq!(
        get(addr, "/readyz").await.status,
        200,
        "nothing left to sync"
    );
    drop(queue);
    assert!(
        value(&scrape(addr).await, "workqueue_depth", &q).is_none(),
        "dropped queue"
    );
    endpoint.shutdown().await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the endpoint stopped"
    );
}

/// Scrapes `/metrics` until `cond` holds; panics after `DEADLINE`.
async fn scrape_until(
    addr: std::net::SocketAddr,
    what: &str,
    cond: impl Fn(&Scrape) -> bool,
) -> Scrape {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let m = scrape(addr).await;
        if cond(&m) {
            return m;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// B3 under the default policy (Coalesce): a handler held inside its callback falls behind,
/// its backlog is merged per key, and `kinformer_listener_coalesced_total` counts what was
/// merged away: once it caught up, `received = delivered + coalesced`, and the handler ends on
/// the latest state.
#[actix::test]
async fn coalesced_total_counts_a_slow_handlers_merges() {
    const TOUCHES: usize = 100;
    let sim = sim().await;
    let informer = started(&sim, "co", 1).await;
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let mut gate = Some(gate);
    let last = Arc::new(Mutex::new(String::new()));
    let seen = Arc::clone(&last);
    let handler = handler_fn(move |n: &Notification<Pod>| {
        if let Notification::Update { new, .. } = n {
            // The first update holds the handler until the test releases it.
            if let Some(g) = gate.take() {
                let _ = g.recv();
            }
            let touched = new
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("touched").cloned())
                .unwrap_or_default();
            *seen.lock().expect("lock") = touched;
        }
    });
    assert_eq!(ListenerConfig::default().policy, OverflowPolicy::Coalesce);
    informer
        .add_event_handler_with(handler, ListenerConfig::default().name("slow").capacity(1))
        .await
        .expect("handler");
    let (endpoint, addr) = serve_and_start(&informer).await;
    until(addr, "/readyz", "ready after sync", |a| a.status == 200).await;

    let client = sim.client();
    for i in 0..TOUCHES {
        touch_pod(&client, "co", "pod-0", &format!("v{i}")).await;
    }
    let lis = [("informer", "co/pods"), ("listener", "slow")];
    let received = (1 + TOUCHES) as f64; // the initial Add and every update
    scrape_until(addr, "every update received", |m| {
        value(m, "kinformer_listener_received_total", &lis).is_some_and(|r| r >= received)
    })
    .await;
    drop(release);
    let m = scrape_until(addr, "the handler caught up", |m| {
        must(m, "kinformer_listener_buffered", &lis) == 0.0
            && must(m, "kinformer_listener_delivered_total", &lis)
                + must(m, "kinformer_listener_coalesced_total", &lis)
                == must(m, "kinformer_listener_received_total", &lis)
    })
    .await;
    let coalesced = must(&m, "kinformer_listener_coalesced_total", &lis);
    assert!(coalesced > 0.0, "the backlog was merged: {coalesced}");
    eventually("the handler saw the latest state", || {
        *last.lock().expect("lock") == format!("v{}", TOUCHES - 1)
    })
    .await;
    informer.shutdown().await;
    endpoint.shutdown().await;
}

/// B3 under `Block`: a handler held inside its callback fills its buffer, then the indexer
/// waits and deltas gather in the FIFO; `kinformer_listener_buffered` and the FIFO gauges show
/// the backlog while it lasts and fall back to 0 once the handler is released.
#[actix::test]
async fn depth_gauges_rise_behind_a_blocked_handler_and_drain() {
    // Past the handler thread's channel (64) and the listener's capacity (1): the indexer
    // must wait, so the FIFO holds some of the updates.
    const TOUCHES: usize = 150;
    let sim = sim().await;
    let informer = started(&sim, "bp", 1).await;
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let mut gate = Some(gate);
    let handler = handler_fn(move |n: &Notification<Pod>| {
        if matches!(n, Notification::Update { .. })
            && let Some(g) = gate.take()
        {
            let _ = g.recv();
        }
    });
    informer
        .add_event_handler_with(
            handler,
            ListenerConfig::default()
                .name("held")
                .policy(OverflowPolicy::Block)
                .capacity(1),
        )
        .await
        .expect("handler");
    let (endpoint, addr) = serve_and_start(&informer).await;
    until(addr, "/readyz", "ready after sync", |a| a.status == 200).await;

    let client = sim.client();
    for i in 0..TOUCHES {
        touch_pod(&client, "bp", "pod-0", &format!("v{i}")).await;
    }
    let inf = [("informer", "bp/pods")];
    let lis = [("informer", "bp/pods"), ("listener", "held")];
    scrape_until(addr, "a backlog in the listener and in the FIFO", |m| {
        must(m, "kinformer_listener_buffered", &lis) >= 1.0
            && must(m, "kinformer_fifo_pending_deltas", &inf) >= 1.0
            && must(m, "kinformer_fifo_queued_keys", &inf) == 1.0
    })
    .await;
    drop(release);
    let delivered = (1 + TOUCHES) as f64; // the listed Add and every update
    scrape_until(addr, "the backlog drained", |m| {
        must(m, "kinformer_listener_buffered", &lis) == 0.0
            && must(m, "kinformer_fifo_pending_deltas", &inf) == 0.0
            && must(m, "kinformer_fifo_queued_keys", &inf) == 0.0
            && must(m, "kinformer_listener_delivered_total", &lis) == delivered
    })
    .await;
    informer.shutdown().await;
    endpoint.shutdown().await;
}

/// The add of the pod named `boom` (only the add: a relist's replay must not panic again).
fn is_boom(n: &Notification<Pod>) -> bool {
    matches!(n, Notification::Add { .. }) && n.object().metadata.name.as_deref() == Some("boom")
}

/// [`is_boom`] for a key mapper, which is given lazy objects.
fn is_boom_lazy(n: &Notification<LazyObject<Pod>>) -> bool {
    matches!(n, Notification::Add { .. }) && n.object().name() == Some("boom")
}

/// Each reflector and listener series the issue names moves when its cause happens, on the
/// sim's faults: a 410 is a relist, a line that is not JSON a decode error (and a restart), a
/// silent watch a stall; a panicking handler and a panicking key mapper are both handler
/// panics (P7); events are counted by type; every delivered notification is timed.
#[actix::test]
async fn counters_move_with_the_faults_that_drive_them() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "m", 2).await;
    let mut config = fast_config();
    config.reflector.idle_timeout = Duration::from_secs(1);
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), Some("m"), config);
    let handler = handler_fn(|n: &Notification<Pod>| {
        if is_boom(n) {
            panic!("test: the handler panics on boom");
        }
    });
    informer
        .add_event_handler_with(handler, ListenerConfig::default().name("callback"))
        .await
        .expect("handler");
    let queue: AsyncWorkQueue<ObjectKey> = AsyncWorkQueue::new();
    let mapper: KeyMapper<Pod> = Arc::new(|key, n| {
        if is_boom_lazy(n) {
            panic!("test: the key mapper panics on boom");
        }
        vec![key.clone()]
    });
    informer
        .add_key_sink(
            queue.clone(),
            Some(mapper),
            ListenerConfig::default().name("keys"),
        )
        .await
        .expect("key sink");
    let (endpoint, addr) = serve_and_start(&informer).await;
    until(addr, "/readyz", "ready after sync", |a| a.status == 200).await;
    watching(&sim).await;

    let inf = [("informer", "m/pods")];
    let counter = |m: &Scrape, name: &str| must(m, name, &inf);
    let m = scrape(addr).await;
    for name in [
        "kinformer_reflector_relists_total",
        "kinformer_reflector_decode_errors_total",
        "kinformer_reflector_stalls_total",
        "kinformer_reflector_restarts_total",
    ] {
        assert_eq!(counter(&m, name), 0.0, "{name} before any fault");
    }

    sim.faults().expire_watches();
    scrape_until(addr, "a 410 counted as a relist", |m| {
        counter(m, "kinformer_reflector_relists_total") >= 1.0
    })
    .await;

    watching(&sim).await;
    sim.faults().malformed_next_event();
    touch_pod(&client, "m", "pod-0", "after-bad-line").await;
    scrape_until(addr, "a line that is not JSON counted", |m| {
        counter(m, "kinformer_reflector_decode_errors_total") >= 1.0
            && counter(m, "kinformer_reflector_restarts_total") >= 1.0
    })
    .await;

    watching(&sim).await;
    sim.faults().stall_watches(true);
    touch_pod(&client, "m", "pod-1", "while-stalled").await;
    scrape_until(addr, "a silent watch counted as a stall", |m| {
        counter(m, "kinformer_reflector_stalls_total") >= 1.0
    })
    .await;
    sim.faults().stall_watches(false);

    kube::Api::<Pod>::namespaced(client.clone(), "m")
        .create(&Default::default(), &pod("m", "boom"))
        .await
        .expect("create boom");
    delete_pod(&client, "m", "pod-1").await;
    let panics = |m: &Scrape, listener: &str| {
        must(
            m,
            "kinformer_listener_panics_total",
            &[("informer", "m/pods"), ("listener", listener)],
        )
    };
    let m = scrape_until(addr, "both panics counted and the delete seen", |m| {
        let mut deleted = inf.to_vec();
        deleted.push(("type", "DELETED"));
        panics(m, "callback") >= 1.0
            && panics(m, "keys") >= 1.0
            && must(m, "kinformer_reflector_watch_events_total", &deleted) >= 1.0
    })
    .await;
    assert_eq!(panics(&m, "callback"), 1.0, "the handler panicked once");
    assert_eq!(panics(&m, "keys"), 1.0, "the key mapper panicked once");
    let mut modified = inf.to_vec();
    modified.push(("type", "MODIFIED"));
    assert!(must(&m, "kinformer_reflector_watch_events_total", &modified) >= 1.0);
    // Every notification the callback finished (panicked ones included) was timed.
    let lis = [("informer", "m/pods"), ("listener", "callback")];
    let delivered = must(&m, "kinformer_listener_delivered_total", &lis);
    let (timed, _) = histogram(&m, "kinformer_listener_handle_duration_seconds", &lis);
    assert_eq!(
        timed, delivered,
        "one handler latency per delivered notification"
    );
    informer.shutdown().await;
    endpoint.shutdown().await;
}

/// `kinformer_listener_handle_duration_seconds` of a key sink (a workqueue, as every
/// controller registers): one observation per delivered notification, as for a callback
/// (key sinks were once timed only for the trace, leaving the histogram at 0).
#[actix::test]
async fn key_sink_handler_latency_is_observed() {
    let sim = sim().await;
    let informer = started(&sim, "k", 3).await;
    let queue: AsyncWorkQueue<ObjectKey> = AsyncWorkQueue::new();
    informer
        .add_key_sink(queue.clone(), None, ListenerConfig::default().name("keys"))
        .await
        .expect("key sink");
    let (endpoint, addr) = serve_and_start(&informer).await;
    let lis = [("informer", "k/pods"), ("listener", "keys")];
    let m = scrape_until(addr, "the 3 listed pods delivered", |m| {
        value(m, "kinformer_listener_delivered_total", &lis) == Some(3.0)
    })
    .await;
    let (timed, _) = histogram(&m, "kinformer_listener_handle_duration_seconds", &lis);
    assert_eq!(timed, 3.0, "one latency per delivered key");
    informer.shutdown().await;
    endpoint.shutdown().await;
}

/// `/healthz`: 503 once the reflector has been failing past the grace period (every list and
/// watch answered 500), 200 again once a list or watch succeeds (here: the recovered watch
/// delivers an event).
#[actix::test]
async fn healthz_fails_past_grace_and_recovers() {
    healthz_cycle(false).await;
}

/// As above, but nothing changes after the faults are cleared: the re-opened watch stays
/// quiet, and opening it is the success that ends the failing period.
#[actix::test]
async fn healthz_recovers_on_a_quiet_watch() {
    healthz_cycle(true).await;
}

async fn healthz_cycle(quiet: bool) {
    let sim = sim().await;
    let informer = started(&sim, "a", 2).await;
    let telemetry = Telemetry::with_options(TelemetryOptions {
        failing_grace: Duration::from_millis(300),
        ..TelemetryOptions::default()
    });
    telemetry.register_informer(&informer);
    informer.start().expect("start");
    informer.wait_for_sync().await;
    let endpoint = telemetry
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let addr = endpoint.local_addr();
    let h = get(addr, "/healthz").await;
    assert_eq!((h.status, h.body.as_str()), (200, "ok\n"));
    watching(&sim).await;

    // Every list and watch fails from now on; the open watch is cut.
    let faults = sim.faults();
    faults.fail_next_lists(1_000_000, 500);
    faults.fail_next_watches(1_000_000, 500);
    faults.drop_watches();
    let failing_at = Instant::now();
    let h = until(addr, "/healthz", "unhealthy", |a| a.status == 503).await;
    assert!(
        failing_at.elapsed() >= Duration::from_millis(300),
        "not before the grace period"
    );
    assert!(
        h.body.contains("a/pods") && h.body.contains("failing for"),
        "{}",
        h.body
    );
    let d = get(addr, "/debug/informers").await;
    let json: serde_json::Value = serde_json::from_str(&d.body).expect("json");
    let i = &json["informers"][0];
    assert!(i["failing_since"].is_string(), "{i}");
    assert!(i["failing_seconds"].as_f64().expect("failing_seconds") >= 0.3);
    assert!(i["last_error"]["message"].is_string(), "{i}");
    assert!(i["restarts"].as_u64().expect("restarts") >= 1);
    let m = scrape(addr).await;
    let inf = [("informer", "a/pods")];
    assert!(must(&m, "kinformer_reflector_failing_seconds", &inf) >= 0.3);
    assert!(must(&m, "kinformer_reflector_failures_total", &inf) >= 1.0);
    assert!(must(&m, "kinformer_reflector_restarts_total", &inf) >= 1.0);

    faults.clear();
    if !quiet {
        // A change makes the recovered watch deliver an event, which the reflector publishes.
        touch_pod(&sim.client(), "a", "pod-0", "recovered").await;
    }
    until(addr, "/healthz", "healthy again", |a| a.status == 200).await;
    let d = get(addr, "/debug/informers").await;
    let json: serde_json::Value = serde_json::from_str(&d.body).expect("json");
    assert!(json["informers"][0]["failing_since"].is_null());
    informer.shutdown().await;
    endpoint.shutdown().await;
}

/// `/debug/informers` as JSON: the informer made by a factory with telemetry, its scope,
/// state, reflector and FIFO figures and its listener; 404, 405 and the loopback rule.
#[actix::test]
async fn debug_informers_json_shape() {
    let sim = sim().await;
    create_pods(&sim.client(), "a", 3).await;
    let telemetry = Telemetry::new();
    let factory = SharedInformerFactory::new(sim.client())
        .with_namespace("a")
        .with_config(fast_config())
        .with_telemetry(telemetry.clone());
    let pods = factory.informer::<Pod>();
    let view = View::default();
    let reg = pods
        .add_event_handler_with(
            view.handler(),
            ListenerConfig::default()
                .name("view")
                .policy(OverflowPolicy::Block),
        )
        .await
        .expect("handler");
    factory.start().expect("start");
    pods.wait_for_sync().await;
    // One change after sync: the reflector publishes its watching phase with a watch event.
    touch_pod(&sim.client(), "a", "pod-0", "touched").await;
    // `delivered` counts a notification once its handler call returned, a moment after the
    // handler itself saw it.
    eventually(
        "the handler saw 3 pods and 1 update, counted delivered",
        || view.seen() == 4 && reg.stats().delivered() == 4,
    )
    .await;
    eventually("the reflector published its watching phase", || {
        pods.health().phase == ReflectorPhase::Watching
    })
    .await;
    let endpoint = telemetry
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let addr = endpoint.local_addr();

    let d = request(addr, "GET", "/debug/informers", "application/json").await;
    assert_eq!(d.status, 200);
    assert_eq!(d.headers["content-type"], "application/json");
    // For people reading it raw: each informer starts with its name, fields in their
    // declared order (not sorted, as a `serde_json::Value` would have them).
    assert!(
        d.body.starts_with(
            "{\n  \"informers\": [\n    {\n      \"name\": \"a/pods\",\n      \"resource\""
        ),
        "{}",
        d.body
    );
    let json: serde_json::Value = serde_json::from_str(&d.body).expect("json");
    let informers = json["informers"].as_array().expect("informers array");
    assert_eq!(informers.len(), 1);
    let i = &informers[0];
    assert_eq!(i["name"], "a/pods");
    assert_eq!(i["resource"], "pods");
    assert_eq!(i["type_name"], std::any::type_name::<Pod>());
    assert_eq!(i["namespace"], "a");
    assert!(i["label_selector"].is_null() && i["field_selector"].is_null());
    assert_eq!(i["state"], "running");
    assert_eq!(i["synced"], true);
    assert_eq!(i["phase"], "watching");
    assert_eq!(
        i["last_sync_resource_version"],
        pods.last_sync_resource_version()
    );
    assert_eq!(i["restarts"], 0);
    assert!(i["last_error"].is_null() && i["failing_since"].is_null());
    assert_eq!(i["store_objects"], 3);
    assert_eq!(i["fifo_queued_keys"], 0);
    assert_eq!(i["fifo_pending_deltas"], 0);
    assert!(i["reflector"]["lists"].as_u64().expect("lists") >= 1);
    assert!(i["reflector"]["watches"].as_u64().expect("watches") >= 1);
    assert_eq!(i["reflector"]["failures"], 0);
    let l = &i["listeners"].as_array().expect("listeners")[0];
    assert_eq!(l["name"], "view");
    assert_eq!(l["policy"], "block");
    assert_eq!(
        (&l["received"], &l["delivered"], &l["buffered"]),
        (&4.into(), &4.into(), &0.into())
    );
    assert_eq!(
        (&l["dropped"], &l["panics"], &l["coalesced"]),
        (&0.into(), &0.into(), &0.into())
    );
    assert_eq!(i["reflector"]["decode_errors"], 0);
    assert_eq!((&l["synced"], &l["stopped"]), (&true.into(), &false.into()));

    assert_eq!(get(addr, "/nope").await.status, 404);
    let post = request(addr, "POST", "/metrics", "*/*").await;
    assert_eq!((post.status, post.headers["allow"].as_str()), (405, "GET"));
    assert!(matches!(
        telemetry.serve("0.0.0.0:0".parse().expect("addr")).await,
        Err(TelemetryError::NotLoopback(_))
    ));
    factory.shutdown().await;
    let d = get(addr, "/debug/informers").await;
    let json: serde_json::Value = serde_json::from_str(&d.body).expect("json");
    assert_eq!(
        json["informers"],
        serde_json::json!([]),
        "stopped informers leave"
    );
    endpoint.shutdown().await;
}

/// The browser binary: `chromium` or `chromium-browser` on PATH.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| [d.join("chromium"), d.join("chromium-browser")])
        .find(|p| p.is_file())
}

/// `/debug/informers` in a real headless Chromium (which asks for `text/html`): the DOM names
/// each informer with its state, and a name with markup in it is shown as text.
#[actix::test]
async fn debug_page_renders_in_headless_chromium() {
    let Some(browser) = chromium() else {
        eprintln!(
            "\n\n!!!!! WARNING: no chromium or chromium-browser on PATH: the debug page was NOT \
             rendered in a browser (apt-get install chromium) !!!!!\n\n"
        );
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true requires a headless Chromium for this test"
        );
        return;
    };
    let sim = sim().await;
    let a = started(&sim, "a", 2).await;
    let b = started(&sim, "b", 1).await;
    let telemetry = Telemetry::new();
    telemetry.register_informer(&a);
    assert_eq!(
        telemetry.register_informer_as("<b>web</b>", &b),
        "<b>web</b>"
    );
    a.start().expect("start a");
    b.start().expect("start b");
    a.wait_for_sync().await;
    b.wait_for_sync().await;
    let endpoint = telemetry
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let url = format!("http://{}/debug/informers", endpoint.local_addr());

    let profile = tempfile::tempdir().expect("profile dir");
    let child = tokio::process::Command::new(&browser)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--dump-dom", &url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn chromium");
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("chromium finished within 30 s (killed otherwise)")
        .expect("chromium output");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && dom.contains("<h1>Informers</h1>"),
        "chromium rendered the page; status {:?}, stderr: {}\nDOM: {dom}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // Live without reloading: the series are inline for the first drawing, and each
    // informer's charts are drawn into its section.
    assert!(
        !dom.contains(r#"http-equiv="refresh""#),
        "no whole-page reload"
    );
    assert!(dom.contains(r#"<script id="series-data" type="application/json">"#));
    for name in ["a/pods", "&lt;b&gt;web&lt;/b&gt;"] {
        let charts = dom
            .split(&format!(r#"<div class="charts" data-informer="{name}">"#))
            .nth(1)
            .unwrap_or_else(|| panic!("no charts for {name}: {dom}"));
        assert!(
            charts.starts_with(r#"<figure class="chart" data-series="events_per_second">"#),
            "{name}'s charts drawn: {}",
            &charts[..charts.len().min(300)]
        );
    }
    for name in ["a/pods", "&lt;b&gt;web&lt;/b&gt;"] {
        let section = dom
            .split("<section")
            .find(|s| s.contains(&format!("<h2>{name}</h2>")))
            .unwrap_or_else(|| panic!("no section for {name} in the DOM: {dom}"));
        assert!(
            section.contains("state: <b>running</b>") && section.contains("synced: <b>true</b>"),
            "{name}'s state in the DOM: {section}"
        );
    }
    assert!(
        !dom.contains("<h2><b>web</b>"),
        "markup in a name is escaped"
    );
    a.shutdown().await;
    b.shutdown().await;
    endpoint.shutdown().await;
}

/// I7 under telemetry: a lean informer exports what it stores (bytes compressed and not,
/// metadata bytes) and how often typed readers decode or hit the hot cache; a typed informer
/// exports none of these series. A point read moves the decode counter, a second read of the
/// same object the hit counter.
#[actix::test]
async fn lean_series_report_bytes_decodes_and_hits() {
    let sim = sim().await;
    create_pods(&sim.client(), "lean", 4).await;
    let lean = SharedIndexInformer::<Pod>::with_config(
        sim.client(),
        Some("lean"),
        fast_config().cache(kinformer_actors::CacheMode::lean()),
    );
    let typed = started(&sim, "typed", 1).await;
    let telemetry = Telemetry::new();
    telemetry.register_informer(&lean);
    telemetry.register_informer(&typed);
    let endpoint = telemetry
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let addr = endpoint.local_addr();
    lean.start().expect("start");
    typed.start().expect("start");
    lean.wait_for_sync().await;
    typed.wait_for_sync().await;
    let inf = [("informer", "lean/pods")];
    let m = scrape(addr).await;
    assert_eq!(must(&m, "kinformer_store_objects", &inf), 4.0);
    let stored = must(&m, "kinformer_lean_stored_bytes", &inf);
    let json = must(&m, "kinformer_lean_json_bytes", &inf);
    assert!(stored > 0.0 && stored <= json, "{stored} stored of {json}");
    assert!(must(&m, "kinformer_lean_metadata_bytes", &inf) > 0.0);
    assert_eq!(must(&m, "kinformer_lean_decodes_total", &inf), 0.0);
    let name = lean.lister().list_keys()[0].name().to_string();
    assert!(lean.lister().get("lean", &name).is_some());
    assert!(lean.lister().get("lean", &name).is_some());
    let m = scrape(addr).await;
    assert_eq!(must(&m, "kinformer_lean_decodes_total", &inf), 1.0);
    assert_eq!(must(&m, "kinformer_lean_hot_hits_total", &inf), 1.0);
    assert_eq!(must(&m, "kinformer_lean_hot_objects", &inf), 1.0);
    assert_eq!(must(&m, "kinformer_lean_decode_failures_total", &inf), 0.0);
    let typed_series = informer_series(&m, "typed/pods");
    assert!(
        !typed_series.is_empty()
            && typed_series
                .iter()
                .all(|s| !s.starts_with("kinformer_lean")),
        "{typed_series:?}"
    );
    // The debug view says the same, for the lean informer only.
    let d = request(addr, "GET", "/debug/informers", "application/json").await;
    let json: serde_json::Value = serde_json::from_str(&d.body).expect("json");
    let by_name = |n: &str| {
        json["informers"]
            .as_array()
            .and_then(|a| a.iter().find(|i| i["name"] == n).cloned())
            .unwrap_or_else(|| panic!("{n} in {}", d.body))
    };
    assert_eq!(by_name("lean/pods")["lean"]["decodes"], 1);
    assert_eq!(by_name("lean/pods")["lean"]["hot_hits"], 1);
    assert!(by_name("typed/pods").get("lean").is_none());
    lean.shutdown().await;
    typed.shutdown().await;
    endpoint.shutdown().await;
}

/// A live informer for the charts: pods in `ns` touched every 20 ms by a traffic task, a
/// callback listener `view` and a key sink `keys` into the workqueue `pods`, whose worker
/// takes ~1 ms per item (its "reconcile"). Stop the traffic with `abort`, the worker with
/// `shut_down`.
struct Charted {
    informer: SharedIndexInformer<Pod>,
    queue: AsyncWorkQueue<ObjectKey>,
    traffic: tokio::task::JoinHandle<()>,
}

impl Charted {
    async fn start(sim: &Sim, telemetry: &Telemetry, ns: &str) -> Charted {
        let informer = started(sim, ns, 3).await;
        let view = View::default();
        informer
            .add_event_handler_with(view.handler(), ListenerConfig::default().name("view"))
            .await
            .expect("handler");
        let queue: AsyncWorkQueue<ObjectKey> = AsyncWorkQueue::new();
        informer
            .add_key_sink(queue.clone(), None, ListenerConfig::default().name("keys"))
            .await
            .expect("key sink");
        telemetry.register_informer(&informer);
        telemetry
            .register_workqueue("pods", &queue)
            .expect("register queue");
        informer.start().expect("start");
        informer.wait_for_sync().await;
        let worker = queue.clone();
        tokio::spawn(async move {
            while let Some(key) = worker.get().await {
                // The reconcile's work, so that get → done has a duration to chart.
                tokio::time::sleep(Duration::from_millis(1)).await;
                worker.done(&key);
            }
        });
        let client = sim.client();
        let ns = ns.to_string();
        let traffic = tokio::spawn(async move {
            for i in 0u64.. {
                // Paced load, not synchronisation: the test waits on the series themselves.
                let _ =
                    try_touch_pod(&client, &ns, &format!("pod-{}", i % 3), &i.to_string()).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Charted {
            informer,
            queue,
            traffic,
        }
    }

    async fn stop(self) {
        self.traffic.abort();
        self.queue.shut_down();
        self.informer.shutdown().await;
    }
}

/// Points of the series at `path` (JSON pointer) of a series answer.
fn points(json: &serde_json::Value, path: &str) -> Vec<(f64, f64)> {
    json.pointer(path)
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .map(|p| {
                    (
                        p[0].as_f64().expect("t is a number"),
                        p[1].as_f64().expect("value is a number"),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Telemetry sampling fast enough for a test: a point every 50 ms, 20 kept (1 s).
fn fast_series() -> Telemetry {
    Telemetry::with_options(TelemetryOptions {
        series_interval: Duration::from_millis(50),
        series_points: 20,
        ..TelemetryOptions::default()
    })
}

/// `/debug/informers/series` (issue 21): an informer with traffic shows watch events per
/// second, FIFO depth, each listener's buffer and handler latency, and the workqueue its
/// depth, adds, wait and work duration (get → done), every point within the window and at
/// most `series_points` per series; sampled by the endpoint's timer (no request needed);
/// the series of an informer that was shut down leave.
#[actix::test]
async fn debug_informers_series_json() {
    let sim = sim().await;
    let telemetry = fast_series();
    let endpoint = telemetry
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let addr = endpoint.local_addr();
    let charted = Charted::start(&sim, &telemetry, "live").await;

    // The endpoint's timer samples on its own: the ring of events/s fills without a request
    // for the series (which would sample too); `Telemetry::series` only reads.
    eventually("the timer filled the events/s ring", || {
        let r = telemetry.series();
        r.informers
            .first()
            .is_some_and(|i| i.events_per_second.len() >= 15)
    })
    .await;
    let a = until(
        addr,
        "/debug/informers/series",
        "every series has points",
        |a| {
            let j: serde_json::Value = serde_json::from_str(&a.body).expect("json");
            let i = "/informers/0";
            let q = "/workqueues/0";
            points(&j, &format!("{i}/events_per_second"))
                .iter()
                .any(|p| p.1 > 0.0)
                && !points(&j, &format!("{i}/listeners/1/handler_latency_seconds")).is_empty()
                && !points(&j, &format!("{q}/work_duration_seconds")).is_empty()
                && !points(&j, &format!("{q}/queue_latency_seconds")).is_empty()
        },
    )
    .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.headers["content-type"], "application/json");
    let j: serde_json::Value = serde_json::from_str(&a.body).expect("json");
    assert_eq!(j["interval_seconds"], 0.05);
    assert_eq!(j["window_seconds"], 1.0);
    assert_eq!(j["informers"][0]["name"], "live/pods");
    let names: Vec<_> = j["informers"][0]["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .map(|l| l["name"].as_str().expect("name").to_string())
        .collect();
    assert_eq!(names, ["view", "keys"]);
    assert_eq!(j["workqueues"][0]["name"], "pods");
    let every = [
        "/informers/0/events_per_second",
        "/informers/0/fifo_depth",
        "/informers/0/listeners/0/buffered",
        "/informers/0/listeners/0/handler_latency_seconds",
        "/informers/0/listeners/1/buffered",
        "/informers/0/listeners/1/handler_latency_seconds",
        "/workqueues/0/depth",
        "/workqueues/0/adds_per_second",
        "/workqueues/0/queue_latency_seconds",
        "/workqueues/0/work_duration_seconds",
    ];
    for path in every {
        let p = points(&j, path);
        assert!(!p.is_empty() && p.len() <= 20, "{path}: {} points", p.len());
        assert!(
            p.windows(2).all(|w| w[0].0 < w[1].0),
            "{path}: oldest first"
        );
        assert!(
            p.iter()
                .all(|&(t, v)| (-1.0..=0.0).contains(&t) && v >= 0.0 && v.is_finite()),
            "{path}: {p:?}"
        );
    }
    // ~50 touches a second: the rate is of that order (not a count since start).
    let rate = points(&j, "/informers/0/events_per_second");
    assert!(
        rate.iter().all(|p| p.1 < 1000.0),
        "a rate, not a cumulative count: {rate:?}"
    );
    // The worker's reconcile takes at least 1 ms.
    let work = points(&j, "/workqueues/0/work_duration_seconds");
    assert!(work.iter().all(|p| p.1 >= 0.001), "{work:?}");

    charted.stop().await;
    let a = get(addr, "/debug/informers/series").await;
    let j: serde_json::Value = serde_json::from_str(&a.body).expect("json");
    assert_eq!(
        j["informers"],
        serde_json::json!([]),
        "stopped informers leave"
    );
    endpoint.shutdown().await;
}

/// Runs the headless browser on `url` with `args` (a fresh profile each), bounded by 30 s.
async fn browse(browser: &std::path::Path, args: Vec<String>, url: &str) -> std::process::Output {
    let profile = tempfile::tempdir().expect("profile dir");
    let child = tokio::process::Command::new(browser)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn chromium");
    tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("chromium finished within 30 s (killed otherwise)")
        .expect("chromium output")
}

/// `data-points` of each line of the chart `series` in `fragment` (the DOM after the chart's
/// container), by line name.
fn chart_lines(fragment: &str, series: &str) -> Vec<(String, usize)> {
    let svg = fragment
        .split(&format!(r#"<svg class="chart" data-series="{series}""#))
        .nth(1)
        .unwrap_or_else(|| panic!("no chart {series}"));
    let svg = &svg[..svg.find("</svg>").expect("svg end")];
    let attr = |tag: &str, name: &str| -> String {
        let key = format!(" {name}=\"");
        tag.find(&key)
            .map(|at| {
                let rest = &tag[at + key.len()..];
                rest[..rest.find('"').unwrap_or(rest.len())].to_string()
            })
            .unwrap_or_default()
    };
    svg.split("<path ")
        .skip(1)
        .map(|p| {
            let tag = &p[..p.find('>').unwrap_or(p.len())];
            (
                attr(tag, "data-name"),
                attr(tag, "data-points").parse().expect("data-points"),
            )
        })
        .collect()
}

/// The debug page's live charts in a real headless Chromium (issue 21), for an informer with
/// traffic and a workqueue with a worker: after the page refreshed itself at least once
/// (virtual time runs its timer), every chart is drawn with points: events per second, FIFO
/// depth, both listeners' buffers and handler latencies, the workqueue's depth, adds, wait
/// and work duration. A screenshot of the page is kept under target/tmp and its path printed.
#[actix::test]
async fn debug_page_charts_live_series_in_headless_chromium() {
    let Some(browser) = chromium() else {
        eprintln!(
            "\n\n!!!!! WARNING: no chromium or chromium-browser on PATH: the debug page's charts \
             were NOT rendered in a browser (apt-get install chromium) !!!!!\n\n"
        );
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true requires a headless Chromium for this test"
        );
        return;
    };
    let sim = sim().await;
    let telemetry = fast_series();
    let endpoint = telemetry
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let charted = Charted::start(&sim, &telemetry, "web").await;
    eventually("events/s, handler and work latencies sampled", || {
        let r = telemetry.series();
        r.informers.first().is_some_and(|i| {
            i.events_per_second.len() >= 3
                && i.listeners
                    .iter()
                    .all(|l| !l.handler_latency_seconds.is_empty())
        }) && r
            .workqueues
            .first()
            .is_some_and(|q| !q.work_duration_seconds.is_empty())
    })
    .await;
    let url = format!("http://{}/debug/informers", endpoint.local_addr());
    let png = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("debug-informers-charts.png");
    let _ = std::fs::remove_file(&png);
    // Virtual time lets the page's refresh timer run (and its fetches finish) before the DOM
    // is dumped or the screenshot taken; DOM and screenshot are two runs, side by side.
    let budget = "--virtual-time-budget=2500".to_string();
    let (dom_out, shot_out) = tokio::join!(
        browse(&browser, vec![budget.clone(), "--dump-dom".into()], &url),
        browse(
            &browser,
            vec![
                budget,
                "--window-size=1280,1100".into(),
                format!("--screenshot={}", png.display()),
            ],
            &url
        ),
    );
    charted.stop().await;
    endpoint.shutdown().await;

    let dom = String::from_utf8_lossy(&dom_out.stdout);
    assert!(
        dom_out.status.success() && dom.contains("<h1>Informers</h1>"),
        "chromium rendered the page; status {:?}, stderr: {}\nDOM: {dom}",
        dom_out.status,
        String::from_utf8_lossy(&dom_out.stderr)
    );
    let refreshes: u32 = dom
        .split(r#"data-refreshes=""#)
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the page never refreshed itself: {dom}"));
    assert!(refreshes >= 1);
    let informer = dom
        .split(r#"<div class="charts" data-informer="web/pods">"#)
        .nth(1)
        .unwrap_or_else(|| panic!("no charts for web/pods: {dom}"));
    let informer = &informer[..informer.find("</div>").expect("charts end")];
    for (series, lines) in [
        ("events_per_second", vec![""]),
        ("fifo_depth", vec![""]),
        ("listener_buffered", vec!["view", "keys"]),
        ("handler_latency_seconds", vec!["view", "keys"]),
    ] {
        let drawn = chart_lines(informer, series);
        assert_eq!(
            drawn.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            lines,
            "{series}: one line per listener"
        );
        assert!(
            drawn.iter().all(|(_, n)| *n >= 1),
            "{series} drawn with points: {drawn:?}"
        );
    }
    assert!(
        chart_lines(informer, "events_per_second")[0].1 >= 3,
        "events/s is a line, not a dot"
    );
    let queue = dom
        .split(r#"<section class="workqueue" data-workqueue="pods">"#)
        .nth(1)
        .unwrap_or_else(|| panic!("no workqueue section: {dom}"));
    for series in [
        "depth",
        "adds_per_second",
        "queue_latency_seconds",
        "work_duration_seconds",
    ] {
        let drawn = chart_lines(queue, series);
        assert!(
            drawn.len() == 1 && drawn[0].1 >= 1,
            "workqueue {series} drawn with points: {drawn:?}"
        );
    }
    assert!(
        shot_out.status.success() && std::fs::metadata(&png).is_ok_and(|m| m.len() > 0),
        "screenshot written; status {:?}, stderr: {}",
        shot_out.status,
        String::from_utf8_lossy(&shot_out.stderr)
    );
    // Printed on the test's stream (libtest captures eprintln! of a passing test).
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "debug page screenshot: {} ({refreshes} live refreshes before the DOM dump)",
        png.display()
    );
}
