//! The twin's HTTP server: `serve.py`'s routes and answers, from the rendered [`Workload`], in
//! JSON or (negotiated from `Accept` as kube-apiserver does) protobuf.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, Method, Request, Response, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::BenchError;
use super::workload::{RV_BASE, Rendered, Workload};
use crate::apimachinery::util::Query;
use crate::server::negotiation::{self, PROTOBUF, Repr};
use crate::server::response::{self as resp, Body, BodyError};
use kinformer::protobuf;

/// Watch body chunk size, as serve.py (lines and frames are split across chunks).
const CHUNK: usize = 256 * 1024;
const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// How the server runs.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// One line per request on stderr (`serve: GET /path code bytes secs`), as serve.py.
    pub log: bool,
}

/// Pods and events of one namespace (indices into the workload's).
struct NsView {
    items: Vec<usize>,
    events: Vec<usize>,
}

struct State {
    wl: Workload,
    opts: ServeOptions,
    docs: HashMap<&'static str, Bytes>,
    full_json: Bytes,
    full_pb: Bytes,
    ns: Mutex<HashMap<String, Arc<NsView>>>,
}

/// The twin server, its answers rendered.
pub struct Server(Arc<State>);

impl Server {
    /// Renders what `wl` answers (the full lists; discovery naming `port`).
    pub fn new(wl: Workload, opts: ServeOptions, port: u16) -> Result<Self, BenchError> {
        Ok(Self(Arc::new(State::new(wl, opts, port)?)))
    }

    /// Serves on `listener` until the task is dropped.
    pub async fn run(self, listener: TcpListener) {
        let state = self.0;
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("serve: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let state = state.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| handle(state.clone(), req));
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    }
}

fn status_obj(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code})
}

fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    resp::json(code, &status_obj(code, reason, message))
}

fn to_bytes(v: &Value) -> Bytes {
    // Serializing a Value cannot fail (string keys only).
    Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

impl State {
    fn new(wl: Workload, opts: ServeOptions, port: u16) -> Result<Self, BenchError> {
        let mut docs = HashMap::new();
        docs.insert(
            "/version",
            to_bytes(
                &json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-bench",
                "gitCommit": "0".repeat(40), "gitTreeState": "clean",
                "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc",
                "platform": "linux/amd64"}),
            ),
        );
        docs.insert(
            "/api",
            to_bytes(&json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                    "serverAddress": format!("127.0.0.1:{port}")}]})),
        );
        docs.insert(
            "/apis",
            to_bytes(&json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})),
        );
        docs.insert(
            "/api/v1",
            to_bytes(
                &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
                "resources": [
                    {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
                        "verbs": ["get", "list", "watch"], "shortNames": ["po"],
                        "categories": ["all"]},
                    {"name": "namespaces", "singularName": "namespace", "namespaced": false,
                        "kind": "Namespace", "verbs": ["get", "list", "watch"],
                        "shortNames": ["ns"]}]}),
            ),
        );
        let all: Vec<usize> = (0..wl.n).collect();
        let full_json = render_json_list(&wl, &all, None);
        let full_pb =
            render_pb_list(&wl, &all, None).map_err(|e| BenchError::Render(e.to_string()))?;
        Ok(Self {
            wl,
            opts,
            docs,
            full_json,
            full_pb,
            ns: Mutex::new(HashMap::new()),
        })
    }

    /// The pods and events of `ns` (computed once, as serve.py's `for_ns`).
    fn ns_view(&self, ns: &str) -> Arc<NsView> {
        let mut cache = self.ns.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .entry(ns.to_string())
            .or_insert_with(|| {
                Arc::new(NsView {
                    items: (0..self.wl.n)
                        .filter(|&i| self.wl.item_ns[i] == ns)
                        .collect(),
                    events: (0..self.wl.ev_ns.len())
                        .filter(|&i| self.wl.ev_ns[i] == ns)
                        .collect(),
                })
            })
            .clone()
    }
}

/// The continue token: serve.py's, `urlsafe_b64encode(json.dumps({"rv", "start", "ns"}))`.
fn continue_token(r0: u64, start: usize, ns: Option<&str>) -> String {
    let ns = ns.map_or("null".to_string(), |n| format!("\"{n}\""));
    let j = format!("{{\"rv\": {r0}, \"start\": {start}, \"ns\": {ns}}}");
    base64::engine::general_purpose::URL_SAFE.encode(j)
}

/// The start index of a continue token issued for `ns` at `r0`.
fn parse_continue(tok: &str, r0: u64, ns: Option<&str>) -> Option<usize> {
    let b = base64::engine::general_purpose::URL_SAFE.decode(tok).ok()?;
    let v: Value = serde_json::from_slice(&b).ok()?;
    let start = v.get("start")?.as_u64()?;
    let same_ns = match (v.get("ns"), ns) {
        (Some(Value::Null) | None, None) => true,
        (Some(Value::String(a)), Some(b)) => a == b,
        _ => false,
    };
    (same_ns && v.get("rv")?.as_u64()? == r0).then_some(start as usize)
}

fn render_json_list(wl: &Workload, idx: &[usize], cont: Option<(String, usize)>) -> Bytes {
    let mut meta = format!("\"resourceVersion\":\"{}\"", wl.r0);
    if let Some((tok, remaining)) = cont {
        meta.push_str(&format!(
            ",\"continue\":\"{tok}\",\"remainingItemCount\":{remaining}"
        ));
    }
    let size: usize = idx.iter().map(|&i| wl.json.item(i).len() + 1).sum();
    let mut b = Vec::with_capacity(size + 128);
    b.extend_from_slice(b"{\"apiVersion\":\"v1\",\"kind\":\"PodList\",\"metadata\":{");
    b.extend_from_slice(meta.as_bytes());
    b.extend_from_slice(b"},\"items\":[");
    for (k, &i) in idx.iter().enumerate() {
        if k > 0 {
            b.push(b',');
        }
        b.extend_from_slice(wl.json.item(i));
    }
    b.extend_from_slice(b"]}");
    Bytes::from(b)
}

fn render_pb_list(
    wl: &Workload,
    idx: &[usize],
    cont: Option<(String, usize)>,
) -> Result<Bytes, protobuf::ProtobufError> {
    let mut meta = json!({"resourceVersion": wl.r0.to_string()});
    if let Some((tok, remaining)) = cont {
        meta["continue"] = json!(tok);
        meta["remainingItemCount"] = json!(remaining);
    }
    let items = idx.iter().map(|&i| wl.pb.item(i));
    Ok(Bytes::from(protobuf::encode_list_of_messages(
        "v1", "Pod", &meta, items,
    )?))
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let t0 = std::time::Instant::now();
    let path = req.uri().to_string();
    let method = req.method().clone();
    let r = route(&state, req);
    if state.opts.log {
        let len = hyper::body::Body::size_hint(r.body()).exact();
        let len = len.map_or("stream".to_string(), |n| n.to_string());
        eprintln!(
            "serve: {method} {path} {} {len} {:.3}",
            r.status().as_u16(),
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(r)
}

fn route(state: &Arc<State>, req: Request<Incoming>) -> Response<Body> {
    if req.method() != Method::GET {
        return status(405, "MethodNotAllowed", "the server allows only GET here");
    }
    let query = Query::parse(req.uri().query());
    let raw_path = req.uri().path();
    let path = match raw_path.trim_end_matches('/') {
        "" => "/",
        p => p,
    };
    if let Some(d) = state.docs.get(path) {
        return resp::json_bytes(200, d.clone());
    }
    if matches!(path, "/healthz" | "/readyz" | "/livez") {
        return resp::full(200, "text/plain", Bytes::from_static(b"ok"));
    }
    let parts: Vec<&str> = path.split('/').collect();
    let ns = if path == "/api/v1/pods" {
        None
    } else if parts.len() == 6
        && parts[..4] == ["", "api", "v1", "namespaces"]
        && parts[5] == "pods"
    {
        Some(parts[4].to_string())
    } else {
        return status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
    };
    let pb = matches!(
        negotiation::negotiate(req.headers(), &query, true),
        Ok(Repr::Protobuf)
    );
    if matches!(
        query.get("watch").map(str::to_lowercase).as_deref(),
        Some("1" | "true")
    ) {
        return watch(state, ns.as_deref(), &query, pb);
    }
    list(state, ns.as_deref(), &query, pb, req.headers())
}

fn list(
    state: &State,
    ns: Option<&str>,
    q: &Query,
    pb: bool,
    _headers: &HeaderMap,
) -> Response<Body> {
    let wl = &state.wl;
    let view = ns.map(|n| state.ns_view(n));
    let n_items = view.as_ref().map_or(wl.n, |v| v.items.len());
    let limit = match q.get("limit").filter(|s| !s.is_empty()) {
        None => 0,
        Some(s) => match s.trim().parse::<i64>() {
            Ok(l) => l,
            Err(_) => return status(400, "BadRequest", "invalid limit"),
        },
    };
    let cont = q.get("continue").unwrap_or("");
    let render = |idx: &[usize], c: Option<(String, usize)>| -> Response<Body> {
        if pb {
            match render_pb_list(wl, idx, c) {
                Ok(b) => resp::full(200, PROTOBUF, b),
                Err(e) => status(500, "InternalError", &e.to_string()),
            }
        } else {
            resp::json_bytes(200, render_json_list(wl, idx, c))
        }
    };
    let idx_of = |a: usize, b: usize| -> Vec<usize> {
        match &view {
            Some(v) => v.items[a..b].to_vec(),
            None => (a..b).collect(),
        }
    };
    if q.get("resourceVersion") == Some("0") || (limit <= 0 && cont.is_empty()) {
        if view.is_none() {
            let b = if pb { &state.full_pb } else { &state.full_json };
            let ct = if pb { PROTOBUF } else { "application/json" };
            return resp::full(200, ct, b.clone());
        }
        return render(&idx_of(0, n_items), None);
    }
    let mut start = 0;
    if !cont.is_empty() {
        match parse_continue(cont, wl.r0, ns) {
            Some(s) if s <= n_items => start = s,
            _ => return status(400, "BadRequest", "invalid continue token"),
        }
    }
    let end = if limit <= 0 {
        n_items
    } else {
        n_items.min(start + limit as usize)
    };
    let c = (end < n_items).then(|| (continue_token(wl.r0, end, ns), n_items - end));
    render(&idx_of(start, end), c)
}

/// Where a watch starts and what it sends.
struct Plan {
    /// List items sent as ADDED first.
    pre: Vec<usize>,
    /// The BOOKMARK `k8s.io/initial-events-end` after them (watch-list).
    initial_end: bool,
    /// Events sent (indices into the workload's).
    events: Vec<usize>,
    /// The BOOKMARK at the sentinel's RV at the end.
    bookmark: bool,
    pb: bool,
    deadline: Instant,
}

fn watch(state: &Arc<State>, ns: Option<&str>, q: &Query, pb: bool) -> Response<Body> {
    let wl = &state.wl;
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or(60);
    let deadline = Instant::now() + Duration::from_secs(timeout.clamp(0, 300) as u64);
    let view = ns.map(|n| state.ns_view(n));
    let items: Vec<usize> = view
        .as_ref()
        .map_or_else(|| (0..wl.n).collect(), |v| v.items.clone());
    let events: Vec<usize> = view
        .as_ref()
        .map_or_else(|| (0..wl.ev_rvs.len()).collect(), |v| v.events.clone());
    let rv_s = q.get("resourceVersion").unwrap_or("");
    let initial = q.get("sendInitialEvents").map(str::to_lowercase).as_deref() == Some("true");
    let bookmarks = q
        .get("allowWatchBookmarks")
        .map(str::to_lowercase)
        .as_deref()
        == Some("true");
    let (pre, ev_from) = if initial || rv_s.is_empty() || rv_s == "0" {
        (items, 0)
    } else {
        let Ok(r) = rv_s.trim().parse::<i64>() else {
            return status(
                400,
                "BadRequest",
                &format!("invalid resourceVersion '{rv_s}'"),
            );
        };
        if r < RV_BASE as i64 {
            let st = status_obj(
                410,
                "Expired",
                &format!("too old resource version: {r} ({})", wl.r0),
            );
            let body = if pb {
                protobuf::encode_object_as("v1", "Status", &st)
                    .and_then(|o| protobuf::watch_frame("ERROR", &o))
                    .unwrap_or_default()
            } else {
                let mut b =
                    serde_json::to_vec(&json!({"type": "ERROR", "object": st})).unwrap_or_default();
                b.push(b'\n');
                b
            };
            let (tx, rx) = mpsc::channel(1);
            // The channel has room for this one chunk.
            let _ = tx.try_send(Bytes::from(body));
            return streamed(rx, pb);
        }
        let r = r as u64;
        let pre = if r < wl.r0 {
            let from = items.partition_point(|&i| wl.item_rvs[i] <= r);
            items[from..].to_vec()
        } else {
            Vec::new()
        };
        (pre, events.partition_point(|&i| wl.ev_rvs[i] <= r))
    };
    let plan = Plan {
        pre,
        initial_end: initial,
        bookmark: bookmarks && ev_from < events.len(),
        events: events[ev_from..].to_vec(),
        pb,
        deadline,
    };
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(pump(state.clone(), plan, tx));
    streamed(rx, pb)
}

fn streamed(rx: mpsc::Receiver<Bytes>, pb: bool) -> Response<Body> {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, BodyError>(Frame::data(b)), rx))
    });
    let mut r = Response::new(StreamBody::new(stream).boxed_unsync());
    let ct = if pb {
        PROTOBUF_WATCH
    } else {
        "application/json"
    };
    r.headers_mut()
        .insert(header::CONTENT_TYPE, http::HeaderValue::from_static(ct));
    r
}

/// Fills 256 KB chunks from segments (slicing, not copying, a long segment met on a chunk
/// boundary).
struct Chunker {
    buf: BytesMut,
}

impl Chunker {
    fn push(&mut self, mut seg: Bytes, out: &mut Vec<Bytes>) {
        while !seg.is_empty() {
            if self.buf.is_empty() && seg.len() >= CHUNK {
                out.push(seg.split_to(CHUNK));
                continue;
            }
            let take = (CHUNK - self.buf.len()).min(seg.len());
            self.buf.extend_from_slice(&seg[..take]);
            seg.advance(take);
            if self.buf.len() == CHUNK {
                out.push(self.buf.split().freeze());
            }
        }
    }
}

fn bookmark(rv: u64, initial_end: bool, pb: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let obj = json!({"kind": "Pod", "apiVersion": "v1", "metadata": meta});
    if pb {
        // A Pod with metadata only is always in the schema.
        return Bytes::from(
            protobuf::encode_object_as("v1", "Pod", &obj)
                .and_then(|o| protobuf::watch_frame("BOOKMARK", &o))
                .unwrap_or_default(),
        );
    }
    let mut b = serde_json::to_vec(&json!({"type": "BOOKMARK", "object": obj})).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

/// Segments of the events `idx` (one slice when they are contiguous: the unfiltered watch).
fn event_segments(r: &Rendered, idx: &[usize]) -> Vec<Bytes> {
    match (idx.first(), idx.last()) {
        (Some(&a), Some(&b)) if b - a + 1 == idx.len() => {
            vec![r.events.slice(r.ev_off[a]..r.ev_off[b + 1])]
        }
        _ => idx.iter().map(|&i| r.event(i)).collect(),
    }
}

/// Sends a watch's chunks, then holds the watch open, silent, until its deadline or until the
/// client hangs up (serve.py's `hold_until`).
async fn pump(state: Arc<State>, plan: Plan, tx: mpsc::Sender<Bytes>) {
    let wl = &state.wl;
    let r = if plan.pb { &wl.pb } else { &wl.json };
    let mut ch = Chunker {
        buf: BytesMut::with_capacity(CHUNK),
    };
    let mut out = Vec::new();
    let mut timed_out = false;
    // Sends what is full; false when the client is gone or the deadline passed.
    macro_rules! flush {
        () => {
            for c in out.drain(..) {
                if tx.send(c).await.is_err() {
                    return;
                }
                if Instant::now() >= plan.deadline {
                    timed_out = true;
                }
            }
        };
    }
    const ADDED: &[u8] = br#"{"type":"ADDED","object":"#;
    for &i in &plan.pre {
        let seg = if plan.pb {
            match protobuf::watch_frame("ADDED", &protobuf::envelope_raw("v1", "Pod", r.item(i))) {
                Ok(f) => Bytes::from(f),
                Err(_) => return,
            }
        } else {
            let it = r.item(i);
            let mut b = Vec::with_capacity(ADDED.len() + it.len() + 2);
            b.extend_from_slice(ADDED);
            b.extend_from_slice(it);
            b.extend_from_slice(b"}\n");
            Bytes::from(b)
        };
        ch.push(seg, &mut out);
        flush!();
        if timed_out {
            break;
        }
    }
    if plan.initial_end && !timed_out {
        ch.push(bookmark(wl.r0, true, plan.pb), &mut out);
    }
    if !timed_out {
        for seg in event_segments(r, &plan.events) {
            let mut parts = Vec::new();
            ch.push(seg, &mut parts);
            for c in parts {
                out.push(c);
                flush!();
                if timed_out {
                    break;
                }
            }
            if timed_out {
                break;
            }
        }
        if !timed_out && plan.bookmark {
            ch.push(bookmark(wl.last_rv, false, plan.pb), &mut out);
        }
    }
    if !ch.buf.is_empty() {
        out.push(ch.buf.split().freeze());
    }
    flush!();
    if !timed_out {
        tokio::select! {
            _ = tokio::time::sleep_until(plan.deadline) => {}
            _ = tx.closed() => {}
        }
    }
}
