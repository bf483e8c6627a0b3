//! Memory per stored object, typed and lean (docs/semantics.md I7): live heap bytes counted by
//! a global allocator, for stores of 50,000 pods of the shared benchmark (`support`) with the
//! namespace index, built as the informer builds them (typed: each pod decoded and written with
//! `put_keyed`; lean: each pod's JSON encoded by the store's `LeanState` and written with
//! `put_object`, the key made from the object as the Indexer gets it).
//!
//! Per object, everything the store holds: the objects, their keys, the persistent maps, the
//! namespace index, the lean state (dictionary, an empty hot cache) — the live heap with the
//! store built minus the live heap before. "objects" is the objects alone (measured before
//! they are written to the store), "store" the rest. Bytes are the sizes asked of the
//! allocator: glibc's malloc adds its header (8 bytes) and rounds each block up to 16 bytes,
//! so "allocations/object" is given to estimate what the process pays on top (about 8–16
//! bytes per allocation). zstd's contexts are allocated by the C library (not counted; a few
//! per thread, not per object).
//!
//! Then the hot cache full (1,024 pods decoded by point reads): its cost over the store at
//! rest.
//!
//! Prints Markdown tables. Run: `cargo bench -p kinformer --bench lean_memory` (about 10 s
//! once built, 2 GB of memory at the peak: 50,000 decoded pods). Options:
//! - `--pods N`: N pods instead of 50,000;
//! - `--real LIST.json`: compare the generated pods with a LIST response of the shared
//!   benchmark's server (`curl http://127.0.0.1:<port>/api/v1/pods > LIST.json` while
//!   `python3 bench/serve.py --pods 10000 --events 10 --port <port>` runs): JSON, compressed
//!   and metadata bytes per pod of both.
//! - `--print-pod I [--modified]`: prints the JSON of generated pod I (as listed, or after
//!   one MODIFIED event) and exits.
//! - `--protobuf`: the stored bytes per pod when the lean mode keeps each pod's protobuf
//!   message (an informer asking for protobuf, R12) against its JSON: uncompressed, compressed
//!   with the dictionary (after training) and without, with `managedFields` stripped, and the
//!   parsed metadata (which must be the same). The protobuf is made from each pod's JSON by
//!   `kinformer::protobuf::object_message` (kube-apiserver also writes non-pointer zero values:
//!   a few bytes more). Sizes do not depend on the build profile:
//!   `cargo bench -p kinformer --bench lean_memory --profile dev -- --protobuf --pods 5000`.

mod support;

use std::{
    alloc::{GlobalAlloc, Layout, System},
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicIsize, Ordering},
    },
    time::Instant,
};

use k8s_openapi::api::core::v1::Pod;
use kinformer::{
    key::default_key_func,
    lean::{LazyObject, LeanState, RawObject},
    store::{Indexers, LeanConfig, NAMESPACE_INDEX, Store, namespace_index_func},
};
use serde_json::value::RawValue;
use support::{SEED, Version, Workload};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
/// Allocations live (each costs the allocator's header and rounding on top of its size).
static BLOCKS: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` with the caller's arguments, unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System.alloc`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
            BLOCKS.fetch_add(1, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System.alloc_zeroed`'s.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
            BLOCKS.fetch_add(1, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is `System.dealloc`'s.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        BLOCKS.fetch_sub(1, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is `System.realloc`'s.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn blocks() -> isize {
    BLOCKS.load(Ordering::Relaxed)
}

const DEFAULT_PODS: usize = 50_000;

/// Mean of `f` over `items`.
pub fn mean<T>(items: &[T], f: impl Fn(&T) -> usize) -> f64 {
    items.iter().map(f).sum::<usize>() as f64 / items.len().max(1) as f64
}

fn namespace_index() -> Indexers<Pod> {
    let mut ix = Indexers::new();
    ix.insert(NAMESPACE_INDEX.to_string(), namespace_index_func());
    ix
}

/// One store's figures.
struct Row {
    name: &'static str,
    pods: usize,
    /// Live bytes of the store, everything included.
    total: isize,
    /// Live allocations of the store.
    allocations: isize,
    /// Live bytes of the objects alone.
    objects: isize,
    /// Seconds to decode or encode the objects and write them (one thread, counting allocator).
    build: f64,
    /// Lean: compressed, JSON and metadata bytes per object, dictionary bytes.
    lean: Option<(f64, f64, f64, u64)>,
}

impl Row {
    fn per(&self, bytes: isize) -> f64 {
        bytes as f64 / self.pods as f64
    }
}

/// A typed store of the pods, each decoded by `decode`.
fn typed(name: &'static str, json: &[Vec<u8>], decode: fn(&[u8]) -> Pod) -> Row {
    let (before, blocks_before) = (live(), blocks());
    let t = Instant::now();
    let objs: Vec<Arc<Pod>> = json.iter().map(|j| Arc::new(decode(j))).collect();
    let objects = live() - before - (objs.capacity() * size_of::<Arc<Pod>>()) as isize;
    let key_func = default_key_func::<Pod>();
    let mut store = Store::new(default_key_func(), namespace_index());
    let mut batch = store.batch();
    for o in &objs {
        let key = key_func(o).expect("named");
        batch.put_keyed(key, Arc::clone(o));
    }
    batch.commit();
    let build = t.elapsed().as_secs_f64();
    drop(objs);
    let (total, allocations) = (live() - before, blocks() - blocks_before);
    drop(store);
    Row {
        name,
        pods: json.len(),
        total,
        allocations,
        objects,
        build,
        lean: None,
    }
}

/// The hot cache full: decoded objects it holds and their live bytes.
struct HotCost {
    objects: u64,
    bytes: isize,
}

/// A lean store of the pods with `config`; with `fill_hot`, then the hot cache filled by point
/// reads.
fn lean(
    name: &'static str,
    json: &[Vec<u8>],
    config: LeanConfig,
    indexers: Indexers<Pod>,
    fill_hot: bool,
) -> (Row, Option<HotCost>) {
    let (before, blocks_before) = (live(), blocks());
    let t = Instant::now();
    let mut store = Store::lean(default_key_func(), indexers, config);
    let state = Arc::clone(store.lean_state().expect("lean"));
    let empty = live();
    let raws: Vec<Arc<RawObject>> = json
        .iter()
        .map(|j| Arc::new(state.encode(j).expect("encodes")))
        .collect();
    let objects = live() - empty - (raws.capacity() * size_of::<Arc<RawObject>>()) as isize;
    let mut batch = store.batch();
    for raw in &raws {
        let obj = LazyObject::from_raw(Arc::clone(raw), Arc::clone(&state));
        let key = obj.key().expect("named");
        batch.put_object(key, &obj).expect("stores");
    }
    batch.commit();
    let build = t.elapsed().as_secs_f64();
    drop((raws, state));
    let (total, allocations) = (live() - before, blocks() - blocks_before);
    let st = store.lean_stats().expect("lean");
    assert_eq!(st.objects as usize, json.len());
    assert_eq!(st.decodes, 0, "the informer's writes decode nothing");
    let n = st.objects as f64;
    let row = Row {
        name,
        pods: json.len(),
        total,
        allocations,
        objects,
        build,
        lean: Some((
            st.bytes as f64 / n,
            st.json_bytes as f64 / n,
            st.meta_bytes as f64 / n,
            st.dictionary_bytes,
        )),
    };
    let hot = fill_hot.then(|| {
        let at_rest = live();
        let lister = store.lister();
        // More distinct keys than the cache holds, so every shard fills whatever the spread.
        for i in 0..(4 * config.hot_objects).min(json.len()) {
            let ns = format!("ns-{}", i % support::NAMESPACES);
            lister.get(&ns, &format!("pod-{i}")).expect("stored");
        }
        HotCost {
            objects: store.lean_stats().expect("lean").hot_objects,
            bytes: live() - at_rest,
        }
    });
    (row, hot)
}

fn print_rows(rows: &[Row]) {
    println!(
        "| store ({} pods; namespace index unless said) | bytes/object | objects | store (keys, maps, index, state) | vs typed | allocations/object | build |",
        rows[0].pods
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let typed = rows[0].per(rows[0].total);
    for r in rows {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.1}% | {:.1} | {:.2} s |",
            r.name,
            r.per(r.total),
            r.per(r.objects),
            r.per(r.total - r.objects),
            100.0 * r.per(r.total) / typed,
            r.per(r.allocations),
            r.build
        );
    }
    println!();
    println!(
        "| lean store | compressed bytes/object | JSON bytes/object | ratio | metadata bytes/object | dictionary |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for r in rows {
        if let Some((bytes, json, meta, dict)) = r.lean {
            println!(
                "| {} | {bytes:.0} | {json:.0} | {:.1}x | {meta:.0} | {dict} B |",
                r.name,
                json / bytes
            );
        }
    }
}

/// Sizes per pod of `items` through a fresh lean state each: (JSON, compressed with the
/// dictionary once trained, compressed without dictionary, metadata, JSON without
/// managedFields).
fn sizes(items: &[&[u8]]) -> [f64; 5] {
    let dict = LeanState::<Pod>::new(LeanConfig::default());
    let plain = LeanState::<Pod>::new(LeanConfig::default().dictionary(false));
    let strip = LeanState::<Pod>::new(LeanConfig::default().strip_managed_fields(true));
    let with: Vec<RawObject> = items
        .iter()
        .map(|j| dict.encode(j).expect("encodes"))
        .collect();
    let without: Vec<RawObject> = items
        .iter()
        .map(|j| plain.encode(j).expect("encodes"))
        .collect();
    let stripped: Vec<RawObject> = items
        .iter()
        .map(|j| strip.encode(j).expect("encodes"))
        .collect();
    // The first 256 are compressed before the dictionary is trained.
    let trained = &with[256.min(with.len())..];
    [
        mean(items, |j| j.len()),
        mean(trained, RawObject::stored_len),
        mean(&without, RawObject::stored_len),
        mean(&with, |r| r.meta().heap_bytes()),
        mean(&stripped, RawObject::json_len),
    ]
}

/// `--protobuf`: stored bytes per pod, JSON against protobuf messages.
fn protobuf_sizes(pods: usize) {
    let json = Workload::new(SEED).pods(pods, Version::listed);
    let pb: Vec<Vec<u8>> = json
        .iter()
        .map(|j| {
            let v: serde_json::Value = serde_json::from_slice(j).expect("JSON");
            kinformer::protobuf::object_message("v1", "Pod", &v).expect("encodes")
        })
        .collect();
    let encode = |config: LeanConfig, protobuf: bool| -> Vec<RawObject> {
        let state = LeanState::<Pod>::new(config);
        json.iter()
            .zip(&pb)
            .map(|(j, p)| match protobuf {
                false => state.encode(j).expect("encodes"),
                true => state
                    .encode_protobuf(p, ("v1", "Pod"), false)
                    .expect("encodes"),
            })
            .collect()
    };
    let trained = |r: &[RawObject]| mean(&r[256.min(r.len())..], RawObject::stored_len);
    let row = |protobuf: bool| {
        let dict = encode(LeanConfig::default(), protobuf);
        let plain = encode(LeanConfig::default().dictionary(false), protobuf);
        let strip = encode(LeanConfig::default().strip_managed_fields(true), protobuf);
        [
            mean(&dict, RawObject::json_len),
            trained(&dict),
            mean(&plain, RawObject::stored_len),
            mean(&strip, RawObject::json_len),
            trained(&strip),
            mean(&dict, |r| r.meta().heap_bytes()),
        ]
    };
    let (j, p) = (row(false), row(true));
    println!("| per pod ({pods} pods) | JSON | protobuf | protobuf/JSON |");
    println!("|---|---:|---:|---:|");
    let labels = [
        "body bytes",
        "compressed, dictionary (after training)",
        "compressed, no dictionary",
        "body bytes, managedFields stripped",
        "compressed, stripped, dictionary (after training)",
        "metadata bytes",
    ];
    for ((label, j), p) in labels.iter().zip(j).zip(p) {
        println!("| {label} | {j:.0} | {p:.0} | {:.2} |", p / j);
    }
}

/// `--real LIST.json`: the generated pods against the real workload's.
fn compare(path: &str) {
    let body = std::fs::read(path).expect("reads the LIST response");
    let list: HashMap<&str, &RawValue> = serde_json::from_slice(&body).expect("a JSON object");
    let items: Vec<&RawValue> =
        serde_json::from_str(list.get("items").expect("items").get()).expect("a list");
    let real: Vec<&[u8]> = items.iter().map(|v| v.get().as_bytes()).collect();
    let n = real.len();
    let w = Workload::new(SEED);
    let generated = w.pods(n, Version::listed);
    let generated: Vec<&[u8]> = generated.iter().map(Vec::as_slice).collect();
    let (r, g) = (sizes(&real), sizes(&generated));
    let decoded = |items: &[&[u8]]| {
        let before = live();
        let objs: Vec<Pod> = items
            .iter()
            .take(1000)
            .map(|j| kinformer::exact::from_slice(j).expect("a Pod"))
            .collect();
        let size = live() - before - (objs.capacity() * size_of::<Pod>()) as isize;
        size as f64 / objs.len() as f64 + size_of::<Pod>() as f64
    };
    let (rd, gd) = (decoded(&real), decoded(&generated));
    println!("| per pod ({n} pods) | serve.py | generated | difference |");
    println!("|---|---:|---:|---:|");
    let labels = [
        "JSON bytes",
        "compressed, dictionary (after training)",
        "compressed, no dictionary",
        "metadata bytes",
        "JSON bytes without managedFields",
    ];
    for ((label, r), g) in labels.iter().zip(r).zip(g) {
        println!(
            "| {label} | {r:.0} | {g:.0} | {:+.1}% |",
            100.0 * (g - r) / r
        );
    }
    println!(
        "| decoded Pod (exact), first 1,000 | {rd:.0} | {gd:.0} | {:+.1}% |",
        100.0 * (gd - rd) / rd
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    if let Some(i) = value("--print-pod") {
        let i: usize = i.parse().expect("--print-pod <index>");
        let version = if args.iter().any(|a| a == "--modified") {
            Version::modified(i)
        } else {
            Version::listed(i)
        };
        let json = Workload::new(SEED).pod(i, version);
        println!("{}", String::from_utf8_lossy(&json));
        return;
    }
    if let Some(path) = value("--real") {
        compare(&path);
        return;
    }
    let pods = value("--pods").map_or(DEFAULT_PODS, |n| n.parse().expect("--pods <count>"));
    if args.iter().any(|a| a == "--protobuf") {
        protobuf_sizes(pods);
        return;
    }
    let t = Instant::now();
    let json = Workload::new(SEED).pods(pods, Version::listed);
    eprintln!(
        "{pods} pods generated, {:.0} bytes of JSON each, in {:.2} s",
        mean(&json, Vec::len),
        t.elapsed().as_secs_f64()
    );

    let mut rows = vec![
        typed("typed (`exact::from_slice`)", &json, |j| {
            kinformer::exact::from_slice(j).expect("a Pod")
        }),
        typed("typed (`serde_json::from_slice`)", &json, |j| {
            serde_json::from_slice(j).expect("a Pod")
        }),
    ];
    let (row, hot) = lean(
        "lean (dictionary)",
        &json,
        LeanConfig::default(),
        namespace_index(),
        true,
    );
    rows.push(row);
    rows.push(
        lean(
            "lean, no dictionary",
            &json,
            LeanConfig::default().dictionary(false),
            namespace_index(),
            false,
        )
        .0,
    );
    rows.push(
        lean(
            "lean, managedFields stripped",
            &json,
            LeanConfig::default().strip_managed_fields(true),
            namespace_index(),
            false,
        )
        .0,
    );
    // What the namespace index costs: the same store without it.
    rows.push(
        lean(
            "lean (dictionary), no index",
            &json,
            LeanConfig::default(),
            Indexers::new(),
            false,
        )
        .0,
    );
    print_rows(&rows);
    if let Some(hot) = hot {
        println!();
        println!(
            "| hot cache, full | decoded objects | bytes | bytes/object cached | per stored object |"
        );
        println!("|---|---:|---:|---:|---:|");
        println!(
            "| lean (dictionary), default `hot_objects` | {} | {:.1} MB | {:.0} | {:.0} |",
            hot.objects,
            hot.bytes as f64 / 1e6,
            hot.bytes as f64 / hot.objects.max(1) as f64,
            hot.bytes as f64 / pods as f64
        );
    }
    eprintln!("total {:.1} s", t.elapsed().as_secs_f64());
}
