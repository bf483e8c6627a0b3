//! # pods-web: kinformer inside an actix-web application
//!
//! One actix `System` (the application's, from `#[actix_web::main]`) holds everything:
//!
//! - a [`SharedInformerFactory`] with a Pod informer, indexed by namespace
//!   ([`NAMESPACE_INDEX`]), node ([`NODE_INDEX`]) and phase ([`PHASE_INDEX`]); its actors run on
//!   arbiters (threads) of that System, the informer's reflector and pipeline arbiters;
//! - a user actor, [`PodSummary`], on the main arbiter, registered with
//!   `add_recipient`: it receives a `Notify<Pod>` per change, keeps counts per phase and
//!   namespace, and fans each change out to the `/events` streams;
//! - the HTTP server, whose workers (arbiters too) answer every route from the informer's
//!   lister (no API call), or from the summary actor, or from kinformer's [`Telemetry`].
//!
//! | route | answer |
//! |---|---|
//! | `GET /?limit=` | the live page (HTML and a little JS, updated through `/events`; `limit` is passed on) |
//! | `GET /events?limit=` | server-sent events: `summary` at once, then `change` per notification (after `limit` of them, `end` and the stream ends) |
//! | `GET /api/pods?labelSelector=&namespace=` | a `PodList` from the lister (400 on a bad selector) |
//! | `GET /api/pods/{namespace}/{name}` | the cached pod, 404 when absent |
//! | `GET /api/counts/{index}` | pods per value of `namespace`, `node` or `phase` (404 for another index) |
//! | `GET /api/summary` | the summary actor's counts |
//! | `GET /metrics`, `/healthz`, `/readyz`, `/debug/informers` | kinformer's telemetry, as its own endpoint serves them |
//!
//! [`PodsWeb::shutdown`] stops in order: the server stops accepting (graceful stop; the SSE
//! streams are ended so that it need not wait for them), the summary's registration is removed
//! and the actor stopped, the informers are shut down; it returns their reports.

use std::{collections::BTreeMap, convert::Infallible, fmt, net::SocketAddr, time::Duration};

use actix::{Actor, Addr};
use actix_web::{
    App, HttpResponse, HttpServer, Responder,
    dev::ServerHandle,
    http::{StatusCode, header},
    web,
};
use k8s_openapi::api::core::v1::Pod;
use kinformer::selector::parse_label_selector;
use kinformer_actors::{
    HandlerRegistration, IndexFunc, Indexers, InformerError, InformerId, ListenerConfig, Lister,
    NAMESPACE_INDEX, SharedIndexInformer, SharedInformerFactory, ShutdownReport, Telemetry,
    index_func, namespace_index_func,
};
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

pub mod summary;

pub use summary::PodSummary;
use summary::{CloseSubscribers, GetSummary, StopSummary, Subscribe, node_of, phase_of};

/// The index of pods by `spec.nodeName` (`(none)` while unscheduled).
pub const NODE_INDEX: &str = "node";
/// The index of pods by `status.phase` (`(none)` without one).
pub const PHASE_INDEX: &str = "phase";
/// The listener name of the summary actor's registration (in metrics and traces).
pub const SUMMARY_LISTENER: &str = "pod-summary";

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PAGE: &str = include_str!("page.html");

/// What can fail when starting the service.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// The HTTP listener could not bind.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server bound no address (cannot happen with one `bind`; reported, not assumed).
    #[error("the HTTP server bound no address")]
    NoAddress,
    /// Registering an index or the summary actor, or starting the informers.
    #[error(transparent)]
    Informer(#[from] InformerError),
}

/// How to run the service.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to listen (port 0: any free port; [`PodsWeb::local_addr`] says which).
    pub addr: SocketAddr,
    /// HTTP worker threads.
    pub workers: usize,
    /// How long the graceful stop waits for requests in flight.
    pub shutdown_timeout: Duration,
    /// Only this namespace (None: all).
    pub namespace: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            workers: 2,
            shutdown_timeout: Duration::from_secs(5),
            namespace: None,
        }
    }
}

/// What the routes read: all cheap to clone and shared by every worker.
struct State {
    pods: Lister<Pod>,
    informer: SharedIndexInformer<Pod>,
    telemetry: Telemetry,
    summary: Addr<PodSummary>,
}

/// The running service: informers, the summary actor and the HTTP server.
pub struct PodsWeb {
    addr: SocketAddr,
    handle: ServerHandle,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    factory: SharedInformerFactory,
    pods: SharedIndexInformer<Pod>,
    registration: HandlerRegistration<Pod>,
    summary: Addr<PodSummary>,
    telemetry: Telemetry,
}

/// What [`PodsWeb::shutdown`] did.
#[derive(Debug, Default)]
pub struct ShutdownSummary {
    /// `/events` streams ended.
    pub streams_closed: usize,
    /// Whether the summary actor's registration was still there to remove.
    pub registration_removed: bool,
    /// Each informer's report (handlers unfinished, notifications dropped).
    pub informers: BTreeMap<InformerId, ShutdownReport>,
}

impl fmt::Display for ShutdownSummary {
    /// One line: `streams_closed=N registration_removed=B informers=[pods: unfinished=[] dropped=0]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "streams_closed={} registration_removed={} informers=[",
            self.streams_closed, self.registration_removed
        )?;
        for (i, (id, r)) in self.informers.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(
                f,
                "{}: unfinished={:?} dropped={}",
                id.resource, r.unfinished, r.dropped
            )?;
        }
        f.write_str("]")
    }
}

fn node_index() -> IndexFunc<Pod> {
    index_func(|p: &Pod| vec![node_of(p)])
}

fn phase_index() -> IndexFunc<Pod> {
    index_func(|p: &Pod| vec![phase_of(p)])
}

impl PodsWeb {
    /// Builds the informers, starts the summary actor and the HTTP server, and starts the
    /// informers (it does not wait for their sync: `/readyz` says when). Must run inside an
    /// actix System (`#[actix_web::main]`, `#[actix_web::test]`): the informers and the actor
    /// join it.
    ///
    /// # Errors
    /// [`WebError::Bind`] when `opts.addr` cannot be bound; [`WebError::Informer`] when the
    /// informer refuses an index or the registration.
    pub async fn start(client: kube::Client, opts: Options) -> Result<PodsWeb, WebError> {
        let telemetry = Telemetry::new();
        let mut factory = SharedInformerFactory::new(client).with_telemetry(telemetry.clone());
        if let Some(ns) = &opts.namespace {
            factory = factory.with_namespace(ns.clone());
        }
        let pods = factory.informer::<Pod>();
        let mut indexers = Indexers::new();
        indexers.insert(NAMESPACE_INDEX.to_string(), namespace_index_func::<Pod>());
        indexers.insert(NODE_INDEX.to_string(), node_index());
        indexers.insert(PHASE_INDEX.to_string(), phase_index());
        pods.add_indexers(indexers).await?;

        let summary = PodSummary::new().start();
        let registration = pods
            .add_recipient(
                summary.clone().recipient(),
                ListenerConfig {
                    name: Some(SUMMARY_LISTENER.to_string()),
                    ..ListenerConfig::default()
                },
            )
            .await?;

        let state = web::Data::new(State {
            pods: pods.lister(),
            informer: pods.clone(),
            telemetry: telemetry.clone(),
            summary: summary.clone(),
        });
        let server = HttpServer::new(move || App::new().app_data(state.clone()).configure(routes))
            .workers(opts.workers.max(1))
            // Signals are the application's: it stops the server first, then the informers.
            .disable_signals()
            .shutdown_timeout(opts.shutdown_timeout.as_secs().max(1))
            .bind(opts.addr)
            .map_err(|source| WebError::Bind {
                addr: opts.addr,
                source,
            })?;
        let addr = *server.addrs().first().ok_or(WebError::NoAddress)?;
        let server = server.run();
        let handle = server.handle();
        let server = actix_web::rt::spawn(server);

        factory.start()?;
        tracing::info!(%addr, "pods-web: serving; informers started");
        Ok(PodsWeb {
            addr,
            handle,
            server,
            factory,
            pods,
            registration,
            summary,
            telemetry,
        })
    }

    /// The address the server is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The Pod informer (e.g. to wait for its sync).
    pub fn pods(&self) -> &SharedIndexInformer<Pod> {
        &self.pods
    }

    /// The telemetry the routes serve.
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Stops in order: the server stops accepting and finishes the requests in flight (the
    /// `/events` streams are ended first so they do not hold it), the summary's registration
    /// is removed and the actor stopped, then the informers are shut down.
    pub async fn shutdown(self) -> ShutdownSummary {
        // The `/events` streams end first, each with its last chunk, while the server still
        // runs; then `stop` (graceful: no new connection, the requests in flight finish, a
        // stream opened in between is cut after `shutdown_timeout`). Stopping first let the
        // server close a stream's connection before its end was written.
        let streams_closed = self.summary.send(CloseSubscribers).await.unwrap_or(0);
        self.handle.stop(true).await;
        match self.server.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "the HTTP server ended with an error"),
            Err(e) => tracing::warn!(error = %e, "the HTTP server task failed"),
        }
        tracing::info!(streams_closed, "HTTP server stopped");
        let registration_removed = match self.registration.remove().await {
            Ok(removed) => removed,
            Err(e) => {
                tracing::warn!(error = %e, "removing the summary's registration");
                false
            }
        };
        let _ = self.summary.send(StopSummary).await;
        tracing::info!(registration_removed, "summary actor stopped");
        let informers = self.factory.shutdown().await;
        ShutdownSummary {
            streams_closed,
            registration_removed,
            informers,
        }
    }
}

/// Mounts every route on an actix-web `App` (for [`PodsWeb::start`]).
fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(page))
        .route("/events", web::get().to(events))
        .route("/api/pods", web::get().to(list_pods))
        .route("/api/pods/{namespace}/{name}", web::get().to(get_pod))
        .route("/api/counts/{index}", web::get().to(counts))
        .route("/api/summary", web::get().to(get_summary))
        .route("/metrics", web::get().to(metrics))
        .route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz))
        .route("/debug/informers", web::get().to(debug_informers));
}

#[derive(Serialize)]
struct ErrorBody {
    error: String,
}

fn error(status: StatusCode, message: impl Into<String>) -> HttpResponse {
    HttpResponse::build(status).json(ErrorBody {
        error: message.into(),
    })
}

/// The page, with the summary as it is now (the total, and the counts as JSON for the script):
/// it shows the current state at load, before (or without) the event stream's first event.
async fn page(state: web::Data<State>) -> impl Responder {
    let view = state.summary.send(GetSummary).await.ok();
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(render_page(view.as_ref()))
}

/// [`PAGE`] with its `{{TOTAL}}` and `{{INITIAL}}` filled: `?` and `null` without a summary.
fn render_page(view: Option<&summary::SummaryView>) -> String {
    let total = view.map_or_else(|| "?".to_string(), |v| v.pods.to_string());
    // Inside a <script> element: no `<` may close it early (a phase or a namespace is text
    // from the server), so it is escaped as JSON allows.
    let initial = view
        .and_then(|v| serde_json::to_string(v).ok())
        .unwrap_or_else(|| "null".to_string())
        .replace('<', "\\u003c");
    PAGE.replace("{{TOTAL}}", &total)
        .replace("{{INITIAL}}", &initial)
}

#[derive(Deserialize)]
struct EventsQuery {
    /// End the stream (with an `end` event) after this many `change` events.
    limit: Option<u64>,
}

/// What the `/events` stream has left to send.
struct EventsState {
    rx: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    /// `change` events still to send (None: no limit).
    left: Option<u64>,
}

async fn events(state: web::Data<State>, q: web::Query<EventsQuery>) -> HttpResponse {
    let rx = match state.summary.send(Subscribe).await {
        Ok(Ok(rx)) => rx,
        Ok(Err(e)) => return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    let start = EventsState { rx, left: q.limit };
    let stream = futures::stream::unfold(Some(start), |st| async move {
        let mut st = st?;
        if st.left == Some(0) {
            // The limit was reached: say so (the page closes its EventSource) and end.
            let end = summary::sse_frame("end", &serde_json::json!({"reason": "limit"}));
            return Some((Ok::<_, Infallible>(end), None));
        }
        let frame = st.rx.recv().await?;
        if frame.starts_with(b"event: change") {
            st.left = st.left.map(|n| n.saturating_sub(1));
        }
        Some((Ok(frame), Some(st)))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .streaming(stream)
}

#[derive(Deserialize)]
struct ListQuery {
    #[serde(rename = "labelSelector")]
    label_selector: Option<String>,
    namespace: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PodList<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: ListMeta,
    items: Vec<&'a Pod>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    resource_version: String,
}

async fn list_pods(state: web::Data<State>, q: web::Query<ListQuery>) -> HttpResponse {
    let text = q.label_selector.as_deref().unwrap_or("");
    let selector = match parse_label_selector(text) {
        Ok(s) => s,
        // The parser's text is kube-apiserver's, which does not repeat the selector (kubectl
        // names it around it): name it here.
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("label selector {text:?}: {e}"),
            );
        }
    };
    let mut pods = match q.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => state.pods.namespaced(ns).list_selected(&selector),
        _ => state.pods.list_selected(&selector),
    };
    pods.sort_by_key(|p| (p.namespace(), p.name_any()));
    HttpResponse::Ok().json(PodList {
        api_version: "v1",
        kind: "PodList",
        metadata: ListMeta {
            resource_version: state.informer.last_sync_resource_version(),
        },
        items: pods.iter().map(|p| p.as_ref()).collect(),
    })
}

async fn get_pod(state: web::Data<State>, path: web::Path<(String, String)>) -> HttpResponse {
    let (namespace, name) = path.into_inner();
    match state.pods.get(&namespace, &name) {
        Some(pod) => HttpResponse::Ok().json(pod.as_ref()),
        None => error(
            StatusCode::NOT_FOUND,
            format!("pod {namespace}/{name} not found in the cache"),
        ),
    }
}

#[derive(Serialize)]
struct Counts {
    index: String,
    counts: BTreeMap<String, usize>,
    total: usize,
}

async fn counts(state: web::Data<State>, index: web::Path<String>) -> HttpResponse {
    let index = index.into_inner();
    // One snapshot: every count is of the same version of the cache.
    let snap = state.pods.snapshot();
    let names = snap.index_names();
    if !names.contains(&index) {
        return error(
            StatusCode::NOT_FOUND,
            format!("no index {index:?}; the indices are {names:?}"),
        );
    }
    let mut counts = BTreeMap::new();
    for value in snap.list_index_func_values(&index) {
        let n = snap.index_keys(&index, &value).map_or(0, |k| k.len());
        if n > 0 {
            counts.insert(value, n);
        }
    }
    HttpResponse::Ok().json(Counts {
        index,
        total: snap.len(),
        counts,
    })
}

async fn get_summary(state: web::Data<State>) -> HttpResponse {
    match state.summary.send(GetSummary).await {
        Ok(view) => HttpResponse::Ok().json(view),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

async fn metrics(state: web::Data<State>) -> HttpResponse {
    match state.telemetry.encode_metrics() {
        Ok(text) => HttpResponse::Ok().content_type(OPENMETRICS).body(text),
        Err(e) => HttpResponse::InternalServerError()
            .content_type("text/plain; charset=utf-8")
            .body(format!("{e}\n")),
    }
}

fn lines(status: StatusCode, title: &str, items: &[String]) -> HttpResponse {
    let mut body = format!("{title}\n");
    for i in items {
        body.push_str(i);
        body.push('\n');
    }
    HttpResponse::build(status)
        .content_type("text/plain; charset=utf-8")
        .body(body)
}

async fn healthz(state: web::Data<State>) -> HttpResponse {
    let h = state.telemetry.health();
    if h.is_healthy() {
        lines(StatusCode::OK, "ok", &[])
    } else {
        lines(StatusCode::SERVICE_UNAVAILABLE, "unhealthy", &h.failing)
    }
}

async fn readyz(state: web::Data<State>) -> HttpResponse {
    let r = state.telemetry.readiness();
    if r.is_ready() {
        lines(StatusCode::OK, "ok", &[])
    } else {
        lines(StatusCode::SERVICE_UNAVAILABLE, "not synced", &r.unsynced)
    }
}

async fn debug_informers(state: web::Data<State>) -> HttpResponse {
    #[derive(Serialize)]
    struct Body {
        informers: Vec<kinformer_actors::InformerReport>,
    }
    HttpResponse::Ok().json(Body {
        informers: state.telemetry.informers(),
    })
}

// The code of the actix guide (docs/), compiled as doctests here: this crate has every dependency the
// guide uses, which kinformer-actors (whose users it addresses) does not.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/actix.md")]
mod actix_guide {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_carries_the_summary_and_nothing_in_it_closes_the_script() {
        let mut view = summary::SummaryView {
            pods: 2,
            ..summary::SummaryView::default()
        };
        view.by_phase.insert("</script><b>".into(), 2);
        let page = render_page(Some(&view));
        assert!(page.contains(r#"pods: <b id="total">2</b>"#));
        assert_eq!(
            page.matches("</script>").count(),
            2,
            "only the page's own script elements close"
        );
        let none = render_page(None);
        assert!(none.contains(r#"pods: <b id="total">?</b>"#));
        assert!(none.contains(r#"type="application/json">null</script>"#));
    }
}
