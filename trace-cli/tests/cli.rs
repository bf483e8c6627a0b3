//! The `kinformer-trace` binary on the fixture files: output, messages and exit codes.

use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kinformer-trace"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn follow_prints_hops_in_pipeline_order_with_latencies() {
    let out = run(&["follow", "demo/web-1", &fixture("two-informers.jsonl")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("Pod demo/web-1: 2 traces, 14 hops"),
        "{text}"
    );
    // The second trace (the watch event), line by line.
    let trace = text
        .split("\ntrace 0000010000000205")
        .nth(1)
        .expect("the modified trace");
    let hops: Vec<Vec<&str>> = trace
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    let columns: Vec<(&str, &str, &str)> = hops.iter().map(|h| (h[1], h[2], h[3])).collect();
    assert_eq!(
        columns,
        [
            ("+0.000ms", "reflector", "v1/Pod"),
            ("+0.035ms", "fifo", "v1/Pod"),
            ("+0.185ms", "indexer", "v1/Pod"),
            ("+0.225ms", "listener", "deployment-controller-pods"),
            ("+0.705ms", "handler", "deployment-controller-pods"),
            ("+0.237ms", "listener", "pod-logger"),
            ("+120.787ms", "handler", "pod-logger"),
        ]
    );
    assert_eq!(hops[0][0], "2025-11-23T09:47:16.600000Z");
    assert!(trace.contains("handled   rv=1012  dur=550.0µs"), "{trace}");
}

#[test]
fn follow_with_kind_and_cluster_scoped() {
    let out = run(&[
        "follow",
        "--kind",
        "Deployment",
        "demo/web",
        &fixture("two-informers.jsonl"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("sync (born in the indexer, latency from there)"));
    let out = run(&["follow", "node-a", &fixture("two-informers.jsonl")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("Node node-a: 2 traces"));
}

#[test]
fn follow_an_absent_object_fails_clearly() {
    let file = fixture("two-informers.jsonl");
    let out = run(&["follow", "demo/nope", &file]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).is_empty());
    let message = stderr(&out);
    assert!(
        message.starts_with(&format!(
            "kinformer-trace: error: {file}: demo/nope has no hop in this trace file (7 objects there:"
        )),
        "{message}"
    );
}

#[test]
fn stats_prints_known_percentiles_and_drops() {
    let out = run(&["stats", &fixture("known-latencies.jsonl")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let row = |prefix: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} row in\n{text}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        row("fifo       v1/ConfigMap"),
        [
            "fifo",
            "v1/ConfigMap",
            "ns=k",
            "10",
            "500.0µs",
            "900.0µs",
            "1.000ms",
            "1.000ms"
        ]
    );
    assert_eq!(
        row("handler    cm"),
        [
            "handler",
            "cm",
            "10",
            "50.000ms",
            "90.000ms",
            "100.000ms",
            "100.000ms"
        ]
    );
    assert!(text.contains("series: 4 4 2 7 0 0 0 0 0 0 0 0"), "{text}");
    assert!(
        text.contains("12 records dropped by the sink (dropped lines: 2)"),
        "{text}"
    );
    assert!(text.contains("end line: 54 written, 12 dropped"), "{text}");
    assert!(text.contains("complete (closed cleanly)"), "{text}");
}

#[test]
fn slow_lists_exactly_the_slow_traces() {
    let out = run(&["slow", "--over", "75ms", &fixture("known-latencies.jsonl")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("4 of 10 traces took over 75.000ms"),
        "{text}"
    );
    let ids: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("trace "))
        .map(|l| l.split_whitespace().next().unwrap_or_default())
        .collect();
    assert_eq!(
        ids,
        [
            "000000000000c00a",
            "000000000000c009",
            "000000000000c008",
            "000000000000c007"
        ]
    );
    assert!(text.contains("most time: in cm's buffer (listener → handler start) 63.000ms"));

    // --top keeps the slowest, says how many more there are.
    let out = run(&[
        "slow",
        "--over",
        "75ms",
        "--top",
        "2",
        &fixture("known-latencies.jsonl"),
    ]);
    let text = stdout(&out);
    assert!(
        text.starts_with("4 of 10 traces took over 75.000ms"),
        "{text}"
    );
    let ids: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("trace "))
        .map(|l| l.split_whitespace().next().unwrap_or_default())
        .collect();
    assert_eq!(ids, ["000000000000c00a", "000000000000c009"]);
    assert!(
        text.ends_with(
            "\n… and 2 more over the bound (the 2 slowest are shown; --top 0 shows all)\n"
        ),
        "{text}"
    );
    let out = run(&[
        "slow",
        "--over",
        "75ms",
        "--top",
        "0",
        &fixture("known-latencies.jsonl"),
    ]);
    assert_eq!(stdout(&out).matches("\ntrace ").count(), 4, "--top 0: all");

    let out = run(&["slow", "--over", "2s", &fixture("known-latencies.jsonl")]);
    assert!(stdout(&out).starts_with("0 of 10 traces took over 2.000s"));
    // Default bound: 100 ms.
    let out = run(&["slow", &fixture("two-informers.jsonl")]);
    assert!(stdout(&out).starts_with("2 of 13 traces took over 100.000ms"));
}

#[test]
fn slow_rejects_a_bad_bound_as_a_usage_error() {
    let out = run(&["slow", "--over", "fast", &fixture("known-latencies.jsonl")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("invalid value 'fast' for '--over <OVER>'"));
}

#[test]
fn chrome_writes_trace_event_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("out.json");
    let out_path = path.display().to_string();
    let out = run(&["chrome", &out_path, &fixture("two-informers.jsonl")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&path).expect("written");
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let events = json["traceEvents"].as_array().expect("traceEvents array");
    for ph in ["M", "X", "i", "C", "s", "f"] {
        assert!(events.iter().any(|e| e["ph"] == ph), "no {ph} event");
    }
    assert!(events.iter().any(|e| e["ph"] == "M"
        && e["name"] == "process_name"
        && e["args"]["name"] == "kinformer (pid 4242)"));
}

#[test]
fn html_writes_a_self_contained_page() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("out.html");
    let out_path = path.display().to_string();
    let file = fixture("two-informers.jsonl");
    let out = run(&["html", &out_path, &file, "--object", "demo/web-1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = std::fs::read_to_string(&path).expect("written");
    assert!(page.contains("\"key\":\"Pod demo/web-1\""));
    assert!(!page.contains(" src="), "nothing loaded from elsewhere");
    let out = run(&["html", &out_path, &file, "--object", "demo/nope"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn truncated_file_warns_and_goes_on() {
    let out = run(&["stats", &fixture("truncated.jsonl")]);
    assert_eq!(out.status.code(), Some(0));
    let warning = stderr(&out);
    assert!(
        warning.contains("warning:")
            && warning.contains("truncated at line 41; using the 40 complete lines"),
        "{warning}"
    );
    assert!(stdout(&out).contains("INCOMPLETE: truncated at line 41"));
    let out = run(&["follow", "demo/web", &fixture("truncated.jsonl")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn foreign_file_is_refused() {
    for command in [
        &["stats"][..],
        &["follow", "demo/web"],
        &["slow"],
        &["chrome", "-"],
        &["html", "-"],
    ] {
        let mut args = command.to_vec();
        let file = fixture("foreign.jsonl");
        args.push(&file);
        let out = run(&args);
        assert_eq!(out.status.code(), Some(1), "{command:?}");
        assert!(stdout(&out).is_empty(), "{command:?}");
        let message = stderr(&out);
        assert!(
            message.starts_with(&format!(
                "kinformer-trace: error: {file}: not a kinformer trace file (first line: {{\"timestamp\""
            )),
            "{message}"
        );
    }
}

#[test]
fn unsupported_missing_and_damaged_files_fail() {
    let out = run(&["stats", &fixture("version2.jsonl")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("unsupported kinformer trace format version 2"));

    let file = fixture("no-such-file.jsonl");
    let out = run(&["stats", &file]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!("kinformer-trace: error: {file}: no such trace file\n")
    );

    let out = run(&["stats", &fixture("malformed-middle.jsonl")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(": line 3: malformed trace line:"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn empty_and_header_cut_files_fail_with_their_own_message() {
    let dir = tempfile::tempdir().expect("temp dir");
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").expect("write");
    let empty = empty.display().to_string();
    let out = run(&["follow", "demo/web", &empty]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "kinformer-trace: error: {empty}: not a kinformer trace file (the file is empty)\n"
        )
    );

    let cut = dir.path().join("cut.jsonl");
    std::fs::write(
        &cut,
        r#"{"type":"header","format":"kinformer-trace","v":1,"t":176"#,
    )
    .expect("write");
    let cut = cut.display().to_string();
    let out = run(&["stats", &cut]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).is_empty());
    assert_eq!(
        stderr(&out),
        format!(
            "kinformer-trace: error: {cut}: a kinformer trace file cut short in its header line: \
             it holds no record\n"
        )
    );
}
