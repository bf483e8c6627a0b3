//! kinformer's client for the shared informer benchmark (the shared benchmark harness kept next to the repository, `shared/bench`, see its README).
//!
//! One Pod informer over all namespaces, K handlers that each see every add/update/delete and
//! stop at the sentinel pod `bench/done`. Prints the RESULT line that `run.sh` reads:
//! `RESULT impl=kinformer n= m= handlers= sync_ms= total_ms= events_per_s= objects=`.
//!
//! Handlers use `OverflowPolicy::Unbounded` so that, like the other peers, every handler is
//! handed every notification (the default, Coalesce, may merge updates for a slow handler).
//! `--policy block|coalesce|unbounded`, `--watch-list`, `--transform` (drop managedFields)
//! change that. `--trace off|disabled|on` measures message tracing's cost (T4).

use std::{
    io::Write,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use k8s_openapi::api::core::v1::Pod;
use kinformer_actors::{
    InformerConfig, ListenerConfig, Notification, OverflowPolicy, SharedIndexInformer, handler_fn,
};
use kube::Client;

/// Message tracing during the run (T4).
#[derive(Clone, Copy, PartialEq, Eq)]
enum TraceMode {
    /// No tracing subscriber and no trace sink.
    Off,
    /// A `tracing` subscriber installed (warnings to stderr), the trace target filtered out, no sink.
    Disabled,
    /// The trace sink on, writing every hop to `KINFORMER_BENCH_TRACE` (default
    /// `/tmp/kinformer-bench-trace.jsonl`).
    On,
}

struct Args {
    handlers: usize,
    policy: OverflowPolicy,
    watch_list: bool,
    transform: bool,
    trace: TraceMode,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        handlers: 1,
        policy: OverflowPolicy::Unbounded,
        watch_list: false,
        transform: false,
        trace: TraceMode::Off,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--handlers" => {
                a.handlers = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or("--handlers needs a positive number")?
            }
            "--policy" => {
                a.policy = match it.next().as_deref() {
                    Some("block") => OverflowPolicy::Block,
                    Some("coalesce") => OverflowPolicy::Coalesce,
                    Some("unbounded") => OverflowPolicy::Unbounded,
                    _ => return Err("--policy needs block, coalesce or unbounded".into()),
                }
            }
            "--watch-list" => a.watch_list = true,
            "--transform" => a.transform = true,
            "--trace" => {
                a.trace = match it.next().as_deref() {
                    Some("off") => TraceMode::Off,
                    Some("disabled") => TraceMode::Disabled,
                    Some("on") => TraceMode::On,
                    _ => return Err("--trace needs off, disabled or on".into()),
                }
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
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

fn is_sentinel(p: &Pod) -> bool {
    p.metadata.name.as_deref() == Some("done") && p.metadata.namespace.as_deref() == Some("bench")
}

fn main() {
    let clock = Clock {
        t0_unix_ns: std::env::var("BENCH_T0_UNIX_NS")
            .ok()
            .and_then(|v| v.parse().ok()),
        t0: Instant::now(),
    };
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("kinformer-bench: {e}");
            finish(2);
        }
    };
    if args.trace == TraceMode::Disabled {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter("warn")
            .init();
    }
    let _trace = (args.trace == TraceMode::On).then(|| {
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
    let timeout_s = env_u64("BENCH_TIMEOUT_S").map_or(600, |t| t.saturating_sub(10).max(10));
    let system = actix::System::new();
    system.block_on(run(args, clock, timeout_s));
}

async fn run(args: Args, clock: Clock, timeout_s: u64) -> ! {
    let client = match Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kinformer-bench: cannot build a client from KUBECONFIG: {e}");
            finish(1);
        }
    };
    let mut config = InformerConfig::default();
    config.reflector.watch_list = args.watch_list;
    let informer = SharedIndexInformer::<Pod>::with_config(client, None, config);
    if args.transform {
        let _ = informer.set_transform(|mut p: Pod| {
            p.metadata.managed_fields = None;
            p
        });
    }

    let done_ms: Arc<Vec<AtomicU64>> =
        Arc::new((0..args.handlers).map(|_| AtomicU64::new(0)).collect());
    let seen: Arc<Vec<AtomicU64>> =
        Arc::new((0..args.handlers).map(|_| AtomicU64::new(0)).collect());
    let finished = Arc::new(AtomicUsize::new(0));
    let all_done = Arc::new(tokio::sync::Notify::new());
    for h in 0..args.handlers {
        let (done_ms, seen, finished, all_done) = (
            Arc::clone(&done_ms),
            Arc::clone(&seen),
            Arc::clone(&finished),
            Arc::clone(&all_done),
        );
        let n_handlers = args.handlers;
        let handler = handler_fn(move |n: &Notification<Pod>| {
            seen[h].fetch_add(1, Ordering::Relaxed);
            if let Notification::Add { obj, .. } | Notification::Update { new: obj, .. } = n
                && is_sentinel(obj)
                && done_ms[h].load(Ordering::Relaxed) == 0
            {
                done_ms[h].store(clock.ms().max(1.0) as u64, Ordering::Relaxed);
                if finished.fetch_add(1, Ordering::AcqRel) + 1 == n_handlers {
                    all_done.notify_one();
                }
            }
        });
        let cfg = ListenerConfig::default()
            .policy(args.policy)
            .name(format!("bench-{h}"));
        if let Err(e) = informer.add_event_handler_with(handler, cfg).await {
            eprintln!("kinformer-bench: cannot add handler: {e}");
            finish(1);
        }
    }
    if let Err(e) = informer.start() {
        eprintln!("kinformer-bench: cannot start: {e}");
        finish(1);
    }
    let deadline = Duration::from_secs(timeout_s);
    let sync_ms = match tokio::time::timeout(deadline, informer.wait_for_sync()).await {
        Ok(()) => clock.ms(),
        Err(_) => {
            eprintln!(
                "kinformer-bench: did not sync within {timeout_s}s: {:?}",
                informer.health()
            );
            finish(1);
        }
    };
    let waiter = all_done.notified();
    if finished.load(Ordering::Acquire) < args.handlers
        && tokio::time::timeout(deadline, waiter).await.is_err()
    {
        eprintln!(
            "kinformer-bench: handlers did not all see bench/done within {timeout_s}s: seen={:?}",
            seen.iter()
                .map(|s| s.load(Ordering::Relaxed))
                .collect::<Vec<_>>()
        );
        finish(1);
    }
    let total_ms = done_ms
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
        seen.iter()
            .map(|s| s.load(Ordering::Relaxed))
            .collect::<Vec<_>>()
    );
    let n = env_u64("BENCH_PODS").unwrap_or(objects as u64);
    let m = env_u64("BENCH_EVENTS").unwrap_or(h.events.saturating_sub(1));
    let eps = m as f64 / ((total_ms - sync_ms).max(1.0) / 1e3);
    println!(
        "RESULT impl=kinformer{}{}{} n={n} m={m} handlers={} sync_ms={:.0} total_ms={:.0} events_per_s={:.0} objects={objects}",
        if args.watch_list { "-watchlist" } else { "" },
        match args.policy {
            OverflowPolicy::Unbounded => "",
            OverflowPolicy::Block => "-block",
            OverflowPolicy::Coalesce => "-coalesce",
        },
        match args.trace {
            TraceMode::Off => "",
            TraceMode::Disabled => "-tracedisabled",
            TraceMode::On => "-traceon",
        },
        args.handlers,
        sync_ms,
        total_ms,
        eps
    );
    finish(0)
}
