//! `kinformer-trace`: reads a kinformer trace file (`docs/trace-format.md`).
//!
//! Exit status: 0 on success (a truncated file is a warning on stderr, not a failure), 1 on an
//! error (missing, foreign, unsupported or damaged file; object not in the file, or for `why`
//! no reconcile of the key; output not writable), 2 on a usage error.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kinformer_trace::{ObjectQuery, TraceFile};

mod replay_cmd;

/// Read a kinformer trace file: follow one object, latency statistics, slow events, and
/// exports for Perfetto / chrome://tracing and the browser.
#[derive(Parser)]
#[command(
    name = "kinformer-trace",
    version,
    after_help = "Objects: ns/name, or name for a cluster-scoped object. Trace files: \
                  KINFORMER_TRACE=path or kinformer_actors::trace::TraceSink (docs/trace-format.md).\n\
                  Exit status: 0 ok (a truncated file is a warning), 1 error (missing, foreign, \
                  unsupported or damaged file; object not in the file), 2 usage."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One object's timeline (or one trace's): each trace's hops with wall time and latency from
    /// the reflector, then its loop: queue, reconcile, writes, and the own events that came back.
    Follow {
        /// The object: ns/name, or name for a cluster-scoped object; or a trace id (16 hex
        /// digits).
        object: String,
        /// The trace file (JSON lines, as written by the trace sink).
        file: PathBuf,
        /// Only objects of this kind (e.g. Pod).
        #[arg(long)]
        kind: Option<String>,
    },
    /// Each reconcile of a key, with the events that caused it (and which were own writes).
    Why {
        /// The key: ns/name, or name for a cluster-scoped object.
        key: String,
        /// The trace file.
        file: PathBuf,
        /// Only the reconciles of this queue.
        #[arg(long)]
        queue: Option<String>,
    },
    /// Per-hop latency percentiles, handler run times, FIFO and buffer depth, drops, queue wait
    /// and reconcile duration.
    Stats {
        /// The trace file.
        file: PathBuf,
    },
    /// The traces whose end-to-end latency (reflector → last handler) passed a bound.
    Slow {
        /// The bound, e.g. 100ms, 2s, 500us.
        #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
        over: Duration,
        /// Show only the N slowest of them (0: all); the count covers all.
        #[arg(long, value_name = "N", default_value_t = 20)]
        top: usize,
        /// The trace file.
        file: PathBuf,
    },
    /// Export in Chrome trace-event format (opens in Perfetto and chrome://tracing).
    Chrome {
        /// Where to write the JSON (`-` for standard output).
        out: PathBuf,
        /// The trace file.
        file: PathBuf,
    },
    /// Export a self-contained HTML page with a swimlane per actor and an object's path.
    Html {
        /// Where to write the page (`-` for standard output).
        out: PathBuf,
        /// The trace file.
        file: PathBuf,
        /// The object drawn first: ns/name, or name (default: the one with the most hops).
        #[arg(long)]
        object: Option<String>,
        /// Only objects of this kind for --object.
        #[arg(long)]
        kind: Option<String>,
    },
    /// Serve a simulated API server playing a trace recorded with bodies: the initial list,
    /// then the watch events (the recorded controller's own writes left out), for a fresh
    /// controller to run against.
    Replay(replay_cmd::ReplayArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A closed pipe (`kinformer-trace follow … | head`) is not an error worth a message.
            let broken_pipe = e
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe);
            if !broken_pipe {
                eprintln!("kinformer-trace: error: {e:#}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Opens a trace file, warning on stderr when it was cut short.
fn open(file: &Path) -> anyhow::Result<TraceFile> {
    let trace = TraceFile::open(file).with_context(|| file.display().to_string())?;
    if let Some(cut) = trace.truncated {
        eprintln!("kinformer-trace: warning: {}: {cut}", file.display());
    }
    Ok(trace)
}

fn object(text: &str, kind: Option<String>) -> anyhow::Result<ObjectQuery> {
    Ok(text.parse::<ObjectQuery>()?.with_kind(kind))
}

/// Writes `text` to `out`, or to standard output for `-`.
fn write_out(out: &Path, text: &str) -> anyhow::Result<()> {
    if out == Path::new("-") {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(text.as_bytes())?;
        stdout.flush()?;
        Ok(())
    } else {
        std::fs::write(out, text).with_context(|| format!("cannot write {}", out.display()))
    }
}

fn print(text: &str) -> anyhow::Result<()> {
    write_out(Path::new("-"), text)
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Follow {
            object: o,
            file,
            kind,
        } => {
            let trace = open(&file)?;
            // A trace id of the file names that event; any other text names an object.
            if kinformer_trace::follow::is_trace_id(&o) && kind.is_none() {
                if let Some(timeline) = kinformer_trace::follow_trace(&trace, &o) {
                    return print(&timeline.to_string());
                }
            }
            let query = object(&o, kind)?;
            let timeline = kinformer_trace::follow(&trace, &query)
                .with_context(|| file.display().to_string())?;
            print(&timeline.to_string())
        }
        Command::Why { key, file, queue } => {
            let query = object(&key, None)?;
            let trace = open(&file)?;
            let why = kinformer_trace::why::why(&trace, &query, queue.as_deref())
                .with_context(|| file.display().to_string())?;
            print(&why.to_string())
        }
        Command::Stats { file } => {
            let trace = open(&file)?;
            print(&kinformer_trace::stats::stats(&trace).to_string())
        }
        Command::Slow { over, top, file } => {
            let trace = open(&file)?;
            print(
                &kinformer_trace::slow::slow(&trace, over)
                    .top(top)
                    .to_string(),
            )
        }
        Command::Chrome { out, file } => {
            let trace = open(&file)?;
            let events = kinformer_trace::chrome::chrome(&trace);
            if out == Path::new("-") {
                let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
                serde_json::to_writer(&mut stdout, &events)?;
                stdout.flush()?;
            } else {
                let create = || format!("cannot write {}", out.display());
                let mut file = std::io::BufWriter::new(File::create(&out).with_context(create)?);
                serde_json::to_writer(&mut file, &events).with_context(create)?;
                file.flush().with_context(create)?;
            }
            if out != Path::new("-") {
                eprintln!(
                    "wrote {} (open it in https://ui.perfetto.dev or chrome://tracing)",
                    out.display()
                );
            }
            Ok(())
        }
        Command::Html {
            out,
            file,
            object: o,
            kind,
        } => {
            let query = o.map(|o| object(&o, kind)).transpose()?;
            let trace = open(&file)?;
            let page = kinformer_trace::html::html(&trace, query.as_ref())
                .with_context(|| file.display().to_string())?;
            write_out(&out, &page)?;
            if out != Path::new("-") {
                eprintln!("wrote {}", out.display());
            }
            Ok(())
        }
        Command::Replay(args) => replay_cmd::run(args),
    }
}
