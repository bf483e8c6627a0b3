//! The lean cache mode (docs/semantics.md I7): a cache of the bytes the server sent.
//!
//! # Why
//!
//! A decoded k8s-openapi `Pod` is several times the size of its JSON (about 34.6 KB against
//! 4.8 KB for a pod of the shared benchmark: every string, map and optional field is its own
//! allocation), and an informer that decodes every object first holds that for each of them,
//! plus the old object of every `Update` in flight. Many informer users cache many objects and
//! read few (controllers that reconcile keys from a workqueue, admission webhooks, providers):
//! they would rather pay a decode when they read than hold everything decoded.
//!
//! # What the lean mode does
//!
//! From the wire to the store, no typed object is built unless something typed asks for it:
//! - each LIST item and watch event is kept as its own bytes (its JSON, or its protobuf
//!   message when the informer asks for protobuf and the server answers so: [`Encoding`]),
//!   with only its metadata parsed
//!   ([`CompactMeta`]: name, namespace, uid, resourceVersion, timestamps, labels, owner
//!   references), on the informer's decode pool;
//! - the bytes are compressed with zstd and a dictionary trained on the first objects
//!   ([`RawObject`]; `managedFields` can be cut out first, [`LeanConfig::strip_managed_fields`]);
//! - the pipeline carries [`LazyObject`]s: handlers that read keys, labels or owners never
//!   decode; typed handlers get the object decoded once per event, shared by all of them;
//! - the store keeps the [`RawObject`]s; its built-in indexes are computed from the metadata,
//!   a user's typed index function decodes the object for it; listers decode what they return,
//!   through a bounded hot cache ([`LeanConfig::hot_objects`]).
//!
//! The typed mode ([`CacheMode::Typed`], the default) keeps every object decoded, as client-go
//! and kube-rs do.

mod codec;
mod hot;
mod meta;
mod object;
#[cfg(test)]
mod protobuf_tests;
mod state;
mod window;

pub use codec::{DecodeError, EncodeError, Encoding, RawObject};
pub use meta::{CompactMeta, MetaError, OwnerRef};
pub use object::{Labels, LazyObject};
pub use state::LeanState;

pub(crate) use state::{Remember, StoredSizes};

/// How a store keeps its objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheMode {
    /// Every object as the decoded `Arc<K>` (the default): reads cost a reference-count
    /// increment; memory is the decoded size of every object.
    #[default]
    Typed,
    /// Every object as the bytes the server sent, compressed, with its metadata parsed (I7):
    /// a few percent of the memory of a typed k8s-openapi `Pod`; typed reads of objects
    /// outside the hot cache decode them.
    Lean(LeanConfig),
}

impl CacheMode {
    /// Lean mode with the default [`LeanConfig`].
    pub fn lean() -> Self {
        CacheMode::Lean(LeanConfig::default())
    }

    /// True for [`CacheMode::Lean`].
    pub fn is_lean(&self) -> bool {
        matches!(self, CacheMode::Lean(_))
    }
}

/// Options of the lean mode (I7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeanConfig {
    /// Most objects the hot cache keeps decoded (rounded up to a multiple of 16). Zero
    /// disables it: every typed read decodes. Default [`DEFAULT_HOT_OBJECTS`].
    pub hot_objects: usize,
    /// Cut `metadata.managedFields` out of every object before it is stored (the bytes are
    /// edited, the object is not re-serialised): decoded objects then have no managed fields,
    /// as with client-go's common transform. Default false.
    pub strip_managed_fields: bool,
    /// zstd's compression level (1 fastest … 19; negative levels faster still). Default
    /// [`DEFAULT_COMPRESSION_LEVEL`].
    pub compression_level: i32,
    /// Train a dictionary on the informer's first objects and compress with it (about 4× smaller
    /// than zstd alone for Kubernetes objects). Default true.
    pub dictionary: bool,
    /// How many of the most recently decoded in-flight objects keep their typed form for the
    /// other handlers that will read them (the shared-decode window). Handlers that stay
    /// within this many decodes of each other decode each event once between them; a handler
    /// further behind decodes again what it reads (hot cache first), so that a slow handler's
    /// backlog holds bytes, not decoded objects. `usize::MAX`: no bound (every decode stays
    /// with its object until the last handler ran it). Default [`DEFAULT_SHARED_DECODES`].
    pub shared_decodes: usize,
}

/// Default size of the lean mode's hot cache: 1,024 objects (about 28 MB of decoded pods of
/// the benchmark's size, `benches/lean_memory.rs`).
pub const DEFAULT_HOT_OBJECTS: usize = 1024;

/// Default size of the shared-decode window ([`LeanConfig::shared_decodes`]): 16,384 decoded
/// objects (at most ~450 MB of decoded pods of the benchmark's size, against no bound before;
/// on the shared bench, K=10, it released under 2% of the decodes and cut peak RSS from
/// 1.15–1.18 GB to 0.36–0.37 GB at the same cpu_s; 1,024 or 4,096 made the handlers that lag
/// decode again ~100k–130k objects, +40% cpu_s: BENCHMARKS.md session 10).
pub const DEFAULT_SHARED_DECODES: usize = 16_384;

/// Default zstd level of the lean mode.
pub const DEFAULT_COMPRESSION_LEVEL: i32 = 3;

impl Default for LeanConfig {
    fn default() -> Self {
        LeanConfig {
            hot_objects: DEFAULT_HOT_OBJECTS,
            strip_managed_fields: false,
            compression_level: DEFAULT_COMPRESSION_LEVEL,
            dictionary: true,
            shared_decodes: DEFAULT_SHARED_DECODES,
        }
    }
}

impl LeanConfig {
    /// With a hot cache of `n` objects (0: none).
    pub fn hot_objects(mut self, n: usize) -> Self {
        self.hot_objects = n;
        self
    }

    /// With `managedFields` cut out of every stored object (or kept: false).
    pub fn strip_managed_fields(mut self, strip: bool) -> Self {
        self.strip_managed_fields = strip;
        self
    }

    /// With zstd level `level`.
    pub fn compression_level(mut self, level: i32) -> Self {
        self.compression_level = level;
        self
    }

    /// With (true) or without a trained dictionary.
    pub fn dictionary(mut self, on: bool) -> Self {
        self.dictionary = on;
        self
    }

    /// With a shared-decode window of `n` objects (`usize::MAX`: unbounded).
    pub fn shared_decodes(mut self, n: usize) -> Self {
        self.shared_decodes = n;
        self
    }
}

/// Counters of a lean store (I7); cumulative since the store was created, sizes as of now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeanStats {
    /// Objects decoded (typed reads that missed the hot cache, typed handlers, typed index
    /// functions).
    pub decodes: u64,
    /// Typed reads answered by the hot cache.
    pub hits: u64,
    /// Objects whose stored body (JSON or protobuf) did not decode into the type (the read
    /// skipped them).
    pub decode_failures: u64,
    /// Objects that could not be stored lean (metadata that does not parse, from JSON or
    /// protobuf); the informer drops and reports them (R5).
    pub encode_failures: u64,
    /// Objects stored now.
    pub objects: u64,
    /// Bytes of their stored (compressed) bodies.
    pub bytes: u64,
    /// Bytes of their bodies uncompressed (what `bytes` would be uncompressed): their JSON, or
    /// their protobuf messages for objects stored as protobuf.
    pub json_bytes: u64,
    /// Heap bytes of their parsed metadata.
    pub meta_bytes: u64,
    /// Objects the hot cache holds decoded now.
    pub hot_objects: u64,
    /// Size of the trained dictionary (0: none yet).
    pub dictionary_bytes: u64,
    /// In-flight decoded objects whose typed form the shared-decode window released
    /// ([`LeanConfig::shared_decodes`]).
    pub released: u64,
    /// Reads of an in-flight object whose earlier decode the window had released (a handler
    /// further behind than the window): each a hot-cache hit or a decode (in `decodes`).
    pub redecodes: u64,
}
