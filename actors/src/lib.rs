//! # kinformer-actors: client-go's informer as actix actors
//!
//! ```text
//! API server --LIST/WATCH--> Reflector --Replace/Events--> DeltaFifo --ProcessDeltas--> Indexer
//!     --Notifications--> ProcessorListener (one per handler) --> handler / actor / workqueue
//! ```
//! Every arrow is a typed message ([`messages`]); every mailbox is bounded (B1); the FIFO holds
//! back the reflector when the indexer falls behind (B4); each listener has an overflow policy
//! ([`OverflowPolicy`], B3); a supervisor restarts a failed reflector with backoff (S1). Listers
//! read the cache without locks (I6). The ids (B1, S1, …) are defined in `docs/semantics.md`;
//! the shape is described in `ARCHITECTURE.md`.
//!
//! ## Start here
//!
//! A factory makes one informer per type; a handler hears every change; the lister reads the
//! cache without a request to the server:
//!
//! ```no_run
//! use std::{sync::Arc, time::Duration};
//! use k8s_openapi::api::core::v1::Pod;
//! use kinformer_actors::{ResourceEventHandlerFuncs, SharedInformerFactory};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let factory = SharedInformerFactory::new(kube::Client::try_default().await?);
//! let pods = factory.informer::<Pod>();
//! pods.add_event_handler(ResourceEventHandlerFuncs::new().on_add(|pod: &Arc<Pod>, _initial| {
//!     println!("added {:?}", pod.metadata.name);
//! }))
//! .await?;
//! factory.start()?;
//! factory.wait_for_cache_sync(Duration::from_secs(60)).await;
//! let _web = pods.lister().get("default", "web"); // from the cache, no request
//! factory.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! `cargo run --example quickstart` is a complete program of this kind, on the simulated API
//! server (`kinformer-sim`) the tests use too.
//!
//! ## Features
//!
//! - `kube-runtime` (off by default): [`kube_runtime`], an informer as kube-rs's watcher
//!   stream, trigger stream and `reflector::Store`, so that `kube::runtime::Controller` runs on
//!   it (`docs/kube-rs.md`). Pulls in kube's runtime.
//! - `otel` (off by default): [`otel`], a `tracing-subscriber` layer exporting the message
//!   traces as OpenTelemetry spans (`docs/tracing.md`). Pulls in the OpenTelemetry API crate.
//! - `prebuilt` (on by default): in debug builds, this crate compiles the informer's and kube
//!   `Api`'s generic code for Pods, ConfigMaps, Deployments, ReplicaSets and Leases once, and
//!   every crate above it reuses that copy (rustc shares generic instances between crates when
//!   optimisations are off): a debug binary that watches Pods compiles in seconds instead of
//!   tens of seconds. It costs about a minute of one core when this crate is built; turn it off
//!   (`default-features = false`) if you watch none of those kinds. Release builds never
//!   compile it.
//! - The lean cache mode (I7) is not a feature but a run-time choice per informer:
//!   `InformerConfig::default().cache(CacheMode::lean())` keeps objects as the compressed
//!   bytes the server sent and decodes them when read.
//!
//! ## More
//!
//! Start with [`SharedInformerFactory`] (or [`SharedIndexInformer`] directly). Inside an actix
//! application informers join its `System`; from plain tokio they use a background one
//! ([`runtime`]).
//!
//! In an actix or actix-web application, read `docs/actix.md`: which arbiters and threads the
//! informers use, what each [`OverflowPolicy`] means for your actor registered with
//! [`SharedIndexInformer::add_recipient`] (one [`Notify`] in its mailbox at a time, B5), actix
//! `Supervisor` restarts (S4) and gone actors (S3), listers in routes and actors, and shutdown in
//! order on SIGTERM.
//!
//! With the `kube-runtime` feature, an informer also feeds kube-rs's runtime
//! ([`kube_runtime`]): `informer.controller()` is a `kube::runtime::Controller` on it,
//! `watcher_events()` a `watcher::Event` stream for `WatchStreamExt`, `kube_store()` its
//! `reflector::Store`; any number of them share the informer's one LIST and WATCH
//! (`docs/kube-rs.md`).
//!
//! ## One crate for users
//!
//! Everything a user names is re-exported here, so `kinformer-actors` is the only dependency a
//! controller needs besides kube and k8s-openapi: the informer and its factory, the handler
//! traits, the options, the cache readers ([`Lister`], [`NamespacedLister`], [`Snapshot`]), the
//! index functions ([`Indexers`], [`IndexFunc`], [`index_func`], [`namespace_index_func`]), keys
//! ([`ObjectKey`], [`meta_namespace_key`]), what a handler is told ([`Notification`],
//! [`DeltaObject`], [`DeletedFinalStateUnknown`]), health and counters, and the workqueue with its
//! rate limiters. The core crate (`kinformer`) stays available for the machines themselves.
//!
//! ```no_run
//! // A controller's imports, from this crate alone.
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::Pod;
//! use kinformer_actors::{
//!     CacheMode, InformerConfig, ItemExponentialFailureRateLimiter, KeyMapper, LazyObject,
//!     ListenerConfig, Indexers, Lister, NAMESPACE_INDEX, Notification, ObjectKey, ResyncPeriod,
//!     SharedInformerFactory, AsyncWorkQueue, namespace_index_func,
//! };
//! # async fn demo(client: kube::Client) -> Result<(), kinformer_actors::InformerError> {
//! let factory = SharedInformerFactory::new(client);
//! let pods = factory.informer::<Pod>();
//! let lister: Lister<Pod> = pods.lister();
//! let queue: AsyncWorkQueue<ObjectKey> = AsyncWorkQueue::with_rate_limiter(Box::new(
//!     ItemExponentialFailureRateLimiter::new(
//!         std::time::Duration::from_millis(5),
//!         std::time::Duration::from_secs(300),
//!     ),
//! ));
//! // A key mapper reads the metadata of the lazy objects it is given: in the lean cache mode
//! // (`InformerConfig::default().cache(CacheMode::lean())`) a key sink never decodes a pod.
//! let owner: KeyMapper<Pod> = Arc::new(|key, n: &Notification<LazyObject<Pod>>| {
//!     let pod = n.object();
//!     match pod.controller_ref() {
//!         Some(rs) => vec![ObjectKey::new(pod.namespace(), rs.name)],
//!         None => vec![key.clone()],
//!     }
//! });
//! let config = ListenerConfig { resync: ResyncPeriod::Never, ..ListenerConfig::default() };
//! pods.add_key_sink(queue.clone(), Some(owner), config).await?;
//! let mut indexers = Indexers::new();
//! indexers.insert(NAMESPACE_INDEX.to_string(), namespace_index_func::<Pod>());
//! pods.add_indexers(indexers).await?;
//! let _ = (lister, InformerConfig::default().cache(CacheMode::lean()));
//! # Ok(()) }
//! ```
//!
//! ## Names
//!
//! One name per concept. The informer's names are **client-go's**, since its behaviour is
//! client-go's: [`SharedIndexInformer`], [`SharedInformerFactory`], [`ResourceEventHandler`] (and
//! [`ResourceEventHandlerFuncs`]), [`HandlerRegistration`], [`Lister`], [`Indexers`],
//! [`Notification`] (client-go's `notification`: Add, Update, Delete),
//! [`DeletedFinalStateUnknown`], [`ObjectKey`] and [`meta_namespace_key`] (`MetaNamespaceKeyFunc`),
//! [`ListerWatcher`], the rate limiters ([`ItemExponentialFailureRateLimiter`],
//! [`BucketRateLimiter`], …), the actor names (Reflector, DeltaFifo, Indexer, ProcessorListener)
//! and the delta types. Where the user is handed Rust types, the names are **kube-rs's**: `Api`,
//! `Client`, `Resource`, `DynamicObject`, `PartialObjectMeta`, `ListParams` come from kube
//! unchanged, and [`InitialList`] / [`ReflectorConfig`] speak in kube's list/watch parameters.
//! Names of our own, for what neither has: [`Notify`] (the message a user's actor receives: one
//! [`Notification`] with its key and trace id), [`LazyObject`] (an object with its metadata at hand
//! and its typed form decoded on first use: what the lean cache mode, [`CacheMode::Lean`], carries;
//! kube-rs has `PartialObjectMeta` for metadata-only watches, nothing for a body kept as bytes),
//! [`AsyncWorkQueue`] (client-go's `workqueue.TypedRateLimitingInterface` for async workers:
//! cloneable, awaited, on tokio's clock; the core's `kinformer::workqueue::WorkQueue` is the
//! clock-injected machine it drives), [`OverflowPolicy`], [`ResyncPeriod`], [`FifoMode`],
//! [`TraceId`] and the `*Config` / `*Status` / `*Stats` types.

#![warn(missing_docs)]
// docs.rs builds with `--cfg docsrs` (Cargo.toml) and marks what each feature adds.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The folders, by concern; imports run downward, never in a circle (each folder's `mod.rs`
// says what it owns and may import):
//
//   interop      kube-rs's runtime on an informer (feature)   -> informer
//   prebuilt     common kinds' generic instances (feature)    -> informer
//   informer     the handle, its assembly and the factory     -> pipeline, listwatch, telemetry
//   controller   workqueue front, leader election, shard ring -> telemetry
//   pipeline     the actors, their messages and destinations  -> listwatch, telemetry
//   listwatch    the kube seam: list/watch and decoding       -> base files only
//   telemetry    counters, health, traces, metrics, endpoint  -> base files only
//   base files   config, error, handler, object, runtime      -> none of the folders
mod config;
mod controller;
mod error;
mod handler;
mod informer;
mod interop;
mod listwatch;
mod object;
mod pipeline;
// Only where instances are shared between crates: see the module.
#[cfg(all(feature = "prebuilt", debug_assertions, not(test)))]
#[doc(hidden)]
pub mod prebuilt;
pub mod runtime;
mod telemetry;

// The public modules, at the paths they have always had.
pub use controller::workqueue;
pub use listwatch::lister_watcher;
pub use pipeline::messages;
/// OpenTelemetry export of message traces (feature `otel`, `docs/tracing.md`).
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub use telemetry::otel;
pub use telemetry::trace;
/// kube-rs interop (feature `kube-runtime`): an informer as kube-rs's watcher stream, trigger
/// stream and `reflector::Store`, for `kube::runtime::Controller` (`docs/kube-rs.md`).
#[cfg(feature = "kube-runtime")]
#[cfg_attr(docsrs, doc(cfg(feature = "kube-runtime")))]
pub mod kube_runtime {
    pub use crate::interop::kube_runtime::{
        HUB_LISTENER_NAME, KubeDynamicType, SUBSCRIBER_BUFFER, SharedObjects, WatcherEvents,
    };
}

pub use config::{ContentType, FifoConfig, InformerConfig, ListenerConfig, OverflowPolicy};
pub use controller::leader_election::{
    LeaderCallbacks, LeaderElectionError, LeaderElectionHealth, LeaderElectionStatus,
    LeaderElector, LeaderElectorActor, LeaderElectorHandle, StopElection,
};
pub use controller::membership::{
    DEFAULT_DRAIN_TIMEOUT, ShardMember, ShardMemberActor, ShardMemberError, ShardMemberHandle,
    ShardMemberHealth, ShardMemberStatus, StopMember, StopMode,
};
pub use controller::ownership::{OwnershipView, ShardOwnership};
pub use error::{InformerError, ReflectorError, WatchWarning};
pub use handler::{
    EnqueueKeys, FnHandler, KeyMapper, ResourceEventHandler, ResourceEventHandlerFuncs, handler_fn,
};
pub use informer::assembly::ShutdownReport;
pub use informer::factory::{InformerId, InformerOptions, ResyncConflict, SharedInformerFactory};
pub use informer::shared_informer::WaitError;
pub use informer::shared_informer::{HandlerRegistration, SharedIndexInformer};
pub use telemetry::endpoint::EndpointHandle;
pub use telemetry::health::{EventsByType, ReflectorHealth, ReflectorPhase, ShardFiltering};
// KEP-5866 shard selectors, as an informer takes them.
pub use kinformer::shard::{HashRange, ShardError, ShardField, ShardSelector};
// The leader election machine's names a user configures or reads.
pub use kinformer::leader_election::{ElectionPhase, LeaderElectionConfig, StopReason};
pub use lister_watcher::{KubeListerWatcher, ListerWatcher, MetadataListerWatcher};
pub use listwatch::server_health::{
    ServerHealthHandle, ServerHealthStats, ServerLoop, ServerNotice,
};
pub use messages::Notify;
pub use object::InformerObject;
pub use telemetry::metrics::{
    ErrorReport, HealthReport, InformerReport, LeanReport, ListenerReport, ReadinessReport,
    ReflectorCountersReport, Telemetry, TelemetryError, TelemetryOptions,
};
pub use telemetry::series::{InformerSeries, ListenerSeries, SeriesReport, WorkQueueSeries};
// The reflector's translation of kube's watch items, for the fuzz harness (not an API).
pub use pipeline::reflector::{Transform, Validate, WatchErrorHandler};
#[doc(hidden)]
pub use pipeline::reflector_io::{Translated, WatchFailure, translate};
pub use telemetry::stats::{
    FifoStatus, IndexerStatus, LATENCY_BUCKETS, LatencyHistogram, ListenerStats,
};
pub use trace::TRACE_TARGET;
pub use workqueue::AsyncWorkQueue;

// The core's types a user names, so that this crate is the only one a user depends on.
pub use kinformer::{
    DeletedFinalStateUnknown, DeltaObject, DeltaType, KeyError, KeyFunc, ObjectKey, TraceId,
    backoff::BackoffConfig,
    fifo::FifoMode,
    lean::{CacheMode, DecodeError, Labels, LazyObject, LeanConfig, LeanStats, OwnerRef},
    meta_namespace_key,
    notification::Notification,
    processor::{MIN_RESYNC_PERIOD, ResyncPeriod, SyncTracker},
    reflector::{INITIAL_EVENTS_END, InitialList, ReflectorConfig},
    store::{
        IndexFunc, Indexers, LazyRead, Lister, NAMESPACE_INDEX, NamespacedLister, Snapshot,
        StoreError, TypedRead, index_func, meta_index_func, namespace_index_func,
    },
    workqueue::{
        BucketRateLimiter, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
        MaxOfRateLimiter, RateLimiter, WorkQueueMetrics, default_controller_rate_limiter,
    },
};

// The OpenTelemetry guide's code, compiled and run as a doctest (the `otel` feature is on in
// this crate's own tests, through its dev-dependency on itself).
#[cfg(all(doctest, feature = "otel"))]
#[doc = include_str!("../../docs/tracing.md")]
mod tracing_guide {}
