//! What a request addresses, read from its path, method and query as kube-apiserver's
//! `RequestInfoFactory` reads them (`k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`):
//! discovery and OpenAPI paths, or a resource with its namespace, name, subresource and verb.

use std::sync::Arc;

use http::Method;

use super::counters::Verb;
use super::shared::Shared;
use crate::apimachinery::errors::ApiError;
use crate::apimachinery::options::parse_bool;
use crate::apimachinery::schema::ResourceDef;
use crate::apimachinery::util::Query;

/// A resource addressed by a path.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub def: Arc<ResourceDef>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
    /// Addressed through the legacy `/watch/` prefix (`/api/v1/watch/namespaces/ns/pods`):
    /// a GET there is a watch (`RequestInfoFactory` sets the verb from the prefix, which
    /// kube-apiserver still serves, deprecated).
    pub legacy_watch: bool,
}

impl Target {
    /// The name requests are counted under: the plural, or `plural/subresource`.
    pub(crate) fn counter_name(&self) -> String {
        match &self.sub {
            Some(s) => format!("{}/{s}", self.def.plural),
            None => self.def.plural.clone(),
        }
    }
}

/// What a path addresses.
pub(crate) enum Route {
    Root,
    Version,
    Health,
    Api,
    Apis,
    Group(String),
    GroupVersion(String, String),
    OpenApiV3,
    OpenApiV3Gv(String, String),
    Sim(Vec<String>),
    Resource(Target),
    Unknown,
}

/// Reads a request path (segments percent-decoded).
pub(crate) fn parse_path(shared: &Shared, path: &str) -> Route {
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(crate::apimachinery::util::percent_decode)
        .collect();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    match s.as_slice() {
        [] => Route::Root,
        ["version"] => Route::Version,
        ["healthz" | "livez" | "readyz", ..] => Route::Health,
        ["api"] => Route::Api,
        ["api", "v1"] => Route::GroupVersion(String::new(), "v1".into()),
        ["api", "v1", rest @ ..] => resource_route(shared, "", "v1", rest),
        ["apis"] => Route::Apis,
        ["apis", g] => Route::Group((*g).into()),
        ["apis", g, v] => Route::GroupVersion((*g).into(), (*v).into()),
        ["apis", g, v, rest @ ..] => resource_route(shared, g, v, rest),
        ["openapi", "v3"] => Route::OpenApiV3,
        ["openapi", "v3", "api", v] => Route::OpenApiV3Gv(String::new(), (*v).into()),
        ["openapi", "v3", "apis", g, v] => Route::OpenApiV3Gv((*g).into(), (*v).into()),
        ["sim", rest @ ..] => Route::Sim(rest.iter().map(|x| x.to_string()).collect()),
        _ => Route::Unknown,
    }
}

fn resource_route(shared: &Shared, group: &str, version: &str, rest: &[&str]) -> Route {
    let (legacy_watch, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    let reg = &shared.store.registry;
    let sub_ok = |def: &ResourceDef, sub: Option<&str>| match sub {
        None => true,
        Some("status") => def.status,
        Some("scale") => def.scale,
        Some(_) => false,
    };
    let make = |def: &Arc<ResourceDef>, ns: Option<&str>, tail: &[&str]| -> Route {
        let (name, sub) = match tail {
            [] => (None, None),
            [n] => (Some(*n), None),
            [n, s] => (Some(*n), Some(*s)),
            _ => return Route::Unknown,
        };
        if !sub_ok(def, sub) || (legacy_watch && sub.is_some()) {
            return Route::Unknown;
        }
        Route::Resource(Target {
            def: def.clone(),
            namespace: ns.map(str::to_string),
            name: name.map(str::to_string),
            sub: sub.map(str::to_string),
            legacy_watch,
        })
    };
    if let ["namespaces", ns, plural, tail @ ..] = rest
        && let Some(def) = reg.find(group, version, plural).filter(|d| d.namespaced)
    {
        return make(def, Some(ns), tail);
    }
    match rest {
        [plural, tail @ ..] => match reg.find(group, version, plural) {
            // A namespaced kind without a namespace: only the cluster-wide collection.
            Some(def) if def.namespaced => {
                if tail.is_empty() {
                    make(def, None, tail)
                } else {
                    Route::Unknown
                }
            }
            Some(def) => make(def, None, tail),
            None => Route::Unknown,
        },
        [] => Route::Unknown,
    }
}

/// The verb of a request on `t`, as RBAC names it; 405 for a method the path does not take.
pub(crate) fn verb_of(method: &Method, t: &Target, query: &Query) -> Result<Verb, ApiError> {
    let collection = t.name.is_none();
    if t.legacy_watch {
        // Only GET is served under `/watch/` (the installer registers the watch verbs only).
        return match method.as_str() {
            "GET" => Ok(Verb::Watch),
            _ => Err(ApiError::method_not_allowed()),
        };
    }
    Ok(match (method.as_str(), collection) {
        ("GET", true) if query.get("watch").is_some_and(parse_bool) => Verb::Watch,
        ("GET", true) => Verb::List,
        ("GET", false) if t.sub.is_none() && query.get("watch").is_some_and(parse_bool) => {
            Verb::Watch
        }
        ("GET", false) => Verb::Get,
        ("POST", true) if t.def.namespaced == t.namespace.is_some() => Verb::Create,
        ("PUT", false) => Verb::Update,
        ("PATCH", false) => Verb::Patch,
        // A subresource takes only the verbs its REST storage implements: `status` and
        // `scale` are getters, updaters and patchers (`pod/storage.go` `StatusREST`), so a
        // DELETE finds no route (`installer.go` registers none): 405.
        ("DELETE", false) if t.sub.is_none() => Verb::Delete,
        ("DELETE", true) if t.def.namespaced == t.namespace.is_some() => Verb::DeleteCollection,
        _ => return Err(ApiError::method_not_allowed()),
    })
}
