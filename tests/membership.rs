//! The Lease-based shard ring against the simulated API server, over HTTP through kube: each
//! member has its own kube `Client`, a fake controller acknowledges its drains, and a sampler
//! reads every member's `ShardOwnership` every few milliseconds and records any hash owned by
//! two members at once (held and valid on both).
//!
//! Timings are short (lease 2 s, renew deadline 1.5 s, rounds 0.25 s) so the file runs in
//! seconds; the slack covers a loaded 2-core machine.

use crate::common;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::{coordination::v1::Lease, core::v1::Pod};
use kinformer::{
    membership::{HELD_ANNOTATION, MembershipConfig, owned_by, target_ring},
    notification::Notification,
    shard::{ShardField, ShardSelector},
};
use kinformer_actors::{
    ShardMember, ShardMemberHandle, ShardOwnership, SharedIndexInformer, handler_fn,
};
use kinformer_sim::Sim;
use kube::{Api, Client, ResourceExt};

use crate::{
    client_layers::{Cut, Uris, recording_client},
    common::eventually,
    sharding::{cached, in_shard, uids},
};

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
    start_with(client(sim), sampler, id)
}

fn start_with(client: Client, sampler: &Sampler, id: &str) -> Member {
    let member = ShardMember::new(config(id), client).expect("valid config");
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

/// The resourceVersion of Lease `ctrl-<id>`.
async fn lease_rv(kube: &Client, id: &str) -> String {
    Api::<Lease>::default_namespaced(kube.clone())
        .get(&format!("ctrl-{id}"))
        .await
        .expect("the Lease")
        .metadata
        .resource_version
        .unwrap_or_default()
}

/// Waits until `id`'s Lease has changed `n` times (its rounds: each renews after its LIST).
async fn rounds(kube: &Client, id: &str, n: usize) {
    let mut last = lease_rv(kube, id).await;
    let mut seen = 0;
    let deadline = Instant::now() + common::DEADLINE;
    while seen < n {
        assert!(
            Instant::now() < deadline,
            "{id} renewed {seen} of {n} times"
        );
        let rv = lease_rv(kube, id).await;
        if rv != last {
            seen += 1;
            last = rv;
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The `shardSelector` of a pods request URI: `Some(None)` for a pods request without one.
fn pods_shard(uri: &str) -> Option<Option<ShardSelector>> {
    if !uri.contains("/pods") {
        return None;
    }
    let query = uri.split_once('?').map_or("", |(_, q)| q);
    Some(
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == "shardSelector")
            .map(|(_, v)| ShardSelector::parse(&v).expect("a valid shardSelector")),
    )
}

/// One replica's Pod informer, following its member's `wanted` ranges as a sharded controller
/// does (the deployment controller's `follow_ownership`), with every request it sends and every
/// Delete its handler receives recorded.
struct Follower {
    informer: SharedIndexInformer<Pod>,
    uris: Uris,
    deletes: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

async fn follower(sim: &Sim, ownership: ShardOwnership) -> Follower {
    let (client, uris) = recording_client(sim);
    let mut config = common::fast_config();
    config.reflector.shard_selector = Some(ownership.view().wanted.clone());
    let informer = SharedIndexInformer::from_api(Api::<Pod>::all(client), config);
    let deletes: Arc<Mutex<Vec<String>>> = Arc::default();
    let d = Arc::clone(&deletes);
    informer
        .add_event_handler(handler_fn(move |n: &Notification<Pod>| {
            if let Notification::Delete { obj } = n {
                let o = obj.object();
                d.lock().unwrap().push(format!(
                    "{}/{}",
                    o.namespace().unwrap_or_default(),
                    o.name_any()
                ));
            }
        }))
        .await
        .expect("handler");
    common::start_synced(&informer).await;
    let inf = informer.clone();
    let task = tokio::spawn(async move {
        let mut rx = ownership.subscribe();
        loop {
            let wanted = ownership.view().wanted.clone();
            if inf.shard().as_ref() != Some(&wanted) {
                inf.set_shard(Some(wanted)).expect("set_shard");
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
    Follower {
        informer,
        uris,
        deletes,
        task,
    }
}

/// Issue 31, found on a real Kubernetes 1.36: after an apiserver outage longer than twice the
/// lease duration, a replica's ownership lapsed and came back, its informers listed and watched
/// the **whole** hash space, then shrank back and told their handlers that every object of the
/// other replicas' ranges was deleted. Here three members and their informers ride out a 5 s
/// restart of the server (2 s Leases), the replicas cut off and back at different times:
/// nobody's ranges move, no informer ever asks for more than its replica holds (nor for
/// everything, with no `shardSelector`), and no handler hears of a deletion, since nothing was
/// deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_neither_widens_what_informers_ask_for_nor_deletes_anything() {
    let sim = common::sim().await;
    let kube = client(&sim);
    common::create_pods(&kube, "a", 24).await;
    common::create_pods(&kube, "b", 24).await;
    let sampler = Sampler::default();
    let sampling = sampler.start();
    let mut members = Vec::new();
    let mut followers = Vec::new();
    // b and c reach the server through a cut of their own.
    let cut = Cut::default();
    for id in ["a", "b", "c"] {
        let m = if id == "a" {
            start(&sim, &sampler, id)
        } else {
            let member_client = kube::client::ClientBuilder::try_from(sim.kube_config())
                .expect("client builder")
                .with_layer(&cut)
                .build();
            start_with(member_client, &sampler, id)
        };
        followers.push(follower(&sim, m.ownership.clone()).await);
        members.push(m);
    }
    let refs: Vec<&Member> = members.iter().collect();
    eventually("three members partition the space", || converged(&refs)).await;
    let held: Vec<ShardSelector> = members
        .iter()
        .map(|m| m.ownership.view().held.clone())
        .collect();
    let server = uids(&kube).await;
    let want: BTreeMap<usize, BTreeSet<String>> = held
        .iter()
        .enumerate()
        .map(|(i, h)| (i, in_shard(&server, h)))
        .collect();
    let caches_hold_their_shards = |followers: &[Follower]| {
        followers
            .iter()
            .enumerate()
            .all(|(i, f)| cached(&f.informer) == want[&i])
    };
    eventually("each informer caches its replica's shard", || {
        caches_hold_their_shards(&followers)
    })
    .await;
    for f in &followers {
        f.uris.0.lock().unwrap().clear();
    }

    // b and c lose the server first, and a reads their last renews (two rounds of a's after the
    // cut); then the server goes away for 5 s (2 s Leases); a gets it back first, and b and c
    // only once a has renewed: a's first rounds find their Leases unchanged for over 5 s. (The
    // real run: a 13 s outage, 4 s Leases, replicas back at different times.)
    cut.set(true);
    rounds(&kube, "a", 2).await;
    sim.restart(Duration::from_secs(5)).await;
    rounds(&kube, "a", 1).await;
    cut.set(false);
    eventually("the ring is back, every Lease renewed", || converged(&refs)).await;
    eventually("each informer caches its replica's shard again", || {
        caches_hold_their_shards(&followers)
    })
    .await;

    for (i, (m, f)) in members.iter().zip(&followers).enumerate() {
        assert_eq!(
            m.ownership.view().held,
            held[i],
            "{}'s ranges moved: taken over after an outage it shared",
            m.id
        );
        let requests: Vec<String> = f.uris.0.lock().unwrap().clone();
        assert!(
            requests.iter().any(|u| pods_shard(u).is_some()),
            "{}'s informer sent nothing after the restart",
            m.id
        );
        for uri in &requests {
            let Some(shard) = pods_shard(uri) else {
                continue;
            };
            let shard = shard.unwrap_or_else(|| panic!("{} asked for every pod: {uri}", m.id));
            assert!(
                shard.difference(&held[i]).expect("one field").is_empty(),
                "{} asked for more than it holds ({}): {uri}",
                m.id,
                held[i]
            );
        }
        let deletes = f.deletes.lock().unwrap().clone();
        assert!(
            deletes.is_empty(),
            "{} told its handler of deletions: {deletes:?}",
            m.id
        );
    }
    sampling.abort();
    sampler.assert_clean();
    for f in followers {
        f.task.abort();
        f.informer.shutdown().await;
    }
    // Leave while the fake controllers still acknowledge the drains.
    for m in members {
        if let Some(h) = m.handle {
            h.stop().await.expect("stops");
        }
        m.controller.abort();
    }
}
