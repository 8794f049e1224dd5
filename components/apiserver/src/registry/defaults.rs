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
    if obj["status"]["qosClass"].is_null() {
        obj["status"]["qosClass"] = json!(kiln_common::quota::qos_class(obj));
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
    for list in ["initContainers", "containers", "ephemeralContainers"] {
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
    // An unset request defaults to the limit (upstream's SetDefaults_Pod).
    if let Some(limits) = ctr["resources"]["limits"].as_object().cloned() {
        for (name, limit) in limits {
            if ctr["resources"]["requests"].get(&name).is_none() {
                ctr["resources"]["requests"][name] = limit;
            }
        }
    }
}

pub fn pod_validation(obj: &Value) -> Vec<Cause> {
    let mut causes = super::apparmor_annotations::pod(obj);
    causes.extend(pod_spec_validation(&obj["spec"], "spec"));
    causes.extend(super::ephemeral_containers::validate(&obj["spec"], "spec"));
    causes
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
    for (i, sysctl) in spec["securityContext"]["sysctls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = sysctl["name"].as_str().unwrap_or("");
        let at = format!("{path}.securityContext.sysctls[{i}].name");
        if name.is_empty() {
            causes.push(Cause::required(&at, ""));
        } else if !is_sysctl_name(name) {
            causes.push(Cause::invalid(
                &at,
                &json!(name),
                &format!("must have at most 253 characters and match regex {SYSCTL_NAME_FMT}"),
            ));
        }
    }
    causes.extend(super::pod_resources::validation(spec, path));
    causes.extend(super::security_context_fields::validation(spec, path));
    causes.extend(super::security_context_apparmor::validation(spec, path));
    causes.extend(container_restart_policies(spec, path));
    causes
}

/// Upstream's container restartPolicy rules (sidecars, KEP-753): only init containers may set it, and
/// only to Always; an init container without it may not have lifecycle hooks or probes.
fn container_restart_policies(spec: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (i, ctr) in spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if !ctr["restartPolicy"].is_null() {
            causes.push(Cause::forbidden(
                &format!("{path}.containers[{i}].restartPolicy"),
                "may not be set for non-init containers",
            ));
        }
    }
    for (i, ctr) in spec["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{path}.initContainers[{i}]");
        let policy = &ctr["restartPolicy"];
        if !policy.is_null() && policy != "Always" {
            let value = policy
                .as_str()
                .map_or_else(|| policy.to_string(), String::from);
            causes.push(Cause::not_supported(
                &format!("{at}.restartPolicy"),
                &value,
                &["Always"],
            ));
        }
        if policy == "Always" {
            continue;
        }
        for field in [
            "lifecycle",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
        ] {
            if !ctr[field].is_null() {
                causes.push(Cause::forbidden(
                    &format!("{at}.{field}"),
                    "may not be set for init containers without restartPolicy=Always",
                ));
            }
        }
    }
    causes
}

/// Upstream's sysctl name pattern (dots or slashes between segments).
const SYSCTL_NAME_FMT: &str =
    "^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$";

/// upstream's IsValidSysctlName.
fn is_sysctl_name(name: &str) -> bool {
    let segment_ok = |seg: &str| {
        let b = seg.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_lowercase() | b[0].is_ascii_digit()
            && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_')
    };
    name.len() <= 253 && name.split(['.', '/']).all(segment_ok)
}

/// Upstream's ValidatePodUpdate: a pod's spec is immutable but for container images,
/// activeDeadlineSeconds, tolerations and terminationGracePeriodSeconds (and scheduling gates being
/// removed, and the node it is bound to, which only the binding subresource sets).
pub fn pod_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    let masked = |pod: &Value| {
        let mut spec = pod["spec"].clone();
        if let Some(s) = spec.as_object_mut() {
            for field in [
                "activeDeadlineSeconds",
                "tolerations",
                "terminationGracePeriodSeconds",
                "schedulingGates",
                "nodeName",
            ] {
                s.remove(field);
            }
        }
        for list in ["containers", "initContainers"] {
            for c in spec[list].as_array_mut().into_iter().flatten() {
                if let Some(c) = c.as_object_mut() {
                    c.remove("image");
                }
            }
        }
        spec
    };
    let rebinding = {
        let was = old["spec"]["nodeName"].as_str().unwrap_or("");
        let is = new["spec"]["nodeName"].as_str().unwrap_or("");
        !was.is_empty() && was != is
    };
    if masked(old) == masked(new) && !rebinding {
        return Vec::new();
    }
    vec![Cause::forbidden(
        "spec",
        "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
    )]
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
    fn sysctl_names() {
        for ok in [
            "kernel.shm_rmid_forced",
            "net.ipv4.ip_local_port_range",
            "kernel/shm_rmid_forced",
        ] {
            assert!(is_sysctl_name(ok), "{ok}");
        }
        for bad in ["foo-", "bar..", "", ".a", "A.b", "a_"] {
            assert!(!is_sysctl_name(bad), "{bad}");
        }
        let pod = json!({"spec": {"containers": [{"name": "c", "image": "i"}],
            "securityContext": {"sysctls": [{"name": "foo-", "value": "1"}]}}});
        let causes = pod_validation(&pod);
        assert_eq!(causes[0].field, "spec.securityContext.sysctls[0].name");
    }

    #[test]
    fn requests_default_to_limits_and_qos_follows() {
        let mut pod = json!({"spec": {"containers": [{"name": "c", "image": "a:1",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}});
        pod_defaults(&mut pod);
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "1"
        );
        assert_eq!(pod["status"]["qosClass"], "Guaranteed");
        let mut burstable = json!({"spec": {"containers": [{"name": "c", "image": "a:1",
            "resources": {"requests": {"cpu": "100m"}}}]}});
        pod_defaults(&mut burstable);
        assert_eq!(burstable["status"]["qosClass"], "Burstable");
        let mut best = json!({"spec": {"containers": [{"name": "c", "image": "a:1"}]}});
        pod_defaults(&mut best);
        assert_eq!(best["status"]["qosClass"], "BestEffort");
    }

    #[test]
    fn pod_specs_change_only_where_upstream_allows() {
        let old = json!({"spec": {"containers": [{"name": "c", "image": "a:1",
            "resources": {"requests": {"cpu": "500m"}}}], "activeDeadlineSeconds": 30}});
        let mut new = old.clone();
        new["spec"]["containers"][0]["image"] = json!("a:2");
        new["spec"]["activeDeadlineSeconds"] = json!(10);
        new["spec"]["nodeName"] = json!("n1");
        assert!(pod_update_validation(&old, &new).is_empty());
        let mut resources = old.clone();
        resources["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("100m");
        let causes = pod_update_validation(&old, &resources);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec");
        let mut moved = new.clone();
        moved["spec"]["nodeName"] = json!("n2");
        assert_eq!(pod_update_validation(&new, &moved).len(), 1);
    }

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
    fn only_init_containers_may_restart_always() {
        let c = |extra: Value| {
            let mut c = json!({"name": "c", "image": "i"});
            for (k, v) in extra.as_object().unwrap() {
                c[k] = v.clone();
            }
            c
        };
        let probe = json!({"exec": {"command": ["true"]}});
        let sidecar = c(json!({"restartPolicy": "Always", "startupProbe": probe,
                               "lifecycle": {"preStop": {"exec": {"command": ["true"]}}}}));
        let ok = json!({"spec": {"initContainers": [sidecar], "containers": [c(json!({}))]}});
        assert!(pod_validation(&ok).is_empty());

        let bad = json!({"spec": {
            "initContainers": [c(json!({"restartPolicy": "OnFailure"})),
                               c(json!({"readinessProbe": probe}))],
            "containers": [c(json!({"restartPolicy": "Always"}))],
        }});
        let got: Vec<(String, String)> = pod_validation(&bad)
            .into_iter()
            .map(|c| (c.field, c.message))
            .collect();
        let want = [
            (
                "spec.containers[0].restartPolicy",
                "Forbidden: may not be set for non-init containers",
            ),
            (
                "spec.initContainers[0].restartPolicy",
                "Unsupported value: \"OnFailure\": supported values: \"Always\"",
            ),
            (
                "spec.initContainers[1].readinessProbe",
                "Forbidden: may not be set for init containers without restartPolicy=Always",
            ),
        ];
        assert_eq!(
            got,
            want.map(|(f, m)| (f.to_string(), m.to_string())).to_vec()
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
