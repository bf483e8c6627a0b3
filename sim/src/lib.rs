//! # kinformer-sim: a simulated Kubernetes API server that speaks the real protocol
//!
//! A real HTTP/1.1 server on loopback that behaves like kube-apiserver for what informers and
//! controllers touch: discovery, list (with `limit`/`continue`, `resourceVersion` semantics),
//! watch (resume from a resourceVersion, bookmarks, watch-list, 410 Expired), get/create/
//! update/patch/delete with optimistic concurrency, status and scale subresources, finalizers,
//! label and field selectors, Table output for `kubectl get`, and fault injection. It starts in
//! milliseconds inside a test:
//!
//! ```no_run
//! # async fn demo() -> Result<(), kinformer_sim::SimError> {
//! use kinformer_sim::{Sim, SimConfig, Verb};
//! let sim = Sim::start(SimConfig::default()).await?;
//! let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(sim.client());
//! let _ = pods.list(&Default::default()).await;
//! assert_eq!(sim.requests().count("pods", Verb::List), 1);
//! sim.faults().drop_watches();
//! sim.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! [`Sim::start_background`] runs it on its own thread and runtime (for a test without tokio);
//! the `kinformer-sim` binary serves it on a port for kubectl (`--write-kubeconfig`). The
//! crate has no cargo features. [`logging`] is the log setup (`--log-format`, colour only on a
//! terminal, `NO_COLOR`) of its binary and of the examples that embed it.
//!
//! ## Fidelity notes
//! - One global resourceVersion for every kind (like etcd). Each resource keeps a window of its
//!   last [`SimConfig::watch_cache_size`] events: watches resume from any RV inside it, older
//!   ones get an ERROR event with a `410 Expired` Status; lists at an exact RV (`Exact`, a limit
//!   with an RV, continue tokens) read the state at that RV inside it and get `410` past it.
//! - As in 1.34, a watch from RV unset or `0` is a watch-list: with `allowWatchBookmarks` its
//!   synthetic ADDED events end with a BOOKMARK annotated `k8s.io/initial-events-end`. Bookmarks
//!   come every [`SimConfig::bookmark_interval`] and 2 s before a watch's timeout.
//! - Lists with `resourceVersion=0` are served whole (limit ignored), like the watch cache.
//! - `shardSelector` (KEP-5866) filters lists, watches and watch-list initial events by FNV-1a
//!   ranges of `metadata.uid` or `metadata.namespace` and lists echo it in
//!   `metadata.shardInfo`, as with the `ShardedListAndWatch` gate on; turn it off with
//!   [`SimConfig::sharded_list_and_watch`] or [`Faults::sharded_list_and_watch`].
//!   List items of built-in kinds carry no `apiVersion`/`kind` (as kube-apiserver's typed lists);
//!   items of custom kinds do. Watch event objects always do.
//! - `application/strategic-merge-patch+json` merges lists of the built-in kinds by their
//!   merge keys (containers by name, ports, env, volumes, conditions, finalizers...) and honours
//!   the directives kubectl sends (`$patch`, `$setElementOrder`, `$deleteFromPrimitiveList`,
//!   `$retainKeys`); custom kinds refuse it with 415, as kube-apiserver does. Server-side apply
//!   (`application/apply-patch+yaml`, JSON syntax only) merges the applied configuration as
//!   structured-merge-diff does (associative lists by their keys, sets, atomic lists and
//!   selectors), creates the object if missing (201), removes what a manager stops applying
//!   unless someone else owns it, and answers conflicts with other managers as a 409 unless
//!   forced. Every write keeps `metadata.managedFields` as kube-apiserver's field manager does:
//!   creates, updates and patches are `Update` entries of their `fieldManager` or User-Agent
//!   prefix (with `subresource` for `/status` and `/scale`).
//! - Write bodies of the built-in kinds are decoded against their schema (k8s-openapi's
//!   structs) as kube-apiserver decodes them into Go types: unknown fields are dropped, and
//!   with duplicate fields reported by `fieldValidation` (`Strict`: the request fails;
//!   `Warn`, the default: `Warning` headers; `Ignore`); wrongly typed values are a 400 (a 422
//!   for a patch). Custom kinds have no schema and keep every field.
//! - Objects are validated as the registry strategies validate them: metadata (names by kind,
//!   labels, annotations, finalizers, owner references, an immutable uid) for every kind, and
//!   the main rules of pods (containers; what an update may change), config maps and secrets
//!   (`immutable`), deployments and replica sets (selectors): a `422 Invalid` listing every
//!   cause. Objects seeded with [`Sim::create_object`] are not validated (any state can be
//!   seeded); later writes to them are.
//! - Request options are validated as kube-apiserver validates them (`ListOptions`,
//!   `DeleteOptions`, `CreateOptions`, `UpdateOptions`, `PatchOptions`: a `422 Invalid` naming
//!   `<Kind>.meta.k8s.io`); a DELETE without a body takes its options from the query. A
//!   completed DELETE answers with a `Status` except for pods, services, namespaces and service
//!   accounts (`ReturnDeletedObject`), which answer with the object, as does a delete that
//!   finalizers or a grace period hold.
//! - Built-in kinds are defaulted as kube-apiserver defaults what it decodes (creates, updates,
//!   patch results): Deployment strategy and limits, pod spec and container fields, service
//!   type and ports, secret type, the namespace name label; a created pod gets its `qosClass`.
//! - `metadata.generation` moves as each kind's registry strategy moves it: Deployments on a
//!   spec or annotations change, ReplicaSets and Pods on spec, custom kinds on anything but
//!   metadata; ConfigMaps, Secrets, Services and the other built-ins keep none; status writes
//!   never bump it.
//! - Deleting a pod is two writes, as on kube-apiserver: a MODIFIED event with
//!   `deletionTimestamp` and `deletionGracePeriodSeconds` (from `gracePeriodSeconds`, else the
//!   pod's `terminationGracePeriodSeconds`, else 30; 0 for an unscheduled or finished pod), then
//!   DELETED: at once for grace 0, else when a kubelet stand-in deletes it after
//!   `min(grace, `[`SimConfig::pod_termination`]`)`. A later, shorter grace period moves the
//!   deletionTimestamp back, never into the past (then it is now, and a period other than 0
//!   becomes 1). Finalizers hold any object (marked, kept) until the last one is removed.
//! - Creating an object with status through the main resource of a kind with a status
//!   subresource resets it (a Pod starts `Pending`), as the real registry strategies do; use the
//!   `status` subresource to set it, or seed objects in any state with [`Sim::create_object`].
//! - [`Sim::restart`] (or [`Faults::go_down`] / [`Faults::come_back`]) simulates a
//!   kube-apiserver restart: while down, every connection is aborted or reset; back up, the
//!   objects are unchanged but the watch cache starts at the current resourceVersion, so older
//!   watches get `410 Expired` and their clients relist.
//! - No controllers run: no garbage collection by ownerReferences, no pod scheduling, no
//!   deployment controller (write status yourself). Deleting a namespace deletes its objects at
//!   once (pods with grace period 0; objects with finalizers are marked and stay).
//!   The sim's README has the full fidelity table.
//! - Creating into a missing namespace creates it unless [`SimConfig::auto_create_namespaces`]
//!   is false (then 404, like a real cluster).
//!
//! ## Control endpoint (for the binary and other clients)
//! `POST /sim/faults/drop-watches`, `POST /sim/faults/fail-lists?n=N&code=C[&resource=R][&retryAfter=S]`,
//! `POST /sim/faults/fail-watches?...`, `POST /sim/faults/fail?verb=V&...`,
//! `POST /sim/faults/expire-watches`, `POST /sim/faults/compact`,
//! `POST /sim/faults/malformed-next-event[?resource=R]`, `POST /sim/faults/close-mid-object-next[?resource=R]`,
//! `POST /sim/faults/slow-watches?perEventMs=MS` (0 = off), `POST /sim/faults/stall-watches[?on=false]`,
//! `POST /sim/faults/throttle?[verbs=list,watch][&n=N|all][&retryAfter=S][&resource=R]`,
//! `POST /sim/faults/end-watches[?on=false]`, `POST /sim/faults/expire-every-watch?mode=http|event|off`,
//! `POST /sim/faults/reject-watch-list[?on=false]`, `POST /sim/faults/ignore-watch-list[?on=false]`,
//! `POST /sim/faults/strip-resource-versions[?on=false]`,
//! `POST /sim/faults/clear`, `POST /sim/features/sharded-list-and-watch[?on=false]` (the
//! `ShardedListAndWatch` feature gate; `clear` leaves it),
//! `GET /sim/faults` (counters), `GET /sim/requests` (request counts, open watches),
//! `GET /sim/state` (resourceVersion), `POST /sim/churn/start?rate=N&namespaces=a,b&kinds=pods,configmaps&seed=S`,
//! `POST /sim/churn/stop`, `GET /sim/churn`.

#![warn(missing_docs)]

// The layers, as kube-apiserver lays them out; imports run down this list, never up (each
// folder's mod.rs says what it owns): harness (faults, control endpoint, churn, kubelet) ->
// server (request handling) -> registry (API semantics, per-kind strategies) -> storage
// (versioned store, watch cache) -> apimachinery (shared types). This file assembles them.
mod apimachinery;
pub mod bench;
mod config;
mod harness;
pub mod logging;
mod registry;
mod server;
mod storage;

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch as tokio_watch;
use tokio::task::JoinHandle;

pub use config::{CustomResource, Scope, SimConfig};
pub use harness::churn::{ChurnConfig, ChurnCounts, ChurnHandle, ChurnKind, parse_rate};
pub use harness::faults::Faults;
pub use server::counters::{MAX_ARRIVALS, RequestCounters, Verb};
pub use server::faults::{ExpireMode, FaultCounters};

use apimachinery::errors::ApiError;
use apimachinery::options::{DeleteOptions, PatchKind};
use apimachinery::schema::{Registry, ResourceDef};
use harness::control::Control;
use harness::kubeconfig::KubeconfigFile;
use registry::generic::{self as ops, Part};
use server::shared::Shared;
use storage::store::{Outcome, Store};

/// Errors of the sim's own API (not HTTP responses, which are `Status` objects).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The configuration is invalid (e.g. a custom resource collides with a built-in).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Binding the port or writing the kubeconfig failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// Building the kube client failed.
    #[error("kube client: {0}")]
    Client(#[from] kube::Error),
    /// No served resource has this plural name.
    #[error("unknown resource {0:?}")]
    UnknownResource(String),
    /// The operation was refused as the HTTP API would refuse it.
    #[error("API error {code} {reason}: {message}")]
    Api {
        /// HTTP status code.
        code: u16,
        /// Status reason (`NotFound`, `Conflict`, ...).
        reason: String,
        /// Status message.
        message: String,
    },
    /// The background runtime could not be started or stopped.
    #[error("runtime: {0}")]
    Runtime(String),
    /// A wait ran past its deadline.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

impl From<ApiError> for SimError {
    fn from(e: ApiError) -> Self {
        Self::Api {
            code: e.code,
            reason: e.reason.to_string(),
            message: e.message,
        }
    }
}

/// A running simulated API server. Dropping it (or [`Sim::shutdown`]) stops it.
pub struct Sim {
    shared: Arc<Shared>,
    /// The `/sim/` control endpoint, which owns the managed churn.
    control: Arc<Control>,
    url: String,
    addr: SocketAddr,
    uri: ::http::Uri,
    client: kube::Client,
    kubeconfig: KubeconfigFile,
    shutdown_tx: tokio_watch::Sender<bool>,
    server: Option<JoinHandle<()>>,
    runtime: tokio::runtime::Handle,
}

impl Sim {
    /// Starts a server on the current tokio runtime (multi-thread or current-thread, e.g.
    /// `#[tokio::test]` or `#[actix_rt::test]`); it serves while that runtime runs.
    pub async fn start(cfg: SimConfig) -> Result<Sim, SimError> {
        let registry = Registry::new(&cfg.custom_resources).map_err(SimError::Config)?;
        let store = Arc::new(Store::new(registry, cfg.watch_cache_size));
        if let Some(cap) = cfg.pod_termination {
            harness::kubelet::start(&store, cap);
        }
        if cfg.namespace_controller {
            harness::namespaces::start(&store, cfg.pod_termination.is_some());
        }
        store.set_garbage_collection(cfg.garbage_collector);
        if cfg.garbage_collector {
            harness::gc::start(&store);
        }
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            ops::ensure_namespace(&store, ns, true)?;
        }
        if cfg.seed_demo {
            harness::demo::seed(&store)?;
        }
        let listener = TcpListener::bind((cfg.bind, cfg.port)).await?;
        let addr = listener.local_addr()?;
        let url = format!("http://{addr}");
        let uri: ::http::Uri = url
            .parse()
            .map_err(|e| SimError::Config(format!("bad URL {url}: {e}")))?;
        let kubeconfig = KubeconfigFile::write(&url, cfg.write_kubeconfig.as_deref())?;
        let (shutdown_tx, shutdown_rx) = tokio_watch::channel(false);
        let faults = Arc::new(server::faults::FaultState::new());
        faults.set_sharded_list_and_watch(cfg.sharded_list_and_watch);
        let requests = RequestCounters::default();
        let control = Arc::new(Control::new(
            Faults {
                state: faults.clone(),
                store: store.clone(),
            },
            requests.clone(),
            store.clone(),
        ));
        let shared = Arc::new(Shared {
            store,
            faults,
            requests,
            bookmark_interval: cfg.bookmark_interval.max(Duration::from_millis(1)),
            auto_namespaces: cfg.auto_create_namespaces,
            max_body: cfg.max_request_body_bytes,
            server_address: addr.to_string(),
            shutdown: shutdown_rx.clone(),
            rv_wait: cfg.resource_version_wait,
            mount: Some(control.clone()),
        });
        let server = tokio::spawn(server::serve(listener, shared.clone(), shutdown_rx));
        let client = kube::Client::try_from(Self::config_for(&uri))?;
        tracing::info!(%url, "kinformer-sim listening");
        Ok(Sim {
            shared,
            control,
            url,
            addr,
            uri,
            client,
            kubeconfig,
            shutdown_tx,
            server: Some(server),
            runtime: tokio::runtime::Handle::current(),
        })
    }

    /// Starts a server on its own thread with its own (current-thread) runtime, for callers
    /// that are not inside a tokio runtime or want the sim beside an actix `System`.
    pub fn start_background(cfg: SimConfig) -> Result<SimThread, SimError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("kinformer-sim".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(SimError::Runtime(e.to_string())));
                        return;
                    }
                };
                rt.block_on(async move {
                    let sim = Sim::start(cfg).await;
                    let ok = sim.is_ok();
                    let _ = tx.send(sim);
                    if ok {
                        let _ = stop_rx.await;
                    }
                });
            })?;
        let sim = rx
            .recv()
            .map_err(|_| SimError::Runtime("the sim thread exited during start".into()))??;
        Ok(SimThread {
            sim,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    fn config_for(uri: &::http::Uri) -> kube::Config {
        let mut c = kube::Config::new(uri.clone());
        c.default_namespace = "default".into();
        c
    }

    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kube client for this server (default namespace `default`; kube's default retry of
    /// 429/503/504 is on, as for any `Client` built from a `Config`).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The kubeconfig file pointing at this server (for kubectl or `KUBECONFIG`).
    pub fn kubeconfig_path(&self) -> &Path {
        self.kubeconfig.path()
    }

    /// A kube `Config` for this server, to customise before building a client.
    pub fn kube_config(&self) -> kube::Config {
        Self::config_for(&self.uri)
    }

    /// The fault injector.
    pub fn faults(&self) -> Faults {
        self.control.faults.clone()
    }

    /// Restarts the API server: it goes down (every connection aborted, new ones reset) for
    /// `down_for`, then comes back on the same address with the same objects and a watch cache
    /// that starts at the current resourceVersion, so watches from older ones get `410
    /// Expired`, as after a kube-apiserver restart. Objects may be changed meanwhile through
    /// the direct methods ([`Sim::create_object`], ...). For a test that acts during the
    /// outage, [`Faults::go_down`] and [`Faults::come_back`] split it. Returns the
    /// resourceVersion the new watch cache starts at.
    pub async fn restart(&self, down_for: Duration) -> u64 {
        self.faults().restart(down_for).await
    }

    /// Request counters by (resource, verb), and open watches.
    pub fn requests(&self) -> RequestCounters {
        self.shared.requests.clone()
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.resource_version()
    }

    /// Starts a churn generator on the sim's runtime; dropping the handle stops it.
    pub fn start_churn(&self, cfg: ChurnConfig) -> ChurnHandle {
        harness::churn::start_on(&self.runtime, self.shared.store.clone(), cfg)
    }

    /// Starts churn owned by the sim: it is the churn `/sim/churn` reports and
    /// `/sim/churn/stop` stops (replacing any churn started there), and it stops at shutdown.
    pub fn start_managed_churn(&self, cfg: ChurnConfig) {
        let handle = harness::churn::start_on(&self.runtime, self.shared.store.clone(), cfg);
        self.control.replace_churn(handle);
    }

    /// Counts of the sim-owned churn (see [`Sim::start_managed_churn`]), if one runs.
    pub fn managed_churn_counts(&self) -> Option<ChurnCounts> {
        self.control.churn_counts()
    }

    fn def(&self, resource: &str) -> Result<Arc<ResourceDef>, SimError> {
        self.shared
            .store
            .registry
            .by_plural(resource)
            .cloned()
            .ok_or_else(|| SimError::UnknownResource(resource.to_string()))
    }

    /// Creates an object directly in the store (no HTTP), with the API's rules except that the
    /// `status` it carries is kept and the object is not validated (to seed objects in any
    /// state, even ones kube-apiserver would refuse); `resource` is a plural
    /// (`pods`) or `plural.group`. Returns the stored object. Fast: for seeding tests.
    pub fn create_object(
        &self,
        resource: &str,
        namespace: Option<&str>,
        obj: Value,
    ) -> Result<Value, SimError> {
        let def = self.def(resource)?;
        let o = ops::create_keep_status(
            &self.shared.store,
            &def,
            namespace,
            obj,
            self.shared.auto_namespaces,
        )?;
        Ok(o.to_value(&def)?)
    }

    /// The current object, if any.
    pub fn get_object(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, SimError> {
        let def = self.def(resource)?;
        match self
            .shared
            .store
            .get(&def, &ops::key_of(&def, namespace, name))
        {
            Some(o) => Ok(Some(o.to_value(&def)?)),
            None => Ok(None),
        }
    }

    /// Replaces an object (PUT semantics; a set `metadata.resourceVersion` must be current).
    pub fn replace_object(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        obj: Value,
    ) -> Result<Value, SimError> {
        let def = self.def(resource)?;
        let o = ops::update(
            &self.shared.store,
            &def,
            namespace,
            name,
            Part::Main,
            obj,
            false,
            None,
        )?;
        Ok(o.to_value(&def)?)
    }

    /// Replaces an object's status (the `status` subresource), as a `PUT` of `/status` does:
    /// `obj` is the whole object, and its metadata is taken as the kind's status strategy lets
    /// it through (so pass the object as read, not a bare `{"status": ...}`).
    pub fn replace_status(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        obj: Value,
    ) -> Result<Value, SimError> {
        let def = self.def(resource)?;
        let o = ops::update(
            &self.shared.store,
            &def,
            namespace,
            name,
            Part::Status,
            obj,
            false,
            None,
        )?;
        Ok(o.to_value(&def)?)
    }

    /// Applies a JSON merge patch to an object.
    pub fn patch_object(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        merge_patch: &Value,
    ) -> Result<Value, SimError> {
        let def = self.def(resource)?;
        let body = serde_json::to_vec(merge_patch).map_err(|e| SimError::Config(e.to_string()))?;
        let o = ops::patch(
            &self.shared.store,
            &def,
            namespace,
            name,
            Part::Main,
            PatchKind::Merge,
            &body,
            false,
            self.shared.auto_namespaces,
            None,
            false,
        )?;
        Ok(o.0.to_value(&def)?)
    }

    /// Deletes an object; returns true if it is gone, false if finalizers keep it (marked).
    pub fn delete_object(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<bool, SimError> {
        let def = self.def(resource)?;
        let out = ops::delete(
            &self.shared.store,
            &def,
            namespace,
            name,
            &DeleteOptions::default(),
        )?;
        Ok(matches!(out, Outcome::Deleted(_)))
    }

    /// How many objects of `resource` exist (all namespaces).
    pub fn object_count(&self, resource: &str) -> Result<usize, SimError> {
        let def = self.def(resource)?;
        Ok(self.shared.store.count(&def))
    }

    fn signal_shutdown(&self) {
        self.shutdown_tx.send_replace(true);
        self.control.stop_churn();
    }

    /// Stops the server and waits until it has closed every connection.
    pub async fn shutdown(mut self) {
        self.signal_shutdown();
        if let Some(h) = self.server.take() {
            let _ = h.await;
        }
    }
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("url", &self.url)
            .field("kubeconfig", &self.kubeconfig.path())
            .finish_non_exhaustive()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.signal_shutdown();
    }
}

/// A [`Sim`] running on its own thread (see [`Sim::start_background`]). Derefs to [`Sim`];
/// dropping it or [`SimThread::shutdown`] stops the server and joins the thread.
///
/// [`Sim::client`] of a background sim sends its requests through the sim's runtime, so it can
/// be used from any runtime.
#[derive(Debug)]
pub struct SimThread {
    sim: Sim,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SimThread {
    /// Stops the server and joins its thread.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.sim.signal_shutdown();
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl std::ops::Deref for SimThread {
    type Target = Sim;
    fn deref(&self) -> &Sim {
        &self.sim
    }
}

impl Drop for SimThread {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// Polls `cond` every few milliseconds until it holds or `timeout` passes: the way tests should
/// wait for asynchronous effects (no sleeps as synchronisation).
pub async fn wait_until<F: FnMut() -> bool>(
    timeout: Duration,
    mut cond: F,
) -> Result<(), SimError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if cond() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(SimError::Timeout(timeout));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Like [`wait_until`] with an async condition.
pub async fn wait_until_async<F, Fut>(timeout: Duration, mut cond: F) -> Result<(), SimError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if cond().await {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(SimError::Timeout(timeout));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
