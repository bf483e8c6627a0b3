//! The kinds the server knows (`k8s.io/apimachinery/pkg/runtime/schema` and the REST mapping):
//! each served resource's group, version, kind, plural, scope and subresources, for the
//! built-ins and the custom resources registered at start.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

/// Whether objects of a kind live in a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Objects live in a namespace (`/namespaces/{ns}/{plural}`).
    Namespaced,
    /// Objects are cluster-wide (`/{plural}`).
    Cluster,
}

/// A custom kind served at `/apis/{group}/{version}/...`, registered at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomResource {
    /// API group, e.g. `example.com`.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Widget`.
    pub kind: String,
    /// Plural resource name used in paths, e.g. `widgets`.
    pub plural: String,
    /// Namespaced or cluster-scoped.
    pub scope: Scope,
    /// Short names for discovery (`kubectl get wd`).
    pub short_names: Vec<String>,
    /// Categories for discovery (e.g. `all`).
    pub categories: Vec<String>,
    /// Whether the kind has a `status` subresource (then the main resource ignores status).
    pub status_subresource: bool,
}

impl CustomResource {
    /// A custom kind without short names, categories or status subresource.
    pub fn new(
        group: impl Into<String>,
        version: impl Into<String>,
        kind: impl Into<String>,
        plural: impl Into<String>,
        scope: Scope,
    ) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            scope,
            short_names: Vec::new(),
            categories: Vec::new(),
            status_subresource: false,
        }
    }

    /// Enables the `status` subresource.
    pub fn with_status_subresource(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// Sets the short names.
    pub fn with_short_names<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        names: I,
    ) -> Self {
        self.short_names = names.into_iter().map(Into::into).collect();
        self
    }
}

/// How names of a kind are validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameRule {
    /// DNS-1123 subdomain (most kinds).
    Subdomain,
    /// DNS-1123 label (namespaces).
    Label,
    /// DNS-1035 label (services: `ValidateServiceName`, `NameIsDNS1035Label`).
    Dns1035Label,
}

/// Which Table columns `kubectl get` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TableKind {
    Generic,
    Pod,
    Deployment,
    ReplicaSet,
    Service,
    ConfigMap,
    Secret,
    Namespace,
    Node,
}

/// One served resource (a kind at one group/version).
#[derive(Debug)]
pub(crate) struct ResourceDef {
    /// Index into the registry and the store.
    pub idx: usize,
    pub group: String,
    pub version: String,
    /// `v1` or `group/version`.
    pub api_version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Has a `status` subresource.
    pub status: bool,
    /// Has a `scale` subresource (`spec.replicas`).
    pub scale: bool,
    /// Built into Kubernetes (list items then carry no apiVersion/kind, like the real server).
    pub builtin: bool,
    /// `metadata.generation` is maintained (set to 1 on create).
    pub tracks_generation: bool,
    /// Field paths selectable besides metadata.name/namespace.
    pub field_labels: Vec<&'static str>,
    pub name_rule: NameRule,
    pub table: TableKind,
    /// `{"apiVersion":"...","kind":"..."` (no closing brace): the start of every full object.
    pub typemeta_prefix: Bytes,
}

impl ResourceDef {
    /// `pods` or `deployments.apps`, as in error messages.
    pub(crate) fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `PodList`.
    pub(crate) fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
}

struct Builtin {
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    all: bool,
    status: bool,
    scale: bool,
    generation: bool,
    fields: &'static [&'static str],
    name_rule: NameRule,
    table: TableKind,
}

fn builtins() -> Vec<Builtin> {
    let b = |group,
             kind,
             plural,
             namespaced,
             short,
             all,
             status,
             scale,
             generation,
             fields,
             name_rule,
             table| Builtin {
        group,
        kind,
        plural,
        namespaced,
        short,
        all,
        status,
        scale,
        generation,
        fields,
        name_rule,
        table,
    };
    use NameRule::{Dns1035Label, Label, Subdomain};
    vec![
        b(
            "",
            "Pod",
            "pods",
            true,
            &["po"],
            true,
            true,
            false,
            true,
            &[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ],
            Subdomain,
            TableKind::Pod,
        ),
        b(
            "",
            "ConfigMap",
            "configmaps",
            true,
            &["cm"],
            false,
            false,
            false,
            false,
            &[],
            Subdomain,
            TableKind::ConfigMap,
        ),
        b(
            "",
            "Secret",
            "secrets",
            true,
            &[],
            false,
            false,
            false,
            false,
            &["type"],
            Subdomain,
            TableKind::Secret,
        ),
        b(
            "",
            "Service",
            "services",
            true,
            &["svc"],
            true,
            true,
            false,
            false,
            &[],
            Dns1035Label,
            TableKind::Service,
        ),
        b(
            "",
            "Namespace",
            "namespaces",
            false,
            &["ns"],
            false,
            true,
            false,
            false,
            &["status.phase"],
            Label,
            TableKind::Namespace,
        ),
        b(
            "",
            "Node",
            "nodes",
            false,
            &["no"],
            false,
            true,
            false,
            false,
            &["spec.unschedulable"],
            Subdomain,
            TableKind::Node,
        ),
        b(
            "",
            "Event",
            "events",
            true,
            &["ev"],
            false,
            false,
            false,
            false,
            &[
                "involvedObject.kind",
                "involvedObject.name",
                "involvedObject.namespace",
                "involvedObject.uid",
                "reason",
                "type",
            ],
            Subdomain,
            TableKind::Generic,
        ),
        b(
            "",
            "ServiceAccount",
            "serviceaccounts",
            true,
            &["sa"],
            false,
            false,
            false,
            false,
            &[],
            Subdomain,
            TableKind::Generic,
        ),
        b(
            "apps",
            "Deployment",
            "deployments",
            true,
            &["deploy"],
            true,
            true,
            true,
            true,
            &[],
            Subdomain,
            TableKind::Deployment,
        ),
        b(
            "apps",
            "ReplicaSet",
            "replicasets",
            true,
            &["rs"],
            true,
            true,
            true,
            true,
            &["status.replicas"],
            Subdomain,
            TableKind::ReplicaSet,
        ),
        b(
            "coordination.k8s.io",
            "Lease",
            "leases",
            true,
            &[],
            false,
            false,
            false,
            false,
            &[],
            Subdomain,
            TableKind::Generic,
        ),
    ]
}

fn prefix(api_version: &str, kind: &str) -> Bytes {
    // serde_json string escaping keeps this valid JSON for any group/kind text.
    let av = Value::String(api_version.to_string());
    let k = Value::String(kind.to_string());
    Bytes::from(format!("{{\"apiVersion\":{av},\"kind\":{k}"))
}

pub(crate) fn api_version_of(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// All served resources.
#[derive(Debug)]
pub(crate) struct Registry {
    defs: Vec<Arc<ResourceDef>>,
}

impl Registry {
    /// Built-ins plus `custom`; a custom kind that collides with an existing (group, version,
    /// plural) is an error.
    pub(crate) fn new(custom: &[CustomResource]) -> Result<Self, String> {
        let mut defs: Vec<Arc<ResourceDef>> = Vec::new();
        for b in builtins() {
            let version = "v1";
            let api_version = api_version_of(b.group, version);
            defs.push(Arc::new(ResourceDef {
                idx: defs.len(),
                group: b.group.into(),
                version: version.into(),
                typemeta_prefix: prefix(&api_version, b.kind),
                api_version,
                kind: b.kind.into(),
                plural: b.plural.into(),
                singular: b.kind.to_lowercase(),
                namespaced: b.namespaced,
                short_names: b.short.iter().map(|s| s.to_string()).collect(),
                categories: if b.all { vec!["all".into()] } else { vec![] },
                status: b.status,
                scale: b.scale,
                builtin: true,
                tracks_generation: b.generation,
                field_labels: b.fields.to_vec(),
                name_rule: b.name_rule,
                table: b.table,
            }));
        }
        for c in custom {
            if c.group.is_empty()
                || c.version.is_empty()
                || c.kind.is_empty()
                || c.plural.is_empty()
            {
                return Err(format!(
                    "custom resource {c:?}: group, version, kind and plural must be set"
                ));
            }
            if c.plural.contains('/') || c.group.contains('/') || c.version.contains('/') {
                return Err(format!("custom resource {c:?}: names must not contain '/'"));
            }
            if defs
                .iter()
                .any(|d| d.group == c.group && d.version == c.version && d.plural == c.plural)
            {
                return Err(format!(
                    "custom resource {}/{} {} registered twice",
                    c.group, c.version, c.plural
                ));
            }
            let api_version = api_version_of(&c.group, &c.version);
            defs.push(Arc::new(ResourceDef {
                idx: defs.len(),
                group: c.group.clone(),
                version: c.version.clone(),
                typemeta_prefix: prefix(&api_version, &c.kind),
                api_version,
                kind: c.kind.clone(),
                plural: c.plural.clone(),
                singular: c.kind.to_lowercase(),
                namespaced: c.scope == Scope::Namespaced,
                short_names: c.short_names.clone(),
                categories: c.categories.clone(),
                status: c.status_subresource,
                scale: false,
                builtin: false,
                tracks_generation: true,
                field_labels: vec![],
                name_rule: NameRule::Subdomain,
                table: TableKind::Generic,
            }));
        }
        Ok(Self { defs })
    }

    /// Every resource, in registry order.
    pub(crate) fn all(&self) -> &[Arc<ResourceDef>] {
        &self.defs
    }

    /// The resource at (group, version, plural).
    pub(crate) fn find(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<&Arc<ResourceDef>> {
        self.defs
            .iter()
            .find(|d| d.group == group && d.version == version && d.plural == plural)
    }

    /// The resource by plural alone (first match; built-ins win), or `plural.group`.
    pub(crate) fn by_plural(&self, name: &str) -> Option<&Arc<ResourceDef>> {
        self.defs
            .iter()
            .find(|d| d.plural == name)
            .or_else(|| self.defs.iter().find(|d| d.group_resource() == name))
    }

    /// The namespaces resource (always present).
    pub(crate) fn namespaces(&self) -> Option<&Arc<ResourceDef>> {
        self.find("", "v1", "namespaces")
    }

    /// Groups other than core, with their versions, in registration order.
    pub(crate) fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for d in self.defs.iter().filter(|d| !d.group.is_empty()) {
            match groups.iter_mut().find(|(g, _)| *g == d.group) {
                Some((_, versions)) => {
                    if !versions.contains(&d.version) {
                        versions.push(d.version.clone());
                    }
                }
                None => groups.push((d.group.clone(), vec![d.version.clone()])),
            }
        }
        groups
    }

    /// Whether group/version is served.
    pub(crate) fn has_group_version(&self, group: &str, version: &str) -> bool {
        self.defs
            .iter()
            .any(|d| d.group == group && d.version == version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_kinds_may_not_collide() {
        assert!(
            Registry::new(&[CustomResource::new(
                "apps",
                "v1",
                "X",
                "deployments",
                Scope::Namespaced
            )])
            .is_err()
        );
    }
}
