//! The trace sink over HTTP against the simulated API server (docs/semantics.md T1–T3; the
//! file format is docs/trace-format.md).
//!
//! The sink is process-wide (one per process) and the tests of this file share a process, so
//! they take turns: each holds [`SINK`] for its whole run.

mod common;

use std::{
    collections::BTreeMap,
    path::Path,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use common::*;
use k8s_openapi::{
    ByteString,
    api::core::v1::{ConfigMap, Secret},
};
use kinformer::notification::Notification;
use kinformer_actors::{
    ListenerConfig, OverflowPolicy, ResyncPeriod, SharedIndexInformer, handler_fn,
    trace::{TraceSink, TraceSinkConfig},
};
use kube::{
    Api,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::Value;

/// One sink at a time in this process.
static SINK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// ConfigMaps, not Pods: a Pod's deletion may be graceful (an update first), a ConfigMap's is
/// one DELETED event.
fn cm(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("demo".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

/// Every line of a closed trace file, parsed; header first and `end` last.
fn read_trace(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("trace file readable");
    let lines: Vec<Value> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("line {} parses: {e}: {l}", i + 1))
        })
        .collect();
    let header = lines.first().expect("a header line");
    assert_eq!(header["type"], "header");
    assert_eq!(header["format"], "kinformer-trace");
    assert_eq!(header["v"], 1);
    assert_eq!(lines.last().expect("an end line")["type"], "end");
    assert_eq!(
        lines.iter().filter(|l| l["type"] == "end").count(),
        1,
        "one end line"
    );
    lines
}

/// The hop lines of the object `name`, grouped by trace id, in file order.
fn traces_of<'a>(lines: &'a [Value], name: &str) -> BTreeMap<String, Vec<&'a Value>> {
    let mut traces: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for l in lines
        .iter()
        .filter(|l| l["type"] == "hop" && l["name"] == name)
    {
        let trace = l["trace"].as_str().expect("trace id").to_owned();
        assert_eq!(trace.len(), 16, "16 hex digits: {l}");
        assert_ne!(trace, "0000000000000000", "every hop is traced (T1): {l}");
        traces.entry(trace).or_default().push(l);
    }
    traces
}

/// Asserts that one trace of the object went through the whole pipeline, in order, with
/// these `what`s (reflector, fifo, indexer, listener, handler), non-decreasing times, the
/// informer's instance on the first three hops and the listener's on the last two.
fn assert_path(
    traces: &BTreeMap<String, Vec<&Value>>,
    whats: [&str; 5],
    informer: &str,
    listener: &str,
) {
    let hops = ["reflector", "fifo", "indexer", "listener", "handler"];
    let found = traces
        .values()
        .find(|t| t.len() == 5 && t.iter().zip(whats).all(|(l, w)| l["what"] == w));
    let Some(path) = found else {
        panic!("no trace with {whats:?}; traces: {traces:#?}");
    };
    for (i, (l, hop)) in path.iter().zip(hops).enumerate() {
        assert_eq!(l["hop"], hop, "pipeline order: {path:#?}");
        let inst = if i < 3 { informer } else { listener };
        assert_eq!(l["inst"], inst, "{l}");
        if i > 0 {
            assert!(
                l["t"].as_u64() >= path[i - 1]["t"].as_u64(),
                "non-decreasing times: {path:#?}"
            );
        }
    }
    assert!(
        path[4]["dur"].as_u64().is_some(),
        "the handler's duration: {}",
        path[4]
    );
}

#[actix::test]
async fn t1_t2_one_objects_hops_in_pipeline_order() {
    let _turn = SINK.lock().await;
    let sim = sim().await;
    let client = sim.client();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "demo");
    maps.create(&PostParams::default(), &cm("steady"))
        .await
        .expect("create");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("trace.jsonl");
    let sink = TraceSink::start(&path).expect("sink starts");

    let mut config = fast_config();
    config.resync = Some(Duration::from_secs(1));
    let informer =
        SharedIndexInformer::<ConfigMap>::with_config(client.clone(), Some("demo"), config);
    let seen = Arc::new(AtomicU64::new(0));
    let resynced = Arc::new(AtomicU64::new(0));
    let (s, r) = (Arc::clone(&seen), Arc::clone(&resynced));
    let handler = handler_fn(move |n: &Notification<ConfigMap>| {
        if n.is_resync() {
            r.fetch_add(1, Ordering::Relaxed);
        } else if n.object().metadata.name.as_deref() == Some("web-1") {
            s.fetch_add(1, Ordering::Relaxed);
        }
    });
    // Unbounded: every notification reaches the handler. (Under Coalesce, an update still
    // buffered when a resync of the same object arrives is merged with it, and the merged
    // notification carries the newest trace id: the update's trace would end at `listener`.)
    let listener = ListenerConfig {
        name: Some("follower".into()),
        resync: ResyncPeriod::Default,
        policy: OverflowPolicy::Unbounded,
        ..ListenerConfig::default()
    };
    informer
        .add_event_handler_with(handler, listener)
        .await
        .expect("handler");
    start_synced(&informer).await;
    watching(&sim).await;

    maps.create(&PostParams::default(), &cm("web-1"))
        .await
        .expect("create");
    eventually("the add is handled", || seen.load(Ordering::Relaxed) == 1).await;
    let patch = serde_json::json!({"data": {"touched": "1"}});
    maps.patch("web-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("update");
    eventually("the update is handled", || {
        seen.load(Ordering::Relaxed) == 2
    })
    .await;
    maps.delete("web-1", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("the delete is handled", || {
        seen.load(Ordering::Relaxed) == 3
    })
    .await;
    eventually("a resync is handled", || {
        resynced.load(Ordering::Relaxed) >= 1
    })
    .await;
    informer.shutdown().await;
    let stats = sink.close().expect("sink closes");

    let lines = read_trace(&path);
    let end = lines.last().expect("end");
    assert_eq!(end["written"].as_u64(), Some(stats.written));
    assert_eq!(end["dropped"].as_u64(), Some(0));
    let hops = lines.iter().filter(|l| l["type"] != "depth").count();
    assert!(
        stats.written as usize >= hops - 2,
        "written counts hop and depth lines"
    );

    let web = traces_of(&lines, "web-1");
    let informer_inst = "v1/ConfigMap ns=demo";
    let follower = "follower";
    let watch = ["added", "queued", "added", "add", "handled"];
    assert_path(&web, watch, informer_inst, follower);
    let update = ["modified", "queued", "updated", "update", "handled"];
    assert_path(&web, update, informer_inst, follower);
    let delete = ["deleted", "queued", "deleted", "delete", "handled"];
    assert_path(&web, delete, informer_inst, follower);
    let first = web.values().flatten().next().expect("a hop");
    assert_eq!(first["kind"], "ConfigMap");
    assert_eq!(first["ns"], "demo");
    assert!(first.get("body").is_none(), "no bodies by default (T3)");

    let steady = traces_of(&lines, "steady");
    let listed = ["listed", "replaced", "replaced", "add", "handled"];
    assert_path(&steady, listed, informer_inst, follower);
    // A resync's id is born in the indexer (T1): indexer `sync`, then listener and handler.
    let resync = steady
        .values()
        .find(|t| t[0]["hop"] == "indexer" && t[0]["what"] == "sync")
        .unwrap_or_else(|| panic!("a resync trace: {steady:#?}"));
    let path: Vec<_> = resync.iter().map(|l| (&l["hop"], &l["what"])).collect();
    assert_eq!(
        path,
        [
            (&"indexer".into(), &"sync".into()),
            (&"listener".into(), &"update".into()),
            (&"handler".into(), &"handled".into())
        ]
    );

    let depth = |hop: &str, inst: &str| {
        lines
            .iter()
            .any(|l| l["type"] == "depth" && l["hop"] == hop && l["inst"] == inst)
    };
    assert!(depth("fifo", informer_inst), "FIFO depth samples");
    assert!(depth("listener", follower), "listener buffer depth samples");
}

/// T1, a relist: an object deleted while the informer could not watch is missing from the
/// relist, and the tombstone the FIFO makes for it gets a trace id of its own, born in the
/// indexer (`indexer deleted → listener delete → handler handled`); the relist's own items
/// are traced from the reflector as `listed`.
#[actix::test]
async fn t1_a_relists_tombstone_is_traced_from_the_indexer() {
    let _turn = SINK.lock().await;
    let sim = sim().await;
    let client = sim.client();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "demo");
    for name in ["kept", "gone"] {
        maps.create(&PostParams::default(), &cm(name))
            .await
            .expect("create");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("trace.jsonl");
    let sink = TraceSink::start(&path).expect("sink starts");

    let informer =
        SharedIndexInformer::<ConfigMap>::with_config(client.clone(), Some("demo"), fast_config());
    let deletes = Arc::new(AtomicU64::new(0));
    let d = Arc::clone(&deletes);
    informer
        .add_event_handler_with(
            handler_fn(move |n: &Notification<ConfigMap>| {
                if matches!(n, Notification::Delete { .. }) {
                    d.fetch_add(1, Ordering::Relaxed);
                }
            }),
            ListenerConfig::default().name("follower"),
        )
        .await
        .expect("handler");
    start_synced(&informer).await;
    watching(&sim).await;

    // The watch is cut and cannot reopen while `gone` is deleted; the compaction then makes
    // its resourceVersion too old to resume from (410): a relist, without `gone`.
    let faults = sim.faults();
    faults.fail_next_watches(1_000_000, 500);
    faults.drop_watches();
    maps.delete("gone", &DeleteParams::default())
        .await
        .expect("delete");
    faults.compact();
    faults.clear();
    eventually("the tombstone is handled", || {
        deletes.load(Ordering::Relaxed) == 1
    })
    .await;
    informer.shutdown().await;
    sink.close().expect("sink closes");

    let lines = read_trace(&path);
    let gone = traces_of(&lines, "gone");
    let tombstone = gone
        .values()
        .find(|t| t[0]["hop"] == "indexer")
        .unwrap_or_else(|| panic!("a trace born in the indexer: {gone:#?}"));
    let path: Vec<_> = tombstone
        .iter()
        .map(|l| (l["hop"].as_str(), l["what"].as_str(), l["inst"].as_str()))
        .collect();
    assert_eq!(
        path,
        [
            (
                Some("indexer"),
                Some("deleted"),
                Some("v1/ConfigMap ns=demo")
            ),
            (Some("listener"), Some("delete"), Some("follower")),
            (Some("handler"), Some("handled"), Some("follower")),
        ]
    );
    let kept = traces_of(&lines, "kept");
    let listed = kept
        .values()
        .filter(|t| t[0]["hop"] == "reflector" && t[0]["what"] == "listed")
        .count();
    assert!(listed >= 2, "the first list and the relist: {kept:#?}");
}

#[actix::test]
async fn t3_secret_data_never_in_the_trace_even_with_bodies() {
    let _turn = SINK.lock().await;
    let sim = sim().await;
    let client = sim.client();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("trace.jsonl");
    let config = TraceSinkConfig {
        bodies: true,
        ..TraceSinkConfig::default()
    };
    let sink = TraceSink::start_with(&path, config).expect("sink starts");

    let secrets =
        SharedIndexInformer::<Secret>::with_config(client.clone(), Some("demo"), fast_config());
    let maps =
        SharedIndexInformer::<ConfigMap>::with_config(client.clone(), Some("demo"), fast_config());
    let handled = Arc::new(AtomicU64::new(0));
    let h = Arc::clone(&handled);
    secrets
        .add_event_handler(handler_fn(move |_: &Notification<Secret>| {
            h.fetch_add(1, Ordering::Relaxed);
        }))
        .await
        .expect("handler");
    let h = Arc::clone(&handled);
    maps.add_event_handler(handler_fn(move |_: &Notification<ConfigMap>| {
        h.fetch_add(1, Ordering::Relaxed);
    }))
    .await
    .expect("handler");
    secrets.start().expect("start");
    maps.start().expect("start");
    tokio::time::timeout(DEADLINE, secrets.wait_for_sync())
        .await
        .expect("synced");
    tokio::time::timeout(DEADLINE, maps.wait_for_sync())
        .await
        .expect("synced");

    let meta = |name: &str| ObjectMeta {
        name: Some(name.into()),
        namespace: Some("demo".into()),
        ..ObjectMeta::default()
    };
    let secret = Secret {
        metadata: meta("creds"),
        data: Some(BTreeMap::from([(
            "password".to_string(),
            ByteString(b"hunter2".to_vec()),
        )])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), "demo")
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    let map = ConfigMap {
        metadata: meta("settings"),
        data: Some(BTreeMap::from([("colour".to_string(), "blue".to_string())])),
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), "demo")
        .create(&PostParams::default(), &map)
        .await
        .expect("create configmap");
    eventually("both objects handled", || {
        handled.load(Ordering::Relaxed) == 2
    })
    .await;
    secrets.shutdown().await;
    maps.shutdown().await;
    sink.close().expect("sink closes");

    let text = std::fs::read_to_string(&path).expect("trace file");
    let lines = read_trace(&path);
    assert_eq!(lines[0]["bodies"], true);
    let creds = traces_of(&lines, "creds");
    assert!(
        creds.values().any(|t| t.len() == 5),
        "the Secret is traced (identity only): {creds:#?}"
    );
    assert!(
        creds.values().flatten().all(|l| l.get("body").is_none()),
        "no Secret body"
    );
    let settings = traces_of(&lines, "settings");
    assert!(
        settings
            .values()
            .flatten()
            .any(|l| l["body"]["data"]["colour"] == "blue"),
        "bodies were opted in: the ConfigMap's is there: {settings:#?}"
    );
    assert!(!text.contains("hunter2"), "the Secret's data in the trace");
    assert!(
        !text.contains("aHVudGVyMg=="),
        "the Secret's base64 data in the trace"
    );
}

#[actix::test]
async fn t2_a_slow_writer_drops_and_counts_and_the_pipeline_loses_nothing() {
    let _turn = SINK.lock().await;
    let sim = sim().await;
    let client = sim.client();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("trace.jsonl");
    let config = TraceSinkConfig {
        capacity: 2,
        writer_delay: Duration::from_millis(5),
        ..TraceSinkConfig::default()
    };
    let sink = TraceSink::start_with(&path, config).expect("sink starts");

    let informer =
        SharedIndexInformer::<ConfigMap>::with_config(client.clone(), Some("demo"), fast_config());
    let handled = Arc::new(AtomicU64::new(0));
    let h = Arc::clone(&handled);
    let registration = informer
        .add_event_handler(handler_fn(move |_: &Notification<ConfigMap>| {
            h.fetch_add(1, Ordering::Relaxed);
        }))
        .await
        .expect("handler");
    start_synced(&informer).await;
    watching(&sim).await;

    const N: u64 = 40;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "demo");
    for i in 0..N {
        maps.create(&PostParams::default(), &cm(&format!("cm-{i}")))
            .await
            .expect("create");
    }
    eventually("every event handled", || {
        handled.load(Ordering::Relaxed) == N
    })
    .await;
    assert_eq!(registration.stats().delivered(), N);
    assert!(
        TraceSink::stats().expect("sink running").dropped > 0,
        "the slow writer made the sink drop"
    );
    informer.shutdown().await;
    let stats = sink.close().expect("sink closes");
    assert!(stats.dropped > 0);

    let lines = read_trace(&path);
    let reported: u64 = lines
        .iter()
        .filter(|l| l["type"] == "dropped")
        .map(|l| l["count"].as_u64().expect("count"))
        .sum();
    assert!(reported > 0, "dropped lines");
    assert_eq!(
        reported, stats.dropped,
        "dropped lines add up to the counter"
    );
    let end = lines.last().expect("end");
    assert_eq!(end["dropped"].as_u64(), Some(stats.dropped));
    assert_eq!(end["written"].as_u64(), Some(stats.written));
    let written = lines
        .iter()
        .filter(|l| l["type"] == "hop" || l["type"] == "depth")
        .count() as u64;
    assert_eq!(written, stats.written, "written counts hop and depth lines");
    assert_eq!(
        handled.load(Ordering::Relaxed),
        N,
        "nothing lost in the informer"
    );
}

/// Run by [`t2_kinformer_trace_env_turns_the_sink_on`] in a child process whose environment
/// names the trace file; does nothing without it.
#[actix::test]
#[ignore = "run in a child process by t2_kinformer_trace_env_turns_the_sink_on"]
async fn env_child() {
    if std::env::var_os("KINFORMER_TRACE").is_none() {
        return;
    }
    let sim = sim().await;
    let client = sim.client();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "demo");
    maps.create(&PostParams::default(), &cm("from-env"))
        .await
        .expect("create");
    let informer =
        SharedIndexInformer::<ConfigMap>::with_config(client.clone(), Some("demo"), fast_config());
    let handled = Arc::new(AtomicU64::new(0));
    let h = Arc::clone(&handled);
    informer
        .add_event_handler(handler_fn(move |_: &Notification<ConfigMap>| {
            h.fetch_add(1, Ordering::Relaxed);
        }))
        .await
        .expect("handler");
    informer.start().expect("start");
    eventually("the listed object is handled", || {
        handled.load(Ordering::Relaxed) == 1
    })
    .await;
    informer.shutdown().await;
    let stats = kinformer_actors::trace::close_env_sink()
        .expect("KINFORMER_TRACE started a sink")
        .expect("it closes");
    assert!(stats.written > 0);
}

#[test]
fn t2_kinformer_trace_env_turns_the_sink_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("env.jsonl");
    let exe = std::env::current_exe().expect("this test binary");
    let status = Command::new(exe)
        .args(["--ignored", "--exact", "env_child", "--test-threads=1"])
        .env("KINFORMER_TRACE", &path)
        .status()
        .expect("child runs");
    assert!(status.success(), "the child test failed: {status}");
    let lines = read_trace(&path);
    let traces = traces_of(&lines, "from-env");
    let listed = ["listed", "replaced", "replaced", "add", "handled"];
    let listener = traces
        .values()
        .flatten()
        .find(|l| l["hop"] == "listener")
        .expect("a listener hop");
    let listener = listener["inst"].as_str().expect("inst").to_owned();
    assert_path(&traces, listed, "v1/ConfigMap ns=demo", &listener);
}
