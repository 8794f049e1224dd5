//! PATCH bodies: JSON merge patch (RFC 7386) and strategic merge patch. The strategic merge knows the
//! built-in kinds' merge keys by field name (containers by `name`, conditions by `type`, ...), which is
//! what kubectl's and the kubelet's patches rely on; other lists are replaced as in a merge patch.

use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Strategic,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PatchError {
    #[error("unsupported patch type {0:?}")]
    Unsupported(String),
    #[error("invalid patch: {0}")]
    Invalid(String),
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Result<Self, PatchError> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            other => Err(PatchError::Unsupported(other.to_string())),
        }
    }
}

pub fn apply(kind: PatchType, target: &Value, patch: &Value) -> Result<Value, PatchError> {
    if !patch.is_object() {
        return Err(PatchError::Invalid("a patch must be a JSON object".into()));
    }
    let mut out = target.clone();
    match kind {
        PatchType::Merge => merge(&mut out, patch),
        PatchType::Strategic => strategic(&mut out, patch)?,
    }
    Ok(out)
}

/// RFC 7386.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// The merge key of a list field of the built-in kinds, by field name; `None` = atomic list.
fn merge_key(field: &str, elements: &[Value]) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "conditions" | "addresses" => "type",
        "ownerReferences" => "uid",
        "taints" => "key",
        "hostAliases" => "ip",
        // Container ports merge by containerPort, Service ports by port.
        "ports" if elements.iter().any(|e| e.get("containerPort").is_some()) => "containerPort",
        "ports" => "port",
        _ => return None,
    })
}

/// Lists of scalars that merge as sets instead of being replaced.
fn is_set_list(field: &str) -> bool {
    field == "finalizers"
}

fn strategic(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replacement = p.clone();
        replacement.remove("$patch");
        *target = Value::Object(replacement);
        return Ok(());
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        return Ok(());
    };
    for (k, v) in p {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue; // ordering hints and directives already handled
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = v.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(list)) = t.get_mut(field) {
                list.retain(|x| !remove.contains(x));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (v, t.get_mut(k)) {
            (Value::Array(items), Some(Value::Array(existing))) => {
                if let Some(key) = merge_key(k, items) {
                    merge_list(existing, items, key)?;
                } else if is_set_list(k) {
                    for item in items {
                        if !existing.contains(item) {
                            existing.push(item.clone());
                        }
                    }
                } else {
                    *existing = strip_directives(items);
                }
            }
            (Value::Object(_), Some(existing)) => strategic(existing, v)?,
            (Value::Array(items), _) => {
                t.insert(k.clone(), Value::Array(strip_directives(items)));
            }
            (_, _) => {
                let mut fresh = Value::Null;
                strategic(&mut fresh, v)?;
                t.insert(k.clone(), fresh);
            }
        }
    }
    Ok(())
}

/// A patch list's elements without `$patch: delete` entries (for lists with no stored counterpart).
fn strip_directives(items: &[Value]) -> Vec<Value> {
    items
        .iter()
        .filter(|i| i.get("$patch").is_none())
        .cloned()
        .collect()
}

fn merge_list(existing: &mut Vec<Value>, items: &[Value], key: &str) -> Result<(), PatchError> {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *existing = strip_directives(items);
        return Ok(());
    }
    for item in items {
        let Some(id) = item.get(key) else {
            return Err(PatchError::Invalid(format!(
                "map in a list with merge key {key:?} has no {key:?} field"
            )));
        };
        let pos = existing.iter().position(|e| e.get(key) == Some(id));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                existing.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic(&mut existing[i], item)?,
            (None, false) => {
                let mut fresh = Value::Null;
                strategic(&mut fresh, item)?;
                existing.push(fresh);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_replaces_lists_and_deletes_nulls() {
        let t = json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]});
        let out = apply(PatchType::Merge, &t, &json!({"b": {"c": null}, "l": [3]})).unwrap();
        assert_eq!(out, json!({"a": 1, "b": {"d": 3}, "l": [3]}));
    }

    #[test]
    fn strategic_merges_conditions_by_type() {
        let t = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "x"},
            {"type": "MemoryPressure", "status": "False"}]}});
        let p = json!({"status": {
            "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "MemoryPressure"}],
            "conditions": [{"type": "Ready", "status": "True"}]}});
        let out = apply(PatchType::Strategic, &t, &p).unwrap();
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True", "reason": "x"},
                   {"type": "MemoryPressure", "status": "False"}])
        );
    }

    #[test]
    fn strategic_deletes_and_appends_by_key() {
        let t = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b"}]}});
        let p = json!({"spec": {"containers": [
            {"name": "b", "$patch": "delete"}, {"name": "c", "image": "3"}]}});
        let out = apply(PatchType::Strategic, &t, &p).unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a", "image": "1"}, {"name": "c", "image": "3"}])
        );
    }

    #[test]
    fn strategic_finalizers_merge_as_set() {
        let t = json!({"metadata": {"finalizers": ["a"]}});
        let out = apply(
            PatchType::Strategic,
            &t,
            &json!({"metadata": {"finalizers": ["a", "b"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        let out = apply(
            PatchType::Strategic,
            &out,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn json_patch_is_reported_unsupported() {
        assert!(PatchType::from_content_type("application/json-patch+json").is_err());
    }
}
