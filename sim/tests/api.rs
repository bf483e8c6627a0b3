//! The sim through kube's typed and dynamic `Api`: CRUD, subresources, selectors, pagination,
//! 409/410 paths, watch resume, bookmarks and watch-list.

use crate::common;

use std::time::Duration;

use crate::common::next;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kinformer_sim::{CustomResource, Scope, Sim, SimConfig, Verb};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::params::VersionMatch;
use serde_json::json;

fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "img"}]}
    }))
    .unwrap()
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

fn code(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn rv<K: kube::Resource>(o: &K) -> String {
    o.meta().resource_version.clone().unwrap()
}

#[tokio::test]
async fn version_and_discovery() {
    let sim = Sim::start(SimConfig {
        custom_resources: vec![CustomResource::new(
            "example.com",
            "v1",
            "Widget",
            "widgets",
            Scope::Namespaced,
        )],
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let client = sim.client();
    let v = client.apiserver_version().await.unwrap();
    assert_eq!(v.major, "1");
    let discovery = kube::Discovery::new(client).run().await.unwrap();
    let mut found = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            found.push((ar.group.clone(), ar.plural.clone(), caps.scope.clone()));
            if ar.plural == "deployments" {
                assert!(
                    caps.subresources
                        .iter()
                        .any(|(s, _)| s.plural == "deployments/scale" || s.plural == "scale")
                );
            }
        }
    }
    for (g, p) in [
        ("", "pods"),
        ("", "nodes"),
        ("apps", "deployments"),
        ("example.com", "widgets"),
    ] {
        assert!(
            found.iter().any(|(fg, fp, _)| fg == g && fp == p),
            "{g}/{p} missing from {found:?}"
        );
    }
}

#[tokio::test]
async fn crud_and_conflicts() {
    let sim = common::sim().await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    let created = pods
        .create(&PostParams::default(), &pod("p1", json!({"app": "web"})))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.is_some() && meta.creation_timestamp.is_some());
    assert_eq!(
        created.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    assert_eq!(rv(&created).parse::<u64>().unwrap(), sim.resource_version());

    let (c, r) = code(
        pods.create(&PostParams::default(), &pod("p1", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((c, r.as_str()), (409, "AlreadyExists"));
    let (c, r) = code(pods.get("missing").await.unwrap_err());
    assert_eq!((c, r.as_str()), (404, "NotFound"));

    // Replace with the current RV works; with the stale one it conflicts.
    let mut p = pods.get("p1").await.unwrap();
    let stale = p.clone();
    p.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("v".into(), "2".into());
    let replaced = pods
        .replace("p1", &PostParams::default(), &p)
        .await
        .unwrap();
    assert!(rv(&replaced).parse::<u64>().unwrap() > rv(&stale).parse::<u64>().unwrap());
    let (c, r) = code(
        pods.replace("p1", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((c, r.as_str()), (409, "Conflict"));

    // Merge, JSON and strategic-merge patches.
    let pp = PatchParams::default();
    let m = pods
        .patch(
            "p1",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"m": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(m.metadata.labels.as_ref().unwrap()["m"], "1");
    let jp: json_patch::Patch = serde_json::from_value(
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"j": "1"}}]),
    )
    .unwrap();
    let j = pods.patch("p1", &pp, &Patch::Json::<()>(jp)).await.unwrap();
    assert_eq!(j.metadata.annotations.as_ref().unwrap()["j"], "1");
    let s = pods
        .patch(
            "p1",
            &pp,
            &Patch::Strategic(json!({"metadata": {"labels": {"s": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(s.metadata.labels.as_ref().unwrap()["s"], "1");
    // A patch carrying a stale resourceVersion conflicts.
    let (c, _) = code(
        pods.patch(
            "p1",
            &pp,
            &Patch::Merge(json!({"metadata": {"resourceVersion": rv(&stale)}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(c, 409);
    // A failing JSON-patch test op is 422.
    let bad: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/metadata/name", "value": "nope"}]))
            .unwrap();
    let (c, _) = code(
        pods.patch("p1", &pp, &Patch::Json::<()>(bad))
            .await
            .unwrap_err(),
    );
    assert_eq!(c, 422);
    // Server-side apply creates and updates.
    let applied = pods
        .patch("p2", &PatchParams::apply("test"), &Patch::Apply(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p2"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})))
        .await
        .unwrap();
    assert_eq!(applied.metadata.name.as_deref(), Some("p2"));

    // Invalid name: 422.
    let (c, r) = code(
        pods.create(&PostParams::default(), &pod("Bad_Name", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((c, r.as_str()), (422, "Invalid"));

    // Delete.
    pods.delete("p1", &DeleteParams::default()).await.unwrap();
    let (c, _) = code(pods.get("p1").await.unwrap_err());
    assert_eq!(c, 404);
    let (c, _) = code(
        pods.delete("p1", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(c, 404);
    assert_eq!(sim.requests().count("pods", Verb::Create), 3);
    assert_eq!(sim.requests().count("pods", Verb::Delete), 2);
}

#[tokio::test]
async fn generation_status_and_scale() {
    let sim = common::sim().await;
    let deploys: Api<Deployment> = Api::namespaced(sim.client(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
        "status": {"replicas": 99}
    }))
    .unwrap();
    let d = deploys.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    assert_eq!(
        d.status.as_ref().and_then(|s| s.replicas),
        None,
        "status is dropped on create"
    );

    // Status through the subresource: only status changes.
    let st = deploys
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"replicas": 1, "readyReplicas": 1}, "spec": {"replicas": 50}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(st.status.as_ref().unwrap().ready_replicas, Some(1));
    assert_eq!(st.spec.replicas, Some(1));
    assert_eq!(st.metadata.generation, Some(1));
    // Main resource ignores status; spec change bumps generation.
    let mut upd = st.clone();
    upd.spec.replicas = Some(2);
    upd.status.as_mut().unwrap().ready_replicas = Some(7);
    let upd = deploys
        .replace("web", &PostParams::default(), &upd)
        .await
        .unwrap();
    assert_eq!(upd.metadata.generation, Some(2));
    assert_eq!(upd.status.as_ref().unwrap().ready_replicas, Some(1));
    // Metadata-only change keeps the generation.
    let lab = deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(lab.metadata.generation, Some(2));
    // replace_status.
    let mut s2 = lab.clone();
    s2.status.as_mut().unwrap().replicas = Some(2);
    let s2 = deploys
        .replace_status("web", &PostParams::default(), &s2)
        .await
        .unwrap();
    assert_eq!(s2.status.as_ref().unwrap().replicas, Some(2));

    // Scale subresource.
    let scale = deploys.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(
        scale.status.as_ref().unwrap().selector.as_deref(),
        Some("app=web")
    );
    let scaled = deploys
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(5));
    let d = deploys.get("web").await.unwrap();
    assert_eq!(d.spec.replicas, Some(5));
    assert_eq!(d.metadata.generation, Some(3));
    let mut sc = deploys.get_scale("web").await.unwrap();
    sc.spec.as_mut().unwrap().replicas = Some(0);
    let sc = deploys
        .replace_scale("web", &PostParams::default(), &sc)
        .await
        .unwrap();
    assert_eq!(sc.spec.unwrap().replicas, Some(0));
    assert_eq!(sim.requests().count("deployments/scale", Verb::Patch), 1);
}

#[tokio::test]
async fn finalizers_keep_object_until_removed() {
    let sim = common::sim().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let mut c = cm("held");
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let c = cms.create(&PostParams::default(), &c).await.unwrap();
    let mut w = cms
        .watch(&WatchParams::default(), &rv(&c))
        .await
        .unwrap()
        .boxed();
    cms.delete("held", &DeleteParams::default()).await.unwrap();
    let marked = cms.get("held").await.unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Modified(o) => assert!(o.metadata.deletion_timestamp.is_some()),
        e => panic!("expected MODIFIED, got {e:?}"),
    }
    // Deleting again changes nothing.
    cms.delete("held", &DeleteParams::default()).await.unwrap();
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Deleted(o) => assert_eq!(o.metadata.name.as_deref(), Some("held")),
        e => panic!("expected DELETED, got {e:?}"),
    }
    assert_eq!(code(cms.get("held").await.unwrap_err()).0, 404);
}

#[tokio::test]
async fn label_and_field_selectors() {
    let sim = common::sim().await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    for (n, labels) in [
        ("a", json!({"app": "web", "tier": "fe"})),
        ("b", json!({"app": "web", "tier": "be"})),
        ("c", json!({"app": "db"})),
        ("d", json!({})),
    ] {
        pods.create(&PostParams::default(), &pod(n, labels))
            .await
            .unwrap();
    }
    let names = |l: kube::core::ObjectList<Pod>| {
        l.items
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect::<Vec<_>>()
    };
    let cases = [
        ("app=web", vec!["a", "b"]),
        ("app==web", vec!["a", "b"]),
        ("app!=web", vec!["c", "d"]),
        ("tier in (fe,xx)", vec!["a"]),
        ("tier notin (fe)", vec!["b", "c", "d"]),
        ("tier", vec!["a", "b"]),
        ("!tier", vec!["c", "d"]),
        ("app=web,tier=be", vec!["b"]),
    ];
    for (sel, want) in cases {
        let got = names(pods.list(&ListParams::default().labels(sel)).await.unwrap());
        assert_eq!(got, want, "selector {sel}");
    }
    let got = names(
        pods.list(&ListParams::default().fields("metadata.name=c"))
            .await
            .unwrap(),
    );
    assert_eq!(got, vec!["c"]);
    let got = names(
        pods.list(&ListParams::default().fields("metadata.name!=c,metadata.namespace=default"))
            .await
            .unwrap(),
    );
    assert_eq!(got, vec!["a", "b", "d"]);
    let got = names(
        pods.list(&ListParams::default().fields("status.phase=Pending"))
            .await
            .unwrap(),
    );
    assert_eq!(got.len(), 4);
    let (c, r) = code(
        pods.list(&ListParams::default().labels("app in ("))
            .await
            .unwrap_err(),
    );
    assert_eq!((c, r.as_str()), (400, "BadRequest"));
    let (c, _) = code(
        pods.list(&ListParams::default().fields("spec.bogus=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!(c, 400);
    // Other namespaces and cluster-wide lists.
    let other: Api<Pod> = Api::namespaced(sim.client(), "other");
    other
        .create(&PostParams::default(), &pod("z", json!({"app": "web"})))
        .await
        .unwrap();
    assert_eq!(
        names(pods.list(&ListParams::default()).await.unwrap()).len(),
        4
    );
    let all: Api<Pod> = Api::all(sim.client());
    assert_eq!(
        names(
            all.list(&ListParams::default().labels("app=web"))
                .await
                .unwrap()
        )
        .len(),
        3
    );
    let ns: Api<Namespace> = Api::all(sim.client());
    assert!(ns.get("other").await.is_ok(), "namespace auto-created");
}

#[tokio::test]
async fn pagination_is_consistent_and_expires() {
    let sim = Sim::start(SimConfig {
        watch_cache_size: 20,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    for i in 0..25 {
        cms.create(&PostParams::default(), &cm(&format!("cm-{i:02}")))
            .await
            .unwrap();
    }
    let p1 = cms.list(&ListParams::default().limit(10)).await.unwrap();
    assert_eq!(p1.items.len(), 10);
    assert_eq!(p1.metadata.remaining_item_count, Some(15));
    let token = p1.metadata.continue_.clone().unwrap();
    let list_rv = p1.metadata.resource_version.clone().unwrap();
    // Changes after the first page do not show up in later pages (snapshot at list_rv).
    cms.delete("cm-15", &DeleteParams::default()).await.unwrap();
    cms.create(&PostParams::default(), &cm("cm-99"))
        .await
        .unwrap();
    let p2 = cms
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(
        p2.metadata.resource_version.as_deref(),
        Some(list_rv.as_str())
    );
    let p3 = cms
        .list(
            &ListParams::default()
                .limit(10)
                .continue_token(p2.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert!(p3.metadata.continue_.is_none());
    let all: Vec<String> = p1
        .items
        .iter()
        .chain(&p2.items)
        .chain(&p3.items)
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    let want: Vec<String> = (0..25).map(|i| format!("cm-{i:02}")).collect();
    assert_eq!(all, want);
    // resourceVersion=0 ignores the limit (kube drops RV=0 when a limit is set, so go raw).
    let (status, whole) = common::get_json(
        &sim,
        "/api/v1/namespaces/default/configmaps?limit=3&resourceVersion=0",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(whole["items"].as_array().unwrap().len(), 25);
    assert!(whole["metadata"].get("continue").is_none());
    assert!(
        whole["items"][0].get("kind").is_none(),
        "built-in list items carry no kind, like kube-apiserver"
    );
    // Exact: the state at an old RV.
    let exact = cms
        .list(
            &ListParams::default()
                .at(&list_rv)
                .matching(VersionMatch::Exact),
        )
        .await
        .unwrap();
    assert_eq!(exact.items.len(), 25);
    assert!(
        exact
            .items
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some("cm-15"))
    );
    // Push the token's RV out of the 20-event window: 410 Expired.
    for i in 0..25 {
        cms.patch(
            &format!("cm-{i:02}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "x"}})),
        )
        .await
        .ok();
    }
    let (c, r) = code(
        cms.list(&ListParams::default().limit(10).continue_token(&token))
            .await
            .unwrap_err(),
    );
    assert_eq!((c, r.as_str()), (410, "Expired"));
    assert_eq!(sim.faults().counters().expired_continues, 1);
    // List metadata carries the current RV.
    let now = cms.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        now.metadata.resource_version.unwrap(),
        sim.resource_version().to_string()
    );
}

#[tokio::test]
async fn watch_replays_from_rv_then_streams_live() {
    let sim = common::sim().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let first = cms
        .create(&PostParams::default(), &cm("one"))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("two"))
        .await
        .unwrap();
    cms.patch(
        "one",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    let mut w = cms
        .watch(&WatchParams::default(), &rv(&first))
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    for _ in 0..2 {
        match next(&mut w).await.unwrap().unwrap() {
            WatchEvent::Added(o) => seen.push(format!("ADDED {}", o.metadata.name.unwrap())),
            WatchEvent::Modified(o) => seen.push(format!("MODIFIED {}", o.metadata.name.unwrap())),
            e => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(seen, vec!["ADDED two", "MODIFIED one"]);
    cms.delete("two", &DeleteParams::default()).await.unwrap();
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Deleted(o) => {
            assert_eq!(o.metadata.name.as_deref(), Some("two"));
            assert_eq!(
                rv(&o),
                sim.resource_version().to_string(),
                "DELETED carries the deletion RV"
            );
        }
        e => panic!("unexpected {e:?}"),
    }
}

#[tokio::test]
async fn watch_from_zero_sends_synthetic_added() {
    let sim = common::sim().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    for n in ["a", "b"] {
        cms.create(&PostParams::default(), &cm(n)).await.unwrap();
    }
    let mut w = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    for want in ["a", "b"] {
        match next(&mut w).await.unwrap().unwrap() {
            WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some(want)),
            e => panic!("unexpected {e:?}"),
        }
    }
    // kube's WatchParams allow bookmarks, and 1.34 makes a watch from "0" a watch-list
    // (SetListOptionsDefaults): the initial events end with the annotated bookmark.
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Bookmark(b) => assert!(
            b.metadata
                .annotations
                .contains_key("k8s.io/initial-events-end")
        ),
        e => panic!("expected the initial-events-end BOOKMARK, got {e:?}"),
    }
    cms.create(&PostParams::default(), &cm("c")).await.unwrap();
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("c")),
        e => panic!("unexpected {e:?}"),
    }
}

#[tokio::test]
async fn watch_older_than_window_gets_410() {
    let sim = Sim::start(SimConfig {
        watch_cache_size: 3,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let first = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    for i in 0..5 {
        cms.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"i": i.to_string()}})),
        )
        .await
        .unwrap();
    }
    let mut w = cms
        .watch(&WatchParams::default(), &rv(&first))
        .await
        .unwrap()
        .boxed();
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Error(s) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        e => panic!("expected ERROR 410, got {e:?}"),
    }
    assert!(
        next(&mut w).await.is_none(),
        "the stream closes after the error"
    );
    assert_eq!(sim.faults().counters().too_old_watches, 1);
}

#[tokio::test]
async fn bookmarks_carry_the_resource_version() {
    let sim = Sim::start(SimConfig {
        bookmark_interval: Duration::from_millis(20),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let c = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    // Another kind's change moves the global RV; the bookmark may carry it.
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap();
    let mut w = cms
        .watch(&WatchParams::default(), &rv(&c))
        .await
        .unwrap()
        .boxed();
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Bookmark(b) => {
            let brv: u64 = b.metadata.resource_version.parse().unwrap();
            assert!(brv >= rv(&c).parse::<u64>().unwrap());
            assert_eq!(b.types.kind, "ConfigMap");
        }
        e => panic!("expected BOOKMARK, got {e:?}"),
    }
    // Without allowWatchBookmarks there are none: the next event is the real one.
    let mut w2 = cms
        .watch(&WatchParams::default().disable_bookmarks(), &rv(&c))
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    match next(&mut w2).await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("b")),
        e => panic!("expected ADDED, got {e:?}"),
    }
}

#[tokio::test]
async fn watch_list_ends_initial_events_with_annotated_bookmark() {
    let sim = common::sim().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    for n in ["a", "b", "c"] {
        cms.create(&PostParams::default(), &cm(n)).await.unwrap();
    }
    let at = sim.resource_version();
    let mut w = cms
        .watch(&WatchParams::streaming_lists(), "0")
        .await
        .unwrap()
        .boxed();
    for want in ["a", "b", "c"] {
        match next(&mut w).await.unwrap().unwrap() {
            WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some(want)),
            e => panic!("unexpected {e:?}"),
        }
    }
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Bookmark(b) => {
            assert_eq!(
                b.metadata
                    .annotations
                    .get("k8s.io/initial-events-end")
                    .map(String::as_str),
                Some("true")
            );
            assert_eq!(b.metadata.resource_version, at.to_string());
        }
        e => panic!("expected the initial-events-end BOOKMARK, got {e:?}"),
    }
    cms.create(&PostParams::default(), &cm("d")).await.unwrap();
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("d")),
        e => panic!("unexpected {e:?}"),
    }
}

#[tokio::test]
async fn watch_timeout_ends_cleanly() {
    let sim = common::sim().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let mut w = cms
        .watch(&WatchParams::default().timeout(1).disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();
    assert!(
        next(&mut w).await.is_none(),
        "stream ends without error at timeoutSeconds"
    );
    common::wait_open_watches(&sim, 0).await;
}

#[tokio::test]
async fn watch_selectors_turn_transitions_into_added_and_deleted() {
    let sim = common::sim().await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    let p = pods
        .create(&PostParams::default(), &pod("p", json!({"app": "a"})))
        .await
        .unwrap();
    let mut w = pods
        .watch(
            &WatchParams::default().labels("app=a").disable_bookmarks(),
            &rv(&p),
        )
        .await
        .unwrap()
        .boxed();
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "b"}}})),
    )
    .await
    .unwrap();
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Deleted(o) => {
            assert_eq!(
                o.metadata.labels.as_ref().unwrap()["app"],
                "a",
                "DELETED carries the last matching state"
            );
            assert_eq!(rv(&o), sim.resource_version().to_string());
        }
        e => panic!("expected DELETED, got {e:?}"),
    }
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"x": "1"}}})),
    )
    .await
    .unwrap();
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "a"}}})),
    )
    .await
    .unwrap();
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.annotations.unwrap()["x"], "1"),
        e => panic!("expected ADDED, got {e:?}"),
    }
    // Namespace scoping: a watch of `default` does not see `other`.
    let other: Api<Pod> = Api::namespaced(sim.client(), "other");
    other
        .create(&PostParams::default(), &pod("q", json!({"app": "a"})))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("r", json!({"app": "a"})))
        .await
        .unwrap();
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("r")),
        e => panic!("expected ADDED r, got {e:?}"),
    }
    // Field selector on a watch.
    let mut wf = pods
        .watch(
            &WatchParams::default()
                .fields("metadata.name=r")
                .disable_bookmarks(),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    match next(&mut wf).await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("r")),
        e => panic!("expected ADDED r, got {e:?}"),
    }
}

#[tokio::test]
async fn cluster_scoped_and_custom_resources() {
    let sim = Sim::start(SimConfig {
        custom_resources: vec![
            CustomResource::new("example.com", "v1", "Widget", "widgets", Scope::Namespaced)
                .with_status_subresource(),
            CustomResource::new("example.com", "v1", "Gadget", "gadgets", Scope::Cluster),
        ],
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let nodes: Api<Node> = Api::all(sim.client());
    let n: Node =
        serde_json::from_value(json!({"metadata": {"name": "n1"}, "status": {"phase": "Running"}}))
            .unwrap();
    nodes.create(&PostParams::default(), &n).await.unwrap();
    let got = nodes.get("n1").await.unwrap();
    assert!(got.metadata.namespace.is_none());
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let widgets: Api<DynamicObject> = Api::namespaced_with(sim.client(), "default", &ar);
    let w: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"size": 1}, "status": {"ok": true}
    }))
    .unwrap();
    let created = widgets.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.data.get("status").is_none(),
        "status dropped on create with a status subresource"
    );
    let st = widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ok": true}})),
        )
        .await
        .unwrap();
    assert_eq!(st.data["status"]["ok"], true);
    let listed = widgets.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        listed.items[0].types.as_ref().map(|t| t.kind.as_str()),
        Some("Widget"),
        "custom list items carry kind"
    );

    let gar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Gadget"),
        "gadgets",
    );
    let gadgets: Api<DynamicObject> = Api::all_with(sim.client(), &gar);
    let g: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g1"}}),
    )
    .unwrap();
    gadgets.create(&PostParams::default(), &g).await.unwrap();
    let mut gw = gadgets
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    match next(&mut gw).await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("g1")),
        e => panic!("unexpected {e:?}"),
    }
}

#[tokio::test]
async fn metadata_only_list_and_watch() {
    let sim = common::sim().await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    pods.create(&PostParams::default(), &pod("m", json!({"app": "x"})))
        .await
        .unwrap();
    let l = pods.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(l.items.len(), 1);
    assert_eq!(l.items[0].metadata.labels.as_ref().unwrap()["app"], "x");
    let mut w = pods
        .watch_metadata(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    match next(&mut w).await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("m")),
        e => panic!("unexpected {e:?}"),
    }
}

#[tokio::test]
async fn delete_collection_and_namespace_cascade() {
    let sim = common::sim().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "team");
    for n in ["a", "b", "c"] {
        let mut c = cm(n);
        c.metadata.labels = Some([("del".to_string(), (n != "c").to_string())].into());
        cms.create(&PostParams::default(), &c).await.unwrap();
    }
    let out = cms
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("del=true"),
        )
        .await
        .unwrap();
    let deleted = out.left().expect("a list of deleted objects");
    assert_eq!(deleted.items.len(), 2);
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    let ns: Api<Namespace> = Api::all(sim.client());
    // The namespace goes through Terminating; the namespace controller stand-in empties it
    // and then removes it.
    let terminating = ns
        .delete("team", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the namespace, terminating");
    assert_eq!(
        terminating.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    kinformer_sim::wait_until_async(common::DEADLINE, || async {
        ns.get_opt("team").await.unwrap().is_none()
    })
    .await
    .expect("the namespace is removed");
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        0
    );
}

#[tokio::test]
async fn in_process_object_api() {
    let sim = common::sim().await;
    sim.create_object(
        "pods",
        Some("default"),
        json!({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    )
    .unwrap();
    let cur = sim
        .get_object("pods", Some("default"), "x")
        .unwrap()
        .unwrap();
    let mut st = cur.clone();
    st["status"] = json!({"phase": "Running"});
    sim.replace_status("pods", Some("default"), "x", st)
        .unwrap();
    sim.patch_object(
        "pods",
        Some("default"),
        "x",
        &json!({"metadata": {"labels": {"a": "b"}}}),
    )
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    let p = pods.get("x").await.unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(sim.object_count("pods").unwrap(), 1);
    assert!(sim.delete_object("pods", Some("default"), "x").unwrap());
    assert!(matches!(
        sim.create_object("nope", None, json!({})),
        Err(kinformer_sim::SimError::UnknownResource(_))
    ));
    // Seeding keeps the status it is given (the HTTP API would reset it).
    let seeded = sim
        .create_object(
            "pods",
            Some("default"),
            json!({"metadata": {"name": "y"}, "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Succeeded"}}),
        )
        .unwrap();
    assert_eq!(seeded["status"]["phase"], "Succeeded");
    let names: Vec<_> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(names, vec!["y"]);
}

#[tokio::test]
async fn single_object_watch_path() {
    let sim = common::sim().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    for n in ["a", "b"] {
        cms.create(&PostParams::default(), &cm(n)).await.unwrap();
    }
    let (status, mut w) =
        common::raw_watch(&sim, "/api/v1/namespaces/default/configmaps/b?watch=true").await;
    assert_eq!(status, 200);
    let e = common::next_event(&mut w).await;
    assert_eq!(e["object"]["metadata"]["name"], "b");
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await
    .unwrap();
    cms.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await
    .unwrap();
    let e = common::next_event(&mut w).await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("MODIFIED"), Some("b"))
    );
    assert_eq!(sim.requests().count("configmaps", Verb::Watch), 1);
}
