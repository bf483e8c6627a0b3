//! The storage, as kube-apiserver's `k8s.io/apiserver/pkg/storage` (etcd3 and the cacher):
//! the versioned store with one global resourceVersion and a per-resource window of recent
//! events (`store`), the stored form of an object (`object`), the watch cache's rule that a
//! read at a future resourceVersion waits (`watch_cache`), continue tokens
//! (`continue_token`), the selection predicate over stored objects (`predicate`) and the
//! parsing of resourceVersions (`versioner`).
//!
//! It knows no API semantics (no strategies, no defaulting, no kubelet): a write is a closure
//! the registry passes to [`store::Store::write`]. Imports only `crate::apimachinery`.

pub(crate) mod continue_token;
pub(crate) mod object;
pub(crate) mod predicate;
pub(crate) mod store;
pub(crate) mod versioner;
pub(crate) mod watch_cache;
