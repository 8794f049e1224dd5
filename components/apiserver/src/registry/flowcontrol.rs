//! flowcontrol.apiserver.k8s.io/v1 FlowSchema and PriorityLevelConfiguration: served with
//! upstream's defaults, validation and columns. The mandatory and suggested objects every cluster
//! has are created at start (`crate::flowcontrol::bootstrap`); the shedding itself is
//! `crate::flowcontrol::limiter`.

use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use serde_json::{json, Value};

use super::columns::{self as c, col};
use super::strategy::{typed, Column, ResourceSpec};
use crate::status::Cause;

fn text(v: &Value) -> Value {
    match v {
        Value::Null => json!("<none>"),
        Value::String(s) if s.is_empty() => json!("<none>"),
        other => other.clone(),
    }
}

fn fs_priority_level(o: &Value, _: i64) -> Value {
    text(&o["spec"]["priorityLevelConfiguration"]["name"])
}
fn fs_precedence(o: &Value, _: i64) -> Value {
    json!(o["spec"]["matchingPrecedence"].as_i64().unwrap_or(0))
}
fn fs_distinguisher(o: &Value, _: i64) -> Value {
    text(&o["spec"]["distinguisherMethod"]["type"])
}
/// MISSINGPL: the Dangling condition's status, `?` before the configuration controller decided.
fn fs_missing(o: &Value, _: i64) -> Value {
    let dangling = o["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Dangling")
        .and_then(|c| c["status"].as_str());
    json!(dangling.unwrap_or("?"))
}
fn pl_type(o: &Value, _: i64) -> Value {
    text(&o["spec"]["type"])
}
fn pl_limited(o: &Value, field: &str) -> Value {
    match &o["spec"]["limited"] {
        Value::Null => json!("<none>"),
        l => match field {
            "shares" => json!(l["nominalConcurrencyShares"].as_i64().unwrap_or(0)),
            f => {
                let q = &l["limitResponse"]["queuing"];
                if q.is_null() {
                    json!("<none>")
                } else {
                    json!(q[f].as_i64().unwrap_or(0))
                }
            }
        },
    }
}
fn pl_shares(o: &Value, _: i64) -> Value {
    pl_limited(o, "shares")
}
fn pl_queues(o: &Value, _: i64) -> Value {
    pl_limited(o, "queues")
}
fn pl_hand(o: &Value, _: i64) -> Value {
    pl_limited(o, "handSize")
}
fn pl_queue_length(o: &Value, _: i64) -> Value {
    pl_limited(o, "queueLengthLimit")
}

const NAME: Column = c::NAME_COL;
const AGE: Column = c::AGE_COL;

pub static FLOW_SCHEMAS: ResourceSpec = ResourceSpec {
    group: "flowcontrol.apiserver.k8s.io",
    version: "v1",
    plural: "flowschemas",
    singular: "flowschema",
    kind: "FlowSchema",
    list_kind: "FlowSchemaList",
    namespaced: false,
    status_subresource: true,
    generation: true,
    table: &[
        NAME,
        col(
            "PriorityLevel",
            "string",
            "",
            "name of the priority level this FlowSchema refers to",
            0,
            fs_priority_level,
        ),
        col(
            "MatchingPrecedence",
            "string",
            "",
            "matching precedence of the FlowSchema",
            0,
            fs_precedence,
        ),
        col(
            "DistinguisherMethod",
            "string",
            "",
            "distinguisher method of the FlowSchema",
            0,
            fs_distinguisher,
        ),
        AGE,
        col(
            "MissingPL",
            "string",
            "",
            "references a broken or non-existent PriorityLevelConfiguration",
            0,
            fs_missing,
        ),
    ],
    decode: typed::<FlowSchema>,
    defaults: flow_schema_defaults,
    validate: flow_schema_validation,
    ..ResourceSpec::BASE
};

pub static PRIORITY_LEVEL_CONFIGURATIONS: ResourceSpec = ResourceSpec {
    group: "flowcontrol.apiserver.k8s.io",
    version: "v1",
    plural: "prioritylevelconfigurations",
    singular: "prioritylevelconfiguration",
    kind: "PriorityLevelConfiguration",
    list_kind: "PriorityLevelConfigurationList",
    namespaced: false,
    status_subresource: true,
    generation: true,
    table: &[
        NAME,
        col(
            "Type",
            "string",
            "",
            "type of the priority level",
            0,
            pl_type,
        ),
        col(
            "NominalConcurrencyShares",
            "string",
            "",
            "nominal concurrency shares of the priority level",
            0,
            pl_shares,
        ),
        col(
            "Queues",
            "string",
            "",
            "queues of the priority level",
            0,
            pl_queues,
        ),
        col(
            "HandSize",
            "string",
            "",
            "hand size of the priority level",
            0,
            pl_hand,
        ),
        col(
            "QueueLengthLimit",
            "string",
            "",
            "queue length limit of the priority level",
            0,
            pl_queue_length,
        ),
        AGE,
    ],
    decode: typed::<PriorityLevelConfiguration>,
    defaults: priority_level_defaults,
    validate: priority_level_validation,
    ..ResourceSpec::BASE
};

/// Upstream's SetDefaults_FlowSchemaSpec: matchingPrecedence 1000.
fn flow_schema_defaults(obj: &mut Value) {
    if obj["spec"].is_object() && obj["spec"]["matchingPrecedence"].is_null() {
        obj["spec"]["matchingPrecedence"] = json!(1000);
    }
}

/// Upstream's v1 defaults: nominalConcurrencyShares 30, lendablePercent 0, queuing 64/8/50;
/// exempt levels default their shares and lendable percent to 0.
fn priority_level_defaults(obj: &mut Value) {
    let spec = &mut obj["spec"];
    if !spec.is_object() {
        return;
    }
    if spec["type"] == "Limited" && spec["limited"].is_object() {
        let l = &mut spec["limited"];
        if l["nominalConcurrencyShares"].is_null() {
            l["nominalConcurrencyShares"] = json!(30);
        }
        if l["lendablePercent"].is_null() {
            l["lendablePercent"] = json!(0);
        }
        if l["limitResponse"]["type"] == "Queue" {
            let q = &mut l["limitResponse"]["queuing"];
            if !q.is_object() {
                *q = json!({});
            }
            for (field, default) in [("queues", 64), ("handSize", 8), ("queueLengthLimit", 50)] {
                if q[field].is_null() {
                    q[field] = json!(default);
                }
            }
        }
    }
    if spec["type"] == "Exempt" {
        if !spec["exempt"].is_object() {
            spec["exempt"] = json!({});
        }
        for field in ["nominalConcurrencyShares", "lendablePercent"] {
            if spec["exempt"][field].is_null() {
                spec["exempt"][field] = json!(0);
            }
        }
    }
}

fn flow_schema_validation(obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let spec = &obj["spec"];
    match spec["matchingPrecedence"].as_i64() {
        Some(p) if !(1..=10000).contains(&p) => out.push(Cause::invalid(
            "spec.matchingPrecedence",
            &json!(p),
            "must be between 1 and 10000, inclusive",
        )),
        _ => {}
    }
    if spec["priorityLevelConfiguration"]["name"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        out.push(Cause::required(
            "spec.priorityLevelConfiguration.name",
            "must reference a priority level",
        ));
    }
    if let Some(t) = spec["distinguisherMethod"]["type"].as_str() {
        if !["ByUser", "ByNamespace"].contains(&t) {
            out.push(Cause::not_supported(
                "spec.distinguisherMethod.type",
                t,
                &["ByNamespace", "ByUser"],
            ));
        }
    }
    for (i, rule) in spec["rules"].as_array().into_iter().flatten().enumerate() {
        if rule["subjects"].as_array().is_none_or(|s| s.is_empty()) {
            out.push(Cause::required(
                &format!("spec.rules[{i}].subjects"),
                "subjects must contain at least one value",
            ));
        }
        let none = |f: &str| rule[f].as_array().is_none_or(|a| a.is_empty());
        if none("resourceRules") && none("nonResourceRules") {
            out.push(Cause::required(
                &format!("spec.rules[{i}]"),
                "at least one of resourceRules and nonResourceRules has to be non-empty",
            ));
        }
    }
    out
}

fn priority_level_validation(obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let spec = &obj["spec"];
    match spec["type"].as_str().unwrap_or("") {
        "Exempt" => {
            if !spec["limited"].is_null() {
                out.push(Cause::forbidden(
                    "spec.limited",
                    "must be nil if the type is not Limited",
                ));
            }
        }
        "Limited" => {
            if spec["limited"].is_null() {
                out.push(Cause::required(
                    "spec.limited",
                    "must not be empty when type is Limited",
                ));
            }
            let lend = spec["limited"]["lendablePercent"].as_i64().unwrap_or(0);
            if !(0..=100).contains(&lend) {
                out.push(Cause::invalid(
                    "spec.limited.lendablePercent",
                    &json!(lend),
                    "must be between 0 and 100, inclusive",
                ));
            }
            let response = &spec["limited"]["limitResponse"];
            match response["type"].as_str().unwrap_or("") {
                "Reject" | "Queue" => {}
                other => out.push(Cause::not_supported(
                    "spec.limited.limitResponse.type",
                    other,
                    &["Queue", "Reject"],
                )),
            }
            let q = &response["queuing"];
            if response["type"] == "Queue" {
                let queues = q["queues"].as_i64().unwrap_or(0);
                let hand = q["handSize"].as_i64().unwrap_or(0);
                if queues <= 0 {
                    out.push(Cause::invalid(
                        "spec.limited.limitResponse.queuing.queues",
                        &json!(queues),
                        "must be positive",
                    ));
                }
                if hand <= 0 || hand > queues {
                    out.push(Cause::invalid(
                        "spec.limited.limitResponse.queuing.handSize",
                        &json!(hand),
                        &format!("should not be greater than queues ({queues})"),
                    ));
                }
            }
        }
        "" => out.push(Cause::required("spec.type", "must not be empty")),
        other => out.push(Cause::not_supported(
            "spec.type",
            other,
            &["Exempt", "Limited"],
        )),
    }
    out
}
