//! `persistentVolumeClaim:` and `ephemeral:` volumes: the claim is looked up, then the PersistentVolume
//! it is bound to, and the PV's node-local directory (`local` or `hostPath`) is what containers mount —
//! containerd bind-mounts it straight from there, so the pod's own directory never holds the data and
//! tearing the pod down leaves it (it belongs to the PV). Every refusal uses upstream's words
//! (kubelet's desired-state-of-world populator and component-helpers' ephemeral check), so a pod stuck
//! in ContainerCreating explains itself the same way in `kubectl describe`.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Volume};

use super::{host_path, VolumeError};
use crate::pod_objects::{ObjectError, PodObjects};

/// A volume that names a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimSource {
    pub claim_name: String,
    pub read_only: bool,
    /// An ephemeral volume: the claim `<pod>-<volume>` must be controlled by the pod.
    pub ephemeral: bool,
}

/// Where a bound claim's data is on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub pv: String,
    pub path: PathBuf,
    /// The claim volume's readOnly (upstream mounts the whole volume read-only then).
    pub read_only: bool,
    /// A `local` PV, whose ownership the kubelet manages (fsGroup); a hostPath one is not.
    pub managed: bool,
}

/// The claim a pod volume refers to, when it is a persistentVolumeClaim or ephemeral volume.
pub fn claim_source(pod: &Pod, v: &Volume) -> Option<ClaimSource> {
    if let Some(c) = &v.persistent_volume_claim {
        return Some(ClaimSource {
            claim_name: c.claim_name.clone(),
            read_only: c.read_only == Some(true),
            ephemeral: false,
        });
    }
    v.ephemeral.as_ref().map(|_| ClaimSource {
        // Upstream's ephemeral.VolumeClaimName.
        claim_name: format!(
            "{}-{}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            v.name
        ),
        read_only: false,
        ephemeral: true,
    })
}

/// Upstream's checks of the claim before the kubelet uses it; returns the PV's name.
pub fn check_claim<'a>(
    pod: &Pod,
    src: &ClaimSource,
    claim: Option<&'a PersistentVolumeClaim>,
) -> Result<&'a str, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = &src.claim_name;
    let Some(claim) = claim else {
        return Err(format!(
            "failed to fetch PVC from API server: persistentvolumeclaims {name:?} not found"
        ));
    };
    if src.ephemeral {
        let pod_uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let controlled = claim
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.uid == pod_uid);
        if !controlled {
            return Err(format!(
                "PVC {ns}/{name} was not created for pod {ns}/{} (pod is not owner)",
                pod.metadata.name.as_deref().unwrap_or_default()
            ));
        }
    }
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(format!(
            "can't start pod because PVC {ns}/{name} is being deleted"
        ));
    }
    let phase = claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    let volume_name = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or_default();
    if phase != "Bound" || volume_name.is_empty() {
        return Err(format!(
            "PVC {ns}/{name} has non-bound phase ({phase:?}) or empty pvc.Spec.VolumeName ({volume_name:?})"
        ));
    }
    Ok(volume_name)
}

/// PV spec fields that are not a volume source.
const NOT_SOURCES: &[&str] = &[
    "accessModes",
    "capacity",
    "claimRef",
    "mountOptions",
    "nodeAffinity",
    "persistentVolumeReclaimPolicy",
    "storageClassName",
    "volumeAttributesClassName",
    "volumeMode",
];

/// The PV's node-local directory, after upstream's claimRef check; any source but `local` and
/// `hostPath` (and any block-mode PV) is refused by name.
pub fn pv_path(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> Result<PathBuf, String> {
    let name = pv.metadata.name.as_deref().unwrap_or_default();
    let spec = pv.spec.clone().unwrap_or_default();
    let Some(claim_ref) = &spec.claim_ref else {
        return Err(format!(
            "found PV object {name:?} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        ));
    };
    let claim_uid = claim.metadata.uid.as_deref().unwrap_or_default();
    let ref_uid = claim_ref.uid.as_deref().unwrap_or_default();
    if ref_uid != claim_uid {
        return Err(format!(
            "found PV object {name:?} but its pv.Spec.ClaimRef.UID ({ref_uid:?}) does not point to claim.UID ({claim_uid:?})"
        ));
    }
    if spec.volume_mode.as_deref() == Some("Block") {
        return Err(format!(
            "PersistentVolume {name:?}: volumeMode Block is not supported by kiln-kubelet"
        ));
    }
    if let Some(l) = &spec.local {
        return Ok(PathBuf::from(&l.path));
    }
    if let Some(h) = &spec.host_path {
        return Ok(PathBuf::from(&h.path));
    }
    let json = serde_json::to_value(&spec).unwrap_or_default();
    let source = json
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .find(|k| !NOT_SOURCES.contains(&k.as_str()))
        .cloned()
        .unwrap_or_else(|| "no volume source".into());
    Err(format!(
        "PersistentVolume {name:?} uses {source}: only local and hostPath persistent volumes are supported by kiln-kubelet"
    ))
}

/// Checks the directory is there the way upstream's plugins do: `local` needs an existing path,
/// `hostPath` gets its `type` check (DirectoryOrCreate makes it).
fn check_path(pv: &PersistentVolume, path: &Path) -> Result<(), VolumeError> {
    let spec = pv.spec.as_ref();
    if let Some(h) = spec.and_then(|s| s.host_path.as_ref()) {
        return host_path::check(path, h.type_.as_deref());
    }
    if std::fs::metadata(path).is_err() {
        return Err(VolumeError::Unsupported(format!(
            "MountVolume.NewMounter initialization failed for volume {:?} : path {:?} does not exist",
            pv.metadata.name.as_deref().unwrap_or_default(),
            path.display().to_string()
        )));
    }
    Ok(())
}

/// Claim → PV → checked path, from the API. Called on every set-up attempt until it succeeds (the pod
/// waits in ContainerCreating meanwhile, retried each sync).
pub async fn resolve(
    pod: &Pod,
    src: &ClaimSource,
    objects: &dyn PodObjects,
) -> Result<Resolved, VolumeError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let claim_err = |message: String| VolumeError::Claim {
        namespace: ns.into(),
        name: src.claim_name.clone(),
        message,
    };
    let claim = objects
        .persistent_volume_claim(ns, &src.claim_name)
        .await
        .map_err(|e| claim_err(format!("failed to fetch PVC from API server: {e}")))?;
    let pv_name = check_claim(pod, src, claim.as_ref()).map_err(claim_err)?;
    let claim = claim.as_ref().expect("check_claim refuses a missing claim");
    let pv = match objects.persistent_volume(pv_name).await {
        Ok(Some(pv)) => pv,
        Ok(None) => {
            return Err(claim_err(format!(
            "failed to fetch PV {pv_name} from API server: persistentvolumes {pv_name:?} not found"
        )))
        }
        Err(ObjectError::Api { message, .. }) => {
            return Err(claim_err(format!(
                "failed to fetch PV {pv_name} from API server: {message}"
            )))
        }
        Err(e) => return Err(e.into()),
    };
    let path = pv_path(&pv, claim).map_err(claim_err)?;
    check_path(&pv, &path)?;
    Ok(Resolved {
        pv: pv_name.to_string(),
        path,
        read_only: src.read_only,
        managed: pv.spec.as_ref().is_some_and(|s| s.local.is_some()),
    })
}

#[cfg(test)]
#[path = "pvc_tests.rs"]
mod tests;
