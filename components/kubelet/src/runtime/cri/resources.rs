//! A container's CRI `LinuxContainerResources` from its requests and limits, as upstream's kubelet
//! computes them (kuberuntime's calculateLinuxResources and qos.GetContainerOOMScoreAdjust):
//! cpu shares from the cpu request (2 when none), a CFS quota over a 100 ms period from the cpu
//! limit, the memory limit in bytes, and an OOM score by QoS class (Guaranteed and critical pods
//! -997, BestEffort 1000, Burstable between by the share of node memory requested). containerd
//! writes them into the container's cgroup, so a limit is enforced: a container over its memory
//! limit is OOM-killed.

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use kiln_common::quantity;

use crate::qos_cgroups;

/// OOM score adjustments upstream gives by class.
const GUARANTEED_OOM: i64 = -997;
const BEST_EFFORT_OOM: i64 = 1000;
/// Priorities at or above this are system-critical (scheduling.SystemCriticalPriority).
const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

fn milli(c: &Container, list: &str, resource: &str) -> Option<i128> {
    let r = c.resources.as_ref()?;
    let l = if list == "limits" {
        &r.limits
    } else {
        &r.requests
    };
    let q = l.as_ref()?.get(resource)?;
    quantity::parse(&q.0).ok().map(|m| m.0)
}

/// The pod's QoS class, computed as the API server does.
pub fn qos_class(pod: &Pod) -> &'static str {
    qos_cgroups::qos_class(pod)
}

/// upstream's GetContainerOOMScoreAdjust.
fn oom_score_adj(pod: &Pod, c: &Container, memory_capacity: i128) -> i64 {
    let critical = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority)
        .is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY);
    match qos_class(pod) {
        _ if critical => GUARANTEED_OOM,
        "Guaranteed" => GUARANTEED_OOM,
        "BestEffort" => BEST_EFFORT_OOM,
        _ => {
            let request = milli(c, "requests", "memory").unwrap_or(0) / 1000;
            let adj = if memory_capacity > 0 {
                1000 - (1000 * request / memory_capacity) as i64
            } else {
                BEST_EFFORT_OOM - 1
            };
            // Burstable stays strictly between Guaranteed and BestEffort.
            adj.clamp(1000 + GUARANTEED_OOM, BEST_EFFORT_OOM - 1)
        }
    }
}

/// The resources to run `c` of `pod` with, on a node of `memory_capacity` bytes.
pub fn linux_resources(
    pod: &Pod,
    c: &Container,
    memory_capacity: i128,
) -> cri::LinuxContainerResources {
    let cpu_request = milli(c, "requests", "cpu").or_else(|| milli(c, "limits", "cpu"));
    let mut r = cri::LinuxContainerResources {
        cpu_shares: qos_cgroups::shares(cpu_request.unwrap_or(0)) as i64,
        oom_score_adj: oom_score_adj(pod, c, memory_capacity),
        ..Default::default()
    };
    if let Some(quota) = milli(c, "limits", "cpu").and_then(qos_cgroups::quota_of) {
        r.cpu_period = qos_cgroups::CPU_PERIOD as i64;
        r.cpu_quota = quota;
    }
    if let Some(limit) = milli(c, "limits", "memory") {
        r.memory_limit_in_bytes = (limit / 1000) as i64;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(resources: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]},
        }))
        .unwrap()
    }

    const GI: i128 = 1 << 30;

    #[test]
    fn guaranteed_burstable_and_best_effort() {
        let g = pod(
            serde_json::json!({"requests": {"cpu": "500m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "64Mi"}}),
        );
        let r = linux_resources(&g, &g.spec.as_ref().unwrap().containers[0], 4 * GI);
        assert_eq!(r.cpu_shares, 512);
        assert_eq!((r.cpu_period, r.cpu_quota), (100_000, 50_000));
        assert_eq!(r.memory_limit_in_bytes, 64 << 20);
        assert_eq!(r.oom_score_adj, -997);

        let b = pod(serde_json::json!({"requests": {"cpu": "100m", "memory": "1Gi"}}));
        let r = linux_resources(&b, &b.spec.as_ref().unwrap().containers[0], 4 * GI);
        assert_eq!(r.cpu_shares, 102);
        assert_eq!(
            (r.cpu_period, r.cpu_quota, r.memory_limit_in_bytes),
            (0, 0, 0)
        );
        assert_eq!(r.oom_score_adj, 750);

        let e = pod(serde_json::json!({}));
        let r = linux_resources(&e, &e.spec.as_ref().unwrap().containers[0], 4 * GI);
        assert_eq!((r.cpu_shares, r.oom_score_adj), (2, 1000));
    }

    #[test]
    fn tiny_quota_and_large_requests_are_bounded() {
        let p = pod(serde_json::json!({"requests": {"memory": "8Gi"}, "limits": {"cpu": "1m"}}));
        let r = linux_resources(&p, &p.spec.as_ref().unwrap().containers[0], 4 * GI);
        assert_eq!(r.cpu_quota, 1_000);
        assert_eq!(r.cpu_shares, 2);
        // Requesting more than the node has still leaves it above Guaranteed pods.
        assert_eq!(r.oom_score_adj, 3);
    }
}
