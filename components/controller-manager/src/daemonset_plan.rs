//! The daemonset controller's decisions, pure: which nodes should run a daemon pod (node selector,
//! required node affinity, taints against the template's tolerations plus the ones upstream adds
//! to every daemon pod), the pod for a node (pinned with node affinity on `metadata.name`, as
//! upstream does, so the scheduler binds it), what to create and delete — including a RollingUpdate
//! within maxUnavailable — and the status counts `kubectl rollout status` reads.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kiln_common::node_matching::{any_term_matches, selector_matches, tolerated};

use crate::deployment_plan::template_hash;
use crate::pods::{is_active, is_available, is_ready};

/// Daemon pods carry the hash of the ControllerRevision they were made from
/// (`daemonset_history`); so does the revision itself.
pub const HASH_LABEL: &str = "controller-revision-hash";

fn toleration(key: &str, effect: &str) -> Toleration {
    Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Default::default()
    }
}

/// The template's tolerations plus those upstream's AddOrUpdateDaemonPodTolerations adds.
pub fn daemon_tolerations(ds: &DaemonSet) -> Vec<Toleration> {
    let spec = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    let mut out = spec.and_then(|s| s.tolerations.clone()).unwrap_or_default();
    let mut extra = vec![
        toleration("node.kubernetes.io/not-ready", "NoExecute"),
        toleration("node.kubernetes.io/unreachable", "NoExecute"),
        toleration("node.kubernetes.io/disk-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/memory-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/pid-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec.and_then(|s| s.host_network).unwrap_or(false) {
        extra.push(toleration(
            "node.kubernetes.io/network-unavailable",
            "NoSchedule",
        ));
    }
    for t in extra {
        if !out.iter().any(|o| o.key == t.key && o.effect == t.effect) {
            out.push(t);
        }
    }
    out
}

/// Upstream's NodeShouldRunDaemonPod: selector, required affinity, and every NoSchedule /
/// NoExecute taint tolerated.
pub fn should_run(ds: &DaemonSet, node: &Node) -> bool {
    if node.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let spec = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    if let Some(sel) = spec.and_then(|s| s.node_selector.as_ref()) {
        if !selector_matches(sel, node) {
            return false;
        }
    }
    let required = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    if let Some(req) = required {
        if !any_term_matches(&req.node_selector_terms, node) {
            return false;
        }
    }
    let tolerations = daemon_tolerations(ds);
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|t| tolerated(&tolerations, t))
}

pub fn current_hash(ds: &DaemonSet) -> String {
    template_hash(
        &ds.spec.clone().unwrap_or_default().template,
        ds.status.as_ref().and_then(|s| s.collision_count),
    )
}

/// The node a daemon pod is for: its nodeName once bound, else its metadata.name affinity.
pub fn pod_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_ref().filter(|n| !n.is_empty()) {
        return Some(n.clone());
    }
    spec.affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|f| f.key == "metadata.name" && f.operator == "In")
        .and_then(|f| f.values.as_ref()?.first().cloned())
}

pub fn owner_reference(ds: &DaemonSet) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "DaemonSet".into(),
        name: ds.metadata.name.clone().unwrap_or_default(),
        uid: ds.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The daemon pod for a node: the template, the hash label, the daemon tolerations, and required
/// node affinity replaced by `metadata.name In [node]` (upstream's ReplaceDaemonSetPodNodeNameNodeAffinity).
pub fn new_pod(ds: &DaemonSet, node: &str, hash: &str) -> Pod {
    let template = ds.spec.clone().unwrap_or_default().template;
    let meta = template.metadata.unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(HASH_LABEL.into(), hash.into());
    let mut spec = template.spec.unwrap_or_default();
    spec.tolerations = Some(daemon_tolerations(ds));
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![node.into()]),
        }]),
        match_expressions: None,
    };
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let node_affinity = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    node_affinity.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
        node_selector_terms: vec![term],
    });
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", ds.metadata.name.as_deref().unwrap_or("ds"))),
            namespace: ds.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: meta.annotations,
            owner_references: Some(vec![owner_reference(ds)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

fn is_failed(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
}

fn hash_of(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()?
        .get(HASH_LABEL)
        .map(String::as_str)
}

/// What to change now.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// nodes that need a daemon pod
    pub create: Vec<String>,
    /// pods to delete (by name)
    pub delete: Vec<String>,
}

fn max_unavailable(ds: &DaemonSet, desired: i32) -> i32 {
    let ru = ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let v = match ru.and_then(|r| r.max_unavailable.as_ref()) {
        None => 1,
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(s)) => {
            let pct: f64 = s.trim_end_matches('%').parse().unwrap_or(0.0);
            (desired as f64 * pct / 100.0).ceil() as i32
        }
    };
    v.max(1)
}

fn on_delete(ds: &DaemonSet) -> bool {
    ds.spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        == Some("OnDelete")
}

/// `nodes`: every node; `pods`: the DaemonSet's own pods; `pending`: nodes with a create in flight.
pub fn plan(
    ds: &DaemonSet,
    nodes: &[Arc<Node>],
    pods: &[Arc<Pod>],
    pending: &BTreeSet<String>,
    hash: &str,
    now: Timestamp,
) -> Plan {
    let min_ready = ds
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0);
    let mut by_node: BTreeMap<String, Vec<&Arc<Pod>>> = BTreeMap::new();
    // Nodes whose daemon pod is still terminating get no new one until it is gone (upstream's
    // podsShouldBeOnNode without surge), so a replacement never runs beside its predecessor and
    // a node counts as unavailable once, not twice.
    let mut terminating: BTreeSet<String> = BTreeSet::new();
    for p in pods {
        let Some(n) = pod_node(p) else { continue };
        if p.metadata.deletion_timestamp.is_some() {
            terminating.insert(n);
        } else {
            by_node.entry(n).or_default().push(p);
        }
    }
    let mut plan = Plan::default();
    let mut desired = 0;
    let mut unavailable = 0;
    let mut outdated: Vec<String> = Vec::new();
    let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
    for node in nodes {
        let node_name = node.metadata.name.clone().unwrap_or_default();
        let on_node = by_node.remove(&node_name).unwrap_or_default();
        if !should_run(ds, node) {
            plan.delete.extend(on_node.iter().map(|p| name(p)));
            continue;
        }
        desired += 1;
        let (failed, mut active): (Vec<_>, Vec<_>) =
            on_node.into_iter().partition(|p| is_failed(p));
        plan.delete.extend(failed.iter().map(|p| name(p)));
        active.retain(|p| is_active(p));
        if active.is_empty() {
            if !pending.contains(&node_name) && !terminating.contains(&node_name) {
                plan.create.push(node_name);
            }
            unavailable += 1;
            continue;
        }
        // Keep one: the current template's if any, else the oldest.
        active.sort_by_key(|p| {
            (
                hash_of(p) != Some(hash),
                p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            )
        });
        plan.delete.extend(active[1..].iter().map(|p| name(p)));
        let keep = active[0];
        if !is_available(keep, min_ready, now) {
            unavailable += 1;
        }
        if hash_of(keep) != Some(hash) {
            if !is_available(keep, min_ready, now) {
                // An old pod that is down anyway is replaced at once.
                plan.delete.push(name(keep));
            } else {
                outdated.push(name(keep));
            }
        }
    }
    // Pods for nodes that no longer exist.
    for leftover in by_node.into_values().flatten() {
        plan.delete.push(name(leftover));
    }
    if !on_delete(ds) {
        let budget = (max_unavailable(ds, desired) - unavailable).max(0) as usize;
        plan.delete.extend(outdated.into_iter().take(budget));
    }
    plan
}

/// Status over the nodes that should run the daemon and the DaemonSet's pods.
pub fn compute_status(
    ds: &DaemonSet,
    nodes: &[Arc<Node>],
    pods: &[Arc<Pod>],
    hash: &str,
    now: Timestamp,
) -> DaemonSetStatus {
    let min_ready = ds
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0);
    let mut s = DaemonSetStatus {
        observed_generation: ds.metadata.generation,
        collision_count: ds.status.as_ref().and_then(|s| s.collision_count),
        ..Default::default()
    };
    for node in nodes {
        let node_name = node.metadata.name.as_deref();
        let on_node: Vec<&Arc<Pod>> = pods
            .iter()
            .filter(|p| is_active(p) && pod_node(p).as_deref() == node_name)
            .collect();
        let run = should_run(ds, node);
        if !run {
            if !on_node.is_empty() {
                s.number_misscheduled += 1;
            }
            continue;
        }
        s.desired_number_scheduled += 1;
        if on_node.is_empty() {
            continue;
        }
        s.current_number_scheduled += 1;
        if on_node.iter().any(|p| is_ready(p)) {
            s.number_ready += 1;
        }
        if on_node.iter().any(|p| is_available(p, min_ready, now)) {
            *s.number_available.get_or_insert(0) += 1;
        }
        if on_node.iter().any(|p| hash_of(p) == Some(hash)) {
            *s.updated_number_scheduled.get_or_insert(0) += 1;
        }
    }
    let available = s.number_available.unwrap_or(0);
    s.number_available = Some(available);
    s.updated_number_scheduled = Some(s.updated_number_scheduled.unwrap_or(0));
    s.number_unavailable = Some((s.desired_number_scheduled - available).max(0));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds(image: &str) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds-uid", "generation": 2},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}},
                    "spec": {"nodeSelector": {"kubernetes.io/os": "linux"},
                        "containers": [{"name": "c", "image": image}]}}}
        }))
        .unwrap()
    }

    fn node(name: &str, taints: serde_json::Value, unschedulable: bool) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"kubernetes.io/os": "linux"}},
                "spec": {"taints": taints, "unschedulable": unschedulable}
            }))
            .unwrap(),
        )
    }

    fn pod_on(ds: &DaemonSet, node: &str, hash: &str, ready: bool, name: &str) -> Arc<Pod> {
        let mut p = new_pod(ds, node, hash);
        p.metadata.name = Some(name.into());
        p.status = Some(
            serde_json::from_value(json!({"phase": "Running",
                "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}))
            .unwrap(),
        );
        Arc::new(p)
    }

    #[test]
    fn eligibility_follows_selector_and_taints_with_daemon_tolerations() {
        let d = ds("agent:1");
        assert!(should_run(&d, &node("n1", json!([]), false)));
        // Cordoned and not-ready nodes still run daemons (upstream's added tolerations).
        assert!(should_run(&d, &node("n2", json!([]), true)));
        let not_ready = json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]);
        assert!(should_run(&d, &node("n3", not_ready, false)));
        let cp = json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]);
        assert!(!should_run(&d, &node("cp", cp.clone(), false)));
        let soft = json!([{"key": "x", "effect": "PreferNoSchedule"}]);
        assert!(should_run(&d, &node("n4", soft, false)));
        let mut windows = (*node("w", json!([]), false)).clone();
        windows.metadata.labels =
            Some([("kubernetes.io/os".to_string(), "windows".to_string())].into());
        assert!(!should_run(&d, &windows));
        let mut tolerant = ds("agent:1");
        tolerant
            .spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .tolerations = Some(vec![
            serde_json::from_value(json!({"operator": "Exists"})).unwrap()
        ]);
        assert!(should_run(&tolerant, &node("cp", cp, false)));
    }

    #[test]
    fn pods_are_pinned_with_node_affinity() {
        let d = ds("agent:1");
        let p = new_pod(&d, "n7", "h1");
        assert_eq!(pod_node(&p).as_deref(), Some("n7"));
        assert!(p.spec.as_ref().unwrap().node_name.is_none());
        assert_eq!(p.metadata.labels.as_ref().unwrap()[HASH_LABEL], "h1");
        assert_eq!(
            p.metadata.owner_references.as_ref().unwrap()[0].kind,
            "DaemonSet"
        );
        let tol = p.spec.as_ref().unwrap().tolerations.as_ref().unwrap();
        assert!(tol
            .iter()
            .any(|t| t.key.as_deref() == Some("node.kubernetes.io/unreachable")));
    }

    #[test]
    fn plan_creates_missing_removes_extra_and_rolls_one_at_a_time() {
        let d = ds("agent:1");
        let h = current_hash(&d);
        let nodes = vec![
            node("n1", json!([]), false),
            node("n2", json!([]), false),
            node("n3", json!([]), false),
            node("cp", json!([{"key": "k", "effect": "NoSchedule"}]), false),
        ];
        let pods = vec![
            pod_on(&d, "n1", &h, true, "a"),
            pod_on(&d, "n1", &h, true, "a2"),
            pod_on(&d, "cp", &h, true, "b"),
            pod_on(&d, "gone", &h, true, "c"),
        ];
        let now = Timestamp::now();
        let p = plan(
            &d,
            &nodes,
            &pods,
            &BTreeSet::from(["n3".to_string()]),
            &h,
            now,
        );
        assert_eq!(p.create, ["n2"]);
        let mut del = p.delete.clone();
        del.sort();
        assert_eq!(del, ["a2", "b", "c"]);

        // New template: old pods replaced within maxUnavailable 1.
        let d2 = ds("agent:2");
        let pods: Vec<_> = ["n1", "n2", "n3"]
            .iter()
            .map(|n| pod_on(&d2, n, &h, true, &format!("old-{n}")))
            .collect();
        let h2 = current_hash(&d2);
        let p = plan(&d2, &nodes[..3], &pods, &BTreeSet::new(), &h2, now);
        assert_eq!((p.create.len(), p.delete.len()), (0, 1));
        let s = compute_status(&d2, &nodes[..3], &pods, &h2, now);
        assert_eq!(
            (
                s.desired_number_scheduled,
                s.current_number_scheduled,
                s.number_ready
            ),
            (3, 3, 3)
        );
        assert_eq!(
            (s.updated_number_scheduled, s.number_available),
            (Some(0), Some(3))
        );
        // One node without its pod: the budget is used up, nothing else goes.
        let p = plan(&d2, &nodes[..3], &pods[1..], &BTreeSet::new(), &h2, now);
        assert_eq!((p.create, p.delete.len()), (vec!["n1".to_string()], 0));
    }

    #[test]
    fn no_replacement_while_the_old_pod_terminates() {
        let d = ds("agent:1");
        let h = current_hash(&d);
        let nodes = vec![node("n1", json!([]), false)];
        let mut going = (*pod_on(&d, "n1", &h, false, "old")).clone();
        going.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
        let now = Timestamp::now();
        let p = plan(&d, &nodes, &[Arc::new(going)], &BTreeSet::new(), &h, now);
        assert_eq!(p, Plan::default());
        // Once it is gone, the node gets its pod.
        let p = plan(&d, &nodes, &[], &BTreeSet::new(), &h, now);
        assert_eq!(p.create, ["n1"]);
    }
}
