//! The registry (placeholder, described in a later commit).

pub(crate) mod apply;
pub(crate) mod defaults;
pub(crate) mod generic;
pub(crate) mod smp;
pub(crate) mod strategy;
