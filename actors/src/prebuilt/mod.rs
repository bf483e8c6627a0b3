//! Generic instances compiled once, here, for the built-in kinds most programs watch (issue 28):
//! Pods, ConfigMaps, Deployments, ReplicaSets and Leases.
//!
//! Unoptimised builds share generic instances between crates: rustc's share-generics is on by
//! default at opt-level 0 and 1, so a crate that needs `SharedIndexInformer<Pod>` and finds it
//! compiled in a crate it depends on links that copy instead of generating its own. A Pod
//! informer and a Pod `Api` pull in about 60,000 instances (the pipeline's actors, the decoders,
//! and k8s-openapi's (de)serializers for every type inside a Pod). Without this module each
//! binary that watches Pods compiled them again: the quickstart example took 21 s of codegen
//! and LLVM, and 3 s with them here; every test binary and example of the workspace paid the
//! same.
//!
//! The instances are named by [`instances`], a function nobody calls: a public function of a
//! library is compiled, and everything it names with it. Feature `prebuilt` (on by default),
//! and only in builds with debug assertions (the dev and test profiles), where instances are
//! shared; an optimised build generates its own and would compile these for nothing. Not in
//! this crate's own unit-test binary either, which shares nothing with its dependants.
//! `kinformer::prebuilt` (the core's) holds the k8s-openapi (de)serializers these build on.
//!
//! Imports: `informer` (the factory and the informer) and the base files; it sits on top, and
//! nothing imports it but `lib.rs`.

use std::{future::Future, pin::Pin};

use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    coordination::v1::Lease,
    core::v1::{ConfigMap, Pod},
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};

use crate::{
    config::InformerConfig, handler::ResourceEventHandlerFuncs,
    informer::factory::SharedInformerFactory, informer::shared_informer::SharedIndexInformer,
    object::InformerObject,
};

/// A future named for its instances only.
type Instances = Pin<Box<dyn Future<Output = ()>>>;

/// Never called (see the [module docs](self)): names the instances of every kind here.
#[doc(hidden)]
pub fn instances(factory: SharedInformerFactory, client: Client) -> Vec<Instances> {
    vec![
        of::<Pod>(factory.clone(), client.clone()),
        of::<ConfigMap>(factory.clone(), client.clone()),
        of::<Deployment>(factory.clone(), client.clone()),
        of::<ReplicaSet>(factory.clone(), client.clone()),
        of::<Lease>(factory, client),
    ]
}

/// What programs and tests use of one kind: an informer from a factory or on its own, a handler,
/// the lister, and kube's `Api` (its requests decode and encode `K` with serde_json).
fn of<K>(factory: SharedInformerFactory, client: Client) -> Instances
where
    K: InformerObject + Default,
    K::DynamicType: Default,
{
    Box::pin(async move {
        let informer = factory.informer::<K>();
        let _ = informer
            .add_event_handler(ResourceEventHandlerFuncs::<K>::new())
            .await;
        let lister = informer.lister();
        let _ = (lister.list(), lister.get("", ""), lister.get_by_key(""));
        let _ =
            SharedIndexInformer::<K>::with_config(client.clone(), None, InformerConfig::default());
        let api = Api::<K>::all(client);
        let obj = K::default();
        let _ = api.get("").await;
        let _ = api.get_opt("").await;
        let _ = api.list(&ListParams::default()).await;
        let _ = api.create(&PostParams::default(), &obj).await;
        let _ = api.replace("", &PostParams::default(), &obj).await;
        let _ = api.delete("", &DeleteParams::default()).await;
        let patch = Patch::Merge(serde_json::Value::Null);
        let _ = api.patch("", &PatchParams::default(), &patch).await;
        let _ = api.patch_status("", &PatchParams::default(), &patch).await;
    })
}
