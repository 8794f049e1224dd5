//! ConfigMap and Secret data: keys validated as upstream's `IsConfigMapKey` (every key becomes a
//! file name in a volume and may become an environment variable, so "" or "../x" must never be stored),
//! and `immutable: true` enforced on updates.

use serde_json::{json, Value};

use crate::status::Cause;

const MAX_KEY_LEN: usize = 253;

/// Why `key` is no valid config key, in upstream's words; empty when it is one.
fn key_errors(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    if key.len() > MAX_KEY_LEN {
        out.push(format!("must be no more than {MAX_KEY_LEN} characters"));
    }
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        out.push(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' \
             (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is \
             '[-._a-zA-Z0-9]+')"
                .to_string(),
        );
    }
    if key == "." {
        out.push("must not be '.'".to_string());
    } else if key == ".." {
        out.push("must not be '..'".to_string());
    } else if key.starts_with("..") {
        out.push("must not start with '..'".to_string());
    }
    out
}

/// Every invalid key of the maps at `fields` (`data`, `binaryData`), and keys present in two of them.
fn validate_maps(obj: &Value, fields: &[&str]) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for field in fields {
        let Some(map) = obj[*field].as_object() else {
            continue;
        };
        for key in map.keys() {
            for detail in key_errors(key) {
                causes.push(Cause::invalid(
                    &format!("{field}[{key}]"),
                    &json!(key),
                    &detail,
                ));
            }
            if seen.iter().any(|(_, k)| k == key) {
                causes.push(Cause::invalid(
                    &format!("{field}[{key}]"),
                    &json!(key),
                    "duplicate of key present in data",
                ));
            }
            seen.push((field, key));
        }
    }
    causes
}

/// Upstream's rule for `immutable: true`: it cannot be unset, and the named maps cannot change.
fn immutable(old: &Value, new: &Value, fields: &[&str]) -> Vec<Cause> {
    if old["immutable"] != json!(true) {
        return Vec::new();
    }
    const DETAIL: &str = "field is immutable when `immutable` is set";
    let mut causes = Vec::new();
    if new["immutable"] != json!(true) {
        causes.push(Cause::forbidden("immutable", DETAIL));
    }
    for field in fields {
        let empty = |v: &Value| v.is_null() || v.as_object().is_some_and(|m| m.is_empty());
        if old[*field] != new[*field] && !(empty(&old[*field]) && empty(&new[*field])) {
            causes.push(Cause::forbidden(field, DETAIL));
        }
    }
    causes
}

pub fn configmap_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    immutable(old, new, &["data", "binaryData"])
}

pub fn secret_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    immutable(old, new, &["data"])
}

pub fn configmap_validation(obj: &Value) -> Vec<Cause> {
    validate_maps(obj, &["data", "binaryData"])
}

/// Secrets: `stringData` is already folded into `data` by the defaults.
pub fn secret_validation(obj: &Value) -> Vec<Cause> {
    validate_maps(obj, &["data"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_dotted_and_odd_keys_are_refused_with_upstreams_words() {
        for bad in ["", ".", "..", "..x", "a/b", "a b"] {
            let causes = configmap_validation(&json!({"data": {bad: "v"}}));
            assert!(!causes.is_empty(), "{bad:?} accepted");
            assert_eq!(causes[0].field, format!("data[{bad}]"));
        }
        let empty = configmap_validation(&json!({"data": {"": "v"}}));
        assert!(empty[0]
            .message
            .contains("a valid config key must consist of"));
        for good in ["key.name", "KEY_NAME", "key-name", ".hidden", "a..b"] {
            assert!(
                configmap_validation(&json!({"data": {good: "v"}})).is_empty(),
                "{good}"
            );
        }
        assert!(!secret_validation(&json!({"data": {"": "dg=="}})).is_empty());
        assert!(
            !configmap_validation(&json!({"data": {"k": "v"}, "binaryData": {"k": "dg=="}}))
                .is_empty()
        );
        assert_eq!(key_errors(&"k".repeat(254)).len(), 1);
    }

    #[test]
    fn immutable_data_and_flag_cannot_change() {
        let old = json!({"immutable": true, "data": {"a": "b"}});
        assert!(configmap_update_validation(
            &old,
            &json!({"immutable": true, "data": {"a": "b"}, "metadata": {"labels": {"x": "y"}}})
        )
        .is_empty());
        let changed =
            configmap_update_validation(&old, &json!({"immutable": true, "data": {"a": "c"}}));
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].field, "data");
        assert_eq!(
            changed[0].message,
            "Forbidden: field is immutable when `immutable` is set"
        );
        let unset = secret_update_validation(
            &json!({"immutable": true, "data": {"a": "Yg=="}}),
            &json!({"immutable": false, "data": {"a": "Yg=="}}),
        );
        assert_eq!(unset[0].field, "immutable");
        assert!(configmap_update_validation(
            &json!({"data": {"a": "b"}}),
            &json!({"data": {"a": "c"}})
        )
        .is_empty());
    }
}
