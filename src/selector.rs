//! Label selection over any source of labels (docs/semantics.md I3, I7): a kube [`Selector`]
//! evaluated against a lookup function, so a lean store matches the labels it keeps parsed
//! without decoding objects or building kube's `BTreeMap` for each of them; and
//! [`parse_label_selector`], the query-string form (`app=web,tier in (a,b),!canary`) read into
//! kube's [`Selector`], as kube-apiserver reads a `labelSelector` parameter.

use std::collections::BTreeSet;

use kube_core::{Expression, Selector};

/// A [`Selector`] prepared for matching many objects: its expressions, taken out once.
///
/// Matches exactly as kube's `SelectorExt::matches` (every expression must hold; `In`/`=`
/// need the key, `NotIn`/`!=` hold without it).
///
/// ```
/// use kube_core::{Expression, Selector};
/// use kinformer::selector::LabelMatcher;
///
/// let sel: Selector = Expression::Equal("app".into(), "web".into()).into();
/// let m = LabelMatcher::new(&sel);
/// assert!(m.matches(|k| (k == "app").then_some("web")));
/// assert!(!m.matches(|_| None));
/// ```
#[derive(Clone, Debug, Default)]
pub struct LabelMatcher {
    expressions: Vec<Expression>,
}

impl LabelMatcher {
    /// Prepares `selector`.
    pub fn new(selector: &Selector) -> Self {
        LabelMatcher {
            expressions: selector.clone().into_iter().collect(),
        }
    }

    /// True when the selector has no expression (it matches everything).
    pub fn selects_all(&self) -> bool {
        self.expressions.is_empty()
    }

    /// True when every expression holds for the labels `get` looks up.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.expressions.iter().all(|e| match e {
            Expression::In(key, values) => get(key).is_some_and(|v| values.contains(v)),
            Expression::NotIn(key, values) => get(key).is_none_or(|v| !values.contains(v)),
            Expression::Exists(key) => get(key).is_some(),
            Expression::DoesNotExist(key) => get(key).is_none(),
            Expression::Equal(key, value) => get(key) == Some(value.as_str()),
            Expression::NotEqual(key, value) => get(key) != Some(value.as_str()),
        })
    }
}

/// Why a label selector string was refused by [`parse_label_selector`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorParseError {
    /// The text does not follow the grammar (what was expected, and where).
    #[error("unable to parse label selector {selector:?}: {reason}")]
    Syntax {
        /// The selector as given.
        selector: String,
        /// What was expected.
        reason: String,
    },
    /// A label key that Kubernetes would refuse (`[prefix/]name`, name at most 63 characters
    /// of `[A-Za-z0-9_.-]` starting and ending alphanumeric, prefix a DNS-1123 subdomain).
    #[error("invalid label key {0:?}")]
    InvalidKey(String),
    /// A label value that Kubernetes would refuse (empty, or as a key's name part).
    #[error("invalid label value {0:?}")]
    InvalidValue(String),
    /// `k>1` / `k<1`: valid in kube-apiserver, but kube's [`Expression`] cannot say it.
    #[error("the '{op}' operator (in {selector:?}) is not supported: kube's Selector has no Gt/Lt")]
    Unsupported {
        /// The selector as given.
        selector: String,
        /// `>` or `<`.
        op: char,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    Not,
    Eq,
    NotEq,
    In,
    NotIn,
    Open,
    Close,
    Comma,
    Cmp(char),
}

fn lex(s: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '!' if chars.peek() == Some(&'=') => {
                chars.next();
                out.push(Tok::NotEq);
            }
            '!' => out.push(Tok::Not),
            '=' => {
                if chars.peek() == Some(&'=') {
                    chars.next();
                }
                out.push(Tok::Eq);
            }
            '(' => out.push(Tok::Open),
            ')' => out.push(Tok::Close),
            ',' => out.push(Tok::Comma),
            '<' | '>' => out.push(Tok::Cmp(c)),
            c => {
                let mut word = String::from(c);
                while let Some(&n) = chars.peek() {
                    if n.is_whitespace() || "!=(),<>".contains(n) {
                        break;
                    }
                    word.push(n);
                    chars.next();
                }
                out.push(match word.as_str() {
                    "in" => Tok::In,
                    "notin" => Tok::NotIn,
                    _ => Tok::Word(word),
                });
            }
        }
    }
    out
}

/// A label key's name part, or a non-empty value: at most 63 of `[A-Za-z0-9_.-]`, alphanumeric
/// at both ends.
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated lowercase labels.
fn valid_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn key(k: &str) -> Result<String, SelectorParseError> {
    let ok = match k.split_once('/') {
        Some((prefix, name)) => valid_subdomain(prefix) && valid_name(name),
        None => valid_name(k),
    };
    if ok {
        Ok(k.to_string())
    } else {
        Err(SelectorParseError::InvalidKey(k.to_string()))
    }
}

fn value(v: &str) -> Result<String, SelectorParseError> {
    if v.is_empty() || valid_name(v) {
        Ok(v.to_string())
    } else {
        Err(SelectorParseError::InvalidValue(v.to_string()))
    }
}

/// Parses a label selector in the form of a `labelSelector` query parameter (apimachinery's
/// `labels.Parse`): requirements joined by `,`, each `k=v` (or `k==v`), `k!=v`,
/// `k in (a,b)`, `k notin (a,b)`, `k` (exists) or `!k` (does not exist); spaces around
/// tokens are ignored; the empty string selects everything; `k in ()` holds the empty value. As in Kubernetes, `!=` and `notin`
/// also hold for objects without the key. Keys and values are validated as Kubernetes does.
/// `k>1` and `k<1` are refused ([`SelectorParseError::Unsupported`]): kube's [`Expression`]
/// has no such operator. What kube's `Selector` prints (`Display`) parses back to it.
///
/// ```
/// use kinformer::selector::{LabelMatcher, parse_label_selector};
///
/// let sel = parse_label_selector("app=web, tier in (front,back), !canary").unwrap();
/// let m = LabelMatcher::new(&sel);
/// assert!(m.matches(|k| match k { "app" => Some("web"), "tier" => Some("front"), _ => None }));
/// assert!(!m.matches(|k| match k { "app" => Some("web"), "canary" => Some("1"), _ => None }));
/// assert!(parse_label_selector("app in (web").is_err());
/// ```
///
/// # Errors
/// [`SelectorParseError`] when the text is not a selector Kubernetes would accept, or uses
/// `>`/`<`.
pub fn parse_label_selector(s: &str) -> Result<Selector, SelectorParseError> {
    let toks = lex(s);
    let syntax = |reason: &str| SelectorParseError::Syntax {
        selector: s.to_string(),
        reason: reason.to_string(),
    };
    let mut exprs = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let negated = toks[i] == Tok::Not;
        if negated {
            i += 1;
        }
        let k = match toks.get(i) {
            Some(Tok::Word(k)) => key(k)?,
            _ => return Err(syntax("expected a label key")),
        };
        i += 1;
        let at_end = matches!(toks.get(i), None | Some(Tok::Comma));
        if negated {
            if !at_end {
                return Err(syntax("'!' must be followed by a key alone"));
            }
            exprs.push(Expression::DoesNotExist(k));
        } else if at_end {
            exprs.push(Expression::Exists(k));
        } else {
            let op = toks[i].clone();
            i += 1;
            match op {
                Tok::Eq | Tok::NotEq => {
                    let v = match toks.get(i) {
                        Some(Tok::Word(v)) => {
                            i += 1;
                            value(v)?
                        }
                        None | Some(Tok::Comma) => String::new(),
                        _ => return Err(syntax("expected a value")),
                    };
                    exprs.push(if op == Tok::Eq {
                        Expression::Equal(k, v)
                    } else {
                        Expression::NotEqual(k, v)
                    });
                }
                Tok::In | Tok::NotIn => {
                    if toks.get(i) != Some(&Tok::Open) {
                        return Err(syntax("expected '(' after 'in'/'notin'"));
                    }
                    i += 1;
                    let mut values = BTreeSet::new();
                    // As apimachinery's parser: `()` is the set holding the empty value.
                    loop {
                        // A value, or an empty one before ',' / ')'.
                        if let Some(Tok::Word(v)) = toks.get(i) {
                            values.insert(value(v)?);
                            i += 1;
                        } else {
                            values.insert(String::new());
                        }
                        match toks.get(i) {
                            Some(Tok::Comma) => i += 1,
                            Some(Tok::Close) => {
                                i += 1;
                                break;
                            }
                            _ => return Err(syntax("expected ',' or ')' in a value set")),
                        }
                    }
                    exprs.push(if op == Tok::In {
                        Expression::In(k, values)
                    } else {
                        Expression::NotIn(k, values)
                    });
                }
                Tok::Cmp(op) => {
                    return Err(SelectorParseError::Unsupported {
                        selector: s.to_string(),
                        op,
                    });
                }
                _ => return Err(syntax("expected an operator")),
            }
        }
        match toks.get(i) {
            None => {}
            Some(Tok::Comma) if i + 1 < toks.len() => i += 1,
            Some(Tok::Comma) => return Err(syntax("trailing ','")),
            Some(_) => return Err(syntax("expected ',' between requirements")),
        }
    }
    Ok(exprs.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use kube_core::SelectorExt;
    use proptest::prelude::*;

    use super::*;

    fn expression() -> impl Strategy<Value = Expression> {
        let key = prop::sample::select(vec!["a", "b", "c"]).prop_map(String::from);
        let value = prop::sample::select(vec!["1", "2", "3"]).prop_map(String::from);
        let values = prop::collection::btree_set(value.clone(), 0..3);
        prop_oneof![
            (key.clone(), values.clone()).prop_map(|(k, v)| Expression::In(k, v)),
            (key.clone(), values).prop_map(|(k, v)| Expression::NotIn(k, v)),
            key.clone().prop_map(Expression::Exists),
            key.clone().prop_map(Expression::DoesNotExist),
            (key.clone(), value.clone()).prop_map(|(k, v)| Expression::Equal(k, v)),
            (key, value).prop_map(|(k, v)| Expression::NotEqual(k, v)),
        ]
    }

    proptest! {
        /// I3: the matcher agrees with kube's own `SelectorExt::matches` on any labels.
        #[test]
        fn i3_label_matcher_agrees_with_kube(
            exprs in prop::collection::vec(expression(), 0..4),
            labels in prop::collection::btree_map(
                prop::sample::select(vec!["a", "b", "c"]).prop_map(String::from),
                prop::sample::select(vec!["1", "2", "3"]).prop_map(String::from),
                0..3,
            ),
        ) {
            let sel: Selector = exprs.into_iter().collect();
            let ours = LabelMatcher::new(&sel).matches(|k| labels.get(k).map(String::as_str));
            let theirs = sel.matches(&labels);
            prop_assert_eq!(ours, theirs);
        }
    }

    fn key_strategy() -> impl Strategy<Value = String> + Clone {
        prop::sample::select(vec!["a", "app", "x.y_z-1", "example.com/tier", "k8s.io/n"])
            .prop_map(String::from)
    }

    fn value_strategy() -> impl Strategy<Value = String> + Clone {
        prop::sample::select(vec!["", "1", "web", "a.b-c_d"]).prop_map(String::from)
    }

    fn parsable_expression() -> impl Strategy<Value = Expression> {
        let values = prop::collection::btree_set(value_strategy(), 1..3);
        prop_oneof![
            (key_strategy(), values.clone()).prop_map(|(k, v)| Expression::In(k, v)),
            (key_strategy(), values).prop_map(|(k, v)| Expression::NotIn(k, v)),
            key_strategy().prop_map(Expression::Exists),
            key_strategy().prop_map(Expression::DoesNotExist),
            (key_strategy(), value_strategy()).prop_map(|(k, v)| Expression::Equal(k, v)),
            (key_strategy(), value_strategy()).prop_map(|(k, v)| Expression::NotEqual(k, v)),
        ]
    }

    proptest! {
        /// What kube's `Selector` prints parses back to the same selector.
        #[test]
        fn parse_reads_back_what_kube_prints(
            exprs in prop::collection::vec(parsable_expression(), 0..4),
        ) {
            let sel: Selector = exprs.into_iter().collect();
            prop_assert_eq!(parse_label_selector(&sel.to_string()), Ok(sel));
        }
    }

    #[test]
    fn parse_label_selector_forms() {
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let cases: Vec<(&str, Vec<Expression>)> = vec![
            ("", vec![]),
            ("  ", vec![]),
            (
                "app=web",
                vec![Expression::Equal("app".into(), "web".into())],
            ),
            (
                "app == web",
                vec![Expression::Equal("app".into(), "web".into())],
            ),
            (
                "app!=web",
                vec![Expression::NotEqual("app".into(), "web".into())],
            ),
            ("app=", vec![Expression::Equal("app".into(), String::new())]),
            (
                "tier in (b, a),env notin (prod)",
                vec![
                    Expression::In("tier".into(), set(&["a", "b"])),
                    Expression::NotIn("env".into(), set(&["prod"])),
                ],
            ),
            (
                "example.com/x, !canary",
                vec![
                    Expression::Exists("example.com/x".into()),
                    Expression::DoesNotExist("canary".into()),
                ],
            ),
        ];
        for (text, want) in cases {
            let want: Selector = want.into_iter().collect();
            assert_eq!(parse_label_selector(text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn parse_label_selector_refuses_what_kubernetes_refuses() {
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(
            parse_label_selector("app in ()"),
            Ok(Expression::In("app".into(), set(&[""])).into())
        );
        for bad in [
            "app in (a",
            "app in a",
            "app=web,",
            ",app",
            "app web",
            "!app=web",
            "=web",
            "app=(",
            "in=web",
        ] {
            assert!(
                matches!(
                    parse_label_selector(bad),
                    Err(SelectorParseError::Syntax { .. })
                ),
                "{bad:?}: {:?}",
                parse_label_selector(bad)
            );
        }
        assert_eq!(
            parse_label_selector("-app=web"),
            Err(SelectorParseError::InvalidKey("-app".into()))
        );
        assert_eq!(
            parse_label_selector("Example.com/app"),
            Err(SelectorParseError::InvalidKey("Example.com/app".into()))
        );
        assert_eq!(
            parse_label_selector("app=we$b"),
            Err(SelectorParseError::InvalidValue("we$b".into()))
        );
        assert!(matches!(
            parse_label_selector("replicas>1"),
            Err(SelectorParseError::Unsupported { op: '>', .. })
        ));
    }

    #[test]
    fn i3_empty_selector_selects_all() {
        let m = LabelMatcher::new(&Selector::default());
        assert!(m.selects_all());
        assert!(m.matches(|_| None));
    }
}
