//! The restricted checks (upstream's policy/check_*.go of level restricted).

use std::collections::BTreeSet;

use serde_json::Value;

use super::baseline::{profile_type, valid_seccomp};
use super::checks::{
    containers, containers_named, in_user_namespace, is_windows, join_quote, name, plural, setters,
    Violation,
};

pub fn allow_privilege_escalation(_meta: &Value, spec: &Value) -> Option<Violation> {
    let bad: Vec<String> = containers(spec)
        .filter(|c| c["securityContext"]["allowPrivilegeEscalation"].as_bool() != Some(false))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    Violation::new(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_named(&bad)
        ),
    )
}

/// 1.25+: Windows pods cannot set the field (API validation refuses it), so they pass.
pub fn allow_privilege_escalation_unless_windows(meta: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    allow_privilege_escalation(meta, spec)
}

/// Drop ALL, add nothing but NET_BIND_SERVICE.
pub fn capabilities(_meta: &Value, spec: &Value) -> Option<Violation> {
    let mut missing_drop_all = Vec::new();
    let mut adding = Vec::new();
    let mut forbidden = BTreeSet::new();
    for c in containers(spec) {
        let caps = &c["securityContext"]["capabilities"];
        if !caps.is_object() {
            missing_drop_all.push(name(c));
            continue;
        }
        let list = |k: &str| -> Vec<String> {
            caps[k]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        };
        if !list("drop").iter().any(|d| d == "ALL") {
            missing_drop_all.push(name(c));
        }
        let bad_adds: Vec<String> = list("add")
            .into_iter()
            .filter(|a| a != "NET_BIND_SERVICE")
            .collect();
        if !bad_adds.is_empty() {
            adding.push(name(c));
            forbidden.extend(bad_adds);
        }
    }
    let mut details = Vec::new();
    if !missing_drop_all.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_named(&missing_drop_all)
        ));
    }
    if !adding.is_empty() {
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&adding),
            join_quote(&forbidden)
        ));
    }
    if details.is_empty() {
        return None;
    }
    Violation::new("unrestricted capabilities", details.join("; "))
}

pub fn capabilities_unless_windows(meta: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    capabilities(meta, spec)
}

/// Volume sources a restricted pod may use.
const ALLOWED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The other sources, by the names upstream reports them with (their field names).
const RESTRICTED_VOLUMES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

pub fn volumes(_meta: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for v in spec["volumes"].as_array().into_iter().flatten() {
        let has = |k: &&str| !v[*k].is_null();
        if ALLOWED_VOLUMES.iter().any(has) {
            continue;
        }
        bad.push(name(v));
        types.insert(
            RESTRICTED_VOLUMES
                .iter()
                .find(|k| has(k))
                .copied()
                .unwrap_or("unknown"),
        );
    }
    if bad.is_empty() {
        return None;
    }
    Violation::new(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            plural("volume", "volumes", bad.len()),
            join_quote(&bad),
            plural("uses", "use", bad.len()),
            plural(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    )
}

pub fn run_as_non_root(_meta: &Value, spec: &Value) -> Option<Violation> {
    let pod = spec["securityContext"]["runAsNonRoot"].as_bool();
    let pod_ok = pod == Some(true);
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match c["securityContext"]["runAsNonRoot"].as_bool() {
            Some(false) => explicit.push(name(c)),
            Some(true) => {}
            None if !pod_ok => implicit.push(name(c)),
            None => {}
        }
    }
    let who = setters(pod == Some(false), &explicit);
    if !who.is_empty() {
        return Violation::new(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                who.join(" and ")
            ),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    Violation::new(
        "runAsNonRoot != true",
        format!(
            "pod or {} must set securityContext.runAsNonRoot=true",
            containers_named(&implicit)
        ),
    )
}

/// 1.35+: a pod in a user namespace is not root on the host, whatever its user.
pub fn run_as_non_root_unless_user_namespace(meta: &Value, spec: &Value) -> Option<Violation> {
    if in_user_namespace(spec) {
        return None;
    }
    run_as_non_root(meta, spec)
}

pub fn run_as_user(_meta: &Value, spec: &Value) -> Option<Violation> {
    let root = |sc: &Value| sc["runAsUser"].as_i64() == Some(0);
    let pod = root(&spec["securityContext"]);
    let bad: Vec<String> = containers(spec)
        .filter(|c| root(&c["securityContext"]))
        .map(name)
        .collect();
    let who = setters(pod, &bad);
    if who.is_empty() {
        return None;
    }
    Violation::new(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", who.join(" and ")),
    )
}

pub fn run_as_user_unless_user_namespace(meta: &Value, spec: &Value) -> Option<Violation> {
    if in_user_namespace(spec) {
        return None;
    }
    run_as_user(meta, spec)
}

/// A seccomp profile is required (pod-wide or on every container), RuntimeDefault or Localhost.
pub fn seccomp_profile(_meta: &Value, spec: &Value) -> Option<Violation> {
    let mut bad_values = BTreeSet::new();
    let mut pod_bad = false;
    let mut pod_set = false;
    if let Some(t) = profile_type(&spec["securityContext"]["seccompProfile"]) {
        if valid_seccomp(t) {
            pod_set = true;
        } else {
            pod_bad = true;
            bad_values.insert(t.to_string());
        }
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match profile_type(&c["securityContext"]["seccompProfile"]) {
            Some(t) if !valid_seccomp(t) => {
                explicit.push(name(c));
                bad_values.insert(t.to_string());
            }
            Some(_) => {}
            None if !pod_set => implicit.push(name(c)),
            None => {}
        }
    }
    let who = setters(pod_bad, &explicit);
    if !who.is_empty() {
        return Violation::new(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                who.join(" and "),
                join_quote(&bad_values)
            ),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    Violation::new(
        "seccompProfile",
        format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_named(&implicit)
        ),
    )
}

pub fn seccomp_profile_unless_windows(meta: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    seccomp_profile(meta, spec)
}
