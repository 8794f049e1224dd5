//! Upstream's VolumeZone plugin: a bound PV labelled with a zone or region (several values joined by
//! `__`) may only be used from nodes labelled with one of them. Nodes with no topology labels at all
//! pass (a single-zone cluster need not label its nodes).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::volume_cache::VolumeCache;
use crate::volume_claims::{claim_volume_name, pod_claims, pod_namespace};

pub const REASON_ZONE_CONFLICT: &str = "node(s) had no available volume zone";

const ZONE_BETA: &str = "failure-domain.beta.kubernetes.io/zone";
const REGION_BETA: &str = "failure-domain.beta.kubernetes.io/region";
const ZONE: &str = "topology.kubernetes.io/zone";
const REGION: &str = "topology.kubernetes.io/region";
const TOPOLOGY_LABELS: [&str; 4] = [ZONE_BETA, REGION_BETA, ZONE, REGION];

/// One label a PV requires, and the values it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneRequirement {
    pub key: String,
    pub values: BTreeSet<String>,
}

/// The topology every bound claim's PV requires. Unbound claims are VolumeBinding's concern (it
/// runs first and rejects those that must be bound already). Err: upstream's message for a PV that
/// does not exist.
pub fn pre_filter(pod: &Pod, cache: &VolumeCache) -> Result<Vec<ZoneRequirement>, String> {
    let namespace = pod_namespace(pod);
    let mut out = Vec::new();
    for c in pod_claims(pod) {
        let Some(claim) = cache.claim(namespace, &c.name) else {
            return Err(format!("persistentvolumeclaim {:?} not found", c.name));
        };
        let pv_name = claim_volume_name(&claim);
        if pv_name.is_empty() {
            continue;
        }
        let Some(volume) = cache.volume(pv_name) else {
            return Err(format!("persistentvolume {pv_name:?} not found"));
        };
        let labels = volume.metadata.labels.clone().unwrap_or_default();
        for key in TOPOLOGY_LABELS {
            if let Some(value) = labels.get(key) {
                out.push(ZoneRequirement {
                    key: key.to_string(),
                    values: value.split("__").map(str::to_string).collect(),
                });
            }
        }
    }
    Ok(out)
}

fn ga_label(key: &str) -> &str {
    match key {
        ZONE_BETA => ZONE,
        REGION_BETA => REGION,
        other => other,
    }
}

pub fn filter(requirements: &[ZoneRequirement], node: &Node) -> Result<(), &'static str> {
    if requirements.is_empty() {
        return Ok(());
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    if !TOPOLOGY_LABELS.iter().any(|k| labels.contains_key(*k)) {
        return Ok(());
    }
    for r in requirements {
        // A PV's beta label also matches the node's GA label.
        let value = labels.get(&r.key).or_else(|| labels.get(ga_label(&r.key)));
        if !value.is_some_and(|v| r.values.contains(v)) {
            return Err(REASON_ZONE_CONFLICT);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(labels: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels}})).unwrap()
    }

    fn setup(pv_labels: serde_json::Value) -> (Pod, VolumeCache) {
        let mut cache = VolumeCache::default();
        cache.upsert_claim(
            serde_json::from_value(json!({
                "metadata": {"name": "data", "namespace": "default"},
                "spec": {"volumeName": "pv1"}
            }))
            .unwrap(),
        );
        cache.upsert_volume(
            serde_json::from_value(json!({"metadata": {"name": "pv1", "labels": pv_labels}}))
                .unwrap(),
        );
        let pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [], "volumes": [
                {"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]}
        }))
        .unwrap();
        (pod, cache)
    }

    #[test]
    fn zones_must_match_and_multi_zone_values_split() {
        let (pod, cache) = setup(json!({ZONE: "a__b"}));
        let req = pre_filter(&pod, &cache).unwrap();
        assert!(filter(&req, &node(json!({ZONE: "b"}))).is_ok());
        assert_eq!(
            filter(&req, &node(json!({ZONE: "c"}))),
            Err(REASON_ZONE_CONFLICT)
        );
        assert_eq!(
            filter(&req, &node(json!({REGION: "r"}))),
            Err(REASON_ZONE_CONFLICT),
            "a labelled node without the zone label"
        );
        assert!(
            filter(&req, &node(json!({}))).is_ok(),
            "nodes without topology labels pass"
        );
    }

    #[test]
    fn beta_pv_labels_match_ga_node_labels() {
        let (pod, cache) = setup(json!({ZONE_BETA: "a"}));
        let req = pre_filter(&pod, &cache).unwrap();
        assert!(filter(&req, &node(json!({ZONE: "a"}))).is_ok());
    }

    #[test]
    fn a_missing_pv_is_reported() {
        let (pod, mut cache) = setup(json!({}));
        cache.remove_volume("pv1");
        assert_eq!(
            pre_filter(&pod, &cache),
            Err("persistentvolume \"pv1\" not found".to_string())
        );
    }
}
