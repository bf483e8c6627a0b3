//! Telemetry: what the actors record about themselves and how it is read.
//!
//! Owns: [`stats`] (the FIFO's, indexer's and listeners' live counters), [`health`] (the
//! reflector's health), [`trace`] (message traces and the trace sink), [`metrics`]
//! (`Telemetry`: Prometheus metrics, health and debug reports) and [`endpoint`] (its HTTP
//! endpoint).
//!
//! Imports: only the base files (`config`, `object`). Never the actors (`pipeline`),
//! `listwatch`, `controller` or `informer`.

pub(crate) mod endpoint;
pub(crate) mod health;
pub(crate) mod metrics;
pub(crate) mod probe;
pub(crate) mod stats;
pub mod trace;
