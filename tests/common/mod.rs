//! Shared helpers of the integration tests: a simulated API server per test, pod builders,
//! condition waits with deadlines (never sleeps as synchronisation), and a handler that keeps
//! its own view of the world to compare with the server's.
#![allow(dead_code)]

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kinformer::{DeltaObject, meta_namespace_key, notification::Notification};
use kinformer_actors::{
    InformerConfig, InformerObject, ResourceEventHandler, SharedIndexInformer, handler_fn,
};
use kinformer_sim::{Sim, SimConfig};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};

pub const DEADLINE: Duration = Duration::from_secs(30);

/// Starts a simulated API server on an ephemeral loopback port.
pub async fn sim() -> Sim {
    sim_with(SimConfig::default()).await
}

pub async fn sim_with(cfg: SimConfig) -> Sim {
    Sim::start(cfg).await.expect("sim starts")
}

/// Polls `cond` every few milliseconds until it holds; panics after `DEADLINE`.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Starts `informer` and waits (up to `DEADLINE`) until it has synced.
pub async fn start_synced<K: InformerObject>(informer: &SharedIndexInformer<K>) {
    informer.start().expect("start");
    tokio::time::timeout(DEADLINE, informer.wait_for_sync())
        .await
        .expect("synced within the deadline");
}

/// Waits until the reflector has its watch open on the server (faults act on open watches).
pub async fn watching(sim: &Sim) {
    eventually("the informer's watch is open", || {
        sim.requests().open_watches() >= 1
    })
    .await;
}

/// Fast reflector restarts for tests (the R8 defaults are 800 ms .. 30 s).
pub fn fast_config() -> InformerConfig {
    let mut c = InformerConfig::default();
    c.backoff.initial = Duration::from_millis(5);
    c.backoff.max = Duration::from_millis(50);
    c
}

pub fn pod(ns: &str, name: &str) -> Pod {
    let mut p = Pod::default();
    p.metadata.namespace = Some(ns.into());
    p.metadata.name = Some(name.into());
    p.metadata.labels = Some(BTreeMap::from([("app".to_string(), "web".to_string())]));
    // One container: kube-apiserver (and the sim) refuse a pod without.
    p.spec = Some(
        serde_json::from_value(serde_json::json!({"containers": [{"name": "c", "image": "img"}]}))
            .expect("a pod spec"),
    );
    p
}

pub async fn create_pods(client: &Client, ns: &str, n: usize) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    for i in 0..n {
        api.create(&PostParams::default(), &pod(ns, &format!("pod-{i}")))
            .await
            .expect("create pod");
    }
}

pub async fn touch_pod(client: &Client, ns: &str, name: &str, value: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({"metadata": {"annotations": {"touched": value}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch pod");
}

/// Patches a pod's annotation; errors (e.g. the pod was deleted) are returned.
pub async fn try_touch_pod(client: &Client, ns: &str, name: &str, value: &str) -> kube::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({"metadata": {"annotations": {"touched": value}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Deletes a pod; errors (e.g. already gone) are returned.
pub async fn try_delete_pod(client: &Client, ns: &str, name: &str) -> kube::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.delete(name, &DeleteParams::default()).await.map(|_| ())
}

pub async fn delete_pod(client: &Client, ns: &str, name: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete pod");
}

/// The server's state: key → resourceVersion of every pod.
pub async fn server_pods(client: &Client) -> BTreeMap<String, String> {
    let api: Api<Pod> = Api::all(client.clone());
    api.list(&ListParams::default())
        .await
        .expect("list pods")
        .items
        .iter()
        .map(|p| {
            (
                meta_namespace_key(p).expect("key").to_string(),
                p.resource_version().unwrap_or_default(),
            )
        })
        .collect()
}

/// The informer cache's state: key → resourceVersion.
pub fn cache_pods(informer: &SharedIndexInformer<Pod>) -> BTreeMap<String, String> {
    informer
        .lister()
        .list()
        .iter()
        .map(|p| {
            (
                meta_namespace_key(&**p).expect("key").to_string(),
                p.resource_version().unwrap_or_default(),
            )
        })
        .collect()
}

/// Deterministic churn of `steps` writes (seeded by `seed`): every tenth deletes a pod of
/// namespace "a" (`pod-0`..`pod-{a_pods - 1}`), every tenth creates `new-{i}` in "b", the rest
/// touch a pod of "a". Errors (a pod already deleted) are part of the churn and ignored.
pub async fn churn_pods(client: &Client, seed: u64, steps: u64, a_pods: u64) {
    let mut x = seed;
    for i in 0..steps {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let n = (x >> 33) % a_pods;
        match i % 10 {
            0 => try_delete_pod(client, "a", &format!("pod-{n}")).await.ok(),
            1 => {
                let api: Api<Pod> = Api::namespaced(client.clone(), "b");
                api.create(&PostParams::default(), &pod("b", &format!("new-{i}")))
                    .await
                    .ok()
                    .map(|_| ())
            }
            _ => try_touch_pod(client, "a", &format!("pod-{n}"), &i.to_string())
                .await
                .ok(),
        };
    }
}

/// A handler's own view, built only from its notifications, plus anything inconsistent it saw
/// (an Add for a key it already had: duplicate; an Update or Delete for one it did not: gap).
#[derive(Clone, Default)]
pub struct View {
    pub state: Arc<Mutex<BTreeMap<String, String>>>,
    pub anomalies: Arc<Mutex<Vec<String>>>,
    pub seen: Arc<Mutex<u64>>,
    pub resyncs: Arc<Mutex<u64>>,
}

impl View {
    pub fn snapshot(&self) -> BTreeMap<String, String> {
        self.state.lock().unwrap().clone()
    }
    pub fn anomalies(&self) -> Vec<String> {
        self.anomalies.lock().unwrap().clone()
    }
    pub fn seen(&self) -> u64 {
        *self.seen.lock().unwrap()
    }
    pub fn resyncs(&self) -> u64 {
        *self.resyncs.lock().unwrap()
    }

    pub fn apply(&self, n: &Notification<Pod>) {
        *self.seen.lock().unwrap() += 1;
        let key = meta_namespace_key(&**n.object()).expect("key").to_string();
        let mut st = self.state.lock().unwrap();
        let bad = |m: String| self.anomalies.lock().unwrap().push(m);
        match n {
            Notification::Add { obj, .. } => {
                if st.contains_key(&key) {
                    bad(format!("duplicate add {key}"));
                }
                st.insert(key, obj.resource_version().unwrap_or_default());
            }
            Notification::Update { old, new } => {
                if std::sync::Arc::ptr_eq(old, new) {
                    *self.resyncs.lock().unwrap() += 1;
                }
                if !st.contains_key(&key) {
                    bad(format!("update of unknown {key}"));
                }
                st.insert(key, new.resource_version().unwrap_or_default());
            }
            Notification::Delete { obj } => {
                if st.remove(&key).is_none() && !matches!(obj, DeltaObject::Tombstone(_)) {
                    bad(format!("delete of unknown {key}"));
                }
            }
        }
    }

    pub fn handler(&self) -> impl ResourceEventHandler<Pod> {
        let v = self.clone();
        handler_fn(move |n: &Notification<Pod>| v.apply(n))
    }
}

/// A scripted server's read of one request: its head, up to the blank line, and the request
/// line from it (`GET /api/v1/pods?watch=true HTTP/1.1`); `None` when the client hung up first.
pub async fn read_request_line(conn: &mut tokio::net::TcpStream) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    Some(
        String::from_utf8_lossy(&head)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string(),
    )
}
