//! Ephemeral containers (`spec.ephemeralContainers`, written through `pods/<name>/ephemeralcontainers`):
//! upstream's validation of the list itself (`validateEphemeralContainers`: names unique across every
//! container of the pod, a target that names a regular or init container, and the fields an ephemeral
//! container may not set — it serves no traffic, is never probed or restarted and gets no resources)
//! and of a change to it (`ValidatePodEphemeralContainersUpdate`: only additions; one added stays as it
//! was; static pods have none).

use serde_json::Value;

use crate::status::Cause;

/// Upstream's error text for a field outside the allow list.
const NOT_FOR_EPHEMERAL: &str = "cannot be set for an Ephemeral Container";

/// The fields of EphemeralContainerCommon an ephemeral container may not set, in the struct's order
/// (upstream walks the struct, so its errors come in this order).
const FORBIDDEN_FIELDS: &[&str] = &[
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
];

/// Go's zero value: absent, null, an empty object or list (`resources: {}`, as kubectl debug sends
/// it, is unset).
fn is_set(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => true,
    }
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .map(|l| l.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default()
}

fn not_found(field: &str, value: &str) -> Cause {
    Cause {
        reason: "FieldValueNotFound",
        message: format!("Not found: {value:?}"),
        field: field.to_string(),
    }
}

/// `spec.ephemeralContainers` of a pod spec at `path` (`spec`).
pub fn validate(spec: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(list) = spec["ephemeralContainers"].as_array() else {
        return causes;
    };
    let others: Vec<&str> = names(&spec["containers"])
        .into_iter()
        .chain(names(&spec["initContainers"]))
        .collect();
    let mut all: Vec<&str> = others.clone();
    for (i, ec) in list.iter().enumerate() {
        let at = format!("{path}.ephemeralContainers[{i}]");
        let name = ec["name"].as_str().unwrap_or("");
        if name.is_empty() {
            causes.push(Cause::required(&format!("{at}.name"), ""));
        } else {
            if !super::dns_names::is_label(name) {
                causes.push(Cause::invalid(
                    &format!("{at}.name"),
                    &Value::from(name),
                    super::dns_names::LABEL_MSG,
                ));
            }
        }
        if ec["image"].as_str().unwrap_or("").is_empty() {
            causes.push(Cause::required(&format!("{at}.image"), ""));
        }
        if !name.is_empty() {
            if all.contains(&name) {
                causes.push(Cause::duplicate(&format!("{at}.name"), &Value::from(name)));
            } else {
                all.push(name);
            }
        }
        if let Some(target) = ec["targetContainerName"].as_str().filter(|t| !t.is_empty()) {
            if !others.contains(&target) {
                causes.push(not_found(&format!("{at}.targetContainerName"), target));
            }
        }
        for field in FORBIDDEN_FIELDS {
            if is_set(&ec[*field]) {
                causes.push(Cause::forbidden(
                    &format!("{at}.{field}"),
                    NOT_FOR_EPHEMERAL,
                ));
            }
        }
        // Sub-path bind mounts outlive the container until the pod goes: not for a debugger.
        for (j, vm) in ec["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            for field in ["subPath", "subPathExpr"] {
                if vm[field].as_str().is_some_and(|s| !s.is_empty()) {
                    causes.push(Cause::forbidden(
                        &format!("{at}.volumeMounts[{j}].{field}"),
                        NOT_FOR_EPHEMERAL,
                    ));
                }
            }
        }
    }
    causes
}

/// A write of `pods/<name>/ephemeralcontainers`: containers may be added, never removed or changed
/// (compared by name: a patch does not keep the order), and a static pod's mirror takes none.
pub fn validate_update(old: &Value, new: &Value) -> Vec<Cause> {
    if old["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string() {
        return vec![Cause::forbidden(
            "",
            "static pods do not support ephemeral containers",
        )];
    }
    let path = "spec.ephemeralContainers";
    let new_list = new["spec"]["ephemeralContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut causes = Vec::new();
    for was in old["spec"]["ephemeralContainers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = was["name"].as_str().unwrap_or("");
        match new_list.iter().find(|c| c["name"].as_str() == Some(name)) {
            None => causes.push(Cause::forbidden(
                path,
                &format!("existing ephemeral containers {name:?} may not be removed\n"),
            )),
            Some(is) if is != was => causes.push(Cause::forbidden(
                path,
                &format!(
                    "existing ephemeral containers {name:?} may not be changed\n{}",
                    changed_fields(was, is)
                ),
            )),
            Some(_) => {}
        }
    }
    causes
}

/// The update rule of `pods/<name>/ephemeralcontainers`: the pod's own (nothing else may change,
/// which that write cannot do anyway) with the ephemeral containers left to [`validate_update`].
pub fn pod_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    let mut same = new.clone();
    same["spec"]["ephemeralContainers"] = old["spec"]["ephemeralContainers"].clone();
    if same["spec"]["ephemeralContainers"].is_null() {
        if let Some(s) = same["spec"].as_object_mut() {
            s.remove("ephemeralContainers");
        }
    }
    let mut causes = super::defaults::pod_update_validation(old, &same);
    causes.extend(validate_update(old, new));
    causes
}

/// Which top-level fields of a container differ (upstream prints a cmp.Diff here).
fn changed_fields(was: &Value, is: &Value) -> String {
    let empty = serde_json::Map::new();
    let a = was.as_object().unwrap_or(&empty);
    let b = is.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| {
            format!(
                "  {k}: {} -> {}",
                a.get(k).unwrap_or(&Value::Null),
                b.get(k).unwrap_or(&Value::Null)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(ephemeral: Value) -> Value {
        json!({"containers": [{"name": "app", "image": "i"}],
               "initContainers": [{"name": "init", "image": "i"}],
               "ephemeralContainers": ephemeral})
    }

    fn messages(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn a_debugger_with_a_target_is_valid() {
        let s = spec(
            json!([{"name": "debugger", "image": "busybox", "targetContainerName": "app",
                             "stdin": true, "tty": true, "resources": {},
                             "securityContext": {"privileged": false}}]),
        );
        assert!(validate(&s, "spec").is_empty());
    }

    #[test]
    fn fields_a_debugger_may_not_set_are_forbidden_in_upstream_order() {
        let s = spec(json!([{"name": "d", "image": "i",
            "lifecycle": {"postStart": {"exec": {"command": ["true"]}}},
            "ports": [{"containerPort": 80}],
            "readinessProbe": {"exec": {"command": ["true"]}},
            "resources": {"limits": {"cpu": "1"}},
            "volumeMounts": [{"name": "v", "mountPath": "/v", "subPath": "x"}]}]));
        assert_eq!(
            messages(&validate(&s, "spec")),
            [
                "spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container",
                "spec.ephemeralContainers[0].resources: Forbidden: cannot be set for an Ephemeral Container",
                "spec.ephemeralContainers[0].readinessProbe: Forbidden: cannot be set for an Ephemeral Container",
                "spec.ephemeralContainers[0].lifecycle: Forbidden: cannot be set for an Ephemeral Container",
                "spec.ephemeralContainers[0].volumeMounts[0].subPath: Forbidden: cannot be set for an Ephemeral Container",
            ]
        );
    }

    #[test]
    fn names_are_unique_across_all_containers_and_targets_must_exist() {
        let s = spec(json!([
            {"name": "app", "image": "i"},
            {"name": "d", "image": "i"},
            {"name": "d", "image": "i", "targetContainerName": "nope"},
            {"name": "e", "image": "i", "targetContainerName": "d"},
        ]));
        assert_eq!(
            messages(&validate(&s, "spec")),
            [
                "spec.ephemeralContainers[0].name: Duplicate value: \"app\"",
                "spec.ephemeralContainers[2].name: Duplicate value: \"d\"",
                "spec.ephemeralContainers[2].targetContainerName: Not found: \"nope\"",
                // Another ephemeral container is no target.
                "spec.ephemeralContainers[3].targetContainerName: Not found: \"d\"",
            ]
        );
        let unnamed = spec(json!([{"image": ""}]));
        assert_eq!(
            messages(&validate(&unnamed, "spec")),
            [
                "spec.ephemeralContainers[0].name: Required value",
                "spec.ephemeralContainers[0].image: Required value",
            ]
        );
    }

    #[test]
    fn only_additions_are_allowed() {
        let pod = |list: Value| json!({"metadata": {}, "spec": {"ephemeralContainers": list}});
        let one = json!({"name": "a", "image": "i"});
        let two = json!({"name": "b", "image": "i"});
        assert!(validate_update(&pod(json!([])), &pod(json!([one.clone()]))).is_empty());
        // Order does not matter (a strategic patch may reorder).
        assert!(validate_update(
            &pod(json!([one.clone(), two.clone()])),
            &pod(json!([two.clone(), one.clone()]))
        )
        .is_empty());
        let removed = validate_update(&pod(json!([one.clone(), two.clone()])), &pod(json!([two])));
        assert_eq!(
            messages(&removed),
            ["spec.ephemeralContainers: Forbidden: existing ephemeral containers \"a\" may not be removed\n"]
        );
        let changed = validate_update(
            &pod(json!([one])),
            &pod(json!([{"name": "a", "image": "other"}])),
        );
        assert_eq!(changed.len(), 1);
        assert!(changed[0]
            .message
            .starts_with("Forbidden: existing ephemeral containers \"a\" may not be changed\n"));
        assert!(changed[0].message.contains("image"));
    }

    #[test]
    fn only_the_subresource_may_add_them() {
        let old = json!({"metadata": {}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let mut new = old.clone();
        new["spec"]["ephemeralContainers"] = json!([{"name": "d", "image": "i"}]);
        assert!(pod_update_validation(&old, &new).is_empty());
        let main = super::super::defaults::pod_update_validation(&old, &new);
        assert_eq!(main.len(), 1);
        assert!(main[0]
            .message
            .starts_with("Forbidden: pod updates may not change fields"));
        // The subresource changes nothing else.
        new["spec"]["containers"][0]["name"] = json!("other");
        assert_eq!(pod_update_validation(&old, &new).len(), 1);
    }

    #[test]
    fn static_pods_take_none() {
        let old =
            json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "h"}}, "spec": {}});
        let new =
            json!({"metadata": {}, "spec": {"ephemeralContainers": [{"name": "a", "image": "i"}]}});
        assert_eq!(
            messages(&validate_update(&old, &new)),
            [": Forbidden: static pods do not support ephemeral containers"]
        );
    }
}
