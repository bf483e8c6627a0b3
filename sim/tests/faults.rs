//! Every fault, observed both through kube and on the wire, and counted.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{Chunk, DEADLINE, next, next_event, raw, raw_watch};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer_sim::{Sim, SimConfig, Verb, wait_until};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

async fn create(sim: &Sim, name: &str) -> u64 {
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let c = cms.create(&PostParams::default(), &cm(name)).await.unwrap();
    c.metadata.resource_version.unwrap().parse().unwrap()
}

fn status_code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn failed_lists_with_500_and_429() {
    let sim = common::sim().await;
    let cms: Api<ConfigMap> = Api::namespaced(common::client_without_retry(&sim), "default");
    sim.faults().fail_next_lists(1, 500);
    assert_eq!(
        status_code(cms.list(&ListParams::default()).await.unwrap_err()),
        500
    );
    assert!(
        cms.list(&ListParams::default()).await.is_ok(),
        "only the next list fails"
    );

    sim.faults().fail_next_lists(1, 429);
    let r = raw(
        &sim,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[],
        Bytes::new(),
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(
        r.headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1")
    );
    assert_eq!(r.json()["reason"], "TooManyRequests");

    // kube's default client retries 429 and succeeds.
    sim.faults()
        .fail_next(Some("configmaps"), Verb::List, 2, 429, 0);
    let retrying: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    assert!(retrying.list(&ListParams::default()).await.is_ok());
    assert_eq!(sim.faults().counters().lists_failed, 4);
    assert_eq!(sim.requests().count("configmaps", Verb::List), 6);
}

#[tokio::test]
async fn failed_watches_and_other_verbs() {
    let sim = common::sim().await;
    let cms: Api<ConfigMap> = Api::namespaced(common::client_without_retry(&sim), "default");
    sim.faults().fail_next_watches(1, 500);
    let err = match cms.watch(&WatchParams::default(), "0").await {
        Err(e) => e,
        Ok(_) => panic!("the watch should fail"),
    };
    assert_eq!(status_code(err), 500);
    assert!(cms.watch(&WatchParams::default(), "0").await.is_ok());
    sim.faults()
        .fail_next(Some("configmaps"), Verb::Create, 1, 503, 0);
    assert_eq!(
        status_code(
            cms.create(&PostParams::default(), &cm("x"))
                .await
                .unwrap_err()
        ),
        503
    );
    let c = sim.faults().counters();
    assert_eq!((c.watches_failed, c.others_failed), (1, 1));
}

#[tokio::test]
async fn exactly_one_list_and_one_watch() {
    let sim = common::sim().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let l = cms.list(&ListParams::default()).await.unwrap();
    let _w = cms
        .watch(
            &WatchParams::default(),
            l.metadata.resource_version.as_deref().unwrap(),
        )
        .await
        .unwrap();
    common::wait_open_watches(&sim, 1).await;
    let req = sim.requests();
    assert_eq!(req.count("configmaps", Verb::List), 1);
    assert_eq!(req.count("configmaps", Verb::Watch), 1);
    assert_eq!(req.count("pods", Verb::List), 0);
    assert_eq!(req.open_watches_of("configmaps"), 1);
    assert_eq!(req.total(), 2);
}

#[tokio::test]
async fn drop_watches_aborts_open_streams() {
    let sim = common::sim().await;
    let rv = create(&sim, "a").await;
    let (status, mut raw_w) = raw_watch(
        &sim,
        &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"),
    )
    .await;
    assert_eq!(status, 200);
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let mut kube_w = cms
        .watch(&WatchParams::default(), &rv.to_string())
        .await
        .unwrap()
        .boxed();
    common::wait_open_watches(&sim, 2).await;
    sim.faults().drop_watches();
    assert!(
        matches!(next(&mut raw_w).await, Some(Chunk::Broken(_))),
        "the connection breaks without the final chunk"
    );
    // kube reports an error or the end of the stream.
    match next(&mut kube_w).await {
        None | Some(Err(_)) => {}
        Some(Ok(e)) => panic!("unexpected event {e:?}"),
    }
    common::wait_open_watches(&sim, 0).await;
    assert_eq!(sim.faults().counters().watches_dropped, 2);
    // New watches are not affected.
    let (_, mut w2) = raw_watch(
        &sim,
        &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"),
    )
    .await;
    create(&sim, "b").await;
    assert_eq!(next_event(&mut w2).await["object"]["metadata"]["name"], "b");
}

#[tokio::test]
async fn expire_watches_sends_410_error() {
    let sim = common::sim().await;
    let rv = create(&sim, "a").await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let mut w = cms
        .watch(&WatchParams::default(), &rv.to_string())
        .await
        .unwrap()
        .boxed();
    common::wait_open_watches(&sim, 1).await;
    sim.faults().expire_watches();
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Error(s) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        e => panic!("expected ERROR 410, got {e:?}"),
    }
    assert!(next(&mut w).await.is_none());
    assert_eq!(sim.faults().counters().watches_expired, 1);
}

#[tokio::test]
async fn compact_expires_old_resource_versions() {
    let sim = common::sim().await;
    let old = create(&sim, "a").await;
    create(&sim, "b").await;
    let now = sim.faults().compact();
    assert_eq!(now, sim.resource_version());
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let mut w = cms
        .watch(&WatchParams::default(), &old.to_string())
        .await
        .unwrap()
        .boxed();
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Error(s) => assert_eq!(s.code, 410),
        e => panic!("expected ERROR 410, got {e:?}"),
    }
    // From the current RV it works.
    let mut w = cms
        .watch(&WatchParams::default(), &now.to_string())
        .await
        .unwrap()
        .boxed();
    create(&sim, "c").await;
    assert!(matches!(next(&mut w).await, Some(Ok(WatchEvent::Added(_)))));
    let c = sim.faults().counters();
    assert_eq!((c.compactions, c.too_old_watches), (1, 1));
}

#[tokio::test]
async fn malformed_line_then_the_stream_goes_on() {
    let sim = common::sim().await;
    let rv = create(&sim, "a").await;
    let (_, mut w) = raw_watch(
        &sim,
        &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}"),
    )
    .await;
    common::wait_open_watches(&sim, 1).await;
    sim.faults().malformed_next_event();
    create(&sim, "b").await;
    match next(&mut w).await {
        Some(Chunk::Line(l)) => assert!(
            serde_json::from_str::<serde_json::Value>(&l).is_err(),
            "line should be malformed: {l}"
        ),
        other => panic!("expected a line, got {other:?}"),
    }
    assert_eq!(next_event(&mut w).await["object"]["metadata"]["name"], "b");
    assert_eq!(sim.faults().counters().malformed_events, 1);

    // Through kube: an error item, then the event.
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let mut kw = cms
        .watch(&WatchParams::default(), &sim.resource_version().to_string())
        .await
        .unwrap()
        .boxed();
    common::wait_open_watches(&sim, 2).await;
    sim.faults().malformed_next_event_of("configmaps");
    create(&sim, "c").await;
    // Either watch may take the one-shot fault; the counter says it happened exactly once more.
    wait_until(DEADLINE, || sim.faults().counters().malformed_events == 2)
        .await
        .unwrap();
    let mut saw_c = false;
    while !saw_c {
        match next(&mut kw).await {
            Some(Ok(WatchEvent::Added(o))) => saw_c = o.metadata.name.as_deref() == Some("c"),
            Some(Err(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn close_mid_object_loses_nothing_on_resume() {
    let sim = common::sim().await;
    let rv = create(&sim, "a").await;
    let (_, mut w) = raw_watch(
        &sim,
        &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"),
    )
    .await;
    common::wait_open_watches(&sim, 1).await;
    sim.faults().close_mid_object_next();
    create(&sim, "b").await;
    match next(&mut w).await {
        Some(Chunk::Broken(partial)) => {
            assert!(
                partial.starts_with("{\"type\":\"ADDED\""),
                "partial: {partial}"
            );
            assert!(serde_json::from_str::<serde_json::Value>(&partial).is_err());
        }
        other => panic!("expected a broken stream, got {other:?}"),
    }
    assert_eq!(sim.faults().counters().closed_mid_object, 1);
    // Resuming from the last delivered RV gets the cut event.
    let (_, mut w2) = raw_watch(
        &sim,
        &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"),
    )
    .await;
    let e = next_event(&mut w2).await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("b"))
    );
}

#[tokio::test]
async fn slow_watches_delay_each_event() {
    let sim = common::sim().await;
    let rv = create(&sim, "a").await;
    sim.faults().slow_watches(Some(Duration::from_millis(5)));
    let (_, mut w) = raw_watch(
        &sim,
        &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"),
    )
    .await;
    for n in ["b", "c", "d"] {
        create(&sim, n).await;
    }
    for n in ["b", "c", "d"] {
        assert_eq!(next_event(&mut w).await["object"]["metadata"]["name"], n);
    }
    assert!(sim.faults().counters().slowed_events >= 3);
    sim.faults().slow_watches(None);
    create(&sim, "e").await;
    assert_eq!(next_event(&mut w).await["object"]["metadata"]["name"], "e");
}

#[tokio::test]
async fn control_endpoint_drives_faults() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let rv = create(&sim, "a").await;
    let post = |p: &'static str| raw(&sim, "POST", p, &[], Bytes::new());
    assert_eq!(
        post("/sim/faults/fail-lists?n=2&code=500").await.status,
        200
    );
    for _ in 0..2 {
        assert_eq!(
            raw(&sim, "GET", "/api/v1/configmaps", &[], Bytes::new())
                .await
                .status,
            500
        );
    }
    assert_eq!(
        raw(&sim, "GET", "/api/v1/configmaps", &[], Bytes::new())
            .await
            .status,
        200
    );
    let (_, mut w) = raw_watch(
        &sim,
        &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"),
    )
    .await;
    common::wait_open_watches(&sim, 1).await;
    assert_eq!(post("/sim/faults/expire-watches").await.status, 200);
    assert_eq!(next_event(&mut w).await["object"]["code"], 410);
    assert_eq!(post("/sim/faults/compact").await.status, 200);
    for p in [
        "/sim/faults/malformed-next-event",
        "/sim/faults/close-mid-object-next",
        "/sim/faults/slow-watches?perEventMs=1",
        "/sim/faults/clear",
        "/sim/faults/drop-watches",
    ] {
        assert_eq!(post(p).await.status, 200, "{p}");
    }
    let counters = raw(&sim, "GET", "/sim/faults", &[], Bytes::new())
        .await
        .json();
    assert_eq!(counters["listsFailed"], 2);
    assert_eq!(counters["watchesExpired"], 1);
    assert_eq!(counters["compactions"], 1);
    let reqs = raw(&sim, "GET", "/sim/requests", &[], Bytes::new())
        .await
        .json();
    assert!(
        reqs["counts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["resource"] == "configmaps" && c["verb"] == "list" && c["count"] == 3)
    );
    assert_eq!(
        raw(&sim, "GET", "/sim/faults/drop-watches", &[], Bytes::new())
            .await
            .status,
        405
    );
    assert_eq!(
        raw(&sim, "POST", "/sim/nope", &[], Bytes::new())
            .await
            .status,
        404
    );
    // Churn through the control endpoint.
    assert_eq!(
        post("/sim/churn/start?rate=500&namespaces=c1&seed=7")
            .await
            .status,
        200
    );
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "c1");
    kinformer_sim::wait_until_async(DEADLINE, || async {
        raw(&sim, "GET", "/sim/churn", &[], Bytes::new())
            .await
            .json()["counts"]["created"]
            .as_u64()
            .unwrap_or(0)
            >= 3
    })
    .await
    .unwrap();
    let stopped = post("/sim/churn/stop").await.json();
    assert!(stopped["stopped"]["created"].as_u64().unwrap() >= 3);
    let _ = cms.list(&ListParams::default()).await.unwrap();
    let _ = cms
        .patch("none", &PatchParams::default(), &Patch::Merge(json!({})))
        .await;
}

#[tokio::test]
async fn stalled_watches_go_silent_then_resume_or_drop() {
    let sim = common::sim().await;
    let rv = create(&sim, "a").await;
    let path = format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}");
    let (_, mut w) = raw_watch(&sim, &path).await;
    let (_, mut w2) = raw_watch(&sim, &path).await;
    common::wait_open_watches(&sim, 2).await;
    sim.faults().stall_watches(true);
    wait_until(DEADLINE, || sim.faults().counters().stalled_watches == 2)
        .await
        .unwrap();
    create(&sim, "b").await;
    // The event waits until the stall ends; nothing is lost.
    sim.faults().stall_watches(false);
    assert_eq!(next_event(&mut w).await["object"]["metadata"]["name"], "b");
    assert_eq!(next_event(&mut w2).await["object"]["metadata"]["name"], "b");
    // A stalled stream can still be dropped.
    sim.faults().stall_watches(true);
    wait_until(DEADLINE, || sim.faults().counters().stalled_watches == 4)
        .await
        .unwrap();
    sim.faults().drop_watches();
    assert!(matches!(next(&mut w).await, Some(Chunk::Broken(_))));
    assert!(matches!(next(&mut w2).await, Some(Chunk::Broken(_))));
    sim.faults().clear();
}
