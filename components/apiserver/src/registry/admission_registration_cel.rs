//! The CEL expressions of admission webhooks and ValidatingAdmissionPolicies, compiled and
//! type-checked when the object is written, as upstream's admissionregistration validation does:
//! the variables each kind of expression may read (`params` only with a paramKind, `variables`
//! only the ones declared before), and the result type each must have (`must evaluate to bool`).
//! The request's objects are `dyn` here, as upstream's; checking them against the matched kinds'
//! schemas is the policy status's typeChecking, not a refusal.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::cel::{check, CelError, Decls, Program, Ty};
use crate::status::Cause;

/// What an expression must evaluate to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Returns {
    Bool,
    String,
    Any,
}

/// The variables of a webhook's or policy's expressions.
pub(super) fn base_decls(has_params: bool) -> Decls {
    let mut decls = Decls::new()
        .var("object", Ty::Dyn)
        .var("oldObject", Ty::Dyn)
        .var("request", Ty::Dyn)
        .var("authorizer", Ty::Authorizer);
    if has_params {
        decls = decls.var("params", Ty::Dyn);
    }
    decls
}

/// A policy's variables and validations also see `namespaceObject` (and `variables`).
fn policy_decls(has_params: bool, variables: &BTreeMap<String, Ty>) -> Decls {
    base_decls(has_params)
        .var("namespaceObject", Ty::Dyn)
        .var("variables", Ty::object(variables.clone()))
}

/// Compiles `expression` against `decls`: its type, or the cause at `path` upstream reports.
pub(super) fn check_expression(
    expression: &str,
    decls: &Decls,
    returns: Returns,
    path: &str,
) -> Result<Ty, Cause> {
    let invalid = |detail: String| Cause::invalid(path, &json!(expression), &detail);
    let program = Program::compile(expression).map_err(|e| match e {
        CelError::Compile(_) => invalid(e.to_string()),
        other => invalid(format!("compilation failed: {other}")),
    })?;
    let ty = check(&program, decls)
        .map_err(|issues| invalid(format!("compilation failed: {issues}")))?;
    // Upstream compares the checked output type itself: `dyn` is not `bool`.
    let fits = match returns {
        Returns::Any => true,
        Returns::Bool => matches!(ty, Ty::Bool | Ty::Unknown),
        Returns::String => matches!(ty, Ty::String | Ty::Unknown),
    };
    if !fits {
        let want = if returns == Returns::Bool {
            "bool"
        } else {
            "string"
        };
        return Err(invalid(format!("must evaluate to {want}")));
    }
    Ok(ty)
}

/// A VAP spec's `variables`, `validations` (and their messageExpressions) and
/// `auditAnnotations`.
pub(super) fn validate_policy_expressions(spec: &Value, causes: &mut Vec<Cause>) {
    let has_params = spec["paramKind"].is_object();
    let mut variables: BTreeMap<String, Ty> = BTreeMap::new();
    for (i, v) in spec["variables"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("spec.variables[{i}]");
        let name = v["name"].as_str().unwrap_or("");
        if name.is_empty() {
            causes.push(Cause::required(
                &format!("{path}.name"),
                "name is not specified",
            ));
        } else if !crate::cel::is_identifier(name) {
            causes.push(Cause::invalid(
                &format!("{path}.name"),
                &json!(name),
                "name is not a valid CEL identifier",
            ));
        }
        let expression = v["expression"].as_str().unwrap_or("");
        let ty = if expression.trim().is_empty() {
            causes.push(Cause::required(
                &format!("{path}.expression"),
                "expression is not specified",
            ));
            Ty::Dyn
        } else {
            let decls = policy_decls(has_params, &variables);
            check_expression(
                expression,
                &decls,
                Returns::Any,
                &format!("{path}.expression"),
            )
            .unwrap_or_else(|cause| {
                causes.push(cause);
                Ty::Dyn
            })
        };
        if !name.is_empty() {
            variables.insert(name.to_string(), ty);
        }
    }
    let decls = policy_decls(has_params, &variables);
    for (i, v) in spec["validations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("spec.validations[{i}]");
        let expression = v["expression"].as_str().unwrap_or("");
        if !expression.trim().is_empty() {
            if let Err(c) = check_expression(
                expression,
                &decls,
                Returns::Bool,
                &format!("{path}.expression"),
            ) {
                causes.push(c);
            }
        }
        let message = v["messageExpression"].as_str().unwrap_or("");
        let mp = format!("{path}.messageExpression");
        if !message.is_empty() && message.trim().is_empty() {
            causes.push(Cause::invalid(
                &mp,
                &json!(message),
                "must be non-empty if specified",
            ));
        } else if !message.is_empty() {
            if let Err(c) = check_expression(message, &decls, Returns::String, &mp) {
                causes.push(c);
            }
        }
    }
    for (i, a) in spec["auditAnnotations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let expression = a["valueExpression"].as_str().unwrap_or("");
        let path = format!("spec.auditAnnotations[{i}].valueExpression");
        if expression.trim().is_empty() {
            causes.push(Cause::required(&path, "expression is not specified"));
        } else if let Err(c) = check_expression(expression, &decls, Returns::Any, &path) {
            causes.push(c);
        }
    }
}

/// What a policy's expressions are type-checked against for its status's typeChecking: one
/// matched kind's object (also `oldObject`), and the paramKind's object when its schema is known
/// (upstream declares `params` only then).
pub struct CheckedTypes {
    pub object: Ty,
    pub params: Option<Ty>,
}

/// Upstream's TypeChecker for one matched kind: the variables compiled in order against the typed
/// objects, then each validation's expression and messageExpression; (fieldRef, cel-go's issues)
/// for each that does not type-check. Results are not required to be bool or string here (that
/// is refused when the policy is written).
pub fn policy_type_issues(spec: &Value, types: &CheckedTypes) -> Vec<(String, String)> {
    let typed = |variables: &BTreeMap<String, Ty>| {
        let mut decls = Decls::new()
            .var("object", types.object.clone())
            .var("oldObject", types.object.clone())
            .var("request", Ty::Dyn)
            .var("authorizer", Ty::Authorizer)
            .var("namespaceObject", Ty::Dyn)
            .var("variables", Ty::object(variables.clone()));
        if let Some(params) = &types.params {
            decls = decls.var("params", params.clone());
        }
        decls
    };
    let issues = |expression: &str, decls: &Decls| -> Result<Ty, String> {
        let program = Program::compile(expression).map_err(|e| e.to_string())?;
        check(&program, decls)
    };
    let mut variables: BTreeMap<String, Ty> = BTreeMap::new();
    for v in spec["variables"].as_array().into_iter().flatten() {
        let (Some(name), Some(expression)) = (v["name"].as_str(), v["expression"].as_str()) else {
            continue;
        };
        let ty = issues(expression, &typed(&variables)).unwrap_or(Ty::Dyn);
        variables.insert(name.to_string(), ty);
    }
    let decls = typed(&variables);
    let mut out = Vec::new();
    for (i, v) in spec["validations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for field in ["expression", "messageExpression"] {
            let Some(expression) = v[field].as_str().filter(|e| !e.trim().is_empty()) else {
                continue;
            };
            if let Err(e) = issues(expression, &decls) {
                out.push((format!("spec.validations[{i}].{field}"), e));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn causes(spec: Value) -> Vec<String> {
        let mut out = Vec::new();
        validate_policy_expressions(&spec, &mut out);
        out.iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn well_formed_policy_expressions_pass() {
        assert!(causes(json!({
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "variables": [{"name": "limit", "expression": "int(params.data.max)"},
                          {"name": "over", "expression": "object.spec.replicas > variables.limit"}],
            "validations": [{"expression": "!variables.over", "messageExpression": "'max is ' + string(variables.limit)"},
                            {"expression": "authorizer.group('apps').resource('deployments').check('scale').allowed()"}],
        }))
        .is_empty());
    }

    #[test]
    fn compile_errors_types_and_undeclared_references() {
        let got = causes(json!({
            "variables": [{"name": "a", "expression": "variables.b + 1"}, {"name": "b", "expression": "1"}],
            "validations": [
                {"expression": "object.spec.replicas"},
                {"expression": "params.x == 1"},
                {"expression": "object.x ==", "messageExpression": "1 + 1"},
            ],
        }));
        assert_eq!(got.len(), 5, "{got:#?}");
        assert!(got[0].starts_with("spec.variables[0].expression: Invalid value: \"variables.b + 1\": compilation failed: ERROR: <input>:1:10: undefined field 'b'"), "{}", got[0]);
        assert_eq!(
            got[1],
            "spec.validations[0].expression: Invalid value: \"object.spec.replicas\": must evaluate to bool"
        );
        assert!(
            got[2].contains("undeclared reference to 'params' (in container '')"),
            "{}",
            got[2]
        );
        assert!(got[3].starts_with("spec.validations[2].expression: Invalid value: \"object.x ==\": compilation failed: ERROR: <input>:1:"), "{}", got[3]);
        assert_eq!(
            got[4],
            "spec.validations[2].messageExpression: Invalid value: \"1 + 1\": must evaluate to string"
        );
    }

    fn deployment_like() -> CheckedTypes {
        let schema = json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object", "properties": {"name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}});
        CheckedTypes {
            object: Ty::from_schema(&schema, false),
            params: None,
        }
    }

    #[test]
    fn typed_objects_show_type_confusion_as_upstreams_e2e_expects() {
        let types = deployment_like();
        let good = json!({"validations": [{"expression": "object.spec.replicas > 1",
            "messageExpression": "'got ' + string(object.spec.replicas)"},
            {"expression": "object.metadata.labels['app'] == 'x'"}]});
        assert!(policy_type_issues(&good, &types).is_empty());
        let confused = json!({"validations": [{"expression": "object.spec.replicas > '1'",
            "messageExpression": "'wants replicas > 1, got ' + object.spec.replicas"},
            {"expression": "object.spec.maxRetries < 10"}]});
        let got = policy_type_issues(&confused, &types);
        assert_eq!(got.len(), 3, "{got:#?}");
        assert_eq!(got[0].0, "spec.validations[0].expression");
        assert!(
            got[0]
                .1
                .contains("found no matching overload for '_>_' applied to '(int, string)'"),
            "{}",
            got[0].1
        );
        assert_eq!(got[1].0, "spec.validations[0].messageExpression");
        assert!(
            got[1]
                .1
                .contains("found no matching overload for '_+_' applied to '(string, int)'"),
            "{}",
            got[1].1
        );
        assert_eq!(got[2].0, "spec.validations[1].expression");
        assert!(
            got[2].1.contains("undefined field 'maxRetries'"),
            "{}",
            got[2].1
        );
    }

    #[test]
    fn typed_variables_carry_their_type_and_params_need_a_known_kind() {
        let mut types = deployment_like();
        let spec = json!({
            "variables": [{"name": "r", "expression": "object.spec.replicas"}],
            "validations": [{"expression": "variables.r > 'x'"}, {"expression": "params.max > 1"}]});
        let got = policy_type_issues(&spec, &types);
        assert_eq!(got.len(), 2, "{got:#?}");
        assert!(
            got[0].1.contains("applied to '(int, string)'"),
            "{}",
            got[0].1
        );
        assert!(
            got[1].1.contains("undeclared reference to 'params'"),
            "{}",
            got[1].1
        );
        types.params = Some(Ty::Dyn);
        assert_eq!(policy_type_issues(&spec, &types).len(), 1);
    }
}
