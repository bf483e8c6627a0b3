//! Field sets as structured-merge-diff keeps them (`sigs.k8s.io/structured-merge-diff/fieldpath`):
//! path elements (`f:<field>`, `k:{<list-map keys>}`, `v:<set value>`, `i:<index>`), sets of
//! paths as a tree of members and children (`set.go`), and their `FieldsV1` JSON form
//! (`serialize.go`: a member with children carries `".": {}`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::{Map, Value};

/// One element of a path (`fieldpath.PathElement`). The derived order is structured-merge-diff's
/// `PathElement.Compare`: fields, then keys, then values, then indexes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Pe {
    /// A field of an object.
    Field(String),
    /// An element of an associative list: its key fields as a JSON object (sorted by name,
    /// `value.FieldList.Sort`).
    Key(String),
    /// An element of a set: its value as JSON.
    Value(String),
    /// An element of a list by position.
    Index(usize),
}

impl Pe {
    /// The `FieldsV1` key of the element (`serialize-pe.go` `SerializePathElement`).
    fn encode(&self) -> String {
        match self {
            Pe::Field(f) => format!("f:{f}"),
            Pe::Key(k) => format!("k:{k}"),
            Pe::Value(v) => format!("v:{v}"),
            Pe::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a `FieldsV1` key (`DeserializePathElement`); key and value JSON is normalised.
    fn decode(s: &str) -> Result<Pe, String> {
        let (prefix, rest) = s
            .split_once(':')
            .ok_or_else(|| format!("unknown path element {s:?}"))?;
        let json = |r: &str| -> Result<String, String> {
            let v: Value = serde_json::from_str(r).map_err(|e| e.to_string())?;
            serde_json::to_string(&v).map_err(|e| e.to_string())
        };
        match prefix {
            "f" => Ok(Pe::Field(rest.to_string())),
            "k" => Ok(Pe::Key(json(rest)?)),
            "v" => Ok(Pe::Value(json(rest)?)),
            "i" => rest
                .parse()
                .map(Pe::Index)
                .map_err(|e: std::num::ParseIntError| e.to_string()),
            _ => Err(format!("unknown path element prefix {prefix:?}")),
        }
    }

    /// The element as `fieldpath.PathElement.String` prints it: `.name`, `[name="c"]`,
    /// `[="x"]`, `[0]`.
    fn display(&self, out: &mut String) {
        match self {
            Pe::Field(f) => {
                out.push('.');
                out.push_str(f);
            }
            Pe::Key(k) => {
                let fields: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                let parts: Vec<String> = fields
                    .iter()
                    .map(|(n, v)| format!("{n}={}", to_string(v)))
                    .collect();
                let _ = write!(out, "[{}]", parts.join(","));
            }
            Pe::Value(v) => {
                let v: Value = serde_json::from_str(v).unwrap_or(Value::Null);
                let _ = write!(out, "[={}]", to_string(&v));
            }
            Pe::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
}

/// `value.ToString`: strings quoted as Go's `%q`, other scalars as they print.
fn to_string(v: &Value) -> String {
    match v {
        Value::String(s) => crate::apimachinery::errors::go_quote(s),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// A path as `fieldpath.Path.String` prints it (`.spec.containers[name="c"].image`).
pub(crate) fn display(path: &[Pe]) -> String {
    let mut out = String::new();
    for pe in path {
        pe.display(&mut out);
    }
    out
}

/// A set of paths (`fieldpath.Set`): the elements that are members here, and the sets below
/// each element that has members below it. Children are never empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Set {
    members: BTreeSet<Pe>,
    children: BTreeMap<Pe, Set>,
}

impl Set {
    /// Whether the set holds no path.
    pub(crate) fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds a path (an empty path adds nothing).
    pub(crate) fn insert(&mut self, path: &[Pe]) {
        match path {
            [] => {}
            [pe] => {
                self.members.insert(pe.clone());
            }
            [pe, rest @ ..] => self.children.entry(pe.clone()).or_default().insert(rest),
        }
    }

    /// Whether `path` is a member.
    #[cfg(test)]
    pub(crate) fn has(&self, path: &[Pe]) -> bool {
        match path {
            [] => false,
            [pe] => self.members.contains(pe),
            [pe, rest @ ..] => self.children.get(pe).is_some_and(|c| c.has(rest)),
        }
    }

    /// Whether `pe` is a member at this level.
    pub(crate) fn has_member(&self, pe: &Pe) -> bool {
        self.members.contains(pe)
    }

    /// The set below `pe`, if any path goes below it.
    pub(crate) fn child(&self, pe: &Pe) -> Option<&Set> {
        self.children.get(pe)
    }

    /// The elements at this level that are members or have members below them.
    pub(crate) fn elements(&self) -> BTreeSet<&Pe> {
        self.members.iter().chain(self.children.keys()).collect()
    }

    /// The paths in either set.
    pub(crate) fn union(&self, other: &Set) -> Set {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, c) in &other.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(c),
                None => c.clone(),
            };
            out.children.insert(pe.clone(), merged);
        }
        out
    }

    /// The paths of this set that are not in `other`.
    pub(crate) fn difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter_map(|(pe, c)| {
                let d = match other.children.get(pe) {
                    Some(o) => c.difference(o),
                    None => c.clone(),
                };
                (!d.is_empty()).then(|| (pe.clone(), d))
            })
            .collect();
        Set { members, children }
    }

    /// The paths in both sets.
    pub(crate) fn intersection(&self, other: &Set) -> Set {
        let members = self.members.intersection(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter_map(|(pe, c)| {
                let i = c.intersection(other.children.get(pe)?);
                (!i.is_empty()).then(|| (pe.clone(), i))
            })
            .collect();
        Set { members, children }
    }

    /// Calls `f` with every member path, in the set's order (`Set.Iterate`).
    pub(crate) fn for_each(&self, f: &mut dyn FnMut(&[Pe])) {
        fn go(s: &Set, prefix: &mut Vec<Pe>, f: &mut dyn FnMut(&[Pe])) {
            for pe in s.elements() {
                prefix.push(pe.clone());
                if s.members.contains(pe) {
                    f(prefix);
                }
                if let Some(c) = s.children.get(pe) {
                    go(c, prefix, f);
                }
                prefix.pop();
            }
        }
        go(self, &mut Vec::new(), f);
    }

    /// Keeps only the paths for which `keep` says true of their first element.
    pub(crate) fn retain_top(&mut self, keep: impl Fn(&Pe) -> bool) {
        self.members.retain(&keep);
        self.children.retain(|pe, _| keep(pe));
    }

    /// Removes the path `[pe, rest..]` and everything below it.
    pub(crate) fn remove_subtree(&mut self, path: &[Pe]) {
        match path {
            [] => {}
            [pe] => {
                self.members.remove(pe);
                self.children.remove(pe);
            }
            [pe, rest @ ..] => {
                if let Some(c) = self.children.get_mut(pe) {
                    c.remove_subtree(rest);
                    if c.is_empty() {
                        self.children.remove(pe);
                    }
                }
            }
        }
    }

    /// The `FieldsV1` JSON of the set (`Set.ToJSON`).
    pub(crate) fn to_fields_v1(&self) -> Value {
        let mut out = Map::new();
        for pe in self.elements() {
            let mut node = match self.children.get(pe) {
                Some(c) => match c.to_fields_v1() {
                    Value::Object(m) => m,
                    _ => Map::new(),
                },
                None => Map::new(),
            };
            if self.children.contains_key(pe) && self.members.contains(pe) {
                node.insert(".".into(), Value::Object(Map::new()));
            }
            out.insert(pe.encode(), Value::Object(node));
        }
        Value::Object(out)
    }

    /// Parses `FieldsV1` JSON (`Set.FromJSON`).
    pub(crate) fn from_fields_v1(v: &Value) -> Result<Set, String> {
        let m = v
            .as_object()
            .ok_or_else(|| "FieldsV1 must be a JSON object".to_string())?;
        let mut set = Set::default();
        for (k, child) in m {
            if k == "." {
                continue;
            }
            let pe = Pe::decode(k)?;
            let cm = child
                .as_object()
                .ok_or_else(|| format!("the value of {k:?} must be a JSON object"))?;
            if cm.is_empty() || cm.contains_key(".") {
                set.members.insert(pe.clone());
            }
            let below = Set::from_fields_v1(child)?;
            if !below.is_empty() {
                set.children.insert(pe, below);
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trips_with_dots() {
        let v = json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}});
        let s = Set::from_fields_v1(&v).unwrap();
        assert_eq!(s.to_fields_v1(), v);
        let c = Pe::Key(r#"{"name":"c"}"#.into());
        assert!(s.has(&[
            Pe::Field("spec".into()),
            Pe::Field("containers".into()),
            c.clone()
        ]));
        let mut paths = Vec::new();
        s.for_each(&mut |p| paths.push(display(p)));
        assert!(paths.contains(&r#".spec.containers[name="c"].image"#.to_string()));
        assert!(paths.contains(&".metadata.labels".to_string()));
        let d = s.difference(
            &Set::from_fields_v1(&json!({"f:metadata": {"f:labels": {"f:app": {}}}})).unwrap(),
        );
        assert_eq!(d.to_fields_v1()["f:metadata"], json!({"f:labels": {}}));
        assert!(Set::from_fields_v1(&json!({"x:y": {}})).is_err());
    }
}
