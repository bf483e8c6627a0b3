//! The async workqueue front (docs/semantics.md W1–W4): dedup and exclusive processing under
//! concurrent workers, delays and rate limiting on tokio's (paused) clock, shutdown and drain,
//! metrics.
//!
//! Wake-ups are checked precisely by polling futures by hand with a waker that records being
//! woken ([`Probe`]); timings use paused tokio time only. Nothing sleeps to synchronise.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    future::Future,
    panic::AssertUnwindSafe,
    pin::{Pin, pin},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    task::{Context, Poll, Wake, Waker},
    time::{Duration, Instant},
};

use futures::FutureExt;
use kinformer::{
    ObjectKey,
    workqueue::{ItemExponentialFailureRateLimiter, RateLimiter},
};
use kinformer_actors::{AsyncWorkQueue, EnqueueKeys};
use proptest::prelude::*;
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::time::advance;

const MS: Duration = Duration::from_millis(1);
/// A generous bound for conditions awaited on a real clock (never reached when things work).
const DEADLINE: Duration = Duration::from_secs(30);

/// A waker that counts its wake-ups.
#[derive(Default)]
struct Probe(AtomicUsize);

impl Wake for Probe {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Probe {
    fn new() -> Arc<Self> {
        Arc::default()
    }

    /// True if woken since the last call.
    fn take_woken(&self) -> bool {
        self.0.swap(0, Ordering::SeqCst) > 0
    }
}

/// Polls `fut` once with `probe` as its waker.
fn poll_with<F: Future>(fut: Pin<&mut F>, probe: &Arc<Probe>) -> Poll<F::Output> {
    let waker = Waker::from(Arc::clone(probe));
    fut.poll(&mut Context::from_waker(&waker))
}

/// What a fresh `get` returns without waiting: `None` if it would block.
fn try_get<T: Clone + Eq + std::hash::Hash + Send + Sync + 'static>(
    q: &AsyncWorkQueue<T>,
) -> Option<Option<T>> {
    q.get().now_or_never()
}

fn assert_send<F: Send>(_: &F) {}

#[test]
fn futures_and_queue_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync + Clone + Default>() {}
    assert_send_sync::<AsyncWorkQueue<String>>();
    let q: AsyncWorkQueue<String> = AsyncWorkQueue::new();
    assert_send(&q.get());
    assert_send(&q.shut_down_with_drain());
}

// ---------------------------------------------------------------------------------------------
// W1: dedup, re-queue after done, exclusive processing
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn w1_add_deduplicates_while_queued() {
    let q = AsyncWorkQueue::new();
    q.add("a");
    q.add("b");
    q.add("a");
    assert_eq!(q.len(), 2);
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(q.get().await, Some("b"));
    assert_eq!(try_get(&q), None);
    assert!(q.is_empty());
}

#[tokio::test]
async fn w1_add_during_processing_is_delivered_again_after_done() {
    let q = AsyncWorkQueue::new();
    q.add("a");
    let a = q.get().await.expect("queued");
    q.add("a");
    q.add("a");
    // Marked dirty, not handed to a second worker while the first holds it.
    assert_eq!(q.len(), 0);
    assert_eq!(q.metrics().depth, 1);
    assert_eq!(try_get(&q), None);
    q.done(&a);
    assert_eq!(q.len(), 1);
    assert_eq!(try_get(&q), Some(Some("a")));
    q.done(&"a");
    // Delivered once more, not twice.
    assert_eq!(try_get(&q), None);
}

#[tokio::test]
async fn w1_done_without_readd_does_not_requeue() {
    let q = AsyncWorkQueue::new();
    q.add(1);
    let one = q.get().await.expect("queued");
    q.done(&one);
    q.done(&one); // not processing: no-op
    assert!(q.is_empty());
    assert_eq!(try_get(&q), None);
}

#[tokio::test]
async fn w1_add_wakes_a_blocked_getter() {
    let q = AsyncWorkQueue::new();
    let probe = Probe::new();
    let mut get = pin!(q.get());
    assert!(poll_with(get.as_mut(), &probe).is_pending());
    assert!(!probe.take_woken());
    q.add("a");
    assert!(probe.take_woken());
    assert_eq!(poll_with(get.as_mut(), &probe), Poll::Ready(Some("a")));
}

#[tokio::test]
async fn w1_done_requeue_wakes_a_blocked_getter() {
    let q = AsyncWorkQueue::new();
    q.add("a");
    let a = q.get().await.expect("queued");
    q.add("a"); // deferred
    let probe = Probe::new();
    let mut get = pin!(q.get());
    assert!(poll_with(get.as_mut(), &probe).is_pending());
    assert!(!probe.take_woken(), "a deferred add must not wake anyone");
    q.done(&a);
    assert!(probe.take_woken());
    assert_eq!(poll_with(get.as_mut(), &probe), Poll::Ready(Some("a")));
}

#[tokio::test]
async fn w1_each_add_wakes_its_own_getter() {
    let q = AsyncWorkQueue::new();
    let (p1, p2) = (Probe::new(), Probe::new());
    let mut g1 = pin!(q.get());
    let mut g2 = pin!(q.get());
    assert!(poll_with(g1.as_mut(), &p1).is_pending());
    assert!(poll_with(g2.as_mut(), &p2).is_pending());
    q.add("a");
    q.add("b");
    assert!(p1.take_woken() && p2.take_woken());
    let mut got = [poll_with(g1.as_mut(), &p1), poll_with(g2.as_mut(), &p2)].map(|p| match p {
        Poll::Ready(Some(x)) => x,
        other => panic!("expected an item, got {other:?}"),
    });
    got.sort();
    assert_eq!(got, ["a", "b"]);
}

#[tokio::test]
async fn w1_cancelled_getter_takes_nothing_and_passes_its_wakeup_on() {
    let q = AsyncWorkQueue::new();
    let (p1, p2) = (Probe::new(), Probe::new());
    let mut g1 = Box::pin(q.get());
    let mut g2 = Box::pin(q.get());
    assert!(poll_with(g1.as_mut(), &p1).is_pending());
    assert!(poll_with(g2.as_mut(), &p2).is_pending());
    q.add("a");
    // Exactly one getter was chosen; cancel that one.
    let (woken, mut other, other_probe) = match (p1.take_woken(), p2.take_woken()) {
        (true, false) => (g1, g2, p2),
        (false, true) => (g2, g1, p1),
        w => panic!("expected exactly one wake-up, got {w:?}"),
    };
    drop(woken);
    assert!(
        other_probe.take_woken(),
        "the wake-up was lost with the cancelled getter"
    );
    assert_eq!(
        poll_with(other.as_mut(), &other_probe),
        Poll::Ready(Some("a"))
    );
}

#[tokio::test]
async fn w1_enqueue_keys_feeds_the_queue() {
    fn sink(s: impl EnqueueKeys) -> impl EnqueueKeys {
        s
    }
    let q: AsyncWorkQueue<ObjectKey> = AsyncWorkQueue::new();
    let s = sink(q.clone());
    let key = ObjectKey::new(Some("default"), "web");
    s.enqueue(key.clone());
    s.enqueue(key.clone());
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some(key));
}

/// Shared bookkeeping of the concurrent-workers test.
#[derive(Default)]
struct Ledger {
    /// Keys some worker is processing right now.
    in_flight: HashSet<u32>,
    /// Version of each key's "object", bumped before every add.
    latest: HashMap<u32, u64>,
    /// Version each key's last processing saw.
    seen: HashMap<u32, u64>,
    processed: u64,
    violations: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn w1_concurrent_workers_never_share_a_key_and_see_every_add() {
    const WORKERS: usize = 4;
    const KEYS: u32 = 48;
    const ADDS: usize = 20_000;

    for seed in [1u64, 2, 3] {
        let q: AsyncWorkQueue<u32> = AsyncWorkQueue::new();
        let ledger = Arc::new(Mutex::new(Ledger::default()));

        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let q = q.clone();
                let ledger = Arc::clone(&ledger);
                tokio::spawn(async move {
                    let mut rng = StdRng::seed_from_u64(seed * 100 + w as u64);
                    while let Some(k) = q.get().await {
                        {
                            let mut l = ledger.lock().expect("ledger");
                            if !l.in_flight.insert(k) {
                                l.violations.push(format!("key {k} handed to two workers"));
                            }
                            let v = l.latest.get(&k).copied().unwrap_or(0);
                            l.seen.insert(k, v);
                            l.processed += 1;
                        }
                        // "Work": give other workers and the producer a chance to interleave.
                        for _ in 0..rng.random_range(0..4) {
                            tokio::task::yield_now().await;
                        }
                        ledger.lock().expect("ledger").in_flight.remove(&k);
                        q.done(&k);
                    }
                })
            })
            .collect();

        let producer = tokio::spawn({
            let q = q.clone();
            let ledger = Arc::clone(&ledger);
            async move {
                let mut rng = StdRng::seed_from_u64(seed);
                for i in 0..ADDS {
                    let k = rng.random_range(0..KEYS);
                    *ledger.lock().expect("ledger").latest.entry(k).or_default() += 1;
                    q.add(k);
                    if i % 16 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            }
        });
        producer.await.expect("producer");

        tokio::time::timeout(DEADLINE, q.shut_down_with_drain())
            .await
            .expect("drain");
        for w in workers {
            tokio::time::timeout(DEADLINE, w)
                .await
                .expect("worker exits")
                .expect("worker");
        }

        let l = ledger.lock().expect("ledger");
        assert!(l.violations.is_empty(), "seed {seed}: {:?}", l.violations);
        assert!(l.in_flight.is_empty());
        for (k, v) in &l.latest {
            assert_eq!(
                l.seen.get(k),
                Some(v),
                "seed {seed}: key {k} was not processed after its last add"
            );
        }
        let m = q.metrics();
        assert_eq!((m.depth, m.processing), (0, 0));
        assert!(l.processed >= l.latest.len() as u64);
        assert!(l.processed <= ADDS as u64);
        assert_eq!(m.work_duration.count, l.processed);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Add(u8),
    Get,
    /// `done` for the n-th (mod count) item being processed.
    Done(usize),
    ShutDown,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..6).prop_map(Op::Add),
        4 => Just(Op::Get),
        4 => any::<usize>().prop_map(Op::Done),
        1 => Just(Op::ShutDown),
    ]
}

/// client-go's queue in three plain collections.
#[derive(Default)]
struct Model {
    queue: VecDeque<u8>,
    dirty: HashSet<u8>,
    processing: HashSet<u8>,
    shut_down: bool,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn w1_random_ops_match_the_model(ops in proptest::collection::vec(op(), 1..80)) {
        let q: AsyncWorkQueue<u8> = AsyncWorkQueue::new();
        let mut m = Model::default();
        for op in ops {
            match op {
                Op::Add(k) => {
                    q.add(k);
                    if !m.shut_down && m.dirty.insert(k) && !m.processing.contains(&k) {
                        m.queue.push_back(k);
                    }
                }
                Op::Get => {
                    let expected = match m.queue.pop_front() {
                        Some(k) => {
                            m.dirty.remove(&k);
                            m.processing.insert(k);
                            Some(Some(k))
                        }
                        None if m.shut_down => Some(None),
                        None => None,
                    };
                    prop_assert_eq!(try_get(&q), expected);
                }
                Op::Done(n) => {
                    let mut processing: Vec<u8> = m.processing.iter().copied().collect();
                    processing.sort_unstable();
                    if !processing.is_empty() {
                        let k = processing[n % processing.len()];
                        q.done(&k);
                        m.processing.remove(&k);
                        if m.dirty.contains(&k) {
                            m.queue.push_back(k);
                        }
                    }
                }
                Op::ShutDown => {
                    q.shut_down();
                    m.shut_down = true;
                }
            }
            prop_assert_eq!(q.len(), m.queue.len());
            let metrics = q.metrics();
            prop_assert_eq!(metrics.depth, m.dirty.len());
            prop_assert_eq!(metrics.processing, m.processing.len());
            prop_assert!(m.processing.is_disjoint(&m.queue.iter().copied().collect()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// W2: delays, rate limiting, forget
// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn w2_add_after_delivers_after_the_delay() {
    let q = AsyncWorkQueue::new();
    q.add_after("a", Duration::from_secs(1));
    assert_eq!(q.len(), 0);
    assert_eq!(q.metrics().waiting, 1);
    assert_eq!(try_get(&q), None);
    advance(999 * MS).await;
    assert_eq!(try_get(&q), None);
    advance(MS).await;
    assert_eq!(try_get(&q), Some(Some("a")));
}

#[tokio::test(start_paused = true)]
async fn w2_zero_delay_is_an_immediate_add() {
    let q = AsyncWorkQueue::new();
    q.add_after("a", Duration::ZERO);
    assert_eq!(q.len(), 1);
    assert_eq!(try_get(&q), Some(Some("a")));
}

#[tokio::test(start_paused = true)]
async fn w2_blocked_getter_wakes_at_the_deadline() {
    let q = AsyncWorkQueue::new();
    let start = tokio::time::Instant::now();
    q.add_after("a", Duration::from_secs(3));
    // Paused time auto-advances to the getter's timer: no real waiting.
    let got = tokio::time::timeout(Duration::from_secs(60), q.get()).await;
    assert_eq!(got, Ok(Some("a")));
    assert!(tokio::time::Instant::now() >= start + Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn w2_blocked_getter_rearms_for_an_earlier_deadline() {
    let q = AsyncWorkQueue::new();
    let probe = Probe::new();
    let mut get = pin!(q.get());
    // Nothing delayed: the getter waits for a notification only.
    assert!(poll_with(get.as_mut(), &probe).is_pending());
    q.add_after("late", Duration::from_secs(10));
    assert!(
        probe.take_woken(),
        "a new earliest deadline must wake waiting getters"
    );
    assert!(poll_with(get.as_mut(), &probe).is_pending());

    q.add_after("early", Duration::from_secs(1));
    assert!(probe.take_woken());
    assert!(poll_with(get.as_mut(), &probe).is_pending());

    q.add_after("later", Duration::from_secs(20));
    assert!(!probe.take_woken(), "a later deadline needs no wake-up");

    advance(Duration::from_secs(1)).await;
    assert!(
        probe.take_woken(),
        "the timer fires at the earliest deadline"
    );
    assert_eq!(poll_with(get.as_mut(), &probe), Poll::Ready(Some("early")));
}

#[tokio::test(start_paused = true)]
async fn w2_all_blocked_getters_cover_every_deadline() {
    let q: AsyncWorkQueue<u32> = AsyncWorkQueue::new();
    let getters: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        })
        .collect();
    tokio::task::yield_now().await;
    for (i, secs) in [(1u32, 5u64), (2, 1), (3, 3)] {
        q.add_after(i, Duration::from_secs(secs));
    }
    let start = tokio::time::Instant::now();
    let mut got = Vec::new();
    for g in getters {
        let item = tokio::time::timeout(Duration::from_secs(60), g)
            .await
            .expect("every delayed item is picked up")
            .expect("getter");
        got.push(item.expect("an item"));
    }
    got.sort_unstable();
    assert_eq!(got, [1, 2, 3]);
    let elapsed = tokio::time::Instant::now() - start;
    assert!(elapsed >= Duration::from_secs(5), "{elapsed:?}");
}

#[tokio::test(start_paused = true)]
async fn w2_earliest_deadline_wins() {
    let q = AsyncWorkQueue::new();
    q.add_after("a", Duration::from_secs(10));
    q.add_after("a", Duration::from_secs(1));
    q.add_after("a", Duration::from_secs(5));
    assert_eq!(q.metrics().waiting, 1);
    advance(Duration::from_secs(1)).await;
    assert_eq!(try_get(&q), Some(Some("a")));
    q.done(&"a");
    advance(Duration::from_secs(10)).await;
    assert_eq!(
        try_get(&q),
        None,
        "the later deadlines were merged into the earliest"
    );
}

/// Advances paused time until `item` can be taken, returning how long that took.
async fn time_until_ready(q: &AsyncWorkQueue<&'static str>, item: &'static str) -> Duration {
    let start = tokio::time::Instant::now();
    for _ in 0..100_000 {
        if let Some(got) = try_get(q) {
            assert_eq!(got, Some(item));
            return tokio::time::Instant::now() - start;
        }
        advance(MS).await;
    }
    panic!("{item} never became ready");
}

#[tokio::test(start_paused = true)]
async fn w2_add_rate_limited_backs_off_exponentially_and_forget_resets() {
    let q = AsyncWorkQueue::new();
    q.add("a");
    assert_eq!(try_get(&q), Some(Some("a")));
    for (attempt, expected_ms) in [5u32, 10, 20, 40, 80].into_iter().enumerate() {
        q.add_rate_limited("a");
        q.done(&"a");
        assert_eq!(q.num_requeues(&"a"), attempt as u32 + 1);
        assert_eq!(time_until_ready(&q, "a").await, expected_ms * MS);
    }
    q.forget(&"a");
    assert_eq!(q.num_requeues(&"a"), 0);
    q.add_rate_limited("a");
    q.done(&"a");
    assert_eq!(time_until_ready(&q, "a").await, 5 * MS);
}

#[tokio::test(start_paused = true)]
async fn w2_default_limiter_is_the_max_of_backoff_and_token_bucket() {
    let q: AsyncWorkQueue<u32> = AsyncWorkQueue::new();
    // Burst 100: the first 100 failures only wait their own 5 ms backoff...
    for i in 0..101 {
        q.add_rate_limited(i);
    }
    advance(5 * MS).await;
    assert_eq!(q.len(), 0, "promotion happens on get");
    let ready = std::iter::from_fn(|| try_get(&q).flatten()).count();
    assert_eq!(ready, 100);
    // ...the 101st waits for a token: 1/10 s at 10 qps.
    advance(94 * MS).await;
    assert_eq!(try_get(&q), None);
    advance(MS).await;
    assert_eq!(try_get(&q), Some(Some(100)));
}

#[tokio::test(start_paused = true)]
async fn w2_with_rate_limiter_uses_the_given_limiter() {
    let rl = ItemExponentialFailureRateLimiter::new(100 * MS, Duration::from_secs(1));
    let q = AsyncWorkQueue::with_rate_limiter(Box::new(rl));
    q.add_rate_limited("a");
    assert_eq!(time_until_ready(&q, "a").await, 100 * MS);
    q.done(&"a");
    q.add_rate_limited("a");
    assert_eq!(time_until_ready(&q, "a").await, 200 * MS);
}

/// A limiter that panics for one item, to poison the queue's lock.
struct Exploding;

impl RateLimiter<&'static str> for Exploding {
    fn when(&mut self, item: &&'static str, _now: Instant) -> Duration {
        assert_ne!(*item, "boom", "limiter exploded");
        MS
    }
    fn forget(&mut self, _item: &&'static str) {}
    fn num_requeues(&self, _item: &&'static str) -> u32 {
        0
    }
}

#[tokio::test(start_paused = true)]
async fn w2_a_panicking_rate_limiter_does_not_poison_the_queue() {
    let q = AsyncWorkQueue::with_rate_limiter(Box::new(Exploding));
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| q.add_rate_limited("boom")));
    assert!(r.is_err());
    q.add("a");
    assert_eq!(q.get().await, Some("a"));
    q.add_rate_limited("b");
    advance(MS).await;
    assert_eq!(try_get(&q), Some(Some("b")));
    let _ = format!("{q:?}");
}

// ---------------------------------------------------------------------------------------------
// W3: shutdown and drain
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn w3_shut_down_wakes_blocked_getters() {
    let q: AsyncWorkQueue<u32> = AsyncWorkQueue::new();
    let probes: Vec<_> = (0..3).map(|_| Probe::new()).collect();
    let mut getters: Vec<_> = (0..3).map(|_| Box::pin(q.get())).collect();
    for (g, p) in getters.iter_mut().zip(&probes) {
        assert!(poll_with(g.as_mut(), p).is_pending());
    }
    q.shut_down();
    assert!(q.is_shutting_down());
    for (g, p) in getters.iter_mut().zip(&probes) {
        assert!(p.take_woken());
        assert_eq!(poll_with(g.as_mut(), p), Poll::Ready(None));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn w3_shut_down_stops_workers_on_other_threads() {
    let q: AsyncWorkQueue<u32> = AsyncWorkQueue::new();
    let started = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let q = q.clone();
            let started = Arc::clone(&started);
            tokio::spawn(async move {
                started.fetch_add(1, Ordering::SeqCst);
                let mut n = 0;
                while let Some(x) = q.get().await {
                    n += 1;
                    q.done(&x);
                }
                n
            })
        })
        .collect();
    q.add(1);
    q.add(2);
    q.shut_down();
    let mut handled = 0;
    for w in workers {
        handled += tokio::time::timeout(DEADLINE, w)
            .await
            .expect("worker exits")
            .expect("worker");
    }
    // Items queued before the shutdown are still handed out.
    assert_eq!(handled, 2);
}

#[tokio::test]
async fn w3_queued_items_are_still_handed_out_after_shut_down() {
    let q = AsyncWorkQueue::new();
    q.add("a");
    q.add("b");
    q.add("c");
    assert_eq!(q.get().await, Some("a"));
    q.add("a"); // re-added while processing
    q.shut_down();
    assert_eq!(q.get().await, Some("b"));
    assert_eq!(q.get().await, Some("c"));
    q.done(&"a"); // still queued again, as in client-go
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(q.get().await, None);
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn w3_adds_after_shut_down_are_ignored() {
    let q = AsyncWorkQueue::new();
    q.add_after("delayed", Duration::from_secs(1));
    q.shut_down();
    q.add("a");
    q.add_after("b", Duration::ZERO);
    q.add_after("c", MS);
    q.add_rate_limited("d");
    assert!(q.is_empty());
    assert_eq!(q.num_requeues(&"d"), 0);
    let m = q.metrics();
    assert_eq!((m.adds, m.retries, m.waiting), (0, 1, 0));
    advance(Duration::from_secs(2)).await;
    assert_eq!(
        q.get().await,
        None,
        "delayed items are dropped by the shutdown"
    );
}

#[tokio::test]
async fn w3_shut_down_with_drain_waits_for_in_flight_items() {
    let q = AsyncWorkQueue::new();
    q.add("a");
    q.add("b");
    let a = q.get().await.expect("a");
    let b = q.get().await.expect("b");

    let probe = Probe::new();
    let mut drain = pin!(q.shut_down_with_drain());
    assert!(poll_with(drain.as_mut(), &probe).is_pending());
    assert!(q.is_shutting_down());
    q.add("c");
    assert!(q.is_empty(), "adds are ignored while draining");

    q.done(&a);
    // Woken or not, it must not be finished while "b" is in flight.
    probe.take_woken();
    assert!(poll_with(drain.as_mut(), &probe).is_pending());

    q.done(&b);
    assert!(probe.take_woken());
    assert_eq!(poll_with(drain.as_mut(), &probe), Poll::Ready(()));
    assert_eq!(q.get().await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn w3_shut_down_with_drain_resolves_only_after_done_on_another_task() {
    let q: AsyncWorkQueue<u32> = AsyncWorkQueue::new();
    q.add(7);
    let item = q.get().await.expect("queued");
    let done_called = Arc::new(AtomicBool::new(false));
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn({
        let q = q.clone();
        let done_called = Arc::clone(&done_called);
        async move {
            released.await.expect("release");
            done_called.store(true, Ordering::SeqCst);
            q.done(&item);
        }
    });
    let drain = tokio::spawn({
        let q = q.clone();
        let done_called = Arc::clone(&done_called);
        async move {
            q.shut_down_with_drain().await;
            done_called.load(Ordering::SeqCst)
        }
    });
    // Let the drain observe the shutdown before the worker finishes.
    tokio::time::timeout(DEADLINE, async {
        while !q.is_shutting_down() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("drain started");
    release.send(()).expect("worker waiting");
    let saw_done = tokio::time::timeout(DEADLINE, drain)
        .await
        .expect("drain resolves")
        .expect("drain task");
    assert!(
        saw_done,
        "drain resolved before the in-flight item was done"
    );
    worker.await.expect("worker");
}

#[tokio::test]
async fn w3_shut_down_with_drain_resolves_at_once_when_nothing_is_in_flight() {
    let q = AsyncWorkQueue::new();
    q.add("queued");
    let probe = Probe::new();
    let mut drain = pin!(q.shut_down_with_drain());
    // Queued but not handed out: nothing to wait for (client-go's semantics).
    assert_eq!(poll_with(drain.as_mut(), &probe), Poll::Ready(()));
    assert_eq!(q.get().await, Some("queued"));
}

#[tokio::test]
async fn w3_shut_down_ends_a_pending_drain() {
    let q = AsyncWorkQueue::new();
    q.add("a");
    let _a = q.get().await.expect("a");
    let probe = Probe::new();
    let mut drain = pin!(q.shut_down_with_drain());
    assert!(poll_with(drain.as_mut(), &probe).is_pending());
    q.shut_down();
    assert!(probe.take_woken());
    assert_eq!(poll_with(drain.as_mut(), &probe), Poll::Ready(()));
}

#[tokio::test]
async fn w3_drain_also_wakes_blocked_getters() {
    let q: AsyncWorkQueue<u32> = AsyncWorkQueue::new();
    let probe = Probe::new();
    let mut get = pin!(q.get());
    assert!(poll_with(get.as_mut(), &probe).is_pending());
    q.shut_down_with_drain().await;
    assert!(probe.take_woken());
    assert_eq!(poll_with(get.as_mut(), &probe), Poll::Ready(None));
}

// ---------------------------------------------------------------------------------------------
// W4: metrics
// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn w4_metrics_reflect_operations() {
    let q = AsyncWorkQueue::new();
    assert_eq!(q.metrics(), Default::default());

    q.add("a");
    q.add("b");
    q.add("a");
    let m = q.metrics();
    assert_eq!((m.depth, m.adds, m.retries), (2, 2, 0));

    q.add_after("c", Duration::from_secs(1));
    q.add_rate_limited("d");
    let m = q.metrics();
    assert_eq!((m.depth, m.adds, m.retries, m.waiting), (2, 2, 2, 2));

    advance(10 * MS).await;
    assert_eq!(q.get().await, Some("a"));
    let m = q.metrics();
    // "d" (5 ms) was promoted by the get: an add.
    assert_eq!((m.depth, m.adds, m.processing, m.waiting), (2, 3, 1, 1));
    assert_eq!(m.queue_latency.count, 1);
    assert_eq!(m.queue_latency.max, 10 * MS);

    advance(30 * MS).await;
    let m = q.metrics();
    assert_eq!(m.unfinished_work, 30 * MS);
    assert_eq!(m.longest_running_processor, 30 * MS);
    q.done(&"a");
    let m = q.metrics();
    assert_eq!((m.processing, m.work_duration.count), (0, 1));
    assert_eq!(m.work_duration.max, 30 * MS);
    assert_eq!(m.unfinished_work, Duration::ZERO);

    assert_eq!(q.get().await, Some("b"));
    assert_eq!(q.get().await, Some("d"));
    let m = q.metrics();
    assert_eq!(m.depth, 0);
    assert_eq!(m.queue_latency.count, 3);
    // "b" waited from 0 to 40 ms; "d" from its 5 ms deadline to 40 ms.
    assert_eq!(m.queue_latency.max, 40 * MS);
    assert_eq!(m.queue_latency.sum, (10 + 40 + 35) * MS);
}
