//! Watch streams: initial events, replay from the watch-cache window, live events, bookmarks,
//! selectors (objects that stop matching are sent as DELETED), timeouts and stream faults.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::Stream;
use http::Response;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use super::counters::OpenWatchGuard;
use super::faults::{Count, ExpireMode, StreamFault, WatchFault};
use super::negotiation::Repr;
use super::request_info::Target;
use super::response::{self as resp, Body, BodyError};
use super::shared::Shared;
use super::table;
use crate::apimachinery::errors::ApiError;
use crate::apimachinery::options::ListOptions;
use crate::apimachinery::schema::ResourceDef;
use crate::apimachinery::selector::{FieldSelector, LabelSelector, parse_fields, parse_labels};
use crate::apimachinery::sharding::ShardSelector;
use crate::apimachinery::util::Query;
use crate::registry::generic::shard_selector;
use crate::storage::object::meta_mut;
use crate::storage::object::{StoredObject, strip_rv};
use crate::storage::predicate::{Selectors, matches};
use crate::storage::store::{Event, EventType, write_event_line};
use crate::storage::versioner::parse_rv;
use crate::storage::watch_cache::wait_until_fresh;

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Start {
    /// Synthetic ADDED events for the current state first; with `end_bookmark`, then a BOOKMARK
    /// annotated `k8s.io/initial-events-end` (watch-list).
    Initial { end_bookmark: bool },
    /// Events after this resourceVersion.
    FromRv(u64),
}

/// A validated watch request.
#[derive(Debug)]
pub(crate) struct WatchParams {
    pub def: Arc<ResourceDef>,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// The shard selector (KEP-5866), when the gate is on and one was sent: filters the
    /// initial and the live events, never the bookmarks (`filterWithAttrsAndPrefixFunction`).
    pub shard: Option<ShardSelector>,
    pub start: Start,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
    pub repr: Repr,
}

impl WatchParams {
    fn selectors(&self) -> Selectors<'_> {
        Selectors {
            labels: &self.labels,
            fields: &self.fields,
            shard: self.shard.as_ref(),
        }
    }
}

/// A line that no JSON decoder accepts.
const MALFORMED: &[u8] = b"{\"type\":\"MODIFIED\",\"object\":!malformed-by-kinformer-sim!}\n";

/// The object message of a malformed protobuf event: field 1 (`metadata`) declares a length
/// (the varint `ff 21`, 4351 bytes) far past the bytes that follow, so no protobuf decoder
/// reads it; the marker text makes it recognisable in a capture.
const MALFORMED_PROTOBUF_OBJECT: &[u8] = b"\x0a\xff\x21!malformed-by-kinformer-sim!";

/// The protobuf counterpart of [`MALFORMED`]: a well-formed frame (length prefix, a
/// `metav1.WatchEvent` of type MODIFIED, the object enveloped as `k8s\0` + `runtime.Unknown`
/// of the watched kind) whose object's message is broken wire data. The stream stays in step
/// (the next frame starts where the length says), but decoding the event fails, as decoding
/// the JSON line does: client-go's `StreamWatcher` ends the watch with the decode error, as it
/// does for a JSON line that does not parse. Writing the JSON line into a protobuf stream
/// instead would break the framing (its first bytes read as a length of about 2 GB), a
/// different fault.
fn malformed_frame(def: &ResourceDef) -> Vec<u8> {
    let object =
        kinformer::protobuf::envelope_raw(&def.api_version, &def.kind, MALFORMED_PROTOBUF_OBJECT);
    // `watch_frame` fails only for a frame over the 4 GiB a length prefix can hold.
    kinformer::protobuf::watch_frame("MODIFIED", &object).unwrap_or_default()
}
const CHUNK: usize = 128 * 1024;
const BATCH: usize = 512;

enum Wake {
    Changes,
    Drop,
    Expire,
    Shutdown,
}

enum Phase {
    Initial {
        items: Vec<Arc<StoredObject>>,
        pos: usize,
        end_bookmark: bool,
    },
    Live,
    Done,
    Abort,
}

struct WatchStream {
    shared: Arc<Shared>,
    p: WatchParams,
    cursor: u64,
    phase: Phase,
    changes: Option<watch::Receiver<u64>>,
    drop_rx: watch::Receiver<u64>,
    expire_rx: watch::Receiver<u64>,
    stall_rx: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
    deadline: Option<Instant>,
    next_bookmark: Option<Instant>,
    /// The resourceVersion the watch started at (the requested one, or the state's that the
    /// initial events show): a periodic BOOKMARK goes out only once the cache is past it.
    start_rv: u64,
    unfiltered: bool,
    _guard: OpenWatchGuard,
}

/// Starts a watch stream.
pub(crate) fn stream(
    shared: Arc<Shared>,
    p: WatchParams,
) -> impl Stream<Item = Result<Bytes, BodyError>> + Send {
    let guard = shared.requests.open_watch(&p.def.plural);
    let mut drop_rx = shared.faults.drop_tx.subscribe();
    drop_rx.mark_unchanged();
    let mut expire_rx = shared.faults.expire_tx.subscribe();
    expire_rx.mark_unchanged();
    let changes = shared.store.subscribe(p.def.idx);
    let now = Instant::now();
    let (phase, cursor) = match p.start {
        Start::Initial { end_bookmark } => {
            let (map, rv) = shared.store.snapshot(&p.def, false);
            let ns = p.namespace.as_deref();
            let items: Vec<Arc<StoredObject>> = map
                .values()
                .filter(|o| matches(o, ns, p.selectors()))
                .cloned()
                .collect();
            (
                Phase::Initial {
                    items,
                    pos: 0,
                    end_bookmark,
                },
                rv,
            )
        }
        Start::FromRv(rv) => match shared.store.check_window(&p.def, rv) {
            Ok(()) => (Phase::Live, rv),
            Err(e) => {
                shared
                    .faults
                    .bump_on(Count::TooOldWatches, p.repr == Repr::Protobuf);
                let err =
                    ApiError::expired(format!("too old resource version: {rv} ({})", e.oldest));
                return futures::future::Either::Left(futures::stream::iter([Ok(error_line(
                    &err, p.repr,
                ))]));
            }
        },
    };
    let unfiltered = p.namespace.is_none() && p.selectors().is_empty() && p.repr == Repr::Object;
    // An absurd timeoutSeconds overflows the clock: treat it as no timeout.
    let deadline = p.timeout.and_then(|t| now.checked_add(t));
    let st = WatchStream {
        stall_rx: shared.faults.stall_tx.subscribe(),
        shutdown: shared.shutdown.clone(),
        deadline,
        // `Cacher.Watch` queues only watchers that allow bookmarks (`bookmarkWatchers`).
        next_bookmark: p
            .bookmarks
            .then(|| next_bookmark_time(now, shared.bookmark_interval, deadline))
            .flatten(),
        start_rv: cursor,
        shared,
        p,
        cursor,
        phase,
        changes,
        drop_rx,
        expire_rx,
        unfiltered,
        _guard: guard,
    };
    futures::future::Either::Right(futures::stream::unfold(st, |mut st| async move {
        let item = st.next_chunk().await?;
        Some((item, st))
    }))
}

/// `{"type":"ERROR","object":<Status>}`, or its protobuf frame for a protobuf watch.
pub(crate) fn error_line(e: &ApiError, repr: Repr) -> Bytes {
    let status = e.to_status();
    if repr == Repr::Protobuf
        && let Ok(b) = kinformer::protobuf::encode_object_as("v1", "Status", &status)
            .and_then(|o| kinformer::protobuf::watch_frame("ERROR", &o))
    {
        return Bytes::from(b);
    }
    let v = json!({"type": "ERROR", "object": status});
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

/// When a watch with bookmarks gets its next BOOKMARK (`cacheWatcher.nextBookmarkTime`,
/// `staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go`): after the bookmark
/// frequency (kube-apiserver's `defaultBookmarkFrequency` of a minute, the sim's
/// `SimConfig::bookmark_interval`), or 2 s before the watch's deadline if that comes first;
/// none once that moment has passed (so a watch of under 2 s gets none). The cacher's 1 s
/// buckets and jittered timer make the real one arrive up to about a second later.
fn next_bookmark_time(
    now: Instant,
    frequency: Duration,
    deadline: Option<Instant>,
) -> Option<Instant> {
    let heartbeat = now.checked_add(frequency)?;
    let at = match deadline {
        None => heartbeat,
        Some(d) => heartbeat.min(d.checked_sub(Duration::from_secs(2))?),
    };
    // The real check is `heartbeatTime.Before(now)`; "not after now" keeps a bookmark that is
    // due right now from being rescheduled for the same instant.
    (at > now).then_some(at)
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

impl WatchStream {
    fn bookmark_line(&self, rv: u64, initial_end: bool) -> Bytes {
        let (kind, api_version) = match self.p.repr {
            Repr::Metadata => (
                "PartialObjectMetadata".to_string(),
                "meta.k8s.io/v1".to_string(),
            ),
            _ => (self.p.def.kind.clone(), self.p.def.api_version.clone()),
        };
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end && let Some(m) = meta.as_object_mut() {
            m.insert(
                "annotations".into(),
                json!({"k8s.io/initial-events-end": "true"}),
            );
        }
        if self.p.repr == Repr::Protobuf
            && let Ok(b) = kinformer::protobuf::encode_object_as(
                &api_version,
                &kind,
                &json!({"metadata": meta}),
            )
            .and_then(|o| kinformer::protobuf::watch_frame("BOOKMARK", &o))
        {
            return Bytes::from(b);
        }
        let v = json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": meta}});
        let mut s = v.to_string();
        s.push('\n');
        Bytes::from(s)
    }

    /// Writes an event with `obj` of type `etype` in the negotiated representation (without
    /// the object's resourceVersion under `Faults::strip_resource_versions`, except in Tables).
    fn write_event(&self, etype: &str, obj: &StoredObject, out: &mut BytesMut) {
        let strip =
            self.shared.faults.strips_resource_versions() && !matches!(self.p.repr, Repr::Table(_));
        if strip {
            self.shared
                .faults
                .stripped(1, self.p.repr == Repr::Protobuf);
        }
        match self.p.repr {
            // The object was serialized once at commit; each watcher copies those bytes
            // into its chunk (no per-watcher serialization or allocation per event).
            Repr::Object if !strip => write_event_line(&self.p.def, etype, obj, out),
            Repr::Object => {
                out.put_slice(b"{\"type\":\"");
                out.put_slice(etype.as_bytes());
                out.put_slice(b"\",\"object\":");
                obj.write_without_rv(&self.p.def, false, out);
                out.put_slice(b"}\n");
            }
            Repr::Protobuf => {
                let Ok(mut v) = obj.to_value(&self.p.def) else {
                    return;
                };
                if strip {
                    strip_rv(&mut v);
                }
                let def = &self.p.def;
                let frame = kinformer::protobuf::encode_object_as(&def.api_version, &def.kind, &v)
                    .and_then(|o| kinformer::protobuf::watch_frame(etype, &o));
                match frame {
                    Ok(b) => out.put_slice(&b),
                    // The negotiation offers protobuf only for kinds the schema covers whole.
                    Err(e) => {
                        tracing::warn!(error = %e, "an event could not be encoded to protobuf")
                    }
                }
            }
            Repr::Metadata | Repr::Table(_) => {
                let Ok(v) = obj.to_value(&self.p.def) else {
                    return;
                };
                let o = match self.p.repr {
                    Repr::Table(inc) => table::table(&self.p.def, &[v], obj.rv, None, inc),
                    _ => {
                        let mut m = table::partial_metadata(&v);
                        if strip {
                            strip_rv(&mut m);
                        }
                        m
                    }
                };
                let line = json!({"type": etype, "object": o});
                out.put_slice(line.to_string().as_bytes());
                out.put_u8(b'\n');
            }
        }
    }

    /// Applies a pending stream fault before writing an event; false means "stop now".
    fn pre_event(&mut self, out: &mut BytesMut, event_bytes: impl FnOnce(&Self) -> Bytes) -> bool {
        match self.shared.faults.claim_stream_fault(&self.p.def.plural) {
            Some(StreamFault::Malformed) => {
                if self.p.repr == Repr::Protobuf {
                    out.put_slice(&malformed_frame(&self.p.def));
                } else {
                    out.put_slice(MALFORMED);
                }
                self.shared
                    .faults
                    .bump_on(Count::MalformedEvents, self.p.repr == Repr::Protobuf);
                true
            }
            Some(StreamFault::CloseMidObject) => {
                let b = event_bytes(self);
                out.put_slice(&b[..b.len() / 2]);
                self.shared
                    .faults
                    .bump_on(Count::ClosedMidObject, self.p.repr == Repr::Protobuf);
                self.phase = Phase::Abort;
                false
            }
            None => true,
        }
    }

    fn passes(&self, o: &StoredObject) -> bool {
        matches(o, self.p.namespace.as_deref(), self.p.selectors())
    }

    /// The (type, object) to send for a stored event, after selectors.
    fn transform(&self, ev: &Event) -> Option<(EventType, Arc<StoredObject>)> {
        if self.unfiltered {
            return Some((ev.etype, ev.object.clone()));
        }
        let cur = ev.etype != EventType::Deleted && self.passes(&ev.object);
        let old = ev.prev.as_ref().is_some_and(|p| self.passes(p));
        match (ev.etype, cur, old) {
            (EventType::Deleted, _, true) => Some((EventType::Deleted, ev.object.clone())),
            (EventType::Deleted, _, false) => None,
            (_, true, true) => Some((EventType::Modified, ev.object.clone())),
            (EventType::Added, true, false) => Some((EventType::Added, ev.object.clone())),
            (_, true, false) => Some((EventType::Added, ev.object.clone())),
            (_, false, true) => {
                // Stopped matching: DELETED with the previous content at this event's RV.
                let prev = ev.prev.as_ref()?;
                let mut v = prev.to_value(&self.p.def).ok()?;
                if let Some(m) = meta_mut(&mut v) {
                    m.insert("resourceVersion".into(), Value::String(ev.rv.to_string()));
                }
                let o = StoredObject::from_value(&self.p.def, &v, ev.rv).ok()?;
                Some((EventType::Deleted, Arc::new(o)))
            }
            (_, false, false) => None,
        }
    }

    async fn next_chunk(&mut self) -> Option<Result<Bytes, BodyError>> {
        loop {
            match self.phase {
                Phase::Done => return None,
                Phase::Abort => {
                    // hyper flushes its write buffer only when the body is pending; yield once so
                    // the partial event reaches the client before the connection is cut.
                    tokio::task::yield_now().await;
                    self.phase = Phase::Done;
                    return Some(Err(BodyError(
                        "watch stream cut by kinformer-sim fault injection",
                    )));
                }
                _ => {}
            }
            if self.drop_rx.has_changed().unwrap_or(false) {
                self.shared
                    .faults
                    .bump_on(Count::WatchesDropped, self.p.repr == Repr::Protobuf);
                self.phase = Phase::Done;
                return Some(Err(BodyError(
                    "watch dropped by kinformer-sim fault injection",
                )));
            }
            if self.expire_rx.has_changed().unwrap_or(false) {
                self.shared
                    .faults
                    .bump_on(Count::WatchesExpired, self.p.repr == Repr::Protobuf);
                self.phase = Phase::Done;
                let e = ApiError::expired(format!(
                    "too old resource version: {} (injected by kinformer-sim)",
                    self.cursor
                ));
                return Some(Ok(error_line(&e, self.p.repr)));
            }
            if *self.shutdown.borrow() {
                self.phase = Phase::Done;
                return None;
            }
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                self.phase = Phase::Done;
                return None;
            }
            if *self.stall_rx.borrow_and_update() {
                self.shared
                    .faults
                    .bump_on(Count::StalledWatches, self.p.repr == Repr::Protobuf);
                let stall_rx = &mut self.stall_rx;
                let drop_rx = &mut self.drop_rx;
                let shutdown = &mut self.shutdown;
                let wake = tokio::select! {
                    _ = async {
                        loop {
                            if stall_rx.changed().await.is_err() {
                                futures::future::pending::<()>().await;
                            }
                            if !*stall_rx.borrow_and_update() {
                                break;
                            }
                        }
                    } => Wake::Changes,
                    r = drop_rx.changed() => if r.is_ok() { Wake::Drop } else { Wake::Changes },
                    _ = shutdown.changed() => Wake::Shutdown,
                };
                match wake {
                    Wake::Drop => {
                        self.shared
                            .faults
                            .bump_on(Count::WatchesDropped, self.p.repr == Repr::Protobuf);
                        self.phase = Phase::Done;
                        return Some(Err(BodyError(
                            "watch dropped by kinformer-sim fault injection",
                        )));
                    }
                    Wake::Shutdown => {
                        self.phase = Phase::Done;
                        return None;
                    }
                    _ => continue,
                }
            }
            let slow = self.shared.faults.slow();
            if let Some(d) = slow {
                tokio::time::sleep(d).await;
            }
            let mut out = BytesMut::with_capacity(CHUNK + 16 * 1024);
            if let Phase::Initial { .. } = self.phase {
                self.initial_chunk(&mut out, slow.is_some());
                if !out.is_empty() {
                    return Some(Ok(out.freeze()));
                }
                continue;
            }
            // Live.
            if let Some(c) = self.changes.as_mut() {
                c.mark_unchanged();
            }
            let max = if slow.is_some() { 1 } else { BATCH };
            let (events, global) =
                match self
                    .shared
                    .store
                    .events_after(&self.p.def, self.cursor, max)
                {
                    Ok(x) => x,
                    Err(e) => {
                        self.shared
                            .faults
                            .bump_on(Count::TooOldWatches, self.p.repr == Repr::Protobuf);
                        self.phase = Phase::Done;
                        let err = ApiError::expired(format!(
                            "too old resource version: {} ({})",
                            self.cursor, e.oldest
                        ));
                        return Some(Ok(error_line(&err, self.p.repr)));
                    }
                };
            if !events.is_empty() {
                for ev in &events {
                    let Some((etype, obj)) = self.transform(ev) else {
                        self.cursor = ev.rv;
                        continue;
                    };
                    let cont = self.pre_event(&mut out, |s| {
                        let mut b = BytesMut::new();
                        s.write_event(etype.as_str(), &obj, &mut b);
                        b.freeze()
                    });
                    if !cont {
                        return Some(Ok(out.freeze()));
                    }
                    if slow.is_some() {
                        self.shared
                            .faults
                            .bump_on(Count::SlowedEvents, self.p.repr == Repr::Protobuf);
                    }
                    self.write_event(etype.as_str(), &obj, &mut out);
                    self.cursor = ev.rv;
                    if out.len() >= CHUNK {
                        break;
                    }
                }
                if !out.is_empty() {
                    return Some(Ok(out.freeze()));
                }
                continue;
            }
            if let Some(nb) = self.next_bookmark
                && Instant::now() >= nb
            {
                // `Cacher.finishDispatching` requeues the watcher at its next bookmark time.
                let now = Instant::now();
                self.next_bookmark =
                    next_bookmark_time(now, self.shared.bookmark_interval, self.deadline);
                // `cacheWatcher.process` passes on a bookmark only when its resourceVersion is
                // past the one the watch started at. No event of this resource is pending up
                // to `global`, so it is a safe bookmark.
                if global > self.start_rv {
                    self.cursor = self.cursor.max(global);
                    return Some(Ok(self.bookmark_line(self.cursor, false)));
                }
            }
            let deadline = self.deadline.unwrap_or_else(far_future);
            let bookmark_at = self.next_bookmark.unwrap_or_else(far_future);
            let changes_rx = &mut self.changes;
            let drop_rx = &mut self.drop_rx;
            let expire_rx = &mut self.expire_rx;
            let shutdown = &mut self.shutdown;
            let stall_rx = &mut self.stall_rx;
            let changes = async {
                let ok = match changes_rx.as_mut() {
                    Some(c) => c.changed().await.is_ok(),
                    None => false,
                };
                if !ok {
                    futures::future::pending::<()>().await;
                }
            };
            let wake = tokio::select! {
                _ = changes => Wake::Changes,
                r = drop_rx.changed() => if r.is_ok() { Wake::Drop } else { Wake::Changes },
                r = expire_rx.changed() => if r.is_ok() { Wake::Expire } else { Wake::Changes },
                _ = shutdown.changed() => Wake::Shutdown,
                _ = stall_rx.changed() => Wake::Changes,
                _ = tokio::time::sleep_until(deadline) => Wake::Changes,
                _ = tokio::time::sleep_until(bookmark_at) => Wake::Changes,
            };
            match wake {
                Wake::Changes => {}
                Wake::Drop => {
                    self.shared
                        .faults
                        .bump_on(Count::WatchesDropped, self.p.repr == Repr::Protobuf);
                    self.phase = Phase::Done;
                    return Some(Err(BodyError(
                        "watch dropped by kinformer-sim fault injection",
                    )));
                }
                Wake::Expire => {
                    self.shared
                        .faults
                        .bump_on(Count::WatchesExpired, self.p.repr == Repr::Protobuf);
                    self.phase = Phase::Done;
                    let e = ApiError::expired(format!(
                        "too old resource version: {} (injected by kinformer-sim)",
                        self.cursor
                    ));
                    return Some(Ok(error_line(&e, self.p.repr)));
                }
                Wake::Shutdown => {
                    self.phase = Phase::Done;
                    return None;
                }
            }
        }
    }

    fn initial_chunk(&mut self, out: &mut BytesMut, one: bool) {
        let Phase::Initial {
            items,
            pos,
            end_bookmark,
        } = std::mem::replace(&mut self.phase, Phase::Live)
        else {
            return;
        };
        let mut pos = pos;
        while pos < items.len() && out.len() < CHUNK {
            let obj = items[pos].clone();
            let cont = self.pre_event(out, |s| {
                let mut b = BytesMut::new();
                s.write_event("ADDED", &obj, &mut b);
                b.freeze()
            });
            if !cont {
                return;
            }
            if one {
                self.shared
                    .faults
                    .bump_on(Count::SlowedEvents, self.p.repr == Repr::Protobuf);
            }
            self.write_event("ADDED", &obj, out);
            pos += 1;
            if one {
                break;
            }
        }
        if pos < items.len() {
            self.phase = Phase::Initial {
                items,
                pos,
                end_bookmark,
            };
        } else if end_bookmark {
            out.put_slice(&self.bookmark_line(self.cursor, true));
        }
    }
}

/// Serves a WATCH (`k8s.io/apiserver/pkg/endpoints/handlers/watch.go` `serveWatch`, after
/// `ListResource` decoded and validated its options): where it starts (`Cacher.Watch`), the
/// injected watch faults, then the stream.
pub(crate) async fn serve_watch(
    shared: &Arc<Shared>,
    t: &Target,
    query: &Query,
    repr: Repr,
) -> Result<Response<Body>, ApiError> {
    let mut r = serve_watch_stream(shared, t, query, repr).await?;
    if repr == Repr::Protobuf {
        // `negotiation.NegotiateOutputStreamSerializer`: the stream's framing in its type.
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/vnd.kubernetes.protobuf;stream=watch"),
        );
    }
    Ok(r)
}

async fn serve_watch_stream(
    shared: &Arc<Shared>,
    t: &Target,
    query: &Query,
    repr: Repr,
) -> Result<Response<Body>, ApiError> {
    let def = t.def.clone();
    // ListResource: DecodeParameters (400), then ValidateListOptions (422).
    let mut opts = ListOptions::decode(query, true)?;
    let labels = parse_labels(query)?;
    let mut fields = parse_fields(&def.field_labels, query)?;
    if let Some(name) = &t.name {
        // The legacy single-object watch path: a watch filtered to that name.
        fields = fields.and_name(name);
    }
    if opts.send_initial_events == Some(true) && shared.faults.rejects_watch_list() {
        shared
            .faults
            .bump_on(Count::WatchListsRejected, repr == Repr::Protobuf);
        return Err(ApiError::watch_list_forbidden());
    }
    if shared.faults.ignores_watch_list() {
        // A server that predates watch-list knows neither parameter.
        if opts.send_initial_events == Some(true) {
            shared
                .faults
                .bump_on(Count::WatchListsIgnored, repr == Repr::Protobuf);
        }
        opts.send_initial_events = None;
        opts.resource_version_match.clear();
    } else if !shared.faults.rejects_watch_list() {
        // `ListResource` defaults the options before validating them (the WatchList feature is
        // on in 1.34; the faults play servers where it is off): a watch from "" or "0" becomes
        // a watch-list, so with `allowWatchBookmarks` its initial events end with the
        // `k8s.io/initial-events-end` bookmark.
        opts.set_defaults();
    }
    let errs = opts.errors();
    if !errs.is_empty() {
        return Err(ApiError::invalid_list_options(&errs));
    }
    // `Store.Watch` parses the shard selector before the cacher starts the watch; an object's
    // UID and namespace never change, so an object never moves in or out of a shard.
    let shard = shard_selector(
        shared.faults.shards_lists_and_watches(),
        &opts.shard_selector,
    )?;
    let rv = opts.resource_version.as_str();
    let bookmarks = opts.allow_watch_bookmarks;
    // `timeoutSeconds=0` (or unset) leaves the server's own (long) timeout; a negative one has
    // already expired.
    let timeout = match opts.timeout_seconds {
        None | Some(0) => None,
        Some(s) => Some(Duration::from_secs(u64::try_from(s).unwrap_or(0))),
    };
    let start = match opts.send_initial_events {
        Some(true) => {
            // RV "" asks for the state at etcd's current revision (`getWatchCacheResourceVersion`
            // reads it, `waitUntilWatchCacheFreshAndForceAllEvents` waits for the cache to reach
            // it), which the sim's store always has; RV "0" takes the cache as it is. Either way
            // the initial events are the store's state now and the end bookmark carries its RV
            // (`setInitialEventsEndBookmarkIfRequested` with `watchCache.resourceVersion`).
            if !rv.is_empty() && rv != "0" {
                // A watch-list at an RV the cache has not reached waits for it
                // (`staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go`,
                // `waitUntilWatchCacheFreshAndForceAllEvents`); when the wait fails,
                // `Cacher.Watch` returns `newErrWatcher(err), nil`: the watch is served (200)
                // and its only event is an ERROR carrying the 504 Status.
                if let Err(e) = wait_until_fresh(&shared.store, parse_rv(rv)?, shared.rv_wait).await
                {
                    return Ok(resp::stream(
                        200,
                        futures::stream::iter([Ok::<Bytes, BodyError>(error_line(&e, repr))]),
                    ));
                }
            }
            // The `k8s.io/initial-events-end` bookmark goes only to a client that asked for
            // bookmarks (`Cacher.Watch`: `setBookmarkAfterResourceVersion` under
            // `opts.Predicate.AllowWatchBookmarks`).
            Start::Initial {
                end_bookmark: bookmarks,
            }
        }
        Some(false) | None => {
            if rv.is_empty() || rv == "0" {
                if opts.send_initial_events == Some(false) {
                    Start::FromRv(shared.store.resource_version())
                } else {
                    // Only a server without watch-list (the faults) gets here: the legacy
                    // watch from "0" (`getAllEventsSinceLocked`: the current state, then
                    // events), with no bookmark to end it.
                    Start::Initial {
                        end_bookmark: false,
                    }
                }
            } else {
                // A plain watch from an RV the server has not reached starts at once and sends
                // the events after it (`Cacher.Watch` does not wait:
                // `watchCache.getAllEventsSinceLocked` only rejects RVs that are too old).
                Start::FromRv(parse_rv(rv)?)
            }
        }
    };
    match shared.faults.watch_fault() {
        None => {}
        Some(WatchFault::EndAtOnce) => {
            shared
                .faults
                .bump_on(Count::WatchesEndedAtOnce, repr == Repr::Protobuf);
            return Ok(resp::stream(
                200,
                futures::stream::empty::<Result<Bytes, BodyError>>(),
            ));
        }
        Some(WatchFault::Expire(mode)) => {
            shared
                .faults
                .bump_on(Count::WatchesRefusedExpired, repr == Repr::Protobuf);
            let e = ApiError::expired(format!(
                "too old resource version: {rv} (injected by kinformer-sim)"
            ));
            return match mode {
                ExpireMode::Http => Err(e),
                ExpireMode::ErrorEvent => Ok(resp::stream(
                    200,
                    futures::stream::iter([Ok::<Bytes, BodyError>(error_line(&e, repr))]),
                )),
            };
        }
    }
    let params = WatchParams {
        def,
        namespace: t.namespace.clone(),
        labels,
        fields,
        shard,
        start,
        bookmarks,
        timeout,
        repr,
    };
    Ok(resp::stream(200, stream(shared.clone(), params)))
}
