//! The deployment controller, as kube-controller-manager's is built: one
//! [`SharedInformerFactory`] with informers for Deployments, ReplicaSets and Pods (one watch
//! each, restarted when it ends; a sharded replica's watch covers its ranges), key sinks that turn every event into the key of the Deployment it concerns (a
//! ReplicaSet through its controller ownerReference, a Pod through its ReplicaSet, both looked
//! up in the listers), a rate-limited [`AsyncWorkQueue`], and N workers that reconcile one Deployment
//! key at a time: read the listers, claim the ReplicaSets (adopt matching orphans, release
//! owned ones that no longer match: [`sync::claim_replica_sets`]), [`sync::plan`], execute the
//! plan through the API. A ReplicaSet event maps to its controller's key, or for an orphan to
//! every Deployment whose selector matches it (so it can adopt it).
//!
//! Errors are retried with the queue's rate limiter (5 ms doubling, 10 qps overall), up to
//! [`MAX_RETRIES`] times like client-go; success `forget`s the key. A 409 Conflict (the cache
//! was stale: someone else wrote the object) is retried the same way: the next sync reads the
//! lister again, which by then holds the newer object. Two things keep 409s rare (issue 31):
//! a sync first waits, at most [`OWN_WRITE_WAIT`], until the caches hold the controller's own
//! last writes to that Deployment and its namespace's ReplicaSets (K3), and a status write is
//! not sent when the cache already holds a newer Deployment than the one planned from (the key
//! is queued again: [`Stats::stale_plans`]). A malformed Deployment is logged and skipped until
//! it changes.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{
        apps::v1::{Deployment, ReplicaSet},
        core::v1::Pod,
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    jiff::Timestamp,
};
use kinformer_actors::{
    AsyncWorkQueue, InformerConfig, InformerError, InformerOptions, KeyMapper, LazyObject,
    ListenerConfig, Lister, Notification, ObjectKey, OwnerRef, ResourceEventHandlerFuncs,
    SharedIndexInformer, SharedInformerFactory, Telemetry, TelemetryError,
    trace::{self, ReconcileResult, ReconcileSpan, WriteVerb},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
};
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use crate::reconcile::AdoptionError;
use crate::reconcile::{self as sync, Action};
use crate::shard::{
    self as sharding, ShardCounters, ShardOptions, ShardProbe, ShardStats, WriteRecord,
};

/// The label selector of the Deployments the example manages by default.
pub const DEFAULT_SELECTOR: &str = "kinformer.example/managed=true";

/// Retries of one key before it is dropped from the queue (client-go's `maxRetries`).
pub const MAX_RETRIES: u32 = 15;

/// How long a sync waits, at most, for the Deployment cache to hold the controller's own last
/// write to that Deployment before it plans anyway (read-your-writes, K3).
pub const OWN_WRITE_WAIT: Duration = Duration::from_secs(2);

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Concurrent reconciles (client-go's `ConcurrentDeploymentSyncs`, default 5 there).
    pub workers: usize,
    /// Only Deployments matching this label selector are managed (None: all).
    pub selector: Option<String>,
    /// Only this namespace (None: all).
    pub namespace: Option<String>,
    /// Informer options (reflector backoff, FIFO, ...).
    pub informer: InformerConfig,
    /// How long to wait for the caches before giving up.
    pub sync_timeout: Duration,
    /// Where the informers and the workqueue report metrics, health and debug state (None:
    /// nowhere).
    pub telemetry: Option<Telemetry>,
    /// The `fieldManager` of every write (None: the server takes the client's User-Agent).
    /// A sharded replica writes as `deployment-controller-<id>` whatever this says.
    pub field_manager: Option<String>,
    /// Run as one replica of a sharded controller (docs/scaling-out.md); None: own everything.
    pub shard: Option<ShardOptions>,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            workers: 2,
            selector: Some(DEFAULT_SELECTOR.into()),
            namespace: None,
            informer: InformerConfig::default(),
            sync_timeout: Duration::from_secs(120),
            telemetry: None,
            field_manager: None,
            shard: None,
        }
    }
}

/// Why the controller could not be built or started.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// An informer refused a transform or a handler, or did not start.
    #[error("informers: {0}")]
    Informer(#[from] InformerError),
    /// The workqueue's metrics could not be registered.
    #[error("registering the workqueue's metrics: {0}")]
    Telemetry(#[from] TelemetryError),
    /// The caches did not sync within `ControllerOptions::sync_timeout`.
    #[error("caches not synced after {timeout:?}: {pending:?}")]
    CacheSync {
        /// The bound that passed.
        timeout: Duration,
        /// The informers still unsynced.
        pending: Vec<String>,
    },
}

/// Why a reconcile did not finish.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The Deployment cannot be acted on; retrying will not help.
    #[error(transparent)]
    Invalid(#[from] sync::InvalidDeployment),
    /// A write lost an optimistic-concurrency race (409): the cache was stale.
    #[error("conflict writing {0}")]
    Conflict(String),
    /// The new ReplicaSet's name is taken by a different one; the collision count was raised,
    /// so the next sync computes another hash (client-go's behaviour).
    #[error("hash collision: ReplicaSet {0} exists with another template")]
    Collision(String),
    /// Any other API failure.
    #[error("{0}")]
    Api(#[from] kube::Error),
    /// A key without a namespace (Deployments are namespaced).
    #[error("bad key {0}")]
    BadKey(String),
    /// The namespace is not this replica's any more (sharded): the write was not made.
    #[error("namespace {0} is not owned by this replica")]
    NotOwned(String),
    /// The Deployment cache moved past the object the sync planned from (someone wrote it
    /// meanwhile): its status write would be a 409, so it was not sent; the key is queued again
    /// and the next sync plans from the newer object.
    #[error("deployment {0} changed while the sync planned; replanning")]
    Stale(String),
    /// The cache has not yet seen the previous owner's last write of a range that moved in.
    #[error("cache has not caught up with resourceVersion {0} of the previous owner")]
    CacheBehind(String),
    /// An orphan ReplicaSet could not be adopted: the Deployment is gone, replaced or being
    /// deleted (`RecheckDeletionTimestamp`).
    #[error("can't adopt ReplicaSet {rs}: {source}")]
    Adoption {
        /// The ReplicaSet.
        rs: String,
        /// Why.
        #[source]
        source: AdoptionError,
    },
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Counters of the controller's work.
#[derive(Debug, Default)]
struct Counters {
    syncs: AtomicU64,
    errors: AtomicU64,
    conflicts: AtomicU64,
    invalid: AtomicU64,
    dropped: AtomicU64,
    gone: AtomicU64,
    rs_created: AtomicU64,
    rs_scaled: AtomicU64,
    rs_deleted: AtomicU64,
    rs_adopted: AtomicU64,
    rs_released: AtomicU64,
    status_updates: AtomicU64,
    requeues: AtomicU64,
    own_write_waits: AtomicU64,
    own_write_timeouts: AtomicU64,
    stale_plans: AtomicU64,
}

/// A snapshot of the controller's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Reconciles run.
    pub syncs: u64,
    /// Reconciles that failed (not counting conflicts and invalid Deployments).
    pub errors: u64,
    /// Reconciles that hit a 409 (or a hash collision) and were retried.
    pub conflicts: u64,
    /// Reconciles of malformed Deployments (skipped).
    pub invalid: u64,
    /// Keys dropped after [`MAX_RETRIES`].
    pub dropped: u64,
    /// Reconciles of Deployments no longer in the cache (deleted: nothing to do).
    pub gone: u64,
    /// ReplicaSets created.
    pub rs_created: u64,
    /// ReplicaSet updates (scale, replica and revision annotations, `minReadySeconds`).
    pub rs_scaled: u64,
    /// Old ReplicaSets deleted (revision history limit).
    pub rs_deleted: u64,
    /// Adoption patches of orphan ReplicaSets that succeeded. A sync retried before the
    /// informer delivered an adoption patches again (idempotent, as upstream's
    /// `ClaimReplicaSets`), so one adoption may count more than once.
    pub rs_adopted: u64,
    /// Release patches (labels no longer matching) that succeeded; like `rs_adopted`, a
    /// stale cache may repeat one.
    pub rs_released: u64,
    /// Deployment status writes.
    pub status_updates: u64,
    /// Rate-limited requeues after a failed reconcile.
    pub requeues: u64,
    /// Adds to the queue that were not deduplicated.
    pub queue_adds: u64,
    /// Syncs that waited for the Deployment cache to catch up with the controller's own last
    /// write to that Deployment ([`OWN_WRITE_WAIT`]).
    pub own_write_waits: u64,
    /// Of those, the waits that ran out (the sync planned from the cache as it was).
    pub own_write_timeouts: u64,
    /// Syncs whose status write was not sent because the Deployment cache already held a
    /// newer Deployment than the one planned from (a sure 409); the key was queued again.
    pub stale_plans: u64,
}

impl Stats {
    /// 409 conflicts (and hash collisions) per Deployment status write: how often a sync
    /// planned from a cache that was behind. None before the first status write.
    pub fn conflict_rate(&self) -> Option<f64> {
        (self.status_updates > 0).then(|| self.conflicts as f64 / self.status_updates as f64)
    }

    /// The counters of several replicas (a sharded controller) added up.
    pub fn sum<'a>(all: impl IntoIterator<Item = &'a Stats>) -> Stats {
        all.into_iter().fold(Stats::default(), |a, b| Stats {
            syncs: a.syncs + b.syncs,
            errors: a.errors + b.errors,
            conflicts: a.conflicts + b.conflicts,
            invalid: a.invalid + b.invalid,
            dropped: a.dropped + b.dropped,
            gone: a.gone + b.gone,
            rs_created: a.rs_created + b.rs_created,
            rs_scaled: a.rs_scaled + b.rs_scaled,
            rs_deleted: a.rs_deleted + b.rs_deleted,
            rs_adopted: a.rs_adopted + b.rs_adopted,
            rs_released: a.rs_released + b.rs_released,
            status_updates: a.status_updates + b.status_updates,
            requeues: a.requeues + b.requeues,
            queue_adds: a.queue_adds + b.queue_adds,
            own_write_waits: a.own_write_waits + b.own_write_waits,
            own_write_timeouts: a.own_write_timeouts + b.own_write_timeouts,
            stale_plans: a.stale_plans + b.stale_plans,
        })
    }
}

/// The final state of one Deployment, for the exit summary.
#[derive(Debug, Clone)]
pub struct DeploymentSummary {
    /// `namespace/name`.
    pub key: String,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.updatedReplicas`.
    pub updated: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`.
    pub observed_generation: i64,
    /// The rollout is complete.
    pub complete: bool,
    /// The first container's image.
    pub image: String,
    /// Its ReplicaSets: name, spec replicas, ready replicas (oldest first).
    pub replica_sets: Vec<(String, i32, i32)>,
}

struct Inner {
    client: Client,
    factory: SharedInformerFactory,
    deployments: SharedIndexInformer<Deployment>,
    replica_sets: SharedIndexInformer<ReplicaSet>,
    pods: SharedIndexInformer<Pod>,
    queue: AsyncWorkQueue<ObjectKey>,
    counters: Counters,
    options: ControllerOptions,
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// The field manager of every write.
    field_manager: Option<String>,
    shard_counters: ShardCounters,
    /// The task that follows ownership changes (sharded only).
    ownership_task: Mutex<Option<JoinHandle<()>>>,
    /// Per Deployment key, the resourceVersion the controller's last write to that Deployment
    /// returned, until the Deployment cache holds it (`await_own_write`).
    own_writes: Mutex<HashMap<ObjectKey, String>>,
    /// The same for its ReplicaSet writes, per ReplicaSet key, until the ReplicaSet cache holds
    /// them.
    own_rs_writes: Mutex<HashMap<ObjectKey, String>>,
}

/// The deployment controller. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct DeploymentController {
    inner: Arc<Inner>,
}

/// The key of the Deployment that controls `meta` (a ReplicaSet), if it is one we manage: the
/// owner must be in the Deployment cache with the same uid (client-go's `resolveControllerRef`).
pub fn owning_deployment(meta: &ObjectMeta, deployments: &Lister<Deployment>) -> Option<ObjectKey> {
    let owner = sync::controller_of(meta)?;
    deployment_of(
        meta.namespace.as_deref()?,
        &OwnerRef::from(owner),
        deployments,
    )
}

/// The key of the Deployment `owner` names in `ns`, if we manage it (same uid in the cache).
fn deployment_of(
    ns: &str,
    owner: &OwnerRef<'_>,
    deployments: &Lister<Deployment>,
) -> Option<ObjectKey> {
    if owner.kind != "Deployment" || !owner.api_version.starts_with("apps/") {
        return None;
    }
    // The uid check reads the metadata only: no Deployment is decoded (lean mode).
    let d = deployments.lazy().get(ns, owner.name)?;
    (d.uid() == Some(owner.uid)).then(|| ObjectKey::new(Some(ns), owner.name))
}

/// The key of the Deployment behind a Pod: Pod → controller ReplicaSet (from the ReplicaSet
/// lister, same uid) → its controller Deployment.
pub fn pod_deployment(
    meta: &ObjectMeta,
    replica_sets: &Lister<ReplicaSet>,
    deployments: &Lister<Deployment>,
) -> Option<ObjectKey> {
    let owner = sync::controller_of(meta)?;
    replica_set_owner(
        meta.namespace.as_deref()?,
        &OwnerRef::from(owner),
        replica_sets,
        deployments,
    )
}

/// [`pod_deployment`] from a Pod's metadata as the informer hands it over (never decoded).
fn lazy_pod_deployment(
    pod: &LazyObject<Pod>,
    replica_sets: &Lister<ReplicaSet>,
    deployments: &Lister<Deployment>,
) -> Option<ObjectKey> {
    replica_set_owner(
        pod.namespace()?,
        &pod.controller_ref()?,
        replica_sets,
        deployments,
    )
}

/// The Deployment behind the ReplicaSet `owner` names in `ns`.
fn replica_set_owner(
    ns: &str,
    owner: &OwnerRef<'_>,
    replica_sets: &Lister<ReplicaSet>,
    deployments: &Lister<Deployment>,
) -> Option<ObjectKey> {
    if owner.kind != "ReplicaSet" {
        return None;
    }
    let rs = replica_sets.lazy().get(ns, owner.name)?;
    if rs.uid() != Some(owner.uid) {
        return None;
    }
    deployment_of(ns, &rs.controller_ref()?, deployments)
}

/// The keys of the Deployments a ReplicaSet event concerns (`addReplicaSet`,
/// `updateReplicaSet`): its controller if it has one, else every cached Deployment of its
/// namespace whose selector matches its labels (`getDeploymentsForReplicaSet`), which may adopt
/// it.
pub fn replica_set_deployments(
    rs: &ReplicaSet,
    deployments: &Lister<Deployment>,
) -> Vec<ObjectKey> {
    lazy_replica_set_deployments(&LazyObject::from_object(Arc::new(rs.clone())), deployments)
}

/// [`replica_set_deployments`] from a ReplicaSet's metadata as the informer hands it over (the
/// ReplicaSet is never decoded; the Deployments of an orphan's namespace are, to read their
/// selectors).
fn lazy_replica_set_deployments(
    rs: &LazyObject<ReplicaSet>,
    deployments: &Lister<Deployment>,
) -> Vec<ObjectKey> {
    let Some(ns) = rs.namespace() else {
        return Vec::new();
    };
    if let Some(owner) = rs.controller_ref() {
        return deployment_of(ns, &owner, deployments).into_iter().collect();
    }
    sync::deployments_selecting(
        ns,
        &rs.labels().to_map(),
        &deployments.namespaced(ns).list(),
    )
    .iter()
    .map(|d| ObjectKey::new(Some(ns), d.metadata.name.as_deref().unwrap_or_default()))
    .collect()
}

fn keys_of_all<K>(n: &Notification<K>, f: impl Fn(&K) -> Vec<ObjectKey>) -> Vec<ObjectKey> {
    let mut keys = BTreeSet::new();
    if let Notification::Update { old, .. } = n {
        keys.extend(f(old));
    }
    keys.extend(f(n.object()));
    keys.into_iter().collect()
}

/// Keys of both sides of a notification (an update may move an object to another owner).
fn keys_of<K>(n: &Notification<K>, f: impl Fn(&K) -> Option<ObjectKey>) -> Vec<ObjectKey> {
    let mut keys = BTreeSet::new();
    if let Notification::Update { old, .. } = n {
        keys.extend(f(old));
    }
    keys.extend(f(n.object()));
    keys.into_iter().collect()
}

fn strip_managed_fields<K: kube::Resource>(mut obj: K) -> K {
    obj.meta_mut().managed_fields = None;
    obj
}

impl DeploymentController {
    /// Builds the informers and registers the handlers; nothing runs before [`start`](Self::start).
    pub async fn new(client: Client, options: ControllerOptions) -> Result<Self, ControllerError> {
        let mut factory =
            SharedInformerFactory::new(client.clone()).with_config(options.informer.clone());
        if let Some(ns) = &options.namespace {
            factory = factory.with_namespace(ns.clone());
        }
        // A sharded replica registers its informers itself, under names that say whose they
        // are (several replicas share one telemetry in the embedded demo).
        if let (Some(t), None) = (&options.telemetry, &options.shard) {
            factory = factory.with_telemetry(t.clone());
        }
        // The selector scopes Deployments only: their ReplicaSets and Pods carry the template's
        // labels, not the Deployment's, and are matched to Deployments through owners.
        // A sharded replica's informers cache `wanted` (KEP-5866): its ranges plus those about
        // to move in, so the cache is warm at the hand-over; the ownership task follows its
        // changes (`set_shard`).
        let shard = options
            .shard
            .as_ref()
            .map(|sh| sh.ownership.view().wanted.clone());
        let deployments = factory.informer_with::<Deployment>(InformerOptions {
            label_selector: options.selector.clone().filter(|s| !s.is_empty()),
            shard: shard.clone(),
            ..InformerOptions::default()
        });
        let replica_sets = factory.informer_with::<ReplicaSet>(InformerOptions {
            shard: shard.clone(),
            ..InformerOptions::default()
        });
        let pods = factory.informer_with::<Pod>(InformerOptions {
            shard,
            ..InformerOptions::default()
        });
        if let (Some(t), Some(sh)) = (&options.telemetry, &options.shard) {
            let manager = sharding::field_manager(&sh.id);
            let held = sh.ownership.view().held.clone();
            let name = |resource| informer_name(&manager, resource, &held);
            t.register_informer_as(&name("deployments"), &deployments);
            t.register_informer_as(&name("replicasets"), &replica_sets);
            t.register_informer_as(&name("pods"), &pods);
        }
        // Nothing reads managedFields: do not keep them in memory (P2). A lean cache (I7) is
        // told to cut them out of the bytes instead: a typed transform would decode every object.
        if !options.informer.cache.is_lean() {
            deployments.set_transform(strip_managed_fields)?;
            replica_sets.set_transform(strip_managed_fields)?;
            pods.set_transform(strip_managed_fields)?;
        }

        // kube-controller-manager's deployment controller names its queue "deployment"; the
        // name goes on its trace lines (T5) and its metrics alike.
        let queue_name = match &options.shard {
            Some(sh) => format!("deployment-{}", sh.id),
            None => "deployment".into(),
        };
        let mut queue = AsyncWorkQueue::<ObjectKey>::new().with_name(queue_name.as_str());
        if let Some(sh) = &options.shard {
            // Keys are hashed by their namespace, as the Deployments are sharded.
            queue = queue.with_owner(sh.ownership.clone(), |k: &ObjectKey| {
                k.split().0.unwrap_or_default()
            });
        }
        if let Some(t) = &options.telemetry {
            t.register_workqueue(&queue_name, &queue)?;
        }
        let d_lister = deployments.lister();
        let rs_lister = replica_sets.lister();

        // Deployments: their own key (no mapper), plus a logging handler on its own thread.
        deployments
            .add_key_sink(
                queue.clone(),
                None,
                ListenerConfig::default().name("deployments-to-queue"),
            )
            .await?;
        deployments
            .add_event_handler_with(
                ResourceEventHandlerFuncs::new()
                    .on_add(|d: &Arc<Deployment>, initial| {
                        tracing::debug!(deployment = %key_of(&**d), initial, "deployment added")
                    })
                    .on_update(|old: &Arc<Deployment>, new: &Arc<Deployment>| {
                        if old.metadata.generation != new.metadata.generation {
                            tracing::info!(deployment = %key_of(&**new), generation = ?new.metadata.generation,
                                "deployment spec changed")
                        }
                    })
                    .on_delete(|d| {
                        tracing::info!(deployment = %key_of(&**d.object()), "deployment deleted")
                    }),
                ListenerConfig::default().name("deployments-log"),
            )
            .await?;

        let dl = d_lister.clone();
        // The mappers read owners and labels from the lazy objects: in the lean cache mode
        // (I7) no Pod or ReplicaSet is decoded to find its Deployment.
        let rs_mapper: KeyMapper<ReplicaSet> = Arc::new(move |_key, n| {
            keys_of_all(n, |rs: &LazyObject<ReplicaSet>| {
                lazy_replica_set_deployments(rs, &dl)
            })
        });
        replica_sets
            .add_key_sink(
                queue.clone(),
                Some(rs_mapper),
                ListenerConfig::default().name("replicasets-to-queue"),
            )
            .await?;

        let (dl, rl) = (d_lister.clone(), rs_lister.clone());
        let pod_mapper: KeyMapper<Pod> = Arc::new(move |_key, n| {
            keys_of(n, |p: &LazyObject<Pod>| lazy_pod_deployment(p, &rl, &dl))
        });
        pods.add_key_sink(
            queue.clone(),
            Some(pod_mapper),
            ListenerConfig::default().name("pods-to-queue"),
        )
        .await?;

        Ok(DeploymentController {
            inner: Arc::new(Inner {
                client,
                factory,
                deployments,
                replica_sets,
                pods,
                queue,
                counters: Counters::default(),
                field_manager: match &options.shard {
                    Some(sh) => Some(sharding::field_manager(&sh.id)),
                    None => options.field_manager.clone(),
                },
                options,
                workers: Mutex::new(Vec::new()),
                shard_counters: ShardCounters::default(),
                ownership_task: Mutex::new(None),
                own_writes: Mutex::new(HashMap::new()),
                own_rs_writes: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Starts the informers, waits for their caches (logging progress every second), then
    /// starts the workers.
    pub async fn start(&self) -> Result<(), ControllerError> {
        let inner = &self.inner;
        // What the replica held when its informers started: ranges gained after this (while
        // the caches synced, their initial keys dropped by the queue's owner filter) are
        // queued by the ownership task, whenever the ring (or a test) published them.
        let held_at_start = inner
            .options
            .shard
            .as_ref()
            .map(|sh| sh.ownership.view().held.clone());
        inner.factory.start()?;
        let started = Instant::now();
        loop {
            let left = inner.options.sync_timeout.saturating_sub(started.elapsed());
            let synced = inner
                .factory
                .wait_for_cache_sync(left.min(Duration::from_secs(1)))
                .await;
            let pending: Vec<String> = synced
                .iter()
                .filter(|(_, s)| !**s)
                .map(|(id, _)| id.to_string())
                .collect();
            if pending.is_empty() {
                tracing::info!(
                    deployments = inner.deployments.lister().len(),
                    replicasets = inner.replica_sets.lister().len(),
                    pods = inner.pods.lister().len(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "caches synced"
                );
                break;
            }
            if left.is_zero() {
                return Err(ControllerError::CacheSync {
                    timeout: inner.options.sync_timeout,
                    pending,
                });
            }
            tracing::info!(
                waiting_for = ?pending,
                deployments = inner.deployments.lister().len(),
                replicasets = inner.replica_sets.lister().len(),
                pods = inner.pods.lister().len(),
                elapsed_s = started.elapsed().as_secs(),
                "waiting for caches to sync"
            );
        }
        let mut workers = inner.workers.lock().unwrap_or_else(|p| p.into_inner());
        for id in 0..inner.options.workers.max(1) {
            let inner = Arc::clone(&self.inner);
            workers.push(tokio::spawn(
                worker(inner, id as u32).instrument(tracing::info_span!("worker", id)),
            ));
        }
        tracing::info!(workers = workers.len(), "deployment controller started");
        if let Some(held) = held_at_start {
            let task = tokio::spawn(follow_ownership(Arc::clone(&self.inner), held));
            *inner
                .ownership_task
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(task);
        }
        Ok(())
    }

    /// Graceful stop: the queue stops accepting keys and the workers finish what is queued and
    /// in flight (`shut_down_with_drain`), then the informers stop (P9).
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        if let Some(t) = inner
            .ownership_task
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            t.abort();
        }
        inner.queue.shut_down_with_drain().await;
        let workers: Vec<JoinHandle<()>> =
            std::mem::take(&mut *inner.workers.lock().unwrap_or_else(|p| p.into_inner()));
        for w in workers {
            // A worker that panicked would otherwise vanish without a trace.
            if let Err(e) = w.await {
                tracing::warn!(error = %e, "deployment controller worker ended abnormally");
            }
        }
        inner.factory.shutdown().await;
        tracing::info!("deployment controller stopped");
    }

    /// Ends the controller as a crashed process would: the workers are aborted mid-sync,
    /// queued keys are lost, nothing is drained or acknowledged, and the informers stop. For
    /// demos and tests of a replica that dies (a sharded replica's ranges are taken over once
    /// its Lease expires).
    pub async fn abort(&self) {
        let inner = &self.inner;
        if let Some(t) = inner
            .ownership_task
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            t.abort();
        }
        let workers: Vec<JoinHandle<()>> =
            std::mem::take(&mut *inner.workers.lock().unwrap_or_else(|p| p.into_inner()));
        for w in &workers {
            w.abort();
        }
        inner.queue.shut_down();
        for w in workers {
            // Cancelled on purpose: only a panic is worth a line.
            if let Err(e) = w.await
                && e.is_panic()
            {
                tracing::warn!(error = %e, "deployment controller worker panicked");
            }
        }
        inner.factory.shutdown().await;
        tracing::info!("deployment controller aborted");
    }

    /// The KEP-5647 wait of a replica whose range moved in: until each of its three informers
    /// has seen `rv` and applied everything before it (`wait_for_resource_version`), at most
    /// `timeout`. An informer's resourceVersion moves with the events of its shard and with
    /// bookmarks: a quiet shard waits for the next bookmark.
    pub fn cache_wait(&self, timeout: Duration) -> sharding::CacheWait {
        let (d, rs, p) = (
            self.inner.deployments.clone(),
            self.inner.replica_sets.clone(),
            self.inner.pods.clone(),
        );
        Arc::new(move |rv: &str| {
            let (d, rs, p, rv) = (d.clone(), rs.clone(), p.clone(), rv.to_string());
            Box::pin(async move {
                let deadline = Instant::now() + timeout;
                let (a, b, c) = futures::join!(
                    d.wait_for_resource_version(&rv, deadline),
                    rs.wait_for_resource_version(&rv, deadline),
                    p.wait_for_resource_version(&rv, deadline)
                );
                for r in [a, b, c] {
                    if let Err(e) = r {
                        tracing::warn!(resource_version = %rv, error = %e, "cache behind the previous owner's last write");
                        return false;
                    }
                }
                true
            })
        })
    }

    /// LIST requests its informers have sent so far (pages count individually): the initial
    /// lists, and every relist.
    pub fn list_requests(&self) -> u64 {
        let i = &self.inner;
        i.deployments.health().lists + i.replica_sets.health().lists + i.pods.health().lists
    }

    /// WATCH requests its informers have opened so far: one each at the start, and one more at
    /// every restart of a watch (a relist, an expired watch, a shard change, K2).
    pub fn watch_requests(&self) -> u64 {
        let i = &self.inner;
        i.deployments.health().watches + i.replica_sets.health().watches + i.pods.health().watches
    }

    /// The informer factory (three informers).
    pub fn factory(&self) -> &SharedInformerFactory {
        &self.inner.factory
    }

    /// The workqueue of Deployment keys.
    pub fn queue(&self) -> &AsyncWorkQueue<ObjectKey> {
        &self.inner.queue
    }

    /// The Deployment cache (managed Deployments only).
    pub fn deployments(&self) -> Lister<Deployment> {
        self.inner.deployments.lister()
    }

    /// The ReplicaSet cache.
    pub fn replica_sets(&self) -> Lister<ReplicaSet> {
        self.inner.replica_sets.lister()
    }

    /// This replica's sharding (None when not sharded).
    pub fn shard_stats(&self) -> Option<ShardStats> {
        self.inner.shard_stats()
    }

    /// The replica's ownership (None when not sharded).
    pub fn ownership(&self) -> Option<&kinformer_actors::ShardOwnership> {
        self.inner.options.shard.as_ref().map(|s| &s.ownership)
    }

    /// Registers the `kinformer_shard_*` series of these replicas in `telemetry` (once per
    /// process: one collector describes every replica).
    pub fn register_shard_metrics(telemetry: &Telemetry, replicas: &[DeploymentController]) {
        let probes = replicas
            .iter()
            .map(|c| {
                let inner: Arc<dyn ShardProbe> = c.inner.clone();
                Arc::downgrade(&inner)
            })
            .collect();
        sharding::register_metrics(telemetry, probes);
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        let c = &self.inner.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let m = self.inner.queue.metrics();
        Stats {
            syncs: l(&c.syncs),
            errors: l(&c.errors),
            conflicts: l(&c.conflicts),
            invalid: l(&c.invalid),
            dropped: l(&c.dropped),
            gone: l(&c.gone),
            rs_created: l(&c.rs_created),
            rs_scaled: l(&c.rs_scaled),
            rs_deleted: l(&c.rs_deleted),
            rs_adopted: l(&c.rs_adopted),
            rs_released: l(&c.rs_released),
            status_updates: l(&c.status_updates),
            requeues: l(&c.requeues),
            queue_adds: m.adds,
            own_write_waits: l(&c.own_write_waits),
            own_write_timeouts: l(&c.own_write_timeouts),
            stale_plans: l(&c.stale_plans),
        }
    }

    /// Every managed Deployment's state, from the caches ([`summarize`] of this controller's
    /// listers: a sharded replica's hold its own ranges only).
    pub fn summary(&self) -> Vec<DeploymentSummary> {
        summarize(
            &self.inner.deployments.lister(),
            &self.inner.replica_sets.lister(),
        )
    }
}

/// The state of every Deployment in `deployments`, with its ReplicaSets from `replica_sets`,
/// sorted by key: the exit summary's listing.
pub fn summarize(
    deployments: &Lister<Deployment>,
    replica_sets: &Lister<ReplicaSet>,
) -> Vec<DeploymentSummary> {
    let rss = replica_sets.list();
    let mut out: Vec<DeploymentSummary> = deployments
        .list()
        .iter()
        .map(|d| {
            let uid = d.metadata.uid.clone().unwrap_or_default();
            let mut owned: Vec<&Arc<ReplicaSet>> = rss
                .iter()
                .filter(|rs| sync::is_controlled_by(&rs.metadata, &uid))
                .collect();
            owned.sort_by(|a, b| {
                a.metadata
                    .creation_timestamp
                    .cmp(&b.metadata.creation_timestamp)
                    .then_with(|| a.metadata.name.cmp(&b.metadata.name))
            });
            let s = d.status.clone().unwrap_or_default();
            DeploymentSummary {
                key: key_of(&**d),
                replicas: sync::deployment_replicas(d),
                updated: s.updated_replicas.unwrap_or(0),
                ready: s.ready_replicas.unwrap_or(0),
                available: s.available_replicas.unwrap_or(0),
                generation: d.metadata.generation.unwrap_or(0),
                observed_generation: s.observed_generation.unwrap_or(0),
                complete: sync::rollout_complete(d),
                image: d
                    .spec
                    .template
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.image.clone())
                    .unwrap_or_default(),
                replica_sets: owned
                    .iter()
                    .map(|rs| {
                        (
                            rs.name_any(),
                            sync::rs_replicas(rs),
                            rs.status
                                .as_ref()
                                .and_then(|s| s.ready_replicas)
                                .unwrap_or(0),
                        )
                    })
                    .collect(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// `a` is at least `b` as resourceVersions (KEP-5647's comparison; false when either is not
/// one).
fn at_least(a: &str, b: &str) -> bool {
    kinformer::resource_version::compare_resource_version(a, b)
        .is_ok_and(|o| o != std::cmp::Ordering::Less)
}

/// The cached object's resourceVersion is newer than the one a sync planned from: a write from
/// the planned object would be a 409. Unknown or incomparable versions are not (the write is
/// sent and the server decides).
fn cache_moved_past(cached: Option<&str>, planned: Option<&str>) -> bool {
    match (cached, planned) {
        (Some(c), Some(p)) => kinformer::resource_version::compare_resource_version(c, p)
            .is_ok_and(|o| o == std::cmp::Ordering::Greater),
        _ => false,
    }
}

/// Drops the recorded own writes of the keys `which` selects that the cache now holds (at most
/// `seen`); newer ones, written meanwhile by another sync, stay.
fn forget_writes(
    writes: &Mutex<HashMap<ObjectKey, String>>,
    which: impl Fn(&ObjectKey) -> bool,
    seen: &str,
) {
    writes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|k, rv| !(which(k) && at_least(seen, rv)));
}

/// The name a sharded replica's informer is registered under in the telemetry:
/// `<field manager>/<resource>`, followed by the ranges the replica holds when it has them at
/// construction (a fixed shard's, which never change). A replica of the ring holds nothing
/// then, and its ranges move: its name carries none.
pub fn informer_name(
    manager: &str,
    resource: &str,
    held: &kinformer::shard::ShardSelector,
) -> String {
    let ranges: Vec<String> = held.ranges().iter().map(ToString::to_string).collect();
    if ranges.is_empty() {
        format!("{manager}/{resource}")
    } else {
        format!("{manager}/{resource} {}", ranges.join(" "))
    }
}

fn key_of<K: kube::Resource>(obj: &K) -> String {
    kinformer_actors::meta_namespace_key(obj)
        .map(|k| k.to_string())
        .unwrap_or_else(|_| "<no name>".into())
}

/// One worker (numbered `id`): take a key, reconcile it, tell the queue how it went
/// (client-go's `processNextWorkItem` + `handleErr`). Each reconcile is a trace span (T6)
/// under the trace ids of the events that queued the key; `Inner::wrote` records its writes.
async fn worker(inner: Arc<Inner>, id: u32) {
    while let Some(taken) = inner.queue.get_traced(id).await {
        let key = taken.item().clone();
        let span = ReconcileSpan::start(&taken);
        let result = span
            .scope(inner.sync(&key))
            .instrument(tracing::debug_span!("sync", deployment = %key))
            .await;
        inner.counters.syncs.fetch_add(1, Ordering::Relaxed);
        match &result {
            Ok(requeue_after) => span.end(match requeue_after {
                Some(after) => ReconcileResult::Requeue(Some(*after)),
                None => ReconcileResult::Ok,
            }),
            Err(e) => span.end(ReconcileResult::Error(e)),
        }
        match result {
            Ok(_) => inner.queue.forget(&key),
            Err(SyncError::NotOwned(ns)) => {
                // The range moved away mid-sync: its new owner reconciles it.
                tracing::debug!(deployment = %key, namespace = %ns, "not owned any more; write skipped");
                inner.queue.forget(&key);
            }
            Err(SyncError::Stale(_)) => {
                // Not a failure: the newer Deployment's event queues the key; add it in case
                // that event was handled before this sync ended.
                inner.counters.stale_plans.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(deployment = %key, "the Deployment changed while planning; replanning");
                inner.queue.forget(&key);
                inner.queue.add(key.clone());
            }
            Err(SyncError::Invalid(e)) => {
                inner.counters.invalid.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(deployment = %key, error = %e, "skipping malformed Deployment until it changes");
                inner.queue.forget(&key);
            }
            Err(e) => {
                let requeues = inner.queue.num_requeues(&key);
                if matches!(e, SyncError::Conflict(_) | SyncError::Collision(_)) {
                    inner.counters.conflicts.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(deployment = %key, error = %e, requeues, "conflict; retrying from the cache");
                } else {
                    inner.counters.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(deployment = %key, error = %e, requeues, "reconcile failed; retrying");
                }
                if requeues < MAX_RETRIES {
                    inner.counters.requeues.fetch_add(1, Ordering::Relaxed);
                    inner.queue.add_rate_limited(key.clone());
                } else {
                    inner.counters.dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(deployment = %key, error = %e, "dropping Deployment out of the queue after {MAX_RETRIES} retries");
                    inner.queue.forget(&key);
                }
            }
        }
        inner.queue.done(&key);
    }
}

/// Follows a sharded replica's ownership (the membership ring's publications, or a test's):
/// drains the ranges that move away (purge their keys, wait for their in-flight syncs, ack),
/// and queues the cached Deployments of ranges that move in. `held` is what the replica held
/// when its informers started.
///
/// The ring republishes on every renew (the validity moves on): a drain already acknowledged is
/// not run again while its ranges stay `draining`. When the held ranges lapsed (the Lease was
/// not renewed in time, H4), the queue dropped their keys meanwhile: once valid again, every
/// held Deployment is queued as if its range had just moved in.
async fn follow_ownership(inner: Arc<Inner>, mut held: kinformer::shard::ShardSelector) {
    let Some(sh) = inner.options.shard.clone() else {
        return;
    };
    let field = sh.ownership.field();
    let mut changes = sh.ownership.subscribe();
    let mut acked = kinformer::shard::ShardSelector::nothing(field);
    let mut lapsed = false;
    let mut cached = sh.ownership.view().wanted.clone();
    loop {
        let view = sh.ownership.view();
        if view.wanted != cached {
            cached = view.wanted.clone();
            let f = &inner.factory;
            let set = f
                .set_shard(&inner.deployments, Some(cached.clone()))
                .and_then(|_| f.set_shard(&inner.replica_sets, Some(cached.clone())))
                .and_then(|_| f.set_shard(&inner.pods, Some(cached.clone())));
            match set {
                Ok(_) => {
                    tracing::debug!(replica = %sh.id, fraction = cached.fraction(), "informers follow the wanted ranges")
                }
                Err(e) => {
                    tracing::warn!(replica = %sh.id, error = %e, "changing the informers' shard")
                }
            }
        }
        // Forget acks of ranges no longer draining (moved away, or the drain was cancelled).
        acked = acked.intersection(&view.draining).unwrap_or(acked);
        let fresh = view.draining.difference(&acked).unwrap_or_default_of(field);
        if !fresh.is_empty() {
            let report = inner.queue.drain_not_owned(&sh.ownership).await;
            acked = acked.union(&report.acked).unwrap_or(acked);
            let c = &inner.shard_counters;
            c.drains.fetch_add(1, Ordering::Relaxed);
            c.drain_nanos.fetch_add(
                u64::try_from(report.took.as_nanos()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
            // Ranges as a count and a fraction: the full selector (dozens of shardRange
            // expressions on a ring) only at debug.
            tracing::info!(replica = %sh.id, ranges = report.acked.ranges().len(),
                fraction = %format_args!("{:.3}", report.acked.fraction()), purged = report.purged,
                waited_for = report.waited_for, took_ms = report.took.as_millis() as u64, "drained");
            tracing::debug!(replica = %sh.id, selector = %report.acked, "drained ranges");
        }
        let valid = view.valid_until.is_none_or(|t| Instant::now() < t);
        let entered = if lapsed && valid {
            lapsed = false;
            tracing::info!(replica = %sh.id, "ownership valid again: queueing every held Deployment");
            view.held.clone()
        } else {
            view.held.difference(&held).unwrap_or_default_of(field)
        };
        if !entered.is_empty() {
            inner
                .shard_counters
                .handovers
                .fetch_add(1, Ordering::Relaxed);
            let keys: Vec<ObjectKey> = inner
                .deployments
                .lister()
                .list()
                .iter()
                .filter(|d| {
                    entered.matches_value(d.metadata.namespace.as_deref().unwrap_or_default())
                })
                .map(|d| ObjectKey::new(d.metadata.namespace.as_deref(), &d.name_any()))
                .collect();
            tracing::info!(replica = %sh.id, ranges = entered.ranges().len(),
                fraction = %format_args!("{:.3}", entered.fraction()), deployments = keys.len(), "ranges moved in");
            tracing::debug!(replica = %sh.id, selector = %entered, "ranges moved in");
            for k in keys {
                inner.queue.add(k);
            }
        }
        held = view.held.clone();
        // Wake at the validity deadline too: past it, keys are being dropped (see above).
        let lapse = view
            .valid_until
            .filter(|_| valid && !held.is_empty())
            .map(tokio::time::Instant::from_std);
        tokio::select! {
            r = changes.changed() => {
                if r.is_err() {
                    return;
                }
            }
            () = async {
                match lapse {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            } => {
                if sh.ownership.view().valid_until.is_some_and(|t| Instant::now() >= t) {
                    tracing::warn!(replica = %sh.id, "ownership lapsed (Lease not renewed in time)");
                    lapsed = true;
                }
            }
        }
        if !valid {
            lapsed = true;
        }
    }
}

/// `ShardSelector` results of a range operation, or nothing when the fields differed (they
/// cannot: one replica's views share the ownership's field).
trait OrNothing {
    fn unwrap_or_default_of(
        self,
        field: kinformer::shard::ShardField,
    ) -> kinformer::shard::ShardSelector;
}

impl<E> OrNothing for Result<kinformer::shard::ShardSelector, E> {
    fn unwrap_or_default_of(
        self,
        field: kinformer::shard::ShardField,
    ) -> kinformer::shard::ShardSelector {
        self.unwrap_or_else(|_| kinformer::shard::ShardSelector::nothing(field))
    }
}

impl ShardProbe for Inner {
    fn shard_stats(&self) -> Option<ShardStats> {
        let sh = self.options.shard.as_ref()?;
        let view = sh.ownership.view();
        let c = &self.shard_counters;
        let keys_owned = self
            .deployments
            .lister()
            .list()
            .iter()
            .filter(|d| {
                sh.ownership
                    .owns_value(d.metadata.namespace.as_deref().unwrap_or_default())
            })
            .count() as u64;
        Some(ShardStats {
            id: sh.id.clone(),
            held: view.held.clone(),
            held_fraction: view.held.fraction(),
            keys_owned,
            dropped_not_owned: self.queue.metrics().dropped_not_owned,
            skipped_not_owned: sharding::load(&c.skipped_not_owned),
            handovers: sharding::load(&c.handovers),
            handover_waits: sharding::load(&c.handover_waits),
            handover_wait_failures: sharding::load(&c.handover_wait_failures),
            drains: sharding::load(&c.drains),
            drain_time: Duration::from_nanos(sharding::load(&c.drain_nanos)),
        })
    }
}

impl Inner {
    fn shard_stats(&self) -> Option<ShardStats> {
        ShardProbe::shard_stats(self)
    }

    fn post_params(&self) -> PostParams {
        PostParams {
            field_manager: self.field_manager.clone(),
            ..PostParams::default()
        }
    }

    fn patch_params(&self) -> PatchParams {
        PatchParams {
            field_manager: self.field_manager.clone(),
            ..PatchParams::default()
        }
    }

    /// The re-check right before every write of a sharded replica: the namespace may have
    /// moved away (or the replica's Lease run out) since the key was queued.
    fn check_owned(&self, ns: &str) -> Result<(), SyncError> {
        match &self.options.shard {
            Some(sh) if !sh.ownership.owns_value(ns) => {
                self.shard_counters
                    .skipped_not_owned
                    .fetch_add(1, Ordering::Relaxed);
                Err(SyncError::NotOwned(ns.to_string()))
            }
            _ => Ok(()),
        }
    }

    /// After a successful write: the trace records it in the current reconcile's span with
    /// the resourceVersion the server answered (T6; its watch event comes back as an own
    /// write, T7), and the next owner of the range waits for it (KEP-5647).
    fn wrote(
        &self,
        verb: WriteVerb,
        resource: &'static str,
        ns: &str,
        name: &str,
        rv: Option<&str>,
    ) {
        // The trace names kinds; any other resource is written as its resource name rather
        // than mislabelled.
        let kind = match resource {
            "replicasets" | "replicasets/status" => "ReplicaSet",
            "deployments" | "deployments/status" => "Deployment",
            other => other,
        };
        trace::record_write(verb, kind, ns, name, rv.unwrap_or_default());
        if let Some(rv) = rv {
            let writes = match kind {
                "Deployment" => Some(&self.own_writes),
                "ReplicaSet" => Some(&self.own_rs_writes),
                _ => None,
            };
            if let Some(w) = writes {
                w.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(ObjectKey::new(Some(ns), name), rv.to_string());
            }
        }
        let Some(sh) = &self.options.shard else {
            return;
        };
        if let Some(rv) = rv {
            sh.ownership.record_write(rv);
        }
        if let Some(hook) = &sh.on_write {
            hook(&WriteRecord {
                manager: sharding::field_manager(&sh.id),
                resource,
                namespace: ns.to_string(),
                name: name.to_string(),
                resource_version: rv.unwrap_or_default().to_string(),
            });
        }
    }

    /// One write of a sync: the ownership re-check right before it ([`Self::check_owned`]),
    /// the request, and on success its record ([`Self::wrote`]) with the resourceVersion the
    /// server answered. The request's own error is the caller's to sort (a 404 or 409 means
    /// different things for different writes). `request` is a future not yet polled, so
    /// nothing is sent when the re-check fails.
    async fn write<K: kube::Resource>(
        &self,
        verb: WriteVerb,
        resource: &'static str,
        ns: &str,
        name: &str,
        request: impl Future<Output = kube::Result<K>>,
    ) -> Result<kube::Result<K>, SyncError> {
        self.check_owned(ns)?;
        let result = request.await;
        if let Ok(written) = &result {
            let rv = written.meta().resource_version.as_deref();
            self.wrote(verb, resource, ns, name, rv);
        }
        Ok(result)
    }

    /// Before reconciling a key of a range that moved in: the cache must have seen the
    /// previous owner's last write there (KEP-5647), else the sync would act on a stale view
    /// and conflict with (or undo) what the previous owner did. Each handover is waited for
    /// once.
    async fn await_handover(&self, ns: &str) -> Result<(), SyncError> {
        let Some(sh) = &self.options.shard else {
            return Ok(());
        };
        let Some(rv) = sh.ownership.handover_rv(ns) else {
            return Ok(());
        };
        let Some(wait) = &sh.wait_for_cache else {
            return Ok(());
        };
        let c = &self.shard_counters;
        if c.seen_handovers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&rv)
        {
            return Ok(());
        }
        c.handover_waits.fetch_add(1, Ordering::Relaxed);
        if !wait(&rv).await {
            c.handover_wait_failures.fetch_add(1, Ordering::Relaxed);
            return Err(SyncError::CacheBehind(rv));
        }
        c.seen_handovers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(rv);
        Ok(())
    }

    /// Before planning a sync of `key`: waits (at most [`OWN_WRITE_WAIT`]) until the
    /// Deployment cache holds the controller's own last write to that Deployment, the
    /// resourceVersion that write returned (`wait_for_resource_version`, K3). A sync planned
    /// from a cache that has not seen it would write with an older resourceVersion and get a
    /// 409. Upstream has no such wait (kube-controller-manager's `syncDeployment` relies on the
    /// conflict and the requeue); this is read-your-writes in front of it. Past the bound the
    /// sync plans from the cache as it is (a conflict, then a retry, as before).
    async fn await_own_write(&self, key: &ObjectKey) {
        let ns = key.split().0.unwrap_or_default();
        let own = self
            .own_writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned();
        // The ReplicaSets: the newest of this controller's writes in the namespace (the
        // ReplicaSet cache receives them in order, so that one covers the others).
        let own_rs = self
            .own_rs_writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(k, _)| k.split().0 == Some(ns))
            .map(|(_, rv)| rv.clone())
            .max_by(|a, b| {
                kinformer::resource_version::compare_resource_version(a, b)
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
        if own.is_none() && own_rs.is_none() {
            return;
        }
        let deadline = Instant::now() + OWN_WRITE_WAIT;
        if let Some(rv) = own {
            let cached = self
                .deployments
                .lister()
                .lazy()
                .get(ns, key.name())
                .and_then(|d| d.resource_version().map(str::to_owned));
            let seen = cached.is_some_and(|c| at_least(&c, &rv));
            if seen || self.wait_own(&self.deployments, key, &rv, deadline).await {
                forget_writes(&self.own_writes, |k| k == key, &rv);
            }
        }
        if let Some(rv) = own_rs
            && self.wait_own(&self.replica_sets, key, &rv, deadline).await
        {
            forget_writes(&self.own_rs_writes, |k| k.split().0 == Some(ns), &rv);
        }
    }

    /// One wait of [`await_own_write`](Self::await_own_write): true when `informer`'s cache
    /// holds `rv`, false (counted, logged) when it did not by `deadline`.
    async fn wait_own<K: kinformer_actors::InformerObject>(
        &self,
        informer: &SharedIndexInformer<K>,
        key: &ObjectKey,
        rv: &str,
        deadline: Instant,
    ) -> bool {
        self.counters
            .own_write_waits
            .fetch_add(1, Ordering::Relaxed);
        match informer.wait_for_resource_version(rv, deadline).await {
            Ok(()) => true,
            Err(e) => {
                self.counters
                    .own_write_timeouts
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(deployment = %key, resource_version = %rv, error = %e,
                    "cache behind the controller's own last write; planning anyway");
                false
            }
        }
    }

    /// Reconciles one Deployment (client-go's `syncDeployment`). Returns the delay after
    /// which it asked to be reconciled again (`add_after`), if any.
    async fn sync(&self, key: &ObjectKey) -> Result<Option<Duration>, SyncError> {
        let (Some(ns), name) = key.split() else {
            return Err(SyncError::BadKey(key.to_string()));
        };
        self.await_handover(ns).await?;
        self.await_own_write(key).await;
        let Some(d) = self.deployments.lister().get(ns, name) else {
            // Deleted: its ReplicaSets (and their pods) carry ownerReferences with
            // blockOwnerDeletion; the garbage collector removes them, not us.
            self.counters.gone.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(deployment = %key, "deployment is gone; its ReplicaSets are left to the garbage collector");
            return Ok(None);
        };
        let rss = self.replica_sets.lister().namespaced(ns).list();
        let rss = self.claim_replica_sets(&d, &rss).await?;
        let pods = self.pods.lister().namespaced(ns).list();
        let plan = sync::plan(&d, &rss, &pods, &Time(Timestamp::now()))?;
        tracing::debug!(deployment = %key, hash = %plan.hash, actions = plan.actions.len(), status = plan.status.is_some(), "planned");
        // checkPausedConditions: the DeploymentPaused / DeploymentResumed condition is its own
        // status write, before the rest of the sync; the later writes go on top of it.
        let d = match plan.paused_condition {
            Some(status) => match self.write_status(&d, Some(status), None).await? {
                Some(written) => Arc::new(written),
                None => return Ok(None),
            },
            None => d,
        };

        let rs_api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), ns);
        for action in &plan.actions {
            match action {
                Action::Create(rs) => self.create_replica_set(&rs_api, &d, rs).await?,
                Action::Update { rs, from, to } => {
                    let rs_name = rs.name_any();
                    match self
                        .write(
                            WriteVerb::Update,
                            "replicasets",
                            ns,
                            &rs_name,
                            rs_api.replace(&rs_name, &self.post_params(), rs),
                        )
                        .await?
                    {
                        Ok(_) => {
                            self.counters.rs_scaled.fetch_add(1, Ordering::Relaxed);
                            if from == to {
                                tracing::debug!(deployment = %key, replicaset = %rs_name, "updated ReplicaSet annotations");
                            } else {
                                tracing::info!(deployment = %key, replicaset = %rs_name, from, to, "scaled ReplicaSet");
                            }
                        }
                        Err(e) if api_code(&e) == Some(409) => {
                            return Err(SyncError::Conflict(format!("replicasets/{rs_name}")));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                Action::Delete { name: rs_name, uid } => {
                    let dp = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: uid.clone(),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    };
                    self.check_owned(ns)?;
                    match rs_api.delete(rs_name, &dp).await {
                        Ok(gone) => {
                            let rv = gone.left().and_then(|rs| rs.metadata.resource_version);
                            self.wrote(
                                WriteVerb::Delete,
                                "replicasets",
                                ns,
                                rs_name,
                                rv.as_deref(),
                            );
                            self.counters.rs_deleted.fetch_add(1, Ordering::Relaxed);
                            tracing::info!(deployment = %key, replicaset = %rs_name, "deleted old ReplicaSet (revision history limit)");
                        }
                        // Already gone, or replaced by another object of that name.
                        Err(e) if matches!(api_code(&e), Some(404 | 409)) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }

        if plan.status.is_some() || plan.revision.is_some() {
            self.write_status(&d, plan.status, plan.revision).await?;
        }
        if let Some(after) = plan.requeue_after {
            self.queue.add_after(key.clone(), after);
        }
        Ok(plan.requeue_after)
    }

    /// Writes the status and the Deployment's revision annotation through the status
    /// subresource, as upstream does (`SetDeploymentRevision` then `UpdateStatus`: a status
    /// write keeps metadata changes there and never bumps the generation). A server that drops
    /// metadata on status writes (the simulated API server) gets the annotation by a merge patch
    /// of the Deployment's metadata instead. Returns the Deployment as last written (None: it is
    /// gone).
    async fn write_status(
        &self,
        d: &Deployment,
        status: Option<k8s_openapi::api::apps::v1::DeploymentStatus>,
        revision: Option<String>,
    ) -> Result<Option<Deployment>, SyncError> {
        let (ns, name) = (
            d.metadata.namespace.as_deref().unwrap_or_default(),
            d.name_any(),
        );
        let key = key_of(d);
        let mut updated = d.clone();
        if let Some(status) = status {
            updated.status = Some(status);
        }
        if let Some(r) = &revision {
            updated
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(sync::REVISION_ANNOTATION.into(), r.clone());
        }
        // A write from an object older than the cache's is a sure 409 (someone wrote the
        // Deployment since the sync read it): replan from the newer one instead. Upstream sends
        // it and takes the conflict.
        let cached = self
            .deployments
            .lister()
            .lazy()
            .get(ns, &name)
            .and_then(|c| c.resource_version().map(str::to_owned));
        if cache_moved_past(cached.as_deref(), d.metadata.resource_version.as_deref()) {
            return Err(SyncError::Stale(key.clone()));
        }
        let d_api: Api<Deployment> = Api::namespaced(self.client.clone(), ns);
        let written = match self
            .write(
                WriteVerb::UpdateStatus,
                "deployments/status",
                ns,
                &name,
                d_api.replace_status(&name, &self.post_params(), &updated),
            )
            .await?
        {
            Ok(w) => {
                self.counters.status_updates.fetch_add(1, Ordering::Relaxed);
                let s = updated.status.unwrap_or_default();
                tracing::debug!(deployment = %key, replicas = ?s.replicas, updated = ?s.updated_replicas,
                    available = ?s.available_replicas, revision = ?revision, "status updated");
                w
            }
            Err(e) if api_code(&e) == Some(409) => {
                return Err(SyncError::Conflict(format!("deployments/{name}/status")));
            }
            Err(e) if api_code(&e) == Some(404) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let Some(r) = revision else {
            return Ok(Some(written));
        };
        if sync::annotation(&written.metadata, sync::REVISION_ANNOTATION) == Some(r.as_str()) {
            return Ok(Some(written));
        }
        let patch = serde_json::json!({
            "metadata": {
                "resourceVersion": written.metadata.resource_version,
                "annotations": {sync::REVISION_ANNOTATION: r},
            }
        });
        match self
            .write(
                WriteVerb::Patch,
                "deployments",
                ns,
                &name,
                d_api.patch(&name, &self.patch_params(), &Patch::Merge(&patch)),
            )
            .await?
        {
            Ok(w) => Ok(Some(w)),
            Err(e) if api_code(&e) == Some(409) => Err(SyncError::Conflict(format!(
                "deployments/{name} (revision)"
            ))),
            Err(e) if api_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// `getReplicaSetsForDeployment`: the ReplicaSets the Deployment owns after adopting the
    /// matching orphans and releasing the owned ones that no longer match
    /// (`ClaimReplicaSets`). Before the first adoption the Deployment is read from the API: it
    /// must still be the same object and not being deleted (`RecheckDeletionTimestamp`).
    async fn claim_replica_sets(
        &self,
        d: &Deployment,
        rss: &[Arc<ReplicaSet>],
    ) -> Result<Vec<Arc<ReplicaSet>>, SyncError> {
        let claims = sync::claim_replica_sets(d, rss)?;
        if claims.adopt.is_empty() && claims.release.is_empty() {
            return Ok(claims.owned);
        }
        let ns = d.metadata.namespace.as_deref().unwrap_or_default();
        let key = key_of(d);
        let rs_api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), ns);
        let mut owned = claims.owned;
        if !claims.adopt.is_empty() {
            let d_api: Api<Deployment> = Api::namespaced(self.client.clone(), ns);
            let fresh = d_api.get_opt(&d.name_any()).await?;
            for rs in &claims.adopt {
                let rs_name = rs.name_any();
                sync::can_adopt(d, fresh.as_ref()).map_err(|source| SyncError::Adoption {
                    rs: rs_name.clone(),
                    source,
                })?;
                let patch = sync::adopt_patch(d, rs);
                match self
                    .write(
                        WriteVerb::Patch,
                        "replicasets",
                        ns,
                        &rs_name,
                        rs_api.patch(&rs_name, &self.patch_params(), &Patch::Strategic(&patch)),
                    )
                    .await?
                {
                    Ok(adopted) => {
                        self.counters.rs_adopted.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(deployment = %key, replicaset = %rs_name, "adopted ReplicaSet");
                        owned.push(Arc::new(adopted));
                    }
                    // Gone: nothing to adopt.
                    Err(e) if api_code(&e) == Some(404) => {}
                    Err(e) if api_code(&e) == Some(409) => {
                        return Err(SyncError::Conflict(format!(
                            "replicasets/{rs_name} (adopt)"
                        )));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        for rs in &claims.release {
            let rs_name = rs.name_any();
            let patch = sync::release_patch(d, rs);
            match self
                .write(
                    WriteVerb::Patch,
                    "replicasets",
                    ns,
                    &rs_name,
                    rs_api.patch(&rs_name, &self.patch_params(), &Patch::Strategic(&patch)),
                )
                .await?
            {
                Ok(_) => {
                    self.counters.rs_released.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(deployment = %key, replicaset = %rs_name, "released ReplicaSet (labels no longer match)");
                }
                // Gone, or (422) no such owner / another uid: released already (upstream ignores
                // both).
                Err(e) if matches!(api_code(&e), Some(404 | 422)) => {}
                Err(e) if api_code(&e) == Some(409) => {
                    return Err(SyncError::Conflict(format!(
                        "replicasets/{rs_name} (release)"
                    )));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(owned)
    }

    /// Creates the new ReplicaSet; on AlreadyExists tells "ours, not cached yet" from a hash
    /// collision (then raises `status.collisionCount`, as client-go does).
    async fn create_replica_set(
        &self,
        api: &Api<ReplicaSet>,
        d: &Deployment,
        rs: &ReplicaSet,
    ) -> Result<(), SyncError> {
        let rs_name = rs.name_any();
        let key = key_of(d);
        let ns = d.metadata.namespace.as_deref().unwrap_or_default();
        let err = match self
            .write(
                WriteVerb::Create,
                "replicasets",
                ns,
                &rs_name,
                api.create(&self.post_params(), rs),
            )
            .await?
        {
            Ok(_) => {
                self.counters.rs_created.fetch_add(1, Ordering::Relaxed);
                tracing::info!(deployment = %key, replicaset = %rs_name, replicas = sync::rs_replicas(rs), "created ReplicaSet");
                return Ok(());
            }
            Err(e) if api_code(&e) == Some(409) => e,
            Err(e) => return Err(e.into()),
        };
        let uid = d.metadata.uid.clone().unwrap_or_default();
        let template = &d.spec.template;
        match api.get_opt(&rs_name).await? {
            Some(existing)
                if sync::is_controlled_by(&existing.metadata, &uid)
                    && existing
                        .spec
                        .template
                        .as_ref()
                        .is_some_and(|t| sync::equal_ignore_hash(t, template)) =>
            {
                // Ours: the cache had not seen it yet. The next sync will.
                Err(SyncError::Conflict(format!(
                    "replicasets/{rs_name} (not cached yet)"
                )))
            }
            Some(_) => {
                let mut updated = d.clone();
                let status = updated.status.get_or_insert_with(Default::default);
                status.collision_count =
                    Some(status.collision_count.unwrap_or(0).saturating_add(1));
                let d_api: Api<Deployment> = Api::namespaced(self.client.clone(), ns);
                let d_name = d.name_any();
                match self
                    .write(
                        WriteVerb::UpdateStatus,
                        "deployments/status",
                        ns,
                        &d_name,
                        d_api.replace_status(&d_name, &self.post_params(), &updated),
                    )
                    .await?
                {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(e) => return Err(e.into()),
                }
                tracing::warn!(deployment = %key, replicaset = %rs_name, "pod-template hash collision; collisionCount raised");
                Err(SyncError::Collision(rs_name))
            }
            // Gone again (or the 409 was not about existence): retry.
            None => Err(SyncError::Conflict(format!("replicasets/{rs_name}: {err}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kinformer::shard::{ShardField, ShardSelector};

    #[test]
    fn a_plan_is_stale_only_when_the_cache_holds_a_newer_object() {
        let table = [
            (Some("12"), Some("11"), true),
            (Some("11"), Some("11"), false),
            // Our own write returned 12; the cache has not seen it yet.
            (Some("11"), Some("12"), false),
            (None, Some("11"), false),
            (Some("11"), None, false),
            (Some("x"), Some("11"), false),
        ];
        for (i, (cached, planned, stale)) in table.into_iter().enumerate() {
            assert_eq!(cache_moved_past(cached, planned), stale, "case {i}");
        }
    }

    #[test]
    fn informer_names_carry_ranges_only_when_the_replica_holds_some() {
        // A replica of the ring holds nothing when its informers are built.
        let nothing = ShardSelector::nothing(ShardField::Namespace);
        assert_eq!(
            informer_name("deployment-controller-0", "deployments", &nothing),
            "deployment-controller-0/deployments"
        );
        let fixed = ShardSelector::nth_of(ShardField::Namespace, 1, 3).expect("selector");
        let name = informer_name("deployment-controller-1", "pods", &fixed);
        assert!(
            name.starts_with("deployment-controller-1/pods [0x"),
            "{name}"
        );
        assert!(!name.ends_with(' '), "{name:?}");
    }
}
