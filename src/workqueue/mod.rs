//! client-go's workqueue as clock-injected state machines (docs/semantics.md W1–W4).
//!
//! - [`WorkQueue`]: client-go's rate-limiting delaying queue in one struct: dedup through the
//!   dirty and processing sets (W1), delayed adds with the earliest deadline winning (W2),
//!   rate-limited adds and `forget` (W2), `shut_down` / `shut_down_with_drain` (W3) and
//!   metrics (W4); optionally an owner filter for a sharded controller's replica (W5): keys
//!   it does not own are dropped, and purged when ownership shrinks.
//! - [`RateLimiter`] and client-go's limiters: [`ItemExponentialFailureRateLimiter`],
//!   [`ItemFastSlowRateLimiter`], [`BucketRateLimiter`], [`MaxOfRateLimiter`] and
//!   [`default_controller_rate_limiter`].
//! - [`WorkQueueMetrics`] and [`DurationHistogram`].
//!
//! Nothing here blocks, spawns or reads a clock: time is passed in as `now: Instant`, and
//! every method returns what an async front needs to drive workers (whether an item became
//! ready, the next deadline, whether a shutdown has drained). The front owns the waiting:
//!
//! ```text
//! worker loop:   lock; match q.get(now) { Item(x) => { unlock; work(x); lock; q.done(&x, now) }
//!                                         Empty => wait for a wake-up or q.next_ready_at(),
//!                                         ShutDown => exit }
//! wake a worker: when an add returns AddOutcome::Queued, done() returns true,
//!                or promote_ready() returns n > 0
//! ```

mod delaying;
mod metrics;
mod queue;
mod rate_limiter;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use metrics::{DurationHistogram, HISTOGRAM_BOUNDS, HISTOGRAM_BUCKETS, WorkQueueMetrics};
pub use queue::{AddOutcome, GetResult, OwnerFilter, RateLimitedAdd, WorkQueue};
pub use rate_limiter::{
    BucketRateLimiter, DEFAULT_BASE_DELAY, DEFAULT_BURST, DEFAULT_MAX_DELAY, DEFAULT_QPS,
    ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter, MaxOfRateLimiter, RateLimiter,
    default_controller_rate_limiter,
};
