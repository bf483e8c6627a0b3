//! `pkg/controller/deployment/sync.go`: finding and creating the new ReplicaSet
//! (`getNewReplicaSet`), scaling on a replica change (`scale`, `isScalingEvent`, with
//! `deploymentutil.GetProportion`), and `cleanupDeployment`.
//!
//! Proportional scaling: while a rollout has several active ReplicaSets, a change of
//! `spec.replicas` is spread over all of them in proportion to their size. Every ReplicaSet
//! records the Deployment's `replicas` and `replicas + maxSurge` of its last scaling in the
//! `desired-replicas` and `max-replicas` annotations; a ReplicaSet whose `desired-replicas`
//! differs from `spec.replicas` marks a scaling event. The replicas to add (or remove) are
//! `replicas + maxSurge - sum(spec.replicas)`; each ReplicaSet, largest first (newer first when
//! adding, older first when removing), gets `round(size * (replicas + maxSurge) / max-replicas)`
//! minus `size`, capped by what is left to distribute; what rounding leaves over goes to the
//! first (largest) one.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::{
    Planner, Target, Work,
    history::set_new_replica_set_annotations,
    util::{
        DEFAULT_REVISION_HISTORY_LIMIT, POD_TEMPLATE_HASH_LABEL, Strategy, Validated, by_creation,
        by_revision, by_size_newer, by_size_older, desired_replicas_annotation, equal_ignore_hash,
        max_replicas_annotation, rs_available, rs_replicas, rs_status_replicas,
    },
};

/// `FindNewReplicaSet`: the oldest of `rss` whose template equals the Deployment's, ignoring the
/// hash label.
pub fn find_new_replica_set(d: &Deployment, rss: &[&ReplicaSet]) -> Option<usize> {
    let mut order: Vec<usize> = (0..rss.len()).collect();
    order.sort_by(|a, b| by_creation(rss[*a], rss[*b]));
    order.into_iter().find(|i| {
        rss[*i]
            .spec
            .template
            .as_ref()
            .is_some_and(|t| equal_ignore_hash(t, &d.spec.template))
    })
}

/// The ReplicaSet the Deployment would create (`getNewReplicaSet`'s create branch):
/// `<name>-<hash>` with the hash in its selector, template and labels, owned (controller) by the
/// Deployment, with the Deployment's `minReadySeconds` and annotations, revision `revision`.
pub fn new_replica_set(
    d: &Deployment,
    v: &Validated,
    hash: &str,
    replicas: i32,
    revision: i64,
) -> ReplicaSet {
    let spec = d.spec.clone();
    let mut template = spec.template;
    let meta = template.metadata.get_or_insert_with(Default::default);
    let labels = meta.labels.get_or_insert_with(Default::default);
    labels.insert(POD_TEMPLATE_HASH_LABEL.into(), hash.into());
    let labels = labels.clone();
    let mut selector = spec.selector;
    selector
        .match_labels
        .get_or_insert_with(Default::default)
        .insert(POD_TEMPLATE_HASH_LABEL.into(), hash.into());
    let mut rs = ReplicaSet {
        metadata: ObjectMeta {
            name: Some(format!("{}-{hash}", v.name)),
            namespace: Some(v.namespace.clone()),
            labels: Some(labels),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: v.name.clone(),
                uid: v.uid.clone(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            replicas: Some(replicas),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        },
        status: None,
    };
    set_new_replica_set_annotations(d, &mut rs, revision, false, v.replicas, v.max_replicas());
    rs
}

/// `GetProportion`: how many of `to_add` (already `added` distributed) this ReplicaSet of
/// `size` replicas gets, given the `max-replicas` annotation it was last scaled under
/// (`annotated`; None falls back to `status_replicas`, the Deployment's `status.replicas`).
pub fn get_proportion(
    size: i32,
    annotated: Option<i32>,
    status_replicas: i32,
    replicas: i32,
    max_replicas: i32,
    to_add: i32,
    added: i32,
) -> i32 {
    if size == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = replica_set_fraction(size, annotated, status_replicas, replicas, max_replicas);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

/// `getReplicaSetFraction`: `round(size * max_replicas / annotated) - size` (all of it when
/// scaling to 0).
fn replica_set_fraction(
    size: i32,
    annotated: Option<i32>,
    status_replicas: i32,
    replicas: i32,
    max_replicas: i32,
) -> i32 {
    if replicas == 0 {
        return -size;
    }
    let annotated = annotated.unwrap_or(status_replicas);
    if annotated == 0 {
        // Never proportionally scaled up from zero; upstream would divide by zero here.
        return 0;
    }
    let new_size = f64::from(size) * f64::from(max_replicas) / f64::from(annotated);
    // Go's math.Round: half away from zero, as f64::round.
    (new_size.round() as i32) - size
}

impl Planner<'_> {
    /// `getNewReplicaSet` for an existing new ReplicaSet: its annotations (the Deployment's,
    /// and the revision: `new_revision` if higher) and `minReadySeconds` brought up to date.
    pub(crate) fn sync_new_replica_set(&mut self, new_revision: i64) {
        let (d, desired, max) = (self.d, self.v.replicas, self.v.max_replicas());
        let Some(w) = self.new.as_mut() else {
            return;
        };
        let mut rs = w.rs.clone();
        let annotations =
            set_new_replica_set_annotations(d, &mut rs, new_revision, true, desired, max);
        let min_ready = rs.spec.min_ready_seconds != d.spec.min_ready_seconds;
        if annotations || min_ready {
            rs.spec.min_ready_seconds = d.spec.min_ready_seconds;
            w.rs = rs;
            w.dirty = true;
            self.touch(Target::New);
        }
    }

    /// `isScalingEvent`: an active ReplicaSet was last scaled for another `spec.replicas`.
    pub(crate) fn is_scaling_event(&self) -> bool {
        self.old
            .iter()
            .chain(self.new.as_ref())
            .filter(|w| w.replicas() > 0)
            .filter_map(|w| desired_replicas_annotation(&w.rs))
            .any(|desired| desired != self.v.replicas)
    }

    /// `scale`: sizes every active ReplicaSet for `spec.replicas` (see the module docs).
    pub(crate) fn scale_deployment(&mut self) {
        let replicas = self.v.replicas;
        let mut active: Vec<(Target, &ReplicaSet)> = self
            .targets()
            .filter_map(|t| self.work(t).map(|w| (t, &w.rs)))
            .filter(|(_, rs)| rs_replicas(rs) > 0)
            .collect();
        // FindActiveOrLatest: one active ReplicaSet (or none: the new one, else the newest
        // old one) takes everything.
        let only = match active.as_slice() {
            [(one, _)] => Some(*one),
            [] => self.new.as_ref().map(|_| Target::New).or_else(|| {
                (0..self.old.len())
                    .max_by(|a, b| by_creation(&self.old[*a].rs, &self.old[*b].rs))
                    .map(Target::Old)
            }),
            _ => None,
        };
        if let Some(t) = only {
            self.scale(t, replicas);
            return;
        }
        // IsSaturated: the new ReplicaSet is complete; old ones go to 0.
        if let Some(new) = self.new.as_ref()
            && new.replicas() == replicas
            && desired_replicas_annotation(&new.rs) == Some(replicas)
            && rs_available(&new.rs) == replicas
        {
            for i in 0..self.old.len() {
                if self.old[i].replicas() > 0 {
                    self.scale(Target::Old(i), 0);
                }
            }
            return;
        }
        if !matches!(self.v.strategy, Strategy::RollingUpdate { .. }) {
            return;
        }
        let total: i32 = active.iter().map(|(_, rs)| rs_replicas(rs)).sum();
        let allowed = if replicas > 0 {
            self.v.max_replicas()
        } else {
            0
        };
        let to_add = allowed - total;
        let status_replicas = self.d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        if to_add > 0 {
            active.sort_by(|a, b| by_size_newer(a.1, b.1));
        } else if to_add < 0 {
            active.sort_by(|a, b| by_size_older(a.1, b.1));
        }
        let mut added = 0;
        let mut sizes: Vec<(Target, i32)> = Vec::with_capacity(active.len());
        for (t, rs) in &active {
            let size = rs_replicas(rs);
            let proportion = get_proportion(
                size,
                max_replicas_annotation(rs),
                status_replicas,
                replicas,
                self.v.max_replicas(),
                to_add,
                added,
            );
            added += proportion;
            sizes.push((*t, size + proportion));
        }
        if let Some((_, first)) = sizes.first_mut()
            && to_add != 0
        {
            *first = (*first + to_add - added).max(0);
        }
        for (t, size) in sizes {
            // scaleReplicaSet: size and replica annotations, even when the size stays.
            self.set_scale(t, size);
        }
    }

    /// `cleanupDeployment`: old ReplicaSets beyond `revisionHistoryLimit`, lowest revision first,
    /// only those scaled to 0 with no pods left and their scale-down observed.
    pub(crate) fn cleanup(&mut self) {
        let limit = self
            .d
            .spec
            .revision_history_limit
            .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT);
        if limit == i32::MAX {
            return;
        }
        let mut cleanable: Vec<&Work> = self
            .old
            .iter()
            .filter(|w| w.rs.metadata.deletion_timestamp.is_none())
            .collect();
        let excess = cleanable.len().saturating_sub(limit.max(0) as usize);
        cleanable.sort_by(|a, b| by_revision(&a.rs, &b.rs));
        let deletes: Vec<(String, Option<String>)> = cleanable
            .into_iter()
            .take(excess)
            .filter(|w| {
                let observed =
                    w.rs.status
                        .as_ref()
                        .and_then(|s| s.observed_generation)
                        .unwrap_or(0);
                rs_replicas(&w.rs) == 0
                    && w.replicas() == 0
                    && rs_status_replicas(&w.rs) == 0
                    && w.rs.metadata.generation.unwrap_or(0) <= observed
            })
            .map(|w| (w.name().to_string(), w.rs.metadata.uid.clone()))
            .collect();
        for (name, uid) in deletes {
            self.deletes.push(super::Action::Delete { name, uid });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::{
        Action, plan,
        tests::{deleted, deployment, now, rolling, rs_of, scales},
    };
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use std::{collections::BTreeMap, sync::Arc};

    #[test]
    fn get_proportion_table() {
        // (size, max-replicas annotation, status.replicas, replicas, replicas+surge, to_add,
        //  added, expected)
        let table = [
            (10, Some(13), 13, 20, 23, 10, 0, 8),  // round(17.69) - 10
            (3, Some(13), 13, 20, 23, 10, 8, 2),   // round(5.31) - 3, capped at 2 left
            (3, Some(13), 13, 20, 23, 10, 9, 1),   // capped by what is left
            (10, Some(13), 13, 5, 6, -7, 0, -5),   // round(4.6) - 10 = -5
            (10, Some(13), 13, 1, 2, -11, -9, -2), // max(-8, -2): capped going down
            (4, None, 8, 16, 20, 12, 0, 6),        // no annotation: status.replicas
            (4, Some(8), 8, 0, 0, -4, 0, -4),      // to zero: all of it
            (0, Some(8), 8, 16, 20, 12, 0, 0),     // never from zero
            (4, Some(8), 8, 16, 20, 12, 12, 0),    // all distributed
            (5, Some(10), 10, 3, 3, -7, 0, -3),    // round(1.5) = 2 (half away from zero)
        ];
        for (i, (size, ann, status, replicas, max, to_add, added, want)) in
            table.into_iter().enumerate()
        {
            assert_eq!(
                get_proportion(size, ann, status, replicas, max, to_add, added),
                want,
                "case {i}"
            );
        }
    }

    fn annotated(rs: &Arc<ReplicaSet>, desired: i32, max: i32) -> Arc<ReplicaSet> {
        let mut rs = (**rs).clone();
        let a = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
        a.insert(
            super::super::util::DESIRED_REPLICAS_ANNOTATION.into(),
            desired.to_string(),
        );
        a.insert(
            super::super::util::MAX_REPLICAS_ANNOTATION.into(),
            max.to_string(),
        );
        Arc::new(rs)
    }

    #[test]
    fn scaling_mid_rollout_is_proportional() {
        // 10 replicas, maxSurge 3, maxUnavailable 0; a rollout stuck at old 10 / new 3 (new not
        // available). Scale to 20: +10 spread as 8 / 2 (the integration test's numbers).
        let d = deployment(20, "v2", rolling(IntOrString::Int(3), IntOrString::Int(0)));
        let old = annotated(&rs_of(&d, "v1", 10, 10, 10, 1), 10, 13);
        let new = annotated(&rs_of(&d, "v2", 3, 3, 0, 2), 10, 13);
        let p = plan(&d, &[old.clone(), new.clone()], &[], &now()).expect("plan");
        let (o, n) = (
            old.metadata.name.clone().expect("name"),
            new.metadata.name.clone().expect("name"),
        );
        assert_eq!(scales(&p), vec![(o.clone(), 10, 18), (n.clone(), 3, 5)]);
        for a in &p.actions {
            let Action::Update { rs, .. } = a else {
                panic!("{a:?}")
            };
            assert_eq!(desired_replicas_annotation(rs), Some(20));
            assert_eq!(max_replicas_annotation(rs), Some(23));
        }

        // Down to 5: allowed 8, -5 to remove, largest (then older) first: 10 → round(6.15) = 6
        // (-4), 3 → round(1.85) = 2 (-1).
        let d = deployment(5, "v2", rolling(IntOrString::Int(3), IntOrString::Int(0)));
        let p = plan(&d, &[old.clone(), new.clone()], &[], &now()).expect("plan");
        assert_eq!(scales(&p), vec![(o.clone(), 10, 6), (n.clone(), 3, 2)]);

        // Rounding leftovers go to the first (largest; newest on a tie when adding): three
        // ReplicaSets of 1 last scaled at max 3, now 3 + surge 1 = 4: each gets round(4/3) - 1
        // = 0, and the 1 left over goes to the newest.
        let d = deployment(3, "v3", rolling(IntOrString::Int(1), IntOrString::Int(0)));
        let a = annotated(&rs_of(&d, "v1", 1, 1, 1, 1), 2, 3);
        let b = annotated(&rs_of(&d, "v2", 1, 1, 1, 2), 2, 3);
        let c = annotated(&rs_of(&d, "v3", 1, 1, 0, 3), 2, 3);
        let p = plan(&d, &[a.clone(), b.clone(), c.clone()], &[], &now()).expect("plan");
        let name = |r: &Arc<ReplicaSet>| r.metadata.name.clone().expect("name");
        // Annotation-only updates (1 → 1) too, so the scaling event is over.
        assert_eq!(
            scales(&p),
            vec![(name(&c), 1, 2), (name(&b), 1, 1), (name(&a), 1, 1)],
            "{:?}",
            p.actions
        );
    }

    #[test]
    fn a_single_active_replica_set_takes_the_whole_scale() {
        let d = deployment(7, "v2", rolling(IntOrString::Int(3), IntOrString::Int(0)));
        let old = annotated(&rs_of(&d, "v1", 0, 0, 0, 1), 4, 7);
        let new = annotated(&rs_of(&d, "v2", 4, 4, 4, 2), 4, 7);
        let p = plan(&d, &[old, new.clone()], &[], &now()).expect("plan");
        assert_eq!(
            scales(&p),
            vec![(new.metadata.name.clone().expect("name"), 4, 7)]
        );
    }

    #[test]
    fn cleanup_keeps_the_limit_and_only_deletes_fully_scaled_down_ones() {
        let mut d = deployment(1, "v5", None);
        d.spec.revision_history_limit = Some(1);
        // Its scale-down is not observed by the ReplicaSet controller yet.
        let mut still_observing = (*rs_of(&d, "v2", 0, 0, 0, 2)).clone();
        still_observing.metadata.generation = Some(3);
        let rss = vec![
            rs_of(&d, "v1", 0, 0, 0, 1),
            Arc::new(still_observing),
            rs_of(&d, "v3", 0, 0, 0, 3),
            rs_of(&d, "v4", 0, 0, 0, 4),
            rs_of(&d, "v5", 1, 1, 1, 5),
        ];
        d.status = plan(&d, &rss, &[], &now()).expect("plan").status;
        let p = plan(&d, &rss, &[], &now()).expect("plan");
        // 4 old, limit 1: the 3 lowest revisions are candidates, v2 is not done yet; cleanup
        // waits for the Deployment's status to say the rollout is complete.
        assert_eq!(deleted(&p), vec!["rs-v1", "rs-v3"]);
    }
}
