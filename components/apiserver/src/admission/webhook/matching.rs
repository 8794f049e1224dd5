//! Which webhooks a request goes to: rules (operations, groups, versions, resources with `*`,
//! `pods/*`, `*/status`, scope), matchPolicy, namespaceSelector and objectSelector, as upstream's
//! `rules.Matcher`, `namespace.Matcher` and `object.Matcher`.

use serde_json::{Map, Value};

use super::hook::{Hook, Rule};
use super::request::Request;
use crate::cel::authz::AuthorizerVal;
use crate::cel::{Activation, Program};

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

/// `pods/status` → (`pods`, `status`); `pods` → (`pods`, ``).
fn split_resource(r: &str) -> (&str, &str) {
    r.split_once('/').unwrap_or((r, ""))
}

fn resource_matches(rule: &Rule, resource: &str, subresource: &str) -> bool {
    rule.resources.iter().any(|r| {
        let (res, sub) = split_resource(r);
        (res == "*" || res == resource) && (sub == "*" || sub == subresource)
    })
}

fn scope_matches(rule: &Rule, req: &Request) -> bool {
    match rule.scope.as_str() {
        "Cluster" => req.cluster_scoped,
        "Namespaced" => !req.cluster_scoped,
        _ => true,
    }
}

fn rule_matches(rule: &Rule, req: &Request, version: &str) -> bool {
    listed(&rule.operations, req.operation.as_str())
        && listed(&rule.api_groups, &req.group)
        && listed(&rule.api_versions, version)
        && resource_matches(rule, &req.resource, &req.subresource)
        && scope_matches(rule, req)
}

/// The version the webhook is called at, when one of its rules matches: the request's own, or
/// (matchPolicy Equivalent) another version the server serves the same group/resource at.
pub fn matching_version(hook: &Hook, req: &Request) -> Option<String> {
    if hook
        .rules
        .iter()
        .any(|r| rule_matches(r, req, &req.version))
    {
        return Some(req.version.clone());
    }
    if hook.exact {
        return None;
    }
    req.served_versions
        .iter()
        .filter(|v| **v != req.version)
        .find(|v| hook.rules.iter().any(|r| rule_matches(r, req, v)))
        .cloned()
}

/// A metav1.LabelSelector object against a label map; `{}` matches everything.
pub fn selector_matches(selector: &Value, labels: &Map<String, Value>) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let equal = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k).is_some() && label(k) == v.as_str());
    equal
        && selector["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|e| {
                let key = e["key"].as_str().unwrap_or("");
                let values: Vec<&str> = e["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                match e["operator"].as_str().unwrap_or("") {
                    "In" => label(key).is_some_and(|v| values.contains(&v)),
                    "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
                    "Exists" => label(key).is_some(),
                    "DoesNotExist" => label(key).is_none(),
                    _ => false,
                }
            })
}

fn is_empty_selector(selector: &Value) -> bool {
    selector["matchLabels"]
        .as_object()
        .is_none_or(Map::is_empty)
        && selector["matchExpressions"]
            .as_array()
            .is_none_or(Vec::is_empty)
}

fn labels_of(obj: &Value) -> Map<String, Value> {
    obj["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default()
}

/// objectSelector: the new or the old object's labels match (upstream's `object.Matcher`).
pub fn object_matches(hook: &Hook, req: &Request) -> bool {
    if is_empty_selector(&hook.object_selector) {
        return true;
    }
    [&req.object, &req.old_object]
        .into_iter()
        .flatten()
        .any(|o| selector_matches(&hook.object_selector, &labels_of(o)))
}

/// Whether the namespace's labels must be read for this hook: a non-empty namespaceSelector on a
/// namespaced object (cluster-scoped objects always match; Namespace objects use their own labels).
pub fn needs_namespace_labels(hook: &Hook, req: &Request) -> bool {
    !is_empty_selector(&hook.namespace_selector)
        && !req.cluster_scoped
        && !req.is_namespace_object()
}

/// namespaceSelector; `namespace_labels` is the request namespace's labels when
/// `needs_namespace_labels` said so.
pub fn namespace_matches(
    hook: &Hook,
    req: &Request,
    namespace_labels: Option<&Map<String, Value>>,
) -> bool {
    if is_empty_selector(&hook.namespace_selector) {
        return true;
    }
    if req.is_namespace_object() {
        // A Namespace is matched on its own labels (the old object's for a delete).
        let own = req.object.as_ref().or(req.old_object.as_ref());
        return own.is_some_and(|o| selector_matches(&hook.namespace_selector, &labels_of(o)));
    }
    if req.cluster_scoped {
        return true;
    }
    namespace_labels.is_some_and(|l| selector_matches(&hook.namespace_selector, l))
}

/// matchConditions, CEL over `object`, `oldObject`, `request` (the AdmissionRequest) and, when
/// given, `authorizer` (the caller answers its checks: `access::evaluate_with_authorizer`):
/// `Ok(true)` when all hold. A false condition wins over another's error, as upstream; an error
/// otherwise is the caller's to weigh against failurePolicy.
pub fn conditions_match(
    hook: &Hook,
    req: &Request,
    version: &str,
    authorizer: Option<AuthorizerVal>,
) -> Result<bool, String> {
    if hook.match_conditions.is_empty() {
        return Ok(true);
    }
    let request = req.review("", version)["request"].take();
    let activation = Activation::new(
        vec![
            ("object".into(), request["object"].clone()),
            ("oldObject".into(), request["oldObject"].clone()),
            ("request".into(), request),
        ],
        authorizer,
        Vec::new(),
    );
    let mut error = None;
    for (name, expression) in &hook.match_conditions {
        let result = Program::compile(expression).and_then(|p| activation.eval(&p));
        match result {
            Ok(Value::Bool(true)) => {}
            Ok(Value::Bool(false)) => return Ok(false),
            Ok(other) => {
                error.get_or_insert(format!(
                    "matchCondition {name:?}: expression must evaluate to bool, got {other}"
                ));
            }
            Err(e) => {
                error.get_or_insert(format!("matchCondition {name:?}: {e}"));
            }
        }
    }
    error.map_or(Ok(true), Err)
}

#[cfg(test)]
mod tests {
    use super::super::hook::Kind;
    use super::super::request::tests::configmap_create;
    use super::super::request::Operation;
    use super::*;
    use serde_json::json;

    fn hook(rules: Value) -> Hook {
        let cfg = json!({"metadata": {"name": "c"}, "webhooks": [{"name": "h.example.com",
            "clientConfig": {"url": "https://127.0.0.1/"}, "rules": rules,
            "namespaceSelector": {}, "objectSelector": {}}]});
        Hook::from_configuration(Kind::Validating, &cfg).remove(0)
    }

    fn rule(
        ops: &[&str],
        groups: &[&str],
        versions: &[&str],
        resources: &[&str],
        scope: &str,
    ) -> Value {
        json!([{"operations": ops, "apiGroups": groups, "apiVersions": versions,
                "resources": resources, "scope": scope}])
    }

    #[test]
    fn rules_match_operations_groups_versions_resources() {
        let req = configmap_create();
        let m = |r: Value| matching_version(&hook(r), &req).is_some();
        assert!(m(rule(&["CREATE"], &[""], &["v1"], &["configmaps"], "*")));
        assert!(m(rule(&["*"], &["*"], &["*"], &["*"], "*")));
        assert!(!m(rule(
            &["UPDATE", "DELETE"],
            &[""],
            &["v1"],
            &["configmaps"],
            "*"
        )));
        assert!(!m(rule(
            &["CREATE"],
            &["apps"],
            &["v1"],
            &["configmaps"],
            "*"
        )));
        assert!(!m(rule(&["CREATE"], &[""], &["v2"], &["configmaps"], "*")));
        assert!(!m(rule(&["CREATE"], &[""], &["v1"], &["secrets"], "*")));
        assert!(!m(rule(
            &["CREATE"],
            &[""],
            &["v1"],
            &["configmaps"],
            "Cluster"
        )));
        assert!(m(rule(
            &["CREATE"],
            &[""],
            &["v1"],
            &["configmaps"],
            "Namespaced"
        )));
    }

    #[test]
    fn subresource_wildcards() {
        let mut req = configmap_create();
        req.resource = "pods".into();
        req.subresource = "status".into();
        req.operation = Operation::Update;
        let m = |res: &[&str]| {
            matching_version(&hook(rule(&["*"], &["*"], &["*"], res, "*")), &req).is_some()
        };
        assert!(!m(&["*"]), "`*` is main resources only");
        assert!(!m(&["pods"]));
        assert!(m(&["pods/*"]));
        assert!(m(&["*/status"]));
        assert!(m(&["*/*"]));
        assert!(!m(&["pods/scale"]));
        req.subresource.clear();
        let m = |res: &[&str]| {
            matching_version(&hook(rule(&["*"], &["*"], &["*"], res, "*")), &req).is_some()
        };
        assert!(m(&["*"]) && m(&["pods"]) && !m(&["*/status"]));
    }

    #[test]
    fn equivalent_matches_another_served_version_exact_does_not() {
        let mut req = configmap_create();
        req.group = "example.com".into();
        req.resource = "widgets".into();
        req.served_versions = vec!["v1".into(), "v1beta1".into()];
        let mut h = hook(rule(
            &["CREATE"],
            &["example.com"],
            &["v1beta1"],
            &["widgets"],
            "*",
        ));
        assert_eq!(matching_version(&h, &req).as_deref(), Some("v1beta1"));
        h.exact = true;
        assert_eq!(matching_version(&h, &req), None);
    }

    #[test]
    fn match_conditions_in_cel() {
        let mut h = hook(rule(&["*"], &["*"], &["*"], &["*"], "*"));
        let req = configmap_create();
        let cond = |list: &[(&str, &str)]| {
            list.iter()
                .map(|(n, e)| (n.to_string(), e.to_string()))
                .collect()
        };
        h.match_conditions = cond(&[
            ("named", "object.metadata.name == 'cm'"),
            ("user", "request.userInfo.username == 'alice'"),
        ]);
        assert_eq!(conditions_match(&h, &req, "v1", None), Ok(true));
        h.match_conditions = cond(&[("create", "request.operation == 'UPDATE'")]);
        assert_eq!(conditions_match(&h, &req, "v1", None), Ok(false));
        h.match_conditions = cond(&[("broken", "object.nope.deeper"), ("no", "false")]);
        assert_eq!(
            conditions_match(&h, &req, "v1", None),
            Ok(false),
            "false wins over an error"
        );
        h.match_conditions = cond(&[("broken", "object.nope.deeper")]);
        assert!(conditions_match(&h, &req, "v1", None)
            .unwrap_err()
            .starts_with("matchCondition \"broken\": "));
        h.match_conditions = cond(&[("old", "oldObject == null")]);
        assert_eq!(conditions_match(&h, &req, "v1", None), Ok(true));
    }

    /// The server's authorizer as a test double: allows the verbs listed, records every query.
    struct RecordingChecker {
        allow: &'static [&'static str],
        asked: std::sync::Mutex<Vec<crate::cel::authz::AccessQuery>>,
    }

    impl super::super::access::AccessChecker for RecordingChecker {
        fn allowed<'a>(
            &'a self,
            query: &'a crate::cel::authz::AccessQuery,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<bool, String>> + Send + 'a>>
        {
            self.asked.lock().unwrap().push(query.clone());
            let allowed = self.allow.contains(&query.verb.as_str());
            Box::pin(async move { Ok(allowed) })
        }
    }

    #[tokio::test]
    async fn match_conditions_ask_the_authorizer_once_per_check() {
        use super::super::access::evaluate_with_authorizer;
        use crate::cel::authz::AccessTarget;
        let mut h = hook(rule(&["*"], &["*"], &["*"], &["*"], "*"));
        h.match_conditions = vec![
            ("named".into(), "object.metadata.name == 'cm'".into()),
            (
                "may-list-pods".into(),
                "authorizer.group('').resource('pods').namespace('default').check('list').allowed()"
                    .into(),
            ),
        ];
        let req = configmap_create();
        let run = |allow| {
            let checker = RecordingChecker {
                allow,
                asked: Default::default(),
            };
            let (h, req) = (&h, &req);
            async move {
                let verdict = evaluate_with_authorizer(req, &checker, |a| {
                    conditions_match(h, req, "v1", Some(a))
                })
                .await;
                (verdict, checker.asked.into_inner().unwrap())
            }
        };
        let (verdict, asked) = run(&["list"]).await;
        assert_eq!(verdict, Ok(true));
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert_eq!(asked[0].user, "alice");
        assert_eq!(asked[0].verb, "list");
        assert_eq!(
            asked[0].target,
            AccessTarget::Resource {
                group: "".into(),
                resource: "pods".into(),
                subresource: "".into(),
                namespace: "default".into(),
                name: "".into(),
            }
        );
        let (verdict, asked) = run(&[]).await;
        assert_eq!(verdict, Ok(false), "a denied check is a false condition");
        assert_eq!(asked.len(), 1);
        // Unbound, `authorizer` is an error for failurePolicy to weigh, never a silent match.
        assert!(conditions_match(&h, &req, "v1", None).is_err());
    }

    #[test]
    fn label_selectors() {
        let labels = json!({"app": "web", "tier": "fe"});
        let labels = labels.as_object().unwrap();
        let m = |s: Value| selector_matches(&s, labels);
        assert!(m(json!({})));
        assert!(m(json!({"matchLabels": {"app": "web"}})));
        assert!(!m(json!({"matchLabels": {"app": "db"}})));
        assert!(m(
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "db"]}]})
        ));
        assert!(!m(
            json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]})
        ));
        assert!(m(
            json!({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["web"]}]})
        ));
        assert!(m(
            json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]})
        ));
        assert!(m(
            json!({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]})
        ));
        assert!(!m(
            json!({"matchExpressions": [{"key": "x", "operator": "Exists"}]})
        ));
    }

    #[test]
    fn object_selector_uses_old_or_new_object() {
        let mut h = hook(rule(&["*"], &["*"], &["*"], &["*"], "*"));
        h.object_selector = json!({"matchLabels": {"skip": "no"}});
        let mut req = configmap_create();
        assert!(!object_matches(&h, &req));
        req.old_object = Some(json!({"metadata": {"labels": {"skip": "no"}}}));
        assert!(object_matches(&h, &req));
        h.object_selector = json!({});
        assert!(object_matches(&h, &configmap_create()));
    }

    #[test]
    fn namespace_selector() {
        let mut h = hook(rule(&["*"], &["*"], &["*"], &["*"], "*"));
        h.namespace_selector = json!({"matchLabels": {"env": "prod"}});
        let req = configmap_create();
        assert!(needs_namespace_labels(&h, &req));
        let prod = json!({"env": "prod"});
        assert!(namespace_matches(&h, &req, prod.as_object()));
        assert!(!namespace_matches(&h, &req, Some(&Map::new())));
        // Cluster-scoped objects always match.
        let mut node = configmap_create();
        node.cluster_scoped = true;
        node.namespace.clear();
        assert!(!needs_namespace_labels(&h, &node));
        assert!(namespace_matches(&h, &node, None));
        // A Namespace matches on its own labels.
        let mut ns = configmap_create();
        ns.resource = "namespaces".into();
        ns.cluster_scoped = true;
        ns.object = Some(json!({"metadata": {"name": "p", "labels": {"env": "prod"}}}));
        assert!(!needs_namespace_labels(&h, &ns));
        assert!(namespace_matches(&h, &ns, None));
        ns.object = Some(json!({"metadata": {"name": "p"}}));
        assert!(!namespace_matches(&h, &ns, None));
    }
}
