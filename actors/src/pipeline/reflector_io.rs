//! What the Reflector actor needs around its machine: the context shared by every reflector its
//! supervisor starts, the admission of each decoded object (R5 check, P2 transform, T1 trace
//! id) as soon as it is decoded, and the translation of kube's answers (errors, watch events)
//! into the machine's inputs. Kept apart so that `reflector.rs` is the driving loop only.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use kinformer::shard::ShardSelector;
use kinformer::{
    key::KeyFunc,
    known::KnownObjects,
    lean::{LazyObject, LeanState, RawObject},
    reflector::{
        ErrorKind, FailureCause, INITIAL_EVENTS_END, ReflectorConfig, RequestError, WatchEvent,
    },
};
use kube::api::{TypeMeta, WatchEvent as KubeWatchEvent};

use crate::{
    error::{ReflectorError, WatchWarning},
    listwatch::lister_watcher::{Admit, Item, ItemCodec, Listed, ListerWatcher, listed_in_shard},
    listwatch::server_health::ServerLoop,
    object::InformerObject,
    pipeline::messages::FifoRecipients,
    telemetry::health::ReflectorStatus,
    telemetry::trace::{TraceIds, Tracer},
};

/// A transform applied to every object before it is cached (P2), as it is decoded.
pub type Transform<K> = Arc<dyn Fn(K) -> K + Send + Sync>;
/// A check that an object is of the informer's type/GVK (R5); `Err` drops it with the message.
///
/// The second argument is the type of the list the object came in, for listed objects: list
/// items carry no `apiVersion`/`kind` of their own, so the list's (`ConfigMapList` →
/// `ConfigMap`) stands for them.
pub type Validate<K> = Arc<dyn Fn(&K, Option<&TypeMeta>) -> Result<(), String> + Send + Sync>;
/// Called with every reflector error and warning (client-go's `WatchErrorHandler`).
pub type WatchErrorHandler = Arc<dyn Fn(&dyn std::error::Error) + Send + Sync>;

/// Everything a reflector needs; shared by every reflector its supervisor starts.
pub(crate) struct ReflectorContext<K: InformerObject> {
    pub(crate) resource: String,
    pub(crate) lw: Arc<dyn ListerWatcher<K>>,
    pub(crate) fifo: FifoRecipients<K>,
    pub(crate) status: Arc<ReflectorStatus>,
    pub(crate) trace_ids: TraceIds,
    /// The `reflector` hop of this informer (T1).
    pub(crate) tracer: Tracer,
    pub(crate) transform: Option<Transform<K>>,
    pub(crate) validate: Option<Validate<K>>,
    pub(crate) on_error: Option<WatchErrorHandler>,
    /// How objects are read: decoded (typed mode) or encoded (lean mode, I7).
    pub(crate) codec: ItemCodec<K>,
    /// The `apiVersion` and `kind` the informer's objects have, when its type says so (the
    /// lean mode's R5 check; typed objects are checked by their own decode).
    pub(crate) expected_type: Option<TypeMeta>,
    /// The shard the informer wants (K2): `set_shard` writes it, every reflector the supervisor
    /// starts reads it and feeds changes to its machine.
    pub(crate) shard: tokio::sync::watch::Receiver<Option<ShardSelector>>,
    /// The cache as the FIFO reads it, and its key function: a listed object the cache already
    /// holds with the same uid and resourceVersion is replaced by the cached one (P10), so a
    /// relist holds one copy of each unchanged object instead of two until the Replace.
    pub(crate) cached: Option<CachedObjects<K>>,
    /// This informer's part in its API server's shared health (R11), when it shares one.
    pub(crate) server: Option<ServerLoop>,
}

/// The cache's objects by key (P10).
pub(crate) struct CachedObjects<K> {
    pub(crate) key_func: KeyFunc<LazyObject<K>>,
    pub(crate) known: Arc<dyn KnownObjects<LazyObject<K>>>,
}

impl<K: kube::Resource> CachedObjects<K> {
    /// The cached object for `listed` when it is the same object at the same resourceVersion.
    fn same(&self, listed: &LazyObject<K>) -> Option<Arc<LazyObject<K>>> {
        let rv = listed.resource_version()?;
        let key = (self.key_func)(listed).ok()?;
        let cached = self.known.get_by_key(key.as_str())?;
        (cached.resource_version() == Some(rv) && cached.uid() == listed.uid()).then_some(cached)
    }
}

/// How watch events are checked against the shard (K1): the machine's current selector and
/// whether the informer filters (the last LIST had no `shardInfo`).
#[derive(Clone, Copy)]
pub(crate) struct ShardGate<'a> {
    pub(crate) selector: Option<&'a ShardSelector>,
    pub(crate) client_filters: bool,
}

impl<K: InformerObject> ReflectorContext<K> {
    /// Validates (R5), transforms (P2) and wraps one decoded or encoded object; `None` when
    /// dropped.
    pub(crate) fn admit(
        &self,
        obj: Listed<K>,
        what: &'static str,
        list_type: Option<&TypeMeta>,
    ) -> Option<Item<K>> {
        let admitted = match obj {
            Listed::Typed(obj) => self.admit_typed(obj, list_type),
            Listed::Lean(raw) => self.admit_lean(raw, list_type),
        };
        let lazy = match admitted {
            // P10: an unchanged object of a relist is the cached one; the copy just read is
            // dropped here rather than held until the Replace.
            Ok(lazy) => match self.cached.as_ref().filter(|_| what == "listed") {
                Some(cached) => cached.same(&lazy).unwrap_or_else(|| Arc::new(lazy)),
                None => Arc::new(lazy),
            },
            Err(detail) => {
                self.status.dropped_objects.fetch_add(1, Ordering::Relaxed);
                self.warn(WatchWarning::UnexpectedObject {
                    resource: self.resource.clone(),
                    detail,
                });
                return None;
            }
        };
        let id = self.trace_ids.next();
        self.tracer.object(id, &lazy, what);
        Some((lazy, id))
    }

    fn admit_typed(
        &self,
        obj: Arc<K>,
        list_type: Option<&TypeMeta>,
    ) -> Result<LazyObject<K>, String> {
        if let Some(v) = &self.validate {
            v(&obj, list_type)?;
        }
        let obj = match &self.transform {
            // The decoder's `Arc` is the only one: the object is moved out, not cloned.
            Some(t) => Arc::new(t(Arc::unwrap_or_clone(obj))),
            None => obj,
        };
        Ok(LazyObject::from_object(obj))
    }

    /// The lean mode's admission (I7): the R5 type check on the parsed metadata; a user's
    /// typed validator or transform decodes the object for it (and the transform's output is
    /// encoded again); otherwise nothing is decoded.
    fn admit_lean(
        &self,
        raw: RawObject,
        list_type: Option<&TypeMeta>,
    ) -> Result<LazyObject<K>, String> {
        let ItemCodec::Lean(state) = &self.codec else {
            return Err("a lean object reached a typed informer".into());
        };
        self.check_type(&raw, list_type)?;
        let lazy = LazyObject::from_raw(Arc::new(raw), Arc::clone(state));
        if self.validate.is_none() && self.transform.is_none() {
            return Ok(lazy);
        }
        let typed = lazy.object().map_err(|e| e.to_string())?;
        if let Some(v) = &self.validate {
            v(&typed, list_type)?;
        }
        match &self.transform {
            None => Ok(lazy),
            Some(t) => {
                let out = t(K::clone(&typed));
                let raw = state.encode_object(&out).map_err(|e| e.to_string())?;
                Ok(LazyObject::from_raw(Arc::new(raw), Arc::clone(state)))
            }
        }
    }

    /// R5 for a lean object: its `apiVersion` and `kind`, where it has them (list items usually
    /// do not; then the list's item type stands for them), must be the informer's type.
    fn check_type(&self, raw: &RawObject, list_type: Option<&TypeMeta>) -> Result<(), String> {
        let Some(expected) = &self.expected_type else {
            return Ok(());
        };
        let meta = raw.meta();
        let (api_version, kind) = match (meta.api_version(), meta.kind(), list_type) {
            (None, None, Some(t)) => (Some(t.api_version.as_str()), Some(t.kind.as_str())),
            (a, k, _) => (a, k),
        };
        if api_version.is_some_and(|a| a != expected.api_version)
            || kind.is_some_and(|k| k != expected.kind)
        {
            return Err(format!(
                "expected {}/{}, got {}/{}",
                expected.api_version,
                expected.kind,
                api_version.unwrap_or(""),
                kind.unwrap_or("")
            ));
        }
        Ok(())
    }

    /// The lean mode's state (None: typed mode).
    pub(crate) fn lean(&self) -> Option<&Arc<LeanState<K>>> {
        match &self.codec {
            ItemCodec::Typed => None,
            ItemCodec::Lean(s) => Some(s),
        }
    }

    pub(crate) fn warn(&self, w: WatchWarning) {
        tracing::warn!(resource = %self.resource, "{w}");
        if let Some(h) = &self.on_error {
            h(&w);
        }
    }

    pub(crate) fn report(&self, e: &ReflectorError) {
        if let Some(h) = &self.on_error {
            h(e);
        }
    }
}

/// What one of kube's watch items means to the reflector, before any side effect (count,
/// warning, typed error): the fuzz harness drives this same function.
#[doc(hidden)]
pub enum Translated<T> {
    /// An input for the machine.
    Event(WatchEvent<T>),
    /// Not ours: valid JSON of the wrong shape or kind (R5), or an event of an unknown type
    /// (docs/semantics.md R3); skipped, and the detail says why.
    Skipped(String),
    /// The admission dropped the object (it counted and reported why).
    Dropped,
    /// The watch failed: the machine's input, and what the typed error is built from.
    Failed(RequestError, WatchFailure),
}

/// What a failed watch item carried.
#[doc(hidden)]
pub enum WatchFailure {
    /// An ERROR event's Status.
    ErrorEvent {
        /// Status code.
        code: u16,
        /// Status reason.
        reason: String,
        /// Status message.
        message: String,
    },
    /// kube's error reading the stream.
    Kube(kube::Error),
}

/// Translates one of kube's watch items, admitting objects through `admit` (which gets the
/// object and the hop name for its trace).
#[doc(hidden)]
pub fn translate<K, T>(
    ev: Result<KubeWatchEvent<K>, kube::Error>,
    mut admit: impl FnMut(K, &'static str) -> Option<T>,
) -> Translated<T> {
    let event = match ev {
        Ok(KubeWatchEvent::Added(o)) => admit(o, "added").map(WatchEvent::Added),
        Ok(KubeWatchEvent::Modified(o)) => admit(o, "modified").map(WatchEvent::Modified),
        Ok(KubeWatchEvent::Deleted(o)) => admit(o, "deleted").map(WatchEvent::Deleted),
        Ok(KubeWatchEvent::Bookmark(b)) => Some(WatchEvent::Bookmark {
            initial_events_end: b
                .metadata
                .annotations
                .get(INITIAL_EVENTS_END)
                .is_some_and(|v| v == "true"),
            resource_version: b.metadata.resource_version,
        }),
        Ok(KubeWatchEvent::Error(s)) => {
            let e = RequestError::from_status(s.code, None, s.message.clone());
            let failure = WatchFailure::ErrorEvent {
                code: s.code,
                reason: s.reason,
                message: s.message,
            };
            return Translated::Failed(e, failure);
        }
        // An event of a type kube does not know ("type":"BOGUS") comes out as a Status with
        // code 0: skip it (client-go ends the watch instead, so a server replaying the event
        // stalls it at that RV; a deliberate difference, docs/semantics.md R3).
        Err(kube::Error::Api(s)) if s.code == 0 => {
            return Translated::Skipped(format!(
                "watch event of an unknown type skipped: {}",
                s.message
            ));
        }
        // Valid JSON, wrong shape or kind: not ours (R5). Dropped, reported, not cached.
        Err(kube::Error::SerdeError(e)) if e.classify() == serde_json::error::Category::Data => {
            return Translated::Skipped(e.to_string());
        }
        Err(source) => return Translated::Failed(classify(&source), WatchFailure::Kube(source)),
    };
    match event {
        Some(e) => Translated::Event(e),
        None => Translated::Dropped,
    }
}

/// kube's watch event → the machine's, admitting objects (R5, P2, trace id); counts and
/// reports what it skips, and keeps the typed error of a failure in `last_error`.
pub(crate) fn convert<K: InformerObject>(
    cx: &ReflectorContext<K>,
    ev: Result<KubeWatchEvent<Listed<K>>, kube::Error>,
    last_error: &mut Option<ReflectorError>,
    gate: ShardGate<'_>,
) -> Option<WatchEvent<Item<K>>> {
    let admit = |o: Listed<K>, what| {
        // K1: an object outside the shard is dropped before admission when the server does
        // not filter; from a filtering server it is counted and kept (the server is trusted).
        if let Some(s) = gate.selector
            && !listed_in_shard(s, &o)
        {
            if gate.client_filters {
                cx.status.shard_filtered.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            cx.status.shard_mismatches.fetch_add(1, Ordering::Relaxed);
        }
        cx.admit(o, what, None)
    };
    match translate(ev, admit) {
        Translated::Event(e) => Some(e),
        Translated::Dropped => None,
        Translated::Skipped(detail) => {
            cx.status.dropped_objects.fetch_add(1, Ordering::Relaxed);
            cx.status.record_decode_error();
            cx.warn(WatchWarning::UnexpectedObject {
                resource: cx.resource.clone(),
                detail,
            });
            None
        }
        Translated::Failed(e, failure) => {
            let resource = cx.resource.clone();
            *last_error = Some(match failure {
                WatchFailure::ErrorEvent {
                    code,
                    reason,
                    message,
                } => ReflectorError::WatchErrorEvent {
                    resource,
                    code,
                    reason,
                    message,
                },
                WatchFailure::Kube(kube::Error::SerdeError(source)) => {
                    cx.status.record_decode_error();
                    ReflectorError::Decode { resource, source }
                }
                WatchFailure::Kube(source) => {
                    // Protobuf bytes that do not decode end the watch as a read error (kube's
                    // kind for broken bytes); they are the protobuf twin of a malformed JSON
                    // line, so health counts them the same way.
                    if is_malformed_protobuf(&source) {
                        cx.status.record_decode_error();
                    }
                    ReflectorError::Stream { resource, source }
                }
            });
            Some(WatchEvent::Error(e))
        }
    }
}

/// A read error made of protobuf bytes that do not decode ([`crate::listwatch::decode`]'s
/// `protobuf_error`): a broken frame, envelope or object.
fn is_malformed_protobuf(e: &kube::Error) -> bool {
    matches!(e, kube::Error::ReadEvents(io)
        if io.kind() == std::io::ErrorKind::InvalidData
            && io.get_ref().is_some_and(|inner| inner.is::<kinformer::protobuf::ProtobufError>()))
}

/// The per-item admission of a LIST, run as each item is decoded.
pub(crate) fn admit_listed<K: InformerObject>(cx: &Arc<ReflectorContext<K>>) -> Admit<K> {
    let cx = Arc::clone(cx);
    Box::new(move |obj, list_type| cx.admit(obj, "listed", list_type))
}

/// Classifies kube's error for the machine: HTTP status (with a 429's retry-after from the
/// Status details), decode, or transport.
pub(crate) fn classify(e: &kube::Error) -> RequestError {
    match e {
        kube::Error::Api(s) => {
            let retry_after = s
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(u64::from(s)));
            RequestError::from_status(s.code, retry_after, e.to_string())
        }
        kube::Error::SerdeError(_) => RequestError::new(ErrorKind::Decode, e.to_string()),
        _ => RequestError::new(ErrorKind::Transport, e.to_string()),
    }
}

/// The typed error of a failure the machine backs off from: the kube error that caused it when
/// there was one, else what the machine observed (a very short or idle watch, a 410).
pub(crate) fn failure_error<K: InformerObject>(
    cx: &ReflectorContext<K>,
    config: &ReflectorConfig,
    cause: FailureCause,
    message: String,
    last_error: &mut Option<ReflectorError>,
) -> ReflectorError {
    let resource = cx.resource.clone();
    match cause {
        FailureCause::VeryShortWatch => ReflectorError::VeryShortWatch { resource },
        FailureCause::Idle => {
            cx.warn(WatchWarning::Stalled {
                resource: resource.clone(),
            });
            ReflectorError::Idle {
                resource,
                after: config.idle_timeout,
            }
        }
        FailureCause::Expired => {
            cx.warn(WatchWarning::Expired {
                resource: resource.clone(),
            });
            last_error
                .take()
                .unwrap_or(ReflectorError::Expired { resource })
        }
        FailureCause::List | FailureCause::Watch => last_error
            .take()
            .unwrap_or(ReflectorError::Server { resource, message }),
    }
}
