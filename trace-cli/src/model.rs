//! The lines of a trace file and the parser (`docs/trace-format.md`).

use std::path::Path;

use serde::Deserialize;

use crate::TraceError;

/// The trace format version this reader understands (the header's `v`).
pub const FORMAT_VERSION: u64 = 1;

/// The `format` value of a kinformer header line.
pub const FORMAT_NAME: &str = "kinformer-trace";

/// The actor a hop happened in, in pipeline order (`Ord` follows the pipeline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HopKind {
    /// The reflector decoded a watch event or a listed object (traces are born here).
    Reflector,
    /// The DeltaFIFO queued the delta.
    Fifo,
    /// The indexer applied the delta to the store (resync traces are born here).
    Indexer,
    /// A listener accepted the notification into its buffer.
    Listener,
    /// A listener's handler finished with the notification.
    Handler,
}

impl HopKind {
    /// Every hop kind, in pipeline order.
    pub const ALL: [HopKind; 5] = [
        HopKind::Reflector,
        HopKind::Fifo,
        HopKind::Indexer,
        HopKind::Listener,
        HopKind::Handler,
    ];

    /// The name used in the file (`reflector`, `fifo`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            HopKind::Reflector => "reflector",
            HopKind::Fifo => "fifo",
            HopKind::Indexer => "indexer",
            HopKind::Listener => "listener",
            HopKind::Handler => "handler",
        }
    }
}

impl std::fmt::Display for HopKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// The header line (always the first line).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Header {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// Format version, [`FORMAT_VERSION`].
    pub v: u64,
    /// When the sink was opened, nanoseconds since the Unix epoch.
    pub t: u64,
    /// The writing process's id.
    #[serde(default)]
    pub pid: Option<u64>,
    /// Whether object bodies were opted in (T3).
    #[serde(default)]
    pub bodies: bool,
}

/// One object at one hop.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Hop {
    /// When the hop happened, nanoseconds since the Unix epoch.
    pub t: u64,
    /// The trace id (16 hex digits) that follows one event through every hop.
    pub trace: String,
    /// The actor.
    pub hop: HopKind,
    /// The actor instance: the informer id (reflector, fifo, indexer) or the listener's name.
    pub inst: String,
    /// The object's kind.
    pub kind: String,
    /// The object's namespace, `""` when cluster-scoped.
    #[serde(default)]
    pub ns: String,
    /// The object's name.
    pub name: String,
    /// The object's uid, may be `""`.
    #[serde(default)]
    pub uid: String,
    /// The object's resourceVersion, may be `""`.
    #[serde(default)]
    pub rv: String,
    /// What happened (`added`, `queued`, `sync`, `update`, `handled`, …).
    pub what: String,
    /// On handler hops: nanoseconds the handler's callback took.
    #[serde(default)]
    pub dur: Option<u64>,
}

/// A `queue` line: one workqueue operation on one key (`docs/trace-format.md`, "Beyond the
/// handler"). Only `t` is required of the new line types: a field a writer left out reads as
/// absent (or `""`), and an unknown `what` is kept as written, so a reader shows it raw.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct QueueOp {
    /// When, nanoseconds since the Unix epoch.
    pub t: u64,
    /// The queue's name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub queue: String,
    /// The key: `ns/name`, or `name` when cluster-scoped.
    #[serde(default, deserialize_with = "null_as_default")]
    pub key: String,
    /// `added`, `merged`, `dirty`, `delayed`, `rate_limited`, `dropped`, `got`, `done`,
    /// `forget`, or a newer writer's word (shown raw).
    #[serde(default, deserialize_with = "null_as_default")]
    pub what: String,
    /// The event that caused an add (`added`, `merged`, `dirty`, `delayed`).
    #[serde(default)]
    pub trace: Option<String>,
    /// On `merged`: the traces the pending item already carried.
    #[serde(default, deserialize_with = "null_as_default")]
    pub into: Vec<String>,
    /// On `got`: every trace merged into the item, oldest first.
    #[serde(default, deserialize_with = "null_as_default")]
    pub traces: Vec<String>,
    /// On `got`: nanoseconds from ready to taken.
    #[serde(default)]
    pub wait: Option<u64>,
    /// On `got`: the worker that took the item.
    #[serde(default, deserialize_with = "text_or_number")]
    pub worker: Option<String>,
    /// On `delayed` and `rate_limited`: nanoseconds until the key is ready.
    #[serde(default)]
    pub delay: Option<u64>,
    /// On `rate_limited`: retries before this one.
    #[serde(default)]
    pub requeues: Option<u64>,
    /// On `dropped`: why (`not_owned`).
    #[serde(default)]
    pub reason: Option<String>,
    /// On `done`: nanoseconds since `got`.
    #[serde(default)]
    pub dur: Option<u64>,
    /// On `done`: the key was dirty and is queued again.
    #[serde(default)]
    pub requeued: Option<bool>,
}

/// A `reconcile` line: the start or the end of one reconcile of one key.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ReconcileLine {
    /// When, nanoseconds since the Unix epoch.
    pub t: u64,
    /// `start`, `end`, or a newer writer's word (shown raw).
    #[serde(default, deserialize_with = "null_as_default")]
    pub what: String,
    /// The reconcile's id (16 hex digits), shared by its start, end and writes.
    #[serde(default, deserialize_with = "null_as_default")]
    pub span: String,
    /// The queue the key came from.
    #[serde(default, deserialize_with = "null_as_default")]
    pub queue: String,
    /// The key reconciled.
    #[serde(default, deserialize_with = "null_as_default")]
    pub key: String,
    /// On `start`: the trace ids of the item the worker took.
    #[serde(default, deserialize_with = "null_as_default")]
    pub traces: Vec<String>,
    /// On `start`: the worker.
    #[serde(default, deserialize_with = "text_or_number")]
    pub worker: Option<String>,
    /// On `end`: `ok`, `error` or `requeue`.
    #[serde(default)]
    pub result: Option<String>,
    /// On `end` with `result` = `error`: the message.
    #[serde(default)]
    pub error: Option<String>,
    /// On `end` with `result` = `requeue`: the delay asked for, nanoseconds.
    #[serde(default)]
    pub requeue_after: Option<u64>,
    /// On `end`: nanoseconds the reconcile took.
    #[serde(default)]
    pub dur: Option<u64>,
}

/// A `write` line: an API write a reconcile made, with the resourceVersion the server answered.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WriteLine {
    /// When, nanoseconds since the Unix epoch.
    pub t: u64,
    /// The reconcile that made it; `None` for a write made outside any reconcile.
    #[serde(default)]
    pub span: Option<String>,
    /// `create`, `update`, `patch`, `delete`, `update_status`, `patch_status`, or a newer
    /// writer's word.
    #[serde(default, deserialize_with = "null_as_default")]
    pub verb: String,
    /// The object's kind.
    #[serde(default, deserialize_with = "null_as_default")]
    pub kind: String,
    /// The object's namespace, `""` when cluster-scoped.
    #[serde(default, deserialize_with = "null_as_default")]
    pub ns: String,
    /// The object's name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    /// The resourceVersion the server answered, `""` when none.
    #[serde(default, deserialize_with = "null_as_default")]
    pub rv: String,
}

impl WriteLine {
    /// `ns/name`, or `name` for a cluster-scoped object.
    pub fn path(&self) -> String {
        crate::fmt::path(&self.ns, &self.name)
    }
}

/// Reads `null` as the type's default (`""`, no items), as a field left out would read: a writer
/// that writes absent values as `null` costs no line.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Reads a field a writer may give as a string or a number (a worker id) as text; `null` as
/// absent.
fn text_or_number<'de, D>(deserializer: D) -> Result<Option<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum TextOrNumber {
        Text(String),
        Unsigned(u64),
        Signed(i64),
        Float(f64),
    }
    Ok(
        Option::<TextOrNumber>::deserialize(deserializer)?.map(|v| match v {
            TextOrNumber::Text(s) => s,
            TextOrNumber::Unsigned(n) => n.to_string(),
            TextOrNumber::Signed(n) => n.to_string(),
            TextOrNumber::Float(n) => n.to_string(),
        }),
    )
}

/// A mailbox or buffer depth sample.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DepthSample {
    /// When, nanoseconds since the Unix epoch.
    pub t: u64,
    /// Which actor (`fifo` or `listener`).
    pub hop: HopKind,
    /// Which instance.
    pub inst: String,
    /// The depth.
    pub depth: u64,
}

/// The sink's writer fell behind and dropped records.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Dropped {
    /// When, nanoseconds since the Unix epoch.
    pub t: u64,
    /// Records lost since the previous `dropped` line.
    pub count: u64,
}

/// The last line of a cleanly closed trace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct End {
    /// When the sink was closed, nanoseconds since the Unix epoch.
    pub t: u64,
    /// Records written.
    pub written: u64,
    /// Records dropped in all.
    pub dropped: u64,
}

/// Where a truncated file was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    /// 1-based number of the incomplete last line.
    pub line: usize,
    /// How many complete lines (the header included) were used.
    pub complete_lines: usize,
}

impl std::fmt::Display for Truncation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "truncated at line {}; using the {} complete lines",
            self.line, self.complete_lines
        )
    }
}

/// One line after the header.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Line {
    Header(serde::de::IgnoredAny),
    Hop(Hop),
    Depth(DepthSample),
    Queue(QueueOp),
    Reconcile(ReconcileLine),
    Write(WriteLine),
    Dropped(Dropped),
    End(End),
    /// A line type this reader does not know: skipped and counted (a newer writer may add
    /// types without a version change).
    #[serde(other)]
    Unknown,
}

/// A parsed trace file: every record, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceFile {
    /// The header line.
    pub header: Header,
    /// Every hop line, in file order (not necessarily time order).
    pub hops: Vec<Hop>,
    /// Every depth sample, in file order.
    pub depths: Vec<DepthSample>,
    /// Every `queue` line, in file order (none in a trace of an older writer).
    pub queue: Vec<QueueOp>,
    /// Every `reconcile` line, in file order.
    pub reconciles: Vec<ReconcileLine>,
    /// Every `write` line, in file order.
    pub writes: Vec<WriteLine>,
    /// Every `dropped` line, in file order.
    pub dropped: Vec<Dropped>,
    /// The `end` line, when the sink was closed cleanly.
    pub end: Option<End>,
    /// Set when the last line was incomplete (the lines before it are used).
    pub truncated: Option<Truncation>,
    /// Lines of a type this reader does not know (skipped).
    pub unknown_lines: usize,
}

/// A trace file's bytes: [`TraceError::Missing`] when there is none at `path`, else
/// [`TraceError::Read`] for any other failure (the reader's and the replay's one way in).
pub(crate) fn read_trace(path: &Path) -> Result<Vec<u8>, TraceError> {
    std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => TraceError::Missing,
        _ => TraceError::Read(e),
    })
}

impl TraceFile {
    /// Reads and parses the trace file at `path`.
    pub fn open(path: &Path) -> Result<TraceFile, TraceError> {
        TraceFile::parse(&read_trace(path)?)
    }

    /// Parses a whole trace file. Never panics, whatever the bytes.
    ///
    /// The first non-blank line must be a kinformer header of version [`FORMAT_VERSION`]. A last
    /// line that does not parse is taken as a cut-short write ([`TraceFile::truncated`]); any
    /// earlier line that does not parse is an error naming it. Blank lines are skipped; lines of
    /// an unknown `type` are counted in [`TraceFile::unknown_lines`].
    pub fn parse(bytes: &[u8]) -> Result<TraceFile, TraceError> {
        let mut lines = bytes
            .split(|b| *b == b'\n')
            .enumerate()
            .map(|(i, l)| (i + 1, l.strip_suffix(b"\r").unwrap_or(l)))
            .filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace))
            .peekable();
        let Some((_, first)) = lines.next() else {
            return Err(TraceError::Empty);
        };
        let header = parse_header(first, lines.peek().is_none())?;
        let mut file = TraceFile {
            header,
            hops: Vec::new(),
            depths: Vec::new(),
            queue: Vec::new(),
            reconciles: Vec::new(),
            writes: Vec::new(),
            dropped: Vec::new(),
            end: None,
            truncated: None,
            unknown_lines: 0,
        };
        let mut complete_lines = 1;
        while let Some((number, text)) = lines.next() {
            let line = match serde_json::from_slice::<Line>(text) {
                Ok(line) => line,
                Err(_) if lines.peek().is_none() => {
                    file.truncated = Some(Truncation {
                        line: number,
                        complete_lines,
                    });
                    break;
                }
                Err(e) => {
                    return Err(TraceError::Malformed {
                        line: number,
                        reason: e.to_string(),
                    });
                }
            };
            complete_lines += 1;
            match line {
                Line::Header(_) => {
                    return Err(TraceError::Malformed {
                        line: number,
                        reason: "a second header line".to_string(),
                    });
                }
                Line::Hop(hop) => file.hops.push(hop),
                Line::Depth(depth) => file.depths.push(depth),
                Line::Queue(op) => file.queue.push(op),
                Line::Reconcile(line) => file.reconciles.push(line),
                Line::Write(write) => file.writes.push(write),
                Line::Dropped(dropped) => file.dropped.push(dropped),
                Line::End(end) => file.end = Some(end),
                Line::Unknown => file.unknown_lines += 1,
            }
        }
        Ok(file)
    }

    /// Whether the file was closed cleanly: it has its `end` line and was not cut short.
    pub fn is_complete(&self) -> bool {
        self.end.is_some() && self.truncated.is_none()
    }

    /// Sum of the `dropped` lines' counts.
    pub fn dropped_total(&self) -> u64 {
        self.dropped
            .iter()
            .fold(0u64, |sum, d| sum.saturating_add(d.count))
    }

    /// The latest time of any record (the header's when there is none).
    pub fn last_t(&self) -> u64 {
        let hops = self.hops.iter().map(|h| h.t);
        let depths = self.depths.iter().map(|d| d.t);
        let dropped = self.dropped.iter().map(|d| d.t);
        let end = self.end.iter().map(|e| e.t);
        let queue = self.queue.iter().map(|q| q.t);
        let reconciles = self.reconciles.iter().map(|r| r.t);
        let writes = self.writes.iter().map(|w| w.t);
        hops.chain(depths)
            .chain(queue)
            .chain(reconciles)
            .chain(writes)
            .chain(dropped)
            .chain(end)
            .fold(self.header.t, u64::max)
    }
}

/// How the trace sink starts every header line (`docs/trace-format.md`).
const HEADER_START: &[u8] = b"{\"type\":\"header\",\"format\":\"kinformer-trace\"";

/// Parses the first line: a kinformer header, else [`TraceError::Foreign`], or
/// [`TraceError::TruncatedHeader`] when it is the only line and a cut-short sink header.
fn parse_header(line: &[u8], only_line: bool) -> Result<Header, TraceError> {
    let foreign = || TraceError::Foreign {
        first_line: excerpt(line),
    };
    let value: serde_json::Value = serde_json::from_slice(line).map_err(|_| {
        // The sink's own header, cut (a full disk, a kill mid-write): not some other file.
        let cut_header = only_line
            && line.len() >= 10
            && (HEADER_START.starts_with(line) || line.starts_with(HEADER_START));
        if cut_header {
            TraceError::TruncatedHeader
        } else {
            foreign()
        }
    })?;
    let is_header = value.get("type").and_then(|t| t.as_str()) == Some("header")
        && value.get("format").and_then(|f| f.as_str()) == Some(FORMAT_NAME);
    if !is_header {
        return Err(foreign());
    }
    match value.get("v") {
        Some(v) if v.as_u64() == Some(FORMAT_VERSION) => {}
        Some(v) => {
            return Err(TraceError::UnsupportedVersion {
                version: v.to_string(),
            });
        }
        None => {
            return Err(TraceError::UnsupportedVersion {
                version: "(none)".to_string(),
            });
        }
    }
    serde_json::from_value(value).map_err(|e| TraceError::Malformed {
        line: 1,
        reason: e.to_string(),
    })
}

/// The first 80 characters of a line, for an error message.
fn excerpt(line: &[u8]) -> String {
    const MAX: usize = 80;
    let text = String::from_utf8_lossy(line);
    let mut out: String = text.chars().take(MAX).collect();
    if text.chars().nth(MAX).is_some() {
        out.push('…');
    }
    out
}
