//! The storage (placeholder, described in a later commit).

pub(crate) mod object;
pub(crate) mod store;
