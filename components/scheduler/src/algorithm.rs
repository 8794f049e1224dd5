//! One scheduling decision, pure: filter every node, score the feasible ones, pick the best (ties
//! broken at random). A pod nominated to a node (it preempted pods there) tries that node first. A
//! pod that fits nowhere yields a `FitError` whose message is upstream's, with what preemption
//! (the PostFilter) found.

use k8s_openapi::api::core::v1::Pod;
use rand::Rng;

use crate::cache::Cache;
use crate::filters::{Code, FilterInput};
use crate::fit_error::{FitError, ScheduleError};
use crate::node_info::NodeInfo;
use crate::nominator::{run_filters_with_nominated, Nominator};
use crate::pod_info::PodInfo;
use crate::preemption;
use crate::preemption_victims::Preemptor;
use crate::scores::{normalize, ScoreInput, SCORERS};
use crate::volume_filters::{self, PodVolumes};

/// How many feasible nodes are enough to pick from, as upstream's default `percentageOfNodesToScore`:
/// every node below 100 nodes, else an adaptive share (50 % minus 1 % per 125 nodes, at least 5 %) of at
/// least 100 nodes. Filtering and scoring every node of a large cluster for every pod buys little.
pub fn feasible_nodes_to_find(num_all_nodes: usize) -> usize {
    const MIN_FEASIBLE: usize = 100;
    if num_all_nodes < MIN_FEASIBLE {
        return num_all_nodes;
    }
    let percent = 50usize.saturating_sub(num_all_nodes / 125).max(5);
    (num_all_nodes * percent / 100).max(MIN_FEASIBLE)
}

/// Nodes that pass every filter, and the reasons of those that do not.
pub fn find_feasible<'a>(
    pod: &Pod,
    pod_info: &PodInfo,
    nodes: &[&'a NodeInfo],
) -> (Vec<&'a NodeInfo>, FitError) {
    let mut start = 0;
    let nobody = Nominator::default();
    find_feasible_from(
        pod,
        pod_info,
        &PodVolumes::default(),
        nodes,
        &nobody,
        &mut start,
    )
    .expect("no volume plugins ran, so no plugin error")
}

/// [`find_feasible`] that stops once [`feasible_nodes_to_find`] nodes fit, starting at `*start` and
/// leaving `*start` after the last node looked at, so successive pods spread over every node (upstream's
/// nextStartNodeIndex). When too few fit, every node is looked at and the diagnosis covers them all.
pub fn find_feasible_from<'a>(
    pod: &Pod,
    pod_info: &PodInfo,
    volumes: &PodVolumes,
    nodes: &[&'a NodeInfo],
    nominator: &Nominator,
    start: &mut usize,
) -> Result<(Vec<&'a NodeInfo>, FitError), ScheduleError> {
    let mut diagnosis = FitError {
        num_all_nodes: nodes.len(),
        ..Default::default()
    };
    let enough = feasible_nodes_to_find(nodes.len());
    let mut feasible = Vec::new();
    let first = if nodes.is_empty() {
        0
    } else {
        *start % nodes.len()
    };
    let mut looked = 0;
    for info in nodes[first..].iter().chain(nodes[..first].iter()) {
        if feasible.len() >= enough {
            break;
        }
        looked += 1;
        let Some(node) = info.node.as_deref() else {
            continue;
        };
        let input = FilterInput {
            pod,
            pod_info,
            node_info: info,
            node,
            volumes,
        };
        match run_filters_with_nominated(&input, nominator) {
            Ok(()) => feasible.push(*info),
            Err(r) if r.code == Code::Error => {
                return Err(ScheduleError::Internal(r.reasons.join(", ")));
            }
            Err(r) => diagnosis.record(&info.name, &r),
        }
    }
    if !nodes.is_empty() {
        *start = (first + looked) % nodes.len();
    }
    Ok((feasible, diagnosis))
}

/// Weighted sum of every scorer per feasible node, in the order given.
pub fn prioritize(
    pod: &Pod,
    pod_info: &PodInfo,
    feasible: &[&NodeInfo],
    cache: &Cache,
    total_nodes: usize,
) -> Vec<i64> {
    let mut totals = vec![0i64; feasible.len()];
    for scorer in SCORERS {
        let mut scores: Vec<i64> = feasible
            .iter()
            .map(|info| {
                let node = info.node.as_deref().expect("feasible nodes are known");
                (scorer.score)(&ScoreInput {
                    pod,
                    pod_info,
                    node_info: info,
                    node,
                    cache,
                    total_nodes,
                })
            })
            .collect();
        normalize(scorer.normalize, &mut scores);
        for (t, s) in totals.iter_mut().zip(scores) {
            *t += s * scorer.weight;
        }
    }
    totals
}

/// Index of a highest score; among equal ones each is equally likely (reservoir sampling, as
/// upstream's selectHost).
pub fn select_host(scores: &[i64], rng: &mut impl Rng) -> Option<usize> {
    let mut best: Option<(usize, i64)> = None;
    let mut ties = 0u32;
    for (i, &s) in scores.iter().enumerate() {
        match best {
            Some((_, b)) if s < b => {}
            Some((_, b)) if s == b => {
                ties += 1;
                if rng.random_range(0..ties) == 0 {
                    best = Some((i, s));
                }
            }
            _ => {
                best = Some((i, s));
                ties = 1;
            }
        }
    }
    best.map(|(i, _)| i)
}

/// The node for this pod.
pub fn schedule(pod: &Pod, cache: &Cache, rng: &mut impl Rng) -> Result<String, ScheduleError> {
    let mut start = 0;
    schedule_from(pod, cache, rng, &mut start)
}

/// [`schedule`] with upstream's rotating start over the node list (see [`find_feasible_from`]).
pub fn schedule_from(
    pod: &Pod,
    cache: &Cache,
    rng: &mut impl Rng,
    start: &mut usize,
) -> Result<String, ScheduleError> {
    let nodes = cache.nodes();
    if nodes.is_empty() {
        return Err(ScheduleError::NoNodes);
    }
    let pod_info = PodInfo::new(pod);
    let volumes = match volume_filters::pre_filter(pod, cache.volumes(), &|claim| {
        cache.claim_in_use(claim)
    }) {
        Ok(v) => v,
        Err(message) => {
            let fit = FitError {
                num_all_nodes: nodes.len(),
                pre_filter: Some(message),
                ..Default::default()
            };
            let preemptor = Preemptor {
                pod,
                info: &pod_info,
                volumes: &PodVolumes::default(),
            };
            return Err(with_post_filter(&preemptor, fit, cache, rng));
        }
    };
    let preemptor = Preemptor {
        pod,
        info: &pod_info,
        volumes: &volumes,
    };
    if let Some(node) = nominated_node_fits(&preemptor, cache)? {
        return Ok(node);
    }
    let (feasible, diagnosis) =
        find_feasible_from(pod, &pod_info, &volumes, &nodes, cache.nominator(), start)?;
    match feasible.len() {
        0 => Err(with_post_filter(&preemptor, diagnosis, cache, rng)),
        1 => Ok(feasible[0].name.clone()),
        _ => {
            let scores = prioritize(pod, &pod_info, &feasible, cache, nodes.len());
            let i = select_host(&scores, rng).expect("feasible is not empty");
            Ok(feasible[i].name.clone())
        }
    }
}

/// upstream's evaluateNominatedNode: a pod nominated to a node (its victims are gone or going)
/// takes that node as soon as it passes the filters, without looking at the others.
fn nominated_node_fits(
    preemptor: &Preemptor,
    cache: &Cache,
) -> Result<Option<String>, ScheduleError> {
    let Some(name) = preemption::nominated_node(preemptor, cache) else {
        return Ok(None);
    };
    let Some((info, node)) = cache
        .node(name)
        .and_then(|info| info.node.as_deref().map(|n| (info, n)))
    else {
        return Ok(None);
    };
    let input = FilterInput {
        pod: preemptor.pod,
        pod_info: preemptor.info,
        node_info: info,
        node,
        volumes: preemptor.volumes,
    };
    match run_filters_with_nominated(&input, cache.nominator()) {
        Ok(()) => Ok(Some(name.to_string())),
        Err(r) if r.code == Code::Error => Err(ScheduleError::Internal(r.reasons.join(", "))),
        Err(_) => Ok(None),
    }
}

/// Runs the PostFilter (preemption) on a FitError.
fn with_post_filter(
    preemptor: &Preemptor,
    mut fit: FitError,
    cache: &Cache,
    rng: &mut impl Rng,
) -> ScheduleError {
    let result = preemption::post_filter(preemptor, &fit, cache, rng);
    fit.post_filter = result.message;
    fit.nomination = result.nomination;
    ScheduleError::Unfit(fit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::Rejection;
    use k8s_openapi::api::core::v1::Node;
    use rand::SeedableRng;
    use serde_json::json;

    fn node(name: &str, cpu: &str, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}
        }))
        .unwrap()
    }

    fn pod(cpu: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}
        }))
        .unwrap()
    }

    fn rng() -> rand::rngs::StdRng {
        rand::rngs::StdRng::seed_from_u64(7)
    }

    #[test]
    fn message_matches_upstream_for_the_issue_example() {
        let mut cache = Cache::default();
        cache.upsert_node(node(
            "cp",
            "8",
            json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
        ));
        cache.upsert_node(node("host1", "2", json!([])));
        cache.upsert_node(node("host2", "2", json!([])));
        let err = schedule(&pod("4"), &cache, &mut rng()).unwrap_err();
        assert_eq!(
            err.message(),
            "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu. \
             preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
    }

    fn with_claim(mut p: Pod, claim: &str) -> Pod {
        p.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(
            json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}}),
        )
        .unwrap()]);
        p
    }

    fn seeds_cluster() -> Cache {
        let mut cache = Cache::default();
        cache.upsert_node(node(
            "host1",
            "8",
            json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
        ));
        cache.upsert_node(node("host2", "2", json!([])));
        cache.upsert_node(node("host3", "2", json!([])));
        let v = cache.volumes_mut();
        v.upsert_claim(
            serde_json::from_value(json!({
                "metadata": {"name": "mysql-data", "namespace": "default",
                             "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                "spec": {"volumeName": "mysql-pv", "storageClassName": "manual"}
            }))
            .unwrap(),
        );
        v.upsert_volume(
            serde_json::from_value(json!({
                "metadata": {"name": "mysql-pv"},
                "spec": {"storageClassName": "manual", "nodeAffinity": {"required": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]}]}}}
            }))
            .unwrap(),
        );
        cache
    }

    #[test]
    fn the_seeds_volume_node_affinity_conflict_reads_as_upstream() {
        let mut cache = seeds_cluster();
        let mysql = with_claim(pod("100m"), "mysql-data");
        let err = schedule(&mysql, &cache, &mut rng()).unwrap_err();
        assert_eq!(
            err.message(),
            "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, \
             2 node(s) had volume node affinity conflict. preemption: 0/3 nodes are available: \
             3 Preemption is not helpful for scheduling."
        );
        // The seeds' fix: label the node.
        let mut host3 = node("host3", "2", json!([]));
        host3.metadata.labels = Some(
            [(
                "topology.kubernetes.io/zone".to_string(),
                "us-east-1a".to_string(),
            )]
            .into(),
        );
        cache.upsert_node(host3);
        assert_eq!(schedule(&mysql, &cache, &mut rng()).unwrap(), "host3");
    }

    #[test]
    fn a_pre_filter_rejection_stands_for_every_node() {
        let cache = seeds_cluster();
        let err = schedule(&with_claim(pod("100m"), "missing"), &cache, &mut rng()).unwrap_err();
        assert_eq!(
            err.message(),
            "0/3 nodes are available: persistentvolumeclaim \"missing\" not found. \
             preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn preemption_distinguishes_resolvable_nodes_and_honours_never() {
        let mut cache = Cache::default();
        cache.upsert_node(node(
            "cp",
            "8",
            json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
        ));
        cache.upsert_node(node("host1", "2", json!([])));
        let mut busy = pod("1500m");
        busy.metadata.name = Some("busy".into());
        cache.assume(&busy, "host1");
        // 1 cpu fits host1's allocatable but not what is left: preemption could help there.
        let err = schedule(&pod("1"), &cache, &mut rng()).unwrap_err();
        assert_eq!(
            err.message(),
            "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }. \
             preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, \
             1 Preemption is not helpful for scheduling."
        );
        let mut never = pod("1");
        never.spec.as_mut().unwrap().preemption_policy = Some("Never".into());
        assert_eq!(
            schedule(&never, &cache, &mut rng()).unwrap_err().message(),
            "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }. \
             preemption: not eligible due to preemptionPolicy=Never."
        );
    }

    #[test]
    fn reasons_sort_as_strings_and_count_every_shortage() {
        let mut e = FitError {
            num_all_nodes: 12,
            ..Default::default()
        };
        let r = |reasons: &[&str]| Rejection {
            code: Code::Unschedulable,
            reasons: reasons.iter().map(|s| s.to_string()).collect(),
        };
        for _ in 0..10 {
            e.record("n", &r(&["Insufficient memory"]));
        }
        e.record("n", &r(&["Insufficient cpu", "Insufficient memory"]));
        e.record(
            "n",
            &r(&["node(s) didn't match Pod's node affinity/selector"]),
        );
        // Go sorts "<count> <reason>" as strings: "1 ..." < "11 ..." .
        assert_eq!(
            e.message(),
            "0/12 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector, 11 Insufficient memory."
        );
    }

    #[test]
    fn no_nodes_has_its_own_message() {
        let err = schedule(&pod("1"), &Cache::default(), &mut rng()).unwrap_err();
        assert_eq!(err, ScheduleError::NoNodes);
        assert_eq!(err.message(), "no nodes available to schedule pods");
    }

    #[test]
    fn picks_the_only_fitting_node() {
        let mut cache = Cache::default();
        cache.upsert_node(node("small", "1", json!([])));
        cache.upsert_node(node("big", "8", json!([])));
        assert_eq!(schedule(&pod("4"), &cache, &mut rng()).unwrap(), "big");
    }

    #[test]
    fn assumed_pods_spread_equal_nodes() {
        let mut cache = Cache::default();
        for n in ["a", "b", "c"] {
            cache.upsert_node(node(n, "4", json!([])));
        }
        let mut r = rng();
        let mut placed = Vec::new();
        for i in 0..3 {
            let mut p = pod("1");
            p.metadata.name = Some(format!("web-{i}"));
            let host = schedule(&p, &cache, &mut r).unwrap();
            cache.assume(&p, &host);
            placed.push(host);
        }
        placed.sort();
        assert_eq!(
            placed,
            ["a", "b", "c"],
            "least-allocated spreads equal nodes"
        );
    }

    #[test]
    fn ties_are_broken_randomly_but_only_among_the_best() {
        let mut r = rng();
        let mut seen = [0u32; 4];
        for _ in 0..400 {
            seen[select_host(&[5, 9, 9, 1], &mut r).unwrap()] += 1;
        }
        assert_eq!(seen[0] + seen[3], 0);
        assert!(
            seen[1] > 100 && seen[2] > 100,
            "both tied nodes chosen: {seen:?}"
        );
        assert_eq!(select_host(&[], &mut r), None);
    }

    #[test]
    fn large_clusters_score_a_share_of_the_nodes() {
        assert_eq!(feasible_nodes_to_find(50), 50);
        assert_eq!(feasible_nodes_to_find(100), 100);
        // 1 000 nodes: 50 - 8 = 42 %.
        assert_eq!(feasible_nodes_to_find(1000), 420);
        // 5 000 nodes: 50 - 40 = 10 %.
        assert_eq!(feasible_nodes_to_find(5000), 500);
        // Never below 5 %, never below 100 nodes.
        assert_eq!(feasible_nodes_to_find(20_000), 1000);
        assert_eq!(feasible_nodes_to_find(150), 100);
    }

    #[test]
    fn the_search_rotates_and_an_infeasible_pod_sees_every_node() {
        let mut cache = Cache::default();
        for i in 0..300 {
            cache.upsert_node(node(&format!("n{i:03}"), "1", json!([])));
        }
        let nodes = cache.nodes();
        let small = pod("100m");
        let info = PodInfo::new(&small);
        let mut start = 0;
        let none = PodVolumes::default();
        let nobody = Nominator::default();
        let (feasible, _) =
            find_feasible_from(&small, &info, &none, &nodes, &nobody, &mut start).unwrap();
        assert_eq!(feasible.len(), feasible_nodes_to_find(300));
        assert_eq!(
            start,
            feasible.len(),
            "the next pod starts after the last node looked at"
        );
        let (again, _) =
            find_feasible_from(&small, &info, &none, &nodes, &nobody, &mut start).unwrap();
        assert_ne!(again[0].name, feasible[0].name);
        let huge = pod("2");
        let info = PodInfo::new(&huge);
        let (fits, diagnosis) =
            find_feasible_from(&huge, &info, &none, &nodes, &nobody, &mut start).unwrap();
        assert!(fits.is_empty());
        assert_eq!(
            diagnosis.message(),
            "0/300 nodes are available: 300 Insufficient cpu."
        );
    }
}
