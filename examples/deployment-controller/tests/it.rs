//! The deployment controller's integration tests, one module per file, in one test binary (one
//! link instead of one per file, issue 28).

mod binary;
// The workspace's shared integration-test helpers (sim start, waits with deadlines).
#[path = "../../../tests/common/mod.rs"]
mod common;
mod controller;
mod kubectl_rollout;
mod leader;
mod logs;
mod replay;
mod ring;
mod sharded;
mod trace;
