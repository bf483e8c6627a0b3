//! kinformer-actors' integration tests, one module per file, in one test binary: each file used
//! to be a binary of its own, linking kube, k8s-openapi and actix again (issue 28). `otel`,
//! `trace`, `trace_alloc`, `lifecycle`, `soak` and `kube_runtime` stay separate (see actors/Cargo.toml).

mod actix_api;
mod backpressure;
mod bad_input;
mod chaos;
mod client_layers;
mod common;
mod decode_order;
mod fifo_modes;
mod fuzz_decode;
mod informer;
mod leader_election;
mod lean;
mod membership;
mod processor;
mod protobuf;
mod recovery;
mod reflector_faults;
mod runtimes;
mod server_return;
mod sharding;
mod telemetry;
