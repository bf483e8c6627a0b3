//! Every handle call from every runtime: the informer, its registrations, listers and the
//! factory are used the same way from an actix System, a plain tokio runtime and a plain
//! thread (`futures::executor::block_on`), as `kinformer_actors::runtime` promises. The server
//! runs on its own thread and is written to through its in-process API, so the scenario itself
//! needs no runtime; waits poll with a deadline on a helper thread, never a tokio timer.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use actix::{Actor, Context, Handler};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kinformer::{
    notification::Notification,
    store::{Indexers, meta_index_func},
};
use kinformer_actors::{
    ListenerConfig, Notify, SharedIndexInformer, SharedInformerFactory, handler_fn, runtime,
};
use kinformer_sim::{Sim, SimConfig, SimThread};
use serde_json::json;

use crate::common::{DEADLINE, fast_config};

/// Pauses without a runtime's timer: a helper thread wakes the awaiting task.
async fn pause(d: Duration) {
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    std::thread::spawn(move || {
        std::thread::sleep(d);
        let _ = tx.send(());
    });
    let _ = rx.await;
}

/// Polls `cond` until it holds; panics after `DEADLINE`.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        pause(Duration::from_millis(10)).await;
    }
}

/// Names seen, in order, by one handler or actor.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn push(&self, s: String) {
        self.0.lock().unwrap().push(s);
    }
    fn has(&self, name: &str) -> bool {
        self.0.lock().unwrap().iter().any(|n| n == name)
    }
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// A user's actor that records the names it is told about.
struct Recorder(Seen);

impl Actor for Recorder {
    type Context = Context<Self>;
}

impl Handler<Notify<Pod>> for Recorder {
    type Result = ();
    fn handle(&mut self, msg: Notify<Pod>, _: &mut Context<Self>) {
        if let Notification::Add { .. } = msg.event {
            self.0.push(msg.key.name().to_string());
        }
    }
}

fn create_pod(sim: &Sim, name: &str) {
    sim.create_object(
        "pods",
        Some("default"),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "labels": {"app": "web"}},
               "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
    )
    .expect("create pod");
}

/// The whole public surface of the informer, a registration, its lister and the factory,
/// from whatever executor runs this future. `recorder` is an actor address started by the
/// caller in a System of its choice.
async fn exercise(sim: &Sim, recorder: actix::Recipient<Notify<Pod>>, recorded: Seen) {
    create_pod(sim, "before");
    let client = sim.client();
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, fast_config());
    assert_eq!(informer.resource(), "pods");
    assert_eq!(informer.namespace(), None);
    assert!(!informer.is_running() && !informer.has_synced());

    let mut indexers = Indexers::new();
    indexers.insert(
        "app".into(),
        meta_index_func(|p| {
            p.labels()
                .get("app")
                .map(String::from)
                .into_iter()
                .collect()
        }),
    );
    informer.add_indexers(indexers).await.expect("add_indexers");

    let first = Seen::default();
    let f = first.clone();
    let first_reg = informer
        .add_event_handler(handler_fn(move |n: &Notification<Pod>| {
            if let Notification::Add { obj, .. } = n {
                f.push(obj.metadata.name.clone().unwrap_or_default());
            }
        }))
        .await
        .expect("add_event_handler");
    let keys = Seen::default();
    let k = keys.clone();
    let key_reg = informer
        .add_key_sink(
            move |key: kinformer::ObjectKey| k.push(key.name().to_string()),
            None,
            ListenerConfig::default(),
        )
        .await
        .expect("add_key_sink");
    let actor_reg = informer
        .add_recipient(recorder, ListenerConfig::default())
        .await
        .expect("add_recipient");

    informer.start().expect("start");
    informer.start().expect("a second start is a no-op");
    let synced = runtime_free_timeout(DEADLINE, informer.wait_for_sync()).await;
    assert!(synced, "synced within the deadline");
    assert!(informer.is_running() && informer.has_synced());
    // Published by the reflector once the FIFO took the list, which may trail the sync.
    until("the last synced resourceVersion is published", || {
        !informer.last_sync_resource_version().is_empty()
    })
    .await;
    assert!(informer.health().lists >= 1);
    let _ = (informer.fifo_status(), informer.indexer_status());

    let lister = informer.lister();
    assert!(lister.get("default", "before").is_some());
    assert_eq!(lister.by_index("app", "web").expect("index").len(), 1);
    until("every handler synced", || {
        first_reg.has_synced() && key_reg.has_synced() && actor_reg.has_synced()
    })
    .await;
    until("every handler heard of `before`", || {
        first.has("before") && keys.has("before") && recorded.has("before")
    })
    .await;

    // remove() returns at once and needs no actix context; the others carry on.
    assert!(first_reg.remove().await.expect("remove"));
    assert!(!first_reg.remove().await.expect("a second remove"));
    let first_count = first.len();
    create_pod(sim, "after");
    until("the remaining handlers hear of `after`", || {
        keys.has("after") && recorded.has("after")
    })
    .await;
    assert_eq!(
        first.len(),
        first_count,
        "a removed handler hears nothing more"
    );
    assert!(first_reg.stats().delivered() >= 1);
    assert!(key_reg.shut_down().await.expect("shut_down"));
    assert!(actor_reg.remove().await.expect("remove the actor"));

    // The factory: its informers, sync wait (with a deadline) and shutdown.
    let factory = SharedInformerFactory::new(client);
    let configmaps = factory.informer::<ConfigMap>();
    assert!(configmaps.same_as(&factory.informer::<ConfigMap>()));
    factory.start().expect("factory start");
    let synced = factory.wait_for_cache_sync(DEADLINE).await;
    assert_eq!(synced.len(), 1);
    assert!(synced.values().all(|s| *s), "{synced:?}");
    let reports = factory.shutdown().await;
    assert_eq!(reports.len(), 1);

    let report = informer.shutdown().await;
    assert!(report.unfinished.is_empty(), "{report:?}");
    assert!(!informer.is_running());
    assert!(
        informer.lister().get("default", "after").is_some(),
        "the cache stays readable after shutdown"
    );
}

/// `fut` with a deadline on a helper thread: true when it finished in time.
async fn runtime_free_timeout<F: std::future::Future>(limit: Duration, fut: F) -> bool {
    let fut = std::pin::pin!(fut);
    let timer = std::pin::pin!(pause(limit));
    matches!(
        futures::future::select(fut, timer).await,
        futures::future::Either::Left(_)
    )
}

fn background_sim() -> SimThread {
    Sim::start_background(SimConfig::default()).expect("sim starts")
}

/// Inside an actix System (the user's `#[actix::main]`): informers join it.
#[actix::test]
async fn every_handle_call_from_an_actix_system() {
    let sim = background_sim();
    let recorded = Seen::default();
    let recorder = Recorder(recorded.clone()).start().recipient();
    exercise(&sim, recorder, recorded).await;
}

/// From a plain tokio runtime: informers run on kinformer's background actix System, and so
/// does the user's actor, started on that System's arbiter.
#[test]
fn every_handle_call_from_a_plain_tokio_runtime() {
    let sim = background_sim();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let recorded = Seen::default();
        let system = runtime::system().expect("background System");
        let r = recorded.clone();
        let recorder = Recorder::start_in_arbiter(system.arbiter(), move |_| Recorder(r));
        exercise(&sim, recorder.recipient(), recorded).await;
    });
}

/// From a plain thread with no runtime at all, driving the futures with `block_on`.
#[test]
fn every_handle_call_from_a_plain_thread() {
    let sim = background_sim();
    let recorded = Seen::default();
    let system = runtime::system().expect("background System");
    let r = recorded.clone();
    let recorder = Recorder::start_in_arbiter(system.arbiter(), move |_| Recorder(r));
    futures::executor::block_on(exercise(&sim, recorder.recipient(), recorded));
}
