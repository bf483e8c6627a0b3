//! # kinformer-actors: client-go's informer as actix actors
//!
//! ```text
//! API server --LIST/WATCH--> Reflector --Replace/Events--> DeltaFifo --ProcessDeltas--> Indexer
//!     --Notifications--> ProcessorListener (one per handler) --> handler / actor / workqueue
//! ```
//! Every arrow is a typed message ([`messages`]); every mailbox is bounded (B1); the FIFO holds
//! back the reflector when the indexer falls behind (B4); each listener has an overflow policy
//! ([`OverflowPolicy`], B3); a [`Supervisor`](supervisor::Supervisor) restarts a failed reflector
//! with backoff (S1). Listers read the cache without locks (I6). See `ARCHITECTURE.md`.
//!
//! Start with [`SharedInformerFactory`] (or [`SharedIndexInformer`] directly). Inside an actix
//! application informers join its `System`; from plain tokio they use a background one
//! ([`runtime`]).

pub mod error;
pub mod factory;
pub mod fifo;
pub mod handler;
pub mod health;
pub mod indexer;
pub mod informer;
pub mod list_decode;
pub mod listener;
pub mod lister_watcher;
pub mod messages;
pub mod reflector;
mod reflector_io;
pub mod runtime;
pub mod supervisor;
pub mod trace;
pub mod workqueue;

use std::fmt::Debug;

use kube::Resource;
use serde::de::DeserializeOwned;

pub use error::{InformerError, ReflectorError, WatchWarning};
pub use factory::{InformerOptions, SharedInformerFactory};
pub use handler::{
    EnqueueKeys, KeyMapper, ResourceEventHandler, ResourceEventHandlerFuncs, handler_fn,
};
pub use informer::{HandlerRegistration, InformerConfig, SharedIndexInformer};
pub use listener::{ListenerConfig, OverflowPolicy};
pub use messages::Notification;
pub use reflector::ReflectorConfig;
pub use health::{ReflectorHealth, ReflectorPhase};
pub use workqueue::WorkQueue;

/// What an informer can cache: any kube resource that decodes from JSON (every k8s-openapi
/// type, `DynamicObject`, `PartialObjectMeta<K>`, custom resources).
pub trait InformerObject:
    Resource<DynamicType: Clone + Send + Sync + 'static, Scope: lister_watcher::ScopeApi>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<T> InformerObject for T where
    T: Resource<DynamicType: Clone + Send + Sync + 'static, Scope: lister_watcher::ScopeApi>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}
