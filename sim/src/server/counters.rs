//! Per-(resource, verb) request counters, arrival times, and open-watch gauges.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// How many arrival times are kept per (resource, verb); older ones are forgotten.
pub const MAX_ARRIVALS: usize = 10_000;

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
struct PerKey {
    count: u64,
    arrivals: VecDeque<Instant>,
    /// The `shardSelector` parameter of each request kept in `arrivals`, as sent.
    shard_selectors: VecDeque<Option<String>>,
}

#[derive(Debug, Default)]
struct Inner {
    counts: Mutex<BTreeMap<(String, Verb), PerKey>>,
    open: Mutex<BTreeMap<String, u64>>,
    watches_opened: AtomicU64,
    /// Successful responses with a protobuf body, per (resource, verb).
    protobuf: Mutex<BTreeMap<(String, Verb), u64>>,
}

/// Counts every resource request the server received, by resource and verb (cheap to clone;
/// all clones share the counts). Subresource requests count under `plural/sub` (`pods/status`,
/// `deployments/scale`). Requests failed by an injected fault are counted too; discovery and
/// `/sim/...` control requests are not. The arrival time of each request is kept too (the
/// last [`MAX_ARRIVALS`] per resource and verb), so a test can measure the gaps between a
/// client's requests (backoff, `Retry-After`).
#[derive(Debug, Clone, Default)]
pub struct RequestCounters {
    inner: Arc<Inner>,
}

impl RequestCounters {
    pub(crate) fn record(&self, resource: &str, verb: Verb, shard_selector: Option<&str>) {
        let now = Instant::now();
        let mut m = self.inner.counts.lock().unwrap_or_else(|e| e.into_inner());
        let e = m.entry((resource.to_string(), verb)).or_default();
        e.count += 1;
        if e.arrivals.len() == MAX_ARRIVALS {
            e.arrivals.pop_front();
            e.shard_selectors.pop_front();
        }
        e.arrivals.push_back(now);
        e.shard_selectors
            .push_back(shard_selector.map(str::to_string));
    }

    /// Counts a successful response of `verb` on `resource` whose body is protobuf.
    pub(crate) fn record_protobuf(&self, resource: &str, verb: Verb) {
        let mut m = self
            .inner
            .protobuf
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *m.entry((resource.to_string(), verb)).or_insert(0) += 1;
    }

    /// Successful (2xx) responses to `verb` on `resource` that were served as kube's protobuf
    /// (`Content-Type: application/vnd.kubernetes.protobuf`, `;stream=watch` for a watch): a
    /// LIST's body, a WATCH stream (counted when it opens, whatever it then carries), a GET's
    /// object. With [`Self::count`], a test tells whether a client that asked for protobuf was
    /// really answered in it, rather than in JSON.
    pub fn protobuf_count(&self, resource: &str, verb: Verb) -> u64 {
        let m = self
            .inner
            .protobuf
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        m.get(&(resource.to_string(), verb)).copied().unwrap_or(0)
    }

    /// Successful responses to `verb` served as protobuf, over every resource.
    pub fn protobuf_count_verb(&self, verb: Verb) -> u64 {
        let m = self
            .inner
            .protobuf
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        m.iter()
            .filter(|((_, v), _)| *v == verb)
            .map(|(_, n)| *n)
            .sum()
    }

    /// The `shardSelector` parameter (KEP-5866) of each request of `verb` on `resource`, as
    /// sent (`None`: absent), oldest first, for the same requests as [`Self::arrivals`]. Kept
    /// whether or not the server honours it ([`crate::Faults::sharded_list_and_watch`]), so a
    /// test can assert that every LIST and WATCH of a sharded informer carried its selector.
    pub fn shard_selectors(&self, resource: &str, verb: Verb) -> Vec<Option<String>> {
        let m = self.inner.counts.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&(resource.to_string(), verb))
            .map(|e| e.shard_selectors.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Requests of `verb` on `resource` (plural, e.g. `pods`, or `pods/status`) so far.
    pub fn count(&self, resource: &str, verb: Verb) -> u64 {
        let m = self.inner.counts.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&(resource.to_string(), verb)).map_or(0, |e| e.count)
    }

    /// Requests of `verb` on any resource so far.
    pub fn count_verb(&self, verb: Verb) -> u64 {
        let m = self.inner.counts.lock().unwrap_or_else(|e| e.into_inner());
        m.iter()
            .filter(|((_, v), _)| *v == verb)
            .map(|(_, e)| e.count)
            .sum()
    }

    /// When the requests of `verb` on `resource` arrived, oldest first (the last
    /// [`MAX_ARRIVALS`]; taken as the server parsed each request, before any injected fault).
    pub fn arrivals(&self, resource: &str, verb: Verb) -> Vec<Instant> {
        let m = self.inner.counts.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&(resource.to_string(), verb))
            .map(|e| e.arrivals.iter().copied().collect())
            .unwrap_or_default()
    }

    /// When the requests of any of `verbs` on `resource` arrived, oldest first, merged (e.g.
    /// LIST and WATCH: every request a reflector makes).
    pub fn arrivals_of(&self, resource: &str, verbs: &[Verb]) -> Vec<Instant> {
        let mut all: Vec<Instant> = verbs
            .iter()
            .flat_map(|v| self.arrivals(resource, *v))
            .collect();
        all.sort();
        all
    }

    /// All counts so far.
    pub fn snapshot(&self) -> BTreeMap<(String, Verb), u64> {
        self.inner
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, e)| (k.clone(), e.count))
            .collect()
    }

    /// Total requests of any resource and verb.
    pub fn total(&self) -> u64 {
        self.inner
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|e| e.count)
            .sum()
    }

    /// Forgets all counts (protobuf ones too) and arrival times (open watches are a gauge and
    /// stay).
    pub fn reset(&self) {
        self.inner
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.inner
            .protobuf
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
