//! Hops grouped into traces: one event of one object through the pipeline.

use std::collections::{BTreeMap, HashMap};

use crate::fmt::diff;
use crate::{Hop, HopKind, TraceFile};

/// An object: kind, namespace (`""` when cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// The kind, as in the hop lines.
    pub kind: String,
    /// The namespace, `""` for a cluster-scoped object.
    pub ns: String,
    /// The name.
    pub name: String,
}

impl ObjectKey {
    /// The key of the object a hop is about.
    pub fn of(hop: &Hop) -> ObjectKey {
        ObjectKey {
            kind: hop.kind.clone(),
            ns: hop.ns.clone(),
            name: hop.name.clone(),
        }
    }

    /// `ns/name`, or `name` for a cluster-scoped object (client-go's key).
    pub fn path(&self) -> String {
        crate::fmt::path(&self.ns, &self.name)
    }
}

impl std::fmt::Display for ObjectKey {
    /// `Kind ns/name`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.path())
    }
}

/// One trace: the hops of one trace id for one object, in pipeline order.
#[derive(Debug, Clone)]
pub struct Trace<'a> {
    /// The trace id.
    pub id: &'a str,
    /// The object.
    pub object: ObjectKey,
    /// The hops, sorted by (hop kind, time, instance): pipeline order, whatever the clocks said.
    pub hops: Vec<&'a Hop>,
}

/// One step of a trace: from a hop to the next one on its path.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// The previous hop on this path (for a handler: its own listener's hop).
    pub from: &'a Hop,
    /// The hop reached.
    pub to: &'a Hop,
    /// `to.t - from.t`, nanoseconds (negative when clocks disagree).
    pub nanos: i64,
}

impl<'a> Trace<'a> {
    /// The hop latencies are measured from: the reflector hop, or for a trace born elsewhere
    /// (a resync, born in the indexer) its first hop.
    pub fn origin(&self) -> Option<&'a Hop> {
        self.hops
            .iter()
            .find(|h| h.hop == HopKind::Reflector)
            .or_else(|| self.hops.first())
            .copied()
    }

    /// The origin's time (0 for a trace without hops, which [`traces`] never makes).
    pub fn start(&self) -> u64 {
        self.origin().map_or(0, |h| h.t)
    }

    /// The earliest time of any hop.
    pub fn first_t(&self) -> u64 {
        self.hops.iter().map(|h| h.t).min().unwrap_or(0)
    }

    /// A hop's latency from the origin, nanoseconds.
    pub fn latency(&self, hop: &Hop) -> i64 {
        diff(self.start(), hop.t)
    }

    /// End-to-end latency: origin to the last handler hop, `None` when no handler finished.
    pub fn end_to_end(&self) -> Option<i64> {
        self.hops
            .iter()
            .filter(|h| h.hop == HopKind::Handler)
            .map(|h| self.latency(h))
            .max()
    }

    /// The hops for reading: the stages before the listeners in pipeline order, then each
    /// listener's hop followed by its handler's, listeners in the order they were reached. Each
    /// path through the trace reads in pipeline order.
    pub fn hops_by_path(&self) -> Vec<&'a Hop> {
        let mut ordered: Vec<&'a Hop> = Vec::with_capacity(self.hops.len());
        let mut branches: BTreeMap<&str, (u64, Vec<&'a Hop>)> = BTreeMap::new();
        // `self.hops` is in pipeline order: a listener's hop comes before its handler's.
        for &hop in &self.hops {
            if hop.hop < HopKind::Listener {
                ordered.push(hop);
            } else {
                let branch = branches
                    .entry(hop.inst.as_str())
                    .or_insert((u64::MAX, Vec::new()));
                branch.0 = branch.0.min(reached(hop));
                branch.1.push(hop);
            }
        }
        let mut branches: Vec<(u64, Vec<&'a Hop>)> = branches.into_values().collect();
        branches.sort_by_key(|b| b.0);
        ordered.extend(branches.into_iter().flat_map(|b| b.1));
        ordered
    }

    /// Each hop but the first with the hop before it on its path: a handler's predecessor is
    /// the listener hop of the same instance; any other hop's is the last hop of an earlier
    /// pipeline stage.
    pub fn steps(&self) -> Vec<Step<'a>> {
        let mut listeners: HashMap<&str, &'a Hop> = HashMap::new();
        for hop in &self.hops {
            if hop.hop == HopKind::Listener {
                listeners.insert(hop.inst.as_str(), hop);
            }
        }
        let mut steps = Vec::new();
        // The last hop of the stages before the current one's.
        let mut before_stage: Option<&'a Hop> = None;
        let mut last: Option<&'a Hop> = None;
        for &hop in &self.hops {
            if let Some(prev) = last.filter(|prev| prev.hop != hop.hop) {
                before_stage = Some(prev);
            }
            last = Some(hop);
            let from = match hop.hop {
                HopKind::Handler => listeners.get(hop.inst.as_str()).copied().or(before_stage),
                _ => before_stage,
            };
            if let Some(from) = from {
                steps.push(Step {
                    from,
                    to: hop,
                    nanos: diff(from.t, hop.t),
                });
            }
        }
        steps
    }
}

/// Groups a file's hops into traces, ordered by their first hop's time (then id).
pub fn traces(file: &TraceFile) -> Vec<Trace<'_>> {
    let mut by_id: BTreeMap<(&str, &str, &str, &str), Vec<&Hop>> = BTreeMap::new();
    for hop in &file.hops {
        by_id
            .entry((&hop.trace, &hop.kind, &hop.ns, &hop.name))
            .or_default()
            .push(hop);
    }
    let mut traces: Vec<Trace<'_>> = by_id
        .into_iter()
        .map(|((id, _, _, _), mut hops)| {
            hops.sort_by(|a, b| (a.hop, a.t, &a.inst).cmp(&(b.hop, b.t, &b.inst)));
            Trace {
                id,
                // `or_default` above created the vector with one hop in it at least.
                object: ObjectKey::of(hops[0]),
                hops,
            }
        })
        .collect();
    traces.sort_by(|a, b| (a.first_t(), a.id).cmp(&(b.first_t(), b.id)));
    traces
}

/// Every object with a hop in the file, sorted.
pub fn objects(file: &TraceFile) -> Vec<ObjectKey> {
    let mut objects: Vec<ObjectKey> = file.hops.iter().map(ObjectKey::of).collect();
    objects.sort();
    objects.dedup();
    objects
}

/// When a branch was reached: the listener hop's time, or a handler hop's start.
fn reached(hop: &Hop) -> u64 {
    match hop.hop {
        HopKind::Handler => hop.t.saturating_sub(hop.dur.unwrap_or(0)),
        _ => hop.t,
    }
}
