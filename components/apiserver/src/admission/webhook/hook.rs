//! One webhook of a Mutating/ValidatingWebhookConfiguration, parsed once when the configuration is
//! cached (the stored object is already defaulted and validated by the registry).

use std::time::Duration;

use base64::Engine;
use serde_json::Value;

/// One `rules[]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub operations: Vec<String>,
    pub api_groups: Vec<String>,
    pub api_versions: Vec<String>,
    pub resources: Vec<String>,
    pub scope: String,
}

/// Where the webhook listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Url(String),
    Service {
        namespace: String,
        name: String,
        path: String,
        port: u16,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Mutating,
    Validating,
}

#[derive(Debug, Clone)]
pub struct Hook {
    pub kind: Kind,
    /// The configuration object's name (hooks are ordered by it).
    pub configuration: String,
    pub name: String,
    pub rules: Vec<Rule>,
    /// failurePolicy Ignore.
    pub ignore_failures: bool,
    /// matchPolicy Exact.
    pub exact: bool,
    pub namespace_selector: Value,
    pub object_selector: Value,
    pub side_effects: String,
    pub timeout: Duration,
    /// reinvocationPolicy IfNeeded.
    pub reinvoke: bool,
    pub endpoint: Endpoint,
    /// The decoded caBundle (PEM); empty = none given.
    pub ca_bundle: Vec<u8>,
    /// matchConditions as (name, CEL expression), compiled when evaluated.
    pub match_conditions: Vec<(String, String)>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// `rules[]` / `resourceRules[]` entries.
pub fn parse_rules(list: &Value) -> Vec<Rule> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|r| Rule {
            operations: strings(&r["operations"]),
            api_groups: strings(&r["apiGroups"]),
            api_versions: strings(&r["apiVersions"]),
            resources: strings(&r["resources"]),
            scope: r["scope"].as_str().unwrap_or("*").to_string(),
        })
        .collect()
}

/// `matchConditions[]` as (name, expression).
pub fn parse_conditions(list: &Value) -> Vec<(String, String)> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or("").to_string(),
                c["expression"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

impl Hook {
    /// The webhooks of one stored configuration, in their listed order.
    pub fn from_configuration(kind: Kind, obj: &Value) -> Vec<Hook> {
        let configuration = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        obj["webhooks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| Hook::parse(kind, &configuration, h))
            .collect()
    }

    fn parse(kind: Kind, configuration: &str, h: &Value) -> Hook {
        let cc = &h["clientConfig"];
        let endpoint = match cc["url"].as_str() {
            Some(url) => Endpoint::Url(url.to_string()),
            None => {
                let s = &cc["service"];
                Endpoint::Service {
                    namespace: s["namespace"].as_str().unwrap_or("").to_string(),
                    name: s["name"].as_str().unwrap_or("").to_string(),
                    path: s["path"].as_str().unwrap_or("/").to_string(),
                    port: s["port"]
                        .as_u64()
                        .and_then(|p| u16::try_from(p).ok())
                        .unwrap_or(443),
                }
            }
        };
        let ca_bundle = cc["caBundle"]
            .as_str()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .unwrap_or_default();
        Hook {
            kind,
            configuration: configuration.to_string(),
            name: h["name"].as_str().unwrap_or("").to_string(),
            rules: parse_rules(&h["rules"]),
            ignore_failures: h["failurePolicy"] == "Ignore",
            exact: h["matchPolicy"] == "Exact",
            namespace_selector: h["namespaceSelector"].clone(),
            object_selector: h["objectSelector"].clone(),
            side_effects: h["sideEffects"].as_str().unwrap_or("Unknown").to_string(),
            timeout: Duration::from_secs(h["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30)),
            reinvoke: h["reinvocationPolicy"] == "IfNeeded",
            endpoint,
            ca_bundle,
            match_conditions: parse_conditions(&h["matchConditions"]),
        }
    }

    /// sideEffects None / NoneOnDryRun: safe to call for a dry-run request.
    pub fn dry_run_safe(&self) -> bool {
        matches!(self.side_effects.as_str(), "None" | "NoneOnDryRun")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_a_defaulted_webhook() {
        let obj = json!({"metadata": {"name": "cfg"}, "webhooks": [{
            "name": "a.example.com", "failurePolicy": "Ignore", "matchPolicy": "Exact",
            "sideEffects": "NoneOnDryRun", "timeoutSeconds": 3, "reinvocationPolicy": "IfNeeded",
            "clientConfig": {"service": {"namespace": "ns", "name": "svc", "port": 8443},
                             "caBundle": "UEVN"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"], "scope": "Namespaced"}]}]});
        let hooks = Hook::from_configuration(Kind::Mutating, &obj);
        let h = &hooks[0];
        assert_eq!(h.configuration, "cfg");
        assert!(h.ignore_failures && h.exact && h.reinvoke && h.dry_run_safe());
        assert_eq!(h.timeout, Duration::from_secs(3));
        assert_eq!(h.ca_bundle, b"PEM");
        assert_eq!(
            h.endpoint,
            Endpoint::Service {
                namespace: "ns".into(),
                name: "svc".into(),
                path: "/".into(),
                port: 8443
            }
        );
        assert_eq!(h.rules[0].scope, "Namespaced");
    }
}
