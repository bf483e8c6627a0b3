//! The demo's trace continues past the handler (docs/semantics.md T5–T7, docs/trace-format.md
//! "Beyond the handler"): run with `--trace FILE`, the embedded demo writes `queue` lines for
//! its workqueue, a `reconcile` start and end per reconcile carrying the trace ids of the
//! events that queued the key, and `write` lines whose resourceVersion comes back on a later
//! `reflector` hop of the same object (an own write).
//!
//! The file is read as plain JSON lines, the contract itself, not through a reader.

use std::{
    collections::{HashMap, HashSet},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

/// Generous: a debug build of the demo under a loaded CI machine.
const DEADLINE: Duration = Duration::from_secs(120);

fn s<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

#[test]
fn demo_trace_links_events_queue_reconciles_and_own_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_deployment-controller"))
        .arg("--embedded")
        .arg("--trace")
        .arg(&path)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "warn")
        .env_remove("KINFORMER_TRACE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
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
    assert!(status.success(), "the demo failed: {status}");

    let text = std::fs::read_to_string(&path).expect("the trace");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.last().map(|l| s(l, "type")), Some("end"));
    let of = |ty: &str| -> Vec<&Value> { lines.iter().filter(|l| l["type"] == ty).collect() };
    let (hops, queue, reconciles, writes) = (of("hop"), of("queue"), of("reconcile"), of("write"));

    // T5: the queue names itself, and the key sink's adds carry the events' trace ids, born
    // in the reflector.
    assert!(
        queue.iter().all(|q| q["queue"] == "deployment"),
        "one queue"
    );
    let born: HashSet<&str> = hops
        .iter()
        .filter(|h| h["hop"] == "reflector")
        .map(|h| s(h, "trace"))
        .collect();
    let added = queue
        .iter()
        .filter(|q| q["what"] == "added" && q.get("trace").is_some())
        .collect::<Vec<_>>();
    assert!(!added.is_empty(), "traced adds");
    assert!(
        added.iter().any(|q| born.contains(s(q, "trace"))),
        "an add caused by a watch event"
    );
    let gots: Vec<&&Value> = queue.iter().filter(|q| q["what"] == "got").collect();
    assert!(
        gots.iter()
            .any(|g| !g["traces"].as_array().expect("traces").is_empty()),
        "a worker took a key with its events' ids"
    );
    assert!(
        gots.iter()
            .all(|g| g["wait"].is_u64() && g["worker"].is_string())
    );
    let dones = queue.iter().filter(|q| q["what"] == "done").count();
    assert!(dones > 0 && dones <= gots.len());

    // T6: every reconcile starts and ends once under its span; the start carries the ids of
    // the item the worker took.
    let mut spans: HashMap<&str, (u32, u32)> = HashMap::new();
    for r in &reconciles {
        let e = spans.entry(s(r, "span")).or_default();
        match s(r, "what") {
            "start" => e.0 += 1,
            "end" => e.1 += 1,
            w => panic!("a reconcile line with what = {w}"),
        }
    }
    assert!(!spans.is_empty(), "reconcile lines");
    assert!(spans.values().all(|c| *c == (1, 1)), "start+end per span");
    let starts: Vec<&&Value> = reconciles.iter().filter(|r| r["what"] == "start").collect();
    assert!(
        starts.iter().any(|r| r["key"] == "demo/web"
            && r["traces"]
                .as_array()
                .is_some_and(|t| t.iter().any(|id| born.contains(id.as_str().unwrap())))),
        "a reconcile of demo/web caused by a watch event"
    );
    let results: HashSet<&str> = reconciles
        .iter()
        .filter(|r| r["what"] == "end")
        .map(|r| s(r, "result"))
        .collect();
    assert!(results.contains("ok"), "results: {results:?}");

    // Writes belong to a reconcile, and (T7) come back through the watch: a later reflector
    // hop of the same object carries the resourceVersion the server answered.
    assert!(!writes.is_empty(), "write lines");
    assert!(
        writes.iter().all(|w| w
            .get("span")
            .is_some_and(|sp| spans.contains_key(sp.as_str().unwrap()))),
        "every write of the controller is inside a reconcile"
    );
    let verbs: HashSet<&str> = writes.iter().map(|w| s(w, "verb")).collect();
    assert!(
        verbs.contains("create") && verbs.contains("update_status"),
        "verbs: {verbs:?}"
    );
    let seen: HashSet<(&str, &str, &str, &str)> = hops
        .iter()
        .filter(|h| h["hop"] == "reflector")
        .map(|h| (s(h, "kind"), s(h, "ns"), s(h, "name"), s(h, "rv")))
        .collect();
    let own = writes
        .iter()
        .filter(|w| {
            !s(w, "rv").is_empty()
                && seen.contains(&(s(w, "kind"), s(w, "ns"), s(w, "name"), s(w, "rv")))
        })
        .count();
    assert!(
        own > 0,
        "no write came back as a watch event with its resourceVersion"
    );
    let created = writes
        .iter()
        .find(|w| w["verb"] == "create" && w["kind"] == "ReplicaSet")
        .expect("a ReplicaSet created");
    assert!(
        hops.iter().any(|h| h["hop"] == "reflector"
            && h["kind"] == "ReplicaSet"
            && h["name"] == created["name"]
            && h["rv"] == created["rv"]),
        "the created ReplicaSet came back through the watch: {created}"
    );
}
