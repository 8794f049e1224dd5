//! In-place pod resize (InPlacePodVerticalScaling, beta in 1.33) as the kubelet plans it: whether a
//! changed `resources` of a running pod's containers is admitted (upstream's canResizePod: the pod
//! must fit the node's allocatable — else `Infeasible` — and beside the other pods' allocations —
//! else `Deferred`), which containers get new cgroup settings through CRI UpdateContainerResources
//! and which restart (`resizePolicy: RestartContainer`), and how it shows in the pod's status:
//! `containerStatuses[].resources` and `allocatedResources`, and the `PodResizePending` /
//! `PodResizeInProgress` conditions. Pure functions; the CRI worker actuates
//! ([`crate::runtime::cri::worker`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus as ApiContainerStatus, Pod, PodCondition, PodStatus as ApiPodStatus,
    ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kiln_common::quota;
use serde_json::Value;

use crate::env_resources::NodeAllocatable;

pub const PENDING: &str = "PodResizePending";
pub const IN_PROGRESS: &str = "PodResizeInProgress";
pub const INFEASIBLE: &str = "Infeasible";
pub const DEFERRED: &str = "Deferred";

/// A resize the kubelet has not admitted: reason (`Infeasible`, `Deferred`) and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub reason: &'static str,
    pub message: String,
}

/// The resize state a runtime reports with a pod's status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResizeStatus {
    /// The resources each container (regular and sidecar) runs with, by name: the allocated ones,
    /// applied through CRI.
    pub allocated: BTreeMap<String, ResourceRequirements>,
    /// The latest resize is not admitted.
    pub pending: Option<Pending>,
    /// Applying an admitted resize failed (PodResizeInProgress with reason Error).
    pub error: Option<String>,
}

// The k8s types compare field by field without floats, so equality is an equivalence.
impl Eq for ResizeStatus {}

/// Whether a changed pod may be resized here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No container's resources changed.
    Unchanged,
    Admit,
    Pending(Pending),
}

/// The containers whose resources a resize may change: the regular ones and the sidecars.
fn resizable(pod: &Pod) -> Vec<&Container> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .chain(spec.containers.iter())
        .collect()
}

/// The resources of `pod`'s resizable containers, by name.
pub fn container_resources(pod: &Pod) -> BTreeMap<String, ResourceRequirements> {
    resizable(pod)
        .into_iter()
        .map(|c| (c.name.clone(), c.resources.clone().unwrap_or_default()))
        .collect()
}

/// The pod's cpu (millicores) and memory (bytes) requests, as upstream's PodRequests.
fn requests(pod: &Pod) -> (i128, i128) {
    let v = serde_json::to_value(pod).unwrap_or(Value::Null);
    let (r, _) = quota::pod_resources(&v);
    let get = |name: &str| r.get(name).map_or(0, |a| a.value.0);
    (get("cpu"), get("memory") / 1000)
}

fn parsed(text: &str) -> i128 {
    kiln_common::quantity::parse(text).map_or(0, |m| m.0)
}

/// upstream's canResizePod: `desired` (the pod as the API has it now) against the node's
/// allocatable and what `others` (the other pods this kubelet runs, as allocated) request.
pub fn admit(allocated: &Pod, desired: &Pod, node: &NodeAllocatable, others: &[&Pod]) -> Decision {
    if container_resources(allocated) == container_resources(desired) {
        return Decision::Unchanged;
    }
    let (cpu, memory) = requests(desired);
    let (cpu_cap, memory_cap) = (parsed(&node.cpu), parsed(&node.memory) / 1000);
    if cpu > cpu_cap || memory > memory_cap {
        let what = if memory > memory_cap {
            format!("memory, requested: {memory}, capacity: {memory_cap}")
        } else {
            format!("cpu, requested: {cpu}, capacity: {cpu_cap}")
        };
        return Decision::Pending(Pending {
            reason: INFEASIBLE,
            message: format!("Node didn't have enough capacity: {what}"),
        });
    }
    let (used_cpu, used_memory) = others
        .iter()
        .map(|p| requests(p))
        .fold((0, 0), |(a, b), (c, m)| (a + c, b + m));
    // The first resource short, in upstream's order (cpu, then memory).
    let short = if used_cpu + cpu > cpu_cap {
        Some(("cpu", cpu, used_cpu, cpu_cap))
    } else if used_memory + memory > memory_cap {
        Some(("memory", memory, used_memory, memory_cap))
    } else {
        None
    };
    match short {
        Some((name, requested, used, capacity)) => Decision::Pending(Pending {
            reason: DEFERRED,
            message: format!(
                "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
            ),
        }),
        None => Decision::Admit,
    }
}

/// `pod` with the resources (and resize policies) of its resizable containers taken from `from`:
/// what the kubelet runs while a resize is pending, or once it is admitted.
pub fn with_resources_of(pod: &Pod, from: &Pod) -> Pod {
    let mut out = pod.clone();
    let source: BTreeMap<&str, &Container> = resizable(from)
        .into_iter()
        .map(|c| (c.name.as_str(), c))
        .collect();
    if let Some(spec) = out.spec.as_mut() {
        for c in spec
            .init_containers
            .iter_mut()
            .flatten()
            .chain(spec.containers.iter_mut())
        {
            if let Some(s) = source.get(c.name.as_str()) {
                c.resources = s.resources.clone();
                c.resize_policy = s.resize_policy.clone();
            }
        }
    }
    out
}

/// What a container's resize takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// New cgroup settings through CRI UpdateContainerResources, the container keeps running.
    Update,
    /// A changed resource's resizePolicy is RestartContainer: the container is restarted.
    Restart,
}

fn amount(r: &Option<ResourceRequirements>, list: &str, name: &str) -> Option<i128> {
    let r = r.as_ref()?;
    let l = if list == "limits" {
        &r.limits
    } else {
        &r.requests
    };
    l.as_ref()?
        .get(name)
        .and_then(|q| kiln_common::quantity::parse(&q.0).ok())
        .map(|m| m.0)
}

/// Which of cpu and memory changed between `was` and `is`.
fn changed(was: &Container, is: &Container) -> Vec<&'static str> {
    ["cpu", "memory"]
        .into_iter()
        .filter(|r| {
            ["requests", "limits"]
                .iter()
                .any(|l| amount(&was.resources, l, r) != amount(&is.resources, l, r))
        })
        .collect()
}

/// The step for a container resized from `was` to `is` (None: its cpu and memory did not change).
pub fn step(was: &Container, is: &Container) -> Option<Step> {
    let changed = changed(was, is);
    if changed.is_empty() {
        return None;
    }
    let restarts = is.resize_policy.iter().flatten().any(|p| {
        changed.contains(&p.resource_name.as_str()) && p.restart_policy == "RestartContainer"
    });
    Some(if restarts {
        Step::Restart
    } else {
        Step::Update
    })
}

fn condition(type_: &str, reason: Option<&str>, message: Option<&str>) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: reason.map(String::from),
        message: message.map(String::from),
        ..Default::default()
    }
}

/// Cpu and memory of a resource list (what the runtime applies; upstream reports those).
fn cpu_memory(list: &Option<BTreeMap<String, Quantity>>) -> Option<BTreeMap<String, Quantity>> {
    let kept: BTreeMap<String, Quantity> = list
        .iter()
        .flatten()
        .filter(|(k, _)| *k == "cpu" || *k == "memory")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (!kept.is_empty()).then_some(kept)
}

fn report_container(c: &mut ApiContainerStatus, allocated: &ResourceRequirements) {
    c.allocated_resources = allocated.requests.clone().filter(|r| !r.is_empty());
    // The running container's settings; a container not running has none.
    let running = c.state.as_ref().is_some_and(|s| s.running.is_some());
    c.resources = running.then(|| ResourceRequirements {
        requests: cpu_memory(&allocated.requests),
        limits: cpu_memory(&allocated.limits),
        ..Default::default()
    });
}

/// Adds the resize state to a pod's status: each container's resources and allocatedResources,
/// and the conditions upstream 1.33 sets (PodResizePending while not admitted, PodResizeInProgress
/// with reason Error while an admitted one failed to apply).
pub fn report(state: &ResizeStatus, status: &mut ApiPodStatus) {
    for c in status
        .container_statuses
        .iter_mut()
        .flatten()
        .chain(status.init_container_statuses.iter_mut().flatten())
    {
        if let Some(a) = state.allocated.get(&c.name) {
            report_container(c, a);
        }
    }
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    if let Some(p) = &state.pending {
        conditions.push(condition(PENDING, Some(p.reason), Some(&p.message)));
    }
    if let Some(e) = &state.error {
        conditions.push(condition(IN_PROGRESS, Some("Error"), Some(e)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "uid": "u"},
                                      "spec": {"containers": containers}}))
        .unwrap()
    }

    fn one(resources: Value, policy: Value) -> Pod {
        pod(json!([{"name": "c", "image": "i", "resources": resources, "resizePolicy": policy}]))
    }

    fn node() -> NodeAllocatable {
        NodeAllocatable {
            cpu: "2".into(),
            memory: "1Gi".into(),
        }
    }

    #[test]
    fn an_unchanged_pod_needs_nothing() {
        let p = one(json!({"limits": {"memory": "32Mi"}}), json!(null));
        assert_eq!(admit(&p, &p, &node(), &[]), Decision::Unchanged);
    }

    #[test]
    fn a_pod_larger_than_the_node_is_infeasible() {
        let was = one(json!({"requests": {"memory": "32Mi"}}), json!(null));
        let is = one(json!({"requests": {"memory": "2Gi"}}), json!(null));
        assert_eq!(
            admit(&was, &is, &node(), &[]),
            Decision::Pending(Pending {
                reason: INFEASIBLE,
                message: "Node didn't have enough capacity: memory, requested: 2147483648, capacity: 1073741824".into(),
            })
        );
        let cpu = one(json!({"requests": {"cpu": "3"}}), json!(null));
        let Decision::Pending(p) = admit(&was, &cpu, &node(), &[]) else {
            panic!("admitted a pod above the node's cpu")
        };
        assert_eq!(
            p.message,
            "Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000"
        );
    }

    #[test]
    fn a_pod_that_fits_only_alone_is_deferred() {
        let was = one(json!({"requests": {"cpu": "500m"}}), json!(null));
        let is = one(json!({"requests": {"cpu": "1500m"}}), json!(null));
        let other = one(json!({"requests": {"cpu": "1"}}), json!(null));
        assert_eq!(
            admit(&was, &is, &node(), &[&other]),
            Decision::Pending(Pending {
                reason: DEFERRED,
                message: "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000".into(),
            })
        );
        assert_eq!(admit(&was, &is, &node(), &[]), Decision::Admit);
    }

    #[test]
    fn the_resize_policy_decides_update_or_restart() {
        let c = |res: Value, policy: Value| -> Container {
            serde_json::from_value(json!({"name": "c", "resources": res, "resizePolicy": policy}))
                .unwrap()
        };
        let policy = json!([{"resourceName": "cpu", "restartPolicy": "NotRequired"},
                            {"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
        let was = c(
            json!({"limits": {"cpu": "1", "memory": "32Mi"}}),
            policy.clone(),
        );
        let cpu = c(
            json!({"limits": {"cpu": "2", "memory": "32Mi"}}),
            policy.clone(),
        );
        let mem = c(
            json!({"limits": {"cpu": "1", "memory": "64Mi"}}),
            policy.clone(),
        );
        // The same amount written differently is no change.
        let same = c(
            json!({"limits": {"cpu": "1000m", "memory": "32Mi"}}),
            policy,
        );
        assert_eq!(step(&was, &cpu), Some(Step::Update));
        assert_eq!(step(&was, &mem), Some(Step::Restart));
        assert_eq!(step(&was, &same), None);
        // No policy: NotRequired.
        let bare = c(json!({"limits": {"memory": "64Mi"}}), json!(null));
        assert_eq!(step(&was, &bare), Some(Step::Update));
    }

    #[test]
    fn a_pending_resize_keeps_the_allocated_resources() {
        let was = one(json!({"limits": {"memory": "32Mi"}}), json!(null));
        let mut is = one(json!({"limits": {"memory": "64Mi"}}), json!(null));
        is.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        let kept = with_resources_of(&is, &was);
        assert_eq!(container_resources(&kept), container_resources(&was));
        assert_eq!(kept.metadata.labels, is.metadata.labels);
    }

    #[test]
    fn the_status_shows_resources_and_conditions() {
        let p = one(
            json!({"requests": {"cpu": "100m", "memory": "32Mi", "ephemeral-storage": "1Gi"},
                   "limits": {"memory": "64Mi"}}),
            json!(null),
        );
        let state = ResizeStatus {
            allocated: container_resources(&p),
            pending: Some(Pending {
                reason: DEFERRED,
                message: "m".into(),
            }),
            error: None,
        };
        let mut status: ApiPodStatus = serde_json::from_value(json!({
            "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": true,
                                   "restartCount": 0, "state": {"running": {}}}]}))
        .unwrap();
        report(&state, &mut status);
        let v = serde_json::to_value(&status).unwrap();
        assert_eq!(
            v["containerStatuses"][0]["resources"],
            json!({"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}})
        );
        assert_eq!(
            v["containerStatuses"][0]["allocatedResources"],
            json!({"cpu": "100m", "memory": "32Mi", "ephemeral-storage": "1Gi"})
        );
        assert_eq!(v["conditions"][0]["type"], "PodResizePending");
        assert_eq!(v["conditions"][0]["reason"], "Deferred");
        assert_eq!(v["conditions"][0]["status"], "True");
    }
}
