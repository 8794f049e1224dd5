//! Upstream's example converter for the e2e tests' `stable.example.com` CRD: v1 keeps `hostPort`
//! (`"localhost:7070"`), v2 splits it into `host` and `port`.

use serde_json::{Map, Value};

use crate::gofmt::quote;
use crate::kube_json::go_sprint_s;

/// Why an object could not be converted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConvertError {
    /// Reported in the response's `result` (status Failure).
    #[error("{0}")]
    Failure(String),
    /// Upstream asserts `hostPort` is a string; anything else panics the handler.
    #[error("hostPort is not a string")]
    Panic,
}

const V1: &str = "stable.example.com/v1";
const V2: &str = "stable.example.com/v2";

/// Converts `object` to `to_version`; the caller sets `apiVersion` afterwards.
pub fn convert_example_crd(
    object: &Map<String, Value>,
    to_version: &str,
) -> Result<Map<String, Value>, ConvertError> {
    let from_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if to_version == from_version {
        return Err(ConvertError::Failure(format!(
            "conversion from a version to itself should not call the webhook: {to_version}"
        )));
    }
    let mut out = object.clone();
    match (from_version, to_version) {
        (V1, V2) => {
            if let Some(host_port) = out.remove("hostPort") {
                let host_port = host_port.as_str().ok_or(ConvertError::Panic)?;
                let parts: Vec<&str> = host_port.split(':').collect();
                let [host, port] = parts[..] else {
                    return Err(ConvertError::Failure(format!(
                        "invalid hostPort value `{host_port}`"
                    )));
                };
                out.insert("host".into(), Value::String(host.into()));
                out.insert("port".into(), Value::String(port.into()));
            }
        }
        (V2, V1) => {
            let host = out.remove("host");
            let port = out.remove("port");
            if host.is_some() || port.is_some() {
                let s = |v: Option<Value>| v.map(|v| go_sprint_s(&v)).unwrap_or_default();
                out.insert(
                    "hostPort".into(),
                    Value::String(format!("{}:{}", s(host), s(port))),
                );
            }
        }
        (V1 | V2, _) => {
            return Err(ConvertError::Failure(format!(
                "unexpected conversion version {}",
                quote(to_version)
            )))
        }
        _ => {
            return Err(ConvertError::Failure(format!(
                "unexpected conversion version {}",
                quote(from_version)
            )))
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn v1_host_port_splits_into_v2_host_and_port() {
        let out = convert_example_crd(
            &obj(json!({"apiVersion": V1, "kind": "E2eTestCrd", "hostPort": "localhost:7070"})),
            V2,
        )
        .unwrap();
        assert_eq!(
            Value::Object(out),
            json!({"apiVersion": V1, "kind": "E2eTestCrd", "host": "localhost", "port": "7070"})
        );
    }

    #[test]
    fn v2_host_and_port_join_into_v1_host_port() {
        let out = convert_example_crd(
            &obj(json!({"apiVersion": V2, "host": "localhost", "port": "7070"})),
            V1,
        )
        .unwrap();
        assert_eq!(out["hostPort"], "localhost:7070");
        assert!(!out.contains_key("host") && !out.contains_key("port"));
        let out = convert_example_crd(&obj(json!({"apiVersion": V2, "port": "1"})), V1).unwrap();
        assert_eq!(out["hostPort"], ":1");
        let out = convert_example_crd(&obj(json!({"apiVersion": V2})), V1).unwrap();
        assert!(!out.contains_key("hostPort"));
    }

    #[test]
    fn failures_carry_upstreams_messages() {
        let e = |v: Value, to: &str| convert_example_crd(&obj(v), to).unwrap_err().to_string();
        assert_eq!(
            e(json!({"apiVersion": V1}), V1),
            "conversion from a version to itself should not call the webhook: stable.example.com/v1"
        );
        assert_eq!(
            e(json!({"apiVersion": V1, "hostPort": "a:b:c"}), V2),
            "invalid hostPort value `a:b:c`"
        );
        assert_eq!(
            e(json!({"apiVersion": V1}), "stable.example.com/v3"),
            r#"unexpected conversion version "stable.example.com/v3""#
        );
        assert_eq!(
            e(json!({"apiVersion": "other/v1"}), V2),
            r#"unexpected conversion version "other/v1""#
        );
        assert_eq!(
            convert_example_crd(&obj(json!({"apiVersion": V1, "hostPort": 1})), V2),
            Err(ConvertError::Panic)
        );
    }
}
