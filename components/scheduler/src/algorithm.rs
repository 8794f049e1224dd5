//! One scheduling decision, pure: filter every node, score the feasible ones, pick the best (ties
//! broken at random). A pod that fits nowhere yields a `FitError` whose message is upstream's.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use rand::Rng;

use crate::cache::{Cache, NodeInfo, PodInfo};
use crate::filters::{run_filters, FilterInput};
use crate::scores::{normalize, ScoreInput, SCORERS};

/// upstream's ErrNoNodesAvailable.
pub const NO_NODES_MESSAGE: &str = "no nodes available to schedule pods";

#[derive(Debug, Clone, PartialEq)]
pub enum ScheduleError {
    NoNodes,
    Unfit(FitError),
}

impl ScheduleError {
    /// The FailedScheduling message, word for word as kube-scheduler writes it.
    pub fn message(&self) -> String {
        match self {
            ScheduleError::NoNodes => NO_NODES_MESSAGE.to_string(),
            ScheduleError::Unfit(e) => e.message(),
        }
    }
}

/// How many nodes gave each reason.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FitError {
    pub num_all_nodes: usize,
    pub reasons: BTreeMap<String, usize>,
}

impl FitError {
    pub fn record(&mut self, reasons: &[String]) {
        for r in reasons {
            *self.reasons.entry(r.clone()).or_insert(0) += 1;
        }
    }

    /// "0/3 nodes are available: 1 node(s) had untolerated taint {…}, 2 Insufficient cpu." —
    /// "<count> <reason>" strings sorted as strings (Go's sort.Strings), joined by ", ".
    pub fn message(&self) -> String {
        let mut parts: Vec<String> = self
            .reasons
            .iter()
            .map(|(reason, count)| format!("{count} {reason}"))
            .collect();
        parts.sort();
        let mut msg = format!("0/{} nodes are available:", self.num_all_nodes);
        if !parts.is_empty() {
            msg.push_str(&format!(" {}.", parts.join(", ")));
        }
        msg
    }
}

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
    find_feasible_from(pod, pod_info, nodes, &mut start)
}

/// [`find_feasible`] that stops once [`feasible_nodes_to_find`] nodes fit, starting at `*start` and
/// leaving `*start` after the last node looked at, so successive pods spread over every node (upstream's
/// nextStartNodeIndex). When too few fit, every node is looked at and the diagnosis covers them all.
pub fn find_feasible_from<'a>(
    pod: &Pod,
    pod_info: &PodInfo,
    nodes: &[&'a NodeInfo],
    start: &mut usize,
) -> (Vec<&'a NodeInfo>, FitError) {
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
        };
        match run_filters(&input) {
            Ok(()) => feasible.push(*info),
            Err(reasons) => diagnosis.record(&reasons),
        }
    }
    if !nodes.is_empty() {
        *start = (first + looked) % nodes.len();
    }
    (feasible, diagnosis)
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
    let (feasible, diagnosis) = find_feasible_from(pod, &pod_info, &nodes, start);
    match feasible.len() {
        0 => Err(ScheduleError::Unfit(diagnosis)),
        1 => Ok(feasible[0].name.clone()),
        _ => {
            let scores = prioritize(pod, &pod_info, &feasible, cache, nodes.len());
            let i = select_host(&scores, rng).expect("feasible is not empty");
            Ok(feasible[i].name.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu."
        );
    }

    #[test]
    fn reasons_sort_as_strings_and_count_every_shortage() {
        let mut e = FitError {
            num_all_nodes: 12,
            ..Default::default()
        };
        for _ in 0..10 {
            e.record(&["Insufficient memory".to_string()]);
        }
        e.record(&["Insufficient cpu".into(), "Insufficient memory".into()]);
        e.record(&["node(s) didn't match Pod's node affinity/selector".into()]);
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
        let (feasible, _) = find_feasible_from(&small, &info, &nodes, &mut start);
        assert_eq!(feasible.len(), feasible_nodes_to_find(300));
        assert_eq!(
            start,
            feasible.len(),
            "the next pod starts after the last node looked at"
        );
        let (again, _) = find_feasible_from(&small, &info, &nodes, &mut start);
        assert_ne!(again[0].name, feasible[0].name);
        let huge = pod("2");
        let info = PodInfo::new(&huge);
        let (none, diagnosis) = find_feasible_from(&huge, &info, &nodes, &mut start);
        assert!(none.is_empty());
        assert_eq!(
            diagnosis.message(),
            "0/300 nodes are available: 300 Insufficient cpu."
        );
    }
}
