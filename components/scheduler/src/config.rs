//! Command-line flags, named like kube-scheduler's so kubeadm-style manifests carry over.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use kiln_common::duration::parse_duration;

/// Pods with these `spec.schedulerName` values are this scheduler's (the upstream default name, so
/// ordinary pods are scheduled, and kiln's own).
pub const SCHEDULER_NAMES: &[&str] = &["default-scheduler", "kiln-scheduler"];

/// The component name in events' `source.component` and `reportingComponent`, as upstream writes it
/// (kubectl describe shows it in the From column).
pub const COMPONENT: &str = "default-scheduler";

#[derive(Debug, Clone, Parser)]
#[command(name = "kiln-scheduler", version = kiln_common::version::LONG, about = "kiln's pod scheduler")]
pub struct Options {
    /// Kubeconfig with the API server's address and this component's credentials; without it the
    /// in-cluster service-account configuration is used.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// Run leader election (so several control planes can run the scheduler; one acts).
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
    #[arg(long, default_value = "kube-scheduler")]
    pub leader_elect_resource_name: String,

    /// Port for /healthz and /metrics (plain HTTP for now); 0 picks a free one.
    #[arg(long, default_value_t = 10259)]
    pub secure_port: u16,
    /// Address for /healthz and /metrics. Loopback by default while the endpoint is plain HTTP.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_address: IpAddr,

    /// How long a pod's volume bindings may take before the attempt is undone and retried
    /// (upstream's VolumeBinding `bindTimeoutSeconds`, 600 by default).
    #[arg(long, default_value_t = 600)]
    pub bind_timeout_seconds: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_scheduler_style_flags_parse() {
        let o = Options::parse_from([
            "kiln-scheduler",
            "--kubeconfig=/etc/kiln/scheduler.conf",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
        ]);
        assert!(!o.leader_elect);
        assert_eq!(o.secure_port, 10259);
        assert_eq!(o.leader_elect_lease_duration, Duration::from_secs(15));
        assert_eq!(o.bind_timeout_seconds, 600);
        let o = Options::parse_from([
            "kiln-scheduler",
            "--leader-elect",
            "--leader-elect-retry-period=500ms",
        ]);
        assert!(o.leader_elect);
        assert_eq!(o.leader_elect_retry_period, Duration::from_millis(500));
    }
}
