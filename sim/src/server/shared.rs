//! What every connection of the server shares: the storage and registry it serves, the request
//! counters and fault injection points, its settings, and what is mounted under `/sim/`.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Response};
use tokio::sync::watch;

use super::counters::RequestCounters;
use super::faults::FaultState;
use super::response::Body;
use crate::apimachinery::errors::ApiError;
use crate::apimachinery::util::Query;
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
    /// How long a read at a future resourceVersion waits ([`crate::SimConfig::resource_version_wait`]).
    pub rv_wait: Duration,
    /// What answers `/sim/...` (the test harness's control endpoint), if anything.
    pub mount: Option<Arc<dyn Mount>>,
}

/// A handler mounted under `/sim/`, as kube-apiserver mounts handlers that are not REST
/// resources on its `NonGoRestfulMux`: the server routes to it without knowing what it does,
/// so that the test harness stays above the server.
pub(crate) trait Mount: Send + Sync + std::fmt::Debug {
    /// Answers `method` on `/sim/<path...>` (the segments after `sim`, percent-decoded).
    fn handle(
        &self,
        method: &Method,
        path: &[String],
        query: &Query,
    ) -> Result<Response<Body>, ApiError>;
}
