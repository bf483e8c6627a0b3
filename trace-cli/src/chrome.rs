//! `chrome`: the Chrome trace-event format (JSON object form), for Perfetto and
//! chrome://tracing.
//!
//! One process (`pid` 1) with a named thread track per actor instance (`reflector v1/Pod
//! ns=demo`, `listener pod-logger`, …), sorted in pipeline order. Each step of a trace is a
//! complete event (`ph: "X"`) on the track of the hop it reached, spanning the time since the
//! previous hop; a handler step is split into the wait in the listener's buffer (listener
//! track) and the handler's run (handler track). Reflector hops, where traces are born, are
//! instant events. Flow events (`s`/`t`/`f`) link one trace's slices. Depth samples are counter
//! events (`ph: "C"`). Complete events on one track must nest, so concurrent events on a track
//! are spread over numbered lanes (`fifo v1/Pod ns=demo #2`).
//!
//! Times are microseconds since the header's time.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::traces::traces;
use crate::{Hop, HopKind, TraceFile};

/// The process id all tracks live in.
const PID: u64 = 1;

/// A slice before its lane is known.
struct Slice<'a> {
    track: (HopKind, &'a str),
    name: String,
    start: u64,
    end: u64,
    args: Value,
    trace: usize,
}

/// Microseconds since `base` (negative before it).
fn micros(base: u64, t: u64) -> f64 {
    (i128::from(t) - i128::from(base)) as f64 / 1e3
}

/// The trace as a Chrome trace-event JSON object.
pub fn chrome(file: &TraceFile) -> Value {
    let base = file.header.t;
    let traces = traces(file);
    let mut slices: Vec<Slice<'_>> = Vec::new();
    let mut instants: Vec<(&Hop, usize)> = Vec::new();
    // Every slice of one event carries the event's name (`modified Pod demo/web-1`), so the
    // viewers colour one event alike on every track.
    let label = |what: &str, h: &Hop| {
        let path = if h.ns.is_empty() {
            h.name.clone()
        } else {
            format!("{}/{}", h.ns, h.name)
        };
        format!("{what} {} {path}", h.kind)
    };
    for (index, trace) in traces.iter().enumerate() {
        let event = trace.origin().map(|h| h.what.as_str()).unwrap_or_default();
        for hop in trace.hops.iter().filter(|h| h.hop == HopKind::Reflector) {
            instants.push((hop, index));
        }
        for step in trace.steps() {
            let (from, to) = (step.from, step.to);
            let args = json!({
                "trace": trace.id, "what": to.what, "from": format!("{} {}", from.hop, from.inst),
                "rv": to.rv, "uid": to.uid, "step_us": step.nanos as f64 / 1e3,
            });
            let (start, end) = (from.t, to.t.max(from.t));
            match (to.hop, to.dur) {
                (HopKind::Handler, Some(dur)) => {
                    let run_start = end.saturating_sub(dur).max(start);
                    let mut buffered = args.clone();
                    buffered["step"] = json!("in the listener's buffer until the handler ran");
                    slices.push(Slice {
                        track: (HopKind::Listener, &to.inst),
                        name: label(event, to),
                        start,
                        end: run_start,
                        args: buffered,
                        trace: index,
                    });
                    let mut args = args;
                    args["dur_us"] = json!(dur as f64 / 1e3);
                    args["step"] = json!("the handler ran");
                    slices.push(Slice {
                        track: (HopKind::Handler, &to.inst),
                        name: label(event, to),
                        start: run_start,
                        end,
                        args,
                        trace: index,
                    });
                }
                _ => slices.push(Slice {
                    track: (to.hop, &to.inst),
                    name: label(event, to),
                    start,
                    end,
                    args,
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
    // Thread ids in pipeline order: (hop, inst, lane) → tid.
    let mut tids: BTreeMap<(HopKind, &str, usize), u64> = BTreeMap::new();
    let mut events = vec![json!({
        "name": "process_name", "ph": "M", "pid": PID, "tid": 0,
        "args": {"name": match file.header.pid {
            Some(pid) => format!("kinformer (pid {pid})"),
            None => "kinformer".to_string(),
        }},
    })];
    for ((hop, inst), ends) in &lanes {
        for lane in 0..ends.len().max(1) {
            let tid = tids.len() as u64 + 1;
            tids.insert((*hop, inst, lane), tid);
            let name = if lane == 0 {
                format!("{hop} {inst}")
            } else {
                format!("{hop} {inst} #{}", lane + 1)
            };
            events.push(
                json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid,
                "args": {"name": name}}),
            );
            events.push(
                json!({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                "args": {"sort_index": tid}}),
            );
        }
    }

    // Flow arrows through each trace's slices, in time order.
    let mut by_trace: BTreeMap<usize, Vec<(u64, u64)>> = BTreeMap::new();
    for (slice, &lane) in slices.iter().zip(&lane_of) {
        let tid = tids
            .get(&(slice.track.0, slice.track.1, lane))
            .copied()
            .unwrap_or(0);
        events.push(json!({
            "name": slice.name, "cat": slice.track.0.as_str(), "ph": "X", "pid": PID, "tid": tid,
            "ts": micros(base, slice.start), "dur": (slice.end - slice.start) as f64 / 1e3,
            "args": slice.args,
        }));
        by_trace
            .entry(slice.trace)
            .or_default()
            .push((slice.start, tid));
    }
    for (hop, index) in &instants {
        let tid = tids
            .get(&(hop.hop, hop.inst.as_str(), 0))
            .copied()
            .unwrap_or(0);
        events.push(json!({
            "name": label(&hop.what, hop), "cat": "reflector", "ph": "i", "s": "t", "pid": PID, "tid": tid,
            "ts": micros(base, hop.t),
            "args": {"trace": traces[*index].id, "rv": hop.rv, "uid": hop.uid},
        }));
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
            let mut event = json!({
                "name": "trace", "cat": "trace", "ph": ph, "id": index + 1, "pid": PID,
                "tid": tid, "ts": micros(base, start),
            });
            if ph == "f" {
                event["bp"] = json!("e");
            }
            events.push(event);
        }
    }

    for d in &file.depths {
        events.push(json!({
            "name": format!("depth {} {}", d.hop, d.inst), "ph": "C", "pid": PID,
            "ts": micros(base, d.t), "args": {"depth": d.depth},
        }));
    }
    for d in &file.dropped {
        events.push(json!({
            "name": format!("sink dropped {} records", d.count), "ph": "i", "s": "g",
            "pid": PID, "tid": 0, "ts": micros(base, d.t), "args": {"count": d.count},
        }));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "format": crate::FORMAT_NAME,
            "v": file.header.v,
            "pid": file.header.pid,
            "start_unix_ns": file.header.t,
            "start": crate::fmt::wall(file.header.t),
            "complete": file.is_complete(),
            "dropped": file.dropped_total(),
        },
    })
}
