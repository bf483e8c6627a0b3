//! The reflector's restart backoff (docs/semantics.md R8, S1): client-go's
//! `NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)`.
//!
//! Each failure doubles the base delay from 800 ms up to 30 s; the delay handed out is the base
//! plus up to 100 % jitter (so a fleet of informers does not relist in lockstep); after two
//! minutes without a failure the base resets to 800 ms. Time and randomness are injected, so
//! the policy is tested deterministically.
//!
//! One exception to the grown delay (R9): the relist after a 410 that answers the first request
//! following an outage waits only [`Backoff::recovery_delay`], a jitter in
//! `[0, recovery_jitter)`, because the 410 itself proves the server is back.

use std::time::{Duration, Instant};

/// Parameters of [`Backoff`].
#[derive(Clone, Debug, PartialEq)]
pub struct BackoffConfig {
    /// First delay (800 ms).
    pub initial: Duration,
    /// Cap of the base delay (30 s).
    pub max: Duration,
    /// Quiet time after which the delay resets (2 min).
    pub reset_after: Duration,
    /// Growth factor per failure (2.0).
    pub factor: f64,
    /// Jitter fraction: the delay is `base * (1 + jitter * r)` for r in [0, 1) (1.0).
    pub jitter: f64,
    /// Bound of the delay before the recovery relist (R9): after an outage, the relist that a
    /// 410 asks for waits a uniform `[0, recovery_jitter)` instead of the grown backoff, so a
    /// fleet of clients does not relist at once when the API server returns (1 s).
    pub recovery_jitter: Duration,
    /// Bound of the wait after the server's return is announced (R11): a reflector backing off
    /// after an outage makes its next request due within a uniform `[0, return_jitter)`, so the
    /// informers of one client do not all ask in the same millisecond (250 ms).
    pub return_jitter: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            reset_after: Duration::from_secs(120),
            factor: 2.0,
            jitter: 1.0,
            recovery_jitter: Duration::from_secs(1),
            return_jitter: Duration::from_millis(250),
        }
    }
}

/// Exponential backoff with jitter and reset (R8).
///
/// ```
/// use std::time::{Duration, Instant};
/// use kinformer::backoff::{Backoff, BackoffConfig};
/// let mut b = Backoff::new(BackoffConfig { jitter: 0.0, ..Default::default() });
/// let t = Instant::now();
/// assert_eq!(b.next_delay(t, 0.0), Duration::from_millis(800));
/// assert_eq!(b.next_delay(t, 0.0), Duration::from_millis(1600));
/// // two quiet minutes later it starts over
/// assert_eq!(b.next_delay(t + Duration::from_secs(121), 0.0), Duration::from_millis(800));
/// ```
#[derive(Clone, Debug)]
pub struct Backoff {
    config: BackoffConfig,
    base: Duration,
    last_failure: Option<Instant>,
}

impl Backoff {
    /// A backoff at its initial delay.
    pub fn new(config: BackoffConfig) -> Self {
        Backoff {
            base: config.initial,
            config,
            last_failure: None,
        }
    }

    /// Records a failure at `now` and returns how long to wait before retrying.
    /// `random` is a uniform sample in [0, 1) used for jitter (clamped).
    pub fn next_delay(&mut self, now: Instant, random: f64) -> Duration {
        if let Some(last) = self.last_failure
            && now.saturating_duration_since(last) >= self.config.reset_after
        {
            self.base = self.config.initial;
        }
        self.last_failure = Some(now);
        let base = self.base.min(self.config.max);
        let r = if random.is_finite() {
            random.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let jittered = base.mul_f64(1.0 + self.config.jitter.max(0.0) * r);
        let grown = self.base.mul_f64(self.config.factor.max(1.0));
        self.base = grown.min(self.config.max);
        jittered
    }

    /// The delay before a recovery relist (R9): `recovery_jitter * random`, `random` a uniform
    /// sample in [0, 1) (clamped). Neither grows nor resets the backoff: a failure of the relist
    /// itself backs off from where the outage left it.
    pub fn recovery_delay(&self, random: f64) -> Duration {
        let r = if random.is_finite() {
            random.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.config.recovery_jitter.mul_f64(r)
    }

    /// The wait after the server's return is announced (R11): `return_jitter * random`,
    /// `random` a uniform sample in [0, 1) (clamped).
    pub fn return_delay(&self, random: f64) -> Duration {
        let r = if random.is_finite() {
            random.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.config.return_jitter.mul_f64(r)
    }

    /// Forgets past failures (e.g. after a manual restart, or the server's return, R11).
    pub fn reset(&mut self) {
        self.base = self.config.initial;
        self.last_failure = None;
    }

    /// The base delay the next failure would start from (without jitter).
    pub fn current_base(&self) -> Duration {
        self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_jitter() -> Backoff {
        Backoff::new(BackoffConfig {
            jitter: 0.0,
            ..Default::default()
        })
    }

    #[test]
    fn r8_backoff_doubles_from_800ms_and_caps_at_30s() {
        let mut b = no_jitter();
        let t = Instant::now();
        let got: Vec<u64> = (0..8)
            .map(|i| b.next_delay(t + Duration::from_secs(i), 0.0).as_millis() as u64)
            .collect();
        assert_eq!(got, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
    }

    #[test]
    fn r8_backoff_resets_after_two_quiet_minutes() {
        let mut b = no_jitter();
        let t = Instant::now();
        for i in 0..5 {
            b.next_delay(t + Duration::from_secs(i), 0.0);
        }
        let later = t + Duration::from_secs(4 + 120);
        assert_eq!(b.next_delay(later, 0.0), Duration::from_millis(800));
        // just under two minutes does not reset
        let mut b = no_jitter();
        b.next_delay(t, 0.0);
        assert_eq!(
            b.next_delay(t + Duration::from_secs(119), 0.0),
            Duration::from_millis(1600)
        );
    }

    #[test]
    fn r8_backoff_jitter_adds_up_to_the_base() {
        let mut b = Backoff::new(BackoffConfig::default());
        let t = Instant::now();
        assert_eq!(b.next_delay(t, 0.5), Duration::from_millis(1200));
        let mut b = Backoff::new(BackoffConfig::default());
        // out-of-range and NaN samples are clamped, never panic
        assert_eq!(b.next_delay(t, 7.0), Duration::from_millis(1600));
        let mut b = Backoff::new(BackoffConfig::default());
        assert_eq!(b.next_delay(t, f64::NAN), Duration::from_millis(800));
    }

    #[test]
    fn r9_the_recovery_delay_is_a_jitter_below_its_bound_and_leaves_the_backoff_alone() {
        let mut b = no_jitter();
        let t = Instant::now();
        for i in 0..4 {
            b.next_delay(t + Duration::from_secs(i), 0.0);
        }
        let grown = b.current_base();
        assert_eq!(b.recovery_delay(0.0), Duration::ZERO);
        assert_eq!(b.recovery_delay(0.25), Duration::from_millis(250));
        assert!(b.recovery_delay(0.999_999) < Duration::from_secs(1));
        assert_eq!(b.recovery_delay(f64::NAN), Duration::ZERO);
        assert_eq!(b.recovery_delay(9.0), Duration::from_secs(1));
        assert_eq!(b.current_base(), grown, "the outage's backoff is kept");
    }
}
