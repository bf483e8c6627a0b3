//! LIST (`k8s.io/apiserver/pkg/endpoints/handlers/get.go` `ListResource`): options decoded and
//! validated, the state read as 1.34's `CacheDelegator.GetList` reads it (the latest, or the one
//! at an exact resourceVersion from the watch cache's snapshots or etcd's history), pages cut
//! with continue tokens, and the response streamed in chunks from the objects' stored bytes.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use http::Response;
use serde_json::{Value, json};

use super::faults::Count;
use super::negotiation::Repr;
use super::request_info::Target;
use super::response::{self as resp, Body, BodyError};
use super::shared::Shared;
use super::table;
use crate::apimachinery::errors::ApiError;
use crate::apimachinery::options::ListOptions;
use crate::apimachinery::schema::ResourceDef;
use crate::apimachinery::selector::{parse_fields, parse_labels};
use crate::apimachinery::util::Query;
use crate::registry::generic::shard_selector;
use crate::storage::continue_token;
use crate::storage::object::{StoredObject, strip_rv};
use crate::storage::predicate::{Selectors, in_scope, matches};
use crate::storage::versioner::parse_rv_etcd;
use crate::storage::watch_cache::wait_until_fresh;

/// Serves a LIST.
pub(crate) async fn list(
    shared: &Arc<Shared>,
    t: &Target,
    query: &Query,
    repr: Repr,
) -> Result<Response<Body>, ApiError> {
    let def = &t.def;
    let store = &shared.store;
    // ListResource: DecodeParameters (400), SetListOptionsDefaults (nothing for a list), then
    // ValidateListOptions (422).
    let mut opts = ListOptions::decode(query, false)?;
    opts.set_defaults();
    let labels = parse_labels(query)?;
    let fields = parse_fields(&def.field_labels, query)?;
    let errs = opts.errors();
    if !errs.is_empty() {
        return Err(ApiError::invalid_list_options(&errs));
    }
    // `Store.ListPredicate` parses the shard selector before the storage looks at the
    // continue token or the resourceVersion.
    let shard = shard_selector(
        shared.faults.shards_lists_and_watches(),
        &opts.shard_selector,
    )?;
    let sel = Selectors {
        labels: &labels,
        fields: &fields,
        shard: shard.as_ref(),
    };
    let rv = opts.resource_version.as_str();
    let rvm = opts.resource_version_match.as_str();
    // `storage.ValidateListOptions` (`staging/src/k8s.io/apiserver/pkg/storage/interfaces.go`),
    // which `CacheDelegator.GetList` runs before choosing a store: the continue token first,
    // else the resourceVersion, both as 400s.
    let token = if opts.continue_token.is_empty() {
        None
    } else {
        let c = continue_token::decode(&opts.continue_token, t.namespace.as_deref())?;
        if !rv.is_empty() && rv != "0" {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        Some(c)
    };
    let requested = match (&token, rv) {
        (None, rv) if !rv.is_empty() => Some(parse_rv_etcd(rv)?),
        _ => None,
    };
    // The watch cache ignores the limit at resourceVersion 0 (`computeListLimit`).
    let limit =
        (opts.limit > 0 && rv != "0").then(|| usize::try_from(opts.limit).unwrap_or(usize::MAX));
    // Where 1.34 reads (`delegator.ShouldDelegateList`, the cache's `waitUntilFreshAndList`):
    // `Exact`, the legacy exact match (a limit with a resourceVersion) and continuations at
    // their token's resourceVersion read the state at that RV, from the watch cache's snapshots
    // (ListFromCacheSnapshot) or else etcd's history; everything else reads the latest state,
    // after waiting for the cache to reach the requested RV.
    let exact = match (&token, requested) {
        (Some(c), _) => u64::try_from(c.rv).ok(),
        (None, Some(n)) if n > 0 && (rvm == "Exact" || (rvm.is_empty() && limit.is_some())) => {
            Some(n)
        }
        _ => None,
    };
    let wait_for = exact.or(requested).filter(|n| *n > 0);
    if let Some(n) = wait_for {
        // The cache serves a read at an RV it has not reached (consistent reads are supported
        // with a 1.34 etcd): `waitUntilFreshAndBlock`, then 504 `ResourceVersionTooLarge`.
        wait_until_fresh(store, n, shared.rv_wait).await?;
    }
    let after = token.map(|c| (c.key.clone(), c));
    let (map, list_rv) = match exact {
        Some(n) => match store.snapshot_at(def, n) {
            Ok(map) => (map, n),
            // Older than the window: etcd's compacted revision (`interpretListError`).
            Err(_) => {
                return Err(match after {
                    Some((_, c)) => {
                        shared
                            .faults
                            .bump_on(Count::ExpiredContinues, repr == Repr::Protobuf);
                        // `handleCompactedErrorForPaging`: with a token to go on at the latest RV.
                        let mut e = ApiError::expired(INCONSISTENT_CONTINUE);
                        e.continue_token = Some(continue_token::encode_start(-1, &c.start));
                        e
                    }
                    None => {
                        ApiError::expired("The resourceVersion for the provided list is too old.")
                    }
                });
            }
        },
        None => store.snapshot(def, limit.is_some()),
    };
    let after = after.map(|(k, _)| k);
    // `Cacher.GetList`: the items under the prefix are filtered until the limit is reached;
    // a continue token follows when any item (matching or not) is left after that point, and
    // `remainingItemCount` (`PrepareContinueToken`) only without selectors, the shard selector
    // included (`SelectionPredicate.Empty`).
    let ns = t.namespace.as_deref();
    let mut scope = in_scope(&map, ns, after);
    let mut items: Vec<Arc<StoredObject>> = Vec::new();
    let mut rest = 0;
    for o in scope.by_ref() {
        if matches(o, ns, sel) {
            items.push(o.clone());
            if limit.is_some_and(|l| items.len() >= l) {
                rest = scope.count();
                break;
            }
        }
    }
    let mut continue_token = None;
    let mut remaining = None;
    if rest > 0
        && let Some(last) = items.last()
    {
        continue_token = Some(continue_token::encode(list_rv, last, ns.is_some()));
        if sel.is_empty() {
            remaining = Some(rest);
        }
    }
    // Tables (kubectl's output) are left alone.
    let strip = shared.faults.strips_resource_versions() && !matches!(repr, Repr::Table(_));
    // `SetShardInfoOnList` sets `metadata.shardInfo` on the typed list; the handler's
    // conversions to a PartialObjectMetadataList or a Table copy only the resourceVersion,
    // continue and remainingItemCount (`asPartialObjectMetadataList`, `DefaultTableConvertor`),
    // so those carry none.
    let shard_info = shard.as_ref().map(ToString::to_string);
    if strip {
        shared.faults.stripped(items.len(), repr == Repr::Protobuf);
    }
    match repr {
        Repr::Object => Ok(render_list_full(
            def,
            std::mem::take(&mut items),
            ListMeta {
                rv: list_rv,
                continue_token,
                remaining,
                shard_info,
            },
            strip,
        )),
        Repr::Protobuf => {
            let lm = ListMeta {
                rv: list_rv,
                continue_token,
                remaining,
                shard_info,
            };
            let values: Vec<Value> = items
                .iter()
                .map(|o| {
                    o.to_value(def).map(|mut v| {
                        if strip {
                            strip_rv(&mut v);
                        }
                        v
                    })
                })
                .collect::<Result<_, _>>()?;
            let mut meta = json!({"resourceVersion": lm.rv.to_string()});
            if let Some(m) = meta.as_object_mut() {
                if let Some(c) = &lm.continue_token {
                    m.insert("continue".into(), json!(c));
                }
                if let Some(r) = lm.remaining {
                    m.insert("remainingItemCount".into(), json!(r));
                }
            }
            // A list carrying `metadata.shardInfo` (ListMeta field 5, KEP-5866) stays JSON, as
            // the sim answered it before its encoder was the library's; an object the schema
            // does not cover is answered as JSON too.
            let encoded = if lm.shard_info.is_some() {
                None
            } else {
                kinformer::protobuf::encode_list(&def.api_version, &def.kind, &meta, &values).ok()
            };
            Ok(match encoded {
                Some(b) => resp::full(200, super::negotiation::PROTOBUF, Bytes::from(b)),
                None => render_list_full(def, std::mem::take(&mut items), lm, strip),
            })
        }
        Repr::Metadata => {
            let items: Vec<Value> = items
                .iter()
                .map(|o| {
                    o.to_value(def).map(|v| {
                        let mut m = table::partial_metadata(&v);
                        if strip {
                            strip_rv(&mut m);
                        }
                        m
                    })
                })
                .collect::<Result<_, _>>()?;
            let mut meta = json!({"resourceVersion": list_rv.to_string()});
            if let (Some(c), Some(m)) = (&continue_token, meta.as_object_mut()) {
                m.insert("continue".into(), json!(c));
            }
            Ok(resp::json(
                200,
                &json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": items}),
            ))
        }
        Repr::Table(inc) => {
            let objs: Vec<Value> = items
                .iter()
                .map(|o| o.to_value(def))
                .collect::<Result<_, _>>()?;
            Ok(resp::json(
                200,
                &table::table(def, &objs, list_rv, continue_token.as_deref(), inc),
            ))
        }
    }
}

/// etcd3's `inconsistentContinue` (`staging/src/k8s.io/apiserver/pkg/storage/etcd3/errors.go`).
const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

const LIST_CHUNK: usize = 256 * 1024;

/// Appends a list item, without its resourceVersion when `strip`.
fn write_item(def: &ResourceDef, o: &StoredObject, strip: bool, out: &mut BytesMut) {
    if strip {
        o.write_without_rv(def, true, out);
    } else {
        o.write_list_item(def, out);
    }
}

/// A list's `metav1.ListMeta`.
#[derive(Debug, Default)]
pub(crate) struct ListMeta {
    /// `resourceVersion`.
    pub rv: u64,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `remainingItemCount`.
    pub remaining: Option<usize>,
    /// `shardInfo.selector`: the canonical form of the shard selector applied (KEP-5866).
    pub shard_info: Option<String>,
}

/// A list response streamed in chunks from pre-serialized items (items without their
/// resourceVersion when `strip`).
pub(crate) fn render_list_full(
    def: &Arc<ResourceDef>,
    items: Vec<Arc<StoredObject>>,
    lm: ListMeta,
    strip: bool,
) -> Response<Body> {
    let mut meta = serde_json::Map::new();
    meta.insert("resourceVersion".into(), json!(lm.rv.to_string()));
    if let Some(c) = lm.continue_token {
        meta.insert("continue".into(), json!(c));
    }
    if let Some(r) = lm.remaining {
        meta.insert("remainingItemCount".into(), json!(r));
    }
    if let Some(s) = lm.shard_info {
        meta.insert("shardInfo".into(), json!({ "selector": s }));
    }
    let header = format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[",
        Value::String(def.list_kind()),
        Value::String(def.api_version.clone()),
        Value::Object(meta)
    );
    let total: usize = items.iter().map(|o| o.len() + 1).sum::<usize>() + header.len() + 2;
    let def = def.clone();
    if total <= LIST_CHUNK {
        let mut out = BytesMut::with_capacity(total);
        out.put_slice(header.as_bytes());
        for (i, o) in items.iter().enumerate() {
            if i > 0 {
                out.put_u8(b',');
            }
            write_item(&def, o, strip, &mut out);
        }
        out.put_slice(b"]}");
        return resp::json_bytes(200, out.freeze());
    }
    struct St {
        def: Arc<ResourceDef>,
        items: Vec<Arc<StoredObject>>,
        pos: usize,
        header: Option<String>,
        done: bool,
        strip: bool,
    }
    let st = St {
        def,
        items,
        pos: 0,
        header: Some(header),
        done: false,
        strip,
    };
    let s = futures::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        let mut out = BytesMut::with_capacity(LIST_CHUNK + 8192);
        if let Some(h) = st.header.take() {
            out.put_slice(h.as_bytes());
        }
        while st.pos < st.items.len() && out.len() < LIST_CHUNK {
            if st.pos > 0 {
                out.put_u8(b',');
            }
            write_item(&st.def, &st.items[st.pos], st.strip, &mut out);
            st.pos += 1;
        }
        if st.pos >= st.items.len() {
            out.put_slice(b"]}");
            st.done = true;
        }
        Some((Ok::<Bytes, BodyError>(out.freeze()), st))
    });
    resp::stream(200, s)
}
