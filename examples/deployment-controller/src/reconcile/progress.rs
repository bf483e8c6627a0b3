//! The Deployment's status and conditions: `calculateStatus` and `syncRolloutStatus`
//! (`pkg/controller/deployment/sync.go`, `progress.go`), `checkPausedConditions`
//! (`sync.go`), and the condition helpers of `deploymentutil`.
//!
//! Availability is the ReplicaSets' `status.availableReplicas` (pods Ready for at least
//! `minReadySeconds`, counted by the ReplicaSet controller); [`min_ready_requeue`] tells the
//! controller when the next Ready pod of the Deployment passes `minReadySeconds`, so it looks
//! again then without waiting for an event.

use std::time::Duration;

use k8s_openapi::{
    api::{
        apps::v1::{Deployment, DeploymentCondition, DeploymentStatus},
        core::v1::Pod,
    },
    apimachinery::pkg::apis::meta::v1::Time,
};

use super::{
    Work,
    util::{
        DEFAULT_PROGRESS_DEADLINE_SECONDS, Validated, deployment_replicas, max_unavailable,
        rs_ready, rs_status_replicas, terminating_replica_count,
    },
};

/// Condition types and reasons, as kube-controller-manager writes them.
pub mod reason {
    /// Condition type: enough pods are available.
    pub const AVAILABLE: &str = "Available";
    /// Condition type: the rollout moves (or finished).
    pub const PROGRESSING: &str = "Progressing";
    /// Available=True.
    pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
    /// Available=False.
    pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
    /// Progressing=True: this sync created the new ReplicaSet.
    pub const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
    /// Progressing=True: the new ReplicaSet existed and no condition did.
    pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
    /// Progressing=True: replicas moved since the last status.
    pub const RS_UPDATED: &str = "ReplicaSetUpdated";
    /// Progressing=True: the rollout is complete.
    pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
    /// Progressing=False: no progress within `progressDeadlineSeconds`.
    pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
    /// Progressing=Unknown: the Deployment is paused.
    pub const PAUSED: &str = "DeploymentPaused";
    /// Progressing=Unknown: the Deployment was resumed.
    pub const RESUMED: &str = "DeploymentResumed";
}

/// A condition of a status, by type (`GetDeploymentCondition`).
pub fn condition<'a>(s: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    s.conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_.as_deref() == Some(type_))
}

/// `NewDeploymentCondition`.
pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: &Time,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: Some(type_.into()),
        status: Some(status.into()),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    }
}

/// `SetDeploymentCondition`: same status and reason → unchanged; same status → the transition
/// time is kept.
pub fn set_condition(s: &mut DeploymentStatus, mut c: DeploymentCondition) {
    let type_ = c.type_.clone().unwrap_or_default();
    if let Some(cur) = condition(s, &type_) {
        if cur.status == c.status && cur.reason == c.reason {
            return;
        }
        if cur.status == c.status {
            c.last_transition_time = cur.last_transition_time.clone();
        }
    }
    remove_condition(s, &type_);
    s.conditions.get_or_insert_with(Vec::new).push(c);
}

/// `RemoveDeploymentCondition`.
pub fn remove_condition(s: &mut DeploymentStatus, type_: &str) {
    if let Some(cs) = s.conditions.as_mut() {
        cs.retain(|c| c.type_.as_deref() != Some(type_));
    }
}

/// `HasProgressDeadline`.
pub fn has_progress_deadline(d: &Deployment) -> bool {
    d.spec.progress_deadline_seconds != Some(i32::MAX)
}

/// client-go's `DeploymentComplete`.
pub fn deployment_complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let r = deployment_replicas(d);
    s.updated_replicas.unwrap_or(0) == r
        && s.replicas.unwrap_or(0) == r
        && s.available_replicas.unwrap_or(0) == r
        && s.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// True when the Deployment's (server-side) status says its latest rollout is done: observed,
/// fully updated and available, no old pods left.
pub fn rollout_complete(d: &Deployment) -> bool {
    d.status.as_ref().is_some_and(|s| deployment_complete(d, s))
}

/// `checkPausedConditions`: Progressing=Unknown `DeploymentPaused` when paused,
/// `DeploymentResumed` when resumed, never over a `ProgressDeadlineExceeded`.
pub fn check_paused_conditions(d: &Deployment, s: &mut DeploymentStatus, now: &Time) {
    if !has_progress_deadline(d) {
        return;
    }
    let cond = condition(s, reason::PROGRESSING);
    if cond.is_some_and(|c| c.reason.as_deref() == Some(reason::TIMED_OUT)) {
        return;
    }
    let paused_cond = cond.is_some_and(|c| c.reason.as_deref() == Some(reason::PAUSED));
    let paused = d.spec.paused.unwrap_or(false);
    if paused && !paused_cond {
        let c = new_condition(
            reason::PROGRESSING,
            "Unknown",
            reason::PAUSED,
            "Deployment is paused".into(),
            now,
        );
        set_condition(s, c);
    } else if !paused && paused_cond {
        let c = new_condition(
            reason::PROGRESSING,
            "Unknown",
            reason::RESUMED,
            "Deployment is resumed".into(),
            now,
        );
        set_condition(s, c);
    }
}

/// `calculateStatus`: counts from the ReplicaSets (spec replicas as planned, status as cached),
/// conditions from `base`, and the `Available` condition.
pub(crate) fn calculate_status(
    d: &Deployment,
    v: &Validated,
    base: &DeploymentStatus,
    new: Option<&Work>,
    old: &[Work],
    now: &Time,
) -> DeploymentStatus {
    let all = old.iter().chain(new);
    let total_spec: i32 = all.clone().map(Work::replicas).sum();
    let available: i32 = all.clone().map(Work::available).sum();
    let mut s = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(all.clone().map(|w| rs_status_replicas(&w.rs)).sum()),
        updated_replicas: Some(new.map_or(0, |w| rs_status_replicas(&w.rs))),
        ready_replicas: Some(all.clone().map(|w| rs_ready(&w.rs)).sum()),
        available_replicas: Some(available),
        unavailable_replicas: Some((total_spec - available).max(0)),
        collision_count: base.collision_count,
        conditions: base.conditions.clone(),
        // Written as kube 1.36 writes it (feature DeploymentReplicaSetTerminatingReplicas, on
        // since 1.35): from the ReplicaSets, never carried over from the old status.
        terminating_replicas: terminating_replica_count(all.clone().map(|w| &w.rs)),
    };
    if available >= v.replicas - max_unavailable(v.strategy, v.replicas) {
        let c = new_condition(
            reason::AVAILABLE,
            "True",
            reason::MINIMUM_REPLICAS_AVAILABLE,
            "Deployment has minimum availability.".into(),
            now,
        );
        set_condition(&mut s, c);
    } else {
        let c = new_condition(
            reason::AVAILABLE,
            "False",
            reason::MINIMUM_REPLICAS_UNAVAILABLE,
            "Deployment does not have minimum availability.".into(),
            now,
        );
        set_condition(&mut s, c);
    }
    s
}

/// `syncRolloutStatus`: [`calculate_status`] plus the `Progressing` condition; also when to look
/// again for the progress deadline (`requeueStuckDeployment`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn sync_rollout_status(
    d: &Deployment,
    v: &Validated,
    base: &DeploymentStatus,
    new: Option<&Work>,
    old: &[Work],
    new_rs_name: &str,
    now: &Time,
) -> (DeploymentStatus, Option<Duration>) {
    let mut s = calculate_status(d, v, base, new, old, now);
    if !has_progress_deadline(d) {
        remove_condition(&mut s, reason::PROGRESSING);
        return (s, None);
    }
    let deadline = d
        .spec
        .progress_deadline_seconds
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS);
    let current = condition(base, reason::PROGRESSING);
    let complete_before = s.replicas == s.updated_replicas
        && current.is_some_and(|c| c.reason.as_deref() == Some(reason::NEW_RS_AVAILABLE));
    if complete_before {
        return (s, None);
    }
    let old_replicas =
        |st: &DeploymentStatus| st.replicas.unwrap_or(0) - st.updated_replicas.unwrap_or(0);
    if deployment_complete(d, &s) {
        let c = new_condition(
            reason::PROGRESSING,
            "True",
            reason::NEW_RS_AVAILABLE,
            format!("ReplicaSet {new_rs_name:?} has successfully progressed."),
            now,
        );
        set_condition(&mut s, c);
        return (s, None);
    }
    // DeploymentProgressing: anything moved since the status the Deployment has.
    let progressed = s.updated_replicas.unwrap_or(0) > base.updated_replicas.unwrap_or(0)
        || old_replicas(&s) < old_replicas(base)
        || s.ready_replicas.unwrap_or(0) > base.ready_replicas.unwrap_or(0)
        || s.available_replicas.unwrap_or(0) > base.available_replicas.unwrap_or(0);
    if progressed {
        let mut c = new_condition(
            reason::PROGRESSING,
            "True",
            reason::RS_UPDATED,
            format!("ReplicaSet {new_rs_name:?} is progressing."),
            now,
        );
        if let Some(cur) = current
            && cur.status.as_deref() == Some("True")
        {
            c.last_transition_time = cur.last_transition_time.clone();
        }
        remove_condition(&mut s, reason::PROGRESSING);
        set_condition(&mut s, c);
        return (s, Some(Duration::from_secs(deadline.max(0) as u64)));
    }
    // DeploymentTimedOut: no progress for `deadline` seconds since the last update.
    let Some(cur) = condition(&s, reason::PROGRESSING).cloned() else {
        return (s, None);
    };
    match cur.reason.as_deref() {
        Some(reason::NEW_RS_AVAILABLE) | Some(reason::TIMED_OUT) => return (s, None),
        _ => {}
    }
    let Some(from) = cur.last_update_time.as_ref() else {
        return (s, None);
    };
    let elapsed = now.0.as_second() - from.0.as_second();
    if elapsed > i64::from(deadline) {
        let c = new_condition(
            reason::PROGRESSING,
            "False",
            reason::TIMED_OUT,
            format!("ReplicaSet {new_rs_name:?} has timed out progressing."),
            now,
        );
        set_condition(&mut s, c);
        (s, None)
    } else {
        // requeueStuckDeployment: look again when the deadline would pass.
        let left = (i64::from(deadline) - elapsed + 1).max(1) as u64;
        (s, Some(Duration::from_secs(left)))
    }
}

/// When the next of `pods` (the Deployment's) that is Ready but not yet available becomes
/// available: Ready for more than `minReadySeconds` (`podutil.IsPodAvailable`). None when
/// `minReadySeconds` is 0 or no pod is waiting.
pub fn min_ready_requeue(d: &Deployment, pods: &[&Pod], now: &Time) -> Option<Duration> {
    let min_ready = d.spec.min_ready_seconds.unwrap_or(0);
    if min_ready <= 0 {
        return None;
    }
    let min_ready = k8s_openapi::jiff::SignedDuration::from_secs(i64::from(min_ready));
    pods.iter()
        .filter_map(|p| {
            let c = p
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Ready" && c.status == "True")?;
            let since = c.last_transition_time.as_ref()?.0;
            let ready_for = now.0.duration_since(since);
            (ready_for <= min_ready).then(|| {
                // Strictly after the boundary, as upstream compares.
                Duration::try_from(min_ready - ready_for)
                    .unwrap_or(Duration::ZERO)
                    .saturating_add(Duration::from_millis(1))
            })
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::tests::{deployment, now};
    use k8s_openapi::{
        api::core::v1::{PodCondition, PodStatus},
        jiff::Timestamp,
    };

    fn pod(ready_at: Option<i64>) -> Pod {
        Pod {
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready_at.is_some() { "True" } else { "False" }.into(),
                    last_transition_time: ready_at
                        .map(|s| Time(Timestamp::from_second(s).expect("valid"))),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn min_ready_requeue_table() {
        let t = 1_700_000_000; // now()
        // (minReadySeconds, pods' Ready times, expected wait)
        let table: [(i32, Vec<Option<i64>>, Option<Duration>); 6] = [
            (0, vec![Some(t)], None),
            (5, vec![], None),
            (5, vec![None], None),
            (5, vec![Some(t - 10)], None),
            (5, vec![Some(t - 2)], Some(Duration::from_millis(3001))),
            (
                5,
                vec![Some(t - 1), Some(t - 4), None],
                Some(Duration::from_millis(1001)),
            ),
        ];
        for (i, (mrs, ready, want)) in table.into_iter().enumerate() {
            let mut d = deployment(1, "v1", None);
            d.spec.min_ready_seconds = Some(mrs);
            let pods: Vec<Pod> = ready.into_iter().map(pod).collect();
            let refs: Vec<&Pod> = pods.iter().collect();
            assert_eq!(min_ready_requeue(&d, &refs, &now()), want, "case {i}");
        }
    }

    #[test]
    fn paused_conditions_table() {
        // (paused, current Progressing reason, expected reason)
        let table = [
            (true, None, Some(reason::PAUSED)),
            (true, Some(reason::PAUSED), Some(reason::PAUSED)),
            (true, Some(reason::TIMED_OUT), Some(reason::TIMED_OUT)),
            (false, Some(reason::PAUSED), Some(reason::RESUMED)),
            (false, Some(reason::RS_UPDATED), Some(reason::RS_UPDATED)),
            (false, None, None),
        ];
        for (i, (paused, cur, want)) in table.into_iter().enumerate() {
            let mut d = deployment(1, "v1", None);
            d.spec.paused = Some(paused);
            let mut s = DeploymentStatus::default();
            if let Some(r) = cur {
                set_condition(
                    &mut s,
                    new_condition(reason::PROGRESSING, "True", r, String::new(), &now()),
                );
            }
            check_paused_conditions(&d, &mut s, &now());
            let got = condition(&s, reason::PROGRESSING).and_then(|c| c.reason.as_deref());
            assert_eq!(got, want, "case {i}");
        }
    }
}
