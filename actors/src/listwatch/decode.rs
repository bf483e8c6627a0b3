//! Decoding on more than one core, delivered in the server's order (docs/semantics.md P8, R3).
//!
//! serde_json into a k8s-openapi `Pod` costs ~47 µs per object of the benchmark's workload, so
//! one thread decodes at most ~21,000 objects a second. Here the reflector thread only *splits*
//! what arrives into raw JSON objects (kube's watch decoder with the cheap [`RawJson`] as the
//! event's object; the LIST body's `items` as `Box<RawValue>`s), and the typed decode runs on
//! the process-wide [`DecodePool`] (rayon): each batch of what had already arrived is decoded in
//! parallel and collected *in its input order* (rayon's indexed `collect`), and batches are
//! awaited in the order they were sent (`buffered` for watch events, a FIFO of batches for LIST
//! items). So the reflector admits and hands over objects exactly in the server's order, one
//! batch while the next is decoding.
//!
//! - A batch of one (no backlog), or a process with one decode thread, is decoded inline on the
//!   reflector's thread: no cross-thread hop when nothing waits.
//! - Allocation: each object's own, its raw text (one `Box<str>`, as kube's line already is),
//!   and per batch the input and output vectors and a oneshot channel.
//! - Errors: an object that does not decode into `K` is decoded again, whole event line as kube
//!   would have read it, through kube's own rules ([`kube_line`]), so the reflector's
//!   `translate` sees the same `Result` it saw before (R5 skip, `Error::Api` of code 0, or a
//!   decode error). Lines kube cannot split (not JSON) fail in kube as before.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use futures::{Stream, StreamExt, channel::oneshot, stream::BoxStream};
use kinformer::{
    lean::{LeanState, RawObject},
    protobuf::{self, ProtobufError},
};
use kube::{api::WatchEvent as KubeWatchEvent, core::Status};
use rayon::iter::{IntoParallelIterator, ParallelIterator};
use serde::{
    Deserialize, Deserializer,
    de::{DeserializeOwned, DeserializeSeed, Error as _, MapAccess, Visitor},
};
use serde_json::value::RawValue;

use crate::runtime;

/// How a LIST item or watch event becomes a pipeline object: decoded into `K` (the typed cache
/// mode) or kept as the server's bytes, metadata parsed and compressed by the informer's
/// [`LeanState`] (the lean mode, I7). Either runs on the decode pool.
pub enum ItemCodec<K> {
    /// Decode into `K`.
    Typed,
    /// Encode as a [`RawObject`] with this store's state.
    Lean(Arc<LeanState<K>>),
}

impl<K> Clone for ItemCodec<K> {
    fn clone(&self) -> Self {
        match self {
            ItemCodec::Typed => ItemCodec::Typed,
            ItemCodec::Lean(s) => ItemCodec::Lean(Arc::clone(s)),
        }
    }
}

impl<K: DeserializeOwned> ItemCodec<K> {
    /// One object's JSON → what admission takes; a decode (typed) or metadata (lean) error is
    /// a serde data error, as kube reports an object of the wrong shape.
    pub(crate) fn apply(&self, json: &[u8]) -> Result<Listed<K>, serde_json::Error> {
        match self {
            // Exact-size vectors: a decoded pod holds 17% less (`kinformer::exact`).
            ItemCodec::Typed => {
                kinformer::exact::from_slice(json).map(|o| Listed::Typed(Arc::new(o)))
            }
            ItemCodec::Lean(state) => state
                .encode(json)
                .map(Listed::Lean)
                .map_err(serde_json::Error::custom),
        }
    }
}

/// One object as it was read, before admission: decoded (typed mode) or encoded (lean mode).
pub enum Listed<K> {
    /// The decoded object, put in its `Arc` on the thread that decoded it: the pipeline moves
    /// a pointer from there on, not the object (a k8s-openapi `Pod` is kilobytes inline).
    Typed(Arc<K>),
    /// The server's bytes, metadata parsed, compressed.
    Lean(RawObject),
}

/// Most watch events decoded as one batch (the reflector's default `event_batch`).
pub(crate) const WATCH_BATCH: usize = 256;
/// Batches decoding at once, behind the one being delivered: the read-ahead bound (B4: at most
/// `WATCH_BATCH × WATCH_IN_FLIGHT` events are read from the socket before the FIFO accepts them).
pub(crate) const WATCH_IN_FLIGHT: usize = 2;

/// A decode thread panicked: the batch it was decoding is lost (the request fails and is
/// retried like any transport failure, R8).
#[derive(Debug, thiserror::Error)]
#[error("a kinformer decode thread panicked while decoding a batch")]
pub(crate) struct WorkerLost;

/// Where batches are decoded: the process-wide rayon pool, or inline (one decode thread).
#[derive(Clone, Copy)]
pub(crate) struct DecodePool(Option<&'static rayon::ThreadPool>);

impl DecodePool {
    /// Over `pool`; `None` decodes inline.
    pub(crate) fn new(pool: Option<&'static rayon::ThreadPool>) -> Self {
        DecodePool(pool)
    }

    /// Over the process-wide decode threads ([`runtime::decode_thread_pool`]).
    pub(crate) fn shared() -> Self {
        DecodePool::new(runtime::decode_thread_pool())
    }

    /// Decodes everything inline, on the caller's thread.
    #[cfg(test)]
    pub(crate) fn inline() -> Self {
        DecodePool(None)
    }

    /// Maps `batch` through `f`, keeping its order: inline when the batch has at most one item
    /// or there is no pool, else in parallel on the pool (the answer arrives on a oneshot).
    pub(crate) fn decode<T, U>(self, batch: Vec<T>, f: fn(T) -> U) -> Batch<U>
    where
        T: Send + 'static,
        U: Send + 'static,
    {
        match self.0 {
            Some(pool) if batch.len() > 1 => {
                let (tx, rx) = oneshot::channel();
                pool.spawn(move || {
                    // Indexed: `collect` puts each output at its input's position.
                    let out: Vec<U> = batch.into_par_iter().map(f).collect();
                    let _ = tx.send(out);
                });
                Batch::Sent(rx)
            }
            _ => Batch::Done(Some(batch.into_iter().map(f).collect())),
        }
    }
}

/// A batch being decoded: resolves to the outputs in input order.
pub(crate) enum Batch<U> {
    /// Decoded inline.
    Done(Option<Vec<U>>),
    /// On the pool.
    Sent(oneshot::Receiver<Vec<U>>),
}

impl<U> Batch<U> {
    /// Blocks the calling thread until the batch is decoded (the LIST path, which runs on the
    /// reflector's thread by design, see `list_decode`).
    pub(crate) fn wait(self) -> Result<Vec<U>, WorkerLost> {
        match self {
            Batch::Done(out) => out.ok_or(WorkerLost),
            Batch::Sent(rx) => futures::executor::block_on(rx).map_err(|_| WorkerLost),
        }
    }
}

// Never pinned structurally: the outputs are only moved out whole.
impl<U> Unpin for Batch<U> {}

impl<U> Future for Batch<U> {
    type Output = Result<Vec<U>, WorkerLost>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Batch::Done(out) => Poll::Ready(out.take().ok_or(WorkerLost)),
            Batch::Sent(rx) => Pin::new(rx).poll(cx).map(|r| r.map_err(|_| WorkerLost)),
        }
    }
}

/// A watch event's object as raw JSON text, not yet decoded: the cheap `T` of kube's
/// `request_events::<T>`, decoded into `K` (or encoded for the lean mode, I7) later on the
/// pool (`decode_event`, `encode_event`).
///
/// When the event's `type` comes before its `object` (as every API server sends it), serde_json
/// hands over the object's text as it scans it. When the object comes first, serde buffers it
/// before it knows the variant; it is then rebuilt from the buffer (slower, same result).
#[derive(Clone, Debug)]
pub struct RawJson(pub(crate) Box<RawValue>);

impl RawJson {
    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }
}

impl From<Box<RawValue>> for RawJson {
    fn from(raw: Box<RawValue>) -> Self {
        RawJson(raw)
    }
}

impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(Buffered(d)).map(RawJson)
    }
}

/// A deserializer that passes serde_json's raw-value request through, and answers it from a
/// buffered value (serde's adjacently tagged `Content`) by rendering that value back to JSON.
struct Buffered<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Buffered<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_newtype_struct(
            name,
            BufferedVisitor {
                name,
                inner: visitor,
            },
        )
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

struct BufferedVisitor<V> {
    name: &'static str,
    inner: V,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for BufferedVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.expecting(f)
    }

    /// serde_json's raw value: a one-entry map of the text.
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(map)
    }

    /// A buffered value: rendered back to JSON text, then handed over as serde_json would.
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        self.inner.visit_map(RawEntry {
            key: Some(self.name),
            text: Some(value.to_string()),
            _error: std::marker::PhantomData,
        })
    }
}

/// The one-entry map serde_json's raw value is read from: the raw-value token, then the text.
struct RawEntry<E> {
    key: Option<&'static str>,
    text: Option<String>,
    _error: std::marker::PhantomData<E>,
}

impl<'de, E: serde::de::Error> MapAccess<'de> for RawEntry<E> {
    type Error = E;

    fn next_key_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, E> {
        match self.key.take() {
            Some(k) => seed
                .deserialize(serde::de::value::BorrowedStrDeserializer::new(k))
                .map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, E> {
        let text = self.text.take().unwrap_or_default();
        seed.deserialize(serde::de::value::StringDeserializer::new(text))
    }
}

/// One line of a watch stream, decoded exactly as kube-client 5 does (`Client::request_events`):
/// `None` for a line kube skips (cut at the end of the stream), a `Status` read from a line
/// that is not an event (an unknown type, an object of the wrong shape: `Error::Api`, code 0
/// unless the line says otherwise), else the decode error.
pub(crate) fn kube_line<K: DeserializeOwned>(
    line: &str,
) -> Option<Result<KubeWatchEvent<K>, kube::Error>> {
    match serde_json::from_str::<KubeWatchEvent<K>>(line) {
        Ok(ev) => Some(Ok(ev)),
        Err(e) if e.is_eof() => None,
        Err(e) => match serde_json::from_str::<Status>(line) {
            Ok(status) => Some(Err(kube::Error::Api(status.boxed()))),
            Err(_) => Some(Err(kube::Error::SerdeError(e))),
        },
    }
}

/// Builds the typed event of a decoded object.
type Wrap<K> = fn(K) -> KubeWatchEvent<K>;

/// One line of a watch body, decoded into `K` in one pass (on a decode thread): what kube's
/// own watch decoder ([`kube_line`]) gives for that line, `None` for a line kube skips.
///
/// The whole event is read by [`kinformer::exact`] at once, so an event costs one decode, not
/// a scan for the object's end on the reflector's thread and a decode of the object after it.
/// A line that does not decode so (a Status, an unknown type, an object of the wrong shape,
/// a cut line, bytes that are not UTF-8) is read again by kube's rules, so the outcome is
/// the one kube would have returned.
pub(crate) fn decode_line<K: DeserializeOwned>(
    line: Result<bytes::Bytes, kube::Error>,
) -> Option<Result<KubeWatchEvent<K>, kube::Error>> {
    let line = match line {
        Ok(l) => l,
        Err(e) => return Some(Err(e)),
    };
    // kube's `LinesCodec` drops a `\r` before the `\n`.
    let text = line.strip_suffix(b"\r").unwrap_or(&line);
    if let Ok(ev) = kinformer::exact::from_slice::<KubeWatchEvent<K>>(text) {
        return Some(Ok(ev));
    }
    match std::str::from_utf8(text) {
        Ok(text) => kube_line::<K>(text),
        // kube's `LinesCodec` fails on such a line, with this text: a read error.
        Err(_) => Some(Err(kube::Error::ReadEvents(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "Unable to decode input as UTF8",
        )))),
    }
}

/// Maps `items` through `f` in batches of what had already arrived, on `pool` (inline for a
/// batch of one), keeping their order: `buffered` yields each batch's output in the order the
/// batches were sent (P8). `None`s (lines kube skips) are dropped.
fn in_order<T, U>(
    items: impl Stream<Item = T> + Send + 'static,
    pool: DecodePool,
    f: fn(T) -> Option<Result<U, kube::Error>>,
) -> BoxStream<'static, Result<U, kube::Error>>
where
    T: Send + 'static,
    U: Send + 'static,
{
    items
        .ready_chunks(WATCH_BATCH)
        .map(move |batch| pool.decode(batch, f))
        .buffered(WATCH_IN_FLIGHT)
        .flat_map(|decoded| {
            let out = match decoded {
                Ok(events) => events,
                Err(lost) => vec![Some(Err(kube::Error::Service(Box::new(lost))))],
            };
            futures::stream::iter(out.into_iter().flatten())
        })
        .boxed()
}

/// A watch body's lines ([`watch_lines`]) → typed events in the same order, each line decoded
/// once ([`decode_line`]) in batches of what had already arrived, on `pool`, its object put
/// in its `Arc` there, as the pipeline carries it ([`Listed::Typed`]).
pub(crate) fn decode_listed_watch<K, S>(
    lines: S,
    pool: DecodePool,
) -> BoxStream<'static, Result<KubeWatchEvent<Listed<K>>, kube::Error>>
where
    K: DeserializeOwned + Send + Sync + 'static,
    S: Stream<Item = Result<bytes::Bytes, kube::Error>> + Send + 'static,
{
    fn decode<K: DeserializeOwned>(
        line: Result<bytes::Bytes, kube::Error>,
    ) -> Option<Result<KubeWatchEvent<Listed<K>>, kube::Error>> {
        decode_line::<K>(line).map(|r| r.map(listed_event))
    }
    in_order(lines, pool, decode::<K>)
}

/// A [`listed_event`]'s object out of its `Arc` again (moved, as the `Arc` is the only one).
pub(crate) fn unlisted_event<K: Clone>(
    ev: KubeWatchEvent<Listed<K>>,
) -> Result<KubeWatchEvent<K>, kube::Error> {
    let typed = |o: Listed<K>| match o {
        Listed::Typed(o) => Ok(Arc::unwrap_or_clone(o)),
        Listed::Lean(_) => Err(kube::Error::SerdeError(serde_json::Error::custom(
            "a lean object in a typed watch",
        ))),
    };
    Ok(match ev {
        KubeWatchEvent::Added(o) => KubeWatchEvent::Added(typed(o)?),
        KubeWatchEvent::Modified(o) => KubeWatchEvent::Modified(typed(o)?),
        KubeWatchEvent::Deleted(o) => KubeWatchEvent::Deleted(typed(o)?),
        KubeWatchEvent::Bookmark(b) => KubeWatchEvent::Bookmark(b),
        KubeWatchEvent::Error(e) => KubeWatchEvent::Error(e),
    })
}

/// A typed watch event as the pipeline carries it: its object in an `Arc` ([`Listed::Typed`]).
pub fn listed_event<K>(ev: KubeWatchEvent<K>) -> KubeWatchEvent<Listed<K>> {
    match ev {
        KubeWatchEvent::Added(o) => KubeWatchEvent::Added(Listed::Typed(Arc::new(o))),
        KubeWatchEvent::Modified(o) => KubeWatchEvent::Modified(Listed::Typed(Arc::new(o))),
        KubeWatchEvent::Deleted(o) => KubeWatchEvent::Deleted(Listed::Typed(Arc::new(o))),
        KubeWatchEvent::Bookmark(b) => KubeWatchEvent::Bookmark(b),
        KubeWatchEvent::Error(e) => KubeWatchEvent::Error(e),
    }
}

/// A protobuf failure as kube reports the like from JSON: broken bytes (envelope, wire
/// format, framing) fail the request as a read error (the watch ends and is restarted, a LIST
/// fails and is retried, R8); well-formed data of another type is a serde data error (R5: the
/// reflector skips such a watch event, as it skips JSON of the wrong shape).
pub(crate) fn protobuf_error(e: ProtobufError) -> kube::Error {
    if e.is_malformed() {
        kube::Error::ReadEvents(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    } else {
        kube::Error::SerdeError(serde_json::Error::custom(e))
    }
}

/// A bookmark's object, as much of it as kube's `Bookmark` keeps.
#[derive(Deserialize)]
struct BookmarkObject {
    metadata: kube::core::watch::BookmarkMeta,
}

/// Decodes one protobuf watch frame into `K` (on a decode thread): the event kube's JSON
/// decoder would have given for the same event. An event of an unknown type is a `Status` of
/// code 0, as from JSON (the reflector skips it).
pub(crate) fn decode_proto_event<K: DeserializeOwned>(
    frame: Result<Vec<u8>, kube::Error>,
) -> Option<Result<KubeWatchEvent<K>, kube::Error>> {
    let frame = match frame {
        Ok(f) => f,
        Err(e) => return Some(Err(e)),
    };
    let ev = match protobuf::watch_event(&frame) {
        Ok(ev) => ev,
        Err(e) => return Some(Err(protobuf_error(e))),
    };
    let wrap: Wrap<K> = match ev.event_type {
        "ADDED" => KubeWatchEvent::Added,
        "MODIFIED" => KubeWatchEvent::Modified,
        "DELETED" => KubeWatchEvent::Deleted,
        "BOOKMARK" => {
            let bookmark = protobuf::envelope(ev.object).and_then(|u| {
                let b: BookmarkObject = protobuf::decode(ev.object)?;
                Ok(kube::core::watch::Bookmark {
                    types: kube::api::TypeMeta {
                        api_version: u.api_version.to_string(),
                        kind: u.kind.to_string(),
                    },
                    metadata: b.metadata,
                })
            });
            return Some(
                bookmark
                    .map(KubeWatchEvent::Bookmark)
                    .map_err(protobuf_error),
            );
        }
        "ERROR" => {
            return Some(
                protobuf::decode::<Status>(ev.object)
                    .map(|s| KubeWatchEvent::Error(Box::new(s)))
                    .map_err(protobuf_error),
            );
        }
        other => {
            let mut s = Status::failure(
                &format!("watch event of unknown type {other:?}"),
                "UnknownEventType",
            );
            s.code = 0;
            return Some(Err(kube::Error::Api(s.boxed())));
        }
    };
    Some(
        protobuf::decode::<K>(ev.object)
            .map(wrap)
            .map_err(protobuf_error),
    )
}

/// Protobuf watch frames → typed events in the same order, decoded in batches of what had
/// already arrived, on `pool` (inline for a batch of one), as [`decode_watch`] does for JSON.
pub(crate) fn decode_proto_watch<K, S>(
    frames: S,
    pool: DecodePool,
) -> BoxStream<'static, Result<KubeWatchEvent<Listed<K>>, kube::Error>>
where
    K: DeserializeOwned + Send + Sync + 'static,
    S: Stream<Item = Result<Vec<u8>, kube::Error>> + Send + 'static,
{
    fn decode<K: DeserializeOwned>(
        frame: Result<Vec<u8>, kube::Error>,
    ) -> Option<Result<KubeWatchEvent<Listed<K>>, kube::Error>> {
        decode_proto_event::<K>(frame).map(|r| r.map(listed_event))
    }
    in_order(frames, pool, decode::<K>)
}

/// Whether a body read error is the end of a watch kube resumes from (an unexpected EOF of
/// the chunked decoder or the TLS stream), rather than a failure.
fn is_eof(e: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::UnexpectedEof
        {
            return true;
        }
        if err.to_string().contains("unexpected EOF during chunk") {
            return true;
        }
        source = err.source();
    }
    false
}

/// A watch body's bytes → its protobuf frames ([`protobuf::FrameReader`]). A frame over the
/// limit, or a stream cut inside a frame, ends the stream with a read error (it cannot be
/// resynchronised); an unexpected EOF between frames ends it quietly, as kube's JSON watch does.
pub(crate) fn proto_frames<S>(body: S) -> impl Stream<Item = Result<Vec<u8>, kube::Error>> + Send
where
    S: Stream<Item = Result<bytes::Bytes, kube::Error>> + Send + Unpin,
{
    let state = Some((body, protobuf::FrameReader::default()));
    futures::stream::unfold(state, |state| async move {
        let (mut body, mut reader) = state?;
        loop {
            match reader.next_frame() {
                Ok(Some(frame)) => return Some((Ok(frame), Some((body, reader)))),
                Ok(None) => {}
                Err(e) => return Some((Err(protobuf_error(e)), None)),
            }
            match body.next().await {
                Some(Ok(chunk)) => reader.push(&chunk),
                Some(Err(e)) if is_eof(&e) => return None,
                Some(Err(e)) => return Some((Err(e), None)),
                None => {
                    return reader
                        .finish()
                        .err()
                        .map(|e| (Err(protobuf_error(e)), None));
                }
            }
        }
    })
}

/// The longest watch line [`watch_lines`] buffers: far above any object an API server stores
/// (etcd's default request limit is 1.5 MiB), far below what would hurt the process. kube's
/// `LinesCodec` has no limit; this is the one place kinformer reads a watch differently.
pub(crate) const MAX_WATCH_LINE: usize = 64 << 20;

/// A watch body's bytes → its lines, cut as kube's `Client::request_events` cuts them
/// (tokio-util's `LinesCodec`): the bytes before each `\n`, shared with the body's buffer
/// rather than copied; what is left at the end is a last line. Lines of JSON whitespace alone
/// are dropped here (kube reads them as a cut line and skips them). A read error ends the
/// stream: quietly for an unexpected EOF (kube resumes such a watch), else as
/// `Error::ReadEvents`, as kube reports it. A line longer than [`MAX_WATCH_LINE`] ends it with
/// kube's `LinesCodecMaxLineLengthExceeded`.
pub(crate) fn watch_lines<S>(
    body: S,
) -> impl Stream<Item = Result<bytes::Bytes, kube::Error>> + Send
where
    S: Stream<Item = Result<bytes::Bytes, kube::Error>> + Send + Unpin,
{
    /// The body, what it gave that is not yet a line, and how much of that holds no `\n`.
    type State<S> = (S, bytes::BytesMut, usize);
    fn blank(line: &[u8]) -> bool {
        line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r'))
    }
    let state: Option<State<S>> = Some((body, bytes::BytesMut::new(), 0));
    futures::stream::unfold(state, |state| async move {
        let (mut body, mut buf, mut scanned) = state?;
        loop {
            if let Some(i) = memchr::memchr(b'\n', &buf[scanned..]) {
                let mut line = buf.split_to(scanned + i + 1);
                line.truncate(scanned + i);
                scanned = 0;
                if blank(&line) {
                    continue;
                }
                return Some((Ok(line.freeze()), Some((body, buf, scanned))));
            }
            scanned = buf.len();
            if scanned > MAX_WATCH_LINE {
                // A line this long is no object an API server stores: end the watch (it is
                // reopened after the reflector's backoff) rather than buffer without a bound.
                return Some((Err(kube::Error::LinesCodecMaxLineLengthExceeded), None));
            }
            match body.next().await {
                Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
                Some(Err(e)) if is_eof(&e) => return None,
                Some(Err(e)) => {
                    let e = kube::Error::ReadEvents(std::io::Error::other(e));
                    return Some((Err(e), None));
                }
                None if blank(&buf) => return None,
                None => return Some((Ok(buf.freeze()), None)),
            }
        }
    })
}

/// Encodes one raw watch event for the lean mode (I7), on a decode thread: the object's
/// metadata parsed and its bytes compressed by the informer's [`LeanState`]; never decoded
/// into `K`. An object whose metadata does not parse is a serde data error, as kube reports an
/// object of the wrong shape (the reflector skips it, R5).
pub(crate) fn encode_event<K>(
    (state, ev): (
        Arc<LeanState<K>>,
        Result<KubeWatchEvent<RawJson>, kube::Error>,
    ),
) -> Option<Result<KubeWatchEvent<Listed<K>>, kube::Error>> {
    let (raw, wrap): (RawJson, Wrap<Listed<K>>) = match ev {
        Ok(KubeWatchEvent::Added(r)) => (r, KubeWatchEvent::Added),
        Ok(KubeWatchEvent::Modified(r)) => (r, KubeWatchEvent::Modified),
        Ok(KubeWatchEvent::Deleted(r)) => (r, KubeWatchEvent::Deleted),
        Ok(KubeWatchEvent::Bookmark(b)) => return Some(Ok(KubeWatchEvent::Bookmark(b))),
        Ok(KubeWatchEvent::Error(s)) => return Some(Ok(KubeWatchEvent::Error(s))),
        Err(e) => return Some(Err(e)),
    };
    Some(match state.encode(raw.get().as_bytes()) {
        Ok(obj) => Ok(wrap(Listed::Lean(obj))),
        Err(e) => Err(kube::Error::SerdeError(serde_json::Error::custom(e))),
    })
}

/// kube's raw watch events → lean events ([`encode_event`]) in the same order, in batches of
/// what had already arrived, on `pool` (inline for a batch of one).
pub(crate) fn encode_watch<K, S>(
    events: S,
    pool: DecodePool,
    state: Arc<LeanState<K>>,
) -> BoxStream<'static, Result<KubeWatchEvent<Listed<K>>, kube::Error>>
where
    K: Send + Sync + 'static,
    S: Stream<Item = Result<KubeWatchEvent<RawJson>, kube::Error>> + Send + 'static,
{
    events
        .ready_chunks(WATCH_BATCH)
        .map(move |batch| {
            let batch = batch.into_iter().map(|e| (Arc::clone(&state), e)).collect();
            pool.decode(batch, encode_event::<K>)
        })
        .buffered(WATCH_IN_FLIGHT)
        .flat_map(|encoded| {
            let out = match encoded {
                Ok(events) => events,
                Err(lost) => vec![Some(Err(kube::Error::Service(Box::new(lost))))],
            };
            futures::stream::iter(out.into_iter().flatten())
        })
        .boxed()
}

/// A lean encode's failure as kube reports the like: protobuf that is broken (envelope, wire
/// format) fails the request as a read error, exactly as the typed protobuf path
/// ([`protobuf_error`]); anything else (metadata of the wrong shape, a kind without schema) is
/// a serde data error (R5: the reflector skips such a watch event).
pub(crate) fn lean_error(e: kinformer::lean::EncodeError) -> kube::Error {
    match e {
        kinformer::lean::EncodeError::Meta(kinformer::lean::MetaError::Protobuf(p)) => {
            protobuf_error(p)
        }
        e => kube::Error::SerdeError(serde_json::Error::custom(e)),
    }
}

/// Encodes one protobuf watch frame for the lean mode (I7), on a decode thread: the object's
/// message (inside its `runtime.Unknown` envelope) stored as it is, its metadata read from it
/// ([`LeanState::encode_protobuf`]); never decoded into `K`. Bookmarks, errors and unknown
/// event types as the typed path reads them ([`decode_proto_event`]).
pub(crate) fn encode_proto_event<K: DeserializeOwned>(
    (state, frame): (Arc<LeanState<K>>, Result<Vec<u8>, kube::Error>),
) -> Option<Result<KubeWatchEvent<Listed<K>>, kube::Error>> {
    let frame = match frame {
        Ok(f) => f,
        Err(e) => return Some(Err(e)),
    };
    let ev = match protobuf::watch_event(&frame) {
        Ok(ev) => ev,
        Err(e) => return Some(Err(protobuf_error(e))),
    };
    let wrap: Wrap<Listed<K>> = match ev.event_type {
        "ADDED" => KubeWatchEvent::Added,
        "MODIFIED" => KubeWatchEvent::Modified,
        "DELETED" => KubeWatchEvent::Deleted,
        // Not objects: read as the typed path reads them (`K` is never built for these).
        _ => {
            return decode_proto_event::<serde::de::IgnoredAny>(Ok(frame)).map(|r| {
                r.and_then(|ev| match ev {
                    KubeWatchEvent::Bookmark(b) => Ok(KubeWatchEvent::Bookmark(b)),
                    KubeWatchEvent::Error(s) => Ok(KubeWatchEvent::Error(s)),
                    _ => Err(kube::Error::SerdeError(serde_json::Error::custom(
                        "an object event read as another",
                    ))),
                })
            });
        }
    };
    let encoded = protobuf::envelope(ev.object)
        .map_err(protobuf_error)
        .and_then(|u| {
            state
                .encode_protobuf(u.raw, (u.api_version, u.kind), true)
                .map_err(lean_error)
        });
    Some(encoded.map(|raw| wrap(Listed::Lean(raw))))
}

/// Protobuf watch frames → lean events ([`encode_proto_event`]) in the same order, in batches
/// of what had already arrived, on `pool` (inline for a batch of one).
pub(crate) fn encode_proto_watch<K, S>(
    frames: S,
    pool: DecodePool,
    state: Arc<LeanState<K>>,
) -> BoxStream<'static, Result<KubeWatchEvent<Listed<K>>, kube::Error>>
where
    K: DeserializeOwned + Send + Sync + 'static,
    S: Stream<Item = Result<Vec<u8>, kube::Error>> + Send + 'static,
{
    in_order(
        frames.map(move |f| (Arc::clone(&state), f)),
        pool,
        encode_proto_event::<K>,
    )
}

/// One JSON line of a watch body for the lean mode, on a decode thread: split by kube's rules
/// into its raw object ([`kube_line`] with [`RawJson`]), then encoded ([`encode_event`]).
fn encode_line<K>(
    (state, line): (Arc<LeanState<K>>, Result<bytes::Bytes, kube::Error>),
) -> Option<Result<KubeWatchEvent<Listed<K>>, kube::Error>> {
    let ev = match line {
        Ok(l) => {
            let text = l.strip_suffix(b"\r").unwrap_or(&l);
            match std::str::from_utf8(text) {
                Ok(text) => kube_line::<RawJson>(text)?,
                Err(_) => Err(kube::Error::ReadEvents(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "Unable to decode input as UTF8",
                ))),
            }
        }
        Err(e) => Err(e),
    };
    encode_event((state, ev))
}

/// A watch body's JSON lines ([`watch_lines`]) → lean events in the same order, on `pool`: the
/// lean mode's read of a JSON answer to a request that asked for protobuf.
pub(crate) fn encode_json_watch<K, S>(
    lines: S,
    pool: DecodePool,
    state: Arc<LeanState<K>>,
) -> BoxStream<'static, Result<KubeWatchEvent<Listed<K>>, kube::Error>>
where
    K: Send + Sync + 'static,
    S: Stream<Item = Result<bytes::Bytes, kube::Error>> + Send + 'static,
{
    in_order(
        lines.map(move |l| (Arc::clone(&state), l)),
        pool,
        encode_line::<K>,
    )
}

/// A pool of three threads for tests, whatever the machine or the process-wide setting.
#[cfg(test)]
pub(crate) fn test_pool() -> DecodePool {
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    DecodePool::new(Some(POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .expect("test pool")
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The typed events of [`decode_listed_watch`], out of their `Arc`s.
    fn decode_watch<K, S>(
        lines: S,
        pool: DecodePool,
    ) -> BoxStream<'static, Result<KubeWatchEvent<K>, kube::Error>>
    where
        K: DeserializeOwned + Clone + Send + Sync + 'static,
        S: Stream<Item = Result<bytes::Bytes, kube::Error>> + Send + 'static,
    {
        decode_listed_watch::<K, _>(lines, pool)
            .map(|e| e.and_then(unlisted_event))
            .boxed()
    }
    use k8s_openapi::api::core::v1::Pod;
    use proptest::prelude::*;

    /// Everything an outcome says, for comparing the raw path with kube's own.
    fn describe(r: Option<Result<KubeWatchEvent<Pod>, kube::Error>>) -> String {
        let json = |p: &Pod| serde_json::to_string(p).unwrap_or_default();
        match r {
            None => "line skipped".into(),
            Some(Ok(KubeWatchEvent::Added(p))) => format!("ADDED {}", json(&p)),
            Some(Ok(KubeWatchEvent::Modified(p))) => format!("MODIFIED {}", json(&p)),
            Some(Ok(KubeWatchEvent::Deleted(p))) => format!("DELETED {}", json(&p)),
            Some(Ok(KubeWatchEvent::Bookmark(b))) => format!(
                "BOOKMARK {} {:?}",
                b.metadata.resource_version, b.metadata.annotations
            ),
            Some(Ok(KubeWatchEvent::Error(s))) => format!("ERROR {s:?}"),
            Some(Err(kube::Error::Api(s))) => format!("api {s:?}"),
            Some(Err(kube::Error::SerdeError(e))) => format!("serde {:?} {e}", e.classify()),
            Some(Err(e)) => format!("other {e}"),
        }
    }

    /// The class of an outcome (what `translate` decides from): positions in error texts left out.
    fn class(r: Option<Result<KubeWatchEvent<Pod>, kube::Error>>) -> String {
        match r {
            Some(Err(kube::Error::SerdeError(e))) => format!("serde {:?}", e.classify()),
            other => describe(other),
        }
    }

    /// The pool's one-pass decode of a watch line.
    fn raw_path(line: &str) -> Option<Result<KubeWatchEvent<Pod>, kube::Error>> {
        decode_line::<Pod>(Ok(bytes::Bytes::copy_from_slice(line.as_bytes())))
    }

    /// kube's reading of `line` with the object left raw (the lean mode's path), then the
    /// object decoded from that text.
    fn raw_object_path(line: &str) -> Option<Result<KubeWatchEvent<Pod>, kube::Error>> {
        let decode = |r: RawJson| serde_json::from_str::<Pod>(r.get());
        Some(
            match kube_line::<RawJson>(line)? {
                Ok(KubeWatchEvent::Added(r)) => decode(r).map(KubeWatchEvent::Added),
                Ok(KubeWatchEvent::Modified(r)) => decode(r).map(KubeWatchEvent::Modified),
                Ok(KubeWatchEvent::Deleted(r)) => decode(r).map(KubeWatchEvent::Deleted),
                Ok(KubeWatchEvent::Bookmark(b)) => Ok(KubeWatchEvent::Bookmark(b)),
                Ok(KubeWatchEvent::Error(s)) => Ok(KubeWatchEvent::Error(s)),
                Err(e) => return Some(Err(e)),
            }
            .map_err(kube::Error::SerdeError),
        )
    }

    fn pod(name: &str, rv: u64) -> String {
        json_pod(name, rv).to_string()
    }

    fn json_pod(name: &str, rv: u64) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "n", "resourceVersion": rv.to_string(),
                "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}
        })
    }

    fn line(ty: &str, obj: &str) -> String {
        format!(r#"{{"type":"{ty}","object":{obj}}}"#)
    }

    fn rv(r: Option<Result<KubeWatchEvent<Pod>, kube::Error>>) -> Option<u64> {
        match r {
            Some(Ok(
                KubeWatchEvent::Added(p) | KubeWatchEvent::Modified(p) | KubeWatchEvent::Deleted(p),
            )) => p.metadata.resource_version.and_then(|s| s.parse().ok()),
            _ => None,
        }
    }

    fn watch_on(pool: DecodePool, lines: &[String]) -> Vec<String> {
        let raw: Vec<_> = lines
            .iter()
            .map(|l| Ok(bytes::Bytes::copy_from_slice(l.as_bytes())))
            .collect();
        let stream = decode_watch::<Pod, _>(futures::stream::iter(raw), pool);
        futures::executor::block_on(stream.collect::<Vec<_>>())
            .into_iter()
            .map(|r| describe(Some(r)))
            .collect()
    }

    /// P8: thousands of events of varied sizes, decoded in parallel batches, come out in their
    /// input order; the same as kube's own line-by-line decode.
    #[test]
    fn p8_watch_batches_decoded_on_the_pool_keep_the_servers_order() {
        let lines: Vec<String> = (0..3000u64)
            .map(|i| {
                let mut p = json_pod(&format!("p{}", i % 5), i + 1);
                // Varied sizes, so that decode times differ and threads finish out of order.
                p["metadata"]["annotations"] =
                    serde_json::json!({"pad": "x".repeat((i as usize * 37) % 4000)});
                line(
                    ["ADDED", "MODIFIED", "DELETED"][(i % 3) as usize],
                    &p.to_string(),
                )
            })
            .collect();
        let direct: Vec<String> = lines
            .iter()
            .map(|l| describe(kube_line::<Pod>(l)))
            .collect();
        assert_eq!(watch_on(test_pool(), &lines), direct);
        assert_eq!(watch_on(DecodePool::inline(), &lines), direct);
        // And the order is the RVs' (the check above would pass on a reordered `direct` too
        // only if kube's decode reordered, which it does not).
        let rvs: Vec<Option<u64>> = lines.iter().map(|l| rv(raw_path(l))).collect();
        assert!(rvs.windows(2).all(|w| w[0] < w[1]));
    }

    /// A bad object in the middle of a batch: that event alone gets the error kube gives for
    /// it (here a Status of code 0, as kube reads an undecodable event line), at its position;
    /// the events around it decode.
    #[test]
    fn r5_a_bad_object_in_the_middle_of_a_batch_fails_alone_and_in_place() {
        let lines = vec![
            line("ADDED", &pod("a", 1)),
            line("MODIFIED", &pod("a", 2)),
            line(
                "MODIFIED",
                r#"{"metadata":{"name":"a","resourceVersion":5}}"#,
            ),
            line("BOGUS", &pod("a", 3)),
            line("MODIFIED", &pod("a", 4)),
            r#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}"#.into(),
            line("BOOKMARK", r#"{"metadata":{"resourceVersion":"9"}}"#),
            line("DELETED", &pod("a", 10)),
        ];
        let direct: Vec<String> = lines
            .iter()
            .map(|l| describe(kube_line::<Pod>(l)))
            .collect();
        let pooled = watch_on(test_pool(), &lines);
        assert_eq!(pooled, direct);
        assert!(pooled[2].starts_with("api Status"), "{}", pooled[2]);
        assert!(pooled[3].starts_with("api Status"), "{}", pooled[3]);
        assert!(pooled[4].starts_with("MODIFIED"), "{}", pooled[4]);
    }

    /// An event whose object comes before its type (no API server sends that, but JSON allows
    /// it): decoded as kube decodes it; for the lean mode's raw path serde buffers the object,
    /// and the raw object is rebuilt from the buffer.
    #[test]
    fn r3_object_before_type_decodes_as_kube_decodes_it() {
        for obj in [
            pod("a", 7),
            r#"{"metadata":{"name":"a","resourceVersion":5}}"#.to_string(),
            r#"{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","ports":[{"containerPort":1.5}]}]}}"#.to_string(),
        ] {
            let l = format!(r#"{{"object":{obj},"type":"MODIFIED"}}"#);
            assert_eq!(
                class(raw_path(&l)),
                class(kube_line::<Pod>(&l)),
                "{l}"
            );
        }
        // The lean mode's raw object, rebuilt from serde's buffer, is the object's text.
        let l = format!(r#"{{"object":{},"type":"ADDED"}}"#, pod("b", 8));
        assert_eq!(rv(raw_object_path(&l)), Some(8));
        let l = format!(r#"{{"object":{},"type":"ADDED"}}"#, pod("b", 8));
        assert_eq!(rv(raw_path(&l)), Some(8));
    }

    /// A decode thread that panics loses its batch: the stream yields a typed error in its
    /// place instead of hanging or aborting.
    #[test]
    fn s1_a_panicking_decode_thread_is_a_typed_error() {
        fn boom(_: u32) -> u32 {
            panic!("decode panicked")
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .panic_handler(|_| {})
            .build()
            .expect("pool");
        let pool: &'static rayon::ThreadPool = Box::leak(Box::new(pool));
        let batch = DecodePool::new(Some(pool)).decode(vec![1, 2, 3], boom);
        assert!(matches!(batch.wait(), Err(WorkerLost)));
    }

    fn event_line() -> impl Strategy<Value = String> {
        let ty = prop::sample::select(vec![
            "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "BOGUS", "added",
        ]);
        let obj = prop_oneof![
            (0u64..1000).prop_map(|rv| pod("p", rv)),
            Just(r#"{"metadata":{"name":"a","resourceVersion":5}}"#.to_string()),
            Just(r#"{"metadata":{"resourceVersion":"3","annotations":{"k8s.io/initial-events-end":"true"}}}"#.to_string()),
            Just(r#"{"kind":"Status","code":410,"message":"gone"}"#.to_string()),
            Just(r#"{"spec":{"containers":"no"}}"#.to_string()),
            Just("[1,2]".to_string()),
            Just("null".to_string()),
            Just("\"text\"".to_string()),
            Just("{}".to_string()),
        ];
        // Keys besides `type` and `object` that are not `Status` fields. (kube drops extra keys
        // when it reads the envelope, so an event line that also carries Status fields, such as
        // `"code":500`, and whose object does not decode is read as a Status of code 0 here,
        // where kube's own decode read that code: no API server writes such lines.)
        let extra = prop::sample::select(vec!["", r#","other":[1]"#, r#","k":{"a":null}"#]);
        (ty, obj, any::<bool>(), extra).prop_map(|(ty, obj, type_first, extra)| {
            if type_first {
                format!(r#"{{"type":"{ty}","object":{obj}{extra}}}"#)
            } else {
                format!(r#"{{"object":{obj},"type":"{ty}"{extra}}}"#)
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Any well-formed event line: the raw path gives what kube's own decode gives.
        #[test]
        fn r5_raw_path_decodes_any_event_line_as_kube_does(l in event_line()) {
            prop_assert_eq!(class(raw_path(&l)), class(kube_line::<Pod>(&l)), "{}", l);
        }

        /// Mutated lines never panic; those still JSON are read as kube reads them. (For lines
        /// that are not JSON kube itself fails on the envelope: a syntax error there is a
        /// decode error even where an object shape error came first in kube's own decode.)
        #[test]
        fn r5_raw_path_on_mutated_lines(
            l in event_line(),
            at in any::<prop::sample::Index>(),
            byte in prop::sample::select(b"{}[]\",:0nt\\ ".to_vec()),
        ) {
            let mut bytes = l.into_bytes();
            let i = at.index(bytes.len());
            bytes[i] = byte;
            if let Ok(l) = String::from_utf8(bytes) {
                let raw = class(raw_path(&l));
                if serde_json::from_str::<serde::de::IgnoredAny>(&l).is_ok() {
                    prop_assert_eq!(raw, class(kube_line::<Pod>(&l)), "{}", l);
                }
            }
        }
    }

    /// The protobuf watch path (R12): frames split from a body in chunks of any size, decoded
    /// into the events kube's JSON decoder gives for the same events, typed errors for broken
    /// streams; and the JSON lines of a received body read as kube reads them.
    mod protobuf_watch {
        use super::*;
        use futures::executor::block_on;

        fn body(
            bytes: Vec<u8>,
            chunk: usize,
        ) -> impl Stream<Item = Result<bytes::Bytes, kube::Error>> + Send + Unpin {
            let chunks: Vec<Result<bytes::Bytes, kube::Error>> = bytes
                .chunks(chunk)
                .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
                .collect();
            futures::stream::iter(chunks)
        }

        fn events(bytes: Vec<u8>, chunk: usize) -> Vec<String> {
            let frames = proto_frames(body(bytes, chunk));
            let evs = decode_proto_watch::<Pod, _>(frames, test_pool())
                .map(|e| e.and_then(unlisted_event));
            block_on(evs.map(|e| describe(Some(e))).collect::<Vec<_>>())
        }

        fn status_410() -> serde_json::Value {
            serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                "message": "too old resource version", "reason": "Expired", "code": 410})
        }

        #[test]
        fn r12_frames_decode_to_the_events_json_gives() {
            let mut stream = Vec::new();
            let mut lines = Vec::new();
            for (i, ty) in ["ADDED", "MODIFIED", "DELETED"].iter().enumerate() {
                let p = json_pod(&format!("p{i}"), i as u64 + 1);
                stream.extend(protobuf::encode_watch_frame(ty, &p).unwrap());
                lines.push(line(ty, &p.to_string()));
            }
            let bookmark = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"resourceVersion": "9", "annotations": {"k8s.io/initial-events-end": "true"}}});
            stream.extend(protobuf::encode_watch_frame("BOOKMARK", &bookmark).unwrap());
            lines.push(line("BOOKMARK", &bookmark.to_string()));
            stream.extend(protobuf::encode_watch_frame("ERROR", &status_410()).unwrap());
            lines.push(line("ERROR", &status_410().to_string()));
            let want: Vec<String> = lines.iter().map(|l| describe(raw_path(l))).collect();
            for chunk in [1, 5, 64, 1 << 20] {
                assert_eq!(events(stream.clone(), chunk), want, "chunks of {chunk}");
            }
        }

        #[test]
        fn r12_broken_streams_are_read_errors_and_other_kinds_are_skipped() {
            let p = json_pod("p", 1);
            let good = protobuf::encode_watch_frame("ADDED", &p).unwrap();
            // Cut inside the second frame: one event, then a read error (not a quiet end).
            let mut cut = good.clone();
            cut.extend_from_slice(&good[..good.len() / 2]);
            let got = events(cut, 7);
            assert_eq!(got.len(), 2, "{got:?}");
            assert!(
                got[1].starts_with("other Error reading events stream"),
                "{got:?}"
            );
            // A JSON line where a frame should be: its first bytes as a length are too large.
            let mut json = good.clone();
            json.extend_from_slice(line("ADDED", &pod("q", 2)).as_bytes());
            let got = events(json, 3);
            assert_eq!(got.len(), 2);
            assert!(got[1].contains("larger than the limit"), "{got:?}");
            // A frame that is not a WatchEvent, and an object with a wrong magic.
            let garbage = [0u8, 0, 0, 3, 0xff, 0xff, 0xff].to_vec();
            assert!(events(garbage, 1)[0].starts_with("other"));
            // Another kind (R5): a serde data error, which the reflector skips.
            let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
            let other = protobuf::encode_watch_frame("ADDED", &cm).unwrap();
            let got = events(other, 4);
            assert!(got[0].starts_with("serde Data"), "{got:?}");
            // An unknown event type: a Status of code 0, as kube gives for JSON.
            let odd = protobuf::encode_watch_frame("BOGUS", &p).unwrap();
            assert!(events(odd, 4)[0].contains("code: 0"));
        }

        #[test]
        fn r12_json_lines_of_a_received_body_read_as_kube_reads_them() {
            let ls = [
                line("ADDED", &pod("a", 1)),
                String::new(),
                line("MODIFIED", &pod("a", 2)),
                r#"{"kind":"Status","code":500,"message":"boom"}"#.to_string(),
                line("DELETED", &pod("a", 3)),
            ];
            let text = ls.join("\n");
            let want: Vec<String> = ls
                .iter()
                .filter_map(|l| raw_path(l))
                .map(|e| describe(Some(e)))
                .collect();
            for chunk in [1, 9, 4096] {
                let evs = watch_lines(body(text.clone().into_bytes(), chunk))
                    .filter_map(|e| futures::future::ready(decode_line::<Pod>(e)));
                let got: Vec<String> = block_on(evs.map(|e| describe(Some(e))).collect());
                assert_eq!(got, want, "chunks of {chunk}");
            }
        }

        /// Lines are cut as kube's `LinesCodec` cuts them: `\r\n` endings, blank lines, a
        /// last line without its `\n`; a line that is not UTF-8 is a read error (kube's codec
        /// fails on it); a body error ends the stream, quietly when it is an unexpected EOF.
        #[test]
        fn r12_watch_lines_cut_as_kubes_lines_codec() {
            let text = format!(
                "{}\r\n \t\r\n\n{}\n{}",
                line("ADDED", &pod("a", 1)),
                line("MODIFIED", &pod("a", 2)),
                line("DELETED", &pod("a", 3))
            );
            for chunk in [1, 2, 7, 100_000] {
                let evs = decode_watch::<Pod, _>(
                    watch_lines(body(text.clone().into_bytes(), chunk)),
                    test_pool(),
                );
                let got: Vec<Option<u64>> = block_on(evs.map(|e| rv(Some(e))).collect());
                assert_eq!(got, vec![Some(1), Some(2), Some(3)], "chunks of {chunk}");
            }
            let mut bad = line("ADDED", &pod("a\u{e9}", 1)).into_bytes();
            let at = bad
                .iter()
                .position(|b| *b == 0xc3)
                .expect("the two bytes of é");
            bad[at] = 0xff;
            let got = events_of_lines(bad);
            assert!(got[0].contains("Unable to decode input as UTF8"), "{got:?}");
            // A body error after one event: the event, then a read error, then nothing.
            let chunks = vec![
                Ok(bytes::Bytes::from(line("ADDED", &pod("a", 1)) + "\n")),
                Err(kube::Error::Service("reset".into())),
                Ok(bytes::Bytes::from(line("ADDED", &pod("a", 2)) + "\n")),
            ];
            let got: Vec<String> = block_on(
                decode_watch::<Pod, _>(watch_lines(futures::stream::iter(chunks)), test_pool())
                    .map(|e| describe(Some(e)))
                    .collect(),
            );
            assert_eq!(got.len(), 2, "{got:?}");
            assert!(
                got[1].starts_with("other Error reading events stream"),
                "{got:?}"
            );
            let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "cut");
            let chunks = vec![
                Ok(bytes::Bytes::from(line("ADDED", &pod("a", 1)) + "\n")),
                Err(kube::Error::ReadEvents(eof)),
            ];
            let got: Vec<String> = block_on(
                decode_watch::<Pod, _>(watch_lines(futures::stream::iter(chunks)), test_pool())
                    .map(|e| describe(Some(e)))
                    .collect(),
            );
            assert_eq!(got.len(), 1, "{got:?}");
        }

        /// A line that never ends is not buffered without a bound: past `MAX_WATCH_LINE` the
        /// watch ends with kube's line-length error.
        #[test]
        fn r12_a_watch_line_past_the_limit_ends_the_watch() {
            let chunks = vec![
                Ok(bytes::Bytes::from(line("ADDED", &pod("a", 1)) + "\n")),
                Ok(bytes::Bytes::from(vec![b' '; MAX_WATCH_LINE + 1])),
                Ok(bytes::Bytes::from(line("ADDED", &pod("a", 2)) + "\n")),
            ];
            let got: Vec<String> = block_on(
                decode_watch::<Pod, _>(watch_lines(futures::stream::iter(chunks)), test_pool())
                    .map(|e| describe(Some(e)))
                    .collect(),
            );
            assert_eq!(got.len(), 2, "{got:?}");
            assert!(
                got[1].contains("Error finding newline character"),
                "{got:?}"
            );
        }

        fn events_of_lines(bytes: Vec<u8>) -> Vec<String> {
            let evs = decode_watch::<Pod, _>(watch_lines(body(bytes, 3)), test_pool());
            block_on(evs.map(|e| describe(Some(e))).collect::<Vec<_>>())
        }

        proptest! {
            #[test]
            fn r12_any_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300), chunk in 1usize..40) {
                let _ = events(data.clone(), chunk);
                let _ = block_on(decode_watch::<Pod, _>(watch_lines(body(data, chunk)), test_pool()).collect::<Vec<_>>());
            }
        }
    }
}
