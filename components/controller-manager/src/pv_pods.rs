//! Which claims a pod uses — its `persistentVolumeClaim` volumes and the claims of its generic
//! ephemeral volumes (`<pod>-<volume>`) — and upstream's notions of a pod being done with them
//! (volumeutil.IsPodTerminated, the pvc-protection controller's podIsShutDown).

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};

use crate::pods::{controller_ref, phase};

/// ephemeral.VolumeClaimName: the claim an ephemeral volume gets.
pub fn ephemeral_claim_name(pod: &Pod, volume: &str) -> String {
    format!(
        "{}-{volume}",
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// How a pod refers to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimUse {
    /// A `persistentVolumeClaim` volume naming the claim.
    Named(String),
    /// A generic ephemeral volume, whose claim is `<pod>-<volume>`.
    Ephemeral(String),
}

impl ClaimUse {
    pub fn claim(&self) -> &str {
        match self {
            ClaimUse::Named(c) | ClaimUse::Ephemeral(c) => c,
        }
    }
}

pub fn claim_uses(pod: &Pod) -> Vec<ClaimUse> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(ClaimUse::Named(c.claim_name.clone()))
            } else if v.ephemeral.is_some() {
                Some(ClaimUse::Ephemeral(ephemeral_claim_name(pod, &v.name)))
            } else {
                None
            }
        })
        .collect()
}

/// Does the pod refer to the claim of this namespace and name (by either kind of volume)?
pub fn refers_to(pod: &Pod, namespace: &str, claim: &str) -> bool {
    pod.metadata.namespace.as_deref() == Some(namespace)
        && claim_uses(pod).iter().any(|u| u.claim() == claim)
}

/// IsPodTerminated: finished, or being deleted with no container running any more.
pub fn is_terminated(pod: &Pod) -> bool {
    if matches!(phase(pod), "Succeeded" | "Failed") {
        return true;
    }
    pod.metadata.deletion_timestamp.is_some()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .all(|c| c.state.as_ref().is_none_or(|st| st.running.is_none()))
}

/// podIsShutDown: the kubelet finished with it (a zero grace period set on delete) or it was
/// force-deleted; it only waits for garbage collection.
pub fn is_shut_down(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        && pod.metadata.deletion_grace_period_seconds == Some(0)
}

/// ephemeral.VolumeIsForPod: the claim is controlled by this pod.
pub fn claim_is_for_pod(pod: &Pod, claim: &PersistentVolumeClaim) -> bool {
    controller_ref(&claim.metadata)
        .is_some_and(|r| Some(r.uid.as_str()) == pod.metadata.uid.as_deref())
}

pub fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn named_and_ephemeral_claims_are_found() {
        let p = pod(
            json!({"metadata": {"name": "web", "namespace": "ns"}, "spec": {
            "containers": [],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "shared"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "tmp", "emptyDir": {}}]}}),
        );
        assert_eq!(
            claim_uses(&p),
            vec![
                ClaimUse::Named("shared".into()),
                ClaimUse::Ephemeral("web-scratch".into())
            ]
        );
        assert!(refers_to(&p, "ns", "web-scratch"));
        assert!(!refers_to(&p, "other", "shared"));
    }

    #[test]
    fn terminated_and_shut_down() {
        assert!(is_terminated(&pod(
            json!({"metadata": {"name": "p"}, "status": {"phase": "Succeeded"}})
        )));
        assert!(!is_terminated(&pod(
            json!({"metadata": {"name": "p"}, "status": {"phase": "Running"}})
        )));
        let deleting = json!({"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z",
            "deletionGracePeriodSeconds": 30},
            "status": {"phase": "Running", "containerStatuses": [{"name": "c", "image": "i", "imageID": "",
                "ready": true, "restartCount": 0, "state": {"running": {}}}]}});
        assert!(!is_terminated(&pod(deleting.clone())));
        assert!(!is_shut_down(&pod(deleting.clone())));
        let mut stopped = deleting;
        stopped["status"]["containerStatuses"][0]["state"] = json!({"terminated": {"exitCode": 0}});
        stopped["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        assert!(is_terminated(&pod(stopped.clone())));
        assert!(is_shut_down(&pod(stopped)));
    }
}
