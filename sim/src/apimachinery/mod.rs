//! What every layer shares, as `k8s.io/apimachinery` is shared by kube-apiserver's layers:
//! `Status` errors with kube-apiserver's codes, reasons and causes (`errors`); request options
//! as decoded and validated (`options`: `ListOptions`, `DeleteOptions`, write options, patch
//! types); the kinds served and their group, version, plural and scope (`schema`, with the
//! public `CustomResource` and `Scope`); label and field selectors (`selector`, label selectors
//! parsed by `kinformer::selector`, the parser the informer's listers use); KEP-5866 shard
//! selectors (`sharding`: the `shardSelector` parser, FNV-1a hash, matching); Kubernetes' string
//! checks (`validation`: `kinformer::validation`, re-exported); and small helpers: timestamps,
//! UIDs, query strings (`util`).
//!
//! The bottom layer: it imports nothing else of the crate. Every other folder may import it.

pub(crate) mod errors;
pub(crate) mod options;
pub(crate) mod schema;
pub(crate) mod selector;
pub(crate) mod sharding;
pub(crate) mod util;
pub(crate) use kinformer::validation;
