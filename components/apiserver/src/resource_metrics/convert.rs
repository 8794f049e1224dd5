//! Kubelet Summaries (`/stats/summary`) to metrics.k8s.io/v1beta1 NodeMetrics and PodMetrics, as
//! metrics-server builds them: CPU from `usageNanoCores`, memory from `workingSetBytes`, labels of
//! the Node or Pod object, `timestamp` of the sample and the window it covers. A node or pod
//! without both numbers (a kubelet that has sampled only once) has no metrics yet. Pure.

use serde_json::{json, Value};

/// The kubelet's sampling period: its `usageNanoCores` is the rate over this window.
pub const WINDOW: &str = "10s";
pub const API_VERSION: &str = "metrics.k8s.io/v1beta1";

/// CPU in nanocores as resource.Quantity prints a nano-scaled value: the largest exact unit.
pub fn cpu_quantity(nanos: u64) -> String {
    match nanos {
        0 => "0".into(),
        n if n.is_multiple_of(1_000_000_000) => format!("{}", n / 1_000_000_000),
        n if n.is_multiple_of(1_000_000) => format!("{}m", n / 1_000_000),
        n if n.is_multiple_of(1_000) => format!("{}u", n / 1_000),
        n => format!("{n}n"),
    }
}

/// Bytes as a BinarySI quantity prints: the largest power of 1024 that divides it.
pub fn memory_quantity(bytes: u64) -> String {
    if bytes == 0 {
        return "0".into();
    }
    let mut v = bytes;
    for suffix in ["", "Ki", "Mi", "Gi", "Ti", "Pi"] {
        if !v.is_multiple_of(1024) || suffix == "Pi" {
            return format!("{v}{suffix}");
        }
        v /= 1024;
    }
    format!("{v}Ei")
}

/// `{cpu, memory}` and the sample time of one Summary cpu/memory pair.
fn usage(cpu: &Value, memory: &Value) -> Option<(Value, String)> {
    let nanos = cpu["usageNanoCores"].as_u64()?;
    let ws = memory["workingSetBytes"].as_u64()?;
    let time = cpu["time"].as_str().unwrap_or_default().to_string();
    Some((
        json!({"cpu": cpu_quantity(nanos), "memory": memory_quantity(ws)}),
        time,
    ))
}

fn metadata(obj: &Value, now: &str) -> Value {
    let mut m = json!({
        "name": obj["metadata"]["name"],
        "creationTimestamp": now,
    });
    if let Some(ns) = obj["metadata"]["namespace"].as_str() {
        m["namespace"] = json!(ns);
    }
    if let Some(labels) = obj["metadata"]["labels"].as_object() {
        if !labels.is_empty() {
            m["labels"] = Value::Object(labels.clone());
        }
    }
    m
}

/// The node's metrics from its kubelet's Summary.
pub fn node_metrics(node: &Value, summary: &Value, now: &str) -> Option<Value> {
    let (usage, time) = usage(&summary["node"]["cpu"], &summary["node"]["memory"])?;
    Some(json!({
        "kind": "NodeMetrics",
        "apiVersion": API_VERSION,
        "metadata": metadata(node, now),
        "timestamp": time,
        "window": WINDOW,
        "usage": usage,
    }))
}

/// The pod's metrics from its node's Summary (matched by namespace, name and uid).
pub fn pod_metrics(pod: &Value, summary: &Value, now: &str) -> Option<Value> {
    let meta = &pod["metadata"];
    let entry = summary["pods"].as_array()?.iter().find(|p| {
        let r = &p["podRef"];
        r["namespace"] == meta["namespace"]
            && r["name"] == meta["name"]
            && (meta["uid"].is_null()
                || r["uid"] == meta["uid"]
                // A static pod's mirror has a uid of its own; the kubelet reports the pod's.
                || meta["annotations"]["kubernetes.io/config.mirror"].is_string())
    })?;
    let mut containers = Vec::new();
    let mut time = String::new();
    for c in entry["containers"].as_array()? {
        // metrics-server drops a pod when any container lacks a number.
        let (usage, t) = usage(&c["cpu"], &c["memory"])?;
        if t > time {
            time = t;
        }
        containers.push(json!({"name": c["name"], "usage": usage}));
    }
    if containers.is_empty() {
        return None;
    }
    Some(json!({
        "kind": "PodMetrics",
        "apiVersion": API_VERSION,
        "metadata": metadata(pod, now),
        "timestamp": time,
        "window": WINDOW,
        "containers": containers,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_print_canonically() {
        assert_eq!(cpu_quantity(123_456_789), "123456789n");
        assert_eq!(cpu_quantity(250_000_000), "250m");
        assert_eq!(cpu_quantity(2_000_000_000), "2");
        assert_eq!(cpu_quantity(5_000), "5u");
        assert_eq!(memory_quantity(27_775_795), "27775795");
        assert_eq!(memory_quantity(27_124 * 1024), "27124Ki");
        assert_eq!(memory_quantity(1 << 20), "1Mi");
        assert_eq!(memory_quantity(0), "0");
    }

    fn summary() -> Value {
        json!({
            "node": {"nodeName": "n1",
                "cpu": {"time": "2026-01-01T00:00:10Z", "usageNanoCores": 150_000_000u64, "usageCoreNanoSeconds": 9},
                "memory": {"time": "2026-01-01T00:00:10Z", "workingSetBytes": 1048576}},
            "pods": [
                {"podRef": {"name": "web", "namespace": "default", "uid": "u1"},
                 "containers": [
                    {"name": "app", "cpu": {"time": "2026-01-01T00:00:10Z", "usageNanoCores": 1_000_000u64},
                     "memory": {"workingSetBytes": 2048}},
                    {"name": "side", "cpu": {"time": "2026-01-01T00:00:09Z", "usageNanoCores": 7u64},
                     "memory": {"workingSetBytes": 100}}]},
                {"podRef": {"name": "young", "namespace": "default", "uid": "u2"},
                 "containers": [{"name": "app", "cpu": {"usageCoreNanoSeconds": 5}, "memory": {"workingSetBytes": 1}}]}
            ]
        })
    }

    #[test]
    fn node_metrics_carry_the_node_labels_and_usage() {
        let node = json!({"metadata": {"name": "n1", "labels": {"zone": "a"}}});
        let m = node_metrics(&node, &summary(), "NOW").unwrap();
        assert_eq!(
            m,
            json!({"kind": "NodeMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
                "metadata": {"name": "n1", "creationTimestamp": "NOW", "labels": {"zone": "a"}},
                "timestamp": "2026-01-01T00:00:10Z", "window": "10s",
                "usage": {"cpu": "150m", "memory": "1Mi"}})
        );
        let no_rate =
            json!({"node": {"cpu": {"usageCoreNanoSeconds": 1}, "memory": {"workingSetBytes": 1}}});
        assert!(node_metrics(&node, &no_rate, "NOW").is_none());
    }

    #[test]
    fn pod_metrics_list_each_container() {
        let pod = json!({"metadata": {"name": "web", "namespace": "default", "uid": "u1", "labels": {"app": "web"}}});
        let m = pod_metrics(&pod, &summary(), "NOW").unwrap();
        assert_eq!(m["metadata"]["namespace"], "default");
        assert_eq!(m["metadata"]["labels"]["app"], "web");
        assert_eq!(m["timestamp"], "2026-01-01T00:00:10Z");
        assert_eq!(
            m["containers"],
            json!([{"name": "app", "usage": {"cpu": "1m", "memory": "2Ki"}},
                   {"name": "side", "usage": {"cpu": "7n", "memory": "100"}}])
        );
        // A pod recreated under the same name is not given the old pod's numbers.
        let other = json!({"metadata": {"name": "web", "namespace": "default", "uid": "u9"}});
        assert!(pod_metrics(&other, &summary(), "NOW").is_none());
        let mirror = json!({"metadata": {"name": "web", "namespace": "default", "uid": "m1",
            "annotations": {"kubernetes.io/config.mirror": "hash"}}});
        assert!(pod_metrics(&mirror, &summary(), "NOW").is_some());
        let young = json!({"metadata": {"name": "young", "namespace": "default", "uid": "u2"}});
        assert!(pod_metrics(&young, &summary(), "NOW").is_none());
    }
}
