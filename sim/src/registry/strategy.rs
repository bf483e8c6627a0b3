//! What kube-apiserver's registry strategies decide per kind, for the writes the sim serves:
//! what a create does to `status`, when `metadata.generation` moves, and how a delete proceeds
//! (graceful deletion of pods, finalizers holding objects). Each rule names the function of
//! kubernetes' source it follows.

use serde_json::{Value, json};

use crate::apimachinery::schema::ResourceDef;
use crate::apimachinery::util::{format_rfc3339, parse_rfc3339, string_list};
use crate::storage::object::meta_mut;

/// What changes bump `metadata.generation` on an update of a kind (its strategy's
/// `PrepareForUpdate`); status updates never do (the status strategies copy the old spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GenerationRule {
    /// No generation is kept (ConfigMap, Secret, Service, Namespace, Node, Event,
    /// ServiceAccount, Lease: their strategies never set one).
    None,
    /// `spec` changes (`pkg/registry/apps/replicaset/strategy.go` `PrepareForUpdate`,
    /// `pkg/registry/core/pod/strategy.go` `updatePodGeneration`).
    Spec,
    /// `spec` or `metadata.annotations` changes, because the deployment controller copies
    /// annotations to its replica sets (`pkg/registry/apps/deployment/strategy.go`
    /// `PrepareForUpdate`).
    SpecOrAnnotations,
    /// Anything but `metadata` changes (custom resources:
    /// `staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/strategy.go`
    /// `PrepareForUpdate`, which compares `copyNonMetadata` of both; with a status subresource
    /// the status was already reset to the old one, so only a status-less kind bumps on status).
    NonMetadata,
}

/// The generation rule of a kind: by (group, kind) for the built-ins, [`GenerationRule::NonMetadata`]
/// for custom resources.
pub(crate) fn generation_rule(def: &ResourceDef) -> GenerationRule {
    if !def.builtin {
        return GenerationRule::NonMetadata;
    }
    if !def.tracks_generation {
        return GenerationRule::None;
    }
    match (def.group.as_str(), def.kind.as_str()) {
        ("apps", "Deployment") => GenerationRule::SpecOrAnnotations,
        ("apps", "ReplicaSet") | ("", "Pod") => GenerationRule::Spec,
        _ => GenerationRule::None,
    }
}

/// What happens to `status` when an object is created through the API.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CreateStatus {
    /// Status is kept as sent.
    Keep,
    /// Status is replaced by this value (e.g. a Pod starts `Pending`).
    Reset(Value),
    /// Status is removed.
    Remove,
}

/// What a kind's strategy `PrepareForCreate` does to the status sent: the built-ins with a
/// status subresource start from their initial status (`pkg/registry/core/pod/strategy.go`:
/// `Pending`; service: an empty load balancer; namespace: `Active`; deployment: empty;
/// replica set: 0 replicas); a custom resource with a status subresource drops it
/// (`staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/strategy.go`);
/// the others keep it.
pub(crate) fn create_status(def: &ResourceDef) -> CreateStatus {
    if !def.builtin {
        return if def.status {
            CreateStatus::Remove
        } else {
            CreateStatus::Keep
        };
    }
    match (def.group.as_str(), def.kind.as_str()) {
        ("", "Pod") => CreateStatus::Reset(json!({"phase": "Pending"})),
        ("", "Service") => CreateStatus::Reset(json!({"loadBalancer": {}})),
        ("", "Namespace") => CreateStatus::Reset(json!({"phase": "Active"})),
        ("apps", "Deployment") => CreateStatus::Reset(json!({})),
        ("apps", "ReplicaSet") => CreateStatus::Reset(json!({"replicas": 0})),
        _ => CreateStatus::Keep,
    }
}

/// Whether a value is absent for `apiequality.Semantic.DeepEqual` (nil and empty maps and
/// slices are equal there; an empty object is also what an absent struct decodes to).
fn semantically_empty(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.values().all(|v| semantically_empty(Some(v))),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}

/// `apiequality.Semantic.DeepEqual` over JSON, at every depth: the Go comparison runs on the
/// decoded structs, where a null, an empty map or list and an absent field are all the same
/// (`third_party/forked/golang/reflect/deep_equal.go` treats nil and empty maps and slices as
/// equal). Pointers to empty structs, which Go tells from nil, are the one case this merges.
pub(crate) fn semantically_equal(a: Option<&Value>, b: Option<&Value>) -> bool {
    if semantically_empty(a) && semantically_empty(b) {
        return true;
    }
    match (a, b) {
        // Each key once: a key on both sides visited twice would double the work at every
        // depth of a pod template.
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            x.iter().all(|(k, v)| semantically_equal(Some(v), y.get(k)))
                && y.iter()
                    .filter(|(k, _)| !x.contains_key(*k))
                    .all(|(_, v)| semantically_empty(Some(v)))
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(p, q)| semantically_equal(Some(p), Some(q)))
        }
        _ => a == b,
    }
}

/// Whether replacing `old` by `new` (through the main resource or `/scale`) bumps the
/// generation under the kind's rule.
pub(crate) fn bumps_generation(def: &ResourceDef, old: &Value, new: &Value) -> bool {
    match generation_rule(def) {
        GenerationRule::None => false,
        GenerationRule::Spec => !semantically_equal(old.get("spec"), new.get("spec")),
        GenerationRule::SpecOrAnnotations => {
            fn ann(v: &Value) -> Option<&Value> {
                v.get("metadata").and_then(|m| m.get("annotations"))
            }
            !semantically_equal(old.get("spec"), new.get("spec"))
                || !semantically_equal(ann(old), ann(new))
        }
        GenerationRule::NonMetadata => {
            let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
                return old != new;
            };
            // Compared in place, not as copies without `metadata`.
            let rest = |m: &serde_json::Map<String, Value>| {
                m.len() - usize::from(m.contains_key("metadata"))
            };
            rest(o) != rest(n)
                || o.iter()
                    .any(|(k, v)| k.as_str() != "metadata" && n.get(k) != Some(v))
        }
    }
}

/// The metadata fields a built-in kind's `/status` write takes from the stored object
/// rather than the request, by the kind's status strategy's `PrepareForUpdate` (the rest of
/// the request's metadata is taken, as a main update takes it): Deployment resets the labels
/// (`pkg/registry/apps/deployment/strategy.go` `deploymentStatusStrategy`), Pod the owner
/// references (`pkg/registry/core/pod/strategy.go` `podStatusStrategy`: old kubelets corrupt
/// them); ReplicaSet (`rsStatusStrategy`), Service (`pkg/registry/core/service/strategy.go`
/// `serviceStatusStrategy`), Namespace (`pkg/registry/core/namespace/strategy.go`
/// `namespaceStatusStrategy`) and Node (`pkg/registry/core/node/strategy.go`
/// `nodeStatusStrategy`) reset only the spec.
pub(crate) fn status_reset_metadata(def: &ResourceDef) -> &'static [&'static str] {
    match (def.group.as_str(), def.kind.as_str()) {
        ("apps", "Deployment") => &["labels"],
        ("", "Pod") => &["ownerReferences"],
        _ => &[],
    }
}

/// Sets `metadata.generation` to the old one plus one.
pub(crate) fn bump_generation(old: &Value, new: &mut Value) {
    let g = generation(old) + 1;
    if let Some(meta) = meta_mut(new) {
        meta.insert("generation".into(), json!(g));
    }
}

fn generation(v: &Value) -> i64 {
    v.get("metadata")
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// How a DELETE proceeds, decided from the stored object and the request's
/// `DeleteOptions.gracePeriodSeconds`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DeletePlan {
    /// Remove the object now (one DELETED event).
    Delete,
    /// A graceful deletion with an equal or shorter period is already under way: change
    /// nothing, answer with the object.
    Pending,
    /// Store this marked object (a MODIFIED event carrying `deletionTimestamp` and
    /// `deletionGracePeriodSeconds`); then, when `then_delete`, remove it (a DELETED event).
    Mark {
        /// The object with its deletion marks.
        object: Value,
        /// The grace period written (0 for objects only held by finalizers).
        grace: i64,
        /// Remove the object right after the mark (grace 0 and no finalizers).
        then_delete: bool,
    },
}

/// The grace period kube-apiserver stores on a pod's first delete
/// (`pkg/registry/core/pod/strategy.go` `CheckGracefulDelete`): the request's
/// `gracePeriodSeconds`, else `spec.terminationGracePeriodSeconds` (defaulted to 30 on
/// every write, see `defaults`; a missing one still counts as 30),
/// 0 for an unscheduled pod (no `spec.nodeName`) or one in a terminal phase; a negative value is 1.
pub(crate) fn pod_grace_period(pod: &Value, requested: Option<i64>) -> i64 {
    let spec = pod.get("spec");
    let mut period = requested.unwrap_or_else(|| {
        spec.and_then(|s| s.get("terminationGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .unwrap_or(30)
    });
    let node = spec
        .and_then(|s| s.get("nodeName"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if node.is_empty() {
        period = 0;
    }
    let phase = pod
        .get("status")
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str);
    if matches!(phase, Some("Failed" | "Succeeded")) {
        period = 0;
    }
    if period < 0 { 1 } else { period }
}

/// Whether the kind's strategy implements `RESTGracefulDeleteStrategy` (only pods, among the
/// kinds the sim serves).
fn graceful_kind(def: &ResourceDef) -> bool {
    def.builtin && def.group.is_empty() && def.kind == "Pod"
}

fn meta_i64(v: &Value, k: &str) -> Option<i64> {
    v.get("metadata")?.get(k)?.as_i64()
}

fn meta_time(v: &Value, k: &str) -> Option<i64> {
    parse_rfc3339(v.get("metadata")?.get(k)?.as_str()?)
}

fn has_finalizers(v: &Value) -> bool {
    v.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

fn set_marks(v: &mut Value, timestamp: i64, grace: i64, bump: bool) {
    let g = generation(v);
    if let Some(meta) = meta_mut(v) {
        meta.insert("deletionTimestamp".into(), json!(format_rfc3339(timestamp)));
        meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
        if bump && g > 0 {
            meta.insert("generation".into(), json!(g + 1));
        }
    }
}

/// Whether a delete answers with the deleted object rather than a `Status`: the stores that set
/// `ReturnDeletedObject` (`pkg/registry/core/{pod,service,namespace,serviceaccount}/storage/
/// storage.go`); the generic store's `finalizeDelete` answers the others with a `Status`.
pub(crate) fn returns_deleted_object(def: &ResourceDef) -> bool {
    def.builtin
        && def.group.is_empty()
        && matches!(
            def.kind.as_str(),
            "Pod" | "Service" | "Namespace" | "ServiceAccount"
        )
}

/// Decides a DELETE of `obj` at Unix time `now`, as kube-apiserver's generic store does:
/// `staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go` `Delete` and
/// `updateForGracefulDeletionAndFinalizers` (with `markAsDeleting` for kinds without graceful
/// deletion), and `staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go` `BeforeDelete`
/// (the first graceful delete sets `deletionTimestamp = now + grace` and bumps a set
/// generation; a later one may only shorten the period, moving the timestamp back by the
/// difference; one at a stored period of 0 deletes).
pub(crate) fn plan_delete(
    def: &ResourceDef,
    obj: &Value,
    requested: Option<i64>,
    now: i64,
) -> DeletePlan {
    // BeforeDelete: negative periods are treated as 1 second.
    let requested = requested.map(|p| if p < 0 { 1 } else { p });
    let deleting = obj
        .get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|d| !d.is_null());
    let finalizers = has_finalizers(obj);
    let mut graceful: Option<(Value, i64)> = None;
    if graceful_kind(def) {
        if deleting {
            match meta_i64(obj, "deletionGracePeriodSeconds") {
                None | Some(0) => {}
                Some(current) => match requested {
                    Some(p) if p < current => {
                        let ts = meta_time(obj, "deletionTimestamp").unwrap_or(now + current);
                        let (mut ts, mut period) = (ts - current + p, p);
                        // BeforeDelete: "Prevent shortening the grace period moving
                        // deletionTimestamp into the past": the timestamp becomes now, and a
                        // graceful request whose whole period already expired gets 1 second
                        // (someone else still does the final grace-0 delete). The stored
                        // timestamp has whole seconds and the real `now` a fraction, so a
                        // timestamp of this very second is already in the past there.
                        if ts <= now {
                            ts = now;
                            if period != 0 {
                                period = 1;
                            }
                        }
                        let mut v = obj.clone();
                        set_marks(&mut v, ts, period, false);
                        graceful = Some((v, period));
                    }
                    _ => return DeletePlan::Pending,
                },
            }
        } else {
            let period = pod_grace_period(obj, requested);
            let mut v = obj.clone();
            set_marks(&mut v, now + period, period, true);
            graceful = Some((v, period));
        }
    }
    match graceful {
        Some((object, grace)) => DeletePlan::Mark {
            object,
            grace,
            then_delete: grace == 0 && !finalizers,
        },
        None if finalizers => {
            // markAsDeleting: bump a set generation on the first mark, set the timestamp unless
            // an earlier one is stored, and the grace period to 0.
            let mut v = obj.clone();
            let ts = match meta_time(obj, "deletionTimestamp") {
                Some(t) if t <= now => t,
                _ => now,
            };
            set_marks(&mut v, ts, 0, !deleting);
            DeletePlan::Mark {
                object: v,
                grace: 0,
                then_delete: false,
            }
        }
        None => DeletePlan::Delete,
    }
}

/// The garbage collector's finalizer for orphaning dependents (`metav1.FinalizerOrphanDependents`).
pub(crate) const ORPHAN: &str = "orphan";
/// The garbage collector's finalizer for foreground deletion (`metav1.FinalizerDeleteDependents`).
pub(crate) const FOREGROUND: &str = "foregroundDeletion";

/// Sets the garbage collector's finalizers a delete asks for, as
/// `staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`
/// `deletionFinalizersForGarbageCollection` does (with `shouldOrphanDependents` and
/// `shouldDeleteDependents`): `orphanDependents` first, then `propagationPolicy`, then the
/// finalizer already there; every kind the sim serves defaults to deleting dependents in the
/// background (apps/v1 included: only the old beta groups orphan), so with none of these no
/// finalizer is added. Both are removed first and added back at the end, in that order.
/// Returns whether the set of finalizers changed (the object is left alone otherwise).
pub(crate) fn set_gc_finalizers(
    obj: &mut Value,
    propagation: Option<&str>,
    orphan_dependents: Option<bool>,
) -> bool {
    let current = string_list(obj.get("metadata").and_then(|m| m.get("finalizers")));
    let existing = || {
        current.iter().find_map(|f| match f.as_str() {
            ORPHAN => Some(true),
            FOREGROUND => Some(false),
            _ => None,
        })
    };
    let orphan = match (orphan_dependents, propagation) {
        (Some(o), _) => o,
        (None, Some("Orphan")) => true,
        (None, Some("Background" | "Foreground")) => false,
        _ => existing() == Some(true),
    };
    let foreground = match (orphan_dependents, propagation) {
        (Some(_), _) => false,
        (None, Some("Foreground")) => true,
        (None, Some("Background" | "Orphan")) => false,
        _ => existing() == Some(false),
    };
    let mut next: Vec<String> = current
        .iter()
        .filter(|f| *f != ORPHAN && *f != FOREGROUND)
        .cloned()
        .collect();
    if orphan {
        next.push(ORPHAN.into());
    }
    if foreground {
        next.push(FOREGROUND.into());
    }
    let as_set = |v: &[String]| v.iter().cloned().collect::<std::collections::BTreeSet<_>>();
    if as_set(&current) == as_set(&next) {
        return false;
    }
    if let Some(meta) = meta_mut(obj) {
        // `omitempty`: an emptied list is not written.
        if next.is_empty() {
            meta.remove("finalizers");
        } else {
            meta.insert("finalizers".into(), json!(next));
        }
    }
    true
}

/// Whether an update that leaves `new` without finalizers deletes the object
/// (`staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`
/// `shouldDeleteDuringUpdate`): only when the stored object is marked for deletion with no
/// grace period left (a pod still in its graceful termination waits for the kubelet).
pub(crate) fn deletes_during_update(old: &Value, new: &Value) -> bool {
    let old_deleting = old
        .get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|d| !d.is_null());
    !has_finalizers(new)
        && old_deleting
        && meta_i64(old, "deletionGracePeriodSeconds").is_none_or(|g| g == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apimachinery::schema::Registry;

    fn def(reg: &Registry, plural: &str) -> std::sync::Arc<ResourceDef> {
        reg.by_plural(plural).unwrap().clone()
    }

    #[test]
    fn pod_grace_periods() {
        let scheduled = json!({"spec": {"nodeName": "n1"}});
        assert_eq!(pod_grace_period(&scheduled, None), 30);
        assert_eq!(pod_grace_period(&scheduled, Some(5)), 5);
        assert_eq!(pod_grace_period(&scheduled, Some(-3)), 1);
        let own = json!({"spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 7}});
        assert_eq!(pod_grace_period(&own, None), 7);
        assert_eq!(pod_grace_period(&json!({"spec": {}}), Some(30)), 0);
        let done = json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}});
        assert_eq!(pod_grace_period(&done, None), 0);
    }

    #[test]
    fn delete_plans() {
        let reg = Registry::new(&[]).unwrap();
        let pods = def(&reg, "pods");
        let cms = def(&reg, "configmaps");
        let pod = json!({"metadata": {"name": "p", "generation": 1}, "spec": {"nodeName": "n"}});
        let DeletePlan::Mark {
            object,
            grace,
            then_delete,
        } = plan_delete(&pods, &pod, None, 1000)
        else {
            panic!("a pod is deleted gracefully");
        };
        assert_eq!((grace, then_delete), (30, false));
        assert_eq!(object["metadata"]["deletionGracePeriodSeconds"], 30);
        assert_eq!(
            object["metadata"]["deletionTimestamp"],
            format_rfc3339(1030)
        );
        assert_eq!(object["metadata"]["generation"], 2);
        // A longer or equal period changes nothing; a shorter one moves the timestamp back.
        assert_eq!(
            plan_delete(&pods, &object, Some(30), 1001),
            DeletePlan::Pending
        );
        assert_eq!(plan_delete(&pods, &object, None, 1001), DeletePlan::Pending);
        let DeletePlan::Mark {
            object: shorter,
            grace,
            ..
        } = plan_delete(&pods, &object, Some(10), 1001)
        else {
            panic!("a shorter period shortens");
        };
        assert_eq!(grace, 10);
        assert_eq!(
            shorter["metadata"]["deletionTimestamp"],
            format_rfc3339(1010)
        );
        assert_eq!(shorter["metadata"]["generation"], 2, "no second bump");
        // Shortening into the past: the timestamp is now, and a graceful period that already
        // ran out is 1 second (BeforeDelete), not the requested one.
        let DeletePlan::Mark {
            object: late,
            grace,
            then_delete,
        } = plan_delete(&pods, &object, Some(5), 1040)
        else {
            panic!("a shorter period shortens");
        };
        assert_eq!((grace, then_delete), (1, false));
        assert_eq!(late["metadata"]["deletionTimestamp"], format_rfc3339(1040));
        assert_eq!(late["metadata"]["deletionGracePeriodSeconds"], 1);
        // The kubelet's grace-0 delete: mark with 0, then delete.
        assert!(matches!(
            plan_delete(&pods, &shorter, Some(0), 1002),
            DeletePlan::Mark {
                grace: 0,
                then_delete: true,
                ..
            }
        ));
        // Unscheduled: grace 0, still a mark first.
        assert!(matches!(
            plan_delete(&pods, &json!({"metadata": {}, "spec": {}}), Some(60), 1000),
            DeletePlan::Mark {
                grace: 0,
                then_delete: true,
                ..
            }
        ));
        // Kinds without graceful deletion: at once, or marked when finalizers hold them.
        assert_eq!(
            plan_delete(&cms, &json!({"metadata": {}}), Some(5), 1000),
            DeletePlan::Delete
        );
        let held = json!({"metadata": {"finalizers": ["x/y"]}});
        let DeletePlan::Mark {
            object,
            then_delete,
            ..
        } = plan_delete(&cms, &held, None, 1000)
        else {
            panic!("finalizers hold");
        };
        assert!(!then_delete);
        assert_eq!(object["metadata"]["deletionGracePeriodSeconds"], 0);
        assert!(deletes_during_update(&object, &json!({"metadata": {}})));
        assert!(!deletes_during_update(&object, &held));
    }

    #[test]
    fn generation_rules() {
        let reg = Registry::new(&[]).unwrap();
        let d = def(&reg, "deployments");
        let base = json!({"metadata": {"annotations": {"a": "1"}}, "spec": {"replicas": 1}});
        let mut ann = base.clone();
        ann["metadata"]["annotations"]["a"] = json!("2");
        assert!(bumps_generation(&d, &base, &ann));
        let rs = def(&reg, "replicasets");
        assert!(!bumps_generation(&rs, &base, &ann));
        let cm = def(&reg, "configmaps");
        assert!(!bumps_generation(
            &cm,
            &json!({"data": {}}),
            &json!({"data": {"a": "b"}})
        ));
        let mut no_ann = base.clone();
        no_ann["metadata"]["annotations"] = json!({});
        let mut null_ann = base.clone();
        null_ann["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        assert!(
            !bumps_generation(&d, &no_ann, &null_ann),
            "nil and empty are equal"
        );
        // At any depth: an empty map or a null where the other side has nothing.
        let nested =
            json!({"spec": {"replicas": 1, "template": {"metadata": {"labels": {"a": "b"}}}}});
        let mut empty_inside = nested.clone();
        empty_inside["spec"]["template"]["metadata"]["annotations"] = json!({});
        empty_inside["spec"]["paused"] = Value::Null;
        assert!(!bumps_generation(&rs, &nested, &empty_inside));
        let mut changed = nested.clone();
        changed["spec"]["template"]["metadata"]["labels"]["a"] = json!("c");
        assert!(bumps_generation(&rs, &nested, &changed));
        // A custom kind: anything but metadata, a field added, changed or removed.
        let crd = crate::apimachinery::schema::CustomResource::new(
            "example.com",
            "v1",
            "Widget",
            "widgets",
            crate::apimachinery::schema::Scope::Namespaced,
        );
        let reg = Registry::new(&[crd]).unwrap();
        let w = def(&reg, "widgets");
        let widget = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1}});
        let mut relabelled = widget.clone();
        relabelled["metadata"]["labels"]["a"] = json!("2");
        assert!(!bumps_generation(&w, &widget, &relabelled));
        let mut more = widget.clone();
        more["data"] = json!({"y": 2});
        assert!(bumps_generation(&w, &widget, &more));
        assert!(bumps_generation(&w, &more, &widget));
        let mut other = widget.clone();
        other["spec"]["x"] = json!(2);
        assert!(bumps_generation(&w, &widget, &other));
        let mut no_meta = widget.clone();
        no_meta.as_object_mut().unwrap().remove("metadata");
        assert!(!bumps_generation(&w, &widget, &no_meta));
    }
}
