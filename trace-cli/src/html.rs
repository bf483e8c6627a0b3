//! `html`: a self-contained page (no network, inline CSS and JS only) with a swimlane per actor
//! and one object's path drawn across them, a select box to pick another object, and a table of
//! the selected object's hops.
//!
//! The data is embedded as JSON in a `<script type="application/json">`; the inline script
//! draws the SVG and fills the table on load and when another object is selected.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::fmt::wall;
use crate::follow::{ObjectQuery, TraceView};
use crate::traces::{ObjectKey, traces};
use crate::{HopKind, TraceError, TraceFile};

/// The page for `file`, with `selected` drawn first (by default the object with the most hops).
pub fn html(file: &TraceFile, selected: Option<&ObjectQuery>) -> Result<String, TraceError> {
    let data = page_data(file, selected)?;
    // `<`, `>` and `&` only occur inside JSON strings, where `\u003c`… mean the same: no
    // `</script>` can end the data early.
    let data = data
        .to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026");
    let title = match file.header.pid {
        Some(pid) => format!("kinformer trace of pid {pid}"),
        None => "kinformer trace".to_string(),
    };
    Ok(PAGE
        .replace("{{TITLE}}", &escape(&title))
        .replace("{{DATA}}", &data))
}

/// The JSON the page's script reads.
fn page_data(file: &TraceFile, selected: Option<&ObjectQuery>) -> Result<Value, TraceError> {
    let traces = traces(file);
    // Lanes: every actor instance of the file, in pipeline order.
    let lanes: BTreeSet<(HopKind, &str)> =
        file.hops.iter().map(|h| (h.hop, h.inst.as_str())).collect();
    let lanes: Vec<(HopKind, &str)> = lanes.into_iter().collect();
    let lane_of = |hop: HopKind, inst: &str| lanes.binary_search(&(hop, inst)).ok();

    let mut objects: Vec<(ObjectKey, Vec<TraceView>)> = Vec::new();
    let mut sorted: Vec<_> = traces.iter().collect();
    sorted.sort_by(|a, b| a.object.cmp(&b.object));
    for trace in sorted {
        let view = TraceView::of(trace);
        match objects.last_mut() {
            Some((key, views)) if *key == trace.object => views.push(view),
            _ => objects.push((trace.object.clone(), vec![view])),
        }
    }
    for (_, views) in &mut objects {
        views.sort_by(|a, b| {
            let first = |v: &TraceView| v.hops.iter().map(|h| h.t).min().unwrap_or(0);
            (first(a), &a.id).cmp(&(first(b), &b.id))
        });
    }

    let selected = match selected {
        Some(query) => Some(
            objects
                .iter()
                .position(|(key, _)| query.matches(key))
                .ok_or_else(|| query.not_found(file))?,
        ),
        None => objects
            .iter()
            .enumerate()
            .max_by_key(|(i, (_, views))| {
                let hops: usize = views.iter().map(|v| v.hops.len()).sum();
                (hops, std::cmp::Reverse(*i))
            })
            .map(|(i, _)| i),
    };

    let objects: Vec<Value> = objects
        .iter()
        .map(|(key, views)| {
            let traces: Vec<Value> = views
                .iter()
                .map(|v| {
                    let hops: Vec<Value> = v
                        .hops
                        .iter()
                        .map(|h| {
                            json!({
                                "lane": lane_of(h.hop, &h.inst),
                                "hop": h.hop.as_str(),
                                "inst": h.inst,
                                "what": h.what,
                                "rv": h.rv,
                                "wall": wall(h.t),
                                "lat": h.latency as f64 / 1e3,
                                "dur": h.dur.map(|d| d as f64 / 1e3),
                            })
                        })
                        .collect();
                    json!({
                        "id": v.id, "uid": v.uid, "origin": v.origin.as_str(), "what": v.what,
                        "start": wall(v.start), "hops": hops,
                    })
                })
                .collect();
            json!({
                "key": key.to_string(), "kind": key.kind, "ns": key.ns, "name": key.name,
                "path": key.path(), "traces": traces,
            })
        })
        .collect();
    let lanes: Vec<Value> = lanes
        .iter()
        .map(|(hop, inst)| json!({"hop": hop.as_str(), "inst": inst}))
        .collect();
    Ok(json!({
        "file": {
            "pid": file.header.pid,
            "start": wall(file.header.t),
            "complete": file.is_complete(),
            "truncated": file.truncated.map(|t| t.to_string()),
            "dropped": file.dropped_total(),
            "hops": file.hops.len(),
        },
        "lanes": lanes,
        "objects": objects,
        "selected": selected,
    }))
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
