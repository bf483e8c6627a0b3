//! The storage (placeholder, described in a later commit).

pub(crate) mod continue_token;
pub(crate) mod object;
pub(crate) mod predicate;
pub(crate) mod store;
pub(crate) mod versioner;
pub(crate) mod watch_cache;
