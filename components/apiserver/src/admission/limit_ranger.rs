//! LimitRanger admission, as upstream's plugin: a new pod's containers get the namespace's
//! LimitRange defaults (`default` as limits, `defaultRequest` as requests) where they set none, and
//! are then held to each range's min, max and maxLimitRequestRatio (per Container, and summed per
//! Pod); a claim's storage request to the PersistentVolumeClaim range. Pure: the caller reads the
//! ranges. The refusal texts are upstream's, for `pods "<name>" is forbidden: <reason>`.

use kiln_common::quota::{resource_list, Amount, Usage};
use serde_json::{json, Value};

/// The annotation naming what the plugin set.
pub const ANNOTATION: &str = "kubernetes.io/limit-ranger";

fn items<'a>(ranges: &'a [Value], type_: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    ranges
        .iter()
        .flat_map(|r| r["spec"]["limits"].as_array().into_iter().flatten())
        .filter(move |i| i["type"] == type_)
}

/// Applies the Container defaults to a pod; returns what was set, for the annotation.
pub fn default_pod(pod: &mut Value, ranges: &[Value]) -> Option<String> {
    let (mut set_requests, mut set_limits) = (Vec::new(), Vec::new());
    for item in items(ranges, "Container") {
        for list in ["initContainers", "containers"] {
            for c in pod["spec"][list].as_array_mut().into_iter().flatten() {
                let name = c["name"].as_str().unwrap_or("").to_string();
                for (field, defaults, set) in [
                    ("limits", &item["default"], &mut set_limits),
                    ("requests", &item["defaultRequest"], &mut set_requests),
                ] {
                    let mut names = Vec::new();
                    for (r, q) in defaults.as_object().into_iter().flatten() {
                        if c["resources"][field].get(r).is_none() {
                            c["resources"][field][r] = q.clone();
                            names.push(r.clone());
                        }
                    }
                    if !names.is_empty() {
                        set.push((names.join(", "), name.clone()));
                    }
                }
            }
        }
    }
    if set_requests.is_empty() && set_limits.is_empty() {
        return None;
    }
    let describe = |set: &[(String, String)], what: &str| {
        set.iter()
            .map(|(names, c)| format!("{names} {what} for container {c}"))
            .collect::<Vec<_>>()
    };
    let mut parts = describe(&set_requests, "request");
    parts.extend(describe(&set_limits, "limit"));
    let note = format!("LimitRanger plugin set: {}", parts.join("; "));
    pod["metadata"]["annotations"][ANNOTATION] = json!(note);
    Some(note)
}

/// min/max/ratio of one item against requests and limits (`kind`: Container or Pod).
fn check(item: &Value, kind: &str, requests: &Usage, limits: &Usage, errors: &mut Vec<String>) {
    for (r, min) in item["min"].as_object().into_iter().flatten() {
        let Some(min) = Amount::of(min) else { continue };
        match requests.get(r) {
            None => errors.push(format!(
                "minimum {r} usage per {kind} is {}.  No request is specified",
                min.text()
            )),
            Some(req) if req.value < min.value => errors.push(format!(
                "minimum {r} usage per {kind} is {}, but request is {}",
                min.text(),
                req.text()
            )),
            Some(_) => {}
        }
    }
    for (r, max) in item["max"].as_object().into_iter().flatten() {
        let Some(max) = Amount::of(max) else { continue };
        match limits.get(r) {
            None => errors.push(format!(
                "maximum {r} usage per {kind} is {}.  No limit is specified",
                max.text()
            )),
            Some(lim) if lim.value > max.value => errors.push(format!(
                "maximum {r} usage per {kind} is {}, but limit is {}",
                max.text(),
                lim.text()
            )),
            Some(_) => {}
        }
    }
    for (r, ratio) in item["maxLimitRequestRatio"]
        .as_object()
        .into_iter()
        .flatten()
    {
        let (Some(ratio), Some(lim)) = (Amount::of(ratio), limits.get(r)) else {
            continue;
        };
        let req = requests.get(r).map_or(0, |a| a.value.0);
        let actual = if req == 0 {
            f64::INFINITY
        } else {
            lim.value.0 as f64 / req as f64
        };
        if actual > ratio.value.0 as f64 / 1000.0 {
            errors.push(format!(
                "{r} max limit to request ratio per {kind} is {}, but provided ratio is {actual:.6}",
                ratio.text()
            ));
        }
    }
}

/// The pod against every Container and Pod range; upstream's messages, or nothing.
pub fn validate_pod(pod: &Value, ranges: &[Value]) -> Vec<String> {
    let mut errors = Vec::new();
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .flat_map(|l| pod["spec"][*l].as_array().into_iter().flatten())
        .collect();
    for item in items(ranges, "Container") {
        for c in &containers {
            let requests = resource_list(&c["resources"]["requests"]);
            let limits = resource_list(&c["resources"]["limits"]);
            check(item, "Container", &requests, &limits, &mut errors);
        }
    }
    for item in items(ranges, "Pod") {
        let (mut requests, mut limits) = (Usage::new(), Usage::new());
        for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
            kiln_common::quota::add(&mut requests, &resource_list(&c["resources"]["requests"]));
            kiln_common::quota::add(&mut limits, &resource_list(&c["resources"]["limits"]));
        }
        check(item, "Pod", &requests, &limits, &mut errors);
    }
    errors
}

/// A claim's storage request against the PersistentVolumeClaim ranges (a claim has no limits: its
/// request is held to max).
pub fn validate_claim(pvc: &Value, ranges: &[Value]) -> Vec<String> {
    let mut errors = Vec::new();
    let requests = resource_list(&pvc["spec"]["resources"]["requests"]);
    for item in items(ranges, "PersistentVolumeClaim") {
        let min_only = json!({"min": item["min"]});
        check(
            &min_only,
            "PersistentVolumeClaim",
            &requests,
            &Usage::new(),
            &mut errors,
        );
        for (r, max) in item["max"].as_object().into_iter().flatten() {
            let (Some(max), Some(req)) = (Amount::of(max), requests.get(r)) else {
                continue;
            };
            if req.value > max.value {
                errors.push(format!(
                    "maximum {r} usage per PersistentVolumeClaim is {}, but request is {}",
                    max.text(),
                    req.text()
                ));
            }
        }
    }
    errors
}

/// Upstream's aggregate: one error as is, several as `[a, b]`.
pub fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range() -> Value {
        json!({"spec": {"limits": [{"type": "Container",
            "min": {"cpu": "50m", "memory": "100Mi"},
            "max": {"cpu": "500m", "memory": "500Mi"},
            "default": {"cpu": "500m", "memory": "500Mi"},
            "defaultRequest": {"cpu": "100m", "memory": "200Mi"}}]}})
    }

    fn pod(resources: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "pause", "resources": resources}]}})
    }

    #[test]
    fn defaults_fill_what_containers_leave_unset() {
        let mut p = pod(json!({}));
        let note = default_pod(&mut p, &[range()]).unwrap();
        let r = &p["spec"]["containers"][0]["resources"];
        assert_eq!(r["requests"], json!({"cpu": "100m", "memory": "200Mi"}));
        assert_eq!(r["limits"], json!({"cpu": "500m", "memory": "500Mi"}));
        assert_eq!(
            note,
            "LimitRanger plugin set: cpu, memory request for container pause; cpu, memory limit for container pause"
        );
        assert!(validate_pod(&p, &[range()]).is_empty());
        // A request set (here from the limit, by pod defaulting) is kept.
        let mut partial =
            pod(json!({"requests": {"cpu": "300m", "memory": "150Mi"}, "limits": {"cpu": "300m"}}));
        default_pod(&mut partial, &[range()]);
        let r = &partial["spec"]["containers"][0]["resources"];
        assert_eq!(r["requests"], json!({"cpu": "300m", "memory": "150Mi"}));
        assert_eq!(r["limits"], json!({"cpu": "300m", "memory": "500Mi"}));
    }

    #[test]
    fn min_max_and_ratio() {
        let mut small = pod(json!({"requests": {"cpu": "10m", "memory": "50Mi"}}));
        default_pod(&mut small, &[range()]);
        assert_eq!(
            validate_pod(&small, &[range()]),
            [
                "minimum cpu usage per Container is 50m, but request is 10m",
                "minimum memory usage per Container is 100Mi, but request is 50Mi"
            ]
        );
        let big =
            pod(json!({"requests": {"cpu": "600m"}, "limits": {"cpu": "600m", "memory": "600Mi"}}));
        let errors = validate_pod(&big, &[range()]);
        assert!(errors
            .contains(&"maximum cpu usage per Container is 500m, but limit is 600m".to_string()));
        assert!(errors.contains(
            &"minimum memory usage per Container is 100Mi.  No request is specified".to_string()
        ));
        let ratio = json!({"spec": {"limits": [{"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}]}});
        let p = pod(json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "500m"}}));
        assert_eq!(
            validate_pod(&p, &[ratio]),
            ["cpu max limit to request ratio per Container is 2, but provided ratio is 5.000000"]
        );
        assert_eq!(aggregate(&["a".into(), "b".into()]), "[a, b]");
    }

    #[test]
    fn claims_are_held_to_storage_bounds() {
        let r = json!({"spec": {"limits": [{"type": "PersistentVolumeClaim",
            "min": {"storage": "1Gi"}, "max": {"storage": "2Gi"}}]}});
        let pvc = |s: &str| json!({"spec": {"resources": {"requests": {"storage": s}}}});
        assert!(validate_claim(&pvc("1Gi"), std::slice::from_ref(&r)).is_empty());
        assert_eq!(
            validate_claim(&pvc("500Mi"), std::slice::from_ref(&r)),
            ["minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"]
        );
        assert_eq!(
            validate_claim(&pvc("3Gi"), &[r]),
            ["maximum storage usage per PersistentVolumeClaim is 2Gi, but request is 3Gi"]
        );
    }
}
