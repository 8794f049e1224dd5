//! RuntimeClass admission, as upstream's plugin: a pod naming a RuntimeClass that does not exist is
//! refused; the class's overhead becomes the pod's spec.overhead (a pod that sets a different one
//! is refused); the class's scheduling nodeSelector and tolerations are merged into the pod's (a
//! conflicting nodeSelector key is refused). Pure: the caller reads the class.

use serde_json::{json, Value};

use crate::registry::storage_quantity as quantity;

/// The class a pod names, if any.
pub fn class_of(pod: &Value) -> Option<&str> {
    pod["spec"]["runtimeClassName"]
        .as_str()
        .filter(|s| !s.is_empty())
}

/// Two resource lists hold the same quantities (`10m` = `0.01`).
fn same_resources(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a.is_null() && b.is_null();
    };
    a.len() == b.len()
        && a.iter().all(|(k, v)| {
            b.get(k)
                .is_some_and(|w| quantity::of(v).is_some() && quantity::of(v) == quantity::of(w))
        })
}

/// Admits a pod being created against its class (`None`: the class does not exist). The reason
/// of a refusal is upstream's text, for `pods "<name>" is forbidden: <reason>`.
pub fn admit(pod: &mut Value, name: &str, class: Option<&Value>) -> Result<(), String> {
    let Some(class) = class else {
        return Err(format!("pod rejected: RuntimeClass {name:?} not found"));
    };
    let fixed = &class["overhead"]["podFixed"];
    let spec = &mut pod["spec"];
    let has_overhead = spec["overhead"].as_object().is_some_and(|o| !o.is_empty());
    match (fixed.is_object(), has_overhead) {
        (true, true) if !same_resources(fixed, &spec["overhead"]) => {
            return Err(
                "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead".into(),
            )
        }
        (false, true) => return Err(
            "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
                .into(),
        ),
        (true, _) => spec["overhead"] = fixed.clone(),
        (false, false) => {}
    }
    let scheduling = &class["scheduling"];
    if let Some(selector) = scheduling["nodeSelector"].as_object() {
        if !spec["nodeSelector"].is_object() {
            spec["nodeSelector"] = json!({});
        }
        for (k, v) in selector {
            match spec["nodeSelector"].get(k) {
                Some(pv) if pv != v => {
                    return Err(format!(
                        "conflict: runtimeClass.scheduling.nodeSelector[{k}] = {}; pod.spec.nodeSelector[{k}] = {}",
                        v.as_str().unwrap_or(""),
                        pv.as_str().unwrap_or("")
                    ))
                }
                Some(_) => {}
                None => spec["nodeSelector"][k] = v.clone(),
            }
        }
    }
    if let Some(tolerations) = scheduling["tolerations"].as_array() {
        if !spec["tolerations"].is_array() {
            spec["tolerations"] = json!([]);
        }
        let list = spec["tolerations"].as_array_mut().expect("set above");
        for t in tolerations {
            if !list.contains(t) {
                list.push(t.clone());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn a_missing_class_is_refused_with_upstreams_reason() {
        let mut p = pod(json!({"runtimeClassName": "gone"}));
        assert_eq!(
            admit(&mut p, "gone", None).unwrap_err(),
            "pod rejected: RuntimeClass \"gone\" not found"
        );
    }

    #[test]
    fn overhead_is_set_from_the_class_and_must_match_it() {
        let class =
            json!({"handler": "runc", "overhead": {"podFixed": {"cpu": "10m", "memory": "1Mi"}}});
        let mut p = pod(json!({"runtimeClassName": "rc"}));
        admit(&mut p, "rc", Some(&class)).unwrap();
        assert_eq!(
            p["spec"]["overhead"],
            json!({"cpu": "10m", "memory": "1Mi"})
        );
        let mut same = pod(json!({"overhead": {"cpu": "0.01", "memory": "1Mi"}}));
        assert!(admit(&mut same, "rc", Some(&class)).is_ok());
        let mut other = pod(json!({"overhead": {"cpu": "1"}}));
        assert!(admit(&mut other, "rc", Some(&class))
            .unwrap_err()
            .contains("doesn't match"));
        let plain = json!({"handler": "runc"});
        let mut unasked = pod(json!({"overhead": {"cpu": "1"}}));
        assert!(admit(&mut unasked, "rc", Some(&plain))
            .unwrap_err()
            .contains("without corresponding"));
        let mut none = pod(json!({}));
        admit(&mut none, "rc", Some(&plain)).unwrap();
        assert!(none["spec"]["overhead"].is_null());
    }

    #[test]
    fn scheduling_is_merged_and_conflicts_refused() {
        let class = json!({"handler": "h", "scheduling": {
            "nodeSelector": {"sandbox": "true"},
            "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}]}});
        let mut p = pod(json!({"nodeSelector": {"zone": "a"},
            "tolerations": [{"key": "other", "operator": "Exists"}]}));
        admit(&mut p, "h", Some(&class)).unwrap();
        assert_eq!(
            p["spec"]["nodeSelector"],
            json!({"zone": "a", "sandbox": "true"})
        );
        assert_eq!(p["spec"]["tolerations"].as_array().unwrap().len(), 2);
        let mut clash = pod(json!({"nodeSelector": {"sandbox": "false"}}));
        assert_eq!(
            admit(&mut clash, "h", Some(&class)).unwrap_err(),
            "conflict: runtimeClass.scheduling.nodeSelector[sandbox] = true; pod.spec.nodeSelector[sandbox] = false"
        );
    }
}
