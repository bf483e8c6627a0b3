//! Watch and list details as kube-apiserver 1.34's watch cache serves them: the
//! initial-events-end bookmark of watches from "" and "0", bookmark timing, and lists at an
//! old resourceVersion.

use crate::common;

use std::time::Duration;

use crate::common::{Chunk, get_json, next, next_event, raw, raw_watch};
use futures::Stream;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kinformer_sim::{Sim, SimConfig};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
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
    // Each round sees the objects of the rounds before.
    for (existing, rv) in [(1, ""), (2, "0")] {
        let (_, mut w) = raw_watch(&sim, &format!("{CMS}?watch=true&resourceVersion={rv}")).await;
        for _ in 0..existing {
            assert_eq!(next_event(&mut w).await["type"], "ADDED");
        }
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

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// a, b and m exist at the returned RV; then b is deleted, m modified and c created.
async fn history(sim: &Sim) -> u64 {
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    for n in ["a", "b", "m"] {
        create(sim, n).await;
    }
    let at = sim.resource_version();
    cms.delete("b", &DeleteParams::default()).await.unwrap();
    cms.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "new"}})),
    )
    .await
    .unwrap();
    create(sim, "c").await;
    at
}

#[tokio::test]
async fn lists_at_an_exact_old_resource_version_return_the_state_then() {
    // ListFromCacheSnapshot (beta, on in 1.34): `Exact`, the legacy exact match (a limit with
    // an RV) and continue tokens read the watch cache's snapshot at that RV.
    let sim = common::sim().await;
    let at = history(&sim).await;
    for q in [
        format!("resourceVersion={at}&resourceVersionMatch=Exact"),
        format!("resourceVersion={at}&limit=10"),
    ] {
        let (status, l) = get_json(&sim, &format!("{CMS}?{q}")).await;
        assert_eq!(status, 200, "{q}: {l}");
        assert_eq!(names(&l), ["a", "b", "m"], "{q}");
        assert_eq!(l["items"][2]["data"]["k"], "v", "{q}: m as it was");
        assert_eq!(l["metadata"]["resourceVersion"], at.to_string(), "{q}");
        assert!(l["metadata"].get("continue").is_none(), "{q}");
    }
    // Paged at that RV: every page is of the same state, at the same RV.
    let mut got = Vec::new();
    let (_, mut page) = get_json(&sim, &format!("{CMS}?limit=1&resourceVersion={at}")).await;
    loop {
        assert_eq!(page["metadata"]["resourceVersion"], at.to_string());
        got.extend(names(&page));
        let Some(token) = page["metadata"]["continue"].as_str().map(str::to_string) else {
            break;
        };
        assert!(got.len() < 10, "runaway pages");
        page = get_json(&sim, &format!("{CMS}?limit=1&continue={token}"))
            .await
            .1;
    }
    assert_eq!(got, ["a", "b", "m"]);
    // A label selector that matches nothing is still read at that RV.
    let (_, l) = get_json(
        &sim,
        &format!("{CMS}?limit=1&resourceVersion={at}&labelSelector=x%3Dy"),
    )
    .await;
    assert_eq!(l["metadata"]["resourceVersion"], at.to_string());
    assert_eq!(names(&l), Vec::<String>::new());
    // NotOlderThan (paged or not) and a plain RV read the latest state.
    let now = sim.resource_version();
    for q in [
        format!("resourceVersion={at}"),
        format!("resourceVersion={at}&resourceVersionMatch=NotOlderThan"),
        format!("resourceVersion={at}&resourceVersionMatch=NotOlderThan&limit=10"),
    ] {
        let (_, l) = get_json(&sim, &format!("{CMS}?{q}")).await;
        assert_eq!(names(&l), ["a", "c", "m"], "{q}");
        assert_eq!(l["metadata"]["resourceVersion"], now.to_string(), "{q}");
    }
    // A GET at an RV has no exact form (`Cacher.Get`: not older than it): the object now.
    let (status, _) = get_json(&sim, &format!("{CMS}/b?resourceVersion={at}")).await;
    assert_eq!(status, 404);
    let (_, m) = get_json(&sim, &format!("{CMS}/m?resourceVersion={at}")).await;
    assert_eq!(m["data"]["k"], "new");
    sim.shutdown().await;
}

#[tokio::test]
async fn lists_at_a_resource_version_older_than_the_window_get_410() {
    // Past the cache's snapshots the read goes to etcd, which answers a compacted revision with
    // `interpretListError`'s 410; the sim's window stands for both.
    let sim = Sim::start(SimConfig {
        watch_cache_size: 3,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let at = history(&sim).await;
    let (_, first) = get_json(&sim, &format!("{CMS}?limit=1&resourceVersion={at}")).await;
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    for i in 0..3 {
        cms.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": format!("{i}")}})),
        )
        .await
        .unwrap();
    }
    for q in [
        format!("resourceVersion={at}&resourceVersionMatch=Exact"),
        format!("resourceVersion={at}&limit=10"),
    ] {
        let r = raw(&sim, "GET", &format!("{CMS}?{q}"), &[], "").await;
        assert_eq!(
            (r.status, r.json()),
            (
                410,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "The resourceVersion for the provided list is too old.",
                    "reason": "Expired", "code": 410})
            ),
            "{q}"
        );
    }
    // An expired continue token: etcd3's handleCompactedErrorForPaging hands out a token that
    // goes on at the latest RV (`"rv":-1`), from the same key.
    let r = raw(
        &sim,
        "GET",
        &format!("{CMS}?limit=1&continue={token}"),
        &[],
        "",
    )
    .await;
    assert_eq!(r.status, 410);
    let st = r.json();
    assert_eq!(st["reason"], "Expired");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .starts_with("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response")
    );
    let latest = st["metadata"]["continue"]
        .as_str()
        .expect("a continue token");
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(latest)
        .unwrap();
    assert_eq!(
        String::from_utf8(decoded).unwrap(),
        r#"{"v":"meta.k8s.io/v1","rv":-1,"start":"a\u0000"}"#
    );
    let (status, rest) = get_json(&sim, &format!("{CMS}?continue={latest}")).await;
    assert_eq!(status, 200, "{rest}");
    assert_eq!(names(&rest), ["c", "m"], "the rest, as it is now");
    assert_eq!(
        rest["metadata"]["resourceVersion"],
        sim.resource_version().to_string()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_watch_from_before_the_oldest_kept_event_gets_410_naming_the_oldest_rv() {
    // getAllEventsSinceLocked: once events left the window, the oldest RV a watch may start
    // from is one less than the oldest event kept, whatever happened to other kinds.
    let sim = Sim::start(SimConfig {
        watch_cache_size: 2,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(sim.client(), "default");
    let mut cm_rvs = Vec::new();
    let mut secret_rvs = Vec::new();
    for i in 0..3 {
        cm_rvs.push(create(&sim, &format!("c{i}")).await);
        let s = secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": format!("s{i}")}})).unwrap(),
            )
            .await
            .unwrap();
        secret_rvs.push(s.metadata.resource_version.unwrap().parse::<u64>().unwrap());
    }
    // The window keeps c1 and c2: the oldest watchable RV is c1's minus one, s0's.
    let oldest = cm_rvs[1] - 1;
    assert_eq!(oldest, secret_rvs[0]);
    let (_, mut w) = raw_watch(
        &sim,
        &format!("{CMS}?watch=true&resourceVersion={}", cm_rvs[0]),
    )
    .await;
    let e = next_event(&mut w).await;
    assert_eq!(e["type"], "ERROR");
    assert_eq!(
        e["object"]["message"],
        format!("too old resource version: {} ({oldest})", cm_rvs[0])
    );
    assert_eq!(e["object"]["code"], 410);
    let (_, mut w) = raw_watch(&sim, &format!("{CMS}?watch=true&resourceVersion={oldest}")).await;
    for n in ["c1", "c2"] {
        assert_eq!(next_event(&mut w).await["object"]["metadata"]["name"], n);
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn a_page_that_fills_its_limit_has_a_token_while_any_item_follows_matching_or_not() {
    // Cacher.GetList: `hasMoreListItems` is about the items under the prefix, not the ones the
    // selector keeps; `remainingItemCount` is left out with a selector.
    let sim = common::sim().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    for (n, label) in [("a", "y"), ("b", "n"), ("c", "n"), ("d", "y")] {
        let mut c = cm(n, "v");
        c.metadata.labels = Some([("x".to_string(), label.to_string())].into());
        cms.create(&PostParams::default(), &c).await.unwrap();
    }
    let at = sim.resource_version();
    let (_, p1) = get_json(&sim, &format!("{CMS}?limit=2&labelSelector=x%3Dy")).await;
    assert_eq!(names(&p1), ["a", "d"], "the page fills up at the last item");
    assert!(p1["metadata"].get("continue").is_none(), "{p1}");
    let (_, p1) = get_json(&sim, &format!("{CMS}?limit=1&labelSelector=x%3Dn")).await;
    assert_eq!(names(&p1), ["b"]);
    let token = p1["metadata"]["continue"].as_str().expect("a token");
    assert!(p1["metadata"].get("remainingItemCount").is_none());
    let (_, p2) = get_json(
        &sim,
        &format!("{CMS}?limit=1&labelSelector=x%3Dn&continue={token}"),
    )
    .await;
    assert_eq!(names(&p2), ["c"]);
    // Only d follows, and it does not match: still a token, then an empty last page.
    let token = p2["metadata"]["continue"].as_str().expect("a token");
    let (_, p3) = get_json(
        &sim,
        &format!("{CMS}?limit=1&labelSelector=x%3Dn&continue={token}"),
    )
    .await;
    assert_eq!(names(&p3), Vec::<String>::new());
    assert!(p3["metadata"].get("continue").is_none());
    assert_eq!(p3["metadata"]["resourceVersion"], at.to_string());
    // Without a selector the count of what follows is given.
    let (_, p) = get_json(&sim, &format!("{CMS}?limit=1")).await;
    assert_eq!(p["metadata"]["remainingItemCount"], 3);
    sim.shutdown().await;
}
