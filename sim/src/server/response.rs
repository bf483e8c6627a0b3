//! Response bodies and helpers shared by the handlers.

use std::convert::Infallible;

use bytes::Bytes;
use futures::Stream;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::Frame;
use serde_json::Value;

use crate::apimachinery::errors::ApiError;

/// The media type of protobuf responses.
pub(crate) const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// Why a streamed body was cut (the connection is then closed without the final chunk).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BodyError(pub &'static str);

/// The body type of every response.
pub(crate) type Body = UnsyncBoxBody<Bytes, BodyError>;

/// A response with a fixed body.
pub(crate) fn full(code: u16, content_type: &'static str, bytes: Bytes) -> Response<Body> {
    let mut r = Response::new(
        Full::new(bytes)
            .map_err(|e: Infallible| match e {})
            .boxed_unsync(),
    );
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    r
}

/// A JSON response.
pub(crate) fn json(code: u16, v: &Value) -> Response<Body> {
    // Serializing a Value cannot fail (string keys only).
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    full(code, "application/json", Bytes::from(bytes))
}

/// A JSON response from pre-serialized bytes.
pub(crate) fn json_bytes(code: u16, b: Bytes) -> Response<Body> {
    full(code, "application/json", b)
}

/// A `Status` error response (with `Retry-After` when set).
pub(crate) fn error(e: &ApiError) -> Response<Body> {
    with_retry_after(json(e.code, &e.to_status()), e)
}

/// A `Status` error response as kube's protobuf (`v1` `Status` in its envelope), as
/// kube-apiserver's `responsewriters.ErrorNegotiated` writes it for a client that prefers
/// protobuf; JSON if the Status cannot be encoded (it always can: its schema is generated).
pub(crate) fn error_protobuf(e: &ApiError) -> Response<Body> {
    match kinformer::protobuf::encode_object_as("v1", "Status", &e.to_status()) {
        Ok(b) => with_retry_after(full(e.code, PROTOBUF, Bytes::from(b)), e),
        Err(_) => error(e),
    }
}

fn with_retry_after(mut r: Response<Body>, e: &ApiError) -> Response<Body> {
    if let Some(secs) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// A chunked JSON response from a stream of chunks; an `Err` item aborts the connection.
pub(crate) fn stream<S>(code: u16, s: S) -> Response<Body>
where
    S: Stream<Item = Result<Bytes, BodyError>> + Send + 'static,
{
    use futures::StreamExt as _;
    let body = StreamBody::new(s.map(|r| r.map(Frame::data)));
    let mut r = Response::new(BodyExt::boxed_unsync(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    r
}

/// `truncateAtTotalRunes` and `truncateItemRunes` of
/// `staging/src/k8s.io/apiserver/pkg/endpoints/filters/warning.go`.
const WARNINGS_TOTAL_RUNES: usize = 4 * 1024;
const WARNING_ITEM_RUNES: usize = 256;

/// `net.NewWarningHeader(299, "", text)`: `299 - "text"` with `"` and `\` escaped; `None`
/// for a text with control characters (which the recorder drops).
fn warning_header(text: &str) -> Option<String> {
    if text.chars().any(char::is_control) {
        return None;
    }
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str("299 - \"");
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Some(out)
}

/// Adds one `Warning` header per warning, as kube-apiserver's warning recorder does
/// (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/warning.go` `recorder.AddWarning`):
/// empty and repeated texts are skipped; once the texts pass 4096 runes in all, every
/// warning is cut to 256 runes, the headers are written again and later ones only while
/// the total stays within 4096.
pub(crate) fn with_warnings(mut r: Response<Body>, warnings: &[String]) -> Response<Body> {
    let mut seen: Vec<&str> = Vec::new();
    let mut ordered: Vec<&str> = Vec::new();
    let mut headers: Vec<String> = Vec::new();
    let mut written = 0usize;
    let mut truncating = false;
    let cut = |t: &str| -> (String, usize) {
        let n = t.chars().count();
        if n > WARNING_ITEM_RUNES {
            (
                t.chars().take(WARNING_ITEM_RUNES).collect(),
                WARNING_ITEM_RUNES,
            )
        } else {
            (t.to_string(), n)
        }
    };
    for text in warnings {
        if text.is_empty() || (written >= WARNINGS_TOTAL_RUNES && truncating) {
            continue;
        }
        if seen.contains(&text.as_str()) {
            continue;
        }
        seen.push(text);
        ordered.push(text);
        let (t, n) = if truncating {
            cut(text)
        } else {
            (text.clone(), text.chars().count())
        };
        let Some(h) = warning_header(&t) else {
            continue;
        };
        if written + n <= WARNINGS_TOTAL_RUNES || truncating {
            written += n;
            headers.push(h);
            continue;
        }
        truncating = true;
        written = 0;
        headers.clear();
        for w in &ordered {
            let (t, n) = cut(w);
            if let Some(h) = warning_header(&t) {
                written += n;
                headers.push(h);
            }
        }
    }
    for h in headers {
        if let Ok(v) = HeaderValue::from_str(&h) {
            r.headers_mut().append("warning", v);
        }
    }
    r
}
