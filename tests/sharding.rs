//! Sharded informers (KEP-5866, docs/semantics.md K1, K2) and "wait until the informer has seen
//! RV X" (KEP-5647, K3), over HTTP against the simulated API server.
//!
//! The sim serves the `ShardedListAndWatch` gate (on by default) and can be switched to a server
//! without it (`Faults::sharded_list_and_watch(false)`: `shardSelector` ignored, no
//! `metadata.shardInfo`). The partition test runs both ways: the assertions tagged "both ways"
//! hold whoever filters, the others check who did.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crate::{client_layers::recording_client, common::*};
use k8s_openapi::api::core::v1::Pod;
use kinformer::notification::Notification;
use kinformer_actors::{
    InformerConfig, KubeListerWatcher, ShardField, ShardFiltering, ShardSelector,
    SharedIndexInformer, WaitError, handler_fn,
};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, PostParams},
};

fn informer(client: Client, shard: Option<ShardSelector>) -> SharedIndexInformer<Pod> {
    let mut config = fast_config();
    config.reflector.shard_selector = shard;
    SharedIndexInformer::from_api(Api::all(client), config)
}

fn shard(i: u64, n: u64) -> ShardSelector {
    ShardSelector::nth_of(ShardField::Uid, i, n).expect("shard")
}

/// The server's pods (key → uid).
pub(crate) async fn uids(client: &Client) -> BTreeMap<String, String> {
    Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|p| {
            (
                format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()),
                p.uid().unwrap_or_default(),
            )
        })
        .collect()
}

/// The keys of `uids` whose uid `s` selects.
pub(crate) fn in_shard(uids: &BTreeMap<String, String>, s: &ShardSelector) -> BTreeSet<String> {
    uids.iter()
        .filter(|(_, uid)| s.matches_value(uid))
        .map(|(k, _)| k.clone())
        .collect()
}

pub(crate) fn cached(i: &SharedIndexInformer<Pod>) -> BTreeSet<String> {
    cache_pods(i).into_keys().collect()
}

/// The `shardSelector` parameter of a request URI, decoded.
fn shard_param(uri: &str) -> Option<String> {
    let query = uri.split_once('?')?.1;
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "shardSelector")
        .map(|(_, v)| v.into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k1_sharded_informers_hold_exactly_their_shard_with_a_server_that_filters() {
    partition(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k1_sharded_informers_hold_exactly_their_shard_with_a_server_without_the_gate() {
    partition(false).await;
}

/// Two informers on complementary halves hold exactly their shard and partition the
/// collection, against a server with (`server_filters`) or without the gate.
async fn partition(server_filters: bool) {
    let sim = sim().await;
    sim.faults().sharded_list_and_watch(server_filters);
    let client = sim.client();
    create_pods(&client, "a", 30).await;
    create_pods(&client, "b", 10).await;
    let (rc, uris) = recording_client(&sim);
    let halves = [shard(0, 2), shard(1, 2)];
    let informers: Vec<_> = halves
        .iter()
        .map(|s| informer(rc.clone(), Some(s.clone())))
        .collect();
    for i in &informers {
        start_synced(i).await;
    }
    // Changes after the LIST reach the right informer through its watch.
    create_pods(&client, "c", 10).await;
    touch_pod(&client, "a", "pod-0", "x").await;
    delete_pod(&client, "a", "pod-1").await;
    let server = uids(&client).await;
    for (i, s) in informers.iter().zip(&halves) {
        let want = in_shard(&server, s);
        eventually("the cache is exactly the shard", || cached(i) == want).await;
    }
    // Both ways: the two shards partition the collection.
    let (a, b) = (cached(&informers[0]), cached(&informers[1]));
    assert!(a.is_disjoint(&b), "an object in both shards");
    let all: BTreeSet<String> = server.keys().cloned().collect();
    assert_eq!(&a | &b, all, "the shards do not cover the collection");
    assert!(
        !a.is_empty() && !b.is_empty(),
        "a degenerate split of 50 uids"
    );
    // Both ways: every LIST and every WATCH carried its informer's selector, encoded.
    let wires: BTreeSet<String> = halves.iter().map(|s| s.wire().unwrap()).collect();
    for watch in [false, true] {
        let sent = uris.pods(watch);
        assert!(
            sent.len() >= 2,
            "{} requests: {sent:?}",
            ["LIST", "WATCH"][watch as usize]
        );
        for u in &sent {
            let p = shard_param(u).unwrap_or_else(|| panic!("no shardSelector in {u}"));
            assert!(wires.contains(&p), "{p} in {u}");
        }
    }
    for i in &informers {
        let h = i.health();
        if server_filters {
            assert_eq!(i.shard_filtering(), Some(ShardFiltering::Server));
            assert_eq!(h.shard_filtered, 0);
        } else {
            // The server sent everything: the informer filtered the other half (40 listed, 10
            // created, 2 changed after sync; each informer dropped what is not its own).
            assert_eq!(i.shard_filtering(), Some(ShardFiltering::Client));
            assert!(h.shard_filtered > 0, "nothing filtered: {h:?}");
        }
        assert_eq!(h.shard_mismatches, 0);
    }
    // Unsharded again: nobody filters any more, and health says so.
    informers[0].set_shard(None).expect("unshard");
    eventually("the cache holds the whole collection", || {
        cached(&informers[0]).len() == server.len()
    })
    .await;
    assert_eq!(informers[0].shard_filtering(), None);
    for i in &informers {
        i.shutdown().await;
    }
}

/// Notifications a handler received after sync, by kind.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(&'static str, String)>>>);

impl Seen {
    fn take(&self) -> Vec<(&'static str, String)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
    fn keys(&self, kind: &str) -> BTreeSet<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, key)| key.clone())
            .collect()
    }
    fn has(&self, kind: &str, key: &str) -> bool {
        self.keys(kind).contains(key)
    }
}

/// Creates a pod whose uid `s` selects (creating and deleting others until one lands there)
/// and waits for the handler's Add: every notification before it was delivered (P8).
async fn sentinel(client: &Client, s: &ShardSelector, seen: &Seen, n: &mut u32) -> String {
    let api = Api::<Pod>::namespaced(client.clone(), "z");
    loop {
        *n += 1;
        let created = api
            .create(&PostParams::default(), &pod("z", &format!("sentinel-{n}")))
            .await
            .expect("create");
        let key = format!("z/{}", created.name_any());
        if s.matches_value(&created.uid().unwrap_or_default()) {
            eventually("the sentinel's Add", || seen.has("add", &key)).await;
            return key;
        }
        delete_pod(client, "z", &created.name_any()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k2_set_shard_notifies_what_enters_and_nothing_that_leaves() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 40).await;
    let half = shard(0, 2);
    let quarter = shard(0, 4);
    let inf = informer(client.clone(), Some(half.clone()));
    let seen = Seen::default();
    let s2 = seen.clone();
    inf.add_event_handler(handler_fn(move |n: &Notification<Pod>| {
        let (kind, obj) = match n {
            Notification::Add { obj, .. } => ("add", obj),
            Notification::Update { new, .. } => ("update", new),
            Notification::Delete { obj } => {
                // K2: objects that leave the shard are never deletions (they still exist).
                let kind = match obj {
                    kinformer::DeltaObject::Object(_) => "delete",
                    kinformer::DeltaObject::Tombstone(_) => "tombstone",
                };
                (kind, obj.object())
            }
        };
        let key = format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
        s2.0.lock().unwrap().push((kind, key));
    }))
    .await
    .expect("handler");
    start_synced(&inf).await;
    let server = uids(&client).await;
    eventually("the initial Adds", || {
        seen.keys("add") == in_shard(&server, &half)
    })
    .await;
    seen.take();
    let mut n = 0;

    // Shrink: half → quarter. No LIST; the leaving pods leave the cache and no handler hears
    // of it: they still exist (K2, issue 31).
    // The informer's own LIST requests (the test's checks list through another client).
    let lists = inf.health().lists;
    inf.set_shard(Some(quarter.clone())).expect("set_shard");
    let leaving = &in_shard(&server, &half) - &in_shard(&server, &quarter);
    assert!(!leaving.is_empty(), "a degenerate split of 40 uids");
    let s = sentinel(&client, &quarter, &seen, &mut n).await;
    let mut got = seen.take();
    got.retain(|(_, k)| *k != s);
    assert_eq!(got, Vec::new(), "a shard that shrank notified handlers");
    assert_eq!(inf.health().lists, lists, "shrinking listed");
    let server = uids(&client).await;
    assert_eq!(cached(&inf), in_shard(&server, &quarter));

    // Grow: quarter → all of the first half and the last quarter. One LIST; an Add for each
    // entering pod; nothing for the pods that stay.
    let grown = half.union(&shard(3, 4)).expect("same field");
    inf.set_shard(Some(grown.clone())).expect("set_shard");
    let s = sentinel(&client, &grown, &seen, &mut n).await;
    let server = uids(&client).await;
    let mut entering = &in_shard(&server, &grown) - &in_shard(&server, &quarter);
    // The sentinel entered as a new object, not by the change.
    entering.remove(&s);
    let mut got = seen.take();
    got.retain(|(_, k)| *k != s);
    let want: BTreeSet<_> = entering.iter().map(|k| ("add", k.clone())).collect();
    assert_eq!(got.iter().cloned().collect::<BTreeSet<_>>(), want);
    assert_eq!(got.len(), want.len(), "a duplicate notification: {got:?}");
    assert_eq!(
        inf.health().lists,
        lists + 1,
        "growing lists the new selector once"
    );
    assert_eq!(cached(&inf), in_shard(&server, &grown));
    let h = inf.health();
    assert_eq!((h.shard_changes, h.shard_relists), (2, 1));
    assert_eq!(inf.shard(), Some(grown));
    inf.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k3_wait_for_resource_version_returns_once_the_cache_has_the_write() {
    let sim = sim().await;
    let client = sim.client();
    let inf = informer(client.clone(), None);
    start_synced(&inf).await;
    let created = Api::<Pod>::namespaced(client.clone(), "w")
        .create(&PostParams::default(), &pod("w", "written"))
        .await
        .expect("create");
    let rv = created.resource_version().expect("rv");
    let deadline = Instant::now() + DEADLINE;
    inf.wait_for_resource_version(&rv, deadline)
        .await
        .expect("seen");
    assert!(inf.has_seen_resource_version(&rv));
    let cached = inf
        .lister()
        .get("w", "written")
        .expect("the write is cached");
    assert_eq!(cached.resource_version().as_deref(), Some(rv.as_str()));

    // An RV the server never reaches: a typed timeout at the deadline.
    let far = (sim.resource_version() + 1_000_000).to_string();
    assert!(!inf.has_seen_resource_version(&far));
    let started = Instant::now();
    let err = inf
        .wait_for_resource_version(&far, started + Duration::from_millis(200))
        .await
        .expect_err("never seen");
    assert!(
        matches!(err, WaitError::Timeout { ref resource_version, .. } if *resource_version == far),
        "{err:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(200));
    // Not an integer: not comparable.
    let err = inf
        .wait_for_resource_version("abc", Instant::now() + DEADLINE)
        .await
        .expect_err("not comparable");
    assert!(matches!(err, WaitError::NotComparable(_)), "{err:?}");
    assert!(!inf.has_seen_resource_version("abc"));

    // From a plain thread with no runtime (futures' executor), woken by progress.
    let inf2 = inf.clone();
    let client2 = client.clone();
    let created = Api::<Pod>::namespaced(client2, "w")
        .create(&PostParams::default(), &pod("w", "from-thread"))
        .await
        .expect("create");
    let rv = created.resource_version().expect("rv");
    let waited = std::thread::spawn(move || {
        futures::executor::block_on(inf2.wait_for_resource_version(&rv, Instant::now() + DEADLINE))
    })
    .join()
    .expect("thread");
    waited.expect("seen from a plain thread");
    assert!(inf.lister().get("w", "from-thread").is_some());
    inf.shutdown().await;
    assert_eq!(
        inf.wait_for_resource_version(&far, Instant::now() + DEADLINE)
            .await,
        Err(WaitError::ShutDown)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k1_a_lean_informer_filters_its_shard_too() {
    let sim = sim().await;
    // A server without the gate: the lean path's own filter is what is checked.
    sim.faults().sharded_list_and_watch(false);
    let client = sim.client();
    create_pods(&client, "a", 20).await;
    let s = shard(1, 2);
    let config = InformerConfig {
        cache: kinformer_actors::CacheMode::lean(),
        ..fast_config()
    }
    .shard(s.clone());
    let inf = SharedIndexInformer::<Pod>::new(
        KubeListerWatcher::from_api(Api::all(client.clone()), &()),
        config,
    );
    start_synced(&inf).await;
    create_pods(&client, "b", 10).await;
    let server = uids(&client).await;
    let want = in_shard(&server, &s);
    eventually("the lean cache is exactly the shard", || {
        inf.lister()
            .list_keys()
            .into_iter()
            .map(|k| k.to_string())
            .collect::<BTreeSet<_>>()
            == want
    })
    .await;
    inf.shutdown().await;
}
