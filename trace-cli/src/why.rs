//! `why`: each reconcile of a key, with the events that caused it, so "why did `demo/web`
//! reconcile fourteen times" has an answer: which watch events (resolved to their first hop),
//! which of them were the controller's own writes coming back (and of which reconcile), and
//! which re-adds (rate-limited retries, `add_after`) carried no event at all.

use std::fmt::Write as _;

use crate::fmt::{duration, nanos, wall};
use crate::follow::ObjectQuery;
use crate::loops::{Loops, rv};
use crate::stats::count;
use crate::{TraceError, TraceFile};

/// The queue operations that put a key into an item.
const ADDS: [&str; 4] = ["added", "merged", "dirty", "delayed"];

/// An event that caused a reconcile: one trace id of the item the worker took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// The trace id.
    pub trace: String,
    /// Its first hop as `Kind ns/name what rv=…` and that hop's time; `None` when no hop of
    /// the trace is in the file (the sink dropped it).
    pub event: Option<(String, u64)>,
    /// When the event was a reconcile's write coming back (T7): that write and reconcile.
    pub own_write: Option<String>,
    /// How it entered the item: the `what` of its queue line (`added`, `merged`, `dirty`, …).
    pub via: Option<String>,
}

/// One reconcile of the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WhyReconcile {
    /// The span id.
    pub span: String,
    /// The queue.
    pub queue: String,
    /// When it started.
    pub t: u64,
    /// The worker, when named.
    pub worker: Option<String>,
    /// `ok`, `error: …`, `conflict (409, retried): …`, `requeue after …`, `(no end line)`.
    pub outcome: String,
    /// How long it took, nanoseconds.
    pub dur: Option<u64>,
    /// How long the item waited in the queue (ready → got), nanoseconds.
    pub wait: Option<u64>,
    /// The events merged into the item it took, oldest first.
    pub causes: Vec<Cause>,
    /// Queue operations since the previous `got` of the key that carried no event
    /// (`rate_limited`, `delayed`, and adds without a trace), as `what delay=…`.
    pub requeues: Vec<String>,
    /// Its writes, as `verb Kind ns/name rv=…`.
    pub writes: Vec<String>,
}

/// Every reconcile of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Why {
    /// The key asked for.
    pub key: String,
    /// Its reconciles, in start order.
    pub reconciles: Vec<WhyReconcile>,
}

/// The reconciles of the key `query` names (`ns/name`, or `name`), in every queue or in
/// `queue`, or [`TraceError::NoReconcile`].
pub fn why(file: &TraceFile, query: &ObjectQuery, queue: Option<&str>) -> Result<Why, TraceError> {
    let key = crate::fmt::path(&query.ns, &query.name);
    let loops = Loops::new(file);
    let mut reconciles = Vec::new();
    for r in &loops.reconciles {
        if r.key != key || queue.is_some_and(|q| q != r.queue) {
            continue;
        }
        let ops = loops.ops(r.queue, r.key);
        // The key's previous `got` before this one: the operations after it, up to this `got`,
        // filled the item (none without a `got`).
        let previous = r.got.and_then(|got| {
            ops.iter()
                .filter(|op| op.what == "got" && op.t < got.t)
                .map(|op| op.t)
                .max()
        });
        // The item's traces as the `start`/`got` line lists them; a writer that did not list
        // them still names each add's trace (of the operations that filled the item).
        let mut traces: Vec<&String> = r.traces().iter().collect();
        if traces.is_empty() {
            if let Some(got) = r.got {
                let window = ops
                    .iter()
                    .copied()
                    .filter(|op| op.t <= got.t && previous.is_none_or(|p| op.t >= p));
                for op in window {
                    if let Some(id) = op
                        .trace
                        .as_ref()
                        .filter(|_| ADDS.contains(&op.what.as_str()))
                    {
                        if !traces.contains(&id) {
                            traces.push(id);
                        }
                    }
                }
            }
        }
        let causes = traces
            .into_iter()
            .map(|id| {
                let origin = loops.trace(id).and_then(|t| t.origin());
                Cause {
                    trace: id.clone(),
                    event: origin.map(|h| {
                        let path = crate::fmt::path(&h.ns, &h.name);
                        (format!("{} {path} {}{}", h.kind, h.what, rv(&h.rv)), h.t)
                    }),
                    own_write: origin
                        .and_then(|h| loops.own_write(h))
                        .map(|w| w.describe()),
                    via: {
                        // The add of the trace (an unknown word only when there is no add).
                        let mine = ops.iter().filter(|op| {
                            op.trace.as_ref() == Some(id) && r.got.is_none_or(|g| op.t <= g.t)
                        });
                        mine.clone()
                            .find(|op| ADDS.contains(&op.what.as_str()))
                            .or_else(|| mine.clone().next())
                            .map(|op| op.what.clone())
                    },
                }
            })
            .collect();
        // Re-adds without an event count for the reconcile whose `got` came first after they
        // became ready (their time plus their delay): a 10-minute `add_after` made before this
        // `got` did not cause it. Ready times are compared with 1 ms of slack (the queue's
        // clock and the line's wall time differ slightly).
        let mut requeues = Vec::new();
        let slack = 1_000_000;
        let (since, until) = (previous, r.got.map(|got| got.t));
        for op in ops.iter().copied() {
            let ready = op.t.saturating_add(op.delay.unwrap_or(0));
            let in_window = until.is_some_and(|u| ready <= u.saturating_add(slack))
                && since.is_none_or(|p| ready.saturating_add(slack) > p);
            if !in_window {
                continue;
            }
            let adds = ADDS.contains(&op.what.as_str());
            if op.what == "rate_limited" || (adds && op.trace.is_none()) {
                let mut text = op.what.clone();
                if let Some(delay) = op.delay {
                    let _ = write!(text, " delay={}", duration(nanos(delay)));
                }
                if let Some(requeues) = op.requeues {
                    let _ = write!(text, " requeues={requeues}");
                }
                let _ = write!(text, " at {}", wall(op.t));
                requeues.push(text);
            }
        }
        reconciles.push(WhyReconcile {
            span: r.span.to_string(),
            queue: r.queue.to_string(),
            t: r.t(),
            worker: r.worker().map(str::to_string),
            outcome: r.outcome(),
            dur: r.dur(),
            wait: r.got.and_then(|g| g.wait),
            causes,
            requeues,
            writes: r
                .writes
                .iter()
                .map(|w| format!("{} {} {}{}", w.verb, w.kind, w.path(), rv(&w.rv)))
                .collect(),
        });
    }
    if reconciles.is_empty() {
        let mut keys: Vec<String> = loops
            .reconciles
            .iter()
            .map(|r| format!("{} ({})", r.key, r.queue))
            .collect();
        keys.sort();
        keys.dedup();
        let hint = if keys.is_empty() {
            " (the file has no reconcile line: written before reconciles were traced, or by a \
             controller that does not record them)"
                .to_string()
        } else {
            let more = if keys.len() > 5 { ", …" } else { "" };
            let some: Vec<String> = keys.iter().take(5).cloned().collect();
            format!(
                " ({} keys reconciled there: {}{more})",
                keys.len(),
                some.join(", ")
            )
        };
        let query = match queue {
            Some(q) => format!("{key} in queue {q}"),
            None => key,
        };
        return Err(TraceError::NoReconcile { query, hint });
    }
    Ok(Why { key, reconciles })
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut results: Vec<(String, usize)> = Vec::new();
        for r in &self.reconciles {
            let word = r.outcome.split([':', ' ']).next().unwrap_or_default();
            count(&mut results, word);
        }
        let results: Vec<String> = results.iter().map(|(w, n)| format!("{n} {w}")).collect();
        let own: usize = self
            .reconciles
            .iter()
            .filter(|r| !r.causes.is_empty() && r.causes.iter().all(|c| c.own_write.is_some()))
            .count();
        writeln!(
            f,
            "{}: {} reconciles ({}); {own} caused only by own writes coming back",
            self.key,
            self.reconciles.len(),
            results.join(", ")
        )?;
        for (n, r) in self.reconciles.iter().enumerate() {
            let mut line = format!(
                "\n#{} reconcile {}  {}  {} {}",
                n + 1,
                r.span,
                wall(r.t),
                r.queue,
                self.key
            );
            if let Some(worker) = &r.worker {
                let _ = write!(line, "  worker={worker}");
            }
            let _ = write!(line, "  {}", r.outcome);
            if let Some(dur) = r.dur {
                let _ = write!(line, "  dur={}", duration(nanos(dur)));
            }
            if let Some(wait) = r.wait {
                let _ = write!(line, "  waited={}", duration(nanos(wait)));
            }
            writeln!(f, "{line}")?;
            if r.causes.is_empty() && r.requeues.is_empty() {
                writeln!(
                    f,
                    "  caused by: no traced event (a resync, a retry or an add without a trace)"
                )?;
            }
            for cause in &r.causes {
                let mut line = format!("  caused by {}", cause.trace);
                if let Some(via) = &cause.via {
                    let _ = write!(line, " ({via})");
                }
                match &cause.event {
                    Some((event, t)) => {
                        let _ = write!(line, "  {event}  at {}", wall(*t));
                    }
                    None => line.push_str("  (no hop of it in the file)"),
                }
                if let Some(own) = &cause.own_write {
                    let _ = write!(line, "  own write: {own}");
                }
                writeln!(f, "{line}")?;
            }
            for requeue in &r.requeues {
                writeln!(f, "  queued by {requeue}")?;
            }
            for write in &r.writes {
                writeln!(f, "  wrote {write}")?;
            }
        }
        Ok(())
    }
}
