//! Protobuf on the wire (`InformerConfig::content_type(ContentType::Protobuf)`, client-go's
//! `rest.Config.ContentType`) over HTTP against the sim, which answers protobuf for ConfigMaps,
//! Secrets, Namespaces and ServiceAccounts and JSON for Pods (sim/README.md). A tower layer on
//! the client records each request's `Accept` and each response's `Content-Type`, so the tests
//! know which encoding was really read.

use std::{
    collections::BTreeMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use k8s_openapi::{
    ByteString,
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Pod, Secret},
    },
};
use kinformer::notification::Notification;
use kinformer_actors::{
    CacheMode, ContentType, InformerConfig, LazyObject, ListenerConfig, SharedIndexInformer,
    handler_fn,
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::common::{self, eventually, start_synced};

/// (path and query, request `Accept`, response `Content-Type`) of every request.
#[derive(Clone, Default)]
struct Wire(Arc<Mutex<Vec<(String, String, String)>>>);

impl Wire {
    /// Response content types of `resource`'s lists (`watch == false`) or watches.
    fn answers(&self, resource: &str, watch: bool) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(u, _, _)| {
                u.contains(&format!("/{resource}")) && u.contains("watch=true") == watch
            })
            .map(|(_, _, ct)| ct.clone())
            .collect()
    }

    fn accepts(&self, resource: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(u, _, _)| u.contains(&format!("/{resource}")))
            .map(|(_, a, _)| a.clone())
            .collect()
    }
}

impl<S> tower::Layer<S> for Wire {
    type Service = WireService<S>;
    fn layer(&self, inner: S) -> WireService<S> {
        WireService(inner, self.clone())
    }
}

/// Records a request's URI and Accept, then its response's Content-Type.
#[derive(Clone)]
struct WireService<S>(S, Wire);

impl<S, B, RB> tower::Service<http::Request<B>> for WireService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let uri = req.uri().to_string();
        let accept = header(req.headers(), http::header::ACCEPT);
        let fut = self.0.call(req);
        let wire = self.1.clone();
        Box::pin(async move {
            let res = fut.await?;
            let ct = header(res.headers(), http::header::CONTENT_TYPE);
            wire.0.lock().unwrap().push((uri, accept, ct));
            Ok(res)
        })
    }
}

fn header(h: &http::HeaderMap, name: http::header::HeaderName) -> String {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

fn recording_client(sim: &kinformer_sim::Sim) -> (Client, Wire) {
    let wire = Wire::default();
    let client = kube::client::ClientBuilder::try_from(sim.kube_config())
        .expect("client builder")
        .with_layer(&wire)
        .build();
    (client, wire)
}

fn protobuf_config() -> InformerConfig {
    common::fast_config().content_type(ContentType::Protobuf)
}

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

fn config_map(ns: &str, name: &str, i: usize) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name,
                     "labels": {"i": i.to_string()}, "annotations": {"empty": ""}},
        "data": {"k": format!("v{i}"), "blank": ""},
        "binaryData": {"b": ByteString(vec![0, 1, 2, i as u8])},
        "immutable": i % 3 == 0 && i > 100,
    }))
    .expect("a config map")
}

/// Each key's object as the cache holds it.
fn cache<K: kinformer_actors::InformerObject + kube::Resource + Clone>(
    informer: &SharedIndexInformer<K>,
) -> BTreeMap<String, Arc<K>> {
    informer
        .lister()
        .list()
        .into_iter()
        .map(|o| {
            (
                kinformer::meta_namespace_key(&*o)
                    .unwrap()
                    .as_str()
                    .to_string(),
                o,
            )
        })
        .collect()
}

/// What a handler was told, per notification kind, key by key.
#[derive(Clone, Default)]
struct Told(Arc<Mutex<Vec<(String, String)>>>);

impl Told {
    fn record<K: kube::Resource + kinformer_actors::InformerObject>(
        &self,
    ) -> impl kinformer_actors::ResourceEventHandler<K> {
        let told = self.clone();
        handler_fn(move |n: &Notification<K>| {
            let kind = match n {
                Notification::Add { .. } => "add",
                Notification::Update { .. } => "update",
                Notification::Delete { .. } => "delete",
            };
            let key = kinformer::meta_namespace_key(&**n.object()).unwrap();
            told.0
                .lock()
                .unwrap()
                .push((kind.to_string(), key.as_str().to_string()));
        })
    }

    fn sorted(&self) -> Vec<(String, String)> {
        let mut v = self.0.lock().unwrap().clone();
        v.sort();
        v
    }
}

#[tokio::test]
async fn a_protobuf_config_map_informer_sees_what_a_json_one_sees() {
    let sim = common::sim().await;
    let client = sim.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..20 {
        api.create(
            &PostParams::default(),
            &config_map("default", &format!("c{i}"), i),
        )
        .await
        .unwrap();
    }
    let (pb_client, wire) = recording_client(&sim);
    let json =
        SharedIndexInformer::<ConfigMap>::with_config(client.clone(), None, common::fast_config());
    let pb = SharedIndexInformer::<ConfigMap>::with_config(pb_client, None, protobuf_config());
    let (json_told, pb_told) = (Told::default(), Told::default());
    json.add_event_handler(json_told.record()).await.unwrap();
    pb.add_event_handler(pb_told.record()).await.unwrap();
    start_synced(&json).await;
    start_synced(&pb).await;
    assert_eq!(
        cache(&pb),
        cache(&json),
        "the initial lists decode to the same objects"
    );
    assert_eq!(cache(&pb).len(), 20);

    // Adds, updates (data, labels, a deletion-protecting finalizer) and deletes.
    for i in 20..25 {
        api.create(
            &PostParams::default(),
            &config_map("default", &format!("c{i}"), i),
        )
        .await
        .unwrap();
    }
    for i in 0..10 {
        let patch =
            json!({"data": {"k": format!("updated{i}")}, "metadata": {"labels": {"u": "1"}}});
        api.patch(
            &format!("c{i}"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    }
    for i in 10..15 {
        api.delete(&format!("c{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    let server: BTreeMap<String, ConfigMap> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| (format!("default/{}", c.metadata.name.clone().unwrap()), c))
        .collect();
    eventually("both caches equal the server", || {
        let (p, j) = (cache(&pb), cache(&json));
        p == j && p.len() == server.len() && p.iter().all(|(k, o)| server.get(k) == Some(&**o))
    })
    .await;
    eventually("both handlers were told the same", || {
        pb_told.sorted() == json_told.sorted() && pb_told.sorted().len() == 20 + 5 + 10 + 5
    })
    .await;

    // Really protobuf: asked for on list and watch, answered in protobuf.
    assert!(
        wire.accepts("configmaps")
            .iter()
            .all(|a| a.starts_with(PROTOBUF))
    );
    let lists = wire.answers("configmaps", false);
    let watches = wire.answers("configmaps", true);
    assert!(
        !lists.is_empty() && lists.iter().all(|c| c.starts_with(PROTOBUF)),
        "{lists:?}"
    );
    assert!(
        !watches.is_empty() && watches.iter().all(|c| c.starts_with(PROTOBUF)),
        "{watches:?}"
    );
    pb.shutdown().await;
    json.shutdown().await;
}

#[tokio::test]
async fn pods_and_secrets_come_in_protobuf_and_deployments_fall_back_to_json() {
    let sim = common::sim().await;
    let client = sim.client();
    common::create_pods(&client, "a", 5).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "a");
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": "s"}, "type": "Opaque", "data": {"k": "aGVsbG8="}
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &s).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "a");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {
            "metadata": {"labels": {"app": "d"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}}
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();

    let (pb_client, wire) = recording_client(&sim);
    let pods = SharedIndexInformer::<Pod>::with_config(pb_client.clone(), None, protobuf_config());
    let sec =
        SharedIndexInformer::<Secret>::with_config(pb_client.clone(), None, protobuf_config());
    let deps = SharedIndexInformer::<Deployment>::with_config(pb_client, None, protobuf_config());
    start_synced(&pods).await;
    start_synced(&sec).await;
    start_synced(&deps).await;
    common::touch_pod(&client, "a", "pod-0", "x").await;
    common::delete_pod(&client, "a", "pod-1").await;
    let truth = common::server_pods(&client).await;
    eventually("the pod cache follows the server", || {
        common::cache_pods(&pods) == truth
    })
    .await;

    // Pods: protobuf asked for and answered (the sim encodes all of core/v1 Pod with its own
    // schema, read here by the library's), every pod equal to the server's.
    assert!(wire.accepts("pods").iter().all(|a| a.starts_with(PROTOBUF)));
    let answered: Vec<String> = wire
        .answers("pods", false)
        .into_iter()
        .chain(wire.answers("pods", true))
        .collect();
    assert!(!answered.is_empty());
    assert!(
        answered.iter().all(|c| c.starts_with(PROTOBUF)),
        "{answered:?}"
    );
    let server: Api<Pod> = Api::namespaced(client.clone(), "a");
    assert_eq!(
        *pods.lister().get("a", "pod-0").expect("cached"),
        server.get("pod-0").await.unwrap()
    );
    // Deployments: protobuf asked for, JSON answered (the sim does not encode them), read as JSON.
    assert!(
        wire.accepts("deployments")
            .iter()
            .all(|a| a.starts_with(PROTOBUF))
    );
    let answered = wire.answers("deployments", false);
    assert!(!answered.is_empty());
    assert!(
        answered.iter().all(|c| c.starts_with("application/json")),
        "{answered:?}"
    );
    assert_eq!(
        *deps
            .lister()
            .get("a", "d")
            .expect("the deployment is cached"),
        deployments.get("d").await.unwrap()
    );
    // Secrets: protobuf, `bytes` read back as the same base64 data.
    assert!(
        wire.answers("secrets", false)
            .iter()
            .all(|c| c.starts_with(PROTOBUF))
    );
    let got = sec.lister().get("a", "s").expect("the secret is cached");
    assert_eq!(got.data.as_ref().unwrap()["k"].0, b"hello");
    assert_eq!(*got, secrets.get("s").await.unwrap());
    pods.shutdown().await;
    sec.shutdown().await;
    deps.shutdown().await;
}

/// A fault episode: its name and how to inject it.
type Episode<'a> = (&'a str, Box<dyn Fn() + 'a>);

#[tokio::test]
async fn a_protobuf_informer_recovers_from_every_stream_fault() {
    let sim = common::sim().await;
    let client = sim.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "f");
    for i in 0..10 {
        api.create(
            &PostParams::default(),
            &config_map("f", &format!("c{i}"), i),
        )
        .await
        .unwrap();
    }
    let (pb_client, wire) = recording_client(&sim);
    let pb = SharedIndexInformer::<ConfigMap>::with_config(pb_client, None, protobuf_config());
    start_synced(&pb).await;
    let faults = sim.faults();
    let mut step = 0usize;
    // Each fault while the watch is open, then a change that must still arrive.
    let episodes: [Episode<'_>; 7] = [
        ("drop", Box::new(|| faults.drop_watches())),
        // A malformed event in protobuf form: a well-formed frame whose object does not
        // decode (a read error; the watch is reopened from the last RV).
        (
            "malformed",
            Box::new(|| faults.malformed_next_event_of("configmaps")),
        ),
        (
            "cut mid-frame",
            Box::new(|| faults.close_mid_object_next_of("configmaps")),
        ),
        (
            "expire (ERROR 410 as a protobuf Status)",
            Box::new(|| faults.expire_watches()),
        ),
        (
            "failing relists",
            Box::new(|| {
                faults.fail_next_lists(2, 500);
                faults.expire_watches();
            }),
        ),
        (
            "compaction",
            Box::new(|| {
                faults.compact();
                faults.drop_watches();
            }),
        ),
        (
            "410 on every watch",
            Box::new(|| {
                faults.expire_every_watch(Some(kinformer_sim::ExpireMode::ErrorEvent));
                faults.drop_watches();
            }),
        ),
    ];
    for (what, fault) in &episodes {
        common::watching(&sim).await;
        fault();
        for _ in 0..3 {
            let patch = json!({"data": {"k": format!("step{step}")}});
            let name = format!("c{}", step % 10);
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
            step += 1;
        }
        if *what == "410 on every watch" {
            faults.expire_every_watch(None);
        }
        // The test's own list may meet an injected failure too: it retries.
        let listed = loop {
            if let Ok(l) = api.list(&ListParams::default()).await {
                break l;
            }
        };
        let server: BTreeMap<String, ConfigMap> = listed
            .items
            .into_iter()
            .map(|c| (format!("f/{}", c.metadata.name.clone().unwrap()), c))
            .collect();
        let name = what.to_string();
        eventually(
            &format!("the cache equals the server after: {name}"),
            || {
                let c = cache(&pb);
                c.len() == server.len() && c.iter().all(|(k, o)| server.get(k) == Some(&**o))
            },
        )
        .await;
    }
    let counters = faults.counters();
    assert!(
        counters.malformed_events >= 1 && counters.closed_mid_object >= 1,
        "{counters:?}"
    );
    // The frame that does not decode counts as a decode error, as a malformed JSON line does.
    assert!(pb.health().decode_errors >= 1, "{:?}", pb.health());
    // Every episode ended the watch: each was opened again (and answered in protobuf).
    assert!(wire.answers("configmaps", true).len() > episodes.len());
    assert!(
        wire.answers("configmaps", true)
            .iter()
            .all(|c| c.starts_with(PROTOBUF))
    );
    pb.shutdown().await;
}

// Bad input in protobuf (issue 27 item 3): the counterparts of `bad_input.rs`'s JSON cases, from
// a scripted server on loopback that answers each LIST and WATCH of `pods` with the next canned
// reply, as bytes with their `Content-Type` (what no real server would send, or not on demand).

/// One canned answer of [`PbServer`].
#[derive(Clone, Debug)]
enum PbReply {
    /// `200` with this `Content-Type` and whole body, then the connection closes.
    Body(&'static str, Vec<u8>),
    /// `200` announcing the body's whole length, then only its first half and a closed
    /// connection.
    Cut(&'static str, Vec<u8>),
    /// `200`, these bytes (a watch stream), then the connection closes.
    Stream(&'static str, Vec<u8>),
    /// `200`, these bytes, then the stream stays open and silent.
    Open(&'static str, Vec<u8>),
}

/// The queues of [`PbServer`]: LISTs and WATCHes each take the next reply, or the default.
struct PbScript {
    lists: std::collections::VecDeque<PbReply>,
    list_default: PbReply,
    watches: std::collections::VecDeque<PbReply>,
    /// Request lines received, in order.
    seen: Vec<String>,
}

/// A scripted server for `pods` speaking protobuf (and JSON when told), on loopback.
#[derive(Clone)]
struct PbServer {
    url: String,
    script: Arc<Mutex<PbScript>>,
}

const PB_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";
const JSON: &str = "application/json";

impl PbServer {
    async fn start(lists: Vec<PbReply>, list_default: PbReply, watches: Vec<PbReply>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let script = Arc::new(Mutex::new(PbScript {
            lists: lists.into(),
            list_default,
            watches: watches.into(),
            seen: Vec::new(),
        }));
        let s = Arc::clone(&script);
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(pb_serve(conn, Arc::clone(&s)));
            }
        });
        PbServer { url, script }
    }

    fn client(&self) -> Client {
        Client::try_from(kube::Config::new(self.url.parse().expect("url"))).expect("client")
    }

    fn requests(&self, watch: bool) -> usize {
        let s = self.script.lock().unwrap();
        s.seen
            .iter()
            .filter(|l| l.contains("watch=true") == watch)
            .count()
    }
}

async fn pb_serve(mut conn: tokio::net::TcpStream, script: Arc<Mutex<PbScript>>) {
    use tokio::io::AsyncWriteExt;
    let Some(line) = common::read_request_line(&mut conn).await else {
        return;
    };
    let reply = {
        let mut s = script.lock().unwrap();
        s.seen.push(line.clone());
        if line.contains("watch=true") {
            s.watches.pop_front()
        } else {
            Some(
                s.lists
                    .pop_front()
                    .unwrap_or_else(|| s.list_default.clone()),
            )
        }
    };
    let ok = |ct: &str| format!("HTTP/1.1 200 OK\r\nContent-Type: {ct}\r\nConnection: close\r\n");
    match reply {
        Some(PbReply::Body(ct, b)) => {
            let head = format!("{}Content-Length: {}\r\n\r\n", ok(ct), b.len());
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(&b).await;
        }
        Some(PbReply::Cut(ct, b)) => {
            let head = format!("{}Content-Length: {}\r\n\r\n", ok(ct), b.len());
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(&b[..b.len() / 2]).await;
        }
        Some(PbReply::Stream(ct, b)) => {
            let _ = conn.write_all(format!("{}\r\n", ok(ct)).as_bytes()).await;
            let _ = conn.write_all(&b).await;
        }
        Some(PbReply::Open(ct, b)) => {
            let _ = conn.write_all(format!("{}\r\n", ok(ct)).as_bytes()).await;
            let _ = conn.write_all(&b).await;
            let _ = conn.flush().await;
            std::future::pending::<()>().await;
        }
        // No more watches scripted: the request hangs (a quiet watch).
        None => std::future::pending::<()>().await,
    }
    let _ = conn.shutdown().await;
}

fn pod_value(name: &str, rv: u64) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "a", "name": name, "resourceVersion": rv.to_string(),
            "uid": format!("uid-{name}"), "labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}})
}

/// A protobuf `PodList` at `rv`; each item's message followed by `extra` (unknown fields).
fn pb_list(rv: u64, pods: &[serde_json::Value], extra: &[u8]) -> Vec<u8> {
    let msgs: Vec<Vec<u8>> = pods
        .iter()
        .map(|p| {
            let mut m = kinformer::protobuf::object_message("v1", "Pod", p).expect("encodes");
            m.extend_from_slice(extra);
            m
        })
        .collect();
    kinformer::protobuf::encode_list_of_messages(
        "v1",
        "Pod",
        &json!({"resourceVersion": rv.to_string()}),
        msgs.iter().map(Vec::as_slice),
    )
    .expect("a list")
}

/// One protobuf watch frame of `pod`, its message followed by `extra` (unknown fields).
fn pb_frame(event_type: &str, pod: &serde_json::Value, extra: &[u8]) -> Vec<u8> {
    let mut m = kinformer::protobuf::object_message("v1", "Pod", pod).expect("encodes");
    m.extend_from_slice(extra);
    let obj = kinformer::protobuf::envelope_raw("v1", "Pod", &m);
    kinformer::protobuf::watch_frame(event_type, &obj).expect("a frame")
}

/// Unknown fields as a newer server would add them: a string (99), a varint (100), a nested
/// message (101) and a fixed64 (102); none of them in the schema.
fn unknown_fields() -> Vec<u8> {
    // Keys are `number << 3 | wire type` as varints: 99/2 = 9a 06, 100/0 = a0 06,
    // 101/2 = aa 06, 102/1 = b1 06.
    let mut b = vec![0x9a, 0x06, 5];
    b.extend_from_slice(b"newer");
    b.extend_from_slice(&[0xa0, 0x06, 0xac, 0x02]); // 300
    b.extend_from_slice(&[0xaa, 0x06, 3, 0x08, 0x96, 0x01]);
    b.extend_from_slice(&[0xb1, 0x06]);
    b.extend_from_slice(&7u64.to_le_bytes());
    b
}

/// A Pod informer on `client` asking for protobuf, recording watch errors as text.
async fn pb_pod_informer(client: Client) -> (SharedIndexInformer<Pod>, Arc<Mutex<Vec<String>>>) {
    let informer = SharedIndexInformer::<Pod>::with_config(client, None, protobuf_config());
    let errors = Arc::new(Mutex::new(Vec::new()));
    let e = Arc::clone(&errors);
    informer
        .set_watch_error_handler(move |err| e.lock().unwrap().push(err.to_string()))
        .unwrap();
    (informer, errors)
}

/// Each cached pod's key and resourceVersion.
fn pod_rvs(informer: &SharedIndexInformer<Pod>) -> BTreeMap<String, String> {
    cache(informer)
        .into_iter()
        .map(|(k, p)| (k, p.metadata.resource_version.clone().unwrap_or_default()))
        .collect()
}

fn rvs(pairs: &[(&str, u64)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(n, rv)| (format!("a/{n}"), rv.to_string()))
        .collect()
}

#[tokio::test]
async fn protobuf_lists_cut_truncated_or_with_a_wrong_magic_fail_whole_and_are_retried() {
    let good = pb_list(10, &[pod_value("p0", 3), pod_value("p1", 4)], &[]);
    let mut truncated = good.clone();
    truncated.truncate(good.len() - 7);
    let mut bad_magic = good.clone();
    bad_magic[..4].copy_from_slice(b"k8x\0");
    let server = PbServer::start(
        vec![
            PbReply::Cut(PROTOBUF, good.clone()),
            PbReply::Body(PROTOBUF, truncated),
            PbReply::Body(PROTOBUF, bad_magic),
        ],
        PbReply::Body(PROTOBUF, good),
        vec![],
    )
    .await;
    let (informer, errors) = pb_pod_informer(server.client()).await;
    start_synced(&informer).await;
    assert_eq!(server.requests(false), 4, "three failed LISTs, one good");
    assert_eq!(pod_rvs(&informer), rvs(&[("p0", 3), ("p1", 4)]));
    let h = informer.health();
    assert!(h.restarts >= 3, "each failed LIST restarts: {h:?}");
    let errors = errors.lock().unwrap().clone();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("does not appear to be a protobuf message")),
        "the wrong magic is reported as such: {errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("malformed protobuf")),
        "the truncated list is reported as malformed: {errors:?}"
    );
    informer.shutdown().await;
}

#[tokio::test]
async fn unknown_protobuf_fields_are_skipped_in_lists_and_watch_events() {
    let extra = unknown_fields();
    let server = PbServer::start(
        vec![],
        PbReply::Body(
            PROTOBUF,
            pb_list(10, &[pod_value("p0", 3), pod_value("p1", 4)], &extra),
        ),
        vec![PbReply::Open(
            PB_WATCH,
            [
                pb_frame("ADDED", &pod_value("p2", 11), &extra),
                pb_frame("MODIFIED", &pod_value("p0", 12), &extra),
            ]
            .concat(),
        )],
    )
    .await;
    let (informer, errors) = pb_pod_informer(server.client()).await;
    start_synced(&informer).await;
    eventually("the watch events are applied", || {
        pod_rvs(&informer) == rvs(&[("p0", 12), ("p1", 4), ("p2", 11)])
    })
    .await;
    // The objects are the ones without the unknown fields.
    let want: Pod = serde_json::from_value(pod_value("p2", 11)).unwrap();
    assert_eq!(*cache(&informer)["a/p2"], want);
    assert_eq!(server.requests(false), 1, "no relist");
    assert_eq!(server.requests(true), 1, "the same watch goes on");
    assert!(errors.lock().unwrap().is_empty(), "{:?}", errors.lock());
    informer.shutdown().await;
}

#[tokio::test]
async fn a_server_switching_between_protobuf_and_json_is_followed() {
    // LIST in protobuf, then a WATCH answered in JSON (as after a restart into a server
    // without protobuf), which ends; the next WATCH is protobuf again, then a relist (410)
    // answered in JSON.
    let json_line =
        |t: &str, p: &serde_json::Value| format!("{{\"type\":\"{t}\",\"object\":{p}}}\n");
    let expired = kinformer::protobuf::watch_frame(
        "ERROR",
        &kinformer::protobuf::encode_object_as(
            "v1",
            "Status",
            &json!({"status": "Failure", "message": "too old resource version",
                "reason": "Expired", "code": 410}),
        )
        .unwrap(),
    )
    .unwrap();
    let json_list = json!({"kind": "PodList", "apiVersion": "v1",
        "metadata": {"resourceVersion": "30"},
        "items": [pod_value("p0", 3), pod_value("p2", 11), pod_value("p3", 21),
            pod_value("p4", 30)]})
    .to_string();
    let server = PbServer::start(
        vec![PbReply::Body(
            PROTOBUF,
            pb_list(10, &[pod_value("p0", 3)], &[]),
        )],
        PbReply::Body(JSON, json_list.into_bytes()),
        vec![
            PbReply::Stream(JSON, json_line("ADDED", &pod_value("p2", 11)).into_bytes()),
            PbReply::Stream(
                PB_WATCH,
                [pb_frame("ADDED", &pod_value("p3", 21), &[]), expired].concat(),
            ),
            PbReply::Open(JSON, json_line("ADDED", &pod_value("p5", 31)).into_bytes()),
        ],
    )
    .await;
    let (informer, errors) = pb_pod_informer(server.client()).await;
    start_synced(&informer).await;
    eventually("every answer is read, whatever its encoding", || {
        pod_rvs(&informer) == rvs(&[("p0", 3), ("p2", 11), ("p3", 21), ("p4", 30), ("p5", 31)])
    })
    .await;
    assert_eq!(server.requests(false), 2, "the 410 relisted once");
    assert!(
        errors
            .lock()
            .unwrap()
            .iter()
            .all(|e| !e.contains("protobuf")),
        "no decoding error: {:?}",
        errors.lock()
    );
    informer.shutdown().await;
}

#[tokio::test]
async fn broken_protobuf_watch_streams_are_typed_errors_and_the_watch_is_reopened() {
    let list = pb_list(10, &[pod_value("p0", 3)], &[]);
    // A frame length over the 16 MiB limit (the bytes after it are never read).
    let mut too_long = pb_frame("ADDED", &pod_value("p1", 11), &[]);
    too_long[..4].copy_from_slice(&(16u32 * 1024 * 1024 + 1).to_be_bytes());
    // A good event, then a frame cut short by the end of the stream.
    let mut cut = pb_frame("ADDED", &pod_value("p3", 13), &[]);
    cut.truncate(cut.len() - 9);
    // A frame whose object has a wrong magic.
    let mut bad_object = pb_frame("ADDED", &pod_value("p4", 14), &[]);
    let at = bad_object
        .windows(4)
        .position(|w| w == b"k8s\0")
        .expect("the object's envelope");
    bad_object[at + 2] = b'x';
    let server = PbServer::start(
        vec![],
        PbReply::Body(PROTOBUF, list),
        vec![
            PbReply::Stream(PB_WATCH, too_long),
            PbReply::Stream(
                PB_WATCH,
                [pb_frame("ADDED", &pod_value("p2", 12), &[]), cut].concat(),
            ),
            PbReply::Stream(PB_WATCH, bad_object),
            PbReply::Open(
                PB_WATCH,
                [
                    pb_frame("ADDED", &pod_value("p3", 13), &[]),
                    pb_frame("ADDED", &pod_value("p5", 15), &[]),
                ]
                .concat(),
            ),
        ],
    )
    .await;
    let (informer, errors) = pb_pod_informer(server.client()).await;
    start_synced(&informer).await;
    eventually("the events after the broken frames are applied", || {
        pod_rvs(&informer) == rvs(&[("p0", 3), ("p2", 12), ("p3", 13), ("p5", 15)])
    })
    .await;
    assert!(
        server.requests(true) >= 4,
        "each broken stream reopened the watch"
    );
    let errors = errors.lock().unwrap().clone();
    for what in [
        "larger than the limit",
        "ended inside a frame",
        "does not appear to be a protobuf message",
    ] {
        assert!(
            errors.iter().any(|e| e.contains(what)),
            "{what:?} reported: {errors:?}"
        );
    }
    informer.shutdown().await;
}

/// What a lazy handler saw, from the metadata alone: key → resourceVersion, how many objects it
/// was handed decoded (none may be: nothing typed reads the informer before the end), and the
/// encodings of the stored bodies it was handed.
#[derive(Clone, Default)]
struct LazySeen {
    state: Arc<Mutex<BTreeMap<String, String>>>,
    decoded: Arc<Mutex<u64>>,
    encodings: Arc<Mutex<std::collections::BTreeSet<String>>>,
}

impl LazySeen {
    fn handler(&self) -> impl kinformer_actors::ResourceEventHandler<LazyObject<Pod>> {
        let seen = self.clone();
        handler_fn(move |n: &Notification<LazyObject<Pod>>| {
            let objs: Vec<&LazyObject<Pod>> = match n {
                Notification::Update { old, new } => vec![&**old, &**new],
                Notification::Add { obj, .. } => vec![&**obj],
                Notification::Delete { obj } => vec![&**obj.object()],
            };
            for o in &objs {
                *seen.decoded.lock().unwrap() += u64::from(o.is_decoded());
                let enc = o.raw().map(|r| format!("{:?}", r.encoding()));
                seen.encodings
                    .lock()
                    .unwrap()
                    .insert(enc.unwrap_or_else(|| "typed".into()));
            }
            let o = n.object();
            let key = o.key().unwrap().to_string();
            let mut state = seen.state.lock().unwrap();
            match n {
                Notification::Delete { .. } => state.remove(&key),
                _ => state.insert(key, o.resource_version().unwrap_or_default().to_string()),
            };
        })
    }
}

/// I7 with R12: a lean informer asking for protobuf asks for it on every LIST and WATCH, is
/// answered in protobuf (the recording layer) and stores each pod's protobuf message
/// (`RawObject::encoding`); through churn a lazy handler and the lazy lister follow the server
/// without a single decode; at the end its typed lister returns exactly the objects a typed
/// JSON informer holds.
#[actix::test]
async fn a_lean_protobuf_informer_stores_protobuf_and_equals_a_typed_json_one() {
    let sim = common::sim().await;
    let client = sim.client();
    common::create_pods(&client, "a", 15).await;
    common::create_pods(&client, "b", 5).await;
    let (pb_client, wire) = recording_client(&sim);
    let lean = SharedIndexInformer::<Pod>::with_config(
        pb_client,
        None,
        protobuf_config().cache(CacheMode::lean()),
    );
    let json = SharedIndexInformer::<Pod>::with_config(client.clone(), None, common::fast_config());
    let seen = LazySeen::default();
    lean.add_lazy_event_handler(seen.handler(), ListenerConfig::default().name("lazy"))
        .await
        .unwrap();
    start_synced(&lean).await;
    start_synced(&json).await;
    assert_eq!(
        lean.lean_stats().unwrap().decodes,
        0,
        "synced without a decode"
    );

    common::churn_pods(&client, 11, 120, 15).await;
    let truth = common::server_pods(&client).await;
    let lazy_cache = |i: &SharedIndexInformer<Pod>| -> BTreeMap<String, String> {
        i.lister()
            .lazy()
            .list()
            .iter()
            .map(|p| {
                let rv = p.resource_version().unwrap_or_default().to_string();
                (p.key().unwrap().to_string(), rv)
            })
            .collect()
    };
    eventually("the lazy lister follows the server", || {
        lazy_cache(&lean) == truth
    })
    .await;
    eventually("the lazy handler follows the server", || {
        *seen.state.lock().unwrap() == truth
    })
    .await;
    eventually("the typed JSON informer follows the server", || {
        common::cache_pods(&json) == truth
    })
    .await;
    let stats = lean.lean_stats().unwrap();
    assert_eq!(stats.decodes, 0, "nothing decoded through the churn");
    assert_eq!(
        *seen.decoded.lock().unwrap(),
        0,
        "the lazy handler got bytes"
    );
    assert_eq!(
        *seen.encodings.lock().unwrap(),
        ["Protobuf".to_string()].into(),
        "every object handed over was stored as protobuf"
    );
    assert!(
        lean.lister()
            .lazy()
            .list()
            .iter()
            .all(|o| o.raw().unwrap().encoding() == kinformer::lean::Encoding::Protobuf)
    );
    // The wire: protobuf asked for and answered, on LISTs and WATCHes.
    assert!(wire.accepts("pods").iter().all(|a| a.starts_with(PROTOBUF)));
    for watch in [false, true] {
        let answered = wire.answers("pods", watch);
        assert!(
            !answered.is_empty() && answered.iter().all(|c| c.starts_with(PROTOBUF)),
            "watch={watch}: {answered:?}"
        );
    }
    // The objects: decoded from protobuf, equal to the typed JSON informer's.
    let decoded = cache(&lean);
    assert_eq!(decoded, cache(&json));
    assert_eq!(decoded.len(), truth.len());
    // Each decoded once for that read (the counter the assertions above rely on works).
    assert_eq!(lean.lean_stats().unwrap().decodes, truth.len() as u64);
    lean.shutdown().await;
    json.shutdown().await;
}

/// I7 with R12, per response: a lean informer asking for protobuf of a kind the server answers
/// in JSON (the sim's Deployments) stores the JSON it was sent, and reads back the server's
/// objects.
#[actix::test]
async fn a_lean_protobuf_informer_answered_in_json_stores_json() {
    let sim = common::sim().await;
    let client = sim.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "a");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "d", "labels": {"app": "d"}},
        "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {
            "metadata": {"labels": {"app": "d"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}}
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let (pb_client, wire) = recording_client(&sim);
    let lean = SharedIndexInformer::<Deployment>::with_config(
        pb_client,
        None,
        protobuf_config().cache(CacheMode::lean()),
    );
    start_synced(&lean).await;
    let mut d2 = d.clone();
    d2.metadata.name = Some("d2".into());
    deployments
        .create(&PostParams::default(), &d2)
        .await
        .unwrap();
    eventually("the watched deployment arrives", || {
        lean.lister().get("a", "d2").is_some()
    })
    .await;
    assert!(
        wire.accepts("deployments")
            .iter()
            .all(|a| a.starts_with(PROTOBUF))
    );
    assert!(
        wire.answers("deployments", false)
            .iter()
            .chain(&wire.answers("deployments", true))
            .all(|c| c.starts_with("application/json"))
    );
    for name in ["d", "d2"] {
        let lazy = lean.lister().lazy().get("a", name).expect("cached");
        assert_eq!(
            lazy.raw().unwrap().encoding(),
            kinformer::lean::Encoding::Json
        );
        assert_eq!(
            *lean.lister().get("a", name).unwrap(),
            deployments.get(name).await.unwrap()
        );
    }
    lean.shutdown().await;
}
