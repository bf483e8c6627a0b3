//! Log setup for the sim's binary and the examples that embed the sim (`deployment-controller`,
//! `pods-web`, `kube-controllers`): one `--log-format` flag and one rule for colour, written
//! once. Lines go to stderr (stdout stays a program's output), filtered by `RUST_LOG`; text is
//! coloured only when stderr is a terminal and `NO_COLOR` is unset or empty
//! (<https://no-color.org>), so a file, a pipe or a log collector gets no escape codes; `json`
//! is tracing-subscriber's one object a line.
//!
//! ```no_run
//! use kinformer_sim::logging::{self, LogFormat};
//!
//! logging::init(LogFormat::Text, "info")?;
//! tracing::info!("started");
//! # Ok::<(), logging::LoggingError>(())
//! ```

use std::io::IsTerminal as _;

/// How log lines are written (`--log-format`, a [`clap::ValueEnum`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines, coloured only on a terminal without `NO_COLOR`.
    #[default]
    Text,
    /// One JSON object a line (tracing-subscriber's `json` format), for a log collector.
    Json,
}

/// Why [`init`] could not install the subscriber.
#[derive(Debug, thiserror::Error)]
#[error("setting the global tracing subscriber: {0}")]
pub struct LoggingError(#[source] Box<dyn std::error::Error + Send + Sync + 'static>);

/// Whether text logs on stderr get colours: stderr is a terminal and `NO_COLOR` is unset or
/// empty.
pub fn color_enabled() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Installs the process's global tracing subscriber: stderr, `RUST_LOG` (else
/// `default_filter`, e.g. `"info"`), `format`, colours per [`color_enabled`].
///
/// # Errors
/// [`LoggingError`] when a global subscriber is already set.
pub fn init(format: LogFormat, default_filter: &str) -> Result<(), LoggingError> {
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => fmt.with_ansi(color_enabled()).try_init(),
        LogFormat::Json => fmt.json().try_init(),
    }
    .map_err(LoggingError)
}
