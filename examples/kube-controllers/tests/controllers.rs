//! Two kube-rs Controllers and a kinformer handler on one Pod informer, over HTTP against the
//! simulated API server: both controllers reconcile every pod, the handler hears every pod, and
//! the server sees one LIST and one WATCH of pods; a third Controller added after the start
//! reconciles the existing pods too (kube-rs #1630) without a request more.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kinformer_sim::{Sim, SimConfig, Verb};
use kube::{
    Api, ResourceExt,
    api::{ListParams, PostParams},
    runtime::controller::Action,
};
use kube_controllers::ANNOTATION;

const DEADLINE: Duration = Duration::from_secs(30);

/// Polls `cond` every few milliseconds until it holds; panics after `DEADLINE`.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn create(api: &Api<Pod>, name: &str) {
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.into());
    pod.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into())]));
    // One container: kube-apiserver (and the sim) refuse a pod without.
    pod.spec = Some(PodSpec {
        containers: vec![Container {
            name: "app".into(),
            image: Some("registry.example/app:1".into()),
            ..Container::default()
        }],
        ..PodSpec::default()
    });
    api.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

#[tokio::test]
async fn two_controllers_and_a_handler_share_one_list_and_one_watch() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client();
    let api: Api<Pod> = Api::namespaced(client.clone(), "a");
    for i in 0..3 {
        create(&api, &format!("before-{i}")).await;
    }
    let running = kube_controllers::start(client.clone())
        .await
        .expect("start");
    for i in 0..3 {
        create(&api, &format!("after-{i}")).await;
    }
    let all: BTreeSet<String> = (0..3)
        .flat_map(|i| [format!("a/before-{i}"), format!("a/after-{i}")])
        .collect();
    let counts = Arc::clone(&running.counts);
    eventually(
        "both controllers reconciled every pod, the handler heard each",
        || {
            counts.annotated() == all
                && counts.counted().keys().cloned().collect::<BTreeSet<_>>() == all
                && counts.heard() == all
        },
    )
    .await;
    // The annotator's writes change no label: the counter's predicate_filter let each pod
    // through once.
    assert!(
        counts.counted().values().all(|n| *n == 1),
        "{:?}",
        counts.counted()
    );
    eventually("every pod annotated on the server", || {
        running
            .pods
            .lister()
            .list()
            .iter()
            .filter(|p| p.annotations().contains_key(ANNOTATION))
            .count()
            == all.len()
    })
    .await;
    assert_eq!(
        sim.requests().count("pods", Verb::List),
        1,
        "one LIST of pods"
    );
    assert_eq!(
        sim.requests().count("pods", Verb::Watch),
        1,
        "one WATCH of pods"
    );

    // kube-rs #1630: a Controller added after the start is given the existing pods first.
    let late: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let seen = Arc::clone(&late);
    let controller = running.pods.controller().await.expect("controller").run(
        move |pod: Arc<Pod>, _: Arc<()>| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().expect("lock").insert(format!(
                    "{}/{}",
                    pod.namespace().unwrap_or_default(),
                    pod.name_any()
                ));
                Ok::<_, kube::Error>(Action::await_change())
            }
        },
        |_, _, _| Action::await_change(),
        Arc::new(()),
    );
    let task = tokio::spawn(controller.for_each(|_| async {}));
    eventually("the late controller reconciled every existing pod", || {
        *late.lock().expect("lock") == all
    })
    .await;
    assert_eq!(
        sim.requests().count("pods", Verb::List),
        1,
        "still one LIST"
    );
    assert_eq!(
        sim.requests().count("pods", Verb::Watch),
        1,
        "still one WATCH"
    );

    // Shutting the informer down ends the controllers' streams: they stop by themselves.
    running.shutdown().await;
    tokio::time::timeout(DEADLINE, task)
        .await
        .expect("the late controller stops with its informer")
        .expect("task");
    // The annotations are on the server (read last: this LIST is the test's own).
    let on_server = api.list(&ListParams::default()).await.expect("list");
    assert!(
        on_server
            .items
            .iter()
            .all(|p| p.annotations().contains_key(ANNOTATION))
    );
}
