//! Command-line flags, named like kube-controller-manager's so kubeadm-style manifests carry over.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use kiln_common::duration::parse_duration;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "kiln-controller-manager",
    version = kiln_common::version::LONG,
    about = "kiln's controllers: deployment, replicaset, daemonset, endpoint, endpointslice, endpointslicemirroring, garbage collector, node lifecycle, node IPAM, namespace, service account, root CA publisher, CSR approving and signing, token cleaner"
)]
pub struct Options {
    /// Kubeconfig with the API server's address and this component's credentials; without it the
    /// in-cluster service-account configuration is used.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// Controllers to run: `*` = every controller on by default, `name` enables, `-name` disables
    /// (e.g. `*,-nodeipam`).
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,

    /// Pod network; each node gets a subnet of --node-cidr-mask-size from it.
    #[arg(long, default_value = "10.244.0.0/16")]
    pub cluster_cidr: String,
    /// Allocate spec.podCIDR for nodes (the nodeipam controller; kubeadm sets it with a pod subnet).
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub allocate_node_cidrs: bool,
    #[arg(long, default_value_t = 24)]
    pub node_cidr_mask_size: u8,

    /// A node whose Lease and Ready heartbeat stay unchanged this long becomes Ready=Unknown.
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    pub node_monitor_grace_period: Duration,
    /// How often node health is checked.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub node_monitor_period: Duration,
    /// How long pods stay on an unreachable / not-ready node when they carry no toleration for it
    /// (upstream's DefaultTolerationSeconds admission adds 300 s to every pod).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub pod_eviction_timeout: Duration,

    /// Terminated pods (Succeeded or Failed) kept before podgc deletes the oldest; 0 disables that
    /// part of podgc.
    #[arg(long, default_value_t = 12500)]
    pub terminated_pod_gc_threshold: usize,

    /// The CA (PEM certificate and key) the csrsigning controller signs approved CSRs with; without
    /// both, csrsigning stays idle.
    #[arg(long)]
    pub cluster_signing_cert_file: Option<PathBuf>,
    #[arg(long)]
    pub cluster_signing_key_file: Option<PathBuf>,
    /// Longest validity of a signed certificate (a CSR's spec.expirationSeconds may ask for less).
    #[arg(long, default_value = "8760h", value_parser = parse_duration)]
    pub cluster_signing_duration: Duration,
    /// The CA bundle published as `kube-root-ca.crt` in every namespace; without it, the CA of
    /// this process's own kubeconfig (or in-cluster config).
    #[arg(long)]
    pub root_ca_file: Option<PathBuf>,
    #[arg(long)]
    pub service_account_private_key_file: Option<PathBuf>,
    #[arg(long)]
    pub use_service_account_credentials: Option<bool>,
    #[arg(long)]
    pub authentication_kubeconfig: Option<PathBuf>,
    #[arg(long)]
    pub authorization_kubeconfig: Option<PathBuf>,
    #[arg(long)]
    pub requestheader_client_ca_file: Option<PathBuf>,
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,

    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: Duration,
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
    #[arg(long, default_value = "kube-controller-manager")]
    pub leader_elect_resource_name: String,

    /// Port for /healthz and /metrics (plain HTTP for now); 0 picks a free one.
    #[arg(long, default_value_t = 10257)]
    pub secure_port: u16,
    /// Address for /healthz and /metrics; loopback by default while the endpoint is plain HTTP.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_address: IpAddr,
}

/// Upstream's --controllers semantics over a list of (name, on by default).
pub fn controller_enabled(flags: &[String], name: &str, default_on: bool) -> bool {
    if flags.iter().any(|f| f == &format!("-{name}")) {
        return false;
    }
    if flags.iter().any(|f| f == name) {
        return true;
    }
    default_on && flags.iter().any(|f| f == "*")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_controller_manager_style_flags_parse() {
        let o = Options::parse_from([
            "kiln-controller-manager",
            "--kubeconfig=/etc/kiln/controller-manager.conf",
            "--allocate-node-cidrs=true",
            "--cluster-cidr=10.244.0.0/16",
            "--node-monitor-grace-period=2s",
            "--controllers=*,-nodeipam",
            "--use-service-account-credentials=true",
        ]);
        assert!(o.allocate_node_cidrs);
        assert_eq!(o.node_monitor_grace_period, Duration::from_secs(2));
        assert_eq!(o.secure_port, 10257);
        assert!(!controller_enabled(&o.controllers, "nodeipam", true));
        assert!(controller_enabled(&o.controllers, "replicaset", true));
        assert!(!controller_enabled(&o.controllers, "csrsigning", false));
        assert!(controller_enabled(
            &["csrsigning".into()],
            "csrsigning",
            false
        ));
    }
}
