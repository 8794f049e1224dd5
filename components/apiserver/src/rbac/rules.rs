//! RBAC rule and subject matching, as upstream's `rbac/validation` and `rbac.RuleAllows`: pure
//! functions over the JSON of PolicyRules and Subjects.

use serde_json::Value;

use crate::auth::{Attributes, User};

fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

fn has(list: &Value, want: &str) -> bool {
    strings(list).any(|s| s == "*" || s == want)
}

/// `pods`, `pods/status`, `*`, `*/scale`, as upstream's ResourceMatches.
fn resource_matches(list: &Value, resource: &str, subresource: Option<&str>) -> bool {
    let combined = match subresource {
        Some(s) => format!("{resource}/{s}"),
        None => resource.to_string(),
    };
    strings(list).any(|r| {
        r == "*" || r == combined || subresource.is_some_and(|s| r.strip_prefix("*/") == Some(s))
    })
}

/// `/healthz`, or a prefix ending in `*` (`/api/*`), or `*`.
fn url_matches(list: &Value, path: &str) -> bool {
    strings(list).any(|u| {
        u == "*"
            || u == path
            || u.strip_suffix('*')
                .is_some_and(|prefix| path.starts_with(prefix))
    })
}

/// Does one PolicyRule allow the request?
pub fn rule_allows(rule: &Value, attrs: &Attributes<'_>) -> bool {
    match attrs {
        Attributes::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
            ..
        } => {
            if !has(&rule["verbs"], verb)
                || !has(&rule["apiGroups"], group)
                || !resource_matches(&rule["resources"], resource, *subresource)
            {
                return false;
            }
            let names: Vec<&str> = strings(&rule["resourceNames"]).collect();
            names.is_empty() || name.is_some_and(|n| names.contains(&n))
        }
        Attributes::NonResource { verb, path } => {
            has(&rule["verbs"], verb) && url_matches(&rule["nonResourceURLs"], path)
        }
    }
}

/// Does a binding's subject name this user? `binding_ns` is a RoleBinding's namespace (the default
/// namespace of ServiceAccount subjects without one).
pub fn subject_matches(subject: &Value, user: &User, binding_ns: Option<&str>) -> bool {
    let name = subject["name"].as_str().unwrap_or("");
    match subject["kind"].as_str().unwrap_or("") {
        "User" => user.name == name,
        "Group" => user.in_group(name),
        "ServiceAccount" => {
            let ns = subject["namespace"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or(binding_ns)
                .unwrap_or("");
            user.name == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

/// Any subject of the binding names this user.
pub fn binding_applies(binding: &Value, user: &User) -> bool {
    let ns = binding["metadata"]["namespace"].as_str();
    binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| subject_matches(s, user, ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn res<'a>(
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        sub: Option<&'a str>,
        name: Option<&'a str>,
    ) -> Attributes<'a> {
        Attributes::Resource {
            verb,
            group,
            resource,
            subresource: sub,
            namespace: Some("default"),
            name,
        }
    }

    #[test]
    fn verbs_groups_resources_and_names() {
        let rule =
            json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "pods/log"]});
        assert!(rule_allows(&rule, &res("get", "", "pods", None, Some("p"))));
        assert!(rule_allows(
            &rule,
            &res("get", "", "pods", Some("log"), Some("p"))
        ));
        assert!(!rule_allows(
            &rule,
            &res("get", "", "pods", Some("exec"), Some("p"))
        ));
        assert!(!rule_allows(
            &rule,
            &res("delete", "", "pods", None, Some("p"))
        ));
        assert!(!rule_allows(&rule, &res("get", "apps", "pods", None, None)));
        let named = json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*/scale"], "resourceNames": ["web"]});
        assert!(rule_allows(
            &named,
            &res("update", "apps", "deployments", Some("scale"), Some("web"))
        ));
        assert!(!rule_allows(
            &named,
            &res("update", "apps", "deployments", Some("scale"), Some("db"))
        ));
        assert!(!rule_allows(
            &named,
            &res("update", "apps", "deployments", None, Some("web"))
        ));
        assert!(!rule_allows(
            &named,
            &res("list", "apps", "deployments", Some("scale"), None)
        ));
    }

    #[test]
    fn non_resource_urls_glob() {
        let rule = json!({"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/healthz"]});
        let get = |path| Attributes::NonResource { verb: "get", path };
        assert!(rule_allows(&rule, &get("/api/v1")));
        assert!(rule_allows(&rule, &get("/healthz")));
        assert!(!rule_allows(&rule, &get("/healthz/etcd")));
        assert!(!rule_allows(&rule, &get("/metrics")));
    }

    #[test]
    fn subjects_match_users_groups_and_service_accounts() {
        let user = User {
            name: "system:serviceaccount:kube-system:proxy".into(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:authenticated".into(),
            ],
        };
        let b = json!({"metadata": {"namespace": "kube-system"},
                       "subjects": [{"kind": "ServiceAccount", "name": "proxy"}]});
        assert!(binding_applies(&b, &user));
        let g = json!({"subjects": [{"kind": "Group", "name": "system:serviceaccounts"}]});
        assert!(binding_applies(&g, &user));
        let u = json!({"subjects": [{"kind": "User", "name": "bob"}]});
        assert!(!binding_applies(&u, &user));
    }
}
