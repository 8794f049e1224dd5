//! pv-protection (upstream's pkg/controller/volume/pvprotection): a PersistentVolume being deleted
//! keeps its `kubernetes.io/pv-protection` finalizer while it is Bound; volumes without it that are
//! not being deleted get it.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::context::{spawn_reflector_with_changes, Context};
use crate::pv_queue::Queue;

pub const FINALIZER: &str = "kubernetes.io/pv-protection";

#[derive(Debug, thiserror::Error)]
pub enum PvProtectionError {
    #[error("{action} PersistentVolume {volume}: {source}")]
    Api {
        action: &'static str,
        volume: String,
        source: kube::Error,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Nothing,
    RemoveFinalizer,
    AddFinalizer,
}

pub fn decide(volume: &PersistentVolume) -> Decision {
    let has = volume
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER);
    let bound = volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    match (volume.metadata.deletion_timestamp.is_some(), has) {
        (true, true) if !bound => Decision::RemoveFinalizer,
        (false, false) => Decision::AddFinalizer,
        _ => Decision::Nothing,
    }
}

pub async fn run(ctx: Context) {
    let (volumes, changes, _task) = spawn_reflector_with_changes::<PersistentVolume>(&ctx.client);
    if volumes.wait_until_ready().await.is_err() {
        return;
    }
    let queue: Arc<Queue<String>> = Queue::new();
    let q = queue.clone();
    tokio::spawn(changes.for_each(move |v| {
        if decide(&v) != Decision::Nothing {
            q.push(v.metadata.name.clone().unwrap_or_default());
        }
        futures::future::ready(())
    }));
    loop {
        let name = queue.pop().await;
        if let Err(e) = process(&ctx.client, &volumes, &name).await {
            tracing::warn!(error = %e, "pv-protection");
            queue.push_after(name, Duration::from_secs(2));
        }
    }
}

async fn process(
    client: &kube::Client,
    volumes: &Store<PersistentVolume>,
    name: &str,
) -> Result<(), PvProtectionError> {
    let Some(volume) = volumes.get(&ObjectRef::new(name)) else {
        return Ok(());
    };
    let mut updated = (*volume).clone();
    let action = match decide(&volume) {
        Decision::Nothing => return Ok(()),
        Decision::RemoveFinalizer => {
            if let Some(f) = updated.metadata.finalizers.as_mut() {
                f.retain(|f| f != FINALIZER);
            }
            "removing the protection finalizer from"
        }
        Decision::AddFinalizer => {
            updated
                .metadata
                .finalizers
                .get_or_insert_with(Vec::new)
                .push(FINALIZER.to_string());
            "adding the protection finalizer to"
        }
    };
    Api::<PersistentVolume>::all(client.clone())
        .replace(name, &PostParams::default(), &updated)
        .await
        .map_err(|source| PvProtectionError::Api {
            action,
            volume: name.to_string(),
            source,
        })?;
    tracing::info!(volume = %name, "{action} PV done");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(deleting: bool, finalizer: bool, phase: &str) -> PersistentVolume {
        let mut v = json!({"metadata": {"name": "pv1"}, "status": {"phase": phase}});
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        if finalizer {
            v["metadata"]["finalizers"] = json!([FINALIZER]);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_bound_volume_keeps_its_finalizer() {
        assert_eq!(decide(&pv(true, true, "Bound")), Decision::Nothing);
        assert_eq!(
            decide(&pv(true, true, "Released")),
            Decision::RemoveFinalizer
        );
        assert_eq!(
            decide(&pv(true, true, "Available")),
            Decision::RemoveFinalizer
        );
        assert_eq!(
            decide(&pv(false, false, "Available")),
            Decision::AddFinalizer
        );
        assert_eq!(decide(&pv(false, true, "Bound")), Decision::Nothing);
        assert_eq!(decide(&pv(true, false, "Bound")), Decision::Nothing);
    }
}
