//! [`Waiters`]: answers held back until an actor releases them (a writer waiting for room in
//! the FIFO, B4; an indexer waiting for a `Block` listener, B3; callers of a listener's `Stop`).

use futures::future::BoxFuture;
use tokio::sync::oneshot;

/// Callers waiting for the same event.
#[derive(Default)]
pub(crate) struct Waiters(Vec<oneshot::Sender<()>>);

impl Waiters {
    /// One more waiter: resolves to `Ok` when released, `Err` when dropped unreleased (the
    /// actor stopped or cleared its waiters).
    pub(crate) fn wait(&mut self) -> BoxFuture<'static, Result<(), oneshot::error::RecvError>> {
        let (tx, rx) = oneshot::channel();
        self.0.push(tx);
        Box::pin(rx)
    }

    /// How many wait.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Releases every waiter.
    pub(crate) fn release(&mut self) {
        for w in self.0.drain(..) {
            let _ = w.send(());
        }
    }

    /// Drops every waiter unreleased.
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}
