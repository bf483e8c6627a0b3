//! The schema knowledge the sim keeps about the built-in kinds' lists and maps, shared by
//! strategic merge patch ([`super::smp`]) and server-side apply ([`super::fieldmanager`]).
//!
//! Paths are the field names from the object root; a list element adds no segment (the
//! containers' ports of a pod are at `["spec", "containers", "ports"]`).
//!
//! - Strategic merge patch reads the `patchStrategy`/`patchMergeKey` struct tags of `k8s.io/api`
//!   (`core/v1/types.go`, `apps/v1/types.go`, `meta/v1/types.go`).
//! - Server-side apply reads the OpenAPI schema's `x-kubernetes-list-type`/`-list-map-keys`
//!   (the Go types' `+listType`/`+listMapKey` markers); a list without them is converted as
//!   `k8s.io/kube-openapi/pkg/schemaconv` does: associative by its `patchMergeKey` when its
//!   patch strategy is `merge`, a set when it is `merge` without a key, atomic otherwise. So
//!   one table serves both, with the few lists whose list-map keys differ from their patch
//!   merge key (container ports, Service ports, topology spread constraints) listed apart.
//! - `+structType=atomic`/`+mapType=atomic` objects (`LabelSelector`, `ObjectReference`,
//!   `OwnerReference`, `LocalObjectReference`, `nodeSelector`, a Service's `selector`) are owned
//!   as a whole.
//!
//! Custom resources have no schema in the sim: their lists are atomic and their maps granular,
//! as for a CRD whose schema says nothing (`x-kubernetes-list-type` defaults to atomic), except
//! `metadata`, whose schema is `ObjectMeta`'s for every kind.

/// How a strategic merge patch merges a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchStrategy {
    /// Replaced by the patch's list.
    Replace,
    /// Merged element by element, matched on this key.
    MergeByKey(&'static str),
    /// A set of primitives: patch values not present are appended.
    MergePrimitives,
}

/// How server-side apply treats a list (`x-kubernetes-list-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListType {
    /// `atomic`: owned and replaced as a whole.
    Atomic,
    /// `set`: scalars, each owned on its own (`v:<value>`).
    Set,
    /// `map`: objects identified by these keys (`k:{...}`).
    Map(&'static [&'static str]),
}

const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

fn parent(path: &[String]) -> Option<&str> {
    path.len()
        .checked_sub(2)
        .and_then(|i| path.get(i))
        .map(String::as_str)
}

/// The strategic merge patch strategy of the list at `path` in an object of built-in `kind`.
pub(crate) fn patch_strategy(kind: &str, path: &[String]) -> PatchStrategy {
    use PatchStrategy::{MergeByKey, MergePrimitives, Replace};
    let Some(field) = path.last() else {
        return Replace;
    };
    let parent = parent(path);
    match field.as_str() {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates" => MergeByKey("name"),
        // ServiceAccount.secrets (ObjectReference, merge key name).
        "secrets" if kind == "ServiceAccount" && path.len() == 1 => MergeByKey("name"),
        "ports" if kind == "Service" && path == ["spec", "ports"] => MergeByKey("port"),
        "ports" if parent.is_some_and(|p| CONTAINER_LISTS.contains(&p)) => {
            MergeByKey("containerPort")
        }
        "volumeMounts" => MergeByKey("mountPath"),
        "volumeDevices" => MergeByKey("devicePath"),
        "hostAliases" | "podIPs" | "hostIPs" => MergeByKey("ip"),
        "topologySpreadConstraints" => MergeByKey("topologyKey"),
        "conditions" | "addresses" if parent == Some("status") => MergeByKey("type"),
        "ownerReferences" if parent == Some("metadata") => MergeByKey("uid"),
        "finalizers" if parent == Some("metadata") => MergePrimitives,
        "podCIDRs" if kind == "Node" => MergePrimitives,
        _ => Replace,
    }
}

/// The server-side apply list type of the list at `path` (`builtin`: a kind the sim knows the
/// Go types of).
pub(crate) fn list_type(kind: &str, builtin: bool, path: &[String]) -> ListType {
    let in_metadata = path.len() == 2 && path[0] == "metadata";
    if !builtin && !in_metadata {
        return ListType::Atomic;
    }
    let field = path.last().map(String::as_str).unwrap_or("");
    let parent = parent(path);
    // `+listType=map` with keys other than the patch merge key.
    match field {
        "ports" if kind == "Service" && path == ["spec", "ports"] => {
            return ListType::Map(&["port", "protocol"]);
        }
        "ports" if parent.is_some_and(|p| CONTAINER_LISTS.contains(&p)) => {
            return ListType::Map(&["containerPort", "protocol"]);
        }
        "topologySpreadConstraints" => {
            return ListType::Map(&["topologyKey", "whenUnsatisfiable"]);
        }
        _ => {}
    }
    match patch_strategy(kind, path) {
        PatchStrategy::Replace => ListType::Atomic,
        PatchStrategy::MergePrimitives => ListType::Set,
        PatchStrategy::MergeByKey(k) => ListType::Map(match k {
            "name" => &["name"],
            "containerPort" => &["containerPort"],
            "port" => &["port"],
            "mountPath" => &["mountPath"],
            "devicePath" => &["devicePath"],
            "ip" => &["ip"],
            "type" => &["type"],
            "uid" => &["uid"],
            "topologyKey" => &["topologyKey"],
            _ => return ListType::Atomic,
        }),
    }
}

/// The schema default of a list-map key field, used when an element omits it (structured-merge
/// -diff's `keyedAssociativeListItemToPathElement` reads `getAssociativeKeyDefault`): ports'
/// `protocol` is `+default="TCP"`.
pub(crate) fn key_default(key: &str) -> Option<serde_json::Value> {
    (key == "protocol").then(|| serde_json::Value::String("TCP".into()))
}

/// Whether the object at `path` is owned as a whole (`+structType=atomic`, `+mapType=atomic`).
pub(crate) fn atomic_object(kind: &str, builtin: bool, path: &[String]) -> bool {
    if !builtin {
        return false;
    }
    let field = path.last().map(String::as_str).unwrap_or("");
    match field {
        // LabelSelector (+structType=atomic), a Service's selector (+mapType=atomic).
        "selector" => {
            path.len() == 2 && path[0] == "spec"
                || kind == "Service" && path == ["spec", "selector"]
        }
        // PodSpec.NodeSelector (+mapType=atomic).
        "nodeSelector" => true,
        // Event's ObjectReferences (+structType=atomic).
        "involvedObject" | "related" => kind == "Event" && path.len() == 1,
        _ => false,
    }
}

/// Whether the elements of the associative list at `path` are owned as a whole
/// (`OwnerReference`, `LocalObjectReference`, `ObjectReference` are `+structType=atomic`).
pub(crate) fn atomic_element(kind: &str, path: &[String]) -> bool {
    let field = path.last().map(String::as_str).unwrap_or("");
    match field {
        "ownerReferences" => parent(path) == Some("metadata"),
        "imagePullSecrets" => true,
        "secrets" => kind == "ServiceAccount" && path.len() == 1,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Vec<String> {
        s.split('.').map(str::to_string).collect()
    }

    #[test]
    fn list_types_of_the_built_in_kinds() {
        assert_eq!(
            list_type("Pod", true, &p("spec.containers")),
            ListType::Map(&["name"])
        );
        assert_eq!(
            list_type(
                "Deployment",
                true,
                &p("spec.template.spec.containers.ports")
            ),
            ListType::Map(&["containerPort", "protocol"])
        );
        assert_eq!(
            list_type("Pod", true, &p("spec.containers.args")),
            ListType::Atomic
        );
        assert_eq!(
            list_type("Widget", false, &p("metadata.finalizers")),
            ListType::Set
        );
        assert_eq!(
            list_type("Widget", false, &p("spec.items")),
            ListType::Atomic
        );
        assert!(atomic_object("Deployment", true, &p("spec.selector")));
        assert!(!atomic_object("Deployment", true, &p("spec.template")));
        assert!(atomic_element("Pod", &p("metadata.ownerReferences")));
    }
}
