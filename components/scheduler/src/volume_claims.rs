//! What the volume plugins ask of pods, claims, volumes and classes, with upstream's rules
//! (component-helpers' storage/volume and storage/ephemeral): which claims a pod uses, a claim's
//! class, when a claim counts as bound, whether a PV may be used from a node.

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kiln_common::node_matching::any_term_matches;

use crate::resources;

/// Set by the scheduler on a WaitForFirstConsumer claim it wants provisioned on a node.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Set by the PV controller once it finished binding a claim.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// The class before spec.storageClassName existed; it still wins when present.
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// A class with this provisioner has static PVs only.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
pub const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";

/// One claim a pod uses: from a `persistentVolumeClaim` volume, or the `<pod>-<volume>` claim of a
/// generic ephemeral volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodClaim {
    pub name: String,
    pub ephemeral: bool,
}

pub fn pod_claims(pod: &Pod) -> Vec<PodClaim> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
    volumes
        .into_iter()
        .flatten()
        .filter_map(|v| {
            if let Some(pvc) = &v.persistent_volume_claim {
                Some(PodClaim {
                    name: pvc.claim_name.clone(),
                    ephemeral: false,
                })
            } else {
                v.ephemeral.as_ref().map(|_| PodClaim {
                    name: format!("{pod_name}-{}", v.name),
                    ephemeral: true,
                })
            }
        })
        .collect()
}

pub fn pod_namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

pub fn claim_name(claim: &PersistentVolumeClaim) -> &str {
    claim.metadata.name.as_deref().unwrap_or_default()
}

pub fn selected_node(claim: &PersistentVolumeClaim) -> Option<&str> {
    annotation(&claim.metadata, ANN_SELECTED_NODE)
}

/// The beta annotation first, then spec.storageClassName; "" means no class.
pub fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    annotation(&claim.metadata, ANN_BETA_STORAGE_CLASS)
        .or_else(|| {
            claim
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
        })
        .unwrap_or("")
}

pub fn volume_class(volume: &PersistentVolume) -> &str {
    annotation(&volume.metadata, ANN_BETA_STORAGE_CLASS)
        .or_else(|| {
            volume
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
        })
        .unwrap_or("")
}

pub fn claim_volume_name(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

/// Bound means the PV controller finished: a volume name and the bind-completed annotation.
pub fn is_fully_bound(claim: &PersistentVolumeClaim) -> bool {
    !claim_volume_name(claim).is_empty()
        && annotation(&claim.metadata, ANN_BIND_COMPLETED).is_some()
}

pub fn claim_phase(claim: &PersistentVolumeClaim) -> &str {
    claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// WaitForFirstConsumer class. No class, or a class that does not exist (yet), binds immediately.
pub fn is_delay_binding(class: Option<&StorageClass>) -> bool {
    class.and_then(|c| c.volume_binding_mode.as_deref()) == Some(WAIT_FOR_FIRST_CONSUMER)
}

/// A generic ephemeral volume's claim must be controlled by the pod it was made for.
pub fn volume_is_for_pod(pod: &Pod, claim: &PersistentVolumeClaim) -> Result<(), String> {
    let controlled = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == pod.metadata.uid.as_ref());
    let same_namespace = claim.metadata.namespace.as_deref() == pod.metadata.namespace.as_deref();
    if same_namespace && controlled {
        return Ok(());
    }
    Err(format!(
        "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim_name(claim),
        pod_namespace(pod),
        pod.metadata.name.as_deref().unwrap_or_default()
    ))
}

/// The PV's required node affinity holds for the node (no affinity: any node).
pub fn volume_fits_node(volume: &PersistentVolume, node: &Node) -> bool {
    let required = volume
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref());
    match required {
        Some(selector) => any_term_matches(&selector.node_selector_terms, node),
        None => true,
    }
}

/// Bytes of the claim's storage request (0 when unset or malformed).
pub fn requested_storage(claim: &PersistentVolumeClaim) -> i64 {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| resources::value(&q.0).ok())
        .unwrap_or(0)
}

pub fn volume_capacity(volume: &PersistentVolume) -> i64 {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| resources::value(&q.0).ok())
        .unwrap_or(0)
}

pub fn claim_access_modes(claim: &PersistentVolumeClaim) -> &[String] {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default()
}

/// Filesystem unless said otherwise, on either side.
pub fn volume_modes_differ(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let claim_mode = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem");
    let volume_mode = volume
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem");
    claim_mode != volume_mode
}

/// The PV's claimRef names this claim (by uid when the ref has one).
pub fn is_volume_bound_to_claim(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    if r.name.as_deref() != claim.metadata.name.as_deref()
        || r.namespace.as_deref() != claim.metadata.namespace.as_deref()
    {
        return false;
    }
    match r.uid.as_deref() {
        Some(uid) if !uid.is_empty() => Some(uid) == claim.metadata.uid.as_deref(),
        _ => true,
    }
}

/// A claim's label selector against a PV's labels (matchLabels and matchExpressions ANDed; no
/// selector matches everything).
pub fn selector_matches_volume(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let Some(selector) = claim.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return true;
    };
    let labels = volume.metadata.labels.clone().unwrap_or_default();
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

/// Every access mode the claim asks for is one the PV offers.
pub fn access_modes_fit(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let offered = volume
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default();
    claim_access_modes(claim)
        .iter()
        .all(|m| offered.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claims_come_from_pvc_and_ephemeral_volumes() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "mysql-data"}},
                {"name": "cfg", "configMap": {"name": "x"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
            ]}
        }))
        .unwrap();
        assert_eq!(
            pod_claims(&pod),
            [
                PodClaim {
                    name: "mysql-data".into(),
                    ephemeral: false
                },
                PodClaim {
                    name: "web-scratch".into(),
                    ephemeral: true
                }
            ]
        );
    }

    #[test]
    fn the_beta_class_annotation_wins() {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "annotations": {ANN_BETA_STORAGE_CLASS: "old"}},
            "spec": {"storageClassName": "new"}
        }))
        .unwrap();
        assert_eq!(claim_class(&claim), "old");
        let plain: PersistentVolumeClaim =
            serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": {}})).unwrap();
        assert_eq!(claim_class(&plain), "");
    }

    #[test]
    fn bound_needs_the_bind_completed_annotation() {
        let mut claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c"}, "spec": {"volumeName": "pv1"}
        }))
        .unwrap();
        assert!(!is_fully_bound(&claim), "pre-bound, not yet bound");
        claim.metadata.annotations = Some([(ANN_BIND_COMPLETED.into(), "yes".into())].into());
        assert!(is_fully_bound(&claim));
    }

    #[test]
    fn ephemeral_claims_must_be_controlled_by_the_pod() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"}, "spec": {"containers": []}
        }))
        .unwrap();
        let claim = |uid: &str| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": "web-scratch", "namespace": "default",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": uid, "controller": true}]}}))
            .unwrap()
        };
        assert!(volume_is_for_pod(&pod, &claim("u1")).is_ok());
        assert_eq!(
            volume_is_for_pod(&pod, &claim("other")).unwrap_err(),
            "PVC default/web-scratch was not created for pod default/web (pod is not owner)"
        );
    }

    #[test]
    fn claim_refs_match_by_name_and_uid() {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "default", "uid": "u1"}
        }))
        .unwrap();
        let pv = |r: serde_json::Value| -> PersistentVolume {
            serde_json::from_value(json!({"metadata": {"name": "pv"}, "spec": {"claimRef": r}}))
                .unwrap()
        };
        assert!(is_volume_bound_to_claim(
            &pv(json!({"namespace": "default", "name": "c"})),
            &claim
        ));
        assert!(is_volume_bound_to_claim(
            &pv(json!({"namespace": "default", "name": "c", "uid": "u1"})),
            &claim
        ));
        assert!(!is_volume_bound_to_claim(
            &pv(json!({"namespace": "default", "name": "c", "uid": "u2"})),
            &claim
        ));
        assert!(!is_volume_bound_to_claim(
            &pv(json!({"namespace": "other", "name": "c"})),
            &claim
        ));
    }
}
