//! `pkg/controller/deployment/rolling.go`: `rolloutRolling`. `maxSurge` / `maxUnavailable`
//! bound the new ReplicaSet's scale-up (`NewRSNewReplicas`, `reconcileNewReplicaSet`) and the
//! old ones' scale-down (`reconcileOldReplicaSets`: unhealthy replicas first,
//! `cleanupUnhealthyReplicas`, then oldest first, `scaleDownOldReplicaSetsForRollingUpdate`);
//! like upstream, one scaling phase per sync. Availability is the ReplicaSets'
//! `availableReplicas`, so `minReadySeconds` holds a rollout back.

use super::{Planner, Target, Work, util::by_creation};

impl Planner<'_> {
    /// client-go's `NewRSNewReplicas` for a RollingUpdate.
    pub(crate) fn rolling_new_replicas(&self, max_surge: i32) -> i32 {
        let new = self.new.as_ref().map_or(0, Work::replicas);
        let current = self.total_replicas();
        let max_total = self.v.replicas.saturating_add(max_surge);
        if current >= max_total {
            return new;
        }
        let up = (max_total - current).min((self.v.replicas - new).max(0));
        new + up
    }

    /// `rolloutRolling` (scaling part). Returns true when something was scaled.
    pub(crate) fn rolling(
        &mut self,
        hash: &str,
        max_surge: i32,
        max_unavailable: i32,
        new_revision: i64,
    ) -> bool {
        if self.new.is_none() {
            let n = self.rolling_new_replicas(max_surge);
            self.create_new(hash, n, new_revision);
        }
        // reconcileNewReplicaSet
        let new_replicas = self.new.as_ref().map_or(0, Work::replicas);
        if new_replicas != self.v.replicas {
            let to = if new_replicas > self.v.replicas {
                self.v.replicas
            } else {
                self.rolling_new_replicas(max_surge)
            };
            if self.scale(Target::New, to) {
                return true;
            }
        }
        // reconcileOldReplicaSets
        let old_pods: i32 = self.old.iter().map(Work::replicas).sum();
        if old_pods == 0 {
            return false;
        }
        let all_pods = self.total_replicas();
        let min_available = self.v.replicas - max_unavailable.min(self.v.replicas);
        let new_unavailable = self
            .new
            .as_ref()
            .map_or(0, |w| (w.replicas() - w.available()).max(0));
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return false;
        }
        let mut order: Vec<usize> = (0..self.old.len()).collect();
        order.sort_by(|a, b| by_creation(&self.old[*a].rs, &self.old[*b].rs));
        // cleanupUnhealthyReplicas: old replicas that are not available go first.
        let mut scaled = false;
        let mut total = 0;
        for &i in &order {
            if total >= max_scaled_down {
                break;
            }
            let w = &self.old[i];
            let unhealthy = (w.replicas() - w.available()).max(0);
            if w.replicas() == 0 || unhealthy == 0 {
                continue;
            }
            let down = (max_scaled_down - total).min(unhealthy);
            let to = w.replicas() - down;
            scaled |= self.scale(Target::Old(i), to);
            total += down;
        }
        // scaleDownOldReplicaSetsForRollingUpdate: then available ones, oldest first.
        let available: i32 = self.old.iter().map(Work::available).sum::<i32>()
            + self.new.as_ref().map_or(0, Work::available);
        if available > min_available {
            let budget = available - min_available;
            let mut total = 0;
            for &i in &order {
                if total >= budget {
                    break;
                }
                let w = &self.old[i];
                if w.replicas() == 0 {
                    continue;
                }
                let down = w.replicas().min(budget - total);
                let to = w.replicas() - down;
                scaled |= self.scale(Target::Old(i), to);
                total += down;
            }
        }
        scaled
    }
}
