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
use kinformer_actors::{ContentType, InformerConfig, SharedIndexInformer, handler_fn};
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
        // A JSON line in the middle of a protobuf stream: the frame length is garbage (a
        // server switching encoding mid-stream).
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
    // Every episode ended the watch: each was opened again (and answered in protobuf).
    assert!(wire.answers("configmaps", true).len() > episodes.len());
    assert!(
        wire.answers("configmaps", true)
            .iter()
            .all(|c| c.starts_with(PROTOBUF))
    );
    pb.shutdown().await;
}
