//! `replay` on the hand-written `fixtures/replay.jsonl` (see fixtures/README.md): the plan (seed,
//! own writes and Secrets left out, one event per version), the objects it leaves in a
//! simulated API server, the recorded pace, and the binary serving it to a client through its
//! kubeconfig, waiting by default for the fresh controller's watches.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use kinformer_sim::{Sim, SimConfig};
use kinformer_trace::replay::{Pace, Player, Recording, ReplayOptions, Skipped};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay.jsonl")
}

fn recording() -> Recording {
    Recording::open(&fixture()).expect("the fixture reads")
}

fn get(sim: &Sim, resource: &str, name: &str) -> Option<Value> {
    sim.get_object(resource, Some("demo"), name)
        .expect("get_object")
}

#[test]
fn the_plan_seeds_the_first_list_and_leaves_out_own_writes_and_secrets() {
    let plan = recording().plan(&ReplayOptions::default());
    let seed: Vec<_> = plan.seed.iter().map(|p| p.event.name.as_str()).collect();
    assert_eq!(seed, ["web"]);
    let events: Vec<_> = plan
        .events
        .iter()
        .map(|p| format!("{} {} {}", p.event.what.as_str(), p.event.name, p.event.rv))
        .collect();
    assert_eq!(
        events,
        [
            "added settings 8",
            "added scratch 9",
            "modified web 10",
            "modified settings 11",
            "modified web 12",
            "deleted scratch 13",
        ]
    );
    assert_eq!(
        plan.skipped,
        Skipped {
            own_writes: 2,
            kinds: 0,
            without_body: 2
        }
    );
    let all = recording().plan(&ReplayOptions {
        include_own_writes: true,
        kinds: vec!["deployment".into(), "ReplicaSet".into()],
    });
    let events: Vec<_> = all
        .events
        .iter()
        .map(|p| format!("{} {}", p.event.kind, p.event.rv))
        .collect();
    assert_eq!(
        events,
        [
            "ReplicaSet 6",
            "Deployment 7",
            "Deployment 10",
            "Deployment 12"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn playing_leaves_the_recorded_inputs_in_the_sim() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let plan = recording().plan(&ReplayOptions::default());
    let player = Player::new(&sim).await.expect("player");
    let seeded = player.seed(&plan);
    assert_eq!((seeded.created, seeded.failed.len()), (1, 0), "{seeded:?}");
    let mut statuses = Vec::new();
    let report = player
        .play_with(&plan, Pace::Fast, |event, _| {
            if event.kind == "Deployment" {
                let web = get(&sim, "deployments.apps", "web").expect("web");
                statuses.push(web["status"]["replicas"].clone());
            }
        })
        .await;
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(
        (report.created, report.changed, report.deleted),
        (2, 3, 1),
        "{report}"
    );
    // The scale (rv 10) carries the status of the left-out own write (1) but did not change
    // it: the seeded status (0) stays until another writer's status (rv 12) is played.
    assert_eq!(statuses, [json!(0), json!(3)]);

    let web = get(&sim, "deployments.apps", "web").expect("web");
    assert_eq!(web["spec"]["replicas"], 3, "the user's scale is played");
    // The own status write (rv 7) was left out; the other writer's (rv 12) is played.
    assert_eq!(web["status"], json!({"replicas": 3, "readyReplicas": 3}));
    assert_ne!(
        web["metadata"]["uid"], "rec-web",
        "the sim assigns its own uid"
    );
    assert!(get(&sim, "replicasets.apps", "web-5d4f8").is_none());
    let settings = get(&sim, "configmaps", "settings").expect("settings");
    assert_eq!(settings["data"], json!({"a": "2"}));
    assert_eq!(
        settings["metadata"]["ownerReferences"][0]["uid"], web["metadata"]["uid"],
        "the owner reference points at the sim's web"
    );
    assert!(get(&sim, "configmaps", "scratch").is_none());
    assert!(
        get(&sim, "secrets", "token").is_none(),
        "Secrets have no body"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorded_pace_keeps_the_recorded_gaps_between_events() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let plan = recording().plan(&ReplayOptions::default());
    let player = Player::new(&sim).await.expect("player");
    player.seed(&plan);
    let first_t = plan.events.first().expect("events").event.t;
    let started = tokio::time::Instant::now();
    let mut offsets = Vec::new();
    player
        .play_with(&plan, Pace::Recorded { speed: 2.0 }, |event, _| {
            offsets.push((event.t - first_t, started.elapsed()));
        })
        .await;
    assert_eq!(offsets.len(), plan.events.len());
    for (recorded, played) in &offsets {
        // At --speed 2 each event is played no earlier than half its recorded offset.
        let due = Duration::from_nanos(*recorded / 2);
        assert!(
            *played >= due,
            "played at {played:?}, due at {due:?}: {offsets:?}"
        );
    }
    let span = Duration::from_nanos(offsets.last().expect("played").0 / 2);
    assert!(
        span >= Duration::from_millis(100),
        "the fixture's gaps are long enough to see"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_writes_are_played_when_asked() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let plan = recording().plan(&ReplayOptions {
        include_own_writes: true,
        ..ReplayOptions::default()
    });
    let player = Player::new(&sim).await.expect("player");
    player.seed(&plan);
    let mut statuses = Vec::new();
    let report = player
        .play_with(&plan, Pace::Fast, |event, _| {
            if event.kind == "Deployment" {
                let web = get(&sim, "deployments.apps", "web").expect("web");
                statuses.push(web["status"]["replicas"].clone());
            }
        })
        .await;
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(statuses, [json!(1), json!(1), json!(3)]);
    let rs = get(&sim, "replicasets.apps", "web-5d4f8").expect("the ReplicaSet is played");
    let web = get(&sim, "deployments.apps", "web").expect("web");
    assert_eq!(
        rs["metadata"]["ownerReferences"][0]["uid"],
        web["metadata"]["uid"]
    );
    sim.shutdown().await;
}

/// Kills the child when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_the_replayed_objects_through_its_kubeconfig() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Running(
        Command::new(env!("CARGO_BIN_EXE_kinformer-trace"))
            .arg("replay")
            .arg(fixture())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--pace", "recorded", "--speed", "10", "--verbose"])
            // No controller here: play at once.
            .args(["--wait-for-watches", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn kinformer-trace"),
    );
    let stdout = child.0.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    loop {
        let line = rx
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("no `serving until Ctrl-C` line; got {lines:#?}"));
        let done = line == "serving until Ctrl-C";
        lines.push(line);
        if done {
            break;
        }
    }
    assert!(
        lines[0].starts_with("serving http://127.0.0.1:"),
        "{lines:#?}"
    );
    assert_eq!(lines[1], format!("kubeconfig {}", kubeconfig.display()));
    assert!(
        lines.iter().any(|l| l.starts_with("seeded 1 objects")
            && l.ends_with("(left out: 2 own writes, 0 of other kinds, 2 without body)")),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("modified Deployment demo/web (recorded rv 10): changed")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("played 6 events")
            && l.ends_with("(2 created, 3 changed, 1 deleted, 0 unchanged, 0 failed)")),
        "{lines:#?}"
    );

    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("the kubeconfig reads"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("a config");
    let client = kube::Client::try_from(config).expect("client");
    let deployments: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        client,
        "demo",
        &kube::api::ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            plural: "deployments".into(),
        },
    );
    let web = deployments.get("web").await.expect("web is served");
    assert_eq!(web.data["spec"]["replicas"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_waits_for_watches_before_playing_and_exits_after_play() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Running(
        Command::new(env!("CARGO_BIN_EXE_kinformer-trace"))
            .arg("replay")
            .arg(fixture())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--wait-for-watches", "1", "--exit-after-play"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn kinformer-trace"),
    );
    let stdout = child.0.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = |lines: &mut Vec<String>| {
        let line = rx
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("no more output; got {lines:#?}"));
        lines.push(line.clone());
        line
    };
    let mut lines = Vec::new();
    while !next(&mut lines).starts_with("waiting for 1 open watches") {}
    // Nothing is played before a watch is open: the scale (rv 10) is not in the sim yet.
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("the kubeconfig reads"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("a config");
    let client = kube::Client::try_from(config).expect("client");
    let maps: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        client,
        "demo",
        &kube::api::ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        },
    );
    assert!(
        maps.get_opt("settings").await.expect("get").is_none(),
        "played before a watch was open"
    );
    let watch = maps
        .watch(&kube::api::WatchParams::default(), "0")
        .await
        .expect("a watch");
    while !next(&mut lines).starts_with("played 6 events") {}
    drop(watch);
    let deadline = std::time::Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "no exit after play");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}; {lines:#?}");
}

/// `kinformer-trace replay FILE --pace recorded --kubeconfig K`, as the README writes it: it
/// prints the command that starts the fresh controller, waits for a watch per recorded kind
/// (4 in the fixture: ConfigMap, Deployment, ReplicaSet, Secret) and only then plays, at the
/// recorded gaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_command_waits_for_the_fresh_controller_then_plays_at_the_recorded_pace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Running(
        Command::new(env!("CARGO_BIN_EXE_kinformer-trace"))
            .arg("replay")
            .arg(fixture())
            .args(["--pace", "recorded", "--kubeconfig"])
            .arg(&kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn kinformer-trace"),
    );
    let stdout = child.0.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = |lines: &mut Vec<String>| {
        let line = rx
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("no more output; got {lines:#?}"));
        lines.push(line.clone());
        line
    };
    let mut lines = Vec::new();
    loop {
        let line = next(&mut lines);
        assert!(
            !line.starts_with("played"),
            "played before the fresh controller could connect: {lines:#?}"
        );
        if line.starts_with("waiting for ") {
            break;
        }
    }
    assert!(
        lines.last().expect("a line").starts_with(
            "waiting for 4 open watches (one per recorded kind: ConfigMap, Deployment, ReplicaSet, Secret"
        ),
        "{lines:#?}"
    );
    let command = format!(
        "  KUBECONFIG={} cargo run -p deployment-controller -- --leader-elect=false",
        kubeconfig.display()
    );
    assert!(lines.contains(&command), "{lines:#?}");

    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("the kubeconfig reads"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("a config");
    let client = kube::Client::try_from(config).expect("client");
    let maps: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        client,
        "demo",
        &kube::api::ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        },
    );
    // Three watches are not enough: nothing played yet.
    let mut watches = Vec::new();
    for _ in 0..3 {
        watches.push(
            maps.watch(&kube::api::WatchParams::default(), "0")
                .await
                .expect("a watch"),
        );
    }
    assert!(
        maps.get_opt("settings").await.expect("get").is_none(),
        "played before the fourth watch was open"
    );
    watches.push(
        maps.watch(&kube::api::WatchParams::default(), "0")
            .await
            .expect("a watch"),
    );
    let opened = std::time::Instant::now();
    while !next(&mut lines).starts_with("played 6 events") {}
    // The fixture's played events span 300 ms (t 1.2 s to 1.5 s; the own writes before are
    // left out).
    assert!(
        opened.elapsed() >= Duration::from_millis(300),
        "played in {:?}, faster than recorded: {lines:#?}",
        opened.elapsed()
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("playing 6 events at the recorded gaps")),
        "{lines:#?}"
    );
    drop(watches);
}

#[test]
fn a_trace_without_bodies_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.jsonl");
    std::fs::write(
        &path,
        "{\"type\":\"header\",\"format\":\"kinformer-trace\",\"v\":1,\"t\":1,\"bodies\":false}\n",
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_kinformer-trace"))
        .arg("replay")
        .arg(&path)
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("recorded without bodies"), "{err}");
    // The flag to record with, not the library's field set to false.
    assert!(err.contains("--trace-bodies"), "{err}");
    assert!(!err.contains("bodies = false"), "{err}");
}
