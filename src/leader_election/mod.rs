//! Leader election over a `coordination.k8s.io/v1` Lease, as a pure state machine (client-go's
//! `tools/leaderelection` with its `LeaseLock`).
//!
//! Several replicas of a controller run [`LeaderElectionMachine`]s against one Lease; at most
//! one of them *leads* at any instant. The machine makes every decision and performs none of
//! the I/O, in the shape of quinn-proto (and of [`crate::reflector`]):
//!
//! - Inputs are `handle_*` calls, each with `now`: the answer to a GET
//!   ([`handle_get`](LeaderElectionMachine::handle_get)), the answer to a CREATE or a PUT
//!   ([`handle_write_result`](LeaderElectionMachine::handle_write_result)), a timer
//!   ([`handle_timeout`](LeaderElectionMachine::handle_timeout)), shutdown
//!   ([`handle_cancel`](LeaderElectionMachine::handle_cancel)).
//! - Outputs are `poll_*` calls: [`poll_request`](LeaderElectionMachine::poll_request) (the
//!   next GET / CREATE / PUT, only when it is due), [`poll_timeout`](LeaderElectionMachine::poll_timeout)
//!   (when to call `handle_timeout`: the next retry, the deadline of the request in flight, the
//!   renew deadline) and [`poll_event`](LeaderElectionMachine::poll_event) (new leader, started
//!   and stopped leading, failed attempts).
//! - The retry jitter comes from a generator seeded by the caller, so a test replays exactly.
//!
//! The driver loops: report every `poll_event`; send the `poll_request` if there is one, and
//! wait for its answer *at most until `poll_timeout`* (then drop it and call `handle_timeout`:
//! a hung request never holds the machine past a deadline); otherwise sleep until
//! `poll_timeout`. Writes carry no wall-clock time: the driver stamps `renewTime` (and
//! `acquireTime` when asked) with [`LeaseWrite::into_lease`].
//!
//! # The rules
//!
//! - **Config** ([`LeaderElectionConfig::validate`], as client-go's `NewLeaderElector`):
//!   `lease_duration > renew_deadline > 1.2 × retry_period` ([`JITTER_FACTOR`]), all non-zero,
//!   and a non-empty identity, lease name and namespace. Defaults 15 s / 10 s / 2 s.
//! - **Acquire**: every `retry_period` jittered by up to `1.2 ×` (client-go's
//!   `wait.JitterUntil(…, RetryPeriod, JitterFactor, sliding)`, so a fleet of candidates does
//!   not retry in lockstep), try to acquire: GET the Lease; CREATE it when absent; when it is
//!   held by someone else whose lease has not expired, wait; otherwise PUT it with us as holder
//!   and the `resourceVersion` we read (optimistic concurrency: a 409 means another candidate
//!   won the race, counted, not an error). The first attempt goes out at once.
//! - **Expiry is measured on our own clock**: a lease expires `leaseDurationSeconds` (of the
//!   record) after the moment *we* first observed the record as it is now (client-go's
//!   `observedTime`). The record's `renewTime` is written for humans and never read, so clock
//!   skew between replicas cannot make a live lease look expired.
//! - **What is written** (client-go's `LeaseLock`): `holderIdentity`, `leaseDurationSeconds`
//!   (the configured duration rounded *up* to whole seconds), `acquireTime` (kept while the same
//!   holder renews), `renewTime` (now, MicroTime) and `leaseTransitions` (incremented whenever
//!   the holder changes).
//! - **Renew**: while leading, renew every `retry_period` (a PUT on the `resourceVersion` we
//!   last wrote: client-go's optimistic fast path; on any failure the attempt falls back to GET
//!   then PUT), retrying every `retry_period` after a failure.
//! - **Step down before anyone else can take over**: a leader whose last *successful* renew
//!   was *sent* `renew_deadline` ago stops leading (`StoppedLeading`), whatever is in flight.
//!   The server applied that renew after we sent it, so every other candidate observed it after
//!   that and waits at least `lease_duration > renew_deadline` from then: never two leaders
//!   (given clocks that run at the same rate). [`is_leader`](LeaderElectionMachine::is_leader)
//!   checks the deadline itself, so a driver that is late to call `handle_timeout` (a paused
//!   process) is still not a leader past it. A renew that finds another holder with a valid
//!   lease also steps down at once.
//! - **Callbacks' events**: [`ElectionEvent::NewLeader`] whenever the observed holder changes
//!   (including to ourselves, before `StartedLeading`), [`ElectionEvent::StartedLeading`],
//!   [`ElectionEvent::StoppedLeading`] with its [`StopReason`].
//! - **Release** on cancel when `release_on_cancel`: after `StoppedLeading`, GET the Lease and,
//!   if we still hold it, PUT it with an empty `holderIdentity`, `leaseDurationSeconds: 1` and
//!   the transitions kept (client-go's `release`), so another candidate takes over on its next
//!   retry instead of waiting for the lease to expire.
//!
//! What the guarantee assumes: clocks that run at the same rate (not synchronised ones), and
//! nobody but the candidates writing the Lease. A Lease deleted or overwritten by hand can be
//! taken by a follower while the leader still leads until its next renew finds out (at most
//! `retry_period` later, then `LostLease`). A process paused past its renew deadline learns it
//! late (its `StoppedLeading` comes when it resumes), but its `is_leader` is false from the
//! deadline on; code guarded by the lease should check it before acting.
//!
//! # Differences from client-go
//!
//! - The renew deadline counts from when the last successful renew was *sent*; client-go's
//!   counts from the start of the current renew loop, which begins `retry_period` after the last
//!   success. Ours steps down sooner and keeps the margin `lease_duration − renew_deadline`
//!   whole.
//! - After stepping down (renew deadline, or another holder) the machine keeps competing
//!   (acquire loop again); client-go's `Run` returns and callers loop or exit. Only
//!   [`handle_cancel`](LeaderElectionMachine::handle_cancel) ends it.
//! - `StoppedLeading` is reported only by a machine that led; client-go's `Run` calls
//!   `OnStoppedLeading` on exit even if it never led. An empty holder (a released lease) is not
//!   reported as a new leader.
//! - `leaseDurationSeconds` is rounded up (client-go truncates: a 1.5 s duration would be
//!   written as 1 s, shorter than a 1.2 s renew deadline). A record without
//!   `leaseDurationSeconds` (or with 0) is taken to last our configured `lease_duration`;
//!   client-go treats it as already expired.
//! - Release first checks, with a fresh GET, that we still hold the lease.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use kinformer::leader_election::*;
//!
//! let config = LeaderElectionConfig::new("default", "my-controller", "replica-a");
//! let mut m = LeaderElectionMachine::new(config, 7).unwrap();
//! let t0 = Instant::now();
//! // The first attempt goes out at once: GET the Lease.
//! assert!(matches!(m.poll_request(t0), Some(LeaseRequest::Get)));
//! // It does not exist: create it, holding it ourselves.
//! m.handle_get(t0, Ok(None));
//! let Some(LeaseRequest::Create(write)) = m.poll_request(t0) else { panic!() };
//! assert_eq!(write.holder_identity, "replica-a");
//! // The server answers with the Lease as stored (here: as sent, plus a resourceVersion).
//! let now = k8s_openapi::jiff::Timestamp::UNIX_EPOCH.into();
//! let mut stored = write.into_lease(now);
//! stored.metadata.resource_version = Some("1".into());
//! m.handle_write_result(t0, Ok(stored));
//! assert_eq!(m.poll_event(), Some(ElectionEvent::NewLeader("replica-a".into())));
//! assert_eq!(m.poll_event(), Some(ElectionEvent::StartedLeading));
//! assert!(m.is_leader(t0));
//! // With no successful renew for renew_deadline (10 s), it steps down.
//! let t1 = t0 + Duration::from_secs(10);
//! m.handle_timeout(t1);
//! assert!(!m.is_leader(t1));
//! ```

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
};
use rand::{Rng, SeedableRng, rngs::StdRng};

#[cfg(test)]
mod tests;

/// How much the acquire loop jitters `retry_period`: each wait is
/// `retry_period × (1 + JITTER_FACTOR × r)` with `r` uniform in `[0, 1)` (client-go's
/// `JitterFactor`). The renew deadline must exceed `JITTER_FACTOR × retry_period` so a leader
/// gets more than one renew attempt before it.
pub const JITTER_FACTOR: f64 = 1.2;

/// Default lease duration (client-go's core clients: 15 s).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default renew deadline (10 s).
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Default retry period (2 s).
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// `leaseDurationSeconds` of a released Lease (client-go writes 1).
pub const RELEASED_LEASE_DURATION_SECONDS: i32 = 1;

/// Leader election options. Build with [`LeaderElectionConfig::new`] and check with
/// [`validate`](LeaderElectionConfig::validate) (the machine's constructor does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// Namespace of the Lease.
    pub lease_namespace: String,
    /// Name of the Lease (every replica of one controller uses the same).
    pub lease_name: String,
    /// This candidate's identity, unique among the replicas (client-go uses the hostname plus
    /// a UUID). Written as `holderIdentity`.
    pub identity: String,
    /// How long other candidates wait, from when they observed the last change of the record,
    /// before they may take the lease over. Short enough for a quick hand-over after a crash,
    /// long enough for the clocks' rate differences. Default 15 s.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it steps down; shorter than
    /// `lease_duration` so it stops before anyone else may start. Default 10 s.
    pub renew_deadline: Duration,
    /// Time between attempts (jittered while not leading). Default 2 s.
    pub retry_period: Duration,
    /// Release the lease on cancel (empty `holderIdentity`), so another candidate takes over
    /// on its next retry. Only safe when everything the leader guards has stopped before
    /// cancelling. Default false.
    pub release_on_cancel: bool,
    /// A name for logs (client-go's `Name`); defaults to the lease name.
    pub name: String,
}

impl LeaderElectionConfig {
    /// A config for the Lease `namespace/name` with this identity and client-go's defaults.
    pub fn new(
        lease_namespace: impl Into<String>,
        lease_name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        let lease_name = lease_name.into();
        LeaderElectionConfig {
            lease_namespace: lease_namespace.into(),
            name: lease_name.clone(),
            lease_name,
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
            release_on_cancel: false,
        }
    }

    /// Checks the rules of client-go's `NewLeaderElector`, in its order.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::LeaseDurationNotAboveRenewDeadline {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
            });
        }
        let jittered = self.retry_period.mul_f64(JITTER_FACTOR);
        if self.renew_deadline <= jittered {
            return Err(ConfigError::RenewDeadlineNotAboveJitteredRetryPeriod {
                renew_deadline: self.renew_deadline,
                jittered_retry_period: jittered,
            });
        }
        if self.lease_duration.is_zero() {
            return Err(ConfigError::LeaseDurationZero);
        }
        if self.renew_deadline.is_zero() {
            return Err(ConfigError::RenewDeadlineZero);
        }
        if self.retry_period.is_zero() {
            return Err(ConfigError::RetryPeriodZero);
        }
        if self.identity.is_empty() {
            return Err(ConfigError::EmptyIdentity);
        }
        if self.lease_name.is_empty() {
            return Err(ConfigError::EmptyLeaseName);
        }
        if self.lease_namespace.is_empty() {
            return Err(ConfigError::EmptyLeaseNamespace);
        }
        Ok(())
    }

    /// `leaseDurationSeconds` as written: the duration rounded up to whole seconds (at least 1).
    pub fn lease_duration_seconds(&self) -> i32 {
        let nanos = self.lease_duration.as_nanos();
        let secs = nanos.div_ceil(1_000_000_000).max(1);
        i32::try_from(secs).unwrap_or(i32::MAX)
    }
}

/// A [`LeaderElectionConfig`] that breaks one of client-go's rules.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `lease_duration` must be greater than `renew_deadline`.
    #[error(
        "leaseDuration must be greater than renewDeadline ({lease_duration:?} <= {renew_deadline:?})"
    )]
    LeaseDurationNotAboveRenewDeadline {
        /// The configured lease duration.
        lease_duration: Duration,
        /// The configured renew deadline.
        renew_deadline: Duration,
    },
    /// `renew_deadline` must be greater than `retry_period × 1.2`.
    #[error(
        "renewDeadline must be greater than retryPeriod*JitterFactor ({renew_deadline:?} <= {jittered_retry_period:?})"
    )]
    RenewDeadlineNotAboveJitteredRetryPeriod {
        /// The configured renew deadline.
        renew_deadline: Duration,
        /// `retry_period × JITTER_FACTOR`.
        jittered_retry_period: Duration,
    },
    /// `lease_duration` must be greater than zero.
    #[error("leaseDuration must be greater than zero")]
    LeaseDurationZero,
    /// `renew_deadline` must be greater than zero.
    #[error("renewDeadline must be greater than zero")]
    RenewDeadlineZero,
    /// `retry_period` must be greater than zero.
    #[error("retryPeriod must be greater than zero")]
    RetryPeriodZero,
    /// The identity must not be empty (an empty holder means "released").
    #[error("Lock identity is empty")]
    EmptyIdentity,
    /// The lease name must not be empty.
    #[error("lease name is empty")]
    EmptyLeaseName,
    /// The lease namespace must not be empty.
    #[error("lease namespace is empty")]
    EmptyLeaseNamespace,
}

/// A failed Lease request, as the driver classifies the server's answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// 409 Conflict on a PUT: the Lease changed since we read it (another candidate won the
    /// race). Not an error of ours.
    #[error("conflict: {0}")]
    Conflict(String),
    /// 409 AlreadyExists on a CREATE: another candidate created it first.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// 404 on a PUT: the Lease was deleted since we read it.
    #[error("not found: {0}")]
    NotFound(String),
    /// Any other answer of the API server.
    #[error("API error {code}: {message}")]
    Api {
        /// The HTTP status code.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// The request did not get an answer (connection, TLS, decoding).
    #[error("transport: {0}")]
    Transport(String),
    /// The request was still unanswered at its deadline and was abandoned.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}

impl LeaseError {
    /// A lost race (409), which is how optimistic concurrency works, not a failure to report.
    pub fn is_lost_race(&self) -> bool {
        matches!(self, LeaseError::Conflict(_) | LeaseError::AlreadyExists(_))
    }
}

/// The Lease as it will be written; the driver stamps the times with [`into_lease`](Self::into_lease).
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseWrite {
    /// The object to write: metadata (name, namespace, and for a PUT the `resourceVersion` we
    /// read, plus whatever labels or annotations it had) and any spec fields we do not own.
    pub base: Lease,
    /// `holderIdentity` (empty: released).
    pub holder_identity: String,
    /// `leaseDurationSeconds`.
    pub lease_duration_seconds: i32,
    /// `leaseTransitions`.
    pub lease_transitions: i32,
    /// `acquireTime` to keep (the same holder renewing); `None`: now.
    pub acquire_time: Option<MicroTime>,
}

impl LeaseWrite {
    /// The `resourceVersion` the PUT is conditional on (`None` for a CREATE).
    pub fn resource_version(&self) -> Option<&str> {
        self.base.metadata.resource_version.as_deref()
    }

    /// The Lease to send, with `renewTime` (and `acquireTime` unless kept) set to `now`.
    pub fn into_lease(self, now: MicroTime) -> Lease {
        let mut lease = self.base;
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.holder_identity);
        spec.lease_duration_seconds = Some(self.lease_duration_seconds);
        spec.lease_transitions = Some(self.lease_transitions);
        spec.acquire_time = Some(self.acquire_time.unwrap_or_else(|| now.clone()));
        spec.renew_time = Some(now);
        lease
    }
}

/// The next request to send.
#[derive(Clone, Debug, PartialEq)]
pub enum LeaseRequest {
    /// GET the Lease (404 is answered as `Ok(None)` to [`LeaderElectionMachine::handle_get`]).
    Get,
    /// CREATE the Lease.
    Create(LeaseWrite),
    /// PUT the Lease, conditional on its `resourceVersion`.
    Update(LeaseWrite),
}

/// Why a leader stopped leading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// No successful renew within `renew_deadline`.
    RenewDeadline,
    /// A renew found the Lease held by another candidate whose lease is valid.
    LostLease,
    /// [`LeaderElectionMachine::handle_cancel`].
    Cancelled,
}

/// What the machine reports (the driver turns these into callbacks and logs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ElectionEvent {
    /// The observed holder changed to this identity (ourselves included; client-go's
    /// `OnNewLeader`).
    NewLeader(String),
    /// We lead from now on (client-go's `OnStartedLeading`).
    StartedLeading,
    /// We no longer lead (client-go's `OnStoppedLeading`).
    StoppedLeading(StopReason),
    /// An attempt to acquire or renew failed (a lost race included, see
    /// [`LeaseError::is_lost_race`]); the machine retries after `retry_period`.
    AttemptFailed(LeaseError),
    /// The Lease was released on cancel.
    Released,
}

/// Counters and last outcomes (health).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElectionStats {
    /// Requests sent (GET, CREATE, PUT).
    pub requests: u64,
    /// Times this candidate became leader.
    pub acquisitions: u64,
    /// Successful renews while leading.
    pub renewals: u64,
    /// Lost races (409 on CREATE or PUT).
    pub conflicts: u64,
    /// Failed requests other than lost races (timeouts included).
    pub failures: u64,
    /// The last failure other than a lost race.
    pub last_error: Option<LeaseError>,
    /// When the last successful acquire or renew was sent.
    pub last_renew: Option<Instant>,
}

/// Where the machine is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionPhase {
    /// Competing for the lease (or waiting for the holder's to expire).
    Following,
    /// Leading.
    Leading,
    /// Cancelled: releasing the lease.
    Releasing,
    /// Cancelled and done.
    Stopped,
}

/// What is in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// The leader's optimistic PUT on the resourceVersion it last wrote.
    FastRenew,
    Get,
    Create,
    Update,
    ReleaseGet,
    ReleaseUpdate,
}

impl Op {
    fn is_release(self) -> bool {
        matches!(self, Op::ReleaseGet | Op::ReleaseUpdate)
    }
}

/// What goes out when the wait is over.
#[derive(Debug)]
enum Next {
    /// A new attempt: the fast renew or a GET, decided when it goes out.
    Attempt,
    /// The second step of an attempt, due at once.
    Send(Op, Box<LeaseRequest>),
}

#[derive(Debug)]
enum State {
    /// Nothing in flight; `next` goes out at `not_before` (`None`: now).
    Waiting {
        next: Next,
        not_before: Option<Instant>,
    },
    /// A request is in flight; abandoned at `deadline`.
    InFlight {
        op: Op,
        sent: Instant,
        deadline: Instant,
    },
    Stopped,
}

/// The Lease as we last saw it and when its record last changed, on our clock.
#[derive(Debug)]
struct Observed {
    lease: Lease,
    /// When we first saw the record (spec) as it is now: client-go's `observedTime`.
    at: Instant,
}

/// The leader election protocol machine. See the [module docs](self).
#[derive(Debug)]
pub struct LeaderElectionMachine {
    config: LeaderElectionConfig,
    lease_duration_seconds: i32,
    rng: StdRng,
    state: State,
    observed: Option<Observed>,
    /// The holder last reported as `NewLeader` ("" before any).
    reported_leader: String,
    /// While leading: when the last successful acquire or renew was sent. We lead until
    /// `renewed_at + renew_deadline` at the latest.
    renewed_at: Option<Instant>,
    /// Deadline of the release requests after a cancel.
    release_deadline: Option<Instant>,
    events: VecDeque<ElectionEvent>,
    stats: ElectionStats,
}

impl LeaderElectionMachine {
    /// A candidate that has not tried yet; `seed` seeds the retry jitter.
    pub fn new(config: LeaderElectionConfig, seed: u64) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(LeaderElectionMachine {
            lease_duration_seconds: config.lease_duration_seconds(),
            config,
            rng: StdRng::seed_from_u64(seed),
            state: State::Waiting {
                next: Next::Attempt,
                not_before: None,
            },
            observed: None,
            reported_leader: String::new(),
            renewed_at: None,
            release_deadline: None,
            events: VecDeque::new(),
            stats: ElectionStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    /// Whether we lead at `now`: we acquired or renewed and `renew_deadline` has not passed
    /// since that request was sent (checked here too, so a late driver cannot overstay).
    pub fn is_leader(&self, now: Instant) -> bool {
        self.leading_until().is_some_and(|until| now < until)
    }

    /// While leading: the instant we stop leading unless a renew succeeds before.
    pub fn leading_until(&self) -> Option<Instant> {
        self.renewed_at.map(|t| t + self.config.renew_deadline)
    }

    /// The phase.
    pub fn phase(&self) -> ElectionPhase {
        match &self.state {
            State::Stopped => ElectionPhase::Stopped,
            _ if self.release_deadline.is_some() => ElectionPhase::Releasing,
            _ if self.renewed_at.is_some() => ElectionPhase::Leading,
            _ => ElectionPhase::Following,
        }
    }

    /// Whether the machine is done (cancelled, and released if asked).
    pub fn is_stopped(&self) -> bool {
        matches!(self.state, State::Stopped)
    }

    /// Whether a request is in flight (its answer is expected). When this turns false after
    /// `handle_timeout` or `handle_cancel`, the driver drops the request.
    pub fn awaiting_response(&self) -> bool {
        matches!(self.state, State::InFlight { .. })
    }

    /// The holder of the Lease as last observed (`None`: none, or not observed yet).
    pub fn holder(&self) -> Option<&str> {
        self.observed
            .as_ref()
            .and_then(|o| holder_of(&o.lease))
            .filter(|h| !h.is_empty())
    }

    /// `leaseTransitions` of the Lease as last observed.
    pub fn lease_transitions(&self) -> Option<i32> {
        self.observed
            .as_ref()
            .and_then(|o| o.lease.spec.as_ref())
            .and_then(|s| s.lease_transitions)
    }

    /// The Lease as last observed (read or written).
    pub fn observed_lease(&self) -> Option<&Lease> {
        self.observed.as_ref().map(|o| &o.lease)
    }

    /// Counters and last outcomes.
    pub fn stats(&self) -> &ElectionStats {
        &self.stats
    }

    /// The next request, if one is due at `now`.
    pub fn poll_request(&mut self, now: Instant) -> Option<LeaseRequest> {
        self.advance(now);
        let State::Waiting { not_before, .. } = &self.state else {
            return None;
        };
        if not_before.is_some_and(|t| now < t) {
            return None;
        }
        let State::Waiting { next, .. } = std::mem::replace(&mut self.state, State::Stopped) else {
            return None; // checked just above
        };
        let (op, request) = match next {
            Next::Send(op, request) => (op, *request),
            Next::Attempt => match self.fast_renew() {
                Some(write) => (Op::FastRenew, LeaseRequest::Update(write)),
                None => (Op::Get, LeaseRequest::Get),
            },
        };
        let mut deadline = match self.release_deadline {
            Some(d) if op.is_release() => d,
            _ => now + self.config.renew_deadline,
        };
        if let Some(until) = self.leading_until() {
            deadline = deadline.min(until);
        }
        self.stats.requests += 1;
        self.state = State::InFlight {
            op,
            sent: now,
            deadline,
        };
        Some(request)
    }

    /// When to call [`handle_timeout`](Self::handle_timeout) (or [`poll_request`](Self::poll_request)):
    /// the next attempt, the deadline of the request in flight, or the renew deadline. `None`
    /// when stopped, or when a request is due at once (call `poll_request` first).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let own = match &self.state {
            // `None`: due at once; the driver's next `poll_request` sends it.
            State::Waiting { not_before, .. } => *not_before,
            State::InFlight { deadline, .. } => Some(*deadline),
            State::Stopped => return None,
        };
        match (own, self.leading_until()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Time passed: step down at the renew deadline, abandon a request past its deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
    }

    /// The answer to [`LeaseRequest::Get`]: the Lease, `Ok(None)` if it does not exist (404),
    /// or the error. Ignored unless a GET is in flight.
    pub fn handle_get(&mut self, now: Instant, result: Result<Option<Lease>, LeaseError>) {
        self.advance(now);
        let State::InFlight { op, .. } = self.state else {
            return;
        };
        match (op, result) {
            (Op::Get, Err(e)) => self.attempt_failed(now, e),
            (Op::Get, Ok(None)) => {
                let write = LeaseWrite {
                    base: Lease {
                        metadata: ObjectMeta {
                            name: Some(self.config.lease_name.clone()),
                            namespace: Some(self.config.lease_namespace.clone()),
                            ..ObjectMeta::default()
                        },
                        spec: None,
                    },
                    holder_identity: self.config.identity.clone(),
                    lease_duration_seconds: self.lease_duration_seconds,
                    lease_transitions: 0,
                    acquire_time: None,
                };
                self.send_now(Op::Create, LeaseRequest::Create(write));
            }
            (Op::Get, Ok(Some(lease))) => {
                self.observe(now, lease);
                self.report_transition();
                let held_by_other = match self.holder() {
                    Some(h) => h != self.config.identity && self.lease_valid(now),
                    None => false,
                };
                if held_by_other {
                    if self.renewed_at.is_some() {
                        self.step_down(StopReason::LostLease);
                    }
                    self.state = State::Waiting {
                        next: Next::Attempt,
                        not_before: Some(now + self.retry_delay()),
                    };
                    return;
                }
                let write = self.take_over_write();
                self.send_now(Op::Update, LeaseRequest::Update(write));
            }
            (Op::ReleaseGet, Ok(Some(lease))) => {
                self.observe(now, lease);
                if self.holder() == Some(self.config.identity.as_str()) {
                    let write = self.release_write();
                    self.send_now(Op::ReleaseUpdate, LeaseRequest::Update(write));
                } else {
                    self.stop();
                }
            }
            (Op::ReleaseGet, Ok(None)) => self.stop(),
            (Op::ReleaseGet, Err(e)) => {
                self.record_error(e.clone());
                self.events.push_back(ElectionEvent::AttemptFailed(e));
                self.stop();
            }
            // A write is in flight: this answer is stray.
            _ => {}
        }
    }

    /// The answer to a [`LeaseRequest::Create`] or [`LeaseRequest::Update`]: the Lease as
    /// stored, or the error. Ignored unless a write is in flight.
    pub fn handle_write_result(&mut self, now: Instant, result: Result<Lease, LeaseError>) {
        self.advance(now);
        let State::InFlight { op, sent, .. } = self.state else {
            return;
        };
        match (op, result) {
            (Op::FastRenew | Op::Create | Op::Update, Ok(lease)) => {
                self.observe_written(now, lease);
                self.report_transition();
                if self.renewed_at.is_some() {
                    self.stats.renewals += 1;
                } else {
                    self.stats.acquisitions += 1;
                    self.events.push_back(ElectionEvent::StartedLeading);
                }
                self.renewed_at = Some(sent);
                self.stats.last_renew = Some(sent);
                self.state = State::Waiting {
                    next: Next::Attempt,
                    not_before: Some(now + self.config.retry_period),
                };
            }
            // The optimistic renew failed (the Lease changed, or the server failed): the
            // same attempt reads the Lease and decides (client-go's slow path).
            (Op::FastRenew, Err(e)) => {
                if !e.is_lost_race() {
                    self.record_error(e);
                }
                self.send_now(Op::Get, LeaseRequest::Get);
            }
            (Op::Create | Op::Update, Err(e)) => self.attempt_failed(now, e),
            (Op::ReleaseUpdate, Ok(lease)) => {
                self.observe_written(now, lease);
                self.events.push_back(ElectionEvent::Released);
                self.stop();
            }
            (Op::ReleaseUpdate, Err(e)) => {
                self.record_error(e.clone());
                self.events.push_back(ElectionEvent::AttemptFailed(e));
                self.stop();
            }
            // A GET is in flight: this answer is stray.
            _ => {}
        }
    }

    /// Shutdown: stop leading now (`StoppedLeading(Cancelled)`), abandon what is in flight,
    /// and release the lease if `release_on_cancel` and we hold it; then stop.
    pub fn handle_cancel(&mut self, now: Instant) {
        self.handle_cancel_with(now, self.config.release_on_cancel);
    }

    /// [`handle_cancel`](Self::handle_cancel), releasing the lease or not whatever
    /// `release_on_cancel` says.
    pub fn handle_cancel_with(&mut self, now: Instant, release: bool) {
        if self.is_stopped() || self.release_deadline.is_some() {
            return;
        }
        self.advance(now);
        if self.renewed_at.is_some() {
            self.step_down(StopReason::Cancelled);
        }
        if release && self.holder() == Some(self.config.identity.as_str()) {
            self.release_deadline = Some(now + self.config.renew_deadline);
            self.state = State::Waiting {
                next: Next::Send(Op::ReleaseGet, Box::new(LeaseRequest::Get)),
                not_before: None,
            };
        } else {
            self.stop();
        }
    }

    /// The next event, in order.
    pub fn poll_event(&mut self) -> Option<ElectionEvent> {
        self.events.pop_front()
    }

    // --- internals ---

    /// Applies the deadlines that passed by `now`.
    fn advance(&mut self, now: Instant) {
        if self.leading_until().is_some_and(|until| now >= until) {
            self.step_down(StopReason::RenewDeadline);
        }
        if let State::InFlight {
            op, sent, deadline, ..
        } = self.state
            && now >= deadline
        {
            let e = LeaseError::TimedOut(deadline.saturating_duration_since(sent));
            if op.is_release() {
                self.record_error(e.clone());
                self.events.push_back(ElectionEvent::AttemptFailed(e));
                self.stop();
            } else {
                self.attempt_failed(now, e);
            }
        }
    }

    /// Stops leading. (A renew in flight has a deadline no later than the renew deadline, so
    /// `advance` abandons it too; the other callers replace the state.)
    fn step_down(&mut self, reason: StopReason) {
        if self.renewed_at.take().is_none() {
            return;
        }
        self.events.push_back(ElectionEvent::StoppedLeading(reason));
    }

    fn stop(&mut self) {
        self.state = State::Stopped;
        self.release_deadline = None;
    }

    fn send_now(&mut self, op: Op, request: LeaseRequest) {
        self.state = State::Waiting {
            next: Next::Send(op, Box::new(request)),
            not_before: None,
        };
    }

    fn record_error(&mut self, e: LeaseError) {
        if e.is_lost_race() {
            self.stats.conflicts += 1;
        } else {
            self.stats.failures += 1;
            self.stats.last_error = Some(e);
        }
    }

    /// The attempt failed: report it and retry after `retry_period` (jittered unless leading).
    fn attempt_failed(&mut self, now: Instant, e: LeaseError) {
        self.record_error(e.clone());
        self.events.push_back(ElectionEvent::AttemptFailed(e));
        self.state = State::Waiting {
            next: Next::Attempt,
            not_before: Some(now + self.retry_delay()),
        };
    }

    /// `retry_period` while leading (client-go's renew loop), jittered by up to
    /// `JITTER_FACTOR` otherwise (its acquire loop).
    fn retry_delay(&mut self) -> Duration {
        if self.renewed_at.is_some() {
            return self.config.retry_period;
        }
        let r: f64 = self.rng.random();
        self.config.retry_period + self.config.retry_period.mul_f64(JITTER_FACTOR * r)
    }

    /// A Lease read from the server: its record's change time is now if the record differs
    /// from what we saw; the object (resourceVersion) is refreshed either way.
    fn observe(&mut self, now: Instant, lease: Lease) {
        match &mut self.observed {
            Some(o) if o.lease.spec == lease.spec => o.lease = lease,
            _ => self.observed = Some(Observed { lease, at: now }),
        }
    }

    /// A Lease we wrote: always a new record.
    fn observe_written(&mut self, now: Instant, lease: Lease) {
        self.observed = Some(Observed { lease, at: now });
    }

    fn report_transition(&mut self) {
        let holder = self.holder().unwrap_or_default();
        if holder == self.reported_leader {
            return;
        }
        let holder = holder.to_string();
        let report = !holder.is_empty();
        self.reported_leader = holder;
        if report {
            self.events
                .push_back(ElectionEvent::NewLeader(self.reported_leader.clone()));
        }
    }

    /// The observed lease has not expired: less than its `leaseDurationSeconds` (ours if
    /// unset) has passed on our clock since we saw the record change.
    fn lease_valid(&self, now: Instant) -> bool {
        let Some(o) = &self.observed else {
            return false;
        };
        let duration = o
            .lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .filter(|&s| s > 0)
            .map(|s| Duration::from_secs(s.unsigned_abs().into()))
            .unwrap_or(self.config.lease_duration);
        now < o.at + duration
    }

    /// The leader's optimistic renew, when it holds a valid lease it wrote itself.
    fn fast_renew(&self) -> Option<LeaseWrite> {
        self.renewed_at?;
        let o = self.observed.as_ref()?;
        if holder_of(&o.lease) != Some(self.config.identity.as_str()) {
            return None;
        }
        o.lease.metadata.resource_version.as_ref()?;
        let spec = o.lease.spec.as_ref();
        Some(LeaseWrite {
            base: o.lease.clone(),
            holder_identity: self.config.identity.clone(),
            lease_duration_seconds: self.lease_duration_seconds,
            lease_transitions: spec.and_then(|s| s.lease_transitions).unwrap_or(0),
            acquire_time: spec.and_then(|s| s.acquire_time.clone()),
        })
    }

    /// The PUT of a take-over (or of a renew on the slow path) on the observed Lease.
    fn take_over_write(&self) -> LeaseWrite {
        let base = self
            .observed
            .as_ref()
            .map(|o| o.lease.clone())
            .unwrap_or_default();
        let spec = base.spec.clone().unwrap_or_default();
        let transitions = spec.lease_transitions.unwrap_or(0);
        let ours = spec.holder_identity.as_deref() == Some(self.config.identity.as_str());
        LeaseWrite {
            base,
            holder_identity: self.config.identity.clone(),
            lease_duration_seconds: self.lease_duration_seconds,
            lease_transitions: if ours {
                transitions
            } else {
                transitions.saturating_add(1)
            },
            acquire_time: if ours { spec.acquire_time } else { None },
        }
    }

    /// client-go's release: no holder, a 1 s lease, transitions kept, times now.
    fn release_write(&self) -> LeaseWrite {
        let base = self
            .observed
            .as_ref()
            .map(|o| o.lease.clone())
            .unwrap_or_default();
        let transitions = base
            .spec
            .as_ref()
            .and_then(|s| s.lease_transitions)
            .unwrap_or(0);
        LeaseWrite {
            base,
            holder_identity: String::new(),
            lease_duration_seconds: RELEASED_LEASE_DURATION_SECONDS,
            lease_transitions: transitions,
            acquire_time: None,
        }
    }
}

fn holder_of(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref()
}
