//! The embedded demo: a simulated API server in-process, a few Deployments labelled
//! `kinformer.example/managed=true` (and one that is not, which the controller leaves alone),
//! and a short scenario: scale up, rolling update, recreate, rolling update with a scale, scale
//! down, delete. Each step waits (with a deadline) until the controller converged.

use std::{collections::BTreeMap, time::Duration};

use anyhow::Context as _;
use k8s_openapi::{
    api::{
        apps::v1::{
            Deployment, DeploymentSpec, DeploymentStrategy, ReplicaSet, RollingUpdateDeployment,
        },
        core::v1::{Container, PodSpec, PodTemplateSpec},
    },
    apimachinery::pkg::{
        apis::meta::v1::{LabelSelector, ObjectMeta},
        util::intstr::IntOrString,
    },
};
use kinformer_actors::Lister;
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};

use crate::{retry::retry_on_conflict, sync};

/// The namespace of the demo Deployments.
pub const NAMESPACE: &str = "demo";
/// The label the demo's (and the default selector's) managed Deployments carry.
pub const MANAGED_LABEL: (&str, &str) = ("kinformer.example/managed", "true");

/// How long one scenario step may take to converge.
const STEP_DEADLINE: Duration = Duration::from_secs(60);

/// A Deployment of one container `app` running `image`, selected by `app=<name>`.
pub fn deployment(
    name: &str,
    replicas: i32,
    image: &str,
    strategy: Option<DeploymentStrategy>,
    managed: bool,
) -> Deployment {
    let app = BTreeMap::from([("app".to_string(), name.to_string())]);
    let mut labels = app.clone();
    if managed {
        labels.insert(MANAGED_LABEL.0.into(), MANAGED_LABEL.1.into());
    }
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(app.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(app),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".into(),
                        image: Some(image.into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            strategy,
            ..DeploymentSpec::default()
        },
        status: None,
    }
}

/// A RollingUpdate strategy with explicit bounds.
pub fn rolling(max_surge: IntOrString, max_unavailable: IntOrString) -> Option<DeploymentStrategy> {
    Some(DeploymentStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(max_surge),
            max_unavailable: Some(max_unavailable),
        }),
    })
}

/// The Recreate strategy.
pub fn recreate() -> Option<DeploymentStrategy> {
    Some(DeploymentStrategy {
        type_: Some("Recreate".into()),
        rolling_update: None,
    })
}

/// Merge-patches `spec.replicas`; returns the new generation.
pub async fn scale(client: &Client, ns: &str, name: &str, replicas: i32) -> kube::Result<i64> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({"spec": {"replicas": replicas}});
    let d = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(d.metadata.generation.unwrap_or(0))
}

/// Sets the image of the pod template's first container (a template without containers is left
/// as it is).
pub fn set_template_image(d: &mut Deployment, image: &str) {
    if let Some(c) = d
        .spec
        .template
        .spec
        .as_mut()
        .and_then(|s| s.containers.first_mut())
    {
        c.image = Some(image.into());
    }
}

/// Replaces the Deployment (read, then written back) with its first container's image changed;
/// returns the new generation. A conflict (the controller wrote the Deployment between the
/// read and the write) is retried on a fresh read, as client-go's `retry.RetryOnConflict`.
pub async fn set_image(client: &Client, ns: &str, name: &str, image: &str) -> kube::Result<i64> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = retry_on_conflict(|| async {
        let mut d = api.get(name).await?;
        set_template_image(&mut d, image);
        api.replace(name, &PostParams::default(), &d).await
    })
    .await?;
    Ok(d.metadata.generation.unwrap_or(0))
}

/// True when the cached Deployment observed `generation` and its rollout is complete, with every
/// other ReplicaSet it owns at 0.
pub fn converged(
    deployments: &Lister<Deployment>,
    replica_sets: &Lister<ReplicaSet>,
    ns: &str,
    name: &str,
    generation: i64,
) -> bool {
    let Some(d) = deployments.get(ns, name) else {
        return false;
    };
    let uid = d.metadata.uid.clone().unwrap_or_default();
    d.metadata.generation.unwrap_or(0) >= generation
        && sync::rollout_complete(&d)
        && replica_sets
            .namespaced(ns)
            .list()
            .iter()
            .filter(|rs| sync::is_controlled_by(&rs.metadata, &uid))
            .filter(|rs| sync::rs_replicas(rs) > 0)
            .count()
            <= 1
}

/// Polls `cond` every 20 ms until it holds or `STEP_DEADLINE` passes.
async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + STEP_DEADLINE;
    while !cond() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "demo: timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Plays the scenario against `client`, watching convergence through the controller's caches.
pub async fn scenario(
    client: Client,
    deployments: Lister<Deployment>,
    replica_sets: Lister<ReplicaSet>,
) -> anyhow::Result<()> {
    let ns = NAMESPACE;
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let initial = [
        deployment("web", 3, "nginx:1.27", None, true),
        deployment(
            "api",
            2,
            "api:1.0",
            rolling(IntOrString::Int(1), IntOrString::Int(0)),
            true,
        ),
        deployment("worker", 2, "worker:1.0", recreate(), true),
        deployment("legacy", 1, "legacy:0.9", None, false),
    ];
    let conv = |name: &str, generation: i64| {
        let (d, r) = (deployments.clone(), replica_sets.clone());
        let name = name.to_string();
        move || converged(&d, &r, ns, &name, generation)
    };
    for d in &initial {
        api.create(&PostParams::default(), d)
            .await
            .context("create demo deployment")?;
    }
    tracing::info!(
        "demo: created web (3, RollingUpdate 25%/25%), api (2, maxSurge 1, maxUnavailable 0), worker (2, Recreate), and legacy (not labelled: ignored)"
    );
    for name in ["web", "api", "worker"] {
        wait_for(&format!("{name} to roll out"), conv(name, 1)).await?;
    }
    tracing::info!("demo: all three rolled out");

    tracing::info!("demo: scale web 3 → 6");
    let g = scale(&client, ns, "web", 6).await?;
    wait_for("web at 6", conv("web", g)).await?;

    tracing::info!("demo: api image api:1.0 → api:2.0 (rolling update, one pod at a time)");
    let g = set_image(&client, ns, "api", "api:2.0").await?;
    wait_for("api rolled to 2.0", conv("api", g)).await?;

    tracing::info!("demo: worker image worker:1.0 → worker:2.0 (recreate)");
    let g = set_image(&client, ns, "worker", "worker:2.0").await?;
    wait_for("worker recreated on 2.0", conv("worker", g)).await?;

    tracing::info!(
        "demo: web image nginx:1.27 → nginx:1.28 with maxSurge 50%, then scale to 4 mid-rollout"
    );
    let patch = serde_json::json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": "50%", "maxUnavailable": "25%"}}}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    set_image(&client, ns, "web", "nginx:1.28").await?;
    let g = scale(&client, ns, "web", 4).await?;
    wait_for("web rolled to 1.28 at 4", conv("web", g)).await?;

    tracing::info!("demo: scale api 2 → 1");
    let g = scale(&client, ns, "api", 1).await?;
    wait_for("api at 1", conv("api", g)).await?;

    tracing::info!("demo: delete worker (its ReplicaSets and pods go to the garbage collector)");
    let uid = deployments
        .get(ns, "worker")
        .and_then(|d| d.metadata.uid.clone())
        .unwrap_or_default();
    api.delete("worker", &DeleteParams::default()).await?;
    let rs = replica_sets.clone();
    wait_for("worker's ReplicaSets collected", move || {
        !rs.namespaced(ns)
            .list()
            .iter()
            .any(|r| sync::is_controlled_by(&r.metadata, &uid))
    })
    .await?;
    tracing::info!("demo: scenario complete");
    Ok(())
}
