//! The long-run memory check (issue 9): an informer with a few handlers runs under seeded churn
//! with periodic relists (the sim expires watches, compacts, drops watches) for a long time,
//! while this test samples the process's resident memory (`VmRSS`) and thread count (`Threads`)
//! from `/proc/self/status`. It asserts that memory is flat (the end is within 20% of the level
//! after warm-up) and that the thread count does not grow, then that the cache still equals the
//! server once churn stops.
//!
//! It is `#[ignore]`d (it runs for 30 minutes by default). Run it by its name, so that no other
//! test shares the process it measures:
//!
//! ```text
//! KINFORMER_SOAK_SECS=1800 cargo test -p kinformer-actors --test it -- --ignored --nocapture soak::soak_memory_is_flat
//! ```
//!
//! `KINFORMER_SOAK_SECS` is the churn duration in seconds (default 1800, at least 60). The
//! simulated API server runs in the same process, so its memory is counted too: compaction keeps
//! its watch cache bounded. Linux only (it reads `/proc`).

use std::time::{Duration, Instant};

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kinformer_actors::{ListenerConfig, OverflowPolicy, SharedIndexInformer};
use kinformer_sim::{ChurnConfig, ChurnKind};

/// One sample of `/proc/self/status`.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    rss_kb: u64,
    threads: u64,
}

fn sample(start: Instant) -> Sample {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} in /proc/self/status"))
    };
    Sample {
        at: start.elapsed(),
        rss_kb: field("VmRSS:"),
        threads: field("Threads:"),
    }
}

fn soak_secs() -> u64 {
    std::env::var("KINFORMER_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1800)
        .max(60)
}

#[actix::test]
#[ignore = "long-running (30 min by default); see the file's docs"]
async fn soak_memory_is_flat() {
    let total = Duration::from_secs(soak_secs());
    // Warm-up: the caches, the allocator's arenas and the connection pool reach their level.
    let warm_up = (total / 5).clamp(Duration::from_secs(30), Duration::from_secs(300));
    let sample_every = Duration::from_secs(5);
    let fault_every = Duration::from_secs(15);

    let sim = sim().await;
    let client = sim.client();
    let mut config = fast_config();
    config.resync = Some(Duration::from_secs(30));
    let informer = SharedIndexInformer::<Pod>::with_config(client.clone(), None, config);
    let views: Vec<View> = (0..3).map(|_| View::default()).collect();
    let policies = [
        OverflowPolicy::Coalesce,
        OverflowPolicy::Block,
        OverflowPolicy::Unbounded,
    ];
    for (view, policy) in views.iter().zip(policies) {
        let cfg = ListenerConfig {
            policy,
            name: Some(format!("soak-{policy:?}")),
            ..ListenerConfig::default()
        };
        informer
            .add_event_handler_with(view.handler(), cfg)
            .await
            .expect("handler");
    }
    start_synced(&informer).await;

    let churn = sim.start_churn(ChurnConfig {
        rate_per_sec: 200.0,
        namespaces: vec!["soak-a".into(), "soak-b".into(), "soak-c".into()],
        kinds: vec![ChurnKind::Pods, ChurnKind::ConfigMaps],
        seed: 9,
        max_objects: 300,
    });

    let start = Instant::now();
    let mut samples = vec![sample(start)];
    let mut next_sample = start + sample_every;
    let mut next_fault = start + fault_every;
    let mut faults = 0u64;
    while start.elapsed() < total {
        let now = Instant::now();
        if now >= next_fault {
            // Periodic relists: a 410 on the open watch, a compaction (the resumed watch is too
            // old: relist), or a dropped watch (resumed from the last RV).
            match faults % 3 {
                0 => sim.faults().expire_watches(),
                1 => {
                    sim.faults().compact();
                    sim.faults().drop_watches();
                }
                _ => sim.faults().drop_watches(),
            }
            faults += 1;
            next_fault += fault_every;
        }
        if now >= next_sample {
            let s = sample(start);
            if samples.len() % 12 == 0 {
                println!(
                    "soak t={:>5}s rss={} KiB threads={} cached={} churn={:?}",
                    s.at.as_secs(),
                    s.rss_kb,
                    s.threads,
                    informer.lister().len(),
                    churn.counts()
                );
            }
            samples.push(s);
            next_sample += sample_every;
        }
        // Pacing only, not synchronisation: the loop waits for the next sample or fault time.
        let until = next_sample.min(next_fault);
        tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
    }
    churn.stop();
    let end = sample(start);
    samples.push(end);

    // Convergence after churn stops, so the run did work and the informer is still healthy.
    // The churn finishes its operation in progress: wait for it, then compare with the server
    // as it is now (re-read on every try).
    sim.faults().clear();
    eventually("the churn stopped", || !churn.is_running()).await;
    let deadline = Instant::now() + DEADLINE;
    let server = loop {
        let server = server_pods(&client).await;
        if cache_pods(&informer) == server {
            break server;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: cache equals the server after the soak"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for view in &views {
        let v = view.clone();
        eventually("every handler's view equals the server", || {
            v.snapshot() == server
        })
        .await;
    }

    let first = samples[0];
    let warm: Vec<Sample> = samples
        .iter()
        .copied()
        .filter(|s| s.at <= warm_up)
        .collect();
    let warm_rss = warm.iter().map(|s| s.rss_kb).max().unwrap_or(first.rss_kb);
    let warm_threads = warm
        .iter()
        .map(|s| s.threads)
        .max()
        .unwrap_or(first.threads);
    let last_quarter: Vec<Sample> = samples
        .iter()
        .copied()
        .filter(|s| s.at >= total * 3 / 4)
        .collect();
    let late_threads = last_quarter.iter().map(|s| s.threads).max().unwrap_or(0);
    let peak_rss = samples.iter().map(|s| s.rss_kb).max().unwrap_or(0);
    let health = informer.health();
    println!(
        "soak done: {}s, {} faults, churn {:?}, restarts {}, lists {}, watches {}, events {}",
        total.as_secs(),
        faults,
        churn.counts(),
        health.restarts,
        health.lists,
        health.watches,
        health.events
    );
    println!(
        "soak rss KiB: start {} warm {} end {} peak {}; threads: start {} warm {} late {} end {}",
        first.rss_kb,
        warm_rss,
        end.rss_kb,
        peak_rss,
        first.threads,
        warm_threads,
        late_threads,
        end.threads
    );
    for v in &views {
        assert!(
            v.anomalies().is_empty(),
            "handler anomalies: {:?}",
            v.anomalies()
        );
    }
    assert!(
        health.lists >= 2,
        "periodic relists happened (lists {})",
        health.lists
    );
    assert!(
        end.rss_kb * 100 <= warm_rss * 120,
        "resident memory grew: {} KiB after warm-up, {} KiB at the end",
        warm_rss,
        end.rss_kb
    );
    assert!(
        late_threads <= warm_threads,
        "threads grew: {warm_threads} after warm-up, {late_threads} late in the run"
    );
    let report = informer.shutdown().await;
    println!("soak shutdown: {report:?}");
}
