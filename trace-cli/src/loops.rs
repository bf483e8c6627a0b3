//! The loop beyond the handler (`docs/trace-format.md`, "Beyond the handler", T5–T7): the
//! workqueue operations a trace caused, the reconciles that took its key, the writes they made,
//! and the watch events that were those writes coming back ("own writes").
//!
//! [`Loops::new`] indexes a file's `queue`, `reconcile` and `write` lines once; [`Loops::flow`]
//! gives the steps one trace went through after its handler (for `follow` and the HTML page),
//! and [`Loops::reconciles`] every reconcile with its `got`, `done` and writes (for `why` and
//! `stats`). A file without these lines (an older writer) gives no reconcile and empty flows.

use std::collections::{HashMap, HashSet};

use crate::fmt::{duration, nanos};
use crate::traces::{ObjectKey, Trace, traces};
use crate::{Hop, HopKind, QueueOp, ReconcileLine, TraceFile, WriteLine};

/// One reconcile: its `start` and `end` lines (either may be missing when the sink dropped
/// it), the queue's `got` and `done` around it, and its writes.
#[derive(Debug, Clone)]
pub struct Reconcile<'a> {
    /// The span id.
    pub span: &'a str,
    /// The queue the key came from.
    pub queue: &'a str,
    /// The key reconciled.
    pub key: &'a str,
    /// The `start` line.
    pub start: Option<&'a ReconcileLine>,
    /// The `end` line.
    pub end: Option<&'a ReconcileLine>,
    /// `reconcile` lines of this span with another `what` (a newer writer's), shown raw.
    pub others: Vec<&'a ReconcileLine>,
    /// The `got` that handed the key to the worker: the last one of the same queue and key at
    /// or before the start (of the same worker when both name one).
    pub got: Option<&'a QueueOp>,
    /// The `done` after that `got`.
    pub done: Option<&'a QueueOp>,
    /// The writes the reconcile made, in time order.
    pub writes: Vec<&'a WriteLine>,
}

impl<'a> Reconcile<'a> {
    /// When it started: the `start` line's time, else the `got`'s, else the `end`'s minus its
    /// duration, else the first write's.
    pub fn t(&self) -> u64 {
        if let Some(start) = self.start {
            return start.t;
        }
        if let Some(got) = self.got {
            return got.t;
        }
        if let Some(end) = self.end {
            return end.t.saturating_sub(end.dur.unwrap_or(0));
        }
        self.writes.first().map_or(0, |w| w.t)
    }

    /// The trace ids of the item it took: the `start` line's, else the `got`'s.
    pub fn traces(&self) -> &'a [String] {
        match self.start {
            Some(start) if !start.traces.is_empty() => &start.traces,
            _ => self.got.map_or(&[], |g| g.traces.as_slice()),
        }
    }

    /// The worker: the `start` line's, else the `got`'s.
    pub fn worker(&self) -> Option<&str> {
        self.start
            .and_then(|s| s.worker.as_deref())
            .or_else(|| self.got.and_then(|g| g.worker.as_deref()))
    }

    /// How long it took: the `end` line's `dur`, else end minus start.
    pub fn dur(&self) -> Option<u64> {
        let end = self.end?;
        end.dur
            .or_else(|| self.start.map(|s| end.t.saturating_sub(s.t)))
    }

    /// The result as written (`ok`, `error`, `requeue`, or a newer word); `None` without an
    /// `end` line or a `result`.
    pub fn result(&self) -> Option<&'a str> {
        self.end.and_then(|e| e.result.as_deref())
    }

    /// The result word: [`Reconcile::result`], except `conflict` for an `error` that was a
    /// 409 conflict (see [`is_conflict`]); else `(no result)` when there is an `end` line
    /// without one, else `(no end line)`. One wording for every view.
    pub fn result_word(&self) -> &'a str {
        match self.end {
            Some(_) if self.is_conflict() => CONFLICT,
            Some(end) => end.result.as_deref().unwrap_or("(no result)"),
            None => "(no end line)",
        }
    }

    /// True when the reconcile ended in an `error` that was a 409 conflict: a write that lost
    /// an optimistic-concurrency race, which the controller retries and counts apart from its
    /// errors ("409 conflicts retried" in deployment-controller's summary).
    pub fn is_conflict(&self) -> bool {
        self.end.is_some_and(|end| {
            end.result.as_deref() == Some("error") && end.error.as_deref().is_some_and(is_conflict)
        })
    }

    /// The result for reading: `ok`, `error: message`, `conflict (409, retried): message`,
    /// `requeue after 5.000s`, or [`Reconcile::result_word`]'s `(no result)` / `(no end line)`.
    pub fn outcome(&self) -> String {
        let mut text = self.result_word().to_string();
        let Some(end) = self.end else {
            return text;
        };
        if self.is_conflict() {
            text.push_str(" (409, retried)");
        }
        if let Some(error) = &end.error {
            text.push_str(": ");
            text.push_str(error);
        }
        if let Some(after) = end.requeue_after {
            text.push_str(" after ");
            text.push_str(&duration(nanos(after)));
        }
        text
    }
}

/// The result word of a reconcile that lost a 409 race (an `error` line whose message
/// [`is_conflict`]).
pub const CONFLICT: &str = "conflict";

/// Whether a reconcile's error message is a 409 conflict. The trace's `result` has no word for
/// it (T6: `ok`, `error`, `requeue`), so the message decides: deployment-controller's
/// `SyncError::Conflict` ("conflict writing …"), a conflict a writer worded itself
/// ("conflict: the object has been modified"), or a kube API error with code 409.
pub fn is_conflict(message: &str) -> bool {
    let lower = message.trim_start().to_ascii_lowercase();
    lower.starts_with("conflict") || lower.contains("code: 409")
}

/// The write a watch event was: its `write` line and the reconcile that made it.
#[derive(Debug, Clone, Copy)]
pub struct OwnWrite<'a> {
    /// The `write` line.
    pub write: &'a WriteLine,
    /// The reconcile that made it (`None` for a write outside any reconcile, or one whose
    /// lines were lost).
    pub reconcile: Option<&'a Reconcile<'a>>,
}

impl OwnWrite<'_> {
    /// `create by reconcile 00000a0000000001 (deployments demo/web)`.
    pub fn describe(&self) -> String {
        match self.reconcile {
            Some(r) => format!(
                "{} by reconcile {} ({} {})",
                self.write.verb, r.span, r.queue, r.key
            ),
            None => match &self.write.span {
                Some(span) => format!("{} by reconcile {span}", self.write.verb),
                None => format!("{} outside any reconcile", self.write.verb),
            },
        }
    }
}

/// One step of a trace's loop after its handler, ready to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopStep {
    /// When, nanoseconds since the Unix epoch.
    pub t: u64,
    /// `queue`, `reconcile`, `write`, `own event`, or for an own event flowing on, `handler`.
    pub stage: String,
    /// The queue's name, the writing span, or the reflector's or listener's instance.
    pub inst: String,
    /// What happened, as written (unknown words shown raw).
    pub what: String,
    /// The rest: key, wait, worker, result, the written object, the own event's trace.
    pub detail: String,
    /// 0 for the followed trace's own loop; 1 for an own event of another object flowing on.
    pub level: u8,
    /// For an own event: the object (`Kind ns/name`) and trace it links to.
    pub link: Option<(String, String)>,
}

/// A file's loop lines, indexed.
#[derive(Debug)]
pub struct Loops<'a> {
    file: &'a TraceFile,
    /// Every reconcile, by start time (then span).
    pub reconciles: Vec<Reconcile<'a>>,
    /// Index in `file.queue` of a `got` → index in `reconciles`.
    by_got: HashMap<usize, usize>,
    /// Span → index in `reconciles`.
    by_span: HashMap<&'a str, usize>,
    /// (queue, key) → indices in `file.queue`, in time order.
    by_key: HashMap<(&'a str, &'a str), Vec<usize>>,
    /// Trace → indices in `file.queue` of the operations it caused (its `trace` field).
    by_trace: HashMap<&'a str, Vec<usize>>,
    /// Trace → indices in `file.queue` of the `got`s whose item carried it.
    got_by_trace: HashMap<&'a str, Vec<usize>>,
    /// Trace → indices in `reconciles` of those without a `got` that name it.
    orphans_by_trace: HashMap<&'a str, Vec<usize>>,
    /// Reflector hops by (kind, ns, name, rv).
    reflected: HashMap<(&'a str, &'a str, &'a str, &'a str), Vec<&'a Hop>>,
    /// Writes by (kind, ns, name, rv); only writes the server answered an rv for.
    written: HashMap<(&'a str, &'a str, &'a str, &'a str), Vec<&'a WriteLine>>,
    /// Trace id → its hops, grouped.
    traces: HashMap<&'a str, Trace<'a>>,
}

impl<'a> Loops<'a> {
    /// Indexes `file`.
    pub fn new(file: &'a TraceFile) -> Loops<'a> {
        let mut by_key: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
        let mut by_trace: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut got_by_trace: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, op) in file.queue.iter().enumerate() {
            by_key.entry((&op.queue, &op.key)).or_default().push(i);
            if let Some(trace) = &op.trace {
                by_trace.entry(trace).or_default().push(i);
            }
            if op.what == "got" {
                for trace in &op.traces {
                    let gots = got_by_trace.entry(trace).or_default();
                    // A writer repeating an id in one item lists it once here.
                    if gots.last() != Some(&i) {
                        gots.push(i);
                    }
                }
            }
        }
        let by_time = |v: &mut Vec<usize>| v.sort_by_key(|&i| (file.queue[i].t, i));
        by_key.values_mut().for_each(by_time);
        by_trace.values_mut().for_each(by_time);

        // Reconciles by span, from their lines and from the writes that name a span.
        let mut spans: Vec<&str> = Vec::new();
        let mut lines: HashMap<&str, Vec<&ReconcileLine>> = HashMap::new();
        for line in &file.reconciles {
            let entry = lines.entry(&line.span).or_default();
            if entry.is_empty() {
                spans.push(&line.span);
            }
            entry.push(line);
        }
        let mut writes: HashMap<&str, Vec<&WriteLine>> = HashMap::new();
        for write in &file.writes {
            if let Some(span) = &write.span {
                let entry = writes.entry(span).or_default();
                if entry.is_empty() && !lines.contains_key(span.as_str()) {
                    spans.push(span);
                }
                entry.push(write);
            }
        }
        let mut reconciles: Vec<Reconcile<'a>> = spans
            .into_iter()
            .map(|span| {
                let lines = lines.remove(span).unwrap_or_default();
                let start = lines.iter().find(|l| l.what == "start").copied();
                let end = lines.iter().find(|l| l.what == "end").copied();
                let others = lines
                    .iter()
                    .filter(|l| l.what != "start" && l.what != "end")
                    .copied()
                    .collect();
                let named = start.or(end).or(lines.first().copied());
                let mut writes = writes.remove(span).unwrap_or_default();
                writes.sort_by_key(|w| w.t);
                Reconcile {
                    span,
                    queue: named.map_or("", |l| l.queue.as_str()),
                    key: named.map_or("", |l| l.key.as_str()),
                    start,
                    end,
                    others,
                    got: None,
                    done: None,
                    writes,
                }
            })
            .collect();
        // In start order (spans are unique, so the order is total). `t()` does not read the
        // `got` found below (only a reconcile with a `start` gets one, and its time is the
        // start's), so sorting first leaves `by_got`'s indices valid without renumbering.
        reconciles.sort_by(|a, b| (a.t(), a.span).cmp(&(b.t(), b.span)));

        // The `got` before each start, and the `done` after that `got`.
        let mut by_got = HashMap::new();
        for (r, reconcile) in reconciles.iter_mut().enumerate() {
            let Some(start) = reconcile.start else {
                continue;
            };
            let Some(ops) = by_key.get(&(reconcile.queue, reconcile.key)) else {
                continue;
            };
            let gots = || {
                ops.iter()
                    .copied()
                    .filter(|&i| file.queue[i].what == "got" && file.queue[i].t <= start.t)
            };
            let same_worker = gots().rfind(|&i| match (&file.queue[i].worker, &start.worker) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            });
            let Some(got) = same_worker.or_else(|| gots().next_back()) else {
                continue;
            };
            reconcile.got = Some(&file.queue[got]);
            reconcile.done = ops
                .iter()
                .map(|&i| &file.queue[i])
                .find(|op| op.what == "done" && op.t >= file.queue[got].t);
            by_got.insert(got, r);
        }

        let by_span = reconciles
            .iter()
            .enumerate()
            .map(|(i, r)| (r.span, i))
            .collect();
        let mut orphans_by_trace: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, r) in reconciles
            .iter()
            .enumerate()
            .filter(|(_, r)| r.got.is_none())
        {
            for trace in r.traces() {
                let orphans = orphans_by_trace.entry(trace.as_str()).or_default();
                if orphans.last() != Some(&i) {
                    orphans.push(i);
                }
            }
        }

        let mut reflected: HashMap<(&str, &str, &str, &str), Vec<&Hop>> = HashMap::new();
        for hop in file.hops.iter().filter(|h| h.hop == HopKind::Reflector) {
            if !hop.rv.is_empty() {
                reflected
                    .entry((&hop.kind, &hop.ns, &hop.name, &hop.rv))
                    .or_default()
                    .push(hop);
            }
        }
        reflected.values_mut().for_each(|v| v.sort_by_key(|h| h.t));
        let mut written: HashMap<(&str, &str, &str, &str), Vec<&WriteLine>> = HashMap::new();
        for write in file.writes.iter().filter(|w| !w.rv.is_empty()) {
            written
                .entry((&write.kind, &write.ns, &write.name, &write.rv))
                .or_default()
                .push(write);
        }
        let mut by_id: HashMap<&str, Trace<'a>> = HashMap::new();
        for trace in traces(file) {
            by_id.entry(trace.id).or_insert(trace);
        }

        Loops {
            file,
            reconciles,
            by_got,
            by_span,
            by_key,
            by_trace,
            got_by_trace,
            orphans_by_trace,
            reflected,
            written,
            traces: by_id,
        }
    }

    /// Whether the file has any `queue`, `reconcile` or `write` line.
    pub fn is_empty(&self) -> bool {
        self.file.queue.is_empty() && self.file.reconciles.is_empty() && self.file.writes.is_empty()
    }

    /// The reconcile of a span.
    pub fn reconcile(&self, span: &str) -> Option<&Reconcile<'a>> {
        self.by_span.get(span).map(|&i| &self.reconciles[i])
    }

    /// The hops of a trace id, grouped (`None` when no hop of it is in the file).
    pub fn trace(&self, id: &str) -> Option<&Trace<'a>> {
        self.traces.get(id)
    }

    /// The workqueue operations of (queue, key), in time order.
    pub fn ops(&self, queue: &str, key: &str) -> Vec<&'a QueueOp> {
        let file = self.file;
        self.by_key
            .get(&(queue, key))
            .map(|ops| ops.iter().map(|&i| &file.queue[i]).collect())
            .unwrap_or_default()
    }

    /// The write a hop was, when it is a reflector hop carrying the kind, namespace, name and
    /// resourceVersion of a `write` line (T7).
    pub fn own_write(&self, hop: &Hop) -> Option<OwnWrite<'_>> {
        if hop.hop != HopKind::Reflector || hop.rv.is_empty() {
            return None;
        }
        let write = *self
            .written
            .get(&(
                hop.kind.as_str(),
                hop.ns.as_str(),
                hop.name.as_str(),
                hop.rv.as_str(),
            ))?
            .first()?;
        Some(OwnWrite {
            write,
            reconcile: write.span.as_deref().and_then(|s| self.reconcile(s)),
        })
    }

    /// The reflector hops that were this write coming back through a watch.
    pub fn came_back(&self, write: &'a WriteLine) -> &[&'a Hop] {
        if write.rv.is_empty() {
            return &[];
        }
        self.reflected
            .get(&(
                write.kind.as_str(),
                write.ns.as_str(),
                write.name.as_str(),
                write.rv.as_str(),
            ))
            .map_or(&[], Vec::as_slice)
    }

    /// The steps trace `id` of `object` went through after its handler: each queue operation it
    /// caused, the `got` that took the item, the reconcile (start, writes, end), the `done`,
    /// and each write's own events; an own event of another object flows on one level (its
    /// handlers, queue operations and reconciles, without their own events).
    pub fn flow(&self, id: &str, object: &ObjectKey) -> Vec<LoopStep> {
        let mut steps = Vec::new();
        self.flow_into(id, Some(object), 0, &mut steps);
        steps
    }

    fn flow_into(&self, id: &str, object: Option<&ObjectKey>, level: u8, out: &mut Vec<LoopStep>) {
        let file = self.file;
        let mut taken: Vec<usize> = Vec::new();
        let mut chained: HashSet<usize> = HashSet::new();
        // Every operation the trace caused first, then each item that took it, in time order.
        for &i in self.by_trace.get(id).map_or(&[][..], Vec::as_slice) {
            let op = &file.queue[i];
            out.push(queue_step(op, level));
            // The `got` that took this item: the first after the add that carries the trace,
            // else (a writer that did not list traces) the first after it with no traces.
            let ops = self.by_key.get(&(op.queue.as_str(), op.key.as_str()));
            let later = ops.into_iter().flatten().copied().filter(|&g| {
                let got = &file.queue[g];
                got.what == "got" && got.t >= op.t
            });
            let got = later
                .clone()
                .find(|&g| file.queue[g].traces.iter().any(|t| t == id))
                .or_else(|| later.clone().find(|&g| file.queue[g].traces.is_empty()));
            if let Some(got) = got.filter(|g| !taken.contains(g)) {
                taken.push(got);
            }
        }
        // Items that carried the trace without an add line of it (the sink dropped it).
        for &g in self.got_by_trace.get(id).map_or(&[][..], Vec::as_slice) {
            if !taken.contains(&g) {
                taken.push(g);
            }
        }
        taken.sort_by_key(|&g| (file.queue[g].t, g));
        for got in taken {
            self.chain(got, object, level, &mut chained, out);
        }
        // Reconciles that name the trace but whose `got` is not in the file.
        for &r in self.orphans_by_trace.get(id).map_or(&[][..], Vec::as_slice) {
            if chained.insert(r) {
                self.reconcile_steps(&self.reconciles[r], object, level, out);
            }
        }
    }

    /// A `got`, the reconcile it started and the `done` after it.
    fn chain(
        &self,
        got: usize,
        object: Option<&ObjectKey>,
        level: u8,
        chained: &mut HashSet<usize>,
        out: &mut Vec<LoopStep>,
    ) {
        let op = &self.file.queue[got];
        out.push(queue_step(op, level));
        match self.by_got.get(&got) {
            Some(&r) if chained.insert(r) => {
                self.reconcile_steps(&self.reconciles[r], object, level, out)
            }
            _ => {
                if let Some(done) = self
                    .ops(&op.queue, &op.key)
                    .into_iter()
                    .find(|d| d.what == "done" && d.t >= op.t)
                {
                    out.push(queue_step(done, level));
                }
            }
        }
    }

    /// A reconcile's start, writes, end and `done`, then (at level 0) each write's own events.
    fn reconcile_steps(
        &self,
        r: &Reconcile<'a>,
        object: Option<&ObjectKey>,
        level: u8,
        out: &mut Vec<LoopStep>,
    ) {
        let mut lines: Vec<&ReconcileLine> = r.start.into_iter().collect();
        lines.extend(r.others.iter().copied());
        for line in lines {
            let mut detail = format!("key={} span={}", r.key, r.span);
            if let Some(worker) = &line.worker {
                detail.push_str(&format!(" worker={worker}"));
            }
            out.push(LoopStep {
                t: line.t,
                stage: "reconcile".to_string(),
                inst: r.queue.to_string(),
                what: line.what.clone(),
                detail,
                level,
                link: None,
            });
        }
        for write in &r.writes {
            out.push(LoopStep {
                t: write.t,
                stage: "write".to_string(),
                inst: r.span.to_string(),
                what: write.verb.clone(),
                detail: format!("{} {}{}", write.kind, write.path(), rv(&write.rv)),
                level,
                link: None,
            });
        }
        if let Some(end) = r.end {
            let mut detail = format!("key={} span={} result={}", r.key, r.span, r.outcome());
            if let Some(dur) = r.dur() {
                detail.push_str(&format!(" dur={}", duration(nanos(dur))));
            }
            out.push(LoopStep {
                t: end.t,
                stage: "reconcile".to_string(),
                inst: r.queue.to_string(),
                what: end.what.clone(),
                detail,
                level,
                link: None,
            });
        }
        if let Some(done) = r.done {
            out.push(queue_step(done, level));
        }
        if level > 0 {
            return;
        }
        for write in &r.writes {
            for hop in self.came_back(write) {
                let written = ObjectKey::of(hop);
                out.push(LoopStep {
                    t: hop.t,
                    stage: "own event".to_string(),
                    inst: hop.inst.clone(),
                    what: hop.what.clone(),
                    detail: format!(
                        "{written}{} trace={} (own write: {} of span {})",
                        rv(&hop.rv),
                        hop.trace,
                        write.verb,
                        r.span
                    ),
                    level,
                    link: Some((written.to_string(), hop.trace.clone())),
                });
                // An own event of the followed object is one of its own traces, shown there.
                if object != Some(&written) {
                    self.own_event_flow(&hop.trace, level + 1, out);
                }
            }
        }
    }

    /// An own event flowing on: its handlers, then its loop.
    fn own_event_flow(&self, id: &str, level: u8, out: &mut Vec<LoopStep>) {
        if let Some(trace) = self.trace(id) {
            for hop in trace.hops_by_path() {
                if hop.hop == HopKind::Handler {
                    let mut detail = format!("trace={id}");
                    if let Some(dur) = hop.dur {
                        detail.push_str(&format!(" dur={}", duration(nanos(dur))));
                    }
                    out.push(LoopStep {
                        t: hop.t,
                        stage: "handler".to_string(),
                        inst: hop.inst.clone(),
                        what: hop.what.clone(),
                        detail,
                        level,
                        link: None,
                    });
                }
            }
        }
        self.flow_into(id, None, level, out);
    }
}

/// A queue operation as a step.
fn queue_step(op: &QueueOp, level: u8) -> LoopStep {
    let mut detail = format!("key={}", op.key);
    let mut add = |text: String| {
        detail.push(' ');
        detail.push_str(&text);
    };
    if !op.into.is_empty() {
        add(format!("into={}", op.into.join(",")));
    }
    if let Some(wait) = op.wait {
        add(format!("wait={}", duration(nanos(wait))));
    }
    if let Some(worker) = &op.worker {
        add(format!("worker={worker}"));
    }
    if op.what == "got" && !op.traces.is_empty() {
        add(format!("traces={}", op.traces.join(",")));
    }
    if let Some(delay) = op.delay {
        add(format!("delay={}", duration(nanos(delay))));
    }
    if let Some(requeues) = op.requeues {
        add(format!("requeues={requeues}"));
    }
    if let Some(reason) = &op.reason {
        add(format!("reason={reason}"));
    }
    if let Some(dur) = op.dur {
        add(format!("dur={}", duration(nanos(dur))));
    }
    if op.requeued == Some(true) {
        add("requeued".to_string());
    }
    LoopStep {
        t: op.t,
        stage: "queue".to_string(),
        inst: op.queue.clone(),
        what: op.what.clone(),
        detail,
        level,
        link: None,
    }
}

/// `  rv=1240`, or nothing for an empty resourceVersion.
pub(crate) fn rv(rv: &str) -> String {
    if rv.is_empty() {
        String::new()
    } else {
        format!(" rv={rv}")
    }
}

#[cfg(test)]
mod conflict_tests {
    use super::is_conflict;

    #[test]
    fn a_409_is_a_conflict_and_other_failures_are_errors() {
        for conflict in [
            "conflict writing deployments/web/status",
            "conflict: the object has been modified",
            "ApiError: Operation cannot be fulfilled on deployments.apps \"web\": the object has \
             been modified; please apply your changes to the latest version and try again: \
             Conflict (ErrorResponse { status: \"Failure\", message: \"\", reason: \"Conflict\", \
             code: 409 })",
        ] {
            assert!(is_conflict(conflict), "{conflict}");
        }
        for error in [
            "ApiError: Internal error: InternalError (ErrorResponse { code: 500 })",
            "bad key web",
            "HyperError: connection refused",
        ] {
            assert!(!is_conflict(error), "{error}");
        }
    }
}
