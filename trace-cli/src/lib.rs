//! Reader of kinformer trace files (`docs/trace-format.md`, T2): the library behind the
//! `kinformer-trace` command.
//!
//! [`TraceFile::open`] parses a file (refusing a foreign file or an unknown version, reporting a
//! truncated last line and using the lines before it); [`traces::traces`] groups its hops into
//! traces (one event of one object through reflector → fifo → indexer → listener → handler).
//! [`loops::Loops`] links the `queue`, `reconcile` and `write` lines (T5–T7) to them: the
//! workqueue operations a trace caused, the reconcile that took its key, the writes it made
//! and the watch events that were those writes coming back ("own writes").
//! On top of that: [`follow::follow`] (one object's timeline, on through its loop),
//! [`follow::follow_trace`] (one trace's), [`why::why`] (each reconcile of a key and the events
//! that caused it), [`stats::stats`] (per-hop latency percentiles, handler run times, FIFO and
//! buffer depth, drops, queue wait and reconcile duration), [`slow::slow`] (the
//! traces over a latency bound and where their time went), [`chrome::chrome`] (Chrome
//! trace-event JSON for Perfetto and chrome://tracing) and [`html::html`] (a self-contained
//! page with a swimlane per actor and each trace's loop). Nothing here panics on any input.
//!
//! [`replay`] plays a trace recorded with bodies into the simulated API server (`kinformer-sim`).
//!
//! ## Start here
//!
//! Record a trace (`deployment-controller --trace run.jsonl`, or `KINFORMER_TRACE=run.jsonl`
//! for any program on kinformer-actors), then read it with the `kinformer-trace` command
//! (`kinformer-trace follow demo/web run.jsonl`, `stats`, `slow`, `chrome`, `html`) or here:
//!
//! ```no_run
//! use kinformer_trace::{ObjectQuery, TraceFile, follow};
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let file = TraceFile::open(std::path::Path::new("run.jsonl"))?;
//! let web: ObjectQuery = "demo/web".parse()?;
//! let timeline = follow(&file, &web)?;
//! println!("{} traces of demo/web", timeline.traces.len());
//! # Ok(()) }
//! ```
//!
//! ## Features
//!
//! This crate has no cargo features.

#![warn(missing_docs)]

pub mod chrome;
mod error;
pub mod fmt;
pub mod follow;
pub mod html;
pub mod loops;
mod model;
pub mod replay;
pub mod slow;
pub mod stats;
pub mod traces;
pub mod why;

pub use error::TraceError;
pub use follow::{ObjectQuery, Timeline, follow, follow_trace};
pub use model::{
    DepthSample, Dropped, End, FORMAT_NAME, FORMAT_VERSION, Header, Hop, HopKind, QueueOp,
    ReconcileLine, TraceFile, Truncation, WriteLine,
};
