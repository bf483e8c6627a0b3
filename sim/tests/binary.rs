//! The `kinformer-sim` binary's logs (its setup is `kinformer_sim::logging`, shared with the
//! examples): on stderr, no escape codes when stderr is not a terminal, and `--log-format json`
//! one JSON object a line.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Generous: a debug build starting on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(60);

/// Starts the binary on a free port with `args`, stderr piped (not a terminal, no `NO_COLOR`:
/// it has to notice by itself), and returns the stderr lines up to the one saying it listens.
fn stderr_until_listening(args: &[&str]) -> Vec<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kinformer-sim"))
        .args(["--port", "0"])
        .args(args)
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kinformer-sim");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + DEADLINE;
    let mut lines = Vec::new();
    let found = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let done = line.contains("kinformer-sim listening");
                lines.push(line);
                if done {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        found,
        "no 'listening' log line within {DEADLINE:?}: {lines:#?}"
    );
    lines
}

#[test]
fn text_logs_on_a_pipe_have_no_escape_codes() {
    let lines = stderr_until_listening(&[]);
    for line in &lines {
        assert!(
            !line.contains("\x1b["),
            "an ANSI escape on a pipe: {line:?}"
        );
    }
    assert!(lines.iter().any(|l| l.contains(" INFO ")), "{lines:#?}");
}

#[test]
fn log_format_json_writes_one_object_a_line() {
    let lines = stderr_until_listening(&["--log-format", "json"]);
    for line in lines.iter().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"));
        for field in ["timestamp", "level", "fields", "target"] {
            assert!(v.get(field).is_some(), "no {field:?} in {line}");
        }
    }
}
