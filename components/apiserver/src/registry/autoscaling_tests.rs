use serde_json::json;

use super::*;

fn fields(c: &[Cause]) -> Vec<&str> {
    c.iter().map(|c| c.field.as_str()).collect()
}

fn v2(spec: Value) -> Value {
    json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "web"}, "spec": spec})
}

#[test]
fn v2_defaults_min_replicas_a_cpu_target_and_behavior_rules() {
    let mut o = v2(
        json!({"scaleTargetRef": {"kind": "Deployment", "name": "web"},
        "maxReplicas": 5, "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}),
    );
    defaults_v2(&mut o);
    let s = &o["spec"];
    assert_eq!(s["minReplicas"], 1);
    assert_eq!(
        s["metrics"][0]["resource"]["target"]["averageUtilization"],
        80
    );
    assert_eq!(s["behavior"]["scaleDown"]["stabilizationWindowSeconds"], 60);
    assert_eq!(s["behavior"]["scaleDown"]["selectPolicy"], "Max");
    assert_eq!(s["behavior"]["scaleUp"]["stabilizationWindowSeconds"], 0);
    assert_eq!(
        s["behavior"]["scaleUp"]["policies"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert!(validation_v2(&o).is_empty(), "{:?}", validation_v2(&o));
}

#[test]
fn v2_round_trips_through_v1_without_losing_metrics_behavior_or_conditions() {
    let mut o = v2(
        json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "minReplicas": 2, "maxReplicas": 9,
        "metrics": [
            {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}},
            {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}],
        "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                                 "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}]}}}),
    );
    o["status"] = json!({"currentReplicas": 3, "desiredReplicas": 4,
        "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 61}}}],
        "conditions": [{"type": "AbleToScale", "status": "True"}]});
    defaults_v2(&mut o);
    let original = o.clone();
    convert(&mut o, "v1");
    assert_eq!(o["apiVersion"], "autoscaling/v1");
    assert_eq!(o["spec"]["targetCPUUtilizationPercentage"], 50);
    assert!(o["spec"]["metrics"].is_null() && o["spec"]["behavior"].is_null());
    assert_eq!(o["status"]["currentCPUUtilizationPercentage"], 61);
    let a = &o["metadata"]["annotations"];
    assert!(a[METRICS_ANNOTATION].as_str().unwrap().contains("memory"));
    assert!(a[BEHAVIOR_ANNOTATION].is_string() && a[CONDITIONS_ANNOTATION].is_string());
    convert(&mut o, "v2");
    assert_eq!(o["apiVersion"], "autoscaling/v2");
    assert!(o["metadata"]["annotations"].is_null(), "{}", o["metadata"]);
    // The CPU target comes back last: v1 keeps it apart from the other metrics.
    let metrics = o["spec"]["metrics"].as_array().unwrap();
    assert_eq!(metrics.len(), 2);
    assert_eq!(metrics[0], original["spec"]["metrics"][0]);
    assert_eq!(metrics[1], original["spec"]["metrics"][1]);
    assert_eq!(o["spec"]["behavior"], original["spec"]["behavior"]);
    assert_eq!(o["status"]["conditions"], original["status"]["conditions"]);
    assert_eq!(
        o["status"]["currentMetrics"],
        original["status"]["currentMetrics"]
    );
}

#[test]
fn a_v1_object_without_a_target_reads_as_v2_with_the_default_target() {
    let mut o = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3}});
    defaults_v1(&mut o);
    assert!(validation_v1(&o).is_empty());
    convert(&mut o, "v2");
    assert_eq!(o["spec"]["minReplicas"], 1);
    assert_eq!(
        o["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        80
    );
}

#[test]
fn validation_names_the_fields() {
    let o = v2(
        json!({"scaleTargetRef": {"kind": "Deployment"}, "minReplicas": 3, "maxReplicas": 2,
        "metrics": [{"type": "Sideways"},
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 0}}}],
        "behavior": {"scaleUp": {"stabilizationWindowSeconds": 4000,
                                 "policies": [{"type": "Pods", "value": 0, "periodSeconds": 15}]}}}),
    );
    assert_eq!(
        fields(&validation_v2(&o)),
        [
            "spec.scaleTargetRef.name",
            "spec.maxReplicas",
            "spec.metrics[0].type",
            "spec.metrics[1].resource.target.averageUtilization",
            "spec.behavior.scaleUp.stabilizationWindowSeconds",
            "spec.behavior.scaleUp.policies[0].value",
        ]
    );
    let v1 = json!({"spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
        "minReplicas": 0, "maxReplicas": 0, "targetCPUUtilizationPercentage": 0}});
    assert_eq!(
        fields(&validation_v1(&v1)),
        [
            "spec.minReplicas",
            "spec.maxReplicas",
            "spec.targetCPUUtilizationPercentage"
        ]
    );
}

#[test]
fn targets_read_as_kubectl_prints_them() {
    let mut o =
        v2(json!({"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5}));
    defaults_v2(&mut o);
    assert_eq!(hpa_targets(&o, 0), "cpu: <unknown>/80%");
    assert_eq!(hpa_reference(&o, 0), "Deployment/web");
    o["status"] = json!({"currentMetrics": [{"type": "Resource",
        "resource": {"name": "cpu", "current": {"averageUtilization": 12}}}]});
    assert_eq!(hpa_targets(&o, 0), "cpu: 12%/80%");
    let v1 = json!({"apiVersion": "autoscaling/v1", "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
        "maxReplicas": 5, "targetCPUUtilizationPercentage": 30}});
    assert_eq!(hpa_targets(&v1, 0), "cpu: <unknown>/30%");
}
