//! Revisions, the history `kubectl rollout history` lists and what `kubectl rollout undo` does.
//!
//! A Deployment's ReplicaSets carry `deployment.kubernetes.io/revision`: a new ReplicaSet gets
//! the highest revision of the old ones plus one; an old ReplicaSet that becomes the new one
//! again (its template is the Deployment's again: a rollback) gets the next revision too, and
//! the revision it had is appended to `deployment.kubernetes.io/revision-history`
//! (`deploymentutil.SetNewReplicaSetAnnotations`). The Deployment's own revision annotation
//! follows its new ReplicaSet's (`SetDeploymentRevision`). The Deployment's other annotations,
//! `kubernetes.io/change-cause` among them, are copied to its new ReplicaSet
//! (`copyDeploymentAnnotationsToReplicaSet`), which is how `kubectl rollout history` shows a
//! change cause per revision.
//!
//! Rollback in apps/v1 is client-side: `kubectl rollout undo` (`pkg/polymorphichelpers/
//! rollback.go`, `DeploymentRollbacker`) patches the Deployment's template back to an old
//! ReplicaSet's (without its hash label) and copies that ReplicaSet's annotations back;
//! [`rollback_patch`] builds the same JSON patch. The controller then finds that old
//! ReplicaSet as the new one (`EqualIgnoreHash`) and scales it up under the next revision. The
//! deprecated `spec.rollbackTo` is not in apps/v1 and not handled.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};

use super::util::{
    CHANGE_CAUSE_ANNOTATION, DEPRECATED_ROLLBACK_TO_ANNOTATION, DESIRED_REPLICAS_ANNOTATION,
    LAST_APPLIED_ANNOTATION, MAX_REPLICAS_ANNOTATION, REVISION_ANNOTATION,
    REVISION_HISTORY_ANNOTATION, annotation, revision, set_replicas_annotations, without_hash,
};

/// Longest `revision-history` annotation kept (`maxRevHistoryLengthInChars`); the oldest
/// entries are dropped first.
pub const MAX_REVISION_HISTORY_CHARS: usize = 2000;

/// Deployment annotations never copied to its ReplicaSets (`annotationsToSkip`).
pub const ANNOTATIONS_TO_SKIP: [&str; 6] = [
    LAST_APPLIED_ANNOTATION,
    REVISION_ANNOTATION,
    REVISION_HISTORY_ANNOTATION,
    DESIRED_REPLICAS_ANNOTATION,
    MAX_REPLICAS_ANNOTATION,
    DEPRECATED_ROLLBACK_TO_ANNOTATION,
];

fn skip_copy(key: &str) -> bool {
    ANNOTATIONS_TO_SKIP.contains(&key)
}

/// `copyDeploymentAnnotationsToReplicaSet`: the Deployment's annotations (but the skipped ones)
/// onto the ReplicaSet; true when one changed.
pub fn copy_deployment_annotations(d: &Deployment, rs: &mut ReplicaSet) -> bool {
    let Some(from) = d.metadata.annotations.as_ref() else {
        return false;
    };
    let to = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (k, v) in from {
        if skip_copy(k) || to.get(k) == Some(v) {
            continue;
        }
        to.insert(k.clone(), v.clone());
        changed = true;
    }
    changed
}

/// `SetNewReplicaSetAnnotations`: copies the Deployment's annotations, raises the revision to
/// `new_revision` when it is lower (recording the old one in the revision history when it had
/// one: a rollback), and for a ReplicaSet about to be created (`!exists`) sets the replica
/// annotations to `desired` / `max`. True when an annotation changed.
pub fn set_new_replica_set_annotations(
    d: &Deployment,
    rs: &mut ReplicaSet,
    new_revision: i64,
    exists: bool,
    desired: i32,
    max: i32,
) -> bool {
    let mut changed = copy_deployment_annotations(d, rs);
    let old = annotation(&rs.metadata, REVISION_ANNOTATION).map(str::to_owned);
    let old_revision = match old.as_deref() {
        None | Some("") => 0,
        Some(s) => match s.parse::<i64>() {
            Ok(r) => r,
            // Upstream logs and leaves the ReplicaSet alone.
            Err(_) => return changed,
        },
    };
    let ann = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    if old_revision < new_revision {
        ann.insert(REVISION_ANNOTATION.into(), new_revision.to_string());
        changed = true;
        if let Some(old) = old.filter(|o| !o.is_empty()) {
            let history = ann
                .get(REVISION_HISTORY_ANNOTATION)
                .cloned()
                .unwrap_or_default();
            ann.insert(
                REVISION_HISTORY_ANNOTATION.into(),
                append_history(&history, &old),
            );
        }
    }
    if !exists && set_replicas_annotations(rs, desired, max) {
        changed = true;
    }
    changed
}

/// Appends `old` to the comma-separated `history`, dropping the oldest entries to stay within
/// [`MAX_REVISION_HISTORY_CHARS`].
fn append_history(history: &str, old: &str) -> String {
    if history.is_empty() {
        return old.to_string();
    }
    let mut entries: Vec<&str> = history.split(',').collect();
    let mut total = history.len() + old.len() + 1;
    let mut start = 0;
    while total > MAX_REVISION_HISTORY_CHARS && start < entries.len() {
        total -= entries[start].len() + 1;
        start += 1;
    }
    if total > MAX_REVISION_HISTORY_CHARS {
        return history.to_string();
    }
    entries.drain(..start);
    entries.push(old);
    entries.join(",")
}

/// One line of `kubectl rollout history`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    /// `deployment.kubernetes.io/revision`.
    pub revision: i64,
    /// The ReplicaSet's name.
    pub replica_set: String,
    /// `kubernetes.io/change-cause`, if any.
    pub change_cause: Option<String>,
}

/// The Deployment's revisions, lowest first, from the ReplicaSets it controls (what
/// `kubectl rollout history` lists; ReplicaSets without a revision are left out).
pub fn history<'a>(
    deployment_uid: &str,
    rss: impl IntoIterator<Item = &'a ReplicaSet>,
) -> Vec<Revision> {
    let mut out: Vec<Revision> = rss
        .into_iter()
        .filter(|rs| super::util::is_controlled_by(&rs.metadata, deployment_uid))
        .filter(|rs| revision(rs) > 0)
        .map(|rs| Revision {
            revision: revision(rs),
            replica_set: rs.metadata.name.clone().unwrap_or_default(),
            change_cause: annotation(&rs.metadata, CHANGE_CAUSE_ANNOTATION).map(str::to_owned),
        })
        .collect();
    out.sort_by_key(|r| r.revision);
    out
}

/// The JSON patch `kubectl rollout undo` sends for apps/v1 (`DeploymentRollbacker.Rollback`,
/// `getDeploymentPatch`): the template of `rs` without its hash label, and the Deployment's
/// annotations with the skipped ones kept and the ReplicaSet's others copied back. `None` when
/// the ReplicaSet has no template.
pub fn rollback_patch(d: &Deployment, rs: &ReplicaSet) -> Option<serde_json::Value> {
    let template = without_hash(rs.spec.template.as_ref()?);
    let mut annotations: BTreeMap<String, String> = BTreeMap::new();
    let current = d.metadata.annotations.clone().unwrap_or_default();
    for k in ANNOTATIONS_TO_SKIP {
        if let Some(v) = current.get(k) {
            annotations.insert(k.into(), v.clone());
        }
    }
    for (k, v) in rs.metadata.annotations.iter().flatten() {
        if !skip_copy(k) {
            annotations.insert(k.clone(), v.clone());
        }
    }
    Some(serde_json::json!([
        {"op": "replace", "path": "/spec/template", "value": template},
        {"op": "replace", "path": "/metadata/annotations", "value": annotations},
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn d_with(annotations: &[(&str, &str)]) -> Deployment {
        let mut d = Deployment::default();
        d.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        d
    }

    fn rs_with(annotations: &[(&str, &str)]) -> ReplicaSet {
        let mut rs = ReplicaSet::default();
        rs.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        rs
    }

    fn ann<'a>(rs: &'a ReplicaSet, k: &str) -> Option<&'a str> {
        annotation(&rs.metadata, k)
    }

    #[test]
    fn new_replica_set_annotations_table() {
        // (rs revision, rs history, new revision, expected revision, expected history, changed)
        type Case<'a> = (
            Option<&'a str>,
            Option<&'a str>,
            i64,
            &'a str,
            Option<&'a str>,
            bool,
        );
        let table: [Case; 6] = [
            (None, None, 1, "1", None, true),
            (Some("1"), None, 1, "1", None, false),
            // The new ReplicaSet's revision only goes up (old ones may have been deleted).
            (Some("5"), None, 3, "5", None, false),
            // Rollback: an old ReplicaSet becomes new again.
            (Some("1"), None, 3, "3", Some("1"), true),
            (Some("3"), Some("1"), 5, "5", Some("1,3"), true),
            (Some(""), None, 2, "2", None, true),
        ];
        for (i, (rev, hist, new, want_rev, want_hist, want_changed)) in
            table.into_iter().enumerate()
        {
            let mut a = vec![];
            if let Some(r) = rev {
                a.push((REVISION_ANNOTATION, r));
            }
            if let Some(h) = hist {
                a.push((REVISION_HISTORY_ANNOTATION, h));
            }
            let mut rs = rs_with(&a);
            let changed = set_new_replica_set_annotations(&d_with(&[]), &mut rs, new, true, 3, 4);
            assert_eq!(changed, want_changed, "case {i}");
            assert_eq!(ann(&rs, REVISION_ANNOTATION), Some(want_rev), "case {i}");
            assert_eq!(ann(&rs, REVISION_HISTORY_ANNOTATION), want_hist, "case {i}");
            assert_eq!(
                ann(&rs, DESIRED_REPLICAS_ANNOTATION),
                None,
                "exists: replica annotations are scale()'s"
            );
        }
        let mut rs = rs_with(&[]);
        assert!(set_new_replica_set_annotations(
            &d_with(&[]),
            &mut rs,
            1,
            false,
            3,
            4
        ));
        assert_eq!(ann(&rs, DESIRED_REPLICAS_ANNOTATION), Some("3"));
        assert_eq!(ann(&rs, MAX_REPLICAS_ANNOTATION), Some("4"));
    }

    #[test]
    fn deployment_annotations_are_copied_except_the_skipped_ones() {
        let d = d_with(&[
            (CHANGE_CAUSE_ANNOTATION, "kubectl set image v2"),
            (REVISION_ANNOTATION, "9"),
            (LAST_APPLIED_ANNOTATION, "{}"),
            ("team", "a"),
        ]);
        let mut rs = rs_with(&[(REVISION_ANNOTATION, "2"), ("team", "a")]);
        assert!(copy_deployment_annotations(&d, &mut rs));
        assert_eq!(
            ann(&rs, CHANGE_CAUSE_ANNOTATION),
            Some("kubectl set image v2")
        );
        assert_eq!(ann(&rs, REVISION_ANNOTATION), Some("2"), "never copied");
        assert_eq!(ann(&rs, LAST_APPLIED_ANNOTATION), None);
        assert!(!copy_deployment_annotations(&d, &mut rs), "idempotent");
    }

    #[test]
    fn revision_history_drops_the_oldest_beyond_its_limit() {
        assert_eq!(append_history("", "1"), "1");
        assert_eq!(append_history("1,2", "3"), "1,2,3");
        let long = vec!["1234567890"; 181].join(","); // 181*11-1 = 1990 chars
        assert_eq!(
            append_history(&long, "77").split(',').count(),
            182,
            "fits: 1993 chars"
        );
        let out = append_history(&long, "123456789012");
        assert!(out.len() <= MAX_REVISION_HISTORY_CHARS, "{}", out.len());
        assert!(out.ends_with(",123456789012"));
        assert_eq!(out.split(',').count(), 181, "one dropped, one added");
    }

    #[test]
    fn history_lists_owned_revisions_in_order_and_rollback_patch_restores_the_template() {
        let owned = |name: &str, rev: &str, cause: Option<&str>| {
            let mut a = vec![(REVISION_ANNOTATION, rev)];
            if let Some(c) = cause {
                a.push((CHANGE_CAUSE_ANNOTATION, c));
            }
            let mut rs = rs_with(&a);
            rs.metadata.name = Some(name.into());
            rs.metadata.owner_references = Some(vec![OwnerReference {
                uid: "d".into(),
                controller: Some(true),
                ..Default::default()
            }]);
            rs
        };
        let mut foreign = owned("x", "7", None);
        foreign.metadata.owner_references = None;
        let rss = [
            owned("b", "3", Some("v2")),
            owned("a", "1", None),
            foreign,
            owned("z", "", None),
        ];
        let h = history("d", &rss);
        assert_eq!(
            h,
            vec![
                Revision {
                    revision: 1,
                    replica_set: "a".into(),
                    change_cause: None
                },
                Revision {
                    revision: 3,
                    replica_set: "b".into(),
                    change_cause: Some("v2".into())
                },
            ]
        );

        let mut rs = owned("a", "1", Some("v1"));
        let t = k8s_openapi::api::core::v1::PodTemplateSpec {
            metadata: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                labels: Some(BTreeMap::from([
                    ("app".into(), "web".into()),
                    ("pod-template-hash".into(), "abc".into()),
                ])),
                ..Default::default()
            }),
            spec: None,
        };
        rs.spec.template = Some(t);
        let d = d_with(&[(REVISION_ANNOTATION, "3"), (CHANGE_CAUSE_ANNOTATION, "v2")]);
        let patch = rollback_patch(&d, &rs).expect("patch");
        assert_eq!(
            patch[0]["value"]["metadata"]["labels"],
            serde_json::json!({"app": "web"})
        );
        assert_eq!(
            patch[1]["value"],
            serde_json::json!({REVISION_ANNOTATION: "3", CHANGE_CAUSE_ANNOTATION: "v1"})
        );
    }
}
