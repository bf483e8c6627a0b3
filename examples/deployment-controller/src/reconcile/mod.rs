//! The deployment controller's reconcile logic, pure: given a Deployment, the ReplicaSets it
//! owns (after [`claim_replica_sets`]), the Pods of its namespace and the current time, [`plan`]
//! returns what to do (create, update or delete ReplicaSets), the status to write and the
//! Deployment's revision. No I/O, no clock, no runtime: every rule is unit-tested, and the
//! controller ([`crate::controller`]) only executes plans.
//!
//! It follows kube-controller-manager's deployment controller (`pkg/controller/deployment`),
//! split as upstream is:
//! - [`adoption`] (`controller_ref_manager.go`): adopt orphan ReplicaSets whose labels match
//!   the selector, release owned ones whose labels no longer do;
//! - [`sync`] (`sync.go`): the new ReplicaSet (`getNewReplicaSet`: the one whose template
//!   equals the Deployment's ignoring the hash label, or `<deployment>-<hash>` created with a
//!   controller ownerReference), proportional scaling on a replica change (`scale`),
//!   `cleanupDeployment` (old ReplicaSets beyond `revisionHistoryLimit`, default 10);
//! - [`rolling`] and [`recreate`]: the two strategies;
//! - [`progress`]: status (`calculateStatus`), the `Available` and `Progressing` conditions
//!   (`syncRolloutStatus`, `ProgressDeadlineExceeded`, `DeploymentPaused`), and when the next
//!   pod passes `minReadySeconds`;
//! - [`history`](mod@history): revisions, revision history, change causes, rollback (`kubectl rollout undo`);
//! - [`util`] (`deployment_util.go`): hash, `maxSurge` / `maxUnavailable`, annotations, orders.
//!
//! One sync, as `syncDeployment` does it: a Deployment being deleted only gets its status; the
//! `DeploymentPaused` / `DeploymentResumed` condition is set, by a status write of its own
//! before anything else ([`Plan::paused_condition`]); a paused Deployment, or one whose
//! active ReplicaSets were last scaled for another `spec.replicas` (a scaling event), is only
//! scaled (`sync`: no new ReplicaSet, no rollout step); any other runs one step of its strategy.
//!
//! Not done (simpler than upstream): no `ReplicaFailure` condition (the ReplicaSets'
//! failure conditions are not copied); no events are recorded; the deprecated `rollbackTo` is
//! ignored; the Deployment's revision annotation is written through the status subresource
//! and, where the server drops metadata there (the simulated API server does), by a metadata
//! patch; when a Deployment is deleted its ReplicaSets are left to the garbage collector.
//!
//! The pod-template hash: client-go's `ComputeHash` is FNV-32a over a `spew` dump of the Go
//! struct plus the collision count, rendered with `rand.SafeEncodeString`. A Go struct dump
//! cannot be reproduced in Rust, so [`compute_hash`] hashes the template's JSON (k8s-openapi
//! serialises fields in a fixed order and maps sorted, so the bytes are stable) and then does
//! exactly what client-go does: FNV-32a, collision count as 8 little-endian bytes, the decimal
//! string safe-encoded. Hashes are stable across runs and releases of this controller, but differ
//! from the ones kube-controller-manager computes for the same template.

pub mod adoption;
pub mod history;
pub mod progress;
pub mod recreate;
pub mod rolling;
pub mod sync;
pub mod util;

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    api::{
        apps::v1::{Deployment, DeploymentStatus, ReplicaSet},
        core::v1::Pod,
    },
    apimachinery::pkg::apis::meta::v1::Time,
};

pub use adoption::{
    AdoptionError, Claims, adopt_patch, can_adopt, claim_replica_sets, deployments_for_orphan,
    deployments_selecting, release_patch,
};
pub use history::{Revision, history, rollback_patch};
pub use progress::{condition, deployment_complete, reason, rollout_complete};
pub use sync::{find_new_replica_set, new_replica_set};
pub use util::*;

#[cfg(test)]
use progress::remove_condition;
use progress::{
    calculate_status, check_paused_conditions, has_progress_deadline, min_ready_requeue,
    new_condition, set_condition, sync_rollout_status,
};

/// A Deployment the controller cannot act on (what API validation would have rejected). The
/// controller logs it and skips the Deployment until it changes; it never panics on one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Deployment: {0}")]
pub struct InvalidDeployment(pub String);

/// What to do to the API.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create the new ReplicaSet.
    Create(ReplicaSet),
    /// Update a ReplicaSet: the cached object with `spec.replicas`, annotations or
    /// `minReadySeconds` changed; its resourceVersion is the cached one, so a stale cache gets a
    /// 409.
    Update {
        /// The updated object.
        rs: ReplicaSet,
        /// Replicas before.
        from: i32,
        /// Replicas after (equal to `from` for an annotation-only update).
        to: i32,
    },
    /// Delete an old ReplicaSet beyond the revision history limit (with a uid precondition).
    Delete {
        /// Its name.
        name: String,
        /// Its uid.
        uid: Option<String>,
    },
}

/// The outcome of one reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The pod-template hash of the Deployment's template.
    pub hash: String,
    /// The name of the new ReplicaSet (existing or to create).
    pub new_rs_name: String,
    /// API writes, in order; stop at the first failure.
    pub actions: Vec<Action>,
    /// `checkPausedConditions`' own status write, made before anything else (upstream's
    /// `UpdateStatus` there): the `DeploymentPaused` or `DeploymentResumed` condition on the
    /// status as it was. None when the condition is already right.
    pub paused_condition: Option<DeploymentStatus>,
    /// The status to write through the status subresource (after `paused_condition`, if any);
    /// None when it is already current.
    pub status: Option<DeploymentStatus>,
    /// The Deployment's `deployment.kubernetes.io/revision` to write (its new ReplicaSet's),
    /// None when it already has it.
    pub revision: Option<String>,
    /// Sync again after this long even without events (progress deadline, `minReadySeconds`).
    pub requeue_after: Option<Duration>,
}

/// One ReplicaSet during planning: the object as it will be after this plan.
#[derive(Debug, Clone)]
pub(crate) struct Work {
    pub(crate) rs: ReplicaSet,
    /// Spec replicas in the cache.
    pub(crate) from: i32,
    /// Not in the API yet: the plan creates it.
    pub(crate) created: bool,
    /// Changed by the plan (an update to send).
    pub(crate) dirty: bool,
}

impl Work {
    fn existing(rs: &ReplicaSet) -> Self {
        Work {
            from: rs_replicas(rs),
            rs: rs.clone(),
            created: false,
            dirty: false,
        }
    }
    pub(crate) fn replicas(&self) -> i32 {
        rs_replicas(&self.rs)
    }
    pub(crate) fn name(&self) -> &str {
        self.rs.metadata.name.as_deref().unwrap_or_default()
    }
    pub(crate) fn available(&self) -> i32 {
        rs_available(&self.rs)
    }
}

/// A ReplicaSet of the plan: the new one or an old one (by index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    New,
    Old(usize),
}

/// The state of one reconcile: the Deployment, its new and old ReplicaSets as planned, and the
/// order they were changed in.
pub(crate) struct Planner<'a> {
    pub(crate) d: &'a Deployment,
    pub(crate) v: Validated,
    pub(crate) new: Option<Work>,
    pub(crate) old: Vec<Work>,
    touched: Vec<Target>,
    pub(crate) deletes: Vec<Action>,
}

impl Planner<'_> {
    pub(crate) fn work(&self, t: Target) -> Option<&Work> {
        match t {
            Target::New => self.new.as_ref(),
            Target::Old(i) => self.old.get(i),
        }
    }

    /// Every ReplicaSet of the plan, old ones first.
    pub(crate) fn targets(&self) -> impl Iterator<Item = Target> + use<> {
        let new = self.new.is_some().then_some(Target::New);
        (0..self.old.len()).map(Target::Old).chain(new)
    }

    pub(crate) fn touch(&mut self, t: Target) {
        if !self.touched.contains(&t) {
            self.touched.push(t);
        }
    }

    pub(crate) fn total_replicas(&self) -> i32 {
        self.old.iter().map(Work::replicas).sum::<i32>()
            + self.new.as_ref().map_or(0, Work::replicas)
    }

    /// `scaleReplicaSetAndRecordEvent`: nothing when the size is already `to`.
    pub(crate) fn scale(&mut self, t: Target, to: i32) -> bool {
        let same = match t {
            Target::New => self.new.as_ref().is_none_or(|w| w.replicas() == to),
            Target::Old(i) => self.old[i].replicas() == to,
        };
        !same && self.set_scale(t, to)
    }

    /// `scaleReplicaSet`: sets the size and the replica annotations (`desired-replicas`,
    /// `max-replicas`); an update when either changed. True when the size changed.
    pub(crate) fn set_scale(&mut self, t: Target, to: i32) -> bool {
        let (desired, max) = (self.v.replicas, self.v.max_replicas());
        let w = match t {
            Target::New => match self.new.as_mut() {
                Some(w) => w,
                None => return false,
            },
            Target::Old(i) => &mut self.old[i],
        };
        let resized = w.replicas() != to;
        let annotations = replicas_annotations_need_update(&w.rs, desired, max);
        if !resized && !annotations {
            return false;
        }
        w.rs.spec.replicas = Some(to);
        set_replicas_annotations(&mut w.rs, desired, max);
        w.dirty = true;
        self.touch(t);
        resized
    }

    pub(crate) fn create_new(&mut self, hash: &str, replicas: i32, revision: i64) {
        let rs = new_replica_set(self.d, &self.v, hash, replicas, revision);
        self.new = Some(Work {
            rs,
            from: 0,
            created: true,
            dirty: true,
        });
        self.touch(Target::New);
    }

    fn into_actions(self) -> Vec<Action> {
        let mut out = Vec::with_capacity(self.touched.len() + self.deletes.len());
        for t in &self.touched {
            let w = match t {
                Target::New => match self.new.as_ref() {
                    Some(w) => w,
                    None => continue,
                },
                Target::Old(i) => &self.old[*i],
            };
            if w.created {
                out.push(Action::Create(w.rs.clone()));
            } else if w.dirty {
                out.push(Action::Update {
                    rs: w.rs.clone(),
                    from: w.from,
                    to: w.replicas(),
                });
            }
        }
        out.extend(self.deletes);
        out
    }
}

/// Which part of `syncDeployment` a sync runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// `syncStatusOnly`: the Deployment is being deleted.
    StatusOnly,
    /// `sync`: paused, or a scaling event.
    Scale,
    /// `rolloutRolling` / `rolloutRecreate`.
    Rollout,
}

/// Reconciles one Deployment (`syncDeployment` after the claims). `replica_sets` may hold
/// anything of its namespace; only the ReplicaSets it controls (adopt orphans first, with
/// [`claim_replica_sets`]) and their pods are considered.
pub fn plan(
    d: &Deployment,
    replica_sets: &[Arc<ReplicaSet>],
    pods: &[Arc<Pod>],
    now: &Time,
) -> Result<Plan, InvalidDeployment> {
    let v = validate(d)?;
    let current = d.status.clone().unwrap_or_default();
    let hash = compute_hash(&d.spec.template, current.collision_count);
    let new_rs_name = format!("{}-{hash}", v.name);

    let owned: Vec<&ReplicaSet> = replica_sets
        .iter()
        .map(|rs| &**rs)
        .filter(|rs| is_controlled_by(&rs.metadata, &v.uid))
        .collect();
    let new_idx = find_new_replica_set(d, &owned);
    let new = new_idx.map(|i| Work::existing(owned[i]));
    let old: Vec<Work> = owned
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != new_idx)
        .map(|(_, rs)| Work::existing(rs))
        .collect();
    let owned_uids: Vec<&str> = owned
        .iter()
        .filter_map(|rs| rs.metadata.uid.as_deref())
        .collect();
    let pods: Vec<&Pod> = pods
        .iter()
        .map(|p| &**p)
        .filter(|p| {
            controller_of(&p.metadata).is_some_and(|r| owned_uids.contains(&r.uid.as_str()))
        })
        .collect();

    let mut p = Planner {
        d,
        v,
        new,
        old,
        touched: Vec::new(),
        deletes: Vec::new(),
    };
    // getAllReplicaSetsAndSyncRevision: the next revision, and the existing new ReplicaSet's
    // annotations and minReadySeconds.
    let new_revision = max_revision(p.old.iter().map(|w| &w.rs)) + 1;
    p.sync_new_replica_set(new_revision);
    let found_existing = p.new.is_some();

    let mut base = current.clone();
    let mut paused_condition = None;
    let paused = d.spec.paused.unwrap_or(false);
    let path = if d.metadata.deletion_timestamp.is_some() {
        Path::StatusOnly
    } else {
        // checkPausedConditions writes the condition at once, on its own: a resume is seen as
        // `DeploymentResumed` before the rollout's conditions replace it.
        check_paused_conditions(d, &mut base, now);
        if base != current {
            paused_condition = Some(base.clone());
        }
        if paused || p.is_scaling_event() {
            p.scale_deployment();
            if paused {
                p.cleanup();
            }
            Path::Scale
        } else {
            let scaled = match p.v.strategy {
                Strategy::Recreate => p.recreate(&hash, &pods, new_revision),
                Strategy::RollingUpdate {
                    max_surge,
                    max_unavailable,
                } => p.rolling(&hash, max_surge, max_unavailable, new_revision),
            };
            // Upstream cleans up once the status it read says the rollout is complete.
            if !scaled && deployment_complete(d, &current) {
                p.cleanup();
            }
            Path::Rollout
        }
    };

    // getNewReplicaSet's conditions on the status, before the rollout's.
    if has_progress_deadline(d) {
        let created = p.new.as_ref().is_some_and(|w| w.created);
        if created {
            let c = new_condition(
                reason::PROGRESSING,
                "True",
                reason::NEW_RS_CREATED,
                format!("Created new replica set {new_rs_name:?}"),
                now,
            );
            set_condition(&mut base, c);
        } else if found_existing && condition(&base, reason::PROGRESSING).is_none() {
            let c = new_condition(
                reason::PROGRESSING,
                "True",
                reason::FOUND_NEW_RS,
                format!("Found new replica set {new_rs_name:?}"),
                now,
            );
            set_condition(&mut base, c);
        }
    }
    let name = p
        .new
        .as_ref()
        .map_or(new_rs_name.clone(), |w| w.name().to_string());
    let (status, requeue_after) = match path {
        Path::StatusOnly | Path::Scale => (
            calculate_status(d, &p.v, &base, p.new.as_ref(), &p.old, now),
            None,
        ),
        Path::Rollout => sync_rollout_status(d, &p.v, &base, p.new.as_ref(), &p.old, &name, now),
    };
    let requeue_after = match (requeue_after, min_ready_requeue(d, &pods, now)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    // SetDeploymentRevision: the Deployment's revision is its new ReplicaSet's.
    let revision = p
        .new
        .as_ref()
        .and_then(|w| annotation(&w.rs.metadata, REVISION_ANNOTATION))
        .filter(|r| annotation(&d.metadata, REVISION_ANNOTATION) != Some(*r))
        .map(str::to_owned);
    // What the server holds once `paused_condition` is written.
    let written = paused_condition.as_ref().unwrap_or(&current);
    let status = (status != *written).then_some(status);
    Ok(Plan {
        hash,
        new_rs_name: name,
        actions: p.into_actions(),
        paused_condition,
        status,
        revision,
        requeue_after,
    })
}
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::{
        api::{
            apps::v1::{
                DeploymentSpec, DeploymentStrategy, ReplicaSetStatus, RollingUpdateDeployment,
            },
            core::v1::{Container, PodSpec, PodTemplateSpec},
        },
        apimachinery::pkg::{
            apis::meta::v1::{LabelSelector, ObjectMeta},
            util::intstr::IntOrString,
        },
        jiff::Timestamp,
    };
    use std::collections::BTreeMap;

    pub(crate) fn now() -> Time {
        Time(Timestamp::from_second(1_700_000_000).expect("valid"))
    }

    pub(crate) fn template(image: &str) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "web".into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }
    }

    pub(crate) fn deployment(
        replicas: i32,
        image: &str,
        strategy: Option<DeploymentStrategy>,
    ) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("d-uid".into()),
                generation: Some(1),
                ..Default::default()
            },
            spec: DeploymentSpec {
                replicas: Some(replicas),
                selector: LabelSelector {
                    match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                    ..Default::default()
                },
                template: template(image),
                strategy,
                ..Default::default()
            },
            status: None,
        }
    }

    pub(crate) fn rolling(
        surge: IntOrString,
        unavailable: IntOrString,
    ) -> Option<DeploymentStrategy> {
        Some(DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_surge: Some(surge),
                max_unavailable: Some(unavailable),
            }),
        })
    }

    pub(crate) fn recreate() -> Option<DeploymentStrategy> {
        Some(DeploymentStrategy {
            type_: Some("Recreate".into()),
            rolling_update: None,
        })
    }

    /// A ReplicaSet of `d` as the API would hold it: spec replicas, and `available` of them
    /// running and available.
    pub(crate) fn rs_of(
        d: &Deployment,
        image: &str,
        spec: i32,
        status: i32,
        available: i32,
        age: i64,
    ) -> Arc<ReplicaSet> {
        let mut d2 = d.clone();
        d2.spec.template = template(image);
        let v = validate(&d2).expect("valid");
        let hash = compute_hash(&template(image), None);
        let mut rs = new_replica_set(&d2, &v, &hash, spec, age);
        rs.metadata.uid = Some(format!("rs-{image}"));
        rs.metadata.resource_version = Some("7".into());
        rs.metadata.creation_timestamp = Some(Time(
            Timestamp::from_second(1_600_000_000 + age).expect("valid"),
        ));
        rs.status = Some(ReplicaSetStatus {
            replicas: status,
            ready_replicas: Some(available),
            available_replicas: Some(available),
            ..Default::default()
        });
        Arc::new(rs)
    }

    pub(crate) fn scales(p: &Plan) -> Vec<(String, i32, i32)> {
        p.actions
            .iter()
            .filter_map(|a| match a {
                Action::Update { rs, from, to } => {
                    Some((rs.metadata.name.clone().unwrap_or_default(), *from, *to))
                }
                _ => None,
            })
            .collect()
    }

    /// The uids of the ReplicaSets the plan deletes, in order.
    pub(crate) fn deleted(p: &Plan) -> Vec<&str> {
        p.actions
            .iter()
            .filter_map(|a| match a {
                Action::Delete { uid, .. } => uid.as_deref(),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn created(p: &Plan) -> Option<(String, i32)> {
        p.actions.iter().find_map(|a| match a {
            Action::Create(rs) => Some((rs.metadata.name.clone()?, rs_replicas(rs))),
            _ => None,
        })
    }

    #[test]
    fn a_template_written_back_by_a_go_client_equals_its_replica_sets() {
        // `kubectl rollout undo` copies the ReplicaSet's template as Go serialises it:
        // `resources: {}`, empty maps and slices, `creationTimestamp: null`.
        let ours = template("nginx:1");
        let from_go: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"creationTimestamp": null, "labels": {"app": "web", "pod-template-hash": "abc"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1", "resources": {}, "env": []}]}
        }))
        .expect("template");
        assert!(equal_ignore_hash(&ours, &from_go));
        assert!(equal_ignore_hash(&from_go, &ours));
        // A real difference is still one.
        assert!(!equal_ignore_hash(&template("nginx:2"), &from_go));
        let mut other_port = from_go.clone();
        other_port.spec.as_mut().expect("spec").containers[0].ports =
            Some(vec![Default::default()]);
        assert!(!equal_ignore_hash(&ours, &other_port));
    }

    #[test]
    fn hash_is_stable_and_changes_with_template_and_collisions() {
        let a = compute_hash(&template("nginx:1"), None);
        assert_eq!(a, compute_hash(&template("nginx:1"), None), "deterministic");
        assert_eq!(a, PINNED_HASH, "stable across releases");
        assert_ne!(a, compute_hash(&template("nginx:2"), None));
        assert_ne!(a, compute_hash(&template("nginx:1"), Some(1)));
        assert_ne!(
            compute_hash(&template("nginx:1"), Some(1)),
            compute_hash(&template("nginx:1"), Some(2))
        );
        assert!(a.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }

    const PINNED_HASH: &str = "75f67448f4";

    #[test]
    fn percentages_round_surge_up_and_unavailable_down() {
        let pct = |s: &str| IntOrString::String(s.into());
        assert_eq!(scaled_value(Some(&pct("25%")), 0, 10, true), Ok(3));
        assert_eq!(scaled_value(Some(&pct("25%")), 0, 10, false), Ok(2));
        assert_eq!(scaled_value(None, 25, 3, true), Ok(1));
        assert_eq!(scaled_value(None, 25, 3, false), Ok(0));
        assert_eq!(
            scaled_value(Some(&IntOrString::Int(2)), 25, 3, false),
            Ok(2)
        );
        assert!(scaled_value(Some(&pct("abc")), 25, 3, false).is_err());
        assert!(scaled_value(Some(&pct("12")), 25, 3, false).is_err());
        assert!(scaled_value(Some(&pct("-5%")), 25, 3, false).is_err());
        assert!(scaled_value(Some(&IntOrString::Int(-1)), 25, 3, false).is_err());
        // Defaults 25%/25% of 3: surge 1, unavailable 0.
        let d = deployment(3, "a", None);
        assert_eq!(
            strategy(&d),
            Ok(Strategy::RollingUpdate {
                max_surge: 1,
                max_unavailable: 0
            })
        );
        // Both resolving to 0 → unavailable 1 (client-go's ResolveFenceposts).
        let d = deployment(
            1,
            "a",
            rolling(IntOrString::String("0%".into()), IntOrString::Int(0)),
        );
        assert_eq!(
            strategy(&d),
            Ok(Strategy::RollingUpdate {
                max_surge: 0,
                max_unavailable: 1
            })
        );
        assert_eq!(max_unavailable(Strategy::Recreate, 5), 0);
        assert_eq!(
            max_unavailable(
                Strategy::RollingUpdate {
                    max_surge: 0,
                    max_unavailable: 9
                },
                5
            ),
            5
        );
    }

    #[test]
    fn malformed_deployments_are_rejected_not_panicked_on() {
        let mut d = deployment(2, "a", None);
        d.spec.selector = LabelSelector::default();
        assert!(plan(&d, &[], &[], &now()).is_err(), "empty selector");
        let mut d = deployment(2, "a", None);
        d.spec.selector.match_labels = Some(BTreeMap::from([("app".into(), "other".into())]));
        assert!(
            plan(&d, &[], &[], &now()).is_err(),
            "selector does not match template"
        );
        let d = deployment(-1, "a", None);
        assert!(plan(&d, &[], &[], &now()).is_err(), "negative replicas");
        let d = deployment(
            2,
            "a",
            rolling(IntOrString::String("x".into()), IntOrString::Int(1)),
        );
        assert!(plan(&d, &[], &[], &now()).is_err(), "bad maxSurge");
        let mut d = deployment(2, "a", None);
        d.spec.strategy = Some(DeploymentStrategy {
            type_: Some("BlueGreen".into()),
            rolling_update: None,
        });
        assert!(plan(&d, &[], &[], &now()).is_err(), "unknown strategy");
        let mut d = deployment(2, "a", None);
        d.metadata.uid = None;
        assert!(plan(&d, &[], &[], &now()).is_err(), "no uid");
    }

    #[test]
    fn a_new_deployment_gets_its_replica_set_and_status() {
        let d = deployment(3, "nginx:1", None);
        let p = plan(&d, &[], &[], &now()).expect("plan");
        let hash = compute_hash(&template("nginx:1"), None);
        assert_eq!(p.hash, hash);
        assert_eq!(p.new_rs_name, format!("web-{hash}"));
        let Some(Action::Create(rs)) = p.actions.first() else {
            panic!("expected a create: {:?}", p.actions)
        };
        assert_eq!(p.actions.len(), 1);
        assert_eq!(rs.metadata.name.as_deref(), Some(p.new_rs_name.as_str()));
        assert_eq!(
            rs_replicas(rs),
            3,
            "no old pods: the surge allows all 3 at once"
        );
        let spec = &rs.spec;
        let sel = spec.selector.match_labels.as_ref().expect("labels");
        assert_eq!(sel.get(POD_TEMPLATE_HASH_LABEL), Some(&hash));
        assert_eq!(sel.get("app").map(String::as_str), Some("web"));
        let tl = spec
            .template
            .as_ref()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.labels.as_ref())
            .expect("template labels");
        assert_eq!(tl.get(POD_TEMPLATE_HASH_LABEL), Some(&hash));
        assert_eq!(rs.metadata.labels.as_ref(), Some(tl));
        let owner = controller_of(&rs.metadata).expect("controller ref");
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Deployment", "web", "d-uid")
        );
        assert_eq!(owner.block_owner_deletion, Some(true));
        assert!(equal_ignore_hash(
            spec.template.as_ref().expect("template"),
            &template("nginx:1")
        ));
        assert_eq!(
            rs.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(REVISION_ANNOTATION))
                .map(String::as_str),
            Some("1")
        );
        let s = p.status.expect("status");
        assert_eq!(s.observed_generation, Some(1));
        assert_eq!(
            (s.replicas, s.updated_replicas, s.available_replicas),
            (Some(0), Some(0), Some(0))
        );
        let prog = condition(&s, reason::PROGRESSING).expect("progressing");
        assert_eq!(prog.reason.as_deref(), Some(reason::NEW_RS_CREATED));
        let avail = condition(&s, reason::AVAILABLE).expect("available");
        assert_eq!(avail.status.as_deref(), Some("False"));
    }

    #[test]
    fn steady_state_writes_nothing_and_status_is_idempotent() {
        let mut d = deployment(2, "nginx:1", None);
        let rs = rs_of(&d, "nginx:1", 2, 2, 2, 1);
        let p = plan(&d, std::slice::from_ref(&rs), &[], &now()).expect("plan");
        assert!(p.actions.is_empty(), "{:?}", p.actions);
        let s = p.status.expect("first status");
        assert_eq!(
            (
                s.replicas,
                s.updated_replicas,
                s.ready_replicas,
                s.available_replicas
            ),
            (Some(2), Some(2), Some(2), Some(2))
        );
        assert_eq!(
            condition(&s, reason::AVAILABLE).and_then(|c| c.status.as_deref()),
            Some("True")
        );
        assert_eq!(
            condition(&s, reason::PROGRESSING).and_then(|c| c.reason.as_deref()),
            Some(reason::NEW_RS_AVAILABLE)
        );
        assert_eq!(
            p.revision.as_deref(),
            Some("1"),
            "the Deployment gets its revision"
        );
        d.status = Some(s);
        d.metadata.annotations = Some(BTreeMap::from([(REVISION_ANNOTATION.into(), "1".into())]));
        assert!(rollout_complete(&d));
        let later = Time(Timestamp::from_second(1_700_000_100).expect("valid"));
        let p = plan(&d, &[rs], &[], &later).expect("plan");
        assert!(p.actions.is_empty() && p.status.is_none(), "{p:?}");
    }

    #[test]
    fn scaling_up_and_down_without_a_rollout() {
        let d = deployment(5, "nginx:1", None);
        let rs = rs_of(&d, "nginx:1", 2, 2, 2, 1);
        let p = plan(&d, std::slice::from_ref(&rs), &[], &now()).expect("plan");
        let name = rs.metadata.name.clone().expect("name");
        assert_eq!(scales(&p), vec![(name.clone(), 2, 5)]);
        let Action::Update { rs: updated, .. } = &p.actions[0] else {
            unreachable!()
        };
        assert_eq!(
            updated.metadata.resource_version.as_deref(),
            Some("7"),
            "409 if stale"
        );
        assert_eq!(
            updated
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DESIRED_REPLICAS_ANNOTATION))
                .map(String::as_str),
            Some("5")
        );
        let d = deployment(1, "nginx:1", None);
        let p = plan(&d, &[rs], &[], &now()).expect("plan");
        assert_eq!(scales(&p), vec![(name, 2, 1)]);
    }

    #[test]
    fn rolling_update_respects_surge_and_unavailability() {
        // 4 replicas, maxSurge 1, maxUnavailable 1: new RS created with 1 (total 5), and in the
        // same sync the old one goes 4 → 3 (available 4 > min available 3).
        let d = deployment(4, "v2", rolling(IntOrString::Int(1), IntOrString::Int(1)));
        let old = rs_of(&d, "v1", 4, 4, 4, 1);
        let p = plan(&d, std::slice::from_ref(&old), &[], &now()).expect("plan");
        assert_eq!(created(&p).map(|c| c.1), Some(1));
        let old_name = old.metadata.name.clone().expect("name");
        assert_eq!(scales(&p), vec![(old_name.clone(), 4, 3)]);
        assert_eq!(
            created(&p).map(|c| c.0),
            Some(format!("web-{}", compute_hash(&template("v2"), None)))
        );
        let rev = match &p.actions[0] {
            Action::Create(rs) => revision(rs),
            _ => 0,
        };
        assert_eq!(rev, 2, "revision after the old one's");

        // Next: new 1 (not yet available), old 3 available: new may grow to 5 - 3 = 2.
        let new = rs_of(&d, "v2", 1, 1, 0, 2);
        let old = rs_of(&d, "v1", 3, 3, 3, 1);
        let p = plan(&d, &[old.clone(), new.clone()], &[], &now()).expect("plan");
        let new_name = new.metadata.name.clone().expect("name");
        assert_eq!(
            scales(&p),
            vec![(new_name.clone(), 1, 2)],
            "one phase per sync"
        );

        // new 2 (0 available), old 3: total 5 = max; old cannot go down (3 available = min).
        let new = rs_of(&d, "v2", 2, 2, 0, 2);
        let p = plan(&d, &[old.clone(), new.clone()], &[], &now()).expect("plan");
        assert!(p.actions.is_empty(), "{:?}", p.actions);

        // new 2 both available: old 3 → 1 (available 5 - min 3 = 2).
        let new = rs_of(&d, "v2", 2, 2, 2, 2);
        let p = plan(&d, &[old, new.clone()], &[], &now()).expect("plan");
        assert_eq!(scales(&p), vec![(old_name.clone(), 3, 1)]);

        // Unhealthy old replicas go first: all 5, min 3, nothing new unavailable → 2 may go,
        // both unhealthy ones (one update of the old ReplicaSet).
        let old = rs_of(&d, "v1", 3, 3, 1, 1);
        let p = plan(&d, &[old, new], &[], &now()).expect("plan");
        assert_eq!(scales(&p), vec![(old_name.clone(), 3, 1)]);

        // With no surge the unavailability budget caps it: all 4, min 3 → only 1 goes.
        let d = deployment(4, "v2", rolling(IntOrString::Int(0), IntOrString::Int(1)));
        let old = rs_of(&d, "v1", 3, 3, 1, 1);
        let new = rs_of(&d, "v2", 1, 1, 1, 2);
        let p = plan(&d, &[old, new], &[], &now()).expect("plan");
        assert_eq!(scales(&p), vec![(old_name, 3, 2)]);
    }

    #[test]
    fn rolling_update_with_zero_surge_scales_old_down_first() {
        let d = deployment(2, "v2", rolling(IntOrString::Int(0), IntOrString::Int(1)));
        let old = rs_of(&d, "v1", 2, 2, 2, 1);
        let p = plan(&d, std::slice::from_ref(&old), &[], &now()).expect("plan");
        assert_eq!(created(&p).map(|c| c.1), Some(0), "no room to surge");
        assert_eq!(
            scales(&p),
            vec![(old.metadata.name.clone().expect("name"), 2, 1)]
        );
    }

    #[test]
    fn recreate_scales_old_to_zero_then_waits_for_pods_then_creates() {
        let d = deployment(3, "v2", recreate());
        let old = rs_of(&d, "v1", 3, 3, 3, 1);
        let p = plan(&d, std::slice::from_ref(&old), &[], &now()).expect("plan");
        assert_eq!(
            scales(&p),
            vec![(old.metadata.name.clone().expect("name"), 3, 0)]
        );
        assert!(created(&p).is_none(), "nothing new while old pods run");

        // Old at 0 but its status still reports pods: wait.
        let old = rs_of(&d, "v1", 0, 2, 2, 1);
        let p = plan(&d, &[old], &[], &now()).expect("plan");
        assert!(p.actions.is_empty(), "{:?}", p.actions);

        // Old status 0, but a pod of it still runs: wait.
        let old = rs_of(&d, "v1", 0, 0, 0, 1);
        let mut pod = Pod::default();
        pod.metadata.owner_references = old.metadata.owner_references.clone().map(|mut o| {
            o[0].uid = "rs-v1".into();
            o
        });
        pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        let p = plan(
            &d,
            std::slice::from_ref(&old),
            &[Arc::new(pod.clone())],
            &now(),
        )
        .expect("plan");
        assert!(p.actions.is_empty(), "{:?}", p.actions);

        // A finished pod does not count: create the new one at full size.
        pod.status.as_mut().expect("status").phase = Some("Succeeded".into());
        let p = plan(&d, &[old], &[Arc::new(pod)], &now()).expect("plan");
        assert_eq!(created(&p).map(|c| c.1), Some(3));
    }

    #[test]
    fn old_replica_sets_beyond_the_history_limit_are_deleted_when_complete() {
        let mut d = deployment(1, "v4", None);
        d.spec.revision_history_limit = Some(1);
        let rss = vec![
            rs_of(&d, "v1", 0, 0, 0, 1),
            rs_of(&d, "v2", 0, 0, 0, 2),
            rs_of(&d, "v3", 0, 0, 0, 3),
            rs_of(&d, "v4", 1, 1, 1, 4),
        ];
        let p = plan(&d, &rss, &[], &now()).expect("plan");
        assert!(
            !p.actions.iter().any(|a| matches!(a, Action::Delete { .. })),
            "not before the status says the rollout is complete"
        );
        d.status = p.status;
        let p = plan(&d, &rss, &[], &now()).expect("plan");
        assert_eq!(deleted(&p), vec!["rs-v1", "rs-v2"]);
    }

    #[test]
    fn replica_sets_of_others_are_ignored() {
        let d = deployment(1, "v1", None);
        let mut other = (*rs_of(&d, "v1", 1, 1, 1, 1)).clone();
        if let Some(o) = other.metadata.owner_references.as_mut() {
            o[0].uid = "someone-else".into();
        }
        let p = plan(&d, &[Arc::new(other)], &[], &now()).expect("plan");
        assert!(
            created(&p).is_some(),
            "a foreign RS is not ours: {:?}",
            p.actions
        );
    }

    #[test]
    fn progress_deadline_exceeded_without_progress() {
        let mut d = deployment(2, "v2", None);
        let old = rs_of(&d, "v1", 1, 1, 1, 1);
        let new = rs_of(&d, "v2", 2, 2, 0, 2);
        let first = plan(&d, &[old.clone(), new.clone()], &[], &now()).expect("plan");
        d.status = first.status;
        let prog = condition(d.status.as_ref().expect("status"), reason::PROGRESSING).cloned();
        // Found the new ReplicaSet, and replicas moved since the (empty) status: progressing.
        assert_eq!(prog.and_then(|c| c.reason), Some(reason::RS_UPDATED.into()));
        let p = plan(&d, &[old.clone(), new.clone()], &[], &now()).expect("plan");
        assert!(p.status.is_none(), "{:?}", p.status);
        assert_eq!(p.requeue_after, Some(Duration::from_secs(601)));
        let late = Time(Timestamp::from_second(1_700_000_000 + 601).expect("valid"));
        let p = plan(&d, &[old, new], &[], &late).expect("plan");
        let s = p.status.expect("status");
        let c = condition(&s, reason::PROGRESSING).expect("progressing");
        assert_eq!(
            (c.status.as_deref(), c.reason.as_deref()),
            (Some("False"), Some(reason::TIMED_OUT))
        );
    }

    #[test]
    fn paused_deployments_only_get_status() {
        let mut d = deployment(3, "v2", None);
        d.spec.paused = Some(true);
        let old = rs_of(&d, "v1", 3, 3, 3, 1);
        let p = plan(&d, &[old], &[], &now()).expect("plan");
        assert!(p.actions.is_empty(), "{:?}", p.actions);
        let s = p.status.expect("status");
        let c = condition(&s, reason::PROGRESSING).expect("progressing");
        assert_eq!(
            (c.status.as_deref(), c.reason.as_deref()),
            (Some("Unknown"), Some(reason::PAUSED))
        );
    }

    /// `calculateStatus` with `DeploymentReplicaSetTerminatingReplicas` (kube 1.35+): the count
    /// is the ReplicaSets', whatever the Deployment's status said before.
    #[test]
    fn terminating_replicas_come_from_the_replica_sets_not_the_old_status() {
        let mut d = deployment(3, "v1", None);
        d.status = Some(DeploymentStatus {
            terminating_replicas: Some(7),
            ..Default::default()
        });
        let with = |terminating: Option<i32>| {
            let mut rs = (*rs_of(&d, "v1", 3, 3, 3, 1)).clone();
            let s = rs.status.as_mut().expect("status");
            s.observed_generation = Some(1);
            s.terminating_replicas = terminating;
            Arc::new(rs)
        };
        let status = |rs| {
            plan(&d, &[rs], &[], &now())
                .expect("plan")
                .status
                .expect("status")
        };
        assert_eq!(status(with(Some(2))).terminating_replicas, Some(2));
        assert_eq!(status(with(Some(0))).terminating_replicas, Some(0));
        // The ReplicaSet controller synced it without a count: unknown, left out.
        assert_eq!(status(with(None)).terminating_replicas, None);
    }

    /// `checkPausedConditions` on a resume: `Progressing=Unknown, DeploymentResumed` as its
    /// own write, on the status as it was; the rollout's status comes after it.
    #[test]
    fn resuming_writes_deployment_resumed_on_its_own_first() {
        let mut d = deployment(3, "v2", None);
        let mut was = DeploymentStatus::default();
        set_condition(
            &mut was,
            new_condition(
                reason::PROGRESSING,
                "Unknown",
                reason::PAUSED,
                "Deployment is paused".into(),
                &now(),
            ),
        );
        d.status = Some(was.clone());
        d.spec.paused = Some(false);
        let old = rs_of(&d, "v1", 3, 3, 3, 1);
        let p = plan(&d, &[old], &[], &now()).expect("plan");

        let first = p.paused_condition.clone().expect("its own status write");
        let c = condition(&first, reason::PROGRESSING).expect("progressing");
        assert_eq!(
            (
                c.status.as_deref(),
                c.reason.as_deref(),
                c.message.as_deref()
            ),
            (
                Some("Unknown"),
                Some(reason::RESUMED),
                Some("Deployment is resumed")
            )
        );
        // Nothing else changes in that write.
        remove_condition(&mut was, reason::PROGRESSING);
        let mut rest = first.clone();
        remove_condition(&mut rest, reason::PROGRESSING);
        assert_eq!(rest, was);

        // Then the rollout: the new ReplicaSet, and its condition over the resumed one.
        assert!(created(&p).is_some(), "{:?}", p.actions);
        let s = p.status.expect("the rollout's status");
        let c = condition(&s, reason::PROGRESSING).expect("progressing");
        assert_eq!(c.status.as_deref(), Some("True"), "{c:?}");
        assert_ne!(c.reason.as_deref(), Some(reason::RESUMED), "{c:?}");

        // Once written, the next sync does not write it again.
        d.status = Some(first);
        let old = rs_of(&d, "v1", 3, 3, 3, 1);
        let again = plan(&d, &[old], &[], &now()).expect("plan");
        assert_eq!(again.paused_condition, None);
    }
}
