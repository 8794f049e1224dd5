//! podgc: deletes pods nobody else will (upstream's podgc controller), every 20 s — the oldest
//! terminated pods beyond --terminated-pod-gc-threshold, pods bound to a Node that no longer
//! exists, and pods being deleted that were never scheduled (no kubelet will ever confirm them).
//! Orphans first get the DisruptionTarget condition and the Failed phase, as upstream, so a Job's
//! pod failure policy can tell a garbage-collected pod from a failed one.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::context::{spawn_reflector, Context};
use crate::pods::phase;

const GC_PERIOD: Duration = Duration::from_secs(20);
/// A node missing from the cache is re-read before its pods go (upstream's quarantine).
const ORPHAN_RECHECK: Duration = Duration::from_secs(40);

#[derive(Debug, thiserror::Error)]
pub enum PodGcError {
    #[error("{action} pod {pod}: {source}")]
    Api {
        action: &'static str,
        pod: String,
        source: kube::Error,
    },
}

/// Why a pod is collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Terminated,
    Orphaned,
    UnscheduledTerminating,
}

fn node_of(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

fn key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The pods to collect now. `gone` are the nodes known not to exist (checked twice, apart).
pub fn plan(
    pods: &[Arc<Pod>],
    gone: &HashSet<String>,
    threshold: usize,
) -> Vec<(Arc<Pod>, Reason)> {
    let mut out = Vec::new();
    if threshold > 0 {
        let mut terminated: Vec<&Arc<Pod>> = pods
            .iter()
            .filter(|p| matches!(phase(p), "Succeeded" | "Failed"))
            .collect();
        if terminated.len() > threshold {
            // Oldest first.
            terminated.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
            let excess = terminated.len() - threshold;
            out.extend(
                terminated
                    .into_iter()
                    .take(excess)
                    .map(|p| (p.clone(), Reason::Terminated)),
            );
        }
    }
    for p in pods {
        let node = node_of(p);
        if !node.is_empty() && gone.contains(node) {
            out.push((p.clone(), Reason::Orphaned));
        } else if node.is_empty() && p.metadata.deletion_timestamp.is_some() {
            out.push((p.clone(), Reason::UnscheduledTerminating));
        }
    }
    let mut seen = HashSet::new();
    out.retain(|(p, _)| seen.insert(key(p)));
    out
}

pub async fn run(ctx: Context) {
    let (pods, _pods_task) = spawn_reflector::<Pod>(&ctx.client);
    let (nodes, _nodes_task) = spawn_reflector::<Node>(&ctx.client);
    if pods.wait_until_ready().await.is_err() || nodes.wait_until_ready().await.is_err() {
        return;
    }
    let node_api: Api<Node> = Api::all(ctx.client.clone());
    let mut suspects: HashSet<String> = HashSet::new();
    let mut suspects_since = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(GC_PERIOD).await;
        let all = pods.state();
        let known: HashSet<String> = nodes
            .state()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let missing: HashSet<String> = all
            .iter()
            .map(|p| node_of(p).to_string())
            .filter(|n| !n.is_empty() && !known.contains(n))
            .collect();
        // A node absent from the cache may just not be cached yet: it counts as gone only once it
        // stayed absent for the quarantine and a fresh read confirms it.
        let mut gone = HashSet::new();
        if suspects_since.elapsed() >= ORPHAN_RECHECK {
            for n in suspects.intersection(&missing) {
                if matches!(node_api.get_opt(n).await, Ok(None)) {
                    gone.insert(n.clone());
                }
            }
            suspects = missing;
            suspects_since = tokio::time::Instant::now();
        } else {
            suspects.extend(missing);
        }
        for (pod, reason) in plan(&all, &gone, ctx.options.terminated_pod_gc_threshold) {
            if let Err(e) = collect(&ctx, &pod, reason).await {
                tracing::warn!(error = %e, "podgc");
            }
        }
    }
}

async fn collect(ctx: &Context, pod: &Pod, reason: Reason) -> Result<(), PodGcError> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let err = |action| {
        let pod = key(pod);
        move |source| PodGcError::Api {
            action,
            pod,
            source,
        }
    };
    if reason == Reason::Orphaned && !matches!(phase(pod), "Succeeded" | "Failed") {
        let now = Timestamp::now();
        let status = json!({"status": {"phase": "Failed", "conditions": [{
            "type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
            "message": "PodGC: node no longer exists", "lastTransitionTime": now.to_string()}]}});
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(status))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(err("marking")(e)),
        }
    }
    // Force: no kubelet is left to confirm a graceful delete of these pods.
    match api
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await
    {
        Ok(_) => {
            tracing::info!(pod = %key(pod), ?reason, "garbage collected a pod");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(err("deleting")(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, phase: &str, node: &str, created: &str, deleting: bool) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created,
                    "deletionTimestamp": if deleting { json!("2026-01-01T00:00:00Z") } else { json!(null) }},
                "spec": {"nodeName": node, "containers": []},
                "status": {"phase": phase},
            }))
            .unwrap(),
        )
    }

    fn names(v: &[(Arc<Pod>, Reason)]) -> Vec<(String, Reason)> {
        v.iter()
            .map(|(p, r)| (p.metadata.name.clone().unwrap(), *r))
            .collect()
    }

    #[test]
    fn the_oldest_terminated_pods_beyond_the_threshold_go() {
        let pods = vec![
            pod("new", "Succeeded", "n1", "2026-01-03T00:00:00Z", false),
            pod("old", "Failed", "n1", "2026-01-01T00:00:00Z", false),
            pod("mid", "Succeeded", "n1", "2026-01-02T00:00:00Z", false),
            pod("running", "Running", "n1", "2025-01-01T00:00:00Z", false),
        ];
        assert_eq!(
            names(&plan(&pods, &HashSet::new(), 1)),
            [
                ("old".into(), Reason::Terminated),
                ("mid".into(), Reason::Terminated)
            ]
        );
        assert!(plan(&pods, &HashSet::new(), 3).is_empty());
        assert!(plan(&pods, &HashSet::new(), 0).is_empty());
    }

    #[test]
    fn pods_of_gone_nodes_and_unscheduled_deleted_pods_go() {
        let pods = vec![
            pod("orphan", "Running", "gone", "2026-01-01T00:00:00Z", false),
            pod("fine", "Running", "n1", "2026-01-01T00:00:00Z", false),
            pod(
                "never-scheduled",
                "Pending",
                "",
                "2026-01-01T00:00:00Z",
                true,
            ),
            pod("pending", "Pending", "", "2026-01-01T00:00:00Z", false),
        ];
        let gone: HashSet<String> = ["gone".to_string()].into();
        assert_eq!(
            names(&plan(&pods, &gone, 10)),
            [
                ("orphan".into(), Reason::Orphaned),
                ("never-scheduled".into(), Reason::UnscheduledTerminating)
            ]
        );
    }
}
