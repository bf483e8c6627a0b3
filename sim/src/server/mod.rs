//! The HTTP server: accept loop, routing, and the handlers for discovery and resources.

pub(crate) mod counters;
pub(crate) mod faults;
pub(crate) mod openapi;
pub(crate) mod protobuf;
pub(crate) mod response;
pub(crate) mod shared;
pub(crate) mod table;
pub(crate) mod watch;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, Method, Request, Response, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use tokio::task::JoinSet;

use crate::apimachinery::errors::{ApiError, FieldError};
use crate::apimachinery::options::{ListOptions, parse_bool};
use crate::apimachinery::schema::ResourceDef;
use crate::apimachinery::selector::{FieldSelector, LabelSelector};
use crate::apimachinery::util::Query;
use crate::harness::churn::{ChurnConfig, ChurnHandle};
use crate::registry::generic::{self as ops, DeleteOptions, Part, PatchKind};
use crate::server::counters::Verb;
use crate::server::faults::{Count, ExpireMode, WatchFault};
use crate::server::response::{self as resp, Body, BodyError};
use crate::server::shared::{Repr, Shared, matches};
use crate::server::table::IncludeObject;
use crate::server::watch::{self as watchstream, Start, WatchParams};
use crate::storage::object::{StoredObject, strip_rv};
use crate::storage::store::{ObjectMap, Outcome};

/// Accepts connections until `shutdown` fires (or its sender is dropped), then aborts them all.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let shared = shared.clone();
                    conns.spawn(async move {
                        let svc = service_fn(move |req| handle(shared.clone(), req));
                        // No header-read timeout: kube-apiserver keeps idle keep-alive
                        // connections open, and closing them races with clients reusing them.
                        let conn = http1::Builder::new()
                            .timer(TokioTimer::new())
                            .header_read_timeout(None)
                            .serve_connection(TokioIo::new(stream), svc);
                        if let Err(e) = conn.await {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            },
            _ = shutdown.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.abort_all();
    while conns.join_next().await.is_some() {}
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let uri = req.uri().clone();
    let r = match route(&shared, req).await {
        Ok(r) => r,
        Err(e) => resp::error(&e),
    };
    tracing::debug!(%method, %uri, status = r.status().as_u16(), "request");
    Ok(r)
}

/// A resource addressed by a path.
#[derive(Debug, Clone)]
struct Target {
    def: Arc<ResourceDef>,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

impl Target {
    fn counter_name(&self) -> String {
        match &self.sub {
            Some(s) => format!("{}/{s}", self.def.plural),
            None => self.def.plural.clone(),
        }
    }
}

enum Route {
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

fn parse_path(shared: &Shared, path: &str) -> Route {
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
        if !sub_ok(def, sub) {
            return Route::Unknown;
        }
        Route::Resource(Target {
            def: def.clone(),
            namespace: ns.map(str::to_string),
            name: name.map(str::to_string),
            sub: sub.map(str::to_string),
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

async fn read_body(
    shared: &Shared,
    headers: &HeaderMap,
    body: Incoming,
) -> Result<Bytes, ApiError> {
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        && len > shared.max_body
    {
        return Err(ApiError::too_large(shared.max_body));
    }
    match Limited::new(body, shared.max_body).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            Err(ApiError::too_large(shared.max_body))
        }
        Err(e) => Err(ApiError::bad_request(format!(
            "error reading the request body: {e}"
        ))),
    }
}

fn parse_json_body(b: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(b).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

/// The body of a create or update as JSON: JSON as is, or kube's protobuf decoded for the
/// built-in kinds kubectl sends that way (`crate::server::protobuf`). Follows
/// `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go` (`createHandler`):
/// `negotiation.NegotiateInputSerializer` answers an unknown content type with
/// `NewUnsupportedMediaTypeError` (415), a body that does not decode is a 400 worded by
/// `transformDecodeError`.
async fn body_value(
    shared: &Shared,
    headers: &HeaderMap,
    def: &ResourceDef,
    body: Incoming,
) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let base = ct.split(';').next().unwrap_or("").trim();
    if base.is_empty() || base == "application/json" || base == "*/*" {
        return parse_json_body(&read_body(shared, headers, body).await?);
    }
    let decodes = crate::server::protobuf::decodes(&def.api_version, &def.kind);
    if !crate::server::protobuf::is_protobuf(base) || !decodes {
        return Err(unsupported_body(decodes, None));
    }
    let b = read_body(shared, headers, body).await?;
    crate::server::protobuf::decode(&b).map_err(|f| {
        use crate::server::protobuf::ProtobufError as P;
        match (f.gvk, f.error) {
            (_, e @ (P::UnsupportedField { .. } | P::UnsupportedKind(_))) => {
                unsupported_body(true, Some(&e.to_string()))
            }
            (Some((api_version, kind)), e) => {
                let version = api_version.rsplit('/').next().unwrap_or("");
                ApiError::bad_request(format!(
                    "{kind} in version {version:?} cannot be handled as a {}: {e}",
                    def.kind
                ))
            }
            (None, e) => ApiError::bad_request(format!(
                "the object provided is unrecognized (must be of type {}): {e} ({})",
                def.kind,
                summarize(&b)
            )),
        }
    })
}

/// `summarizeData(body, 30)` of `create.go`: JSON-looking data as text, else hex.
fn summarize(b: &[u8]) -> String {
    const MAX: usize = 30;
    let cut = &b[..b.len().min(MAX)];
    let more = if b.len() > MAX { " ..." } else { "" };
    match b.first() {
        None => "<empty>".into(),
        Some(b'{') => format!("{}{more}", String::from_utf8_lossy(cut)),
        Some(_) => {
            let hex: String = cut.iter().map(|x| format!("{x:02x}")).collect();
            format!("{hex}{more}")
        }
    }
}

/// 415 as `negotiation.NewUnsupportedMediaTypeError` words it (the accepted types the sim
/// decodes for this kind), with the sim's reason when a protobuf body holds what it does not
/// decode.
fn unsupported_body(protobuf: bool, why: Option<&str>) -> ApiError {
    let accepted = if protobuf {
        "application/json, application/vnd.kubernetes.protobuf"
    } else {
        "application/json"
    };
    let mut msg = format!(
        "the body of the request was in an unknown format - accepted media types include: {accepted}"
    );
    if let Some(why) = why {
        msg.push_str(&format!(" ({why})"));
    }
    ApiError::new(415, "UnsupportedMediaType", msg)
}

fn negotiate(headers: &HeaderMap, query: &Query) -> Result<Repr, ApiError> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Ok(Repr::Object);
    };
    if accept.trim().is_empty() {
        return Ok(Repr::Object);
    }
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let base = parts.next().unwrap_or("");
        if !matches!(base, "application/json" | "*/*" | "application/*") {
            continue;
        }
        let params: BTreeMap<&str, &str> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim()))
            .collect();
        match params.get("as").copied() {
            None => return Ok(Repr::Object),
            Some("Table") => {
                return Ok(Repr::Table(IncludeObject::parse(
                    query.get("includeObject"),
                )));
            }
            Some("PartialObjectMetadata" | "PartialObjectMetadataList") => {
                return Ok(Repr::Metadata);
            }
            Some(_) => continue,
        }
    }
    Err(ApiError::new(
        406,
        "NotAcceptable",
        format!("only the following media types are accepted: application/json (got {accept:?})"),
    ))
}

async fn route(shared: &Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let (parts, body) = req.into_parts();
    let query = Query::parse(parts.uri.query());
    let method = parts.method.clone();
    let reg = &shared.store.registry;
    let get_only = |v: Value| {
        if method == Method::GET {
            Ok(resp::json(200, &v))
        } else {
            Err(ApiError::method_not_allowed())
        }
    };
    match parse_path(shared, parts.uri.path()) {
        Route::Root => get_only(
            json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/openapi/v3", "/readyz", "/version"]}),
        ),
        Route::Version => get_only(json!({
            "major": "1",
            "minor": "32",
            "gitVersion": "v1.32.0-kinformer-sim",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2025-01-01T00:00:00Z",
            "goVersion": "go1.23.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        })),
        Route::Health => Ok(resp::full(
            200,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"ok"),
        )),
        Route::Api => get_only(reg.api_versions(&shared.server_address)),
        Route::Apis => get_only(reg.api_group_list()),
        Route::Group(g) => reg
            .api_group(&g)
            .map_or_else(|| Err(ApiError::unknown_path()), get_only),
        Route::GroupVersion(g, v) => reg
            .api_resource_list(&g, &v)
            .map_or_else(|| Err(ApiError::unknown_path()), get_only),
        Route::OpenApiV3 => get_only(crate::server::openapi::root(reg)),
        Route::OpenApiV3Gv(g, v) => crate::server::openapi::group_version(reg, &g, &v)
            .map_or_else(|| Err(ApiError::unknown_path()), get_only),
        Route::Sim(rest) => control(shared, &method, &rest, &query),
        Route::Unknown => Err(ApiError::unknown_path()),
        Route::Resource(t) => resource(shared, &method, &parts.headers, &query, t, body).await,
    }
}

fn verb_of(method: &Method, t: &Target, query: &Query) -> Result<Verb, ApiError> {
    let collection = t.name.is_none();
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
        ("DELETE", false) => Verb::Delete,
        ("DELETE", true) if t.def.namespaced == t.namespace.is_some() => Verb::DeleteCollection,
        _ => return Err(ApiError::method_not_allowed()),
    })
}

/// The write options of a create, update or patch, validated as the handlers do
/// (`staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go`:
/// `ValidateCreateOptions`, `ValidateUpdateOptions`, `ValidatePatchOptions`, answered with a
/// `422` naming `CreateOptions.meta.k8s.io` and so on): whether the write is a dry run.
fn write_options(
    query: &Query,
    kind: &'static str,
    patch: Option<PatchKind>,
) -> Result<bool, ApiError> {
    let manager = query.get("fieldManager").unwrap_or("");
    let mut errs = Vec::new();
    match patch {
        Some(PatchKind::Apply) if manager.is_empty() => {
            errs.push(FieldError::required(
                "fieldManager",
                "is required for apply patch",
            ));
        }
        Some(PatchKind::Apply) | None => {}
        Some(_) => {
            if query.get("force").is_some() {
                errs.push(FieldError::forbidden(
                    "force",
                    "may not be specified for non-apply patch",
                ));
            }
        }
    }
    errs.extend(field_manager_errors(manager));
    let dry_run = ops::query_dry_run(query);
    errs.extend(ops::dry_run_errors(&dry_run));
    let validation = query.get("fieldValidation").unwrap_or("");
    if !matches!(validation, "" | "Ignore" | "Warn" | "Strict") {
        errs.push(FieldError::not_supported(
            "fieldValidation",
            validation,
            &["", "Ignore", "Strict", "Warn"],
        ));
    }
    if errs.is_empty() {
        Ok(!dry_run.is_empty())
    } else {
        Err(ApiError::invalid_options(kind, &errs))
    }
}

/// `ValidateFieldManager`
/// (`staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go`): at most
/// 128 bytes, and every character printable by `unicode.IsPrint`, one error per other
/// character with its `%#U` form and byte position.
fn field_manager_errors(manager: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if manager.len() > 128 {
        errs.push(FieldError::too_long("fieldManager", 128));
    }
    for (i, c) in manager.char_indices() {
        if !crate::apimachinery::errors::go_is_print(c) {
            // `%#U` adds the quoted character only when it is printable, never here.
            let why = format!("invalid character U+{:04X} (at position {i})", c as u32);
            errs.push(FieldError::invalid("fieldManager", manager, why));
        }
    }
    errs
}

async fn resource(
    shared: &Arc<Shared>,
    method: &Method,
    headers: &HeaderMap,
    query: &Query,
    t: Target,
    body: Incoming,
) -> Result<Response<Body>, ApiError> {
    let verb = verb_of(method, &t, query)?;
    shared.requests.record(&t.counter_name(), verb);
    if let Some(e) = shared.faults.take_failure(&t.counter_name(), verb) {
        return Err(e);
    }
    let def = t.def.clone();
    let ns = t.namespace.as_deref();
    let part = match t.sub.as_deref() {
        Some("status") => Part::Status,
        Some("scale") => Part::Scale,
        _ => Part::Main,
    };
    let store = &shared.store;
    match verb {
        Verb::List => {
            let repr = negotiate(headers, query)?;
            list(shared, &t, query, repr).await
        }
        Verb::Watch => {
            let repr = negotiate(headers, query)?;
            watch(shared, &t, query, repr).await
        }
        Verb::Get => {
            let repr = negotiate(headers, query)?;
            if let Some(rv) = query.non_empty("resourceVersion")
                && rv != "0"
            {
                // `Cacher.Get` serves a get at a resourceVersion from the watch cache,
                // `WaitUntilFreshAndGet` (`staging/src/k8s.io/apiserver/pkg/storage/cacher/`).
                wait_until_fresh(shared, parse_rv(rv)?).await?;
            }
            let name = t.name.as_deref().unwrap_or("");
            let obj = store
                .get(&def, &ops::key_of(&def, ns, name))
                .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))?;
            if part == Part::Scale {
                return Ok(resp::json(200, &ops::scale_of(&def, &obj.to_value(&def)?)));
            }
            render_one(&def, &obj, repr, 200)
        }
        Verb::Create => {
            let dry_run = write_options(query, "CreateOptions", None)?;
            let v = body_value(shared, headers, &def, body).await?;
            let obj = ops::create(store, &def, ns, v, dry_run, shared.auto_namespaces)?;
            render_one(&def, &obj, Repr::Object, 201)
        }
        Verb::Update => {
            let dry_run = write_options(query, "UpdateOptions", None)?;
            let v = body_value(shared, headers, &def, body).await?;
            let name = t.name.as_deref().unwrap_or("");
            let obj = ops::update(store, &def, ns, name, part, v, dry_run)?;
            render_part(&def, &obj, part)
        }
        Verb::Patch => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let kind =
                PatchKind::from_content_type(ct).ok_or_else(|| ApiError::unsupported_media(ct))?;
            let dry_run = write_options(query, "PatchOptions", Some(kind))?;
            let b = read_body(shared, headers, body).await?;
            let name = t.name.as_deref().unwrap_or("");
            let obj = ops::patch(
                store,
                &def,
                ns,
                name,
                part,
                kind,
                &b,
                dry_run,
                shared.auto_namespaces,
                query
                    .non_empty("fieldManager")
                    .map(|m| (m, query.get("force").is_some_and(parse_bool))),
            )?;
            render_part(&def, &obj, part)
        }
        Verb::Delete => {
            let b = read_body(shared, headers, body).await?;
            let opts = DeleteOptions::from_request(&b, query)?;
            let name = t.name.as_deref().unwrap_or("");
            match ops::delete(store, &def, ns, name, &opts)? {
                Outcome::Created(o)
                | Outcome::Updated(o)
                | Outcome::Deleted(o)
                | Outcome::Unchanged(Some(o)) => render_one(&def, &o, Repr::Object, 200),
                Outcome::Unchanged(None) => Err(ApiError::not_found(&def.group, &def.plural, name)),
            }
        }
        Verb::DeleteCollection => {
            // handlers/delete.go DeleteCollection: the list options are decoded (400) and
            // validated (422 ListOptions) before the delete options.
            ListOptions::parse(query, false)?;
            let b = read_body(shared, headers, body).await?;
            let opts = DeleteOptions::from_request(&b, query)?;
            let labels = parse_labels(query)?;
            let fields = parse_fields(&def, query)?;
            let (map, _) = store.snapshot(&def, false);
            let mut deleted = Vec::new();
            for obj in select(&map, ns, &labels, &fields, None) {
                if let Ok(Outcome::Deleted(o) | Outcome::Updated(o)) =
                    ops::delete(store, &def, ns, &obj.name, &opts)
                {
                    deleted.push(o);
                }
            }
            let rv = store.resource_version();
            Ok(render_list_full(&def, deleted, rv, None, None, false))
        }
    }
}

fn render_part(
    def: &ResourceDef,
    obj: &StoredObject,
    part: Part,
) -> Result<Response<Body>, ApiError> {
    if part == Part::Scale {
        return Ok(resp::json(200, &ops::scale_of(def, &obj.to_value(def)?)));
    }
    render_one(def, obj, Repr::Object, 200)
}

fn render_one(
    def: &ResourceDef,
    obj: &StoredObject,
    repr: Repr,
    code: u16,
) -> Result<Response<Body>, ApiError> {
    Ok(match repr {
        Repr::Object => resp::json_bytes(code, obj.full_bytes(def)),
        Repr::Metadata => resp::json(code, &table::partial_metadata(&obj.to_value(def)?)),
        Repr::Table(inc) => resp::json(
            code,
            &table::table(def, &[obj.to_value(def)?], obj.rv, None, inc),
        ),
    })
}

fn parse_labels(query: &Query) -> Result<LabelSelector, ApiError> {
    LabelSelector::parse(query.get("labelSelector").unwrap_or("")).map_err(ApiError::bad_request)
}

fn parse_fields(def: &ResourceDef, query: &Query) -> Result<FieldSelector, ApiError> {
    FieldSelector::parse(query.get("fieldSelector").unwrap_or(""), &def.field_labels)
        .map_err(ApiError::bad_request)
}

/// Objects of `map` in scope, in key order, strictly after `after`.
fn select<'a>(
    map: &'a ObjectMap,
    ns: Option<&'a str>,
    labels: &'a LabelSelector,
    fields: &'a FieldSelector,
    after: Option<(String, String)>,
) -> impl Iterator<Item = Arc<StoredObject>> + 'a {
    let lower = match (after, ns) {
        (Some(k), _) => Bound::Excluded(k),
        (None, Some(n)) => Bound::Included((n.to_string(), String::new())),
        (None, None) => Bound::Unbounded,
    };
    map.range((lower, Bound::Unbounded))
        .take_while(move |(k, _)| ns.is_none_or(|n| k.0 == n))
        .filter(move |(_, o)| matches(o, ns, labels, fields))
        .map(|(_, o)| o.clone())
}

/// `storage.EncodeContinue` (`staging/src/k8s.io/apiserver/pkg/storage/continue.go`): the JSON
/// `{"v","rv","start"}` in that order, base64 URL-safe without padding, `start` being the next
/// key relative to the list's prefix (the name in a namespaced list, `namespace/name` in one
/// across namespaces) plus a NUL, the smallest key after it.
fn encode_continue(rv: u64, last: &StoredObject, namespaced_request: bool) -> String {
    let start = if namespaced_request || last.namespace.is_empty() {
        format!("{}\u{0}", last.name)
    } else {
        format!("{}/{}\u{0}", last.namespace, last.name)
    };
    let start = serde_json::to_string(&start).unwrap_or_default();
    let token = format!(r#"{{"v":"meta.k8s.io/v1","rv":{rv},"start":{start}}}"#);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token)
}

/// `storage.DecodeContinue` with the errors `storage.ValidateListOptions` answers (400
/// `invalid continue token: continue key is not valid...`); `ns` is the request's namespace.
fn decode_continue(token: &str, ns: Option<&str>) -> Result<(u64, (String, String)), ApiError> {
    let bad = |why: String| {
        ApiError::bad_request(format!(
            "invalid continue token: continue key is not valid{why}"
        ))
    };
    // base64.RawURLEncoding: Go reports the first byte it cannot use.
    let alphabet = |c: u8| c.is_ascii_alphanumeric() || c == b'-' || c == b'_';
    if let Some(i) = token.bytes().position(|c| !alphabet(c)) {
        return Err(bad(format!(": illegal base64 data at input byte {i}")));
    }
    if token.len() % 4 == 1 {
        return Err(bad(format!(
            ": illegal base64 data at input byte {}",
            token.len() - 1
        )));
    }
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|e| bad(format!(": {e}")))?;
    let v: Value = serde_json::from_slice(&raw).map_err(|e| bad(format!(": {e}")))?;
    if v.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
        let version = v.get("v").and_then(Value::as_str).unwrap_or("");
        return Err(bad(format!(
            ": server does not recognize this encoded version {version}"
        )));
    }
    let rv = v.get("rv").and_then(Value::as_u64).unwrap_or(0);
    if rv == 0 {
        return Err(bad(
            ": incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into(),
        ));
    }
    let start = v.get("start").and_then(Value::as_str).unwrap_or("");
    if start.is_empty() {
        return Err(bad(
            ": encoded start key empty (version meta.k8s.io/v1)".into()
        ));
    }
    let start = start.trim_end_matches('\u{0}');
    let key = match (ns, start.split_once('/')) {
        (Some(ns), _) => (ns.to_string(), start.to_string()),
        (None, Some((ns, name))) => (ns.to_string(), name.to_string()),
        (None, None) => (String::new(), start.to_string()),
    };
    Ok((rv, key))
}

/// `APIObjectVersioner.ParseResourceVersion`
/// (`staging/src/k8s.io/apiserver/pkg/storage/api_object_versioner.go`): a `storage.InvalidError`
/// over `strconv.ParseUint`'s error. The watch cache (gets, unpaged lists, watches) returns it
/// unconverted, which the handlers answer as a 500 without a reason (kubernetes issue 139485).
fn parse_rv(s: &str) -> Result<u64, ApiError> {
    parse_uint(s).map_err(|why| ApiError::new(500, "", why))
}

/// The same parse where etcd serves the read (paged and `Exact` lists):
/// `storage.ValidateListOptions` wraps it in a 400 "invalid resource version: ...".
fn parse_rv_etcd(s: &str) -> Result<u64, ApiError> {
    parse_uint(s).map_err(|why| ApiError::bad_request(format!("invalid resource version: {why}")))
}

/// `strconv.ParseUint(s, 10, 64)` (no sign accepted), its error as the field error prints it.
fn parse_uint(s: &str) -> Result<u64, String> {
    // Rust's parse takes a leading `+`, Go's ParseUint does not (even before an overflow).
    let why = match s.parse::<u64>() {
        _ if s.starts_with('+') => "invalid syntax",
        Ok(n) => return Ok(n),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => "value out of range",
        Err(_) => "invalid syntax",
    };
    let q = crate::apimachinery::errors::go_quote(s);
    Err(format!(
        "resourceVersion: Invalid value: {q}: strconv.ParseUint: parsing {q}: {why}"
    ))
}

/// Waits until the store has reached resourceVersion `target` or `shared.rv_wait` passed, as
/// the watch cache does before serving a read at a resourceVersion it has not seen
/// (`staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go`, `waitUntilFreshAndBlock`:
/// `blockTimeout` of 3 s, then `storage.NewTooLargeResourceVersionError(rv, current,
/// resourceVersionTooHighRetrySeconds = 1)`).
async fn wait_until_fresh(shared: &Shared, target: u64) -> Result<(), ApiError> {
    let store = &shared.store;
    if store.resource_version() >= target {
        return Ok(());
    }
    // Subscribe before re-reading the RV, so that no write between the two is missed.
    let mut rxs: Vec<tokio::sync::watch::Receiver<u64>> = (0..store.registry.all().len())
        .filter_map(|i| store.subscribe(i))
        .collect();
    let deadline = tokio::time::Instant::now() + shared.rv_wait;
    loop {
        let current = store.resource_version();
        if current >= target {
            return Ok(());
        }
        let any_change = async {
            if rxs.is_empty() {
                futures::future::pending::<()>().await;
            }
            let (r, _, _) =
                futures::future::select_all(rxs.iter_mut().map(|r| Box::pin(r.changed()))).await;
            if r.is_err() {
                // The store outlives every request; never spin on a closed channel.
                futures::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = any_change => {}
            _ = tokio::time::sleep_until(deadline) => {
                let current = store.resource_version();
                if current >= target {
                    return Ok(());
                }
                return Err(ApiError::too_large_resource_version(target, current, 1));
            }
        }
    }
}

/// The error etcd gives for a read at a future revision, which the apiserver passes through
/// unconverted (`staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go`, `GetList`:
/// `interpretListError` converts only compaction errors; `ErrorToAPIStatus` makes any other
/// error a 500 with reason `Unknown`, i.e. none).
fn future_revision() -> ApiError {
    ApiError::new(
        500,
        "",
        "etcdserver: mvcc: required revision is a future revision",
    )
}

async fn list(
    shared: &Arc<Shared>,
    t: &Target,
    query: &Query,
    repr: Repr,
) -> Result<Response<Body>, ApiError> {
    let def = &t.def;
    let store = &shared.store;
    // ListResource: DecodeParameters (400), then ValidateListOptions (422).
    let opts = ListOptions::decode(query, false)?;
    let labels = parse_labels(query)?;
    let fields = parse_fields(def, query)?;
    let errs = opts.errors();
    if !errs.is_empty() {
        return Err(ApiError::invalid_list_options(&errs));
    }
    let limit = (opts.limit > 0).then(|| usize::try_from(opts.limit).unwrap_or(usize::MAX));
    let rv = opts.resource_version.as_str();
    let rvm = opts.resource_version_match.as_str();
    let cont = (!opts.continue_token.is_empty()).then_some(opts.continue_token.as_str());
    // Which store serves the list, as `shouldDelegateList` decides
    // (`staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go`): continuations, limits
    // (except at RV 0) and `Exact` go to etcd, the rest to the watch cache.
    let from_etcd = cont.is_some() || (limit.is_some() && rv != "0") || rvm == "Exact";
    let requested = if rv.is_empty() || rv == "0" {
        None
    } else if from_etcd {
        Some(parse_rv_etcd(rv)?)
    } else {
        Some(parse_rv(rv)?)
    };
    if let Some(n) = requested {
        let current = store.resource_version();
        if n > current {
            if !from_etcd {
                wait_until_fresh(shared, n).await?;
            } else if cont.is_none() && rvm == "NotOlderThan" {
                // etcd3 store `validateMinimumResourceVersion`: no wait, retry 0.
                return Err(ApiError::too_large_resource_version(n, current, 0));
            } else if cont.is_none() {
                // `Exact`, or the legacy unset match with a limit (read at exactly that revision).
                return Err(future_revision());
            }
        }
    }
    let (map, list_rv, after, limit) = if let Some(token) = cont {
        if requested.is_some() {
            // `storage.ValidateListOptions` (`staging/src/k8s.io/apiserver/pkg/storage/util.go`).
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let (trv, key) = decode_continue(token, t.namespace.as_deref())?;
        match store.snapshot_at(def, trv) {
            Ok(map) => (map, trv, Some(key), limit),
            Err(_) => {
                shared.faults.bump(Count::ExpiredContinues);
                return Err(ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                ));
            }
        }
    } else if rvm == "Exact" {
        let n = parse_rv_etcd(rv)?;
        match store.snapshot_at(def, n) {
            Ok(map) => (map, n, None, limit),
            Err(e) => {
                return Err(ApiError::expired(format!(
                    "too old resource version: {n} ({})",
                    e.oldest
                )));
            }
        }
    } else if rv == "0" {
        // Served from the watch cache: whole, limit ignored (like kube-apiserver).
        let (map, cur) = store.snapshot(def, false);
        (map, cur, None, None)
    } else {
        let (map, cur) = store.snapshot(def, limit.is_some());
        (map, cur, None, limit)
    };
    let mut it = select(&map, t.namespace.as_deref(), &labels, &fields, after);
    let mut items: Vec<Arc<StoredObject>> = match limit {
        Some(l) => it.by_ref().take(l).collect(),
        None => it.by_ref().collect(),
    };
    let mut continue_token = None;
    let mut remaining = None;
    if limit.is_some() {
        let rest = it.count();
        if rest > 0
            && let Some(last) = items.last()
        {
            continue_token = Some(encode_continue(list_rv, last, t.namespace.is_some()));
            if labels.is_empty() && fields.is_empty() {
                remaining = Some(rest);
            }
        }
    }
    // Tables (kubectl's output) are left alone.
    let strip = shared.faults.strips_resource_versions() && !matches!(repr, Repr::Table(_));
    if strip {
        shared.faults.stripped(items.len());
    }
    match repr {
        Repr::Object => Ok(render_list_full(
            def,
            std::mem::take(&mut items),
            list_rv,
            continue_token,
            remaining,
            strip,
        )),
        Repr::Metadata => {
            let items: Vec<Value> = items
                .iter()
                .map(|o| {
                    o.to_value(def).map(|v| {
                        let mut m = table::partial_metadata(&v);
                        if strip {
                            strip_rv(&mut m);
                        }
                        m
                    })
                })
                .collect::<Result<_, _>>()?;
            let mut meta = json!({"resourceVersion": list_rv.to_string()});
            if let (Some(c), Some(m)) = (&continue_token, meta.as_object_mut()) {
                m.insert("continue".into(), json!(c));
            }
            Ok(resp::json(
                200,
                &json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": items}),
            ))
        }
        Repr::Table(inc) => {
            let objs: Vec<Value> = items
                .iter()
                .map(|o| o.to_value(def))
                .collect::<Result<_, _>>()?;
            Ok(resp::json(
                200,
                &table::table(def, &objs, list_rv, continue_token.as_deref(), inc),
            ))
        }
    }
}

const LIST_CHUNK: usize = 256 * 1024;

/// Appends a list item, without its resourceVersion when `strip`.
fn write_item(def: &ResourceDef, o: &StoredObject, strip: bool, out: &mut BytesMut) {
    if strip {
        o.write_without_rv(def, true, out);
    } else {
        o.write_list_item(def, out);
    }
}

/// A list response streamed in chunks from pre-serialized items (items without their
/// resourceVersion when `strip`).
fn render_list_full(
    def: &Arc<ResourceDef>,
    items: Vec<Arc<StoredObject>>,
    rv: u64,
    cont: Option<String>,
    remaining: Option<usize>,
    strip: bool,
) -> Response<Body> {
    let mut meta = serde_json::Map::new();
    meta.insert("resourceVersion".into(), json!(rv.to_string()));
    if let Some(c) = cont {
        meta.insert("continue".into(), json!(c));
    }
    if let Some(r) = remaining {
        meta.insert("remainingItemCount".into(), json!(r));
    }
    let header = format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[",
        Value::String(def.list_kind()),
        Value::String(def.api_version.clone()),
        Value::Object(meta)
    );
    let total: usize = items.iter().map(|o| o.len() + 1).sum::<usize>() + header.len() + 2;
    let def = def.clone();
    if total <= LIST_CHUNK {
        let mut out = BytesMut::with_capacity(total);
        out.put_slice(header.as_bytes());
        for (i, o) in items.iter().enumerate() {
            if i > 0 {
                out.put_u8(b',');
            }
            write_item(&def, o, strip, &mut out);
        }
        out.put_slice(b"]}");
        return resp::json_bytes(200, out.freeze());
    }
    struct St {
        def: Arc<ResourceDef>,
        items: Vec<Arc<StoredObject>>,
        pos: usize,
        header: Option<String>,
        done: bool,
        strip: bool,
    }
    let st = St {
        def,
        items,
        pos: 0,
        header: Some(header),
        done: false,
        strip,
    };
    let s = futures::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        let mut out = BytesMut::with_capacity(LIST_CHUNK + 8192);
        if let Some(h) = st.header.take() {
            out.put_slice(h.as_bytes());
        }
        while st.pos < st.items.len() && out.len() < LIST_CHUNK {
            if st.pos > 0 {
                out.put_u8(b',');
            }
            write_item(&st.def, &st.items[st.pos], st.strip, &mut out);
            st.pos += 1;
        }
        if st.pos >= st.items.len() {
            out.put_slice(b"]}");
            st.done = true;
        }
        Some((Ok::<Bytes, BodyError>(out.freeze()), st))
    });
    resp::stream(200, s)
}

async fn watch(
    shared: &Arc<Shared>,
    t: &Target,
    query: &Query,
    repr: Repr,
) -> Result<Response<Body>, ApiError> {
    let def = t.def.clone();
    // ListResource: DecodeParameters (400), then ValidateListOptions (422).
    let mut opts = ListOptions::decode(query, true)?;
    let labels = parse_labels(query)?;
    let mut fields = parse_fields(&def, query)?;
    if let Some(name) = &t.name {
        // The legacy single-object watch path: a watch filtered to that name.
        fields = fields.and_name(name);
    }
    if opts.send_initial_events == Some(true) && shared.faults.rejects_watch_list() {
        shared.faults.bump(Count::WatchListsRejected);
        return Err(ApiError::watch_list_forbidden());
    }
    if shared.faults.ignores_watch_list() {
        // A server that predates watch-list knows neither parameter.
        if opts.send_initial_events == Some(true) {
            shared.faults.bump(Count::WatchListsIgnored);
        }
        opts.send_initial_events = None;
        opts.resource_version_match.clear();
    }
    let errs = opts.errors();
    if !errs.is_empty() {
        return Err(ApiError::invalid_list_options(&errs));
    }
    let rv = opts.resource_version.as_str();
    let bookmarks = opts.allow_watch_bookmarks;
    // `timeoutSeconds=0` (or unset) leaves the server's own (long) timeout; a negative one has
    // already expired.
    let timeout = match opts.timeout_seconds {
        None | Some(0) => None,
        Some(s) => Some(Duration::from_secs(u64::try_from(s).unwrap_or(0))),
    };
    let start = match opts.send_initial_events {
        Some(true) => {
            if !rv.is_empty() && rv != "0" {
                // A watch-list at an RV the cache has not reached waits for it
                // (`staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go`,
                // `waitUntilWatchCacheFreshAndForceAllEvents`); when the wait fails,
                // `Cacher.Watch` returns `newErrWatcher(err), nil`: the watch is served (200)
                // and its only event is an ERROR carrying the 504 Status.
                if let Err(e) = wait_until_fresh(shared, parse_rv(rv)?).await {
                    return Ok(resp::stream(
                        200,
                        futures::stream::iter([Ok::<Bytes, BodyError>(watchstream::error_line(
                            &e,
                        ))]),
                    ));
                }
            }
            // The `k8s.io/initial-events-end` bookmark goes only to a client that asked for
            // bookmarks (`Cacher.Watch`: `setBookmarkAfterResourceVersion` under
            // `opts.Predicate.AllowWatchBookmarks`).
            Start::Initial {
                end_bookmark: bookmarks,
            }
        }
        Some(false) | None => {
            if rv.is_empty() || rv == "0" {
                if opts.send_initial_events == Some(false) {
                    Start::FromRv(shared.store.resource_version())
                } else {
                    Start::Initial {
                        end_bookmark: false,
                    }
                }
            } else {
                // A plain watch from an RV the server has not reached starts at once and sends
                // the events after it (`Cacher.Watch` does not wait:
                // `watchCache.getAllEventsSinceLocked` only rejects RVs that are too old).
                Start::FromRv(parse_rv(rv)?)
            }
        }
    };
    match shared.faults.watch_fault() {
        None => {}
        Some(WatchFault::EndAtOnce) => {
            shared.faults.bump(Count::WatchesEndedAtOnce);
            return Ok(resp::stream(
                200,
                futures::stream::empty::<Result<Bytes, BodyError>>(),
            ));
        }
        Some(WatchFault::Expire(mode)) => {
            shared.faults.bump(Count::WatchesRefusedExpired);
            let e = ApiError::expired(format!(
                "too old resource version: {rv} (injected by kinformer-sim)"
            ));
            return match mode {
                ExpireMode::Http => Err(e),
                ExpireMode::ErrorEvent => Ok(resp::stream(
                    200,
                    futures::stream::iter([Ok::<Bytes, BodyError>(watchstream::error_line(&e))]),
                )),
            };
        }
    }
    let params = WatchParams {
        def,
        namespace: t.namespace.clone(),
        labels,
        fields,
        start,
        bookmarks,
        timeout,
        repr,
    };
    Ok(resp::stream(
        200,
        watchstream::stream(shared.clone(), params),
    ))
}

fn control(
    shared: &Arc<Shared>,
    method: &Method,
    rest: &[String],
    query: &Query,
) -> Result<Response<Body>, ApiError> {
    let faults = shared.faults_handle();
    let ok = |v: Value| Ok(resp::json(200, &v));
    let n = || {
        query
            .get("n")
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(1)
    };
    let code = || {
        query
            .get("code")
            .and_then(|v| v.parse::<u16>().ok())
            .unwrap_or(500)
    };
    let retry = || {
        query
            .get("retryAfter")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(1)
    };
    let on = || !matches!(query.get("on"), Some("false" | "0"));
    let r: Vec<&str> = rest.iter().map(String::as_str).collect();
    let post = *method == Method::POST;
    let get = *method == Method::GET;
    match r.as_slice() {
        ["faults"] if get => ok(json!(faults.counters())),
        ["faults", "drop-watches"] if post => {
            faults.drop_watches();
            ok(json!({"ok": true}))
        }
        ["faults", "fail-lists"] if post => {
            faults.fail_next(
                query.non_empty("resource"),
                Verb::List,
                n(),
                code(),
                retry(),
            );
            ok(json!({"ok": true}))
        }
        ["faults", "fail-watches"] if post => {
            faults.fail_next(
                query.non_empty("resource"),
                Verb::Watch,
                n(),
                code(),
                retry(),
            );
            ok(json!({"ok": true}))
        }
        ["faults", "fail"] if post => {
            let verb = Verb::parse(query.get("verb").unwrap_or("")).ok_or_else(|| ApiError::bad_request("verb must be one of list, watch, get, create, update, patch, delete, deletecollection"))?;
            faults.fail_next(query.non_empty("resource"), verb, n(), code(), retry());
            ok(json!({"ok": true}))
        }
        ["faults", "expire-watches"] if post => {
            faults.expire_watches();
            ok(json!({"ok": true}))
        }
        ["faults", "compact"] if post => {
            ok(json!({"resourceVersion": faults.compact().to_string()}))
        }
        ["faults", "malformed-next-event"] if post => {
            match query.non_empty("resource") {
                Some(r) => faults.malformed_next_event_of(r),
                None => faults.malformed_next_event(),
            }
            ok(json!({"ok": true}))
        }
        ["faults", "close-mid-object-next"] if post => {
            match query.non_empty("resource") {
                Some(r) => faults.close_mid_object_next_of(r),
                None => faults.close_mid_object_next(),
            }
            ok(json!({"ok": true}))
        }
        ["faults", "slow-watches"] if post => {
            let ms = query
                .get("perEventMs")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            faults.slow_watches(if ms == 0 {
                None
            } else {
                Some(Duration::from_millis(ms))
            });
            ok(json!({"ok": true}))
        }
        ["faults", "stall-watches"] if post => {
            faults.stall_watches(on());
            ok(json!({"ok": true}))
        }
        ["faults", "throttle"] if post => {
            let verbs = match query.non_empty("verbs") {
                None => Vec::new(),
                Some(list) => list
                    .split(',')
                    .map(|v| Verb::parse(v.trim()))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| ApiError::bad_request("verbs must be a comma-separated list of list, watch, get, create, update, patch, delete, deletecollection"))?,
            };
            let count = match query.get("n") {
                None | Some("all") => None,
                Some(v) => Some(
                    v.parse::<u32>()
                        .map_err(|_| ApiError::bad_request("n must be a number or all"))?,
                ),
            };
            faults.throttle(query.non_empty("resource"), &verbs, count, retry());
            ok(json!({"ok": true}))
        }
        ["faults", "end-watches"] if post => {
            faults.end_watches_at_once(on());
            ok(json!({"ok": true}))
        }
        ["faults", "expire-every-watch"] if post => {
            let mode = match query.get("mode").unwrap_or("http") {
                "off" => None,
                m => Some(ExpireMode::parse(m).ok_or_else(|| {
                    ApiError::bad_request("mode must be one of http, event, off")
                })?),
            };
            faults.expire_every_watch(mode);
            ok(json!({"ok": true}))
        }
        ["faults", "reject-watch-list"] if post => {
            faults.reject_watch_list(on());
            ok(json!({"ok": true}))
        }
        ["faults", "ignore-watch-list"] if post => {
            faults.ignore_watch_list(on());
            ok(json!({"ok": true}))
        }
        ["faults", "strip-resource-versions"] if post => {
            faults.strip_resource_versions(on());
            ok(json!({"ok": true}))
        }
        ["faults", "clear"] if post => {
            faults.clear();
            ok(json!({"ok": true}))
        }
        ["requests"] if get => {
            let counts: Vec<Value> = shared
                .requests
                .snapshot()
                .into_iter()
                .map(|((r, v), c)| json!({"resource": r, "verb": v.as_str(), "count": c}))
                .collect();
            ok(json!({"counts": counts, "openWatches": shared.requests.open_watches()}))
        }
        ["state"] if get => {
            ok(json!({"resourceVersion": shared.store.resource_version().to_string()}))
        }
        ["churn", "start"] if post => {
            let cfg = ChurnConfig::from_query(query)?;
            let handle =
                crate::harness::churn::start(shared.store.clone(), shared.auto_namespaces, cfg);
            let mut slot = shared.churn.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(old) = slot.replace(handle) {
                old.stop();
            }
            ok(json!({"ok": true}))
        }
        ["churn", "stop"] if post => {
            let mut slot = shared.churn.lock().unwrap_or_else(|e| e.into_inner());
            let counts = slot.take().map(|h| {
                h.stop();
                h.counts()
            });
            ok(json!({"stopped": counts}))
        }
        ["churn"] if get => {
            let slot = shared.churn.lock().unwrap_or_else(|e| e.into_inner());
            ok(json!({"running": slot.is_some(), "counts": slot.as_ref().map(ChurnHandle::counts)}))
        }
        ["faults" | "requests" | "state" | "churn", ..] => Err(ApiError::method_not_allowed()),
        _ => Err(ApiError::unknown_path()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_uint_like_go() {
        assert_eq!(parse_uint("12"), Ok(12));
        let why = |s: &str| {
            parse_uint(s)
                .unwrap_err()
                .rsplit(": ")
                .next()
                .map(str::to_string)
        };
        assert_eq!(why("x1").as_deref(), Some("invalid syntax"));
        assert_eq!(why("-1").as_deref(), Some("invalid syntax"));
        assert_eq!(
            why("99999999999999999999").as_deref(),
            Some("value out of range")
        );
        // Go refuses the sign before it reads any digit.
        assert_eq!(why("+5").as_deref(), Some("invalid syntax"));
        assert_eq!(
            why("+99999999999999999999").as_deref(),
            Some("invalid syntax")
        );
    }
}
