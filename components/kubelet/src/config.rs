//! Kubelet flags (defined once, with clap) and the resolved configuration the library runs with.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--{flag}: {message}")]
    Invalid { flag: &'static str, message: String },
    #[error(transparent)]
    File(#[from] crate::config_file::FileError),
}

/// Command-line flags of `kiln-kubelet`, named like the kubelet's.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "kiln-kubelet",
    version = kiln_common::version::LONG,
    about = "kiln's node agent: static pods, node registration, mirror pods"
)]
pub struct Flags {
    /// A KubeletConfiguration file (kubelet.config.k8s.io/v1beta1), as kubeadm writes it: its fields
    /// that are twins of these flags (staticPodPath, clusterDNS, systemReserved, allowedUnsafeSysctls,
    /// evictionHard, …) are honoured, other fields are named in a warning; flags given on the command
    /// line win over the file.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Cluster DNS server addresses (comma-separated) that ClusterFirst pods resolve through; without,
    /// ClusterFirst pods fall back to the Default policy.
    #[arg(long, value_delimiter = ',')]
    pub cluster_dns: Option<Vec<String>>,
    /// The cluster's DNS domain (e.g. cluster.local): pods search `<ns>.svc.<domain> svc.<domain>
    /// <domain>` before the host's domains. Default: none.
    #[arg(long)]
    pub cluster_domain: Option<String>,
    /// The host resolver file pods' DNS is derived from; empty: none. Default /etc/resolv.conf.
    #[arg(long)]
    pub resolv_conf: Option<String>,
    /// Stop and remove every pod sandbox this kubelet created (CRI, by label) and exit: CNI releases the
    /// pods' addresses and containerd unmounts their files. `kiln reset` runs it before stopping containerd.
    #[arg(long)]
    pub cleanup: bool,
    /// Kubeconfig with the node's client certificate (CN=system:node:<name>, O=system:nodes).
    #[arg(long, default_value = "/etc/kiln/kubelet.conf")]
    pub kubeconfig: PathBuf,
    /// Kubeconfig with a bootstrap token and the cluster CA, used to obtain a client certificate (TLS
    /// bootstrap) when --kubeconfig does not exist or its certificate has expired.
    #[arg(long)]
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// Listen address of the node-local load balancer to the API servers (several control planes),
    /// e.g. 127.0.0.1:6444; the kubeconfigs of this node then point at it.
    #[arg(long)]
    pub apiserver_lb_listen: Option<std::net::SocketAddr>,
    /// API servers behind the node-local load balancer, host:port (repeat or comma-separate).
    #[arg(long, value_delimiter = ',')]
    pub apiserver_lb_backend: Vec<String>,
    /// Renew the client certificate (a CSR with the node's own identity) when 80 % of its lifetime is over.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub rotate_certificates: bool,
    /// Directory of static pod manifests (YAML Pods), re-read every --file-check-frequency.
    #[arg(long, default_value = "/etc/kiln/manifests")]
    pub pod_manifest_path: PathBuf,
    /// Kubelet state directory.
    #[arg(long, default_value = "/var/lib/kiln/kubelet")]
    pub root_dir: PathBuf,
    /// Root of container logs: <dir>/<ns>_<name>_<uid>/<container>/<restart>.log.
    #[arg(long, default_value = "/var/log/pods")]
    pub pod_log_dir: PathBuf,
    /// Node name; defaults to the host name.
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// The node's InternalIP; defaults to the first non-loopback address the host name resolves to.
    #[arg(long)]
    pub node_ip: Option<IpAddr>,
    /// How often node status is posted, in seconds.
    #[arg(long, default_value_t = 10)]
    pub node_status_update_frequency: u64,
    /// How often the static pod directory is re-read, in seconds.
    #[arg(long, default_value_t = 2)]
    pub file_check_frequency: u64,
    #[arg(long, default_value_t = 110)]
    pub max_pods: u32,
    /// CPU capacity reported (lab hosts see the whole machine); defaults to the CPUs available.
    #[arg(long)]
    pub capacity_cpu: Option<String>,
    /// Memory capacity reported, as a Kubernetes quantity (e.g. 4Gi); defaults to MemTotal.
    #[arg(long)]
    pub capacity_memory: Option<String>,
    /// Base of the container restart backoff, in seconds (doubles up to 5 minutes).
    #[arg(long, default_value_t = 10)]
    pub restart_backoff_base: u64,
    /// CRI socket of the container runtime for workload pods; empty disables workload pods.
    #[arg(long, default_value = "unix:///run/containerd/containerd.sock")]
    pub container_runtime_endpoint: String,
    /// The sandbox (pause) image, pulled before the first sandbox; containerd's `sandbox_image` must match.
    #[arg(long, default_value = "registry.k8s.io/pause:3.10")]
    pub pod_infra_container_image: String,
    /// This node's pod CIDR (e.g. 10.244.1.0/24): the kubelet writes the CNI conflist for it.
    #[arg(long)]
    pub pod_cidr: Option<String>,
    /// Where the CNI conflist goes (containerd's CRI `conf_dir`).
    #[arg(long, default_value = "/etc/cni/net.d")]
    pub cni_conf_dir: PathBuf,
    /// Port of the kubelet's HTTPS server (container logs, exec, pods, metrics); 0 disables it.
    #[arg(long, default_value_t = 10250)]
    pub port: u16,
    /// Address the kubelet's HTTPS server listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub address: IpAddr,
    /// Serving certificate (PEM); without it a self-signed one is made in memory at start.
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// CA whose client certificates authenticate requests to the kubelet's server (then authorized by a
    /// SubjectAccessReview). Without the file, every request but /healthz is refused.
    #[arg(long, default_value = "/etc/kiln/pki/ca.crt")]
    pub client_ca_file: PathBuf,
    /// Hard eviction thresholds, upstream's syntax: `memory.available` (--capacity-memory less the root
    /// cgroup's working set; MemoryPressure), `nodefs.available` (the --root-dir filesystem) and
    /// `imagefs.available` (--eviction-imagefs-dir; DiskPressure), `pid.available` (the kernel's task
    /// limit less the tasks running; PIDPressure), below a quantity or a percentage of capacity, e.g.
    /// `memory.available<100Mi,nodefs.available<1Gi`. Other upstream signals are accepted and not
    /// enforced; empty disables.
    #[arg(long, default_value = crate::eviction::thresholds::DEFAULT_EVICTION_HARD)]
    pub eviction_hard: String,
    /// Soft eviction thresholds (same syntax): the pressure condition at once, evictions only after the signal's
    /// --eviction-soft-grace-period.
    #[arg(long, default_value = "")]
    pub eviction_soft: String,
    /// Grace period of each soft threshold, e.g. `nodefs.available=1m30s`.
    #[arg(long, default_value = "")]
    pub eviction_soft_grace_period: String,
    /// Longest grace (seconds) a pod evicted on a soft threshold gets (its own grace period if shorter).
    #[arg(long, default_value_t = 0)]
    pub eviction_max_pod_grace_period: u32,
    /// How long a pressure condition stays True after the last crossing of its thresholds (Go duration,
    /// e.g. 5m, 30s).
    #[arg(long, default_value = "5m")]
    pub eviction_pressure_transition_period: String,
    /// How often the eviction manager observes memory, disks and PIDs (Go duration).
    #[arg(long, default_value = "10s")]
    pub eviction_monitoring_interval: String,
    /// The image filesystem: containerd's root dir (its `root` setting).
    #[arg(long, default_value = "/var/lib/containerd")]
    pub eviction_imagefs_dir: PathBuf,
    /// How often leaked CNI IP reservations (host-local files whose sandbox CRI no longer lists) are
    /// released (Go duration). Hidden: for tests.
    #[arg(long, default_value = "1m", hide = true)]
    pub cni_gc_interval: String,
    /// How old an unowned reservation must be to be released (Go duration; covers a sandbox whose IP is
    /// reserved before containerd lists it). Hidden: for tests.
    #[arg(long, default_value = "2m", hide = true)]
    pub cni_gc_grace: String,
    /// Where the node-local `kiln.io/local-path` provisioner makes volume directories
    /// (`pvc-<uid>_<namespace>_<name>`); empty turns the provisioner off.
    #[arg(long, default_value = crate::local_path::DEFAULT_DIR)]
    pub local_path_dir: String,
    /// Resources kept for the operating system (`cpu=100m,memory=256Mi,ephemeral-storage=1Gi,pid=1000`):
    /// they come off the node's allocatable.
    #[arg(long, default_value = "")]
    pub system_reserved: String,
    /// Resources kept for the Kubernetes daemons (same syntax): they come off the node's allocatable.
    #[arg(long, default_value = "")]
    pub kube_reserved: String,
    /// `pods` (the default): the `kubepods` cgroup is limited to capacity minus the reservations;
    /// `none`: to the capacity. (`system-reserved`/`kube-reserved` enforcement needs cgroups kiln does
    /// not manage and is refused.)
    #[arg(long, default_value = "pods", value_delimiter = ',')]
    pub enforce_node_allocatable: Vec<String>,
    /// The most processes one pod may run (its cgroup's pids.max); -1: unlimited.
    #[arg(long, default_value_t = -1)]
    pub pod_max_pids: i64,
    /// Unsafe sysctls (names, or prefixes ending in `*`, e.g. `kernel.msg*,net.core.somaxconn`) pods may
    /// set besides the safe set; each must be namespaced (kernel.shm*, kernel.msg*, kernel.sem,
    /// fs.mqueue.*, net.*).
    #[arg(long, value_delimiter = ',')]
    pub allowed_unsafe_sysctls: Vec<String>,
    /// The flags whose value came from the --config file, with the file's field: (flag, field). An
    /// invalid value is then reported against the file and its field, not the flag.
    #[arg(skip)]
    pub from_file: Vec<(&'static str, &'static str)>,
}

impl Flags {
    /// The process's command line and its --config file ([`Flags::load_from`]).
    pub fn load() -> Result<Self, ConfigError> {
        Self::load_from(std::env::args_os())
    }

    /// Parses `args` (a usage error exits, as clap's `parse` does), then takes from the --config
    /// file every setting not given on the command line, as upstream's kubelet re-applies its flags
    /// over the file.
    pub fn load_from<I, T>(args: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Self::command().get_matches_from(args);
        let mut flags = Self::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        if let Some(path) = flags.config.clone() {
            let file = crate::config_file::read(&path)?;
            if !file.ignored.is_empty() {
                tracing::warn!(file = %path.display(), fields = ?file.ignored, "KubeletConfiguration fields kiln-kubelet does not act on");
            }
            flags.apply_file(file, |id| {
                matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
            });
        }
        Ok(flags)
    }

    /// Sets every flag the file sets and `on_command_line` (by clap id) says was not given.
    fn apply_file(
        &mut self,
        file: crate::config_file::KubeletFile,
        on_command_line: impl Fn(&str) -> bool,
    ) {
        macro_rules! take {
            ($field:ident, $flag:literal, $key:literal, $value:expr) => {
                if let Some(v) = $value {
                    if !on_command_line(stringify!($field)) {
                        self.$field = v;
                        self.from_file.push(($flag, $key));
                    }
                }
            };
        }
        let ips = |v: Vec<IpAddr>| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        take!(
            cluster_dns,
            "cluster-dns",
            "clusterDNS",
            file.cluster_dns.map(|v| Some(ips(v)))
        );
        take!(
            cluster_domain,
            "cluster-domain",
            "clusterDomain",
            file.cluster_domain.map(Some)
        );
        take!(
            resolv_conf,
            "resolv-conf",
            "resolvConf",
            file.resolv_conf.map(Some)
        );
        take!(
            pod_manifest_path,
            "pod-manifest-path",
            "staticPodPath",
            file.static_pod_path
        );
        take!(pod_log_dir, "pod-log-dir", "podLogsDir", file.pod_logs_dir);
        take!(
            file_check_frequency,
            "file-check-frequency",
            "fileCheckFrequency",
            file.file_check_frequency
        );
        take!(
            node_status_update_frequency,
            "node-status-update-frequency",
            "nodeStatusUpdateFrequency",
            file.node_status_update_frequency
        );
        take!(address, "address", "address", file.address);
        take!(port, "port", "port", file.port);
        take!(
            tls_cert_file,
            "tls-cert-file",
            "tlsCertFile",
            file.tls_cert_file.map(Some)
        );
        take!(
            tls_private_key_file,
            "tls-private-key-file",
            "tlsPrivateKeyFile",
            file.tls_private_key_file.map(Some)
        );
        take!(
            client_ca_file,
            "client-ca-file",
            "authentication.x509.clientCAFile",
            file.client_ca_file
        );
        take!(
            rotate_certificates,
            "rotate-certificates",
            "rotateCertificates",
            file.rotate_certificates
        );
        take!(max_pods, "max-pods", "maxPods", file.max_pods);
        take!(pod_cidr, "pod-cidr", "podCIDR", file.pod_cidr.map(Some));
        take!(
            pod_max_pids,
            "pod-max-pids",
            "podPidsLimit",
            file.pod_pids_limit
        );
        take!(
            container_runtime_endpoint,
            "container-runtime-endpoint",
            "containerRuntimeEndpoint",
            file.container_runtime_endpoint
        );
        take!(
            eviction_hard,
            "eviction-hard",
            "evictionHard",
            file.eviction_hard
        );
        take!(
            eviction_soft,
            "eviction-soft",
            "evictionSoft",
            file.eviction_soft
        );
        take!(
            eviction_soft_grace_period,
            "eviction-soft-grace-period",
            "evictionSoftGracePeriod",
            file.eviction_soft_grace_period
        );
        take!(
            eviction_pressure_transition_period,
            "eviction-pressure-transition-period",
            "evictionPressureTransitionPeriod",
            file.eviction_pressure_transition_period
        );
        take!(
            eviction_max_pod_grace_period,
            "eviction-max-pod-grace-period",
            "evictionMaxPodGracePeriod",
            file.eviction_max_pod_grace_period
        );
        take!(
            system_reserved,
            "system-reserved",
            "systemReserved",
            file.system_reserved
        );
        take!(
            kube_reserved,
            "kube-reserved",
            "kubeReserved",
            file.kube_reserved
        );
        take!(
            enforce_node_allocatable,
            "enforce-node-allocatable",
            "enforceNodeAllocatable",
            file.enforce_node_allocatable
        );
        take!(
            allowed_unsafe_sysctls,
            "allowed-unsafe-sysctls",
            "allowedUnsafeSysctls",
            file.allowed_unsafe_sysctls
        );
    }
}

/// The kubelet's HTTPS server (:10250).
#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub address: IpAddr,
    pub port: u16,
    /// Serving certificate and key; None: self-signed, made in memory.
    pub tls: Option<(PathBuf, PathBuf)>,
    pub client_ca_file: Option<PathBuf>,
}

/// Workload pods over CRI.
#[derive(Debug, Clone)]
pub struct CriSettings {
    pub endpoint: String,
    pub pause_image: String,
    pub pod_cidr: Option<String>,
    pub cni_conf_dir: PathBuf,
    /// How often each pod's containers are checked (exits, probes).
    pub sync_period: Duration,
    /// Release of leaked host-local IP reservations.
    pub cni_gc: crate::cni_gc::GcSettings,
}

/// Everything `run` needs, with defaults resolved.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    pub kubeconfig: PathBuf,
    pub bootstrap_kubeconfig: Option<PathBuf>,
    pub rotate_certificates: bool,
    /// The node-local API server load balancer: listen address and backends.
    pub apiserver_lb: Option<(std::net::SocketAddr, Vec<String>)>,
    pub pod_manifest_path: PathBuf,
    pub root_dir: PathBuf,
    pub pod_log_dir: PathBuf,
    pub node_name: String,
    pub node_ip: IpAddr,
    pub node_status_update_frequency: Duration,
    pub file_check_frequency: Duration,
    pub lease_renew_interval: Duration,
    pub lease_duration_seconds: i32,
    pub max_pods: u32,
    pub capacity_cpu: String,
    pub capacity_memory: String,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// Upper bound of the retry delay while the API server is unreachable.
    pub api_retry_max: Duration,
    /// None: no workload pods (static pods only).
    pub cri: Option<CriSettings>,
    /// None: no HTTPS server (tests that run several kubelets in one process).
    pub server: Option<ServerSettings>,
    /// Disk eviction (with workload pods only: they are what it evicts).
    pub eviction: crate::eviction::EvictionConfig,
    /// Pods' DNS: cluster DNS servers, cluster domain, the host's resolver file.
    pub dns: crate::dns_config::DnsSettings,
    /// The local-path provisioner's directory (with workload pods only); empty: off.
    pub local_path_dir: PathBuf,
    /// `--system-reserved` and `--kube-reserved`.
    pub reserved: Vec<crate::allocatable::Reserved>,
    /// The hard eviction thresholds that come off allocatable.
    pub eviction_reserve: crate::allocatable::EvictionReserve,
    /// Whether `kubepods` is bounded by capacity minus the reservations (`--enforce-node-allocatable=pods`).
    pub enforce_pods_allocatable: bool,
    /// `--pod-max-pids` (None: unlimited).
    pub pod_pids_limit: Option<i64>,
    /// `--allowed-unsafe-sysctls`, checked to be namespaced.
    pub allowed_unsafe_sysctls: Vec<String>,
    /// Whether workload pods get kubepods/QoS/pod cgroups made and limited by the kubelet (off for
    /// in-process test kubelets, which must not touch the host's cgroups).
    pub pod_cgroups: bool,
}

impl KubeletConfig {
    /// Defaults for a node name and IP; tests override paths and intervals.
    pub fn new(node_name: impl Into<String>, node_ip: IpAddr) -> Self {
        KubeletConfig {
            kubeconfig: "/etc/kiln/kubelet.conf".into(),
            bootstrap_kubeconfig: None,
            rotate_certificates: true,
            apiserver_lb: None,
            pod_manifest_path: "/etc/kiln/manifests".into(),
            root_dir: "/var/lib/kiln/kubelet".into(),
            pod_log_dir: "/var/log/pods".into(),
            node_name: node_name.into(),
            node_ip,
            node_status_update_frequency: Duration::from_secs(10),
            file_check_frequency: Duration::from_secs(2),
            lease_renew_interval: Duration::from_secs(10),
            lease_duration_seconds: 40,
            max_pods: 110,
            capacity_cpu: default_cpu(),
            capacity_memory: default_memory(),
            backoff_base: Duration::from_secs(10),
            backoff_max: Duration::from_secs(300),
            api_retry_max: Duration::from_secs(30),
            cri: None,
            server: None,
            eviction: Default::default(),
            dns: Default::default(),
            // Off unless asked for: in-process kubelets (tests) must not write under /var/lib.
            local_path_dir: PathBuf::new(),
            reserved: Vec::new(),
            eviction_reserve: Default::default(),
            enforce_pods_allocatable: true,
            pod_pids_limit: None,
            allowed_unsafe_sysctls: Vec::new(),
            pod_cgroups: false,
        }
    }

    /// What the node reports as allocatable for `capacity` (see [`crate::allocatable`]).
    pub fn allocatable(
        &self,
        capacity: &std::collections::BTreeMap<String, String>,
    ) -> std::collections::BTreeMap<String, String> {
        let reserved: Vec<&crate::allocatable::Reserved> = self.reserved.iter().collect();
        crate::allocatable::allocatable(capacity, &reserved, &self.eviction_reserve)
    }

    /// The configuration `flags` ask for ([`Flags::load_from`] has merged the --config file into
    /// them); an invalid value taken from the file is reported against the file and its field.
    pub fn from_flags(flags: Flags) -> Result<Self, ConfigError> {
        let from_file = flags.from_file.clone();
        let file = flags.config.clone();
        Self::resolve(flags).map_err(|e| match e {
            ConfigError::Invalid { flag, message } => {
                match (file, from_file.iter().find(|(f, _)| *f == flag)) {
                    (Some(path), Some((_, field))) => {
                        ConfigError::File(crate::config_file::FileError::Field {
                            path: path.display().to_string(),
                            field: field.to_string(),
                            message,
                        })
                    }
                    _ => ConfigError::Invalid { flag, message },
                }
            }
            other => other,
        })
    }

    fn resolve(flags: Flags) -> Result<Self, ConfigError> {
        // Resolved first: the fields below are moved out of `flags`.
        let dns = dns_settings(&flags)?;
        let eviction = eviction_config(&flags)?;
        let cni_gc = cni_gc_settings(&flags)?;
        let reserved = reservations(&flags)?;
        let node_name = match flags.hostname_override {
            Some(n) => n,
            None => hostname(),
        }
        .to_lowercase();
        if node_name.is_empty() {
            return Err(ConfigError::Invalid {
                flag: "hostname-override",
                message: "empty node name and no host name".into(),
            });
        }
        for (flag, v) in [
            (
                "node-status-update-frequency",
                flags.node_status_update_frequency,
            ),
            ("file-check-frequency", flags.file_check_frequency),
        ] {
            if v == 0 {
                return Err(ConfigError::Invalid {
                    flag,
                    message: "must be at least 1 second".into(),
                });
            }
        }
        let node_ip = flags.node_ip.unwrap_or_else(|| detect_node_ip(&node_name));
        let mut c = KubeletConfig::new(node_name, node_ip);
        c.kubeconfig = flags.kubeconfig;
        c.bootstrap_kubeconfig = flags.bootstrap_kubeconfig;
        c.rotate_certificates = flags.rotate_certificates;
        c.apiserver_lb = match (flags.apiserver_lb_listen, flags.apiserver_lb_backend) {
            (None, b) if b.is_empty() => None,
            (Some(listen), b) if !b.is_empty() => Some((listen, b)),
            (None, _) => {
                return Err(ConfigError::Invalid {
                    flag: "apiserver-lb-listen",
                    message: "required with --apiserver-lb-backend".into(),
                })
            }
            (Some(_), _) => {
                return Err(ConfigError::Invalid {
                    flag: "apiserver-lb-backend",
                    message: "at least one host:port with --apiserver-lb-listen".into(),
                })
            }
        };
        c.pod_manifest_path = flags.pod_manifest_path;
        c.root_dir = flags.root_dir;
        c.pod_log_dir = flags.pod_log_dir;
        c.node_status_update_frequency = Duration::from_secs(flags.node_status_update_frequency);
        c.file_check_frequency = Duration::from_secs(flags.file_check_frequency);
        c.max_pods = flags.max_pods;
        c.eviction = eviction;
        c.dns = dns;
        c.local_path_dir = PathBuf::from(&flags.local_path_dir);
        c.reserved = reserved;
        c.eviction_reserve = crate::allocatable::eviction_reserve(&flags.eviction_hard);
        c.enforce_pods_allocatable = enforce_pods(&flags.enforce_node_allocatable)?;
        c.pod_pids_limit = (flags.pod_max_pids > 0).then_some(flags.pod_max_pids);
        crate::sysctl_admission::Allowlist::new(None, &flags.allowed_unsafe_sysctls).map_err(
            |e| ConfigError::Invalid {
                flag: "allowed-unsafe-sysctls",
                message: e.to_string(),
            },
        )?;
        c.allowed_unsafe_sysctls = flags.allowed_unsafe_sysctls;
        c.pod_cgroups = !flags.container_runtime_endpoint.is_empty();
        if !flags.local_path_dir.is_empty() && !c.local_path_dir.is_absolute() {
            return Err(ConfigError::Invalid {
                flag: "local-path-dir",
                message: format!("{:?} is not an absolute path", flags.local_path_dir),
            });
        }
        if let Some(cpu) = flags.capacity_cpu {
            c.capacity_cpu = cpu;
        }
        if let Some(mem) = flags.capacity_memory {
            c.capacity_memory = mem;
        }
        c.backoff_base = Duration::from_secs(flags.restart_backoff_base.max(1));
        if let Some(cidr) = &flags.pod_cidr {
            crate::cni::parse_cidr(cidr).map_err(|e| ConfigError::Invalid {
                flag: "pod-cidr",
                message: e.to_string(),
            })?;
        }
        if !flags.container_runtime_endpoint.is_empty() {
            c.cri = Some(CriSettings {
                endpoint: flags.container_runtime_endpoint,
                pause_image: flags.pod_infra_container_image,
                pod_cidr: flags.pod_cidr,
                cni_conf_dir: flags.cni_conf_dir,
                sync_period: Duration::from_secs(1),
                cni_gc,
            });
        }
        if flags.port != 0 {
            c.server = Some(ServerSettings {
                address: flags.address,
                port: flags.port,
                tls: flags.tls_cert_file.zip(flags.tls_private_key_file),
                client_ca_file: Some(flags.client_ca_file),
            });
        }
        Ok(c)
    }
}

fn reservations(flags: &Flags) -> Result<Vec<crate::allocatable::Reserved>, ConfigError> {
    let parse = |flag: &'static str, v: &str| {
        crate::allocatable::parse_reserved(flag, v).map_err(|e| ConfigError::Invalid {
            flag,
            message: e.to_string(),
        })
    };
    Ok(vec![
        parse("system-reserved", &flags.system_reserved)?,
        parse("kube-reserved", &flags.kube_reserved)?,
    ])
}

/// `--enforce-node-allocatable`: whether `pods` is enforced. Upstream's `system-reserved` and
/// `kube-reserved` keys limit cgroups the operator names (`--system-reserved-cgroup`), which kiln
/// does not take: refused rather than silently ignored.
fn enforce_pods(keys: &[String]) -> Result<bool, ConfigError> {
    let mut pods = false;
    for k in keys.iter().map(|k| k.trim()).filter(|k| !k.is_empty()) {
        match k {
            "pods" => pods = true,
            "none" if keys.len() == 1 => {}
            other => {
                return Err(ConfigError::Invalid {
                    flag: "enforce-node-allocatable",
                    message: format!(
                        "{other:?}: kiln-kubelet enforces only \"pods\" (or \"none\" alone)"
                    ),
                })
            }
        }
    }
    Ok(pods)
}

/// DNS settings from the flags (and the --config file merged into them), else upstream's defaults
/// (no cluster DNS, no domain, /etc/resolv.conf).
fn dns_settings(flags: &Flags) -> Result<crate::dns_config::DnsSettings, ConfigError> {
    let resolv_conf = flags
        .resolv_conf
        .clone()
        .unwrap_or_else(|| crate::dns_config::DEFAULT_RESOLV_CONF.into());
    let cluster_domain = flags.cluster_domain.clone().unwrap_or_default();
    // Upstream accepts a trailing dot; the search domains are written without it.
    let cluster_domain = cluster_domain.trim_end_matches('.').to_string();
    if cluster_domain.contains(char::is_whitespace) {
        return Err(ConfigError::Invalid {
            flag: "cluster-domain",
            message: format!("{cluster_domain:?} is not a DNS domain"),
        });
    }
    let cluster_dns = match &flags.cluster_dns {
        // An empty value (`--cluster-dns=`) is an explicit "none", overriding the file.
        Some(list) => list
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<IpAddr>().map_err(|_| ConfigError::Invalid {
                    flag: "cluster-dns",
                    message: format!("{s:?} is not an IP address"),
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    Ok(crate::dns_config::DnsSettings {
        cluster_dns,
        cluster_domain,
        resolv_conf: (!resolv_conf.is_empty()).then(|| PathBuf::from(resolv_conf)),
    })
}

fn eviction_config(flags: &Flags) -> Result<crate::eviction::EvictionConfig, ConfigError> {
    use crate::eviction::thresholds::{parse_duration, parse_soft, parse_thresholds};
    let invalid = |flag: &'static str| {
        move |e: crate::eviction::EvictionError| ConfigError::Invalid {
            flag,
            message: e.to_string(),
        }
    };
    let hard = parse_thresholds(&flags.eviction_hard).map_err(invalid("eviction-hard"))?;
    let soft = parse_soft(&flags.eviction_soft, &flags.eviction_soft_grace_period)
        .map_err(invalid("eviction-soft"))?;
    let not_enforced: Vec<&String> = hard.not_enforced.iter().chain(&soft.not_enforced).collect();
    if !not_enforced.is_empty() {
        tracing::warn!(signals = ?not_enforced, "eviction signals not enforced by kiln-kubelet");
    }
    let monitoring_interval = parse_duration(&flags.eviction_monitoring_interval)
        .map_err(invalid("eviction-monitoring-interval"))?;
    if monitoring_interval.is_zero() {
        return Err(ConfigError::Invalid {
            flag: "eviction-monitoring-interval",
            message: "must be more than 0".into(),
        });
    }
    Ok(crate::eviction::EvictionConfig {
        hard: hard.enforced,
        soft: soft.enforced,
        max_pod_grace_period: Duration::from_secs(u64::from(flags.eviction_max_pod_grace_period)),
        pressure_transition_period: parse_duration(&flags.eviction_pressure_transition_period)
            .map_err(invalid("eviction-pressure-transition-period"))?,
        monitoring_interval,
        imagefs_dir: flags.eviction_imagefs_dir.clone(),
    })
}

fn cni_gc_settings(flags: &Flags) -> Result<crate::cni_gc::GcSettings, ConfigError> {
    let duration = |flag: &'static str, v: &str| {
        crate::eviction::thresholds::parse_duration(v)
            .map_err(|e| e.to_string())
            .and_then(|d| {
                if d.is_zero() {
                    Err("must be more than 0".to_string())
                } else {
                    Ok(d)
                }
            })
            .map_err(|message| ConfigError::Invalid { flag, message })
    };
    Ok(crate::cni_gc::GcSettings {
        interval: duration("cni-gc-interval", &flags.cni_gc_interval)?,
        grace: duration("cni-gc-grace", &flags.cni_gc_grace)?,
        ..Default::default()
    })
}

pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

fn default_cpu() -> String {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .to_string()
}

fn default_memory() -> String {
    let kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            })
    });
    format!("{}Ki", kib.unwrap_or(0))
}

/// The first non-loopback address the node name resolves to, else 127.0.0.1. No packets are sent.
fn detect_node_ip(node_name: &str) -> IpAddr {
    use std::net::ToSocketAddrs;
    let resolved = (node_name, 0u16)
        .to_socket_addrs()
        .map(|addrs| addrs.map(|a| a.ip()).collect::<Vec<_>>())
        .unwrap_or_default();
    resolved
        .iter()
        .find(|ip| !ip.is_loopback() && ip.is_ipv4())
        .or_else(|| resolved.iter().find(|ip| !ip.is_loopback()))
        .copied()
        .unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_resolve_into_config() {
        let f = Flags::parse_from([
            "kiln-kubelet",
            "--kubeconfig=/tmp/k.conf",
            "--pod-manifest-path=/tmp/m",
            "--hostname-override=CP1",
            "--node-ip=10.1.0.2",
            "--node-status-update-frequency=5",
            "--max-pods=20",
            "--capacity-cpu=2",
            "--capacity-memory=4Gi",
        ]);
        let c = KubeletConfig::from_flags(f).unwrap();
        assert_eq!(c.node_name, "cp1");
        assert_eq!(c.node_ip.to_string(), "10.1.0.2");
        assert_eq!(c.node_status_update_frequency, Duration::from_secs(5));
        assert_eq!(
            (
                c.max_pods,
                c.capacity_cpu.as_str(),
                c.capacity_memory.as_str()
            ),
            (20, "2", "4Gi")
        );
        assert_eq!(c.pod_log_dir, PathBuf::from("/var/log/pods"));
        assert_eq!(c.backoff_base, Duration::from_secs(10));
        let cri = c.cri.unwrap();
        assert_eq!(cri.endpoint, "unix:///run/containerd/containerd.sock");
        assert_eq!(cri.cni_conf_dir, PathBuf::from("/etc/cni/net.d"));
        assert_eq!(cri.cni_gc, crate::cni_gc::GcSettings::default());
        assert_eq!(
            (cri.cni_gc.interval, cri.cni_gc.grace),
            (Duration::from_secs(60), Duration::from_secs(120))
        );
        assert_eq!(cri.cni_gc.dir, PathBuf::from("/var/lib/cni/networks/kiln"));
        let server = c.server.unwrap();
        assert_eq!(
            (server.address.to_string(), server.port),
            ("0.0.0.0".into(), 10250)
        );
        assert!(server.tls.is_none());
        assert_eq!(
            server.client_ca_file,
            Some(PathBuf::from("/etc/kiln/pki/ca.crt"))
        );
    }

    #[test]
    fn server_flags() {
        let f = Flags::parse_from([
            "kiln-kubelet",
            "--hostname-override=a",
            "--port=10260",
            "--address=127.0.0.1",
            "--tls-cert-file=/k.crt",
            "--tls-private-key-file=/k.key",
        ]);
        let s = KubeletConfig::from_flags(f).unwrap().server.unwrap();
        assert_eq!((s.address.to_string(), s.port), ("127.0.0.1".into(), 10260));
        assert_eq!(s.tls, Some(("/k.crt".into(), "/k.key".into())));
        let off = Flags::parse_from(["kiln-kubelet", "--hostname-override=a", "--port=0"]);
        assert!(KubeletConfig::from_flags(off).unwrap().server.is_none());
    }

    #[test]
    fn local_path_dir_defaults_to_kilns_path_and_empty_turns_it_off() {
        let dir = |args: &[&str]| {
            let mut all = vec!["kiln-kubelet", "--hostname-override=a"];
            all.extend_from_slice(args);
            KubeletConfig::from_flags(Flags::parse_from(all))
                .unwrap()
                .local_path_dir
        };
        assert_eq!(dir(&[]), PathBuf::from("/var/lib/kiln/local-path"));
        assert_eq!(
            dir(&["--local-path-dir=/data/lp"]),
            PathBuf::from("/data/lp")
        );
        assert_eq!(dir(&["--local-path-dir="]), PathBuf::new());
    }

    #[test]
    fn cri_flags() {
        let f = Flags::parse_from([
            "kiln-kubelet",
            "--hostname-override=a",
            "--pod-cidr=10.244.2.0/24",
            "--pod-infra-container-image=10.250.0.1:5000/kiln/pause:1",
        ]);
        let cri = KubeletConfig::from_flags(f).unwrap().cri.unwrap();
        assert_eq!(cri.pod_cidr.as_deref(), Some("10.244.2.0/24"));
        assert_eq!(cri.pause_image, "10.250.0.1:5000/kiln/pause:1");
        let off = Flags::parse_from([
            "kiln-kubelet",
            "--hostname-override=a",
            "--container-runtime-endpoint=",
        ]);
        assert!(KubeletConfig::from_flags(off).unwrap().cri.is_none());
        let bad = Flags::parse_from([
            "kiln-kubelet",
            "--hostname-override=a",
            "--pod-cidr=10.244.2.1/24",
        ]);
        assert!(KubeletConfig::from_flags(bad)
            .unwrap_err()
            .to_string()
            .contains("pod-cidr"));
        let gc = Flags::parse_from([
            "kiln-kubelet",
            "--hostname-override=a",
            "--cni-gc-interval=2s",
            "--cni-gc-grace=10m",
        ]);
        let gc = KubeletConfig::from_flags(gc).unwrap().cri.unwrap().cni_gc;
        assert_eq!(
            (gc.interval, gc.grace),
            (Duration::from_secs(2), Duration::from_secs(600))
        );
        for (flag, value) in [("cni-gc-interval", "0s"), ("cni-gc-grace", "soon")] {
            let arg = format!("--{flag}={value}");
            let f = Flags::parse_from(["kiln-kubelet", "--hostname-override=a", arg.as_str()]);
            let e = KubeletConfig::from_flags(f).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--{flag}: ")), "{e}");
        }
    }

    #[test]
    fn dns_flags_and_defaults() {
        let f = Flags::parse_from([
            "kiln-kubelet",
            "--hostname-override=a",
            "--cluster-dns=10.96.0.10,fd00::a",
            "--cluster-domain=cluster.local.",
            "--resolv-conf=/run/resolv.conf",
        ]);
        let d = KubeletConfig::from_flags(f).unwrap().dns;
        assert_eq!(
            d.cluster_dns,
            vec![
                "10.96.0.10".parse::<IpAddr>().unwrap(),
                "fd00::a".parse().unwrap()
            ]
        );
        assert_eq!(d.cluster_domain, "cluster.local");
        assert_eq!(d.resolv_conf, Some(PathBuf::from("/run/resolv.conf")));
        // Upstream's defaults: no cluster DNS or domain, the host's /etc/resolv.conf.
        let d =
            KubeletConfig::from_flags(Flags::parse_from(["kiln-kubelet", "--hostname-override=a"]))
                .unwrap()
                .dns;
        assert_eq!(d, crate::dns_config::DnsSettings::default());
        assert_eq!(d.resolv_conf, Some(PathBuf::from("/etc/resolv.conf")));
        // An empty --resolv-conf means none.
        let f = Flags::parse_from(["kiln-kubelet", "--hostname-override=a", "--resolv-conf="]);
        assert_eq!(KubeletConfig::from_flags(f).unwrap().dns.resolv_conf, None);
        let f = Flags::parse_from([
            "kiln-kubelet",
            "--hostname-override=a",
            "--cluster-dns=10.96.0.x",
        ]);
        let e = KubeletConfig::from_flags(f).unwrap_err().to_string();
        assert_eq!(e, "--cluster-dns: \"10.96.0.x\" is not an IP address");
    }

    #[test]
    fn config_file_sets_dns_and_flags_win_over_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kubelet.yaml");
        std::fs::write(
            &file,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             clusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\nresolvConf: /etc/lab-resolv.conf\n",
        )
        .unwrap();
        let arg = format!("--config={}", file.display());
        let from_file =
            Flags::load_from(["kiln-kubelet", "--hostname-override=a", arg.as_str()]).unwrap();
        let d = KubeletConfig::from_flags(from_file).unwrap().dns;
        assert_eq!(d.cluster_dns, vec!["10.96.0.10".parse::<IpAddr>().unwrap()]);
        assert_eq!(d.cluster_domain, "cluster.local");
        assert_eq!(d.resolv_conf, Some(PathBuf::from("/etc/lab-resolv.conf")));
        let both = Flags::load_from([
            "kiln-kubelet",
            "--hostname-override=a",
            arg.as_str(),
            "--cluster-dns=10.96.0.53",
            "--cluster-domain=kiln.test",
            "--resolv-conf=",
        ])
        .unwrap();
        let d = KubeletConfig::from_flags(both).unwrap().dns;
        assert_eq!(d.cluster_dns, vec!["10.96.0.53".parse::<IpAddr>().unwrap()]);
        assert_eq!(d.cluster_domain, "kiln.test");
        assert_eq!(d.resolv_conf, None);
        // A bad file: the error names the file and the field.
        std::fs::write(
            &file,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS: [nope]\n",
        )
        .unwrap();
        let e = Flags::load_from(["kiln-kubelet", "--hostname-override=a", arg.as_str()])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "--config {}: clusterDNS[0]: \"nope\" is not an IP address",
                file.display()
            )
        );
    }

    #[test]
    fn config_file_settings_apply_where_no_flag_is_given() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kubelet.yaml");
        std::fs::write(
            &file,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             allowedUnsafeSysctls: [\"kernel.msg*\", net.core.somaxconn]\n\
             systemReserved: {cpu: 100m, memory: 256Mi}\nkubeReserved: {memory: 128Mi}\n\
             podPidsLimit: 4096\nmaxPods: 30\nstaticPodPath: /etc/kiln/manifests-file\n\
             evictionHard: {memory.available: 100Mi}\nnodeStatusUpdateFrequency: 20s\n\
             authentication: {x509: {clientCAFile: /etc/kiln/pki/file-ca.crt}}\n",
        )
        .unwrap();
        let arg = format!("--config={}", file.display());
        let load = |extra: &[&str]| {
            let mut args = vec!["kiln-kubelet", "--hostname-override=a", arg.as_str()];
            args.extend_from_slice(extra);
            KubeletConfig::from_flags(Flags::load_from(args).unwrap())
        };
        let c = load(&[]).unwrap();
        assert_eq!(
            c.allowed_unsafe_sysctls,
            ["kernel.msg*", "net.core.somaxconn"]
        );
        assert_eq!(c.pod_pids_limit, Some(4096));
        assert_eq!(c.max_pods, 30);
        assert_eq!(
            c.pod_manifest_path,
            PathBuf::from("/etc/kiln/manifests-file")
        );
        assert_eq!(c.node_status_update_frequency, Duration::from_secs(20));
        assert_eq!(
            c.server.as_ref().unwrap().client_ca_file,
            Some(PathBuf::from("/etc/kiln/pki/file-ca.crt"))
        );
        let capacity: std::collections::BTreeMap<String, String> =
            [("cpu", "2"), ("memory", "4Gi"), ("pods", "110")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into();
        let alloc = c.allocatable(&capacity);
        assert_eq!(
            (alloc["cpu"].as_str(), alloc["memory"].as_str()),
            ("1900m", "3612Mi")
        );
        // A flag on the command line wins, even where it says what the default says.
        let c = load(&[
            "--allowed-unsafe-sysctls=net.ipv4.tcp_syncookies",
            "--max-pods=110",
            "--pod-max-pids=-1",
        ])
        .unwrap();
        assert_eq!(c.allowed_unsafe_sysctls, ["net.ipv4.tcp_syncookies"]);
        assert_eq!((c.max_pods, c.pod_pids_limit), (110, None));
        assert_eq!(
            c.pod_manifest_path,
            PathBuf::from("/etc/kiln/manifests-file")
        );
        // A value the kubelet refuses is reported against the file and its field.
        std::fs::write(
            &file,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nallowedUnsafeSysctls: [vm.swappiness]\n",
        )
        .unwrap();
        let e = load(&[]).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "--config {}: allowedUnsafeSysctls: ",
                file.display()
            )),
            "{e}"
        );
        // ... while the same value given as a flag names the flag.
        let e = KubeletConfig::from_flags(Flags::parse_from([
            "kiln-kubelet",
            "--hostname-override=a",
            "--allowed-unsafe-sysctls=vm.swappiness",
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("--allowed-unsafe-sysctls: "), "{e}");
    }

    #[test]
    fn zero_frequency_is_rejected() {
        let f = Flags::parse_from([
            "kiln-kubelet",
            "--hostname-override=a",
            "--node-status-update-frequency=0",
        ]);
        assert!(KubeletConfig::from_flags(f)
            .unwrap_err()
            .to_string()
            .contains("node-status-update-frequency"));
    }
}
