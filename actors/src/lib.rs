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
//! Start with [`SharedInformerFactory`] (or [`SharedIndexInformer`] directly). Inside an actix
//! application informers join its `System`; from plain tokio they use a background one
//! ([`runtime`]).
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
//! ## Names
//!
//! One name per concept. The informer's names are **client-go's**, since its behaviour is
//! client-go's: [`SharedIndexInformer`], [`SharedInformerFactory`], [`ResourceEventHandler`]
//! (and [`ResourceEventHandlerFuncs`]), [`HandlerRegistration`], [`Lister`], [`Indexers`],
//! [`Notification`] (client-go's `notification`: Add, Update, Delete), [`DeletedFinalStateUnknown`],
//! [`ObjectKey`] and [`meta_namespace_key`] (`MetaNamespaceKeyFunc`), [`ListerWatcher`],
//! [`WorkQueue`] (client-go's `workqueue.TypedRateLimitingInterface`) and its rate limiters
//! ([`ItemExponentialFailureRateLimiter`], [`BucketRateLimiter`], …), the actor names
//! (Reflector, DeltaFifo, Indexer, ProcessorListener) and the delta types. Where the user is
//! handed Rust types, the names are **kube-rs's**: `Api`, `Client`, `Resource`, `DynamicObject`,
//! `PartialObjectMeta`, `ListParams` come from kube unchanged, and [`InitialList`] /
//! [`ReflectorConfig`] speak in kube's list/watch parameters. Names of our own, for what neither
//! has: [`Notify`] (the message a user's actor receives: one [`Notification`] with its key and
//! trace id), [`OverflowPolicy`], [`ResyncPeriod`], [`FifoMode`], [`TraceId`] and the
//! `*Config` / `*Status` / `*Stats` types.

mod assembly;
mod config;
mod error;
mod factory;
mod fifo;
mod handler;
mod health;
mod indexer;
mod informer;
mod list_decode;
mod listener;
pub mod lister_watcher;
pub mod messages;
mod object;
mod reflector;
mod reflector_io;
pub mod runtime;
mod sink;
mod stats;
mod supervisor;
mod trace;
mod waiters;
pub mod workqueue;

pub use config::{FifoConfig, InformerConfig, ListenerConfig, OverflowPolicy};
pub use error::{InformerError, ReflectorError, WatchWarning};
pub use factory::{InformerOptions, SharedInformerFactory};
pub use handler::{
    EnqueueKeys, FnHandler, KeyMapper, ResourceEventHandler, ResourceEventHandlerFuncs, handler_fn,
};
pub use health::{ReflectorHealth, ReflectorPhase};
pub use informer::{HandlerRegistration, SharedIndexInformer};
pub use lister_watcher::{KubeListerWatcher, ListerWatcher, MetadataListerWatcher};
pub use messages::Notify;
pub use object::InformerObject;
pub use reflector::{Transform, Validate, WatchErrorHandler};
pub use stats::{FifoStatus, IndexerStatus, ListenerStats};
pub use trace::TRACE_TARGET;
pub use workqueue::WorkQueue;

// The core's types a user names, so that this crate is the only one a user depends on.
pub use kinformer::{
    DeletedFinalStateUnknown, DeltaObject, DeltaType, KeyError, KeyFunc, ObjectKey, TraceId,
    backoff::BackoffConfig,
    fifo::FifoMode,
    notification::Notification,
    processor::{MIN_RESYNC_PERIOD, ResyncPeriod, SyncTracker},
    reflector::{INITIAL_EVENTS_END, InitialList, ReflectorConfig},
    store::{
        IndexFunc, Indexers, Lister, NAMESPACE_INDEX, NamespacedLister, Snapshot, StoreError,
        index_func, namespace_index_func,
    },
    workqueue::{
        BucketRateLimiter, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
        MaxOfRateLimiter, RateLimiter, WorkQueueMetrics, default_controller_rate_limiter,
    },
};
