//! Workqueue core throughput: the cost of the state machine alone (no locks, no runtime).
//!
//! - `add_get_done`: N distinct keys through add → get → done.
//! - `dedup_adds`: N adds of keys already queued (the informer-handler hot path under bursts).
//! - `rate_limited_cycle`: N failing keys through get → add_rate_limited → done → promote.

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use kinformer::{
    ObjectKey,
    workqueue::{GetResult, WorkQueue},
};

const N: usize = 10_000;

fn keys() -> Vec<ObjectKey> {
    (0..N)
        .map(|i| ObjectKey::new(Some("default"), &format!("pod-{i}")))
        .collect()
}

fn bench(c: &mut Criterion) {
    let keys = keys();
    let now = Instant::now();
    let mut g = c.benchmark_group("workqueue");
    g.throughput(Throughput::Elements(N as u64));

    g.bench_function("add_get_done", |b| {
        b.iter_batched(
            WorkQueue::<ObjectKey>::with_default_rate_limiter,
            |mut q| {
                for k in &keys {
                    let _ = q.add(k.clone(), now);
                }
                while let GetResult::Item(k) = q.get(now) {
                    black_box(q.done(&k, now));
                }
                q
            },
            BatchSize::LargeInput,
        )
    });

    g.bench_function("dedup_adds", |b| {
        let mut q = WorkQueue::<ObjectKey>::with_default_rate_limiter();
        for k in &keys {
            let _ = q.add(k.clone(), now);
        }
        b.iter(|| {
            for k in &keys {
                let _ = black_box(q.add(k.clone(), now));
            }
        })
    });

    g.bench_function("rate_limited_cycle", |b| {
        b.iter_batched(
            || {
                let mut q = WorkQueue::<ObjectKey>::with_default_rate_limiter();
                for k in &keys {
                    let _ = q.add(k.clone(), now);
                }
                q
            },
            |mut q| {
                while let GetResult::Item(k) = q.get(now) {
                    let _ = black_box(q.add_rate_limited(k.clone(), now));
                    black_box(q.done(&k, now));
                }
                black_box(q.promote_ready(now + Duration::from_secs(3600)));
                q
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
