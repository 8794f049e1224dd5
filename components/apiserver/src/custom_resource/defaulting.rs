//! Schema defaults (`default:` in a CRD's structural schema), applied top-down as upstream's
//! defaulting: a missing (or null, when not nullable) field gets its default, and the defaulted
//! value is itself defaulted further.

use serde_json::Value;

/// Whether any node of the schema has a `default`.
pub fn declares_defaults(schema: &Value) -> bool {
    if schema.get("default").is_some() {
        return true;
    }
    let children = schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|p| p.values())
        .chain(schema.get("items").filter(|i| i.is_object()))
        .chain(schema.get("additionalProperties").filter(|a| a.is_object()));
    children.into_iter().any(declares_defaults)
}

/// Applies defaults below the root (the root's apiVersion/kind/metadata are never defaulted).
pub fn apply(schema: &Value, obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (key, child) in props {
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            default_field(map, key, child);
        }
    }
    for (key, value) in map.iter_mut() {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        if let Some(child) = child_schema(schema, key) {
            default_value(child, value);
        }
    }
}

fn child_schema<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    schema
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
}

fn default_field(map: &mut serde_json::Map<String, Value>, key: &str, child: &Value) {
    let Some(default) = child.get("default") else {
        return;
    };
    let nullable = child.get("nullable").and_then(Value::as_bool) == Some(true);
    match map.get(key) {
        None => {
            map.insert(key.to_string(), default.clone());
        }
        Some(Value::Null) if !nullable => {
            map.insert(key.to_string(), default.clone());
        }
        Some(_) => {}
    }
}

/// Defaults inside one value (its properties, items or map values).
pub fn default_value(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (key, child) in props {
                    default_field(map, key, child);
                }
            }
            for (key, v) in map.iter_mut() {
                if let Some(child) = child_schema(schema, key) {
                    default_value(child, v);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for item in items {
                    default_value(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::apply;
    use serde_json::json;

    #[test]
    fn defaults_fill_missing_and_nested_fields() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "default": {}, "properties": {
                "replicas": {"type": "integer", "default": 1},
                "mode": {"type": "string", "nullable": true, "default": "fast"},
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "protocol": {"type": "string", "default": "TCP"}}}}}}}});
        let mut obj = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}});
        apply(&schema, &mut obj);
        assert_eq!(obj["spec"], json!({"replicas": 1, "mode": "fast"}));

        let mut obj = json!({"spec": {"mode": null, "ports": [{"port": 80}, {"protocol": "UDP"}]}});
        apply(&schema, &mut obj);
        assert_eq!(
            obj["spec"]["mode"],
            json!(null),
            "nullable keeps an explicit null"
        );
        assert_eq!(obj["spec"]["replicas"], 1);
        assert_eq!(
            obj["spec"]["ports"],
            json!([{"port": 80, "protocol": "TCP"}, {"protocol": "UDP"}])
        );
    }
}
