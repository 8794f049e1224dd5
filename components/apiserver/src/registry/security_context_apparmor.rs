//! The pod securityContext fields of Kubernetes 1.30+ as upstream validates them: `appArmorProfile`
//! of the pod and of each container (validateAppArmorProfileField: a known type; a Localhost profile
//! names a profile, unpadded, of at most 4095 bytes; other types name none) and the pod's
//! `supplementalGroupsPolicy` (Merge or Strict).

use serde_json::{json, Value};

use crate::status::Cause;

/// In upstream's order (the NotSupported list).
const APPARMOR_TYPES: &[&str] = &["Localhost", "RuntimeDefault", "Unconfined"];
/// Sorted, as upstream lists them.
const SUPPLEMENTAL_GROUPS_POLICIES: &[&str] = &["Merge", "Strict"];
/// PATH_MAX - 1.
const MAX_LOCALHOST_PROFILE: usize = 4095;

/// The pod spec at `path` (`spec`, or a template's).
pub fn validation(spec: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let policy = &spec["securityContext"]["supplementalGroupsPolicy"];
    if !policy.is_null() {
        let value = policy
            .as_str()
            .map_or_else(|| policy.to_string(), String::from);
        if !SUPPLEMENTAL_GROUPS_POLICIES.contains(&value.as_str()) {
            causes.push(Cause::not_supported(
                &format!("{path}.securityContext.supplementalGroupsPolicy"),
                &value,
                SUPPLEMENTAL_GROUPS_POLICIES,
            ));
        }
    }
    causes.extend(profile(
        &spec["securityContext"]["appArmorProfile"],
        &format!("{path}.securityContext.appArmorProfile"),
    ));
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, ctr) in spec[list].as_array().into_iter().flatten().enumerate() {
            causes.extend(profile(
                &ctr["securityContext"]["appArmorProfile"],
                &format!("{path}.{list}[{i}].securityContext.appArmorProfile"),
            ));
        }
    }
    causes
}

fn profile(p: &Value, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if !p.is_object() {
        return causes;
    }
    let field = format!("{at}.localhostProfile");
    let localhost = p["localhostProfile"].as_str();
    match p["type"].as_str().unwrap_or("") {
        "Localhost" => match localhost {
            None => causes.push(Cause::required(
                &field,
                "must be set when AppArmor type is Localhost",
            )),
            Some(name) => {
                if name.trim() != name {
                    causes.push(Cause::invalid(
                        &field,
                        &json!(name),
                        "must not be padded with whitespace",
                    ));
                } else if name.is_empty() {
                    causes.push(Cause::required(
                        &field,
                        "must be set when AppArmor type is Localhost",
                    ));
                }
                if name.len() > MAX_LOCALHOST_PROFILE {
                    causes.push(Cause::invalid(
                        &field,
                        &json!(name),
                        &format!("may not be more than {MAX_LOCALHOST_PROFILE} bytes"),
                    ));
                }
            }
        },
        "RuntimeDefault" | "Unconfined" => {
            if let Some(name) = localhost {
                causes.push(Cause::invalid(
                    &field,
                    &json!(name),
                    "can only be set when AppArmor type is Localhost",
                ));
            }
        }
        "" => causes.push(Cause::required(
            &format!("{at}.type"),
            "type is required when appArmorProfile is set",
        )),
        other => causes.push(Cause::not_supported(
            &format!("{at}.type"),
            other,
            APPARMOR_TYPES,
        )),
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn causes(spec: Value) -> Vec<String> {
        validation(&spec, "spec")
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn apparmor_profiles_have_a_known_type_and_a_name_only_for_localhost() {
        let spec = json!({
            "securityContext": {"appArmorProfile": {"type": "Localhost"}},
            "initContainers": [{"name": "i", "image": "i",
                "securityContext": {"appArmorProfile": {"type": "Strict"}}}],
            "containers": [
                {"name": "a", "image": "i", "securityContext": {"appArmorProfile":
                    {"type": "RuntimeDefault", "localhostProfile": "x"}}},
                {"name": "b", "image": "i", "securityContext": {"appArmorProfile":
                    {"type": "Localhost", "localhostProfile": " x"}}},
                {"name": "c", "image": "i", "securityContext": {"appArmorProfile": {}}},
                {"name": "d", "image": "i", "securityContext": {"appArmorProfile":
                    {"type": "Localhost", "localhostProfile": "k8s-deny-write"}}}
            ]
        });
        assert_eq!(
            causes(spec),
            [
                "spec.securityContext.appArmorProfile.localhostProfile: Required value: must be set when AppArmor type is Localhost",
                "spec.initContainers[0].securityContext.appArmorProfile.type: Unsupported value: \"Strict\": supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\"",
                "spec.containers[0].securityContext.appArmorProfile.localhostProfile: Invalid value: \"x\": can only be set when AppArmor type is Localhost",
                "spec.containers[1].securityContext.appArmorProfile.localhostProfile: Invalid value: \" x\": must not be padded with whitespace",
                "spec.containers[2].securityContext.appArmorProfile.type: Required value: type is required when appArmorProfile is set",
            ]
        );
    }

    #[test]
    fn supplemental_groups_policy_is_merge_or_strict() {
        let at = |p: Value| causes(json!({"securityContext": {"supplementalGroupsPolicy": p}}));
        assert!(at(json!("Merge")).is_empty());
        assert!(at(json!("Strict")).is_empty());
        assert_eq!(
            at(json!("Loose")),
            ["spec.securityContext.supplementalGroupsPolicy: Unsupported value: \"Loose\": supported values: \"Merge\", \"Strict\""]
        );
    }
}
