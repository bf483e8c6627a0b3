//! Traces beyond the handler (docs/semantics.md T5–T7): the workqueue's lines, reconcile spans
//! and the API writes a reconcile makes, in the format of `docs/trace-format.md` ("Beyond the
//! handler").
//!
//! - T5, the queue: a named [`AsyncWorkQueue`](crate::workqueue::AsyncWorkQueue)
//!   ([`with_name`](crate::workqueue::AsyncWorkQueue::with_name)) records a `queue` line for
//!   every add (`added`, `merged`, `dirty`, `delayed`, `rate_limited`, `dropped`), every take
//!   (`got`, with the trace ids merged into the item) and every `done` and `forget`. A key
//!   sink passes the notification's trace id to the queue, so the event that caused an add is
//!   known to the worker that takes the key.
//! - T6, the reconcile: [`ReconcileSpan::start`] with what
//!   [`get_traced`](crate::workqueue::AsyncWorkQueue::get_traced) gave the worker, then
//!   [`ReconcileSpan::end`] with a [`ReconcileResult`]. The writes the reconcile makes are
//!   recorded with [`ReconcileSpan::write`], or, from anywhere inside the future run by
//!   [`ReconcileSpan::scope`], with the free function [`record_write`].
//! - T7, own writes: a `write` line carries the resourceVersion the server answered; the watch
//!   event that later carries the same kind, namespace, name and resourceVersion is that write
//!   coming back (a reader makes the link).
//!
//! ```
//! use kinformer::ObjectKey;
//! use kinformer_actors::{
//!     trace::{ReconcileResult, ReconcileSpan, WriteVerb, record_write},
//!     workqueue::AsyncWorkQueue,
//! };
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let queue = AsyncWorkQueue::<ObjectKey>::new().with_name("deployments");
//! queue.add(ObjectKey::new(Some("demo"), "web"));
//! queue.shut_down();
//! while let Some(taken) = queue.get_traced(0).await {
//!     let span = ReconcileSpan::start(&taken);
//!     let written = span
//!         .scope(async {
//!             // ... the API answered resourceVersion "1240" ...
//!             record_write(WriteVerb::Create, "ReplicaSet", "demo", "web-5d4f8", "1240");
//!             Ok::<(), String>(())
//!         })
//!         .await;
//!     match &written {
//!         Ok(()) => span.end(ReconcileResult::Ok),
//!         Err(e) => span.end(ReconcileResult::Error(e)),
//!     }
//!     queue.done(taken.item());
//! }
//! # }
//! ```
//!
//! With no sink and the trace target disabled, none of this allocates: a span is an empty
//! `Option`, [`record_write`] one relaxed load and tracing's cached callsite check (T4).

use std::{
    fmt,
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use kinformer::TraceId;

use super::{
    TRACE_TARGET, enabled,
    sink::{self, Hex, LoopRecord, QueueOp},
    tracing_enabled,
};
use crate::workqueue::Taken;

/// Identifies one reconcile in the process (the `span` of `reconcile` and `write` lines).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanId(pub u64);

impl SpanId {
    /// A new id: unique in the process, never zero. Spans live in their own range
    /// (`00000a…`) so a person does not mistake one for a trace id.
    fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        SpanId((0xa << 40) | NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SpanId({:#x})", self.0)
    }
}

/// The API verb of a recorded write (`verb` of a `write` line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteVerb {
    /// POST: a new object.
    Create,
    /// PUT of the object.
    Update,
    /// PATCH of the object.
    Patch,
    /// DELETE.
    Delete,
    /// PUT of the status subresource.
    UpdateStatus,
    /// PATCH of the status subresource.
    PatchStatus,
}

impl WriteVerb {
    /// The verb as written in traces.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteVerb::Create => "create",
            WriteVerb::Update => "update",
            WriteVerb::Patch => "patch",
            WriteVerb::Delete => "delete",
            WriteVerb::UpdateStatus => "update_status",
            WriteVerb::PatchStatus => "patch_status",
        }
    }
}

/// How a reconcile ended (the `result` of its `end` line).
#[derive(Clone, Copy)]
pub enum ReconcileResult<'a> {
    /// It succeeded.
    Ok,
    /// It failed; the message goes on the line (formatted only when tracing is on).
    Error(&'a dyn fmt::Display),
    /// It asked to be reconciled again: after the delay (`add_after`), or as soon as possible.
    Requeue(Option<Duration>),
}

impl fmt::Debug for ReconcileResult<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReconcileResult::Ok => f.write_str("Ok"),
            ReconcileResult::Error(e) => f.debug_tuple("Error").field(&e.to_string()).finish(),
            ReconcileResult::Requeue(after) => f.debug_tuple("Requeue").field(after).finish(),
        }
    }
}

tokio::task_local! {
    /// The span of the reconcile the current task runs, set by [`ReconcileSpan::scope`].
    static CURRENT: Option<SpanId>;
}

/// One reconcile of one key (T6): its start, its writes and its end, under the trace ids of
/// the item the worker took. Inert (an empty `Option`, nothing recorded, nothing allocated)
/// when tracing is off at its start.
///
/// A span dropped without [`end`](Self::end) (a panic, a cancelled future) ends with result
/// `error`, so a reader never sees a reconcile that did not finish.
#[derive(Debug)]
#[must_use = "a reconcile span records its end with `end`"]
pub struct ReconcileSpan {
    live: Option<Live>,
}

#[derive(Debug)]
struct Live {
    id: SpanId,
    queue: Arc<str>,
    key: String,
    started: Instant,
}

impl ReconcileSpan {
    /// Starts the reconcile of the item `taken` (from
    /// [`get_traced`](crate::workqueue::AsyncWorkQueue::get_traced)): a `reconcile` line
    /// with `what` = `start`, the item's trace ids and the worker. The queue's name and the
    /// key (its `Display`) go on every line of the span.
    pub fn start<T: fmt::Display>(taken: &Taken<T>) -> Self {
        if !enabled() {
            return ReconcileSpan { live: None };
        }
        Self::start_live(taken)
    }

    #[cold]
    #[inline(never)]
    fn start_live<T: fmt::Display>(taken: &Taken<T>) -> Self {
        let live = Live {
            id: SpanId::next(),
            queue: taken.queue_name().map_or_else(|| Arc::from(""), Arc::clone),
            key: taken.item().to_string(),
            started: Instant::now(),
        };
        let worker = WorkerName(taken.worker()).to_string();
        if tracing_enabled() {
            tracing::event!(
                name: "reconcile",
                target: TRACE_TARGET,
                tracing::Level::TRACE,
                what = "start",
                span = %live.id,
                queue = &*live.queue,
                key = live.key.as_str(),
                traces = %IdList(taken.traces()),
                worker = worker.as_str(),
            );
        }
        sink::record_loop(|t| LoopRecord::ReconcileStart {
            t,
            what: "start",
            span: Hex(live.id.0),
            queue: Arc::clone(&live.queue),
            key: live.key.clone(),
            traces: taken.traces().iter().map(|t| Hex(t.0)).collect(),
            worker,
        });
        ReconcileSpan { live: Some(live) }
    }

    /// The span's id; `None` when tracing was off at its start.
    pub fn id(&self) -> Option<SpanId> {
        self.live.as_ref().map(|l| l.id)
    }

    /// Runs `fut` with this span as the current one, so [`record_write`] anywhere inside it
    /// (however deep) records its writes under this span. No allocation.
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        CURRENT.scope(self.id(), fut)
    }

    /// Records an API write of this reconcile: `rv` is the resourceVersion the server
    /// answered (`""` when none, e.g. a delete answered by a Status); `ns` is `""` for a
    /// cluster-scoped object.
    pub fn write(&self, verb: WriteVerb, kind: &str, ns: &str, name: &str, rv: &str) {
        if let Some(l) = &self.live {
            emit_write(Some(l.id), verb, kind, ns, name, rv);
        }
    }

    /// Ends the reconcile: a `reconcile` line with `what` = `end`, the result and the
    /// duration.
    pub fn end(mut self, result: ReconcileResult<'_>) {
        if let Some(live) = self.live.take() {
            live.end(result);
        }
    }
}

impl Drop for ReconcileSpan {
    fn drop(&mut self) {
        if let Some(live) = self.live.take() {
            live.end(ReconcileResult::Error(
                &"the reconcile ended without an end (it panicked or was cancelled)",
            ));
        }
    }
}

impl Live {
    #[cold]
    #[inline(never)]
    fn end(self, result: ReconcileResult<'_>) {
        let dur = self.started.elapsed().as_nanos() as u64;
        let (what, error, requeue_after) = match result {
            ReconcileResult::Ok => ("ok", None, None),
            ReconcileResult::Error(e) => ("error", Some(e.to_string()), None),
            ReconcileResult::Requeue(after) => {
                ("requeue", None, after.map(|d| d.as_nanos() as u64))
            }
        };
        if tracing_enabled() {
            tracing::event!(
                name: "reconcile",
                target: TRACE_TARGET,
                tracing::Level::TRACE,
                what = "end",
                span = %self.id,
                queue = &*self.queue,
                key = self.key.as_str(),
                result = what,
                error = error.as_deref(),
                requeue_after,
                dur,
            );
        }
        sink::record_loop(|t| LoopRecord::ReconcileEnd {
            t,
            what: "end",
            span: Hex(self.id.0),
            queue: self.queue,
            key: self.key,
            result: what,
            error,
            requeue_after,
            dur,
        });
    }
}

/// Records an API write (T6): under the span of the reconcile whose
/// [`scope`](ReconcileSpan::scope) runs the current task, or with no span outside any (the
/// `write` line then lacks `span`). `rv` is the resourceVersion the server answered (`""`
/// when none); `ns` is `""` for a cluster-scoped object. Nothing is recorded, and nothing
/// allocated, when tracing is off.
#[inline]
pub fn record_write(verb: WriteVerb, kind: &str, ns: &str, name: &str, rv: &str) {
    if enabled() {
        let span = CURRENT.try_with(|s| *s).ok().flatten();
        emit_write(span, verb, kind, ns, name, rv);
    }
}

/// The span of the reconcile the current task runs in (see [`ReconcileSpan::scope`]).
pub fn current_span() -> Option<SpanId> {
    CURRENT.try_with(|s| *s).ok().flatten()
}

#[cold]
#[inline(never)]
fn emit_write(span: Option<SpanId>, verb: WriteVerb, kind: &str, ns: &str, name: &str, rv: &str) {
    if tracing_enabled() {
        tracing::event!(
            name: "write",
            target: TRACE_TARGET,
            tracing::Level::TRACE,
            span = span.map(tracing::field::display),
            verb = verb.as_str(),
            kind,
            ns,
            name,
            rv,
        );
    }
    sink::record_loop(|t| LoopRecord::Write {
        t,
        span: span.map(|s| Hex(s.0)),
        verb: verb.as_str(),
        kind: kind.to_owned(),
        ns: ns.to_owned(),
        name: name.to_owned(),
        rv: rv.to_owned(),
    });
}

/// Trace ids as a `tracing` field: comma-separated hex, oldest first.
struct IdList<'a>(&'a [TraceId]);

impl fmt::Display for IdList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{t}")?;
        }
        Ok(())
    }
}

fn ids(traces: &[TraceId]) -> Vec<Hex> {
    traces.iter().map(|t| Hex(t.0)).collect()
}

fn opt(trace: TraceId) -> Option<Hex> {
    (!trace.is_none()).then_some(Hex(trace.0))
}

/// One workqueue operation, as the queue hands it over to be recorded (T5). Built only when
/// tracing is on, under the queue's lock; [`QueueEvent::emit`] after it is released.
#[derive(Debug)]
pub(crate) struct QueueEvent {
    pub(crate) queue: Arc<str>,
    pub(crate) key: String,
    pub(crate) op: QueueLine,
}

/// What a `queue` line says (docs/trace-format.md).
#[derive(Debug)]
pub(crate) enum QueueLine {
    Added {
        trace: TraceId,
    },
    Merged {
        trace: TraceId,
        into: Vec<TraceId>,
    },
    Dirty {
        trace: TraceId,
    },
    Delayed {
        trace: TraceId,
        delay: Duration,
    },
    RateLimited {
        delay: Duration,
        requeues: u32,
    },
    DroppedNotOwned,
    Got {
        traces: Vec<TraceId>,
        /// Ids not kept past the item's bound (`MAX_ITEM_TRACES`).
        untraced: u32,
        wait: Duration,
        worker: WorkerName,
    },
    Done {
        dur: Duration,
        requeued: bool,
    },
    Forget,
}

/// A worker as written on `got` and `start` lines: the number its caller gave, or `""` for a
/// plain `get`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WorkerName(pub(crate) Option<u32>);

impl fmt::Display for WorkerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(n) => write!(f, "{n}"),
            None => Ok(()),
        }
    }
}

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

impl QueueEvent {
    /// Sends the line to `tracing` and to the sink.
    #[cold]
    #[inline(never)]
    pub(crate) fn emit(self) {
        if tracing_enabled() {
            self.emit_tracing();
        }
        let QueueEvent { queue, key, op } = self;
        let op = match op {
            QueueLine::Added { trace } => QueueOp::Added { trace: opt(trace) },
            QueueLine::Merged { trace, into } => QueueOp::Merged {
                trace: opt(trace),
                into: ids(&into),
            },
            QueueLine::Dirty { trace } => QueueOp::Dirty { trace: opt(trace) },
            QueueLine::Delayed { trace, delay } => QueueOp::Delayed {
                trace: opt(trace),
                delay: ns(delay),
            },
            QueueLine::RateLimited { delay, requeues } => QueueOp::RateLimited {
                delay: ns(delay),
                requeues,
            },
            QueueLine::DroppedNotOwned => QueueOp::Dropped {
                reason: "not_owned",
            },
            QueueLine::Got {
                traces,
                untraced,
                wait,
                worker,
            } => QueueOp::Got {
                traces: ids(&traces),
                untraced,
                wait: ns(wait),
                worker: worker.to_string(),
            },
            QueueLine::Done { dur, requeued } => QueueOp::Done {
                dur: ns(dur),
                requeued,
            },
            QueueLine::Forget => QueueOp::Forget,
        };
        sink::record_loop(|t| LoopRecord::Queue { t, queue, key, op });
    }

    fn emit_tracing(&self) {
        let (mut trace, mut into, mut traces) = (None, None, None);
        let (mut delay, mut requeues, mut reason) = (None, None, None);
        let (mut wait, mut worker, mut dur, mut requeued) = (None, None, None, None);
        let mut untraced: Option<u32> = None;
        let what = match &self.op {
            QueueLine::Added { trace: t } => {
                trace = opt(*t).map(|_| *t);
                "added"
            }
            QueueLine::Merged { trace: t, into: i } => {
                trace = opt(*t).map(|_| *t);
                into = Some(IdList(i));
                "merged"
            }
            QueueLine::Dirty { trace: t } => {
                trace = opt(*t).map(|_| *t);
                "dirty"
            }
            QueueLine::Delayed { trace: t, delay: d } => {
                trace = opt(*t).map(|_| *t);
                delay = Some(ns(*d));
                "delayed"
            }
            QueueLine::RateLimited {
                delay: d,
                requeues: r,
            } => {
                delay = Some(ns(*d));
                requeues = Some(*r);
                "rate_limited"
            }
            QueueLine::DroppedNotOwned => {
                reason = Some("not_owned");
                "dropped"
            }
            QueueLine::Got {
                traces: t,
                untraced: u,
                wait: w,
                worker: k,
            } => {
                traces = Some(IdList(t));
                untraced = (*u > 0).then_some(*u);
                wait = Some(ns(*w));
                worker = Some(*k);
                "got"
            }
            QueueLine::Done {
                dur: d,
                requeued: r,
            } => {
                dur = Some(ns(*d));
                requeued = Some(*r);
                "done"
            }
            QueueLine::Forget => "forget",
        };
        tracing::event!(
            name: "queue",
            target: TRACE_TARGET,
            tracing::Level::TRACE,
            queue = &*self.queue,
            key = self.key.as_str(),
            what,
            trace = trace.map(tracing::field::display),
            into = into.map(tracing::field::display),
            traces = traces.map(tracing::field::display),
            delay,
            requeues,
            reason,
            wait,
            worker = worker.map(tracing::field::display),
            untraced,
            dur,
            requeued,
        );
    }
}

/// True when queue lines are wanted (the sink runs, or a subscriber takes the trace target).
#[inline]
pub(crate) fn queue_tracing() -> bool {
    enabled()
}
