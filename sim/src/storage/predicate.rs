//! Which objects a request selects (`k8s.io/apiserver/pkg/storage/selection_predicate.go`
//! `SelectionPredicate`): the namespace scope and the label and field selectors, over one
//! object or a range of a snapshot.

use std::ops::Bound;
use std::sync::Arc;

use super::object::StoredObject;
use super::store::ObjectMap;
use crate::apimachinery::selector::{FieldSelector, LabelSelector};

/// Whether `obj` is in scope and matches both selectors.
pub(crate) fn matches(
    obj: &StoredObject,
    ns: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> bool {
    ns.is_none_or(|n| obj.namespace == n)
        && (labels.is_empty() || labels.matches(&obj.labels))
        && (fields.is_empty() || fields.matches(|f| obj.field(f)))
}

/// Objects of `map` in scope, in key order, strictly after `after`.
pub(crate) fn select<'a>(
    map: &'a ObjectMap,
    ns: Option<&'a str>,
    labels: &'a LabelSelector,
    fields: &'a FieldSelector,
    after: Option<(String, String)>,
) -> impl Iterator<Item = Arc<StoredObject>> + 'a {
    in_scope(map, ns, after)
        .filter(move |o| matches(o, ns, labels, fields))
        .cloned()
}

/// Every object of `map` under the request's key prefix (its namespace, if any), in key
/// order, strictly after `after`, before any selector: what the watch cache's
/// `ListPrefix(key, continueKey)` returns.
pub(crate) fn in_scope<'a>(
    map: &'a ObjectMap,
    ns: Option<&'a str>,
    after: Option<(String, String)>,
) -> impl Iterator<Item = &'a Arc<StoredObject>> + 'a {
    let lower = match (after, ns) {
        (Some(k), _) => Bound::Excluded(k),
        (None, Some(n)) => Bound::Included((n.to_string(), String::new())),
        (None, None) => Bound::Unbounded,
    };
    map.range((lower, Bound::Unbounded))
        .take_while(move |(k, _)| ns.is_none_or(|n| k.0 == n))
        .map(|(_, o)| o)
}
