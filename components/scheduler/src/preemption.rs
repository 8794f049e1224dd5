//! DefaultPreemption's PostFilter, pure (upstream's `framework/preemption` Evaluator with the
//! DefaultPreemption plugin): when a pod fits nowhere, find nodes where evicting pods of lower
//! priority makes it fit, choose one by upstream's candidate ordering, and say what to do — nominate
//! the pod there and evict the victims (`preemption_exec` carries that out), or why not.

use std::collections::BTreeMap;

use rand::Rng;

use crate::cache::Cache;
use crate::fit_error::{histogram, FitError};
use crate::nominator::status_nominated_node;
use crate::preemption_verdict::{Candidate, Nomination, PostFilterResult};
use crate::preemption_victims::{select_victims_on_node, start_key, Preemptor};

/// The status of a node where evicting pods cannot help (absent from the dry run).
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
pub const NEVER: &str = "not eligible due to preemptionPolicy=Never.";
pub const TERMINATING_ON_NOMINATED: &str =
    "not eligible due to a terminating pod on the nominated node.";

/// upstream's DefaultPreemptionArgs defaults: at least 10 % of the potential nodes, at least 100.
const MIN_CANDIDATE_NODES_PERCENTAGE: usize = 10;
const MIN_CANDIDATE_NODES_ABSOLUTE: usize = 100;

/// calculateNumCandidates: how many candidates the dry run looks for before it stops.
pub fn candidates_to_find(potential: usize) -> usize {
    (potential * MIN_CANDIDATE_NODES_PERCENTAGE / 100)
        .max(MIN_CANDIDATE_NODES_ABSOLUTE)
        .min(potential)
}

/// The node the pod is nominated to: its status, or this scheduler's decision not yet written.
pub fn nominated_node<'a>(preemptor: &Preemptor<'a>, cache: &'a Cache) -> Option<&'a str> {
    status_nominated_node(preemptor.pod).or_else(|| cache.nominator().node_of(&preemptor.info.key))
}

/// PodEligibleToPreemptOthers: not with preemptionPolicy Never; not while pods it already preempted
/// on its nominated node are still terminating (unless that node cannot take it anyway).
fn eligible(preemptor: &Preemptor, fit: &FitError, cache: &Cache) -> Result<(), &'static str> {
    let spec = preemptor.pod.spec.as_ref();
    if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
        return Err(NEVER);
    }
    let Some(node) = nominated_node(preemptor, cache) else {
        return Ok(());
    };
    // Only a node rejected as Unschedulable may still be waiting for victims to go.
    if !fit.preemptable.iter().any(|n| n == node) {
        return Ok(());
    }
    let waiting = cache.node(node).is_some_and(|info| {
        info.pods
            .values()
            .any(|p| p.priority < preemptor.info.priority && p.preempted)
    });
    if waiting {
        return Err(TERMINATING_ON_NOMINATED);
    }
    Ok(())
}

/// upstream's pickOneNodeForPreemption: fewest budget violations, then the lowest highest-priority
/// victim, the smallest sum of priorities, the fewest victims, the latest start of the highest
/// priority victims; still tied, the first.
pub fn pick_one_node(candidates: &[Candidate]) -> Option<usize> {
    let highest = |c: &Candidate| c.victims.first().map_or(0, |v| v.priority);
    let scores: [&dyn Fn(&Candidate) -> i128; 5] = [
        &|c| -(c.pdb_violations as i128),
        &|c| -i128::from(highest(c)),
        // Shifted to be positive, so more pods of negative priority do not sum smaller.
        &|c| {
            -c.victims
                .iter()
                .map(|v| i128::from(v.priority) + i128::from(i32::MAX) + 1)
                .sum::<i128>()
        },
        &|c| -(c.victims.len() as i128),
        &|c| {
            c.victims
                .iter()
                .filter(|v| v.priority == highest(c))
                .map(start_key)
                .min()
                .unwrap_or(i128::MIN)
        },
    ];
    let mut left: Vec<usize> = (0..candidates.len()).collect();
    for score in scores {
        if left.len() <= 1 {
            break;
        }
        let best = left.iter().map(|&i| score(&candidates[i])).max()?;
        left.retain(|&i| score(&candidates[i]) == best);
    }
    left.first().copied()
}

/// Runs the PostFilter for a pod the filters rejected everywhere (`fit` says how).
pub fn post_filter(
    preemptor: &Preemptor,
    fit: &FitError,
    cache: &Cache,
    rng: &mut impl Rng,
) -> PostFilterResult {
    if let Err(why) = eligible(preemptor, fit, cache) {
        return PostFilterResult {
            message: Some(format!("preemption: {why}")),
            nomination: Nomination::Unchanged,
        };
    }
    let potential: Vec<_> = fit
        .preemptable
        .iter()
        .filter_map(|n| cache.node(n))
        .filter_map(|info| info.node.clone().map(|node| (info, node)))
        .collect();
    let pdbs: Vec<_> = cache.pdbs().collect();
    let mut fine = Vec::new();
    let mut violating = Vec::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut failed = 0;
    if !potential.is_empty() {
        // A random start spreads equal candidates over the nodes, as upstream's offset.
        let offset = rng.random_range(0..potential.len());
        let wanted = candidates_to_find(potential.len());
        for i in 0..potential.len() {
            let (info, node) = &potential[(offset + i) % potential.len()];
            match select_victims_on_node(preemptor, node, info, cache.nominator(), &pdbs) {
                Ok((victims, violations)) if !victims.is_empty() => {
                    let candidate = Candidate {
                        node: info.name.clone(),
                        victims,
                        pdb_violations: violations,
                    };
                    if violations == 0 {
                        fine.push(candidate);
                    } else {
                        violating.push(candidate);
                    }
                    if !fine.is_empty() && fine.len() + violating.len() >= wanted {
                        break;
                    }
                }
                Ok(_) => {
                    failed += 1;
                    let reason =
                        format!("expected at least one victim pod on node {:?}", info.name);
                    *reasons.entry(reason).or_insert(0) += 1;
                }
                Err(rejection) => {
                    failed += 1;
                    for r in rejection.reasons {
                        *reasons.entry(r).or_insert(0) += 1;
                    }
                }
            }
        }
    }
    fine.append(&mut violating);
    match pick_one_node(&fine) {
        Some(i) => PostFilterResult {
            message: None,
            nomination: Nomination::Preempt(Box::new(fine.swap_remove(i))),
        },
        None => {
            let not_helpful = fit.num_all_nodes.saturating_sub(failed);
            let parts = histogram(
                reasons
                    .iter()
                    .map(|(r, n)| (r.as_str(), *n))
                    .chain([(NOT_HELPFUL, not_helpful)]),
            );
            PostFilterResult {
                message: Some(format!(
                    "preemption: 0/{} nodes are available: {parts}.",
                    fit.num_all_nodes
                )),
                nomination: Nomination::Clear,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::schedule;
    use crate::fit_error::ScheduleError;
    use crate::pod_info::PodInfo;
    use crate::preemption_victims::NO_VICTIMS;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use rand::SeedableRng;
    use serde_json::json;

    fn node(name: &str, foo: i64, tainted: bool) -> Node {
        let taints = if tainted {
            json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110",
                                       "scheduling.k8s.io/foo": foo.to_string()}}
        }))
        .unwrap()
    }

    fn pod(name: &str, priority: i32, foo: i64, node: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"priority": priority, "nodeName": node, "containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"scheduling.k8s.io/foo": foo.to_string()},
                              "limits": {"scheduling.k8s.io/foo": foo.to_string()}}}]}
        }))
        .unwrap()
    }

    fn rng() -> rand::rngs::StdRng {
        rand::rngs::StdRng::seed_from_u64(7)
    }

    /// upstream's "validates basic preemption works": two pods of 2 per node (5 each), the first
    /// low priority, the rest medium.
    fn basic_cluster() -> Cache {
        let mut cache = Cache::default();
        cache.upsert_node(node("cp", 0, true));
        for (i, n) in ["host1", "host2", "host3"].iter().enumerate() {
            cache.upsert_node(node(n, 5, false));
            for j in 0..2 {
                let priority = if i == 0 && j == 0 { 1 } else { 100 };
                cache.upsert_pod(&pod(&format!("pod{i}-{j}"), priority, 2, Some(n)));
            }
        }
        cache
    }

    fn nomination(err: ScheduleError) -> (String, Nomination) {
        match err {
            ScheduleError::Unfit(fit) => (fit.message(), fit.nomination),
            other => panic!("not a FitError: {other:?}"),
        }
    }

    #[test]
    fn a_high_priority_pod_preempts_the_lowest_priority_victim() {
        let cache = basic_cluster();
        let (message, n) = nomination(
            schedule(&pod("preemptor-pod", 1000, 2, None), &cache, &mut rng()).unwrap_err(),
        );
        assert_eq!(
            message,
            "0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, \
             3 Insufficient scheduling.k8s.io/foo.",
            "a successful preemption adds no message"
        );
        let Nomination::Preempt(c) = n else {
            panic!("no preemption: {n:?}");
        };
        assert_eq!(c.node, "host1");
        assert_eq!(
            c.victims.iter().map(|v| v.key.as_str()).collect::<Vec<_>>(),
            ["ns/pod0-0"]
        );
    }

    #[test]
    fn without_lower_priority_pods_nothing_helps() {
        let cache = basic_cluster();
        let (message, n) =
            nomination(schedule(&pod("peer", 1, 2, None), &cache, &mut rng()).unwrap_err());
        assert_eq!(n, Nomination::Clear);
        assert!(
            message.ends_with(&format!(
                " preemption: 0/4 nodes are available: 1 {NOT_HELPFUL}, 3 {NO_VICTIMS}."
            )),
            "{message}"
        );
        // On host1 evicting the low pod frees 3 of 5, not the 4 wanted: the filter's reason counts.
        let (message, n) =
            nomination(schedule(&pod("big", 50, 4, None), &cache, &mut rng()).unwrap_err());
        assert_eq!(n, Nomination::Clear);
        assert_eq!(
            message,
            format!(
                "0/4 nodes are available: 1 node(s) had untolerated taint {{node-role.kubernetes.io/control-plane: }}, \
                 3 Insufficient scheduling.k8s.io/foo. preemption: 0/4 nodes are available: \
                 1 Insufficient scheduling.k8s.io/foo, 1 {NOT_HELPFUL}, 2 {NO_VICTIMS}."
            )
        );
    }

    #[test]
    fn preemption_policy_never_and_terminating_victims_make_a_pod_wait() {
        let mut cache = basic_cluster();
        let mut never = pod("never", 1000, 2, None);
        never.spec.as_mut().unwrap().preemption_policy = Some("Never".into());
        let (message, n) = nomination(schedule(&never, &cache, &mut rng()).unwrap_err());
        assert!(message.ends_with(" preemption: not eligible due to preemptionPolicy=Never."));
        assert_eq!(n, Nomination::Unchanged);
        // The preemptor was nominated to host1 and its victim is terminating: it waits.
        let mut victim = pod("pod0-0", 1, 2, Some("host1"));
        victim.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2025-01-01T00:00:00Z".parse().unwrap(),
            ));
        victim.status = Some(
            serde_json::from_value(
                json!({"conditions": [{"type": "DisruptionTarget", "status": "True",
                "reason": "PreemptionByScheduler"}]}),
            )
            .unwrap(),
        );
        cache.upsert_pod(&victim);
        let preemptor = pod("preemptor-pod", 1000, 2, None);
        cache
            .nominator_mut()
            .nominate(PodInfo::new(&preemptor), "host1");
        let (message, n) = nomination(schedule(&preemptor, &cache, &mut rng()).unwrap_err());
        assert!(
            message.ends_with(
                " preemption: not eligible due to a terminating pod on the nominated node."
            ),
            "{message}"
        );
        assert_eq!(n, Nomination::Unchanged);
        // Once the victim is gone the nominated node is taken at once.
        cache.remove_pod("ns/pod0-0");
        assert_eq!(schedule(&preemptor, &cache, &mut rng()).unwrap(), "host1");
    }

    #[test]
    fn a_lower_priority_pod_does_not_take_the_room_of_a_nominated_one() {
        let mut cache = basic_cluster();
        let preemptor = pod("preemptor-pod", 1000, 2, None);
        cache
            .nominator_mut()
            .nominate(PodInfo::new(&preemptor), "host1");
        cache.remove_pod("ns/pod0-0");
        // 3 of 5 free on host1, 2 of them the preemptor's: a medium pod of 2 (pinned there by
        // spec.nodeName) does not fit, and may not preempt its peers; one of 1 does.
        let (message, n) = nomination(
            schedule(&pod("late", 100, 2, Some("host1")), &cache, &mut rng()).unwrap_err(),
        );
        assert_eq!(n, Nomination::Clear);
        assert!(
            message.starts_with("0/4 nodes are available: 1 Insufficient scheduling.k8s.io/foo, "),
            "{message}"
        );
        assert_eq!(
            schedule(&pod("small", 100, 1, Some("host1")), &cache, &mut rng()).unwrap(),
            "host1"
        );
    }

    fn candidate(node: &str, victims: &[(i32, Option<&str>)], violations: usize) -> Candidate {
        Candidate {
            node: node.into(),
            victims: victims
                .iter()
                .enumerate()
                .map(|(i, (priority, started))| {
                    let mut p = PodInfo::new(&pod(&format!("{node}-{i}"), *priority, 1, None));
                    p.start_time = started.map(|s| s.parse().unwrap());
                    p
                })
                .collect(),
            pdb_violations: violations,
        }
    }

    #[test]
    fn candidates_are_ordered_as_upstream() {
        let pick = |cs: &[Candidate]| cs[pick_one_node(cs).unwrap()].node.clone();
        // Fewest budget violations first, whatever the priorities.
        assert_eq!(
            pick(&[
                candidate("a", &[(1, None)], 1),
                candidate("b", &[(50, None)], 0)
            ]),
            "b"
        );
        // Then the lowest highest-priority victim.
        assert_eq!(
            pick(&[
                candidate("a", &[(10, None)], 0),
                candidate("b", &[(5, None), (5, None)], 0)
            ]),
            "b"
        );
        // Then the smallest sum of priorities (negative ones shifted, so fewer pods win).
        assert_eq!(
            pick(&[
                candidate("a", &[(5, None), (4, None)], 0),
                candidate("b", &[(5, None), (1, None)], 0)
            ]),
            "b"
        );
        assert_eq!(
            pick(&[
                candidate("a", &[(-5, None), (-5, None)], 0),
                candidate("b", &[(-5, None)], 0)
            ]),
            "b"
        );
        // Then the latest start among the highest-priority victims.
        assert_eq!(
            pick(&[
                candidate("a", &[(5, Some("2025-01-01T00:00:00Z"))], 0),
                candidate("b", &[(5, Some("2025-02-01T00:00:00Z"))], 0)
            ]),
            "b"
        );
        // All equal: the first.
        assert_eq!(
            pick(&[
                candidate("a", &[(5, None)], 0),
                candidate("b", &[(5, None)], 0)
            ]),
            "a"
        );
        assert_eq!(pick_one_node(&[]), None);
    }

    #[test]
    fn the_dry_run_looks_at_enough_nodes() {
        assert_eq!(candidates_to_find(3), 3);
        assert_eq!(candidates_to_find(500), 100);
        assert_eq!(candidates_to_find(5000), 500);
    }
}
