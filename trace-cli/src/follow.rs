//! `follow`: one object's timeline, trace by trace.

use std::fmt::Write as _;
use std::str::FromStr;

use crate::fmt::{diff, duration, millis, wall};
use crate::loops::{LoopStep, Loops};
use crate::traces::{ObjectKey, Trace, objects, traces};
use crate::{HopKind, TraceError, TraceFile};

/// Which object to follow: `ns/name` or, for a cluster-scoped object, `name`; optionally a kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectQuery {
    /// The namespace, `""` for a cluster-scoped object.
    pub ns: String,
    /// The name.
    pub name: String,
    /// The kind (case-insensitive), or any kind.
    pub kind: Option<String>,
}

impl ObjectQuery {
    /// Restricts the query to a kind.
    pub fn with_kind(mut self, kind: Option<String>) -> ObjectQuery {
        self.kind = kind;
        self
    }

    /// Whether an object is the one asked for.
    pub fn matches(&self, object: &ObjectKey) -> bool {
        object.ns == self.ns
            && object.name == self.name
            && self
                .kind
                .as_ref()
                .is_none_or(|k| k.eq_ignore_ascii_case(&object.kind))
    }

    /// The object as asked for: `[Kind ]ns/name`.
    pub fn describe(&self) -> String {
        let path = crate::fmt::path(&self.ns, &self.name);
        match &self.kind {
            Some(kind) => format!("{kind} {path}"),
            None => path,
        }
    }

    /// [`TraceError::ObjectNotFound`] with a hint naming objects the file has.
    pub(crate) fn not_found(&self, file: &TraceFile) -> TraceError {
        let all = objects(file);
        let same_name: Vec<String> = all
            .iter()
            .filter(|o| o.name == self.name)
            .map(|o| format!("{} ({})", o.path(), o.kind))
            .collect();
        let hint = if all.is_empty() {
            " (the file has no hop at all)".to_string()
        } else if !same_name.is_empty() {
            format!("; did you mean {}?", same_name.join(", "))
        } else {
            let some: Vec<String> = all.iter().take(5).map(ToString::to_string).collect();
            let more = if all.len() > 5 { ", …" } else { "" };
            format!(" ({} objects there: {}{more})", all.len(), some.join(", "))
        };
        TraceError::ObjectNotFound {
            query: self.describe(),
            hint,
        }
    }
}

impl FromStr for ObjectQuery {
    type Err = TraceError;

    /// Parses `ns/name` or `name`.
    fn from_str(s: &str) -> Result<ObjectQuery, TraceError> {
        let bad = || TraceError::BadObject(s.to_string());
        let (ns, name) = match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                (ns, name)
            }
            Some(_) => return Err(bad()),
            None if !s.is_empty() => ("", s),
            None => return Err(bad()),
        };
        Ok(ObjectQuery {
            ns: ns.to_string(),
            name: name.to_string(),
            kind: None,
        })
    }
}

/// One hop of a followed trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HopView {
    /// When, nanoseconds since the Unix epoch.
    pub t: u64,
    /// The actor.
    pub hop: HopKind,
    /// The actor instance.
    pub inst: String,
    /// What happened.
    pub what: String,
    /// The resourceVersion.
    pub rv: String,
    /// Nanoseconds since the trace's origin (its reflector hop, or its first hop).
    pub latency: i64,
    /// The handler's run time, on handler hops.
    pub dur: Option<u64>,
}

/// One trace of a followed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceView {
    /// The trace id.
    pub id: String,
    /// The object.
    pub object: ObjectKey,
    /// The object's uid at the origin hop.
    pub uid: String,
    /// Where the trace was born (`reflector`, or `indexer` for a resync).
    pub origin: HopKind,
    /// What happened at the origin (`added`, `listed`, `sync`, …).
    pub what: String,
    /// The origin's time, nanoseconds since the Unix epoch.
    pub start: u64,
    /// The hops: the stages before the listeners in pipeline order, then each listener's hop
    /// followed by its handler's ([`crate::traces::Trace::hops_by_path`]).
    pub hops: Vec<HopView>,
    /// When the origin is a reflector hop that was a reconcile's write coming back (T7): that
    /// write, e.g. `create by reconcile 00000a0000000001 (deployments demo/web)`.
    pub own_write: Option<String>,
    /// The loop after the handler ([`Loops::flow`]): queue, reconcile, writes, own events.
    /// Empty for a trace file without `queue`, `reconcile` and `write` lines.
    pub after: Vec<LoopStep>,
}

impl TraceView {
    /// The view of a grouped trace, without its loop.
    pub(crate) fn of(trace: &Trace<'_>) -> TraceView {
        let origin = trace.origin();
        TraceView {
            own_write: None,
            after: Vec::new(),
            id: trace.id.to_string(),
            object: trace.object.clone(),
            uid: origin.map(|h| h.uid.clone()).unwrap_or_default(),
            origin: origin.map_or(HopKind::Reflector, |h| h.hop),
            what: origin.map(|h| h.what.clone()).unwrap_or_default(),
            start: trace.start(),
            hops: trace
                .hops_by_path()
                .into_iter()
                .map(|h| HopView {
                    t: h.t,
                    hop: h.hop,
                    inst: h.inst.clone(),
                    what: h.what.clone(),
                    rv: h.rv.clone(),
                    latency: trace.latency(h),
                    dur: h.dur,
                })
                .collect(),
        }
    }

    /// The view of a grouped trace with its loop after the handler.
    pub(crate) fn with_loop(trace: &Trace<'_>, loops: &Loops<'_>) -> TraceView {
        let mut view = TraceView::of(trace);
        view.own_write = trace
            .origin()
            .and_then(|h| loops.own_write(h))
            .map(|w| w.describe());
        view.after = loops.flow(trace.id, &trace.object);
        view
    }
}

/// An object's timeline: its traces ordered by their first hop's time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    /// The objects that matched (more than one when kinds share the name and none was given).
    pub objects: Vec<ObjectKey>,
    /// The traces.
    pub traces: Vec<TraceView>,
}

/// The timeline of the object `query` names, or [`TraceError::ObjectNotFound`]: each trace's
/// hops, then its loop after the handler (queue, reconcile, writes, own events) when the file
/// records it.
pub fn follow(file: &TraceFile, query: &ObjectQuery) -> Result<Timeline, TraceError> {
    let loops = Loops::new(file);
    let traces: Vec<TraceView> = traces(file)
        .iter()
        .filter(|t| query.matches(&t.object))
        .map(|t| TraceView::with_loop(t, &loops))
        .collect();
    if traces.is_empty() {
        return Err(query.not_found(file));
    }
    Ok(timeline(traces))
}

/// Whether `text` has the shape of a trace id: 16 lowercase hex digits.
pub fn is_trace_id(text: &str) -> bool {
    text.len() == 16 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The timeline of one trace id (one event of one object, and its loop), or `None` when no hop
/// of it is in the file.
pub fn follow_trace(file: &TraceFile, id: &str) -> Option<Timeline> {
    let loops = Loops::new(file);
    let traces: Vec<TraceView> = traces(file)
        .iter()
        .filter(|t| t.id == id)
        .map(|t| TraceView::with_loop(t, &loops))
        .collect();
    (!traces.is_empty()).then(|| timeline(traces))
}

fn timeline(traces: Vec<TraceView>) -> Timeline {
    let mut objects: Vec<ObjectKey> = traces.iter().map(|t| t.object.clone()).collect();
    objects.sort();
    objects.dedup();
    Timeline { objects, traces }
}

impl std::fmt::Display for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hops: usize = self.traces.iter().map(|t| t.hops.len()).sum();
        let names: Vec<String> = self.objects.iter().map(ToString::to_string).collect();
        writeln!(
            f,
            "{}: {} traces, {} hops (wall times UTC; latency from the trace's reflector hop)",
            names.join(", "),
            self.traces.len(),
            hops
        )?;
        // The widest of one column over every hop and loop step.
        let width = |hop: fn(&HopView) -> &str, step: fn(&LoopStep) -> &str| {
            self.traces
                .iter()
                .flat_map(|t| {
                    let hops = t.hops.iter().map(|h| hop(h).chars().count());
                    hops.chain(t.after.iter().map(|s| step(s).chars().count()))
                })
                .max()
                .unwrap_or(0)
        };
        let inst_width = width(|h| &h.inst, |s| &s.inst);
        let what_width = width(|h| &h.what, |s| &s.what);
        for trace in &self.traces {
            let mut title = format!("\ntrace {}  {} {}", trace.id, trace.object.kind, trace.what);
            if trace.origin != HopKind::Reflector {
                let _ = write!(title, " (born in the {}, latency from there)", trace.origin);
            }
            if !trace.uid.is_empty() {
                let _ = write!(title, "  uid={}", trace.uid);
            }
            if let Some(own) = &trace.own_write {
                let _ = write!(title, "  own write: {own}");
            }
            writeln!(f, "{title}")?;
            for hop in &trace.hops {
                let mut line = format!(
                    "  {}  {:>11}  {:<9}  {:<iw$}  {:<ww$}",
                    wall(hop.t),
                    millis(hop.latency),
                    hop.hop,
                    hop.inst,
                    hop.what,
                    iw = inst_width,
                    ww = what_width,
                );
                if !hop.rv.is_empty() {
                    let _ = write!(line, "  rv={}", hop.rv);
                }
                if let Some(dur) = hop.dur {
                    let _ = write!(
                        line,
                        "  dur={}",
                        duration(i64::try_from(dur).unwrap_or(i64::MAX))
                    );
                }
                writeln!(f, "{}", line.trim_end())?;
            }
            for step in &trace.after {
                // An own event of another object flowing on is indented under it.
                let indent = if step.level == 0 { "  " } else { "    " };
                let line = format!(
                    "{indent}{}  {:>11}  {:<9}  {:<iw$}  {:<ww$}  {}",
                    wall(step.t),
                    millis(diff(trace.start, step.t)),
                    step.stage,
                    step.inst,
                    step.what,
                    step.detail,
                    iw = inst_width,
                    ww = what_width,
                );
                writeln!(f, "{}", line.trim_end())?;
            }
        }
        Ok(())
    }
}
