//! The REST handlers of a resource (`k8s.io/apiserver/pkg/endpoints/handlers`: `get.go`,
//! `create.go`, `update.go`, `patch.go`, `delete.go`): the request is counted and may be failed
//! by an injected fault, its options are decoded and validated, then LIST and WATCH go to
//! [`super::list`] and [`super::watch`], reads to the storage and writes to the registry's
//! operations, and the object is rendered in the negotiated representation.

use std::sync::Arc;

use http::{HeaderMap, Method, Response, header};
use hyper::body::Incoming;

use super::counters::Verb;
use super::list::{self, render_list_full};
use super::negotiation::{Repr, body_value, negotiate, read_body};
use super::request_info::{Target, verb_of};
use super::response::{self as resp, Body};
use super::shared::Shared;
use super::table;
use super::watch;
use crate::apimachinery::errors::ApiError;
use crate::apimachinery::options::{
    DeleteOptions, ListOptions, PatchKind, parse_bool, write_options,
};
use crate::apimachinery::schema::ResourceDef;
use crate::apimachinery::selector::{parse_fields, parse_labels};
use crate::apimachinery::util::Query;
use crate::registry::decode::FieldValidation;
use crate::registry::generic::{self as ops, Part};
use crate::storage::object::StoredObject;
use crate::storage::predicate::select;
use crate::storage::store::Outcome;
use crate::storage::versioner::parse_rv;
use crate::storage::watch_cache::wait_until_fresh;

/// Serves one request on a resource: counted, then failed if a fault rule says so, then the
/// verb.
pub(crate) async fn resource(
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
            list::list(shared, &t, query, repr).await
        }
        Verb::Watch => {
            let repr = negotiate(headers, query)?;
            watch::serve_watch(shared, &t, query, repr).await
        }
        Verb::Get => {
            let repr = negotiate(headers, query)?;
            if let Some(rv) = query.non_empty("resourceVersion")
                && rv != "0"
            {
                // `Cacher.Get` serves a get at a resourceVersion from the watch cache,
                // `WaitUntilFreshAndGet` (`staging/src/k8s.io/apiserver/pkg/storage/cacher/`).
                wait_until_fresh(&shared.store, parse_rv(rv)?, shared.rv_wait).await?;
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
            let fv = FieldValidation::from_query(query);
            let (v, warnings) = body_value(shared, headers, &def, body, false, fv).await?;
            let obj = ops::create(store, &def, ns, v, dry_run, shared.auto_namespaces)?;
            Ok(resp::with_warnings(
                render_one(&def, &obj, Repr::Object, 201)?,
                &warnings,
            ))
        }
        Verb::Update => {
            let dry_run = write_options(query, "UpdateOptions", None)?;
            let fv = FieldValidation::from_query(query);
            let scale = part == Part::Scale;
            let (v, warnings) = body_value(shared, headers, &def, body, scale, fv).await?;
            let name = t.name.as_deref().unwrap_or("");
            let obj = ops::update(store, &def, ns, name, part, v, dry_run)?;
            Ok(resp::with_warnings(
                render_part(&def, &obj, part)?,
                &warnings,
            ))
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
            let req = ops::PatchRequest {
                kind,
                body: &b,
                dry_run,
                auto_namespaces: shared.auto_namespaces,
                applier: query
                    .non_empty("fieldManager")
                    .map(|m| (m, query.get("force").is_some_and(parse_bool))),
                validation: FieldValidation::from_query(query),
            };
            let (obj, warnings) = ops::patch_checked(store, &def, ns, name, part, &req)?;
            Ok(resp::with_warnings(
                render_part(&def, &obj, part)?,
                &warnings,
            ))
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
            let fields = parse_fields(&def.field_labels, query)?;
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

/// A written object, or its Scale for `/scale`.
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

/// One object in the negotiated representation.
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
