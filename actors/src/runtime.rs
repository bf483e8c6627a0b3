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
