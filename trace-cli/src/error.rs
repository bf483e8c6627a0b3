//! The reader's typed errors.

/// What went wrong reading or querying a trace file.
///
/// A truncated last line is not an error: [`crate::TraceFile::truncated`] reports it and the
/// complete lines before it are used (`docs/trace-format.md`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The trace file does not exist.
    #[error("no such trace file")]
    Missing,
    /// The trace file exists but could not be read.
    #[error("cannot read the trace file: {0}")]
    Read(#[source] std::io::Error),
    /// The file is empty (or blank): there is not even a header.
    #[error("not a kinformer trace file (the file is empty)")]
    Empty,
    /// The file holds only the start of a kinformer header: the writer was cut short before
    /// it finished its first line (nothing after it to read).
    #[error("a kinformer trace file cut short in its header line: it holds no record")]
    TruncatedHeader,
    /// The first line is not a kinformer header: some other file was given.
    #[error("not a kinformer trace file (first line: {first_line})")]
    Foreign {
        /// The start of the first line, as text.
        first_line: String,
    },
    /// A kinformer trace of a format version this reader does not know.
    #[error(
        "unsupported kinformer trace format version {version} (this kinformer-trace reads version {})",
        crate::FORMAT_VERSION
    )]
    UnsupportedVersion {
        /// The header's `v`, as it was written.
        version: String,
    },
    /// A line before the last one does not parse: the file is damaged, not merely cut short.
    #[error("line {line}: malformed trace line: {reason}")]
    Malformed {
        /// 1-based line number in the file.
        line: usize,
        /// What the JSON decoder said.
        reason: String,
    },
    /// The object asked for has no hop in the file.
    #[error("{query} has no hop in this trace file{hint}")]
    ObjectNotFound {
        /// The object as asked for (`ns/name`, `name`, with the kind when given).
        query: String,
        /// A hint naming objects that are in the file (may be empty).
        hint: String,
    },
    /// The key asked for has no reconcile in the file (`why`).
    #[error("{query} has no reconcile in this trace file{hint}")]
    NoReconcile {
        /// The key as asked for (`ns/name`, with the queue when given).
        query: String,
        /// A hint naming keys that were reconciled (may say the file has no reconcile line).
        hint: String,
    },
    /// An object argument that is not `ns/name` or `name`.
    #[error("bad object {0:?}: expected ns/name, or name for a cluster-scoped object")]
    BadObject(String),
}
