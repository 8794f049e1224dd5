//! Writes about a pod: the binding (POST pods/<name>/binding) and the PodScheduled condition with
//! the nominated node (pods/<name>/status), as kube-scheduler makes them.

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum PodWriteError {
    #[error("binding pod {pod} to {node}: {source}")]
    Bind {
        pod: String,
        node: String,
        source: kube::Error,
    },
    #[error("updating the PodScheduled condition of {pod}: {source}")]
    Condition { pod: String, source: kube::Error },
}

fn names(pod: &Pod) -> (String, String) {
    (
        pod.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

/// The Binding object for pods/binding; the pod's uid makes the server refuse a recreated pod of
/// the same name.
pub fn binding_for(pod: &Pod, node: &str) -> Binding {
    let (namespace, name) = names(pod);
    Binding {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    }
}

pub async fn bind(client: kube::Client, pod: &Pod, node: &str) -> Result<(), PodWriteError> {
    let (namespace, name) = names(pod);
    let api: Api<Pod> = Api::namespaced(client, &namespace);
    api.create_subresource::<_, serde_json::Value>(
        "binding",
        &name,
        &PostParams::default(),
        &binding_for(pod, node),
    )
    .await
    .map(|_| ())
    .map_err(|source| PodWriteError::Bind {
        pod: format!("{namespace}/{name}"),
        node: node.to_string(),
        source,
    })
}

/// PodScheduled=False reasons (upstream's handleSchedulingFailure): Unschedulable when the nodes
/// rejected the pod, SchedulerError when a step failed (a PreBind such as the volume binding, the
/// binding itself, a plugin error).
pub const UNSCHEDULABLE: &str = "Unschedulable";
pub const SCHEDULER_ERROR: &str = "SchedulerError";

/// The pod's conditions with PodScheduled=False/Unschedulable and this message, or None when the
/// pod already says exactly that (no write needed).
pub fn unschedulable_conditions(
    pod: &Pod,
    message: &str,
    now: Timestamp,
) -> Option<Vec<PodCondition>> {
    not_scheduled_conditions(pod, UNSCHEDULABLE, message, now)
}

/// [`unschedulable_conditions`] with another reason ([`SCHEDULER_ERROR`]).
pub fn not_scheduled_conditions(
    pod: &Pod,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Option<Vec<PodCondition>> {
    let mut conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let wanted = PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some(reason.into()),
        message: Some(message.to_string()),
        last_transition_time: Some(Time(now)),
        ..Default::default()
    };
    match conditions.iter_mut().find(|c| c.type_ == "PodScheduled") {
        Some(c)
            if c.status == wanted.status
                && c.reason == wanted.reason
                && c.message == wanted.message =>
        {
            None
        }
        Some(c) => {
            let transition = if c.status == wanted.status {
                c.last_transition_time.clone()
            } else {
                wanted.last_transition_time.clone()
            };
            *c = PodCondition {
                last_transition_time: transition,
                ..wanted
            };
            Some(conditions)
        }
        None => {
            conditions.push(wanted);
            Some(conditions)
        }
    }
}

/// The status patch for an unschedulable pod (upstream's updatePod): the PodScheduled condition
/// and, when `nominated` is given, `status.nominatedNodeName` (`""` clears it); None when the pod
/// already says all that.
pub fn unschedulable_patch(
    pod: &Pod,
    message: &str,
    nominated: Option<&str>,
    now: Timestamp,
) -> Option<serde_json::Value> {
    not_scheduled_patch(pod, UNSCHEDULABLE, message, nominated, now)
}

/// [`unschedulable_patch`] with another reason ([`SCHEDULER_ERROR`]).
pub fn not_scheduled_patch(
    pod: &Pod,
    reason: &str,
    message: &str,
    nominated: Option<&str>,
    now: Timestamp,
) -> Option<serde_json::Value> {
    let conditions = not_scheduled_conditions(pod, reason, message, now);
    let current = pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .unwrap_or("");
    let nominated = nominated.filter(|n| *n != current);
    if conditions.is_none() && nominated.is_none() {
        return None;
    }
    let mut status = serde_json::Map::new();
    if let Some(c) = conditions {
        status.insert("conditions".into(), json!(c));
    }
    if let Some(n) = nominated {
        // null removes the field, as the two-way patch of an emptied omitempty field does.
        let value = if n.is_empty() { json!(null) } else { json!(n) };
        status.insert("nominatedNodeName".into(), value);
    }
    Some(json!({ "status": status }))
}

pub async fn mark_unschedulable(
    client: kube::Client,
    pod: &Pod,
    message: &str,
    nominated: Option<&str>,
) -> Result<(), PodWriteError> {
    mark_not_scheduled(client, pod, UNSCHEDULABLE, message, nominated).await
}

/// Writes PodScheduled=False with `reason` ([`not_scheduled_patch`]).
pub async fn mark_not_scheduled(
    client: kube::Client,
    pod: &Pod,
    reason: &str,
    message: &str,
    nominated: Option<&str>,
) -> Result<(), PodWriteError> {
    let Some(patch) = not_scheduled_patch(pod, reason, message, nominated, Timestamp::now()) else {
        return Ok(());
    };
    let (namespace, name) = names(pod);
    let api: Api<Pod> = Api::namespaced(client, &namespace);
    // A merge patch replaces the whole list; the pod is unbound, so no kubelet writes it concurrently.
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|source| PodWriteError::Condition {
            pod: format!("{namespace}/{name}"),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn binding_targets_the_node_and_pins_the_uid() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "default", "uid": "u1"}
        }))
        .unwrap();
        let b = serde_json::to_value(binding_for(&pod, "host2")).unwrap();
        assert_eq!(
            b,
            json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": "web-1", "namespace": "default", "uid": "u1"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "host2"}
            })
        );
    }

    #[test]
    fn condition_is_added_then_left_alone() {
        let now = Timestamp::now();
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Pending", "conditions": []}
        }))
        .unwrap();
        let conditions =
            unschedulable_conditions(&pod, "0/1 nodes are available: 1 Insufficient cpu.", now)
                .unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].reason.as_deref(), Some("Unschedulable"));
        pod.status.as_mut().unwrap().conditions = Some(conditions);
        assert!(unschedulable_conditions(
            &pod,
            "0/1 nodes are available: 1 Insufficient cpu.",
            now
        )
        .is_none());
        assert!(
            unschedulable_conditions(&pod, "no nodes available to schedule pods", now).is_some()
        );
    }

    #[test]
    fn a_failed_volume_binding_is_a_scheduler_error() {
        let before = Timestamp::from_second(1_767_225_600).unwrap();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {"nominatedNodeName": "host1", "conditions": [{"type": "PodScheduled",
                "status": "False", "reason": "Unschedulable", "message": "0/1 nodes are available",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap();
        let message = "running PreBind plugin \"VolumeBinding\": binding volumes: timed out";
        let patch = not_scheduled_patch(&pod, SCHEDULER_ERROR, message, Some(""), Timestamp::now())
            .unwrap();
        let c = &patch["status"]["conditions"][0];
        assert_eq!(
            (&c["type"], &c["status"], &c["reason"], &c["message"]),
            (
                &json!("PodScheduled"),
                &json!("False"),
                &json!("SchedulerError"),
                &json!(message)
            )
        );
        // Still False: the transition time stays; the nomination is cleared.
        assert_eq!(c["lastTransitionTime"], json!(Time(before)));
        assert_eq!(patch["status"]["nominatedNodeName"], json!(null));
    }

    #[test]
    fn the_nominated_node_is_written_with_the_condition() {
        let now = Timestamp::now();
        let message = "0/1 nodes are available: 1 Insufficient cpu.";
        let mut pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        let patch = unschedulable_patch(&pod, message, Some("host1"), now).unwrap();
        assert_eq!(patch["status"]["nominatedNodeName"], "host1");
        assert_eq!(patch["status"]["conditions"][0]["type"], "PodScheduled");
        pod.status = Some(
            serde_json::from_value(json!({
                "nominatedNodeName": "host1",
                "conditions": patch["status"]["conditions"].clone()
            }))
            .unwrap(),
        );
        assert_eq!(unschedulable_patch(&pod, message, Some("host1"), now), None);
        assert_eq!(unschedulable_patch(&pod, message, None, now), None);
        assert_eq!(
            unschedulable_patch(&pod, message, Some(""), now),
            Some(json!({"status": {"nominatedNodeName": null}})),
            "preemption cannot help: the nomination is cleared"
        );
    }
}
