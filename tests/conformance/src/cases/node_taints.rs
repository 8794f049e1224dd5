//! sig-node entries about Node objects: the Node API lifecycle (a fake, unschedulable node created,
//! patched, listed, updated and deleted through the API server only) and the NoExecute taint
//! manager (test/e2e/node/taints.go): pods on a node tainted NoExecute are evicted when they do
//! not tolerate it or their tolerationSeconds run out, and removing the taint cancels a pending
//! eviction. Each case restates the entry's MUSTs in its doc comment.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::mpsc;

use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-node] Node Lifecycle should run through the lifecycle of a node [Conformance]",
        "fake-node",
        node_lifecycle
    ),
    case!(
        "[sig-node] NoExecuteTaintManager Single Pod [Serial] removing taint cancels eviction [Disruptive] [Conformance]",
        "taint-single-pod",
        removing_taint_cancels_eviction
    ),
    case!(
        "[sig-node] NoExecuteTaintManager Multiple Pods [Serial] evicts pods with minTolerationSeconds [Disruptive] [Conformance]",
        "taint-multiple-pods",
        evicts_by_min_toleration_seconds
    ),
];

/// upstream's kubeletPodDeletionDelaySeconds and additionalWaitPerDeleteSeconds.
const KUBELET_DELETION_DELAY: u64 = 60;
const PER_DELETE: u64 = 5;
const TAINT_KEY: &str = "kubernetes.io/e2e-evict-taint-key";
const TAINT_VALUE: &str = "evictTaintVal";

/// Node, resource lifecycle: creating and reading a Node MUST succeed; patching it MUST add the
/// label; listing by that label MUST find exactly it; updating it MUST change the label; deleting
/// it MUST succeed and it MUST be gone (within 3 minutes).
async fn node_lifecycle(ctx: &Ctx) -> CaseResult {
    let nodes = ctx.all::<Node>();
    let name = format!("e2e-fake-node-{}", short_suffix(&ctx.ns));
    let fake: Node = from_json(json!({
        "metadata": {"name": name},
        "spec": {"unschedulable": true},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "reason": "E2E", "message": "Set from e2e test"}]
        }
    }))?;
    let created = nodes.create(&PostParams::default(), &fake).await?;
    // Whatever else happens, the fake node must not outlive the case.
    let result = node_lifecycle_steps(&nodes, &name, created).await;
    if result.is_err() {
        let _ = nodes.delete(&name, &DeleteParams::default()).await;
    }
    result
}

async fn node_lifecycle_steps(nodes: &Api<Node>, name: &str, created: Node) -> CaseResult {
    must_eq!(
        created.metadata.name.as_deref(),
        Some(name),
        "the created node's name"
    );
    let got = nodes.get(name).await?;
    must_eq!(
        got.metadata.name.as_deref(),
        Some(name),
        "the read node's name"
    );

    let patch = json!({"metadata": {"labels": {name: "patched"}}});
    let patched = nodes
        .patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await?;
    must_eq!(
        label(&patched, name),
        Some("patched"),
        "the patched node's label"
    );
    let listed = nodes
        .list(&ListParams::default().labels(&format!("{name}=patched")))
        .await?;
    must_eq!(listed.items.len(), 1, "nodes listed by the patched label");

    let mut updated = None;
    for _ in 0..5 {
        let mut n = nodes.get(name).await?;
        n.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(name.to_string(), "updated".to_string());
        match nodes.replace(name, &PostParams::default(), &n).await {
            Ok(n) => {
                updated = Some(n);
                break;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let updated =
        updated.ok_or_else(|| CaseError::Failed("updating the node conflicted 5 times".into()))?;
    must_eq!(
        label(&updated, name),
        Some("updated"),
        "the updated node's label"
    );

    nodes.delete(name, &DeleteParams::default()).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        match nodes.get_opt(name).await? {
            None => return Ok(()),
            Some(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_secs(1)).await
            }
            Some(_) => return Err(CaseError::Failed(format!("node {name} still exists"))),
        }
    }
}

fn label<'a>(n: &'a Node, key: &str) -> Option<&'a str> {
    n.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// utilrand.String(5)-like: the namespace's own random tail, so two runs never collide.
fn short_suffix(ns: &str) -> String {
    ns.rsplit('-')
        .next()
        .unwrap_or(ns)
        .chars()
        .take(5)
        .collect()
}

/// Taint, Pod Eviction on taint removal: a pod tolerating the taint for 10 s on a node tainted
/// NoExecute MUST NOT be evicted when the taint is removed (after 5 s) before its toleration
/// runs out — watched for 75 s more.
async fn removing_taint_cancels_eviction(ctx: &Ctx) -> CaseResult {
    let group = "taint-eviction-4";
    let mut deletions = observe_deletions(ctx, group);
    let pod = taint_pod(
        ctx.images().pause(),
        group,
        group,
        Some(2 * PER_DELETE),
        None,
    )?;
    let node = run_and_get_node(ctx, pod).await?;
    let tainted = TaintGuard::add(ctx, &node).await?;

    if let Some(gone) = deletion_within(&mut deletions, Duration::from_secs(PER_DELETE)).await {
        tainted.remove().await?;
        return Err(CaseError::Failed(format!(
            "pod {gone} was evicted despite its toleration"
        )));
    }
    tainted.remove().await?;
    let watch = Duration::from_secs(KUBELET_DELETION_DELAY + 3 * PER_DELETE);
    if let Some(gone) = deletion_within(&mut deletions, watch).await {
        return Err(CaseError::Failed(format!(
            "pod {gone} was evicted after the taint was removed"
        )));
    }
    Ok(())
}

/// Pod Eviction, Toleration limits: two pods on one node tolerating the NoExecute taint for 5 s
/// and 25 s MUST both be evicted once it is tainted (within 110 s).
async fn evicts_by_min_toleration_seconds(ctx: &Ctx) -> CaseResult {
    let group = "taint-eviction-b";
    let mut deletions = observe_deletions(ctx, group);
    let first = taint_pod(
        ctx.images().pause(),
        &format!("{group}1"),
        group,
        Some(PER_DELETE),
        None,
    )?;
    let node = run_and_get_node(ctx, first).await?;
    let hostname = label(
        &ctx.all::<Node>().get(&node).await?,
        "kubernetes.io/hostname",
    )
    .map(str::to_string)
    .ok_or_else(|| CaseError::Failed(format!("node {node} has no kubernetes.io/hostname label")))?;
    let second = taint_pod(
        ctx.images().pause(),
        &format!("{group}2"),
        group,
        Some(5 * PER_DELETE),
        Some(&hostname),
    )?;
    run_and_get_node(ctx, second).await?;

    let tainted = TaintGuard::add(ctx, &node).await?;
    let limit = Duration::from_secs(KUBELET_DELETION_DELAY + 10 * PER_DELETE);
    let deadline = tokio::time::Instant::now() + limit;
    let mut evicted = BTreeSet::new();
    while evicted.len() < 2 {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match deletion_within(&mut deletions, left).await {
            Some(name) => {
                evicted.insert(name);
            }
            None => break,
        }
    }
    tainted.remove().await?;
    must!(
        evicted.len() == 2,
        "failed to evict all pods: {} pod(s) not evicted (evicted: {evicted:?})",
        2 - evicted.len()
    );
    Ok(())
}

/// createPodForTaintsTest: a pause pod labelled `group`, tolerating the test taint for `seconds`
/// (forever when None; the shape without a toleration is not used by these entries), optionally
/// pinned to a node by its hostname label.
fn taint_pod(
    image: String,
    name: &str,
    group: &str,
    seconds: Option<u64>,
    hostname: Option<&str>,
) -> CaseResult<Pod> {
    let mut toleration = json!({"key": TAINT_KEY, "value": TAINT_VALUE, "effect": "NoExecute"});
    if let Some(s) = seconds {
        toleration["tolerationSeconds"] = json!(s);
    }
    let mut pod = json!({
        "metadata": {"name": name, "labels": {"group": group}},
        "spec": {
            "containers": [{"name": "pause", "image": image}],
            "tolerations": [toleration],
        }
    });
    if let Some(h) = hostname {
        pod["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": h});
    }
    from_json(pod)
}

/// testutils.RunPodAndGetNodeName: create the pod, wait until it runs, return its node.
async fn run_and_get_node(ctx: &Ctx, pod: Pod) -> CaseResult<String> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    ctx.api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await?;
    let running = ctx.wait_running(&name).await?;
    running
        .spec
        .and_then(|s| s.node_name)
        .ok_or_else(|| CaseError::Failed(format!("running pod {name} has no node")))
}

/// upstream's test controller: reports the name of every pod of `group` that disappears from the
/// API (an informer's DeleteFunc), by listing once a second. The task ends with the case (when
/// the receiver is dropped).
fn observe_deletions(ctx: &Ctx, group: &str) -> mpsc::UnboundedReceiver<String> {
    let pods: Api<Pod> = ctx.api();
    let selector = format!("group={group}");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut seen: BTreeSet<String> = BTreeSet::new();
        while !tx.is_closed() {
            if let Ok(list) = pods.list(&ListParams::default().labels(&selector)).await {
                let now: BTreeSet<String> = list
                    .items
                    .iter()
                    .filter_map(|p| p.metadata.name.clone())
                    .collect();
                for gone in seen.difference(&now) {
                    let _ = tx.send(gone.clone());
                }
                seen = now;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    rx
}

async fn deletion_within(rx: &mut mpsc::UnboundedReceiver<String>, t: Duration) -> Option<String> {
    tokio::time::timeout(t, rx.recv()).await.ok().flatten()
}

/// The test taint on one node: added with upstream's AddOrUpdateTaintOnNode, removed explicitly
/// (and best effort if the case returns early, so a failed case does not leave the node tainted).
struct TaintGuard {
    nodes: Api<Node>,
    node: String,
    removed: bool,
}

impl TaintGuard {
    async fn add(ctx: &Ctx, node: &str) -> CaseResult<TaintGuard> {
        let nodes = ctx.all::<Node>();
        let taint = Taint {
            key: TAINT_KEY.into(),
            value: Some(TAINT_VALUE.into()),
            effect: "NoExecute".into(),
            time_added: Some(Time(k8s_openapi::jiff::Timestamp::now())),
        };
        set_taints(&nodes, node, |taints| {
            taints.retain(|t| !(t.key == TAINT_KEY && t.effect == "NoExecute"));
            taints.push(taint.clone());
        })
        .await?;
        let n = nodes.get(node).await?;
        let has = n
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == TAINT_KEY && t.effect == "NoExecute");
        must!(has, "node {node} does not show the test taint");
        Ok(TaintGuard {
            nodes,
            node: node.to_string(),
            removed: false,
        })
    }

    async fn remove(mut self) -> CaseResult {
        self.removed = true;
        set_taints(&self.nodes, &self.node, |taints| {
            taints.retain(|t| !(t.key == TAINT_KEY && t.effect == "NoExecute"))
        })
        .await
    }
}

impl Drop for TaintGuard {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let (nodes, node) = (self.nodes.clone(), self.node.clone());
        tokio::spawn(async move {
            let _ = set_taints(&nodes, &node, |taints| {
                taints.retain(|t| !(t.key == TAINT_KEY && t.effect == "NoExecute"))
            })
            .await;
        });
    }
}

/// Read-modify-write of a node's taints, retried on conflict.
async fn set_taints(
    nodes: &Api<Node>,
    node: &str,
    mut change: impl FnMut(&mut Vec<Taint>),
) -> CaseResult {
    for _ in 0..10 {
        let mut n = nodes.get(node).await?;
        let spec = n.spec.get_or_insert_with(Default::default);
        let mut taints = spec.taints.take().unwrap_or_default();
        change(&mut taints);
        spec.taints = (!taints.is_empty()).then_some(taints);
        match nodes.replace(node, &PostParams::default(), &n).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(CaseError::Failed(format!(
        "updating the taints of node {node} conflicted 10 times"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn the_fake_node_takes_the_namespace_suffix() {
        assert_eq!(short_suffix("fake-node-ab12c"), "ab12c");
    }

    #[test]
    fn taint_pods_tolerate_the_test_taint_for_their_seconds() {
        let pod = taint_pod("pause:1".into(), "p", "g", Some(5), Some("host2")).expect("a pod");
        let v: Value = serde_json::to_value(pod).unwrap();
        assert_eq!(v["spec"]["tolerations"][0]["tolerationSeconds"], 5);
        assert_eq!(v["spec"]["tolerations"][0]["effect"], "NoExecute");
        assert_eq!(v["spec"]["nodeSelector"]["kubernetes.io/hostname"], "host2");
        assert_eq!(v["metadata"]["labels"]["group"], "g");
        let forever =
            serde_json::to_value(taint_pod("pause:1".into(), "p", "g", None, None).unwrap())
                .unwrap();
        assert!(forever["spec"]["tolerations"][0]
            .get("tolerationSeconds")
            .is_none());
    }
}
