//! Pod facts every workload controller uses: ownership, activity, readiness, availability, and
//! upstream's ranking of which pods to delete first.

use std::cmp::Ordering;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

pub fn controller_ref(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// The pod's phase, Pending when it has none yet.
pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// Counts toward replicas: not being deleted and not finished.
pub fn is_active(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase(pod), "Succeeded" | "Failed")
}

/// Since when the pod has been Ready, if it is.
pub fn ready_since(pod: &Pod) -> Option<Option<Timestamp>> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    Some(c.last_transition_time.as_ref().map(|t| t.0))
}

pub fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// Ready for at least minReadySeconds.
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    match ready_since(pod) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(None) => false,
        Some(Some(since)) => since + SignedDuration::from_secs(min_ready_seconds as i64) <= now,
    }
}

/// When a ready-but-not-yet-available pod becomes available (to requeue then).
pub fn available_at(pod: &Pod, min_ready_seconds: i32) -> Option<Timestamp> {
    match ready_since(pod)? {
        Some(since) if min_ready_seconds > 0 => {
            Some(since + SignedDuration::from_secs(min_ready_seconds as i64))
        }
        _ => None,
    }
}

fn phase_rank(pod: &Pod) -> u8 {
    match phase(pod) {
        "Pending" => 0,
        "Unknown" => 1,
        _ => 2,
    }
}

/// Upstream's ActivePods ordering: delete first unscheduled, then pending, then not ready, then
/// the most recently ready, then the newest.
pub fn deletion_order(a: &Arc<Pod>, b: &Arc<Pod>) -> Ordering {
    let assigned = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
    };
    assigned(a)
        .cmp(&assigned(b))
        .then(phase_rank(a).cmp(&phase_rank(b)))
        .then(is_ready(a).cmp(&is_ready(b)))
        .then_with(|| {
            // Both ready: the one ready for less time first (later transition first).
            let since = |p: &Pod| ready_since(p).flatten();
            since(b).cmp(&since(a))
        })
        .then_with(|| {
            let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(b).cmp(&created(a))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: Option<&str>, phase: &str, ready: bool, created: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "creationTimestamp": created},
                "spec": {"nodeName": node, "containers": []},
                "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                    "lastTransitionTime": created}]}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn unscheduled_then_pending_then_unready_then_newest_go_first() {
        let mut pods = [
            pod(
                "ready-old",
                Some("n"),
                "Running",
                true,
                "2025-01-01T00:00:00Z",
            ),
            pod(
                "ready-new",
                Some("n"),
                "Running",
                true,
                "2025-01-02T00:00:00Z",
            ),
            pod(
                "unready",
                Some("n"),
                "Running",
                false,
                "2025-01-01T00:00:00Z",
            ),
            pod(
                "pending",
                Some("n"),
                "Pending",
                false,
                "2025-01-01T00:00:00Z",
            ),
            pod(
                "unscheduled",
                None,
                "Pending",
                false,
                "2025-01-01T00:00:00Z",
            ),
        ];
        pods.sort_by(deletion_order);
        let names: Vec<_> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "unscheduled",
                "pending",
                "unready",
                "ready-new",
                "ready-old"
            ]
        );
    }

    #[test]
    fn availability_respects_min_ready_seconds() {
        let p = pod("a", Some("n"), "Running", true, "2025-01-01T00:00:00Z");
        let t0: Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
        assert!(is_available(&p, 0, t0));
        assert!(!is_available(&p, 10, t0 + SignedDuration::from_secs(5)));
        assert!(is_available(&p, 10, t0 + SignedDuration::from_secs(10)));
        assert!(!is_active(&pod(
            "f",
            None,
            "Failed",
            false,
            "2025-01-01T00:00:00Z"
        )));
    }
}
