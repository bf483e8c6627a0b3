//! Lean-mode lister benchmarks (docs/semantics.md I7): what a lister read and a write cost when
//! the store keeps objects as JSON bytes, against the typed store, with the object hot (in the
//! hot cache) and cold (decoded on every read).
//!
//! The pod is the shared bench workload's (`lean_pod.json`, 4.8 KB of JSON), renamed per
//! object: 10,000 pods in 100 namespaces (so `by_index` on the namespace index returns 100).
//!
//! Run: `cargo bench -p kinformer --bench lean -- --quick`

use std::{hint::black_box, sync::Arc};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kinformer::{
    key::default_key_func,
    lean::LeanState,
    store::{CacheMode, Indexers, LeanConfig, NAMESPACE_INDEX, Store, namespace_index_func},
};

const PODS: usize = 10_000;
const NAMESPACES: usize = 100;

fn template() -> Pod {
    serde_json::from_str(include_str!("lean_pod.json")).expect("the fixture is a Pod")
}

fn pods(rv: u64) -> Vec<Arc<Pod>> {
    let base = template();
    (0..PODS)
        .map(|i| {
            let mut p = base.clone();
            p.metadata.name = Some(format!("pod-{i}"));
            p.metadata.namespace = Some(format!("ns-{}", i % NAMESPACES));
            p.metadata.resource_version = Some(rv.to_string());
            Arc::new(p)
        })
        .collect()
}

fn store(mode: CacheMode, objs: &[Arc<Pod>]) -> Store<Pod> {
    let mut ix = Indexers::new();
    ix.insert(NAMESPACE_INDEX.to_string(), namespace_index_func());
    let mut s = Store::with_mode(default_key_func(), ix, mode);
    s.replace(objs.to_vec()).expect("replace never fails");
    s
}

fn codec(c: &mut Criterion) {
    let pod = template();
    let state = LeanState::<Pod>::new(LeanConfig::default());
    let json = serde_json::to_vec(&pod).expect("serialises");
    let mut g = c.benchmark_group("lean/codec");
    g.bench_function("encode", |b| {
        b.iter(|| state.encode(black_box(&json)).expect("encodes"))
    });
    let raw = state.encode(&json).expect("encodes");
    g.bench_function("decompress", |b| {
        b.iter(|| black_box(&raw).json().expect("decompresses").len())
    });
    g.finish();
}

fn reads(c: &mut Criterion) {
    let objs = pods(1);
    let modes = [
        ("typed", CacheMode::Typed),
        // Hot: the read object is in the hot cache (read before, so remembered).
        ("lean_hot", CacheMode::lean()),
        // Cold: no hot cache, every read decodes.
        (
            "lean_cold",
            CacheMode::Lean(LeanConfig::default().hot_objects(0)),
        ),
    ];
    let mut g = c.benchmark_group("lean/get");
    for (name, mode) in modes {
        let s = store(mode, &objs);
        let lister = s.lister();
        let _ = lister.get("ns-7", "pod-7");
        g.bench_function(name, |b| {
            b.iter(|| lister.get(black_box("ns-7"), black_box("pod-7")))
        });
    }
    g.finish();

    // by_index and list decode what they return unless it is hot; they never fill the cache,
    // so `lean_cold` is what they cost whatever the cache size.
    let mut g = c.benchmark_group("lean/by_index_100");
    for (name, mode) in [modes[0], modes[2]] {
        let s = store(mode, &objs);
        let lister = s.lister();
        g.bench_function(name, |b| {
            b.iter(|| lister.by_index(NAMESPACE_INDEX, black_box("ns-7")))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("lean/list_10k");
    g.sample_size(10);
    for (name, mode) in [modes[0], modes[2]] {
        let s = store(mode, &objs);
        let lister = s.lister();
        g.bench_function(name, |b| b.iter(|| lister.list()));
    }
    g.finish();
}

fn writes(c: &mut Criterion) {
    let objs = pods(1);
    let next = pods(2);
    // An update as the Indexer applies it: store the new object, get the old one back (for
    // the Update notification). Lean cold: encode the new, decode the old. Lean hot: the old
    // is the object the writer stored last (hot cache), so only the encode.
    let mut g = c.benchmark_group("lean/update");
    let cases = [
        ("typed", CacheMode::Typed, false),
        ("lean_hot", CacheMode::lean(), true),
        (
            "lean_cold",
            CacheMode::Lean(LeanConfig::default().hot_objects(0)),
            false,
        ),
    ];
    for (name, mode, hot) in cases {
        let mut s = store(mode, &objs);
        let mut n = 0usize;
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    n += 1;
                    // Hot: the same key every time, so the previous write is cached. Cold:
                    // every key in turn. Either way the stored object alternates between the
                    // two versions, so every write is a change (never a resync of the very
                    // object stored, which the typed store skips).
                    let (k, round) = if hot { (7, n) } else { (n % PODS, n / PODS) };
                    Arc::clone(if round % 2 == 0 { &objs[k] } else { &next[k] })
                },
                |obj| s.update(obj).expect("keyed"),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(lean, codec, reads, writes);
criterion_main!(lean);
