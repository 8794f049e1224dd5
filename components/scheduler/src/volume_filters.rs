//! The volume plugins wired into the filter list: one PreFilter pass per pod (VolumeRestrictions,
//! VolumeBinding, VolumeZone, in upstream's order; the first rejection rejects the pod on every
//! node), whose findings every node's Filter then reads.

use k8s_openapi::api::core::v1::Pod;

use crate::filters::{Code, FilterInput, FilterResult, Rejection};
use crate::volume_binding::{self, BindingState, FilterRejection, NodeVolumes};
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

pub fn volume_restrictions(i: &FilterInput) -> FilterResult {
    volume_restrictions::filter(i.volumes.read_write_once_pod_conflicts)
        .map_err(|r| Rejection::new(Code::Unschedulable, vec![r.to_string()]))
}

pub fn volume_binding(i: &FilterInput) -> FilterResult {
    let Some(state) = &i.volumes.binding else {
        return Ok(());
    };
    match volume_binding::find_pod_volumes(state, i.node) {
        Ok(_) => Ok(()),
        Err(FilterRejection::Reasons(reasons)) => Err(Rejection::new(
            Code::UnschedulableAndUnresolvable,
            reasons.into_iter().map(str::to_string).collect(),
        )),
        Err(FilterRejection::Error(e)) => Err(Rejection::new(
            Code::Error,
            vec![format!("running \"VolumeBinding\" filter plugin: {e}")],
        )),
    }
}

pub fn volume_zone(i: &FilterInput) -> FilterResult {
    volume_zone::filter(&i.volumes.zones, i.node)
        .map_err(|r| Rejection::new(Code::UnschedulableAndUnresolvable, vec![r.to_string()]))
}
