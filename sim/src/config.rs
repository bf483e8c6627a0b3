//! Configuration of a simulated API server.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

/// Whether objects of a kind live in a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Objects live in a namespace (`/namespaces/{ns}/{plural}`).
    Namespaced,
    /// Objects are cluster-wide (`/{plural}`).
    Cluster,
}

/// A custom kind served at `/apis/{group}/{version}/...`, registered at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomResource {
    /// API group, e.g. `example.com`.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Widget`.
    pub kind: String,
    /// Plural resource name used in paths, e.g. `widgets`.
    pub plural: String,
    /// Namespaced or cluster-scoped.
    pub scope: Scope,
    /// Short names for discovery (`kubectl get wd`).
    pub short_names: Vec<String>,
    /// Categories for discovery (e.g. `all`).
    pub categories: Vec<String>,
    /// Whether the kind has a `status` subresource (then the main resource ignores status).
    pub status_subresource: bool,
}

impl CustomResource {
    /// A custom kind without short names, categories or status subresource.
    pub fn new(
        group: impl Into<String>,
        version: impl Into<String>,
        kind: impl Into<String>,
        plural: impl Into<String>,
        scope: Scope,
    ) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            scope,
            short_names: Vec::new(),
            categories: Vec::new(),
            status_subresource: false,
        }
    }

    /// Enables the `status` subresource.
    pub fn with_status_subresource(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// Sets the short names.
    pub fn with_short_names<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        names: I,
    ) -> Self {
        self.short_names = names.into_iter().map(Into::into).collect();
        self
    }
}

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
    /// How often a watch with `allowWatchBookmarks=true` gets a BOOKMARK event.
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
        }
    }
}
