//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`), read straight into
//! the k8s-openapi types.
//!
//! What client-go asks for with `rest.Config.ContentType`: kube-apiserver answers built-in
//! kinds in protobuf (about half the bytes of JSON, and cheaper to read); custom kinds are JSON
//! only. This module is pure (no I/O): the actor layer asks for it and hands the bytes here.
//!
//! - [`envelope`]: kube's envelope, the magic `k8s\0` then a `runtime.Unknown` (`typeMeta` 1:
//!   `apiVersion` 1, `kind` 2; `raw` 2: the object's message; `contentEncoding` 3,
//!   `contentType` 4). [`decode`] reads an object through it.
//! - [`list`]: a `…List` (`metadata` 1, `items` 2, each item a message without envelope),
//!   its items as byte ranges to decode one by one ([`decode_message`]).
//! - [`FrameReader`] and [`watch_event`]: a watch stream (`;stream=watch`): 4-byte big-endian
//!   length-delimited frames, each a `metav1.WatchEvent` (`type` 1, `object` 2: a
//!   `RawExtension` whose `raw` is the object, itself enveloped), as apimachinery's
//!   `LengthDelimitedFramer` and `RawSerializer` write them.
//! - The decoder (`de`): a serde `Deserializer` over a message, driven by the [`schema`]
//!   tables (generated from the Go types, `generate.py`), so any k8s-openapi type's
//!   `Deserialize` reads protobuf with no JSON in between; it gives the same object the JSON
//!   of the same Go value gives (Go's `omitempty` applied, times as RFC 3339, quantities and
//!   int-or-strings as their JSON forms, `bytes` as base64, embedded JSON parsed).
//!
//! Bad input is a [`ProtobufError`], never a panic: truncated or malformed wire data, a wrong
//! magic, a kind without schema, a frame over the limit. Fields the schema does not know are
//! skipped, as protobuf does.
//!
//! - [`object_meta`] and [`strip_managed_fields`]: an object's metadata read, and its
//!   `managedFields` cut out, without decoding the object; [`message_to_json`]: a message as
//!   JSON text by the tables alone (the lean cache mode's needs, I7).
//! - `encode_*`: the other way, an object's JSON to protobuf by the same tables (for servers
//!   and tests).
//!
//! Why not prost with generated messages (`k8s-pb`): those are a second set of types, so each
//! object would be decoded into one and converted field by field into k8s-openapi's; here the
//! wire primitives are prost's and the objects are built once, by their own `Deserialize`.

mod de;
mod encode;
mod json;
mod meta;
pub mod schema;
#[rustfmt::skip]
mod schema_gen;
mod time;
mod types;
mod wire;

use std::ops::Range;

use serde::Deserialize;

pub use encode::{
    encode_list, encode_list_of_messages, encode_message, encode_object, encode_object_as,
    encode_watch_frame, envelope_raw, object_message, watch_frame,
};
pub use json::message_to_json;
pub use meta::{MetaView, OwnerRef, object_meta, strip_managed_fields};
pub use schema::{Field, Kind, Message, kind_at, kind_index, kind_schema};
pub use time::{go_duration, rfc3339};
use wire::{Fields, bytes, string};

/// The media type of Kubernetes' protobuf encoding.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What a protobuf client sends as `Accept`: protobuf, or JSON from a server (or for a kind)
/// without it; client-go's `ContentType` with its default `AcceptContentTypes`.
pub const ACCEPT: &str = "application/vnd.kubernetes.protobuf, application/json";

/// The magic prefix of every enveloped object.
pub const PREFIX: &[u8] = b"k8s\0";

/// The largest watch frame read (client-go's streaming decoder's limit: 16 MiB).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// Why protobuf bytes could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtobufError {
    /// The data does not start with `k8s\0`.
    #[error(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    )]
    BadMagic,
    /// Malformed or truncated wire data.
    #[error("malformed protobuf: {0}")]
    Wire(String),
    /// The envelope names a kind these tables have no schema for.
    #[error("no protobuf schema for {api_version}, Kind={kind}")]
    UnknownKind {
        /// The envelope's apiVersion.
        api_version: String,
        /// The envelope's kind.
        kind: String,
    },
    /// A watch frame longer than the limit.
    #[error("watch frame of {len} bytes is larger than the limit of {max} bytes")]
    FrameTooLarge {
        /// The frame's declared length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The stream ended inside a frame.
    #[error("watch stream ended inside a frame ({0} bytes left over)")]
    TruncatedFrame(usize),
    /// A value the target type refused (a serde error: wrong kind, bad value).
    #[error("{0}")]
    Value(String),
    /// A repeated field's occurrences were not next to each other, which the decoder's one-pass
    /// mode does not read (Go never writes them so). Internal: [`decode_message`] then reads the
    /// object again in the general mode, and never returns this.
    #[error("a repeated field's occurrences are not contiguous")]
    Interleaved,
    /// JSON that cannot be encoded by the schema (`encode_*`).
    #[error("cannot encode to protobuf: {0}")]
    Encode(String),
}

impl ProtobufError {
    /// Whether the bytes themselves are broken (envelope, wire format, framing), rather than
    /// well-formed data of a type the caller did not expect ([`ProtobufError::Value`],
    /// [`ProtobufError::UnknownKind`]).
    pub fn is_malformed(&self) -> bool {
        matches!(
            self,
            ProtobufError::BadMagic
                | ProtobufError::Wire(_)
                | ProtobufError::FrameTooLarge { .. }
                | ProtobufError::TruncatedFrame(_)
        )
    }
}

/// Whether `content_type` (parameters such as `;stream=watch` ignored) is Kubernetes' protobuf.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case(CONTENT_TYPE))
}

/// kube's envelope, read: the object's type and its message.
#[derive(Clone, Copy, Debug)]
pub struct Unknown<'a> {
    /// `typeMeta.apiVersion`.
    pub api_version: &'a str,
    /// `typeMeta.kind`.
    pub kind: &'a str,
    /// The object's message.
    pub raw: &'a [u8],
}

/// Reads the envelope (`k8s\0` + `runtime.Unknown`) of `data`.
pub fn envelope(data: &[u8]) -> Result<Unknown<'_>, ProtobufError> {
    let body = data.strip_prefix(PREFIX).ok_or(ProtobufError::BadMagic)?;
    unknown(body)
}

/// A `runtime.Unknown` message (no prefix).
fn unknown(body: &[u8]) -> Result<Unknown<'_>, ProtobufError> {
    let mut out = Unknown {
        api_version: "",
        kind: "",
        raw: &[],
    };
    for f in Fields::new(body) {
        match f? {
            (1, v) => {
                for t in Fields::new(bytes(v, "Unknown.typeMeta")?) {
                    match t? {
                        (1, v) => out.api_version = string(v, "TypeMeta.apiVersion")?,
                        (2, v) => out.kind = string(v, "TypeMeta.kind")?,
                        _ => {}
                    }
                }
            }
            (2, v) => out.raw = bytes(v, "Unknown.raw")?,
            (3, v) => {
                let enc = string(v, "Unknown.contentEncoding")?;
                if !enc.is_empty() {
                    return Err(ProtobufError::Wire(format!(
                        "unsupported contentEncoding {enc:?}"
                    )));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The schema of an envelope's kind.
fn schema_of(u: &Unknown<'_>) -> Result<&'static Message, ProtobufError> {
    kind_schema(u.api_version, u.kind).ok_or_else(|| ProtobufError::UnknownKind {
        api_version: u.api_version.to_string(),
        kind: u.kind.to_string(),
    })
}

/// Decodes one enveloped object (a GET's body, a watch event's object) into `T`, its
/// `apiVersion` and `kind` given from the envelope (so a k8s-openapi type refuses another
/// kind, as it does from JSON).
pub fn decode<'a, T: Deserialize<'a>>(data: &'a [u8]) -> Result<T, ProtobufError> {
    let u = envelope(data)?;
    let schema = schema_of(&u)?;
    decode_message(u.raw, schema, Some((u.api_version, u.kind)))
}

/// Decodes one message of `schema` (a list item, which has no envelope) into `T`; `types`
/// (apiVersion, kind) are given to `T` as its first two fields.
pub fn decode_message<'a, T: Deserialize<'a>>(
    raw: &'a [u8],
    schema: &'static Message,
    types: Option<(&'a str, &'a str)>,
) -> Result<T, ProtobufError> {
    let object = |gather| de::ObjectDe {
        buf: raw,
        msg: schema,
        types,
        gather,
    };
    match T::deserialize(object(false)) {
        // Valid protobuf that Go does not write: read again, gathering repeated fields.
        Err(ProtobufError::Interleaved) => T::deserialize(object(true)),
        r => r,
    }
}

/// A list, read: its type, its metadata's message and its items' positions.
#[derive(Clone, Debug)]
pub struct List<'a> {
    /// The list's apiVersion (`v1`).
    pub api_version: &'a str,
    /// The list's kind (`ConfigMapList`).
    pub kind: &'a str,
    /// The items' kind (`ConfigMap`).
    pub item_kind: &'a str,
    /// The items' schema.
    pub item_schema: &'static Message,
    /// The `ListMeta` message.
    pub metadata: &'a [u8],
    /// Each item's message, as a range of the bytes given to [`list`].
    pub items: Vec<Range<usize>>,
}

impl List<'_> {
    /// The list's metadata as `T` (kube's `ListMeta`, or any type reading its JSON form).
    pub fn metadata<'b, T: Deserialize<'b>>(&'b self) -> Result<T, ProtobufError> {
        decode_message(self.metadata, &schema::META_V1_LIST_META, None)
    }
}

/// Reads an enveloped `…List` whose items have a schema: its metadata and where each item is
/// (ranges of `data`, so the items can be decoded elsewhere, in parallel, from shared bytes).
pub fn list(data: &[u8]) -> Result<List<'_>, ProtobufError> {
    let u = envelope(data)?;
    let item_kind = u
        .kind
        .strip_suffix("List")
        .filter(|k| !k.is_empty())
        .ok_or_else(|| ProtobufError::Value(format!("{} is not a list kind", u.kind)))?;
    let item_schema =
        kind_schema(u.api_version, item_kind).ok_or_else(|| ProtobufError::UnknownKind {
            api_version: u.api_version.to_string(),
            kind: item_kind.to_string(),
        })?;
    // `raw` lies inside `data`: item ranges are offsets from the start of `data`.
    let base = u.raw.as_ptr() as usize - data.as_ptr() as usize;
    let mut out = List {
        api_version: u.api_version,
        kind: u.kind,
        item_kind,
        item_schema,
        metadata: &[],
        items: Vec::new(),
    };
    for f in Fields::new(u.raw) {
        match f? {
            (1, v) => out.metadata = bytes(v, "List.metadata")?,
            (2, v) => {
                let item = bytes(v, "List.items")?;
                let start = base + (item.as_ptr() as usize - u.raw.as_ptr() as usize);
                out.items.push(start..start + item.len());
            }
            _ => {}
        }
    }
    Ok(out)
}

/// One watch event, read: its type and its enveloped object.
#[derive(Clone, Copy, Debug)]
pub struct WatchEvent<'a> {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub event_type: &'a str,
    /// The object, enveloped (`k8s\0` + `runtime.Unknown`): a `Status` for `ERROR`.
    pub object: &'a [u8],
}

/// Reads one watch frame's `metav1.WatchEvent`. kube-apiserver writes it bare
/// (`RawSerializer`); an enveloped one (`k8s\0` + `runtime.Unknown` around it) is read too.
pub fn watch_event(frame: &[u8]) -> Result<WatchEvent<'_>, ProtobufError> {
    let msg = match frame.strip_prefix(PREFIX) {
        Some(body) => unknown(body)?.raw,
        None => frame,
    };
    let mut out = WatchEvent {
        event_type: "",
        object: &[],
    };
    for f in Fields::new(msg) {
        match f? {
            (1, v) => out.event_type = string(v, "WatchEvent.type")?,
            (2, v) => {
                for r in Fields::new(bytes(v, "WatchEvent.object")?) {
                    if let (1, v) = r? {
                        out.object = bytes(v, "RawExtension.raw")?;
                    }
                }
            }
            _ => {}
        }
    }
    if out.event_type.is_empty() {
        return Err(ProtobufError::Wire("watch event without a type".into()));
    }
    Ok(out)
}

/// Splits a watch stream into frames (a 4-byte big-endian length, then that many bytes), as
/// the bytes arrive in chunks of any size.
#[derive(Debug)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    max: usize,
}

impl Default for FrameReader {
    fn default() -> Self {
        FrameReader::new(MAX_FRAME)
    }
}

impl FrameReader {
    /// Frames of at most `max` bytes.
    pub fn new(max: usize) -> Self {
        FrameReader {
            buf: Vec::new(),
            start: 0,
            max,
        }
    }

    /// Appends a chunk of the stream.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole frame, `None` until one is complete; a frame over the limit is an error
    /// (the stream cannot be resynchronised after it).
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, ProtobufError> {
        let pending = &self.buf[self.start..];
        let Some((len, rest)) = pending.split_first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*len) as usize;
        if len > self.max {
            return Err(ProtobufError::FrameTooLarge { len, max: self.max });
        }
        if rest.len() < len {
            return Ok(None);
        }
        let frame = rest[..len].to_vec();
        self.start += 4 + len;
        Ok(Some(frame))
    }

    /// At the end of the stream: an error when it stopped inside a frame.
    pub fn finish(&self) -> Result<(), ProtobufError> {
        match self.buf.len() - self.start {
            0 => Ok(()),
            n => Err(ProtobufError::TruncatedFrame(n)),
        }
    }
}

#[cfg(test)]
mod tests;
