//! Where a pod's cgroup lives and what limits it carries, as upstream's kubelet lays them out with
//! `--cgroups-per-qos` (its default): every workload pod under one node-level `kubepods` cgroup
//! (bounded by the node's allocatable, so pods together can never starve the kubelet and the system),
//! Guaranteed pods directly in it, Burstable and BestEffort pods in a tier of their own (`burstable`,
//! `besteffort`); each pod in `pod<uid>`, its containers below it (containerd puts them there, from the
//! sandbox's `cgroup_parent`). The pod cgroup carries the pod's own limits (upstream's
//! ResourceConfigForPod): a pod whose containers all declare a memory limit cannot use more than their
//! sum, however its containers share it. Pure functions; [`crate::cgroupfs`] writes them.

use k8s_openapi::api::core::v1::Pod;
use kiln_common::quantity;
use kiln_common::quota;

/// The node-level cgroup every workload pod lives under (upstream's default `kubepods`, at the cgroup
/// root).
pub const KUBEPODS: &str = "/kubepods";
pub const BURSTABLE: &str = "/kubepods/burstable";
pub const BEST_EFFORT: &str = "/kubepods/besteffort";

/// Upstream's CFS period (100 ms) and its smallest quota (1 ms).
pub const CPU_PERIOD: u64 = 100_000;
const MIN_QUOTA: i64 = 1_000;
/// cgroup v1 cpu.shares bounds (upstream's MinShares / MaxShares).
pub const MIN_SHARES: u64 = 2;
const MAX_SHARES: u64 = 262_144;

/// What one cgroup is limited to; None leaves the kernel's default (unlimited).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupResources {
    pub cpu_shares: Option<u64>,
    /// CFS quota in µs per [`CPU_PERIOD`].
    pub cpu_quota: Option<i64>,
    pub memory_limit: Option<i64>,
    pub pids_limit: Option<i64>,
}

/// The QoS tier's cgroup a pod's own cgroup sits in.
pub fn tier(pod: &Pod) -> &'static str {
    match qos_class(pod) {
        "Guaranteed" => KUBEPODS,
        "BestEffort" => BEST_EFFORT,
        _ => BURSTABLE,
    }
}

/// The pod's cgroup: the sandbox's `cgroup_parent`, e.g. `/kubepods/burstable/pod<uid>`.
pub fn pod_cgroup(pod: &Pod) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    format!("{}/pod{uid}", tier(pod))
}

/// The uid a pod cgroup's directory name holds (`pod<uid>`), for sweeping pods that are gone.
pub fn uid_of(dir_name: &str) -> Option<&str> {
    dir_name.strip_prefix("pod").filter(|u| !u.is_empty())
}

/// The pod's QoS class, computed as the API server does.
pub fn qos_class(pod: &Pod) -> &'static str {
    let value = serde_json::to_value(pod).unwrap_or_default();
    quota::qos_class(&value)
}

/// upstream's MilliCPUToShares.
pub fn shares(milli_cpu: i128) -> u64 {
    if milli_cpu <= 0 {
        return MIN_SHARES;
    }
    ((milli_cpu * 1024 / 1000) as u64).clamp(MIN_SHARES, MAX_SHARES)
}

/// upstream's MilliCPUToQuota (a limit of zero: no quota).
pub fn quota_of(milli_cpu: i128) -> Option<i64> {
    (milli_cpu > 0).then(|| ((milli_cpu * CPU_PERIOD as i128 / 1000) as i64).max(MIN_QUOTA))
}

/// Every container (init ones too) declares a limit on `resource`.
fn all_limited(pod: &Pod, resource: &str) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .all(|c| {
            c.resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .is_some_and(|l| l.contains_key(resource))
        })
}

/// The pod as JSON once, for the shared quota code: its QoS class and its effective requests and
/// limits (upstream's PodRequests / PodLimits: the sum over containers, at least the largest init
/// container's, plus the pod overhead).
fn class_and_effective(pod: &Pod) -> (&'static str, quota::Usage, quota::Usage) {
    let value = serde_json::to_value(pod).unwrap_or_default();
    let (requests, limits) = quota::pod_resources(&value);
    (quota::qos_class(&value), requests, limits)
}

fn milli(u: &quota::Usage, resource: &str) -> i128 {
    u.get(resource).map_or(0, |a| a.value.0)
}

/// The pod cgroup's limits (upstream's ResourceConfigForPod): Guaranteed pods get cpu shares, quota
/// and memory limit; Burstable ones shares, and quota / memory limit only where every container
/// declares that limit (else one unlimited container makes the pod unlimited); BestEffort pods the
/// minimum shares. `pod_pids_limit` (`--pod-max-pids`) bounds every pod alike.
pub fn pod_resources(pod: &Pod, pod_pids_limit: Option<i64>) -> CgroupResources {
    let (class, requests, limits) = class_and_effective(pod);
    let shares = shares(milli(&requests, "cpu"));
    let quota = quota_of(milli(&limits, "cpu"));
    let memory = (milli(&limits, "memory") > 0).then(|| (milli(&limits, "memory") / 1000) as i64);
    let mut r = CgroupResources {
        pids_limit: pod_pids_limit.filter(|p| *p > 0),
        ..Default::default()
    };
    match class {
        "Guaranteed" => {
            r.cpu_shares = Some(shares);
            r.cpu_quota = quota;
            r.memory_limit = memory;
        }
        "BestEffort" => r.cpu_shares = Some(MIN_SHARES),
        _ => {
            r.cpu_shares = Some(shares);
            if all_limited(pod, "cpu") {
                r.cpu_quota = quota;
            }
            if all_limited(pod, "memory") {
                r.memory_limit = memory;
            }
        }
    }
    r
}

/// The burstable tier's cpu shares: the sum of its pods' cpu requests (upstream's
/// qosContainerManager), so Burstable pods together weigh what they asked for against Guaranteed ones.
pub fn burstable_shares<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> u64 {
    let total: i128 = pods
        .into_iter()
        .map(class_and_effective)
        .filter(|(class, _, _)| *class == "Burstable")
        .map(|(_, requests, _)| milli(&requests, "cpu"))
        .sum();
    shares(total)
}

/// `kubepods`' limits from what pods may use of the node (capacity, or allocatable when
/// `--enforce-node-allocatable` has `pods`): cpu shares, memory and PIDs (upstream's getCgroupConfig).
pub fn node_resources(cpu: &str, memory: &str, pids: Option<i64>) -> CgroupResources {
    let cpu = quantity::parse(cpu).map_or(0, |m| m.0);
    let memory = quantity::parse(memory).map_or(0, |m| m.0 / 1000);
    CgroupResources {
        cpu_shares: Some(shares(cpu)),
        cpu_quota: None,
        memory_limit: (memory > 0).then_some(memory as i64),
        pids_limit: pids.filter(|p| *p > 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
            "spec": {"containers": containers}
        }))
        .unwrap()
    }

    fn ctr(requests: serde_json::Value, limits: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"name": "c", "image": "i",
            "resources": {"requests": requests, "limits": limits}})
    }

    #[test]
    fn pods_live_in_their_qos_tier() {
        let g = pod(serde_json::json!([ctr(
            serde_json::json!({"cpu": "500m", "memory": "64Mi"}),
            serde_json::json!({"cpu": "500m", "memory": "64Mi"})
        )]));
        assert_eq!(pod_cgroup(&g), "/kubepods/podu-1");
        let b = pod(serde_json::json!([ctr(
            serde_json::json!({"cpu": "100m"}),
            serde_json::json!({})
        )]));
        assert_eq!(pod_cgroup(&b), "/kubepods/burstable/podu-1");
        let be = pod(serde_json::json!([{"name": "c", "image": "i"}]));
        assert_eq!(pod_cgroup(&be), "/kubepods/besteffort/podu-1");
        assert_eq!(uid_of("podu-1"), Some("u-1"));
        assert_eq!(uid_of("burstable"), None);
    }

    #[test]
    fn guaranteed_pods_get_shares_quota_and_memory() {
        let g = pod(serde_json::json!([
            ctr(
                serde_json::json!({"cpu": "250m", "memory": "64Mi"}),
                serde_json::json!({"cpu": "250m", "memory": "64Mi"})
            ),
            ctr(
                serde_json::json!({"cpu": "250m", "memory": "32Mi"}),
                serde_json::json!({"cpu": "250m", "memory": "32Mi"})
            )
        ]));
        assert_eq!(
            pod_resources(&g, Some(1024)),
            CgroupResources {
                cpu_shares: Some(512),
                cpu_quota: Some(50_000),
                memory_limit: Some(96 << 20),
                pids_limit: Some(1024),
            }
        );
    }

    #[test]
    fn one_unlimited_container_leaves_a_burstable_pod_unlimited() {
        let b = pod(serde_json::json!([
            ctr(
                serde_json::json!({"cpu": "100m", "memory": "16Mi"}),
                serde_json::json!({"cpu": "200m", "memory": "32Mi"})
            ),
            ctr(serde_json::json!({"memory": "16Mi"}), serde_json::json!({}))
        ]));
        assert_eq!(
            pod_resources(&b, None),
            CgroupResources {
                cpu_shares: Some(102),
                cpu_quota: None,
                memory_limit: None,
                pids_limit: None,
            }
        );
        let limited = pod(serde_json::json!([ctr(
            serde_json::json!({"cpu": "100m", "memory": "16Mi"}),
            serde_json::json!({"cpu": "200m", "memory": "32Mi"})
        )]));
        let r = pod_resources(&limited, Some(-1));
        assert_eq!(r.cpu_quota, Some(20_000));
        assert_eq!(r.memory_limit, Some(32 << 20));
        assert_eq!(r.pids_limit, None, "-1: unlimited, as upstream's default");
    }

    #[test]
    fn best_effort_pods_get_the_minimum_shares() {
        let be = pod(serde_json::json!([{"name": "c", "image": "i"}]));
        assert_eq!(
            pod_resources(&be, None),
            CgroupResources {
                cpu_shares: Some(MIN_SHARES),
                ..Default::default()
            }
        );
    }

    #[test]
    fn init_containers_raise_the_pod_to_their_largest_need() {
        let mut p = pod(serde_json::json!([ctr(
            serde_json::json!({"cpu": "100m", "memory": "16Mi"}),
            serde_json::json!({"cpu": "100m", "memory": "16Mi"})
        )]));
        let init: k8s_openapi::api::core::v1::Container = serde_json::from_value(ctr(
            serde_json::json!({"cpu": "1", "memory": "64Mi"}),
            serde_json::json!({"cpu": "1", "memory": "64Mi"}),
        ))
        .unwrap();
        p.spec.as_mut().unwrap().init_containers = Some(vec![init]);
        let r = pod_resources(&p, None);
        assert_eq!(r.cpu_shares, Some(1024));
        assert_eq!(r.cpu_quota, Some(100_000));
        assert_eq!(r.memory_limit, Some(64 << 20));
    }

    #[test]
    fn the_burstable_tier_weighs_its_pods_requests() {
        let a = pod(serde_json::json!([ctr(
            serde_json::json!({"cpu": "300m"}),
            serde_json::json!({})
        )]));
        let b = pod(serde_json::json!([ctr(
            serde_json::json!({"cpu": "200m", "memory": "1Mi"}),
            serde_json::json!({"memory": "2Mi"})
        )]));
        let g = pod(serde_json::json!([ctr(
            serde_json::json!({"cpu": "4", "memory": "1Mi"}),
            serde_json::json!({"cpu": "4", "memory": "1Mi"})
        )]));
        assert_eq!(burstable_shares([&a, &b, &g]), 512);
        assert_eq!(burstable_shares([&g]), MIN_SHARES);
    }

    #[test]
    fn kubepods_is_bounded_by_what_pods_may_use() {
        let r = node_resources("1500m", "1Gi", Some(4096));
        assert_eq!(r.cpu_shares, Some(1536));
        assert_eq!(r.memory_limit, Some(1 << 30));
        assert_eq!(r.pids_limit, Some(4096));
        assert_eq!(r.cpu_quota, None);
    }
}
