//! Deleting a CRD deletes its objects first (upstream's finalizer controller): objects without
//! finalizers go at once, the others get a deletionTimestamp and go when their finalizers are
//! removed. Namespaced and cluster-scoped CRs share one key root per CRD.

use serde_json::{json, Value};

use super::controller::ControllerError;
use crate::registry::lifecycle::{from_stored, now_rfc3339, to_stored};
use crate::storage::{Store, StoreError};

/// The CRD's key root (the one `build::specs` gives its versions).
fn root(crd: &Value) -> String {
    let group = crd["spec"]["group"].as_str().unwrap_or("");
    let plural = crd["status"]["acceptedNames"]["plural"]
        .as_str()
        .filter(|p| !p.is_empty())
        .or_else(|| crd["spec"]["names"]["plural"].as_str())
        .unwrap_or("");
    format!("/registry/{group}/{plural}/")
}

/// One deletion pass; returns how many objects are left.
pub async fn delete_instances(store: &Store, crd: &Value) -> Result<usize, ControllerError> {
    let root = root(crd);
    if root.contains("//") {
        return Ok(0);
    }
    let (items, _) = store.list(&root).await?;
    let mut left = 0;
    for item in items {
        let Ok(mut obj) = from_stored(&item.value, item.mod_revision) else {
            left += 1;
            continue;
        };
        let has_finalizers = obj["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        let result = if has_finalizers {
            left += 1;
            if obj["metadata"]["deletionTimestamp"].is_string() {
                continue;
            }
            obj["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            store
                .update(&item.key, to_stored(&obj), item.mod_revision)
                .await
                .map(|_| ())
        } else {
            store.delete(&item.key, item.mod_revision).await.map(|_| ())
        };
        match result {
            Ok(()) => {}
            Err(StoreError::Conflict | StoreError::NotFound) => {
                left += usize::from(!has_finalizers)
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(left)
}
