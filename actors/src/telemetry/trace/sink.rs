//! The trace sink (docs/semantics.md T2, T3): hop records written as JSON lines, in the format
//! of `docs/trace-format.md`, by a thread of its own.
//!
//! The sink is process-wide: one slot that every hop checks with one relaxed load. When it is
//! on, a hop builds a small owned record and `try_send`s it on a bounded crossbeam channel; the
//! writer thread serialises it (the object's body too, when opted in) into a `BufWriter`. A full
//! channel never blocks the pipeline: the record is dropped and counted, and the writer says how
//! many it lost in a `dropped` line before the next record it writes. The writer flushes at
//! least every [`FLUSH_EVERY`], so a process that dies loses at most that much; closing the sink
//! (the guard's [`close`](TraceSinkGuard::close) or drop) drains the channel, writes `end` and
//! joins the thread.

use std::{
    fs::File,
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use arc_swap::ArcSwapOption;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use kinformer::{TraceId, lean::LazyObject};
use serde::Serialize;

use super::{Hop, TRACE_ENV};
use crate::object::InformerObject;

/// The longest the writer keeps written lines in its buffer.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// The format version written in the header (`v`).
const FORMAT_VERSION: u32 = 1;

/// Options of a [`TraceSink`].
#[derive(Clone, Debug)]
pub struct TraceSinkConfig {
    /// Records the channel to the writer holds; when it is full, hops drop their record and
    /// count it (never wait). Default 65 536.
    pub capacity: usize,
    /// Adds each object's body (`body`) to its hop lines, except for Secrets, which never
    /// enter a trace (T3). Default false: bodies are serialised only when this is on, on the
    /// writer thread.
    pub bodies: bool,
    /// Test hook: the writer sleeps this long after each record (a slow disk), to make the
    /// channel overflow. Zero by default.
    #[doc(hidden)]
    pub writer_delay: Duration,
}

impl Default for TraceSinkConfig {
    fn default() -> Self {
        TraceSinkConfig {
            capacity: 65_536,
            bodies: false,
            writer_delay: Duration::ZERO,
        }
    }
}

/// How much a sink wrote and dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceStats {
    /// `hop`, `depth`, `queue`, `reconcile` and `write` lines written.
    pub written: u64,
    /// Records dropped because the writer fell behind (the sum of the `dropped` lines).
    pub dropped: u64,
}

/// Why a sink could not start or did not close cleanly.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The trace file could not be created.
    #[error("cannot create the trace file {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Writing to the trace file failed; records after the failure were counted as dropped.
    #[error("writing the trace failed: {0}")]
    Write(#[source] io::Error),
    /// The writer thread could not be spawned.
    #[error("cannot spawn the trace writer thread: {0}")]
    Spawn(#[source] io::Error),
    /// A sink is already running in this process (there is one sink per process).
    #[error("a trace sink is already running in this process")]
    AlreadyRunning,
    /// The writer thread panicked; the file may lack its `end` line.
    #[error("the trace writer thread panicked")]
    WriterPanicked,
}

/// The process-wide trace sink. Start it with [`TraceSink::start`] (or `KINFORMER_TRACE=path`,
/// see [`init_from_env`]); it runs until the returned guard is closed or dropped.
///
/// ```no_run
/// # fn demo() -> Result<(), kinformer_actors::trace::TraceError> {
/// let sink = kinformer_actors::trace::TraceSink::start("/tmp/kinformer.jsonl")?;
/// // ... run informers ...
/// let stats = sink.close()?; // flushes, writes `end`, joins the writer
/// println!("{} records written, {} dropped", stats.written, stats.dropped);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TraceSink;

/// Takes the lifecycle lock for starting a sink, refusing if one is already running (one sink
/// per process).
fn claim() -> Result<std::sync::MutexGuard<'static, ()>, TraceError> {
    let lifecycle = lock(&LIFECYCLE);
    if SLOT.load().is_some() {
        return Err(TraceError::AlreadyRunning);
    }
    Ok(lifecycle)
}

impl TraceSink {
    /// Starts the sink on a new file at `path` (truncated if it exists), with the default
    /// options (no bodies, capacity 65 536).
    pub fn start(path: impl AsRef<Path>) -> Result<TraceSinkGuard, TraceError> {
        Self::start_with(path, TraceSinkConfig::default())
    }

    /// Starts the sink on a new file at `path` with `config`.
    pub fn start_with(
        path: impl AsRef<Path>,
        config: TraceSinkConfig,
    ) -> Result<TraceSinkGuard, TraceError> {
        let path = path.as_ref();
        // Refused before the file is created: a second sink (`KINFORMER_TRACE` next to a
        // program's own sink) must not truncate what is at its path, an earlier trace maybe.
        let _lifecycle = claim()?;
        let file = File::create(path).map_err(|source| TraceError::Open {
            path: path.to_owned(),
            source,
        })?;
        Self::start_locked(Box::new(file), config)
    }

    /// Starts the sink writing to `out` (a file, a pipe, stderr) with `config`.
    pub fn start_writer(
        out: Box<dyn Write + Send>,
        config: TraceSinkConfig,
    ) -> Result<TraceSinkGuard, TraceError> {
        let _lifecycle = claim()?;
        Self::start_locked(out, config)
    }

    /// Starts the sink; the caller holds `LIFECYCLE` from [`claim`] (no sink is running).
    fn start_locked(
        out: Box<dyn Write + Send>,
        config: TraceSinkConfig,
    ) -> Result<TraceSinkGuard, TraceError> {
        let mut out = BufWriter::new(out);
        let header = Header {
            ty: "header",
            format: "kinformer-trace",
            v: FORMAT_VERSION,
            t: now_ns(),
            pid: std::process::id(),
            bodies: config.bodies,
        };
        write_line(&mut out, &header)
            .and_then(|()| out.flush())
            .map_err(TraceError::Write)?;
        let (tx, rx) = crossbeam_channel::bounded(config.capacity.max(1));
        let counters = Arc::new(Counters::default());
        let writer = Writer {
            out,
            counters: Arc::clone(&counters),
            reported: 0,
            error: None,
            delay: config.writer_delay,
            last_flush: Instant::now(),
            dirty: false,
        };
        let thread = std::thread::Builder::new()
            .name("kinformer-trace".into())
            .spawn(move || writer.run(rx))
            .map_err(TraceError::Spawn)?;
        let shared = Arc::new(Shared {
            tx: tx.clone(),
            bodies: config.bodies,
            counters: Arc::clone(&counters),
        });
        SLOT.store(Some(Arc::clone(&shared)));
        ON.store(true, Ordering::Relaxed);
        Ok(TraceSinkGuard {
            running: Some(Running { tx, thread, shared }),
            counters,
        })
    }

    /// What the running sink wrote and dropped so far; `None` when no sink runs.
    pub fn stats() -> Option<TraceStats> {
        SLOT.load().as_ref().map(|s| s.counters.stats())
    }

    /// True when a sink is running.
    pub fn is_running() -> bool {
        is_on()
    }
}

/// Keeps the sink running; [`close`](Self::close) (or drop) stops it: later hops are not
/// recorded, what is queued is written, then `end`, and the writer thread is joined.
#[derive(Debug)]
pub struct TraceSinkGuard {
    running: Option<Running>,
    counters: Arc<Counters>,
}

#[derive(Debug)]
struct Running {
    tx: Sender<Msg>,
    thread: JoinHandle<io::Result<TraceStats>>,
    shared: Arc<Shared>,
}

impl TraceSinkGuard {
    /// What this sink wrote and dropped so far.
    pub fn stats(&self) -> TraceStats {
        self.counters.stats()
    }

    /// Stops the sink and returns what it wrote and dropped (the `end` line's counts).
    pub fn close(mut self) -> Result<TraceStats, TraceError> {
        self.stop()
    }

    fn stop(&mut self) -> Result<TraceStats, TraceError> {
        let Some(running) = self.running.take() else {
            return Ok(self.counters.stats());
        };
        {
            let _lifecycle = lock(&LIFECYCLE);
            let current = SLOT.load();
            if current
                .as_ref()
                .is_some_and(|s| Arc::ptr_eq(s, &running.shared))
            {
                ON.store(false, Ordering::Relaxed);
                SLOT.store(None);
            }
        }
        // Blocking is fine here: the writer drains the channel. It is gone only if it panicked.
        let _ = running.tx.send(Msg::Close);
        match running.thread.join() {
            Ok(Ok(stats)) => Ok(stats),
            Ok(Err(e)) => Err(TraceError::Write(e)),
            Err(_) => Err(TraceError::WriterPanicked),
        }
    }
}

impl Drop for TraceSinkGuard {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!(error = %e, "trace sink did not close cleanly");
        }
    }
}

static ENV_READ: OnceLock<()> = OnceLock::new();
static ENV_SINK: Mutex<Option<TraceSinkGuard>> = Mutex::new(None);

/// Starts the sink on the file named by `KINFORMER_TRACE`, if set and not empty. Reads the
/// variable once per process (later calls do nothing and return `Ok(false)`); every informer
/// calls it when it starts, so setting the variable is enough. Returns whether it started a
/// sink. That sink runs until [`close_env_sink`] (or the process ends: its file then lacks
/// `end`, and loses at most the last [`FLUSH_EVERY`] of records).
pub fn init_from_env() -> Result<bool, TraceError> {
    let mut started = Ok(false);
    ENV_READ.get_or_init(|| {
        let Some(path) = std::env::var_os(TRACE_ENV).filter(|p| !p.is_empty()) else {
            return;
        };
        started = TraceSink::start(&path).map(|guard| {
            *lock(&ENV_SINK) = Some(guard);
            true
        });
    });
    started
}

/// Closes the sink [`init_from_env`] started, if any: writes `end` and returns its counts.
pub fn close_env_sink() -> Option<Result<TraceStats, TraceError>> {
    let guard = lock(&ENV_SINK).take()?;
    Some(guard.close())
}

/// A poisoned lock only means a panic elsewhere while holding it; the state stays valid.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// True while a sink runs: the one relaxed load a hop pays (T4).
static ON: AtomicBool = AtomicBool::new(false);
/// The running sink.
static SLOT: ArcSwapOption<Shared> = ArcSwapOption::const_empty();
/// Serialises starting and stopping.
static LIFECYCLE: Mutex<()> = Mutex::new(());

#[inline]
pub(super) fn is_on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// What hops share with the writer.
#[derive(Debug)]
struct Shared {
    tx: Sender<Msg>,
    bodies: bool,
    counters: Arc<Counters>,
}

impl Shared {
    /// Queues a record, or drops and counts it when the writer fell behind (never blocks).
    fn send(&self, r: Record) {
        match self.tx.try_send(Msg::Record(r)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
            // The writer stopped (closing): the hop raced the close.
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    written: AtomicU64,
    dropped: AtomicU64,
}

impl Counters {
    fn stats(&self) -> TraceStats {
        TraceStats {
            written: self.written.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

/// A hop's fields, borrowed from the hop (owned copies are made only when the sink is on).
pub(super) struct HopFields<'a, K> {
    pub(super) trace: TraceId,
    pub(super) hop: Hop,
    pub(super) inst: &'a Arc<str>,
    pub(super) kind: &'a Arc<str>,
    pub(super) ns: &'a str,
    pub(super) name: &'a str,
    pub(super) uid: &'a str,
    pub(super) rv: &'a str,
    pub(super) what: &'static str,
    pub(super) dur_ns: Option<u64>,
    pub(super) obj: &'a Arc<LazyObject<K>>,
}

/// Sends one hop to the sink, if one runs.
pub(super) fn record_hop<K: InformerObject>(f: HopFields<'_, K>) {
    if !is_on() {
        return;
    }
    let slot = SLOT.load();
    let Some(shared) = slot.as_ref() else { return };
    // T3: the body is only a reference to the object here; the writer serialises it.
    let body =
        (shared.bodies && !is_secret(f.kind)).then(|| Box::new(Arc::clone(f.obj)) as Box<dyn Body>);
    shared.send(Record::Hop(Box::new(HopRecord {
        t: now_ns(),
        trace: f.trace,
        hop: f.hop,
        inst: Arc::clone(f.inst),
        kind: Arc::clone(f.kind),
        ns: f.ns.to_owned(),
        name: f.name.to_owned(),
        uid: f.uid.to_owned(),
        rv: f.rv.to_owned(),
        what: f.what,
        dur: f.dur_ns,
        body,
    })));
}

/// Sends one depth sample to the sink, if one runs.
pub(super) fn record_depth(hop: Hop, inst: &Arc<str>, depth: u64) {
    if !is_on() {
        return;
    }
    let slot = SLOT.load();
    let Some(shared) = slot.as_ref() else { return };
    shared.send(Record::Depth {
        t: now_ns(),
        hop,
        inst: Arc::clone(inst),
        depth,
    });
}

/// Sends one loop record (`queue`, `reconcile`, `write`: T5, T6) to the sink, if one runs.
/// `make` builds it only then.
pub(crate) fn record_loop(make: impl FnOnce(u64) -> LoopRecord) {
    if !is_on() {
        return;
    }
    let slot = SLOT.load();
    let Some(shared) = slot.as_ref() else { return };
    shared.send(Record::Loop(Box::new(make(now_ns()))));
}

/// Secrets never enter a trace (T3): by the informer's kind (or resource plural) here, and by
/// the serialised object's own `kind` on the writer.
fn is_secret(kind: &str) -> bool {
    kind == "Secret" || kind == "secrets"
}

pub(super) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// An object whose body the writer serialises.
trait Body: Send {
    fn to_json(&self) -> serde_json::Result<serde_json::Value>;
}

impl<K: InformerObject> Body for Arc<LazyObject<K>> {
    /// The object as the informer holds it: serialised in the typed mode, the stored bytes
    /// decompressed in the lean mode (I7; never decoded into `K` for a trace).
    fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        match self.decoded() {
            Some(typed) => serde_json::to_value(&*typed),
            None => {
                let json = LazyObject::to_json(self).map_err(serde::ser::Error::custom)?;
                serde_json::from_slice(&json)
            }
        }
    }
}

enum Msg {
    Record(Record),
    Close,
}

enum Record {
    Hop(Box<HopRecord>),
    Loop(Box<LoopRecord>),
    Depth {
        t: u64,
        hop: Hop,
        inst: Arc<str>,
        depth: u64,
    },
}

/// A `queue`, `reconcile` or `write` line (docs/trace-format.md "Beyond the handler"), owned:
/// built on the caller's thread only when the sink is on, serialised on the writer.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum LoopRecord {
    /// One workqueue operation on one key (T5).
    Queue {
        t: u64,
        #[serde(serialize_with = "arc_str")]
        queue: Arc<str>,
        key: String,
        #[serde(flatten)]
        op: QueueOp,
    },
    /// A reconcile's start (T6).
    #[serde(rename = "reconcile")]
    ReconcileStart {
        t: u64,
        what: &'static str,
        span: Hex,
        #[serde(serialize_with = "arc_str")]
        queue: Arc<str>,
        key: String,
        traces: Vec<Hex>,
        worker: String,
    },
    /// A reconcile's end (T6).
    #[serde(rename = "reconcile")]
    ReconcileEnd {
        t: u64,
        what: &'static str,
        span: Hex,
        #[serde(serialize_with = "arc_str")]
        queue: Arc<str>,
        key: String,
        result: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        requeue_after: Option<u64>,
        dur: u64,
    },
    /// An API write (T6).
    Write {
        t: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        span: Option<Hex>,
        verb: &'static str,
        kind: String,
        ns: String,
        name: String,
        rv: String,
    },
}

/// What a `queue` line says, with its extra fields (T5).
#[derive(Debug, Serialize)]
#[serde(tag = "what", rename_all = "snake_case")]
pub(crate) enum QueueOp {
    Added {
        #[serde(skip_serializing_if = "Option::is_none")]
        trace: Option<Hex>,
    },
    Merged {
        #[serde(skip_serializing_if = "Option::is_none")]
        trace: Option<Hex>,
        into: Vec<Hex>,
    },
    Dirty {
        #[serde(skip_serializing_if = "Option::is_none")]
        trace: Option<Hex>,
    },
    Delayed {
        #[serde(skip_serializing_if = "Option::is_none")]
        trace: Option<Hex>,
        delay: u64,
    },
    RateLimited {
        delay: u64,
        requeues: u32,
    },
    Dropped {
        reason: &'static str,
    },
    Got {
        traces: Vec<Hex>,
        #[serde(skip_serializing_if = "is_zero")]
        untraced: u32,
        wait: u64,
        worker: String,
    },
    Done {
        dur: u64,
        requeued: bool,
    },
    Forget,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn arc_str<S: serde::Serializer>(s: &Arc<str>, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(s)
}

/// A trace or span id, serialised as its 16 lowercase hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hex(pub(crate) u64);

impl Serialize for Hex {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{:016x}", self.0))
    }
}

struct HopRecord {
    t: u64,
    trace: TraceId,
    hop: Hop,
    inst: Arc<str>,
    kind: Arc<str>,
    ns: String,
    name: String,
    uid: String,
    rv: String,
    what: &'static str,
    dur: Option<u64>,
    body: Option<Box<dyn Body>>,
}

#[derive(Serialize)]
struct Header {
    #[serde(rename = "type")]
    ty: &'static str,
    format: &'static str,
    v: u32,
    t: u64,
    pid: u32,
    bodies: bool,
}

#[derive(Serialize)]
struct HopLine<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    t: u64,
    trace: String,
    hop: &'static str,
    inst: &'a str,
    kind: &'a str,
    ns: &'a str,
    name: &'a str,
    uid: &'a str,
    rv: &'a str,
    what: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct DepthLine<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    t: u64,
    hop: &'static str,
    inst: &'a str,
    depth: u64,
}

#[derive(Serialize)]
struct DroppedLine {
    #[serde(rename = "type")]
    ty: &'static str,
    t: u64,
    count: u64,
}

#[derive(Serialize)]
struct EndLine {
    #[serde(rename = "type")]
    ty: &'static str,
    t: u64,
    written: u64,
    dropped: u64,
}

fn write_line(out: &mut impl Write, line: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer(&mut *out, line)?;
    out.write_all(b"\n")
}

/// The writer thread's state.
struct Writer {
    out: BufWriter<Box<dyn Write + Send>>,
    counters: Arc<Counters>,
    /// Drops already reported in a `dropped` line.
    reported: u64,
    /// The first write error; nothing more is written after it.
    error: Option<io::Error>,
    delay: Duration,
    last_flush: Instant,
    dirty: bool,
}

impl Writer {
    fn run(mut self, rx: Receiver<Msg>) -> io::Result<TraceStats> {
        loop {
            match rx.recv_timeout(FLUSH_EVERY) {
                Ok(Msg::Record(r)) => self.record(r),
                Ok(Msg::Close) | Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => self.report_dropped(),
            }
            if self.dirty && self.last_flush.elapsed() >= FLUSH_EVERY {
                self.flush();
            }
        }
        // Closing: what was queued before the close is written, then `end`.
        for msg in rx.try_iter() {
            if let Msg::Record(r) = msg {
                self.record(r);
            }
        }
        self.report_dropped();
        let stats = self.counters.stats();
        self.line(&EndLine {
            ty: "end",
            t: now_ns(),
            written: stats.written,
            dropped: stats.dropped,
        });
        self.flush();
        match self.error {
            Some(e) => Err(e),
            None => Ok(stats),
        }
    }

    fn record(&mut self, r: Record) {
        self.report_dropped();
        if self.error.is_some() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let written = match r {
            Record::Hop(h) => {
                let body = h.body.as_ref().and_then(|b| b.to_json().ok()).filter(|v| {
                    v.get("kind").and_then(serde_json::Value::as_str) != Some("Secret")
                });
                self.line(&HopLine {
                    ty: "hop",
                    t: h.t,
                    trace: h.trace.to_string(),
                    hop: h.hop.as_str(),
                    inst: &h.inst,
                    kind: &h.kind,
                    ns: &h.ns,
                    name: &h.name,
                    uid: &h.uid,
                    rv: &h.rv,
                    what: h.what,
                    dur: h.dur,
                    body,
                })
            }
            Record::Loop(l) => self.line(&*l),
            Record::Depth {
                t,
                hop,
                inst,
                depth,
            } => self.line(&DepthLine {
                ty: "depth",
                t,
                hop: hop.as_str(),
                inst: &inst,
                depth,
            }),
        };
        if written {
            self.counters.written.fetch_add(1, Ordering::Relaxed);
        } else {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
    }

    /// Writes a `dropped` line for the drops since the last one.
    fn report_dropped(&mut self) {
        let dropped = self.counters.dropped.load(Ordering::Relaxed);
        if dropped > self.reported && self.error.is_none() {
            let count = dropped - self.reported;
            self.reported = dropped;
            self.line(&DroppedLine {
                ty: "dropped",
                t: now_ns(),
                count,
            });
        }
    }

    /// Writes one line; false (and the error kept) when writing failed.
    fn line(&mut self, line: &impl Serialize) -> bool {
        if self.error.is_some() {
            return false;
        }
        match write_line(&mut self.out, line) {
            Ok(()) => {
                self.dirty = true;
                true
            }
            Err(e) => {
                // Said once, now: every later record is counted as dropped, and `close`
                // returns this error.
                tracing::warn!(error = %e, "trace sink: writing failed; dropping the records that follow");
                self.error = Some(e);
                false
            }
        }
    }

    fn flush(&mut self) {
        if let Err(e) = self.out.flush()
            && self.error.is_none()
        {
            self.error = Some(e);
        }
        self.dirty = false;
        self.last_flush = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose bytes the test reads back.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            lock(&self.0).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A disk that is full.
    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("no space left"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Err(io::Error::other("no space left"))
        }
    }

    /// The only unit test that starts the process-wide sink (unit tests share a process).
    #[test]
    fn t2_one_sink_per_process_header_records_end_and_write_errors() {
        let buf = Buffer::default();
        let guard = TraceSink::start_writer(Box::new(buf.clone()), TraceSinkConfig::default())
            .expect("starts");
        assert!(TraceSink::is_running());
        assert!(matches!(
            TraceSink::start_writer(Box::new(io::sink()), TraceSinkConfig::default()),
            Err(TraceError::AlreadyRunning)
        ));
        // A second sink on a file is refused before it touches the file (an earlier trace).
        let dir = tempfile::tempdir().expect("temp dir");
        let earlier = dir.path().join("earlier.jsonl");
        std::fs::write(&earlier, "an earlier trace\n").expect("write");
        assert!(matches!(
            TraceSink::start(&earlier),
            Err(TraceError::AlreadyRunning)
        ));
        assert_eq!(
            std::fs::read_to_string(&earlier).expect("read"),
            "an earlier trace\n",
            "the refused sink left the file alone"
        );
        record_depth(Hop::Fifo, &Arc::from("v1/Pod"), 3);
        let stats = guard.close().expect("closes");
        assert_eq!(
            stats,
            TraceStats {
                written: 1,
                dropped: 0
            }
        );
        assert!(!TraceSink::is_running() && TraceSink::stats().is_none());
        // Not running: hops record nothing.
        record_depth(Hop::Fifo, &Arc::from("v1/Pod"), 4);

        let text = String::from_utf8(lock(&buf.0).clone()).expect("UTF-8");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0]["type"], "header");
        assert_eq!(lines[0]["bodies"], false);
        assert_eq!(lines[1]["type"], "depth");
        assert_eq!(lines[1]["inst"], "v1/Pod");
        assert_eq!(lines[1]["depth"], 3);
        assert_eq!(lines[2]["type"], "end");
        assert_eq!(lines[2]["written"], 1);

        // A file that cannot be written is reported at start, and no sink is left running.
        assert!(matches!(
            TraceSink::start_writer(Box::new(Full), TraceSinkConfig::default()),
            Err(TraceError::Write(_))
        ));
        assert!(!TraceSink::is_running());
    }
}
