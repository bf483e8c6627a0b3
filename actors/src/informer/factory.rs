//! `SharedInformerFactory` (`docs/semantics.md` X1–X3): one informer per (type, namespace, selectors),
//! shared by every controller that asks for it.

use std::{
    any::{Any, TypeId},
    collections::{BTreeMap, HashMap},
    fmt,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::future::{BoxFuture, join_all};
use kinformer::{server_health::ServerHealthConfig, shard::ShardSelector};
use kube::{
    Client, Resource,
    api::TypeMeta,
    api::{ApiResource, DynamicObject, PartialObjectMeta},
};

use crate::{
    config::InformerConfig,
    error::InformerError,
    informer::{assembly::ShutdownReport, shared_informer::SharedIndexInformer},
    listwatch::lister_watcher::{KubeListerWatcher, MetadataListerWatcher},
    listwatch::server_health::ServerHealthHandle,
    object::InformerObject,
    telemetry::metrics::Telemetry,
};

/// Per-informer options that take part in sharing: two requests with equal options share one
/// informer (X1).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct InformerOptions {
    /// Namespace scope (None: the factory's, which defaults to all namespaces).
    pub namespace: Option<String>,
    /// Label selector (None: the factory's).
    pub label_selector: Option<String>,
    /// Field selector (None: the factory's).
    pub field_selector: Option<String>,
    /// Default handler resync for this informer (None: the factory's, or the type's).
    pub resync: Option<Duration>,
    /// The shard (KEP-5866 hash ranges) listed and watched (None: every object, K1). Part of
    /// the sharing key: two shards of one resource are two informers.
    pub shard: Option<ShardSelector>,
}

/// Which informer of a factory (X1, X3): the Rust type it caches, the resource, whether it is
/// metadata-only, and its scope. Two informers of one kind (two namespaces, two selectors)
/// have different identities; [`SharedInformerFactory::wait_for_cache_sync`] reports by it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InformerId {
    /// The resource (plural), e.g. `pods`.
    pub resource: String,
    /// API group (empty for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// The Rust type cached (`std::any::type_name`), e.g. to tell a typed informer from a
    /// dynamic one of the same resource.
    pub type_name: &'static str,
    /// True for a metadata-only informer (`PartialObjectMeta`).
    pub metadata_only: bool,
    /// Namespace scope (None: all namespaces).
    pub namespace: Option<String>,
    /// Label selector.
    pub label_selector: Option<String>,
    /// Field selector.
    pub field_selector: Option<String>,
    /// Shard (K1).
    pub shard: Option<ShardSelector>,
}

impl fmt::Display for InformerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.resource)?;
        if self.metadata_only {
            f.write_str(" (metadata)")?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in {ns}")?,
            None => f.write_str(" in all namespaces")?,
        }
        if let Some(l) = &self.label_selector {
            write!(f, ", labels {l}")?;
        }
        if let Some(l) = &self.field_selector {
            write!(f, ", fields {l}")?;
        }
        if let Some(s) = &self.shard {
            write!(f, ", shard {s}")?;
        }
        Ok(())
    }
}

/// A resync asked of the factory for an informer that already exists with another resync
/// (X2): a shared informer's resync is fixed when it is created, so the request is not
/// applied (client-go drops it silently; here it is reported).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "resync {requested:?} asked for {informer}, which already exists with resync {existing:?}; the existing informer is kept unchanged"
)]
pub struct ResyncConflict {
    /// The informer asked about.
    pub informer: Box<InformerId>,
    /// The resync asked for.
    pub requested: Option<Duration>,
    /// The resync the existing informer was created with.
    pub existing: Option<Duration>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct InformerKey {
    type_id: TypeId,
    id: InformerId,
}

trait AnyInformer: Send + Sync {
    fn start(&self) -> Result<(), InformerError>;
    fn has_synced(&self) -> bool;
    fn wait(&self) -> BoxFuture<'static, ()>;
    fn shutdown(&self) -> BoxFuture<'static, ShutdownReport>;
    fn as_any(&self) -> &dyn Any;
}

impl<K: InformerObject> AnyInformer for SharedIndexInformer<K> {
    fn start(&self) -> Result<(), InformerError> {
        SharedIndexInformer::start(self)
    }
    fn has_synced(&self) -> bool {
        SharedIndexInformer::has_synced(self)
    }
    fn wait(&self) -> BoxFuture<'static, ()> {
        let i = self.clone();
        Box::pin(async move { i.wait_for_sync().await })
    }
    fn shutdown(&self) -> BoxFuture<'static, ShutdownReport> {
        let i = self.clone();
        Box::pin(async move { i.shutdown().await })
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct Entry {
    informer: Arc<dyn AnyInformer>,
    /// The resync the informer was created with.
    resync: Option<Duration>,
}

struct FactoryInner {
    client: Client,
    config: InformerConfig,
    namespace: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    type_resync: Mutex<HashMap<TypeId, Duration>>,
    informers: Mutex<Vec<(InformerKey, Entry)>>,
    started: Mutex<bool>,
    /// Where every informer made from now on is registered.
    telemetry: Option<Telemetry>,
    /// The API server's health, shared by every informer of the factory (R11).
    server_health: ServerHealthHandle,
}

/// What a factory is made from: the `with_*` builders change one part and make the factory
/// again from all of them, so what is derived (the shared server health) follows.
struct Settings {
    config: InformerConfig,
    namespace: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    telemetry: Option<Telemetry>,
}

/// Makes and shares informers (client-go's `SharedInformerFactory`).
///
/// ```no_run
/// use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
/// use kinformer_actors::SharedInformerFactory;
/// # async fn demo(client: kube::Client) {
/// let factory = SharedInformerFactory::new(client).with_namespace("default");
/// let pods = factory.informer::<Pod>();
/// let deployments = factory.informer::<Deployment>();
/// assert!(factory.informer::<Pod>().same_as(&pods)); // X1: shared
/// factory.start().unwrap();
/// let synced = factory.wait_for_cache_sync(std::time::Duration::from_secs(30)).await;
/// assert!(synced.values().all(|s| *s));
/// # let _ = deployments;
/// factory.shutdown().await;
/// # }
/// ```
#[derive(Clone)]
pub struct SharedInformerFactory {
    inner: Arc<FactoryInner>,
}

impl fmt::Debug for SharedInformerFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedInformerFactory")
            .field("namespace", &self.inner.namespace)
            .finish_non_exhaustive()
    }
}

impl SharedInformerFactory {
    /// A factory over all namespaces, no selectors, no resync.
    pub fn new(client: Client) -> Self {
        Self::from_settings(
            client,
            Settings {
                config: InformerConfig::default(),
                namespace: None,
                label_selector: None,
                field_selector: None,
                telemetry: None,
            },
        )
    }

    fn from_settings(client: Client, s: Settings) -> Self {
        // The shared health's request budget follows the informers' backoff (R11), so it is
        // made from the settings as they end up, and probes through their client.
        let server_health = ServerHealthHandle::new(
            ServerHealthConfig {
                backoff: s.config.backoff.clone(),
                ..ServerHealthConfig::default()
            },
            Some(client.clone()),
        );
        SharedInformerFactory {
            inner: Arc::new(FactoryInner {
                server_health,
                client,
                config: s.config,
                namespace: s.namespace,
                label_selector: s.label_selector,
                field_selector: s.field_selector,
                type_resync: Mutex::new(HashMap::new()),
                informers: Mutex::new(Vec::new()),
                started: Mutex::new(false),
                telemetry: s.telemetry,
            }),
        }
    }

    /// A new factory with this one's settings as `f` changes them.
    fn rebuild(&self, f: impl FnOnce(&mut Settings)) -> Self {
        let i = &self.inner;
        let mut s = Settings {
            config: i.config.clone(),
            namespace: i.namespace.clone(),
            label_selector: i.label_selector.clone(),
            field_selector: i.field_selector.clone(),
            telemetry: i.telemetry.clone(),
        };
        f(&mut s);
        Self::from_settings(i.client.clone(), s)
    }

    /// Registers every informer this factory makes from now on with `telemetry` (metrics,
    /// health, `/debug/informers`), named after its identity: `[namespace/]resource`, then
    /// ` (metadata)` and its selectors when set. Call before asking for informers.
    pub fn with_telemetry(self, telemetry: Telemetry) -> Self {
        self.rebuild(|f| f.telemetry = Some(telemetry))
    }

    /// Scope every informer to one namespace (X2). Call before asking for informers.
    pub fn with_namespace(self, namespace: impl Into<String>) -> Self {
        let ns = namespace.into();
        self.rebuild(|f| f.namespace = Some(ns))
    }

    /// Default resync period of every informer's handlers (X2).
    pub fn with_resync(self, period: Duration) -> Self {
        self.rebuild(|f| f.config.resync = Some(period))
    }

    /// Label selector for every informer (X2).
    pub fn with_label_selector(self, selector: impl Into<String>) -> Self {
        let s = selector.into();
        self.rebuild(|f| f.label_selector = Some(s))
    }

    /// Field selector for every informer (X2).
    pub fn with_field_selector(self, selector: impl Into<String>) -> Self {
        let s = selector.into();
        self.rebuild(|f| f.field_selector = Some(s))
    }

    /// Options for every informer (reflector, FIFO, backoff, …).
    pub fn with_config(self, config: InformerConfig) -> Self {
        self.rebuild(|f| f.config = config)
    }

    /// Resync period for one type's informers (client-go's `WithCustomResyncConfig`, X2),
    /// applied to the informers of `K` created from now on. An informer of `K` that already
    /// exists keeps its resync: that is reported (a warning and the error), not dropped.
    pub fn set_resync_for<K: 'static>(&self, period: Duration) -> Result<(), ResyncConflict> {
        if let Ok(mut m) = self.inner.type_resync.lock() {
            m.insert(TypeId::of::<K>(), period);
        }
        let informers = self
            .inner
            .informers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let conflict = informers
            .iter()
            .find(|(k, e)| k.type_id == TypeId::of::<K>() && e.resync != Some(period));
        match conflict {
            Some((k, e)) => Err(report_conflict(ResyncConflict {
                informer: Box::new(k.id.clone()),
                requested: Some(period),
                existing: e.resync,
            })),
            None => Ok(()),
        }
    }

    /// The client informers are made with.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The API server's health that every informer of this factory shares (R11): after an
    /// outage, the first answer any of them (or the shared `GET /version` probe) gets makes
    /// the others retry at once. Its [`stats`](ServerHealthHandle::stats) say how long the
    /// informers took to watch again after the last return.
    pub fn server_health(&self) -> &ServerHealthHandle {
        &self.inner.server_health
    }

    fn config_for<K: 'static>(&self, opts: &InformerOptions) -> (InformerConfig, Option<String>) {
        let i = &self.inner;
        let mut config = i.config.clone();
        if let Some(r) = opts
            .resync
            .or_else(|| i.type_resync.lock().ok()?.get(&TypeId::of::<K>()).copied())
        {
            config.resync = Some(r);
        }
        config.reflector.label_selector = opts
            .label_selector
            .clone()
            .or_else(|| i.label_selector.clone());
        config.reflector.field_selector = opts
            .field_selector
            .clone()
            .or_else(|| i.field_selector.clone());
        config.reflector.shard_selector = opts.shard.clone();
        let ns = opts.namespace.clone().or_else(|| i.namespace.clone());
        (config, ns)
    }

    fn key<K: 'static>(
        &self,
        resource: (String, String, String, String),
        metadata_only: bool,
        config: &InformerConfig,
        ns: &Option<String>,
    ) -> InformerKey {
        let (group, version, kind, plural) = resource;
        InformerKey {
            type_id: TypeId::of::<K>(),
            id: InformerId {
                resource: plural,
                group,
                version,
                kind,
                type_name: std::any::type_name::<K>(),
                metadata_only,
                namespace: ns.clone(),
                label_selector: config.reflector.label_selector.clone(),
                field_selector: config.reflector.field_selector.clone(),
                shard: config.reflector.shard_selector.clone(),
            },
        }
    }

    /// Changes the shard of a shared informer this factory made (K2, see
    /// [`SharedIndexInformer::set_shard`]) and moves it to its new identity, so that asking for
    /// the new shard returns it. Returns the new identity (`None`: the informer is not this
    /// factory's; its shard changed all the same); errors when the informer was shut down.
    pub fn set_shard<K: InformerObject>(
        &self,
        informer: &SharedIndexInformer<K>,
        selector: Option<ShardSelector>,
    ) -> Result<Option<InformerId>, InformerError> {
        informer.set_shard(selector.clone())?;
        let mut informers = self
            .inner
            .informers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (k, e) in informers.iter_mut() {
            if e.informer
                .as_any()
                .downcast_ref::<SharedIndexInformer<K>>()
                .is_some_and(|i| i.same_as(informer))
            {
                k.id.shard = selector;
                return Ok(Some(k.id.clone()));
            }
        }
        Ok(None)
    }

    /// The shared informer for `key`, made by `make` (with `resync`) if there is none. An
    /// explicit `requested` resync that differs from the existing informer's is a conflict.
    fn get_or_insert<K: InformerObject>(
        &self,
        key: InformerKey,
        requested: Option<Duration>,
        resync: Option<Duration>,
        make: impl FnOnce() -> SharedIndexInformer<K>,
    ) -> (SharedIndexInformer<K>, Result<(), ResyncConflict>) {
        let mut informers = self
            .inner
            .informers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (k, e) in informers.iter() {
            if *k == key
                && let Some(i) = e.informer.as_any().downcast_ref::<SharedIndexInformer<K>>()
            {
                let conflict = match requested {
                    Some(r) if e.resync != Some(r) => Err(report_conflict(ResyncConflict {
                        informer: Box::new(k.id.clone()),
                        requested: Some(r),
                        existing: e.resync,
                    })),
                    _ => Ok(()),
                };
                return (i.clone(), conflict);
            }
        }
        let informer = make().in_namespace(key.id.namespace.as_deref());
        // Just made, so idle: this cannot fail.
        let _ = informer.set_server_health(self.inner.server_health.clone());
        if let Some(t) = &self.inner.telemetry {
            t.register_probe(&telemetry_name(&key.id), informer.probe());
        }
        informers.push((
            key,
            Entry {
                informer: Arc::new(informer.clone()),
                resync,
            },
        ));
        (informer, Ok(()))
    }

    /// The shared informer of a typed resource (X1).
    pub fn informer<K>(&self) -> SharedIndexInformer<K>
    where
        K: InformerObject,
        K::DynamicType: Default,
    {
        self.informer_with(InformerOptions::default())
    }

    /// The shared informer of a typed resource with per-informer options (X1, X2). If it
    /// already exists with another resync than `opts.resync`, the existing informer is
    /// returned unchanged and the conflict is logged as a warning (see
    /// [`try_informer_with`](Self::try_informer_with) for the error).
    pub fn informer_with<K>(&self, opts: InformerOptions) -> SharedIndexInformer<K>
    where
        K: InformerObject,
        K::DynamicType: Default,
    {
        self.shared_typed(opts).0
    }

    /// [`informer_with`](Self::informer_with), but a resync conflict with the existing shared
    /// informer is an error (the informer is still shared and unchanged).
    pub fn try_informer_with<K>(
        &self,
        opts: InformerOptions,
    ) -> Result<SharedIndexInformer<K>, ResyncConflict>
    where
        K: InformerObject,
        K::DynamicType: Default,
    {
        let (informer, conflict) = self.shared_typed(opts);
        conflict.map(|()| informer)
    }

    fn shared_typed<K>(
        &self,
        opts: InformerOptions,
    ) -> (SharedIndexInformer<K>, Result<(), ResyncConflict>)
    where
        K: InformerObject,
        K::DynamicType: Default,
    {
        let dt = K::DynamicType::default();
        let (config, ns) = self.config_for::<K>(&opts);
        let res = resource_id::<K>(&dt);
        let key = self.key::<K>(res, false, &config, &ns);
        let client = self.inner.client.clone();
        let resync = config.resync;
        self.get_or_insert(key, opts.resync, resync, || {
            let lw = KubeListerWatcher::new(client, ns.as_deref(), &dt)
                .content_type(config.content_type);
            SharedIndexInformer::new(lw, config).of_own_type()
        })
    }

    /// The shared informer of any resource, as `DynamicObject`s (X2). Objects whose
    /// apiVersion/kind differ from `resource` are dropped with an error (R5).
    pub fn for_resource(&self, resource: &ApiResource) -> SharedIndexInformer<DynamicObject> {
        self.for_resource_with(resource, InformerOptions::default())
    }

    /// [`for_resource`](Self::for_resource) with per-informer options.
    pub fn for_resource_with(
        &self,
        resource: &ApiResource,
        opts: InformerOptions,
    ) -> SharedIndexInformer<DynamicObject> {
        let (config, ns) = self.config_for::<DynamicObject>(&opts);
        let res = resource_id::<DynamicObject>(resource);
        let key = self.key::<DynamicObject>(res, false, &config, &ns);
        let client = self.inner.client.clone();
        let ar = resource.clone();
        let resync = config.resync;
        self.get_or_insert(key, opts.resync, resync, || {
            let lean = config.cache.is_lean();
            let informer = SharedIndexInformer::new(
                KubeListerWatcher::<DynamicObject>::new(client, ns.as_deref(), &ar),
                config,
            )
            .expect_type(TypeMeta {
                api_version: ar.api_version.clone(),
                kind: ar.kind.clone(),
            });
            if lean {
                // The lean mode checks the type on the parsed metadata (R5, I7): a typed
                // validator would decode every object.
                return informer;
            }
            let (api_version, kind) = (ar.api_version.clone(), ar.kind.clone());
            // Before start, so this cannot fail: the informer was just created.
            let _ = informer.set_validator(move |o: &DynamicObject, list_type| {
                match o.types.as_ref().or(list_type) {
                    Some(t) if t.api_version != api_version || t.kind != kind => Err(format!(
                        "expected {api_version} {kind}, got {} {}",
                        t.api_version, t.kind
                    )),
                    _ => Ok(()),
                }
            });
            informer
        })
        .0
    }

    /// The shared metadata-only informer of a typed resource: caches `PartialObjectMeta<K>`
    /// (names, labels, owners) without the objects' bodies (X2).
    pub fn metadata_informer<K>(&self) -> SharedIndexInformer<PartialObjectMeta<K>>
    where
        K: InformerObject,
        K::DynamicType: Default,
        PartialObjectMeta<K>: InformerObject,
    {
        let dt = K::DynamicType::default();
        let (config, ns) = self.config_for::<PartialObjectMeta<K>>(&InformerOptions::default());
        let res = resource_id::<K>(&dt);
        let key = self.key::<PartialObjectMeta<K>>(res, true, &config, &ns);
        let client = self.inner.client.clone();
        let resync = config.resync;
        self.get_or_insert(key, None, resync, || {
            SharedIndexInformer::new(
                MetadataListerWatcher::<K>::new(client, ns.as_deref(), &dt),
                config,
            )
        })
        .0
    }

    /// Every informer with its identity (a copy, so no lock is held while awaiting).
    fn entries(&self) -> Vec<(InformerId, Arc<dyn AnyInformer>)> {
        self.inner
            .informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, e)| (k.id.clone(), Arc::clone(&e.informer)))
            .collect()
    }

    /// Starts every informer not started yet (idempotent, X3). An informer that fails to start
    /// stays idle with its handlers and is started by the next call.
    pub fn start(&self) -> Result<(), InformerError> {
        if let Ok(mut s) = self.inner.started.lock() {
            *s = true;
        }
        for (_, i) in self.entries() {
            i.start()?;
        }
        Ok(())
    }

    /// Waits until every started informer synced or `timeout` passed; reports per informer
    /// identity (X3), so two informers of one kind (two namespaces, two selectors) each have
    /// their entry.
    pub async fn wait_for_cache_sync(&self, timeout: Duration) -> BTreeMap<InformerId, bool> {
        let informers = self.entries();
        let waits = informers.iter().map(|(_, i)| {
            let w = i.wait();
            async move {
                let _ = crate::runtime::timeout(timeout, w).await;
            }
        });
        join_all(waits).await;
        informers
            .into_iter()
            .map(|(id, i)| (id, i.has_synced()))
            .collect()
    }

    /// Shuts every informer down and waits for them (X3, P9); what each shutdown did, per
    /// informer.
    pub async fn shutdown(&self) -> BTreeMap<InformerId, ShutdownReport> {
        let entries = self.entries();
        let reports = join_all(entries.iter().map(|(_, i)| i.shutdown())).await;
        entries.into_iter().map(|(id, _)| id).zip(reports).collect()
    }

    /// How many distinct informers the factory holds.
    pub fn len(&self) -> usize {
        self.inner
            .informers
            .lock()
            .map(|i| i.len())
            .unwrap_or_default()
    }

    /// True when the factory holds no informer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The `informer` label of a factory-made informer.
fn telemetry_name(id: &InformerId) -> String {
    let mut name = match &id.namespace {
        Some(ns) => format!("{ns}/{}", id.resource),
        None => id.resource.clone(),
    };
    if id.metadata_only {
        name.push_str(" (metadata)");
    }
    if let Some(l) = &id.label_selector {
        name.push_str(" labels=");
        name.push_str(l);
    }
    if let Some(f) = &id.field_selector {
        name.push_str(" fields=");
        name.push_str(f);
    }
    if let Some(s) = &id.shard {
        name.push_str(" shard=");
        name.push_str(&s.to_string());
    }
    name
}

/// Logs a resync conflict (X2) and hands it back.
fn report_conflict(c: ResyncConflict) -> ResyncConflict {
    tracing::warn!(informer = %c.informer, requested = ?c.requested, existing = ?c.existing,
        "resync asked for an informer that already exists; not applied (X2)");
    c
}

fn resource_id<K: Resource>(dt: &K::DynamicType) -> (String, String, String, String) {
    (
        K::group(dt).into_owned(),
        K::version(dt).into_owned(),
        K::kind(dt).into_owned(),
        K::plural(dt).into_owned(),
    )
}
