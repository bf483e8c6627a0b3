//! Reading protobuf's wire format: keys, varints, fixed-size and length-delimited values
//! (prost's primitives), one message's fields in order.

use prost::encoding::decode_varint;

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

    #[inline]
    fn next_field(&mut self) -> Result<(u32, Val<'a>), ProtobufError> {
        let mut buf = self.buf;
        let key = read_varint(&mut buf)?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|n| *n != 0)
            .ok_or_else(|| ProtobufError::Wire(format!("invalid field key {key}")))?;
        let val = match key & 7 {
            0 => Val::Varint(read_varint(&mut buf)?),
            1 => {
                let (b, rest) = buf
                    .split_first_chunk::<8>()
                    .ok_or_else(|| truncated("a fixed64 value"))?;
                buf = rest;
                Val::Fixed64(u64::from_le_bytes(*b))
            }
            5 => {
                let (b, rest) = buf
                    .split_first_chunk::<4>()
                    .ok_or_else(|| truncated("a fixed32 value"))?;
                buf = rest;
                Val::Fixed32(u32::from_le_bytes(*b))
            }
            2 => {
                let len = read_varint(&mut buf)?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|l| *l <= buf.len())
                    .ok_or_else(|| truncated("a length-delimited value"))?;
                let (b, rest) = buf.split_at(len);
                buf = rest;
                Val::Bytes(b)
            }
            3 | 4 => {
                return Err(ProtobufError::Wire(format!(
                    "field {number}: groups are not used by Kubernetes"
                )));
            }
            w => {
                return Err(ProtobufError::Wire(format!(
                    "field {number}: invalid wire type {w}"
                )));
            }
        };
        self.buf = buf;
        Ok((number, val))
    }
}

/// A varint: one byte inline (most keys, lengths and small numbers), longer ones by prost.
#[inline]
fn read_varint(buf: &mut &[u8]) -> Result<u64, ProtobufError> {
    match buf.split_first() {
        Some((&b, rest)) if b < 0x80 => {
            *buf = rest;
            Ok(u64::from(b))
        }
        _ => decode_varint(buf).map_err(wire_error),
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Val<'a>), ProtobufError>;

    #[inline]
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
