//! Score plugins as a list with upstream's default weights. Each returns 0..=100 per node; some are
//! normalized across the feasible nodes afterwards (upstream's NormalizeScore), then weighted and
//! summed by the algorithm.

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::cache::Cache;
use crate::node_info::NodeInfo;
use crate::pod_info::PodInfo;
use kiln_common::node_matching::{term_matches, tolerates};

pub const MAX_NODE_SCORE: i64 = 100;

pub struct ScoreInput<'a> {
    pub pod: &'a Pod,
    pub pod_info: &'a PodInfo,
    pub node_info: &'a NodeInfo,
    pub node: &'a Node,
    /// Image sizes and spread across nodes (ImageLocality).
    pub cache: &'a Cache,
    pub total_nodes: usize,
}

/// How raw scores are rescaled across the feasible nodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Normalize {
    None,
    /// score * 100 / max (all 0 when max is 0).
    Max,
    /// 100 - score * 100 / max (all 100 when max is 0): fewer is better.
    ReverseMax,
}

pub struct Scorer {
    pub name: &'static str,
    pub weight: i64,
    pub score: fn(&ScoreInput) -> i64,
    pub normalize: Normalize,
}

/// The enabled scores with upstream's default-profile weights.
pub static SCORERS: &[Scorer] = &[
    Scorer {
        name: "TaintToleration",
        weight: 3,
        score: prefer_no_schedule_taints,
        normalize: Normalize::ReverseMax,
    },
    Scorer {
        name: "NodeAffinity",
        weight: 2,
        score: preferred_node_affinity,
        normalize: Normalize::Max,
    },
    Scorer {
        name: "NodeResourcesFit",
        weight: 1,
        score: least_allocated,
        normalize: Normalize::None,
    },
    Scorer {
        name: "NodeResourcesBalancedAllocation",
        weight: 1,
        score: balanced_allocation,
        normalize: Normalize::None,
    },
    Scorer {
        name: "ImageLocality",
        weight: 1,
        score: image_locality,
        normalize: Normalize::None,
    },
];

pub fn normalize(kind: Normalize, scores: &mut [i64]) {
    let max = scores.iter().copied().max().unwrap_or(0);
    match kind {
        Normalize::None => {}
        Normalize::Max => {
            if max > 0 {
                scores
                    .iter_mut()
                    .for_each(|s| *s = *s * MAX_NODE_SCORE / max);
            }
        }
        Normalize::ReverseMax => {
            if max == 0 {
                scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
            } else {
                scores
                    .iter_mut()
                    .for_each(|s| *s = MAX_NODE_SCORE - *s * MAX_NODE_SCORE / max);
            }
        }
    }
}

/// Number of PreferNoSchedule taints the pod does not tolerate (fewer is better).
fn prefer_no_schedule_taints(i: &ScoreInput) -> i64 {
    let tolerations: Vec<_> = i
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| {
            matches!(
                t.effect.as_deref(),
                None | Some("") | Some("PreferNoSchedule")
            )
        })
        .collect();
    let taints = i.node.spec.as_ref().and_then(|s| s.taints.as_ref());
    taints
        .into_iter()
        .flatten()
        .filter(|t| t.effect == "PreferNoSchedule")
        .filter(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
        .count() as i64
}

/// Sum of the weights of the preferred terms this node matches.
fn preferred_node_affinity(i: &ScoreInput) -> i64 {
    let preferred = i
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        });
    preferred
        .into_iter()
        .flatten()
        .filter(|p| p.weight != 0 && term_matches(&p.preference, i.node))
        .map(|p| p.weight as i64)
        .sum()
}

/// Requested (with the pod, upstream's non-zero defaults) against allocatable for cpu and memory.
fn requested_with_pod(i: &ScoreInput) -> [(i64, i64); 2] {
    let (cpu, mem) = i.node_info.non_zero_requested;
    [
        (
            cpu + i.pod_info.non_zero.0,
            i.node_info.allocatable.milli_cpu,
        ),
        (mem + i.pod_info.non_zero.1, i.node_info.allocatable.memory),
    ]
}

fn least_allocated(i: &ScoreInput) -> i64 {
    let per: Vec<i64> = requested_with_pod(i)
        .iter()
        .map(|&(req, cap)| {
            if cap == 0 || req > cap {
                0
            } else {
                (cap - req) * MAX_NODE_SCORE / cap
            }
        })
        .collect();
    per.iter().sum::<i64>() / per.len() as i64
}

/// 100 × (1 − standard deviation of the cpu and memory fractions): favours nodes whose resources
/// stay in proportion after placing the pod.
fn balanced_allocation(i: &ScoreInput) -> i64 {
    let alloc = &i.node_info.allocatable;
    let used = &i.node_info.requested;
    let req = &i.pod_info.requests;
    let fractions: Vec<f64> = [
        (used.milli_cpu + req.milli_cpu, alloc.milli_cpu),
        (used.memory + req.memory, alloc.memory),
    ]
    .iter()
    .filter(|(_, cap)| *cap > 0)
    .map(|&(r, cap)| (r as f64 / cap as f64).min(1.0))
    .collect();
    let std = if fractions.len() == 2 {
        ((fractions[0] - fractions[1]) / 2.0).abs()
    } else {
        0.0
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

const MB: i64 = 1024 * 1024;
const IMAGE_MIN_THRESHOLD: i64 = 23 * MB;
const IMAGE_MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// Sizes of the pod's images already on the node, scaled by how widely each image is spread (so a
/// pod does not pile onto the one node that happens to have it), then mapped to 0..=100.
fn image_locality(i: &ScoreInput) -> i64 {
    let Some(spec) = i.pod.spec.as_ref() else {
        return 0;
    };
    let on_node: Vec<String> = i
        .node
        .status
        .as_ref()
        .and_then(|s| s.images.as_ref())
        .into_iter()
        .flatten()
        .flat_map(|img| img.names.iter().flatten())
        .map(|n| crate::cache::normalized_image(n))
        .collect();
    let containers: Vec<_> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .collect();
    let mut sum = 0i64;
    for c in &containers {
        let Some(image) = c.image.as_deref() else {
            continue;
        };
        if !on_node.contains(&crate::cache::normalized_image(image)) {
            continue;
        }
        if let Some((size, nodes)) = i.cache.image_state(image) {
            let spread = nodes as f64 / i.total_nodes.max(1) as f64;
            sum += (size as f64 * spread) as i64;
        }
    }
    let max = IMAGE_MAX_CONTAINER_THRESHOLD * containers.len().max(1) as i64;
    let clamped = sum.clamp(IMAGE_MIN_THRESHOLD, max);
    MAX_NODE_SCORE * (clamped - IMAGE_MIN_THRESHOLD) / (max - IMAGE_MIN_THRESHOLD)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, extra: serde_json::Value) -> Node {
        let mut v = json!({
            "metadata": {"name": name, "labels": {"zone": "a"}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
        });
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            for (k, val) in e {
                o.insert(k.clone(), val.clone());
            }
        }
        serde_json::from_value(v).unwrap()
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "default"}, "spec": spec}),
        )
        .unwrap()
    }

    fn score(name: &str, p: &Pod, n: Node) -> i64 {
        let mut cache = Cache::default();
        cache.upsert_node(n.clone());
        let info = NodeInfo::new(n.clone());
        let pi = PodInfo::new(p);
        let scorer = SCORERS.iter().find(|s| s.name == name).unwrap();
        (scorer.score)(&ScoreInput {
            pod: p,
            pod_info: &pi,
            node_info: &info,
            node: &n,
            cache: &cache,
            total_nodes: 1,
        })
    }

    fn with_requests(cpu: &str, mem: &str) -> Pod {
        pod(json!({"containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}))
    }

    #[test]
    fn least_allocated_prefers_free_nodes() {
        // 1 of 4 cpu (75) and 2 of 8 Gi (75).
        assert_eq!(
            score(
                "NodeResourcesFit",
                &with_requests("1", "2Gi"),
                node("n", json!({}))
            ),
            75
        );
        // No requests: upstream's 100m / 200Mi defaults.
        let empty = pod(json!({"containers": [{"name": "c", "image": "x"}]}));
        // cpu (4000-100)/4000 → 97, memory (8Gi-200Mi)/8Gi → 97.
        assert_eq!(score("NodeResourcesFit", &empty, node("n", json!({}))), 97);
    }

    #[test]
    fn balanced_allocation_penalizes_skew() {
        assert_eq!(
            score(
                "NodeResourcesBalancedAllocation",
                &with_requests("2", "4Gi"),
                node("n", json!({}))
            ),
            100
        );
        // cpu 100 %, memory 0 %: std 0.5.
        assert_eq!(
            score(
                "NodeResourcesBalancedAllocation",
                &with_requests("4", "0"),
                node("n", json!({}))
            ),
            50
        );
    }

    #[test]
    fn preferred_affinity_sums_matching_weights() {
        let p = pod(json!({"containers": [], "affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
            {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}}
        ]}}}));
        assert_eq!(score("NodeAffinity", &p, node("n", json!({}))), 10);
    }

    #[test]
    fn prefer_no_schedule_taints_are_counted() {
        let n = node(
            "n",
            json!({"spec": {"taints": [
            {"key": "a", "effect": "PreferNoSchedule"}, {"key": "b", "effect": "PreferNoSchedule"},
            {"key": "c", "effect": "NoSchedule"}]}}),
        );
        assert_eq!(
            score(
                "TaintToleration",
                &pod(json!({"containers": []})),
                n.clone()
            ),
            2
        );
        let tolerant =
            pod(json!({"containers": [], "tolerations": [{"key": "a", "operator": "Exists"}]}));
        assert_eq!(score("TaintToleration", &tolerant, n), 1);
    }

    #[test]
    fn image_locality_scores_present_large_images() {
        let n = node(
            "n",
            json!({"status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "images": [{"names": ["registry.local/big:1"], "sizeBytes": 523 * MB}]}}),
        );
        let p = pod(json!({"containers": [{"name": "c", "image": "registry.local/big:1"}]}));
        // (523 - 23) / (1000 - 23) of 100.
        assert_eq!(score("ImageLocality", &p, n.clone()), 51);
        let other = pod(json!({"containers": [{"name": "c", "image": "registry.local/small:1"}]}));
        assert_eq!(score("ImageLocality", &other, n), 0);
    }

    #[test]
    fn normalization() {
        let mut s = [0, 2, 4];
        normalize(Normalize::Max, &mut s);
        assert_eq!(s, [0, 50, 100]);
        let mut t = [0, 1, 2];
        normalize(Normalize::ReverseMax, &mut t);
        assert_eq!(t, [100, 50, 0]);
        let mut z = [0, 0];
        normalize(Normalize::ReverseMax, &mut z);
        assert_eq!(z, [100, 100]);
    }
}
