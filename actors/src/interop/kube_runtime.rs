//! kube-rs interop (feature `kube-runtime`): a [`SharedIndexInformer`] as the watcher stream,
//! trigger stream and [`Store`] of kube-rs's runtime, so that [`Controller`] and the
//! [`WatchStreamExt`](kube::runtime::WatchStreamExt) adapters run on one shared informer: one
//! LIST and one WATCH per type, whatever the number of controllers (kube-rs #1080), and
//! subscribers that join after the start get the current state first (kube-rs #1630).
//!
//! ```no_run
//! use std::sync::Arc;
//! use futures::StreamExt;
//! use k8s_openapi::api::core::v1::Pod;
//! use kube::runtime::{WatchStreamExt, controller::{Action, Controller}, predicates};
//! use kinformer_actors::SharedInformerFactory;
//! # async fn reconcile(_: Arc<Pod>, _: Arc<()>) -> Result<Action, kube::Error> { Ok(Action::await_change()) }
//! # fn error_policy(_: Arc<Pod>, _: &kube::Error, _: Arc<()>) -> Action { Action::await_change() }
//! # async fn demo(client: kube::Client) -> Result<(), kinformer_actors::InformerError> {
//! let factory = SharedInformerFactory::new(client);
//! let pods = factory.informer::<Pod>();
//! // A Controller on the informer: its triggers are the informer's objects, its reader the
//! // informer's kube Store.
//! let first = pods.controller().await?.run(reconcile, error_policy, Arc::new(()));
//! // Another, through kube's stream adapters: only pods whose generation changed.
//! let changed = pods
//!     .watcher_events()
//!     .await?
//!     .applied_objects()
//!     .predicate_filter(predicates::generation, Default::default());
//! let second = Controller::for_stream(changed, pods.kube_store().await?)
//!     .run(reconcile, error_policy, Arc::new(()));
//! factory.start()?;
//! tokio::join!(first.for_each(|_| async {}), second.for_each(|_| async {}));
//! # Ok(()) }
//! ```
//!
//! # How it is wired
//!
//! The first call on an informer makes its *hub*: one handler registered on the informer (a
//! thread of its own, named `kube-runtime`, coalescing under backlog like any handler, B3; no
//! resync: a kube Controller requeues through `Action::requeue`). The hub holds kube's
//! [`Writer`] and applies each notification to it, then hands the object to every subscriber.
//! Every stream and every [`Store`] of one informer come from its hub, so one informer costs one
//! handler and one kube `Store` whatever the number of controllers and streams. A trigger never
//! overtakes the store: the hub applies a change before it sends it, so a Controller always finds
//! the object it is told about (kube's shared reflector gives the same guarantee).
//!
//! - [`SharedIndexInformer::watcher_events`]: `watcher::Event<K>`s: `Init`, an `InitApply` per
//!   object, `InitDone`, then `Apply` (adds, updates, resyncs) and `Delete` (the last state; for
//!   a deletion only a relist found, the tombstone's last known state).
//! - [`SharedIndexInformer::shared_objects`]: `Arc<K>` per applied object, for
//!   [`Controller::for_shared_stream`].
//! - [`SharedIndexInformer::kube_store`]: kube's [`Store`], ready once the informer's initial
//!   list is in it.
//! - [`SharedIndexInformer::controller`]: `Controller::for_shared_stream` on both.
//!
//! A subscriber that joins after the start is given the current state first (`Init`, an
//! `InitApply` per object of the kube Store, `InitDone`), then live changes, with no gap and no
//! duplicate: the snapshot and the subscription are taken in one step of the hub, as our P4
//! replay does for handlers. A subscriber that joins during the initial list gets the part
//! already listed, then the rest.
//!
//! # Differences from kube's watcher
//!
//! - **Relists.** A relist (after a 410 Gone) is not a new `Init`…`InitDone`: kinformer
//!   reconciles a relist against its cache, as client-go does (F3, P1), so subscribers see an
//!   `Apply` for each object that changed and a `Delete` for each that vanished, and nothing for
//!   the unchanged ones. kube's Store converges to the same state; a kube Controller is
//!   triggered for the changed objects only, where kube's own watcher re-triggers every object.
//! - **Errors.** The streams never yield `Err`: list and watch failures are retried by the
//!   informer's supervisor (S1) and visible through its health (S2), not through the streams.
//! - **End.** The streams end when the informer is shut down (a Controller on them then shuts
//!   down gracefully), or when the subscriber is dropped.
//!
//! # Memory: what is duplicated
//!
//! kube 5's [`Store`] can only be filled through [`Writer::apply_watcher_event`], which takes a
//! `&watcher::Event<K>` and stores `Arc::new(obj.clone())`, and a [`Controller`] reads objects
//! only from such a `Store` (`Store` has no public constructor and no trait to implement, so our
//! lister cannot stand in for it). Hence, per informer (not per controller):
//!
//! | what | retained | per event, transient |
//! |---|---|---|
//! | kube `Store` | a second copy of every object (`Arc<K>` in kube's map, plus its `ObjectRef` key: kind, name, namespace, uid, resourceVersion) | |
//! | the hub's event for the `Writer` | | one deep copy (the `Event` owns its object), dropped once applied |
//! | `shared_objects` | nothing | an `Arc` clone of the informer's object |
//! | `watcher_events` | nothing | one deep copy per subscriber (kube's `Event<K>` owns its object), made on the subscriber's task when it polls |
//! | subscriber channels | at most [`SUBSCRIBER_BUFFER`] `Arc`s each | |
//!
//! With the typed cache the objects are thus held twice (ours and kube's); with the lean cache
//! (I7) kube's copy is the decoded object kinformer avoided keeping, so a lean informer used by
//! a kube Controller costs about what kube's own reflector costs. The duplicate goes away only
//! if kube's `Store` accepts shared objects (an `apply_shared_watcher_event` does not exist in
//! kube 5).
//!
//! # Backpressure
//!
//! Each subscriber has a channel of [`SUBSCRIBER_BUFFER`] changes. A subscriber that does not
//! poll holds up the hub's handler thread once its channel is full (as kube's shared
//! reflector's subscribers hold up their reflector), and through it the other subscribers of the
//! same informer; the informer itself and its other handlers carry on, and the hub's listener
//! coalesces its backlog by key (B3). Drop a stream you no longer poll.

use std::{
    any::Any,
    collections::VecDeque,
    fmt::Debug,
    future::Future,
    hash::Hash,
    pin::Pin,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use futures::{Stream, StreamExt};
use kinformer::{DeltaObject, processor::ResyncPeriod};
use kube::runtime::{
    Controller,
    reflector::{Store, store::Writer},
    watcher,
};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::{
    config::ListenerConfig, error::InformerError, handler::ResourceEventHandler,
    informer::shared_informer::SharedIndexInformer, object::InformerObject,
};

/// Changes a subscriber's channel holds before the hub waits for it (see the module's
/// backpressure section).
pub const SUBSCRIBER_BUFFER: usize = 256;

/// The listener name of an informer's hub (logs, metrics, traces).
pub const HUB_LISTENER_NAME: &str = "kube-runtime";

/// How often the hub checks, after the informer synced, whether its handler finished the
/// initial list when no change arrives to tell it (the registration's `HasSynced` is a
/// lock-free flag without a waker). Only until the initial list is done.
const SYNC_CHECK: Duration = Duration::from_millis(2);

/// What `K::DynamicType` must allow for kube's `Store` and `Controller`: every k8s-openapi type
/// and custom resource (`()`) has it.
pub trait KubeDynamicType: Default + Eq + Hash + Clone + Debug + Unpin + Send + Sync {}
impl<T: Default + Eq + Hash + Clone + Debug + Unpin + Send + Sync> KubeDynamicType for T {}

/// One change as the hub hands it to a subscriber (objects shared, never copied here).
enum Change<K> {
    Init,
    InitApply(Arc<K>),
    InitDone,
    Apply(Arc<K>),
    Delete(Arc<K>),
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        match self {
            Change::Init => Change::Init,
            Change::InitApply(o) => Change::InitApply(Arc::clone(o)),
            Change::InitDone => Change::InitDone,
            Change::Apply(o) => Change::Apply(Arc::clone(o)),
            Change::Delete(o) => Change::Delete(Arc::clone(o)),
        }
    }
}

/// One subscriber, as the hub sees it.
struct Subscriber<K> {
    tx: mpsc::Sender<Change<K>>,
    /// `InitApply`s sent (or being sent) on `tx`: what the subscriber must have read before the
    /// `InitDone` it is told about through `init_done`.
    initial_sent: usize,
    /// Set while the initial list is under way: the hub tells the subscriber here how many
    /// `InitApply`s precede the end of the initial list, when it ends without a change to carry
    /// an `InitDone` through `tx` (see [`Hub::finish_init`]).
    init_done: Option<oneshot::Sender<usize>>,
}

enum Phase<K> {
    /// The informer's initial list (or a late hub's replay) is under way: the objects so far,
    /// for subscribers who join now.
    Initializing(Vec<Arc<K>>),
    Live,
    /// The hub's handler is gone (the informer was shut down).
    Closed,
}

struct HubState<K: InformerObject>
where
    K::DynamicType: KubeDynamicType,
{
    writer: Writer<K>,
    phase: Phase<K>,
    subscribers: Vec<Subscriber<K>>,
}

/// The one handler per informer that keeps kube's `Store` and feeds every subscriber.
struct Hub<K: InformerObject>
where
    K::DynamicType: KubeDynamicType,
{
    state: Mutex<HubState<K>>,
    reader: Store<K>,
    closed: AtomicBool,
    closed_notify: Notify,
}

impl<K: InformerObject> Hub<K>
where
    K::DynamicType: KubeDynamicType,
{
    fn new() -> Self {
        let writer = Writer::<K>::new(K::DynamicType::default());
        let reader = writer.as_reader();
        Hub {
            state: Mutex::new(HubState {
                writer,
                phase: Phase::Initializing(Vec::new()),
                subscribers: Vec::new(),
            }),
            reader,
            closed: AtomicBool::new(false),
            closed_notify: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HubState<K>> {
        // A panic while the lock was held (a `K::clone` that panicked) leaves a consistent
        // state: every step below mutates only after its fallible parts.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies one notification to kube's Store, then sends it to every subscriber, in order.
    /// Runs on the hub's handler thread, the only thread that sends on the subscribers'
    /// channels.
    fn apply(&self, change: Change<K>) {
        // The Writer wants an owned object: one deep copy, made outside the lock and dropped
        // once applied (the Writer keeps its own copy, see the module's memory section).
        let event = match &change {
            Change::InitApply(o) => watcher::Event::InitApply(K::clone(o)),
            Change::Apply(o) => watcher::Event::Apply(K::clone(o)),
            Change::Delete(o) => watcher::Event::Delete(K::clone(o)),
            Change::Init | Change::InitDone => return,
        };
        let mut sends: Vec<(mpsc::Sender<Change<K>>, Change<K>)> = Vec::new();
        {
            let mut state = self.lock();
            let state = &mut *state;
            let mut end_init = false;
            let (event, change) = match (&mut state.phase, event, change) {
                (Phase::Closed, _, _) => return,
                (Phase::Initializing(items), e @ watcher::Event::InitApply(_), change) => {
                    if let Change::InitApply(o) = &change {
                        items.push(Arc::clone(o));
                    }
                    for s in &mut state.subscribers {
                        s.initial_sent += 1;
                    }
                    (e, change)
                }
                // Every initial-list notification precedes the first live one (P4, B3): a live
                // one ends the initial list.
                (Phase::Initializing(_), e, change) => {
                    end_init = true;
                    (e, change)
                }
                // An initial-list object after the end of the initial list cannot come (P4);
                // should it, it is an ordinary change.
                (Phase::Live, watcher::Event::InitApply(o), Change::InitApply(a)) => {
                    (watcher::Event::Apply(o), Change::Apply(a))
                }
                (Phase::Live, e, change) => (e, change),
            };
            if end_init {
                state.writer.apply_watcher_event(&watcher::Event::InitDone);
                state.phase = Phase::Live;
            }
            state.writer.apply_watcher_event(&event);
            for s in &mut state.subscribers {
                if end_init {
                    s.init_done = None;
                    sends.push((s.tx.clone(), Change::InitDone));
                }
                sends.push((s.tx.clone(), change.clone()));
            }
        }
        // Sent outside the lock: a full channel holds up this thread only, never `subscribe`.
        let mut gone = false;
        for (tx, change) in sends {
            // A plain thread (the handler's), so blocking is allowed.
            gone |= tx.blocking_send(change).is_err();
        }
        if gone {
            self.lock().subscribers.retain(|s| !s.tx.is_closed());
        }
    }

    /// Ends the initial list when it ended without a live change to say so: kube's Store
    /// becomes ready, and each subscriber is told how many `InitApply`s precede its `InitDone`.
    /// Never blocks (called on the I/O runtime).
    fn finish_init(&self) {
        let mut state = self.lock();
        if let Phase::Initializing(_) = state.phase {
            state.writer.apply_watcher_event(&watcher::Event::InitDone);
            state.phase = Phase::Live;
            for s in &mut state.subscribers {
                if let Some(tx) = s.init_done.take() {
                    let _ = tx.send(s.initial_sent);
                }
            }
        }
    }

    /// The hub's handler is gone: streams end once they have read what they were sent.
    fn close(&self) {
        let mut state = self.lock();
        state.phase = Phase::Closed;
        state.subscribers.clear();
        self.closed.store(true, Ordering::Release);
        self.closed_notify.notify_waiters();
    }

    /// A new subscriber: the current state first, then live changes (no gap, no duplicate:
    /// the snapshot and the registration are one step under the hub's lock).
    fn subscribe(&self) -> Subscription<K> {
        let mut state = self.lock();
        let mut prelude = VecDeque::from([Change::Init]);
        match &state.phase {
            Phase::Initializing(items) => {
                prelude.extend(items.iter().cloned().map(Change::InitApply));
                let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
                let (done_tx, done_rx) = oneshot::channel();
                state.subscribers.push(Subscriber {
                    tx,
                    initial_sent: 0,
                    init_done: Some(done_tx),
                });
                Subscription {
                    prelude,
                    rx: Some(rx),
                    init: Some(InitTracker {
                        done: Some(done_rx),
                        received: 0,
                        expected: None,
                    }),
                }
            }
            Phase::Live | Phase::Closed => {
                prelude.extend(self.reader.state().into_iter().map(Change::InitApply));
                prelude.push_back(Change::InitDone);
                let rx = if let Phase::Live = state.phase {
                    let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
                    state.subscribers.push(Subscriber {
                        tx,
                        initial_sent: 0,
                        init_done: None,
                    });
                    Some(rx)
                } else {
                    None
                };
                Subscription {
                    prelude,
                    rx,
                    init: None,
                }
            }
        }
    }

    /// Waits (on the I/O runtime) until the hub's handler has handled the initial list, then
    /// ends it if no live change did. Gives up when the hub closes.
    async fn watch_initial_list(
        self: Arc<Self>,
        fifo: Arc<crate::telemetry::stats::FifoStatus>,
        sync: Arc<kinformer::processor::SyncTracker>,
    ) {
        tokio::select! {
            _ = fifo.synced() => {}
            _ = self.closed() => return,
        }
        // The informer synced; the handler's own HasSynced (P5) follows once it returned from
        // its last initial-list notification, at most one handler call later.
        while !sync.has_synced(true) {
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            tokio::time::sleep(SYNC_CHECK).await;
        }
        self.finish_init();
    }

    async fn closed(&self) {
        loop {
            let notified = self.closed_notify.notified();
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// The hub's handler, on its own thread.
struct HubHandler<K: InformerObject>
where
    K::DynamicType: KubeDynamicType,
{
    hub: Arc<Hub<K>>,
}

impl<K: InformerObject> ResourceEventHandler<K> for HubHandler<K>
where
    K::DynamicType: KubeDynamicType,
{
    fn on_add(&mut self, obj: &Arc<K>, is_in_initial_list: bool) {
        self.hub.apply(if is_in_initial_list {
            Change::InitApply(Arc::clone(obj))
        } else {
            Change::Apply(Arc::clone(obj))
        });
    }
    fn on_update(&mut self, _old: &Arc<K>, new: &Arc<K>) {
        self.hub.apply(Change::Apply(Arc::clone(new)));
    }
    fn on_delete(&mut self, obj: &DeltaObject<K>) {
        self.hub.apply(Change::Delete(Arc::clone(obj.object())));
    }
}

impl<K: InformerObject> Drop for HubHandler<K>
where
    K::DynamicType: KubeDynamicType,
{
    fn drop(&mut self) {
        // The handler's thread ends when its listener stops (informer shutdown, P9).
        self.hub.close();
    }
}

/// How a subscriber learns where the initial list ends.
struct InitTracker {
    /// From [`Hub::finish_init`]: the number of `InitApply`s sent on the channel before it.
    done: Option<oneshot::Receiver<usize>>,
    received: usize,
    expected: Option<usize>,
}

/// One subscriber's changes: the snapshot it joined with, then its channel.
struct Subscription<K> {
    prelude: VecDeque<Change<K>>,
    rx: Option<mpsc::Receiver<Change<K>>>,
    /// Some while this subscriber is inside the initial list.
    init: Option<InitTracker>,
}

impl<K> Stream for Subscription<K> {
    type Item = Change<K>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Change<K>>> {
        let this = &mut *self;
        if let Some(c) = this.prelude.pop_front() {
            return Poll::Ready(Some(c));
        }
        if let Some(init) = &mut this.init {
            // Read before the channel: the hub tells the count before it sends any live
            // change, so a live change is never read before the `InitDone` it follows.
            if let Some(done) = &mut init.done {
                match Pin::new(done).poll(cx) {
                    Poll::Ready(Ok(n)) => {
                        init.expected = Some(n);
                        init.done = None;
                    }
                    Poll::Ready(Err(_)) => init.done = None,
                    Poll::Pending => {}
                }
            }
            if init.expected == Some(init.received) {
                this.init = None;
                return Poll::Ready(Some(Change::InitDone));
            }
        }
        let Some(rx) = &mut this.rx else {
            return Poll::Ready(None);
        };
        match rx.poll_recv(cx) {
            Poll::Ready(Some(c)) => {
                if let Some(init) = &mut this.init {
                    match c {
                        Change::InitApply(_) => init.received += 1,
                        Change::InitDone => this.init = None,
                        _ => {}
                    }
                }
                Poll::Ready(Some(c))
            }
            Poll::Ready(None) => {
                this.rx = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A stream of kube-rs `watcher::Event`s from a [`SharedIndexInformer`]
/// ([`SharedIndexInformer::watcher_events`]); it never yields `Err`.
pub type WatcherEvents<K> =
    Pin<Box<dyn Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static>>;

/// A stream of the objects a [`SharedIndexInformer`] applies, shared, never copied
/// ([`SharedIndexInformer::shared_objects`]).
pub type SharedObjects<K> = Pin<Box<dyn Stream<Item = Arc<K>> + Send + 'static>>;

impl<K> SharedIndexInformer<K>
where
    K: InformerObject,
    K::DynamicType: KubeDynamicType,
{
    /// This informer's hub, made on first use: its handler is registered then (before or
    /// after `start`).
    async fn hub(&self) -> Result<Arc<Hub<K>>, InformerError> {
        let any = self
            .kube_hub()
            .get_or_try_init(|| async {
                let hub = Arc::new(Hub::<K>::new());
                let config = ListenerConfig {
                    name: Some(HUB_LISTENER_NAME.to_string()),
                    resync: ResyncPeriod::Never,
                    ..ListenerConfig::default()
                };
                let registration = self
                    .add_event_handler_with(
                        HubHandler {
                            hub: Arc::clone(&hub),
                        },
                        config,
                    )
                    .await?;
                let watch = Arc::clone(&hub)
                    .watch_initial_list(self.fifo_shared(), Arc::clone(&registration.stats().sync));
                match crate::runtime::io() {
                    Some(io) => drop(io.spawn(watch)),
                    None => match tokio::runtime::Handle::try_current() {
                        Ok(h) => drop(h.spawn(watch)),
                        // Without a runtime for the check, the initial list ends with the
                        // first live change.
                        Err(_) => tracing::warn!(kind = %self.resource(),
                            "no tokio runtime: kube Store ready only after the first change"),
                    },
                }
                Ok::<_, InformerError>(hub as Arc<dyn Any + Send + Sync>)
            })
            .await?;
        Arc::clone(any).downcast::<Hub<K>>().map_err(|_| {
            // Unreachable: the cell of an informer of `K` only ever holds a `Hub<K>`.
            InformerError::ShutDown
        })
    }

    /// kube-rs's reader of this informer's objects: a [`Store`] kept by the informer's hub,
    /// the same one for every call (one per informer, not per controller). Ready
    /// (`wait_until_ready`) once the informer's initial list is in it. It holds its own copy
    /// of every object (see the module's memory section); prefer [`lister`](Self::lister)
    /// where kube's type is not required.
    ///
    /// # Errors
    /// [`InformerError::ShutDown`] if the informer was shut down before its hub was made, or
    /// the errors of registering a handler.
    pub async fn kube_store(&self) -> Result<Store<K>, InformerError> {
        Ok(self.hub().await?.reader.clone())
    }

    /// kube-rs's `watcher::Event` stream of this informer: `Init`, an `InitApply` per object,
    /// `InitDone`, then `Apply` and `Delete`; a subscriber that joins late gets the current
    /// state first. Use it with the [`WatchStreamExt`](kube::runtime::WatchStreamExt)
    /// adapters (`applied_objects`, `touched_objects`, `predicate_filter`, …) and
    /// [`Controller::for_stream`]. Each event owns its object: one deep copy per event per
    /// stream, made when the stream is polled.
    ///
    /// # Errors
    /// As [`kube_store`](Self::kube_store).
    pub async fn watcher_events(&self) -> Result<WatcherEvents<K>, InformerError> {
        let sub = self.hub().await?.subscribe();
        Ok(Box::pin(sub.map(|c| {
            Ok(match c {
                Change::Init => watcher::Event::Init,
                Change::InitApply(o) => watcher::Event::InitApply(K::clone(&o)),
                Change::InitDone => watcher::Event::InitDone,
                Change::Apply(o) => watcher::Event::Apply(K::clone(&o)),
                Change::Delete(o) => watcher::Event::Delete(K::clone(&o)),
            })
        })))
    }

    /// The objects this informer applies, as the `Arc`s it caches (no copy): every object of
    /// the current state, then each added or updated object (not deletions), as kube's shared
    /// reflector's subscribers get them. The trigger stream of
    /// [`Controller::for_shared_stream`].
    ///
    /// # Errors
    /// As [`kube_store`](Self::kube_store).
    pub async fn shared_objects(&self) -> Result<SharedObjects<K>, InformerError> {
        let sub = self.hub().await?.subscribe();
        Ok(Box::pin(sub.filter_map(|c| {
            std::future::ready(match c {
                Change::InitApply(o) | Change::Apply(o) => Some(o),
                Change::Init | Change::InitDone | Change::Delete(_) => None,
            })
        })))
    }

    /// A kube-rs [`Controller`] on this informer:
    /// `Controller::for_shared_stream(self.shared_objects(), self.kube_store())`. Add
    /// `owns_shared_stream` / `watches_shared_stream` with other informers'
    /// [`shared_objects`](Self::shared_objects), then `run` it. The informer must be started
    /// (by itself or its factory) for the Controller to see anything.
    ///
    /// # Errors
    /// As [`kube_store`](Self::kube_store).
    pub async fn controller(&self) -> Result<Controller<K>, InformerError> {
        let trigger = self.shared_objects().await?;
        let reader = self.kube_store().await?;
        Ok(Controller::for_shared_stream(trigger, reader))
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;

    use super::*;

    fn pod(name: &str) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.namespace = Some("a".into());
        p.metadata.name = Some(name.into());
        Arc::new(p)
    }

    /// What a subscription yields, as text (without waiting: only what is there now).
    fn drain(s: &mut Subscription<Pod>) -> Vec<String> {
        let mut out = Vec::new();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        while let Poll::Ready(Some(c)) = Pin::new(&mut *s).poll_next(&mut cx) {
            out.push(match c {
                Change::Init => "Init".to_string(),
                Change::InitApply(p) => format!("InitApply({})", p.name_any()),
                Change::InitDone => "InitDone".to_string(),
                Change::Apply(p) => format!("Apply({})", p.name_any()),
                Change::Delete(p) => format!("Delete({})", p.name_any()),
            });
        }
        out
    }

    /// A subscriber that joins during the initial list gets the part listed so far, then the
    /// rest, then `InitDone` when the hub ends the list without a live change (the count it
    /// is told makes it wait for the `InitApply`s still in its channel), then live changes.
    #[test]
    fn joining_mid_initial_list_ended_by_the_sync_check() {
        let hub = Hub::<Pod>::new();
        let mut before = hub.subscribe();
        hub.apply(Change::InitApply(pod("p0")));
        let mut during = hub.subscribe();
        hub.apply(Change::InitApply(pod("p1")));
        assert_eq!(
            drain(&mut during),
            ["Init", "InitApply(p0)", "InitApply(p1)"]
        );
        hub.finish_init();
        assert_eq!(hub.reader.len(), 2, "the Store holds the initial list");
        hub.apply(Change::Apply(pod("p2")));
        assert_eq!(drain(&mut during), ["InitDone", "Apply(p2)"]);
        assert_eq!(
            drain(&mut before),
            [
                "Init",
                "InitApply(p0)",
                "InitApply(p1)",
                "InitDone",
                "Apply(p2)"
            ]
        );
        let mut late = hub.subscribe();
        let got = drain(&mut late);
        assert_eq!(got.len(), 5, "{got:?}");
        assert_eq!((got[0].as_str(), got[4].as_str()), ("Init", "InitDone"));
    }

    /// A live change ends the initial list by itself: `InitDone` first, then the change; the
    /// Store keeps the change (kube's Writer would drop an `Apply` made before `InitDone`).
    #[test]
    fn a_live_change_ends_the_initial_list() {
        let hub = Hub::<Pod>::new();
        let mut s = hub.subscribe();
        hub.apply(Change::InitApply(pod("p0")));
        hub.apply(Change::Delete(pod("p0")));
        hub.apply(Change::Apply(pod("p1")));
        hub.finish_init();
        assert_eq!(
            drain(&mut s),
            [
                "Init",
                "InitApply(p0)",
                "InitDone",
                "Delete(p0)",
                "Apply(p1)"
            ]
        );
        let names: Vec<String> = hub.reader.state().iter().map(|p| p.name_any()).collect();
        assert_eq!(names, ["p1"]);
    }

    /// A dropped subscriber is forgotten; closing ends the others after what they were sent.
    #[test]
    fn dropped_subscribers_are_forgotten_and_close_ends_the_rest() {
        let hub = Hub::<Pod>::new();
        let dropped = hub.subscribe();
        let mut kept = hub.subscribe();
        drop(dropped);
        hub.apply(Change::InitApply(pod("p0")));
        assert_eq!(hub.lock().subscribers.len(), 1);
        hub.close();
        assert_eq!(drain(&mut kept), ["Init", "InitApply(p0)"]);
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(
            Pin::new(&mut kept).poll_next(&mut cx),
            Poll::Ready(None)
        ));
    }
}
