//! The REST handlers of a resource (`k8s.io/apiserver/pkg/endpoints/handlers`: `get.go`,
//! `create.go`, `update.go`, `patch.go`, `delete.go`): the request is counted and may be failed
//! by an injected fault, its options are decoded and validated, then LIST and WATCH go to
//! [`super::list`] and [`super::watch`], reads to the storage and writes to the registry's
//! operations, and the object is rendered in the negotiated representation.

use std::sync::Arc;

use http::{HeaderMap, Method, Response, header};
use hyper::body::Incoming;

use super::counters::Verb;
use super::list::{self, ListMeta, render_list_full};
use super::negotiation::{PROTOBUF, Repr, body_value, negotiate, read_body};
use super::protobuf;
use super::request_info::{Target, verb_of};
use super::response::{self as resp, Body};
use super::shared::Shared;
use super::table;
use super::watch;
use crate::apimachinery::errors::ApiError;
use crate::apimachinery::options::{
    DeleteOptions, ListOptions, PatchKind, manager_or_user_agent, parse_bool, write_options,
};
use crate::apimachinery::schema::ResourceDef;
use crate::apimachinery::selector::{parse_fields, parse_labels};
use crate::apimachinery::util::Query;
use crate::registry::decode::FieldValidation;
use crate::registry::generic::{self as ops, Part};
use crate::registry::strategy;
use crate::storage::object::StoredObject;
use crate::storage::predicate::{Selectors, select};
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
    shared
        .requests
        .record(&t.counter_name(), verb, query.get("shardSelector"));
    // kube-apiserver writes an error's Status in the negotiated encoding
    // (`responsewriters.ErrorNegotiated`): protobuf for a client that prefers it, on a kind
    // served in it. The sim does so for LISTs and WATCHes (an informer's requests, and the
    // injected failures they meet); the other verbs' errors stay JSON.
    let protobuf_status = matches!(verb, Verb::List | Verb::Watch)
        && t.sub.is_none()
        && protobuf::encodes(&t.def.api_version, &t.def.kind)
        && matches!(negotiate(headers, query, true), Ok(Repr::Protobuf));
    let r = match shared
        .faults
        .take_failure(&t.counter_name(), verb, protobuf_status)
    {
        Some(e) => Err(e),
        None => serve(shared, headers, query, t, body, verb).await,
    };
    match r {
        Err(e) if protobuf_status => Ok(resp::error_protobuf(&e)),
        r => r,
    }
}

/// Serves one request's verb, once counted and past the injected failures.
async fn serve(
    shared: &Arc<Shared>,
    headers: &HeaderMap,
    query: &Query,
    t: Target,
    body: Incoming,
    verb: Verb,
) -> Result<Response<Body>, ApiError> {
    let def = t.def.clone();
    let ns = t.namespace.as_deref();
    let part = match t.sub.as_deref() {
        Some("status") => Part::Status,
        Some("scale") => Part::Scale,
        _ => Part::Main,
    };
    let store = &shared.store;
    // The manager a write is recorded for in the managed fields.
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let manager = manager_or_user_agent(query, user_agent);
    // Protobuf answers only for the kinds whose objects the encoder covers, never for Scale.
    let protobuf_ok = part != Part::Scale && protobuf::encodes(&def.api_version, &def.kind);
    match verb {
        Verb::List => {
            let repr = negotiate(headers, query, protobuf_ok)?;
            let r = list::list(shared, &t, query, repr).await?;
            Ok(count_protobuf(shared, &t, verb, r))
        }
        Verb::Watch => {
            let repr = negotiate(headers, query, protobuf_ok)?;
            let r = watch::serve_watch(shared, &t, query, repr).await?;
            Ok(count_protobuf(shared, &t, verb, r))
        }
        Verb::Get => {
            let repr = negotiate(headers, query, protobuf_ok)?;
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
            let r = render_one(&def, &obj, repr, 200)?;
            Ok(count_protobuf(shared, &t, verb, r))
        }
        Verb::Create => {
            let dry_run = write_options(query, "CreateOptions", None)?;
            let fv = FieldValidation::from_query(query);
            let (v, warnings) = body_value(shared, headers, &def, body, false, fv).await?;
            let obj = ops::create(
                store,
                &def,
                ns,
                v,
                dry_run,
                shared.auto_namespaces,
                Some(&manager),
            )?;
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
            let obj = ops::update(store, &def, ns, name, part, v, dry_run, Some(&manager))?;
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
                manager: Some(&manager),
                force: query.get("force").is_some_and(parse_bool),
                validation: FieldValidation::from_query(query),
            };
            let (obj, created, warnings) = ops::patch_checked(store, &def, ns, name, part, &req)?;
            let rendered = if created {
                // `patch.go` `patchResource`: an apply that created the object is a 201.
                render_one(&def, &obj, Repr::Object, 201)?
            } else {
                render_part(&def, &obj, part)?
            };
            Ok(resp::with_warnings(rendered, &warnings))
        }
        Verb::Delete => {
            let b = read_body(shared, headers, body).await?;
            let opts = DeleteOptions::from_request(&b, query)?;
            let name = t.name.as_deref().unwrap_or("");
            let outcome = ops::delete(store, &def, ns, name, &opts)?;
            // `handlers/delete.go` `DeleteResource`: 202 when the object is not gone yet and
            // the request asked for `orphanDependents: false`, else 200.
            let deleted = matches!(outcome, Outcome::Deleted(_));
            let code = if !deleted && opts.orphan_dependents == Some(false) {
                202
            } else {
                200
            };
            match outcome {
                // `store.go` `finalizeDelete`: a kind without `ReturnDeletedObject` answers a
                // completed delete with a `Status` naming the object (`kind` is the resource).
                Outcome::Deleted(o) if !strategy::returns_deleted_object(&def) => {
                    let mut details = serde_json::Map::new();
                    details.insert("name".into(), serde_json::json!(o.name));
                    if !def.group.is_empty() {
                        details.insert("group".into(), serde_json::json!(def.group));
                    }
                    details.insert("kind".into(), serde_json::json!(def.plural));
                    details.insert("uid".into(), serde_json::json!(o.uid));
                    Ok(resp::json(
                        code,
                        &serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Success", "details": details}),
                    ))
                }
                Outcome::Created(o)
                | Outcome::Updated(o)
                | Outcome::Deleted(o)
                | Outcome::Unchanged(Some(o)) => render_one(&def, &o, Repr::Object, code),
                Outcome::Unchanged(None) => Err(ApiError::not_found(&def.group, &def.plural, name)),
            }
        }
        Verb::DeleteCollection => {
            // handlers/delete.go DeleteCollection: the list options are decoded (400) and
            // validated (422 ListOptions) before the delete options.
            let list_opts = ListOptions::parse(query, false)?;
            let b = read_body(shared, headers, body).await?;
            let opts = DeleteOptions::from_request(&b, query)?;
            let labels = parse_labels(query)?;
            let fields = parse_fields(&def.field_labels, query)?;
            // `Store.DeleteCollection` lists through `Store.List`, so a shard selector limits
            // what is deleted (and the answer carries `shardInfo`).
            let shard = ops::shard_selector(
                shared.faults.shards_lists_and_watches(),
                &list_opts.shard_selector,
            )?;
            let sel = Selectors {
                labels: &labels,
                fields: &fields,
                shard: shard.as_ref(),
            };
            // `store.go` `DeleteCollection`: every listed object is deleted (one already gone
            // is skipped, any other error fails the request), and the answer is the list as
            // listed, at the list's resourceVersion.
            let (map, rv) = store.snapshot(&def, false);
            let listed: Vec<Arc<StoredObject>> = select(&map, ns, sel, None).collect();
            for obj in &listed {
                match ops::delete(store, &def, ns, &obj.name, &opts) {
                    Ok(_) => {}
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            let lm = ListMeta {
                rv,
                shard_info: shard.as_ref().map(ToString::to_string),
                ..ListMeta::default()
            };
            Ok(render_list_full(&def, listed, lm, false))
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

/// Counts `r` in [`super::counters::RequestCounters::protobuf_count`] when it is a success
/// whose body is protobuf (by its `Content-Type`, so a list answered as JSON after all, such
/// as one carrying `shardInfo`, is not).
fn count_protobuf(shared: &Shared, t: &Target, verb: Verb, r: Response<Body>) -> Response<Body> {
    let pb = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(protobuf::is_protobuf);
    if pb && r.status().is_success() {
        shared.requests.record_protobuf(&t.counter_name(), verb);
    }
    r
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
        Repr::Protobuf => {
            let v = obj.to_value(def)?;
            match kinformer::protobuf::encode_object_as(&def.api_version, &def.kind, &v) {
                Ok(b) => resp::full(code, PROTOBUF, bytes::Bytes::from(b)),
                // An object the schema does not cover: JSON, the client's next choice.
                Err(_) => resp::json_bytes(code, obj.full_bytes(def)),
            }
        }
        Repr::Metadata => resp::json(code, &table::partial_metadata(&obj.to_value(def)?)),
        Repr::Table(inc) => resp::json(
            code,
            &table::table(def, &[obj.to_value(def)?], obj.rv, None, inc),
        ),
    })
}
