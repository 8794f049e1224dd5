//! core/v1 ResourceQuota and LimitRange: the objects the ResourceQuota and LimitRanger admission
//! plugins (`admission::resource_quota`, `admission::limit_ranger`) enforce, and the
//! controller-manager's resourcequota controller keeps the status of. Validation as upstream's
//! ValidateResourceQuota and ValidateLimitRange; kubectl's columns as printResourceQuota and
//! printLimitRange.

use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use kiln_common::quota::Amount;
use serde_json::{json, Value};

use super::columns::{self as c, col};
use super::storage_quantity as quantity;
use super::strategy::{typed, ResourceSpec};
use crate::status::Cause;

/// Scopes upstream knows, in its error message's (sorted) order.
pub const SCOPES: &[&str] = &[
    "BestEffort",
    "CrossNamespacePodAffinity",
    "NotBestEffort",
    "NotTerminating",
    "PriorityClass",
    "Terminating",
    "VolumeAttributesClass",
];

/// Resources only whole numbers make sense for (object counts).
fn integer_resource(name: &str) -> bool {
    name.starts_with("count/")
        || [
            "pods",
            "services",
            "services.nodeports",
            "services.loadbalancers",
            "replicationcontrollers",
            "resourcequotas",
            "secrets",
            "configmaps",
            "persistentvolumeclaims",
        ]
        .contains(&name)
        || name.ends_with("/persistentvolumeclaims")
}

/// A ResourceList under `path`: valid quantities, not negative, whole for object counts.
fn resource_list_causes(list: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (name, q) in list.as_object().into_iter().flatten() {
        let at = format!("{path}[{name}]");
        match quantity::of(q) {
            None => causes.push(Cause::invalid(
                &at,
                q,
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            )),
            Some(v) if v < quantity::Milli::ZERO => {
                causes.push(Cause::invalid(&at, q, "must be greater than or equal to 0"))
            }
            Some(v) if integer_resource(name) && v.0 % 1000 != 0 => {
                causes.push(Cause::invalid(&at, q, "must be an integer"))
            }
            Some(_) => {}
        }
    }
    causes
}

fn quota_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = resource_list_causes(&spec["hard"], "spec.hard");
    causes.extend(resource_list_causes(&obj["status"]["hard"], "status.hard"));
    causes.extend(resource_list_causes(&obj["status"]["used"], "status.used"));
    let mut scopes: Vec<&str> = Vec::new();
    for (i, s) in spec["scopes"].as_array().into_iter().flatten().enumerate() {
        let scope = s.as_str().unwrap_or("");
        if !SCOPES.contains(&scope) {
            causes.push(Cause::not_supported(
                &format!("spec.scopes[{i}]"),
                scope,
                SCOPES,
            ));
        }
        scopes.push(scope);
    }
    for (i, e) in spec["scopeSelector"]["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("spec.scopeSelector.matchExpressions[{i}]");
        let scope = e["scopeName"].as_str().unwrap_or("");
        if !SCOPES.contains(&scope) {
            causes.push(Cause::not_supported(
                &format!("{at}.scopeName"),
                scope,
                SCOPES,
            ));
        }
        let op = e["operator"].as_str().unwrap_or("");
        let values = e["values"].as_array().map_or(0, Vec::len);
        match op {
            "In" | "NotIn" if values == 0 => causes.push(Cause::required(
                &format!("{at}.values"),
                "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
            )),
            "Exists" | "DoesNotExist" if values > 0 => causes.push(Cause::invalid(
                &format!("{at}.values"),
                &e["values"],
                "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => causes.push(Cause::not_supported(
                &format!("{at}.operator"),
                op,
                &["DoesNotExist", "Exists", "In", "NotIn"],
            )),
        }
        scopes.push(scope);
    }
    for (a, b) in [
        ("Terminating", "NotTerminating"),
        ("BestEffort", "NotBestEffort"),
    ] {
        if scopes.contains(&a) && scopes.contains(&b) {
            causes.push(Cause::invalid(
                "spec.scopes",
                &json!(scopes),
                "conflicting scopes",
            ));
        }
    }
    causes
}

/// REQUEST and LIMIT: `<resource>: <used>/<hard>` for each hard resource, limits.* under LIMIT.
fn quota_cells(obj: &Value, limits: bool) -> Value {
    let hard = obj["status"]["hard"]
        .as_object()
        .or(obj["spec"]["hard"].as_object());
    let mut cells = Vec::new();
    for (name, h) in hard.into_iter().flatten() {
        if name.starts_with("limits.") != limits {
            continue;
        }
        let used = obj["status"]["used"]
            .get(name)
            .map_or("0".to_string(), quantity::text);
        cells.push(format!("{name}: {used}/{}", quantity::text(h)));
    }
    json!(cells.join(", "))
}

fn quota_request(obj: &Value, _: i64) -> Value {
    quota_cells(obj, false)
}

fn quota_limit(obj: &Value, _: i64) -> Value {
    quota_cells(obj, true)
}

pub static RESOURCE_QUOTAS: ResourceSpec = ResourceSpec {
    plural: "resourcequotas",
    singular: "resourcequota",
    kind: "ResourceQuota",
    list_kind: "ResourceQuotaList",
    short_names: &["quota"],
    status_subresource: true,
    table: &[
        c::NAME_COL,
        c::AGE_COL,
        col("Request", "string", "", "Request represents a minimum amount of cpu/memory that a container may consume.", 0, quota_request),
        col("Limit", "string", "", "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.", 0, quota_limit),
    ],
    decode: typed::<ResourceQuota>,
    validate: quota_validation,
    ..ResourceSpec::BASE
};

pub const LIMIT_TYPES: &[&str] = &["Container", "PersistentVolumeClaim", "Pod"];

fn amount(list: &Value, name: &str) -> Option<Amount> {
    list.get(name).and_then(Amount::of)
}

/// One limit's bounds must be ordered: min ≤ defaultRequest ≤ default ≤ max (upstream's messages).
fn limit_item_causes(item: &Value, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let type_ = item["type"].as_str().unwrap_or("");
    if type_.is_empty() {
        causes.push(Cause::required(&format!("{at}.type"), ""));
    } else if !LIMIT_TYPES.contains(&type_) {
        causes.push(Cause::not_supported(
            &format!("{at}.type"),
            type_,
            LIMIT_TYPES,
        ));
    }
    for field in [
        "max",
        "min",
        "default",
        "defaultRequest",
        "maxLimitRequestRatio",
    ] {
        causes.extend(resource_list_causes(&item[field], &format!("{at}.{field}")));
    }
    if type_ == "Pod" {
        for field in ["default", "defaultRequest"] {
            if item[field].as_object().is_some_and(|o| !o.is_empty()) {
                causes.push(Cause::forbidden(
                    &format!("{at}.{field}"),
                    "may not be specified when `type` is 'Pod'",
                ));
            }
        }
    }
    let mut names: Vec<&String> = ["max", "min", "default", "defaultRequest"]
        .iter()
        .flat_map(|f| item[*f].as_object().into_iter().flat_map(|o| o.keys()))
        .collect();
    names.sort();
    names.dedup();
    for name in names {
        let (min, max) = (amount(&item["min"], name), amount(&item["max"], name));
        let (def, req) = (
            amount(&item["default"], name),
            amount(&item["defaultRequest"], name),
        );
        let path = |f: &str| format!("{at}.{f}[{name}]");
        let pairs = [
            (
                min,
                max,
                "min",
                "min value {a} is greater than max value {b}",
            ),
            (
                req,
                def,
                "defaultRequest",
                "default request value {a} is greater than default limit value {b}",
            ),
            (
                min,
                req,
                "defaultRequest",
                "min value {a} is greater than default request value {b}",
            ),
            (
                req,
                max,
                "defaultRequest",
                "default request value {a} is greater than max value {b}",
            ),
            (
                min,
                def,
                "default",
                "min value {a} is greater than default value {b}",
            ),
            (
                def,
                max,
                "default",
                "default value {a} is greater than max value {b}",
            ),
        ];
        for (a, b, field, msg) in pairs {
            if let (Some(a), Some(b)) = (a, b) {
                if a.value > b.value {
                    let text = msg.replace("{a}", &a.text()).replace("{b}", &b.text());
                    causes.push(Cause::invalid(&path(field), &json!(a.text()), &text));
                }
            }
        }
        if let Some(ratio) = amount(&item["maxLimitRequestRatio"], name) {
            if ratio.value < quantity::Milli(1000) {
                causes.push(Cause::invalid(
                    &path("maxLimitRequestRatio"),
                    &json!(ratio.text()),
                    "ratio must be greater than or equal to 1",
                ));
            }
        }
    }
    causes
}

fn limit_range_validation(obj: &Value) -> Vec<Cause> {
    obj["spec"]["limits"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .flat_map(|(i, item)| limit_item_causes(item, &format!("spec.limits[{i}]")))
        .collect()
}

pub static LIMIT_RANGES: ResourceSpec = ResourceSpec {
    plural: "limitranges",
    singular: "limitrange",
    kind: "LimitRange",
    list_kind: "LimitRangeList",
    short_names: &["limits"],
    table: &[c::NAME_COL, c::CREATED_AT_COL],
    decode: typed::<LimitRange>,
    validate: limit_range_validation,
    ..ResourceSpec::BASE
};

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(causes: &[Cause]) -> Vec<&str> {
        causes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn quota_validation_as_upstream() {
        let ok = json!({"spec": {"hard": {"pods": "5", "cpu": "500m", "count/replicasets.apps": "5"},
            "scopes": ["NotTerminating"]}});
        assert!(quota_validation(&ok).is_empty());
        let bad = json!({"spec": {"hard": {"pods": "1.5", "memory": "-1", "cpu": "x"},
            "scopes": ["Terminating", "NotTerminating", "Odd"]}});
        let causes = quota_validation(&bad);
        assert_eq!(
            fields(&causes),
            [
                "spec.hard[cpu]",
                "spec.hard[memory]",
                "spec.hard[pods]",
                "spec.scopes[2]",
                "spec.scopes"
            ]
        );
        assert_eq!(
            causes[2].message,
            "Invalid value: \"1.5\": must be an integer"
        );
    }

    #[test]
    fn quota_columns() {
        let q = json!({"spec": {"hard": {"requests.cpu": "1", "limits.memory": "1Gi"}},
            "status": {"hard": {"requests.cpu": "1", "limits.memory": "1Gi"}, "used": {"requests.cpu": "500m"}}});
        assert_eq!(quota_request(&q, 0), "requests.cpu: 500m/1");
        assert_eq!(quota_limit(&q, 0), "limits.memory: 0/1Gi");
    }

    #[test]
    fn limit_range_bounds_are_ordered() {
        let ok = json!({"spec": {"limits": [{"type": "Container",
            "min": {"cpu": "50m"}, "max": {"cpu": "500m"}, "default": {"cpu": "500m"},
            "defaultRequest": {"cpu": "100m"}}]}});
        assert!(limit_range_validation(&ok).is_empty());
        let bad = json!({"spec": {"limits": [{"type": "Container",
            "min": {"cpu": "600m"}, "max": {"cpu": "500m"}}, {"type": "Pod", "default": {"cpu": "1"}},
            {"type": "Node"}]}});
        let causes = limit_range_validation(&bad);
        assert_eq!(
            fields(&causes),
            [
                "spec.limits[0].min[cpu]",
                "spec.limits[1].default",
                "spec.limits[2].type"
            ]
        );
        assert_eq!(
            causes[0].message,
            "Invalid value: \"600m\": min value 600m is greater than max value 500m"
        );
    }
}
