//! Cordon, drain and uncordon a node for its upgrade, as `kubectl drain --ignore-daemonsets` does:
//! every pod of the node is evicted through the Eviction API (so PodDisruptionBudgets and the pods'
//! grace periods are honoured; a 429 is retried every 5 s, like kubectl), except mirror pods (the
//! kubelet's static pods, which the API cannot delete) and DaemonSet pods (their controller ignores
//! unschedulable and would put them right back). Pods no controller manages are refused, as upstream
//! does without `--force`: nothing would bring them back.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams};

/// On a node kiln cordoned for an upgrade: a re-run uncordons it, an operator's own cordon stays.
pub const CORDONED_BY: &str = "kiln.dev/upgrade-cordoned";
const MIRROR: &str = "kubernetes.io/config.mirror";
/// kubectl drain waits this long before retrying an eviction a disruption budget refused.
const EVICTION_RETRY: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error("node {node}: {source}")]
    Api {
        node: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("cannot delete Pods that declare no controller (use --force to override): {0}")]
    Unmanaged(String),
    #[error("evicting {pod} did not succeed within {seconds}s: {why}")]
    Timeout {
        pod: String,
        seconds: u64,
        why: String,
    },
}

fn api(node: &str) -> impl Fn(kube::Error) -> DrainError + '_ {
    move |e| DrainError::Api {
        node: node.to_string(),
        source: Box::new(e),
    }
}

/// Cordon (`on`) or uncordon. Cordoning a node that is already unschedulable leaves it the operator's
/// (no annotation), and uncordoning touches only nodes kiln cordoned. Returns what it did.
pub async fn cordon(client: &kube::Client, node: &str, on: bool) -> Result<String, DrainError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let n = nodes.get(node).await.map_err(api(node))?;
    let unschedulable = n
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let ours = n
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(CORDONED_BY));
    let patch = match (on, unschedulable, ours) {
        (true, true, false) => return Ok("already cordoned (by the operator: left so)".into()),
        (true, true, true) => return Ok("already cordoned".into()),
        (true, false, _) => serde_json::json!({
            "metadata": {"annotations": {CORDONED_BY: "true"}},
            "spec": {"unschedulable": true}
        }),
        (false, _, false) => return Ok("not cordoned by kiln: left as it is".into()),
        (false, _, true) => serde_json::json!({
            "metadata": {"annotations": {CORDONED_BY: null}},
            "spec": {"unschedulable": null}
        }),
    };
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api(node))?;
    Ok(if on { "cordoned" } else { "uncordoned" }.into())
}

fn full_name(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}

/// What drain does with a pod: skip it (and why), or evict it.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Skip(&'static str),
    Evict,
    Unmanaged,
}

pub fn verdict(p: &Pod) -> Verdict {
    if p.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR))
    {
        return Verdict::Skip("mirror pod");
    }
    let owner = p
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    match owner {
        Some(o) if o.kind == "DaemonSet" => Verdict::Skip("DaemonSet pod"),
        Some(_) => Verdict::Evict,
        // A finished pod is deleted without loss (upstream does the same).
        None if matches!(phase, Some("Succeeded" | "Failed")) => Verdict::Evict,
        None => Verdict::Unmanaged,
    }
}

/// Evict every pod of `node` that drain takes (see the module), then wait until they are gone.
pub async fn drain(
    client: &kube::Client,
    node: &str,
    force: bool,
    timeout: Duration,
) -> Result<String, DrainError> {
    let all: Api<Pod> = Api::all(client.clone());
    let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let list = all.list(&lp).await.map_err(api(node))?;
    let mut evict = vec![];
    let mut unmanaged = vec![];
    for p in list.items {
        match verdict(&p) {
            Verdict::Skip(why) => tracing::debug!(pod = %full_name(&p), why, "drain leaves it"),
            Verdict::Evict => evict.push(p),
            Verdict::Unmanaged if force => evict.push(p),
            Verdict::Unmanaged => unmanaged.push(full_name(&p)),
        }
    }
    if !unmanaged.is_empty() {
        return Err(DrainError::Unmanaged(unmanaged.join(", ")));
    }
    let started = Instant::now();
    let evictions = evict.iter().map(|p| evict_one(client, p, started, timeout));
    for r in futures::future::join_all(evictions).await {
        r?;
    }
    Ok(format!("{} pod(s) evicted", evict.len()))
}

/// One pod: the eviction (retried while a disruption budget refuses it), then its deletion.
async fn evict_one(
    client: &kube::Client,
    p: &Pod,
    started: Instant,
    timeout: Duration,
) -> Result<(), DrainError> {
    let ns = p.metadata.namespace.as_deref().unwrap_or("default");
    let name = p.metadata.name.as_deref().unwrap_or_default();
    let uid = p.metadata.uid.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let out_of_time = |why: String| DrainError::Timeout {
        pod: full_name(p),
        seconds: timeout.as_secs(),
        why,
    };
    loop {
        match pods.evict(name, &EvictParams::default()).await {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 429 => {
                tracing::info!(pod = %full_name(p), "{}; retrying in 5s", s.message);
                if started.elapsed() + EVICTION_RETRY > timeout {
                    return Err(out_of_time(s.message.clone()));
                }
                tokio::time::sleep(EVICTION_RETRY).await;
            }
            Err(e) => return Err(api(ns)(e)),
        }
    }
    // Gone, or replaced by a pod of the same name (a StatefulSet's) with another UID.
    loop {
        match pods.get_opt(name).await {
            Ok(None) => return Ok(()),
            Ok(Some(now)) if now.metadata.uid != uid => return Ok(()),
            Ok(Some(_)) | Err(_) if started.elapsed() > timeout => {
                return Err(out_of_time("still terminating".into()))
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// The node's pods are Running (terminating and finished ones aside); the ones that are not, if any.
pub async fn not_running(client: &kube::Client, node: &str) -> Result<Vec<String>, DrainError> {
    let all: Api<Pod> = Api::all(client.clone());
    let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let list = all.list(&lp).await.map_err(api(node))?;
    Ok(list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Running" | "Succeeded" | "Failed"))
        })
        .map(full_name)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn pod(owner: Option<&str>, mirror: bool, phase: &str) -> Pod {
        let mut p = Pod::default();
        if let Some(kind) = owner {
            p.metadata.owner_references = Some(vec![OwnerReference {
                kind: kind.into(),
                controller: Some(true),
                ..Default::default()
            }]);
        }
        if mirror {
            p.metadata.annotations = Some([(MIRROR.to_string(), "x".to_string())].into());
        }
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        p
    }

    #[test]
    fn drain_evicts_managed_pods_and_leaves_daemonsets_and_mirror_pods() {
        assert_eq!(
            verdict(&pod(Some("ReplicaSet"), false, "Running")),
            Verdict::Evict
        );
        assert_eq!(
            verdict(&pod(Some("DaemonSet"), false, "Running")),
            Verdict::Skip("DaemonSet pod")
        );
        assert_eq!(
            verdict(&pod(None, true, "Running")),
            Verdict::Skip("mirror pod")
        );
        assert_eq!(verdict(&pod(None, false, "Running")), Verdict::Unmanaged);
        assert_eq!(verdict(&pod(None, false, "Succeeded")), Verdict::Evict);
        assert!(DrainError::Unmanaged("default/a".into())
            .to_string()
            .starts_with(
                "cannot delete Pods that declare no controller (use --force to override)"
            ));
    }
}
