//! PersistentVolumeClaimResize: a claim's storage request may grow only when the claim is bound
//! and its StorageClass (unchanged, non-empty) has allowVolumeExpansion: true. Runs after the
//! strategy's validation, as a validating plugin does upstream. Pure: the caller looks the class up.

use serde_json::Value;

use crate::registry::storage_quantity as quantity;

/// The class a claim names (beta annotation first, as GetPersistentVolumeClaimClass).
pub fn claim_class(pvc: &Value) -> &str {
    pvc["metadata"]["annotations"][crate::registry::storage::BETA_STORAGE_CLASS]
        .as_str()
        .or_else(|| pvc["spec"]["storageClassName"].as_str())
        .unwrap_or("")
}

/// What the check needs to know first: does this update grow the claim, and under which class?
pub fn growing_class<'a>(old: &Value, new: &'a Value) -> Option<&'a str> {
    let size = |o: &Value| quantity::of(&o["spec"]["resources"]["requests"]["storage"]);
    match (size(old), size(new)) {
        (Some(before), Some(after)) if after > before => Some(claim_class(new)),
        (None, Some(_)) => Some(claim_class(new)),
        _ => None,
    }
}

/// Ok, or upstream's reason for the 403. `class` is the claim's StorageClass, if it exists.
pub fn admit(old: &Value, new: &Value, class: Option<&Value>) -> Result<(), &'static str> {
    if growing_class(old, new).is_none() {
        return Ok(());
    }
    if old["status"]["phase"] != "Bound" {
        return Err("Only bound persistent volume claims can be expanded");
    }
    let (now, before) = (claim_class(new), claim_class(old));
    let allowed = !now.is_empty()
        && now == before
        && class.is_some_and(|c| c["allowVolumeExpansion"].as_bool() == Some(true));
    if !allowed {
        return Err("only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(size: &str, phase: &str) -> Value {
        json!({"spec": {"storageClassName": "local-path",
            "resources": {"requests": {"storage": size}}}, "status": {"phase": phase}})
    }

    #[test]
    fn growing_needs_a_bound_claim_and_an_expandable_class() {
        let expandable = json!({"allowVolumeExpansion": true});
        let fixed = json!({"provisioner": "kiln.io/local-path"});
        let old = claim("1Gi", "Bound");
        let grown = claim("2Gi", "Bound");
        assert_eq!(admit(&old, &grown, Some(&expandable)), Ok(()));
        assert_eq!(
            admit(&old, &grown, Some(&fixed)),
            Err("only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize")
        );
        assert!(admit(&old, &grown, None).is_err());
        assert_eq!(
            admit(&claim("1Gi", "Pending"), &grown, Some(&expandable)),
            Err("Only bound persistent volume claims can be expanded")
        );
        // Same size (respelled) or smaller is not this plugin's business.
        assert_eq!(admit(&old, &claim("1024Mi", "Bound"), Some(&fixed)), Ok(()));
        assert_eq!(admit(&old, &claim("512Mi", "Bound"), Some(&fixed)), Ok(()));
        let mut classless = grown.clone();
        classless["spec"]["storageClassName"] = json!("");
        assert!(admit(&old, &classless, Some(&expandable)).is_err());
    }
}
