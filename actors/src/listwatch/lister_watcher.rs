//! The list/watch seam between the reflector and kube: client-go's `ListerWatcher`.
//!
//! The reflector never speaks HTTP itself: [`KubeListerWatcher`] calls kube's [`Api`] (`list`,
//! `watch`, or their metadata-only variants), so the request shapes, auth, TLS and watch-stream
//! decoding are kube's. The trait exists so one reflector serves typed, dynamic and
//! metadata-only informers; it is not a test seam (tests run against the simulated API server).

use std::{fmt::Debug, sync::Arc};

use futures::{StreamExt, stream::BoxStream};
use kinformer::{lean::LeanState, shard::ShardSelector};
use kube::{
    Api, Client, Resource,
    api::{ListParams, ObjectList, PartialObjectMeta, WatchEvent, WatchParams},
};
use serde::{Serialize, de::DeserializeOwned};

pub use crate::config::ContentType;
pub use crate::listwatch::decode::RawJson;
pub use crate::listwatch::list_decode::{
    Admit, DecodedList, Item, ItemCodec, Listed, ShardCounts, ShardInfo,
};
use crate::listwatch::{
    decode::{
        DecodePool, decode_listed_watch, decode_proto_watch, encode_json_watch, encode_proto_watch,
        encode_watch, listed_event, proto_frames, unlisted_event, watch_lines,
    },
    list_decode::{self, ShardCheck, decode_list_sharded},
};
pub use crate::object::ScopeApi;

/// A LIST in progress: resolves to the admitted items with the list's metadata.
pub type ListItems<K> =
    futures::future::BoxFuture<'static, Result<DecodedList<Item<K>>, kube::Error>>;

/// A boxed stream of watch events as kube decodes them.
pub type WatchStream<K> = BoxStream<'static, Result<WatchEvent<K>, kube::Error>>;

/// A boxed stream of watch events whose objects are as the typed informer carries them
/// ([`Listed::Typed`], in an `Arc`): [`ListerWatcher::watch_listed`].
pub type ListedWatchStream<K> = BoxStream<'static, Result<WatchEvent<Listed<K>>, kube::Error>>;

/// A boxed stream of watch events whose objects are left as the server's JSON (the lean
/// mode's watch, I7).
pub type RawWatchStream = BoxStream<'static, Result<WatchEvent<RawJson>, kube::Error>>;

/// A typed object as the server's JSON (the default raw paths of a [`ListerWatcher`] that
/// only decodes).
fn to_raw<K: Serialize>(obj: &K) -> Result<RawJson, kube::Error> {
    serde_json::value::to_raw_value(obj)
        .map(RawJson::from)
        .map_err(kube::Error::SerdeError)
}

/// Lists and watches one resource (client-go's `ListerWatcher`).
pub trait ListerWatcher<K: Clone>: Send + Sync + 'static {
    /// One LIST request (one page when `params.limit` is set).
    fn list(
        &self,
        params: ListParams,
    ) -> futures::future::BoxFuture<'static, Result<ObjectList<K>, kube::Error>>;
    /// Opens a WATCH from `resource_version`.
    fn watch(
        &self,
        params: WatchParams,
        resource_version: String,
    ) -> futures::future::BoxFuture<'static, Result<WatchStream<K>, kube::Error>>;
    /// The resource's plural (for logs, traces and metrics).
    fn resource_name(&self) -> String;

    /// One LIST request, each item decoded (or, in the lean mode, encoded) with `codec` and
    /// passed through `admit` (R5, P2). The default calls [`list`](Self::list) and admits the
    /// decoded items (re-encoding them for the lean mode); [`KubeListerWatcher`] admits each item
    /// as soon as it is read from the streaming response instead, so neither the whole
    /// response nor untransformed (or, lean, decoded) objects are ever held.
    fn list_items(
        &self,
        params: ListParams,
        codec: ItemCodec<K>,
        mut admit: Admit<K>,
    ) -> ListItems<K>
    where
        K: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let list = self.list(params);
        Box::pin(async move {
            let l = list.await?;
            let item_type = list_decode::item_type(&l.types);
            let mut items = Vec::with_capacity(l.items.len());
            for o in l.items {
                let listed = match &codec {
                    ItemCodec::Typed => Listed::Typed(Arc::new(o)),
                    ItemCodec::Lean(_) => codec
                        .apply(to_raw(&o)?.get().as_bytes())
                        .map_err(kube::Error::SerdeError)?,
                };
                items.extend(admit(listed, item_type.as_ref()));
            }
            Ok(DecodedList {
                types: l.types,
                metadata: l.metadata,
                // kube's `ObjectList` drops `metadata.shardInfo`: treated as a server that
                // does not filter (the reflector filters by itself, K1).
                shard_info: None,
                shard_counts: Default::default(),
                items,
            })
        })
    }

    /// Opens a WATCH whose objects are left as the server's JSON (the lean mode's path, I7:
    /// the informer encodes them on its decode pool, never decoding them). The default
    /// serialises what [`watch`](Self::watch) decodes; [`KubeListerWatcher`] reads the
    /// response as it comes.
    fn watch_raw(
        &self,
        params: WatchParams,
        resource_version: String,
    ) -> futures::future::BoxFuture<'static, Result<RawWatchStream, kube::Error>>
    where
        K: Serialize + Send + 'static,
    {
        let watch = self.watch(params, resource_version);
        Box::pin(async move {
            let events = watch.await?;
            Ok(events
                .map(|ev| {
                    Ok(match ev? {
                        WatchEvent::Added(o) => WatchEvent::Added(to_raw(&o)?),
                        WatchEvent::Modified(o) => WatchEvent::Modified(to_raw(&o)?),
                        WatchEvent::Deleted(o) => WatchEvent::Deleted(to_raw(&o)?),
                        WatchEvent::Bookmark(b) => WatchEvent::Bookmark(b),
                        WatchEvent::Error(e) => WatchEvent::Error(e),
                    })
                })
                .boxed())
        })
    }

    /// [`list_items`](Self::list_items) of one shard (KEP-5866, K1): the request carries
    /// `shardSelector`. The default ignores the shard (answers then have no `shardInfo`, so the
    /// reflector filters by itself); [`KubeListerWatcher`] and [`MetadataListerWatcher`] send it.
    fn list_items_sharded(
        &self,
        params: ListParams,
        shard: Option<&ShardSelector>,
        codec: ItemCodec<K>,
        admit: Admit<K>,
    ) -> ListItems<K>
    where
        K: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let _ = shard;
        self.list_items(params, codec, admit)
    }

    /// [`watch`](Self::watch) of one shard (K1); the default ignores the shard (the reflector
    /// then filters events by itself).
    fn watch_sharded(
        &self,
        params: WatchParams,
        resource_version: String,
        shard: Option<&ShardSelector>,
    ) -> futures::future::BoxFuture<'static, Result<WatchStream<K>, kube::Error>> {
        let _ = shard;
        self.watch(params, resource_version)
    }

    /// [`watch_sharded`](Self::watch_sharded) with each object as the typed informer carries
    /// it, in an `Arc` ([`Listed::Typed`]). The default wraps what `watch_sharded` gives;
    /// [`KubeListerWatcher`] puts each object in its `Arc` on the thread that decoded it, so
    /// the reflector's thread moves pointers rather than kilobytes of object.
    fn watch_listed(
        &self,
        params: WatchParams,
        resource_version: String,
        shard: Option<&ShardSelector>,
    ) -> futures::future::BoxFuture<'static, Result<ListedWatchStream<K>, kube::Error>>
    where
        K: Send + 'static,
    {
        let watch = self.watch_sharded(params, resource_version, shard);
        Box::pin(async move { Ok(watch.await?.map(|ev| ev.map(listed_event)).boxed()) })
    }

    /// The lean mode's WATCH (I7) of one shard (K1): each object kept as the server's bytes,
    /// its metadata parsed and the bytes compressed by `state` on the decode pool, never
    /// decoded into `K`. The default encodes what
    /// [`watch_raw_sharded`](Self::watch_raw_sharded) gives (JSON); [`KubeListerWatcher`]
    /// asking for protobuf keeps each object's protobuf message when the server answers so.
    fn watch_lean(
        &self,
        params: WatchParams,
        resource_version: String,
        shard: Option<&ShardSelector>,
        state: Arc<LeanState<K>>,
    ) -> futures::future::BoxFuture<'static, Result<ListedWatchStream<K>, kube::Error>>
    where
        K: Serialize + Send + Sync + 'static,
    {
        let watch = self.watch_raw_sharded(params, resource_version, shard);
        Box::pin(async move { Ok(encode_watch(watch.await?, DecodePool::shared(), state)) })
    }

    /// [`watch_raw`](Self::watch_raw) of one shard (K1); the default ignores the shard.
    fn watch_raw_sharded(
        &self,
        params: WatchParams,
        resource_version: String,
        shard: Option<&ShardSelector>,
    ) -> futures::future::BoxFuture<'static, Result<RawWatchStream, kube::Error>>
    where
        K: Serialize + Send + 'static,
    {
        let _ = shard;
        self.watch_raw(params, resource_version)
    }
}

/// Appends `shardSelector=<wire>` (percent-encoded as a form value, as kube encodes its own
/// parameters) to a request built by kube (K1). No selector, or an empty one (which has no
/// wire form and which the server would refuse): the request is left as it is, and the
/// reflector filters by itself.
fn with_shard(
    mut req: http::Request<Vec<u8>>,
    shard: Option<&ShardSelector>,
) -> Result<http::Request<Vec<u8>>, kube::Error> {
    let Some(wire) = shard.and_then(ShardSelector::wire) else {
        return Ok(req);
    };
    let uri = req.uri().to_string();
    let sep = if uri.contains('?') { '&' } else { '?' };
    let param = form_urlencoded::Serializer::new(String::new())
        .append_pair("shardSelector", &wire)
        .finish();
    let uri: http::Uri =
        format!("{uri}{sep}{param}")
            .parse()
            .map_err(|e: http::uri::InvalidUri| {
                kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(e.into()))
            })?;
    *req.uri_mut() = uri;
    Ok(req)
}

/// Whether a listed (decoded or lean) object is in `shard` (K1), by its uid or namespace.
pub fn listed_in_shard<K: Resource>(shard: &ShardSelector, obj: &Listed<K>) -> bool {
    match obj {
        Listed::Typed(o) => shard.matches_object(&**o),
        Listed::Lean(raw) => {
            let m = raw.meta();
            shard.matches(m.uid(), m.namespace())
        }
    }
}

/// The LIST items' shard check (K1), when the informer has a shard.
fn shard_check<K: Resource + Send + 'static>(
    shard: Option<&ShardSelector>,
) -> Option<ShardCheck<K>> {
    shard
        .cloned()
        .map(|s| Box::new(move |o: &Listed<K>| listed_in_shard(&s, o)) as ShardCheck<K>)
}

/// Sends a LIST request built by kube and decodes its body as it streams in, dropping items
/// outside `shard` unless the server says it filtered (K1).
fn stream_list<K>(
    client: Client,
    req: Result<http::Request<Vec<u8>>, kube::Error>,
    shard: Option<&ShardSelector>,
    codec: ItemCodec<K>,
    admit: Admit<K>,
) -> ListItems<K>
where
    K: Resource + DeserializeOwned + Send + Sync + 'static,
{
    let check = shard_check::<K>(shard);
    Box::pin(async move {
        let mut req = req?;
        req.extensions_mut().insert("list");
        let body = crate::runtime::on_io(async move {
            let body = client.request_stream(req).await?;
            Ok(Box::pin(body) as std::pin::Pin<Box<dyn futures::io::AsyncBufRead + Send>>)
        })
        .await?;
        decode_list_sharded::<K>(body, codec, admit, check).await
    })
}

/// Lists and watches full objects through `kube::Api<K>`.
///
/// With [`content_type`](Self::content_type) set to [`ContentType::Protobuf`], the LISTs and
/// WATCHes of a kind with a protobuf form ask for protobuf (JSON accepted) and read each answer
/// by its `Content-Type`: typed objects decoded from either, lean ones (I7) kept as the
/// protobuf message or the JSON the server sent. Only the raw JSON paths
/// ([`watch_raw`](ListerWatcher::watch_raw)) keep asking for JSON.
pub struct KubeListerWatcher<K: Resource> {
    api: Api<K>,
    plural: String,
    /// `K`'s apiVersion and kind (for its protobuf schema).
    types: (String, String),
    /// Ask for protobuf (set only for a kind with a protobuf form).
    protobuf: bool,
}

impl<K> KubeListerWatcher<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Clone,
    K::Scope: ScopeApi,
{
    /// Over all namespaces, or one when `namespace` is given.
    pub fn new(client: Client, namespace: Option<&str>, dyntype: &K::DynamicType) -> Self {
        let api = K::Scope::api(client, namespace, dyntype);
        Self::from_api(api, dyntype)
    }

    /// From an existing `Api`.
    pub fn from_api(api: Api<K>, dyntype: &K::DynamicType) -> Self {
        KubeListerWatcher {
            api,
            plural: K::plural(dyntype).into_owned(),
            types: (
                K::api_version(dyntype).into_owned(),
                K::kind(dyntype).into_owned(),
            ),
            protobuf: false,
        }
    }

    /// Asking for `content_type` (client-go's `rest.Config.ContentType`). Protobuf is asked for
    /// only when `K` is a kind with a protobuf form (`kinformer::protobuf::kind_schema`) and
    /// not `DynamicObject` (whose custom kinds are JSON only); otherwise this stays JSON.
    pub fn content_type(mut self, content_type: ContentType) -> Self {
        self.protobuf = content_type == ContentType::Protobuf
            && std::any::TypeId::of::<K>() != std::any::TypeId::of::<kube::api::DynamicObject>()
            && kinformer::protobuf::kind_schema(&self.types.0, &self.types.1).is_some();
        self
    }

    /// Whether this lister-watcher asks for protobuf.
    pub fn asks_protobuf(&self) -> bool {
        self.protobuf
    }
}

impl<K> ListerWatcher<K> for KubeListerWatcher<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn list(
        &self,
        params: ListParams,
    ) -> futures::future::BoxFuture<'static, Result<ObjectList<K>, kube::Error>> {
        let api = self.api.clone();
        Box::pin(crate::runtime::on_io(
            async move { api.list(&params).await },
        ))
    }

    fn watch(
        &self,
        params: WatchParams,
        resource_version: String,
    ) -> futures::future::BoxFuture<'static, Result<WatchStream<K>, kube::Error>> {
        self.watch_sharded(params, resource_version, None)
    }

    fn watch_sharded(
        &self,
        params: WatchParams,
        resource_version: String,
        shard: Option<&ShardSelector>,
    ) -> futures::future::BoxFuture<'static, Result<WatchStream<K>, kube::Error>> {
        let watch = self.typed_watch(params, resource_version, shard);
        Box::pin(async move { Ok(watch.await?.map(|ev| ev.and_then(unlisted_event)).boxed()) })
    }

    fn watch_listed(
        &self,
        params: WatchParams,
        resource_version: String,
        shard: Option<&ShardSelector>,
    ) -> futures::future::BoxFuture<'static, Result<ListedWatchStream<K>, kube::Error>> {
        self.typed_watch(params, resource_version, shard)
    }

    fn watch_raw(
        &self,
        params: WatchParams,
        resource_version: String,
    ) -> futures::future::BoxFuture<'static, Result<RawWatchStream, kube::Error>> {
        self.raw_watch(params, resource_version, None)
    }

    fn watch_raw_sharded(
        &self,
        params: WatchParams,
        resource_version: String,
        shard: Option<&ShardSelector>,
    ) -> futures::future::BoxFuture<'static, Result<RawWatchStream, kube::Error>> {
        self.raw_watch(params, resource_version, shard)
    }

    fn watch_lean(
        &self,
        params: WatchParams,
        resource_version: String,
        shard: Option<&ShardSelector>,
        state: Arc<LeanState<K>>,
    ) -> futures::future::BoxFuture<'static, Result<ListedWatchStream<K>, kube::Error>> {
        if !self.protobuf {
            // JSON asked for: kube's watch decoder with the objects left raw, as always.
            let watch = self.raw_watch(params, resource_version, shard);
            return Box::pin(
                async move { Ok(encode_watch(watch.await?, DecodePool::shared(), state)) },
            );
        }
        self.negotiated_watch(params, resource_version, shard, Some(state))
    }

    fn resource_name(&self) -> String {
        self.plural.clone()
    }

    fn list_items(&self, params: ListParams, codec: ItemCodec<K>, admit: Admit<K>) -> ListItems<K> {
        self.list_stream(params, None, codec, admit)
    }

    fn list_items_sharded(
        &self,
        params: ListParams,
        shard: Option<&ShardSelector>,
        codec: ItemCodec<K>,
        admit: Admit<K>,
    ) -> ListItems<K> {
        self.list_stream(params, shard, codec, admit)
    }
}

impl<K> KubeListerWatcher<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// `Api::watch`'s request (with the shard), its objects left raw.
    fn raw_watch(
        &self,
        params: WatchParams,
        resource_version: String,
        shard: Option<&ShardSelector>,
    ) -> futures::future::BoxFuture<'static, Result<RawWatchStream, kube::Error>> {
        let api = self.api.clone();
        let shard = shard.cloned();
        Box::pin(crate::runtime::on_io(async move {
            // `Api::watch`'s request, read by kube's watch decoder with the objects left raw.
            let req = kube::core::Request::new(api.resource_url())
                .watch(&params, &resource_version)
                .map_err(kube::Error::BuildRequest)?;
            let mut req = with_shard(req, shard.as_ref())?;
            req.extensions_mut().insert("watch");
            let events = api.into_client().request_events::<RawJson>(req).await?;
            Ok(events.boxed())
        }))
    }

    /// A LIST page (with the shard), decoded as it streams in.
    fn list_stream(
        &self,
        params: ListParams,
        shard: Option<&ShardSelector>,
        codec: ItemCodec<K>,
        admit: Admit<K>,
    ) -> ListItems<K> {
        let req = kube::core::Request::new(self.api.resource_url())
            .list(&params)
            .map_err(kube::Error::BuildRequest)
            .and_then(|req| with_shard(req, shard));
        let client = self.api.clone().into_client();
        if self.protobuf {
            return negotiated_list(client, req, shard, codec, admit);
        }
        stream_list(client, req, shard, codec, admit)
    }

    /// `Api::watch`'s request (with the shard), sent as kube's `request_events` sends it, or
    /// asking for protobuf (JSON accepted) with the protobuf option; the answer read by its
    /// `Content-Type`. Each JSON line or protobuf frame is decoded into `K` once, by the pool
    /// (or, with one decode thread, the reflector's thread), in order (P8), with exact-size
    /// vectors; the reflector's thread only cuts the body into lines or frames.
    fn typed_watch(
        &self,
        params: WatchParams,
        resource_version: String,
        shard: Option<&ShardSelector>,
    ) -> futures::future::BoxFuture<'static, Result<ListedWatchStream<K>, kube::Error>> {
        self.negotiated_watch(params, resource_version, shard, None)
    }

    /// [`typed_watch`](Self::typed_watch)'s request and reading, with each object decoded
    /// into `K` (`lean` None) or, in the lean mode, encoded by `lean`: a protobuf answer's
    /// objects kept as their protobuf messages, a JSON answer's as their JSON (I7).
    fn negotiated_watch(
        &self,
        params: WatchParams,
        resource_version: String,
        shard: Option<&ShardSelector>,
        lean: Option<Arc<LeanState<K>>>,
    ) -> futures::future::BoxFuture<'static, Result<ListedWatchStream<K>, kube::Error>> {
        let api = self.api.clone();
        let shard = shard.cloned();
        let ask_protobuf = self.protobuf;
        Box::pin(crate::runtime::on_io(async move {
            let req = kube::core::Request::new(api.resource_url())
                .watch(&params, &resource_version)
                .map_err(kube::Error::BuildRequest)?;
            let mut req = with_shard(req, shard.as_ref())?;
            req.extensions_mut().insert("watch");
            // As kube's `request_events`: watch streams are not compressed.
            req.headers_mut().insert(
                http::header::ACCEPT_ENCODING,
                http::HeaderValue::from_static("identity"),
            );
            let client = api.into_client();
            let (protobuf, res) = if ask_protobuf {
                send_negotiated(&client, req).await?
            } else {
                let res = client.send(req.map(kube::client::Body::from)).await?;
                (false, api_errors(res, false).await?)
            };
            let body = http_body_util::BodyExt::into_data_stream(res.into_body());
            let pool = DecodePool::shared();
            Ok(match (protobuf, lean) {
                (true, None) => decode_proto_watch::<K, _>(proto_frames(body), pool),
                (false, None) => decode_listed_watch::<K, _>(watch_lines(body), pool),
                (true, Some(state)) => encode_proto_watch(proto_frames(body), pool, state),
                (false, Some(state)) => encode_json_watch(watch_lines(body), pool, state),
            })
        }))
    }
}

/// Sends `req` asking for protobuf (JSON accepted), as client-go with `ContentType` set; an
/// error status is read as kube reads it (a `Status` body, in either encoding, else its text).
/// Returns whether the answer is protobuf, by its `Content-Type`.
async fn send_negotiated(
    client: &Client,
    mut req: http::Request<Vec<u8>>,
) -> Result<(bool, http::Response<kube::client::Body>), kube::Error> {
    req.headers_mut().insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static(kinformer::protobuf::ACCEPT),
    );
    let res = client.send(req.map(kube::client::Body::from)).await?;
    let protobuf = res
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(kinformer::protobuf::is_protobuf);
    Ok((protobuf, api_errors(res, protobuf).await?))
}

/// An error status read as kube reads it (a `Status` body, protobuf when the answer is, else
/// JSON, else its text with the HTTP code); any other answer passes through.
async fn api_errors(
    res: http::Response<kube::client::Body>,
    protobuf: bool,
) -> Result<http::Response<kube::client::Body>, kube::Error> {
    let status = res.status();
    if status.is_client_error() || status.is_server_error() {
        let body = http_body_util::BodyExt::collect(res.into_body())
            .await?
            .to_bytes();
        let parsed = if protobuf {
            kinformer::protobuf::decode::<kube::core::Status>(&body).ok()
        } else {
            serde_json::from_slice::<kube::core::Status>(&body).ok()
        };
        let s = parsed.unwrap_or_else(|| {
            kube::core::Status::failure(
                String::from_utf8_lossy(&body).trim(),
                "Failed to parse error data",
            )
            .with_code(status.as_u16())
        });
        return Err(kube::Error::Api(s.boxed()));
    }
    Ok(res)
}

/// A LIST asking for protobuf: a protobuf answer read whole and its items decoded (or, lean,
/// encoded as their protobuf messages) on the pool; a JSON answer decoded (or encoded) as it
/// streams in, as [`stream_list`] does.
fn negotiated_list<K>(
    client: Client,
    req: Result<http::Request<Vec<u8>>, kube::Error>,
    shard: Option<&ShardSelector>,
    codec: ItemCodec<K>,
    admit: Admit<K>,
) -> ListItems<K>
where
    K: Resource + DeserializeOwned + Send + Sync + 'static,
{
    let check = shard_check::<K>(shard);
    Box::pin(async move {
        let mut req = req?;
        req.extensions_mut().insert("list");
        enum Body {
            Protobuf(bytes::Bytes),
            Json(std::pin::Pin<Box<dyn futures::io::AsyncBufRead + Send>>),
        }
        let body = crate::runtime::on_io(async move {
            let (protobuf, res) = send_negotiated(&client, req).await?;
            let body = res.into_body();
            Ok(if protobuf {
                Body::Protobuf(http_body_util::BodyExt::collect(body).await?.to_bytes())
            } else {
                let data = http_body_util::BodyExt::into_data_stream(body)
                    .map(|r| r.map_err(std::io::Error::other));
                Body::Json(Box::pin(futures::TryStreamExt::into_async_read(data)))
            })
        })
        .await?;
        match body {
            Body::Json(body) => decode_list_sharded::<K>(body, codec, admit, check).await,
            Body::Protobuf(bytes) => match crate::runtime::io() {
                // The reflector's thread, as the JSON path's splitting (`list_decode`).
                Some(_) => list_decode::decode_protobuf_list::<K>(
                    bytes,
                    codec,
                    admit,
                    check,
                    DecodePool::shared(),
                ),
                None => tokio::task::spawn_blocking(move || {
                    list_decode::decode_protobuf_list::<K>(
                        bytes,
                        codec,
                        admit,
                        check,
                        DecodePool::shared(),
                    )
                })
                .await
                .map_err(|e| kube::Error::Service(Box::new(e)))?,
            },
        }
    })
}

/// Lists and watches only metadata (`PartialObjectMeta<K>`), through kube's
/// `list_metadata`/`watch_metadata`: the server sends `PartialObjectMetadata`, so the cache of a
/// metadata informer holds names, labels and owners without the objects' bodies.
pub struct MetadataListerWatcher<K: Resource> {
    api: Api<K>,
    plural: String,
}

impl<K> MetadataListerWatcher<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Clone,
    K::Scope: ScopeApi,
{
    /// Over all namespaces, or one when `namespace` is given.
    pub fn new(client: Client, namespace: Option<&str>, dyntype: &K::DynamicType) -> Self {
        let api = K::Scope::api(client, namespace, dyntype);
        MetadataListerWatcher {
            api,
            plural: K::plural(dyntype).into_owned(),
        }
    }
}

impl<K> ListerWatcher<PartialObjectMeta<K>> for MetadataListerWatcher<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn list(
        &self,
        params: ListParams,
    ) -> futures::future::BoxFuture<'static, Result<ObjectList<PartialObjectMeta<K>>, kube::Error>>
    {
        let api = self.api.clone();
        Box::pin(crate::runtime::on_io(async move {
            api.list_metadata(&params).await
        }))
    }

    fn watch(
        &self,
        params: WatchParams,
        resource_version: String,
    ) -> futures::future::BoxFuture<'static, Result<WatchStream<PartialObjectMeta<K>>, kube::Error>>
    {
        // One request builder for both: `watch_sharded` without a shard is `watch_metadata`.
        self.watch_sharded(params, resource_version, None)
    }

    fn watch_sharded(
        &self,
        params: WatchParams,
        resource_version: String,
        shard: Option<&ShardSelector>,
    ) -> futures::future::BoxFuture<'static, Result<WatchStream<PartialObjectMeta<K>>, kube::Error>>
    {
        let api = self.api.clone();
        let shard = shard.cloned();
        Box::pin(crate::runtime::on_io(async move {
            // `Api::watch_metadata`'s request (its Accept header asks for
            // PartialObjectMetadata), with the shard.
            let req = kube::core::Request::new(api.resource_url())
                .watch_metadata(&params, &resource_version)
                .map_err(kube::Error::BuildRequest)?;
            let mut req = with_shard(req, shard.as_ref())?;
            req.extensions_mut().insert("watch_metadata");
            let s = api
                .into_client()
                .request_events::<PartialObjectMeta<K>>(req)
                .await?;
            Ok(s.boxed())
        }))
    }

    fn list_items(
        &self,
        params: ListParams,
        codec: ItemCodec<PartialObjectMeta<K>>,
        admit: Admit<PartialObjectMeta<K>>,
    ) -> ListItems<PartialObjectMeta<K>> {
        // The streaming decoder, as the reflector gets it through `list_items_sharded`.
        self.list_items_sharded(params, None, codec, admit)
    }

    fn list_items_sharded(
        &self,
        params: ListParams,
        shard: Option<&ShardSelector>,
        codec: ItemCodec<PartialObjectMeta<K>>,
        admit: Admit<PartialObjectMeta<K>>,
    ) -> ListItems<PartialObjectMeta<K>> {
        let req = kube::core::Request::new(self.api.resource_url())
            .list_metadata(&params)
            .map_err(kube::Error::BuildRequest)
            .and_then(|req| with_shard(req, shard));
        stream_list(self.api.clone().into_client(), req, shard, codec, admit)
    }

    fn resource_name(&self) -> String {
        self.plural.clone()
    }
}

/// The machine's LIST request as kube's [`ListParams`].
pub(crate) fn list_params(req: kinformer::reflector::ListRequest) -> ListParams {
    ListParams {
        label_selector: req.label_selector,
        field_selector: req.field_selector,
        limit: req.limit,
        continue_token: req.continue_token,
        resource_version: req.resource_version,
        version_match: req.version_match.map(|v| match v {
            kinformer::reflector::VersionMatch::NotOlderThan => {
                kube::api::VersionMatch::NotOlderThan
            }
        }),
        ..ListParams::default()
    }
}

/// The machine's WATCH request as kube's [`WatchParams`] and the resourceVersion to watch from.
pub(crate) fn watch_params(req: kinformer::reflector::WatchRequest) -> (WatchParams, String) {
    let params = WatchParams {
        label_selector: req.label_selector,
        field_selector: req.field_selector,
        timeout: Some(req.timeout_seconds),
        bookmarks: req.allow_bookmarks,
        send_initial_events: req.send_initial_events,
    };
    (params, req.resource_version)
}
