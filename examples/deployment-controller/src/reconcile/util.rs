//! Helpers of `pkg/controller/deployment/util/deployment_util.go` and `pkg/controller`
//! (`controller_utils.go`, `hash.go`): replica counts, controller references, the pod-template
//! hash, `maxSurge` / `maxUnavailable`, the replica annotations, revisions and the orders
//! ReplicaSets are sorted in.

use std::{cmp::Ordering, collections::BTreeMap};

use k8s_openapi::{
    api::{
        apps::v1::{Deployment, ReplicaSet},
        core::v1::PodTemplateSpec,
    },
    apimachinery::pkg::{
        apis::meta::v1::{ObjectMeta, OwnerReference},
        util::intstr::IntOrString,
    },
};
use kube::core::{Selector, SelectorExt};

use super::InvalidDeployment;

/// The label (and selector key) that tells ReplicaSets of one Deployment apart.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
/// The revision of a ReplicaSet within its Deployment (and the Deployment's current one).
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
/// The revisions a ReplicaSet had before it became the new one again (comma-separated).
pub const REVISION_HISTORY_ANNOTATION: &str = "deployment.kubernetes.io/revision-history";
/// The Deployment's replicas when the ReplicaSet was last scaled.
pub const DESIRED_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/desired-replicas";
/// The Deployment's replicas plus maxSurge when the ReplicaSet was last scaled.
pub const MAX_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/max-replicas";
/// Why the Deployment (and so the ReplicaSet it was copied to) changed; `kubectl rollout
/// history` shows it.
pub const CHANGE_CAUSE_ANNOTATION: &str = "kubernetes.io/change-cause";
/// `kubectl apply`'s record, never copied to ReplicaSets.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The deprecated rollback request (extensions/v1beta1), never copied to ReplicaSets.
pub const DEPRECATED_ROLLBACK_TO_ANNOTATION: &str = "deprecated.deployment.rollback.to";
/// Old ReplicaSets kept for rollbacks when `revisionHistoryLimit` is unset (the apps/v1
/// default the API server would have written).
pub const DEFAULT_REVISION_HISTORY_LIMIT: i32 = 10;
/// `progressDeadlineSeconds` when unset (the API server's default).
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;

/// A rollout strategy with its bounds resolved against `spec.replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Kill every old pod before creating new ones.
    Recreate,
    /// Replace pods gradually.
    RollingUpdate {
        /// Pods allowed above `replicas` (rounded up from a percentage).
        max_surge: i32,
        /// Pods allowed below `replicas` (rounded down; 1 if both resolve to 0).
        max_unavailable: i32,
    },
}

/// Replicas of a ReplicaSet's spec (defaults to 1, as the API does).
pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.replicas.unwrap_or(1)
}

/// `status.replicas` of a ReplicaSet (`GetActualReplicaCountForReplicaSets` of one).
pub fn rs_status_replicas(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map_or(0, |s| s.replicas)
}

/// `status.readyReplicas` of a ReplicaSet.
pub fn rs_ready(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

/// `status.availableReplicas` of a ReplicaSet: pods Ready for at least `minReadySeconds`, as
/// the ReplicaSet controller counts them.
pub fn rs_available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

/// `GetTerminatingReplicaCountForReplicaSets` (`deployment_util.go`, kube 1.33+): the sum of the
/// ReplicaSets' `status.terminatingReplicas` (pods with a deletionTimestamp that have not yet
/// finished, as the ReplicaSet controller counts them). A ReplicaSet its controller has never
/// synced (`observedGeneration` 0, no count) is skipped; one it has synced without reporting a
/// count makes the sum unknown: None, and the Deployment's `status.terminatingReplicas` is
/// left out, as upstream leaves it nil.
pub fn terminating_replica_count<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> Option<i32> {
    let mut total = 0_i32;
    for rs in rss {
        let status = rs.status.as_ref();
        let count = status.and_then(|s| s.terminating_replicas);
        let observed = status.and_then(|s| s.observed_generation).unwrap_or(0);
        match count {
            Some(n) => total = total.saturating_add(n),
            None if observed == 0 => {}
            None => return None,
        }
    }
    Some(total)
}

/// Replicas of a Deployment's spec (defaults to 1).
pub fn deployment_replicas(d: &Deployment) -> i32 {
    d.spec.replicas.unwrap_or(1)
}

/// The controller ownerReference of an object, if any (`metav1.GetControllerOf`).
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// True when `meta`'s controller is the object with `uid`.
pub fn is_controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    controller_of(meta).is_some_and(|r| r.uid == uid)
}

/// FNV-32a of `bytes`, continuing from `hash` (start with [`FNV32_OFFSET`]).
pub fn fnv32a(mut hash: u32, bytes: &[u8]) -> u32 {
    for b in bytes {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// FNV-32a's offset basis.
pub const FNV32_OFFSET: u32 = 0x811c_9dc5;

/// client-go's `rand.SafeEncodeString`: each byte mapped onto consonants and digits that
/// cannot spell words.
pub fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

/// The pod-template hash (`controller.ComputeHash`; see the module docs of
/// [`crate::reconcile`] for how it relates to client-go's).
pub fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    // Serialising a typed k8s-openapi value cannot fail (no non-string map keys).
    let json = serde_json::to_vec(template).unwrap_or_default();
    let mut hash = fnv32a(FNV32_OFFSET, &json);
    if let Some(c) = collision_count {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&(c as u32).to_le_bytes());
        hash = fnv32a(hash, &bytes);
    }
    safe_encode(&hash.to_string())
}

/// The template without the `pod-template-hash` label.
pub fn without_hash(t: &PodTemplateSpec) -> PodTemplateSpec {
    let mut t = t.clone();
    if let Some(meta) = t.metadata.as_mut()
        && let Some(labels) = meta.labels.as_mut()
    {
        labels.remove(POD_TEMPLATE_HASH_LABEL);
        if labels.is_empty() {
            meta.labels = None;
        }
    }
    t
}

/// client-go's `EqualIgnoreHash`: the templates are equal once the hash label is removed,
/// compared as Go compares them. In Go an absent struct and an empty one are the same value
/// (`resources: {}`), as are a nil and an empty map or slice and an unset `creationTimestamp`;
/// in k8s-openapi they are `None` vs `Some(empty)`. A template written back by a Go client
/// (`kubectl rollout undo` copies the ReplicaSet's template, serialised from Go structs, into
/// the Deployment) carries those empty values, so a plain `==` would miss the ReplicaSet it
/// came from and roll out a new one. Both sides are compared with nulls and empty objects
/// and arrays pruned.
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    let (a, b) = (without_hash(a), without_hash(b));
    a == b || go_normalized(&a) == go_normalized(&b)
}

/// The template as JSON with `null`, `{}` and `[]` removed at every level (Go's zero values of
/// structs, maps and slices), for [`equal_ignore_hash`].
fn go_normalized(t: &PodTemplateSpec) -> Option<serde_json::Value> {
    fn prune(v: &mut serde_json::Value) -> bool {
        match v {
            serde_json::Value::Null => true,
            serde_json::Value::Object(m) => {
                m.retain(|_, v| !prune(v));
                m.is_empty()
            }
            serde_json::Value::Array(a) => {
                // Elements keep their positions: an empty element is still an element.
                for e in a.iter_mut() {
                    prune(e);
                }
                a.is_empty()
            }
            _ => false,
        }
    }
    let mut v = serde_json::to_value(t).ok()?;
    prune(&mut v);
    Some(v)
}

/// client-go's `GetScaledValueFromIntOrPercent`, with a default percentage when unset.
pub fn scaled_value(
    value: Option<&IntOrString>,
    default_percent: i32,
    total: i32,
    round_up: bool,
) -> Result<i32, String> {
    let percent = match value {
        None => default_percent,
        Some(IntOrString::Int(i)) if *i < 0 => return Err(format!("{i} must be >= 0")),
        Some(IntOrString::Int(i)) => return Ok(*i),
        Some(IntOrString::String(s)) => {
            let digits = s
                .strip_suffix('%')
                .ok_or_else(|| format!("{s:?} is neither an integer nor a percentage"))?;
            match digits.parse::<i32>() {
                Ok(p) if p >= 0 => p,
                _ => return Err(format!("{s:?} is not a valid percentage")),
            }
        }
    };
    let scaled = i64::from(total) * i64::from(percent);
    let v = if round_up {
        (scaled + 99) / 100
    } else {
        scaled / 100
    };
    i32::try_from(v).map_err(|_| format!("{percent}% of {total} overflows"))
}

/// The Deployment's strategy with its bounds resolved (`ResolveFenceposts`).
pub fn strategy(d: &Deployment) -> Result<Strategy, InvalidDeployment> {
    let s = d.spec.strategy.as_ref();
    match s.and_then(|s| s.type_.as_deref()) {
        Some("Recreate") => Ok(Strategy::Recreate),
        None | Some("RollingUpdate") => {
            let replicas = deployment_replicas(d);
            let ru = s.and_then(|s| s.rolling_update.as_ref());
            let surge = scaled_value(ru.and_then(|r| r.max_surge.as_ref()), 25, replicas, true)
                .map_err(|e| InvalidDeployment(format!("maxSurge: {e}")))?;
            let unavailable = scaled_value(
                ru.and_then(|r| r.max_unavailable.as_ref()),
                25,
                replicas,
                false,
            )
            .map_err(|e| InvalidDeployment(format!("maxUnavailable: {e}")))?;
            // Both 0 would never make progress; client-go resolves maxUnavailable to 1.
            let unavailable = if surge == 0 && unavailable == 0 {
                1
            } else {
                unavailable
            };
            Ok(Strategy::RollingUpdate {
                max_surge: surge,
                max_unavailable: unavailable,
            })
        }
        Some(other) => Err(InvalidDeployment(format!(
            "unknown strategy type {other:?}"
        ))),
    }
}

/// client-go's `MaxUnavailable`: 0 for Recreate, at most `replicas`.
pub fn max_unavailable(strategy: Strategy, replicas: i32) -> i32 {
    match strategy {
        Strategy::RollingUpdate {
            max_unavailable, ..
        } if replicas > 0 => max_unavailable.min(replicas),
        _ => 0,
    }
}

/// client-go's `MaxSurge`: 0 for Recreate.
pub fn max_surge(strategy: Strategy) -> i32 {
    match strategy {
        Strategy::RollingUpdate { max_surge, .. } => max_surge,
        Strategy::Recreate => 0,
    }
}

/// What `validate` learnt about a Deployment.
#[derive(Debug, Clone)]
pub struct Validated {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// `spec.replicas`.
    pub replicas: i32,
    /// The resolved strategy.
    pub strategy: Strategy,
    /// `spec.selector`, parsed.
    pub selector: Selector,
}

impl Validated {
    /// `replicas + maxSurge`: the `max-replicas` annotation's value.
    pub fn max_replicas(&self) -> i32 {
        self.replicas.saturating_add(max_surge(self.strategy))
    }
}

/// Checks what API validation would: identity, replicas, a non-empty selector that selects the
/// template's labels, a known strategy with valid bounds.
pub fn validate(d: &Deployment) -> Result<Validated, InvalidDeployment> {
    let invalid = |m: &str| Err(InvalidDeployment(m.into()));
    let meta = &d.metadata;
    let (Some(name), Some(namespace), Some(uid)) = (&meta.name, &meta.namespace, &meta.uid) else {
        return invalid("metadata.name, namespace and uid are required");
    };
    let spec = &d.spec;
    let replicas = deployment_replicas(d);
    if replicas < 0 {
        return Err(InvalidDeployment(format!(
            "spec.replicas {replicas} is negative"
        )));
    }
    let sel = &spec.selector;
    if sel.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && sel.match_expressions.as_ref().is_none_or(Vec::is_empty)
    {
        return invalid("spec.selector is empty");
    }
    let selector = Selector::try_from(sel.clone())
        .map_err(|e| InvalidDeployment(format!("spec.selector: {e}")))?;
    let labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    if !selector.matches(&labels) {
        return invalid("spec.selector does not match spec.template.metadata.labels");
    }
    Ok(Validated {
        namespace: namespace.clone(),
        name: name.clone(),
        uid: uid.clone(),
        replicas,
        strategy: strategy(d)?,
        selector,
    })
}

/// An annotation of an object.
pub fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// A ReplicaSet's revision (`deploymentutil.Revision`; unset or unparsable: 0).
pub fn revision(rs: &ReplicaSet) -> i64 {
    annotation(&rs.metadata, REVISION_ANNOTATION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// The highest revision among `rss` (`deploymentutil.MaxRevision`), 0 for none.
pub fn max_revision<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    rss.into_iter().map(revision).max().unwrap_or(0)
}

/// The `desired-replicas` annotation (`GetDesiredReplicasAnnotation`).
pub fn desired_replicas_annotation(rs: &ReplicaSet) -> Option<i32> {
    annotation(&rs.metadata, DESIRED_REPLICAS_ANNOTATION)?
        .parse()
        .ok()
}

/// The `max-replicas` annotation (`getMaxReplicasAnnotation`).
pub fn max_replicas_annotation(rs: &ReplicaSet) -> Option<i32> {
    annotation(&rs.metadata, MAX_REPLICAS_ANNOTATION)?
        .parse()
        .ok()
}

/// `ReplicasAnnotationsNeedUpdate`.
pub fn replicas_annotations_need_update(rs: &ReplicaSet, desired: i32, max: i32) -> bool {
    annotation(&rs.metadata, DESIRED_REPLICAS_ANNOTATION) != Some(desired.to_string().as_str())
        || annotation(&rs.metadata, MAX_REPLICAS_ANNOTATION) != Some(max.to_string().as_str())
}

/// `SetReplicasAnnotations`: true when something changed.
pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    if !replicas_annotations_need_update(rs, desired, max) {
        return false;
    }
    let ann = rs.metadata.annotations.get_or_insert_with(Default::default);
    ann.insert(DESIRED_REPLICAS_ANNOTATION.into(), desired.to_string());
    ann.insert(MAX_REPLICAS_ANNOTATION.into(), max.to_string());
    true
}

/// `controller.ReplicaSetsByCreationTimestamp`: oldest first, then by name.
pub fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    a.metadata
        .creation_timestamp
        .cmp(&b.metadata.creation_timestamp)
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// `deploymentutil.ReplicaSetsByRevision`: lowest revision first, then oldest.
pub fn by_revision(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    revision(a)
        .cmp(&revision(b))
        .then_with(|| by_creation(a, b))
}

/// `controller.ReplicaSetsBySizeNewer`: largest `spec.replicas` first, newer first on a tie
/// (the order proportional scaling adds replicas in).
pub fn by_size_newer(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    rs_replicas(b)
        .cmp(&rs_replicas(a))
        .then_with(|| by_creation(b, a))
}

/// `controller.ReplicaSetsBySizeOlder`: largest first, older first on a tie (the order
/// proportional scaling removes replicas in).
pub fn by_size_older(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    rs_replicas(b)
        .cmp(&rs_replicas(a))
        .then_with(|| by_creation(a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};

    fn rs(name: &str, replicas: i32, created: i64, rev: Option<&str>) -> ReplicaSet {
        let mut rs = ReplicaSet::default();
        rs.metadata.name = Some(name.into());
        rs.metadata.creation_timestamp =
            Some(Time(Timestamp::from_second(created).expect("valid")));
        if let Some(r) = rev {
            rs.metadata.annotations =
                Some(BTreeMap::from([(REVISION_ANNOTATION.into(), r.into())]));
        }
        rs.spec.replicas = Some(replicas);
        rs
    }

    #[test]
    fn fnv32a_matches_the_reference_vectors() {
        assert_eq!(fnv32a(FNV32_OFFSET, b""), 0x811c_9dc5);
        assert_eq!(fnv32a(FNV32_OFFSET, b"a"), 0xe40c_292c);
        assert_eq!(fnv32a(FNV32_OFFSET, b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn safe_encode_matches_client_go() {
        // '0'..'9' are bytes 48..57; 48 % 27 = 21 → "bcdfghjklmnpqrstvwxz2456789"[21] = '4'.
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
    }

    #[test]
    fn revisions_parse_and_the_max_ignores_garbage() {
        let rss = [
            rs("a", 0, 1, Some("3")),
            rs("b", 0, 2, Some("x")),
            rs("c", 0, 3, None),
            rs("d", 0, 4, Some("12")),
        ];
        let revs: Vec<i64> = rss.iter().map(revision).collect();
        assert_eq!(revs, vec![3, 0, 0, 12]);
        assert_eq!(max_revision(&rss), 12);
        assert_eq!(max_revision(&[]), 0);
    }

    #[test]
    fn sort_orders_follow_controller_utils() {
        // (name, replicas, created, revision)
        let table = [
            rs("old-big", 5, 1, Some("2")),
            rs("new-big", 5, 3, Some("1")),
            rs("mid", 3, 2, Some("5")),
            rs("tie-b", 1, 4, Some("4")),
            rs("tie-a", 1, 4, Some("4")),
        ];
        let names = |mut v: Vec<ReplicaSet>, f: fn(&ReplicaSet, &ReplicaSet) -> Ordering| {
            v.sort_by(f);
            v.into_iter()
                .map(|r| r.metadata.name.unwrap_or_default())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(table.to_vec(), by_creation),
            ["old-big", "mid", "new-big", "tie-a", "tie-b"]
        );
        assert_eq!(
            names(table.to_vec(), by_revision),
            ["new-big", "old-big", "tie-a", "tie-b", "mid"]
        );
        assert_eq!(
            names(table.to_vec(), by_size_newer),
            ["new-big", "old-big", "mid", "tie-b", "tie-a"]
        );
        assert_eq!(
            names(table.to_vec(), by_size_older),
            ["old-big", "new-big", "mid", "tie-a", "tie-b"]
        );
    }

    #[test]
    fn replica_annotations_are_set_once() {
        let mut r = rs("a", 1, 1, None);
        assert!(replicas_annotations_need_update(&r, 3, 4));
        assert!(set_replicas_annotations(&mut r, 3, 4));
        assert_eq!(desired_replicas_annotation(&r), Some(3));
        assert_eq!(max_replicas_annotation(&r), Some(4));
        assert!(!set_replicas_annotations(&mut r, 3, 4), "already set");
        assert!(set_replicas_annotations(&mut r, 3, 5), "max changed");
    }

    /// Upstream's `TestReplicaSetCounts` (the terminating column of `deployment_util_test.go`).
    #[test]
    fn terminating_replicas_sum_the_replica_sets_and_are_unknown_when_one_does_not_say() {
        let with = |observed: i64, terminating: Option<i32>| {
            let mut r = rs("x", 1, 0, None);
            r.status = Some(k8s_openapi::api::apps::v1::ReplicaSetStatus {
                observed_generation: Some(observed),
                terminating_replicas: terminating,
                ..Default::default()
            });
            r
        };
        let rs1 = with(1, Some(3));
        let rs2 = with(0, Some(1)); // never synced, but it says: counted
        let rs3 = with(0, None); // never synced: skipped
        let rs4 = with(1, None); // synced without a count: unknown
        let table: [(Vec<&ReplicaSet>, Option<i32>); 6] = [
            (vec![&rs1], Some(3)),
            (vec![&rs1, &rs2], Some(4)),
            (vec![&rs3], Some(0)),
            (vec![&rs1, &rs2, &rs3], Some(4)),
            (vec![&rs4], None),
            (vec![&rs1, &rs2, &rs3, &rs4], None),
        ];
        for (i, (rss, want)) in table.into_iter().enumerate() {
            assert_eq!(terminating_replica_count(rss), want, "case {i}");
        }
        assert_eq!(terminating_replica_count([]), Some(0));
    }
}
