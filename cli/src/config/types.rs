//! The cluster.yaml schema (`apiVersion: kiln.dev/v1alpha1`, `kind: Cluster`) as serde types.
//!
//! Every struct denies unknown fields so a typo is an error with a line number, not a silently ignored
//! setting. Values whose syntax serde can check (roles, CIDRs, IPs) are parsed here, so their errors
//! carry serde's location; cross-field rules live in `validate.rs`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub const API_VERSION: &str = "kiln.dev/v1alpha1";
pub const KIND: &str = "Cluster";

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterConfig {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    pub spec: ClusterSpec,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSpec {
    pub hosts: Vec<Host>,
    /// `host:port` clients and kubelets use for the apiserver; defaults to the first controller:6443.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<String>,
    #[serde(default)]
    pub networking: Networking,
    #[serde(default)]
    pub proxy: Proxy,
    #[serde(default)]
    pub store: Store,
    #[serde(default)]
    pub controller_manager: ControllerManager,
    #[serde(default)]
    pub kubelet: Kubelet,
    /// kiln-apiserver's audit logging and encryption at rest (`apiserver.rs`).
    #[serde(default, skip_serializing_if = "super::ApiServer::is_unset")]
    pub api_server: super::ApiServer,
    #[serde(default)]
    pub storage: Storage,
    #[serde(default)]
    pub pki: Pki,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<Registry>,
    #[serde(default)]
    pub images: Images,
    /// Defaults to `~/.ssh/known_hosts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_hosts_file: Option<PathBuf>,
    /// Cluster state (CA, keys, tokens); defaults to `<dir of cluster.yaml>/<name>.kiln`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Host {
    pub name: String,
    /// IP address or DNS name kiln connects to over SSH.
    pub address: String,
    pub role: Role,
    #[serde(default)]
    pub ssh: Ssh,
    /// Address the node advertises in the cluster, when it differs from `address` (NAT, bastion).
    #[serde(default, rename = "nodeIP", skip_serializing_if = "Option::is_none")]
    pub node_ip: Option<Ip>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl Host {
    pub fn is_controller(&self) -> bool {
        matches!(self.role, Role::Controller | Role::ControllerWorker)
    }

    pub fn is_worker(&self) -> bool {
        matches!(self.role, Role::Worker | Role::ControllerWorker)
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ssh {
    #[serde(default = "default_user")]
    pub user: String,
    #[serde(default = "default_ssh_port")]
    pub port: u16,
    /// Private key; without it the ssh-agent (`SSH_AUTH_SOCK`) is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bastion: Option<Bastion>,
    /// Run commands through `sudo -n`; defaults to true for any user but root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sudo: Option<bool>,
}

impl Ssh {
    pub fn uses_sudo(&self) -> bool {
        self.sudo.unwrap_or(self.user != "root")
    }
}

impl Default for Ssh {
    fn default() -> Self {
        Ssh {
            user: default_user(),
            port: default_ssh_port(),
            key_file: None,
            bastion: None,
            sudo: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Bastion {
    pub address: String,
    #[serde(default = "default_ssh_port")]
    pub port: u16,
    /// Defaults to the host's ssh user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Defaults to the host's key file (or the agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Networking {
    #[serde(rename = "podCIDR", default = "default_pod_cidr")]
    pub pod_cidr: Cidr,
    #[serde(rename = "serviceCIDR", default = "default_service_cidr")]
    pub service_cidr: Cidr,
    #[serde(rename = "nodeCIDRMaskSize", default = "default_node_mask")]
    pub node_cidr_mask_size: u8,
    /// The cluster DNS Service's address (`kube-system/kube-dns`); unset: the 10th address of
    /// serviceCIDR (10.96.0.10), as kubeadm picks it.
    #[serde(
        rename = "clusterDNS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_dns: Option<IpAddr>,
    /// The cluster's DNS zone (kubelet `--cluster-domain`, kiln-dns `--cluster-domain`).
    #[serde(rename = "clusterDomain", default = "default_cluster_domain")]
    pub cluster_domain: String,
    #[serde(default, skip_serializing_if = "Dns::is_default")]
    pub dns: Dns,
}

impl Default for Networking {
    fn default() -> Self {
        Networking {
            pod_cidr: default_pod_cidr(),
            service_cidr: default_service_cidr(),
            node_cidr_mask_size: default_node_mask(),
            cluster_dns: None,
            cluster_domain: default_cluster_domain(),
            dns: Dns::default(),
        }
    }
}

impl Networking {
    /// The `kubernetes` Service's address: the first of serviceCIDR (10.96.0.1).
    pub fn kubernetes_service_ip(&self) -> IpAddr {
        self.service_cidr.nth(1)
    }

    /// The cluster DNS address: `clusterDNS`, or the 10th address of serviceCIDR (10.96.0.10).
    pub fn cluster_dns_ip(&self) -> IpAddr {
        self.cluster_dns
            .unwrap_or_else(|| self.service_cidr.nth(10))
    }
}

/// kiln-dns settings.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Dns {
    /// Resolvers for names outside the cluster zone (`IP` or `IP:port`); empty: each node's own
    /// /etc/resolv.conf.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream: Vec<String>,
    /// TTL in seconds of the cluster zone's records (kiln-dns `--ttl`, CoreDNS's `ttl`); unset: 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u32>,
}

impl Dns {
    fn is_default(&self) -> bool {
        self == &Dns::default()
    }
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Proxy {
    #[serde(default)]
    pub mode: ProxyMode,
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Store {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<Backup>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_backend_bytes: Option<u64>,
    /// `false` starts kiln-store with `--keep-awake=false`: its Raft thread and a worker then
    /// sleep between writes even when they come back to back. For hosts whose CPU time is
    /// metered (a CPU quota); unset, they stay awake through a steady stream of writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_awake: Option<bool>,
    /// An existing etcd v3 cluster instead of kiln-store (kubeadm's external etcd); see `external_etcd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<super::external_etcd::ExternalEtcd>,
}

/// Timings of kiln-controller-manager (durations like `40s`, `5m`), shortened in tests and drills.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControllerManager {
    /// A node silent this long becomes NotReady (Ready=Unknown).
    #[serde(default = "default_grace")]
    pub node_monitor_grace_period: String,
    /// Pods of an unreachable node are evicted after this long.
    #[serde(default = "default_eviction")]
    pub pod_eviction_timeout: String,
}

fn default_grace() -> String {
    "40s".into()
}

fn default_eviction() -> String {
    "5m".into()
}

impl Default for ControllerManager {
    fn default() -> Self {
        ControllerManager {
            node_monitor_grace_period: default_grace(),
            pod_eviction_timeout: default_eviction(),
        }
    }
}

/// Settings of every node's kiln-kubelet, named as in upstream's KubeletConfiguration: `kiln init`
/// writes them into each node's `/etc/kiln/kubelet-config.yaml` (`bootstrap::phases::kubelet_config`).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Kubelet {
    /// Hard eviction thresholds, signal → quantity or percentage of capacity (`nodefs.available: 10%`,
    /// `imagefs.available: 2Gi`). Empty keeps the kubelet's defaults (nodefs 10%, imagefs 15%); as
    /// upstream, a map that is set replaces them all, so a signal it leaves out is not watched.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_hard: BTreeMap<String, String>,
    /// Resources kept for the operating system (`cpu`, `memory`, `ephemeral-storage`, `pid` →
    /// quantity): they come off every node's allocatable, and pods together are held below them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<String, String>,
    /// Resources kept for the Kubernetes daemons (same keys).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<String, String>,
    /// The most processes one pod may run; unset: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_pids_limit: Option<i64>,
    /// Unsafe sysctls pods may set besides the safe set: names, or prefixes ending in `*`
    /// (`kernel.msg*`), each namespaced (kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, net.*).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_unsafe_sysctls: Vec<String>,
}

/// Storage kiln provides itself.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Storage {
    #[serde(default)]
    pub local_path: LocalPath,
}

/// The node-local `kiln.io/local-path` provisioner in every kubelet, and the default StorageClass
/// `local-path` that `kiln init` creates for it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalPath {
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Where each node keeps its volumes (`pvc-<uid>_<namespace>_<name>` directories).
    #[serde(default = "default_local_path_dir")]
    pub dir: PathBuf,
}

pub const DEFAULT_LOCAL_PATH_DIR: &str = "/var/lib/kiln/local-path";

fn default_true() -> bool {
    true
}

fn default_local_path_dir() -> PathBuf {
    DEFAULT_LOCAL_PATH_DIR.into()
}

impl Default for LocalPath {
    fn default() -> Self {
        LocalPath {
            enabled: true,
            dir: default_local_path_dir(),
        }
    }
}

impl LocalPath {
    /// The kubelet's `--local-path-dir` value: the directory, or empty (the provisioner off).
    pub fn kubelet_flag(&self) -> String {
        if self.enabled {
            format!("--local-path-dir={}", self.dir.display())
        } else {
            "--local-path-dir=".into()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Backup {
    /// Cron expression (5 fields) or a macro such as `@daily`.
    pub schedule: String,
    /// How many snapshots to keep.
    #[serde(default = "default_retention")]
    pub retention: u32,
    /// Where the bundles go (default: /var/backups/kiln on each controller); see `config::backup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<super::backup::BackupDestination>,
    /// Routine restore drills of the newest bundle (default: none); see `config::backup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drill: Option<super::backup::DrillSchedule>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pki {
    #[serde(default = "default_ca_days")]
    pub ca_validity_days: u32,
    #[serde(default = "default_cert_days")]
    pub cert_validity_days: u32,
}

impl Default for Pki {
    fn default() -> Self {
        Pki {
            ca_validity_days: default_ca_days(),
            cert_validity_days: default_cert_days(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Registry {
    /// `host[:port]` of a registry mirror for every image pull.
    pub mirror: String,
    #[serde(default)]
    pub insecure: bool,
    /// Upstream registries (`docker.io`, `registry.k8s.io`, …) whose pulls try `mirror` first, under the
    /// same repository path (`busybox` → `<mirror>/library/busybox`), the upstream staying the fallback:
    /// containerd's certs.d hosts.toml mirrors, for air-gapped hosts and pull-through caches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirror_of: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Images {
    #[serde(default = "default_pause")]
    pub pause: String,
}

impl Default for Images {
    fn default() -> Self {
        Images {
            pause: default_pause(),
        }
    }
}

fn default_user() -> String {
    "root".into()
}
fn default_ssh_port() -> u16 {
    22
}
fn default_pod_cidr() -> Cidr {
    "10.244.0.0/16".parse().expect("valid default")
}
fn default_service_cidr() -> Cidr {
    "10.96.0.0/12".parse().expect("valid default")
}
fn default_node_mask() -> u8 {
    24
}
fn default_cluster_domain() -> String {
    "cluster.local".into()
}
fn default_retention() -> u32 {
    7
}
fn default_ca_days() -> u32 {
    3650
}
fn default_cert_days() -> u32 {
    365
}
fn default_pause() -> String {
    "registry.k8s.io/pause:3.10".into()
}

/// Implements Deserialize/Serialize through FromStr/Display, so a bad value's error (and its line)
/// comes from serde with our own wording.
macro_rules! string_serde {
    ($t:ty) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Controller,
    Worker,
    ControllerWorker,
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "controller" => Ok(Role::Controller),
            "worker" => Ok(Role::Worker),
            "controller+worker" => Ok(Role::ControllerWorker),
            other => Err(format!(
                "unknown role '{other}', expected one of controller, worker, controller+worker"
            )),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Controller => "controller",
            Role::Worker => "worker",
            Role::ControllerWorker => "controller+worker",
        })
    }
}
string_serde!(Role);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProxyMode {
    #[default]
    Nftables,
}

impl FromStr for ProxyMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "nftables" => Ok(ProxyMode::Nftables),
            other => Err(format!("unknown proxy mode '{other}', expected nftables")),
        }
    }
}

impl fmt::Display for ProxyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("nftables")
    }
}
string_serde!(ProxyMode);

/// An IP address with a cluster.yaml-friendly parse error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ip(pub IpAddr);

impl FromStr for Ip {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.parse()
            .map(Ip)
            .map_err(|_| format!("invalid IP address '{s}'"))
    }
}

impl fmt::Display for Ip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
string_serde!(Ip);

/// An IPv4 or IPv6 network in CIDR notation; host bits must be zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    fn bits(addr: IpAddr) -> (u128, u8) {
        match addr {
            IpAddr::V4(a) => (u32::from(a) as u128, 32),
            IpAddr::V6(a) => (u128::from(a), 128),
        }
    }

    fn mask(width: u8, prefix: u8) -> u128 {
        if prefix == 0 {
            0
        } else {
            let all = if width == 128 {
                u128::MAX
            } else {
                (1u128 << width) - 1
            };
            all & !((1u128 << (width - prefix)) - 1)
        }
    }

    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// The `n`-th address after the network's base address (wrapping is the caller's problem:
    /// validation checks that it stays inside).
    pub fn nth(&self, n: u32) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => IpAddr::V4(std::net::Ipv4Addr::from(u32::from(a).wrapping_add(n))),
            IpAddr::V6(a) => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(a).wrapping_add(n as u128),
            )),
        }
    }

    /// Whether `ip` lies inside this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let (net, width) = Self::bits(self.addr);
        let (other, other_width) = Self::bits(ip);
        width == other_width && (other & Self::mask(width, self.prefix)) == net
    }

    /// Two networks overlap exactly when one contains the other's base address.
    pub fn overlaps(&self, other: &Cidr) -> bool {
        self.contains(other.addr) || other.contains(self.addr)
    }
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("invalid CIDR '{s}': {why}");
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| bad("expected address/prefix"))?;
        let addr: IpAddr = addr.parse().map_err(|_| bad("not an IP address"))?;
        let prefix: u8 = prefix.parse().map_err(|_| bad("prefix is not a number"))?;
        let (value, width) = Self::bits(addr);
        if prefix > width {
            return Err(bad(&format!(
                "prefix /{prefix} is longer than {width} bits"
            )));
        }
        if value & !Self::mask(width, prefix) != 0 {
            return Err(bad("host bits are set"));
        }
        Ok(Cidr { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}
string_serde!(Cidr);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parse_and_contains() {
        let pods: Cidr = "10.244.0.0/16".parse().unwrap();
        assert!(pods.contains("10.244.3.4".parse().unwrap()));
        assert!(!pods.contains("10.245.0.1".parse().unwrap()));
        assert!(!pods.contains("::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
        let v6: Cidr = "fd00::/64".parse().unwrap();
        assert!(v6.contains("fd00::5".parse().unwrap()));
        assert!("10.244.0.1/16"
            .parse::<Cidr>()
            .unwrap_err()
            .contains("host bits"));
        assert!("10.244.0.0/33"
            .parse::<Cidr>()
            .unwrap_err()
            .contains("longer than 32"));
        assert!("10.244.0.0".parse::<Cidr>().is_err());
    }

    #[test]
    fn cidr_overlap() {
        let a: Cidr = "10.96.0.0/12".parse().unwrap();
        let b: Cidr = "10.100.0.0/16".parse().unwrap();
        let c: Cidr = "10.244.0.0/16".parse().unwrap();
        assert!(a.overlaps(&b) && b.overlaps(&a));
        assert!(!a.overlaps(&c));
    }

    #[test]
    fn role_roundtrip() {
        for r in [Role::Controller, Role::Worker, Role::ControllerWorker] {
            assert_eq!(r.to_string().parse::<Role>().unwrap(), r);
        }
        assert_eq!(
            "master".parse::<Role>().unwrap_err(),
            "unknown role 'master', expected one of controller, worker, controller+worker"
        );
    }
}
