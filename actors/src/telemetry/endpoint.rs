//! The telemetry HTTP endpoint (issue 10): `/metrics`, `/healthz`, `/readyz`,
//! `/debug/informers` (JSON, or an HTML page with live charts, issue 21) and
//! `/debug/informers/series`, served by hyper 1 on the caller's tokio runtime. While it runs,
//! its accept loop also samples the charts' series on a timer (one per endpoint, none per
//! informer).
//!
//! One call starts it: [`Telemetry::serve`] on a loopback address (`127.0.0.1:0` picks a free
//! port; [`EndpointHandle::local_addr`] says which). Telemetry is not for the world by
//! default: a non-loopback address is refused unless asked for with
//! [`Telemetry::serve_on_any_interface`] (e.g. `0.0.0.0:9090` in a pod, where Prometheus and
//! the kubelet's probes connect from outside the container).
//!
//! The routes are listed on [`Telemetry::serve`].

use std::{convert::Infallible, fmt::Write as _, net::SocketAddr, time::Duration};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{net::TcpListener, sync::oneshot, task::JoinSet};

use crate::telemetry::{
    metrics::{InformerReport, Telemetry, TelemetryError},
    series::SeriesReport,
};

/// OpenMetrics' text content type, as Prometheus negotiates it.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";
const HTML: &str = "text/html; charset=utf-8";

/// A running telemetry endpoint. Dropping it stops the endpoint (in the background);
/// [`shutdown`](Self::shutdown) stops it and waits.
#[derive(Debug)]
pub struct EndpointHandle {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl EndpointHandle {
    /// The address the endpoint is bound to (the real port when `:0` was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes open connections and waits until the server task ended.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for EndpointHandle {
    fn drop(&mut self) {
        // Dropping the sender ends the accept loop, which aborts its connections.
        self.stop.take();
    }
}

impl Telemetry {
    /// Serves `/metrics`, `/healthz`, `/readyz`, `/debug/informers` and
    /// `/debug/informers/series` on `addr`, which must
    /// be a loopback address (`127.0.0.1:0` for any free port). Must be called within a tokio
    /// runtime (an actix `System` is one); the server runs as tasks of that runtime.
    /// Telemetry is not for the world by default: a non-loopback address is refused
    /// ([`TelemetryError::NotLoopback`]) unless asked for with
    /// [`serve_on_any_interface`](Self::serve_on_any_interface).
    ///
    /// | path | answer |
    /// |---|---|
    /// | `GET /metrics` | every metric, OpenMetrics text (`application/openmetrics-text; version=1.0.0`) |
    /// | `GET /healthz` | `200 ok`, or `503` with one line per informer whose reflector has been failing longer than [`TelemetryOptions::failing_grace`](crate::TelemetryOptions::failing_grace) |
    /// | `GET /readyz` | `200 ok` once every registered informer synced and none has been not known current (R10) longer than [`TelemetryOptions::stale_threshold`](crate::TelemetryOptions::stale_threshold), else `503` listing the others |
    /// | `GET /debug/informers` | JSON: every informer ([`InformerReport`]); an HTML page when the request's `Accept` prefers `text/html` (a browser), or with `?format=html`: each informer's state and counters, and live charts (events per second, FIFO depth, listener buffers, handler latency; each workqueue's depth, adds per second, queue wait and work duration, i.e. reconcile latency) redrawn every second or two by the page's inline script (no external resource), which refetches the page and the series without reloading |
    /// | `GET /debug/informers/series` | JSON: the live series the charts draw ([`SeriesReport`](crate::SeriesReport), [`Telemetry::series`]): one point per [`TelemetryOptions::series_interval`](crate::TelemetryOptions::series_interval) over the last `series_interval × series_points` (default 1 s × 300: 5 minutes), sampled by the endpoint's timer while it runs |
    ///
    /// Other paths answer 404, other methods 405. The endpoint stops when its handle is dropped or
    /// [`EndpointHandle::shutdown`] is awaited; open connections are closed then.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let telemetry = kinformer_actors::Telemetry::new();
    /// let endpoint = telemetry.serve("127.0.0.1:9090".parse()?).await?;
    /// println!("http://{}/debug/informers", endpoint.local_addr());
    /// # Ok(()) }
    /// ```
    pub async fn serve(&self, addr: SocketAddr) -> Result<EndpointHandle, TelemetryError> {
        if !addr.ip().is_loopback() {
            return Err(TelemetryError::NotLoopback(addr));
        }
        self.serve_on_any_interface(addr).await
    }

    /// [`serve`](Self::serve) on any address, loopback or not: telemetry (object names,
    /// namespaces, errors) becomes reachable by whoever can reach `addr`.
    pub async fn serve_on_any_interface(
        &self,
        addr: SocketAddr,
    ) -> Result<EndpointHandle, TelemetryError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| TelemetryError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| TelemetryError::Bind { addr, source })?;
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(accept_loop(listener, self.clone(), stopped));
        tracing::info!(addr = %local, "telemetry endpoint listening");
        Ok(EndpointHandle {
            addr: local,
            stop: Some(stop),
            task: Some(task),
        })
    }
}

/// Accepts connections until `stopped` fires or its sender is dropped, then aborts them.
async fn accept_loop(
    listener: TcpListener,
    telemetry: Telemetry,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut conns = JoinSet::new();
    // The charts' series are sampled here, so that a page opened after a problem shows the
    // minutes before it. `Telemetry::with_options` keeps the interval above zero, which
    // tokio's interval needs.
    let mut sample = tokio::time::interval(telemetry.options().series_interval);
    sample.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = sample.tick() => {
                telemetry.sample_series();
            }
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    let telemetry = telemetry.clone();
                    conns.spawn(async move {
                        let svc = service_fn(move |req| {
                            let telemetry = telemetry.clone();
                            async move { Ok::<_, Infallible>(route(&telemetry, &req)) }
                        });
                        let conn = http1::Builder::new()
                            .timer(TokioTimer::new())
                            .header_read_timeout(Duration::from_secs(30))
                            .serve_connection(TokioIo::new(stream), svc);
                        if let Err(e) = conn.await {
                            tracing::debug!(error = %e, "telemetry connection ended with an error");
                        }
                    });
                }
                Err(e) => {
                    // E.g. out of file descriptors: back off a little rather than spin.
                    tracing::warn!(error = %e, "telemetry endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = &mut stopped => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.abort_all();
    while conns.join_next().await.is_some() {}
}

fn respond(
    status: StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

fn route(telemetry: &Telemetry, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if !matches!(
        path,
        "/metrics" | "/healthz" | "/readyz" | "/debug/informers" | "/debug/informers/series"
    ) {
        return respond(StatusCode::NOT_FOUND, TEXT, "not found\n");
    }
    if req.method() != Method::GET {
        let mut r = respond(StatusCode::METHOD_NOT_ALLOWED, TEXT, "only GET\n");
        r.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET"));
        return r;
    }
    match path {
        "/metrics" => match telemetry.encode_metrics() {
            Ok(text) => respond(StatusCode::OK, OPENMETRICS, text),
            Err(e) => respond(StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("{e}\n")),
        },
        "/healthz" => {
            let h = telemetry.health();
            if h.is_healthy() {
                respond(StatusCode::OK, TEXT, "ok\n")
            } else {
                respond(
                    StatusCode::SERVICE_UNAVAILABLE,
                    TEXT,
                    lines("unhealthy", &h.failing),
                )
            }
        }
        "/readyz" => {
            let r = telemetry.readiness();
            if r.is_ready() {
                respond(StatusCode::OK, TEXT, "ok\n")
            } else {
                // Unsynced informers first (under the title tests and probes know), then the
                // stale ones (R10).
                let mut body = String::new();
                if !r.unsynced.is_empty() {
                    body.push_str(&lines("not synced", &r.unsynced));
                }
                if !r.stale.is_empty() {
                    body.push_str(&lines("not known current", &r.stale));
                }
                respond(StatusCode::SERVICE_UNAVAILABLE, TEXT, body)
            }
        }
        "/debug/informers/series" => match serde_json::to_vec(&{
            telemetry.sample_series();
            telemetry.series()
        }) {
            Ok(body) => respond(StatusCode::OK, JSON, body),
            Err(e) => respond(StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("{e}\n")),
        },
        _ => {
            let informers = telemetry.informers();
            if wants_html(req) {
                respond(
                    StatusCode::OK,
                    HTML,
                    render_html(&informers, &{
                        telemetry.sample_series();
                        telemetry.series()
                    }),
                )
            } else {
                // Serialised from the structs, not through `json!` (a `Value` map sorts its
                // keys): each informer reads from its name down, as declared.
                match serde_json::to_vec_pretty(&InformersBody {
                    informers: &informers,
                }) {
                    Ok(body) => respond(StatusCode::OK, JSON, body),
                    Err(e) => respond(StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("{e}\n")),
                }
            }
        }
    }
}

/// `/debug/informers`' JSON: `{"informers": [...]}`.
#[derive(serde::Serialize)]
struct InformersBody<'a> {
    informers: &'a [InformerReport],
}

fn lines(title: &str, items: &[String]) -> String {
    let mut out = format!("{title}\n");
    for i in items {
        let _ = writeln!(out, "{i}");
    }
    out
}

/// True when the request asks for HTML: `?format=html`, or an `Accept` header that ranks
/// `text/html` above `application/json` (a browser's does; `*/*` alone gets JSON).
fn wants_html(req: &Request<Incoming>) -> bool {
    if let Some(q) = req.uri().query() {
        for pair in q.split('&') {
            match pair {
                "format=html" => return true,
                "format=json" => return false,
                _ => {}
            }
        }
    }
    let accept = req
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    accept_quality(&accept, "text", "html") > accept_quality(&accept, "application", "json")
}

/// The quality `accept` gives `kind/sub`: from its most specific matching range (RFC 9110
/// §12.5.1), 0 when none matches.
fn accept_quality(accept: &str, kind: &str, sub: &str) -> f32 {
    let mut best: Option<(u8, f32)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|v| v.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        let (k, s) = media.split_once('/').unwrap_or((media.as_str(), ""));
        let specificity = match (k, s) {
            (k, s) if k == kind && s == sub => 2,
            (k, "*") if k == kind => 1,
            ("*", "*") => 0,
            _ => continue,
        };
        if best.is_none_or(|(sp, _)| specificity > sp) {
            best = Some((specificity, q));
        }
    }
    best.map_or(0.0, |(_, q)| q)
}

/// Escapes text for HTML element content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The charts' script: reads the series (inline at first, then from
/// `/debug/informers/series`) and draws them as SVG; refetches the page's tables. Kept in its
/// own file so it reads as JavaScript.
const PAGE_SCRIPT: &str = include_str!("debug_page.js");

/// The series as JSON safe inside a `<script>` element: `<` only occurs inside JSON strings,
/// where `\u003c` means the same, so no `</script>` or `<!--` can end or change the element.
fn inline_json(series: &SeriesReport) -> String {
    serde_json::to_string(series)
        .unwrap_or_else(|_| "null".to_string())
        .replace('<', "\\u003c")
}

/// The debug view as a self-contained page (inline style and script, no external resource:
/// telemetry may run where there is no network). The tables are rendered here; the script
/// draws each informer's charts into its `div.charts` and the workqueues' into
/// `#workqueues`, first from the series inlined in the page, then every second or two from
/// fresh fetches of the page (its `#informers` part) and of the series, without reloading.
fn render_html(informers: &[InformerReport], series: &SeriesReport) -> String {
    let mut h = String::from(concat!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<title>kinformer: informers</title><style>",
        "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}",
        "table{border-collapse:collapse;margin:.4em 0 1.2em}",
        "td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}",
        "th{background:#f3f3f3}.ok{color:#176f2c}.bad{color:#b00020}",
        "section{border-top:2px solid #ddd;padding-top:.5em}",
        ".charts{display:flex;flex-wrap:wrap;gap:.6em;margin:.3em 0 .6em}",
        "figure{margin:0;border:1px solid #ddd;border-radius:4px;padding:2px 4px;background:#fcfcfc}",
        "figcaption{font-size:11px;color:#444;max-width:280px}",
        "figcaption span{margin-right:.6em;white-space:nowrap}",
        "svg.chart text{font-size:10px;fill:#555}svg.chart text.title{fill:#222;font-weight:600}",
        "svg.chart rect.plot{fill:#fff;stroke:#e3e3e3}",
        "svg.chart path.line{fill:none;stroke-width:1.6;stroke-linecap:round;stroke-linejoin:round}",
        "#live{font-size:12px;color:#666}",
        "</style></head><body>\n<h1>Informers</h1>\n",
        "<p id=\"live\">live charts: last samples of each series</p>\n",
        "<div id=\"informers\">\n",
    ));
    if informers.is_empty() {
        h.push_str("<p>No informer registered.</p>\n");
    }
    for i in informers {
        let state_class = if i.synced && i.failing_since.is_none() && i.stale_since.is_none() {
            "ok"
        } else {
            "bad"
        };
        let _ = write!(
            h,
            "<section class=\"informer\" data-informer=\"{name}\"><h2>{name}</h2>\n\
             <p class=\"state {state_class}\">state: <b>{state}</b>, synced: <b>{synced}</b>, \
             phase: <b>{phase}</b></p>\n<div class=\"charts\" data-informer=\"{name}\"></div>\n<table>",
            name = esc(&i.name),
            state = esc(&i.state),
            synced = i.synced,
            phase = esc(&i.phase),
        );
        let mut row = |k: &str, v: &str| {
            let _ = write!(h, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
        };
        row("resource", &i.resource);
        row("type", &i.type_name);
        row("namespace", i.namespace.as_deref().unwrap_or("(all)"));
        if let Some(l) = &i.label_selector {
            row("label selector", l);
        }
        if let Some(f) = &i.field_selector {
            row("field selector", f);
        }
        row("last synced RV", &i.last_sync_resource_version);
        row("restarts", &i.restarts.to_string());
        if let Some(since) = &i.failing_since {
            row("failing since", since);
        }
        if let Some(since) = &i.stale_since {
            // R10: synced, but not following the server since then.
            row(
                "not known current since",
                &format!("{since} ({:.1}s)", i.stale_seconds),
            );
        }
        match &i.last_error {
            Some(e) => row("last error", &format!("{} at {}", e.message, e.at)),
            None => row("last error", "none"),
        }
        row(
            "FIFO",
            &format!(
                "{} keys, {} deltas",
                i.fifo_queued_keys, i.fifo_pending_deltas
            ),
        );
        row("store objects", &i.store_objects.to_string());
        let r = &i.reflector;
        row(
            "reflector",
            &format!(
                "{} lists, {} watches, {} events, {} bookmarks, {} relists, {} stalls, {} failures, {} dropped, {} decode errors",
                r.lists,
                r.watches,
                r.events,
                r.bookmarks,
                r.relists,
                r.stalls,
                r.failures,
                r.dropped_objects,
                r.decode_errors
            ),
        );
        h.push_str("</table>\n");
        if !i.listeners.is_empty() {
            h.push_str(
                "<table class=\"listeners\"><tr><th>listener</th><th>policy</th><th>buffered</th>\
                 <th>received</th><th>delivered</th><th>coalesced</th><th>dropped</th>\
                 <th>panics</th>\
                 <th>synced</th></tr>",
            );
            for l in &i.listeners {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                     <td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&l.name),
                    esc(&l.policy),
                    l.buffered,
                    l.received,
                    l.delivered,
                    l.coalesced,
                    l.dropped,
                    l.panics,
                    l.synced
                );
            }
            h.push_str("</table>\n");
        }
        h.push_str("</section>\n");
    }
    h.push_str("</div>\n<div id=\"workqueues\"></div>\n<script id=\"series-data\" type=\"application/json\">");
    h.push_str(&inline_json(series));
    h.push_str("</script>\n<script>\n");
    h.push_str(PAGE_SCRIPT);
    h.push_str("</script>\n</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation_prefers_the_most_specific_range() {
        let chromium =
            "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8";
        assert!(
            accept_quality(chromium, "text", "html")
                > accept_quality(chromium, "application", "json")
        );
        assert_eq!(
            accept_quality("*/*", "text", "html"),
            accept_quality("*/*", "application", "json")
        );
        assert!(accept_quality("application/json, text/html;q=0.5", "text", "html") < 1.0);
        assert_eq!(accept_quality("image/png", "text", "html"), 0.0);
    }

    #[test]
    fn inline_series_cannot_end_their_script_element() {
        let name = "</script><script>alert(1)</script><!--";
        let report = SeriesReport {
            interval_seconds: 1.0,
            window_seconds: 300.0,
            informers: vec![crate::telemetry::series::InformerSeries {
                name: name.to_string(),
                events_per_second: vec![[-1.0, 2.5]],
                fifo_depth: vec![],
                listeners: vec![],
            }],
            workqueues: vec![],
        };
        let inline = inline_json(&report);
        assert!(!inline.contains('<'), "{inline}");
        let back: serde_json::Value = serde_json::from_str(&inline).expect("still JSON");
        assert_eq!(back["informers"][0]["name"], name);
        assert_eq!(back["informers"][0]["events_per_second"][0][1], 2.5);
        let page = render_html(&[], &report);
        assert_eq!(page.matches("</script>").count(), 2, "only the page's own");
    }

    #[test]
    fn html_escapes_names() {
        assert_eq!(
            esc("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
        );
    }
}
