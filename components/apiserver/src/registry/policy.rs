//! policy/v1 PodDisruptionBudget: upstream's validation (pkg/apis/policy/validation) with its field
//! paths and messages, kubectl's columns (the printers' podDisruptionBudgetColumnDefinitions), a
//! status subresource the disruption controller writes, and generation for observedGeneration.
//! What a budget says about one eviction is `eviction.rs`; the eviction handler does the I/O.

pub mod eviction;
pub mod validation;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{json, Value};

use super::columns::{self as c, col};
use super::strategy::{typed, ResourceSpec};
use crate::status::Cause;

pub use validation::percent;

const POLICIES: &[&str] = &["AlwaysAllow", "IfHealthyBudget"];

/// `IntOrString.String()` of minAvailable / maxUnavailable, `N/A` when unset.
fn int_or_string_cell(v: &Value) -> Value {
    match v {
        Value::String(s) => json!(s),
        Value::Number(n) => json!(n.to_string()),
        _ => json!("N/A"),
    }
}

fn min_available(obj: &Value, _: i64) -> Value {
    int_or_string_cell(&obj["spec"]["minAvailable"])
}

fn max_unavailable(obj: &Value, _: i64) -> Value {
    int_or_string_cell(&obj["spec"]["maxUnavailable"])
}

fn allowed_disruptions(obj: &Value, _: i64) -> Value {
    json!(obj["status"]["disruptionsAllowed"].as_i64().unwrap_or(0))
}

/// Go's `%#v` of a pointer field of the spec. Upstream prints the address, which no client can
/// use; kiln prints what it points at in the same syntax.
fn go_pointer(type_: &str, v: &Value) -> String {
    match v {
        Value::Null => format!("(*{type_})(nil)"),
        Value::String(s) if type_ != "intstr.IntOrString" => format!("&{s:?}"),
        other if type_ == "intstr.IntOrString" => {
            format!("&{}", validation::go_int_or_string(other))
        }
        _ => format!("&{type_}{{...}}"),
    }
}

/// The spec as upstream's `field.Invalid(spec, spec, ...)` renders it (`%#v`).
fn go_spec(spec: &Value) -> String {
    format!(
        "policy.PodDisruptionBudgetSpec{{MinAvailable:{}, Selector:{}, MaxUnavailable:{}, UnhealthyPodEvictionPolicy:{}}}",
        go_pointer("intstr.IntOrString", &spec["minAvailable"]),
        go_pointer("v1.LabelSelector", &spec["selector"]),
        go_pointer("intstr.IntOrString", &spec["maxUnavailable"]),
        go_pointer("policy.UnhealthyPodEvictionPolicyType", &spec["unhealthyPodEvictionPolicy"]),
    )
}

/// Upstream's ValidatePodDisruptionBudgetSpec, plus the status rules of
/// ValidatePodDisruptionBudgetStatusUpdate (kiln validates every write; the status a create keeps
/// and a main update carries over passes them as well).
pub fn pdb_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    let (min, max) = (&spec["minAvailable"], &spec["maxUnavailable"]);
    if !min.is_null() && !max.is_null() {
        causes.push(Cause::invalid_raw(
            "spec",
            &go_spec(spec),
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    if !min.is_null() {
        causes.extend(validation::int_or_percent(min, "spec.minAvailable"));
    }
    if !max.is_null() {
        causes.extend(validation::int_or_percent(max, "spec.maxUnavailable"));
    }
    causes.extend(validation::label_selector(
        &spec["selector"],
        "spec.selector",
    ));
    if let Some(policy) = spec["unhealthyPodEvictionPolicy"].as_str() {
        if !POLICIES.contains(&policy) {
            causes.push(Cause {
                reason: "FieldValueNotSupported",
                message: format!(
                    "Unsupported value: {policy:?}: supported values: \"AlwaysAllow\", \"IfHealthyBudget\""
                ),
                field: "spec.unhealthyPodEvictionPolicy".into(),
            });
        }
    }
    let status = &obj["status"];
    causes.extend(validation::conditions(
        &status["conditions"],
        "status.conditions",
    ));
    for field in [
        "disruptionsAllowed",
        "currentHealthy",
        "desiredHealthy",
        "expectedPods",
    ] {
        if status[field].as_i64().is_some_and(|n| n < 0) {
            causes.push(Cause::invalid(
                &format!("status.{field}"),
                &status[field],
                "must be greater than or equal to 0",
            ));
        }
    }
    causes
}

pub static PODDISRUPTIONBUDGETS: ResourceSpec = ResourceSpec {
    group: "policy",
    version: "v1",
    plural: "poddisruptionbudgets",
    singular: "poddisruptionbudget",
    kind: "PodDisruptionBudget",
    list_kind: "PodDisruptionBudgetList",
    short_names: &["pdb"],
    categories: &[],
    status_subresource: true,
    // Upstream's status strategy resets only the spec: /status may change labels and annotations.
    status_takes_metadata: true,
    generation: true,
    table: &[
        c::NAME_COL,
        col(
            "Min Available",
            "string",
            "",
            "The minimum number of pods that must be available.",
            0,
            min_available,
        ),
        col(
            "Max Unavailable",
            "string",
            "",
            "The maximum number of pods that may be unavailable.",
            0,
            max_unavailable,
        ),
        col(
            "Allowed Disruptions",
            "integer",
            "",
            "Calculated number of pods that may be disrupted at this time.",
            0,
            allowed_disruptions,
        ),
        c::AGE_COL,
    ],
    decode: typed::<PodDisruptionBudget>,
    validate: pdb_validation,
    ..ResourceSpec::BASE
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::lifecycle::{prepare_create, FieldValidation};

    fn pdb(spec: Value) -> Value {
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "foo", "namespace": "default"}, "spec": spec})
    }

    fn fields(obj: &Value) -> Vec<String> {
        pdb_validation(obj).into_iter().map(|c| c.field).collect()
    }

    #[test]
    fn valid_budgets() {
        for spec in [
            json!({"minAvailable": 2, "selector": {"matchLabels": {"foo": "bar"}}}),
            json!({"minAvailable": "1%", "selector": {"matchLabels": {"foo": "bar"}}}),
            json!({"maxUnavailable": "100%", "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
            json!({"maxUnavailable": 0, "selector": {}, "unhealthyPodEvictionPolicy": "IfHealthyBudget"}),
            json!({}),
        ] {
            assert!(fields(&pdb(spec.clone())).is_empty(), "{spec}");
        }
    }

    #[test]
    fn min_and_max_are_mutually_exclusive() {
        let causes = pdb_validation(&pdb(json!({"minAvailable": 1, "maxUnavailable": "10%"})));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec");
        assert_eq!(causes[0].reason, "FieldValueInvalid");
        assert!(causes[0]
            .message
            .ends_with(": minAvailable and maxUnavailable cannot be both set"));
        assert!(causes[0]
            .message
            .starts_with("Invalid value: policy.PodDisruptionBudgetSpec{MinAvailable:&intstr.IntOrString{Type:0, IntVal:1"));
    }

    #[test]
    fn values_and_policy_are_checked() {
        assert_eq!(
            fields(&pdb(json!({"minAvailable": -1}))),
            ["spec.minAvailable"]
        );
        assert_eq!(
            fields(&pdb(json!({"maxUnavailable": "120%"}))),
            ["spec.maxUnavailable"]
        );
        assert_eq!(
            fields(&pdb(json!({"maxUnavailable": "abc"}))),
            ["spec.maxUnavailable"]
        );
        let causes = pdb_validation(&pdb(json!({"unhealthyPodEvictionPolicy": "Never"})));
        assert_eq!(causes[0].field, "spec.unhealthyPodEvictionPolicy");
        assert_eq!(
            causes[0].message,
            "Unsupported value: \"Never\": supported values: \"AlwaysAllow\", \"IfHealthyBudget\""
        );
        assert_eq!(
            fields(&pdb(
                json!({"selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}})
            )),
            ["spec.selector.matchExpressions[0].values"]
        );
        let mut negative = pdb(json!({}));
        negative["status"] = json!({"disruptionsAllowed": -1, "currentHealthy": 0,
                                    "desiredHealthy": 0, "expectedPods": 0});
        assert_eq!(fields(&negative), ["status.disruptionsAllowed"]);
    }

    #[test]
    fn created_with_generation_and_zero_status() {
        let obj = prepare_create(
            &PODDISRUPTIONBUDGETS,
            Some("default"),
            pdb(json!({"minAvailable": 1, "selector": {"matchLabels": {"foo": "bar"}}})),
            FieldValidation::Ignore,
        )
        .unwrap();
        assert_eq!(obj["metadata"]["generation"], 1);
        assert_eq!(
            obj["status"],
            json!({"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0})
        );
    }

    #[test]
    fn columns_are_upstreams() {
        let names: Vec<&str> = PODDISRUPTIONBUDGETS.table.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "Name",
                "Min Available",
                "Max Unavailable",
                "Allowed Disruptions",
                "Age"
            ]
        );
        let mut obj = pdb(json!({"minAvailable": "50%"}));
        obj["status"]["disruptionsAllowed"] = json!(3);
        let cells: Vec<Value> = PODDISRUPTIONBUDGETS.table[1..4]
            .iter()
            .map(|c| (c.cell)(&obj, 0))
            .collect();
        assert_eq!(cells, [json!("50%"), json!("N/A"), json!(3)]);
        let obj = pdb(json!({"maxUnavailable": 1}));
        assert_eq!((PODDISRUPTIONBUDGETS.table[1].cell)(&obj, 0), "N/A");
        assert_eq!((PODDISRUPTIONBUDGETS.table[2].cell)(&obj, 0), "1");
        assert_eq!((PODDISRUPTIONBUDGETS.table[3].cell)(&obj, 0), 0);
    }
}
