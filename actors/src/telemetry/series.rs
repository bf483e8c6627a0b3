//! The live series behind the debug page's charts (`/debug/informers/series`): what is read of
//! each informer, listener and workqueue at every sample, and the report served.
//!
//! The sampling logic (rates from counter deltas, mean latencies from histogram deltas,
//! bounded rings) is the core's [`kinformer::series`]; this file only reads the probes into
//! it. One [`SeriesSampler`] per [`Telemetry`](crate::Telemetry), sampled by the endpoint's
//! timer and by requests for the series, at most once per interval: no thread or timer per
//! informer.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use kinformer::series::{Reading, Series, SeriesConfig, SeriesSet};
use serde::Serialize;

use crate::telemetry::probe::{InformerProbe, WorkQueueProbe};

/// What a series measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Metric {
    /// Informer: watch events per second.
    Events,
    /// Informer: deltas pending in the FIFO.
    FifoDepth,
    /// Listener: notifications waiting in its buffer.
    Buffered,
    /// Listener: mean handler time per notification.
    HandlerLatency,
    /// Workqueue: items waiting to be handed out.
    QueueDepth,
    /// Workqueue: adds per second.
    Adds,
    /// Workqueue: mean time from add to get.
    QueueLatency,
    /// Workqueue: mean time from get to done (a reconcile).
    WorkDuration,
}

/// Whose series it is: an informer, one of its listeners (by name and, for listeners of one
/// informer sharing a name, their rank), or a workqueue.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    Informer(Arc<str>),
    Listener(Arc<str>, Arc<str>, usize),
    Queue(Arc<str>),
}

type Key = (Source, Metric);

/// The live sources read at one sample, in registration order.
pub(crate) struct Live<'a> {
    pub(crate) informers: &'a [(Arc<str>, Arc<dyn InformerProbe>)],
    pub(crate) queues: &'a [(Arc<str>, Arc<dyn WorkQueueProbe>)],
}

impl Live<'_> {
    /// Every listener of `informer` with its key source, in the probe's order.
    fn listeners(
        informer: &Arc<str>,
        p: &dyn InformerProbe,
    ) -> Vec<(Source, Arc<crate::telemetry::stats::ListenerStats>)> {
        let listeners = p.listeners();
        let mut seen: Vec<&str> = Vec::with_capacity(listeners.len());
        let mut out = Vec::with_capacity(listeners.len());
        for l in &listeners {
            let rank = seen.iter().filter(|n| **n == l.name()).count();
            seen.push(l.name());
            out.push((
                Source::Listener(Arc::clone(informer), Arc::from(l.name()), rank),
                Arc::clone(l),
            ));
        }
        out
    }

    /// One reading of every series.
    fn readings(&self) -> Vec<(Key, Reading)> {
        let mut out = Vec::new();
        for (name, p) in self.informers {
            let inf = Source::Informer(Arc::clone(name));
            out.push((
                (inf.clone(), Metric::Events),
                Reading::Counter(p.reflector().health().events),
            ));
            out.push((
                (inf, Metric::FifoDepth),
                Reading::Gauge(p.fifo().pending_deltas() as f64),
            ));
            for (source, l) in Self::listeners(name, &**p) {
                out.push((
                    (source.clone(), Metric::Buffered),
                    Reading::Gauge(l.buffered() as f64),
                ));
                let h = l.handle_latency();
                out.push((
                    (source, Metric::HandlerLatency),
                    Reading::Histogram {
                        count: h.count(),
                        sum: h.sum(),
                    },
                ));
            }
        }
        for (name, q) in self.queues {
            let m = q.metrics();
            let source = Source::Queue(Arc::clone(name));
            out.push((
                (source.clone(), Metric::QueueDepth),
                Reading::Gauge(m.depth as f64),
            ));
            out.push(((source.clone(), Metric::Adds), Reading::Counter(m.adds)));
            out.push((
                (source.clone(), Metric::QueueLatency),
                Reading::Histogram {
                    count: m.queue_latency.count,
                    sum: m.queue_latency.sum,
                },
            ));
            out.push((
                (source, Metric::WorkDuration),
                Reading::Histogram {
                    count: m.work_duration.count,
                    sum: m.work_duration.sum,
                },
            ));
        }
        out
    }
}

/// A [`Telemetry`](crate::Telemetry)'s series: one [`SeriesSet`] behind a lock taken once per
/// sample or report (never on an informer's hot path).
pub(crate) struct SeriesSampler {
    set: Mutex<SeriesSet<Key>>,
}

impl SeriesSampler {
    pub(crate) fn new(config: SeriesConfig) -> Self {
        SeriesSampler {
            set: Mutex::new(SeriesSet::new(config)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SeriesSet<Key>> {
        // A sample is applied series by series; a panic half-way leaves rings that are still
        // bounded and consistent, at worst missing one point.
        self.set.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Samples `live` at `now` if a sample is due; true if it did.
    pub(crate) fn sample(&self, now: Instant, live: &Live<'_>) -> bool {
        let mut set = self.lock();
        if !set.is_due(now) {
            return false;
        }
        set.sample(now, live.readings())
    }

    /// The series of `live`, points relative to `now`.
    pub(crate) fn report(&self, now: Instant, live: &Live<'_>) -> SeriesReport {
        let set = self.lock();
        let config = set.config();
        let window = config.window();
        let points = |key: Key| -> Vec<[f64; 2]> {
            set.get(&key)
                .map(|s| relative(s, now, window))
                .unwrap_or_default()
        };
        SeriesReport {
            interval_seconds: config.interval.as_secs_f64(),
            window_seconds: window.as_secs_f64(),
            informers: live
                .informers
                .iter()
                .map(|(name, p)| {
                    let inf = Source::Informer(Arc::clone(name));
                    InformerSeries {
                        name: name.to_string(),
                        events_per_second: points((inf.clone(), Metric::Events)),
                        fifo_depth: points((inf, Metric::FifoDepth)),
                        listeners: Live::listeners(name, &**p)
                            .into_iter()
                            .map(|(source, l)| ListenerSeries {
                                name: l.name().to_string(),
                                buffered: points((source.clone(), Metric::Buffered)),
                                handler_latency_seconds: points((source, Metric::HandlerLatency)),
                            })
                            .collect(),
                    }
                })
                .collect(),
            workqueues: live
                .queues
                .iter()
                .map(|(name, _)| {
                    let q = Source::Queue(Arc::clone(name));
                    WorkQueueSeries {
                        name: name.to_string(),
                        depth: points((q.clone(), Metric::QueueDepth)),
                        adds_per_second: points((q.clone(), Metric::Adds)),
                        queue_latency_seconds: points((q.clone(), Metric::QueueLatency)),
                        work_duration_seconds: points((q, Metric::WorkDuration)),
                    }
                })
                .collect(),
        }
    }
}

/// A series' points within `window` before `now`, as `[seconds relative to now (≤ 0), value]`,
/// the time rounded to the millisecond.
fn relative(s: &Series, now: Instant, window: Duration) -> Vec<[f64; 2]> {
    s.points()
        .filter_map(|p| {
            let ago = now.saturating_duration_since(p.at);
            (ago <= window).then(|| [-(ago.as_millis() as f64) / 1000.0, p.value])
        })
        .collect()
}

/// `/debug/informers/series`: the live series of every informer and workqueue, over the last
/// [`window_seconds`](Self::window_seconds). Each series is a list of `[t, value]` points,
/// oldest first, `t` in seconds relative to the answer (≤ 0). See
/// [`Telemetry::series`](crate::Telemetry::series).
#[derive(Clone, Debug, Serialize)]
pub struct SeriesReport {
    /// Seconds between samples (`TelemetryOptions::series_interval`).
    pub interval_seconds: f64,
    /// How far back the series reach (interval × `TelemetryOptions::series_points`).
    pub window_seconds: f64,
    /// Every live informer, in registration order.
    pub informers: Vec<InformerSeries>,
    /// Every live workqueue, in registration order.
    pub workqueues: Vec<WorkQueueSeries>,
}

/// One informer's series.
#[derive(Clone, Debug, Serialize)]
pub struct InformerSeries {
    /// The name it was registered under.
    pub name: String,
    /// Watch events received per second (the reflector's event counter's rate).
    pub events_per_second: Vec<[f64; 2]>,
    /// Deltas pending in the DeltaFIFO.
    pub fifo_depth: Vec<[f64; 2]>,
    /// Every listener.
    pub listeners: Vec<ListenerSeries>,
}

/// One listener's series.
#[derive(Clone, Debug, Serialize)]
pub struct ListenerSeries {
    /// Its name.
    pub name: String,
    /// Notifications waiting in its buffer (B3).
    pub buffered: Vec<[f64; 2]>,
    /// Mean handler time per notification over each interval, in seconds (no point for an
    /// interval in which nothing was handled).
    pub handler_latency_seconds: Vec<[f64; 2]>,
}

/// One workqueue's series.
#[derive(Clone, Debug, Serialize)]
pub struct WorkQueueSeries {
    /// The name it was registered under.
    pub name: String,
    /// client-go's `depth`: items waiting to be handed out.
    pub depth: Vec<[f64; 2]>,
    /// Adds per second (client-go's `adds_total` rate).
    pub adds_per_second: Vec<[f64; 2]>,
    /// Mean time from add to get over each interval, in seconds.
    pub queue_latency_seconds: Vec<[f64; 2]>,
    /// Mean time from get to done over each interval, in seconds: the reconcile latency of a
    /// controller whose workers call `done` when a reconcile ends.
    pub work_duration_seconds: Vec<[f64; 2]>,
}
