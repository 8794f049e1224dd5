//! In-place resize (`pods/<name>/resize`, InPlacePodVerticalScaling, beta in 1.33): what a write of
//! the subresource keeps (upstream's podResizeStrategy: only `resources` and `resizePolicy` of the
//! containers and init containers, everything else as stored) and upstream's ValidatePodResize
//! (the QoS class stays, requests and limits are not removed, only cpu and memory change, a memory
//! limit only goes down under RestartContainer, and regular init containers keep theirs).

use std::collections::BTreeSet;

use kiln_common::quantity;
use serde_json::Value;

use crate::status::Cause;

/// Upstream's text when anything but cpu and memory changes.
const ONLY_CPU_MEMORY: &str = "only cpu and memory resources are mutable";
const MEMORY_LIMIT_DECREASE: &str =
    "memory limits cannot be decreased unless resizePolicy is RestartContainer";

fn containers(pod: &Value, list: &str) -> Vec<Value> {
    pod["spec"][list].as_array().cloned().unwrap_or_default()
}

/// upstream's dropNonResizeUpdates: the stored pod with `incoming`'s resources and resizePolicy of
/// each container. A change to the containers themselves (count, names, order) is kept whole, so
/// validation refuses it rather than it being silently dropped.
pub fn with_resize(old: &Value, incoming: &Value) -> Value {
    let mut new = old.clone();
    for list in ["containers", "initContainers"] {
        let was = containers(old, list);
        let is = containers(incoming, list);
        let same_shape =
            was.len() == is.len() && was.iter().zip(&is).all(|(a, b)| a["name"] == b["name"]);
        if !same_shape {
            new["spec"][list] = incoming["spec"][list].clone();
            continue;
        }
        for (i, ctr) in is.iter().enumerate() {
            for field in ["resources", "resizePolicy"] {
                match ctr.get(field) {
                    Some(v) if !v.is_null() => new["spec"][list][i][field] = v.clone(),
                    _ => {
                        if let Some(c) = new["spec"][list][i].as_object_mut() {
                            c.remove(field);
                        }
                    }
                }
            }
        }
    }
    new
}

/// A sidecar: an init container that keeps running (`restartPolicy: Always`).
fn is_restartable(ctr: &Value) -> bool {
    ctr["restartPolicy"] == "Always"
}

fn resource_names(list: &Value) -> BTreeSet<String> {
    list.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// upstream's validateContainerResize: no request or limit is taken away, and a memory limit goes
/// down only when the container restarts for a memory resize.
fn container_resize(new: &Value, old: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let (new_res, old_res) = (&new["resources"], &old["resources"]);
    for (kind, what) in [("requests", "requests"), ("limits", "limits")] {
        let kept = resource_names(&new_res[kind]);
        for name in resource_names(&old_res[kind]) {
            if !kept.contains(&name) {
                causes.push(Cause::forbidden(
                    &format!("{path}.{kind}[{name}]"),
                    &format!("resource {what} cannot be removed"),
                ));
            }
        }
    }
    let was = quantity::of(&old_res["limits"]["memory"]);
    let is = quantity::of(&new_res["limits"]["memory"]);
    if let (Some(was), Some(is)) = (was, is) {
        let restarts = new["resizePolicy"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["resourceName"] == "memory" && p["restartPolicy"] == "RestartContainer");
        if is < was && !restarts {
            causes.push(Cause::forbidden(
                &format!("{path}.limits[memory]"),
                MEMORY_LIMIT_DECREASE,
            ));
        }
    }
    causes
}

/// The container with its cpu and memory requests and limits (and resizePolicy, which a resize may
/// set) taken from `old`: what is left to differ is a change a resize may not make.
fn without_cpu_memory(ctr: &Value, old: &Value) -> Value {
    let mut c = ctr.clone();
    let mut resources = c["resources"].as_object().cloned().unwrap_or_default();
    for kind in ["requests", "limits"] {
        let mut list = resources
            .get(kind)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for r in ["cpu", "memory"] {
            match old["resources"][kind].get(r) {
                Some(v) => {
                    list.insert(r.to_string(), v.clone());
                }
                None => {
                    list.remove(r);
                }
            }
        }
        // An emptied list is the same as none (Go's nil map) when the stored one had none.
        if list.is_empty() && old["resources"].get(kind).is_none() {
            resources.remove(kind);
        } else {
            resources.insert(kind.to_string(), Value::Object(list));
        }
    }
    if let Some(m) = c.as_object_mut() {
        if resources.is_empty() && old.get("resources").is_none() {
            m.remove("resources");
        } else {
            m.insert("resources".into(), Value::Object(resources));
        }
        match old.get("resizePolicy") {
            Some(v) => {
                m.insert("resizePolicy".into(), v.clone());
            }
            None => {
                m.remove("resizePolicy");
            }
        }
    }
    c
}

/// upstream's validatePodResizeContainerOrdering: the later checks pair containers by index.
fn ordering(new: &Value, old: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for list in ["containers", "initContainers"] {
        let (was, is) = (containers(old, list), containers(new, list));
        if was.len() != is.len() {
            causes.push(Cause::forbidden(
                &format!("spec.{list}"),
                &format!("{list} may not be added or removed on resize"),
            ));
            continue;
        }
        for (i, (a, b)) in was.iter().zip(&is).enumerate() {
            if a["name"] != b["name"] {
                causes.push(Cause::forbidden(
                    &format!("spec.{list}[{i}].name"),
                    &format!("{list} may not be renamed or reordered on resize"),
                ));
            }
        }
    }
    causes
}

/// upstream's ValidatePodResize (1.33), on the pod as [`with_resize`] built it.
pub fn validate_resize(old: &Value, new: &Value) -> Vec<Cause> {
    if new["spec"]["resources"]
        .as_object()
        .is_some_and(|m| !m.is_empty())
        || old["spec"]["resources"]
            .as_object()
            .is_some_and(|m| !m.is_empty())
    {
        return vec![Cause::forbidden(
            "",
            "pods with pod-level resources cannot be resized",
        )];
    }
    if old["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string() {
        return vec![Cause::forbidden("", "static pods cannot be resized")];
    }
    if old["spec"]["os"]["name"] == "windows" {
        return vec![Cause::forbidden("", "windows pods cannot be resized")];
    }
    let mut causes = Vec::new();
    if kiln_common::quota::qos_class(old) != kiln_common::quota::qos_class(new) {
        // Upstream prints the new pod's status class, which is the stored one.
        causes.push(Cause::invalid(
            "spec",
            &new["status"]["qosClass"],
            "Pod QOS Class may not change as a result of resizing",
        ));
    }
    let order = ordering(new, old);
    if !order.is_empty() {
        causes.extend(order);
        return causes;
    }
    let (old_init, new_init) = (
        containers(old, "initContainers"),
        containers(new, "initContainers"),
    );
    for (i, was) in old_init.iter().enumerate() {
        if is_restartable(was) {
            causes.extend(container_resize(
                &new_init[i],
                was,
                &format!("spec.initContainers[{i}].resources"),
            ));
        }
    }
    let (old_ctrs, new_ctrs) = (containers(old, "containers"), containers(new, "containers"));
    for (i, was) in old_ctrs.iter().enumerate() {
        causes.extend(container_resize(
            &new_ctrs[i],
            was,
            &format!("spec.containers[{i}].resources"),
        ));
    }
    for (was, is) in old_ctrs.iter().zip(&new_ctrs) {
        if without_cpu_memory(is, was) != *was {
            causes.push(Cause::forbidden("spec", ONLY_CPU_MEMORY));
        }
    }
    for (was, is) in old_init.iter().zip(&new_init) {
        if is_restartable(was) {
            if without_cpu_memory(is, was) != *was {
                causes.push(Cause::forbidden(
                    "spec",
                    "only cpu and memory resources for sidecar containers are mutable",
                ));
            }
        } else if is != was {
            causes.push(Cause::forbidden(
                "spec",
                "resources for non-sidecar init containers are immutable",
            ));
        }
    }
    causes
}

/// The update rule of `pods/<name>/resize`: the pod's own, with the containers' resources and
/// resize policies left to [`validate_resize`].
pub fn pod_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    let causes = validate_resize(old, new);
    if !causes.is_empty() {
        return causes;
    }
    // Whatever else differs (nothing, as the write builds it) is the main update's business.
    let mut same = new.clone();
    for list in ["containers", "initContainers"] {
        for (i, was) in containers(old, list).iter().enumerate() {
            if let Some(c) = same["spec"][list].get_mut(i) {
                *c = was.clone();
            }
        }
    }
    super::defaults::pod_update_validation(old, &same)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(resources: Value) -> Value {
        json!({"metadata": {"name": "p"},
               "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]},
               "status": {"qosClass": "Burstable", "phase": "Running"}})
    }

    fn messages(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn burstable() -> Value {
        pod(json!({"requests": {"cpu": "100m", "memory": "32Mi"},
                   "limits": {"cpu": "200m", "memory": "64Mi"}}))
    }

    #[test]
    fn only_resources_and_resize_policy_are_taken() {
        let old = burstable();
        let mut incoming = old.clone();
        incoming["metadata"]["labels"] = json!({"a": "b"});
        incoming["spec"]["containers"][0]["image"] = json!("other");
        incoming["spec"]["containers"][0]["resources"]["limits"]["memory"] = json!("128Mi");
        incoming["spec"]["containers"][0]["resizePolicy"] =
            json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
        incoming["status"]["phase"] = json!("Failed");
        let new = with_resize(&old, &incoming);
        assert_eq!(new["spec"]["containers"][0]["image"], "i");
        assert_eq!(
            new["spec"]["containers"][0]["resources"]["limits"]["memory"],
            "128Mi"
        );
        assert_eq!(
            new["spec"]["containers"][0]["resizePolicy"][0]["restartPolicy"],
            "RestartContainer"
        );
        assert!(new["metadata"].get("labels").is_none());
        assert_eq!(new["status"]["phase"], "Running");
        assert!(pod_update_validation(&old, &new).is_empty());
    }

    #[test]
    fn raising_limits_is_valid_and_removing_them_is_not() {
        let old = burstable();
        let mut new = old.clone();
        new["spec"]["containers"][0]["resources"]["limits"] = json!({"cpu": "200m"});
        new["spec"]["containers"][0]["resources"]["requests"] = json!({"memory": "32Mi"});
        assert_eq!(
            messages(&validate_resize(&old, &new)),
            [
                "spec.containers[0].resources.requests[cpu]: Forbidden: resource requests cannot be removed",
                "spec.containers[0].resources.limits[memory]: Forbidden: resource limits cannot be removed",
            ]
        );
    }

    #[test]
    fn memory_limits_go_down_only_with_a_restart() {
        let old = burstable();
        let mut new = old.clone();
        new["spec"]["containers"][0]["resources"]["limits"]["memory"] = json!("48Mi");
        assert_eq!(
            messages(&validate_resize(&old, &new)),
            ["spec.containers[0].resources.limits[memory]: Forbidden: memory limits cannot be decreased unless resizePolicy is RestartContainer"]
        );
        new["spec"]["containers"][0]["resizePolicy"] =
            json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
        assert!(validate_resize(&old, &new).is_empty());
        // Requests may go down.
        let mut lower = old.clone();
        lower["spec"]["containers"][0]["resources"]["requests"]["memory"] = json!("16Mi");
        assert!(validate_resize(&old, &lower).is_empty());
    }

    #[test]
    fn the_qos_class_stays() {
        let old = json!({"metadata": {}, "spec": {"containers": [{"name": "c", "image": "i"}]},
                         "status": {"qosClass": "BestEffort"}});
        let mut new = old.clone();
        new["spec"]["containers"][0]["resources"] = json!({"requests": {"memory": "40Mi"}});
        assert_eq!(
            messages(&validate_resize(&old, &new)),
            ["spec: Invalid value: \"BestEffort\": Pod QOS Class may not change as a result of resizing"]
        );
    }

    #[test]
    fn only_cpu_and_memory_change() {
        let old = burstable();
        let mut new = old.clone();
        new["spec"]["containers"][0]["resources"]["limits"]["ephemeral-storage"] = json!("1Gi");
        assert_eq!(
            messages(&validate_resize(&old, &new)),
            ["spec: Forbidden: only cpu and memory resources are mutable"]
        );
    }

    #[test]
    fn containers_keep_their_order_and_init_containers_their_resources() {
        let two = json!({"metadata": {}, "spec": {"containers": [
            {"name": "a", "image": "i"}, {"name": "b", "image": "i"}]}});
        let mut swapped = two.clone();
        swapped["spec"]["containers"] =
            json!([{"name": "b", "image": "i"}, {"name": "a", "image": "i"}]);
        let new = with_resize(&two, &swapped);
        assert_eq!(
            messages(&validate_resize(&two, &new)),
            [
                "spec.containers[0].name: Forbidden: containers may not be renamed or reordered on resize",
                "spec.containers[1].name: Forbidden: containers may not be renamed or reordered on resize",
            ]
        );
        let with_init = json!({"metadata": {}, "spec": {
            "initContainers": [{"name": "init", "image": "i",
                                "resources": {"requests": {"cpu": "100m"}}},
                               {"name": "side", "image": "i", "restartPolicy": "Always",
                                "resources": {"requests": {"cpu": "100m"}}}],
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "100m"}}}]}});
        let mut sidecar = with_init.clone();
        sidecar["spec"]["initContainers"][1]["resources"]["requests"]["cpu"] = json!("200m");
        assert!(validate_resize(&with_init, &sidecar).is_empty());
        let mut init = with_init.clone();
        init["spec"]["initContainers"][0]["resources"]["requests"]["cpu"] = json!("200m");
        assert_eq!(
            messages(&validate_resize(&with_init, &init)),
            ["spec: Forbidden: resources for non-sidecar init containers are immutable"]
        );
    }

    #[test]
    fn static_pods_are_not_resized() {
        let mut old = burstable();
        old["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
        let mut new = old.clone();
        new["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("1");
        assert_eq!(
            messages(&validate_resize(&old, &new)),
            [": Forbidden: static pods cannot be resized"]
        );
    }

    #[test]
    fn the_main_resource_still_refuses_a_resize() {
        let old = burstable();
        let mut new = old.clone();
        new["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("1");
        let main = super::super::defaults::pod_update_validation(&old, &new);
        assert_eq!(main.len(), 1);
        assert!(main[0]
            .message
            .starts_with("Forbidden: pod updates may not change fields other than"));
        assert!(pod_update_validation(&old, &new).is_empty());
    }
}
