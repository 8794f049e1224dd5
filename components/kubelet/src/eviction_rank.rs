//! Which pod goes first under disk pressure, as upstream's `rankDiskPressureFunc`: pods using more
//! ephemeral storage than they request, then lower priority, then the larger usage beyond the request.
//! Also which pods are never evicted (critical ones) and the message an evicted pod carries.

use std::cmp::Ordering;

use k8s_openapi::api::core::v1::Pod;

use super::thresholds::{format_bytes, parse_bytes};
use crate::workloads::is_static_or_mirror;

/// Upstream's `SystemCriticalPriority`: pods at or above it are critical.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
const CRITICAL_CLASSES: &[&str] = &["system-node-critical", "system-cluster-critical"];

/// One container's share of a pod's ephemeral storage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerUsage {
    pub name: String,
    /// Its writable layer.
    pub rootfs: u64,
    /// Its log files.
    pub logs: u64,
}

/// A pod's ephemeral storage, in bytes, as measured on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodUsage {
    /// The pod's directory on the kubelet's filesystem: emptyDir (disk medium) and the files the kubelet
    /// writes for it. Memory-backed volumes are other filesystems and do not count.
    pub volumes: u64,
    pub containers: Vec<ContainerUsage>,
}

/// Which of a pod's usages count for a signal (upstream's `fsStatsToMeasure`): with a dedicated image
/// filesystem, nodefs pressure is relieved by volumes and logs and imagefs pressure by writable layers;
/// on one shared filesystem everything counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    All,
    VolumesAndLogs,
    Rootfs,
}

impl PodUsage {
    pub fn total(&self, m: Measure) -> u64 {
        let rootfs: u64 = self.containers.iter().map(|c| c.rootfs).sum();
        let logs: u64 = self.containers.iter().map(|c| c.logs).sum();
        match m {
            Measure::All => self.volumes + rootfs + logs,
            Measure::VolumesAndLogs => self.volumes + logs,
            Measure::Rootfs => rootfs,
        }
    }
}

fn container_request(c: &k8s_openapi::api::core::v1::Container) -> u64 {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("ephemeral-storage"))
        .and_then(|q| parse_bytes(&q.0).ok())
        .unwrap_or(0)
}

/// The pod's ephemeral-storage request: its containers' sum, or the largest init container's if that is
/// more (upstream's effective pod request).
pub fn ephemeral_request(pod: &Pod) -> u64 {
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    let sum: u64 = spec.containers.iter().map(container_request).sum();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(container_request)
        .max()
        .unwrap_or(0);
    sum.max(init)
}

pub fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Static and mirror pods, and pods at system-critical priority, are never evicted (upstream's
/// `IsCriticalPod`). The class name counts too: an API server without the Priority admission plugin
/// leaves `spec.priority` empty.
pub fn is_critical(pod: &Pod) -> bool {
    let class = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref());
    is_static_or_mirror(pod)
        || priority(pod) >= SYSTEM_CRITICAL_PRIORITY
        || class.is_some_and(|c| CRITICAL_CLASSES.contains(&c))
}

/// A pod with what it uses.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub pod: Pod,
    pub usage: PodUsage,
}

/// Upstream's order: exceeding requests first, then lower priority, then larger usage over request.
pub fn compare(a: &Candidate, b: &Candidate, m: Measure) -> Ordering {
    let (ua, ub) = (a.usage.total(m), b.usage.total(m));
    let (ra, rb) = (ephemeral_request(&a.pod), ephemeral_request(&b.pod));
    let exceeds = |u: u64, r: u64| u > r;
    exceeds(ub, rb)
        .cmp(&exceeds(ua, ra))
        .then_with(|| priority(&a.pod).cmp(&priority(&b.pod)))
        .then_with(|| {
            let over = |u: u64, r: u64| i128::from(u) - i128::from(r);
            over(ub, rb).cmp(&over(ua, ra))
        })
}

/// Candidates in eviction order (stable: equal pods keep their given order).
pub fn rank(mut pods: Vec<Candidate>, m: Measure) -> Vec<Candidate> {
    pods.sort_by(|a, b| compare(a, b, m));
    pods
}

/// Upstream's eviction message: the resource, the threshold and what was available, and every container
/// using more than it requested (writable layer and logs).
pub fn eviction_message(pod: &Pod, usage: &PodUsage, threshold: u64, available: u64) -> String {
    let mut msg = format!(
        "The node was low on resource: ephemeral-storage. Threshold quantity: {}, available: {}. ",
        format_bytes(threshold),
        format_bytes(available)
    );
    let containers = pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
    for c in containers {
        let Some(u) = usage.containers.iter().find(|u| u.name == c.name) else {
            continue;
        };
        let used = u.rootfs + u.logs;
        let request = container_request(c);
        if used > request {
            msg.push_str(&format!(
                "Container {} was using {}, request is {}, has larger consumption of ephemeral-storage. ",
                c.name,
                format_bytes(used),
                format_bytes(request)
            ));
        }
    }
    msg
}
