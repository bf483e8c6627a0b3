//! A seeded generator of object churn (create/update/delete of pods and config maps) at a given
//! rate, for demos and soak tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::json;
use tokio::sync::Notify;

use crate::apimachinery::errors::ApiError;
use crate::apimachinery::options::{DeleteOptions, PatchKind};
use crate::apimachinery::util::Query;
use crate::registry::generic::{self as ops, Part};
use crate::storage::store::Store;

/// A kind the churn generator works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChurnKind {
    /// Pods (status is patched through the status subresource, Pending → Running).
    Pods,
    /// ConfigMaps.
    ConfigMaps,
}

impl ChurnKind {
    fn plural(self) -> &'static str {
        match self {
            Self::Pods => "pods",
            Self::ConfigMaps => "configmaps",
        }
    }
}

/// What to churn and how fast.
#[derive(Debug, Clone)]
pub struct ChurnConfig {
    /// Operations (create, update or delete) per second.
    pub rate_per_sec: f64,
    /// Namespaces to work in (created if missing).
    pub namespaces: Vec<String>,
    /// Kinds to work on.
    pub kinds: Vec<ChurnKind>,
    /// Seed of the operation sequence: the same seed gives the same sequence.
    pub seed: u64,
    /// Objects per (kind, namespace) above which only updates and deletes happen.
    pub max_objects: usize,
}

impl Default for ChurnConfig {
    fn default() -> Self {
        Self {
            rate_per_sec: 10.0,
            namespaces: vec!["churn".into()],
            kinds: vec![ChurnKind::Pods, ChurnKind::ConfigMaps],
            seed: 1,
            max_objects: 50,
        }
    }
}

impl ChurnConfig {
    /// From `/sim/churn/start?rate=&namespaces=a,b&kinds=pods,configmaps&seed=&maxObjects=`.
    pub(crate) fn from_query(q: &Query) -> Result<Self, ApiError> {
        let mut c = Self::default();
        if let Some(r) = q.non_empty("rate") {
            c.rate_per_sec = parse_rate(r).map_err(ApiError::bad_request)?;
        }
        if let Some(ns) = q.non_empty("namespaces") {
            c.namespaces = ns
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
        }
        if let Some(k) = q.non_empty("kinds") {
            c.kinds = k
                .split(',')
                .map(|k| match k {
                    "pods" => Ok(ChurnKind::Pods),
                    "configmaps" => Ok(ChurnKind::ConfigMaps),
                    other => Err(ApiError::bad_request(format!(
                        "unknown churn kind {other:?}"
                    ))),
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(s) = q.non_empty("seed") {
            c.seed = s
                .parse()
                .map_err(|_| ApiError::bad_request("seed must be an integer"))?;
        }
        if let Some(m) = q.non_empty("maxObjects") {
            c.max_objects = m
                .parse()
                .map_err(|_| ApiError::bad_request("maxObjects must be an integer"))?;
        }
        Ok(c)
    }
}

/// Parses `100`, `100/s` or `2.5/s`.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let n = s.trim().trim_end_matches("/s");
    match n.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "invalid rate {s:?}: expected a positive number, optionally followed by /s"
        )),
    }
}

/// Operations done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ChurnCounts {
    /// Objects created.
    pub created: u64,
    /// Objects updated (metadata or status).
    pub updated: u64,
    /// Objects deleted.
    pub deleted: u64,
    /// Operations that failed (e.g. the object was changed by someone else).
    pub errors: u64,
}

#[derive(Debug, Default)]
struct Inner {
    stop: AtomicBool,
    wake: Notify,
    created: AtomicU64,
    updated: AtomicU64,
    deleted: AtomicU64,
    errors: AtomicU64,
    finished: AtomicBool,
}

/// Controls a running churn generator; dropping it stops the churn.
#[derive(Debug)]
pub struct ChurnHandle {
    inner: Arc<Inner>,
}

impl ChurnHandle {
    /// Stops the generator (it finishes the operation in progress).
    pub fn stop(&self) {
        self.inner.stop.store(true, Ordering::Release);
        self.inner.wake.notify_one();
    }

    /// Operations done so far.
    pub fn counts(&self) -> ChurnCounts {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ChurnCounts {
            created: l(&self.inner.created),
            updated: l(&self.inner.updated),
            deleted: l(&self.inner.deleted),
            errors: l(&self.inner.errors),
        }
    }

    /// Whether the generator task is still running.
    pub fn is_running(&self) -> bool {
        !self.inner.finished.load(Ordering::Acquire)
    }
}

impl Drop for ChurnHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Slot {
    kind: ChurnKind,
    ns: String,
    live: Vec<String>,
}

/// Starts churn on the current tokio runtime.
pub(crate) fn start(store: Arc<Store>, cfg: ChurnConfig) -> ChurnHandle {
    start_on(&tokio::runtime::Handle::current(), store, cfg)
}

/// Starts churn on `rt`.
pub(crate) fn start_on(
    rt: &tokio::runtime::Handle,
    store: Arc<Store>,
    cfg: ChurnConfig,
) -> ChurnHandle {
    let inner = Arc::new(Inner::default());
    let task_inner = inner.clone();
    rt.spawn(async move {
        run(store, cfg, &task_inner).await;
        task_inner.finished.store(true, Ordering::Release);
    });
    ChurnHandle { inner }
}

async fn run(store: Arc<Store>, cfg: ChurnConfig, inner: &Inner) {
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    for ns in &cfg.namespaces {
        if ops::ensure_namespace(&store, ns, true).is_err() {
            inner.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    let mut slots: Vec<Slot> = cfg
        .kinds
        .iter()
        .flat_map(|k| {
            cfg.namespaces.iter().map(move |ns| Slot {
                kind: *k,
                ns: ns.clone(),
                live: Vec::new(),
            })
        })
        .collect();
    if slots.is_empty() || cfg.rate_per_sec <= 0.0 {
        return;
    }
    let started = tokio::time::Instant::now();
    let tick = Duration::from_secs_f64((1.0 / cfg.rate_per_sec).clamp(0.001, 0.05));
    let mut done: u64 = 0;
    let mut seq: u64 = 0;
    while !inner.stop.load(Ordering::Acquire) {
        let elapsed = started.elapsed().as_secs_f64();
        let due = (elapsed * cfg.rate_per_sec) as u64;
        // Never burst more than one second of backlog.
        let floor = due.saturating_sub(cfg.rate_per_sec.ceil() as u64);
        done = done.max(floor);
        let mut n = 0;
        while done < due && !inner.stop.load(Ordering::Acquire) {
            let i = rng.random_range(0..slots.len());
            seq += 1;
            one_op(&store, &mut slots[i], &mut rng, seq, cfg.max_objects, inner);
            done += 1;
            n += 1;
            if n % 64 == 0 {
                tokio::task::yield_now().await;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = inner.wake.notified() => {}
        }
    }
}

fn one_op(store: &Store, slot: &mut Slot, rng: &mut StdRng, seq: u64, max: usize, inner: &Inner) {
    let Some(def) = store.registry.find("", "v1", slot.kind.plural()).cloned() else {
        return;
    };
    let n = slot.live.len();
    let roll: f64 = rng.random();
    let op = if n == 0 {
        0
    } else if n >= max {
        if roll < 0.5 { 1 } else { 2 }
    } else if roll < 0.4 {
        0
    } else if roll < 0.8 {
        1
    } else {
        2
    };
    let ns = Some(slot.ns.as_str());
    let result = match op {
        0 => {
            let name = format!(
                "churn-{}-{seq}",
                if slot.kind == ChurnKind::Pods {
                    "pod"
                } else {
                    "cm"
                }
            );
            let body = match slot.kind {
                ChurnKind::Pods => json!({
                    "metadata": {"name": name, "labels": {"app": "churn", "churn-seq": seq.to_string()}},
                    "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0"}], "nodeName": format!("node-{}", seq % 3)},
                }),
                ChurnKind::ConfigMaps => json!({
                    "metadata": {"name": name, "labels": {"app": "churn"}},
                    "data": {"seq": seq.to_string()},
                }),
            };
            ops::create(store, &def, ns, body, false, true, None).map(|_| {
                slot.live.push(name);
                inner.created.fetch_add(1, Ordering::Relaxed);
            })
        }
        1 => {
            let name = slot.live[rng.random_range(0..n)].clone();
            let r = if slot.kind == ChurnKind::Pods && rng.random_bool(0.5) {
                let body = json!({"status": {"phase": "Running", "podIP": format!("10.0.{}.{}", (seq / 250) % 250, seq % 250)}});
                ops::patch(
                    store,
                    &def,
                    ns,
                    &name,
                    Part::Status,
                    PatchKind::Merge,
                    body.to_string().as_bytes(),
                    false,
                    true,
                    None,
                    false,
                )
            } else {
                let body = json!({"metadata": {"annotations": {"kinformer-sim/churn-rev": seq.to_string()}}});
                ops::patch(
                    store,
                    &def,
                    ns,
                    &name,
                    Part::Main,
                    PatchKind::Merge,
                    body.to_string().as_bytes(),
                    false,
                    true,
                    None,
                    false,
                )
            };
            if let Err(e) = &r
                && e.code == 404
            {
                slot.live.retain(|x| *x != name);
            }
            r.map(|_| {
                inner.updated.fetch_add(1, Ordering::Relaxed);
            })
        }
        _ => {
            let i = rng.random_range(0..n);
            let name = slot.live.swap_remove(i);
            // Deleted with grace period 0 (`kubectl delete --grace-period=0`): a pod still goes
            // through its two writes (marked, then DELETED) but at once, so that churn counts
            // and "the server now" stay exact without waiting for the kubelet stand-in.
            let opts = DeleteOptions {
                grace_period_seconds: Some(0),
                ..DeleteOptions::default()
            };
            ops::delete(store, &def, ns, &name, &opts).map(|_| {
                inner.deleted.fetch_add(1, Ordering::Relaxed);
            })
        }
    };
    if result.is_err() {
        inner.errors.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apimachinery::schema::Registry;

    fn run_ops(seed: u64, n: u64) -> (Vec<String>, ChurnCounts) {
        let store = Store::new(Registry::new(&[]).unwrap(), 1000);
        let mut rng = StdRng::seed_from_u64(seed);
        let inner = Inner::default();
        let mut slots: Vec<Slot> = [ChurnKind::Pods, ChurnKind::ConfigMaps]
            .into_iter()
            .map(|kind| Slot {
                kind,
                ns: "c".into(),
                live: Vec::new(),
            })
            .collect();
        for seq in 1..=n {
            let i = rng.random_range(0..slots.len());
            one_op(&store, &mut slots[i], &mut rng, seq, 8, &inner);
        }
        let mut names: Vec<String> = slots.iter().flat_map(|s| s.live.clone()).collect();
        names.sort();
        let h = ChurnHandle {
            inner: Arc::new(inner),
        };
        (names, h.counts())
    }

    #[test]
    fn same_seed_same_sequence() {
        let (a, ca) = run_ops(7, 300);
        let (b, cb) = run_ops(7, 300);
        assert_eq!((a.clone(), ca), (b, cb));
        assert!(
            ca.created > 0 && ca.updated > 0 && ca.deleted > 0 && ca.errors == 0,
            "{ca:?}"
        );
        let (c, _) = run_ops(8, 300);
        assert_ne!(a, c);
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100/s"), Ok(100.0));
        assert_eq!(parse_rate("2.5"), Ok(2.5));
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("x/s").is_err());
    }
}
