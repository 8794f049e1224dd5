//! Kind-specific defaults and validation referenced from the `ResourceSpec` entries in
//! `resources.rs`, mirroring upstream's defaulters and validators for the served kinds.

use base64::Engine;
use serde_json::{json, Value};

use crate::status::Cause;

pub fn secret_defaults(obj: &mut Value) {
    if obj["type"].as_str().unwrap_or("").is_empty() {
        obj["type"] = json!("Opaque");
    }
    // stringData is write-only: upstream folds it into data (base64) and never stores it.
    if let Some(Value::Object(plain)) = obj.as_object_mut().and_then(|o| o.remove("stringData")) {
        for (k, v) in plain {
            let text = v
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string());
            obj["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
}

pub fn namespace_defaults(obj: &mut Value) {
    let name = obj["metadata"]["name"].clone();
    // Upstream labels every namespace with its own name, so selectors can match namespaces by name.
    obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = name;
    if obj["spec"]["finalizers"].is_null() {
        obj["spec"]["finalizers"] = json!(["kubernetes"]);
    }
    if obj["status"]["phase"].is_null() {
        obj["status"] = json!({"phase": "Active"});
    }
}

pub fn pod_defaults(obj: &mut Value) {
    pod_spec_defaults(&mut obj["spec"]);
    if obj["status"]["phase"].is_null() {
        obj["status"]["phase"] = json!("Pending");
    }
}

/// Defaults of a PodSpec, shared by pods and the pod templates of workload kinds.
pub fn pod_spec_defaults(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    for (field, value) in [
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("enableServiceLinks", json!(true)),
        ("securityContext", json!({})),
    ] {
        if spec[field].is_null() {
            spec[field] = value;
        }
    }
    for list in ["initContainers", "containers"] {
        if let Some(containers) = spec[list].as_array_mut() {
            for ctr in containers {
                container_defaults(ctr);
            }
        }
    }
}

fn container_defaults(ctr: &mut Value) {
    if ctr["terminationMessagePath"].is_null() {
        ctr["terminationMessagePath"] = json!("/dev/termination-log");
    }
    if ctr["terminationMessagePolicy"].is_null() {
        ctr["terminationMessagePolicy"] = json!("File");
    }
    if ctr["imagePullPolicy"].is_null() {
        // Upstream: Always for :latest or untagged images, IfNotPresent otherwise.
        let image = ctr["image"].as_str().unwrap_or("");
        let last = image.rsplit('/').next().unwrap_or("");
        let tagged = last.contains(':') || image.contains('@');
        let latest = last.ends_with(":latest");
        ctr["imagePullPolicy"] = json!(if !tagged || latest {
            "Always"
        } else {
            "IfNotPresent"
        });
    }
    if ctr["resources"].is_null() {
        ctr["resources"] = json!({});
    }
}

pub fn pod_validation(obj: &Value) -> Vec<Cause> {
    pod_spec_validation(&obj["spec"], "spec")
}

/// PodSpec validation at `path` (`spec`, or `spec.template.spec` in workload kinds).
pub fn pod_spec_validation(spec: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let containers = spec["containers"].as_array();
    match containers {
        None => causes.push(Cause::required(&format!("{path}.containers"), "")),
        Some(list) if list.is_empty() => {
            causes.push(Cause::required(&format!("{path}.containers"), ""))
        }
        Some(list) => {
            for (i, ctr) in list.iter().enumerate() {
                if ctr["name"].as_str().unwrap_or("").is_empty() {
                    causes.push(Cause::required(&format!("{path}.containers[{i}].name"), ""));
                }
                if ctr["image"].as_str().unwrap_or("").is_empty() {
                    causes.push(Cause::required(
                        &format!("{path}.containers[{i}].image"),
                        "",
                    ));
                }
            }
        }
    }
    causes
}

/// A pod bound to a node waits for its kubelet; an unbound or finished pod goes at once.
pub fn pod_grace(obj: &Value) -> Option<i64> {
    let node = obj["spec"]["nodeName"].as_str().unwrap_or("");
    let phase = obj["status"]["phase"].as_str().unwrap_or("");
    if node.is_empty() || phase == "Succeeded" || phase == "Failed" {
        return None;
    }
    Some(
        obj["spec"]["terminationGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(30),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_defaults_pick_pull_policy() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "image": "nginx"},
            {"name": "b", "image": "registry:5000/x:1.0"},
            {"name": "c", "image": "x:latest"}]}});
        pod_defaults(&mut pod);
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(
            pod["spec"]["containers"][1]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(pod["spec"]["containers"][2]["imagePullPolicy"], "Always");
        assert_eq!(pod["status"]["phase"], "Pending");
    }

    #[test]
    fn secret_string_data_folds_into_data() {
        let mut s = json!({"stringData": {"x": "y"}, "data": {"a": "Yg=="}});
        secret_defaults(&mut s);
        assert_eq!(
            s,
            json!({"type": "Opaque", "data": {"a": "Yg==", "x": "eQ=="}})
        );
    }

    #[test]
    fn pod_without_containers_is_invalid() {
        assert_eq!(
            pod_validation(&json!({"spec": {}}))[0].field,
            "spec.containers"
        );
    }
}
