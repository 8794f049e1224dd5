//! Filter plugins as a list the algorithm walks, in upstream's order. A node fails on the first
//! filter that rejects it; the reasons are upstream's exact strings, because they end up in the
//! FailedScheduling message users grep for.

use k8s_openapi::api::core::v1::{Node, Pod, Taint};

use crate::node_info::NodeInfo;
use crate::pod_info::PodInfo;
use crate::volume_binding::{self, FilterRejection};
use crate::volume_filters::PodVolumes;
use crate::volume_restrictions;
use crate::volume_zone;
use kiln_common::node_matching::{any_term_matches, selector_matches, tolerated};

pub const REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
pub const REASON_NODE_NAME: &str = "node(s) didn't match the requested node name";
pub const REASON_AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";
pub const REASON_PORTS: &str = "node(s) didn't have free ports for the requested pod ports";
pub const REASON_TOO_MANY_PODS: &str = "Too many pods";

/// Everything a filter looks at for one (pod, node) pair.
pub struct FilterInput<'a> {
    pub pod: &'a Pod,
    pub pod_info: &'a PodInfo,
    pub node_info: &'a NodeInfo,
    pub node: &'a Node,
    /// What the volume plugins' PreFilter found for this pod.
    pub volumes: &'a PodVolumes,
}

/// upstream's status codes for a rejection: whether preempting pods on the node could help, or an
/// error that fails the whole attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Unschedulable,
    UnschedulableAndUnresolvable,
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub code: Code,
    pub reasons: Vec<String>,
}

impl Rejection {
    pub fn new(code: Code, reasons: Vec<String>) -> Rejection {
        Rejection { code, reasons }
    }
}

/// Ok, or why this node cannot take the pod.
pub type FilterResult = Result<(), Rejection>;

pub struct Filter {
    pub name: &'static str,
    pub run: fn(&FilterInput) -> FilterResult,
}

/// The enabled filters, in the order upstream's default profile runs them.
pub static FILTERS: &[Filter] = &[
    Filter {
        name: "NodeUnschedulable",
        run: node_unschedulable,
    },
    Filter {
        name: "NodeName",
        run: node_name,
    },
    Filter {
        name: "TaintToleration",
        run: taint_toleration,
    },
    Filter {
        name: "NodeSelector",
        run: node_selector,
    },
    Filter {
        name: "NodeAffinity",
        run: node_affinity,
    },
    Filter {
        name: "NodePorts",
        run: node_ports,
    },
    Filter {
        name: "NodeResourcesFit",
        run: node_resources_fit,
    },
    Filter {
        name: "VolumeRestrictions",
        run: volume_restrictions_filter,
    },
    Filter {
        name: "VolumeBinding",
        run: volume_binding_filter,
    },
    Filter {
        name: "VolumeZone",
        run: volume_zone_filter,
    },
];

/// Runs the filters in order; the first rejection decides.
pub fn run_filters(input: &FilterInput) -> FilterResult {
    FILTERS.iter().try_for_each(|f| (f.run)(input))
}

/// Rejected, and preempting pods would not change that.
fn fail(reason: &str) -> FilterResult {
    Err(Rejection::new(
        Code::UnschedulableAndUnresolvable,
        vec![reason.to_string()],
    ))
}

fn tolerations(pod: &Pod) -> &[k8s_openapi::api::core::v1::Toleration] {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default()
}

fn node_unschedulable(i: &FilterInput) -> FilterResult {
    let unschedulable = i
        .node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    // A pod that tolerates the cordon taint may still go there (upstream's DaemonSet escape hatch).
    let cordon = Taint {
        key: "node.kubernetes.io/unschedulable".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    if unschedulable && !tolerated(tolerations(i.pod), &cordon) {
        return fail(REASON_UNSCHEDULABLE);
    }
    Ok(())
}

fn node_name(i: &FilterInput) -> FilterResult {
    match i.pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        Some(wanted) if !wanted.is_empty() && wanted != i.node_info.name => fail(REASON_NODE_NAME),
        _ => Ok(()),
    }
}

fn taint_toleration(i: &FilterInput) -> FilterResult {
    let taints = i.node.spec.as_ref().and_then(|s| s.taints.as_deref());
    let untolerated = taints.into_iter().flatten().find(|t| {
        (t.effect == "NoSchedule" || t.effect == "NoExecute") && !tolerated(tolerations(i.pod), t)
    });
    match untolerated {
        Some(t) => fail(&format!(
            "node(s) had untolerated taint {{{}: {}}}",
            t.key,
            t.value.as_deref().unwrap_or("")
        )),
        None => Ok(()),
    }
}

fn node_selector(i: &FilterInput) -> FilterResult {
    match i.pod.spec.as_ref().and_then(|s| s.node_selector.as_ref()) {
        Some(sel) if !selector_matches(sel, i.node) => fail(REASON_AFFINITY),
        _ => Ok(()),
    }
}

fn node_affinity(i: &FilterInput) -> FilterResult {
    let required = i
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        Some(sel) if !any_term_matches(&sel.node_selector_terms, i.node) => fail(REASON_AFFINITY),
        _ => Ok(()),
    }
}

fn node_ports(i: &FilterInput) -> FilterResult {
    let conflict = i
        .pod_info
        .host_ports
        .iter()
        .any(|want| i.node_info.used_ports().any(|used| used.conflicts(want)));
    if conflict {
        // The pod holding the port could be preempted.
        return Err(Rejection::new(
            Code::Unschedulable,
            vec![REASON_PORTS.to_string()],
        ));
    }
    Ok(())
}

/// Pods first, then cpu, memory, ephemeral-storage, each against allocatable minus what is already
/// requested on the node; every insufficient resource is a reason of its own. Preemption may help,
/// unless the pod asks for more than the node has at all.
fn node_resources_fit(i: &FilterInput) -> FilterResult {
    let alloc = &i.node_info.allocatable;
    let used = &i.node_info.requested;
    let req = &i.pod_info.requests;
    let mut reasons = Vec::new();
    let mut code = Code::Unschedulable;
    if used.pods + 1 > alloc.pods {
        reasons.push(REASON_TOO_MANY_PODS.to_string());
    }
    let checks = [
        ("cpu", req.milli_cpu, alloc.milli_cpu, used.milli_cpu),
        ("memory", req.memory, alloc.memory, used.memory),
        (
            "ephemeral-storage",
            req.ephemeral_storage,
            alloc.ephemeral_storage,
            used.ephemeral_storage,
        ),
    ];
    let scalars = req
        .scalar
        .iter()
        .map(|(name, want)| (name.as_str(), *want, alloc.scalar(name), used.scalar(name)));
    for (name, want, total, used) in checks.into_iter().chain(scalars) {
        if want > 0 && want > total - used {
            reasons.push(format!("Insufficient {name}"));
            if want > total {
                code = Code::UnschedulableAndUnresolvable;
            }
        }
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(Rejection::new(code, reasons))
    }
}

/// The volume plugins' Filter: each reads what their PreFilter ([`crate::volume_filters`]) found.
fn volume_restrictions_filter(i: &FilterInput) -> FilterResult {
    volume_restrictions::filter(i.volumes.read_write_once_pod_conflicts)
        .map_err(|r| Rejection::new(Code::Unschedulable, vec![r.to_string()]))
}

fn volume_binding_filter(i: &FilterInput) -> FilterResult {
    let Some(state) = &i.volumes.binding else {
        return Ok(());
    };
    match volume_binding::find_pod_volumes(state, i.node) {
        Ok(_) => Ok(()),
        Err(FilterRejection::Reasons(reasons)) => Err(Rejection::new(
            Code::UnschedulableAndUnresolvable,
            reasons.into_iter().map(str::to_string).collect(),
        )),
        Err(FilterRejection::Error(e)) => Err(Rejection::new(
            Code::Error,
            vec![format!("running \"VolumeBinding\" filter plugin: {e}")],
        )),
    }
}

fn volume_zone_filter(i: &FilterInput) -> FilterResult {
    volume_zone::filter(&i.volumes.zones, i.node)
        .map_err(|r| Rejection::new(Code::UnschedulableAndUnresolvable, vec![r.to_string()]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_info::NodeInfo;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Node {
        let mut base = json!({
            "metadata": {"name": "n1", "labels": {"zone": "a"}},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "3", "ephemeral-storage": "10Gi"}}
        });
        merge(&mut base, v);
        serde_json::from_value(base).unwrap()
    }

    fn pod(spec: serde_json::Value) -> Pod {
        let mut base = json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}
        });
        merge(&mut base, json!({"spec": spec}));
        serde_json::from_value(base).unwrap()
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn check(pod: &Pod, info: &NodeInfo) -> FilterResult {
        let pi = PodInfo::new(pod);
        run_filters(&FilterInput {
            pod,
            pod_info: &pi,
            node_info: info,
            node: info.node.as_ref().unwrap(),
            volumes: &PodVolumes::default(),
        })
    }

    fn reasons(pod: &Pod, n: Node) -> Vec<String> {
        check(pod, &NodeInfo::new(n))
            .err()
            .map(|r| r.reasons)
            .unwrap_or_default()
    }

    #[test]
    fn cordoned_node_rejects_unless_tolerated() {
        let n = node(json!({"spec": {"unschedulable": true}}));
        assert_eq!(reasons(&pod(json!({})), n.clone()), [REASON_UNSCHEDULABLE]);
        let tolerant = pod(json!({"tolerations": [
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
        ]}));
        assert!(reasons(&tolerant, n).is_empty());
    }

    #[test]
    fn untolerated_taint_names_key_and_value() {
        let n = node(json!({"spec": {"taints": [
            {"key": "soft", "effect": "PreferNoSchedule"},
            {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
        ]}}));
        assert_eq!(
            reasons(&pod(json!({})), n.clone()),
            ["node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }"]
        );
        let tolerant = pod(json!({"tolerations": [
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
        ]}));
        assert!(reasons(&tolerant, n).is_empty());
        let exec =
            node(json!({"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]}}));
        assert_eq!(
            reasons(&pod(json!({})), exec),
            ["node(s) had untolerated taint {k: v}"]
        );
    }

    #[test]
    fn selector_and_required_affinity() {
        assert_eq!(
            reasons(
                &pod(json!({"nodeSelector": {"zone": "b"}})),
                node(json!({}))
            ),
            [REASON_AFFINITY]
        );
        assert!(reasons(
            &pod(json!({"nodeSelector": {"zone": "a"}})),
            node(json!({}))
        )
        .is_empty());
        let affinity = |zone: &str| {
            pod(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}]
                }}}}),
            )
        };
        assert_eq!(reasons(&affinity("b"), node(json!({}))), [REASON_AFFINITY]);
        assert!(reasons(&affinity("a"), node(json!({}))).is_empty());
    }

    #[test]
    fn node_name_must_match() {
        assert_eq!(
            reasons(&pod(json!({"nodeName": "other"})), node(json!({}))),
            [REASON_NODE_NAME]
        );
    }

    #[test]
    fn resources_count_assigned_pods_and_list_every_shortage() {
        let mut info = NodeInfo::new(node(json!({})));
        let big = pod(json!({"containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}]}));
        assert!(check(&big, &info).is_ok());
        let mut placed = PodInfo::new(&big);
        placed.key = "default/other".into();
        info.add_pod(placed);
        assert_eq!(
            check(&big, &info).unwrap_err().reasons,
            ["Insufficient cpu"],
            "only 500m left"
        );
        assert_eq!(
            check(&big, &info).unwrap_err().code,
            Code::Unschedulable,
            "preempting the other pod would free it"
        );
        let more_than_the_node = pod(json!({"containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "3"}}}]}));
        assert_eq!(
            check(&more_than_the_node, &info).unwrap_err().code,
            Code::UnschedulableAndUnresolvable
        );
        let huge = pod(json!({"containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "3", "memory": "8Gi", "ephemeral-storage": "20Gi"}}}]}));
        assert_eq!(
            check(&huge, &info).unwrap_err().reasons,
            [
                "Insufficient cpu",
                "Insufficient memory",
                "Insufficient ephemeral-storage"
            ]
        );
    }

    #[test]
    fn extended_resources_fit_against_what_is_left() {
        let mut info = NodeInfo::new(node(json!({"status": {"allocatable": {
            "cpu": "2", "memory": "4Gi", "pods": "3", "scheduling.k8s.io/foo": "5"}}})));
        let two = pod(json!({"containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"scheduling.k8s.io/foo": "2"}, "limits": {"scheduling.k8s.io/foo": "2"}}}]}));
        for n in 0..2 {
            let mut p = PodInfo::new(&two);
            p.key = format!("default/p{n}");
            info.add_pod(p);
        }
        let rejection = check(&two, &info).unwrap_err();
        assert_eq!(rejection.reasons, ["Insufficient scheduling.k8s.io/foo"]);
        assert_eq!(rejection.code, Code::Unschedulable, "1 of 5 left");
        info.remove_pod("default/p0");
        assert!(check(&two, &info).is_ok());
        let elsewhere = NodeInfo::new(node(json!({})));
        assert_eq!(
            check(&two, &elsewhere).unwrap_err().code,
            Code::UnschedulableAndUnresolvable,
            "a node without the resource never fits"
        );
    }

    #[test]
    fn pod_count_is_a_resource() {
        let mut info = NodeInfo::new(node(json!({})));
        for n in 0..3 {
            let mut p = PodInfo::new(&pod(json!({})));
            p.key = format!("default/p{n}");
            info.add_pod(p);
        }
        assert_eq!(
            check(&pod(json!({})), &info).unwrap_err().reasons,
            [REASON_TOO_MANY_PODS]
        );
    }

    #[test]
    fn host_port_conflicts() {
        let with_port = pod(json!({"containers": [{"name": "c", "image": "x",
            "ports": [{"containerPort": 80, "hostPort": 8080}]}]}));
        let mut info = NodeInfo::new(node(json!({})));
        assert!(check(&with_port, &info).is_ok());
        let mut other = PodInfo::new(&with_port);
        other.key = "default/other".into();
        info.add_pod(other);
        let rejection = check(&with_port, &info).unwrap_err();
        assert_eq!(rejection.reasons, [REASON_PORTS]);
        assert_eq!(
            rejection.code,
            Code::Unschedulable,
            "preemption could free the port"
        );
    }
}
