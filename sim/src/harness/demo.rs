//! `--seed-demo`: a few namespaces, nodes, deployments with their replica sets and running pods.

use serde_json::{Value, json};

use crate::apimachinery::errors::ApiError;
use crate::registry::generic::{self as ops, Part};
use crate::storage::store::Store;

fn create_with_status(
    store: &Store,
    plural: &str,
    group: &str,
    ns: Option<&str>,
    body: Value,
    status: Value,
) -> Result<Value, ApiError> {
    let def = store
        .registry
        .find(group, "v1", plural)
        .cloned()
        .ok_or_else(|| ApiError::internal(format!("no resource {plural}")))?;
    let obj = ops::create(store, &def, ns, body, false, true, None)?;
    let name = obj.name.clone();
    let mut v = obj.to_value(&def)?;
    if let Some(o) = v.as_object_mut() {
        o.insert("status".into(), status);
    }
    let obj = ops::update(store, &def, ns, &name, Part::Status, v, false, None)?;
    obj.to_value(&def)
}

/// Seeds the demo objects.
pub(crate) fn seed(store: &Store) -> Result<(), ApiError> {
    for i in 1..=3 {
        create_with_status(
            store,
            "nodes",
            "",
            None,
            json!({"metadata": {"name": format!("node-{i}"), "labels": {"kubernetes.io/hostname": format!("node-{i}")}}}),
            json!({"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.34.0"}}),
        )?;
    }
    let apps: [(&str, &str, i64); 3] =
        [("demo", "web", 3), ("demo", "api", 2), ("shop", "cart", 2)];
    let mut pod_n = 0;
    for (ns, app, replicas) in apps {
        ops::ensure_namespace(store, ns, true)?;
        let template = json!({
            "metadata": {"labels": {"app": app}},
            "spec": {"containers": [{"name": app, "image": format!("registry.example/{app}:1.0"), "ports": [{"containerPort": 8080}]}]}
        });
        let ready = json!({"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas, "updatedReplicas": replicas, "observedGeneration": 1});
        let deploy = create_with_status(
            store,
            "deployments",
            "apps",
            Some(ns),
            json!({"metadata": {"name": app, "labels": {"app": app}}, "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}}, "template": template}}),
            ready.clone(),
        )?;
        let owner = |kind: &str, v: &Value| json!([{"apiVersion": "apps/v1", "kind": kind, "name": v["metadata"]["name"], "uid": v["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]);
        let hash = format!("{:x}", 0x5d4c_3b2a_u32.wrapping_add(pod_n));
        let rs_name = format!("{app}-{hash}");
        let mut rs_template = template.clone();
        rs_template["metadata"]["labels"]["pod-template-hash"] = json!(hash);
        let rs = create_with_status(
            store,
            "replicasets",
            "apps",
            Some(ns),
            json!({"metadata": {"name": rs_name, "labels": {"app": app, "pod-template-hash": hash}, "ownerReferences": owner("Deployment", &deploy)},
                   "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app, "pod-template-hash": hash}}, "template": rs_template}}),
            json!({"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas, "fullyLabeledReplicas": replicas, "observedGeneration": 1}),
        )?;
        for r in 0..replicas {
            pod_n += 1;
            create_with_status(
                store,
                "pods",
                "",
                Some(ns),
                json!({"metadata": {"name": format!("{rs_name}-p{r}"), "labels": {"app": app, "pod-template-hash": hash}, "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name, "uid": rs["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]},
                       "spec": {"nodeName": format!("node-{}", 1 + pod_n % 3), "containers": [{"name": app, "image": format!("registry.example/{app}:1.0")}]}}),
                json!({"phase": "Running", "podIP": format!("10.244.0.{pod_n}"),
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": app, "ready": true, "restartCount": 0, "image": format!("registry.example/{app}:1.0"), "imageID": "", "started": true, "state": {"running": {}}}]}),
            )?;
        }
        let cm = store
            .registry
            .find("", "v1", "configmaps")
            .cloned()
            .ok_or_else(|| ApiError::internal("no configmaps"))?;
        ops::create(
            store,
            &cm,
            Some(ns),
            json!({"metadata": {"name": format!("{app}-config")}, "data": {"LOG_LEVEL": "info"}}),
            false,
            true,
            None,
        )?;
    }
    Ok(())
}
