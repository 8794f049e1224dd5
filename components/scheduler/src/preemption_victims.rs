//! Which pods to preempt on one node, pure (upstream's DefaultPreemption.SelectVictimsOnNode): take
//! away every pod of lower priority than the preemptor; if the preemptor then fits, give back as
//! many as possible, the most important first — those whose eviction would violate a
//! PodDisruptionBudget before the others — and what cannot be given back is the victims.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::filters::{Code, FilterInput, Rejection};
use crate::node_info::NodeInfo;
use crate::nominator::{run_filters_with_nominated, Nominator};
use crate::pod_info::PodInfo;
use crate::volume_filters::PodVolumes;

/// upstream's status when a node has nothing the preemptor may evict.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// The pod that needs room.
pub struct Preemptor<'a> {
    pub pod: &'a Pod,
    pub info: &'a PodInfo,
    pub volumes: &'a PodVolumes,
}

/// upstream's MoreImportantPod as an ordering: higher priority first, then the pod that started
/// earlier (a pod that has not started counts as starting now, after every started one).
pub fn more_important(a: &PodInfo, b: &PodInfo) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then_with(|| start_key(a).cmp(&start_key(b)))
}

/// Start time as nanoseconds, "not started" as the latest possible.
pub fn start_key(p: &PodInfo) -> i128 {
    p.start_time.map_or(i128::MAX, |t| t.as_nanosecond())
}

/// metav1.LabelSelectorAsSelector matching; None for a selector that does not parse (it matches
/// nothing).
fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> Option<bool> {
    let mut all = true;
    for (k, v) in selector.match_labels.iter().flatten() {
        all &= labels.get(k) == Some(v);
    }
    for e in selector.match_expressions.iter().flatten() {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        all &= match e.operator.as_str() {
            "In" if !values.is_empty() => value.is_some_and(|v| values.contains(v)),
            "NotIn" if !values.is_empty() => value.is_none_or(|v| !values.contains(v)),
            "Exists" if values.is_empty() => value.is_some(),
            "DoesNotExist" if values.is_empty() => value.is_none(),
            _ => return None,
        };
    }
    Some(all)
}

fn selector_is_empty(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|m| m.is_empty())
}

/// upstream's filterPodsWithPDBViolation: walking the pods in order, each budget that selects a pod
/// (not already counted in its disruptedPods) gives up one allowed disruption; a pod that takes a
/// budget below zero violates it. Order within each group is kept.
pub fn split_by_pdb_violation(
    pods: Vec<PodInfo>,
    pdbs: &[&PodDisruptionBudget],
) -> (Vec<PodInfo>, Vec<PodInfo>) {
    let mut allowed: Vec<i32> = pdbs
        .iter()
        .map(|p| p.status.as_ref().map_or(0, |s| s.disruptions_allowed))
        .collect();
    let mut violating = Vec::new();
    let mut fine = Vec::new();
    for pod in pods {
        let (namespace, name) = pod.namespace_and_name();
        let mut violated = false;
        // A pod without labels matches no budget.
        if !pod.labels.is_empty() {
            for (i, pdb) in pdbs.iter().enumerate() {
                if pdb.metadata.namespace.as_deref().unwrap_or("default") != namespace {
                    continue;
                }
                let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
                    continue;
                };
                // An empty selector matches nothing here (upstream's rule for budgets).
                if selector_is_empty(selector)
                    || selector_matches(selector, &pod.labels) != Some(true)
                {
                    continue;
                }
                let disrupted = pdb
                    .status
                    .as_ref()
                    .and_then(|s| s.disrupted_pods.as_ref())
                    .is_some_and(|d| d.contains_key(name));
                // Already being disrupted (the API server counted it): not counted twice.
                if disrupted {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated {
            violating.push(pod);
        } else {
            fine.push(pod);
        }
    }
    (violating, fine)
}

/// The victims on this node (most important first) and how many of them violate a budget, or why
/// preemption cannot make room here.
pub fn select_victims_on_node(
    preemptor: &Preemptor,
    node: &Node,
    node_info: &NodeInfo,
    nominator: &Nominator,
    pdbs: &[&PodDisruptionBudget],
) -> Result<(Vec<PodInfo>, usize), Rejection> {
    let mut potential: Vec<PodInfo> = node_info
        .pods
        .values()
        .filter(|p| p.priority < preemptor.info.priority)
        .cloned()
        .collect();
    if potential.is_empty() {
        return Err(Rejection::new(
            Code::UnschedulableAndUnresolvable,
            vec![NO_VICTIMS.to_string()],
        ));
    }
    let mut trial = node_info.clone();
    for p in &potential {
        trial.remove_pod(&p.key);
    }
    let fits = |trial: &NodeInfo| {
        run_filters_with_nominated(
            &FilterInput {
                pod: preemptor.pod,
                pod_info: preemptor.info,
                node_info: trial,
                node,
                volumes: preemptor.volumes,
            },
            nominator,
        )
    };
    // Not even without every lower-priority pod: this node cannot take the preemptor.
    fits(&trial)?;
    potential.sort_by(more_important);
    let (violating, fine) = split_by_pdb_violation(potential, pdbs);
    let mixed = !violating.is_empty() && !fine.is_empty();
    let mut victims = Vec::new();
    let mut violations = 0;
    for (pod, violates) in violating
        .into_iter()
        .map(|p| (p, true))
        .chain(fine.into_iter().map(|p| (p, false)))
    {
        trial.add_pod(pod.clone());
        if fits(&trial).is_err() {
            trial.remove_pod(&pod.key);
            violations += usize::from(violates);
            victims.push(pod);
        }
    }
    if mixed {
        victims.sort_by(more_important);
    }
    Ok((victims, violations))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn pod(name: &str, priority: i32, fakecpu: i64, started: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                         "labels": {"app": name}},
            "spec": {"priority": priority, "containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"example.com/fakecpu": fakecpu.to_string()}}}]},
            "status": {"startTime": started}
        }))
        .unwrap()
    }

    fn node(fakecpu: i64) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"pods": "110", "example.com/fakecpu": fakecpu.to_string()}}
        }))
        .unwrap()
    }

    fn on_node(fakecpu: i64, pods: &[Pod]) -> NodeInfo {
        let mut info = NodeInfo::new(node(fakecpu));
        for p in pods {
            info.add_pod(PodInfo::new(p));
        }
        info
    }

    fn victims_of(p: &Pod, info: &NodeInfo, pdbs: &[&PodDisruptionBudget]) -> (Vec<String>, usize) {
        let pi = PodInfo::new(p);
        let pre = Preemptor {
            pod: p,
            info: &pi,
            volumes: &PodVolumes::default(),
        };
        let node = info.node.clone().unwrap();
        let (victims, n) =
            select_victims_on_node(&pre, &node, info, &Nominator::default(), pdbs).unwrap();
        (victims.into_iter().map(|v| v.key).collect(), n)
    }

    fn pdb(app: &str, allowed: i32) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": format!("pdb-{app}"), "namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"app": app}}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
        }))
        .unwrap()
    }

    #[test]
    fn the_replicaset_case_reprieves_the_most_important_that_still_fits() {
        // upstream's PreemptionExecutionPath: 200 (p1) + 300 (p2) + 450 (p3) of 1000; p4 wants 500.
        let info = on_node(
            1000,
            &[
                pod("rs-pod1", 1, 200, None),
                pod("rs-pod2", 2, 300, None),
                pod("rs-pod3", 3, 450, None),
            ],
        );
        let (victims, violations) = victims_of(&pod("pod4", 4, 500, None), &info, &[]);
        assert_eq!(victims, ["ns/rs-pod2", "ns/rs-pod1"]);
        assert_eq!(violations, 0);
    }

    #[test]
    fn a_node_without_lower_priority_pods_or_room_is_no_candidate() {
        let info = on_node(1000, &[pod("high", 10, 900, None)]);
        let p = pod("p", 5, 500, None);
        let pi = PodInfo::new(&p);
        let pre = Preemptor {
            pod: &p,
            info: &pi,
            volumes: &PodVolumes::default(),
        };
        let n = info.node.clone().unwrap();
        let err = select_victims_on_node(&pre, &n, &info, &Nominator::default(), &[]).unwrap_err();
        assert_eq!(err.reasons, [NO_VICTIMS]);
        assert_eq!(err.code, Code::UnschedulableAndUnresolvable);
        // Evicting the low pod is not enough: the filter's own reason is reported.
        let info = on_node(
            1000,
            &[pod("high", 10, 600, None), pod("low", 1, 300, None)],
        );
        let err = select_victims_on_node(&pre, &n, &info, &Nominator::default(), &[]).unwrap_err();
        assert_eq!(err.reasons, ["Insufficient example.com/fakecpu"]);
    }

    #[test]
    fn equal_priority_victims_are_the_youngest() {
        let info = on_node(
            4,
            &[
                pod("old", 1, 2, Some("2025-01-01T00:00:00Z")),
                pod("young", 1, 2, Some("2025-01-02T00:00:00Z")),
            ],
        );
        let (victims, _) = victims_of(&pod("p", 2, 2, None), &info, &[]);
        assert_eq!(victims, ["ns/young"], "the older pod is reprieved first");
    }

    #[test]
    fn budget_protected_pods_are_reprieved_first_and_counted_when_evicted() {
        let pods = [pod("a", 1, 2, None), pod("b", 2, 2, None)];
        let info = on_node(4, &pods);
        // Without budgets the less important "a" goes.
        assert_eq!(victims_of(&pod("p", 5, 2, None), &info, &[]).0, ["ns/a"]);
        // "a" is protected (no disruption allowed): it is given back first, "b" goes instead.
        let protect_a = pdb("a", 0);
        assert_eq!(
            victims_of(&pod("p", 5, 2, None), &info, &[&protect_a]),
            (vec!["ns/b".to_string()], 0)
        );
        // Both must go: the violation is counted.
        assert_eq!(
            victims_of(&pod("p", 5, 4, None), &info, &[&protect_a]),
            (vec!["ns/b".to_string(), "ns/a".to_string()], 1),
            "victims stay in order of importance"
        );
    }

    #[test]
    fn budgets_count_down_and_skip_pods_already_disrupted() {
        let pods: Vec<PodInfo> = ["x", "x2"]
            .iter()
            .map(|n| {
                let mut p = PodInfo::new(&pod(n, 1, 1, None));
                p.labels = [("app".to_string(), "x".to_string())].into();
                p
            })
            .collect();
        let one = pdb("x", 1);
        let (violating, fine) = split_by_pdb_violation(pods.clone(), &[&one]);
        assert_eq!(
            (violating.len(), fine.len()),
            (1, 1),
            "the second pod exceeds the budget"
        );
        let mut disrupted = pdb("x", 0);
        disrupted.status.as_mut().unwrap().disrupted_pods = Some(
            [(
                "x".to_string(),
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                ),
            )]
            .into(),
        );
        let (violating, _) = split_by_pdb_violation(pods, &[&disrupted]);
        assert_eq!(violating.len(), 1, "only x2 counts against the budget");
        assert_eq!(violating[0].key, "ns/x2");
    }

    #[test]
    fn importance_is_priority_then_age() {
        let a = PodInfo::new(&pod("a", 2, 1, Some("2025-01-02T00:00:00Z")));
        let b = PodInfo::new(&pod("b", 1, 1, Some("2025-01-01T00:00:00Z")));
        let c = PodInfo::new(&pod("c", 1, 1, None));
        let mut all = [c.clone(), b.clone(), a.clone()];
        all.sort_by(more_important);
        assert_eq!(all.map(|p| p.key), ["ns/a", "ns/b", "ns/c"]);
    }
}
