//! pvc-protection (upstream's pkg/controller/volume/pvcprotection): a claim being deleted keeps
//! its `kubernetes.io/pvc-protection` finalizer while a scheduled pod that has not terminated uses
//! it — by a `persistentVolumeClaim` volume, or as the claim of its own generic ephemeral volume
//! (unless the pod is already shut down). The pod cache decides "in use" quickly; "unused" is
//! confirmed by a live list of the namespace's pods, since the cache may not hold a new pod yet.
//! Claims without the finalizer that are not being deleted get it (claims from before the
//! admission plugin added it).
//!
//! kiln counts only pods that have not terminated: a Succeeded or Failed pod's volumes are torn
//! down by the kubelet, so its claim can go (upstream's pod event filter makes the same judgement).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::context::{spawn_reflector_with_changes, Context};
use crate::pv_pods::{
    claim_is_for_pod, claim_uses, is_shut_down, is_terminated, node_name, ClaimUse,
};
use crate::pv_queue::Queue;

pub const FINALIZER: &str = "kubernetes.io/pvc-protection";

#[derive(Debug, thiserror::Error)]
pub enum PvcProtectionError {
    #[error("{action} PersistentVolumeClaim {claim}: {source}")]
    Api {
        action: &'static str,
        claim: String,
        source: kube::Error,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Nothing,
    /// Being deleted with the finalizer: remove it if no pod uses the claim.
    CheckUse,
    AddFinalizer,
}

fn has_finalizer(claim: &PersistentVolumeClaim) -> bool {
    claim
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
}

pub fn decide(claim: &PersistentVolumeClaim) -> Decision {
    match (
        claim.metadata.deletion_timestamp.is_some(),
        has_finalizer(claim),
    ) {
        (true, true) => Decision::CheckUse,
        (false, false) => Decision::AddFinalizer,
        _ => Decision::Nothing,
    }
}

/// podUsesPVC (kiln: and the pod has not terminated).
pub fn pod_uses(pod: &Pod, claim: &PersistentVolumeClaim) -> bool {
    if node_name(pod).is_empty() || is_terminated(pod) {
        // The kubelet only starts scheduled pods, and refuses claims being deleted.
        return false;
    }
    if pod.metadata.namespace != claim.metadata.namespace {
        return false;
    }
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    claim_uses(pod).iter().any(|u| match u {
        ClaimUse::Named(c) => c == name,
        ClaimUse::Ephemeral(c) => c == name && !is_shut_down(pod) && claim_is_for_pod(pod, claim),
    })
}

pub fn in_use<'a>(claim: &PersistentVolumeClaim, pods: impl IntoIterator<Item = &'a Pod>) -> bool {
    pods.into_iter().any(|p| pod_uses(p, claim))
}

type Key = (String, String);

pub async fn run(ctx: Context) {
    let (claims, claim_changes, _claims_task) =
        spawn_reflector_with_changes::<PersistentVolumeClaim>(&ctx.client);
    let (pods, pod_changes, _pods_task) = spawn_reflector_with_changes::<Pod>(&ctx.client);
    if claims.wait_until_ready().await.is_err() || pods.wait_until_ready().await.is_err() {
        return;
    }
    let queue: Arc<Queue<Key>> = Queue::new();
    let q = queue.clone();
    tokio::spawn(claim_changes.for_each(move |c| {
        if decide(&c) != Decision::Nothing {
            q.push(key_of(&c));
        }
        futures::future::ready(())
    }));
    // Any change of a pod (its end, its deletion) may free its claims.
    let q = queue.clone();
    tokio::spawn(pod_changes.for_each(move |p| {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        for u in claim_uses(&p) {
            q.push((ns.clone(), u.claim().to_string()));
        }
        futures::future::ready(())
    }));
    loop {
        let key = queue.pop().await;
        if let Err(e) = process(&ctx.client, &claims, &pods, &key).await {
            tracing::warn!(error = %e, "pvc-protection");
            queue.push_after(key, Duration::from_secs(2));
        }
    }
}

fn key_of(c: &PersistentVolumeClaim) -> Key {
    (
        c.metadata.namespace.clone().unwrap_or_default(),
        c.metadata.name.clone().unwrap_or_default(),
    )
}

async fn process(
    client: &kube::Client,
    claims: &Store<PersistentVolumeClaim>,
    pods: &Store<Pod>,
    (ns, name): &Key,
) -> Result<(), PvcProtectionError> {
    let Some(claim) = claims.get(&ObjectRef::new(name).within(ns)) else {
        return Ok(());
    };
    let key = format!("{ns}/{name}");
    let err = |action| {
        let key = key.clone();
        move |source| PvcProtectionError::Api {
            action,
            claim: key,
            source,
        }
    };
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let mut updated = (*claim).clone();
    match decide(&claim) {
        Decision::Nothing => return Ok(()),
        Decision::CheckUse => {
            let cached = pods.state();
            if in_use(&claim, cached.iter().map(|p| p.as_ref())) {
                tracing::debug!(claim = %key, "keeping PVC because it is being used");
                return Ok(());
            }
            let live = Api::<Pod>::namespaced(client.clone(), ns)
                .list(&ListParams::default())
                .await
                .map_err(err("listing pods for"))?;
            if in_use(&claim, live.items.iter()) {
                tracing::debug!(claim = %key, "keeping PVC because it is being used");
                return Ok(());
            }
            if let Some(f) = updated.metadata.finalizers.as_mut() {
                f.retain(|f| f != FINALIZER);
            }
            api.replace(name, &PostParams::default(), &updated)
                .await
                .map_err(err("removing the protection finalizer from"))?;
            tracing::info!(claim = %key, "removed protection finalizer from PVC");
        }
        Decision::AddFinalizer => {
            updated
                .metadata
                .finalizers
                .get_or_insert_with(Vec::new)
                .push(FINALIZER.to_string());
            api.replace(name, &PostParams::default(), &updated)
                .await
                .map_err(err("adding the protection finalizer to"))?;
            tracing::debug!(claim = %key, "added protection finalizer to PVC");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(deleting: bool, finalizer: bool) -> PersistentVolumeClaim {
        let mut v = json!({"metadata": {"name": "data", "namespace": "ns", "uid": "claim-uid"}});
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        if finalizer {
            v["metadata"]["finalizers"] = json!([FINALIZER]);
        }
        serde_json::from_value(v).unwrap()
    }

    fn pod(node: Option<&str>, phase: &str, volumes: serde_json::Value) -> Pod {
        let mut v = json!({"metadata": {"name": "web", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"containers": [], "volumes": volumes}, "status": {"phase": phase}});
        if let Some(n) = node {
            v["spec"]["nodeName"] = json!(n);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn decisions() {
        assert_eq!(decide(&claim(true, true)), Decision::CheckUse);
        assert_eq!(decide(&claim(false, false)), Decision::AddFinalizer);
        assert_eq!(decide(&claim(false, true)), Decision::Nothing);
        assert_eq!(decide(&claim(true, false)), Decision::Nothing);
    }

    #[test]
    fn only_scheduled_running_pods_hold_a_claim() {
        let named = json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]);
        let c = claim(true, true);
        assert!(pod_uses(&pod(Some("n1"), "Running", named.clone()), &c));
        assert!(
            !pod_uses(&pod(None, "Pending", named.clone()), &c),
            "not scheduled"
        );
        assert!(
            !pod_uses(&pod(Some("n1"), "Succeeded", named.clone()), &c),
            "terminated"
        );
        let other = json!([{"name": "d", "persistentVolumeClaim": {"claimName": "other"}}]);
        assert!(!pod_uses(&pod(Some("n1"), "Running", other), &c));
    }

    #[test]
    fn an_ephemeral_claim_is_held_only_by_its_own_running_pod() {
        let eph = json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]);
        let mut c: PersistentVolumeClaim = serde_json::from_value(json!({"metadata": {
            "name": "web-scratch", "namespace": "ns", "deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": [FINALIZER],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "pod-uid", "controller": true}]}}))
        .unwrap();
        let running = pod(Some("n1"), "Running", eph.clone());
        assert!(pod_uses(&running, &c));
        // Shut down by the kubelet (grace period zero): free.
        let mut shut = running.clone();
        shut.metadata.deletion_timestamp = c.metadata.deletion_timestamp.clone();
        shut.metadata.deletion_grace_period_seconds = Some(0);
        shut.status.as_mut().unwrap().phase = Some("Running".into());
        shut.status.as_mut().unwrap().container_statuses =
            Some(vec![serde_json::from_value(json!({
            "name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
            "state": {"running": {}}}))
            .unwrap()]);
        assert!(!pod_uses(&shut, &c));
        // A claim of that name the pod does not own is not its ephemeral claim.
        c.metadata.owner_references = None;
        assert!(!pod_uses(&running, &c));
    }
}
