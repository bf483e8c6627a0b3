//! Label and field selectors, parsed from the query string forms kube-apiserver accepts.
//!
//! Labels: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k` (does not
//! exist), `k>1`, `k<1`; requirements are ANDed with commas. As in Kubernetes, `!=` and `notin`
//! also match objects without the key. Fields: `f=v`, `f==v`, `f!=v`, ANDed with commas.
//! (`k8s.io/apimachinery/pkg/labels`, `k8s.io/apimachinery/pkg/fields`.)

use std::collections::BTreeMap;

use super::errors::ApiError;
use super::util::Query;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
    Gt(String, i64),
    Lt(String, i64),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<LabelReq>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    In,
    NotIn,
    Open,
    Close,
    Comma,
    Gt,
    Lt,
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '!' if chars.get(i + 1) == Some(&'=') => {
                out.push(Tok::NotEq);
                i += 2;
            }
            '!' => {
                out.push(Tok::Not);
                i += 1;
            }
            '=' if chars.get(i + 1) == Some(&'=') => {
                out.push(Tok::DoubleEq);
                i += 2;
            }
            '=' => {
                out.push(Tok::Eq);
                i += 1;
            }
            '(' => {
                out.push(Tok::Open);
                i += 1;
            }
            ')' => {
                out.push(Tok::Close);
                i += 1;
            }
            ',' => {
                out.push(Tok::Comma);
                i += 1;
            }
            '>' => {
                out.push(Tok::Gt);
                i += 1;
            }
            '<' => {
                out.push(Tok::Lt);
                i += 1;
            }
            _ => {
                let start = i;
                while i < chars.len()
                    && !chars[i].is_whitespace()
                    && !matches!(chars[i], '!' | '=' | '(' | ')' | ',' | '<' | '>')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                out.push(match word.as_str() {
                    "in" => Tok::In,
                    "notin" => Tok::NotIn,
                    _ => Tok::Ident(word),
                });
            }
        }
    }
    Ok(out)
}

fn valid_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && crate::apimachinery::util::validate_subdomain(p).is_err()
    {
        return Err(format!(
            "invalid label key {key:?}: prefix part must be a DNS-1123 subdomain"
        ));
    }
    if !valid_name_part(name) {
        return Err(format!(
            "invalid label key {key:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        ));
    }
    Ok(())
}

fn validate_value(v: &str) -> Result<(), String> {
    if v.is_empty() || valid_name_part(v) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        ))
    }
}

impl LabelSelector {
    /// Parses a selector string; the error is the message for a 400 BadRequest.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let toks = lex(s)?;
        let mut reqs = Vec::new();
        let mut i = 0;
        let err = |m: &str| Err(format!("unable to parse requirement: {m} (selector {s:?})"));
        while i < toks.len() {
            let negated = toks[i] == Tok::Not;
            if negated {
                i += 1;
            }
            let key = match toks.get(i) {
                Some(Tok::Ident(k)) => k.clone(),
                _ => return err("expected a label key"),
            };
            validate_key(&key).map_err(|m| format!("unable to parse requirement: {m}"))?;
            i += 1;
            let at_end = matches!(toks.get(i), None | Some(Tok::Comma));
            if negated {
                if !at_end {
                    return err("'!' must be followed by a key alone");
                }
                reqs.push(LabelReq::NotExists(key));
            } else if at_end {
                reqs.push(LabelReq::Exists(key));
            } else {
                let op = toks[i].clone();
                i += 1;
                match op {
                    Tok::Eq | Tok::DoubleEq | Tok::NotEq => {
                        let value = match toks.get(i) {
                            Some(Tok::Ident(v)) => {
                                i += 1;
                                v.clone()
                            }
                            None | Some(Tok::Comma) => String::new(),
                            _ => return err("expected a value"),
                        };
                        validate_value(&value)
                            .map_err(|m| format!("unable to parse requirement: {m}"))?;
                        reqs.push(if op == Tok::NotEq {
                            LabelReq::NotEq(key, value)
                        } else {
                            LabelReq::Eq(key, value)
                        });
                    }
                    Tok::In | Tok::NotIn => {
                        if toks.get(i) != Some(&Tok::Open) {
                            return err("expected '(' after 'in'/'notin'");
                        }
                        i += 1;
                        let mut values = Vec::new();
                        loop {
                            match toks.get(i) {
                                Some(Tok::Ident(v)) => {
                                    validate_value(v)
                                        .map_err(|m| format!("unable to parse requirement: {m}"))?;
                                    values.push(v.clone());
                                    i += 1;
                                }
                                Some(Tok::Comma) => {
                                    // An empty value between commas, e.g. `in (a,,b)`.
                                    values.push(String::new());
                                }
                                _ => {}
                            }
                            match toks.get(i) {
                                Some(Tok::Comma) => i += 1,
                                Some(Tok::Close) => {
                                    i += 1;
                                    break;
                                }
                                _ => return err("expected ',' or ')' in a value set"),
                            }
                        }
                        if values.is_empty() {
                            return err("for 'in', 'notin' operators, values set can't be empty");
                        }
                        reqs.push(if op == Tok::In {
                            LabelReq::In(key, values)
                        } else {
                            LabelReq::NotIn(key, values)
                        });
                    }
                    Tok::Gt | Tok::Lt => {
                        let n = match toks.get(i) {
                            Some(Tok::Ident(v)) => v.parse::<i64>().ok(),
                            _ => None,
                        };
                        let Some(n) = n else {
                            return err("for 'Gt', 'Lt' operators, the value must be an integer");
                        };
                        i += 1;
                        reqs.push(if op == Tok::Gt {
                            LabelReq::Gt(key, n)
                        } else {
                            LabelReq::Lt(key, n)
                        });
                    }
                    _ => return err("expected an operator"),
                }
            }
            match toks.get(i) {
                None => {}
                Some(Tok::Comma) => {
                    i += 1;
                    if i == toks.len() {
                        return err("trailing ','");
                    }
                }
                Some(_) => return err("expected ',' between requirements"),
            }
        }
        Ok(Self(reqs))
    }

    /// Whether the selector has no requirement.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => labels.get(k) == Some(v),
            LabelReq::NotEq(k, v) => labels.get(k) != Some(v),
            LabelReq::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            LabelReq::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            LabelReq::Exists(k) => labels.contains_key(k),
            LabelReq::NotExists(k) => !labels.contains_key(k),
            LabelReq::Gt(k, n) => labels
                .get(k)
                .and_then(|l| l.parse::<i64>().ok())
                .is_some_and(|l| l > *n),
            LabelReq::Lt(k, n) => labels
                .get(k)
                .and_then(|l| l.parse::<i64>().ok())
                .is_some_and(|l| l < *n),
        })
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
            // `app=` and `app==` are valid (empty value); everything else must fail.
            let r = LabelSelector::parse(s);
            if s == "app=" || s == "app==" {
                assert!(r.is_ok(), "{s}");
            } else {
                assert!(r.is_err(), "{s} should fail, got {r:?}");
            }
        }
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
