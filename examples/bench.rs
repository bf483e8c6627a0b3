//! kinformer's client for the shared informer benchmark (`BENCHMARKS.md` says how to run it).
//!
//! One Pod informer over all namespaces, K handlers that each see every add/update/delete and
//! stop at the sentinel pod `bench/done`. Prints the RESULT line the harness reads:
//! `RESULT impl=kinformer n= m= handlers= sync_ms= total_ms= events_per_s= objects=`.
//!
//! With no flags it runs the library's default configuration, as a typical user writes it:
//! `SharedIndexInformer::all(client)` and `add_event_handler` (overflow policy Coalesce, B3).
//! `--policy`, `--watch-list` (R7), `--transform` (drop managedFields: a P2 transform in the
//! typed mode, `LeanConfig::strip_managed_fields` in the lean one), `--lean` (the lean cache
//! mode, I7: the bytes the server sent), `--protobuf` (LIST and WATCH asked for in protobuf,
//! client-go's `ContentType`), `--handler` (what the K handlers are: typed closures,
//! key sinks feeding a workqueue whose worker reads the lister, as `deployment-controller`
//! does, or lazy handlers reading metadata) and `--trace` (T4) change one thing each;
//! `--decode-only` runs no informer at all and only reads the same LIST and WATCH through kube,
//! decoding each item into a `Pod` on one thread: the decode limit of the same run. The impl
//! name in the RESULT line names every flag that differs from the default, so runs can be told
//! apart.
//!
//! Besides the RESULT line it prints, on stderr, a `MEMORY` line: the peak RSS when the cache
//! had synced (`VmHWM` then), the RSS and the live heap (glibc's `mallinfo2`) after the events,
//! the heap per cached object, and in the lean mode the store's own counts (stored bytes,
//! JSON bytes, metadata bytes, decodes, hot-cache hits).
//!
//! The process's allocator is glibc's unless `KINFORMER_BENCH_ALLOC=mimalloc` (read once, before
//! the first allocation: see [`BenchAllocator`]); the impl name then ends in `-mimalloc`. The
//! library never chooses the allocator: this is the choice an application makes for itself.
//!
//! Reads `KUBECONFIG`, `BENCH_T0_UNIX_NS` (process start), `BENCH_PODS`/`BENCH_EVENTS` (n, m)
//! and `BENCH_TIMEOUT_S` (gives up with a non-zero status 10 s before it), and
//! `KINFORMER_BENCH_TRACE` (the trace file with `--trace on`).

use std::{
    alloc::{GlobalAlloc, Layout, System},
    collections::HashSet,
    ffi::CStr,
    io::Write,
    sync::{
        Arc,
        atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use clap::{Parser, ValueEnum};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kinformer_actors::{
    AsyncWorkQueue, CacheMode, ContentType, InformerConfig, LazyObject, LeanConfig, ListenerConfig,
    Lister, Notification, ObjectKey, OverflowPolicy, SharedIndexInformer, handler_fn,
};
use kube::{
    Api, Client,
    api::{ListParams, VersionMatch, WatchEvent, WatchParams},
};

/// The process's allocator, chosen once from `KINFORMER_BENCH_ALLOC` (`mimalloc`, or glibc's
/// for anything else) at the first allocation, so every block is freed by the allocator that
/// gave it out. A runtime switch rather than a build feature, so that one binary measures both
/// in the same session.
struct BenchAllocator;

/// 0: not chosen yet, 1: the system's (glibc), 2: mimalloc.
static ALLOCATOR: AtomicU8 = AtomicU8::new(0);

impl BenchAllocator {
    fn mimalloc() -> bool {
        let mut chosen = ALLOCATOR.load(Ordering::Relaxed);
        if chosen == 0 {
            // getenv allocates nothing. Threads racing here read the same environment and
            // store the same answer.
            // SAFETY: the name is a NUL-terminated string; the result is read before any
            // thread could change the environment (none does in this program).
            let v = unsafe { libc::getenv(c"KINFORMER_BENCH_ALLOC".as_ptr()) };
            // SAFETY: getenv returned a NUL-terminated string or null.
            let mi = !v.is_null() && unsafe { CStr::from_ptr(v) } == c"mimalloc";
            chosen = if mi { 2 } else { 1 };
            ALLOCATOR.store(chosen, Ordering::Relaxed);
        }
        chosen == 2
    }
}

// SAFETY: every call is forwarded to one allocator, the same for the whole process.
unsafe impl GlobalAlloc for BenchAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe {
            if Self::mimalloc() {
                mimalloc::MiMalloc.alloc(layout)
            } else {
                System.alloc(layout)
            }
        }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees; `ptr` came from the same allocator.
        unsafe {
            if Self::mimalloc() {
                mimalloc::MiMalloc.dealloc(ptr, layout)
            } else {
                System.dealloc(ptr, layout)
            }
        }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe {
            if Self::mimalloc() {
                mimalloc::MiMalloc.alloc_zeroed(layout)
            } else {
                System.alloc_zeroed(layout)
            }
        }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees; `ptr` came from the same allocator.
        unsafe {
            if Self::mimalloc() {
                mimalloc::MiMalloc.realloc(ptr, layout, new_size)
            } else {
                System.realloc(ptr, layout, new_size)
            }
        }
    }
}

#[global_allocator]
static GLOBAL: BenchAllocator = BenchAllocator;

/// kinformer's client for the shared informer benchmark.
#[derive(Parser, Debug)]
#[command(name = "bench", about)]
struct Args {
    /// Handlers registered on the informer (each sees every notification).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    handlers: u32,
    /// The handlers' overflow policy (B3). Default: the library's (Coalesce).
    #[arg(long, value_enum)]
    policy: Option<Policy>,
    /// Initial list by watch-list (`sendInitialEvents=true`, R7) instead of LIST.
    #[arg(long)]
    watch_list: bool,
    /// A transform that drops `metadata.managedFields` from every object (P2).
    #[arg(long)]
    transform: bool,
    /// The lean cache mode (I7): objects kept as the compressed bytes the server sent, decoded
    /// only for whoever reads them (`InformerConfig::default().cache(CacheMode::lean())`).
    #[arg(long)]
    lean: bool,
    /// With `--lean`: the shared-decode window (`LeanConfig::shared_decodes`; default the
    /// library's). Named in the impl when set.
    #[arg(long, requires = "lean")]
    shared_decodes: Option<usize>,
    /// Ask for protobuf on LIST and WATCH (`InformerConfig::content_type(ContentType::Protobuf)`,
    /// client-go's `ContentType`); a server that answers JSON is read as JSON. With `--lean`
    /// the store keeps each pod's protobuf message (or its JSON from a JSON answer).
    #[arg(long)]
    protobuf: bool,
    /// What the K handlers are. Default: typed closures (`add_event_handler`).
    #[arg(long, value_enum, default_value_t = HandlerKind::Typed)]
    handler: HandlerKind,
    /// With `--handler key-sink`: the workers that take keys from the queue and read the
    /// lister (`deployment-controller` runs 2).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    workers: u32,
    /// With `--handler key-sink`: a queue and its workers per handler (K controllers sharing
    /// the informer) instead of one queue all K sinks feed (one controller).
    #[arg(long)]
    queue_per_handler: bool,
    /// Message tracing during the run (T4).
    #[arg(long, value_enum, default_value_t = TraceMode::Off)]
    trace: TraceMode,
    /// No informer: read the same LIST and WATCH through kube and only decode each item into a
    /// `Pod` (one thread), counting keys: the single-thread decode limit of the same run.
    #[arg(long, conflicts_with_all = ["policy", "watch_list", "transform", "lean", "protobuf", "trace"])]
    decode_only: bool,
}

/// `--handler`: what each of the K handlers is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum HandlerKind {
    /// A closure over typed notifications (`handler_fn`, `Notification<Pod>`).
    Typed,
    /// A key sink feeding a workqueue (one for all K, or one each with
    /// `--queue-per-handler`), whose workers (threads) read each key from the lister, typed,
    /// as `deployment-controller`'s do. A handler is done when its sink saw `bench/done`; the
    /// run, once a worker has also read it.
    KeySink,
    /// A closure over lazy notifications that reads the key and metadata only.
    Lazy,
}

/// `--policy`: a listener's overflow policy (B3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Policy {
    /// Merge updates of a key while the handler is behind (the library default).
    Coalesce,
    /// Buffer every notification.
    Unbounded,
    /// Hold back the indexer while the handler's buffer is full.
    Block,
}

impl Policy {
    fn overflow(self) -> OverflowPolicy {
        match self {
            Policy::Coalesce => OverflowPolicy::Coalesce,
            Policy::Unbounded => OverflowPolicy::Unbounded,
            Policy::Block => OverflowPolicy::Block,
        }
    }
}

/// `--trace`: message tracing during the run (T4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TraceMode {
    /// No tracing subscriber and no trace sink.
    Off,
    /// A `tracing` subscriber installed (warnings to stderr), the trace target filtered out, no sink.
    Disabled,
    /// The trace sink on, writing every hop to `KINFORMER_BENCH_TRACE` (default
    /// `/tmp/kinformer-bench-trace.jsonl`).
    On,
}

impl Args {
    /// `kinformer` plus one suffix per flag that differs from the default.
    fn impl_name(&self) -> String {
        let mut name = String::from("kinformer");
        if self.decode_only {
            name.push_str("-decodeonly");
        }
        if self.watch_list {
            name.push_str("-watchlist");
        }
        match self.policy {
            None => {}
            Some(Policy::Coalesce) => name.push_str("-coalesce"),
            Some(Policy::Unbounded) => name.push_str("-unbounded"),
            Some(Policy::Block) => name.push_str("-block"),
        }
        if self.transform {
            name.push_str("-transform");
        }
        if self.lean {
            name.push_str("-lean");
        }
        if let Some(n) = self.shared_decodes {
            name.push_str(&format!("-sd{n}"));
        }
        if self.protobuf {
            name.push_str("-protobuf");
        }
        match self.handler {
            HandlerKind::Typed => {}
            HandlerKind::KeySink if self.queue_per_handler => {
                name.push_str(&format!("-keysink{}q", self.handlers))
            }
            HandlerKind::KeySink => name.push_str("-keysink"),
            HandlerKind::Lazy => name.push_str("-lazy"),
        }
        match self.trace {
            TraceMode::Off => {}
            TraceMode::Disabled => name.push_str("-tracedisabled"),
            TraceMode::On => name.push_str("-traceon"),
        }
        if BenchAllocator::mimalloc() {
            name.push_str("-mimalloc");
        }
        name
    }
}

#[derive(Clone, Copy)]
struct Clock {
    t0_unix_ns: Option<u128>,
    t0: Instant,
}

impl Clock {
    fn ms(&self) -> f64 {
        match self.t0_unix_ns {
            Some(t0) => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos();
                now.saturating_sub(t0) as f64 / 1e6
            }
            None => self.t0.elapsed().as_secs_f64() * 1e3,
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

fn finish(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(code)
}

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("kinformer-bench: {msg}");
    finish(1)
}

fn is_sentinel(p: &Pod) -> bool {
    p.metadata.name.as_deref() == Some("done") && p.metadata.namespace.as_deref() == Some("bench")
}

/// What the RESULT line reports.
struct Outcome {
    sync_ms: f64,
    total_ms: f64,
    objects: usize,
    /// Watch events seen (the sentinel included), when `BENCH_EVENTS` is not set.
    events: u64,
}

fn main() {
    let clock = Clock {
        t0_unix_ns: std::env::var("BENCH_T0_UNIX_NS")
            .ok()
            .and_then(|v| v.parse().ok()),
        t0: Instant::now(),
    };
    let args = Args::parse();
    if args.trace == TraceMode::Disabled {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter("warn")
            // Colour only on a terminal, and never with NO_COLOR: the bench's logs are often
            // captured to a file.
            .with_ansi(
                std::io::IsTerminal::is_terminal(&std::io::stderr())
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
            )
            .init();
    }
    let trace_sink = (args.trace == TraceMode::On).then(|| {
        let path = std::env::var("KINFORMER_BENCH_TRACE")
            .unwrap_or_else(|_| "/tmp/kinformer-bench-trace.jsonl".into());
        match kinformer_actors::trace::TraceSink::start(&path) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("kinformer-bench: cannot start the trace sink: {e}");
                finish(2);
            }
        }
    });
    let timeout = Duration::from_secs(
        env_u64("BENCH_TIMEOUT_S").map_or(600, |t| t.saturating_sub(10).max(10)),
    );
    let system = actix::System::new();
    let out = system.block_on(async {
        let client = match Client::try_default().await {
            Ok(c) => c,
            Err(e) => fail(format_args!("cannot build a client from KUBECONFIG: {e}")),
        };
        if args.decode_only {
            decode_only(client, clock, timeout).await
        } else {
            informer(&args, client, clock, timeout).await
        }
    });
    let n = env_u64("BENCH_PODS").unwrap_or(out.objects as u64);
    let m = env_u64("BENCH_EVENTS").unwrap_or(out.events.saturating_sub(1));
    let eps = m as f64 / ((out.total_ms - out.sync_ms).max(1.0) / 1e3);
    println!(
        "RESULT impl={} n={n} m={m} handlers={} sync_ms={:.0} total_ms={:.0} events_per_s={:.0} objects={}",
        args.impl_name(),
        args.handlers,
        out.sync_ms,
        out.total_ms,
        eps,
        out.objects
    );
    // Each of these objects was decoded twice (simd-json refused it, serde_json read it).
    eprintln!(
        "kinformer-bench: decode fallbacks {}",
        kinformer::exact::fallbacks()
    );
    if let Some(guard) = trace_sink {
        // Closing flushes the writer's backlog, so the counts (and the file's `end` line) are
        // final; it runs after the RESULT line, outside the measured time.
        match guard.close() {
            Ok(s) => eprintln!(
                "kinformer-bench: trace sink wrote {} records, dropped {}",
                s.written, s.dropped
            ),
            Err(e) => eprintln!("kinformer-bench: closing the trace sink failed: {e}"),
        }
    }
    finish(0)
}

/// Where the handlers record what they saw, shared by every kind of handler. Slots are
/// handlers, and in the key-sink mode also the queues (a queue is done when a worker read
/// `bench/done` from it).
#[derive(Clone)]
struct Progress {
    clock: Clock,
    handlers: usize,
    done_ms: Arc<Vec<AtomicU64>>,
    seen: Arc<Vec<AtomicU64>>,
    finished: Arc<AtomicUsize>,
    all_done: Arc<tokio::sync::Notify>,
}

impl Progress {
    /// `slots`: handlers plus queues.
    fn new(clock: Clock, slots: usize) -> Self {
        Progress {
            clock,
            handlers: slots,
            done_ms: Arc::new((0..slots).map(|_| AtomicU64::new(0)).collect()),
            seen: Arc::new((0..slots).map(|_| AtomicU64::new(0)).collect()),
            finished: Arc::new(AtomicUsize::new(0)),
            all_done: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Handler `h` saw one notification (or key); `sentinel`: it was `bench/done`.
    fn saw(&self, h: usize, sentinel: bool) {
        self.seen[h].fetch_add(1, Ordering::Relaxed);
        if sentinel && self.done_ms[h].load(Ordering::Relaxed) == 0 {
            self.done_ms[h].store(self.clock.ms().max(1.0) as u64, Ordering::Relaxed);
            if self.finished.fetch_add(1, Ordering::AcqRel) + 1 == self.handlers {
                self.all_done.notify_one();
            }
        }
    }

    fn seen(&self) -> Vec<u64> {
        self.seen
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .collect()
    }
}

/// Fields of `/proc/self/status` in kB (`VmRSS`, `VmHWM`).
fn proc_status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Bytes the allocator holds for live allocations (glibc's `mallinfo2`: in-use chunks plus
/// mmapped blocks); 0 under mimalloc, which glibc's figures do not see.
fn heap_in_use() -> u64 {
    if BenchAllocator::mimalloc() {
        return 0;
    }
    // SAFETY: mallinfo2 only reads the allocator's statistics; it has no preconditions.
    let mi = unsafe { libc::mallinfo2() };
    (mi.uordblks + mi.hblkhd) as u64
}

/// The informer run: the library's defaults unless a flag says otherwise.
async fn informer(args: &Args, client: Client, clock: Clock, deadline: Duration) -> Outcome {
    let heap_before = heap_in_use();
    let informer = if args.watch_list || args.lean || args.protobuf {
        let mut config = InformerConfig::default();
        config.reflector.watch_list = args.watch_list;
        if args.protobuf {
            config = config.content_type(ContentType::Protobuf);
        }
        if args.lean {
            // The lean mode cuts managedFields out of the bytes: no decode, no transform.
            let mut lean = LeanConfig::default().strip_managed_fields(args.transform);
            if let Some(n) = args.shared_decodes {
                lean = lean.shared_decodes(n);
            }
            config = config.cache(CacheMode::Lean(lean));
        }
        SharedIndexInformer::<Pod>::with_config(client, None, config)
    } else {
        SharedIndexInformer::<Pod>::all(client)
    };
    if args.transform && !args.lean {
        let _ = informer.set_transform(|mut p: Pod| {
            p.metadata.managed_fields = None;
            p
        });
    }

    let handlers = args.handlers as usize;
    // Key sinks: one queue for all (one controller), or one each (K controllers); each queue's
    // progress slot follows the handlers'.
    let queues: Vec<AsyncWorkQueue<ObjectKey>> = match args.handler {
        HandlerKind::KeySink if args.queue_per_handler => {
            (0..handlers).map(|_| AsyncWorkQueue::new()).collect()
        }
        HandlerKind::KeySink => vec![AsyncWorkQueue::new()],
        _ => Vec::new(),
    };
    let progress = Progress::new(clock, handlers + queues.len());
    let mut workers = Vec::new();
    for (q, queue) in queues.iter().enumerate() {
        for _ in 0..args.workers {
            workers.push(spawn_worker(
                handlers + q,
                queue.clone(),
                informer.lister(),
                progress.clone(),
            ));
        }
    }
    for h in 0..handlers {
        let cfg = args.policy.map(|p| {
            ListenerConfig::default()
                .policy(p.overflow())
                .name(format!("bench-{h}"))
        });
        let added = match args.handler {
            HandlerKind::Typed => {
                let progress = progress.clone();
                let handler = handler_fn(move |n: &Notification<Pod>| {
                    let sentinel =
                        matches!(n, Notification::Add { .. } | Notification::Update { .. })
                            && is_sentinel(n.object());
                    progress.saw(h, sentinel);
                });
                // A typical user registers with `add_event_handler`; the listener options only
                // when a flag asks for a policy.
                match cfg {
                    None => informer.add_event_handler(handler).await.map(|_| ()),
                    Some(cfg) => informer
                        .add_event_handler_with(handler, cfg)
                        .await
                        .map(|_| ()),
                }
            }
            HandlerKind::Lazy => {
                let progress = progress.clone();
                let handler = handler_fn(move |n: &Notification<LazyObject<Pod>>| {
                    let o = n.object();
                    let sentinel = !matches!(n, Notification::Delete { .. })
                        && o.namespace() == Some("bench")
                        && o.name() == Some("done");
                    progress.saw(h, sentinel);
                });
                informer
                    .add_lazy_event_handler(handler, cfg.unwrap_or_default())
                    .await
                    .map(|_| ())
            }
            HandlerKind::KeySink => {
                let queue = queues[h % queues.len()].clone();
                let progress = progress.clone();
                let sink = move |key: ObjectKey| {
                    progress.saw(h, key.as_str() == "bench/done");
                    queue.add(key);
                };
                informer
                    .add_key_sink(sink, None, cfg.unwrap_or_default())
                    .await
                    .map(|_| ())
            }
        };
        if let Err(e) = added {
            fail(format_args!("cannot add handler: {e}"));
        }
    }
    if let Err(e) = informer.start() {
        fail(format_args!("cannot start: {e}"));
    }
    let sync_ms = match tokio::time::timeout(deadline, informer.wait_for_sync()).await {
        Ok(()) => clock.ms(),
        Err(_) => fail(format_args!(
            "did not sync within {}s: {:?}",
            deadline.as_secs(),
            informer.health()
        )),
    };
    let peak_at_sync_kb = proc_status_kb("VmHWM:");
    let waiter = progress.all_done.notified();
    if progress.finished.load(Ordering::Acquire) < progress.handlers
        && tokio::time::timeout(deadline, waiter).await.is_err()
    {
        fail(format_args!(
            "handlers did not all see bench/done within {}s: seen={:?}",
            deadline.as_secs(),
            progress.seen()
        ));
    }
    let total_ms = progress
        .done_ms
        .iter()
        .map(|d| d.load(Ordering::Relaxed))
        .max()
        .unwrap_or(0) as f64;
    let objects = informer.lister().len();
    let h = informer.health();
    eprintln!(
        "kinformer-bench: events={} lists={} watches={} restarts={} fifo_peak_pending={} writer_waits={} handler_seen={:?}",
        h.events,
        h.lists,
        h.watches,
        h.restarts,
        informer.fifo_status().peak_pending_deltas(),
        informer.fifo_status().writer_waits(),
        progress.seen()
    );
    let heap_after = heap_in_use();
    let lean = informer.lean_stats().map_or(String::new(), |l| {
        format!(
            " lean_objects={} stored_bytes={} json_bytes={} meta_bytes={} dictionary_bytes={} decodes={} hits={} hot={} released={} redecodes={}",
            l.objects, l.bytes, l.json_bytes, l.meta_bytes, l.dictionary_bytes, l.decodes, l.hits, l.hot_objects, l.released, l.redecodes
        )
    });
    eprintln!(
        "MEMORY impl={} peak_rss_at_sync_kb={} rss_after_kb={} heap_after_bytes={} heap_per_object={}{}",
        args.impl_name(),
        peak_at_sync_kb,
        proc_status_kb("VmRSS:"),
        heap_after,
        heap_after.saturating_sub(heap_before) / (objects.max(1) as u64),
        lean
    );
    drop(workers);
    Outcome {
        sync_ms,
        total_ms,
        objects,
        events: h.events,
    }
}

/// A controller's worker on a thread of its own: takes keys from `queue` and reads each from
/// the lister (decoding it in the lean mode, through the hot cache), as
/// `deployment-controller`'s workers do; the sentinel's key marks handler `h` done.
fn spawn_worker(
    h: usize,
    queue: AsyncWorkQueue<ObjectKey>,
    lister: Lister<Pod>,
    progress: Progress,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name(format!("bench-worker-{h}"))
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => fail(format_args!("cannot build a worker runtime: {e}")),
            };
            rt.block_on(async move {
                while let Some(key) = queue.get().await {
                    let pod = lister.get_by_key(key.as_str());
                    let sentinel = pod.as_deref().is_some_and(is_sentinel);
                    progress.saw(h, sentinel);
                    queue.done(&key);
                }
            });
        })
        .unwrap_or_else(|e| fail(format_args!("cannot spawn a worker: {e}")))
}

/// `--decode-only`: the informer's requests (a LIST at `resourceVersion=0`, then a WATCH from
/// its resourceVersion), decoded into `Pod` by kube on this one thread; only the keys are kept,
/// to count the objects a cache would hold.
async fn decode_only(client: Client, clock: Clock, deadline: Duration) -> Outcome {
    let api: Api<Pod> = Api::all(client);
    let run = async {
        let lp = ListParams {
            resource_version: Some("0".into()),
            version_match: Some(VersionMatch::NotOlderThan),
            ..ListParams::default()
        };
        let list = api
            .list(&lp)
            .await
            .unwrap_or_else(|e| fail(format_args!("LIST failed: {e}")));
        let rv = list.metadata.resource_version.clone().unwrap_or_default();
        let mut keys: HashSet<String> = list.items.iter().map(key).collect();
        drop(list);
        let sync_ms = clock.ms();
        let wp = WatchParams::default().timeout(290);
        let mut events = 0u64;
        let mut stream = api
            .watch(&wp, &rv)
            .await
            .unwrap_or_else(|e| fail(format_args!("WATCH failed: {e}")))
            .boxed();
        while let Some(ev) = stream
            .try_next()
            .await
            .unwrap_or_else(|e| fail(format_args!("WATCH stream failed: {e}")))
        {
            match ev {
                WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                    events += 1;
                    let done = is_sentinel(&p);
                    keys.insert(key(&p));
                    if done {
                        return Outcome {
                            sync_ms,
                            total_ms: clock.ms(),
                            objects: keys.len(),
                            events,
                        };
                    }
                }
                WatchEvent::Deleted(p) => {
                    events += 1;
                    keys.remove(&key(&p));
                }
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(e) => fail(format_args!("WATCH error event: {e:?}")),
            }
        }
        fail("the WATCH ended before bench/done")
    };
    match tokio::time::timeout(deadline, run).await {
        Ok(out) => out,
        Err(_) => fail(format_args!(
            "did not see bench/done within {}s",
            deadline.as_secs()
        )),
    }
}

fn key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}
