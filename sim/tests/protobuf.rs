//! Protobuf answers (`Accept: application/vnd.kubernetes.protobuf, application/json`, what
//! client-go sends for built-in kinds): GET, LIST and WATCH of a kind the sim encodes, read
//! back with a small protobuf reader; `q`-values honoured; kinds it does not encode answered
//! as JSON, the client's next choice.

use crate::common;
use crate::common::{DEADLINE, raw};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use prost::encoding::{WireType, decode_key, decode_varint};
use serde_json::json;
use tokio::net::TcpStream;

const ACCEPT: &str = "application/vnd.kubernetes.protobuf, application/json";
const CMS: &str = "/api/v1/namespaces/default/configmaps";

/// A field value: a varint (not looked at) or length-delimited bytes.
#[derive(Debug, Clone)]
enum V {
    Int,
    Bytes(Vec<u8>),
}

/// The fields of a message, in wire order.
fn fields(mut b: &[u8]) -> Vec<(u32, V)> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let (n, wt) = decode_key(&mut b).expect("key");
        match wt {
            WireType::Varint => {
                decode_varint(&mut b).expect("varint");
                out.push((n, V::Int));
            }
            WireType::LengthDelimited => {
                let len = usize::try_from(decode_varint(&mut b).expect("len")).unwrap();
                out.push((n, V::Bytes(b[..len].to_vec())));
                b = &b[len..];
            }
            other => panic!("unexpected wire type {other:?}"),
        }
    }
    out
}

fn bytes_of(fs: &[(u32, V)], n: u32) -> Vec<Vec<u8>> {
    fs.iter()
        .filter_map(|(k, v)| match (k, v) {
            (k, V::Bytes(b)) if *k == n => Some(b.clone()),
            _ => None,
        })
        .collect()
}

fn str_of(fs: &[(u32, V)], n: u32) -> String {
    String::from_utf8(bytes_of(fs, n).pop().unwrap_or_default()).unwrap()
}

/// `k8s\0` + `runtime.Unknown`: (apiVersion, kind, raw).
fn unwrap_envelope(body: &[u8]) -> (String, String, Vec<u8>) {
    let data = body.strip_prefix(b"k8s\0").expect("the k8s\\0 prefix");
    let fs = fields(data);
    let tm = fields(&bytes_of(&fs, 1)[0]);
    (str_of(&tm, 1), str_of(&tm, 2), bytes_of(&fs, 2)[0].clone())
}

/// A ConfigMap message: (name, data).
fn config_map(raw: &[u8]) -> (String, Vec<(String, String)>) {
    let fs = fields(raw);
    let meta = fields(&bytes_of(&fs, 1)[0]);
    let data = bytes_of(&fs, 2)
        .iter()
        .map(|e| {
            let e = fields(e);
            (str_of(&e, 1), str_of(&e, 2))
        })
        .collect();
    (str_of(&meta, 1), data)
}

async fn create(sim: &kinformer_sim::Sim, name: &str) {
    let r = raw(
        sim,
        "POST",
        CMS,
        &[("content-type", "application/json")],
        json!({"metadata": {"name": name}, "data": {"k": name}}).to_string(),
    )
    .await;
    assert_eq!(r.status, 201);
}

fn content_type(r: &common::RawResponse) -> &str {
    r.headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[tokio::test]
async fn get_and_list_answer_protobuf_when_the_client_prefers_it() {
    let sim = common::sim().await;
    create(&sim, "a").await;
    create(&sim, "b").await;

    let r = raw(&sim, "GET", &format!("{CMS}/a"), &[("accept", ACCEPT)], "").await;
    assert_eq!(r.status, 200);
    assert_eq!(content_type(&r), "application/vnd.kubernetes.protobuf");
    let (api_version, kind, raw_obj) = unwrap_envelope(&r.body);
    assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "ConfigMap"));
    assert_eq!(
        config_map(&raw_obj),
        ("a".into(), vec![("k".into(), "a".into())])
    );

    let r = raw(&sim, "GET", CMS, &[("accept", ACCEPT)], "").await;
    assert_eq!(content_type(&r), "application/vnd.kubernetes.protobuf");
    let (_, kind, raw_list) = unwrap_envelope(&r.body);
    assert_eq!(kind, "ConfigMapList");
    let fs = fields(&raw_list);
    let list_meta = fields(&bytes_of(&fs, 1)[0]);
    assert_eq!(str_of(&list_meta, 2), sim.resource_version().to_string());
    let names: Vec<String> = bytes_of(&fs, 2).iter().map(|i| config_map(i).0).collect();
    assert_eq!(names, ["a", "b"]);

    // q-values: JSON weighs more here.
    let r = raw(
        &sim,
        "GET",
        &format!("{CMS}/a"),
        &[(
            "accept",
            "application/vnd.kubernetes.protobuf;q=0.5, application/json",
        )],
        "",
    )
    .await;
    assert_eq!(content_type(&r), "application/json");
    assert_eq!(r.json()["metadata"]["name"], "a");
    // Only protobuf, for a kind the sim does not encode: 406, as for any unservable type.
    let r = raw(
        &sim,
        "GET",
        "/apis/apps/v1/namespaces/default/deployments",
        &[("accept", "application/vnd.kubernetes.protobuf")],
        "",
    )
    .await;
    assert_eq!(r.status, 406);
    // With JSON as the client's second choice it gets JSON.
    let r = raw(
        &sim,
        "GET",
        "/apis/apps/v1/namespaces/default/deployments",
        &[("accept", ACCEPT)],
        "",
    )
    .await;
    assert_eq!((r.status, content_type(&r)), (200, "application/json"));
    sim.shutdown().await;
}

#[tokio::test]
async fn watch_frames_are_length_prefixed_protobuf_watch_events() {
    let sim = common::sim().await;
    let rv = sim.resource_version();
    let stream = TcpStream::connect(sim.addr()).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::builder()
        .uri(format!("{CMS}?watch=true&resourceVersion={rv}"))
        .header("host", sim.addr().to_string())
        .header("accept", ACCEPT)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()["content-type"],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    create(&sim, "w").await;
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let frame = tokio::time::timeout(DEADLINE, async {
        loop {
            if buf.len() >= 4 {
                let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                if buf.len() >= 4 + len {
                    return buf[4..4 + len].to_vec();
                }
            }
            let f = body.frame().await.expect("a frame").expect("no error");
            if let Ok(d) = f.into_data() {
                buf.extend_from_slice(&d);
            }
        }
    })
    .await
    .expect("an event in time");
    let ev = fields(&frame);
    assert_eq!(str_of(&ev, 1), "ADDED");
    let ext = fields(&bytes_of(&ev, 2)[0]);
    let (api_version, kind, raw_obj) = unwrap_envelope(&bytes_of(&ext, 1)[0]);
    assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "ConfigMap"));
    assert_eq!(config_map(&raw_obj).0, "w");
    sim.shutdown().await;
}

// The faults in protobuf form (issue 27 item 3): what a client that prefers protobuf meets.

/// Opens a protobuf watch of `path_and_query` and returns its body.
async fn pb_watch(sim: &kinformer_sim::Sim, path_and_query: &str) -> hyper::body::Incoming {
    let stream = TcpStream::connect(sim.addr()).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::builder()
        .uri(path_and_query)
        .header("host", sim.addr().to_string())
        .header("accept", ACCEPT)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()["content-type"],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    resp.into_body()
}

/// The next frame of a protobuf watch body (`buf` keeps what was read past it). A length over
/// 1 MiB is no frame the sim writes for these tests: the bytes are not protobuf framing (a
/// JSON line's first bytes read as a length of about 2 GB).
async fn next_frame(body: &mut hyper::body::Incoming, buf: &mut Vec<u8>) -> Vec<u8> {
    tokio::time::timeout(DEADLINE, async {
        loop {
            if buf.len() >= 4 {
                let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                assert!(
                    len < 1 << 20,
                    "a frame length of {len}: not protobuf framing ({:?})",
                    String::from_utf8_lossy(&buf[..buf.len().min(60)])
                );
                if buf.len() >= 4 + len {
                    let frame = buf[4..4 + len].to_vec();
                    buf.drain(..4 + len);
                    return frame;
                }
            }
            let f = body.frame().await.expect("a frame").expect("no error");
            if let Ok(d) = f.into_data() {
                buf.extend_from_slice(&d);
            }
        }
    })
    .await
    .expect("a frame in time")
}

#[tokio::test]
async fn a_malformed_event_in_a_protobuf_watch_is_a_frame_whose_object_does_not_decode() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let sim = common::sim().await;
    let rv = sim.resource_version();
    let mut body = pb_watch(&sim, &format!("{CMS}?watch=true&resourceVersion={rv}")).await;
    sim.faults().malformed_next_event_of("configmaps");
    create(&sim, "w").await;
    let mut buf = Vec::new();
    // The malformed event: a well-formed frame and WatchEvent, its object enveloped as a
    // ConfigMap, whose message is broken wire data (a read error, as a JSON line that does not
    // parse is a decode error).
    let frame = next_frame(&mut body, &mut buf).await;
    let ev = kinformer::protobuf::watch_event(&frame).expect("a WatchEvent");
    assert_eq!(ev.event_type, "MODIFIED");
    let env = kinformer::protobuf::envelope(ev.object).expect("an envelope");
    assert_eq!((env.api_version, env.kind), ("v1", "ConfigMap"));
    let err = kinformer::protobuf::decode::<ConfigMap>(ev.object).expect_err("must not decode");
    assert!(err.is_malformed(), "{err:?}");
    // The stream stays in step: the event itself follows.
    let frame = next_frame(&mut body, &mut buf).await;
    let ev = kinformer::protobuf::watch_event(&frame).expect("a WatchEvent");
    assert_eq!(ev.event_type, "ADDED");
    let cm: ConfigMap = kinformer::protobuf::decode(ev.object).expect("the event decodes");
    assert_eq!(cm.metadata.name.as_deref(), Some("w"));
    let faults = sim.faults();
    assert_eq!(faults.counters().malformed_events, 1);
    assert_eq!(faults.protobuf_counters().malformed_events, 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn protobuf_watches_cut_expire_and_end_watch_lists_in_protobuf() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let sim = common::sim().await;
    create(&sim, "a").await;
    let faults = sim.faults();
    // A watch-list: the initial ADDED, then the end bookmark, both frames.
    let mut body = pb_watch(
        &sim,
        &format!(
            "{CMS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
        ),
    )
    .await;
    let mut buf = Vec::new();
    let frame = next_frame(&mut body, &mut buf).await;
    assert_eq!(
        kinformer::protobuf::watch_event(&frame).unwrap().event_type,
        "ADDED"
    );
    let frame = next_frame(&mut body, &mut buf).await;
    let ev = kinformer::protobuf::watch_event(&frame).unwrap();
    assert_eq!(ev.event_type, "BOOKMARK");
    let mark: ConfigMap = kinformer::protobuf::decode(ev.object).expect("the bookmark decodes");
    assert_eq!(
        mark.metadata
            .annotations
            .unwrap_or_default()
            .get("k8s.io/initial-events-end")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        mark.metadata.resource_version,
        Some(sim.resource_version().to_string())
    );
    // Objects without their resourceVersion, in a protobuf event.
    faults.strip_resource_versions(true);
    create(&sim, "b").await;
    let frame = next_frame(&mut body, &mut buf).await;
    let ev = kinformer::protobuf::watch_event(&frame).unwrap();
    let cm: ConfigMap = kinformer::protobuf::decode(ev.object).unwrap();
    assert_eq!(
        (cm.metadata.name.as_deref(), cm.metadata.resource_version),
        (Some("b"), None)
    );
    faults.strip_resource_versions(false);
    // ERROR 410: a protobuf Status frame.
    faults.expire_watches();
    let frame = next_frame(&mut body, &mut buf).await;
    let ev = kinformer::protobuf::watch_event(&frame).unwrap();
    assert_eq!(ev.event_type, "ERROR");
    let status: kube::core::Status = kinformer::protobuf::decode(ev.object).unwrap();
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
    // Cut mid-object: half a frame, then the connection breaks.
    let rv = sim.resource_version();
    let mut body = pb_watch(&sim, &format!("{CMS}?watch=true&resourceVersion={rv}")).await;
    faults.close_mid_object_next_of("configmaps");
    create(&sim, "c").await;
    let mut got = Vec::new();
    let broke = tokio::time::timeout(DEADLINE, async {
        loop {
            match body.frame().await {
                Some(Ok(f)) => got.extend_from_slice(&f.into_data().unwrap_or_default()),
                Some(Err(_)) => return true,
                None => return false,
            }
        }
    })
    .await
    .expect("the stream ends in time");
    assert!(broke, "the connection is cut, not ended cleanly");
    let len = u32::from_be_bytes([got[0], got[1], got[2], got[3]]) as usize;
    assert!(
        got.len() > 4 && got.len() < 4 + len,
        "half a frame: {} bytes of {len}",
        got.len() - 4
    );
    let pc = faults.protobuf_counters();
    assert_eq!(
        (
            pc.objects_without_resource_version,
            pc.watches_expired,
            pc.closed_mid_object
        ),
        (1, 1, 1),
        "{pc:?}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn failed_protobuf_lists_and_watches_answer_a_protobuf_status() {
    use kinformer_sim::{ExpireMode, Verb};
    let sim = common::sim().await;
    let faults = sim.faults();
    let pb = [("accept", ACCEPT)];
    let status_of = |r: &common::RawResponse| -> kube::core::Status {
        assert_eq!(content_type(r), "application/vnd.kubernetes.protobuf");
        kinformer::protobuf::decode(&r.body).expect("a protobuf Status")
    };
    faults.fail_next_lists(1, 500);
    let r = raw(&sim, "GET", CMS, &pb, "").await;
    assert_eq!((r.status, status_of(&r).code), (500, 500));
    // 429 with Retry-After, in the header and in the Status's details.
    faults.throttle(None, &[Verb::Watch], Some(1), 3);
    let r = raw(&sim, "GET", &format!("{CMS}?watch=true"), &pb, "").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.headers["retry-after"], "3");
    let s = status_of(&r);
    assert_eq!(s.reason, "TooManyRequests");
    assert_eq!(s.details.map(|d| d.retry_after_seconds), Some(3));
    // 410 over HTTP, and the 422 of a refused watch-list.
    faults.expire_every_watch(Some(ExpireMode::Http));
    let r = raw(
        &sim,
        "GET",
        &format!("{CMS}?watch=true&resourceVersion=1"),
        &pb,
        "",
    )
    .await;
    assert_eq!((r.status, status_of(&r).reason.as_str()), (410, "Expired"));
    faults.expire_every_watch(None);
    faults.reject_watch_list(true);
    let r = raw(
        &sim,
        "GET",
        &format!("{CMS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
        &pb,
        "",
    )
    .await;
    assert_eq!((r.status, status_of(&r).code), (422, 422));
    // A JSON client, and a kind the sim does not serve in protobuf, get JSON Statuses.
    faults.fail_next_lists(2, 500);
    let r = raw(&sim, "GET", CMS, &[("accept", "application/json")], "").await;
    assert_eq!((r.status, content_type(&r)), (500, "application/json"));
    let r = raw(&sim, "GET", "/apis/apps/v1/deployments", &pb, "").await;
    assert_eq!((r.status, content_type(&r)), (500, "application/json"));
    let (all, pc) = (faults.counters(), faults.protobuf_counters());
    assert_eq!((all.lists_failed, pc.lists_failed), (3, 1));
    assert_eq!((all.throttled, pc.throttled), (1, 1));
    assert_eq!(pc.watches_failed, 1);
    assert_eq!(pc.watches_refused_expired, 1);
    assert_eq!(pc.watch_lists_rejected, 1);
    // None of these was a success served in protobuf.
    let req = sim.requests();
    assert_eq!(
        (
            req.protobuf_count("configmaps", Verb::List),
            req.protobuf_count("configmaps", Verb::Watch)
        ),
        (0, 0)
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn protobuf_answers_are_counted_by_resource_and_verb() {
    use kinformer_sim::Verb;
    let sim = common::sim().await;
    create(&sim, "a").await;
    let req = sim.requests();
    let pb = [("accept", ACCEPT)];
    let r = raw(&sim, "GET", CMS, &pb, "").await;
    assert_eq!(content_type(&r), "application/vnd.kubernetes.protobuf");
    let r = raw(&sim, "GET", CMS, &[("accept", "application/json")], "").await;
    assert_eq!(content_type(&r), "application/json");
    let r = raw(&sim, "GET", &format!("{CMS}/a"), &pb, "").await;
    assert_eq!(r.status, 200);
    // A kind answered in JSON although protobuf was preferred: not counted.
    raw(&sim, "GET", "/apis/apps/v1/deployments", &pb, "").await;
    let body = pb_watch(&sim, &format!("{CMS}?watch=true&resourceVersion=1")).await;
    drop(body);
    assert_eq!(req.protobuf_count("configmaps", Verb::List), 1);
    assert_eq!(req.protobuf_count("configmaps", Verb::Get), 1);
    assert_eq!(req.protobuf_count("configmaps", Verb::Watch), 1);
    assert_eq!(req.protobuf_count("deployments", Verb::List), 0);
    assert_eq!(req.protobuf_count_verb(Verb::List), 1);
    assert_eq!(req.count("configmaps", Verb::List), 2);
    sim.shutdown().await;
}
