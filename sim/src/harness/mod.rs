//! The test harness (placeholder, described in a later commit).

pub(crate) mod churn;
pub(crate) mod control;
pub(crate) mod demo;
pub(crate) mod faults;
pub(crate) mod kubeconfig;
pub(crate) mod kubelet;
