//! Embedded-mode scaffolding: what the demo needs around the simulated API server, and nothing
//! a controller against a real cluster uses.
//!
//! - [`cluster`]: a simulation of the ReplicaSet controller, the kubelet's readiness and the
//!   garbage collector, which the simulated API server does not run.
//! - [`demo`]: the scenario the embedded demo plays (create, scale, roll out, delete).
//! - [`scale`]: the scale-out scenario (`--scale-scenario`): ring replicas 3 → 2 → 4.

pub mod cluster;
pub mod demo;
pub mod scale;
