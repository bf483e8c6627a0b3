//! Where a ProcessorListener delivers: a handler on a thread of its own, a user's actor, or a
//! key sink (workqueue). The listener actor offers one notification at a time; the sink takes
//! it at once, asks the listener to wait for it, or is gone.
//!
//! Closure and trait handlers run on their own thread, fed through a small bounded channel (a
//! blocking handler blocks only itself); a panic is caught, counted and logged (P7), and a panic
//! on an initial-list notification means the registration never syncs (P5, kubernetes#129024).
//! `Recipient` handlers are sent each notification and awaited (the user's actor mailbox gives
//! backpressure). Key sinks are called inline, since they never block.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use actix::Recipient;
use futures::future::BoxFuture;
use kinformer::processor::Delivery;
use tokio::sync::{mpsc, oneshot};

use crate::{
    handler::{EnqueueKeys, KeyMapper, ResourceEventHandler, dispatch},
    messages::Notify,
    object::InformerObject,
    stats::ListenerStats,
    trace::{self, Tracer},
};

/// Notifications that may wait between a listener and its handler thread, under every policy.
const HANDLER_CHANNEL: usize = 64;

/// What a listener is given to deliver to.
pub(crate) enum HandlerKind<K: InformerObject> {
    /// A handler run on its own thread.
    Handler(Box<dyn ResourceEventHandler<K>>),
    /// A user's actor.
    Recipient(Recipient<Notify<K>>),
    /// A key sink, with an optional mapping from notifications to keys (default: the object's key).
    Keys(Arc<dyn EnqueueKeys>, Option<KeyMapper<K>>),
}

/// A handler not yet handed to its (already spawned) thread: see [`Sink::arm`].
type Pending<K> = (
    oneshot::Sender<Box<dyn ResourceEventHandler<K>>>,
    Box<dyn ResourceEventHandler<K>>,
);

/// Where a listener delivers.
pub(crate) enum Sink<K: InformerObject> {
    /// A handler on its own thread.
    Thread {
        tx: Option<mpsc::Sender<Delivery<K>>>,
        abort: Arc<AtomicBool>,
        exited: Option<oneshot::Receiver<()>>,
        /// The handler, until [`Sink::arm`] hands it to the thread: a start that fails after
        /// this thread was spawned takes it back ([`Sink::take_back`]), so nothing is lost.
        pending: Option<Pending<K>>,
    },
    /// A user's actor.
    Recipient(Recipient<Notify<K>>),
    /// A non-blocking key sink (workqueue).
    Keys {
        sink: Arc<dyn EnqueueKeys>,
        mapper: Option<KeyMapper<K>>,
    },
}

/// What became of an offered notification.
pub(crate) enum Offered {
    /// Taken (handed to the thread, or delivered inline).
    Taken,
    /// Being delivered: the listener offers nothing more until this resolves; false means the
    /// sink is gone.
    Later(BoxFuture<'static, bool>),
    /// The sink is gone (the handler thread ended).
    Gone,
}

impl<K: InformerObject> Sink<K> {
    /// The sink for `handler`; spawns the handler's thread when there is one (the handler
    /// itself reaches the thread only at [`arm`](Self::arm)). On failure the handler is
    /// handed back with the error.
    pub(crate) fn new(
        handler: HandlerKind<K>,
        stats: &Arc<ListenerStats>,
        name: &Arc<str>,
        tracer: &Tracer,
    ) -> Result<Self, (std::io::Error, HandlerKind<K>)> {
        Ok(match handler {
            HandlerKind::Handler(h) => {
                // The same channel for every policy: a capacity of 1 made almost every send
                // under Coalesce take the slow path (a spawned future and a cross-thread wake
                // per notification). Merging happens in the listener's buffer under a backlog
                // (B3); at most this many notifications wait unmerged here, as under Unbounded.
                let (tx, rx) = mpsc::channel(HANDLER_CHANNEL);
                let abort = Arc::new(AtomicBool::new(false));
                let (exit_tx, exit_rx) = oneshot::channel();
                let (handler_tx, handler_rx) = oneshot::channel();
                let (s, a, n, t) = (
                    Arc::clone(stats),
                    Arc::clone(&abort),
                    Arc::clone(name),
                    tracer.clone(),
                );
                let spawned = std::thread::Builder::new()
                    .name(format!("kinformer-{name}"))
                    .spawn(move || {
                        // Dropped unarmed (a failed start): exit without running anything.
                        if let Ok(h) = handler_rx.blocking_recv() {
                            thread_loop(rx, h, s, a, n, t);
                        }
                        let _ = exit_tx.send(());
                    });
                if let Err(e) = spawned {
                    return Err((e, HandlerKind::Handler(h)));
                }
                Sink::Thread {
                    tx: Some(tx),
                    abort,
                    exited: Some(exit_rx),
                    pending: Some((handler_tx, h)),
                }
            }
            HandlerKind::Recipient(r) => Sink::Recipient(r),
            HandlerKind::Keys(sink, mapper) => Sink::Keys { sink, mapper },
        })
    }

    /// Hands the handler to its thread (once the listener runs).
    pub(crate) fn arm(&mut self) {
        if let Sink::Thread { pending, .. } = self
            && let Some((to_thread, h)) = pending.take()
        {
            // The thread waits for it until this sender is dropped; it cannot have exited.
            let _ = to_thread.send(h);
        }
    }

    /// The handler of a sink never armed (a start that failed); its thread exits on its own.
    pub(crate) fn take_back(self) -> Option<HandlerKind<K>> {
        match self {
            Sink::Thread { pending, .. } => pending.map(|(_, h)| HandlerKind::Handler(h)),
            Sink::Recipient(r) => Some(HandlerKind::Recipient(r)),
            Sink::Keys { sink, mapper } => Some(HandlerKind::Keys(sink, mapper)),
        }
    }

    /// Offers one notification; counts what is delivered inline or through a recipient, and
    /// records its `handler` hop with `tracer` (T1).
    pub(crate) fn offer(
        &mut self,
        p: Delivery<K>,
        stats: &Arc<ListenerStats>,
        tracer: &Tracer,
    ) -> Offered {
        match self {
            Sink::Keys { sink, mapper } => {
                // Timed always: the handler latency histogram (M1) counts key sinks too.
                let started = Instant::now();
                // P7: a panic in the mapper or the sink is caught here, on the listener's
                // actor, so the listener lives on and the next notification is delivered.
                let result = catch_unwind(AssertUnwindSafe(|| match mapper {
                    Some(m) => {
                        for k in m(&p.key, &p.notification) {
                            sink.enqueue(k);
                        }
                    }
                    None => sink.enqueue(p.key.clone()),
                }));
                if result.is_err() {
                    stats.sink_panics.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(key = %p.key, "key sink or key mapper panicked; notification skipped (P7)");
                }
                if p.initial {
                    stats.sync.finished(result.is_ok());
                }
                let took = started.elapsed();
                stats.record_handled(took);
                stats.delivered.fetch_add(1, Ordering::Relaxed);
                if trace::enabled() {
                    let obj = p.notification.object();
                    tracer.handled(p.trace, obj, took, result.is_err());
                }
                Offered::Taken
            }
            Sink::Thread { tx: Some(tx), .. } => match tx.try_send(p) {
                Ok(()) => Offered::Taken,
                Err(mpsc::error::TrySendError::Full(p)) => {
                    let tx = tx.clone();
                    Offered::Later(Box::pin(async move { tx.send(p).await.is_ok() }))
                }
                Err(mpsc::error::TrySendError::Closed(_)) => Offered::Gone,
            },
            Sink::Thread { tx: None, .. } => Offered::Gone,
            Sink::Recipient(r) => {
                let initial = p.initial;
                let key = p.key.clone();
                // T1: the handler hop ends when the user's actor answered; the latency
                // histogram (M1) times every answered notification.
                let started = Instant::now();
                let traced = trace::enabled().then(|| {
                    let obj = Arc::clone(p.notification.object());
                    (tracer.clone(), obj, p.trace)
                });
                let send = r.send(Notify {
                    key: p.key,
                    event: p.notification,
                    trace: p.trace,
                });
                let stats = Arc::clone(stats);
                Offered::Later(Box::pin(async move {
                    let res = send.await;
                    if let Err(e) = &res {
                        // The user's actor is gone (stopped, or panicked and actix stopped it):
                        // a state of its own, not a panic of this listener (S3). The informer and
                        // the other handlers carry on.
                        stats.undeliverable.fetch_add(1, Ordering::Relaxed);
                        if !stats.recipient_gone.swap(true, Ordering::AcqRel) {
                            tracing::warn!(key = %key, error = %e, "handler actor gone; its notifications are dropped (S3)");
                        }
                    } else {
                        let took = started.elapsed();
                        stats.record_handled(took);
                        stats.delivered.fetch_add(1, Ordering::Relaxed);
                        if let Some((tracer, obj, trace)) = traced {
                            tracer.handled(trace, &obj, took, false);
                        }
                    }
                    if initial {
                        stats.sync.finished(res.is_ok());
                    }
                    res.is_ok()
                }))
            }
        }
    }

    /// Tells the handler thread to skip whatever reaches it from now on (removal, shutdown).
    pub(crate) fn abort(&self) {
        if let Sink::Thread { abort, .. } = self {
            abort.store(true, Ordering::Release);
        }
    }

    /// Closes the sink; for a handler thread, returns what resolves once the thread exited
    /// (after its current notification).
    pub(crate) fn close(&mut self) -> Option<oneshot::Receiver<()>> {
        match self {
            Sink::Thread { tx, exited, .. } => {
                tx.take();
                exited.take()
            }
            _ => None,
        }
    }
}

/// The handler thread: runs each notification, catches and counts panics (P7), finishes the
/// initial-list accounting (P5).
fn thread_loop<K: InformerObject>(
    mut rx: mpsc::Receiver<Delivery<K>>,
    mut handler: Box<dyn ResourceEventHandler<K>>,
    stats: Arc<ListenerStats>,
    abort: Arc<AtomicBool>,
    name: Arc<str>,
    tracer: Tracer,
) {
    while let Some(p) = rx.blocking_recv() {
        if abort.load(Ordering::Acquire) {
            break;
        }
        let started = std::time::Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| {
            dispatch(&mut *handler, &p.notification)
        }));
        let took = started.elapsed();
        stats.record_handled(took);
        if result.is_err() {
            stats.panics.fetch_add(1, Ordering::Relaxed);
            tracing::error!(handler = %name, key = %p.key, "handler panicked; notification skipped (P7)");
        }
        if p.initial {
            stats.sync.finished(result.is_ok());
        }
        stats.delivered.fetch_add(1, Ordering::Relaxed);
        tracer.handled(p.trace, p.notification.object(), took, result.is_err());
    }
}
