//! kubectl (client-go, written by none of us) against the sim, through the workflows a user
//! runs: create -f, apply -f (client-side, with kubectl's strategic merge patch, and
//! --server-side), create configmap|secret|deployment, get -o json|yaml|wide, get --watch,
//! label, annotate, patch (merge, json, strategic), scale, rollout status, delete (with and
//! without --wait, of a scheduled pod too), wait --for=delete, api-resources and explain.
//!
//! Without kubectl on PATH each test says so loudly; it fails only when `CI=true`.

use crate::common;

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use kinformer_sim::{CustomResource, Scope, Sim, SimConfig, SimThread, Verb};
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

/// kubectl against one sim, with its own cache directory (discovery, OpenAPI), which is also
/// where [`Kubectl::write`] puts manifests.
struct Kubectl<'a> {
    sim: &'a SimThread,
    cache: tempfile::TempDir,
}

impl<'a> Kubectl<'a> {
    fn new(sim: &'a SimThread) -> Self {
        Kubectl {
            sim,
            cache: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(self.sim.kubeconfig_path())
            .arg("--cache-dir")
            .arg(self.cache.path())
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

/// Polls `cond` (every 5 ms) until it holds, failing with `what` after [`common::DEADLINE`]:
/// these tests run kubectl as a child process, outside any async runtime.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + common::DEADLINE;
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
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
    let k = Kubectl::new(&sim);
    let manifest = k.write("manifest.yaml", MANIFEST);

    // create -f (discovery, OpenAPI v3 field-validation check, POST with fieldValidation=Strict).
    let out = k.run(&["create", "-f", &manifest]);
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
    wait_for("kubectl never opened its watches", || {
        requests.open_watches_of("configmaps") >= 2
    });
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
    let out = k.run(&["delete", "-f", &manifest]);
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
    let k = Kubectl::new(&sim);
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

/// Whether kubectl is missing (then the caller returns; under `CI=true` this fails).
fn skip_without_kubectl(test: &str) -> bool {
    if kubectl_available() {
        return false;
    }
    let _ = std::io::stderr().write_all(
        format!("\n!! kubectl is not on PATH: {test} is SKIPPED (fails when CI=true)\n\n")
            .as_bytes(),
    );
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "kubectl is required when CI=true"
    );
    true
}

impl Kubectl<'_> {
    /// Runs kubectl expecting failure; returns stderr.
    fn fail(&self, args: &[&str]) -> String {
        let out = self.cmd(args).output().expect("kubectl runs");
        assert!(
            !out.status.success(),
            "kubectl {args:?} should fail; stdout: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    fn write(&self, name: &str, text: &str) -> String {
        let p = self.cache.path().join(name);
        std::fs::write(&p, text).expect("manifest written");
        p.to_str().expect("utf-8 path").to_string()
    }
}

fn widget_sim(pod_termination: Duration) -> SimThread {
    Sim::start_background(SimConfig {
        custom_resources: vec![CustomResource::new(
            "example.com",
            "v1",
            "Widget",
            "widgets",
            Scope::Namespaced,
        )],
        pod_termination: Some(pod_termination),
        ..SimConfig::default()
    })
    .expect("sim starts")
}

const APPLY_V1: &str = r#"apiVersion: apps/v1
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
      - name: app
        image: registry.example/app:1
        ports:
        - containerPort: 80
        env:
        - name: A
          value: "1"
      - name: sidecar
        image: registry.example/sidecar:1
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: knob
spec:
  size: 1
  color: red
"#;

const APPLY_V2: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
spec:
  replicas: 2
  selector:
    matchLabels:
      app: shop
  template:
    metadata:
      labels:
        app: shop
    spec:
      containers:
      - name: log
        image: registry.example/log:1
      - name: app
        image: registry.example/app:2
        env:
        - name: A
          value: "1"
        - name: B
          value: "2"
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: knob
spec:
  size: 2
"#;

fn container_names(d: &Value) -> Vec<String> {
    d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `kubectl apply` client-side (a three-way strategic merge patch for built-in kinds, a JSON
/// merge patch for custom ones) and `--server-side`, each applied twice with a change.
#[test]
fn kubectl_apply_client_and_server_side() {
    if skip_without_kubectl("kubectl_apply_client_and_server_side") {
        return;
    }
    let sim = widget_sim(Duration::from_millis(300));
    let k = Kubectl::new(&sim);
    let v1 = k.write("v1.yaml", APPLY_V1);
    let out = k.run(&["apply", "-f", &v1]);
    assert!(
        out.contains("deployment.apps/shop created")
            && out.contains("widget.example.com/knob created"),
        "{out}"
    );
    let d = sim
        .get_object("deployments", Some("default"), "shop")
        .unwrap()
        .unwrap();
    assert!(
        d["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string(),
        "{d}"
    );
    // Someone else's change that the three-way merge must keep.
    sim.patch_object(
        "deployments",
        Some("default"),
        "shop",
        &json!({"metadata": {"labels": {"owner": "other"}}}),
    )
    .unwrap();
    let patches_before = sim.requests().count("deployments", Verb::Patch);
    let v2 = k.write("v2.yaml", APPLY_V2);
    let out = k.run(&["apply", "-f", &v2]);
    assert!(
        out.contains("deployment.apps/shop configured")
            && out.contains("widget.example.com/knob configured"),
        "{out}"
    );
    assert!(sim.requests().count("deployments", Verb::Patch) > patches_before);
    let d = sim
        .get_object("deployments", Some("default"), "shop")
        .unwrap()
        .unwrap();
    // kubectl sent $setElementOrder/containers, a `$patch: delete` for sidecar and `ports: null`.
    assert_eq!(container_names(&d), ["log", "app"], "{d}");
    let app = &d["spec"]["template"]["spec"]["containers"][1];
    assert_eq!(app["image"], "registry.example/app:2");
    assert_eq!(
        app["env"],
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    );
    assert!(
        app.get("ports").is_none(),
        "removed from the manifest: {app}"
    );
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(
        d["metadata"]["labels"]["owner"], "other",
        "the three-way merge keeps it"
    );
    assert_eq!(d["metadata"]["generation"], 2);
    let w = sim
        .get_object("widgets", Some("default"), "knob")
        .unwrap()
        .unwrap();
    assert_eq!(
        w["spec"],
        json!({"size": 2}),
        "JSON merge patch for a custom kind: {w}"
    );
    // Unchanged: nothing to send.
    let out = k.run(&["apply", "-f", &v2]);
    assert!(out.contains("deployment.apps/shop unchanged"), "{out}");

    // Server-side apply, twice with a change.
    let cm1 = k.write(
        "ssa1.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  a: \"1\"\n",
    );
    let out = k.run(&["apply", "--server-side", "-f", &cm1]);
    assert!(out.contains("configmap/ssa serverside-applied"), "{out}");
    let cm2 = k.write(
        "ssa2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  labels:\n    t: x\ndata:\n  a: \"2\"\n  b: \"3\"\n",
    );
    let out = k.run(&["apply", "--server-side", "-f", &cm2]);
    assert!(out.contains("configmap/ssa serverside-applied"), "{out}");
    let cm = sim
        .get_object("configmaps", Some("default"), "ssa")
        .unwrap()
        .unwrap();
    assert_eq!(cm["data"], json!({"a": "2", "b": "3"}));
    assert_eq!(cm["metadata"]["labels"]["t"], "x");
    assert_eq!(
        cm["metadata"]["managedFields"][0]["fieldsV1"],
        json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:t": {}}}}),
        "{cm}"
    );
    // Applying the first manifest again removes what the manager no longer applies (the label
    // and data key it alone owned), as kube-apiserver's field manager does; the same apply once
    // more is a no-op (no new resourceVersion).
    k.run(&["apply", "--server-side", "-f", &cm1]);
    let cm = sim
        .get_object("configmaps", Some("default"), "ssa")
        .unwrap()
        .unwrap();
    assert_eq!(cm["data"], json!({"a": "1"}), "{cm}");
    assert!(cm["metadata"].get("labels").is_none(), "{cm}");
    let rv = sim.resource_version();
    k.run(&["apply", "--server-side", "-f", &cm1]);
    assert_eq!(
        sim.resource_version(),
        rv,
        "an unchanged apply writes nothing"
    );
    // Another manager applying a different value for a field kubectl owns: the field manager's
    // conflict, unless forced (the field then moves to it).
    let other = k.write(
        "ssa3.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  a: \"9\"\n",
    );
    let err = k.fail(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "-f",
        &other,
    ]);
    assert!(
        err.contains(r#"Apply failed with 1 conflict: conflict with "kubectl": .data.a"#),
        "{err}"
    );
    k.run(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        &other,
    ]);
    let cm = sim
        .get_object("configmaps", Some("default"), "ssa")
        .unwrap()
        .unwrap();
    assert_eq!(cm["data"], json!({"a": "9"}));
    let managers: Vec<&str> = cm["metadata"]["managedFields"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["manager"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(managers, ["other"], "kubectl's only field moved: {cm}");
    sim.shutdown();
}

/// What users run every day beyond create/apply: replace -f, set image, rollout restart,
/// label --overwrite, annotate key-, describe, get --chunk-size, delete -l, get --watch -o json.
#[test]
fn kubectl_everyday_edits() {
    if skip_without_kubectl("kubectl_everyday_edits") {
        return;
    }
    let sim = widget_sim(Duration::from_millis(300));
    let k = Kubectl::new(&sim);
    let m = k.write("m.yaml", MANIFEST);
    k.run(&["create", "-f", &m]);
    let generation =
        |k: &Kubectl| k.json(&["get", "deployment", "shop"])["metadata"]["generation"].clone();
    assert_eq!(generation(&k), 1);

    // replace -f: the whole object, a spec change bumps the generation.
    let replaced = k.write("r.yaml", &MANIFEST.replace("replicas: 1", "replicas: 3"));
    let out = k.run(&["replace", "-f", &replaced]);
    assert!(out.contains("deployment.apps/shop replaced"), "{out}");
    let d = k.json(&["get", "deployment", "shop"]);
    assert_eq!(
        (
            d["spec"]["replicas"].clone(),
            d["metadata"]["generation"].clone()
        ),
        (json!(3), json!(2))
    );

    // set image (a strategic merge patch of the container by name) and rollout restart (a
    // pod-template annotation): spec changes, one generation each.
    let name = d["spec"]["template"]["spec"]["containers"][0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let out = k.run(&[
        "set",
        "image",
        "deployment/shop",
        &format!("{name}=registry.example/app:9"),
    ]);
    assert!(out.contains("image updated"), "{out}");
    let out = k.run(&["rollout", "restart", "deployment/shop"]);
    assert!(out.contains("restarted"), "{out}");
    let d = k.json(&["get", "deployment", "shop"]);
    let template = &d["spec"]["template"];
    assert_eq!(
        template["spec"]["containers"][0]["image"],
        "registry.example/app:9"
    );
    assert!(
        template["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"].is_string(),
        "{d}"
    );
    assert_eq!(d["metadata"]["generation"], 4);

    // label without --overwrite is refused by kubectl itself; with it the value changes.
    k.run(&["label", "deployment", "shop", "tier=a"]);
    let err = k.fail(&["label", "deployment", "shop", "tier=b"]);
    assert!(err.contains("--overwrite is false"), "{err}");
    k.run(&["label", "deployment", "shop", "tier=b", "--overwrite"]);
    assert_eq!(
        k.json(&["get", "deployment", "shop"])["metadata"]["labels"]["tier"],
        "b"
    );

    // annotate key-: removing the last annotation leaves no `annotations` at all (the real
    // server never stores an empty map); for a Deployment each annotation change is a new
    // generation (its strategy counts annotations).
    k.run(&["annotate", "configmap", "settings", "note=x"]);
    k.run(&["annotate", "configmap", "settings", "note-"]);
    let cm = k.json(&["get", "configmap", "settings"]);
    assert!(cm["metadata"].get("annotations").is_none(), "{cm}");
    let before = generation(&k);
    k.run(&["annotate", "deployment", "shop", "note=x"]);
    k.run(&["annotate", "deployment", "shop", "note-"]);
    assert_eq!(generation(&k), json!(before.as_i64().unwrap() + 2));

    // describe reads the object (and events, which the sim serves empty).
    let out = k.run(&["describe", "deployment", "shop"]);
    assert!(
        out.contains("Name:") && out.contains("registry.example/app:9"),
        "{out}"
    );
    // -o wide adds the template's containers, images and the selector.
    let wide = k.run(&["get", "deployment", "shop", "-o", "wide"]);
    let header: Vec<&str> = wide
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ],
        "{wide}"
    );
    assert!(
        wide.contains("registry.example/app:9") && wide.contains("app=shop"),
        "{wide}"
    );
    // What a cluster's defaulting puts there (not an empty StrategyType).
    assert!(
        out.contains("StrategyType:           RollingUpdate"),
        "{out}"
    );
    assert!(
        out.contains("RollingUpdateStrategy:  25% max unavailable, 25% max surge"),
        "{out}"
    );

    // get --chunk-size=2: limit/continue pages, every object once.
    for i in 0..5 {
        let i = i.to_string();
        k.run(&[
            "create",
            "configmap",
            &format!("c{i}"),
            "--from-literal=k=v",
        ]);
        k.run(&[
            "label",
            "configmap",
            &format!("c{i}"),
            &format!("odd={}", i.parse::<u32>().unwrap() % 2),
        ]);
    }
    let lists = sim.requests().count("configmaps", Verb::List);
    let out = k.run(&["get", "configmaps", "--chunk-size=2", "-o", "name"]);
    let names: Vec<&str> = out.lines().collect();
    assert_eq!(names.len(), 6, "{out}");
    assert_eq!(
        sim.requests().count("configmaps", Verb::List) - lists,
        3,
        "three pages of two"
    );

    // get --watch -o json prints the object, then each change; delete -l removes by label.
    let mut watch = k
        .cmd(&[
            "get",
            "configmap",
            "c0",
            "--watch",
            "-o",
            "json",
            "--output-watch-events",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get --watch");
    let rx = line_reader(watch.stdout.take().expect("stdout"));
    wait_line(&rx, "ADDED c0", |l| is_event(l, "ADDED", "c0"));
    wait_for("kubectl never opened its watch", || {
        sim.requests().open_watches_of("configmaps") >= 1
    });
    let out = k.run(&["delete", "configmaps", "-l", "odd=0"]);
    for i in ["c0", "c2", "c4"] {
        assert!(out.contains(&format!("configmap \"{i}\" deleted")), "{out}");
    }
    wait_line(&rx, "DELETED c0", |l| is_event(l, "DELETED", "c0"));
    let _ = watch.kill();
    let _ = watch.wait();
    let left: Vec<String> = k
        .run(&["get", "configmaps", "-o", "name"])
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(left, ["configmap/c1", "configmap/c3", "configmap/settings"]);
    sim.shutdown();
}

/// label, annotate, patch (merge, json, strategic), get -o yaml|wide, scale, rollout status.
#[test]
fn kubectl_edits_and_rollout_status() {
    if skip_without_kubectl("kubectl_edits_and_rollout_status") {
        return;
    }
    let sim = widget_sim(Duration::from_millis(300));
    let k = Kubectl::new(&sim);
    let m = k.write(
        "m.yaml",
        APPLY_V1.split("---").next().expect("first document"),
    );
    k.run(&["create", "-f", &m]);
    sim.create_object(
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "settings"}, "data": {"color": "blue"}}),
    )
    .unwrap();

    // label / annotate (and the Deployment strategy: an annotation bumps generation).
    assert!(
        k.run(&["label", "configmap", "settings", "tier=gold"])
            .contains("labeled")
    );
    assert_eq!(
        k.json(&["get", "cm", "settings"])["metadata"]["labels"]["tier"],
        "gold"
    );
    k.run(&["label", "configmap", "settings", "tier-"]);
    assert!(
        k.json(&["get", "cm", "settings"])["metadata"]["labels"]
            .get("tier")
            .is_none()
    );
    let out = k.run(&["annotate", "deployment", "shop", "note=hello"]);
    assert!(out.contains("annotated"), "{out}");
    let d = k.json(&["get", "deployment", "shop"]);
    assert_eq!(d["metadata"]["annotations"]["note"], "hello");
    assert_eq!(
        d["metadata"]["generation"], 2,
        "Deployment annotations bump generation"
    );

    // patch: json and strategic (merge is in kubectl_drives_the_sim).
    k.run(&[
        "patch",
        "configmap",
        "settings",
        "--type",
        "json",
        "-p",
        r#"[{"op":"add","path":"/data/size","value":"L"},{"op":"remove","path":"/data/color"}]"#,
    ]);
    assert_eq!(
        k.json(&["get", "cm", "settings"])["data"],
        json!({"size": "L"})
    );
    k.run(&[
        "patch", "deployment", "shop", "--type", "strategic", "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"registry.example/app:9"}]}}}}"#,
    ]);
    let d = k.json(&["get", "deployment", "shop"]);
    assert_eq!(
        container_names(&d),
        ["app", "sidecar"],
        "merged by name, not replaced"
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example/app:9"
    );
    // A strategic patch of a custom kind: the real server's 415.
    sim.create_object(
        "widgets",
        Some("default"),
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}),
    )
    .unwrap();
    let err = k.fail(&[
        "patch",
        "widget",
        "w",
        "--type",
        "strategic",
        "-p",
        r#"{"spec":{"a":1}}"#,
    ]);
    assert!(
        err.contains("UnsupportedMediaType") || err.contains("unknown format"),
        "{err}"
    );

    // get -o yaml and -o wide.
    let y = k.run(&["get", "deployment", "shop", "-o", "yaml"]);
    assert!(
        y.contains("kind: Deployment") && y.contains("name: shop"),
        "{y}"
    );
    sim.create_object(
        "pods",
        Some("default"),
        json!({"metadata": {"name": "placed"}, "spec": {"nodeName": "node-7", "containers": [{"name": "c", "image": "i"}]},
               "status": {"phase": "Running", "podIP": "10.1.2.3"}}),
    )
    .unwrap();
    let wide = k.run(&["get", "pods", "-o", "wide"]);
    let header = wide.lines().next().unwrap_or("");
    assert!(header.contains("IP") && header.contains("NODE"), "{wide}");
    assert!(
        wide.lines()
            .any(|l| l.starts_with("placed") && l.contains("node-7") && l.contains("10.1.2.3")),
        "{wide}"
    );

    // scale, then rollout status: kubectl waits on a watch until the status (which the test
    // writes, as the deployment controller would) says the rollout is complete.
    assert!(
        k.run(&["scale", "deployment", "shop", "--replicas=2"])
            .contains("scaled")
    );
    let watches_before = sim.requests().count("deployments", Verb::Watch);
    let rollout = k
        .cmd(&["rollout", "status", "deployment/shop", "--timeout=20s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_for("kubectl rollout status never watched", || {
        sim.requests().count("deployments", Verb::Watch) != watches_before
    });
    let mut d = sim
        .get_object("deployments", Some("default"), "shop")
        .unwrap()
        .unwrap();
    let generation = d["metadata"]["generation"].clone();
    d["status"] = json!({"observedGeneration": generation, "replicas": 2, "updatedReplicas": 2,
                         "readyReplicas": 2, "availableReplicas": 2});
    sim.replace_status("deployments", Some("default"), "shop", d)
        .unwrap();
    let out = rollout
        .wait_with_output()
        .expect("kubectl rollout status ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("successfully rolled out"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sim.shutdown();
}

/// delete with and without --wait (a scheduled pod terminates through the kubelet stand-in),
/// wait --for=delete, api-resources and explain.
#[test]
fn kubectl_deletes_waits_and_discovery() {
    if skip_without_kubectl("kubectl_deletes_waits_and_discovery") {
        return;
    }
    let sim = widget_sim(Duration::from_millis(1500));
    let k = Kubectl::new(&sim);
    for name in ["sched-a", "sched-b"] {
        sim.create_object(
            "pods",
            Some("default"),
            json!({"metadata": {"name": name}, "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]}}),
        )
        .unwrap();
    }
    // delete (waits): the pod is marked, the kubelet stand-in removes it, kubectl sees it go.
    let started = std::time::Instant::now();
    let out = k.run(&["delete", "pod", "sched-a"]);
    assert!(out.contains("pod \"sched-a\" deleted"), "{out}");
    assert!(
        sim.get_object("pods", Some("default"), "sched-a")
            .unwrap()
            .is_none()
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "kubectl waited for the graceful termination ({:?})",
        started.elapsed()
    );
    // delete --wait=false: back at once, the pod still terminating; then wait --for=delete.
    let out = k.run(&["delete", "pod", "sched-b", "--wait=false"]);
    assert!(out.contains("deleted"), "{out}");
    let p = sim
        .get_object("pods", Some("default"), "sched-b")
        .unwrap()
        .expect("still terminating");
    assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], 30, "{p}");
    let out = k.run(&["wait", "--for=delete", "pod/sched-b", "--timeout=20s"]);
    assert!(out.contains("condition met"), "{out}");
    assert!(
        sim.get_object("pods", Some("default"), "sched-b")
            .unwrap()
            .is_none()
    );
    // --grace-period=0 --force: at once.
    sim.create_object(
        "pods",
        Some("default"),
        json!({"metadata": {"name": "sched-c"}, "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]}}),
    )
    .unwrap();
    k.run(&["delete", "pod", "sched-c", "--grace-period=0", "--force"]);
    assert!(
        sim.get_object("pods", Some("default"), "sched-c")
            .unwrap()
            .is_none()
    );

    // api-resources from discovery.
    let out = k.run(&["api-resources"]);
    let deploy = out
        .lines()
        .find(|l| l.starts_with("deployments"))
        .unwrap_or_else(|| panic!("{out}"));
    for want in ["deploy", "apps/v1", "true", "Deployment"] {
        assert!(deploy.contains(want), "{deploy}");
    }
    assert!(
        out.lines()
            .any(|l| l.starts_with("widgets") && l.contains("example.com/v1")),
        "{out}"
    );
    let names = k.run(&["api-resources", "--api-group=apps", "-o", "name"]);
    assert!(names.lines().any(|l| l == "deployments.apps"), "{names}");

    // explain, from the OpenAPI v3 schemas the sim serves.
    let out = k.run(&["explain", "deployment.spec.replicas"]);
    assert!(
        out.contains("Deployment") && out.contains("replicas") && out.contains("<integer>"),
        "{out}"
    );
    let out = k.run(&["explain", "configmap"]);
    assert!(
        out.contains("ConfigMap") && out.contains("data") && out.contains("<map[string]string>"),
        "{out}"
    );
    sim.shutdown();
}

/// The generators kubectl encodes as protobuf: `create configmap`, `create secret generic`,
/// `create deployment`.
#[test]
fn kubectl_create_generators() {
    if skip_without_kubectl("kubectl_create_generators") {
        return;
    }
    let sim = widget_sim(Duration::from_millis(300));
    let k = Kubectl::new(&sim);
    let out = k.run(&["create", "configmap", "gen", "--from-literal=a=1"]);
    assert!(out.contains("configmap/gen created"), "{out}");
    let out = k.run(&[
        "create",
        "secret",
        "generic",
        "pw",
        "--from-literal=p=s3cret",
    ]);
    assert!(out.contains("secret/pw created"), "{out}");
    let out = k.run(&[
        "create",
        "deployment",
        "web",
        "--image=registry.example/web:1",
        "--replicas=2",
    ]);
    assert!(out.contains("deployment.apps/web created"), "{out}");
    let cm = k.json(&["get", "configmap", "gen"]);
    assert_eq!(cm["data"]["a"], "1");
    let s = k.json(&["get", "secret", "pw"]);
    assert_eq!(s["data"]["p"], "czNjcmV0");
    let d = k.json(&["get", "deployment", "web"]);
    assert_eq!(
        (
            d["spec"]["replicas"].as_i64(),
            d["metadata"]["generation"].as_i64()
        ),
        (Some(2), Some(1))
    );
    // Every other generator of a served kind, each sent as protobuf and decoded.
    for args in [
        &[
            "create",
            "secret",
            "docker-registry",
            "reg",
            "--docker-server=r.example",
            "--docker-username=u",
            "--docker-password=p",
        ][..],
        &["create", "service", "clusterip", "svc-a", "--tcp=80:8080"],
        &["create", "service", "nodeport", "svc-b", "--tcp=80:8080"],
        &[
            "create",
            "service",
            "externalname",
            "svc-c",
            "--external-name=a.example",
        ],
        &["create", "serviceaccount", "robot"],
        &["create", "namespace", "team"],
    ] {
        let out = k.run(args);
        assert!(out.contains("created"), "{args:?}: {out}");
    }
    let svc = k.json(&["get", "service", "svc-b"]);
    assert_eq!(svc["spec"]["type"], "NodePort");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(svc["spec"]["externalTrafficPolicy"], "Cluster", "defaulted");
    // The registry's allocations: a cluster IP and a node port, shown by kubectl get.
    let ip = svc["spec"]["clusterIP"]
        .as_str()
        .expect("a cluster IP")
        .to_string();
    let node_port = svc["spec"]["ports"][0]["nodePort"]
        .as_i64()
        .expect("a node port");
    let table = k.run(&["get", "service", "svc-b"]);
    assert!(
        table.contains(&ip) && table.contains(&format!("80:{node_port}/TCP")),
        "{table}"
    );
    // Generators of kinds the sim does not serve fail as against a server without that API.
    let err = k.fail(&["create", "job", "j", "--image=x"]);
    assert!(
        err.contains("the server could not find the requested resource"),
        "{err}"
    );
    sim.shutdown();
}

/// The managed fields kubectl's writes leave, as on a cluster: `kubectl create deployment`'s
/// `Update` entry (every field it sent or defaulting set, `k:{"name":...}` for its container,
/// `.` where it added a map), `kubectl scale`'s `subresource: scale` entry that takes
/// `.spec.replicas`, `kubectl label`'s entry, and a server-side apply conflicting with the
/// scale manager.
#[test]
fn kubectl_writes_record_managed_fields() {
    if skip_without_kubectl("kubectl_writes_record_managed_fields") {
        return;
    }
    let sim = widget_sim(Duration::from_millis(300));
    let k = Kubectl::new(&sim);
    k.run(&["create", "deployment", "mf", "--image=nginx"]);
    let d = k.json(&["get", "deployment", "mf", "--show-managed-fields"]);
    let e = &d["metadata"]["managedFields"][0];
    assert_eq!(e["manager"], "kubectl-create", "{d}");
    assert_eq!(e["operation"], "Update");
    assert_eq!(e["apiVersion"], "apps/v1");
    assert_eq!(
        e["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:progressDeadlineSeconds": {}, "f:replicas": {}, "f:revisionHistoryLimit": {},
                "f:selector": {},
                "f:strategy": {"f:rollingUpdate": {".": {}, "f:maxSurge": {}, "f:maxUnavailable": {}}, "f:type": {}},
                "f:template": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {
                        "f:containers": {"k:{\"name\":\"nginx\"}": {".": {}, "f:image": {},
                            "f:imagePullPolicy": {}, "f:name": {}, "f:resources": {},
                            "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
                        "f:dnsPolicy": {}, "f:restartPolicy": {}, "f:schedulerName": {},
                        "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}
                    }
                }
            }
        })
    );
    k.run(&["scale", "deployment", "mf", "--replicas=3"]);
    k.run(&["label", "deployment", "mf", "tier=web"]);
    let d = k.json(&["get", "deployment", "mf", "--show-managed-fields"]);
    let entries: Vec<(String, String)> = d["metadata"]["managedFields"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or("").to_string(),
                e["subresource"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(entries.contains(&("kubectl".into(), "scale".into())), "{d}");
    assert!(
        entries.contains(&("kubectl-label".into(), String::new())),
        "{d}"
    );
    let manifest = k.write(
        "mf.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: mf\nspec:\n  replicas: 5\n  selector:\n    matchLabels:\n      app: mf\n  template:\n    metadata:\n      labels:\n        app: mf\n    spec:\n      containers:\n      - name: nginx\n        image: nginx\n",
    );
    let err = k.fail(&[
        "apply",
        "--server-side",
        "--field-manager=ops",
        "-f",
        &manifest,
    ]);
    assert!(
        err.contains(
            r#"Apply failed with 1 conflict: conflict with "kubectl" with subresource "scale" using apps/v1: .spec.replicas"#
        ),
        "{err}"
    );
    let out = k.run(&["delete", "deployment", "mf"]);
    assert!(out.contains(r#"deployment.apps "mf" deleted"#), "{out}");
}

const MISSPELT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: typo
spec:
  replica: 3
  selector:
    matchLabels: {app: typo}
  template:
    metadata:
      labels: {app: typo}
    spec:
      containers:
      - name: app
        image: nginx
";

/// `kubectl apply -f` of a manifest with a misspelt field fails as on a cluster (kubectl's
/// default `--validate=strict` sends `fieldValidation=Strict`); `--validate=false` sends
/// `Ignore`, and the field is dropped. `kubectl create` of an invalid label gets the 422.
#[test]
fn kubectl_field_validation_and_invalid_objects() {
    if skip_without_kubectl("kubectl_field_validation_and_invalid_objects") {
        return;
    }
    let sim = Sim::start_background(SimConfig::default()).expect("sim");
    let k = Kubectl::new(&sim);
    let f = k.write("typo.yaml", MISSPELT);
    let err = k.fail(&["apply", "-f", &f]);
    assert_eq!(
        err.trim(),
        format!(
            "Error from server (BadRequest): error when creating \"{f}\": Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.replica\""
        )
    );
    assert!(
        sim.get_object("deployments", Some("default"), "typo")
            .unwrap()
            .is_none()
    );
    let out = k.run(&["apply", "--validate=false", "-f", &f]);
    assert!(out.contains("deployment.apps/typo created"), "{out}");
    let d = sim
        .get_object("deployments", Some("default"), "typo")
        .unwrap()
        .unwrap();
    assert!(d["spec"].get("replica").is_none(), "{d}");
    assert_eq!(d["spec"]["replicas"], 1);
    // A 422: kubectl prints the kind and name from the Status details, then the cause.
    let cm = k.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels:\n    \"-x\": v\n",
    );
    let err = k.fail(&["create", "-f", &cm]);
    assert_eq!(
        err.trim(),
        "The ConfigMap \"c\" is invalid: metadata.labels: Invalid value: \"-x\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    );
    sim.shutdown();
}
