//! Duplicate keys in a request body. serde_json's `Value` keeps the last of a repeated key
//! silently, but upstream's strict decoding (`fieldValidation=Strict`) refuses them with
//! `duplicate field "spec.replicas"` and `Warn` reports them. This walks the body once with a serde
//! visitor (no `Value` is built) and returns the dotted path of every repeated key, in the order
//! they appear, in upstream's path syntax (`spec.containers[0].name`).

use std::collections::HashSet;
use std::fmt;

use axum::http::HeaderMap;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::registry::lifecycle::{
    duplicate_field_message, strict_decoding_error, unknown_fields_of, FieldValidation,
};
use crate::registry::ResourceSpec;
use crate::status::ApiError;

#[derive(Debug, thiserror::Error)]
pub enum DuplicateFieldsError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Yaml(#[from] serde_norway::Error),
}

/// Paths of repeated keys in a JSON body.
pub fn in_json(body: &[u8]) -> Result<Vec<String>, DuplicateFieldsError> {
    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    Scan {
        path: String::new(),
        out: &mut out,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(out.into_iter().map(|(path, _)| path).collect())
}

/// (path, key) of repeated keys in a YAML body (the first document).
fn yaml_keys(body: &[u8]) -> Result<Vec<(String, String)>, DuplicateFieldsError> {
    let mut out = Vec::new();
    let de = serde_norway::Deserializer::from_slice(body);
    Scan {
        path: String::new(),
        out: &mut out,
    }
    .deserialize(de)?;
    Ok(out)
}

/// Paths of repeated keys in a YAML body (the first document).
pub fn in_yaml(body: &[u8]) -> Result<Vec<String>, DuplicateFieldsError> {
    Ok(yaml_keys(body)?.into_iter().map(|(path, _)| path).collect())
}

/// The first repeated key of a YAML body as upstream's YAML decoder reports it:
/// `line 11: key "foo" already set in map`, the line being the repeated key's own.
pub fn yaml_duplicate_message(body: &[u8]) -> Option<String> {
    let (_, key) = yaml_keys(body).ok()?.into_iter().next()?;
    let line = serde_norway::from_slice::<serde_norway::Value>(body)
        .err()
        .and_then(|e| e.location())
        .map(|at| repeated_key_line(body, at.line(), at.column(), &key).unwrap_or(at.line()))?;
    Some(format!("line {line}: key \"{key}\" already set in map"))
}

/// serde_norway places a duplicate-key error at the start of the mapping (1-based line and
/// column). In a block mapping every key stands at that column, so the second line there naming
/// `key` is the repeated one. None for a flow mapping, whose keys share lines.
fn repeated_key_line(body: &[u8], line: usize, column: usize, key: &str) -> Option<usize> {
    let text = std::str::from_utf8(body).ok()?;
    let indent = column.checked_sub(1)?;
    let names_key = |rest: &str| {
        [
            format!("{key}:"),
            format!("\"{key}\":"),
            format!("'{key}':"),
        ]
        .iter()
        .any(|k| {
            rest.strip_prefix(k.as_str())
                .is_some_and(|after| after.is_empty() || after.starts_with([' ', '\t']))
        })
    };
    let mut seen = 0;
    for (n, l) in text.lines().enumerate().skip(line.checked_sub(1)?) {
        let at_key = if n + 1 == line {
            // The first line may open a sequence item (`- name: x`): the key starts at `column`.
            l.get(indent..).is_some_and(&names_key)
        } else {
            let trimmed = l.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let own = l.len() - trimmed.len();
            if own < indent {
                return None;
            }
            own == indent && names_key(trimmed)
        };
        if at_key {
            seen += 1;
            if seen == 2 {
                return Some(n + 1);
            }
        }
    }
    None
}

/// What a create or update does with the keys its body sets twice: nothing under `Ignore`, a
/// warning each under `Warn`, and under `Strict` the 400 naming them after the unknown fields, as
/// upstream's strict decoder words it. Protobuf bodies cannot repeat a key in a way JSON sees.
pub fn check(
    spec: &ResourceSpec,
    headers: &HeaderMap,
    body: &[u8],
    obj: &Value,
    validation: FieldValidation,
) -> Result<(), ApiError> {
    if validation == FieldValidation::Ignore {
        return Ok(());
    }
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let found = match content_type.split(';').next().unwrap_or("").trim() {
        "" | "application/json" | "*/*" => in_json(body),
        "application/yaml" | "application/x-yaml" | "text/yaml" => in_yaml(body),
        _ => return Ok(()),
    };
    // The body already parsed as the object, so a scan error cannot happen; if it did, the
    // object is what counts.
    let duplicates = found.unwrap_or_default();
    if duplicates.is_empty() {
        return Ok(());
    }
    match validation {
        FieldValidation::Strict => Err(strict_decoding_error(
            spec,
            &unknown_fields_of(spec, obj),
            &duplicates,
        )),
        _ => {
            duplicates
                .iter()
                .for_each(|d| crate::warnings::add(&duplicate_field_message(d)));
            Ok(())
        }
    }
}

struct Scan<'a> {
    path: String,
    /// (path, key) of each repeated key.
    out: &'a mut Vec<(String, String)>,
}

impl<'de> DeserializeSeed<'de> for Scan<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// A key of any scalar type, as text (YAML keys need not be strings).
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for Key {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map key")
    }
    fn visit_str<E>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_bool<E>(self, v: bool) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_i64<E>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_u64<E>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_f64<E>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_unit<E>(self) -> Result<String, E> {
        Ok("null".to_string())
    }
}

impl<'de> Visitor<'de> for Scan<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_i128<E>(self, _: i128) -> Result<(), E> {
        Ok(())
    }
    fn visit_u128<E>(self, _: u128) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_bytes<E>(self, _: &[u8]) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.deserialize(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.deserialize(d)
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, a: A) -> Result<(), A::Error> {
        // YAML tags (`!foo`) arrive as enums; their content holds no keys we judge.
        let _ = a.variant::<IgnoredAny>()?;
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            let seed = Scan {
                path: format!("{}[{i}]", self.path),
                out: &mut *self.out,
            };
            if seq.next_element_seed(seed)?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key_seed(Key)? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if seen.contains(&key) {
                self.out.push((path.clone(), key));
            } else {
                seen.insert(key);
            }
            map.next_value_seed(Scan {
                path,
                out: &mut *self.out,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_duplicates_are_named_by_path_in_order() {
        let body = br#"{"spec": {"unknownField": "foo", "replicas": 2, "replicas": 3,
            "template": {"spec": {"containers": [{"name": "a", "name": "b"}]}}},
            "spec2": 1, "spec2": 2}"#;
        assert_eq!(
            in_json(body).unwrap(),
            [
                "spec.replicas",
                "spec.template.spec.containers[0].name",
                "spec2"
            ]
        );
    }

    #[test]
    fn json_without_duplicates_is_clean_even_with_equal_keys_in_siblings() {
        let body = br#"{"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]}"#;
        assert!(in_json(body).unwrap().is_empty());
    }

    #[test]
    fn broken_json_is_an_error() {
        assert!(in_json(b"{\"a\": ").is_err());
        assert!(in_json(b"{} {}").is_err());
    }

    #[test]
    fn yaml_duplicates_are_found() {
        let body = b"apiVersion: v1\nkind: X\nspec:\n  unknown: uk1\n  foo: foo1\n  foo: foo2\n  ports:\n  - name: x\n    name: y\n";
        assert_eq!(in_yaml(body).unwrap(), ["spec.foo", "spec.ports[0].name"]);
    }

    #[test]
    fn yaml_duplicates_name_the_repeated_keys_line() {
        let body = b"apiVersion: v1\nkind: X\nmetadata:\n  name: a\nspec:\n  unknown: uk1\n  foo: foo1\n  # a comment\n  foo: foo2\n  ports:\n  - port: 1\n";
        assert_eq!(
            yaml_duplicate_message(body).as_deref(),
            Some("line 9: key \"foo\" already set in map")
        );
        // Inside a sequence item the mapping opens after `- `.
        let body = b"spec:\n  ports:\n  - name: x\n    port: 1\n    name: y\n";
        assert_eq!(
            yaml_duplicate_message(body).as_deref(),
            Some("line 5: key \"name\" already set in map")
        );
        // Keys with dots (labels) are matched whole.
        let body = b"metadata:\n  labels:\n    a.b/c: x\n    a.b/c: y\n";
        assert_eq!(
            yaml_duplicate_message(body).as_deref(),
            Some("line 4: key \"a.b/c\" already set in map")
        );
        assert_eq!(yaml_duplicate_message(b"a: 1\nb: 2\n"), None);
    }

    fn json_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::CONTENT_TYPE,
            "application/json".parse().unwrap(),
        );
        h
    }

    const DEPLOYMENT: &[u8] = br#"{"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"unknownField": "foo", "replicas": 2, "replicas": 3,
          "selector": {"matchLabels": {"app": "a"}},
          "template": {"metadata": {"labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}}}"#;

    #[test]
    fn strict_names_unknown_fields_then_duplicates_as_upstream() {
        use crate::registry::apps::DEPLOYMENTS;
        let obj: Value = serde_json::from_slice(DEPLOYMENT).unwrap();
        let e = check(
            &DEPLOYMENTS,
            &json_headers(),
            DEPLOYMENT,
            &obj,
            FieldValidation::Strict,
        )
        .unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.unknownField\", duplicate field \"spec.replicas\""
        );
    }

    #[test]
    fn warn_and_ignore_let_the_request_through() {
        use crate::registry::apps::DEPLOYMENTS;
        let obj: Value = serde_json::from_slice(DEPLOYMENT).unwrap();
        for v in [FieldValidation::Warn, FieldValidation::Ignore] {
            check(&DEPLOYMENTS, &json_headers(), DEPLOYMENT, &obj, v).unwrap();
        }
    }

    #[test]
    fn protobuf_bodies_are_not_scanned() {
        use crate::registry::apps::DEPLOYMENTS;
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::CONTENT_TYPE,
            "application/vnd.kubernetes.protobuf".parse().unwrap(),
        );
        let obj: Value = serde_json::from_slice(DEPLOYMENT).unwrap();
        check(&DEPLOYMENTS, &h, DEPLOYMENT, &obj, FieldValidation::Strict).unwrap();
    }
}
