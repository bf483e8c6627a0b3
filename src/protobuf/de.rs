//! A serde `Deserializer` over protobuf bytes, driven by the schema tables: any type whose
//! `Deserialize` reads the JSON form of a Kubernetes object (k8s-openapi's, kube's `Status`)
//! reads its protobuf form directly, with no JSON text or `serde_json::Value` in between.
//!
//! Each message is a map whose keys are the fields' JSON names, in wire order (gogo-protobuf
//! writes them in field-number order). A repeated field (or map) is one key whose value
//! gathers every occurrence of the field in its message; later occurrences are skipped.
//! Inlined structs (`json:",inline"`, e.g. a `Volume`'s `VolumeSource`) give their fields to
//! the parent's map. Fields the schema does not know are skipped, as protobuf does. A single
//! (non-repeated) field that occurs twice is given twice and the target keeps the last
//! (protobuf would merge two occurrences of a message; gogo-protobuf never writes one twice).
//!
//! Go's JSON leaves out the zero value of a non-pointer `omitempty` scalar; protobuf (gogo)
//! writes every non-pointer field. So such a field at its zero value reads as absent
//! (`deserialize_option` → `None`), and the decoded object equals the one decoded from the
//! server's JSON.

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

/// Deepest nesting of inlined structs (Kubernetes has two levels at most).
const MAX_INLINE: usize = 4;

/// Deepest nesting of messages; deeper input is refused rather than risking the stack.
const MAX_DEPTH: u32 = 100;

static EMPTY: Message = Message {
    name: "",
    fields: &[],
};

/// A whole message of schema `msg`, with `apiVersion` and `kind` (from the envelope) as its
/// first two keys when given.
pub(crate) struct ObjectDe<'de> {
    pub(crate) buf: &'de [u8],
    pub(crate) msg: &'static Message,
    pub(crate) types: Option<(&'de str, &'de str)>,
}

impl<'de> Deserializer<'de> for ObjectDe<'de> {
    type Error = ProtobufError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProtobufError> {
        visitor.visit_map(MessageAccess::new(self.buf, self.msg, self.types, 0))
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
#[derive(Clone)]
struct Level<'de> {
    fields: Fields<'de>,
    msg: &'static Message,
    /// Repeated and map fields already given (bit n: field n < 64).
    seen: u64,
    /// The same for field numbers of 64 and more (rare; allocated only then).
    seen_hi: Vec<u32>,
}

impl<'de> Level<'de> {
    fn new(buf: &'de [u8], msg: &'static Message) -> Self {
        Level {
            fields: Fields::new(buf),
            msg,
            seen: 0,
            seen_hi: Vec::new(),
        }
    }

    /// Marks `n` as given; false when it already was.
    fn first_time(&mut self, n: u32) -> bool {
        if n < 64 {
            let bit = 1u64 << n;
            let first = self.seen & bit == 0;
            self.seen |= bit;
            first
        } else if self.seen_hi.contains(&n) {
            false
        } else {
            self.seen_hi.push(n);
            true
        }
    }
}

/// What the next `next_value` reads.
enum Pending<'de> {
    None,
    Str(&'de str),
    Field {
        field: &'static Field,
        first: Val<'de>,
        rest: &'de [u8],
    },
}

/// A message as a map of its fields' JSON names.
struct MessageAccess<'de> {
    types: [Option<(&'static str, &'de str)>; 2],
    next_type: usize,
    levels: [Level<'de>; MAX_INLINE],
    top: usize,
    pending: Pending<'de>,
    depth: u32,
}

impl<'de> MessageAccess<'de> {
    fn new(
        buf: &'de [u8],
        msg: &'static Message,
        types: Option<(&'de str, &'de str)>,
        depth: u32,
    ) -> Self {
        let types = match types {
            Some((v, k)) => [
                (!v.is_empty()).then_some(("apiVersion", v)),
                (!k.is_empty()).then_some(("kind", k)),
            ],
            None => [None, None],
        };
        let empty = Level::new(&[], &EMPTY);
        MessageAccess {
            types,
            next_type: 0,
            levels: [Level::new(buf, msg), empty.clone(), empty.clone(), empty],
            top: 0,
            pending: Pending::None,
            depth,
        }
    }
}

impl<'de> MapAccess<'de> for MessageAccess<'de> {
    type Error = ProtobufError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ProtobufError> {
        while self.next_type < 2 {
            let t = self.types[self.next_type];
            self.next_type += 1;
            if let Some((key, value)) = t {
                self.pending = Pending::Str(value);
                return seed
                    .deserialize(BorrowedStrDeserializer::new(key))
                    .map(Some);
            }
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
            match field.kind {
                Kind::Unsupported => continue,
                Kind::Map(_) if !level.first_time(n) => continue,
                _ if field.repeated && !level.first_time(n) => continue,
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
                _ => {}
            }
            self.pending = Pending::Field {
                field,
                first: val,
                rest: level.fields.buf,
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
            Pending::Field { field, first, rest } => seed.deserialize(FieldDe {
                field,
                first,
                rest,
                depth: self.depth,
            }),
            Pending::None => Err(ProtobufError::Value(
                "next_value called before next_key".into(),
            )),
        }
    }
}

/// One field's value: its first occurrence, and for a repeated field or a map the rest of
/// the message where the other occurrences are.
struct FieldDe<'de> {
    field: &'static Field,
    first: Val<'de>,
    rest: &'de [u8],
    depth: u32,
}

impl FieldDe<'_> {
    fn single(&self) -> bool {
        !self.field.repeated && !matches!(self.field.kind, Kind::Map(_))
    }

    /// What the JSON of the Go value would have left out or written as `null`.
    fn is_absent(&self) -> bool {
        match self.field.kind {
            Kind::Time | Kind::MicroTime | Kind::RawExtension | Kind::FieldsV1 => {
                self.first.is_zero()
            }
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
            Kind::Map(value) => visitor.visit_map(MapEntries::new(
                self.field.number,
                value,
                self.first,
                self.rest,
                self.depth,
            )),
            kind if self.field.repeated => visitor.visit_seq(Repeated::new(
                self.field.number,
                kind,
                self.first,
                self.rest,
                self.depth,
            )),
            _ => ValueDe {
                kind: self.field.kind,
                val: self.first,
                depth: self.depth,
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
            ValueDe {
                kind: self.field.kind,
                val: self.first,
                depth: self.depth,
            }
            .deserialize_enum(name, variants, visitor)
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

/// One value (a single field's, or one element of a repeated field or map).
#[derive(Clone, Copy)]
struct ValueDe<'de> {
    kind: Kind,
    val: Val<'de>,
    depth: u32,
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
                let b = bytes(v, "Time")?;
                if b.is_empty() {
                    return visitor.visit_unit();
                }
                let (secs, nanos) = timestamp(b)?;
                let micros = matches!(self.kind, Kind::MicroTime).then_some(nanos / 1000);
                visitor.visit_string(super::time::rfc3339(secs, micros)?)
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
                    None,
                    self.depth + 1,
                ))
            }
            Kind::Map(_) => Err(ProtobufError::Value("a map inside a map".into())),
            Kind::Unsupported => visitor.visit_unit(),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProtobufError> {
        let null = matches!(
            self.kind,
            Kind::Time | Kind::MicroTime | Kind::RawExtension | Kind::FieldsV1
        ) && self.val.is_zero();
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
fn timestamp(b: &[u8]) -> Result<(i64, u32), ProtobufError> {
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

/// Whether a repeated field of `kind` may come packed (one length-delimited run of numbers).
fn packable(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Bool
            | Kind::Int32
            | Kind::Int64
            | Kind::Uint32
            | Kind::Uint64
            | Kind::Float64
            | Kind::Float32
    )
}

/// The occurrences of field `number` after the first, in `rest`.
fn count_more(number: u32, rest: &[u8]) -> usize {
    Fields::new(rest)
        .map_while(Result::ok)
        .filter(|(n, _)| *n == number)
        .count()
}

/// A repeated field's elements, from every occurrence in its message (and packed runs).
struct Repeated<'de> {
    number: u32,
    kind: Kind,
    next: Option<Val<'de>>,
    rest: Fields<'de>,
    packed: &'de [u8],
    /// Elements left, when known (non-packed): the exact size hint.
    left: Option<usize>,
    depth: u32,
}

impl<'de> Repeated<'de> {
    fn new(number: u32, kind: Kind, first: Val<'de>, rest: &'de [u8], depth: u32) -> Self {
        let left = (!packable(kind)).then(|| 1 + count_more(number, rest));
        Repeated {
            number,
            kind,
            next: Some(first),
            rest: Fields::new(rest),
            packed: &[],
            left,
            depth,
        }
    }

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
                let mut found = None;
                for f in self.rest.by_ref() {
                    let (n, v) = f?;
                    if n == self.number {
                        found = Some(v);
                        break;
                    }
                }
                match found {
                    Some(v) => v,
                    None => return Ok(None),
                }
            };
            if let (Val::Bytes(b), true) = (val, packable(self.kind)) {
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
                })
                .map(Some);
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.left
    }
}

/// A map field's entries (`key` 1, `value` 2), from every occurrence in its message.
struct MapEntries<'de> {
    number: u32,
    value: &'static Kind,
    next: Option<Val<'de>>,
    rest: Fields<'de>,
    pending: Option<Val<'de>>,
    left: usize,
    depth: u32,
}

impl<'de> MapEntries<'de> {
    fn new(
        number: u32,
        value: &'static Kind,
        first: Val<'de>,
        rest: &'de [u8],
        depth: u32,
    ) -> Self {
        MapEntries {
            number,
            value,
            next: Some(first),
            rest: Fields::new(rest),
            pending: None,
            left: 1 + count_more(number, rest),
            depth,
        }
    }
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
            None => {
                let mut found = None;
                for f in self.rest.by_ref() {
                    let (n, v) = f?;
                    if n == self.number {
                        found = Some(v);
                        break;
                    }
                }
                match found {
                    Some(v) => v,
                    None => return Ok(None),
                }
            }
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
