//! Every message between the actors, in one place: the actors' declared interface
//! (`docs/semantics.md`, data flow).
//!
//! ```text
//! Reflector --Replace / Events / Bookmark--> DeltaFifo --ProcessDeltas--> Indexer
//! Indexer --Resync--> DeltaFifo          Indexer --Notifications / Stop--> ProcessorListener
//! ProcessorListener --Notify--> a user's actor (Recipient) or a handler thread
//! informer --AddListener / RemoveListener / AttachFifo / AddIndexers / Stop--> Indexer
//! informer --Stop--> Supervisor, DeltaFifo      Reflector --ReflectorFailed--> Supervisor
//! ```
//! Each message carries the [`TraceId`] of every object in it (T1). Actors hold `Recipient`s of
//! these messages, never the address of another actor type: an actor depends on the messages
//! it sends, not on who handles them. Only [`Notify`] is public: it is what a user's actor
//! receives; the rest are the crate's internals.

use std::sync::Arc;

use actix::{Message, Recipient};
use kinformer::{
    Deltas, ObjectKey, TraceId,
    fifo::FifoError,
    lean::LazyObject,
    notification::Notification,
    processor::{Delivery, ResyncPeriod},
    reflector::{FifoCommand, ReflectorMachine},
    store::{Indexers, StoreError},
};

use crate::{error::ReflectorError, object::InformerObject};

pub(crate) use kinformer::reflector::EventKind;

/// An object as the pipeline carries it (decoded in the typed mode, the server's bytes in the
/// lean mode, I7), with the trace id it was admitted under.
pub(crate) type Item<K> = (Arc<LazyObject<K>>, TraceId);

/// One admitted watch event.
pub(crate) struct Event<K> {
    /// ADDED, MODIFIED or DELETED.
    pub(crate) kind: EventKind,
    /// The admitted object (transformed, when the informer has a transform).
    pub(crate) obj: Arc<LazyObject<K>>,
    /// The event's trace id.
    pub(crate) trace: TraceId,
}

/// Reflector → DeltaFifo: the full list at `resource_version` (R2, F4).
///
/// The answer comes when the FIFO has room again (B4: the reflector reads no further until
/// then); an error means the FIFO is closed.
pub(crate) struct Replace<K> {
    /// Every listed object with its trace id.
    pub(crate) items: Vec<Item<K>>,
    /// The list's resourceVersion.
    pub(crate) resource_version: String,
}

impl<K: InformerObject> Message for Replace<K> {
    type Result = Result<(), FifoError>;
}

/// Reflector → DeltaFifo: a batch of watch events that were ready together (Add/Update/Delete).
///
/// Batching amortises the cross-thread message over every event already decoded; the batch is
/// never waited for (it holds only what the socket had delivered). Answered like [`Replace`]:
/// once the FIFO has room (B4); an error means the FIFO is closed.
pub(crate) struct Events<K> {
    /// The events, in watch order (objects without RV are delivered all the same, R4; the
    /// reflector machine, not the FIFO, keeps the resourceVersion).
    pub(crate) events: Vec<Event<K>>,
}

impl<K: InformerObject> Message for Events<K> {
    type Result = Result<(), FifoError>;
}

/// The DeltaFifo's inputs, as the reflector holds them: one recipient per message type, so the
/// reflector depends on the messages, not on the FIFO actor.
pub(crate) struct FifoRecipients<K: InformerObject> {
    /// Where `Replace` goes.
    pub(crate) replace: Recipient<Replace<K>>,
    /// Where `Events` go.
    pub(crate) events: Recipient<Events<K>>,
    /// Where `Bookmark`s go.
    pub(crate) bookmark: Recipient<Bookmark>,
    /// Where `ShardShrunk` goes (K2).
    pub(crate) shard_shrunk: Recipient<ShardShrunk>,
}

impl<K: InformerObject> FifoRecipients<K> {
    /// Hands one of the reflector machine's outputs to the FIFO as its typed message and waits
    /// for the answer (B4: the answer comes once the FIFO has room). False when the FIFO is gone.
    pub(crate) async fn hand_over(&self, out: FifoCommand<Item<K>>) -> bool {
        match out {
            FifoCommand::Replace {
                items,
                resource_version,
            } => matches!(
                self.replace
                    .send(Replace {
                        items,
                        resource_version,
                    })
                    .await,
                Ok(Ok(()))
            ),
            FifoCommand::Events { events, .. } => {
                let events = events
                    .into_iter()
                    .map(|(kind, (obj, trace))| Event { kind, obj, trace })
                    .collect();
                matches!(self.events.send(Events { events }).await, Ok(Ok(())))
            }
            FifoCommand::Bookmark { resource_version } => self
                .bookmark
                .send(Bookmark { resource_version })
                .await
                .is_ok(),
            FifoCommand::ShardShrunk { selector } => matches!(
                self.shard_shrunk.send(ShardShrunk { selector }).await,
                Ok(Ok(_))
            ),
        }
    }
}

impl<K: InformerObject> Clone for FifoRecipients<K> {
    fn clone(&self) -> Self {
        FifoRecipients {
            replace: self.replace.clone(),
            events: self.events.clone(),
            bookmark: self.bookmark.clone(),
            shard_shrunk: self.shard_shrunk.clone(),
        }
    }
}

/// Reflector → DeltaFifo: a BOOKMARK moved the resourceVersion; nothing else changes (R3).
/// Answered at once (the FIFO has nothing to queue).
#[derive(Debug, Clone)]
pub(crate) struct Bookmark {
    /// The bookmark's resourceVersion.
    pub(crate) resource_version: String,
}

impl Message for Bookmark {
    type Result = ();
}

/// Reflector → DeltaFifo: the shard shrank (K2): queue a `LeftShard` delta (removed from the
/// store, no handler told: the object still exists) for every queued or known object outside
/// `selector`. Answered like
/// [`Replace`] (B4), with how many left.
pub(crate) struct ShardShrunk {
    /// The new, narrower shard.
    pub(crate) selector: kinformer::shard::ShardSelector,
}

impl Message for ShardShrunk {
    type Result = Result<usize, FifoError>;
}

/// The informer → DeltaFifo: answered once everything queued before it has been popped and
/// acknowledged by the indexer, i.e. is in the store (KEP-5647's wait, K3). An error: the FIFO
/// stopped.
pub(crate) struct Barrier;

impl Message for Barrier {
    type Result = Result<(), FifoError>;
}

/// Indexer → DeltaFifo: queue Sync deltas because some handler's resync is due (R6, F7).
/// Answered with the number of keys queued for the resync.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resync;

impl Message for Resync {
    type Result = Result<usize, FifoError>;
}

/// DeltaFifo → Indexer: a batch of popped keys, each with all its deltas, oldest first (F6).
/// The response acknowledges processing, which is what `HasSynced` counts (F5).
pub(crate) struct ProcessDeltas<K> {
    /// The popped keys' deltas, in queue order.
    pub(crate) batch: Vec<Deltas<LazyObject<K>>>,
    /// True while the FIFO had not synced when it popped (client-go's `isInInitialList`).
    pub(crate) is_in_initial_list: bool,
}

/// How a [`ProcessDeltas`] batch went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ProcessReport {
    /// Deltas that could not be applied (reported and counted, never requeued: F6).
    pub(crate) failed: usize,
}

impl<K: InformerObject> Message for ProcessDeltas<K> {
    type Result = ProcessReport;
}

/// Indexer → ProcessorListener: the notifications of one processed batch, or a late listener's
/// replay of the cache (P3, P4, P8). Answered once the listener accepted them (under the
/// `Block` policy, once its buffer has room again).
pub(crate) struct Notifications<K> {
    /// In order: the core processor's deliveries (key, notification, trace id, initial-list
    /// flag), carried as they are.
    pub(crate) items: Vec<Delivery<LazyObject<K>>>,
}

impl<K: InformerObject> Message for Notifications<K> {
    type Result = ();
}

/// ProcessorListener → a user's actor: one Add, Update or Delete (the actix way to handle
/// events). The answer (`()`) tells the listener the actor handled it.
///
/// Register a `Recipient<Notify<K>>` with
/// [`SharedIndexInformer::add_recipient`](crate::SharedIndexInformer::add_recipient). The
/// listener sends one `Notify` and waits for the actor's answer before the next (B5): at most one
/// is in the actor's mailbox; a slow actor's backlog waits in the listener under its policy
/// (`Block`: the pipeline slows; `Coalesce`: merged per key; B3). An actor restarted by actix's
/// `Supervisor` keeps receiving (S4); one whose mailbox closed is reported, not retried (S3).
pub struct Notify<K> {
    /// The object's key (`namespace/name`).
    pub key: ObjectKey,
    /// What happened: client-go's notification, Add, Update or Delete.
    pub event: Notification<K>,
    /// The originating watch event's trace id.
    pub trace: TraceId,
}

impl<K: 'static> Message for Notify<K> {
    type Result = ();
}

impl<K> std::fmt::Debug for Notify<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Notify({}, {:?}, {})", self.key, self.event, self.trace)
    }
}

/// The informer → Supervisor, DeltaFifo, Indexer; Indexer → ProcessorListener: stop (the
/// informer's shutdown, P9; a listener's removal, P5). Answered once the actor stopped accepting
/// work (a listener: once its handler finished its current notification).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stop;

impl Message for Stop {
    type Result = ();
}

/// What the Indexer sends one listener: its notifications and, at removal, [`Stop`].
pub(crate) struct ListenerRecipients<K: InformerObject> {
    /// Where [`Notifications`] go.
    pub(crate) notifications: Recipient<Notifications<K>>,
    /// Where [`Stop`] goes.
    pub(crate) stop: Recipient<Stop>,
}

impl<K: InformerObject> Clone for ListenerRecipients<K> {
    fn clone(&self) -> Self {
        ListenerRecipients {
            notifications: self.notifications.clone(),
            stop: self.stop.clone(),
        }
    }
}

/// The informer → Indexer: registers a started listener. The indexer first sends it an Add
/// (`is_in_initial_list`) per cached object (P4), before any later batch; answered once that
/// replay was accepted.
pub(crate) struct AddListener<K: InformerObject> {
    /// The registration id.
    pub(crate) id: u64,
    /// The listener's inputs.
    pub(crate) listener: ListenerRecipients<K>,
    /// The resync period it asks for; the processor decides the one it gets (P6).
    pub(crate) resync: ResyncPeriod,
}

impl<K: InformerObject> Message for AddListener<K> {
    type Result = ();
}

/// The informer → Indexer: unregisters a listener. No notification reaches it after this
/// message; it drops what it had buffered and stops once its handler finished the current
/// notification (P5). Answers false if it was not registered; with `wait`, answers only once the
/// listener stopped (without holding up the indexer meanwhile).
pub(crate) struct RemoveListener {
    /// The registration id.
    pub(crate) id: u64,
    /// Answer once the handler finished its current notification and the listener stopped.
    pub(crate) wait: bool,
}

impl Message for RemoveListener {
    type Result = bool;
}

/// The informer → Indexer, once at start: where to send [`Resync`] (the DeltaFifo, started after
/// the indexer because it feeds it).
pub(crate) struct AttachFifo(pub(crate) Recipient<Resync>);

impl Message for AttachFifo {
    type Result = ();
}

/// The informer → Indexer: adds indices to the running store (I4); the answer is the store's.
pub(crate) struct AddIndexers<K: InformerObject>(pub(crate) Indexers<K>);

impl<K: InformerObject> Message for AddIndexers<K> {
    type Result = Result<(), StoreError>;
}

/// Reflector → Supervisor: "my machine is backing off (or I failed); here it is". No answer.
pub(crate) struct ReflectorFailed<K: InformerObject> {
    /// The machine, to resume with; `None` when the reflector panicked and lost it.
    pub(crate) machine: Option<ReflectorMachine<Item<K>>>,
    /// Why.
    pub(crate) error: ReflectorError,
    /// When the machine's backoff ends; `None`: the supervisor's own backoff decides.
    pub(crate) retry_at: Option<std::time::Instant>,
}

impl<K: InformerObject> Message for ReflectorFailed<K> {
    type Result = ();
}
