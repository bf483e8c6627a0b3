//! Unit tests of the lean mode's costs and cache (I7): what decodes, what the hot cache
//! answers, what never decodes. Equivalence with the typed store is the property test's job
//! (`proptests.rs`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::tests::{label_index, pod};
use super::*;
use crate::{key::default_key_func, lean::LazyObject};

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

/// A store with metadata indexes only (what an informer's built-in indexes are).
fn meta_store(hot: usize) -> Store<Pod> {
    let mut ix = Indexers::new();
    ix.insert(NAMESPACE_INDEX.to_string(), namespace_index_func());
    ix.insert(
        "app".to_string(),
        meta_index_func(|p: &LazyObject<Pod>| {
            p.labels()
                .get("app")
                .map(String::from)
                .into_iter()
                .collect()
        }),
    );
    Store::lean(
        default_key_func(),
        ix,
        LeanConfig::default().hot_objects(hot),
    )
}

fn with_rv(mut p: Pod, rv: &str) -> Arc<Pod> {
    p.metadata.resource_version = Some(rv.into());
    Arc::new(p)
}

fn decodes(store: &Store<Pod>) -> u64 {
    store.lean_stats().unwrap().decodes
}

/// What the informer's pipeline stores: the object's JSON, encoded, as a lazy object.
fn raw(store: &Store<Pod>, json: &[u8]) -> Arc<LazyObject<Pod>> {
    let state = Arc::clone(store.lean_state().unwrap());
    let raw = state.encode(json).expect("encodes");
    Arc::new(LazyObject::from_raw(Arc::new(raw), state))
}

fn raw_pod(store: &Store<Pod>, p: &Pod) -> Arc<LazyObject<Pod>> {
    raw(store, &serde_json::to_vec(p).unwrap())
}

fn put(store: &mut Store<Pod>, obj: &Arc<LazyObject<Pod>>) -> Option<LazyObject<Pod>> {
    let key = obj.key().unwrap();
    store.batch().put_object(key, obj).unwrap()
}

#[test]
fn i7_store_keeps_bytes_and_readers_get_equal_objects() {
    let mut store = lean_store(0);
    let lister = store.lister();
    let p = with_rv(pod("a", "web-0", &[("app", "web")]), "1");
    assert!(store.add(Arc::clone(&p)).unwrap().is_none());
    let stats = store.lean_stats().unwrap();
    assert_eq!(stats.objects, 1);
    assert_eq!(
        stats.json_bytes,
        serde_json::to_vec(&*p).unwrap().len() as u64
    );
    assert!(stats.bytes <= stats.json_bytes);
    assert!(stats.meta_bytes > 0);
    let got = lister.get("a", "web-0").unwrap();
    assert_eq!(got, p);
    assert!(!Arc::ptr_eq(&got, &p), "decoded, not the stored Arc");
    assert!(store.is_lean());
    assert!(!Store::<Pod>::new(default_key_func(), Indexers::new()).is_lean());
}

#[test]
fn i7_pipeline_writes_with_metadata_indexes_never_decode() {
    let mut store = meta_store(64);
    for i in 0..20 {
        let app = if i % 2 == 0 { "even" } else { "odd" };
        let p = with_rv(pod("a", &format!("p{i}"), &[("app", app)]), "1");
        let obj = raw_pod(&store, &p);
        put(&mut store, &obj);
    }
    // Updates move keys between index values; deletes take them out.
    let moved = with_rv(pod("a", "p0", &[("app", "odd")]), "2");
    let obj = raw_pod(&store, &moved);
    let old = put(&mut store, &obj).expect("an update");
    assert!(!old.is_decoded(), "the old object is handed over undecoded");
    assert_eq!(old.resource_version(), Some("1"));
    assert!(store.batch().remove_key("a/p1"));
    let lister = store.lister();
    assert_eq!(lister.index_keys("app", "odd").unwrap().len(), 10);
    assert_eq!(lister.index_keys("app", "even").unwrap().len(), 9);
    assert_eq!(lister.index_keys(NAMESPACE_INDEX, "a").unwrap().len(), 19);
    assert_eq!(lister.lazy().by_index("app", "odd").unwrap().len(), 10);
    assert_eq!(lister.lazy().list().len(), 19);
    assert_eq!(decodes(&store), 0, "nothing was decoded");
    // A typed read decodes what it returns, and only that.
    assert_eq!(lister.by_index("app", "even").unwrap().len(), 9);
    assert_eq!(decodes(&store), 9);
}

#[test]
fn i7_a_typed_index_function_decodes_each_new_object_once() {
    let mut store = lean_store(0);
    let v1 = raw_pod(&store, &with_rv(pod("a", "p", &[("app", "web")]), "1"));
    put(&mut store, &v1);
    assert_eq!(
        decodes(&store),
        1,
        "the typed `app` index read the new object"
    );
    assert!(
        v1.is_decoded(),
        "the pipeline's object keeps what was decoded"
    );
    let v2 = raw_pod(&store, &with_rv(pod("a", "p", &[("app", "db")]), "2"));
    let old = put(&mut store, &v2).unwrap();
    // The old object's values were kept at write time: not decoded again.
    assert_eq!(decodes(&store), 2);
    assert!(!old.is_decoded());
    let lister = store.lister();
    assert!(lister.index_keys("app", "web").unwrap().is_empty());
    assert_eq!(lister.index_keys("app", "db").unwrap().len(), 1);
    assert!(store.batch().remove_key("a/p"));
    assert!(store.lister().index_keys("app", "db").unwrap().is_empty());
    assert_eq!(decodes(&store), 2, "removal reads the kept values");
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
fn i7_label_selection_decodes_only_what_it_returns() {
    use kube_core::{Expression, Selector};
    let mut store = meta_store(0);
    for i in 0..30 {
        let app = if i < 4 { "web" } else { "db" };
        let p = pod(
            if i % 2 == 0 { "a" } else { "b" },
            &format!("p{i}"),
            &[("app", app)],
        );
        let obj = raw_pod(&store, &p);
        put(&mut store, &obj);
    }
    let web: Selector = Expression::Equal("app".into(), "web".into()).into();
    let lister = store.lister();
    assert_eq!(lister.list_selected(&web).len(), 4);
    assert_eq!(decodes(&store), 4);
    assert_eq!(lister.namespaced("a").list_selected(&web).len(), 2);
    assert_eq!(decodes(&store), 6);
    assert_eq!(lister.lazy().namespaced("b").list().len(), 15);
    assert_eq!(decodes(&store), 6, "lazy namespace lists decode nothing");
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
fn i7_resync_of_the_stored_object_changes_nothing() {
    let mut store = meta_store(64);
    let v1 = raw_pod(&store, &with_rv(pod("a", "web-0", &[]), "1"));
    put(&mut store, &v1);
    let version = store.lister().version();
    // What a FIFO resync does: read the object from the store (lazily), store it again.
    let read = store.lister().lazy().get("a", "web-0").unwrap();
    let bytes_before = store.lean_stats().unwrap().bytes;
    let old = put(&mut store, &read).unwrap();
    assert!(old.same_object(&read), "the same stored object: a sync");
    assert_eq!(store.lean_stats().unwrap().bytes, bytes_before);
    assert_eq!(store.lean_stats().unwrap().objects, 1);
    assert!(store.lister().version() > version);
    assert_eq!(decodes(&store), 0);
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
fn i7_an_object_that_is_not_a_valid_k_is_stored_and_counted_when_read() {
    let mut store = meta_store(0);
    // Well-formed metadata, a body that is not a Pod: lean mode stores what the server sent.
    let bad = raw(
        &store,
        br#"{"metadata":{"name":"bad","namespace":"a"},"spec":{"containers":"no"}}"#,
    );
    put(&mut store, &bad);
    assert_eq!(store.len(), 1);
    let lister = store.lister();
    assert!(lister.get("a", "bad").is_none(), "a typed read skips it");
    assert_eq!(store.lean_stats().unwrap().decode_failures, 1);
    let lazy = lister.lazy().get("a", "bad").unwrap();
    assert_eq!(lazy.name(), Some("bad"));
    assert!(lazy.object().is_err());
    // The failure is remembered by that lazy object: counted once.
    assert!(lazy.object().is_err());
    assert_eq!(store.lean_stats().unwrap().decode_failures, 2);
}

#[test]
fn i7_a_typed_store_rejects_a_lean_object_that_does_not_decode() {
    let lean = meta_store(0);
    let bad = raw(
        &lean,
        br#"{"metadata":{"name":"bad","namespace":"a"},"spec":5}"#,
    );
    let mut typed = Store::<Pod>::new(default_key_func(), Indexers::new());
    let got = typed.batch().put_object(bad.key().unwrap(), &bad);
    assert!(matches!(got, Err(StoreError::Decode(_))));
    assert!(typed.is_empty());
}

#[test]
fn i7_stripping_managed_fields_shrinks_what_is_stored() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    let mut p = pod("a", "web-0", &[]);
    p.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some("kubectl".into()),
        operation: Some("Update".into()),
        ..Default::default()
    }]);
    let mut keep = Store::lean(default_key_func(), Indexers::new(), LeanConfig::default());
    let mut strip = Store::lean(
        default_key_func(),
        Indexers::new(),
        LeanConfig::default().strip_managed_fields(true),
    );
    for s in [&mut keep, &mut strip] {
        let obj = raw_pod(s, &p);
        put(s, &obj);
    }
    let kept = keep.lister().get("a", "web-0").unwrap();
    let stripped = strip.lister().get("a", "web-0").unwrap();
    assert!(kept.metadata.managed_fields.is_some());
    assert!(stripped.metadata.managed_fields.is_none());
    assert_eq!(stripped.metadata.name, kept.metadata.name);
    assert!(strip.lean_stats().unwrap().json_bytes < keep.lean_stats().unwrap().json_bytes);
}

#[test]
fn i7_objects_decoded_for_a_typed_index_function_do_not_fill_the_hot_cache() {
    let mut store = lean_store(64);
    for i in 0..10 {
        let p = raw_pod(
            &store,
            &with_rv(pod("a", &format!("p{i}"), &[("app", "web")]), "1"),
        );
        put(&mut store, &p);
        assert!(
            p.is_decoded(),
            "decoded for the typed `app` index, kept by the object"
        );
    }
    let stats = store.lean_stats().unwrap();
    assert_eq!(stats.decodes, 10);
    assert_eq!(
        stats.hot_objects, 0,
        "the hot cache keeps what readers decoded"
    );
    assert!(store.lister().get("a", "p1").is_some());
    assert_eq!(store.lean_stats().unwrap().hot_objects, 1);
}

#[test]
fn i7_a_departed_object_decoded_later_does_not_fill_the_hot_cache() {
    let mut store = meta_store(64);
    let v1 = raw_pod(&store, &with_rv(pod("a", "p", &[]), "1"));
    put(&mut store, &v1);
    let v2 = raw_pod(&store, &with_rv(pod("a", "p", &[]), "2"));
    let old = put(&mut store, &v2).unwrap();
    assert_eq!(
        old.object().unwrap().metadata.resource_version.as_deref(),
        Some("1")
    );
    assert_eq!(
        store.lean_stats().unwrap().hot_objects,
        0,
        "an old version is not stored: caching it would only evict live ones"
    );
    assert!(v2.object().is_ok());
    assert_eq!(
        store.lean_stats().unwrap().hot_objects,
        1,
        "the live one is"
    );
}

#[test]
fn i7_an_old_object_decoded_after_its_successor_was_stored_hits_the_hot_cache() {
    let mut store = meta_store(64);
    let v1 = raw_pod(&store, &with_rv(pod("a", "p", &[]), "1"));
    put(&mut store, &v1);
    let v2 = raw_pod(&store, &with_rv(pod("a", "p", &[]), "2"));
    // v2 stored before anyone read v1 (handlers lag behind the store).
    let old = put(&mut store, &v2).unwrap();
    // A handler decodes v1 (the new object of the first event), then the second event's old.
    assert!(v1.object().is_ok());
    let before = store.lean_stats().unwrap();
    assert!(old.object().is_ok());
    let after = store.lean_stats().unwrap();
    assert_eq!(after.decodes, before.decodes, "{before:?} {after:?}");
    assert_eq!(after.hits, before.hits + 1);
}
