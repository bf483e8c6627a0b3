//! Which objects a request selects (`k8s.io/apiserver/pkg/storage/selection_predicate.go`
//! `SelectionPredicate`): the namespace scope, the label and field selectors and the shard
//! selector (KEP-5866, `MatchesSharding`), over one object or a range of a snapshot.

use std::ops::Bound;
use std::sync::Arc;

use super::object::StoredObject;
use super::store::ObjectMap;
use crate::apimachinery::selector::{FieldSelector, LabelSelector};
use crate::apimachinery::sharding::ShardSelector;

/// The selectors of one request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Selectors<'a> {
    /// The label selector.
    pub labels: &'a LabelSelector,
    /// The field selector.
    pub fields: &'a FieldSelector,
    /// The shard selector, when the `ShardedListAndWatch` gate is on and one was sent.
    pub shard: Option<&'a ShardSelector>,
}

impl Selectors<'_> {
    /// `SelectionPredicate.Empty`: no selector filters (a shard selector counts).
    pub(crate) fn is_empty(&self) -> bool {
        self.shard.is_none() && self.labels.is_empty() && self.fields.is_empty()
    }
}

/// Whether `obj` is in scope and matches every selector (the shard selector first, as
/// `SelectionPredicate.Matches` checks it).
pub(crate) fn matches(obj: &StoredObject, ns: Option<&str>, sel: Selectors<'_>) -> bool {
    ns.is_none_or(|n| obj.namespace == n)
        && sel
            .shard
            .is_none_or(|s| s.matches(&obj.uid, &obj.namespace))
        && (sel.labels.is_empty() || sel.labels.matches(&obj.labels))
        && (sel.fields.is_empty() || sel.fields.matches(|f| obj.field(f)))
}

/// Objects of `map` in scope, in key order, strictly after `after`.
pub(crate) fn select<'a>(
    map: &'a ObjectMap,
    ns: Option<&'a str>,
    sel: Selectors<'a>,
    after: Option<(String, String)>,
) -> impl Iterator<Item = Arc<StoredObject>> + 'a {
    in_scope(map, ns, after)
        .filter(move |o| matches(o, ns, sel))
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
