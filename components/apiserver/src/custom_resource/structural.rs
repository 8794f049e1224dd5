//! Whether a CRD's schema is structural (upstream's rules, the subset a user meets): every specified
//! field has a type unless it preserves unknown fields or is int-or-string, the root is an object,
//! patterns compile, list-maps name their keys, and defaults are valid and already pruned.

use serde_json::{json, Value};

use crate::status::Cause;

const TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];

/// Checks `schema` (a version's openAPIV3Schema) at `path`; appends problems to `out`.
pub fn check(schema: &Value, path: &str, out: &mut Vec<Cause>) {
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => {}
        None if preserves(schema) => {}
        None => out.push(Cause::required(
            &format!("{path}.type"),
            "must not be empty at the root",
        )),
        Some(other) => out.push(Cause::invalid(
            &format!("{path}.type"),
            &json!(other),
            "must be object at the root",
        )),
    }
    if let Some(meta) = schema.get("properties").and_then(|p| p.get("metadata")) {
        let extra: Vec<&String> = meta
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.keys())
            .filter(|k| !matches!(k.as_str(), "name" | "generateName"))
            .collect();
        if !extra.is_empty() {
            out.push(Cause::forbidden(
                &format!("{path}.properties[metadata]"),
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
    node(schema, path, true, out);
}

fn preserves(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn int_or_string(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true)
}

fn node(schema: &Value, path: &str, root: bool, out: &mut Vec<Cause>) {
    let ty = schema.get("type").and_then(Value::as_str);
    if let Some(t) = ty {
        if !TYPES.contains(&t) {
            out.push(Cause::not_supported(&format!("{path}.type"), t, TYPES));
        }
    }
    if int_or_string(schema) && ty.is_some() {
        out.push(Cause::invalid(
            &format!("{path}.type"),
            &json!(ty),
            "must be empty if x-kubernetes-int-or-string is true",
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        if let Err(e) = regex::Regex::new(pattern) {
            out.push(Cause::invalid(
                &format!("{path}.pattern"),
                &json!(pattern),
                &format!("must be a valid regular expression, but isn't: {e}"),
            ));
        }
    }
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
        let keys = schema
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array);
        if keys.is_none_or(|k| k.is_empty()) {
            out.push(Cause::required(
                &format!("{path}.x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        if schema["items"].get("type").and_then(Value::as_str) != Some("object") {
            out.push(Cause::invalid(
                &format!("{path}.items.type"),
                &schema["items"]["type"],
                "must be object if parent array's x-kubernetes-list-type is map",
            ));
        }
    }
    if let Some(default) = schema.get("default") {
        if root {
            out.push(Cause::forbidden(
                &format!("{path}.default"),
                "must not be set at the root",
            ));
        } else {
            let mut errors = Vec::new();
            super::schema::validate(schema, default, "", None, &mut errors);
            let mut pruned = json!({ "v": default.clone() });
            let wrapper = json!({"type": "object", "properties": {"v": schema}});
            let dropped = super::prune::prune_object(&wrapper, &mut pruned);
            if !errors.is_empty() {
                let msgs: Vec<String> = errors.iter().map(|c| c.message.clone()).collect();
                out.push(Cause::invalid(
                    &format!("{path}.default"),
                    default,
                    &msgs.join(", "),
                ));
            } else if !dropped.is_empty() {
                out.push(Cause::invalid(
                    &format!("{path}.default"),
                    default,
                    "must not have unknown fields",
                ));
            }
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (key, child) in props {
            let p = format!("{path}.properties[{key}]");
            if root && key == "metadata" {
                continue;
            }
            if child.get("type").is_none() && !preserves(child) && !int_or_string(child) {
                out.push(Cause::required(
                    &format!("{p}.type"),
                    "must not be empty for specified object fields",
                ));
            }
            node(child, &p, false, out);
        }
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        let p = format!("{path}.items");
        if items.get("type").is_none() && !preserves(items) && !int_or_string(items) {
            out.push(Cause::required(
                &format!("{p}.type"),
                "must not be empty for specified array items",
            ));
        }
        node(items, &p, false, out);
    } else if ty == Some("array") {
        out.push(Cause::required(
            &format!("{path}.items"),
            "must be specified",
        ));
    }
    if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        if schema.get("properties").is_some() {
            out.push(Cause::forbidden(
                &format!("{path}.additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        node(
            additional,
            &format!("{path}.additionalProperties"),
            false,
            out,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::check;
    use serde_json::json;

    fn problems(schema: serde_json::Value) -> Vec<String> {
        let mut out = Vec::new();
        check(&schema, "spec.versions[0].schema.openAPIV3Schema", &mut out);
        out.iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn structural_rules_name_the_field() {
        assert!(problems(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"n": {"type": "integer", "default": 1, "minimum": 0}}}}})
        )
        .is_empty());
        assert_eq!(
            problems(json!({"type": "object", "properties": {"spec": {"properties": {}}}})),
            vec!["spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"]
        );
        assert_eq!(
            problems(json!({"type": "string"})),
            vec!["spec.versions[0].schema.openAPIV3Schema.type: Invalid value: \"string\": must be object at the root"]
        );
        let p = problems(
            json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "("}}}),
        );
        assert!(p[0].starts_with("spec.versions[0].schema.openAPIV3Schema.properties[s].pattern: Invalid value: \"(\": must be a valid regular expression"), "{p:?}");
        let p = problems(
            json!({"type": "object", "properties": {"n": {"type": "integer", "default": "x"}}}),
        );
        assert!(p[0].contains("properties[n].default"), "{p:?}");
        assert!(problems(
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"any": {"x-kubernetes-preserve-unknown-fields": true},
                           "port": {"x-kubernetes-int-or-string": true}}})
        )
        .is_empty());
    }
}
