//! Rate limiters: how long an item waits before it is retried (docs/semantics.md W2).
//!
//! Ports of client-go's `workqueue/default_rate_limiters.go` with the clock injected: every
//! [`RateLimiter::when`] receives `now`, so the token bucket is deterministic under test.
//! All arithmetic saturates: no limiter panics or overflows, whatever the failure count or the
//! configuration (a zero rate or a zero burst yields [`Duration::MAX`], "never", like Go's
//! `InfDuration`).

use std::{
    collections::HashMap,
    fmt,
    hash::Hash,
    time::{Duration, Instant},
};

/// Decides how long an item waits before it is (re)queued, and tracks per-item failures.
///
/// Mirrors client-go's `TypedRateLimiter`: `when` is called once per retry (it records a
/// failure), `forget` is called when the item succeeded, `num_requeues` reports the failures.
pub trait RateLimiter<T> {
    /// The delay before `item` may be processed again; records one more failure for it.
    fn when(&mut self, item: &T, now: Instant) -> Duration;
    /// Stops tracking `item`: its failure count goes back to zero.
    fn forget(&mut self, item: &T);
    /// How many times `item` has been through [`when`](RateLimiter::when) since it was last
    /// forgotten.
    fn num_requeues(&self, item: &T) -> u32;
}

impl<T, R: RateLimiter<T> + ?Sized> RateLimiter<T> for Box<R> {
    fn when(&mut self, item: &T, now: Instant) -> Duration {
        (**self).when(item, now)
    }
    fn forget(&mut self, item: &T) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

/// `base * 2^failures`, capped at `max`, never overflowing.
fn exponential_backoff(base: Duration, max: Duration, failures: u32) -> Duration {
    let base_ns = base.as_nanos();
    if base_ns == 0 {
        return Duration::ZERO.min(max);
    }
    // base_ns < 2^94 and the shift is < 128, so checked_mul catches every overflow.
    let shifted = 1u128
        .checked_shl(failures)
        .and_then(|factor| base_ns.checked_mul(factor));
    match shifted {
        Some(ns) if ns < max.as_nanos() => duration_from_nanos(ns),
        _ => max,
    }
}

/// Converts nanoseconds to a Duration, saturating at [`Duration::MAX`].
fn duration_from_nanos(ns: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    match u64::try_from(ns / NANOS_PER_SEC) {
        // The remainder is < 1e9, so it fits a u32.
        Ok(secs) => Duration::new(secs, (ns % NANOS_PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

/// Per-item exponential backoff: `base * 2^failures`, capped at `max` (client-go's
/// `ItemExponentialFailureRateLimiter`).
///
/// ```
/// use std::time::{Duration, Instant};
/// use kinformer::workqueue::{ItemExponentialFailureRateLimiter, RateLimiter};
///
/// let mut rl = ItemExponentialFailureRateLimiter::new(Duration::from_millis(5), Duration::from_secs(1000));
/// let now = Instant::now();
/// assert_eq!(rl.when(&"a", now), Duration::from_millis(5));
/// assert_eq!(rl.when(&"a", now), Duration::from_millis(10));
/// assert_eq!(rl.when(&"a", now), Duration::from_millis(20));
/// assert_eq!(rl.num_requeues(&"a"), 3);
/// rl.forget(&"a");
/// assert_eq!(rl.when(&"a", now), Duration::from_millis(5));
/// ```
#[derive(Debug, Clone)]
pub struct ItemExponentialFailureRateLimiter<T> {
    base: Duration,
    max: Duration,
    failures: HashMap<T, u32>,
}

impl<T: Eq + Hash> ItemExponentialFailureRateLimiter<T> {
    /// Backoff starting at `base`, doubling per failure, never above `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: HashMap::new(),
        }
    }

    /// The first delay.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The cap.
    pub fn max(&self) -> Duration {
        self.max
    }
}

impl<T: Eq + Hash + Clone> RateLimiter<T> for ItemExponentialFailureRateLimiter<T> {
    fn when(&mut self, item: &T, _now: Instant) -> Duration {
        let failures = match self.failures.get_mut(item) {
            Some(n) => {
                let exp = *n;
                *n = n.saturating_add(1);
                exp
            }
            None => {
                self.failures.insert(item.clone(), 1);
                0
            }
        };
        exponential_backoff(self.base, self.max, failures)
    }

    fn forget(&mut self, item: &T) {
        self.failures.remove(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.get(item).copied().unwrap_or(0)
    }
}

/// `fast` for the first `max_fast_attempts` failures of an item, `slow` afterwards (client-go's
/// `ItemFastSlowRateLimiter`).
///
/// ```
/// use std::time::{Duration, Instant};
/// use kinformer::workqueue::{ItemFastSlowRateLimiter, RateLimiter};
///
/// let (fast, slow) = (Duration::from_millis(5), Duration::from_secs(10));
/// let mut rl = ItemFastSlowRateLimiter::new(fast, slow, 2);
/// let now = Instant::now();
/// assert_eq!(rl.when(&1, now), fast);
/// assert_eq!(rl.when(&1, now), fast);
/// assert_eq!(rl.when(&1, now), slow);
/// ```
#[derive(Debug, Clone)]
pub struct ItemFastSlowRateLimiter<T> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
    failures: HashMap<T, u32>,
}

impl<T: Eq + Hash> ItemFastSlowRateLimiter<T> {
    /// `fast` for attempts `1..=max_fast_attempts`, then `slow`.
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        Self {
            fast,
            slow,
            max_fast_attempts,
            failures: HashMap::new(),
        }
    }
}

impl<T: Eq + Hash + Clone> RateLimiter<T> for ItemFastSlowRateLimiter<T> {
    fn when(&mut self, item: &T, _now: Instant) -> Duration {
        let n = self.failures.entry(item.clone()).or_insert(0);
        *n = n.saturating_add(1);
        if *n <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&mut self, item: &T) {
        self.failures.remove(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.get(item).copied().unwrap_or(0)
    }
}

/// An overall token bucket shared by all items (client-go's `BucketRateLimiter` over
/// `golang.org/x/time/rate`).
///
/// The bucket starts full with `burst` tokens and refills at `qps` tokens per second up to
/// `burst`. Each [`when`](RateLimiter::when) reserves one token: the delay is zero while tokens
/// remain, otherwise the time until the reserved token will have been refilled (tokens go
/// negative, exactly like `rate.Limiter.Reserve().Delay()`). It does not track items:
/// `num_requeues` is always 0 and `forget` does nothing.
///
/// Edge cases (no panics): an infinite `qps` never delays; a zero, negative or NaN `qps`, or a
/// zero `burst`, gives [`Duration::MAX`] once the bucket is empty (Go's `InfDuration`).
/// Delays saturate at [`Duration::MAX`]. An injected `now` earlier than a previous one adds no
/// tokens (time never runs backwards for the bucket).
///
/// ```
/// use std::time::{Duration, Instant};
/// use kinformer::workqueue::{BucketRateLimiter, RateLimiter};
///
/// let mut rl = BucketRateLimiter::new(10.0, 2);
/// let now = Instant::now();
/// assert_eq!(RateLimiter::<()>::when(&mut rl, &(), now), Duration::ZERO);
/// assert_eq!(RateLimiter::<()>::when(&mut rl, &(), now), Duration::ZERO);
/// assert_eq!(RateLimiter::<()>::when(&mut rl, &(), now), Duration::from_millis(100));
/// assert_eq!(RateLimiter::<()>::when(&mut rl, &(), now), Duration::from_millis(200));
/// ```
#[derive(Debug, Clone)]
pub struct BucketRateLimiter {
    qps: f64,
    burst: u32,
    tokens: f64,
    last: Option<Instant>,
}

impl BucketRateLimiter {
    /// A full bucket of `burst` tokens refilled at `qps` tokens per second.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst,
            tokens: f64::from(burst),
            last: None,
        }
    }

    /// Tokens per second.
    pub fn qps(&self) -> f64 {
        self.qps
    }

    /// Bucket size.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Tokens available at `now` (negative when reservations are outstanding), without
    /// reserving one.
    pub fn tokens_at(&self, now: Instant) -> f64 {
        let elapsed = match self.last {
            Some(last) => now.saturating_duration_since(last),
            None => Duration::MAX,
        };
        let refill = if self.qps > 0.0 {
            elapsed.as_secs_f64() * self.qps
        } else {
            0.0
        };
        (self.tokens + refill).min(f64::from(self.burst))
    }

    /// Reserves one token at `now` and returns how long the caller must wait for it.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        if self.qps == f64::INFINITY {
            return Duration::ZERO;
        }
        if self.burst == 0 {
            // Go: a reservation of 1 > burst is not ok; its Delay() is InfDuration.
            return Duration::MAX;
        }
        let tokens = self.tokens_at(now) - 1.0;
        self.tokens = tokens;
        self.last = Some(self.last.map_or(now, |last| last.max(now)));
        if tokens >= 0.0 {
            Duration::ZERO
        } else if self.qps > 0.0 {
            Duration::try_from_secs_f64(-tokens / self.qps).unwrap_or(Duration::MAX)
        } else {
            Duration::MAX
        }
    }
}

impl<T> RateLimiter<T> for BucketRateLimiter {
    fn when(&mut self, _item: &T, now: Instant) -> Duration {
        self.reserve(now)
    }

    fn forget(&mut self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

/// The longest delay of several limiters (client-go's `MaxOfRateLimiter`).
///
/// `when` consults every limiter (each records the failure) and returns the maximum;
/// `num_requeues` is the maximum of theirs; `forget` forgets in all. With no limiters the delay
/// is zero.
pub struct MaxOfRateLimiter<T> {
    limiters: Vec<Box<dyn RateLimiter<T> + Send>>,
}

impl<T> MaxOfRateLimiter<T> {
    /// Combines `limiters`.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T> + Send>>) -> Self {
        Self { limiters }
    }

    /// Adds one more limiter.
    pub fn push(&mut self, limiter: Box<dyn RateLimiter<T> + Send>) {
        self.limiters.push(limiter);
    }

    /// Number of combined limiters.
    pub fn len(&self) -> usize {
        self.limiters.len()
    }

    /// True when no limiter is combined (every delay is zero).
    pub fn is_empty(&self) -> bool {
        self.limiters.is_empty()
    }
}

impl<T> fmt::Debug for MaxOfRateLimiter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaxOfRateLimiter")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

impl<T> RateLimiter<T> for MaxOfRateLimiter<T> {
    fn when(&mut self, item: &T, now: Instant) -> Duration {
        self.limiters
            .iter_mut()
            .map(|l| l.when(item, now))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    fn forget(&mut self, item: &T) {
        for l in &mut self.limiters {
            l.forget(item);
        }
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

/// Base delay of [`default_controller_rate_limiter`]'s per-item backoff: 5 ms.
pub const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(5);
/// Cap of [`default_controller_rate_limiter`]'s per-item backoff: 1000 s.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(1000);
/// Rate of [`default_controller_rate_limiter`]'s overall bucket: 10 per second.
pub const DEFAULT_QPS: f64 = 10.0;
/// Burst of [`default_controller_rate_limiter`]'s overall bucket: 100.
pub const DEFAULT_BURST: u32 = 100;

/// client-go's `DefaultControllerRateLimiter`: the max of a per-item exponential backoff
/// (5 ms doubling to 1000 s) and an overall token bucket (10 qps, burst 100).
///
/// ```
/// use std::time::{Duration, Instant};
/// use kinformer::workqueue::{default_controller_rate_limiter, RateLimiter};
///
/// let mut rl = default_controller_rate_limiter::<&str>();
/// let now = Instant::now();
/// assert_eq!(rl.when(&"a", now), Duration::from_millis(5));
/// assert_eq!(rl.when(&"a", now), Duration::from_millis(10));
/// assert_eq!(rl.num_requeues(&"a"), 2);
/// ```
pub fn default_controller_rate_limiter<T>() -> MaxOfRateLimiter<T>
where
    T: Eq + Hash + Clone + Send + 'static,
{
    MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(
            DEFAULT_BASE_DELAY,
            DEFAULT_MAX_DELAY,
        )),
        Box::new(BucketRateLimiter::new(DEFAULT_QPS, DEFAULT_BURST)),
    ])
}
