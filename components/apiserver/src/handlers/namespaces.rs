//! Namespace termination, the namespace controller's job done in-process for now: once a namespace
//! is Terminating, delete every namespaced object in it (graceful pods wait for their kubelet), then
//! drop the `kubernetes` finalizer and the namespace itself. Namespaces found Terminating at start
//! (a restart mid-way) are resumed.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::delete::{delete_object, DeleteOptions};
use crate::registry::lifecycle::from_stored;
use crate::registry::resources::NAMESPACES;
use crate::request::Target;
use crate::state::Shared;
use crate::status::ApiError;

/// Pause between passes while objects are still going (e.g. pods waiting for their kubelet).
const RETRY: Duration = Duration::from_secs(1);

pub async fn run(
    state: Shared,
    mut names: mpsc::UnboundedReceiver<String>,
    mut stop: watch::Receiver<bool>,
) {
    let mut pending: Vec<String> = match terminating_namespaces(&state).await {
        Ok(list) => list,
        Err(e) => {
            tracing::warn!(error = %e.message, "listing terminating namespaces failed");
            Vec::new()
        }
    };
    loop {
        while let Ok(name) = names.try_recv() {
            if !pending.contains(&name) {
                pending.push(name);
            }
        }
        let mut still = Vec::new();
        for ns in pending.drain(..) {
            match finalize(&state, &ns).await {
                Ok(true) => tracing::info!(namespace = %ns, "namespace deleted"),
                Ok(false) => still.push(ns),
                Err(e) => {
                    tracing::warn!(namespace = %ns, error = %e.message, "namespace cleanup pass failed");
                    still.push(ns);
                }
            }
        }
        pending = still;
        let wait = async {
            if pending.is_empty() {
                names.recv().await
            } else {
                tokio::time::sleep(RETRY).await;
                None
            }
        };
        tokio::select! {
            _ = stop.changed() => return,
            got = wait => {
                if let Some(name) = got {
                    if !pending.contains(&name) {
                        pending.push(name);
                    }
                }
            }
        }
    }
}

async fn terminating_namespaces(state: &Shared) -> Result<Vec<String>, ApiError> {
    let (items, _) = state
        .store
        .list(&NAMESPACES.key_prefix(None))
        .await
        .map_err(crate::storage_status::store_error)?;
    let mut out = Vec::new();
    for item in items {
        let obj = from_stored(&item.value, item.mod_revision)?;
        if obj["metadata"]["deletionTimestamp"].is_string() {
            if let Some(name) = obj["metadata"]["name"].as_str() {
                out.push(name.to_string());
            }
        }
    }
    Ok(out)
}

/// One pass: deletes what is left in `ns`; true once the namespace itself is gone.
async fn finalize(state: &Shared, ns: &str) -> Result<bool, ApiError> {
    let mut remaining = 0usize;
    let opts = DeleteOptions {
        grace: None,
        uid: None,
        resource_version: None,
    };
    let query = HashMap::new();
    for spec in state.registry.all().iter().filter(|s| s.namespaced) {
        let (items, _) = state
            .store
            .list(&spec.key_prefix(Some(ns)))
            .await
            .map_err(crate::storage_status::store_error)?;
        for item in items {
            let obj = from_stored(&item.value, item.mod_revision)?;
            remaining += 1;
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
            let target = Target {
                spec,
                namespace: Some(ns.to_string()),
                name: Some(name.clone()),
                status: false,
                requester: Default::default(),
            };
            match delete_object(state, &target, &name, &opts, &query).await {
                Ok(_) => {}
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }
    if remaining > 0 {
        // Deleted ones are confirmed gone on the next pass; graceful ones may take a while.
        return Ok(false);
    }
    let key = NAMESPACES.key(None, ns);
    let Some(current) = state
        .store
        .get(&key)
        .await
        .map_err(crate::storage_status::store_error)?
    else {
        return Ok(true);
    };
    let obj = from_stored(&current.value, current.mod_revision)?;
    let finalizers_left = obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    if finalizers_left {
        return Ok(false); // someone else's finalizer: wait for them, as upstream
    }
    match state.store.delete(&key, current.mod_revision).await {
        Ok(_) => Ok(true),
        Err(crate::storage::StoreError::NotFound) => Ok(true),
        Err(crate::storage::StoreError::Conflict) => Ok(false),
        Err(e) => Err(crate::storage_status::store_error(e)),
    }
}
