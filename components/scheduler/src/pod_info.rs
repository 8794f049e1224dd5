//! What the scheduler knows about one pod, computed once from the object: its key, requests, host
//! ports, claims and what preemption weighs. Below the cache, the filters and the nominator, which
//! all hold these.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use crate::resources::{non_zero_requests, pod_requests, Resources};
use crate::volume_cache::{claim_key, ClaimKey};
use crate::volume_claims::{pod_claims, pod_namespace};

/// "namespace/name".
pub type PodKey = String;

pub fn pod_key(pod: &Pod) -> PodKey {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

impl HostPort {
    /// Same protocol and port, and the same IP or either one the wildcard.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        let wildcard = |ip: &str| ip.is_empty() || ip == "0.0.0.0" || ip == "::";
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || wildcard(&self.ip) || wildcard(&other.ip))
    }
}

/// upstream's PodPriority: spec.priority, 0 when the Priority admission did not set one.
pub fn pod_priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// upstream's podTerminatingByPreemption: being deleted, with the DisruptionTarget condition the
/// scheduler's preemption adds.
fn terminating_by_preemption(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
            .is_some_and(|c| {
                c.status == "True" && c.reason.as_deref() == Some("PreemptionByScheduler")
            })
}

/// What the scheduler needs to know about a pod, computed once.
#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    pub key: PodKey,
    pub uid: String,
    pub requests: Resources,
    pub non_zero: (i64, i64),
    pub host_ports: Vec<HostPort>,
    /// The claims the pod uses (ReadWriteOncePod claims may have one user in the cluster).
    pub claims: Vec<ClaimKey>,
    /// What preemption weighs: priority, labels (for PodDisruptionBudgets), start time (among
    /// equals the longer-running pod is more important), deletion state.
    pub priority: i32,
    pub labels: BTreeMap<String, String>,
    pub start_time: Option<Timestamp>,
    /// metadata.deletionTimestamp is set: the pod is terminating (it still holds its resources).
    pub deleting: bool,
    /// Terminating because a preemption chose it (DisruptionTarget=True, PreemptionByScheduler).
    pub preempted: bool,
}

impl PodInfo {
    pub fn new(pod: &Pod) -> PodInfo {
        let host_ports = pod
            .spec
            .iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .flat_map(|c| c.ports.iter().flatten())
            .filter(|p| p.host_port.is_some_and(|h| h > 0))
            .map(|p| HostPort {
                ip: p.host_ip.clone().unwrap_or_default(),
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_string()),
                port: p.host_port.unwrap_or_default(),
            })
            .collect();
        let claims = pod_claims(pod)
            .into_iter()
            .map(|c| claim_key(pod_namespace(pod), &c.name))
            .collect();
        PodInfo {
            claims,
            key: pod_key(pod),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            requests: pod_requests(pod),
            non_zero: non_zero_requests(pod),
            host_ports,
            priority: pod_priority(pod),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            start_time: pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            preempted: terminating_by_preemption(pod),
        }
    }

    /// (namespace, name) from the key.
    pub fn namespace_and_name(&self) -> (&str, &str) {
        self.key.split_once('/').unwrap_or(("default", &self.key))
    }
}
