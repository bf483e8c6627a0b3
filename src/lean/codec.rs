//! The stored form of a lean object (docs/semantics.md I7): [`RawObject`], the server's JSON
//! (or, from a server that answered in protobuf, the object's protobuf message) compressed with
//! zstd and a dictionary trained on the informer's first objects, next to its parsed
//! [`CompactMeta`].
//!
//! # Why zstd with a dictionary
//!
//! Kubernetes objects of one kind repeat the same keys, enum values and much of the same
//! structure; one object alone is too small for a compressor to learn that (a 4.8 KB pod of the
//! benchmark compresses to ~1.7 KB with zstd alone), but a 16 KB dictionary trained on a few
//! hundred of them brings it to ~380 bytes (13×), at ~4.5 µs to compress and ~1.5 µs to
//! decompress (`benches/lean.rs`). The `zstd` crate is the reference implementation's binding.
//!
//! # Contexts
//!
//! A zstd context is expensive to create (its tables are hundreds of KB) and cheap to reuse, so
//! each thread keeps a few: a small most-recently-used list per thread, keyed by dictionary and
//! level. A context loads its dictionary once (zstd digests it on the first frame and keeps it).

use std::{
    borrow::Cow,
    cell::RefCell,
    fmt,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
};

use super::meta::{self, CompactMeta, MetaError};

/// Samples the dictionary is trained on: the first objects an informer stores.
pub(crate) const TRAIN_SAMPLES: usize = 256;
/// Or fewer samples, once they hold this many bytes.
const TRAIN_BYTES: usize = 4 << 20;
/// The trained dictionary's size.
const DICTIONARY_BYTES: usize = 16 << 10;
/// zstd contexts kept per thread (one per dictionary and level in use).
const CONTEXTS_PER_THREAD: usize = 8;

/// Why an object could not be stored lean.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// Its metadata does not parse (not an object, or wrongly typed metadata).
    #[error(transparent)]
    Meta(#[from] MetaError),
    /// The typed object could not be serialised (a type whose `Serialize` fails).
    #[error("cannot serialise the object: {0}")]
    Serialize(String),
    /// zstd refused (out of memory).
    #[error("compression failed: {0}")]
    Compress(String),
}

/// Why a lean object could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub(crate) Arc<str>);

impl DecodeError {
    pub(crate) fn new(message: impl fmt::Display) -> Self {
        DecodeError(message.to_string().into())
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.0
    }
}

/// A trained zstd dictionary, shared by every object compressed with it.
pub(crate) struct Dictionary {
    /// Process-unique, to key the per-thread contexts.
    id: u64,
    bytes: Box<[u8]>,
}

impl fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Dictionary(#{}, {} bytes)", self.id, self.bytes.len())
    }
}

static NEXT_DICTIONARY: AtomicU64 = AtomicU64::new(1);

/// How a body is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// As sent (objects zstd cannot make smaller).
    Plain,
    /// zstd, with the object's dictionary if it has one.
    Zstd,
}

/// The encoding of a stored object's body: what the server sent it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Its JSON.
    Json,
    /// Its protobuf message (`application/vnd.kubernetes.protobuf`: the object's own message,
    /// as inside the `runtime.Unknown` envelope or a list's `items`), read with
    /// [`crate::protobuf`].
    Protobuf,
}

/// [`RawObject::kind`] of a JSON body.
const JSON_BODY: u16 = u16::MAX;

/// One object as the lean store keeps it: its parsed metadata and its body (the server's
/// JSON, or its protobuf message: [`Encoding`]), compressed.
///
/// Immutable once built; shared (`Arc`) by the store, the FIFO and every notification that
/// carries it, never copied.
pub struct RawObject {
    meta: CompactMeta,
    body: Box<[u8]>,
    /// The uncompressed body's length.
    json_len: u32,
    form: Form,
    /// [`JSON_BODY`], or the body's kind as its position in the protobuf schema tables
    /// (`protobuf::kind_index`): two bytes in what was padding, so a JSON object is no larger.
    kind: u16,
    dictionary: Option<Arc<Dictionary>>,
}

impl fmt::Debug for RawObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawObject")
            .field("meta", &self.meta)
            .field("encoding", &self.encoding())
            .field("json_len", &self.json_len)
            .field("stored", &self.body.len())
            .finish_non_exhaustive()
    }
}

impl RawObject {
    /// Its metadata.
    pub fn meta(&self) -> &CompactMeta {
        &self.meta
    }

    /// Length of its body uncompressed (as stored: without `managedFields` when they were
    /// stripped): its JSON's, or for an object stored as protobuf ([`encoding`](Self::encoding))
    /// its protobuf message's.
    pub fn json_len(&self) -> usize {
        self.json_len as usize
    }

    /// The encoding of its stored body.
    pub fn encoding(&self) -> Encoding {
        if self.kind == JSON_BODY {
            Encoding::Json
        } else {
            Encoding::Protobuf
        }
    }

    /// For a protobuf body: its kind's (apiVersion, kind, schema).
    pub(crate) fn protobuf_kind(
        &self,
    ) -> Option<(
        &'static str,
        &'static str,
        &'static crate::protobuf::Message,
    )> {
        match self.kind {
            JSON_BODY => None,
            i => crate::protobuf::kind_at(usize::from(i)),
        }
    }

    /// Bytes of its stored (compressed) body.
    pub fn stored_len(&self) -> usize {
        self.body.len()
    }

    /// Heap bytes this object holds: the body, the metadata and the object itself (the shared
    /// dictionary is not counted).
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.body.len() + self.meta.heap_bytes()
    }

    /// Its JSON: the body decompressed, or for an object stored as protobuf
    /// ([`encoding`](Self::encoding)) decompressed and written as JSON by the schema tables
    /// (`protobuf::message_to_json`: a walk of the whole message, about a decode's cost). That
    /// JSON decodes to the object the server's JSON decodes to, but is not its text: fields in
    /// the schema's order, without the zero values Go's JSON leaves out (and without `null`
    /// values inside embedded JSON such as `managedFields[].fieldsV1`); it carries `apiVersion`
    /// and `kind` when the object came with them (a watch event's), as the server's JSON does.
    ///
    /// # Errors
    /// [`DecodeError`] when the body does not decompress (never for a body this crate built),
    /// or a protobuf body is not well-formed.
    pub fn json(&self) -> Result<Cow<'_, [u8]>, DecodeError> {
        let body = self.body()?;
        match self.protobuf_kind() {
            None => Ok(body),
            Some((api_version, kind, schema)) => {
                let m = &self.meta;
                let types = m.api_version().zip(m.kind()).map(|_| (api_version, kind));
                crate::protobuf::message_to_json(&body, schema, types)
                    .map(Cow::Owned)
                    .map_err(DecodeError::new)
            }
        }
    }

    /// Its body decompressed, in its [`encoding`](Self::encoding): the JSON, or the protobuf
    /// message.
    ///
    /// # Errors
    /// [`DecodeError`] when the body does not decompress (never for a body this crate built).
    pub fn body(&self) -> Result<Cow<'_, [u8]>, DecodeError> {
        match self.form {
            Form::Plain => Ok(Cow::Borrowed(&self.body)),
            Form::Zstd => with_contexts(|c| {
                let d = c.decompressor(self.dictionary.as_deref())?;
                d.decompress(&self.body, self.json_len as usize)
                    .map(Cow::Owned)
                    .map_err(DecodeError::new)
            }),
        }
    }
}

/// Compresses objects for one lean store: trains its dictionary on the first objects it sees,
/// then uses it for every object after.
pub(crate) struct Encoder {
    level: i32,
    dictionaries: bool,
    strip_managed_fields: bool,
    trained: OnceLock<Option<Arc<Dictionary>>>,
    samples: Mutex<Samples>,
}

#[derive(Default)]
struct Samples {
    taken: Vec<Vec<u8>>,
    bytes: usize,
    /// A thread took the samples to train: stop collecting.
    training: bool,
}

impl Encoder {
    pub(crate) fn new(level: i32, dictionaries: bool, strip_managed_fields: bool) -> Self {
        Encoder {
            level,
            dictionaries,
            strip_managed_fields,
            trained: OnceLock::new(),
            samples: Mutex::new(Samples::default()),
        }
    }

    /// The trained dictionary's size in bytes (None: not trained yet, or none).
    pub(crate) fn dictionary_len(&self) -> Option<usize> {
        self.trained.get()?.as_ref().map(|d| d.bytes.len())
    }

    /// Parses the metadata of `json`, strips `managedFields` if configured, compresses.
    pub(crate) fn encode(&self, json: &[u8]) -> Result<RawObject, EncodeError> {
        let parsed = meta::parse(json)?;
        let body = if self.strip_managed_fields {
            meta::strip_managed_fields(json, &parsed.managed_fields)?
        } else {
            Cow::Borrowed(json)
        };
        self.compress(parsed.meta, body, JSON_BODY)
    }

    /// Parses the metadata of a protobuf object `message` of (apiVersion, kind) `types`,
    /// strips `managedFields` if configured (a splice of the bytes), compresses. `enveloped`:
    /// the object came in its own envelope (a watch event's), so its metadata carries the
    /// envelope's apiVersion and kind, as its JSON would; a list item's carries none.
    pub(crate) fn encode_protobuf(
        &self,
        message: &[u8],
        types: (&str, &str),
        enveloped: bool,
    ) -> Result<RawObject, EncodeError> {
        let kind = crate::protobuf::kind_index(types.0, types.1)
            .filter(|_| !types.1.ends_with("List"))
            .and_then(|i| u16::try_from(i).ok())
            .filter(|i| *i != JSON_BODY)
            .ok_or_else(|| {
                MetaError::Protobuf(crate::protobuf::ProtobufError::UnknownKind {
                    api_version: types.0.to_string(),
                    kind: types.1.to_string(),
                })
            })?;
        let (meta, managed_fields) = meta::parse_protobuf(message, enveloped.then_some(types))?;
        let body = match self.strip_managed_fields && managed_fields {
            true => crate::protobuf::strip_managed_fields(message)
                .map_err(MetaError::from)?
                .map_or(Cow::Borrowed(message), Cow::Owned),
            false => Cow::Borrowed(message),
        };
        self.compress(meta, body, kind)
    }

    /// Compresses `body` (with the dictionary once trained) next to its metadata.
    fn compress(
        &self,
        meta: CompactMeta,
        body: Cow<'_, [u8]>,
        kind: u16,
    ) -> Result<RawObject, EncodeError> {
        let json_len =
            u32::try_from(body.len()).map_err(|_| EncodeError::Meta(MetaError::TooLarge))?;
        let dictionary = self.dictionary_for(&body);
        let compressed = with_contexts(|c| {
            c.compressor(dictionary.as_deref(), self.level)?
                .compress(&body)
                .map_err(|e| DecodeError::new(e.to_string()))
        })
        .map_err(|e| EncodeError::Compress(e.message().to_string()))?;
        let (form, body, dictionary) = if compressed.len() < body.len() {
            (Form::Zstd, compressed.into_boxed_slice(), dictionary)
        } else {
            (Form::Plain, body.into_owned().into_boxed_slice(), None)
        };
        Ok(RawObject {
            meta,
            body,
            json_len,
            form,
            kind,
            dictionary,
        })
    }

    /// The dictionary to compress `json` with: the trained one, or none while it is being
    /// collected for (`json` then becomes a sample) and trained.
    fn dictionary_for(&self, json: &[u8]) -> Option<Arc<Dictionary>> {
        if !self.dictionaries {
            return None;
        }
        if let Some(trained) = self.trained.get() {
            return trained.clone();
        }
        let ready = {
            let Ok(mut s) = self.samples.lock() else {
                return None;
            };
            if s.training {
                return None;
            }
            s.taken.push(json.to_vec());
            s.bytes += json.len();
            if s.taken.len() >= TRAIN_SAMPLES || s.bytes >= TRAIN_BYTES {
                s.training = true;
                Some(std::mem::take(&mut s.taken))
            } else {
                None
            }
        };
        let samples = ready?;
        // Trained once, outside the lock (tens of ms); objects meanwhile go without it. A
        // training that fails (samples too few or too alike) leaves this store without one.
        let dictionary = zstd::dict::from_samples(&samples, DICTIONARY_BYTES)
            .ok()
            .map(|bytes| {
                Arc::new(Dictionary {
                    id: NEXT_DICTIONARY.fetch_add(1, Ordering::Relaxed),
                    bytes: bytes.into_boxed_slice(),
                })
            });
        self.trained.get_or_init(|| dictionary).clone()
    }
}

/// A thread's zstd contexts, most recently used last.
#[derive(Default)]
struct Contexts {
    compressors: Vec<((u64, i32), zstd::bulk::Compressor<'static>)>,
    decompressors: Vec<(u64, zstd::bulk::Decompressor<'static>)>,
}

thread_local! {
    static CONTEXTS: RefCell<Contexts> = RefCell::new(Contexts::default());
}

fn with_contexts<R>(
    f: impl FnOnce(&mut Contexts) -> Result<R, DecodeError>,
) -> Result<R, DecodeError> {
    CONTEXTS.with(|c| match c.try_borrow_mut() {
        Ok(mut c) => f(&mut c),
        // Re-entered on this thread (cannot happen: nothing here calls back); use fresh ones.
        Err(_) => f(&mut Contexts::default()),
    })
}

/// Moves the entry at `at` to the end (most recent) and returns it, or builds one with `make`
/// (evicting the least recent when full).
fn lru<Key: PartialEq + Copy, V>(
    list: &mut Vec<(Key, V)>,
    key: Key,
    make: impl FnOnce() -> std::io::Result<V>,
) -> Result<&mut V, DecodeError> {
    match list.iter().position(|(k, _)| *k == key) {
        Some(i) => {
            let entry = list.remove(i);
            list.push(entry);
        }
        None => {
            let v = make().map_err(DecodeError::new)?;
            if list.len() >= CONTEXTS_PER_THREAD {
                list.remove(0);
            }
            list.push((key, v));
        }
    }
    match list.last_mut() {
        Some((_, v)) => Ok(v),
        // Just pushed.
        None => Err(DecodeError::new("no zstd context")),
    }
}

impl Contexts {
    fn compressor(
        &mut self,
        dictionary: Option<&Dictionary>,
        level: i32,
    ) -> Result<&mut zstd::bulk::Compressor<'static>, DecodeError> {
        let id = dictionary.map_or(0, |d| d.id);
        lru(&mut self.compressors, (id, level), || match dictionary {
            Some(d) => zstd::bulk::Compressor::with_dictionary(level, &d.bytes),
            None => zstd::bulk::Compressor::new(level),
        })
    }

    fn decompressor(
        &mut self,
        dictionary: Option<&Dictionary>,
    ) -> Result<&mut zstd::bulk::Decompressor<'static>, DecodeError> {
        let id = dictionary.map_or(0, |d| d.id);
        lru(&mut self.decompressors, id, || match dictionary {
            Some(d) => zstd::bulk::Decompressor::with_dictionary(&d.bytes),
            None => zstd::bulk::Decompressor::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(i: usize) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"pod-{i}","namespace":"ns-{}","uid":"{:08x}-0000","resourceVersion":"{}","labels":{{"app":"app-{}","tier":"web"}},"managedFields":[{{"manager":"kubelet","operation":"Update","fieldsV1":{{"f:status":{{}}}}}}]}},"spec":{{"containers":[{{"name":"app","image":"registry.local/app-{}:v1","ports":[{{"containerPort":8080,"protocol":"TCP"}}],"env":[{{"name":"LOG_LEVEL","value":"info"}},{{"name":"REGION","value":"eu-west-1"}}]}}],"nodeName":"node-{}"}},"status":{{"phase":"Running","podIP":"10.0.{}.{}"}}}}"#,
            i % 10,
            i * 7919,
            1000 + i,
            i % 50,
            i % 50,
            i % 100,
            i / 256,
            i % 256
        )
    }

    #[test]
    fn i7_objects_round_trip_before_and_after_the_dictionary() {
        let enc = Encoder::new(3, true, false);
        let mut raws = Vec::new();
        for i in 0..TRAIN_SAMPLES + 50 {
            let json = pod(i);
            let raw = enc.encode(json.as_bytes()).expect("encodes");
            assert_eq!(raw.json().expect("decodes").as_ref(), json.as_bytes());
            assert_eq!(raw.meta().name(), Some(format!("pod-{i}").as_str()));
            raws.push((json, raw));
        }
        assert!(enc.dictionary_len().is_some(), "trained after the samples");
        let (early, late) = (&raws[0].1, &raws[TRAIN_SAMPLES + 10].1);
        assert!(early.dictionary.is_none());
        assert!(late.dictionary.is_some());
        assert!(
            late.stored_len() * 2 < early.stored_len(),
            "the dictionary pays: {} vs {} bytes",
            late.stored_len(),
            early.stored_len()
        );
        // Still readable on another thread (its own contexts).
        let (json, raw) = raws.pop().expect("one");
        let raw = Arc::new(raw);
        let back = std::thread::spawn(move || raw.json().map(|j| j.into_owned()))
            .join()
            .expect("thread");
        assert_eq!(back.expect("decodes"), json.into_bytes());
    }

    #[test]
    fn i7_strip_option_drops_managed_fields_from_the_stored_json() {
        let enc = Encoder::new(3, false, true);
        let raw = enc.encode(pod(1).as_bytes()).expect("encodes");
        let json = raw.json().expect("decodes");
        let v: serde_json::Value = serde_json::from_slice(&json).expect("json");
        assert!(v["metadata"].get("managedFields").is_none());
        assert_eq!(v["metadata"]["name"], "pod-1");
        assert_eq!(raw.json_len(), json.len());
    }

    /// The encoding lives in former padding: a stored object is no larger than before.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn i7_the_encoding_costs_no_bytes() {
        assert_eq!(std::mem::size_of::<RawObject>(), 64);
    }

    #[test]
    fn i7_incompressible_objects_are_kept_as_sent() {
        let enc = Encoder::new(3, false, false);
        let tiny = br#"{"metadata":{"name":"a"}}"#;
        let raw = enc.encode(tiny).expect("encodes");
        assert_eq!(raw.form, Form::Plain);
        assert_eq!(raw.json().expect("plain").as_ref(), tiny);
    }

    #[test]
    fn i7_bad_objects_are_typed_errors() {
        let enc = Encoder::new(3, true, true);
        assert!(matches!(
            enc.encode(b"[1,2]"),
            Err(EncodeError::Meta(MetaError::Json(_)))
        ));
    }
}
