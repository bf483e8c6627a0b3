//! Lean-mode benchmarks (docs/semantics.md I7): what the codec, a lister read and an Indexer
//! write cost when the store keeps objects as compressed JSON, against the typed store.
//!
//! The pods are the shared benchmark's (`support`: 4.8 KB of JSON each, every one with its own
//! uid, token, IPs and container IDs, so the dictionary is as good as on the real workload and
//! no better): 10,000 of them in 100 namespaces, with the namespace index (`by_index` returns
//! 100). Every store is built as the informer builds it: typed objects decoded with
//! `kinformer::exact`, lean objects encoded from their JSON by the store's `LeanState` (the
//! dictionary is trained on the first 256) and written with `put_object`.
//!
//! Reads rotate over keys in a shuffled order (a read of one key only would keep its bytes in
//! the CPU's caches); `lean_hot` reads rotate over 256 keys that are all in the hot cache
//! (`typed_256` reads the same keys from the typed store), and the bench prints the hot
//! cache's hits and decodes during each lean measurement to show what was measured.
//!
//! Groups: `lean/codec`, `lean/get`, `lean/list_10k`, `lean/by_index_100`, `lean/list_keys`,
//! `lean/list_selected_20`, `lean/write`. Run: `cargo bench -p kinformer --bench lean`
//! (about two minutes; the configuration below is 1 s of warm-up and 3 s of measurement per
//! bench, which command-line options override).

mod support;

use std::{hint::black_box, sync::Arc, time::Duration};

use criterion::{
    BatchSize, BenchmarkGroup, Criterion, SamplingMode, criterion_group, criterion_main,
    measurement::WallTime,
};
use k8s_openapi::api::core::v1::Pod;
use kinformer::{
    ObjectKey,
    key::default_key_func,
    lean::{LazyObject, RawObject},
    store::{
        Indexers, LeanConfig, NAMESPACE_INDEX, Store, index_func, meta_index_func,
        namespace_index_func,
    },
};
use kube_core::{Expression, Selector};
use rand::{SeedableRng, rngs::StdRng, seq::SliceRandom};
use support::{NAMESPACES, SEED, Version, Workload};

const PODS: usize = 10_000;
/// Keys the `hot` reads rotate over: all fit in the default hot cache (1,024 objects in 16
/// shards of 64) whatever shards they fall in.
const HOT_KEYS: usize = 256;

/// The bench's inputs: the pods' JSON (listed and modified versions) and their keys.
struct Pods {
    listed: Vec<Vec<u8>>,
    modified: Vec<Vec<u8>>,
    keys: Vec<ObjectKey>,
    /// `(namespace, name)` of every pod, in a shuffled order.
    reads: Vec<(String, String)>,
}

fn pods() -> Pods {
    let w = Workload::new(SEED);
    let listed = w.pods(PODS, Version::listed);
    let modified = w.pods(PODS, Version::modified);
    let keys = (0..PODS)
        .map(|i| ObjectKey::new(Some(&format!("ns-{}", i % NAMESPACES)), &format!("pod-{i}")))
        .collect();
    let mut order: Vec<usize> = (0..PODS).collect();
    order.shuffle(&mut StdRng::seed_from_u64(SEED));
    let reads = order
        .into_iter()
        .map(|i| (format!("ns-{}", i % NAMESPACES), format!("pod-{i}")))
        .collect();
    Pods {
        listed,
        modified,
        keys,
        reads,
    }
}

fn decode(json: &[u8]) -> Arc<Pod> {
    Arc::new(kinformer::exact::from_slice(json).expect("a Pod"))
}

fn namespace_index() -> Indexers<Pod> {
    let mut ix = Indexers::new();
    ix.insert(NAMESPACE_INDEX.to_string(), namespace_index_func());
    ix
}

/// A typed store of `objs`, written as the Indexer writes (`put_keyed`, one batch).
fn typed_store(keys: &[ObjectKey], objs: &[Arc<Pod>]) -> Store<Pod> {
    let mut s = Store::new(default_key_func(), namespace_index());
    let mut batch = s.batch();
    for (k, o) in keys.iter().zip(objs) {
        batch.put_keyed(k.clone(), Arc::clone(o));
    }
    batch.commit();
    s
}

/// `json` encoded by `store`'s lean state (its dictionary), as the decode pool does.
fn encode_all(store: &Store<Pod>, json: &[Vec<u8>]) -> Vec<Arc<RawObject>> {
    let state = store.lean_state().expect("a lean store");
    json.iter()
        .map(|j| Arc::new(state.encode(j).expect("encodes")))
        .collect()
}

fn lazy(store: &Store<Pod>, raw: &Arc<RawObject>) -> LazyObject<Pod> {
    let state = Arc::clone(store.lean_state().expect("a lean store"));
    LazyObject::from_raw(Arc::clone(raw), state)
}

/// A lean store of `json` (encoded with its own state, the dictionary trained on the first
/// 256), written as the Indexer writes (`put_object`, one batch); also returns the stored
/// objects.
fn lean_store(
    config: LeanConfig,
    indexers: Indexers<Pod>,
    keys: &[ObjectKey],
    json: &[Vec<u8>],
) -> (Store<Pod>, Vec<Arc<RawObject>>) {
    let mut s = Store::lean(default_key_func(), indexers, config);
    let raws = encode_all(&s, json);
    let objs: Vec<_> = raws.iter().map(|r| lazy(&s, r)).collect();
    let mut batch = s.batch();
    for (k, o) in keys.iter().zip(&objs) {
        batch.put_object(k.clone(), o).expect("stores");
    }
    batch.commit();
    (s, raws)
}

/// Decodes and hot-cache hits of `store` since `since`, printed after a lean measurement.
fn report(name: &str, store: &Store<Pod>, since: (u64, u64)) -> (u64, u64) {
    let st = store.lean_stats().expect("a lean store");
    eprintln!(
        "    {name}: {} decodes, {} hot-cache hits during the measurement",
        st.decodes - since.0,
        st.hits - since.1
    );
    (st.decodes, st.hits)
}

fn counters(store: &Store<Pod>) -> (u64, u64) {
    let st = store.lean_stats().expect("a lean store");
    (st.decodes, st.hits)
}

fn codec(c: &mut Criterion) {
    let p = pods();
    let (store, raws) = lean_store(LeanConfig::default(), namespace_index(), &p.keys, &p.listed);
    let state = Arc::clone(store.lean_state().expect("lean"));
    let mut g = c.benchmark_group("lean/codec");

    // Metadata parse + compression with the trained dictionary (what the decode pool does
    // per object).
    let mut i = 0;
    g.bench_function("encode", |b| {
        b.iter(|| {
            i = (i + 1) % PODS;
            state.encode(black_box(&p.modified[i])).expect("encodes")
        })
    });

    // Compression alone, with a dictionary trained as the lean state trains its own (the
    // first 256 objects, 16 KB, zstd level 3): `encode` minus this is the metadata parse,
    // which the public API does not expose on its own.
    let dictionary = zstd::dict::from_samples(&p.listed[..256], 16 << 10).expect("trains");
    let mut zc = zstd::bulk::Compressor::with_dictionary(3, &dictionary).expect("zstd");
    g.bench_function("compress_only", |b| {
        b.iter(|| {
            i = (i + 1) % PODS;
            zc.compress(black_box(&p.modified[i])).expect("compresses")
        })
    });

    g.bench_function("decompress", |b| {
        b.iter(|| {
            i = (i + 1) % PODS;
            black_box(&raws[i]).json().expect("decompresses").len()
        })
    });

    g.bench_function("decode_serde_json", |b| {
        b.iter(|| {
            i = (i + 1) % PODS;
            serde_json::from_slice::<Pod>(black_box(&p.listed[i])).expect("a Pod")
        })
    });
    g.bench_function("decode_exact", |b| {
        b.iter(|| {
            i = (i + 1) % PODS;
            kinformer::exact::from_slice::<Pod>(black_box(&p.listed[i])).expect("a Pod")
        })
    });
    g.finish();
}

fn gets(c: &mut Criterion) {
    let p = pods();
    let typed: Vec<_> = p.listed.iter().map(|j| decode(j)).collect();
    let ts = typed_store(&p.keys, &typed);
    let (hot, _) = lean_store(LeanConfig::default(), namespace_index(), &p.keys, &p.listed);
    let (cold, _) = lean_store(
        LeanConfig::default().hot_objects(0),
        namespace_index(),
        &p.keys,
        &p.listed,
    );
    let n = p.reads.len();
    let mut g = c.benchmark_group("lean/get");

    let lister = ts.lister();
    let mut i = 0;
    g.bench_function("typed", |b| {
        b.iter(|| {
            i = (i + 1) % n;
            let (ns, name) = &p.reads[i];
            lister.get(ns, name).expect("stored")
        })
    });

    // The same, over the `HOT_KEYS` keys the hot reads rotate over (their entries in the
    // CPU's caches as the hot reads' are): what `lean_hot` compares with.
    let hot_reads = &p.reads[..HOT_KEYS];
    g.bench_function("typed_256", |b| {
        b.iter(|| {
            i = (i + 1) % HOT_KEYS;
            let (ns, name) = &hot_reads[i];
            lister.get(ns, name).expect("stored")
        })
    });

    // Hot: every key read is in the hot cache (point reads remember what they decode).
    let lister = hot.lister();
    for (ns, name) in hot_reads {
        lister.get(ns, name).expect("stored");
    }
    let since = counters(&hot);
    g.bench_function("lean_hot", |b| {
        b.iter(|| {
            i = (i + 1) % HOT_KEYS;
            let (ns, name) = &hot_reads[i];
            lister.get(ns, name).expect("stored")
        })
    });
    report("lean_hot", &hot, since);

    // Cold: no hot cache, every read decompresses and decodes.
    let lister = cold.lister();
    let since = counters(&cold);
    g.bench_function("lean_cold", |b| {
        b.iter(|| {
            i = (i + 1) % n;
            let (ns, name) = &p.reads[i];
            lister.get(ns, name).expect("stored")
        })
    });
    report("lean_cold", &cold, since);

    // Lazy: the stored bytes and metadata, never decoded.
    let lister = cold.lister().lazy();
    let since = counters(&cold);
    g.bench_function("lazy", |b| {
        b.iter(|| {
            i = (i + 1) % n;
            let (ns, name) = &p.reads[i];
            lister.get(ns, name).expect("stored")
        })
    });
    report("lazy", &cold, since);
    g.finish();
}

fn lists(c: &mut Criterion) {
    let p = pods();
    let typed: Vec<_> = p.listed.iter().map(|j| decode(j)).collect();
    let ts = typed_store(&p.keys, &typed);
    // Lean reads of many objects do not fill the hot cache; with none, they decode all.
    let (ls, _) = lean_store(
        LeanConfig::default().hot_objects(0),
        namespace_index(),
        &p.keys,
        &p.listed,
    );
    let (tl, ll, zl) = (ts.lister(), ls.lister(), ls.lister().lazy());

    let mut g = c.benchmark_group("lean/list_10k");
    g.sample_size(10).sampling_mode(SamplingMode::Flat);
    g.bench_function("typed", |b| b.iter(|| tl.list()));
    let since = counters(&ls);
    g.bench_function("lean", |b| b.iter(|| ll.list()));
    let since = report("lean", &ls, since);
    g.bench_function("lazy", |b| b.iter(|| zl.list()));
    report("lazy", &ls, since);
    g.finish();

    let namespaces: Vec<String> = (0..NAMESPACES).map(|i| format!("ns-{i}")).collect();
    let mut g = c.benchmark_group("lean/by_index_100");
    let mut i = 0;
    g.bench_function("typed", |b| {
        b.iter(|| {
            i = (i + 1) % NAMESPACES;
            tl.by_index(NAMESPACE_INDEX, &namespaces[i])
                .expect("indexed")
        })
    });
    g.bench_function("lean", |b| {
        b.iter(|| {
            i = (i + 1) % NAMESPACES;
            ll.by_index(NAMESPACE_INDEX, &namespaces[i])
                .expect("indexed")
        })
    });
    g.bench_function("lazy", |b| {
        b.iter(|| {
            i = (i + 1) % NAMESPACES;
            zl.by_index(NAMESPACE_INDEX, &namespaces[i])
                .expect("indexed")
        })
    });
    g.finish();

    let mut g = c.benchmark_group("lean/list_keys");
    g.bench_function("typed", |b| b.iter(|| tl.list_keys()));
    g.bench_function("lean", |b| b.iter(|| ll.list_keys()));
    g.finish();

    // `app=app-<a>`: 20 of the 10,000 pods (500 apps). The typed store matches the decoded
    // labels, the lean store the parsed metadata; lean decodes the 20 it returns.
    let selectors: Vec<Selector> = (0..support::APPS)
        .map(|a| Expression::Equal("app".into(), format!("app-{a}")).into())
        .collect();
    assert_eq!(tl.list_selected(&selectors[7]).len(), PODS / support::APPS);
    let mut g = c.benchmark_group("lean/list_selected_20");
    g.sample_size(50);
    let mut a = 0;
    g.bench_function("typed", |b| {
        b.iter(|| {
            a = (a + 1) % selectors.len();
            tl.list_selected(&selectors[a])
        })
    });
    g.bench_function("lean", |b| {
        b.iter(|| {
            a = (a + 1) % selectors.len();
            ll.list_selected(&selectors[a])
        })
    });
    g.bench_function("lazy", |b| {
        b.iter(|| {
            a = (a + 1) % selectors.len();
            zl.list_selected(&selectors[a])
        })
    });
    g.finish();
}

/// The `n`-th write of a bench that updates every pod in turn: its key and whether it writes
/// the modified version (odd rounds write the listed version back). The first round writes
/// the modified version, so no write re-stores the very object stored (a resync, which the
/// store skips).
fn nth_write(n: usize) -> (usize, bool) {
    (n % PODS, (n / PODS) % 2 == 0)
}

/// One lean write bench, `name`: a store of `p`'s listed pods with `config` and `indexers`,
/// then the writes of [`nth_write`] as the Indexer stores the pipeline's objects (the old
/// object returned, dropped outside the measurement).
fn lean_writes(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    p: &Pods,
    config: LeanConfig,
    indexers: Indexers<Pod>,
) {
    let (mut ls, listed) = lean_store(config, indexers, &p.keys, &p.listed);
    let modified = encode_all(&ls, &p.modified);
    let state = Arc::clone(ls.lean_state().expect("lean"));
    let since = counters(&ls);
    let mut n = 0;
    g.bench_function(name, |b| {
        b.iter_batched(
            || {
                let (k, new) = nth_write(n);
                n += 1;
                let raw = if new { &modified[k] } else { &listed[k] };
                let obj = LazyObject::from_raw(Arc::clone(raw), Arc::clone(&state));
                (p.keys[k].clone(), obj)
            },
            |(key, obj)| {
                let old = ls.batch().put_object(key, &obj).expect("stores");
                (old, obj)
            },
            BatchSize::SmallInput,
        )
    });
    report(name, &ls, since);
}

fn writes(c: &mut Criterion) {
    let p = pods();
    // One write per batch (each published), the old object returned: the Indexer's update of
    // one object. The old object is dropped outside the measurement (the Indexer hands it to
    // the notification).
    let mut g = c.benchmark_group("lean/write");

    let listed: Vec<_> = p.listed.iter().map(|j| decode(j)).collect();
    let modified: Vec<_> = p.modified.iter().map(|j| decode(j)).collect();
    let mut ts = typed_store(&p.keys, &listed);
    let mut n = 0;
    g.bench_function("typed_put_keyed", |b| {
        b.iter_batched(
            || {
                let (k, new) = nth_write(n);
                n += 1;
                let obj = if new { &modified[k] } else { &listed[k] };
                (p.keys[k].clone(), Arc::clone(obj))
            },
            |(key, obj)| ts.batch().put_keyed(key, obj),
            BatchSize::SmallInput,
        )
    });
    drop((ts, listed, modified));

    // Lean, metadata indexes only: the raw object is stored as it is, nothing decoded.
    lean_writes(
        &mut g,
        "lean_put_object",
        &p,
        LeanConfig::default(),
        namespace_index(),
    );

    // Lean with a typed index function as well (the pod's node): the new object is decoded
    // once for it and, as the pipeline's object, remembered in the hot cache, which evicts
    // (frees) a decoded object once full. `_hot_0`: the same without a hot cache (the decoded
    // object goes with the notification, freed after the measurement, as it would be freed by
    // the handlers, not by the Indexer).
    for (name, config) in [
        ("lean_put_object_typed_index", LeanConfig::default()),
        (
            "lean_put_object_typed_index_hot_0",
            LeanConfig::default().hot_objects(0),
        ),
    ] {
        let mut indexers = namespace_index();
        indexers.insert(
            "node".to_string(),
            index_func(|p: &Pod| p.spec.iter().filter_map(|s| s.node_name.clone()).collect()),
        );
        lean_writes(&mut g, name, &p, config, indexers);
    }

    // Lean with a metadata index function on a label as well (what `meta_index_func` costs).
    let mut indexers = namespace_index();
    indexers.insert(
        "app".to_string(),
        meta_index_func(|o: &LazyObject<Pod>| {
            o.labels()
                .get("app")
                .map(String::from)
                .into_iter()
                .collect()
        }),
    );
    lean_writes(
        &mut g,
        "lean_put_object_label_index",
        &p,
        LeanConfig::default(),
        indexers,
    );
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = lean;
    config = config();
    targets = codec, gets, lists, writes
}
criterion_main!(lean);
