//! What telemetry reads of an informer and of a workqueue: the type-erased views
//! ([`InformerProbe`], [`WorkQueueProbe`]) that the informer's shared state and the workqueue
//! implement and [`Telemetry`](crate::Telemetry) reads at scrape time.
//!
//! They live here, below `metrics`, so that the informer and the workqueue implement them
//! without importing `metrics`, and `metrics` reads them without importing the informer or the
//! workqueue: no import circle between them.

use std::sync::Arc;

use kinformer::{lean::LeanStats, workqueue::WorkQueueMetrics};

use crate::telemetry::{
    health::ReflectorStatus,
    stats::{FifoStatus, ListenerStats},
};

/// Where an informer is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    Idle,
    Running,
    Stopped,
}

impl Lifecycle {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Idle => "idle",
            Lifecycle::Running => "running",
            Lifecycle::Stopped => "stopped",
        }
    }
}

/// What telemetry reads of an informer, type-erased (implemented by the informer's shared
/// state; see `informer/shared_informer.rs`).
pub(crate) trait InformerProbe: Send + Sync {
    fn resource(&self) -> &str;
    fn type_name(&self) -> &'static str;
    fn label_selector(&self) -> Option<&str>;
    fn field_selector(&self) -> Option<&str>;
    fn reflector(&self) -> &ReflectorStatus;
    fn fifo(&self) -> &FifoStatus;
    fn store_objects(&self) -> usize;
    /// The lean mode's counters (I7); None in the typed mode.
    fn lean_stats(&self) -> Option<LeanStats>;
    fn lifecycle(&self) -> Lifecycle;
    fn listeners(&self) -> Vec<Arc<ListenerStats>>;
}

/// What telemetry reads of a workqueue, type-erased (see `controller/workqueue.rs`).
pub(crate) trait WorkQueueProbe: Send + Sync {
    fn metrics(&self) -> WorkQueueMetrics;
}
