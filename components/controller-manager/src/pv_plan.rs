//! The persistentvolume-binder's decisions (upstream's pv_controller.go syncClaim / syncVolume) as
//! pure functions from one object and the caches to the writes and events that follow, in the
//! order upstream makes them. A binding always writes the volume's claimRef before the claim's
//! volumeName: a restart in between finds a volume pre-bound to the claim, which the claim's next
//! sync picks before any other, so no binding is lost or made twice. Every write carries the
//! resourceVersion it was planned from, so a plan made from a stale cache fails with a conflict
//! instead of overwriting.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kiln_common::events::{NORMAL, WARNING};

use crate::pv_match::{
    annotation, best_match, bytes, check_satisfies, claim_class, claim_has_class, has_annotation,
    volume_bound_to_claim, volume_mode_mismatch, ANN_BETA_DEFAULT_CLASS,
    ANN_BETA_STORAGE_PROVISIONER, ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER, ANN_DEFAULT_CLASS,
    ANN_DYNAMICALLY_PROVISIONED, ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER,
};
use crate::pv_pods::{is_terminated, node_name, refers_to};

/// Set by kube-controller-manager on volumes handed to a CSI driver; the PV controller stands down.
const ANN_MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("VolumeBindingMode not set for StorageClass {0:?}")]
    BindingModeNotSet(String),
    #[error("invalid binding of claim {claim:?} to volume {volume:?}: volume already claimed by {owner:?}")]
    InvalidBinding {
        claim: String,
        volume: String,
        owner: String,
    },
    #[error("PersistentVolume {0:?} is without a storage capacity")]
    NoCapacity(String),
}

/// Which object an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    Claim,
    Volume,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// PUT of the volume (claimRef and annotations).
    UpdateVolume(Box<PersistentVolume>),
    /// PUT of `persistentvolumes/<name>/status` with this phase and message, on the newest copy
    /// of the volume this sync has.
    VolumePhase {
        volume: Box<PersistentVolume>,
        phase: String,
        message: Option<String>,
    },
    /// PUT of the claim (volumeName, annotations, storageClassName).
    UpdateClaim(Box<PersistentVolumeClaim>),
    /// PUT of the claim's status, on the newest copy of the claim this sync has.
    ClaimStatus(Box<PersistentVolumeClaimStatus>),
    Event {
        on: On,
        type_: &'static str,
        reason: &'static str,
        message: String,
    },
    /// The claim the volume points to should finish its binding: sync it soon.
    SyncClaim { namespace: String, name: String },
}

/// What the caches hold besides the object being synced.
pub struct Caches<'a> {
    pub volumes: &'a [Arc<PersistentVolume>],
    pub classes: &'a [Arc<StorageClass>],
    pub pods: &'a [Arc<Pod>],
}

fn event(on: On, type_: &'static str, reason: &'static str, message: impl Into<String>) -> Step {
    Step::Event {
        on,
        type_,
        reason,
        message: message.into(),
    }
}

fn name_of<K: kube::Resource>(obj: &K) -> String {
    obj.meta().name.clone().unwrap_or_default()
}

fn claim_key(claim: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        name_of(claim)
    )
}

fn volume_name(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

fn claim_phase(claim: &PersistentVolumeClaim) -> &str {
    claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn volume_phase(volume: &PersistentVolume) -> &str {
    volume
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn claim_ref(volume: &PersistentVolume) -> Option<&ObjectReference> {
    volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref())
}

fn set_annotation(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, k: &str) {
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(k.to_string(), "yes".to_string());
}

/// IsDelayBindingMode: the claim's class binds WaitForFirstConsumer.
fn delay_binding(
    claim: &PersistentVolumeClaim,
    classes: &[Arc<StorageClass>],
) -> Result<bool, PlanError> {
    let name = claim_class(claim);
    if name.is_empty() {
        return Ok(false);
    }
    let Some(class) = classes.iter().find(|c| name_of(c.as_ref()) == name) else {
        return Ok(false);
    };
    match class.volume_binding_mode.as_deref() {
        None => Err(PlanError::BindingModeNotSet(name)),
        Some(mode) => Ok(mode == "WaitForFirstConsumer"),
    }
}

/// GetDefaultClass: among the classes marked default, the newest (then the first by name).
pub fn default_class(classes: &[Arc<StorageClass>]) -> Option<&StorageClass> {
    let mut defaults: Vec<&StorageClass> = classes
        .iter()
        .map(|c| c.as_ref())
        .filter(|c| {
            annotation(&c.metadata.annotations, ANN_DEFAULT_CLASS) == Some("true")
                || annotation(&c.metadata.annotations, ANN_BETA_DEFAULT_CLASS) == Some("true")
        })
        .collect();
    defaults.sort_by(|a, b| {
        let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
        tb.cmp(&ta).then_with(|| name_of(*a).cmp(&name_of(*b)))
    });
    defaults.first().copied()
}

/// updateClaimStatus: the phase, and the access modes and capacity of the bound volume (capacity
/// only as the claim becomes Bound, so a resize in progress is not clobbered); None = no write.
fn claim_status(
    claim: &PersistentVolumeClaim,
    phase: &str,
    volume: Option<&PersistentVolume>,
) -> Result<Option<Step>, PlanError> {
    let mut status = claim.status.clone().unwrap_or_default();
    let mut dirty = false;
    if claim_phase(claim) != phase {
        status.phase = Some(phase.to_string());
        dirty = true;
    }
    match volume {
        None => {
            if status.access_modes.take().is_some() {
                dirty = true;
            }
            if status.capacity.take().is_some() {
                dirty = true;
            }
        }
        Some(v) => {
            let modes = v.spec.as_ref().and_then(|s| s.access_modes.clone());
            if status.access_modes != modes {
                status.access_modes = modes;
                dirty = true;
            }
            if claim_phase(claim) != phase {
                let capacity = v.spec.as_ref().and_then(|s| s.capacity.clone());
                let Some(volume_cap) = capacity.as_ref().and_then(|c| c.get("storage")) else {
                    return Err(PlanError::NoCapacity(name_of(v)));
                };
                let claim_cap = status.capacity.as_ref().and_then(|c| c.get("storage"));
                if claim_cap.is_none_or(|c| bytes(c) != bytes(volume_cap)) {
                    status.capacity = capacity;
                    dirty = true;
                }
            }
        }
    }
    Ok(dirty.then(|| Step::ClaimStatus(Box::new(status))))
}

/// updateClaimStatusWithEvent: only a change of phase writes, and only then the event.
fn claim_status_with_event(
    claim: &PersistentVolumeClaim,
    phase: &str,
    type_: &'static str,
    reason: &'static str,
    message: &str,
) -> Result<Vec<Step>, PlanError> {
    if claim_phase(claim) == phase {
        return Ok(vec![]);
    }
    let mut steps: Vec<Step> = claim_status(claim, phase, None)?.into_iter().collect();
    steps.push(event(On::Claim, type_, reason, message));
    Ok(steps)
}

fn volume_phase_step(volume: &PersistentVolume, phase: &str, message: &str) -> Option<Step> {
    (volume_phase(volume) != phase).then(|| Step::VolumePhase {
        volume: Box::new(volume.clone()),
        phase: phase.to_string(),
        message: (!message.is_empty()).then(|| message.to_string()),
    })
}

fn volume_phase_with_event(
    volume: &PersistentVolume,
    phase: &str,
    type_: &'static str,
    reason: &'static str,
    message: &str,
) -> Vec<Step> {
    match volume_phase_step(volume, phase, message) {
        Some(s) => vec![s, event(On::Volume, type_, reason, message)],
        None => vec![],
    }
}

fn with_phase(volume: &PersistentVolume, phase: &str) -> PersistentVolume {
    let mut v = volume.clone();
    v.status.get_or_insert_with(Default::default).phase = Some(phase.to_string());
    v
}

/// bind: the volume's claimRef (+ bound-by-controller), its phase, then the claim's volumeName and
/// annotations, then its status — each written only when it differs.
fn bind(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> Result<Vec<Step>, PlanError> {
    let mut steps = Vec::new();
    let mut v = volume.clone();
    let mut dirty = false;
    let by_controller = !volume_bound_to_claim(volume, claim);
    let current = claim_ref(volume);
    let same = current.is_some_and(|r| {
        r.name == claim.metadata.name
            && r.namespace == claim.metadata.namespace
            && r.uid == claim.metadata.uid
    });
    if !same {
        v.spec.get_or_insert_with(Default::default).claim_ref = Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            namespace: claim.metadata.namespace.clone(),
            name: claim.metadata.name.clone(),
            uid: claim.metadata.uid.clone(),
            resource_version: claim.metadata.resource_version.clone(),
            ..Default::default()
        });
        dirty = true;
    }
    if by_controller && !has_annotation(&v.metadata.annotations, ANN_BOUND_BY_CONTROLLER) {
        set_annotation(&mut v.metadata, ANN_BOUND_BY_CONTROLLER);
        dirty = true;
    }
    if dirty {
        steps.push(Step::UpdateVolume(Box::new(v.clone())));
    }
    steps.extend(volume_phase_step(&v, "Bound", ""));
    let v = with_phase(&v, "Bound");

    let mut c = claim.clone();
    let mut dirty = false;
    if volume_name(claim) != name_of(&v) {
        c.spec.get_or_insert_with(Default::default).volume_name = Some(name_of(&v));
        if !has_annotation(&c.metadata.annotations, ANN_BOUND_BY_CONTROLLER) {
            set_annotation(&mut c.metadata, ANN_BOUND_BY_CONTROLLER);
        }
        dirty = true;
    }
    if !has_annotation(&c.metadata.annotations, ANN_BIND_COMPLETED) {
        set_annotation(&mut c.metadata, ANN_BIND_COMPLETED);
        dirty = true;
    }
    if dirty {
        steps.push(Step::UpdateClaim(Box::new(c.clone())));
    }
    steps.extend(claim_status(&c, "Bound", Some(&v))?);
    Ok(steps)
}

/// syncClaim.
pub fn sync_claim(claim: &PersistentVolumeClaim, caches: &Caches) -> Result<Vec<Step>, PlanError> {
    if has_annotation(&claim.metadata.annotations, ANN_BIND_COMPLETED) {
        sync_bound_claim(claim, caches)
    } else {
        sync_unbound_claim(claim, caches)
    }
}

fn find_volume<'a>(caches: &'a Caches, name: &str) -> Option<&'a PersistentVolume> {
    caches
        .volumes
        .iter()
        .map(|v| v.as_ref())
        .find(|v| name_of(*v) == name)
}

fn sync_unbound_claim(
    claim: &PersistentVolumeClaim,
    caches: &Caches,
) -> Result<Vec<Step>, PlanError> {
    let wanted = volume_name(claim);
    if wanted.is_empty() {
        let delay = delay_binding(claim, caches.classes)?;
        if let Some(volume) = best_match(claim, caches.volumes, delay) {
            return bind(volume, claim);
        }
        // No volume: give a classless claim the default class first (the retroactive
        // DefaultStorageClass assignment), then provision, wait, or report.
        if !claim_has_class(claim) {
            if let Some(class) = default_class(caches.classes) {
                let mut c = claim.clone();
                c.spec
                    .get_or_insert_with(Default::default)
                    .storage_class_name = Some(name_of(class));
                return Ok(vec![Step::UpdateClaim(Box::new(c))]);
            }
        }
        let mut steps = Vec::new();
        if delay && !has_annotation(&claim.metadata.annotations, ANN_SELECTED_NODE) {
            steps.push(wait_for_first_consumer(claim, caches.pods));
        } else if !claim_class(claim).is_empty() {
            return Ok(provision(claim, caches.classes));
        } else {
            steps.push(event(
                On::Claim,
                NORMAL,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set",
            ));
        }
        steps.extend(claim_status(claim, "Pending", None)?);
        return Ok(steps);
    }
    let Some(volume) = find_volume(caches, wanted) else {
        // The user asked for a volume that does not exist (yet).
        return Ok(claim_status(claim, "Pending", None)?.into_iter().collect());
    };
    if claim_ref(volume).is_none() {
        return match check_satisfies(volume, claim) {
            Err(why) => {
                let mut steps = vec![event(
                    On::Claim,
                    WARNING,
                    "VolumeMismatch",
                    format!(
                        "Cannot bind to requested volume {:?}: {why}",
                        name_of(volume)
                    ),
                )];
                steps.extend(claim_status(claim, "Pending", None)?);
                Ok(steps)
            }
            Ok(()) => bind(volume, claim),
        };
    }
    if volume_bound_to_claim(volume, claim) {
        return bind(volume, claim);
    }
    let msg = format!(
        "volume {:?} already bound to a different claim.",
        name_of(volume)
    );
    if !has_annotation(&claim.metadata.annotations, ANN_BOUND_BY_CONTROLLER) {
        let mut steps = vec![event(On::Claim, WARNING, "FailedBinding", msg)];
        steps.extend(claim_status(claim, "Pending", None)?);
        return Ok(steps);
    }
    // Someone removed bind-completed from a claim this controller bound: refuse to guess.
    let owner = claim_ref(volume)
        .map(|r| {
            format!(
                "{}/{}",
                r.namespace.as_deref().unwrap_or_default(),
                r.name.as_deref().unwrap_or_default()
            )
        })
        .unwrap_or_default();
    Err(PlanError::InvalidBinding {
        claim: claim_key(claim),
        volume: wanted.to_string(),
        owner,
    })
}

/// emitEventForUnboundDelayBindingClaim: names the unscheduled pods that wait for the claim.
fn wait_for_first_consumer(claim: &PersistentVolumeClaim, pods: &[Arc<Pod>]) -> Step {
    let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
    let name = name_of(claim);
    let waiting: Vec<String> = pods
        .iter()
        .filter(|p| refers_to(p, ns, &name) && !is_terminated(p) && node_name(p).is_empty())
        .map(|p| name_of(p.as_ref()))
        .collect();
    match waiting.as_slice() {
        [] => event(
            On::Claim,
            NORMAL,
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding",
        ),
        [one] => event(
            On::Claim,
            NORMAL,
            "WaitForPodScheduled",
            format!("waiting for pod {one} to be scheduled"),
        ),
        many => event(
            On::Claim,
            NORMAL,
            "WaitForPodScheduled",
            format!("waiting for pods {} to be scheduled", many.join(",")),
        ),
    }
}

/// provisionClaim: kiln has no in-tree volume plugins, so every provisioner outside
/// `kubernetes.io/` is external — the claim is annotated with it and waits for it.
fn provision(claim: &PersistentVolumeClaim, classes: &[Arc<StorageClass>]) -> Vec<Step> {
    let class_name = claim_class(claim);
    let Some(class) = classes.iter().find(|c| name_of(c.as_ref()) == class_name) else {
        return vec![event(
            On::Claim,
            WARNING,
            "ProvisioningFailed",
            format!("storageclass.storage.k8s.io {class_name:?} not found"),
        )];
    };
    let provisioner = class.provisioner.as_str();
    if provisioner.starts_with("kubernetes.io/") {
        return vec![event(
            On::Claim,
            WARNING,
            "ProvisioningFailed",
            format!("no volume plugin matched name: {provisioner}"),
        )];
    }
    let mut steps = Vec::new();
    let annotations = &claim.metadata.annotations;
    if annotation(annotations, ANN_STORAGE_PROVISIONER) != Some(provisioner)
        || annotation(annotations, ANN_BETA_STORAGE_PROVISIONER) != Some(provisioner)
    {
        let mut c = claim.clone();
        let a = c.metadata.annotations.get_or_insert_with(Default::default);
        a.insert(ANN_STORAGE_PROVISIONER.into(), provisioner.into());
        a.insert(ANN_BETA_STORAGE_PROVISIONER.into(), provisioner.into());
        steps.push(Step::UpdateClaim(Box::new(c)));
    }
    steps.push(event(On::Claim, NORMAL, "ExternalProvisioning", format!(
        "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
    )));
    steps
}

fn sync_bound_claim(
    claim: &PersistentVolumeClaim,
    caches: &Caches,
) -> Result<Vec<Step>, PlanError> {
    let wanted = volume_name(claim);
    if wanted.is_empty() {
        return claim_status_with_event(
            claim,
            "Lost",
            WARNING,
            "ClaimLost",
            "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
        );
    }
    let Some(volume) = find_volume(caches, wanted) else {
        return claim_status_with_event(
            claim,
            "Lost",
            WARNING,
            "ClaimLost",
            "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
        );
    };
    match claim_ref(volume) {
        // Unbound since (or our cache has not seen the binding yet): bind again.
        None => bind(volume, claim),
        Some(r) if r.uid == claim.metadata.uid => bind(volume, claim),
        Some(_) => claim_status_with_event(
            claim,
            "Lost",
            WARNING,
            "ClaimMisbound",
            "Two claims are bound to the same volume, this one is bound incorrectly",
        ),
    }
}

/// syncVolume. `claim` is the newest claim of the claimRef's namespace and name the loop could
/// find (its cache, then the API), if any.
pub fn sync_volume(
    volume: &PersistentVolume,
    claim: Option<&PersistentVolumeClaim>,
    pods: &[Arc<Pod>],
) -> Vec<Step> {
    let Some(r) = claim_ref(volume) else {
        return volume_phase_step(volume, "Available", "")
            .into_iter()
            .collect();
    };
    if r.uid.as_deref().unwrap_or("").is_empty() {
        // Pre-bound by the user; the claim's sync binds it.
        return volume_phase_step(volume, "Available", "")
            .into_iter()
            .collect();
    }
    // A claim of the same name with another UID is a new claim: the old one is gone.
    let claim = claim.filter(|c| c.metadata.uid == r.uid);
    let Some(claim) = claim else {
        return release_and_reclaim(volume, pods);
    };
    let bound_to = volume_name(claim);
    if bound_to.is_empty() {
        if volume_mode_mismatch(claim, volume) {
            return vec![
                event(On::Volume, WARNING, "VolumeMismatch", format!(
                    "Cannot bind PersistentVolume to requested PersistentVolumeClaim {:?} due to incompatible volumeMode.",
                    name_of(claim))),
                event(On::Claim, WARNING, "VolumeMismatch", format!(
                    "Cannot bind PersistentVolume {:?} to requested PersistentVolumeClaim due to incompatible volumeMode.",
                    name_of(volume))),
            ];
        }
        // Half bound (by this controller, a provisioner or the scheduler): the claim's sync
        // finishes it.
        return vec![Step::SyncClaim {
            namespace: claim.metadata.namespace.clone().unwrap_or_default(),
            name: name_of(claim),
        }];
    }
    if bound_to == name_of(volume) {
        return volume_phase_step(volume, "Bound", "").into_iter().collect();
    }
    // The claim is bound to another volume.
    let policy = reclaim_policy(volume);
    if has_annotation(&volume.metadata.annotations, ANN_DYNAMICALLY_PROVISIONED)
        && policy == "Delete"
    {
        // Provisioned for this claim, which got another volume: not needed any more.
        return release_and_reclaim(volume, pods);
    }
    unbind(volume)
}

fn reclaim_policy(volume: &PersistentVolume) -> &str {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("Retain")
}

/// The claim is gone: Released (a Failed volume keeps its phase, so the user sees what went
/// wrong), then the reclaim policy.
fn release_and_reclaim(volume: &PersistentVolume, pods: &[Arc<Pod>]) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut volume = volume.clone();
    if !matches!(volume_phase(&volume), "Released" | "Failed") {
        steps.extend(volume_phase_step(&volume, "Released", ""));
        volume = with_phase(&volume, "Released");
    }
    steps.extend(reclaim(&volume, pods));
    steps
}

/// reclaimVolume. kiln has no in-tree deleters or recyclers: Delete is left to the external
/// provisioner that made the volume (kiln's own is the kubelet's local-path provisioner), and is a
/// failure for a volume nobody provisioned; Recycle fails as upstream's does without a recycler.
fn reclaim(volume: &PersistentVolume, pods: &[Arc<Pod>]) -> Vec<Step> {
    if annotation(&volume.metadata.annotations, ANN_MIGRATED_TO).is_some_and(|m| !m.is_empty()) {
        return vec![];
    }
    let name = name_of(volume);
    match reclaim_policy(volume) {
        "Retain" => vec![],
        "Recycle" => {
            let users = users_of(volume, pods);
            if !users.is_empty() {
                return vec![event(
                    On::Volume,
                    NORMAL,
                    "VolumeFailedRecycle",
                    format!("Volume is used by pods: {}", users.join(",")),
                )];
            }
            volume_phase_with_event(
                volume,
                "Failed",
                WARNING,
                "VolumeFailedRecycle",
                "No recycler plugin found for the volume!",
            )
        }
        "Delete" => {
            let provisioner =
                annotation(&volume.metadata.annotations, ANN_DYNAMICALLY_PROVISIONED).unwrap_or("");
            let failure = if provisioner.is_empty() {
                format!("error getting deleter volume plugin for volume {name:?}: no deletable volume plugin matched")
            } else if provisioner.starts_with("kubernetes.io/") {
                format!("no volume plugin matched name: {provisioner}")
            } else {
                // External deleter: its provisioner removes the volume and the PV.
                return vec![];
            };
            volume_phase_with_event(volume, "Failed", WARNING, "VolumeFailedDelete", &failure)
        }
        _ => volume_phase_with_event(
            volume,
            "Failed",
            WARNING,
            "VolumeUnknownReclaimPolicy",
            "Volume has unrecognized PersistentVolumeReclaimPolicy",
        ),
    }
}

/// isVolumeUsed: the running pods that use the volume's claim, as `namespace/name`, sorted.
fn users_of(volume: &PersistentVolume, pods: &[Arc<Pod>]) -> Vec<String> {
    let Some(r) = claim_ref(volume) else {
        return vec![];
    };
    let ns = r.namespace.as_deref().unwrap_or_default();
    let claim = r.name.as_deref().unwrap_or_default();
    let mut users: Vec<String> = pods
        .iter()
        .filter(|p| refers_to(p, ns, claim) && !is_terminated(p))
        .map(|p| format!("{ns}/{}", name_of(p.as_ref())))
        .collect();
    users.sort();
    users.dedup();
    users
}

/// unbindVolume: a binding this controller made is undone; a user's pre-binding keeps its claim
/// name and loses only the UID. Then Available.
fn unbind(volume: &PersistentVolume) -> Vec<Step> {
    let mut v = volume.clone();
    if has_annotation(&volume.metadata.annotations, ANN_BOUND_BY_CONTROLLER) {
        if let Some(spec) = v.spec.as_mut() {
            spec.claim_ref = None;
        }
        if let Some(a) = v.metadata.annotations.as_mut() {
            a.remove(ANN_BOUND_BY_CONTROLLER);
        }
        if v.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.is_empty())
        {
            v.metadata.annotations = None;
        }
    } else if let Some(r) = v.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
        r.uid = None;
    }
    let mut steps = vec![Step::UpdateVolume(Box::new(v.clone()))];
    steps.extend(volume_phase_step(&v, "Available", ""));
    steps
}

#[cfg(test)]
#[path = "pv_plan_tests.rs"]
mod tests;
