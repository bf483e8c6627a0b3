//! Unit tests of the store, named after docs/semantics.md ids; cases ported in spirit from client-go's
//! `thread_safe_store_test.go`, `index_test.go` and `store_test.go`.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube_core::{Expression, Selector};

use super::*;
use crate::{KeyError, ObjectKey, key::default_key_func, known::KnownObjects};

pub(super) fn pod(ns: &str, name: &str, labels: &[(&str, &str)]) -> Pod {
    let mut p = Pod::default();
    p.metadata.namespace = Some(ns.into());
    p.metadata.name = Some(name.into());
    if !labels.is_empty() {
        p.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    }
    p
}

fn arc_pod(ns: &str, name: &str, labels: &[(&str, &str)]) -> Arc<Pod> {
    Arc::new(pod(ns, name, labels))
}

/// client-go's `testUsersIndexFunc`: the comma-separated `users` annotation.
fn users_pod(name: &str, users: &str) -> Arc<Pod> {
    let mut p = pod("ns", name, &[]);
    p.metadata.annotations = Some([("users".to_string(), users.to_string())].into());
    Arc::new(p)
}

fn users_index() -> IndexFunc<Pod> {
    index_func(|p: &Pod| {
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("users"))
            .map(|u| u.split(',').map(str::to_string).collect())
            .unwrap_or_default()
    })
}

pub(super) fn label_index(label: &'static str) -> IndexFunc<Pod> {
    index_func(move |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(label))
            .map(|v| vec![v.clone()])
            .unwrap_or_default()
    })
}

fn indexers(list: Vec<(&str, IndexFunc<Pod>)>) -> Indexers<Pod> {
    list.into_iter().map(|(n, f)| (n.to_string(), f)).collect()
}

fn pod_store() -> Store<Pod> {
    Store::new(
        default_key_func(),
        indexers(vec![
            (NAMESPACE_INDEX, namespace_index_func()),
            ("app", label_index("app")),
        ]),
    )
}

fn sorted_keys(keys: Vec<ObjectKey>) -> Vec<String> {
    let mut keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    keys.sort();
    keys
}

fn names(objs: Vec<Arc<Pod>>) -> Vec<String> {
    let mut names: Vec<String> = objs
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    names.sort();
    names
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn sel(label: &str, value: &str) -> Selector {
    Expression::Equal(label.into(), value.into()).into()
}

// ---------------------------------------------------------------- I1: keys

#[test]
fn i1_store_keys_objects_by_namespace_and_name() {
    let mut store = pod_store();
    store.add(arc_pod("ns", "a", &[])).unwrap();
    assert!(store.get_by_key("ns/a").is_some());
    assert_eq!(sorted_keys(store.lister().list_keys()), ["ns/a"]);
}

#[test]
fn i1_cluster_scoped_objects_are_keyed_by_name() {
    let mut store = Store::new(default_key_func::<Node>(), Indexers::new());
    let mut node = Node::default();
    node.metadata.name = Some("node-1".into());
    store.add(Arc::new(node)).unwrap();
    let lister = store.lister();
    assert!(lister.get_by_key("node-1").is_some());
    assert!(lister.get("", "node-1").is_some());
    assert!(lister.get_cluster("node-1").is_some());
}

#[test]
fn i1_unkeyable_object_is_rejected_and_changes_nothing() {
    let mut store = pod_store();
    let lister = store.lister();
    let version = lister.version();
    assert_eq!(
        store.add(Arc::new(Pod::default())),
        Err(StoreError::Key(KeyError::MissingName))
    );
    assert_eq!(
        store.delete(&Pod::default()),
        Err(StoreError::Key(KeyError::MissingName))
    );
    assert!(lister.is_empty());
    assert_eq!(lister.version(), version, "nothing published");
}

#[test]
fn i1_index_func_as_key_func_adapter() {
    // client-go's IndexFuncToKeyFuncAdapter: a key func from an index func, valid only when
    // the index func yields exactly one value.
    let users = users_index();
    let key_func: crate::KeyFunc<Pod> = Arc::new(move |p: &Pod| {
        // `values_of` takes the `Arc` a store holds: a test-only copy of the pod.
        let values = users.values_of(&Arc::new(p.clone()));
        match values.as_slice() {
            [one] => ObjectKey::parse(one),
            _ => Err(KeyError::Invalid(
                "index func must yield exactly one value".into(),
            )),
        }
    });
    let mut store = Store::new(key_func, Indexers::new());
    assert!(store.add(users_pod("one", "ernie")).is_ok());
    assert!(store.get_by_key("ernie").is_some());
    assert!(matches!(
        store.add(users_pod("two", "ernie,bert")),
        Err(StoreError::Key(KeyError::Invalid(_)))
    ));
    assert_eq!(store.len(), 1);
}

#[test]
fn i1_add_update_return_previous_object() {
    let mut store = pod_store();
    let v1 = arc_pod("ns", "a", &[("v", "1")]);
    let v2 = arc_pod("ns", "a", &[("v", "2")]);
    assert!(store.add(Arc::clone(&v1)).unwrap().is_none());
    let old = store.update(Arc::clone(&v2)).unwrap().unwrap();
    assert!(Arc::ptr_eq(&old, &v1), "update hands back the stored Arc");
    assert!(Arc::ptr_eq(&store.get_by_key("ns/a").unwrap(), &v2));
    let gone = store.delete(&v2).unwrap().unwrap();
    assert!(Arc::ptr_eq(&gone, &v2));
    assert!(store.delete_key("ns/a").is_none());
}

// ---------------------------------------------------------------- I2: exact indices

#[test]
fn i2_add_indexes_every_index() {
    let mut store = pod_store();
    store.add(arc_pod("ns1", "a", &[("app", "web")])).unwrap();
    store.add(arc_pod("ns2", "b", &[("app", "web")])).unwrap();
    let l = store.lister();
    assert_eq!(
        sorted_keys(l.index_keys("app", "web").unwrap()),
        ["ns1/a", "ns2/b"]
    );
    assert_eq!(
        sorted_keys(l.index_keys(NAMESPACE_INDEX, "ns1").unwrap()),
        ["ns1/a"]
    );
}

#[test]
fn i2_update_moves_key_between_index_values() {
    let mut store = pod_store();
    store.add(arc_pod("ns", "a", &[("app", "web")])).unwrap();
    store.add(arc_pod("ns", "b", &[("app", "web")])).unwrap();
    store.update(arc_pod("ns", "a", &[("app", "db")])).unwrap();
    let l = store.lister();
    assert_eq!(sorted_keys(l.index_keys("app", "web").unwrap()), ["ns/b"]);
    assert_eq!(sorted_keys(l.index_keys("app", "db").unwrap()), ["ns/a"]);
    // Losing the label removes the key from the index entirely.
    store.update(arc_pod("ns", "a", &[])).unwrap();
    assert_eq!(sorted(l.list_index_func_values("app")), ["web"]);
}

#[test]
fn i2_delete_removes_empty_sets_from_index() {
    // TestThreadSafeStoreDeleteRemovesEmptySetsFromIndex
    let mut store = pod_store();
    store.add(arc_pod("ns", "a", &[("app", "web")])).unwrap();
    store.delete_key("ns/a").unwrap();
    let l = store.lister();
    assert!(
        l.list_index_func_values("app").is_empty(),
        "empty set dropped"
    );
    assert!(l.list_index_func_values(NAMESPACE_INDEX).is_empty());
    assert!(l.index_keys("app", "web").unwrap().is_empty());
}

#[test]
fn i2_update_removes_empty_sets_from_index() {
    let mut store = pod_store();
    store.add(arc_pod("ns", "a", &[("app", "web")])).unwrap();
    store.update(arc_pod("ns", "a", &[("app", "db")])).unwrap();
    assert_eq!(store.lister().list_index_func_values("app"), ["db"]);
}

#[test]
fn i2_delete_keeps_non_empty_set_in_index() {
    // TestThreadSafeStoreAddKeepsNonEmptySetPostDeleteFromIndex
    let mut store = pod_store();
    store.add(arc_pod("ns", "a", &[("app", "web")])).unwrap();
    store.add(arc_pod("ns", "b", &[("app", "web")])).unwrap();
    store.add(arc_pod("ns", "c", &[("app", "web")])).unwrap();
    store.delete_key("ns/a").unwrap();
    let l = store.lister();
    assert_eq!(
        sorted_keys(l.index_keys("app", "web").unwrap()),
        ["ns/b", "ns/c"]
    );
    store.delete_key("ns/b").unwrap();
    assert_eq!(sorted_keys(l.index_keys("app", "web").unwrap()), ["ns/c"]);
    store.add(arc_pod("ns", "d", &[("app", "web")])).unwrap();
    assert_eq!(
        sorted_keys(l.index_keys("app", "web").unwrap()),
        ["ns/c", "ns/d"]
    );
}

#[test]
fn i2_indexing_functions_with_multiple_values() {
    // TestThreadSafeStoreIndexingFunctionsWithMultipleValues
    let mut store = Store::new(default_key_func(), indexers(vec![("users", users_index())]));
    let l = store.lister();
    store.add(users_pod("one", "fred")).unwrap();
    store.add(users_pod("two", "fred")).unwrap();
    store.add(users_pod("tre", "fred,bert")).unwrap();
    assert_eq!(
        sorted_keys(l.index_keys("users", "fred").unwrap()),
        ["ns/one", "ns/tre", "ns/two"]
    );
    assert_eq!(
        sorted_keys(l.index_keys("users", "bert").unwrap()),
        ["ns/tre"]
    );

    store.update(users_pod("one", "fred,ernie")).unwrap();
    assert_eq!(
        sorted_keys(l.index_keys("users", "fred").unwrap()),
        ["ns/one", "ns/tre", "ns/two"]
    );
    assert_eq!(
        sorted_keys(l.index_keys("users", "ernie").unwrap()),
        ["ns/one"]
    );

    store.update(users_pod("tre", "elmo,ernie")).unwrap();
    assert_eq!(
        sorted_keys(l.index_keys("users", "fred").unwrap()),
        ["ns/one", "ns/two"]
    );
    assert_eq!(
        sorted_keys(l.index_keys("users", "ernie").unwrap()),
        ["ns/one", "ns/tre"]
    );
    assert!(l.index_keys("users", "bert").unwrap().is_empty());
    assert_eq!(
        sorted(l.list_index_func_values("users")),
        ["elmo", "ernie", "fred"]
    );

    store.delete_key("ns/one").unwrap();
    store.delete_key("ns/tre").unwrap();
    assert_eq!(l.list_index_func_values("users"), ["fred"]);
}

#[test]
fn i2_duplicate_values_from_an_index_func_are_indexed_once() {
    let mut store = Store::new(default_key_func(), indexers(vec![("users", users_index())]));
    store.add(users_pod("one", "fred,fred,bert")).unwrap();
    let l = store.lister();
    assert_eq!(l.index_keys("users", "fred").unwrap().len(), 1);
    store.update(users_pod("one", "bert,bert")).unwrap();
    assert_eq!(l.list_index_func_values("users"), ["bert"]);
    store.delete_key("ns/one").unwrap();
    assert!(l.list_index_func_values("users").is_empty());
}

#[test]
fn i2_replace_rebuilds_indices_exactly() {
    let mut store = pod_store();
    store.add(arc_pod("ns", "a", &[("app", "web")])).unwrap();
    store.add(arc_pod("old", "b", &[("app", "db")])).unwrap();
    store
        .replace(vec![
            arc_pod("ns", "a", &[("app", "cache")]),
            arc_pod("ns", "c", &[]),
        ])
        .unwrap();
    let l = store.lister();
    assert_eq!(l.list_index_func_values("app"), ["cache"]);
    assert_eq!(l.list_index_func_values(NAMESPACE_INDEX), ["ns"]);
    assert_eq!(
        sorted_keys(l.index_keys(NAMESPACE_INDEX, "ns").unwrap()),
        ["ns/a", "ns/c"]
    );
}

#[test]
fn i2_resync_of_the_same_object_changes_no_index() {
    let mut store = pod_store();
    let a = arc_pod("ns", "a", &[("app", "web")]);
    store.add(Arc::clone(&a)).unwrap();
    let old = store.update(Arc::clone(&a)).unwrap().unwrap();
    assert!(Arc::ptr_eq(&old, &a));
    assert_eq!(store.lister().index_keys("app", "web").unwrap().len(), 1);
}

#[test]
fn i2_delete_of_unknown_key_publishes_nothing() {
    let mut store = pod_store();
    let l = store.lister();
    let v = l.version();
    assert!(store.delete_key("ns/missing").is_none());
    assert!(store.delete(&pod("ns", "missing", &[])).unwrap().is_none());
    assert_eq!(l.version(), v);
}

#[test]
fn i2_large_value_set_shrinks_back_and_drops() {
    // Exercises the single-key and the persistent-set representations of a value's keys.
    let mut store = pod_store();
    for i in 0..100 {
        store
            .add(arc_pod("ns", &format!("p{i}"), &[("app", "web")]))
            .unwrap();
    }
    let l = store.lister();
    assert_eq!(l.by_index("app", "web").unwrap().len(), 100);
    for i in 0..99 {
        store.delete_key(&format!("ns/p{i}")).unwrap();
    }
    assert_eq!(sorted_keys(l.index_keys("app", "web").unwrap()), ["ns/p99"]);
    store
        .update(arc_pod("ns", "p99", &[("app", "db")]))
        .unwrap();
    assert_eq!(l.list_index_func_values("app"), ["db"]);
}

// ---------------------------------------------------------------- I3: index reads

#[test]
fn i3_unknown_index_is_an_error() {
    let store = pod_store();
    let l = store.lister();
    let unknown = || Err(StoreError::UnknownIndex("nope".into()));
    assert_eq!(l.by_index("nope", "x").map(|v| v.len()), unknown());
    assert_eq!(l.index_keys("nope", "x").map(|v| v.len()), unknown());
    assert_eq!(
        l.index("nope", &arc_pod("ns", "a", &[])).map(|v| v.len()),
        unknown()
    );
    assert_eq!(
        l.snapshot().index_keys("nope", "x").map(|v| v.len()),
        unknown()
    );
}

#[test]
fn i3_list_index_func_values_of_unknown_index_is_empty() {
    assert!(
        pod_store()
            .lister()
            .list_index_func_values("nope")
            .is_empty()
    );
}

#[test]
fn i3_get_index_func_values() {
    // TestGetIndexFuncValues
    let mut store = pod_store();
    store.add(arc_pod("ns", "one", &[("app", "a")])).unwrap();
    store.add(arc_pod("ns", "two", &[("app", "a")])).unwrap();
    store.add(arc_pod("ns", "tre", &[("app", "b")])).unwrap();
    store.add(arc_pod("ns", "for", &[])).unwrap();
    assert_eq!(
        sorted(store.lister().list_index_func_values("app")),
        ["a", "b"]
    );
}

#[test]
fn i3_multi_index_keys() {
    // TestMultiIndexKeys
    let mut store = Store::new(default_key_func(), indexers(vec![("users", users_index())]));
    store.add(users_pod("one", "ernie,bert")).unwrap();
    store.add(users_pod("two", "bert,oscar")).unwrap();
    store.add(users_pod("tre", "ernie,elmo")).unwrap();
    let l = store.lister();
    let expected: BTreeMap<&str, Vec<&str>> = [
        ("ernie", vec!["ns/one", "ns/tre"]),
        ("bert", vec!["ns/one", "ns/two"]),
        ("elmo", vec!["ns/tre"]),
        ("oscar", vec!["ns/two"]),
    ]
    .into();
    for (value, keys) in &expected {
        assert_eq!(&sorted_keys(l.index_keys("users", value).unwrap()), keys);
    }
    assert_eq!(names(l.by_index("users", "ernie").unwrap()), ["one", "tre"]);
    // Index(obj): everything sharing any value with the probe, each object once.
    let probe = users_pod("probe", "ernie,bert");
    assert_eq!(
        names(l.index("users", &probe).unwrap()),
        ["one", "tre", "two"]
    );
    assert!(
        l.index("users", &users_pod("x", "nobody"))
            .unwrap()
            .is_empty()
    );

    store.delete_key("ns/tre").unwrap();
    assert_eq!(
        sorted_keys(l.index_keys("users", "ernie").unwrap()),
        ["ns/one"]
    );
    assert!(l.index_keys("users", "elmo").unwrap().is_empty());
    store.update(users_pod("two", "oscar")).unwrap();
    assert_eq!(
        sorted_keys(l.index_keys("users", "bert").unwrap()),
        ["ns/one"]
    );
}

#[test]
fn i3_by_index_returns_stored_objects() {
    let mut store = pod_store();
    let a = arc_pod("ns", "a", &[("app", "web")]);
    store.add(Arc::clone(&a)).unwrap();
    let got = store.lister().by_index("app", "web").unwrap();
    assert!(Arc::ptr_eq(&got[0], &a), "no deep copy");
    assert!(store.lister().by_index("app", "none").unwrap().is_empty());
}

// ---------------------------------------------------------------- I4: add_indexers

#[test]
fn i4_add_indexers_indexes_existing_objects() {
    let mut store = Store::new(default_key_func(), Indexers::new());
    store.add(arc_pod("ns1", "a", &[("app", "web")])).unwrap();
    store.add(arc_pod("ns2", "b", &[("app", "db")])).unwrap();
    let l = store.lister();
    assert!(l.by_index("app", "web").is_err());
    store
        .add_indexers(indexers(vec![
            ("app", label_index("app")),
            (NAMESPACE_INDEX, namespace_index_func()),
        ]))
        .unwrap();
    assert_eq!(names(l.by_index("app", "web").unwrap()), ["a"]);
    assert_eq!(
        sorted(l.list_index_func_values(NAMESPACE_INDEX)),
        ["ns1", "ns2"]
    );
    assert_eq!(l.index_names(), ["app", NAMESPACE_INDEX]);
}

#[test]
fn i4_added_index_is_maintained_by_later_writes() {
    let mut store = Store::new(default_key_func(), Indexers::new());
    store.add(arc_pod("ns", "a", &[("app", "web")])).unwrap();
    store
        .add_indexers(indexers(vec![("app", label_index("app"))]))
        .unwrap();
    store.update(arc_pod("ns", "a", &[("app", "db")])).unwrap();
    store.add(arc_pod("ns", "b", &[("app", "web")])).unwrap();
    let l = store.lister();
    assert_eq!(sorted_keys(l.index_keys("app", "web").unwrap()), ["ns/b"]);
    assert_eq!(sorted_keys(l.index_keys("app", "db").unwrap()), ["ns/a"]);
}

#[test]
fn i4_add_indexers_with_existing_name_fails_and_adds_nothing() {
    let mut store = pod_store();
    store.add(arc_pod("ns", "a", &[("tier", "x")])).unwrap();
    let l = store.lister();
    let v = l.version();
    let err = store.add_indexers(indexers(vec![
        ("app", label_index("tier")),
        ("tier", label_index("tier")),
    ]));
    assert_eq!(err, Err(StoreError::IndexExists("app".into())));
    assert!(l.by_index("tier", "x").is_err(), "all-or-nothing");
    assert_eq!(l.version(), v);
    // The original "app" index is untouched.
    assert!(l.index_keys("app", "x").unwrap().is_empty());
}

// ---------------------------------------------------------------- I5: replace

#[test]
fn i5_replace_swaps_contents() {
    let mut store = pod_store();
    store.add(arc_pod("ns", "a", &[])).unwrap();
    store.add(arc_pod("ns", "b", &[])).unwrap();
    let before = store.snapshot();
    let report = store
        .replace(vec![arc_pod("ns", "b", &[]), arc_pod("ns", "c", &[])])
        .unwrap();
    assert_eq!(
        report,
        ReplaceReport {
            stored: 2,
            skipped: vec![]
        }
    );
    let l = store.lister();
    assert_eq!(sorted_keys(l.list_keys()), ["ns/b", "ns/c"]);
    // The snapshot taken before tells the caller what vanished (to notify deletions).
    assert_eq!(sorted_keys(before.list_keys()), ["ns/a", "ns/b"]);
    assert!(before.get_by_key("ns/a").is_some());
}

#[test]
fn i5_replace_skips_and_reports_unkeyable_objects() {
    let mut store = pod_store();
    let report = store
        .replace(vec![
            arc_pod("ns", "a", &[]),
            Arc::new(Pod::default()),
            arc_pod("ns", "b", &[]),
            arc_pod("ns", "b", &[("dup", "last")]),
        ])
        .unwrap();
    assert_eq!(report.stored, 2);
    assert_eq!(
        report.skipped,
        [SkippedObject {
            position: 1,
            error: KeyError::MissingName
        }]
    );
    let b = store.get_by_key("ns/b").unwrap();
    assert!(b.metadata.labels.is_some(), "last duplicate wins");
}

#[test]
fn i5_replace_with_nothing_empties_store_and_indices() {
    let mut store = pod_store();
    store.add(arc_pod("ns", "a", &[("app", "web")])).unwrap();
    store.replace(Vec::new()).unwrap();
    let l = store.lister();
    assert!(l.is_empty());
    assert!(l.list_index_func_values("app").is_empty());
    assert_eq!(
        l.index_names(),
        ["app", NAMESPACE_INDEX],
        "indexers survive"
    );
}

#[test]
fn i5_snapshot_is_unaffected_by_later_writes() {
    let mut store = pod_store();
    store.add(arc_pod("ns", "a", &[("app", "web")])).unwrap();
    let snap = store.lister().snapshot();
    store
        .replace(vec![arc_pod("ns", "z", &[("app", "db")])])
        .unwrap();
    store.add(arc_pod("ns", "y", &[])).unwrap();
    assert_eq!(sorted_keys(snap.list_keys()), ["ns/a"]);
    assert_eq!(snap.list_index_func_values("app"), ["web"]);
    assert!(snap.version() < store.lister().version());
}

// ---------------------------------------------------------------- I6: listers

#[test]
fn i6_lister_get_by_namespace_and_name() {
    let mut store = pod_store();
    store.add(arc_pod("ns", "a", &[])).unwrap();
    let l = store.lister();
    assert!(l.get("ns", "a").is_some());
    assert!(l.get("other", "a").is_none());
    assert!(
        l.get("", "a").is_none(),
        "empty namespace means cluster-scoped"
    );
    assert!(l.snapshot().get("ns", "a").is_some());
}

#[test]
fn i6_get_with_an_oversized_key_falls_back_to_the_heap() {
    let mut store = pod_store();
    let long = "n".repeat(400);
    store.add(arc_pod("ns", &long, &[])).unwrap();
    assert!(store.lister().get("ns", &long).is_some());
    assert!(store.lister().namespaced("ns").get(&long).is_some());
}

#[test]
fn i6_list_and_list_selected() {
    let mut store = pod_store();
    store
        .add(arc_pod("ns1", "a", &[("app", "web"), ("tier", "fe")]))
        .unwrap();
    store.add(arc_pod("ns2", "b", &[("app", "web")])).unwrap();
    store.add(arc_pod("ns2", "c", &[])).unwrap();
    let l = store.lister();
    assert_eq!(l.len(), 3);
    assert_eq!(names(l.list()), ["a", "b", "c"]);
    assert_eq!(names(l.list_selected(&sel("app", "web"))), ["a", "b"]);
    assert_eq!(
        names(l.list_selected(&Selector::default())),
        ["a", "b", "c"]
    );
    let not_fe: Selector = Expression::NotEqual("tier".into(), "fe".into()).into();
    assert_eq!(
        names(l.list_selected(&not_fe)),
        ["b", "c"],
        "unlabelled objects match !="
    );
    let exists: Selector = Expression::Exists("app".into()).into();
    assert_eq!(names(l.snapshot().list_selected(&exists)), ["a", "b"]);
}

#[test]
fn i6_namespaced_lister_with_namespace_index() {
    let mut store = pod_store();
    store.add(arc_pod("ns1", "a", &[("app", "web")])).unwrap();
    store.add(arc_pod("ns1", "b", &[])).unwrap();
    store.add(arc_pod("ns2", "c", &[("app", "web")])).unwrap();
    let ns1 = store.lister().namespaced("ns1");
    assert_eq!(ns1.namespace(), "ns1");
    assert_eq!(names(ns1.list()), ["a", "b"]);
    assert_eq!(names(ns1.list_selected(&sel("app", "web"))), ["a"]);
    assert!(ns1.get("a").is_some());
    assert!(ns1.get("c").is_none());
    // Live: sees later writes.
    store.add(arc_pod("ns1", "d", &[])).unwrap();
    assert_eq!(names(ns1.list()), ["a", "b", "d"]);
}

#[test]
fn i6_namespaced_lister_without_namespace_index_filters() {
    let mut store = Store::new(default_key_func(), Indexers::new());
    store.add(arc_pod("ns1", "a", &[("app", "web")])).unwrap();
    store.add(arc_pod("ns1", "b", &[])).unwrap();
    store.add(arc_pod("ns2", "c", &[("app", "web")])).unwrap();
    let l = store.lister();
    assert_eq!(names(l.namespaced("ns1").list()), ["a", "b"]);
    assert_eq!(
        names(l.namespaced("ns2").list_selected(&sel("app", "web"))),
        ["c"]
    );
    assert!(l.namespaced("ns3").list().is_empty());
}

#[test]
fn i6_namespaced_all_namespaces_lists_everything() {
    let mut store = pod_store();
    store.add(arc_pod("ns1", "a", &[("app", "web")])).unwrap();
    store.add(arc_pod("ns2", "b", &[])).unwrap();
    let all = store.lister().namespaced("");
    assert_eq!(names(all.list()), ["a", "b"]);
    assert_eq!(names(all.list_selected(&sel("app", "web"))), ["a"]);
}

#[test]
fn i6_snapshot_namespaced_lister_is_pinned() {
    let mut store = pod_store();
    store.add(arc_pod("ns1", "a", &[])).unwrap();
    let pinned = store.lister().snapshot().namespaced("ns1");
    store.add(arc_pod("ns1", "b", &[])).unwrap();
    assert_eq!(names(pinned.list()), ["a"]);
    assert!(pinned.get("b").is_none());
}

#[test]
fn i6_batch_publishes_once_at_commit() {
    let mut store = pod_store();
    let l = store.lister();
    let v = l.version();
    let mut batch = store.batch();
    batch.add(arc_pod("ns", "a", &[("app", "web")])).unwrap();
    batch.add(arc_pod("ns", "b", &[])).unwrap();
    batch.update(arc_pod("ns", "b", &[("app", "web")])).unwrap();
    assert!(batch.delete_key("ns/a").is_some());
    assert!(
        batch.get_by_key("ns/b").is_some(),
        "the batch sees its own writes"
    );
    assert!(l.is_empty(), "readers see nothing before commit");
    batch.commit();
    assert_eq!(l.version(), v + 1, "one publish");
    assert_eq!(sorted_keys(l.index_keys("app", "web").unwrap()), ["ns/b"]);
}

#[test]
fn i6_batch_publishes_on_drop_and_not_when_clean() {
    let mut store = pod_store();
    let l = store.lister();
    {
        let mut batch = store.batch();
        batch.replace(vec![arc_pod("ns", "a", &[])]).unwrap();
        assert!(batch.delete(&Pod::default()).is_err());
    }
    assert_eq!(l.len(), 1);
    let v = l.version();
    {
        let mut batch = store.batch();
        assert!(batch.delete_key("ns/missing").is_none());
    }
    assert_eq!(
        l.version(),
        v,
        "a batch that changed nothing publishes nothing"
    );
}

#[test]
fn i6_lister_is_the_fifos_known_objects() {
    let mut store = pod_store();
    store.add(arc_pod("ns", "a", &[])).unwrap();
    let known: Box<dyn KnownObjects<Pod>> = Box::new(store.lister());
    assert_eq!(sorted_keys(known.list_keys()), ["ns/a"]);
    assert!(known.get_by_key("ns/a").is_some());
}

#[test]
fn i6_lister_and_snapshot_are_send_sync_and_cheap_to_clone() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Lister<Pod>>();
    assert_send_sync::<Snapshot<Pod>>();
    assert_send_sync::<NamespacedLister<Pod>>();
    fn assert_send<T: Send>() {}
    assert_send::<Store<Pod>>();
}

/// Readers never see a half-applied write: two reader threads check every snapshot while the
/// writer alternates atomic replaces, batches and single updates. Every generation `g` is
/// written whole (all objects labelled `gen=g`), so a snapshot mixing generations, or an
/// index naming a key its own snapshot lacks, would fail the checks.
#[test]
fn i5_i6_replace_is_atomic_for_readers_under_concurrent_writes() {
    const OBJECTS: usize = 40;
    const GENERATIONS: usize = 300;
    const READS: usize = 3_000;

    fn generation(g: usize) -> Vec<Arc<Pod>> {
        // Odd generations use a shifted name range: replace also adds and removes keys.
        let offset = if g % 2 == 1 { OBJECTS / 2 } else { 0 };
        (0..OBJECTS)
            .map(|i| {
                let ns = format!("ns{}", i % 3);
                arc_pod(&ns, &format!("p{}", i + offset), &[("gen", &g.to_string())])
            })
            .collect()
    }

    let mut store = Store::new(
        default_key_func(),
        indexers(vec![
            (NAMESPACE_INDEX, namespace_index_func()),
            ("gen", label_index("gen")),
        ]),
    );
    store.replace(generation(0)).unwrap();
    let lister = store.lister();

    let readers: Vec<_> = (0..2)
        .map(|_| {
            let lister = lister.clone();
            std::thread::spawn(move || {
                let mut versions = BTreeSet::new();
                for i in 0..READS {
                    let snap = lister.snapshot();
                    versions.insert(snap.version());
                    assert_eq!(snap.len(), OBJECTS);
                    let gens = snap.list_index_func_values("gen");
                    assert_eq!(gens.len(), 1, "one generation per version: {gens:?}");
                    let keys = snap.index_keys("gen", &gens[0]).unwrap();
                    assert_eq!(keys.len(), OBJECTS);
                    for key in &keys {
                        let obj = snap.get_by_key(key.as_str()).expect("indexed key resolves");
                        let labels = obj.metadata.labels.as_ref().unwrap();
                        assert_eq!(labels["gen"], gens[0]);
                    }
                    let per_ns: usize = (0..3)
                        .map(|n| {
                            snap.by_index(NAMESPACE_INDEX, &format!("ns{n}"))
                                .unwrap()
                                .len()
                        })
                        .sum();
                    assert_eq!(per_ns, OBJECTS);
                    // Live calls each read one whole version too.
                    let live = lister.list();
                    assert_eq!(live.len(), OBJECTS);
                    let g = &live[0].metadata.labels.as_ref().unwrap()["gen"];
                    assert!(
                        live.iter()
                            .all(|o| &o.metadata.labels.as_ref().unwrap()["gen"] == g)
                    );
                    let _ = lister.get("ns0", &format!("p{}", i % OBJECTS));
                }
                versions.len()
            })
        })
        .collect();

    for g in 1..=GENERATIONS {
        match g % 3 {
            0 => {
                store.replace(generation(g)).unwrap();
            }
            1 => {
                let mut batch = store.batch();
                batch.replace(Vec::new()).unwrap();
                for obj in generation(g) {
                    batch.add(obj).unwrap();
                }
            }
            _ => {
                // Key set of g-1 moved to g's, published once.
                let mut batch = store.batch();
                for obj in generation(g - 1) {
                    assert!(batch.delete(&obj).unwrap().is_some());
                }
                for obj in generation(g) {
                    batch.update(obj).unwrap();
                }
                batch.commit();
            }
        }
        // Single updates that keep the generation: published one by one.
        for obj in generation(g).into_iter().take(5) {
            store.update(obj).unwrap();
        }
    }
    for r in readers {
        let seen = r.join().expect("reader saw a consistent store");
        assert!(seen >= 1);
    }
}

#[test]
fn i2_put_keyed_maintains_indices_like_update() {
    let mut store = Store::new(
        default_key_func::<Pod>(),
        indexers(vec![("by_user", users_index())]),
    );
    let lister = store.lister();
    let key = ObjectKey::new(Some("ns"), "a");
    let mut batch = store.batch();
    assert!(
        batch
            .put_keyed(key.clone(), users_pod("a", "alice"))
            .is_none()
    );
    let old = batch.put_keyed(key.clone(), users_pod("a", "bob"));
    assert_eq!(
        old.and_then(|o| o.metadata.name.clone()).as_deref(),
        Some("a")
    );
    batch.commit();
    assert!(
        lister.index_keys("by_user", "alice").unwrap().is_empty(),
        "stale value dropped"
    );
    assert_eq!(
        sorted_keys(lister.index_keys("by_user", "bob").unwrap()),
        vec!["ns/a"]
    );
    assert_eq!(
        lister.get("ns", "a").map(|p| p.metadata.name.clone()),
        Some(Some("a".into()))
    );
}
