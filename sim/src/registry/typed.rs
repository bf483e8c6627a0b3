//! Structured-merge-diff's walks over an object with its schema (`sigs.k8s.io/structured-merge-
//! diff/typed`), over JSON with the sim's schema knowledge ([`super::listschema`]):
//! - [`field_set`]: the paths an object sets (`tofieldset.go`): leaves, list elements (which
//!   are members with their fields below), empty or null values, atomic lists and objects;
//! - [`compare`]: what changed between two objects (`TypedValue.Compare` over `merge.go`'s
//!   walker): leaves added, modified or removed, and items (object fields, list elements)
//!   added or removed;
//! - [`merge`]: an applied configuration merged into the live object (`TypedValue.Merge`):
//!   objects field by field, associative lists element by element in `visitListItems`' order,
//!   atomic values replaced;
//! - [`remove`]: an object without the parts at a set's paths (`RemoveItems`).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::fieldpath::{Pe, Set};
use super::listschema::{self, ListType};

/// The schema an object is walked with: its kind, and whether the sim knows its Go types.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schema<'a> {
    /// The object's kind.
    pub kind: &'a str,
    /// A built-in kind (custom resources have no schema in the sim).
    pub builtin: bool,
}

impl Schema<'_> {
    fn list_type(&self, path: &[String]) -> ListType {
        listschema::list_type(self.kind, self.builtin, path)
    }

    fn atomic_object(&self, path: &[String]) -> bool {
        listschema::atomic_object(self.kind, self.builtin, path)
    }

    fn atomic_element(&self, path: &[String]) -> bool {
        listschema::atomic_element(self.kind, path)
    }

    /// The path elements of a list's elements, or `None` when the list is to be treated as
    /// atomic (atomic by schema, or elements the schema's keys cannot identify).
    fn element_pes(&self, path: &[String], list: &[Value]) -> Option<Vec<Pe>> {
        match self.list_type(path) {
            ListType::Atomic => None,
            ListType::Set => list
                .iter()
                .map(|v| {
                    (!v.is_object() && !v.is_array())
                        .then(|| serde_json::to_string(v).ok().map(Pe::Value))
                        .flatten()
                })
                .collect(),
            ListType::Map(keys) => list.iter().map(|v| key_pe(v, keys)).collect(),
        }
    }
}

/// `keyedAssociativeListItemToPathElement`: the element's key fields (or their schema
/// defaults) as a sorted JSON object; `None` when it has none of them or is not an object.
fn key_pe(v: &Value, keys: &[&str]) -> Option<Pe> {
    let m = v.as_object()?;
    let mut fields = Map::new();
    for k in keys {
        if let Some(kv) = m.get(*k) {
            fields.insert((*k).to_string(), kv.clone());
        } else if let Some(d) = listschema::key_default(k) {
            fields.insert((*k).to_string(), d);
        }
    }
    if fields.is_empty() {
        return None;
    }
    serde_json::to_string(&Value::Object(fields))
        .ok()
        .map(Pe::Key)
}

/// The field set of `obj` (`TypedValue.ToFieldSet`).
pub(crate) fn field_set(schema: Schema<'_>, obj: &Value) -> Set {
    let mut set = Set::default();
    if let Some(m) = obj.as_object() {
        let mut w = Walk::default();
        w.object_fields(schema, m, &mut set);
    }
    set
}

#[derive(Default)]
struct Walk {
    /// The schema path: field names only.
    fields: Vec<String>,
    /// The set path.
    pes: Vec<Pe>,
}

impl Walk {
    fn object_fields(&mut self, schema: Schema<'_>, m: &Map<String, Value>, set: &mut Set) {
        for (k, v) in m {
            self.fields.push(k.clone());
            self.pes.push(Pe::Field(k.clone()));
            self.value(schema, v, set);
            self.pes.pop();
            self.fields.pop();
        }
    }

    /// A map item's value: a member when it is a leaf, else its contents.
    fn value(&mut self, schema: Schema<'_>, v: &Value, set: &mut Set) {
        match v {
            Value::Object(m) if !m.is_empty() && !schema.atomic_object(&self.fields) => {
                self.object_fields(schema, m, set);
            }
            Value::Array(a) => match schema.element_pes(&self.fields, a) {
                None => set.insert(&self.pes),
                Some(pes) => {
                    let atomic_el = schema.atomic_element(&self.fields);
                    for (pe, el) in pes.into_iter().zip(a) {
                        self.pes.push(pe);
                        set.insert(&self.pes);
                        if !atomic_el && let Some(em) = el.as_object() {
                            self.object_fields(schema, em, set);
                        }
                        self.pes.pop();
                    }
                }
            },
            _ => set.insert(&self.pes),
        }
    }
}

/// What changed between two objects (`typed.Comparison`).
#[derive(Debug, Default)]
pub(crate) struct Comparison {
    /// Paths present only in the new object.
    pub added: Set,
    /// Leaves present in both with different values.
    pub modified: Set,
    /// Paths present only in the old object.
    pub removed: Set,
}

impl Comparison {
    /// `Modified ∪ Added`.
    pub(crate) fn changed(&self) -> Set {
        self.modified.union(&self.added)
    }
}

/// Compares `lhs` (old) with `rhs` (new), as `TypedValue.Compare`.
pub(crate) fn compare(schema: Schema<'_>, lhs: &Value, rhs: &Value) -> Comparison {
    let mut c = Comparison::default();
    let mut w = Walk::default();
    w.compare_node(schema, Some(lhs), Some(rhs), &mut c, false);
    c
}

/// Whether the pair is compared or merged as a leaf (`doScalar`, atomic lists and maps, and
/// `emptyPromoteToLeaf`: both sides empty or absent).
fn is_leaf(schema: Schema<'_>, fields: &[String], l: Option<&Value>, r: Option<&Value>) -> bool {
    fn nonnull(v: Option<&Value>) -> Option<&Value> {
        v.filter(|v| !v.is_null())
    }
    let (l, r) = (nonnull(l), nonnull(r));
    let empty = |v: Option<&Value>| match v {
        None => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    };
    match (l, r) {
        (Some(Value::Object(_)) | None, Some(Value::Object(_)) | None) => {
            schema.atomic_object(fields) || empty(l) && empty(r)
        }
        (Some(Value::Array(la)), Some(Value::Array(ra))) => {
            empty(l) && empty(r)
                || schema.element_pes(fields, la).is_none()
                || schema.element_pes(fields, ra).is_none()
        }
        (Some(Value::Array(a)), None) | (None, Some(Value::Array(a))) => {
            a.is_empty() || schema.element_pes(fields, a).is_none()
        }
        _ => true,
    }
}

/// The elements of a list by path element (first occurrence wins).
fn by_pe<'v>(pes: &[Pe], list: &'v [Value]) -> BTreeMap<Pe, &'v Value> {
    let mut m = BTreeMap::new();
    for (pe, v) in pes.iter().zip(list) {
        m.entry(pe.clone()).or_insert(v);
    }
    m
}

impl Walk {
    fn compare_node(
        &mut self,
        schema: Schema<'_>,
        l: Option<&Value>,
        r: Option<&Value>,
        c: &mut Comparison,
        item: bool,
    ) {
        if is_leaf(schema, &self.fields, l, r) {
            match (l, r) {
                (None, Some(_)) => c.added.insert(&self.pes),
                (Some(_), None) => c.removed.insert(&self.pes),
                (Some(a), Some(b)) if a != b => c.modified.insert(&self.pes),
                _ => {}
            }
        } else {
            let l = l.filter(|v| !v.is_null());
            let r = r.filter(|v| !v.is_null());
            match (l, r) {
                (Some(Value::Array(_)) | None, Some(Value::Array(_)) | None) => {
                    let empty = Vec::new();
                    let la = l.and_then(Value::as_array).unwrap_or(&empty);
                    let ra = r.and_then(Value::as_array).unwrap_or(&empty);
                    let lp = schema.element_pes(&self.fields, la).unwrap_or_default();
                    let rp = schema.element_pes(&self.fields, ra).unwrap_or_default();
                    let (lm, rm) = (by_pe(&lp, la), by_pe(&rp, ra));
                    let atomic_el = schema.atomic_element(&self.fields);
                    let mut keys: Vec<&Pe> = lm.keys().chain(rm.keys()).collect();
                    keys.sort();
                    keys.dedup();
                    for pe in keys {
                        self.pes.push(pe.clone());
                        let (le, re) = (lm.get(pe).copied(), rm.get(pe).copied());
                        if atomic_el || !le.or(re).is_some_and(Value::is_object) {
                            self.leaf_rule(le, re, c);
                        } else {
                            self.compare_fields(schema, le, re, c);
                        }
                        self.item_rule(le, re, c);
                        self.pes.pop();
                    }
                }
                _ => self.compare_fields(schema, l, r, c),
            }
        }
        if item {
            self.item_rule(l, r, c);
        }
    }

    fn leaf_rule(&self, l: Option<&Value>, r: Option<&Value>, c: &mut Comparison) {
        match (l, r) {
            (None, Some(_)) => c.added.insert(&self.pes),
            (Some(_), None) => c.removed.insert(&self.pes),
            (Some(a), Some(b)) if a != b => c.modified.insert(&self.pes),
            _ => {}
        }
    }

    /// The post-item rule: an item present on one side only is added or removed.
    fn item_rule(&self, l: Option<&Value>, r: Option<&Value>, c: &mut Comparison) {
        match (l, r) {
            (None, Some(_)) => c.added.insert(&self.pes),
            (Some(_), None) => c.removed.insert(&self.pes),
            _ => {}
        }
    }

    fn compare_fields(
        &mut self,
        schema: Schema<'_>,
        l: Option<&Value>,
        r: Option<&Value>,
        c: &mut Comparison,
    ) {
        let empty = Map::new();
        let lm = l.and_then(Value::as_object).unwrap_or(&empty);
        let rm = r.and_then(Value::as_object).unwrap_or(&empty);
        let mut keys: Vec<&String> = lm.keys().chain(rm.keys()).collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            self.fields.push(k.clone());
            self.pes.push(Pe::Field(k.clone()));
            self.compare_node(schema, lm.get(k), rm.get(k), c, true);
            self.pes.pop();
            self.fields.pop();
        }
    }
}

/// Merges `config` into `live` (`TypedValue.Merge`, keeping the right-hand side's leaves). A
/// `null` in the configuration of a built-in kind removes the field, as the typed round trip
/// of the merged object drops it.
pub(crate) fn merge(schema: Schema<'_>, live: &Value, config: &Value) -> Value {
    let mut fields = Vec::new();
    merge_node(schema, &mut fields, Some(live), Some(config)).unwrap_or(Value::Null)
}

fn merge_node(
    schema: Schema<'_>,
    fields: &mut Vec<String>,
    l: Option<&Value>,
    r: Option<&Value>,
) -> Option<Value> {
    if is_leaf(schema, fields, l, r) {
        return r.or(l).cloned();
    }
    let l = l.filter(|v| !v.is_null());
    let r = r.filter(|v| !v.is_null());
    match (l, r) {
        (Some(Value::Array(_)) | None, Some(Value::Array(_)) | None) => {
            let empty = Vec::new();
            let la = l.and_then(Value::as_array).unwrap_or(&empty);
            let ra = r.and_then(Value::as_array).unwrap_or(&empty);
            Some(Value::Array(merge_list(schema, fields, la, ra)))
        }
        _ => {
            let empty = Map::new();
            let lm = l.and_then(Value::as_object).unwrap_or(&empty);
            let rm = r.and_then(Value::as_object).unwrap_or(&empty);
            let mut out = lm.clone();
            for (k, rv) in rm {
                if rv.is_null() && schema.builtin {
                    out.remove(k);
                    continue;
                }
                fields.push(k.clone());
                let merged = merge_node(schema, fields, lm.get(k), Some(rv));
                fields.pop();
                if let Some(v) = merged {
                    out.insert(k.clone(), v);
                }
            }
            Some(Value::Object(out))
        }
    }
}

/// `mergingWalker.visitListItems`: the live elements in their order, the configuration's new
/// elements placed after the shared element they follow in the configuration.
fn merge_list(
    schema: Schema<'_>,
    fields: &mut Vec<String>,
    lhs: &[Value],
    rhs: &[Value],
) -> Vec<Value> {
    let lp = schema.element_pes(fields, lhs).unwrap_or_default();
    let rp = schema.element_pes(fields, rhs).unwrap_or_default();
    let (lmap, rmap) = (by_pe(&lp, lhs), by_pe(&rp, rhs));
    let atomic_el = schema.atomic_element(fields);
    let mut shared: std::collections::VecDeque<&Pe> =
        rp.iter().filter(|pe| lmap.contains_key(*pe)).collect();
    let mut next_shared = shared.pop_front();
    let mut merged_rhs = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(lhs.len().max(rhs.len()));
    let item = |pe: &Pe, out: &mut Vec<Value>, fields: &mut Vec<String>| {
        let (lc, rc) = (lmap.get(pe).copied(), rmap.get(pe).copied());
        let v = if atomic_el {
            rc.or(lc).cloned()
        } else {
            merge_node(schema, fields, lc, rc)
        };
        if let Some(v) = v {
            out.push(v);
        }
    };
    let (mut li, mut ri) = (0, 0);
    while li < lp.len() || ri < rp.len() {
        if li < lp.len() && ri < rp.len() {
            let pe = &lp[li];
            if *pe == rp[ri] {
                merged_rhs.insert(pe.clone());
                item(pe, &mut out, fields);
                li += 1;
                ri += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if rmap.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                li += 1;
                continue;
            }
        }
        if li < lp.len() {
            let pe = &lp[li];
            if !rmap.contains_key(pe) {
                item(pe, &mut out, fields);
                li += 1;
                continue;
            } else if merged_rhs.contains(pe) {
                li += 1;
            }
        }
        if ri < rp.len() {
            let pe = &rp[ri];
            merged_rhs.insert(pe.clone());
            item(pe, &mut out, fields);
            ri += 1;
            if next_shared == Some(pe) {
                next_shared = shared.pop_front();
            }
        }
    }
    out
}

/// Removes the members of `set` from `obj` with everything below them (`RemoveItems`).
pub(crate) fn remove(schema: Schema<'_>, obj: &mut Value, set: &Set) {
    let mut fields = Vec::new();
    remove_in(schema, &mut fields, obj, set);
}

fn remove_in(schema: Schema<'_>, fields: &mut Vec<String>, v: &mut Value, set: &Set) {
    match v {
        Value::Object(m) => {
            for pe in set.elements() {
                let Pe::Field(k) = pe else { continue };
                if set.has_member(pe) {
                    m.remove(k);
                } else if let (Some(child), Some(cs)) = (m.get_mut(k), set.child(pe)) {
                    fields.push(k.clone());
                    remove_in(schema, fields, child, cs);
                    fields.pop();
                    // A map the removal emptied goes below the top level, as Go's `omitempty`
                    // drops an empty map (`spec` and the like stay).
                    if !fields.is_empty() && child.as_object().is_some_and(Map::is_empty) {
                        m.remove(k);
                    }
                }
            }
        }
        Value::Array(a) => {
            let Some(pes) = schema.element_pes(fields, a) else {
                return;
            };
            let mut keep = Vec::with_capacity(a.len());
            for (pe, mut el) in pes.into_iter().zip(a.drain(..)) {
                if set.has_member(&pe) {
                    continue;
                }
                if let Some(cs) = set.child(&pe) {
                    remove_in(schema, fields, &mut el, cs);
                }
                keep.push(el);
            }
            *a = keep;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const POD: Schema<'static> = Schema {
        kind: "Pod",
        builtin: true,
    };

    #[test]
    fn field_sets_key_list_elements() {
        let cfg = json!({"metadata": {"labels": {"a": "1"}, "finalizers": ["x/y"]},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]}});
        assert_eq!(
            field_set(POD, &cfg).to_fields_v1(),
            json!({"f:metadata": {"f:finalizers": {"v:\"x/y\"": {}}, "f:labels": {"f:a": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}})
        );
    }

    #[test]
    fn compare_and_merge_by_key() {
        let live = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}});
        let cfg = json!({"spec": {"containers": [{"name": "b", "image": "2"}, {"name": "c", "image": "1"}]}});
        let merged = merge(POD, &live, &cfg);
        let names: Vec<&str> = merged["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(merged["spec"]["containers"][1]["image"], "2");
        let c = compare(POD, &live, &merged);
        assert_eq!(
            c.modified.to_fields_v1(),
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"b\"}": {"f:image": {}}}}})
        );
        assert_eq!(
            c.added.to_fields_v1(),
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
        );
        let mut pruned = merged.clone();
        let gone =
            Set::from_fields_v1(&json!({"f:spec": {"f:containers": {"k:{\"name\":\"a\"}": {}}}}))
                .unwrap();
        remove(POD, &mut pruned, &gone);
        assert_eq!(pruned["spec"]["containers"].as_array().unwrap().len(), 2);
    }
}
