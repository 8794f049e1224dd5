//! The Node authorizer: a kubelet (`system:node:<name>` in `system:nodes`) gets the `system:node`
//! rules, narrowed like upstream's graph authorizer to its own objects — writes to its own Node and
//! Lease only, and configmaps / secrets / PVCs / service-account tokens only in namespaces where a
//! pod bound to it runs. (Upstream narrows further to the objects those pods reference.)

use serde_json::Value;

use super::{bootstrap::node_rules, rules::rule_allows, RbacError};
use crate::auth::{Attributes, User};
use crate::registry::lifecycle::from_stored;
use crate::registry::resources::PODS;
use crate::storage::Store;

pub fn applies(user: &User) -> bool {
    user.name.starts_with("system:node:") && user.in_group("system:nodes")
}

pub async fn authorize(
    store: &Store,
    user: &User,
    attrs: &Attributes<'_>,
) -> Result<bool, RbacError> {
    let Some(node) = user.name.strip_prefix("system:node:") else {
        return Ok(false);
    };
    let Attributes::Resource {
        verb,
        group,
        resource,
        subresource: _,
        namespace,
        name,
    } = attrs
    else {
        return Ok(false);
    };
    if !node_rules().iter().any(|r| rule_allows(r, attrs)) {
        return Ok(false);
    }
    let writes = matches!(*verb, "create" | "update" | "patch" | "delete");
    let own = name.is_none_or(|n| n == node);
    match (*group, *resource) {
        ("", "nodes") => Ok(!writes || *verb == "create" || own),
        ("coordination.k8s.io", "leases") => {
            Ok(*namespace == Some("kube-node-lease") && (!writes || own))
        }
        ("", "configmaps" | "secrets" | "persistentvolumeclaims") | ("", "serviceaccounts") => {
            match namespace {
                Some(ns) => has_pod_in(store, node, ns).await,
                None => Ok(false),
            }
        }
        ("", "persistentvolumes") => Ok(*verb == "get"),
        // A kubelet registers CSI drivers in the CSINode named after it (NodeRestriction checks
        // the object's name on create, as name is unset then).
        ("storage.k8s.io", "csinodes") => Ok(!writes || *verb == "create" || own),
        _ => Ok(true),
    }
}

/// Does a pod bound to `node` run in namespace `ns`?
async fn has_pod_in(store: &Store, node: &str, ns: &str) -> Result<bool, RbacError> {
    let (items, _) = store.list(&PODS.key_prefix(Some(ns))).await?;
    Ok(items.iter().any(|i| {
        from_stored(&i.value, i.mod_revision)
            .ok()
            .is_some_and(|p: Value| p["spec"]["nodeName"] == node)
    }))
}
