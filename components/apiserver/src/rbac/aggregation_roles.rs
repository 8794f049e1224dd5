//! The bootstrap roles extension API servers are bound to, as upstream's policy has them:
//! `system:auth-delegator` (delegated authentication and authorization: TokenReviews and
//! SubjectAccessReviews) and, in kube-system, `extension-apiserver-authentication-reader` (the
//! ConfigMap that names the CAs and request headers to trust, and nothing else). An extension
//! server's manifest binds its service account to both (the Aggregator conformance entry does), so
//! without them the server could neither read whom to trust nor ask who may do what.

use serde_json::{json, Value};

use super::bootstrap::{role, rule, READ};
use crate::aggregator::authentication_configmap;

/// Namespace of the namespaced bootstrap roles.
pub const KUBE_SYSTEM: &str = "kube-system";

pub fn cluster_roles() -> Vec<Value> {
    vec![role(
        "system:auth-delegator",
        vec![
            rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
            rule(
                &["authorization.k8s.io"],
                &["subjectaccessreviews"],
                &["create"],
            ),
        ],
    )]
}

/// Roles in kube-system (upstream's NamespaceRoles for kube-system).
pub fn namespaced_roles() -> Vec<Value> {
    let mut r = role(
        "extension-apiserver-authentication-reader",
        vec![json!({
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [authentication_configmap::NAME],
            "verbs": READ,
        })],
    );
    r["kind"] = json!("Role");
    r["metadata"]["namespace"] = json!(KUBE_SYSTEM);
    vec![r]
}

/// RoleBindings in kube-system: the control-plane components read the same ConfigMap (upstream's
/// `system::extension-apiserver-authentication-reader`).
pub fn namespaced_role_bindings() -> Vec<Value> {
    vec![json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": "system::extension-apiserver-authentication-reader",
            "namespace": KUBE_SYSTEM,
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
            "name": "extension-apiserver-authentication-reader"},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:kube-controller-manager"},
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:kube-scheduler"},
        ],
    })]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_role_reads_only_the_authentication_configmap() {
        let roles = namespaced_roles();
        assert_eq!(roles[0]["kind"], "Role");
        assert_eq!(roles[0]["metadata"]["namespace"], "kube-system");
        let rule = &roles[0]["rules"][0];
        assert_eq!(
            rule["resourceNames"],
            json!(["extension-apiserver-authentication"])
        );
        assert_eq!(rule["verbs"], json!(["get", "list", "watch"]));
        assert_eq!(
            namespaced_role_bindings()[0]["roleRef"]["name"],
            roles[0]["metadata"]["name"]
        );
    }

    #[test]
    fn the_auth_delegator_may_create_both_reviews() {
        let r = &cluster_roles()[0];
        assert_eq!(r["metadata"]["name"], "system:auth-delegator");
        assert_eq!(r["rules"][0]["resources"], json!(["tokenreviews"]));
        assert_eq!(r["rules"][1]["resources"], json!(["subjectaccessreviews"]));
    }
}
