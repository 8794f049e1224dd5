//! Validation rules over a whole structural schema, as apiextensions' CEL validator walks it:
//! each node's rules see that node's value; old values follow along where they correlate (object
//! properties and map keys always, list items only in `x-kubernetes-list-type: map` lists, by
//! their map keys), so transition rules deep in the tree compare like with like.

use serde_json::{Map, Value};

use super::rules::RuleSet;
use crate::status::Cause;

/// Checks every `x-kubernetes-validations` in `schema` (a version's openAPIV3Schema) against a
/// custom resource, and its stored form on an update.
pub fn validate_tree(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    // At the root, `self.metadata` offers only name and generateName, as upstream's root type.
    let root = root_view(obj);
    let old_root = old.map(root_view);
    let mut causes = Vec::new();
    walk(schema, &root, old_root.as_ref(), "", &mut causes);
    causes
}

fn root_view(obj: &Value) -> Value {
    let mut view = obj.clone();
    if let Some(meta) = obj["metadata"].as_object() {
        let kept: Map<String, Value> = meta
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "name" | "generateName"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        view["metadata"] = Value::Object(kept);
    }
    view
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn walk(schema: &Value, obj: &Value, old: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    if obj.is_null() || !schema.is_object() {
        return;
    }
    if schema["x-kubernetes-validations"].is_array() {
        causes.extend(RuleSet::from_schema(schema).check(obj, old, path));
    }
    for sub in schema["allOf"].as_array().into_iter().flatten() {
        walk(sub, obj, old, path, causes);
    }
    match obj {
        Value::Object(fields) => {
            // Only granular and atomic maps (the default) correlate old and new by key.
            let correlates = matches!(
                schema["x-kubernetes-map-type"].as_str(),
                None | Some("granular" | "atomic")
            );
            let old_field = |k: &str| old.filter(|_| correlates).and_then(|o| o.get(k));
            let additional = &schema["additionalProperties"];
            for (k, v) in fields {
                if additional.is_object() {
                    walk(additional, v, old_field(k), &format!("{path}[{k}]"), causes);
                }
                let sub = &schema["properties"][k];
                if sub.is_object() {
                    walk(sub, v, old_field(k), &child(path, k), causes);
                }
            }
        }
        Value::Array(items) => {
            let item_schema = &schema["items"];
            if !item_schema.is_object() {
                return;
            }
            let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
                .as_array()
                .map(|k| k.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let is_map_list = schema["x-kubernetes-list-type"] == "map" && !keys.is_empty();
            let old_items = old.and_then(Value::as_array);
            for (i, item) in items.iter().enumerate() {
                let old_item = old_items.filter(|_| is_map_list).and_then(|olds| {
                    olds.iter()
                        .find(|o| keys.iter().all(|k| o.get(*k) == item.get(*k)))
                });
                walk(item_schema, item, old_item, &format!("{path}[{i}]"), causes);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.metadata.name.startsWith('a')", "message": "name must start with a"},
                {"rule": "!has(self.metadata.labels)"},
            ],
            "properties": {
                "spec": {
                    "type": "object",
                    "x-kubernetes-validations": [
                        {"rule": "self.replicas <= self.maxReplicas", "fieldPath": ".replicas"},
                    ],
                    "properties": {
                        "replicas": {"type": "integer"},
                        "maxReplicas": {"type": "integer"},
                        "ports": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {
                                "type": "object",
                                "x-kubernetes-validations": [
                                    {"rule": "self.port == oldSelf.port", "message": "port is immutable"},
                                ],
                                "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                            },
                        },
                    },
                },
            },
        })
    }

    #[test]
    fn walks_nodes_with_paths_and_root_metadata_view() {
        let obj = json!({"apiVersion": "x/v1", "kind": "K",
            "metadata": {"name": "bob", "labels": {"a": "b"}},
            "spec": {"replicas": 4, "maxReplicas": 3}});
        let causes = validate_tree(&schema(), &obj, None);
        let got: Vec<(&str, &str)> = causes
            .iter()
            .map(|c| (c.field.as_str(), c.message.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("", "Invalid value: \"object\": name must start with a"),
                (
                    "spec.replicas",
                    "Invalid value: \"object\": failed rule: self.replicas <= self.maxReplicas"
                ),
            ]
        );
    }

    #[test]
    fn map_list_items_correlate_by_key() {
        let old = json!({"metadata": {"name": "a"}, "spec": {"replicas": 1, "maxReplicas": 1,
            "ports": [{"name": "http", "port": 80}, {"name": "dns", "port": 53}]}});
        let new = json!({"metadata": {"name": "a"}, "spec": {"replicas": 1, "maxReplicas": 1,
            "ports": [{"name": "dns", "port": 53}, {"name": "http", "port": 8080}, {"name": "new", "port": 1}]}});
        let causes = validate_tree(&schema(), &new, Some(&old));
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].field, "spec.ports[1]");
        assert_eq!(
            causes[0].message,
            "Invalid value: \"object\": port is immutable"
        );
    }
}
