//! Scaling the controller out (docs/scaling-out.md): what one replica of a sharded deployment
//! controller needs beside the unsharded one.
//!
//! Replicas split the Deployments by the hash of their namespace (KEP-5866's
//! `shardRange(object.metadata.namespace, …)`), so a Deployment, its ReplicaSets and its Pods
//! are always one replica's. A replica's [`ShardOwnership`] says what it holds; the controller
//! reads it
//!
//! - in its workqueue ([`AsyncWorkQueue::with_owner`](kinformer_actors::AsyncWorkQueue)): keys
//!   of other replicas' namespaces are dropped;
//! - in each worker, right before every write: a write whose namespace is not owned any more is
//!   skipped ([`ShardStats::skipped_not_owned`]);
//! - before reconciling a key whose range moved in: the previous owner's last write
//!   ([`ShardOwnership::handover_rv`]) must be in the cache ([`ShardOptions::wait_for_cache`]);
//! - on every publication: draining ranges are purged from the queue, their in-flight keys
//!   waited for, then acknowledged; the Deployments of ranges that moved in are queued.
//!
//! Each replica writes with its own field manager (`deployment-controller-<id>`), so every
//! write is attributable in `metadata.managedFields`.

use std::{
    collections::HashSet,
    fmt,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use futures::future::BoxFuture;
use kinformer::shard::{ShardField, ShardSelector};
use kinformer_actors::{ShardOwnership, Telemetry};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
};

/// The field manager of replica `id`: every write it makes carries it.
pub fn field_manager(id: &str) -> String {
    format!("deployment-controller-{id}")
}

/// Waits until this replica's caches have seen a resourceVersion (the previous owner's last
/// write in a range that moved in); true once they have, false when it gave up (the key is
/// retried). The merge wires it to the informers' `wait_for_resource_version(rv, deadline)`
/// (KEP-5647), one call per informer the controller reads.
pub type CacheWait = Arc<dyn Fn(&str) -> BoxFuture<'static, bool> + Send + Sync>;

/// One write a replica made, as the server answered it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRecord {
    /// The field manager (`deployment-controller-<id>`).
    pub manager: String,
    /// `replicasets`, `deployments` or `deployments/status`.
    pub resource: &'static str,
    /// The namespace written in.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The resourceVersion the server gave the write (empty for a delete that answered a
    /// Status).
    pub resource_version: String,
}

/// Called after every successful write (an audit log, or a test's proof of who wrote what).
pub type WriteHook = Arc<dyn Fn(&WriteRecord) + Send + Sync>;

/// How one replica of a sharded controller runs.
#[derive(Clone)]
pub struct ShardOptions {
    /// The replica's id: its field manager is `deployment-controller-<id>`.
    pub id: String,
    /// What it owns. Namespace shards: a Deployment's key is hashed by its namespace.
    pub ownership: ShardOwnership,
    /// The KEP-5647 wait before a key of a range that moved in is reconciled (None: no wait;
    /// a fixed shard never receives a range).
    pub wait_for_cache: Option<CacheWait>,
    /// Called after every successful write.
    pub on_write: Option<WriteHook>,
}

impl fmt::Debug for ShardOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardOptions")
            .field("id", &self.id)
            .field("ownership", &self.ownership)
            .field("wait_for_cache", &self.wait_for_cache.is_some())
            .field("on_write", &self.on_write.is_some())
            .finish()
    }
}

impl ShardOptions {
    /// Replica `i` of `n` on a fixed namespace shard ([`ShardSelector::nth_of`]): static
    /// sharding (`--shards static`).
    pub fn nth_of(i: u64, n: u64) -> Result<Self, kinformer::shard::ShardError> {
        let selector = ShardSelector::nth_of(ShardField::Namespace, i, n)?;
        Ok(Self::with_ownership(
            i.to_string(),
            ShardOwnership::fixed(selector),
        ))
    }

    /// Replica `id` reading `ownership`, published by whoever decides the ranges: the Lease
    /// ring's [`ShardMember`](kinformer_actors::ShardMember) (`crate::ring`), or a test.
    /// Nothing else in the controller depends on where the ownership comes from.
    pub fn with_ownership(id: impl Into<String>, ownership: ShardOwnership) -> Self {
        ShardOptions {
            id: id.into(),
            ownership,
            wait_for_cache: None,
            on_write: None,
        }
    }
}

/// Counters of one replica's sharding.
#[derive(Debug, Default)]
pub(crate) struct ShardCounters {
    pub(crate) skipped_not_owned: AtomicU64,
    pub(crate) handovers: AtomicU64,
    pub(crate) handover_waits: AtomicU64,
    pub(crate) handover_wait_failures: AtomicU64,
    pub(crate) drains: AtomicU64,
    /// Nanoseconds, summed over drains.
    pub(crate) drain_nanos: AtomicU64,
    /// Handover resourceVersions already waited for (each once).
    pub(crate) seen_handovers: Mutex<HashSet<String>>,
}

/// A snapshot of one replica's sharding.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardStats {
    /// The replica's id.
    pub id: String,
    /// The held ranges (for reports).
    pub held: ShardSelector,
    /// The fraction of the hash space held.
    pub held_fraction: f64,
    /// Cached Deployments this replica owns now.
    pub keys_owned: u64,
    /// Keys its workqueue dropped or purged as not owned.
    pub dropped_not_owned: u64,
    /// Writes skipped because the namespace was not owned any more when the worker got there.
    pub skipped_not_owned: u64,
    /// Publications that moved ranges in.
    pub handovers: u64,
    /// KEP-5647 waits made before reconciling a key of a range that moved in.
    pub handover_waits: u64,
    /// Of those, waits that gave up (the key was retried).
    pub handover_wait_failures: u64,
    /// Drains acknowledged.
    pub drains: u64,
    /// Time spent draining, summed.
    pub drain_time: Duration,
}

/// What the metrics collector reads: a snapshot per live replica.
pub(crate) trait ShardProbe: Send + Sync {
    fn shard_stats(&self) -> Option<ShardStats>;
}

/// Every replica of a process, read at scrape time (one collector for all, so each series
/// family is described once).
#[derive(Default)]
struct ShardCollector {
    replicas: Mutex<Vec<Weak<dyn ShardProbe>>>,
}

impl fmt::Debug for ShardCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardCollector").finish_non_exhaustive()
    }
}

/// Registers the `kinformer_shard_*` series of `replicas` in `telemetry` (served on
/// `/metrics`), labelled `replica`:
///
/// | series | type | what |
/// |---|---|---|
/// | `kinformer_shard_held_fraction` | gauge | fraction of the hash space held |
/// | `kinformer_shard_keys_owned` | gauge | cached Deployments owned |
/// | `kinformer_shard_skipped_writes_total` | counter | writes skipped: not owned any more |
/// | `kinformer_shard_handovers_total` | counter | publications that moved ranges in |
/// | `kinformer_shard_handover_waits_total` | counter | KEP-5647 cache waits |
/// | `kinformer_shard_drains_total` | counter | drains acknowledged |
/// | `kinformer_shard_drain_seconds_total` | counter | time spent draining |
///
/// (`kinformer_shard_dropped_not_owned_total`, per workqueue, comes with the workqueue.)
pub(crate) fn register_metrics(telemetry: &Telemetry, replicas: Vec<Weak<dyn ShardProbe>>) {
    let collector = ShardCollector {
        replicas: Mutex::new(replicas),
    };
    telemetry.with_registry(|r| r.register_collector(Box::new(collector)));
}

impl Collector for ShardCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let stats: Vec<ShardStats> = self
            .replicas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .filter_map(|p| p.shard_stats())
            .collect();
        if stats.is_empty() {
            return Ok(());
        }
        let gauge = |enc: &mut DescriptorEncoder,
                     name: &str,
                     help: &str,
                     f: &dyn Fn(&ShardStats) -> f64| {
            let mut d = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for s in &stats {
                let labels = [("replica", s.id.as_str())];
                ConstGauge::new(f(s)).encode(d.encode_family(&labels)?)?;
            }
            Ok::<(), fmt::Error>(())
        };
        gauge(
            &mut enc,
            "kinformer_shard_held_fraction",
            "Fraction of the hash space this replica holds",
            &|s| s.held_fraction,
        )?;
        gauge(
            &mut enc,
            "kinformer_shard_keys_owned",
            "Cached objects of the sharded kind this replica owns",
            &|s| s.keys_owned as f64,
        )?;
        let counter = |enc: &mut DescriptorEncoder,
                       name: &str,
                       help: &str,
                       f: &dyn Fn(&ShardStats) -> f64| {
            let mut d = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for s in &stats {
                let labels = [("replica", s.id.as_str())];
                ConstCounter::new(f(s)).encode(d.encode_family(&labels)?)?;
            }
            Ok::<(), fmt::Error>(())
        };
        counter(
            &mut enc,
            "kinformer_shard_skipped_writes",
            "Writes skipped because the object was not owned any more",
            &|s| s.skipped_not_owned as f64,
        )?;
        counter(
            &mut enc,
            "kinformer_shard_handovers",
            "Publications that moved ranges in",
            &|s| s.handovers as f64,
        )?;
        counter(
            &mut enc,
            "kinformer_shard_handover_waits",
            "Waits for the previous owner's last write before reconciling (KEP-5647)",
            &|s| s.handover_waits as f64,
        )?;
        counter(
            &mut enc,
            "kinformer_shard_drains",
            "Drains acknowledged",
            &|s| s.drains as f64,
        )?;
        counter(
            &mut enc,
            "kinformer_shard_drain_seconds",
            "Time spent draining ranges that moved away",
            &|s| s.drain_time.as_secs_f64(),
        )?;
        Ok(())
    }
}

pub(crate) fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}
