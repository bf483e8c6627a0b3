//! What every layer shares (placeholder, described in a later commit).

pub(crate) mod errors;
pub(crate) mod options;
pub(crate) mod schema;
pub(crate) mod selector;
pub(crate) mod util;
