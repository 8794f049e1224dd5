//! What the node's local-path provisioner should do, decided from the claims, PVs and StorageClasses it
//! sees — no I/O here ([`crate::local_path`] watches and acts). The rules are the shared contract's:
//! a claim is this node's to provision when the scheduler chose this node for it
//! (`volume.kubernetes.io/selected-node`), the PV controller marked it for `kiln.io/local-path`
//! (`volume.kubernetes.io/storage-provisioner`, or the beta key) and it is not bound to a volume yet; its
//! PV is named `pvc-<claim uid>`, so a claim already provisioned (by this run or one before a restart)
//! is never provisioned twice. A PV is this node's to delete when it is Released with reclaim Delete,
//! was provisioned by `kiln.io/local-path`, is pinned to exactly this node, and its path is a direct
//! child of the local-path directory — anything else is never touched.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{
    LocalVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub const PROVISIONER: &str = "kiln.io/local-path";
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
pub const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// One step for the loop to take.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Make `dir` (0777), then create `pv`.
    Provision {
        claim: ClaimKey,
        dir: PathBuf,
        pv: Box<PersistentVolume>,
    },
    /// Remove `dir`, then delete the PV.
    Delete {
        pv: String,
        uid: String,
        dir: PathBuf,
    },
    /// A claim of ours that cannot be provisioned (upstream's ProvisioningFailed event).
    Fail { claim: ClaimKey, message: String },
}

/// A claim as events and logs name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ClaimKey {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// What the plan reads.
pub struct World<'a> {
    pub node: &'a str,
    pub root: &'a Path,
    pub claims: &'a [PersistentVolumeClaim],
    pub volumes: &'a [PersistentVolume],
    pub classes: &'a [StorageClass],
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The PV name this provisioner gives a claim (upstream external-provisioner's `pvc-<uid>`).
pub fn pv_name(claim_uid: &str) -> String {
    format!("pvc-{claim_uid}")
}

/// `<root>/pvc-<uid>_<namespace>_<name>`.
pub fn claim_dir(root: &Path, key: &ClaimKey) -> PathBuf {
    root.join(format!("pvc-{}_{}_{}", key.uid, key.namespace, key.name))
}

/// Is `path` a direct child of `root` (lexically: absolute, no `.`/`..`, exactly one name more)?
/// The only paths the provisioner ever makes or removes; the real filesystem also refuses symlinks.
pub fn is_under_root(root: &Path, path: &Path) -> bool {
    let clean = |p: &Path| {
        p.is_absolute()
            && p.components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
    };
    if root.as_os_str().is_empty() || !clean(root) || !clean(path) {
        return false;
    }
    // Spelled exactly `<root>/<name>` (components() would hide a `/./` or a trailing `/`).
    path.file_name()
        .is_some_and(|n| root.join(n).as_os_str() == path.as_os_str())
}

/// The node a PV's required nodeAffinity pins it to: exactly one term with exactly one
/// `kubernetes.io/hostname In [node]` expression (what this provisioner writes), else None.
pub fn pinned_node(pv: &PersistentVolume) -> Option<&str> {
    let terms = &pv
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms;
    let [term] = terms.as_slice() else {
        return None;
    };
    if term.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
        return None;
    }
    let [expr] = term.match_expressions.as_deref()? else {
        return None;
    };
    let values = expr.values.as_deref()?;
    match (expr.key.as_str(), expr.operator.as_str(), values) {
        (HOSTNAME_LABEL, "In", [node]) => Some(node.as_str()),
        _ => None,
    }
}

fn is_ours(claim: &PersistentVolumeClaim, node: &str) -> bool {
    let meta = &claim.metadata;
    let provisioner = annotation(meta, STORAGE_PROVISIONER)
        .or_else(|| annotation(meta, BETA_STORAGE_PROVISIONER));
    annotation(meta, SELECTED_NODE) == Some(node)
        && provisioner == Some(PROVISIONER)
        && meta.deletion_timestamp.is_none()
        && claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .unwrap_or_default()
            .is_empty()
}

/// The decisions for one look at the world, claims first (in name order), then deletions.
pub fn plan(w: &World<'_>) -> Vec<Action> {
    let existing: BTreeSet<&str> = w
        .volumes
        .iter()
        .filter_map(|v| v.metadata.name.as_deref())
        .collect();
    let classes: BTreeMap<&str, &StorageClass> = w
        .classes
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, c)))
        .collect();
    let mut out = Vec::new();
    if w.root.as_os_str().is_empty() {
        return out;
    }
    for claim in w.claims.iter().filter(|c| is_ours(c, w.node)) {
        let key = ClaimKey {
            namespace: claim.metadata.namespace.clone().unwrap_or_default(),
            name: claim.metadata.name.clone().unwrap_or_default(),
            uid: claim.metadata.uid.clone().unwrap_or_default(),
        };
        if key.uid.is_empty() || existing.contains(pv_name(&key.uid).as_str()) {
            continue;
        }
        match provisioned_pv(w, claim, &key, &classes) {
            Ok((dir, pv)) => out.push(Action::Provision {
                claim: key,
                dir,
                pv: Box::new(pv),
            }),
            Err(message) => out.push(Action::Fail {
                claim: key,
                message,
            }),
        }
    }
    for pv in w.volumes {
        if let Some((dir, name, uid)) = deletable(w, pv) {
            out.push(Action::Delete { pv: name, uid, dir });
        }
    }
    out
}

fn deletable(w: &World<'_>, pv: &PersistentVolume) -> Option<(PathBuf, String, String)> {
    let spec = pv.spec.as_ref()?;
    let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
    let dir = PathBuf::from(&spec.local.as_ref()?.path);
    let ok = phase == Some("Released")
        && spec.persistent_volume_reclaim_policy.as_deref() == Some("Delete")
        && annotation(&pv.metadata, PROVISIONED_BY) == Some(PROVISIONER)
        && pinned_node(pv) == Some(w.node)
        && is_under_root(w.root, &dir);
    ok.then(|| {
        (
            dir,
            pv.metadata.name.clone().unwrap_or_default(),
            pv.metadata.uid.clone().unwrap_or_default(),
        )
    })
}

/// The PV for a claim, as the contract spells it.
fn provisioned_pv(
    w: &World<'_>,
    claim: &PersistentVolumeClaim,
    key: &ClaimKey,
    classes: &BTreeMap<&str, &StorageClass>,
) -> Result<(PathBuf, PersistentVolume), String> {
    let spec = claim.spec.clone().unwrap_or_default();
    let class_name = spec.storage_class_name.clone().unwrap_or_default();
    let class = classes
        .get(class_name.as_str())
        .ok_or_else(|| format!("storageclass.storage.k8s.io {class_name:?} not found"))?;
    if class.provisioner != PROVISIONER {
        return Err(format!(
            "storage class {class_name:?} names provisioner {:?}, not {PROVISIONER}",
            class.provisioner
        ));
    }
    if spec.volume_mode.as_deref() == Some("Block") {
        return Err(format!(
            "{PROVISIONER} provisions only Filesystem volumes, not volumeMode Block"
        ));
    }
    if spec.data_source.is_some() || spec.data_source_ref.is_some() {
        return Err(format!(
            "{PROVISIONER} cannot populate a volume from a data source"
        ));
    }
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .cloned()
        .ok_or_else(|| {
            "the claim requests no storage (spec.resources.requests.storage)".to_string()
        })?;
    let dir = claim_dir(w.root, key);
    if !is_under_root(w.root, &dir) {
        return Err(format!(
            "the volume directory {} would not be directly under {}",
            dir.display(),
            w.root.display()
        ));
    }
    let pv = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(pv_name(&key.uid)),
            annotations: Some(BTreeMap::from([(
                PROVISIONED_BY.to_string(),
                PROVISIONER.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".to_string(), storage)])),
            access_modes: spec.access_modes.clone(),
            volume_mode: Some(
                spec.volume_mode
                    .clone()
                    .unwrap_or_else(|| "Filesystem".into()),
            ),
            storage_class_name: Some(class_name),
            persistent_volume_reclaim_policy: Some(
                class
                    .reclaim_policy
                    .clone()
                    .unwrap_or_else(|| "Delete".into()),
            ),
            mount_options: class.mount_options.clone(),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some(key.namespace.clone()),
                name: Some(key.name.clone()),
                uid: Some(key.uid.clone()),
                resource_version: claim.metadata.resource_version.clone(),
                ..Default::default()
            }),
            local: Some(LocalVolumeSource {
                path: dir.display().to_string(),
                fs_type: None,
            }),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: HOSTNAME_LABEL.into(),
                            operator: "In".into(),
                            values: Some(vec![w.node.to_string()]),
                        }]),
                        match_fields: None,
                    }],
                }),
            }),
            ..Default::default()
        }),
        status: None,
    };
    Ok((dir, pv))
}

#[cfg(test)]
#[path = "local_path_plan_tests.rs"]
mod tests;
