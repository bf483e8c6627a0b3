//! The fault-control endpoint (`/sim/...`), for the binary and for clients in other processes:
//! each route calls the same [`Faults`] handle a test holds, reads the request counters or the
//! resourceVersion, or starts and stops churn. It is mounted on the server's `/sim/` prefix
//! ([`Mount`]); the server never imports it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http::{Method, Response};
use serde_json::{Value, json};

use super::churn::{self, ChurnConfig, ChurnCounts, ChurnHandle};
use super::faults::Faults;
use crate::apimachinery::errors::ApiError;
use crate::apimachinery::util::Query;
use crate::server::counters::{RequestCounters, Verb};
use crate::server::faults::ExpireMode;
use crate::server::response::{self as resp, Body};
use crate::server::shared::Mount;
use crate::storage::store::Store;

/// What the control endpoint acts on, and the churn it owns (the one `/sim/churn` reports).
#[derive(Debug)]
pub(crate) struct Control {
    pub faults: Faults,
    pub requests: RequestCounters,
    pub store: Arc<Store>,
    churn: Mutex<Option<ChurnHandle>>,
}

impl Control {
    /// A control endpoint over these handles, with no churn running.
    pub(crate) fn new(faults: Faults, requests: RequestCounters, store: Arc<Store>) -> Self {
        Self {
            faults,
            requests,
            store,
            churn: Mutex::new(None),
        }
    }

    fn churn_slot(&self) -> MutexGuard<'_, Option<ChurnHandle>> {
        // A ChurnHandle has no invariant a panic could break; a poisoned lock is safe to reuse.
        self.churn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `handle` the owned churn, stopping the one it replaces.
    pub(crate) fn replace_churn(&self, handle: ChurnHandle) {
        if let Some(old) = self.churn_slot().replace(handle) {
            old.stop();
        }
    }

    /// Stops the owned churn, if any, and returns its counts.
    pub(crate) fn stop_churn(&self) -> Option<ChurnCounts> {
        self.churn_slot().take().map(|h| {
            h.stop();
            h.counts()
        })
    }

    /// Counts of the owned churn, if one runs.
    pub(crate) fn churn_counts(&self) -> Option<ChurnCounts> {
        self.churn_slot().as_ref().map(ChurnHandle::counts)
    }
}

impl Mount for Control {
    fn handle(
        &self,
        method: &Method,
        rest: &[String],
        query: &Query,
    ) -> Result<Response<Body>, ApiError> {
        let faults = &self.faults;
        let ok = |v: Value| Ok(resp::json(200, &v));
        let n = || {
            query
                .get("n")
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(1)
        };
        let code = || {
            query
                .get("code")
                .and_then(|v| v.parse::<u16>().ok())
                .unwrap_or(500)
        };
        let retry = || {
            query
                .get("retryAfter")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(1)
        };
        let on = || !matches!(query.get("on"), Some("false" | "0"));
        let r: Vec<&str> = rest.iter().map(String::as_str).collect();
        let post = *method == Method::POST;
        let get = *method == Method::GET;
        match r.as_slice() {
            ["faults"] if get => ok(json!(faults.counters())),
            ["faults", "drop-watches"] if post => {
                faults.drop_watches();
                ok(json!({"ok": true}))
            }
            ["faults", "fail-lists"] if post => {
                faults.fail_next(
                    query.non_empty("resource"),
                    Verb::List,
                    n(),
                    code(),
                    retry(),
                );
                ok(json!({"ok": true}))
            }
            ["faults", "fail-watches"] if post => {
                faults.fail_next(
                    query.non_empty("resource"),
                    Verb::Watch,
                    n(),
                    code(),
                    retry(),
                );
                ok(json!({"ok": true}))
            }
            ["faults", "fail"] if post => {
                let verb = Verb::parse(query.get("verb").unwrap_or("")).ok_or_else(|| ApiError::bad_request("verb must be one of list, watch, get, create, update, patch, delete, deletecollection"))?;
                faults.fail_next(query.non_empty("resource"), verb, n(), code(), retry());
                ok(json!({"ok": true}))
            }
            ["faults", "expire-watches"] if post => {
                faults.expire_watches();
                ok(json!({"ok": true}))
            }
            ["faults", "compact"] if post => {
                ok(json!({"resourceVersion": faults.compact().to_string()}))
            }
            ["faults", "malformed-next-event"] if post => {
                match query.non_empty("resource") {
                    Some(r) => faults.malformed_next_event_of(r),
                    None => faults.malformed_next_event(),
                }
                ok(json!({"ok": true}))
            }
            ["faults", "close-mid-object-next"] if post => {
                match query.non_empty("resource") {
                    Some(r) => faults.close_mid_object_next_of(r),
                    None => faults.close_mid_object_next(),
                }
                ok(json!({"ok": true}))
            }
            ["faults", "slow-watches"] if post => {
                let ms = query
                    .get("perEventMs")
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                faults.slow_watches(if ms == 0 {
                    None
                } else {
                    Some(Duration::from_millis(ms))
                });
                ok(json!({"ok": true}))
            }
            ["faults", "stall-watches"] if post => {
                faults.stall_watches(on());
                ok(json!({"ok": true}))
            }
            ["faults", "throttle"] if post => {
                let verbs = match query.non_empty("verbs") {
                    None => Vec::new(),
                    Some(list) => list
                        .split(',')
                        .map(|v| Verb::parse(v.trim()))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| ApiError::bad_request("verbs must be a comma-separated list of list, watch, get, create, update, patch, delete, deletecollection"))?,
                };
                let count = match query.get("n") {
                    None | Some("all") => None,
                    Some(v) => Some(
                        v.parse::<u32>()
                            .map_err(|_| ApiError::bad_request("n must be a number or all"))?,
                    ),
                };
                faults.throttle(query.non_empty("resource"), &verbs, count, retry());
                ok(json!({"ok": true}))
            }
            ["faults", "end-watches"] if post => {
                faults.end_watches_at_once(on());
                ok(json!({"ok": true}))
            }
            ["faults", "expire-every-watch"] if post => {
                let mode = match query.get("mode").unwrap_or("http") {
                    "off" => None,
                    m => Some(ExpireMode::parse(m).ok_or_else(|| {
                        ApiError::bad_request("mode must be one of http, event, off")
                    })?),
                };
                faults.expire_every_watch(mode);
                ok(json!({"ok": true}))
            }
            ["faults", "reject-watch-list"] if post => {
                faults.reject_watch_list(on());
                ok(json!({"ok": true}))
            }
            ["faults", "ignore-watch-list"] if post => {
                faults.ignore_watch_list(on());
                ok(json!({"ok": true}))
            }
            ["faults", "strip-resource-versions"] if post => {
                faults.strip_resource_versions(on());
                ok(json!({"ok": true}))
            }
            ["features", "sharded-list-and-watch"] if post => {
                faults.sharded_list_and_watch(on());
                ok(json!({"ok": true}))
            }
            ["faults", "clear"] if post => {
                faults.clear();
                ok(json!({"ok": true}))
            }
            ["requests"] if get => {
                let counts: Vec<Value> = self
                    .requests
                    .snapshot()
                    .into_iter()
                    .map(|((r, v), c)| json!({"resource": r, "verb": v.as_str(), "count": c}))
                    .collect();
                ok(json!({"counts": counts, "openWatches": self.requests.open_watches()}))
            }
            ["state"] if get => {
                ok(json!({"resourceVersion": self.store.resource_version().to_string()}))
            }
            ["churn", "start"] if post => {
                let cfg = ChurnConfig::from_query(query)?;
                self.replace_churn(churn::start(self.store.clone(), cfg));
                ok(json!({"ok": true}))
            }
            ["churn", "stop"] if post => {
                let counts = self.stop_churn();
                ok(json!({"stopped": counts}))
            }
            ["churn"] if get => {
                let slot = self.churn_slot();
                ok(
                    json!({"running": slot.is_some(), "counts": slot.as_ref().map(ChurnHandle::counts)}),
                )
            }
            ["faults" | "features" | "requests" | "state" | "churn", ..] => {
                Err(ApiError::method_not_allowed())
            }
            _ => Err(ApiError::unknown_path()),
        }
    }
}
