//! Command-line flags (kube-proxy's names where one exists) and the checked configuration built from them.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::model::{Ipv4Cidr, ModelError};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--cluster-cidr: {0}")]
    ClusterCidr(ModelError),
    #[error("{flag}: invalid duration {value:?} (use e.g. 30s, 100ms, 1m)")]
    Duration { flag: &'static str, value: String },
    #[error("--kubeconfig is required (except with --cleanup)")]
    NoKubeconfig,
    #[error("cannot determine the hostname; pass --hostname-override")]
    NoHostname,
}

/// Which API carries the endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EndpointsApi {
    /// discovery.k8s.io/v1 EndpointSlices (what kube-proxy watches).
    Endpointslices,
    /// core/v1 Endpoints.
    Endpoints,
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "kiln-proxy",
    version = kiln_common::version::LONG,
    about = "kiln's Service proxy: nftables table `kiln` and host-gw routes"
)]
pub struct Flags {
    /// Kubeconfig with the proxy's credentials.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// This node's name (default: the hostname).
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// Pod network of the cluster; ClusterIP traffic from outside it is masqueraded.
    #[arg(long, default_value = "10.244.0.0/16")]
    pub cluster_cidr: String,
    /// This node's IP (default: its Node's InternalIP). Only used to tell this node apart for routes.
    #[arg(long)]
    pub node_ip: Option<Ipv4Addr>,
    /// Address of /healthz, /livez, /readyz (and /metrics).
    #[arg(long, default_value = "0.0.0.0:10256")]
    pub healthz_bind_address: SocketAddr,
    /// Address of /metrics (and the health endpoints).
    #[arg(long, default_value = "127.0.0.1:10249")]
    pub metrics_bind_address: SocketAddr,
    /// Full resync interval (also re-creates a table someone deleted).
    #[arg(long, default_value = "30s")]
    pub sync_period: String,
    /// Minimum interval between syncs: a change after a quiet period syncs at once, a burst of changes
    /// shares one more sync per interval.
    #[arg(long, default_value = "100ms")]
    pub min_sync_period: String,
    /// API the endpoints come from.
    #[arg(long, value_enum, default_value = "endpointslices")]
    pub endpoints_api: EndpointsApi,
    /// Delete the `kiln` nftables table and kiln's routes, then exit.
    #[arg(long)]
    pub cleanup: bool,
}

#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub kubeconfig: PathBuf,
    pub node_name: String,
    pub cluster_cidr: Ipv4Cidr,
    pub node_ip: Option<Ipv4Addr>,
    pub healthz_bind_address: SocketAddr,
    pub metrics_bind_address: SocketAddr,
    pub sync_period: Duration,
    pub min_sync_period: Duration,
    pub endpoints_api: EndpointsApi,
    /// Root of the sysctl tree (tests point it elsewhere).
    pub proc_sys: PathBuf,
}

/// `30s`, `100ms`, `2m`, or plain seconds.
pub fn parse_duration(flag: &'static str, value: &str) -> Result<Duration, ConfigError> {
    let err = || ConfigError::Duration {
        flag,
        value: value.to_string(),
    };
    let v = value.trim();
    let (num, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let n: u64 = num.parse().map_err(|_| err())?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => return Err(err()),
    };
    Ok(d)
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_lowercase())
        .filter(|h| !h.is_empty())
}

impl ProxyConfig {
    pub fn from_flags(f: &Flags) -> Result<Self, ConfigError> {
        let node_name = match &f.hostname_override {
            Some(h) => h.trim().to_lowercase(),
            None => hostname().ok_or(ConfigError::NoHostname)?,
        };
        Ok(ProxyConfig {
            kubeconfig: f.kubeconfig.clone().ok_or(ConfigError::NoKubeconfig)?,
            node_name,
            cluster_cidr: f.cluster_cidr.parse().map_err(ConfigError::ClusterCidr)?,
            node_ip: f.node_ip,
            healthz_bind_address: f.healthz_bind_address,
            metrics_bind_address: f.metrics_bind_address,
            sync_period: parse_duration("--sync-period", &f.sync_period)?,
            min_sync_period: parse_duration("--min-sync-period", &f.min_sync_period)?,
            endpoints_api: f.endpoints_api,
            proc_sys: PathBuf::from("/proc/sys"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("x", "30s").unwrap(), Duration::from_secs(30));
        assert_eq!(
            parse_duration("x", "100ms").unwrap(),
            Duration::from_millis(100)
        );
        assert_eq!(parse_duration("x", "2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("x", "5").unwrap(), Duration::from_secs(5));
        assert!(parse_duration("x", "5h").is_err());
        assert!(parse_duration("x", "s").is_err());
    }

    #[test]
    fn flags_to_config() {
        let f = Flags::parse_from([
            "kiln-proxy",
            "--kubeconfig",
            "/etc/kiln/proxy.conf",
            "--hostname-override",
            "Host1",
            "--node-ip",
            "10.250.0.11",
        ]);
        let c = ProxyConfig::from_flags(&f).unwrap();
        assert_eq!(c.node_name, "host1");
        assert_eq!(c.cluster_cidr.to_string(), "10.244.0.0/16");
        assert_eq!(c.healthz_bind_address.port(), 10256);
        assert_eq!(c.sync_period, Duration::from_secs(30));
        assert_eq!(c.endpoints_api, EndpointsApi::Endpointslices);
        let no_kc = Flags::parse_from(["kiln-proxy", "--hostname-override", "h"]);
        assert!(matches!(
            ProxyConfig::from_flags(&no_kc),
            Err(ConfigError::NoKubeconfig)
        ));
        let bad = Flags::parse_from([
            "kiln-proxy",
            "--kubeconfig",
            "k",
            "--hostname-override",
            "h",
            "--cluster-cidr",
            "x",
        ]);
        assert!(ProxyConfig::from_flags(&bad).is_err());
    }
}
