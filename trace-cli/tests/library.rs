//! The library on the fixture files: parsing, follow, stats, slow, chrome, html.

use std::path::PathBuf;
use std::time::Duration;

use kinformer_trace::slow::slow;
use kinformer_trace::stats::{Percentiles, stats};
use kinformer_trace::{HopKind, ObjectQuery, TraceError, TraceFile, follow};

const MS: i64 = 1_000_000;
const US: i64 = 1_000;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn open(name: &str) -> TraceFile {
    match TraceFile::open(&fixture(name)) {
        Ok(file) => file,
        Err(e) => panic!("{name}: {e}"),
    }
}

fn query(text: &str) -> ObjectQuery {
    text.parse().expect("a valid object")
}

#[test]
fn parses_a_complete_file() {
    let file = open("two-informers.jsonl");
    assert_eq!(file.header.pid, Some(4242));
    assert_eq!(file.hops.len(), 73);
    assert_eq!(file.dropped_total(), 3);
    assert!(file.is_complete());
    assert_eq!(file.truncated, None);
}

#[test]
fn follow_gives_hops_in_pipeline_order_with_latencies() {
    let file = open("two-informers.jsonl");
    let timeline = follow(&file, &query("demo/web-1")).expect("web-1 is in the file");
    assert_eq!(timeline.objects.len(), 1);
    assert_eq!(timeline.objects[0].kind, "Pod");
    let ids: Vec<&str> = timeline.traces.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["0000010000000201", "0000010000000205"]);
    let modified = &timeline.traces[1];
    assert_eq!(modified.what, "modified");
    let path: Vec<(HopKind, &str, &str)> = modified
        .hops
        .iter()
        .map(|h| (h.hop, h.inst.as_str(), h.what.as_str()))
        .collect();
    assert_eq!(
        path,
        [
            (HopKind::Reflector, "v1/Pod ns=demo", "modified"),
            (HopKind::Fifo, "v1/Pod ns=demo", "queued"),
            (HopKind::Indexer, "v1/Pod ns=demo", "updated"),
            (HopKind::Listener, "deployment-controller-pods", "update"),
            (HopKind::Handler, "deployment-controller-pods", "handled"),
            (HopKind::Listener, "pod-logger", "update"),
            (HopKind::Handler, "pod-logger", "handled"),
        ]
    );
    let latencies: Vec<i64> = modified.hops.iter().map(|h| h.latency).collect();
    assert_eq!(
        latencies,
        [
            0,
            35 * US,
            185 * US,
            225 * US,
            705 * US,
            237 * US,
            120 * MS + 787 * US
        ]
    );
    assert_eq!(modified.hops[6].dur, Some(550 * US as u64));
}

#[test]
fn follow_reads_hops_written_out_of_time_order() {
    // The fixture has two lines of the initial list swapped (written from different threads).
    let file = open("two-informers.jsonl");
    for object in ["demo/web", "demo/api", "demo/web-1", "demo/web-2", "node-a"] {
        let timeline = follow(&file, &query(object)).expect("in the file");
        for trace in &timeline.traces {
            // Each path (the stages before the listeners, then one listener and its handler)
            // reads in pipeline order.
            let trunk: Vec<HopKind> = trace
                .hops
                .iter()
                .map(|h| h.hop)
                .take_while(|h| *h < HopKind::Listener)
                .collect();
            let mut sorted = trunk.clone();
            sorted.sort();
            assert_eq!(trunk, sorted, "{object} trace {}", trace.id);
            let branches: Vec<(HopKind, &str)> = trace.hops[trunk.len()..]
                .iter()
                .map(|h| (h.hop, h.inst.as_str()))
                .collect();
            for pair in branches.chunks(2) {
                assert_eq!(pair[0].0, HopKind::Listener, "{object}: {branches:?}");
                assert_eq!(
                    pair[1],
                    (HopKind::Handler, pair[0].1),
                    "{object}: {branches:?}"
                );
            }
            assert!(trace.hops.iter().all(|h| h.latency >= 0), "{object}");
        }
    }
}

/// The wall clock stepped back between two hops (an NTP step; hops are timed on different
/// threads): the timeline still reads in pipeline order, with the step shown as a negative
/// latency, not reordered by time.
#[test]
fn follow_keeps_pipeline_order_when_the_clock_steps_back() {
    let hop = |t: u64, hop: &str, inst: &str, what: &str| {
        format!(
            r#"{{"type":"hop","t":{t},"trace":"00000a0000000001","hop":"{hop}","inst":"{inst}","kind":"Pod","ns":"demo","name":"web-1","uid":"u","rv":"5","what":"{what}"}}"#
        )
    };
    let lines = [
        r#"{"type":"header","format":"kinformer-trace","v":1,"t":1000000000,"pid":1,"bodies":false}"#
            .to_string(),
        hop(1_000_500_000, "reflector", "v1/Pod", "added"),
        // 300 µs before the reflector's hop, by the clock.
        hop(1_000_200_000, "fifo", "v1/Pod", "queued"),
        hop(1_000_300_000, "indexer", "v1/Pod", "added"),
        hop(1_000_400_000, "listener", "log", "add"),
        hop(1_000_450_000, "handler", "log", "handled"),
    ];
    let file = TraceFile::parse(lines.join("\n").as_bytes()).expect("parses");
    let timeline = follow(&file, &query("demo/web-1")).expect("in the file");
    let trace = &timeline.traces[0];
    let order: Vec<HopKind> = trace.hops.iter().map(|h| h.hop).collect();
    assert_eq!(
        order,
        HopKind::ALL,
        "pipeline order, whatever the clock said"
    );
    let latencies: Vec<i64> = trace.hops.iter().map(|h| h.latency).collect();
    assert_eq!(latencies, [0, -300 * US, -200 * US, -100 * US, -50 * US]);
    assert!(
        timeline.to_string().contains("-0.300ms  fifo"),
        "{timeline}"
    );
}

#[test]
fn follow_a_resync_measures_from_the_indexer() {
    let file = open("two-informers.jsonl");
    let timeline = follow(
        &file,
        &query("demo/web").with_kind(Some("deployment".into())),
    )
    .expect("the Deployment is there");
    let resync = timeline.traces.last().expect("three traces");
    assert_eq!(resync.origin, HopKind::Indexer);
    assert_eq!(resync.what, "sync");
    assert_eq!(resync.hops[0].latency, 0);
}

#[test]
fn follow_a_cluster_scoped_object_by_name() {
    let file = open("two-informers.jsonl");
    let timeline = follow(&file, &query("node-a")).expect("the Node is there");
    assert_eq!(timeline.objects[0].kind, "Node");
    assert_eq!(timeline.traces.len(), 2);
}

#[test]
fn follow_an_absent_object_is_an_error_with_a_hint() {
    let file = open("two-informers.jsonl");
    match follow(&file, &query("web-1")) {
        Err(e @ TraceError::ObjectNotFound { .. }) => {
            assert_eq!(
                e.to_string(),
                "web-1 has no hop in this trace file; did you mean demo/web-1 (Pod)?"
            );
        }
        other => panic!("expected ObjectNotFound, got {other:?}"),
    }
    assert!(matches!(
        follow(&file, &query("demo/web-1").with_kind(Some("Secret".into()))),
        Err(TraceError::ObjectNotFound { .. })
    ));
}

#[test]
fn object_queries() {
    assert_eq!(query("demo/web").ns, "demo");
    assert_eq!(query("node-a").ns, "");
    for bad in ["", "/x", "x/", "a/b/c"] {
        assert!(
            matches!(bad.parse::<ObjectQuery>(), Err(TraceError::BadObject(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn stats_percentiles_on_known_values() {
    // known-latencies: trace k (1..=10) spends k×100µs reflector→fifo, k ms fifo→indexer,
    // 1 ms indexer→listener, k×10 ms listener→handler of which the handler ran k ms.
    let stats = stats(&open("known-latencies.jsonl"));
    let step = |hop: HopKind| {
        stats
            .steps
            .iter()
            .find(|s| s.hop == hop)
            .map(|s| s.latency)
            .expect("a step into every hop but the reflector")
    };
    let p = |count, p50, p90, p99, max| Percentiles {
        count,
        p50,
        p90,
        p99,
        max,
    };
    assert_eq!(step(HopKind::Fifo), p(10, 500 * US, 900 * US, MS, MS));
    assert_eq!(
        step(HopKind::Indexer),
        p(10, 5 * MS, 9 * MS, 10 * MS, 10 * MS)
    );
    assert_eq!(step(HopKind::Listener), p(10, MS, MS, MS, MS));
    assert_eq!(
        step(HopKind::Handler),
        p(10, 50 * MS, 90 * MS, 100 * MS, 100 * MS)
    );
    assert_eq!(stats.steps.len(), 4, "no step into the reflector");
    assert_eq!(stats.handlers.len(), 1);
    assert_eq!(
        stats.handlers[0].dur,
        Some(p(10, 5 * MS, 9 * MS, 10 * MS, 10 * MS))
    );
    // Depth samples 4 @0.5s, 2 @1.2s, 7 @3.5s, 0 @3.7s; the file spans 11 s: 1 s buckets.
    assert_eq!(stats.bucket_ns, 1_000_000_000);
    let fifo = &stats.depths[0];
    assert_eq!((fifo.samples, fifo.min, fifo.max, fifo.last), (4, 0, 7, 0));
    let mut series = vec![Some(4), Some(4), Some(2), Some(7)];
    series.resize(12, Some(0));
    assert_eq!(fifo.series, series);
    assert_eq!((stats.dropped, stats.dropped_lines), (12, 2));
    assert_eq!(stats.end.as_ref().map(|e| e.dropped), Some(12));
    assert!(stats.complete());
}

#[test]
fn percentiles_nearest_rank() {
    assert_eq!(Percentiles::of(vec![]), None);
    let one = Percentiles::of(vec![7]).expect("one value");
    assert_eq!((one.p50, one.p99, one.max), (7, 7, 7));
    let hundred = Percentiles::of((1..=100).rev().collect()).expect("values");
    assert_eq!((hundred.p50, hundred.p90, hundred.p99), (50, 90, 99));
}

#[test]
fn slow_finds_exactly_the_slow_traces() {
    let file = open("known-latencies.jsonl");
    // Trace k's end-to-end latency is 11.1×k + 1 ms: k ≥ 7 passes 75 ms, k ≥ 9 passes 100 ms.
    let report = slow(&file, Duration::from_millis(75));
    let ids: Vec<&str> = report.slow.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "000000000000c00a",
            "000000000000c009",
            "000000000000c008",
            "000000000000c007"
        ]
    );
    assert_eq!((report.measured, report.unfinished), (10, 0));
    let k7 = &report.slow[3];
    assert_eq!(k7.total, 78 * MS + 700 * US);
    let largest = k7.largest().expect("parts");
    assert_eq!(largest.label, "in cm's buffer (listener → handler start)");
    assert_eq!(largest.nanos, 63 * MS);
    assert_eq!(slow(&file, Duration::from_millis(100)).slow.len(), 2);
    assert_eq!(slow(&file, Duration::from_secs(1)).slow.len(), 0);
}

#[test]
fn slow_names_the_slow_handler_and_the_slow_buffer() {
    let report = slow(&open("two-informers.jsonl"), Duration::from_millis(100));
    let found: Vec<(String, String)> = report
        .slow
        .iter()
        .map(|s| {
            let largest = s.largest().map(|p| p.label.clone()).unwrap_or_default();
            (s.object.to_string(), largest)
        })
        .collect();
    assert_eq!(
        found,
        [
            (
                "Deployment demo/web".to_string(),
                "handler deployment-controller ran".to_string()
            ),
            (
                "Pod demo/web-1".to_string(),
                "in pod-logger's buffer (listener → handler start)".to_string()
            ),
        ]
    );
}

#[test]
fn chrome_export_has_tracks_slices_and_counters() {
    let file = open("two-informers.jsonl");
    let json = serde_json::to_value(kinformer_trace::chrome::chrome(&file)).expect("serializes");
    let events = json["traceEvents"].as_array().expect("traceEvents");
    let threads: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    for track in [
        "reflector v1/Pod ns=demo",
        "fifo v1/Pod ns=demo",
        "indexer v1/Pod ns=demo",
        "listener pod-logger",
        "handler pod-logger",
        "handler deployment-controller",
        "reflector v1/Node",
    ] {
        assert!(threads.contains(&track), "{track} not in {threads:?}");
    }
    let counters = events.iter().filter(|e| e["ph"] == "C").count();
    assert_eq!(counters, file.depths.len());
    let reflector_instants = events
        .iter()
        .filter(|e| e["ph"] == "i" && e["cat"] == "reflector");
    assert_eq!(
        reflector_instants.count(),
        file.hops
            .iter()
            .filter(|h| h.hop == HopKind::Reflector)
            .count()
    );
    // The slow handler: a 150 ms complete event on the deployment-controller's handler track.
    let slow = events
        .iter()
        .find(|e| e["ph"] == "X" && e["cat"] == "handler" && e["dur"].as_f64() == Some(150_000.0))
        .expect("the 150 ms handler run");
    assert_eq!(slow["name"], "modified Deployment demo/web");
    // Complete events on one thread nest or are disjoint (what chrome://tracing and Perfetto
    // require); the lanes guarantee it.
    let mut by_tid: std::collections::BTreeMap<u64, Vec<(f64, f64)>> = Default::default();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let ts = e["ts"].as_f64().expect("ts");
        let dur = e["dur"].as_f64().expect("dur");
        assert!(dur >= 0.0);
        by_tid
            .entry(e["tid"].as_u64().expect("tid"))
            .or_default()
            .push((ts, ts + dur));
    }
    for (tid, mut slices) in by_tid {
        slices.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
        for pair in slices.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1 - 1e-9,
                "tid {tid}: {:?} overlaps {:?}",
                pair[0],
                pair[1]
            );
        }
    }
}

#[test]
fn html_export_embeds_every_object_and_selects_one() {
    let file = open("two-informers.jsonl");
    let page = kinformer_trace::html::html(&file, Some(&query("demo/web-1"))).expect("page");
    assert!(page.starts_with("<!doctype html>"));
    assert!(!page.contains("http://") || !page.contains("src=\"http"));
    assert!(!page.contains("<script src"), "no external script");
    assert!(!page.contains("<link"), "no external stylesheet");
    let start = page.find("id=\"trace-data\">").expect("data") + "id=\"trace-data\">".len();
    let end = start + page[start..].find("</script>").expect("end of data");
    let data: serde_json::Value = serde_json::from_str(&page[start..end]).expect("JSON data");
    let objects = data["objects"].as_array().expect("objects");
    assert_eq!(objects.len(), 7);
    let selected = data["selected"].as_u64().expect("selected") as usize;
    assert_eq!(objects[selected]["key"], "Pod demo/web-1");
    assert!(matches!(
        kinformer_trace::html::html(&file, Some(&query("demo/nope"))),
        Err(TraceError::ObjectNotFound { .. })
    ));
}

#[test]
fn html_data_cannot_close_its_script_element() {
    let text = concat!(
        r#"{"type":"header","format":"kinformer-trace","v":1,"t":1,"pid":1}"#,
        "\n",
        r#"{"type":"hop","t":2,"trace":"1","hop":"reflector","inst":"</script><script>alert(1)</script>","kind":"Pod","ns":"a","name":"<b>&","what":"added"}"#,
        "\n"
    );
    let file = TraceFile::parse(text.as_bytes()).expect("valid");
    let page = kinformer_trace::html::html(&file, None).expect("page");
    // An HTML parser ends a script element at `</script` whatever follows.
    let closers = page.to_ascii_lowercase().matches("</script").count();
    assert_eq!(closers, 2, "only the page's own");
    assert!(!page.contains("<b>&"));
}

#[test]
fn truncated_file_keeps_the_complete_lines() {
    let file = open("truncated.jsonl");
    let cut = file.truncated.expect("truncated");
    assert_eq!((cut.line, cut.complete_lines), (41, 40));
    assert_eq!(
        cut.to_string(),
        "truncated at line 41; using the 40 complete lines"
    );
    assert!(!file.is_complete());
    assert_eq!(file.hops.len() + file.depths.len() + file.dropped.len(), 39);
}

#[test]
fn foreign_unsupported_and_damaged_files() {
    match TraceFile::open(&fixture("foreign.jsonl")) {
        Err(e @ TraceError::Foreign { .. }) => {
            let message = e.to_string();
            assert!(
                message.starts_with(
                    "not a kinformer trace file (first line: {\"timestamp\":\"2026-11-23T08:00:00.000123Z\""
                ),
                "{message}"
            );
            assert!(message.ends_with("…)"), "{message}");
        }
        other => panic!("expected Foreign, got {other:?}"),
    }
    match TraceFile::open(&fixture("version2.jsonl")) {
        Err(e @ TraceError::UnsupportedVersion { .. }) => assert_eq!(
            e.to_string(),
            "unsupported kinformer trace format version 2 (this kinformer-trace reads version 1)"
        ),
        other => panic!("expected UnsupportedVersion, got {other:?}"),
    }
    match TraceFile::open(&fixture("malformed-middle.jsonl")) {
        Err(TraceError::Malformed { line, .. }) => assert_eq!(line, 3),
        other => panic!("expected Malformed, got {other:?}"),
    }
    assert!(matches!(
        TraceFile::open(&fixture("no-such-file.jsonl")),
        Err(TraceError::Missing)
    ));
    assert!(matches!(TraceFile::parse(b""), Err(TraceError::Empty)));
    // The sink's header cut short (nothing after it) is a kinformer file, not a foreign one.
    for cut in [
        &b"{\"type\":\"header\",\"form"[..],
        b"{\"type\":\"header\",\"format\":\"kinformer-trace\",\"v\":1,\"t\":17638",
    ] {
        assert!(
            matches!(TraceFile::parse(cut), Err(TraceError::TruncatedHeader)),
            "{}",
            String::from_utf8_lossy(cut)
        );
    }
    // Not when another line follows it (damaged, not cut), nor for another file's header.
    assert!(matches!(
        TraceFile::parse(b"{\"type\":\"header\",\"form\n{\"type\":\"end\"}\n"),
        Err(TraceError::Foreign { .. })
    ));
    assert!(matches!(
        TraceFile::parse(b"{\"type\":\"header\",\"format\":\"other"),
        Err(TraceError::Foreign { .. })
    ));
    assert!(matches!(
        TraceFile::parse(b"\x89PNG\r\n\x1a\n"),
        Err(TraceError::Foreign { .. })
    ));
}

#[test]
fn unknown_line_types_are_skipped_and_counted() {
    let text = concat!(
        r#"{"type":"header","format":"kinformer-trace","v":1,"t":1}"#,
        "\n",
        r#"{"type":"future-thing","x":1}"#,
        "\n\n",
        r#"{"type":"end","t":3,"written":1,"dropped":0}"#,
        "\n"
    );
    let file = TraceFile::parse(text.as_bytes()).expect("valid");
    assert_eq!(file.unknown_lines, 1);
    assert!(file.is_complete());
}

#[test]
fn a_handlers_step_starts_at_its_own_listener() {
    let file = open("two-informers.jsonl");
    let traces = kinformer_trace::traces::traces(&file);
    let trace = traces
        .iter()
        .find(|t| t.id == "0000010000000205")
        .expect("Pod demo/web-1 modified");
    let steps: Vec<(HopKind, &str, HopKind, &str, i64)> = trace
        .steps()
        .iter()
        .map(|s| (s.from.hop, &*s.from.inst, s.to.hop, &*s.to.inst, s.nanos))
        .collect();
    let (dc, log, pods) = ("deployment-controller-pods", "pod-logger", "v1/Pod ns=demo");
    assert_eq!(
        steps,
        [
            (HopKind::Reflector, pods, HopKind::Fifo, pods, 35 * US),
            (HopKind::Fifo, pods, HopKind::Indexer, pods, 150 * US),
            (HopKind::Indexer, pods, HopKind::Listener, dc, 40 * US),
            (HopKind::Indexer, pods, HopKind::Listener, log, 52 * US),
            (HopKind::Listener, dc, HopKind::Handler, dc, 480 * US),
            (
                HopKind::Listener,
                log,
                HopKind::Handler,
                log,
                120 * MS + 550 * US
            ),
        ]
    );
}
