//! Streaming decode of a LIST response (issue: "never hold a whole LIST response").
//!
//! kube's `Api::list` reads the whole body into one string and then decodes it into a
//! `Vec<K>`: for 50,000 pods that is ~240 MB of text plus a vector of large inline structs,
//! on top of the objects themselves. Here kube still makes the request (auth, TLS, errors:
//! [`kube::Client::request_stream`]); the body's chunks are handed over a small bounded
//! channel to a blocking thread where serde decodes the list one item at a time, straight
//! into an `Arc<K>`. Peak memory is the decoded objects plus a few chunks.

use std::{collections::VecDeque, io, sync::Arc};

use bytes::{Bytes, BytesMut};
use futures::{AsyncBufReadExt, io::AsyncBufRead};
use kinformer::{TraceId, lean::LazyObject};
use kube::api::{ListMeta, TypeMeta};
use serde::de::{DeserializeOwned, Error as _, IgnoredAny};
use tokio::sync::mpsc;

use crate::listwatch::decode::{Batch, DecodePool, WorkerLost};
pub use crate::listwatch::decode::{ItemCodec, Listed};

/// An admitted object: as the pipeline carries it, with its trace id.
pub type Item<K> = (Arc<LazyObject<K>>, TraceId);

/// Admits one decoded object (R5 check, transform, trace id) as it is decoded; `None` drops it.
/// The second argument is the type of the list it came in (`ConfigMapList`'s item type).
pub type Admit<K> = Box<dyn FnMut(Listed<K>, Option<&TypeMeta>) -> Option<Item<K>> + Send>;

/// A decoded list: its type, its metadata (resourceVersion, continue) and its items.
pub struct DecodedList<T> {
    /// `apiVersion`/`kind` of the list (e.g. `v1`, `PodList`).
    pub types: TypeMeta,
    /// The list's metadata.
    pub metadata: ListMeta,
    /// `metadata.shardInfo` (KEP-5866), which kube's `ListMeta` does not have: present when the
    /// server filtered the list by the request's `shardSelector` (K1).
    pub shard_info: Option<ShardInfo>,
    /// What the shard check did to the items (K1; zero without one).
    pub shard_counts: ShardCounts,
    /// The admitted items, each decoded once into its own allocation.
    pub items: Vec<T>,
}

/// A list's `metadata.shardInfo` (KEP-5866): the server applied a shard selector.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
pub struct ShardInfo {
    /// The selector the server applied, in its canonical form.
    #[serde(default)]
    pub selector: String,
}

/// Whether a decoded LIST item is in the informer's shard (K1).
pub type ShardCheck<K> = Box<dyn Fn(&Listed<K>) -> bool + Send>;

/// What a LIST's shard check did (K1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardCounts {
    /// Items outside the shard dropped before admission (the server did not filter).
    pub filtered: u64,
    /// Items outside the shard in a list the server said it filtered (kept: the server is
    /// trusted; a mismatch means the two hash the field differently).
    pub mismatches: u64,
    /// True when every item went through the shard check while decoding (the streaming
    /// decoder with a shard): nothing outside the shard is left for the reflector to drop.
    pub checked: bool,
}

/// `metadata` as a LIST answer has it: kube's `ListMeta` plus `shardInfo`.
#[derive(serde::Deserialize)]
struct ListMetaWithShard {
    #[serde(flatten)]
    meta: ListMeta,
    #[serde(rename = "shardInfo", default)]
    shard_info: Option<ShardInfo>,
}

/// The type of a list's items: `v1`/`ConfigMapList` → `v1`/`ConfigMap` (list items carry no
/// `apiVersion`/`kind` of their own). `None` when the list's kind is unknown or not a `…List`.
pub(crate) fn item_type(list: &TypeMeta) -> Option<TypeMeta> {
    list.kind.strip_suffix("List").map(|k| TypeMeta {
        api_version: list.api_version.clone(),
        kind: k.to_string(),
    })
}

#[cfg(test)]
/// Reads `body` and decodes it as a Kubernetes list of `K`, item by item, passing each item
/// through `admit` (R5 check, transform, trace id) as soon as it is decoded, in the list's
/// order, on the process-wide decode pool ([`crate::runtime::set_decode_threads`]).
///
/// The body is read on kinformer's I/O runtime while the splitting and admission run right
/// here, on the calling (reflector) thread, blocking it for the duration of the list. That is
/// deliberate: the reflector's arbiter does nothing else meanwhile.
///
/// Memory and malloc arenas: glibc gives each thread its own arena, and memory freed into one
/// arena is reused only by allocations from it. When LIST items were decoded on a thread of
/// their own while watch events were decoded on the reflector's, memory freed when the watch
/// replaced listed objects was stranded (the benchmark's peak RSS went from 1.9 GB to 3.4 GB).
/// With one decode thread everything is decoded here, on the reflector's thread; with more,
/// LIST items and watch events are both decoded on the same pool threads (a batch of one watch
/// event excepted), so each arena's freed memory is reused by the same kind of objects.
pub(crate) async fn decode_list<K>(
    body: std::pin::Pin<Box<dyn AsyncBufRead + Send>>,
    codec: ItemCodec<K>,
    admit: Admit<K>,
) -> Result<DecodedList<Item<K>>, kube::Error>
where
    K: DeserializeOwned + Send + Sync + 'static,
{
    decode_list_on(body, codec, admit, DecodePool::shared()).await
}

/// [`decode_list`] with a shard check (K1): until the list's metadata says the server filtered
/// (`shardInfo`, which every API server sends before `items`), each item outside the shard is
/// dropped before `admit` (so it is never transformed, traced or cached) and counted.
pub(crate) async fn decode_list_sharded<K>(
    body: std::pin::Pin<Box<dyn AsyncBufRead + Send>>,
    codec: ItemCodec<K>,
    admit: Admit<K>,
    shard: Option<ShardCheck<K>>,
) -> Result<DecodedList<Item<K>>, kube::Error>
where
    K: DeserializeOwned + Send + Sync + 'static,
{
    decode_inner(body, codec, admit, shard, DecodePool::shared()).await
}

#[cfg(test)]
/// [`decode_list`] on the given pool.
pub(crate) async fn decode_list_on<K>(
    body: std::pin::Pin<Box<dyn AsyncBufRead + Send>>,
    codec: ItemCodec<K>,
    admit: Admit<K>,
    pool: DecodePool,
) -> Result<DecodedList<Item<K>>, kube::Error>
where
    K: DeserializeOwned + Send + Sync + 'static,
{
    decode_inner(body, codec, admit, None, pool).await
}

async fn decode_inner<K>(
    body: std::pin::Pin<Box<dyn AsyncBufRead + Send>>,
    codec: ItemCodec<K>,
    admit: Admit<K>,
    shard: Option<ShardCheck<K>>,
    pool: DecodePool,
) -> Result<DecodedList<Item<K>>, kube::Error>
where
    K: DeserializeOwned + Send + Sync + 'static,
{
    let (tx, rx) = mpsc::channel::<Vec<u8>>(8);
    let read = pump(body, tx);
    match crate::runtime::io() {
        Some(io) => {
            let reader = io.spawn(read);
            let decoded = decode_chunks(rx, codec, admit, shard, pool);
            let read_result = reader
                .await
                .map_err(|e| kube::Error::Service(Box::new(e)))?;
            combine(decoded, read_result)
        }
        None => {
            let decoder =
                tokio::task::spawn_blocking(move || decode_chunks(rx, codec, admit, shard, pool));
            let read_result = read.await;
            let decoded = decoder
                .await
                .map_err(|e| kube::Error::Service(Box::new(e)))?;
            combine(decoded, read_result)
        }
    }
}

/// Moves the body's chunks into the channel until the end, a read error, or the decoder stops.
async fn pump(
    mut body: std::pin::Pin<Box<dyn AsyncBufRead + Send>>,
    tx: mpsc::Sender<Vec<u8>>,
) -> Result<(), io::Error> {
    loop {
        let chunk = match body.fill_buf().await {
            Ok([]) => return Ok(()),
            Ok(buf) => buf.to_vec(),
            Err(e) => return Err(e),
        };
        let n = chunk.len();
        body.as_mut().consume(n);
        if tx.send(chunk).await.is_err() {
            // The decoder stopped early (malformed body): its error is the one to report.
            return Ok(());
        }
    }
}

/// Why a LIST body did not decode.
enum ListError {
    /// Not a list of `K` (the first error in the body's order).
    Serde(serde_json::Error),
    /// A decode thread panicked.
    Worker(WorkerLost),
}

impl From<serde_json::Error> for ListError {
    fn from(e: serde_json::Error) -> Self {
        ListError::Serde(e)
    }
}

/// A malformed body: what was expected where.
fn syntax(what: &str, at: usize) -> ListError {
    ListError::Serde(serde_json::Error::custom(format!(
        "malformed list: expected {what} at byte {at}"
    )))
}

fn combine<T>(
    decoded: Result<T, ListError>,
    read: Result<(), io::Error>,
) -> Result<T, kube::Error> {
    match (decoded, read) {
        (Ok(list), Ok(())) => Ok(list),
        (_, Err(e)) => Err(kube::Error::ReadEvents(e)),
        (Err(ListError::Serde(e)), Ok(())) => Err(kube::Error::SerdeError(e)),
        (Err(ListError::Worker(e)), Ok(())) => Err(kube::Error::Service(Box::new(e))),
    }
}

/// Bytes kept ahead of the cursor before a value is parsed: a value cut by a chunk boundary is
/// parsed again once the rest arrived, so the read-ahead keeps that rare.
const READ_AHEAD: usize = 256 * 1024;

/// The body as one sliding buffer: chunks are appended at the back, batches of parsed items
/// are split off the front (shared with the decode pool, not copied).
///
/// Every value (a key, the list's metadata, an item) is parsed by serde_json from the buffer
/// as a slice, which it reads about four times faster than through `io::Read` (930 MB/s
/// against 240 MB/s for a list of pods); only the separators between values (`{`, `:`, `,`,
/// `[`, `]`, `}`) are checked here.
struct Source {
    rx: mpsc::Receiver<Vec<u8>>,
    buf: BytesMut,
    /// The parse cursor in `buf`.
    pos: usize,
    /// Bytes split off the front so far (for error positions).
    dropped: usize,
    /// The body ended.
    done: bool,
}

impl Source {
    /// Appends the next chunk; false when the body ended.
    fn fill(&mut self) -> bool {
        if self.done {
            return false;
        }
        // futures' block_on, not tokio's blocking_recv: this runs on the reflector's runtime
        // thread by design (see `decode_list`), where tokio would refuse to block.
        // `unconstrained`: the enclosing tokio task's cooperative budget would otherwise run
        // out after a few hundred chunks and `recv` would return Pending for good.
        match futures::executor::block_on(tokio::task::unconstrained(self.rx.recv())) {
            Some(c) => {
                self.buf.extend_from_slice(&c);
                true
            }
            None => {
                self.done = true;
                false
            }
        }
    }

    /// The next byte that is not JSON whitespace, without consuming it (None: the body ended).
    fn peek(&mut self) -> Option<u8> {
        loop {
            while let Some(&b) = self.buf.get(self.pos) {
                if !matches!(b, b' ' | b'\n' | b'\t' | b'\r') {
                    return Some(b);
                }
                self.pos += 1;
            }
            if !self.fill() {
                return None;
            }
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), ListError> {
        match self.peek() {
            Some(b) if b == byte => {
                self.pos += 1;
                Ok(())
            }
            _ => Err(syntax(&format!("{:?}", byte as char), self.at())),
        }
    }

    fn at(&self) -> usize {
        self.dropped + self.pos
    }

    /// Parses one `T` at the cursor; returns it with the byte range it took. A value cut by
    /// the end of what arrived is parsed again with more of the body.
    fn value<T: DeserializeOwned>(&mut self) -> Result<(T, std::ops::Range<usize>), ListError> {
        self.peek();
        while self.buf.len() - self.pos < READ_AHEAD && self.fill() {}
        loop {
            let mut it = serde_json::Deserializer::from_slice(&self.buf[self.pos..]).into_iter();
            match it.next() {
                // A value that ends where the received bytes end may be cut (a number): only
                // trusted once a byte follows it, or the body ended.
                Some(Ok(v)) if self.pos + it.byte_offset() < self.buf.len() || self.done => {
                    let range = self.pos..self.pos + it.byte_offset();
                    self.pos = range.end;
                    return Ok((v, range));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) if !e.is_eof() || self.done => return Err(e.into()),
                Some(Err(_)) | None if self.done => {
                    return Err(syntax("a value", self.at()));
                }
                Some(Err(_)) | None => {}
            }
            self.fill();
        }
    }

    /// Splits off the front of the buffer up to `end` (items the pool is given).
    fn split(&mut self, end: usize) -> Bytes {
        let front = self.buf.split_to(end).freeze();
        self.pos -= end;
        self.dropped += end;
        front
    }
}

fn decode_chunks<K: DeserializeOwned + Send + Sync + 'static>(
    rx: mpsc::Receiver<Vec<u8>>,
    codec: ItemCodec<K>,
    mut admit: Admit<K>,
    shard: Option<ShardCheck<K>>,
    pool: DecodePool,
) -> Result<DecodedList<Item<K>>, ListError> {
    let mut src = Source {
        rx,
        buf: BytesMut::with_capacity(2 * READ_AHEAD),
        pos: 0,
        dropped: 0,
        done: false,
    };
    let mut out = DecodedList {
        types: TypeMeta::default(),
        metadata: ListMeta::default(),
        shard_info: None,
        shard_counts: ShardCounts::default(),
        items: Vec::new(),
    };
    let mut window = Window {
        pool,
        codec: &codec,
        batch: Vec::with_capacity(LIST_BATCH),
        in_flight: VecDeque::with_capacity(LIST_IN_FLIGHT + 1),
        items: &mut out.items,
        admit: &mut admit,
        item_type: None,
        failed: false,
        shard,
        server_filtered: false,
        shard_counts: ShardCounts::default(),
    };
    let parsed = parse_list(
        &mut src,
        &mut window,
        &mut out.types,
        &mut out.metadata,
        &mut out.shard_info,
    );
    // What came before a bad part is admitted as it would have been one by one; an item that
    // failed to decode before it is the first error.
    let finished = window.finish(&mut src);
    let mut counts = window.shard_counts;
    counts.checked = window.shard.is_some();
    out.shard_counts = counts;
    match (parsed, finished) {
        (_, Err(first)) => Err(first),
        (Err(e), Ok(())) => Err(e),
        (Ok(()), Ok(())) => Ok(out),
    }
}

/// The list object: `{"kind":…,"apiVersion":…,"metadata":{…},"items":[…]}`, keys in any order
/// (every API server sends `items` last), unknown keys skipped; nothing but whitespace after it.
fn parse_list<K: DeserializeOwned + Send + Sync + 'static>(
    src: &mut Source,
    window: &mut Window<'_, K>,
    types: &mut TypeMeta,
    metadata: &mut ListMeta,
    shard_info: &mut Option<ShardInfo>,
) -> Result<(), ListError> {
    src.expect(b'{')?;
    if src.peek() == Some(b'}') {
        src.pos += 1;
    } else {
        loop {
            let (key, _) = src.value::<String>()?;
            src.expect(b':')?;
            match key.as_str() {
                "items" => {
                    // apiVersion/kind come first from every API server we know of; when they
                    // do not, items are admitted without a list type (R5 then checks the item).
                    window.item_type = item_type(types);
                    parse_items(src, window)?;
                }
                "metadata" => {
                    let m: ListMetaWithShard = src.value()?.0;
                    *metadata = m.meta;
                    // K1: the server filtered; items after this are trusted.
                    window.server_filtered = m.shard_info.is_some();
                    *shard_info = m.shard_info;
                }
                "apiVersion" => types.api_version = src.value()?.0,
                "kind" => types.kind = src.value()?.0,
                _ => {
                    src.value::<IgnoredAny>()?;
                }
            }
            match src.peek() {
                Some(b',') => src.pos += 1,
                Some(b'}') => {
                    src.pos += 1;
                    break;
                }
                _ => return Err(syntax("',' or '}'", src.at())),
            }
        }
    }
    match src.peek() {
        None => Ok(()),
        Some(_) => Err(syntax("the end of the body", src.at())),
    }
}

/// `items`: `null`, or an array whose items are split here (validated by serde_json while
/// skipping them) and decoded on the pool in batches.
fn parse_items<K: DeserializeOwned + Send + Sync + 'static>(
    src: &mut Source,
    window: &mut Window<'_, K>,
) -> Result<(), ListError> {
    // `"items": null` is what some servers send for an empty list.
    if src.peek() == Some(b'n') {
        let (_, _) = src.value::<()>()?;
        return Ok(());
    }
    src.expect(b'[')?;
    if src.peek() == Some(b']') {
        src.pos += 1;
        return Ok(());
    }
    loop {
        let (_, range) = src.value::<IgnoredAny>()?;
        window.push(src, range)?;
        match src.peek() {
            Some(b',') => src.pos += 1,
            Some(b']') => {
                src.pos += 1;
                return Ok(());
            }
            _ => return Err(syntax("',' or ']'", src.at())),
        }
    }
}

/// LIST items decoded as one batch on the pool.
const LIST_BATCH: usize = 64;
/// Batches decoding at once behind the one being admitted: the raw items held at most are
/// `LIST_BATCH × (LIST_IN_FLIGHT + 1)` (about 1 MB of the benchmark's pods), never the list.
const LIST_IN_FLIGHT: usize = 2;

/// One item to decode: the shared bytes of its batch and where it is in them.
type Raw<K> = (ItemCodec<K>, Bytes, std::ops::Range<usize>);

/// The LIST items between split and admission: the batch being filled (ranges in the source's
/// buffer), then the batches on the pool, oldest first.
struct Window<'a, K> {
    pool: DecodePool,
    codec: &'a ItemCodec<K>,
    batch: Vec<std::ops::Range<usize>>,
    in_flight: VecDeque<Batch<Result<Listed<K>, serde_json::Error>>>,
    items: &'a mut Vec<Item<K>>,
    admit: &'a mut Admit<K>,
    item_type: Option<TypeMeta>,
    /// An item failed: nothing after it is admitted.
    failed: bool,
    /// The informer's shard check (K1), if it has a shard.
    shard: Option<ShardCheck<K>>,
    /// The list's metadata carried `shardInfo`: the server filtered.
    server_filtered: bool,
    shard_counts: ShardCounts,
}

impl<K: DeserializeOwned + Send + Sync + 'static> Window<'_, K> {
    fn push(&mut self, src: &mut Source, range: std::ops::Range<usize>) -> Result<(), ListError> {
        self.batch.push(range);
        if self.batch.len() >= LIST_BATCH {
            self.send(src);
            while self.in_flight.len() > LIST_IN_FLIGHT {
                self.admit_oldest()?;
            }
        }
        Ok(())
    }

    /// Hands the batch to the pool: its bytes split off the source's buffer, shared, not
    /// copied.
    fn send(&mut self, src: &mut Source) {
        let Some(last) = self.batch.last() else {
            return;
        };
        let bytes = src.split(last.end);
        let batch: Vec<Raw<K>> = self
            .batch
            .drain(..)
            .map(|r| (self.codec.clone(), bytes.clone(), r))
            .collect();
        self.in_flight
            .push_back(self.pool.decode(batch, decode_item::<K>));
    }

    /// Waits for the oldest batch and admits its items in order, up to the first that failed
    /// (after which nothing more is admitted).
    fn admit_oldest(&mut self) -> Result<(), ListError> {
        let Some(batch) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let admitted = (|| {
            for obj in batch.wait().map_err(ListError::Worker)? {
                let obj = obj.map_err(ListError::Serde)?;
                if let Some(check) = &self.shard
                    && !check(&obj)
                {
                    if self.server_filtered {
                        self.shard_counts.mismatches += 1;
                    } else {
                        self.shard_counts.filtered += 1;
                        continue;
                    }
                }
                if let Some(item) = (self.admit)(obj, self.item_type.as_ref()) {
                    self.items.push(item);
                }
            }
            Ok(())
        })();
        self.failed |= admitted.is_err();
        admitted
    }

    /// Sends the last batch and admits everything still in flight, unless an item failed.
    fn finish(&mut self, src: &mut Source) -> Result<(), ListError> {
        if self.failed {
            return Ok(());
        }
        self.send(src);
        while !self.in_flight.is_empty() {
            self.admit_oldest()?;
        }
        Ok(())
    }
}

/// One protobuf LIST item to decode: how (typed, or lean with the store's state), the whole
/// body (shared), where the item is, its schema and the (apiVersion, kind) given to it.
type PbRaw<K> = (
    ItemCodec<K>,
    Bytes,
    std::ops::Range<usize>,
    &'static kinformer::protobuf::Message,
    Arc<(String, String)>,
);

/// One protobuf LIST item's decode into `K` (or, lean, its message stored as it is with its
/// metadata read from it, I7), on a decode thread.
fn decode_pb_item<K: DeserializeOwned>(
    (codec, body, range, schema, types): PbRaw<K>,
) -> Result<Listed<K>, kube::Error> {
    use crate::listwatch::decode::{lean_error, protobuf_error};
    let types = (types.0.as_str(), types.1.as_str());
    match codec {
        ItemCodec::Typed => {
            kinformer::protobuf::decode_message::<K>(&body[range], schema, Some(types))
                .map(|o| Listed::Typed(Arc::new(o)))
                .map_err(protobuf_error)
        }
        // A list item has no envelope: its metadata carries no types, as its JSON's does not.
        ItemCodec::Lean(state) => state
            .encode_protobuf(&body[range], types, false)
            .map(Listed::Lean)
            .map_err(lean_error),
    }
}

/// Decodes a protobuf LIST body (`application/vnd.kubernetes.protobuf`, read whole: items are
/// length-prefixed, so they are located without parsing them) into `K`: its items decoded in
/// batches on `pool`, admitted in the list's order, with the same shard check (K1) and error
/// rules as the JSON path (the first item that fails fails the list; nothing after it is
/// admitted). Runs on the calling (reflector) thread, like the JSON path's splitting.
pub(crate) fn decode_protobuf_list<K>(
    body: Bytes,
    codec: ItemCodec<K>,
    mut admit: Admit<K>,
    shard: Option<ShardCheck<K>>,
    pool: DecodePool,
) -> Result<DecodedList<Item<K>>, kube::Error>
where
    K: DeserializeOwned + Send + Sync + 'static,
{
    use crate::listwatch::decode::protobuf_error;
    let l = kinformer::protobuf::list(&body).map_err(protobuf_error)?;
    let meta: ListMetaWithShard = l.metadata().map_err(protobuf_error)?;
    let types = TypeMeta {
        api_version: l.api_version.to_string(),
        kind: l.kind.to_string(),
    };
    let item_types = Arc::new((l.api_version.to_string(), l.item_kind.to_string()));
    let schema = l.item_schema;
    let ranges = l.items;
    let item_type = item_type(&types);
    let server_filtered = meta.shard_info.is_some();
    let mut out = DecodedList {
        types,
        metadata: meta.meta,
        shard_info: meta.shard_info,
        shard_counts: ShardCounts {
            checked: shard.is_some(),
            ..ShardCounts::default()
        },
        items: Vec::with_capacity(ranges.len()),
    };
    let mut in_flight = VecDeque::with_capacity(LIST_IN_FLIGHT + 1);
    let mut admit_batch = |batch: Batch<Result<Listed<K>, kube::Error>>,
                           out: &mut DecodedList<Item<K>>|
     -> Result<(), kube::Error> {
        for obj in batch
            .wait()
            .map_err(|e| kube::Error::Service(Box::new(e)))?
        {
            let obj = obj?;
            if let Some(check) = &shard
                && !check(&obj)
            {
                if server_filtered {
                    out.shard_counts.mismatches += 1;
                } else {
                    out.shard_counts.filtered += 1;
                    continue;
                }
            }
            if let Some(item) = admit(obj, item_type.as_ref()) {
                out.items.push(item);
            }
        }
        Ok(())
    };
    for chunk in ranges.chunks(LIST_BATCH) {
        let batch: Vec<PbRaw<K>> = chunk
            .iter()
            .map(|r| {
                let types = Arc::clone(&item_types);
                (codec.clone(), body.clone(), r.clone(), schema, types)
            })
            .collect();
        in_flight.push_back(pool.decode(batch, decode_pb_item::<K>));
        while in_flight.len() > LIST_IN_FLIGHT {
            if let Some(b) = in_flight.pop_front() {
                admit_batch(b, &mut out)?;
            }
        }
    }
    while let Some(b) = in_flight.pop_front() {
        admit_batch(b, &mut out)?;
    }
    Ok(out)
}

/// One LIST item's decode (or lean encode), on a decode thread, from its batch's shared bytes.
fn decode_item<K: DeserializeOwned>(
    (codec, bytes, range): Raw<K>,
) -> Result<Listed<K>, serde_json::Error> {
    codec.apply(&bytes[range])
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn decode(json: &str) -> Result<DecodedList<Item<ConfigMap>>, kube::Error> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        // Feed in small pieces so items straddle chunk boundaries.
        let bytes = json.as_bytes().to_vec();
        rt.block_on(async move {
            let chunks: Vec<Result<Vec<u8>, io::Error>> =
                bytes.chunks(7).map(|c| Ok(c.to_vec())).collect();
            let reader = futures::TryStreamExt::into_async_read(futures::stream::iter(chunks));
            let admit: Admit<ConfigMap> = Box::new(|o, _| Some((typed(o), TraceId::NONE)));
            decode_list::<ConfigMap>(Box::pin(reader), ItemCodec::Typed, admit).await
        })
    }

    /// A typed codec's item as the pipeline carries it.
    fn typed<K>(o: Listed<K>) -> Arc<LazyObject<K>> {
        match o {
            Listed::Typed(o) => Arc::new(LazyObject::from_object(o)),
            Listed::Lean(_) => panic!("a typed codec gave a lean object"),
        }
    }

    #[test]
    fn r1_streaming_list_decodes_items_metadata_and_kind() {
        let l = decode(
            r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"c1"},
               "items":[{"metadata":{"name":"a","namespace":"n"}},{"metadata":{"name":"b","namespace":"n"},"data":{"k":"v"}}],
               "extra":{"ignored":[1,2,3]}}"#,
        )
        .expect("decodes");
        assert_eq!(l.types.kind, "ConfigMapList");
        assert_eq!(l.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(l.metadata.continue_.as_deref(), Some("c1"));
        assert_eq!(l.items.len(), 2);
        assert_eq!(l.items[1].0.name(), Some("b"));
    }

    #[test]
    fn r1_streaming_list_accepts_null_items() {
        let l = decode(r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":null}"#)
            .expect("decodes");
        assert!(l.items.is_empty());
    }

    #[test]
    fn r1_streaming_list_rejects_malformed_bodies_with_a_typed_error() {
        for bad in [
            r#"{"items":[{"metadata":{"name":"a"}}"#,
            r#"{"items":[{"metadata":"#,
            "not json",
            r#"{"items":[1]}"#,
        ] {
            assert!(
                matches!(decode(bad), Err(kube::Error::SerdeError(_))),
                "{bad}"
            );
        }
    }

    /// P2: the transform (admission) runs on each item as it is decoded, before the rest of
    /// the body is read: items before a malformed one were already admitted when the decode
    /// failed, and what the list holds is the admitted (transformed) objects.
    #[test]
    fn p2_each_list_item_is_admitted_as_it_is_decoded() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        let admit = move |o: Listed<ConfigMap>, t: Option<&TypeMeta>| {
            let Listed::Typed(o) = o else {
                panic!("typed codec")
            };
            s.lock().unwrap().push((
                o.metadata.name.clone().unwrap_or_default(),
                t.map(|t| t.kind.clone()),
            ));
            let mut o = Arc::unwrap_or_clone(o);
            o.data = None; // the transform
            Some((
                Arc::new(LazyObject::from_object(Arc::new(o))),
                TraceId::NONE,
            ))
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let run = |json: &'static str| {
            let admit: Admit<ConfigMap> = Box::new(admit.clone());
            rt.block_on(async move {
                let chunks: Vec<Result<Vec<u8>, io::Error>> =
                    json.as_bytes().chunks(5).map(|c| Ok(c.to_vec())).collect();
                let reader = futures::TryStreamExt::into_async_read(futures::stream::iter(chunks));
                decode_list::<ConfigMap>(Box::pin(reader), ItemCodec::Typed, admit).await
            })
        };
        let l = run(
            r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"a"},"data":{"k":"v"}},{"metadata":{"name":"b"}}]}"#,
        )
        .expect("decodes");
        assert!(
            l.items
                .iter()
                .all(|(o, _)| o.decoded().is_some_and(|o| o.data.is_none())),
            "transformed"
        );
        assert_eq!(
            *seen.lock().unwrap(),
            [
                ("a".to_string(), Some("ConfigMap".to_string())),
                ("b".to_string(), Some("ConfigMap".to_string()))
            ],
            "R5 sees the list's item type"
        );
        seen.lock().unwrap().clear();
        let bad = run(
            r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}},{"metadata":"#,
        );
        assert!(bad.is_err());
        assert_eq!(
            seen.lock().unwrap().len(),
            2,
            "admitted before the body ended"
        );
    }
}

/// P8 for LIST items decoded on the pool: the list's order, and the first bad item's error.
#[cfg(test)]
mod parallel_tests {
    use super::*;
    use crate::listwatch::decode::{DecodePool, test_pool};
    use k8s_openapi::api::core::v1::ConfigMap;

    /// A ConfigMapList of `n` items of varied sizes; item `bad` (if any) has `data` of the
    /// wrong type (the typed codec's error) and labels of the wrong type (the lean one's).
    fn list(n: usize, bad: Option<usize>) -> String {
        let items: Vec<String> = (0..n)
            .map(|i| {
                if Some(i) == bad {
                    format!(r#"{{"metadata":{{"name":"c{i:05}","labels":{{"a":1}}}},"data":5}}"#)
                } else {
                    let pad = "x".repeat((i * 53) % 3000);
                    format!(r#"{{"metadata":{{"name":"c{i:05}"}},"data":{{"pad":"{pad}"}}}}"#)
                }
            })
            .collect();
        format!(
            r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"9"}},"items":[{}]}}"#,
            items.join(",")
        )
    }

    /// Both codecs: typed, and lean (I7) with a small hot cache.
    fn codecs() -> [ItemCodec<ConfigMap>; 2] {
        let lean = kinformer::lean::LeanConfig::default().hot_objects(16);
        [
            ItemCodec::Typed,
            ItemCodec::Lean(Arc::new(kinformer::lean::LeanState::new(lean))),
        ]
    }

    /// Decodes `json` on `pool` with `codec`; returns the result and the names admitted, in
    /// admission order.
    fn run(
        json: String,
        codec: ItemCodec<ConfigMap>,
        pool: DecodePool,
    ) -> (Result<Vec<String>, kube::Error>, Vec<String>) {
        let admitted = Arc::new(std::sync::Mutex::new(Vec::new()));
        let a = Arc::clone(&admitted);
        let state = match &codec {
            ItemCodec::Lean(s) => Some(Arc::clone(s)),
            ItemCodec::Typed => None,
        };
        let admit: Admit<ConfigMap> = Box::new(move |o, _| {
            let lazy = match (o, &state) {
                (Listed::Typed(o), None) => LazyObject::from_object(o),
                (Listed::Lean(raw), Some(s)) => LazyObject::from_raw(Arc::new(raw), Arc::clone(s)),
                _ => panic!("the codec decides the form"),
            };
            a.lock()
                .unwrap()
                .push(lazy.name().unwrap_or_default().to_string());
            Some((Arc::new(lazy), TraceId::NONE))
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let got = rt.block_on(async move {
            let chunks: Vec<Result<Vec<u8>, io::Error>> = json
                .into_bytes()
                .chunks(4093)
                .map(|c| Ok(c.to_vec()))
                .collect();
            let reader = futures::TryStreamExt::into_async_read(futures::stream::iter(chunks));
            decode_list_on::<ConfigMap>(Box::pin(reader), codec, admit, pool).await
        });
        let names = got.map(|l| {
            l.items
                .iter()
                .map(|(o, _)| {
                    // Every object reads back whole, whatever the codec.
                    let typed = o.object().expect("decodes");
                    assert_eq!(typed.metadata.name.as_deref(), o.name());
                    o.name().unwrap_or_default().to_string()
                })
                .collect()
        });
        let admitted = admitted.lock().unwrap().clone();
        (names, admitted)
    }

    #[test]
    fn p8_list_items_decoded_on_the_pool_keep_the_lists_order() {
        let want: Vec<String> = (0..2000).map(|i| format!("c{i:05}")).collect();
        for codec in codecs() {
            for pool in [test_pool(), DecodePool::inline()] {
                let (names, admitted) = run(list(2000, None), codec.clone(), pool);
                assert_eq!(names.expect("decodes"), want);
                assert_eq!(admitted, want, "admitted in the list's order");
            }
        }
    }

    /// A bad item in the middle of a batch: the list fails with a decode error, and exactly the
    /// items before it were admitted, in order (as when decoding one by one).
    #[test]
    fn p8_a_bad_list_item_fails_the_list_after_admitting_exactly_those_before_it() {
        for codec in codecs() {
            for bad in [0, 1, 700, 1999] {
                for pool in [test_pool(), DecodePool::inline()] {
                    let (names, admitted) = run(list(2000, Some(bad)), codec.clone(), pool);
                    assert!(
                        matches!(names, Err(kube::Error::SerdeError(ref e)) if e.is_data()),
                        "{bad}: {names:?}"
                    );
                    let want: Vec<String> = (0..bad).map(|i| format!("c{i:05}")).collect();
                    assert_eq!(admitted, want, "bad item {bad}");
                }
            }
            // A syntax error after a shape error: the first one in the body is reported.
            let json = list(300, Some(100)).replace("c00200", "c00200\\q\"");
            let (names, admitted) = run(json, codec, test_pool());
            assert!(
                matches!(names, Err(kube::Error::SerdeError(ref e)) if e.is_data()),
                "{names:?}"
            );
            assert_eq!(admitted.len(), 100);
        }
    }
}

/// Fuzzing of the streaming LIST decoder (issue 9): arbitrary bytes and mutated valid lists,
/// fed in random chunk sizes, never panic and always give `Ok` or a typed `kube::Error`; what
/// is not JSON at all is always an error; a valid list decodes whole. The default case counts
/// run in CI in seconds; `KINFORMER_FUZZ_CASES=100000` runs for minutes.
#[cfg(test)]
mod fuzz_tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use proptest::prelude::*;

    fn cases(default: u32) -> u32 {
        std::env::var("KINFORMER_FUZZ_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    }

    thread_local! {
        static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
    }

    /// Decodes with the typed codec, or (`lean`) the lean one, whose objects must then read
    /// back (or fail to decode with a typed error, never panic).
    fn decode_as(
        bytes: &[u8],
        chunk: usize,
        lean: bool,
    ) -> Result<DecodedList<Item<Pod>>, kube::Error> {
        let chunks: Vec<Result<Vec<u8>, io::Error>> =
            bytes.chunks(chunk.max(1)).map(|c| Ok(c.to_vec())).collect();
        let state = Arc::new(kinformer::lean::LeanState::<Pod>::new(Default::default()));
        let codec = if lean {
            ItemCodec::Lean(Arc::clone(&state))
        } else {
            ItemCodec::Typed
        };
        RT.with(|rt| {
            rt.block_on(async move {
                let reader = futures::TryStreamExt::into_async_read(futures::stream::iter(chunks));
                let admit: Admit<Pod> = Box::new(move |o, _| {
                    let lazy = match o {
                        Listed::Typed(o) => LazyObject::from_object(o),
                        Listed::Lean(raw) => {
                            LazyObject::from_raw(Arc::new(raw), Arc::clone(&state))
                        }
                    };
                    let _ = lazy.object();
                    Some((Arc::new(lazy), TraceId::NONE))
                });
                decode_list::<Pod>(Box::pin(reader), codec, admit).await
            })
        })
    }

    /// A valid PodList with a few varied pods (labels, annotations, status, unicode, numbers).
    fn valid_list(n: usize) -> String {
        let items: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                serde_json::json!({
                    "metadata": {
                        "name": format!("pod-{i}"), "namespace": "ns-é",
                        "resourceVersion": format!("{}", 10 + i), "uid": format!("u-{i}"),
                        "labels": {"app": "web", "i": i.to_string()},
                        "annotations": {"a": "x\"y\\z\u{1F600}"},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                            "name": "rs", "uid": "r", "controller": true}]
                    },
                    "spec": {"containers": [{"name": "c", "image": "nginx",
                        "ports": [{"containerPort": 80}],
                        "resources": {"limits": {"cpu": "100m", "memory": "1Gi"}}}]},
                    "status": {"phase": "Running", "podIP": "10.0.0.1",
                        "conditions": [{"type": "Ready", "status": "True"}]}
                })
            })
            .collect();
        serde_json::json!({
            "kind": "PodList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "99", "continue": "tok"},
            "items": items
        })
        .to_string()
    }

    /// One mutation of a byte string.
    #[derive(Debug, Clone)]
    enum Mutation {
        Flip(usize, u8),
        Insert(usize, Vec<u8>),
        Delete(usize, usize),
        Truncate(usize),
        Duplicate(usize, usize, usize),
        /// Replaces a byte by a JSON-significant one (the likeliest to reach deep paths).
        Structural(usize, u8),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        let structural = prop::sample::select(b"{}[]\",:0-9.eE+ntfl\\u ".to_vec());
        prop_oneof![
            (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
            (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
                .prop_map(|(i, b)| Mutation::Insert(i, b)),
            (any::<usize>(), 1usize..32).prop_map(|(i, n)| Mutation::Delete(i, n)),
            any::<usize>().prop_map(Mutation::Truncate),
            (any::<usize>(), 1usize..64, any::<usize>())
                .prop_map(|(i, n, at)| Mutation::Duplicate(i, n, at)),
            (any::<usize>(), structural).prop_map(|(i, b)| Mutation::Structural(i, b)),
        ]
    }

    fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
        if bytes.is_empty() {
            return;
        }
        let len = bytes.len();
        match m {
            Mutation::Flip(i, b) => bytes[i % len] ^= b | 1,
            Mutation::Structural(i, b) => bytes[i % len] = *b,
            Mutation::Insert(i, b) => {
                let at = i % (len + 1);
                bytes.splice(at..at, b.iter().copied());
            }
            Mutation::Delete(i, n) => {
                let at = i % len;
                bytes.drain(at..(at + n).min(len));
            }
            Mutation::Truncate(i) => bytes.truncate(i % len),
            Mutation::Duplicate(i, n, at) => {
                let from = i % len;
                let seg: Vec<u8> = bytes[from..(from + n).min(len)].to_vec();
                let at = at % (len + 1);
                bytes.splice(at..at, seg);
            }
        }
    }

    /// The decoder's contract on any input: a typed result, and an error for anything that is
    /// not one JSON value.
    fn check(bytes: &[u8], chunk: usize) -> Result<(), TestCaseError> {
        for lean in [false, true] {
            let got = decode_as(bytes, chunk, lean);
            if let Err(e) = &got {
                prop_assert!(
                    matches!(e, kube::Error::SerdeError(_) | kube::Error::ReadEvents(_)),
                    "untyped error {e:?}"
                );
            }
            if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_err() {
                prop_assert!(
                    got.is_err(),
                    "not JSON, yet decoded (lean: {}): {:?}",
                    lean,
                    String::from_utf8_lossy(bytes)
                );
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(512), ..ProptestConfig::default() })]

        #[test]
        fn fuzz_list_decode_arbitrary_bytes(
            bytes in prop::collection::vec(any::<u8>(), 0..256),
            chunk in 1usize..64,
        ) {
            check(&bytes, chunk)?;
        }

        #[test]
        fn fuzz_list_decode_mutated_lists(
            n in 0usize..4,
            muts in prop::collection::vec(mutation(), 1..6),
            chunk in 1usize..512,
        ) {
            let mut bytes = valid_list(n).into_bytes();
            apply_all(&mut bytes, &muts);
            check(&bytes, chunk)?;
        }

        #[test]
        fn fuzz_list_decode_valid_lists_decode_whole(n in 0usize..6, chunk in 1usize..512) {
            for lean in [false, true] {
                let l = decode_as(valid_list(n).as_bytes(), chunk, lean);
                prop_assert!(l.is_ok(), "{:?}", l.err());
                let l = l.map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(l.items.len(), n);
                prop_assert_eq!(l.metadata.resource_version.as_deref(), Some("99"));
                for (i, (o, _)) in l.items.iter().enumerate() {
                    let typed = o.object().map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(typed.metadata.name.clone(), Some(format!("pod-{i}")));
                    prop_assert_eq!(o.labels().get("app"), Some("web"));
                }
            }
        }
    }

    fn apply_all(bytes: &mut Vec<u8>, muts: &[Mutation]) {
        for m in muts {
            apply(bytes, m);
        }
    }

    /// Hostile shapes found worth keeping as fixed cases: deep nesting, huge numbers, a BOM,
    /// trailing data, an object where the list is, items of the wrong type, NUL bytes.
    #[test]
    fn fuzz_list_decode_hostile_inputs_are_typed_errors_or_lists() {
        let deep = format!(
            "{{\"items\":[{}{}]}}",
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        let inputs: Vec<Vec<u8>> = vec![
            deep.into_bytes(),
            b"{\"items\":[{\"metadata\":{\"name\":\"a\",\"resourceVersion\":1e999}}]}".to_vec(),
            b"\xEF\xBB\xBF{\"items\":[]}".to_vec(),
            b"{\"items\":[]} {\"items\":[]}".to_vec(),
            b"{\"items\":{\"metadata\":{}}}".to_vec(),
            b"{\"items\":[{\"metadata\":{\"name\":\"\\u0000\"}}],\"items\":[]}".to_vec(),
            b"{\"items\":[\"\\ud800\"]}".to_vec(),
            b"{\"metadata\":{\"resourceVersion\":[]}}".to_vec(),
            b"[]".to_vec(),
            b"".to_vec(),
            b"\0\0\0".to_vec(),
        ];
        for bytes in inputs {
            for chunk in [1, 3, 4096] {
                check(&bytes, chunk).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
}
