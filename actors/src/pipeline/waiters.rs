//! What an actor holds back: [`Waiters`], answers held until the actor releases them (a writer
//! waiting for room in the FIFO, B4; an indexer waiting for a `Block` listener, B3; callers of a
//! listener's `Stop`), and a [`Deadline`] timer (the indexer's resync check).

use std::time::Instant;

use actix::{Actor, AsyncContext, Context, SpawnHandle};
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

/// An actor's timer armed at a deadline, re-armed only when the deadline changes (so a schedule
/// computed by a machine never drifts).
#[derive(Default)]
pub(crate) struct Deadline(Option<(Instant, SpawnHandle)>);

impl Deadline {
    /// Arms the timer at `at` (`None`: disarms it) unless it is armed there already; `fire` runs
    /// when it expires and must call [`fired`](Self::fired) first.
    pub(crate) fn arm<A>(
        &mut self,
        at: Option<Instant>,
        ctx: &mut Context<A>,
        fire: impl FnOnce(&mut A, &mut Context<A>) + 'static,
    ) where
        A: Actor<Context = Context<A>>,
    {
        if self.0.as_ref().map(|(t, _)| *t) == at {
            return;
        }
        self.cancel(ctx);
        if let Some(at) = at {
            let delay = at.saturating_duration_since(Instant::now());
            let handle = ctx.run_later(delay, fire);
            self.0 = Some((at, handle));
        }
    }

    /// Forgets the deadline that expired.
    pub(crate) fn fired(&mut self) {
        self.0 = None;
    }

    /// Disarms the timer.
    pub(crate) fn cancel<A: Actor<Context = Context<A>>>(&mut self, ctx: &mut Context<A>) {
        if let Some((_, handle)) = self.0.take() {
            ctx.cancel_future(handle);
        }
    }
}
