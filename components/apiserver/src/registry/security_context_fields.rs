//! securityContext fields as upstream validates them: `seccompProfile` of a pod and its containers
//! (validateSeccompProfileField: a known type, and a Localhost profile named by a relative path
//! that stays below the kubelet's seccomp directory; a profile that is well formed but missing on
//! the node is the runtime's to refuse, CreateContainerError) and the pod's
//! `fsGroupChangePolicy` (validateFSGroupChangePolicy).

use serde_json::{json, Value};

use crate::status::Cause;

const TYPES: &[&str] = &["Localhost", "RuntimeDefault", "Unconfined"];
/// In upstream's order (validFSGroupChangePolicies).
const FS_GROUP_CHANGE_POLICIES: &[&str] = &["OnRootMismatch", "Always"];

/// The pod spec at `path` (`spec`, or a template's).
pub fn validation(spec: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(policy) = spec["securityContext"]["fsGroupChangePolicy"].as_str() {
        if !FS_GROUP_CHANGE_POLICIES.contains(&policy) {
            causes.push(Cause::not_supported(
                &format!("{path}.securityContext.fsGroupChangePolicy"),
                policy,
                FS_GROUP_CHANGE_POLICIES,
            ));
        }
    }
    causes.extend(profile(
        &spec["securityContext"]["seccompProfile"],
        &format!("{path}.securityContext.seccompProfile"),
    ));
    for list in ["initContainers", "containers"] {
        for (i, ctr) in spec[list].as_array().into_iter().flatten().enumerate() {
            causes.extend(profile(
                &ctr["securityContext"]["seccompProfile"],
                &format!("{path}.{list}[{i}].securityContext.seccompProfile"),
            ));
        }
    }
    causes
}

fn profile(sp: &Value, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if !sp.is_object() {
        return causes;
    }
    let type_ = sp["type"].as_str().unwrap_or("");
    if type_.is_empty() {
        causes.push(Cause::required(
            &format!("{at}.type"),
            "type is required when seccompProfile is set",
        ));
    } else if !TYPES.contains(&type_) {
        causes.push(Cause::not_supported(&format!("{at}.type"), type_, TYPES));
    }
    let field = format!("{at}.localhostProfile");
    match sp["localhostProfile"].as_str() {
        None if type_ == "Localhost" => causes.push(Cause::required(
            &field,
            "must be set when seccomp type is Localhost",
        )),
        Some(p) if type_ == "Localhost" => {
            if p.starts_with('/') {
                causes.push(Cause::invalid(&field, &json!(p), "must be a relative path"));
            }
            if p.split('/').any(|part| part == "..") {
                causes.push(Cause::invalid(&field, &json!(p), "must not contain '..'"));
            }
        }
        // Upstream also refuses a localhostProfile beside another type, quoting the whole struct
        // in Go syntax; kiln leaves that case to the runtime, which ignores the field.
        _ => {}
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn causes(pod_sp: Value, ctr_sp: Value) -> Vec<String> {
        let spec = json!({"securityContext": {"seccompProfile": pod_sp},
            "containers": [{"name": "c", "image": "i", "securityContext": {"seccompProfile": ctr_sp}}]});
        validation(&spec, "spec")
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn localhost_profiles_stay_below_the_seccomp_directory() {
        assert_eq!(
            causes(
                json!({"type": "Localhost", "localhostProfile": "/etc/profile.json"}),
                json!({"type": "Localhost", "localhostProfile": "profiles/../../x.json"})
            ),
            [
                "spec.securityContext.seccompProfile.localhostProfile: Invalid value: \"/etc/profile.json\": must be a relative path",
                "spec.containers[0].securityContext.seccompProfile.localhostProfile: Invalid value: \"profiles/../../x.json\": must not contain '..'",
            ]
        );
        assert_eq!(
            causes(Value::Null, json!({"type": "Localhost"})),
            ["spec.containers[0].securityContext.seccompProfile.localhostProfile: Required value: must be set when seccomp type is Localhost"]
        );
        assert!(causes(
            json!({"type": "RuntimeDefault"}),
            json!({"type": "Localhost", "localhostProfile": "profiles/audit.json"})
        )
        .is_empty());
    }

    #[test]
    fn fs_group_change_policy_is_one_of_upstreams() {
        let at = |p: &str| {
            validation(
                &json!({"securityContext": {"fsGroupChangePolicy": p}}),
                "spec",
            )
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect::<Vec<_>>()
        };
        assert!(at("OnRootMismatch").is_empty() && at("Always").is_empty());
        assert_eq!(
            at("Sometimes"),
            ["spec.securityContext.fsGroupChangePolicy: Unsupported value: \"Sometimes\": supported values: \"OnRootMismatch\", \"Always\""]
        );
    }

    #[test]
    fn the_type_is_one_of_upstreams() {
        assert_eq!(
            causes(json!({"type": "Strict"}), Value::Null),
            ["spec.securityContext.seccompProfile.type: Unsupported value: \"Strict\": supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\""]
        );
        assert_eq!(
            causes(json!({}), Value::Null),
            ["spec.securityContext.seccompProfile.type: Required value: type is required when seccompProfile is set"]
        );
    }
}
