//! Server-side apply's field ownership, approximated: each apply manager's fields are recorded
//! as a `metadata.managedFields` entry (`operation: Apply`, `fieldsType: FieldsV1`), and a field
//! a manager applied before and no longer applies is removed unless another entry owns it, as
//! the real field manager removes it
//! (`staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal/structuredmerge.go`
//! `Apply`, over structured-merge-diff's `Updater.Apply`, which prunes the fields that left the
//! manager's set and that no other manager owns).
//!
//! Applying a field another apply manager owns with a different value is a `409` conflict
//! (`staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal/conflict.go`
//! `NewConflictError`), unless `force` moves the field to the applier.
//!
//! What differs: lists are atomic (the real field sets key the elements of associative lists,
//! such as containers by name), and non-apply writes add no `Update` entries and take no
//! ownership (so they never conflict).

use serde_json::{Map, Value, json};

use crate::apimachinery::errors::ApiError;

/// The top-level and metadata fields the field manager never tracks
/// (`staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal/stripmeta.go`).
const STRIPPED_TOP: &[&str] = &["apiVersion", "kind"];
const STRIPPED_META: &[&str] = &[
    "name",
    "namespace",
    "creationTimestamp",
    "selfLink",
    "uid",
    "generation",
    "managedFields",
    "resourceVersion",
];

/// The FieldsV1 set of an applied configuration: `f:<key>` per object key, `{}` for a leaf
/// (a scalar, a list, or an empty object).
pub(crate) fn fields_v1(applied: &Value) -> Value {
    let Some(obj) = applied.as_object() else {
        return json!({});
    };
    let mut out = Map::new();
    for (k, v) in obj {
        if STRIPPED_TOP.contains(&k.as_str()) {
            continue;
        }
        let set = if k == "metadata" {
            let tracked: Map<String, Value> = v
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(mk, _)| !STRIPPED_META.contains(&mk.as_str()))
                .map(|(mk, mv)| (format!("f:{mk}"), set_of(mv)))
                .collect();
            if tracked.is_empty() {
                continue;
            }
            Value::Object(tracked)
        } else {
            set_of(v)
        };
        out.insert(format!("f:{k}"), set);
    }
    Value::Object(out)
}

fn set_of(v: &Value) -> Value {
    match v.as_object() {
        Some(m) if !m.is_empty() => Value::Object(
            m.iter()
                .map(|(k, v)| (format!("f:{k}"), set_of(v)))
                .collect(),
        ),
        _ => json!({}),
    }
}

/// The leaf paths of a FieldsV1 set.
fn leaves(set: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let Some(m) = set.as_object().filter(|m| !m.is_empty()) else {
        if !prefix.is_empty() {
            out.push(prefix.clone());
        }
        return;
    };
    for (k, v) in m {
        // Only `f:` keys are produced here; other managers' entries may carry `k:`/`v:`/`i:`
        // elements of lists, which this approximation treats as owning the whole list field.
        let Some(name) = k.strip_prefix("f:") else {
            if !prefix.is_empty() {
                out.push(prefix.clone());
            }
            continue;
        };
        prefix.push(name.to_string());
        leaves(v, prefix, out);
        prefix.pop();
    }
}

fn leaf_paths(set: &Value) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    leaves(set, &mut Vec::new(), &mut out);
    out
}

/// Whether one path is a prefix of the other (the two name overlapping fields).
fn overlaps(a: &[String], b: &[String]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// Removes `path` from `obj`, then the objects the removal left empty below the top level.
fn remove_path(obj: &mut Value, path: &[String]) {
    fn go(v: &mut Value, path: &[String], depth: usize) {
        let Some(m) = v.as_object_mut() else { return };
        match path {
            [] => {}
            [last] => {
                m.remove(last);
            }
            [first, rest @ ..] => {
                if let Some(child) = m.get_mut(first) {
                    go(child, rest, depth + 1);
                    // Emptied maps go (Go's omitempty drops empty maps); top-level fields such
                    // as `spec` stay.
                    if depth >= 1 && child.as_object().is_some_and(Map::is_empty) {
                        m.remove(first);
                    }
                }
            }
        }
    }
    go(obj, path, 0);
}

/// The entries of `metadata.managedFields`.
fn entries(obj: &Value) -> Vec<Value> {
    obj.get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn is_entry_of(e: &Value, manager: &str, subresource: &str) -> bool {
    e.get("manager").and_then(Value::as_str) == Some(manager)
        && e.get("operation").and_then(Value::as_str) == Some("Apply")
        && e.get("subresource").and_then(Value::as_str).unwrap_or("") == subresource
}

/// After the applied configuration was merged into `new` (from the stored `old`): removes the
/// fields `manager` applied last time and not this time that no other entry owns, and records
/// the manager's new field set. The entry is rewritten only when the set or the object
/// changed, so that an unchanged apply stays a no-op.
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish(
    old: &Value,
    new: &mut Value,
    applied: &Value,
    manager: &str,
    force: bool,
    subresource: &str,
    api_version: &str,
    now: &str,
) -> Result<(), ApiError> {
    let set = fields_v1(applied);
    let stored = entries(old);
    let mut list = stored.clone();
    resolve_conflicts(old, applied, &set, &mut list, manager, subresource, force)?;
    let prev = list
        .iter()
        .position(|e| is_entry_of(e, manager, subresource));
    let prev_set = prev.and_then(|i| list[i].get("fieldsV1"));
    if let Some(prev_set) = prev_set {
        let now_paths = leaf_paths(&set);
        let others: Vec<Vec<String>> = list
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != prev)
            .filter_map(|(_, e)| e.get("fieldsV1"))
            .flat_map(leaf_paths)
            .collect();
        for path in leaf_paths(prev_set) {
            let kept = now_paths.iter().any(|p| overlaps(p, &path))
                || others.iter().any(|p| overlaps(p, &path));
            if !kept {
                remove_path(new, &path);
            }
        }
    }
    // With the entries in place as they stand (the stored ones, unless a forced apply took
    // fields), `new` equals `old` when the apply changed nothing.
    set_entries(new, &list);
    if prev_set == Some(&set) && list == stored && *new == *old {
        return Ok(());
    }
    let entry = entry(manager, api_version, now, set, subresource);
    match prev {
        Some(i) => list[i] = entry,
        None => list.push(entry),
    }
    set_entries(new, &list);
    Ok(())
}

fn value_at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, k| cur.get(k))
}

/// Removes a leaf path from a FieldsV1 set, and the objects that leaves empty.
fn remove_from_set(set: &mut Value, path: &[String]) {
    let Some(m) = set.as_object_mut() else { return };
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let key = format!("f:{first}");
    if rest.is_empty() {
        m.remove(&key);
        return;
    }
    if let Some(child) = m.get_mut(&key) {
        remove_from_set(child, rest);
        if child.as_object().is_some_and(Map::is_empty) {
            m.remove(&key);
        }
    }
}

/// The conflicts of an apply: fields the applied configuration sets to a value other than the
/// live one that another apply manager owns. With `force` they move to the applier (they leave
/// the other entries, and an entry left empty goes); without, a `409` as `NewConflictError`.
fn resolve_conflicts(
    old: &Value,
    applied: &Value,
    set: &Value,
    list: &mut Vec<Value>,
    manager: &str,
    subresource: &str,
    force: bool,
) -> Result<(), ApiError> {
    let mut conflicts: Vec<(String, Vec<String>)> = Vec::new();
    for path in leaf_paths(set) {
        let differs = value_at(old, &path) != value_at(applied, &path);
        if !differs {
            continue;
        }
        for e in list.iter_mut() {
            if is_entry_of(e, manager, subresource) {
                continue;
            }
            let owned = e
                .get("fieldsV1")
                .map(leaf_paths)
                .unwrap_or_default()
                .into_iter()
                .filter(|p| overlaps(p, &path))
                .collect::<Vec<_>>();
            if owned.is_empty() {
                continue;
            }
            if force {
                if let Some(fs) = e.get_mut("fieldsV1") {
                    for p in &owned {
                        remove_from_set(fs, p);
                    }
                }
            } else {
                let who = e.get("manager").and_then(Value::as_str).unwrap_or("");
                conflicts.push((who.to_string(), path.clone()));
            }
        }
    }
    if force {
        list.retain(|e| {
            e.get("fieldsV1")
                .and_then(Value::as_object)
                .is_none_or(|m| !m.is_empty())
        });
        return Ok(());
    }
    if conflicts.is_empty() {
        return Ok(());
    }
    // fieldpath.Path.String(): `.field` per element.
    let show = |p: &[String]| p.iter().map(|k| format!(".{k}")).collect::<String>();
    let quoted = |m: &str| crate::apimachinery::errors::go_quote(m);
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(m, p)| {
            json!({"reason": "FieldManagerConflict", "message": format!("conflict with {}", quoted(m)), "field": show(p)})
        })
        .collect();
    let message = if let [(m, p)] = conflicts.as_slice() {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            quoted(m),
            show(p)
        )
    } else {
        let mut managers: Vec<&str> = conflicts.iter().map(|(m, _)| m.as_str()).collect();
        managers.sort_unstable();
        managers.dedup();
        let mut lines = Vec::new();
        for m in managers {
            lines.push(format!("conflicts with {}:", quoted(m)));
            for (_, p) in conflicts.iter().filter(|(w, _)| w == m) {
                lines.push(format!("- {}", show(p)));
            }
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    Err(ApiError::new(409, "Conflict", message).with_details(json!({"causes": causes})))
}

/// The managedFields entry of an apply that creates the object.
pub(crate) fn entry_for_create(
    applied: &Value,
    manager: &str,
    api_version: &str,
    now: &str,
) -> Value {
    json!([entry(manager, api_version, now, fields_v1(applied), "")])
}

/// An `Apply` entry of `managedFields` (`subresource` only when there is one).
fn entry(manager: &str, api_version: &str, now: &str, set: Value, subresource: &str) -> Value {
    let mut entry = json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": set,
    });
    if !subresource.is_empty()
        && let Some(o) = entry.as_object_mut()
    {
        o.insert("subresource".into(), json!(subresource));
    }
    entry
}

fn set_entries(obj: &mut Value, list: &[Value]) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list.to_vec()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_sets() {
        let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"x": "1", "y": "2"}});
        assert_eq!(
            fields_v1(&applied),
            json!({"f:data": {"f:x": {}, "f:y": {}}, "f:metadata": {"f:labels": {"f:a": {}}}})
        );
        assert_eq!(
            fields_v1(&json!({"metadata": {"name": "c"}, "spec": {"list": [1], "o": {}}})),
            json!({"f:spec": {"f:list": {}, "f:o": {}}})
        );
    }

    #[test]
    fn a_field_left_out_is_removed_unless_someone_else_owns_it() {
        let first = json!({"metadata": {"name": "c", "labels": {"a": "1", "b": "2"}}, "data": {"x": "1", "y": "2"}});
        let mut old = first.clone();
        old["metadata"]["managedFields"] = entry_for_create(&first, "m", "v1", "t0");
        let second = json!({"metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"x": "1"}});
        let mut new = old.clone();
        json_patch::merge(&mut new, &second);
        finish(&old, &mut new, &second, "m", false, "", "v1", "t1").unwrap();
        assert_eq!(new["data"], json!({"x": "1"}));
        assert_eq!(new["metadata"]["labels"], json!({"a": "1"}));
        assert_eq!(new["metadata"]["managedFields"][0]["time"], "t1");

        // Another manager's entry keeps a field.
        let mut shared = old.clone();
        shared["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .push(
                json!({"manager": "o", "operation": "Apply", "fieldsV1": {"f:data": {"f:y": {}}}}),
            );
        let mut new = shared.clone();
        json_patch::merge(&mut new, &second);
        finish(&shared, &mut new, &second, "m", false, "", "v1", "t1").unwrap();
        assert_eq!(new["data"], json!({"x": "1", "y": "2"}));

        // The same apply again changes nothing, not even the entry's time.
        let stored = new.clone();
        let mut again = stored.clone();
        json_patch::merge(&mut again, &second);
        finish(&stored, &mut again, &second, "m", false, "", "v1", "t2").unwrap();
        assert_eq!(again, stored);

        // Another apply manager's field with a different value: a conflict, or with force
        // the field moves (the other entry, left empty, goes).
        let mut owned = json!({"metadata": {"name": "c", "managedFields": [
            {"manager": "o", "operation": "Apply", "fieldsV1": {"f:data": {"f:x": {}}}}]},
            "data": {"x": "1"}});
        let take = json!({"metadata": {"name": "c"}, "data": {"x": "2"}});
        let mut new = owned.clone();
        json_patch::merge(&mut new, &take);
        let e = finish(&owned, &mut new, &take, "m", false, "", "v1", "t1").unwrap_err();
        assert_eq!(e.code, 409);
        assert_eq!(
            e.message,
            r#"Apply failed with 1 conflict: conflict with "o": .data.x"#
        );
        // The same value is shared ownership, no conflict.
        let same = json!({"metadata": {"name": "c"}, "data": {"x": "1"}});
        let mut new = owned.clone();
        finish(&owned, &mut new, &same, "m", false, "", "v1", "t1").unwrap();
        assert_eq!(
            new["metadata"]["managedFields"].as_array().map(Vec::len),
            Some(2)
        );
        let mut new = owned.clone();
        json_patch::merge(&mut new, &take);
        finish(&owned, &mut new, &take, "m", true, "", "v1", "t1").unwrap();
        let managers: Vec<&str> = new["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["manager"].as_str())
            .collect();
        assert_eq!(managers, ["m"]);
        owned["data"]["x"] = json!("2");
        assert_eq!(new["data"], owned["data"]);

        // Removing the last key of a map removes the map below the top level.
        let mut v = json!({"metadata": {"labels": {"a": "1"}}, "data": {"x": "1"}});
        remove_path(&mut v, &["metadata".into(), "labels".into(), "a".into()]);
        remove_path(&mut v, &["data".into(), "x".into()]);
        assert_eq!(v, json!({"metadata": {}, "data": {}}));
    }
}
