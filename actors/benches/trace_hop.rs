//! The cost of one trace hop (docs/semantics.md T4): with nothing listening, with a `tracing`
//! subscriber that filters the trace target out, and with the trace sink on (writing to a
//! file in a temporary directory; records the writer cannot keep up with are dropped and
//! counted, never waited for, so this is the cost the pipeline pays).
//!
//! `queue_round` is one key's round through a named workqueue and a reconcile span (T5, T6):
//! two traced adds (new, merged), a `get_traced`, a dirty add, `done` (queued again), a
//! second `get_traced`, a span with one write, `done` and `forget`: nine queue lines, two
//! reconcile lines and one write line when the sink is on.
//!
//! Run: `cargo bench -p kinformer-actors --bench trace_hop`.

use std::{hint::black_box, sync::Arc};

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kinformer_actors::{
    AsyncWorkQueue, LazyObject, ObjectKey, TraceId,
    trace::{BenchHop, ReconcileResult, ReconcileSpan, TraceSink, WriteVerb, record_write},
};
use tracing_subscriber::{EnvFilter, fmt};

fn pod() -> Arc<LazyObject<Pod>> {
    let mut p = Pod::default();
    p.metadata.namespace = Some("demo".into());
    p.metadata.name = Some("web-1".into());
    p.metadata.uid = Some("4f0c2b5e-8d3a-4a47-9d1e-0c8f5d6a7b21".into());
    p.metadata.resource_version = Some("123456".into());
    Arc::new(LazyObject::from_object(Arc::new(p)))
}

/// One key's round through the queue and a reconcile span (see the module docs).
fn queue_round(q: &AsyncWorkQueue<ObjectKey>, key: &ObjectKey) {
    q.add_traced(key.clone(), TraceId(1));
    q.add_traced(key.clone(), TraceId(2));
    let taken = futures::executor::block_on(q.get_traced(1)).expect("queued");
    q.add_traced(key.clone(), TraceId(3));
    q.done(taken.item());
    let taken = futures::executor::block_on(q.get_traced(1)).expect("queued again");
    let span = ReconcileSpan::start(&taken);
    futures::executor::block_on(span.scope(async {
        record_write(WriteVerb::Update, "ReplicaSet", "demo", "web-1", "42");
    }));
    span.end(ReconcileResult::Ok);
    q.done(taken.item());
    q.forget(taken.item());
}

fn trace_hop(c: &mut Criterion) {
    let hop = BenchHop::new("v1/Pod", "Pod");
    let obj = pod();
    let q = AsyncWorkQueue::<ObjectKey>::new().with_name("deployments");
    let key = ObjectKey::new(Some("demo"), "web");
    let mut group = c.benchmark_group("trace_hop");
    // Order matters: the global subscriber can only be installed once, after `off`.
    group.bench_function("off", |b| {
        b.iter(|| hop.hop(black_box(TraceId(1)), black_box(&obj)))
    });
    group.bench_function("queue_round_off", |b| b.iter(|| queue_round(&q, &key)));
    let subscriber = fmt()
        .with_env_filter(EnvFilter::new("info"))
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("no subscriber yet");
    group.bench_function("tracing_target_disabled", |b| {
        b.iter(|| hop.hop(black_box(TraceId(1)), black_box(&obj)))
    });
    group.bench_function("queue_round_tracing_target_disabled", |b| {
        b.iter(|| queue_round(&q, &key))
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let sink = TraceSink::start(dir.path().join("bench.jsonl")).expect("sink starts");
    group.bench_function("sink_on", |b| {
        b.iter(|| hop.hop(black_box(TraceId(1)), black_box(&obj)))
    });
    group.bench_function("queue_round_sink_on", |b| b.iter(|| queue_round(&q, &key)));
    group.finish();
    let stats = sink.close().expect("sink closes");
    eprintln!(
        "sink_on: {} records written, {} dropped (the writer fell behind)",
        stats.written, stats.dropped
    );
}

criterion_group!(benches, trace_hop);
criterion_main!(benches);
