//! Telemetry: what the actors record about themselves and how it is read.
//!
//! Owns: [`stats`] (the FIFO's, indexer's and listeners' live counters), [`health`] (the
//! reflector's health), [`trace`] (message traces and the trace sink), [`probe`] (what
//! telemetry reads of an informer and of a workqueue), [`metrics`] (`Telemetry`: Prometheus
//! metrics, health and debug reports), [`series`] (the live series the debug page charts) and
//! [`endpoint`] (its HTTP endpoint).
//!
//! Imports: only the base files (`config`, `object`). Never the actors (`pipeline`),
//! `listwatch`, `controller` or `informer`. It sits below the pipeline because the actors
//! record into it; it reads informers and workqueues only through the [`probe`] traits they
//! implement, and `Telemetry::register_informer` / `register_workqueue` are defined beside
//! what they register (`informer/shared_informer.rs`, `controller/workqueue.rs`).

pub(crate) mod endpoint;
pub(crate) mod health;
pub(crate) mod metrics;
#[cfg(feature = "otel")]
pub mod otel;
pub(crate) mod probe;
pub(crate) mod series;
pub(crate) mod stats;
pub mod trace;
