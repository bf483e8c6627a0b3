//! Deterministic tests of the leader election machine: each rule with a fake clock against an
//! in-memory Lease (the API server's optimistic concurrency included), and a `Pair`-like world
//! that runs several candidates together with request latency, lost answers, server failures,
//! paused and crashed processes, where a property test checks that there is never more than one
//! leader at any instant.

use std::time::{Duration, Instant};

use k8s_openapi::{api::coordination::v1::Lease, jiff::Timestamp};
use proptest::prelude::*;
use rand::{Rng, SeedableRng, rngs::StdRng};

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn config(identity: &str) -> LeaderElectionConfig {
    LeaderElectionConfig::new("default", "ctrl", identity)
}

fn machine(identity: &str) -> LeaderElectionMachine {
    LeaderElectionMachine::new(config(identity), 1).expect("valid config")
}

/// The wall clock a driver would stamp: a fixed epoch plus the fake clock's elapsed time.
fn wall(t0: Instant, now: Instant) -> MicroTime {
    let micros = 1_700_000_000_000_000 + now.saturating_duration_since(t0).as_micros() as i64;
    MicroTime(Timestamp::from_microsecond(micros).expect("in range"))
}

/// The API server's side of one Lease: GET, CREATE (409 AlreadyExists), PUT conditional on
/// the resourceVersion (409 Conflict, 404), a new resourceVersion per write.
#[derive(Default)]
struct Server {
    lease: Option<Lease>,
    rv: u64,
    /// Every successful write: (holder, leaseTransitions).
    writes: Vec<(String, i32)>,
}

impl Server {
    fn get(&self) -> Result<Option<Lease>, LeaseError> {
        Ok(self.lease.clone())
    }

    fn write(&mut self, request: LeaseRequest, stamp: MicroTime) -> Result<Lease, LeaseError> {
        let (create, w) = match request {
            LeaseRequest::Create(w) => (true, w),
            LeaseRequest::Update(w) => (false, w),
            LeaseRequest::Get => panic!("not a write"),
        };
        match (&self.lease, create) {
            (Some(_), true) => return Err(LeaseError::AlreadyExists("ctrl".into())),
            (None, false) => return Err(LeaseError::NotFound("ctrl".into())),
            (Some(cur), false)
                if cur.metadata.resource_version.as_deref() != w.resource_version() =>
            {
                return Err(LeaseError::Conflict("ctrl".into()));
            }
            _ => {}
        }
        let mut lease = w.into_lease(stamp);
        self.rv += 1;
        lease.metadata.resource_version = Some(self.rv.to_string());
        let spec = lease.spec.clone().unwrap_or_default();
        self.writes.push((
            spec.holder_identity.unwrap_or_default(),
            spec.lease_transitions.unwrap_or_default(),
        ));
        self.lease = Some(lease.clone());
        Ok(lease)
    }

    fn holder(&self) -> Option<String> {
        self.lease.as_ref()?.spec.as_ref()?.holder_identity.clone()
    }

    /// Another writer (a replica we do not drive) holds the lease; its renewTime is `renew`.
    fn held_by(&mut self, holder: &str, renew: MicroTime) {
        self.rv += 1;
        self.lease = Some(Lease {
            metadata: ObjectMeta {
                name: Some("ctrl".into()),
                namespace: Some("default".into()),
                resource_version: Some(self.rv.to_string()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                acquire_time: Some(renew.clone()),
                renew_time: Some(renew),
                lease_transitions: Some(3),
                ..LeaseSpec::default()
            }),
        });
    }
}

/// What a request did, for assertions.
#[derive(Clone, Debug, PartialEq)]
enum Sent {
    Get,
    Create,
    Update { holder: String },
}

/// Events with the time they were reported.
type Log = Vec<(Instant, ElectionEvent)>;

/// Drives one machine against `server` with instant answers from `from` up to `until`;
/// `fail_writes` makes every CREATE/PUT answer 500. Returns (time, request) and (time, event).
fn drive(
    m: &mut LeaderElectionMachine,
    server: &mut Server,
    t0: Instant,
    from: Instant,
    until: Instant,
    fail_writes: bool,
) -> (Vec<(Instant, Sent)>, Log) {
    let mut now = from;
    let mut stuck = 0;
    let mut sent = Vec::new();
    let mut events = Vec::new();
    loop {
        while let Some(e) = m.poll_event() {
            events.push((now, e));
        }
        if let Some(req) = m.poll_request(now) {
            match req {
                LeaseRequest::Get => {
                    sent.push((now, Sent::Get));
                    m.handle_get(now, server.get());
                }
                write => {
                    sent.push((
                        now,
                        match &write {
                            LeaseRequest::Create(_) => Sent::Create,
                            LeaseRequest::Update(w) => Sent::Update {
                                holder: w.holder_identity.clone(),
                            },
                            LeaseRequest::Get => unreachable!(),
                        },
                    ));
                    let result = if fail_writes {
                        Err(LeaseError::Api {
                            code: 500,
                            message: "injected".into(),
                        })
                    } else {
                        server.write(write, wall(t0, now))
                    };
                    m.handle_write_result(now, result);
                }
            }
            continue;
        }
        match m.poll_timeout() {
            Some(t) if t <= until => {
                stuck = if t <= now { stuck + 1 } else { 0 };
                assert!(
                    stuck < 1_000,
                    "the machine makes no progress at {:?}",
                    now - t0
                );
                now = now.max(t);
                m.handle_timeout(now);
            }
            _ => break,
        }
    }
    (sent, events)
}

fn starts(events: &[(Instant, ElectionEvent)]) -> Vec<Instant> {
    events
        .iter()
        .filter(|(_, e)| *e == ElectionEvent::StartedLeading)
        .map(|(t, _)| *t)
        .collect()
}

#[test]
fn config_is_validated_as_client_go_does() {
    assert_eq!(config("a").validate(), Ok(()));
    type Break = fn(&mut LeaderElectionConfig);
    let cases: Vec<(Break, &str)> = vec![
        (
            |c| c.renew_deadline = c.lease_duration,
            "leaseDuration must be greater than renewDeadline",
        ),
        (
            // 10 s = 1.2 × 8.333 s: not greater.
            |c| c.retry_period = Duration::from_nanos(8_333_333_334),
            "renewDeadline must be greater than retryPeriod*JitterFactor",
        ),
        (
            |c| {
                c.lease_duration = Duration::ZERO;
                c.renew_deadline = Duration::ZERO;
            },
            "leaseDuration must be greater than renewDeadline",
        ),
        (
            |c| c.retry_period = Duration::ZERO,
            "retryPeriod must be greater than zero",
        ),
        (|c| c.identity.clear(), "Lock identity is empty"),
        (|c| c.lease_name.clear(), "lease name is empty"),
        (|c| c.lease_namespace.clear(), "lease namespace is empty"),
    ];
    for (break_it, message) in cases {
        let mut c = config("a");
        break_it(&mut c);
        let err = c.validate().expect_err(message);
        assert!(err.to_string().contains(message), "{err} vs {message}");
        assert_eq!(LeaderElectionMachine::new(c, 1).err(), Some(err));
    }
    // The boundary: just above 1.2 × retry is valid.
    let mut c = config("a");
    c.retry_period = ms(8_333);
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn lease_duration_seconds_round_up() {
    let mut c = config("a");
    assert_eq!(c.lease_duration_seconds(), 15);
    c.lease_duration = ms(1_500);
    assert_eq!(c.lease_duration_seconds(), 2);
    c.lease_duration = ms(200);
    assert_eq!(c.lease_duration_seconds(), 1);
}

#[test]
fn creates_an_absent_lease_and_leads() {
    let t0 = Instant::now();
    let mut server = Server::default();
    let mut m = machine("a");
    let (sent, events) = drive(&mut m, &mut server, t0, t0, t0, false);
    assert_eq!(sent, vec![(t0, Sent::Get), (t0, Sent::Create)]);
    assert_eq!(
        events,
        vec![
            (t0, ElectionEvent::NewLeader("a".into())),
            (t0, ElectionEvent::StartedLeading)
        ]
    );
    assert!(m.is_leader(t0));
    assert_eq!(m.phase(), ElectionPhase::Leading);
    let spec = server
        .lease
        .as_ref()
        .and_then(|l| l.spec.clone())
        .unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_duration_seconds, Some(15));
    assert_eq!(spec.lease_transitions, Some(0));
    assert_eq!(spec.acquire_time, Some(wall(t0, t0)));
    assert_eq!(spec.renew_time, Some(wall(t0, t0)));
    assert_eq!(m.holder(), Some("a"));
    assert_eq!(m.stats().acquisitions, 1);
}

#[test]
fn leader_renews_every_retry_period_with_optimistic_puts() {
    let t0 = Instant::now();
    let mut server = Server::default();
    let mut m = machine("a");
    let (sent, events) = drive(&mut m, &mut server, t0, t0, t0 + secs(9), false);
    // GET + CREATE, then a PUT every 2 s without GETs, keeping acquireTime.
    let puts: Vec<_> = sent.iter().skip(2).collect();
    assert_eq!(puts.len(), 4, "{sent:?}");
    for (i, (t, s)) in puts.iter().enumerate() {
        assert_eq!(*t, t0 + secs(2 * (i as u64 + 1)));
        assert_eq!(*s, Sent::Update { holder: "a".into() });
    }
    assert_eq!(starts(&events), vec![t0]);
    let spec = server
        .lease
        .as_ref()
        .and_then(|l| l.spec.clone())
        .unwrap_or_default();
    assert_eq!(spec.acquire_time, Some(wall(t0, t0)));
    assert_eq!(spec.renew_time, Some(wall(t0, t0 + secs(8))));
    assert_eq!(spec.lease_transitions, Some(0));
    assert_eq!(m.stats().renewals, 4);
    assert!(m.is_leader(t0 + secs(9)));
}

#[test]
fn follower_waits_lease_duration_from_its_own_observation_not_renew_time() {
    let t0 = Instant::now();
    let mut server = Server::default();
    // The holder's renewTime is an hour before our clock's idea of now (clock skew): only the
    // moment we observed the record counts.
    server.held_by("other", hour_before(wall(t0, t0)));
    let mut m = machine("b");
    let (sent, events) = drive(&mut m, &mut server, t0, t0, t0 + secs(30), false);
    assert_eq!(events[0], (t0, ElectionEvent::NewLeader("other".into())));
    let first_put = sent
        .iter()
        .find(|(_, s)| matches!(s, Sent::Update { .. }))
        .map(|(t, _)| *t)
        .expect("took over");
    assert!(
        first_put >= t0 + secs(15),
        "took over at {:?}",
        first_put - t0
    );
    // At most one jittered retry period (2 s × 2.2) late.
    assert!(
        first_put < t0 + secs(15) + ms(4_400),
        "{:?}",
        first_put - t0
    );
    assert_eq!(starts(&events), vec![first_put]);
    assert_eq!(server.holder().as_deref(), Some("b"));
    // The holder changed: transitions + 1, a fresh acquireTime.
    let spec = server
        .lease
        .as_ref()
        .and_then(|l| l.spec.clone())
        .unwrap_or_default();
    assert_eq!(spec.lease_transitions, Some(4));
    assert_eq!(spec.acquire_time, Some(wall(t0, first_put)));
}

/// An hour earlier.
fn hour_before(t: MicroTime) -> MicroTime {
    MicroTime(Timestamp::from_microsecond(t.0.as_microsecond() - 3_600_000_000).expect("in range"))
}

#[test]
fn follower_restarts_its_wait_when_the_holder_renews() {
    let t0 = Instant::now();
    let mut server = Server::default();
    server.held_by("other", wall(t0, t0));
    let mut m = machine("b");
    let (_, events) = drive(&mut m, &mut server, t0, t0, t0 + secs(10), false);
    assert!(starts(&events).is_empty());
    // The holder renews at 10 s; we observe it on our next GET (within 4.4 s).
    server.held_by("other", wall(t0, t0 + secs(10)));
    let (sent, events) = drive(&mut m, &mut server, t0, t0 + secs(10), t0 + secs(40), false);
    let observed = sent
        .iter()
        .find(|(_, s)| *s == Sent::Get)
        .map(|(t, _)| *t)
        .expect("a GET");
    let start = starts(&events)[0];
    assert!(
        start >= observed + secs(15),
        "{:?} after observing",
        start - observed
    );
}

#[test]
fn leader_steps_down_at_its_renew_deadline_when_renews_fail() {
    let t0 = Instant::now();
    let mut server = Server::default();
    let mut m = machine("a");
    drive(&mut m, &mut server, t0, t0, t0 + secs(4), false);
    // The last successful renew was sent at 4 s.
    assert_eq!(m.leading_until(), Some(t0 + secs(14)));
    let (sent, events) = drive(&mut m, &mut server, t0, t0 + secs(4), t0 + secs(30), true);
    let stopped: Vec<_> = events
        .iter()
        .filter(|(_, e)| matches!(e, ElectionEvent::StoppedLeading(_)))
        .collect();
    assert_eq!(
        stopped,
        vec![&(
            t0 + secs(14),
            ElectionEvent::StoppedLeading(StopReason::RenewDeadline)
        )]
    );
    assert!(!m.is_leader(t0 + secs(14)));
    // It kept retrying every 2 s until then (fast PUT, then GET + PUT on the slow path).
    assert!(
        sent.iter().filter(|(t, _)| *t < t0 + secs(14)).count() >= 10,
        "{sent:?}"
    );
    assert!(m.stats().failures > 0);
    assert!(matches!(
        m.stats().last_error,
        Some(LeaseError::Api { code: 500, .. })
    ));
}

#[test]
fn a_hung_renew_is_abandoned_at_the_renew_deadline() {
    let t0 = Instant::now();
    let mut server = Server::default();
    let mut m = machine("a");
    drive(&mut m, &mut server, t0, t0, t0, false);
    // The renew at 2 s never gets an answer.
    assert!(m.poll_request(t0 + secs(2)).is_some());
    assert!(m.awaiting_response());
    assert_eq!(m.poll_timeout(), Some(t0 + secs(10)));
    m.handle_timeout(t0 + secs(10));
    assert!(!m.awaiting_response());
    assert!(!m.is_leader(t0 + secs(10)));
    assert_eq!(
        m.poll_event(),
        Some(ElectionEvent::StoppedLeading(StopReason::RenewDeadline))
    );
    assert_eq!(
        m.poll_event(),
        Some(ElectionEvent::AttemptFailed(LeaseError::TimedOut(secs(8))))
    );
    // Its answer, arriving now, is stray.
    let late = server.write(
        LeaseRequest::Update(m_write(&server, "a")),
        wall(t0, t0 + secs(10)),
    );
    m.handle_write_result(t0 + secs(10), late);
    assert!(!m.is_leader(t0 + secs(10)));
}

/// A renew of `holder` on the stored Lease.
fn m_write(server: &Server, holder: &str) -> LeaseWrite {
    LeaseWrite {
        base: server.lease.clone().unwrap_or_default(),
        holder_identity: holder.into(),
        lease_duration_seconds: 15,
        lease_transitions: 0,
        acquire_time: None,
    }
}

#[test]
fn a_late_driver_is_not_a_leader_past_the_deadline() {
    let t0 = Instant::now();
    let mut server = Server::default();
    let mut m = machine("a");
    drive(&mut m, &mut server, t0, t0, t0, false);
    // The process is paused for a minute: before anything is handled, it is not a leader.
    assert!(!m.is_leader(t0 + secs(60)));
}

#[test]
fn a_lost_race_is_counted_not_reported_as_an_error() {
    let t0 = Instant::now();
    let mut server = Server::default();
    server.held_by("other", wall(t0, t0));
    let mut m = machine("b");
    // Observe at 0; the lease expires at 15 s; the take-over PUT is decided after a GET.
    drive(&mut m, &mut server, t0, t0, t0 + secs(14), false);
    let t = m.poll_timeout().expect("a retry");
    assert_eq!(m.poll_request(t), Some(LeaseRequest::Get));
    if t < t0 + secs(15) {
        m.handle_get(t, server.get());
        let t = m.poll_timeout().expect("a retry");
        assert_eq!(m.poll_request(t), Some(LeaseRequest::Get));
        m.handle_get(t, server.get());
    } else {
        m.handle_get(t, server.get());
    }
    let Some(LeaseRequest::Update(w)) = m.poll_request(t0 + secs(20)) else {
        panic!("expected a take-over PUT");
    };
    assert_eq!(w.resource_version(), Some("1"));
    // Someone else wrote first.
    server.held_by("c", wall(t0, t0 + secs(20)));
    let r = server.write(LeaseRequest::Update(w), wall(t0, t0 + secs(20)));
    assert_eq!(r, Err(LeaseError::Conflict("ctrl".into())));
    m.handle_write_result(t0 + secs(20), r);
    assert_eq!(m.stats().conflicts, 1);
    assert_eq!(m.stats().failures, 0);
    assert_eq!(m.stats().last_error, None);
    assert!(!m.is_leader(t0 + secs(20)));
}

#[test]
fn a_leader_that_finds_another_holder_steps_down_at_once() {
    let t0 = Instant::now();
    let mut server = Server::default();
    let mut m = machine("a");
    drive(&mut m, &mut server, t0, t0, t0, false);
    // Someone overwrote the lease (by hand, or a replica with a broken clock).
    server.held_by("intruder", wall(t0, t0 + secs(1)));
    // The fast PUT conflicts, the GET shows the intruder with a valid lease.
    let (_, events) = drive(&mut m, &mut server, t0, t0 + secs(1), t0 + secs(2), false);
    assert_eq!(
        events,
        vec![
            (t0 + secs(2), ElectionEvent::NewLeader("intruder".into())),
            (
                t0 + secs(2),
                ElectionEvent::StoppedLeading(StopReason::LostLease)
            ),
        ]
    );
    assert!(!m.is_leader(t0 + secs(2)));
}

#[test]
fn retries_are_jittered_by_up_to_1_2_retry_periods() {
    let t0 = Instant::now();
    let mut delays = Vec::new();
    for seed in 0..50 {
        let mut server = Server::default();
        server.held_by("other", wall(t0, t0));
        let mut m = LeaderElectionMachine::new(config("b"), seed).expect("valid");
        assert_eq!(m.poll_request(t0), Some(LeaseRequest::Get));
        m.handle_get(t0, server.get());
        let next = m.poll_timeout().expect("a retry");
        delays.push(next - t0);
    }
    assert!(
        delays.iter().all(|d| *d >= secs(2) && *d < ms(6_400)),
        "{delays:?}"
    );
    let spread = delays.iter().max().copied().unwrap_or_default()
        - delays.iter().min().copied().unwrap_or_default();
    assert!(spread > secs(1), "no jitter: {delays:?}");
}

#[test]
fn cancel_releases_the_lease_when_asked() {
    let t0 = Instant::now();
    let mut server = Server::default();
    let mut c = config("a");
    c.release_on_cancel = true;
    let mut m = LeaderElectionMachine::new(c, 1).expect("valid");
    drive(&mut m, &mut server, t0, t0, t0 + secs(5), false);
    m.handle_cancel(t0 + secs(5));
    assert!(!m.is_leader(t0 + secs(5)));
    assert_eq!(m.phase(), ElectionPhase::Releasing);
    let (sent, events) = drive(&mut m, &mut server, t0, t0 + secs(5), t0 + secs(60), false);
    assert_eq!(
        sent,
        vec![
            (t0 + secs(5), Sent::Get),
            (
                t0 + secs(5),
                Sent::Update {
                    holder: String::new()
                }
            )
        ]
    );
    assert_eq!(
        events,
        vec![
            (
                t0 + secs(5),
                ElectionEvent::StoppedLeading(StopReason::Cancelled)
            ),
            (t0 + secs(5), ElectionEvent::Released),
        ]
    );
    assert!(m.is_stopped());
    let spec = server
        .lease
        .as_ref()
        .and_then(|l| l.spec.clone())
        .unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some(""));
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert_eq!(spec.lease_transitions, Some(0));
    assert_eq!(m.holder(), None);
}

#[test]
fn cancel_without_release_stops_at_once() {
    let t0 = Instant::now();
    let mut server = Server::default();
    let mut m = machine("a");
    drive(&mut m, &mut server, t0, t0, t0 + secs(5), false);
    m.handle_cancel(t0 + secs(5));
    assert!(m.is_stopped());
    assert_eq!(m.poll_request(t0 + secs(5)), None);
    assert_eq!(m.poll_timeout(), None);
    assert_eq!(server.holder().as_deref(), Some("a"));
    // A follower does not release what it does not hold.
    let mut c = config("b");
    c.release_on_cancel = true;
    let mut f = LeaderElectionMachine::new(c, 1).expect("valid");
    drive(&mut f, &mut server, t0, t0 + secs(5), t0 + secs(6), false);
    f.handle_cancel(t0 + secs(6));
    assert!(f.is_stopped());
    assert_eq!(f.poll_event(), None.or(f.poll_event()));
}

// --- several candidates together ---

/// Property-test cases: `KINFORMER_FUZZ_CASES` runs more.
fn cases(default: u32) -> u32 {
    std::env::var("KINFORMER_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// One simulated replica.
struct Node {
    m: LeaderElectionMachine,
    /// The id of the request whose answer the driver waits for.
    current: Option<u64>,
    /// Answers that arrived while paused, delivered on resume.
    held: Vec<(u64, Answer)>,
    paused_until: Option<Instant>,
    crashed: bool,
    /// Partitioned: its requests never reach the server.
    cut: bool,
    /// `leading_until` when last serviced.
    until: Option<Instant>,
    /// (time, event) as the callbacks would see them.
    log: Vec<(Instant, ElectionEvent)>,
}

#[derive(Debug)]
enum Answer {
    Get(Result<Option<Lease>, LeaseError>),
    Write(Result<Lease, LeaseError>),
}

#[derive(Debug)]
enum Net {
    /// The request reaches the server.
    Arrive {
        node: usize,
        id: u64,
        request: LeaseRequest,
    },
    /// The answer reaches the node.
    Answer {
        node: usize,
        id: u64,
        answer: Answer,
    },
}

/// Faults of a random schedule.
#[derive(Clone, Debug)]
struct Chaos {
    /// One-way latency is uniform in [0, max_latency].
    max_latency: Duration,
    /// Probability that the server fails a request (500, not applied).
    fail: f64,
    /// Probability that an answer is lost (the request was applied or not).
    lose: f64,
    /// Faults stop at this offset (then latency ≤ 1 ms, nothing fails or is lost).
    calm_after: Duration,
}

struct World {
    t0: Instant,
    now: Instant,
    server: Server,
    nodes: Vec<Node>,
    net: Vec<(Instant, u64, Net)>,
    next_id: u64,
    rng: StdRng,
    chaos: Chaos,
    /// Scheduled actions: (time, node, action).
    actions: Vec<(Instant, usize, Action)>,
    /// The most leaders seen at once, and when.
    max_leaders: (usize, Instant),
}

#[derive(Clone, Copy, Debug)]
enum Action {
    Pause(Duration),
    Crash,
    Cancel,
}

impl World {
    fn new(configs: Vec<LeaderElectionConfig>, seed: u64, chaos: Chaos) -> World {
        let t0 = Instant::now();
        let nodes = configs
            .into_iter()
            .enumerate()
            .map(|(i, c)| Node {
                m: LeaderElectionMachine::new(c, seed.wrapping_add(i as u64)).expect("valid"),
                current: None,
                held: Vec::new(),
                paused_until: None,
                crashed: false,
                cut: false,
                until: None,
                log: Vec::new(),
            })
            .collect();
        World {
            t0,
            now: t0,
            server: Server::default(),
            nodes,
            net: Vec::new(),
            next_id: 0,
            rng: StdRng::seed_from_u64(seed),
            chaos,
            actions: Vec::new(),
            max_leaders: (0, t0),
        }
    }

    fn calm(&self) -> bool {
        self.now >= self.t0 + self.chaos.calm_after
    }

    fn latency(&mut self) -> Duration {
        let max = if self.calm() {
            ms(1)
        } else {
            self.chaos.max_latency
        };
        max.mul_f64(self.rng.random::<f64>())
    }

    fn chance(&mut self, p: f64) -> bool {
        !self.calm() && self.rng.random::<f64>() < p
    }

    fn active(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        !n.crashed && n.paused_until.is_none()
    }

    /// Lets node `i` send what it has to send and logs its events.
    fn service(&mut self, i: usize) {
        if !self.active(i) {
            return;
        }
        let now = self.now;
        loop {
            let n = &mut self.nodes[i];
            if !n.m.awaiting_response() {
                n.current = None;
            }
            while let Some(e) = n.m.poll_event() {
                // A process paused past its renew deadline learns it late: its leadership
                // ended at the deadline (which `is_leader` honours), not when it woke up.
                let at = match (&e, n.until) {
                    (ElectionEvent::StoppedLeading(StopReason::RenewDeadline), Some(u)) => {
                        now.min(u)
                    }
                    _ => now,
                };
                n.log.push((at, e));
            }
            n.until = n.m.leading_until();
            let Some(request) = n.m.poll_request(now) else {
                break;
            };
            let id = self.next_id;
            self.next_id += 1;
            self.nodes[i].current = Some(id);
            let at = now + self.latency();
            self.net.push((
                at,
                id,
                Net::Arrive {
                    node: i,
                    id,
                    request,
                },
            ));
        }
    }

    fn deliver(&mut self, i: usize, id: u64, answer: Answer) {
        let now = self.now;
        let n = &mut self.nodes[i];
        if n.crashed || n.current != Some(id) {
            return; // the driver dropped that request
        }
        if n.paused_until.is_some() {
            n.held.push((id, answer));
            return;
        }
        match answer {
            Answer::Get(r) => n.m.handle_get(now, r),
            Answer::Write(r) => n.m.handle_write_result(now, r),
        }
    }

    fn next_time(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut consider = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        for (at, _, _) in &self.net {
            consider(*at);
        }
        for (at, _, _) in &self.actions {
            consider(*at);
        }
        for n in &self.nodes {
            if n.crashed {
                continue;
            }
            match n.paused_until {
                Some(p) => consider(p),
                None => {
                    if let Some(x) = n.m.poll_timeout() {
                        consider(x);
                    }
                }
            }
        }
        t
    }

    fn run_until(&mut self, end: Instant) {
        for i in 0..self.nodes.len() {
            self.service(i);
        }
        let mut stuck = 0;
        while let Some(t) = self.next_time() {
            if t > end {
                break;
            }
            stuck = if t <= self.now { stuck + 1 } else { 0 };
            assert!(stuck < 10_000, "no progress at {:?}", self.now - self.t0);
            self.now = self.now.max(t);
            let now = self.now;
            // Resume paused nodes: held answers first, then timers.
            for i in 0..self.nodes.len() {
                if self.nodes[i].paused_until.is_some_and(|p| p <= now) {
                    self.nodes[i].paused_until = None;
                    for (id, a) in std::mem::take(&mut self.nodes[i].held) {
                        self.deliver(i, id, a);
                    }
                }
            }
            // Scheduled actions.
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.actions)
                .into_iter()
                .partition(|(at, _, _)| *at <= now);
            self.actions = later;
            for (_, i, a) in due {
                if self.nodes[i].crashed {
                    continue;
                }
                match a {
                    Action::Crash => self.nodes[i].crashed = true,
                    Action::Pause(d) => {
                        if self.nodes[i].paused_until.is_none() {
                            self.nodes[i].paused_until = Some(now + d);
                        }
                    }
                    Action::Cancel => {
                        if self.active(i) {
                            self.nodes[i].m.handle_cancel(now);
                        }
                    }
                }
            }
            // The network, in time order (ties by send order).
            self.net.sort_by_key(|(at, seq, _)| (*at, *seq));
            while self.net.first().is_some_and(|(at, _, _)| *at <= now) {
                let (_, seq, ev) = self.net.remove(0);
                match ev {
                    Net::Arrive { node, .. } if self.nodes[node].cut => {}
                    Net::Arrive { node, id, request } => {
                        let answer = if self.chance(self.chaos.fail) {
                            let e = LeaseError::Api {
                                code: 500,
                                message: "injected".into(),
                            };
                            match request {
                                LeaseRequest::Get => Answer::Get(Err(e)),
                                _ => Answer::Write(Err(e)),
                            }
                        } else {
                            match request {
                                LeaseRequest::Get => Answer::Get(self.server.get()),
                                w => Answer::Write(self.server.write(w, wall(self.t0, now))),
                            }
                        };
                        if !self.chance(self.chaos.lose) {
                            let at = now + self.latency();
                            self.net.push((at, seq, Net::Answer { node, id, answer }));
                            self.net.sort_by_key(|(at, seq, _)| (*at, *seq));
                        }
                    }
                    Net::Answer { node, id, answer } => self.deliver(node, id, answer),
                }
            }
            // Timers.
            for i in 0..self.nodes.len() {
                if self.active(i) && self.nodes[i].m.poll_timeout().is_some_and(|x| x <= now) {
                    self.nodes[i].m.handle_timeout(now);
                }
                self.service(i);
            }
            let leaders = self.nodes.iter().filter(|n| n.m.is_leader(now)).count();
            if leaders > self.max_leaders.0 {
                self.max_leaders = (leaders, now);
            }
        }
        self.now = self.now.max(end);
    }

    fn leaders(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].m.is_leader(self.now))
            .collect()
    }

    /// Leadership intervals of node `i` from its callbacks: (start, stop or None).
    fn intervals(&self, i: usize) -> Vec<(Instant, Option<Instant>)> {
        let mut out: Vec<(Instant, Option<Instant>)> = Vec::new();
        for (t, e) in &self.nodes[i].log {
            match e {
                ElectionEvent::StartedLeading => out.push((*t, None)),
                ElectionEvent::StoppedLeading(_) => {
                    if let Some(last) = out.last_mut() {
                        last.1 = Some(*t);
                    }
                }
                _ => {}
            }
        }
        out
    }
}

fn calm() -> Chaos {
    Chaos {
        max_latency: ms(5),
        fail: 0.0,
        lose: 0.0,
        calm_after: Duration::ZERO,
    }
}

#[test]
fn two_candidates_exactly_one_leads() {
    let mut w = World::new(vec![config("a"), config("b")], 3, calm());
    w.run_until(w.t0 + secs(60));
    assert_eq!(w.leaders().len(), 1);
    assert_eq!(w.max_leaders.0, 1);
    let leader = w.leaders()[0];
    let other = 1 - leader;
    assert_eq!(w.intervals(leader).len(), 1);
    assert!(w.intervals(other).is_empty());
    // Both saw the same leader.
    let name = ["a", "b"][leader];
    for n in &w.nodes {
        assert!(
            n.log
                .iter()
                .any(|(_, e)| *e == ElectionEvent::NewLeader(name.into()))
        );
    }
}

#[test]
fn a_crashed_leader_is_replaced_after_its_lease_expires() {
    let mut w = World::new(vec![config("a"), config("b")], 5, calm());
    w.run_until(w.t0 + secs(10));
    let leader = w.leaders()[0];
    let other = 1 - leader;
    let crash = w.t0 + secs(10);
    w.nodes[leader].crashed = true;
    // The last renew the follower could have observed was written before the crash.
    let last_write_before = crash;
    w.run_until(w.t0 + secs(60));
    let start = w.intervals(other).first().map(|i| i.0).expect("took over");
    // Not before the lease (15 s from the follower's observation of the last renew, which was
    // at least 2 s before the crash) could expire; within lease + one jittered retry + a GET.
    let last_renew = w.nodes[leader].m.stats().last_renew.expect("renewed");
    assert!(start >= last_renew + secs(15), "{:?}", start - last_renew);
    assert!(
        start <= last_write_before + secs(15) + ms(4_400) + ms(50),
        "{:?}",
        start - crash
    );
    assert_eq!(w.server.holder().as_deref(), Some(["a", "b"][other]));
    assert_eq!(w.max_leaders.0, 1);
}

#[test]
fn release_hands_over_on_the_next_retry() {
    let mut a = config("a");
    a.release_on_cancel = true;
    let mut b = config("b");
    b.release_on_cancel = true;
    let mut w = World::new(vec![a, b], 7, calm());
    w.run_until(w.t0 + secs(10));
    let leader = w.leaders()[0];
    let other = 1 - leader;
    let cancel = w.t0 + secs(10);
    w.nodes[leader].m.handle_cancel(cancel);
    w.service(leader);
    w.run_until(w.t0 + secs(30));
    assert!(
        w.nodes[leader]
            .log
            .iter()
            .any(|(_, e)| *e == ElectionEvent::Released)
    );
    let start = w.intervals(other).first().map(|i| i.0).expect("took over");
    // Within one jittered retry period (4.4 s) plus latency, far below the 15 s lease.
    assert!(start - cancel < ms(4_500), "{:?}", start - cancel);
    assert_eq!(w.max_leaders.0, 1);
    let spec = w
        .server
        .lease
        .as_ref()
        .and_then(|l| l.spec.clone())
        .unwrap_or_default();
    assert_eq!(spec.lease_transitions, Some(1));
}

#[test]
fn failing_renews_step_down_before_the_other_takes_over() {
    let mut w = World::new(vec![config("a"), config("b")], 9, calm());
    w.run_until(w.t0 + secs(10));
    let leader = w.leaders()[0];
    let other = 1 - leader;
    // From now on the leader's requests never reach the server (a partition).
    let partition = w.now;
    w.nodes[leader].cut = true;
    w.run_until(w.t0 + secs(60));
    let stop = w.intervals(leader)[0].1.expect("stepped down");
    let start = w.intervals(other).first().map(|i| i.0).expect("took over");
    let last_renew = w.nodes[leader].m.stats().last_renew.expect("renewed");
    assert_eq!(stop, last_renew + secs(10));
    assert!(stop <= partition + secs(10));
    assert!(start >= last_renew + secs(15), "{:?}", start - last_renew);
    assert!(stop < start);
    assert_eq!(w.max_leaders.0, 1);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(96),
        ..ProptestConfig::default()
    })]

    /// Never two leaders, under any schedule: two or three candidates with their own valid
    /// timings, request latency beyond the deadlines, failed requests, lost answers, paused,
    /// crashed and cancelled processes; and once the faults stop, someone leads if anyone can.
    #[test]
    fn never_two_leaders(
        seed in any::<u64>(),
        timings in prop::collection::vec((50u64..2_000, 1u64..1_000, 1u64..3_000), 2..=3),
        max_latency in 0u64..3_000,
        fail in 0.0f64..0.5,
        lose in 0.0f64..0.3,
        actions in prop::collection::vec((0u64..40_000, 0usize..3, 0u8..4, 0u64..20_000), 0..4),
        release in any::<bool>(),
    ) {
        let configs: Vec<_> = timings
            .iter()
            .enumerate()
            .map(|(i, &(retry, extra_renew, extra_lease))| {
                let mut c = config(&format!("n{i}"));
                c.retry_period = ms(retry);
                c.renew_deadline = ms(retry * 12 / 10 + extra_renew);
                c.lease_duration = c.renew_deadline + ms(extra_lease);
                c.release_on_cancel = release;
                c
            })
            .collect();
        let longest = configs
            .iter()
            .map(|c| Duration::from_secs(c.lease_duration_seconds() as u64) + c.retry_period * 3)
            .max()
            .unwrap_or_default();
        let n = configs.len();
        let calm_after = secs(60);
        let mut w = World::new(configs, seed, Chaos {
            max_latency: ms(max_latency),
            fail,
            lose,
            calm_after,
        });
        let t0 = w.t0;
        let mut disabled = 0;
        for &(at, node, kind, pause) in &actions {
            let node = node % n;
            let action = match kind {
                0 => Action::Pause(ms(pause)),
                1 => { disabled += 1; Action::Crash }
                2 => { disabled += 1; Action::Cancel }
                _ => Action::Pause(ms(pause / 10)),
            };
            w.actions.push((t0 + ms(at), node, action));
        }
        let end = t0 + calm_after + longest * 3;
        w.run_until(end);
        prop_assert!(w.max_leaders.0 <= 1, "{} leaders at {:?}", w.max_leaders.0, w.max_leaders.1 - t0);
        // The callbacks' intervals never overlap either.
        let mut all: Vec<(Instant, Instant)> = (0..n)
            .flat_map(|i| {
                // A crashed process's last leadership ends at its renew deadline.
                let open_end = if w.nodes[i].crashed { w.nodes[i].until.unwrap_or(end) } else { end };
                w.intervals(i).into_iter().map(move |(s, e)| (s, e.unwrap_or(open_end)))
            })
            .collect();
        all.sort();
        for pair in all.windows(2) {
            prop_assert!(pair[0].1 <= pair[1].0, "overlapping leaderships {:?}", pair);
        }
        // Liveness: with every fault over and a live candidate, someone leads.
        let live = (0..n).filter(|&i| !w.nodes[i].crashed && !w.nodes[i].m.is_stopped()).count();
        if live > 0 && disabled < n {
            prop_assert_eq!(w.leaders().len(), 1, "no leader after the faults stopped");
        }
    }
}
