//! The ProcessorListener actor (DESIGN.md B3, P5–P8): one per registered handler.
//!
//! client-go gives each listener two goroutines and an unbounded ring buffer between them. Here
//! the listener actor owns the buffer and an [`OverflowPolicy`] decides what happens when the
//! handler falls behind:
//! - [`OverflowPolicy::Block`]: at most `capacity` notifications wait; beyond that the indexer's
//!   message is answered only when the handler caught up, so the whole pipeline slows down to the
//!   slowest handler (pure backpressure: the FIFO then holds back the reflector, B4).
//! - [`OverflowPolicy::Coalesce`] (the default): notifications wait in a per-key
//!   [`Coalescer`]; a slow handler sees fewer, merged notifications (the latest state of each
//!   object, every deletion of an object it was told about), its memory is bounded by the number
//!   of keys, and it never holds up the other handlers. Informers are level-based: a handler
//!   reconciles to the latest state, so merging intermediate updates loses nothing it needs.
//! - [`OverflowPolicy::Unbounded`]: client-go's behaviour: every notification is kept.
//!
//! Closure and trait handlers run on a thread of their own, fed through a small bounded channel
//! (a blocking handler blocks only itself); a panic is caught, counted and logged (P7).
//!
//! The buffer is the core's [`ListenerBuffer`], which also keeps the registration's
//! [`SyncTracker`] exact (P5): initial-list notifications are counted when accepted, finished
//! when the handler returned (a panic or a vanished recipient means this registration never
//! syncs, kubernetes#129024), and cancelled when coalescing drops them.
//! `Recipient` handlers are sent each notification and awaited (the user's actor mailbox gives
//! backpressure). Key sinks (workqueues) are called inline, since they never block.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use actix::prelude::*;
/// The resync period a handler asks for (P6); see [`ListenerConfig::resync`].
pub use kinformer::processor::ResyncPeriod;
use kinformer::processor::{Delivery, ListenerBuffer, SyncTracker};
use tokio::sync::{mpsc, oneshot};

use crate::{
    InformerObject,
    handler::{EnqueueKeys, KeyMapper, ResourceEventHandler, dispatch},
    messages::{Notification, Notifications, Pending, Stop},
    trace::{self, Hop},
};

/// What a listener does when its handler falls behind (B3). See the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OverflowPolicy {
    /// Backpressure: the pipeline waits for this handler once `capacity` notifications wait.
    Block,
    /// Keep only the latest notification per key (default): bounded by keys, never blocks others.
    #[default]
    Coalesce,
    /// Keep everything (client-go's unbounded ring buffer).
    Unbounded,
}

/// Options of one handler registration.
#[derive(Clone, Debug)]
pub struct ListenerConfig {
    /// Overflow policy (default [`OverflowPolicy::Coalesce`]).
    pub policy: OverflowPolicy,
    /// Under `Block`, notifications buffered before the indexer waits. Default 1024.
    pub capacity: usize,
    /// The resync period this handler asks for (P6): [`ResyncPeriod::Default`] (the default:
    /// the informer's [`InformerConfig::resync`](crate::InformerConfig::resync)),
    /// [`ResyncPeriod::Never`], or [`ResyncPeriod::Every`] (at least 1 s; raised to the
    /// informer's check period when added after start; never if the informer does not resync).
    pub resync: ResyncPeriod,
    /// A name for logs, traces and the handler thread.
    pub name: Option<String>,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        ListenerConfig {
            policy: OverflowPolicy::default(),
            capacity: 1024,
            resync: ResyncPeriod::Default,
            name: None,
        }
    }
}

impl ListenerConfig {
    /// With the given policy.
    pub fn policy(mut self, policy: OverflowPolicy) -> Self {
        self.policy = policy;
        self
    }
    /// With a resync period (raised to at least 1 s; zero: never; P6).
    pub fn resync(mut self, period: Duration) -> Self {
        self.resync = ResyncPeriod::Every(period);
        self
    }
    /// Never resync this handler, whatever the informer's default (P6).
    pub fn never_resync(mut self) -> Self {
        self.resync = ResyncPeriod::Never;
        self
    }
    /// With a name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
    /// With a `Block` capacity.
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }
}

/// Live counters of one listener, shared with its registration handle.
#[derive(Debug, Default)]
pub struct ListenerStats {
    pub(crate) received: AtomicU64,
    pub(crate) delivered: AtomicU64,
    pub(crate) panics: AtomicU64,
    pub(crate) buffered: AtomicU64,
    pub(crate) peak_buffered: AtomicU64,
    pub(crate) sync: Arc<SyncTracker>,
    pub(crate) dropped: AtomicU64,
    pub(crate) stopped: AtomicBool,
}

impl ListenerStats {
    /// Notifications accepted from the indexer.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }
    /// Notifications the handler finished (including ones that panicked).
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }
    /// Notifications whose handler panicked (P7).
    pub fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }
    /// Notifications waiting in the buffer now.
    pub fn buffered(&self) -> u64 {
        self.buffered.load(Ordering::Relaxed)
    }
    /// The most notifications ever waiting at once (B3: bounded by keys under Coalesce).
    pub fn peak_buffered(&self) -> u64 {
        self.peak_buffered.load(Ordering::Relaxed)
    }
    /// Initial-list notifications not yet handled (P5).
    pub fn initial_pending(&self) -> i64 {
        self.sync.pending()
    }
    /// True when the handler failed (panicked) on an initial-list notification: its
    /// registration never reports synced (P5).
    pub fn initial_failed(&self) -> bool {
        self.sync.failed()
    }
    /// The registration's `HasSynced` bookkeeping (P5).
    pub fn sync_tracker(&self) -> &SyncTracker {
        &self.sync
    }
    /// Notifications accepted but never handed to the handler because it was removed or shut
    /// down with a backlog (P5, P9); set when the listener stopped.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
    /// True once the listener stopped.
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
}

/// Where a listener delivers.
pub(crate) enum Sink<K: InformerObject> {
    /// A handler on its own thread.
    Thread {
        tx: Option<mpsc::Sender<Delivery<K>>>,
        abort: Arc<AtomicBool>,
        exited: Option<oneshot::Receiver<()>>,
    },
    /// A user's actor.
    Recipient(Recipient<Notification<K>>),
    /// A non-blocking key sink (workqueue).
    Keys {
        sink: Arc<dyn EnqueueKeys>,
        mapper: Option<KeyMapper<K>>,
    },
}

/// What a listener is given to deliver to.
pub enum HandlerKind<K: InformerObject> {
    /// A handler run on its own thread.
    Handler(Box<dyn ResourceEventHandler<K>>),
    /// A user's actor.
    Recipient(Recipient<Notification<K>>),
    /// A key sink, with an optional mapping from notifications to keys (default: the object's key).
    Keys(Arc<dyn EnqueueKeys>, Option<KeyMapper<K>>),
}

/// The ProcessorListener actor.
pub struct ProcessorListener<K: InformerObject> {
    name: Arc<str>,
    kind: Arc<str>,
    config: ListenerConfig,
    buffer: ListenerBuffer<K>,
    sink: Sink<K>,
    delivering: bool,
    blocked_indexer: Vec<oneshot::Sender<()>>,
    stop_waiters: Vec<oneshot::Sender<()>>,
    stats: Arc<ListenerStats>,
}

fn thread_loop<K: InformerObject>(
    mut rx: mpsc::Receiver<Delivery<K>>,
    mut handler: Box<dyn ResourceEventHandler<K>>,
    stats: Arc<ListenerStats>,
    abort: Arc<AtomicBool>,
    exited: oneshot::Sender<()>,
    name: Arc<str>,
    kind: Arc<str>,
) {
    while let Some(p) = rx.blocking_recv() {
        if abort.load(Ordering::Acquire) {
            break;
        }
        let result = catch_unwind(AssertUnwindSafe(|| {
            dispatch(&mut *handler, &p.notification)
        }));
        if result.is_err() {
            stats.panics.fetch_add(1, Ordering::Relaxed);
            tracing::error!(handler = %name, key = %p.key, "handler panicked; notification skipped (P7)");
        }
        if p.initial {
            stats.sync.finished(result.is_ok());
        }
        stats.delivered.fetch_add(1, Ordering::Relaxed);
        trace::hop(
            Hop::Handler,
            p.trace,
            &kind,
            Some(&p.key),
            &**p.notification.object(),
            "handled",
        );
    }
    let _ = exited.send(());
}

impl<K: InformerObject> ProcessorListener<K> {
    /// A listener delivering to `kind_of_handler`. Spawns the handler thread when there is one.
    pub(crate) fn new(
        handler: HandlerKind<K>,
        config: ListenerConfig,
        stats: Arc<ListenerStats>,
        kind: Arc<str>,
        id: u64,
    ) -> std::io::Result<Self> {
        let name: Arc<str> = config
            .name
            .clone()
            .unwrap_or_else(|| format!("{kind}-handler-{id}"))
            .into();
        let sink = match handler {
            HandlerKind::Handler(h) => {
                // Coalesce keeps the channel at one so that waiting notifications stay mergeable.
                let cap = match config.policy {
                    OverflowPolicy::Coalesce => 1,
                    _ => 64,
                };
                let (tx, rx) = mpsc::channel(cap);
                let abort = Arc::new(AtomicBool::new(false));
                let (exit_tx, exit_rx) = oneshot::channel();
                let (s, a, n, k) = (
                    Arc::clone(&stats),
                    Arc::clone(&abort),
                    Arc::clone(&name),
                    Arc::clone(&kind),
                );
                std::thread::Builder::new()
                    .name(format!("kinformer-{name}"))
                    .spawn(move || thread_loop(rx, h, s, a, exit_tx, n, k))?;
                Sink::Thread {
                    tx: Some(tx),
                    abort,
                    exited: Some(exit_rx),
                }
            }
            HandlerKind::Recipient(r) => Sink::Recipient(r),
            HandlerKind::Keys(sink, mapper) => Sink::Keys { sink, mapper },
        };
        let tracker = Arc::clone(&stats.sync);
        let buffer = match config.policy {
            OverflowPolicy::Coalesce => ListenerBuffer::coalescing(tracker),
            _ => ListenerBuffer::queue(tracker),
        };
        Ok(ProcessorListener {
            name,
            kind,
            config,
            buffer,
            sink,
            delivering: false,
            blocked_indexer: Vec::new(),
            stop_waiters: Vec::new(),
            stats,
        })
    }

    fn buffered(&self) -> usize {
        self.buffer.len()
    }

    fn accept(&mut self, p: Pending<K>) {
        self.stats.received.fetch_add(1, Ordering::Relaxed);
        trace::hop(
            Hop::Listener,
            p.trace,
            &self.kind,
            Some(&p.key),
            &**p.notification.object(),
            "buffered",
        );
        self.buffer.push(Delivery {
            key: p.key,
            notification: p.notification,
            trace: p.trace,
            initial: p.initial,
        });
    }

    fn delivered_inline(&self, p: &Delivery<K>) {
        if p.initial {
            self.stats.sync.finished(true);
        }
        self.stats.delivered.fetch_add(1, Ordering::Relaxed);
    }

    /// Moves buffered notifications to the sink as far as it accepts them without waiting.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        while !self.delivering {
            let Some(p) = self.buffer.pop() else { break };
            match &mut self.sink {
                Sink::Keys { sink, mapper } => {
                    match mapper {
                        Some(m) => {
                            for k in m(&p.key, &p.notification) {
                                sink.enqueue(k);
                            }
                        }
                        None => sink.enqueue(p.key.clone()),
                    }
                    self.delivered_inline(&p);
                }
                Sink::Thread { tx: Some(tx), .. } => match tx.try_send(p) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(p)) => {
                        self.delivering = true;
                        let tx = tx.clone();
                        ctx.spawn(
                            async move { tx.send(p).await.is_ok() }
                                .into_actor(self)
                                .map(|ok, act, ctx| {
                                    act.delivering = false;
                                    if !ok {
                                        act.sink_gone();
                                    }
                                    act.pump(ctx);
                                }),
                        );
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => self.sink_gone(),
                },
                Sink::Thread { tx: None, .. } => self.sink_gone(),
                Sink::Recipient(r) => {
                    self.delivering = true;
                    let initial = p.initial;
                    let send = r.send(Notification {
                        key: p.key,
                        event: p.notification,
                        trace: p.trace,
                    });
                    ctx.spawn(send.into_actor(self).map(move |res, act, ctx| {
                        act.delivering = false;
                        if res.is_err() {
                            // The user's actor is gone; S3: the informer carries on.
                            act.stats.panics.fetch_add(1, Ordering::Relaxed);
                        }
                        if initial {
                            act.stats.sync.finished(res.is_ok());
                        }
                        act.stats.delivered.fetch_add(1, Ordering::Relaxed);
                        act.pump(ctx);
                    }));
                }
            }
        }
        self.progress(ctx);
    }

    fn sink_gone(&mut self) {
        tracing::warn!(handler = %self.name, "handler sink closed; dropping its buffered notifications");
        self.clear_buffer();
    }

    /// Publishes gauges, releases a waiting indexer.
    fn progress(&mut self, _ctx: &mut Context<Self>) {
        let n = self.buffered();
        self.stats.buffered.store(n as u64, Ordering::Relaxed);
        self.stats
            .peak_buffered
            .fetch_max(n as u64, Ordering::Relaxed);
        if n < self.config.capacity.max(1) {
            for w in self.blocked_indexer.drain(..) {
                let _ = w.send(());
            }
        }
    }

    /// Closes the sink, waits for the handler thread to finish its current notification, stops.
    fn finish(&mut self, ctx: &mut Context<Self>) {
        let exited = match &mut self.sink {
            Sink::Thread { tx, exited, .. } => {
                tx.take();
                exited.take()
            }
            _ => None,
        };
        ctx.spawn(
            async move {
                if let Some(e) = exited {
                    let _ = e.await;
                }
            }
            .into_actor(self)
            .map(|_, act, ctx| {
                // P9: what was accepted and never handed to the handler is counted as dropped.
                let (received, delivered) = (act.stats.received(), act.stats.delivered());
                act.stats
                    .dropped
                    .store(received.saturating_sub(delivered), Ordering::Relaxed);
                act.stats.stopped.store(true, Ordering::Release);
                for w in act.stop_waiters.drain(..) {
                    let _ = w.send(());
                }
                ctx.stop();
            }),
        );
    }
}

impl<K: InformerObject> Actor for ProcessorListener<K> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(16);
    }
}

impl<K: InformerObject> Handler<Notifications<K>> for ProcessorListener<K> {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: Notifications<K>, ctx: &mut Context<Self>) -> Self::Result {
        for p in msg.items {
            self.accept(p);
        }
        self.pump(ctx);
        if self.config.policy == OverflowPolicy::Block
            && self.buffered() >= self.config.capacity.max(1)
        {
            let (tx, rx) = oneshot::channel();
            self.blocked_indexer.push(tx);
            return Box::pin(async move {
                let _ = rx.await;
            });
        }
        Box::pin(async {})
    }
}

impl<K: InformerObject> Handler<Stop> for ProcessorListener<K> {
    type Result = ResponseFuture<()>;

    /// Removal (P5) and shutdown (P9): drops what is buffered, lets the handler finish its
    /// current notification, stops; answers once the handler's thread has exited.
    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) -> Self::Result {
        if let Sink::Thread { abort, .. } = &self.sink {
            abort.store(true, Ordering::Release);
        }
        self.clear_buffer();
        for w in self.blocked_indexer.drain(..) {
            let _ = w.send(());
        }
        let (tx, rx) = oneshot::channel();
        self.stop_waiters.push(tx);
        if self.stop_waiters.len() == 1 {
            self.finish(ctx);
        }
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

impl<K: InformerObject> ProcessorListener<K> {
    fn clear_buffer(&mut self) {
        self.buffer.clear();
        self.stats.buffered.store(0, Ordering::Relaxed);
    }
}
