//! The deprecated AppArmor annotations (`container.apparmor.security.beta.kubernetes.io/<container>`)
//! as upstream validates them beside the 1.30+ `appArmorProfile` fields: on every write of a pod or a
//! pod template, each annotation must name one of the pod's containers and hold `runtime/default`,
//! `unconfined`, `localhost/<profile>` (or nothing) — ValidateAppArmorPodAnnotations; and where a
//! container also has a profile in its fields (its own or the pod's), the annotation must say the
//! same — validateAppArmorAnnotationsAndFieldsMatchOnCreate, which upstream runs when a pod is created
//! and on every write of a template. Windows pods skip the match, as upstream.

use serde_json::Value;

use crate::status::Cause;

pub const KEY_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
const RUNTIME_DEFAULT: &str = "runtime/default";
const UNCONFINED: &str = "unconfined";
const LOCALHOST_PREFIX: &str = "localhost/";
const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

/// The pod's own annotations and spec (a Pod: `metadata` and `spec`).
pub fn pod(obj: &Value) -> Vec<Cause> {
    annotations(&obj["metadata"], &obj["spec"], "metadata.annotations")
}

/// A create adds the annotation-field match.
pub fn pod_create(obj: &Value) -> Vec<Cause> {
    fields_match(&obj["metadata"], &obj["spec"], "spec")
}

/// A pod template at `path` (`spec.template`, `template`): both checks, on create and update alike
/// (upstream's ValidatePodTemplateSpec names its annotations `<path>.annotations`).
pub fn template(template: &Value, path: &str) -> Vec<Cause> {
    let meta = &template["metadata"];
    let spec = &template["spec"];
    let mut causes = annotations(meta, spec, &format!("{path}.annotations"));
    causes.extend(fields_match(meta, spec, &format!("{path}.spec")));
    causes
}

/// ValidateAppArmorPodAnnotations, in key order (upstream walks a Go map: any order).
fn annotations(meta: &Value, spec: &Value, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(annotations) = meta["annotations"].as_object() else {
        return causes;
    };
    let names = container_names(spec);
    let mut sorted: Vec<(&String, &Value)> = annotations.iter().collect();
    sorted.sort_by_key(|(k, _)| *k);
    for (key, value) in sorted {
        let Some(container) = key.strip_prefix(KEY_PREFIX) else {
            continue;
        };
        let field = format!("{at}[{key}]");
        if !names.contains(&container) {
            causes.push(Cause::invalid(
                &field,
                &Value::from(container),
                "container not found",
            ));
        }
        let profile = value.as_str().unwrap_or("");
        if !valid_profile(profile) {
            causes.push(Cause::invalid(
                &field,
                value,
                &format!("invalid AppArmor profile name: {profile:?}"),
            ));
        }
    }
    causes
}

/// ValidateAppArmorProfileFormat: empty, runtime/default, unconfined or localhost/<anything>.
fn valid_profile(profile: &str) -> bool {
    profile.is_empty()
        || profile == RUNTIME_DEFAULT
        || profile == UNCONFINED
        || profile.starts_with(LOCALHOST_PREFIX)
}

fn container_names(spec: &Value) -> Vec<&str> {
    CONTAINER_LISTS
        .iter()
        .flat_map(|list| spec[*list].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect()
}

/// validateAppArmorAnnotationsAndFieldsMatchOnCreate: each container with a profile (its own, else
/// the pod's) and an annotation, in upstream's visiting order (init, regular, ephemeral).
fn fields_match(meta: &Value, spec: &Value, spec_path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if spec["os"]["name"] == "windows" {
        return causes;
    }
    let pod_profile = &spec["securityContext"]["appArmorProfile"];
    for list in CONTAINER_LISTS {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            let own = &c["securityContext"]["appArmorProfile"];
            let profile = if own.is_object() { own } else { pod_profile };
            if !profile.is_object() {
                continue;
            }
            let name = c["name"].as_str().unwrap_or("");
            let key = format!("{KEY_PREFIX}{name}");
            let Some(annotation) = meta["annotations"][&key].as_str() else {
                continue;
            };
            let at = format!("{spec_path}.{list}[{i}].securityContext.appArmorProfile");
            let type_mismatch = || {
                Cause::forbidden(
                    &format!("{at}.type"),
                    "apparmor type in annotation and field must match",
                )
            };
            match profile["type"].as_str().unwrap_or("") {
                "Unconfined" if annotation != UNCONFINED => causes.push(type_mismatch()),
                "RuntimeDefault" if annotation != RUNTIME_DEFAULT => causes.push(type_mismatch()),
                "Localhost" => match annotation.strip_prefix(LOCALHOST_PREFIX) {
                    None => causes.push(type_mismatch()),
                    Some(name) if profile["localhostProfile"].as_str() != Some(name) => causes
                        .push(Cause::forbidden(
                            &format!("{at}.localhostProfile"),
                            "apparmor profile in annotation and field must match",
                        )),
                    Some(_) => {}
                },
                _ => {}
            }
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rendered(causes: Vec<Cause>) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn pod_with(annotations: Value, spec: Value) -> Value {
        json!({"metadata": {"name": "p", "annotations": annotations}, "spec": spec})
    }

    #[test]
    fn annotations_name_a_container_and_a_known_profile() {
        let p = pod_with(
            json!({
                "container.apparmor.security.beta.kubernetes.io/app": "runtime/default",
                "container.apparmor.security.beta.kubernetes.io/init": "localhost/k8s-deny-write",
                "container.apparmor.security.beta.kubernetes.io/sidecar": "unconfined",
                "container.apparmor.security.beta.kubernetes.io/gone": "runtime/default",
                "container.apparmor.security.beta.kubernetes.io/debug": "docker-default",
                "other.example.com/app": "anything",
            }),
            json!({
                "initContainers": [{"name": "init", "image": "i"}],
                "containers": [{"name": "app", "image": "i"}, {"name": "sidecar", "image": "i"}],
                "ephemeralContainers": [{"name": "debug", "image": "i"}],
            }),
        );
        assert_eq!(
            rendered(pod(&p)),
            [
                "metadata.annotations[container.apparmor.security.beta.kubernetes.io/debug]: Invalid value: \"docker-default\": invalid AppArmor profile name: \"docker-default\"",
                "metadata.annotations[container.apparmor.security.beta.kubernetes.io/gone]: Invalid value: \"gone\": container not found",
            ]
        );
        // An empty value is allowed, as upstream.
        let p = pod_with(
            json!({"container.apparmor.security.beta.kubernetes.io/app": ""}),
            json!({"containers": [{"name": "app", "image": "i"}]}),
        );
        assert!(pod(&p).is_empty());
    }

    #[test]
    fn annotation_and_field_must_agree_on_create() {
        let spec = json!({
            "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
            "initContainers": [{"name": "init", "image": "i"}],
            "containers": [
                {"name": "a", "image": "i"},
                {"name": "b", "image": "i", "securityContext": {"appArmorProfile":
                    {"type": "Localhost", "localhostProfile": "k8s-deny-write"}}},
                {"name": "c", "image": "i", "securityContext": {"appArmorProfile":
                    {"type": "Localhost", "localhostProfile": "k8s-deny-write"}}},
                {"name": "d", "image": "i", "securityContext": {"appArmorProfile":
                    {"type": "Unconfined"}}},
                {"name": "e", "image": "i", "securityContext": {"appArmorProfile":
                    {"type": "Localhost", "localhostProfile": "same"}}},
            ],
        });
        let p = pod_with(
            json!({
                // The pod's RuntimeDefault applies to init: the annotation disagrees.
                "container.apparmor.security.beta.kubernetes.io/init": "unconfined",
                "container.apparmor.security.beta.kubernetes.io/a": "runtime/default",
                "container.apparmor.security.beta.kubernetes.io/b": "runtime/default",
                "container.apparmor.security.beta.kubernetes.io/c": "localhost/other",
                "container.apparmor.security.beta.kubernetes.io/d": "localhost/x",
                "container.apparmor.security.beta.kubernetes.io/e": "localhost/same",
            }),
            spec.clone(),
        );
        assert!(pod(&p).is_empty(), "every value is well-formed");
        assert_eq!(
            rendered(pod_create(&p)),
            [
                "spec.initContainers[0].securityContext.appArmorProfile.type: Forbidden: apparmor type in annotation and field must match",
                "spec.containers[1].securityContext.appArmorProfile.type: Forbidden: apparmor type in annotation and field must match",
                "spec.containers[2].securityContext.appArmorProfile.localhostProfile: Forbidden: apparmor profile in annotation and field must match",
                "spec.containers[3].securityContext.appArmorProfile.type: Forbidden: apparmor type in annotation and field must match",
            ]
        );
        // A Windows pod is not compared.
        let mut windows = p.clone();
        windows["spec"]["os"] = json!({"name": "windows"});
        assert!(pod_create(&windows).is_empty());
        // Without a profile in the fields there is nothing to compare.
        let p = pod_with(
            json!({"container.apparmor.security.beta.kubernetes.io/a": "localhost/x"}),
            json!({"containers": [{"name": "a", "image": "i"}]}),
        );
        assert!(pod_create(&p).is_empty());
    }

    #[test]
    fn templates_get_both_checks_under_their_own_path() {
        let t = json!({
            "metadata": {"annotations": {
                "container.apparmor.security.beta.kubernetes.io/web": "unconfined",
                "container.apparmor.security.beta.kubernetes.io/nope": "runtime/default",
            }},
            "spec": {"containers": [{"name": "web", "image": "i", "securityContext":
                {"appArmorProfile": {"type": "RuntimeDefault"}}}]},
        });
        assert_eq!(
            rendered(template(&t, "spec.template")),
            [
                "spec.template.annotations[container.apparmor.security.beta.kubernetes.io/nope]: Invalid value: \"nope\": container not found",
                "spec.template.spec.containers[0].securityContext.appArmorProfile.type: Forbidden: apparmor type in annotation and field must match",
            ]
        );
    }
}
