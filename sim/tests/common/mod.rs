//! Helpers shared by the integration tests: raw HTTP requests, raw watch streams, deadlines.
#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kinformer_sim::{Sim, SimConfig};
use serde_json::Value;
use tokio::net::TcpStream;

/// Generous upper bound for anything a test waits on (only to avoid hanging forever).
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Starts a sim with the default config.
pub async fn sim() -> Sim {
    Sim::start(SimConfig::default()).await.expect("sim starts")
}

/// A kube client without the default retry of 429/503, to observe injected errors directly.
pub fn client_without_retry(sim: &Sim) -> kube::Client {
    let mut cfg = sim.kube_config();
    cfg.default_retry = false;
    kube::Client::try_from(cfg).expect("client")
}

/// A raw HTTP response.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

async fn send(sim: &Sim, req: http::Request<Full<Bytes>>) -> http::Response<Incoming> {
    let stream = TcpStream::connect(sim.addr()).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await.expect("request")
}

/// Sends one request on a fresh connection and reads the whole response.
pub async fn raw(
    sim: &Sim,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> RawResponse {
    let mut b = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", sim.addr().to_string());
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(body.into())).expect("request");
    let resp = tokio::time::timeout(DEADLINE, send(sim, req))
        .await
        .expect("response in time");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = tokio::time::timeout(DEADLINE, resp.into_body().collect())
        .await
        .expect("body in time")
        .expect("body")
        .to_bytes()
        .to_vec();
    RawResponse {
        status,
        headers,
        body,
    }
}

/// GET returning JSON.
pub async fn get_json(sim: &Sim, path: &str) -> (u16, Value) {
    let r = raw(sim, "GET", path, &[], Bytes::new()).await;
    (r.status, r.json())
}

/// What a raw watch yields.
#[derive(Debug, Clone, PartialEq)]
pub enum Chunk {
    /// A complete line (without the newline).
    Line(String),
    /// The stream ended cleanly; the bytes left over without a newline, if any.
    End(String),
    /// The connection broke (no terminating chunk); leftover bytes without a newline.
    Broken(String),
}

/// Opens a raw watch (the path must include `watch=true`) and yields its lines.
pub async fn raw_watch(sim: &Sim, path: &str) -> (u16, impl Stream<Item = Chunk> + Unpin + use<>) {
    let req = http::Request::builder()
        .method("GET")
        .uri(path)
        .header("host", sim.addr().to_string())
        .body(Full::new(Bytes::new()))
        .expect("request");
    let resp = tokio::time::timeout(DEADLINE, send(sim, req))
        .await
        .expect("response in time");
    let status = resp.status().as_u16();
    let body = resp.into_body();
    let s = futures::stream::unfold(
        (body, Vec::<u8>::new(), Vec::<Chunk>::new(), false),
        |(mut body, mut buf, mut pending, mut done)| async move {
            loop {
                if !pending.is_empty() {
                    let c = pending.remove(0);
                    return Some((c, (body, buf, pending, done)));
                }
                if done {
                    return None;
                }
                match body.frame().await {
                    Some(Ok(f)) => {
                        if let Ok(data) = f.into_data() {
                            buf.extend_from_slice(&data);
                            while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                                let line: Vec<u8> = buf.drain(..=i).collect();
                                pending.push(Chunk::Line(
                                    String::from_utf8_lossy(&line[..line.len() - 1]).into_owned(),
                                ));
                            }
                        }
                    }
                    Some(Err(_)) => {
                        pending.push(Chunk::Broken(String::from_utf8_lossy(&buf).into_owned()));
                        done = true;
                    }
                    None => {
                        pending.push(Chunk::End(String::from_utf8_lossy(&buf).into_owned()));
                        done = true;
                    }
                }
            }
        },
    );
    (status, Box::pin(s))
}

/// The next item of a stream, failing the test after [`DEADLINE`].
pub async fn next<S: Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    tokio::time::timeout(DEADLINE, s.next())
        .await
        .expect("stream item in time")
}

/// The next raw watch line parsed as JSON (panics on anything else).
pub async fn next_event<S: Stream<Item = Chunk> + Unpin>(s: &mut S) -> Value {
    match next(s).await {
        Some(Chunk::Line(l)) => {
            serde_json::from_str(&l).unwrap_or_else(|e| panic!("bad event line ({e}): {l}"))
        }
        other => panic!("expected an event line, got {other:?}"),
    }
}

/// Waits until the sim has exactly `n` open watches.
pub async fn wait_open_watches(sim: &Sim, n: u64) {
    let req = sim.requests();
    kinformer_sim::wait_until(DEADLINE, || req.open_watches() == n)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "open watches never reached {n} (now {})",
                req.open_watches()
            )
        });
}
