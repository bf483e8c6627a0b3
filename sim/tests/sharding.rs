//! KEP-5866 sharded LIST and WATCH (`shardSelector`, the `ShardedListAndWatch` gate) over
//! HTTP, as kube-apiserver serves them: complementary shards partition a collection, lists
//! echo the selector in `metadata.shardInfo`, pages keep the filter, watches and watch-list
//! initial events carry only the shard's objects (bookmarks pass), a bad selector is a 500
//! without a reason, and with the gate off the parameter is ignored.

use crate::common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Chunk, get_json, next_event, raw, raw_watch};
use bytes::Bytes;
use futures::Stream;
use kinformer_sim::{Sim, SimConfig, Verb};
use serde_json::{Value, json};

const TWO_TO_64: u128 = 1 << 64;

/// FNV-1a 64, written here again so the test does not trust the server's.
fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The bound as the selector writes it: 16 digits, or 2^64's 17.
fn bound(x: u128) -> String {
    if x == TWO_TO_64 {
        "0x10000000000000000".to_string()
    } else {
        format!("0x{x:016x}")
    }
}

/// Shard `i` of `n` over `key` in canonical form, with its range.
fn shard(key: &str, i: u128, n: u128) -> (String, u128, u128) {
    let (start, end) = (TWO_TO_64 / n * i, TWO_TO_64 / n * (i + 1));
    (
        format!(
            "shardRange(object.metadata.{key}, '{}', '{}')",
            bound(start),
            bound(end)
        ),
        start,
        end,
    )
}

/// Percent-encodes a query value.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn with_shard(path: &str, selector: &str) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}shardSelector={}", enc(selector))
}

/// `namespace/name` of each item.
fn keys(list: &Value) -> BTreeSet<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().expect("name")
            )
        })
        .collect()
}

const NAMESPACES: [&str; 4] = ["alpha", "beta", "gamma", "delta"];

/// 48 config maps in four namespaces; returns their `namespace/name -> uid`.
fn seed(sim: &Sim) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for i in 0..48 {
        let ns = NAMESPACES[i % 4];
        let o = sim
            .create_object(
                "configmaps",
                Some(ns),
                json!({"metadata": {"name": format!("cm-{i:02}")}, "data": {"i": i.to_string()}}),
            )
            .expect("seeded");
        out.push((
            format!("{ns}/cm-{i:02}"),
            o["metadata"]["uid"].as_str().expect("uid").to_string(),
        ));
    }
    out
}

async fn list_ok(sim: &Sim, path: &str) -> Value {
    let (status, v) = get_json(sim, path).await;
    assert_eq!(status, 200, "{path}: {v}");
    v
}

#[tokio::test]
async fn complementary_uid_shards_partition_the_collection() {
    let sim = common::sim().await;
    let seeded = seed(&sim);
    let all = list_ok(&sim, "/api/v1/configmaps").await;
    assert!(
        all["metadata"].get("shardInfo").is_none(),
        "no selector, no shardInfo: {}",
        all["metadata"]
    );
    let everything = keys(&all);
    for n in [2, 4] {
        let mut union = BTreeSet::new();
        for i in 0..n {
            let (sel, start, end) = shard("uid", i, n);
            let v = list_ok(&sim, &with_shard("/api/v1/configmaps", &sel)).await;
            assert_eq!(v["metadata"]["shardInfo"], json!({"selector": sel}));
            let got = keys(&v);
            // Exactly the seeded objects whose UID hashes into the range (the namespaces'
            // own objects are config maps too only if seeded, so compare on the seeded ones).
            let want: BTreeSet<String> = seeded
                .iter()
                .filter(|(_, uid)| (start..end).contains(&u128::from(fnv1a(uid))))
                .map(|(k, _)| k.clone())
                .collect();
            assert_eq!(got, want, "shard {i}/{n}");
            assert!(union.is_disjoint(&got), "shards overlap");
            union.extend(got);
        }
        assert_eq!(union, everything, "{n} shards cover the collection");
    }
    // A namespaced list is sharded within its namespace.
    let (sel, ..) = shard("uid", 0, 2);
    let v = list_ok(
        &sim,
        &with_shard("/api/v1/namespaces/alpha/configmaps", &sel),
    )
    .await;
    let whole = list_ok(&sim, &with_shard("/api/v1/configmaps", &sel)).await;
    let alpha: BTreeSet<String> = keys(&whole)
        .into_iter()
        .filter(|k| k.starts_with("alpha/"))
        .collect();
    assert_eq!(keys(&v), alpha);
}

#[tokio::test]
async fn namespace_shards_keep_each_namespace_whole_and_cluster_scoped_objects_hash_the_empty_namespace()
 {
    let sim = common::sim().await;
    seed(&sim);
    let everything = keys(&list_ok(&sim, "/api/v1/configmaps").await);
    let mut union = BTreeSet::new();
    for i in 0..4 {
        let (sel, start, end) = shard("namespace", i, 4);
        let got = keys(&list_ok(&sim, &with_shard("/api/v1/configmaps", &sel)).await);
        for k in &got {
            let ns = k.split('/').next().expect("ns");
            assert!(
                (start..end).contains(&u128::from(fnv1a(ns))),
                "{k} in {sel}"
            );
        }
        for ns in NAMESPACES {
            let in_shard = (start..end).contains(&u128::from(fnv1a(ns)));
            assert_eq!(
                got.iter().any(|k| k.starts_with(&format!("{ns}/"))),
                in_shard,
                "{ns} in {sel}"
            );
        }
        union.extend(got);
    }
    assert_eq!(union, everything);
    // Namespaces are cluster-scoped: their namespace is "", whose hash is 0xcbf29ce484222325.
    let hi = "shardRange(object.metadata.namespace, '0xc000000000000000', '0x10000000000000000')";
    let lo = "shardRange(object.metadata.namespace, '0x0000000000000000', '0xc000000000000000')";
    let all_ns = keys(&list_ok(&sim, "/api/v1/namespaces").await);
    assert_eq!(
        keys(&list_ok(&sim, &with_shard("/api/v1/namespaces", hi)).await),
        all_ns
    );
    assert!(
        keys(&list_ok(&sim, &with_shard("/api/v1/namespaces", lo)).await).is_empty(),
        "no namespace outside the shard of \"\""
    );
}

#[tokio::test]
async fn shard_info_echoes_the_canonical_form_and_only_typed_lists_carry_it() {
    let sim = common::sim().await;
    seed(&sim);
    let loose = " ( shardRange( object.metadata.uid ,\"0x0000000000000000\",'0x8000000000000000') ) || shardRange(object.metadata.uid, '0x8000000000000000', \"0x10000000000000000\")  ";
    let v = list_ok(&sim, &with_shard("/api/v1/configmaps", loose)).await;
    assert_eq!(
        v["metadata"]["shardInfo"]["selector"],
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
    );
    assert_eq!(v["items"].as_array().map(Vec::len), Some(48));
    // The PartialObjectMetadataList and Table conversions copy only resourceVersion, continue
    // and remainingItemCount, but the items are the shard's.
    let (sel, ..) = shard("uid", 1, 2);
    let want = keys(&list_ok(&sim, &with_shard("/api/v1/configmaps", &sel)).await);
    let r = raw(
        &sim,
        "GET",
        &with_shard("/api/v1/configmaps", &sel),
        &[(
            "accept",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )],
        Bytes::new(),
    )
    .await;
    let m = r.json();
    assert_eq!(m["kind"], "PartialObjectMetadataList");
    assert!(
        m["metadata"].get("shardInfo").is_none(),
        "{}",
        m["metadata"]
    );
    assert_eq!(keys(&m), want);
    let r = raw(
        &sim,
        "GET",
        &with_shard("/api/v1/configmaps", &sel),
        &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
        Bytes::new(),
    )
    .await;
    let t = r.json();
    assert_eq!(t["kind"], "Table");
    assert!(
        t["metadata"].get("shardInfo").is_none(),
        "{}",
        t["metadata"]
    );
    assert_eq!(t["rows"].as_array().map(Vec::len), Some(want.len()));
}

#[tokio::test]
async fn every_read_path_filters_and_pages_keep_the_filter_across_continue() {
    let sim = common::sim().await;
    seed(&sim);
    let (sel, ..) = shard("uid", 0, 2);
    let base = "/api/v1/configmaps";
    let want = keys(&list_ok(&sim, &with_shard(base, &sel)).await);
    assert!(
        want.len() > 5 && want.len() < 45,
        "a real split: {}",
        want.len()
    );
    let rv = list_ok(&sim, base).await["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    // From the watch cache (rv=0), the latest (consistent), and at an exact RV.
    for q in [
        "resourceVersion=0".to_string(),
        format!("resourceVersion={rv}"),
        format!("resourceVersion={rv}&resourceVersionMatch=Exact"),
        format!("resourceVersion={rv}&resourceVersionMatch=NotOlderThan"),
    ] {
        let v = list_ok(&sim, &with_shard(&format!("{base}?{q}"), &sel)).await;
        assert_eq!(keys(&v), want, "{q}");
        assert_eq!(v["metadata"]["shardInfo"]["selector"], sel.as_str(), "{q}");
    }
    // Pages of 4: every page filtered and echoing the selector; no remainingItemCount, as the
    // predicate is not empty.
    let mut got = BTreeSet::new();
    let mut cont = String::new();
    let mut pages = 0;
    loop {
        let mut path = with_shard(&format!("{base}?limit=4"), &sel);
        if !cont.is_empty() {
            path.push_str(&format!("&continue={}", enc(&cont)));
        }
        let v = list_ok(&sim, &path).await;
        pages += 1;
        let page = keys(&v);
        assert!(page.len() <= 4);
        assert!(page.is_subset(&want), "page {pages} leaks: {page:?}");
        assert_eq!(v["metadata"]["shardInfo"]["selector"], sel.as_str());
        assert!(v["metadata"].get("remainingItemCount").is_none());
        got.extend(page);
        match v["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => cont = c.to_string(),
            _ => break,
        }
    }
    assert_eq!(got, want);
    assert!(pages >= 2, "paged: {pages}");
    // Unsharded pages still count what remains.
    let v = list_ok(&sim, &format!("{base}?limit=4")).await;
    assert!(v["metadata"]["remainingItemCount"].as_u64().is_some());
}

/// Reads a watch until a BOOKMARK at or past `rv`, returning the (type, name) of the other
/// events: everything the server had to send up to `rv`.
async fn events_until<S: Stream<Item = Chunk> + Unpin>(
    w: &mut S,
    rv: u64,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    loop {
        let e = next_event(w).await;
        let ty = e["type"].as_str().expect("type").to_string();
        let meta = &e["object"]["metadata"];
        if ty == "BOOKMARK" {
            let at: u64 = meta["resourceVersion"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .expect("bookmark rv");
            if at >= rv {
                return out;
            }
            continue;
        }
        out.push((ty, meta["name"].as_str().expect("name").to_string()));
    }
}

fn fast_bookmarks() -> SimConfig {
    SimConfig {
        bookmark_interval: Duration::from_millis(100),
        ..SimConfig::default()
    }
}

#[tokio::test]
async fn a_sharded_watch_sees_only_its_shards_events_and_still_gets_bookmarks() {
    let sim = Sim::start(fast_bookmarks()).await.expect("sim");
    let start = sim.resource_version();
    let mut watches = Vec::new();
    for i in 0..2 {
        let (sel, ..) = shard("uid", i, 2);
        // One watch of every namespace (the cacher's unfiltered fast path must not apply),
        // one of a namespace.
        let scope = if i == 0 {
            "/api/v1/configmaps"
        } else {
            "/api/v1/namespaces/default/configmaps"
        };
        let path = with_shard(
            &format!("{scope}?watch=true&allowWatchBookmarks=true&resourceVersion={start}"),
            &sel,
        );
        let (status, w) = raw_watch(&sim, &path).await;
        assert_eq!(status, 200);
        watches.push(w);
    }
    common::wait_open_watches(&sim, 2).await;
    let mut uids = Vec::new();
    for i in 0..20 {
        let o = sim
            .create_object(
                "configmaps",
                Some("default"),
                json!({"metadata": {"name": format!("w-{i:02}")}}),
            )
            .expect("created");
        uids.push((
            format!("w-{i:02}"),
            o["metadata"]["uid"].as_str().expect("uid").to_string(),
        ));
    }
    for (name, _) in uids.iter().take(4) {
        sim.delete_object("configmaps", Some("default"), name)
            .expect("deleted");
    }
    let last = sim.resource_version();
    for (i, w) in watches.iter_mut().enumerate() {
        let (_, start, end) = shard("uid", i as u128, 2);
        let in_shard = |uid: &str| (start..end).contains(&u128::from(fnv1a(uid)));
        let mut want: Vec<(String, String)> = uids
            .iter()
            .filter(|(_, u)| in_shard(u))
            .map(|(n, _)| ("ADDED".to_string(), n.clone()))
            .collect();
        want.extend(
            uids.iter()
                .take(4)
                .filter(|(_, u)| in_shard(u))
                .map(|(n, _)| ("DELETED".to_string(), n.clone())),
        );
        assert!(!want.is_empty() && want.len() < 24, "a real split");
        assert_eq!(events_until(w, last).await, want, "shard {i}");
    }
}

#[tokio::test]
async fn watch_list_initial_events_are_filtered_and_end_with_the_bookmark() {
    let sim = common::sim().await;
    let seeded = seed(&sim);
    for i in 0..2 {
        let (sel, start, end) = shard("uid", i, 2);
        let path = with_shard(
            "/api/v1/configmaps?watch=true&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
            &sel,
        );
        let (status, mut w) = raw_watch(&sim, &path).await;
        assert_eq!(status, 200);
        let mut got = BTreeSet::new();
        loop {
            let e = next_event(&mut w).await;
            if e["type"] == "BOOKMARK" {
                assert_eq!(
                    e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
                    "true"
                );
                break;
            }
            assert_eq!(e["type"], "ADDED");
            let m = &e["object"]["metadata"];
            got.insert(format!(
                "{}/{}",
                m["namespace"].as_str().expect("ns"),
                m["name"].as_str().expect("name")
            ));
        }
        let want: BTreeSet<String> = seeded
            .iter()
            .filter(|(_, uid)| (start..end).contains(&u128::from(fnv1a(uid))))
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(got, want, "shard {i}");
    }
}

/// kube-apiserver's answer to a bad selector: `fmt.Errorf("invalid shard selector: %w")`
/// through `ErrorToAPIStatus`, a 500 with `StatusReasonUnknown` (no `reason`).
fn assert_unknown_500(status: u16, v: &Value, message: &str) {
    assert_eq!(status, 500, "{v}");
    assert_eq!(
        v,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "code": 500})
    );
}

#[tokio::test]
async fn invalid_selectors_get_kube_apiservers_status_on_list_and_watch() {
    let sim = common::sim().await;
    let cases = [
        (
            " ",
            "invalid shard selector: empty shard selector is not allowed; omit the parameter for unfiltered lists",
        ),
        (
            "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
            "invalid shard selector: hexStart must be a 0x-prefixed 16-digit hex value, got \"0x0\" (did you mean \"0x0000000000000000\"?)",
        ),
        (
            "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
            "invalid shard selector: unsupported field path \"object.metadata.name\"; supported: object.metadata.uid, object.metadata.namespace",
        ),
        (
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x0000000000000000')",
            "invalid shard selector: shard range start 0x8000000000000000 must be less than end 0x0000000000000000",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')",
            "invalid shard selector: all shard ranges must use the same field, got \"object.metadata.uid\" and \"object.metadata.namespace\"",
        ),
        (
            "labelSelector(x)",
            "invalid shard selector: unsupported function \"labelSelector\"; only shardRange() and || are allowed",
        ),
    ];
    for (sel, message) in cases {
        let (status, v) = get_json(&sim, &with_shard("/api/v1/pods", sel)).await;
        assert_unknown_500(status, &v, message);
        // A watch fails before its stream starts, the same way.
        let r = raw(
            &sim,
            "GET",
            &with_shard("/api/v1/pods?watch=true&resourceVersion=0", sel),
            &[],
            Bytes::new(),
        )
        .await;
        assert_unknown_500(r.status, &r.json(), message);
    }
    // The 422 of the list options comes first; a syntax error is a CEL parse error.
    let (status, _) = get_json(
        &sim,
        &with_shard("/api/v1/pods?resourceVersionMatch=Exact", " "),
    )
    .await;
    assert_eq!(status, 422);
    let (status, v) = get_json(&sim, &with_shard("/api/v1/pods", "shardRange(")).await;
    assert_eq!(status, 500);
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("invalid shard selector: CEL parse error: ")),
        "{v}"
    );
    // An empty parameter is no parameter (`options.ShardSelector != ""`).
    let (status, v) = get_json(&sim, "/api/v1/pods?shardSelector=").await;
    assert_eq!(status, 200);
    assert!(v["metadata"].get("shardInfo").is_none());
}

#[tokio::test]
async fn with_the_gate_off_the_parameter_is_ignored_entirely() {
    for runtime_toggle in [false, true] {
        let sim = if runtime_toggle {
            let sim = common::sim().await;
            sim.faults().sharded_list_and_watch(false);
            sim
        } else {
            Sim::start(SimConfig {
                sharded_list_and_watch: false,
                ..SimConfig::default()
            })
            .await
            .expect("sim")
        };
        seed(&sim);
        let everything = keys(&list_ok(&sim, "/api/v1/configmaps").await);
        let (sel, ..) = shard("uid", 0, 4);
        let v = list_ok(&sim, &with_shard("/api/v1/configmaps", &sel)).await;
        assert_eq!(keys(&v), everything);
        assert!(v["metadata"].get("shardInfo").is_none());
        let v = list_ok(&sim, &with_shard("/api/v1/configmaps", "not a selector")).await;
        assert_eq!(keys(&v), everything);
        // A watch-list is not filtered either.
        let (status, mut w) = raw_watch(
            &sim,
            &with_shard(
                "/api/v1/configmaps?watch=true&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
                "shardRange(",
            ),
        )
        .await;
        assert_eq!(status, 200);
        let mut n = 0;
        while next_event(&mut w).await["type"] == "ADDED" {
            n += 1;
        }
        assert_eq!(n, everything.len());
        // The request log keeps the parameter whether honoured or not.
        assert!(
            sim.requests()
                .shard_selectors("configmaps", Verb::List)
                .contains(&Some(sel.clone()))
        );
        // Back on, through the control endpoint.
        let r = raw(
            &sim,
            "POST",
            "/sim/features/sharded-list-and-watch",
            &[],
            Bytes::new(),
        )
        .await;
        assert_eq!(r.status, 200);
        let v = list_ok(&sim, &with_shard("/api/v1/configmaps", &sel)).await;
        assert!(keys(&v).len() < everything.len());
        assert_eq!(v["metadata"]["shardInfo"]["selector"], sel.as_str());
        let r = raw(
            &sim,
            "POST",
            "/sim/features/sharded-list-and-watch?on=false",
            &[],
            Bytes::new(),
        )
        .await;
        assert_eq!(r.status, 200);
        let v = list_ok(&sim, &with_shard("/api/v1/configmaps", &sel)).await;
        assert_eq!(keys(&v), everything);
    }
}

#[tokio::test]
async fn the_request_log_records_each_lists_and_watches_selector() {
    let sim = common::sim().await;
    let (sel, ..) = shard("namespace", 1, 2);
    list_ok(&sim, "/api/v1/pods").await;
    list_ok(&sim, &with_shard("/api/v1/pods", &sel)).await;
    let (status, _w) = raw_watch(
        &sim,
        &with_shard("/api/v1/pods?watch=true&resourceVersion=0", &sel),
    )
    .await;
    assert_eq!(status, 200);
    let req = sim.requests();
    assert_eq!(
        req.shard_selectors("pods", Verb::List),
        vec![None, Some(sel.clone())]
    );
    assert_eq!(req.shard_selectors("pods", Verb::Watch), vec![Some(sel)]);
}

#[tokio::test]
async fn delete_collection_deletes_only_the_shard() {
    let sim = common::sim().await;
    let seeded = seed(&sim);
    let (sel, start, end) = shard("uid", 0, 2);
    let r = raw(
        &sim,
        "DELETE",
        &with_shard("/api/v1/namespaces/alpha/configmaps", &sel),
        &[],
        Bytes::new(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["metadata"]["shardInfo"]["selector"], sel.as_str());
    let left = keys(&list_ok(&sim, "/api/v1/namespaces/alpha/configmaps").await);
    let want: BTreeSet<String> = seeded
        .iter()
        .filter(|(k, uid)| {
            k.starts_with("alpha/") && !(start..end).contains(&u128::from(fnv1a(uid)))
        })
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(left, want);
}

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// kubectl (client-go, written by none of us) reads a sharded list through the kubeconfig.
#[test]
fn kubectl_get_raw_sees_the_filtered_list_and_its_shard_info() {
    if !kubectl_available() {
        eprintln!("SKIPPED: kubectl is not on PATH");
        assert!(
            std::env::var("CI").ok().as_deref() != Some("true"),
            "kubectl is required in CI"
        );
        return;
    }
    let sim = Sim::start_background(SimConfig::default()).expect("sim");
    let mut uids = Vec::new();
    for i in 0..12 {
        let o = sim
            .create_object(
                "pods",
                Some("default"),
                json!({"metadata": {"name": format!("p-{i:02}")},
                       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
            )
            .expect("pod");
        uids.push((
            format!("p-{i:02}"),
            o["metadata"]["uid"].as_str().expect("uid").to_string(),
        ));
    }
    let (sel, start, end) = shard("uid", 1, 2);
    let cache = tempfile::tempdir().expect("tempdir");
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(sim.kubeconfig_path())
        .arg("--cache-dir")
        .arg(cache.path())
        .arg("--request-timeout=20s")
        .args(["get", "--raw", &with_shard("/api/v1/pods", &sel)])
        .env_remove("KUBECONFIG")
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["metadata"]["shardInfo"]["selector"], sel.as_str());
    let got: BTreeSet<String> = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|p| p["metadata"]["name"].as_str().expect("name").to_string())
        .collect();
    let want: BTreeSet<String> = uids
        .iter()
        .filter(|(_, u)| (start..end).contains(&u128::from(fnv1a(u))))
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(got, want);
}
