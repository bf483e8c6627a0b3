//! The field manager: `metadata.managedFields` on every write, and server-side apply, as
//! kube-apiserver's `k8s.io/apimachinery/pkg/util/managedfields/internal` does them over
//! structured-merge-diff's `merge.Updater` (the walks are in [`super::typed`], the sets in
//! [`super::fieldpath`], the list types in [`super::listschema`]).
//!
//! - Every create, update and non-apply patch is an `Update` by its manager (`FieldManager.
//!   Update`): the manager takes the fields whose values it added or changed, which the other
//!   managers lose, and every manager loses the fields the write removed (`Updater.update`,
//!   forced). Its entry gets the time when it took something (`managedFieldsUpdater.Update`).
//! - An apply (`FieldManager.Apply`, `Updater.Apply`) merges the configuration into the live
//!   object, makes the configuration's field set the applier's, removes the fields it applied
//!   last time and no longer applies unless someone owns them (`prune`), and fails with a `409`
//!   when it changes fields other managers own (`NewConflictError`) unless forced, which moves
//!   them.
//! - The managed fields a request carries are kept, reset by `[]` or `[{}]`, or ignored for the
//!   stored ones when empty or undecodable (`decodeLiveOrNew`, `isResetManagedFields`); a
//!   subresource write always starts from the stored ones.
//! - An object without managed fields gets none from an update (`skipNonAppliedManager`); its
//!   first apply first records its existing fields for `before-first-apply`.
//! - An apply by the `kubectl` manager rewrites the client-side-apply annotation when the object
//!   has one (`lastAppliedUpdater`).
//! - Entries are sorted (`sortEncodedManagedFields`), `Update` managers capped at 10 with the
//!   oldest merged into `ancient-changes` (`capManagersManager`), the object's identity fields
//!   never owned (`stripMetaManager`), and the fields a write cannot change (status for the
//!   main resource, spec for `/status`) never owned (the strategies' `GetResetFields`).

use serde_json::{Map, Value, json};

use super::fieldpath::{Pe, Set, display};
use super::typed::{self, Schema};
use crate::apimachinery::errors::{ApiError, go_quote};
use crate::apimachinery::util::parse_rfc3339;

/// `DefaultMaxUpdateManagers`.
const MAX_UPDATE_MANAGERS: usize = 10;

/// The write a field manager records.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    /// The object's schema.
    pub schema: Schema<'a>,
    /// The resource's `group/version` (the entries' `apiVersion`).
    pub api_version: &'a str,
    /// The resource has a status subresource (its main writes never own status).
    pub has_status: bool,
    /// `""`, `"status"` or `"scale"`.
    pub subresource: &'a str,
    /// The time of the write (RFC 3339, seconds).
    pub now: &'a str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Apply,
    Update,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Apply => "Apply",
            Op::Update => "Update",
        }
    }
}

/// One `managedFields` entry, decoded.
#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    op: Op,
    api_version: String,
    time: Option<String>,
    subresource: String,
    set: Set,
}

impl Entry {
    /// Whether two entries have the same manager identifier (`BuildManagerIdentifier`: the
    /// manager, operation and subresource, and the apiVersion of an `Update`).
    fn same_manager(&self, other: &Entry) -> bool {
        self.manager == other.manager
            && self.op == other.op
            && self.subresource == other.subresource
            && (self.op == Op::Apply || self.api_version == other.api_version)
    }

    /// `printManager`: how a conflict names the entry's manager.
    fn print(&self) -> String {
        let mut s = go_quote(&self.manager);
        if !self.subresource.is_empty() {
            s = format!("{s} with subresource {}", go_quote(&self.subresource));
        }
        if self.op == Op::Update {
            s = format!("{s} using {}", self.api_version);
        }
        s
    }

    fn encode(&self) -> Value {
        let mut e = Map::new();
        e.insert("manager".into(), json!(self.manager));
        e.insert("operation".into(), json!(self.op.as_str()));
        e.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            e.insert("time".into(), json!(t));
        }
        e.insert("fieldsType".into(), json!("FieldsV1"));
        e.insert("fieldsV1".into(), self.set.to_fields_v1());
        if !self.subresource.is_empty() {
            e.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(e)
    }

    fn seconds(&self) -> i64 {
        self.time.as_deref().and_then(parse_rfc3339).unwrap_or(0)
    }
}

/// `DecodeManagedFields`: every entry must have an operation `Apply` or `Update`, an
/// apiVersion, `fieldsType: FieldsV1` and a decodable set. A later entry of the same manager
/// replaces an earlier one (they are a map by identifier).
fn decode(v: Option<&Value>) -> Result<Vec<Entry>, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let list = v.as_array().ok_or("managedFields must be a list")?;
    let mut out: Vec<Entry> = Vec::with_capacity(list.len());
    for (i, e) in list.iter().enumerate() {
        let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("");
        let op = match s("operation") {
            "Apply" => Op::Apply,
            "Update" => Op::Update,
            _ => return Err("operation must be `Apply` or `Update`".into()),
        };
        if s("apiVersion").is_empty() {
            return Err("apiVersion must not be empty".into());
        }
        match s("fieldsType") {
            "FieldsV1" => {}
            "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
            t => {
                return Err(format!(
                    "invalid fieldsType {t:?} in managed fields entry {i}"
                ));
            }
        }
        let set = match e.get("fieldsV1") {
            None | Some(Value::Null) => Set::default(),
            Some(f) => Set::from_fields_v1(f)?,
        };
        let entry = Entry {
            manager: s("manager").to_string(),
            op,
            api_version: s("apiVersion").to_string(),
            time: e.get("time").and_then(Value::as_str).map(str::to_string),
            subresource: s("subresource").to_string(),
            set,
        };
        match out.iter().position(|o| o.same_manager(&entry)) {
            Some(j) => out[j] = entry,
            None => out.push(entry),
        }
    }
    Ok(out)
}

/// `encodeManagedFields` + `sortEncodedManagedFields`: `Apply` before `Update`, then by time
/// (seconds), manager, apiVersion and subresource. `None` when there is no entry.
fn encode(entries: &mut [Entry]) -> Option<Value> {
    if entries.is_empty() {
        return None;
    }
    entries.sort_by(|p, q| {
        p.op.as_str()
            .cmp(q.op.as_str())
            .then(p.seconds().cmp(&q.seconds()))
            .then_with(|| p.manager.cmp(&q.manager))
            .then_with(|| p.api_version.cmp(&q.api_version))
            .then_with(|| p.subresource.cmp(&q.subresource))
    });
    Some(Value::Array(entries.iter().map(Entry::encode).collect()))
}

/// `isResetManagedFields`: an empty list, or a list of one empty entry.
fn is_reset(v: Option<&Value>) -> bool {
    match v.and_then(Value::as_array).map(Vec::as_slice) {
        Some([]) => true,
        Some([only]) => only.as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}

fn managed_fields(obj: &Value) -> Option<&Value> {
    obj.get("metadata").and_then(|m| m.get("managedFields"))
}

/// The object without `metadata.managedFields`.
fn without_managed_fields(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    o
}

fn set_managed_fields(obj: &mut Value, entries: &mut [Entry]) {
    let encoded = encode(entries);
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        match encoded {
            Some(v) => m.insert("managedFields".into(), v),
            None => m.remove("managedFields"),
        };
    }
}

fn field(name: &str) -> Pe {
    Pe::Field(name.to_string())
}

/// The paths no manager ever owns (`stripMetaManager`).
fn strip_set() -> Set {
    let mut s = Set::default();
    s.insert(&[field("apiVersion")]);
    s.insert(&[field("kind")]);
    s.insert(&[field("metadata")]);
    for m in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        s.insert(&[field("metadata"), field(m)]);
    }
    s
}

impl Request<'_> {
    /// The fields the write can never change, as the strategies' `GetResetFields` filter
    /// them: a main write never owns a status subresource's `status`, a `/status` write owns
    /// no `spec` (and, for a custom resource, nothing but `status`).
    fn filter(&self, set: &mut Set) {
        let sub = self.subresource;
        let builtin = self.schema.builtin;
        let has_status = self.has_status;
        set.retain_top(|pe| match pe {
            Pe::Field(f) => match sub {
                "" => !(has_status && f == "status"),
                "status" if builtin => f != "spec",
                "status" => f == "status",
                _ => true,
            },
            _ => true,
        });
    }

    /// The comparison of two objects with the fields the write cannot change left out.
    fn compare(&self, old: &Value, new: &Value) -> typed::Comparison {
        let mut c = typed::compare(self.schema, old, new);
        self.filter(&mut c.added);
        self.filter(&mut c.modified);
        self.filter(&mut c.removed);
        c
    }
}

/// The fields of a new, empty object of `kind`, as its Go type serialises them
/// (`scope.Creater.New` converted to unstructured): non-pointer structs are present as objects
/// and slices without `omitempty` as `null`, so a create's `Update` entry owns no `.` of them
/// (as `f:spec` of a Deployment created by kubectl has none, while `f:labels` has).
fn skeleton(kind: &str) -> Value {
    let meta = json!({"creationTimestamp": null});
    match kind {
        "Pod" => json!({"metadata": meta, "spec": {"containers": null}, "status": {}}),
        "Deployment" => json!({"metadata": meta, "spec": {"selector": null,
            "template": {"metadata": {"creationTimestamp": null}, "spec": {"containers": null}},
            "strategy": {}}, "status": {}}),
        "ReplicaSet" => json!({"metadata": meta, "spec": {"selector": null,
            "template": {"metadata": {"creationTimestamp": null}, "spec": {"containers": null}}},
            "status": {"replicas": 0}}),
        "Service" => json!({"metadata": meta, "spec": {}, "status": {"loadBalancer": {}}}),
        "Namespace" => json!({"metadata": meta, "spec": {}, "status": {}}),
        "Node" => json!({"metadata": meta, "spec": {}, "status": {
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "",
                "kubeProxyVersion": "", "operatingSystem": "", "architecture": ""}}}),
        "Event" => json!({"metadata": meta, "involvedObject": {}, "reason": "", "message": "",
            "source": {}, "firstTimestamp": null, "lastTimestamp": null, "count": 0, "type": "",
            "eventTime": null, "reportingComponent": "", "reportingInstance": ""}),
        "Lease" => json!({"metadata": meta, "spec": {}}),
        "ConfigMap" | "Secret" | "ServiceAccount" => json!({"metadata": meta}),
        _ => json!({}),
    }
}

/// Records an `Update` by `manager` that turns `live` (`None` for a create) into `new`
/// (`FieldManager.UpdateNoErrors`); `new` carries the request's managed fields on entry and the
/// resulting ones on return. `/scale` writes go to [`update_scale`].
pub(crate) fn update(req: &Request<'_>, live: Option<&Value>, new: &mut Value, manager: &str) {
    let live_mf = live.and_then(managed_fields);
    let decoded = if !req.subresource.is_empty() {
        decode(live_mf)
    } else {
        let new_mf = managed_fields(new);
        if is_reset(new_mf) {
            Ok(Vec::new())
        } else {
            match decode(new_mf) {
                Ok(m) if !m.is_empty() => Ok(m),
                _ => decode(live_mf),
            }
        }
    };
    // An undecodable stored list is dropped (`emptyManagedFieldsOnErr`).
    let mut entries = decoded.unwrap_or_default();
    if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    // `skipNonAppliedManager.Update`: an existing object nobody manages stays unmanaged.
    if entries.is_empty() && live.is_some() {
        return;
    }
    let base = match live {
        Some(l) => without_managed_fields(l),
        None => skeleton(req.schema.kind),
    };
    let cmp = req.compare(&base, new);
    let changed = cmp.changed();
    // Every manager loses what this write changed or removed (`Updater.update`, forced, for
    // the "current-operation" manager), this one's own entry included.
    for e in &mut entries {
        e.set = e.set.difference(&changed).difference(&cmp.removed);
    }
    let mut took = changed;
    let strip = strip_set();
    took = took.difference(&strip);
    let me = Entry {
        manager: if manager.is_empty() {
            "unknown".into()
        } else {
            manager.to_string()
        },
        op: Op::Update,
        api_version: req.api_version.to_string(),
        time: Some(req.now.to_string()),
        subresource: req.subresource.to_string(),
        set: Set::default(),
    };
    if !took.is_empty() {
        // `managedFieldsUpdater.Update`: merged with the manager's previous set, timed now.
        match entries.iter().position(|e| e.same_manager(&me)) {
            Some(i) => {
                entries[i].set = entries[i].set.union(&took);
                entries[i].time = me.time.clone();
            }
            None => entries.push(Entry { set: took, ..me }),
        }
    }
    entries.retain(|e| !e.set.is_empty());
    cap_update_managers(&mut entries);
    set_managed_fields(new, &mut entries);
}

/// An `Update` through `/scale` (`ScaleHandler.ToParent` over the Scale's own field manager):
/// when `spec.replicas` changed, the manager owns it, in an entry with `subresource: scale`,
/// the parent's apiVersion and no time (`ToParent` takes the times of the parent's entries,
/// where the Scale's manager has none), and the other managers lose it.
pub(crate) fn update_scale(req: &Request<'_>, live: &Value, new: &mut Value, manager: &str) {
    let replicas = |v: &Value| v.get("spec").and_then(|s| s.get("replicas")).cloned();
    let mut entries = decode(managed_fields(live)).unwrap_or_default();
    if entries.is_empty() || replicas(live) == replicas(new) {
        set_managed_fields(new, &mut entries);
        return;
    }
    let path = [field("spec"), field("replicas")];
    for e in &mut entries {
        e.set.remove_subtree(&path);
    }
    entries.retain(|e| !e.set.is_empty());
    let mut set = Set::default();
    set.insert(&path);
    entries.push(Entry {
        manager: if manager.is_empty() {
            "unknown".into()
        } else {
            manager.to_string()
        },
        op: Op::Update,
        api_version: req.api_version.to_string(),
        time: None,
        subresource: "scale".into(),
        set,
    });
    set_managed_fields(new, &mut entries);
}

/// `capManagersManager.capUpdateManagers`: beyond 10 `Update` entries, the oldest are merged,
/// per apiVersion, into an `ancient-changes` entry.
fn cap_update_managers(entries: &mut Vec<Entry>) {
    let updaters = entries.iter().filter(|e| e.op == Op::Update).count();
    if updaters <= MAX_UPDATE_MANAGERS {
        return;
    }
    let mut order: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].op == Op::Update)
        .collect();
    order.sort_by(|&a, &b| {
        let (p, q) = (&entries[a], &entries[b]);
        p.seconds()
            .cmp(&q.seconds())
            .then_with(|| identifier(p).cmp(&identifier(q)))
    });
    let mut length = updaters;
    let mut first_of_version: Vec<(String, usize)> = Vec::new();
    let mut gone = vec![false; entries.len()];
    for i in order {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let version = entries[i].api_version.clone();
        match first_of_version.iter().find(|(v, _)| *v == version) {
            Some(&(_, first)) => {
                let (set, time) = (entries[i].set.clone(), entries[i].time.clone());
                let bucket = &mut entries[first];
                bucket.manager = "ancient-changes".into();
                bucket.subresource = String::new();
                bucket.set = set.union(&bucket.set);
                bucket.time = time;
                gone[i] = true;
                length -= 1;
            }
            None => first_of_version.push((version, i)),
        }
    }
    let mut i = 0;
    entries.retain(|_| {
        i += 1;
        !gone[i - 1]
    });
}

/// The JSON identifier capping sorts by (`BuildManagerIdentifier`).
fn identifier(e: &Entry) -> String {
    let mut m = Map::new();
    m.insert("manager".into(), json!(e.manager));
    m.insert("operation".into(), json!(e.op.as_str()));
    if e.op == Op::Update {
        m.insert("apiVersion".into(), json!(e.api_version));
    }
    if !e.subresource.is_empty() {
        m.insert("subresource".into(), json!(e.subresource));
    }
    Value::Object(m).to_string()
}

/// The result of an apply.
pub(crate) struct Applied {
    /// The object to store, with its managed fields.
    pub object: Value,
}

/// Applies `config` for `manager` to `live` (`None` when the apply creates the object), as
/// `FieldManager.Apply`. The error is the `400` or `409` kube-apiserver answers.
pub(crate) fn apply(
    req: &Request<'_>,
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
) -> Result<Applied, ApiError> {
    // `versionCheckManager.Apply`, the outermost manager of `NewDefaultFieldManager`: the
    // applied object's group, version and kind must be the endpoint's, a missing `apiVersion`
    // or `kind` included (so `structuredMergeManager`'s "Incorrect version specified in apply
    // patch" is never reached from a request).
    let sent = |k: &str| config.get(k).and_then(Value::as_str).unwrap_or("");
    if sent("apiVersion") != req.api_version || sent("kind") != req.schema.kind {
        // `schema.ParseGroupVersion` and `GroupVersionKind.String`.
        let (group, version) = match sent("apiVersion").split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", sent("apiVersion")),
        };
        return Err(ApiError::bad_request(format!(
            "invalid object type: {group}/{version}, Kind={}",
            sent("kind")
        )));
    }
    if managed_fields(config).is_some_and(|v| !v.is_null()) {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    let mut entries = decode(live.and_then(managed_fields)).unwrap_or_default();
    let live_obj = live
        .map(without_managed_fields)
        .unwrap_or_else(|| json!({}));
    if entries.is_empty() && live.is_some() {
        // `skipNonAppliedManager.Apply`: the existing fields go to `before-first-apply`.
        let mut owned = req.compare(&skeleton(req.schema.kind), &live_obj).changed();
        owned = owned.difference(&strip_set());
        if !owned.is_empty() {
            entries.push(Entry {
                manager: "before-first-apply".into(),
                op: Op::Update,
                api_version: req.api_version.to_string(),
                time: Some(req.now.to_string()),
                subresource: req.subresource.to_string(),
                set: owned,
            });
        }
    }
    let merged = typed::merge(req.schema, &live_obj, config);
    let mut set = typed::field_set(req.schema, config);
    req.filter(&mut set);
    let set = set.difference(&strip_set());
    let me = Entry {
        manager: manager.to_string(),
        op: Op::Apply,
        api_version: req.api_version.to_string(),
        time: None,
        subresource: req.subresource.to_string(),
        set,
    };
    let (last, time) = match entries.iter().position(|e| e.same_manager(&me)) {
        Some(i) => {
            let e = entries.remove(i);
            (e.set, e.time)
        }
        None => (Set::default(), None),
    };
    entries.push(Entry { time, ..me });
    let mine = entries.len() - 1;
    // `Updater.prune`: the fields applied last time and not now that nobody owns go.
    let mut new = merged;
    if !last.is_empty() {
        let owned = entries
            .iter()
            .fold(Set::default(), |acc, e| acc.union(&e.set));
        typed::remove(req.schema, &mut new, &last.difference(&owned));
    }
    // `Updater.update`: conflicts with the fields other managers own that the apply changes.
    let cmp = req.compare(&live_obj, &new);
    let changed = cmp.changed();
    let mut conflicts: Vec<(String, String)> = Vec::new();
    for (i, e) in entries.iter_mut().enumerate() {
        if i == mine {
            continue;
        }
        let clash = e.set.intersection(&changed);
        if !force {
            let who = e.print();
            clash.for_each(&mut |p| conflicts.push((who.clone(), display(p))));
            continue;
        }
        e.set = e.set.difference(&clash);
    }
    if !conflicts.is_empty() {
        return Err(conflict_error(conflicts));
    }
    for (i, e) in entries.iter_mut().enumerate() {
        if i != mine {
            e.set = e.set.difference(&cmp.removed);
        }
    }
    let changed_object = new != live_obj;
    if changed_object {
        entries[mine].time = Some(req.now.to_string());
    }
    entries.retain(|e| !e.set.is_empty());
    let mut object = if changed_object { new } else { live_obj };
    if manager == "kubectl" {
        sync_last_applied(&mut object, config);
    }
    set_managed_fields(&mut object, &mut entries);
    Ok(Applied { object })
}

/// kubectl's client-side-apply annotation.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `lastAppliedUpdater.Apply`: an apply by the `kubectl` manager to an object that carries a
/// client-side-apply annotation rewrites it to the applied configuration (without that
/// annotation), as `buildLastApplied` encodes it (JSON with a trailing newline).
fn sync_last_applied(object: &mut Value, config: &Value) {
    let has = object
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(Value::as_str)
        .is_some_and(|v| !v.is_empty());
    if !has {
        return;
    }
    let mut cfg = config.clone();
    if let Some(a) = cfg
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        a.remove(LAST_APPLIED);
    }
    let text = format!("{cfg}\n");
    if let Some(a) = object
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        a.insert(LAST_APPLIED.into(), Value::String(text));
    }
}

/// `NewConflictError`: a `409` with one `FieldManagerConflict` cause per conflict, worded as
/// `getConflictMessage` does.
fn conflict_error(mut conflicts: Vec<(String, String)>) -> ApiError {
    conflicts.sort();
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(m, p)| {
            json!({"reason": "FieldManagerConflict", "message": format!("conflict with {m}"), "field": p})
        })
        .collect();
    let message = if let [(m, p)] = conflicts.as_slice() {
        format!("Apply failed with 1 conflict: conflict with {m}: {p}")
    } else {
        let mut managers: Vec<&str> = conflicts.iter().map(|(m, _)| m.as_str()).collect();
        managers.dedup();
        let mut lines = Vec::new();
        for m in managers {
            lines.push(format!("conflicts with {m}:"));
            for (_, p) in conflicts.iter().filter(|(w, _)| w == m) {
                lines.push(format!("- {p}"));
            }
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    ApiError::new(409, "Conflict", message).with_details(json!({"causes": causes}))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CM: Request<'static> = Request {
        schema: Schema {
            kind: "ConfigMap",
            builtin: true,
        },
        api_version: "v1",
        has_status: false,
        subresource: "",
        now: "2026-01-01T00:00:00Z",
    };

    fn managers(v: &Value) -> Vec<String> {
        v["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                format!(
                    "{}/{}",
                    e["manager"].as_str().unwrap(),
                    e["operation"].as_str().unwrap()
                )
            })
            .collect()
    }

    #[test]
    fn create_update_and_apply_conflicts() {
        let mut obj = json!({"metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"x": "1"}});
        update(&CM, None, &mut obj, "kubectl-create");
        assert_eq!(
            obj["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:data": {".": {}, "f:x": {}}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}})
        );
        let live = obj.clone();
        let mut edited = live.clone();
        edited["data"]["x"] = json!("2");
        edited["data"]["y"] = json!("3");
        update(&CM, Some(&live), &mut edited, "kubectl-edit");
        assert_eq!(
            managers(&edited),
            ["kubectl-create/Update", "kubectl-edit/Update"]
        );
        assert_eq!(
            edited["metadata"]["managedFields"][1]["fieldsV1"],
            json!({"f:data": {"f:x": {}, "f:y": {}}})
        );
        let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"x": "9"}});
        let e = apply(&CM, Some(&edited), &cfg, "ssa", false).err().unwrap();
        assert_eq!(
            e.message,
            r#"Apply failed with 1 conflict: conflict with "kubectl-edit" using v1: .data.x"#
        );
        let out = apply(&CM, Some(&edited), &cfg, "ssa", true)
            .ok()
            .unwrap()
            .object;
        assert_eq!(out["data"]["x"], "9");
        assert_eq!(
            managers(&out),
            ["ssa/Apply", "kubectl-create/Update", "kubectl-edit/Update"]
        );
        // Reset with `[{}]`: an update then leaves the object unmanaged.
        let mut reset = out.clone();
        reset["metadata"]["managedFields"] = json!([{}]);
        update(&CM, Some(&out), &mut reset, "x");
        assert!(reset["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn caps_update_managers() {
        let mut obj = json!({"metadata": {"name": "c"}, "data": {}});
        update(&CM, None, &mut obj, "m0");
        for i in 1..=11 {
            let live = obj.clone();
            obj["data"][format!("k{i}")] = json!("v");
            let req = Request {
                now: if i < 5 {
                    "2026-01-01T00:00:01Z"
                } else {
                    "2026-01-01T00:00:02Z"
                },
                ..CM
            };
            update(&req, Some(&live), &mut obj, &format!("m{i}"));
        }
        let m = managers(&obj);
        assert_eq!(m.len(), 10, "{m:?}");
        assert!(m.contains(&"ancient-changes/Update".to_string()), "{m:?}");
    }
}
