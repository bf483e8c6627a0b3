//! The `html` export rendered by a real headless Chromium (Debian's `chromium`): after load,
//! the DOM holds the followed object's hops, in the order `follow` gives them.
//!
//! Without a browser on PATH the test says so loudly and passes, except under `CI=true`, where
//! it fails.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use kinformer_trace::{TraceFile, follow};
use wait_timeout::ChildExt;

/// How long the browser may take to load and dump one page.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(30);

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// `chromium` or `chromium-browser` on PATH.
fn browser() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Loads `url` in a headless browser with a fresh profile and returns the DOM after load.
fn dump_dom(browser: &Path, dir: &Path, url: &str) -> String {
    let dom_path = dir.join("dom.html");
    let log_path = dir.join("chromium.log");
    let profile = tempfile::tempdir_in(dir).expect("profile dir");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--dump-dom", url])
        .stdin(Stdio::null())
        .stdout(File::create(&dom_path).expect("dom file"))
        .stderr(File::create(&log_path).expect("log file"))
        .spawn()
        .expect("the browser starts");
    let status = match child.wait_timeout(BROWSER_TIMEOUT).expect("wait") {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} did not finish within {BROWSER_TIMEOUT:?}; its log:\n{}",
                browser.display(),
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
    };
    let dom = std::fs::read_to_string(&dom_path).expect("dom");
    assert!(
        status.success() && !dom.is_empty(),
        "{} exited {status} with an empty DOM; its log:\n{}",
        browser.display(),
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    dom
}

/// `(data-hop, data-inst)` of each `<tr class="hop">` row, in DOM order.
fn hop_rows(dom: &str) -> Vec<(String, String)> {
    let attr = |tag: &str, name: &str| -> String {
        let key = format!(" {name}=\"");
        tag.find(&key)
            .map(|at| {
                let rest = &tag[at + key.len()..];
                rest[..rest.find('"').unwrap_or(rest.len())].to_string()
            })
            .unwrap_or_default()
    };
    dom.split("<tr class=\"hop\"")
        .skip(1)
        .map(|row| {
            let tag = &row[..row.find('>').unwrap_or(row.len())];
            (attr(tag, "data-hop"), attr(tag, "data-inst"))
        })
        .collect()
}

#[test]
fn html_export_shows_the_followed_objects_hops_in_chromium() {
    let Some(browser) = browser() else {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        // Written to the stream itself: libtest captures `eprintln!` of a passing test.
        let _ = writeln!(
            std::io::stderr(),
            "\n{0}\nWARNING: no chromium or chromium-browser on PATH: the html export was NOT \
             rendered in a browser (apt-get install chromium)\n{0}\n",
            "!".repeat(78)
        );
        assert!(!ci, "CI=true needs a headless Chromium for this test");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let page = dir.path().join("trace.html");
    let out = Command::new(env!("CARGO_BIN_EXE_kinformer-trace"))
        .arg("html")
        .arg(&page)
        .arg(fixture("two-informers.jsonl"))
        .args(["--object", "demo/web-1"])
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let file = TraceFile::open(&fixture("two-informers.jsonl")).expect("fixture");
    let expected = |object: &str, kind: &str| -> Vec<(String, String)> {
        let query = object
            .parse()
            .map(|q: kinformer_trace::ObjectQuery| q.with_kind(Some(kind.into())));
        let timeline = follow(&file, &query.expect("object")).expect("in the file");
        timeline
            .traces
            .iter()
            .flat_map(|t| {
                t.hops
                    .iter()
                    .map(|h| (h.hop.as_str().to_string(), h.inst.clone()))
            })
            .collect()
    };

    let url = format!("file://{}", page.display());
    let dom = dump_dom(&browser, dir.path(), &url);
    assert!(
        dom.contains("Hops of Pod demo/web-1"),
        "heading missing:\n{dom}"
    );
    assert!(dom.contains(">Pod demo/web-1 (2 traces, 14 hops)</option>"));
    assert!(
        dom.contains(">all 2 traces</option>"),
        "the trace select box"
    );
    let rows = hop_rows(&dom);
    assert_eq!(rows, expected("demo/web-1", "Pod"));
    assert!(
        rows.iter()
            .any(|(hop, inst)| hop == "handler" && inst == "pod-logger")
    );
    // One line per trace and listener: 2 traces through 2 listeners.
    assert_eq!(dom.matches("<polyline").count(), 4);
    // A swimlane per actor instance of the file (3 informers × 3 + 4 listeners × 2).
    assert_eq!(dom.matches("<rect class=\"lane").count(), 17);

    // Another object, chosen through the address as the select box does.
    let dom = dump_dom(
        &browser,
        dir.path(),
        &format!("{url}#Deployment%20demo%2Fweb"),
    );
    assert!(
        dom.contains("Hops of Deployment demo/web"),
        "heading missing:\n{dom}"
    );
    assert_eq!(hop_rows(&dom), expected("demo/web", "Deployment"));
    assert!(dom.contains("born in the indexer"), "the resync trace");
    // A trace without loop lines says where it ends.
    assert!(
        dom.contains("<p id=\"loop-note\">No queue, reconcile or write lines for this object"),
        "the loop note"
    );
}

/// `data-stage` of each step of each `<ol class="loop">`, in DOM order.
fn loop_stages(dom: &str) -> Vec<Vec<String>> {
    dom.split("<ol class=\"loop\"")
        .skip(1)
        .map(|list| {
            let list = &list[..list.find("</ol>").unwrap_or(list.len())];
            list.split("data-stage=\"")
                .skip(1)
                .map(|rest| rest[..rest.find('"').unwrap_or(rest.len())].to_string())
                .collect()
        })
        .collect()
}

#[test]
fn html_export_draws_the_loop_in_chromium() {
    let Some(browser) = browser() else {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        let _ = writeln!(
            std::io::stderr(),
            "\nWARNING: no chromium or chromium-browser on PATH: the loop was NOT rendered in a \
             browser (apt-get install chromium)\n"
        );
        assert!(!ci, "CI=true needs a headless Chromium for this test");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let page = dir.path().join("loop.html");
    let out = Command::new(env!("CARGO_BIN_EXE_kinformer-trace"))
        .arg("html")
        .arg(&page)
        .arg(fixture("loop.jsonl"))
        .args(["--object", "demo/web"])
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = TraceFile::open(&fixture("loop.jsonl")).expect("fixture");
    let timeline = follow(&file, &"demo/web".parse().expect("object")).expect("in the file");
    // Each trace: the event, its handler, then the loop `follow` prints, in the same order.
    let expected: Vec<Vec<String>> = timeline
        .traces
        .iter()
        .map(|t| {
            let mut stages = vec!["event".to_string(), "handler".to_string()];
            stages.extend(t.after.iter().map(|s| s.stage.clone()));
            stages
        })
        .collect();

    let dom = dump_dom(&browser, dir.path(), &format!("file://{}", page.display()));
    assert!(
        dom.contains(
            "Loop of Deployment demo/web: event → queue → reconcile → writes → own events"
        ),
        "heading missing:\n{dom}"
    );
    let stages = loop_stages(&dom);
    assert_eq!(stages, expected);
    assert!(stages[0].iter().any(|s| s == "own event"), "{stages:?}");
    // The ReplicaSet the reconcile created came back: a link to it, nested steps after it.
    assert!(
        dom.contains("href=\"#ReplicaSet%20demo%2Fweb-5d4f8\""),
        "own event link missing:\n{dom}"
    );
    assert!(dom.contains("class=\"step stage-handler nested\""), "{dom}");
    assert!(dom.contains("(own write: update_status by reconcile 00000a0000000001"));
}
