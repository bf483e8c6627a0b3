//! Discovery (`k8s.io/apiserver/pkg/endpoints/discovery`): `/`, `/version`, `/api`, `/apis`,
//! `/apis/{group}` and the APIResourceLists of `/api/v1` and `/apis/{group}/{version}`, built
//! from the served resources.

use serde_json::{Value, json};

use crate::apimachinery::schema::{Registry, api_version_of};

/// `/`: the paths the server serves.
pub(crate) fn root_paths() -> Value {
    json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/openapi/v3", "/readyz", "/version"]})
}

/// The Kubernetes release whose kube-apiserver the sim follows (its rules, texts and 1.34's
/// `ListFromCacheSnapshot` reads): what `/version`, the OpenAPI document and the demo's
/// kubelets say.
pub(crate) const KUBERNETES_VERSION: &str = "v1.34.0";

/// `/version`: the Kubernetes version the sim answers as ([`KUBERNETES_VERSION`]; Go as 1.34.0
/// was built with).
pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "34",
        "gitVersion": format!("{KUBERNETES_VERSION}-kinformer-sim"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-08-27T00:00:00Z",
        "goVersion": "go1.24.6",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`.
pub(crate) fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

/// One APIGroup, its first version preferred.
fn group_json(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = vs.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": vs, "preferredVersion": preferred})
}

/// `/apis`.
pub(crate) fn api_group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`.
pub(crate) fn api_group(reg: &Registry, group: &str) -> Option<Value> {
    reg.groups()
        .iter()
        .find(|(g, _)| g == group)
        .map(|(g, vs)| {
            let mut v = group_json(g, vs);
            if let Some(o) = v.as_object_mut() {
                o.insert("kind".into(), json!("APIGroup"));
                o.insert("apiVersion".into(), json!("v1"));
            }
            v
        })
}

/// `/api/v1` or `/apis/{group}/{version}`: an APIResourceList with subresources.
pub(crate) fn api_resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    if !reg.has_group_version(group, version) {
        return None;
    }
    let mut resources = Vec::new();
    for d in reg
        .all()
        .iter()
        .filter(|d| d.group == group && d.version == version)
    {
        let mut r = json!({
            "name": d.plural,
            "singularName": d.singular,
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            "storageVersionHash": storage_hash(&d.api_version, &d.kind),
        });
        if let Some(o) = r.as_object_mut() {
            if !d.short_names.is_empty() {
                o.insert("shortNames".into(), json!(d.short_names));
            }
            if !d.categories.is_empty() {
                o.insert("categories".into(), json!(d.categories));
            }
        }
        resources.push(r);
        if d.status {
            resources.push(json!({
                "name": format!("{}/status", d.plural),
                "singularName": "",
                "namespaced": d.namespaced,
                "kind": d.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if d.scale {
            resources.push(json!({
                "name": format!("{}/scale", d.plural),
                "singularName": "",
                "namespaced": d.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": api_version_of(group, version),
        "resources": resources,
    }))
}

/// A stable, opaque hash like kube-apiserver's storageVersionHash (8 bytes, base64).
fn storage_hash(api_version: &str, kind: &str) -> String {
    use base64::Engine as _;
    // FNV-1a: stable across runs and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in api_version.bytes().chain([b'/']).chain(kind.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    base64::engine::general_purpose::STANDARD.encode(h.to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apimachinery::schema::{CustomResource, Scope};

    #[test]
    fn discovery_shapes() {
        let r = Registry::new(&[CustomResource::new(
            "example.com",
            "v1",
            "Widget",
            "widgets",
            Scope::Namespaced,
        )])
        .unwrap();
        let core = api_resource_list(&r, "", "v1").unwrap();
        assert_eq!(core["groupVersion"], "v1");
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x["name"].as_str())
            .collect();
        assert!(
            names.contains(&"pods")
                && names.contains(&"pods/status")
                && names.contains(&"namespaces")
        );
        let apps = api_resource_list(&r, "apps", "v1").unwrap();
        assert!(
            apps["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["name"] == "deployments/scale")
        );
        let groups = api_group_list(&r);
        assert!(
            groups["groups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["name"] == "example.com")
        );
        assert!(api_resource_list(&r, "nope", "v1").is_none());
    }
}
