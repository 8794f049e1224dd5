//! Which PersistentVolume a claim may bind to: upstream's pv index (pkg/controller/volume/
//! persistentvolume/index.go) and the storage helpers it uses — classes read from the beta
//! annotation first, access modes as a subset, volumeMode defaulting to Filesystem, sizes compared
//! as exact byte counts, and among the candidates the volume with the fewest access modes, then
//! the smallest one.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::selector;

pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
pub const ANN_DYNAMICALLY_PROVISIONED: &str = "pv.kubernetes.io/provisioned-by";
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
pub const ANN_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
pub const ANN_BETA_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";

pub fn annotation<'a>(
    annotations: &'a Option<BTreeMap<String, String>>,
    key: &str,
) -> Option<&'a str> {
    annotations.as_ref()?.get(key).map(String::as_str)
}

pub fn has_annotation(annotations: &Option<BTreeMap<String, String>>, key: &str) -> bool {
    annotation(annotations, key).is_some()
}

/// GetPersistentVolumeClaimClass: the beta annotation wins over spec.storageClassName.
pub fn claim_class(claim: &PersistentVolumeClaim) -> String {
    if let Some(c) = annotation(&claim.metadata.annotations, ANN_BETA_STORAGE_CLASS) {
        return c.to_string();
    }
    claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default()
}

/// PersistentVolumeClaimHasClass: the user asked for a class, even "" (= no class).
pub fn claim_has_class(claim: &PersistentVolumeClaim) -> bool {
    has_annotation(&claim.metadata.annotations, ANN_BETA_STORAGE_CLASS)
        || claim
            .spec
            .as_ref()
            .is_some_and(|s| s.storage_class_name.is_some())
}

/// GetPersistentVolumeClass.
pub fn volume_class(volume: &PersistentVolume) -> String {
    if let Some(c) = annotation(&volume.metadata.annotations, ANN_BETA_STORAGE_CLASS) {
        return c.to_string();
    }
    volume
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default()
}

fn claim_modes(claim: &PersistentVolumeClaim) -> Vec<String> {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.clone())
        .unwrap_or_default()
}

fn volume_modes(volume: &PersistentVolume) -> Vec<String> {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.clone())
        .unwrap_or_default()
}

/// CheckAccessModes: every mode the claim asks for is one the volume offers.
pub fn access_modes_match(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let offered = volume_modes(volume);
    claim_modes(claim).iter().all(|m| offered.contains(m))
}

/// CheckVolumeModeMismatches (both default to Filesystem).
pub fn volume_mode_mismatch(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let wanted = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem");
    let offered = volume
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem");
    wanted != offered
}

/// IsVolumeBoundToClaim: the claimRef names the claim, and its UID, when set, is the claim's.
pub fn volume_bound_to_claim(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    if r.name != claim.metadata.name || r.namespace != claim.metadata.namespace {
        return false;
    }
    match r.uid.as_deref() {
        None | Some("") => true,
        Some(uid) => Some(uid) == claim.metadata.uid.as_deref(),
    }
}

/// A quantity as whole bytes, rounded up like resource.Quantity.Value(); None when unparsable.
pub fn bytes(q: &Quantity) -> Option<i128> {
    let s = q.0.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    // Decimal digits kept as an integer over a power of ten, so "1.5Gi" is exact.
    let (negative, number) = match number.strip_prefix('-') {
        Some(n) => (true, n),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let digits: i128 = format!("{int}{frac}").parse().ok()?;
    let scale = 10i128.checked_pow(frac.len() as u32)?;
    let (mul, div): (i128, i128) = match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1_000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (10i128.pow(12), 1),
        "P" => (10i128.pow(15), 1),
        "E" => (10i128.pow(18), 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..].parse().ok()?;
            if e >= 0 {
                (10i128.checked_pow(e as u32)?, 1)
            } else {
                (1, 10i128.checked_pow((-e) as u32)?)
            }
        }
        _ => return None,
    };
    let numerator = digits.checked_mul(mul)?;
    let denominator = scale.checked_mul(div)?;
    let value = (numerator + denominator - 1) / denominator;
    Some(if negative {
        -(numerator / denominator)
    } else {
        value
    })
}

/// spec.resources.requests.storage of a claim, in bytes (0 when unset).
pub fn requested_bytes(claim: &PersistentVolumeClaim) -> i128 {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(bytes)
        .unwrap_or(0)
}

/// spec.capacity.storage of a volume, in bytes (0 when unset).
pub fn capacity_bytes(volume: &PersistentVolume) -> i128 {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(bytes)
        .unwrap_or(0)
}

fn phase(volume: &PersistentVolume) -> &str {
    volume
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// findMatchingVolume over one access-mode group, on the PV controller's path (no node: volumes
/// of delayed-binding claims are left to the scheduler unless pre-bound).
fn matching_in<'a>(
    claim: &PersistentVolumeClaim,
    volumes: &[&'a PersistentVolume],
    delay_binding: bool,
) -> Option<&'a PersistentVolume> {
    let requested = requested_bytes(claim);
    let class = claim_class(claim);
    let selector = claim.spec.as_ref().and_then(|s| s.selector.as_ref());
    let mut best: Option<(&PersistentVolume, i128)> = None;
    for &volume in volumes {
        let size = capacity_bytes(volume);
        if size < requested {
            continue;
        }
        if volume_mode_mismatch(claim, volume) || volume.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if volume_bound_to_claim(volume, claim) {
            return Some(volume);
        }
        if delay_binding {
            continue;
        }
        if phase(volume) != "Available" {
            // Volumes on their way to Available would likely fail to bind on a conflict.
            continue;
        }
        if volume.spec.as_ref().is_some_and(|s| s.claim_ref.is_some()) {
            continue;
        }
        if selector.is_some() && !selector::matches(selector, volume.metadata.labels.as_ref()) {
            continue;
        }
        if volume_class(volume) != class {
            continue;
        }
        if best.is_none_or(|(_, s)| s > size) {
            best = Some((volume, size));
        }
    }
    best.map(|(v, _)| v)
}

/// findBestMatchForClaim: the volumes grouped by their access modes, the groups that offer every
/// mode the claim asks for tried fewest modes first; the first group with a match decides.
pub fn best_match<'a>(
    claim: &PersistentVolumeClaim,
    volumes: &'a [std::sync::Arc<PersistentVolume>],
    delay_binding: bool,
) -> Option<&'a PersistentVolume> {
    let wanted = claim_modes(claim);
    let mut groups: BTreeMap<Vec<String>, Vec<&PersistentVolume>> = BTreeMap::new();
    for v in volumes {
        let mut modes = volume_modes(v);
        modes.sort();
        modes.dedup();
        if wanted.iter().all(|m| modes.contains(m)) {
            groups.entry(modes).or_default().push(v.as_ref());
        }
    }
    let mut groups: Vec<(Vec<String>, Vec<&PersistentVolume>)> = groups.into_iter().collect();
    groups.sort_by_key(|(modes, _)| modes.len());
    groups
        .iter()
        .find_map(|(_, vols)| matching_in(claim, vols, delay_binding))
}

/// checkVolumeSatisfyClaim for a claim that names its volume: upstream's error texts.
pub fn check_satisfies(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Result<(), String> {
    if volume.metadata.deletion_timestamp.is_some() {
        return Err(format!(
            "the volume is marked for deletion {:?}",
            volume.metadata.name.as_deref().unwrap_or_default()
        ));
    }
    if capacity_bytes(volume) < requested_bytes(claim) {
        return Err("requested PV is too small".into());
    }
    if volume_class(volume) != claim_class(claim) {
        return Err("storageClassName does not match".into());
    }
    if volume_mode_mismatch(claim, volume) {
        return Err("incompatible volumeMode".into());
    }
    if !access_modes_match(claim, volume) {
        return Err("incompatible accessMode".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn pv(v: serde_json::Value) -> Arc<PersistentVolume> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn available(name: &str, size: &str, modes: &[&str]) -> serde_json::Value {
        json!({"metadata": {"name": name}, "spec": {"capacity": {"storage": size},
            "accessModes": modes, "hostPath": {"path": "/x"}}, "status": {"phase": "Available"}})
    }

    fn claim(v: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(v).unwrap()
    }

    fn rwo_claim(size: &str) -> PersistentVolumeClaim {
        claim(
            json!({"metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                "resources": {"requests": {"storage": size}}}}),
        )
    }

    #[test]
    fn quantities_are_exact_bytes() {
        let q = |s: &str| bytes(&Quantity(s.into()));
        assert_eq!(q("1Gi"), Some(1 << 30));
        assert_eq!(q("1.5Gi"), Some(3 << 29));
        assert_eq!(q("1G"), Some(1_000_000_000));
        assert_eq!(q("2e3"), Some(2000));
        assert_eq!(q("100m"), Some(1), "rounded up like Value()");
        assert_eq!(q("10"), Some(10));
        assert_eq!(q("abc"), None);
        assert_eq!(q("1Zi"), None);
    }

    #[test]
    fn the_smallest_big_enough_volume_wins() {
        let vols = vec![
            pv(available("big", "10Gi", &["ReadWriteOnce"])),
            pv(available("small", "1Gi", &["ReadWriteOnce"])),
            pv(available("fits", "2Gi", &["ReadWriteOnce"])),
        ];
        let m = best_match(&rwo_claim("1500Mi"), &vols, false).unwrap();
        assert_eq!(m.metadata.name.as_deref(), Some("fits"));
        assert!(best_match(&rwo_claim("20Gi"), &vols, false).is_none());
    }

    #[test]
    fn fewer_access_modes_are_tried_first() {
        let vols = vec![
            pv(available("many", "1Gi", &["ReadWriteOnce", "ReadOnlyMany"])),
            pv(available("exact", "5Gi", &["ReadWriteOnce"])),
            pv(available("other", "1Gi", &["ReadWriteMany"])),
        ];
        let m = best_match(&rwo_claim("1Gi"), &vols, false).unwrap();
        assert_eq!(m.metadata.name.as_deref(), Some("exact"));
    }

    #[test]
    fn class_selector_mode_phase_and_claim_ref_filter() {
        let mut wrong_class = available("class", "1Gi", &["ReadWriteOnce"]);
        wrong_class["spec"]["storageClassName"] = json!("fast");
        let mut block = available("block", "1Gi", &["ReadWriteOnce"]);
        block["spec"]["volumeMode"] = json!("Block");
        let mut released = available("released", "1Gi", &["ReadWriteOnce"]);
        released["status"]["phase"] = json!("Released");
        let mut taken = available("taken", "1Gi", &["ReadWriteOnce"]);
        taken["spec"]["claimRef"] = json!({"namespace": "ns", "name": "other"});
        let mut deleting = available("deleting", "1Gi", &["ReadWriteOnce"]);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let vols: Vec<_> = [wrong_class, block, released, taken, deleting]
            .into_iter()
            .map(pv)
            .collect();
        assert!(best_match(&rwo_claim("1Gi"), &vols, false).is_none());

        let mut labelled = available("labelled", "1Gi", &["ReadWriteOnce"]);
        labelled["metadata"]["labels"] = json!({"tier": "gold"});
        let vols = vec![
            pv(available("plain", "1Gi", &["ReadWriteOnce"])),
            pv(labelled),
        ];
        let mut c = rwo_claim("1Gi");
        c.spec.as_mut().unwrap().selector =
            Some(serde_json::from_value(json!({"matchLabels": {"tier": "gold"}})).unwrap());
        assert_eq!(
            best_match(&c, &vols, false)
                .unwrap()
                .metadata
                .name
                .as_deref(),
            Some("labelled")
        );
    }

    #[test]
    fn a_pre_bound_volume_is_taken_in_any_phase_even_when_binding_waits() {
        let mut pre = available("pre", "1Gi", &["ReadWriteOnce"]);
        pre["spec"]["claimRef"] = json!({"namespace": "ns", "name": "c"});
        pre["status"]["phase"] = json!("Bound");
        let vols = vec![pv(available("free", "1Gi", &["ReadWriteOnce"])), pv(pre)];
        let m = best_match(&rwo_claim("1Gi"), &vols, true).unwrap();
        assert_eq!(m.metadata.name.as_deref(), Some("pre"));
        // Delayed binding leaves free volumes to the scheduler.
        let vols = vec![pv(available("free", "1Gi", &["ReadWriteOnce"]))];
        assert!(best_match(&rwo_claim("1Gi"), &vols, true).is_none());
        // A claimRef with another UID is another claim's.
        let mut other = available("other", "1Gi", &["ReadWriteOnce"]);
        other["spec"]["claimRef"] = json!({"namespace": "ns", "name": "c", "uid": "old"});
        assert!(best_match(&rwo_claim("1Gi"), &[pv(other)], false).is_none());
    }

    #[test]
    fn a_named_volume_is_checked_with_upstreams_texts() {
        let c = rwo_claim("2Gi");
        let small: PersistentVolume =
            serde_json::from_value(available("v", "1Gi", &["ReadWriteOnce"])).unwrap();
        assert_eq!(
            check_satisfies(&small, &c).unwrap_err(),
            "requested PV is too small"
        );
        let mut v = available("v", "2Gi", &["ReadOnlyMany"]);
        let ro: PersistentVolume = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(
            check_satisfies(&ro, &c).unwrap_err(),
            "incompatible accessMode"
        );
        v["spec"]["storageClassName"] = json!("x");
        let classy: PersistentVolume = serde_json::from_value(v).unwrap();
        assert_eq!(
            check_satisfies(&classy, &c).unwrap_err(),
            "storageClassName does not match"
        );
        let ok: PersistentVolume =
            serde_json::from_value(available("v", "2Gi", &["ReadWriteOnce"])).unwrap();
        assert!(check_satisfies(&ok, &c).is_ok());
    }

    #[test]
    fn the_beta_class_annotation_wins() {
        let c = claim(json!({"metadata": {"name": "c",
            "annotations": {ANN_BETA_STORAGE_CLASS: "beta"}}, "spec": {"storageClassName": "ga"}}));
        assert_eq!(claim_class(&c), "beta");
        assert!(claim_has_class(&c));
        assert!(!claim_has_class(&claim(
            json!({"metadata": {"name": "c"}, "spec": {}})
        )));
    }
}
