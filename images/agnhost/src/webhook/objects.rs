//! Reading the fields the handlers need out of a request's object, with the two decoders upstream
//! uses: the universal deserializer (typed: an empty object decodes to an empty Pod) and plain
//! `json.Unmarshal` (an empty object is "unexpected end of JSON input").

use std::collections::BTreeMap;

use serde_json::Value;

static NULL: Value = Value::Null;

/// The universal deserializer's view of a request object: no object is an empty one.
pub fn typed(raw: Option<&Value>) -> &Value {
    raw.unwrap_or(&NULL)
}

/// `json.Unmarshal` of a request object: no bytes is an error, `null` is an empty object.
pub fn unmarshal(raw: Option<&Value>) -> Result<&Value, String> {
    match raw {
        None => Err("unexpected end of JSON input".into()),
        Some(v) if v.is_object() || v.is_null() => Ok(v),
        Some(v) => Err(format!(
            "json: cannot unmarshal {} into Go value of type struct",
            json_type(v)
        )),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_error(v: &Value, field: &str, go_type: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go struct field {field} of type {go_type}",
        json_type(v)
    )
}

/// The value at `path`, `None` when any step is missing or null (Go leaves the zero value).
fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    (!cur.is_null()).then_some(cur)
}

/// A `map[string]string` at `path`; `field` names it in Go's error text.
pub fn string_map(
    v: &Value,
    path: &[&str],
    field: &str,
) -> Result<BTreeMap<String, String>, String> {
    let Some(m) = at(v, path) else {
        return Ok(BTreeMap::new());
    };
    let m = m
        .as_object()
        .ok_or_else(|| type_error(m, field, "map[string]string"))?;
    m.iter()
        .filter(|(_, val)| !val.is_null())
        .map(|(k, val)| match val {
            Value::String(s) => Ok((k.clone(), s.clone())),
            other => Err(type_error(other, field, "string")),
        })
        .collect()
}

/// A string at `path` ("" when absent).
pub fn string(v: &Value, path: &[&str], field: &str) -> Result<String, String> {
    match at(v, path) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(type_error(other, field, "string")),
    }
}

/// A bool at `path` (false when absent).
pub fn boolean(v: &Value, path: &[&str], field: &str) -> Result<bool, String> {
    match at(v, path) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(type_error(other, field, "bool")),
    }
}

/// The `name` of each entry of a container list at `path`.
pub fn container_names(v: &Value, path: &[&str], field: &str) -> Result<Vec<String>, String> {
    let Some(list) = at(v, path) else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| type_error(list, field, "[]v1.Container"))?;
    list.iter()
        .map(|c| string(c, &["name"], &format!("{field}.name")))
        .collect()
}

/// The `Data` field of upstream's `struct { metav1.ObjectMeta; Data map[string]string }`: an untagged
/// field, which `encoding/json` matches case-insensitively (`data` in a custom resource).
pub fn untagged_data(v: &Value) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    if let Some(m) = v.as_object() {
        for key in m.keys().filter(|k| k.eq_ignore_ascii_case("data")) {
            out.extend(string_map(v, &[key], ".Data")?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decoders_differ_on_a_missing_object() {
        assert!(typed(None).is_null());
        assert_eq!(unmarshal(None).unwrap_err(), "unexpected end of JSON input");
    }

    #[test]
    fn maps_and_type_errors() {
        let v = json!({"metadata": {"labels": {"a": "b"}}});
        let m = string_map(&v, &["metadata", "labels"], "labels").unwrap();
        assert_eq!(m.get("a").map(String::as_str), Some("b"));
        let bad = json!({"metadata": {"labels": {"a": 1}}});
        assert_eq!(
            string_map(&bad, &["metadata", "labels"], "ObjectMeta.metadata.labels").unwrap_err(),
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string"
        );
    }

    #[test]
    fn data_matches_case_insensitively() {
        let m = untagged_data(&json!({"Data": {"x": "1"}, "data": {"y": "2"}})).unwrap();
        assert_eq!(m.len(), 2);
    }
}
