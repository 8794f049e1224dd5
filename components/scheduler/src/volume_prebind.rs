//! VolumeBinding's PreBind, in the bind path: write what Reserve assumed (each static PV's claimRef,
//! each provisioned claim's selected node), then wait until the PV controller (and the provisioner)
//! finished every binding, checking the latest watched objects once a second, before the pod is
//! bound. It runs in the pod's bind task, so other pods are scheduled meanwhile. A timeout, a claim
//! whose selected node was taken away (provisioning failed) or a PV whose claimRef was dropped fails
//! the attempt: the caller unreserves and retries the pod, as upstream.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::volume_binding::Reservation;
use crate::volume_claims::{
    claim_name, claim_volume_name, is_fully_bound, pod_namespace, selected_node, volume_fits_node,
};

/// upstream's VolumeBindingArgs.bindTimeoutSeconds default.
pub const DEFAULT_BIND_TIMEOUT: Duration = Duration::from_secs(600);
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The writes PreBind makes (PUT, so a concurrent change makes the write fail rather than be lost).
pub trait VolumeWriter {
    fn replace_volume(
        &self,
        volume: &PersistentVolume,
    ) -> impl Future<Output = Result<PersistentVolume, String>> + Send;
    fn replace_claim(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> impl Future<Output = Result<PersistentVolumeClaim, String>> + Send;
}

/// The latest watched objects (not the scheduler's assumptions: the PV controller works on these).
pub trait VolumeView {
    fn pod_exists(&self, namespace: &str, name: &str) -> bool;
    fn node(&self, name: &str) -> Option<Arc<Node>>;
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>>;
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>>;
}

fn version(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn claim_ns(claim: &PersistentVolumeClaim) -> &str {
    claim.metadata.namespace.as_deref().unwrap_or("default")
}

/// upstream's checkBindings: Ok(true) when every claim the reservation touched is bound, Ok(false)
/// to look again, Err when the attempt must be retried.
pub fn check_bindings(
    view: &impl VolumeView,
    pod: &Pod,
    node_name: &str,
    written: &Reservation,
) -> Result<bool, String> {
    let node = view
        .node(node_name)
        .ok_or_else(|| format!("failed to get node {node_name:?}: node {node_name:?} not found"))?;
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    if !view.pod_exists(pod_namespace(pod), pod_name) {
        return Err(format!(
            "pod does not exist any more: pod {pod_name:?} not found"
        ));
    }
    for mine in &written.volumes {
        let name = mine.metadata.name.as_deref().unwrap_or_default();
        let pv = view.volume(name).ok_or_else(|| {
            format!("failed to check binding: PersistentVolume {name:?} not found")
        })?;
        let claim_ref = mine.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        let (ns, claim) = (
            claim_ref.and_then(|r| r.namespace.as_deref()).unwrap_or(""),
            claim_ref.and_then(|r| r.name.as_deref()).unwrap_or(""),
        );
        let pvc = view.claim(ns, claim).ok_or_else(|| {
            format!("failed to check binding: PersistentVolumeClaim \"{ns}/{claim}\" not found")
        })?;
        // Our write is not in the watch yet.
        if version(&mine.metadata) > version(&pv.metadata) {
            return Ok(false);
        }
        if !volume_fits_node(&pv, &node) {
            return Err(format!(
                "pv {name:?} node affinity doesn't match node {node_name:?}: no matching NodeSelectorTerms"
            ));
        }
        let uid = pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|r| r.uid.as_deref())
            .unwrap_or("");
        if uid.is_empty() {
            return Err(format!("ClaimRef got reset for pv {name:?}"));
        }
        if !is_fully_bound(&pvc) {
            return Ok(false);
        }
    }
    for mine in &written.claims {
        let Some(pvc) = view.claim(claim_ns(mine), claim_name(mine)) else {
            return Err(format!(
                "failed to check provisioning pvc: PersistentVolumeClaim \"{}/{}\" not found",
                claim_ns(mine),
                claim_name(mine)
            ));
        };
        if version(&mine.metadata) > version(&pvc.metadata) {
            return Ok(false);
        }
        if pvc
            .metadata
            .annotations
            .as_ref()
            .is_none_or(|a| a.is_empty())
        {
            return Err(format!(
                "selectedNode annotation reset for PVC {:?}",
                claim_name(&pvc)
            ));
        }
        // The provisioner takes the annotation away when it cannot provision there.
        if selected_node(&pvc) != Some(node_name) {
            return Err(format!(
                "provisioning failed for PVC {:?}",
                claim_name(&pvc)
            ));
        }
        let volume_name = claim_volume_name(&pvc);
        if !volume_name.is_empty() {
            // Not in the watch yet: look again.
            let Some(pv) = view.volume(volume_name) else {
                return Ok(false);
            };
            if !volume_fits_node(&pv, &node) {
                return Err(format!(
                    "pv {volume_name:?} node affinity doesn't match node {node_name:?}: no matching NodeSelectorTerms"
                ));
            }
        }
        if !is_fully_bound(&pvc) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Writes the reservation and waits for the bindings. The error is the FailedScheduling message's
/// tail, as upstream's PreBind returns it.
pub async fn bind_volumes(
    writer: &impl VolumeWriter,
    view: &impl VolumeView,
    pod: &Pod,
    node_name: &str,
    reservation: &Reservation,
    timeout: Duration,
    poll: Duration,
) -> Result<(), String> {
    let mut written = Reservation::default();
    for v in &reservation.volumes {
        written.volumes.push(writer.replace_volume(v).await?);
    }
    for c in &reservation.claims {
        written.claims.push(writer.replace_claim(c).await?);
    }
    let deadline = Instant::now() + timeout;
    loop {
        tokio::time::sleep(poll).await;
        match check_bindings(view, pod, node_name, &written) {
            Ok(true) => return Ok(()),
            Ok(false) if Instant::now() >= deadline => {
                return Err("binding volumes: context deadline exceeded".to_string())
            }
            Ok(false) => {}
            Err(e) => return Err(format!("binding volumes: {e}")),
        }
    }
}

fn api_message(e: kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message,
        other => other.to_string(),
    }
}

/// The writes through the API server.
#[derive(Clone)]
pub struct KubeVolumeWriter(pub kube::Client);

impl VolumeWriter for KubeVolumeWriter {
    async fn replace_volume(&self, volume: &PersistentVolume) -> Result<PersistentVolume, String> {
        let api: Api<PersistentVolume> = Api::all(self.0.clone());
        let name = volume.metadata.name.clone().unwrap_or_default();
        api.replace(&name, &PostParams::default(), volume)
            .await
            .map_err(api_message)
    }

    async fn replace_claim(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<PersistentVolumeClaim, String> {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.0.clone(), claim_ns(claim));
        api.replace(claim_name(claim), &PostParams::default(), claim)
            .await
            .map_err(api_message)
    }
}

/// The scheduler's reflector stores.
#[derive(Clone)]
pub struct StoreView {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub volumes: Store<PersistentVolume>,
    pub claims: Store<PersistentVolumeClaim>,
}

impl VolumeView for StoreView {
    fn pod_exists(&self, namespace: &str, name: &str) -> bool {
        self.pods
            .get(&ObjectRef::new(name).within(namespace))
            .is_some()
    }

    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&ObjectRef::new(name))
    }

    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes.get(&ObjectRef::new(name))
    }

    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get(&ObjectRef::new(name).within(namespace))
    }
}

#[cfg(test)]
#[path = "volume_prebind_tests.rs"]
mod tests;
