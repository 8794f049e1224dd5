//! Upstream's VolumeBinding plugin, pure: PreFilter sorts a pod's claims into bound ones and unbound
//! WaitForFirstConsumer ones (and rejects the pod while a claim is missing, being deleted, or unbound
//! with an Immediate class); Filter decides per node whether every bound PV may be used there and
//! every unbound claim gets a matching Available PV or can be provisioned there; Reserve assumes the
//! choice in the volume cache. The API writes and the wait for the PV controller live in
//! `volume_prebind`.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::volume_cache::{claim_key_of, VolumeCache};
use crate::volume_claims::{
    access_modes_fit, claim_class, claim_name, claim_phase, claim_volume_name, is_delay_binding,
    is_fully_bound, is_volume_bound_to_claim, pod_claims, pod_namespace, requested_storage,
    selected_node, selector_matches_volume, volume_capacity, volume_class, volume_fits_node,
    volume_is_for_pod, volume_modes_differ, ANN_SELECTED_NODE, NO_PROVISIONER,
};

pub const REASON_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
pub const REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
pub const REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
pub const REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";

/// A claim the PV controller finished binding, and its PV (None: the PV is gone).
#[derive(Debug, Clone)]
pub struct BoundClaim {
    pub claim: Arc<PersistentVolumeClaim>,
    pub volume: Option<Arc<PersistentVolume>>,
}

/// What PreFilter found, for Filter to decide per node.
#[derive(Debug, Clone, Default)]
pub struct BindingState {
    pub bound: Vec<BoundClaim>,
    /// Unbound claims of WaitForFirstConsumer classes.
    pub delayed: Vec<Arc<PersistentVolumeClaim>>,
    /// PVs of each delayed claim's class, as the cache sees them (assumed bindings included).
    pub candidates: BTreeMap<String, Vec<Arc<PersistentVolume>>>,
    pub classes: BTreeMap<String, Arc<StorageClass>>,
}

/// The plan for one node: claims to bind to static PVs, and claims to provision there.
#[derive(Debug, Clone, Default)]
pub struct NodeVolumes {
    pub static_bindings: Vec<(Arc<PersistentVolumeClaim>, Arc<PersistentVolume>)>,
    pub provisions: Vec<Arc<PersistentVolumeClaim>>,
}

impl NodeVolumes {
    pub fn is_empty(&self) -> bool {
        self.static_bindings.is_empty() && self.provisions.is_empty()
    }
}

/// Why a node cannot take the pod: upstream's reasons, or an error (which fails the attempt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterRejection {
    Reasons(Vec<&'static str>),
    Error(String),
}

/// None: the pod uses no claims (Filter has nothing to do). Err: upstream's PreFilter message.
pub fn pre_filter(pod: &Pod, cache: &VolumeCache) -> Result<Option<BindingState>, String> {
    let namespace = pod_namespace(pod);
    let claims = pod_claims(pod);
    if claims.is_empty() {
        return Ok(None);
    }
    let mut found = Vec::new();
    for c in &claims {
        let Some(claim) = cache.claim(namespace, &c.name) else {
            return Err(if c.ephemeral {
                format!(
                    "waiting for ephemeral volume controller to create the persistentvolumeclaim {:?}",
                    c.name
                )
            } else {
                format!("persistentvolumeclaim {:?} not found", c.name)
            });
        };
        if claim_phase(&claim) == "Lost" {
            return Err(format!(
                "persistentvolumeclaim {:?} bound to non-existent persistentvolume {:?}",
                c.name,
                claim_volume_name(&claim)
            ));
        }
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(format!(
                "persistentvolumeclaim {:?} is being deleted",
                c.name
            ));
        }
        if c.ephemeral {
            volume_is_for_pod(pod, &claim)?;
        }
        found.push(claim);
    }
    let mut state = BindingState::default();
    let mut immediate = false;
    for claim in found {
        if is_fully_bound(&claim) {
            let volume = cache.volume(claim_volume_name(&claim));
            state.bound.push(BoundClaim { claim, volume });
            continue;
        }
        let class_name = claim_class(&claim).to_string();
        let class = (!class_name.is_empty())
            .then(|| cache.class(&class_name))
            .flatten();
        // A pre-bound claim (volumeName set, binding not finished) is the PV controller's to bind.
        if is_delay_binding(class.as_deref()) && claim_volume_name(&claim).is_empty() {
            if let Some(class) = class {
                state.classes.insert(class_name.clone(), class);
            }
            state
                .candidates
                .entry(class_name.clone())
                .or_insert_with(|| {
                    cache
                        .volumes()
                        .into_iter()
                        .filter(|v| volume_class(v) == class_name)
                        .collect()
                });
            state.delayed.push(claim);
        } else {
            immediate = true;
        }
    }
    if immediate {
        return Err(REASON_UNBOUND_IMMEDIATE.to_string());
    }
    Ok(Some(state))
}

/// upstream's FindMatchingVolume for the scheduler path: the PV pre-bound to this claim if there is
/// one (and it may be used from the node), else the smallest Available PV of the claim's class that
/// is big enough, has the same volume mode and access modes, matches the claim's selector and may
/// be used from the node.
pub fn find_matching_volume(
    claim: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
    node: &Node,
    excluded: &HashSet<String>,
) -> Option<Arc<PersistentVolume>> {
    let requested = requested_storage(claim);
    let class = claim_class(claim);
    let mut smallest: Option<&Arc<PersistentVolume>> = None;
    for volume in volumes {
        let name = volume.metadata.name.as_deref().unwrap_or_default();
        if excluded.contains(name) {
            continue;
        }
        let claimed = volume
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .is_some();
        let bound_here = is_volume_bound_to_claim(volume, claim);
        if claimed && !bound_here {
            continue;
        }
        let capacity = volume_capacity(volume);
        if capacity < requested
            || volume_modes_differ(claim, volume)
            || volume.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let fits_node = volume_fits_node(volume, node);
        if bound_here {
            return fits_node.then(|| volume.clone());
        }
        let available =
            volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available");
        if !available
            || !selector_matches_volume(claim, volume)
            || volume_class(volume) != class
            || !fits_node
            || !access_modes_fit(claim, volume)
        {
            continue;
        }
        if smallest.is_none_or(|s| volume_capacity(s) > capacity) {
            smallest = Some(volume);
        }
    }
    smallest.cloned()
}

/// upstream's MatchTopologySelectorTerms: no terms allow every node; terms are ORed, each term's
/// label expressions ANDed.
fn allowed_topologies_match(class: &StorageClass, node: &Node) -> bool {
    let terms = class.allowed_topologies.as_deref().unwrap_or_default();
    if terms.is_empty() {
        return true;
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    terms.iter().any(|term| {
        let exprs = term.match_label_expressions.as_deref().unwrap_or_default();
        !exprs.is_empty()
            && exprs
                .iter()
                .all(|e| labels.get(&e.key).is_some_and(|v| e.values.contains(v)))
    })
}

/// Filter (upstream's FindPodVolumes): the node's plan, or why the pod's volumes cannot be used
/// there.
pub fn find_pod_volumes(state: &BindingState, node: &Node) -> Result<NodeVolumes, FilterRejection> {
    let node_name = node.metadata.name.as_deref().unwrap_or_default();
    let mut plan = NodeVolumes::default();
    let mut bound_ok = true;
    let mut bound_found = true;
    for b in &state.bound {
        match &b.volume {
            None => {
                bound_found = false;
                break;
            }
            Some(v) if !volume_fits_node(v, node) => {
                bound_ok = false;
                break;
            }
            Some(_) => {}
        }
    }
    let mut unbound_ok = true;
    if !state.delayed.is_empty() {
        let mut to_match = Vec::new();
        let mut to_provision = Vec::new();
        for claim in &state.delayed {
            match selected_node(claim) {
                // Another node was chosen for it already: only that node will do.
                Some(selected) if selected != node_name => {
                    unbound_ok = false;
                    break;
                }
                Some(_) => to_provision.push(claim.clone()),
                None => to_match.push(claim.clone()),
            }
        }
        if unbound_ok {
            // Smallest requests first, so each gets the smallest PV that fits.
            to_match.sort_by_key(|c| requested_storage(c));
            let mut chosen = HashSet::new();
            for claim in to_match {
                let volumes = state
                    .candidates
                    .get(claim_class(&claim))
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                match find_matching_volume(&claim, volumes, node, &chosen) {
                    Some(v) => {
                        chosen.insert(v.metadata.name.clone().unwrap_or_default());
                        plan.static_bindings.push((claim, v));
                    }
                    None => to_provision.push(claim),
                }
            }
            for claim in to_provision {
                let class_name = claim_class(&claim);
                if class_name.is_empty() {
                    return Err(FilterRejection::Error(format!(
                        "no class for claim {:?}",
                        claim_key_of(&claim)
                    )));
                }
                let Some(class) = state.classes.get(class_name) else {
                    return Err(FilterRejection::Error(format!(
                        "failed to find storage class {class_name:?}"
                    )));
                };
                if class.provisioner.is_empty()
                    || class.provisioner == NO_PROVISIONER
                    || !allowed_topologies_match(class, node)
                {
                    unbound_ok = false;
                    break;
                }
                plan.provisions.push(claim);
            }
        }
    }
    let mut reasons = Vec::new();
    if !bound_ok {
        reasons.push(REASON_NODE_CONFLICT);
    }
    if !unbound_ok {
        reasons.push(REASON_BIND_CONFLICT);
    }
    if !bound_found {
        reasons.push(REASON_PV_NOT_EXIST);
    }
    if reasons.is_empty() {
        Ok(plan)
    } else {
        Err(FilterRejection::Reasons(reasons))
    }
}

/// What Reserve assumed and PreBind must write: PVs with their new claimRef, claims with their
/// selected node.
#[derive(Debug, Clone, Default)]
pub struct Reservation {
    pub volumes: Vec<PersistentVolume>,
    pub claims: Vec<PersistentVolumeClaim>,
}

impl Reservation {
    pub fn is_empty(&self) -> bool {
        self.volumes.is_empty() && self.claims.is_empty()
    }
}

fn claim_reference(claim: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: claim.metadata.namespace.clone(),
        name: claim.metadata.name.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// upstream's GetBindVolumeToClaim: the PV with a claimRef to the claim, marked bound by a
/// controller unless a user had pre-bound it.
pub fn bind_volume_to_claim(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> PersistentVolume {
    let mut out = volume.clone();
    let spec = out.spec.get_or_insert_with(Default::default);
    let same = spec.claim_ref.as_ref().is_some_and(|r| {
        r.name.as_deref() == claim.metadata.name.as_deref()
            && r.namespace.as_deref() == claim.metadata.namespace.as_deref()
            && r.uid.as_deref().unwrap_or("") == claim.metadata.uid.as_deref().unwrap_or("")
    });
    if !is_volume_bound_to_claim(volume, claim) {
        out.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .entry(ANN_BOUND_BY_CONTROLLER.to_string())
            .or_insert_with(|| "yes".to_string());
    }
    if !same {
        out.spec.get_or_insert_with(Default::default).claim_ref = Some(claim_reference(claim));
    }
    out
}

/// Reserve: assume the node's plan in the cache (so later cycles see it) and return the writes.
/// Nothing to do when every claim is already bound.
pub fn reserve(cache: &mut VolumeCache, node: &str, plan: &NodeVolumes) -> Reservation {
    let mut reservation = Reservation::default();
    for (claim, volume) in &plan.static_bindings {
        let bound = bind_volume_to_claim(volume, claim);
        cache.assume_volume(bound.clone());
        reservation.volumes.push(bound);
    }
    for claim in &plan.provisions {
        let mut selected = (**claim).clone();
        selected
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANN_SELECTED_NODE.to_string(), node.to_string());
        cache.assume_claim(selected.clone());
        reservation.claims.push(selected);
    }
    reservation
}

/// Unreserve: forget the assumptions (the API objects are what they are).
pub fn unreserve(cache: &mut VolumeCache, reservation: &Reservation) {
    for v in &reservation.volumes {
        cache.revert_volume(v.metadata.name.as_deref().unwrap_or_default());
    }
    for c in &reservation.claims {
        cache.revert_claim(&claim_key_of(c));
    }
}

/// For logs: which claims the plan touches.
pub fn describe(plan: &NodeVolumes) -> String {
    let bind = plan.static_bindings.iter().map(|(c, v)| {
        format!(
            "{}->{}",
            claim_name(c),
            v.metadata.name.as_deref().unwrap_or_default()
        )
    });
    let provision = plan
        .provisions
        .iter()
        .map(|c| format!("{}->provision", claim_name(c)));
    bind.chain(provision).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
#[path = "volume_binding_tests.rs"]
mod tests;
