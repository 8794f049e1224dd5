//! `--audit-policy-file`: upstream's `audit.k8s.io/v1` Policy, validated as
//! `pkg/apis/audit/validation` does and evaluated as `pkg/audit/policy/checker.go`: the rules in
//! order, the first that matches sets the level; no match is level None.

use serde::Deserialize;

/// How much of a request is recorded. Ordered: None < Metadata < Request < RequestResponse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

const LEVELS: &[(&str, Level)] = &[
    ("None", Level::None),
    ("Metadata", Level::Metadata),
    ("Request", Level::Request),
    ("RequestResponse", Level::RequestResponse),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Stage {
    RequestReceived,
    ResponseStarted,
    ResponseComplete,
    Panic,
}

const STAGES: &[(&str, Stage)] = &[
    ("RequestReceived", Stage::RequestReceived),
    ("ResponseStarted", Stage::ResponseStarted),
    ("ResponseComplete", Stage::ResponseComplete),
    ("Panic", Stage::Panic),
];

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("failed to read file path {path:?}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{message}: from file {path}")]
    Invalid { path: String, message: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PolicyFile {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<serde_json::Value>,
    #[serde(default)]
    rules: Vec<RuleFile>,
    #[serde(default)]
    omit_stages: Vec<String>,
    #[serde(default)]
    omit_managed_fields: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RuleFile {
    #[serde(default)]
    level: String,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<String>,
    omit_managed_fields: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GroupResources {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub level: Level,
    pub users: Vec<String>,
    pub user_groups: Vec<String>,
    pub verbs: Vec<String>,
    pub resources: Vec<GroupResources>,
    pub namespaces: Vec<String>,
    pub non_resource_urls: Vec<String>,
    /// The rule's stages with the policy's added (upstream unions them when it loads a policy).
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: Option<bool>,
}

#[derive(Debug, Clone)]
pub struct Policy {
    pub rules: Vec<Rule>,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

/// What the policy decided for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub level: Level,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

/// The request as the policy sees it (upstream's authorizer.Attributes).
#[derive(Debug, Clone, Default)]
pub struct Attributes<'a> {
    /// None: not authenticated (the failed-authentication audit).
    pub user: Option<(&'a str, &'a [String])>,
    pub verb: &'a str,
    pub resource: Option<ResourceAttributes<'a>>,
    /// The URL path (non-resource requests).
    pub path: &'a str,
}

#[derive(Debug, Clone, Default)]
pub struct ResourceAttributes<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl Policy {
    pub fn load(path: &str) -> Result<Policy, PolicyError> {
        let data = std::fs::read(path).map_err(|source| PolicyError::Read {
            path: path.to_string(),
            source,
        })?;
        Policy::parse(&data).map_err(|message| PolicyError::Invalid {
            path: path.to_string(),
            message,
        })
    }

    /// Decodes and validates a policy; the error is upstream's text (field path first).
    pub fn parse(data: &[u8]) -> Result<Policy, String> {
        let doc = serde_norway::Deserializer::from_slice(data);
        let file: PolicyFile = serde_path_to_error::deserialize(doc).map_err(|e| {
            format!(
                "failed decoding: {}",
                crate::encryption::config::yaml_error(e)
            )
        })?;
        if file.api_version != "audit.k8s.io/v1" || file.kind != "Policy" {
            return Err(format!(
                "unknown group version field {}, Kind={} in policy",
                file.api_version, file.kind
            ));
        }
        let mut errors = Vec::new();
        let omit_stages = stages(&file.omit_stages, "omitStages", &mut errors);
        let mut rules = Vec::new();
        for (i, r) in file.rules.iter().enumerate() {
            let at = format!("rules[{i}]");
            let level = match LEVELS.iter().find(|(n, _)| *n == r.level) {
                Some((_, l)) => *l,
                None => {
                    errors.push(format!(
                        "{at}.level: Unsupported value: {:?}: supported values: \"None\", \"Metadata\", \"Request\", \"RequestResponse\"",
                        r.level
                    ));
                    Level::None
                }
            };
            if !r.non_resource_urls.is_empty()
                && (!r.resources.is_empty() || !r.namespaces.is_empty())
            {
                errors.push(format!(
                    "{at}.nonResourceURLs: Invalid value: {}: rules cannot apply to both regular resources and non-resource URLs",
                    go_list(&r.non_resource_urls)
                ));
            }
            for (j, url) in r.non_resource_urls.iter().enumerate() {
                if url == "*" {
                    continue;
                }
                if !url.starts_with('/') {
                    errors.push(format!("{at}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource URL rules must begin with a '/' character"));
                }
                if url.len() > 1 && url[..url.len() - 1].contains('*') {
                    errors.push(format!("{at}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource URL wildcards '*' must be the final character of the rule"));
                }
            }
            for (j, gr) in r.resources.iter().enumerate() {
                if !gr.group.is_empty() && !is_dns1123_subdomain(&gr.group) {
                    errors.push(format!("{at}.resources[{j}].group: Invalid value: {:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character", gr.group));
                }
                if !gr.resource_names.is_empty() && gr.resources.is_empty() {
                    errors.push(format!(
                        "{at}.resources[{j}].resourceNames: Invalid value: {}: using resourceNames requires at least one resource",
                        go_list(&gr.resource_names)
                    ));
                }
            }
            let mut omit = stages(&r.omit_stages, &format!("{at}.omitStages"), &mut errors);
            for s in &omit_stages {
                if !omit.contains(s) {
                    omit.push(*s);
                }
            }
            rules.push(Rule {
                level,
                users: r.users.clone(),
                user_groups: r.user_groups.clone(),
                verbs: r.verbs.clone(),
                resources: r.resources.clone(),
                namespaces: r.namespaces.clone(),
                non_resource_urls: r.non_resource_urls.clone(),
                omit_stages: omit,
                omit_managed_fields: r.omit_managed_fields,
            });
        }
        if !errors.is_empty() {
            return Err(if errors.len() == 1 {
                errors.remove(0)
            } else {
                format!("[{}]", errors.join(", "))
            });
        }
        if rules.is_empty() {
            return Err("loaded illegal policy with 0 rules".into());
        }
        Ok(Policy {
            rules,
            omit_stages,
            omit_managed_fields: file.omit_managed_fields,
        })
    }

    pub fn evaluate(&self, attrs: &Attributes) -> Decision {
        match self.rules.iter().find(|r| rule_matches(r, attrs)) {
            Some(rule) => Decision {
                level: rule.level,
                omit_stages: rule.omit_stages.clone(),
                omit_managed_fields: rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
            },
            None => Decision {
                level: Level::None,
                omit_stages: self.omit_stages.clone(),
                omit_managed_fields: self.omit_managed_fields,
            },
        }
    }
}

fn go_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

fn stages(names: &[String], at: &str, errors: &mut Vec<String>) -> Vec<Stage> {
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        match STAGES.iter().find(|(n, _)| n == name) {
            Some((_, s)) => out.push(*s),
            None => errors.push(format!(
                "{at}[{i}]: Invalid value: {name:?}: allowed stages are RequestReceived,ResponseStarted,ResponseComplete,Panic"
            )),
        }
    }
    out
}

fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn rule_matches(r: &Rule, attrs: &Attributes) -> bool {
    if !r.users.is_empty() {
        match attrs.user {
            Some((name, _)) if r.users.iter().any(|u| u == name) => {}
            _ => return false,
        }
    }
    if !r.user_groups.is_empty() {
        match attrs.user {
            Some((_, groups)) if groups.iter().any(|g| r.user_groups.contains(g)) => {}
            _ => return false,
        }
    }
    if !r.verbs.is_empty() && !r.verbs.iter().any(|v| v == attrs.verb) {
        return false;
    }
    if !r.namespaces.is_empty() || !r.resources.is_empty() {
        return matches_resource(r, attrs);
    }
    if !r.non_resource_urls.is_empty() {
        return attrs.resource.is_none()
            && r.non_resource_urls
                .iter()
                .any(|spec| path_matches(attrs.path, spec));
    }
    true
}

fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
}

fn matches_resource(r: &Rule, attrs: &Attributes) -> bool {
    let Some(res) = &attrs.resource else {
        return false;
    };
    // Cluster-scoped resources have the empty namespace.
    if !r.namespaces.is_empty() && !r.namespaces.iter().any(|n| n == res.namespace) {
        return false;
    }
    if r.resources.is_empty() {
        return true;
    }
    let combined = if res.subresource.is_empty() {
        res.resource.to_string()
    } else {
        format!("{}/{}", res.resource, res.subresource)
    };
    r.resources
        .iter()
        .filter(|gr| gr.group == res.group)
        .any(|gr| {
            if gr.resources.is_empty() {
                return true;
            }
            if !gr.resource_names.is_empty() && !gr.resource_names.iter().any(|n| n == res.name) {
                return false;
            }
            gr.resources.iter().any(|spec| {
                spec == &combined
                    || spec == "*"
                    || (!res.subresource.is_empty()
                        && spec.strip_prefix("*/") == Some(res.subresource))
                    || spec.strip_suffix("/*") == Some(res.resource)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-proxy"]
  verbs: ["watch"]
- level: None
  userGroups: ["system:nodes"]
  resources: [{group: "", resources: ["nodes/status"]}]
- level: Metadata
  resources: [{group: "", resources: ["secrets", "configmaps"]}]
- level: Request
  resources: [{group: "", resources: ["pods/log", "*/exec"]}]
- level: RequestResponse
  resources: [{group: "apps", resources: ["deployments/*"]}]
- level: Metadata
  resources: [{group: "", resources: ["services"], resourceNames: ["kubernetes"]}]
  omitStages: [ResponseStarted]
  omitManagedFields: true
- level: Request
  namespaces: ["kube-system"]
- level: None
  nonResourceURLs: ["/healthz*", "/version"]
- level: Metadata
  nonResourceURLs: ["/apis*"]
"#;

    fn res<'a>(
        group: &'a str,
        resource: &'a str,
        sub: &'a str,
        ns: &'a str,
        name: &'a str,
    ) -> Option<ResourceAttributes<'a>> {
        Some(ResourceAttributes {
            group,
            resource,
            subresource: sub,
            namespace: ns,
            name,
        })
    }

    #[test]
    fn first_matching_rule_wins_table() {
        let p = Policy::parse(POLICY.as_bytes()).unwrap();
        let admin_groups = vec!["system:masters".to_string()];
        let node_groups = vec!["system:nodes".to_string()];
        let admin = Some(("admin", admin_groups.as_slice()));
        let node = Some(("system:node:n1", node_groups.as_slice()));
        let proxy = Some(("system:kube-proxy", &[][..]));
        let cases: Vec<(Attributes, Level)> = vec![
            (
                Attributes {
                    user: proxy,
                    verb: "watch",
                    resource: res("", "endpoints", "", "", ""),
                    path: "",
                },
                Level::None,
            ),
            (
                Attributes {
                    user: proxy,
                    verb: "get",
                    resource: res("", "secrets", "", "ns", "s"),
                    path: "",
                },
                Level::Metadata,
            ),
            (
                Attributes {
                    user: node,
                    verb: "patch",
                    resource: res("", "nodes", "status", "", "n1"),
                    path: "",
                },
                Level::None,
            ),
            (
                Attributes {
                    user: admin,
                    verb: "patch",
                    resource: res("", "nodes", "status", "", "n1"),
                    path: "",
                },
                Level::None,
            ),
            (
                Attributes {
                    user: admin,
                    verb: "get",
                    resource: res("", "pods", "log", "ns", "p"),
                    path: "",
                },
                Level::Request,
            ),
            (
                Attributes {
                    user: admin,
                    verb: "create",
                    resource: res("", "pods", "exec", "ns", "p"),
                    path: "",
                },
                Level::Request,
            ),
            (
                Attributes {
                    user: admin,
                    verb: "update",
                    resource: res("apps", "deployments", "scale", "ns", "d"),
                    path: "",
                },
                Level::RequestResponse,
            ),
            (
                Attributes {
                    user: admin,
                    verb: "get",
                    resource: res("apps", "deployments", "", "ns", "d"),
                    path: "",
                },
                Level::RequestResponse,
            ),
            (
                Attributes {
                    user: admin,
                    verb: "get",
                    resource: res("apps", "replicasets", "", "ns", "d"),
                    path: "",
                },
                Level::None,
            ),
            (
                Attributes {
                    user: admin,
                    verb: "get",
                    resource: res("", "services", "", "default", "kubernetes"),
                    path: "",
                },
                Level::Metadata,
            ),
            (
                Attributes {
                    user: admin,
                    verb: "get",
                    resource: res("", "services", "", "default", "other"),
                    path: "",
                },
                Level::None,
            ),
            (
                Attributes {
                    user: admin,
                    verb: "list",
                    resource: res("", "services", "", "kube-system", ""),
                    path: "",
                },
                Level::Request,
            ),
            (
                Attributes {
                    user: admin,
                    verb: "get",
                    resource: None,
                    path: "/healthz/etcd",
                },
                Level::None,
            ),
            (
                Attributes {
                    user: admin,
                    verb: "get",
                    resource: None,
                    path: "/apis/apps/v1",
                },
                Level::Metadata,
            ),
            (
                Attributes {
                    user: admin,
                    verb: "get",
                    resource: None,
                    path: "/metrics",
                },
                Level::None,
            ),
            (
                Attributes {
                    user: None,
                    verb: "get",
                    resource: res("", "secrets", "", "ns", ""),
                    path: "",
                },
                Level::Metadata,
            ),
        ];
        for (i, (attrs, want)) in cases.iter().enumerate() {
            assert_eq!(p.evaluate(attrs).level, *want, "case {i}: {attrs:?}");
        }
        let svc = Attributes {
            user: admin,
            verb: "get",
            resource: res("", "services", "", "default", "kubernetes"),
            path: "",
        };
        let d = p.evaluate(&svc);
        assert_eq!(
            d.omit_stages,
            vec![Stage::ResponseStarted, Stage::RequestReceived]
        );
        assert!(d.omit_managed_fields);
        let other = Attributes {
            user: admin,
            verb: "get",
            resource: None,
            path: "/other",
        };
        assert_eq!(p.evaluate(&other).omit_stages, vec![Stage::RequestReceived]);
    }

    #[test]
    fn bad_policies_name_the_field() {
        let parse = |s: &str| {
            Policy::parse(format!("apiVersion: audit.k8s.io/v1\nkind: Policy\n{s}").as_bytes())
                .unwrap_err()
        };
        assert_eq!(
            parse("rules:\n- level: Everything\n"),
            "rules[0].level: Unsupported value: \"Everything\": supported values: \"None\", \"Metadata\", \"Request\", \"RequestResponse\""
        );
        let unknown = parse("rules:\n- level: None\n  verb: [get]\n");
        assert!(
            unknown.starts_with("failed decoding: rules[0].verb: unknown field `verb`"),
            "{unknown}"
        );
        assert_eq!(parse("rules: []\n"), "loaded illegal policy with 0 rules");
        assert!(
            parse("rules:\n- level: None\n  nonResourceURLs: ['/a*b']\n").contains(
                "rules[0].nonResourceURLs[0]: Invalid value: \"/a*b\": non-resource URL wildcards"
            )
        );
        assert!(
            parse("rules:\n- level: None\n  nonResourceURLs: ['/a']\n  namespaces: [x]\n")
                .contains("rules cannot apply to both")
        );
        assert!(parse("rules:\n- level: None\n  omitStages: [Done]\n")
            .starts_with("rules[0].omitStages[0]: Invalid value: \"Done\""));
        assert!(
            parse("rules:\n- level: None\n  resources: [{group: Apps}]\n")
                .starts_with("rules[0].resources[0].group: Invalid value: \"Apps\"")
        );
        let wrong =
            Policy::parse(b"apiVersion: audit.k8s.io/v2\nkind: Policy\nrules: [{level: None}]\n")
                .unwrap_err();
        assert_eq!(
            wrong,
            "unknown group version field audit.k8s.io/v2, Kind=Policy in policy"
        );
    }
}
