//! `chrome`: the Chrome trace-event format (JSON object form), for Perfetto and
//! chrome://tracing.
//!
//! One process (`pid` 1) with a named thread track per actor instance (`reflector v1/Pod`,
//! `listener pod-logger`, …), sorted in pipeline order. Each step of a trace is a complete
//! event (`ph: "X"`) on the track of the hop it reached, spanning the time since the previous
//! hop; a handler step is split into the wait in the listener's buffer (listener track) and
//! the handler's run (handler track). Every slice of one event has the event's name
//! (`modified Pod demo/web-1`), so the viewers colour it alike on every track. Reflector hops,
//! where traces are born, are instant events. Flow events (`s`/`t`/`f`) link one trace's
//! slices. Depth samples are counter events (`ph: "C"`); `dropped` lines are global instant
//! events. The loop beyond the handler (T5–T7) gets a `queue NAME` track per workqueue (each
//! item's wait, ready → got) and a `reconcile NAME` track (each reconcile, start → end, its
//! writes as instants). Complete events on one track must nest, so concurrent events on a track are spread
//! over numbered lanes (`fifo v1/Pod #2`).
//!
//! Times are microseconds since the header's time. The events borrow from the trace file and
//! serialize straight to the output (no JSON tree in memory).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Serialize;

use crate::loops::Loops;
use crate::traces::traces;
use crate::{Hop, HopKind, TraceFile};

/// The process id all tracks live in.
const PID: u64 = 1;

/// A whole export: serialize it with `serde_json`.
#[derive(Debug, Serialize)]
pub struct ChromeTrace<'a> {
    /// The events.
    #[serde(rename = "traceEvents")]
    pub trace_events: Vec<Event<'a>>,
    /// Always `ms`.
    #[serde(rename = "displayTimeUnit")]
    pub display_time_unit: &'static str,
    /// Where the trace came from.
    #[serde(rename = "otherData")]
    pub other_data: OtherData,
}

/// The `otherData` object: the trace file's header and whether it was complete.
#[derive(Debug, Serialize)]
pub struct OtherData {
    /// [`crate::FORMAT_NAME`].
    pub format: &'static str,
    /// The format version.
    pub v: u64,
    /// The traced process.
    pub pid: Option<u64>,
    /// The header's time, nanoseconds since the Unix epoch (event times count from it).
    pub start_unix_ns: u64,
    /// The header's time, RFC 3339.
    pub start: String,
    /// Whether the file was closed cleanly.
    pub complete: bool,
    /// Records the sink dropped.
    pub dropped: u64,
}

/// One trace event; absent fields are not written.
#[derive(Debug, Serialize)]
pub struct Event<'a> {
    /// The event's name.
    pub name: Cow<'a, str>,
    /// Category: the hop kind, `trace` for flows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cat: Option<&'static str>,
    /// Phase: `M`, `X`, `i`, `s`, `t`, `f`, `C`.
    pub ph: &'static str,
    /// Process id.
    pub pid: u64,
    /// Thread (track) id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u64>,
    /// Start, microseconds since the header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<f64>,
    /// Duration of a complete event, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    /// Scope of an instant event (`t` thread, `g` global).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s: Option<&'static str>,
    /// Flow id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// Flow binding point (`e`: the enclosing slice).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bp: Option<&'static str>,
    /// Arguments shown when the event is selected.
    #[serde(skip_serializing_if = "Args::is_empty")]
    pub args: Args<'a>,
}

/// An event's arguments; absent ones are not written.
#[derive(Debug, Default, Serialize)]
pub struct Args<'a> {
    /// Track or process name (metadata events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Track order (metadata events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sort_index: Option<u64>,
    /// The trace id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<&'a str>,
    /// What happened at the hop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what: Option<&'a str>,
    /// The previous hop (`indexer v1/Pod`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The resourceVersion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rv: Option<&'a str>,
    /// The uid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<&'a str>,
    /// The whole step from the previous hop, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_us: Option<f64>,
    /// The handler's run, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur_us: Option<f64>,
    /// Which part of a handler step this slice is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<&'static str>,
    /// A depth sample (counter events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<u64>,
    /// Records dropped (`dropped` instants).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}

impl Args<'_> {
    fn is_empty(&self) -> bool {
        self.name.is_none()
            && self.sort_index.is_none()
            && self.trace.is_none()
            && self.depth.is_none()
            && self.count.is_none()
    }
}

impl<'a> Event<'a> {
    fn new(name: impl Into<Cow<'a, str>>, ph: &'static str) -> Event<'a> {
        Event {
            name: name.into(),
            cat: None,
            ph,
            pid: PID,
            tid: None,
            ts: None,
            dur: None,
            s: None,
            id: None,
            bp: None,
            args: Args::default(),
        }
    }
}

/// A slice before its lane is known.
struct Slice<'a> {
    track: (HopKind, &'a str),
    name: String,
    start: u64,
    end: u64,
    args: Args<'a>,
    trace: usize,
}

/// Microseconds since `base` (negative before it).
fn micros(base: u64, t: u64) -> f64 {
    (i128::from(t) - i128::from(base)) as f64 / 1e3
}

/// `what Kind ns/name`.
fn label(what: &str, h: &Hop) -> String {
    format!("{what} {} {}", h.kind, crate::fmt::path(&h.ns, &h.name))
}

/// A slice of the loop's tracks before its lane is known.
struct LoopSlice<'a> {
    track: String,
    name: String,
    start: u64,
    end: u64,
    args: Args<'a>,
    /// A reconcile's writes, drawn as instants on its lane.
    writes: Vec<&'a crate::WriteLine>,
}

/// The loop beyond the handler (T5–T7), on tracks numbered from `first_tid`: per queue, a
/// `queue NAME` track with each item's wait (ready → got) and a `reconcile NAME` track with
/// each reconcile (start → end) and its writes as instants; concurrent ones spread over lanes.
fn loop_events<'a>(file: &'a TraceFile, first_tid: u64, events: &mut Vec<Event<'a>>) {
    let loops = Loops::new(file);
    let mut slices: Vec<LoopSlice<'a>> = Vec::new();
    for op in file.queue.iter().filter(|op| op.what == "got") {
        if let Some(wait) = op.wait {
            slices.push(LoopSlice {
                track: format!("queue {}", op.queue),
                name: format!("wait {}", op.key),
                start: op.t.saturating_sub(wait),
                end: op.t,
                args: Args {
                    what: Some("waited in the queue until a worker took it"),
                    dur_us: Some(wait as f64 / 1e3),
                    ..Args::default()
                },
                writes: Vec::new(),
            });
        }
    }
    for r in &loops.reconciles {
        let start = r.t();
        let end = r.end.map_or(start, |e| e.t.max(start));
        slices.push(LoopSlice {
            track: format!("reconcile {}", r.queue),
            name: format!("reconcile {} {}", r.queue, r.key),
            start,
            end,
            args: Args {
                trace: Some(r.span),
                what: Some(r.result_word()),
                dur_us: r.dur().map(|d| d as f64 / 1e3),
                ..Args::default()
            },
            writes: r.writes.clone(),
        });
    }
    slices.sort_by(|a, b| (&a.track, a.start, b.end).cmp(&(&b.track, b.start, a.end)));
    let mut lanes: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut lane_of = Vec::with_capacity(slices.len());
    for slice in &slices {
        let ends = lanes.entry(slice.track.clone()).or_default();
        let lane = match ends.iter().position(|&end| end <= slice.start) {
            Some(lane) => lane,
            None => {
                ends.push(0);
                ends.len() - 1
            }
        };
        ends[lane] = slice.end;
        lane_of.push(lane);
    }
    let mut tids: BTreeMap<(&str, usize), u64> = BTreeMap::new();
    for (track, ends) in &lanes {
        for lane in 0..ends.len() {
            let tid = first_tid + tids.len() as u64;
            tids.insert((track, lane), tid);
            let mut name = Event::new("thread_name", "M");
            name.tid = Some(tid);
            name.args.name = Some(if lane == 0 {
                track.clone()
            } else {
                format!("{track} #{}", lane + 1)
            });
            events.push(name);
            let mut order = Event::new("thread_sort_index", "M");
            order.tid = Some(tid);
            order.args.sort_index = Some(tid);
            events.push(order);
        }
    }
    let base = file.header.t;
    for (slice, lane) in slices.into_iter().zip(lane_of) {
        let LoopSlice {
            track,
            name,
            start,
            end,
            args,
            writes,
        } = slice;
        let tid = tids.get(&(track.as_str(), lane)).copied();
        let mut event = Event::new(name, "X");
        event.cat = Some(if track.starts_with("queue") {
            "queue"
        } else {
            "reconcile"
        });
        event.tid = tid;
        event.ts = Some(micros(base, start));
        event.dur = Some((end - start) as f64 / 1e3);
        event.args = args;
        events.push(event);
        for write in writes {
            let mut event = Event::new(
                format!("{} {} {}", write.verb, write.kind, write.path()),
                "i",
            );
            event.cat = Some("write");
            event.s = Some("t");
            event.tid = tid;
            event.ts = Some(micros(base, write.t));
            event.args = Args {
                trace: write.span.as_deref(),
                rv: Some(&write.rv),
                ..Args::default()
            };
            events.push(event);
        }
    }
}

/// The trace as Chrome trace events.
pub fn chrome(file: &TraceFile) -> ChromeTrace<'_> {
    let base = file.header.t;
    let traces = traces(file);
    let mut slices: Vec<Slice<'_>> = Vec::new();
    let mut instants: Vec<(&Hop, usize)> = Vec::new();
    for (index, trace) in traces.iter().enumerate() {
        let event = trace.origin().map(|h| h.what.as_str()).unwrap_or_default();
        for hop in trace.hops.iter().filter(|h| h.hop == HopKind::Reflector) {
            instants.push((hop, index));
        }
        for step in trace.steps() {
            let (from, to) = (step.from, step.to);
            let args = || Args {
                trace: Some(trace.id),
                what: Some(&to.what),
                from: Some(format!("{} {}", from.hop, from.inst)),
                rv: Some(&to.rv),
                uid: Some(&to.uid),
                step_us: Some(step.nanos as f64 / 1e3),
                ..Args::default()
            };
            let (start, end) = (from.t, to.t.max(from.t));
            match (to.hop, to.dur) {
                (HopKind::Handler, Some(dur)) => {
                    let run_start = end.saturating_sub(dur).max(start);
                    slices.push(Slice {
                        track: (HopKind::Listener, &to.inst),
                        name: label(event, to),
                        start,
                        end: run_start,
                        args: Args {
                            step: Some("in the listener's buffer until the handler ran"),
                            ..args()
                        },
                        trace: index,
                    });
                    slices.push(Slice {
                        track: (HopKind::Handler, &to.inst),
                        name: label(event, to),
                        start: run_start,
                        end,
                        args: Args {
                            step: Some("the handler ran"),
                            dur_us: Some(dur as f64 / 1e3),
                            ..args()
                        },
                        trace: index,
                    });
                }
                _ => slices.push(Slice {
                    track: (to.hop, &to.inst),
                    name: label(event, to),
                    start,
                    end,
                    args: args(),
                    trace: index,
                }),
            }
        }
    }

    // Lanes: greedy interval colouring per track, so that slices on one thread never overlap.
    slices.sort_by(|a, b| (a.track, a.start, b.end).cmp(&(b.track, b.start, a.end)));
    let mut lanes: BTreeMap<(HopKind, &str), Vec<u64>> = BTreeMap::new();
    let mut lane_of = Vec::with_capacity(slices.len());
    for slice in &slices {
        let ends = lanes.entry(slice.track).or_default();
        let lane = match ends.iter().position(|&end| end <= slice.start) {
            Some(lane) => lane,
            None => {
                ends.push(0);
                ends.len() - 1
            }
        };
        ends[lane] = slice.end;
        lane_of.push(lane);
    }
    for (hop, _) in &instants {
        lanes.entry((hop.hop, &hop.inst)).or_insert_with(|| vec![0]);
    }

    let mut events = Vec::with_capacity(slices.len() * 2 + file.depths.len() + 64);
    let mut process = Event::new("process_name", "M");
    process.tid = Some(0);
    process.args.name = Some(match file.header.pid {
        Some(pid) => format!("kinformer (pid {pid})"),
        None => "kinformer".to_string(),
    });
    events.push(process);
    // Thread ids in pipeline order: (hop, inst, lane) → tid.
    let mut tids: BTreeMap<(HopKind, &str, usize), u64> = BTreeMap::new();
    for ((hop, inst), ends) in &lanes {
        for lane in 0..ends.len().max(1) {
            let tid = tids.len() as u64 + 1;
            tids.insert((*hop, inst, lane), tid);
            let mut name = Event::new("thread_name", "M");
            name.tid = Some(tid);
            name.args.name = Some(if lane == 0 {
                format!("{hop} {inst}")
            } else {
                format!("{hop} {inst} #{}", lane + 1)
            });
            events.push(name);
            let mut order = Event::new("thread_sort_index", "M");
            order.tid = Some(tid);
            order.args.sort_index = Some(tid);
            events.push(order);
        }
    }

    // Slices, and for the flow arrows each trace's slice starts and tracks.
    let mut by_trace: BTreeMap<usize, Vec<(u64, u64)>> = BTreeMap::new();
    for (slice, lane) in slices.into_iter().zip(lane_of) {
        let tid = tids
            .get(&(slice.track.0, slice.track.1, lane))
            .copied()
            .unwrap_or(0);
        by_trace
            .entry(slice.trace)
            .or_default()
            .push((slice.start, tid));
        let mut event = Event::new(slice.name, "X");
        event.cat = Some(slice.track.0.as_str());
        event.tid = Some(tid);
        event.ts = Some(micros(base, slice.start));
        event.dur = Some((slice.end - slice.start) as f64 / 1e3);
        event.args = slice.args;
        events.push(event);
    }
    for (hop, index) in instants {
        let mut event = Event::new(label(&hop.what, hop), "i");
        event.cat = Some("reflector");
        event.s = Some("t");
        event.tid = tids.get(&(hop.hop, hop.inst.as_str(), 0)).copied();
        event.ts = Some(micros(base, hop.t));
        event.args = Args {
            trace: Some(traces[index].id),
            rv: Some(&hop.rv),
            uid: Some(&hop.uid),
            ..Args::default()
        };
        events.push(event);
    }
    for (index, mut points) in by_trace {
        if points.len() < 2 {
            continue;
        }
        points.sort_unstable();
        let last = points.len() - 1;
        for (i, (start, tid)) in points.into_iter().enumerate() {
            let ph = match i {
                0 => "s",
                i if i == last => "f",
                _ => "t",
            };
            let mut event = Event::new("trace", ph);
            event.cat = Some("trace");
            event.id = Some(index as u64 + 1);
            event.tid = Some(tid);
            event.ts = Some(micros(base, start));
            event.bp = (ph == "f").then_some("e");
            events.push(event);
        }
    }

    loop_events(file, tids.len() as u64 + 1, &mut events);

    for d in &file.depths {
        let mut event = Event::new(format!("depth {} {}", d.hop, d.inst), "C");
        event.ts = Some(micros(base, d.t));
        event.args.depth = Some(d.depth);
        events.push(event);
    }
    for d in &file.dropped {
        let mut event = Event::new(format!("sink dropped {} records", d.count), "i");
        event.s = Some("g");
        event.tid = Some(0);
        event.ts = Some(micros(base, d.t));
        event.args.count = Some(d.count);
        events.push(event);
    }
    ChromeTrace {
        trace_events: events,
        display_time_unit: "ms",
        other_data: OtherData {
            format: crate::FORMAT_NAME,
            v: file.header.v,
            pid: file.header.pid,
            start_unix_ns: file.header.t,
            start: crate::fmt::wall(file.header.t),
            complete: file.is_complete(),
            dropped: file.dropped_total(),
        },
    }
}
