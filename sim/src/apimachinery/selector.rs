//! Label and field selectors, parsed from the query string forms kube-apiserver accepts.
//!
//! Labels: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k` (does not
//! exist), `k>1`, `k<1`; requirements are ANDed with commas. As in Kubernetes, `!=` and `notin`
//! also match objects without the key. The parser, its checks and its error texts are
//! `kinformer::selector::parse_requirements` (`k8s.io/apimachinery/pkg/labels`), the one the
//! informer's listers use. Fields: `f=v`, `f==v`, `f!=v`, ANDed with commas
//! (`k8s.io/apimachinery/pkg/fields`).

use std::collections::BTreeMap;

use kinformer::selector::{Requirement, parse_requirements};

use super::errors::ApiError;
use super::util::Query;

/// A parsed label selector (its requirements, sorted by key); empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses a selector string as kube-apiserver does (`labels.Parse`, which kinformer's
    /// listers share); the error is kube-apiserver's message, for a 400 BadRequest.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        parse_requirements(s).map(Self).map_err(|e| e.to_string())
    }

    /// Whether the selector has no requirement.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0
            .iter()
            .all(|r| r.matches(|k| labels.get(k).map(String::as_str)))
    }
}

/// One field requirement: `(field, value, equal?)`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldReq {
    field: String,
    value: String,
    equal: bool,
}

/// A parsed field selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<FieldReq>);

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            cur.push(c);
            if let Some(n) = chars.next() {
                cur.push(n);
            }
        } else if c == sep {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl FieldSelector {
    /// Parses a field selector; `supported` lists the field paths this resource can select on
    /// (besides `metadata.name` and `metadata.namespace`). The error is a 400 message.
    pub(crate) fn parse(s: &str, supported: &[&str]) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for term in split_unescaped(s, ',') {
            let term = term.trim();
            let (field, value, equal) = if let Some((f, v)) = term.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, v, true)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                ));
            };
            let field = field.trim();
            if field != "metadata.name"
                && field != "metadata.namespace"
                && !supported.contains(&field)
            {
                return Err(format!("field label not supported: {field}"));
            }
            reqs.push(FieldReq {
                field: field.to_string(),
                value: unescape(value.trim()),
                equal,
            });
        }
        Ok(Self(reqs))
    }

    /// Whether the selector has no requirement.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds `metadata.name=name` (a watch on a single object's path).
    pub(crate) fn and_name(mut self, name: &str) -> Self {
        self.0.push(FieldReq {
            field: "metadata.name".into(),
            value: name.into(),
            equal: true,
        });
        self
    }

    /// Whether an object with these field values matches; `lookup` returns a field's value
    /// (missing fields compare as the empty string, as in Kubernetes).
    pub(crate) fn matches<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| {
            let v = lookup(&r.field).unwrap_or("");
            (v == r.value) == r.equal
        })
    }
}

/// The request's `labelSelector` (400 when it does not parse).
pub(crate) fn parse_labels(query: &Query) -> Result<LabelSelector, ApiError> {
    LabelSelector::parse(query.get("labelSelector").unwrap_or("")).map_err(ApiError::bad_request)
}

/// The request's `fieldSelector` over the kind's selectable fields (400 when it does not parse
/// or names another field).
pub(crate) fn parse_fields(supported: &[&str], query: &Query) -> Result<FieldSelector, ApiError> {
    FieldSelector::parse(query.get("fieldSelector").unwrap_or(""), supported)
        .map_err(ApiError::bad_request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_and_matches_every_operator() {
        let l = labels(&[("app", "web"), ("tier", "fe"), ("n", "5")]);
        let yes = [
            "",
            "app=web",
            "app==web",
            "app!=db",
            "missing!=x",
            "tier in (fe, be)",
            "tier notin (be)",
            "missing notin (x)",
            "app",
            "!missing",
            "n>4",
            "n<6",
            "app=web,tier in (fe),!missing",
            " app = web , tier ",
        ];
        for s in yes {
            let sel = LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert!(sel.matches(&l), "{s} should match");
        }
        let no = [
            "app=db",
            "app!=web",
            "tier in (be)",
            "tier notin (fe)",
            "!app",
            "missing",
            "n>5",
            "missing in (x)",
        ];
        for s in no {
            let sel = LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert!(!sel.matches(&l), "{s} should not match");
        }
    }

    #[test]
    fn rejects_malformed() {
        for s in [
            "app=",
            "=x",
            "app in ()",
            "app in (a",
            "!app=x",
            "app==",
            "a b",
            "app=web,",
            "Bad Key=1",
            "app=bad value!",
            "n>x",
        ] {
            // `app=`, `app==` and `app in ()` are valid (the empty value, as Kubernetes reads
            // them); everything else must fail.
            let r = LabelSelector::parse(s);
            if matches!(s, "app=" | "app==" | "app in ()") {
                assert!(r.is_ok(), "{s}");
            } else {
                assert!(r.is_err(), "{s} should fail, got {r:?}");
            }
        }
        let empty = LabelSelector::parse("app in ()").unwrap();
        assert!(empty.matches(&labels(&[("app", "")])));
        assert!(!empty.matches(&labels(&[("app", "web")])));
        assert_eq!(
            LabelSelector::parse("app in (a"),
            Err("unable to parse requirement: found '', expected: ',' or ')'".to_string())
        );
    }

    #[test]
    fn field_selectors() {
        let f =
            FieldSelector::parse("metadata.name=a,metadata.namespace!=kube-system", &[]).unwrap();
        assert!(f.matches(|k| match k {
            "metadata.name" => Some("a"),
            "metadata.namespace" => Some("default"),
            _ => None,
        }));
        assert!(!f.matches(|k| match k {
            "metadata.name" => Some("a"),
            "metadata.namespace" => Some("kube-system"),
            _ => None,
        }));
        assert!(FieldSelector::parse("spec.nodeName=x", &[]).is_err());
        assert!(FieldSelector::parse("spec.nodeName==x", &["spec.nodeName"]).is_ok());
        assert!(FieldSelector::parse("garbage", &[]).is_err());
        assert!(FieldSelector::parse("", &[]).unwrap().is_empty());
    }
}
