//! Two kube-rs `Controller`s and a kinformer handler on ONE shared Pod informer: one LIST and
//! one WATCH of pods whatever the number of controllers (kube-rs #1080), through kinformer's
//! kube-rs interop (`kinformer_actors::kube_runtime`, feature `kube-runtime`; see
//! `docs/kube-rs.md`).
//!
//! - the **annotator**, `pods.controller()`: kube's `Controller::for_shared_stream` on the
//!   informer's objects and its kube `Store`; it marks every pod with [`ANNOTATION`];
//! - the **counter**, `Controller::for_stream` on the informer's `watcher::Event` stream
//!   through kube's `WatchStreamExt` adapters (`applied_objects`, then
//!   `predicate_filter(predicates::labels)`): it counts reconciles per pod, and since the
//!   annotator's writes change no label, each pod is reconciled once;
//! - a kinformer **handler** on the same informer, hearing every pod.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kinformer_actors::{
    InformerError, ResourceEventHandlerFuncs, SharedIndexInformer, SharedInformerFactory,
};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{
        WatchStreamExt,
        controller::{Action, Controller},
        predicates,
    },
};
use tokio::task::JoinHandle;

/// The annotation the annotator puts on every pod.
pub const ANNOTATION: &str = "kinformer.example/reconciled";

/// What the controllers and the handler did, shared with them.
#[derive(Debug, Default)]
pub struct Counts {
    /// The annotator's reconciles.
    pub annotator_reconciles: AtomicU64,
    /// The pods the annotator patched.
    pub annotated: Mutex<BTreeSet<String>>,
    /// The counter's reconciles, per pod (`ns/name`).
    pub counted: Mutex<BTreeMap<String, u64>>,
    /// Every pod the kinformer handler heard of (`ns/name`).
    pub heard: Mutex<BTreeSet<String>>,
    /// Notifications the handler received.
    pub notifications: AtomicU64,
}

impl Counts {
    /// The pods the annotator patched.
    pub fn annotated(&self) -> BTreeSet<String> {
        lock(&self.annotated).clone()
    }
    /// The counter's reconciles per pod.
    pub fn counted(&self) -> BTreeMap<String, u64> {
        lock(&self.counted).clone()
    }
    /// The pods the handler heard of.
    pub fn heard(&self) -> BTreeSet<String> {
        lock(&self.heard).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// The controllers' shared context.
struct Ctx {
    client: Client,
    counts: Arc<Counts>,
}

/// The annotator: patches [`ANNOTATION`] onto a pod that lacks it.
async fn annotate(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    ctx.counts
        .annotator_reconciles
        .fetch_add(1, Ordering::Relaxed);
    if pod.annotations().contains_key(ANNOTATION) || pod.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let patch = serde_json::json!({"metadata": {"annotations": {ANNOTATION: "true"}}});
    match api
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {
            lock(&ctx.counts.annotated).insert(key(&pod));
            Ok(Action::await_change())
        }
        // Deleted meanwhile: nothing to do.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e),
    }
}

/// The counter: counts its reconciles per pod.
async fn count(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    *lock(&ctx.counts.counted).entry(key(&pod)).or_default() += 1;
    Ok(Action::await_change())
}

fn retry(_: Arc<Pod>, error: &kube::Error, _: Arc<Ctx>) -> Action {
    tracing::warn!(%error, "reconcile failed; retrying");
    Action::requeue(std::time::Duration::from_millis(200))
}

/// The running demo: the factory (one Pod informer), the two controllers' tasks and the
/// counters.
pub struct Running {
    /// The factory holding the one Pod informer.
    pub factory: SharedInformerFactory,
    /// The Pod informer both controllers and the handler share.
    pub pods: SharedIndexInformer<Pod>,
    /// What the controllers and the handler did.
    pub counts: Arc<Counts>,
    controllers: Vec<JoinHandle<()>>,
}

/// Builds the Pod informer, its kinformer handler and both kube-rs controllers on it, and
/// starts them (on the current tokio runtime; the informer's actors join the current actix
/// System or kinformer's background one).
///
/// # Errors
/// The informer's errors (registering the handler or the interop's hub, starting).
pub async fn start(client: Client) -> Result<Running, InformerError> {
    let counts = Arc::new(Counts::default());
    let factory = SharedInformerFactory::new(client.clone());
    let pods = factory.informer::<Pod>();

    // The kinformer handler: every pod, on its own thread.
    let (heard, seen) = (Arc::clone(&counts), Arc::clone(&counts));
    pods.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .on_add(move |pod: &Arc<Pod>, _initial| {
                heard.notifications.fetch_add(1, Ordering::Relaxed);
                lock(&heard.heard).insert(key(pod));
            })
            .on_update(move |_old: &Arc<Pod>, _new: &Arc<Pod>| {
                seen.notifications.fetch_add(1, Ordering::Relaxed);
            }),
    )
    .await?;

    let ctx = Arc::new(Ctx {
        client,
        counts: Arc::clone(&counts),
    });
    // Controller 1: kube's shared-stream Controller on the informer.
    let annotator = pods
        .controller()
        .await?
        .run(annotate, retry, Arc::clone(&ctx));
    // Controller 2: kube's stream adapters on the informer's watcher events.
    let labelled = pods
        .watcher_events()
        .await?
        .applied_objects()
        .predicate_filter(predicates::labels, Default::default());
    let counter = Controller::for_stream(labelled, pods.kube_store().await?).run(count, retry, ctx);

    let controllers = vec![
        tokio::spawn(annotator.for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "annotator");
            }
        })),
        tokio::spawn(counter.for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "counter");
            }
        })),
    ];
    factory.start()?;
    Ok(Running {
        factory,
        pods,
        counts,
        controllers,
    })
}

impl Running {
    /// Stops the informer; the controllers' trigger streams end with it, and the controllers
    /// shut down gracefully (their tasks are awaited).
    pub async fn shutdown(self) {
        self.factory.shutdown().await;
        for c in self.controllers {
            let _ = c.await;
        }
    }
}

// The code of the kube-rs guide (docs/), compiled as doctests here: this crate has every dependency the
// guide uses, which kinformer-actors (whose users it addresses) does not.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/kube-rs.md")]
mod kube_rs_guide {}
