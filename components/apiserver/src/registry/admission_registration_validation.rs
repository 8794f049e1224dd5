//! Field validation for admissionregistration.k8s.io, with upstream's field paths and texts
//! (`ValidateMutatingWebhookConfiguration`, `ValidateValidatingAdmissionPolicy`, ...).

use serde_json::{json, Value};

use super::cel::{base_decls, check_expression, validate_policy_expressions, Returns};
use super::ACCEPTED_REVIEW_VERSIONS;
use crate::status::Cause;

/// Go's `%#v` of a `[]string`, as upstream's field errors render lists.
pub(super) fn go_strings(v: &Value) -> String {
    let items: Vec<String> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| format!("{:?}", s.as_str().unwrap_or("")))
        .collect();
    format!("[]string{{{}}}", items.join(", "))
}

pub(super) fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

pub(super) fn one_of(causes: &mut Vec<Cause>, field: &str, value: &Value, supported: &[&str]) {
    if let Some(s) = value.as_str() {
        if !supported.contains(&s) {
            causes.push(Cause::not_supported(field, s, supported));
        }
    }
}

/// `validateRuleWithOperations` / `validateRule`.
fn validate_rule(rule: &Value, path: &str, with_operations: bool, causes: &mut Vec<Cause>) {
    if with_operations {
        let ops = strings(&rule["operations"]);
        if ops.is_empty() {
            causes.push(Cause::required(&format!("{path}.operations"), ""));
        }
        if ops.len() > 1 && ops.contains(&"*") {
            causes.push(Cause::invalid_raw(
                &format!("{path}.operations"),
                &go_strings(&rule["operations"]),
                "if '*' is present, must not specify other operations",
            ));
        }
        for (i, op) in ops.iter().enumerate() {
            if !["*", "CREATE", "UPDATE", "DELETE", "CONNECT"].contains(op) {
                causes.push(Cause::not_supported(
                    &format!("{path}.operations[{i}]"),
                    op,
                    &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"],
                ));
            }
        }
    }
    for (field, what) in [("apiGroups", "groups"), ("apiVersions", "versions")] {
        let list = strings(&rule[field]);
        if list.is_empty() {
            causes.push(Cause::required(&format!("{path}.{field}"), ""));
        }
        if list.len() > 1 && list.contains(&"*") {
            causes.push(Cause::invalid_raw(
                &format!("{path}.{field}"),
                &go_strings(&rule[field]),
                &format!("if '*' is present, must not specify other {what}"),
            ));
        }
        if field == "apiVersions" {
            for (i, v) in list.iter().enumerate() {
                if v.is_empty() {
                    causes.push(Cause::required(&format!("{path}.apiVersions[{i}]"), ""));
                }
            }
        }
    }
    let resources = strings(&rule["resources"]);
    if resources.is_empty() {
        causes.push(Cause::required(&format!("{path}.resources"), ""));
    }
    for (i, r) in resources.iter().enumerate() {
        if r.is_empty() {
            causes.push(Cause::required(&format!("{path}.resources[{i}]"), ""));
        }
    }
    if resources.len() > 1 && resources.contains(&"*") {
        causes.push(Cause::invalid_raw(
            &format!("{path}.resources"),
            &go_strings(&rule["resources"]),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
    one_of(
        causes,
        &format!("{path}.scope"),
        &rule["scope"],
        &["*", "Cluster", "Namespaced"],
    );
}

/// `ValidateWebhookURL` with https forced, as for admission webhooks.
fn validate_url(url: &str, path: &str, causes: &mut Vec<Cause>) {
    const FORM: &str = "; desired format: https://host[/path]";
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    if scheme != "https" {
        causes.push(Cause::invalid(
            path,
            &json!(scheme),
            &format!("'https' is the only allowed URL scheme{FORM}"),
        ));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let (user, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if host.is_empty() {
        causes.push(Cause::invalid(
            path,
            &json!(host),
            &format!("host must be specified{FORM}"),
        ));
    }
    if let Some(u) = user {
        causes.push(Cause::invalid(
            path,
            &json!(u),
            "user information is not permitted in the URL",
        ));
    }
    if let Some((_, fragment)) = rest.split_once('#') {
        causes.push(Cause::invalid(
            path,
            &json!(fragment),
            "fragments are not permitted in the URL",
        ));
    }
    if let Some((_, query)) = rest.split('#').next().unwrap_or("").split_once('?') {
        causes.push(Cause::invalid(
            path,
            &json!(query),
            "query parameters are not permitted in the URL",
        ));
    }
}

fn validate_client_config(cc: &Value, path: &str, causes: &mut Vec<Cause>) {
    let url = cc["url"].as_str();
    let svc = &cc["service"];
    match (url, svc.is_object()) {
        (Some(u), false) => validate_url(u, &format!("{path}.url"), causes),
        (None, true) => {
            let p = format!("{path}.service");
            for f in ["name", "namespace"] {
                if svc[f].as_str().unwrap_or("").is_empty() {
                    causes.push(Cause::required(
                        &format!("{p}.{f}"),
                        &format!("service {f} is required"),
                    ));
                }
            }
            // An empty path (or "/") is the default: upstream checks nothing else then.
            if let Some(sp) = svc["path"].as_str().filter(|p| !p.is_empty() && *p != "/") {
                if !sp.starts_with('/') {
                    causes.push(Cause::invalid(
                        &format!("{p}.path"),
                        &json!(sp),
                        "must start with a '/'",
                    ));
                }
            }
            if let Some(port) = svc["port"].as_i64() {
                if !(1..=65535).contains(&port) {
                    causes.push(Cause::invalid(
                        &format!("{p}.port"),
                        &json!(port),
                        "port is not valid: must be between 1 and 65535, inclusive",
                    ));
                }
            }
        }
        _ => causes.push(Cause::required(
            path,
            "exactly one of url or service is required",
        )),
    }
}

/// Upper bound on matchConditions per webhook / policy, as upstream.
const MAX_MATCH_CONDITIONS: usize = 64;

/// Names unique and present, expressions that compile (`crate::cel`), with `params` declared.
pub(super) fn validate_match_conditions(list: &Value, path: &str, causes: &mut Vec<Cause>) {
    check_match_conditions(list, path, true, causes);
}

/// Names unique and present, bool expressions that type-check against the variables a
/// webhook's (no `params`) or policy's condition may read.
fn check_match_conditions(list: &Value, path: &str, has_params: bool, causes: &mut Vec<Cause>) {
    let decls = base_decls(has_params);
    let conditions = list.as_array().map(Vec::as_slice).unwrap_or_default();
    if conditions.len() > MAX_MATCH_CONDITIONS {
        causes.push(Cause {
            reason: "FieldValueTooMany",
            message: format!(
                "Too many: {}: must have at most {MAX_MATCH_CONDITIONS} items",
                conditions.len()
            ),
            field: path.to_string(),
        });
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, c) in conditions.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let name = c["name"].as_str().unwrap_or("");
        if name.is_empty() {
            causes.push(Cause::required(&format!("{p}.name"), ""));
        } else if seen.contains(&name) {
            causes.push(Cause::duplicate(&format!("{p}.name"), &json!(name)));
        }
        seen.push(name);
        let expression = c["expression"].as_str().unwrap_or("");
        if expression.trim().is_empty() {
            causes.push(Cause::required(&format!("{p}.expression"), ""));
        } else if let Err(cause) = check_expression(
            expression,
            &decls,
            Returns::Bool,
            &format!("{p}.expression"),
        ) {
            causes.push(cause);
        }
    }
}

fn validate_webhooks(obj: &Value, mutating: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (i, h) in obj["webhooks"].as_array().into_iter().flatten().enumerate() {
        let p = format!("webhooks[{i}]");
        let name = h["name"].as_str().unwrap_or("");
        if name.is_empty() {
            causes.push(Cause::required(&format!("{p}.name"), ""));
        } else if name.split('.').filter(|s| !s.is_empty()).count() < 3 {
            causes.push(Cause::invalid(
                &format!("{p}.name"),
                &json!(name),
                "should be a domain with at least three segments separated by dots",
            ));
        } else if seen.contains(&name) {
            causes.push(Cause::duplicate(&format!("{p}.name"), &json!(name)));
        }
        seen.push(name);
        for (j, r) in h["rules"].as_array().into_iter().flatten().enumerate() {
            validate_rule(r, &format!("{p}.rules[{j}]"), true, &mut causes);
        }
        one_of(
            &mut causes,
            &format!("{p}.failurePolicy"),
            &h["failurePolicy"],
            &["Fail", "Ignore"],
        );
        one_of(
            &mut causes,
            &format!("{p}.matchPolicy"),
            &h["matchPolicy"],
            &["Equivalent", "Exact"],
        );
        if mutating {
            one_of(
                &mut causes,
                &format!("{p}.reinvocationPolicy"),
                &h["reinvocationPolicy"],
                &["IfNeeded", "Never"],
            );
        }
        match h["sideEffects"].as_str() {
            None => causes.push(Cause::required(
                &format!("{p}.sideEffects"),
                "must specify one of None, NoneOnDryRun",
            )),
            Some(s) => one_of(
                &mut causes,
                &format!("{p}.sideEffects"),
                &json!(s),
                &["None", "NoneOnDryRun"],
            ),
        }
        let versions = strings(&h["admissionReviewVersions"]);
        let vp = format!("{p}.admissionReviewVersions");
        if versions.is_empty() {
            causes.push(Cause::required(&vp, "must specify one of v1, v1beta1"));
        } else if !versions
            .iter()
            .any(|v| ACCEPTED_REVIEW_VERSIONS.contains(v))
        {
            causes.push(Cause::invalid_raw(
                &vp,
                &go_strings(&h["admissionReviewVersions"]),
                &format!(
                    "must include at least one of {}",
                    ACCEPTED_REVIEW_VERSIONS.join(", ")
                ),
            ));
        }
        if let Some(t) = h["timeoutSeconds"].as_i64() {
            if !(1..=30).contains(&t) {
                causes.push(Cause::invalid(
                    &format!("{p}.timeoutSeconds"),
                    &json!(t),
                    "the timeout value must be between 1 and 30 seconds",
                ));
            }
        }
        validate_client_config(
            &h["clientConfig"],
            &format!("{p}.clientConfig"),
            &mut causes,
        );
        check_match_conditions(
            &h["matchConditions"],
            &format!("{p}.matchConditions"),
            false,
            &mut causes,
        );
    }
    causes
}

pub(super) fn validate_mutating(obj: &Value) -> Vec<Cause> {
    validate_webhooks(obj, true)
}

pub(super) fn validate_validating(obj: &Value) -> Vec<Cause> {
    validate_webhooks(obj, false)
}

pub(super) fn validate_match_resources(m: &Value, path: &str, causes: &mut Vec<Cause>) {
    if !m.is_object() {
        return;
    }
    one_of(
        causes,
        &format!("{path}.matchPolicy"),
        &m["matchPolicy"],
        &["Equivalent", "Exact"],
    );
    for list in ["resourceRules", "excludeResourceRules"] {
        for (i, r) in m[list].as_array().into_iter().flatten().enumerate() {
            validate_rule(r, &format!("{path}.{list}[{i}]"), true, causes);
        }
    }
}

pub(super) fn validate_policy(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    let validations = spec["validations"].as_array().map_or(0, Vec::len);
    let audits = spec["auditAnnotations"].as_array().map_or(0, Vec::len);
    if validations == 0 && audits == 0 {
        causes.push(Cause::required(
            "spec.validations",
            "validations or auditAnnotations must contain at least one item",
        ));
    }
    for (i, v) in spec["validations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if v["expression"].as_str().unwrap_or("").trim().is_empty() {
            causes.push(Cause::required(
                &format!("spec.validations[{i}].expression"),
                "expression is not specified",
            ));
        }
    }
    one_of(
        &mut causes,
        "spec.failurePolicy",
        &spec["failurePolicy"],
        &["Fail", "Ignore"],
    );
    match &spec["matchConstraints"] {
        m if m.is_object() => {
            if m["resourceRules"].as_array().is_none_or(Vec::is_empty) {
                causes.push(Cause::required("spec.matchConstraints.resourceRules", ""));
            }
            validate_match_resources(m, "spec.matchConstraints", &mut causes);
        }
        _ => causes.push(Cause::required("spec.matchConstraints", "")),
    }
    check_match_conditions(
        &spec["matchConditions"],
        "spec.matchConditions",
        spec["paramKind"].is_object(),
        &mut causes,
    );
    validate_policy_expressions(spec, &mut causes);
    causes
}

pub(super) fn validate_binding(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    if spec["policyName"].as_str().unwrap_or("").is_empty() {
        causes.push(Cause::required("spec.policyName", ""));
    }
    let actions = strings(&spec["validationActions"]);
    if actions.is_empty() {
        causes.push(Cause::required(
            "spec.validationActions",
            "at least one validation action is required",
        ));
    }
    for (i, a) in actions.iter().enumerate() {
        if !["Audit", "Deny", "Warn"].contains(a) {
            causes.push(Cause::not_supported(
                &format!("spec.validationActions[{i}]"),
                a,
                &["Audit", "Deny", "Warn"],
            ));
        }
    }
    if actions.contains(&"Deny") && actions.contains(&"Warn") {
        causes.push(Cause::invalid_raw(
            "spec.validationActions",
            &go_strings(&spec["validationActions"]),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    validate_match_resources(&spec["matchResources"], "spec.matchResources", &mut causes);
    causes
}
