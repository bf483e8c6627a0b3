//! A serde `Deserializer` over protobuf bytes, driven by the schema tables: any type whose
//! `Deserialize` reads the JSON form of a Kubernetes object (k8s-openapi's, kube's `Status`)
//! reads its protobuf form directly, with no JSON text or `serde_json::Value` in between.
//!
//! Each message is a map whose keys are the fields' JSON names, in wire order (gogo-protobuf
//! writes them in field-number order). A repeated field (or map) is one key whose value
//! gathers every occurrence of the field in its message. Inlined structs (`json:",inline"`,
//! e.g. a `Volume`'s `VolumeSource`) give their fields to the parent's map. Fields the schema
//! does not know are skipped, as protobuf does. A single (non-repeated) field that occurs
//! twice is given twice and the target keeps the last (protobuf would merge two occurrences of
//! a message; gogo-protobuf never writes one twice).
//!
//! One pass over the bytes: Go writes a repeated field's occurrences next to each other, so
//! its elements are the run of that field at its first occurrence (the run's keys are read
//! once ahead, for the exact size hint, and its values once, by the target). Should the same
//! field come again later in the message (valid protobuf, never written by Go), the object is
//! read again in the general mode, which gathers occurrences from the whole message
//! ([`ProtobufError::Interleaved`] says so to [`super::decode_message`], never to a caller).
//! Fields are found by number in the message's `index` (an array lookup); the reading state
//! of a message is a few words per inlined level; nothing is allocated but what the target
//! keeps, and strings are lent (`visit_borrowed_str`).
//!
//! Go's JSON leaves out the zero value of a non-pointer `omitempty` scalar; protobuf (gogo)
//! writes every non-pointer field. So such a field at its zero value reads as absent
//! (`deserialize_option` → `None`), and the decoded object equals the one decoded from the
//! server's JSON. A zero `metav1.Time` (an empty message, or Go's zero instant) reads as
//! `null`, as Go's JSON writes it.

use base64::Engine as _;
use serde::de::{
    self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor,
    value::BorrowedStrDeserializer,
};

use super::{
    ProtobufError,
    schema::{Field, Kind, Message},
    wire::{Fields, Val, bytes, string, varint},
};

/// Levels of one message's reading state: itself and its inlined structs (Kubernetes nests
/// two at most: `Volume` → `VolumeSource`, `Probe` → `ProbeHandler`).
const MAX_INLINE: usize = 4;

/// Deepest nesting of messages; deeper input is refused rather than risking the stack.
const MAX_DEPTH: u32 = 100;

/// Go's zero `time.Time` in Unix seconds (`time.Time{}.Unix()`).
const GO_ZERO_SECS: i64 = -62_135_596_800;

/// A whole message of schema `msg`, with `apiVersion` and `kind` (from the envelope) as its
/// first two keys when given.
pub(crate) struct ObjectDe<'de> {
    pub(crate) buf: &'de [u8],
    pub(crate) msg: &'static Message,
    pub(crate) types: Option<(&'de str, &'de str)>,
    /// The general mode: repeated fields gathered from anywhere in their message.
    pub(crate) gather: bool,
}

impl<'de> Deserializer<'de> for ObjectDe<'de> {
    type Error = ProtobufError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProtobufError> {
        let mut access = MessageAccess::new(self.buf, self.msg, 0, self.gather);
        access.types = self.types;
        visitor.visit_map(access)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProtobufError> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ProtobufError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, ProtobufError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct enum identifier
    }
}

/// Reading position in one (possibly inlined) message.
#[derive(Clone, Copy)]
struct Level<'de> {
    fields: Fields<'de>,
    msg: &'static Message,
    /// Repeated and map fields already given (bit n: field number n; every number in the
    /// tables is below 64, checked by a test).
    seen: u64,
}

impl<'de> Level<'de> {
    fn new(buf: &'de [u8], msg: &'static Message) -> Self {
        Level {
            fields: Fields::new(buf),
            msg,
            seen: 0,
        }
    }

    /// Marks `n` as given; false when it already was.
    fn first_time(&mut self, n: u32) -> bool {
        let bit = 1u64 << (n & 63);
        let first = self.seen & bit == 0;
        self.seen |= bit;
        first
    }
}

/// What the next `next_value` reads.
enum Pending<'de> {
    None,
    Str(&'de str),
    Field {
        field: &'static Field,
        first: Val<'de>,
        /// For a repeated field or map: where its other occurrences are (its run, or the rest
        /// of the message in the general mode).
        rest: &'de [u8],
        /// Its elements, when known (non-packed): the exact size hint.
        count: Option<usize>,
    },
}

/// A message as a map of its fields' JSON names.
struct MessageAccess<'de> {
    levels: [Level<'de>; MAX_INLINE],
    top: usize,
    types: Option<(&'de str, &'de str)>,
    next_type: u8,
    pending: Pending<'de>,
    depth: u32,
    gather: bool,
}

impl<'de> MessageAccess<'de> {
    fn new(buf: &'de [u8], msg: &'static Message, depth: u32, gather: bool) -> Self {
        let level = Level::new(buf, msg);
        MessageAccess {
            // Only `levels[..=top]` is read; the others are overwritten when entered.
            levels: [level; MAX_INLINE],
            top: 0,
            types: None,
            next_type: 0,
            pending: Pending::None,
            depth,
            gather,
        }
    }

    /// The envelope's `apiVersion` then `kind`, before the fields (empty ones left out).
    fn next_type(&mut self) -> Option<(&'static str, &'de str)> {
        let (v, k) = self.types?;
        while self.next_type < 2 {
            self.next_type += 1;
            match self.next_type {
                1 if !v.is_empty() => return Some(("apiVersion", v)),
                2 if !k.is_empty() => return Some(("kind", k)),
                _ => {}
            }
        }
        None
    }
}

/// The run of field `number` at the start of `buf` (its occurrences next to each other):
/// its length in bytes and how many occurrences it holds. Stops at anything malformed, which
/// the message's own reading then reports.
fn run_of(number: u32, buf: &[u8]) -> (usize, usize) {
    let mut fields = Fields::new(buf);
    let mut count = 0;
    loop {
        let before = fields.buf.len();
        match fields.next() {
            Some(Ok((n, _))) if n == number => count += 1,
            _ => return (buf.len() - before, count),
        }
    }
}

/// The occurrences of field `number` in `rest`.
fn count_in(number: u32, rest: &[u8]) -> usize {
    Fields::new(rest)
        .map_while(Result::ok)
        .filter(|(n, _)| *n == number)
        .count()
}

impl<'de> MapAccess<'de> for MessageAccess<'de> {
    type Error = ProtobufError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ProtobufError> {
        if self.next_type < 2
            && let Some((key, value)) = self.next_type()
        {
            self.pending = Pending::Str(value);
            return seed
                .deserialize(BorrowedStrDeserializer::new(key))
                .map(Some);
        }
        loop {
            let level = &mut self.levels[self.top];
            let (n, val) = match level.fields.next() {
                None if self.top == 0 => return Ok(None),
                None => {
                    self.top -= 1;
                    continue;
                }
                Some(r) => r?,
            };
            // Unknown to the schema (a newer server's field): skipped, as protobuf does.
            let Some(field) = level.msg.field(n) else {
                continue;
            };
            let multi = match field.kind {
                Kind::Unsupported => continue,
                Kind::Message(m) if field.inline => {
                    if self.top + 1 >= MAX_INLINE {
                        return Err(ProtobufError::Wire(format!(
                            "{}: inlined structs nested too deep",
                            m.name
                        )));
                    }
                    let b = bytes(val, field.name)?;
                    self.top += 1;
                    self.levels[self.top] = Level::new(b, m);
                    continue;
                }
                Kind::Map(_) => true,
                _ => field.repeated,
            };
            let (rest, count): (&'de [u8], Option<usize>) = if !multi {
                (&[], None)
            } else if !level.first_time(n) {
                if self.gather {
                    // Already given whole, with the occurrences after the first.
                    continue;
                }
                return Err(ProtobufError::Interleaved);
            } else {
                let packed = !matches!(field.kind, Kind::Map(_)) && field.kind.is_packable();
                let rest = level.fields.buf;
                if self.gather {
                    (rest, (!packed).then(|| 1 + count_in(n, rest)))
                } else {
                    let (len, more) = run_of(n, rest);
                    level.fields.buf = &rest[len..];
                    (&rest[..len], (!packed).then_some(1 + more))
                }
            };
            self.pending = Pending::Field {
                field,
                first: val,
                rest,
                count,
            };
            return seed
                .deserialize(BorrowedStrDeserializer::new(field.name))
                .map(Some);
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, ProtobufError> {
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::Str(s) => seed.deserialize(BorrowedStrDeserializer::new(s)),
            Pending::Field {
                field,
                first,
                rest,
                count,
            } => seed.deserialize(FieldDe {
                field,
                first,
                rest,
                count,
                depth: self.depth,
                gather: self.gather,
            }),
            Pending::None => Err(ProtobufError::Value(
                "next_value called before next_key".into(),
            )),
        }
    }
}

/// One field's value: its first occurrence, and for a repeated field or a map where the
/// other occurrences are.
struct FieldDe<'de> {
    field: &'static Field,
    first: Val<'de>,
    rest: &'de [u8],
    count: Option<usize>,
    depth: u32,
    gather: bool,
}

impl FieldDe<'_> {
    fn single(&self) -> bool {
        !self.field.repeated && !matches!(self.field.kind, Kind::Map(_))
    }

    /// What the JSON of the Go value would have left out or written as `null`.
    fn is_absent(&self) -> bool {
        match self.field.kind {
            Kind::Time | Kind::MicroTime => zero_time(self.first),
            Kind::RawExtension | Kind::FieldsV1 => self.first.is_zero(),
            Kind::String
            | Kind::Bool
            | Kind::Int32
            | Kind::Int64
            | Kind::Uint32
            | Kind::Uint64
            | Kind::Float64
            | Kind::Float32
            | Kind::Bytes
            | Kind::Duration => !self.field.pointer && self.field.omitempty && self.first.is_zero(),
            _ => false,
        }
    }
}

impl<'de> Deserializer<'de> for FieldDe<'de> {
    type Error = ProtobufError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProtobufError> {
        match self.field.kind {
            Kind::Map(value) => visitor.visit_map(MapEntries {
                value,
                next: Some(self.first),
                rest: Fields::new(self.rest),
                number: self.field.number,
                pending: None,
                left: self.count.unwrap_or(1),
                depth: self.depth,
                gather: self.gather,
            }),
            kind if self.field.repeated => visitor.visit_seq(Repeated {
                number: self.field.number,
                kind,
                next: Some(self.first),
                rest: Fields::new(self.rest),
                packed: &[],
                left: self.count,
                depth: self.depth,
                gather: self.gather,
            }),
            _ => ValueDe {
                kind: self.field.kind,
                val: self.first,
                depth: self.depth,
                gather: self.gather,
            }
            .deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProtobufError> {
        if self.single() && self.is_absent() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ProtobufError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ProtobufError> {
        if self.single() {
            let v = ValueDe {
                kind: self.field.kind,
                val: self.first,
                depth: self.depth,
                gather: self.gather,
            };
            v.deserialize_enum(name, variants, visitor)
        } else {
            self.deserialize_any(visitor)
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, ProtobufError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct identifier
    }
}

/// Whether a `metav1.Time` value is Go's zero time (JSON `null`): an empty message, or
/// Go's zero instant written out.
pub(super) fn zero_time(v: Val<'_>) -> bool {
    match v {
        Val::Bytes([]) => true,
        Val::Bytes(b) => matches!(timestamp(b), Ok((GO_ZERO_SECS, 0))),
        _ => false,
    }
}

/// One value (a single field's, or one element of a repeated field or map).
#[derive(Clone, Copy)]
struct ValueDe<'de> {
    kind: Kind,
    val: Val<'de>,
    depth: u32,
    gather: bool,
}

impl<'de> Deserializer<'de> for ValueDe<'de> {
    type Error = ProtobufError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProtobufError> {
        let v = self.val;
        match self.kind {
            Kind::String => visitor.visit_borrowed_str(string(v, "string")?),
            Kind::Bool => visitor.visit_bool(varint(v, "bool")? != 0),
            // int32 is sign-extended to 64 bits on the wire: truncation gives it back.
            Kind::Int32 => visitor.visit_i32(varint(v, "int32")? as i32),
            Kind::Int64 => visitor.visit_i64(varint(v, "int64")? as i64),
            Kind::Uint32 => visitor.visit_u32(varint(v, "uint32")? as u32),
            Kind::Uint64 => visitor.visit_u64(varint(v, "uint64")?),
            Kind::Float64 => match v {
                Val::Fixed64(b) => visitor.visit_f64(f64::from_bits(b)),
                _ => Err(ProtobufError::Wire("double: expected 8 bytes".into())),
            },
            Kind::Float32 => match v {
                Val::Fixed32(b) => visitor.visit_f32(f32::from_bits(b)),
                _ => Err(ProtobufError::Wire("float: expected 4 bytes".into())),
            },
            Kind::Bytes => visitor
                .visit_string(base64::engine::general_purpose::STANDARD.encode(bytes(v, "bytes")?)),
            Kind::Time | Kind::MicroTime => {
                if zero_time(v) {
                    return visitor.visit_unit();
                }
                let (secs, nanos) = timestamp(bytes(v, "Time")?)?;
                let micros = matches!(self.kind, Kind::MicroTime).then_some(nanos / 1000);
                // On the stack: the target parses the text and keeps its own value.
                let mut buf = [0u8; super::time::RFC3339_MAX];
                visitor.visit_str(super::time::rfc3339_into(secs, micros, &mut buf)?)
            }
            Kind::Duration => {
                let mut ns = 0i64;
                for f in Fields::new(bytes(v, "Duration")?) {
                    if let (1, val) = f? {
                        ns = varint(val, "Duration.duration")? as i64;
                    }
                }
                visitor.visit_string(super::time::go_duration(ns))
            }
            Kind::FieldsV1 | Kind::RawExtension => {
                let mut raw: &[u8] = &[];
                for f in Fields::new(bytes(v, "raw JSON")?) {
                    if let (1, val) = f? {
                        raw = bytes(val, "raw JSON")?;
                    }
                }
                if raw.is_empty() {
                    return visitor.visit_unit();
                }
                serde_json::Deserializer::from_slice(raw)
                    .deserialize_any(visitor)
                    .map_err(|e| ProtobufError::Value(format!("embedded JSON: {e}")))
            }
            Kind::IntOrString => {
                let (mut ty, mut int, mut s) = (0u64, 0u64, "");
                for f in Fields::new(bytes(v, "IntOrString")?) {
                    match f? {
                        (1, val) => ty = varint(val, "IntOrString.type")?,
                        (2, val) => int = varint(val, "IntOrString.intVal")?,
                        (3, val) => s = string(val, "IntOrString.strVal")?,
                        _ => {}
                    }
                }
                match ty {
                    0 => visitor.visit_i32(int as i32),
                    1 => visitor.visit_borrowed_str(s),
                    t => Err(ProtobufError::Value(format!(
                        "IntOrString: impossible type {t}"
                    ))),
                }
            }
            Kind::Quantity => {
                // A zero Quantity (no `string`) is "0" in JSON.
                let mut s = "0";
                for f in Fields::new(bytes(v, "Quantity")?) {
                    if let (1, val) = f? {
                        s = string(val, "Quantity.string")?;
                    }
                }
                visitor.visit_borrowed_str(s)
            }
            Kind::Message(m) => {
                if self.depth >= MAX_DEPTH {
                    return Err(ProtobufError::Wire(format!(
                        "messages nested deeper than {MAX_DEPTH}"
                    )));
                }
                visitor.visit_map(MessageAccess::new(
                    bytes(v, m.name)?,
                    m,
                    self.depth + 1,
                    self.gather,
                ))
            }
            Kind::Map(_) => Err(ProtobufError::Value("a map inside a map".into())),
            Kind::Unsupported => visitor.visit_unit(),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProtobufError> {
        let null = match self.kind {
            Kind::Time | Kind::MicroTime => zero_time(self.val),
            Kind::RawExtension | Kind::FieldsV1 => self.val.is_zero(),
            _ => false,
        };
        if null {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ProtobufError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ProtobufError> {
        match self.kind {
            // A string enum (kube's `StatusSummary`): the variant named by the string.
            Kind::String => {
                visitor.visit_enum(BorrowedStrDeserializer::new(string(self.val, "enum")?))
            }
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, ProtobufError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct identifier
    }
}

/// `google.protobuf.Timestamp`-shaped `metav1.Timestamp`: `seconds` 1, `nanos` 2.
pub(super) fn timestamp(b: &[u8]) -> Result<(i64, u32), ProtobufError> {
    let (mut secs, mut nanos) = (0i64, 0u32);
    for f in Fields::new(b) {
        match f? {
            (1, v) => secs = varint(v, "Timestamp.seconds")? as i64,
            (2, v) => nanos = (varint(v, "Timestamp.nanos")? as i32).clamp(0, 999_999_999) as u32,
            _ => {}
        }
    }
    Ok((secs, nanos))
}

/// The next occurrence of field `number` in `rest`: the next field of the run, or in the
/// general mode the next one of that number anywhere after.
fn next_occurrence<'de>(
    number: u32,
    rest: &mut Fields<'de>,
    gather: bool,
) -> Result<Option<Val<'de>>, ProtobufError> {
    for f in rest.by_ref() {
        let (n, v) = f?;
        if n == number || !gather {
            // A run holds only this field.
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// A repeated field's elements, from every occurrence (and packed runs).
struct Repeated<'de> {
    number: u32,
    kind: Kind,
    next: Option<Val<'de>>,
    rest: Fields<'de>,
    packed: &'de [u8],
    /// Elements left, when known (non-packed): the exact size hint.
    left: Option<usize>,
    depth: u32,
    gather: bool,
}

impl<'de> Repeated<'de> {
    /// One number of a packed run.
    fn packed_one(&mut self) -> Result<Val<'de>, ProtobufError> {
        let mut b = self.packed;
        let v = match self.kind {
            Kind::Float64 => {
                let (x, rest) = b
                    .split_first_chunk::<8>()
                    .ok_or_else(|| ProtobufError::Wire("truncated packed double".into()))?;
                b = rest;
                Val::Fixed64(u64::from_le_bytes(*x))
            }
            Kind::Float32 => {
                let (x, rest) = b
                    .split_first_chunk::<4>()
                    .ok_or_else(|| ProtobufError::Wire("truncated packed float".into()))?;
                b = rest;
                Val::Fixed32(u32::from_le_bytes(*x))
            }
            _ => Val::Varint(
                prost::encoding::decode_varint(&mut b)
                    .map_err(|e| ProtobufError::Wire(e.to_string()))?,
            ),
        };
        self.packed = b;
        Ok(v)
    }
}

impl<'de> SeqAccess<'de> for Repeated<'de> {
    type Error = ProtobufError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, ProtobufError> {
        loop {
            let val = if !self.packed.is_empty() {
                self.packed_one()?
            } else if let Some(v) = self.next.take() {
                v
            } else {
                match next_occurrence(self.number, &mut self.rest, self.gather)? {
                    Some(v) => v,
                    None => return Ok(None),
                }
            };
            if let (Val::Bytes(b), true) = (val, self.kind.is_packable()) {
                self.packed = b;
                continue;
            }
            if let Some(l) = self.left.as_mut() {
                *l = l.saturating_sub(1);
            }
            return seed
                .deserialize(ValueDe {
                    kind: self.kind,
                    val,
                    depth: self.depth,
                    gather: self.gather,
                })
                .map(Some);
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.left
    }
}

/// A map field's entries (`key` 1, `value` 2), from every occurrence.
struct MapEntries<'de> {
    value: &'static Kind,
    next: Option<Val<'de>>,
    rest: Fields<'de>,
    number: u32,
    pending: Option<Val<'de>>,
    left: usize,
    depth: u32,
    gather: bool,
}

/// The value a map entry without one has: its kind's zero.
fn zero(kind: Kind) -> Val<'static> {
    match kind {
        Kind::Bool | Kind::Int32 | Kind::Int64 | Kind::Uint32 | Kind::Uint64 => Val::Varint(0),
        Kind::Float64 => Val::Fixed64(0),
        Kind::Float32 => Val::Fixed32(0),
        _ => Val::Bytes(&[]),
    }
}

impl<'de> MapAccess<'de> for MapEntries<'de> {
    type Error = ProtobufError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ProtobufError> {
        let entry = match self.next.take() {
            Some(v) => v,
            None => match next_occurrence(self.number, &mut self.rest, self.gather)? {
                Some(v) => v,
                None => return Ok(None),
            },
        };
        self.left = self.left.saturating_sub(1);
        let (mut key, mut value) = ("", None);
        for f in Fields::new(bytes(entry, "map entry")?) {
            match f? {
                (1, v) => key = string(v, "map key")?,
                (2, v) => value = Some(v),
                _ => {}
            }
        }
        self.pending = Some(value.unwrap_or_else(|| zero(*self.value)));
        seed.deserialize(BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, ProtobufError> {
        let val = self
            .pending
            .take()
            .ok_or_else(|| ProtobufError::Value("next_value called before next_key".into()))?;
        seed.deserialize(ValueDe {
            kind: *self.value,
            val,
            depth: self.depth,
            gather: self.gather,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl de::Error for ProtobufError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        ProtobufError::Value(msg.to_string())
    }
}
