//! R11 over HTTP (issue 29): the informers of one factory share their API server's health, so
//! after a restart of the server every informer watches again within 2 s of its return, instead
//! of waiting out the backoff each grew while the server was down (3.2–7.6 s measured against a
//! kube-apiserver 1.34; 8.9–12 s for a second restart within two minutes). While the server is
//! down, the informers and their shared probe together send no more than client-go's informers
//! could (`ServerHealthHandle::budget`).
//!
//! Default backoffs (R8: 800 ms doubling to 30 s), three informers (pods, configmaps,
//! namespaces) on one factory, two restarts 30 s apart, each 5 s down. "Watching again": the
//! informer's watch is open and its cache is known current (R10), i.e. after the 410 that the
//! restarted watch cache answers and the relist it causes. The down time and the 30 s between
//! the restarts are the scenario's; nothing waits on a sleep for a condition.

use crate::common;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kinformer_actors::{
    InformerConfig, ReflectorPhase, SharedIndexInformer, SharedInformerFactory, Telemetry,
};
use kinformer_sim::Sim;
use kube::{Api, Client, api::PostParams};

use crate::common::{DEADLINE, eventually};

/// The bound issue 29 asks for: from the server's return until every informer watches again.
const WATCHING_AGAIN_WITHIN: Duration = Duration::from_secs(2);
const DOWN_FOR: Duration = Duration::from_secs(5);
const BETWEEN_RESTARTS: Duration = Duration::from_secs(30);

/// What the test reads of an informer, whatever its type.
trait Watched {
    fn name(&self) -> &'static str;
    fn watching_current(&self) -> bool;
    fn backing_off(&self) -> bool;
    fn watching_again_seconds(&self) -> Option<f64>;
}

struct Subject<K: kinformer_actors::InformerObject> {
    name: &'static str,
    informer: SharedIndexInformer<K>,
}

impl<K: kinformer_actors::InformerObject> Watched for Subject<K> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn watching_current(&self) -> bool {
        let h = self.informer.health();
        h.phase == ReflectorPhase::Watching && h.stale_since.is_none()
    }
    fn backing_off(&self) -> bool {
        matches!(self.informer.health().phase, ReflectorPhase::BackingOff(_))
    }
    fn watching_again_seconds(&self) -> Option<f64> {
        self.informer.health().watching_again_seconds
    }
}

async fn seed(kube: &Client) {
    common::create_pods(kube, "default", 5).await;
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), "default");
    for i in 0..5 {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": { "name": format!("cm-{i}") },
            "data": { "k": "v" },
        }))
        .expect("configmap");
        cms.create(&PostParams::default(), &cm)
            .await
            .expect("create configmap");
    }
}

/// One restart: the figures of its return.
struct Round {
    /// Per informer: from the sim accepting again until it watched again.
    watching_again: Vec<(&'static str, Duration)>,
    /// Connections the sim refused while down (every request sent then, probes included).
    requests_while_down: u64,
    /// What client-go's informers could have sent in that time: each its first request when
    /// its watch broke, then R8's retries.
    budget: u64,
}

async fn restart(
    sim: &Sim,
    factory: &SharedInformerFactory,
    subjects: &[&dyn Watched],
    round: usize,
) -> Round {
    let faults = sim.faults();
    let refused_before = faults.counters().connections_refused;
    faults.go_down();
    let down_at = Instant::now();
    eventually("every informer backs off from the outage", || {
        subjects.iter().all(|s| s.backing_off())
    })
    .await;
    // The cluster moves on meanwhile (a kube-apiserver's peers, its controllers): the restarted
    // watch cache starts past every informer's resourceVersion, so each resumed watch gets
    // 410 and relists, as after a real restart.
    sim.create_object(
        "configmaps",
        Some("default"),
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": { "name": format!("during-outage-{round}") },
        }),
    )
    .expect("write while down");
    // The scenario: the server stays down for DOWN_FOR (not a synchronisation).
    tokio::time::sleep_until((down_at + DOWN_FOR).into()).await;
    let requests_while_down = faults.counters().connections_refused - refused_before;
    faults.come_back();
    let back_at = Instant::now();
    // client-go's informers: each one's first request when its watch breaks (a re-watch, at
    // once), then each retrying on R8's shortest schedule.
    let budget = subjects.len() as u64 + factory.server_health().budget(back_at - down_at);

    // Each informer's first moment of watching again, sampled every millisecond.
    let mut watching_again: Vec<(&'static str, Option<Duration>)> =
        subjects.iter().map(|s| (s.name(), None)).collect();
    let deadline = back_at + DEADLINE;
    while watching_again.iter().any(|(_, d)| d.is_none()) {
        let now = Instant::now();
        assert!(
            now < deadline,
            "not every informer watched again within {DEADLINE:?}: {watching_again:?}; server saw {:?}, open watches {}, handle {:?}",
            sim.requests().snapshot(),
            sim.requests().open_watches(),
            factory.server_health().stats()
        );
        for (s, (_, d)) in subjects.iter().zip(watching_again.iter_mut()) {
            if d.is_none() && s.watching_current() {
                *d = Some(now - back_at);
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Round {
        watching_again: watching_again
            .into_iter()
            .map(|(n, d)| (n, d.unwrap_or_default()))
            .collect(),
        requests_while_down,
        budget,
    }
}

/// The value of `family{informer="<informer>",...}` in an OpenMetrics text.
fn metric(text: &str, family: &str, informer: &str) -> Option<f64> {
    let prefix = format!("{family}{{informer=\"{informer}\"");
    text.lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_informer_watches_again_within_2s_of_each_return() {
    let sim = common::sim().await;
    let kube = Client::try_from(sim.kube_config()).expect("client");
    seed(&kube).await;
    let telemetry = Telemetry::new();
    let factory = SharedInformerFactory::new(kube.clone()).with_telemetry(telemetry.clone());
    let pods = Subject {
        name: "pods",
        informer: factory.informer::<Pod>(),
    };
    let configmaps = Subject {
        name: "configmaps",
        informer: factory.informer::<ConfigMap>(),
    };
    let namespaces = Subject {
        name: "namespaces",
        informer: factory.informer::<Namespace>(),
    };
    let subjects: [&dyn Watched; 3] = [&pods, &configmaps, &namespaces];
    factory.start().expect("start");
    let synced = factory.wait_for_cache_sync(DEADLINE).await;
    assert!(synced.values().all(|s| *s), "{synced:?}");
    eventually("every informer watching", || {
        subjects.iter().all(|s| s.watching_current())
    })
    .await;

    let first_at = Instant::now();
    let first = restart(&sim, &factory, &subjects, 1).await;
    // The second restart 30 s after the first: within client-go's 2 minutes without a reset,
    // where its backoff starts where the first outage left it.
    tokio::time::sleep_until((first_at + BETWEEN_RESTARTS).into()).await;
    let second = restart(&sim, &factory, &subjects, 2).await;

    for (i, r) in [&first, &second].into_iter().enumerate() {
        eprintln!(
            "restart {}: watching again after {:?}; requests while down {} (budget {})",
            i + 1,
            r.watching_again,
            r.requests_while_down,
            r.budget
        );
    }
    for (i, r) in [&first, &second].into_iter().enumerate() {
        for (name, d) in &r.watching_again {
            assert!(
                *d <= WATCHING_AGAIN_WITHIN,
                "restart {}: {name} watched again {d:?} after the server's return (bound {WATCHING_AGAIN_WITHIN:?}); all: {:?}",
                i + 1,
                r.watching_again
            );
        }
        assert!(
            r.requests_while_down <= r.budget,
            "restart {}: {} requests while the server was down, more than client-go's {}",
            i + 1,
            r.requests_while_down,
            r.budget
        );
        assert!(
            r.requests_while_down > 0,
            "restart {}: nothing asked while down: the probe never ran",
            i + 1
        );
    }

    // The shared handle measured the same returns, and telemetry reports them.
    let stats = factory.server_health().stats();
    assert_eq!(stats.counters.returns, 2, "{stats:?}");
    assert_eq!(stats.watching_again_count, 2, "{stats:?}");
    assert!(
        stats
            .max_watching_again
            .is_some_and(|d| d <= WATCHING_AGAIN_WITHIN),
        "{stats:?}"
    );
    let text = telemetry.encode_metrics().expect("metrics");
    for s in subjects {
        let own = s.watching_again_seconds().expect("measured");
        assert!(
            own <= WATCHING_AGAIN_WITHIN.as_secs_f64(),
            "{}: {own}",
            s.name()
        );
        assert_eq!(
            metric(
                &text,
                "kinformer_reflector_watching_again_seconds",
                s.name()
            ),
            Some(own),
            "{}",
            s.name()
        );
        let all = metric(&text, "kinformer_server_watching_again_seconds", s.name());
        assert!(all.is_some_and(|a| a >= own), "{}: {all:?}", s.name());
    }
    factory.shutdown().await;
}

/// A factory's own backoff (`with_config`) paces its informers while the server is down, and
/// the shared budget (R11) follows that backoff, not the default one the factory started
/// with: with a 2–40 ms backoff, one informer retries tens of times in a second of outage.
/// (The budget used to keep R8's default schedule, 800 ms doubling, and held such an informer
/// to a retry or two, waiting out the shared probe instead.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_backoff_sets_the_budget_while_the_server_is_down() {
    let sim = common::sim().await;
    let kube = Client::try_from(sim.kube_config()).expect("client");
    let mut config = InformerConfig::default();
    config.backoff.initial = Duration::from_millis(2);
    config.backoff.max = Duration::from_millis(40);
    // `with_config` last: a factory rebuilt by it made its shared health before the config.
    let factory = SharedInformerFactory::new(kube.clone())
        .with_namespace("default")
        .with_config(config.clone());
    assert_eq!(factory.server_health().config().backoff, config.backoff);
    let pods = Subject {
        name: "pods",
        informer: factory.informer::<Pod>(),
    };
    factory.start().expect("start");
    eventually("watching", || pods.watching_current()).await;

    let faults = sim.faults();
    let refused_before = faults.counters().connections_refused;
    faults.go_down();
    let down_at = Instant::now();
    // The scenario: one second of outage (not a synchronisation).
    tokio::time::sleep_until((down_at + Duration::from_secs(1)).into()).await;
    let requests_while_down = faults.counters().connections_refused - refused_before;
    faults.come_back();
    let budget = 1 + factory.server_health().budget(Duration::from_secs(1));
    assert!(
        requests_while_down >= 10,
        "{requests_while_down} requests in a second of outage with a 2-40 ms backoff (budget {budget}); server {:?}",
        factory.server_health().stats()
    );
    assert!(
        requests_while_down <= budget + 1,
        "{requests_while_down} requests while down, over the budget {budget}"
    );
    // Watching again; "known current" (R10) would need a write to bookmark, and none comes.
    eventually("watching again", || {
        pods.informer.health().phase == ReflectorPhase::Watching
    })
    .await;
    factory.shutdown().await;
}
