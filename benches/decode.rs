//! What one pod's decode costs with each JSON decoder that works through serde (issue 27,
//! item 2): serde_json, `kinformer::exact` (serde_json with exact-size vectors, what every typed
//! decode of the informer uses), sonic-rs and simd-json, each into k8s-openapi's `Pod`; and the
//! lean mode's metadata-only parse (`RawObject` encoding without compression is not separable,
//! so `lean/meta` is the `serde_json` parse of `metadata` alone into `ObjectMeta`, its floor).
//!
//! The pods are the shared benchmark's (`support`, 4.8 KB of JSON each); each iteration decodes
//! the next of 1,000 different pods so the CPU's caches hold no decoded answer.
//!
//! Run: `cargo bench -p kinformer --bench decode --features simd-bench`.

#[allow(dead_code)] // the other benches use all of the workload
mod support;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

const SMALL: BatchSize = BatchSize::SmallInput;
use k8s_openapi::{api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use serde::Deserialize;

const PODS: usize = 1000;

/// The `metadata` of an object and nothing else (the other fields are skipped by the parser).
#[derive(Deserialize)]
struct MetaOnly {
    #[allow(dead_code)]
    metadata: ObjectMeta,
}

fn decode(c: &mut Criterion) {
    let workload = support::Workload::new(support::SEED);
    let pods = workload.pods(PODS, support::Version::listed);
    let bytes: u64 = pods.iter().map(|p| p.len() as u64).sum::<u64>() / PODS as u64;
    let mut g = c.benchmark_group("decode_pod");
    g.throughput(Throughput::Bytes(bytes));
    let mut i = 0;
    // Every routine gets its own copy of the next pod (simd-json parses in place) and returns
    // what it decoded: the copy and the drop are outside the timing, so the routines compare
    // parsing alone (`drop_decoded` times the drop).
    let mut next = || {
        i = (i + 1) % PODS;
        pods[i].clone()
    };
    g.bench_function("serde_json", |b| {
        b.iter_batched_ref(
            &mut next,
            |buf| serde_json::from_slice::<Pod>(buf).unwrap(),
            SMALL,
        )
    });
    g.bench_function("exact", |b| {
        b.iter_batched_ref(
            &mut next,
            |buf| kinformer::exact::from_slice::<Pod>(buf).unwrap(),
            SMALL,
        )
    });
    g.bench_function("sonic_rs", |b| {
        b.iter_batched_ref(
            &mut next,
            |buf| sonic_rs::from_slice::<Pod>(buf).unwrap(),
            SMALL,
        )
    });
    g.bench_function("simd_json", |b| {
        b.iter_batched_ref(
            &mut next,
            |buf| simd_json::serde::from_slice::<Pod>(buf).unwrap(),
            SMALL,
        )
    });
    g.bench_function("serde_json_metadata_only", |b| {
        b.iter_batched_ref(
            &mut next,
            |buf| serde_json::from_slice::<MetaOnly>(buf).unwrap(),
            SMALL,
        )
    });
    g.bench_function("sonic_rs_metadata_only", |b| {
        b.iter_batched_ref(
            &mut next,
            |buf| sonic_rs::from_slice::<MetaOnly>(buf).unwrap(),
            SMALL,
        )
    });
    g.bench_function("simd_json_metadata_only", |b| {
        b.iter_batched_ref(
            &mut next,
            |buf| simd_json::serde::from_slice::<MetaOnly>(buf).unwrap(),
            SMALL,
        )
    });
    g.bench_function("drop_decoded", |b| {
        b.iter_batched(
            || kinformer::exact::from_slice::<Pod>(&next()).unwrap(),
            drop,
            SMALL,
        )
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    targets = decode
}
criterion_main!(benches);
