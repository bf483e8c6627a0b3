//! `pkg/controller/deployment/recreate.go`: `rolloutRecreate`. Every old ReplicaSet is scaled
//! to 0 first (`scaleDownOldReplicaSetsForRecreate`); the new one is created and scaled up
//! (`scaleUpNewReplicaSetForRecreate`) only once no old pod runs (`oldPodsRunning`).

use k8s_openapi::api::core::v1::Pod;

use super::{Planner, Target, util::controller_of, util::rs_status_replicas};

impl Planner<'_> {
    /// `oldPodsRunning`: old ReplicaSets still report pods, or a pod of one is not finished.
    pub(crate) fn old_pods_running(&self, pods: &[&Pod]) -> bool {
        let old_uids: Vec<&str> = self
            .old
            .iter()
            .filter_map(|w| w.rs.metadata.uid.as_deref())
            .collect();
        self.old.iter().any(|w| rs_status_replicas(&w.rs) > 0)
            || pods.iter().any(|p| {
                controller_of(&p.metadata).is_some_and(|r| old_uids.contains(&r.uid.as_str()))
                    && !matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    )
            })
    }

    /// `rolloutRecreate` (scaling part). Returns true when something was scaled or the rollout
    /// waits for old pods.
    pub(crate) fn recreate(&mut self, hash: &str, pods: &[&Pod], new_revision: i64) -> bool {
        let mut scaled = false;
        for i in 0..self.old.len() {
            if self.old[i].replicas() > 0 {
                scaled |= self.scale(Target::Old(i), 0);
            }
        }
        if scaled {
            return true;
        }
        if self.old_pods_running(pods) {
            return true;
        }
        if self.new.is_none() {
            self.create_new(hash, self.v.replicas, new_revision);
            return false;
        }
        self.scale(Target::New, self.v.replicas)
    }
}
