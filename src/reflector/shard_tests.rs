//! Deterministic tests of the machine's shard rules (docs/semantics.md K1, K2) with a fake clock.

use std::time::{Duration, Instant};

use super::*;
use crate::shard::{ShardField, ShardSelector};

#[derive(Debug)]
struct Obj(&'static str);

impl Versioned for Obj {
    fn resource_version(&self) -> Option<&str> {
        Some(self.0)
    }
}

fn half(i: u64) -> ShardSelector {
    ShardSelector::nth_of(ShardField::Uid, i, 2).expect("2 shards")
}

fn quarter(i: u64) -> ShardSelector {
    ShardSelector::nth_of(ShardField::Uid, i, 4).expect("4 shards")
}

fn sharded(selector: ShardSelector) -> ReflectorMachine<Obj> {
    let config = ReflectorConfig {
        shard_selector: Some(selector),
        ..ReflectorConfig::default()
    };
    ReflectorMachine::new(config, BackoffConfig::default(), 3)
}

fn list(m: &mut ReflectorMachine<Obj>, now: Instant) -> ListRequest {
    match m.poll_request(now) {
        Some(Request::List(l)) => l,
        other => panic!("expected a LIST, got {other:?}"),
    }
}

fn watch(m: &mut ReflectorMachine<Obj>, now: Instant) -> WatchRequest {
    match m.poll_request(now) {
        Some(Request::Watch(w)) => w,
        other => panic!("expected a WATCH, got {other:?}"),
    }
}

/// Lists (`rv` 10) and opens the watch: the machine is watching.
fn synced(m: &mut ReflectorMachine<Obj>, t0: Instant) {
    list(m, t0);
    m.handle_list_page(
        t0,
        ListPage {
            items: vec![Obj("5")],
            resource_version: "10".into(),
            continue_token: None,
        },
    );
    watch(m, t0);
    m.handle_watch_opened(t0);
    while m.poll_output().is_some() {}
}

#[test]
fn k1_every_list_page_and_watch_carries_the_shard() {
    let t0 = Instant::now();
    let mut m = sharded(half(0));
    let mut config = m.config().clone();
    config.initial_list = InitialList::Consistent;
    config.page_size = Some(1);
    m = ReflectorMachine::new(config, BackoffConfig::default(), 3);
    let first = list(&mut m, t0);
    assert_eq!(first.shard_selector, Some(half(0)));
    m.handle_list_page(
        t0,
        ListPage {
            items: vec![Obj("5")],
            resource_version: "10".into(),
            continue_token: Some("c".into()),
        },
    );
    let second = list(&mut m, t0);
    assert_eq!(second.continue_token.as_deref(), Some("c"));
    assert_eq!(second.shard_selector, Some(half(0)), "a continue page");
    m.handle_list_page(
        t0,
        ListPage {
            items: vec![],
            resource_version: "10".into(),
            continue_token: None,
        },
    );
    assert_eq!(watch(&mut m, t0).shard_selector, Some(half(0)));
}

#[test]
fn k2_shrinking_ranges_delete_locally_and_rewatch_from_the_last_rv_without_a_list() {
    let t0 = Instant::now();
    let mut m = sharded(half(0));
    synced(&mut m, t0);
    m.handle_watch_events(t0, vec![WatchEvent::Added(Obj("12"))]);
    while m.poll_output().is_some() {}
    let lists = m.counters().lists;
    m.handle_shard_change(t0, Some(quarter(0)));
    assert!(!m.is_watching(), "the wider watch is abandoned");
    match m.poll_output() {
        Some(FifoCommand::ShardShrunk { selector }) => assert_eq!(selector, quarter(0)),
        other => panic!("expected ShardShrunk, got {other:?}"),
    }
    assert!(m.poll_output().is_none());
    let w = watch(&mut m, t0);
    assert_eq!(w.resource_version, "12", "from the last synced RV");
    assert_eq!(w.shard_selector, Some(quarter(0)));
    assert_eq!(m.counters().lists, lists, "no LIST");
    assert_eq!(m.counters().shard_relists, 0);
    // Events of the old watch that arrive after the change are not delivered.
    m.handle_watch_events(t0, vec![WatchEvent::Added(Obj("13"))]);
    assert!(m.poll_output().is_none());
}

#[test]
fn k2_growing_ranges_relist_the_new_selector_from_the_last_rv() {
    let t0 = Instant::now();
    let mut m = sharded(quarter(0));
    synced(&mut m, t0);
    m.handle_watch_events(
        t0,
        vec![WatchEvent::Bookmark {
            resource_version: "15".into(),
            initial_events_end: false,
        }],
    );
    while m.poll_output().is_some() {}
    m.handle_shard_change(t0, Some(half(0)));
    assert!(m.poll_output().is_none(), "nothing left: no local deletes");
    let l = list(&mut m, t0);
    assert_eq!(l.shard_selector, Some(half(0)));
    assert_eq!(l.resource_version.as_deref(), Some("15"));
    assert_eq!(l.version_match, Some(VersionMatch::NotOlderThan));
    assert_eq!(m.counters().shard_relists, 1);
    m.handle_list_page(
        t0,
        ListPage {
            items: vec![Obj("5"), Obj("16")],
            resource_version: "20".into(),
            continue_token: None,
        },
    );
    match m.poll_output() {
        Some(FifoCommand::Replace {
            items,
            resource_version,
        }) => {
            assert_eq!(items.len(), 2);
            assert_eq!(resource_version, "20");
        }
        other => panic!("expected Replace, got {other:?}"),
    }
    let w = watch(&mut m, t0);
    assert_eq!(
        (w.resource_version.as_str(), w.shard_selector),
        ("20", Some(half(0)))
    );
}

#[test]
fn k2_moving_ranges_delete_what_left_then_relist() {
    let t0 = Instant::now();
    let mut m = sharded(half(0));
    synced(&mut m, t0);
    m.handle_shard_change(t0, Some(half(1)));
    assert!(matches!(
        m.poll_output(),
        Some(FifoCommand::ShardShrunk { selector }) if selector == half(1)
    ));
    assert_eq!(list(&mut m, t0).shard_selector, Some(half(1)));
    // To everything: nothing leaves, the rest enters.
    m.handle_shard_change(t0, None);
    assert!(m.poll_output().is_none());
    assert_eq!(list(&mut m, t0).shard_selector, None);
    assert_eq!(m.counters().shard_changes, 2);
}

#[test]
fn k2_a_change_during_a_list_restarts_it_with_the_new_selector() {
    let t0 = Instant::now();
    let mut m = sharded(half(0));
    list(&mut m, t0);
    m.handle_shard_change(t0, Some(quarter(0)));
    // The old LIST's page is stale: ignored.
    m.handle_list_page(
        t0,
        ListPage {
            items: vec![Obj("5")],
            resource_version: "10".into(),
            continue_token: None,
        },
    );
    let mut replaced = false;
    while let Some(out) = m.poll_output() {
        replaced |= matches!(out, FifoCommand::Replace { .. });
    }
    assert!(!replaced, "the abandoned LIST reached the FIFO");
    let l = list(&mut m, t0);
    assert_eq!(l.shard_selector, Some(quarter(0)));
}

#[test]
fn k2_a_change_keeps_a_backoff_and_the_same_selector_is_a_no_op() {
    let t0 = Instant::now();
    let mut m = sharded(quarter(0));
    synced(&mut m, t0);
    m.handle_watch_error(t0, RequestError::new(ErrorKind::Transport, "reset"));
    let until = m.poll_timeout().expect("backing off");
    m.handle_shard_change(t0, Some(half(0)));
    assert!(m.poll_request(t0).is_none(), "the backoff holds");
    assert_eq!(m.poll_timeout(), Some(until));
    let later = until + Duration::from_millis(1);
    m.handle_timeout(later);
    assert_eq!(
        list(&mut m, later).shard_selector,
        Some(half(0)),
        "grew: a LIST"
    );
    let changes = m.counters().shard_changes;
    m.handle_shard_change(later, Some(half(0)));
    assert_eq!(m.counters().shard_changes, changes);
    assert!(m.is_listing(), "a no-op does not restart the LIST");
}

/// Issue 31: an empty shard (a ring replica that owns nothing yet) asks nothing of the server:
/// a request without ranges would be a request for everything. The informer syncs empty.
#[test]
fn k1_an_empty_shard_sends_no_request_and_syncs_empty() {
    let t0 = Instant::now();
    let mut m = sharded(ShardSelector::nothing(ShardField::Namespace));
    assert!(
        m.poll_request(t0).is_none(),
        "an empty shard sent a request"
    );
    assert!(m.is_parked());
    assert_eq!(m.poll_timeout(), None);
    match m.poll_output() {
        Some(FifoCommand::Replace {
            items,
            resource_version,
        }) => {
            assert!(items.is_empty());
            assert_eq!(resource_version, "");
        }
        other => panic!("expected an empty Replace, got {other:?}"),
    }
    assert!(m.poll_output().is_none());
    assert_eq!(m.counters().lists, 0);
    // Still nothing later, and no second Replace.
    assert!(m.poll_request(t0 + Duration::from_secs(60)).is_none());
    assert!(m.poll_output().is_none());
    // The first ranges: a LIST of exactly them.
    let ns = ShardSelector::nth_of(ShardField::Namespace, 1, 4).expect("4 shards");
    m.handle_shard_change(t0, Some(ns.clone()));
    assert!(!m.is_parked());
    let l = list(&mut m, t0);
    assert_eq!(l.shard_selector, Some(ns));
}

/// Issue 31: shrinking to nothing drops what the informer held (no handler is told) and then
/// asks nothing of the server; growing again lists from the last RV.
#[test]
fn k2_shrinking_to_nothing_parks_and_growing_relists_from_the_last_rv() {
    let t0 = Instant::now();
    let mut m = sharded(half(0));
    synced(&mut m, t0);
    m.handle_shard_change(t0, Some(ShardSelector::nothing(ShardField::Uid)));
    match m.poll_output() {
        Some(FifoCommand::ShardShrunk { selector }) => assert!(selector.is_empty()),
        other => panic!("expected ShardShrunk, got {other:?}"),
    }
    assert!(!m.is_watching());
    assert!(
        m.poll_request(t0).is_none(),
        "an empty shard sent a request"
    );
    assert!(m.is_parked());
    assert!(m.poll_output().is_none(), "a second Replace after sync");
    assert_eq!(m.stale_since(), None);
    m.handle_shard_change(t0, Some(quarter(1)));
    let l = list(&mut m, t0);
    assert_eq!(l.shard_selector, Some(quarter(1)));
    assert_eq!(l.resource_version.as_deref(), Some("10"));
}
