//! Where the actors run.
//!
//! Inside an actix application (`#[actix::main]`, `actix_web`, `System::new().block_on(..)`)
//! informers join the running [`System`]. From a plain tokio `main` (or no runtime at all)
//! they run on a background actix System that kinformer starts once per process on its own
//! thread: nothing to set up, the handles (`SharedIndexInformer`, listers, registrations) work
//! from any thread or runtime: every async method of the informer, its registrations and the
//! factory may be awaited from an actix System, a tokio runtime or a plain thread's
//! `futures::executor::block_on` (`tests/runtimes.rs`). Outside actix, a user's actor that
//! should receive notifications can run on that same System:
//! `MyActor::start_in_arbiter(kinformer_actors::runtime::system()?.arbiter(), |_| MyActor)`.
//!
//! Each informer gets two arbiters (threads): one for its reflector (HTTP and JSON decoding) and
//! one for its FIFO, indexer and listeners. Closure handlers get a thread each.

use std::{sync::OnceLock, time::Duration};

use actix::{Arbiter, System};
use tokio::sync::oneshot;

use crate::error::InformerError;

static BACKGROUND: OnceLock<Option<System>> = OnceLock::new();

fn background() -> Option<System> {
    BACKGROUND
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("kinformer-actix".into())
                .spawn(move || {
                    let sys = System::new();
                    let _ = tx.send(System::current());
                    sys.run()
                });
            match spawned {
                Ok(_) => rx.recv().ok(),
                Err(e) => {
                    tracing::error!(error = %e, "cannot start kinformer's background actix System");
                    None
                }
            }
        })
        .clone()
}

/// The actix System informers started from this thread join: the current one, or kinformer's
/// background System.
pub fn system() -> Result<System, InformerError> {
    match System::try_current() {
        Some(s) => Ok(s),
        None => background().ok_or(InformerError::NoSystem),
    }
}

/// Two fresh arbiters (pipeline, reflector) in the current or background System.
pub(crate) fn new_arbiters(_kind: &str) -> Result<(Arbiter, Arbiter), InformerError> {
    if System::try_current().is_none() {
        // Arbiter::new registers with the thread's current System.
        System::set_current(system()?);
    }
    Ok((Arbiter::new(), Arbiter::new()))
}

/// Waits for stopped arbiters' threads to exit, without blocking the caller's runtime.
pub(crate) async fn join_arbiters(arbiters: Vec<Arbiter>) {
    let (tx, rx) = oneshot::channel();
    let joiner = std::thread::Builder::new()
        .name("kinformer-join".into())
        .spawn(move || {
            for a in arbiters {
                let _ = a.join();
            }
            let _ = tx.send(());
        });
    if joiner.is_ok() {
        let _ = rx.await;
    }
}

static IO: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();

/// The process-wide runtime on which informers open their kube requests.
///
/// kube's `Client` clones share one connection pool, and hyper drives each connection on the
/// runtime of the task that opened it. If a reflector opened connections on its own arbiter,
/// stopping that informer would cut pooled connections that other informers (or the user's
/// code) reuse. Requests are therefore started here, on a small runtime that lives as long as
/// the process; the response streams are still read by the reflectors.
pub(crate) fn io() -> Option<tokio::runtime::Handle> {
    IO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kinformer-io")
            .enable_all()
            .build()
            .map_err(|e| tracing::error!(error = %e, "cannot start kinformer's I/O runtime"))
            .ok()
    })
    .as_ref()
    .map(|rt| rt.handle().clone())
}

/// Runs `fut` on the I/O runtime (or in place if it could not be started).
pub(crate) async fn on_io<T: Send + 'static>(
    fut: impl std::future::Future<Output = Result<T, kube::Error>> + Send + 'static,
) -> Result<T, kube::Error> {
    match io() {
        Some(h) => h
            .spawn(fut)
            .await
            .map_err(|e| kube::Error::Service(Box::new(e)))?,
        None => fut.await,
    }
}

/// `fut` bounded by `limit`, from any executor: `None` when the time ran out.
///
/// The handles' async methods promise to work from an actix System, a tokio runtime and a
/// plain thread (`futures::executor::block_on`). tokio's timer needs a tokio runtime on the
/// awaiting thread, so without one the deadline is kept by a helper thread instead, which the
/// first of the two to finish releases.
pub(crate) async fn timeout<F: std::future::Future>(limit: Duration, fut: F) -> Option<F::Output> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return tokio::time::timeout(limit, fut).await.ok();
    }
    let (expired_tx, expired_rx) = oneshot::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let timer = std::thread::Builder::new()
        .name("kinformer-timeout".into())
        .spawn(move || {
            // Returns early when `done_tx` is dropped: the future finished first.
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(limit) {
                let _ = expired_tx.send(());
            }
        });
    if timer.is_err() {
        // No thread for the timer: wait without a deadline rather than fail the call.
        return Some(fut.await);
    }
    let fut = std::pin::pin!(fut);
    let out = match futures::future::select(fut, expired_rx).await {
        futures::future::Either::Left((out, _)) => Some(out),
        futures::future::Either::Right(_) => None,
    };
    drop(done_tx);
    out
}

/// Decode threads asked for with [`set_decode_threads`] (0: not set).
static DECODE_THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static DECODE_POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();

/// The environment variable that sets the number of decode threads when the program did not
/// call [`set_decode_threads`] (read once, when the first informer decodes).
pub const DECODE_THREADS_ENV: &str = "KINFORMER_DECODE_THREADS";

/// Sets how many threads decode watch events and LIST items, process-wide (docs/semantics.md
/// P8: whatever the number, objects reach the FIFO in the server's order).
///
/// Default: [`std::thread::available_parallelism`], or `KINFORMER_DECODE_THREADS`. `1` keeps
/// today's single-threaded path: every object is decoded on its reflector's thread, through
/// kube's own watch decoder. Above 1, a shared pool of `n` threads decodes each batch of
/// already-received watch events and LIST items in parallel, while the reflector keeps their
/// order. Call it before the first informer starts: the pool is built once, and a later call
/// returns `false` and changes nothing.
pub fn set_decode_threads(n: usize) -> bool {
    if DECODE_POOL.get().is_some() {
        return false;
    }
    DECODE_THREADS.store(n.max(1), std::sync::atomic::Ordering::Relaxed);
    true
}

/// The number of decode threads in use (or to be used once the pool starts): what
/// [`set_decode_threads`] set, else `KINFORMER_DECODE_THREADS`, else the available parallelism.
pub fn decode_threads() -> usize {
    match DECODE_POOL.get() {
        Some(Some(pool)) => pool.current_num_threads(),
        Some(None) => 1,
        None => wanted_decode_threads(),
    }
}

fn wanted_decode_threads() -> usize {
    match DECODE_THREADS.load(std::sync::atomic::Ordering::Relaxed) {
        0 => std::env::var(DECODE_THREADS_ENV)
            .ok()
            .and_then(|s| match s.trim().parse::<usize>() {
                Ok(n) => Some(n),
                Err(e) => {
                    // A typo must not silently fall back to the default.
                    tracing::warn!(value = %s, error = %e, "{DECODE_THREADS_ENV} is not a number; using the available parallelism");
                    None
                }
            })
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(usize::from)
                    .unwrap_or(1)
            })
            .max(1),
        n => n,
    }
}

/// The process-wide decode threads (started on first use); `None` when decoding stays on the
/// reflectors' threads (one decode thread, or the pool could not be started). The list/watch
/// seam wraps them in its `DecodePool`.
pub(crate) fn decode_thread_pool() -> Option<&'static rayon::ThreadPool> {
    let pool = DECODE_POOL.get_or_init(|| {
        let n = wanted_decode_threads();
        if n <= 1 {
            return None;
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("kinformer-decode-{i}"))
            // A panic while decoding loses that batch's answer (the waiting reflector sees its
            // channel closed and fails the request); without a handler rayon would abort.
            .panic_handler(|_| tracing::error!("a kinformer decode thread panicked"))
            .build()
            .map_err(|e| tracing::error!(error = %e, "cannot start kinformer's decode pool"))
            .ok()
    });
    pool.as_ref()
}
