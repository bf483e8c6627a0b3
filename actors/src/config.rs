//! The options of an informer and of its actors: [`InformerConfig`] (and in it
//! [`FifoConfig`]), and per handler registration [`ListenerConfig`] with its [`OverflowPolicy`].

use std::time::Duration;

use kinformer::{
    backoff::BackoffConfig,
    fifo::{DeltaFifoOptions, FifoMode},
    processor::ResyncPeriod,
    reflector::ReflectorConfig,
    shard::ShardSelector,
    store::CacheMode,
};

/// Options of one informer.
#[derive(Clone, Debug)]
pub struct InformerConfig {
    /// List/watch options (R1–R7).
    pub reflector: ReflectorConfig,
    /// FIFO options (batching, capacity: B1, B2, B4).
    pub fifo: FifoConfig,
    /// client-go's `defaultEventHandlerResyncPeriod`: the resync period of handlers registered
    /// without one ([`ResyncPeriod::Default`](kinformer::processor::ResyncPeriod::Default)),
    /// and the initial resync check period (P6). None or zero: this informer never resyncs,
    /// not even handlers that ask for a period.
    pub resync: Option<Duration>,
    /// Indexer mailbox capacity (B1).
    pub indexer_mailbox: usize,
    /// Reflector restart backoff (R8).
    pub backoff: BackoffConfig,
    /// How long `shutdown` waits for each handler to finish its current notification (P9);
    /// handlers still busy then are reported and left to finish alone. Default 30 s.
    pub shutdown_timeout: Duration,
    /// How the informer's store keeps objects (I7): [`CacheMode::Typed`] (the default) or
    /// [`CacheMode::Lean`], which keeps the bytes the server sent, compressed, with their
    /// metadata parsed (about 1.1 KB for a ~28 KB decoded `Pod`), and decodes an object only
    /// when something typed reads it (a typed handler, once per event; a typed lister read).
    pub cache: CacheMode,
    /// What LIST and WATCH ask the server for (client-go's `rest.Config.ContentType`):
    /// [`ContentType::Json`] (the default) or [`ContentType::Protobuf`] for built-in kinds.
    pub content_type: ContentType,
}

/// The wire format an informer asks for, as client-go's `rest.Config.ContentType`.
///
/// With [`Protobuf`](Self::Protobuf), the LIST and WATCH of a kind that has a protobuf form (a
/// built-in kind of the groups `kinformer::protobuf` has tables for) send `Accept:
/// application/vnd.kubernetes.protobuf, application/json`, and each response is read by its
/// `Content-Type`: protobuf decoded straight into the k8s-openapi type, JSON (a server or a
/// kind without protobuf) as before. The lean cache mode asks the same and keeps what came: each
/// object's protobuf message, or its JSON from a JSON answer (I7). Custom kinds, dynamic and
/// metadata-only informers always ask for JSON.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContentType {
    /// `application/json` (the default).
    #[default]
    Json,
    /// `application/vnd.kubernetes.protobuf`, JSON accepted too.
    Protobuf,
}

impl Default for InformerConfig {
    fn default() -> Self {
        InformerConfig {
            reflector: ReflectorConfig::default(),
            fifo: FifoConfig::default(),
            resync: None,
            indexer_mailbox: 16,
            backoff: BackoffConfig::default(),
            shutdown_timeout: Duration::from_secs(30),
            cache: CacheMode::Typed,
            content_type: ContentType::Json,
        }
    }
}

impl InformerConfig {
    /// Listing and watching only `selector`'s shard (KEP-5866, K1), e.g.
    /// `ShardSelector::nth_of(ShardField::Uid, 0, 2)?` for the first of two.
    pub fn shard(mut self, selector: ShardSelector) -> Self {
        self.reflector.shard_selector = Some(selector);
        self
    }

    /// With the store in `mode` (I7): e.g. `InformerConfig::default().cache(CacheMode::lean())`
    /// for lean mode with the default hot cache, or
    /// `.cache(CacheMode::Lean(LeanConfig::default().hot_objects(4096)))`.
    pub fn cache(mut self, mode: CacheMode) -> Self {
        self.cache = mode;
        self
    }

    /// Asking for `content_type` on the wire: `.content_type(ContentType::Protobuf)` is
    /// client-go's `ContentType: "application/vnd.kubernetes.protobuf"` ([`ContentType`]).
    pub fn content_type(mut self, content_type: ContentType) -> Self {
        self.content_type = content_type;
        self
    }
}

/// DeltaFifo actor options.
#[derive(Clone, Debug)]
pub struct FifoConfig {
    /// Most keys handed to the indexer in one `ProcessDeltas` message (F6). Default 256.
    /// An atomic relist is sent whole, whatever this says.
    pub batch_size: usize,
    /// Batches outstanding at the indexer at once (pipelining). Default 2.
    pub max_in_flight: usize,
    /// Pending deltas above which writers wait (B4). Default 10,000.
    pub capacity: usize,
    /// Mailbox capacity (B1). Default 64.
    pub mailbox: usize,
    /// Queue layout (F9): [`FifoMode::PerKey`], client-go's `DeltaFIFO` (the default), or
    /// [`FifoMode::InOrder`], client-go's `RealFIFO` (one entry per event, strict order).
    pub mode: FifoMode,
    /// Atomic relist (F9, client-go's `AtomicFIFO`): each relist reaches the indexer as one
    /// batch, applied in one store batch. Default false. Works with both modes.
    pub atomic_replace: bool,
    /// A relist queues `Replaced` deltas (true, the default, as current client-go and kube-rs)
    /// or `Sync` deltas (false, as client-go before `Replaced` existed).
    pub emit_delta_type_replaced: bool,
}

impl Default for FifoConfig {
    fn default() -> Self {
        FifoConfig {
            batch_size: 256,
            max_in_flight: 2,
            capacity: 10_000,
            mailbox: 64,
            mode: FifoMode::PerKey,
            atomic_replace: false,
            emit_delta_type_replaced: true,
        }
    }
}

impl FifoConfig {
    /// Applies this config's queue options ([`mode`](Self::mode),
    /// [`atomic_replace`](Self::atomic_replace),
    /// [`emit_delta_type_replaced`](Self::emit_delta_type_replaced)) to `base`, the core FIFO's
    /// options carrying the key function and known objects.
    pub fn fifo_options<K>(&self, base: DeltaFifoOptions<K>) -> DeltaFifoOptions<K> {
        base.with_mode(self.mode)
            .with_atomic_replace(self.atomic_replace)
            .with_emit_delta_type_replaced(self.emit_delta_type_replaced)
    }
}

/// What a listener does when its handler falls behind (B3).
///
/// client-go gives each listener an unbounded ring buffer; here the policy decides:
/// - [`Block`](Self::Block): at most [`ListenerConfig::capacity`] notifications wait; beyond
///   that the indexer's message is answered only when the handler caught up, so the whole
///   pipeline slows down to the slowest handler (pure backpressure: the FIFO then holds back the
///   reflector, B4).
/// - [`Coalesce`](Self::Coalesce) (the default): notifications wait in a per-key coalescer; a
///   slow handler sees fewer, merged notifications (the latest state of each object, every
///   deletion of an object it was told about), its memory is bounded by the number of keys, and
///   it never holds up the other handlers. Informers are level-based: a handler reconciles to
///   the latest state, so merging intermediate updates loses nothing it needs.
/// - [`Unbounded`](Self::Unbounded): client-go's behaviour: every notification is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OverflowPolicy {
    /// Backpressure: the pipeline waits for this handler once `capacity` notifications wait.
    Block,
    /// Keep only the latest notification per key (default): bounded by keys, never blocks others.
    #[default]
    Coalesce,
    /// Keep everything (client-go's unbounded ring buffer).
    Unbounded,
}

/// Options of one handler registration.
#[derive(Clone, Debug)]
pub struct ListenerConfig {
    /// Overflow policy (default [`OverflowPolicy::Coalesce`]).
    pub policy: OverflowPolicy,
    /// Under `Block`, notifications buffered before the indexer waits. Default 1024.
    pub capacity: usize,
    /// The resync period this handler asks for (P6): [`ResyncPeriod::Default`] (the default:
    /// the informer's [`InformerConfig::resync`](crate::InformerConfig::resync)),
    /// [`ResyncPeriod::Never`], or [`ResyncPeriod::Every`] (at least 1 s; raised to the
    /// informer's check period when added after start; never if the informer does not resync).
    pub resync: ResyncPeriod,
    /// A name for logs, traces and the handler thread.
    pub name: Option<String>,
    /// How long a handler thread waits after its handler panicked before it runs the next
    /// notification (P7). Default zero: at once. client-go's listener, when a panic does not
    /// crash the process, runs again after 1 s (`wait.Until`); set `Duration::from_secs(1)`
    /// for that. Applies to closure and trait handlers (their own thread), not to key sinks or
    /// user actors. Shutdown and removal cut the pause short.
    pub panic_pause: Duration,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        ListenerConfig {
            policy: OverflowPolicy::default(),
            capacity: 1024,
            resync: ResyncPeriod::Default,
            name: None,
            panic_pause: Duration::ZERO,
        }
    }
}

impl ListenerConfig {
    /// With the given policy.
    pub fn policy(mut self, policy: OverflowPolicy) -> Self {
        self.policy = policy;
        self
    }
    /// With a resync period (raised to at least 1 s; zero: never; P6).
    pub fn resync(mut self, period: Duration) -> Self {
        self.resync = ResyncPeriod::Every(period);
        self
    }
    /// Never resync this handler, whatever the informer's default (P6).
    pub fn never_resync(mut self) -> Self {
        self.resync = ResyncPeriod::Never;
        self
    }
    /// With a name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
    /// With a pause after each handler panic (P7; client-go's is 1 s).
    pub fn panic_pause(mut self, pause: Duration) -> Self {
        self.panic_pause = pause;
        self
    }
    /// With a `Block` capacity.
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }
}
