//! Reading protobuf's wire format: keys, varints, fixed-size and length-delimited values
//! (prost's primitives), one message's fields in order.

use prost::encoding::{WireType, decode_key, decode_varint};

use super::ProtobufError;

/// One field's value as it is on the wire.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Val<'a> {
    /// A varint.
    Varint(u64),
    /// 8 bytes (`fixed64`, `double`).
    Fixed64(u64),
    /// 4 bytes (`fixed32`, `float`).
    Fixed32(u32),
    /// Length-delimited (strings, bytes, messages, packed numbers).
    Bytes(&'a [u8]),
}

impl Val<'_> {
    /// Whether this is the zero value of its kind (what Go's `omitempty` leaves out).
    pub(crate) fn is_zero(&self) -> bool {
        match self {
            Val::Varint(v) | Val::Fixed64(v) => *v == 0,
            Val::Fixed32(v) => *v == 0,
            Val::Bytes(b) => b.is_empty(),
        }
    }
}

/// The fields of one message, in wire order; stops at the first malformed one (after
/// yielding its error).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fields<'a> {
    pub(crate) buf: &'a [u8],
}

impl<'a> Fields<'a> {
    /// Over one message's bytes.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Fields { buf }
    }

    fn next_field(&mut self) -> Result<(u32, Val<'a>), ProtobufError> {
        let mut buf = self.buf;
        let (number, wire) = decode_key(&mut buf).map_err(wire_error)?;
        let val = match wire {
            WireType::Varint => Val::Varint(decode_varint(&mut buf).map_err(wire_error)?),
            WireType::SixtyFourBit => {
                let (b, rest) = buf
                    .split_first_chunk::<8>()
                    .ok_or_else(|| truncated("a fixed64 value"))?;
                buf = rest;
                Val::Fixed64(u64::from_le_bytes(*b))
            }
            WireType::ThirtyTwoBit => {
                let (b, rest) = buf
                    .split_first_chunk::<4>()
                    .ok_or_else(|| truncated("a fixed32 value"))?;
                buf = rest;
                Val::Fixed32(u32::from_le_bytes(*b))
            }
            WireType::LengthDelimited => {
                let len = decode_varint(&mut buf).map_err(wire_error)?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|l| *l <= buf.len())
                    .ok_or_else(|| truncated("a length-delimited value"))?;
                let (b, rest) = buf.split_at(len);
                buf = rest;
                Val::Bytes(b)
            }
            WireType::StartGroup | WireType::EndGroup => {
                return Err(ProtobufError::Wire(format!(
                    "field {number}: groups are not used by Kubernetes"
                )));
            }
        };
        self.buf = buf;
        Ok((number, val))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Val<'a>), ProtobufError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let r = self.next_field();
        if r.is_err() {
            self.buf = &[];
        }
        Some(r)
    }
}

fn wire_error(e: prost::DecodeError) -> ProtobufError {
    ProtobufError::Wire(e.to_string())
}

fn truncated(what: &str) -> ProtobufError {
    ProtobufError::Wire(format!(
        "truncated: {what} runs past the end of its message"
    ))
}

/// The bytes of a length-delimited value, or a typed error naming what was expected.
pub(crate) fn bytes<'a>(v: Val<'a>, what: &str) -> Result<&'a [u8], ProtobufError> {
    match v {
        Val::Bytes(b) => Ok(b),
        _ => Err(ProtobufError::Wire(format!(
            "{what}: expected a length-delimited value"
        ))),
    }
}

/// A varint value, or a typed error naming what was expected.
pub(crate) fn varint(v: Val<'_>, what: &str) -> Result<u64, ProtobufError> {
    match v {
        Val::Varint(x) => Ok(x),
        _ => Err(ProtobufError::Wire(format!("{what}: expected a varint"))),
    }
}

/// A UTF-8 string value.
pub(crate) fn string<'a>(v: Val<'a>, what: &str) -> Result<&'a str, ProtobufError> {
    std::str::from_utf8(bytes(v, what)?)
        .map_err(|_| ProtobufError::Wire(format!("{what}: invalid UTF-8")))
}
