//! The bench twin (`kinformer_sim::bench`, the `kinformer-bench-serve` binary) against the
//! shared bench's own server, `serve.py`: for the same seed, every list item and watch event
//! the twin answers in JSON equals serve.py's (parsed as JSON values), and its protobuf answers
//! decode (through the sim's decoder) to the same objects. Skipped, with the reason printed,
//! when python3 or serve.py is missing (`BENCH_SERVE_PY` names it; default
//! `/work/shared/bench/serve.py`, else `../shared/bench/serve.py` from the repository).

use std::path::PathBuf;
use std::process::Stdio;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use kinformer_sim::bench::{
    ServeOptions, Server, Workload, decode_protobuf_list, decode_protobuf_watch,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::common::DEADLINE;

const N: usize = 250;
const M: usize = 500;
const PB: &str = "application/vnd.kubernetes.protobuf, application/json";

fn serve_py() -> Result<PathBuf, String> {
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("BENCH_SERVE_PY") {
        candidates.push(PathBuf::from(p));
    }
    candidates.push(PathBuf::from("/work/shared/bench/serve.py"));
    candidates.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/bench/serve.py"));
    let Some(p) = candidates.into_iter().find(|p| p.is_file()) else {
        return Err("serve.py not found (set BENCH_SERVE_PY)".into());
    };
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output();
    if !python.is_ok_and(|o| o.status.success()) {
        return Err("python3 not found".into());
    }
    Ok(p)
}

/// serve.py's `serving ...` line as key=value pairs.
fn fields(line: &str) -> Vec<(String, String)> {
    line.split_whitespace()
        .skip(1)
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

struct Answer {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

async fn get(port: u16, path: &str, accept: Option<&str>) -> Answer {
    let stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut b = http::Request::get(path).header("host", format!("127.0.0.1:{port}"));
    if let Some(a) = accept {
        b = b.header("accept", a);
    }
    let req = b.body(Full::new(Bytes::new())).expect("request");
    let resp = tokio::time::timeout(DEADLINE, tx.send_request(req))
        .await
        .expect("an answer in time")
        .expect("an answer");
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = tokio::time::timeout(DEADLINE, resp.into_body().collect())
        .await
        .expect("the body in time")
        .expect("the body")
        .to_bytes()
        .to_vec();
    Answer {
        status,
        content_type,
        body,
    }
}

fn json_lines(body: &[u8]) -> Vec<Value> {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("a JSON line"))
        .collect()
}

/// A JSON list as (metadata, items).
fn json_list(body: &[u8]) -> (Value, Vec<Value>) {
    let v: Value = serde_json::from_slice(body).expect("a JSON list");
    let items = v["items"].as_array().cloned().unwrap_or_default();
    (v["metadata"].clone(), items)
}

fn watch_values(events: Vec<(String, Value)>) -> Vec<Value> {
    events
        .into_iter()
        .map(|(t, o)| json!({"type": t, "object": o}))
        .collect()
}

#[tokio::test]
async fn the_twin_serves_serve_py_s_objects_in_json_and_protobuf() {
    let script = match serve_py() {
        Ok(p) => p,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let mut py = tokio::process::Command::new("python3")
        .arg(&script)
        .args(["--pods", &N.to_string(), "--events", &M.to_string()])
        .args(["--seed", "3", "--port", "0", "--lifetime", "120", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("serve.py starts");
    let mut out = BufReader::new(py.stdout.take().expect("stdout"));
    let mut line = String::new();
    tokio::time::timeout(DEADLINE, out.read_line(&mut line))
        .await
        .expect("serve.py's line in time")
        .expect("serve.py's line");
    let py_fields = fields(&line);
    let py_port: u16 = py_fields[0].1.parse().expect("port");

    let wl = Workload::generate(N, M, 3).expect("the workload");
    let twin_line = format!(
        "serving port=0 r0={} last_rv={} n={} m={} added={} deleted={} expected_objects={}",
        wl.r0, wl.last_rv, wl.n, wl.m, wl.added, wl.deleted, wl.expected_objects
    );
    // The same summary (serve.py's line, the port aside).
    assert_eq!(fields(&twin_line)[1..], py_fields[1..]);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = Server::new(wl, ServeOptions::default(), port).expect("rendered");
    let twin = tokio::spawn(server.run(listener));

    let info: std::collections::HashMap<_, _> = py_fields.into_iter().collect();
    let (r0, last_rv) = (&info["r0"], &info["last_rv"]);

    // Lists: whole, paginated (following continue tokens), namespaced; JSON and protobuf.
    let mut lists = vec![
        "/api/v1/pods".to_string(),
        "/api/v1/pods?resourceVersion=0&limit=7".to_string(),
        "/api/v1/namespaces/ns-7/pods".to_string(),
    ];
    for start in [
        "/api/v1/pods?limit=64",
        "/api/v1/namespaces/ns-3/pods?limit=1",
    ] {
        let mut cont = String::new();
        for _ in 0..100 {
            let path = if cont.is_empty() {
                start.to_string()
            } else {
                format!("{start}&continue={cont}")
            };
            let a = get(py_port, &path, None).await;
            cont = json_list(&a.body).0["continue"]
                .as_str()
                .unwrap_or("")
                .to_string();
            lists.push(path);
            if cont.is_empty() {
                break;
            }
        }
    }
    assert!(lists.len() > 8, "pages were followed: {lists:?}");
    for path in &lists {
        let want = get(py_port, path, None).await;
        assert_eq!(want.status, 200, "{path}");
        let (want_meta, want_items) = json_list(&want.body);
        assert!(!want_items.is_empty(), "{path}");
        let got = get(port, path, None).await;
        assert_eq!(
            (got.status, got.content_type.as_str()),
            (200, "application/json")
        );
        let (meta, items) = json_list(&got.body);
        assert_eq!(meta, want_meta, "{path}");
        assert_eq!(items.len(), want_items.len(), "{path}");
        for (a, b) in items.iter().zip(&want_items) {
            assert_eq!(a, b, "{path}");
        }
        let got = get(port, path, Some(PB)).await;
        assert_eq!(
            (got.status, got.content_type.as_str()),
            (200, "application/vnd.kubernetes.protobuf")
        );
        assert!(got.body.len() < want.body.len(), "protobuf is smaller");
        let (meta, items) = decode_protobuf_list(&got.body).expect("a PodList");
        assert_eq!(meta, want_meta, "{path}");
        assert_eq!(items, want_items, "{path} as protobuf");
    }

    // Watches: from r0 with a final bookmark, resumed mid-stream, watch-list, namespaced,
    // too old (an ERROR event, 410).
    let all = json_lines(
        &get(
            py_port,
            &format!("/api/v1/pods?watch=1&timeoutSeconds=1&resourceVersion={r0}"),
            None,
        )
        .await
        .body,
    );
    let mid = all[M / 2]["object"]["metadata"]["resourceVersion"]
        .as_str()
        .expect("an RV")
        .to_string();
    let watches = [
        format!("/api/v1/pods?watch=true&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion={r0}"),
        format!("/api/v1/pods?watch=1&timeoutSeconds=1&resourceVersion={mid}"),
        "/api/v1/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion=&timeoutSeconds=1".to_string(),
        format!("/api/v1/namespaces/ns-7/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion={r0}"),
        "/api/v1/pods?watch=1&resourceVersion=5".to_string(),
        // Part of the list's creation history first.
        "/api/v1/pods?watch=1&timeoutSeconds=1&resourceVersion=4000100".to_string(),
    ];
    for path in &watches {
        let want = json_lines(&get(py_port, path, None).await.body);
        assert!(!want.is_empty(), "{path}");
        let got = get(port, path, None).await;
        assert_eq!(got.content_type, "application/json");
        let events = json_lines(&got.body);
        assert_eq!(events.len(), want.len(), "{path}");
        for (a, b) in events.iter().zip(&want) {
            assert_eq!(a, b, "{path}");
        }
        let got = get(port, path, Some(PB)).await;
        assert_eq!(
            got.content_type,
            "application/vnd.kubernetes.protobuf;stream=watch"
        );
        let events = watch_values(decode_protobuf_watch(&got.body).expect("frames"));
        assert_eq!(events, want, "{path} as protobuf");
    }
    let last = all.last().expect("events");
    assert_eq!(last["object"]["metadata"]["name"], "done");
    assert_eq!(
        last["object"]["metadata"]["resourceVersion"],
        json!(last_rv)
    );

    // Discovery and unknown paths answer as serve.py's.
    for path in ["/apis", "/api/v1", "/version", "/api/v1/nodes"] {
        let want = get(py_port, path, None).await;
        let got = get(port, path, None).await;
        assert_eq!(got.status, want.status, "{path}");
        let (a, b): (Value, Value) = (
            serde_json::from_slice(&got.body).expect("JSON"),
            serde_json::from_slice(&want.body).expect("JSON"),
        );
        assert_eq!(a, b, "{path}");
    }
    twin.abort();
    let _ = py.kill().await;
}
