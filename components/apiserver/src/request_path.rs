//! Request paths → what they address, like upstream's RequestInfoFactory. Pure; tested on strings.

/// A path under /api or /apis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiPath {
    /// `/api`
    CoreRoot,
    /// `/apis`
    GroupsRoot,
    /// `/apis/<group>`
    Group(String),
    /// `/api/v1` or `/apis/<group>/<version>`
    GroupVersion {
        group: String,
        version: String,
    },
    Resource(ResourcePath),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// Subresources of a namespace itself (`/api/v1/namespaces/<name>/status`), not namespaced resources.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// `None` when the path is not an API path at all or has too many segments.
pub fn parse(path: &str) -> Option<ApiPath> {
    let parts: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api"] => return Some(ApiPath::CoreRoot),
        ["apis"] => return Some(ApiPath::GroupsRoot),
        ["apis", group] => return Some(ApiPath::Group(group.to_string())),
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    if rest.is_empty() {
        return Some(ApiPath::GroupVersion {
            group: group.into(),
            version: version.into(),
        });
    }
    let mut rest = rest;
    let mut namespace = None;
    if rest[0] == "namespaces" && rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
        namespace = Some(rest[1].to_string());
        rest = &rest[2..];
    }
    // Only a proxy subresource has a path of its own after it (`…/pods/p/proxy/some/path`).
    if rest.len() > 3 && rest[2] != "proxy" {
        return None;
    }
    Some(ApiPath::Resource(ResourcePath {
        group: group.into(),
        version: version.into(),
        namespace,
        resource: rest[0].to_string(),
        name: rest.get(1).map(|s| s.to_string()),
        subresource: rest.get(2).map(|s| s.to_string()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(
        group: &str,
        ns: Option<&str>,
        resource: &str,
        name: Option<&str>,
        sub: Option<&str>,
    ) -> ApiPath {
        ApiPath::Resource(ResourcePath {
            group: group.into(),
            version: "v1".into(),
            namespace: ns.map(Into::into),
            resource: resource.into(),
            name: name.map(Into::into),
            subresource: sub.map(Into::into),
        })
    }

    #[test]
    fn parses_like_request_info() {
        assert_eq!(parse("/api"), Some(ApiPath::CoreRoot));
        assert_eq!(
            parse("/apis/coordination.k8s.io"),
            Some(ApiPath::Group("coordination.k8s.io".into()))
        );
        assert_eq!(
            parse("/api/v1"),
            Some(ApiPath::GroupVersion {
                group: "".into(),
                version: "v1".into()
            })
        );
        assert_eq!(
            parse("/api/v1/pods"),
            Some(res("", None, "pods", None, None))
        );
        assert_eq!(
            parse("/api/v1/namespaces"),
            Some(res("", None, "namespaces", None, None))
        );
        assert_eq!(
            parse("/api/v1/namespaces/ns1"),
            Some(res("", None, "namespaces", Some("ns1"), None))
        );
        assert_eq!(
            parse("/api/v1/namespaces/ns1/status"),
            Some(res("", None, "namespaces", Some("ns1"), Some("status")))
        );
        assert_eq!(
            parse("/api/v1/namespaces/ns1/pods/p/status"),
            Some(res("", Some("ns1"), "pods", Some("p"), Some("status")))
        );
        assert_eq!(
            parse("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"),
            Some(res(
                "coordination.k8s.io",
                Some("kube-node-lease"),
                "leases",
                Some("n1"),
                None
            ))
        );
        assert_eq!(parse("/api/v1/namespaces/a/pods/p/status/x"), None);
        assert_eq!(
            parse("/api/v1/namespaces/a/pods/p/proxy/some/path"),
            Some(res("", Some("a"), "pods", Some("p"), Some("proxy")))
        );
        assert_eq!(parse("/foo"), None);
    }
}
