//! `stats`: per-hop latency percentiles, handler run times, depth over time, drops.

use std::collections::BTreeMap;

use crate::fmt::{diff, duration, nanos, wall};
use crate::loops::Loops;
use crate::traces::{objects, traces};
use crate::{End, HopKind, TraceFile, Truncation};

/// Percentiles of a set of nanosecond values (nearest-rank method).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    /// How many values.
    pub count: usize,
    /// Median.
    pub p50: i64,
    /// 90th percentile.
    pub p90: i64,
    /// 99th percentile.
    pub p99: i64,
    /// Largest.
    pub max: i64,
}

impl Percentiles {
    /// The percentiles of `values`, `None` when there are none.
    pub fn of(mut values: Vec<i64>) -> Option<Percentiles> {
        values.sort_unstable();
        let n = values.len();
        // Nearest rank: the smallest value with at least p% of the values at or below it.
        let rank = |p: usize| values[(n * p).div_ceil(100).clamp(1, n) - 1];
        (n > 0).then(|| Percentiles {
            count: n,
            p50: rank(50),
            p90: rank(90),
            p99: rank(99),
            max: values[n - 1],
        })
    }
}

/// Latency of the step into one hop of one instance, from the previous hop of the same trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepStats {
    /// The hop reached.
    pub hop: HopKind,
    /// Its instance.
    pub inst: String,
    /// The step latencies.
    pub latency: Percentiles,
}

/// A handler's run times (`dur`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerStats {
    /// The listener's name.
    pub inst: String,
    /// Handler hops with `what` = `panicked`.
    pub panicked: usize,
    /// The run times, when the hops carried `dur`.
    pub dur: Option<Percentiles>,
}

/// One FIFO's or listener buffer's depth over time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepthStats {
    /// `fifo` or `listener`.
    pub hop: HopKind,
    /// Its instance.
    pub inst: String,
    /// How many samples.
    pub samples: usize,
    /// Smallest depth sampled.
    pub min: u64,
    /// Largest depth sampled.
    pub max: u64,
    /// The latest sample's depth.
    pub last: u64,
    /// Largest depth in each bucket of [`Stats::bucket_ns`] from the header's time; a bucket
    /// without a sample holds the depth carried from before it (`None` before the first).
    pub series: Vec<Option<u64>>,
}

/// One workqueue's operations, queue wait and reconcile durations (T5, T6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStats {
    /// The queue's name.
    pub queue: String,
    /// How many operations of each `what` (`added`, `merged`, `dirty`, `got`, …; unknown words
    /// as written), sorted by word.
    pub ops: Vec<(String, usize)>,
    /// Time from ready to taken (`got`'s `wait`).
    pub wait: Option<Percentiles>,
    /// Reconciles of keys from this queue.
    pub reconciles: usize,
    /// How many reconciles ended with each result (`ok`, `error`, `conflict` for a 409 that is
    /// retried, `requeue`; `(no end line)`).
    pub results: Vec<(String, usize)>,
    /// Reconcile durations (`end`'s `dur`, else end − start).
    pub dur: Option<Percentiles>,
    /// Writes made by these reconciles.
    pub writes: usize,
}

/// Everything `stats` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// The header's time.
    pub start: u64,
    /// The latest record's time.
    pub last: u64,
    /// The writing process.
    pub pid: Option<u64>,
    /// Hop lines.
    pub hops: usize,
    /// Traces.
    pub traces: usize,
    /// Objects.
    pub objects: usize,
    /// Per hop and instance, ordered by pipeline stage then instance.
    pub steps: Vec<StepStats>,
    /// Per handler.
    pub handlers: Vec<HandlerStats>,
    /// Per FIFO and listener buffer.
    pub depths: Vec<DepthStats>,
    /// Per workqueue (empty for a trace without `queue` and `reconcile` lines).
    pub queues: Vec<QueueStats>,
    /// The width of a depth bucket, nanoseconds.
    pub bucket_ns: u64,
    /// Sum of the `dropped` lines.
    pub dropped: u64,
    /// How many `dropped` lines.
    pub dropped_lines: usize,
    /// The `end` line.
    pub end: Option<End>,
    /// Where the file was cut, if it was.
    pub truncated: Option<Truncation>,
    /// Lines of an unknown type.
    pub unknown_lines: usize,
}

impl Stats {
    /// Whether the file was closed cleanly.
    pub fn complete(&self) -> bool {
        self.end.is_some() && self.truncated.is_none()
    }
}

/// At most this many depth buckets.
const MAX_BUCKETS: u64 = 60;

/// The bucket width: the smallest of these (seconds) that keeps the series within
/// [`MAX_BUCKETS`], else whatever does.
fn bucket_width(span: u64) -> u64 {
    const NICE: [u64; 12] = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600];
    NICE.iter()
        .map(|s| s * 1_000_000_000)
        .find(|w| span / w < MAX_BUCKETS)
        .unwrap_or_else(|| (span / MAX_BUCKETS).saturating_add(1))
}

/// Computes the statistics of a trace file.
pub fn stats(file: &TraceFile) -> Stats {
    let traces = traces(file);
    let mut steps: BTreeMap<(HopKind, &str), Vec<i64>> = BTreeMap::new();
    for trace in &traces {
        for step in trace.steps() {
            steps
                .entry((step.to.hop, &step.to.inst))
                .or_default()
                .push(step.nanos);
        }
    }
    let steps = steps
        .into_iter()
        .filter_map(|((hop, inst), values)| {
            Percentiles::of(values).map(|latency| StepStats {
                hop,
                inst: inst.to_string(),
                latency,
            })
        })
        .collect();

    let mut handlers: BTreeMap<&str, (usize, Vec<i64>)> = BTreeMap::new();
    for hop in file.hops.iter().filter(|h| h.hop == HopKind::Handler) {
        let entry = handlers.entry(&hop.inst).or_default();
        if hop.what == "panicked" {
            entry.0 += 1;
        }
        if let Some(dur) = hop.dur {
            entry.1.push(i64::try_from(dur).unwrap_or(i64::MAX));
        }
    }
    let handlers = handlers
        .into_iter()
        .map(|(inst, (panicked, durs))| HandlerStats {
            inst: inst.to_string(),
            panicked,
            dur: Percentiles::of(durs),
        })
        .collect();

    let start = file.header.t;
    let last = file.last_t();
    let bucket_ns = bucket_width(last.saturating_sub(start));
    let buckets = usize::try_from(last.saturating_sub(start) / bucket_ns + 1).unwrap_or(1);
    let mut samples: BTreeMap<(HopKind, &str), Vec<(u64, u64)>> = BTreeMap::new();
    for d in &file.depths {
        samples
            .entry((d.hop, &d.inst))
            .or_default()
            .push((d.t, d.depth));
    }
    let depths = samples
        .into_iter()
        .map(|((hop, inst), mut samples)| {
            samples.sort_by_key(|s| s.0);
            let mut series: Vec<Option<u64>> = vec![None; buckets];
            let mut carried: Option<u64> = None;
            let mut next = samples.iter().peekable();
            for (i, slot) in series.iter_mut().enumerate() {
                let end = start.saturating_add((i as u64 + 1).saturating_mul(bucket_ns));
                let mut max = carried;
                while let Some(&&(t, depth)) = next.peek() {
                    if t >= end && i + 1 < buckets {
                        break;
                    }
                    max = Some(max.map_or(depth, |m| m.max(depth)));
                    carried = Some(depth);
                    next.next();
                }
                *slot = max;
            }
            DepthStats {
                hop,
                inst: inst.to_string(),
                samples: samples.len(),
                min: samples.iter().map(|s| s.1).min().unwrap_or(0),
                max: samples.iter().map(|s| s.1).max().unwrap_or(0),
                last: samples.last().map_or(0, |s| s.1),
                series,
            }
        })
        .collect();

    let loops = Loops::new(file);
    let mut queues: BTreeMap<&str, QueueStats> = BTreeMap::new();
    let mut waits: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    let mut durs: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for op in &file.queue {
        let stats = entry(&mut queues, op.queue.as_str());
        count(&mut stats.ops, &op.what);
        if let (Some(wait), "got") = (op.wait, op.what.as_str()) {
            waits.entry(&op.queue).or_default().push(nanos(wait));
        }
    }
    for r in &loops.reconciles {
        let stats = entry(&mut queues, r.queue);
        stats.reconciles += 1;
        stats.writes += r.writes.len();
        count(&mut stats.results, r.result_word());
        if let Some(dur) = r.dur() {
            durs.entry(r.queue).or_default().push(nanos(dur));
        }
    }
    let queues = queues
        .into_iter()
        .map(|(name, mut stats)| {
            stats.ops.sort();
            stats.results.sort();
            stats.wait = waits.remove(name).and_then(Percentiles::of);
            stats.dur = durs.remove(name).and_then(Percentiles::of);
            stats
        })
        .collect();

    Stats {
        queues,
        start,
        last,
        pid: file.header.pid,
        hops: file.hops.len(),
        traces: traces.len(),
        objects: objects(file).len(),
        steps,
        handlers,
        depths,
        bucket_ns,
        dropped: file.dropped_total(),
        dropped_lines: file.dropped.len(),
        end: file.end.clone(),
        truncated: file.truncated,
        unknown_lines: file.unknown_lines,
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pid = self.pid.map(|p| format!("pid {p}, ")).unwrap_or_default();
        writeln!(
            f,
            "trace of {pid}from {} over {}: {} hops, {} traces, {} objects",
            wall(self.start),
            duration(diff(self.start, self.last)),
            self.hops,
            self.traces,
            self.objects
        )?;
        match (&self.end, &self.truncated) {
            (_, Some(cut)) => writeln!(f, "INCOMPLETE: {cut}")?,
            (None, None) => writeln!(
                f,
                "INCOMPLETE: no end line (the process died or is still writing)"
            )?,
            (Some(_), None) => writeln!(f, "complete (closed cleanly)")?,
        }
        if self.unknown_lines > 0 {
            writeln!(f, "{} lines of an unknown type skipped", self.unknown_lines)?;
        }

        writeln!(
            f,
            "\nstep latency (from the previous hop of the same trace):"
        )?;
        let inst_width = self
            .steps
            .iter()
            .map(|s| s.inst.chars().count())
            .chain(self.handlers.iter().map(|h| h.inst.chars().count()))
            .chain(self.depths.iter().map(|d| d.inst.chars().count()))
            .max()
            .unwrap_or(0)
            .max(8);
        writeln!(
            f,
            "  {:<9}  {:<iw$}  {:>7}  {:>10}  {:>10}  {:>10}  {:>10}",
            "hop",
            "instance",
            "count",
            "p50",
            "p90",
            "p99",
            "max",
            iw = inst_width
        )?;
        for s in &self.steps {
            writeln!(
                f,
                "  {:<9}  {:<iw$}  {}",
                s.hop,
                s.inst,
                row(&s.latency),
                iw = inst_width
            )?;
        }
        if self.steps.is_empty() {
            writeln!(f, "  (no steps)")?;
        }

        writeln!(f, "\nhandler run time (dur):")?;
        writeln!(
            f,
            "  {:<9}  {:<iw$}  {:>7}  {:>10}  {:>10}  {:>10}  {:>10}  panicked",
            "",
            "listener",
            "count",
            "p50",
            "p90",
            "p99",
            "max",
            iw = inst_width
        )?;
        for h in &self.handlers {
            let values = h
                .dur
                .as_ref()
                .map_or_else(|| format!("{:>7}  (no dur)", 0), row);
            writeln!(
                f,
                "  {:<9}  {:<iw$}  {}  {:>8}",
                "handler",
                h.inst,
                values,
                h.panicked,
                iw = inst_width
            )?;
        }
        if self.handlers.is_empty() {
            writeln!(f, "  (no handler hops)")?;
        }

        writeln!(
            f,
            "\nFIFO and buffer depth (series: max per {} from the start):",
            duration(i64::try_from(self.bucket_ns).unwrap_or(i64::MAX))
        )?;
        for d in &self.depths {
            let series: Vec<String> = d
                .series
                .iter()
                .map(|v| v.map_or_else(|| "-".to_string(), |v| v.to_string()))
                .collect();
            writeln!(
                f,
                "  {:<9}  {:<iw$}  samples {}  min {}  max {}  last {}\n  {:<9}  {:<iw$}  series: {}",
                d.hop,
                d.inst,
                d.samples,
                d.min,
                d.max,
                d.last,
                "",
                "",
                series.join(" "),
                iw = inst_width
            )?;
        }
        if self.depths.is_empty() {
            writeln!(f, "  (no depth samples)")?;
        }

        writeln!(
            f,
            "\nworkqueues (wait: ready → got; reconcile: start → end):"
        )?;
        let queue_width = self
            .queues
            .iter()
            .map(|q| q.queue.chars().count())
            .max()
            .unwrap_or(0)
            .max(inst_width);
        for q in &self.queues {
            let ops: Vec<String> = q.ops.iter().map(|(w, n)| format!("{n} {w}")).collect();
            writeln!(
                f,
                "  {:<9}  {:<iw$}  {}",
                "queue",
                q.queue,
                ops.join(", "),
                iw = queue_width
            )?;
            let results: Vec<String> = q.results.iter().map(|(w, n)| format!("{n} {w}")).collect();
            writeln!(
                f,
                "  {:<9}  {:<iw$}  {} reconciles ({}), {} writes",
                "",
                "",
                q.reconciles,
                results.join(", "),
                q.writes,
                iw = queue_width
            )?;
        }
        if self.queues.is_empty() {
            writeln!(
                f,
                "  (no queue or reconcile lines: written before the workqueue was traced, or no \
                 key sink)"
            )?;
        } else {
            writeln!(
                f,
                "  {:<9}  {:<iw$}  {:>7}  {:>10}  {:>10}  {:>10}  {:>10}",
                "",
                "queue",
                "count",
                "p50",
                "p90",
                "p99",
                "max",
                iw = queue_width
            )?;
            for q in &self.queues {
                for (label, p) in [("wait", &q.wait), ("reconcile", &q.dur)] {
                    if let Some(p) = p {
                        writeln!(
                            f,
                            "  {:<9}  {:<iw$}  {}",
                            label,
                            q.queue,
                            row(p),
                            iw = queue_width
                        )?;
                    }
                }
            }
        }

        writeln!(f, "\ndrops:")?;
        writeln!(
            f,
            "  {} records dropped by the sink (dropped lines: {})",
            self.dropped, self.dropped_lines
        )?;
        match &self.end {
            Some(end) => writeln!(
                f,
                "  end line: {} written, {} dropped",
                end.written, end.dropped
            )?,
            None => writeln!(f, "  no end line: later drops, if any, are not counted")?,
        }
        Ok(())
    }
}

/// The statistics of queue `name`, made empty on first use.
fn entry<'a, 'm>(
    queues: &'m mut BTreeMap<&'a str, QueueStats>,
    name: &'a str,
) -> &'m mut QueueStats {
    queues.entry(name).or_insert_with(|| QueueStats {
        queue: name.to_string(),
        ops: Vec::new(),
        wait: None,
        reconciles: 0,
        results: Vec::new(),
        dur: None,
        writes: 0,
    })
}

/// Adds one to `word`'s count.
pub(crate) fn count(counts: &mut Vec<(String, usize)>, word: &str) {
    match counts.iter_mut().find(|(w, _)| w == word) {
        Some((_, n)) => *n += 1,
        None => counts.push((word.to_string(), 1)),
    }
}

/// `count p50 p90 p99 max`, aligned.
fn row(p: &Percentiles) -> String {
    format!(
        "{:>7}  {:>10}  {:>10}  {:>10}  {:>10}",
        p.count,
        duration(p.p50),
        duration(p.p90),
        duration(p.p99),
        duration(p.max)
    )
}
