//! The loop beyond the handler (T5–T7) through the `kinformer-trace` binary and the library:
//! `follow`, `why` and `stats` on `loop.jsonl` (a queue merge of two events, a dirty re-add, a
//! reconcile with two writes that come back as own events), lines with only their required
//! fields, and an older trace without these lines.

use std::path::PathBuf;
use std::process::{Command, Output};

use kinformer_trace::TraceFile;

const D1: &str = "0000010000000001";
const D2: &str = "0000010000000002";
const R0: &str = "0000010000000003";
const R1: &str = "0000010000000004";
const D3: &str = "0000010000000005";
const SPAN_A: &str = "00000a0000000001";
const SPAN_B: &str = "00000a0000000002";

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

/// Standard output of a run that must succeed.
fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The block of `follow` output under `trace ID`, up to the next blank line.
fn block<'a>(text: &'a str, id: &str) -> &'a str {
    let start = text
        .find(&format!("\ntrace {id}"))
        .unwrap_or_else(|| panic!("no trace {id} in\n{text}"))
        + 1;
    let rest = &text[start..];
    &rest[..rest.find("\n\n").unwrap_or(rest.len())]
}

/// (indent, stage, instance, what) of each loop row of a block: the rows after its hops.
fn loop_rows(block: &str) -> Vec<(usize, String, String, String)> {
    block
        .lines()
        .skip(1)
        .map(|line| {
            let indent = line.len() - line.trim_start().len();
            // wall, latency, stage (maybe two words), instance (maybe two words), what, …
            let columns: Vec<&str> = line.split("  ").filter(|c| !c.is_empty()).collect();
            let columns: Vec<String> = columns.iter().map(|c| c.trim().to_string()).collect();
            (
                indent,
                columns[2].clone(),
                columns[3].clone(),
                columns[4].clone(),
            )
        })
        .filter(|(_, stage, _, _)| {
            !matches!(
                stage.as_str(),
                "reflector" | "fifo" | "indexer" | "listener"
            )
        })
        .collect()
}

fn row(indent: usize, stage: &str, inst: &str, what: &str) -> (usize, String, String, String) {
    (indent, stage.into(), inst.into(), what.into())
}

#[test]
fn follow_shows_queue_reconcile_writes_and_own_events() {
    let text = ok(&["follow", "demo/web", &fixture("loop.jsonl")]);
    assert!(
        text.starts_with("Deployment demo/web: 3 traces, 15 hops"),
        "{text}"
    );
    let first = block(&text, D1);
    let (q, dc, rs) = (
        "deployments",
        "deployment-controller",
        "apps/v1/ReplicaSet ns=demo",
    );
    assert_eq!(
        loop_rows(first),
        [
            row(2, "handler", dc, "handled"),
            row(2, "queue", q, "added"),
            row(2, "queue", q, "got"),
            row(2, "reconcile", q, "start"),
            row(2, "reconcile", q, "progress"),
            row(2, "write", SPAN_A, "create"),
            row(2, "write", SPAN_A, "update_status"),
            row(2, "reconcile", q, "end"),
            row(2, "queue", q, "done"),
            // The ReplicaSet it created comes back and flows on into the next reconcile.
            row(2, "own event", rs, "added"),
            row(4, "handler", "deployment-controller-rs", "handled"),
            row(4, "queue", q, "merged"),
            row(4, "queue", q, "got"),
            row(4, "reconcile", q, "start"),
            row(4, "reconcile", q, "end"),
            row(4, "queue", q, "done"),
            // Its own status write comes back as a trace of the object itself (shown there).
            row(2, "own event", "apps/v1/Deployment ns=demo", "modified"),
        ]
    );
    let lines: Vec<&str> = first.lines().collect();
    assert!(
        lines[7].contains(&format!("wait=505.0µs worker=1 traces={D1},{D2}")),
        "{first}"
    );
    assert!(
        lines[10].ends_with("create         ReplicaSet demo/web-5d4f8 rv=1240"),
        "{first}"
    );
    assert!(lines[12].contains("result=ok dur=490.0µs"), "{first}");
    assert!(lines[13].ends_with("dur=510.0µs requeued"), "{first}");
    assert!(
        lines[14].ends_with(&format!(
            "ReplicaSet demo/web-5d4f8 rv=1240 trace={R1} (own write: create of span {SPAN_A})"
        )),
        "{first}"
    );
    assert!(
        lines[18].contains(&format!("span={SPAN_B} worker=2")),
        "{first}"
    );
    assert!(
        lines[19].contains("result=requeue after 5.000s dur=190.0µs"),
        "{first}"
    );
    // The latency column runs from the trace's reflector hop to its own event coming back.
    assert!(lines[14].contains("   +1.200ms  own event"), "{first}");

    // The later event merged into the same pending item leads to the same reconcile.
    let second = block(&text, D2);
    assert!(
        second.contains(&format!("merged         key=demo/web into={D1}")),
        "{second}"
    );
    assert!(
        second.contains(&format!("span={SPAN_A} worker=1")),
        "{second}"
    );

    // The status write coming back names the write and the reconcile that made it.
    let third = block(&text, D3);
    assert!(
        third.starts_with(&format!(
            "trace {D3}  Deployment modified  own write: update_status by reconcile {SPAN_A} \
             (deployments demo/web)"
        )),
        "{third}"
    );
    assert!(third.contains(&format!("into={R0},{R1}")), "{third}");
}

#[test]
fn follow_a_dirty_re_add_reaches_the_next_reconcile() {
    // The ReplicaSet event came while reconcile A ran: dirty, so it is reconcile B that took it.
    let text = ok(&["follow", "demo/web-old", &fixture("loop.jsonl")]);
    let rows = loop_rows(block(&text, R0));
    let whats: Vec<(&str, &str)> = rows
        .iter()
        .map(|(_, stage, _, what)| (stage.as_str(), what.as_str()))
        .collect();
    assert_eq!(
        whats,
        [
            ("handler", "handled"),
            ("queue", "dirty"),
            ("queue", "got"),
            ("reconcile", "start"),
            ("reconcile", "end"),
            ("queue", "done"),
        ]
    );
    assert!(text.contains(&format!("span={SPAN_B} worker=2")), "{text}");
    assert!(!text.contains(SPAN_A), "not the reconcile that ran: {text}");
}

#[test]
fn follow_a_trace_id() {
    let text = ok(&["follow", R1, &fixture("loop.jsonl")]);
    assert!(
        text.starts_with("ReplicaSet demo/web-5d4f8: 1 traces, 5 hops"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "added  own write: create by reconcile {SPAN_A} (deployments demo/web)"
        )),
        "{text}"
    );
    let merged = text
        .lines()
        .find(|l| l.contains(" queue "))
        .expect("a queue row");
    assert!(
        merged.ends_with(&format!(" merged   key=demo/web into={R0}")),
        "{text}"
    );
    // A 16-hex-digit name that is no trace id is looked up as a cluster-scoped object.
    let out = run(&["follow", "00000000000000ff", &fixture("loop.jsonl")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("00000000000000ff has no hop"));
}

#[test]
fn why_lists_each_reconcile_with_its_causes() {
    let text = ok(&["why", "demo/web", &fixture("loop.jsonl")]);
    assert!(
        text.starts_with(
            // The failed reconcile lost a 409 race and was retried: a conflict, as the
            // controller's summary counts it ("409 conflicts retried"), not an error.
            "demo/web: 4 reconciles (2 ok, 1 requeue, 1 conflict); 0 caused only by own writes \
             coming back\n"
        ),
        "{text}"
    );
    let reconciles: Vec<&str> = text.split("\n\n").skip(1).collect();
    assert_eq!(reconciles.len(), 4, "{text}");
    // Two events merged into one item: one reconcile, caused by both.
    assert_eq!(
        reconciles[0],
        format!(
            "#1 reconcile {SPAN_A}  2025-11-23T09:48:20.000610Z  deployments demo/web  worker=1  ok  \
             dur=490.0µs  waited=505.0µs\n\
             \x20 caused by {D1} (added)  Deployment demo/web modified rv=1230  at 2025-11-23T09:48:20.000000Z\n\
             \x20 caused by {D2} (merged)  Deployment demo/web modified rv=1231  at 2025-11-23T09:48:20.000300Z\n\
             \x20 wrote create ReplicaSet demo/web-5d4f8 rv=1240\n\
             \x20 wrote update_status Deployment demo/web rv=1241"
        )
    );
    // A dirty re-add and both writes of #1 coming back.
    let second = reconciles[1];
    assert!(
        second.contains("requeue after 5.000s  dur=190.0µs  waited=590.0µs"),
        "{second}"
    );
    assert!(
        second.contains(&format!(
            "caused by {R0} (dirty)  ReplicaSet demo/web-old modified rv=1232"
        )),
        "{second}"
    );
    for (id, verb) in [(R1, "create"), (D3, "update_status")] {
        let line = second
            .lines()
            .find(|l| l.contains(id))
            .unwrap_or_else(|| panic!("{id} in {second}"));
        assert!(
            line.ends_with(&format!(
                "own write: {verb} by reconcile {SPAN_A} (deployments demo/web)"
            )),
            "{line}"
        );
    }
    assert!(
        !reconciles[0].contains("own write"),
        "events from elsewhere"
    );
    // Requeues without an event: the add_after asked for, then the rate-limited retry.
    assert!(
        reconciles[2].contains("conflict (409, retried): conflict: the object has been modified")
            && !reconciles[2].contains("error")
            && reconciles[2].contains("queued by delayed delay=5.000s"),
        "{}",
        reconciles[2]
    );
    assert!(
        reconciles[3].contains("queued by rate_limited delay=5.000ms requeues=0")
            && reconciles[3].ends_with("wrote delete ReplicaSet demo/web-old\n"),
        "{}",
        reconciles[3]
    );
    // --queue filters; an unknown key names the reconciled ones.
    let out = run(&["why", "demo/web", "--queue", "pods", &fixture("loop.jsonl")]);
    assert_eq!(out.status.code(), Some(1));
    let out = run(&["why", "demo/nope", &fixture("loop.jsonl")]);
    assert_eq!(out.status.code(), Some(1));
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(
        message.contains(
            "demo/nope has no reconcile in this trace file (1 keys reconciled there: demo/web \
             (deployments))"
        ),
        "{message}"
    );
}

#[test]
fn stats_adds_queue_wait_and_reconcile_percentiles() {
    let text = ok(&["stats", &fixture("loop.jsonl")]);
    let columns = |prefix: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} row in\n{text}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        columns("wait       deployments"),
        [
            "wait",
            "deployments",
            "3",
            "505.0µs",
            "590.0µs",
            "590.0µs",
            "590.0µs"
        ]
    );
    assert_eq!(
        columns("reconcile  deployments"),
        [
            "reconcile",
            "deployments",
            "4",
            "100.0µs",
            "490.0µs",
            "490.0µs",
            "490.0µs"
        ]
    );
    assert!(
        text.contains(
            "1 added, 1 delayed, 1 dirty, 4 done, 1 dropped, 1 forget, 4 got, 3 merged, \
             1 peeked, 1 rate_limited"
        ),
        "{text}"
    );
    assert!(
        text.contains("4 reconciles (1 conflict, 2 ok, 1 requeue), 3 writes"),
        "{text}"
    );
    // The new lines are known types: none is counted as unknown.
    assert!(!text.contains("unknown type"), "{text}");
}

#[test]
fn an_older_trace_without_loop_lines_still_reads() {
    let file = fixture("two-informers.jsonl");
    let text = ok(&["follow", "demo/web-1", &file]);
    for stage in ["queue", "reconcile", "write", "own event"] {
        assert!(
            !text.contains(&format!("  {stage}  ")),
            "{stage} in\n{text}"
        );
    }
    let text = ok(&["stats", &file]);
    assert!(
        text.contains("(no queue or reconcile lines: written before the workqueue was traced"),
        "{text}"
    );
    let out = run(&["why", "demo/web", &file]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "demo/web has no reconcile in this trace file (the file has no reconcile line"
        ),
    );
}

#[test]
fn loop_lines_with_only_their_required_fields_or_nulls_read() {
    let text = concat!(
        r#"{"type":"header","format":"kinformer-trace","v":1,"t":1}"#,
        "\n",
        r#"{"type":"hop","t":2,"trace":"00000000000000a1","hop":"reflector","inst":"i","kind":"Pod","ns":"d","name":"p","rv":"7","what":"added"}"#,
        "\n",
        r#"{"type":"queue","t":3}"#,
        "\n",
        r#"{"type":"queue","t":4,"queue":"q","key":"d/p","what":"teleported","trace":"00000000000000a1","worker":3,"wait":null}"#,
        "\n",
        r#"{"type":"queue","t":5,"queue":"q","key":"d/p","what":"got"}"#,
        "\n",
        r#"{"type":"reconcile","t":6}"#,
        "\n",
        r#"{"type":"reconcile","t":7,"span":"s","what":"start","queue":"q","key":"d/p"}"#,
        "\n",
        r#"{"type":"write","t":8,"span":"s","verb":"patch","kind":"Pod","ns":"d","name":"p","rv":"7"}"#,
        "\n",
        r#"{"type":"write","t":9}"#,
        "\n",
        r#"{"type":"queue","t":10,"queue":"q","key":"d/p","what":"got","traces":null,"into":null,"trace":null,"worker":null}"#,
        "\n",
        r#"{"type":"write","t":11,"span":null,"verb":"create","kind":"Pod","ns":null,"name":"p","rv":null}"#,
        "\n"
    );
    let file = TraceFile::parse(text.as_bytes()).expect("valid");
    assert_eq!(file.unknown_lines, 0);
    assert_eq!(
        (file.queue.len(), file.reconciles.len(), file.writes.len()),
        (4, 2, 3)
    );
    assert_eq!(
        file.queue[1].worker.as_deref(),
        Some("3"),
        "a number as text"
    );
    assert_eq!(file.queue[1].wait, None);
    // `null` reads as left out.
    assert!(file.queue[3].traces.is_empty() && file.queue[3].worker.is_none());
    assert_eq!(
        (file.writes[2].ns.as_str(), file.writes[2].rv.as_str()),
        ("", "")
    );
    let query = "d/p".parse().expect("object");
    let timeline = kinformer_trace::follow(&file, &query).expect("found");
    let shown = timeline.to_string();
    // The unknown word is shown as written; the reconcile without an end says so.
    assert!(shown.contains("teleported"), "{shown}");
    let why = kinformer_trace::why::why(&file, &query, None).expect("a reconcile");
    assert_eq!(why.reconciles.len(), 1);
    assert_eq!(why.reconciles[0].outcome, "(no end line)");
    let _ = kinformer_trace::stats::stats(&file).to_string();
    let _ = kinformer_trace::html::html(&file, Some(&query)).expect("page");
}

#[test]
fn a_writer_that_lists_no_traces_on_got_still_links_the_event() {
    let text = concat!(
        r#"{"type":"header","format":"kinformer-trace","v":1,"t":1}"#,
        "\n",
        r#"{"type":"hop","t":2,"trace":"00000000000000a1","hop":"reflector","inst":"i","kind":"Pod","ns":"d","name":"p","rv":"7","what":"added"}"#,
        "\n",
        r#"{"type":"queue","t":3,"queue":"q","key":"d/p","what":"added","trace":"00000000000000a1"}"#,
        "\n",
        r#"{"type":"queue","t":4,"queue":"q","key":"d/p","what":"got","worker":"1"}"#,
        "\n",
        r#"{"type":"reconcile","t":5,"what":"start","span":"s","queue":"q","key":"d/p","worker":"1"}"#,
        "\n",
        r#"{"type":"reconcile","t":6,"what":"end","span":"s","queue":"q","key":"d/p","result":"ok"}"#,
        "\n"
    );
    let file = TraceFile::parse(text.as_bytes()).expect("valid");
    let query = "d/p".parse().expect("object");
    let why = kinformer_trace::why::why(&file, &query, None).expect("a reconcile");
    let causes: Vec<(&str, Option<&str>)> = why.reconciles[0]
        .causes
        .iter()
        .map(|c| (c.trace.as_str(), c.via.as_deref()))
        .collect();
    assert_eq!(causes, [("00000000000000a1", Some("added"))]);
    assert_eq!(why.reconciles[0].dur, Some(1), "end − start without a dur");
    let timeline = kinformer_trace::follow(&file, &query).expect("found");
    let stages: Vec<(&str, &str)> = timeline.traces[0]
        .after
        .iter()
        .map(|s| (s.stage.as_str(), s.what.as_str()))
        .collect();
    assert_eq!(
        stages,
        [
            ("queue", "added"),
            ("queue", "got"),
            ("reconcile", "start"),
            ("reconcile", "end")
        ]
    );
}

#[test]
fn chrome_export_has_queue_wait_and_reconcile_tracks() {
    let file = TraceFile::open(std::path::Path::new(&fixture("loop.jsonl"))).expect("fixture");
    let json = serde_json::to_value(kinformer_trace::chrome::chrome(&file)).expect("json");
    let events = json["traceEvents"].as_array().expect("events");
    let of = |cat: &str, ph: &str| -> Vec<&serde_json::Value> {
        events
            .iter()
            .filter(|e| e["cat"] == cat && e["ph"] == ph)
            .collect()
    };
    let reconciles = of("reconcile", "X");
    assert_eq!(reconciles.len(), 4);
    assert!(
        reconciles
            .iter()
            .all(|e| e["name"] == "reconcile deployments demo/web")
    );
    // Reconcile A: 610 µs → 1100 µs after the header, ok.
    let a = reconciles
        .iter()
        .find(|e| e["args"]["trace"] == SPAN_A)
        .expect("reconcile A");
    assert_eq!(
        (a["ts"].as_f64(), a["dur"].as_f64()),
        (Some(610.0), Some(490.0))
    );
    assert_eq!(a["args"]["what"], "ok");
    // The three gots with a wait: ready → got on the queue's track.
    let waits: Vec<(f64, f64)> = of("queue", "X")
        .iter()
        .map(|e| {
            (
                e["ts"].as_f64().unwrap_or(-1.0),
                e["dur"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect();
    assert_eq!(waits, [(95.0, 505.0), (1110.0, 590.0), (5007020.0, 10.0)]);
    let writes: Vec<&str> = of("write", "i")
        .iter()
        .map(|e| e["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        writes,
        [
            "create ReplicaSet demo/web-5d4f8",
            "update_status Deployment demo/web",
            "delete ReplicaSet demo/web-old"
        ]
    );
    let tracks: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .filter(|n| n.starts_with("queue ") || n.starts_with("reconcile "))
        .collect();
    assert_eq!(tracks, ["queue deployments", "reconcile deployments"]);
}

/// A retry or `add_after` counts for the reconcile whose `got` came first after it became
/// ready: a long `add_after` made before a `got` (the demo's progress-deadline requeue) did not
/// cause that reconcile, and a short retry made just before a `got` causes the next one.
#[test]
fn why_gives_each_delayed_re_add_to_the_reconcile_after_its_deadline() {
    let ms = 1_000_000u64;
    let lines = [
        r#"{"type":"header","format":"kinformer-trace","v":1,"t":1}"#.to_string(),
        format!(
            r#"{{"type":"queue","t":{},"queue":"q","key":"d/p","what":"delayed","delay":{}}}"#,
            10 * ms,
            600_000 * ms
        ),
        format!(
            r#"{{"type":"queue","t":{},"queue":"q","key":"d/p","what":"rate_limited","delay":{},"requeues":0}}"#,
            11 * ms,
            5 * ms
        ),
        // A dirty re-add taken 1 ms later, before the retry is ready.
        format!(
            r#"{{"type":"queue","t":{},"queue":"q","key":"d/p","what":"got","worker":"1"}}"#,
            12 * ms
        ),
        format!(
            r#"{{"type":"reconcile","t":{},"what":"start","span":"a","queue":"q","key":"d/p"}}"#,
            12 * ms
        ),
        format!(
            r#"{{"type":"reconcile","t":{},"what":"end","span":"a","queue":"q","key":"d/p","result":"ok"}}"#,
            13 * ms
        ),
        format!(
            r#"{{"type":"queue","t":{},"queue":"q","key":"d/p","what":"got","worker":"1"}}"#,
            17 * ms
        ),
        format!(
            r#"{{"type":"reconcile","t":{},"what":"start","span":"b","queue":"q","key":"d/p"}}"#,
            17 * ms
        ),
        format!(
            r#"{{"type":"reconcile","t":{},"what":"end","span":"b","queue":"q","key":"d/p","result":"ok"}}"#,
            18 * ms
        ),
    ];
    let file = TraceFile::parse(lines.join("\n").as_bytes()).expect("valid");
    let query = "d/p".parse().expect("object");
    let why = kinformer_trace::why::why(&file, &query, None).expect("reconciles");
    let requeues: Vec<Vec<&str>> = why
        .reconciles
        .iter()
        .map(|r| {
            r.requeues
                .iter()
                .map(|q| q.split(' ').next().unwrap_or(""))
                .collect()
        })
        .collect();
    assert_eq!(requeues, [vec![], vec!["rate_limited"]]);
}

#[test]
fn a_reconcile_without_a_result_is_worded_alike_in_every_view() {
    // Span `e` has an end line without a result; span `n` has no end line.
    let text = concat!(
        r#"{"type":"header","format":"kinformer-trace","v":1,"t":1}"#,
        "\n",
        r#"{"type":"reconcile","t":2,"span":"e","what":"start","queue":"q","key":"d/p"}"#,
        "\n",
        r#"{"type":"reconcile","t":3,"span":"e","what":"end","queue":"q","key":"d/p","dur":1}"#,
        "\n",
        r#"{"type":"reconcile","t":4,"span":"n","what":"start","queue":"q","key":"d/p"}"#,
        "\n"
    );
    let file = TraceFile::parse(text.as_bytes()).expect("valid");
    let loops = kinformer_trace::loops::Loops::new(&file);
    let words: Vec<(&str, &str)> = loops
        .reconciles
        .iter()
        .map(|r| (r.span, r.result_word()))
        .collect();
    assert_eq!(words, [("e", "(no result)"), ("n", "(no end line)")]);
    let json = serde_json::to_value(kinformer_trace::chrome::chrome(&file)).expect("json");
    let events = json["traceEvents"].as_array().expect("events");
    let what = |span: &str| {
        events
            .iter()
            .find(|e| e["cat"] == "reconcile" && e["ph"] == "X" && e["args"]["trace"] == span)
            .map(|e| e["args"]["what"].clone())
    };
    assert_eq!(what("e"), Some(serde_json::json!("(no result)")));
    assert_eq!(what("n"), Some(serde_json::json!("(no end line)")));
    let stats = kinformer_trace::stats::stats(&file).to_string();
    assert!(
        stats.contains("(no result)") && stats.contains("(no end line)"),
        "{stats}"
    );
}
