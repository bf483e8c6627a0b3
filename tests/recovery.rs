//! Recovery after API server restarts (docs/semantics.md R9, R10), over HTTP through the real
//! informer: the sim restarts twice within a few seconds while pods change during the outages;
//! after its return the cache must be exact (equal to a direct LIST) within a deadline that the
//! backoff grown during the outage would miss, and the staleness the informer reports (health,
//! `kinformer_informer_stale_seconds`, `/readyz`) must be non-zero meanwhile and 0 after.
//!
//! Timeline (backoff 0.5 s, then 4 s, then 30 s, no jitter; `t` from the first outage):
//! the watch breaks at t≈0 (failure 1: 0.5 s), the retry at ≈0.5 s is refused (failure 2:
//! 4 s); the server is down during [0, 1 s) and [1.5 s, 2.5 s); the retry at ≈4.5 s finds it
//! back and is answered 410 (its watch cache starts at the current RV). Before R9 that 410
//! waited the grown backoff (30 s); with R9 the relist goes out within the 1 s recovery jitter.

use std::time::{Duration, Instant};

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kinformer::backoff::BackoffConfig;
use kinformer_actors::{InformerConfig, SharedIndexInformer, Telemetry, TelemetryOptions};
use kinformer_sim::Sim;
use serde_json::json;

/// From the second return of the server until the cache must be exact: the next retry (≈2 s
/// after the return, R8), the recovery jitter (< 1 s, R9) and the relist, with room for a
/// loaded machine; the grown backoff alone (30 s) is three times longer.
const RECOVERY_DEADLINE: Duration = Duration::from_secs(10);

fn config() -> InformerConfig {
    InformerConfig {
        backoff: BackoffConfig {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(30),
            factor: 8.0,
            jitter: 0.0,
            ..BackoffConfig::default()
        },
        ..InformerConfig::default()
    }
}

/// A pod change made while the server is down, straight into its storage.
fn change_during_outage(sim: &Sim, round: u32) {
    sim.create_object(
        "pods",
        Some("a"),
        json!({
            "metadata": {"name": format!("born-in-outage-{round}")},
            "spec": {"containers": [{"name": "c", "image": "img"}]},
        }),
    )
    .expect("create during the outage");
    sim.patch_object(
        "pods",
        Some("a"),
        "pod-0",
        &json!({"metadata": {"annotations": {"outage": round.to_string()}}}),
    )
    .expect("patch during the outage");
    sim.delete_object("pods", Some("a"), &format!("pod-{round}"))
        .expect("delete during the outage");
}

/// The value of `kinformer_informer_stale_seconds` in an OpenMetrics text.
fn stale_gauge(metrics: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with("kinformer_informer_stale_seconds{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no stale gauge in:\n{metrics}"))
}

/// Polls `cond` until it holds; panics when `deadline` passes.
async fn within(deadline: Duration, what: &str, mut cond: impl AsyncFnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond().await {
        assert!(
            start.elapsed() < deadline,
            "not within {deadline:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

#[actix::test]
async fn r9_r10_two_restarts_the_cache_is_exact_soon_after_the_return_and_staleness_shows() {
    let sim = sim().await;
    let client = sim.client();
    create_pods(&client, "a", 5).await;
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, config());
    let telemetry = Telemetry::with_options(TelemetryOptions {
        stale_threshold: Duration::from_millis(300),
        ..TelemetryOptions::default()
    });
    telemetry.register_informer(&informer);
    start_synced(&informer).await;
    watching(&sim).await;
    assert_eq!(informer.health().stale_since, None);
    assert!(telemetry.readiness().is_ready());

    // Restart 1: down for a second; pods change meanwhile.
    sim.faults().go_down();
    change_during_outage(&sim, 1);
    eventually("the informer notices the outage", || {
        informer.health().stale_since.is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await; // the outage itself
    let h = informer.health();
    assert!(h.stale_seconds > 0.0, "stale during the outage: {h:?}");
    assert!(
        stale_gauge(&telemetry.encode_metrics().expect("metrics")) > 0.0,
        "the gauge shows it"
    );
    let r = telemetry.readiness();
    assert!(
        !r.is_ready() && r.stale.len() == 1,
        "stale past the threshold: not ready ({r:?})"
    );
    assert!(
        informer.has_synced(),
        "has_synced keeps client-go's meaning"
    );
    sim.faults().come_back();

    // Restart 2, half a second later: down for another second, more changes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    sim.faults().go_down();
    change_during_outage(&sim, 2);
    tokio::time::sleep(Duration::from_secs(1)).await;
    sim.faults().come_back();
    let returned = Instant::now();

    let took = within(
        RECOVERY_DEADLINE,
        "the cache equals a direct LIST",
        async || cache_pods(&informer) == server_pods(&client).await,
    )
    .await;
    let h = informer.health();
    assert!(h.expired >= 1, "the return was answered 410: {h:?}");
    // One per outage at most (pinned by the core's R9 tests); on a loaded machine the first
    // retry may land after the first return and take its own quick relist.
    assert!(
        (1..=2).contains(&h.recovery_relists),
        "a quick relist per outage: {h:?}"
    );
    within(Duration::from_secs(5), "no longer stale", async || {
        informer.health().stale_since.is_none()
    })
    .await;
    assert_eq!(informer.health().stale_seconds, 0.0);
    assert_eq!(
        stale_gauge(&telemetry.encode_metrics().expect("metrics")),
        0.0
    );
    assert!(telemetry.readiness().is_ready());
    let c = sim.faults().counters();
    assert_eq!(c.outages, 2);
    assert!(
        c.connections_refused >= 1,
        "the informer was refused: {c:?}"
    );
    eprintln!(
        "exact {took:?} after the watch, {:?} after the server's return",
        returned.elapsed()
    );
}
