//! What the HTTP routing (`server`) and the watch streams (`watch`) both use: the state shared
//! by every connection, the negotiated representation of objects, and the scope/selector filter.
//!
//! It sits below both so that `server` depends on `watch` and never the other way round.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::apimachinery::selector::{FieldSelector, LabelSelector};
use crate::harness::churn::ChurnHandle;
use crate::server::counters::RequestCounters;
use crate::server::faults::{FaultState, Faults};
use crate::server::table::IncludeObject;
use crate::storage::object::StoredObject;
use crate::storage::store::Store;

/// State shared by every connection.
#[derive(Debug)]
pub(crate) struct Shared {
    pub store: Arc<Store>,
    pub faults: Arc<FaultState>,
    pub requests: RequestCounters,
    pub bookmark_interval: Duration,
    pub auto_namespaces: bool,
    pub max_body: usize,
    pub server_address: String,
    pub shutdown: watch::Receiver<bool>,
    pub churn: Mutex<Option<ChurnHandle>>,
    /// How long a read at a future resourceVersion waits ([`crate::SimConfig::resource_version_wait`]).
    pub rv_wait: Duration,
}

impl Shared {
    /// The public fault-injection handle over this server's fault state and store.
    pub(crate) fn faults_handle(&self) -> Faults {
        Faults {
            state: self.faults.clone(),
            store: self.store.clone(),
        }
    }
}

/// How objects are rendered, negotiated from `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repr {
    /// The full object (`application/json`).
    Object,
    /// `PartialObjectMetadata` / `PartialObjectMetadataList`.
    Metadata,
    /// A `meta.k8s.io/v1` Table, with `includeObject`.
    Table(IncludeObject),
}

/// Whether `obj` is in scope and matches both selectors.
pub(crate) fn matches(
    obj: &StoredObject,
    ns: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> bool {
    ns.is_none_or(|n| obj.namespace == n)
        && (labels.is_empty() || labels.matches(&obj.labels))
        && (fields.is_empty() || fields.matches(|f| obj.field(f)))
}
