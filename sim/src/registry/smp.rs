//! Strategic merge patch (`application/strategic-merge-patch+json`) for the built-in kinds the
//! sim serves, following apimachinery's
//! `staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go` `StrategicMergePatch`
//! (`mergeMap`, `mergeSlice`, `mergeSliceWithSpecialElements`, `normalizeElementOrder`):
//! - maps merge key by key; `null` deletes a key;
//! - lists with `patchStrategy:"merge"` merge by their `patchMergeKey` (containers by `name`,
//!   container ports by `containerPort`, Service ports by `port`, ...) or, for lists of
//!   primitives (`metadata.finalizers`), as a set; other lists are replaced;
//! - the directives kubectl sends: `$patch: replace|merge|delete` (in a map or as a list
//!   element), `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>`, `$retainKeys`.
//!
//! The merge keys come from the `patchStrategy`/`patchMergeKey` struct tags of `k8s.io/api`
//! (`core/v1/types.go`, `apps/v1/types.go`, `meta/v1/types.go`) for the fields of the kinds the
//! sim serves, kept in [`super::listschema`]; other lists are atomic (replaced). Custom kinds have no strategic merge patch:
//! the sim refuses it with 415 as kube-apiserver does.

use serde_json::{Map, Value};

use super::listschema::{PatchStrategy as ListStrategy, patch_strategy};

/// The strategy of the list at `path` in an object of `kind` ([`super::listschema`]).
fn list_strategy(kind: &str, path: &[String]) -> ListStrategy {
    patch_strategy(kind, path)
}

const PATCH: &str = "$patch";
const SET_ORDER: &str = "$setElementOrder/";
const DELETE_PRIMITIVES: &str = "$deleteFromPrimitiveList/";
const RETAIN_KEYS: &str = "$retainKeys";

/// Applies a strategic merge patch to `original` (an object of built-in `kind`). The error is
/// the message of kube-apiserver's 400 for a malformed patch.
pub(crate) fn apply(kind: &str, original: &mut Value, patch: &Value) -> Result<(), String> {
    let Some(p) = patch.as_object() else {
        return Err("a strategic merge patch must be a JSON object".into());
    };
    if !original.is_object() {
        *original = Value::Object(Map::new());
    }
    let Value::Object(o) = original else {
        return Err("the object is not a JSON object".into());
    };
    let mut path = Vec::new();
    merge_map(kind, o, p, &mut path)
}

fn directive(m: &Map<String, Value>) -> Result<Option<&str>, String> {
    match m.get(PATCH) {
        None => Ok(None),
        Some(Value::String(s)) if matches!(s.as_str(), "replace" | "merge" | "delete") => {
            Ok(Some(s))
        }
        Some(v) => Err(format!("Unable to find unknown patch type: {v}")),
    }
}

fn without_directive(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter()
        .filter(|(k, _)| k.as_str() != PATCH)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn merge_map(
    kind: &str,
    orig: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    path: &mut Vec<String>,
) -> Result<(), String> {
    match directive(patch)? {
        Some("replace") => {
            *orig = without_directive(patch);
            return Ok(());
        }
        Some("delete") => {
            orig.clear();
            return Ok(());
        }
        _ => {}
    }
    if let Some(keys) = patch.get(RETAIN_KEYS) {
        let keys = keys
            .as_array()
            .filter(|a| a.iter().all(Value::is_string))
            .ok_or("invalid patch: $retainKeys must be a list of strings")?;
        orig.retain(|k, _| keys.iter().any(|x| x == k.as_str()));
    }
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(DELETE_PRIMITIVES) {
            let gone = v
                .as_array()
                .ok_or("invalid patch: $deleteFromPrimitiveList must be a list")?;
            if let Some(Value::Array(list)) = orig.get_mut(field) {
                list.retain(|x| !gone.contains(x));
            }
        }
    }
    // `mergePatchIntoOriginal` orders a list with `$setElementOrder` against the list as it
    // was before this patch.
    let before: Map<String, Value> = patch
        .keys()
        .filter_map(|k| k.strip_prefix(SET_ORDER))
        .map(|f| {
            (
                f.to_string(),
                orig.get(f).cloned().unwrap_or(Value::Array(Vec::new())),
            )
        })
        .collect();
    for (k, pv) in patch {
        if k.starts_with('$') {
            continue;
        }
        if pv.is_null() {
            orig.remove(k);
            continue;
        }
        path.push(k.clone());
        let r = merge_field(kind, orig, k, pv, path);
        path.pop();
        r?;
    }
    for (k, order) in patch {
        if let Some(field) = k.strip_prefix(SET_ORDER) {
            let order = order
                .as_array()
                .ok_or("invalid patch: $setElementOrder must be a list")?;
            path.push(field.to_string());
            let strategy = list_strategy(kind, path);
            path.pop();
            let server: &[Value] = before
                .get(field)
                .and_then(Value::as_array)
                .map_or(&[], Vec::as_slice);
            if let Some(Value::Array(list)) = orig.get_mut(field) {
                let merged = std::mem::take(list);
                *list = normalize_order(merged, order, server, strategy);
            }
        }
    }
    Ok(())
}

fn merge_field(
    kind: &str,
    orig: &mut Map<String, Value>,
    k: &str,
    pv: &Value,
    path: &mut Vec<String>,
) -> Result<(), String> {
    match pv {
        Value::Object(pm) => {
            if directive(pm)? == Some("delete") {
                orig.remove(k);
                return Ok(());
            }
            let slot = orig
                .entry(k.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            if let Value::Object(om) = slot {
                merge_map(kind, om, pm, path)?;
            }
        }
        Value::Array(pa) => {
            let strategy = list_strategy(kind, path);
            let slot = orig
                .entry(k.to_string())
                .or_insert_with(|| Value::Array(Vec::new()));
            if !slot.is_array() {
                *slot = Value::Array(Vec::new());
            }
            if let Value::Array(oa) = slot {
                merge_list(kind, oa, pa, strategy, path)?;
            }
        }
        other => {
            orig.insert(k.to_string(), other.clone());
        }
    }
    Ok(())
}

fn merge_list(
    kind: &str,
    orig: &mut Vec<Value>,
    patch: &[Value],
    strategy: ListStrategy,
    path: &mut Vec<String>,
) -> Result<(), String> {
    // An element `{"$patch": "replace"}` replaces the whole list with the other elements.
    let mut replace = false;
    for el in patch {
        if let Value::Object(m) = el {
            if directive(m)? == Some("replace") {
                replace = true;
            }
        }
    }
    if replace || strategy == ListStrategy::Replace {
        *orig = patch
            .iter()
            .filter(|el| !el.get(PATCH).is_some_and(|d| d == "replace"))
            .cloned()
            .collect();
        return Ok(());
    }
    // `mergeSlice` orders what it merged against the list as it was (without the entries a
    // `$patch: delete` element removed) and the patch's own elements.
    let server: Vec<Value> = match strategy {
        ListStrategy::MergeByKey(key) => orig
            .iter()
            .filter(|o| {
                !patch.iter().any(|p| {
                    p.get(PATCH).is_some_and(|d| d == "delete") && p.get(key) == o.get(key)
                })
            })
            .cloned()
            .collect(),
        _ => orig.clone(),
    };
    let patch_order: Vec<Value> = patch
        .iter()
        .filter(|p| p.get(PATCH).is_none())
        .cloned()
        .collect();
    match strategy {
        ListStrategy::Replace => {}
        ListStrategy::MergePrimitives => {
            for el in patch {
                if el.is_object() || el.is_array() {
                    return Err(format!(
                        "invalid patch: the list {} holds primitives",
                        path.join(".")
                    ));
                }
                if !orig.contains(el) {
                    orig.push(el.clone());
                }
            }
        }
        ListStrategy::MergeByKey(key) => {
            for el in patch {
                let Value::Object(pm) = el else {
                    return Err(format!(
                        "invalid patch: the list {} holds objects merged by {key:?}",
                        path.join(".")
                    ));
                };
                let Some(id) = pm.get(key) else {
                    return Err(format!(
                        "map: {} does not contain declared merge key: {key}",
                        Value::Object(pm.clone())
                    ));
                };
                let at = orig.iter().position(|o| o.get(key) == Some(id));
                if directive(pm)? == Some("delete") {
                    orig.retain(|o| o.get(key) != Some(id));
                    continue;
                }
                match at.and_then(|i| orig.get_mut(i)) {
                    Some(Value::Object(om)) => merge_map(kind, om, pm, path)?,
                    _ => {
                        let mut fresh = Map::new();
                        merge_map(kind, &mut fresh, pm, path)?;
                        orig.push(Value::Object(fresh));
                    }
                }
            }
        }
    }
    let merged = std::mem::take(orig);
    *orig = normalize_order(merged, &patch_order, &server, strategy);
    Ok(())
}

/// Where `el` is in `list`: by merge key for lists of objects, by value for primitives
/// (`index`).
fn index_in(list: &[Value], el: &Value, strategy: ListStrategy) -> Option<usize> {
    list.iter().position(|o| match strategy {
        ListStrategy::MergeByKey(key) => o.get(key).is_some() && o.get(key) == el.get(key),
        _ => o == el,
    })
}

/// Orders a merged list as `normalizeElementOrder` does: its elements named in `order` (the
/// patch, or its `$setElementOrder`) sorted by that order, the server-only ones by their place
/// in `server` (the list before the patch), and the two merged by `mergeSortedSlice`: a
/// server-only element goes first only while it precedes the next patch element in `server`,
/// so an element new to the list lands before the server-only ones that follow it (a new
/// finalizer or condition patched into `[a, b]` gives `[new, a, b]`).
fn normalize_order(
    merged: Vec<Value>,
    order: &[Value],
    server: &[Value],
    strategy: ListStrategy,
) -> Vec<Value> {
    let (mut patched, mut server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|el| index_in(order, el, strategy).is_some());
    // Every element is found in the list it is sorted by, so a stable sort by index is
    // `sort.SliceStable` with `normalizeSliceOrder`'s comparator.
    patched.sort_by_key(|el| index_in(order, el, strategy));
    server_only.sort_by_key(|el| index_in(server, el, strategy));
    let (mut left, mut right) = (
        server_only.into_iter().peekable(),
        patched.into_iter().peekable(),
    );
    let mut out = Vec::new();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!(
                (index_in(server, l, strategy), index_in(server, r, strategy)),
                (Some(li), Some(ri)) if li < ri
            ),
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(kind: &str, mut o: Value, p: Value) -> Value {
        apply(kind, &mut o, &p).unwrap();
        o
    }

    #[test]
    fn containers_merge_by_name_with_directives() {
        let d = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "a:1", "ports": [{"containerPort": 80}]},
            {"name": "b", "image": "b:1"}
        ]}}}});
        // What kubectl apply sends when container b is replaced by c and a's image changes.
        let p = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}],
            "containers": [
                {"name": "a", "image": "a:2"},
                {"$patch": "delete", "name": "b"},
                {"name": "c", "image": "c:1"}
            ]
        }}}});
        let out = smp("Deployment", d, p);
        let cs = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(
            cs,
            &json!([
                {"name": "c", "image": "c:1"},
                {"name": "a", "image": "a:2", "ports": [{"containerPort": 80}]}
            ])
        );
    }

    #[test]
    fn new_list_elements_go_where_normalize_element_order_puts_them() {
        // A new finalizer lands before the server-only ones (`mergeSortedSlice` takes the
        // patch element when the server-only one is not known to precede it).
        let out = smp(
            "ConfigMap",
            json!({"metadata": {"finalizers": ["a/x", "b/x"]}}),
            json!({"metadata": {"finalizers": ["c/x"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["c/x", "a/x", "b/x"]));
        // An element already there keeps its place; the new one follows it in the patch.
        let out = smp(
            "ConfigMap",
            json!({"metadata": {"finalizers": ["a/x", "b/x"]}}),
            json!({"metadata": {"finalizers": ["b/x", "c/x"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["a/x", "b/x", "c/x"]));
        // Conditions merge by type: the changed one in place, a new one first.
        let out = smp(
            "Pod",
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"},
                                             {"type": "Initialized", "status": "True"}]}}),
            json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"},
                                             {"type": "Ready", "status": "True"}]}}),
        );
        let types: Vec<&str> = out["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["PodScheduled", "Ready", "Initialized"]);
        assert_eq!(out["status"]["conditions"][1]["status"], "True");
        // `$setElementOrder` decides the patch elements' order.
        let out = smp(
            "Pod",
            json!({"status": {"conditions": [{"type": "A"}, {"type": "B"}]}}),
            json!({"status": {"$setElementOrder/conditions": [{"type": "B"}, {"type": "C"}, {"type": "A"}],
                              "conditions": [{"type": "C"}]}}),
        );
        let types: Vec<&str> = out["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["B", "C", "A"]);
    }

    #[test]
    fn ports_env_finalizers_and_replace() {
        let svc = json!({"spec": {"ports": [{"port": 80, "name": "http"}]}});
        let out = smp(
            "Service",
            svc,
            json!({"spec": {"ports": [{"port": 443, "name": "https"}]}}),
        );
        assert_eq!(out["spec"]["ports"].as_array().unwrap().len(), 2);
        let cm = json!({"metadata": {"finalizers": ["a"]}, "data": {"x": "1", "y": "2"}});
        let out = smp(
            "ConfigMap",
            cm,
            json!({"metadata": {"finalizers": ["b", "a"]}, "data": {"x": null}}),
        );
        // `normalizeElementOrder`: the patch's elements in the patch's order.
        assert_eq!(out["metadata"]["finalizers"], json!(["b", "a"]));
        assert_eq!(out["data"], json!({"y": "2"}));
        let out = smp(
            "ConfigMap",
            out,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        // Atomic lists (args) are replaced; `$patch: replace` replaces a merge list or a map.
        let pod = json!({"spec": {"containers": [{"name": "a", "args": ["1", "2"], "env": [{"name": "X", "value": "1"}]}]}});
        let out = smp(
            "Pod",
            pod,
            json!({"spec": {"containers": [{"name": "a", "args": ["3"], "env": [{"name": "Y", "value": "2"}]}]}}),
        );
        assert_eq!(out["spec"]["containers"][0]["args"], json!(["3"]));
        assert_eq!(
            out["spec"]["containers"][0]["env"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        let out = smp(
            "Pod",
            out,
            json!({"spec": {"containers": [{"name": "a", "env": [{"$patch": "replace"}, {"name": "Z", "value": "3"}]}]}}),
        );
        assert_eq!(
            out["spec"]["containers"][0]["env"],
            json!([{"name": "Z", "value": "3"}])
        );
        let out = smp(
            "Pod",
            json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
            json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"c": "3"}));
        let out = smp(
            "Deployment",
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        );
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn malformed_patches() {
        let mut o = json!({"spec": {"containers": [{"name": "a"}]}});
        assert!(
            apply(
                "Pod",
                &mut o,
                &json!({"spec": {"containers": [{"image": "x"}]}})
            )
            .is_err()
        );
        assert!(apply("Pod", &mut o, &json!({"$patch": "bogus"})).is_err());
        assert!(apply("Pod", &mut o, &json!([1])).is_err());
    }
}
