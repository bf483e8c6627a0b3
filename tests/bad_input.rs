//! The bad-input catalogue (docs/bad-input.md): what the informer does with each malformed or
//! hostile input, over HTTP through kube. Inputs the simulated API server can produce are sent
//! by it (`kinformer-sim` faults and objects); inputs no real server would send (a truncated
//! LIST, an unknown event type, an object without a name, resourceVersions going backwards,
//! duplicate ADDED, DELETED of an unknown object, a request never answered) come from
//! [`Hostile`], a scripted server on loopback that answers each LIST and WATCH with the next
//! canned reply.
//!
//! Most cases run in both cache modes (docs/semantics.md I7): `<case>::typed` and
//! `<case>::lean` (see [`in_both_modes`]); the lean mode keeps objects as the server's bytes
//! and checks only their metadata when it stores them, so the cases where it differs say how.

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kinformer_actors::{
    CacheMode, InformerConfig, LazyObject, LeanStats, ListenerConfig, Notification, OverflowPolicy,
    SharedIndexInformer, handler_fn,
};
use kube::{Api, Client, api::PostParams};
use tokio::{
    io::AsyncWriteExt,
    net::{TcpListener, TcpStream},
};

/// One canned answer of the [`Hostile`] server.
#[derive(Clone, Debug)]
enum Reply {
    /// `200` with this whole body, then the connection closes.
    Body(String),
    /// `200` announcing `Content-Length` of the whole body, then only its first half and a
    /// closed connection (a cut connection).
    Cut(String),
    /// `200`, these watch lines, then the stream stays open and silent.
    Lines(Vec<String>),
    /// The request is read and never answered.
    Hang,
}

/// What the hostile server answers: LISTs and WATCHes each take the next reply of their
/// queue; an empty queue answers with the default (`Hang` for watches unless set).
struct Script {
    lists: VecDeque<Reply>,
    list_default: Reply,
    watches: VecDeque<Reply>,
    watch_default: Reply,
    /// Request lines received, in order.
    seen: Vec<String>,
}

/// A scripted, misbehaving API server for `pods` on loopback (see the module docs).
#[derive(Clone)]
struct Hostile {
    url: String,
    script: Arc<Mutex<Script>>,
}

impl Hostile {
    async fn start(lists: Vec<Reply>, list_default: Reply, watches: Vec<Reply>) -> Hostile {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let script = Arc::new(Mutex::new(Script {
            lists: lists.into(),
            list_default,
            watches: watches.into(),
            watch_default: Reply::Hang,
            seen: Vec::new(),
        }));
        let s = Arc::clone(&script);
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve(conn, Arc::clone(&s)));
            }
        });
        Hostile { url, script }
    }

    fn client(&self, read_timeout: Option<Duration>) -> Client {
        let mut cfg = kube::Config::new(self.url.parse().expect("url"));
        cfg.read_timeout = read_timeout;
        Client::try_from(cfg).expect("client")
    }

    fn requests(&self, watch: bool) -> Vec<String> {
        let s = self.script.lock().unwrap();
        s.seen
            .iter()
            .filter(|l| is_watch(l) == watch)
            .cloned()
            .collect()
    }
}

fn is_watch(request_line: &str) -> bool {
    request_line.contains("watch=true") || request_line.contains("watch=1")
}

async fn serve(mut conn: TcpStream, script: Arc<Mutex<Script>>) {
    let Some(line) = read_request_line(&mut conn).await else {
        return;
    };
    let reply = {
        let mut s = script.lock().unwrap();
        s.seen.push(line.clone());
        if is_watch(&line) {
            s.watches
                .pop_front()
                .unwrap_or_else(|| s.watch_default.clone())
        } else {
            s.lists
                .pop_front()
                .unwrap_or_else(|| s.list_default.clone())
        }
    };
    let ok = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n";
    match reply {
        Reply::Body(b) => {
            let _ = conn.write_all(format!("{ok}\r\n{b}").as_bytes()).await;
        }
        Reply::Cut(b) => {
            let half = &b.as_bytes()[..b.len() / 2];
            let head = format!("{ok}Content-Length: {}\r\n\r\n", b.len());
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(half).await;
        }
        Reply::Lines(lines) => {
            let _ = conn.write_all(format!("{ok}\r\n").as_bytes()).await;
            for l in lines {
                let _ = conn.write_all(format!("{l}\n").as_bytes()).await;
            }
            let _ = conn.flush().await;
            std::future::pending::<()>().await;
        }
        Reply::Hang => std::future::pending::<()>().await,
    }
    let _ = conn.shutdown().await;
}

/// A pod's JSON; `name: None` leaves `metadata.name` out.
fn pod_json(name: Option<&str>, rv: u64) -> String {
    let mut meta = serde_json::json!({"namespace": "a", "resourceVersion": rv.to_string(),
        "uid": format!("uid-{}", name.unwrap_or("none"))});
    if let Some(n) = name {
        meta["name"] = n.into();
    }
    serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta}).to_string()
}

fn list_body(rv: u64, items: &[String]) -> String {
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[{}]}}"#,
        items.join(",")
    )
}

fn event(kind: &str, obj: &str) -> String {
    format!(r#"{{"type":"{kind}","object":{obj}}}"#)
}

/// The cache mode a case runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Typed,
    Lean,
}

impl Mode {
    fn config(self) -> InformerConfig {
        match self {
            Mode::Typed => fast_config(),
            Mode::Lean => fast_config().cache(CacheMode::lean()),
        }
    }
}

/// One test per cache mode, `$name::typed` and `$name::lean`, running `$body` with `$mode`.
macro_rules! in_both_modes {
    ($(#[$doc:meta])* async fn $name:ident($mode:ident) $body:block) => {
        $(#[$doc])*
        mod $name {
            use super::*;

            #[actix::test]
            async fn typed() {
                run(Mode::Typed).await
            }

            #[actix::test]
            async fn lean() {
                run(Mode::Lean).await
            }

            async fn run($mode: Mode) $body
        }
    };
}

/// The lean counters of a lean informer (`None` in the typed mode).
fn lean_stats(informer: &SharedIndexInformer<Pod>, mode: Mode) -> Option<LeanStats> {
    let stats = informer.lean_stats();
    assert_eq!(stats.is_some(), mode == Mode::Lean, "{mode:?}");
    stats
}

/// An informer on `client` in `mode` with a recording handler (`Unbounded`: every notification
/// is delivered as is, none merged) and a watch error handler that records each message.
async fn informer_on(
    client: Client,
    view: &View,
    mode: Mode,
) -> (SharedIndexInformer<Pod>, Arc<Mutex<Vec<String>>>) {
    let informer = SharedIndexInformer::<Pod>::with_config(client, None, mode.config());
    assert_eq!(
        informer.lean_stats().is_some(),
        mode == Mode::Lean,
        "{mode:?}"
    );
    let errors = Arc::new(Mutex::new(Vec::new()));
    let e = Arc::clone(&errors);
    informer
        .set_watch_error_handler(move |err| e.lock().unwrap().push(err.to_string()))
        .unwrap();
    informer
        .add_event_handler_with(
            view.handler(),
            ListenerConfig::default().policy(OverflowPolicy::Unbounded),
        )
        .await
        .expect("handler");
    informer.start().expect("start");
    (informer, errors)
}

async fn synced(informer: &SharedIndexInformer<Pod>) {
    tokio::time::timeout(DEADLINE, informer.wait_for_sync())
        .await
        .expect("synced");
}

fn keys_rvs(pairs: &[(&str, u64)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(n, rv)| (format!("a/{n}"), rv.to_string()))
        .collect()
}

in_both_modes! {
    /// A LIST whose connection is cut mid-body, then one whose JSON ends early (a clean end of a
    /// truncated document): each fails as a whole, nothing of it is cached, the reflector backs
    /// off and lists again; the third, whole LIST is cached.
    async fn truncated_list_body_fails_the_list_and_caches_nothing_of_it(mode) {
        let good = list_body(10, &[pod_json(Some("p0"), 3), pod_json(Some("p1"), 4)]);
        let truncated = good[..good.len() - 40].to_string();
        let server = Hostile::start(
            vec![Reply::Cut(good.clone()), Reply::Body(truncated)],
            Reply::Body(good),
            vec![],
        )
        .await;
        let view = View::default();
        let (informer, errors) = informer_on(server.client(None), &view, mode).await;
        synced(&informer).await;
        assert_eq!(
            server.requests(false).len(),
            3,
            "two failed LISTs, one good"
        );
        let listed = keys_rvs(&[("p0", 3), ("p1", 4)]);
        assert_eq!(cache_pods(&informer), listed);
        eventually("the handler heard the list", || view.snapshot() == listed).await;
        assert_eq!(view.seen(), 2, "the handler heard only the whole list");
        assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
        let h = informer.health();
        assert!(h.restarts >= 2, "each failed LIST restarts: {h:?}");
        let errors = errors.lock().unwrap().clone();
        assert!(
            errors.iter().filter(|e| e.starts_with("list pods")).count() >= 2,
            "both failures reported as list errors: {errors:?}"
        );
        if let Some(stats) = lean_stats(&informer, mode) {
            assert_eq!((stats.objects, stats.encode_failures), (2, 0), "{stats:?}");
        }
        informer.shutdown().await;
    }
}

in_both_modes! {
    /// A truncated watch line (the stream is cut mid-object, `close_mid_object_next`): kube drops
    /// the partial line at the end of the stream, so the reflector sees the watch end (here with no
    /// event before it: a very short watch, R4, backed off) and reopens it from its last RV; the
    /// cut event is served again. No relist, nothing lost, nothing twice.
    async fn truncated_watch_line_reopens_from_the_last_rv_and_loses_nothing(mode) {
        let sim = sim().await;
        let client = sim.client();
        create_pods(&client, "a", 2).await;
        let view = View::default();
        let (informer, _) = informer_on(client.clone(), &view, mode).await;
        synced(&informer).await;
        watching(&sim).await;
        let watches = informer.health().watches;
        sim.faults().close_mid_object_next();
        create_pods(&client, "m", 3).await;
        let truth = server_pods(&client).await;
        eventually("cache and handler converge", || {
            cache_pods(&informer) == truth && view.snapshot() == truth
        })
        .await;
        assert_eq!(
            sim.faults().counters().closed_mid_object,
            1,
            "the fault happened"
        );
        let h = informer.health();
        assert!(h.watches > watches, "the watch was reopened: {h:?}");
        assert_eq!(h.lists, 1, "no relist: {h:?}");
        assert_eq!(view.seen(), 2 + 3, "each pod notified once");
        assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
        informer.shutdown().await;
    }
}

in_both_modes! {
    /// An event of a type kube does not know (`"type":"BOGUS"`): kube's watch decoder, failing to
    /// read it as an event, reads it as a `Status` and yields `Error::Api` with code 0. The
    /// reflector skips it like client-go does (counted in `dropped_objects`, reported as a warning)
    /// and the same watch goes on: the event after it is applied, no restart, no relist.
    async fn unknown_watch_event_type_is_skipped_and_the_watch_goes_on(mode) {
        let server = Hostile::start(
            vec![],
            Reply::Body(list_body(10, &[pod_json(Some("p0"), 3)])),
            vec![
                Reply::Lines(vec![
                    event("BOGUS", &pod_json(Some("p1"), 11)),
                    event("ADDED", &pod_json(Some("p2"), 12)),
                ]),
                Reply::Lines(vec![event("ADDED", &pod_json(Some("p2"), 12))]),
            ],
        )
        .await;
        let view = View::default();
        let (informer, errors) = informer_on(server.client(None), &view, mode).await;
        synced(&informer).await;
        eventually("the event after the bogus one is applied", || {
            informer.lister().len() == 2
        })
        .await;
        assert_eq!(cache_pods(&informer), keys_rvs(&[("p0", 3), ("p2", 12)]));
        let h = informer.health();
        assert_eq!(h.restarts, 0, "{h:?}");
        assert_eq!(h.lists, 1, "no relist: {h:?}");
        assert_eq!(h.dropped_objects, 1, "{h:?}");
        let watches = server.requests(true);
        assert_eq!(watches.len(), 1, "the same watch goes on: {watches:?}");
        let errors = errors.lock().unwrap().clone();
        assert!(
            errors.iter().any(|e| e.contains("unknown type skipped")),
            "{errors:?}"
        );
        eventually("the handler converges", || {
            view.snapshot() == keys_rvs(&[("p0", 3), ("p2", 12)])
        })
        .await;
        assert_eq!(view.seen(), 2);
        assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
        informer.shutdown().await;
    }
}

in_both_modes! {
    /// A server that serves the unknown event again on every reopened watch (it is in its history
    /// at that RV): client-go skips an event of unknown type and goes on; kinformer fails the
    /// stream each time and never gets past it (backing off up to 30 s, until a 410 relists).
    async fn unknown_watch_event_type_replayed_by_the_server_is_skipped(mode) {
        let replay = Reply::Lines(vec![
            event("BOGUS", &pod_json(Some("p1"), 11)),
            event("ADDED", &pod_json(Some("p2"), 12)),
        ]);
        let server = Hostile::start(
            vec![],
            Reply::Body(list_body(10, &[pod_json(Some("p0"), 3)])),
            vec![replay.clone(); 50],
        )
        .await;
        let view = View::default();
        let (informer, _) = informer_on(server.client(None), &view, mode).await;
        synced(&informer).await;
        eventually("the event after the bogus one is applied", || {
            informer.lister().len() == 2
        })
        .await;
        informer.shutdown().await;
    }
}

in_both_modes! {
    /// Objects without `metadata.name`, listed and watched: the key function rejects them, the
    /// FIFO counts them (`fifo_status().rejected()`) and queues nothing; everything else is cached
    /// and the informer syncs.
    async fn objects_without_a_name_are_rejected_by_the_fifo_and_not_cached(mode) {
        let server = Hostile::start(
            vec![],
            Reply::Body(list_body(10, &[pod_json(None, 3), pod_json(Some("p1"), 4)])),
            vec![Reply::Lines(vec![
                event("ADDED", &pod_json(None, 11)),
                event("ADDED", &pod_json(Some("p2"), 12)),
            ])],
        )
        .await;
        let view = View::default();
        let (informer, _) = informer_on(server.client(None), &view, mode).await;
        synced(&informer).await;
        eventually("the named watched pod is cached", || {
            informer.lister().len() == 2
        })
        .await;
        assert_eq!(cache_pods(&informer), keys_rvs(&[("p1", 4), ("p2", 12)]));
        eventually("both nameless objects rejected", || {
            informer.fifo_status().rejected() == 2
        })
        .await;
        assert_eq!(informer.health().restarts, 0);
        eventually("the handler heard the named pods", || {
            view.snapshot() == keys_rvs(&[("p1", 4), ("p2", 12)])
        })
        .await;
        assert_eq!(view.seen(), 2);
        assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
        informer.shutdown().await;
    }
}

in_both_modes! {
    /// resourceVersions are opaque (API conventions): an event with an older RV than the one
    /// cached is applied like any other (client-go does the same), and the reflector's last RV
    /// follows the server, so the next watch resumes from what the server said last.
    async fn resource_version_going_backwards_is_applied_as_sent(mode) {
        let server = Hostile::start(
            vec![],
            Reply::Body(list_body(10, &[pod_json(Some("p0"), 3)])),
            vec![Reply::Lines(vec![
                event("MODIFIED", &pod_json(Some("p0"), 20)),
                event("MODIFIED", &pod_json(Some("p0"), 15)),
            ])],
        )
        .await;
        let view = View::default();
        let (informer, _) = informer_on(server.client(None), &view, mode).await;
        synced(&informer).await;
        eventually("both updates applied", || view.seen() == 3).await;
        assert_eq!(cache_pods(&informer), keys_rvs(&[("p0", 15)]));
        assert_eq!(view.snapshot(), keys_rvs(&[("p0", 15)]));
        eventually("the last RV is the last one sent", || {
            informer.last_sync_resource_version() == "15"
        })
        .await;
        assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
        informer.shutdown().await;
    }
}

in_both_modes! {
    /// The same object ADDED twice, then ADDED again with a new RV: the processor notifies Update
    /// for a key it already caches (P1, like client-go's HandleDeltas); the identical duplicate
    /// (same non-empty RV) is a *sync* under P1 and reaches only handlers that asked for resyncs;
    /// no handler sees a second Add.
    async fn duplicate_added_is_an_update_or_a_sync_never_a_second_add(mode) {
        let server = Hostile::start(
            vec![],
            Reply::Body(list_body(10, &[])),
            vec![Reply::Lines(vec![
                event("ADDED", &pod_json(Some("p0"), 11)),
                event("ADDED", &pod_json(Some("p0"), 11)),
                event("ADDED", &pod_json(Some("p0"), 12)),
            ])],
        )
        .await;
        let view = View::default();
        let (informer, _) = informer_on(server.client(None), &view, mode).await;
        synced(&informer).await;
        eventually("the last ADDED is cached", || {
            cache_pods(&informer) == keys_rvs(&[("p0", 12)])
        })
        .await;
        eventually("the handler saw it", || {
            view.snapshot() == keys_rvs(&[("p0", 12)])
        })
        .await;
        assert_eq!(
            view.seen(),
            2,
            "one Add, one Update (the same-RV duplicate is a sync)"
        );
        assert_eq!(view.resyncs(), 0);
        assert!(
            view.anomalies().is_empty(),
            "no second Add: {:?}",
            view.anomalies()
        );
        informer.shutdown().await;
    }
}

in_both_modes! {
    /// DELETED of an object the informer never had (F3): nothing is queued, nobody is notified,
    /// the cache is unchanged; the next event is applied.
    async fn deleted_of_an_unknown_object_is_ignored(mode) {
        let server = Hostile::start(
            vec![],
            Reply::Body(list_body(10, &[pod_json(Some("p0"), 3)])),
            vec![Reply::Lines(vec![
                event("DELETED", &pod_json(Some("ghost"), 11)),
                event("ADDED", &pod_json(Some("p1"), 12)),
            ])],
        )
        .await;
        let view = View::default();
        let (informer, _) = informer_on(server.client(None), &view, mode).await;
        synced(&informer).await;
        eventually("the event after the ghost is applied", || {
            informer.lister().len() == 2
        })
        .await;
        assert_eq!(cache_pods(&informer), keys_rvs(&[("p0", 3), ("p1", 12)]));
        eventually("the handler converges", || {
            view.snapshot() == keys_rvs(&[("p0", 3), ("p1", 12)])
        })
        .await;
        assert_eq!(view.seen(), 2, "no notification for the ghost");
        assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
        informer.shutdown().await;
    }
}

in_both_modes! {
    /// An enormous object (a 2.5 MiB container argument, near the API server's 3 MiB request
    /// limit that the sim also enforces; annotations may not pass 256 KiB), listed and
    /// watched: cached whole, no special path, no restart.
    async fn an_enormous_object_is_cached_whole(mode) {
        const HUGE: usize = 5 << 19;
        let sim = sim().await;
        let client = sim.client();
        let api: Api<Pod> = Api::namespaced(client.clone(), "a");
        let huge = "x".repeat(HUGE);
        let big = |name: &str| {
            let mut p = pod("a", name);
            if let Some(spec) = p.spec.as_mut() {
                spec.containers[0].args = Some(vec![huge.clone()]);
            }
            p
        };
        api.create(&PostParams::default(), &big("listed"))
            .await
            .expect("create");
        let view = View::default();
        let (informer, _) = informer_on(client.clone(), &view, mode).await;
        synced(&informer).await;
        watching(&sim).await;
        api.create(&PostParams::default(), &big("watched"))
            .await
            .expect("create");
        create_pods(&client, "a", 1).await;
        let truth = server_pods(&client).await;
        eventually("cache converges", || cache_pods(&informer) == truth).await;
        for name in ["listed", "watched"] {
            let p = informer.lister().get("a", name).expect("cached");
            let args = p.spec.as_ref().and_then(|s| s.containers[0].args.as_ref());
            assert_eq!(args.map(|a| a[0].len()), Some(HUGE), "{name} whole");
        }
        assert_eq!(informer.health().restarts, 0);
        if let Some(stats) = lean_stats(&informer, mode) {
            // Kept compressed: the two blobs are 5 MiB of JSON.
            assert!(stats.json_bytes > 2 * HUGE as u64, "{stats:?}");
            assert!(stats.bytes < stats.json_bytes / 100, "{stats:?}");
            assert_eq!(
                stats.encode_failures + stats.decode_failures,
                0,
                "{stats:?}"
            );
        }
        informer.shutdown().await;
    }
}

/// A LIST the server never answers: the informer has no LIST timeout of its own; the request
/// fails when the kube client's `read_timeout` expires (here 1 s; kube's default is 295 s),
/// then the reflector backs off and lists again.
#[actix::test]
async fn a_list_never_answered_fails_at_the_clients_read_timeout_and_is_retried() {
    let server = Hostile::start(
        vec![Reply::Hang],
        Reply::Body(list_body(10, &[pod_json(Some("p0"), 3)])),
        vec![],
    )
    .await;
    let view = View::default();
    let (informer, errors) = informer_on(
        server.client(Some(Duration::from_secs(1))),
        &view,
        Mode::Typed,
    )
    .await;
    synced(&informer).await;
    assert_eq!(
        server.requests(false).len(),
        2,
        "the hung LIST, then one good"
    );
    assert_eq!(cache_pods(&informer), keys_rvs(&[("p0", 3)]));
    assert!(informer.health().restarts >= 1);
    let errors = errors.lock().unwrap().clone();
    assert!(
        errors.iter().any(|e| e.starts_with("list pods")),
        "{errors:?}"
    );
    informer.shutdown().await;
}

/// A WATCH the server never answers (no response headers): like a hung LIST, bounded only by
/// the client's `read_timeout`; the watch is reopened from the listed RV, without a relist.
#[actix::test]
async fn a_watch_never_answered_fails_at_the_clients_read_timeout_and_is_reopened() {
    let server = Hostile::start(
        vec![],
        Reply::Body(list_body(10, &[pod_json(Some("p0"), 3)])),
        vec![
            Reply::Hang,
            Reply::Lines(vec![event("ADDED", &pod_json(Some("p1"), 11))]),
        ],
    )
    .await;
    let view = View::default();
    let (informer, errors) = informer_on(
        server.client(Some(Duration::from_secs(1))),
        &view,
        Mode::Typed,
    )
    .await;
    synced(&informer).await;
    eventually("the reopened watch delivers", || {
        informer.lister().len() == 2
    })
    .await;
    let watches = server.requests(true);
    assert_eq!(watches.len(), 2, "{watches:?}");
    assert!(
        watches.iter().all(|w| w.contains("resourceVersion=10")),
        "both from the listed RV: {watches:?}"
    );
    assert_eq!(server.requests(false).len(), 1, "no relist");
    let errors = errors.lock().unwrap().clone();
    assert!(
        errors.iter().any(|e| e.starts_with("watch pods failed")),
        "opening the watch failed: {errors:?}"
    );
    informer.shutdown().await;
}

/// With kube's default client (`read_timeout` 295 s) a LIST that is never answered stalls the
/// informer for ~5 minutes: the reflector has no LIST timeout of its own.
#[actix::test]

async fn a_list_never_answered_is_retried_within_a_minute_with_default_client() {
    let server = Hostile::start(
        vec![Reply::Hang],
        Reply::Body(list_body(10, &[pod_json(Some("p0"), 3)])),
        vec![],
    )
    .await;
    let view = View::default();
    let (informer, _) = informer_on(
        server.client(Some(Duration::from_secs(295))),
        &view,
        Mode::Typed,
    )
    .await;
    tokio::time::timeout(Duration::from_secs(60), informer.wait_for_sync())
        .await
        .expect("synced within a minute despite a hung LIST");
    informer.shutdown().await;
}

in_both_modes! {
    /// An object of the wrong kind (R5; a ConfigMap, saying so, among pods), listed and
    /// watched. The watched one is dropped and reported in both modes and the watch goes on.
    /// The listed one: the typed mode fails the whole LIST (the item does not decode into a
    /// Pod) and lists again; the lean mode, which checks `apiVersion`/`kind` on the parsed
    /// metadata, drops just that item. Neither caches it.
    async fn an_object_of_the_wrong_kind_is_dropped_not_cached(mode) {
        let cm = |name: &str, rv: u64| {
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "a", "resourceVersion": rv.to_string()}})
            .to_string()
        };
        let server = Hostile::start(
            vec![Reply::Body(list_body(
                10,
                &[pod_json(Some("p0"), 3), cm("cm", 4)],
            ))],
            Reply::Body(list_body(10, &[pod_json(Some("p0"), 3)])),
            vec![Reply::Lines(vec![
                event("ADDED", &cm("cm2", 11)),
                event("ADDED", &pod_json(Some("p2"), 12)),
            ])],
        )
        .await;
        let view = View::default();
        let (informer, errors) = informer_on(server.client(None), &view, mode).await;
        synced(&informer).await;
        eventually("the pod after the configmap is applied", || {
            informer.lister().len() == 2
        })
        .await;
        let want = keys_rvs(&[("p0", 3), ("p2", 12)]);
        assert_eq!(cache_pods(&informer), want);
        eventually("the handler converges", || view.snapshot() == want).await;
        assert_eq!(view.seen(), 2);
        let h = informer.health();
        let errors = errors.lock().unwrap().clone();
        let dropped = errors
            .iter()
            .filter(|e| e.contains("unexpected type"))
            .count();
        match mode {
            Mode::Typed => {
                assert_eq!(server.requests(false).len(), 2, "the first LIST failed");
                assert_eq!((h.restarts, h.dropped_objects), (1, 1), "{h:?}");
                assert!(
                    errors
                        .iter()
                        .any(|e| e.starts_with("list pods") && e.contains("ConfigMap")),
                    "{errors:?}"
                );
                assert_eq!(dropped, 1, "{errors:?}");
            }
            Mode::Lean => {
                assert_eq!(server.requests(false).len(), 1, "the LIST was cached");
                assert_eq!((h.restarts, h.dropped_objects), (0, 2), "{h:?}");
                assert_eq!(dropped, 2, "{errors:?}");
                assert!(
                    errors
                        .iter()
                        .all(|e| e.contains("expected v1/Pod, got v1/ConfigMap")),
                    "{errors:?}"
                );
                let stats = lean_stats(&informer, mode).expect("lean");
                assert_eq!((stats.objects, stats.encode_failures), (2, 0), "{stats:?}");
            }
        }
        informer.shutdown().await;
    }
}

/// A pod whose metadata is valid and whose body is not a Pod (`spec.containers` a string).
fn invalid_pod(name: &str, rv: u64) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&pod_json(Some(name), rv)).unwrap();
    v["spec"] = serde_json::json!({"containers": "no"});
    v.to_string()
}

in_both_modes! {
    /// An object whose metadata is valid and whose body is not a valid Pod, listed and watched.
    /// The typed mode decodes it, so it is R5's wrong shape: the LIST fails as a whole (and is
    /// retried), the watch event is dropped and reported. The lean mode checks only the
    /// metadata when it stores an object (I7), so it caches both: lazy readers and key sinks
    /// see them; typed reads skip them (`LeanStats::decode_failures`); typed handlers are not
    /// given them (`ListenerStats::decode_failures`, and the registration still syncs).
    async fn an_object_with_valid_metadata_and_an_invalid_body(mode) {
        let server = Hostile::start(
            vec![Reply::Body(list_body(
                10,
                &[pod_json(Some("p0"), 3), invalid_pod("p1", 4)],
            ))],
            Reply::Body(list_body(10, &[pod_json(Some("p0"), 3)])),
            vec![Reply::Lines(vec![
                event("ADDED", &invalid_pod("p2", 11)),
                event("ADDED", &pod_json(Some("p3"), 13)),
            ])],
        )
        .await;
        let view = View::default();
        let (informer, errors) = informer_on(server.client(None), &view, mode).await;
        let typed = informer
            .add_event_handler_with(
                handler_fn(|_: &Notification<Pod>| {}),
                ListenerConfig::default().policy(OverflowPolicy::Unbounded),
            )
            .await
            .expect("typed handler");
        let lazy_seen = Arc::new(Mutex::new(BTreeMap::new()));
        let l = Arc::clone(&lazy_seen);
        informer
            .add_lazy_event_handler(
                handler_fn(move |n: &Notification<LazyObject<Pod>>| {
                    let o = n.object();
                    l.lock().unwrap().insert(
                        o.key().expect("key").to_string(),
                        o.resource_version().unwrap_or_default().to_string(),
                    );
                }),
                ListenerConfig::default().policy(OverflowPolicy::Unbounded),
            )
            .await
            .expect("lazy handler");
        synced(&informer).await;
        eventually("the valid pod after the invalid one is cached", || {
            informer.lister().lazy().get("a", "p3").is_some()
        })
        .await;
        let valid = keys_rvs(&[("p0", 3), ("p3", 13)]);
        assert_eq!(cache_pods(&informer), valid, "typed reads: only valid pods");
        eventually("the typed handler heard the valid pods", || {
            view.snapshot() == valid
        })
        .await;
        assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
        // An undecodable object does not hold up the typed registration's HasSynced.
        eventually("the typed handler synced", || typed.has_synced()).await;
        let h = informer.health();
        let lazy_keys: BTreeMap<String, String> = informer
            .lister()
            .lazy()
            .list()
            .iter()
            .map(|o| {
                (
                    o.key().unwrap().to_string(),
                    o.resource_version().unwrap_or_default().to_string(),
                )
            })
            .collect();
        match mode {
            Mode::Typed => {
                assert_eq!(server.requests(false).len(), 2, "the first LIST failed");
                assert_eq!((h.restarts, h.dropped_objects), (1, 1), "{h:?}");
                let errors = errors.lock().unwrap().clone();
                assert!(
                    errors.iter().any(|e| e.starts_with("list pods")),
                    "{errors:?}"
                );
                assert_eq!(lazy_keys, valid);
                assert_eq!(typed.stats().decode_failures(), 0);
            }
            Mode::Lean => {
                let all = keys_rvs(&[("p0", 3), ("p1", 4), ("p2", 11), ("p3", 13)]);
                assert_eq!(server.requests(false).len(), 1, "the LIST was cached");
                assert_eq!((h.restarts, h.dropped_objects), (0, 0), "{h:?}");
                assert!(errors.lock().unwrap().is_empty());
                assert_eq!(lazy_keys, all, "lazy reads see every pod's metadata");
                assert_eq!(informer.lister().len(), 4);
                assert!(
                    informer.lister().get("a", "p1").is_none(),
                    "a typed read skips it"
                );
                eventually("the lazy handler heard every pod", || {
                    *lazy_seen.lock().unwrap() == all
                })
                .await;
                eventually("the typed handlers skipped the invalid pods", || {
                    typed.stats().decode_failures() == 2
                })
                .await;
                let stats = lean_stats(&informer, mode).expect("lean");
                assert!(stats.decode_failures >= 2, "{stats:?}");
                assert_eq!((stats.objects, stats.encode_failures), (4, 0), "{stats:?}");
            }
        }
        informer.shutdown().await;
    }
}

/// An object replaced by a valid version after an invalid one (lean mode, I7): the typed
/// handlers skipped the invalid version, so the valid one must reach them as an Add (as in the
/// typed mode, where the invalid version was never cached), or they never learn of it while
/// the typed lister returns it.
#[actix::test]
async fn lean_an_invalid_object_made_valid_reaches_typed_handlers() {
    let server = Hostile::start(
        vec![],
        Reply::Body(list_body(10, &[pod_json(Some("p0"), 3)])),
        vec![Reply::Lines(vec![
            event("ADDED", &invalid_pod("p2", 11)),
            event("MODIFIED", &pod_json(Some("p2"), 12)),
        ])],
    )
    .await;
    let view = View::default();
    let (informer, _) = informer_on(server.client(None), &view, Mode::Lean).await;
    synced(&informer).await;
    let want = keys_rvs(&[("p0", 3), ("p2", 12)]);
    eventually("the valid version is cached", || {
        cache_pods(&informer) == want
    })
    .await;
    eventually("the typed handler heard of it", || view.snapshot() == want).await;
    assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
    informer.shutdown().await;
}

in_both_modes! {
    /// An object whose metadata does not parse (a label value that is a number): R5's wrong
    /// shape in both modes (the typed decode and the lean metadata parse fail alike). Listed,
    /// it fails the LIST as a whole, which is retried; watched, it is dropped and reported and
    /// the watch goes on. Never cached.
    async fn an_object_whose_metadata_does_not_parse_is_dropped(mode) {
        let bad = |name: &str, rv: u64| {
            let mut v: serde_json::Value = serde_json::from_str(&pod_json(Some(name), rv)).unwrap();
            v["metadata"]["labels"] = serde_json::json!({"app": 1});
            v.to_string()
        };
        let server = Hostile::start(
            vec![Reply::Body(list_body(
                10,
                &[pod_json(Some("p0"), 3), bad("p1", 4)],
            ))],
            Reply::Body(list_body(10, &[pod_json(Some("p0"), 3)])),
            vec![Reply::Lines(vec![
                event("ADDED", &bad("p2", 11)),
                event("ADDED", &pod_json(Some("p3"), 13)),
            ])],
        )
        .await;
        let view = View::default();
        let (informer, errors) = informer_on(server.client(None), &view, mode).await;
        synced(&informer).await;
        eventually("the pod after the bad one is cached", || {
            informer.lister().lazy().get("a", "p3").is_some()
        })
        .await;
        let want = keys_rvs(&[("p0", 3), ("p3", 13)]);
        assert_eq!(cache_pods(&informer), want);
        assert_eq!(informer.lister().len(), 2, "never cached");
        eventually("the handler converges", || view.snapshot() == want).await;
        assert_eq!(server.requests(false).len(), 2, "the first LIST failed");
        let h = informer.health();
        assert_eq!((h.restarts, h.dropped_objects), (1, 1), "{h:?}");
        let errors = errors.lock().unwrap().clone();
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("list pods") && e.contains("expected a string")),
            "{errors:?}"
        );
        if let Some(stats) = lean_stats(&informer, mode) {
            assert_eq!(stats.objects, 2, "{stats:?}");
            assert!(
                stats.encode_failures >= 2,
                "the listed and the watched one: {stats:?}"
            );
        }
        informer.shutdown().await;
    }
}

in_both_modes! {
    /// A malformed watch line (not JSON, `malformed_next_event`): in both modes a decode error
    /// that restarts the reflector (S1); the watch reopens from the last RV, nothing is lost or
    /// notified twice (the typed mode's case is also `tests/informer.rs`
    /// `s1_malformed_watch_line_restarts_and_loses_nothing`).
    async fn malformed_watch_line_restarts_and_loses_nothing(mode) {
        let sim = sim().await;
        let client = sim.client();
        create_pods(&client, "a", 3).await;
        let view = View::default();
        let (informer, _) = informer_on(client.clone(), &view, mode).await;
        synced(&informer).await;
        watching(&sim).await;
        let restarts = informer.health().restarts;
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
        let h = informer.health();
        assert!(h.restarts > restarts, "S1: {h:?}");
        assert!(
            h.last_error
                .as_ref()
                .is_some_and(|(_, e)| e.contains("malformed event")),
            "{h:?}"
        );
        assert_eq!(h.lists, 1, "no relist: {h:?}");
        assert_eq!(view.seen(), 3 + 5, "each pod notified once");
        assert!(view.anomalies().is_empty(), "{:?}", view.anomalies());
        if let Some(stats) = lean_stats(&informer, mode) {
            assert_eq!(stats.objects, 8, "{stats:?}");
            assert_eq!(
                stats.encode_failures + stats.decode_failures,
                0,
                "{stats:?}"
            );
        }
        informer.shutdown().await;
    }
}
