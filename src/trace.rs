//! Trace identifiers (docs/semantics.md T1).
//!
//! Every watch event gets a [`TraceId`] when the reflector receives it; the id travels with the
//! [`Delta`](crate::Delta) through the FIFO and with the resulting notification to each handler,
//! so one object's path through the pipeline can be reassembled from the trace sink.

use std::fmt;

/// Identifies one watch event (or one listed object) along its path through the pipeline.
///
/// `TraceId::NONE` (zero) means "not traced", e.g. for deltas created by a resync.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TraceId(pub u64);

impl TraceId {
    /// The absent trace id.
    pub const NONE: TraceId = TraceId(0);

    /// True when this id is [`TraceId::NONE`].
    pub fn is_none(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Debug for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceId({:#x})", self.0)
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}
