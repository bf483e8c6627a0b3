//! The other way: an object's JSON (a `serde_json::Value`, as k8s-openapi serialises it) to
//! Kubernetes' protobuf, by the same schema tables. For servers and tests (the simulated API
//! server, fixtures), not for the informer's path.
//!
//! Fields are written in field-number order, as gogo-protobuf writes them; a field absent from
//! the JSON (or `null`) is not written, where Go writes a non-pointer field's zero value: the
//! decoded object is the same, the bytes are not. A non-pointer `metav1.Time` at `null` (Go's
//! zero time) is an empty message, timestamps carry both `seconds` and `nanos`, and an
//! `IntOrString` all three of its fields, as Go writes them. Keys the schema does not know are
//! an error (nothing is silently dropped); a field of a package without schema may only be
//! empty. This is the simulated API server's encoder: its answers are these bytes.

use base64::Engine as _;
use prost::encoding::{WireType, encode_key, encode_varint};
use serde_json::{Map, Value};

use super::{
    PREFIX, ProtobufError,
    schema::{Kind, Message, kind_schema},
};

fn bad(what: &str, v: &Value) -> ProtobufError {
    ProtobufError::Encode(format!("{what}: unexpected JSON value {v}"))
}

/// Field `n` as a length-delimited value.
pub(super) fn put_len(out: &mut Vec<u8>, n: u32, b: &[u8]) {
    encode_key(n, WireType::LengthDelimited, out);
    encode_varint(b.len() as u64, out);
    out.extend_from_slice(b);
}

/// Field `n` as a varint.
pub(super) fn put_varint(out: &mut Vec<u8>, n: u32, v: u64) {
    encode_key(n, WireType::Varint, out);
    encode_varint(v, out);
}

fn timestamp(s: &str, micros: bool) -> Result<Vec<u8>, ProtobufError> {
    let ts: k8s_openapi::jiff::Timestamp = s
        .parse()
        .map_err(|e| ProtobufError::Encode(format!("time {s:?}: {e}")))?;
    // `metav1.Time` is whole seconds on the wire (its `nanos` 0); `MicroTime` keeps them.
    let nanos = if micros { ts.subsec_nanosecond() } else { 0 };
    let mut t = Vec::new();
    put_varint(&mut t, 1, ts.as_second() as u64);
    put_varint(&mut t, 2, nanos as u64);
    Ok(t)
}

/// Go's `time.ParseDuration` for what `go_duration` writes (`1h2m3.5s`, `10ms`, `-1µs`).
pub(crate) fn duration_ns(s: &str) -> Result<i64, ProtobufError> {
    let err = || ProtobufError::Encode(format!("duration {s:?}"));
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Ok(0);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        let (num, tail) = rest.split_at(num_end);
        let x: f64 = num.parse().map_err(|_| err())?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(err()),
        };
        total += x * scale;
        rest = tail;
    }
    let ns = total.round() as i64;
    Ok(if neg { -ns } else { ns })
}

/// One value of `kind` (an element, for a repeated field) from its JSON.
fn encode_value(out: &mut Vec<u8>, n: u32, kind: Kind, v: &Value) -> Result<(), ProtobufError> {
    match kind {
        Kind::String => put_len(
            out,
            n,
            v.as_str().ok_or_else(|| bad("string", v))?.as_bytes(),
        ),
        Kind::Bool => put_varint(
            out,
            n,
            u64::from(v.as_bool().ok_or_else(|| bad("bool", v))?),
        ),
        Kind::Int32 | Kind::Int64 => {
            put_varint(out, n, v.as_i64().ok_or_else(|| bad("integer", v))? as u64)
        }
        Kind::Uint32 | Kind::Uint64 => {
            put_varint(out, n, v.as_u64().ok_or_else(|| bad("unsigned", v))?)
        }
        Kind::Float64 => {
            encode_key(n, WireType::SixtyFourBit, out);
            let x = v.as_f64().ok_or_else(|| bad("double", v))?;
            out.extend_from_slice(&x.to_bits().to_le_bytes());
        }
        Kind::Float32 => {
            encode_key(n, WireType::ThirtyTwoBit, out);
            let x = v.as_f64().ok_or_else(|| bad("float", v))? as f32;
            out.extend_from_slice(&x.to_bits().to_le_bytes());
        }
        Kind::Bytes => {
            let s = v.as_str().ok_or_else(|| bad("bytes", v))?;
            let b = base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| ProtobufError::Encode(format!("bytes: {e}")))?;
            put_len(out, n, &b);
        }
        Kind::Time | Kind::MicroTime => {
            let s = v.as_str().ok_or_else(|| bad("time", v))?;
            put_len(out, n, &timestamp(s, matches!(kind, Kind::MicroTime))?);
        }
        Kind::Duration => {
            let ns = duration_ns(v.as_str().ok_or_else(|| bad("duration", v))?)?;
            let mut d = Vec::new();
            put_varint(&mut d, 1, ns as u64);
            put_len(out, n, &d);
        }
        Kind::FieldsV1 | Kind::RawExtension => {
            let mut r = Vec::new();
            put_len(&mut r, 1, v.to_string().as_bytes());
            put_len(out, n, &r);
        }
        Kind::IntOrString => {
            let mut r = Vec::new();
            match v {
                Value::String(s) => {
                    put_varint(&mut r, 1, 1);
                    put_varint(&mut r, 2, 0);
                    put_len(&mut r, 3, s.as_bytes());
                }
                _ => {
                    put_varint(&mut r, 1, 0);
                    let i = v.as_i64().ok_or_else(|| bad("IntOrString", v))?;
                    put_varint(&mut r, 2, i as u64);
                    put_len(&mut r, 3, b"");
                }
            }
            put_len(out, n, &r);
        }
        Kind::Quantity => {
            let mut r = Vec::new();
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Number(x) => x.to_string(),
                _ => return Err(bad("Quantity", v)),
            };
            put_len(&mut r, 1, s.as_bytes());
            put_len(out, n, &r);
        }
        Kind::Message(m) => put_len(out, n, &encode_message(v, m)?),
        Kind::Map(value) => {
            for (k, x) in v.as_object().ok_or_else(|| bad("map", v))? {
                let mut e = Vec::new();
                put_len(&mut e, 1, k.as_bytes());
                encode_value(&mut e, 2, *value, x)?;
                put_len(out, n, &e);
            }
        }
        Kind::Unsupported => {
            return Err(ProtobufError::Encode(
                "a field of a package without schema".into(),
            ));
        }
    }
    Ok(())
}

/// Writes the fields of `msg` found in `obj` (inlined structs take theirs from `obj` too),
/// marking each key used.
fn encode_fields(
    out: &mut Vec<u8>,
    obj: &Map<String, Value>,
    msg: &'static Message,
    used: &mut Vec<String>,
) -> Result<(), ProtobufError> {
    for f in msg.fields {
        if f.inline {
            if let Kind::Message(m) = f.kind {
                let mut sub = Vec::new();
                encode_fields(&mut sub, obj, m, used)?;
                put_len(out, f.number, &sub);
            }
            continue;
        }
        let Some(x) = obj.get(f.name) else {
            continue;
        };
        used.push(f.name.to_string());
        if x.is_null() {
            // Go's zero `metav1.Time` value (not a nil pointer) is written, as an empty message.
            if !f.pointer && !f.repeated && matches!(f.kind, Kind::Time | Kind::MicroTime) {
                put_len(out, f.number, &[]);
            }
            continue;
        }
        if matches!(f.kind, Kind::Unsupported) && is_empty_json(x) {
            // Nothing to write for a field of a package without schema while it is empty.
            continue;
        }
        if f.repeated {
            for e in x.as_array().ok_or_else(|| bad(f.name, x))? {
                encode_value(out, f.number, f.kind, e)?;
            }
        } else {
            encode_value(out, f.number, f.kind, x)?;
        }
    }
    Ok(())
}

fn is_empty_json(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// One message of `msg` from its JSON object (without `apiVersion`/`kind`).
pub fn encode_message(v: &Value, msg: &'static Message) -> Result<Vec<u8>, ProtobufError> {
    let obj = v.as_object().ok_or_else(|| bad(msg.name, v))?;
    let mut out = Vec::new();
    let mut used = Vec::new();
    encode_fields(&mut out, obj, msg, &mut used)?;
    if let Some(k) = obj
        .keys()
        .find(|k| !used.iter().any(|u| u == *k) && *k != "apiVersion" && *k != "kind")
    {
        return Err(ProtobufError::Encode(format!(
            "{}: no field {k:?} in the schema",
            msg.name
        )));
    }
    Ok(out)
}

/// The envelope (`k8s\0` + `runtime.Unknown`) around a message of (apiVersion, kind).
pub fn envelope_raw(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut tm = Vec::new();
    put_len(&mut tm, 1, api_version.as_bytes());
    put_len(&mut tm, 2, kind.as_bytes());
    let mut out = PREFIX.to_vec();
    put_len(&mut out, 1, &tm);
    put_len(&mut out, 2, raw);
    put_len(&mut out, 3, b"");
    put_len(&mut out, 4, b"");
    out
}

fn schema_for(api_version: &str, kind: &str) -> Result<&'static Message, ProtobufError> {
    kind_schema(api_version, kind).ok_or_else(|| ProtobufError::UnknownKind {
        api_version: api_version.into(),
        kind: kind.into(),
    })
}

/// The message (no envelope) of an object of (apiVersion, kind), from its JSON (its own
/// `apiVersion` and `kind` keys, if any, are not fields): what [`encode_list_of_messages`] and
/// [`watch_frame`] take once [`envelope_raw`] wraps it, so a server can encode each object once.
pub fn object_message(api_version: &str, kind: &str, v: &Value) -> Result<Vec<u8>, ProtobufError> {
    encode_message(v, schema_for(api_version, kind)?)
}

/// An object of (apiVersion, kind) as kube's protobuf serializer writes it (the envelope's
/// types from the arguments, not from the JSON).
pub fn encode_object_as(
    api_version: &str,
    kind: &str,
    v: &Value,
) -> Result<Vec<u8>, ProtobufError> {
    Ok(envelope_raw(
        api_version,
        kind,
        &object_message(api_version, kind, v)?,
    ))
}

/// An object (with its `apiVersion` and `kind`) as kube's protobuf serializer writes it.
pub fn encode_object(v: &Value) -> Result<Vec<u8>, ProtobufError> {
    let av = v["apiVersion"].as_str().unwrap_or_default();
    let k = v["kind"].as_str().unwrap_or_default();
    encode_object_as(av, k, v)
}

/// A `<kind>List` of `items`(their JSON, `apiVersion`/`kind` optional) with `list_meta`.
pub fn encode_list(
    api_version: &str,
    kind: &str,
    list_meta: &Value,
    items: &[Value],
) -> Result<Vec<u8>, ProtobufError> {
    let msgs = items
        .iter()
        .map(|item| object_message(api_version, kind, item))
        .collect::<Result<Vec<_>, _>>()?;
    encode_list_of_messages(api_version, kind, list_meta, msgs.iter().map(Vec::as_slice))
}

/// A `<kind>List` as [`encode_list`] writes it, from items already encoded by
/// [`object_message`] (a server renders each object once and lists pages of them).
pub fn encode_list_of_messages<'a>(
    api_version: &str,
    kind: &str,
    list_meta: &Value,
    items: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<u8>, ProtobufError> {
    let mut raw = Vec::new();
    put_len(
        &mut raw,
        1,
        &encode_message(list_meta, &super::schema::META_V1_LIST_META)?,
    );
    for item in items {
        put_len(&mut raw, 2, item);
    }
    Ok(envelope_raw(api_version, &format!("{kind}List"), &raw))
}

/// One watch frame: a 4-byte big-endian length, then a `metav1.WatchEvent` whose object is
/// `object` (with its `apiVersion` and `kind`) as [`encode_object`] writes it.
pub fn encode_watch_frame(event_type: &str, object: &Value) -> Result<Vec<u8>, ProtobufError> {
    watch_frame(event_type, &encode_object(object)?)
}

/// One watch frame (`;stream=watch`, written bare as kube's `RawSerializer` and
/// `LengthDelimitedFramer` do): a 4-byte big-endian length, then a `metav1.WatchEvent`
/// (`type` 1, `object` 2: a `RawExtension` whose `raw` is `enveloped`, an object with its
/// envelope as [`envelope_raw`] or [`encode_object_as`] write it).
pub fn watch_frame(event_type: &str, enveloped: &[u8]) -> Result<Vec<u8>, ProtobufError> {
    let mut ext = Vec::new();
    put_len(&mut ext, 1, enveloped);
    let mut ev = Vec::new();
    put_len(&mut ev, 1, event_type.as_bytes());
    put_len(&mut ev, 2, &ext);
    let len = u32::try_from(ev.len())
        .map_err(|_| ProtobufError::Encode("a watch event over 4 GiB".into()))?;
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(&ev);
    Ok(out)
}
