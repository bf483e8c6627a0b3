//! kubectl (client-go, written by none of us) against the sim: create -f, get -o json, table
//! output, get --watch, patch --type merge, scale, delete.
//!
//! Without kubectl on PATH the test says so loudly; it fails only when `CI=true`.

mod common;

use std::io::{BufRead, BufReader, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use kinformer_sim::{Sim, SimConfig, SimThread, Verb};
use serde_json::{Value, json};

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

struct Kubectl<'a> {
    sim: &'a SimThread,
    cache: &'a Path,
}

impl Kubectl<'_> {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(self.sim.kubeconfig_path())
            .arg("--cache-dir")
            .arg(self.cache)
            .arg("--request-timeout=20s")
            .args(args);
        c.env_remove("KUBECONFIG");
        c
    }

    /// Runs kubectl, asserts success, returns stdout.
    fn run(&self, args: &[&str]) -> String {
        let out = self.cmd(args).output().expect("kubectl runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        );
        stdout
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        let s = self.run(&a);
        serde_json::from_str(&s)
            .unwrap_or_else(|e| panic!("kubectl {args:?} printed invalid JSON ({e}): {s}"))
    }
}

/// Reads a child's stdout lines through a channel so the test can wait with a deadline.
fn line_reader(stdout: std::process::ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_line(rx: &mpsc::Receiver<String>, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + common::DEADLINE;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if pred(&l) => return l,
            Ok(l) => seen.push(l),
            Err(_) => panic!("no line with {what} from kubectl get --watch; saw {seen:?}"),
        }
    }
}

fn is_event(line: &str, ty: &str, name: &str) -> bool {
    serde_json::from_str::<Value>(line)
        .is_ok_and(|v| v["type"] == ty && v["object"]["metadata"]["name"] == name)
}

const MANIFEST: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  labels:
    app: shop
data:
  color: blue
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
spec:
  replicas: 1
  selector:
    matchLabels:
      app: shop
  template:
    metadata:
      labels:
        app: shop
    spec:
      containers:
      - name: shop
        image: registry.example/shop:1.0
---
apiVersion: v1
kind: Pod
metadata:
  name: shop-pod
  labels:
    app: shop
spec:
  containers:
  - name: shop
    image: registry.example/shop:1.0
"#;

#[test]
fn kubectl_drives_the_sim() {
    if !kubectl_available() {
        let msg = "\n\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
                   !! kubectl is not on PATH: the kubectl protocol test is SKIPPED.            !!\n\
                   !! Install kubectl to check the sim against client-go (fails when CI=true). !!\n\
                   !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\n";
        // Straight to the process's stderr, past the test harness's output capture.
        let _ = std::io::stderr().write_all(msg.as_bytes());
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kubectl is required when CI=true"
        );
        return;
    }
    let sim = Sim::start_background(SimConfig::default()).expect("sim starts");
    let tmp = tempfile::tempdir().expect("tempdir");
    let k = Kubectl {
        sim: &sim,
        cache: tmp.path(),
    };
    let manifest = tmp.path().join("manifest.yaml");
    std::fs::write(&manifest, MANIFEST).expect("manifest written");

    // create -f (discovery, OpenAPI v3 field-validation check, POST with fieldValidation=Strict).
    let out = k.run(&["create", "-f", manifest.to_str().expect("utf-8 path")]);
    for want in [
        "configmap/settings created",
        "deployment.apps/shop created",
        "pod/shop-pod created",
    ] {
        assert!(out.contains(want), "create output lacks {want:?}: {out}");
    }
    assert!(
        sim.get_object("configmaps", Some("default"), "settings")
            .unwrap()
            .is_some()
    );

    // get -o json: a single object and a list.
    let cm = k.json(&["get", "configmap", "settings"]);
    assert_eq!(cm["data"]["color"], "blue");
    assert_eq!(cm["kind"], "ConfigMap");
    let pods = k.json(&["get", "pods", "-l", "app=shop"]);
    assert_eq!(pods["kind"], "List");
    assert_eq!(pods["items"][0]["metadata"]["name"], "shop-pod");
    assert_eq!(pods["items"][0]["kind"], "Pod");

    // Table output (Accept: as=Table) and short names.
    let table = k.run(&["get", "po"]);
    let mut lines = table.lines();
    let header = lines.next().unwrap_or("");
    assert!(
        header.starts_with("NAME") && header.contains("STATUS") && header.contains("AGE"),
        "{table}"
    );
    assert!(
        lines.any(|l| l.starts_with("shop-pod") && l.contains("Pending")),
        "{table}"
    );
    let deploys = k.run(&["get", "deploy", "shop"]);
    assert!(
        deploys.contains("shop") && deploys.contains("READY"),
        "{deploys}"
    );

    // get --watch, in table form and as JSON events.
    let mut table_watch = k
        .cmd(&["get", "configmaps", "--watch"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let table_lines = line_reader(table_watch.stdout.take().expect("stdout"));
    let mut json_watch = k
        .cmd(&[
            "get",
            "configmaps",
            "--watch",
            "--output-watch-events",
            "-o",
            "json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let json_lines = line_reader(json_watch.stdout.take().expect("stdout"));
    wait_line(&table_lines, "settings", |l| l.starts_with("settings"));
    let requests = sim.requests();
    let wait = std::time::Instant::now() + common::DEADLINE;
    while requests.open_watches_of("configmaps") < 2 {
        assert!(
            std::time::Instant::now() < wait,
            "kubectl never opened its watches"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    sim.create_object(
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "late"}, "data": {"a": "1"}}),
    )
    .unwrap();
    wait_line(&table_lines, "late", |l| l.starts_with("late"));
    // With --output-watch-events kubectl prints one JSON event per line.
    wait_line(&json_lines, "ADDED late", |l| is_event(l, "ADDED", "late"));

    // patch --type merge.
    let out = k.run(&[
        "patch",
        "configmap",
        "settings",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"color":"green","size":"L"}}"#,
    ]);
    assert!(out.contains("patched"), "{out}");
    let cm = sim
        .get_object("configmaps", Some("default"), "settings")
        .unwrap()
        .unwrap();
    assert_eq!(
        (cm["data"]["color"].as_str(), cm["data"]["size"].as_str()),
        (Some("green"), Some("L"))
    );
    wait_line(&table_lines, "settings (modified)", |l| {
        l.starts_with("settings")
    });

    // scale through the scale subresource.
    let out = k.run(&["scale", "deployment", "shop", "--replicas=3"]);
    assert!(out.contains("scaled"), "{out}");
    let d = sim
        .get_object("deployments", Some("default"), "shop")
        .unwrap()
        .unwrap();
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["metadata"]["generation"], 2);
    assert!(
        sim.requests().count("deployments/scale", Verb::Patch)
            + sim.requests().count("deployments/scale", Verb::Update)
            >= 1
    );
    let scale = k.json(&["get", "deployment", "shop", "--subresource", "scale"]);
    assert_eq!(scale["spec"]["replicas"], 3);

    // delete (kubectl waits for the object to go, with a field-selector watch).
    let out = k.run(&["delete", "configmap", "late"]);
    assert!(out.contains("deleted"), "{out}");
    assert!(
        sim.get_object("configmaps", Some("default"), "late")
            .unwrap()
            .is_none()
    );
    wait_line(&json_lines, "DELETED late", |l| {
        is_event(l, "DELETED", "late")
    });
    let out = k.run(&["delete", "-f", manifest.to_str().expect("utf-8 path")]);
    assert!(out.contains("deployment.apps \"shop\" deleted"), "{out}");
    assert_eq!(sim.object_count("deployments").unwrap(), 0);

    // Errors come back as kubectl prints real API errors.
    let out = k
        .cmd(&["get", "configmap", "nope"])
        .output()
        .expect("kubectl runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );

    for mut child in [table_watch, json_watch] {
        let _ = child.kill();
        let _ = child.wait();
    }
    sim.shutdown();
}

/// kubectl (client-go) against the misbehaving-server faults: `get` keeps working while a
/// watch-only fault is on, client-go honours the sim's 429 `Retry-After`, and it accepts lists
/// whose items carry no resourceVersion.
#[test]
fn kubectl_under_the_misbehaving_server_faults() {
    if !kubectl_available() {
        let _ = std::io::stderr().write_all(
            b"\n!! kubectl is not on PATH: kubectl_under_the_misbehaving_server_faults is SKIPPED\n\n",
        );
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kubectl is required when CI=true"
        );
        return;
    }
    let sim = Sim::start_background(SimConfig::default()).expect("sim starts");
    let tmp = tempfile::tempdir().expect("tempdir");
    let k = Kubectl {
        sim: &sim,
        cache: tmp.path(),
    };
    sim.create_object(
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "settings"}, "data": {"color": "blue"}}),
    )
    .unwrap();
    let names = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let f = sim.faults();
    let watch_faults: [(&str, &dyn Fn(bool)); 4] = [
        ("end watches at once", &|on| f.end_watches_at_once(on)),
        ("410 on every watch", &|on| {
            f.expire_every_watch(on.then_some(kinformer_sim::ExpireMode::Http))
        }),
        ("watch-list rejected", &|on| f.reject_watch_list(on)),
        ("watch-list ignored", &|on| f.ignore_watch_list(on)),
    ];
    for (what, set) in watch_faults {
        set(true);
        assert_eq!(
            names(&k.json(&["get", "configmaps"])),
            ["settings"],
            "{what}"
        );
        assert!(k.run(&["get", "cm"]).contains("settings"), "{what}: table");
        set(false);
    }
    // 410 on every watch, seen by kubectl get --watch: it reports the error and exits.
    f.expire_every_watch(Some(kinformer_sim::ExpireMode::Http));
    let out = k
        .cmd(&["get", "configmaps", "--watch", "--watch-only"])
        .output()
        .expect("kubectl runs");
    assert!(
        !out.status.success(),
        "a watch answered 410 ends kubectl's watch"
    );
    assert!(sim.faults().counters().watches_refused_expired >= 1);
    f.clear();

    // Objects without resourceVersion: kubectl lists them as they are.
    f.strip_resource_versions(true);
    let l = k.json(&["get", "configmaps"]);
    assert_eq!(names(&l), ["settings"]);
    assert!(
        l["items"][0]["metadata"].get("resourceVersion").is_none(),
        "{l}"
    );
    f.clear();

    // 429 with Retry-After: 1 on the next LIST: client-go waits and retries by itself.
    let before = sim.requests().count("configmaps", Verb::List);
    f.throttle(Some("configmaps"), &[Verb::List], Some(1), 1);
    assert_eq!(names(&k.json(&["get", "configmaps"])), ["settings"]);
    let t = sim.requests().arrivals("configmaps", Verb::List);
    assert_eq!(t.len() as u64, before + 2, "one throttled LIST, one retry");
    let gap = t[t.len() - 1] - t[t.len() - 2];
    assert!(
        gap >= Duration::from_millis(900),
        "client-go retried after {gap:?}, before Retry-After: 1"
    );
    assert_eq!(sim.faults().counters().throttled, 1);
    sim.shutdown();
}
