//! T4: with no trace sink and the trace target disabled, a hop allocates nothing, nor does a
//! named workqueue's add, get, done and forget, nor a reconcile span (T5, T6) (and, by
//! construction, does no more than a relaxed load and tracing's cached level check; its time is
//! measured by the `trace_hop` criterion bench, not here).
//!
//! The counting allocator counts per thread, so the harness's other threads do not disturb it.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
    hint::black_box,
    sync::Arc,
};

use k8s_openapi::api::core::v1::Pod;
use kinformer_actors::{
    AsyncWorkQueue, LazyObject, ObjectKey, TraceId,
    trace::{BenchHop, ReconcileResult, ReconcileSpan, WriteVerb, record_write},
};
use tracing_subscriber::{EnvFilter, fmt};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: a thread being torn down may still allocate.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every call is forwarded to `System` unchanged; counting touches no heap memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

fn pod() -> Arc<LazyObject<Pod>> {
    let mut p = Pod::default();
    p.metadata.namespace = Some("demo".into());
    p.metadata.name = Some("web-1".into());
    p.metadata.uid = Some("4f0c2b5e-8d3a-4a47-9d1e-0c8f5d6a7b21".into());
    p.metadata.resource_version = Some("123456".into());
    Arc::new(LazyObject::from_object(Arc::new(p)))
}

/// The same pod as the lean mode carries it (I7): its bytes, metadata parsed.
fn lean_pod() -> Arc<LazyObject<Pod>> {
    let state = Arc::new(kinformer::lean::LeanState::<Pod>::new(Default::default()));
    let json = pod().to_json().expect("serialises");
    let raw = state.encode(&json).expect("encodes");
    Arc::new(LazyObject::from_raw(Arc::new(raw), state))
}

/// Allocations made by 10,000 hops of each object form on this thread, after one warm-up hop
/// (which may register the callsite with tracing).
fn hop_allocations() -> u64 {
    let hop = BenchHop::new("v1/Pod", "Pod");
    let (obj, lean) = (pod(), lean_pod());
    hop.hop(TraceId(0), &obj);
    hop.hop(TraceId(0), &lean);
    let before = allocations();
    for i in 0..10_000 {
        hop.hop(black_box(TraceId(i)), black_box(&obj));
        hop.hop(black_box(TraceId(i)), black_box(&lean));
    }
    allocations() - before
}

/// One key's round through a named queue and a reconcile span: added, merged, got, dirty,
/// done (queued again), got, a write, done, forget.
fn queue_round(q: &AsyncWorkQueue<ObjectKey>, key: &ObjectKey, i: u64) {
    q.add_traced(key.clone(), TraceId(i));
    q.add_traced(key.clone(), TraceId(i + 1));
    let taken = futures::executor::block_on(q.get_traced(1)).expect("queued");
    q.add_traced(key.clone(), TraceId(i + 2));
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

/// Allocations made by 1,000 rounds of [`queue_round`] on this thread, after one warm-up
/// round (the queue's maps and buffers reach their size; the executor's thread-local).
fn queue_allocations() -> u64 {
    let q = AsyncWorkQueue::<ObjectKey>::new().with_name("deployments");
    let key = ObjectKey::new(Some("demo"), "web");
    queue_round(&q, &key, 1);
    let before = allocations();
    for i in 0..1_000 {
        queue_round(black_box(&q), black_box(&key), i * 3 + 1);
    }
    allocations() - before
}

#[test]
fn t5_t6_the_queue_and_a_span_with_tracing_off_allocate_nothing() {
    assert_eq!(
        queue_allocations(),
        0,
        "allocations in 1,000 queue rounds with tracing off"
    );
}

#[test]
fn t5_t6_the_queue_with_the_trace_target_filtered_out_allocates_nothing() {
    let subscriber = fmt()
        .with_env_filter(EnvFilter::new("info"))
        .with_writer(std::io::sink)
        .finish();
    let n = tracing::subscriber::with_default(subscriber, queue_allocations);
    assert_eq!(
        n, 0,
        "allocations in 1,000 queue rounds with the trace target filtered out"
    );
}

#[test]
fn the_counter_sees_allocations() {
    let before = allocations();
    black_box(vec![0u8; 64]);
    assert!(allocations() > before, "the counting allocator counts");
}

#[test]
fn t4_a_hop_with_tracing_off_allocates_nothing() {
    assert_eq!(
        hop_allocations(),
        0,
        "allocations in 10,000 hops with tracing off"
    );
}

#[test]
fn t4_a_hop_with_the_trace_target_filtered_out_allocates_nothing() {
    // A subscriber for everything else at info, as an application's: the trace target is TRACE.
    let subscriber = fmt()
        .with_env_filter(EnvFilter::new("info"))
        .with_writer(std::io::sink)
        .finish();
    let n = tracing::subscriber::with_default(subscriber, hop_allocations);
    assert_eq!(
        n, 0,
        "allocations in 10,000 hops with the trace target filtered out"
    );
}
