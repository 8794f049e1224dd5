//! Pruning: fields a structural schema does not specify are dropped on write, unless the schema
//! says `x-kubernetes-preserve-unknown-fields: true` there. The root and embedded resources keep
//! apiVersion, kind and the ObjectMeta fields of their metadata. The dropped paths are returned so `fieldValidation=Strict` can refuse them
//! and Warn can report them.

use serde_json::Value;

/// Prunes below the root; the root's apiVersion, kind and metadata always stay.
pub fn prune_object(schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut dropped = Vec::new();
    prune_map(schema, obj, "", true, &mut dropped);
    dropped
}

/// ObjectMeta's fields: a custom resource's metadata (and an embedded resource's) keeps only
/// these, as upstream decodes it into ObjectMeta.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Drops the metadata fields ObjectMeta does not have.
fn prune_meta(meta: &mut Value, path: &str, dropped: &mut Vec<String>) {
    let Some(map) = meta.as_object_mut() else {
        return;
    };
    let unknown: Vec<String> = map
        .keys()
        .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
        .cloned()
        .collect();
    for key in unknown {
        map.remove(&key);
        dropped.push(join(path, &key));
    }
}

fn preserves(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn prune_map(
    schema: &Value,
    value: &mut Value,
    path: &str,
    keep_meta: bool,
    dropped: &mut Vec<String>,
) {
    let Some(map) = value.as_object_mut() else {
        return;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let keep_unknown = preserves(schema) || additional.is_some_and(|a| a.as_bool() == Some(true));
    let mut unknown = Vec::new();
    for (key, child) in map.iter_mut() {
        if keep_meta && matches!(key.as_str(), "apiVersion" | "kind") {
            continue;
        }
        if keep_meta && key == "metadata" {
            prune_meta(child, &join(path, key), dropped);
            continue;
        }
        let child_schema = props
            .and_then(|p| p.get(key))
            .or_else(|| additional.filter(|a| a.is_object()));
        match child_schema {
            Some(s) => prune_value(s, child, &join(path, key), dropped),
            None if keep_unknown => {}
            None => unknown.push(key.clone()),
        }
    }
    for key in unknown {
        map.remove(&key);
        dropped.push(join(path, &key));
    }
}

fn prune_value(schema: &Value, value: &mut Value, path: &str, dropped: &mut Vec<String>) {
    match value {
        Value::Object(_) => {
            let embedded = schema
                .get("x-kubernetes-embedded-resource")
                .and_then(Value::as_bool)
                == Some(true);
            let has_structure = schema.get("properties").is_some()
                || schema.get("additionalProperties").is_some()
                || !preserves(schema);
            // An embedded resource's metadata is ObjectMeta even where the rest is free-form.
            if has_structure || embedded {
                prune_map(schema, value, path, embedded, dropped);
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_value(item_schema, item, &format!("{path}[{i}]"), dropped);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::prune_object;
    use serde_json::json;

    #[test]
    fn metadata_keeps_only_object_meta_fields_at_the_root_and_in_embedded_resources() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"template": {"type": "object", "x-kubernetes-embedded-resource": true,
                "x-kubernetes-preserve-unknown-fields": true}}}}});
        let mut obj = json!({"apiVersion": "x/v1", "kind": "X",
            "metadata": {"name": "a", "labels": {"k": "v"}, "unknownMeta": 1},
            "spec": {"template": {"apiVersion": "v1", "kind": "Sub",
                "metadata": {"name": "s", "unknownSubMeta": 2}, "free": true}}});
        let dropped = prune_object(&schema, &mut obj);
        assert_eq!(
            dropped,
            [
                "metadata.unknownMeta",
                "spec.template.metadata.unknownSubMeta"
            ]
        );
        assert_eq!(obj["metadata"], json!({"name": "a", "labels": {"k": "v"}}));
        assert_eq!(obj["spec"]["template"]["free"], true);
    }

    #[test]
    fn unknown_fields_are_dropped_and_reported() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "a": {"type": "string"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "items": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}},
                "embedded": {"type": "object", "x-kubernetes-embedded-resource": true,
                             "properties": {"spec": {"type": "object"}}}}}}});
        let mut obj = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
            "spec": {"a": "x", "b": 1, "free": {"anything": [1]}, "labels": {"k": "v"},
                     "items": [{"n": 1, "m": 2}],
                     "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "junk": 1}},
            "extra": true});
        let mut dropped = prune_object(&schema, &mut obj);
        dropped.sort();
        assert_eq!(
            dropped,
            vec!["extra", "spec.b", "spec.embedded.junk", "spec.items[0].m"]
        );
        assert_eq!(obj["spec"]["free"], json!({"anything": [1]}));
        assert_eq!(obj["spec"]["items"], json!([{"n": 1}]));
        assert_eq!(obj["spec"]["embedded"]["metadata"]["name"], "p");
        assert_eq!(obj["metadata"]["name"], "a");
    }
}
