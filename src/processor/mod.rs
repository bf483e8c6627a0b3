//! The processor: client-go's `sharedIndexInformer.HandleDeltas` (`processDeltas`) and the
//! `sharedProcessor`'s bookkeeping, as a pure, clock-injected machine (P1, P3–P6 in
//! `docs/semantics.md`).
//!
//! [`Processor`] owns the [`Store`] (its single writer) and the registry of listeners. It has
//! no runtime: the Indexer actor drives it, in the manner of quinn-proto under quinn.
//!
//! # Inputs and outputs
//!
//! | input | output |
//! |---|---|
//! | [`handle_deltas`](Processor::handle_deltas)(batch) | one store publish; [`Dispatch`]: per listener, its notifications in order |
//! | [`add_listener`](Processor::add_listener)(id, period, `now`) | [`Registered`]: the replay of the cache for a listener added after start (P4), its resync period |
//! | [`remove_listener`](Processor::remove_listener)(id) | the listener is forgotten (draining it is the driver's business) |
//! | [`start`](Processor::start)(`now`) | resync checks begin; later listeners get a replay and cannot shrink the check period |
//! | [`handle_resync_check`](Processor::handle_resync_check)(`now`) | whether any listener is due: then the driver asks the FIFO for a resync (R6, F7) |
//!
//! [`poll_timeout`](Processor::poll_timeout) says when the driver must next call
//! `handle_resync_check`; it changes after `start`, `add_listener`, `remove_listener` and
//! every check, so the driver re-reads it after each of them.
//!
//! # Delta → store → notification (P1)
//!
//! `Sync`, `Replaced`, `Added` and `Updated` store the object; the notification is
//! `Update(old, new)` when the key was in the store, else `Add` (with the batch's
//! `is_in_initial_list`). `Deleted` removes the key and notifies `Delete` with the delta's
//! object or tombstone. An `Update` is a **sync** when old and new carry the same non-empty
//! resourceVersion, or are the very same cached object (a FIFO resync re-delivers what the
//! store holds), whatever the delta type (client-go's `OnUpdate` compares resourceVersions
//! only). So a `Sync` delta of a changed object, which a relist queues when the FIFO does not
//! emit `Replaced`, is a real update that reaches every listener.
//! Deliberate difference: client-go also treats two *empty* resourceVersions as equal; here
//! they are not (unless it is the same object), so objects stored without a resourceVersion
//! are delivered like any other (R4).
//!
//! # Routing (P3)
//!
//! Non-sync notifications go to every listener, in order. Sync notifications go only to the
//! listeners that were due at the last resync check. A listener is not syncing until a check
//! found it due (client-go marks new listeners syncing until the first check; since the FIFO
//! queues `Sync` deltas only after a check, that mattered only for unchanged-RV relist updates,
//! which here never reach a listener that did not ask for a resync).
//!
//! # Resync (P6)
//!
//! The informer has a default period (client-go's `defaultEventHandlerResyncPeriod`), which is
//! also the initial *check period* (`resyncCheckPeriod`). Each listener asks for a
//! [`ResyncPeriod`]:
//! - [`ResyncPeriod::Default`]: the informer's default, before or after start;
//! - [`ResyncPeriod::Never`] or a zero period: never;
//! - a positive period below [`MIN_RESYNC_PERIOD`] is raised to it; before start, a period
//!   below the check period shrinks the check period, and every listener's effective period
//!   is recomputed with [`determine_resync_period`]; after start, it is raised to the check
//!   period. A check period of zero (an informer created without resync) resyncs nobody.
//!
//! A listener is first due at `added_at + period`. When a check finds it due it is re-armed
//! from the due time, not from the check's `now` (`next = due + period`, advanced by whole
//! periods while that is not after `now`): a listener resyncs at most once per check and its
//! schedule never drifts, so a 1 s listener resyncs ten times in ten seconds, however late
//! each check runs. Checks are due on the check period's grid from `start` (client-go's
//! resync tick): at the first tick at or after the earliest listener's due time, so listeners
//! whose due times fall in the same tick share one FIFO resync.

mod buffer;
#[cfg(test)]
mod proptests;
mod sync;
#[cfg(test)]
mod tests;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use kube_core::Resource;

pub use buffer::ListenerBuffer;
pub use sync::SyncTracker;

use crate::{
    DeltaType, Deltas, ObjectKey, TraceId, lean::LazyObject, notification::Notification,
    store::Lister, store::Store,
};

/// client-go's `minimumResyncPeriod`: a positive resync period is at least one second (P6).
pub const MIN_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// The resync period a handler asks for at registration (P6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResyncPeriod {
    /// Not given: the informer's default period (client-go's `AddEventHandler`).
    #[default]
    Default,
    /// Never resync this handler (client-go's `AddEventHandlerWithResyncPeriod(h, 0)`).
    Never,
    /// Resync every so often; zero means never, a positive period below
    /// [`MIN_RESYNC_PERIOD`] is raised to it.
    Every(Duration),
}

impl From<Duration> for ResyncPeriod {
    fn from(d: Duration) -> Self {
        ResyncPeriod::Every(d)
    }
}

impl From<Option<Duration>> for ResyncPeriod {
    /// `None` is [`ResyncPeriod::Never`].
    fn from(d: Option<Duration>) -> Self {
        d.map_or(ResyncPeriod::Never, ResyncPeriod::Every)
    }
}

/// client-go's `determineResyncPeriod`: a listener's effective period given the period it
/// asked for (after the minimum) and the informer's check period. Zero means never.
///
/// `desired` 0 → 0; `check` 0 → 0 (the informer does not resync); `desired < check` →
/// `check`; else `desired`.
pub fn determine_resync_period(desired: Duration, check: Duration) -> Duration {
    if desired.is_zero() || check.is_zero() {
        Duration::ZERO
    } else {
        desired.max(check)
    }
}

/// One notification for one listener, with the object's key and the originating trace id.
pub struct Delivery<K> {
    /// The object's key.
    pub key: ObjectKey,
    /// What happened.
    pub notification: Notification<K>,
    /// The originating watch event (`TraceId::NONE` for a replay).
    pub trace: TraceId,
    /// An initial-list notification: it counts toward the listener's `HasSynced` (P5).
    pub initial: bool,
}

impl<K> Clone for Delivery<K> {
    fn clone(&self) -> Self {
        Delivery {
            key: self.key.clone(),
            notification: self.notification.clone(),
            trace: self.trace,
            initial: self.initial,
        }
    }
}

impl<K> std::fmt::Debug for Delivery<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Delivery({}, {:?}, {}, initial={})",
            self.key, self.notification, self.trace, self.initial
        )
    }
}

/// What one popped batch produced (see [`Processor::handle_deltas`]).
pub struct Dispatch<K> {
    /// Per listener (registration order), the notifications it receives, in order; listeners
    /// that receive nothing are left out.
    pub per_listener: Vec<(u64, Vec<Delivery<K>>)>,
    /// Deltas applied to the store.
    pub applied: u64,
    /// Deltas that could not be applied (see [`Processor::handle_deltas`]).
    pub failed: usize,
    /// Notifications produced (before routing), of which `syncs` were syncs.
    pub notifications: usize,
    /// Sync notifications (P3: only for syncing listeners).
    pub syncs: usize,
}

/// What [`Processor::add_listener`] decided.
pub struct Registered<K> {
    /// Add(`is_in_initial_list`) for every cached object, to be delivered before anything else
    /// (P4). Empty before start: such a listener gets the first list from the FIFO.
    pub replay: Vec<Delivery<K>>,
    /// The period asked for, after the default and the minimum (`None`: never).
    pub requested: Option<Duration>,
    /// The period used (`None`: never); differs from `requested` when raised to the check
    /// period or when the informer does not resync.
    pub resync: Option<Duration>,
}

struct Listener {
    id: u64,
    /// The period asked for, after the default, the minimum and (after start) the check
    /// period; zero: never (client-go's `requestedResyncPeriod`).
    requested: Duration,
    /// The period used; zero: never (client-go's `resyncPeriod`).
    period: Duration,
    added_at: Instant,
    /// The earliest time the listener is due; meaningful only when `period` is not zero.
    next_resync: Instant,
    /// Due at the last resync check: receives sync notifications (P3).
    syncing: bool,
}

/// client-go's `HandleDeltas` + `sharedProcessor`: see the [module docs](self).
pub struct Processor<K> {
    store: Store<K>,
    /// The informer's default handler resync period; zero: none.
    default_resync: Duration,
    /// client-go's `resyncCheckPeriod`; zero: this informer never resyncs.
    check_period: Duration,
    started_at: Option<Instant>,
    /// In registration order.
    listeners: Vec<Listener>,
}

fn some_period(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

/// The first instant of `next + k * period` (k ≥ 0) that is after `now`.
fn advance_past(next: Instant, period: Duration, now: Instant) -> Instant {
    if next > now || period.is_zero() {
        return next;
    }
    let behind = now.duration_since(next).as_nanos();
    let steps = behind / period.as_nanos() + 1;
    let by = period.as_nanos().saturating_mul(steps);
    next + Duration::from_nanos(u64::try_from(by).unwrap_or(u64::MAX))
}

/// Same non-empty resourceVersion: an update that changed nothing (P1). Reads the metadata
/// only (a lean object is not decoded).
fn same_version<K: Resource>(old: &LazyObject<K>, new: &LazyObject<K>) -> bool {
    match (old.resource_version(), new.resource_version()) {
        (Some(a), Some(b)) => !a.is_empty() && a == b,
        _ => false,
    }
}

impl<K: Resource> Processor<K> {
    /// A processor writing `store`, for an informer whose default handler resync period is
    /// `default_resync` (None or zero: no resync; this is also the initial check period).
    pub fn new(store: Store<K>, default_resync: Option<Duration>) -> Self {
        let d = default_resync.unwrap_or(Duration::ZERO);
        Processor {
            store,
            default_resync: d,
            check_period: d,
            started_at: None,
            listeners: Vec::new(),
        }
    }

    /// The store (its writer: e.g. to add indexers).
    pub fn store_mut(&mut self) -> &mut Store<K> {
        &mut self.store
    }

    /// The store, read-only.
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// A lock-free reader of the store.
    pub fn lister(&self) -> Lister<K> {
        self.store.lister()
    }

    /// The informer's default handler resync period (None: none).
    pub fn default_resync(&self) -> Option<Duration> {
        some_period(self.default_resync)
    }

    /// The resync check period (None: this informer never resyncs).
    pub fn check_period(&self) -> Option<Duration> {
        some_period(self.check_period)
    }

    /// True after [`start`](Self::start).
    pub fn is_started(&self) -> bool {
        self.started_at.is_some()
    }

    /// The registered listener ids, in registration order.
    pub fn listener_ids(&self) -> Vec<u64> {
        self.listeners.iter().map(|l| l.id).collect()
    }

    fn listener(&self, id: u64) -> Option<&Listener> {
        self.listeners.iter().find(|l| l.id == id)
    }

    /// The listener's effective resync period (None: never, or not registered).
    pub fn resync_period(&self, id: u64) -> Option<Duration> {
        self.listener(id).and_then(|l| some_period(l.period))
    }

    /// When the listener is next due (None: it never resyncs, or is not registered).
    pub fn next_resync(&self, id: u64) -> Option<Instant> {
        self.listener(id)
            .filter(|l| !l.period.is_zero())
            .map(|l| l.next_resync)
    }

    /// True when the last resync check found the listener due (it receives sync
    /// notifications, P3).
    pub fn is_syncing(&self, id: u64) -> bool {
        self.listener(id).is_some_and(|l| l.syncing)
    }

    /// Starts the resync schedule at `now` (client-go's `Run`). Idempotent.
    pub fn start(&mut self, now: Instant) {
        if self.started_at.is_none() {
            self.started_at = Some(now);
        }
    }

    /// Registers listener `id` with the period it asks for (P6), at `now`. After start, the
    /// result carries the replay of the cache for it (P4): hand it to the listener before any
    /// later [`Dispatch`]. Registering an id again replaces the earlier registration.
    pub fn add_listener(
        &mut self,
        id: u64,
        asked: ResyncPeriod,
        now: Instant,
    ) -> Registered<LazyObject<K>> {
        self.remove_listener(id);
        let mut requested = match asked {
            ResyncPeriod::Default => self.default_resync,
            ResyncPeriod::Never => Duration::ZERO,
            ResyncPeriod::Every(d) => d,
        };
        if !requested.is_zero() {
            requested = requested.max(MIN_RESYNC_PERIOD);
            if requested < self.check_period {
                if self.is_started() {
                    requested = self.check_period;
                } else {
                    self.check_period = requested;
                    for l in &mut self.listeners {
                        l.period = determine_resync_period(l.requested, requested);
                        l.next_resync = l.added_at + l.period;
                    }
                }
            }
        }
        let period = determine_resync_period(requested, self.check_period);
        self.listeners.push(Listener {
            id,
            requested,
            period,
            added_at: now,
            next_resync: now + period,
            syncing: false,
        });
        let replay = if self.is_started() {
            // Lazy reads: the replay hands over the stored objects without decoding them.
            let snapshot = self.store.snapshot().lazy();
            snapshot
                .list_keys()
                .into_iter()
                .filter_map(|key| {
                    let obj = snapshot.get_by_key(key.as_str())?;
                    Some(Delivery {
                        key,
                        notification: Notification::Add {
                            obj,
                            is_in_initial_list: true,
                        },
                        trace: TraceId::NONE,
                        initial: true,
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        Registered {
            replay,
            requested: some_period(requested),
            resync: some_period(period),
        }
    }

    /// Forgets listener `id`; false if it was not registered.
    pub fn remove_listener(&mut self, id: u64) -> bool {
        let before = self.listeners.len();
        self.listeners.retain(|l| l.id != id);
        self.listeners.len() != before
    }

    /// When the driver must next call [`handle_resync_check`](Self::handle_resync_check):
    /// the first tick of the check period (counted from start) at or after the earliest due
    /// time of any listener. None before start, when the informer does not resync, or when no
    /// listener resyncs.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let started = self.started_at?;
        let check = some_period(self.check_period)?;
        let earliest = self
            .listeners
            .iter()
            .filter(|l| !l.period.is_zero())
            .map(|l| l.next_resync)
            .min()?;
        let first_tick = started + check;
        if earliest <= first_tick {
            return Some(first_tick);
        }
        let since = earliest.duration_since(started).as_nanos();
        let ticks = since.div_ceil(check.as_nanos());
        let at = check.as_nanos().saturating_mul(ticks);
        Some(started + Duration::from_nanos(u64::try_from(at).unwrap_or(u64::MAX)))
    }

    /// client-go's `shouldResync` at `now`: marks which listeners are due (they, and only they,
    /// receive sync notifications until the next check, P3), re-arms each due listener from
    /// its due time, and returns true when any is due: then the driver asks the FIFO to queue
    /// `Sync` deltas (R6, F7).
    pub fn handle_resync_check(&mut self, now: Instant) -> bool {
        if self.check_period.is_zero() {
            return false;
        }
        let mut any = false;
        for l in &mut self.listeners {
            l.syncing = !l.period.is_zero() && now >= l.next_resync;
            if l.syncing {
                any = true;
                l.next_resync = advance_past(l.next_resync + l.period, l.period, now);
            }
        }
        any
    }

    /// client-go's `HandleDeltas` for one popped batch (P1, P3): applies every delta to the
    /// store in one store batch (one publish), and returns each listener's notifications.
    /// `is_in_initial_list` is the FIFO's answer at pop time (it had not synced yet).
    ///
    /// Objects travel as [`LazyObject`]s: in the lean mode (I7) nothing here decodes them (a
    /// typed index function aside), and the old object of an `Update` is the stored one as it
    /// was, decoded only if a handler reads it.
    pub fn handle_deltas(
        &mut self,
        batch: Vec<Deltas<LazyObject<K>>>,
        is_in_initial_list: bool,
    ) -> Dispatch<LazyObject<K>> {
        let mut applied = 0u64;
        let mut failed = 0usize;
        let mut out: Vec<(Delivery<LazyObject<K>>, bool)> = Vec::with_capacity(batch.len());
        {
            let mut writes = self.store.batch();
            for deltas in batch {
                let key = deltas.key;
                for d in deltas.deltas {
                    applied += 1;
                    match d.delta_type {
                        DeltaType::Sync
                        | DeltaType::Replaced
                        | DeltaType::Added
                        | DeltaType::Updated => {
                            let new = Arc::clone(d.object.object());
                            // The FIFO keyed the object with the store's key function.
                            let old = match writes.put_object(key.clone(), &new) {
                                Ok(old) => old,
                                // Only a typed store given an object that does not decode
                                // (never in an informer: its store and its objects share a
                                // mode): nothing stored, nothing notified, counted.
                                Err(_) => {
                                    failed += 1;
                                    continue;
                                }
                            };
                            match old {
                                Some(old) => {
                                    // client-go's OnUpdate: same RV = sync, whatever the
                                    // delta type (a Sync delta of a changed object, from a
                                    // relist without Replaced deltas, is a real update). The
                                    // same stored object is a resync of an object without RV;
                                    // its notification then carries one `Arc` twice.
                                    let resync = old.same_object(&new);
                                    let is_sync = resync || same_version(&old, &new);
                                    let old = if resync {
                                        Arc::clone(&new)
                                    } else {
                                        Arc::new(old)
                                    };
                                    out.push((
                                        Delivery {
                                            key: key.clone(),
                                            notification: Notification::Update { old, new },
                                            trace: d.trace,
                                            initial: false,
                                        },
                                        is_sync,
                                    ));
                                }
                                None => out.push((
                                    Delivery {
                                        key: key.clone(),
                                        notification: Notification::Add {
                                            obj: new,
                                            is_in_initial_list,
                                        },
                                        trace: d.trace,
                                        initial: is_in_initial_list,
                                    },
                                    false,
                                )),
                            }
                        }
                        // K2: the object left the shard; it still exists, so no handler is
                        // told (as when client-go replaces an informer by a narrower one).
                        DeltaType::LeftShard => {
                            writes.remove_key(key.as_str());
                        }
                        DeltaType::Deleted => {
                            writes.remove_key(key.as_str());
                            out.push((
                                Delivery {
                                    key: key.clone(),
                                    notification: Notification::Delete { obj: d.object },
                                    trace: d.trace,
                                    initial: false,
                                },
                                false,
                            ));
                        }
                    }
                }
            }
            writes.commit();
        }
        let syncs = out.iter().filter(|(_, s)| *s).count();
        let per_listener = self
            .listeners
            .iter()
            .filter_map(|l| {
                let items: Vec<Delivery<LazyObject<K>>> = out
                    .iter()
                    .filter(|(_, is_sync)| !is_sync || l.syncing)
                    .map(|(d, _)| d.clone())
                    .collect();
                (!items.is_empty()).then_some((l.id, items))
            })
            .collect();
        Dispatch {
            per_listener,
            applied,
            failed,
            notifications: out.len(),
            syncs,
        }
    }
}
