//! Command-line flags, named and defaulted like etcd's so kubeadm-style manifests carry over.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::http::Uri;
use clap::{ArgAction, Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClusterState {
    New,
    Existing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompactionMode {
    Periodic,
    Revision,
}

/// kiln-store: an etcd-v3-compatible, Raft-replicated key-value store.
#[derive(Debug, Clone, Parser)]
#[command(name = "kiln-store", version = kiln_common::version::LONG)]
pub struct Config {
    /// Human-readable name for this member.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Path to the data directory.
    #[arg(long, default_value = "/var/lib/kiln/store")]
    pub data_dir: PathBuf,
    /// URLs to listen on for client traffic (https:// = TLS).
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:2379")]
    pub listen_client_urls: Vec<String>,
    /// Client URLs of this member as advertised to clients (a port 0 is replaced by the port
    /// actually bound, for tests).
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:2379")]
    pub advertise_client_urls: Vec<String>,
    /// URLs to listen on for peer traffic.
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:2380")]
    pub listen_peer_urls: Vec<String>,
    /// Peer URLs of this member as advertised to the other members.
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:2380")]
    pub initial_advertise_peer_urls: Vec<String>,
    /// Initial cluster configuration, `name=peerURL,...`; defaults to this member alone.
    #[arg(long)]
    pub initial_cluster: Option<String>,
    /// `new` when forming a cluster, `existing` when joining one.
    #[arg(long, value_enum, default_value = "new")]
    pub initial_cluster_state: ClusterState,
    /// Token that makes cluster and member IDs unique per cluster.
    #[arg(long, default_value = "etcd-cluster")]
    pub initial_cluster_token: String,
    /// Server certificate for client TLS.
    #[arg(long)]
    pub cert_file: Option<PathBuf>,
    /// Server key for client TLS.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// Require client certificates signed by --trusted-ca-file.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub client_cert_auth: bool,
    /// CA bundle for client certificates.
    #[arg(long)]
    pub trusted_ca_file: Option<PathBuf>,
    /// Peer TLS certificate (server and client certificate of the peer transport).
    #[arg(long)]
    pub peer_cert_file: Option<PathBuf>,
    /// Peer TLS key.
    #[arg(long)]
    pub peer_key_file: Option<PathBuf>,
    /// Peer CA bundle.
    #[arg(long)]
    pub peer_trusted_ca_file: Option<PathBuf>,
    /// Require peer client certificates.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub peer_client_cert_auth: bool,
    /// Plain-HTTP URLs serving /health and /metrics (kubeadm probes http://127.0.0.1:2381/health).
    #[arg(long, value_delimiter = ',')]
    pub listen_metrics_urls: Vec<String>,
    /// Largest client request etcd would accept; watch responses of watchers created with
    /// `fragment` are split to stay under it.
    #[arg(long, default_value_t = 1_572_864)]
    pub max_request_bytes: usize,
    /// Backend size quota in bytes (0 = etcd's default of 2 GiB); reported by Status.
    #[arg(long, default_value_t = 0)]
    pub quota_backend_bytes: i64,
    /// Auto compaction retention: hours (or a duration like `5m`) in periodic mode, a
    /// revision count in revision mode; 0 disables.
    #[arg(long, default_value = "0")]
    pub auto_compaction_retention: String,
    /// Auto compaction mode.
    #[arg(long, value_enum, default_value = "periodic")]
    pub auto_compaction_mode: CompactionMode,
    /// Applied entries between Raft snapshots.
    #[arg(long, default_value_t = 10_000)]
    pub snapshot_count: u64,
    /// Raft heartbeat interval in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub heartbeat_interval: u64,
    /// Raft election timeout in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub election_timeout: u64,
    /// Keep the Raft thread and an async worker awake while writes come less than 1 ms
    /// apart, instead of letting them sleep between writes (`member::keep_awake`). Turn it off where
    /// CPU time is metered, such as under a cgroup CPU quota: the time spent awake counts.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true", action = ArgAction::Set)]
    pub keep_awake: bool,
    /// Auth token type, as etcd's flag: `simple` (random tokens kept by the members) or
    /// `jwt,pub-key=PATH,priv-key=PATH,sign-method=RS256|PS256|ES256|HS256|EdDSA|…,ttl=5m`
    /// (signed tokens any member with the public key verifies; ES512 is not supported).
    #[arg(long, default_value = "simple")]
    pub auth_token: String,
    /// Seconds a simple token stays valid after its last use (JWT tokens take `ttl=`).
    #[arg(long, default_value_t = 300)]
    pub auth_token_ttl: u64,
    /// bcrypt cost of user passwords (etcd's default 10).
    #[arg(long, default_value_t = crate::auth::DEFAULT_BCRYPT_COST)]
    pub bcrypt_cost: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("--initial-cluster entry {0:?} is not name=URL")]
    ClusterEntry(String),
    #[error("--initial-cluster has no entry for --name {0:?}")]
    NotInCluster(String),
    #[error("--initial-cluster URLs for {name} ({cluster}) differ from --initial-advertise-peer-urls ({advertised})")]
    PeerUrlMismatch {
        name: String,
        cluster: String,
        advertised: String,
    },
    #[error("{0}")]
    Tls(String),
    #[error("--auto-compaction-retention {0:?} is not a number or duration")]
    Retention(String),
    #[error("--auth-token {0:?}: {1}")]
    AuthToken(String, crate::auth::provider::TokenOptsError),
    #[error("--bcrypt-cost {0}: must be between 4 and 31")]
    BcryptCost(u32),
}

/// A listen URL split into what binding needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenUrl {
    pub url: String,
    pub tls: bool,
    pub host: String,
    pub port: u16,
}

impl ListenUrl {
    pub fn parse(url: &str) -> Result<Self, ConfigError> {
        let bad = |reason: &str| ConfigError::Url {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let uri: Uri = url.parse().map_err(|_| bad("not a URL"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad("scheme must be http or https")),
        };
        let host = uri.host().ok_or_else(|| bad("no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().ok_or_else(|| bad("no port"))?;
        Ok(Self {
            url: url.to_string(),
            tls,
            host,
            port,
        })
    }

    /// Resolves the host (an IP, or a name such as localhost) to a socket address.
    pub async fn socket_addr(&self) -> Result<SocketAddr, ConfigError> {
        let mut addrs = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| ConfigError::Url {
                url: self.url.clone(),
                reason: e.to_string(),
            })?;
        addrs.next().ok_or_else(|| ConfigError::Url {
            url: self.url.clone(),
            reason: "host resolves to no address".into(),
        })
    }
}

impl Config {
    /// A configuration for tests and embedding: one member, data in `data_dir`, plain HTTP on
    /// an ephemeral loopback port, no metrics listener.
    pub fn for_test(data_dir: impl Into<PathBuf>) -> Self {
        let mut config = Config::parse_from(["kiln-store"]);
        config.data_dir = data_dir.into();
        config.listen_client_urls = vec!["http://127.0.0.1:0".into()];
        config.advertise_client_urls = vec!["http://127.0.0.1:0".into()];
        config.listen_peer_urls = vec!["http://127.0.0.1:0".into()];
        config.initial_advertise_peer_urls = vec!["http://127.0.0.1:2380".into()];
        config
    }

    pub fn peer_listen_urls(&self) -> Result<Vec<ListenUrl>, ConfigError> {
        self.listen_peer_urls
            .iter()
            .map(|u| ListenUrl::parse(u))
            .collect()
    }

    pub fn client_listen_urls(&self) -> Result<Vec<ListenUrl>, ConfigError> {
        self.listen_client_urls
            .iter()
            .map(|u| ListenUrl::parse(u))
            .collect()
    }

    pub fn metrics_listen_urls(&self) -> Result<Vec<ListenUrl>, ConfigError> {
        let urls: Vec<ListenUrl> = self
            .listen_metrics_urls
            .iter()
            .map(|u| ListenUrl::parse(u))
            .collect::<Result<_, _>>()?;
        if let Some(u) = urls.iter().find(|u| u.tls) {
            return Err(ConfigError::Url {
                url: u.url.clone(),
                reason: "metrics are served over plain http".into(),
            });
        }
        Ok(urls)
    }

    /// The initial cluster as (name, peer URLs) in flag order.
    pub fn initial_members(&self) -> Result<Vec<(String, Vec<String>)>, ConfigError> {
        let text = match &self.initial_cluster {
            Some(t) if !t.trim().is_empty() => t.clone(),
            _ => format!(
                "{}={}",
                self.name,
                self.initial_advertise_peer_urls
                    .join(&format!(",{}=", self.name))
            ),
        };
        let mut members: Vec<(String, Vec<String>)> = Vec::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, url) = entry
                .split_once('=')
                .ok_or_else(|| ConfigError::ClusterEntry(entry.to_string()))?;
            ListenUrl::parse(url)?;
            match members.iter_mut().find(|(n, _)| n == name) {
                Some((_, urls)) => urls.push(url.to_string()),
                None => members.push((name.to_string(), vec![url.to_string()])),
            }
        }
        let own = members
            .iter()
            .find(|(n, _)| *n == self.name)
            .ok_or_else(|| ConfigError::NotInCluster(self.name.clone()))?;
        let mut a = own.1.clone();
        let mut b = self.initial_advertise_peer_urls.clone();
        a.sort();
        b.sort();
        if a != b {
            return Err(ConfigError::PeerUrlMismatch {
                name: self.name.clone(),
                cluster: a.join(","),
                advertised: b.join(","),
            });
        }
        Ok(members)
    }

    /// `--auth-token` parsed (JWT key files read), as the server starts with it.
    pub fn token_opts(&self) -> Result<crate::auth::provider::TokenOpts, ConfigError> {
        crate::auth::provider::TokenOpts::parse(&self.auth_token)
            .map_err(|e| ConfigError::AuthToken(self.auth_token.clone(), e))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let client = self.client_listen_urls()?;
        self.metrics_listen_urls()?;
        for u in &self.advertise_client_urls {
            ListenUrl::parse(u)?;
        }
        for u in self
            .listen_peer_urls
            .iter()
            .chain(&self.initial_advertise_peer_urls)
        {
            ListenUrl::parse(u)?;
        }
        self.initial_members()?;
        if client.iter().any(|u| u.tls) && (self.cert_file.is_none() || self.key_file.is_none()) {
            return Err(ConfigError::Tls(
                "https client URLs need --cert-file and --key-file".into(),
            ));
        }
        if self.client_cert_auth && self.trusted_ca_file.is_none() {
            return Err(ConfigError::Tls(
                "--client-cert-auth needs --trusted-ca-file".into(),
            ));
        }
        let peer_tls = self
            .listen_peer_urls
            .iter()
            .chain(&self.initial_advertise_peer_urls)
            .any(|u| u.starts_with("https://"));
        if peer_tls
            && (self.peer_cert_file.is_none()
                || self.peer_key_file.is_none()
                || self.peer_trusted_ca_file.is_none())
        {
            return Err(ConfigError::Tls(
                "https peer URLs need --peer-cert-file, --peer-key-file and --peer-trusted-ca-file"
                    .into(),
            ));
        }
        if self.peer_client_cert_auth && self.peer_trusted_ca_file.is_none() {
            return Err(ConfigError::Tls(
                "--peer-client-cert-auth needs --peer-trusted-ca-file".into(),
            ));
        }
        self.token_opts()?;
        if !(4..=31).contains(&self.bcrypt_cost) {
            return Err(ConfigError::BcryptCost(self.bcrypt_cost));
        }
        Retention::parse(self.auto_compaction_mode, &self.auto_compaction_retention)?;
        Ok(())
    }
}

/// --auto-compaction-retention, parsed for --auto-compaction-mode (what `compactor` keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    Disabled,
    /// Keep this much wall-clock history.
    Periodic(Duration),
    /// Keep this many revisions.
    Revisions(i64),
}

impl Retention {
    pub fn parse(mode: CompactionMode, text: &str) -> Result<Self, ConfigError> {
        let bad = || ConfigError::Retention(text.to_string());
        let text = text.trim();
        match mode {
            CompactionMode::Revision => {
                let n: i64 = text.parse().map_err(|_| bad())?;
                Ok(if n <= 0 {
                    Retention::Disabled
                } else {
                    Retention::Revisions(n)
                })
            }
            CompactionMode::Periodic => {
                // A bare number means hours, as in etcd.
                let d = if let Ok(hours) = text.parse::<f64>() {
                    Duration::from_secs_f64((hours * 3600.0).max(0.0))
                } else {
                    parse_duration(text).ok_or_else(bad)?
                };
                Ok(if d.is_zero() {
                    Retention::Disabled
                } else {
                    Retention::Periodic(d)
                })
            }
        }
    }
}

fn parse_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let (num, unit) = text.split_at(split);
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeadm_style_flags_parse() {
        let c = Config::parse_from([
            "kiln-store",
            "--name=cp1",
            "--data-dir=/tmp/x",
            "--listen-client-urls=https://127.0.0.1:2379,https://10.0.0.1:2379",
            "--advertise-client-urls=https://10.0.0.1:2379",
            "--initial-advertise-peer-urls=https://10.0.0.1:2380",
            "--initial-cluster=cp1=https://10.0.0.1:2380",
            "--client-cert-auth=true",
            "--peer-client-cert-auth",
            "--peer-cert-file=/p.crt",
            "--peer-key-file=/p.key",
            "--peer-trusted-ca-file=/ca.crt",
            "--cert-file=/s.crt",
            "--key-file=/s.key",
            "--trusted-ca-file=/ca.crt",
            "--listen-metrics-urls=http://127.0.0.1:2381",
            "--snapshot-count=10000",
        ]);
        assert!(c.client_cert_auth && c.peer_client_cert_auth);
        assert_eq!(c.listen_client_urls.len(), 2);
        c.validate().unwrap();
        assert_eq!(c.initial_members().unwrap().len(), 1);
    }

    #[test]
    fn mismatched_peer_urls_are_refused() {
        let c = Config::parse_from([
            "kiln-store",
            "--name=a",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--initial-cluster=a=http://127.0.0.1:9999",
        ]);
        assert!(matches!(
            c.validate(),
            Err(ConfigError::PeerUrlMismatch { .. })
        ));
    }

    #[test]
    fn https_without_cert_is_refused() {
        let c = Config::parse_from(["kiln-store", "--listen-client-urls=https://127.0.0.1:2379"]);
        assert!(matches!(c.validate(), Err(ConfigError::Tls(_))));
    }
}
