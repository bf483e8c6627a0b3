//! Interop: kinformer informers seen through other libraries' interfaces.
//!
//! Owns: [`kube_runtime`] (feature `kube-runtime`): an informer as kube-rs's watcher event
//! stream, trigger stream and `reflector::Store`, so that `kube::runtime::Controller` runs on it.
//!
//! Imports: `informer` (the handle it adapts), what sits below it (`telemetry`'s `FifoStatus`,
//! to wait for the initial list), `config`, `error`, `handler`, `object`, `runtime`; it sits on
//! top, beside `informer`, and nothing imports it but `lib.rs`.

#[cfg(feature = "kube-runtime")]
pub(crate) mod kube_runtime;
