//! NodeRestriction for PersistentVolumes (kiln's addition for its node-local provisioner): RBAC
//! lets every node create and delete PVs (`system:kiln:local-path-provisioner`); this narrows it to
//! local-path volumes of the node itself — pinned by nodeAffinity to exactly
//! `kubernetes.io/hostname In [<node>]` and annotated `pv.kubernetes.io/provisioned-by:
//! kiln.io/local-path` — so a compromised node cannot point a volume at another node's disk or
//! remove volumes it does not serve. Pure.

use serde_json::Value;

use super::node_restriction::{Op, Request};

pub const PROVISIONER: &str = "kiln.io/local-path";
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The node a PV's nodeAffinity pins it to, if it names exactly one node by hostname and nothing else.
pub fn pinned_node(pv: &Value) -> Option<&str> {
    let terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"].as_array()?;
    let [term] = terms.as_slice() else {
        return None;
    };
    if term["matchFields"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
    {
        return None;
    }
    let [expr] = term["matchExpressions"].as_array()?.as_slice() else {
        return None;
    };
    if expr["key"] != HOSTNAME_LABEL || expr["operator"] != "In" {
        return None;
    }
    match expr["values"].as_array()?.as_slice() {
        [only] => only.as_str(),
        _ => None,
    }
}

fn own_local_path(node: &str, pv: &Value) -> bool {
    pinned_node(pv) == Some(node) && pv["metadata"]["annotations"][PROVISIONED_BY] == PROVISIONER
}

/// Ok, or the reason the node may not write this PV.
pub fn admit_pv(node: &str, req: &Request<'_>) -> Result<(), String> {
    let (verb, pv) = match req.op {
        Op::Create(pv) => ("create", pv),
        Op::Delete(pv) => ("delete", pv),
        Op::Update { .. } => {
            return Err(format!(
                "node {node:?} is not allowed to update persistentvolumes"
            ))
        }
    };
    if own_local_path(node, pv) {
        return Ok(());
    }
    Err(format!(
        "node {node:?} can only {verb} persistentvolumes provisioned by {PROVISIONER:?} with node affinity {HOSTNAME_LABEL} In [{node}]"
    ))
}

/// Upstream's CSINode rule: a node writes only the CSINode named after it.
pub fn admit_csi_node(node: &str, req: &Request<'_>) -> Result<(), String> {
    let obj = match req.op {
        Op::Create(o) | Op::Delete(o) => o,
        Op::Update { new, .. } => new,
    };
    if obj["metadata"]["name"].as_str() == Some(node) {
        Ok(())
    } else {
        Err("can only access CSINode with the same name as the requesting node".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(nodes: &[&str], provisioner: &str) -> Value {
        json!({"metadata": {"name": "pvc-1", "annotations": {PROVISIONED_BY: provisioner}},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOSTNAME_LABEL, "operator": "In", "values": nodes}]}]}}}})
    }

    fn req(op: Op<'_>) -> Request<'_> {
        Request {
            group: "",
            resource: "persistentvolumes",
            subresource: None,
            namespace: None,
            op,
        }
    }

    #[test]
    fn a_node_writes_only_its_own_local_path_volumes() {
        let own = pv(&["host1"], PROVISIONER);
        assert_eq!(admit_pv("host1", &req(Op::Create(&own))), Ok(()));
        assert_eq!(admit_pv("host1", &req(Op::Delete(&own))), Ok(()));
        let err = admit_pv("host2", &req(Op::Create(&own))).unwrap_err();
        assert_eq!(err, "node \"host2\" can only create persistentvolumes provisioned by \"kiln.io/local-path\" with node affinity kubernetes.io/hostname In [host2]");
        assert!(admit_pv("host2", &req(Op::Delete(&own))).is_err());
        for bad in [
            pv(&["host1", "host2"], PROVISIONER),
            pv(&["host1"], "example.com/nfs"),
            json!({"metadata": {"annotations": {PROVISIONED_BY: PROVISIONER}}, "spec": {}}),
        ] {
            assert!(admit_pv("host1", &req(Op::Create(&bad))).is_err(), "{bad}");
        }
        let mut two_terms = own.clone();
        let term = two_terms["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0].clone();
        two_terms["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"] = json!([term, {}]);
        assert!(admit_pv("host1", &req(Op::Create(&two_terms))).is_err());
        assert!(admit_pv(
            "host1",
            &req(Op::Update {
                old: &own,
                new: &own
            })
        )
        .is_err());
    }

    #[test]
    fn a_node_writes_only_its_own_csinode() {
        let own = json!({"metadata": {"name": "host1"}});
        let r = |op| Request {
            group: "storage.k8s.io",
            resource: "csinodes",
            subresource: None,
            namespace: None,
            op,
        };
        assert_eq!(admit_csi_node("host1", &r(Op::Create(&own))), Ok(()));
        assert!(admit_csi_node("host2", &r(Op::Create(&own))).is_err());
    }
}
