//! Request handling, laid out by the path a request takes through kube-apiserver's generic API
//! server: the accept loop and the top-level mux here (`k8s.io/apiserver/pkg/server`:
//! `GenericAPIServer`, `APIServerHandler`); what a path addresses (`request_info`:
//! `endpoints/request`'s `RequestInfoFactory`); the negotiated representation and the decoded
//! body (`negotiation`, with `protobuf` for kube's protobuf bodies); the REST handlers
//! (`handlers`: get, create, update, patch, delete, deletecollection; `list`; `watch`: the
//! watch handler and its streams); `discovery`, the OpenAPI documents (`openapi`, as
//! `kube-openapi`'s `handler3`) and the Table printers (`table`, as
//! `pkg/printers/internalversion`); response rendering and `Status` bodies (`response`).
//! Request counters (`counters`) and the fault injection points (`faults`) sit at the
//! handlers' entry and in the watch streams; `shared` is what every connection shares.
//!
//! Imports run downward: writes go through the registry (`crate::registry`), reads
//! (snapshots, the watch-cache window) to `crate::storage`, and the shared types come from
//! `crate::apimachinery`. The server never imports the test harness: the harness mounts its
//! control endpoint under `/sim/` ([`shared::Mount`]) and arms the fault injection points
//! ([`faults::FaultState`]) from above.

pub(crate) mod counters;
mod discovery;
pub(crate) mod faults;
mod handlers;
mod list;
pub(crate) mod negotiation;
mod openapi;
pub(crate) mod protobuf;
mod request_info;
pub(crate) mod response;
pub(crate) mod shared;
mod table;
mod watch;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::apimachinery::errors::ApiError;
use crate::apimachinery::util::Query;
use request_info::{Route, parse_path};
use response::{self as resp, Body};
use shared::Shared;

/// Accepts connections until `shutdown` fires (or its sender is dropped), then aborts them all.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    let mut down = shared.faults.down_tx.subscribe();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) if shared.faults.is_down() => {
                    // An outage (a restarting kube-apiserver): reset the connection at once.
                    let _ = stream.set_zero_linger();
                    shared.faults.bump(faults::Count::ConnectionsRefused);
                    drop(stream);
                }
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
            // The server went down: every open connection (watches, idle keep-alives) ends.
            Ok(()) = down.changed() => {
                if *down.borrow_and_update() {
                    conns.abort_all();
                }
            }
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

/// The top-level mux: discovery, OpenAPI and health answer here; resource paths go to
/// [`handlers::resource`], `/sim/...` to the mounted control endpoint (404 without one).
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
        Route::Root => get_only(discovery::root_paths()),
        Route::Version => get_only(discovery::version()),
        Route::Health => Ok(resp::full(
            200,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"ok"),
        )),
        Route::Api => get_only(discovery::api_versions(&shared.server_address)),
        Route::Apis => get_only(discovery::api_group_list(reg)),
        Route::Group(g) => {
            discovery::api_group(reg, &g).map_or_else(|| Err(ApiError::unknown_path()), get_only)
        }
        Route::GroupVersion(g, v) => discovery::api_resource_list(reg, &g, &v)
            .map_or_else(|| Err(ApiError::unknown_path()), get_only),
        Route::OpenApiV3 => get_only(openapi::root(reg)),
        Route::OpenApiV3Gv(g, v) => openapi::group_version(reg, &g, &v)
            .map_or_else(|| Err(ApiError::unknown_path()), get_only),
        Route::Sim(rest) => match &shared.mount {
            Some(m) => m.handle(&method, &rest, &query),
            None => Err(ApiError::unknown_path()),
        },
        Route::Unknown => Err(ApiError::unknown_path()),
        Route::Resource(t) => {
            handlers::resource(shared, &method, &parts.headers, &query, t, body).await
        }
    }
}
