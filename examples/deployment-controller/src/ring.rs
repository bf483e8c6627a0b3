//! The deployment controller's replicas on the Lease ring (docs/scaling-out.md): each replica
//! runs a [`ShardMember`] whose [`ShardOwnership`] is the one its queue filter, pre-write
//! check, drain task and hand-over waits read, exactly as a fixed shard's is.
//!
//! - [`RingOptions`]: the ring's name, the namespace of its Leases, and its timings (short by
//!   default, for the demo: a replica that dies is taken over after 2 × 4 s).
//! - [`RingReplica`]: one replica (controller + member); [`start`](RingReplica::start) syncs the
//!   caches before joining, [`stop`](RingReplica::stop) drains and releases (H11),
//!   [`crash`](RingReplica::crash) ends it as a killed process would.
//! - [`OwnershipLog`]: observes every replica's ownership against the server's resourceVersion,
//!   and proves from a write log ([`WriteRecord`]) that no Deployment was written by one replica
//!   while another held its namespace.
//!
//! Replica `i` is identity `deployment-controller-<i>` in the ring (its Lease is
//! `deployment-controller-deployment-controller-<i>`), the same as its field manager.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use kinformer::{
    membership::{MembershipConfig, owned_by, target_ring},
    shard::{ShardField, ShardSelector, fnv1a64},
};
use kinformer_actors::{
    ShardMember, ShardMemberError, ShardMemberHandle, ShardMemberStatus, ShardOwnership, StopMode,
};
use kube::Client;

use crate::{
    controller::{ControllerError, ControllerOptions, DeploymentController},
    leader::DEFAULT_LEASE_NAMESPACE,
    shard::{CacheWait, ShardOptions, WriteHook, WriteRecord, field_manager},
};

/// The ring's default name: its Leases are labelled `kinformer.io/ring=deployment-controller`.
pub const DEFAULT_RING: &str = "deployment-controller";

/// How the replicas' ring runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingOptions {
    /// Namespace of the ring's Leases (default `kube-system`).
    pub namespace: String,
    /// The ring's name (default [`DEFAULT_RING`]).
    pub ring: String,
    /// A member silent this long is Expired; twice this long, taken over (default 4 s).
    pub lease_duration: Duration,
    /// Held ranges stay valid this long after a renew was sent (default 3 s).
    pub renew_deadline: Duration,
    /// Time between rounds (default 1 s).
    pub retry_period: Duration,
    /// Tokens per replica on the ring (default 32).
    pub virtual_nodes: u32,
    /// Drains, and claims, in flight per replica at a time (default 8: a replica that joins
    /// claims its 32 arcs in about four rounds).
    pub max_in_flight: usize,
    /// How long a replica waits, before reconciling a key whose range moved in, for its caches
    /// to see the previous owner's last write (KEP-5647); past it the sync fails and is
    /// retried (default 5 s).
    pub handover_wait: Duration,
    /// How long a leaving replica waits for its drains before it stops without releasing.
    pub drain_timeout: Duration,
}

impl Default for RingOptions {
    /// Short timings suited to a demo on one machine: a crash is taken over within about
    /// 2 × 4 s + a round. A production ring would keep the membership defaults (15 s / 10 s /
    /// 2 s) as leader election does.
    fn default() -> Self {
        RingOptions {
            namespace: DEFAULT_LEASE_NAMESPACE.into(),
            ring: DEFAULT_RING.into(),
            lease_duration: Duration::from_secs(4),
            renew_deadline: Duration::from_secs(3),
            retry_period: Duration::from_secs(1),
            virtual_nodes: 32,
            max_in_flight: 8,
            handover_wait: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(30),
        }
    }
}

impl RingOptions {
    /// The membership config of replica `id` (identity `deployment-controller-<id>`), hashing
    /// namespaces.
    pub fn membership(&self, id: &str) -> MembershipConfig {
        let mut c = MembershipConfig::new(
            self.namespace.clone(),
            self.ring.clone(),
            field_manager(id),
            ShardField::Namespace,
        );
        c.lease_duration = self.lease_duration;
        c.renew_deadline = self.renew_deadline;
        c.retry_period = self.retry_period;
        c.virtual_nodes = self.virtual_nodes;
        c.max_in_flight = self.max_in_flight;
        c
    }

    /// What each of the replicas `ids` holds once the ring settled with exactly them as Ready
    /// members (H6).
    pub fn target(&self, ids: &[&str]) -> BTreeMap<String, ShardSelector> {
        let identities: Vec<String> = ids.iter().map(|id| field_manager(id)).collect();
        let refs: Vec<&str> = identities.iter().map(String::as_str).collect();
        let ring = target_ring(&refs, self.virtual_nodes);
        ids.iter()
            .zip(&identities)
            .map(|(id, identity)| {
                (
                    id.to_string(),
                    owned_by(&ring, ShardField::Namespace, identity),
                )
            })
            .collect()
    }
}

/// Why a ring replica could not start or stop.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// The membership could not start or stop.
    #[error("shard member: {0}")]
    Member(#[from] ShardMemberError),
    /// The controller could not start.
    #[error("controller: {0}")]
    Controller(#[from] ControllerError),
}

/// One replica of the sharded controller on the Lease ring.
pub struct RingReplica {
    id: String,
    controller: DeploymentController,
    ownership: ShardOwnership,
    status: ShardMemberStatus,
    member: Option<ShardMember>,
    handle: Option<ShardMemberHandle>,
    drain_timeout: Duration,
}

impl std::fmt::Debug for RingReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingReplica")
            .field("id", &self.id)
            .field("running", &self.handle.is_some())
            .finish_non_exhaustive()
    }
}

impl RingReplica {
    /// Replica `id`: a controller whose ownership is published by its ring member. `options`
    /// is the unsharded controller's (its `shard` is replaced); `on_write` is called after
    /// every write. Nothing runs before [`start`](Self::start).
    pub async fn new(
        client: Client,
        id: impl Into<String>,
        ring: &RingOptions,
        options: ControllerOptions,
        on_write: Option<WriteHook>,
    ) -> Result<Self, RingError> {
        let id = id.into();
        let member = ShardMember::new(ring.membership(&id), client.clone())?;
        let ownership = member.ownership();
        let status = member.status();
        let mut shard = ShardOptions::with_ownership(id.clone(), ownership.clone());
        shard.on_write = on_write;
        // KEP-5647: the wait reads the controller's own informers, which exist once it is
        // built; until then (never in practice: nothing moves in before `start`) it fails.
        let slot: Arc<OnceLock<CacheWait>> = Arc::default();
        let wait = Arc::clone(&slot);
        shard.wait_for_cache = Some(Arc::new(move |rv: &str| match wait.get() {
            Some(w) => w(rv),
            None => Box::pin(async { false }),
        }));
        let controller = DeploymentController::new(
            client,
            ControllerOptions {
                shard: Some(shard),
                ..options
            },
        )
        .await?;
        let _ = slot.set(controller.cache_wait(ring.handover_wait));
        Ok(RingReplica {
            id,
            controller,
            ownership,
            status,
            member: Some(member),
            handle: None,
            drain_timeout: ring.drain_timeout,
        })
    }

    /// The replica's id (`<i>`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its identity in the ring and field manager: `deployment-controller-<id>`.
    pub fn identity(&self) -> String {
        field_manager(&self.id)
    }

    /// The controller.
    pub fn controller(&self) -> &DeploymentController {
        &self.controller
    }

    /// The ownership its member publishes.
    pub fn ownership(&self) -> &ShardOwnership {
        &self.ownership
    }

    /// Its member's health.
    pub fn status(&self) -> &ShardMemberStatus {
        &self.status
    }

    /// Whether it is in the ring (started, neither stopped nor crashed).
    pub fn is_running(&self) -> bool {
        self.handle.is_some()
    }

    /// Starts the controller (its caches synced, its workers running, owning nothing yet),
    /// then joins the ring: every range arrives in a warm cache, and the controller queues its
    /// Deployments as it does for any range that moves in.
    pub async fn start(&mut self) -> Result<(), RingError> {
        self.controller.start().await?;
        if let Some(m) = self.member.take() {
            self.handle = Some(m.start()?);
        }
        Ok(())
    }

    /// Leaves the ring (marks its Lease leaving, drains everything, releases the Lease: H11),
    /// then stops the controller. The controller runs until the member is done: it is what
    /// acknowledges the drains.
    pub async fn stop(&mut self) -> Result<(), RingError> {
        let left = self.leave().await;
        self.controller.shutdown().await;
        left
    }

    /// Leaves the ring only (the controller keeps running, owning nothing).
    pub async fn leave(&mut self) -> Result<(), RingError> {
        if let Some(h) = self.handle.take() {
            h.shutdown(StopMode::Release(self.drain_timeout)).await?;
        }
        Ok(())
    }

    /// Ends the replica as a killed process: the member stops without a word (nothing drained
    /// or released: the others take its Lease over once it is Uncertain, H3), the workers are
    /// aborted mid-sync. Its ownership stays valid until its last renew's deadline (H4), which
    /// is before anyone can take its ranges.
    pub async fn crash(&mut self) {
        drop(self.handle.take());
        self.member = None;
        self.controller.abort().await;
    }

    /// Whether its ownership is what the ring settles on for `target` (its entry in
    /// [`RingOptions::target`]): held exactly, nothing draining, the Lease valid.
    pub fn settled_on(&self, target: &ShardSelector) -> bool {
        let v = self.ownership.view();
        v.held == *target
            && v.draining.is_empty()
            && v.valid_until.is_none_or(|t| Instant::now() < t)
    }
}

/// Whether every running replica holds exactly its share of the ring of the running replicas.
pub fn settled(replicas: &[RingReplica], ring: &RingOptions) -> bool {
    let running: Vec<&RingReplica> = replicas.iter().filter(|r| r.is_running()).collect();
    let ids: Vec<&str> = running.iter().map(|r| r.id()).collect();
    let target = ring.target(&ids);
    running
        .iter()
        .all(|r| target.get(r.id()).is_some_and(|t| r.settled_on(t)))
}

/// A run of identical observations of one replica's active ranges, with the server's
/// resourceVersion read just before and just after the first and the last observation.
#[derive(Clone, Debug)]
struct Segment {
    active: ShardSelector,
    first: (u64, u64),
    last: (u64, u64),
}

/// The server's current resourceVersion (the in-process sim's `Sim::resource_version`).
pub type RvSource = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The ownership of every tracked replica over time, measured in the server's
/// resourceVersions, to check a write log against.
///
/// Each observation reads the resourceVersion, the replica's held ranges (draining included,
/// while its Lease is valid), and the resourceVersion again. A replica's write at `rv` in a namespace is then
///
/// - *outside its own window* unless an observation that did not show the namespace active was
///   made before it (`rv` > the resourceVersion read before that observation) and the next
///   observation that did not show it was made after it;
/// - *overlapping* when another replica was observed holding the namespace both before the
///   write and after it in one unbroken run of observations.
///
/// Observations are a few milliseconds apart; a range moves in rounds of the ring (a second
/// or more), so a run of observations that all show it active is taken as unbroken.
#[derive(Default)]
pub struct OwnershipLog {
    tracked: Mutex<Vec<(String, ShardOwnership)>>,
    segments: Mutex<BTreeMap<String, Vec<Segment>>>,
}

impl std::fmt::Debug for OwnershipLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnershipLog").finish_non_exhaustive()
    }
}

/// What [`OwnershipLog::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OverlapReport {
    /// Writes checked (those with a numeric resourceVersion).
    pub checked: usize,
    /// Writes made while another replica held the namespace, with that replica's manager.
    pub overlapping: Vec<(WriteRecord, String)>,
    /// Writes made outside any window in which the writer held the namespace.
    pub outside_own_window: Vec<WriteRecord>,
}

impl OverlapReport {
    /// Nothing overlapped and nothing was written outside its writer's window.
    pub fn is_clean(&self) -> bool {
        self.overlapping.is_empty() && self.outside_own_window.is_empty()
    }
}

/// What a replica holds now: `held` while its Lease is valid. Draining ranges count: a write
/// that started before the drain may still land (H7), and nobody else may hold them before the
/// ack (H9).
fn active_now(o: &ShardOwnership) -> ShardSelector {
    let v = o.view();
    if v.valid_until.is_some_and(|t| Instant::now() >= t) {
        return ShardSelector::nothing(v.held.field());
    }
    v.held.clone()
}

/// The runs of consecutive segments in which `hash` is active: (first, last) indices.
fn runs(segs: &[Segment], hash: u64) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, s) in segs.iter().enumerate() {
        match (s.active.contains_hash(hash), start) {
            (true, None) => start = Some(i),
            (false, Some(b)) => {
                out.push((b, i - 1));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(b) = start {
        out.push((b, segs.len() - 1));
    }
    out
}

impl OwnershipLog {
    /// An empty log.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Tracks a replica (`manager` is its field manager) from now on. Track it before it joins
    /// the ring: the first observation must show it holding nothing.
    pub fn track(&self, manager: impl Into<String>, ownership: ShardOwnership) {
        self.tracked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((manager.into(), ownership));
    }

    /// Observes every tracked replica once.
    pub fn observe(&self, rv: &dyn Fn() -> u64) {
        let tracked = self
            .tracked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut segments = self.segments.lock().unwrap_or_else(|e| e.into_inner());
        for (manager, o) in tracked {
            let before = rv();
            let active = active_now(&o);
            let after = rv();
            let segs = segments.entry(manager).or_default();
            match segs.last_mut() {
                Some(s) if s.active == active => s.last = (before, after),
                _ => segs.push(Segment {
                    active,
                    first: (before, after),
                    last: (before, after),
                }),
            }
        }
    }

    /// Observes every `every` until the returned task is aborted.
    pub fn spawn(self: &Arc<Self>, rv: RvSource, every: Duration) -> tokio::task::JoinHandle<()> {
        let log = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                log.observe(&*rv);
                tokio::time::sleep(every).await;
            }
        })
    }

    /// Checks a write log against the observations (see the type's doc).
    pub fn check(&self, writes: &[WriteRecord]) -> OverlapReport {
        let segments = self.segments.lock().unwrap_or_else(|e| e.into_inner());
        let mut report = OverlapReport::default();
        for w in writes {
            let Ok(rv) = w.resource_version.parse::<u64>() else {
                continue;
            };
            report.checked += 1;
            let hash = fnv1a64(&w.namespace);
            let own = segments.get(&w.manager).map(Vec::as_slice).unwrap_or(&[]);
            let inside = runs(own, hash).into_iter().any(|(b, e)| {
                let lower = if b == 0 { 0 } else { own[b - 1].last.0 };
                let upper = own.get(e + 1).map_or(u64::MAX, |s| s.first.1);
                lower < rv && rv <= upper
            });
            if !inside {
                report.outside_own_window.push(w.clone());
            }
            for (other, segs) in segments.iter().filter(|(m, _)| **m != w.manager) {
                let held = runs(segs, hash)
                    .into_iter()
                    .any(|(b, e)| segs[b].first.1 < rv && rv < segs[e].last.0);
                if held {
                    report.overlapping.push((w.clone(), other.clone()));
                }
            }
        }
        report
    }
}

/// A write log shared by replicas: the hook to give each, and the records.
#[derive(Clone, Default)]
pub struct WriteLog {
    writes: Arc<Mutex<Vec<WriteRecord>>>,
}

impl std::fmt::Debug for WriteLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteLog")
            .field("writes", &self.len())
            .finish()
    }
}

impl WriteLog {
    /// The hook that appends to this log ([`ShardOptions::on_write`]).
    pub fn hook(&self) -> WriteHook {
        let writes = Arc::clone(&self.writes);
        Arc::new(move |w| {
            writes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(w.clone())
        })
    }

    /// A copy of the records so far.
    pub fn records(&self) -> Vec<WriteRecord> {
        self.writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Writes logged.
    pub fn len(&self) -> usize {
        self.writes.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Nothing logged yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(manager: &str, ns: &str, rv: u64) -> WriteRecord {
        WriteRecord {
            manager: manager.into(),
            resource: "deployments",
            namespace: ns.into(),
            name: "app".into(),
            resource_version: rv.to_string(),
        }
    }

    /// Two replicas, a hand-over of everything from a to b between rv 10 and 20: writes inside
    /// the windows are clean; b writing while a still held, or a after it let go, are not.
    #[test]
    fn the_log_finds_overlaps_and_writes_outside_a_window() {
        let all = ShardSelector::everything(ShardField::Namespace);
        let none = ShardSelector::nothing(ShardField::Namespace);
        let (a, b) = (
            ShardOwnership::fixed(all.clone()),
            ShardOwnership::fixed(none.clone()),
        );
        let log = OwnershipLog::new();
        log.track("a", a.clone());
        log.track("b", b.clone());
        let rv = std::sync::atomic::AtomicU64::new(1);
        let at = |v: u64| {
            rv.store(v, std::sync::atomic::Ordering::SeqCst);
        };
        let read = || rv.load(std::sync::atomic::Ordering::SeqCst);
        at(1);
        log.observe(&read);
        at(10);
        log.observe(&read);
        let publish = |o: &ShardOwnership, held: &ShardSelector| {
            let mut v = (*o.view()).clone();
            v.held = held.clone();
            v.wanted = held.clone();
            o.publish(v);
        };
        publish(&a, &none);
        at(12);
        log.observe(&read);
        publish(&b, &all);
        at(20);
        log.observe(&read);
        at(30);
        log.observe(&read);
        let clean = log.check(&[rec("a", "x", 5), rec("b", "x", 25)]);
        assert!(clean.is_clean(), "{clean:?}");
        assert_eq!(clean.checked, 2);
        let bad = log.check(&[rec("b", "x", 5), rec("a", "x", 25)]);
        assert_eq!(bad.outside_own_window.len(), 2, "{bad:?}");
        assert_eq!(bad.overlapping.len(), 2, "{bad:?}");
    }

    #[test]
    fn targets_split_the_space() {
        let ring = RingOptions::default();
        let t = ring.target(&["0", "1", "2"]);
        let total: f64 = t.values().map(ShardSelector::fraction).sum();
        assert!((total - 1.0).abs() < 1e-9);
        assert_eq!(
            ring.membership("1").identity,
            "deployment-controller-1".to_string()
        );
    }
}
