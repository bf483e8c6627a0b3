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
