//! ReplicaSet adoption and release by controllerRef, as `pkg/controller/controller_ref_manager.go`
//! (`BaseControllerRefManager.ClaimObject`, `ReplicaSetControllerRefManager.ClaimReplicaSets`)
//! does it for the deployment controller (`DeploymentController.getReplicaSetsForDeployment`):
//!
//! - a ReplicaSet controlled by the Deployment whose labels still match its selector is its own;
//! - one controlled by it whose labels no longer match is released (a strategic merge patch
//!   deleting the ownerReference), unless the Deployment is being deleted;
//! - an orphan (no controller ownerReference) whose labels match, not being deleted, is adopted
//!   (a strategic merge patch adding a controller ownerReference), unless the Deployment is
//!   being deleted; before adopting, the controller re-reads the Deployment from the API
//!   (`RecheckDeletionTimestamp`): it must still have the same uid and no deletion timestamp
//!   ([`can_adopt`]);
//! - ReplicaSets controlled by anything else are ignored.
//!
//! Both patches carry the ReplicaSet's own uid in `metadata.uid`, so a ReplicaSet deleted and
//! re-created under the same name is never patched by mistake. Pods are claimed by their
//! ReplicaSets (the ReplicaSet controller), not here.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::core::SelectorExt;

use super::{InvalidDeployment, util::controller_of, util::validate};

/// Why a Deployment may not adopt (`RecheckDeletionTimestamp`'s errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdoptionError {
    /// The Deployment of that name is another object now (deleted and re-created).
    #[error("original Deployment {name} is gone: got uid {got:?}, wanted {wanted}")]
    UidChanged {
        /// `namespace/name`.
        name: String,
        /// The uid the API has.
        got: Option<String>,
        /// The uid the cache had.
        wanted: String,
    },
    /// The Deployment is being deleted.
    #[error("Deployment {0} has just been deleted")]
    BeingDeleted(String),
    /// The Deployment no longer exists.
    #[error("Deployment {0} is gone")]
    Gone(String),
}

/// The outcome of [`claim_replica_sets`].
#[derive(Debug, Clone, Default)]
pub struct Claims {
    /// ReplicaSets the Deployment controls and whose labels match its selector.
    pub owned: Vec<Arc<ReplicaSet>>,
    /// Orphans to adopt (patch with [`adopt_patch`] after [`can_adopt`]); once adopted they are
    /// the Deployment's too.
    pub adopt: Vec<Arc<ReplicaSet>>,
    /// ReplicaSets it controls whose labels no longer match (patch with [`release_patch`]).
    pub release: Vec<Arc<ReplicaSet>>,
}

/// Sorts the ReplicaSets of the Deployment's namespace into owned, to adopt and to release
/// (`ClaimReplicaSets`). ReplicaSets of other namespaces are ignored.
pub fn claim_replica_sets(
    d: &Deployment,
    replica_sets: &[Arc<ReplicaSet>],
) -> Result<Claims, InvalidDeployment> {
    let v = validate(d)?;
    let deleting = d.metadata.deletion_timestamp.is_some();
    let mut claims = Claims::default();
    for rs in replica_sets {
        if rs.metadata.namespace.as_deref() != Some(v.namespace.as_str()) {
            continue;
        }
        let matches = v
            .selector
            .matches(rs.metadata.labels.as_ref().unwrap_or(&Default::default()));
        match controller_of(&rs.metadata) {
            Some(owner) if owner.uid != v.uid => {}
            Some(_) if matches => claims.owned.push(Arc::clone(rs)),
            Some(_) if !deleting => claims.release.push(Arc::clone(rs)),
            Some(_) => {}
            None if matches && !deleting && rs.metadata.deletion_timestamp.is_none() => {
                claims.adopt.push(Arc::clone(rs))
            }
            None => {}
        }
    }
    Ok(claims)
}

/// `RecheckDeletionTimestamp` with the deployment controller's uid check: `fresh` is the
/// Deployment as the API returns it now (None: not found).
pub fn can_adopt(original: &Deployment, fresh: Option<&Deployment>) -> Result<(), AdoptionError> {
    let name = format!(
        "{}/{}",
        original.metadata.namespace.as_deref().unwrap_or_default(),
        original.metadata.name.as_deref().unwrap_or_default()
    );
    let Some(fresh) = fresh else {
        return Err(AdoptionError::Gone(name));
    };
    if fresh.metadata.uid != original.metadata.uid {
        return Err(AdoptionError::UidChanged {
            name,
            got: fresh.metadata.uid.clone(),
            wanted: original.metadata.uid.clone().unwrap_or_default(),
        });
    }
    if fresh.metadata.deletion_timestamp.is_some() {
        return Err(AdoptionError::BeingDeleted(name));
    }
    Ok(())
}

/// The strategic merge patch that adopts `rs` (`ownerRefControllerPatch`): a controller
/// ownerReference to the Deployment, blocking its deletion, guarded by the ReplicaSet's uid.
pub fn adopt_patch(d: &Deployment, rs: &ReplicaSet) -> serde_json::Value {
    serde_json::json!({
        "metadata": {
            "uid": rs.metadata.uid,
            "ownerReferences": [{
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": d.metadata.name,
                "uid": d.metadata.uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        }
    })
}

/// The strategic merge patch that releases `rs` (`GenerateDeleteOwnerRefStrategicMergeBytes`):
/// deletes the Deployment's ownerReference (merge key `uid`), guarded by the ReplicaSet's uid.
pub fn release_patch(d: &Deployment, rs: &ReplicaSet) -> serde_json::Value {
    serde_json::json!({
        "metadata": {
            "uid": rs.metadata.uid,
            "ownerReferences": [{"$patch": "delete", "uid": d.metadata.uid}],
        }
    })
}

/// The Deployments (among `deployments`) an orphan ReplicaSet's labels match
/// (`getDeploymentsForReplicaSet`): the ones to wake up so they can adopt it. Empty for a
/// ReplicaSet that has a controller.
pub fn deployments_for_orphan<'a>(
    rs: &ReplicaSet,
    deployments: impl IntoIterator<Item = &'a Arc<Deployment>>,
) -> Vec<Arc<Deployment>> {
    if controller_of(&rs.metadata).is_some() {
        return Vec::new();
    }
    let labels = rs.metadata.labels.clone().unwrap_or_default();
    match rs.metadata.namespace.as_deref() {
        Some(ns) => deployments_selecting(ns, &labels, deployments),
        None => Vec::new(),
    }
}

/// The Deployments of namespace `ns` (among `deployments`) whose selector matches `labels`.
pub fn deployments_selecting<'a>(
    ns: &str,
    labels: &std::collections::BTreeMap<String, String>,
    deployments: impl IntoIterator<Item = &'a Arc<Deployment>>,
) -> Vec<Arc<Deployment>> {
    deployments
        .into_iter()
        .filter(|d| d.metadata.namespace.as_deref() == Some(ns))
        .filter(|d| validate(d).is_ok_and(|v| v.selector.matches(labels)))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::tests::{deployment, rs_of};
    use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
    use std::collections::BTreeMap;

    fn names(v: &[Arc<ReplicaSet>]) -> Vec<String> {
        v.iter()
            .map(|r| r.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    fn variant(
        base: &Arc<ReplicaSet>,
        name: &str,
        f: impl FnOnce(&mut ReplicaSet),
    ) -> Arc<ReplicaSet> {
        let mut rs = (**base).clone();
        rs.metadata.name = Some(name.into());
        f(&mut rs);
        Arc::new(rs)
    }

    #[test]
    fn claims_table() {
        let d = deployment(1, "v1", None);
        let base = rs_of(&d, "v1", 1, 1, 1, 1);
        let other_labels = BTreeMap::from([("app".to_string(), "other".to_string())]);
        let rss = vec![
            variant(&base, "mine", |_| {}),
            variant(&base, "mine-relabelled", |rs| {
                rs.metadata.labels = Some(other_labels.clone())
            }),
            variant(&base, "orphan", |rs| rs.metadata.owner_references = None),
            variant(&base, "orphan-other-labels", |rs| {
                rs.metadata.owner_references = None;
                rs.metadata.labels = Some(other_labels.clone());
            }),
            variant(&base, "orphan-deleting", |rs| {
                rs.metadata.owner_references = None;
                rs.metadata.deletion_timestamp =
                    Some(Time(Timestamp::from_second(1).expect("valid")));
            }),
            variant(&base, "someone-elses", |rs| {
                if let Some(o) = rs.metadata.owner_references.as_mut() {
                    o[0].uid = "other".into();
                }
            }),
            variant(&base, "other-namespace", |rs| {
                rs.metadata.owner_references = None;
                rs.metadata.namespace = Some("elsewhere".into());
            }),
            variant(&base, "not-controller", |rs| {
                if let Some(o) = rs.metadata.owner_references.as_mut() {
                    o[0].controller = Some(false);
                }
            }),
        ];
        let c = claim_replica_sets(&d, &rss).expect("valid");
        assert_eq!(names(&c.owned), ["mine"]);
        assert_eq!(names(&c.adopt), ["orphan", "not-controller"]);
        assert_eq!(names(&c.release), ["mine-relabelled"]);

        // Being deleted: keeps what it owns, adopts and releases nothing.
        let mut deleting = d.clone();
        deleting.metadata.deletion_timestamp =
            Some(Time(Timestamp::from_second(1).expect("valid")));
        let c = claim_replica_sets(&deleting, &rss).expect("valid");
        assert_eq!(names(&c.owned), ["mine"]);
        assert!(c.adopt.is_empty() && c.release.is_empty());
    }

    #[test]
    fn adoption_rechecks_the_live_deployment() {
        let d = deployment(1, "v1", None);
        assert_eq!(can_adopt(&d, Some(&d)), Ok(()));
        assert!(matches!(can_adopt(&d, None), Err(AdoptionError::Gone(_))));
        let mut recreated = d.clone();
        recreated.metadata.uid = Some("new".into());
        assert!(matches!(
            can_adopt(&d, Some(&recreated)),
            Err(AdoptionError::UidChanged { .. })
        ));
        let mut deleting = d.clone();
        deleting.metadata.deletion_timestamp =
            Some(Time(Timestamp::from_second(1).expect("valid")));
        assert!(matches!(
            can_adopt(&d, Some(&deleting)),
            Err(AdoptionError::BeingDeleted(_))
        ));
    }

    #[test]
    fn patches_and_orphan_lookup() {
        let d = deployment(1, "v1", None);
        let rs = rs_of(&d, "v1", 1, 1, 1, 1);
        let p = adopt_patch(&d, &rs);
        assert_eq!(p["metadata"]["uid"], "rs-v1");
        let owner = &p["metadata"]["ownerReferences"][0];
        assert_eq!(
            (
                owner["kind"].as_str(),
                owner["uid"].as_str(),
                owner["controller"].as_bool()
            ),
            (Some("Deployment"), Some("d-uid"), Some(true))
        );
        assert_eq!(owner["blockOwnerDeletion"], true);
        let p = release_patch(&d, &rs);
        assert_eq!(
            p["metadata"]["ownerReferences"],
            serde_json::json!([{"$patch": "delete", "uid": "d-uid"}])
        );

        let ds = vec![Arc::new(d.clone())];
        assert!(
            deployments_for_orphan(&rs, &ds).is_empty(),
            "has a controller"
        );
        let orphan = variant(&rs, "o", |r| r.metadata.owner_references = None);
        assert_eq!(deployments_for_orphan(&orphan, &ds).len(), 1);
        let elsewhere = variant(&orphan, "o", |r| r.metadata.namespace = Some("x".into()));
        assert!(deployments_for_orphan(&elsewhere, &ds).is_empty());
    }
}
