//! Deterministic tests of the reflector machine: every rule with a fake clock, plus a scripted
//! server and a property test of the "every loop backs off" invariant.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

/// A decoded object: its name and resourceVersion ("" = none).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Obj {
    name: &'static str,
    rv: &'static str,
}

impl Versioned for Obj {
    fn resource_version(&self) -> Option<&str> {
        (!self.rv.is_empty()).then_some(self.rv)
    }
}

fn obj(name: &'static str, rv: &'static str) -> Obj {
    Obj { name, rv }
}

fn no_jitter() -> BackoffConfig {
    BackoffConfig {
        jitter: 0.0,
        ..BackoffConfig::default()
    }
}

fn machine(config: ReflectorConfig) -> ReflectorMachine<Obj> {
    ReflectorMachine::new(config, no_jitter(), 1)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn list_req(r: Option<Request>) -> ListRequest {
    match r {
        Some(Request::List(l)) => l,
        other => panic!("expected a LIST, got {other:?}"),
    }
}

fn watch_req(r: Option<Request>) -> WatchRequest {
    match r {
        Some(Request::Watch(w)) => w,
        other => panic!("expected a WATCH, got {other:?}"),
    }
}

fn page(items: Vec<Obj>, rv: &str, cont: Option<&str>) -> ListPage<Obj> {
    ListPage {
        items,
        resource_version: rv.to_string(),
        continue_token: cont.map(str::to_string),
    }
}

fn outputs(m: &mut ReflectorMachine<Obj>) -> Vec<FifoCommand<Obj>> {
    std::iter::from_fn(|| m.poll_output()).collect()
}

fn events(m: &mut ReflectorMachine<Obj>) -> Vec<ReflectorEvent> {
    std::iter::from_fn(|| m.poll_event()).collect()
}

fn failures(m: &mut ReflectorMachine<Obj>) -> Vec<(FailureCause, Duration)> {
    events(m)
        .into_iter()
        .filter_map(|e| match e {
            ReflectorEvent::Failed { cause, delay, .. } => Some((cause, delay)),
            _ => None,
        })
        .collect()
}

/// Lists `items` at `rv` and opens the watch that follows; returns the watch request.
fn synced(m: &mut ReflectorMachine<Obj>, t: Instant, rv: &str) -> WatchRequest {
    list_req(m.poll_request(t));
    m.handle_list_page(t, page(vec![obj("a", "1")], rv, None));
    let w = watch_req(m.poll_request(t));
    m.handle_watch_opened(t);
    outputs(m);
    events(m);
    w
}

fn err(kind: ErrorKind) -> RequestError {
    RequestError::new(kind, "boom")
}

// ---- R1 / R2 ----------------------------------------------------------------------------

#[test]
fn r1_first_list_reads_the_watch_cache_unpaged() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig::default());
    let l = list_req(m.poll_request(t));
    assert_eq!(l.resource_version.as_deref(), Some("0"));
    assert_eq!(
        l.limit, None,
        "RV=0 is served whole; a limit would make it consistent"
    );
    assert_eq!(l.version_match, None);
    assert_eq!(m.phase(), Phase::Listing);
    // nothing else goes out while the LIST is in flight
    assert_eq!(m.poll_request(t), None);
}

#[test]
fn r1_consistent_list_is_paged_and_replaced_once_after_the_last_page() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig {
        initial_list: InitialList::Consistent,
        page_size: Some(2),
        ..Default::default()
    });
    let l = list_req(m.poll_request(t));
    assert_eq!(l.resource_version, None);
    assert_eq!(l.limit, Some(2));
    m.handle_list_page(t, page(vec![obj("a", "1"), obj("b", "2")], "9", Some("c1")));
    assert!(
        outputs(&mut m).is_empty(),
        "no Replace before the last page"
    );
    let l2 = list_req(m.poll_request(t));
    assert_eq!(l2.continue_token.as_deref(), Some("c1"));
    assert_eq!(l2.limit, Some(2));
    m.handle_list_page(t, page(vec![obj("c", "3")], "9", None));
    match outputs(&mut m).as_slice() {
        [
            FifoCommand::Replace {
                items,
                resource_version,
            },
        ] => {
            assert_eq!(items.len(), 3);
            assert_eq!(resource_version, "9");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m.counters().lists, 2);
}

#[test]
fn r1_an_expired_continue_token_restarts_the_list_at_once_unpaged() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig {
        initial_list: InitialList::Consistent,
        page_size: Some(1),
        ..Default::default()
    });
    list_req(m.poll_request(t));
    m.handle_list_page(t, page(vec![obj("a", "1")], "9", Some("c1")));
    list_req(m.poll_request(t));
    m.handle_list_error(t, err(ErrorKind::Gone));
    let l = list_req(m.poll_request(t));
    assert_eq!(l.limit, None, "restarted unpaged");
    assert_eq!(l.continue_token, None);
    assert!(
        failures(&mut m).is_empty(),
        "no backoff for an expired token"
    );
    m.handle_list_page(t, page(vec![obj("a", "1"), obj("b", "2")], "12", None));
    match outputs(&mut m).as_slice() {
        [FifoCommand::Replace { items, .. }] => assert_eq!(items.len(), 2, "page 1 not kept"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn r2_watch_follows_the_list_rv_with_bookmarks_and_a_random_timeout() {
    let t = Instant::now();
    let mut seen = std::collections::HashSet::new();
    for seed in 0..20 {
        let mut m = ReflectorMachine::<Obj>::new(ReflectorConfig::default(), no_jitter(), seed);
        list_req(m.poll_request(t));
        m.handle_list_page(t, page(vec![], "42", None));
        let w = watch_req(m.poll_request(t));
        assert_eq!(w.resource_version, "42");
        assert!(w.allow_bookmarks);
        assert!(!w.send_initial_events);
        assert!(
            (145..290).contains(&w.timeout_seconds),
            "{}",
            w.timeout_seconds
        );
        seen.insert(w.timeout_seconds);
    }
    assert!(seen.len() > 5, "timeouts are randomised: {seen:?}");
}

#[test]
fn r1_a_relist_resumes_from_the_last_rv_not_older_than() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig::default());
    synced(&mut m, t, "10");
    m.handle_watch_events(t, vec![WatchEvent::Modified(obj("a", "15"))]);
    // a transient failure of the list path: the next LIST resumes from RV 15
    m.handle_watch_error(t, err(ErrorKind::Server { code: 500 }));
    let t2 = t + ms(800);
    let w = watch_req(m.poll_request(t2));
    assert_eq!(
        w.resource_version, "15",
        "S1: a failed watch resumes, no relist"
    );
    assert_eq!(m.relist_resource_version(), "15");
}

#[test]
fn r3_a_resource_version_too_large_relists_the_latest_state_after_the_backoff() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig::default());
    synced(&mut m, t, "10");
    m.handle_watch_events(t, vec![WatchEvent::Modified(obj("a", "15"))]);
    m.handle_watch_ended(t + ms(2000));
    // The watch re-opens at 15 on a server that is behind (504 ResourceVersionTooLarge).
    let w = watch_req(m.poll_request(t + ms(2000)));
    assert_eq!(w.resource_version, "15");
    let too_large = RequestError::from_status(
        504,
        None,
        "Timeout: Too large resource version: 15, current: 12",
    );
    assert_eq!(too_large.kind, ErrorKind::TooLargeResourceVersion);
    m.handle_watch_error(t + ms(2000), too_large.clone());
    assert_eq!(failures(&mut m).len(), 1, "R8: backs off");
    let l = list_req(m.poll_request(t + ms(2800)));
    assert_eq!(
        l.resource_version, None,
        "resuming from an RV the server has not reached would fail again: read the latest"
    );
    // The same on a LIST at an RV from the future.
    m.handle_list_error(t + ms(2800), too_large);
    assert_eq!(failures(&mut m).len(), 1);
    let l = list_req(m.poll_request(t + ms(10_000)));
    assert_eq!(l.resource_version, None);
    m.handle_list_page(t + ms(10_000), page(vec![], "12", None));
    assert_eq!(m.relist_resource_version(), "12");
}

// ---- R3 ---------------------------------------------------------------------------------

#[test]
fn r3_events_are_handed_over_in_one_group_and_move_the_rv() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig::default());
    synced(&mut m, t, "10");
    m.handle_watch_events(
        t,
        vec![
            WatchEvent::Added(obj("b", "11")),
            WatchEvent::Bookmark {
                resource_version: "12".into(),
                initial_events_end: false,
            },
            WatchEvent::Modified(obj("b", "13")),
            WatchEvent::Deleted(obj("a", "14")),
        ],
    );
    match outputs(&mut m).as_slice() {
        [
            FifoCommand::Events {
                events,
                resource_version,
            },
        ] => {
            let kinds: Vec<EventKind> = events.iter().map(|(k, _)| *k).collect();
            assert_eq!(
                kinds,
                [EventKind::Add, EventKind::Update, EventKind::Delete]
            );
            assert_eq!(resource_version.as_deref(), Some("14"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m.last_sync_resource_version(), "14");
    assert_eq!(m.counters().events, 3);
    let c = m.counters();
    assert_eq!((c.added, c.modified, c.deleted), (1, 1, 1));
    assert_eq!(m.counters().bookmarks, 1);
}

#[test]
fn r3_bookmarks_alone_only_move_the_rv() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig::default());
    synced(&mut m, t, "10");
    m.handle_watch_events(
        t,
        vec![WatchEvent::Bookmark {
            resource_version: "20".into(),
            initial_events_end: false,
        }],
    );
    match outputs(&mut m).as_slice() {
        [FifoCommand::Bookmark { resource_version }] => assert_eq!(resource_version, "20"),
        other => panic!("{other:?}"),
    }
    assert_eq!(m.last_sync_resource_version(), "20");
}

#[test]
fn r3_r8_a_410_relists_the_latest_state_after_the_backoff() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig::default());
    synced(&mut m, t, "10");
    // an ERROR event inside the stream, after an event of the same group
    m.handle_watch_events(
        t,
        vec![
            WatchEvent::Added(obj("b", "11")),
            WatchEvent::Error(err(ErrorKind::Gone)),
        ],
    );
    assert_eq!(outputs(&mut m).len(), 1, "events before the error are kept");
    assert!(!m.is_watching(), "the driver drops the stream");
    assert_eq!(
        failures(&mut m),
        [(FailureCause::Expired, ms(800))],
        "R8: a 410 relist backs off too"
    );
    assert_eq!(m.poll_request(t + ms(799)), None);
    let l = list_req(m.poll_request(t + ms(800)));
    assert_eq!(l.resource_version, None, "410: the latest consistent state");
    assert_eq!(m.counters().expired, 1);
    m.handle_list_page(t + ms(800), page(vec![], "30", None));
    assert_eq!(m.relist_resource_version(), "30");
}

// ---- R4 ---------------------------------------------------------------------------------

#[test]
fn r4_a_watch_that_ends_normally_is_reopened_at_once_from_the_last_rv() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig::default());
    synced(&mut m, t, "10");
    m.handle_watch_events(t, vec![WatchEvent::Modified(obj("a", "11"))]);
    m.handle_watch_ended(t + ms(200));
    let w = watch_req(m.poll_request(t + ms(200)));
    assert_eq!(w.resource_version, "11");
    assert!(failures(&mut m).is_empty());
    // a long, empty watch that ends at its timeout is normal too
    m.handle_watch_opened(t + ms(200));
    m.handle_watch_ended(t + Duration::from_secs(150));
    watch_req(m.poll_request(t + Duration::from_secs(150)));
}

#[test]
fn r4_a_very_short_watch_is_a_failure_and_backs_off() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig::default());
    synced(&mut m, t, "10");
    let mut now = t;
    let mut delays = Vec::new();
    for _ in 0..6 {
        m.handle_watch_ended(now + ms(5));
        let f = failures(&mut m);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].0, FailureCause::VeryShortWatch);
        delays.push(f[0].1.as_millis() as u64);
        now += ms(5);
        assert_eq!(m.poll_request(now), None, "no request during the backoff");
        now += f[0].1;
        let w = watch_req(m.poll_request(now));
        assert_eq!(w.resource_version, "10");
        m.handle_watch_opened(now);
    }
    assert_eq!(delays, [800, 1600, 3200, 6400, 12800, 25600]);
    assert_eq!(m.counters().very_short_watches, 6);
}

#[test]
fn r4_a_short_watch_with_events_or_an_empty_one_over_a_second_is_normal() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig::default());
    synced(&mut m, t, "10");
    m.handle_watch_events(
        t,
        vec![WatchEvent::Bookmark {
            resource_version: "11".into(),
            initial_events_end: false,
        }],
    );
    m.handle_watch_ended(t + ms(10));
    watch_req(m.poll_request(t + ms(10)));
    m.handle_watch_opened(t + ms(10));
    m.handle_watch_ended(t + ms(1010));
    watch_req(m.poll_request(t + ms(1010)));
    assert!(failures(&mut m).is_empty());
}

#[test]
fn r4_the_idle_timer_restarts_with_every_event_bookmark_and_delivery() {
    let t = Instant::now();
    let idle = Duration::from_secs(10);
    let mut m = machine(ReflectorConfig {
        idle_timeout: idle,
        ..Default::default()
    });
    synced(&mut m, t, "10");
    assert_eq!(
        m.poll_timeout(),
        Some(t + idle),
        "a silent watch is noticed after idle"
    );
    // busy watch: an event every 5 s for a minute never trips the timer
    let mut now = t;
    for i in 0..12 {
        now += Duration::from_secs(5);
        m.handle_timeout(now); // a spurious wake-up is harmless
        assert!(m.is_watching(), "busy watch dropped at step {i}");
        if i % 2 == 0 {
            m.handle_watch_events(now, vec![WatchEvent::Modified(obj("a", "11"))]);
        } else {
            m.handle_watch_events(
                now,
                vec![WatchEvent::Bookmark {
                    resource_version: "12".into(),
                    initial_events_end: false,
                }],
            );
        }
        assert_eq!(m.poll_timeout(), Some(now + idle));
    }
    // B4: time spent waiting on the FIFO is not silence
    m.handle_delivered(now + Duration::from_secs(8));
    m.handle_timeout(now + idle);
    assert!(m.is_watching());
    let quiet = now + Duration::from_secs(8) + idle;
    m.handle_timeout(quiet);
    assert!(!m.is_watching(), "idle watch dropped");
    assert_eq!(failures(&mut m), [(FailureCause::Idle, ms(800))]);
    assert_eq!(m.counters().stalls, 1);
    let w = watch_req(m.poll_request(quiet + ms(800)));
    assert_eq!(w.resource_version, "12");
}

#[test]
fn r4_objects_without_a_resource_version_are_delivered_like_any_other() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig::default());
    synced(&mut m, t, "10");
    m.handle_watch_events(
        t,
        vec![
            WatchEvent::Added(obj("x", "")),
            WatchEvent::Deleted(obj("x", "")),
        ],
    );
    match outputs(&mut m).as_slice() {
        [
            FifoCommand::Events {
                events,
                resource_version,
            },
        ] => {
            assert_eq!(events.len(), 2, "both delivered");
            assert_eq!(*resource_version, None);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m.last_sync_resource_version(), "10", "the RV does not move");
    // listed objects without RV too
    let mut m = machine(ReflectorConfig::default());
    list_req(m.poll_request(t));
    m.handle_list_page(t, page(vec![obj("x", ""), obj("y", "")], "5", None));
    match outputs(&mut m).as_slice() {
        [FifoCommand::Replace { items, .. }] => assert_eq!(items.len(), 2),
        other => panic!("{other:?}"),
    }
}

// ---- R7 ---------------------------------------------------------------------------------

fn watch_list_machine() -> ReflectorMachine<Obj> {
    machine(ReflectorConfig {
        watch_list: true,
        watch_list_timeout: Duration::from_secs(30),
        ..Default::default()
    })
}

fn end_bookmark(rv: &str) -> WatchEvent<Obj> {
    WatchEvent::Bookmark {
        resource_version: rv.into(),
        initial_events_end: true,
    }
}

#[test]
fn r7_watch_list_initial_events_become_the_list() {
    let t = Instant::now();
    let mut m = watch_list_machine();
    let w = watch_req(m.poll_request(t));
    assert!(w.send_initial_events);
    assert_eq!(w.resource_version, "", "latest state");
    m.handle_watch_opened(t);
    assert_eq!(m.phase(), Phase::Listing);
    m.handle_watch_events(t, vec![WatchEvent::Added(obj("a", "3"))]);
    assert!(
        outputs(&mut m).is_empty(),
        "initial events wait for the end bookmark"
    );
    m.handle_watch_events(
        t,
        vec![
            WatchEvent::Added(obj("b", "4")),
            end_bookmark("7"),
            WatchEvent::Modified(obj("a", "8")),
        ],
    );
    match outputs(&mut m).as_slice() {
        [
            FifoCommand::Replace {
                items,
                resource_version,
            },
            FifoCommand::Events { events, .. },
        ] => {
            assert_eq!(items.len(), 2);
            assert_eq!(resource_version, "7");
            assert_eq!(
                events.len(),
                1,
                "the event after the bookmark is a watch event"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m.phase(), Phase::Watching);
    assert_eq!(m.last_sync_resource_version(), "8");
    assert!(m.is_watching(), "the same watch goes on");
}

#[test]
fn r7_watch_list_rejected_falls_back_to_list_for_good() {
    let t = Instant::now();
    let mut m = watch_list_machine();
    watch_req(m.poll_request(t));
    m.handle_watch_error(t, err(ErrorKind::Rejected { code: 422 }));
    let l = list_req(m.poll_request(t));
    assert_eq!(l.resource_version.as_deref(), Some("0"));
    assert!(events(&mut m).contains(&ReflectorEvent::WatchListFallback(
        FallbackReason::Rejected(422)
    )));
    assert!(
        failures(&mut m).is_empty(),
        "no backoff: listing makes progress"
    );
    m.handle_list_page(t, page(vec![], "5", None));
    let w = watch_req(m.poll_request(t));
    assert!(!w.send_initial_events);
    // a later 410 relists with LIST, not with watch-list
    m.handle_watch_opened(t);
    m.handle_watch_error(t, err(ErrorKind::Gone));
    list_req(m.poll_request(t + ms(800)));
    assert_eq!(m.counters().watch_list_fallbacks, 1);
}

#[test]
fn r7_watch_list_ignored_is_detected_three_ways() {
    let t = Instant::now();
    type Script = fn(&mut ReflectorMachine<Obj>, Instant) -> Instant;
    let cases: [(&str, Script); 3] = [
        ("unannotated bookmark", |m, t| {
            m.handle_watch_events(
                t,
                vec![
                    WatchEvent::Added(obj("a", "3")),
                    WatchEvent::Bookmark {
                        resource_version: "5".into(),
                        initial_events_end: false,
                    },
                ],
            );
            t
        }),
        ("deadline", |m, t| {
            m.handle_watch_events(t, vec![WatchEvent::Added(obj("a", "3"))]);
            let late = t + Duration::from_secs(30);
            assert_eq!(m.poll_timeout(), Some(late));
            m.handle_timeout(late);
            late
        }),
        ("ended first", |m, t| {
            m.handle_watch_events(t, vec![WatchEvent::Added(obj("a", "3"))]);
            m.handle_watch_ended(t + Duration::from_secs(2));
            t + Duration::from_secs(2)
        }),
    ];
    for (name, script) in cases {
        let mut m = watch_list_machine();
        watch_req(m.poll_request(t));
        m.handle_watch_opened(t);
        let now = script(&mut m, t);
        assert!(!m.is_watching(), "{name}: the watch is abandoned");
        assert!(
            outputs(&mut m).is_empty(),
            "{name}: partial initial events are dropped"
        );
        list_req(m.poll_request(now));
        m.handle_list_page(now, page(vec![obj("a", "3")], "6", None));
        assert_eq!(outputs(&mut m).len(), 1, "{name}: synced by LIST");
        let w = watch_req(m.poll_request(now));
        assert!(!w.send_initial_events, "{name}: fallback is for good");
        assert!(!m.uses_watch_list());
    }
}

#[test]
fn r7_a_transient_watch_list_failure_lists_this_cycle_only() {
    let t = Instant::now();
    let mut m = watch_list_machine();
    watch_req(m.poll_request(t));
    m.handle_watch_error(t, err(ErrorKind::Server { code: 503 }));
    assert_eq!(failures(&mut m).len(), 1, "backs off first");
    let now = t + ms(800);
    list_req(m.poll_request(now));
    m.handle_list_page(now, page(vec![], "9", None));
    watch_req(m.poll_request(now));
    m.handle_watch_opened(now);
    m.handle_watch_error(now, err(ErrorKind::Gone));
    let w = watch_req(m.poll_request(now + ms(1600)));
    assert!(
        w.send_initial_events,
        "watch-list tried again on the next relist"
    );
}

#[test]
fn r7_a_watch_list_answered_by_a_too_large_error_event_lists_the_latest_state() {
    // kube-apiserver's cacher answers a watch-list whose resourceVersion it does not reach in
    // time with a 200 watch whose only event is an ERROR carrying the 504
    // ResourceVersionTooLarge Status; kube hands it over as an error event.
    let t = Instant::now();
    let mut m = watch_list_machine();
    let w = watch_req(m.poll_request(t));
    assert!(w.send_initial_events);
    m.handle_watch_opened(t);
    let too_large = RequestError::from_status(
        504,
        None,
        "Timeout: Too large resource version: 20, current: 12",
    );
    assert_eq!(too_large.kind, ErrorKind::TooLargeResourceVersion);
    m.handle_watch_error(t, too_large);
    assert_eq!(failures(&mut m).len(), 1, "R8: backs off");
    let l = list_req(m.poll_request(t + ms(800)));
    assert_eq!(
        l.resource_version, None,
        "the fallback LIST reads the latest state"
    );
    m.handle_list_page(t + ms(800), page(vec![], "12", None));
    watch_req(m.poll_request(t + ms(800)));
    m.handle_watch_opened(t + ms(800));
    m.handle_watch_error(t + ms(800), err(ErrorKind::Gone));
    let w = watch_req(m.poll_request(t + ms(5000)));
    assert!(
        w.send_initial_events,
        "a failed cycle is not a rejection: watch-list is tried again"
    );
}

// ---- R8 ---------------------------------------------------------------------------------

#[test]
fn r8_one_backoff_for_every_failure_path() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig::default());
    let mut now = t;
    // list error → watch error → idle → very short → 410: one growing backoff
    list_req(m.poll_request(now));
    m.handle_list_error(now, err(ErrorKind::Transport));
    let mut delays = vec![];
    let mut step = |m: &mut ReflectorMachine<Obj>, now: &mut Instant| {
        let f = failures(m);
        assert_eq!(f.len(), 1);
        delays.push(f[0].1.as_millis() as u64);
        *now += f[0].1;
    };
    step(&mut m, &mut now);
    list_req(m.poll_request(now));
    m.handle_list_page(now, page(vec![], "5", None));
    watch_req(m.poll_request(now));
    m.handle_watch_error(now, err(ErrorKind::Server { code: 500 }));
    step(&mut m, &mut now);
    watch_req(m.poll_request(now));
    m.handle_watch_opened(now);
    now += m.config().idle_timeout;
    m.handle_timeout(now);
    step(&mut m, &mut now);
    watch_req(m.poll_request(now));
    m.handle_watch_opened(now);
    m.handle_watch_ended(now);
    step(&mut m, &mut now);
    watch_req(m.poll_request(now));
    m.handle_watch_error(now, err(ErrorKind::Gone));
    step(&mut m, &mut now);
    list_req(m.poll_request(now));
    assert_eq!(delays, [800, 1600, 3200, 6400, 12800]);
    assert_eq!(m.counters().failures, 5);
}

#[test]
fn r8_a_429_waits_at_least_its_retry_after() {
    let t = Instant::now();
    let table = [
        (Some(Duration::from_secs(5)), Duration::from_secs(5), 1),
        (Some(ms(100)), ms(800), 0),
        (None, ms(800), 0),
    ];
    for (retry_after, expected, honoured) in table {
        let mut m = machine(ReflectorConfig::default());
        list_req(m.poll_request(t));
        m.handle_list_error(t, RequestError::from_status(429, retry_after, "slow down"));
        let evs = events(&mut m);
        let delay = evs
            .iter()
            .find_map(|e| match e {
                ReflectorEvent::Failed { delay, .. } => Some(*delay),
                _ => None,
            })
            .expect("a failure");
        assert_eq!(delay, expected, "{retry_after:?}");
        assert_eq!(m.counters().retry_after_waits, honoured);
        assert_eq!(m.poll_request(t + expected - ms(1)), None);
        list_req(m.poll_request(t + expected));
    }
}

#[test]
fn r8_the_backoff_resets_after_two_quiet_minutes() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig::default());
    synced(&mut m, t, "10");
    m.handle_watch_error(t, err(ErrorKind::Transport));
    m.handle_watch_opened(t); // ignored: not opening
    watch_req(m.poll_request(t + ms(800)));
    m.handle_watch_error(t + ms(800), err(ErrorKind::Transport));
    assert_eq!(failures(&mut m)[1].1, ms(1600));
    let later = t + Duration::from_secs(200);
    watch_req(m.poll_request(later));
    m.handle_watch_error(later, err(ErrorKind::Transport));
    assert_eq!(failures(&mut m), [(FailureCause::Watch, ms(800))]);
}

#[test]
fn from_status_classifies_codes() {
    use ErrorKind::*;
    assert_eq!(RequestError::from_status(410, None, "").kind, Gone);
    assert_eq!(
        RequestError::from_status(429, Some(ms(1)), "").kind,
        TooManyRequests {
            retry_after: Some(ms(1))
        }
    );
    assert_eq!(
        RequestError::from_status(422, None, "").kind,
        Rejected { code: 422 }
    );
    assert_eq!(
        RequestError::from_status(503, None, "").kind,
        Server { code: 503 }
    );
}

// ---- a scripted server: "every loop that talks to a server backs off" -------------------

/// How the scripted server answers one request.
#[derive(Clone, Debug)]
enum Answer {
    ListOk,
    WatchEndsAtOnce,
    WatchEventsThenEnds,
    WatchSilent,
    Gone,
    TooMany(u64),
    ServerError,
    Rejected,
}

fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        Just(Answer::ListOk),
        Just(Answer::WatchEndsAtOnce),
        Just(Answer::WatchEventsThenEnds),
        Just(Answer::WatchSilent),
        Just(Answer::Gone),
        (0u64..5).prop_map(Answer::TooMany),
        Just(Answer::ServerError),
        Just(Answer::Rejected),
    ]
}

/// Runs the machine against a server that answers with `script` in a loop, on a fake clock,
/// for `horizon`; returns the request times.
fn run(
    config: ReflectorConfig,
    script: &[Answer],
    horizon: Duration,
    seed: u64,
) -> (Vec<Instant>, ReflectorMachine<Obj>, Instant) {
    run_with(config, |i| script[i % script.len()].clone(), horizon, seed)
}

/// Like [`run`], the `i`-th request answered with `script(i)`.
fn run_with(
    config: ReflectorConfig,
    mut script: impl FnMut(usize) -> Answer,
    horizon: Duration,
    seed: u64,
) -> (Vec<Instant>, ReflectorMachine<Obj>, Instant) {
    let t0 = Instant::now();
    let mut now = t0;
    let mut m = ReflectorMachine::<Obj>::new(config, BackoffConfig::default(), seed);
    let mut sent = Vec::new();
    let mut i = 0usize;
    let mut last_rv = 100u64;
    while now < t0 + horizon {
        while m.poll_output().is_some() {}
        while m.poll_event().is_some() {}
        let Some(req) = m.poll_request(now) else {
            let next = m
                .poll_timeout()
                .expect("a machine with nothing to do must have a timer");
            assert!(next >= now, "timer in the past");
            now = next.max(now);
            m.handle_timeout(now);
            continue;
        };
        sent.push(now);
        let a = script(i);
        i += 1;
        now += ms(1); // the server answers within a millisecond
        match (req, a) {
            (
                Request::List(_),
                Answer::ListOk
                | Answer::WatchEndsAtOnce
                | Answer::WatchEventsThenEnds
                | Answer::WatchSilent,
            ) => {
                last_rv += 1;
                m.handle_list_page(now, page(vec![obj("a", "1")], &last_rv.to_string(), None))
            }
            (Request::List(_), Answer::Gone) => m.handle_list_error(now, err(ErrorKind::Gone)),
            (Request::List(_), Answer::TooMany(s)) => m.handle_list_error(
                now,
                RequestError::from_status(429, Some(Duration::from_secs(s)), "busy"),
            ),
            (Request::List(_), Answer::ServerError) => {
                m.handle_list_error(now, RequestError::from_status(500, None, "x"))
            }
            (Request::List(_), Answer::Rejected) => {
                m.handle_list_error(now, RequestError::from_status(403, None, "x"))
            }
            (Request::Watch(_), Answer::ListOk | Answer::WatchEndsAtOnce) => {
                m.handle_watch_opened(now);
                m.handle_watch_ended(now);
            }
            (Request::Watch(_), Answer::WatchEventsThenEnds) => {
                m.handle_watch_opened(now);
                m.handle_watch_events(now, vec![WatchEvent::Modified(obj("a", "2"))]);
                m.handle_watch_ended(now + ms(2));
                now += ms(2);
            }
            (Request::Watch(_), Answer::WatchSilent) => {
                m.handle_watch_opened(now);
            }
            (Request::Watch(_), Answer::Gone) => m.handle_watch_error(now, err(ErrorKind::Gone)),
            (Request::Watch(_), Answer::TooMany(s)) => m.handle_watch_error(
                now,
                RequestError::from_status(429, Some(Duration::from_secs(s)), "busy"),
            ),
            (Request::Watch(_), Answer::ServerError) => {
                m.handle_watch_error(now, RequestError::from_status(503, None, "x"))
            }
            (Request::Watch(_), Answer::Rejected) => {
                m.handle_watch_error(now, RequestError::from_status(422, None, "x"))
            }
        }
    }
    (sent, m, now)
}

#[test]
fn r4_r8_a_server_that_ends_every_watch_at_once_gets_a_bounded_request_rate() {
    // the measured bug: ~830 WATCH requests a second. With backoff: a handful a minute.
    let (sent, m, _) = run(
        ReflectorConfig::default(),
        &[Answer::ListOk, Answer::WatchEndsAtOnce],
        Duration::from_secs(60),
        3,
    );
    assert!(sent.len() <= 10, "{} requests in 60 s", sent.len());
    assert!(m.counters().very_short_watches >= 5);
}

#[test]
fn r3_r8_a_server_that_answers_410_to_every_watch_relists_with_backoff() {
    // the measured bug: ~21 LIST+WATCH cycles a second.
    let (sent, m, _) = run(
        ReflectorConfig::default(),
        &[Answer::ListOk, Answer::Gone],
        Duration::from_secs(60),
        4,
    );
    assert!(sent.len() <= 16, "{} requests in 60 s", sent.len());
    assert!(m.counters().lists >= 4 && m.counters().expired >= 4);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the server does, (1) the machine always has either a request or a timer
    /// (never stuck), (2) after any failure no request goes out before the announced retry
    /// time, and (3) no 10-second window sees more than a bounded number of requests unless
    /// the server made progress (delivered events) in it.
    #[test]
    fn r8_every_loop_backs_off_whatever_the_server_does(
        script in proptest::collection::vec(answer(), 1..12),
        seed in 0u64..1000,
        watch_list in any::<bool>(),
    ) {
        let config = ReflectorConfig { watch_list, ..ReflectorConfig::default() };
        let progress = script.iter().any(|a| matches!(a, Answer::WatchEventsThenEnds));
        let (sent, m, _) = run(config, &script, Duration::from_secs(120), seed);
        if !progress {
            // without progress every cycle fails: at most ~2 requests per backoff step, and
            // the backoff reaches 30 s quickly.
            prop_assert!(sent.len() <= 40, "{} requests in 120 s: {:?}", sent.len(), m.counters());
        }
        for w in sent.windows(2) {
            prop_assert!(w[1] >= w[0]);
        }
    }
}

// ---- R9 / R10: recovery after an outage, staleness ----------------------------------------

/// An outage: the open watch (if any) breaks, then reopens fail with transport errors, `n`
/// failures in all, each retried when its backoff ends; returns the time after the last failure's backoff and the delays seen.
fn outage(m: &mut ReflectorMachine<Obj>, mut now: Instant, n: usize) -> (Instant, Vec<Duration>) {
    let mut delays = Vec::new();
    for _ in 0..n {
        if !m.is_watching() {
            // The open watch breaks first; then every reopen fails.
            watch_req(m.poll_request(now));
        }
        m.handle_watch_error(now, err(ErrorKind::Transport));
        let f = failures(m);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].0, FailureCause::Watch);
        delays.push(f[0].1);
        now += f[0].1;
    }
    (now, delays)
}

/// The restarted server's answer to a watch from our old RV: `200`, then one ERROR 410 event
/// (kube-apiserver's cacher), or an HTTP 410.
fn restarted_server_expires(m: &mut ReflectorMachine<Obj>, now: Instant, as_event: bool) {
    watch_req(m.poll_request(now));
    if as_event {
        m.handle_watch_opened(now);
        m.handle_watch_events(now, vec![WatchEvent::Error(err(ErrorKind::Gone))]);
    } else {
        m.handle_watch_error(now, err(ErrorKind::Gone));
    }
}

#[test]
fn r9_after_an_outage_the_410_relists_within_the_recovery_jitter_not_the_grown_backoff() {
    for as_event in [true, false] {
        let t = Instant::now();
        let mut m =
            ReflectorMachine::<Obj>::new(ReflectorConfig::default(), BackoffConfig::default(), 11);
        synced(&mut m, t, "10");
        let (now, delays) = outage(&mut m, t, 7);
        assert!(
            delays[6] >= Duration::from_secs(30),
            "the outage grew the backoff: {delays:?}"
        );
        restarted_server_expires(&mut m, now, as_event);
        let f = failures(&mut m);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].0, FailureCause::Expired);
        assert!(
            f[0].1 < Duration::from_secs(1),
            "{as_event}: recovery relist after {:?}",
            f[0].1
        );
        assert_eq!(m.counters().recovery_relists, 1);
        let l = list_req(m.poll_request(now + f[0].1));
        assert_eq!(l.resource_version, None, "R3: the latest state");
        // A failure of the relist itself backs off from where the outage left the backoff.
        let now = now + f[0].1;
        m.handle_list_error(now, err(ErrorKind::Rejected { code: 403 }));
        let f = failures(&mut m);
        assert!(f[0].1 >= Duration::from_secs(30), "{f:?}");
        assert_eq!(m.counters().recovery_relists, 1);
    }
}

#[test]
fn r9_a_410_without_an_outage_before_it_backs_off_as_before() {
    // A 410 after a 429 or after a very short watch: the server was up all along.
    let t = Instant::now();
    let mut m = machine(ReflectorConfig::default());
    synced(&mut m, t, "10");
    let (now, _) = outage(&mut m, t, 3); // 800, 1600, 3200
    watch_req(m.poll_request(now));
    m.handle_watch_error(now, RequestError::from_status(429, None, "busy"));
    assert_eq!(failures(&mut m)[0].1, ms(6400));
    let now = now + ms(6400);
    restarted_server_expires(&mut m, now, true);
    assert_eq!(failures(&mut m), [(FailureCause::Expired, ms(12800))]);
    assert_eq!(m.counters().recovery_relists, 0);
}

#[test]
fn r9_a_fleet_spreads_its_recovery_relists() {
    let mut delays: Vec<Duration> = (0..32u64)
        .map(|seed| {
            let t = Instant::now();
            let mut m = ReflectorMachine::<Obj>::new(
                ReflectorConfig::default(),
                BackoffConfig::default(),
                seed,
            );
            synced(&mut m, t, "10");
            let (now, _) = outage(&mut m, t, 6);
            restarted_server_expires(&mut m, now, true);
            let f = failures(&mut m);
            assert_eq!(f[0].0, FailureCause::Expired);
            f[0].1
        })
        .collect();
    assert!(
        delays.iter().all(|d| *d < Duration::from_secs(1)),
        "{delays:?}"
    );
    delays.sort();
    delays.dedup();
    assert!(delays.len() >= 30, "distinct delays: {}", delays.len());
    let spread = delays[delays.len() - 1] - delays[0];
    assert!(spread >= ms(700), "relists spread over {spread:?}");
}

#[test]
fn r9_r8_a_server_that_answers_410_to_every_watch_after_an_outage_is_not_hammered() {
    // Five failed requests (the outage), then the server lists fine and answers every watch
    // with 410: one quick relist, then the backoff as before the change.
    let script = |i: usize| {
        if i < 5 {
            Answer::ServerError
        } else if i % 2 == 1 {
            Answer::ListOk
        } else {
            Answer::Gone
        }
    };
    let (sent, m, _) = run_with(
        ReflectorConfig::default(),
        script,
        Duration::from_secs(120),
        5,
    );
    assert_eq!(m.counters().recovery_relists, 1, "{:?}", m.counters());
    assert!(m.counters().expired >= 3);
    // After the quick relist every cycle waits at least the initial backoff.
    let after_recovery: Vec<_> = sent.iter().skip(8).collect();
    for w in after_recovery.windows(3) {
        assert!(*w[2] - *w[0] >= ms(800), "{:?}", w);
    }
    assert!(sent.len() <= 24, "{} requests in 120 s", sent.len());
}

#[test]
fn r10_the_cache_is_stale_from_the_first_failure_until_known_current_again() {
    let t = Instant::now();
    let mut m = machine(ReflectorConfig::default());
    assert_eq!(m.stale_since(), None);
    synced(&mut m, t, "10");
    assert_eq!(m.stale_since(), None, "a watch opened from a complete list");
    let (now, _) = outage(&mut m, t + ms(5), 2);
    assert_eq!(m.stale_since(), Some(t + ms(5)), "since the first failure");
    // A resumed watch that opens proves nothing yet (the restarted server's 410 comes on an
    // open watch); an event or a bookmark does.
    watch_req(m.poll_request(now));
    m.handle_watch_opened(now);
    assert_eq!(m.stale_since(), Some(t + ms(5)));
    m.handle_watch_events(
        now,
        vec![WatchEvent::Bookmark {
            resource_version: "12".into(),
            initial_events_end: false,
        }],
    );
    assert_eq!(m.stale_since(), None, "a bookmark: current again");

    // A 410: stale through the relist until the watch from the list's RV opens.
    let now = now + ms(10);
    m.handle_watch_events(now, vec![WatchEvent::Error(err(ErrorKind::Gone))]);
    assert_eq!(m.stale_since(), Some(now));
    let later = now + Duration::from_secs(5);
    list_req(m.poll_request(later));
    m.handle_list_page(later, page(vec![], "20", None));
    assert_eq!(m.stale_since(), Some(now), "listed, not watching yet");
    watch_req(m.poll_request(later));
    m.handle_watch_error(later, err(ErrorKind::Transport));
    let retry = later + Duration::from_secs(10);
    watch_req(m.poll_request(retry));
    m.handle_watch_opened(retry);
    assert_eq!(m.stale_since(), None, "watching from the list's RV");
}

#[test]
fn r10_a_watch_list_is_current_once_its_initial_events_end() {
    let t = Instant::now();
    let mut m = watch_list_machine();
    watch_req(m.poll_request(t));
    m.handle_watch_opened(t);
    m.handle_watch_events(t, vec![end_bookmark("5")]);
    assert_eq!(m.stale_since(), None);
    // A 410 on the watch: the relist is a watch-list again.
    m.handle_watch_events(t, vec![WatchEvent::Error(err(ErrorKind::Gone))]);
    assert_eq!(m.stale_since(), Some(t));
    let now = t + Duration::from_secs(2);
    let w = watch_req(m.poll_request(now));
    assert!(w.send_initial_events);
    m.handle_watch_opened(now);
    m.handle_watch_events(now, vec![WatchEvent::Added(obj("a", "3"))]);
    assert_eq!(m.stale_since(), Some(t), "initial events are not the end");
    m.handle_watch_events(now, vec![end_bookmark("9")]);
    assert_eq!(m.stale_since(), None);
}
