//! Every fault, observed both through kube and on the wire, and counted.

use crate::common;

use std::time::Duration;

use crate::common::{Chunk, DEADLINE, next, next_event, raw, raw_watch};
use bytes::Bytes;
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

/// Reads raw watch lines until the stream ends, failing on a broken connection.
async fn lines_until_end<S: futures::Stream<Item = Chunk> + Unpin>(w: &mut S) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        match next(w).await {
            Some(Chunk::Line(l)) => lines.push(l),
            Some(Chunk::End(rest)) => {
                assert!(rest.is_empty(), "left over: {rest}");
                return lines;
            }
            other => panic!("expected a line or a clean end, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn end_watches_at_once_answers_200_and_ends_with_no_event() {
    let sim = common::sim().await;
    create(&sim, "a").await;
    sim.faults().end_watches_at_once(true);
    // On the wire: 200, then the clean end of the chunked body, no line at all.
    let (status, mut w) = raw_watch(
        &sim,
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=0",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(lines_until_end(&mut w).await, Vec::<String>::new());
    // Through kube: the watch opens and ends at once (even one that would replay "a").
    let cms: Api<ConfigMap> = Api::namespaced(common::client_without_retry(&sim), "default");
    let mut kw = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    assert!(next(&mut kw).await.is_none(), "no event, then the end");
    // Watch-list too; lists keep working.
    let mut wl = cms
        .watch(&WatchParams::default().initial_events(), "")
        .await
        .unwrap()
        .boxed();
    assert!(next(&mut wl).await.is_none());
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    let c = sim.faults().counters();
    assert_eq!(c.watches_ended_at_once, 3);
    assert_eq!(sim.requests().count("configmaps", Verb::Watch), 3);
    assert_eq!(
        sim.requests().watches_started(),
        0,
        "no stream ever started"
    );
    // Off again: watches stay open and deliver.
    sim.faults().end_watches_at_once(false);
    let rv = sim.resource_version();
    let mut kw = cms
        .watch(&WatchParams::default(), &rv.to_string())
        .await
        .unwrap()
        .boxed();
    create(&sim, "b").await;
    assert!(matches!(
        next(&mut kw).await,
        Some(Ok(WatchEvent::Added(_)))
    ));
    assert_eq!(sim.faults().counters().watches_ended_at_once, 3);
}

#[tokio::test]
async fn expire_every_watch_over_http_or_as_an_error_event_while_lists_work() {
    let sim = common::sim().await;
    let rv = create(&sim, "a").await;
    let cms: Api<ConfigMap> = Api::namespaced(common::client_without_retry(&sim), "default");
    let path = format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}");

    sim.faults()
        .expire_every_watch(Some(kinformer_sim::ExpireMode::Http));
    let r = raw(&sim, "GET", &path, &[], Bytes::new()).await;
    assert_eq!(r.status, 410);
    let s = r.json();
    assert_eq!(
        (s["kind"].as_str(), s["reason"].as_str(), s["code"].as_u64()),
        (Some("Status"), Some("Expired"), Some(410))
    );
    // Every watch, whatever its RV (unset and 0 too), and kube sees a 410 API error.
    for rv in ["", "0", &rv.to_string()] {
        let err = match cms.watch(&WatchParams::default(), rv).await {
            Err(e) => e,
            Ok(_) => panic!("the watch from {rv:?} should fail"),
        };
        assert_eq!(status_code(err), 410);
    }
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    sim.faults()
        .expire_every_watch(Some(kinformer_sim::ExpireMode::ErrorEvent));
    let (status, mut w) = raw_watch(&sim, &path).await;
    assert_eq!(status, 200);
    let lines = lines_until_end(&mut w).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    let e: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(e["type"], "ERROR");
    assert_eq!(
        (e["object"]["code"].as_u64(), e["object"]["reason"].as_str()),
        (Some(410), Some("Expired"))
    );
    let mut kw = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    match next(&mut kw).await.unwrap().unwrap() {
        WatchEvent::Error(s) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        e => panic!("expected ERROR 410 first, not the replay: {e:?}"),
    }
    assert!(next(&mut kw).await.is_none());
    assert_eq!(sim.faults().counters().watches_refused_expired, 6);

    sim.faults().expire_every_watch(None);
    let mut kw = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        next(&mut kw).await,
        Some(Ok(WatchEvent::Added(_)))
    ));
    assert_eq!(sim.faults().counters().watches_refused_expired, 6);
}

#[tokio::test]
async fn watch_list_rejected_with_422_invalid_while_plain_watches_work() {
    let sim = common::sim().await;
    create(&sim, "a").await;
    sim.faults().reject_watch_list(true);
    let r = raw(
        &sim,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
        &[],
        Bytes::new(),
    )
    .await;
    assert_eq!(r.status, 422);
    let s = r.json();
    assert_eq!(
        (
            s["kind"].as_str(),
            s["status"].as_str(),
            s["reason"].as_str(),
            s["code"].as_u64()
        ),
        (Some("Status"), Some("Failure"), Some("Invalid"), Some(422))
    );
    assert_eq!(s["details"]["causes"][0]["field"], "sendInitialEvents");
    assert_eq!(s["details"]["causes"][0]["reason"], "FieldValueForbidden");
    let cms: Api<ConfigMap> = Api::namespaced(common::client_without_retry(&sim), "default");
    match cms
        .watch(&WatchParams::default().initial_events(), "")
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (422, "Invalid")),
        Err(e) => panic!("expected a 422 API error, got {e:?}"),
        Ok(_) => panic!("the watch-list should be rejected"),
    }
    // A plain watch (the fallback's) works: it replays "a".
    let mut kw = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    match next(&mut kw).await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("a")),
        e => panic!("unexpected {e:?}"),
    }
    assert_eq!(sim.faults().counters().watch_lists_rejected, 2);
    sim.faults().clear();
    let mut wl = cms
        .watch(&WatchParams::default().initial_events(), "")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        next(&mut wl).await,
        Some(Ok(WatchEvent::Added(_)))
    ));
}

fn is_initial_events_end(line: &serde_json::Value) -> bool {
    line["type"] == "BOOKMARK"
        && line["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
}

#[tokio::test]
async fn watch_list_ignored_is_served_as_a_plain_watch_without_the_end_bookmark() {
    let sim = Sim::start(SimConfig {
        bookmark_interval: Duration::from_millis(20),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let after_a = create(&sim, "a").await;
    create(&sim, "b").await;
    let watch_list = |rv: &str| {
        format!(
            "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion={rv}"
        )
    };
    // Control: without the fault, the initial ADDED events end with the annotated bookmark.
    let (_, mut w) = raw_watch(&sim, &watch_list("")).await;
    for n in ["a", "b"] {
        assert_eq!(next_event(&mut w).await["object"]["metadata"]["name"], n);
    }
    assert!(is_initial_events_end(&next_event(&mut w).await));
    drop(w);

    sim.faults().ignore_watch_list(true);
    // RV unset: like any watch without an RV, synthetic ADDED for what exists, then live
    // events and plain bookmarks, but never the initial-events-end bookmark.
    let (status, mut w) = raw_watch(&sim, &watch_list("")).await;
    assert_eq!(status, 200);
    for n in ["a", "b"] {
        let e = next_event(&mut w).await;
        assert_eq!(
            (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
            (Some("ADDED"), Some(n))
        );
    }
    create(&sim, "c").await;
    let mut bookmarks = 0;
    let mut saw_c = false;
    while !(saw_c && bookmarks >= 2) {
        let e = next_event(&mut w).await;
        assert!(
            !is_initial_events_end(&e),
            "an old server never sends it: {e}"
        );
        match e["type"].as_str() {
            Some("BOOKMARK") => bookmarks += 1,
            Some("ADDED") => {
                assert_eq!(e["object"]["metadata"]["name"], "c");
                saw_c = true;
            }
            _ => panic!("unexpected {e}"),
        }
    }
    // With an RV: the events after it (an old server's plain watch), no initial state.
    let (_, mut w) = raw_watch(&sim, &watch_list(&after_a.to_string())).await;
    for n in ["b", "c"] {
        let e = next_event(&mut w).await;
        if e["type"] == "BOOKMARK" {
            assert!(!is_initial_events_end(&e));
            continue;
        }
        assert_eq!(e["object"]["metadata"]["name"], n);
    }
    // kube's watch-list parameters are accepted too.
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let mut kw = cms
        .watch(&WatchParams::default().initial_events(), "")
        .await
        .unwrap()
        .boxed();
    let mut names = Vec::new();
    while names.len() < 3 {
        match next(&mut kw).await.unwrap().unwrap() {
            WatchEvent::Added(o) => names.push(o.metadata.name.unwrap()),
            WatchEvent::Bookmark(b) => assert!(
                !b.metadata
                    .annotations
                    .contains_key("k8s.io/initial-events-end")
            ),
            e => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(sim.faults().counters().watch_lists_ignored, 3);
}

#[tokio::test]
async fn stripped_resource_versions_in_lists_and_watch_events() {
    let sim = common::sim().await;
    let rv = create(&sim, "a").await;
    sim.faults().strip_resource_versions(true);
    // LIST: items lose their RV, the list keeps its own (plain and paged).
    for q in ["", "?limit=1", "?resourceVersion=0"] {
        let (status, l) =
            common::get_json(&sim, &format!("/api/v1/namespaces/default/configmaps{q}")).await;
        assert_eq!(status, 200);
        assert_eq!(l["metadata"]["resourceVersion"], rv.to_string(), "{q}");
        let item = &l["items"][0];
        assert_eq!(item["metadata"]["name"], "a");
        assert!(
            item["metadata"].get("resourceVersion").is_none(),
            "{q}: {item}"
        );
        assert!(item["metadata"]["uid"].is_string(), "the rest is intact");
        assert!(
            item.get("kind").is_none(),
            "built-in list items stay without kind"
        );
    }
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let l = cms.list(&ListParams::default()).await.unwrap();
    assert_eq!(l.metadata.resource_version, Some(rv.to_string()));
    assert_eq!(l.items[0].metadata.resource_version, None);
    // WATCH: ADDED (initial and live), MODIFIED and DELETED lose it; the object is intact.
    let (_, mut w) = raw_watch(
        &sim,
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=0",
    )
    .await;
    let e = next_event(&mut w).await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("a"))
    );
    assert!(
        e["object"]["metadata"].get("resourceVersion").is_none(),
        "{e}"
    );
    assert_eq!(e["object"]["kind"], "ConfigMap");
    create(&sim, "b").await;
    cms.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "w"}})),
    )
    .await
    .unwrap();
    cms.delete("b", &Default::default()).await.unwrap();
    for ty in ["ADDED", "MODIFIED", "DELETED"] {
        let e = next_event(&mut w).await;
        assert_eq!(
            (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
            (Some(ty), Some("b"))
        );
        assert!(
            e["object"]["metadata"].get("resourceVersion").is_none(),
            "{e}"
        );
    }
    // Objects returned by writes and GET keep it; so does the store.
    let got = cms.get("a").await.unwrap();
    assert_eq!(got.metadata.resource_version, Some(rv.to_string()));
    assert!(sim.faults().counters().objects_without_resource_version >= 8);
    sim.faults().strip_resource_versions(false);
    let l = cms.list(&ListParams::default()).await.unwrap();
    assert_eq!(l.items[0].metadata.resource_version, Some(rv.to_string()));
}

#[tokio::test]
async fn stripped_resource_versions_keep_bookmarks() {
    let sim = Sim::start(SimConfig {
        bookmark_interval: Duration::from_millis(10),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let rv = create(&sim, "a").await;
    let rv_b = create(&sim, "b").await;
    sim.faults().strip_resource_versions(true);
    let (_, mut w) = raw_watch(
        &sim,
        &format!("/api/v1/namespaces/default/configmaps?watch=true&allowWatchBookmarks=true&resourceVersion={rv}"),
    )
    .await;
    let e = next_event(&mut w).await;
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["metadata"].get("resourceVersion"), None);
    // A bookmark goes out once the cache is past the RV the watch started at.
    let e = next_event(&mut w).await;
    assert_eq!(e["type"], "BOOKMARK");
    assert_eq!(e["object"]["metadata"]["resourceVersion"], rv_b.to_string());
}

#[tokio::test]
async fn throttle_answers_429_with_retry_after_and_a_status() {
    let sim = common::sim().await;
    create(&sim, "a").await;
    // The next two LIST or WATCH requests on configmaps.
    sim.faults()
        .throttle(Some("configmaps"), &[Verb::List, Verb::Watch], Some(2), 3);
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
        Some("3")
    );
    let s = r.json();
    assert_eq!(
        (s["kind"].as_str(), s["reason"].as_str(), s["code"].as_u64()),
        (Some("Status"), Some("TooManyRequests"), Some(429))
    );
    assert_eq!(s["details"]["retryAfterSeconds"], 3);
    // Other resources and verbs are not affected.
    assert_eq!(
        raw(
            &sim,
            "GET",
            "/api/v1/namespaces/default/pods",
            &[],
            Bytes::new()
        )
        .await
        .status,
        200
    );
    assert_eq!(
        raw(
            &sim,
            "GET",
            "/api/v1/namespaces/default/configmaps/a",
            &[],
            Bytes::new()
        )
        .await
        .status,
        200
    );
    let cms: Api<ConfigMap> = Api::namespaced(common::client_without_retry(&sim), "default");
    match cms.watch(&WatchParams::default(), "0").await {
        Err(e) => assert_eq!(status_code(e), 429),
        Ok(_) => panic!("the watch should be throttled"),
    }
    assert!(
        cms.list(&ListParams::default()).await.is_ok(),
        "two were throttled, not three"
    );
    let c = sim.faults().counters();
    assert_eq!((c.throttled, c.lists_failed, c.watches_failed), (2, 1, 1));

    // Every request of any verb until cleared.
    sim.faults().throttle(None, &[], None, 1);
    for _ in 0..5 {
        assert_eq!(
            status_code(cms.list(&ListParams::default()).await.unwrap_err()),
            429
        );
    }
    assert_eq!(
        status_code(
            cms.create(&PostParams::default(), &cm("x"))
                .await
                .unwrap_err()
        ),
        429
    );
    assert_eq!(sim.faults().counters().throttled, 8);
    sim.faults().clear();
    assert!(cms.list(&ListParams::default()).await.is_ok());
    // kube's default client honours Retry-After: 1 and retries: about a second later.
    sim.faults()
        .throttle(Some("configmaps"), &[Verb::List], Some(1), 1);
    let retrying: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let before = sim.requests().count("configmaps", Verb::List);
    assert!(retrying.list(&ListParams::default()).await.is_ok());
    let t = sim.requests().arrivals("configmaps", Verb::List);
    assert_eq!(t.len() as u64, before + 2);
    let gap = t[t.len() - 1] - t[t.len() - 2];
    assert!(gap >= Duration::from_millis(500), "retried after {gap:?}");
}

#[tokio::test]
async fn request_counts_by_verb_and_arrival_times() {
    let sim = common::sim().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(sim.client(), "default");
    let t0 = std::time::Instant::now();
    cms.list(&ListParams::default()).await.unwrap();
    pods.list(&ListParams::default()).await.unwrap();
    let _w = cms.watch(&WatchParams::default(), "0").await.unwrap();
    cms.list(&ListParams::default()).await.unwrap();
    let t1 = std::time::Instant::now();
    let req = sim.requests();
    assert_eq!(req.count_verb(Verb::List), 3);
    assert_eq!(req.count_verb(Verb::Watch), 1);
    let lists = req.arrivals("configmaps", Verb::List);
    assert_eq!(lists.len(), 2);
    assert!(t0 <= lists[0] && lists[0] <= lists[1] && lists[1] <= t1);
    let both = req.arrivals_of("configmaps", &[Verb::List, Verb::Watch]);
    assert_eq!(both.len(), 3);
    assert!(both.windows(2).all(|w| w[0] <= w[1]), "oldest first");
    assert_eq!(both[0], lists[0]);
    assert_eq!(both[2], lists[1]);
    req.reset();
    assert!(req.arrivals("configmaps", Verb::List).is_empty());
    assert_eq!(req.count_verb(Verb::List), 0);
}

#[tokio::test]
async fn control_endpoint_drives_the_misbehaving_server_faults() {
    let sim = common::sim().await;
    create(&sim, "a").await;
    let post = |p: &'static str| raw(&sim, "POST", p, &[], Bytes::new());
    let watch = "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=0";
    let watch_list = "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
    let list = "/api/v1/namespaces/default/configmaps";
    let get = |p: &'static str| raw(&sim, "GET", p, &[], Bytes::new());

    assert_eq!(post("/sim/faults/end-watches").await.status, 200);
    let (status, mut w) = raw_watch(&sim, watch).await;
    assert_eq!(status, 200);
    assert!(lines_until_end(&mut w).await.is_empty());
    assert_eq!(post("/sim/faults/end-watches?on=false").await.status, 200);

    assert_eq!(post("/sim/faults/expire-every-watch").await.status, 200);
    assert_eq!(get(watch).await.status, 410);
    assert_eq!(get(list).await.status, 200);
    assert_eq!(
        post("/sim/faults/expire-every-watch?mode=event")
            .await
            .status,
        200
    );
    let (status, mut w) = raw_watch(&sim, watch).await;
    assert_eq!(status, 200);
    assert_eq!(next_event(&mut w).await["object"]["code"], 410);
    assert_eq!(
        post("/sim/faults/expire-every-watch?mode=bogus")
            .await
            .status,
        400
    );
    assert_eq!(
        post("/sim/faults/expire-every-watch?mode=off").await.status,
        200
    );

    assert_eq!(post("/sim/faults/reject-watch-list").await.status, 200);
    assert_eq!(get(watch_list).await.status, 422);
    assert_eq!(
        post("/sim/faults/reject-watch-list?on=false").await.status,
        200
    );
    assert_eq!(post("/sim/faults/ignore-watch-list").await.status, 200);
    let (_, mut w) = raw_watch(&sim, watch_list).await;
    assert_eq!(next_event(&mut w).await["object"]["metadata"]["name"], "a");
    assert_eq!(
        post("/sim/faults/ignore-watch-list?on=false").await.status,
        200
    );

    assert_eq!(
        post("/sim/faults/strip-resource-versions").await.status,
        200
    );
    let l = get(list).await.json();
    assert!(l["items"][0]["metadata"].get("resourceVersion").is_none());
    assert_eq!(
        post("/sim/faults/strip-resource-versions?on=false")
            .await
            .status,
        200
    );
    assert!(get(list).await.json()["items"][0]["metadata"]["resourceVersion"].is_string());

    assert_eq!(
        post("/sim/faults/throttle?verbs=list,watch&n=2&retryAfter=4&resource=configmaps")
            .await
            .status,
        200
    );
    let r = get(list).await;
    assert_eq!(r.status, 429);
    assert_eq!(
        r.headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("4")
    );
    assert_eq!(get(watch).await.status, 429);
    assert_eq!(get(list).await.status, 200);
    assert_eq!(post("/sim/faults/throttle?n=all").await.status, 200);
    assert_eq!(
        get("/api/v1/namespaces/default/configmaps/a").await.status,
        429
    );
    assert_eq!(post("/sim/faults/throttle?verbs=bogus").await.status, 400);
    assert_eq!(post("/sim/faults/clear").await.status, 200);
    assert_eq!(get(list).await.status, 200);

    let c = get("/sim/faults").await.json();
    assert_eq!(c["watchesEndedAtOnce"], 1);
    assert_eq!(c["watchesRefusedExpired"], 2);
    assert_eq!(c["watchListsRejected"], 1);
    assert_eq!(c["watchListsIgnored"], 1);
    assert_eq!(c["objectsWithoutResourceVersion"], 1);
    assert_eq!(c["throttled"], 3);
}

#[tokio::test]
async fn clear_turns_every_switch_off() {
    let sim = common::sim().await;
    create(&sim, "a").await;
    let f = sim.faults();
    f.end_watches_at_once(true);
    f.reject_watch_list(true);
    f.ignore_watch_list(true);
    f.strip_resource_versions(true);
    f.throttle(None, &[Verb::Get], None, 1);
    f.clear();
    let cms: Api<ConfigMap> = Api::namespaced(common::client_without_retry(&sim), "default");
    assert!(cms.get("a").await.is_ok());
    let l = cms.list(&ListParams::default()).await.unwrap();
    assert!(l.items[0].metadata.resource_version.is_some());
    let mut wl = cms
        .watch(&WatchParams::default().initial_events(), "")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        next(&mut wl).await,
        Some(Ok(WatchEvent::Added(_)))
    ));
    match next(&mut wl).await {
        Some(Ok(WatchEvent::Bookmark(b))) => {
            assert!(
                b.metadata
                    .annotations
                    .contains_key("k8s.io/initial-events-end")
            )
        }
        other => panic!("expected the initial-events-end bookmark, got {other:?}"),
    }
    f.expire_every_watch(Some(kinformer_sim::ExpireMode::Http));
    f.clear();
    assert!(cms.watch(&WatchParams::default(), "0").await.is_ok());
}

/// A kube-apiserver restart: down, every connection ends and new ones are reset; objects
/// change meanwhile through the direct API; back up on the same address, the objects are all
/// there but a watch from an RV before the restart gets 410, one from the new start works.
#[tokio::test]
async fn restart_refuses_connections_then_serves_the_same_objects_with_a_fresh_watch_cache() {
    let sim = common::sim().await;
    let old = create(&sim, "a").await;
    let cms: Api<ConfigMap> = Api::namespaced(common::client_without_retry(&sim), "default");
    let mut w = cms
        .watch(&WatchParams::default(), &old.to_string())
        .await
        .unwrap()
        .boxed();
    common::wait_open_watches(&sim, 1).await;

    sim.faults().go_down();
    assert!(sim.faults().is_down());
    match next(&mut w).await {
        None | Some(Err(_)) => {}
        Some(Ok(e)) => panic!("the watch should end with the server, got {e:?}"),
    }
    match cms.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => panic!("a down server answers nothing, got {s:?}"),
        Err(_) => {}
        Ok(_) => panic!("a down server answers nothing"),
    }
    sim.create_object(
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "during-outage"}}),
    )
    .unwrap();
    let c = sim.faults().counters();
    assert_eq!(c.outages, 1);
    assert!(c.connections_refused >= 1, "{c:?}");

    let start = sim.faults().come_back();
    assert_eq!(start, sim.resource_version());
    let names: Vec<String> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(names, ["a", "during-outage"]);
    let mut w = cms
        .watch(&WatchParams::default(), &old.to_string())
        .await
        .unwrap()
        .boxed();
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Error(s) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        e => panic!("expected ERROR 410, got {e:?}"),
    }
    let mut w = cms
        .watch(&WatchParams::default(), &start.to_string())
        .await
        .unwrap()
        .boxed();
    create(&sim, "b").await;
    assert!(matches!(next(&mut w).await, Some(Ok(WatchEvent::Added(_)))));

    // Sim::restart is the same, in one call.
    let before = sim.resource_version();
    let rv = sim.restart(Duration::from_millis(20)).await;
    assert_eq!(rv, before);
    assert!(!sim.faults().is_down());
    assert_eq!(sim.faults().counters().outages, 2);
    assert!(cms.list(&ListParams::default()).await.is_ok());
}
