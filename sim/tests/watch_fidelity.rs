//! Watch and list details as kube-apiserver 1.34's watch cache serves them: the
//! initial-events-end bookmark of watches from "" and "0", bookmark timing, and lists at an
//! old resourceVersion.

mod common;

use std::time::Duration;

use common::{Chunk, next, next_event, raw_watch};
use futures::Stream;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kinformer_sim::{Sim, SimConfig};
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use tokio::time::Instant;

fn cm(name: &str, v: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": v}})).unwrap()
}

async fn create(sim: &Sim, name: &str) -> u64 {
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let c = cms
        .create(&PostParams::default(), &cm(name, "v"))
        .await
        .unwrap();
    c.metadata.resource_version.unwrap().parse().unwrap()
}

fn is_initial_events_end(e: &Value) -> bool {
    e["type"] == "BOOKMARK"
        && e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

/// No line at all within `d` (an absence check, not a synchronisation).
async fn silent_for<S: Stream<Item = Chunk> + Unpin>(s: &mut S, d: Duration) {
    use futures::StreamExt;
    if let Ok(c) = tokio::time::timeout(d, s.next()).await {
        panic!("expected nothing for {d:?}, got {c:?}");
    }
}

#[tokio::test]
async fn a_watch_from_unset_or_zero_with_bookmarks_ends_its_initial_events_with_the_annotated_bookmark()
 {
    // SetListOptionsDefaults makes it a watch-list; the cacher sends the bookmark annotated
    // `k8s.io/initial-events-end` at the cache's RV after the synthetic ADDED events.
    let sim = common::sim().await;
    create(&sim, "a").await;
    create(&sim, "b").await;
    let mut names = vec!["a".to_string(), "b".to_string()];
    for rv in ["", "0"] {
        let at = sim.resource_version();
        let (status, mut w) = raw_watch(
            &sim,
            &format!("{CMS}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}"),
        )
        .await;
        assert_eq!(status, 200);
        for n in &names {
            let e = next_event(&mut w).await;
            assert_eq!(
                (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
                (Some("ADDED"), Some(n.as_str())),
                "rv {rv:?}"
            );
        }
        let b = next_event(&mut w).await;
        assert!(is_initial_events_end(&b), "rv {rv:?}: {b}");
        assert_eq!(
            b["object"]["metadata"]["resourceVersion"],
            at.to_string(),
            "rv {rv:?}"
        );
        assert_eq!(b["object"]["kind"], "ConfigMap");
        names.push(format!("c{}", rv.len()));
        let c = create(&sim, &names[names.len() - 1]).await;
        let e = next_event(&mut w).await;
        assert_eq!(e["type"], "ADDED", "rv {rv:?}");
        assert_eq!(e["object"]["metadata"]["resourceVersion"], c.to_string());
    }
    // Through kube: the same bookmark, as kube's watcher sees it.
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let mut w = futures::StreamExt::boxed(cms.watch(&WatchParams::default(), "0").await.unwrap());
    let mut added = 0;
    loop {
        match next(&mut w).await.unwrap().unwrap() {
            WatchEvent::Added(_) => added += 1,
            WatchEvent::Bookmark(b) => {
                assert!(
                    b.metadata
                        .annotations
                        .contains_key("k8s.io/initial-events-end")
                );
                break;
            }
            e => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(added, 4);
    sim.shutdown().await;
}

#[tokio::test]
async fn no_initial_events_end_bookmark_without_allow_watch_bookmarks() {
    // The defaulted watch-list still sends the initial state, but the end bookmark goes only to
    // a client that allows bookmarks (`isListWatchRequest`).
    let sim = common::sim().await;
    create(&sim, "a").await;
    let mut existing = 1;
    for rv in ["", "0"] {
        let (_, mut w) = raw_watch(&sim, &format!("{CMS}?watch=true&resourceVersion={rv}")).await;
        for _ in 0..existing {
            assert_eq!(next_event(&mut w).await["type"], "ADDED");
        }
        existing += 1;
        let name = format!("x{}", rv.len());
        create(&sim, &name).await;
        let e = next_event(&mut w).await;
        assert_eq!(
            (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
            (Some("ADDED"), Some(name.as_str())),
            "rv {rv:?}: no bookmark in between"
        );
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn servers_without_watch_list_send_no_end_bookmark_to_a_watch_from_zero() {
    // The ignore_watch_list and reject_watch_list faults play servers without the WatchList
    // feature: SetListOptionsDefaults does nothing there.
    let sim = common::sim().await;
    create(&sim, "a").await;
    let mut n = 0;
    for fault in ["ignore", "reject"] {
        match fault {
            "ignore" => sim.faults().ignore_watch_list(true),
            _ => {
                sim.faults().ignore_watch_list(false);
                sim.faults().reject_watch_list(true);
            }
        }
        for rv in ["", "0"] {
            let (status, mut w) = raw_watch(
                &sim,
                &format!("{CMS}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}"),
            )
            .await;
            assert_eq!(status, 200);
            for _ in 0..=n {
                assert_eq!(next_event(&mut w).await["type"], "ADDED", "{fault} {rv:?}");
            }
            n += 1;
            let name = format!("n{n}");
            create(&sim, &name).await;
            let e = next_event(&mut w).await;
            assert_eq!(
                (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
                (Some("ADDED"), Some(name.as_str())),
                "{fault} {rv:?}: no end bookmark"
            );
        }
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn a_bookmark_arrives_two_seconds_before_the_watch_times_out() {
    // cacheWatcher.nextBookmarkTime: the next bookmark is due after a minute, or 2 s before the
    // deadline if that is sooner. With the default (minute) period, a 3 s watch gets exactly
    // one bookmark, about a second in, then ends.
    let sim = common::sim().await;
    let a = create(&sim, "a").await;
    let opened = Instant::now();
    let (_, mut w) = raw_watch(
        &sim,
        &format!("{CMS}?watch=true&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion={a}"),
    )
    .await;
    // The cache moves past the watch's start, so the bookmark is not withheld.
    let b = create(&sim, "b").await;
    let e = next_event(&mut w).await;
    assert_eq!(e["type"], "ADDED");
    let e = next_event(&mut w).await;
    let at = opened.elapsed();
    assert_eq!(e["type"], "BOOKMARK", "{e}");
    assert!(!is_initial_events_end(&e));
    assert_eq!(e["object"]["metadata"]["resourceVersion"], b.to_string());
    assert!(
        at >= Duration::from_millis(900) && at < Duration::from_millis(2500),
        "the bookmark came {at:?} after the watch opened"
    );
    match next(&mut w).await {
        Some(Chunk::End(rest)) => assert_eq!(rest, ""),
        other => panic!("expected the end of the stream, got {other:?}"),
    }
    assert!(opened.elapsed() >= Duration::from_millis(2900));
    sim.shutdown().await;
}

#[tokio::test]
async fn a_watch_of_under_two_seconds_gets_no_bookmark() {
    // nextBookmarkTime: 2 s before a deadline that is less than 2 s away is already past, so the
    // watcher is never queued for a bookmark, however short the period.
    let sim = Sim::start(SimConfig {
        bookmark_interval: Duration::from_millis(20),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let a = create(&sim, "a").await;
    let (_, mut w) = raw_watch(
        &sim,
        &format!("{CMS}?watch=true&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion={a}"),
    )
    .await;
    create(&sim, "b").await;
    assert_eq!(next_event(&mut w).await["type"], "ADDED");
    match next(&mut w).await {
        Some(Chunk::End(_)) => {}
        other => panic!("expected the end of the stream and no bookmark, got {other:?}"),
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn periodic_bookmarks_wait_for_the_cache_to_move_past_the_start() {
    // cacheWatcher.process passes on a bookmark only when its RV is past the one the watch
    // started at: a watch from the current RV hears nothing until something changes.
    let sim = Sim::start(SimConfig {
        bookmark_interval: Duration::from_millis(20),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let a = create(&sim, "a").await;
    let (_, mut w) = raw_watch(
        &sim,
        &format!("{CMS}?watch=true&allowWatchBookmarks=true&resourceVersion={a}"),
    )
    .await;
    silent_for(&mut w, Duration::from_millis(300)).await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    let p = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})).unwrap(),
        )
        .await
        .unwrap();
    let e = next_event(&mut w).await;
    assert_eq!(e["type"], "BOOKMARK");
    let brv: u64 = e["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let prv: u64 = p.metadata.resource_version.unwrap().parse().unwrap();
    assert!(brv >= prv && brv > a, "bookmark at {brv}, pod at {prv}");
    sim.shutdown().await;
}
