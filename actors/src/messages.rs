//! The typed messages that join the actors (docs/semantics.md data flow).
//!
//! ```text
//! Reflector --Replace / Events / Bookmark--> DeltaFifo --ProcessDeltas--> Indexer
//! Indexer --Resync--> DeltaFifo          Indexer --Notifications--> ProcessorListener
//! ProcessorListener --Notification--> a user's actor (Recipient) or a handler thread
//! ```
//! Each message carries the [`TraceId`] of every object in it (T1).

use std::sync::Arc;

use actix::Message;
use kinformer::{
    Deltas, ObjectKey, TraceId,
    fifo::FifoError,
    notification,
    reflector::{FifoCommand, ReflectorMachine},
};

use crate::InformerObject;

pub use kinformer::reflector::EventKind;

/// One decoded watch event.
pub struct Event<K> {
    /// ADDED, MODIFIED or DELETED.
    pub kind: EventKind,
    /// The decoded object (transformed, when the informer has a transform).
    pub obj: Arc<K>,
    /// The event's trace id.
    pub trace: TraceId,
}

/// Reflector → DeltaFifo: the full list at `resource_version` (R2, F4).
///
/// The response resolves when the FIFO has room again (B4: the reflector reads no further
/// until then).
pub struct Replace<K> {
    /// Every listed object with its trace id.
    pub items: Vec<(Arc<K>, TraceId)>,
    /// The list's resourceVersion.
    pub resource_version: String,
}

impl<K: InformerObject> Message for Replace<K> {
    type Result = Result<(), FifoError>;
}

/// Reflector → DeltaFifo: a batch of watch events that were ready together (Add/Update/Delete).
///
/// Batching amortises the cross-thread message over every event already decoded; the batch is
/// never waited for (it holds only what the socket had delivered).
pub struct Events<K> {
    /// The events, in watch order.
    pub events: Vec<Event<K>>,
    /// The newest resourceVersion among the events (and bookmarks received with them); `None`
    /// when none carried one (objects without RV are delivered all the same, R4).
    pub resource_version: Option<String>,
}

impl<K: InformerObject> Message for Events<K> {
    type Result = Result<(), FifoError>;
}

/// The DeltaFifo's inputs, as the reflector holds them: one recipient per message type, so the
/// reflector depends on the messages, not on the FIFO actor.
pub struct FifoRecipients<K: InformerObject> {
    /// Where `Replace` goes.
    pub replace: actix::Recipient<Replace<K>>,
    /// Where `Events` go.
    pub events: actix::Recipient<Events<K>>,
    /// Where `Bookmark`s go.
    pub bookmark: actix::Recipient<Bookmark>,
}

impl<K: InformerObject> FifoRecipients<K> {
    /// Hands one of the reflector machine's outputs to the FIFO as its typed message and waits
    /// for the answer (B4: the answer comes once the FIFO has room). False when the FIFO is gone.
    pub(crate) async fn hand_over(&self, out: FifoCommand<(Arc<K>, TraceId)>) -> bool {
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
            FifoCommand::Events {
                events,
                resource_version,
            } => {
                let events = events
                    .into_iter()
                    .map(|(kind, (obj, trace))| Event { kind, obj, trace })
                    .collect();
                matches!(
                    self.events
                        .send(Events {
                            events,
                            resource_version,
                        })
                        .await,
                    Ok(Ok(()))
                )
            }
            FifoCommand::Bookmark { resource_version } => self
                .bookmark
                .send(Bookmark { resource_version })
                .await
                .is_ok(),
        }
    }
}

impl<K: InformerObject> Clone for FifoRecipients<K> {
    fn clone(&self) -> Self {
        FifoRecipients {
            replace: self.replace.clone(),
            events: self.events.clone(),
            bookmark: self.bookmark.clone(),
        }
    }
}

/// Reflector → DeltaFifo: a BOOKMARK moved the resourceVersion; nothing else changes (R3).
#[derive(Debug, Clone)]
pub struct Bookmark {
    /// The bookmark's resourceVersion.
    pub resource_version: String,
}

impl Message for Bookmark {
    type Result = ();
}

/// Indexer → DeltaFifo: queue Sync deltas because some handler's resync is due (R6, F7).
#[derive(Debug, Clone, Copy)]
pub struct Resync;

impl Message for Resync {
    type Result = Result<usize, FifoError>;
}

/// DeltaFifo → Indexer: a batch of popped keys, each with all its deltas, oldest first (F6).
/// The response acknowledges processing, which is what `HasSynced` counts (F5).
pub struct ProcessDeltas<K> {
    /// The popped keys' deltas, in queue order.
    pub batch: Vec<Deltas<K>>,
    /// True while the FIFO had not synced when it popped (client-go's `isInInitialList`).
    pub is_in_initial_list: bool,
}

/// How a [`ProcessDeltas`] batch went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessReport {
    /// Deltas that could not be applied (reported and counted, never requeued: F6).
    pub failed: usize,
}

impl<K: InformerObject> Message for ProcessDeltas<K> {
    type Result = ProcessReport;
}

/// One pending notification for one handler, with its object key and trace id.
pub struct Pending<K> {
    /// The object's key.
    pub key: ObjectKey,
    /// What happened.
    pub notification: notification::Notification<K>,
    /// The originating watch event.
    pub trace: TraceId,
    /// Part of the handler's initial list (counts toward its `has_synced`, P5).
    pub initial: bool,
}

impl<K> Clone for Pending<K> {
    fn clone(&self) -> Self {
        Pending {
            key: self.key.clone(),
            notification: self.notification.clone(),
            trace: self.trace,
            initial: self.initial,
        }
    }
}

/// Indexer → ProcessorListener: the notifications of one processed batch (P3, P8).
pub struct Notifications<K> {
    /// In order.
    pub items: Vec<Pending<K>>,
}

impl<K: InformerObject> Message for Notifications<K> {
    type Result = ();
}

/// ProcessorListener → a user's actor: one typed notification (the actix way to handle events).
///
/// Register a `Recipient<Notification<K>>` with
/// [`SharedIndexInformer::add_recipient`](crate::SharedIndexInformer::add_recipient); the
/// listener awaits the recipient's mailbox, so a slow actor gets backpressure, not a growing queue
/// (under the `Block` policy) or coalesced notifications (under `Coalesce`).
pub struct Notification<K> {
    /// The object's key (`namespace/name`).
    pub key: ObjectKey,
    /// What happened: Add, Update or Delete.
    pub event: notification::Notification<K>,
    /// The originating watch event's trace id.
    pub trace: TraceId,
}

impl<K: InformerObject> Message for Notification<K> {
    type Result = ();
}

impl<K> std::fmt::Debug for Notification<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Notification({}, {:?}, {})",
            self.key, self.event, self.trace
        )
    }
}

/// Stops an actor (the informer's shutdown, P9). Resolves when the actor has stopped accepting work.
#[derive(Debug, Clone, Copy)]
pub struct Stop;

impl Message for Stop {
    type Result = ();
}

/// Reflector → Supervisor: "my machine is backing off (or I failed); here it is".
pub(crate) struct ReflectorFailed<K: InformerObject> {
    /// The machine, to resume with; `None` when the reflector panicked and lost it.
    pub(crate) machine: Option<ReflectorMachine<(Arc<K>, TraceId)>>,
    /// Why.
    pub(crate) error: crate::error::ReflectorError,
    /// When the machine's backoff ends; `None`: the supervisor's own backoff decides.
    pub(crate) retry_at: Option<std::time::Instant>,
}

impl<K: InformerObject> Message for ReflectorFailed<K> {
    type Result = ();
}
