//! Live series for the debug page: bounded rings of samples taken from counters, gauges and
//! latency histograms, with time passed in.
//!
//! A [`SeriesSet`] turns readings of live figures (an informer's watch event counter, a FIFO's
//! depth, a handler's latency histogram, a workqueue's work duration) into points a person
//! reads at a glance: a gauge as read, a counter as its rate per second since the previous
//! sample, a histogram as the mean of the observations made since the previous sample. It
//! samples only when asked and at most once per [`SeriesConfig::interval`], so whoever drives
//! it (a timer, a page's requests, both) cannot make it sample faster or grow.
//!
//! Memory is bounded: each series keeps at most [`SeriesConfig::capacity`] points in a ring
//! allocated once at that size (a point is an `Instant` and an `f64`, 24 bytes on Linux: about
//! 7.2 KB per series with the default 300), and
//! a series whose source was not read in a sample (an informer shut down, a workqueue dropped)
//! is forgotten at that sample. So the total is at most
//! `capacity × 24 B × the number of series of the live sources`.

use std::{
    collections::{BTreeMap, VecDeque},
    time::{Duration, Instant},
};

/// One reading of a live figure, and how it becomes a point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reading {
    /// A gauge: the point is the value read.
    Gauge(f64),
    /// A monotonic counter: the point is its rate per second since the previous reading. A
    /// counter lower than before was reset (its source was replaced): it counts from 0 again,
    /// so its whole value is the increase, as Prometheus' `rate()` takes it.
    Counter(u64),
    /// A latency histogram's observation count and sum: the point is the mean latency (in
    /// seconds) of the observations made since the previous reading; no point for an
    /// interval without observations (nothing was handled: there is no latency to show). A
    /// count or sum lower than before is a reset, as for [`Counter`](Self::Counter).
    Histogram {
        /// Observations so far.
        count: u64,
        /// Their sum.
        sum: Duration,
    },
}

/// One point of a series: when it was sampled and its value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// When it was sampled.
    pub at: Instant,
    /// A gauge's value, a counter's rate per second, or a mean latency in seconds.
    pub value: f64,
}

/// How often a [`SeriesSet`] samples and how many points each series keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeriesConfig {
    /// The least time between two samples (a request for one sooner is ignored), less a tenth
    /// of itself: a driver ticking every `interval` with some jitter must not skip every
    /// other sample.
    pub interval: Duration,
    /// Points kept per series (a ring: the oldest goes first). At least 2 are kept.
    pub capacity: usize,
}

impl Default for SeriesConfig {
    /// One sample per second, five minutes of them.
    fn default() -> Self {
        SeriesConfig {
            interval: Duration::from_secs(1),
            capacity: 300,
        }
    }
}

impl SeriesConfig {
    /// How far back the series reach: `interval × capacity` (5 minutes by default).
    pub fn window(&self) -> Duration {
        self.interval
            .saturating_mul(u32::try_from(self.capacity.max(2)).unwrap_or(u32::MAX))
    }
}

/// One series: its last reading and a bounded ring of points.
#[derive(Clone, Debug, Default)]
pub struct Series {
    prev: Option<(Instant, Reading)>,
    points: VecDeque<Point>,
}

impl Series {
    /// The points kept, oldest first.
    pub fn points(&self) -> impl DoubleEndedIterator<Item = &Point> + ExactSizeIterator {
        self.points.iter()
    }

    /// The newest point's value.
    pub fn last(&self) -> Option<f64> {
        self.points.back().map(|p| p.value)
    }

    /// Records `reading` taken at `now`: at most one point, dropping the oldest beyond
    /// `capacity` and those older than `window`.
    fn record(&mut self, now: Instant, reading: Reading, capacity: usize, window: Duration) {
        let value = match (reading, self.prev) {
            (Reading::Gauge(v), _) => Some(v),
            (Reading::Counter(v), Some((then, Reading::Counter(before)))) => {
                let dt = now.saturating_duration_since(then).as_secs_f64();
                // A lower counter restarted from 0: all of it is new.
                let increase = v.checked_sub(before).unwrap_or(v);
                (dt > 0.0).then(|| increase as f64 / dt)
            }
            (
                Reading::Histogram { count, sum },
                Some((_, Reading::Histogram { count: c0, sum: s0 })),
            ) => {
                let (n, total) = match (count.checked_sub(c0), sum.checked_sub(s0)) {
                    (Some(n), Some(total)) => (n, total),
                    // Reset: the histogram counts from empty again.
                    _ => (count, sum),
                };
                (n > 0).then(|| total.as_secs_f64() / n as f64)
            }
            // A first reading (or one of another kind) only sets the base of the next delta.
            _ => None,
        };
        self.prev = Some((now, reading));
        if let Some(value) = value {
            if self.points.capacity() == 0 {
                // Allocated once at its bound (one over: a point is pushed before the oldest
                // goes), not grown by doubling past it.
                self.points.reserve_exact(capacity.max(2) + 1);
            }
            self.points.push_back(Point { at: now, value });
        }
        while self.points.len() > capacity.max(2)
            || self
                .points
                .front()
                .is_some_and(|p| now.saturating_duration_since(p.at) > window)
        {
            self.points.pop_front();
        }
    }
}

/// Series by key, sampled together at most once per interval (see the [module](self)).
///
/// ```
/// use std::time::{Duration, Instant};
/// use kinformer::series::{Reading, SeriesConfig, SeriesSet};
///
/// let mut set = SeriesSet::new(SeriesConfig::default());
/// let t0 = Instant::now();
/// assert!(set.sample(t0, [("events", Reading::Counter(100))]));
/// // Too soon: ignored.
/// assert!(!set.sample(t0 + Duration::from_millis(300), [("events", Reading::Counter(150))]));
/// assert!(set.sample(t0 + Duration::from_secs(2), [("events", Reading::Counter(160))]));
/// assert_eq!(set.get(&"events").and_then(|s| s.last()), Some(30.0)); // 60 events in 2 s
/// ```
#[derive(Clone, Debug)]
pub struct SeriesSet<K> {
    config: SeriesConfig,
    last_sample: Option<Instant>,
    series: BTreeMap<K, Series>,
}

impl<K: Ord> SeriesSet<K> {
    /// An empty set sampling as `config` says.
    pub fn new(config: SeriesConfig) -> Self {
        SeriesSet {
            config,
            last_sample: None,
            series: BTreeMap::new(),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> SeriesConfig {
        self.config
    }

    /// True when a sample at `now` would be taken: none yet, or the interval (less a tenth of
    /// it, for a driver's jitter) passed since the last one.
    pub fn is_due(&self, now: Instant) -> bool {
        let least = self
            .config
            .interval
            .saturating_sub(self.config.interval / 10);
        self.last_sample
            .is_none_or(|last| now.saturating_duration_since(last) >= least)
    }

    /// Takes a sample at `now` from `readings` if one is due (else ignores them and returns
    /// false). Series not read in this sample are forgotten: their source is gone.
    pub fn sample(
        &mut self,
        now: Instant,
        readings: impl IntoIterator<Item = (K, Reading)>,
    ) -> bool {
        if !self.is_due(now) {
            return false;
        }
        self.last_sample = Some(now);
        let mut old = std::mem::take(&mut self.series);
        let window = self.config.window();
        for (key, reading) in readings {
            let mut series = old.remove(&key).unwrap_or_default();
            series.record(now, reading, self.config.capacity, window);
            self.series.insert(key, series);
        }
        true
    }

    /// The series under `key`.
    pub fn get(&self, key: &K) -> Option<&Series> {
        self.series.get(key)
    }

    /// Every series, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &Series)> {
        self.series.iter()
    }

    /// Number of series.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// True when there is no series.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn values(set: &SeriesSet<&'static str>, key: &'static str) -> Vec<f64> {
        set.get(&key)
            .map(|s| s.points().map(|p| p.value).collect())
            .unwrap_or_default()
    }

    #[test]
    fn counter_rates_come_from_deltas_over_the_elapsed_time() {
        let mut set = SeriesSet::new(SeriesConfig::default());
        let t0 = Instant::now();
        set.sample(t0, [("c", Reading::Counter(10))]);
        assert!(values(&set, "c").is_empty(), "one reading has no rate");
        set.sample(t0 + S, [("c", Reading::Counter(15))]);
        // A gap of 4 s (nobody asked): the rate is the average over it.
        set.sample(t0 + 5 * S, [("c", Reading::Counter(35))]);
        set.sample(t0 + 6 * S, [("c", Reading::Counter(35))]);
        assert_eq!(values(&set, "c"), [5.0, 5.0, 0.0]);
        let at: Vec<_> = set.get(&"c").expect("c").points().map(|p| p.at).collect();
        assert_eq!(at, [t0 + S, t0 + 5 * S, t0 + 6 * S]);
    }

    #[test]
    fn counter_reset_counts_from_zero() {
        let mut set = SeriesSet::new(SeriesConfig::default());
        let t0 = Instant::now();
        set.sample(t0, [("c", Reading::Counter(1000))]);
        // The source was replaced: its counter restarted and reached 4 within the second.
        set.sample(t0 + S, [("c", Reading::Counter(4))]);
        set.sample(t0 + 2 * S, [("c", Reading::Counter(10))]);
        assert_eq!(values(&set, "c"), [4.0, 6.0]);
    }

    #[test]
    fn histogram_means_come_from_count_and_sum_deltas() {
        let mut set = SeriesSet::new(SeriesConfig::default());
        let t0 = Instant::now();
        let h = |count, ms| Reading::Histogram {
            count,
            sum: Duration::from_millis(ms),
        };
        set.sample(t0, [("h", h(100, 50_000))]);
        // 4 observations of 10, 20, 30, 40 ms: mean 25 ms, whatever came before.
        set.sample(t0 + S, [("h", h(104, 50_100))]);
        // Nothing handled: no point rather than a made-up zero.
        set.sample(t0 + 2 * S, [("h", h(104, 50_100))]);
        // Reset: a new histogram with 2 observations summing 8 ms.
        set.sample(t0 + 3 * S, [("h", h(2, 8))]);
        let v = values(&set, "h");
        assert_eq!(v.len(), 2, "{v:?}");
        assert!((v[0] - 0.025).abs() < 1e-12, "{v:?}");
        assert!((v[1] - 0.004).abs() < 1e-12, "{v:?}");
    }

    #[test]
    fn gauges_are_points_as_read() {
        let mut set = SeriesSet::new(SeriesConfig::default());
        let t0 = Instant::now();
        set.sample(t0, [("g", Reading::Gauge(3.0))]);
        set.sample(t0 + S, [("g", Reading::Gauge(7.0))]);
        assert_eq!(values(&set, "g"), [3.0, 7.0]);
    }

    #[test]
    fn samples_at_most_once_per_interval_with_a_tenth_of_slack() {
        let mut set = SeriesSet::new(SeriesConfig::default());
        let t0 = Instant::now();
        assert!(set.is_due(t0));
        assert!(set.sample(t0, [("g", Reading::Gauge(1.0))]));
        assert!(!set.sample(
            t0 + Duration::from_millis(500),
            [("g", Reading::Gauge(2.0))]
        ));
        assert!(!set.is_due(t0 + Duration::from_millis(899)));
        // A tick 50 ms early (jitter) still samples.
        assert!(set.sample(
            t0 + Duration::from_millis(950),
            [("g", Reading::Gauge(3.0))]
        ));
        assert_eq!(values(&set, "g"), [1.0, 3.0]);
    }

    #[test]
    fn rings_are_bounded_by_capacity_and_window() {
        let config = SeriesConfig {
            interval: S,
            capacity: 5,
        };
        assert_eq!(config.window(), 5 * S);
        let mut set = SeriesSet::new(config);
        let t0 = Instant::now();
        for i in 0..100u32 {
            set.sample(t0 + i * S, [("g", Reading::Gauge(f64::from(i)))]);
        }
        assert_eq!(values(&set, "g"), [95.0, 96.0, 97.0, 98.0, 99.0]);
        // Sampled again after a long pause: the old points are out of the window.
        set.sample(t0 + 200 * S, [("g", Reading::Gauge(7.0))]);
        assert_eq!(values(&set, "g"), [7.0]);
    }

    #[test]
    fn series_of_a_gone_source_are_forgotten() {
        let mut set = SeriesSet::new(SeriesConfig::default());
        let t0 = Instant::now();
        set.sample(t0, [("a", Reading::Gauge(1.0)), ("b", Reading::Gauge(2.0))]);
        assert_eq!(set.len(), 2);
        set.sample(t0 + S, [("a", Reading::Gauge(1.0))]);
        assert_eq!(set.len(), 1);
        assert!(set.get(&"b").is_none());
        // Back under the same key: a new series (its counter's first reading is a base).
        set.sample(t0 + 2 * S, [("b", Reading::Counter(50))]);
        assert!(values(&set, "b").is_empty());
    }
}
