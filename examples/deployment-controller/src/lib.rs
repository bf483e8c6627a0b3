//! kube-controller-manager's deployment controller, built on kinformer's shared informers,
//! listers and workqueue: the project's main example, as a crate a user can copy.
//!
//! - [`controller`]: the informers, event handlers, workqueue and workers; it claims
//!   ReplicaSets (adoption, release) and executes the plans the reconcile logic returns.
//! - [`reconcile`]: the pure reconcile logic (no I/O, no clock), split as upstream's
//!   `pkg/controller/deployment` is (sync, rolling, recreate, progress, revision history,
//!   adoption, utilities), unit-tested.
//! - [`shard`], [`ring`]: one replica of a sharded controller, and the replicas on the Lease
//!   ring (docs/scaling-out.md).
//! - [`cli`]: the `deployment-controller` program itself (flags, the embedded demo, a real
//!   cluster, leader election); the binary's `main` only calls it.
//! - [`embedded`]: scaffolding for the embedded demo only (a simulation of the parts of a
//!   cluster the simulated API server does not run, and the demo scenario); not needed
//!   against a real cluster.

pub mod cli;
pub mod controller;
pub mod embedded;
pub mod leader;
pub mod reconcile;
pub mod retry;
pub mod ring;
pub mod shard;

/// The reconcile logic under its former module name (`deployment_controller::sync`), kept so
/// existing imports still work; new code uses [`reconcile`].
pub use reconcile as sync;
