//! Upstream's VolumeRestrictions plugin for the volumes kiln runs: a claim with the ReadWriteOncePod
//! access mode may be used by one pod in the whole cluster, so a second pod fits no node while the
//! first holds it (Unschedulable, not Unresolvable: preempting the holder would free it).

use k8s_openapi::api::core::v1::Pod;

use crate::volume_cache::{claim_key, VolumeCache};
use crate::volume_claims::{claim_access_modes, pod_namespace};

pub const REASON_READ_WRITE_ONCE_POD_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";

/// How many of the pod's ReadWriteOncePod claims another placed pod already uses; Err: upstream's
/// PreFilter message for a missing claim. `in_use` answers for "namespace/name" claim keys.
pub fn pre_filter(
    pod: &Pod,
    cache: &VolumeCache,
    in_use: &dyn Fn(&str) -> bool,
) -> Result<usize, String> {
    let namespace = pod_namespace(pod);
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
    let mut conflicts = 0;
    for v in volumes.into_iter().flatten() {
        let Some(source) = &v.persistent_volume_claim else {
            continue;
        };
        let Some(claim) = cache.claim(namespace, &source.claim_name) else {
            return Err(format!(
                "persistentvolumeclaim {:?} not found",
                source.claim_name
            ));
        };
        let once_pod = claim_access_modes(&claim)
            .iter()
            .any(|m| m == "ReadWriteOncePod");
        if once_pod && in_use(&claim_key(namespace, &source.claim_name)) {
            conflicts += 1;
        }
    }
    Ok(conflicts)
}

/// Filter: any conflict rejects every node.
pub fn filter(conflicts: usize) -> Result<(), &'static str> {
    if conflicts > 0 {
        Err(REASON_READ_WRITE_ONCE_POD_CONFLICT)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cache_with(modes: &[&str]) -> VolumeCache {
        let mut cache = VolumeCache::default();
        cache.upsert_claim(
            serde_json::from_value(json!({
                "metadata": {"name": "data", "namespace": "default"},
                "spec": {"accessModes": modes}
            }))
            .unwrap(),
        );
        cache
    }

    fn pod(claim: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [], "volumes": [
                {"name": "v", "persistentVolumeClaim": {"claimName": claim}}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_read_write_once_pod_claim_in_use_rejects_every_node() {
        let used = |k: &str| k == "default/data";
        let conflicts =
            pre_filter(&pod("data"), &cache_with(&["ReadWriteOncePod"]), &used).unwrap();
        assert_eq!(conflicts, 1);
        assert_eq!(filter(conflicts), Err(REASON_READ_WRITE_ONCE_POD_CONFLICT));
        let free = |_: &str| false;
        assert_eq!(
            pre_filter(&pod("data"), &cache_with(&["ReadWriteOncePod"]), &free),
            Ok(0)
        );
        // ReadWriteOnce is a per-node restriction the kubelet handles, not this plugin's.
        assert_eq!(
            pre_filter(&pod("data"), &cache_with(&["ReadWriteOnce"]), &used),
            Ok(0)
        );
    }

    #[test]
    fn a_missing_claim_is_reported_by_name() {
        let free = |_: &str| false;
        assert_eq!(
            pre_filter(&pod("gone"), &cache_with(&[]), &free),
            Err("persistentvolumeclaim \"gone\" not found".to_string())
        );
    }
}
