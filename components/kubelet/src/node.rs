//! The Node object this kubelet registers and keeps current: addresses, capacity, nodeInfo, conditions.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeFeatures, NodeSpec,
    NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;

use crate::config::KubeletConfig;

/// What the Node reports as its kubelet's (and kiln-proxy's: one build is pushed to every node) version.
pub const KUBELET_VERSION: &str = kiln_common::version::GIT_VERSION;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("registering node {node}: {source}")]
    Register {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("updating status of node {node}: {source}")]
    Status {
        node: String,
        #[source]
        source: kube::Error,
    },
}

pub fn now() -> Time {
    Time(to_timestamp(SystemTime::now()))
}

pub fn to_timestamp(t: SystemTime) -> Timestamp {
    Timestamp::try_from(t).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// Facts about the host that go into NodeSystemInfo.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostInfo {
    pub os_image: String,
    pub kernel_version: String,
    pub machine_id: String,
    pub boot_id: String,
    pub system_uuid: String,
    pub architecture: String,
}

impl HostInfo {
    pub fn gather() -> Self {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let os_image = read("/etc/os-release")
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_else(|| "Linux".into());
        let uname = nix::sys::utsname::uname().ok();
        HostInfo {
            os_image,
            kernel_version: uname
                .map(|u| u.release().to_string_lossy().into_owned())
                .unwrap_or_default(),
            machine_id: read("/etc/machine-id"),
            boot_id: read("/proc/sys/kernel/random/boot_id"),
            system_uuid: read("/sys/class/dmi/id/product_uuid"),
            architecture: go_arch(std::env::consts::ARCH).into(),
        }
    }
}

/// Kubernetes names architectures the Go way.
fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        other => other,
    }
}

fn condition(type_: &str, ready: bool, reason: &str, message: &str, now: &Time) -> NodeCondition {
    NodeCondition {
        type_: type_.into(),
        status: if ready { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    }
}

/// The status this kubelet reports. `runtime_error` is None when the runtime works.
pub fn node_status(
    cfg: &KubeletConfig,
    host: &HostInfo,
    runtime_version: &str,
    runtime_error: Option<&str>,
) -> NodeStatus {
    let now = now();
    let mut capacity = BTreeMap::new();
    capacity.insert("cpu".to_string(), Quantity(cfg.capacity_cpu.clone()));
    capacity.insert("memory".to_string(), Quantity(cfg.capacity_memory.clone()));
    capacity.insert("pods".to_string(), Quantity(cfg.max_pods.to_string()));
    // The nodefs (the kubelet's root dir) is what pods' ephemeral storage is drawn from.
    if let Ok(fs) = crate::eviction::fs::statvfs(&cfg.root_dir) {
        capacity.insert(
            "ephemeral-storage".to_string(),
            Quantity(fs.capacity.to_string()),
        );
    }
    let plain: BTreeMap<String, String> = capacity
        .iter()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    let allocatable = cfg
        .allocatable(&plain)
        .into_iter()
        .map(|(k, v)| (k, Quantity(v)))
        .collect();
    let ready = match runtime_error {
        None => condition(
            "Ready",
            true,
            "KubeletReady",
            "kubelet is posting ready status",
            &now,
        ),
        Some(e) => condition(
            "Ready",
            false,
            "KubeletNotReady",
            &format!("container runtime is down: {e}"),
            &now,
        ),
    };
    NodeStatus {
        // Where the API server reaches this kubelet's server (pods/log, pods/exec).
        daemon_endpoints: cfg.server.as_ref().map(|s| NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i32::from(s.port),
            }),
        }),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: cfg.node_ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: cfg.node_name.clone(),
            },
        ]),
        allocatable: Some(allocatable),
        capacity: Some(capacity),
        conditions: Some(vec![
            condition(
                "MemoryPressure",
                false,
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
                &now,
            ),
            condition(
                "DiskPressure",
                false,
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
                &now,
            ),
            condition(
                "PIDPressure",
                false,
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
                &now,
            ),
            ready,
        ]),
        node_info: Some(NodeSystemInfo {
            architecture: host.architecture.clone(),
            boot_id: host.boot_id.clone(),
            container_runtime_version: runtime_version.into(),
            kernel_version: host.kernel_version.clone(),
            kube_proxy_version: KUBELET_VERSION.into(),
            kubelet_version: KUBELET_VERSION.into(),
            machine_id: host.machine_id.clone(),
            operating_system: "linux".into(),
            os_image: host.os_image.clone(),
            system_uuid: host.system_uuid.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Reports the eviction manager's DiskPressure in `status` (upstream's reasons and messages).
pub fn set_disk_pressure(status: &mut NodeStatus, pressure: bool) {
    let (reason, message) = if pressure {
        ("KubeletHasDiskPressure", "kubelet has disk pressure")
    } else {
        ("KubeletHasNoDiskPressure", "kubelet has no disk pressure")
    };
    for c in status.conditions.iter_mut().flatten() {
        if c.type_ == "DiskPressure" {
            c.status = if pressure { "True" } else { "False" }.into();
            c.reason = Some(reason.into());
            c.message = Some(message.into());
        }
    }
}

/// `status.features` from the CRI runtime's features (upstream's NodeFeatures setter): set when the
/// runtime reports features (containerd 2.0+), left out when it reports none (containerd 1.x).
pub fn set_features(status: &mut NodeStatus, supplemental_groups_policy: Option<bool>) {
    status.features = supplemental_groups_policy.map(|supported| NodeFeatures {
        supplemental_groups_policy: Some(supported),
    });
}

/// Reports the eviction manager's MemoryPressure, DiskPressure and PIDPressure in `status` (upstream's
/// reasons and messages).
pub fn set_pressure(status: &mut NodeStatus, pressure: crate::eviction::Pressure) {
    set_disk_pressure(status, pressure.disk);
    let table = [
        (
            "MemoryPressure",
            pressure.memory,
            (
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
            ),
            (
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
        ),
        (
            "PIDPressure",
            pressure.pid,
            (
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available",
            ),
            (
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
        ),
    ];
    for (type_, on, yes, no) in table {
        let (reason, message) = if on { yes } else { no };
        for c in status.conditions.iter_mut().flatten() {
            if c.type_ == type_ {
                c.status = if on { "True" } else { "False" }.into();
                c.reason = Some(reason.into());
                c.message = Some(message.into());
            }
        }
    }
}

/// upstream's IsExtendedResourceName: a resource in a domain other than kubernetes.io.
fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// Extended resources someone advertised in the node's capacity (a device plugin's, or a test's
/// patch of `status.capacity`) are not the kubelet's to drop: they stay in capacity, and allocatable
/// follows capacity for them, as upstream's MachineInfo setter does.
fn keep_extended_resources(new: &mut NodeStatus, old: Option<&NodeStatus>) {
    let Some(old_capacity) = old.and_then(|o| o.capacity.as_ref()) else {
        return;
    };
    for (name, q) in old_capacity.iter().filter(|(n, _)| is_extended_resource(n)) {
        new.capacity
            .get_or_insert_with(BTreeMap::new)
            .insert(name.clone(), q.clone());
        new.allocatable
            .get_or_insert_with(BTreeMap::new)
            .insert(name.clone(), q.clone());
    }
}

/// Keeps conditions' lastTransitionTime where the status did not change, as the kubelet does.
fn keep_transition_times(new: &mut NodeStatus, old: Option<&NodeStatus>) {
    let old_conds = old.and_then(|o| o.conditions.as_ref());
    for c in new.conditions.iter_mut().flatten() {
        if let Some(prev) = old_conds.and_then(|v| v.iter().find(|p| p.type_ == c.type_)) {
            if prev.status == c.status && prev.last_transition_time.is_some() {
                c.last_transition_time = prev.last_transition_time.clone();
            }
        }
    }
}

pub fn node_object(cfg: &KubeletConfig, status: NodeStatus) -> Node {
    let mut labels = BTreeMap::new();
    labels.insert("kubernetes.io/hostname".to_string(), cfg.node_name.clone());
    labels.insert("kubernetes.io/os".to_string(), "linux".to_string());
    labels.insert(
        "kubernetes.io/arch".to_string(),
        go_arch(std::env::consts::ARCH).to_string(),
    );
    Node {
        metadata: ObjectMeta {
            name: Some(cfg.node_name.clone()),
            labels: Some(labels),
            ..Default::default()
        },
        // A --pod-cidr given to the kubelet is the node's: published so kiln-proxy routes to it and the
        // controller-manager's nodeipam does not hand out another.
        spec: configured_pod_cidr(cfg).map(|c| NodeSpec {
            pod_cidr: Some(c.clone()),
            pod_cidrs: Some(vec![c]),
            ..Default::default()
        }),
        status: Some(status),
    }
}

fn configured_pod_cidr(cfg: &KubeletConfig) -> Option<String> {
    cfg.cri.as_ref().and_then(|c| c.pod_cidr.clone())
}

/// Creates the Node, or takes over the existing one of the same name. Returns the server's copy.
pub async fn register(
    client: &Client,
    cfg: &KubeletConfig,
    status: NodeStatus,
) -> Result<Node, NodeError> {
    let api: Api<Node> = Api::all(client.clone());
    let err = |source| NodeError::Register {
        node: cfg.node_name.clone(),
        source,
    };
    match api
        .create(&PostParams::default(), &node_object(cfg, status))
        .await
    {
        Ok(n) => {
            tracing::info!(node = %cfg.node_name, "node registered");
            Ok(n)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            tracing::info!(node = %cfg.node_name, "node already registered");
            let mut node = api.get(&cfg.node_name).await.map_err(err)?;
            let has_cidr = node
                .spec
                .as_ref()
                .and_then(|s| s.pod_cidr.as_ref())
                .is_some();
            match configured_pod_cidr(cfg) {
                Some(c) if !has_cidr => {
                    let spec = node.spec.get_or_insert_with(Default::default);
                    spec.pod_cidr = Some(c.clone());
                    spec.pod_cidrs = Some(vec![c]);
                    api.replace(&cfg.node_name, &PostParams::default(), &node)
                        .await
                        .map_err(err)
                }
                _ => Ok(node),
            }
        }
        Err(e) => Err(err(e)),
    }
}

/// Posts a fresh status (GET then PUT /status, so it also works without patch support).
pub async fn update_status(
    client: &Client,
    cfg: &KubeletConfig,
    mut status: NodeStatus,
) -> Result<Node, NodeError> {
    let api: Api<Node> = Api::all(client.clone());
    let err = |source| NodeError::Status {
        node: cfg.node_name.clone(),
        source,
    };
    let mut node = api.get(&cfg.node_name).await.map_err(err)?;
    keep_transition_times(&mut status, node.status.as_ref());
    keep_extended_resources(&mut status, node.status.as_ref());
    node.status = Some(status);
    api.replace_status(&cfg.node_name, &PostParams::default(), &node)
        .await
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_resources_in_capacity_survive_a_status_update() {
        let cfg = KubeletConfig::new("n1", "10.1.0.2".parse().unwrap());
        let mut old = node_status(&cfg, &HostInfo::default(), "x", None);
        for list in [
            old.capacity.as_mut().unwrap(),
            old.allocatable.as_mut().unwrap(),
        ] {
            list.insert("cpu".into(), Quantity("99".into()));
        }
        old.capacity
            .as_mut()
            .unwrap()
            .insert("example.com/fakecpu".into(), Quantity("1000".into()));
        let mut new = node_status(&cfg, &HostInfo::default(), "x", None);
        keep_extended_resources(&mut new, Some(&old));
        let (cap, alloc) = (new.capacity.unwrap(), new.allocatable.unwrap());
        assert_eq!(cap["example.com/fakecpu"], Quantity("1000".into()));
        assert_eq!(
            alloc["example.com/fakecpu"],
            Quantity("1000".into()),
            "allocatable follows capacity"
        );
        assert_eq!(
            cap["cpu"],
            Quantity(cfg.capacity_cpu.clone()),
            "native resources are the kubelet's"
        );
        assert!(is_extended_resource("scheduling.k8s.io/foo"));
        assert!(!is_extended_resource("kubernetes.io/batch"));
        assert!(!is_extended_resource("memory"));
    }

    #[test]
    fn ready_status_has_addresses_capacity_and_info() {
        let mut cfg = KubeletConfig::new("cp1", "10.1.0.2".parse().unwrap());
        cfg.capacity_cpu = "2".into();
        cfg.capacity_memory = "4Gi".into();
        let s = node_status(&cfg, &HostInfo::default(), "kiln-host://0.1.0", None);
        let addrs = s.addresses.unwrap();
        assert!(addrs
            .iter()
            .any(|a| a.type_ == "InternalIP" && a.address == "10.1.0.2"));
        assert!(addrs
            .iter()
            .any(|a| a.type_ == "Hostname" && a.address == "cp1"));
        assert_eq!(s.capacity.as_ref().unwrap()["memory"].0, "4Gi");
        assert_eq!(s.allocatable.as_ref().unwrap()["pods"].0, "110");
        let ready = s
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("True", Some("KubeletReady"))
        );
        let info = s.node_info.unwrap();
        assert_eq!(info.kubelet_version, KUBELET_VERSION);
        assert_eq!(info.container_runtime_version, "kiln-host://0.1.0");
    }

    #[test]
    fn allocatable_is_capacity_less_reservations_and_hard_eviction() {
        let mut cfg = KubeletConfig::new("cp1", "10.1.0.2".parse().unwrap());
        cfg.capacity_cpu = "2".into();
        cfg.capacity_memory = "4Gi".into();
        cfg.root_dir = std::env::temp_dir();
        cfg.reserved = vec![
            crate::allocatable::parse_reserved("system-reserved", "cpu=250m,memory=512Mi").unwrap(),
            crate::allocatable::parse_reserved("kube-reserved", "cpu=250m,memory=256Mi").unwrap(),
        ];
        cfg.eviction_reserve = crate::allocatable::eviction_reserve("memory.available<256Mi");
        let s = node_status(&cfg, &HostInfo::default(), "x", None);
        let (cap, alloc) = (s.capacity.unwrap(), s.allocatable.unwrap());
        assert_eq!(alloc["cpu"].0, "1500m");
        assert_eq!(alloc["memory"].0, "3Gi");
        assert_eq!(cap["memory"].0, "4Gi");
        assert!(
            cap.contains_key("ephemeral-storage") && alloc.contains_key("ephemeral-storage"),
            "the root dir's filesystem is the node's ephemeral storage"
        );
    }

    #[test]
    fn disk_pressure_condition() {
        let cfg = KubeletConfig::new("cp1", "10.1.0.2".parse().unwrap());
        let disk = |s: &NodeStatus| {
            s.conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "DiskPressure")
                .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
                .unwrap()
        };
        let mut s = node_status(&cfg, &HostInfo::default(), "x", None);
        assert_eq!(
            disk(&s),
            ("False".into(), "KubeletHasNoDiskPressure".into())
        );
        set_disk_pressure(&mut s, true);
        assert_eq!(disk(&s), ("True".into(), "KubeletHasDiskPressure".into()));
        let c = s
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "DiskPressure");
        assert_eq!(
            c.and_then(|c| c.message.as_deref()),
            Some("kubelet has disk pressure")
        );
        set_disk_pressure(&mut s, false);
        assert_eq!(
            disk(&s),
            ("False".into(), "KubeletHasNoDiskPressure".into())
        );
    }

    #[test]
    fn runtime_failure_makes_the_node_not_ready() {
        let cfg = KubeletConfig::new("cp1", "10.1.0.2".parse().unwrap());
        let s = node_status(&cfg, &HostInfo::default(), "x", Some("broken"));
        let ready = s
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "False");
    }

    #[test]
    fn features_are_reported_only_when_the_runtime_reports_them() {
        let cfg = KubeletConfig::new("n1", "10.1.0.2".parse().unwrap());
        let mut status = node_status(&cfg, &HostInfo::default(), "x", None);
        set_features(&mut status, None);
        assert_eq!(serde_json::to_value(&status).unwrap().get("features"), None);
        for supported in [true, false] {
            set_features(&mut status, Some(supported));
            assert_eq!(
                serde_json::to_value(&status).unwrap()["features"],
                serde_json::json!({"supplementalGroupsPolicy": supported})
            );
        }
    }
}
