//! node lifecycle: a node whose kubelet stops renewing its Lease (and posting Ready heartbeats) for
//! --node-monitor-grace-period becomes Ready=Unknown and is tainted `node.kubernetes.io/unreachable`
//! (NoExecute + NoSchedule; `not-ready` for Ready=False); the pods on it that still say Ready are
//! marked Ready=False (upstream's MarkPodsNotReady: their kubelet can no longer say otherwise), so
//! Endpoints and EndpointSlices drop them within the grace period instead of at eviction; pods on
//! NoExecute-tainted nodes are deleted once their toleration runs out, so their controllers recreate
//! them elsewhere. Staleness is judged on this controller's own clock (when it last saw the heartbeat
//! change), like upstream's, so clock skew between hosts does not matter.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, PodCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kiln_common::events::{object_reference, NORMAL, WARNING};
use kiln_common::node_matching::tolerates;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::context::{spawn_reflector, Context};

pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
/// Conditions whose True status keeps new pods away (upstream's TaintNodesByCondition): NoSchedule only.
const CONDITION_TAINTS: &[(&str, &str)] = &[
    ("MemoryPressure", "node.kubernetes.io/memory-pressure"),
    ("DiskPressure", TAINT_DISK_PRESSURE),
    ("PIDPressure", "node.kubernetes.io/pid-pressure"),
];

fn condition_true(node: &Node, type_: &str) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

fn ready_condition(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
}

/// The conditions after the kubelet went silent: every one Unknown, as upstream writes them.
pub fn unknown_conditions(node: &Node, now: Timestamp) -> Vec<NodeCondition> {
    let mut conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    if !conditions.iter().any(|c| c.type_ == "Ready") {
        conditions.push(NodeCondition {
            type_: "Ready".into(),
            ..Default::default()
        });
    }
    for c in conditions.iter_mut() {
        if c.status != "Unknown" {
            c.status = "Unknown".into();
            c.last_transition_time = Some(Time(now));
        }
        c.reason = Some("NodeStatusUnknown".into());
        c.message = Some("Kubelet stopped posting node status.".into());
    }
    conditions
}

/// The taints a node should carry for its Ready status: the unreachable / not-ready pair replaced, the
/// pressure conditions' NoSchedule taints following them (none while the node is unreachable: its
/// conditions are stale), every other taint kept (with its timeAdded), or None when nothing changes.
pub fn desired_taints(node: &Node, ready: &str, now: Timestamp) -> Option<Vec<Taint>> {
    let current = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let key = match ready {
        "True" => None,
        "False" => Some(TAINT_NOT_READY),
        _ => Some(TAINT_UNREACHABLE),
    };
    let ours = |t: &Taint| {
        ((t.key == TAINT_UNREACHABLE || t.key == TAINT_NOT_READY)
            && (t.effect == "NoExecute" || t.effect == "NoSchedule"))
            || (t.effect == "NoSchedule" && CONDITION_TAINTS.iter().any(|(_, k)| t.key == *k))
    };
    let mut wanted: Vec<Taint> = current.iter().filter(|t| !ours(t)).cloned().collect();
    if let Some(key) = key {
        for effect in ["NoSchedule", "NoExecute"] {
            let existing = current
                .iter()
                .find(|t| t.key == key && t.effect == effect)
                .cloned();
            wanted.push(existing.unwrap_or(Taint {
                key: key.into(),
                effect: effect.into(),
                time_added: (effect == "NoExecute").then_some(Time(now)),
                value: None,
            }));
        }
    }
    for (condition, key) in CONDITION_TAINTS {
        if ready == "Unknown" || !condition_true(node, condition) {
            continue;
        }
        let existing = current
            .iter()
            .find(|t| t.key == *key && t.effect == "NoSchedule")
            .cloned();
        wanted.push(existing.unwrap_or(Taint {
            key: key.to_string(),
            effect: "NoSchedule".into(),
            time_added: None,
            value: None,
        }));
    }
    let same = wanted.len() == current.len() && wanted.iter().all(|w| current.contains(w));
    (!same).then_some(wanted)
}

/// When a pod on a node with these taints must go: None = never (tolerated forever). A NoExecute
/// taint the pod does not tolerate evicts at once, except unreachable / not-ready, which get
/// `default_toleration` (what upstream's DefaultTolerationSeconds admission would have added).
/// Tolerated taints evict after the smallest tolerationSeconds, counted from the taint's timeAdded.
pub fn eviction_time(
    pod: &Pod,
    taints: &[Taint],
    default_toleration: Duration,
) -> Option<Timestamp> {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let mut earliest: Option<Timestamp> = None;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        let added = taint
            .time_added
            .as_ref()
            .map(|t| t.0)
            .unwrap_or_else(Timestamp::now);
        let matching: Vec<_> = tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        let seconds = if matching.is_empty() {
            if taint.key == TAINT_UNREACHABLE || taint.key == TAINT_NOT_READY {
                Some(default_toleration.as_secs() as i64)
            } else {
                Some(0)
            }
        } else if matching.iter().any(|t| t.toleration_seconds.is_none()) {
            None
        } else {
            matching
                .iter()
                .filter_map(|t| t.toleration_seconds)
                .min()
                .map(|s| s.max(0))
        };
        if let Some(s) = seconds {
            let at = added + SignedDuration::from_secs(s);
            earliest = Some(earliest.map_or(at, |e| e.min(at)));
        }
    }
    earliest
}

/// Upstream's MarkPodsNotReady as data: the pods on `node` whose Ready condition is not False yet,
/// each with its conditions after Ready became False (lastTransitionTime `now`, the rest untouched).
/// Pods without a Ready condition are left alone, as upstream does.
pub fn pods_to_mark_not_ready(
    pods: &[Arc<Pod>],
    node: &str,
    now: Timestamp,
) -> Vec<(Arc<Pod>, Vec<PodCondition>)> {
    pods.iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter_map(|p| {
            let mut conditions = p.status.as_ref()?.conditions.clone()?;
            let ready = conditions.iter_mut().find(|c| c.type_ == "Ready")?;
            if ready.status == "False" {
                return None;
            }
            ready.status = "False".into();
            ready.last_transition_time = Some(Time(now));
            Some((p.clone(), conditions))
        })
        .collect()
}

/// What the controller last saw of a node's heartbeats, and when it saw them change.
struct Health {
    record: (Option<Timestamp>, Option<Timestamp>),
    changed_at: Instant,
}

pub async fn run(ctx: Context) {
    let (nodes, _n) = spawn_reflector::<Node>(&ctx.client);
    let (leases, _l) = spawn_reflector::<Lease>(&ctx.client);
    let (pods, _p) = spawn_reflector::<Pod>(&ctx.client);
    let (Ok(()), Ok(()), Ok(())) = (
        nodes.wait_until_ready().await,
        leases.wait_until_ready().await,
        pods.wait_until_ready().await,
    ) else {
        return;
    };
    let node_api: Api<Node> = Api::all(ctx.client.clone());
    let grace = ctx.options.node_monitor_grace_period;
    let mut health: HashMap<String, Health> = HashMap::new();
    let mut ticker = tokio::time::interval(ctx.options.node_monitor_period);
    loop {
        ticker.tick().await;
        let now = Timestamp::now();
        let all_nodes = nodes.state();
        health.retain(|name, _| {
            all_nodes
                .iter()
                .any(|n| n.metadata.name.as_ref() == Some(name))
        });
        for node in &all_nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            let lease_renew = leases
                .state()
                .iter()
                .find(|l| {
                    l.metadata.namespace.as_deref() == Some("kube-node-lease")
                        && l.metadata.name.as_deref() == Some(name.as_str())
                })
                .and_then(|l| l.spec.as_ref()?.renew_time.as_ref().map(|t| t.0));
            let heartbeat =
                ready_condition(node).and_then(|c| c.last_heartbeat_time.as_ref().map(|t| t.0));
            let record = (lease_renew, heartbeat);
            let entry = health.entry(name.clone()).or_insert(Health {
                record,
                changed_at: Instant::now(),
            });
            if entry.record != record {
                entry.record = record;
                entry.changed_at = Instant::now();
            }
            let stale = entry.changed_at.elapsed() >= grace;
            let mut ready = ready_condition(node)
                .map(|c| c.status.clone())
                .unwrap_or_else(|| "Unknown".into());
            if stale && ready != "Unknown" {
                let conditions = unknown_conditions(node, now);
                let patch = json!({"status": {"conditions": conditions}});
                match node_api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {
                        tracing::info!(node = %name, "node stopped posting status: Ready=Unknown");
                        ready = "Unknown".into();
                        let _ = ctx
                            .recorder
                            .record(
                                &object_reference(node.as_ref()),
                                NORMAL,
                                "NodeNotReady",
                                &format!("Node {name} status is now: NodeNotReady"),
                            )
                            .await;
                    }
                    Err(e) => {
                        tracing::warn!(node = %name, error = %e, "marking node Unknown failed")
                    }
                }
            }
            // Only while the controller itself judges the kubelet silent: a kubelet that reports
            // NotReady still reports its pods' readiness.
            if stale && ready == "Unknown" {
                mark_pods_not_ready(&ctx, &pods.state(), &name, now).await;
            }
            if let Some(taints) = desired_taints(node, &ready, now) {
                let patch = json!({
                    "metadata": {"resourceVersion": node.metadata.resource_version},
                    "spec": {"taints": taints}
                });
                if let Err(e) = node_api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    tracing::warn!(node = %name, error = %e, "updating node taints failed");
                }
            }
            let taints = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            if taints.iter().any(|t| t.effect == "NoExecute") {
                evict_due_pods(&ctx, &pods.state(), &name, &taints, now).await;
            }
        }
    }
}

async fn mark_pods_not_ready(ctx: &Context, pods: &[Arc<Pod>], node: &str, now: Timestamp) {
    for (pod, conditions) in pods_to_mark_not_ready(pods, node, now) {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
        // The resourceVersion makes it a compare-and-swap, like upstream's UpdateStatus: a pod that
        // changed meanwhile is looked at again on the next pass.
        let patch = json!({
            "metadata": {"resourceVersion": pod.metadata.resource_version},
            "status": {"conditions": conditions}
        });
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(pod = %format!("{ns}/{name}"), %node, "node not ready: pod marked not ready");
                let _ = ctx
                    .recorder
                    .record(
                        &object_reference(pod.as_ref()),
                        WARNING,
                        "NodeNotReady",
                        "Node is not ready",
                    )
                    .await;
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => {
                tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "marking pod not ready failed")
            }
        }
    }
}

async fn evict_due_pods(
    ctx: &Context,
    pods: &[Arc<Pod>],
    node: &str,
    taints: &[Taint],
    now: Timestamp,
) {
    for pod in pods.iter().filter(|p| {
        p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
            && p.metadata.deletion_timestamp.is_none()
    }) {
        let Some(at) = eviction_time(pod, taints, ctx.options.pod_eviction_timeout) else {
            continue;
        };
        if at > now {
            continue;
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(pod = %format!("{ns}/{name}"), %node, "evicted (NoExecute taint)");
                let _ = ctx
                    .recorder
                    .record(
                        &object_reference(pod.as_ref()),
                        NORMAL,
                        "TaintManagerEviction",
                        &format!("Marking for deletion Pod {ns}/{name}"),
                    )
                    .await;
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => tracing::warn!(pod = %name, error = %e, "eviction failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn silent_node_gets_unknown_conditions() {
        let n = node(json!({"metadata": {"name": "n"}, "status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            {"type": "MemoryPressure", "status": "False"}]}}));
        let c = unknown_conditions(&n, Timestamp::now());
        assert!(c.iter().all(|c| c.status == "Unknown"));
        assert_eq!(c[0].reason.as_deref(), Some("NodeStatusUnknown"));
        assert_eq!(
            c[0].message.as_deref(),
            Some("Kubelet stopped posting node status.")
        );
    }

    #[test]
    fn taints_follow_readiness_and_keep_others() {
        let now = Timestamp::now();
        let n = node(json!({"metadata": {"name": "n"}, "spec": {"taints": [
            {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}}));
        let t = desired_taints(&n, "Unknown", now).unwrap();
        assert_eq!(t.len(), 3);
        assert!(t.iter().any(|t| t.key == TAINT_UNREACHABLE
            && t.effect == "NoExecute"
            && t.time_added.is_some()));
        assert!(desired_taints(&n, "True", now).is_none());
        let tainted = node(json!({"metadata": {"name": "n"}, "spec": {"taints": t}}));
        assert!(desired_taints(&tainted, "Unknown", now).is_none(), "stable");
        assert_eq!(
            desired_taints(&tainted, "True", now).unwrap().len(),
            1,
            "recovered"
        );
        let not_ready = desired_taints(&tainted, "False", now).unwrap();
        assert!(not_ready.iter().any(|t| t.key == TAINT_NOT_READY));
        assert!(!not_ready.iter().any(|t| t.key == TAINT_UNREACHABLE));
    }

    #[test]
    fn disk_pressure_condition_taints_no_schedule() {
        let now = Timestamp::now();
        let pressured = |status: &str| {
            node(json!({"metadata": {"name": "n"}, "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "DiskPressure", "status": status}]}}))
        };
        let t = desired_taints(&pressured("True"), "True", now).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(
            (t[0].key.as_str(), t[0].effect.as_str()),
            (TAINT_DISK_PRESSURE, "NoSchedule")
        );
        let mut tainted = pressured("True");
        tainted.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            taints: Some(t),
            ..Default::default()
        });
        assert!(desired_taints(&tainted, "True", now).is_none(), "stable");
        assert!(
            desired_taints(&tainted, "Unknown", now)
                .unwrap()
                .iter()
                .all(|t| t.key != TAINT_DISK_PRESSURE),
            "stale conditions of an unreachable node taint nothing"
        );
        let mut relieved = pressured("False");
        relieved.spec = tainted.spec.clone();
        assert_eq!(desired_taints(&relieved, "True", now), Some(vec![]));
        assert!(desired_taints(&pressured("False"), "True", now).is_none());
    }

    #[test]
    fn eviction_waits_for_toleration_seconds() {
        // Whole seconds: metav1.Time serializes without fractions.
        let added: Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
        let taints: Vec<Taint> = vec![serde_json::from_value(json!({
            "key": TAINT_UNREACHABLE, "effect": "NoExecute", "timeAdded": Time(added)
        }))
        .unwrap()];
        let pod = |tolerations: serde_json::Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [], "tolerations": tolerations}})).unwrap()
        };
        let default = Duration::from_secs(300);
        assert_eq!(
            eviction_time(&pod(json!([])), &taints, default),
            Some(added + SignedDuration::from_secs(300))
        );
        assert_eq!(
            eviction_time(
                &pod(
                    json!([{"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}])
                ),
                &taints,
                default
            ),
            Some(added + SignedDuration::from_secs(5))
        );
        assert_eq!(
            eviction_time(&pod(json!([{"operator": "Exists"}])), &taints, default),
            None,
            "tolerated forever"
        );
        let other: Vec<Taint> = vec![serde_json::from_value(
            json!({"key": "x", "effect": "NoExecute", "timeAdded": Time(added)}),
        )
        .unwrap()];
        assert_eq!(
            eviction_time(&pod(json!([])), &other, default),
            Some(added),
            "untolerated: at once"
        );
    }

    #[test]
    fn pods_on_a_silent_node_are_marked_not_ready() {
        let pod = |name: &str, node: &str, ready: Option<&str>| -> Arc<Pod> {
            let conditions: Vec<serde_json::Value> = [
                Some(json!({"type": "PodScheduled", "status": "True"})),
                ready.map(|r| {
                    json!({"type": "Ready", "status": r,
                    "lastTransitionTime": "2025-01-01T00:00:00Z"})
                }),
            ]
            .into_iter()
            .flatten()
            .collect();
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": "kube-system"},
                    "spec": {"nodeName": node, "containers": []},
                    "status": {"conditions": conditions}
                }))
                .unwrap(),
            )
        };
        let now: Timestamp = "2025-06-01T12:00:00Z".parse().unwrap();
        let pods = [
            pod("dns-n1", "n1", Some("True")),
            pod("already", "n1", Some("False")),
            pod("no-ready-condition", "n1", None),
            pod("dns-n2", "n2", Some("True")),
        ];
        let marked = pods_to_mark_not_ready(&pods, "n1", now);
        assert_eq!(marked.len(), 1, "only the Ready pod on the silent node");
        let (p, conditions) = &marked[0];
        assert_eq!(p.metadata.name.as_deref(), Some("dns-n1"));
        let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(ready.last_transition_time, Some(Time(now)));
        assert_eq!(conditions.len(), 2, "other conditions kept");
        assert_eq!(conditions[0].status, "True");
    }
}
