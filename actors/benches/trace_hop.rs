//! The cost of one trace hop (docs/semantics.md T4): with nothing listening, with a `tracing`
//! subscriber that filters the trace target out, and with the trace sink on (writing to a
//! file in a temporary directory; records the writer cannot keep up with are dropped and
//! counted, never waited for, so this is the cost the pipeline pays).
//!
//! Run: `cargo bench -p kinformer-actors --bench trace_hop`.

use std::{hint::black_box, sync::Arc};

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kinformer_actors::{
    LazyObject, TraceId,
    trace::{BenchHop, TraceSink},
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

fn trace_hop(c: &mut Criterion) {
    let hop = BenchHop::new("v1/Pod", "Pod");
    let obj = pod();
    let mut group = c.benchmark_group("trace_hop");
    // Order matters: the global subscriber can only be installed once, after `off`.
    group.bench_function("off", |b| {
        b.iter(|| hop.hop(black_box(TraceId(1)), black_box(&obj)))
    });
    let subscriber = fmt()
        .with_env_filter(EnvFilter::new("info"))
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("no subscriber yet");
    group.bench_function("tracing_target_disabled", |b| {
        b.iter(|| hop.hop(black_box(TraceId(1)), black_box(&obj)))
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let sink = TraceSink::start(dir.path().join("bench.jsonl")).expect("sink starts");
    group.bench_function("sink_on", |b| {
        b.iter(|| hop.hop(black_box(TraceId(1)), black_box(&obj)))
    });
    group.finish();
    let stats = sink.close().expect("sink closes");
    eprintln!(
        "sink_on: {} records written, {} dropped (the writer fell behind)",
        stats.written, stats.dropped
    );
}

criterion_group!(benches, trace_hop);
criterion_main!(benches);
