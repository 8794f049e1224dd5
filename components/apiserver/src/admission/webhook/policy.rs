//! ValidatingAdmissionPolicy with ValidatingAdmissionPolicyBinding: CEL validations (`crate::cel`)
//! over object / oldObject / request / params / namespaceObject / variables, matched by the policy's
//! matchConstraints and the binding's matchResources, with Deny / Warn / Audit actions and the
//! policy's failurePolicy for evaluation errors. `evaluate` is pure; `admit` finds params and the
//! namespace in the store.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::access::evaluate_with_authorizer;
use super::hook::{parse_conditions, parse_rules, Endpoint, Hook, Kind};
use super::matching;
use super::request::Request;
use crate::admission::context::AdmissionContext;
use crate::cel::authz::AuthorizerVal;
use crate::cel::{Activation, Program};
use crate::registry::lifecycle::from_stored;
use crate::registry::resources::NAMESPACES;
use crate::status::ApiError;

/// One failed validation (or evaluation error under failurePolicy Fail).
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub message: String,
    /// metav1.StatusReason: Invalid unless the validation says otherwise.
    pub reason: String,
}

/// What one policy + binding pair decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The pair does not apply to this request.
    NoMatch,
    Pass,
    Violations(Vec<Violation>),
}

/// A match block (`matchConstraints` / `matchResources`) as a webhook-shaped matcher, so the same
/// rule, scope and selector logic applies.
fn matcher(m: &Value, rules: &str) -> Hook {
    Hook {
        kind: Kind::Validating,
        configuration: String::new(),
        name: String::new(),
        rules: parse_rules(&m[rules]),
        ignore_failures: false,
        exact: m["matchPolicy"] == "Exact",
        namespace_selector: m["namespaceSelector"].clone(),
        object_selector: m["objectSelector"].clone(),
        side_effects: "None".into(),
        timeout: std::time::Duration::from_secs(10),
        reinvoke: false,
        endpoint: Endpoint::Url(String::new()),
        ca_bundle: Vec::new(),
        match_conditions: Vec::new(),
    }
}

fn rule_names_allow(rules: &Value, name: &str) -> bool {
    // A rule with resourceNames limits it to those names; the matched rule is not tracked, so
    // any rule listing names must list this one.
    rules
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["resourceNames"].as_array().filter(|n| !n.is_empty()))
        .all(|names| names.iter().any(|n| n == name))
}

/// `matchConstraints` (or a binding's `matchResources`, where no resourceRules means every
/// resource the policy matches).
fn match_block(
    m: &Value,
    req: &Request,
    ns_labels: Option<&Map<String, Value>>,
    rules_optional: bool,
) -> bool {
    if !m.is_object() {
        return rules_optional;
    }
    let include = matcher(m, "resourceRules");
    let rules_ok = if include.rules.is_empty() {
        rules_optional
    } else {
        matching::matching_version(&include, req).is_some()
            && rule_names_allow(&m["resourceRules"], &req.name)
    };
    let exclude = matcher(m, "excludeResourceRules");
    let excluded = !exclude.rules.is_empty()
        && matching::matching_version(&exclude, req).is_some()
        && rule_names_allow(&m["excludeResourceRules"], &req.name);
    rules_ok
        && !excluded
        && matching::object_matches(&include, req)
        && matching::namespace_matches(&include, req, ns_labels)
}

/// Whether a match block needs the request namespace's labels.
pub fn needs_namespace_labels(m: &Value, req: &Request) -> bool {
    m.is_object() && matching::needs_namespace_labels(&matcher(m, "resourceRules"), req)
}

/// One policy for one binding and one set of params (`Value::Null` without paramKind), with no
/// `authorizer` (every check fails).
pub fn evaluate(
    policy: &Value,
    binding: &Value,
    req: &Request,
    params: &Value,
    namespace_object: &Value,
    ns_labels: Option<&Map<String, Value>>,
) -> Decision {
    evaluate_with(
        policy,
        binding,
        req,
        params,
        namespace_object,
        ns_labels,
        None,
    )
}

/// `evaluate` with the `authorizer` variable bound.
pub fn evaluate_with(
    policy: &Value,
    binding: &Value,
    req: &Request,
    params: &Value,
    namespace_object: &Value,
    ns_labels: Option<&Map<String, Value>>,
    authorizer: Option<AuthorizerVal>,
) -> Decision {
    let spec = &policy["spec"];
    if !match_block(&spec["matchConstraints"], req, ns_labels, false)
        || !match_block(&binding["spec"]["matchResources"], req, ns_labels, true)
    {
        return Decision::NoMatch;
    }
    let review = req.review("", &req.version);
    let request = &review["request"];
    // Variables are evaluated lazily, when first read (`cel::Activation`).
    let variables = spec["variables"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            let name = v["name"].as_str().unwrap_or("").to_string();
            (
                name,
                Program::compile(v["expression"].as_str().unwrap_or("")).map(Arc::new),
            )
        })
        .collect();
    let activation = Activation::new(
        vec![
            ("object".into(), request["object"].clone()),
            ("oldObject".into(), request["oldObject"].clone()),
            ("request".into(), request.clone()),
            ("params".into(), params.clone()),
            ("namespaceObject".into(), namespace_object.clone()),
        ],
        authorizer,
        variables,
    );
    let eval = |expression: &str| -> Result<Value, String> {
        Program::compile(expression)
            .and_then(|p| activation.eval(&p))
            .map_err(|e| format!("expression '{expression}' resulted in error: {e}"))
    };
    let ignore = spec["failurePolicy"] == "Ignore";
    let failed = |message: String| {
        if ignore {
            tracing::warn!(policy = policy["metadata"]["name"].as_str().unwrap_or(""), %message, "policy evaluation failed, ignored (failurePolicy Ignore)");
            Decision::Pass
        } else {
            Decision::Violations(vec![Violation {
                message,
                reason: "Invalid".into(),
            }])
        }
    };
    // matchConditions: any false skips the policy; an error is a failure.
    let mut condition_error = None;
    for (name, expression) in parse_conditions(&spec["matchConditions"]) {
        match eval(&expression) {
            Ok(Value::Bool(true)) => {}
            Ok(Value::Bool(false)) => return Decision::NoMatch,
            Ok(other) => {
                condition_error.get_or_insert(format!(
                    "matchCondition {name:?}: expression must evaluate to bool, got {other}"
                ));
            }
            Err(e) => {
                condition_error.get_or_insert(format!("matchCondition {name:?}: {e}"));
            }
        }
    }
    if let Some(e) = condition_error {
        return failed(e);
    }
    let mut violations = Vec::new();
    for v in spec["validations"].as_array().into_iter().flatten() {
        let expression = v["expression"].as_str().unwrap_or("");
        match eval(expression) {
            Ok(Value::Bool(true)) => {}
            Ok(Value::Bool(false)) => {
                let from_expression = v["messageExpression"]
                    .as_str()
                    .filter(|m| !m.is_empty())
                    .and_then(|m| eval(m).ok())
                    .and_then(|m| {
                        m.as_str()
                            .map(str::trim)
                            .filter(|m| !m.is_empty())
                            .map(str::to_string)
                    });
                let message = from_expression
                    .or_else(|| {
                        v["message"]
                            .as_str()
                            .filter(|m| !m.is_empty())
                            .map(str::to_string)
                    })
                    .unwrap_or_else(|| format!("failed expression: {expression}"));
                violations.push(Violation {
                    message,
                    reason: v["reason"].as_str().unwrap_or("Invalid").to_string(),
                });
            }
            Ok(other) => {
                if let Decision::Violations(mut f) = failed(format!(
                    "expression '{expression}' must evaluate to bool, got {other}"
                )) {
                    violations.append(&mut f);
                }
            }
            Err(e) => {
                if let Decision::Violations(mut f) = failed(e) {
                    violations.append(&mut f);
                }
            }
        }
    }
    if violations.is_empty() {
        Decision::Pass
    } else {
        Decision::Violations(violations)
    }
}

fn reason_code(reason: &str) -> (u16, &'static str) {
    match reason {
        "Forbidden" => (403, "Forbidden"),
        "Unauthorized" => (401, "Unauthorized"),
        "RequestEntityTooLarge" => (413, "RequestEntityTooLarge"),
        _ => (422, "Invalid"),
    }
}

/// The params a binding names: one object by name, or every match of a selector.
pub(super) async fn params_for(
    state: &AdmissionContext<'_>,
    policy: &Value,
    binding: &Value,
    req: &Request,
) -> Result<Option<Vec<Value>>, String> {
    let kind = &policy["spec"]["paramKind"];
    if !kind.is_object() {
        return Ok(Some(vec![Value::Null]));
    }
    let param_ref = &binding["spec"]["paramRef"];
    if !param_ref.is_object() {
        return Err("failed to configure binding: paramKind is set on the policy but the binding has no paramRef".into());
    }
    let (api_version, kind_name) = (
        kind["apiVersion"].as_str().unwrap_or(""),
        kind["kind"].as_str().unwrap_or(""),
    );
    let spec = state
        .registry
        .all()
        .iter()
        .copied()
        .find(|s| s.api_version() == api_version && s.kind == kind_name)
        .ok_or_else(|| {
            format!("failed to configure policy: paramKind {api_version}/{kind_name} is not served")
        })?;
    let namespace = match param_ref["namespace"].as_str().filter(|n| !n.is_empty()) {
        _ if !spec.namespaced => None,
        Some(ns) => Some(ns.to_string()),
        None if !req.cluster_scoped => Some(req.namespace.clone()),
        None => return Err("failed to configure binding: paramRef.namespace is required for a cluster-scoped request with a namespaced paramKind".into()),
    };
    let mut found = Vec::new();
    if let Some(name) = param_ref["name"].as_str().filter(|n| !n.is_empty()) {
        if let Some(v) = state
            .store
            .get(&spec.key(namespace.as_deref(), name))
            .await
            .map_err(|e| e.to_string())?
        {
            found.push(from_stored(&v.value, v.mod_revision).map_err(|e| e.message)?);
        }
    } else {
        let (items, _) = state
            .store
            .list(&spec.key_prefix(namespace.as_deref()))
            .await
            .map_err(|e| e.to_string())?;
        for i in items {
            let obj = from_stored(&i.value, i.mod_revision).map_err(|e| e.message)?;
            let labels = obj["metadata"]["labels"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            if matching::selector_matches(&param_ref["selector"], &labels) {
                found.push(obj);
            }
        }
    }
    if found.is_empty() {
        return match param_ref["parameterNotFoundAction"].as_str() {
            Some("Allow") => Ok(None),
            _ => Ok(Some(Vec::new())),
        };
    }
    Ok(Some(found))
}

/// Every binding of every policy for this request: the first Deny refuses it, Warn adds warnings.
pub async fn admit(
    state: &AdmissionContext<'_>,
    req: &Request,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    let (policies, bindings) = state.webhooks.policies();
    if policies.is_empty() || bindings.is_empty() {
        return Ok(());
    }
    let mut namespace_object = Value::Null;
    let mut ns_labels = None;
    if !req.cluster_scoped && !req.namespace.is_empty() {
        if let Some(v) = state
            .store
            .get(&NAMESPACES.key(None, &req.namespace))
            .await
            .map_err(crate::storage_status::store_error)?
        {
            namespace_object = from_stored(&v.value, v.mod_revision)?;
            ns_labels = namespace_object["metadata"]["labels"]
                .as_object()
                .cloned()
                .or_else(|| Some(Map::new()));
        }
    }
    for binding in &bindings {
        let policy_name = binding["spec"]["policyName"].as_str().unwrap_or("");
        let Some(policy) = policies
            .iter()
            .find(|p| p["metadata"]["name"] == policy_name)
        else {
            continue;
        };
        let binding_name = binding["metadata"]["name"].as_str().unwrap_or("");
        // Match before looking params up: most requests match no policy.
        if evaluate_match_only(policy, binding, req, ns_labels.as_ref()) {
            continue;
        }
        let violations = match params_for(state, policy, binding, req).await {
            Ok(None) => continue,
            Ok(Some(params)) if params.is_empty() => vec![Violation {
                message: "no params found for policy binding with `Deny` parameterNotFoundAction"
                    .into(),
                reason: "Invalid".into(),
            }],
            Ok(Some(params)) => {
                let mut all = Vec::new();
                for p in &params {
                    let decision = evaluate_with_authorizer(req, state.access, |authorizer| {
                        evaluate_with(
                            policy,
                            binding,
                            req,
                            p,
                            &namespace_object,
                            ns_labels.as_ref(),
                            Some(authorizer),
                        )
                    })
                    .await;
                    if let Decision::Violations(mut v) = decision {
                        all.append(&mut v);
                    }
                }
                all
            }
            Err(e) if policy["spec"]["failurePolicy"] == "Ignore" => {
                tracing::warn!(policy = policy_name, binding = binding_name, error = %e, "policy skipped (failurePolicy Ignore)");
                continue;
            }
            Err(e) => vec![Violation {
                message: e,
                reason: "Invalid".into(),
            }],
        };
        let Some(first) = violations.first() else {
            continue;
        };
        let actions: Vec<&str> = binding["spec"]["validationActions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for v in &violations {
            if actions.contains(&"Warn") {
                warnings.push(format!("Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}': {}", v.message));
            }
            if actions.contains(&"Audit") {
                tracing::info!(policy = policy_name, binding = binding_name, message = %v.message, "ValidatingAdmissionPolicy audit violation");
            }
        }
        if actions.contains(&"Deny") {
            let message = format!("ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}' denied request: {}", first.message);
            let mut err =
                crate::admission::forbidden(&req.group, &req.resource, &req.name, &message);
            let (code, reason) = reason_code(&first.reason);
            err.code = code;
            err.reason = reason;
            if let Some(d) = err.details.as_mut() {
                d["causes"] = json!([{"message": message}]);
            }
            return Err(err);
        }
    }
    Ok(())
}

/// True when the pair cannot apply (so params need not be read).
pub(super) fn evaluate_match_only(
    policy: &Value,
    binding: &Value,
    req: &Request,
    ns_labels: Option<&Map<String, Value>>,
) -> bool {
    !match_block(&policy["spec"]["matchConstraints"], req, ns_labels, false)
        || !match_block(&binding["spec"]["matchResources"], req, ns_labels, true)
}

#[cfg(test)]
mod tests {
    use super::super::request::tests::configmap_create;
    use super::*;

    fn policy(validations: Value, extra: Value) -> Value {
        let mut p = json!({"metadata": {"name": "p"}, "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {},
                "resourceRules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                   "resources": ["configmaps"], "scope": "*"}]},
            "validations": validations}});
        for (k, v) in extra.as_object().unwrap() {
            p["spec"][k] = v.clone();
        }
        p
    }

    fn binding() -> Value {
        json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Deny"]}})
    }

    fn run(p: &Value, b: &Value, params: &Value) -> Decision {
        evaluate(p, b, &configmap_create(), params, &Value::Null, None)
    }

    #[test]
    fn validations_pass_or_fail_with_messages() {
        let p = policy(
            json!([{"expression": "object.metadata.name == 'cm'"}]),
            json!({}),
        );
        assert_eq!(run(&p, &binding(), &Value::Null), Decision::Pass);
        let p = policy(
            json!([
            {"expression": "object.metadata.name == 'other'"},
            {"expression": "false", "message": "static message", "reason": "Forbidden"},
            {"expression": "false", "messageExpression": "'name is ' + object.metadata.name"}]),
            json!({}),
        );
        let Decision::Violations(v) = run(&p, &binding(), &Value::Null) else {
            panic!()
        };
        let messages: Vec<&str> = v.iter().map(|v| v.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "failed expression: object.metadata.name == 'other'",
                "static message",
                "name is cm"
            ]
        );
        assert_eq!(v[1].reason, "Forbidden");
        assert_eq!(v[0].reason, "Invalid");
    }

    #[test]
    fn match_constraints_and_binding_match_resources() {
        let p = policy(json!([{"expression": "false"}]), json!({}));
        let mut req = configmap_create();
        req.resource = "secrets".into();
        assert_eq!(
            evaluate(&p, &binding(), &req, &Value::Null, &Value::Null, None),
            Decision::NoMatch
        );
        let mut b = binding();
        b["spec"]["matchResources"] = json!({"objectSelector": {"matchLabels": {"app": "db"}}});
        assert_eq!(
            run(&p, &b, &Value::Null),
            Decision::NoMatch,
            "binding narrows by labels"
        );
        b["spec"]["matchResources"] = json!({"objectSelector": {"matchLabels": {"app": "web"}}});
        assert!(matches!(run(&p, &b, &Value::Null), Decision::Violations(_)));
        let mut excluded = p.clone();
        excluded["spec"]["matchConstraints"]["excludeResourceRules"] = json!([{"operations": ["*"], "apiGroups": [""],
            "apiVersions": ["*"], "resources": ["configmaps"], "resourceNames": ["cm"]}]);
        assert_eq!(run(&excluded, &binding(), &Value::Null), Decision::NoMatch);
    }

    #[test]
    fn params_variables_and_match_conditions() {
        let p = policy(
            json!([{"expression": "variables.limit >= size(object.metadata.name)", "messageExpression": "'too long for ' + string(variables.limit)"}]),
            json!({"variables": [{"name": "limit", "expression": "int(params.data.maxLength)"}]}),
        );
        let ok = json!({"data": {"maxLength": "5"}});
        assert_eq!(run(&p, &binding(), &ok), Decision::Pass);
        let Decision::Violations(v) = run(&p, &binding(), &json!({"data": {"maxLength": "1"}}))
        else {
            panic!()
        };
        assert_eq!(v[0].message, "too long for 1");
        let mut skip = p.clone();
        skip["spec"]["matchConditions"] = json!([{"name": "never", "expression": "false"}]);
        assert_eq!(run(&skip, &binding(), &ok), Decision::NoMatch);
    }

    #[test]
    fn evaluation_errors_follow_failure_policy() {
        let p = policy(json!([{"expression": "object.nope.deeper"}]), json!({}));
        let Decision::Violations(v) = run(&p, &binding(), &Value::Null) else {
            panic!()
        };
        assert!(
            v[0].message
                .starts_with("expression 'object.nope.deeper' resulted in error: "),
            "{}",
            v[0].message
        );
        let ignore = policy(
            json!([{"expression": "object.nope.deeper"}]),
            json!({"failurePolicy": "Ignore"}),
        );
        assert_eq!(run(&ignore, &binding(), &Value::Null), Decision::Pass);
    }
}
