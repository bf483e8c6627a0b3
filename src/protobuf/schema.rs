//! The schema tables: each message's fields by number, with the JSON name and Go semantics the
//! decoder needs to produce what the JSON of the same object would say.
//!
//! Generated (`schema_gen.rs`, by `generate.py`) from the Go types of `k8s.io/api` (core,
//! apps, batch, coordination, rbac, networking, discovery: all `v1`) and
//! `k8s.io/apimachinery` (`meta/v1`). Self-contained: nothing here decodes, so an encoder (the
//! simulated server's) can use the same tables.

// Every generated table (`CORE_V1_POD`, `META_V1_OBJECT_META`, ...) and `KINDS`.
pub use super::schema_gen::*;
pub use super::types::{Field, Kind, Message};

/// The schema of a kind (or its list, `…List`) by apiVersion and kind, e.g. (`v1`,
/// `ConfigMap`) or (`apps/v1`, `DeploymentList`). `None`: no protobuf form here (custom kinds,
/// groups these tables do not cover).
pub fn kind_schema(api_version: &str, kind: &str) -> Option<&'static Message> {
    kind_index(api_version, kind).map(|i| KINDS[i].2)
}

/// The position of (apiVersion, kind) in [`KINDS`]: a small number that names a kind's schema
/// (the lean cache mode keeps it with each object stored as protobuf).
pub fn kind_index(api_version: &str, kind: &str) -> Option<usize> {
    KINDS
        .binary_search_by(|(v, k, _)| (*v, *k).cmp(&(api_version, kind)))
        .ok()
}

/// The kind at position `i` of [`KINDS`] ([`kind_index`]): (apiVersion, kind, schema).
pub fn kind_at(i: usize) -> Option<(&'static str, &'static str, &'static Message)> {
    KINDS.get(i).copied()
}
