//! `slow`: the traces whose end-to-end latency passed a bound, and where their time went.

use crate::fmt::{duration, wall};
use crate::traces::{ObjectKey, Trace, traces};
use crate::{HopKind, TraceFile};

/// Where part of a trace's time went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// What the time was spent on, e.g. `fifo → indexer (v1/Pod ns=demo)` or
    /// `handler pod-logger ran`.
    pub label: String,
    /// Nanoseconds.
    pub nanos: i64,
}

/// One slow trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlowTrace {
    /// The trace id.
    pub id: String,
    /// The object.
    pub object: ObjectKey,
    /// What happened at the origin (`added`, `modified`, `sync`, …).
    pub what: String,
    /// The origin's resourceVersion.
    pub rv: String,
    /// The origin's time.
    pub start: u64,
    /// Origin to the last handler hop, nanoseconds.
    pub total: i64,
    /// Every step on the path to the last handler hop, in pipeline order; a handler's step is split into the wait in its
    /// listener's buffer and the handler's run when the hop carries `dur`.
    pub parts: Vec<Part>,
}

impl SlowTrace {
    /// The part that took longest.
    pub fn largest(&self) -> Option<&Part> {
        self.parts.iter().max_by_key(|p| p.nanos)
    }
}

/// What `slow` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlowReport {
    /// The bound, nanoseconds.
    pub over: i64,
    /// Traces with at least one handler hop (the ones that could be measured).
    pub measured: usize,
    /// Traces that never reached a handler (cut short, dropped, or still in flight).
    pub unfinished: usize,
    /// The traces over the bound, slowest first (the first ones only after [`SlowReport::top`]).
    pub slow: Vec<SlowTrace>,
    /// Traces over the bound left out by [`SlowReport::top`] (the least slow of them).
    pub omitted: usize,
}

impl SlowReport {
    /// Keeps the `n` slowest traces (all when `n` is 0) and counts the others in
    /// [`omitted`](Self::omitted): a busy trace has thousands over a small bound, and a person
    /// reads the worst first.
    pub fn top(mut self, n: usize) -> SlowReport {
        if n > 0 && self.slow.len() > n {
            self.omitted += self.slow.len() - n;
            self.slow.truncate(n);
        }
        self
    }
}

/// The traces whose end-to-end latency (origin → last handler hop) is over `over`.
pub fn slow(file: &TraceFile, over: std::time::Duration) -> SlowReport {
    let over = i64::try_from(over.as_nanos()).unwrap_or(i64::MAX);
    let mut report = SlowReport {
        over,
        measured: 0,
        unfinished: 0,
        slow: Vec::new(),
        omitted: 0,
    };
    for trace in traces(file) {
        let Some(total) = trace.end_to_end() else {
            report.unfinished += 1;
            continue;
        };
        report.measured += 1;
        if total > over {
            report.slow.push(slow_trace(&trace, total));
        }
    }
    report
        .slow
        .sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.id.cmp(&b.id)));
    report
}

fn slow_trace(trace: &Trace<'_>, total: i64) -> SlowTrace {
    let origin = trace.origin();
    // The critical path: the stages before the listeners, then the listener whose handler
    // finished last (the other listeners' steps did not delay the end).
    let last_handler = trace
        .hops
        .iter()
        .filter(|h| h.hop == HopKind::Handler)
        .max_by_key(|h| h.t)
        .map(|h| h.inst.as_str());
    let mut parts = Vec::new();
    for step in trace.steps() {
        let on_path =
            step.to.hop < HopKind::Listener || Some(step.to.inst.as_str()) == last_handler;
        if !on_path {
            continue;
        }
        let (from, to) = (step.from, step.to);
        match (to.hop, to.dur) {
            (HopKind::Handler, Some(dur)) => {
                let dur = i64::try_from(dur).unwrap_or(i64::MAX);
                parts.push(Part {
                    label: format!("in {}'s buffer (listener → handler start)", to.inst),
                    nanos: step.nanos.saturating_sub(dur),
                });
                parts.push(Part {
                    label: format!("handler {} ran", to.inst),
                    nanos: dur,
                });
            }
            (HopKind::Handler, None) => parts.push(Part {
                label: format!("listener → handler {} (buffer and run)", to.inst),
                nanos: step.nanos,
            }),
            (HopKind::Listener, _) => parts.push(Part {
                label: format!("{} → listener {}", from.hop, to.inst),
                nanos: step.nanos,
            }),
            _ => parts.push(Part {
                label: format!("{} → {} ({})", from.hop, to.hop, to.inst),
                nanos: step.nanos,
            }),
        }
    }
    SlowTrace {
        id: trace.id.to_string(),
        object: trace.object.clone(),
        what: origin.map(|h| h.what.clone()).unwrap_or_default(),
        rv: origin.map(|h| h.rv.clone()).unwrap_or_default(),
        start: trace.start(),
        total,
        parts,
    }
}

impl std::fmt::Display for SlowReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} of {} traces took over {} (reflector hop → last handler hop)",
            self.slow.len() + self.omitted,
            self.measured,
            duration(self.over)
        )?;
        if self.unfinished > 0 {
            writeln!(
                f,
                "{} traces never reached a handler (cut short, dropped, or in flight)",
                self.unfinished
            )?;
        }
        for s in &self.slow {
            writeln!(
                f,
                "\ntrace {}  {}  {} rv={}  at {}  total {}",
                s.id,
                s.object,
                s.what,
                s.rv,
                wall(s.start),
                duration(s.total)
            )?;
            if let Some(largest) = s.largest() {
                writeln!(
                    f,
                    "  most time: {} {}",
                    largest.label,
                    duration(largest.nanos)
                )?;
            }
            for part in &s.parts {
                writeln!(f, "    {:>11}  {}", duration(part.nanos), part.label)?;
            }
        }
        if self.omitted > 0 {
            writeln!(
                f,
                "\n… and {} more over the bound (the {} slowest are shown; --top 0 shows all)",
                self.omitted,
                self.slow.len()
            )?;
        }
        Ok(())
    }
}
