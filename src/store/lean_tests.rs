//! Unit tests of the lean mode's costs and cache (I7): what decodes, what the hot cache
//! answers, what never decodes. Equivalence with the typed store is the property test's job
//! (`proptests.rs`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::tests::{label_index, pod};
use super::*;
use crate::key::default_key_func;

fn lean_store(hot: usize) -> Store<Pod> {
    let mut ix = Indexers::new();
    ix.insert(NAMESPACE_INDEX.to_string(), namespace_index_func());
    ix.insert("app".to_string(), label_index("app"));
    Store::with_mode(
        default_key_func(),
        ix,
        CacheMode::Lean(LeanConfig::default().hot_objects(hot)),
    )
}

fn with_rv(mut p: Pod, rv: &str) -> Arc<Pod> {
    p.metadata.resource_version = Some(rv.into());
    Arc::new(p)
}

fn decodes(store: &Store<Pod>) -> u64 {
    store.lean_stats().unwrap().decodes
}

#[test]
fn i7_store_keeps_bytes_and_readers_get_equal_objects() {
    let mut store = lean_store(0);
    let lister = store.lister();
    let p = with_rv(pod("a", "web-0", &[("app", "web")]), "1");
    assert!(store.add(Arc::clone(&p)).unwrap().is_none());
    let stats = store.lean_stats().unwrap();
    assert_eq!(stats.objects, 1);
    assert_eq!(stats.bytes, serde_json::to_vec(&*p).unwrap().len() as u64);
    let got = lister.get("a", "web-0").unwrap();
    assert_eq!(got, p);
    assert!(!Arc::ptr_eq(&got, &p), "decoded, not the stored Arc");
    assert!(store.is_lean());
    assert!(!Store::<Pod>::new(default_key_func(), Indexers::new()).is_lean());
}

#[test]
fn i7_update_of_a_hot_key_returns_the_old_object_without_decoding() {
    let mut store = lean_store(64);
    let v1 = with_rv(pod("a", "web-0", &[("app", "web")]), "1");
    store.add(Arc::clone(&v1)).unwrap();
    let v2 = with_rv(pod("a", "web-0", &[("app", "web")]), "2");
    let old = store.update(Arc::clone(&v2)).unwrap().unwrap();
    // The very Arc the writer stored: remembered in the hot cache, nothing decoded.
    assert!(Arc::ptr_eq(&old, &v1));
    assert_eq!(decodes(&store), 0);
    // Point reads of a just-written object are hits too.
    assert!(Arc::ptr_eq(&store.lister().get("a", "web-0").unwrap(), &v2));
    assert_eq!(decodes(&store), 0);
}

#[test]
fn i7_without_hot_cache_each_update_decodes_the_old_object_once() {
    let mut store = lean_store(0);
    let v1 = with_rv(pod("a", "web-0", &[("app", "web")]), "1");
    store.add(Arc::clone(&v1)).unwrap();
    let v2 = with_rv(pod("a", "web-0", &[("app", "web")]), "2");
    let old = store.update(v2).unwrap().unwrap();
    assert_eq!(old, v1);
    assert_eq!(decodes(&store), 1);
}

#[test]
fn i7_deletes_and_index_maintenance_never_decode() {
    let mut store = lean_store(0);
    for i in 0..10 {
        let app = if i % 2 == 0 { "even" } else { "odd" };
        store
            .add(Arc::new(pod("a", &format!("p{i}"), &[("app", app)])))
            .unwrap();
    }
    // Moving a key between index values uses the values stored at write time.
    {
        let mut batch = store.batch();
        batch
            .add(Arc::new(pod("a", "p0", &[("app", "odd")])))
            .unwrap();
        assert!(batch.remove_key("a/p1"));
        assert!(!batch.remove_key("a/p1"));
    }
    // One decode: the old p0 that `add` returns. Removal and reindexing cost none.
    assert_eq!(decodes(&store), 1);
    let lister = store.lister();
    assert_eq!(lister.index_keys("app", "odd").unwrap().len(), 5);
    assert_eq!(lister.index_keys("app", "even").unwrap().len(), 4);
    assert_eq!(decodes(&store), 1, "index_keys decodes nothing");
}

#[test]
fn i7_by_index_decodes_only_the_matching_objects() {
    let mut store = lean_store(0);
    let mut batch = store.batch();
    for i in 0..20 {
        let app = if i < 3 { "web" } else { "db" };
        batch
            .add(Arc::new(pod("a", &format!("p{i}"), &[("app", app)])))
            .unwrap();
    }
    batch.commit();
    let web = store.lister().by_index("app", "web").unwrap();
    assert_eq!(web.len(), 3);
    assert_eq!(decodes(&store), 3);
}

#[test]
fn i7_multi_object_reads_do_not_flush_the_hot_cache() {
    let mut store = lean_store(16);
    // 16 shards of one object each; objects added long ago are evicted by later ones.
    let mut batch = store.batch();
    for i in 0..200 {
        batch
            .add(Arc::new(pod("a", &format!("p{i}"), &[])))
            .unwrap();
    }
    batch.commit();
    let lister = store.lister();
    let hot = lister.get("a", "p7").unwrap();
    let before = decodes(&store);
    assert_eq!(lister.list().len(), 200);
    let after_list = decodes(&store);
    assert!(after_list - before >= 180, "a list decodes what is not hot");
    // p7 (read last) is still cached: the list looked it up but did not insert anything.
    assert!(Arc::ptr_eq(&lister.get("a", "p7").unwrap(), &hot));
    assert_eq!(decodes(&store), after_list);
}

#[test]
fn i7_resync_of_the_cached_object_changes_nothing() {
    let mut store = lean_store(64);
    store.add(with_rv(pod("a", "web-0", &[]), "1")).unwrap();
    let lister = store.lister();
    // What a FIFO resync does: read the object from the store, store it again.
    let read = store.get_by_key("a/web-0").unwrap();
    let bytes_before = store.lean_stats().unwrap().bytes;
    let old = store.update(Arc::clone(&read)).unwrap().unwrap();
    assert!(
        Arc::ptr_eq(&old, &read),
        "the same Arc: the processor sees a sync"
    );
    assert_eq!(store.lean_stats().unwrap().bytes, bytes_before);
    assert!(Arc::ptr_eq(&lister.get("a", "web-0").unwrap(), &read));
}

#[test]
fn i7_old_snapshots_keep_their_version() {
    let mut store = lean_store(64);
    store.add(with_rv(pod("a", "web-0", &[]), "1")).unwrap();
    let pinned = store.lister().snapshot();
    store.update(with_rv(pod("a", "web-0", &[]), "2")).unwrap();
    let old = pinned.get("a", "web-0").unwrap();
    assert_eq!(old.metadata.resource_version.as_deref(), Some("1"));
    let new = store.lister().get("a", "web-0").unwrap();
    assert_eq!(new.metadata.resource_version.as_deref(), Some("2"));
}

#[test]
fn i7_a_codec_that_does_not_round_trip_is_counted_not_fatal() {
    struct Broken;
    impl Codec<Pod> for Broken {
        fn encode(&self, obj: &Pod) -> Result<Vec<u8>, CodecError> {
            JsonCodec::default().encode(obj)
        }
        fn decode(&self, _: &[u8]) -> Result<Pod, CodecError> {
            Err(CodecError("no".into()))
        }
    }
    let mut store = Store::lean(
        default_key_func(),
        Indexers::new(),
        Arc::new(Broken),
        LeanConfig::default().hot_objects(0),
    );
    store.add(Arc::new(pod("a", "web-0", &[]))).unwrap();
    assert!(store.lister().get("a", "web-0").is_none());
    assert_eq!(store.lean_stats().unwrap().decode_failures, 1);
    assert_eq!(store.len(), 1);
}
