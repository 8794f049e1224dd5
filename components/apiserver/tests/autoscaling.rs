//! HorizontalPodAutoscaler served in autoscaling/v2 and v1 over the same objects, with the real
//! kubectl: `kubectl autoscale`, kubectl's columns, each version's view of one object, and a v2
//! object written back through v1 keeping what v1 cannot show.

use kiln_testkit::{rows, Cluster};
use serde_json::{json, Value};

async fn get_json(c: &Cluster, what: &str) -> Value {
    serde_json::from_str(&c.kubectl_ok(&["get", what, "-o", "json"]).await).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hpa_in_both_versions() {
    let c = Cluster::start().await;
    c.kubectl_ok(&[
        "create",
        "deployment",
        "web",
        "--image=registry.local/app:1",
    ])
    .await;
    c.kubectl_ok(&[
        "autoscale",
        "deployment",
        "web",
        "--min=2",
        "--max=5",
        "--cpu-percent=50",
    ])
    .await;
    let table = rows(&c.kubectl_ok(&["get", "hpa"]).await);
    assert_eq!(
        table[0],
        [
            "NAME",
            "REFERENCE",
            "TARGETS",
            "MINPODS",
            "MAXPODS",
            "REPLICAS",
            "AGE"
        ]
    );
    assert_eq!(table[1][..2], ["web", "Deployment/web"]);
    assert_eq!(table[1][2..4], ["cpu:", "<unknown>/50%"]);
    assert_eq!(table[1][4..7], ["2", "5", "0"]);

    let v2 = get_json(&c, "horizontalpodautoscalers.v2.autoscaling/web").await;
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(
        v2["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 50}}}])
    );
    let v1 = get_json(&c, "horizontalpodautoscalers.v1.autoscaling/web").await;
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
    assert_eq!(v1["metadata"]["uid"], v2["metadata"]["uid"]);

    // A memory metric and a behavior (v2 only) survive an edit made through v1.
    c.kubectl_ok(&[
        "patch",
        "horizontalpodautoscalers.v2.autoscaling",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/spec/metrics/-","value":{"type":"Resource","resource":{"name":"memory","target":{"type":"AverageValue","averageValue":"100Mi"}}}},
            {"op":"add","path":"/spec/behavior","value":{"scaleDown":{"stabilizationWindowSeconds":60}}}]"#,
    ])
    .await;
    c.kubectl_ok(&[
        "patch",
        "horizontalpodautoscalers.v1.autoscaling",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"maxReplicas":7,"targetCPUUtilizationPercentage":60}}"#,
    ])
    .await;
    let v2 = get_json(&c, "horizontalpodautoscalers.v2.autoscaling/web").await;
    assert_eq!(v2["spec"]["maxReplicas"], 7);
    let metrics = v2["spec"]["metrics"].as_array().unwrap();
    assert!(
        metrics.iter().any(|m| m["resource"]["name"] == "memory"),
        "{metrics:?}"
    );
    assert!(metrics
        .iter()
        .any(|m| m["resource"]["name"] == "cpu"
            && m["resource"]["target"]["averageUtilization"] == 60));
    assert_eq!(
        v2["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"],
        60
    );
    assert_eq!(v2["spec"]["behavior"]["scaleUp"]["selectPolicy"], "Max");
    assert!(
        v2["metadata"]["annotations"].is_null(),
        "{}",
        v2["metadata"]
    );

    // Validation names the field, in either version.
    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &[
                "patch",
                "horizontalpodautoscalers.v1.autoscaling",
                "web",
                "--type=merge",
                "-p",
                r#"{"spec":{"maxReplicas":1}}"#,
            ],
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains(
            "spec.maxReplicas: Invalid value: 1: must be greater than or equal to `minReplicas`"
        ),
        "{err}"
    );
    // Discovery: v2 is the preferred version.
    let group: Value =
        serde_json::from_str(&c.kubectl_ok(&["get", "--raw", "/apis/autoscaling"]).await).unwrap();
    assert_eq!(group["preferredVersion"]["version"], "v2");
}
