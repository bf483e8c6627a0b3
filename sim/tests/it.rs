//! kinformer-sim's integration tests, one module per file, in one test binary (one link instead
//! of one per file, issue 28).

mod api;
mod apply;
mod bad_requests;
mod bench_twin;
mod binary;
mod common;
mod faults;
mod kube_differences;
mod kubectl;
mod lifecycle;
mod object_fidelity;
mod protobuf;
mod request_fidelity;
mod runtime;
mod sharding;
mod validation;
mod watch_fidelity;
