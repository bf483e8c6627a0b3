//! Generic instances compiled once, here, for the built-in kinds most programs read (issue 28):
//! Pods, ConfigMaps, Deployments, ReplicaSets and Leases.
//!
//! Unoptimised builds share generic instances between crates (rustc's share-generics, on by
//! default at opt-level 0 and 1): a crate that needs one compiled in a crate it depends on links
//! that copy instead of generating its own. Decoding a Pod instantiates k8s-openapi's
//! deserializers for every type inside it, about 25,000 instances per deserializer; every test
//! binary that decodes Pods (through kube's `Api`, `serde_json::from_value` of a test object,
//! or this crate's decoders) compiled them again. Here they are compiled once, for the
//! deserializers and serializers kube's client and kinformer use, and shared with every crate
//! above this one, including `kinformer-actors`' own unit tests, which cannot share the
//! instances of `kinformer_actors::prebuilt` (the pipeline's, on top of these).
//!
//! The instances are named by [`instances`], a function nobody calls: a public function of a
//! library is compiled, and everything it names with it. Feature `prebuilt` (on by default),
//! and only in builds with debug assertions: an optimised build generates its own and would
//! compile these for nothing. Not in this crate's own unit-test binary either, which shares
//! nothing with its dependants.

use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    coordination::v1::Lease,
    core::v1::{ConfigMap, Pod},
};
use kube_core::{ObjectList, watch::WatchEvent};
use serde::{Serialize, de::DeserializeOwned};

/// Never called (see the [module docs](self)): the address of each instance, so that every one
/// is compiled here.
#[doc(hidden)]
pub fn instances() -> Vec<usize> {
    let mut v = Vec::new();
    of::<Pod>(&mut v);
    of::<ConfigMap>(&mut v);
    of::<Deployment>(&mut v);
    of::<ReplicaSet>(&mut v);
    of::<Lease>(&mut v);
    v
}

/// kube's client reads answers with `serde_json::from_str` (an object, a list, a watch event)
/// and writes bodies with `serde_json::to_vec`; tests build objects with
/// `serde_json::from_value`; the informers decode with [`crate::exact::from_slice`].
fn of<K: DeserializeOwned + Serialize + Clone>(v: &mut Vec<usize>) {
    let object: fn(&'static str) -> serde_json::Result<K> = serde_json::from_str::<K>;
    let list: fn(&'static str) -> serde_json::Result<ObjectList<K>> =
        serde_json::from_str::<ObjectList<K>>;
    let event: fn(&'static str) -> serde_json::Result<WatchEvent<K>> =
        serde_json::from_str::<WatchEvent<K>>;
    let slice: fn(&'static [u8]) -> serde_json::Result<K> = serde_json::from_slice::<K>;
    let exact: fn(&'static [u8]) -> serde_json::Result<K> = crate::exact::from_slice::<K>;
    let value: fn(serde_json::Value) -> serde_json::Result<K> = serde_json::from_value::<K>;
    let body: fn(&K) -> serde_json::Result<Vec<u8>> = serde_json::to_vec::<K>;
    let to_value: fn(K) -> serde_json::Result<serde_json::Value> = serde_json::to_value::<K>;
    v.extend([
        object as usize,
        list as usize,
        event as usize,
        slice as usize,
        exact as usize,
        value as usize,
        body as usize,
        to_value as usize,
    ]);
}
