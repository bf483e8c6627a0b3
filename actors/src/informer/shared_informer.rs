//! `SharedIndexInformer<K>`: the assembly of reflector, FIFO, indexer and listener actors behind
//! one cheap, cloneable handle (client-go's `sharedIndexInformer`).
//!
//! The actors are assembled, started and stopped by the `assembly` module.

use std::{
    fmt,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use actix::prelude::*;
use kinformer::{
    KeyFunc,
    lean::LazyObject,
    processor::Processor,
    resource_version::{InvalidResourceVersion, compare_resource_version},
    shard::ShardSelector,
    store::{Indexers, Lister, Store},
};
use kube::{Api, Client, api::TypeMeta};

use crate::{
    config::{InformerConfig, ListenerConfig},
    error::InformerError,
    handler::{EnqueueKeys, KeyMapper, ResourceEventHandler},
    informer::assembly::{self, Idle, Inner, PendingHandler, ShutdownReport, State},
    listwatch::lister_watcher::{KubeListerWatcher, ListerWatcher},
    object::InformerObject,
    pipeline::destination::{HandlerKind, ThreadHandler},
    pipeline::listener::listener_name,
    pipeline::messages::{AddIndexers, AddListener, Barrier, Notify, RemoveListener, Stop},
    telemetry::health::{ReflectorHealth, ReflectorStatus, ShardFiltering},
    telemetry::metrics::{Telemetry, default_informer_name},
    telemetry::probe::{InformerProbe, Lifecycle},
    telemetry::stats::{FifoStatus, IndexerStatus, ListenerStats},
};

/// A shared informer: a local, indexed, always-current cache of one resource and the handlers
/// told about every change. Cloning the handle is cheap; every clone is the same informer.
///
/// ```no_run
/// use k8s_openapi::api::core::v1::Pod;
/// use kinformer_actors::{SharedIndexInformer, ResourceEventHandlerFuncs};
/// # async fn demo(client: kube::Client) -> Result<(), kinformer_actors::InformerError> {
/// let pods = SharedIndexInformer::<Pod>::all(client);
/// pods.add_event_handler(
///     ResourceEventHandlerFuncs::new().on_add(|pod: &std::sync::Arc<Pod>, _| {
///         println!("pod {:?}", pod.metadata.name)
///     }),
/// )
/// .await?;
/// pods.start()?;
/// pods.wait_for_sync().await;
/// println!("{} pods cached", pods.lister().len());
/// pods.shutdown().await;
/// # Ok(()) }
/// ```
pub struct SharedIndexInformer<K: InformerObject> {
    inner: Arc<Inner<K>>,
}

impl<K: InformerObject> Clone for SharedIndexInformer<K> {
    fn clone(&self) -> Self {
        SharedIndexInformer {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K: InformerObject> fmt::Debug for SharedIndexInformer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedIndexInformer")
            .field("kind", &self.inner.kind)
            .finish_non_exhaustive()
    }
}

impl<K> SharedIndexInformer<K>
where
    K: InformerObject,
    K::DynamicType: Default,
{
    /// An informer over all namespaces, with default options.
    pub fn all(client: Client) -> Self {
        Self::new(
            KubeListerWatcher::new(client, None, &Default::default()),
            InformerConfig::default(),
        )
        .of_own_type()
    }

    /// An informer over one namespace, with default options.
    pub fn namespaced(client: Client, namespace: &str) -> Self {
        Self::new(
            KubeListerWatcher::new(client, Some(namespace), &Default::default()),
            InformerConfig::default(),
        )
        .in_namespace(Some(namespace))
        .of_own_type()
    }

    /// An informer over one namespace (or all), with the given options.
    pub fn with_config(client: Client, namespace: Option<&str>, config: InformerConfig) -> Self {
        Self::new(
            KubeListerWatcher::new(client, namespace, &Default::default())
                .content_type(config.content_type),
            config,
        )
        .in_namespace(namespace)
        .of_own_type()
    }

    /// An informer over an existing `Api`, with the given options.
    pub fn from_api(api: Api<K>, config: InformerConfig) -> Self {
        let namespace = api.namespace().map(str::to_string);
        Self::new(
            KubeListerWatcher::from_api(api, &Default::default()).content_type(config.content_type),
            config,
        )
        .in_namespace(namespace.as_deref())
        .of_own_type()
    }

    /// R5 in the lean mode (I7): objects that say they are of another type are dropped, as the
    /// typed decode of `K` drops them in the typed mode.
    pub(crate) fn of_own_type(self) -> Self {
        let dt = K::DynamicType::default();
        self.expect_type(TypeMeta {
            api_version: K::api_version(&dt).into_owned(),
            kind: K::kind(&dt).into_owned(),
        })
    }
}

impl<K: InformerObject> SharedIndexInformer<K> {
    /// An informer over any lister-watcher, keyed `namespace/name`.
    pub fn new(lw: impl ListerWatcher<K>, config: InformerConfig) -> Self {
        Self::build(lw, config, None)
    }

    /// An informer with a custom key function. In the lean cache mode (I7) the function needs
    /// the typed object, so every object is decoded when it is queued (the default key reads
    /// the metadata only).
    pub fn with_key_func(
        lw: impl ListerWatcher<K>,
        config: InformerConfig,
        key_func: KeyFunc<K>,
    ) -> Self {
        Self::build(lw, config, Some(key_func))
    }

    fn build(
        lw: impl ListerWatcher<K>,
        config: InformerConfig,
        custom: Option<KeyFunc<K>>,
    ) -> Self {
        let key_func = custom
            .clone()
            .unwrap_or_else(|| Arc::new(kinformer::meta_namespace_key::<K>));
        let store = Store::with_mode(key_func, Indexers::new(), config.cache);
        let lister = store.lister();
        let processor = Processor::new(store, config.resync);
        let kind: Arc<str> = lw.resource_name().into();
        let (shard, _) = tokio::sync::watch::channel(config.reflector.shard_selector.clone());
        SharedIndexInformer {
            inner: Arc::new(Inner {
                shard,
                kind,
                lw: Arc::new(lw),
                config,
                lister,
                reflector: Arc::new(ReflectorStatus::default()),
                fifo: Arc::new(FifoStatus::default()),
                indexer: Arc::new(IndexerStatus::default()),
                state: Mutex::new(State::Idle(Box::new(Idle {
                    processor,
                    key_func: custom,
                    handlers: Vec::new(),
                    transform: None,
                    validate: None,
                    on_error: None,
                    expected_type: None,
                    server_health: None,
                }))),
                next_id: AtomicU64::new(1),
                #[cfg(feature = "kube-runtime")]
                kube_hub: tokio::sync::OnceCell::new(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<K>> {
        self.inner.state()
    }

    /// Records the namespace the informer's lister-watcher lists (metrics, debug view).
    pub(crate) fn in_namespace(self, namespace: Option<&str>) -> Self {
        self.inner.reflector.set_namespace(namespace);
        self
    }

    /// The namespace this informer lists; None for all namespaces (or a custom
    /// [`ListerWatcher`] built with [`new`](Self::new), whose scope the informer does not know).
    pub fn namespace(&self) -> Option<&str> {
        self.inner.reflector.namespace()
    }

    /// The type-erased, weak view of this informer that [`Telemetry`]
    /// reads at scrape time.
    pub(crate) fn probe(&self) -> std::sync::Weak<dyn InformerProbe> {
        let weak: std::sync::Weak<Inner<K>> = Arc::downgrade(&self.inner);
        weak
    }

    /// True when both handles are the same informer (X1).
    pub fn same_as(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The resource this informer watches (plural), e.g. `pods`.
    pub fn resource(&self) -> &str {
        &self.inner.kind
    }

    /// The lock-free reader of the cache (I6). In the lean mode (I7) its reads decode what
    /// they return; [`Lister::lazy`] reads without decoding.
    pub fn lister(&self) -> Lister<K> {
        self.inner.lister.clone()
    }

    /// Lean mode's counters (I7): objects and bytes cached, decodes, hot-cache hits; None in
    /// the typed mode.
    pub fn lean_stats(&self) -> Option<kinformer::lean::LeanStats> {
        self.inner.lister.lean_stats()
    }

    /// Expects objects of this `apiVersion`/`kind` (R5 in the lean mode: an object that says
    /// it is of another type is dropped and reported). Only before `start`.
    pub(crate) fn expect_type(self, types: TypeMeta) -> Self {
        let _ = self.with_idle(|i| i.expected_type = Some(types));
        self
    }

    /// True once the first list was applied to the cache and handed to every handler (F5).
    pub fn has_synced(&self) -> bool {
        self.inner.fifo.has_synced()
    }

    /// Resolves once [`has_synced`](Self::has_synced).
    pub async fn wait_for_sync(&self) {
        self.inner.fifo.synced().await
    }

    /// The resourceVersion the cache is synced to (client-go's `LastSyncResourceVersion`).
    pub fn last_sync_resource_version(&self) -> String {
        self.inner.reflector.last_sync_resource_version()
    }

    /// The shard (KEP-5866 hash ranges) this informer lists and watches; `None`: every object
    /// (K1).
    pub fn shard(&self) -> Option<ShardSelector> {
        self.inner.shard.borrow().clone()
    }

    /// Who filters the shard, as the last LIST showed: the server (its answer carried
    /// `metadata.shardInfo`) or this informer (K1). `None` without a shard or before a LIST.
    pub fn shard_filtering(&self) -> Option<ShardFiltering> {
        self.inner.reflector.shard_filtering()
    }

    /// Changes the shard of a running (or not yet started) informer (K2): ranges that only
    /// shrink need no LIST (leaving objects leave the cache and no handler is told: they still
    /// exist, as with client-go's informer replaced by a narrower one; the watch restarts with the narrower selector from the current resourceVersion);
    /// ranges that grow relist the new selector (handlers get Add for each entering object;
    /// objects that stay are not re-announced); an empty selector asks nothing of the server.
    /// Returns at once; the reflector applies it at
    /// its next step. Errors after shutdown.
    pub fn set_shard(&self, selector: Option<ShardSelector>) -> Result<(), InformerError> {
        if matches!(&*self.state(), State::Stopped) {
            return Err(InformerError::ShutDown);
        }
        self.inner.shard.send_replace(selector);
        Ok(())
    }

    /// True when the informer has seen `resource_version` (KEP-5647, K3): its last synced
    /// resourceVersion (from LISTs, watch events and bookmarks, handed to the FIFO) is at least
    /// `resource_version`, compared as apimachinery's `CompareResourceVersion` does. False when
    /// either is not a well-formed integer (see
    /// [`wait_for_resource_version`](Self::wait_for_resource_version) for the typed error).
    /// Never blocks.
    pub fn has_seen_resource_version(&self, resource_version: &str) -> bool {
        matches!(self.seen(resource_version), Ok(true))
    }

    fn seen(&self, resource_version: &str) -> Result<bool, WaitError> {
        let last = self.inner.reflector.last_sync_resource_version();
        if last.is_empty() {
            // Nothing synced yet: not seen, and nothing to compare.
            compare_resource_version(resource_version, resource_version)?;
            return Ok(false);
        }
        Ok(compare_resource_version(&last, resource_version)? != std::cmp::Ordering::Less)
    }

    /// Waits until the informer has seen `resource_version` (KEP-5647, K3) *and* everything it
    /// had received up to then is in the cache (the lister), or `deadline` passes.
    ///
    /// Woken by progress (each move of the resourceVersion), never by polling; then a barrier
    /// through the FIFO waits until every delta queued before it was applied by the indexer.
    /// Works from any executor (actix, tokio, `futures::executor::block_on`). Errors:
    /// [`WaitError::NotComparable`] when `resource_version` or the informer's is not a
    /// well-formed integer, [`WaitError::Timeout`] at the deadline, [`WaitError::ShutDown`]
    /// when the informer stops (or never started by the deadline: then `Timeout`).
    pub async fn wait_for_resource_version(
        &self,
        resource_version: &str,
        deadline: std::time::Instant,
    ) -> Result<(), WaitError> {
        let wait = async {
            loop {
                let moved = self.inner.reflector.rv_moved();
                let mut moved = std::pin::pin!(moved);
                // Registered before the check: a move in between is not missed.
                moved.as_mut().enable();
                if matches!(&*self.state(), State::Stopped) {
                    return Err(WaitError::ShutDown);
                }
                if self.seen(resource_version)? {
                    break;
                }
                moved.await;
            }
            let fifo = match &*self.state() {
                State::Running(r) => r.fifo.clone(),
                _ => return Err(WaitError::ShutDown),
            };
            fifo.send(Barrier)
                .await
                .map_err(|_| WaitError::ShutDown)?
                .map_err(|_| WaitError::ShutDown)
        };
        let limit = deadline.saturating_duration_since(std::time::Instant::now());
        match crate::runtime::timeout(limit, wait).await {
            Some(r) => r,
            None => Err(WaitError::Timeout {
                resource_version: resource_version.to_string(),
                last_seen: self.inner.reflector.last_sync_resource_version(),
            }),
        }
    }

    /// The reflector's health: phase, restarts, last error, counters (S2).
    pub fn health(&self) -> ReflectorHealth {
        self.inner.reflector.health()
    }

    /// The FIFO's live counters.
    pub fn fifo_status(&self) -> &FifoStatus {
        &self.inner.fifo
    }

    /// The kube-rs interop's hub of this informer, made on first use (`interop/kube_runtime.rs`).
    #[cfg(feature = "kube-runtime")]
    pub(crate) fn kube_hub(&self) -> &tokio::sync::OnceCell<Arc<dyn std::any::Any + Send + Sync>> {
        &self.inner.kube_hub
    }

    /// The FIFO's counters, shared (the kube-rs interop waits for the sync on them).
    #[cfg(feature = "kube-runtime")]
    pub(crate) fn fifo_shared(&self) -> Arc<FifoStatus> {
        Arc::clone(&self.inner.fifo)
    }

    /// The indexer's live counters.
    pub fn indexer_status(&self) -> &IndexerStatus {
        &self.inner.indexer
    }

    /// True between `start` and `shutdown`.
    pub fn is_running(&self) -> bool {
        matches!(*self.state(), State::Running(_))
    }

    fn with_idle<R>(&self, f: impl FnOnce(&mut Idle<K>) -> R) -> Result<R, InformerError> {
        match &mut *self.state() {
            State::Idle(idle) => Ok(f(idle)),
            State::Running(_) => Err(InformerError::AlreadyStarted),
            State::Stopped => Err(InformerError::ShutDown),
        }
    }

    /// Transforms every object before it is cached (P2), e.g. to drop `managedFields`. Runs on
    /// the reflector's thread. Only before `start`.
    ///
    /// In the lean cache mode (I7) the transform needs the typed object: every object is
    /// decoded for it and its output encoded again. To drop `managedFields` there, set
    /// [`LeanConfig::strip_managed_fields`](kinformer::lean::LeanConfig::strip_managed_fields)
    /// instead: the bytes are cut, nothing is decoded.
    pub fn set_transform(
        &self,
        f: impl Fn(K) -> K + Send + Sync + 'static,
    ) -> Result<(), InformerError> {
        self.with_idle(|i| i.transform = Some(Arc::new(f)))
    }

    /// Drops objects for which `f` fails (R5: unexpected type/GVK). `f` also gets the type of
    /// the list a listed object came in (list items carry no kind of their own). Only before
    /// `start`. In the lean cache mode (I7) every object is decoded for `f`.
    pub fn set_validator(
        &self,
        f: impl Fn(&K, Option<&kube::api::TypeMeta>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Result<(), InformerError> {
        self.with_idle(|i| i.validate = Some(Arc::new(f)))
    }

    /// Called with every reflector error and warning (client-go's `SetWatchErrorHandler`).
    /// Only before `start`.
    pub fn set_watch_error_handler(
        &self,
        f: impl Fn(&dyn std::error::Error) + Send + Sync + 'static,
    ) -> Result<(), InformerError> {
        self.with_idle(|i| i.on_error = Some(Arc::new(f)))
    }

    /// Shares one API server's health with this informer (R11, docs/semantics.md): its
    /// reflector reports its requests, answers and outage failures to `health`, and after an
    /// outage it retries as soon as any informer sharing `health` (or its probe) found the
    /// server back, instead of waiting out its own grown backoff. A
    /// [`SharedInformerFactory`](crate::SharedInformerFactory) does this for every informer it
    /// makes. Only before `start`.
    pub fn set_server_health(
        &self,
        health: crate::ServerHealthHandle,
    ) -> Result<(), InformerError> {
        self.with_idle(|i| i.server_health = Some(health))
    }

    /// Adds indices; on a running informer the objects already cached are indexed (I4).
    pub async fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), InformerError> {
        let indexer = match &mut *self.state() {
            State::Idle(idle) => return Ok(idle.processor.store_mut().add_indexers(indexers)?),
            State::Running(r) => r.indexer.clone(),
            State::Stopped => return Err(InformerError::ShutDown),
        };
        Ok(indexer.send(AddIndexers(indexers)).await??)
    }

    /// Registers a handler run on its own thread, with default listener options.
    pub async fn add_event_handler(
        &self,
        handler: impl ResourceEventHandler<K>,
    ) -> Result<HandlerRegistration<K>, InformerError> {
        self.add_event_handler_with(handler, ListenerConfig::default())
            .await
    }

    /// Registers a handler with the given listener options (policy, resync, name).
    pub async fn add_event_handler_with(
        &self,
        handler: impl ResourceEventHandler<K>,
        config: ListenerConfig,
    ) -> Result<HandlerRegistration<K>, InformerError> {
        self.register(
            HandlerKind::Handler(ThreadHandler::Typed(Box::new(handler))),
            config,
        )
        .await
    }

    /// Registers a handler of [`LazyObject`]s, run on its own thread: each object's metadata
    /// is at hand and its typed form is decoded only if the handler calls
    /// [`LazyObject::object`] (once per event, shared with every other handler that reads it).
    /// In the lean cache mode (I7) a handler that reads keys, labels or owners never decodes;
    /// in the typed mode it costs what a typed handler costs.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use k8s_openapi::api::core::v1::Pod;
    /// use kinformer::lean::LazyObject;
    /// use kinformer_actors::{ResourceEventHandlerFuncs, SharedIndexInformer};
    /// # async fn demo(pods: SharedIndexInformer<Pod>) -> Result<(), kinformer_actors::InformerError> {
    /// pods.add_lazy_event_handler(
    ///     ResourceEventHandlerFuncs::new().on_add(|pod: &Arc<LazyObject<Pod>>, _| {
    ///         println!("{:?} on node {:?}", pod.name(), pod.labels().get("node"))
    ///     }),
    ///     Default::default(),
    /// )
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub async fn add_lazy_event_handler(
        &self,
        handler: impl ResourceEventHandler<LazyObject<K>>,
        config: ListenerConfig,
    ) -> Result<HandlerRegistration<K>, InformerError> {
        self.register(
            HandlerKind::Handler(ThreadHandler::Lazy(Box::new(handler))),
            config,
        )
        .await
    }

    /// Registers a user's actor: it receives a typed [`Notify`] per change (in the lean mode,
    /// I7, its objects are decoded on the informer's pipeline thread before they are sent:
    /// prefer [`add_lazy_recipient`](Self::add_lazy_recipient) there).
    pub async fn add_recipient(
        &self,
        recipient: Recipient<Notify<K>>,
        config: ListenerConfig,
    ) -> Result<HandlerRegistration<K>, InformerError> {
        self.register(HandlerKind::Recipient(recipient), config)
            .await
    }

    /// Registers a user's actor that receives [`LazyObject`]s: a `Notify<LazyObject<K>>` per
    /// change, decoded only if the actor asks.
    pub async fn add_lazy_recipient(
        &self,
        recipient: Recipient<Notify<LazyObject<K>>>,
        config: ListenerConfig,
    ) -> Result<HandlerRegistration<K>, InformerError> {
        self.register(HandlerKind::LazyRecipient(recipient), config)
            .await
    }

    /// Registers a key sink (e.g. a workqueue): every notification enqueues the object's key, or
    /// the keys `mapper` returns (e.g. a Pod's owner). A key sink never decodes (in the lean
    /// mode, I7) unless its mapper calls `object()`.
    pub async fn add_key_sink(
        &self,
        sink: impl EnqueueKeys,
        mapper: Option<KeyMapper<K>>,
        config: ListenerConfig,
    ) -> Result<HandlerRegistration<K>, InformerError> {
        self.register(HandlerKind::Keys(Arc::new(sink), mapper), config)
            .await
    }

    async fn register(
        &self,
        handler: HandlerKind<K>,
        config: ListenerConfig,
    ) -> Result<HandlerRegistration<K>, InformerError> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let stats = Arc::new(ListenerStats::for_listener(
            listener_name(&config, &self.inner.kind, id),
            config.policy,
        ));
        let resync = config.resync;
        let registration = HandlerRegistration {
            id,
            informer: self.clone(),
            stats: Arc::clone(&stats),
        };
        let (indexer, listener) = {
            let mut state = self.state();
            match &mut *state {
                State::Idle(idle) => {
                    // P6: the processor decides the period (and may shrink its check period).
                    let r = idle.processor.add_listener(id, resync, Instant::now());
                    if r.resync != r.requested {
                        tracing::warn!(kind = %self.inner.kind, requested = ?r.requested,
                            used = ?r.resync, "handler resync period adjusted (P6)");
                    }
                    idle.handlers.push(PendingHandler {
                        id,
                        handler,
                        config,
                        stats,
                    });
                    return Ok(registration);
                }
                State::Stopped => return Err(InformerError::ShutDown),
                State::Running(r) => {
                    let kind = Arc::clone(&self.inner.kind);
                    let (listener, handle) =
                        assembly::start_listener(&r.pipeline, handler, config, stats, kind, id)
                            .map_err(|(e, _)| InformerError::Spawn(e))?;
                    r.listeners.insert(id, handle);
                    (r.indexer.clone(), listener)
                }
            }
        };
        indexer
            .send(AddListener {
                id,
                listener,
                resync,
            })
            .await?;
        Ok(registration)
    }

    async fn remove_handler(&self, id: u64, wait: bool) -> Result<bool, InformerError> {
        let indexer = {
            let mut state = self.state();
            match &mut *state {
                State::Idle(idle) => {
                    let before = idle.handlers.len();
                    idle.handlers.retain(|h| h.id != id);
                    idle.processor.remove_listener(id);
                    return Ok(idle.handlers.len() != before);
                }
                State::Stopped => return Ok(false),
                State::Running(r) => (r.indexer.clone(), r.listeners.remove(&id)),
            }
        };
        let (indexer, listener) = indexer;
        // The listener is stopped directly first: the indexer's mailbox may hold a batch that
        // waits for this very listener (`Block`), which its stop releases.
        if let Some(l) = listener {
            if wait {
                let _ = l.stop.send(Stop).await;
            } else {
                // `do_send` queues the stop even on a full mailbox and needs no actix
                // context: `remove` is called from any thread or runtime.
                l.stop.do_send(Stop);
            }
        }
        Ok(indexer.send(RemoveListener { id, wait }).await?)
    }

    /// Starts the actors (idempotent, X3). Inside an actix `System` the actors join it; from a
    /// plain tokio (or no) runtime they run on kinformer's background actix System
    /// ([`runtime::system`](crate::runtime::system)).
    pub fn start(&self) -> Result<(), InformerError> {
        let mut state = self.state();
        let idle = match std::mem::replace(&mut *state, State::Stopped) {
            State::Idle(idle) => idle,
            other => {
                let stopped = matches!(other, State::Stopped);
                *state = other;
                return if stopped {
                    Err(InformerError::ShutDown)
                } else {
                    Ok(())
                };
            }
        };
        match assembly::start(&self.inner, idle) {
            Ok(running) => {
                *state = State::Running(Box::new(running));
                Ok(())
            }
            Err((e, idle)) => {
                // Nothing was consumed: the informer stays idle, handlers included (X3).
                *state = State::Idle(idle);
                Err(e)
            }
        }
    }

    /// Stops every actor and joins the informer's threads (P9). Each handler's backlog is
    /// dropped and counted ([`ListenerStats::dropped`]); shutdown waits only for each handler's
    /// current notification, at most [`InformerConfig::shutdown_timeout`]; handlers still busy
    /// then are named in the report. Idempotent (later calls report nothing). The cache stays
    /// readable through listers.
    pub async fn shutdown(&self) -> ShutdownReport {
        let running = {
            let mut state = self.state();
            match std::mem::replace(&mut *state, State::Stopped) {
                State::Running(r) => r,
                _ => {
                    self.inner.reflector.wake_rv_waiters();
                    return ShutdownReport::default();
                }
            }
        };
        // K3: resourceVersion waiters re-check and give up.
        self.inner.reflector.wake_rv_waiters();
        running
            .shutdown(&self.inner.kind, self.inner.config.shutdown_timeout)
            .await
    }
}

impl<K: InformerObject> Inner<K> {
    fn state(&self) -> std::sync::MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What telemetry reads of an informer at scrape time: the live counters, never a copy kept
/// up to date (nothing on the hot path).
impl<K: InformerObject> InformerProbe for Inner<K> {
    fn resource(&self) -> &str {
        &self.kind
    }
    fn type_name(&self) -> &'static str {
        std::any::type_name::<K>()
    }
    fn label_selector(&self) -> Option<&str> {
        self.config.reflector.label_selector.as_deref()
    }
    fn field_selector(&self) -> Option<&str> {
        self.config.reflector.field_selector.as_deref()
    }
    fn reflector(&self) -> &ReflectorStatus {
        &self.reflector
    }
    fn fifo(&self) -> &FifoStatus {
        &self.fifo
    }
    fn store_objects(&self) -> usize {
        self.lister.len()
    }
    fn lean_stats(&self) -> Option<kinformer::lean::LeanStats> {
        self.lister.lean_stats()
    }
    fn lifecycle(&self) -> Lifecycle {
        match &*self.state() {
            State::Idle(_) => Lifecycle::Idle,
            State::Running(_) => Lifecycle::Running,
            State::Stopped => Lifecycle::Stopped,
        }
    }
    fn listeners(&self) -> Vec<Arc<ListenerStats>> {
        match &*self.state() {
            State::Idle(idle) => idle.handlers.iter().map(|h| Arc::clone(&h.stats)).collect(),
            State::Running(r) => r.listeners.values().map(|l| Arc::clone(&l.stats)).collect(),
            State::Stopped => Vec::new(),
        }
    }
}

// Defined here rather than in `telemetry/metrics.rs`, so that telemetry never imports the
// informer (it reads informers through their `InformerProbe`).
impl Telemetry {
    /// Registers an informer under a name made of its scope (`pods`, `default/pods`, with its
    /// selectors if any) and returns that name, the `informer` label of its series. The same
    /// informer registered again keeps its first name; another informer with the same name
    /// gets a `#2`, `#3`… suffix. Its series go away once it is shut down or dropped.
    pub fn register_informer<K: InformerObject>(
        &self,
        informer: &SharedIndexInformer<K>,
    ) -> String {
        let probe = informer.probe();
        let name = match probe.upgrade() {
            Some(p) => default_informer_name(&*p),
            None => informer.resource().to_string(),
        };
        self.register_probe(&name, probe)
    }

    /// Registers an informer under `name` (made unique as in
    /// [`register_informer`](Self::register_informer)); returns the name used.
    pub fn register_informer_as<K: InformerObject>(
        &self,
        name: &str,
        informer: &SharedIndexInformer<K>,
    ) -> String {
        self.register_probe(name, informer.probe())
    }
}

/// Why [`SharedIndexInformer::wait_for_resource_version`] returned without the informer having
/// seen the resourceVersion (K3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// The deadline passed first.
    #[error("resourceVersion {resource_version} not seen in time (last seen {last_seen:?})")]
    Timeout {
        /// The resourceVersion waited for.
        resource_version: String,
        /// The informer's last synced resourceVersion at the deadline.
        last_seen: String,
    },
    /// The resourceVersion waited for, or the informer's, is not a well-formed integer:
    /// resourceVersions are only comparable as such (apimachinery's `CompareResourceVersion`).
    #[error("resourceVersions are not comparable: {0}")]
    NotComparable(#[from] InvalidResourceVersion),
    /// The informer shut down.
    #[error("the informer shut down")]
    ShutDown,
}

/// One registered handler (P5): its own `has_synced`, its counters, and `remove`.
pub struct HandlerRegistration<K: InformerObject> {
    id: u64,
    informer: SharedIndexInformer<K>,
    stats: Arc<ListenerStats>,
}

impl<K: InformerObject> fmt::Debug for HandlerRegistration<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerRegistration")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl<K: InformerObject> HandlerRegistration<K> {
    /// The registration id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// client-go's registration `HasSynced` (P5): true once the informer synced and this
    /// handler returned from every initial-list notification without panicking; sticky. A
    /// handler that panicked on one never reports synced.
    pub fn has_synced(&self) -> bool {
        let upstream = self.informer.has_synced();
        self.stats.sync.has_synced(upstream)
    }

    /// This handler's counters.
    pub fn stats(&self) -> &ListenerStats {
        &self.stats
    }

    /// client-go's `RemoveEventHandler` (P5): unregisters the handler and returns at once. It
    /// receives nothing more; what it had buffered is dropped (counted in
    /// [`ListenerStats::dropped`]); a callback in progress runs to its end. The informer and
    /// the other handlers carry on. Returns false if it was not registered.
    pub async fn remove(&self) -> Result<bool, InformerError> {
        self.informer.remove_handler(self.id, false).await
    }

    /// client-go's `ShutDownEventHandler` (P5): like [`remove`](Self::remove), then waits
    /// until the handler finished its current callback and its listener stopped. Other
    /// handlers are not held up meanwhile.
    pub async fn shut_down(&self) -> Result<bool, InformerError> {
        self.informer.remove_handler(self.id, true).await
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::atomic::AtomicU64,
        time::{Duration, Instant},
    };

    use k8s_openapi::api::core::v1::Pod;
    use kinformer::notification::Notification;
    use kube::api::{Api, PostParams};

    use super::*;
    use crate::{handler::handler_fn, informer::assembly::FAIL_NEXT_START};

    /// X3: a start that fails (here: its arbiters, through the test seam, after the handler
    /// threads were spawned) consumes nothing; the retry starts every handler registered
    /// before it, and they hear about the objects.
    #[actix::test]
    async fn failed_start_is_retried_with_every_handler_kept() {
        let sim = kinformer_sim::Sim::start(Default::default())
            .await
            .expect("sim");
        let client = sim.client();
        let pods: Api<Pod> = Api::namespaced(client.clone(), "a");
        for i in 0..3 {
            let mut p: Pod = serde_json::from_value(serde_json::json!({
                "spec": {"containers": [{"name": "c", "image": "img"}]}
            }))
            .expect("a pod");
            p.metadata.name = Some(format!("p{i}"));
            pods.create(&PostParams::default(), &p).await.expect("pod");
        }
        let informer = SharedIndexInformer::<Pod>::all(client);
        let adds = Arc::new(AtomicU64::new(0));
        let a = Arc::clone(&adds);
        let thread_reg = informer
            .add_event_handler(handler_fn(move |n: &Notification<Pod>| {
                if matches!(n, Notification::Add { .. }) {
                    a.fetch_add(1, Ordering::SeqCst);
                }
            }))
            .await
            .expect("handler");
        let queue = crate::AsyncWorkQueue::<kinformer::ObjectKey>::new();
        let sink_reg = informer
            .add_key_sink(queue.clone(), None, ListenerConfig::default())
            .await
            .expect("sink");

        FAIL_NEXT_START.with(|f| f.set(true));
        assert!(
            matches!(informer.start(), Err(InformerError::Spawn(_))),
            "the injected failure"
        );
        assert!(!informer.is_running(), "still idle");
        match &*informer.state() {
            State::Idle(idle) => {
                let ids: Vec<u64> = idle.handlers.iter().map(|h| h.id).collect();
                assert_eq!(ids, vec![thread_reg.id(), sink_reg.id()], "handlers kept");
            }
            _ => panic!("not idle after a failed start"),
        }

        informer.start().expect("the retry starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(adds.load(Ordering::SeqCst) == 3 && queue.len() == 3) {
            assert!(
                Instant::now() < deadline,
                "handlers registered before the failed start hear the pods"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(thread_reg.has_synced() && sink_reg.has_synced());
        informer.shutdown().await;
    }
}
