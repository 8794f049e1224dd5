//! autoscaling/v2 and autoscaling/v1 HorizontalPodAutoscaler: one set of stored objects served in
//! both versions, as upstream. Objects are stored in the version they were written in and
//! converted on read (`ResourceSpec.convert`): v1 keeps its CPU target in
//! targetCPUUtilizationPercentage and everything else of v2 in upstream's
//! `autoscaling.alpha.kubernetes.io/*` annotations, so a v2 object read and written through v1
//! keeps its other metrics, behavior and conditions. Defaults (pkg/apis/autoscaling/v2/defaults.go:
//! minReplicas 1, a CPU utilization target of 80 %, the scale-up and scale-down rules), the
//! validation kubectl users meet, and kubectl's columns (printHorizontalPodAutoscaler).
//!
//! The objects are served; the controller that acts on them (with the resource metrics API) is
//! issue #25's.

use k8s_openapi::api::autoscaling::{v1 as hpa_v1, v2 as hpa_v2};
use serde_json::{json, Map, Value};

use super::columns::{self as c, col};
use super::strategy::{typed, Column, ResourceSpec};
use crate::status::Cause;

pub const GROUP: &str = "autoscaling";

const METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
const CURRENT_METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";
/// autoscaling.DefaultCPUUtilization.
const DEFAULT_CPU_UTILIZATION: i64 = 80;
const METRIC_TYPES: &[&str] = &[
    "ContainerResource",
    "External",
    "Object",
    "Pods",
    "Resource",
];
const TARGET_TYPES: &[&str] = &["AverageValue", "Utilization", "Value"];
const SELECT_POLICIES: &[&str] = &["Disabled", "Max", "Min"];
const POLICY_TYPES: &[&str] = &["Percent", "Pods"];

fn is_cpu_utilization(m: &Value) -> bool {
    m["type"] == "Resource"
        && m["resource"]["name"] == "cpu"
        && m["resource"]["target"]["type"] == "Utilization"
}

fn cpu_metric(utilization: &Value) -> Value {
    json!({"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": utilization}}})
}

/// Moves `value` (when set and not empty) into annotation `key` as JSON.
fn annotate(obj: &mut Value, key: &str, value: Value) {
    let empty = value.is_null() || value.as_array().is_some_and(Vec::is_empty);
    if empty {
        return;
    }
    if !obj["metadata"]["annotations"].is_object() {
        obj["metadata"]["annotations"] = json!({});
    }
    obj["metadata"]["annotations"][key] = json!(value.to_string());
}

/// Takes annotation `key` out of the object, parsed.
fn take_annotation(obj: &mut Value, key: &str) -> Option<Value> {
    let annotations = obj["metadata"]["annotations"].as_object_mut()?;
    let text = annotations.remove(key)?;
    if annotations.is_empty() {
        if let Some(meta) = obj["metadata"].as_object_mut() {
            meta.remove("annotations");
        }
    }
    serde_json::from_str(text.as_str()?).ok()
}

/// Converts an HPA of either version into `version` ("v1" or "v2"), in place.
pub fn convert(obj: &mut Value, version: &str) {
    let from = obj["apiVersion"].as_str().unwrap_or("").to_string();
    match (from.as_str(), version) {
        ("autoscaling/v2", "v1") => v2_to_v1(obj),
        ("autoscaling/v1", "v2") => v1_to_v2(obj),
        _ => {}
    }
    obj["apiVersion"] = json!(format!("{GROUP}/{version}"));
}

fn v2_to_v1(obj: &mut Value) {
    let mut spec = obj["spec"].take();
    let mut status = obj["status"].take();
    let metrics = spec["metrics"].as_array().cloned().unwrap_or_default();
    let (cpu, others): (Vec<Value>, Vec<Value>) = metrics.into_iter().partition(is_cpu_utilization);
    let mut v1 = Map::new();
    for key in ["scaleTargetRef", "minReplicas", "maxReplicas"] {
        if let Some(v) = spec.get_mut(key).map(Value::take) {
            v1.insert(key.into(), v);
        }
    }
    if let Some(u) = cpu
        .first()
        .map(|m| m["resource"]["target"]["averageUtilization"].clone())
    {
        if !u.is_null() {
            v1.insert("targetCPUUtilizationPercentage".into(), u);
        }
    }
    annotate(obj, METRICS_ANNOTATION, json!(others));
    annotate(obj, BEHAVIOR_ANNOTATION, spec["behavior"].take());
    obj["spec"] = Value::Object(v1);

    if status.is_object() {
        let current = status["currentMetrics"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let (cpu, others): (Vec<Value>, Vec<Value>) = current
            .into_iter()
            .partition(|m| m["type"] == "Resource" && m["resource"]["name"] == "cpu");
        let mut v1s = Map::new();
        for key in [
            "observedGeneration",
            "lastScaleTime",
            "currentReplicas",
            "desiredReplicas",
        ] {
            if let Some(v) = status.get_mut(key).map(Value::take) {
                v1s.insert(key.into(), v);
            }
        }
        if let Some(u) = cpu
            .first()
            .map(|m| m["resource"]["current"]["averageUtilization"].clone())
            .filter(|u| !u.is_null())
        {
            v1s.insert("currentCPUUtilizationPercentage".into(), u);
        }
        annotate(obj, CURRENT_METRICS_ANNOTATION, json!(others));
        annotate(obj, CONDITIONS_ANNOTATION, status["conditions"].take());
        obj["status"] = Value::Object(v1s);
    }
}

fn v1_to_v2(obj: &mut Value) {
    let mut spec = obj["spec"].take();
    let mut metrics = take_annotation(obj, METRICS_ANNOTATION)
        .and_then(|m| m.as_array().cloned())
        .unwrap_or_default();
    let target = spec["targetCPUUtilizationPercentage"].take();
    if !target.is_null() {
        metrics.push(cpu_metric(&target));
    }
    let mut v2 = Map::new();
    for key in ["scaleTargetRef", "minReplicas", "maxReplicas"] {
        if let Some(v) = spec.get_mut(key).map(Value::take) {
            v2.insert(key.into(), v);
        }
    }
    if !metrics.is_empty() {
        v2.insert("metrics".into(), json!(metrics));
    }
    if let Some(b) = take_annotation(obj, BEHAVIOR_ANNOTATION).filter(|b| !b.is_null()) {
        v2.insert("behavior".into(), b);
    }
    obj["spec"] = Value::Object(v2);
    // A v1 object read as v2 gets v2's defaults, as upstream's decoding applies them.
    defaults_v2(obj);

    let current = take_annotation(obj, CURRENT_METRICS_ANNOTATION);
    let conditions = take_annotation(obj, CONDITIONS_ANNOTATION);
    let mut status = obj["status"].take();
    if status.is_object() {
        let mut v2s = Map::new();
        for key in [
            "observedGeneration",
            "lastScaleTime",
            "currentReplicas",
            "desiredReplicas",
        ] {
            if let Some(v) = status.get_mut(key).map(Value::take) {
                v2s.insert(key.into(), v);
            }
        }
        let mut current = current
            .and_then(|m| m.as_array().cloned())
            .unwrap_or_default();
        let cpu = status["currentCPUUtilizationPercentage"].take();
        if !cpu.is_null() {
            current.push(json!({"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": cpu}}}));
        }
        if !current.is_empty() {
            v2s.insert("currentMetrics".into(), json!(current));
        }
        if let Some(c) = conditions.filter(|c| !c.is_null()) {
            v2s.insert("conditions".into(), c);
        }
        obj["status"] = Value::Object(v2s);
    }
}

fn ensure_spec(obj: &mut Value) -> &mut Value {
    if !obj["spec"].is_object() {
        obj["spec"] = json!({});
    }
    &mut obj["spec"]
}

/// GenerateHPAScaleUpRules / GenerateHPAScaleDownRules: unset fields of a direction's rules.
fn scaling_rules(rules: &mut Value, up: bool) {
    if !rules.is_object() {
        *rules = json!({});
    }
    if rules["stabilizationWindowSeconds"].is_null() {
        rules["stabilizationWindowSeconds"] = json!(if up { 0 } else { 300 });
    }
    if rules["selectPolicy"].is_null() {
        rules["selectPolicy"] = json!("Max");
    }
    if rules["policies"].as_array().is_none_or(Vec::is_empty) {
        rules["policies"] = if up {
            json!([{"type": "Pods", "value": 4, "periodSeconds": 15},
                   {"type": "Percent", "value": 100, "periodSeconds": 15}])
        } else {
            json!([{"type": "Percent", "value": 100, "periodSeconds": 15}])
        };
    }
}

pub fn defaults_v2(obj: &mut Value) {
    let spec = ensure_spec(obj);
    if spec["minReplicas"].is_null() {
        spec["minReplicas"] = json!(1);
    }
    if spec["metrics"].as_array().is_none_or(Vec::is_empty) {
        spec["metrics"] = json!([cpu_metric(&json!(DEFAULT_CPU_UTILIZATION))]);
    }
    if spec["behavior"].is_object() {
        scaling_rules(&mut spec["behavior"]["scaleUp"], true);
        scaling_rules(&mut spec["behavior"]["scaleDown"], false);
    }
}

pub fn defaults_v1(obj: &mut Value) {
    let spec = ensure_spec(obj);
    if spec["minReplicas"].is_null() {
        spec["minReplicas"] = json!(1);
    }
}

/// What both versions share: the target reference and the replica bounds.
fn common_validation(spec: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let r = &spec["scaleTargetRef"];
    for key in ["kind", "name"] {
        let v = r[key].as_str().unwrap_or("");
        if v.is_empty() {
            causes.push(Cause::required(&format!("spec.scaleTargetRef.{key}"), ""));
        } else if v.contains('/') || v.contains('%') || v == "." || v == ".." {
            causes.push(Cause::invalid(
                &format!("spec.scaleTargetRef.{key}"),
                &json!(v),
                "may not contain '/' or '%' and may not be '.' or '..'",
            ));
        }
    }
    let min = spec["minReplicas"].as_i64();
    if let Some(m) = min.filter(|m| *m < 1) {
        causes.push(Cause::invalid(
            "spec.minReplicas",
            &json!(m),
            "must be greater than or equal to 1",
        ));
    }
    let max = spec["maxReplicas"].as_i64().unwrap_or(0);
    if max < 1 {
        causes.push(Cause::invalid(
            "spec.maxReplicas",
            &json!(max),
            "must be greater than 0",
        ));
    } else if min.is_some_and(|m| max < m) {
        causes.push(Cause::invalid(
            "spec.maxReplicas",
            &json!(max),
            "must be greater than or equal to `minReplicas`",
        ));
    }
    causes
}

fn target_validation(causes: &mut Vec<Cause>, t: &Value, at: &str) {
    match t["type"].as_str() {
        None | Some("") => causes.push(Cause::required(
            &format!("{at}.type"),
            "must specify a metric target type",
        )),
        Some(ty) if !TARGET_TYPES.contains(&ty) => causes.push(Cause::not_supported(
            &format!("{at}.type"),
            ty,
            TARGET_TYPES,
        )),
        Some("Utilization") => match t["averageUtilization"].as_i64() {
            None => causes.push(Cause::required(
                &format!("{at}.averageUtilization"),
                "must set either a target raw value or a target utilization",
            )),
            Some(u) if u < 1 => causes.push(Cause::invalid(
                &format!("{at}.averageUtilization"),
                &json!(u),
                "must be greater than 0",
            )),
            Some(_) => {}
        },
        Some(_) => {}
    }
}

pub fn validation_v2(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = common_validation(spec);
    for (i, m) in spec["metrics"].as_array().into_iter().flatten().enumerate() {
        let at = format!("spec.metrics[{i}]");
        match m["type"].as_str() {
            None | Some("") => causes.push(Cause::required(
                &format!("{at}.type"),
                "must specify a metric source type",
            )),
            Some(t) if !METRIC_TYPES.contains(&t) => {
                causes.push(Cause::not_supported(&format!("{at}.type"), t, METRIC_TYPES))
            }
            Some("Resource") => {
                let r = &m["resource"];
                if !r.is_object() {
                    causes.push(Cause::required(
                        &format!("{at}.resource"),
                        "must populate information for the given metric source",
                    ));
                    continue;
                }
                if r["name"].as_str().is_none_or(str::is_empty) {
                    causes.push(Cause::required(
                        &format!("{at}.resource.name"),
                        "must specify a resource name",
                    ));
                }
                target_validation(&mut causes, &r["target"], &format!("{at}.resource.target"));
            }
            Some(_) => {}
        }
    }
    let b = &spec["behavior"];
    for dir in ["scaleUp", "scaleDown"] {
        let rules = &b[dir];
        if !rules.is_object() {
            continue;
        }
        let at = format!("spec.behavior.{dir}");
        if let Some(w) = rules["stabilizationWindowSeconds"].as_i64() {
            if !(0..=3600).contains(&w) {
                causes.push(Cause::invalid(
                    &format!("{at}.stabilizationWindowSeconds"),
                    &json!(w),
                    if w < 0 {
                        "must be greater than or equal to zero"
                    } else {
                        "must be less than or equal to 3600"
                    },
                ));
            }
        }
        if let Some(p) = rules["selectPolicy"].as_str() {
            if !SELECT_POLICIES.contains(&p) {
                causes.push(Cause::not_supported(
                    &format!("{at}.selectPolicy"),
                    p,
                    SELECT_POLICIES,
                ));
            }
        }
        for (i, p) in rules["policies"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let pat = format!("{at}.policies[{i}]");
            if let Some(t) = p["type"].as_str() {
                if !POLICY_TYPES.contains(&t) {
                    causes.push(Cause::not_supported(
                        &format!("{pat}.type"),
                        t,
                        POLICY_TYPES,
                    ));
                }
            }
            if p["value"].as_i64().unwrap_or(0) <= 0 {
                causes.push(Cause::invalid(
                    &format!("{pat}.value"),
                    &p["value"],
                    "must be greater than zero",
                ));
            }
            let period = p["periodSeconds"].as_i64().unwrap_or(0);
            if period <= 0 {
                causes.push(Cause::invalid(
                    &format!("{pat}.periodSeconds"),
                    &json!(period),
                    "must be greater than zero",
                ));
            } else if period > 1800 {
                causes.push(Cause::invalid(
                    &format!("{pat}.periodSeconds"),
                    &json!(period),
                    "must be less than or equal to 1800",
                ));
            }
        }
    }
    causes
}

pub fn validation_v1(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = common_validation(spec);
    if let Some(t) = spec["targetCPUUtilizationPercentage"]
        .as_i64()
        .filter(|t| *t < 1)
    {
        causes.push(Cause::invalid(
            "spec.targetCPUUtilizationPercentage",
            &json!(t),
            "must be greater than 0",
        ));
    }
    causes
}

/// The object as v2, for the columns (both versions print the same).
fn as_v2(obj: &Value) -> std::borrow::Cow<'_, Value> {
    if obj["apiVersion"] == "autoscaling/v1" {
        let mut v = obj.clone();
        convert(&mut v, "v2");
        std::borrow::Cow::Owned(v)
    } else {
        std::borrow::Cow::Borrowed(obj)
    }
}

fn hpa_reference(obj: &Value, _: i64) -> Value {
    let r = &as_v2(obj)["spec"]["scaleTargetRef"];
    json!(format!(
        "{}/{}",
        r["kind"].as_str().unwrap_or(""),
        r["name"].as_str().unwrap_or("")
    ))
}

fn quantity(v: &Value) -> String {
    super::storage_quantity::text(v)
}

/// formatHPAMetrics: each metric as `current/target`, at most two then "+ N more...".
fn hpa_targets(obj: &Value, _: i64) -> Value {
    let v2 = as_v2(obj);
    let specs = v2["spec"]["metrics"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if specs.is_empty() {
        return json!("<none>");
    }
    let statuses = v2["status"]["currentMetrics"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let unknown = || "<unknown>".to_string();
    let list: Vec<String> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let st = statuses.get(i);
            let ty = s["type"].as_str().unwrap_or("");
            let key = match ty {
                "Resource" => "resource",
                "ContainerResource" => "containerResource",
                "Pods" => "pods",
                "Object" => "object",
                "External" => "external",
                _ => return "<unknown type>".to_string(),
            };
            let src = &s[key];
            let cur = st.map(|st| &st[key]).filter(|c| c.is_object());
            let target = &src["target"];
            match ty {
                "Resource" | "ContainerResource" => {
                    let name = src["name"].as_str().unwrap_or("");
                    if !target["averageValue"].is_null() {
                        let current = cur
                            .map(|c| quantity(&c["current"]["averageValue"]))
                            .unwrap_or_else(unknown);
                        format!("{name}: {current}/{}", quantity(&target["averageValue"]))
                    } else {
                        let current = cur
                            .and_then(|c| c["current"]["averageUtilization"].as_i64())
                            .map_or_else(unknown, |u| format!("{u}%"));
                        let t = target["averageUtilization"]
                            .as_i64()
                            .map_or_else(|| "<auto>".to_string(), |u| format!("{u}%"));
                        format!("{name}: {current}/{t}")
                    }
                }
                "Pods" => {
                    let current = cur
                        .map(|c| quantity(&c["current"]["averageValue"]))
                        .unwrap_or_else(unknown);
                    format!("{current}/{}", quantity(&target["averageValue"]))
                }
                _ => {
                    if !target["averageValue"].is_null() {
                        let current = cur
                            .filter(|c| !c["current"]["averageValue"].is_null())
                            .map(|c| quantity(&c["current"]["averageValue"]))
                            .unwrap_or_else(unknown);
                        format!("{current}/{} (avg)", quantity(&target["averageValue"]))
                    } else {
                        let current = cur
                            .map(|c| quantity(&c["current"]["value"]))
                            .unwrap_or_else(unknown);
                        format!("{current}/{}", quantity(&target["value"]))
                    }
                }
            }
        })
        .collect();
    const SHOWN: usize = 2;
    if list.len() > SHOWN {
        json!(format!(
            "{} + {} more...",
            list[..SHOWN].join(", "),
            list.len() - SHOWN
        ))
    } else {
        json!(list.join(", "))
    }
}

fn hpa_min(obj: &Value, _: i64) -> Value {
    match obj["spec"]["minReplicas"].as_i64() {
        Some(m) => json!(m.to_string()),
        None => json!("<unset>"),
    }
}

fn hpa_max(obj: &Value, _: i64) -> Value {
    json!(obj["spec"]["maxReplicas"].as_i64().unwrap_or(0))
}

fn hpa_replicas(obj: &Value, _: i64) -> Value {
    json!(obj["status"]["currentReplicas"].as_i64().unwrap_or(0))
}

const HPA_TABLE: &[Column] = &[
    c::NAME_COL,
    col("Reference", "string", "", "reference to the target object being scaled", 0, hpa_reference),
    col("Targets", "string", "", "the current and target metric values", 0, hpa_targets),
    col("MinPods", "string", "", "lower limit for the number of pods that can be set by the autoscaler, default 1.", 0, hpa_min),
    col("MaxPods", "integer", "", "upper limit for the number of pods that can be set by the autoscaler; cannot be smaller than MinReplicas.", 0, hpa_max),
    col("Replicas", "integer", "", "current number of replicas of pods managed by this autoscaler.", 0, hpa_replicas),
    c::AGE_COL,
];

/// What both versions share.
const HPA: ResourceSpec = ResourceSpec {
    group: GROUP,
    version: "v2",
    plural: "horizontalpodautoscalers",
    singular: "horizontalpodautoscaler",
    kind: "HorizontalPodAutoscaler",
    list_kind: "HorizontalPodAutoscalerList",
    short_names: &["hpa"],
    categories: &["all"],
    status_subresource: true,
    // Upstream's status strategy resets only the spec.
    status_takes_metadata: true,
    generation: true,
    table: HPA_TABLE,
    convert: Some(convert),
    ..ResourceSpec::BASE
};

/// The storage version, and the preferred one: registered first.
pub static HORIZONTAL_POD_AUTOSCALERS_V2: ResourceSpec = ResourceSpec {
    decode: typed::<hpa_v2::HorizontalPodAutoscaler>,
    defaults: defaults_v2,
    validate: validation_v2,
    ..HPA
};

pub static HORIZONTAL_POD_AUTOSCALERS_V1: ResourceSpec = ResourceSpec {
    version: "v1",
    decode: typed::<hpa_v1::HorizontalPodAutoscaler>,
    defaults: defaults_v1,
    validate: validation_v1,
    ..HPA
};

#[cfg(test)]
#[path = "autoscaling_tests.rs"]
mod tests;
