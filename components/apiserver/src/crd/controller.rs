//! Keeps the served custom resources in step with the stored CRDs, in-process like upstream's
//! apiextensions controllers: the naming pass writes status (acceptedNames, NamesAccepted,
//! Established), every established CRD's served versions are put in the registry, and a deleted
//! CRD is marked Terminating while `cleanup.rs` removes its objects. Every apiserver of an HA
//! control plane runs this; status writes are compare-and-swap, so they converge.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;

use super::names::{self, Condition};
use super::{build, cleanup};
use crate::custom_resource::CLEANUP_FINALIZER;
use crate::registry::apiextensions::CUSTOM_RESOURCE_DEFINITIONS;
use crate::registry::lifecycle::{from_stored, now_rfc3339, to_stored};
use crate::registry::Registry;
use crate::storage::{Store, StoreError, Versioned};

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("CRD store access: {0}")]
    Store(#[from] StoreError),
}

/// How long to wait before another pass while a CRD's objects are still being deleted, or after a
/// failed watch.
const RETRY: Duration = Duration::from_secs(1);

fn prefix() -> String {
    CUSTOM_RESOURCE_DEFINITIONS.key_prefix(None)
}

/// One pass: read every CRD, settle names and conditions, register what is established, clean up
/// what is being deleted. Returns the store revision read and whether a CRD is still terminating.
pub async fn reconcile(store: &Store, registry: &Registry) -> Result<(i64, bool), ControllerError> {
    let (items, revision) = store.list(&prefix()).await?;
    let crds: Vec<(Versioned, Value)> = items
        .into_iter()
        .filter_map(|item| {
            let obj = from_stored(&item.value, item.mod_revision).ok()?;
            Some((item, obj))
        })
        .collect();
    let all: Vec<&Value> = crds.iter().map(|(_, o)| o).collect();
    let mut specs = Vec::new();
    let mut terminating = false;
    for (item, crd) in &crds {
        let deleting = crd["metadata"]["deletionTimestamp"].is_string();
        let group = crd["spec"]["group"].as_str().unwrap_or("");
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or("");
        let naming = names::decide(crd, &all, registry.builtin_group_resource(group, plural));
        let mut updated = crd.clone();
        let status = &mut updated["status"];
        if !deleting {
            status["acceptedNames"] = naming.accepted.clone();
            set_condition(status, &naming.names_accepted);
            set_condition(status, &naming.established);
        } else {
            terminating = true;
            set_condition(
                status,
                &Condition {
                    type_: "Terminating",
                    status: "True",
                    reason: "InstanceDeletionInProgress",
                    message: "CustomResource deletion is in progress".into(),
                },
            );
        }
        if updated != *crd {
            write(store, item, &updated).await?;
        }
        let established = updated["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        if established {
            specs.extend(build::specs(&updated, deleting));
        }
        if deleting {
            finish_deletion(store, item, &updated).await?;
        }
    }
    registry.set_custom(specs);
    Ok((revision, terminating))
}

/// Deletes the CRD's objects; once none is left, drops the clean-up finalizer (and the CRD when it
/// was the last one).
async fn finish_deletion(
    store: &Store,
    item: &Versioned,
    crd: &Value,
) -> Result<(), ControllerError> {
    let finalizers: Vec<Value> = crd["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
        return Ok(());
    }
    let remaining = cleanup::delete_instances(store, crd).await?;
    if remaining > 0 {
        return Ok(());
    }
    let current = match store.get(&item.key).await? {
        Some(v) => v,
        None => return Ok(()),
    };
    let mut obj = match from_stored(&current.value, current.mod_revision) {
        Ok(o) => o,
        Err(_) => return Ok(()),
    };
    let left: Vec<Value> = finalizers
        .into_iter()
        .filter(|f| f != CLEANUP_FINALIZER)
        .collect();
    let result = if left.is_empty() {
        store
            .delete(&item.key, current.mod_revision)
            .await
            .map(|_| ())
    } else {
        obj["metadata"]["finalizers"] = json!(left);
        store
            .update(&item.key, to_stored(&obj), current.mod_revision)
            .await
            .map(|_| ())
    };
    match result {
        Ok(()) => {
            tracing::info!(crd = %crd["metadata"]["name"].as_str().unwrap_or(""), "CRD deleted after its objects");
            Ok(())
        }
        // Another apiserver got there first, or the CRD changed: the next pass looks again.
        Err(StoreError::Conflict | StoreError::NotFound) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn write(store: &Store, item: &Versioned, obj: &Value) -> Result<(), ControllerError> {
    match store
        .update(&item.key, to_stored(obj), item.mod_revision)
        .await
    {
        Ok(_) | Err(StoreError::Conflict | StoreError::NotFound) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Sets one condition, keeping lastTransitionTime when its status did not change.
fn set_condition(status: &mut Value, c: &Condition) {
    if !status.is_object() {
        *status = json!({});
    }
    let mut conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let existing = conditions.iter_mut().find(|x| x["type"] == c.type_);
    let entry =
        json!({"type": c.type_, "status": c.status, "reason": c.reason, "message": c.message});
    match existing {
        Some(x) => {
            let since = if x["status"] == c.status {
                x["lastTransitionTime"].clone()
            } else {
                json!(now_rfc3339())
            };
            let mut e = entry;
            e["lastTransitionTime"] = since;
            if *x != e {
                *x = e;
            }
        }
        None => {
            let mut e = entry;
            e["lastTransitionTime"] = json!(now_rfc3339());
            conditions.push(e);
        }
    }
    status["conditions"] = json!(conditions);
}

/// Registers the established CRDs before the server answers (so a restart never 404s a CR).
pub async fn load(store: &Store, registry: &Registry) -> Result<(), ControllerError> {
    reconcile(store, registry).await.map(|_| ())
}

/// Runs passes on every CRD change until `stop`.
pub async fn run(store: Store, registry: Registry, mut stop: watch::Receiver<bool>) {
    loop {
        let (revision, terminating) = match reconcile(&store, &registry).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "CRD pass failed");
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(RETRY) => continue,
                }
            }
        };
        let mut watch = match store.watch(&prefix(), revision + 1).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "CRD watch failed");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let retry = async {
            if terminating {
                tokio::time::sleep(RETRY).await
            } else {
                std::future::pending::<()>().await
            }
        };
        tokio::select! {
            _ = stop.changed() => return,
            _ = watch.next() => {}
            _ = retry => {}
        }
    }
}
