//! [`InformerObject`]: what an informer can cache.

use std::fmt::Debug;

use kube::Resource;
use serde::{Serialize, de::DeserializeOwned};

use crate::listwatch::lister_watcher::ScopeApi;

/// What an informer can cache: any kube resource that decodes from JSON (every k8s-openapi
/// type, `DynamicObject`, `PartialObjectMeta<K>`, custom resources). `Serialize` is for the
/// trace sink's opt-in object bodies (T3); every kube resource type has it.
pub trait InformerObject:
    Resource<DynamicType: Clone + Send + Sync + 'static, Scope: ScopeApi>
    + Clone
    + DeserializeOwned
    + Serialize
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<T> InformerObject for T where
    T: Resource<DynamicType: Clone + Send + Sync + 'static, Scope: ScopeApi>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug
        + Send
        + Sync
        + 'static
{
}
