//! Content negotiation (`k8s.io/apiserver/pkg/endpoints/handlers/negotiation`): the
//! representation a response takes from `Accept` (the object, a `meta.k8s.io/v1` Table, or
//! PartialObjectMetadata), and the decoding of request bodies by `Content-Type` (JSON, or kube's
//! protobuf through [`super::protobuf`]), with the 406, 413, 415 and 400 answers kube-apiserver
//! gives.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{HeaderMap, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::Value;

use super::shared::Shared;
use super::table::IncludeObject;
use crate::apimachinery::errors::ApiError;
use crate::apimachinery::schema::ResourceDef;
use crate::apimachinery::util::Query;
use crate::registry::decode::{self, FieldValidation};

/// How objects are rendered, negotiated from `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repr {
    /// The full object (`application/json`).
    Object,
    /// `PartialObjectMetadata` / `PartialObjectMetadataList`.
    Metadata,
    /// A `meta.k8s.io/v1` Table, with `includeObject`.
    Table(IncludeObject),
    /// The full object as kube's protobuf (`application/vnd.kubernetes.protobuf`), for the
    /// kinds `protobuf::encodes` covers.
    Protobuf,
}

/// The media type of protobuf responses (kept with the response writers, which answer errors
/// in it too).
pub(crate) use super::response::PROTOBUF;

/// Reads a request body, refusing one larger than the server takes (413).
pub(crate) async fn read_body(
    shared: &Shared,
    headers: &HeaderMap,
    body: Incoming,
) -> Result<Bytes, ApiError> {
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        && len > shared.max_body
    {
        return Err(ApiError::too_large(shared.max_body));
    }
    match Limited::new(body, shared.max_body).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            Err(ApiError::too_large(shared.max_body))
        }
        Err(e) => Err(ApiError::bad_request(format!(
            "error reading the request body: {e}"
        ))),
    }
}

fn parse_json_body(b: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(b).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

/// The body of a create or update as JSON: JSON as is, or kube's protobuf decoded for the
/// built-in kinds kubectl sends that way (`super::protobuf`). Follows
/// `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go` (`createHandler`):
/// `negotiation.NegotiateInputSerializer` answers an unknown content type with
/// `NewUnsupportedMediaTypeError` (415), a body that does not decode is a 400 worded by
/// `transformDecodeError`.
///
/// A JSON body is decoded against the kind's schema (or autoscaling/v1 Scale's when `scale`)
/// under `fv` ([`decode::decode_body`]); the warnings of `fieldValidation=Warn` are returned
/// with the value. A protobuf body has no unknown or duplicate fields to report.
pub(crate) async fn body_value(
    shared: &Shared,
    headers: &HeaderMap,
    def: &ResourceDef,
    body: Incoming,
    scale: bool,
    fv: FieldValidation,
) -> Result<(Value, Vec<String>), ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let base = ct.split(';').next().unwrap_or("").trim();
    if base.is_empty() || base == "application/json" || base == "*/*" {
        let b = read_body(shared, headers, body).await?;
        // The kind and version are read first (`s.meta.Interpret`): a body that is not
        // JSON fails there.
        parse_json_body(&b)?;
        return decode::decode_body(def, scale, &b, fv);
    }
    let decodes = super::protobuf::decodes(&def.api_version, &def.kind);
    if !super::protobuf::is_protobuf(base) || !decodes {
        return Err(unsupported_body(decodes, None));
    }
    let b = read_body(shared, headers, body).await?;
    let v = super::protobuf::decode(&b).map_err(|f| {
        use super::protobuf::ProtobufError as P;
        match (f.gvk, f.error) {
            (_, e @ (P::UnsupportedField { .. } | P::UnsupportedKind(_))) => {
                unsupported_body(true, Some(&e.to_string()))
            }
            (Some((api_version, kind)), e) => {
                let version = api_version.rsplit('/').next().unwrap_or("");
                ApiError::bad_request(format!(
                    "{kind} in version {version:?} cannot be handled as a {}: {e}",
                    def.kind
                ))
            }
            (None, e) => ApiError::bad_request(format!(
                "the object provided is unrecognized (must be of type {}): {e} ({})",
                def.kind,
                summarize(&b)
            )),
        }
    })?;
    Ok((v, Vec::new()))
}

/// `summarizeData(body, 30)` of `create.go`: JSON-looking data as text, else hex.
fn summarize(b: &[u8]) -> String {
    const MAX: usize = 30;
    let cut = &b[..b.len().min(MAX)];
    let more = if b.len() > MAX { " ..." } else { "" };
    match b.first() {
        None => "<empty>".into(),
        Some(b'{') => format!("{}{more}", String::from_utf8_lossy(cut)),
        Some(_) => {
            let hex: String = cut.iter().map(|x| format!("{x:02x}")).collect();
            format!("{hex}{more}")
        }
    }
}

/// 415 as `negotiation.NewUnsupportedMediaTypeError` words it (the accepted types the sim
/// decodes for this kind), with the sim's reason when a protobuf body holds what it does not
/// decode.
fn unsupported_body(protobuf: bool, why: Option<&str>) -> ApiError {
    let accepted = if protobuf {
        "application/json, application/vnd.kubernetes.protobuf"
    } else {
        "application/json"
    };
    let mut msg = format!(
        "the body of the request was in an unknown format - accepted media types include: {accepted}"
    );
    if let Some(why) = why {
        msg.push_str(&format!(" ({why})"));
    }
    ApiError::new(415, "UnsupportedMediaType", msg)
}

/// The representation `Accept` asks for (`as=Table`, `as=PartialObjectMetadata`, plain JSON,
/// or protobuf when `protobuf_ok`, i.e. the kind is encoded); 406 when nothing is acceptable.
/// As `negotiation.NegotiateOutputMediaType` (`staging/src/k8s.io/apiserver/pkg/endpoints/
/// handlers/negotiation/negotiate.go`, over `goautoneg.ParseAccept`): the ranges are tried by
/// descending `q` (a missing `q` is 1; `q=0` is never acceptable), in the client's order
/// among equals, and the first one the server can produce wins.
pub(crate) fn negotiate(
    headers: &HeaderMap,
    query: &Query,
    protobuf_ok: bool,
) -> Result<Repr, ApiError> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Ok(Repr::Object);
    };
    if accept.trim().is_empty() {
        return Ok(Repr::Object);
    }
    let mut ranges: Vec<(f64, &str, BTreeMap<&str, &str>)> = accept
        .split(',')
        .map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let base = parts.next().unwrap_or("");
            let params: BTreeMap<&str, &str> = parts
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim(), v.trim()))
                .collect();
            let q = params
                .get("q")
                .and_then(|q| q.parse::<f64>().ok())
                .unwrap_or(1.0);
            (q, base, params)
        })
        .filter(|(q, _, _)| *q > 0.0)
        .collect();
    // A stable sort keeps the client's order among equal weights.
    ranges.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal));
    for (_, base, params) in &ranges {
        if *base == PROTOBUF {
            // Tables and metadata as protobuf are not produced here: the next range decides.
            if protobuf_ok && !params.contains_key("as") {
                return Ok(Repr::Protobuf);
            }
            continue;
        }
        if !matches!(*base, "application/json" | "*/*" | "application/*") {
            continue;
        }
        match params.get("as").copied() {
            None => return Ok(Repr::Object),
            Some("Table") => {
                return Ok(Repr::Table(IncludeObject::parse(
                    query.get("includeObject"),
                )));
            }
            Some("PartialObjectMetadata" | "PartialObjectMetadataList") => {
                return Ok(Repr::Metadata);
            }
            Some(_) => continue,
        }
    }
    Err(ApiError::new(
        406,
        "NotAcceptable",
        format!("only the following media types are accepted: application/json (got {accept:?})"),
    ))
}
