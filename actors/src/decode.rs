//! Decoding on more than one core, delivered in the server's order (docs/semantics.md P8, R3).
//!
//! serde_json into a k8s-openapi `Pod` costs ~47 µs per object of the benchmark's workload, so
//! one thread decodes at most ~21,000 objects a second. Here the reflector thread only *splits*
//! what arrives into raw JSON objects (kube's watch decoder with the cheap [`RawObject`] as the
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
    task::{Context, Poll},
};

use futures::{Stream, StreamExt, channel::oneshot, stream::BoxStream};
use kube::{api::WatchEvent as KubeWatchEvent, core::Status};
use rayon::iter::{IntoParallelIterator, ParallelIterator};
use serde::{
    Deserialize, Deserializer,
    de::{DeserializeOwned, DeserializeSeed, MapAccess, Visitor},
};
use serde_json::value::RawValue;

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

    /// Decodes everything inline, on the caller's thread.
    #[cfg(test)]
    pub(crate) fn inline() -> Self {
        DecodePool(None)
    }

    /// Whether batches go to other threads.
    pub(crate) fn is_parallel(&self) -> bool {
        self.0.is_some()
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
/// `request_events::<T>`, decoded into `K` later on the pool ([`decode_event`]).
///
/// When the event's `type` comes before its `object` (as every API server sends it), serde_json
/// hands over the object's text as it scans it. When the object comes first, serde buffers it
/// before it knows the variant; it is then rebuilt from the buffer (slower, same result).
#[derive(Clone, Debug)]
pub(crate) struct RawObject(pub(crate) Box<RawValue>);

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(Buffered(d)).map(RawObject)
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
        self.0
            .deserialize_newtype_struct(name, BufferedVisitor { name, inner: visitor })
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

/// Decodes one raw watch event into `K` (on a decode thread): what kube's own watch decoder
/// would have given for that event's line. `None`: kube would have skipped the line.
pub(crate) fn decode_event<K: DeserializeOwned>(
    ev: Result<KubeWatchEvent<RawObject>, kube::Error>,
) -> Option<Result<KubeWatchEvent<K>, kube::Error>> {
    let (tag, raw, wrap): (&str, RawObject, fn(K) -> KubeWatchEvent<K>) = match ev {
        Ok(KubeWatchEvent::Added(r)) => ("ADDED", r, KubeWatchEvent::Added),
        Ok(KubeWatchEvent::Modified(r)) => ("MODIFIED", r, KubeWatchEvent::Modified),
        Ok(KubeWatchEvent::Deleted(r)) => ("DELETED", r, KubeWatchEvent::Deleted),
        Ok(KubeWatchEvent::Bookmark(b)) => return Some(Ok(KubeWatchEvent::Bookmark(b))),
        Ok(KubeWatchEvent::Error(s)) => return Some(Ok(KubeWatchEvent::Error(s))),
        Err(e) => return Some(Err(e)),
    };
    match serde_json::from_str::<K>(raw.0.get()) {
        Ok(obj) => Some(Ok(wrap(obj))),
        // Not a `K`: the event's line, as the API server writes it, through kube's rules, so
        // the error (or Status) is the one kube would have returned for it.
        Err(_) => kube_line::<K>(&format!(
            r#"{{"type":"{tag}","object":{}}}"#,
            raw.0.get()
        )),
    }
}

/// kube's raw watch events → typed events in the same order, decoded in batches of what had
/// already arrived, on `pool` (inline for a batch of one).
pub(crate) fn decode_watch<K, S>(
    events: S,
    pool: DecodePool,
) -> BoxStream<'static, Result<KubeWatchEvent<K>, kube::Error>>
where
    K: DeserializeOwned + Send + 'static,
    S: Stream<Item = Result<KubeWatchEvent<RawObject>, kube::Error>> + Send + 'static,
{
    events
        .ready_chunks(WATCH_BATCH)
        .map(move |batch| pool.decode(batch, decode_event::<K>))
        // In order: `buffered` yields each batch's output in the order the batches were sent.
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
