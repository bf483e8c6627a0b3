//! What a real cluster runs and the simulated API server does not (kinformer-sim runs no
//! controllers): the ReplicaSet controller (pods to match `spec.replicas`, ReplicaSet status),
//! the scheduler's and the kubelet's part (a pod is placed on one of a few fake Nodes, which the
//! simulation creates, and becomes Running and Ready after `ready_after`, with its containers'
//! statuses and an IP of its own, so `kubectl get pods -o wide` reads as on a cluster), and the
//! garbage collector (ReplicaSets whose owning Deployment is gone, pods whose ReplicaSet is gone).
//!
//! ReplicaSet status follows the ReplicaSet controller's `podutil.IsPodAvailable`: a pod counts
//! in `status.availableReplicas` only once it has been Ready (its `Ready` condition's
//! `lastTransitionTime`) for more than the ReplicaSet's `spec.minReadySeconds`. The ReplicaSet
//! is requeued for the moment its next pod becomes available, so availability appears on time,
//! without another write to wake it up.
//!
//! It is a second, smaller controller on the same library: its own informer factory, key sinks
//! mapping Pod and Deployment events to ReplicaSet keys, a workqueue and workers. Only the
//! embedded demo and the tests start it; against a real cluster the real ones do this work.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use k8s_openapi::{
    api::{
        apps::v1::{Deployment, ReplicaSet, ReplicaSetStatus},
        core::v1::{
            ContainerState, ContainerStateRunning, ContainerStatus, Node, NodeAddress,
            NodeCondition, NodeStatus, Pod, PodCondition, PodIP, PodStatus,
        },
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time},
    jiff::{self, Timestamp},
};
use kinformer_actors::{
    AsyncWorkQueue, InformerConfig, KeyMapper, LazyObject, ListenerConfig, Notification, ObjectKey,
    SharedIndexInformer, SharedInformerFactory,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, PostParams, Preconditions},
};
use tokio::task::JoinHandle;

use crate::sync::{controller_of, is_controlled_by, rs_replicas};

/// Options of the simulation.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// How long a new pod takes to become Ready.
    pub ready_after: Duration,
    /// Workers.
    pub workers: usize,
    /// Delete ReplicaSets whose Deployment is gone, and pods whose ReplicaSet is gone.
    pub garbage_collect: bool,
    /// Informer options.
    pub informer: InformerConfig,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            ready_after: Duration::from_millis(300),
            workers: 2,
            garbage_collect: true,
            informer: InformerConfig::default(),
        }
    }
}

/// Counters of the simulation.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClusterStats {
    /// Pods created by the ReplicaSet controller.
    pub pods_created: u64,
    /// Pods deleted by the ReplicaSet controller (scale-down).
    pub pods_deleted: u64,
    /// Pods marked Ready.
    pub pods_ready: u64,
    /// ReplicaSets deleted by the garbage collector.
    pub rs_collected: u64,
    /// Pods deleted by the garbage collector.
    pub pods_collected: u64,
    /// ReplicaSet status writes.
    pub rs_status_updates: u64,
}

#[derive(Default)]
struct Counters {
    pods_created: AtomicU64,
    pods_deleted: AtomicU64,
    pods_ready: AtomicU64,
    rs_collected: AtomicU64,
    pods_collected: AtomicU64,
    rs_status_updates: AtomicU64,
}

struct Inner {
    client: Client,
    options: ClusterOptions,
    factory: SharedInformerFactory,
    replica_sets: SharedIndexInformer<ReplicaSet>,
    pods: SharedIndexInformer<Pod>,
    deployments: SharedIndexInformer<Deployment>,
    queue: AsyncWorkQueue<ObjectKey>,
    first_seen: Mutex<HashMap<String, Instant>>,
    expectations: Mutex<HashMap<ObjectKey, Expectation>>,
    counters: Counters,
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// Pods placed so far: the next pod's node is `NODES[placed % NODES.len()]`.
    placed: AtomicU64,
    /// Pods given an IP so far: the next pod's IP is [`pod_ip`] of it.
    addressed: AtomicU64,
}

/// The fake Nodes pods are placed on (created at start when absent).
const NODES: [&str; 3] = ["node-1", "node-2", "node-3"];

/// The `n`th pod IP handed out (from 0): 10.244.0.1, …, 10.244.0.254, 10.244.1.1, …; distinct
/// for the first 65,024 pods, far beyond what a demo or a test creates.
fn pod_ip(n: u64) -> String {
    format!("10.244.{}.{}", (n / 254) % 256, n % 254 + 1)
}

/// Creates the fake Nodes, Ready, unless they exist. A server that refuses (a real cluster's
/// RBAC) only costs `kubectl get node`: pods still name them.
async fn create_nodes(client: &Client) {
    let api: Api<Node> = Api::all(client.clone());
    for (i, name) in NODES.iter().enumerate() {
        let node = Node {
            metadata: ObjectMeta {
                name: Some((*name).into()),
                labels: Some([("kubernetes.io/hostname".to_string(), (*name).to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        let created = match api.create(&PostParams::default(), &node).await {
            Ok(created) => created,
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => {
                tracing::warn!(node = %name, error = %e, "cluster simulation: could not create a node");
                continue;
            }
        };
        // Status through its subresource, as the node's kubelet reports it.
        let mut ready = created;
        ready.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("KubeletReady".into()),
                ..NodeCondition::default()
            }]),
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: format!("192.168.0.{}", i + 1),
            }]),
            ..NodeStatus::default()
        });
        if let Err(e) = api
            .replace_status(name, &PostParams::default(), &ready)
            .await
        {
            tracing::warn!(node = %name, error = %e, "cluster simulation: could not mark a node Ready");
        }
    }
}

/// The running simulation.
#[derive(Clone)]
pub struct ClusterSim {
    inner: Arc<Inner>,
}

/// Pods created or deleted by the last round of one ReplicaSet, not yet seen in the cache.
struct Expectation {
    created: Vec<String>,
    deleted: Vec<String>,
    at: Instant,
}

/// After this long, unmet expectations are dropped (a missed event must not wedge a ReplicaSet).
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(10);

fn ready_condition(p: &Pod) -> Option<&PodCondition> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
}

/// A pod in phase `Succeeded` or `Failed` (`podutil.IsPodTerminal`).
fn is_finished(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn is_ready(p: &Pod) -> bool {
    ready_condition(p).is_some_and(|c| c.status == "True")
}

/// client-go's `podutil.IsPodAvailable`, with the wait left: `None` when the pod is not
/// Ready; `Some(ZERO)` when it is available (Ready, and `minReadySeconds` is 0 or its Ready
/// condition turned true more than `minReadySeconds` before `now`); else how long until it is.
fn available_in(p: &Pod, min_ready_seconds: i32, now: Timestamp) -> Option<Duration> {
    let c = ready_condition(p).filter(|c| c.status == "True")?;
    if min_ready_seconds <= 0 {
        return Some(Duration::ZERO);
    }
    // No transition time: never available with a minReadySeconds (upstream's `IsZero` check);
    // the pod's next status write re-evaluates it.
    let since = c.last_transition_time.as_ref()?.0;
    let min_ready = jiff::SignedDuration::from_secs(i64::from(min_ready_seconds));
    let ready_for = now.duration_since(since);
    if ready_for > min_ready {
        Some(Duration::ZERO)
    } else {
        // Strictly after (upstream compares with `Before`): a millisecond past the boundary.
        Some(
            Duration::try_from(min_ready - ready_for)
                .unwrap_or(Duration::ZERO)
                .saturating_add(Duration::from_millis(1)),
        )
    }
}

impl ClusterSim {
    /// Starts the simulation and waits for its caches.
    pub async fn start(client: Client, options: ClusterOptions) -> anyhow::Result<Self> {
        let factory =
            SharedInformerFactory::new(client.clone()).with_config(options.informer.clone());
        let replica_sets = factory.informer::<ReplicaSet>();
        let pods = factory.informer::<Pod>();
        let deployments = factory.informer::<Deployment>();
        let queue = AsyncWorkQueue::<ObjectKey>::new();

        replica_sets
            .add_key_sink(
                queue.clone(),
                None,
                ListenerConfig::default().name("sim-rs"),
            )
            .await?;
        let pod_mapper: KeyMapper<Pod> = Arc::new(|_key, n: &Notification<LazyObject<Pod>>| {
            let pod = n.object();
            pod.controller_ref()
                .filter(|o| o.kind == "ReplicaSet")
                .map(|o| ObjectKey::new(pod.namespace(), o.name))
                .into_iter()
                .collect()
        });
        pods.add_key_sink(
            queue.clone(),
            Some(pod_mapper),
            ListenerConfig::default().name("sim-pods"),
        )
        .await?;
        // A deleted Deployment: its ReplicaSets are garbage now.
        let rs_lister = replica_sets.lister();
        let d_mapper: KeyMapper<Deployment> =
            Arc::new(move |_key, n: &Notification<LazyObject<Deployment>>| {
                let Notification::Delete { obj } = n else {
                    return Vec::new();
                };
                let d = obj.object();
                let (Some(ns), Some(uid)) = (d.namespace(), d.uid()) else {
                    return Vec::new();
                };
                rs_lister
                    .lazy()
                    .namespaced(ns)
                    .list()
                    .iter()
                    .filter(|rs| rs.controller_ref().is_some_and(|o| o.uid == uid))
                    .filter_map(|rs| rs.name().map(|name| ObjectKey::new(Some(ns), name)))
                    .collect()
            });
        deployments
            .add_key_sink(
                queue.clone(),
                Some(d_mapper),
                ListenerConfig::default().name("sim-deployments"),
            )
            .await?;

        create_nodes(&client).await;
        factory.start()?;
        let synced = factory.wait_for_cache_sync(Duration::from_secs(60)).await;
        anyhow::ensure!(
            synced.values().all(|s| *s),
            "cluster simulation caches not synced: {synced:?}"
        );
        let inner = Arc::new(Inner {
            client,
            options,
            factory,
            replica_sets,
            pods,
            deployments,
            queue,
            first_seen: Mutex::new(HashMap::new()),
            expectations: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            workers: Mutex::new(Vec::new()),
            placed: AtomicU64::new(0),
            addressed: AtomicU64::new(0),
        });
        {
            let mut workers = inner.workers.lock().unwrap_or_else(|p| p.into_inner());
            for _ in 0..inner.options.workers.max(1) {
                let inner = Arc::clone(&inner);
                workers.push(tokio::spawn(async move {
                    while let Some(key) = inner.queue.get().await {
                        match inner.sync(&key).await {
                            Ok(()) => inner.queue.forget(&key),
                            Err(e) => {
                                tracing::debug!(replicaset = %key, error = %e, "cluster simulation: retrying");
                                inner.queue.add_rate_limited(key.clone());
                            }
                        }
                        inner.queue.done(&key);
                    }
                }));
            }
        }
        tracing::info!(ready_after = ?inner.options.ready_after, "cluster simulation started (ReplicaSet controller, kubelet readiness, garbage collector)");
        Ok(ClusterSim { inner })
    }

    /// Stops the workers and informers.
    pub async fn shutdown(&self) {
        self.inner.queue.shut_down();
        let workers: Vec<JoinHandle<()>> =
            std::mem::take(&mut *self.inner.workers.lock().unwrap_or_else(|p| p.into_inner()));
        for w in workers {
            // A worker that panicked would otherwise vanish without a trace.
            if let Err(e) = w.await {
                tracing::warn!(error = %e, "cluster simulation worker ended abnormally");
            }
        }
        self.inner.factory.shutdown().await;
    }

    /// The counters so far.
    pub fn stats(&self) -> ClusterStats {
        let c = &self.inner.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ClusterStats {
            pods_created: l(&c.pods_created),
            pods_deleted: l(&c.pods_deleted),
            pods_ready: l(&c.pods_ready),
            rs_collected: l(&c.rs_collected),
            pods_collected: l(&c.pods_collected),
            rs_status_updates: l(&c.rs_status_updates),
        }
    }
}

fn deleted_ok(r: kube::Result<impl Sized>) -> anyhow::Result<bool> {
    match r {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn with_uid(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// A pod's delete by the simulation: grace 0. A scheduled pod deleted gracefully would wait for
/// the sim's kubelet stand-in (up to `SimConfig::pod_termination`); the simulated kubelet
/// stops its (imaginary) containers at once, so scale-downs take what they took before pods
/// had a node.
fn pod_delete(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        grace_period_seconds: Some(0),
        ..with_uid(uid)
    }
}

impl Inner {
    /// The status the kubelet reports for a started pod: Running, each container running and
    /// ready (kubectl's READY column counts `containerStatuses[].ready`), the conditions a
    /// kubelet sets, an IP of its own and its node's.
    fn running_status(&self, p: &Pod) -> PodStatus {
        let t = Time(Timestamp::now());
        let ip = pod_ip(self.addressed.fetch_add(1, Ordering::Relaxed));
        let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let host_ip = NODES
            .iter()
            .position(|n| Some(*n) == node)
            .map(|i| format!("192.168.0.{}", i + 1));
        let containers = p.spec.as_ref().map_or(&[][..], |s| &s.containers[..]);
        let condition = |type_: &str| PodCondition {
            type_: type_.into(),
            status: "True".into(),
            last_transition_time: Some(t.clone()),
            ..PodCondition::default()
        };
        PodStatus {
            phase: Some("Running".into()),
            start_time: Some(t.clone()),
            host_ip,
            pod_ip: Some(ip.clone()),
            pod_ips: Some(vec![PodIP { ip }]),
            conditions: Some(
                ["PodScheduled", "Initialized", "ContainersReady", "Ready"]
                    .into_iter()
                    .map(condition)
                    .collect(),
            ),
            container_statuses: Some(
                containers
                    .iter()
                    .map(|c| ContainerStatus {
                        name: c.name.clone(),
                        image: c.image.clone().unwrap_or_default(),
                        image_id: String::new(),
                        ready: true,
                        started: Some(true),
                        restart_count: 0,
                        state: Some(ContainerState {
                            running: Some(ContainerStateRunning {
                                started_at: Some(t.clone()),
                            }),
                            ..ContainerState::default()
                        }),
                        ..ContainerStatus::default()
                    })
                    .collect(),
            ),
            ..PodStatus::default()
        }
    }

    async fn sync(&self, key: &ObjectKey) -> anyhow::Result<()> {
        let (Some(ns), name) = key.split() else {
            return Ok(());
        };
        let pod_api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let rs_api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), ns);
        let Some(rs) = self.replica_sets.lister().get(ns, name) else {
            return self.collect_pods(ns, name, &rs_api, &pod_api).await;
        };
        if rs.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        if self.options.garbage_collect && self.owner_gone(ns, &rs).await? {
            if deleted_ok(
                rs_api
                    .delete(name, &with_uid(rs.metadata.uid.clone()))
                    .await,
            )? {
                self.counters.rs_collected.fetch_add(1, Ordering::Relaxed);
                tracing::info!(replicaset = %key, "garbage collector: deleted ReplicaSet of a deleted Deployment");
            }
            return Ok(());
        }
        let uid = rs.metadata.uid.clone().unwrap_or_default();
        let (pods, terminating): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) = self
            .pods
            .lister()
            .namespaced(ns)
            .list()
            .into_iter()
            .filter(|p| is_controlled_by(&p.metadata, &uid))
            .partition(|p| p.metadata.deletion_timestamp.is_none());
        // `controller.FilterTerminatingPods`: being deleted and not yet finished.
        let terminating = terminating.iter().filter(|p| !is_finished(p)).count();

        // ReplicaSet controller: create or delete pods to match spec.replicas, unless the
        // pods of its last round are not all in the cache yet (client-go's expectations:
        // without them a stale cache makes it create or delete too many).
        let want = usize::try_from(rs_replicas(&rs).max(0)).unwrap_or(0);
        let mut expect = Expectation {
            created: Vec::new(),
            deleted: Vec::new(),
            at: Instant::now(),
        };
        let result = if !self.expectations_met(key, ns) {
            Ok(())
        } else {
            self.manage(&rs, &pods, want, &pod_api, &mut expect).await
        };
        if !expect.created.is_empty() || !expect.deleted.is_empty() {
            self.expectations
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.clone(), expect);
        }
        result?;
        self.kubelet_and_status(key, &rs, &pods, terminating, &rs_api, &pod_api)
            .await
    }

    fn expectations_met(&self, key: &ObjectKey, ns: &str) -> bool {
        let mut all = self.expectations.lock().unwrap_or_else(|e| e.into_inner());
        let Some(e) = all.get(key) else {
            return true;
        };
        let pods = self.pods.lister();
        let met = e.created.iter().all(|n| pods.get(ns, n).is_some())
            && e.deleted.iter().all(|n| pods.get(ns, n).is_none());
        if met || e.at.elapsed() > EXPECTATIONS_TIMEOUT {
            all.remove(key);
            return true;
        }
        false
    }

    async fn manage(
        &self,
        rs: &ReplicaSet,
        pods: &[Arc<Pod>],
        want: usize,
        pod_api: &Api<Pod>,
        expect: &mut Expectation,
    ) -> anyhow::Result<()> {
        let name = rs.name_any();
        let ns = rs.namespace().unwrap_or_default();
        let uid = rs.metadata.uid.clone().unwrap_or_default();
        if pods.len() < want {
            let template = rs.spec.template.clone().unwrap_or_default();
            for _ in pods.len()..want {
                // The scheduler's part: round-robin over the fake nodes.
                let placed = self.placed.fetch_add(1, Ordering::Relaxed);
                let node = NODES[usize::try_from(placed).unwrap_or(0) % NODES.len()];
                let mut spec = template.spec.clone().unwrap_or_default();
                spec.node_name = Some(node.into());
                let pod = Pod {
                    metadata: ObjectMeta {
                        generate_name: Some(format!("{name}-")),
                        namespace: Some(ns.clone()),
                        labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
                        owner_references: Some(vec![OwnerReference {
                            api_version: "apps/v1".into(),
                            kind: "ReplicaSet".into(),
                            name: name.clone(),
                            uid: uid.clone(),
                            controller: Some(true),
                            block_owner_deletion: Some(true),
                        }]),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                    status: None,
                };
                let created = pod_api
                    .create(&PostParams::default(), &pod)
                    .await
                    .context("create pod")?;
                expect.created.push(created.name_any());
                self.counters.pods_created.fetch_add(1, Ordering::Relaxed);
            }
        } else if pods.len() > want {
            // Not-ready pods first, then the newest (the real controller's ranking, simplified).
            let mut victims = pods.to_vec();
            victims.sort_by(|a, b| {
                is_ready(a)
                    .cmp(&is_ready(b))
                    .then_with(|| {
                        b.metadata
                            .creation_timestamp
                            .cmp(&a.metadata.creation_timestamp)
                    })
                    .then_with(|| b.metadata.name.cmp(&a.metadata.name))
            });
            for p in victims.iter().take(pods.len() - want) {
                if deleted_ok(
                    pod_api
                        .delete(&p.name_any(), &pod_delete(p.metadata.uid.clone()))
                        .await,
                )? {
                    expect.deleted.push(p.name_any());
                    self.counters.pods_deleted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    async fn kubelet_and_status(
        &self,
        key: &ObjectKey,
        rs: &ReplicaSet,
        pods: &[Arc<Pod>],
        terminating: usize,
        rs_api: &Api<ReplicaSet>,
        pod_api: &Api<Pod>,
    ) -> anyhow::Result<()> {
        let name = key.name();
        // Kubelet: pods become Running and Ready `ready_after` after they were first seen.
        let now = Instant::now();
        let mut wait: Option<Duration> = None;
        for p in pods.iter().filter(|p| !is_ready(p)) {
            let pod_uid = p.metadata.uid.clone().unwrap_or_default();
            let seen = *self
                .first_seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(pod_uid.clone())
                .or_insert(now);
            let age = now.saturating_duration_since(seen);
            if age < self.options.ready_after {
                let left = self.options.ready_after - age;
                wait = Some(wait.map_or(left, |w| w.min(left)));
                continue;
            }
            let mut ready = (**p).clone();
            ready.status = Some(self.running_status(p));
            match pod_api
                .replace_status(&p.name_any(), &PostParams::default(), &ready)
                .await
            {
                Ok(_) => {
                    self.counters.pods_ready.fetch_add(1, Ordering::Relaxed);
                    self.first_seen
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&pod_uid);
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(w) = wait {
            self.queue.add_after(key.clone(), w);
        }

        // ReplicaSet status from its pods (the cache's: pods marked Ready just now count from
        // their next event, which requeues this ReplicaSet).
        let ready = i32::try_from(pods.iter().filter(|p| is_ready(p)).count()).unwrap_or(i32::MAX);
        let min_ready_seconds = rs.spec.min_ready_seconds.unwrap_or(0);
        let stamp = Timestamp::now();
        let mut available = 0_i32;
        let mut next_available: Option<Duration> = None;
        for wait in pods
            .iter()
            .filter_map(|p| available_in(p, min_ready_seconds, stamp))
        {
            if wait.is_zero() {
                available = available.saturating_add(1);
            } else {
                next_available = Some(next_available.map_or(wait, |w| w.min(wait)));
            }
        }
        // Re-evaluated on time: the pod's availability is a function of the clock, not of an
        // event.
        if let Some(w) = next_available {
            self.queue.add_after(key.clone(), w);
        }
        let replicas = i32::try_from(pods.len()).unwrap_or(i32::MAX);
        let status = ReplicaSetStatus {
            replicas,
            fully_labeled_replicas: Some(replicas),
            ready_replicas: Some(ready),
            available_replicas: Some(available),
            observed_generation: rs.metadata.generation,
            // As kube's ReplicaSet controller writes it since 1.33
            // (DeploymentReplicaSetTerminatingReplicas, on by default since 1.35).
            terminating_replicas: Some(i32::try_from(terminating).unwrap_or(i32::MAX)),
            ..ReplicaSetStatus::default()
        };
        if rs.status.as_ref() != Some(&status) {
            let mut updated = rs.clone();
            updated.status = Some(status);
            match rs_api
                .replace_status(name, &PostParams::default(), &updated)
                .await
            {
                Ok(_) => {
                    self.counters
                        .rs_status_updates
                        .fetch_add(1, Ordering::Relaxed);
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// True when the ReplicaSet's controlling Deployment no longer exists. The cache says so
    /// first; the API confirms (the Deployment may just not be cached yet), as the real garbage
    /// collector does before deleting.
    async fn owner_gone(&self, ns: &str, rs: &ReplicaSet) -> anyhow::Result<bool> {
        let Some(owner) = controller_of(&rs.metadata) else {
            return Ok(false);
        };
        if owner.kind != "Deployment" {
            return Ok(false);
        }
        let cached = self.deployments.lister().get(ns, &owner.name);
        if cached.is_some_and(|d| d.metadata.uid.as_deref() == Some(owner.uid.as_str())) {
            return Ok(false);
        }
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), ns);
        let live = api.get_opt(&owner.name).await?;
        Ok(live.is_none_or(|d| d.metadata.uid.as_deref() != Some(owner.uid.as_str())))
    }

    /// Garbage collector for pods of a ReplicaSet no longer cached: delete the ones whose
    /// ReplicaSet the API confirms gone.
    async fn collect_pods(
        &self,
        ns: &str,
        name: &str,
        rs_api: &Api<ReplicaSet>,
        pod_api: &Api<Pod>,
    ) -> anyhow::Result<()> {
        if !self.options.garbage_collect {
            return Ok(());
        }
        let orphans: Vec<Arc<Pod>> = self
            .pods
            .lister()
            .namespaced(ns)
            .list()
            .into_iter()
            .filter(|p| {
                controller_of(&p.metadata).is_some_and(|o| o.kind == "ReplicaSet" && o.name == name)
            })
            .collect();
        if orphans.is_empty() {
            return Ok(());
        }
        let live_uid = rs_api.get_opt(name).await?.and_then(|rs| rs.metadata.uid);
        for p in orphans {
            let owner_uid = controller_of(&p.metadata).map(|o| o.uid.clone());
            if owner_uid.is_some() && owner_uid == live_uid {
                continue;
            }
            if deleted_ok(
                pod_api
                    .delete(&p.name_any(), &pod_delete(p.metadata.uid.clone()))
                    .await,
            )? {
                self.counters.pods_collected.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_ready_since(status: &str, since: Option<Timestamp>) -> Pod {
        Pod {
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: status.into(),
                    last_transition_time: since.map(Time),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn not_ready_is_never_available() {
        assert_eq!(available_in(&Pod::default(), 0, at(0)), None);
        assert_eq!(
            available_in(&pod_ready_since("False", Some(at(0))), 0, at(99)),
            None
        );
    }

    #[test]
    fn ready_is_available_at_once_without_min_ready_seconds() {
        let p = pod_ready_since("True", Some(at(0)));
        assert_eq!(available_in(&p, 0, at(0)), Some(Duration::ZERO));
        // Upstream's IsPodAvailable ignores the transition time when minReadySeconds is 0.
        let p = pod_ready_since("True", None);
        assert_eq!(available_in(&p, 0, at(0)), Some(Duration::ZERO));
    }

    #[test]
    fn min_ready_seconds_counts_from_the_ready_transition_strictly() {
        let p = pod_ready_since("True", Some(at(10)));
        // Ready for 2 s of 5: 3 s (and a millisecond) left.
        assert_eq!(
            available_in(&p, 5, at(12)),
            Some(Duration::from_millis(3_001))
        );
        // Exactly at the boundary: not yet (upstream: `lastTransition + minReady` before now).
        assert_eq!(available_in(&p, 5, at(15)), Some(Duration::from_millis(1)));
        assert_eq!(available_in(&p, 5, at(16)), Some(Duration::ZERO));
        // No transition time: not available while minReadySeconds is set.
        assert_eq!(
            available_in(&pod_ready_since("True", None), 5, at(16)),
            None
        );
    }
}
