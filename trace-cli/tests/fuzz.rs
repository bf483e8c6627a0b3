//! Arbitrary input never panics the reader: arbitrary bytes, and arbitrary JSON lines (and
//! mangled hop lines) after a valid header, through the parser and every analysis.

use std::time::Duration;

use kinformer_trace::{ObjectQuery, TraceFile};
use proptest::prelude::*;
use serde_json::{Value, json};

const HEADER: &str =
    r#"{"type":"header","format":"kinformer-trace","v":1,"t":1763891234000000000,"pid":1}"#;

/// Runs every analysis on whatever parsed.
fn analyse(bytes: &[u8]) {
    let Ok(file) = TraceFile::parse(bytes) else {
        return;
    };
    let _ = kinformer_trace::stats::stats(&file).to_string();
    let _ = kinformer_trace::slow::slow(&file, Duration::from_millis(1)).to_string();
    let _ = serde_json::to_string(&kinformer_trace::chrome::chrome(&file));
    let _ = kinformer_trace::html::html(&file, None);
    for hop in file.hops.iter().take(3) {
        let query = ObjectQuery {
            ns: hop.ns.clone(),
            name: hop.name.clone(),
            kind: None,
        };
        let timeline = kinformer_trace::follow(&file, &query).map(|t| t.to_string());
        assert!(timeline.is_ok(), "an object with a hop is found");
        let _ = kinformer_trace::html::html(&file, Some(&query));
        let _ = kinformer_trace::why::why(&file, &query, None).map(|w| w.to_string());
        let _ = kinformer_trace::follow_trace(&file, &hop.trace).map(|t| t.to_string());
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,12}".prop_map(Value::from),
        prop::sample::select(vec![
            "header",
            "hop",
            "depth",
            "dropped",
            "end",
            "queue",
            "reconcile",
            "write",
            "got",
            "start",
            "reflector",
            "fifo",
            "indexer",
            "listener",
            "handler",
            "kinformer-trace",
            "</script>",
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "type",
                    "t",
                    "trace",
                    "hop",
                    "inst",
                    "kind",
                    "ns",
                    "name",
                    "uid",
                    "rv",
                    "what",
                    "dur",
                    "depth",
                    "count",
                    "written",
                    "dropped",
                    "x",
                    "queue",
                    "key",
                    "into",
                    "traces",
                    "wait",
                    "worker",
                    "span",
                    "verb",
                    "result",
                    "requeue_after",
                ])
                .prop_map(str::to_string),
                inner,
                0..8
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A hop line with arbitrary (often extreme) values in the right fields.
fn hop_line() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            any::<u64>(),
            Just(0u64),
            Just(u64::MAX),
            1763891234000000000u64..1763891235000000000
        ],
        prop::sample::select(vec!["a", "b", "c"]),
        prop::sample::select(vec!["reflector", "fifo", "indexer", "listener", "handler"]),
        prop::sample::select(vec!["i1", "i2", ""]),
        prop::sample::select(vec!["", "ns"]),
        prop::sample::select(vec!["x", "y", "é/<b>"]),
        prop::option::of(any::<u64>()),
        prop::sample::select(vec!["", "1", "2"]),
    )
        .prop_map(|(t, trace, hop, inst, ns, name, dur, rv)| {
            let mut line = json!({
                "type": "hop", "t": t, "trace": trace, "hop": hop, "inst": inst,
                "kind": "Pod", "ns": ns, "name": name, "what": "handled", "rv": rv,
            });
            if let Some(dur) = dur {
                line["dur"] = json!(dur);
            }
            line
        })
}

/// A `queue`, `reconcile` or `write` line on few traces, keys, spans and resourceVersions, so
/// they link to each other and to the hop lines (merges, reconciles, own writes).
fn loop_line() -> impl Strategy<Value = Value> {
    let trace = || prop::sample::select(vec!["a", "b", "c"]);
    (
        prop_oneof![any::<u64>(), 1763891234000000000u64..1763891235000000000],
        prop::sample::select(vec!["queue", "reconcile", "write"]),
        prop::sample::select(vec![
            "added", "merged", "dirty", "got", "done", "start", "end", "create", "??",
        ]),
        prop::sample::select(vec!["x", "ns/x", "ns/y"]),
        prop::sample::select(vec!["s1", "s2"]),
        trace(),
        prop::collection::vec(trace(), 0..3),
        prop::sample::select(vec!["", "1", "2"]),
        prop::option::of(any::<u64>()),
    )
        .prop_map(|(t, kind, what, key, span, trace, traces, rv, n)| {
            let (ns, name) = key.split_once('/').unwrap_or(("", key));
            json!({
                "type": kind, "t": t, "what": what, "queue": "q", "key": key, "span": span,
                "trace": trace, "into": traces, "traces": traces, "wait": n, "dur": n,
                "worker": n, "verb": what, "kind": "Pod", "ns": ns, "name": name, "rv": rv,
                "result": what, "requeue_after": n,
            })
        })
}

fn depth_line() -> impl Strategy<Value = Value> {
    (any::<u64>(), any::<u64>(), prop::sample::select(vec!["fifo", "listener"])).prop_map(
        |(t, depth, hop)| json!({"type": "depth", "t": t, "hop": hop, "inst": "i", "depth": depth}),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        analyse(&bytes);
    }

    #[test]
    fn arbitrary_bytes_after_a_header_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut input = format!("{HEADER}\n").into_bytes();
        input.extend_from_slice(&bytes);
        analyse(&input);
    }

    #[test]
    fn arbitrary_json_lines_after_a_header_never_panic(
        lines in prop::collection::vec(
            prop_oneof![json_value(), hop_line(), hop_line(), depth_line(), loop_line(), loop_line()],
            0..24,
        ),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut text = format!("{HEADER}\n");
        for line in &lines {
            text.push_str(&line.to_string());
            text.push('\n');
        }
        analyse(text.as_bytes());
        // The same, cut anywhere (on a char boundary): a truncated file.
        let mut at = cut.index(text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        analyse(&text.as_bytes()[..at]);
    }
}
