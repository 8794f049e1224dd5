//! Pod → CRI configs, pure: the sandbox config (metadata, hostname, log directory, hostPorts, namespaces,
//! labels) and each container's config (image, command/args, resolved env and mounts, log path). No I/O,
//! tested on values. The host name ([`crate::pod_hostname`]) and the DNS config ([`crate::dns_config`])
//! are made by the caller, which reads the kubelet's settings and the host's resolv.conf.

use std::collections::HashMap;
use std::path::Path;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};

use crate::logs::pod_log_dir;

pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Marks what this kubelet made, so it can find (and clean up) its sandboxes after a restart.
pub const LABEL_MANAGED_BY: &str = "kiln.dev/managed-by";
pub const MANAGED_BY: &str = "kiln-kubelet";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Invalid(String),
}

fn meta(pod: &Pod) -> (&str, &str, &str) {
    let m = &pod.metadata;
    (
        m.namespace.as_deref().unwrap_or("default"),
        m.name.as_deref().unwrap_or_default(),
        m.uid.as_deref().unwrap_or_default(),
    )
}

fn pod_labels(pod: &Pod) -> HashMap<String, String> {
    let (ns, name, uid) = meta(pod);
    let mut l: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    l.insert(LABEL_POD_NAME.into(), name.into());
    l.insert(LABEL_POD_NAMESPACE.into(), ns.into());
    l.insert(LABEL_POD_UID.into(), uid.into());
    l.insert(LABEL_MANAGED_BY.into(), MANAGED_BY.into());
    l
}

fn protocol(p: Option<&str>) -> Result<i32, SpecError> {
    Ok(match p.unwrap_or("TCP") {
        "TCP" => cri::Protocol::Tcp as i32,
        "UDP" => cri::Protocol::Udp as i32,
        "SCTP" => cri::Protocol::Sctp as i32,
        other => {
            return Err(SpecError::Invalid(format!(
                "unknown port protocol {other:?}"
            )))
        }
    })
}

/// The namespaces a pod's sandbox and containers share, as the kubelet sets them.
pub fn namespace_options(pod: &Pod) -> cri::NamespaceOption {
    let spec = pod.spec.clone().unwrap_or_default();
    let mode = |host: Option<bool>, shared: cri::NamespaceMode| {
        if host == Some(true) {
            cri::NamespaceMode::Node as i32
        } else {
            shared as i32
        }
    };
    let pid_shared = if spec.share_process_namespace == Some(true) {
        cri::NamespaceMode::Pod
    } else {
        cri::NamespaceMode::Container
    };
    cri::NamespaceOption {
        network: mode(spec.host_network, cri::NamespaceMode::Pod),
        pid: mode(spec.host_pid, pid_shared),
        ipc: mode(spec.host_ipc, cri::NamespaceMode::Pod),
        ..Default::default()
    }
}

/// The sandbox config with `hostname` (empty for hostNetwork pods: containerd then keeps the node's)
/// and no DNS config yet.
pub fn sandbox_config(
    pod: &Pod,
    log_root: &Path,
    attempt: u32,
    hostname: &str,
) -> Result<cri::PodSandboxConfig, SpecError> {
    let (ns, name, uid) = meta(pod);
    if uid.is_empty() || name.is_empty() {
        return Err(SpecError::Invalid(
            "metadata.name and metadata.uid are required".into(),
        ));
    }
    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| SpecError::Invalid("no spec".into()))?;
    let mut port_mappings = Vec::new();
    for c in &spec.containers {
        for p in c.ports.iter().flatten() {
            // Only hostPorts need the runtime's help (CNI portmap); container ports are just open.
            if let Some(host_port) = p.host_port.filter(|h| *h > 0) {
                port_mappings.push(cri::PortMapping {
                    protocol: protocol(p.protocol.as_deref())?,
                    container_port: p.container_port,
                    host_port,
                    host_ip: p.host_ip.clone().unwrap_or_default(),
                });
            }
        }
    }
    Ok(cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: ns.into(),
            attempt,
        }),
        hostname: hostname.into(),
        log_directory: pod_log_dir(log_root, ns, name, uid).display().to_string(),
        dns_config: None,
        port_mappings,
        labels: pod_labels(pod),
        annotations: pod
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: crate::qos_cgroups::pod_cgroup(pod),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                run_as_user: spec
                    .security_context
                    .as_ref()
                    .and_then(|s| s.run_as_user)
                    .map(|value| cri::Int64Value { value }),
                run_as_group: spec
                    .security_context
                    .as_ref()
                    .and_then(|s| s.run_as_group)
                    .map(|value| cri::Int64Value { value }),
                supplemental_groups: supplemental_groups(pod),
                ..Default::default()
            }),
            sysctls: pod_sysctls(pod),
            ..Default::default()
        }),
        windows: None,
    })
}

/// The groups every process of the pod has besides its own: `securityContext.fsGroup` (so that it can
/// use the volumes the group owns), then `securityContext.supplementalGroups`, each once — upstream's
/// order for the sandbox and for each container (determineEffectiveSecurityContext).
fn supplemental_groups(pod: &Pod) -> Vec<i64> {
    let sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let mut groups: Vec<i64> = Vec::new();
    let listed = sc.and_then(|s| s.supplemental_groups.as_ref());
    for g in sc
        .and_then(|s| s.fs_group)
        .into_iter()
        .chain(listed.into_iter().flatten().copied())
    {
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    groups
}

/// The pod's `securityContext.sysctls` as the runtime sets them in the sandbox (name → value).
fn pod_sysctls(pod: &Pod) -> HashMap<String, String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|sc| sc.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (s.name.clone(), s.value.clone()))
        .collect()
}

/// The log file of a container run, relative to the sandbox's log directory: `<container>/<attempt>.log`.
pub fn container_log_path(container: &str, attempt: u32) -> String {
    format!("{container}/{attempt}.log")
}

/// The container's CRI config; `envs` (see [`crate::env`]) and `mounts` (see [`crate::volumes`]) are
/// resolved by the caller, since they read API objects and the node's disk.
pub fn container_config(
    pod: &Pod,
    c: &Container,
    attempt: u32,
    envs: Vec<(String, String)>,
    mounts: Vec<cri::Mount>,
) -> Result<cri::ContainerConfig, SpecError> {
    let image = c
        .image
        .clone()
        .filter(|i| !i.is_empty())
        .ok_or_else(|| SpecError::Invalid(format!("container {}: no image", c.name)))?;
    let mut labels = pod_labels(pod);
    labels.retain(|k, _| k.starts_with("io.kubernetes.") || k == LABEL_MANAGED_BY);
    labels.insert(LABEL_CONTAINER_NAME.into(), c.name.clone());
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let sc = c.security_context.as_ref();
    let run_as_user = sc
        .and_then(|s| s.run_as_user)
        .or_else(|| pod_sc.and_then(|s| s.run_as_user));
    let run_as_group = sc
        .and_then(|s| s.run_as_group)
        .or_else(|| pod_sc.and_then(|s| s.run_as_group));
    Ok(cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: c.name.clone(),
            attempt,
        }),
        image: Some(cri::ImageSpec {
            image,
            ..Default::default()
        }),
        command: expand_all(c.command.as_deref(), &envs),
        args: expand_all(c.args.as_deref(), &envs),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: envs
            .into_iter()
            .map(|(key, value)| cri::KeyValue { key, value })
            .collect(),
        mounts,
        labels,
        log_path: container_log_path(&c.name, attempt),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: None,
            security_context: Some(cri::LinuxContainerSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                run_as_user: run_as_user.map(|value| cri::Int64Value { value }),
                run_as_group: run_as_group.map(|value| cri::Int64Value { value }),
                supplemental_groups: supplemental_groups(pod),
                privileged: sc.and_then(|s| s.privileged).unwrap_or(false),
                readonly_rootfs: sc
                    .and_then(|s| s.read_only_root_filesystem)
                    .unwrap_or(false),
                // Upstream's AddNoNewPrivileges: only an explicit allowPrivilegeEscalation=false.
                no_new_privs: sc.and_then(|s| s.allow_privilege_escalation) == Some(false),
                ..Default::default()
            }),
        }),
        ..Default::default()
    })
}

/// command/args with `$(VAR)` references to the container's env expanded, as upstream does.
fn expand_all(words: Option<&[String]>, envs: &[(String, String)]) -> Vec<String> {
    words
        .unwrap_or_default()
        .iter()
        .map(|w| crate::env::expand(w, envs))
        .collect()
}

/// The pull policy in effect: the container's, else Always for `:latest` or untagged images, else
/// IfNotPresent (the API server's defaulting, done here for pods that skipped it).
pub fn pull_policy(c: &Container) -> &str {
    if let Some(p) = c.image_pull_policy.as_deref() {
        return p;
    }
    let image = c.image.as_deref().unwrap_or_default();
    let last = image.rsplit('/').next().unwrap_or_default();
    let tagged = last.contains(':') || last.contains('@');
    if !tagged || image.ends_with(":latest") {
        "Always"
    } else {
        "IfNotPresent"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "apps", "uid": "u1", "labels": {"app": "web"}},
            "spec": {"containers": [{
                "name": "httpd", "image": "10.250.0.1:5000/kiln/busybox:1",
                "command": ["/bin/httpd"], "args": ["-f", "-p", "80"],
                "ports": [{"containerPort": 80}, {"containerPort": 8080, "hostPort": 30080, "protocol": "UDP"}],
                "env": [
                    {"name": "A", "value": "1"},
                    {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "A", "value": "2"}
                ]
            }]}
        }))
        .unwrap()
    }

    #[test]
    fn sandbox_has_metadata_logs_host_ports_and_labels() {
        let s = sandbox_config(&pod(), Path::new("/var/log/pods"), 0, "web").unwrap();
        let m = s.metadata.unwrap();
        assert_eq!(
            (m.name.as_str(), m.namespace.as_str(), m.uid.as_str()),
            ("web", "apps", "u1")
        );
        assert_eq!(s.hostname, "web");
        assert_eq!(s.log_directory, "/var/log/pods/apps_web_u1");
        assert_eq!(
            s.port_mappings,
            vec![cri::PortMapping {
                protocol: cri::Protocol::Udp as i32,
                container_port: 8080,
                host_port: 30080,
                host_ip: String::new()
            }]
        );
        assert_eq!(s.labels["app"], "web");
        assert_eq!(s.labels[LABEL_POD_UID], "u1");
        assert_eq!(s.labels[LABEL_MANAGED_BY], MANAGED_BY);
        let ns = s
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.network, cri::NamespaceMode::Pod as i32);
        assert_eq!(ns.pid, cri::NamespaceMode::Container as i32);
    }

    #[test]
    fn container_has_command_args_env_mounts_and_log_path() {
        let p = pod();
        let env = vec![("A".to_string(), "2".to_string())];
        let mounts = vec![cri::Mount {
            container_path: "/etc/cfg".into(),
            host_path: "/var/lib/kiln/kubelet/pods/u1/volumes/kubernetes.io~configmap/cfg".into(),
            readonly: true,
            ..Default::default()
        }];
        let c = container_config(
            &p,
            &p.spec.as_ref().unwrap().containers[0],
            3,
            env,
            mounts.clone(),
        )
        .unwrap();
        assert_eq!(c.command, vec!["/bin/httpd"]);
        assert_eq!(c.args, vec!["-f", "-p", "80"]);
        let mut with_refs = p.spec.as_ref().unwrap().containers[0].clone();
        with_refs.args = Some(vec!["--a=$(A)".into(), "$$(A)".into(), "$(B)".into()]);
        let c2 =
            container_config(&p, &with_refs, 0, vec![("A".into(), "2".into())], vec![]).unwrap();
        assert_eq!(
            c2.args,
            vec!["--a=2", "$(A)", "$(B)"],
            "$(VAR) expands in args"
        );
        assert_eq!(c.log_path, "httpd/3.log");
        assert_eq!(c.metadata.unwrap().attempt, 3);
        let env: Vec<(String, String)> = c.envs.into_iter().map(|kv| (kv.key, kv.value)).collect();
        assert_eq!(env, vec![("A".to_string(), "2".to_string())]);
        assert_eq!(c.mounts, mounts);
        assert_eq!(c.labels[LABEL_CONTAINER_NAME], "httpd");
        assert!(!c.labels.contains_key("app"));
    }

    #[test]
    fn fs_group_and_supplemental_groups_reach_the_sandbox_and_every_container() {
        let mut p = pod();
        p.spec.as_mut().unwrap().security_context = Some(
            serde_json::from_value(serde_json::json!(
                {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 1001, "supplementalGroups": [5, 1001, 7]}
            ))
            .unwrap(),
        );
        let c = container_config(
            &p,
            &p.spec.as_ref().unwrap().containers[0],
            0,
            vec![],
            vec![],
        )
        .unwrap();
        let sc = c.linux.unwrap().security_context.unwrap();
        assert_eq!(
            sc.supplemental_groups,
            vec![1001, 5, 7],
            "fsGroup first, each group once"
        );
        assert_eq!(sc.run_as_user.map(|u| u.value), Some(1000));
        let s = sandbox_config(&p, Path::new("/var/log/pods"), 0, "web").unwrap();
        let sc = s.linux.unwrap().security_context.unwrap();
        assert_eq!(sc.supplemental_groups, vec![1001, 5, 7]);
        assert_eq!(sc.run_as_group.map(|g| g.value), Some(3000));
        // Without a security context: no extra groups.
        let p = pod();
        let c = container_config(
            &p,
            &p.spec.as_ref().unwrap().containers[0],
            0,
            vec![],
            vec![],
        )
        .unwrap();
        assert!(c
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .supplemental_groups
            .is_empty());
    }

    #[test]
    fn pull_policy_defaults_like_the_api_server() {
        let c = |image: &str, policy: Option<&str>| Container {
            name: "c".into(),
            image: Some(image.into()),
            image_pull_policy: policy.map(String::from),
            ..Default::default()
        };
        assert_eq!(pull_policy(&c("busybox", None)), "Always");
        assert_eq!(pull_policy(&c("busybox:latest", None)), "Always");
        assert_eq!(
            pull_policy(&c("10.250.0.1:5000/kiln/busybox:1", None)),
            "IfNotPresent"
        );
        assert_eq!(
            pull_policy(&c("10.250.0.1:5000/kiln/busybox", None)),
            "Always"
        );
        assert_eq!(pull_policy(&c("busybox:1", Some("Never"))), "Never");
    }

    #[test]
    fn sysctls_go_to_the_sandbox_and_no_new_privs_only_when_escalation_is_refused() {
        let mut p = pod();
        let spec = p.spec.as_mut().unwrap();
        spec.security_context = Some(
            serde_json::from_value(serde_json::json!({
                "sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]
            }))
            .unwrap(),
        );
        let s = sandbox_config(&p, Path::new("/var/log/pods"), 0, "web").unwrap();
        assert_eq!(s.linux.unwrap().sysctls["kernel.shm_rmid_forced"], "1");
        let nnp = |escalation: Option<bool>| {
            let mut c = p.spec.as_ref().unwrap().containers[0].clone();
            c.security_context = Some(k8s_openapi::api::core::v1::SecurityContext {
                allow_privilege_escalation: escalation,
                ..Default::default()
            });
            let cfg = container_config(&p, &c, 0, vec![], vec![]).unwrap();
            cfg.linux.unwrap().security_context.unwrap().no_new_privs
        };
        assert!(nnp(Some(false)));
        assert!(!nnp(Some(true)));
        assert!(!nnp(None));
    }
}
