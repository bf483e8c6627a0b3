//! The Indexer actor (DESIGN.md P1–P4, I*): the single writer of the store and the processor
//! that distributes notifications to every [`ProcessorListener`].
//!
//! It applies each popped batch to the [`Store`] inside one store batch (readers see the whole
//! batch or none of it, and the publish cost is paid once), turns each delta into a
//! notification (client-go's `HandleDeltas`, P1), and sends every listener the notifications it
//! should see (P3: resync notifications only to listeners whose resync is due) as one message.
//!
//! Batches are handled atomically with respect to the actor's other messages: a handler added
//! while a batch is in progress is registered only after that batch reached every listener, and
//! gets the store's contents as they are at that point (P4: no gap, no duplicate).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use actix::prelude::*;
use futures::future::join_all;
use kinformer::{
    DeltaType,
    notification::Notification as Event,
    store::{Indexers, Store, StoreError},
};

use crate::{
    InformerObject,
    fifo::DeltaFifo,
    listener::ProcessorListener,
    messages::{Notifications, Pending, ProcessDeltas, ProcessReport, Resync, Stop},
    trace::{self, Hop},
};

/// Live counters of the indexer, shared with the informer handle.
#[derive(Debug, Default)]
pub struct IndexerStatus {
    pub(crate) batches: AtomicU64,
    pub(crate) applied: AtomicU64,
    pub(crate) resyncs: AtomicU64,
}

impl IndexerStatus {
    /// Batches applied.
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }
    /// Deltas applied.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }
    /// Resyncs requested from the FIFO.
    pub fn resyncs(&self) -> u64 {
        self.resyncs.load(Ordering::Relaxed)
    }
}

struct ListenerEntry<K: InformerObject> {
    id: u64,
    addr: Addr<ProcessorListener<K>>,
    resync: Option<Duration>,
    next_resync: Option<Instant>,
    syncing: bool,
}

/// Registers a listener; it first receives an Add (`is_in_initial_list`) per cached object (P4).
pub struct AddListener<K: InformerObject> {
    /// The registration id.
    pub id: u64,
    /// The listener.
    pub addr: Addr<ProcessorListener<K>>,
    /// Its resync period (P6), already reconciled with the check period.
    pub resync: Option<Duration>,
}

impl<K: InformerObject> Message for AddListener<K> {
    type Result = ();
}

/// Unregisters a listener, then drains and stops it (P5).
pub struct RemoveListener {
    /// The registration id.
    pub id: u64,
}

impl Message for RemoveListener {
    type Result = bool;
}

/// Tells the indexer which FIFO to ask for resyncs.
pub struct AttachFifo<K: InformerObject>(pub Addr<DeltaFifo<K>>);

impl<K: InformerObject> Message for AttachFifo<K> {
    type Result = ();
}

/// Adds indices to the running store (I4).
pub struct AddIndexers<K: InformerObject>(pub Indexers<K>);

impl<K: InformerObject> Message for AddIndexers<K> {
    type Result = Result<(), StoreError>;
}

/// The Indexer actor.
pub struct Indexer<K: InformerObject> {
    store: Store<K>,
    fifo: Option<Addr<DeltaFifo<K>>>,
    listeners: Vec<ListenerEntry<K>>,
    resync_check: Option<Duration>,
    status: Arc<IndexerStatus>,
    kind: Arc<str>,
    mailbox: usize,
}

impl<K: InformerObject> Indexer<K> {
    /// An indexer that owns `store`; `resync_check` is the informer's resync check period.
    pub fn new(
        store: Store<K>,
        resync_check: Option<Duration>,
        status: Arc<IndexerStatus>,
        kind: Arc<str>,
        mailbox: usize,
    ) -> Self {
        Indexer {
            store,
            fifo: None,
            listeners: Vec::new(),
            resync_check,
            status,
            kind,
            mailbox,
        }
    }

    /// P3/P6: marks the listeners whose resync is due; asks the FIFO for Sync deltas if any is.
    fn resync_tick(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        let mut any = false;
        for l in &mut self.listeners {
            l.syncing = match (l.resync, l.next_resync) {
                (Some(period), Some(next)) if now >= next => {
                    l.next_resync = Some(now + period);
                    true
                }
                _ => false,
            };
            any |= l.syncing;
        }
        if any && let Some(fifo) = self.fifo.clone() {
            self.status.resyncs.fetch_add(1, Ordering::Relaxed);
            ctx.spawn(
                async move {
                    let _ = fifo.send(Resync).await;
                }
                .into_actor(self),
            );
        }
    }
}

impl<K: InformerObject> Actor for Indexer<K> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(self.mailbox.max(1));
        if let Some(period) = self.resync_check {
            ctx.run_interval(period, |act, ctx| act.resync_tick(ctx));
        }
    }
}

/// Same resourceVersion: a relist that found the object unchanged counts as a sync (P1).
fn same_version<K: InformerObject>(a: &K, b: &K) -> bool {
    match (&a.meta().resource_version, &b.meta().resource_version) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

impl<K: InformerObject> Handler<ProcessDeltas<K>> for Indexer<K> {
    type Result = AtomicResponse<Self, ProcessReport>;

    fn handle(&mut self, msg: ProcessDeltas<K>, _: &mut Context<Self>) -> Self::Result {
        let tracing_on = trace::enabled();
        let mut applied = 0u64;
        // (notification, is_sync): sync notifications go only to syncing listeners (P3).
        let mut out: Vec<(Pending<K>, bool)> = Vec::with_capacity(msg.batch.len());
        {
            let mut batch = self.store.batch();
            for deltas in msg.batch {
                let key = deltas.key;
                for d in deltas.deltas {
                    applied += 1;
                    if tracing_on {
                        trace::hop(
                            Hop::Indexer,
                            d.trace,
                            &self.kind,
                            Some(&key),
                            &**d.object.object(),
                            trace::delta_name(d.delta_type),
                        );
                    }
                    match d.delta_type {
                        DeltaType::Sync
                        | DeltaType::Replaced
                        | DeltaType::Added
                        | DeltaType::Updated => {
                            let new = Arc::clone(d.object.object());
                            // The FIFO keyed the object with the same key function.
                            match batch.put_keyed(key.clone(), Arc::clone(&new)) {
                                Some(old) => {
                                    let is_sync = d.delta_type == DeltaType::Sync
                                        || (d.delta_type == DeltaType::Replaced
                                            && same_version(&*old, &*new));
                                    out.push((
                                        Pending {
                                            key: key.clone(),
                                            notification: Event::Update { old, new },
                                            trace: d.trace,
                                            initial: false,
                                        },
                                        is_sync,
                                    ));
                                }
                                None => out.push((
                                    Pending {
                                        key: key.clone(),
                                        notification: Event::Add {
                                            obj: new,
                                            is_in_initial_list: msg.is_in_initial_list,
                                        },
                                        trace: d.trace,
                                        initial: msg.is_in_initial_list,
                                    },
                                    false,
                                )),
                            }
                        }
                        DeltaType::Deleted => {
                            batch.delete_key(key.as_str());
                            out.push((
                                Pending {
                                    key: key.clone(),
                                    notification: Event::Delete { obj: d.object },
                                    trace: d.trace,
                                    initial: false,
                                },
                                false,
                            ));
                        }
                    }
                }
            }
            batch.commit();
        }
        self.status.batches.fetch_add(1, Ordering::Relaxed);
        self.status.applied.fetch_add(applied, Ordering::Relaxed);
        let sends: Vec<_> = self
            .listeners
            .iter()
            .filter_map(|l| {
                let items: Vec<Pending<K>> = out
                    .iter()
                    .filter(|(_, is_sync)| !is_sync || l.syncing)
                    .map(|(p, _)| p.clone())
                    .collect();
                (!items.is_empty()).then(|| l.addr.send(Notifications { items }))
            })
            .collect();
        AtomicResponse::new(Box::pin(
            async move {
                // A listener that stopped (removed) simply no longer receives.
                join_all(sends).await;
                // Applying a keyed delta cannot fail; a batch fails only if this actor stops
                // first (the FIFO then counts it, F6).
                ProcessReport { failed: 0 }
            }
            .into_actor(self),
        ))
    }
}

impl<K: InformerObject> Handler<AddListener<K>> for Indexer<K> {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: AddListener<K>, _: &mut Context<Self>) -> Self::Result {
        // P4: replay the cache as it is now, before any later batch reaches this listener.
        let snapshot = self.store.snapshot();
        let items: Vec<Pending<K>> = snapshot
            .list_keys()
            .into_iter()
            .filter_map(|key| {
                let obj = snapshot.get_by_key(key.as_str())?;
                Some(Pending {
                    key,
                    notification: Event::Add {
                        obj,
                        is_in_initial_list: true,
                    },
                    trace: kinformer::TraceId::NONE,
                    initial: true,
                })
            })
            .collect();
        let addr = msg.addr.clone();
        self.listeners.push(ListenerEntry {
            id: msg.id,
            addr: msg.addr,
            resync: msg.resync,
            next_resync: msg.resync.map(|p| Instant::now() + p),
            syncing: false,
        });
        AtomicResponse::new(Box::pin(
            async move {
                if !items.is_empty() {
                    let _ = addr.send(Notifications { items }).await;
                }
            }
            .into_actor(self),
        ))
    }
}

impl<K: InformerObject> Handler<RemoveListener> for Indexer<K> {
    type Result = AtomicResponse<Self, bool>;

    fn handle(&mut self, msg: RemoveListener, _: &mut Context<Self>) -> Self::Result {
        let pos = self.listeners.iter().position(|l| l.id == msg.id);
        let entry = pos.map(|i| self.listeners.remove(i));
        AtomicResponse::new(Box::pin(
            async move {
                match entry {
                    Some(e) => {
                        let _ = e.addr.send(crate::listener::Drain).await;
                        true
                    }
                    None => false,
                }
            }
            .into_actor(self),
        ))
    }
}

impl<K: InformerObject> Handler<AttachFifo<K>> for Indexer<K> {
    type Result = ();

    fn handle(&mut self, msg: AttachFifo<K>, _: &mut Context<Self>) {
        self.fifo = Some(msg.0);
    }
}

impl<K: InformerObject> Handler<AddIndexers<K>> for Indexer<K> {
    type Result = Result<(), StoreError>;

    fn handle(&mut self, msg: AddIndexers<K>, _: &mut Context<Self>) -> Self::Result {
        self.store.add_indexers(msg.0)
    }
}

impl<K: InformerObject> Handler<Stop> for Indexer<K> {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: Stop, _: &mut Context<Self>) -> Self::Result {
        let listeners: Vec<_> = self.listeners.drain(..).map(|l| l.addr).collect();
        AtomicResponse::new(Box::pin(
            async move {
                join_all(listeners.iter().map(|l| l.send(Stop))).await;
            }
            .into_actor(self)
            .map(|_, _, ctx| ctx.stop()),
        ))
    }
}
