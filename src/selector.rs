//! Label selection over any source of labels (docs/semantics.md I3, I7): a kube [`Selector`]
//! evaluated against a lookup function, so a lean store matches the labels it keeps parsed
//! without decoding objects or building kube's `BTreeMap` for each of them.

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

    #[test]
    fn i3_empty_selector_selects_all() {
        let m = LabelMatcher::new(&Selector::default());
        assert!(m.selects_all());
        assert!(m.matches(|_| None));
    }
}
