//! node.k8s.io/v1 RuntimeClass: the CRI handler a pod's sandbox runs with, the pod overhead it
//! adds and the nodes it may run on. Validation as pkg/apis/node/validation (the handler is an
//! immutable DNS label), kubectl's columns as printRuntimeClass. The RuntimeClass admission plugin
//! (`admission::runtime_class`) applies overhead and scheduling to pods.

use k8s_openapi::api::node::v1::RuntimeClass;
use serde_json::{json, Value};

use super::columns::{self as c, col};
use super::dns_names::{is_label, LABEL_MSG};
use super::policy::validation::{label_value_errors, qualified_name_errors};
use super::storage_quantity as quantity;
use super::strategy::{typed, ResourceSpec};
use crate::status::Cause;

pub const GROUP: &str = "node.k8s.io";

const OPERATORS: &[&str] = &["Equal", "Exists"];
const EFFECTS: &[&str] = &["NoExecute", "NoSchedule", "PreferNoSchedule"];

pub fn runtime_class_validation(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let handler = obj["handler"].as_str().unwrap_or("");
    if handler.is_empty() {
        causes.push(Cause::required("handler", ""));
    } else if !is_label(handler) {
        causes.push(Cause::invalid("handler", &json!(handler), LABEL_MSG));
    }
    for (name, q) in obj["overhead"]["podFixed"]
        .as_object()
        .into_iter()
        .flatten()
    {
        let at = format!("overhead.podFixed[{name}]");
        for msg in qualified_name_errors(name) {
            causes.push(Cause::invalid(&at, &json!(name), &msg));
        }
        match quantity::of(q) {
            None => causes.push(Cause::invalid(
                &at,
                q,
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            )),
            Some(v) if v.0 < 0 => causes.push(Cause::invalid(
                &at,
                q,
                "must be greater than or equal to 0",
            )),
            Some(_) => {}
        }
    }
    let scheduling = &obj["scheduling"];
    for (k, v) in scheduling["nodeSelector"].as_object().into_iter().flatten() {
        let at = "scheduling.nodeSelector";
        for msg in qualified_name_errors(k) {
            causes.push(Cause::invalid(at, &json!(k), &msg));
        }
        let v = v.as_str().unwrap_or("");
        for msg in label_value_errors(v) {
            causes.push(Cause::invalid(&format!("{at}[{k}]"), &json!(v), &msg));
        }
    }
    for (i, t) in scheduling["tolerations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        causes.extend(toleration(t, &format!("scheduling.tolerations[{i}]")));
    }
    causes
}

/// One toleration as core validation checks it (ValidateTolerations).
pub fn toleration(t: &Value, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let key = t["key"].as_str().unwrap_or("");
    let op = t["operator"].as_str().unwrap_or("Equal");
    if !key.is_empty() {
        for msg in qualified_name_errors(key) {
            causes.push(Cause::invalid(&format!("{at}.key"), &json!(key), &msg));
        }
    } else if op != "Exists" {
        causes.push(Cause::invalid(
            &format!("{at}.operator"),
            &json!(op),
            "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
        ));
    }
    let value = t["value"].as_str().unwrap_or("");
    match op {
        "Exists" if !value.is_empty() => causes.push(Cause::invalid(
            &format!("{at}.operator"),
            &json!(value),
            "value must be empty when `operator` is 'Exists'",
        )),
        "Equal" => {
            for msg in label_value_errors(value) {
                causes.push(Cause::invalid(&format!("{at}.value"), &json!(value), &msg));
            }
        }
        o if !OPERATORS.contains(&o) => causes.push(Cause::not_supported(
            &format!("{at}.operator"),
            o,
            OPERATORS,
        )),
        _ => {}
    }
    if let Some(effect) = t["effect"].as_str().filter(|e| !e.is_empty()) {
        if !EFFECTS.contains(&effect) {
            causes.push(Cause::not_supported(
                &format!("{at}.effect"),
                effect,
                EFFECTS,
            ));
        }
    }
    if t["tolerationSeconds"].is_number() && t["effect"].as_str() != Some("NoExecute") {
        causes.push(Cause::invalid(
            &format!("{at}.effect"),
            &t["effect"],
            "effect must be 'NoExecute' when `tolerationSeconds` is set",
        ));
    }
    causes
}

pub fn runtime_class_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    if old["handler"] != new["handler"] {
        return vec![Cause::invalid(
            "handler",
            &new["handler"],
            "field is immutable",
        )];
    }
    Vec::new()
}

fn handler(obj: &Value, _: i64) -> Value {
    json!(obj["handler"].as_str().unwrap_or(""))
}

pub static RUNTIME_CLASSES: ResourceSpec = ResourceSpec {
    group: GROUP,
    plural: "runtimeclasses",
    singular: "runtimeclass",
    kind: "RuntimeClass",
    list_kind: "RuntimeClassList",
    namespaced: false,
    table: &[
        c::NAME_COL,
        col(
            "Handler",
            "string",
            "",
            "Handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class.",
            0,
            handler,
        ),
        c::AGE_COL,
    ],
    decode: typed::<RuntimeClass>,
    validate: runtime_class_validation,
    validate_update: runtime_class_update_validation,
    ..ResourceSpec::BASE
};

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(c: &[Cause]) -> Vec<&str> {
        c.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn handler_is_a_required_immutable_label() {
        assert!(runtime_class_validation(&json!({"handler": "runc"})).is_empty());
        assert_eq!(fields(&runtime_class_validation(&json!({}))), ["handler"]);
        let bad = runtime_class_validation(&json!({"handler": "Run_C"}));
        assert!(bad[0].message.contains("RFC 1123 label"), "{bad:?}");
        let upd = runtime_class_update_validation(
            &json!({"handler": "runc"}),
            &json!({"handler": "crun"}),
        );
        assert!(upd[0].message.ends_with("field is immutable"));
    }

    #[test]
    fn overhead_and_scheduling_are_checked() {
        let ok = json!({"handler": "h", "overhead": {"podFixed": {"cpu": "10m", "memory": "1Mi"}},
            "scheduling": {"nodeSelector": {"kubernetes.io/os": "linux"},
                           "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]}});
        assert!(runtime_class_validation(&ok).is_empty());
        let bad = json!({"handler": "h", "overhead": {"podFixed": {"cpu": "-1", "memory": "lots"}},
            "scheduling": {"nodeSelector": {"bad key!": "v"},
                           "tolerations": [{"key": "k", "operator": "Exists", "value": "v"},
                                           {"key": "k", "effect": "Sometimes"}]}});
        assert_eq!(
            fields(&runtime_class_validation(&bad)),
            [
                "overhead.podFixed[cpu]",
                "overhead.podFixed[memory]",
                "scheduling.nodeSelector",
                "scheduling.tolerations[0].operator",
                "scheduling.tolerations[1].effect",
            ]
        );
    }
}
