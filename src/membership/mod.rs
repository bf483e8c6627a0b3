//! Lease-based membership of a sharded controller's replicas and the consistent-hash ring that
//! assigns hash ranges to them, as a pure state machine (issue "Scale out"; modelled on
//! timebertt/kubernetes-controller-sharding, without its central sharder).
//!
//! Every replica runs one [`MembershipMachine`]. Each holds a `coordination.k8s.io/v1` Lease of
//! its own, `{ring}-{identity}`, labelled `kinformer.io/ring={ring}`; the Leases are the only
//! shared state: there is no sharder, every replica computes the same target ring from the same
//! Leases and moves its own ranges towards it. The machine makes every decision and performs
//! none of the I/O, in the shape of [`crate::leader_election`]:
//!
//! - Inputs: [`handle_list`](MembershipMachine::handle_list) (the ring's Leases),
//!   [`handle_write_result`](MembershipMachine::handle_write_result) (a CREATE or PUT answered),
//!   [`handle_drained`](MembershipMachine::handle_drained) (the controller acknowledged a drain),
//!   [`set_last_write`](MembershipMachine::set_last_write), [`handle_timeout`](MembershipMachine::handle_timeout),
//!   [`handle_cancel`](MembershipMachine::handle_cancel); each with `now`.
//! - Outputs: [`poll_request`](MembershipMachine::poll_request) (LIST / CREATE / PUT),
//!   [`poll_timeout`](MembershipMachine::poll_timeout), [`poll_event`](MembershipMachine::poll_event),
//!   and the ownership to publish, [`view`](MembershipMachine::view).
//!
//! # The rules (docs/semantics.md H1–H11)
//!
//! - **H1 Leases.** Spec `holderIdentity` = identity, `leaseDurationSeconds`, `renewTime`;
//!   annotations [`HELD_ANNOTATION`] (the ranges its replica may act on, compact form
//!   [`format_ranges`]), [`CLAIMING_ANNOTATION`] (ranges it is about to take), [`LAST_WRITE_ANNOTATION`]
//!   (the resourceVersion of its replica's last write), [`LEAVING_ANNOTATION`] (shutting down).
//! - **H2 Rounds.** Every `retry_period` (jittered by up to 10 %) a round LISTs the ring's Leases
//!   (a consistent read), decides, PUTs its own Lease on the `resourceVersion` it read (the renew,
//!   carrying the annotations), then takes over at most one Uncertain member. A 409 on its own PUT
//!   starts a new round at once. One request is in flight at a time, each bounded by
//!   `renew_deadline`.
//! - **H3 Member states**, on our own clock from when we observed the Lease's current
//!   `resourceVersion` (as leader election's `observedTime`): *Ready* (observed change within
//!   `leaseDurationSeconds`), *Expired* (within twice that), *Uncertain* (older), *Dead* (its
//!   `holderIdentity` is not its identity: released, or taken over). A replica that sees a member
//!   Uncertain PUTs its Lease with `holderIdentity: ""` on the `resourceVersion` it read (a 409:
//!   the member renewed, or another replica was first); success makes it Dead. Time we could
//!   not see the server (from our first failed request to the next LIST that succeeds) does
//!   not count towards a member's silence: after an apiserver outage the others are as old as
//!   they were when it began, not Uncertain because the server was gone.
//! - **H4 Validity.** `valid_until` is when the last successful PUT of our own Lease was
//!   *sent*, plus `renew_deadline`. Nobody takes a Lease over before `2 × leaseDuration` after
//!   observing its last change, which is later than that: a replica has stopped acting on its
//!   ranges before anyone may declare it Dead (given clocks that run at the same rate).
//! - **H5 Own Lease lost.** A replica whose Lease is found taken over (or deleted) drops every
//!   range, claim and drain at once and rejoins with a fresh record (no ranges). At start, a
//!   Lease of our identity left by a previous process is rejoined at once when it holds and
//!   claims nothing (or is Dead), otherwise only once it is Uncertain, as any other member.
//! - **H6 Target ring.** [`target_ring`]: `virtual_nodes` tokens per Ready, not leaving member
//!   (ourselves included while joined and not leaving) at [`token`] (`fnv1a64("{identity}#{i}")`,
//!   finalized); each token
//!   owns the arc from itself up to the next token, the last one wrapping around `2^64`. The
//!   informers cache (`wanted`) what is held, claimed, and the target's ranges no other live
//!   member holds or claims: never a range another live member may act on.
//! - **H7 Drain.** A held range the target gives to someone else is put into `draining`
//!   (at most `max_in_flight` drains at a time; everything at once when leaving); it stays held
//!   (not acted on anew) until the controller acknowledges it, then leaves `held` at once and
//!   the next PUT removes it from the Lease. A drain whose range the target gives back is
//!   cancelled.
//! - **H8 Claim (a flag protocol).** A range the target gives us that no other live member holds
//!   or claims is *announced* in our `claiming` annotation (at most `max_in_flight` claims). A
//!   LIST sent after that PUT succeeded that shows no other live member holding or claiming any of
//!   it *promotes* it: the next PUT moves it from `claiming` to `held` in one write, and after that
//!   PUT succeeds it is held. Two replicas that announce the same range cannot both see the other
//!   absent (each wrote before it read), so at most one promotes; when both see each other, the
//!   one with the larger identity withdraws, and nobody announces a range another live member
//!   holds or claims. Members that are Expired or Uncertain still count as live: their ranges move
//!   only once they are Dead.
//! - **H9 Lease ⊇ local.** What a Lease says is held always covers what its replica acts on:
//!   ranges are added locally only after the PUT that announced them as held succeeded, and
//!   removed locally before the PUT that drops them is sent.
//! - **H10 Handover.** A promoted range records the newest `last-write` among the members whose
//!   Leases we saw holding part of it (every member's when none), so the new owner's cache waits
//!   for the previous owner's last write (KEP-5647).
//! - **H11 Leave.** [`handle_cancel`](MembershipMachine::handle_cancel) marks the Lease leaving
//!   (others drop us from their target), drains everything and withdraws every claim; once all
//!   drains are acknowledged it releases the Lease (`holderIdentity: ""`, `leaseDurationSeconds:
//!   1`, nothing held) so the others claim at once. If the acknowledgements do not come by the
//!   deadline it stops without releasing: the Lease expires and is taken over (H3, H4).
//!
//! What the guarantee assumes: clocks that run at the same rate, LISTs that are consistent reads,
//! and nobody but the members writing the ring's Leases (a Lease deleted by hand frees its ranges
//! at once, while its replica may act on them until its next round notices).

use std::{
    collections::{BTreeMap, VecDeque},
    fmt,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
};
use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::{
    leader_election::{JITTER_FACTOR, LeaseError, RELEASED_LEASE_DURATION_SECONDS},
    shard::{HASH_SPACE_END, HashRange, ShardError, ShardField, ShardSelector, fnv1a64},
};

#[cfg(test)]
mod tests;

/// The label every Lease of a ring carries (`kinformer.io/ring={ring}`).
pub const RING_LABEL: &str = "kinformer.io/ring";
/// Annotation: the ranges the member may act on ([`format_ranges`]).
pub const HELD_ANNOTATION: &str = "kinformer.io/held";
/// Annotation: the ranges the member is about to take (H8).
pub const CLAIMING_ANNOTATION: &str = "kinformer.io/claiming";
/// Annotation: the resourceVersion of the member's last write (H10).
pub const LAST_WRITE_ANNOTATION: &str = "kinformer.io/last-write";
/// Annotation: `"true"` while the member shuts down (H11).
pub const LEAVING_ANNOTATION: &str = "kinformer.io/leaving";
/// Annotation written by a take-over: who declared the member Dead.
pub const TAKEN_OVER_BY_ANNOTATION: &str = "kinformer.io/taken-over-by";

/// How much a round's period is jittered: `retry_period × (1 + ROUND_JITTER × r)`.
pub const ROUND_JITTER: f64 = 0.1;

/// Membership options. Build with [`MembershipConfig::new`]; the machine validates it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipConfig {
    /// Namespace of the ring's Leases.
    pub namespace: String,
    /// The ring's name: the Leases are `{ring}-{identity}`, labelled `kinformer.io/ring={ring}`.
    pub ring: String,
    /// This replica's identity, unique among the replicas (a pod name).
    pub identity: String,
    /// How long after observing a Lease's last change a member is Expired (twice that:
    /// Uncertain, taken over). Default 15 s.
    pub lease_duration: Duration,
    /// How long held ranges stay valid after the last successful renew was sent. Default 10 s.
    pub renew_deadline: Duration,
    /// Time between rounds. Default 2 s.
    pub retry_period: Duration,
    /// Tokens per member on the ring. Default 32.
    pub virtual_nodes: u32,
    /// At most this many drains, and this many claims, in flight at a time. Default 4.
    pub max_in_flight: usize,
    /// The hashed field of the ranges.
    pub field: ShardField,
}

impl MembershipConfig {
    /// A config with the defaults (15 s / 10 s / 2 s, 32 virtual nodes, 4 moves in flight).
    pub fn new(
        namespace: impl Into<String>,
        ring: impl Into<String>,
        identity: impl Into<String>,
        field: ShardField,
    ) -> Self {
        MembershipConfig {
            namespace: namespace.into(),
            ring: ring.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            virtual_nodes: 32,
            max_in_flight: 4,
            field,
        }
    }

    /// The name of this replica's Lease.
    pub fn lease_name(&self) -> String {
        lease_name(&self.ring, &self.identity)
    }

    /// The label selector that lists the ring's Leases.
    pub fn label_selector(&self) -> String {
        format!("{RING_LABEL}={}", self.ring)
    }

    /// Checks the timings (as leader election's, with the round jitter) and the names.
    pub fn validate(&self) -> Result<(), MembershipConfigError> {
        if self.retry_period.is_zero() {
            return Err(MembershipConfigError::Timings("retryPeriod must be > 0"));
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return Err(MembershipConfigError::Timings(
                "renewDeadline must be greater than retryPeriod*1.2",
            ));
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(MembershipConfigError::Timings(
                "leaseDuration must be greater than renewDeadline",
            ));
        }
        if self.identity.is_empty() || self.identity.starts_with(':') {
            return Err(MembershipConfigError::Names("identity is empty"));
        }
        if self.ring.is_empty() || self.namespace.is_empty() {
            return Err(MembershipConfigError::Names("ring or namespace is empty"));
        }
        if self.virtual_nodes == 0 || self.max_in_flight == 0 {
            return Err(MembershipConfigError::Names(
                "virtual_nodes and max_in_flight must be > 0",
            ));
        }
        Ok(())
    }

    fn lease_duration_seconds(&self) -> i32 {
        let secs = self
            .lease_duration
            .as_nanos()
            .div_ceil(1_000_000_000)
            .max(1);
        i32::try_from(secs).unwrap_or(i32::MAX)
    }
}

/// A [`MembershipConfig`] that cannot work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MembershipConfigError {
    /// The timings break `leaseDuration > renewDeadline > 1.2 × retryPeriod > 0`.
    #[error("invalid membership timings: {0}")]
    Timings(&'static str),
    /// A name or a count is empty.
    #[error("invalid membership config: {0}")]
    Names(&'static str),
}

/// The Lease name of `identity` in `ring`.
pub fn lease_name(ring: &str, identity: &str) -> String {
    format!("{ring}-{identity}")
}

/// The compact form of ranges in the annotations: `start-end` in lowercase hex (no `0x`),
/// comma-separated; `""` for none. `end` may be `10000000000000000` (2^64).
pub fn format_ranges(s: &ShardSelector) -> String {
    s.ranges()
        .iter()
        .map(|r| format!("{:x}-{:x}", r.start(), r.end()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses [`format_ranges`]' form.
pub fn parse_ranges(field: ShardField, s: &str) -> Result<ShardSelector, ShardError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || ShardError::Syntax {
            at: 0,
            message: format!("bad range {part:?}"),
        };
        let (a, b) = part.split_once('-').ok_or_else(bad)?;
        let start = u64::from_str_radix(a, 16).map_err(|_| bad())?;
        let end = u128::from_str_radix(b, 16).map_err(|_| bad())?;
        out.push(HashRange::new(start, end)?);
    }
    Ok(ShardSelector::new(field, out))
}

/// The target ring (H6): every arc of the space with its owner, in order. `members` need not be
/// sorted or unique; empty when there are none. Equal tokens go to the smaller identity.
pub fn target_ring(members: &[&str], virtual_nodes: u32) -> Vec<(HashRange, String)> {
    let mut tokens: Vec<(u64, &str)> = members
        .iter()
        .flat_map(|m| (0..virtual_nodes).map(move |i| (token(m, i), *m)))
        .collect();
    tokens.sort();
    tokens.dedup_by_key(|t| t.0);
    let (Some(&(first, _)), Some(&(_, last_owner))) = (tokens.first(), tokens.last()) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(tokens.len() + 1);
    if first > 0 {
        // [0, first token) belongs to the last token (the wrap-around).
        if let Ok(r) = HashRange::new(0, u128::from(first)) {
            out.push((r, last_owner.to_string()));
        }
    }
    for (i, &(t, owner)) in tokens.iter().enumerate() {
        let end = tokens
            .get(i + 1)
            .map_or(HASH_SPACE_END, |n| u128::from(n.0));
        if let Ok(r) = HashRange::new(t, end) {
            out.push((r, owner.to_string()));
        }
    }
    out
}

/// The position of `identity`'s `i`-th virtual node: `fnv1a64("{identity}#{i}")` through
/// MurmurHash3's 64-bit finalizer. FNV-1a alone leaves names that differ in their last byte
/// within about `2^48` of one another (the last step multiplies a small difference by a prime
/// near `2^40`), so one member's tokens would cluster on one small stretch of the ring.
pub fn token(identity: &str, i: u32) -> u64 {
    let mut h = fnv1a64(&format!("{identity}#{i}"));
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The ranges `identity` owns in a ring built by [`target_ring`].
pub fn owned_by(ring: &[(HashRange, String)], field: ShardField, identity: &str) -> ShardSelector {
    ShardSelector::new(
        field,
        ring.iter().filter(|(_, o)| o == identity).map(|(r, _)| *r),
    )
}

/// A member's state as observed (H3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemberState {
    /// Renewed within its lease duration.
    Ready,
    /// Not renewed for its lease duration.
    Expired,
    /// Not renewed for twice its lease duration: to be taken over.
    Uncertain,
    /// Released or taken over: its annotations are ignored.
    Dead,
}

/// One member of the ring as observed.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberStatus {
    /// Its identity.
    pub identity: String,
    /// Its state now.
    pub state: MemberState,
    /// The ranges its Lease says it holds.
    pub held: ShardSelector,
    /// The ranges its Lease says it claims.
    pub claiming: ShardSelector,
    /// Whether its Lease says it is leaving.
    pub leaving: bool,
}

/// What to send.
#[derive(Clone, Debug, PartialEq)]
pub enum MemberRequest {
    /// LIST the Leases of the namespace with [`MembershipConfig::label_selector`].
    List,
    /// CREATE our Lease.
    Create(Lease),
    /// PUT our Lease (renew, rejoin, release), conditional on its `resourceVersion`.
    Update(Lease),
    /// PUT another member's Lease to declare it Dead, conditional on its `resourceVersion`.
    TakeOver(Lease),
}

impl MemberRequest {
    /// Stamps `renewTime` (and `acquireTime` when unset) of a CREATE or own PUT with the wall
    /// clock; the machine never reads them (H3 measures on our own clock).
    pub fn stamp(&mut self, now: MicroTime) {
        if let MemberRequest::Create(l) | MemberRequest::Update(l) = self {
            let spec = l.spec.get_or_insert_with(LeaseSpec::default);
            if spec.acquire_time.is_none() {
                spec.acquire_time = Some(now.clone());
            }
            spec.renew_time = Some(now);
        }
    }
}

/// What the machine reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberEvent {
    /// Our Lease is written and renewed: we are a member.
    Joined,
    /// Our Lease was found taken over or deleted: everything dropped (H5).
    LostLease,
    /// We declared this member Dead.
    TookOver(String),
    /// A range became ours, with the previous owner's last write.
    Claimed(HashRange, Option<String>),
    /// A held range started draining.
    DrainStarted(HashRange),
    /// A drained range left `held`.
    Drained(HashRange),
    /// A request failed (a lost race included, see [`LeaseError::is_lost_race`]).
    RequestFailed(LeaseError),
    /// Our Lease was released on leave.
    Released,
}

/// Counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MembershipStats {
    /// Requests sent.
    pub requests: u64,
    /// 409s.
    pub conflicts: u64,
    /// Other failures (timeouts included).
    pub failures: u64,
    /// Ranges claimed (hand-overs received).
    pub handovers: u64,
    /// Drains completed.
    pub drains: u64,
    /// When the last drain completed.
    pub last_drain: Option<Instant>,
    /// Members we declared Dead.
    pub takeovers: u64,
    /// Times our own Lease was lost.
    pub lost_leases: u64,
}

/// What a replica may act on, for the controller (published into a `ShardOwnership`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    /// Ranges this replica may act on (until `valid_until`); draining ones included.
    pub held: ShardSelector,
    /// `held` ∪ our target ranges (what the informers should cache).
    pub wanted: ShardSelector,
    /// Held ranges being drained.
    pub draining: ShardSelector,
    /// Ranges that moved in, with the previous owner's last write.
    pub handover: Vec<(HashRange, String)>,
    /// `held` is valid until then; `None`: not valid (not joined, lost, stopped).
    pub valid_until: Option<Instant>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClaimStage {
    /// In our next PUT's `claiming`; not yet confirmed written.
    Announcing,
    /// Written in `claiming`; the next LIST decides.
    Announced,
    /// Confirmed: the next PUT moves it to `held`.
    Promoting,
}

#[derive(Clone, Debug)]
struct Claim {
    range: ShardSelector,
    stage: ClaimStage,
}

#[derive(Clone, Debug)]
struct Member {
    identity: String,
    lease: Lease,
    at: Instant,
    duration: Duration,
    holder: String,
    held: ShardSelector,
    claiming: ShardSelector,
    last_write: Option<String>,
    leaving: bool,
    /// Every range we ever saw it hold (H10).
    history: ShardSelector,
}

impl Member {
    fn state(&self, now: Instant) -> MemberState {
        if self.holder != self.identity {
            return MemberState::Dead;
        }
        let age = now.saturating_duration_since(self.at);
        if age < self.duration {
            MemberState::Ready
        } else if age < self.duration * 2 {
            MemberState::Expired
        } else {
            MemberState::Uncertain
        }
    }

    fn flags(&self) -> ShardSelector {
        self.held
            .union(&self.claiming)
            .unwrap_or_else(|_| self.held.clone())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    List,
    Create,
    Own,
    Release,
    TakeOver(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Planned {
    Own,
    TakeOver(String),
}

#[derive(Debug)]
enum Step {
    Idle {
        not_before: Option<Instant>,
    },
    InFlight {
        op: Op,
        sent: Instant,
        deadline: Instant,
    },
    Stopped,
}

/// The membership machine of one replica. See the [module docs](self).
#[derive(Debug)]
pub struct MembershipMachine {
    config: MembershipConfig,
    lease_name: String,
    rng: StdRng,
    step: Step,
    plan: VecDeque<Planned>,
    members: BTreeMap<String, Member>,
    /// Our Lease as last read or written.
    own: Option<Lease>,
    /// Whether we hold our Lease (joined and not lost).
    joined: bool,
    /// When the last successful PUT/CREATE of our Lease was sent.
    renewed_at: Option<Instant>,
    held: ShardSelector,
    drains: Vec<HashRange>,
    claims: Vec<Claim>,
    handover: Vec<(HashRange, String)>,
    target: ShardSelector,
    /// Target ranges no other live member holds or claims (H6): about to move in, so the
    /// informers may cache them; never a range another live member may still act on.
    incoming: ShardSelector,
    /// Since when our requests have been failing (None after a success): time the server could
    /// not be seen does not age the other members (H3).
    failing_since: Option<Instant>,
    last_write: Option<String>,
    /// Leaving: drain everything, then release (`Some(deadline)`).
    leaving: Option<Instant>,
    /// Start the next round as soon as this one ends (an ack to tell).
    urgent: bool,
    events: VecDeque<MemberEvent>,
    stats: MembershipStats,
}

impl MembershipMachine {
    /// A replica that has not joined yet; `seed` seeds the round jitter.
    pub fn new(config: MembershipConfig, seed: u64) -> Result<Self, MembershipConfigError> {
        config.validate()?;
        let field = config.field;
        Ok(MembershipMachine {
            lease_name: config.lease_name(),
            config,
            rng: StdRng::seed_from_u64(seed),
            step: Step::Idle { not_before: None },
            plan: VecDeque::new(),
            members: BTreeMap::new(),
            own: None,
            joined: false,
            renewed_at: None,
            held: ShardSelector::nothing(field),
            drains: Vec::new(),
            claims: Vec::new(),
            handover: Vec::new(),
            target: ShardSelector::nothing(field),
            incoming: ShardSelector::nothing(field),
            failing_since: None,
            last_write: None,
            leaving: None,
            urgent: false,
            events: VecDeque::new(),
            stats: MembershipStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &MembershipConfig {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> &MembershipStats {
        &self.stats
    }

    /// Whether we hold our Lease.
    pub fn is_joined(&self) -> bool {
        self.joined
    }

    /// Whether a request is in flight (its answer is expected). When this turns false after
    /// `handle_timeout`, the driver drops the request.
    pub fn awaiting_response(&self) -> bool {
        matches!(self.step, Step::InFlight { .. })
    }

    /// Whether the machine is done (left, or cancelled without release).
    pub fn is_stopped(&self) -> bool {
        matches!(self.step, Step::Stopped)
    }

    /// Until when held ranges may be acted on (H4); `None`: not now.
    pub fn valid_until(&self) -> Option<Instant> {
        if !self.joined {
            return None;
        }
        self.renewed_at.map(|t| t + self.config.renew_deadline)
    }

    /// The ranges held (may act on before [`valid_until`](Self::valid_until)).
    pub fn held(&self) -> &ShardSelector {
        &self.held
    }

    /// The ranges our current target gives us.
    pub fn target(&self) -> &ShardSelector {
        &self.target
    }

    /// The ownership to publish.
    ///
    /// `wanted` is `held`, the ranges being claimed, and the target's ranges that no other live
    /// member holds or claims: a range another member may still act on is never wanted, even
    /// when that member is Expired or Uncertain (after an outage, every member looks silent),
    /// so informers never list or watch wider than what this replica holds or is about to hold
    /// (issue 31).
    pub fn view(&self) -> MemberView {
        let mut wanted = self
            .held
            .union(&self.incoming)
            .unwrap_or_else(|_| self.held.clone());
        for c in &self.claims {
            wanted = wanted.union(&c.range).unwrap_or(wanted);
        }
        MemberView {
            held: self.held.clone(),
            wanted,
            draining: self.draining(),
            handover: self.handover.clone(),
            valid_until: self.valid_until(),
        }
    }

    /// The other members as observed (ourselves excluded), by identity.
    pub fn members(&self, now: Instant) -> Vec<MemberStatus> {
        self.members
            .values()
            .map(|m| MemberStatus {
                identity: m.identity.clone(),
                state: m.state(now),
                held: m.held.clone(),
                claiming: m.claiming.clone(),
                leaving: m.leaving,
            })
            .collect()
    }

    /// Records the resourceVersion of our replica's last write (written in the next PUT).
    pub fn set_last_write(&mut self, rv: Option<String>) {
        self.last_write = rv;
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<MemberEvent> {
        self.events.pop_front()
    }

    /// When to call [`handle_timeout`](Self::handle_timeout): the next round, the deadline of
    /// the request in flight, or the leave deadline. `None` when stopped or a request is due
    /// now. (The end of validity needs no call: [`view`](Self::view) carries it and readers
    /// check it.)
    pub fn poll_timeout(&self) -> Option<Instant> {
        let own = match &self.step {
            Step::Idle { not_before } => *not_before,
            Step::InFlight { deadline, .. } => Some(*deadline),
            Step::Stopped => return None,
        };
        [own, self.leaving].into_iter().flatten().min()
    }

    /// Time passed: abandon a request past its deadline, stop at the leave deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
    }

    /// The next request, if one is due.
    pub fn poll_request(&mut self, now: Instant) -> Option<MemberRequest> {
        self.advance(now);
        let Step::Idle { not_before } = self.step else {
            return None;
        };
        if not_before.is_some_and(|t| now < t) {
            return None;
        }
        let (op, request) = match self.plan.pop_front() {
            None => (Op::List, MemberRequest::List),
            Some(Planned::TakeOver(id)) => match self.takeover_write(&id) {
                Some(l) => (Op::TakeOver(id), MemberRequest::TakeOver(l)),
                None => (Op::List, MemberRequest::List),
            },
            Some(Planned::Own) => self.own_write(),
        };
        self.stats.requests += 1;
        self.step = Step::InFlight {
            op,
            sent: now,
            deadline: now + self.config.renew_deadline,
        };
        Some(request)
    }

    /// The answer to [`MemberRequest::List`]. Ignored unless a LIST is in flight.
    pub fn handle_list(&mut self, now: Instant, result: Result<Vec<Lease>, LeaseError>) {
        self.advance(now);
        if !matches!(self.step, Step::InFlight { op: Op::List, .. }) {
            return;
        }
        match result {
            Err(e) => self.failed(now, e),
            Ok(leases) => {
                let outage = self.failing_since.take();
                self.observe_all(now, leases);
                if let Some(since) = outage {
                    self.discount_outage(now, since);
                }
                self.decide(now);
                self.next_in_plan(now);
            }
        }
    }

    /// The answer to a CREATE or PUT. Ignored unless a write is in flight.
    pub fn handle_write_result(&mut self, now: Instant, result: Result<Lease, LeaseError>) {
        self.advance(now);
        let Step::InFlight { op, sent, .. } = &self.step else {
            return;
        };
        let (op, sent) = (op.clone(), *sent);
        match (op, result) {
            (Op::List, _) => {}
            (Op::Create | Op::Own, Ok(lease)) => {
                self.own_written(now, sent, lease);
                self.next_in_plan(now);
            }
            (Op::Release, Ok(lease)) => {
                self.own = Some(lease);
                self.events.push_back(MemberEvent::Released);
                self.stop();
            }
            (Op::Release, Err(e)) => {
                self.record_error(e.clone());
                self.events.push_back(MemberEvent::RequestFailed(e));
                self.stop();
            }
            (Op::TakeOver(id), Ok(lease)) => {
                self.stats.takeovers += 1;
                self.events.push_back(MemberEvent::TookOver(id));
                self.observe(now, lease);
                self.next_in_plan(now);
            }
            (Op::Create | Op::Own, Err(e)) if e.is_lost_race() || is_not_found(&e) => {
                // Our Lease changed (taken over, or an abandoned write of ours landed): the
                // next round's LIST tells which, at once.
                self.record_error(e.clone());
                self.events.push_back(MemberEvent::RequestFailed(e));
                self.plan.clear();
                self.step = Step::Idle { not_before: None };
            }
            (_, Err(e)) => self.failed(now, e),
        }
    }

    /// The controller stopped its workers for `ranges` (a part of `draining`): they leave
    /// `held` now (H7, H9) and the next PUT, sent at once, tells the others.
    pub fn handle_drained(&mut self, now: Instant, ranges: &ShardSelector) {
        if ranges.is_empty() || ranges.field() != self.config.field {
            return;
        }
        let mut changed = false;
        let mut kept = Vec::new();
        for d in std::mem::take(&mut self.drains) {
            let d_sel = self.sel([d]);
            let acked = d_sel
                .intersection(ranges)
                .unwrap_or_else(|_| self.nothing());
            if acked.is_empty() {
                kept.push(d);
                continue;
            }
            changed = true;
            self.held = self
                .held
                .difference(&acked)
                .unwrap_or_else(|_| self.nothing());
            for r in acked.ranges() {
                self.stats.drains += 1;
                self.events.push_back(MemberEvent::Drained(*r));
            }
            self.stats.last_drain = Some(now);
            if let Ok(rest) = d_sel.difference(ranges) {
                kept.extend(rest.ranges().iter().copied());
            }
        }
        self.drains = kept;
        if changed {
            self.prune_handover();
            self.hurry(now);
        }
    }

    /// Leave the ring (H11): drain everything and withdraw claims; once every drain is
    /// acknowledged, release the Lease. At `deadline` stop without releasing if drains are still
    /// unacknowledged. Call again with `release: false` (or first) to stop at once like a
    /// crash, nothing released.
    pub fn handle_cancel(&mut self, now: Instant, release: bool, deadline: Instant) {
        if self.is_stopped() {
            return;
        }
        if !release || !self.joined {
            self.stop();
            return;
        }
        if self.leaving.is_none() {
            self.leaving = Some(deadline);
            self.claims.retain(|c| c.stage == ClaimStage::Promoting);
            self.start_drains(now);
            self.hurry(now);
        }
    }

    // --- internals ---

    fn nothing(&self) -> ShardSelector {
        ShardSelector::nothing(self.config.field)
    }

    fn sel(&self, ranges: impl IntoIterator<Item = HashRange>) -> ShardSelector {
        ShardSelector::new(self.config.field, ranges)
    }

    fn draining(&self) -> ShardSelector {
        self.sel(self.drains.iter().copied())
    }

    fn advance(&mut self, now: Instant) {
        if self.leaving.is_some_and(|d| now >= d) && !self.is_stopped() {
            // The drains were not acknowledged in time: stop without releasing (H11).
            self.stop();
            return;
        }
        if let Step::InFlight { sent, deadline, .. } = self.step
            && now >= deadline
        {
            self.failed(
                now,
                LeaseError::TimedOut(deadline.saturating_duration_since(sent)),
            );
        }
    }

    fn stop(&mut self) {
        self.step = Step::Stopped;
        self.joined = false;
        self.incoming = self.nothing();
        self.held = self.nothing();
        self.drains.clear();
        self.claims.clear();
        self.handover.clear();
        self.plan.clear();
    }

    fn record_error(&mut self, e: LeaseError) {
        if e.is_lost_race() {
            self.stats.conflicts += 1;
        } else {
            self.stats.failures += 1;
        }
    }

    /// H3: the time from our first failed request to the LIST that succeeded after it is time
    /// we could not see the others renew; it does not count towards their silence. Without
    /// this, the first replica back after an apiserver outage longer than twice the lease
    /// duration would find every other member Uncertain and take them over, though they were
    /// as cut off as it was.
    fn discount_outage(&mut self, now: Instant, since: Instant) {
        let blind = now.saturating_duration_since(since);
        for m in self.members.values_mut() {
            m.at = (m.at + blind).min(now);
        }
    }

    /// A request failed: report it, end the round, next round after the period.
    fn failed(&mut self, now: Instant, e: LeaseError) {
        self.failing_since.get_or_insert(now);
        self.record_error(e.clone());
        self.events.push_back(MemberEvent::RequestFailed(e));
        self.plan.clear();
        let delay = self.period();
        self.step = Step::Idle {
            not_before: Some(now + delay),
        };
    }

    fn period(&mut self) -> Duration {
        let r: f64 = self.rng.random();
        self.config.retry_period + self.config.retry_period.mul_f64(ROUND_JITTER * r)
    }

    /// The next planned request, or the next round after the period (at once when hurried).
    fn next_in_plan(&mut self, now: Instant) {
        if self.plan.is_empty() && !std::mem::take(&mut self.urgent) {
            let delay = self.period();
            self.step = Step::Idle {
                not_before: Some(now + delay),
            };
        } else {
            self.step = Step::Idle { not_before: None };
        }
    }

    /// Something must be told soon: when idle, the next round starts now.
    fn hurry(&mut self, _now: Instant) {
        match &mut self.step {
            Step::Idle { not_before } => *not_before = None,
            Step::InFlight { .. } => self.urgent = true,
            Step::Stopped => {}
        }
    }

    fn parse_member(&self, now: Instant, lease: Lease) -> Option<Member> {
        let name = lease.metadata.name.as_deref()?;
        let identity = name
            .strip_prefix(self.config.ring.as_str())?
            .strip_prefix('-')?
            .to_string();
        let annotations = lease.metadata.annotations.clone().unwrap_or_default();
        let ranges = |key: &str| {
            annotations
                .get(key)
                .and_then(|v| parse_ranges(self.config.field, v).ok())
                .unwrap_or_else(|| self.nothing())
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let duration = spec
            .lease_duration_seconds
            .filter(|&s| s > 0)
            .map(|s| Duration::from_secs(s.unsigned_abs().into()))
            .unwrap_or(self.config.lease_duration);
        let held = ranges(HELD_ANNOTATION);
        Some(Member {
            holder: spec.holder_identity.unwrap_or_default(),
            claiming: ranges(CLAIMING_ANNOTATION),
            last_write: annotations.get(LAST_WRITE_ANNOTATION).cloned(),
            leaving: annotations
                .get(LEAVING_ANNOTATION)
                .is_some_and(|v| v == "true"),
            history: held.clone(),
            held,
            identity,
            lease,
            at: now,
            duration,
        })
    }

    /// One Lease read or written: its observed time is kept while its resourceVersion is.
    fn observe(&mut self, now: Instant, lease: Lease) {
        let Some(mut m) = self.parse_member(now, lease) else {
            return;
        };
        if let Some(old) = self.members.get(&m.identity) {
            if old.lease.metadata.resource_version == m.lease.metadata.resource_version {
                m.at = old.at;
            }
            m.history = m.history.union(&old.history).unwrap_or(m.history);
        }
        self.members.insert(m.identity.clone(), m);
    }

    fn observe_all(&mut self, now: Instant, leases: Vec<Lease>) {
        let mut seen = std::collections::BTreeSet::new();
        let mut own = None;
        for lease in leases {
            if lease.metadata.name.as_deref() == Some(self.lease_name.as_str()) {
                own = Some(lease.clone());
            }
            if let Some(name) = lease.metadata.name.clone() {
                seen.insert(name);
            }
            self.observe(now, lease);
        }
        // Deleted Leases are no members (their history goes with them).
        self.members.retain(|_, m| {
            m.lease
                .metadata
                .name
                .as_ref()
                .is_some_and(|n| seen.contains(n))
        });
        if self.joined {
            let ours = own
                .as_ref()
                .and_then(|l| l.spec.as_ref())
                .and_then(|s| s.holder_identity.as_deref())
                == Some(self.config.identity.as_str());
            if !ours {
                self.lose();
            }
        }
        self.own = own;
    }

    /// H5: our Lease is gone or taken over.
    fn lose(&mut self) {
        self.joined = false;
        self.renewed_at = None;
        self.incoming = self.nothing();
        self.held = self.nothing();
        self.drains.clear();
        self.claims.clear();
        self.handover.clear();
        self.stats.lost_leases += 1;
        self.events.push_back(MemberEvent::LostLease);
    }

    fn own_written(&mut self, now: Instant, sent: Instant, lease: Lease) {
        self.own = Some(lease.clone());
        self.observe(now, lease);
        if !self.joined {
            self.joined = true;
            self.events.push_back(MemberEvent::Joined);
        }
        self.renewed_at = Some(sent);
        // The write carried every claim as it is now: claims change only after a LIST (and
        // a cancel only withdraws unconfirmed ones), never while our PUT is in flight.
        let mut promoted = Vec::new();
        for c in &mut self.claims {
            match c.stage {
                ClaimStage::Announcing => c.stage = ClaimStage::Announced,
                ClaimStage::Promoting => promoted.push(c.range.clone()),
                ClaimStage::Announced => {}
            }
        }
        self.claims.retain(|c| c.stage != ClaimStage::Promoting);
        for r in promoted {
            self.held = self.held.union(&r).unwrap_or_else(|_| self.held.clone());
            let rv = self.handover_rv(&r);
            for piece in r.ranges() {
                self.stats.handovers += 1;
                self.events
                    .push_back(MemberEvent::Claimed(*piece, rv.clone()));
                if let Some(rv) = &rv {
                    self.handover.push((*piece, rv.clone()));
                }
            }
        }
    }

    /// H10: the newest last-write of the members we saw holding part of `r`, else of all.
    fn handover_rv(&self, r: &ShardSelector) -> Option<String> {
        let others = self
            .members
            .values()
            .filter(|m| m.identity != self.config.identity);
        let held_it: Vec<&Member> = others
            .clone()
            .filter(|m| {
                m.history
                    .intersection(r)
                    .map(|i| !i.is_empty())
                    .unwrap_or(false)
            })
            .collect();
        let pool: Vec<&Member> = if held_it.is_empty() {
            others.collect()
        } else {
            held_it
        };
        pool.iter()
            .filter_map(|m| m.last_write.clone())
            .max_by(|a, b| match (a.parse::<u64>(), b.parse::<u64>()) {
                (Ok(x), Ok(y)) => x.cmp(&y),
                _ => a.len().cmp(&b.len()).then(a.cmp(b)),
            })
    }

    fn prune_handover(&mut self) {
        let held = self.held.clone();
        self.handover.retain(|(r, _)| {
            held.intersection(&ShardSelector::new(held.field(), [*r]))
                .is_ok_and(|i| !i.is_empty())
        });
    }

    /// Decisions after a LIST (H3, H5–H8): the round's plan.
    fn decide(&mut self, now: Instant) {
        self.plan.clear();
        let me = self.config.identity.clone();
        if !self.joined {
            // Join: create, or rejoin our Lease when nobody (no previous process) holds it.
            match self.members.get(&me) {
                None => self.plan.push_back(Planned::Own),
                Some(m) => {
                    let free = m.state(now) >= MemberState::Uncertain || m.flags().is_empty();
                    if free && self.leaving.is_none() {
                        self.plan.push_back(Planned::Own);
                    }
                }
            }
            self.target = self.nothing();
            self.incoming = self.nothing();
            return;
        }
        // The others, live (not Dead), and those in the target.
        let live: Vec<&Member> = self
            .members
            .values()
            .filter(|m| m.identity != me && m.state(now) != MemberState::Dead)
            .collect();
        let mut ring_members: Vec<&str> = live
            .iter()
            .filter(|m| m.state(now) == MemberState::Ready && !m.leaving)
            .map(|m| m.identity.as_str())
            .collect();
        if self.leaving.is_none() {
            ring_members.push(me.as_str());
        }
        let ring = target_ring(&ring_members, self.config.virtual_nodes);
        self.target = owned_by(&ring, self.config.field, &me);
        let takeover = live
            .iter()
            .find(|m| m.state(now) == MemberState::Uncertain)
            .map(|m| m.identity.clone());
        let flags_by: Vec<(String, ShardSelector, ShardSelector)> = live
            .iter()
            .map(|m| (m.identity.clone(), m.held.clone(), m.claiming.clone()))
            .collect();
        let others_flags = flags_by.iter().fold(self.nothing(), |acc, (_, h, c)| {
            acc.union(h).and_then(|a| a.union(c)).unwrap_or(acc)
        });
        self.incoming = if self.leaving.is_none() {
            self.target
                .difference(&others_flags)
                .unwrap_or_else(|_| self.nothing())
        } else {
            self.nothing()
        };

        // H7: cancel drains given back, start new ones.
        if self.leaving.is_none() {
            let target = self.target.clone();
            self.drains.retain(|d| {
                let d = ShardSelector::new(target.field(), [*d]);
                !d.difference(&target).is_ok_and(|x| x.is_empty())
            });
        }
        self.start_drains(now);

        // H8: confirm, wait for, or withdraw claims.
        let target = self.target.clone();
        let mut kept = Vec::new();
        for mut c in std::mem::take(&mut self.claims) {
            if c.stage == ClaimStage::Promoting {
                kept.push(c);
                continue;
            }
            if c.range.intersection(&target).is_ok_and(|i| i.is_empty()) || self.leaving.is_some() {
                continue; // no longer ours: withdraw
            }
            let conflict =
                |sel: &ShardSelector| c.range.intersection(sel).is_ok_and(|i| !i.is_empty());
            let mut blocked = false;
            let mut lose = false;
            for (id, h, cl) in &flags_by {
                if conflict(h) {
                    lose = true;
                } else if conflict(cl) {
                    if *id < me {
                        lose = true;
                    } else {
                        blocked = true;
                    }
                }
            }
            if lose {
                continue;
            }
            match c.stage {
                ClaimStage::Announced if !blocked => {
                    c.stage = ClaimStage::Promoting;
                    kept.push(c);
                }
                _ => kept.push(c),
            }
        }
        self.claims = kept;
        if self.leaving.is_none() {
            let mut taken = self.held.clone();
            for c in &self.claims {
                taken = taken.union(&c.range).unwrap_or(taken);
            }
            let free = target
                .difference(&taken)
                .and_then(|f| f.difference(&others_flags))
                .unwrap_or_else(|_| self.nothing());
            let room = self.config.max_in_flight.saturating_sub(self.claims.len());
            for r in free.ranges().iter().take(room) {
                self.claims.push(Claim {
                    range: self.sel([*r]),
                    stage: ClaimStage::Announcing,
                });
            }
        }
        self.plan.push_back(Planned::Own);
        if let Some(id) = takeover {
            self.plan.push_back(Planned::TakeOver(id));
        }
    }

    /// H7: new drains, up to the limit (everything when leaving).
    fn start_drains(&mut self, _now: Instant) {
        let away = if self.leaving.is_some() {
            self.held.clone()
        } else {
            self.held
                .difference(&self.target)
                .unwrap_or_else(|_| self.nothing())
        };
        let fresh = away
            .difference(&self.draining())
            .unwrap_or_else(|_| self.nothing());
        let limit = if self.leaving.is_some() {
            usize::MAX
        } else {
            self.config.max_in_flight
        };
        for r in fresh.ranges() {
            if self.drains.len() >= limit {
                break;
            }
            self.drains.push(*r);
            self.events.push_back(MemberEvent::DrainStarted(*r));
        }
    }

    /// The PUT (or CREATE) of our Lease with the current state.
    fn own_write(&mut self) -> (Op, MemberRequest) {
        let me = self.config.identity.clone();
        let release =
            self.joined && self.leaving.is_some() && self.held.is_empty() && self.claims.is_empty();
        let mut lease = self.own.clone().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.lease_name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: None,
        });
        let create = self.own.is_none();
        let labels = lease.metadata.labels.get_or_insert_with(Default::default);
        labels.insert(RING_LABEL.to_string(), self.config.ring.clone());
        let mut held = self.held.clone();
        let mut claiming = self.nothing();
        for c in &self.claims {
            if c.stage == ClaimStage::Promoting {
                held = held.union(&c.range).unwrap_or(held);
            } else {
                claiming = claiming.union(&c.range).unwrap_or(claiming);
            }
        }
        let a = lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        a.insert(HELD_ANNOTATION.to_string(), format_ranges(&held));
        a.insert(CLAIMING_ANNOTATION.to_string(), format_ranges(&claiming));
        a.remove(TAKEN_OVER_BY_ANNOTATION);
        if let Some(rv) = &self.last_write {
            a.insert(LAST_WRITE_ANNOTATION.to_string(), rv.clone());
        }
        if self.leaving.is_some() {
            a.insert(LEAVING_ANNOTATION.to_string(), "true".to_string());
        } else {
            a.remove(LEAVING_ANNOTATION);
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let rejoin = spec.holder_identity.as_deref() != Some(me.as_str());
        if rejoin {
            spec.acquire_time = None;
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        if release {
            spec.holder_identity = Some(String::new());
            spec.lease_duration_seconds = Some(RELEASED_LEASE_DURATION_SECONDS);
        } else {
            spec.holder_identity = Some(me);
            spec.lease_duration_seconds = Some(self.config.lease_duration_seconds());
        }
        if create {
            (Op::Create, MemberRequest::Create(lease))
        } else if release {
            (Op::Release, MemberRequest::Update(lease))
        } else {
            (Op::Own, MemberRequest::Update(lease))
        }
    }

    /// The PUT declaring `id` Dead, on the resourceVersion we read.
    fn takeover_write(&self, id: &str) -> Option<Lease> {
        let m = self.members.get(id)?;
        let mut lease = m.lease.clone();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(String::new());
        lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                TAKEN_OVER_BY_ANNOTATION.to_string(),
                self.config.identity.clone(),
            );
        Some(lease)
    }
}

impl fmt::Display for MemberState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemberState::Ready => "Ready",
            MemberState::Expired => "Expired",
            MemberState::Uncertain => "Uncertain",
            MemberState::Dead => "Dead",
        })
    }
}

fn is_not_found(e: &LeaseError) -> bool {
    matches!(e, LeaseError::NotFound(_))
}
