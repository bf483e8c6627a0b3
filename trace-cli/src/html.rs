//! `html`: a self-contained page (no network, inline CSS and JS only) with a swimlane per actor
//! and one object's path drawn across them, a select box to pick another object, and a table of
//! the selected object's hops.
//!
//! Under the swimlanes, the loop of each trace of the object (T5–T7) reads as a timeline:
//! event → queue → reconcile → writes → own events, each own event a link to the written
//! object.
//!
//! The data is embedded as JSON in a `<script type="application/json">`; the inline script
//! draws the SVG and fills the table on load and when another object is selected.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::fmt::{diff, wall};
use crate::follow::ObjectQuery;
use crate::loops::Loops;
use crate::traces::{Trace, traces};
use crate::{HopKind, TraceError, TraceFile};

/// The page for `file`, with `selected` drawn first (by default the object with the most hops).
pub fn html(file: &TraceFile, selected: Option<&ObjectQuery>) -> Result<String, TraceError> {
    let data = page_data(file, selected)?;
    // Serializing plain structs cannot fail (string keys, no maps with other keys).
    let json = serde_json::to_string(&data).unwrap_or_default();
    // `<`, `>` and `&` only occur inside JSON strings, where `\u003c`… mean the same: no
    // `</script>` or `<!--` can end the data early.
    let mut escaped = String::with_capacity(json.len() + json.len() / 16);
    for c in json.chars() {
        match c {
            '<' => escaped.push_str("\\u003c"),
            '>' => escaped.push_str("\\u003e"),
            '&' => escaped.push_str("\\u0026"),
            c => escaped.push(c),
        }
    }
    let title = match file.header.pid {
        Some(pid) => format!("kinformer trace of pid {pid}"),
        None => "kinformer trace".to_string(),
    };
    let (head, rest) = PAGE.split_once("{{DATA}}").unwrap_or((PAGE, ""));
    let mut page = String::with_capacity(PAGE.len() + escaped.len());
    page.push_str(&head.replace("{{TITLE}}", &escape(&title)));
    page.push_str(&escaped);
    page.push_str(rest);
    Ok(page)
}

/// The JSON the page's script reads.
#[derive(Serialize)]
struct PageData<'a> {
    file: FileInfo,
    lanes: Vec<Lane<'a>>,
    objects: Vec<Object<'a>>,
    selected: Option<usize>,
}

#[derive(Serialize)]
struct FileInfo {
    pid: Option<u64>,
    start: String,
    complete: bool,
    truncated: Option<String>,
    dropped: u64,
    hops: usize,
}

#[derive(Serialize)]
struct Lane<'a> {
    hop: &'static str,
    inst: &'a str,
}

#[derive(Serialize)]
struct Object<'a> {
    key: String,
    kind: &'a str,
    ns: &'a str,
    name: &'a str,
    path: String,
    traces: Vec<TraceData<'a>>,
}

#[derive(Serialize)]
struct TraceData<'a> {
    id: &'a str,
    uid: &'a str,
    origin: &'static str,
    what: &'a str,
    start: String,
    hops: Vec<HopData<'a>>,
    /// The write this event was, when it was a reconcile's write coming back.
    own_write: Option<String>,
    /// The loop after the handler: queue, reconcile, writes, own events (empty in an older
    /// trace).
    after: Vec<StepData>,
}

/// One step of the loop after the handler ([`crate::loops::LoopStep`]).
#[derive(Serialize)]
struct StepData {
    stage: String,
    inst: String,
    what: String,
    detail: String,
    level: u8,
    wall: String,
    /// Microseconds since the trace's origin.
    lat: f64,
    /// For an own event: the object (`Kind ns/name`, as in `objects[].key`) and its trace.
    link: Option<(String, String)>,
}

#[derive(Serialize)]
struct HopData<'a> {
    lane: Option<usize>,
    hop: &'static str,
    inst: &'a str,
    what: &'a str,
    rv: &'a str,
    wall: String,
    /// Microseconds since the trace's origin.
    lat: f64,
    /// The handler's run, microseconds.
    dur: Option<f64>,
}

fn page_data<'a>(
    file: &'a TraceFile,
    selected: Option<&ObjectQuery>,
) -> Result<PageData<'a>, TraceError> {
    let mut traces: Vec<Trace<'a>> = traces(file);
    let loops = Loops::new(file);
    // Lanes: every actor instance of the file, in pipeline order.
    let lanes: BTreeSet<(HopKind, &str)> =
        file.hops.iter().map(|h| (h.hop, h.inst.as_str())).collect();
    let lanes: Vec<(HopKind, &str)> = lanes.into_iter().collect();
    let lane_of = |hop: HopKind, inst: &str| lanes.binary_search(&(hop, inst)).ok();

    // By object, each object's traces in time order (`traces` gave time order; the sort is
    // stable).
    traces.sort_by(|a, b| a.object.cmp(&b.object));
    let mut objects: Vec<Object<'a>> = Vec::new();
    for trace in &traces {
        let origin = trace.origin();
        let data = TraceData {
            id: trace.id,
            uid: origin.map_or("", |h| h.uid.as_str()),
            origin: origin.map_or("reflector", |h| h.hop.as_str()),
            what: origin.map_or("", |h| h.what.as_str()),
            start: wall(trace.start()),
            hops: trace
                .hops_by_path()
                .into_iter()
                .map(|h| HopData {
                    lane: lane_of(h.hop, &h.inst),
                    hop: h.hop.as_str(),
                    inst: &h.inst,
                    what: &h.what,
                    rv: &h.rv,
                    wall: wall(h.t),
                    lat: trace.latency(h) as f64 / 1e3,
                    dur: h.dur.map(|d| d as f64 / 1e3),
                })
                .collect(),
            own_write: origin
                .and_then(|h| loops.own_write(h))
                .map(|w| w.describe()),
            after: loops
                .flow(trace.id, &trace.object)
                .into_iter()
                .map(|step| StepData {
                    wall: wall(step.t),
                    lat: diff(trace.start(), step.t) as f64 / 1e3,
                    stage: step.stage,
                    inst: step.inst,
                    what: step.what,
                    detail: step.detail,
                    level: step.level,
                    link: step.link,
                })
                .collect(),
        };
        // `traces` never makes a trace without a hop.
        let first = trace.hops[0];
        match objects.last_mut() {
            Some(object)
                if object.kind == first.kind
                    && object.ns == first.ns
                    && object.name == first.name =>
            {
                object.traces.push(data)
            }
            _ => objects.push(Object {
                key: trace.object.to_string(),
                kind: &first.kind,
                ns: &first.ns,
                name: &first.name,
                path: trace.object.path(),
                traces: vec![data],
            }),
        }
    }

    let selected = match selected {
        Some(query) => Some(
            traces
                .iter()
                .map(|t| &t.object)
                .find(|o| query.matches(o))
                .map(ToString::to_string)
                .and_then(|key| objects.iter().position(|d| d.key == key))
                .ok_or_else(|| query.not_found(file))?,
        ),
        None => objects
            .iter()
            .enumerate()
            .max_by_key(|(i, object)| {
                let hops: usize = object.traces.iter().map(|t| t.hops.len()).sum();
                (hops, std::cmp::Reverse(*i))
            })
            .map(|(i, _)| i),
    };

    Ok(PageData {
        file: FileInfo {
            pid: file.header.pid,
            start: wall(file.header.t),
            complete: file.is_complete(),
            truncated: file.truncated.map(|t| t.to_string()),
            dropped: file.dropped_total(),
            hops: file.hops.len(),
        },
        lanes: lanes
            .iter()
            .map(|(hop, inst)| Lane {
                hop: hop.as_str(),
                inst,
            })
            .collect(),
        objects,
        selected,
    })
}

/// Escapes text for HTML.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The page: inline CSS and JS only, nothing loaded from anywhere.
const PAGE: &str = include_str!("page.html");
