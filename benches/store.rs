//! Store benchmarks (docs/semantics.md I6): update cost with two indices over 50k pods, and lock-free
//! `Lister::get` throughput from two reader threads with and without a concurrent writer.
//!
//! Run: `cargo bench -p kinformer --bench store -- --warm-up-time 1 --measurement-time 3`

use std::{
    hint::black_box,
    sync::{
        Arc, Barrier, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kinformer::{
    key::default_key_func,
    store::{Indexers, Lister, NAMESPACE_INDEX, Store, index_func, namespace_index_func},
};

const PODS: usize = 50_000;
const NAMESPACES: usize = 50;
const READERS: usize = 2;

fn pod(i: usize, app: usize, rv: u64) -> Pod {
    let mut p = Pod::default();
    p.metadata.namespace = Some(format!("ns-{}", i % NAMESPACES));
    p.metadata.name = Some(format!("pod-{i}"));
    p.metadata.resource_version = Some(rv.to_string());
    p.metadata.labels = Some(
        [
            ("app".to_string(), format!("app-{app}")),
            ("pod-template-hash".to_string(), format!("{:x}", i / 3)),
        ]
        .into(),
    );
    p
}

fn indexers() -> Indexers<Pod> {
    let mut ix = Indexers::new();
    ix.insert(NAMESPACE_INDEX.to_string(), namespace_index_func());
    ix.insert(
        "app".to_string(),
        index_func(|p: &Pod| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .map(|v| vec![v.clone()])
                .unwrap_or_default()
        }),
    );
    ix
}

/// The store filled with 50k pods, plus two alternative versions of every pod: `same` keeps
/// the index values (a status/resourceVersion update), `moved` changes the `app` label (the
/// key moves between index values).
struct Fixture {
    store: Store<Pod>,
    same: Vec<Arc<Pod>>,
    moved: Vec<Arc<Pod>>,
    original: Vec<Arc<Pod>>,
    names: Vec<(String, String)>,
}

fn fixture() -> Fixture {
    let original: Vec<Arc<Pod>> = (0..PODS).map(|i| Arc::new(pod(i, i % 100, 1))).collect();
    let same = (0..PODS).map(|i| Arc::new(pod(i, i % 100, 2))).collect();
    let moved = (0..PODS)
        .map(|i| Arc::new(pod(i, (i + 1) % 100, 3)))
        .collect();
    let mut store = Store::new(default_key_func(), indexers());
    store
        .replace(original.clone())
        .expect("replace never fails");
    let names = (0..PODS)
        .map(|i| (format!("ns-{}", i % NAMESPACES), format!("pod-{i}")))
        .collect();
    Fixture {
        store,
        same,
        moved,
        original,
        names,
    }
}

/// A cheap per-thread pseudo-random index (xorshift), so readers do not walk keys in order.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn updates(c: &mut Criterion) {
    let mut f = fixture();
    let mut g = c.benchmark_group("store_update_50k_pods_2_indices");
    g.throughput(Throughput::Elements(1));

    let mut i = 0usize;
    let mut round = 0usize;
    g.bench_function("update_same_index_values", |b| {
        b.iter(|| {
            i += 1;
            if i == PODS {
                i = 0;
                round += 1;
            }
            // Alternate versions so every update really replaces the stored Arc.
            let obj = if round % 2 == 0 {
                &f.same[i]
            } else {
                &f.original[i]
            };
            black_box(f.store.update(Arc::clone(obj)).expect("keyed"));
        })
    });

    let mut i = 0usize;
    let mut round = 0usize;
    g.bench_function("update_moving_app_label", |b| {
        b.iter(|| {
            i += 1;
            if i == PODS {
                i = 0;
                round += 1;
            }
            let obj = if round % 2 == 0 {
                &f.moved[i]
            } else {
                &f.original[i]
            };
            black_box(f.store.update(Arc::clone(obj)).expect("keyed"));
        })
    });

    const BATCH: usize = 100;
    g.throughput(Throughput::Elements(BATCH as u64));
    let mut i = 0usize;
    let mut round = 0usize;
    g.bench_function("batch_of_100_updates", |b| {
        b.iter(|| {
            let mut batch = f.store.batch();
            for _ in 0..BATCH {
                i += 1;
                if i == PODS {
                    i = 0;
                    round += 1;
                }
                let obj = if round % 2 == 0 {
                    &f.same[i]
                } else {
                    &f.original[i]
                };
                black_box(batch.update(Arc::clone(obj)).expect("keyed"));
            }
            batch.commit();
        })
    });

    g.throughput(Throughput::Elements(PODS as u64));
    g.sample_size(10);
    g.bench_function("replace_50k", |b| {
        b.iter_batched(
            || f.same.clone(),
            |objs| black_box(f.store.replace(objs).expect("replace never fails")),
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

/// `iters` gets split over the reader threads; returns the wall time of the reads. With
/// `writer`, a thread updates the store until the readers are done, and its update count and
/// busy time are added to `writer_stats`.
fn concurrent_gets(
    f: &mut Fixture,
    iters: u64,
    writer: bool,
    writer_stats: &Mutex<(u64, Duration)>,
) -> Duration {
    let lister: Lister<Pod> = f.store.lister();
    let per_reader = iters.div_ceil(READERS as u64);
    let start_line = Barrier::new(READERS + 1 + usize::from(writer));
    let done = AtomicBool::new(false);
    let names = &f.names;
    let same = &f.same;
    let original = &f.original;
    let store = &mut f.store;
    thread::scope(|s| {
        let readers: Vec<_> = (0..READERS)
            .map(|r| {
                let lister = lister.clone();
                let start_line = &start_line;
                s.spawn(move || {
                    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (r as u64 + 1));
                    start_line.wait();
                    let t = Instant::now();
                    let mut hits = 0u64;
                    for _ in 0..per_reader {
                        let (ns, name) = &names[rng.next(PODS)];
                        hits += u64::from(lister.get(ns, name).is_some());
                    }
                    black_box(hits);
                    t.elapsed()
                })
            })
            .collect();
        if writer {
            let (start_line, done) = (&start_line, &done);
            s.spawn(move || {
                start_line.wait();
                let t = Instant::now();
                let mut n = 0u64;
                let mut round = 0usize;
                while !done.load(Ordering::Relaxed) {
                    for i in 0..1000 {
                        let idx = (round * 1000 + i) % PODS;
                        let obj = if (round * 1000 / PODS) % 2 == 0 {
                            &same[idx]
                        } else {
                            &original[idx]
                        };
                        black_box(store.update(Arc::clone(obj)).expect("keyed"));
                    }
                    n += 1000;
                    round += 1;
                }
                let mut stats = writer_stats.lock().expect("not poisoned");
                stats.0 += n;
                stats.1 += t.elapsed();
            });
        }
        start_line.wait();
        let elapsed = readers
            .into_iter()
            .map(|r| r.join().expect("reader"))
            .max()
            .unwrap_or_default();
        done.store(true, Ordering::Relaxed);
        elapsed
    })
}

fn reads(c: &mut Criterion) {
    let mut f = fixture();
    let writer_stats = Mutex::new((0u64, Duration::ZERO));

    let mut g = c.benchmark_group("lister_get_2_reader_threads");
    g.throughput(Throughput::Elements(1));
    g.bench_function("with_concurrent_writer", |b| {
        b.iter_custom(|iters| concurrent_gets(&mut f, iters, true, &writer_stats))
    });
    g.bench_function("no_writer", |b| {
        let idle = Mutex::new((0, Duration::ZERO));
        b.iter_custom(|iters| concurrent_gets(&mut f, iters, false, &idle))
    });
    g.finish();
    let (n, t) = *writer_stats.lock().expect("not poisoned");
    if !t.is_zero() {
        eprintln!(
            "writer during `with_concurrent_writer`: {n} updates in {t:?} = {:.0} updates/s",
            n as f64 / t.as_secs_f64()
        );
    }

    // Single-threaded lookup cost: the stack-built key of get(ns, name) against a prebuilt key
    // and against allocating the key per call.
    let lister = f.store.lister();
    let keys: Vec<String> = f.names.iter().map(|(ns, n)| format!("{ns}/{n}")).collect();
    let mut g = c.benchmark_group("lister_get_1_thread");
    g.throughput(Throughput::Elements(1));
    let mut rng = Rng(42);
    g.bench_function("get_ns_name_stack_key", |b| {
        b.iter(|| {
            let (ns, name) = &f.names[rng.next(PODS)];
            black_box(lister.get(ns, name))
        })
    });
    g.bench_function("get_by_key_prebuilt", |b| {
        b.iter(|| black_box(lister.get_by_key(&keys[rng.next(PODS)])))
    });
    g.bench_function("get_by_key_format_alloc", |b| {
        b.iter(|| {
            let (ns, name) = &f.names[rng.next(PODS)];
            black_box(lister.get_by_key(&format!("{ns}/{name}")))
        })
    });
    let snap = lister.snapshot();
    g.bench_function("snapshot_get_ns_name", |b| {
        b.iter(|| {
            let (ns, name) = &f.names[rng.next(PODS)];
            black_box(snap.get(ns, name))
        })
    });
    g.bench_function("by_index_namespace_1k_pods", |b| {
        b.iter(|| {
            black_box(
                lister
                    .by_index(NAMESPACE_INDEX, "ns-7")
                    .expect("known index"),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, updates, reads);
criterion_main!(benches);
