//! Authentication (x509 client certificates: CN = user, O = groups, as kubeadm issues them) and the
//! skeleton's authorizer: system:masters may do everything, system:nodes what a kubelet needs, everyone
//! else is denied. Full RBAC + the Node authorizer replace `authorize` later; callers stay the same.

use x509_parser::prelude::{FromDer, X509Certificate};

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("client certificate could not be parsed: {0}")]
    BadCertificate(String),
    #[error("client certificate has no common name")]
    NoCommonName,
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// No credentials presented.
    Anonymous,
    User(User),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl Identity {
    pub fn name(&self) -> &str {
        match self {
            Identity::Anonymous => "system:anonymous",
            Identity::User(u) => &u.name,
        }
    }
}

impl User {
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// Reads user and groups from a (chain-verified) client certificate.
pub fn user_from_certificate(der: &[u8]) -> Result<User, AuthError> {
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|e| AuthError::BadCertificate(e.to_string()))?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .ok_or(AuthError::NoCommonName)?
        .to_string();
    let mut groups: Vec<String> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    groups.push("system:authenticated".into());
    Ok(User { name, groups })
}

/// What a request wants to do, as upstream's authorizer attributes.
#[derive(Debug, Clone)]
pub enum Attributes<'a> {
    Resource {
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        subresource: Option<&'a str>,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    },
    NonResource {
        verb: &'a str,
        path: &'a str,
    },
}

/// Paths anyone may read, logged in or not (upstream's system:public-info-viewer).
pub fn is_public_path(path: &str) -> bool {
    matches!(path, "/healthz" | "/livez" | "/readyz" | "/version")
        || path.starts_with("/healthz/")
        || path.starts_with("/livez/")
        || path.starts_with("/readyz/")
}

/// Paths every authenticated user may read (upstream's system:discovery and system:basic-user).
fn is_discovery_path(path: &str) -> bool {
    path == "/api"
        || path.starts_with("/api/")
        || path == "/apis"
        || path.starts_with("/apis/")
        || path.starts_with("/openapi/")
        || is_public_path(path)
}

const KUBELET_RULES: &[(&str, &str, &[&str])] = &[
    // (group, resource[/subresource], verbs)
    (
        "",
        "nodes",
        &[
            "get", "list", "watch", "create", "update", "patch", "delete",
        ],
    ),
    ("", "nodes/status", &["get", "update", "patch"]),
    ("", "pods", &["get", "list", "watch", "create", "delete"]),
    ("", "pods/status", &["get", "update", "patch"]),
    ("", "events", &["create", "update", "patch"]),
];

/// The decision; `Err` carries nothing: the caller renders the Forbidden status from the attributes.
pub fn authorize(identity: &Identity, attrs: &Attributes<'_>) -> bool {
    let Identity::User(user) = identity else {
        return matches!(attrs, Attributes::NonResource { verb: "get", path } if is_public_path(path));
    };
    if user.in_group("system:masters") {
        return true;
    }
    match attrs {
        Attributes::NonResource { verb, path } => *verb == "get" && is_discovery_path(path),
        Attributes::Resource {
            verb,
            group,
            resource,
            subresource,
            namespace,
            name,
        } => {
            let Some(node) = user.name.strip_prefix("system:node:") else {
                return false;
            };
            if !user.in_group("system:nodes") {
                return false;
            }
            // NodeRestriction, reduced: a kubelet changes only its own Node and Lease.
            let writes = matches!(*verb, "update" | "patch" | "delete");
            let own = name.is_none_or(|n| n == node);
            let full = match subresource {
                Some(s) => format!("{resource}/{s}"),
                None => resource.to_string(),
            };
            if *group == "coordination.k8s.io" && full == "leases" {
                return *namespace == Some("kube-node-lease") && (!writes || own);
            }
            if group.is_empty() && resource == &"nodes" && writes && !own {
                return false;
            }
            KUBELET_RULES
                .iter()
                .any(|(g, r, verbs)| g == group && *r == full && verbs.contains(verb))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> Identity {
        Identity::User(User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        })
    }

    fn res<'a>(
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        ns: Option<&'a str>,
    ) -> Attributes<'a> {
        Attributes::Resource {
            verb,
            group,
            resource,
            subresource: None,
            namespace: ns,
            name: None,
        }
    }

    #[test]
    fn masters_may_do_anything() {
        let admin = user("kubernetes-admin", &["system:masters"]);
        assert!(authorize(&admin, &res("delete", "", "secrets", Some("x"))));
    }

    #[test]
    fn nodes_get_kubelet_rights_only() {
        let node = user("system:node:n1", &["system:nodes"]);
        assert!(authorize(&node, &res("watch", "", "pods", None)));
        assert!(authorize(
            &node,
            &res(
                "update",
                "coordination.k8s.io",
                "leases",
                Some("kube-node-lease")
            )
        ));
        assert!(!authorize(
            &node,
            &res("update", "coordination.k8s.io", "leases", Some("default"))
        ));
        assert!(!authorize(
            &node,
            &res("list", "", "secrets", Some("default"))
        ));
        assert!(!authorize(&node, &res("delete", "", "namespaces", None)));
    }

    #[test]
    fn nodes_change_only_their_own_node_and_lease() {
        let node = user("system:node:n1", &["system:nodes"]);
        let with_name = |verb, group, resource, ns, name| Attributes::Resource {
            verb,
            group,
            resource,
            subresource: None,
            namespace: ns,
            name: Some(name),
        };
        assert!(authorize(
            &node,
            &with_name("patch", "", "nodes", None, "n1")
        ));
        assert!(!authorize(
            &node,
            &with_name("patch", "", "nodes", None, "n2")
        ));
        assert!(authorize(&node, &with_name("get", "", "nodes", None, "n2")));
        let lease = |name| {
            with_name(
                "update",
                "coordination.k8s.io",
                "leases",
                Some("kube-node-lease"),
                name,
            )
        };
        assert!(authorize(&node, &lease("n1")));
        assert!(!authorize(&node, &lease("n2")));
    }

    #[test]
    fn anonymous_sees_only_public_paths() {
        let anon = Identity::Anonymous;
        assert!(authorize(
            &anon,
            &Attributes::NonResource {
                verb: "get",
                path: "/readyz"
            }
        ));
        assert!(!authorize(
            &anon,
            &Attributes::NonResource {
                verb: "get",
                path: "/api"
            }
        ));
        assert!(!authorize(&anon, &res("get", "", "pods", None)));
    }

    #[test]
    fn other_users_are_denied_resources_but_see_discovery() {
        let bob = user("bob", &["dev"]);
        assert!(!authorize(&bob, &res("list", "", "pods", Some("default"))));
        assert!(authorize(
            &bob,
            &Attributes::NonResource {
                verb: "get",
                path: "/apis"
            }
        ));
    }
}
