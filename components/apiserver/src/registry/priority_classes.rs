//! scheduling.k8s.io/v1 PriorityClass: a name for a pod priority. Validation as upstream's
//! ValidatePriorityClass (value at most one billion for user classes, the `system-` prefix reserved,
//! value and preemptionPolicy immutable); the two system classes every cluster has; kubectl's
//! columns as printPriorityClass. The Priority admission plugin (`admission::priority`) resolves a
//! pod's class into spec.priority.

use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde_json::{json, Value};

use super::columns::{self as c, col};
use super::strategy::{typed, ResourceSpec};
use crate::status::Cause;

pub const GROUP: &str = "scheduling.k8s.io";

/// Upstream's HighestUserDefinablePriority.
pub const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;

/// The system classes (name, value, description), created at start as upstream's apiserver does.
pub const SYSTEM_CLASSES: &[(&str, i64, &str)] = &[
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

const PREEMPTION_POLICIES: &[&str] = &["Never", "PreemptLowerPriority"];

fn defaults(obj: &mut Value) {
    if obj["preemptionPolicy"].is_null() {
        obj["preemptionPolicy"] = json!("PreemptLowerPriority");
    }
}

fn validation(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let value = obj["value"].as_i64();
    let system = SYSTEM_CLASSES.iter().find(|(n, _, _)| *n == name);
    match (system, value) {
        (Some((_, v, _)), Some(value)) if value != *v => causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "name and value of a system priority class must match the built-in one",
        )),
        (None, _) if name.starts_with("system-") => causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "priority class names with 'system-' prefix are reserved",
        )),
        (None, Some(v)) if v > HIGHEST_USER_PRIORITY => causes.push(Cause::forbidden(
            "value",
            &format!("maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"),
        )),
        _ => {}
    }
    if let Some(p) = obj["preemptionPolicy"].as_str() {
        if !PREEMPTION_POLICIES.contains(&p) {
            causes.push(Cause::not_supported(
                "preemptionPolicy",
                p,
                PREEMPTION_POLICIES,
            ));
        }
    }
    causes
}

fn validate_update(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for field in ["value", "preemptionPolicy"] {
        if old[field] != new[field] {
            causes.push(Cause::invalid(field, &new[field], "field is immutable"));
        }
    }
    causes
}

fn value_cell(obj: &Value, _: i64) -> Value {
    json!(obj["value"].as_i64().unwrap_or(0))
}

fn global_default_cell(obj: &Value, _: i64) -> Value {
    json!(obj["globalDefault"].as_bool().unwrap_or(false))
}

fn preemption_cell(obj: &Value, _: i64) -> Value {
    json!(obj["preemptionPolicy"].as_str().unwrap_or(""))
}

pub static PRIORITY_CLASSES: ResourceSpec = ResourceSpec {
    group: GROUP,
    plural: "priorityclasses",
    singular: "priorityclass",
    kind: "PriorityClass",
    list_kind: "PriorityClassList",
    namespaced: false,
    short_names: &["pc"],
    table: &[
        c::NAME_COL,
        col("Value", "integer", "", "value is the integer value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec.", 0, value_cell),
        col("Global-Default", "boolean", "", "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class. Only one PriorityClass can be marked as `globalDefault`. However, if more than one PriorityClasses exists with their `globalDefault` field set to true, the smallest value of such global default PriorityClasses will be used as the default priority.", 0, global_default_cell),
        c::AGE_COL,
        col("PreemptionPolicy", "string", "", "preemptionPolicy is the Policy for preempting pods with lower priority. One of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset.", 1, preemption_cell),
    ],
    decode: typed::<PriorityClass>,
    defaults,
    validate: validation,
    validate_update,
    ..ResourceSpec::BASE
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_and_system_classes() {
        let ok = json!({"metadata": {"name": "high"}, "value": 1000});
        assert!(validation(&ok).is_empty());
        let too_high = json!({"metadata": {"name": "high"}, "value": 2_000_000_000i64});
        assert_eq!(validation(&too_high)[0].field, "value");
        let reserved = json!({"metadata": {"name": "system-mine"}, "value": 1});
        assert_eq!(validation(&reserved)[0].field, "metadata.name");
        let builtin =
            json!({"metadata": {"name": "system-node-critical"}, "value": 2_000_001_000i64});
        assert!(validation(&builtin).is_empty());
        let mut changed = ok.clone();
        changed["value"] = json!(5);
        assert_eq!(validate_update(&ok, &changed)[0].field, "value");
    }
}
