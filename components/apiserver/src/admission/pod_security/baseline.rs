//! The baseline checks (upstream's policy/check_*.go of level baseline): each returns the
//! violation upstream reports, with its reason and detail texts.

use std::collections::BTreeSet;

use serde_json::Value;

use super::checks::{
    containers, containers_named, go_quote, in_user_namespace, is_true, join_quote, name, plural,
    setters, Violation,
};

fn strs(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

/// A set profile's type (`""` when the profile is set without one).
pub fn profile_type(profile: &Value) -> Option<&str> {
    profile
        .as_object()
        .map(|p| p.get("type").and_then(Value::as_str).unwrap_or(""))
}

const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// AppArmor: profile types RuntimeDefault / Localhost only; the beta annotations
/// `runtime/default`, `localhost/*` or empty.
pub fn app_armor_profile(meta: &Value, spec: &Value) -> Option<Violation> {
    let allowed = |t: &str| matches!(t, "RuntimeDefault" | "Localhost");
    let mut bad_values = BTreeSet::new();
    let mut bad_setters = Vec::new();
    if let Some(t) = profile_type(&spec["securityContext"]["appArmorProfile"]) {
        if !allowed(t) {
            bad_setters.push("pod".to_string());
            bad_values.insert(t.to_string());
        }
    }
    let mut bad_containers = Vec::new();
    for c in containers(spec) {
        if let Some(t) = profile_type(&c["securityContext"]["appArmorProfile"]) {
            if !allowed(t) {
                bad_containers.push(name(c));
                bad_values.insert(t.to_string());
            }
        }
    }
    if !bad_containers.is_empty() {
        bad_setters.push(containers_named(&bad_containers));
    }
    let mut annotations: Vec<String> = meta["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(APPARMOR_ANNOTATION_PREFIX))
        .filter_map(|(k, v)| {
            let v = v.as_str().unwrap_or("");
            let ok = v.is_empty() || v == "runtime/default" || v.starts_with("localhost/");
            (!ok).then(|| format!("{k}={}", go_quote(v)))
        })
        .collect();
    let mut values: Vec<String> = bad_values.into_iter().collect();
    if !annotations.is_empty() {
        annotations.sort();
        bad_setters.push(plural("annotation", "annotations", annotations.len()).to_string());
        values.extend(annotations);
    }
    if bad_setters.is_empty() {
        return None;
    }
    Violation::new(
        plural(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            values.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            bad_setters.join(" and "),
            join_quote(&values)
        ),
    )
}

/// The capabilities a container may add at baseline (the container runtimes' default set).
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

pub fn capabilities(_meta: &Value, spec: &Value) -> Option<Violation> {
    let mut bad_containers = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for cap in strs(&c["securityContext"]["capabilities"]["add"]) {
            if !BASELINE_CAPABILITIES.contains(&cap) {
                valid = false;
                caps.insert(cap.to_string());
            }
        }
        if !valid {
            bad_containers.push(name(c));
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    Violation::new(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&bad_containers),
            join_quote(&caps)
        ),
    )
}

pub fn host_namespaces(_meta: &Value, spec: &Value) -> Option<Violation> {
    let found: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|k| is_true(&spec[*k]))
        .map(|k| format!("{k}=true"))
        .collect();
    if found.is_empty() {
        return None;
    }
    Violation::new("host namespaces", found.join(", "))
}

pub fn host_path_volumes(_meta: &Value, spec: &Value) -> Option<Violation> {
    let vols: Vec<String> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| !v["hostPath"].is_null())
        .map(name)
        .collect();
    if vols.is_empty() {
        return None;
    }
    Violation::new(
        "hostPath volumes",
        format!(
            "{} {}",
            plural("volume", "volumes", vols.len()),
            join_quote(&vols)
        ),
    )
}

pub fn host_ports(_meta: &Value, spec: &Value) -> Option<Violation> {
    let mut bad_containers = Vec::new();
    // Sorted as strings, as upstream's string set.
    let mut ports = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for p in c["ports"].as_array().into_iter().flatten() {
            let hp = p["hostPort"].as_i64().unwrap_or(0);
            if hp != 0 {
                valid = false;
                ports.insert(hp.to_string());
            }
        }
        if !valid {
            bad_containers.push(name(c));
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    Violation::new(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_named(&bad_containers),
            plural("uses", "use", bad_containers.len()),
            plural("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

/// Probes and lifecycle handlers must not name a `host` (1.34+): the kubelet would connect to it.
pub fn host_probes_and_lifecycle(_meta: &Value, spec: &Value) -> Option<Violation> {
    let mut bad_containers = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    let handler_hosts = |h: &Value| -> Vec<String> {
        ["httpGet", "tcpSocket"]
            .into_iter()
            .filter_map(|k| h[k]["host"].as_str().filter(|s| !s.is_empty()))
            .map(str::to_string)
            .collect()
    };
    for c in containers(spec) {
        let handlers = [
            &c["livenessProbe"],
            &c["readinessProbe"],
            &c["startupProbe"],
            &c["lifecycle"]["postStart"],
            &c["lifecycle"]["preStop"],
        ];
        for h in handlers {
            let found = handler_hosts(h);
            if !found.is_empty() {
                bad_containers.insert(name(c));
                hosts.extend(found);
            }
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    Violation::new(
        "probe or lifecycle host",
        format!(
            "{} {} {} {} {}",
            plural("container", "containers", bad_containers.len()),
            join_quote(&bad_containers),
            plural("uses", "use", bad_containers.len()),
            plural(
                "probe or lifecycle host",
                "probe or lifecycle hosts",
                hosts.len()
            ),
            join_quote(&hosts)
        ),
    )
}

pub fn privileged(_meta: &Value, spec: &Value) -> Option<Violation> {
    let bad: Vec<String> = containers(spec)
        .filter(|c| is_true(&c["securityContext"]["privileged"]))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    Violation::new(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_named(&bad)
        ),
    )
}

/// `procMount` other than Default (unmasked /proc) is refused.
pub fn proc_mount(_meta: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for c in containers(spec) {
        if let Some(t) = c["securityContext"]["procMount"].as_str() {
            if t != "Default" {
                bad.push(name(c));
                types.insert(t.to_string());
            }
        }
    }
    if bad.is_empty() {
        return None;
    }
    Violation::new(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_named(&bad),
            join_quote(&types)
        ),
    )
}

/// 1.35+: a pod in a user namespace may unmask /proc (restricted still may not).
pub fn proc_mount_unless_user_namespace(meta: &Value, spec: &Value) -> Option<Violation> {
    if in_user_namespace(spec) {
        return None;
    }
    proc_mount(meta, spec)
}

const SELINUX_TYPES_1_0: &[&str] = &["", "container_t", "container_init_t", "container_kvm_t"];
const SELINUX_TYPES_1_31: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

pub fn selinux_options_1_0(meta: &Value, spec: &Value) -> Option<Violation> {
    selinux_options(meta, spec, SELINUX_TYPES_1_0)
}

pub fn selinux_options_1_31(meta: &Value, spec: &Value) -> Option<Violation> {
    selinux_options(meta, spec, SELINUX_TYPES_1_31)
}

fn selinux_options(_meta: &Value, spec: &Value, allowed: &[&str]) -> Option<Violation> {
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut valid = |opts: &Value| -> bool {
        if !opts.is_object() {
            return true;
        }
        let mut ok = true;
        let t = opts["type"].as_str().unwrap_or("");
        if !allowed.contains(&t) {
            ok = false;
            bad_types.insert(t.to_string());
        }
        if !opts["user"].as_str().unwrap_or("").is_empty() {
            ok = false;
            set_user = true;
        }
        if !opts["role"].as_str().unwrap_or("").is_empty() {
            ok = false;
            set_role = true;
        }
        ok
    };
    let pod_bad = !valid(&spec["securityContext"]["seLinuxOptions"]);
    let bad_containers: Vec<String> = containers(spec)
        .filter(|c| !valid(&c["securityContext"]["seLinuxOptions"]))
        .map(name)
        .collect();
    let who = setters(pod_bad, &bad_containers);
    if who.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        data.push(format!(
            "{} {}",
            plural("type", "types", bad_types.len()),
            join_quote(&bad_types)
        ));
    }
    if set_user {
        data.push("user may not be set".to_string());
    }
    if set_role {
        data.push("role may not be set".to_string());
    }
    Violation::new(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            who.join(" and "),
            data.join("; ")
        ),
    )
}

const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SECCOMP_CONTAINER_ANNOTATION: &str = "container.seccomp.security.alpha.kubernetes.io/";

/// Before 1.19 seccomp was chosen by alpha annotations.
pub fn seccomp_annotations(meta: &Value, spec: &Value) -> Option<Violation> {
    let ok =
        |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
    let annotations = &meta["annotations"];
    let mut forbidden = BTreeSet::new();
    let mut look = |key: String| {
        if let Some(v) = annotations.get(&key) {
            let v = v.as_str().unwrap_or("");
            if !ok(v) {
                forbidden.insert(format!("{key}={}", go_quote(v)));
            }
        }
    };
    look(SECCOMP_POD_ANNOTATION.to_string());
    for c in containers(spec) {
        look(format!("{SECCOMP_CONTAINER_ANNOTATION}{}", name(c)));
    }
    if forbidden.is_empty() {
        return None;
    }
    let list: Vec<String> = forbidden.into_iter().collect();
    Violation::new(
        "seccompProfile",
        format!(
            "forbidden {} {}",
            plural("annotation", "annotations", list.len()),
            list.join(", ")
        ),
    )
}

pub fn valid_seccomp(t: &str) -> bool {
    t == "Localhost" || t == "RuntimeDefault"
}

/// Set seccomp profiles must be RuntimeDefault or Localhost (Unconfined is refused).
pub fn seccomp_profile(_meta: &Value, spec: &Value) -> Option<Violation> {
    let mut bad_values = BTreeSet::new();
    let mut pod_bad = false;
    if let Some(t) = profile_type(&spec["securityContext"]["seccompProfile"]) {
        if !valid_seccomp(t) {
            pod_bad = true;
            bad_values.insert(t.to_string());
        }
    }
    let mut bad_containers = Vec::new();
    for c in containers(spec) {
        if let Some(t) = profile_type(&c["securityContext"]["seccompProfile"]) {
            if !valid_seccomp(t) {
                bad_containers.push(name(c));
                bad_values.insert(t.to_string());
            }
        }
    }
    let who = setters(pod_bad, &bad_containers);
    if who.is_empty() {
        return None;
    }
    Violation::new(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            who.join(" and "),
            join_quote(&bad_values)
        ),
    )
}

/// The namespaced sysctls that are safe at each version (each list adds to the one before).
const SYSCTLS_1_0: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
];
const SYSCTLS_1_27: &[&str] = &["net.ipv4.ip_local_reserved_ports"];
const SYSCTLS_1_29: &[&str] = &[
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
const SYSCTLS_1_32: &[&str] = &["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"];
const SYSCTLS_1_37: &[&str] = &[
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_notsent_lowat",
];

fn sysctls(spec: &Value, allowed: &[&[&str]]) -> Option<Violation> {
    let bad: Vec<&str> = spec["securityContext"]["sysctls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .filter(|n| !allowed.iter().any(|set| set.contains(n)))
        .collect();
    if bad.is_empty() {
        return None;
    }
    Violation::new("forbidden sysctls", bad.join(", "))
}

pub fn sysctls_1_0(_meta: &Value, spec: &Value) -> Option<Violation> {
    sysctls(spec, &[SYSCTLS_1_0])
}

pub fn sysctls_1_27(_meta: &Value, spec: &Value) -> Option<Violation> {
    sysctls(spec, &[SYSCTLS_1_0, SYSCTLS_1_27])
}

pub fn sysctls_1_29(_meta: &Value, spec: &Value) -> Option<Violation> {
    sysctls(spec, &[SYSCTLS_1_0, SYSCTLS_1_27, SYSCTLS_1_29])
}

pub fn sysctls_1_32(_meta: &Value, spec: &Value) -> Option<Violation> {
    sysctls(
        spec,
        &[SYSCTLS_1_0, SYSCTLS_1_27, SYSCTLS_1_29, SYSCTLS_1_32],
    )
}

pub fn sysctls_1_37(_meta: &Value, spec: &Value) -> Option<Violation> {
    sysctls(
        spec,
        &[
            SYSCTLS_1_0,
            SYSCTLS_1_27,
            SYSCTLS_1_29,
            SYSCTLS_1_32,
            SYSCTLS_1_37,
        ],
    )
}

pub fn windows_host_process(_meta: &Value, spec: &Value) -> Option<Violation> {
    let host_process = |sc: &Value| is_true(&sc["windowsOptions"]["hostProcess"]);
    let pod_bad = host_process(&spec["securityContext"]);
    let bad: Vec<String> = containers(spec)
        .filter(|c| host_process(&c["securityContext"]))
        .map(name)
        .collect();
    let who = setters(pod_bad, &bad);
    if who.is_empty() {
        return None;
    }
    Violation::new(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            who.join(" and ")
        ),
    )
}
