//! The listener buffer (B3): what one notification costs between the processor and the handler
//! under each policy, 10k notifications per iteration (updates over 1,000 keys):
//!
//! - `keeps_up`: push one, pop one (a handler that keeps up);
//! - `batch_256`: push 256, pop 256 (the indexer's default batch, handler keeping up per batch);
//! - `backlog_10k`: push all 10k, then pop until empty (a handler far behind).
//!
//! Each workload runs on `queue` (the `Block` and `Unbounded` policies), `coalesce` (the
//! `Coalesce` policy as listeners build it: merging once 1,024 notifications wait, the default
//! listener capacity) and `coalesce_always` (merging every notification, backlog 0: what the
//! `Coalesce` policy did before it merged only under a backlog).
//!
//! Notifications are pre-built and handed over by value: the figures measure the buffer.
//! Run: `cargo bench -p kinformer --bench buffer`.

use std::{hint::black_box, sync::Arc};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{
    ObjectKey, TraceId,
    notification::Notification,
    processor::{Delivery, ListenerBuffer, SyncTracker},
};

const EVENTS: usize = 10_000;
const KEYS: usize = 1_000;
const BATCH: usize = 256;
/// The default `ListenerConfig::capacity`, where a `Coalesce` listener starts merging.
const CAPACITY: usize = 1_024;

fn cm(name: &str, rv: usize) -> Arc<ConfigMap> {
    let mut c = ConfigMap::default();
    c.metadata.namespace = Some("bench".into());
    c.metadata.name = Some(name.to_string());
    c.metadata.resource_version = Some(rv.to_string());
    Arc::new(c)
}

/// `EVENTS` updates, round-robin over `KEYS` keys, each from the key's previous object.
fn deliveries() -> Vec<Delivery<ConfigMap>> {
    let names: Vec<String> = (0..KEYS).map(|i| format!("cm-{i}")).collect();
    let mut current: Vec<Arc<ConfigMap>> = names.iter().map(|n| cm(n, 0)).collect();
    (0..EVENTS)
        .map(|i| {
            let k = i % KEYS;
            let new = cm(&names[k], i + 1);
            let old = std::mem::replace(&mut current[k], Arc::clone(&new));
            Delivery {
                key: ObjectKey::new(Some("bench"), &names[k]),
                notification: Notification::Update { old, new },
                trace: TraceId(i as u64 + 1),
                initial: false,
            }
        })
        .collect()
}

fn buffer(kind: &str) -> ListenerBuffer<ConfigMap> {
    let tracker = Arc::new(SyncTracker::new());
    match kind {
        "queue" => ListenerBuffer::queue(tracker),
        "coalesce" => ListenerBuffer::coalescing(tracker, CAPACITY),
        _ => ListenerBuffer::coalescing(tracker, 0),
    }
}

fn drain(b: &mut ListenerBuffer<ConfigMap>) -> usize {
    let mut n = 0;
    while let Some(d) = b.pop() {
        black_box(d);
        n += 1;
    }
    n
}

fn bench_buffer(c: &mut Criterion) {
    let input = deliveries();
    let mut g = c.benchmark_group("listener_buffer");
    g.throughput(Throughput::Elements(EVENTS as u64));
    for kind in ["queue", "coalesce", "coalesce_always"] {
        g.bench_function(format!("keeps_up/{kind}"), |bench| {
            bench.iter_batched(
                || (input.clone(), buffer(kind)),
                |(ds, mut b)| {
                    let mut n = 0;
                    for d in ds {
                        b.push(d);
                        n += drain(&mut b);
                    }
                    n
                },
                BatchSize::LargeInput,
            )
        });
        g.bench_function(format!("batch_256/{kind}"), |bench| {
            bench.iter_batched(
                || (input.clone(), buffer(kind)),
                |(ds, mut b)| {
                    let mut n = 0;
                    let mut ds = ds.into_iter().peekable();
                    while ds.peek().is_some() {
                        ds.by_ref().take(BATCH).for_each(|d| b.push(d));
                        n += drain(&mut b);
                    }
                    n
                },
                BatchSize::LargeInput,
            )
        });
        g.bench_function(format!("backlog_10k/{kind}"), |bench| {
            bench.iter_batched(
                || (input.clone(), buffer(kind)),
                |(ds, mut b)| {
                    ds.into_iter().for_each(|d| b.push(d));
                    drain(&mut b)
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench_buffer);
criterion_main!(benches);
