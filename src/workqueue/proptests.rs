//! Property test: random interleavings of adds, delayed and rate-limited adds, gets by one of
//! several simulated workers, dones, forgets, promotions, shutdowns and clock steps, checked
//! step by step against a naive model of client-go's workqueue (W1–W4).
//!
//! Checked after every step: the exact item each `get` returns (FIFO order and
//! earliest-deadline promotion), every add's outcome, len / processing / waiting counts, the
//! next deadline, the failure counts, the depth/adds/retries metrics, and that no item is held
//! by two workers at once nor queued twice. At the end time is advanced and every worker drains
//! the queue: every accepted add must have been followed by a hand-out of its item (delayed
//! items dropped by a shutdown excepted).

use std::{
    collections::{HashMap, HashSet, VecDeque},
    time::{Duration, Instant},
};

use proptest::prelude::*;

use super::*;

const ITEMS: u8 = 6;
const WORKERS: usize = 3;
const BASE: Duration = Duration::from_millis(1);
const MAX: Duration = Duration::from_millis(16);

#[derive(Debug, Clone)]
enum Op {
    Add(u8),
    AddAfter(u8, u64),
    AddRateLimited(u8),
    Get(usize),
    Done(usize),
    /// `done` for an item the caller does not hold: must be a no-op.
    StrayDone(u8),
    Forget(u8),
    Promote,
    Advance(u64),
    ShutDown,
    ShutDownWithDrain,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..ITEMS).prop_map(Op::Add),
        4 => (0..ITEMS, 0u64..40).prop_map(|(i, d)| Op::AddAfter(i, d)),
        3 => (0..ITEMS).prop_map(Op::AddRateLimited),
        6 => (0..WORKERS).prop_map(Op::Get),
        5 => (0..WORKERS).prop_map(Op::Done),
        1 => (0..ITEMS).prop_map(Op::StrayDone),
        2 => (0..ITEMS).prop_map(Op::Forget),
        1 => Just(Op::Promote),
        4 => (0u64..30).prop_map(Op::Advance),
    ]
}

/// The naive model: a Vec-backed queue, sets, and a linear-scan waiting list.
struct Model {
    queue: VecDeque<u8>,
    dirty: HashSet<u8>,
    processing: HashSet<u8>,
    /// (deadline, sequence of first wait, item); one entry per item.
    waiting: Vec<(Instant, u64, u8)>,
    seq: u64,
    failures: HashMap<u8, u32>,
    shut: bool,
    drain: bool,
    adds: u64,
    retries: u64,
    /// Items with an accepted add not yet followed by a hand-out.
    owed: HashSet<u8>,
}

impl Model {
    fn add(&mut self, item: u8) -> AddOutcome {
        if self.dirty.contains(&item) {
            return if self.processing.contains(&item) {
                AddOutcome::Deferred
            } else {
                AddOutcome::AlreadyQueued
            };
        }
        self.adds += 1;
        self.dirty.insert(item);
        if self.processing.contains(&item) {
            AddOutcome::Deferred
        } else {
            self.queue.push_back(item);
            AddOutcome::Queued
        }
    }

    fn add_after(&mut self, item: u8, delay: Duration, now: Instant) -> AddOutcome {
        self.retries += 1;
        if delay.is_zero() {
            return self.add(item);
        }
        let ready_at = now + delay;
        if let Some(entry) = self.waiting.iter_mut().find(|e| e.2 == item) {
            entry.0 = entry.0.min(ready_at);
            return AddOutcome::Delayed { ready_at: entry.0 };
        }
        self.waiting.push((ready_at, self.seq, item));
        self.seq += 1;
        AddOutcome::Delayed { ready_at }
    }

    fn promote(&mut self, now: Instant) -> usize {
        let mut due: Vec<_> = self
            .waiting
            .iter()
            .filter(|e| e.0 <= now)
            .copied()
            .collect();
        due.sort();
        self.waiting.retain(|e| e.0 > now);
        due.into_iter()
            .filter(|e| self.add(e.2) == AddOutcome::Queued)
            .count()
    }

    fn next_ready_at(&self) -> Option<Instant> {
        self.waiting.iter().map(|e| e.0).min()
    }
}

struct Harness {
    now: Instant,
    q: WorkQueue<u8>,
    m: Model,
    workers: [Option<u8>; WORKERS],
    handed_out: u64,
}

impl Harness {
    fn new() -> Self {
        Harness {
            now: Instant::now(),
            q: WorkQueue::new(Box::new(ItemExponentialFailureRateLimiter::new(BASE, MAX))),
            m: Model {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                waiting: Vec::new(),
                seq: 0,
                failures: HashMap::new(),
                shut: false,
                drain: false,
                adds: 0,
                retries: 0,
                owed: HashSet::new(),
            },
            workers: [None; WORKERS],
            handed_out: 0,
        }
    }

    fn accepted(&mut self, item: u8, out: AddOutcome) {
        if out.is_accepted() {
            self.m.owed.insert(item);
        }
    }

    fn apply(&mut self, op: &Op) {
        let now = self.now;
        match *op {
            Op::Add(item) => {
                let expected = if self.m.shut {
                    AddOutcome::ShuttingDown
                } else {
                    self.m.add(item)
                };
                let out = self.q.add(item, now);
                assert_eq!(out, expected, "{op:?}");
                self.accepted(item, out);
            }
            Op::AddAfter(item, d) => {
                let delay = Duration::from_millis(d);
                let expected = if self.m.shut {
                    AddOutcome::ShuttingDown
                } else {
                    self.m.add_after(item, delay, now)
                };
                let out = self.q.add_after(item, delay, now);
                assert_eq!(out, expected, "{op:?}");
                self.accepted(item, out);
            }
            Op::AddRateLimited(item) => {
                let expected = if self.m.shut {
                    RateLimitedAdd {
                        delay: Duration::ZERO,
                        outcome: AddOutcome::ShuttingDown,
                    }
                } else {
                    let n = self.m.failures.entry(item).or_insert(0);
                    let delay = (BASE * 2u32.pow(*n)).min(MAX);
                    *n += 1;
                    let outcome = self.m.add_after(item, delay, now);
                    RateLimitedAdd { delay, outcome }
                };
                let out = self.q.add_rate_limited(item, now);
                assert_eq!(out, expected, "{op:?}");
                self.accepted(item, out.outcome);
            }
            Op::Get(w) => {
                if self.workers[w].is_some() {
                    return; // a worker handles one item at a time
                }
                self.m.promote(now);
                let expected = match self.m.queue.pop_front() {
                    Some(item) => {
                        self.m.dirty.remove(&item);
                        self.m.processing.insert(item);
                        GetResult::Item(item)
                    }
                    None if self.m.shut => GetResult::ShutDown,
                    None => GetResult::Empty,
                };
                let got = self.q.get(now);
                assert_eq!(got, expected, "{op:?}");
                if let GetResult::Item(item) = got {
                    assert!(
                        !self.workers.contains(&Some(item)),
                        "item {item} handed to two workers"
                    );
                    self.workers[w] = Some(item);
                    self.m.owed.remove(&item);
                    self.handed_out += 1;
                }
            }
            Op::Done(w) => {
                let Some(item) = self.workers[w].take() else {
                    return;
                };
                self.m.processing.remove(&item);
                let expected = self.m.dirty.contains(&item);
                if expected {
                    self.m.queue.push_back(item);
                }
                assert_eq!(self.q.done(&item, now), expected, "{op:?}");
            }
            Op::StrayDone(item) => {
                if self.m.processing.contains(&item) {
                    return;
                }
                assert!(!self.q.done(&item, now), "{op:?}");
            }
            Op::Forget(item) => {
                self.m.failures.remove(&item);
                self.q.forget(&item);
            }
            Op::Promote => {
                let expected = if self.m.shut { 0 } else { self.m.promote(now) };
                assert_eq!(self.q.promote_ready(now), expected, "{op:?}");
            }
            Op::Advance(d) => self.now += Duration::from_millis(d),
            Op::ShutDown | Op::ShutDownWithDrain => {
                self.m.shut = true;
                self.m.drain = matches!(op, Op::ShutDownWithDrain);
                self.m.waiting.clear();
                // Items owed only through a delayed add are dropped by design.
                let dirty = &self.m.dirty;
                self.m.owed.retain(|item| dirty.contains(item));
                if self.m.drain {
                    self.q.shut_down_with_drain();
                } else {
                    self.q.shut_down();
                }
            }
        }
        self.check();
    }

    fn check(&self) {
        let (q, m) = (&self.q, &self.m);
        assert_eq!(q.len(), m.queue.len());
        assert_eq!(q.is_empty(), m.queue.is_empty());
        assert_eq!(q.processing(), m.processing.len());
        assert_eq!(q.waiting(), m.waiting.len());
        assert_eq!(q.next_ready_at(), m.next_ready_at());
        assert_eq!(q.is_shutting_down(), m.shut);
        assert_eq!(
            q.is_drained(),
            m.shut && (!m.drain || m.processing.is_empty())
        );
        // The model itself: queue = dirty \ processing, no duplicates.
        let queued: HashSet<u8> = m.queue.iter().copied().collect();
        assert_eq!(queued.len(), m.queue.len(), "item queued twice");
        let expected: HashSet<u8> = m.dirty.difference(&m.processing).copied().collect();
        assert_eq!(queued, expected);
        // Workers hold exactly the processing set, each item once.
        let held: Vec<u8> = self.workers.iter().flatten().copied().collect();
        assert_eq!(held.len(), m.processing.len());
        assert!(
            held.iter()
                .all(|i| m.processing.contains(i) && q.is_processing(i))
        );
        // Nothing owed is lost: it is dirty or waiting.
        for item in &m.owed {
            assert!(
                m.dirty.contains(item) || m.waiting.iter().any(|e| e.2 == *item),
                "item {item} lost"
            );
        }
        for item in 0..ITEMS {
            assert_eq!(
                q.num_requeues(&item),
                m.failures.get(&item).copied().unwrap_or(0)
            );
            assert_eq!(
                q.ready_at(&item),
                m.waiting.iter().find(|e| e.2 == item).map(|e| e.0)
            );
        }
        let metrics = q.metrics(self.now);
        assert_eq!(metrics.depth, m.dirty.len());
        assert_eq!(metrics.adds, m.adds);
        assert_eq!(metrics.retries, m.retries);
        assert_eq!(metrics.processing, m.processing.len());
        assert_eq!(metrics.queue_latency.count, self.handed_out);
    }

    /// Finish all work: workers call done, time jumps to each deadline, worker 0 drains.
    fn drain(&mut self) {
        for _ in 0..10_000 {
            for w in 0..WORKERS {
                self.apply(&Op::Done(w));
            }
            if let Some(at) = self.q.next_ready_at() {
                self.now = self.now.max(at);
            }
            loop {
                self.apply(&Op::Get(0));
                if self.workers[0].is_none() {
                    break;
                }
                self.apply(&Op::Done(0));
            }
            if self.q.is_empty() && self.q.processing() == 0 && self.q.waiting() == 0 {
                return;
            }
        }
        panic!("queue did not drain: {:?}", self.q);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn w1_w2_w3_w4_queue_matches_model(
        ops in proptest::collection::vec(op(), 0..200),
        shutdown in proptest::option::weighted(0.3, (any::<proptest::sample::Index>(), any::<bool>())),
    ) {
        let mut h = Harness::new();
        // A shutdown (plain or with drain) at a random point in 30% of the cases.
        let shutdown_at = shutdown.map(|(at, drain)| (at.index(ops.len() + 1), drain));
        for (i, op) in ops.iter().enumerate() {
            match shutdown_at {
                Some((at, true)) if at == i => h.apply(&Op::ShutDownWithDrain),
                Some((at, false)) if at == i => h.apply(&Op::ShutDown),
                _ => {}
            }
            h.apply(op);
        }
        h.drain();
        prop_assert!(h.m.owed.is_empty(), "never processed: {:?}", h.m.owed);
        h.apply(&Op::ShutDown);
        prop_assert_eq!(h.q.get(h.now), GetResult::ShutDown);
        prop_assert!(h.q.is_drained());
    }
}
