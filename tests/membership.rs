//! The Lease-based shard ring against the simulated API server, over HTTP through kube: each
//! member has its own kube `Client`, a fake controller acknowledges its drains, and a sampler
//! reads every member's `ShardOwnership` every few milliseconds and records any hash owned by
//! two members at once (held and valid on both).
//!
//! Timings are short (lease 2 s, renew deadline 1.5 s, rounds 0.25 s) so the file runs in
//! seconds; the slack covers a loaded 2-core machine.

mod common;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::coordination::v1::Lease;
use kinformer::{
    membership::{HELD_ANNOTATION, MembershipConfig, owned_by, target_ring},
    shard::{ShardField, ShardSelector},
};
use kinformer_actors::{ShardMember, ShardMemberHandle, ShardOwnership};
use kinformer_sim::Sim;
use kube::{Api, Client};

use common::eventually;

const FIELD: ShardField = ShardField::Uid;
const LEASE_DURATION: Duration = Duration::from_secs(2);
const RETRY_PERIOD: Duration = Duration::from_millis(250);
const VIRTUAL_NODES: u32 = 8;
const MAX_IN_FLIGHT: usize = 3;
const SLACK: Duration = Duration::from_millis(600);

fn config(identity: &str) -> MembershipConfig {
    let mut c = MembershipConfig::new("default", "ctrl", identity, FIELD);
    c.lease_duration = LEASE_DURATION;
    c.renew_deadline = Duration::from_millis(1_500);
    c.retry_period = RETRY_PERIOD;
    c.virtual_nodes = VIRTUAL_NODES;
    c.max_in_flight = MAX_IN_FLIGHT;
    c
}

fn client(sim: &Sim) -> Client {
    Client::try_from(sim.kube_config()).expect("client")
}

/// One running member and its fake controller.
struct Member {
    id: String,
    handle: Option<ShardMemberHandle>,
    ownership: ShardOwnership,
    controller: tokio::task::JoinHandle<()>,
}

/// Every member's ownership, sampled; overlaps and the largest drain recorded.
#[derive(Clone, Default)]
struct Sampler {
    members: Arc<Mutex<Vec<(String, ShardOwnership)>>>,
    violations: Arc<Mutex<Vec<String>>>,
    max_draining: Arc<Mutex<usize>>,
}

impl Sampler {
    fn start(&self) -> tokio::task::JoinHandle<()> {
        let s = self.clone();
        tokio::spawn(async move {
            loop {
                s.sample();
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        })
    }

    fn sample(&self) {
        let now = Instant::now();
        let members = self
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let views: Vec<_> = members
            .iter()
            .map(|(id, o)| (id.clone(), o.view()))
            .collect();
        for (_, v) in &views {
            let mut m = self.max_draining.lock().unwrap_or_else(|e| e.into_inner());
            *m = (*m).max(v.draining.ranges().len());
        }
        let valid: Vec<_> = views
            .iter()
            .filter(|(_, v)| v.valid_until.is_some_and(|t| now < t))
            .collect();
        for (i, (a, va)) in valid.iter().enumerate() {
            for (b, vb) in &valid[i + 1..] {
                let both = va.held.intersection(&vb.held).expect("one field");
                if !both.is_empty() {
                    self.violations
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("{a} and {b} both hold {both}"));
                }
            }
        }
    }

    fn assert_clean(&self) {
        let v = self.violations.lock().unwrap_or_else(|e| e.into_inner());
        assert!(v.is_empty(), "{v:#?}");
    }
}

fn start(sim: &Sim, sampler: &Sampler, id: &str) -> Member {
    let member = ShardMember::new(config(id), client(sim)).expect("valid config");
    let ownership = member.ownership();
    let handle = member.start().expect("starts");
    sampler
        .members
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((id.to_string(), ownership.clone()));
    // The fake controller: stops its (imaginary) workers for draining keys and acks at once.
    // It records how many ranges it was asked to drain at once: it sees every drain (a range
    // leaves only after its ack), which a periodic sample of a drain this short would miss.
    let o = ownership.clone();
    let max_draining = Arc::clone(&sampler.max_draining);
    let controller = tokio::spawn(async move {
        let mut rx = o.subscribe();
        loop {
            let draining = o.view().draining.clone();
            if !draining.is_empty() {
                let mut m = max_draining.lock().unwrap_or_else(|e| e.into_inner());
                *m = (*m).max(draining.ranges().len());
                drop(m);
                o.record_write("7");
                o.ack_drained(&draining);
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
    Member {
        id: id.to_string(),
        handle: Some(handle),
        ownership,
        controller,
    }
}

/// The live members hold exactly their parts of the ring of the live members, covering all.
fn converged(members: &[&Member]) -> bool {
    let ids: Vec<&str> = members.iter().map(|m| m.id.as_str()).collect();
    let ring = target_ring(&ids, VIRTUAL_NODES);
    let mut union = ShardSelector::nothing(FIELD);
    let now = Instant::now();
    for m in members {
        let v = m.ownership.view();
        if v.held != owned_by(&ring, FIELD, &m.id)
            || !v.draining.is_empty()
            || v.valid_until.is_none_or(|t| now >= t)
        {
            return false;
        }
        union = union.union(&v.held).expect("one field");
    }
    union.is_everything()
}

async fn three(sim: &Sim, sampler: &Sampler) -> Vec<Member> {
    let members: Vec<Member> = ["a", "b", "c"]
        .into_iter()
        .map(|id| start(sim, sampler, id))
        .collect();
    let refs: Vec<&Member> = members.iter().collect();
    eventually("three members partition the space", || converged(&refs)).await;
    members
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_members_ranges_move_without_waiting_for_expiry() {
    let sim = common::sim().await;
    let sampler = Sampler::default();
    let sampling = sampler.start();
    let mut members = three(&sim, &sampler).await;
    // The Leases say what each holds.
    let api: Api<Lease> = Api::default_namespaced(client(&sim));
    let lease = api.get("ctrl-a").await.expect("a's Lease");
    let held = &lease.metadata.annotations.expect("annotations")[HELD_ANNOTATION];
    assert!(!held.is_empty());

    let c = members.pop().expect("c");
    let stopped = Instant::now();
    c.handle.expect("running").stop().await.expect("stops");
    let v = c.ownership.view();
    assert!(v.held.is_empty(), "c holds nothing after leaving");
    let lease = api.get("ctrl-c").await.expect("c's Lease");
    assert_eq!(
        lease.spec.expect("spec").holder_identity.as_deref(),
        Some("")
    );
    let refs: Vec<&Member> = members.iter().collect();
    eventually("a and b take c's ranges", || converged(&refs)).await;
    let took = stopped.elapsed();
    assert!(
        took < LEASE_DURATION + SLACK,
        "took {took:?}: waited for an expiry"
    );
    c.controller.abort();
    sampling.abort();
    sampler.assert_clean();
    let health = members[0]
        .handle
        .as_ref()
        .expect("running")
        .status()
        .health();
    assert!(health.joined && health.handovers > 0 && health.held_fraction > 0.3);
    assert!(health.members.iter().any(|m| m.identity == "c"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_members_ranges_move_after_twice_its_lease_duration() {
    let sim = common::sim().await;
    let sampler = Sampler::default();
    let sampling = sampler.start();
    let mut members = three(&sim, &sampler).await;
    let c = members.pop().expect("c");
    let c_held = c.ownership.view().held.clone();
    let crashed = Instant::now();
    drop(c.handle); // like a crash: no drain, no release
    c.controller.abort();
    let refs: Vec<&Member> = members.iter().collect();
    let gained = |refs: &[&Member]| {
        refs.iter().any(|m| {
            m.ownership
                .view()
                .held
                .intersection(&c_held)
                .is_ok_and(|i| !i.is_empty())
        })
    };
    eventually("someone takes a range of c's", || gained(&refs)).await;
    let first = crashed.elapsed();
    // c's last renew was at most a round before the crash; nobody may move before 2 × lease.
    assert!(
        first >= LEASE_DURATION * 2 - RETRY_PERIOD,
        "moved after {first:?}"
    );
    eventually("a and b take all of c's ranges", || converged(&refs)).await;
    let all = crashed.elapsed();
    assert!(
        all < LEASE_DURATION * 2 + Duration::from_secs(3),
        "took {all:?}"
    );
    let takeovers: u64 = members
        .iter()
        .map(|m| {
            m.handle
                .as_ref()
                .expect("running")
                .status()
                .health()
                .takeovers
        })
        .sum();
    assert_eq!(takeovers, 1);
    sampling.abort();
    sampler.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_member_takes_its_part_in_bounded_steps() {
    let sim = common::sim().await;
    let sampler = Sampler::default();
    let sampling = sampler.start();
    let mut members = three(&sim, &sampler).await;
    *sampler
        .max_draining
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = 0;
    members.push(start(&sim, &sampler, "d"));
    let refs: Vec<&Member> = members.iter().collect();
    eventually("four members partition the space", || converged(&refs)).await;
    let max = *sampler
        .max_draining
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    assert!(
        (1..=MAX_IN_FLIGHT).contains(&max),
        "{max} ranges draining at once"
    );
    // d's ranges came with the previous owners' last write.
    let d = members[3].ownership.view();
    assert!(!d.handover.is_empty());
    assert!(d.handover.iter().all(|(_, rv)| rv == "7"));
    sampling.abort();
    sampler.assert_clean();
    for m in members {
        m.handle.expect("running").stop().await.expect("stops");
    }
}
