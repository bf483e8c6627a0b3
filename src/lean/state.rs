//! [`LeanState`]: what one lean store shares with everything that reads or writes its objects
//! (the decode pool that encodes them, the store, its listers, the lazy objects handed to
//! handlers): the encoder and its dictionary, the hot cache and the counters.

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use serde::{Serialize, de::DeserializeOwned};

use super::{
    LeanConfig, LeanStats,
    codec::{DecodeError, EncodeError, Encoder, RawObject},
    hot::HotCache,
    window::{Slot, Window},
};

/// Whether a read that decodes an object remembers it in the hot cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Remember {
    /// Point reads, handlers' reads of their notification's objects: yes.
    Yes,
    /// Multi-object reads: no (a `list` must not flush the hot set).
    No,
}

/// Decodes one protobuf message of a schema, given its (apiVersion, kind).
type ProtobufDecode<K> = fn(
    &[u8],
    &'static crate::protobuf::Message,
    (&str, &str),
) -> Result<K, crate::protobuf::ProtobufError>;

#[derive(Default)]
struct Counters {
    decodes: AtomicU64,
    hits: AtomicU64,
    decode_failures: AtomicU64,
    encode_failures: AtomicU64,
    redecodes: AtomicU64,
}

/// The lean mode's shared state for objects of type `K` (docs/semantics.md I7).
///
/// Built by [`Store::with_mode`](crate::store::Store::with_mode) (or [`LeanState::new`] for a
/// store made with [`Store::lean`](crate::store::Store::lean)) and shared, through `Arc`, with
/// whatever encodes objects for that store and with every [`LazyObject`](super::LazyObject) of
/// it.
pub struct LeanState<K> {
    config: LeanConfig,
    encoder: Encoder,
    hot: HotCache<K>,
    /// The in-flight objects that keep their decoded form for the other handlers.
    window: Window<K>,
    counters: Counters,
    from_json: fn(&[u8]) -> Result<K, serde_json::Error>,
    from_protobuf: ProtobufDecode<K>,
    to_json: fn(&K) -> Result<Vec<u8>, serde_json::Error>,
}

impl<K> fmt::Debug for LeanState<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeanState")
            .field("config", &self.config)
            .field("dictionary", &self.encoder.dictionary_len())
            .finish_non_exhaustive()
    }
}

impl<K> LeanState<K> {
    /// The state of a lean store configured by `config`.
    pub fn new(config: LeanConfig) -> Self
    where
        K: Serialize + DeserializeOwned,
    {
        LeanState {
            config,
            encoder: Encoder::new(
                config.compression_level,
                config.dictionary,
                config.strip_managed_fields,
            ),
            hot: HotCache::new(config.hot_objects),
            window: Window::new(config.shared_decodes),
            counters: Counters::default(),
            // Exact-size vectors: a decoded object holds what it needs (`crate::exact`).
            from_json: |b| crate::exact::from_slice(b),
            from_protobuf: |b, schema, types| {
                crate::protobuf::decode_message(b, schema, Some(types))
            },
            to_json: |o| serde_json::to_vec(o),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &LeanConfig {
        &self.config
    }

    /// One object's JSON as the server sent it → its stored form: the metadata parsed (no
    /// typed object is built), `managedFields` cut out if configured, the rest compressed.
    /// Runs wherever the caller is (the informer calls it on its decode pool).
    ///
    /// # Errors
    /// [`EncodeError`] when the metadata does not parse; counted in
    /// [`LeanStats::encode_failures`].
    pub fn encode(&self, json: &[u8]) -> Result<RawObject, EncodeError> {
        self.encoder.encode(json).inspect_err(|_| {
            self.counters
                .encode_failures
                .fetch_add(1, Ordering::Relaxed);
        })
    }

    /// One object's protobuf message as the server sent it (no envelope: a LIST item, or a
    /// watch event's envelope's `raw`), of the kind (apiVersion, kind) `types` → its stored
    /// form: the metadata read from the message's `metadata` field (nothing else is decoded),
    /// `managedFields` cut out if configured (a splice of the bytes), the rest compressed.
    /// `enveloped`: the object came in its own envelope (a watch event), so its metadata keeps
    /// the envelope's apiVersion and kind as the object's JSON would carry them (a list item's
    /// JSON carries none).
    ///
    /// # Errors
    /// [`EncodeError`] when the message or its metadata is malformed or truncated, or `types`
    /// has no protobuf schema; counted in [`LeanStats::encode_failures`].
    pub fn encode_protobuf(
        &self,
        message: &[u8],
        types: (&str, &str),
        enveloped: bool,
    ) -> Result<RawObject, EncodeError> {
        self.encoder
            .encode_protobuf(message, types, enveloped)
            .inspect_err(|_| {
                self.counters
                    .encode_failures
                    .fetch_add(1, Ordering::Relaxed);
            })
    }

    /// A typed object → its stored form (serialised to JSON first: the path of typed writes
    /// into a lean store and of a typed transform's output).
    ///
    /// # Errors
    /// [`EncodeError`] when `obj` does not serialise or its metadata does not parse.
    pub fn encode_object(&self, obj: &K) -> Result<RawObject, EncodeError> {
        let json = (self.to_json)(obj).map_err(|e| {
            self.counters
                .encode_failures
                .fetch_add(1, Ordering::Relaxed);
            EncodeError::Serialize(e.to_string())
        })?;
        self.encode(&json)
    }

    /// The typed form of `raw`: from the hot cache, else decoded (and remembered if asked).
    pub(crate) fn decode(
        &self,
        raw: &Arc<RawObject>,
        remember: Remember,
    ) -> Result<Arc<K>, DecodeError> {
        if let Some(hit) = self.hot.get(raw) {
            self.counters.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        self.counters.decodes.fetch_add(1, Ordering::Relaxed);
        let decoded = raw.body().and_then(|body| match raw.protobuf_kind() {
            None => (self.from_json)(&body).map_err(DecodeError::new),
            Some((api_version, kind, schema)) => {
                (self.from_protobuf)(&body, schema, (api_version, kind)).map_err(DecodeError::new)
            }
        });
        match decoded {
            Ok(typed) => {
                let typed = Arc::new(typed);
                if remember == Remember::Yes {
                    self.hot.insert(raw, &typed);
                }
                Ok(typed)
            }
            Err(e) => {
                self.counters
                    .decode_failures
                    .fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Takes `raw`'s typed form out of the hot cache (it just left the store: the cache keeps
    /// only live versions).
    pub(crate) fn take(&self, raw: &Arc<RawObject>) -> Option<Arc<K>> {
        self.hot.remove(raw)
    }

    /// Remembers `typed` as the decoded form of `raw`.
    pub(crate) fn remember(&self, raw: &Arc<RawObject>, typed: &Arc<K>) {
        self.hot.insert(raw, typed);
    }

    /// Registers an in-flight object's slot that just got its typed form in the shared-decode
    /// window (releasing the oldest one's past the window); `again`: a decode of an object
    /// whose earlier decode the window released.
    pub(crate) fn shared(&self, slot: &Arc<Slot<K>>, again: bool) {
        if again {
            self.counters.redecodes.fetch_add(1, Ordering::Relaxed);
        }
        self.window.register(slot);
    }

    /// The counters, with the store's sizes (`objects`, `bytes`, `json_bytes`, `meta_bytes`).
    pub(crate) fn stats(&self, sizes: &StoredSizes) -> LeanStats {
        LeanStats {
            decodes: self.counters.decodes.load(Ordering::Relaxed),
            hits: self.counters.hits.load(Ordering::Relaxed),
            decode_failures: self.counters.decode_failures.load(Ordering::Relaxed),
            encode_failures: self.counters.encode_failures.load(Ordering::Relaxed),
            objects: sizes.objects,
            bytes: sizes.bytes,
            json_bytes: sizes.json_bytes,
            meta_bytes: sizes.meta_bytes,
            hot_objects: self.hot.len() as u64,
            dictionary_bytes: self.encoder.dictionary_len().unwrap_or(0) as u64,
            released: self.window.released(),
            redecodes: self.counters.redecodes.load(Ordering::Relaxed),
        }
    }
}

/// What one version of a lean store holds, in lean objects and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StoredSizes {
    pub(crate) objects: u64,
    pub(crate) bytes: u64,
    pub(crate) json_bytes: u64,
    pub(crate) meta_bytes: u64,
}

impl StoredSizes {
    /// Adds (`sign` > 0) or removes one object's sizes.
    pub(crate) fn count(&mut self, raw: &RawObject, sign: i8) {
        let (b, j, m) = (
            raw.stored_len() as u64,
            raw.json_len() as u64,
            raw.meta().heap_bytes() as u64,
        );
        if sign > 0 {
            self.objects += 1;
            self.bytes += b;
            self.json_bytes += j;
            self.meta_bytes += m;
        } else {
            self.objects = self.objects.saturating_sub(1);
            self.bytes = self.bytes.saturating_sub(b);
            self.json_bytes = self.json_bytes.saturating_sub(j);
            self.meta_bytes = self.meta_bytes.saturating_sub(m);
        }
    }
}
