//! kinformer-actors' integration tests, one module per file, in one test binary: each file used
//! to be a binary of its own, linking kube, k8s-openapi and actix again (issue 28). `otel`,
//! `trace`, `trace_alloc` and `lifecycle` stay separate (see actors/Cargo.toml). `soak` is
//! ignored, so it runs only when asked for, alone (`--ignored soak::soak_memory_is_flat`), and
//! its process-wide memory and thread counts see no other test. `kube_runtime` needs the
//! crate's `kube-runtime` feature, which `cargo test --workspace` turns on (kube-controllers).

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
#[cfg(feature = "kube-runtime")]
mod kube_runtime;
mod layers;
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
mod soak;
mod telemetry;
mod workqueue;
