//! NodeRestriction: what a kubelet (`system:node:<name>` in `system:nodes`) may do to the objects the
//! Node authorizer already lets it reach — the checks that need the object itself: its own Node only
//! (no `node-restriction.kubernetes.io/` labels, no taint changes on update), mirror pods for itself
//! only, pod status / eviction / deletion only for pods bound to it, its own Lease in
//! kube-node-lease only. Pure: the caller passes the objects. Messages are upstream's.

use std::collections::BTreeSet;

use serde_json::Value;

/// Labels a node may not set or change on its own Node (they steer workloads to trusted nodes).
pub const RESTRICTED_LABEL_PREFIX: &str = "node-restriction.kubernetes.io/";
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The operation being admitted, with the objects it concerns.
#[derive(Debug, Clone, Copy)]
pub enum Op<'a> {
    Create(&'a Value),
    Update { old: &'a Value, new: &'a Value },
    Delete(&'a Value),
}

/// One request, as admission sees it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    /// `status`, `eviction`, or None for the main resource.
    pub subresource: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub op: Op<'a>,
}

/// The node a user acts as, if it is a node.
pub fn node_of(user: &crate::auth::User) -> Option<&str> {
    if !user.in_group("system:nodes") {
        return None;
    }
    user.name.strip_prefix("system:node:")
}

fn object<'a>(op: &Op<'a>) -> &'a Value {
    match op {
        Op::Create(o) | Op::Delete(o) => o,
        Op::Update { new, .. } => new,
    }
}

fn name(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or("")
}

fn node_name_of_pod(pod: &Value) -> &str {
    pod["spec"]["nodeName"].as_str().unwrap_or("")
}

/// Ok, or the reason the node may not do this (the caller wraps it in a 403).
pub fn admit(node: &str, req: &Request<'_>) -> Result<(), String> {
    match (req.group, req.resource) {
        ("", "nodes") => admit_node(node, req),
        ("", "pods") => admit_pod(node, req),
        ("", "persistentvolumes") => super::node_volumes::admit_pv(node, req),
        ("storage.k8s.io", "csinodes") => super::node_volumes::admit_csi_node(node, req),
        ("coordination.k8s.io", "leases") => {
            if req.namespace != Some(NODE_LEASE_NAMESPACE) {
                return Err(format!(
                    "can only access leases in the {NODE_LEASE_NAMESPACE:?} namespace"
                ));
            }
            if name(object(&req.op)) != node {
                return Err(
                    "can only access node lease with the same name as the requesting node".into(),
                );
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn restricted_labels(obj: &Value) -> BTreeSet<(String, String)> {
    obj["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(RESTRICTED_LABEL_PREFIX))
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
        .collect()
}

fn admit_node(node: &str, req: &Request<'_>) -> Result<(), String> {
    let target = name(object(&req.op));
    if target != node {
        return Err(format!(
            "node {node:?} is not allowed to modify node {target:?}"
        ));
    }
    match req.op {
        Op::Create(new) => {
            let set: Vec<String> = restricted_labels(new).into_iter().map(|(k, _)| k).collect();
            if !set.is_empty() {
                return Err(format!(
                    "node {node:?} is not allowed to set the following labels: {}",
                    set.join(", ")
                ));
            }
        }
        Op::Update { old, new } => {
            let (before, after) = (restricted_labels(old), restricted_labels(new));
            let changed: BTreeSet<&str> = before
                .symmetric_difference(&after)
                .map(|(k, _)| k.as_str())
                .collect();
            if !changed.is_empty() {
                let list: Vec<&str> = changed.into_iter().collect();
                return Err(format!(
                    "node {node:?} is not allowed to modify labels: {}",
                    list.join(", ")
                ));
            }
            let taints = |o: &Value| o["spec"]["taints"].as_array().cloned().unwrap_or_default();
            if taints(old) != taints(new) {
                return Err(format!("node {node:?} is not allowed to modify taints"));
            }
        }
        Op::Delete(_) => {}
    }
    Ok(())
}

fn admit_pod(node: &str, req: &Request<'_>) -> Result<(), String> {
    match (req.subresource, req.op) {
        (None, Op::Create(pod)) => {
            let mirror = pod["metadata"]["annotations"]
                .get(MIRROR_ANNOTATION)
                .is_some();
            if !mirror {
                return Err(format!(
                    "pod does not have {MIRROR_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"
                ));
            }
            if node_name_of_pod(pod) != node {
                return Err(format!(
                    "node {node:?} can only create pods with spec.nodeName set to itself"
                ));
            }
            let owners = pod["metadata"]["ownerReferences"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let own_node = |o: &Value| o["kind"] == "Node" && o["name"] == node;
            if owners.len() > 1 || owners.iter().any(|o| !own_node(o)) {
                return Err(format!(
                    "node {node:?} can only create pods with an owner reference set to itself"
                ));
            }
            Ok(())
        }
        (None, Op::Delete(pod)) => {
            if node_name_of_pod(pod) != node {
                return Err(format!(
                    "node {node:?} can only delete pods with spec.nodeName set to itself"
                ));
            }
            Ok(())
        }
        (None, Op::Update { .. }) => Err(format!(
            "unexpected operation \"UPDATE\", node {node:?} can only create and delete mirror pods"
        )),
        (Some("status"), Op::Update { old, .. }) => {
            if node_name_of_pod(old) != node {
                return Err(format!(
                    "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
                ));
            }
            Ok(())
        }
        (Some("eviction"), op) => {
            if node_name_of_pod(object(&op)) != node {
                return Err(format!(
                    "node {node:?} can only evict pods with spec.nodeName set to itself"
                ));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req<'a>(
        resource: &'a str,
        sub: Option<&'a str>,
        ns: Option<&'a str>,
        op: Op<'a>,
    ) -> Request<'a> {
        let group = if resource == "leases" {
            "coordination.k8s.io"
        } else {
            ""
        };
        Request {
            group,
            resource,
            subresource: sub,
            namespace: ns,
            op,
        }
    }

    #[test]
    fn a_node_modifies_only_its_own_node_and_not_restricted_labels_or_taints() {
        let n1 = json!({"metadata": {"name": "n1", "labels": {"a": "b"}}});
        let n2 = json!({"metadata": {"name": "n2"}});
        assert!(admit("n1", &req("nodes", None, None, Op::Create(&n1))).is_ok());
        assert_eq!(
            admit(
                "n1",
                &req("nodes", None, None, Op::Update { old: &n2, new: &n2 })
            )
            .unwrap_err(),
            "node \"n1\" is not allowed to modify node \"n2\""
        );
        let mut labelled = n1.clone();
        labelled["metadata"]["labels"]["node-restriction.kubernetes.io/trusted"] = json!("yes");
        assert_eq!(
            admit("n1", &req("nodes", None, None, Op::Create(&labelled))).unwrap_err(),
            "node \"n1\" is not allowed to set the following labels: node-restriction.kubernetes.io/trusted"
        );
        let e = admit(
            "n1",
            &req(
                "nodes",
                None,
                None,
                Op::Update {
                    old: &n1,
                    new: &labelled,
                },
            ),
        );
        assert_eq!(
            e.unwrap_err(),
            "node \"n1\" is not allowed to modify labels: node-restriction.kubernetes.io/trusted"
        );
        // Other labels are fine; removing a restricted one is a change too.
        let mut relabelled = n1.clone();
        relabelled["metadata"]["labels"]["x"] = json!("y");
        assert!(admit(
            "n1",
            &req(
                "nodes",
                None,
                None,
                Op::Update {
                    old: &n1,
                    new: &relabelled
                }
            )
        )
        .is_ok());
        assert!(admit(
            "n1",
            &req(
                "nodes",
                None,
                None,
                Op::Update {
                    old: &labelled,
                    new: &n1
                }
            )
        )
        .is_err());
        let mut tainted = n1.clone();
        tainted["spec"]["taints"] = json!([{"key": "k", "effect": "NoSchedule"}]);
        assert_eq!(
            admit(
                "n1",
                &req(
                    "nodes",
                    Some("status"),
                    None,
                    Op::Update {
                        old: &n1,
                        new: &tainted
                    }
                )
            )
            .unwrap_err(),
            "node \"n1\" is not allowed to modify taints"
        );
    }

    #[test]
    fn pods_mirror_pods_status_eviction_and_deletion() {
        let mirror = json!({"metadata": {"name": "etcd-n1",
            "annotations": {"kubernetes.io/config.mirror": "h"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u"}]},
            "spec": {"nodeName": "n1"}});
        assert!(admit(
            "n1",
            &req("pods", None, Some("kube-system"), Op::Create(&mirror))
        )
        .is_ok());
        let mut plain = mirror.clone();
        plain["metadata"]["annotations"] = json!({});
        assert_eq!(
            admit("n1", &req("pods", None, Some("default"), Op::Create(&plain))).unwrap_err(),
            "pod does not have \"kubernetes.io/config.mirror\" annotation, node \"n1\" can only create mirror pods"
        );
        let mut elsewhere = mirror.clone();
        elsewhere["spec"]["nodeName"] = json!("n2");
        assert_eq!(
            admit(
                "n1",
                &req("pods", None, Some("default"), Op::Create(&elsewhere))
            )
            .unwrap_err(),
            "node \"n1\" can only create pods with spec.nodeName set to itself"
        );
        assert!(admit("n1", &req("pods", None, None, Op::Delete(&mirror))).is_ok());
        assert_eq!(
            admit("n1", &req("pods", None, None, Op::Delete(&elsewhere))).unwrap_err(),
            "node \"n1\" can only delete pods with spec.nodeName set to itself"
        );
        let status = Op::Update {
            old: &elsewhere,
            new: &elsewhere,
        };
        assert_eq!(
            admit("n1", &req("pods", Some("status"), None, status)).unwrap_err(),
            "node \"n1\" can only update pod status for pods with spec.nodeName set to itself"
        );
        assert!(admit(
            "n1",
            &req(
                "pods",
                Some("status"),
                None,
                Op::Update {
                    old: &mirror,
                    new: &mirror
                }
            )
        )
        .is_ok());
        assert_eq!(
            admit(
                "n1",
                &req("pods", Some("eviction"), None, Op::Create(&elsewhere))
            )
            .unwrap_err(),
            "node \"n1\" can only evict pods with spec.nodeName set to itself"
        );
        assert!(admit(
            "n1",
            &req(
                "pods",
                None,
                None,
                Op::Update {
                    old: &mirror,
                    new: &mirror
                }
            )
        )
        .is_err());
    }

    #[test]
    fn leases_only_its_own_in_kube_node_lease() {
        let own = json!({"metadata": {"name": "n1"}});
        let other = json!({"metadata": {"name": "n2"}});
        assert!(admit(
            "n1",
            &req("leases", None, Some("kube-node-lease"), Op::Create(&own))
        )
        .is_ok());
        assert_eq!(
            admit(
                "n1",
                &req("leases", None, Some("kube-node-lease"), Op::Create(&other))
            )
            .unwrap_err(),
            "can only access node lease with the same name as the requesting node"
        );
        assert_eq!(
            admit(
                "n1",
                &req("leases", None, Some("default"), Op::Create(&own))
            )
            .unwrap_err(),
            "can only access leases in the \"kube-node-lease\" namespace"
        );
        // Everything else is the authorizer's business.
        let cm = json!({"metadata": {"name": "x"}});
        assert!(admit(
            "n1",
            &req("configmaps", None, Some("default"), Op::Create(&cm))
        )
        .is_ok());
    }
}
