//! Structural-schema validation of custom resources (JSONSchemaProps as CRDs carry it), with the
//! field errors kubectl shows on upstream: `spec.replicas: Invalid value: 15: spec.replicas in body
//! should be less than or equal to 10`. Validation walks the schema and the object together; CEL
//! rules (`x-kubernetes-validations`) run at each node where they are declared, with the stored
//! object's value at the same path as `oldSelf`.

use serde_json::{json, Map, Value};

use super::formats;
use crate::status::Cause;

/// Validates everything but apiVersion, kind and metadata (checked by the generic lifecycle).
pub fn validate_object(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut out = Vec::new();
    let Some(obj_map) = obj.as_object() else {
        return out;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    for (key, value) in obj_map {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        let child = props
            .and_then(|p| p.get(key))
            .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()));
        if let Some(child) = child {
            let old_child = old.and_then(|o| o.get(key));
            validate(child, value, key, old_child, &mut out);
        }
    }
    for name in required(schema) {
        if !matches!(name, "apiVersion" | "kind" | "metadata") && obj_map.get(name).is_none() {
            out.push(Cause::required(name, ""));
        }
    }
    // Root-level rules see the whole object (metadata included), as upstream's.
    if let Some(rules) = schema.get("x-kubernetes-validations") {
        out.extend(crate::cel::check_rules(rules, obj, old, ""));
    }
    out
}

fn required(schema: &Value) -> impl Iterator<Item = &str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The JSON type name upstream reports for a wrongly typed value.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if is_integral(n) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integral(n: &serde_json::Number) -> bool {
    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
}

fn type_matches(want: &str, value: &Value) -> bool {
    match (want, value) {
        ("object", Value::Object(_)) | ("array", Value::Array(_)) => true,
        ("string", Value::String(_)) | ("boolean", Value::Bool(_)) => true,
        ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => is_integral(n),
        _ => false,
    }
}

/// A number as Go's `%v` prints a float64 limit: `10`, `2.5`.
fn num(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        Some(f) => f.to_string(),
        None => v.to_string(),
    }
}

fn invalid(path: &str, value: &Value, detail: String) -> Cause {
    Cause::invalid(path, value, &detail)
}

fn too_many(path: &str, actual: usize, max: &Value) -> Cause {
    Cause {
        reason: "FieldValueTooMany",
        message: format!("Too many: {actual}: must have at most {} items", num(max)),
        field: path.to_string(),
    }
}

pub fn validate(
    schema: &Value,
    value: &Value,
    path: &str,
    old: Option<&Value>,
    out: &mut Vec<Cause>,
) {
    if value.is_null() {
        let nullable = schema.get("nullable").and_then(Value::as_bool) == Some(true);
        if !nullable && schema.get("type").is_some() {
            let want = schema["type"].as_str().unwrap_or("");
            out.push(invalid(
                path,
                &json!("null"),
                format!("{path} in body must be of type {want}: \"null\""),
            ));
        }
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    if int_or_string {
        let integer = value.as_number().is_some_and(is_integral);
        if !(value.is_string() || integer) {
            out.push(invalid(
                path,
                &json!(type_name(value)),
                format!(
                    "{path} in body must be of type integer,string: {:?}",
                    type_name(value)
                ),
            ));
            return;
        }
    } else if let Some(want) = schema.get("type").and_then(Value::as_str) {
        if !type_matches(want, value) {
            out.push(invalid(
                path,
                &json!(type_name(value)),
                format!(
                    "{path} in body must be of type {want}: {:?}",
                    type_name(value)
                ),
            ));
            return;
        }
    }
    check_enum(schema, value, path, out);
    match value {
        Value::String(s) => check_string(schema, s, value, path, out),
        Value::Number(_) => check_number(schema, value, path, out),
        Value::Array(items) => check_array(schema, items, value, path, old, out),
        Value::Object(map) => check_object(schema, map, value, path, old, out),
        _ => {}
    }
    for (i, sub) in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let _ = i;
        validate_junctor(sub, value, path, out);
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        let ok = any
            .iter()
            .any(|s| junctor_errors(s, value, path).is_empty());
        if !ok {
            out.push(invalid(
                path,
                value,
                format!("{path} in body must be of type {}", any_types(any)),
            ));
        }
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        let matching = one
            .iter()
            .filter(|s| junctor_errors(s, value, path).is_empty())
            .count();
        if matching != 1 {
            out.push(invalid(
                path,
                value,
                format!("{path} in body must validate one and only one schema (oneOf)"),
            ));
        }
    }
    if let Some(not) = schema.get("not") {
        if junctor_errors(not, value, path).is_empty() {
            out.push(invalid(
                path,
                value,
                format!("{path} in body should not validate the schema"),
            ));
        }
    }
    if let Some(rules) = schema.get("x-kubernetes-validations") {
        out.extend(crate::cel::check_rules(rules, value, old, path));
    }
}

/// allOf/anyOf/oneOf/not branches carry only value validations (structural schemas forbid types and
/// properties there, but they may restrict nested properties).
fn junctor_errors(schema: &Value, value: &Value, path: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    validate_junctor(schema, value, path, &mut out);
    out
}

fn validate_junctor(schema: &Value, value: &Value, path: &str, out: &mut Vec<Cause>) {
    validate(schema, value, path, None, out);
}

fn any_types(any: &[Value]) -> String {
    let types: Vec<&str> = any
        .iter()
        .filter_map(|s| s.get("type").and_then(Value::as_str))
        .collect();
    if types.is_empty() {
        "one of the anyOf schemas".to_string()
    } else {
        types.join(",")
    }
}

fn check_enum(schema: &Value, value: &Value, path: &str, out: &mut Vec<Cause>) {
    let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
        return;
    };
    if allowed.iter().any(|a| a == value) {
        return;
    }
    let list: Vec<String> = allowed.iter().map(|a| a.to_string()).collect();
    let shown = match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    out.push(Cause {
        reason: "FieldValueNotSupported",
        message: format!(
            "Unsupported value: {shown}: supported values: {}",
            list.join(", ")
        ),
        field: path.to_string(),
    });
}

fn check_string(schema: &Value, s: &str, value: &Value, path: &str, out: &mut Vec<Cause>) {
    let len = s.chars().count() as f64;
    if let Some(max) = schema
        .get("maxLength")
        .filter(|m| m.as_f64().is_some_and(|m| len > m))
    {
        out.push(Cause {
            reason: "FieldValueTooLong",
            message: format!("Too long: may not be more than {} bytes", num(max)),
            field: path.to_string(),
        });
    }
    if let Some(min) = schema
        .get("minLength")
        .filter(|m| m.as_f64().is_some_and(|m| len < m))
    {
        out.push(invalid(
            path,
            value,
            format!("{path} in body should be at least {} chars long", num(min)),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        // Patterns were compiled when the CRD was admitted; one that no longer compiles matches nothing.
        let matched = compiled(pattern).is_some_and(|re| re.is_match(s));
        if !matched {
            out.push(invalid(
                path,
                value,
                format!("{path} in body should match '{pattern}'"),
            ));
        }
    }
    if let Some(format) = schema.get("format").and_then(Value::as_str) {
        if !formats::valid(format, s) {
            out.push(invalid(
                path,
                value,
                format!("{path} in body must be of type {format}: {s:?}"),
            ));
        }
    }
}

/// Compiled patterns by source, so a write does not recompile its CRD's regexes.
static PATTERNS: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, Option<regex::Regex>>>,
> = std::sync::LazyLock::new(Default::default);

/// Bound on cached patterns; past it the cache starts over.
const MAX_PATTERNS: usize = 4096;

fn compiled(pattern: &str) -> Option<regex::Regex> {
    let mut cache = PATTERNS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(re) = cache.get(pattern) {
        return re.clone();
    }
    if cache.len() >= MAX_PATTERNS {
        cache.clear();
    }
    let re = regex::Regex::new(pattern).ok();
    cache.insert(pattern.to_string(), re.clone());
    re
}

fn check_number(schema: &Value, value: &Value, path: &str, out: &mut Vec<Cause>) {
    let Some(n) = value.as_f64() else { return };
    let flag = |k: &str| schema.get(k).and_then(Value::as_bool) == Some(true);
    if let Some(max) = schema.get("maximum").filter(|m| m.is_number()) {
        let m = max.as_f64().unwrap_or(f64::MAX);
        if flag("exclusiveMaximum") && n >= m {
            out.push(invalid(
                path,
                value,
                format!("{path} in body should be less than {}", num(max)),
            ));
        } else if n > m {
            out.push(invalid(
                path,
                value,
                format!(
                    "{path} in body should be less than or equal to {}",
                    num(max)
                ),
            ));
        }
    }
    if let Some(min) = schema.get("minimum").filter(|m| m.is_number()) {
        let m = min.as_f64().unwrap_or(f64::MIN);
        if flag("exclusiveMinimum") && n <= m {
            out.push(invalid(
                path,
                value,
                format!("{path} in body should be greater than {}", num(min)),
            ));
        } else if n < m {
            out.push(invalid(
                path,
                value,
                format!(
                    "{path} in body should be greater than or equal to {}",
                    num(min)
                ),
            ));
        }
    }
    if let Some(mult) = schema
        .get("multipleOf")
        .and_then(Value::as_f64)
        .filter(|m| *m > 0.0)
    {
        let q = n / mult;
        if (q - q.round()).abs() > 1e-9 {
            out.push(invalid(
                path,
                value,
                format!(
                    "{path} in body should be a multiple of {}",
                    num(&schema["multipleOf"])
                ),
            ));
        }
    }
    if let Some(format) = schema.get("format").and_then(Value::as_str) {
        let out_of_range = match format {
            "int32" => !(i32::MIN as f64..=i32::MAX as f64).contains(&n),
            _ => false,
        };
        if out_of_range {
            out.push(invalid(
                path,
                value,
                format!("{path} in body must be of type {format}: {value}"),
            ));
        }
    }
}

fn list_map_keys(schema: &Value) -> Vec<&str> {
    schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// The identity of a list-map entry: its key fields' values.
fn map_key(item: &Value, keys: &[&str]) -> Vec<Value> {
    keys.iter()
        .map(|k| item.get(*k).cloned().unwrap_or(Value::Null))
        .collect()
}

/// A list-map entry as Go prints the duplicate: `map[string]interface {}{"name":"a"}`.
fn go_map(item: &Value, keys: &[&str]) -> String {
    let parts: Vec<String> = keys
        .iter()
        .map(|k| format!("{k:?}:{}", item.get(*k).cloned().unwrap_or(Value::Null)))
        .collect();
    format!("map[string]interface {{}}{{{}}}", parts.join(", "))
}

fn check_array(
    schema: &Value,
    items: &[Value],
    value: &Value,
    path: &str,
    old: Option<&Value>,
    out: &mut Vec<Cause>,
) {
    if let Some(max) = schema
        .get("maxItems")
        .filter(|m| m.as_f64().is_some_and(|m| items.len() as f64 > m))
    {
        out.push(too_many(path, items.len(), max));
    }
    if let Some(min) = schema
        .get("minItems")
        .filter(|m| m.as_f64().is_some_and(|m| (items.len() as f64) < m))
    {
        out.push(invalid(
            path,
            value,
            format!("{path} in body should have at least {} items", num(min)),
        ));
    }
    let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
    let unique = schema.get("uniqueItems").and_then(Value::as_bool) == Some(true);
    if unique || list_type == Some("set") {
        for (i, item) in items.iter().enumerate() {
            if items[..i].contains(item) {
                out.push(Cause::duplicate(&format!("{path}[{i}]"), item));
            }
        }
    }
    let keys = list_map_keys(schema);
    if list_type == Some("map") && !keys.is_empty() {
        for (i, item) in items.iter().enumerate() {
            let k = map_key(item, &keys);
            if items[..i].iter().any(|o| map_key(o, &keys) == k) {
                out.push(Cause {
                    reason: "FieldValueDuplicate",
                    message: format!("Duplicate value: {}", go_map(item, &keys)),
                    field: format!("{path}[{i}]"),
                });
            }
        }
    }
    let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) else {
        return;
    };
    let old_items = old.and_then(Value::as_array);
    for (i, item) in items.iter().enumerate() {
        // Only list-maps correlate entries with the stored object (for transition rules).
        let old_item = match (list_type, old_items) {
            (Some("map"), Some(olds)) if !keys.is_empty() => {
                let k = map_key(item, &keys);
                olds.iter().find(|o| map_key(o, &keys) == k)
            }
            _ => None,
        };
        validate(item_schema, item, &format!("{path}[{i}]"), old_item, out);
    }
}

fn check_object(
    schema: &Value,
    map: &Map<String, Value>,
    value: &Value,
    path: &str,
    old: Option<&Value>,
    out: &mut Vec<Cause>,
) {
    if let Some(max) = schema
        .get("maxProperties")
        .filter(|m| m.as_f64().is_some_and(|m| map.len() as f64 > m))
    {
        out.push(too_many(path, map.len(), max));
    }
    if let Some(min) = schema
        .get("minProperties")
        .filter(|m| m.as_f64().is_some_and(|m| (map.len() as f64) < m))
    {
        out.push(invalid(
            path,
            value,
            format!(
                "{path} in body should have at least {} properties",
                num(min)
            ),
        ));
    }
    for name in required(schema) {
        if map.get(name).is_none() {
            out.push(Cause::required(&child_path(path, name), ""));
        }
    }
    if schema
        .get("x-kubernetes-embedded-resource")
        .and_then(Value::as_bool)
        == Some(true)
    {
        for field in ["apiVersion", "kind"] {
            if map
                .get(field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                out.push(Cause::required(
                    &child_path(path, field),
                    "must not be empty",
                ));
            }
        }
    }
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (key, child_value) in map {
        let child = props.and_then(|p| p.get(key)).or(additional);
        if let Some(child) = child {
            let old_child = old.and_then(|o| o.get(key));
            validate(child, child_value, &child_path(path, key), old_child, out);
        }
    }
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
