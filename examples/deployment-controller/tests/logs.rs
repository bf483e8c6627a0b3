//! Logs fit where they go (issue 28, item 2): redirected to a file, the binary writes no ANSI
//! escape codes (colour is for terminals only), and `--log-format json` writes one JSON object
//! a line, for a log collector.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

/// Generous: a debug build of the demo under a loaded CI machine.
const DEADLINE: Duration = Duration::from_secs(120);

/// Runs the embedded demo for a few seconds with stdout and stderr redirected to files (not a
/// terminal, and no `NO_COLOR`: the binary has to notice by itself); (stdout, stderr).
fn run_demo(extra: &[&str]) -> (String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_deployment-controller"))
        .args(["--embedded", "--duration", "3"])
        .args(extra)
        .env_remove("NO_COLOR")
        .env_remove("KINFORMER_TRACE")
        .env("RUST_LOG", "info")
        .stdout(Stdio::from(
            std::fs::File::create(&out).expect("stdout file"),
        ))
        .stderr(Stdio::from(
            std::fs::File::create(&err).expect("stderr file"),
        ))
        .spawn()
        .expect("spawn deployment-controller");
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the demo did not end within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let read = |p| std::fs::read_to_string(p).expect("read output");
    let (stdout, stderr) = (read(&out), read(&err));
    assert!(status.success(), "the demo failed: {status}\n{stderr}");
    (stdout, stderr)
}

#[test]
fn logs_redirected_to_a_file_have_no_escape_codes() {
    let (stdout, stderr) = run_demo(&[]);
    assert!(
        stderr.contains(" INFO "),
        "no log lines on stderr:\n{stderr}"
    );
    for (name, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        if let Some(at) = text.find("\x1b[") {
            let line = text[..at].matches('\n').count() + 1;
            panic!(
                "{name} is a file, yet line {line} has an ANSI escape: {:?}",
                text.lines().nth(line - 1).unwrap_or_default()
            );
        }
    }
}

#[test]
fn log_format_json_writes_one_object_a_line() {
    let (_stdout, stderr) = run_demo(&["--log-format", "json"]);
    let mut lines = 0;
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"));
        for field in ["timestamp", "level", "fields", "target"] {
            assert!(v.get(field).is_some(), "no {field:?} in {line}");
        }
        lines += 1;
    }
    assert!(lines > 0, "no log lines on stderr");
    assert!(!stderr.contains("\x1b["), "escape codes in JSON logs");
}
