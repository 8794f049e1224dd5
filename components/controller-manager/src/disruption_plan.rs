//! The disruption controller's decisions, pure (upstream's pkg/controller/disruption): which pods a
//! PodDisruptionBudget selects, how many it expects (the pods, or for a percentage the scale of
//! their controllers), how many must stay healthy, how many are, which evictions it still waits to
//! see (`disruptedPods`, forgotten after two minutes), and the status — disruptionsAllowed, the
//! DisruptionAllowed condition, observedGeneration — or the fail-safe status when that fails.
//! Also the stale DisruptionTarget condition an eviction left on a pod that was never deleted.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::pods::{controller_ref, is_ready};
use crate::selector;

/// Upstream's DeletionTimeout: how long an eviction's entry in `disruptedPods` keeps the pod from
/// counting as healthy while its deletion is on the way.
pub const DELETION_TIMEOUT: SignedDuration = SignedDuration::from_secs(120);
/// Upstream's stalePodDisruptionTimeout: a DisruptionTarget condition on a pod that is still not
/// being deleted after this long is reset to False.
pub const STALE_POD_DISRUPTION_TIMEOUT: SignedDuration = SignedDuration::from_secs(120);

pub const CONDITION: &str = "DisruptionAllowed";
pub const SUFFICIENT_PODS: &str = "SufficientPods";
pub const INSUFFICIENT_PODS: &str = "InsufficientPods";
pub const SYNC_FAILED: &str = "SyncFailed";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A pod's controllerRef names nothing any finder knows (or it is gone).
    #[error("found no controllers for pod {0:?}")]
    NoControllers(String),
    /// Looking a controller up failed (the API, or a kind without a scale subresource).
    #[error("{0}")]
    Lookup(String),
    #[error("invalid value for IntOrString: invalid type: string is not a percentage")]
    NotPercent,
}

/// The controller a pod's controllerRef leads to and its scale; for a ReplicaSet a Deployment
/// manages, the Deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerScale {
    pub uid: String,
    pub replicas: i32,
}

/// The pods' controllerRef UIDs → their controller (None: no finder found one).
pub type Owners = HashMap<String, Option<ControllerScale>>;

/// The new status and what else the sync has to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub status: PodDisruptionBudgetStatus,
    /// The stored status differs (otherwise nothing is written, as upstream).
    pub write: bool,
    /// When the earliest disruptedPods entry expires: sync again then.
    pub recheck_at: Option<Timestamp>,
    /// Selected pods without a controllerRef (upstream warns: percentages cannot count them).
    pub unmanaged: Vec<String>,
    /// Pods an eviction was approved for that were not deleted in time.
    pub not_deleted: Vec<String>,
}

/// The pods a budget selects (policy/v1: an empty selector selects every pod of the namespace,
/// a missing one none).
pub fn selects(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    pdb.metadata.namespace == pod.metadata.namespace
        && selector::matches(
            pdb.spec.as_ref().and_then(|s| s.selector.as_ref()),
            pod.metadata.labels.as_ref(),
        )
}

/// A percentage, or maxUnavailable of any kind, is counted against the controllers' scale.
pub fn needs_scale(pdb: &PodDisruptionBudget) -> bool {
    let spec = pdb.spec.as_ref();
    spec.is_some_and(|s| {
        matches!(s.min_available, Some(IntOrString::String(_))) || s.max_unavailable.is_some()
    })
}

/// Upstream's GetScaledValueFromIntOrPercent, rounding up.
fn scaled(v: &IntOrString, total: i32) -> Result<i32, PlanError> {
    match v {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let digits = s.strip_suffix('%').ok_or(PlanError::NotPercent)?;
            let p: i64 = digits.parse().map_err(|_| PlanError::NotPercent)?;
            Ok(((p * total as i64 + 99) / 100) as i32)
        }
    }
}

/// expectedPods and the unmanaged pods: the pods themselves, or the sum of their controllers'
/// scales (each controller once).
fn expected(
    pdb: &PodDisruptionBudget,
    pods: &[&Pod],
    owners: &Owners,
) -> Result<(i32, Vec<String>), PlanError> {
    if !needs_scale(pdb) {
        return Ok((pods.len() as i32, Vec::new()));
    }
    let mut scales: HashMap<&str, i32> = HashMap::new();
    let mut unmanaged = Vec::new();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(r) = controller_ref(&pod.metadata) else {
            unmanaged.push(name);
            continue;
        };
        match owners.get(&r.uid) {
            Some(Some(c)) => {
                scales.insert(c.uid.as_str(), c.replicas);
            }
            _ => return Err(PlanError::NoControllers(name)),
        }
    }
    Ok((scales.values().sum(), unmanaged))
}

fn desired_healthy(pdb: &PodDisruptionBudget, expected: i32) -> Result<i32, PlanError> {
    let spec = pdb.spec.as_ref();
    if let Some(max) = spec.and_then(|s| s.max_unavailable.as_ref()) {
        return Ok((expected - scaled(max, expected)?).max(0));
    }
    match spec.and_then(|s| s.min_available.as_ref()) {
        Some(min) => scaled(min, expected),
        None => Ok(0),
    }
}

/// upstream's buildDisruptedPodMap: entries of pods still there and not yet being deleted, until
/// DELETION_TIMEOUT after their eviction; the earliest expiry; and the pods whose time ran out.
fn disrupted_pods(
    pdb: &PodDisruptionBudget,
    pods: &[&Pod],
    now: Timestamp,
) -> (BTreeMap<String, Time>, Option<Timestamp>, Vec<String>) {
    let mut kept = BTreeMap::new();
    let mut recheck: Option<Timestamp> = None;
    let mut expired = Vec::new();
    let Some(recorded) = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref()) else {
        return (kept, recheck, expired);
    };
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(at) = recorded.get(&name) else {
            continue;
        };
        let expires = at.0 + DELETION_TIMEOUT;
        if expires < now {
            expired.push(name);
        } else {
            recheck = Some(recheck.map_or(expires, |r| r.min(expires)));
            kept.insert(name, at.clone());
        }
    }
    (kept, recheck, expired)
}

/// Upstream's isPodHealthy: Ready, not being deleted, and not just approved for eviction.
fn healthy(pod: &Pod, disrupted: &BTreeMap<String, Time>, now: Timestamp) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    if disrupted
        .get(name)
        .is_some_and(|at| at.0 + DELETION_TIMEOUT > now)
    {
        return false;
    }
    is_ready(pod)
}

/// metav1 SetStatusCondition: a changed status moves lastTransitionTime; reason, message and
/// observedGeneration always follow.
fn set_condition(conditions: &mut Vec<Condition>, new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(c) => {
            if c.status != new.status {
                c.status = new.status;
                c.last_transition_time = new.last_transition_time;
            }
            c.reason = new.reason;
            c.message = new.message;
            c.observed_generation = new.observed_generation;
        }
        None => conditions.push(new),
    }
}

fn condition(
    status: &str,
    reason: &str,
    message: &str,
    generation: i64,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: CONDITION.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: Some(generation),
        last_transition_time: Time(now),
    }
}

/// Upstream's UpdateDisruptionAllowedCondition.
fn with_allowed_condition(status: &mut PodDisruptionBudgetStatus, now: Timestamp) {
    let generation = status.observed_generation.unwrap_or(0);
    let new = if status.disruptions_allowed > 0 {
        condition("True", SUFFICIENT_PODS, "", generation, now)
    } else {
        condition("False", INSUFFICIENT_PODS, "", generation, now)
    };
    let mut conditions = status.conditions.take().unwrap_or_default();
    set_condition(&mut conditions, new);
    status.conditions = Some(conditions);
}

/// Upstream's ConditionsAreUpToDate.
fn conditions_up_to_date(pdb: &PodDisruptionBudget) -> bool {
    let Some(status) = pdb.status.as_ref() else {
        return false;
    };
    let Some(c) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == CONDITION)
    else {
        return false;
    };
    if status.observed_generation != pdb.metadata.generation {
        return false;
    }
    if status.disruptions_allowed > 0 {
        c.status == "True" && c.reason == SUFFICIENT_PODS
    } else {
        c.status == "False" && c.reason == INSUFFICIENT_PODS
    }
}

/// The status for the selected `pods` (upstream's trySync + updatePdbStatus).
pub fn plan(
    pdb: &PodDisruptionBudget,
    pods: &[&Pod],
    owners: &Owners,
    now: Timestamp,
) -> Result<Plan, PlanError> {
    let (expected, unmanaged) = expected(pdb, pods, owners)?;
    let desired = desired_healthy(pdb, expected)?;
    let (disrupted, recheck_at, not_deleted) = disrupted_pods(pdb, pods, now);
    let current = pods.iter().filter(|p| healthy(p, &disrupted, now)).count() as i32;
    // expectedPods must be positive: a budget that matched nothing yet stays safe until this
    // controller has seen its first pods.
    let allowed = if expected <= 0 {
        0
    } else {
        (current - desired).max(0)
    };
    let old = pdb.status.clone().unwrap_or_default();
    let disrupted = (!disrupted.is_empty()).then_some(disrupted);
    let unchanged = old.current_healthy == current
        && old.desired_healthy == desired
        && old.expected_pods == expected
        && old.disruptions_allowed == allowed
        && old.disrupted_pods.clone().unwrap_or_default() == disrupted.clone().unwrap_or_default()
        && old.observed_generation == pdb.metadata.generation
        && conditions_up_to_date(pdb);
    let mut status = PodDisruptionBudgetStatus {
        current_healthy: current,
        desired_healthy: desired,
        expected_pods: expected,
        disruptions_allowed: allowed,
        disrupted_pods: disrupted,
        observed_generation: pdb.metadata.generation,
        conditions: old.conditions.clone(),
    };
    if !unchanged {
        with_allowed_condition(&mut status, now);
    }
    Ok(Plan {
        write: !unchanged,
        status: if unchanged { old } else { status },
        recheck_at,
        unmanaged,
        not_deleted,
    })
}

/// Upstream's failSafe: when the status cannot be computed, at least allow no disruption, and
/// say why in the condition (observedGeneration stays, so evictions see the budget as stale).
pub fn fail_safe(
    pdb: &PodDisruptionBudget,
    error: &str,
    now: Timestamp,
) -> PodDisruptionBudgetStatus {
    let mut status = pdb.status.clone().unwrap_or_default();
    status.disruptions_allowed = 0;
    let generation = status.observed_generation.unwrap_or(0);
    let mut conditions = status.conditions.take().unwrap_or_default();
    set_condition(
        &mut conditions,
        condition("False", SYNC_FAILED, error, generation, now),
    );
    status.conditions = Some(conditions);
    status
}

/// The distinct controllerRef UIDs whose controllers a plan needs (none when counting pods).
pub fn controller_refs_to_resolve(
    pdb: &PodDisruptionBudget,
    pods: &[&Pod],
) -> Vec<(String, String, String, String)> {
    if !needs_scale(pdb) {
        return Vec::new();
    }
    let mut seen = HashSet::new();
    pods.iter()
        .filter_map(|p| controller_ref(&p.metadata))
        .filter(|r| seen.insert(r.uid.clone()))
        .map(|r| {
            (
                r.api_version.clone(),
                r.kind.clone(),
                r.name.clone(),
                r.uid.clone(),
            )
        })
        .collect()
}

fn disruption_target(pod: &Pod) -> Option<&PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionTarget")
}

/// Upstream's nonTerminatingPodHasStaleDisruptionCondition: how long until a DisruptionTarget
/// condition that no deletion followed is stale (zero: now). The kubelet's own conditions and
/// those of finished pods never are.
pub fn stale_disruption_target(pod: &Pod, now: Timestamp) -> Option<SignedDuration> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let c = disruption_target(pod)?;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if c.status != "True"
        || c.reason.as_deref() == Some("TerminationByKubelet")
        || matches!(phase, Some("Succeeded" | "Failed"))
    {
        return None;
    }
    let since = c.last_transition_time.as_ref().map_or(now, |t| t.0);
    Some((STALE_POD_DISRUPTION_TIMEOUT - now.duration_since(since)).max(SignedDuration::ZERO))
}

/// The pod's conditions with DisruptionTarget reset to False (upstream's UpdatePodCondition with
/// a bare condition: reason and message go, the transition time moves).
pub fn cleared_disruption_target(pod: &Pod, now: Timestamp) -> Vec<PodCondition> {
    let mut conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    for c in conditions
        .iter_mut()
        .filter(|c| c.type_ == "DisruptionTarget")
    {
        *c = PodCondition {
            type_: "DisruptionTarget".into(),
            status: "False".into(),
            last_transition_time: Some(Time(now)),
            ..Default::default()
        };
    }
    conditions
}

#[cfg(test)]
#[path = "disruption_plan_tests.rs"]
mod tests;
