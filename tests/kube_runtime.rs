//! kube-rs interop (feature `kube-runtime`, `actors/src/interop/kube_runtime.rs`): an informer
//! as kube-rs's watcher event stream, trigger stream and `reflector::Store`, over HTTP against
//! the simulated API server.

use std::collections::BTreeSet;

use crate::common::*;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kinformer_actors::SharedIndexInformer;
use kinformer_sim::Verb;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{WatchStreamExt, predicates, reflector::ObjectRef, watcher},
};

/// The next item of `s`, within the deadline.
async fn next<T>(s: &mut (impl Stream<Item = T> + Unpin)) -> Option<T> {
    tokio::time::timeout(DEADLINE, s.next())
        .await
        .expect("an item (or the end) within the deadline")
}

/// `Init`, `InitApply(ns/name)`, `InitDone`, `Apply(ns/name)`, `Delete(ns/name)`.
fn describe(e: &watcher::Event<Pod>) -> String {
    let key = |p: &Pod| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any());
    match e {
        watcher::Event::Init => "Init".into(),
        watcher::Event::InitApply(p) => format!("InitApply({})", key(p)),
        watcher::Event::InitDone => "InitDone".into(),
        watcher::Event::Apply(p) => format!("Apply({})", key(p)),
        watcher::Event::Delete(p) => format!("Delete({})", key(p)),
    }
}

async fn next_event(
    s: &mut (impl Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Unpin),
) -> String {
    let e = next(s).await.expect("the stream goes on");
    describe(&e.expect("the informer's streams never yield errors"))
}

/// A pod's deletion: the server marks it terminating first (an `Apply` with its
/// deletionTimestamp, as a kubelet-less API server does with a graceful delete), then removes it.
async fn expect_deletion(
    s: &mut (impl Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Unpin),
    key: &str,
) {
    loop {
        let e = next(s)
            .await
            .expect("the stream goes on")
            .expect("no errors");
        let d = describe(&e);
        if d == format!("Delete({key})") {
            return;
        }
        match e {
            watcher::Event::Apply(p) if d == format!("Apply({key})") => {
                assert!(p.metadata.deletion_timestamp.is_some(), "terminating first")
            }
            _ => panic!("expected the deletion of {key}, got {d}"),
        }
    }
}

/// The initial list as kube's watcher gives it (Init, an InitApply per object in any order,
/// InitDone), then live changes in order; kube's Store follows.
#[tokio::test]
async fn watcher_events_initial_list_then_changes() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 3).await;
    let pods = SharedIndexInformer::<Pod>::all(client.clone());
    let mut events = pods.watcher_events().await.expect("stream");
    let store = pods.kube_store().await.expect("store");
    pods.start().expect("start");

    assert_eq!(next_event(&mut events).await, "Init");
    let mut initial = BTreeSet::new();
    for _ in 0..3 {
        initial.insert(next_event(&mut events).await);
    }
    let want: BTreeSet<String> = (0..3).map(|i| format!("InitApply(a/pod-{i})")).collect();
    assert_eq!(initial, want);
    assert_eq!(next_event(&mut events).await, "InitDone");
    tokio::time::timeout(DEADLINE, store.wait_until_ready())
        .await
        .expect("ready in time")
        .expect("ready");
    assert_eq!(store.len(), 3);

    touch_pod(&client, "a", "pod-1", "v2").await;
    assert_eq!(next_event(&mut events).await, "Apply(a/pod-1)");
    create_pods(&client, "b", 1).await;
    assert_eq!(next_event(&mut events).await, "Apply(b/pod-0)");
    delete_pod(&client, "a", "pod-2").await;
    expect_deletion(&mut events, "a/pod-2").await;
    // The store was written before the change was sent (the hub applies, then sends).
    assert!(store.get(&ObjectRef::new("pod-2").within("a")).is_none());
    assert!(store.get(&ObjectRef::new("pod-0").within("b")).is_some());
    let touched = store
        .get(&ObjectRef::new("pod-1").within("a"))
        .expect("pod-1 cached");
    assert_eq!(
        touched.annotations().get("touched").map(String::as_str),
        Some("v2")
    );
    assert_eq!(store.len(), 3);
    pods.shutdown().await;
}

/// kube-rs #1630: a subscriber that joins after the start gets the current state first
/// (Init, InitApply per object, InitDone), then live changes, with no gap and no duplicate;
/// every subscriber shares the informer's one LIST and one WATCH.
#[tokio::test]
async fn late_subscribers_get_the_current_state_first() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 2).await;
    let pods = SharedIndexInformer::<Pod>::all(client.clone());
    start_synced(&pods).await;
    watching(&sim).await;

    let mut early = pods.watcher_events().await.expect("stream");
    let mut first = Vec::new();
    for _ in 0..4 {
        first.push(next_event(&mut early).await);
    }
    first[1..3].sort();
    assert_eq!(
        first,
        [
            "Init",
            "InitApply(a/pod-0)",
            "InitApply(a/pod-1)",
            "InitDone"
        ]
    );

    touch_pod(&client, "a", "pod-0", "v2").await;
    assert_eq!(next_event(&mut early).await, "Apply(a/pod-0)");
    create_pods(&client, "b", 1).await;
    assert_eq!(next_event(&mut early).await, "Apply(b/pod-0)");

    // Joins now: the three pods as its initial list, then only what comes after.
    let mut late = pods.watcher_events().await.expect("stream");
    let mut objects = pods.shared_objects().await.expect("stream");
    assert_eq!(next_event(&mut late).await, "Init");
    let mut initial = BTreeSet::new();
    for _ in 0..3 {
        initial.insert(next_event(&mut late).await);
    }
    assert_eq!(
        initial,
        BTreeSet::from([
            "InitApply(a/pod-0)".to_string(),
            "InitApply(a/pod-1)".to_string(),
            "InitApply(b/pod-0)".to_string()
        ])
    );
    assert_eq!(next_event(&mut late).await, "InitDone");
    // The late copy of a/pod-0 is its newest version.
    let mut names = BTreeSet::new();
    for _ in 0..3 {
        let p = next(&mut objects).await.expect("object");
        names.insert(format!(
            "{}/{}",
            p.namespace().unwrap_or_default(),
            p.name_any()
        ));
        if p.name_any() == "pod-0" && p.namespace().as_deref() == Some("a") {
            assert_eq!(
                p.annotations().get("touched").map(String::as_str),
                Some("v2")
            );
        }
    }
    assert_eq!(names.len(), 3);

    delete_pod(&client, "a", "pod-1").await;
    for s in [&mut early, &mut late] {
        expect_deletion(s, "a/pod-1").await;
    }
    touch_pod(&client, "b", "pod-0", "v3").await;
    for s in [&mut early, &mut late] {
        assert_eq!(next_event(s).await, "Apply(b/pod-0)");
    }
    // Deletions are not triggers: after a/pod-1 marked terminating comes the touched one.
    let p = next(&mut objects).await.expect("object");
    assert_eq!(
        (p.namespace().as_deref(), p.name_any().as_str()),
        (Some("a"), "pod-1")
    );
    assert!(p.metadata.deletion_timestamp.is_some());
    let p = next(&mut objects).await.expect("object");
    assert_eq!(
        (p.namespace().as_deref(), p.name_any().as_str()),
        (Some("b"), "pod-0")
    );

    assert_eq!(sim.requests().count("pods", Verb::List), 1, "one LIST");
    assert_eq!(sim.requests().count("pods", Verb::Watch), 1, "one WATCH");
    pods.shutdown().await;
}

/// An empty informer's initial list ends too (no change arrives to say so): `InitDone` comes,
/// and kube's Store becomes ready, so a Controller on it starts.
#[tokio::test]
async fn empty_initial_list_ends() {
    let sim = sim().await;
    let pods = SharedIndexInformer::<Pod>::all(sim.client());
    let store = pods.kube_store().await.expect("store");
    let mut events = pods.watcher_events().await.expect("stream");
    pods.start().expect("start");
    assert_eq!(next_event(&mut events).await, "Init");
    assert_eq!(next_event(&mut events).await, "InitDone");
    tokio::time::timeout(DEADLINE, store.wait_until_ready())
        .await
        .expect("ready in time")
        .expect("ready");
    assert!(store.is_empty());
    pods.shutdown().await;
}

/// kube's `WatchStreamExt` adapters run on the informer's stream: `predicate_filter` on labels
/// lets a label change through and drops an annotation-only change.
#[tokio::test]
async fn predicate_filter_runs_on_the_informer() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 1).await;
    let pods = SharedIndexInformer::<Pod>::all(client.clone());
    start_synced(&pods).await;
    let mut labelled = pods
        .watcher_events()
        .await
        .expect("stream")
        .applied_objects()
        .predicate_filter(predicates::labels, Default::default())
        .boxed();
    let first = next(&mut labelled).await.expect("item").expect("object");
    assert_eq!(first.name_any(), "pod-0");

    touch_pod(&client, "a", "pod-0", "v2").await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "a");
    let label = serde_json::json!({"metadata": {"labels": {"tier": "gold"}}});
    api.patch("pod-0", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("label");
    let next_obj = next(&mut labelled).await.expect("item").expect("object");
    assert_eq!(
        next_obj.labels().get("tier").map(String::as_str),
        Some("gold"),
        "the annotation-only change was filtered out; the label change came through"
    );
    assert_eq!(
        next_obj.annotations().get("touched").map(String::as_str),
        Some("v2")
    );
    pods.shutdown().await;
}

/// The streams end when the informer is shut down (a Controller on them then shuts down
/// gracefully); the Store stays readable.
#[tokio::test]
async fn streams_end_at_shutdown() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 2).await;
    let pods = SharedIndexInformer::<Pod>::all(client);
    start_synced(&pods).await;
    let mut events = pods.watcher_events().await.expect("stream");
    let mut objects = pods.shared_objects().await.expect("stream");
    for _ in 0..4 {
        next_event(&mut events).await;
    }
    for _ in 0..2 {
        next(&mut objects).await.expect("object");
    }
    pods.shutdown().await;
    assert!(next(&mut events).await.is_none(), "events end");
    assert!(next(&mut objects).await.is_none(), "objects end");
    let store = pods.kube_store().await.expect("store");
    assert_eq!(store.len(), 2);
    // A subscriber after the shutdown gets the last state, then the end.
    let mut after = pods.watcher_events().await.expect("stream");
    for _ in 0..4 {
        next_event(&mut after).await;
    }
    assert!(next(&mut after).await.is_none());
}
