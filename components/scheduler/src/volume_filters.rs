//! The volume plugins' PreFilter: one pass per pod (VolumeRestrictions, VolumeBinding, VolumeZone,
//! in upstream's order; the first rejection rejects the pod on every node), whose findings
//! ([`PodVolumes`]) every node's Filter then reads (those filters are in [`crate::filters`]'s list).

use k8s_openapi::api::core::v1::Pod;

use crate::volume_binding::{self, BindingState, NodeVolumes};
use crate::volume_cache::VolumeCache;
use crate::volume_restrictions;
use crate::volume_zone::{self, ZoneRequirement};

/// The pod's volumes as PreFilter found them. Default: a pod without claims.
#[derive(Debug, Clone, Default)]
pub struct PodVolumes {
    pub read_write_once_pod_conflicts: usize,
    pub binding: Option<BindingState>,
    pub zones: Vec<ZoneRequirement>,
}

/// Err: the message that rejects the pod on every node (UnschedulableAndUnresolvable).
pub fn pre_filter(
    pod: &Pod,
    cache: &VolumeCache,
    claim_in_use: &dyn Fn(&str) -> bool,
) -> Result<PodVolumes, String> {
    let read_write_once_pod_conflicts = volume_restrictions::pre_filter(pod, cache, claim_in_use)?;
    let binding = volume_binding::pre_filter(pod, cache)?;
    let zones = volume_zone::pre_filter(pod, cache)?;
    Ok(PodVolumes {
        read_write_once_pod_conflicts,
        binding,
        zones,
    })
}

/// The plan for the chosen node (what Reserve assumes); empty for a pod without unbound claims.
pub fn node_plan(volumes: &PodVolumes, node: &k8s_openapi::api::core::v1::Node) -> NodeVolumes {
    volumes
        .binding
        .as_ref()
        .and_then(|b| volume_binding::find_pod_volumes(b, node).ok())
        .unwrap_or_default()
}
