//! The deployment controller's reconcile logic, pure: given a Deployment, the ReplicaSets and
//! Pods of its namespace and the current time, [`plan`] returns what to do (create, scale or
//! delete ReplicaSets) and the status to write. No I/O, no clock, no runtime: every rule is
//! unit-tested below, and the controller ([`crate::controller`]) only executes plans.
//!
//! It follows kube-controller-manager's deployment controller (`pkg/controller/deployment`):
//! - the new ReplicaSet is the one whose pod template equals the Deployment's, ignoring the
//!   `pod-template-hash` label (`EqualIgnoreHash`); it is created as `<deployment>-<hash>` with
//!   the hash added to its selector, template and labels, and a controller ownerReference;
//! - `Recreate`: every old ReplicaSet is scaled to 0 first; the new one is created and scaled up
//!   only once no old pod runs;
//! - `RollingUpdate`: `maxSurge` / `maxUnavailable` (ints or percentages, default 25%/25%,
//!   surge rounded up, unavailable down, both 0 → unavailable 1) bound the new ReplicaSet's
//!   scale-up (`NewRSNewReplicas`) and the old ones' scale-down (`reconcileOldReplicaSets`:
//!   unhealthy replicas first, then oldest first); like client-go, one scaling phase per sync;
//! - status from the ReplicaSets' status (`calculateStatus`) with the `Available` and
//!   `Progressing` conditions (`syncRolloutStatus`), including `ProgressDeadlineExceeded`;
//! - old ReplicaSets at 0 beyond `revisionHistoryLimit` (default 10) are deleted.
//!
//! Not done (documented simplifications): proportional scaling of several active ReplicaSets
//! on a scale event mid-rollout (the rolling arithmetic converges instead), adoption of orphan
//! ReplicaSets matching the selector, rollback (`rollbackTo`), the Deployment's own revision
//! annotation, and scaling while paused.
//!
//! The pod-template hash: client-go's `ComputeHash` is FNV-32a over a `spew` dump of the Go
//! struct plus the collision count, rendered with `rand.SafeEncodeString`. A Go struct dump
//! cannot be reproduced in Rust, so [`compute_hash`] hashes the template's JSON (k8s-openapi
//! serialises fields in a fixed order and maps sorted, so the bytes are stable) and then does
//! exactly what client-go does: FNV-32a, collision count as 8 little-endian bytes, the decimal
//! string safe-encoded. Hashes are stable across runs and releases of this controller, but differ
//! from the ones kube-controller-manager computes for the same template.

use std::{cmp::Ordering, collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::{
    api::{
        apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetSpec},
        core::v1::{Pod, PodTemplateSpec},
    },
    apimachinery::pkg::{
        apis::meta::v1::{ObjectMeta, OwnerReference, Time},
        util::intstr::IntOrString,
    },
};
use kube::core::{Selector, SelectorExt};

/// The label (and selector key) that tells ReplicaSets of one Deployment apart.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
/// The revision of a ReplicaSet within its Deployment.
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
/// The Deployment's replicas when the ReplicaSet was last scaled.
pub const DESIRED_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/desired-replicas";
/// The Deployment's replicas plus maxSurge when the ReplicaSet was last scaled.
pub const MAX_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/max-replicas";
/// Old ReplicaSets kept for rollbacks when `revisionHistoryLimit` is unset.
pub const DEFAULT_REVISION_HISTORY_LIMIT: i32 = 10;
/// `progressDeadlineSeconds` when unset (the API server's default).
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;

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

/// A Deployment the controller cannot act on (what API validation would have rejected). The
/// controller logs it and skips the Deployment until it changes; it never panics on one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Deployment: {0}")]
pub struct InvalidDeployment(pub String);

fn invalid<T>(msg: impl Into<String>) -> Result<T, InvalidDeployment> {
    Err(InvalidDeployment(msg.into()))
}

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

/// What to do to the API.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create the new ReplicaSet.
    Create(ReplicaSet),
    /// Update a ReplicaSet (the cached object with `spec.replicas` and the replica annotations
    /// changed; its resourceVersion is the cached one, so a stale cache gets a 409).
    Scale {
        /// The updated object.
        rs: ReplicaSet,
        /// Replicas before.
        from: i32,
        /// Replicas after.
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
    /// The status to write through the status subresource; None when it is already current.
    pub status: Option<DeploymentStatus>,
    /// Sync again after this long even without events (progress-deadline check).
    pub requeue_after: Option<Duration>,
}

/// Replicas of a ReplicaSet's spec (defaults to 1, as the API does).
pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.replicas.unwrap_or(1)
}

fn rs_status_replicas(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map_or(0, |s| s.replicas)
}

fn rs_ready(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

fn rs_available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

/// Replicas of a Deployment's spec (defaults to 1).
pub fn deployment_replicas(d: &Deployment) -> i32 {
    d.spec.replicas.unwrap_or(1)
}

/// The controller ownerReference of an object, if any.
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

/// The pod-template hash (see the module docs for how it relates to client-go's).
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

fn without_hash(t: &PodTemplateSpec) -> PodTemplateSpec {
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

/// client-go's `EqualIgnoreHash`: the templates are equal once the hash label is removed.
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    without_hash(a) == without_hash(b)
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
        Some(other) => invalid(format!("unknown strategy type {other:?}")),
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
}

/// Checks what API validation would: identity, replicas, a non-empty selector that selects the
/// template's labels, a known strategy with valid bounds.
pub fn validate(d: &Deployment) -> Result<Validated, InvalidDeployment> {
    let meta = &d.metadata;
    let (Some(name), Some(namespace), Some(uid)) = (&meta.name, &meta.namespace, &meta.uid) else {
        return invalid("metadata.name, namespace and uid are required");
    };
    let spec = &d.spec;
    let replicas = deployment_replicas(d);
    if replicas < 0 {
        return invalid(format!("spec.replicas {replicas} is negative"));
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
    })
}

fn revision(rs: &ReplicaSet) -> i64 {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION_ANNOTATION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn by_age(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    a.metadata
        .creation_timestamp
        .cmp(&b.metadata.creation_timestamp)
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// The ReplicaSet the Deployment would create: `<name>-<hash>` with the hash in its selector,
/// template and labels, owned (controller) by the Deployment.
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
    let annotations = BTreeMap::from([
        (REVISION_ANNOTATION.to_string(), revision.to_string()),
        (
            DESIRED_REPLICAS_ANNOTATION.to_string(),
            v.replicas.to_string(),
        ),
        (
            MAX_REPLICAS_ANNOTATION.to_string(),
            max_replicas(v).to_string(),
        ),
    ]);
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(format!("{}-{hash}", v.name)),
            namespace: Some(v.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
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
    }
}

fn max_replicas(v: &Validated) -> i32 {
    match v.strategy {
        Strategy::RollingUpdate { max_surge, .. } => v.replicas.saturating_add(max_surge),
        Strategy::Recreate => v.replicas,
    }
}

/// One ReplicaSet during planning: the cached object and its spec replicas after this plan.
#[derive(Debug, Clone)]
struct Work {
    rs: ReplicaSet,
    replicas: i32,
    created: bool,
}

impl Work {
    fn new(rs: &ReplicaSet) -> Self {
        Work {
            replicas: rs_replicas(rs),
            rs: rs.clone(),
            created: false,
        }
    }
    fn name(&self) -> &str {
        self.rs.metadata.name.as_deref().unwrap_or_default()
    }
    fn available(&self) -> i32 {
        rs_available(&self.rs)
    }
}

struct Planner<'a> {
    d: &'a Deployment,
    v: Validated,
    new: Option<Work>,
    old: Vec<Work>,
    actions: Vec<Action>,
}

impl Planner<'_> {
    fn scale(&mut self, target: Target, to: i32) -> bool {
        let v = &self.v;
        let w = match target {
            Target::New => match self.new.as_mut() {
                Some(w) => w,
                None => return false,
            },
            Target::Old(i) => &mut self.old[i],
        };
        if w.replicas == to {
            return false;
        }
        let from = w.replicas;
        w.replicas = to;
        if w.created {
            // Not in the API yet: the Create carries the new size.
            if let Some(Action::Create(rs)) = self
                .actions
                .iter_mut()
                .find(|a| matches!(a, Action::Create(rs) if rs.metadata.name == w.rs.metadata.name))
            {
                rs.spec.replicas = Some(to);
            }
            return true;
        }
        // Scaled twice in one plan (unhealthy first, then available): one update.
        if let Some(Action::Scale { rs, to: t, .. }) = self.actions.iter_mut().find(
            |a| matches!(a, Action::Scale { rs, .. } if rs.metadata.name == w.rs.metadata.name),
        ) {
            *t = to;
            rs.spec.replicas = Some(to);
            return true;
        }
        let mut rs = w.rs.clone();
        rs.spec.replicas = Some(to);
        let ann = rs.metadata.annotations.get_or_insert_with(Default::default);
        ann.insert(DESIRED_REPLICAS_ANNOTATION.into(), v.replicas.to_string());
        ann.insert(MAX_REPLICAS_ANNOTATION.into(), max_replicas(v).to_string());
        self.actions.push(Action::Scale { rs, from, to });
        true
    }

    fn total_replicas(&self) -> i32 {
        self.old.iter().map(|w| w.replicas).sum::<i32>()
            + self.new.as_ref().map_or(0, |w| w.replicas)
    }

    /// client-go's `NewRSNewReplicas` for a RollingUpdate.
    fn rolling_new_replicas(&self, max_surge: i32) -> i32 {
        let new = self.new.as_ref().map_or(0, |w| w.replicas);
        let current = self.total_replicas();
        let max_total = self.v.replicas.saturating_add(max_surge);
        if current >= max_total {
            return new;
        }
        let up = (max_total - current).min((self.v.replicas - new).max(0));
        new + up
    }

    fn create_new(&mut self, hash: &str, replicas: i32) {
        let revision = self.old.iter().map(|w| revision(&w.rs)).max().unwrap_or(0) + 1;
        let rs = new_replica_set(self.d, &self.v, hash, replicas, revision);
        self.actions.push(Action::Create(rs.clone()));
        self.new = Some(Work {
            rs,
            replicas,
            created: true,
        });
    }

    /// client-go's `rolloutRolling` (scaling part). Returns true when something was scaled.
    fn rolling(&mut self, hash: &str, max_surge: i32, max_unavailable: i32) -> bool {
        if self.new.is_none() {
            let n = self.rolling_new_replicas(max_surge);
            self.create_new(hash, n);
        }
        // reconcileNewReplicaSet
        let new_replicas = self.new.as_ref().map_or(0, |w| w.replicas);
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
        let old_pods: i32 = self.old.iter().map(|w| w.replicas).sum();
        if old_pods == 0 {
            return false;
        }
        let all_pods = self.total_replicas();
        let min_available = self.v.replicas - max_unavailable.min(self.v.replicas);
        let new_unavailable = self
            .new
            .as_ref()
            .map_or(0, |w| (w.replicas - w.available()).max(0));
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return false;
        }
        let mut order: Vec<usize> = (0..self.old.len()).collect();
        order.sort_by(|a, b| by_age(&self.old[*a].rs, &self.old[*b].rs));
        // cleanupUnhealthyReplicas: old replicas that are not available go first.
        let mut scaled = false;
        let mut total = 0;
        for &i in &order {
            if total >= max_scaled_down {
                break;
            }
            let w = &self.old[i];
            let unhealthy = (w.replicas - w.available()).max(0);
            if w.replicas == 0 || unhealthy == 0 {
                continue;
            }
            let down = (max_scaled_down - total).min(unhealthy);
            let to = w.replicas - down;
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
                if w.replicas == 0 {
                    continue;
                }
                let down = w.replicas.min(budget - total);
                let to = w.replicas - down;
                scaled |= self.scale(Target::Old(i), to);
                total += down;
            }
        }
        scaled
    }

    /// client-go's `rolloutRecreate` (scaling part). Returns true when something was scaled or
    /// the rollout waits for old pods.
    fn recreate(&mut self, hash: &str, pods: &[&Pod]) -> bool {
        let mut scaled = false;
        for i in 0..self.old.len() {
            if self.old[i].replicas > 0 {
                scaled |= self.scale(Target::Old(i), 0);
            }
        }
        if scaled {
            return true;
        }
        // oldPodsRunning: old ReplicaSets still report pods, or a pod of one is not finished.
        let old_uids: Vec<&str> = self
            .old
            .iter()
            .filter_map(|w| w.rs.metadata.uid.as_deref())
            .collect();
        let old_running = self.old.iter().any(|w| rs_status_replicas(&w.rs) > 0)
            || pods.iter().any(|p| {
                controller_of(&p.metadata).is_some_and(|r| old_uids.contains(&r.uid.as_str()))
                    && !matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    )
            });
        if old_running {
            return true;
        }
        if self.new.is_none() {
            self.create_new(hash, self.v.replicas);
            return false;
        }
        self.scale(Target::New, self.v.replicas)
    }

    /// client-go's `cleanupDeployment`: old ReplicaSets at 0 beyond the history limit, oldest
    /// revision first.
    fn cleanup(&mut self) {
        let limit = self
            .d
            .spec
            .revision_history_limit
            .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT)
            .max(0);
        let mut cleanable: Vec<&Work> = self
            .old
            .iter()
            .filter(|w| w.rs.metadata.deletion_timestamp.is_none())
            .collect();
        let excess = cleanable.len().saturating_sub(limit as usize);
        cleanable.sort_by(|a, b| {
            revision(&a.rs)
                .cmp(&revision(&b.rs))
                .then_with(|| by_age(&a.rs, &b.rs))
        });
        let deletes: Vec<Action> = cleanable
            .into_iter()
            .take(excess)
            .filter(|w| w.replicas == 0 && rs_status_replicas(&w.rs) == 0)
            .map(|w| Action::Delete {
                name: w.name().to_string(),
                uid: w.rs.metadata.uid.clone(),
            })
            .collect();
        self.actions.extend(deletes);
    }
}

#[derive(Clone, Copy)]
enum Target {
    New,
    Old(usize),
}

fn condition<'a>(s: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    s.conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_.as_deref() == Some(type_))
}

fn new_condition(
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

/// client-go's `SetDeploymentCondition`: same status and reason → unchanged; same status → the
/// transition time is kept.
fn set_condition(s: &mut DeploymentStatus, mut c: DeploymentCondition) {
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

fn remove_condition(s: &mut DeploymentStatus, type_: &str) {
    if let Some(cs) = s.conditions.as_mut() {
        cs.retain(|c| c.type_.as_deref() != Some(type_));
    }
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

/// The status `calculateStatus` + `syncRolloutStatus` would write.
#[allow(clippy::too_many_arguments)]
fn compute_status(
    d: &Deployment,
    v: &Validated,
    base: &DeploymentStatus,
    new: Option<&Work>,
    old: &[Work],
    new_rs_name: &str,
    paused: bool,
    now: &Time,
) -> (DeploymentStatus, Option<Duration>) {
    let all = old.iter().chain(new);
    let total_spec: i32 = all.clone().map(|w| w.replicas).sum();
    let available: i32 = all.clone().map(Work::available).sum();
    let mut s = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(all.clone().map(|w| rs_status_replicas(&w.rs)).sum()),
        updated_replicas: Some(new.map_or(0, |w| rs_status_replicas(&w.rs))),
        ready_replicas: Some(all.map(|w| rs_ready(&w.rs)).sum()),
        available_replicas: Some(available),
        unavailable_replicas: Some((total_spec - available).max(0)),
        collision_count: base.collision_count,
        conditions: base.conditions.clone(),
        terminating_replicas: base.terminating_replicas,
    };
    if available >= v.replicas - max_unavailable(v.strategy, v.replicas) {
        set_condition(
            &mut s,
            new_condition(
                reason::AVAILABLE,
                "True",
                reason::MINIMUM_REPLICAS_AVAILABLE,
                "Deployment has minimum availability.".into(),
                now,
            ),
        );
    } else {
        set_condition(
            &mut s,
            new_condition(
                reason::AVAILABLE,
                "False",
                reason::MINIMUM_REPLICAS_UNAVAILABLE,
                "Deployment does not have minimum availability.".into(),
                now,
            ),
        );
    }
    let progressing = condition(base, reason::PROGRESSING);
    let paused_cond = progressing.is_some_and(|c| c.reason.as_deref() == Some(reason::PAUSED));
    if paused {
        if !paused_cond {
            set_condition(
                &mut s,
                new_condition(
                    reason::PROGRESSING,
                    "Unknown",
                    reason::PAUSED,
                    "Deployment is paused".into(),
                    now,
                ),
            );
        }
        return (s, None);
    }
    if paused_cond {
        set_condition(
            &mut s,
            new_condition(
                reason::PROGRESSING,
                "Unknown",
                reason::RESUMED,
                "Deployment is resumed".into(),
                now,
            ),
        );
        return (s, None);
    }
    let deadline = d
        .spec
        .progress_deadline_seconds
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS);
    if deadline == i32::MAX {
        remove_condition(&mut s, reason::PROGRESSING);
        return (s, None);
    }
    let complete_before = s.replicas == s.updated_replicas
        && progressing.is_some_and(|c| c.reason.as_deref() == Some(reason::NEW_RS_AVAILABLE));
    if complete_before {
        return (s, None);
    }
    let old_replicas =
        |st: &DeploymentStatus| st.replicas.unwrap_or(0) - st.updated_replicas.unwrap_or(0);
    let current = d.status.clone().unwrap_or_default();
    if deployment_complete(d, &s) {
        set_condition(
            &mut s,
            new_condition(
                reason::PROGRESSING,
                "True",
                reason::NEW_RS_AVAILABLE,
                format!("ReplicaSet {new_rs_name:?} has successfully progressed."),
                now,
            ),
        );
        return (s, None);
    }
    let progressed = s.updated_replicas.unwrap_or(0) > current.updated_replicas.unwrap_or(0)
        || old_replicas(&s) < old_replicas(&current)
        || s.ready_replicas.unwrap_or(0) > current.ready_replicas.unwrap_or(0)
        || s.available_replicas.unwrap_or(0) > current.available_replicas.unwrap_or(0);
    if progressed {
        let mut c = new_condition(
            reason::PROGRESSING,
            "True",
            reason::RS_UPDATED,
            format!("ReplicaSet {new_rs_name:?} is progressing."),
            now,
        );
        if let Some(cur) = progressing
            && cur.status.as_deref() == Some("True")
        {
            c.last_transition_time = cur.last_transition_time.clone();
        }
        remove_condition(&mut s, reason::PROGRESSING);
        set_condition(&mut s, c);
        return (s, Some(Duration::from_secs(deadline.max(0) as u64)));
    }
    // DeploymentTimedOut: no progress for `deadline` seconds since the last update.
    let Some(cur) = progressing else {
        return (s, None);
    };
    if cur.reason.as_deref() == Some(reason::TIMED_OUT) {
        return (s, None);
    }
    let Some(from) = cur.last_update_time.as_ref() else {
        return (s, None);
    };
    let elapsed = now.0.as_second() - from.0.as_second();
    if elapsed > i64::from(deadline) {
        set_condition(
            &mut s,
            new_condition(
                reason::PROGRESSING,
                "False",
                reason::TIMED_OUT,
                format!("ReplicaSet {new_rs_name:?} has timed out progressing."),
                now,
            ),
        );
        (s, None)
    } else {
        // client-go's requeueStuckDeployment: look again when the deadline would pass.
        let left = (i64::from(deadline) - elapsed + 1).max(1) as u64;
        (s, Some(Duration::from_secs(left)))
    }
}

/// Reconciles one Deployment: `replica_sets` and `pods` may hold anything of its namespace (only
/// the ReplicaSets it controls, and their pods, are considered).
pub fn plan(
    d: &Deployment,
    replica_sets: &[Arc<ReplicaSet>],
    pods: &[Arc<Pod>],
    now: &Time,
) -> Result<Plan, InvalidDeployment> {
    let v = validate(d)?;
    let spec = d.spec.clone();
    let base = d.status.clone().unwrap_or_default();
    let hash = compute_hash(&spec.template, base.collision_count);
    let new_rs_name = format!("{}-{hash}", v.name);

    let mut owned: Vec<&ReplicaSet> = replica_sets
        .iter()
        .map(|rs| &**rs)
        .filter(|rs| is_controlled_by(&rs.metadata, &v.uid))
        .collect();
    owned.sort_by(|a, b| by_age(a, b));
    let new_idx = owned.iter().position(|rs| {
        rs.spec
            .template
            .as_ref()
            .is_some_and(|t| equal_ignore_hash(t, &spec.template))
    });
    let new = new_idx.map(|i| Work::new(owned[i]));
    let old: Vec<Work> = owned
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != new_idx)
        .map(|(_, rs)| Work::new(rs))
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

    let found_existing = new.is_some();
    let mut p = Planner {
        d,
        v,
        new,
        old,
        actions: Vec::new(),
    };
    let paused = spec.paused.unwrap_or(false);
    let deleting = d.metadata.deletion_timestamp.is_some();
    if !paused && !deleting {
        let scaled = match p.v.strategy {
            Strategy::Recreate => p.recreate(&hash, &pods),
            Strategy::RollingUpdate {
                max_surge,
                max_unavailable,
            } => p.rolling(&hash, max_surge, max_unavailable),
        };
        let probe = compute_status(
            d,
            &p.v,
            &base,
            p.new.as_ref(),
            &p.old,
            &new_rs_name,
            false,
            now,
        )
        .0;
        if !scaled && deployment_complete(d, &probe) {
            p.cleanup();
        }
    }

    // getNewReplicaSet's conditions on the current status, before the rollout's.
    let mut base = base;
    let has_deadline = spec.progress_deadline_seconds != Some(i32::MAX);
    let created = p.new.as_ref().is_some_and(|w| w.created);
    if has_deadline && !paused {
        if created {
            set_condition(
                &mut base,
                new_condition(
                    reason::PROGRESSING,
                    "True",
                    reason::NEW_RS_CREATED,
                    format!("Created new replica set {new_rs_name:?}"),
                    now,
                ),
            );
        } else if found_existing && condition(&base, reason::PROGRESSING).is_none() {
            set_condition(
                &mut base,
                new_condition(
                    reason::PROGRESSING,
                    "True",
                    reason::FOUND_NEW_RS,
                    format!("Found new replica set {new_rs_name:?}"),
                    now,
                ),
            );
        }
    }
    let name = p
        .new
        .as_ref()
        .map_or(new_rs_name.clone(), |w| w.name().to_string());
    let (status, requeue_after) =
        compute_status(d, &p.v, &base, p.new.as_ref(), &p.old, &name, paused, now);
    let current = d.status.clone().unwrap_or_default();
    Ok(Plan {
        hash,
        new_rs_name: name,
        actions: p.actions,
        status: (status != current).then_some(status),
        requeue_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::{
        api::{
            apps::v1::{
                DeploymentSpec, DeploymentStrategy, ReplicaSetStatus, RollingUpdateDeployment,
            },
            core::v1::{Container, PodSpec},
        },
        apimachinery::pkg::apis::meta::v1::LabelSelector,
        jiff::Timestamp,
    };

    fn now() -> Time {
        Time(Timestamp::from_second(1_700_000_000).expect("valid"))
    }

    fn template(image: &str) -> PodTemplateSpec {
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

    fn deployment(replicas: i32, image: &str, strategy: Option<DeploymentStrategy>) -> Deployment {
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

    fn rolling(surge: IntOrString, unavailable: IntOrString) -> Option<DeploymentStrategy> {
        Some(DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_surge: Some(surge),
                max_unavailable: Some(unavailable),
            }),
        })
    }

    fn recreate() -> Option<DeploymentStrategy> {
        Some(DeploymentStrategy {
            type_: Some("Recreate".into()),
            rolling_update: None,
        })
    }

    /// A ReplicaSet of `d` as the API would hold it: spec replicas, and `available` of them
    /// running and available.
    fn rs_of(
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

    fn scales(p: &Plan) -> Vec<(String, i32, i32)> {
        p.actions
            .iter()
            .filter_map(|a| match a {
                Action::Scale { rs, from, to } => {
                    Some((rs.metadata.name.clone().unwrap_or_default(), *from, *to))
                }
                _ => None,
            })
            .collect()
    }

    fn created(p: &Plan) -> Option<(String, i32)> {
        p.actions.iter().find_map(|a| match a {
            Action::Create(rs) => Some((rs.metadata.name.clone()?, rs_replicas(rs))),
            _ => None,
        })
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
        d.status = Some(s);
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
        let Action::Scale { rs: updated, .. } = &p.actions[0] else {
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
        let deleted: Vec<&str> = p
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Delete { uid, .. } => uid.as_deref(),
                _ => None,
            })
            .collect();
        assert_eq!(deleted, vec!["rs-v1", "rs-v2"]);
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
}
