//! The types of the schema tables ([`Message`], [`Field`], [`Kind`]): apart from the tables
//! themselves (`schema_gen.rs`), so the generated file and `schema.rs` import them without
//! importing each other.

/// What a field holds, and so how it is read from the wire and written as JSON.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// `string` (length-delimited UTF-8).
    String,
    /// `bool` (varint).
    Bool,
    /// `int32` (varint, negative values sign-extended to 64 bits).
    Int32,
    /// `int64` (varint).
    Int64,
    /// `uint32` (varint).
    Uint32,
    /// `uint64` (varint).
    Uint64,
    /// `double` (fixed 64).
    Float64,
    /// `float` (fixed 32).
    Float32,
    /// `bytes`: base64 in JSON (k8s-openapi's `ByteString`).
    Bytes,
    /// `metav1.Time` (`seconds` 1, `nanos` 2): RFC 3339 in whole seconds, `null` when zero.
    Time,
    /// `metav1.MicroTime`: RFC 3339 with microseconds, `null` when zero.
    MicroTime,
    /// `metav1.Duration` (`duration` 1, nanoseconds): Go's `time.Duration` text (`1m30s`).
    Duration,
    /// `metav1.FieldsV1` (`Raw` 1): embedded JSON.
    FieldsV1,
    /// `intstr.IntOrString` (`type` 1, `intVal` 2, `strVal` 3): a number or a string.
    IntOrString,
    /// `resource.Quantity` (`string` 1): a string.
    Quantity,
    /// `runtime.RawExtension` (`raw` 1): embedded JSON.
    RawExtension,
    /// A message.
    Message(&'static Message),
    /// `map<string, V>` (repeated entries, `key` 1, `value` 2), V of this kind.
    Map(&'static Kind),
    /// A type from a package these tables do not cover: the field is skipped like an unknown
    /// one.
    Unsupported,
}

impl Kind {
    /// Whether a repeated field of this kind may come packed (one length-delimited run of
    /// numbers), as proto3 writes repeated scalars.
    pub fn is_packable(self) -> bool {
        matches!(
            self,
            Kind::Bool
                | Kind::Int32
                | Kind::Int64
                | Kind::Uint32
                | Kind::Uint64
                | Kind::Float64
                | Kind::Float32
        )
    }
}

/// One field of a message.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    /// Protobuf field number.
    pub number: u32,
    /// JSON name (the Go `json` tag); empty for an inlined (embedded) struct.
    pub name: &'static str,
    /// What it holds (of each element, when repeated).
    pub kind: Kind,
    /// A Go slice (`repeated`): its elements may come packed (numbers) or one per occurrence.
    pub repeated: bool,
    /// A Go pointer: present means set, even at its zero value.
    pub pointer: bool,
    /// `omitempty`: the JSON leaves the zero value of a non-pointer scalar out.
    pub omitempty: bool,
    /// An embedded struct whose JSON fields are the parent's (`json:",inline"`).
    pub inline: bool,
}

/// A message: its name and its fields, sorted by number.
#[derive(Debug)]
pub struct Message {
    /// The Go struct's name.
    pub name: &'static str,
    /// Fields sorted by number.
    pub fields: &'static [Field],
    /// By field number: 1 + the field's position in `fields`, 0 when there is none (the
    /// decoder's direct lookup; generated with the fields).
    pub index: &'static [u8],
}

impl Message {
    /// The field numbered `number`, if the schema knows it: one array lookup.
    #[inline]
    pub fn field(&self, number: u32) -> Option<&'static Field> {
        let fields: &'static [Field] = self.fields;
        let i = *self.index.get(usize::try_from(number).ok()?)?;
        fields.get(usize::from(i).checked_sub(1)?)
    }
}
