//! Where a ProcessorListener delivers, its [`Destination`]: a handler on a thread of its own, a
//! user's actor, or a key sink (workqueue). The listener actor offers one notification at a
//! time; the destination takes it at once, asks the listener to wait for it, or is gone.
//!
//! Closure and trait handlers run on their own thread, fed through a small bounded hand-off
//! queue ([`Handoff`], filled and taken a batch at a time; a blocking handler blocks only
//! itself); a panic is caught, counted and logged (P7), and a panic on an initial-list
//! notification means the registration never syncs (P5, kubernetes#129024).
//! `Recipient` handlers are sent one notification at a time and the listener waits for the
//! actor's answer before it sends the next (B5): at most one notification of a registration is
//! ever in the actor's mailbox, so the listener's buffer and policy (B3) hold the backlog, not
//! the mailbox. (actix's mailbox capacity cannot bound `send`: a request that finds the mailbox
//! full queues its message through a fresh sender anyway.) An actor restarted by its
//! `Supervisor` keeps its mailbox and keeps receiving (S4); one whose mailbox closed is gone:
//! reported once and never sent to again (S3). Key sinks are called inline, since they never
//! block.

use std::{
    collections::VecDeque,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use actix::Recipient;
use futures::future::BoxFuture;
use kinformer::{lean::LazyObject, processor::Delivery};
use tokio::sync::oneshot;

use crate::{
    handler::{EnqueueKeys, KeyMapper, ResourceEventHandler, dispatch},
    object::InformerObject,
    pipeline::handoff::{CAPACITY, Handoff, Pushed},
    pipeline::messages::Notify,
    telemetry::stats::ListenerStats,
    telemetry::trace::{self, Tracer},
};

/// Notifications a typed handler thread of a lean informer (I7) looks at ahead of
/// the one it runs, when that one's objects are being decoded by another handler thread: it
/// decodes theirs meanwhile ([`LazyObject::claim_decode`]) instead of sleeping on the other
/// thread's decode. K handlers then decode different objects at once, and a thread mostly
/// finds its objects decoded; it never waits for one it could decode itself.
const LOOKAHEAD: usize = 8;

/// What a listener is given to deliver to.
pub(crate) enum HandlerKind<K: InformerObject> {
    /// A handler run on its own thread.
    Handler(ThreadHandler<K>),
    /// A user's actor, told with typed notifications.
    Recipient(Recipient<Notify<K>>),
    /// A user's actor, told with lazy objects (I7).
    LazyRecipient(Recipient<Notify<LazyObject<K>>>),
    /// A key sink, with an optional mapping from notifications to keys (default: the object's key).
    Keys(Arc<dyn EnqueueKeys>, Option<KeyMapper<K>>),
}

/// A handler run on a thread of its own: typed (its notifications are decoded for it, once
/// per event whatever the number of handlers) or lazy (given the lazy objects as they are).
pub(crate) enum ThreadHandler<K> {
    /// Over `K`.
    Typed(Box<dyn ResourceEventHandler<K>>),
    /// Over [`LazyObject<K>`].
    Lazy(Box<dyn ResourceEventHandler<LazyObject<K>>>),
}

/// A handler not yet handed to its (already spawned) thread: see [`Destination::arm`].
type Pending<K> = (oneshot::Sender<ThreadHandler<K>>, ThreadHandler<K>);

/// Where a listener delivers.
pub(crate) enum Destination<K: InformerObject> {
    /// A handler on its own thread.
    Thread {
        /// The queue to the thread, until the destination is closed. At most [`CAPACITY`]
        /// notifications wait in it or run, under every policy.
        tx: Option<Arc<Handoff<Delivery<LazyObject<K>>>>>,
        abort: Arc<AtomicBool>,
        /// The handler's thread, woken from a pause after a panic (P7) by `abort` and `close`.
        thread: std::thread::Thread,
        exited: Option<oneshot::Receiver<()>>,
        /// The handler, until [`Destination::arm`] hands it to the thread: a start that fails after
        /// this thread was spawned takes it back ([`Destination::take_back`]), so nothing is lost.
        pending: Option<Pending<K>>,
    },
    /// A user's actor (typed notifications); shared with the answer in flight, which asks it
    /// whether the actor still lives when no answer came (S4).
    Recipient(Arc<Recipient<Notify<K>>>),
    /// A user's actor (lazy objects).
    LazyRecipient(Arc<Recipient<Notify<LazyObject<K>>>>),
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
    /// destination is gone.
    Later(BoxFuture<'static, bool>),
    /// The destination is gone (the handler thread ended).
    Gone,
}

impl<K: InformerObject> Destination<K> {
    /// The destination for `handler`; spawns the handler's thread when there is one (the handler
    /// itself reaches the thread only at [`arm`](Self::arm)). On failure the handler is
    /// handed back with the error.
    pub(crate) fn new(
        handler: HandlerKind<K>,
        stats: &Arc<ListenerStats>,
        name: &Arc<str>,
        tracer: &Tracer,
        panic_pause: Duration,
    ) -> Result<Self, (std::io::Error, HandlerKind<K>)> {
        Ok(match handler {
            HandlerKind::Handler(h) => {
                // The same hand-off for every policy: merging happens in the listener's buffer
                // under a backlog (B3); at most `handoff::CAPACITY` notifications wait unmerged
                // here, as under Unbounded.
                let tx = Arc::new(Handoff::new());
                let rx = Arc::clone(&tx);
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
                            thread_loop(&rx, h, s, a, n, t, panic_pause);
                        }
                        // Drops what is still queued; the listener's pushes find the thread gone.
                        rx.thread_exited();
                        let _ = exit_tx.send(());
                    });
                let thread = match spawned {
                    Ok(joined) => joined.thread().clone(),
                    Err(e) => return Err((e, HandlerKind::Handler(h))),
                };
                Destination::Thread {
                    tx: Some(tx),
                    abort,
                    thread,
                    exited: Some(exit_rx),
                    pending: Some((handler_tx, h)),
                }
            }
            HandlerKind::Recipient(r) => Destination::Recipient(Arc::new(r)),
            HandlerKind::LazyRecipient(r) => Destination::LazyRecipient(Arc::new(r)),
            HandlerKind::Keys(sink, mapper) => Destination::Keys { sink, mapper },
        })
    }

    /// Hands the handler to its thread (once the listener runs).
    pub(crate) fn arm(&mut self) {
        if let Destination::Thread { pending, .. } = self
            && let Some((to_thread, h)) = pending.take()
        {
            // The thread waits for it until this sender is dropped; it cannot have exited.
            let _ = to_thread.send(h);
        }
    }

    /// The handler of a destination never armed (a start that failed); its thread exits on its own.
    pub(crate) fn take_back(self) -> Option<HandlerKind<K>> {
        match self {
            Destination::Thread { pending, .. } => pending.map(|(_, h)| HandlerKind::Handler(h)),
            // Never armed: nothing in flight shares it, so no clone is made in practice.
            Destination::Recipient(r) => Some(HandlerKind::Recipient(Arc::unwrap_or_clone(r))),
            Destination::LazyRecipient(r) => {
                Some(HandlerKind::LazyRecipient(Arc::unwrap_or_clone(r)))
            }
            Destination::Keys { sink, mapper } => Some(HandlerKind::Keys(sink, mapper)),
        }
    }

    /// Offers one notification; counts what is delivered inline or through a recipient, and
    /// records its `handler` hop with `tracer` (T1).
    pub(crate) fn offer(
        &mut self,
        p: Delivery<LazyObject<K>>,
        stats: &Arc<ListenerStats>,
        tracer: &Tracer,
    ) -> Offered {
        match self {
            Destination::Keys { sink, mapper } => {
                // Timed always: the handler latency histogram (M1) counts key sinks too.
                let started = Instant::now();
                // P7: a panic in the mapper or the sink is caught here, on the listener's
                // actor, so the listener lives on and the next notification is delivered.
                let result = catch_unwind(AssertUnwindSafe(|| match mapper {
                    Some(m) => {
                        for k in m(&p.key, &p.notification) {
                            sink.enqueue_traced(k, p.trace);
                        }
                    }
                    None => sink.enqueue_traced(p.key.clone(), p.trace),
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
            // Quietly: the listener wakes the thread once its batch is queued (`flush`).
            Destination::Thread { tx: Some(tx), .. } => match tx.try_push_quietly(p) {
                Pushed::Queued => Offered::Taken,
                Pushed::Full(p) => {
                    let tx = Arc::clone(tx);
                    Offered::Later(Box::pin(async move { tx.push(p).await }))
                }
                Pushed::Gone(_) => Offered::Gone,
            },
            Destination::Thread { tx: None, .. } => Offered::Gone,
            // S3: a recipient found gone is never sent to again; what it misses is counted.
            Destination::Recipient(_) | Destination::LazyRecipient(_) if stats.recipient_gone() => {
                undeliverable(&p, stats);
                Offered::Taken
            }
            Destination::Recipient(r) => {
                // A typed actor is told typed objects: decoded here, once (lean mode, I7).
                match p.notification.decode() {
                    Ok(event) => {
                        let obj = Arc::clone(p.notification.object());
                        let (key, trace, initial) = (p.key, p.trace, p.initial);
                        let send = r.send(Notify {
                            key: key.clone(),
                            event,
                            trace,
                        });
                        let alive = Arc::clone(r);
                        Offered::Later(answered(
                            send, alive, key, obj, trace, initial, stats, tracer,
                        ))
                    }
                    Err(e) => {
                        undecodable(&p, &e, stats);
                        Offered::Taken
                    }
                }
            }
            Destination::LazyRecipient(r) => {
                let obj = Arc::clone(p.notification.object());
                let (key, trace, initial) = (p.key.clone(), p.trace, p.initial);
                let send = r.send(Notify {
                    key: p.key,
                    event: p.notification,
                    trace,
                });
                let alive = Arc::clone(r);
                Offered::Later(answered(
                    send, alive, key, obj, trace, initial, stats, tracer,
                ))
            }
        }
    }

    /// Wakes a handler thread that sleeps while notifications offered since the last flush wait
    /// for it: called once the listener has offered what it could.
    pub(crate) fn flush(&self) {
        if let Destination::Thread { tx: Some(tx), .. } = self {
            tx.wake();
        }
    }

    /// True for a user's actor (typed or lazy).
    pub(crate) fn is_recipient(&self) -> bool {
        matches!(
            self,
            Destination::Recipient(_) | Destination::LazyRecipient(_)
        )
    }

    /// Tells the handler thread to skip whatever reaches it from now on (removal, shutdown).
    pub(crate) fn abort(&self) {
        if let Destination::Thread { abort, thread, .. } = self {
            abort.store(true, Ordering::Release);
            // Cuts short a pause after a panic (P7).
            thread.unpark();
        }
    }

    /// Closes the destination; for a handler thread, returns what resolves once the thread exited
    /// (after its current notification).
    pub(crate) fn close(&mut self) -> Option<oneshot::Receiver<()>> {
        match self {
            Destination::Thread {
                tx, exited, thread, ..
            } => {
                if let Some(tx) = tx.take() {
                    tx.close();
                }
                thread.unpark();
                exited.take()
            }
            _ => None,
        }
    }
}

/// How often, and how far apart, a missing answer re-checks whether the actor's mailbox closed.
const GONE_CHECKS: u32 = 100;
const GONE_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(2);

/// A recipient's answer: counts and traces it, finishes the initial-list accounting (P5), and
/// reports a recipient that is gone (S3). Resolves to false when it is gone.
///
/// No answer while the actor's mailbox is still open (`alive` connected) is not a gone actor:
/// actix's `Supervisor` restarted it while an async handler (`ResponseActFuture`) held this
/// notification, and the restart dropped that future, or the handler dropped its answer. The
/// actor was given the notification, so it counts as delivered and is never sent again (S4).
#[allow(clippy::too_many_arguments)]
fn answered<K, M>(
    send: actix::dev::RecipientRequest<M>,
    alive: Arc<Recipient<M>>,
    key: kinformer::ObjectKey,
    obj: Arc<LazyObject<K>>,
    trace: kinformer::TraceId,
    initial: bool,
    stats: &Arc<ListenerStats>,
    tracer: &Tracer,
) -> BoxFuture<'static, bool>
where
    K: InformerObject,
    M: actix::Message<Result = ()> + Send + 'static,
{
    // T1: the handler hop ends when the user's actor answered; the latency histogram (M1)
    // times every answered notification.
    let started = Instant::now();
    let traced = trace::enabled().then(|| tracer.clone());
    let stats = Arc::clone(stats);
    Box::pin(async move {
        let res = send.await;
        // An actor that panicked drops its answer a moment before actix drops its mailbox (the
        // thread is unwinding): give the mailbox a bounded moment to close before taking a
        // missing answer for a restart. A restarted actor's mailbox stays open, so S4 costs
        // this wait once per restart.
        if res.is_err() {
            for _ in 0..GONE_CHECKS {
                if !alive.connected() {
                    break;
                }
                tokio::time::sleep(GONE_CHECK_INTERVAL).await;
            }
        }
        let handed = match &res {
            Ok(()) => true,
            Err(e) if alive.connected() => {
                tracing::debug!(key = %key, error = %e, "handler actor gave no answer but lives (restarted?); counted delivered, not sent again (S4)");
                true
            }
            Err(e) => {
                // The user's actor is gone (stopped, or panicked and actix stopped it): a state
                // of its own, not a panic of this listener (S3). The informer and the other
                // handlers carry on.
                stats.undeliverable.fetch_add(1, Ordering::Relaxed);
                if !stats.recipient_gone.swap(true, Ordering::AcqRel) {
                    tracing::warn!(key = %key, error = %e, "handler actor gone; its notifications are dropped and counted as undeliverable (S3)");
                }
                false
            }
        };
        if handed {
            let took = started.elapsed();
            stats.record_handled(took);
            stats.delivered.fetch_add(1, Ordering::Relaxed);
            if let Some(tracer) = traced {
                tracer.handled(trace, &obj, took, false);
            }
        }
        if initial {
            stats.sync.finished(handed);
        }
        handed
    })
}

/// A notification for a recipient already gone (S3): counted, never sent; an initial-list
/// one means the registration never syncs (P5).
fn undeliverable<K>(p: &Delivery<LazyObject<K>>, stats: &ListenerStats) {
    stats.undeliverable.fetch_add(1, Ordering::Relaxed);
    if p.initial {
        stats.sync.finished(false);
    }
}

/// A notification whose objects do not decode into `K` (lean mode: the server sent an object
/// that is not a valid `K`): skipped for this typed handler, counted and logged. It does not
/// hold up the registration's `HasSynced`: a typed-mode informer would have dropped the object
/// when it arrived (R5).
fn undecodable<K>(
    p: &Delivery<LazyObject<K>>,
    e: &kinformer::lean::DecodeError,
    stats: &ListenerStats,
) {
    stats.decode_failures.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(key = %p.key, error = %e, "object does not decode; skipped for this typed handler (I7)");
    if p.initial {
        stats.sync.finished(true);
    }
    stats.delivered.fetch_add(1, Ordering::Relaxed);
}

/// The handler thread: runs each notification (decoded first for a typed handler), catches
/// and counts panics (P7), finishes the initial-list accounting (P5).
fn thread_loop<K: InformerObject>(
    rx: &Handoff<Delivery<LazyObject<K>>>,
    mut handler: ThreadHandler<K>,
    stats: Arc<ListenerStats>,
    abort: Arc<AtomicBool>,
    name: Arc<str>,
    tracer: Tracer,
    panic_pause: Duration,
) {
    // Taken from the hand-off, in the listener's order: everything queued at once, so the
    // listener is woken once per batch, not once per notification.
    let mut taken: VecDeque<Delivery<LazyObject<K>>> = VecDeque::with_capacity(CAPACITY);
    loop {
        let p = match taken.pop_front() {
            Some(p) => p,
            None if rx.take_all(&mut taken) => continue,
            None => break,
        };
        if abort.load(Ordering::Acquire) {
            break;
        }
        let panicked = run_one(&p, &mut handler, &mut taken, rx, &stats, &name, &tracer);
        // Counted once handled, so the bound covers what runs as well as what waits.
        rx.finished(1);
        if panicked && !panic_pause.is_zero() {
            pause_after_panic(panic_pause, &abort);
        }
    }
}

/// Runs one notification on the handler thread: decoded first for a typed handler, a panic
/// caught and counted (P7), the initial-list accounting finished (P5). True when the handler
/// panicked.
fn run_one<K: InformerObject>(
    p: &Delivery<LazyObject<K>>,
    handler: &mut ThreadHandler<K>,
    taken: &mut VecDeque<Delivery<LazyObject<K>>>,
    rx: &Handoff<Delivery<LazyObject<K>>>,
    stats: &ListenerStats,
    name: &str,
    tracer: &Tracer,
) -> bool {
    let started = std::time::Instant::now();
    let result = match handler {
        ThreadHandler::Lazy(h) => {
            catch_unwind(AssertUnwindSafe(|| dispatch(&mut **h, &p.notification)))
        }
        // Decoded on this thread: handlers decode in parallel, each event once (the lazy
        // object keeps what the first reader decoded).
        ThreadHandler::Typed(h) => {
            decode_ahead(p, taken, rx);
            match p.notification.decode() {
                Ok(n) => catch_unwind(AssertUnwindSafe(|| dispatch(&mut **h, &n))),
                Err(e) => {
                    undecodable(p, &e, stats);
                    return false;
                }
            }
        }
    };
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
    result.is_err()
}

/// Before a typed handler runs `p`: decodes `p`'s lean objects that no other thread has taken;
/// while one of them is still being decoded elsewhere, decodes those of the next [`LOOKAHEAD`]
/// notifications (taking more from the hand-off if fewer were taken), those no one took, so
/// this thread works instead of waiting. Typed mode (objects decoded already) costs one check
/// per object.
fn decode_ahead<K: InformerObject>(
    p: &Delivery<LazyObject<K>>,
    taken: &mut VecDeque<Delivery<LazyObject<K>>>,
    rx: &Handoff<Delivery<LazyObject<K>>>,
) {
    if claim_and_decode(&p.notification) {
        return;
    }
    if taken.len() < LOOKAHEAD {
        rx.take_some(taken, LOOKAHEAD - taken.len());
    }
    for q in taken.iter().take(LOOKAHEAD) {
        if claim_and_decode(&q.notification) {
            return;
        }
    }
}

/// Decodes the objects of `n` no other reader has claimed; true when all of them are decoded
/// now (nothing left to wait for).
fn claim_and_decode<K: InformerObject>(
    n: &kinformer::notification::Notification<LazyObject<K>>,
) -> bool {
    let mut all = true;
    let mut one = |o: &Arc<LazyObject<K>>| {
        if o.is_decoded() {
            return;
        }
        if o.claim_decode() {
            // Remembered in the object (and the hot cache): the handler's own decode finds it.
            let _ = o.object();
        }
        all &= o.is_decoded();
    };
    match n {
        kinformer::notification::Notification::Update { old, new } => {
            one(new);
            if !Arc::ptr_eq(old, new) {
                one(old);
            }
        }
        other => one(other.object()),
    }
    all
}

/// Waits `pause` before the handler runs again after a panic (P7, client-go's `wait.Until`
/// period), or until the listener is removed or shut down (`abort` set, the thread unparked).
fn pause_after_panic(pause: Duration, abort: &AtomicBool) {
    // A pause too long to represent is a pause until removal or shutdown.
    let until = Instant::now().checked_add(pause);
    while !abort.load(Ordering::Acquire) {
        match until {
            Some(until) => {
                let now = Instant::now();
                if now >= until {
                    break;
                }
                std::thread::park_timeout(until - now);
            }
            None => std::thread::park(),
        }
    }
}
