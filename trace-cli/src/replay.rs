//! Replay: a trace recorded with bodies (`TraceSinkConfig::bodies`) played into the simulated
//! API server (`kinformer-sim`), so that a fresh controller run against it sees the inputs the
//! recorded one saw (`docs/trace-format.md`, "Replay").
//!
//! Three steps, each usable alone:
//! 1. [`Recording::parse`] reads the `hop` lines at the reflector (listed objects and watch
//!    events, with their `body`) and the `write` lines; one event seen by several informers (the
//!    controller's and the embedded cluster's, say) is kept once, at its earliest `t`.
//! 2. [`Recording::plan`] chooses what to play: the seed (the objects listed before the first
//!    watch event: the informers' initial lists), then every later event in time order, minus
//!    the recorded controller's own writes (a watch event whose kind, namespace, name and
//!    resourceVersion match a `write` line: the fresh controller makes that write itself), minus
//!    kinds not asked for, minus objects without a body (Secrets never have one).
//! 3. [`Player`] applies them to a [`Sim`]: a created object is created, a deleted one deleted,
//!    and a modified one gets what the recorded event changed, as a JSON merge patch of the
//!    recorded object against its previous recorded version (status: the recorded status, when
//!    it changed). Recorded resourceVersions and uids cannot be kept (the sim assigns its own):
//!    an object is found in the sim by kind, namespace and name, and owner references are
//!    pointed at the sim's object of the recorded owner's kind and name.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kinformer_sim::{Sim, SimError};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::{TraceError, TraceFile, Truncation, WriteLine};

/// What went wrong preparing a replay (errors of single events are in [`PlayReport`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The trace file could not be read or is not a kinformer trace.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The trace was recorded without bodies: it holds no objects to play.
    // Named by the flag a newcomer types, then the library knob: the message is read by
    // whoever ran `deployment-controller --trace` without `--trace-bodies`.
    #[error(
        "the trace was recorded without bodies: nothing to replay; record it again with \
         --trace-bodies (deployment-controller --trace FILE --trace-bodies; in a program, \
         TraceSinkConfig::bodies = true)"
    )]
    NoBodies,
    /// The simulated API server failed (start, or a direct store call).
    #[error("simulated API server: {0}")]
    Sim(#[from] SimError),
    /// Discovery of the sim's resources failed.
    #[error("discovery of the simulated API server's resources: {0}")]
    Discovery(#[source] kube::Error),
}

/// The type of a recorded reflector hop (`what` on a `hop:"reflector"` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordedType {
    /// An object of a LIST (`listed`).
    Listed,
    /// A watch `ADDED` event.
    Added,
    /// A watch `MODIFIED` event.
    Modified,
    /// A watch `DELETED` event.
    Deleted,
}

impl RecordedType {
    fn parse(what: &str) -> Option<RecordedType> {
        Some(match what {
            "listed" => RecordedType::Listed,
            "added" => RecordedType::Added,
            "modified" => RecordedType::Modified,
            "deleted" => RecordedType::Deleted,
            _ => return None,
        })
    }

    /// The name used in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordedType::Listed => "listed",
            RecordedType::Added => "added",
            RecordedType::Modified => "modified",
            RecordedType::Deleted => "deleted",
        }
    }
}

/// One listed object or watch event, as the reflector decoded it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedEvent {
    /// When it was decoded (ns since the Unix epoch): the earliest of the informers that saw it.
    pub t: u64,
    /// Listed, added, modified or deleted.
    pub what: RecordedType,
    /// The object's kind.
    pub kind: String,
    /// Its namespace (`""` when cluster-scoped).
    pub ns: String,
    /// Its name.
    pub name: String,
    /// Its recorded uid (may be `""`).
    pub uid: String,
    /// Its recorded resourceVersion (may be `""`).
    pub rv: String,
    /// The object as recorded; `None` for a Secret or a trace without bodies.
    pub body: Option<Arc<Value>>,
}

/// The lines of a trace that replay uses.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    /// Whether the trace was recorded with bodies.
    pub bodies: bool,
    /// Set when the file was cut short (the complete lines are used).
    pub truncated: Option<Truncation>,
    /// The reflector's listed objects and watch events, in time order, each once.
    pub events: Vec<RecordedEvent>,
    /// The `write` lines, in file order (as [`TraceFile::parse`] read them).
    pub writes: Vec<WriteLine>,
}

/// The fields of a line that replay reads (others are ignored).
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Line {
    // Boxed: a hop line is large, the other variant empty.
    Hop(Box<HopLine>),
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct HopLine {
    t: u64,
    hop: String,
    kind: String,
    #[serde(default)]
    ns: String,
    name: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    rv: String,
    what: String,
    #[serde(default)]
    body: Option<Value>,
}

/// An object's identity in the recording: kind, namespace, name.
type ObjectId = (String, String, String);

impl Recording {
    /// Reads the trace file at `path` (see [`Recording::parse`]).
    pub fn open(path: &Path) -> Result<Recording, ReplayError> {
        Recording::parse(&crate::model::read_trace(path)?)
    }

    /// Parses a trace file: the header and damage checks of [`TraceFile::parse`], then the
    /// reflector hops and the `write` lines. Refuses a trace recorded without bodies.
    pub fn parse(bytes: &[u8]) -> Result<Recording, ReplayError> {
        // The reader's checks (foreign file, version, damaged lines); what it found cut short
        // at the end is left out below too.
        let file = TraceFile::parse(bytes)?;
        if !file.header.bodies {
            return Err(ReplayError::NoBodies);
        }
        let mut recording = Recording {
            bodies: true,
            truncated: file.truncated,
            // The reader's own `write` lines: one parse, one set of rules (`"ns":null` is
            // cluster-scoped), so no write is dropped here and then played as an input.
            writes: file.writes,
            ..Recording::default()
        };
        // (kind, ns, name, rv, deleted) -> index in `events`: one event per version, however
        // many informers decoded it.
        let mut seen: HashMap<(ObjectId, String, bool), usize> = HashMap::new();
        let lines = bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .skip(1);
        for text in lines {
            // Only the cut-short last line can fail here: TraceFile::parse refused the rest.
            let Ok(line) = serde_json::from_slice::<Line>(text) else {
                continue;
            };
            let hop = match line {
                Line::Hop(hop) if hop.hop == "reflector" => *hop,
                Line::Hop(_) | Line::Other => continue,
            };
            let Some(what) = RecordedType::parse(&hop.what) else {
                continue;
            };
            let event = RecordedEvent {
                t: hop.t,
                what,
                kind: hop.kind,
                ns: hop.ns,
                name: hop.name,
                uid: hop.uid,
                rv: hop.rv,
                body: hop.body.map(Arc::new),
            };
            if event.rv.is_empty() {
                recording.events.push(event);
                continue;
            }
            let key = (
                (event.kind.clone(), event.ns.clone(), event.name.clone()),
                event.rv.clone(),
                what == RecordedType::Deleted,
            );
            match seen.get(&key) {
                // The earliest decode is when the server sent it.
                Some(&i) if event.t < recording.events[i].t => recording.events[i] = event,
                Some(_) => {}
                None => {
                    seen.insert(key, recording.events.len());
                    recording.events.push(event);
                }
            }
        }
        // Stable: lines of equal `t` keep their file order.
        recording.events.sort_by_key(|e| e.t);
        Ok(recording)
    }

    /// The kinds the recorded informers watched (each kind with a reflector line), sorted:
    /// a fresh controller of the same program opens a watch for each.
    pub fn kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = self.events.iter().map(|e| e.kind.clone()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        kinds
    }

    /// What to play under `options`: the seed, the events, and what was left out.
    pub fn plan(&self, options: &ReplayOptions) -> ReplayPlan {
        let own: HashSet<(&str, &str, &str, &str)> = self
            .writes
            .iter()
            .filter(|w| !w.rv.is_empty())
            .map(|w| {
                (
                    w.kind.as_str(),
                    w.ns.as_str(),
                    w.name.as_str(),
                    w.rv.as_str(),
                )
            })
            .collect();
        let wanted = |kind: &str| {
            options.kinds.is_empty() || options.kinds.iter().any(|k| k.eq_ignore_ascii_case(kind))
        };
        let mut plan = ReplayPlan::default();
        // The previous recorded version of each object, whether played or not: a modified
        // event plays what changed since it.
        let mut previous: HashMap<ObjectId, Arc<Value>> = HashMap::new();
        let seed_len = self
            .events
            .iter()
            .position(|e| e.what != RecordedType::Listed)
            .unwrap_or(self.events.len());
        for (i, event) in self.events.iter().enumerate() {
            let id = (event.kind.clone(), event.ns.clone(), event.name.clone());
            let before = match event.what {
                RecordedType::Deleted => previous.remove(&id),
                _ => match &event.body {
                    Some(body) => previous.insert(id, Arc::clone(body)),
                    None => previous.get(&id).cloned(),
                },
            };
            let seeding = i < seed_len;
            if !wanted(&event.kind) {
                plan.skipped.kinds += 1;
            } else if event.body.is_none() {
                plan.skipped.without_body += 1;
            } else if !seeding
                && !options.include_own_writes
                && own.contains(&(
                    event.kind.as_str(),
                    event.ns.as_str(),
                    event.name.as_str(),
                    event.rv.as_str(),
                ))
            {
                plan.skipped.own_writes += 1;
            } else {
                let planned = PlannedEvent {
                    event: event.clone(),
                    previous: before,
                };
                if seeding {
                    plan.seed.push(planned);
                } else {
                    plan.events.push(planned);
                }
            }
        }
        plan
    }
}

/// What to play.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Play the recorded controller's own writes too (default: skipped, the fresh controller
    /// makes them).
    pub include_own_writes: bool,
    /// Only these kinds (case-insensitive); empty: every kind.
    pub kinds: Vec<String>,
}

/// An event to play, with the previous recorded version of its object.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedEvent {
    /// The recorded event.
    pub event: RecordedEvent,
    /// The object's previous recorded version (played or not), if the trace holds one.
    pub previous: Option<Arc<Value>>,
}

/// Counts of what a plan leaves out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Watch events that were the recorded controller's own writes.
    pub own_writes: usize,
    /// Events of kinds not asked for.
    pub kinds: usize,
    /// Events without a body (Secrets).
    pub without_body: usize,
}

/// The seed and the events to play, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayPlan {
    /// The objects listed before the first watch event, created before playing.
    pub seed: Vec<PlannedEvent>,
    /// The events to play, in time order.
    pub events: Vec<PlannedEvent>,
    /// What was left out.
    pub skipped: Skipped,
}

/// How fast to play.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// One event after the other, without waiting.
    Fast,
    /// The recorded gaps between events, divided by `speed` (2.0: twice as fast).
    Recorded {
        /// The speed-up; values at or below 0 are taken as 1.
        speed: f64,
    },
}

/// What playing one event did to the sim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Applied {
    /// The object was created.
    Created,
    /// The object was changed (spec, metadata or status).
    Changed,
    /// The object was deleted (or marked for deletion, when finalizers or a grace period hold
    /// it).
    Deleted,
    /// Nothing to do: the sim's object already was as recorded, or a deleted one was gone.
    Unchanged,
}

/// What a play did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlayReport {
    /// Events applied, by outcome.
    pub created: usize,
    /// Objects changed.
    pub changed: usize,
    /// Objects deleted.
    pub deleted: usize,
    /// Events with nothing to do.
    pub unchanged: usize,
    /// Events the sim refused: `kind ns/name rv: error`.
    pub failed: Vec<String>,
}

impl PlayReport {
    fn count(&mut self, applied: Applied) {
        match applied {
            Applied::Created => self.created += 1,
            Applied::Changed => self.changed += 1,
            Applied::Deleted => self.deleted += 1,
            Applied::Unchanged => self.unchanged += 1,
        }
    }
}

impl std::fmt::Display for PlayReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} created, {} changed, {} deleted, {} unchanged, {} failed",
            self.created,
            self.changed,
            self.deleted,
            self.unchanged,
            self.failed.len()
        )
    }
}

/// A served resource: the sim's name for it and whether it has a status subresource.
#[derive(Debug, Clone)]
struct Resource {
    group: String,
    /// `plural` or `plural.group`, as [`Sim::create_object`] takes it.
    name: String,
    namespaced: bool,
    status: bool,
}

/// Plays recorded events into a [`Sim`].
pub struct Player<'a> {
    sim: &'a Sim,
    /// By kind, core group first.
    by_kind: HashMap<String, Vec<Resource>>,
}

impl std::fmt::Debug for Player<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Player")
            .field("sim", &self.sim.url())
            .field("kinds", &self.by_kind.len())
            .finish()
    }
}

impl<'a> Player<'a> {
    /// A player for `sim`; discovers the kinds it serves.
    pub async fn new(sim: &'a Sim) -> Result<Player<'a>, ReplayError> {
        let discovery = kube::Discovery::new(sim.client())
            .run()
            .await
            .map_err(ReplayError::Discovery)?;
        let mut by_kind: HashMap<String, Vec<Resource>> = HashMap::new();
        for group in discovery.groups() {
            for (res, caps) in group.recommended_resources() {
                let name = if res.group.is_empty() {
                    res.plural.clone()
                } else {
                    format!("{}.{}", res.plural, res.group)
                };
                let resource = Resource {
                    group: res.group.clone(),
                    name,
                    namespaced: caps.scope == kube::discovery::Scope::Namespaced,
                    status: caps.subresources.iter().any(|(s, _)| s.plural == "status"),
                };
                // The trace's `kind` may be the informer's resource plural.
                by_kind
                    .entry(res.plural.clone())
                    .or_default()
                    .push(resource.clone());
                by_kind.entry(res.kind.clone()).or_default().push(resource);
            }
        }
        for resources in by_kind.values_mut() {
            resources.sort_by(|a, b| {
                (!a.group.is_empty(), &a.group).cmp(&(!b.group.is_empty(), &b.group))
            });
        }
        Ok(Player { sim, by_kind })
    }

    /// The resource of `kind`, in the group of `api_version` when given.
    fn resource(&self, kind: &str, api_version: Option<&str>) -> Result<&Resource, SimError> {
        let candidates = self
            .by_kind
            .get(kind)
            .ok_or_else(|| SimError::UnknownResource(kind.to_string()))?;
        let group = api_version.map(|v| v.rsplit_once('/').map_or("", |(g, _)| g));
        group
            .and_then(|g| candidates.iter().find(|r| r.group == g))
            .or_else(|| candidates.first())
            .ok_or_else(|| SimError::UnknownResource(kind.to_string()))
    }

    /// Creates the seed's objects (no pacing).
    pub fn seed(&self, plan: &ReplayPlan) -> PlayReport {
        let mut report = PlayReport::default();
        for planned in &plan.seed {
            self.apply_counted(planned, &mut report);
        }
        report
    }

    /// Plays the plan's events in order at `pace`.
    pub async fn play(&self, plan: &ReplayPlan, pace: Pace) -> PlayReport {
        self.play_with(plan, pace, |_, _| {}).await
    }

    /// [`Player::play`], calling `each` after every event with its outcome (or the error).
    pub async fn play_with(
        &self,
        plan: &ReplayPlan,
        pace: Pace,
        mut each: impl FnMut(&RecordedEvent, Result<Applied, &SimError>),
    ) -> PlayReport {
        let mut report = PlayReport::default();
        // Each event is due at its recorded offset from the first, scaled: waiting for that
        // instant (not for each gap) keeps the time the sim takes from adding up.
        let start = tokio::time::Instant::now();
        let first_t = plan.events.first().map_or(0, |p| p.event.t);
        for planned in &plan.events {
            if let Pace::Recorded { speed } = pace {
                let speed = if speed > 0.0 { speed } else { 1.0 };
                let offset = planned.event.t.saturating_sub(first_t) as f64 / speed;
                // The recorded pace is what is asked for: this wait is the point, not a
                // synchronisation.
                // (An offset past what an Instant holds is not waited for.)
                if let Some(due) = start.checked_add(Duration::from_nanos(offset as u64)) {
                    tokio::time::sleep_until(due).await;
                }
            }
            match self.apply(planned) {
                Ok(applied) => {
                    report.count(applied);
                    each(&planned.event, Ok(applied));
                }
                Err(e) => {
                    report.failed.push(describe(&planned.event, &e));
                    each(&planned.event, Err(&e));
                }
            }
        }
        report
    }

    fn apply_counted(&self, planned: &PlannedEvent, report: &mut PlayReport) {
        match self.apply(planned) {
            Ok(applied) => report.count(applied),
            Err(e) => report.failed.push(describe(&planned.event, &e)),
        }
    }

    /// Applies one event to the sim.
    pub fn apply(&self, planned: &PlannedEvent) -> Result<Applied, SimError> {
        let event = &planned.event;
        let Some(body) = event.body.as_deref() else {
            return Ok(Applied::Unchanged);
        };
        let api_version = body.get("apiVersion").and_then(Value::as_str);
        let resource = self.resource(&event.kind, api_version)?.clone();
        let ns = (resource.namespaced && !event.ns.is_empty()).then_some(event.ns.as_str());
        let current = self.sim.get_object(&resource.name, ns, &event.name)?;
        if event.what == RecordedType::Deleted {
            return match current {
                Some(_) => {
                    self.sim.delete_object(&resource.name, ns, &event.name)?;
                    Ok(Applied::Deleted)
                }
                None => Ok(Applied::Unchanged),
            };
        }
        let mut recorded = body.clone();
        self.map_owners(&mut recorded, ns)?;
        let Some(current) = current else {
            strip_server_fields(&mut recorded);
            self.sim.create_object(&resource.name, ns, recorded)?;
            if deleting(body) {
                // Created as it was recorded, being deleted: start its deletion.
                self.sim.delete_object(&resource.name, ns, &event.name)?;
            }
            return Ok(Applied::Created);
        };
        if deleting(body) && !deleting(&current) {
            self.sim.delete_object(&resource.name, ns, &event.name)?;
            return Ok(Applied::Deleted);
        }
        // What the recorded event changed: against its previous version, or (no previous
        // version in the trace) against the sim's object.
        let mut base = match planned.previous.as_deref() {
            Some(previous) => {
                let mut previous = previous.clone();
                self.map_owners(&mut previous, ns)?;
                previous
            }
            None => current.clone(),
        };
        // With a status subresource the status is written apart, as its writer wrote it.
        let status_apart = resource.status;
        let mut new_main = recorded;
        let (old_status, new_status) = if status_apart {
            (take_status(&mut base), take_status(&mut new_main))
        } else {
            (None, None)
        };
        strip_server_fields(&mut base);
        strip_server_fields(&mut new_main);
        let patch = merge_diff(&base, &new_main);
        let mut changed = false;
        let mut now = current;
        if patch.as_object().is_some_and(|p| !p.is_empty()) {
            let before = rv_of(&now).cloned();
            now = self
                .sim
                .patch_object(&resource.name, ns, &event.name, &patch)?;
            changed |= rv_of(&now) != before.as_ref();
        }
        if status_apart && new_status != old_status && now.get("status") != new_status.as_ref() {
            let mut object = now.clone();
            if let Some(o) = object.as_object_mut() {
                match new_status {
                    Some(s) => o.insert("status".into(), s),
                    None => o.remove("status"),
                };
            }
            // No precondition: another writer (the controller under replay) may have written
            // since the read; the recorded status is what this event wrote.
            if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            let before = rv_of(&now).cloned();
            now = self
                .sim
                .replace_status(&resource.name, ns, &event.name, object)?;
            changed |= rv_of(&now) != before.as_ref();
        }
        Ok(if changed {
            Applied::Changed
        } else {
            Applied::Unchanged
        })
    }

    /// Points the owner references of `obj` at the sim's objects of the same kind and name
    /// (the recorded uids are not the sim's); references to objects the sim lacks stay.
    fn map_owners(&self, obj: &mut Value, ns: Option<&str>) -> Result<(), SimError> {
        let Some(owners) = obj
            .get_mut("metadata")
            .and_then(|m| m.get_mut("ownerReferences"))
            .and_then(Value::as_array_mut)
        else {
            return Ok(());
        };
        for owner in owners {
            let (Some(kind), Some(name)) = (
                owner.get("kind").and_then(Value::as_str),
                owner.get("name").and_then(Value::as_str),
            ) else {
                continue;
            };
            let api_version = owner.get("apiVersion").and_then(Value::as_str);
            let Ok(resource) = self.resource(kind, api_version) else {
                continue;
            };
            let owner_ns = if resource.namespaced { ns } else { None };
            let uid = self
                .sim
                .get_object(&resource.name, owner_ns, name)?
                .and_then(|o| o.pointer("/metadata/uid").cloned());
            if let (Some(uid), Some(o)) = (uid, owner.as_object_mut()) {
                o.insert("uid".into(), uid);
            }
        }
        Ok(())
    }
}

fn describe(event: &RecordedEvent, e: &SimError) -> String {
    let object = crate::fmt::path(&event.ns, &event.name);
    format!(
        "{} {} {object} rv {}: {e}",
        event.what.as_str(),
        event.kind,
        event.rv
    )
}

fn rv_of(obj: &Value) -> Option<&Value> {
    obj.pointer("/metadata/resourceVersion")
}

fn deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

fn take_status(obj: &mut Value) -> Option<Value> {
    obj.as_object_mut().and_then(|o| o.remove("status"))
}

/// Drops what the server assigns (and the sim cannot take from a recording): resourceVersion,
/// uid, creation time, generation, managed fields, and the deletion marks (a deletion is played
/// as a delete).
fn strip_server_fields(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "managedFields",
            "selfLink",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            meta.remove(k);
        }
    }
}

/// The JSON merge patch (RFC 7386) that turns `old` into `new`: changed and added members,
/// removed ones as `null`; objects recursively, anything else whole.
pub fn merge_diff(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) if ov == nv => {}
                    Some(ov @ Value::Object(_)) if nv.is_object() => {
                        patch.insert(k.clone(), merge_diff(ov, nv));
                    }
                    _ => {
                        patch.insert(k.clone(), nv.clone());
                    }
                }
            }
            for k in o.keys() {
                if !n.contains_key(k) {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HEADER: &str =
        r#"{"type":"header","format":"kinformer-trace","v":1,"t":1,"pid":1,"bodies":true}"#;

    fn hop(t: u64, inst: &str, what: &str, name: &str, rv: &str, body: Value) -> String {
        json!({"type":"hop","t":t,"trace":"0000000000000001","hop":"reflector","inst":inst,
               "kind":"Deployment","ns":"demo","name":name,"uid":"u-1","rv":rv,"what":what,
               "body":body})
        .to_string()
    }

    fn deploy(name: &str, replicas: i64, status: i64) -> Value {
        json!({"apiVersion":"apps/v1","kind":"Deployment",
               "metadata":{"name":name,"namespace":"demo","resourceVersion":"9"},
               "spec":{"replicas":replicas},"status":{"replicas":status}})
    }

    fn recording(lines: &[String]) -> Recording {
        let text = std::iter::once(HEADER.to_string())
            .chain(lines.iter().cloned())
            .collect::<Vec<_>>()
            .join("\n");
        Recording::parse(text.as_bytes()).expect("parses")
    }

    #[test]
    fn a_trace_without_bodies_is_refused() {
        let text = HEADER.replace("true", "false");
        assert!(matches!(
            Recording::parse(text.as_bytes()),
            Err(ReplayError::NoBodies)
        ));
    }

    #[test]
    fn one_event_seen_by_two_informers_is_kept_once_at_its_earliest_time() {
        let r = recording(&[
            hop(10, "a", "listed", "web", "5", deploy("web", 1, 0)),
            hop(12, "b", "listed", "web", "5", deploy("web", 1, 0)),
            hop(30, "b", "modified", "web", "6", deploy("web", 2, 0)),
            hop(20, "a", "modified", "web", "6", deploy("web", 2, 0)),
            hop(40, "a", "deleted", "web", "7", deploy("web", 2, 0)),
        ]);
        let got: Vec<(u64, RecordedType, &str)> = r
            .events
            .iter()
            .map(|e| (e.t, e.what, e.rv.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (10, RecordedType::Listed, "5"),
                (20, RecordedType::Modified, "6"),
                (40, RecordedType::Deleted, "7"),
            ]
        );
    }

    #[test]
    fn the_seed_is_what_was_listed_before_the_first_watch_event() {
        let r = recording(&[
            hop(10, "a", "listed", "web", "5", deploy("web", 1, 0)),
            hop(20, "a", "added", "api", "6", deploy("api", 1, 0)),
            // A later list (a relist, a late informer): played at its place.
            hop(30, "b", "listed", "cart", "7", deploy("cart", 1, 0)),
        ]);
        let plan = r.plan(&ReplayOptions::default());
        let names = |v: &[PlannedEvent]| v.iter().map(|p| p.event.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&plan.seed), ["web"]);
        assert_eq!(names(&plan.events), ["api", "cart"]);
    }

    #[test]
    fn own_writes_are_skipped_unless_asked_and_kinds_filter() {
        let write = json!({"type":"write","t":25,"span":"00000a0000000001","verb":"update_status",
                           "kind":"Deployment","ns":"demo","name":"web","rv":"6"})
        .to_string();
        let r = recording(&[
            hop(10, "a", "added", "web", "5", deploy("web", 1, 0)),
            write,
            hop(30, "a", "modified", "web", "6", deploy("web", 1, 1)),
            hop(40, "a", "modified", "web", "7", deploy("web", 3, 1)),
        ]);
        let plan = r.plan(&ReplayOptions::default());
        let rvs = |p: &ReplayPlan| {
            p.events
                .iter()
                .map(|e| e.event.rv.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(rvs(&plan), ["5", "7"]);
        assert_eq!(plan.skipped.own_writes, 1);
        // The user's change is played against the skipped own write: only spec.replicas.
        let last = &plan.events[1];
        let previous = last.previous.as_deref().expect("previous version");
        assert_eq!(
            merge_diff(previous, last.event.body.as_deref().expect("body")),
            json!({"spec":{"replicas":3}})
        );
        let all = r.plan(&ReplayOptions {
            include_own_writes: true,
            ..ReplayOptions::default()
        });
        assert_eq!(rvs(&all), ["5", "6", "7"]);
        let pods_only = r.plan(&ReplayOptions {
            kinds: vec!["pod".into()],
            ..ReplayOptions::default()
        });
        assert!(pods_only.events.is_empty());
        assert_eq!(pods_only.skipped.kinds, 3);
    }

    #[test]
    fn a_cluster_scoped_write_with_a_null_namespace_is_an_own_write() {
        // A writer may give a cluster-scoped object's namespace as `null`: the reader takes it
        // as `""`, and replay must too, or the controller's own write is played as an input.
        let write = json!({"type":"write","t":25,"span":"00000a0000000001","verb":"update",
                           "kind":"Namespace","ns":null,"name":"demo","rv":"6"})
        .to_string();
        let ns_hop = |t: u64, what: &str, rv: &str| {
            json!({"type":"hop","t":t,"trace":"0000000000000001","hop":"reflector","inst":"a",
                   "kind":"Namespace","name":"demo","uid":"u-1","rv":rv,"what":what,
                   "body":{"apiVersion":"v1","kind":"Namespace",
                           "metadata":{"name":"demo","resourceVersion":rv}}})
            .to_string()
        };
        let r = recording(&[ns_hop(10, "added", "5"), write, ns_hop(30, "modified", "6")]);
        assert_eq!(r.writes.len(), 1);
        let plan = r.plan(&ReplayOptions::default());
        assert_eq!(plan.skipped.own_writes, 1);
        assert_eq!(plan.events.len(), 1);
    }

    #[test]
    fn merge_diff_sets_changes_and_nulls_removals() {
        let old = json!({"a":1,"b":{"c":1,"d":2},"e":[1]});
        let new = json!({"a":1,"b":{"c":2},"e":[2],"f":true});
        assert_eq!(
            merge_diff(&old, &new),
            json!({"b":{"c":2,"d":null},"e":[2],"f":true})
        );
    }
}
