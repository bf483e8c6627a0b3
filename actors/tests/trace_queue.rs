//! Traces beyond the handler (docs/semantics.md T5, T6; docs/trace-format.md "Beyond the
//! handler"): the `queue` lines of a named workqueue, and the `reconcile` and `write` lines of
//! a reconcile span, read back from the sink written to memory.
//!
//! The sink is process-wide: every test here that starts it holds [`SINK`], so they do not run
//! at once. Time is tokio's paused clock; nothing sleeps.

use std::{
    io::{self, Write},
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use kinformer::{ObjectKey, TraceId, workqueue::ItemExponentialFailureRateLimiter};
use kinformer_actors::{
    AsyncWorkQueue, EnqueueKeys,
    trace::{
        ReconcileResult, ReconcileSpan, TraceSink, TraceSinkConfig, TraceSinkGuard, WriteVerb,
        current_span, record_write,
    },
};
use serde_json::Value;
use tokio::time::advance;

/// Serialises the tests that start the process-wide sink.
static SINK: Mutex<()> = Mutex::new(());

/// A writer whose bytes the test reads back.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct Recording {
    _serial: MutexGuard<'static, ()>,
    buf: Buffer,
    guard: TraceSinkGuard,
}

fn record() -> Recording {
    let serial = SINK.lock().unwrap_or_else(|p| p.into_inner());
    let buf = Buffer::default();
    let guard = TraceSink::start_writer(Box::new(buf.clone()), TraceSinkConfig::default())
        .expect("the sink starts");
    Recording {
        _serial: serial,
        buf,
        guard,
    }
}

impl Recording {
    /// Closes the sink; the lines of the types `tys`, in the order written.
    fn lines(self, tys: &[&str]) -> Vec<Value> {
        let stats = self.guard.close().expect("the sink closes");
        assert_eq!(stats.dropped, 0);
        let text = String::from_utf8(self.buf.0.lock().unwrap().clone()).expect("UTF-8");
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
            .filter(|v| tys.iter().any(|ty| v["type"] == *ty))
            .collect()
    }
}

fn key(ns: &str, name: &str) -> ObjectKey {
    ObjectKey::new(Some(ns), name)
}

fn hex(t: u64) -> String {
    format!("{t:016x}")
}

const MS: u64 = 1_000_000;

/// `(key, what)` of each line, and the lines of one key.
fn whats(lines: &[Value]) -> Vec<(String, String)> {
    lines
        .iter()
        .map(|l| {
            (
                l["key"].as_str().unwrap().to_owned(),
                l["what"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn t5_new_merged_dirty_got_done_forget_carry_the_merged_trace_ids() {
    let rec = record();
    let q = AsyncWorkQueue::<ObjectKey>::new().with_name("deployments");
    let (web, db) = (key("demo", "web"), key("demo", "db"));
    q.add_traced(web.clone(), TraceId(3));
    q.add_traced(web.clone(), TraceId(7));
    // The key sink's way in (EnqueueKeys), as the informer calls it.
    q.enqueue_traced(db.clone(), TraceId(9));
    advance(Duration::from_millis(10)).await;
    let taken = q.get_traced(2).await.expect("web");
    assert_eq!(taken.item(), &web);
    assert_eq!(taken.traces(), &[TraceId(3), TraceId(7)]);
    assert_eq!(taken.queue_name().map(|n| &**n), Some("deployments"));
    q.add_traced(web.clone(), TraceId(11)); // being processed: dirty
    advance(Duration::from_millis(5)).await;
    q.done(&web); // queued again
    advance(Duration::from_millis(1)).await;
    let db_taken = q.get_traced(1).await.expect("db");
    assert_eq!(db_taken.traces(), &[TraceId(9)]);
    q.done(&db);
    advance(Duration::from_millis(2)).await;
    let again = q.get_traced(1).await.expect("web again");
    assert_eq!(
        again.traces(),
        &[TraceId(11)],
        "only what came while it was processed"
    );
    q.forget(&web);
    q.done(&web);

    let lines = rec.lines(&["queue"]);
    let w = |k: &str, what: &str| (k.to_owned(), what.to_owned());
    assert_eq!(
        whats(&lines),
        vec![
            w("demo/web", "added"),
            w("demo/web", "merged"),
            w("demo/db", "added"),
            w("demo/web", "got"),
            w("demo/web", "dirty"),
            w("demo/web", "done"),
            w("demo/db", "got"),
            w("demo/db", "done"),
            w("demo/web", "got"),
            w("demo/web", "forget"),
            w("demo/web", "done"),
        ]
    );
    assert!(lines.iter().all(|l| l["queue"] == "deployments"));
    assert_eq!(lines[0]["trace"], hex(3));
    assert_eq!(lines[1]["trace"], hex(7));
    assert_eq!(lines[1]["into"], serde_json::json!([hex(3)]));
    let got = &lines[3];
    assert_eq!(got["traces"], serde_json::json!([hex(3), hex(7)]));
    assert_eq!(got["wait"], 10 * MS);
    assert_eq!(got["worker"], "2");
    assert_eq!(lines[4]["trace"], hex(11));
    assert_eq!(
        (&lines[5]["dur"], &lines[5]["requeued"]),
        (&(5 * MS).into(), &true.into())
    );
    assert_eq!(lines[7]["requeued"], false);
    // Web's wait starts when `done` queued it again, not at the dirty add.
    assert_eq!(lines[8]["wait"], 3 * MS);
    assert_eq!(lines[8]["traces"], serde_json::json!([hex(11)]));
    assert!(lines[9].get("trace").is_none());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn t5_rate_limited_delayed_and_dropped_keys() {
    let rec = record();
    let rl =
        ItemExponentialFailureRateLimiter::new(Duration::from_millis(100), Duration::from_secs(10));
    let q = AsyncWorkQueue::<ObjectKey>::with_rate_limiter(Box::new(rl))
        .with_name("q")
        .with_owner_filter(|k: &ObjectKey| k.split().0 == Some("mine"));
    q.add_rate_limited(key("mine", "a"));
    q.add_rate_limited(key("mine", "a"));
    q.add_after_traced(key("mine", "b"), Duration::from_millis(50), TraceId(5));
    q.add_after(key("mine", "b"), Duration::from_millis(80)); // the earlier deadline stays
    q.add_traced(key("theirs", "c"), TraceId(6));
    advance(Duration::from_millis(60)).await;
    let b = q.get_traced(0).await.expect("b after its delay");
    assert_eq!(b.traces(), &[TraceId(5)], "the delayed add's trace");
    q.done(b.item());
    // Not traced: a plain get's worker is empty.
    let a = q.get().await.expect("a after its backoff");
    q.done(&a);

    let lines = rec.lines(&["queue"]);
    let w = |k: &str, what: &str| (k.to_owned(), what.to_owned());
    assert_eq!(
        whats(&lines),
        vec![
            w("mine/a", "rate_limited"),
            w("mine/a", "rate_limited"),
            w("mine/b", "delayed"),
            w("mine/b", "delayed"),
            w("theirs/c", "dropped"),
            w("mine/b", "got"),
            w("mine/b", "done"),
            w("mine/a", "got"),
            w("mine/a", "done"),
        ]
    );
    assert_eq!(
        (&lines[0]["delay"], &lines[0]["requeues"]),
        (&(100 * MS).into(), &0.into())
    );
    assert_eq!(
        (&lines[1]["delay"], &lines[1]["requeues"]),
        (&(200 * MS).into(), &1.into())
    );
    assert_eq!(
        (&lines[2]["delay"], &lines[2]["trace"]),
        (&(50 * MS).into(), &hex(5).into())
    );
    assert_eq!(lines[3]["delay"], 50 * MS, "the deadline in force");
    assert!(lines[3].get("trace").is_none());
    assert_eq!(lines[4]["reason"], "not_owned");
    assert_eq!(lines[5]["wait"], 10 * MS, "ready at 50 ms, taken at 60 ms");
    assert_eq!(lines[5]["traces"], serde_json::json!([hex(5)]));
    assert_eq!(lines[7]["worker"], "");
    assert_eq!(lines[7]["traces"], serde_json::json!([]));
}

async fn deep_inside_the_reconcile() {
    tokio::task::yield_now().await;
    record_write(WriteVerb::Create, "ReplicaSet", "demo", "web-5d4f8", "1240");
}

// The guard only keeps the other tests (on other threads, each with a runtime of its own)
// from starting the sink meanwhile; no task of this runtime waits for it.
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn t6_reconcile_spans_record_start_writes_and_end() {
    let serial = SINK.lock().unwrap_or_else(|p| p.into_inner());
    // Tracing off: the queue keeps no ids and a span is inert.
    let q = AsyncWorkQueue::<ObjectKey>::new().with_name("deployments");
    q.add_traced(key("demo", "web"), TraceId(3));
    let off = q.get_traced(0).await.expect("web");
    assert!(off.traces().is_empty());
    let span = ReconcileSpan::start(&off);
    assert_eq!(span.id(), None);
    span.scope(async { assert_eq!(current_span(), None) }).await;
    span.end(ReconcileResult::Ok);
    q.done(off.item());
    drop(serial);

    let rec = record();
    q.add_traced(key("demo", "web"), TraceId(3));
    q.add_traced(key("demo", "web"), TraceId(7));
    let taken = q.get_traced(4).await.expect("web");
    let span = ReconcileSpan::start(&taken);
    let id = span.id().expect("tracing is on");
    span.scope(async {
        assert_eq!(current_span(), Some(id));
        deep_inside_the_reconcile().await;
    })
    .await;
    span.write(WriteVerb::UpdateStatus, "Deployment", "demo", "web", "1241");
    advance(Duration::from_millis(2)).await;
    span.end(ReconcileResult::Requeue(Some(Duration::from_secs(5))));
    q.done(taken.item());
    // Outside any span: recorded without one.
    record_write(WriteVerb::Delete, "ReplicaSet", "demo", "web-old", "");
    // A failed reconcile, and one that never called `end` (it panicked, or was cancelled).
    let failed = ReconcileSpan::start(&taken);
    failed.end(ReconcileResult::Error(&"conflict on replicasets/web-5d4f8"));
    let forgotten = ReconcileSpan::start(&taken);
    drop(forgotten);

    let lines = rec.lines(&["reconcile", "write"]);
    let kinds: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            let t = l["type"].as_str().unwrap();
            let what = l
                .get("what")
                .or(l.get("verb"))
                .and_then(Value::as_str)
                .unwrap();
            (t, what)
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("reconcile", "start"),
            ("write", "create"),
            ("write", "update_status"),
            ("reconcile", "end"),
            ("write", "delete"),
            ("reconcile", "start"),
            ("reconcile", "end"),
            ("reconcile", "start"),
            ("reconcile", "end"),
        ]
    );
    let span = id.to_string();
    assert_eq!(span.len(), 16);
    let start = &lines[0];
    assert_eq!(start["span"], span);
    assert_eq!(
        (&start["queue"], &start["key"], &start["worker"]),
        (&"deployments".into(), &"demo/web".into(), &"4".into())
    );
    assert_eq!(start["traces"], serde_json::json!([hex(3), hex(7)]));
    let create = &lines[1];
    assert_eq!(create["span"], span, "recorded deep inside the scope");
    assert_eq!(
        (
            &create["kind"],
            &create["ns"],
            &create["name"],
            &create["rv"]
        ),
        (
            &"ReplicaSet".into(),
            &"demo".into(),
            &"web-5d4f8".into(),
            &"1240".into()
        )
    );
    assert_eq!(lines[2]["span"], span);
    let end = &lines[3];
    assert_eq!(
        (&end["span"], &end["result"]),
        (&span.clone().into(), &"requeue".into())
    );
    assert_eq!(end["requeue_after"], 5_000_000_000u64);
    assert!(end["dur"].is_u64() && end.get("error").is_none());
    assert!(
        lines[4].get("span").is_none(),
        "a write outside any reconcile"
    );
    assert_eq!(lines[4]["rv"], "");
    assert_ne!(lines[5]["span"], span, "one span id per reconcile");
    assert_eq!(
        (&lines[6]["result"], &lines[6]["error"]),
        (&"error".into(), &"conflict on replicasets/web-5d4f8".into())
    );
    assert_eq!(lines[8]["result"], "error", "a span dropped without end");
    assert!(
        lines[8]["error"]
            .as_str()
            .unwrap()
            .contains("without an end")
    );
}

/// T5's bound: a hot key merged from more events than `MAX_ITEM_TRACES` keeps the first ones
/// and counts the rest on its `got` line (`untraced`), so neither the item's list nor each
/// `merged` line's copy of it grows without bound.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn t5_a_hot_key_keeps_a_bounded_list_and_counts_the_rest() {
    use kinformer_actors::workqueue::MAX_ITEM_TRACES;
    let rec = record();
    let q = AsyncWorkQueue::<ObjectKey>::new().with_name("deployments");
    let web = key("demo", "web");
    let extra = 36u64;
    for i in 1..=MAX_ITEM_TRACES as u64 + extra {
        q.add_traced(web.clone(), TraceId(i));
    }
    let taken = q.get_traced(0).await.expect("web");
    assert_eq!(taken.traces().len(), MAX_ITEM_TRACES);
    assert_eq!(taken.traces()[0], TraceId(1));
    q.done(&web);
    let lines = rec.lines(&["queue"]);
    let got = lines
        .iter()
        .find(|l| l["what"] == "got")
        .expect("a got line");
    assert_eq!(got["untraced"], extra);
    let longest = lines
        .iter()
        .filter(|l| l["what"] == "merged")
        .map(|l| l["into"].as_array().map_or(0, Vec::len))
        .max();
    assert_eq!(longest, Some(MAX_ITEM_TRACES));
}
