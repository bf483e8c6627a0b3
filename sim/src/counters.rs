//! Per-(resource, verb) request counters and open-watch gauges.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A request verb, as Kubernetes RBAC names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    /// GET on a collection.
    List,
    /// GET on a collection with `watch=true`.
    Watch,
    /// GET on an object (or subresource).
    Get,
    /// POST to a collection.
    Create,
    /// PUT on an object (or subresource).
    Update,
    /// PATCH on an object (or subresource).
    Patch,
    /// DELETE on an object.
    Delete,
    /// DELETE on a collection.
    DeleteCollection,
}

impl Verb {
    /// The lowercase name (`list`, `watch`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::List => "list",
            Self::Watch => "watch",
            Self::Get => "get",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
        }
    }

    /// Parses a lowercase verb name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "list" => Self::List,
            "watch" => Self::Watch,
            "get" => Self::Get,
            "create" => Self::Create,
            "update" => Self::Update,
            "patch" => Self::Patch,
            "delete" => Self::Delete,
            "deletecollection" => Self::DeleteCollection,
            _ => return None,
        })
    }
}

#[derive(Debug, Default)]
struct Inner {
    counts: Mutex<BTreeMap<(String, Verb), u64>>,
    open: Mutex<BTreeMap<String, u64>>,
    watches_opened: AtomicU64,
}

/// Counts every resource request the server received, by resource and verb (cheap to clone;
/// all clones share the counts). Subresource requests count under `plural/sub` (`pods/status`,
/// `deployments/scale`). Requests failed by an injected fault are counted too; discovery and
/// `/sim/...` control requests are not.
#[derive(Debug, Clone, Default)]
pub struct RequestCounters {
    inner: Arc<Inner>,
}

impl RequestCounters {
    pub(crate) fn record(&self, resource: &str, verb: Verb) {
        let mut m = self.inner.counts.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((resource.to_string(), verb)).or_insert(0) += 1;
    }

    /// Requests of `verb` on `resource` (plural, e.g. `pods`, or `pods/status`) so far.
    pub fn count(&self, resource: &str, verb: Verb) -> u64 {
        let m = self.inner.counts.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&(resource.to_string(), verb)).copied().unwrap_or(0)
    }

    /// All counts so far.
    pub fn snapshot(&self) -> BTreeMap<(String, Verb), u64> {
        self.inner
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Total requests of any resource and verb.
    pub fn total(&self) -> u64 {
        self.inner
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .sum()
    }

    /// Forgets all counts (open watches are a gauge and stay).
    pub fn reset(&self) {
        self.inner
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Watch streams open right now, over all resources.
    pub fn open_watches(&self) -> u64 {
        self.inner
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .sum()
    }

    /// Watch streams of `resource` open right now.
    pub fn open_watches_of(&self, resource: &str) -> u64 {
        self.inner
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(resource)
            .copied()
            .unwrap_or(0)
    }

    /// Watch streams ever started (that got past fault injection and validation).
    pub fn watches_started(&self) -> u64 {
        self.inner.watches_opened.load(Ordering::Relaxed)
    }

    /// Marks a watch open until the guard drops.
    pub(crate) fn open_watch(&self, resource: &str) -> OpenWatchGuard {
        *self
            .inner
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(resource.to_string())
            .or_insert(0) += 1;
        self.inner.watches_opened.fetch_add(1, Ordering::Relaxed);
        OpenWatchGuard {
            counters: self.clone(),
            resource: resource.to_string(),
        }
    }
}

/// Decrements the open-watch gauge when dropped.
#[derive(Debug)]
pub(crate) struct OpenWatchGuard {
    counters: RequestCounters,
    resource: String,
}

impl Drop for OpenWatchGuard {
    fn drop(&mut self) {
        let mut m = self
            .counters
            .inner
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.resource) {
            *n = n.saturating_sub(1);
        }
    }
}
