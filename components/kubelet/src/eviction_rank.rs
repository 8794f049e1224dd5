//! Which pod goes first, as upstream ranks them: under disk pressure (`rankDiskPressureFunc`) and memory
//! pressure (`rankMemoryPressure`) pods using more ephemeral storage / memory than they request, then
//! lower priority, then the larger usage beyond the request; under PID pressure (`rankPIDPressure`) lower
//! priority, then more processes. Also which pods are never evicted (critical ones) and the message an
//! evicted pod carries.

use std::cmp::Ordering;

use k8s_openapi::api::core::v1::Pod;

use super::thresholds::{format_bytes, parse_bytes, Signal};
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
    /// Its memory working set (measured under memory pressure only).
    pub memory: u64,
}

/// A pod's ephemeral storage, in bytes, as measured on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodUsage {
    /// The pod's directory on the kubelet's filesystem: emptyDir (disk medium) and the files the kubelet
    /// writes for it. Memory-backed volumes are other filesystems and do not count.
    pub volumes: u64,
    pub containers: Vec<ContainerUsage>,
    /// The pod cgroup's memory working set (measured under memory pressure only).
    pub memory: u64,
    /// The pod cgroup's processes (measured under PID pressure only).
    pub processes: u64,
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

fn container_request(c: &k8s_openapi::api::core::v1::Container, resource: &str) -> u64 {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(resource))
        .and_then(|q| parse_bytes(&q.0).ok())
        .unwrap_or(0)
}

/// The pod's request of `resource`: its containers' sum, or the largest init container's if that is
/// more (upstream's effective pod request).
pub fn pod_request(pod: &Pod, resource: &str) -> u64 {
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    let sum: u64 = spec
        .containers
        .iter()
        .map(|c| container_request(c, resource))
        .sum();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| container_request(c, resource))
        .max()
        .unwrap_or(0);
    sum.max(init)
}

pub fn ephemeral_request(pod: &Pod) -> u64 {
    pod_request(pod, "ephemeral-storage")
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
    over_request_then_priority(a, b, (ua, ra), (ub, rb))
}

/// The same order for memory, on the pods' working sets and memory requests.
pub fn compare_memory(a: &Candidate, b: &Candidate) -> Ordering {
    let (ua, ub) = (a.usage.memory, b.usage.memory);
    let (ra, rb) = (pod_request(&a.pod, "memory"), pod_request(&b.pod, "memory"));
    over_request_then_priority(a, b, (ua, ra), (ub, rb))
}

/// Under PID pressure: lower priority first, then more processes.
pub fn compare_pids(a: &Candidate, b: &Candidate) -> Ordering {
    priority(&a.pod)
        .cmp(&priority(&b.pod))
        .then_with(|| b.usage.processes.cmp(&a.usage.processes))
}

fn over_request_then_priority(
    a: &Candidate,
    b: &Candidate,
    (ua, ra): (u64, u64),
    (ub, rb): (u64, u64),
) -> Ordering {
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

/// Candidates in eviction order for `signal` (disk signals measured as `m`).
pub fn rank_for(mut pods: Vec<Candidate>, signal: Signal, m: Measure) -> Vec<Candidate> {
    match signal {
        Signal::MemoryAvailable => pods.sort_by(compare_memory),
        Signal::PidAvailable => pods.sort_by(compare_pids),
        Signal::NodeFsAvailable | Signal::ImageFsAvailable => pods.sort_by(|a, b| compare(a, b, m)),
    }
    pods
}

/// Upstream's eviction message for disk pressure.
pub fn eviction_message(pod: &Pod, usage: &PodUsage, threshold: u64, available: u64) -> String {
    eviction_message_for(Signal::NodeFsAvailable, pod, usage, threshold, available)
}

/// Upstream's eviction message: the resource, the threshold and what was available, and every container
/// using more than it requested (for ephemeral storage its writable layer and logs, for memory its
/// working set; upstream names no containers for PIDs).
pub fn eviction_message_for(
    signal: Signal,
    pod: &Pod,
    usage: &PodUsage,
    threshold: u64,
    available: u64,
) -> String {
    let resource = signal.resource();
    let mut msg = format!(
        "The node was low on resource: {resource}. Threshold quantity: {}, available: {}. ",
        signal.format(threshold),
        signal.format(available)
    );
    if signal == Signal::PidAvailable {
        return msg;
    }
    let containers = pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
    for c in containers {
        let Some(u) = usage.containers.iter().find(|u| u.name == c.name) else {
            continue;
        };
        let used = match signal {
            Signal::MemoryAvailable => u.memory,
            _ => u.rootfs + u.logs,
        };
        let request = container_request(c, resource);
        if used > request {
            msg.push_str(&format!(
                "Container {} was using {}, request is {}, has larger consumption of {resource}. ",
                c.name,
                format_bytes(used),
                format_bytes(request)
            ));
        }
    }
    msg
}
