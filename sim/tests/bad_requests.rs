//! Bad requests get the right Status, and the server keeps serving.

use crate::common;

use crate::common::raw;
use bytes::Bytes;
use kinformer_sim::Sim;
use serde_json::json;

async fn expect_status(
    sim: &Sim,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
    code: u16,
    reason: &str,
) {
    let r = raw(sim, method, path, headers, body).await;
    assert_eq!(
        r.status,
        code,
        "{method} {path}: {}",
        String::from_utf8_lossy(&r.body)
    );
    let s = r.json();
    assert_eq!(s["kind"], "Status", "{method} {path}");
    assert_eq!(s["apiVersion"], "v1");
    assert_eq!(s["status"], "Failure");
    assert_eq!(s["code"], code);
    // StatusReasonUnknown is "" and omitted from the JSON.
    assert_eq!(
        s["reason"].as_str().unwrap_or(""),
        reason,
        "{method} {path}"
    );
    assert!(s["message"].as_str().is_some_and(|m| !m.is_empty()));
}

const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test]
async fn malformed_and_invalid_bodies() {
    let sim = common::sim().await;
    let pods = "/api/v1/namespaces/default/pods";
    expect_status(&sim, "POST", pods, &[JSON], "{not json", 400, "BadRequest").await;
    expect_status(&sim, "POST", pods, &[JSON], "[1,2]", 400, "BadRequest").await;
    expect_status(
        &sim,
        "POST",
        pods,
        &[JSON],
        r#"{"apiVersion":"apps/v1","kind":"Pod","metadata":{"name":"a"}}"#,
        400,
        "BadRequest",
    )
    .await;
    expect_status(
        &sim,
        "POST",
        pods,
        &[JSON],
        r#"{"kind":"Service","metadata":{"name":"a"}}"#,
        400,
        "BadRequest",
    )
    .await;
    expect_status(
        &sim,
        "POST",
        pods,
        &[JSON],
        r#"{"metadata":{"name":"a","namespace":"other"}}"#,
        400,
        "BadRequest",
    )
    .await;
    expect_status(
        &sim,
        "POST",
        pods,
        &[JSON],
        r#"{"metadata":{"name":"Bad_Name"}}"#,
        422,
        "Invalid",
    )
    .await;
    expect_status(
        &sim,
        "POST",
        pods,
        &[JSON],
        r#"{"metadata":{}}"#,
        422,
        "Invalid",
    )
    .await;
    expect_status(
        &sim,
        "POST",
        "/api/v1/namespaces",
        &[JSON],
        r#"{"metadata":{"name":"has.dot"}}"#,
        422,
        "Invalid",
    )
    .await;
    // A protobuf envelope with nothing after the magic: kube's protobuf decoder says "empty
    // body", a 400 (request_fidelity.rs covers protobuf bodies).
    expect_status(
        &sim,
        "POST",
        pods,
        &[("content-type", "application/vnd.kubernetes.protobuf")],
        "\x6b\x38\x73\x00",
        400,
        "BadRequest",
    )
    .await;
    // generateName works.
    let r = raw(
        &sim,
        "POST",
        pods,
        &[JSON],
        r#"{"metadata":{"generateName":"gen-"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#,
    )
    .await;
    assert_eq!(r.status, 201);
    assert!(
        r.json()["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("gen-")
    );
    // Update: name mismatch, missing object.
    raw(
        &sim,
        "POST",
        pods,
        &[JSON],
        r#"{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#,
    )
    .await;
    expect_status(
        &sim,
        "PUT",
        &format!("{pods}/p"),
        &[JSON],
        r#"{"metadata":{"name":"q"}}"#,
        400,
        "BadRequest",
    )
    .await;
    expect_status(
        &sim,
        "PUT",
        &format!("{pods}/nope"),
        &[JSON],
        r#"{"metadata":{"name":"nope"}}"#,
        404,
        "NotFound",
    )
    .await;
    // Patches.
    expect_status(
        &sim,
        "PATCH",
        &format!("{pods}/p"),
        &[("content-type", "application/merge-patch+json")],
        "{oops",
        400,
        "BadRequest",
    )
    .await;
    expect_status(
        &sim,
        "PATCH",
        &format!("{pods}/p"),
        &[("content-type", "text/plain")],
        "{}",
        415,
        "UnsupportedMediaType",
    )
    .await;
    expect_status(
        &sim,
        "PATCH",
        &format!("{pods}/p"),
        &[("content-type", "application/json-patch+json")],
        r#"{"op":"add"}"#,
        400,
        "BadRequest",
    )
    .await;
    expect_status(
        &sim,
        "PATCH",
        &format!("{pods}/p"),
        &[("content-type", "application/json-patch+json")],
        r#"[{"op":"remove","path":"/nope"}]"#,
        422,
        "Invalid",
    )
    .await;
    expect_status(
        &sim,
        "PATCH",
        &format!("{pods}/p"),
        &[("content-type", "application/merge-patch+json")],
        r#"{"metadata":{"name":"renamed"}}"#,
        422,
        "Invalid",
    )
    .await;
    expect_status(
        &sim,
        "PATCH",
        &format!("{pods}/p"),
        &[("content-type", "application/apply-patch+yaml")],
        "{}",
        // Apply without a fieldManager: ValidatePatchOptions' 422, not a 400.
        422,
        "Invalid",
    )
    .await;
    expect_status(
        &sim,
        "DELETE",
        &format!("{pods}/p"),
        &[JSON],
        "{bad",
        400,
        "BadRequest",
    )
    .await;
    expect_status(
        &sim,
        "DELETE",
        &format!("{pods}/p"),
        &[JSON],
        r#"{"preconditions":{"uid":"not-it"}}"#,
        409,
        "Conflict",
    )
    .await;
}

#[tokio::test]
async fn unknown_paths_wrong_verbs_and_bad_queries() {
    let sim = common::sim().await;
    expect_status(&sim, "GET", "/api/v1/widgets", &[], "", 404, "NotFound").await;
    expect_status(&sim, "GET", "/apis/nope.io/v1", &[], "", 404, "NotFound").await;
    expect_status(
        &sim,
        "GET",
        "/api/v1/namespaces/default/pods/p/logs",
        &[],
        "",
        404,
        "NotFound",
    )
    .await;
    expect_status(
        &sim,
        "GET",
        "/api/v1/namespaces/default/configmaps/c/status",
        &[],
        "",
        404,
        "NotFound",
    )
    .await;
    expect_status(&sim, "GET", "/api/v1/pods/p", &[], "", 404, "NotFound").await;
    expect_status(&sim, "GET", "/nothing/here", &[], "", 404, "NotFound").await;
    expect_status(
        &sim,
        "POST",
        "/api/v1/namespaces/default/pods/p",
        &[JSON],
        "{}",
        405,
        "MethodNotAllowed",
    )
    .await;
    expect_status(
        &sim,
        "PUT",
        "/api/v1/namespaces/default/pods",
        &[JSON],
        "{}",
        405,
        "MethodNotAllowed",
    )
    .await;
    expect_status(
        &sim,
        "PATCH",
        "/api/v1/namespaces/default/pods",
        &[JSON],
        "{}",
        405,
        "MethodNotAllowed",
    )
    .await;
    expect_status(
        &sim,
        "POST",
        "/api/v1/pods",
        &[JSON],
        "{}",
        405,
        "MethodNotAllowed",
    )
    .await;
    assert_eq!(
        raw(&sim, "HEAD", "/api/v1/namespaces/default/pods", &[], "")
            .await
            .status,
        405
    );
    expect_status(&sim, "POST", "/version", &[], "", 405, "MethodNotAllowed").await;
    expect_status(
        &sim,
        "GET",
        "/api/v1/pods?labelSelector=a%20in%20(",
        &[],
        "",
        400,
        "BadRequest",
    )
    .await;
    expect_status(
        &sim,
        "GET",
        "/api/v1/pods?fieldSelector=spec.nope%3Dx",
        &[],
        "",
        400,
        "BadRequest",
    )
    .await;
    expect_status(
        &sim,
        "GET",
        "/api/v1/pods?limit=abc",
        &[],
        "",
        400,
        "BadRequest",
    )
    .await;
    expect_status(
        &sim,
        "GET",
        "/api/v1/pods?limit=2&continue=garbage",
        &[],
        "",
        400,
        "BadRequest",
    )
    .await;
    expect_status(
        &sim,
        "GET",
        "/api/v1/pods?watch=true&resourceVersion=abc",
        &[],
        "",
        // The watch cache's unconverted InvalidError (kubernetes issue 139485).
        500,
        "",
    )
    .await;
    // An absurd timeout (the largest int64; larger ones are a 400 like kube-apiserver's
    // strconv.ParseInt) is accepted (no overflow), like any other watch.
    let (status, _w) = common::raw_watch(
        &sim,
        "/api/v1/pods?watch=true&timeoutSeconds=9223372036854775807&allowWatchBookmarks=true",
    )
    .await;
    assert_eq!(status, 200);
    expect_status(
        &sim,
        "GET",
        "/api/v1/pods?watch=true&sendInitialEvents=true",
        &[],
        "",
        422,
        "Invalid",
    )
    .await;
    expect_status(
        &sim,
        "GET",
        "/api/v1/pods?resourceVersionMatch=Exact",
        &[],
        "",
        422,
        "Invalid",
    )
    .await;
    expect_status(
        &sim,
        "GET",
        "/apis/apps/v1/deployments",
        &[("accept", "application/vnd.kubernetes.protobuf")],
        "",
        406,
        "NotAcceptable",
    )
    .await;
}

#[tokio::test]
async fn huge_body_is_413_and_server_keeps_serving() {
    let sim = common::sim().await;
    let big = format!(
        r#"{{"metadata":{{"name":"big"}},"data":{{"x":"{}"}}}}"#,
        "a".repeat(4 * 1024 * 1024)
    );
    expect_status(
        &sim,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[JSON],
        big,
        413,
        "RequestEntityTooLarge",
    )
    .await;
    // Without Content-Length (chunked), the limit still applies while reading.
    let chunks = futures::stream::iter((0..64).map(|_| {
        Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(Bytes::from(vec![
            b' ';
            64 * 1024
        ])))
    }));
    let body = http_body_util::StreamBody::new(chunks);
    let stream = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let (mut tx, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("host", "x")
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    let resp = tokio::time::timeout(common::DEADLINE, tx.send_request(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 413);
    // The server is fine.
    let (status, v) = common::get_json(&sim, "/version").await;
    assert_eq!((status, v["major"].as_str()), (200, Some("1")));
    let r = raw(
        &sim,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[JSON],
        json!({"metadata": {"name": "ok"}}).to_string(),
    )
    .await;
    assert_eq!(r.status, 201);
}

#[tokio::test]
async fn discovery_and_table_shapes() {
    let sim = common::sim().await;
    let (s, api) = common::get_json(&sim, "/api").await;
    assert_eq!((s, api["kind"].as_str()), (200, Some("APIVersions")));
    let (_, v1) = common::get_json(&sim, "/api/v1").await;
    let pods = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods")
        .unwrap()
        .clone();
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(pods["categories"], json!(["all"]));
    assert!(pods["verbs"].as_array().unwrap().contains(&json!("watch")));
    let (_, apis) = common::get_json(&sim, "/apis").await;
    assert_eq!(apis["kind"], "APIGroupList");
    let (_, apps) = common::get_json(&sim, "/apis/apps").await;
    assert_eq!(apps["preferredVersion"]["groupVersion"], "apps/v1");
    let (s, _) = common::get_json(&sim, "/openapi/v3").await;
    assert_eq!(s, 200);
    raw(
        &sim,
        "POST",
        "/api/v1/namespaces/default/pods",
        &[JSON],
        r#"{"metadata":{"name":"t"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#,
    )
    .await;
    let accept = (
        "accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    );
    let r = raw(
        &sim,
        "GET",
        "/api/v1/namespaces/default/pods",
        &[accept],
        "",
    )
    .await;
    let t = r.json();
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["columnDefinitions"][0]["name"], "Name");
    assert_eq!(t["rows"][0]["cells"][0], "t");
    assert_eq!(t["rows"][0]["cells"][2], "Pending");
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let r = raw(
        &sim,
        "GET",
        "/api/v1/namespaces/default/pods/t?includeObject=Object",
        &[accept],
        "",
    )
    .await;
    assert_eq!(r.json()["rows"][0]["object"]["kind"], "Pod");
    let r = raw(
        &sim,
        "GET",
        "/api/v1/namespaces/default/pods",
        &[(
            "accept",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )],
        "",
    )
    .await;
    assert_eq!(r.json()["kind"], "PartialObjectMetadataList");
}
