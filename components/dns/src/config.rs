//! Command-line flags (CoreDNS/kube-dns meanings where one exists) and the checked configuration built
//! from them.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use hickory_proto::rr::Name;

use crate::resolv::{self, ResolvError};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--kubeconfig is required")]
    NoKubeconfig,
    #[error("--listen {value:?}: not an IP address or IP:port")]
    Listen { value: String },
    #[error("--cluster-domain {value:?}: {reason}")]
    ClusterDomain { value: String, reason: String },
    #[error("--ttl {value:?}: not a number of seconds (e.g. 5 or 5s) up to 3600")]
    Ttl { value: String },
    #[error(transparent)]
    Upstream(#[from] ResolvError),
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "kiln-dns",
    version = kiln_common::version::LONG,
    about = "kiln's cluster DNS: Kubernetes DNS-Based Service Discovery for the cluster zone, forwarding for the rest"
)]
pub struct Flags {
    /// Kubeconfig with credentials to list and watch Services and EndpointSlices.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Address to serve DNS on, over UDP and TCP (IP or IP:port; the port defaults to 53).
    #[arg(long, default_value = "0.0.0.0:53")]
    pub listen: String,
    /// The cluster's DNS zone.
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// TTL of the cluster zone's records, in seconds.
    #[arg(long, default_value = "5")]
    pub ttl: String,
    /// Upstream resolver for names outside the cluster zone (IP or IP:port; repeatable). Default: the
    /// nameservers of --resolv-conf.
    #[arg(long)]
    pub upstream: Vec<String>,
    /// resolv.conf whose nameservers are the upstreams when no --upstream is given.
    #[arg(long, default_value = "/etc/resolv.conf")]
    pub resolv_conf: PathBuf,
    /// Entries in the cache of forwarded answers (0 disables it).
    #[arg(long, default_value_t = 10_000)]
    pub cache_size: usize,
    /// Address of /health, /ready, /healthz, /livez, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:9153")]
    pub health_bind_address: SocketAddr,
}

#[derive(Debug, Clone)]
pub struct DnsConfig {
    pub kubeconfig: PathBuf,
    pub listen: SocketAddr,
    /// Lowercase, fully qualified (`cluster.local.`).
    pub cluster_domain: Name,
    pub ttl: u32,
    /// Where names outside the zone go, in order of preference; never our own listen address.
    pub upstreams: Vec<SocketAddr>,
    pub cache_size: usize,
    pub health_bind_address: SocketAddr,
    /// How long one upstream attempt waits for an answer (not a flag: clients give up after ~5 s, so
    /// two 2 s attempts fit).
    pub forward_timeout: Duration,
}

/// `IP:port`, `[v6]:port` or a bare IP (port 53).
pub fn parse_listen(value: &str) -> Result<SocketAddr, ConfigError> {
    resolv::parse_upstream(value).map_err(|_| ConfigError::Listen {
        value: value.to_string(),
    })
}

/// A relative domain (`cluster.local`, trailing dot optional) as a lowercase FQDN.
pub fn parse_cluster_domain(value: &str) -> Result<Name, ConfigError> {
    let err = |reason: &str| ConfigError::ClusterDomain {
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let trimmed = value.trim().trim_end_matches('.');
    if trimmed.is_empty() {
        return Err(err("must not be empty"));
    }
    let valid_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if !trimmed.split('.').all(valid_label) {
        return Err(err("labels must be letters, digits and inner dashes"));
    }
    Name::from_ascii(format!("{}.", trimmed.to_ascii_lowercase())).map_err(|e| err(&e.to_string()))
}

/// `5`, `5s` or `1m`, at most an hour (a longer TTL would keep clients on deleted Services).
pub fn parse_ttl(value: &str) -> Result<u32, ConfigError> {
    let err = || ConfigError::Ttl {
        value: value.to_string(),
    };
    let v = value.trim();
    let (num, mult) = match v.strip_suffix('m') {
        Some(n) => (n, 60),
        None => (v.strip_suffix('s').unwrap_or(v), 1),
    };
    let secs = num.parse::<u32>().map_err(|_| err())?.saturating_mul(mult);
    if secs > 3600 {
        return Err(err());
    }
    Ok(secs)
}

/// Drops the upstreams that are our own listen address (forwarding there would loop). Returns the kept
/// ones and the skipped ones.
pub fn without_self(
    upstreams: Vec<SocketAddr>,
    listen: SocketAddr,
) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
    upstreams.into_iter().partition(|u| {
        let same_port = u.port() == listen.port();
        let ours =
            u.ip() == listen.ip() || (listen.ip().is_unspecified() && u.ip().is_unspecified());
        !(same_port && ours)
    })
}

impl DnsConfig {
    /// Checks the flags; reads --resolv-conf only when no --upstream is given.
    pub fn from_flags(f: &Flags) -> Result<Self, ConfigError> {
        let listen = parse_listen(&f.listen)?;
        let upstreams = if f.upstream.is_empty() {
            resolv::read_nameservers(&f.resolv_conf)?
        } else {
            f.upstream
                .iter()
                .map(|u| resolv::parse_upstream(u))
                .collect::<Result<Vec<_>, _>>()?
        };
        let (upstreams, skipped) = without_self(upstreams, listen);
        for s in skipped {
            tracing::warn!(upstream = %s, "skipping upstream: it is our own --listen address");
        }
        Ok(DnsConfig {
            kubeconfig: f.kubeconfig.clone().ok_or(ConfigError::NoKubeconfig)?,
            listen,
            cluster_domain: parse_cluster_domain(&f.cluster_domain)?,
            ttl: parse_ttl(&f.ttl)?,
            upstreams,
            cache_size: f.cache_size,
            health_bind_address: f.health_bind_address,
            forward_timeout: Duration::from_secs(2),
        })
    }

    /// The address to hand out for `ns.dns.<zone>`: the listen IP, unless it is a wildcard.
    pub fn ns_addresses(&self) -> Vec<IpAddr> {
        let ip = self.listen.ip();
        if ip.is_unspecified() {
            Vec::new()
        } else {
            vec![ip]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<DnsConfig, ConfigError> {
        let mut all = vec!["kiln-dns"];
        all.extend_from_slice(args);
        DnsConfig::from_flags(&Flags::parse_from(all))
    }

    #[test]
    fn defaults_and_flags() {
        let c = parse(&[
            "--kubeconfig",
            "/etc/kiln/dns.conf",
            "--upstream",
            "192.0.2.1",
        ])
        .unwrap();
        assert_eq!(c.listen, "0.0.0.0:53".parse().unwrap());
        assert_eq!(c.cluster_domain.to_ascii(), "cluster.local.");
        assert_eq!(c.ttl, 5);
        assert_eq!(c.cache_size, 10_000);
        assert_eq!(c.health_bind_address.port(), 9153);
        assert_eq!(c.upstreams, ["192.0.2.1:53".parse().unwrap()]);
        assert!(c.ns_addresses().is_empty());

        let c = parse(&[
            "--kubeconfig=k",
            "--listen=10.250.0.11",
            "--cluster-domain=Kiln.Test.",
            "--ttl=30s",
            "--upstream=192.0.2.1:5353",
            "--upstream=[2001:db8::1]",
            "--cache-size=0",
        ])
        .unwrap();
        assert_eq!(c.listen, "10.250.0.11:53".parse().unwrap());
        assert_eq!(c.cluster_domain.to_ascii(), "kiln.test.");
        assert_eq!(c.ttl, 30);
        assert_eq!(c.upstreams.len(), 2);
        assert_eq!(c.ns_addresses(), ["10.250.0.11".parse::<IpAddr>().unwrap()]);
    }

    #[test]
    fn upstreams_default_to_resolv_conf() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolv.conf");
        std::fs::write(&path, "nameserver 192.0.2.53\nnameserver 10.250.0.11\n").unwrap();
        let c = parse(&[
            "--kubeconfig=k",
            "--listen=10.250.0.11:53",
            &format!("--resolv-conf={}", path.display()),
        ])
        .unwrap();
        // the second nameserver is our own listen address: never forward there
        assert_eq!(c.upstreams, ["192.0.2.53:53".parse().unwrap()]);
    }

    #[test]
    fn errors_name_the_flag() {
        let msg = |args: &[&str]| parse(args).unwrap_err().to_string();
        assert_eq!(msg(&["--upstream=192.0.2.1"]), "--kubeconfig is required");
        assert!(
            msg(&["--kubeconfig=k", "--upstream=x", "--listen=1.2.3.4"]).starts_with("--upstream")
        );
        assert!(
            msg(&["--kubeconfig=k", "--upstream=192.0.2.1", "--listen=nope"])
                .starts_with("--listen")
        );
        for bad in ["", ".", "a..b", "-a.b", "a_b.local"] {
            let m = msg(&[
                "--kubeconfig=k",
                "--upstream=192.0.2.1",
                &format!("--cluster-domain={bad}"),
            ]);
            assert!(m.starts_with("--cluster-domain"), "{bad}: {m}");
        }
        for bad in ["x", "-1", "2h", "3601"] {
            let m = msg(&[
                "--kubeconfig=k",
                "--upstream=192.0.2.1",
                &format!("--ttl={bad}"),
            ]);
            assert!(m.starts_with("--ttl"), "{bad}: {m}");
        }
        assert_eq!(parse_ttl("1m").unwrap(), 60);
        assert_eq!(parse_ttl("0").unwrap(), 0);
        let m = msg(&["--kubeconfig=k", "--resolv-conf=/nonexistent/resolv.conf"]);
        assert!(
            m.starts_with("--resolv-conf /nonexistent/resolv.conf"),
            "{m}"
        );
    }

    #[test]
    fn own_address_is_never_an_upstream() {
        let l: SocketAddr = "0.0.0.0:53".parse().unwrap();
        let (kept, skipped) = without_self(
            vec![
                "0.0.0.0:53".parse().unwrap(),
                "127.0.0.1:53".parse().unwrap(),
                "0.0.0.0:5353".parse().unwrap(),
            ],
            l,
        );
        assert_eq!(skipped, ["0.0.0.0:53".parse().unwrap()]);
        assert_eq!(kept.len(), 2, "loopback resolvers are kept");
    }
}
