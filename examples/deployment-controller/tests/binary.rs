//! The `deployment-controller` binary as a user runs it (issue 10's "done when"): the embedded
//! demo with `--trace FILE`, read back with the `kinformer-trace` library as
//! `kinformer-trace follow demo/web FILE` reads it; and `--metrics-addr` serving `/metrics`,
//! `/healthz`, `/readyz` and `/debug/informers` while the demo runs; the default demo's output
//! (the summary on stdout, the log on stderr, no kubectl hint for a server about to go) and its
//! flags (`--duration`, with `--run-for` a hidden alias).

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpStream},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use kinformer_trace::{HopKind, ObjectQuery, TraceFile, follow};

/// Generous: a debug build of the demo under a loaded CI machine.
const DEADLINE: Duration = Duration::from_secs(120);

fn controller() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_deployment-controller"));
    // The embedded sim even if the machine has a kubeconfig; plain log lines to parse.
    c.arg("--embedded")
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .env_remove("KINFORMER_TRACE");
    c
}

/// Kills the child when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for the child to exit by itself within `DEADLINE`; its exit status.
fn wait_exit(child: &mut Running) -> std::process::ExitStatus {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the demo did not end within {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn demo_with_trace_then_follow_shows_web_in_pipeline_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.jsonl");
    let mut child = Running(
        controller()
            .arg("--trace")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn deployment-controller"),
    );
    let status = wait_exit(&mut child);
    assert!(status.success(), "the demo failed: {status}");

    let file = TraceFile::open(&path).expect("a readable trace");
    assert!(file.is_complete(), "the trace ends with its `end` line");
    assert_eq!(file.dropped_total(), 0, "the demo's trace dropped records");
    let web: ObjectQuery = "demo/web".parse().expect("query");
    let timeline = follow(
        &file,
        &web.clone().with_kind(Some("Deployment".to_string())),
    )
    .expect("demo/web is in the trace");
    assert!(
        timeline.traces.len() >= 3,
        "the demo creates, scales and rolls web out: {} traces",
        timeline.traces.len()
    );
    // At least one trace of web went the whole way: born in the reflector, queued, applied,
    // accepted by a listener and handled, in that order.
    let full = timeline.traces.iter().find(|t| {
        let kinds: Vec<HopKind> = t.hops.iter().map(|h| h.hop).collect();
        kinds.first() == Some(&HopKind::Reflector) && kinds.contains(&HopKind::Handler)
    });
    let full = full.expect("a trace of web from the reflector to a handler");
    let kinds: Vec<HopKind> = full.hops.iter().map(|h| h.hop).collect();
    let first_of = |k: HopKind| kinds.iter().position(|x| *x == k);
    let order: Vec<usize> = [
        HopKind::Reflector,
        HopKind::Fifo,
        HopKind::Indexer,
        HopKind::Listener,
        HopKind::Handler,
    ]
    .into_iter()
    .map(|k| first_of(k).unwrap_or_else(|| panic!("no {k:?} hop in {kinds:?}")))
    .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "hops out of pipeline order: {kinds:?}"
    );
    assert!(
        kinds
            .windows(2)
            .all(|w| w[0] <= w[1] || (w[0] == HopKind::Handler && w[1] == HopKind::Listener)),
        "a hop before an earlier stage: {kinds:?}"
    );
    // The object's own trace never carries another object.
    assert!(
        timeline
            .traces
            .iter()
            .all(|t| t.object.ns == "demo" && t.object.name == "web")
    );
}

/// One HTTP GET over a fresh connection: (status, body).
fn get(addr: SocketAddr, path: &str, accept: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    )
    .expect("write request");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read answer");
    let (head, body) = raw.split_once("\r\n\r\n").expect("head and body");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status line");
    (status, body.to_string())
}

#[test]
fn metrics_addr_serves_metrics_health_and_debug_view() {
    let mut child = Running(
        controller()
            .args([
                "--metrics-addr",
                "127.0.0.1:0",
                "--serve",
                "--duration",
                "90",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn deployment-controller"),
    );
    // The log line naming the bound address (port 0 asked the OS for one).
    let (tx, rx) = mpsc::channel::<String>();
    for out in [
        Box::new(child.0.stdout.take().expect("stdout")) as Box<dyn Read + Send>,
        Box::new(child.0.stderr.take().expect("stderr")),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    let deadline = Instant::now() + DEADLINE;
    let addr: SocketAddr = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("a log line naming the metrics address");
        if let Some(rest) = line.split("metrics: http://").nth(1) {
            let addr = rest.split('/').next().expect("address");
            break addr.parse().expect("a socket address");
        }
    };

    // Ready once every informer synced.
    loop {
        let (status, body) = get(addr, "/readyz", "*/*");
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "/readyz before sync: {body}");
        assert!(Instant::now() < deadline, "/readyz never 200: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, body) = get(addr, "/healthz", "*/*");
    assert_eq!(status, 200, "/healthz: {body}");

    let (status, metrics) = get(addr, "/metrics", "*/*");
    assert_eq!(status, 200);
    for series in [
        "workqueue_adds_total{name=\"deployment\"}",
        "workqueue_depth{name=\"deployment\"}",
        "kinformer_informer_synced{",
        "kinformer_reflector_lists_total{",
        "kinformer_store_objects{",
        "kinformer_listener_handle_duration_seconds_bucket{",
    ] {
        assert!(metrics.contains(series), "/metrics lacks {series}");
    }

    let (status, json) = get(addr, "/debug/informers", "application/json");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON debug view");
    let informers = v
        .get("informers")
        .and_then(|i| i.as_array())
        .unwrap_or_else(|| panic!("no informers array: {json}"));
    for kind in ["Deployment", "ReplicaSet", "Pod"] {
        assert!(
            informers
                .iter()
                .any(|i| i["type_name"].as_str().is_some_and(|t| t.contains(kind))),
            "no {kind} informer in {json}"
        );
    }
    let (status, html) = get(addr, "/debug/informers", "text/html");
    assert_eq!(status, 200);
    assert!(html.contains("<html"), "a page for browsers");
}

/// Issue 30 item 3: `--sharded` summarises every replica's work and lists the Deployments as
/// they ended, not replica 0's cache. With three static shards the demo's namespace is not
/// replica 0's, which made the summary read "reconciles 0 ... deployments (0)".
#[test]
fn sharded_summary_adds_up_the_replicas_and_lists_what_the_demo_left() {
    let out = controller()
        .args(["--sharded", "--shards", "static", "--replicas", "3"])
        .stderr(Stdio::null())
        .output()
        .expect("run deployment-controller");
    assert!(out.status.success(), "the demo failed: {}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .split("== deployment-controller summary ==")
        .nth(1)
        .unwrap_or_else(|| panic!("no summary in {stdout}"));
    let number_after = |label: &str| -> u64 {
        let at = summary
            .find(label)
            .unwrap_or_else(|| panic!("no {label:?} in {summary}"));
        summary[at + label.len()..]
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number after {label:?} in {summary}"))
    };
    assert!(number_after("reconciles ") > 0, "{summary}");
    assert!(number_after("status updates ") > 0, "{summary}");
    assert!(number_after("ReplicaSets created ") >= 6, "{summary}");
    assert!(!summary.contains("one watch each"), "{summary}");
    // The demo ends with web and api rolled out and worker deleted.
    assert!(summary.contains("deployments (2):"), "{summary}");
    for line in summary
        .lines()
        .filter(|l| l.trim_start().starts_with("demo/"))
    {
        assert!(
            line.contains("complete"),
            "not the end state of the demo: {line}"
        );
    }
    assert!(summary.contains("demo/web") && summary.contains("demo/api"));
    assert!(!summary.contains("demo/worker"), "{summary}");
}

/// The default demo, as the README's first command runs it: the summary is the only thing on
/// stdout, the log is on stderr, and the log offers no kubectl command for a server (and a
/// temporary kubeconfig) that is gone when the demo ends.
#[test]
fn the_default_demo_prints_its_summary_on_stdout_and_logs_on_stderr() {
    let out = controller()
        .stdin(Stdio::null())
        .output()
        .expect("run deployment-controller");
    assert!(out.status.success(), "the demo failed: {}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("== deployment-controller summary =="),
        "{stdout}"
    );
    let logs_on_stdout: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(" INFO ") || l.contains(" WARN "))
        .collect();
    assert!(
        logs_on_stdout.is_empty(),
        "log lines on stdout: {logs_on_stdout:#?}"
    );
    assert!(
        stderr.contains(" INFO ") && stderr.contains("embedded mode"),
        "the log is on stderr: {stderr}"
    );
    assert!(
        !stderr.contains("try: kubectl"),
        "a kubectl hint for a server that is about to go: {stderr}"
    );
}

/// One flag for how long to run: `--duration` (seconds or 90s, 2m); `--run-for` still parses
/// (scripts) but is not offered.
#[test]
fn duration_is_the_one_run_length_flag_and_run_for_a_hidden_alias() {
    let help = controller().arg("--help").output().expect("--help");
    assert!(help.status.success());
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--duration <DURATION>"), "{help}");
    assert!(!help.contains("--run-for"), "{help}");
    // Parsed before --help is acted on: an unknown flag would exit 2.
    for args in [
        ["--run-for", "2m", "--help"],
        ["--duration", "90", "--help"],
        ["--duration", "90s", "--help"],
    ] {
        let out = controller().args(args).output().expect("run");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `--scale-scenario` shows its progress and its tables, not its thousands of INFO lines: a
/// line as each phase starts, a table as it ends, warnings only on stderr unless `-v`, and never
/// a full ring selector (dozens of `shardRange(...)` on one line).
#[test]
fn the_scale_scenario_prints_a_line_per_phase_and_stays_quiet_unless_asked() {
    let run = |verbose: bool| {
        let mut c = controller();
        // The scenario's own default decides the level, not the harness's RUST_LOG.
        c.env_remove("RUST_LOG")
            .args(["--scale-scenario", "--scale-deployments", "12"])
            .args(["--scale-namespaces", "6"]);
        if verbose {
            c.arg("-v");
        }
        let out = c.output().expect("run the scale scenario");
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The two runs are separate processes, each with its own embedded server: run side by side
    // (the scenario mostly waits on its leases, so this halves the test's time).
    let ((stdout, stderr), (v_stdout, v_stderr)) = std::thread::scope(|s| {
        let verbose = s.spawn(|| run(true));
        let quiet = run(false);
        (quiet, verbose.join().expect("the verbose run"))
    });
    for phase in ["phase 1/3: ", "phase 2/3: ", "phase 3/3: "] {
        assert!(
            stdout.lines().any(|l| l.starts_with(phase)),
            "{phase}: {stdout}"
        );
    }
    assert!(stdout.contains("ring settled after"), "{stdout}");
    assert!(!stderr.contains(" INFO "), "INFO without -v: {stderr}");
    assert!(!stdout.contains(" INFO "), "{stdout}");
    let (stdout, stderr) = (v_stdout, v_stderr);
    assert!(stderr.contains(" INFO "), "-v logs at INFO: {stderr}");
    assert!(stderr.contains("ranges moved in"), "{stderr}");
    for out in [&stdout, &stderr] {
        assert!(
            !out.contains("shardRange("),
            "a full selector: {}",
            out.lines()
                .find(|l| l.contains("shardRange("))
                .unwrap_or_default()
        );
    }
}
