//! StorageObjectInUseProtection: every new claim and volume carries the protection finalizer, so
//! deleting one in use only marks it; the controller-manager's pvc-protection / pv-protection
//! controllers remove the finalizer once nothing uses it. Pure.

use serde_json::{json, Value};

pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

/// The finalizer this plugin adds to a created object of `resource` (core group), if any.
pub fn finalizer_for(resource: &str) -> Option<&'static str> {
    match resource {
        "persistentvolumeclaims" => Some(PVC_PROTECTION),
        "persistentvolumes" => Some(PV_PROTECTION),
        _ => None,
    }
}

/// Adds `finalizer` unless it is there already (upstream appends it at the end).
pub fn admit(obj: &mut Value, finalizer: &str) {
    let list = &mut obj["metadata"]["finalizers"];
    if !list.is_array() {
        *list = json!([]);
    }
    if let Some(items) = list.as_array_mut() {
        if !items.iter().any(|f| f == finalizer) {
            items.push(json!(finalizer));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_and_volumes_get_their_finalizer_once() {
        assert_eq!(
            finalizer_for("persistentvolumeclaims"),
            Some(PVC_PROTECTION)
        );
        assert_eq!(finalizer_for("persistentvolumes"), Some(PV_PROTECTION));
        assert_eq!(finalizer_for("pods"), None);
        let mut pvc = json!({"metadata": {"name": "data", "finalizers": ["example.com/keep"]}});
        admit(&mut pvc, PVC_PROTECTION);
        admit(&mut pvc, PVC_PROTECTION);
        assert_eq!(
            pvc["metadata"]["finalizers"],
            json!(["example.com/keep", PVC_PROTECTION])
        );
        let mut pv = json!({"metadata": {"name": "pv1"}});
        admit(&mut pv, PV_PROTECTION);
        assert_eq!(pv["metadata"]["finalizers"], json!([PV_PROTECTION]));
    }
}
