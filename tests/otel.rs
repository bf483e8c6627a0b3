//! OpenTelemetry export of real hops (feature `otel`, docs/tracing.md, docs/semantics.md T8):
//! an informer against the simulated API server, under a subscriber whose layer is a
//! `KinformerOtelLayer` exporting to the SDK's in-memory exporter.
//!
//! The crate dev-depends on itself with `otel`, so this runs in a plain `cargo test`.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::ObjectKey;
use kinformer::notification::Notification;
use kinformer_actors::{
    AsyncWorkQueue, ListenerConfig, OverflowPolicy, SharedIndexInformer, handler_fn,
    otel::{KinformerOtelLayer, trace_filter},
    trace::{ReconcileResult, ReconcileSpan, WriteVerb},
};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::{Layer as _, layer::SubscriberExt as _};

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

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

/// The spans of the trace whose root is named `root`, by name, once that root has ended.
fn trace_of(exporter: &InMemorySpanExporter, root: &str) -> Option<(SpanData, Vec<SpanData>)> {
    let spans = exporter.get_finished_spans().expect("exporter up");
    let r = spans.iter().find(|s| s.name == root)?.clone();
    let children = spans
        .into_iter()
        .filter(|s| s.parent_span_id == r.span_context.span_id())
        .collect();
    Some((r, children))
}

/// T8: each object's trace is one OTel trace whose root names the event, with one child span
/// per hop in pipeline order, parented to the root, carrying the hop's attributes; the
/// handler's span lasts what the handler took.
#[actix::test]
async fn t8_real_hops_become_a_root_span_with_a_child_per_hop() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let layer = KinformerOtelLayer::new(provider.tracer("kinformer"));
    let handle = layer.handle();
    // Global: the reflector, the decode pool and the actors run on threads of their own.
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(layer.with_filter(trace_filter())),
    )
    .expect("the only subscriber of this test binary");

    let sim = sim().await;
    let client = sim.client();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "demo");
    maps.create(&PostParams::default(), &cm("steady"))
        .await
        .expect("create");
    let informer =
        SharedIndexInformer::<ConfigMap>::with_config(client.clone(), Some("demo"), fast_config());
    let seen = Arc::new(AtomicU64::new(0));
    let s = Arc::clone(&seen);
    let handler = handler_fn(move |_: &Notification<ConfigMap>| {
        // A handler that takes a visible time, to check the handler span's length.
        std::thread::sleep(Duration::from_millis(3));
        s.fetch_add(1, Ordering::Relaxed);
    });
    let listener = ListenerConfig {
        name: Some("follower".into()),
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

    let inst = "v1/ConfigMap ns=demo";
    for (root, path) in [
        (
            "kinformer.event ConfigMap demo/steady listed",
            [
                ("reflector", inst, "listed"),
                ("fifo", inst, "replaced"),
                ("indexer", inst, "replaced"),
                ("listener", "follower", "add"),
                ("handler", "follower", "handled"),
            ],
        ),
        (
            "kinformer.event ConfigMap demo/web-1 added",
            [
                ("reflector", inst, "added"),
                ("fifo", inst, "queued"),
                ("indexer", inst, "added"),
                ("listener", "follower", "add"),
                ("handler", "follower", "handled"),
            ],
        ),
    ] {
        // The root ends at the handler hop of its only listener.
        let mut found = None;
        eventually(&format!("the span {root:?} is exported"), || {
            found = trace_of(&exporter, root);
            found.is_some()
        })
        .await;
        let (r, mut children) = found.expect("found");
        assert_eq!(r.parent_span_id, SpanId::INVALID, "{root} is a root");
        let id = attr(&r, "kinformer.trace_id").expect("a trace id");
        assert_eq!(id.len(), 16, "the trace files' 16 hex digits");
        assert_eq!(attr(&r, "kinformer.kind").as_deref(), Some("ConfigMap"));
        assert_eq!(attr(&r, "k8s.namespace.name").as_deref(), Some("demo"));
        children.sort_by_key(|s| s.end_time);
        let got: Vec<_> = children
            .iter()
            .map(|s| {
                (
                    s.name.to_string(),
                    attr(s, "kinformer.inst").unwrap_or_default(),
                    attr(s, "kinformer.what").unwrap_or_default(),
                )
            })
            .collect();
        let want: Vec<_> = path
            .iter()
            .map(|(h, i, w)| (format!("kinformer.{h}"), i.to_string(), w.to_string()))
            .collect();
        assert_eq!(got, want, "{root}: one child per hop, in pipeline order");
        for c in &children {
            assert_eq!(c.span_context.trace_id(), r.span_context.trace_id());
            assert_eq!(attr(c, "kinformer.trace_id").as_deref(), Some(&*id));
            assert!(c.start_time >= r.start_time && c.end_time <= r.end_time);
        }
        let handler = children.last().expect("the handler span");
        let took = handler
            .end_time
            .duration_since(handler.start_time)
            .expect("ordered");
        let dur = attr(handler, "kinformer.dur_ns").expect("dur");
        assert_eq!(took.as_nanos().to_string(), dur, "the handler's `dur`");
        assert!(took >= Duration::from_millis(3));
    }
    assert!(seen.load(Ordering::Relaxed) >= 2);

    // T5–T8 with the real emitters: an event through a key sink into a named workqueue, a
    // worker's reconcile span and its write. The reconcile span is parented to the root span
    // of the event it took, and the write is the reconcile's child.
    let queue = AsyncWorkQueue::<ObjectKey>::new().with_name("q");
    let sink = ListenerConfig {
        name: Some("to-queue".into()),
        ..ListenerConfig::default()
    };
    informer
        .add_key_sink(queue.clone(), None, sink)
        .await
        .expect("key sink");
    // The late listener's replay of the two cached maps: taken and finished first.
    for _ in 0..2 {
        let taken = queue.get_traced(1).await.expect("a replayed key");
        queue.done(taken.item());
    }
    maps.create(&PostParams::default(), &cm("loop-1"))
        .await
        .expect("create");
    let taken = queue.get_traced(7).await.expect("the new key");
    assert_eq!(taken.item().to_string(), "demo/loop-1");
    assert_eq!(
        taken.traces().len(),
        1,
        "the event's trace id reached the worker"
    );
    let span = ReconcileSpan::start(&taken);
    span.write(WriteVerb::Create, "ConfigMap", "demo", "loop-1-out", "4242");
    span.end(ReconcileResult::Ok);
    queue.done(taken.item());
    queue.forget(taken.item());
    let reconcile_name = "kinformer.reconcile q demo/loop-1";
    // Both spans end by themselves: the root when its listeners' handlers ran, the reconcile
    // at its `done` (no flush here, which would end them whatever happened).
    eventually("the event's root and the reconcile are exported", || {
        let spans = exporter.get_finished_spans().expect("exporter up");
        spans
            .iter()
            .any(|s| s.name == "kinformer.event ConfigMap demo/loop-1 added")
            && spans.iter().any(|s| s.name == reconcile_name)
    })
    .await;
    assert_eq!(
        handle.open_spans().1,
        0,
        "no reconcile left open after done"
    );
    let spans = exporter.get_finished_spans().expect("exporter up");
    let root = spans
        .iter()
        .find(|s| s.name == "kinformer.event ConfigMap demo/loop-1 added")
        .expect("the event's root");
    let reconcile = spans
        .iter()
        .find(|s| s.name == reconcile_name)
        .expect("the reconcile span");
    assert_eq!(
        reconcile.parent_span_id,
        root.span_context.span_id(),
        "the reconcile hangs under the event it took"
    );
    assert_eq!(
        reconcile.span_context.trace_id(),
        root.span_context.trace_id()
    );
    let write = spans
        .iter()
        .find(|s| {
            s.name
                .starts_with("kinformer.write create ConfigMap demo/loop-1-out")
        })
        .expect("the write span");
    assert_eq!(write.parent_span_id, reconcile.span_context.span_id());
    assert_eq!(attr(write, "kinformer.rv").as_deref(), Some("4242"));

    informer.shutdown().await;
    handle.flush();
    assert_eq!(handle.open_spans(), (0, 0));
}
