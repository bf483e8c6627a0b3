//! [`InformerObject`]: what an informer can cache, and [`ScopeApi`]: how its scope builds a
//! kube `Api` over it.

use std::fmt::Debug;

use kube::{
    Api, Client, Resource,
    core::{ClusterResourceScope, DynamicResourceScope, NamespaceResourceScope},
};
use serde::{Serialize, de::DeserializeOwned};

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

/// Builds an `Api<K>` for an optional namespace whatever the resource's scope: kube offers a
/// namespaced constructor per scope type, and this picks the right one at compile time.
pub trait ScopeApi {
    /// `Api<K>` over `namespace` (ignored for cluster-scoped resources) or all namespaces.
    fn api<K>(client: Client, namespace: Option<&str>, dyntype: &K::DynamicType) -> Api<K>
    where
        K: Resource<Scope = Self>;
}

impl ScopeApi for NamespaceResourceScope {
    fn api<K>(client: Client, namespace: Option<&str>, dyntype: &K::DynamicType) -> Api<K>
    where
        K: Resource<Scope = Self>,
    {
        let api = Api::all_with(client, dyntype);
        match namespace {
            Some(ns) => api.constrain(ns),
            None => api,
        }
    }
}

impl ScopeApi for ClusterResourceScope {
    fn api<K>(client: Client, _namespace: Option<&str>, dyntype: &K::DynamicType) -> Api<K>
    where
        K: Resource<Scope = Self>,
    {
        Api::all_with(client, dyntype)
    }
}

impl ScopeApi for DynamicResourceScope {
    fn api<K>(client: Client, namespace: Option<&str>, dyntype: &K::DynamicType) -> Api<K>
    where
        K: Resource<Scope = Self>,
    {
        match namespace {
            Some(ns) => Api::namespaced_with(client, ns, dyntype),
            None => Api::all_with(client, dyntype),
        }
    }
}
