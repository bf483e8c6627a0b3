//! Unit tests for W1–W4, ported in spirit from client-go's queue_test.go,
//! delaying_queue_test.go, rate_limiting_queue_test.go, default_rate_limiters_test.go and
//! metrics_test.go. Time is a fake clock: instants derived from one base.

use std::time::{Duration, Instant};

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A fake clock: `Step` in client-go's tests.
struct Clock {
    now: Instant,
}

impl Clock {
    fn new() -> Self {
        Clock {
            now: Instant::now(),
        }
    }
    fn step(&mut self, d: Duration) -> Instant {
        self.now += d;
        self.now
    }
}

fn queue() -> WorkQueue<&'static str> {
    WorkQueue::with_default_rate_limiter()
}

fn exp_queue(base: Duration, max: Duration) -> WorkQueue<&'static str> {
    WorkQueue::new(Box::new(ItemExponentialFailureRateLimiter::new(base, max)))
}

// ---------------------------------------------------------------- W1: dedup queue

#[test]
fn w1_basic_fifo_order_of_first_add() {
    let t = Instant::now();
    let mut q = queue();
    for item in ["a", "b", "c", "a", "b"] {
        let _ = q.add(item, t);
    }
    assert_eq!(q.len(), 3);
    assert_eq!(q.get(t), GetResult::Item("a"));
    assert_eq!(q.get(t), GetResult::Item("b"));
    assert_eq!(q.get(t), GetResult::Item("c"));
    assert_eq!(q.get(t), GetResult::Empty);
    assert_eq!(q.processing(), 3);
}

/// TestBasic: producers and consumers interleaved; every item processed, none twice at once.
#[test]
fn w1_basic_producers_consumers() {
    let t = Instant::now();
    let mut q: WorkQueue<u32> = WorkQueue::with_default_rate_limiter();
    let mut workers: Vec<Option<u32>> = vec![None; 10];
    let mut processed = Vec::new();
    let mut next = 0u32;
    for round in 0..200u32 {
        // Two producers, each adding a value in 0..50.
        for _ in 0..2 {
            let _ = q.add(next % 50, t);
            next += 1;
        }
        let w = (round % 10) as usize;
        if let Some(item) = workers[w].take() {
            let _ = q.done(&item, t);
        } else if let GetResult::Item(item) = q.get(t) {
            assert!(
                !workers.contains(&Some(item)),
                "item {item} held by two workers"
            );
            processed.push(item);
            workers[w] = Some(item);
        }
    }
    q.shut_down();
    for w in workers.iter_mut() {
        if let Some(item) = w.take() {
            let _ = q.done(&item, t);
        }
    }
    while let GetResult::Item(item) = q.get(t) {
        processed.push(item);
        let _ = q.done(&item, t);
    }
    assert_eq!(q.get(t), GetResult::ShutDown);
    let mut seen: Vec<u32> = processed.clone();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen, (0..50).collect::<Vec<_>>());
}

/// TestLen.
#[test]
fn w1_add_while_queued_is_noop() {
    let t = Instant::now();
    let mut q = queue();
    assert_eq!(q.add("foo", t), AddOutcome::Queued);
    assert_eq!(q.len(), 1);
    assert_eq!(q.add("bar", t), AddOutcome::Queued);
    assert_eq!(q.len(), 2);
    assert_eq!(q.add("foo", t), AddOutcome::AlreadyQueued);
    assert_eq!(q.len(), 2);
    assert!(!q.is_empty());
}

/// TestReinsert / TestAddWhileProcessing.
#[test]
fn w1_add_while_processing_requeues_after_done() {
    let t = Instant::now();
    let mut q = queue();
    let _ = q.add("foo", t);
    assert_eq!(q.get(t), GetResult::Item("foo"));
    assert_eq!(q.add("foo", t), AddOutcome::Deferred);
    assert_eq!(q.add("foo", t), AddOutcome::Deferred);
    // Not handed to a second worker while the first holds it.
    assert_eq!(q.len(), 0);
    assert_eq!(q.get(t), GetResult::Empty);
    assert!(q.done(&"foo", t));
    assert_eq!(q.len(), 1);
    assert_eq!(q.get(t), GetResult::Item("foo"));
    assert!(!q.done(&"foo", t));
    assert_eq!(q.len(), 0);
    assert_eq!(q.processing(), 0);
}

#[test]
fn w1_requeued_item_goes_to_the_tail() {
    let t = Instant::now();
    let mut q = queue();
    let _ = q.add("a", t);
    assert_eq!(q.get(t), GetResult::Item("a"));
    let _ = q.add("a", t);
    let _ = q.add("b", t);
    assert!(q.done(&"a", t));
    assert_eq!(q.get(t), GetResult::Item("b"));
    assert_eq!(q.get(t), GetResult::Item("a"));
}

#[test]
fn w1_done_of_item_not_processing_is_noop() {
    let t = Instant::now();
    let mut q = queue();
    assert!(!q.done(&"ghost", t));
    let _ = q.add("a", t);
    // Queued but not handed out: done must not queue it a second time.
    assert!(!q.done(&"a", t));
    assert_eq!(q.len(), 1);
    assert_eq!(q.get(t), GetResult::Item("a"));
    assert_eq!(q.get(t), GetResult::Empty);
    assert!(q.is_processing(&"a"));
}

// ---------------------------------------------------------------- W2: delaying queue

/// TestSimpleQueue.
#[test]
fn w2_simple_delayed_add() {
    let mut c = Clock::new();
    let mut q = queue();
    let ready_at = c.now + ms(50);
    assert_eq!(
        q.add_after("foo", ms(50), c.now),
        AddOutcome::Delayed { ready_at }
    );
    assert_eq!(q.len(), 0);
    assert_eq!(q.waiting(), 1);
    assert_eq!(q.next_ready_at(), Some(ready_at));
    assert_eq!(q.promote_ready(c.step(ms(49))), 0);
    assert_eq!(q.get(c.now), GetResult::Empty);
    assert_eq!(q.promote_ready(c.step(ms(11))), 1);
    assert_eq!(q.len(), 1);
    assert_eq!(q.waiting(), 0);
    assert_eq!(q.next_ready_at(), None);
    assert_eq!(q.get(c.now), GetResult::Item("foo"));
    let _ = q.done(&"foo", c.now);
    c.step(Duration::from_secs(10));
    assert_eq!(q.promote_ready(c.now), 0);
    assert_eq!(q.len(), 0);
}

#[test]
fn w2_deadline_is_inclusive_and_get_promotes() {
    let t = Instant::now();
    let mut q = queue();
    let _ = q.add_after("foo", ms(50), t);
    assert_eq!(q.get(t + ms(50)), GetResult::Item("foo"));
}

/// TestDeduping.
#[test]
fn w2_deduping_keeps_earliest_deadline() {
    let mut c = Clock::new();
    let mut q = queue();
    let first = c.now + ms(50);
    assert_eq!(
        q.add_after("foo", ms(50), c.now),
        AddOutcome::Delayed { ready_at: first }
    );
    // A later deadline does not move it.
    assert_eq!(
        q.add_after("foo", ms(70), c.now),
        AddOutcome::Delayed { ready_at: first }
    );
    assert_eq!(q.waiting(), 1);
    assert_eq!(q.len(), 0);
    c.step(ms(60));
    assert_eq!(q.get(c.now), GetResult::Item("foo"));
    let _ = q.done(&"foo", c.now);
    // Past the second (discarded) deadline: nothing more.
    c.step(ms(20));
    assert_eq!(q.promote_ready(c.now), 0);
    assert_eq!(q.len(), 0);

    // Now the earlier one overrides.
    let _ = q.add_after("foo", ms(50), c.now);
    assert_eq!(
        q.add_after("foo", ms(30), c.now),
        AddOutcome::Delayed {
            ready_at: c.now + ms(30)
        }
    );
    assert_eq!(q.ready_at(&"foo"), Some(c.now + ms(30)));
    c.step(ms(40));
    assert_eq!(q.get(c.now), GetResult::Item("foo"));
    let _ = q.done(&"foo", c.now);
    c.step(ms(20));
    assert_eq!(q.promote_ready(c.now), 0);
    assert_eq!(q.len(), 0);
    assert_eq!(q.waiting(), 0);
}

/// TestAddTwoFireEarly.
#[test]
fn w2_add_two_fire_early() {
    let mut c = Clock::new();
    let mut q = queue();
    let _ = q.add_after("foo", Duration::from_secs(1), c.now);
    let _ = q.add_after("bar", ms(50), c.now);
    c.step(ms(60));
    assert_eq!(q.promote_ready(c.now), 1);
    assert_eq!(q.get(c.now), GetResult::Item("bar"));
    let _ = q.add_after("baz", Duration::from_secs(2), c.now);
    c.step(Duration::from_secs(1));
    assert_eq!(q.promote_ready(c.now), 1);
    assert_eq!(q.get(c.now), GetResult::Item("foo"));
    c.step(Duration::from_secs(2));
    assert_eq!(q.promote_ready(c.now), 1);
    assert_eq!(q.get(c.now), GetResult::Item("baz"));
}

/// TestCopyShifting: promotion follows deadlines, not insertion order.
#[test]
fn w2_copy_shifting() {
    let mut c = Clock::new();
    let mut q = queue();
    let _ = q.add_after("foo", Duration::from_secs(1), c.now);
    let _ = q.add_after("bar", ms(500), c.now);
    let _ = q.add_after("baz", ms(250), c.now);
    assert_eq!(q.len(), 0);
    assert_eq!(q.next_ready_at(), Some(c.now + ms(250)));
    c.step(Duration::from_secs(2));
    assert_eq!(q.promote_ready(c.now), 3);
    assert_eq!(q.get(c.now), GetResult::Item("baz"));
    assert_eq!(q.get(c.now), GetResult::Item("bar"));
    assert_eq!(q.get(c.now), GetResult::Item("foo"));
}

#[test]
fn w2_zero_delay_is_immediate_add() {
    let t = Instant::now();
    let mut q = queue();
    assert_eq!(q.add_after("a", Duration::ZERO, t), AddOutcome::Queued);
    assert_eq!(q.waiting(), 0);
    assert_eq!(
        q.add_after("a", Duration::ZERO, t),
        AddOutcome::AlreadyQueued
    );
    assert_eq!(q.get(t), GetResult::Item("a"));
    assert_eq!(q.add_after("a", Duration::ZERO, t), AddOutcome::Deferred);
}

#[test]
fn w2_due_item_already_queued_or_processing_is_deduped() {
    let t = Instant::now();
    let mut q = queue();
    let _ = q.add_after("a", ms(10), t);
    let _ = q.add_after("b", ms(10), t);
    // The immediate add does not cancel the delayed copy (client-go behaviour).
    assert_eq!(q.add("a", t), AddOutcome::Queued);
    assert_eq!(q.add("b", t), AddOutcome::Queued);
    assert_eq!(q.get(t), GetResult::Item("a"));
    assert_eq!(q.waiting(), 2);
    // "a" is processing (→ dirty), "b" is queued (→ no-op): nothing new is ready.
    assert_eq!(q.promote_ready(t + ms(10)), 0);
    assert_eq!(q.len(), 1);
    assert!(q.done(&"a", t + ms(10)));
    assert_eq!(q.get(t + ms(10)), GetResult::Item("b"));
    assert_eq!(q.get(t + ms(10)), GetResult::Item("a"));
}

#[test]
fn w2_equal_deadlines_fire_in_wait_order() {
    let t = Instant::now();
    let mut q = queue();
    for item in ["c", "a", "b"] {
        let _ = q.add_after(item, ms(5), t);
    }
    assert_eq!(q.promote_ready(t + ms(5)), 3);
    for item in ["c", "a", "b"] {
        assert_eq!(q.get(t + ms(5)), GetResult::Item(item));
    }
}

#[test]
fn w2_huge_delay_saturates() {
    let t = Instant::now();
    let mut q = queue();
    let out = q.add_after("never", Duration::MAX, t);
    let AddOutcome::Delayed { ready_at } = out else {
        panic!("expected Delayed, got {out:?}");
    };
    assert!(ready_at > t + Duration::from_secs(3600));
    assert_eq!(q.promote_ready(t + Duration::from_secs(3600)), 0);
}

/// TestRateLimitingQueue.
#[test]
fn w2_rate_limited_queue_uses_limiter_delay() {
    let t = Instant::now();
    let mut q = exp_queue(ms(1), Duration::from_secs(1));
    let r = q.add_rate_limited("one", t);
    assert_eq!(r.delay, ms(1));
    assert_eq!(
        r.outcome,
        AddOutcome::Delayed {
            ready_at: t + ms(1)
        }
    );
    let r = q.add_rate_limited("one", t);
    assert_eq!(r.delay, ms(2));
    // The waiting copy keeps its earlier deadline.
    assert_eq!(
        r.outcome,
        AddOutcome::Delayed {
            ready_at: t + ms(1)
        }
    );
    assert_eq!(q.num_requeues(&"one"), 2);

    assert_eq!(q.add_rate_limited("two", t).delay, ms(1));
    assert_eq!(q.add_rate_limited("two", t).delay, ms(2));

    q.forget(&"one");
    assert_eq!(q.num_requeues(&"one"), 0);
    assert_eq!(q.add_rate_limited("one", t).delay, ms(1));
}

#[test]
fn w2_rate_limited_retry_cycle() {
    let mut c = Clock::new();
    let mut q = queue();
    let _ = q.add("x", c.now);
    let mut expected = ms(5);
    for _ in 0..5 {
        assert_eq!(q.get(c.now), GetResult::Item("x"));
        let r = q.add_rate_limited("x", c.now);
        assert_eq!(r.delay, expected);
        assert!(!q.done(&"x", c.now));
        assert_eq!(q.get(c.now), GetResult::Empty);
        assert_eq!(q.next_ready_at(), Some(c.now + expected));
        c.step(expected);
        expected *= 2;
    }
    assert_eq!(q.num_requeues(&"x"), 5);
    assert_eq!(q.get(c.now), GetResult::Item("x"));
    q.forget(&"x");
    assert_eq!(q.num_requeues(&"x"), 0);
}

/// TestItemExponentialFailureRateLimiter.
#[test]
fn w2_rate_limited_backoff_doubles_and_caps() {
    let t = Instant::now();
    let mut rl = ItemExponentialFailureRateLimiter::new(ms(1), Duration::from_secs(1));
    for expected in [1, 2, 4, 8, 16] {
        assert_eq!(rl.when(&"one", t), ms(expected));
    }
    assert_eq!(rl.num_requeues(&"one"), 5);
    assert_eq!(rl.when(&"two", t), ms(1));
    assert_eq!(rl.when(&"two", t), ms(2));
    assert_eq!(rl.num_requeues(&"two"), 2);
    rl.forget(&"one");
    assert_eq!(rl.num_requeues(&"one"), 0);
    assert_eq!(rl.when(&"one", t), ms(1));

    // Caps at max: the 11th failure would be 1ms * 2^10 > 1s.
    for _ in 0..9 {
        let _ = rl.when(&"three", t);
    }
    assert_eq!(rl.when(&"three", t), ms(512));
    assert_eq!(rl.when(&"three", t), Duration::from_secs(1));
    assert_eq!(rl.when(&"three", t), Duration::from_secs(1));
}

/// TestItemExponentialFailureRateLimiterOverFlow.
#[test]
fn w2_exponential_backoff_overflow_saturates() {
    let t = Instant::now();
    let mut rl = ItemExponentialFailureRateLimiter::new(ms(1), Duration::from_secs(1000));
    for _ in 0..5 {
        let _ = rl.when(&"one", t);
    }
    assert_eq!(rl.when(&"one", t), ms(32));
    for _ in 0..1000 {
        let _ = rl.when(&"overflow1", t);
    }
    assert_eq!(rl.when(&"overflow1", t), Duration::from_secs(1000));

    let hour = Duration::from_secs(3600);
    let mut rl = ItemExponentialFailureRateLimiter::new(Duration::from_secs(60), 1000 * hour);
    for _ in 0..2 {
        let _ = rl.when(&"two", t);
    }
    assert_eq!(rl.when(&"two", t), Duration::from_secs(240));
    for _ in 0..1000 {
        let _ = rl.when(&"overflow2", t);
    }
    assert_eq!(rl.when(&"overflow2", t), 1000 * hour);

    // Extreme configuration: no overflow anywhere.
    let mut rl = ItemExponentialFailureRateLimiter::new(Duration::MAX, Duration::MAX);
    assert_eq!(rl.when(&"x", t), Duration::MAX);
    assert_eq!(rl.when(&"x", t), Duration::MAX);
    let mut rl = ItemExponentialFailureRateLimiter::new(Duration::ZERO, Duration::MAX);
    for _ in 0..200 {
        assert_eq!(rl.when(&"x", t), Duration::ZERO);
    }
    // max below base: max wins, as in client-go.
    let mut rl = ItemExponentialFailureRateLimiter::new(ms(10), ms(3));
    assert_eq!(rl.when(&"x", t), ms(3));
}

/// TestItemFastSlowRateLimiter.
#[test]
fn w2_fast_slow_rate_limiter() {
    let t = Instant::now();
    let mut rl = ItemFastSlowRateLimiter::new(ms(5), Duration::from_secs(10), 3);
    for expected in [
        ms(5),
        ms(5),
        ms(5),
        Duration::from_secs(10),
        Duration::from_secs(10),
    ] {
        assert_eq!(rl.when(&"one", t), expected);
    }
    assert_eq!(rl.num_requeues(&"one"), 5);
    assert_eq!(rl.when(&"two", t), ms(5));
    assert_eq!(rl.when(&"two", t), ms(5));
    assert_eq!(rl.num_requeues(&"two"), 2);
    rl.forget(&"one");
    assert_eq!(rl.num_requeues(&"one"), 0);
    assert_eq!(rl.when(&"one", t), ms(5));
}

/// TestMaxOfRateLimiter.
#[test]
fn w2_max_of_rate_limiter() {
    let t = Instant::now();
    let mut rl: MaxOfRateLimiter<&str> = MaxOfRateLimiter::new(vec![
        Box::new(ItemFastSlowRateLimiter::new(
            ms(5),
            Duration::from_secs(3),
            3,
        )),
        Box::new(ItemExponentialFailureRateLimiter::new(
            ms(1),
            Duration::from_secs(1),
        )),
    ]);
    assert_eq!(rl.len(), 2);
    for expected in [
        ms(5),
        ms(5),
        ms(5),
        Duration::from_secs(3),
        Duration::from_secs(3),
    ] {
        assert_eq!(rl.when(&"one", t), expected);
    }
    assert_eq!(rl.num_requeues(&"one"), 5);
    assert_eq!(rl.when(&"two", t), ms(5));
    assert_eq!(rl.when(&"two", t), ms(5));
    assert_eq!(rl.num_requeues(&"two"), 2);
    rl.forget(&"one");
    assert_eq!(rl.num_requeues(&"one"), 0);
    assert_eq!(rl.when(&"one", t), ms(5));

    let mut empty: MaxOfRateLimiter<&str> = MaxOfRateLimiter::new(Vec::new());
    assert!(empty.is_empty());
    assert_eq!(empty.when(&"x", t), Duration::ZERO);
    assert_eq!(empty.num_requeues(&"x"), 0);
}

#[test]
fn w2_bucket_rate_limiter_burst_then_qps() {
    let mut c = Clock::new();
    let mut rl = BucketRateLimiter::new(10.0, 100);
    for _ in 0..100 {
        assert_eq!(rl.reserve(c.now), Duration::ZERO);
    }
    // Tokens go negative: each reservation waits one more 1/qps.
    assert_eq!(rl.reserve(c.now), ms(100));
    assert_eq!(rl.reserve(c.now), ms(200));
    assert_eq!(rl.reserve(c.now), ms(300));
    // 300 ms later three tokens have been refilled, all already reserved.
    c.step(ms(300));
    assert_eq!(rl.reserve(c.now), ms(100));
    // A long pause refills up to the burst only.
    c.step(Duration::from_secs(3600));
    assert!((rl.tokens_at(c.now) - 100.0).abs() < 1e-9);
    for _ in 0..100 {
        assert_eq!(rl.reserve(c.now), Duration::ZERO);
    }
    assert_eq!(rl.reserve(c.now), ms(100));
    // Time going backwards adds no tokens.
    assert_eq!(rl.reserve(c.now - Duration::from_secs(1)), ms(200));
}

#[test]
fn w2_bucket_rate_limiter_partial_refill() {
    let mut c = Clock::new();
    let mut rl = BucketRateLimiter::new(10.0, 1);
    assert_eq!(rl.reserve(c.now), Duration::ZERO);
    c.step(ms(50));
    // Half a token refilled: wait the other half.
    assert_eq!(rl.reserve(c.now), ms(50));
    // The bucket ignores items.
    assert_eq!(RateLimiter::<&str>::num_requeues(&rl, &"a"), 0);
    RateLimiter::<&str>::forget(&mut rl, &"a");
}

#[test]
fn w2_bucket_rate_limiter_huge_counts_and_degenerate_configs_saturate() {
    let t = Instant::now();
    let mut rl = BucketRateLimiter::new(1e-18, 1);
    assert_eq!(rl.reserve(t), Duration::ZERO);
    for _ in 0..1000 {
        let _ = rl.reserve(t);
    }
    assert_eq!(rl.reserve(t), Duration::MAX);
    for qps in [0.0, -1.0, f64::NAN, f64::NEG_INFINITY] {
        let mut rl = BucketRateLimiter::new(qps, 2);
        assert_eq!(rl.reserve(t), Duration::ZERO);
        assert_eq!(rl.reserve(t), Duration::ZERO);
        assert_eq!(rl.reserve(t), Duration::MAX, "qps {qps}");
    }
    let mut zero_burst = BucketRateLimiter::new(10.0, 0);
    assert_eq!(zero_burst.reserve(t), Duration::MAX);
    let mut inf = BucketRateLimiter::new(f64::INFINITY, 0);
    for _ in 0..1000 {
        assert_eq!(inf.reserve(t), Duration::ZERO);
    }
    let mut big = BucketRateLimiter::new(f64::MAX, u32::MAX);
    for _ in 0..1000 {
        assert_eq!(big.reserve(t), Duration::ZERO);
    }
    // A queue fed with "never" keeps working.
    let mut q: WorkQueue<&str> = WorkQueue::new(Box::new(BucketRateLimiter::new(0.0, 0)));
    let r = q.add_rate_limited("x", t);
    assert_eq!(r.delay, Duration::MAX);
    assert!(matches!(r.outcome, AddOutcome::Delayed { .. }));
    assert_eq!(q.get(t + Duration::from_secs(3600)), GetResult::Empty);
}

#[test]
fn w2_default_controller_rate_limiter_is_max_of_backoff_and_bucket() {
    let t = Instant::now();
    let mut rl = default_controller_rate_limiter::<u32>();
    // Per-item backoff dominates while the bucket has tokens.
    assert_eq!(rl.when(&0, t), ms(5));
    assert_eq!(rl.when(&0, t), ms(10));
    // 98 more distinct items drain the burst of 100.
    for i in 1..99 {
        assert_eq!(rl.when(&i, t), ms(5));
    }
    // Now the bucket (10 qps) dominates: 101st token waits 100 ms.
    assert_eq!(rl.when(&1000, t), ms(100));
    assert_eq!(rl.when(&1001, t), ms(200));
    assert_eq!(rl.num_requeues(&0), 2);
    rl.forget(&0);
    assert_eq!(rl.num_requeues(&0), 0);
}

// ---------------------------------------------------------------- W3: shutdown

#[test]
fn w3_shut_down_ignores_adds_and_drains_queue() {
    let t = Instant::now();
    let mut q = queue();
    let _ = q.add("a", t);
    let _ = q.add("b", t);
    assert!(!q.is_shutting_down());
    q.shut_down();
    assert!(q.is_shutting_down());
    assert_eq!(q.add("c", t), AddOutcome::ShuttingDown);
    assert!(!q.add("c", t).is_accepted());
    assert_eq!(q.add_after("c", ms(1), t), AddOutcome::ShuttingDown);
    let r = q.add_rate_limited("c", t);
    assert_eq!(r.outcome, AddOutcome::ShuttingDown);
    assert_eq!(r.delay, Duration::ZERO);
    assert_eq!(q.num_requeues(&"c"), 0);
    // Get still hands out what was queued, then reports ShutDown.
    assert_eq!(q.get(t), GetResult::Item("a"));
    assert_eq!(q.get(t), GetResult::Item("b"));
    assert_eq!(q.get(t), GetResult::ShutDown);
    assert_eq!(q.get(t), GetResult::ShutDown);
    assert_eq!(q.processing(), 2);
    // Plain shut_down does not wait for processing.
    assert!(q.is_drained());
}

#[test]
fn w3_shut_down_drops_delayed_items() {
    let t = Instant::now();
    let mut q = queue();
    let _ = q.add_after("later", ms(10), t);
    let _ = q.add_rate_limited("retry", t);
    assert_eq!(q.waiting(), 2);
    q.shut_down();
    assert_eq!(q.waiting(), 0);
    assert_eq!(q.next_ready_at(), None);
    assert_eq!(q.promote_ready(t + Duration::from_secs(1)), 0);
    assert_eq!(q.get(t + Duration::from_secs(1)), GetResult::ShutDown);
}

/// TestQueueDrainageUsingShutDownWithDrain.
#[test]
fn w3_shut_down_with_drain_waits_for_processing() {
    let t = Instant::now();
    let mut q = queue();
    assert!(!q.is_drained());
    let _ = q.add("foo", t);
    let _ = q.add("bar", t);
    let first = q.get(t).item();
    let second = q.get(t).item();
    q.shut_down_with_drain();
    assert!(!q.is_drained());
    assert_eq!(q.get(t), GetResult::ShutDown);
    let _ = q.done(&first.expect("first item"), t);
    assert!(!q.is_drained());
    let _ = q.done(&second.expect("second item"), t);
    assert!(q.is_drained());
}

/// TestNoQueueDrainageUsingShutDown / TestForceQueueShutdownUsingShutDown.
#[test]
fn w3_force_shut_down_ends_drain_wait() {
    let t = Instant::now();
    let mut q = queue();
    let _ = q.add("foo", t);
    let _ = q.get(t);
    q.shut_down_with_drain();
    assert!(!q.is_drained());
    q.shut_down();
    assert!(q.is_drained());
    // And the other way round: asking to drain after a plain shutdown waits again.
    q.shut_down_with_drain();
    assert!(!q.is_drained());
    let _ = q.done(&"foo", t);
    assert!(q.is_drained());
}

/// TestQueueDrainageUsingShutDownWithDrainWithDirtyItem.
#[test]
fn w3_drain_with_dirty_item_requeues_on_done() {
    let t = Instant::now();
    let mut q = queue();
    let _ = q.add("foo", t);
    assert_eq!(q.get(t), GetResult::Item("foo"));
    assert_eq!(q.add("foo", t), AddOutcome::Deferred);
    q.shut_down_with_drain();
    assert_eq!(q.get(t), GetResult::ShutDown);
    assert!(!q.is_drained());
    // Done puts the dirty item back even though we are shutting down.
    assert!(q.done(&"foo", t));
    assert_eq!(q.get(t), GetResult::Item("foo"));
    assert!(!q.done(&"foo", t));
    assert_eq!(q.get(t), GetResult::ShutDown);
    assert!(q.is_drained());
}

#[test]
fn w3_drained_with_items_still_queued_like_client_go() {
    let t = Instant::now();
    let mut q = queue();
    let _ = q.add("a", t);
    q.shut_down_with_drain();
    // Nothing is processing: the drain wait is over, yet "a" is still handed out.
    assert!(q.is_drained());
    assert_eq!(q.get(t), GetResult::Item("a"));
    assert!(!q.is_drained());
    let _ = q.done(&"a", t);
    assert!(q.is_drained());
}

// ---------------------------------------------------------------- W4: metrics

/// TestMetrics (client-go metrics_test.go), with the fake clock.
#[test]
fn w4_metrics_track_depth_adds_latency_and_work_duration() {
    let us = Duration::from_micros;
    let mut c = Clock::new();
    let mut q = queue();
    let _ = q.add("foo", c.now);
    let m = q.metrics(c.now);
    assert_eq!((m.adds, m.depth), (1, 1));

    c.step(us(50));
    assert_eq!(q.get(c.now), GetResult::Item("foo"));
    let m = q.metrics(c.now);
    assert_eq!(m.queue_latency.count, 1);
    assert_eq!(m.queue_latency.sum, us(50));
    assert_eq!(m.depth, 0);

    // Re-adds while processing are deduplicated.
    for _ in 0..5 {
        let _ = q.add("foo", c.now);
    }
    let m = q.metrics(c.now);
    assert_eq!((m.adds, m.depth), (2, 1));

    c.step(us(25));
    assert!(q.done(&"foo", c.now));
    let m = q.metrics(c.now);
    assert_eq!(m.work_duration.count, 1);
    assert_eq!(m.work_duration.sum, us(25));
    assert_eq!(m.depth, 1);

    assert_eq!(q.get(c.now), GetResult::Item("foo"));
    let m = q.metrics(c.now);
    assert_eq!(m.queue_latency.count, 2);
    assert_eq!(m.queue_latency.max, us(50));
    assert_eq!(m.queue_latency.sum, us(75));
    assert_eq!(m.depth, 0);

    // Unfinished work.
    c.step(ms(1));
    let m = q.metrics(c.now);
    assert_eq!(m.unfinished_work, ms(1));
    assert_eq!(m.longest_running_processor, ms(1));
    assert_eq!(m.processing, 1);

    let _ = q.done(&"foo", c.now);
    let m = q.metrics(c.now);
    assert_eq!(m.work_duration.count, 2);
    assert_eq!(m.work_duration.max, ms(1));
    assert_eq!(m.work_duration.sum, us(25) + ms(1));
    assert_eq!(m.unfinished_work, Duration::ZERO);
    assert_eq!(m.longest_running_processor, Duration::ZERO);
    // Buckets: 25 µs ≤ 100 µs, 1 ms ≤ 1 ms.
    assert_eq!(m.work_duration.buckets[4], 1);
    assert_eq!(m.work_duration.buckets[5], 1);
    assert_eq!(m.work_duration.cumulative()[HISTOGRAM_BUCKETS - 1], 2);
    assert_eq!(m.work_duration.mean(), Some((us(25) + ms(1)) / 2));
}

#[test]
fn w4_metrics_unfinished_work_sums_and_longest_is_oldest() {
    let mut c = Clock::new();
    let mut q = queue();
    let _ = q.add("a", c.now);
    let _ = q.add("b", c.now);
    let _ = q.get(c.now);
    c.step(ms(10));
    let _ = q.get(c.now);
    c.step(ms(5));
    let m = q.metrics(c.now);
    assert_eq!(m.unfinished_work, ms(15) + ms(5));
    assert_eq!(m.longest_running_processor, ms(15));
}

#[test]
fn w4_metrics_retries_and_delayed_latency() {
    let mut c = Clock::new();
    let mut q = queue();
    let _ = q.add_after("a", ms(10), c.now);
    let _ = q.add_rate_limited("b", c.now);
    let _ = q.add_after("c", Duration::ZERO, c.now);
    let m = q.metrics(c.now);
    assert_eq!(m.retries, 3);
    assert_eq!(m.adds, 1); // only "c" is in the queue yet
    assert_eq!(m.waiting, 2);
    // Promotion is late (at 30 ms): latency runs from the deadline, not from promotion.
    c.step(ms(30));
    assert_eq!(q.get(c.now), GetResult::Item("c"));
    assert_eq!(q.get(c.now), GetResult::Item("b"));
    assert_eq!(q.get(c.now), GetResult::Item("a"));
    let m = q.metrics(c.now);
    assert_eq!(m.adds, 3);
    assert_eq!(m.queue_latency.count, 3);
    // c: 30 ms, b: 25 ms (deadline 5 ms), a: 20 ms (deadline 10 ms).
    assert_eq!(m.queue_latency.sum, ms(75));
    assert_eq!(m.queue_latency.max, ms(30));
    // Shutting down: retries are not counted.
    q.shut_down();
    let _ = q.add_after("d", ms(1), c.now);
    assert_eq!(q.metrics(c.now).retries, 3);
}

#[test]
fn w4_histogram_bounds_and_saturation() {
    let mut h = DurationHistogram::default();
    assert_eq!(h.mean(), None);
    h.observe(Duration::ZERO);
    h.observe(Duration::from_nanos(10));
    h.observe(Duration::from_nanos(11));
    h.observe(Duration::from_secs(10));
    h.observe(Duration::MAX);
    h.observe(Duration::MAX);
    assert_eq!(h.buckets[0], 2);
    assert_eq!(h.buckets[1], 1);
    assert_eq!(h.buckets[9], 1);
    assert_eq!(h.buckets[10], 2);
    assert_eq!(h.sum, Duration::MAX);
    assert_eq!(h.max, Duration::MAX);
    assert_eq!(h.count, 6);
    assert!(h.mean().is_some());
}

#[test]
fn debug_output_is_a_summary() {
    let t = Instant::now();
    let mut q = queue();
    let _ = q.add("a", t);
    let s = format!("{q:?}");
    assert!(s.contains("queued: 1"), "{s}");
    let s = format!("{:?}", default_controller_rate_limiter::<u8>());
    assert!(s.contains("limiters: 2"), "{s}");
}

#[test]
fn queue_is_send_for_a_mutex_or_actor_front() {
    fn assert_send<S: Send>(_: &S) {}
    let q: WorkQueue<crate::ObjectKey> = WorkQueue::default();
    assert_send(&q);
    assert_eq!(q.len(), 0);
    assert_eq!(q.next_ready_at(), None);
    assert!(!q.is_drained());
}

// ---------------------------------------------------------------- W5: owner filter

/// An owner filter that follows a shared set of owned items (ownership that changes at run
/// time, as a sharded controller's does).
fn owned_queue(
    owned: &[&'static str],
) -> (
    WorkQueue<&'static str>,
    std::sync::Arc<std::sync::Mutex<Vec<&'static str>>>,
) {
    let set = std::sync::Arc::new(std::sync::Mutex::new(owned.to_vec()));
    let mut q = exp_queue(ms(10), ms(1000));
    let s = std::sync::Arc::clone(&set);
    q.set_owner_filter(Some(Box::new(move |i| s.lock().unwrap().contains(i))));
    (q, set)
}

#[test]
fn w5_adds_of_items_not_owned_are_dropped_and_counted() {
    let t = Instant::now();
    let (mut q, _) = owned_queue(&["a"]);
    assert_eq!(q.add("a", t), AddOutcome::Queued);
    assert_eq!(q.add("b", t), AddOutcome::NotOwned);
    assert_eq!(q.add_after("b", ms(5), t), AddOutcome::NotOwned);
    let r = q.add_rate_limited("b", t);
    assert_eq!((r.delay, r.outcome), (Duration::ZERO, AddOutcome::NotOwned));
    assert_eq!(q.num_requeues(&"b"), 0, "the limiter is not consulted");
    assert!(!AddOutcome::NotOwned.is_accepted());
    let m = q.metrics(t);
    assert_eq!(
        (m.depth, m.adds, m.retries, m.dropped_not_owned),
        (1, 1, 0, 3)
    );
    assert_eq!(q.waiting(), 0);
    assert!(q.is_owned(&"a") && !q.is_owned(&"b"));
}

#[test]
fn w5_purge_removes_queued_delayed_and_rearmed_items_no_longer_owned() {
    let mut c = Clock::new();
    let t = c.now;
    let (mut q, owned) = owned_queue(&["a", "b", "c", "d", "e"]);
    let _ = q.add("a", t);
    let _ = q.add("b", t);
    assert_eq!(q.get(t), GetResult::Item("a"));
    // "a" is re-added while processed (dirty), "c" and "e" wait, "d" is queued.
    assert_eq!(q.add("a", t), AddOutcome::Deferred);
    let _ = q.add_rate_limited("c", t);
    let _ = q.add_after("e", ms(50), t);
    let _ = q.add("d", t);
    // Ownership shrinks to "b" and "e".
    *owned.lock().unwrap() = vec!["b", "e"];
    assert_eq!(q.processing_not_owned(), 1, "a is still being processed");
    assert_eq!(
        q.purge_not_owned(),
        3,
        "a (re-added), c (delayed), d (queued)"
    );
    assert_eq!(q.num_requeues(&"c"), 0, "its failures are forgotten");
    assert!(!q.done(&"a", t), "a finishes and is not queued again");
    assert_eq!(q.processing_not_owned(), 0);
    assert_eq!(q.get(t), GetResult::Item("b"));
    assert_eq!(q.get(t), GetResult::Empty);
    assert_eq!(
        q.next_ready_at(),
        Some(t + ms(50)),
        "e, still owned, still waits"
    );
    assert_eq!(q.get(c.step(ms(50))), GetResult::Item("e"));
    assert_eq!(q.metrics(c.now).dropped_not_owned, 3);
}

#[test]
fn w5_filter_is_read_again_at_promotion_and_done() {
    let mut c = Clock::new();
    let t = c.now;
    let (mut q, owned) = owned_queue(&["a", "b"]);
    let _ = q.add_after("a", ms(10), t);
    let _ = q.add("b", t);
    assert_eq!(q.get(t), GetResult::Item("b"));
    let _ = q.add("b", t);
    // Ownership moves away without a purge: nothing not owned is handed out any more.
    owned.lock().unwrap().clear();
    assert!(!q.done(&"b", t), "b is not re-queued");
    assert_eq!(
        q.get(c.step(ms(10))),
        GetResult::Empty,
        "a is dropped at its deadline"
    );
    assert_eq!(q.metrics(c.now).dropped_not_owned, 2);
    assert_eq!((q.len(), q.waiting(), q.processing()), (0, 0, 0));
}

#[test]
fn w5_without_a_filter_nothing_is_dropped() {
    let t = Instant::now();
    let mut q = queue();
    let _ = q.add("a", t);
    assert_eq!(q.purge_not_owned(), 0);
    assert_eq!(q.processing_not_owned(), 0);
    assert_eq!(q.get(t), GetResult::Item("a"));
    q.set_owner_filter(Some(Box::new(|_| false)));
    assert_eq!(q.processing_not_owned(), 1);
    q.set_owner_filter(None);
    assert_eq!(q.add("z", t), AddOutcome::Queued);
    assert_eq!(q.metrics(t).dropped_not_owned, 0);
}
