//! Configuration of a simulated API server.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

pub use crate::apimachinery::schema::{CustomResource, Scope};

/// Configuration of [`crate::Sim`]. Start from [`SimConfig::default`] and override fields.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// TCP port; 0 picks an ephemeral port.
    pub port: u16,
    /// Address to bind; loopback by default.
    pub bind: IpAddr,
    /// Events kept per resource for watch resumption and continue tokens (the watch-cache window).
    /// A watch from an older resourceVersion gets `410 Expired`.
    pub watch_cache_size: usize,
    /// How often a watch with `allowWatchBookmarks=true` gets a BOOKMARK event (kube-apiserver's
    /// `defaultBookmarkFrequency`, a minute; shorten it in tests). Independently of it, a watch
    /// with `timeoutSeconds` gets one 2 s before it times out, and none is sent before the
    /// resourceVersion has moved past the one the watch started at.
    pub bookmark_interval: Duration,
    /// Custom kinds to serve besides the built-ins.
    pub custom_resources: Vec<CustomResource>,
    /// Where to write the kubeconfig; a temporary file (removed on shutdown) when `None`.
    pub write_kubeconfig: Option<PathBuf>,
    /// Create a missing namespace when an object is created in it (convenient for tests).
    /// When false, such a create gets `404 NotFound` for the namespace, as in a real cluster.
    pub auto_create_namespaces: bool,
    /// Largest accepted request body (kube-apiserver uses 3 MiB); larger ones get 413.
    pub max_request_body_bytes: usize,
    /// Create a few demo namespaces, deployments, replica sets and pods at start.
    pub seed_demo: bool,
    /// How long a read at a resourceVersion the server has not reached waits for it before
    /// `504 Timeout` with the cause `ResourceVersionTooLarge` (the watch cache's 3 s
    /// `blockTimeout`); shorten it in tests.
    pub resource_version_wait: Duration,
    /// The kubelet stand-in: a scheduled pod deleted gracefully is marked (`deletionTimestamp`,
    /// `deletionGracePeriodSeconds`) and then deleted by the sim, acting as the pod's kubelet,
    /// after its grace period capped at this (so tests need not wait 30 s). `None`: no
    /// stand-in, terminating pods stay until deleted with `gracePeriodSeconds=0` (as with a
    /// node that is down). Unscheduled pods and grace period 0 are deleted at once either way.
    pub pod_termination: Option<Duration>,
    /// kube-apiserver's `ShardedListAndWatch` feature gate (KEP-5866, alpha): LIST and WATCH
    /// honour `shardSelector` (only the objects whose FNV-1a 64 hash of `metadata.uid` or
    /// `metadata.namespace` is in the selector's ranges; lists echo it in
    /// `metadata.shardInfo`). On by default; off plays a server without the gate, which ignores
    /// the parameter. [`crate::Faults::sharded_list_and_watch`] flips it at runtime.
    pub sharded_list_and_watch: bool,
    /// The namespace controller stand-in: a deleted namespace is marked `Terminating` by the
    /// server, then emptied (every namespaced object in it deleted), its `kubernetes` finalizer
    /// removed and the namespace deleted by the sim, as kube-controller-manager's namespace
    /// controller does. On by default; `false` leaves deleted namespaces `Terminating` (as a
    /// cluster whose controller manager is down).
    pub namespace_controller: bool,
    /// The garbage collector stand-in, with kube-apiserver's `--enable-garbage-collector`:
    /// dependents (`ownerReferences`) of a deleted owner are deleted, and deletes with
    /// `propagationPolicy` `Foreground`/`Orphan` keep the owner with the `foregroundDeletion`/
    /// `orphan` finalizer until its dependents are gone or orphaned. Off by default (then
    /// nothing acts on owner references and `propagationPolicy` changes nothing, as with
    /// `--enable-garbage-collector=false`): tests that play the collector themselves expect
    /// the dependents to stay.
    pub garbage_collector: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            port: 0,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            watch_cache_size: 10_000,
            bookmark_interval: Duration::from_secs(60),
            custom_resources: Vec::new(),
            write_kubeconfig: None,
            auto_create_namespaces: true,
            max_request_body_bytes: 3 * 1024 * 1024,
            seed_demo: false,
            resource_version_wait: Duration::from_secs(3),
            pod_termination: Some(Duration::from_millis(500)),
            sharded_list_and_watch: true,
            namespace_controller: true,
            garbage_collector: false,
        }
    }
}
