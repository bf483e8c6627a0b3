//! Leader election against the simulated API server, over HTTP through kube: two electors
//! (each with its own kube `Client`) compete for one Lease. Every test records each elector's
//! callbacks with their instants, and a watch on the Lease records every write the server made
//! (holder, when the watch saw it), so "never two leaders" is checked from both sides.
//!
//! Timings are short (lease 2 s, renew deadline 1.5 s, retry 0.25 s) so the file runs in
//! seconds; the slack in timing assertions covers a loaded 2-core machine.

use crate::common;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kinformer::leader_election::ConfigError;
use kinformer_actors::{
    LeaderCallbacks, LeaderElectionConfig, LeaderElectionError, LeaderElector, LeaderElectorHandle,
};
use kinformer_sim::{Sim, Verb};
use kube::{
    Api, Client,
    api::{PostParams, WatchEvent, WatchParams},
};

use crate::common::eventually;

const LEASE: &str = "ctrl-lease";
const LEASE_DURATION: Duration = Duration::from_secs(2);
const RENEW_DEADLINE: Duration = Duration::from_millis(1_500);
const RETRY_PERIOD: Duration = Duration::from_millis(250);
/// Scheduling, HTTP round trips and the test's own polling on a busy machine.
const SLACK: Duration = Duration::from_millis(400);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    NewLeader,
    Started,
    Stopped,
}

/// One callback: (when, who, what, the new leader's name).
type Call = (Instant, &'static str, Ev, String);

/// Every callback of every elector.
#[derive(Clone, Default)]
struct Callbacks(Arc<Mutex<Vec<Call>>>);

impl Callbacks {
    fn for_elector(&self, who: &'static str) -> LeaderCallbacks {
        let (a, b, c) = (self.clone(), self.clone(), self.clone());
        LeaderCallbacks::new(
            move || a.push(who, Ev::Started, ""),
            move || b.push(who, Ev::Stopped, ""),
        )
        .on_new_leader(move |leader| c.push(who, Ev::NewLeader, leader))
    }

    fn push(&self, who: &'static str, ev: Ev, leader: &str) {
        let mut log = self.0.lock().unwrap_or_else(|e| e.into_inner());
        log.push((Instant::now(), who, ev, leader.to_string()));
    }

    fn all(&self) -> Vec<Call> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn times(&self, who: &str, ev: Ev) -> Vec<Instant> {
        self.all()
            .into_iter()
            .filter(|(_, w, e, _)| *w == who && *e == ev)
            .map(|(t, ..)| t)
            .collect()
    }

    fn first(&self, ev: Ev) -> Option<(Instant, &'static str)> {
        self.all()
            .into_iter()
            .find(|(_, _, e, _)| *e == ev)
            .map(|(t, w, ..)| (t, w))
    }

    /// Leadership intervals from the callbacks, asserted never to overlap.
    fn assert_never_two_leaders(&self) {
        let mut intervals: Vec<(Instant, Option<Instant>, &str)> = Vec::new();
        for (t, who, ev, _) in self.all() {
            match ev {
                Ev::Started => intervals.push((t, None, who)),
                Ev::Stopped => {
                    if let Some(i) = intervals.iter_mut().rev().find(|i| i.2 == who) {
                        i.1 = Some(t);
                    }
                }
                Ev::NewLeader => {}
            }
        }
        intervals.sort_by_key(|i| i.0);
        for w in intervals.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            let end =
                a.1.unwrap_or_else(|| panic!("{} still leads when {} starts", a.2, b.2));
            assert!(
                end <= b.0,
                "{} led until {:?} after {} started",
                a.2,
                end - b.0,
                b.2
            );
        }
    }
}

/// Every write to the Lease the server reported on a watch: (when seen, holderIdentity).
#[derive(Clone, Default)]
struct LeaseWrites(Arc<Mutex<Vec<(Instant, String)>>>);

impl LeaseWrites {
    fn watch(client: Client) -> (LeaseWrites, tokio::task::JoinHandle<()>) {
        let writes = LeaseWrites::default();
        let w = writes.clone();
        let task = tokio::spawn(async move {
            let api: Api<Lease> = Api::default_namespaced(client);
            let wp = WatchParams::default()
                .fields(&format!("metadata.name={LEASE}"))
                .timeout(120);
            let Ok(stream) = api.watch(&wp, "0").await else {
                return;
            };
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(ev)) = stream.next().await {
                if let WatchEvent::Added(l) | WatchEvent::Modified(l) = ev {
                    let holder = holder(&l).unwrap_or_default();
                    w.0.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((Instant::now(), holder));
                }
            }
        });
        (writes, task)
    }

    fn all(&self) -> Vec<(Instant, String)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// When the watch saw the last write by `who`.
    fn last_by(&self, who: &str) -> Option<Instant> {
        self.all()
            .into_iter()
            .filter(|(_, h)| h == who)
            .map(|(t, _)| t)
            .next_back()
    }

    /// When the watch saw the first write by `who`.
    fn first_by(&self, who: &str) -> Option<Instant> {
        self.all()
            .into_iter()
            .find(|(_, h)| h == who)
            .map(|(t, _)| t)
    }

    /// The holders in order, repeated renews collapsed.
    fn holders(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (_, h) in self.all() {
            if out.last() != Some(&h) {
                out.push(h);
            }
        }
        out
    }
}

fn holder(l: &Lease) -> Option<String> {
    l.spec.as_ref()?.holder_identity.clone()
}

fn config(identity: &str, release_on_cancel: bool) -> LeaderElectionConfig {
    let mut c = LeaderElectionConfig::new("default", LEASE, identity);
    c.lease_duration = LEASE_DURATION;
    c.renew_deadline = RENEW_DEADLINE;
    c.retry_period = RETRY_PERIOD;
    c.release_on_cancel = release_on_cancel;
    c
}

/// A kube client of its own (its own connection pool), as a separate replica would have.
fn client(sim: &Sim) -> Client {
    Client::try_from(sim.kube_config()).expect("client")
}

fn start(sim: &Sim, who: &'static str, release: bool, cb: &Callbacks) -> LeaderElectorHandle {
    LeaderElector::new(config(who, release), client(sim), cb.for_elector(who))
        .expect("valid config")
        .start()
        .expect("started")
}

async fn lease(sim: &Sim) -> Option<Lease> {
    let api: Api<Lease> = Api::default_namespaced(sim.client());
    api.get_opt(LEASE).await.expect("get lease")
}

/// Waits for the first `StartedLeading` and returns (when, who).
async fn first_leader(cb: &Callbacks) -> (Instant, &'static str) {
    eventually("someone leads", || cb.first(Ev::Started).is_some()).await;
    cb.first(Ev::Started).expect("a leader")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_electors_exactly_one_leads() {
    let sim = common::sim().await;
    let (writes, watch) = LeaseWrites::watch(sim.client());
    let cb = Callbacks::default();
    // One elector as an actor, the other through the plain async entry point.
    let a = start(&sim, "a", true, &cb);
    let b = LeaderElector::new(config("b", true), client(&sim), cb.for_elector("b"))
        .expect("valid config");
    let b_status = b.status();
    let (stop_b, stopped) = tokio::sync::oneshot::channel::<()>();
    let b_task = tokio::spawn(b.run_until(async move {
        let _ = stopped.await;
    }));

    let (_, leader) = first_leader(&cb).await;
    let (leader_status, follower_status) = if leader == "a" {
        (a.status().clone(), b_status.clone())
    } else {
        (b_status.clone(), a.status().clone())
    };
    let follower = if leader == "a" { "b" } else { "a" };
    // Both observed the same leader; it keeps renewing; the follower never leads.
    eventually("the leader renewed a few times and both see it", || {
        leader_status.health().renewals >= 4 && follower_status.holder().as_deref() == Some(leader)
    })
    .await;
    assert!(leader_status.is_leader());
    assert!(!follower_status.is_leader());
    assert!(cb.times(follower, Ev::Started).is_empty());
    assert_eq!(cb.times(leader, Ev::Started).len(), 1);
    for who in ["a", "b"] {
        assert!(
            cb.all()
                .iter()
                .any(|(_, w, e, l)| *w == who && *e == Ev::NewLeader && l == leader),
            "{who} was told the leader"
        );
    }
    let l = lease(&sim).await.expect("the lease exists");
    let spec = l.spec.clone().unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some(leader));
    assert_eq!(spec.lease_duration_seconds, Some(2));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(spec.acquire_time.is_some() && spec.renew_time > spec.acquire_time);
    eventually("the watch sees the leader's write", || {
        writes.first_by(leader).is_some()
    })
    .await;
    assert_eq!(writes.holders(), vec![leader.to_string()]);
    assert_eq!(leader_status.transitions(), Some(0));
    // The follower's reads never wrote.
    assert!(sim.requests().count("leases", Verb::Get) > 0);

    a.stop().await.expect("stop a");
    let _ = stop_b.send(());
    b_task.await.expect("b ends");
    cb.assert_never_two_leaders();
    watch.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_leader_is_replaced_within_lease_duration_and_retry_period() {
    let sim = common::sim().await;
    let (writes, watch) = LeaseWrites::watch(sim.client());
    let cb = Callbacks::default();
    let mut handles = vec![
        ("a", start(&sim, "a", false, &cb)),
        ("b", start(&sim, "b", false, &cb)),
    ];
    let (_, leader) = first_leader(&cb).await;
    let follower = if leader == "a" { "b" } else { "a" };
    eventually("the follower sees the leader", || {
        writes.first_by(leader).is_some()
            && handles
                .iter()
                .any(|(w, h)| *w == follower && h.status().holder().as_deref() == Some(leader))
    })
    .await;
    // Stop the leader without releasing: the lease stays held until it expires.
    let i = handles
        .iter()
        .position(|(w, _)| *w == leader)
        .expect("leader handle");
    let (_, h) = handles.remove(i);
    let stopped_at = Instant::now();
    h.stop().await.expect("stop");
    assert_eq!(
        lease(&sim).await.as_ref().and_then(holder).as_deref(),
        Some(leader)
    );

    eventually("the follower takes over", || {
        !cb.times(follower, Ev::Started).is_empty()
    })
    .await;
    let took_over = cb.times(follower, Ev::Started)[0];
    eventually("the watch sees the follower's write", || {
        writes.first_by(follower).is_some()
    })
    .await;
    let last_write = writes.last_by(leader).expect("the leader wrote");
    // Not before the lease expired: 2 s after the last renew was written (the watch saw it
    // at or after the write, the follower observed it at or after the write).
    assert!(
        took_over + Duration::from_millis(100) >= last_write + LEASE_DURATION,
        "took over {:?} after the last renew",
        took_over - last_write
    );
    // Within lease duration + one (jittered) retry period of the stop.
    let bound = LEASE_DURATION + RETRY_PERIOD.mul_f64(2.2) + SLACK;
    assert!(
        took_over - stopped_at <= bound,
        "took over {:?} after the stop (bound {bound:?})",
        took_over - stopped_at
    );
    assert_eq!(
        writes.holders(),
        vec![leader.to_string(), follower.to_string()]
    );
    let spec = lease(&sim).await.and_then(|l| l.spec).unwrap_or_default();
    assert_eq!(spec.lease_transitions, Some(1));
    eprintln!(
        "hand-over after a stop without release: {:?}",
        took_over - stopped_at
    );
    cb.assert_never_two_leaders();
    for (_, h) in handles {
        h.stop().await.expect("stop");
    }
    watch.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_steps_down_before_the_other_takes_over() {
    let sim = common::sim().await;
    let (writes, watch) = LeaseWrites::watch(sim.client());
    let cb = Callbacks::default();
    let mut handles = vec![
        ("a", start(&sim, "a", false, &cb)),
        ("b", start(&sim, "b", false, &cb)),
    ];
    let (_, leader) = first_leader(&cb).await;
    let follower = if leader == "a" { "b" } else { "a" };
    eventually("the follower sees the leader", || {
        handles
            .iter()
            .any(|(w, h)| *w == follower && h.status().holder().as_deref() == Some(leader))
    })
    .await;
    // Every Lease update fails from now on. The follower only reads while the lease is valid,
    // so this hits the leader's renews.
    let fault_at = Instant::now();
    sim.faults()
        .fail_next(Some("leases"), Verb::Update, 1_000_000, 500, 0);
    eventually("the leader steps down", || {
        !cb.times(leader, Ev::Stopped).is_empty()
    })
    .await;
    let stepped_down = cb.times(leader, Ev::Stopped)[0];
    // By its renew deadline: its last successful renew was sent before the fault.
    assert!(
        stepped_down - fault_at <= RENEW_DEADLINE + Duration::from_millis(150),
        "stepped down {:?} after the fault",
        stepped_down - fault_at
    );
    let i = handles
        .iter()
        .position(|(w, _)| *w == leader)
        .expect("leader handle");
    let leader_health = handles[i].1.status().health();
    assert!(!leader_health.is_leader);
    assert!(leader_health.failures > 0 && leader_health.last_error.is_some());
    // A controller that lost its lease exits (kube-controller-manager does); then the fault
    // clears and the follower may write again.
    let (_, h) = handles.remove(i);
    h.stop().await.expect("stop");
    sim.faults().clear();

    eventually("the follower takes over", || {
        !cb.times(follower, Ev::Started).is_empty()
    })
    .await;
    let took_over = cb.times(follower, Ev::Started)[0];
    eventually("the watch sees the follower's write", || {
        writes.first_by(follower).is_some()
    })
    .await;
    let last_write = writes.last_by(leader).expect("the leader wrote");
    assert!(stepped_down < took_over);
    // Only after the lease expired (2 s after the last renew was written).
    assert!(
        took_over + Duration::from_millis(100) >= last_write + LEASE_DURATION,
        "took over {:?} after the last renew",
        took_over - last_write
    );
    // The server's record agrees: the follower's first write came after the leader stopped.
    let follower_write = writes.first_by(follower).expect("the follower wrote");
    assert!(follower_write > stepped_down);
    assert_eq!(
        writes.holders(),
        vec![leader.to_string(), follower.to_string()]
    );
    eprintln!(
        "renew failures from {:?}: stepped down after {:?}, taken over after {:?}",
        fault_at - fault_at,
        stepped_down - fault_at,
        took_over - fault_at
    );
    cb.assert_never_two_leaders();
    for (_, h) in handles {
        h.stop().await.expect("stop");
    }
    watch.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_on_shutdown_hands_over_at_once() {
    let sim = common::sim().await;
    let (writes, watch) = LeaseWrites::watch(sim.client());
    let cb = Callbacks::default();
    let mut handles = vec![
        ("a", start(&sim, "a", true, &cb)),
        ("b", start(&sim, "b", true, &cb)),
    ];
    let (_, leader) = first_leader(&cb).await;
    let follower = if leader == "a" { "b" } else { "a" };
    eventually("the follower sees the leader", || {
        handles
            .iter()
            .any(|(w, h)| *w == follower && h.status().holder().as_deref() == Some(leader))
    })
    .await;
    let i = handles
        .iter()
        .position(|(w, _)| *w == leader)
        .expect("leader handle");
    let (_, h) = handles.remove(i);
    let released_at = Instant::now();
    h.release().await.expect("release");
    // on_stopped_leading ran before the release was written.
    let stopped = cb.times(leader, Ev::Stopped);
    assert_eq!(stopped.len(), 1);
    eventually("the follower takes over", || {
        !cb.times(follower, Ev::Started).is_empty()
    })
    .await;
    let took_over = cb.times(follower, Ev::Started)[0];
    eventually("the watch sees the follower's write", || {
        writes.first_by(follower).is_some()
    })
    .await;
    // On its next retry, far below the 2 s lease duration.
    let bound = RETRY_PERIOD.mul_f64(2.2) + SLACK;
    assert!(
        took_over - released_at <= bound,
        "took over {:?} after the release (bound {bound:?})",
        took_over - released_at
    );
    assert!(took_over - released_at < LEASE_DURATION);
    assert_eq!(
        writes.holders(),
        vec![leader.to_string(), String::new(), follower.to_string()]
    );
    let spec = lease(&sim).await.and_then(|l| l.spec).unwrap_or_default();
    assert_eq!(spec.lease_transitions, Some(1));
    assert_eq!(spec.holder_identity.as_deref(), Some(follower));
    eprintln!("hand-over after a release: {:?}", took_over - released_at);
    cb.assert_never_two_leaders();
    for (_, h) in handles {
        h.stop().await.expect("stop");
    }
    watch.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_renewed_by_a_skewed_clock_is_honoured_for_its_whole_duration() {
    let sim = common::sim().await;
    // A replica whose clock is an hour behind holds the lease: its renewTime looks ancient.
    let hour_ago = hour_ago();
    let api: Api<Lease> = Api::default_namespaced(sim.client());
    let ghost = Lease {
        metadata: ObjectMeta {
            name: Some(LEASE.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("ghost".into()),
            lease_duration_seconds: Some(2),
            acquire_time: Some(hour_ago.clone()),
            renew_time: Some(hour_ago),
            lease_transitions: Some(5),
            ..LeaseSpec::default()
        }),
    };
    api.create(&PostParams::default(), &ghost)
        .await
        .expect("create");
    let created = Instant::now();
    let cb = Callbacks::default();
    let a = start(&sim, "a", true, &cb);
    eventually("a leads", || !cb.times("a", Ev::Started).is_empty()).await;
    let took_over = cb.times("a", Ev::Started)[0];
    // The record did not change, so it expires 2 s after a first read it: never at once.
    assert!(
        took_over - created >= LEASE_DURATION,
        "took over {:?} after the lease was written",
        took_over - created
    );
    assert!(took_over - created <= LEASE_DURATION + RETRY_PERIOD.mul_f64(2.2) + SLACK);
    assert!(
        cb.all()
            .iter()
            .any(|(_, _, e, l)| *e == Ev::NewLeader && l == "ghost")
    );
    let spec = lease(&sim).await.and_then(|l| l.spec).unwrap_or_default();
    assert_eq!(spec.lease_transitions, Some(6));
    a.stop().await.expect("stop");
}

/// An hour before the wall clock (from `SystemTime`: jiff's `Timestamp::now` needs its `std`
/// feature).
fn hour_ago() -> MicroTime {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_micros() as i64;
    MicroTime(Timestamp::from_microsecond(now - 3_600_000_000).expect("in range"))
}

#[tokio::test]
async fn invalid_configs_are_rejected_naming_the_rule() {
    let sim = common::sim().await;
    let cases: Vec<(LeaderElectionConfig, ConfigError)> = vec![
        (
            LeaderElectionConfig {
                renew_deadline: Duration::from_secs(15),
                ..config("a", false)
            },
            ConfigError::LeaseDurationNotAboveRenewDeadline {
                lease_duration: LEASE_DURATION,
                renew_deadline: Duration::from_secs(15),
            },
        ),
        (
            LeaderElectionConfig {
                retry_period: Duration::from_secs(2),
                ..config("a", false)
            },
            ConfigError::RenewDeadlineNotAboveJitteredRetryPeriod {
                renew_deadline: RENEW_DEADLINE,
                jittered_retry_period: Duration::from_secs(2).mul_f64(1.2),
            },
        ),
        (
            LeaderElectionConfig {
                retry_period: Duration::ZERO,
                ..config("a", false)
            },
            ConfigError::RetryPeriodZero,
        ),
        (config("", false), ConfigError::EmptyIdentity),
    ];
    for (c, expected) in cases {
        let err = LeaderElector::new(c, sim.client(), Callbacks::default().for_elector("x"))
            .expect_err("invalid");
        let LeaderElectionError::Config(e) = &err else {
            panic!("not a config error: {err}");
        };
        assert_eq!(*e, expected);
        assert!(
            err.to_string()
                .starts_with("invalid leader election config: ")
        );
    }
    assert_eq!(sim.requests().count("leases", Verb::Get), 0);
}
