//! What PodDisruptionBudgets say about one eviction (upstream's pkg/registry/core/pod/storage/
//! eviction.go decisions), as pure functions over JSON so every branch is tested without a server:
//! which pods skip the budgets, which budgets cover a pod, whether an unhealthy pod may go without
//! spending a disruption, and the check-and-decrement of `status.disruptionsAllowed` that the
//! handler stores with a compare-and-swap. Errors carry upstream's codes, messages and causes.

use serde_json::{json, Value};

use crate::status::ApiError;

/// Upstream's MaxDisruptedPodSize: evictions approved but not yet seen by the controller.
pub const MAX_DISRUPTED_PODS: usize = 2000;

pub const VIOLATION: &str = "Cannot evict pod as it would violate the pod's disruption budget.";
pub const MULTIPLE_BUDGETS: &str =
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";

/// Why an eviction is refused by its budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvictionError {
    /// The controller has not yet processed the budget's current generation.
    #[error("the disruption budget {budget} is still being processed by the server")]
    Stale { budget: String },
    #[error("pdb disruptions allowed is negative")]
    Negative { budget: String },
    #[error("DisruptedPods map too big - too many evictions not confirmed by PDB controller")]
    TooManyDisrupted { budget: String },
    #[error(
        "the disruption budget {budget} needs {desired} healthy pods and has {current} currently"
    )]
    NoDisruptionsAllowed {
        budget: String,
        desired: i64,
        current: i64,
    },
    /// An unhealthy pod's delete lost its resourceVersion precondition: it may have become ready.
    #[error("the disruption budget {budget} is still being processed by the server")]
    PodChanged { budget: String },
    /// The budget's compare-and-swap kept losing.
    #[error("couldn't update PodDisruptionBudget {budget:?} due to conflicts")]
    Conflicts { budget: String },
}

fn too_many_requests(cause: String, retry_after: i64) -> ApiError {
    let mut details = json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]});
    if retry_after > 0 {
        details["retryAfterSeconds"] = json!(retry_after);
    }
    ApiError {
        code: 429,
        reason: "TooManyRequests",
        message: VIOLATION.to_string(),
        details: Some(details),
    }
}

fn forbidden(budget: &str, why: &str) -> ApiError {
    ApiError {
        code: 403,
        reason: "Forbidden",
        message: format!("poddisruptionbudget.policy \"{budget}\" is forbidden: {why}"),
        details: Some(json!({"name": budget, "group": "policy", "kind": "poddisruptionbudget"})),
    }
}

impl EvictionError {
    /// The Status upstream answers with.
    pub fn to_api(&self) -> ApiError {
        match self {
            EvictionError::Stale { budget } | EvictionError::PodChanged { budget } => {
                too_many_requests(
                    format!("The disruption budget {budget} is still being processed by the server."),
                    10,
                )
            }
            EvictionError::Negative { budget } | EvictionError::TooManyDisrupted { budget } => {
                forbidden(budget, &self.to_string())
            }
            EvictionError::NoDisruptionsAllowed {
                budget,
                desired,
                current,
            } => too_many_requests(
                format!("The disruption budget {budget} needs {desired} healthy pods and has {current} currently"),
                0,
            ),
            EvictionError::Conflicts { .. } => ApiError {
                code: 504,
                reason: "Timeout",
                message: format!("Timeout: {self}"),
                details: Some(json!({"retryAfterSeconds": 10})),
            },
        }
    }
}

/// The Status for a pod covered by several budgets: a Failure with code 500 and no reason.
pub fn multiple_budgets_status() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": MULTIPLE_BUDGETS, "code": 500})
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

fn being_deleted(pod: &Value) -> bool {
    pod["metadata"]["deletionTimestamp"].is_string()
}

/// Upstream's canIgnorePDB: a finished pod already caused its disruption, a pending one never
/// counted, and one being deleted is going anyway.
pub fn can_ignore_budgets(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending") || being_deleted(pod)
}

/// Upstream's shouldEnforceResourceVersion: a pending pod is deleted only as it was read, so one
/// that started (and may count as healthy) meanwhile goes through the budget check.
pub fn should_enforce_resource_version(pod: &Value) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed") && !being_deleted(pod)
}

/// The pod's Ready condition is True (upstream's IsPodReady, the PDB's notion of healthy).
pub fn is_pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|l| {
        l.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn labels_selected(selector: &Value, labels: &Value) -> bool {
    crate::registry::apps::selector_matches(selector, labels)
}

/// The budgets of the pod's namespace that select it. A nil or empty selector selects nothing
/// here (upstream's eviction guard), and a selector with an unknown operator matches nothing.
pub fn matching_budgets<'a>(pod: &Value, budgets: &'a [Value]) -> Vec<&'a Value> {
    let ns = pod["metadata"]["namespace"].as_str();
    budgets
        .iter()
        .filter(|b| b["metadata"]["namespace"].as_str() == ns)
        .filter(|b| {
            let sel = &b["spec"]["selector"];
            let empty = sel["matchLabels"].as_object().is_none_or(|m| m.is_empty())
                && sel["matchExpressions"]
                    .as_array()
                    .is_none_or(|l| l.is_empty());
            !sel.is_null() && !empty && labels_selected(sel, &pod["metadata"]["labels"])
        })
        .collect()
}

/// What to do with a pod that cannot skip the budgets, given the budgets that cover it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetCheck {
    /// No budget covers the pod: delete it.
    Unguarded,
    /// More than one covers it: refuse (500).
    Multiple,
    /// The pod is not ready and its budget lets it go without spending a disruption (AlwaysAllow,
    /// or the guarded application is healthy): delete it only as it was read.
    DeleteUnhealthy { budget: String },
    /// Spend one of the budget's disruptions first.
    Decrement { budget: String },
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

pub fn check_budgets(pod: &Value, covering: &[&Value]) -> BudgetCheck {
    let budget = match covering {
        [] => return BudgetCheck::Unguarded,
        [one] => *one,
        _ => return BudgetCheck::Multiple,
    };
    let name = budget["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if !is_pod_ready(pod) {
        if budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow" {
            return BudgetCheck::DeleteUnhealthy { budget: name };
        }
        let status = &budget["status"];
        let (current, desired) = (
            int(&status["currentHealthy"]),
            int(&status["desiredHealthy"]),
        );
        if current >= desired && desired > 0 {
            return BudgetCheck::DeleteUnhealthy { budget: name };
        }
    }
    BudgetCheck::Decrement { budget: name }
}

/// metav1 SetStatusCondition: a changed status moves lastTransitionTime; reason, message and
/// observedGeneration always follow.
pub fn set_condition(conditions: &mut Vec<Value>, mut new: Value, now: &str) {
    match conditions.iter_mut().find(|c| c["type"] == new["type"]) {
        Some(existing) => {
            if existing["status"] != new["status"] {
                existing["status"] = new["status"].clone();
                existing["lastTransitionTime"] = json!(now);
            }
            for f in ["reason", "message", "observedGeneration"] {
                existing[f] = new[f].clone();
            }
        }
        None => {
            new["lastTransitionTime"] = json!(now);
            conditions.push(new);
        }
    }
}

/// Upstream's checkAndDecrement: the budget to store after spending one disruption on `pod`
/// (also what a dry run computes and drops), or why the eviction is refused.
pub fn check_and_decrement(budget: &Value, pod: &str, now: &str) -> Result<Value, EvictionError> {
    let name = budget["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let status = &budget["status"];
    let observed = int(&status["observedGeneration"]);
    if observed < int(&budget["metadata"]["generation"]) {
        return Err(EvictionError::Stale { budget: name });
    }
    let allowed = int(&status["disruptionsAllowed"]);
    if allowed < 0 {
        return Err(EvictionError::Negative { budget: name });
    }
    if status["disruptedPods"]
        .as_object()
        .is_some_and(|m| m.len() > MAX_DISRUPTED_PODS)
    {
        return Err(EvictionError::TooManyDisrupted { budget: name });
    }
    if allowed == 0 {
        return Err(EvictionError::NoDisruptionsAllowed {
            budget: name,
            desired: int(&status["desiredHealthy"]),
            current: int(&status["currentHealthy"]),
        });
    }
    let mut out = budget.clone();
    out["status"]["disruptionsAllowed"] = json!(allowed - 1);
    if allowed - 1 == 0 {
        // Upstream's UpdateDisruptionAllowedCondition for the budget just spent.
        let mut conditions: Vec<Value> =
            status["conditions"].as_array().cloned().unwrap_or_default();
        set_condition(
            &mut conditions,
            json!({"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods",
                   "message": "", "observedGeneration": observed}),
            now,
        );
        out["status"]["conditions"] = json!(conditions);
    }
    // The controller must not count the pod as healthy while its deletion is on the way.
    if !out["status"]["disruptedPods"].is_object() {
        out["status"]["disruptedPods"] = json!({});
    }
    out["status"]["disruptedPods"][pod] = json!(now);
    Ok(out)
}

/// upstream's UpdatePodCondition for the eviction's DisruptionTarget condition, set on the pod
/// before it is deleted (PodDisruptionConditions, GA in 1.31). None when already there.
pub fn with_disruption_target(pod: &Value, now: &str) -> Option<Value> {
    let wanted = json!({"type": "DisruptionTarget", "status": "True",
                        "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"});
    let mut out = pod.clone();
    let mut conditions: Vec<Value> = pod["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    match conditions
        .iter_mut()
        .find(|c| c["type"] == "DisruptionTarget")
    {
        Some(c) => {
            if c["status"] == wanted["status"]
                && c["reason"] == wanted["reason"]
                && c["message"] == wanted["message"]
            {
                return None;
            }
            if c["status"] != wanted["status"] {
                c["lastTransitionTime"] = json!(now);
            }
            for f in ["status", "reason", "message"] {
                c[f] = wanted[f].clone();
            }
        }
        None => {
            let mut c = wanted;
            c["lastProbeTime"] = Value::Null;
            c["lastTransitionTime"] = json!(now);
            conditions.push(c);
        }
    }
    out["status"]["conditions"] = json!(conditions);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2024-05-01T10:00:00Z";

    fn pod(phase: &str, ready: bool) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"foo": "bar"}},
               "status": {"phase": phase,
                          "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}})
    }

    fn budget(name: &str, status: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns", "generation": 2},
               "spec": {"minAvailable": 2, "selector": {"matchLabels": {"foo": "bar"}}},
               "status": status})
    }

    fn healthy(allowed: i64) -> Value {
        json!({"observedGeneration": 2, "disruptionsAllowed": allowed,
               "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3})
    }

    #[test]
    fn finished_pending_and_deleting_pods_skip_budgets() {
        assert!(can_ignore_budgets(&pod("Succeeded", false)));
        assert!(can_ignore_budgets(&pod("Failed", false)));
        assert!(can_ignore_budgets(&pod("Pending", false)));
        assert!(!can_ignore_budgets(&pod("Running", true)));
        let mut deleting = pod("Running", true);
        deleting["metadata"]["deletionTimestamp"] = json!(NOW);
        assert!(can_ignore_budgets(&deleting));
        // Only a pending pod is deleted with its resourceVersion as a precondition.
        assert!(should_enforce_resource_version(&pod("Pending", false)));
        assert!(!should_enforce_resource_version(&pod("Failed", false)));
        assert!(!should_enforce_resource_version(&deleting));
    }

    #[test]
    fn budgets_cover_by_namespace_and_selector() {
        let mut other_ns = budget("elsewhere", healthy(1));
        other_ns["metadata"]["namespace"] = json!("other");
        let mut empty = budget("empty", healthy(1));
        empty["spec"]["selector"] = json!({});
        let mut none = budget("none", healthy(1));
        none["spec"]["selector"] = Value::Null;
        let mut miss = budget("miss", healthy(1));
        miss["spec"]["selector"] = json!({"matchLabels": {"foo": "baz"}});
        let all = [budget("foo", healthy(1)), other_ns, empty, none, miss];
        let names: Vec<&str> = matching_budgets(&pod("Running", true), &all)
            .iter()
            .map(|b| b["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["foo"]);
    }

    #[test]
    fn budget_checks() {
        let ready = pod("Running", true);
        let unready = pod("Running", false);
        let b = budget("foo", healthy(0));
        assert_eq!(check_budgets(&ready, &[]), BudgetCheck::Unguarded);
        assert_eq!(check_budgets(&ready, &[&b, &b]), BudgetCheck::Multiple);
        let decrement = BudgetCheck::Decrement {
            budget: "foo".into(),
        };
        let unhealthy = BudgetCheck::DeleteUnhealthy {
            budget: "foo".into(),
        };
        assert_eq!(check_budgets(&ready, &[&b]), decrement);
        // The guarded application is healthy: an unready pod goes without spending a disruption.
        assert_eq!(check_budgets(&unready, &[&b]), unhealthy);
        // Disrupted (current < desired): IfHealthyBudget (the default) keeps it to the budget ...
        let disrupted = budget(
            "foo",
            json!({"observedGeneration": 2, "disruptionsAllowed": 0,
                                             "currentHealthy": 1, "desiredHealthy": 2}),
        );
        assert_eq!(check_budgets(&unready, &[&disrupted]), decrement);
        let mut if_healthy = disrupted.clone();
        if_healthy["spec"]["unhealthyPodEvictionPolicy"] = json!("IfHealthyBudget");
        assert_eq!(check_budgets(&unready, &[&if_healthy]), decrement);
        // ... AlwaysAllow lets it go.
        let mut always = disrupted.clone();
        always["spec"]["unhealthyPodEvictionPolicy"] = json!("AlwaysAllow");
        assert_eq!(check_budgets(&unready, &[&always]), unhealthy);
        // A ready pod always spends a disruption, whatever the policy.
        assert_eq!(check_budgets(&ready, &[&always]), decrement);
        // desiredHealthy 0 is not "healthy": the budget decides.
        let zero = budget(
            "foo",
            json!({"observedGeneration": 2, "currentHealthy": 0, "desiredHealthy": 0}),
        );
        assert_eq!(check_budgets(&unready, &[&zero]), decrement);
    }

    #[test]
    fn decrement_spends_one_and_records_the_pod() {
        let out = check_and_decrement(&budget("foo", healthy(2)), "p", NOW).unwrap();
        assert_eq!(out["status"]["disruptionsAllowed"], 1);
        assert_eq!(out["status"]["disruptedPods"], json!({"p": NOW}));
        assert!(out["status"]["conditions"].is_null());
        let last = check_and_decrement(&out, "q", NOW).unwrap();
        assert_eq!(last["status"]["disruptionsAllowed"], 0);
        assert_eq!(last["status"]["disruptedPods"], json!({"p": NOW, "q": NOW}));
        assert_eq!(
            last["status"]["conditions"],
            json!([{"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods",
                    "message": "", "observedGeneration": 2, "lastTransitionTime": NOW}])
        );
    }

    #[test]
    fn refusals_are_upstreams() {
        let zero = check_and_decrement(&budget("foo", healthy(0)), "p", NOW).unwrap_err();
        let e = zero.to_api();
        assert_eq!(
            (e.code, e.reason, e.message.as_str()),
            (429, "TooManyRequests", VIOLATION)
        );
        assert_eq!(
            e.details.unwrap(),
            json!({"causes": [{"reason": "DisruptionBudget",
                               "message": "The disruption budget foo needs 2 healthy pods and has 3 currently"}]})
        );
        let mut stale = budget("foo", healthy(5));
        stale["metadata"]["generation"] = json!(3);
        let e = check_and_decrement(&stale, "p", NOW).unwrap_err().to_api();
        assert_eq!((e.code, e.message.as_str()), (429, VIOLATION));
        assert_eq!(e.details.as_ref().unwrap()["retryAfterSeconds"], 10);
        assert_eq!(
            e.details.unwrap()["causes"][0]["message"],
            "The disruption budget foo is still being processed by the server."
        );
        let e = check_and_decrement(&budget("foo", healthy(-1)), "p", NOW)
            .unwrap_err()
            .to_api();
        assert_eq!(
            (e.code, e.message.as_str()),
            (403, "poddisruptionbudget.policy \"foo\" is forbidden: pdb disruptions allowed is negative")
        );
        let mut crowded = budget("foo", healthy(1));
        let many: serde_json::Map<String, Value> = (0..=MAX_DISRUPTED_PODS)
            .map(|i| (format!("p{i}"), json!(NOW)))
            .collect();
        crowded["status"]["disruptedPods"] = Value::Object(many);
        let e = check_and_decrement(&crowded, "p", NOW)
            .unwrap_err()
            .to_api();
        assert_eq!(e.code, 403);
        assert!(e.message.ends_with(
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller"
        ));
        let e = EvictionError::Conflicts {
            budget: "foo".into(),
        }
        .to_api();
        assert_eq!(
            (e.code, e.reason, e.message.as_str()),
            (
                504,
                "Timeout",
                "Timeout: couldn't update PodDisruptionBudget \"foo\" due to conflicts"
            )
        );
        assert_eq!(multiple_budgets_status()["code"], 500);
        assert!(multiple_budgets_status().get("reason").is_none());
    }

    #[test]
    fn disruption_target_condition() {
        let p = pod("Running", true);
        let out = with_disruption_target(&p, NOW).unwrap();
        let c = &out["status"]["conditions"][1];
        assert_eq!(
            (
                c["type"].as_str(),
                c["status"].as_str(),
                c["reason"].as_str(),
                c["message"].as_str()
            ),
            (
                Some("DisruptionTarget"),
                Some("True"),
                Some("EvictionByEvictionAPI"),
                Some("Eviction API: evicting")
            )
        );
        assert_eq!(c["lastTransitionTime"], NOW);
        assert!(with_disruption_target(&out, "later").is_none());
    }
}
