//! The `pods-web` binary as a user runs it, driven over HTTP: against a simulated API server of
//! the test's own (through `KUBECONFIG`), whose pods the test changes, so every answer can be
//! compared with the server's state; and with no kubeconfig at all (the embedded sim, with
//! churn) for SIGTERM. The page is rendered in headless Chromium.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kinformer_sim::{Sim, SimConfig};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

/// Generous: a debug build on a loaded CI machine.
const DEADLINE: Duration = Duration::from_secs(30);

/// The running binary; killed when the test ends, however it ends.
struct Service {
    child: Child,
    base: String,
    /// Stdout lines after the address line.
    stdout: mpsc::Receiver<String>,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Service {
    /// Starts `pods-web --addr 127.0.0.1:0 ARGS` with `kubeconfig` (None: no kubeconfig at all,
    /// HOME pointing to an empty directory) and waits for its address line.
    fn start(kubeconfig: Option<&Path>, args: &[&str]) -> Service {
        let dir = tempfile::tempdir().expect("tempdir");
        let stderr = dir.path().join("stderr.log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pods-web"));
        cmd.args(["--addr", "127.0.0.1:0"])
            .args(args)
            .env("HOME", dir.path())
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .env_remove("KINFORMER_TRACE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        match kubeconfig {
            Some(path) => cmd.env("KUBECONFIG", path),
            None => cmd.env_remove("KUBECONFIG"),
        };
        let mut child = cmd.spawn().expect("spawn pods-web");
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first = rx
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|e| panic!("no address line on stdout within {DEADLINE:?}: {e}"));
        let base = first
            .strip_prefix("pods-web listening on ")
            .unwrap_or_else(|| panic!("unexpected first stdout line: {first:?}"))
            .to_string();
        Service {
            child,
            base,
            stdout: rx,
            stderr,
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits for `/readyz` to answer 200.
    async fn ready(&self, http: &reqwest::Client) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Ok(r) = http.get(self.url("/readyz")).send().await
                && r.status() == 200
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not ready within {DEADLINE:?}; stderr:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn get(http: &reqwest::Client, url: &str) -> (u16, String) {
    let r = http.get(url).send().await.expect("request");
    let status = r.status().as_u16();
    (status, r.text().await.expect("body"))
}

async fn get_json(http: &reqwest::Client, url: &str) -> (u16, Value) {
    let (status, body) = get(http, url).await;
    let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {body}"));
    (status, v)
}

/// Polls `f` until it returns Some, with a deadline.
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pod(ns: &str, name: &str, labels: &[(&str, &str)], node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name,
                     "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.example/app:1"}]},
    }))
    .expect("pod")
}

async fn set_phase(client: &Client, ns: &str, name: &str, phase: &str) {
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": phase}})),
        )
        .await
        .expect("patch status");
}

/// A sim with pods in `shop` and `blog`: web-0/web-1 (tier=front) and db-0 (tier=back) in
/// shop, web-0 in blog; on nodes n1/n2; shop/web-0 and blog/web-0 Running.
async fn seeded_sim() -> (Sim, Client) {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client();
    for ns in ["shop", "blog"] {
        let _ = Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"),
            )
            .await;
    }
    for (ns, name, labels, node) in [
        (
            "shop",
            "web-0",
            &[("app", "web"), ("tier", "front")][..],
            "n1",
        ),
        (
            "shop",
            "web-1",
            &[("app", "web"), ("tier", "front")][..],
            "n2",
        ),
        ("shop", "db-0", &[("app", "db"), ("tier", "back")][..], "n2"),
        ("blog", "web-0", &[("app", "web")][..], "n1"),
    ] {
        Api::<Pod>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &pod(ns, name, labels, node))
            .await
            .expect("create pod");
    }
    set_phase(&client, "shop", "web-0", "Running").await;
    set_phase(&client, "blog", "web-0", "Running").await;
    (sim, client)
}

/// The server's pods as `namespace/name` → phase (what the cache should converge to).
async fn server_pods(client: &Client) -> BTreeMap<String, String> {
    Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|p| {
            let phase = p
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "(none)".into());
            (
                format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()),
                phase,
            )
        })
        .collect()
}

fn item_keys(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|p| {
            format!(
                "{}/{}",
                p["metadata"]["namespace"].as_str().unwrap_or_default(),
                p["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// Every route against the sim's state: the list (all, by namespace, by label selector, a bad
/// selector), get (present, absent, after a delete), counts per index, the summary actor's
/// counts, and the telemetry routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_answer_from_the_cache_as_the_server_has_it() {
    let (sim, client) = seeded_sim().await;
    let svc = Service::start(Some(sim.kubeconfig_path()), &[]);
    let http = reqwest::Client::new();
    svc.ready(&http).await;
    let want = server_pods(&client).await;
    // Set up before the informer started, so the first list already holds everything.
    let (status, list) = get_json(&http, &svc.url("/api/pods")).await;
    assert_eq!(status, 200);
    assert_eq!(list["kind"], "PodList");
    assert_eq!(
        item_keys(&list),
        want.keys().cloned().collect::<Vec<_>>(),
        "sorted by namespace/name"
    );

    let selected = |sel: &'static str| {
        let http = http.clone();
        let url = svc.url("/api/pods");
        async move {
            let r = http
                .get(url)
                .query(&[("labelSelector", sel)])
                .send()
                .await
                .expect("request");
            let status = r.status().as_u16();
            let body: Value = r.json_or_text().await;
            (status, body)
        }
    };
    for (sel, keys) in [
        ("tier=front", vec!["shop/web-0", "shop/web-1"]),
        ("tier in (front,back),app!=web", vec!["shop/db-0"]),
        ("app=web,!tier", vec!["blog/web-0"]),
        ("tier notin (front)", vec!["blog/web-0", "shop/db-0"]),
        (
            "",
            vec!["blog/web-0", "shop/db-0", "shop/web-0", "shop/web-1"],
        ),
        ("app=nothing", vec![]),
    ] {
        let (status, body) = selected(sel).await;
        assert_eq!(status, 200, "{sel}: {body}");
        assert_eq!(item_keys(&body), keys, "labelSelector={sel}");
    }
    let (status, body) = selected("tier in (front").await;
    assert_eq!(status, 400, "a bad selector: {body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("tier in (front"),
        "{body}"
    );
    let (_, body) = get_json(&http, &svc.url("/api/pods?namespace=blog")).await;
    assert_eq!(item_keys(&body), vec!["blog/web-0"]);

    let (status, body) = get_json(&http, &svc.url("/api/pods/shop/web-1")).await;
    assert_eq!(status, 200);
    assert_eq!(body["metadata"]["name"], "web-1");
    assert_eq!(body["spec"]["nodeName"], "n2");
    let (status, body) = get_json(&http, &svc.url("/api/pods/shop/nope")).await;
    assert_eq!(status, 404, "{body}");

    let counts = |index: &'static str| {
        let http = http.clone();
        let url = svc.url(&format!("/api/counts/{index}"));
        async move { get_json(&http, &url).await }
    };
    let expect = |pairs: &[(&str, u64)]| {
        Value::Object(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect(),
        )
    };
    let (status, body) = counts("namespace").await;
    assert_eq!(status, 200);
    assert_eq!(body["counts"], expect(&[("blog", 1), ("shop", 3)]));
    assert_eq!(body["total"], 4);
    let (_, body) = counts("node").await;
    assert_eq!(body["counts"], expect(&[("n1", 2), ("n2", 2)]));
    let mut phases: BTreeMap<String, u64> = BTreeMap::new();
    for p in want.values() {
        *phases.entry(p.clone()).or_default() += 1;
    }
    let (_, body) = counts("phase").await;
    assert_eq!(body["counts"], json!(phases), "as the server has them");
    let (status, body) = counts("colour").await;
    assert_eq!(status, 404, "{body}");

    // The summary actor saw the same (it was registered before the informer started).
    let (_, summary) = get_json(&http, &svc.url("/api/summary")).await;
    assert_eq!(summary["pods"], 4, "{summary}");
    assert_eq!(summary["by_phase"], json!(phases));
    assert_eq!(summary["by_namespace"], expect(&[("blog", 1), ("shop", 3)]));
    // The page carries the current state itself: it shows the counts at load, not
    // "pods: ?" and empty tables until the event stream's first event.
    let (status, page) = get(&http, &svc.url("/")).await;
    assert_eq!(status, 200);
    assert!(page.contains(r#"pods: <b id="total">4</b>"#), "{page}");
    assert!(
        page.contains(r#""by_namespace":{"blog":1,"shop":3}"#),
        "the initial summary for the tables: {page}"
    );

    // A change on the server reaches the cache, the counts and the summary.
    Api::<Pod>::namespaced(client.clone(), "shop")
        .delete("web-1", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
    set_phase(&client, "shop", "db-0", "Running").await;
    eventually("the delete reaches the cache", || async {
        (get(&http, &svc.url("/api/pods/shop/web-1")).await.0 == 404).then_some(())
    })
    .await;
    eventually("the counts and the summary follow", || async {
        let (_, c) = counts("phase").await;
        let (_, s) = get_json(&http, &svc.url("/api/summary")).await;
        (c["counts"] == json!({"Running": 3}) && s["by_phase"] == json!({"Running": 3}))
            .then_some(())
    })
    .await;

    // Telemetry as actix-web routes.
    let (status, metrics) = get(&http, &svc.url("/metrics")).await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains(r#"kinformer_informer_synced{informer="pods""#)
            && metrics.contains(r#"listener="pod-summary""#)
            && metrics.trim_end().ends_with("# EOF"),
        "{metrics}"
    );
    assert_eq!(get(&http, &svc.url("/healthz")).await, (200, "ok\n".into()));
    assert_eq!(get(&http, &svc.url("/readyz")).await, (200, "ok\n".into()));
    let (status, debug) = get_json(&http, &svc.url("/debug/informers")).await;
    assert_eq!(status, 200);
    assert_eq!(debug["informers"][0]["name"], "pods", "{debug}");
    assert_eq!(get(&http, &svc.url("/no/such/route")).await.0, 404);
    drop(svc);
    sim.shutdown().await;
}

/// `/events`: a `summary` event at once, then a `change` event after a pod changes on the
/// server (within a deadline), carrying the change and the new summary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_event_arrives_after_a_pod_change() {
    let (sim, client) = seeded_sim().await;
    let svc = Service::start(Some(sim.kubeconfig_path()), &[]);
    let http = reqwest::Client::new();
    svc.ready(&http).await;
    let mut events = http.get(svc.url("/events")).send().await.expect("/events");
    assert_eq!(events.status(), 200);
    assert_eq!(
        events.headers()["content-type"].to_str().ok(),
        Some("text/event-stream")
    );
    let mut text = String::new();
    // Reads until `pred` holds on what arrived so far (with the deadline).
    let mut read_until = async |text: &mut String, what: &str, pred: &dyn Fn(&str) -> bool| {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while !pred(text) {
            let chunk = tokio::time::timeout_at(deadline, events.chunk())
                .await
                .unwrap_or_else(|_| panic!("no {what} within {DEADLINE:?}; got:\n{text}"))
                .expect("stream")
                .unwrap_or_else(|| panic!("the stream ended before {what}; got:\n{text}"));
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    read_until(&mut text, "a summary event", &|t| t.contains("\n\n")).await;
    let first = text.split("\n\n").next().unwrap_or_default().to_string();
    assert!(first.starts_with("event: summary\ndata: "), "{first}");
    let summary: Value =
        serde_json::from_str(first.trim_start_matches("event: summary\ndata: ")).expect("json");
    assert_eq!(summary["pods"], 4, "{summary}");

    Api::<Pod>::namespaced(client.clone(), "blog")
        .create(
            &PostParams::default(),
            &pod("blog", "sse-pod", &[("app", "sse")], "n3"),
        )
        .await
        .expect("create");
    read_until(&mut text, "the change event of blog/sse-pod", &|t| {
        t.contains(r#""key":"blog/sse-pod""#) && t.ends_with("\n\n")
    })
    .await;
    let frame = text
        .split("\n\n")
        .find(|f| f.contains(r#""key":"blog/sse-pod""#))
        .expect("frame");
    let data: Value = serde_json::from_str(
        frame
            .strip_prefix("event: change\ndata: ")
            .unwrap_or_else(|| panic!("a change event: {frame}")),
    )
    .expect("json");
    assert_eq!(data["change"]["op"], "add");
    assert_eq!(data["change"]["node"], "n3");
    assert_eq!(data["summary"]["pods"], 5);
    assert_eq!(data["summary"]["by_namespace"]["blog"], 2);

    // `?limit=1`: one change, then `end`, then the stream ends.
    let mut limited = http
        .get(svc.url("/events?limit=1"))
        .send()
        .await
        .expect("/events?limit=1");
    set_phase(&client, "blog", "sse-pod", "Running").await;
    let mut body = String::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while let Some(chunk) = tokio::time::timeout_at(deadline, limited.chunk())
        .await
        .expect("the limited stream ends within the deadline")
        .expect("stream")
    {
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert_eq!(body.matches("event: change").count(), 1, "{body}");
    assert!(
        body.ends_with("event: end\ndata: {\"reason\":\"limit\"}\n\n"),
        "{body}"
    );
    drop(svc);
    sim.shutdown().await;
}

/// With no kubeconfig at all the binary runs the embedded sim (with churn); SIGTERM ends the
/// open `/events` stream, stops the server, removes the summary's registration, shuts the
/// informers down in that order, prints the report and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_in_order_prints_the_report_and_exits_0() {
    let mut svc = Service::start(None, &["--churn-rate", "50"]);
    let http = reqwest::Client::new();
    svc.ready(&http).await;
    // The embedded sim's demo pods and its churn are in the cache.
    let (_, summary) = eventually("churned pods in the summary", || async {
        let (s, v) = get_json(&http, &svc.url("/api/summary")).await;
        (v["by_namespace"]["shop"].as_u64().unwrap_or(0) > 0).then_some((s, v))
    })
    .await;
    assert!(
        summary["by_namespace"]["demo"].as_u64().unwrap_or(0) > 0,
        "{summary}"
    );
    let mut events = http.get(svc.url("/events")).send().await.expect("/events");
    let first = tokio::time::timeout(DEADLINE, events.chunk())
        .await
        .expect("a first event")
        .expect("stream");
    assert!(first.is_some_and(|c| c.starts_with(b"event: summary")));

    // SAFETY: kill(2) on our own child's pid, which it still is (we have not waited on it).
    let rc = unsafe { libc::kill(svc.child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0, "kill -TERM");
    // The stream is ended by the shutdown (not cut by the process's exit: it ends cleanly).
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while tokio::time::timeout_at(deadline, events.chunk())
        .await
        .expect("the /events stream ends within the deadline")
        .expect("the stream ends cleanly")
        .is_some()
    {}
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(s) = svc.child.try_wait().expect("try_wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "no exit within {DEADLINE:?} of SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let log = svc.stderr();
    assert!(status.success(), "exit status {status}; stderr:\n{log}");
    let mut out = Vec::new();
    while let Ok(line) = svc.stdout.recv_timeout(Duration::from_secs(5)) {
        out.push(line);
    }
    let report = out
        .iter()
        .find(|l| l.starts_with("shutdown report: "))
        .unwrap_or_else(|| panic!("no shutdown report on stdout: {out:?}\nstderr:\n{log}"));
    assert!(
        report.contains("streams_closed=1")
            && report.contains("registration_removed=true")
            && report.contains("pods: unfinished=[]"),
        "{report}"
    );
    let at = |what: &str| {
        log.find(what)
            .unwrap_or_else(|| panic!("{what:?} not in the log:\n{log}"))
    };
    assert!(
        at("signal=\"SIGTERM\"") < at("HTTP server stopped")
            && at("HTTP server stopped") < at("summary actor stopped")
            && at("summary actor stopped") < at("shutdown report"),
        "shutdown steps out of order:\n{log}"
    );
}

/// The browser binary: `chromium` or `chromium-browser` on PATH.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| [d.join("chromium"), d.join("chromium-browser")])
        .find(|p| p.is_file())
}

/// The page in a real headless Chromium: its script fills the counts from the `summary` event
/// and lists the changes the test makes while the page is open (`/?limit=3`: the page follows
/// three changes, then closes its stream, so the virtual-time budget can run out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_live_data_in_headless_chromium() {
    let Some(browser) = chromium() else {
        eprintln!(
            "\n\n!!!!! WARNING: no chromium or chromium-browser on PATH: the pods-web page was \
             NOT rendered in a browser (apt-get install chromium) !!!!!\n\n"
        );
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true requires a headless Chromium for this test"
        );
        return;
    };
    let (sim, client) = seeded_sim().await;
    let svc = Service::start(Some(sim.kubeconfig_path()), &[]);
    let http = reqwest::Client::new();
    svc.ready(&http).await;

    // Changes keep coming while the page is open: shop/web-1 is annotated again and again.
    let stop = Arc::new(AtomicBool::new(false));
    let toucher = {
        let client = client.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let api = Api::<Pod>::namespaced(client, "shop");
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let _ = api
                    .patch(
                        "web-1",
                        &PatchParams::default(),
                        &Patch::Merge(
                            json!({"metadata": {"annotations": {"touch": i.to_string()}}}),
                        ),
                    )
                    .await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    let profile = tempfile::tempdir().expect("profile dir");
    let child = tokio::process::Command::new(&browser)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--virtual-time-budget=2000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--dump-dom", &svc.url("/?limit=3")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn chromium");
    let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .expect("chromium finished within the deadline (killed otherwise)")
        .expect("chromium output");
    stop.store(true, Ordering::Relaxed);
    let _ = toucher.await;
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && dom.contains("<h1>Pods, live from a kinformer informer</h1>"),
        "chromium rendered the page; status {:?}, stderr: {}\nDOM: {dom}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        dom.contains(r#"<b id="status" class="">ended (limit reached)</b>"#),
        "the page followed its three changes: {dom}"
    );
    assert!(dom.contains(r#"<b id="total">4</b>"#), "pod total: {dom}");
    for row in [
        r#"<tr data-phase="Running"><td>Running</td><td>2</td></tr>"#,
        r#"<tr data-namespace="shop"><td>shop</td><td>3</td></tr>"#,
        r#"<tr data-namespace="blog"><td>blog</td><td>1</td></tr>"#,
    ] {
        assert!(dom.contains(row), "{row} in the DOM: {dom}");
    }
    assert_eq!(
        dom.matches(r#"<li data-key="shop/web-1" data-op="update">"#)
            .count(),
        3,
        "three live changes listed: {dom}"
    );
    for key in ["shop/web-0", "shop/web-1", "shop/db-0", "blog/web-0"] {
        assert!(
            dom.contains(&format!(r#"<tr data-key="{key}">"#)),
            "{key} in the pod table: {dom}"
        );
    }
    drop(svc);
    sim.shutdown().await;
}

/// A response body as JSON, or, when it is not JSON, as a JSON string (for messages).
trait JsonOrText {
    async fn json_or_text(self) -> Value;
}

impl JsonOrText for reqwest::Response {
    async fn json_or_text(self) -> Value {
        let text = self.text().await.expect("body");
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }
}
