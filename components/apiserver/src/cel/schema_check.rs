//! Compile-time checks of a CRD schema's `x-kubernetes-validations`, as upstream's CRD validation
//! runs them on create and update: each rule must compile, reference only declared fields
//! (`check.rs` over the node's schema type) and be a bool; a messageExpression must compile and be
//! a string. Errors carry upstream's field paths and its `apiextensions.ValidationRule{...}` value.

use serde_json::Value;

use super::check::{check, Decls};
use super::program::Program;
use super::types::Ty;
use crate::status::Cause;

/// Checks every rule in `schema` (an openAPIV3Schema) found below `path`.
pub fn check_schema_rules(schema: &Value, path: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    walk(schema, path, true, &mut out);
    out
}

fn walk(schema: &Value, path: &str, root: bool, out: &mut Vec<Cause>) {
    if !schema.is_object() {
        return;
    }
    if let Some(rules) = schema["x-kubernetes-validations"].as_array() {
        let ty = Ty::from_schema(schema, root);
        for (i, rule) in rules.iter().enumerate() {
            check_rule(
                rule,
                &ty,
                &format!("{path}.x-kubernetes-validations[{i}]"),
                out,
            );
        }
    }
    for (k, v) in schema["properties"].as_object().into_iter().flatten() {
        walk(v, &format!("{path}.properties[{k}]"), false, out);
    }
    walk(&schema["items"], &format!("{path}.items"), false, out);
    walk(
        &schema["additionalProperties"],
        &format!("{path}.additionalProperties"),
        false,
        out,
    );
}

fn check_rule(rule: &Value, ty: &Ty, path: &str, out: &mut Vec<Cause>) {
    let text = rule["rule"].as_str().unwrap_or("");
    if text.trim().is_empty() {
        out.push(Cause::required(
            &format!("{path}.rule"),
            "rule is not specified",
        ));
        return;
    }
    let old_self = if rule["optionalOldSelf"].as_bool() == Some(true) {
        Ty::Optional(Box::new(ty.clone()))
    } else {
        ty.clone()
    };
    let decls = Decls::new()
        .var("self", ty.clone())
        .var("oldSelf", old_self);
    let invalid = |field: &str, detail: String| {
        Cause::invalid_raw(&format!("{path}.{field}"), &go_rule(rule), &detail)
    };
    match typed(text, &decls) {
        Err(e) => {
            out.push(invalid("rule", format!("compilation failed: {e}")));
            return;
        }
        Ok(t) if t != Ty::Bool && t != Ty::Unknown => {
            out.push(invalid(
                "rule",
                "cel expression must evaluate to a bool".into(),
            ));
            return;
        }
        Ok(_) => {}
    }
    let message = rule["messageExpression"].as_str().unwrap_or("");
    if message.is_empty() {
        return;
    }
    match typed(message, &decls) {
        Err(e) => out.push(invalid(
            "messageExpression",
            format!("messageExpression compilation failed: {e}"),
        )),
        Ok(t) if t != Ty::String && t != Ty::Unknown => out.push(invalid(
            "messageExpression",
            "messageExpression must evaluate to a string".into(),
        )),
        Ok(_) => {}
    }
}

/// Parses and checks: the issue text (cel-go's `ERROR: <input>:…`) or the result type.
fn typed(source: &str, decls: &Decls) -> Result<Ty, String> {
    let program = Program::compile(source).map_err(|e| match e {
        super::CelError::Compile(text) => text,
        other => other.to_string(),
    })?;
    check(&program, decls)
}

/// Go's `%#v` of the internal ValidationRule, the value upstream's field error shows. Set
/// pointers print their value here where Go would print an address.
fn go_rule(rule: &Value) -> String {
    let s = |k: &str| format!("{:?}", rule[k].as_str().unwrap_or(""));
    let reason = match rule["reason"].as_str() {
        Some(r) => format!("(*apiextensions.FieldValueErrorReason)({r:?})"),
        None => "(*apiextensions.FieldValueErrorReason)(nil)".into(),
    };
    let optional = match rule["optionalOldSelf"].as_bool() {
        Some(b) => format!("(*bool)({b})"),
        None => "(*bool)(nil)".into(),
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{optional}}}",
        s("rule"),
        s("message"),
        s("messageExpression"),
        s("fieldPath"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(rules: Value) -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": rules,
            "properties": {"replicas": {"type": "integer"}, "name": {"type": "string"}}}}})
    }

    fn messages(rules: Value) -> Vec<String> {
        check_schema_rules(&schema(rules), "spec.validation.openAPIV3Schema")
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn good_rules_pass() {
        assert!(messages(json!([
            {"rule": "self.replicas <= 5", "messageExpression": "'too many: ' + string(self.replicas)"},
            {"rule": "self.name == oldSelf.name"},
            {"rule": "!oldSelf.hasValue() || self.name == oldSelf.value().name", "optionalOldSelf": true},
        ]))
        .is_empty());
    }

    #[test]
    fn unknown_field_is_refused_with_upstream_path_and_value() {
        assert_eq!(
            messages(json!([{"rule": "self.replicaz <= 5"}])),
            ["spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{Rule:\"self.replicaz <= 5\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}: compilation failed: ERROR: <input>:1:5: undefined field 'replicaz'\n | self.replicaz <= 5\n | ....^"]
        );
    }

    #[test]
    fn syntax_errors_and_result_types() {
        let got = messages(json!([
            {"rule": "self.replicas <= "},
            {"rule": "self.replicas + 1"},
            {"rule": "true", "messageExpression": "self.replicas"},
            {"rule": "true", "messageExpression": "'a' +"},
            {"rule": "  "},
        ]));
        assert_eq!(got.len(), 5, "{got:#?}");
        assert!(
            got[0].contains(
                "x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{"
            ) && got[0].contains(": compilation failed: ERROR: <input>:1:"),
            "{}",
            got[0]
        );
        assert!(
            got[1].ends_with(": cel expression must evaluate to a bool"),
            "{}",
            got[1]
        );
        assert!(got[2].starts_with("spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[2].messageExpression: Invalid value: ") && got[2].ends_with(": messageExpression must evaluate to a string"), "{}", got[2]);
        assert!(
            got[3].contains(": messageExpression compilation failed: ERROR: <input>:1:"),
            "{}",
            got[3]
        );
        assert!(
            got[4].ends_with(
                "x-kubernetes-validations[4].rule: Required value: rule is not specified"
            ),
            "{}",
            got[4]
        );
    }
}
