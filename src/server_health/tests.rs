//! R11 on a fake clock: the shared machine alone, then together with reflector machines
//! against a scripted server that goes down, returns and flaps.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::reflector::{
    ErrorKind, ListPage, ReflectorConfig, ReflectorMachine, Request, RequestError, Versioned,
};

const MS: Duration = Duration::from_millis(1);

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

#[test]
fn r11_a_success_after_outage_failures_announces_one_return() {
    let t = Instant::now();
    let mut h = ServerHealth::new(ServerHealthConfig::default(), 2);
    h.handle_success(t);
    assert_eq!(h.poll_event(), None, "no return without an outage");
    h.handle_failure(t);
    h.handle_failure(t + secs(1.0));
    assert!(h.is_down());
    h.handle_success(t + secs(3.0));
    assert_eq!(
        h.poll_event(),
        Some(ServerHealthEvent::Returned {
            epoch: 1,
            at: t + secs(3.0),
            down_for: secs(3.0),
        })
    );
    h.handle_success(t + secs(3.1));
    assert_eq!(h.poll_event(), None, "one announcement per return");
    assert_eq!(h.counters().returns, 1);
}

#[test]
fn r11_budget_is_client_gos_shortest_schedule_times_the_loops() {
    let h = ServerHealth::new(ServerHealthConfig::default(), 3);
    // R8 without jitter: retries at 0.8, 2.4, 5.6, 12, 24.8, 50.4, 80.4 s.
    for (elapsed, retries) in [
        (0.7, 0),
        (0.8, 1),
        (2.3, 1),
        (2.4, 2),
        (5.6, 3),
        (12.0, 4),
        (24.8, 5),
        (50.4, 6),
        (80.3, 6),
        (80.4, 7),
    ] {
        assert_eq!(h.budget(secs(elapsed)), 3 * retries, "at {elapsed} s");
    }
}

#[test]
fn r11_probes_are_spaced_and_never_exceed_the_budget() {
    for loops in [1, 3, 8] {
        let t0 = Instant::now();
        let mut h = ServerHealth::new(ServerHealthConfig::default(), loops);
        h.handle_failure(t0);
        let mut last: Option<Instant> = None;
        let mut probes = 0;
        let mut longest = Duration::ZERO;
        for step in 0..(120_000 / 10) {
            let now = t0 + 10 * MS * step;
            if h.poll_probe(now) {
                probes += 1;
                if let Some(l) = last {
                    assert!(now - l >= Duration::from_millis(500), "spaced");
                    longest = longest.max(now - l);
                }
                last = Some(now);
                h.handle_probe_result(now, false);
            }
            assert!(
                probes <= h.budget(now - t0),
                "loops {loops}: {probes} probes by {:?}",
                now - t0
            );
        }
        // Paced, not hoarded: never blind for longer than the longest step (30 s) shared by
        // the loops, or `probe_interval`.
        let most = Duration::from_millis(500).max(secs(30.0 / loops as f64)) + 10 * MS;
        assert!(
            longest <= most,
            "loops {loops}: {longest:?} without a probe"
        );
        assert!(probes > 0);
    }
}

#[test]
fn r11_a_return_that_holds_forgets_flaps_and_starts_a_fresh_budget() {
    let t = Instant::now();
    let mut h = ServerHealth::new(ServerHealthConfig::default(), 1);
    h.handle_failure(t);
    h.handle_success(t + secs(1.0));
    assert!(h.poll_event().is_some());
    // A flap: the next return waits the flap backoff (800 ms).
    h.handle_failure(t + secs(1.1));
    h.handle_success(t + secs(1.2));
    assert_eq!(h.poll_event(), None, "held back");
    assert_eq!(h.poll_timeout(), Some(t + secs(1.9)));
    h.handle_timeout(t + secs(1.9));
    assert!(matches!(
        h.poll_event(),
        Some(ServerHealthEvent::Returned { epoch: 2, .. })
    ));
    // It holds for `stable_after`: the next outage is announced at once, with a fresh budget.
    h.handle_timeout(t + secs(11.9));
    let t2 = t + secs(30.0);
    h.handle_failure(t2);
    assert!(h.retry_allowed(t2 + secs(0.8), t2), "a fresh budget");
    h.handle_success(t2 + secs(0.5));
    assert!(matches!(
        h.poll_event(),
        Some(ServerHealthEvent::Returned { epoch: 3, .. })
    ));
}

#[test]
fn r11_a_probe_that_found_the_server_down_stands_for_a_loops_retry() {
    let t = Instant::now();
    let mut h = ServerHealth::new(ServerHealthConfig::default(), 2);
    h.handle_failure(t);
    assert!(h.retry_allowed(t + secs(0.8), t), "within the budget");
    assert!(h.poll_probe(t + secs(0.8)));
    h.handle_probe_result(t + secs(0.85), false);
    assert!(!h.retry_allowed(t + secs(0.9), t), "the probe did it");
    assert!(
        h.retry_allowed(t + secs(2.4), t + secs(0.9)),
        "a later failure of its own, with budget left"
    );
    h.handle_success(t + secs(3.0));
    assert!(h.retry_allowed(t + secs(3.0), t + secs(0.9)), "up again");
}

proptest! {
    /// Whatever the server does, two announcements separated by k flaps (without a stable
    /// return between) are at least R8's k-th delay apart (800 ms doubling to 30 s).
    #[test]
    fn r11_returns_of_a_flapping_server_back_off(
        steps in proptest::collection::vec((0u64..3000, prop::bool::ANY), 1..300),
    ) {
        let t0 = Instant::now();
        let mut h = ServerHealth::new(ServerHealthConfig::default(), 4);
        let mut now = t0;
        let mut last_return: Option<Instant> = None;
        let mut flaps_since = 0u32;
        // Checks every announcement against the flaps since the previous one.
        let mut check = |h: &mut ServerHealth, flaps_since: &mut u32| -> Result<(), TestCaseError> {
            while let Some(ServerHealthEvent::Returned { at, .. }) = h.poll_event() {
                if let Some(last) = last_return && *flaps_since > 0 {
                    let need = Duration::from_millis(800)
                        .mul_f64(2f64.powi(*flaps_since as i32 - 1))
                        .min(Duration::from_secs(30));
                    prop_assert!(at - last >= need, "{:?} after {} flaps", at - last, flaps_since);
                }
                last_return = Some(at);
                *flaps_since = 0;
            }
            if matches!(h.state, State::Up { returned: None }) {
                // Stable: flaps are forgotten.
                *flaps_since = 0;
                last_return = None;
            }
            Ok(())
        };
        for (gap_ms, ok) in steps {
            now += MS * gap_ms as u32;
            h.handle_timeout(now);
            check(&mut h, &mut flaps_since)?;
            let before = h.counters().flaps;
            if ok { h.handle_success(now) } else { h.handle_failure(now) }
            if h.counters().flaps > before {
                flaps_since += 1;
            }
            check(&mut h, &mut flaps_since)?;
        }
    }
}

// ---- the shared machine with reflector machines, against a scripted server ---------------

#[derive(Debug)]
struct Obj;
impl Versioned for Obj {
    fn resource_version(&self) -> Option<&str> {
        Some("1")
    }
}

struct Fleet {
    health: ServerHealth,
    machines: Vec<ReflectorMachine<Obj>>,
    last_failure: Vec<Instant>,
    /// Requests (LIST or WATCH, probes included) that reached a server that was down.
    requests_while_down: Vec<Instant>,
    requests: u64,
}

impl Fleet {
    fn new(loops: usize, t0: Instant) -> Self {
        let machines = (0..loops)
            .map(|i| {
                ReflectorMachine::new(
                    ReflectorConfig::default(),
                    BackoffConfig::default(),
                    i as u64,
                )
            })
            .collect();
        Fleet {
            health: ServerHealth::new(ServerHealthConfig::default(), loops),
            machines,
            last_failure: vec![t0; loops],
            requests_while_down: Vec::new(),
            requests: 0,
        }
    }

    fn announce(&mut self, now: Instant) {
        while let Some(ServerHealthEvent::Returned { .. }) = self.health.poll_event() {
            for m in &mut self.machines {
                m.handle_server_back(now);
            }
        }
    }

    /// One tick of 10 ms: the probe, then every machine, as the actors drive them.
    fn tick(&mut self, now: Instant, up: bool) {
        self.health.handle_timeout(now);
        self.announce(now);
        if self.health.poll_probe(now) {
            self.requests += 1;
            if !up {
                self.requests_while_down.push(now);
            }
            self.health.handle_probe_result(now, up);
            self.announce(now);
        }
        for i in 0..self.machines.len() {
            let m = &mut self.machines[i];
            if m.is_watching() && !up {
                // The server's restart cuts the watch.
                m.handle_watch_error(now, RequestError::new(ErrorKind::Transport, "reset"));
                self.health.handle_failure(now);
                self.last_failure[i] = now;
            }
            let m = &mut self.machines[i];
            if m.backing_off_after_outage()
                && m.poll_timeout().is_some_and(|t| t <= now)
                && !self.health.retry_allowed(now, self.last_failure[i])
            {
                m.handle_server_down(now);
                self.last_failure[i] = now;
                continue;
            }
            let Some(req) = m.poll_request(now) else {
                continue;
            };
            self.health.handle_request(now);
            self.requests += 1;
            if !up {
                self.requests_while_down.push(now);
                let e = RequestError::new(ErrorKind::Transport, "refused");
                match req {
                    Request::List(_) => m.handle_list_error(now, e),
                    Request::Watch(_) => m.handle_watch_error(now, e),
                }
                self.health.handle_failure(now);
                self.last_failure[i] = now;
            } else {
                match req {
                    Request::List(_) => m.handle_list_page(
                        now,
                        ListPage {
                            items: vec![Obj],
                            resource_version: "1".into(),
                            continue_token: None,
                        },
                    ),
                    Request::Watch(_) => m.handle_watch_opened(now),
                }
                self.health.handle_success(now);
            }
            while m.poll_output().is_some() {}
            while m.poll_event().is_some() {}
            self.announce(now);
        }
    }

    fn all_watching(&self) -> bool {
        self.machines.iter().all(|m| m.is_watching())
    }
}

/// Runs `fleet` from `t0` for `until`, the server up when `up(elapsed)`; returns, for every
/// return of the server (a down→up edge), how long until every machine watched again.
fn run(
    fleet: &mut Fleet,
    t0: Instant,
    until: Duration,
    up: impl Fn(Duration) -> bool,
) -> Vec<Duration> {
    let mut lags = Vec::new();
    let mut returned: Option<Duration> = None;
    let mut was_up = true;
    let mut step = Duration::ZERO;
    while step < until {
        let u = up(step);
        if u && !was_up {
            returned = Some(step);
        }
        was_up = u;
        fleet.tick(t0 + step, u);
        if let Some(r) = returned
            && fleet.all_watching()
        {
            lags.push(step - r);
            returned = None;
        }
        step += 10 * MS;
    }
    lags
}

/// client-go's requests while down: `loops` reflectors retrying on R8's shortest schedule
/// from the start of each outage (`outages`: their lengths).
fn client_go_bound(loops: usize, outages: &[Duration]) -> u64 {
    let h = ServerHealth::new(ServerHealthConfig::default(), loops);
    outages.iter().map(|d| h.budget(*d)).sum()
}

#[test]
fn r11_after_a_return_every_loop_watches_within_two_seconds_and_the_outage_stays_in_budget() {
    // (loops, outage length, longest wait allowed from the return until every loop watches).
    // The backoff grows past several seconds in each. A return is noticed by the next probe,
    // and probes are paced to client-go's budget: one per R8 step divided by the loops; with
    // 3 loops 8 s into an outage that is 6.4 s / 3, so only there the bound is looser.
    for (loops, down, max_lag) in [
        (3, 8.0, 2.5),
        (4, 8.0, 2.0),
        (6, 8.0, 2.0),
        (6, 12.0, 2.0),
        (8, 12.0, 2.0),
        (10, 20.0, 2.0),
        (20, 30.0, 2.0),
    ] {
        let t0 = Instant::now();
        let mut fleet = Fleet::new(loops, t0);
        let down = secs(down);
        // Two restarts, the second 30 s after the first return, each down for `down`.
        let first = secs(5.0);
        let second = first + down + secs(30.0);
        let outages = [(first, first + down), (second, second + down)];
        let lags = run(&mut fleet, t0, second + down + secs(10.0), |t| {
            !outages.iter().any(|(a, b)| t >= *a && t < *b)
        });
        let bound = client_go_bound(loops, &[down, down]);
        let while_down = fleet.requests_while_down.len() as u64;
        let what = format!(
            "loops {loops}, down {down:?}: lags {lags:?}, {while_down} requests while down, client-go's shortest schedule {bound}"
        );
        assert_eq!(lags.len(), 2, "{what}");
        assert!(lags.iter().all(|l| *l < secs(max_lag)), "{what}");
        assert!(while_down <= bound, "{what}");
    }
}

#[test]
fn r11_a_flapping_server_keeps_the_fleet_backing_off() {
    // Table: up for `up_ms` out of every `period_ms`, for ten minutes after a first outage.
    for (period_ms, up_ms) in [
        (2_000u64, 600u64),
        (1_000, 150),
        (5_000, 1_000),
        (30_000, 3_000),
        (700, 70),
    ] {
        let loops = 4;
        let t0 = Instant::now();
        let mut fleet = Fleet::new(loops, t0);
        let start = secs(5.0);
        let horizon = secs(605.0);
        run(&mut fleet, t0, horizon, |t| {
            t < start || ((t - start).as_millis() as u64 % period_ms) >= period_ms - up_ms
        });
        // Within client-go's budget while down, plus one request per loop per announced
        // return; announcements back off to one per 30 s (R11).
        let returns = fleet.health.counters().returns;
        assert!(
            returns <= 600 / 30 + 8,
            "period {period_ms}: {returns} returns announced"
        );
        // The first LIST and WATCH of each loop, before the flapping, count too.
        let bound = client_go_bound(loops, &[horizon - start]) + (returns + 2) * loops as u64;
        assert!(
            fleet.requests <= bound,
            "period {period_ms}: {} requests, bound {bound}",
            fleet.requests
        );
        // Far from a hot loop: under one request per loop every 5 s.
        assert!(
            fleet.requests < 600 / 5 * loops as u64,
            "period {period_ms}: {} requests",
            fleet.requests
        );
    }
}
