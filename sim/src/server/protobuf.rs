//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`) of the built-in kinds that
//! kubectl's generators send (`kubectl create configmap|secret|deployment|namespace|
//! serviceaccount|service`), decoded into the JSON the same request would have carried.
//!
//! The envelope is kube's: the magic `k8s\0`, then a `runtime.Unknown` message (`typeMeta`,
//! `raw`) whose `raw` is the object (`staging/src/k8s.io/apimachinery/pkg/runtime/serializer/
//! protobuf/protobuf.go`, `Serializer.Decode`). The object is read with the schema tables of
//! `kinformer::protobuf` (generated from the Go types of `k8s.io/api` and
//! `k8s.io/apimachinery`) and written as kube's JSON encoding of the same Go value would be:
//! scalars at their zero value are left out (Go's `omitempty`) unless the Go field is a pointer
//! (proto2 presence) or has no `omitempty` (`restartCount`), embedded messages are kept
//! (`"resources": {}`), a zero `metav1.Time` is `null`, `IntOrString` is a number or a string,
//! `Quantity` a string, `bytes` base64, and an inlined Go struct (`VolumeSource` in `Volume`)
//! has its fields at its parent's level. Responses (GET, LIST, WATCH of the kinds [`encodes`]
//! names, and the bench twin server's pods, `crate::bench`) are written by
//! `kinformer::protobuf`'s encoder, from the same tables: one schema, one encoder, for the
//! informer and the server.
//!
//! The wire primitives (keys and varints) come from `prost`. A field the schema does not know,
//! or a field of a package the tables do not cover, is refused when it carries a value (never
//! silently dropped); a field at its zero value carries nothing and is skipped, as kube's own
//! decoder would make it the zero value anyway.

use base64::Engine as _;
use kinformer::protobuf::{Field, Kind, Message, PREFIX, kind_schema};
use prost::encoding::{WireType, decode_key, decode_varint};
use serde_json::{Map, Value};

/// Why a protobuf body could not be turned into JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProtobufError {
    /// The body is empty.
    #[error("empty data")]
    Empty,
    /// The body does not start with `k8s\0`.
    #[error(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    )]
    NotProtobuf,
    /// The body is the prefix alone.
    #[error("empty body")]
    EmptyBody,
    /// The wire data is malformed.
    #[error("proto: {0}")]
    Wire(String),
    /// A value kube's decoder would refuse (a bad time, IntOrString type, embedded JSON).
    #[error("{0}")]
    Value(String),
    /// The envelope names no kind or no version.
    #[error("Object 'Kind' is missing in '{0}'")]
    MissingKind(String),
    /// The kind is not one this server decodes from protobuf.
    #[error("kind {0} is not decoded from protobuf by kinformer-sim")]
    UnsupportedKind(String),
    /// A field with a value that the schema does not decode.
    #[error("field {field} ({number}) of {message} is not decoded from protobuf by kinformer-sim")]
    UnsupportedField {
        /// Message name.
        message: &'static str,
        /// Field name (or `?` when unknown).
        field: &'static str,
        /// Field number.
        number: u32,
    },
}

/// The kinds decoded from request bodies: those kubectl's generators send as protobuf.
const DECODES: &[(&str, &str)] = &[
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Namespace"),
    ("v1", "ServiceAccount"),
    ("v1", "Service"),
    ("v1", "Pod"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "ReplicaSet"),
];

/// The schema of a kind decoded from request bodies.
fn schema_of(api_version: &str, kind: &str) -> Option<&'static Message> {
    if DECODES.contains(&(api_version, kind)) {
        kind_schema(api_version, kind)
    } else {
        None
    }
}

/// Whether objects of (apiVersion, kind) can be sent as protobuf.
pub(crate) fn decodes(api_version: &str, kind: &str) -> bool {
    schema_of(api_version, kind).is_some()
}

/// Whether objects of (apiVersion, kind) are answered as protobuf when the client prefers it.
/// kube-apiserver serves protobuf for every built-in kind (not for custom kinds, whose
/// serializer is JSON only); the sim does for these core/v1 kinds, and answers the others, like
/// custom kinds, as JSON, the client's next choice (its tests of JSON answers stay as they are).
pub(crate) fn encodes(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        (
            "v1",
            "ConfigMap" | "Secret" | "Namespace" | "ServiceAccount" | "Pod"
        )
    )
}

/// Whether the content type (parameters ignored) is kube's protobuf.
pub(crate) fn is_protobuf(content_type: &str) -> bool {
    content_type.split(';').next().map(str::trim) == Some("application/vnd.kubernetes.protobuf")
}

fn wire(e: impl std::fmt::Display) -> ProtobufError {
    ProtobufError::Wire(e.to_string())
}

/// One field read from the wire.
enum Val<'a> {
    Varint(u64),
    Len(&'a [u8]),
    Fixed(u64),
}

/// Reads the fields of one message, in order.
fn fields(mut buf: &[u8]) -> impl Iterator<Item = Result<(u32, Val<'_>), ProtobufError>> {
    std::iter::from_fn(move || {
        if buf.is_empty() {
            return None;
        }
        let r = (|| {
            let (n, wt) = decode_key(&mut buf).map_err(wire)?;
            let v = match wt {
                WireType::Varint => Val::Varint(decode_varint(&mut buf).map_err(wire)?),
                WireType::LengthDelimited => {
                    let len = usize::try_from(decode_varint(&mut buf).map_err(wire)?)
                        .map_err(|_| wire("length out of range"))?;
                    if len > buf.len() {
                        return Err(wire("unexpected EOF"));
                    }
                    let (b, rest) = buf.split_at(len);
                    buf = rest;
                    Val::Len(b)
                }
                WireType::SixtyFourBit | WireType::ThirtyTwoBit => {
                    let w = if wt == WireType::SixtyFourBit { 8 } else { 4 };
                    if w > buf.len() {
                        return Err(wire("unexpected EOF"));
                    }
                    let (b, rest) = buf.split_at(w);
                    buf = rest;
                    Val::Fixed(b.iter().rev().fold(0, |a, x| (a << 8) | u64::from(*x)))
                }
                WireType::StartGroup | WireType::EndGroup => {
                    return Err(wire("groups are not used by kube's messages"));
                }
            };
            Ok((n, v))
        })();
        if r.is_err() {
            // Stop after the first error.
            buf = &[];
        }
        Some(r)
    })
}

fn is_zero(v: &Val<'_>) -> bool {
    match v {
        Val::Varint(x) | Val::Fixed(x) => *x == 0,
        Val::Len(b) => b.is_empty(),
    }
}

fn varint(v: &Val<'_>, msg: &Message, f: &Field) -> Result<u64, ProtobufError> {
    match v {
        Val::Varint(x) => Ok(*x),
        _ => Err(wire(format!("wrong wire type for {}.{}", msg.name, f.name))),
    }
}

fn fixed(v: &Val<'_>, msg: &Message, f: &Field) -> Result<u64, ProtobufError> {
    match v {
        Val::Fixed(x) => Ok(*x),
        _ => Err(wire(format!("wrong wire type for {}.{}", msg.name, f.name))),
    }
}

fn bytes<'a>(v: &Val<'a>, msg: &Message, f: &Field) -> Result<&'a [u8], ProtobufError> {
    match v {
        Val::Len(b) => Ok(b),
        _ => Err(wire(format!("wrong wire type for {}.{}", msg.name, f.name))),
    }
}

fn string(b: &[u8]) -> String {
    // Go strings may hold any bytes; kube's JSON encoder writes invalid UTF-8 as U+FFFD.
    String::from_utf8_lossy(b).into_owned()
}

/// `metav1.Time` as kube writes it in JSON: RFC 3339 in seconds, `null` when zero;
/// `metav1.MicroTime` (`micros`) with six fractional digits.
fn time(b: &[u8], micros: bool) -> Result<Value, ProtobufError> {
    const GO_ZERO: i64 = -62_135_596_800; // time.Time{}.Unix()
    const YEAR_10000: i64 = 253_402_300_800;
    let (mut secs, mut nanos) = (0_i64, 0_i64);
    for r in fields(b) {
        match r? {
            (1, Val::Varint(x)) => secs = x as i64,
            (2, Val::Varint(x)) => nanos = i64::from(x as i32),
            (_, v) if is_zero(&v) => {}
            (n, _) => {
                return Err(ProtobufError::Value(format!(
                    "unexpected field {n} in a Time"
                )));
            }
        }
    }
    if b.is_empty() || (secs == GO_ZERO && nanos == 0) {
        return Ok(Value::Null);
    }
    if !(GO_ZERO..YEAR_10000).contains(&secs) {
        return Err(ProtobufError::Value(
            "Time.MarshalJSON: year outside of range [0,9999]".into(),
        ));
    }
    let us = micros.then(|| (nanos.clamp(0, 999_999_999) / 1000) as u32);
    kinformer::protobuf::rfc3339(secs, us)
        .map(Value::String)
        .map_err(|e| ProtobufError::Value(e.to_string()))
}

fn int_or_string(b: &[u8]) -> Result<Value, ProtobufError> {
    let (mut ty, mut int_val, mut str_val) = (0_i64, 0_i32, String::new());
    for r in fields(b) {
        match r? {
            (1, Val::Varint(x)) => ty = x as i64,
            (2, Val::Varint(x)) => int_val = x as i32,
            (3, Val::Len(s)) => str_val = string(s),
            (_, v) if is_zero(&v) => {}
            (n, _) => {
                return Err(ProtobufError::Value(format!(
                    "unexpected field {n} in an IntOrString"
                )));
            }
        }
    }
    match ty {
        0 => Ok(Value::from(int_val)),
        1 => Ok(Value::String(str_val)),
        _ => Err(ProtobufError::Value("impossible IntOrString.Type".into())),
    }
}

fn quantity(b: &[u8]) -> Result<Value, ProtobufError> {
    let mut s = String::new();
    for r in fields(b) {
        match r? {
            (1, Val::Len(x)) => s = string(x),
            (_, v) if is_zero(&v) => {}
            (n, _) => {
                return Err(ProtobufError::Value(format!(
                    "unexpected field {n} in a Quantity"
                )));
            }
        }
    }
    Ok(Value::String(s))
}

/// One map entry (`key` = 1, `value` = 2) of a map field `f` whose values are of `value`.
fn map_entry(
    b: &[u8],
    value: Kind,
    msg: &Message,
    f: &Field,
) -> Result<(String, Value), ProtobufError> {
    let mut key = String::new();
    let mut val: Option<Val<'_>> = None;
    for r in fields(b) {
        match r? {
            (1, Val::Len(k)) => key = string(k),
            (2, v) => val = Some(v),
            (_, v) if is_zero(&v) => {}
            (n, _) => {
                return Err(ProtobufError::Value(format!(
                    "unexpected field {n} in a map entry"
                )));
            }
        }
    }
    // An entry without a value has its kind's zero.
    let val = val.unwrap_or(match value {
        Kind::Bool | Kind::Int32 | Kind::Int64 | Kind::Uint32 | Kind::Uint64 => Val::Varint(0),
        Kind::Float64 | Kind::Float32 => Val::Fixed(0),
        _ => Val::Len(&[]),
    });
    Ok((key, one(value, &val, msg, f)?))
}

/// A packed run of numbers of `kind`.
fn packed(mut b: &[u8], kind: Kind) -> Result<Vec<Val<'static>>, ProtobufError> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let w = match kind {
            Kind::Float64 => 8,
            Kind::Float32 => 4,
            _ => {
                out.push(Val::Varint(decode_varint(&mut b).map_err(wire)?));
                continue;
            }
        };
        if w > b.len() {
            return Err(wire("unexpected EOF"));
        }
        let (x, rest) = b.split_at(w);
        b = rest;
        out.push(Val::Fixed(
            x.iter().rev().fold(0, |a, x| (a << 8) | u64::from(*x)),
        ));
    }
    Ok(out)
}

/// One value of `kind` (a single field's, an element of a repeated field, a map value).
fn one(kind: Kind, v: &Val<'_>, msg: &Message, f: &Field) -> Result<Value, ProtobufError> {
    Ok(match kind {
        Kind::String => Value::String(string(bytes(v, msg, f)?)),
        Kind::Bool => Value::Bool(varint(v, msg, f)? != 0),
        Kind::Int32 => Value::from(varint(v, msg, f)? as i32),
        Kind::Int64 => Value::from(varint(v, msg, f)? as i64),
        Kind::Uint32 => Value::from(varint(v, msg, f)? as u32),
        Kind::Uint64 => Value::from(varint(v, msg, f)?),
        Kind::Float64 => Value::from(f64::from_bits(fixed(v, msg, f)?)),
        Kind::Float32 => Value::from(f64::from(f32::from_bits(fixed(v, msg, f)? as u32))),
        Kind::Bytes => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes(v, msg, f)?))
        }
        Kind::Time => time(bytes(v, msg, f)?, false)?,
        Kind::MicroTime => time(bytes(v, msg, f)?, true)?,
        Kind::Duration => {
            let mut ns = 0_i64;
            for r in fields(bytes(v, msg, f)?) {
                if let (1, Val::Varint(x)) = r? {
                    ns = x as i64;
                }
            }
            Value::String(kinformer::protobuf::go_duration(ns))
        }
        Kind::FieldsV1 | Kind::RawExtension => {
            let mut raw: &[u8] = &[];
            for r in fields(bytes(v, msg, f)?) {
                if let (1, Val::Len(x)) = r? {
                    raw = x;
                }
            }
            match (raw.is_empty(), kind) {
                (true, Kind::FieldsV1) => Value::Object(Map::new()),
                (true, _) => Value::Null,
                (false, _) => serde_json::from_slice(raw)
                    .map_err(|e| ProtobufError::Value(format!("{}: {e}", f.name)))?,
            }
        }
        Kind::IntOrString => int_or_string(bytes(v, msg, f)?)?,
        Kind::Quantity => quantity(bytes(v, msg, f)?)?,
        Kind::Message(m) => Value::Object(message(bytes(v, msg, f)?, m)?),
        Kind::Map(_) => return Err(ProtobufError::Value("a map inside a map".into())),
        Kind::Unsupported => {
            if !bytes(v, msg, f)?.is_empty() {
                return Err(ProtobufError::UnsupportedField {
                    message: msg.name,
                    field: f.name,
                    number: f.number,
                });
            }
            Value::Object(Map::new())
        }
    })
}

/// Decodes one message of `msg` into its JSON object.
fn message(b: &[u8], msg: &'static Message) -> Result<Map<String, Value>, ProtobufError> {
    let mut out = Map::new();
    for r in fields(b) {
        let (n, v) = r?;
        let Some(f) = msg.field(n) else {
            if is_zero(&v) {
                continue;
            }
            return Err(ProtobufError::UnsupportedField {
                message: msg.name,
                field: "?",
                number: n,
            });
        };
        match f.kind {
            Kind::Message(m) if f.inline => {
                out.extend(message(bytes(&v, msg, f)?, m)?);
                continue;
            }
            Kind::Map(value) => {
                let (k, val) = map_entry(bytes(&v, msg, f)?, *value, msg, f)?;
                if let Value::Object(m) = out
                    .entry(f.name)
                    .or_insert_with(|| Value::Object(Map::new()))
                {
                    m.insert(k, val);
                }
                continue;
            }
            _ => {}
        }
        if f.repeated {
            let items = match v {
                Val::Len(b) if f.kind.is_packable() => packed(b, f.kind)?
                    .iter()
                    .map(|x| one(f.kind, x, msg, f))
                    .collect::<Result<Vec<_>, _>>()?,
                _ => vec![one(f.kind, &v, msg, f)?],
            };
            if let Value::Array(a) = out
                .entry(f.name)
                .or_insert_with(|| Value::Array(Vec::new()))
            {
                a.extend(items);
            }
            continue;
        }
        let json = one(f.kind, &v, msg, f)?;
        // A pointer, or a field without `omitempty` (`restartCount`), keeps its zero value.
        let zero = !f.pointer
            && f.omitempty
            && match &json {
                Value::String(s) => s.is_empty(),
                Value::Bool(b) => !b,
                Value::Number(x) => x.as_f64() == Some(0.0),
                _ => false,
            };
        if zero {
            out.remove(f.name);
        } else {
            out.insert(f.name.to_string(), json);
        }
    }
    Ok(out)
}

/// A decoding failure, with the (apiVersion, kind) of the envelope when it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeFailure {
    /// The envelope's (apiVersion, kind), when the envelope was read.
    pub gvk: Option<(String, String)>,
    /// What failed.
    pub error: ProtobufError,
}

impl From<ProtobufError> for DecodeFailure {
    fn from(error: ProtobufError) -> Self {
        Self { gvk: None, error }
    }
}

/// Decodes a `k8s\0`-prefixed `runtime.Unknown` into the object's JSON (with its `apiVersion`
/// and `kind`).
pub(crate) fn decode(body: &[u8]) -> Result<Value, DecodeFailure> {
    decode_as(body, false)
}

/// [`decode`], and a `Status` too when `status` (a watch's ERROR event).
fn decode_as(body: &[u8], status: bool) -> Result<Value, DecodeFailure> {
    let (api_version, kind, raw) = unwrap_envelope(body)?;
    let gvk = Some((api_version.clone(), kind.clone()));
    let schema = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Status") if status => kind_schema("v1", "Status"),
        (a, k) => schema_of(a, k),
    };
    let Some(msg) = schema else {
        return Err(DecodeFailure {
            gvk,
            error: ProtobufError::UnsupportedKind(format!("{api_version}/{kind}")),
        });
    };
    let fields = message(raw, msg).map_err(|error| DecodeFailure { gvk, error })?;
    let mut obj = Map::new();
    obj.insert("kind".into(), Value::String(kind));
    obj.insert("apiVersion".into(), Value::String(api_version));
    obj.extend(fields);
    Ok(Value::Object(obj))
}

/// Decodes a `<Kind>List` as [`encode_list`] writes it: the list's `metadata`, and its items
/// with the `apiVersion` and `kind` of the list's kind (protobuf list items carry none).
pub(crate) fn decode_list(body: &[u8]) -> Result<(Value, Vec<Value>), DecodeFailure> {
    let (api_version, list_kind, raw) = unwrap_envelope(body)?;
    let gvk = Some((api_version.clone(), list_kind.clone()));
    let fail = |error| DecodeFailure {
        gvk: gvk.clone(),
        error,
    };
    let kind = list_kind.strip_suffix("List").unwrap_or("");
    let msg = schema_of(&api_version, kind).ok_or_else(|| {
        fail(ProtobufError::UnsupportedKind(format!(
            "{api_version}/{list_kind}"
        )))
    })?;
    let (mut meta, mut items) = (Map::new(), Vec::new());
    for r in fields(raw) {
        match r.map_err(fail)? {
            (1, Val::Len(b)) => {
                meta = message(b, &kinformer::protobuf::schema::META_V1_LIST_META).map_err(fail)?
            }
            (2, Val::Len(b)) => {
                let mut obj = Map::new();
                obj.insert("kind".into(), Value::String(kind.to_string()));
                obj.insert("apiVersion".into(), Value::String(api_version.clone()));
                obj.extend(message(b, msg).map_err(fail)?);
                items.push(Value::Object(obj));
            }
            (n, _) => return Err(fail(wire(format!("unexpected field {n} in a list")))),
        }
    }
    Ok((Value::Object(meta), items))
}

/// Decodes one watch frame's `metav1.WatchEvent` (the 4-byte length already taken off): its
/// type and object.
pub(crate) fn decode_watch_event(ev: &[u8]) -> Result<(String, Value), DecodeFailure> {
    let (mut etype, mut object) = (String::new(), None);
    for r in fields(ev) {
        match r? {
            (1, Val::Len(b)) => etype = string(b),
            (2, Val::Len(ext)) => {
                for r in fields(ext) {
                    if let (1, Val::Len(raw)) = r? {
                        object = Some(decode_as(raw, true)?);
                    }
                }
            }
            (n, _) => return Err(wire(format!("unexpected field {n} in a WatchEvent")).into()),
        }
    }
    let object = object.ok_or_else(|| wire("a WatchEvent without an object"))?;
    Ok((etype, object))
}

/// The envelope's (apiVersion, kind) and `raw`.
fn unwrap_envelope(body: &[u8]) -> Result<(String, String, &[u8]), DecodeFailure> {
    if body.is_empty() {
        return Err(ProtobufError::Empty.into());
    }
    let Some(data) = body.strip_prefix(PREFIX) else {
        return Err(ProtobufError::NotProtobuf.into());
    };
    if data.is_empty() {
        return Err(ProtobufError::EmptyBody.into());
    }
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for r in fields(data) {
        match r? {
            (1, Val::Len(tm)) => {
                for r in fields(tm) {
                    match r? {
                        (1, Val::Len(x)) => api_version = string(x),
                        (2, Val::Len(x)) => kind = string(x),
                        _ => {}
                    }
                }
            }
            (2, Val::Len(x)) => raw = x,
            // contentEncoding, contentType: kube sends them empty.
            (3 | 4, Val::Len(_)) => {}
            (n, _) => {
                return Err(wire(format!("unexpected field {n} in runtime.Unknown")).into());
            }
        }
    }
    if kind.is_empty() || api_version.is_empty() {
        return Err(ProtobufError::MissingKind(format!(
            "runtime.TypeMeta{{APIVersion:{api_version:?}, Kind:{kind:?}}}"
        ))
        .into());
    }
    Ok((api_version, kind, raw))
}

#[cfg(test)]
mod golden;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Encodes a length-delimited field.
    fn ld(n: u32, b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        prost::encoding::encode_key(n, WireType::LengthDelimited, &mut out);
        prost::encoding::encode_varint(b.len() as u64, &mut out);
        out.extend_from_slice(b);
        out
    }

    fn vi(n: u32, x: u64) -> Vec<u8> {
        let mut out = Vec::new();
        prost::encoding::encode_key(n, WireType::Varint, &mut out);
        prost::encoding::encode_varint(x, &mut out);
        out
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let tm = [ld(1, api_version.as_bytes()), ld(2, kind.as_bytes())].concat();
        [
            PREFIX.to_vec(),
            ld(1, &tm),
            ld(2, raw),
            ld(3, b""),
            ld(4, b""),
        ]
        .concat()
    }

    #[test]
    fn configmap_like_kubectl() {
        // ObjectMeta as gogo writes it: every value string, even empty; a zero Time.
        let zero_time = [vi(1, (-62_135_596_800_i64) as u64), vi(2, 0)].concat();
        let entry = [ld(1, b"a"), ld(2, b"b")].concat();
        let meta = [
            ld(1, b"cm"),
            ld(2, b""),
            ld(3, b""),
            vi(7, 0),
            ld(8, &zero_time),
            ld(11, &[ld(1, b"app"), ld(2, b"x")].concat()),
        ]
        .concat();
        let bin = [ld(1, b"k"), ld(2, &[0, 255])].concat();
        let cm = [ld(1, &meta), ld(2, &entry), ld(3, &bin)].concat();
        let v = decode(&envelope("v1", "ConfigMap", &cm)).unwrap();
        assert_eq!(
            v,
            json!({"kind": "ConfigMap", "apiVersion": "v1",
                "metadata": {"name": "cm", "creationTimestamp": null, "labels": {"app": "x"}},
                "data": {"a": "b"}, "binaryData": {"k": "AP8="}})
        );
    }

    #[test]
    fn special_types() {
        let port = [ld(4, &[vi(1, 1), ld(3, b"http")].concat()), vi(3, 80)].concat();
        let svc = [ld(2, &ld(1, &port))].concat();
        let v = decode(&envelope("v1", "Service", &svc)).unwrap();
        assert_eq!(
            v["spec"]["ports"][0],
            json!({"port": 80, "targetPort": "http"})
        );
        let ts = [vi(1, 1_700_000_000)].concat();
        let meta = ld(1, &ld(9, &ts));
        let v = decode(&envelope("v1", "Secret", &meta)).unwrap();
        assert_eq!(
            v["metadata"]["deletionTimestamp"],
            json!("2023-11-14T22:13:20Z")
        );
        // replicas is a pointer: 0 is kept.
        let d = ld(2, &vi(1, 0));
        let v = decode(&envelope("apps/v1", "Deployment", &d)).unwrap();
        assert_eq!(v["spec"], json!({"replicas": 0}));
    }

    #[test]
    fn what_is_encoded_decodes_to_the_same_object() {
        let cm = json!({"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": "c", "namespace": "default", "uid": "u-1",
                "resourceVersion": "42", "creationTimestamp": "2025-01-02T03:04:05Z",
                "labels": {"a": "1", "b": "2"}, "finalizers": ["x/y"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o",
                    "uid": "u-0", "controller": true, "blockOwnerDeletion": false}],
                "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                    "time": "2025-01-02T03:04:05Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {".": {}, "f:k": {}}}}]},
            "data": {"k": "v"}, "binaryData": {"b": "AAE="}, "immutable": false});
        let b = kinformer::protobuf::encode_object_as("v1", "ConfigMap", &cm).unwrap();
        assert_eq!(decode(&b).unwrap(), cm);
        let dep = json!({"kind": "Deployment", "apiVersion": "apps/v1",
            "metadata": {"name": "d", "generation": 3},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}},
                "strategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                "template": {"metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [{"name": "c", "image": "i",
                        "resources": {"limits": {"cpu": "100m"}}}]}}}});
        let b = kinformer::protobuf::encode_object_as("apps/v1", "Deployment", &dep).unwrap();
        assert_eq!(decode(&b).unwrap(), dep);
        // Fields the schema does not have are not encoded.
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nope": 1}});
        assert!(kinformer::protobuf::encode_object_as("v1", "Pod", &pod).is_err());
    }

    #[test]
    fn pods_round_trip_with_inlined_structs_and_kept_zeros() {
        // Inlined structs (VolumeSource, ProbeHandler), a zero `metav1.Time` value (`null`), a
        // `restartCount` of 0 (no `omitempty`), a pointer at zero, empty messages.
        let pod = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "p", "namespace": "n", "resourceVersion": "7"},
            "spec": {"volumes": [{"name": "c", "configMap": {"name": "cm", "defaultMode": 420}},
                    {"name": "e", "emptyDir": {"sizeLimit": "1Gi"}}],
                "containers": [{"name": "app", "image": "i",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "livenessProbe": {"httpGet": {"path": "/h", "port": 8080, "scheme": "HTTP"},
                        "periodSeconds": 10},
                    "readinessProbe": {"tcpSocket": {"port": "http"}, "timeoutSeconds": 1}}],
                "securityContext": {}, "priority": 0, "enableServiceLinks": false,
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute",
                    "tolerationSeconds": 300}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null,
                    "lastTransitionTime": "2025-01-01T00:00:05Z"}],
                "hostIPs": [{"ip": "10.0.0.1"}],
                "containerStatuses": [{"name": "app", "state": {"running":
                    {"startedAt": "2025-01-01T00:00:03Z"}}, "lastState": {}, "ready": false,
                    "restartCount": 0, "image": "i", "imageID": "", "started": true}]}});
        let b = kinformer::protobuf::encode_object_as("v1", "Pod", &pod).unwrap();
        assert_eq!(decode(&b).unwrap(), pod);
    }

    #[test]
    fn refusals() {
        let err = |b: &[u8]| decode(b).unwrap_err().error;
        assert_eq!(err(b""), ProtobufError::Empty);
        assert_eq!(err(b"{}"), ProtobufError::NotProtobuf);
        assert_eq!(err(PREFIX), ProtobufError::EmptyBody);
        assert!(matches!(
            err(&envelope("coordination.k8s.io/v1", "Lease", b"")),
            ProtobufError::UnsupportedKind(_)
        ));
        // A field the schema does not know (a newer PodSpec's), with content, is refused, not
        // dropped.
        let spec = ld(2, &ld(45, &ld(1, b"x")));
        assert!(matches!(
            err(&envelope("v1", "Pod", &spec)),
            ProtobufError::UnsupportedField { .. }
        ));
        // An unknown field with a value is refused; at its zero value it is skipped.
        assert!(decode(&envelope("v1", "ConfigMap", &vi(99, 1))).is_err());
        assert!(decode(&envelope("v1", "ConfigMap", &vi(99, 0))).is_ok());
        // Truncated.
        let mut b = envelope("v1", "ConfigMap", &ld(1, &ld(1, b"abc")));
        b.truncate(b.len() - 6);
        assert!(decode(&b).is_err());
    }
}
