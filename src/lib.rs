//! # kinformer: the runtime-free core
//!
//! client-go's `tools/cache` state machines in plain Rust: no async runtime, no I/O, no actors.
//! The actix layer (`kinformer-actors`) owns these structs and translates messages into calls,
//! so every rule of the informer (docs/semantics.md ids R*, F*, I*, P*, B*, W*) is testable here
//! deterministically.
//!
//! ## Start here
//!
//! Most users want `kinformer-actors`, which runs these machines as actors against a cluster
//! and re-exports what a controller names. Use this crate to drive a machine yourself, or to
//! test a rule without a runtime: every machine takes inputs (`handle_*`, `add`, `replace`,
//! with the current time where it matters) and hands back what to do (`poll_*`, `pop_batch`).
//!
//! ```
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kinformer::{TraceId, fifo::{DeltaFifo, DeltaFifoOptions}};
//!
//! let mut cm = ConfigMap::default();
//! cm.metadata.namespace = Some("default".into());
//! cm.metadata.name = Some("a".into());
//! let mut fifo = DeltaFifo::new(DeltaFifoOptions::<ConfigMap>::default());
//! fifo.replace(vec![(Arc::new(cm), TraceId(1))], "10")?; // the initial LIST
//! let batch = fifo.pop_batch(256).expect("one key queued");
//! assert_eq!(batch.items[0].key.as_str(), "default/a");
//! fifo.done(batch.token, 0); // applied to the store: the FIFO has synced
//! assert!(fifo.has_synced());
//! # Ok::<(), kinformer::fifo::FifoError>(())
//! ```
//!
//! ## Features
//!
//! This crate has no cargo features. The lean cache mode (I7, [`lean`]) is chosen at run time
//! ([`lean::CacheMode`]), not at build time. Its modules:
//!
//! - [`key`]: object keys (`namespace/name`), key functions over kube's [`kube_core::Resource`],
//!   and [`DeletedFinalStateUnknown`] tombstones.
//! - [`delta`]: [`DeltaType`], [`Delta`], [`Deltas`].
//! - [`exact`]: JSON decoding whose vectors are allocated at their exact size (what a decoded
//!   object holds is what it needs: 17% less for a pod).
//! - [`fifo`]: the `DeltaFifo` state machine (F1–F9).
//! - [`store`]: the indexed, single-writer/lock-free-reader store and its `Lister` (I1–I7).
//! - [`lean`]: the lean cache mode (I7): objects kept as the compressed bytes the server sent,
//!   their metadata parsed, and [`lean::LazyObject`], the object as the pipeline carries it.
//! - [`known`]: the read-only view of the store the FIFO consults ([`known::KnownObjects`]).
//! - [`notification`]: handler notifications; [`coalesce`]: the per-key coalescing buffer of B3.
//! - [`selector`]: label selection over any source of labels (a lean object's parsed metadata),
//!   and the `labelSelector` string form parsed as kube-apiserver parses it (its requirements,
//!   or kube's `Selector`), with its error texts.
//! - [`validation`]: Kubernetes' string checks (label keys and values, DNS names) with
//!   apimachinery's messages.
//! - [`shard`]: KEP-5866 shards: hash ranges over `metadata.uid` or `metadata.namespace`, their
//!   wire form (`shardSelector`), matching and range algebra.
//! - [`workqueue`]: client-go's workqueue logic (dedup, delaying, rate limiters), clock injected.
//! - [`reflector`]: the reflector's resourceVersion rules (R1–R4).
//! - [`backoff`]: the reflector's restart backoff (R8).
//! - [`trace`]: the trace id carried by every delta and notification (T1).
//! - [`leader_election`]: client-go's leader election over a Lease (one leader among replicas).
//! - [`series`]: bounded rings of live samples (rates from counters, mean latencies from
//!   histograms) for the telemetry debug page, sampled with time passed in.
//! - [`protobuf`]: Kubernetes' protobuf encoding read straight into the k8s-openapi types
//!   (envelope, lists, watch frames; schema tables generated from the Go types).
//! - [`membership`]: Lease-based membership of a sharded controller's replicas and the
//!   consistent-hash ring that assigns hash ranges to them.
//!
//! Objects are held as `Arc<K>` (or, in the pipeline, `Arc<LazyObject<K>>`) everywhere: handing
//! one out never deep-copies it.

#![warn(missing_docs)]

pub mod backoff;
pub mod coalesce;
pub mod delta;
pub mod exact;
pub mod fifo;
pub mod key;
pub mod known;
pub mod leader_election;
pub mod lean;
pub mod membership;
pub mod notification;
pub mod processor;
// Only where instances are shared between crates: see the module.
#[cfg(all(feature = "prebuilt", debug_assertions, not(test)))]
#[doc(hidden)]
pub mod prebuilt;
pub mod protobuf;
pub mod reflector;
pub mod resource_version;
pub mod selector;
pub mod series;
pub mod server_health;
pub mod shard;
pub mod store;
pub mod trace;
pub mod validation;
pub mod workqueue;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod pipeline_tests;

pub use delta::{Delta, DeltaObject, DeltaType, Deltas};
pub use key::{DeletedFinalStateUnknown, KeyError, KeyFunc, ObjectKey, meta_namespace_key};
pub use trace::TraceId;
