//! The three machines together, without a network (quinn's `Pair` idea): a
//! [`ReflectorMachine`] fed by a scripted API server, the [`DeltaFifo`] it hands its output to,
//! and the [`Processor`] that pops the FIFO into the store and routes notifications to
//! listeners, all on one fake clock. Whole scenarios (sync, churn, 410s, watches that end,
//! handlers added mid-stream, resync schedules) run deterministically in milliseconds and check
//! P4, F5, B4 and P6 end to end.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::ConfigMap;
use proptest::prelude::*;

use crate::{
    TraceId,
    backoff::BackoffConfig,
    fifo::{DeltaFifo, DeltaFifoOptions},
    key::default_key_func,
    known::KnownObjects,
    notification::Notification,
    processor::{Delivery, Processor, ResyncPeriod},
    reflector::{
        FifoCommand, ListPage, ReflectorConfig, ReflectorMachine, Request, RequestError, WatchEvent,
    },
    store::Store,
};

type Item = (Arc<ConfigMap>, TraceId);

fn cm(name: &str, rv: u64, data: u64) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.namespace = Some("ns".into());
    c.metadata.name = Some(name.into());
    c.metadata.resource_version = Some(rv.to_string());
    c.data = Some(BTreeMap::from([("v".to_string(), data.to_string())]));
    c
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    Added,
    Modified,
    Deleted,
}

/// A scripted API server: objects, an event log, compaction.
struct Server {
    rv: u64,
    objects: BTreeMap<String, ConfigMap>,
    log: Vec<(u64, Ev, ConfigMap)>,
    /// Watches from an RV below this answer 410.
    compacted: u64,
    /// The next watches end at once with no event.
    end_watches: u32,
}

impl Server {
    fn new(n: usize) -> Self {
        let mut s = Server {
            rv: 1,
            objects: BTreeMap::new(),
            log: Vec::new(),
            compacted: 0,
            end_watches: 0,
        };
        for i in 0..n {
            s.create(&format!("cm-{i}"));
        }
        s
    }

    fn create(&mut self, name: &str) {
        self.rv += 1;
        let o = cm(name, self.rv, self.rv);
        let ev = if self.objects.contains_key(name) {
            Ev::Modified
        } else {
            Ev::Added
        };
        self.objects.insert(name.to_string(), o.clone());
        self.log.push((self.rv, ev, o));
    }

    fn delete(&mut self, name: &str) {
        if let Some(mut o) = self.objects.remove(name) {
            self.rv += 1;
            o.metadata.resource_version = Some(self.rv.to_string());
            self.log.push((self.rv, Ev::Deleted, o));
        }
    }

    fn compact(&mut self) {
        self.compacted = self.rv;
    }

    fn list(&self) -> ListPage<Item> {
        ListPage {
            items: self
                .objects
                .values()
                .map(|o| (Arc::new(o.clone()), TraceId::NONE))
                .collect(),
            resource_version: self.rv.to_string(),
            continue_token: None,
        }
    }

    /// Events after `from`, or 410 when `from` was compacted away.
    fn events_after(&self, from: u64, max: usize) -> Result<Vec<WatchEvent<Item>>, ()> {
        if from < self.compacted {
            return Err(());
        }
        Ok(self
            .log
            .iter()
            .filter(|(rv, _, _)| *rv > from)
            .take(max)
            .map(|(_, ev, o)| {
                let item = (Arc::new(o.clone()), TraceId::NONE);
                match ev {
                    Ev::Added => WatchEvent::Added(item),
                    Ev::Modified => WatchEvent::Modified(item),
                    Ev::Deleted => WatchEvent::Deleted(item),
                }
            })
            .collect())
    }

    fn truth(&self) -> BTreeMap<String, String> {
        self.objects
            .iter()
            .map(|(k, o)| (format!("ns/{k}"), rv_of(o)))
            .collect()
    }
}

fn rv_of(o: &ConfigMap) -> String {
    o.metadata.resource_version.clone().unwrap_or_default()
}

/// What one listener has been told, applied to a map (its view of the world).
#[derive(Default)]
struct ListenerView {
    deliveries: Vec<Delivery<ConfigMap>>,
    view: BTreeMap<String, String>,
    anomalies: Vec<String>,
    syncs: usize,
}

impl ListenerView {
    fn take(&mut self, ds: Vec<Delivery<ConfigMap>>) {
        for d in ds {
            let key = d.key.to_string();
            match &d.notification {
                Notification::Add { obj, .. } => {
                    if self.view.insert(key.clone(), rv_of(obj)).is_some() {
                        self.anomalies.push(format!("duplicate add {key}"));
                    }
                }
                Notification::Update { old, new } => {
                    if Arc::ptr_eq(old, new) || rv_of(old) == rv_of(new) {
                        self.syncs += 1;
                    }
                    if self.view.insert(key.clone(), rv_of(new)).is_none() {
                        self.anomalies.push(format!("update of unseen {key}"));
                    }
                }
                Notification::Delete { .. } => {
                    if self.view.remove(&key).is_none() {
                        self.anomalies.push(format!("delete of unseen {key}"));
                    }
                }
            }
            self.deliveries.push(d);
        }
    }
}

/// The machines wired as the actors wire them, on a fake clock.
struct Pipeline {
    now: Instant,
    reflector: ReflectorMachine<Item>,
    fifo: DeltaFifo<ConfigMap>,
    processor: Processor<ConfigMap>,
    listeners: HashMap<u64, ListenerView>,
    /// The open watch's cursor (the RV it has delivered up to), if any.
    watch: Option<u64>,
    /// B4: the reflector stops reading the watch while this many deltas wait.
    capacity: usize,
    /// Keys per popped batch.
    pop_keys: usize,
    /// Events the server delivers per read.
    chunk: usize,
    max_pending: usize,
}

impl Pipeline {
    fn new(default_resync: Option<Duration>) -> Self {
        let now = Instant::now();
        let store = Store::new(default_key_func(), Default::default());
        let known: Arc<dyn KnownObjects<ConfigMap>> = Arc::new(store.lister());
        let fifo =
            DeltaFifo::new(DeltaFifoOptions::new(default_key_func()).with_known_objects(known));
        let backoff = BackoffConfig {
            jitter: 0.0,
            ..Default::default()
        };
        Pipeline {
            now,
            reflector: ReflectorMachine::new(ReflectorConfig::default(), backoff, 9),
            fifo,
            processor: Processor::new(store, default_resync),
            listeners: HashMap::new(),
            watch: None,
            capacity: 8,
            pop_keys: 3,
            chunk: 5,
            max_pending: 0,
        }
    }

    fn add_listener(&mut self, id: u64, resync: ResyncPeriod) {
        let r = self.processor.add_listener(id, resync, self.now);
        self.listeners.entry(id).or_default().take(r.replay);
    }

    fn start(&mut self) {
        self.processor.start(self.now);
    }

    /// One turn of every machine. Returns false when nothing happened but the clock moving.
    fn step(&mut self, server: &mut Server) -> bool {
        let mut busy = false;
        // Reflector → FIFO.
        while let Some(out) = self.reflector.poll_output() {
            busy = true;
            match out {
                FifoCommand::Replace {
                    items,
                    resource_version,
                } => {
                    self.fifo
                        .replace(items, &resource_version)
                        .expect("replace");
                }
                FifoCommand::Events { events, .. } => {
                    for (kind, (obj, trace)) in events {
                        let r = match kind {
                            crate::reflector::EventKind::Add => self.fifo.add(obj, trace),
                            crate::reflector::EventKind::Update => self.fifo.update(obj, trace),
                            crate::reflector::EventKind::Delete => self.fifo.delete(obj, trace),
                        };
                        r.expect("fifo accepts");
                    }
                }
                FifoCommand::Bookmark { .. } => {}
            }
            self.reflector.handle_delivered(self.now);
        }
        while self.reflector.poll_event().is_some() {}
        self.max_pending = self.max_pending.max(self.fifo.pending_deltas());
        // FIFO → processor → listeners (one batch per turn, so the stages interleave).
        let initial = !self.fifo.has_synced();
        if let Some(batch) = self.fifo.pop_batch(self.pop_keys) {
            busy = true;
            let d = self.processor.handle_deltas(batch.items, initial);
            for (id, ds) in d.per_listener {
                self.listeners.entry(id).or_default().take(ds);
            }
            self.fifo.done(batch.token, 0);
        }
        // Resync check (R6, P6).
        if self.processor.poll_timeout().is_some_and(|t| t <= self.now)
            && self.processor.handle_resync_check(self.now)
        {
            self.fifo.resync().expect("resync");
        }
        // Reflector ↔ server.
        if let Some(req) = self.reflector.poll_request(self.now) {
            busy = true;
            match req {
                Request::List(_) => self.reflector.handle_list_page(self.now, server.list()),
                Request::Watch(w) => {
                    let from: u64 = w.resource_version.parse().unwrap_or(0);
                    if from < server.compacted {
                        self.reflector.handle_watch_error(
                            self.now,
                            RequestError::from_status(410, None, "gone"),
                        );
                    } else {
                        self.reflector.handle_watch_opened(self.now);
                        self.watch = Some(from);
                    }
                }
            }
        } else if let Some(from) = self.watch.filter(|_| self.reflector.is_watching()) {
            if server.end_watches > 0 {
                server.end_watches -= 1;
                self.reflector.handle_watch_ended(self.now);
                self.watch = None;
            } else if self.fifo.pending_deltas() < self.capacity {
                // B4: read the watch only while the FIFO has room.
                match server.events_after(from, self.chunk) {
                    Ok(evs) if !evs.is_empty() => {
                        busy = true;
                        let last = evs
                            .iter()
                            .filter_map(|e| match e {
                                WatchEvent::Added(o)
                                | WatchEvent::Modified(o)
                                | WatchEvent::Deleted(o) => rv_of(&o.0).parse().ok(),
                                _ => None,
                            })
                            .max()
                            .unwrap_or(from);
                        self.watch = Some(last);
                        self.reflector.handle_watch_events(self.now, evs);
                    }
                    Ok(_) => {}
                    Err(()) => {
                        self.reflector.handle_watch_events(
                            self.now,
                            vec![WatchEvent::Error(RequestError::from_status(
                                410, None, "gone",
                            ))],
                        );
                        self.watch = None;
                    }
                }
            }
        }
        if !self.reflector.is_watching() {
            self.watch = None;
        }
        if !busy {
            // Nothing to do now: jump to the next timer (or 100 ms).
            let mut next = self.now + Duration::from_millis(100);
            if let Some(t) = self.reflector.poll_timeout() {
                next = next.min(t.max(self.now));
            }
            if let Some(t) = self.processor.poll_timeout() {
                next = next.min(t.max(self.now));
            }
            self.now = next.max(self.now + Duration::from_millis(1));
            self.reflector.handle_timeout(self.now);
        }
        busy
    }

    /// Steps until the store equals the server and the FIFO is drained (or `limit` steps).
    fn settle(&mut self, server: &mut Server, limit: usize) {
        for _ in 0..limit {
            self.step(server);
            if self.fifo.pending_deltas() == 0
                && self.fifo.in_flight() == 0
                && self.store_view() == server.truth()
            {
                return;
            }
        }
        panic!(
            "did not converge: store {:?} server {:?}",
            self.store_view(),
            server.truth()
        );
    }

    fn store_view(&self) -> BTreeMap<String, String> {
        let lister = self.processor.lister();
        lister
            .list()
            .iter()
            .map(|o| {
                let key = format!(
                    "{}/{}",
                    o.metadata.namespace.as_deref().unwrap_or_default(),
                    o.metadata.name.as_deref().unwrap_or_default()
                );
                (key, rv_of(o))
            })
            .collect()
    }
}

#[test]
fn pair_f5_synced_only_once_the_first_list_is_processed() {
    let mut server = Server::new(10);
    let mut p = Pipeline::new(None);
    p.add_listener(1, ResyncPeriod::Default);
    p.start();
    let mut saw_replace_pending = false;
    for _ in 0..200 {
        p.step(&mut server);
        let queued = p.fifo.pending_deltas() + p.fifo.in_flight();
        if queued > 0 && !p.fifo.has_synced() {
            saw_replace_pending = true;
        }
        if p.fifo.has_synced() {
            // F5: every object of the first list reached the store (and the listener).
            assert_eq!(p.store_view(), server.truth());
            assert_eq!(p.listeners[&1].view, server.truth());
            let initial = p.listeners[&1]
                .deliveries
                .iter()
                .filter(|d| d.initial)
                .count();
            assert_eq!(initial, 10, "isInInitialList for the first list only");
            assert!(saw_replace_pending, "synced only after processing");
            return;
        }
    }
    panic!("never synced");
}

#[test]
fn pair_p4_a_listener_added_mid_stream_has_no_gap_and_no_duplicate() {
    let mut server = Server::new(20);
    let mut p = Pipeline::new(None);
    p.add_listener(1, ResyncPeriod::Default);
    p.start();
    p.settle(&mut server, 500);
    for round in 0..30u64 {
        server.create(&format!("cm-{}", round % 25));
        if round % 7 == 3 {
            server.delete(&format!("cm-{}", round % 20));
        }
        // a few steps: events are in flight in the FIFO when listener 2 joins
        for _ in 0..2 {
            p.step(&mut server);
        }
        if round == 10 {
            p.add_listener(2, ResyncPeriod::Default);
        }
    }
    p.settle(&mut server, 2000);
    for id in [1, 2] {
        let l = &p.listeners[&id];
        assert!(l.anomalies.is_empty(), "listener {id}: {:?}", l.anomalies);
        assert_eq!(
            l.view,
            server.truth(),
            "listener {id} sees the server's state"
        );
    }
    let l2 = &p.listeners[&2].deliveries;
    let replay = l2.iter().take_while(|d| d.initial).count();
    assert!(replay > 0 && l2[replay..].iter().all(|d| !d.initial));
}

#[test]
fn pair_b4_the_fifo_bound_holds_under_a_flood() {
    let mut server = Server::new(5);
    let mut p = Pipeline::new(None);
    p.add_listener(1, ResyncPeriod::Default);
    p.start();
    p.settle(&mut server, 500);
    // 300 events on distinct keys: the FIFO would hold 300 deltas without B4
    for i in 0..300 {
        server.create(&format!("flood-{i}"));
    }
    p.max_pending = 0;
    p.settle(&mut server, 5000);
    assert!(
        p.max_pending < p.capacity + p.chunk,
        "B4: the reflector stopped reading at capacity: max pending {}",
        p.max_pending
    );
    assert_eq!(p.listeners[&1].view, server.truth());
}

#[test]
fn pair_r3_r4_410s_and_watches_that_end_converge_with_backoff() {
    let mut server = Server::new(10);
    let mut p = Pipeline::new(None);
    p.add_listener(1, ResyncPeriod::Default);
    p.start();
    p.settle(&mut server, 500);
    let t0 = p.now;
    // the watch ends at once three times, then history is compacted under churn
    server.end_watches = 3;
    for i in 0..10 {
        server.create(&format!("cm-{i}"));
    }
    server.delete("cm-0");
    server.compact();
    p.watch = None;
    p.reflector.handle_watch_events(
        p.now,
        vec![WatchEvent::Error(RequestError::from_status(
            410, None, "gone",
        ))],
    );
    server.create("late");
    p.settle(&mut server, 5000);
    let l = &p.listeners[&1];
    assert!(l.anomalies.is_empty(), "{:?}", l.anomalies);
    assert_eq!(l.view, server.truth());
    assert!(p.reflector.counters().expired >= 1);
    assert!(
        p.now.duration_since(t0) >= Duration::from_millis(800),
        "R8: the relist waited for the backoff"
    );
}

#[test]
fn pair_p6_resync_schedule_end_to_end() {
    let mut server = Server::new(3);
    let mut p = Pipeline::new(Some(Duration::from_secs(1)));
    p.add_listener(1, ResyncPeriod::Default); // the informer's 1 s
    p.add_listener(2, ResyncPeriod::Never);
    p.add_listener(3, ResyncPeriod::Every(Duration::from_secs(3)));
    p.start();
    p.settle(&mut server, 500);
    let t0 = p.now;
    while p.now < t0 + Duration::from_secs(30) {
        p.step(&mut server);
    }
    let s1 = p.listeners[&1].syncs / 3;
    let s3 = p.listeners[&3].syncs / 3;
    assert!((29..=31).contains(&s1), "1 s handler: {s1} resyncs in 30 s");
    assert!((9..=11).contains(&s3), "3 s handler: {s3} resyncs in 30 s");
    assert_eq!(p.listeners[&2].syncs, 0, "never means never");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random churn with compactions and watches that end: every listener's view converges to
    /// the server, with no duplicate add, no update or delete of an unseen object (P4, P8).
    #[test]
    fn pair_random_churn_and_faults_converge(
        ops in proptest::collection::vec((0u8..10, 0u8..12), 1..80),
        late_listener_at in 0usize..80,
    ) {
        let mut server = Server::new(6);
        let mut p = Pipeline::new(None);
        p.add_listener(1, ResyncPeriod::Default);
        p.start();
        for (i, (op, k)) in ops.iter().enumerate() {
            let name = format!("cm-{k}");
            match op {
                0..=5 => server.create(&name),
                6 | 7 => server.delete(&name),
                8 => server.compact(),
                _ => server.end_watches += 1,
            }
            if i == late_listener_at {
                p.add_listener(2, ResyncPeriod::Default);
            }
            p.step(&mut server);
        }
        server.end_watches = 0;
        p.settle(&mut server, 20_000);
        for (id, l) in &p.listeners {
            prop_assert!(l.anomalies.is_empty(), "listener {}: {:?}", id, l.anomalies);
            prop_assert_eq!(&l.view, &server.truth());
        }
    }
}
