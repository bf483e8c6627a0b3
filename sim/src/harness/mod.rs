//! The test harness, apart from the server and driving it as a client would: the fault
//! injector tests hold (`faults::Faults`, arming the server's injection points), the `/sim/`
//! control endpoint mounted on the server (`control`), seeded churn (`churn`), the demo
//! objects (`demo`), the kubelet stand-in that finishes graceful pod deletion (`kubelet`:
//! it watches pods and deletes them through the registry), the namespace controller stand-in
//! that empties and removes terminating namespaces (`namespaces`), the garbage collector
//! stand-in for ownerReferences and the `foregroundDeletion`/`orphan` finalizers (`gc`) and
//! the kubeconfig file (`kubeconfig`).
//!
//! The top layer: it may import `crate::server`, `crate::registry`, `crate::storage` and
//! `crate::apimachinery`; nothing imports it but the crate root (`lib.rs`), which assembles a
//! [`crate::Sim`].

pub(crate) mod churn;
pub(crate) mod control;
pub(crate) mod demo;
pub(crate) mod faults;
pub(crate) mod gc;
pub(crate) mod kubeconfig;
pub(crate) mod kubelet;
pub(crate) mod namespaces;
