//! Where the actors run.
//!
//! Inside an actix application (`#[actix::main]`, `actix_web`, `System::new().block_on(..)`)
//! informers join the running [`System`]. From a plain tokio `main` (or no runtime at all)
//! they run on a background actix System that kinformer starts once per process on its own
//! thread: nothing to set up, the handles (`SharedIndexInformer`, listers, registrations) work
//! from any thread or runtime.
//!
//! Each informer gets two arbiters (threads): one for its reflector (HTTP and JSON decoding) and
//! one for its FIFO, indexer and listeners. Closure handlers get a thread each.

use std::sync::OnceLock;

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
