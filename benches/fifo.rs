//! DeltaFifo throughput (the reflector → FIFO → indexer hot path), 100k events per iteration:
//!
//! - `add_distinct_drain`: add 100k distinct ConfigMaps, then `pop_batch(256)` + `done` until
//!   empty;
//! - `update_10k_keys_interleaved`: 100k updates over 10k keys, a `pop_batch(256)` + `done`
//!   after every 512 updates, then drain;
//! - `replace_drain`: one relist of 100k objects, then drain.
//!
//! Group `fifo` is the default per-key mode; group `fifo_in_order` runs the same workloads in
//! [`FifoMode::InOrder`] (F9).
//!
//! Objects are pre-built `Arc`s: the figures measure the FIFO, not object construction.
//! Run: `cargo bench -p kinformer --bench fifo`.

use std::{hint::black_box, sync::Arc};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{
    TraceId,
    fifo::{DeltaFifo, DeltaFifoOptions, FifoMode},
};

const EVENTS: usize = 100_000;
const BATCH: usize = 256;

fn cm(name: String, rv: usize) -> Arc<ConfigMap> {
    let mut c = ConfigMap::default();
    c.metadata.namespace = Some("bench".into());
    c.metadata.name = Some(name);
    c.metadata.resource_version = Some(rv.to_string());
    Arc::new(c)
}

fn fifo(mode: FifoMode) -> DeltaFifo<ConfigMap> {
    DeltaFifo::new(DeltaFifoOptions::default().with_mode(mode))
}

/// Pops everything in batches and acknowledges it; returns the number of items popped.
fn drain(f: &mut DeltaFifo<ConfigMap>) -> usize {
    let mut n = 0;
    while let Some(batch) = f.pop_batch(BATCH) {
        n += black_box(&batch.items).len();
        f.done(batch.token, 0);
    }
    n
}

fn bench_fifo(c: &mut Criterion) {
    bench_mode(c, "fifo", FifoMode::PerKey);
    bench_mode(c, "fifo_in_order", FifoMode::InOrder);
}

fn bench_mode(c: &mut Criterion, group: &str, mode: FifoMode) {
    let distinct: Vec<_> = (0..EVENTS).map(|i| cm(format!("cm-{i}"), i)).collect();
    let updates: Vec<_> = (0..EVENTS)
        .map(|i| cm(format!("cm-{}", i % 10_000), i))
        .collect();
    let list: Vec<_> = distinct
        .iter()
        .enumerate()
        .map(|(i, o)| (Arc::clone(o), TraceId(i as u64 + 1)))
        .collect();

    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(EVENTS as u64));
    g.sample_size(20);

    g.bench_function("add_distinct_drain", |b| {
        b.iter(|| {
            let mut f = fifo(mode);
            for (i, o) in distinct.iter().enumerate() {
                f.add(Arc::clone(o), TraceId(i as u64 + 1)).unwrap();
            }
            assert_eq!(drain(&mut f), EVENTS);
            f
        })
    });

    g.bench_function("update_10k_keys_interleaved", |b| {
        b.iter(|| {
            let mut f = fifo(mode);
            for (i, o) in updates.iter().enumerate() {
                f.update(Arc::clone(o), TraceId(i as u64 + 1)).unwrap();
                if i % 512 != 511 {
                    continue;
                }
                if let Some(batch) = f.pop_batch(BATCH) {
                    black_box(&batch.items);
                    f.done(batch.token, 0);
                }
            }
            drain(&mut f);
            f
        })
    });

    g.bench_function("replace_drain", |b| {
        b.iter_batched(
            || list.clone(),
            |list| {
                let mut f = fifo(mode);
                f.replace(list, "1").unwrap();
                assert_eq!(drain(&mut f), EVENTS);
                f
            },
            BatchSize::LargeInput,
        )
    });

    g.finish();
}

criterion_group!(benches, bench_fifo);
criterion_main!(benches);
