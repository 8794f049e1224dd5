//! Command-line flags, named like kube-apiserver's so manifests and habits carry over.

use std::net::IpAddr;
use std::time::Duration;

use clap::Parser;

use crate::storage::StoreConfig;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "kiln-apiserver",
    version = kiln_common::version::LONG,
    about = "kiln's Kubernetes API server"
)]
pub struct Options {
    /// Store endpoints (etcd v3 API), comma separated, e.g. https://127.0.0.1:2379.
    #[arg(long, value_delimiter = ',', required = true)]
    pub etcd_servers: Vec<String>,
    /// CA bundle that signed the store's serving certificate.
    #[arg(long)]
    pub etcd_cafile: Option<String>,
    /// Client certificate for the store.
    #[arg(long)]
    pub etcd_certfile: Option<String>,
    /// Client key for the store.
    #[arg(long)]
    pub etcd_keyfile: Option<String>,

    /// HTTPS port; 0 picks a free one (tests).
    #[arg(long, default_value_t = 6443)]
    pub secure_port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// Address advertised to clients in discovery; defaults to the bind address.
    #[arg(long)]
    pub advertise_address: Option<IpAddr>,
    /// Serving certificate (PEM).
    #[arg(long)]
    pub tls_cert_file: String,
    /// Serving key (PEM).
    #[arg(long)]
    pub tls_private_key_file: String,
    /// CA that signs client certificates; without it only anonymous access exists.
    #[arg(long)]
    pub client_ca_file: Option<String>,

    /// Service ClusterIP range (allocation arrives with services).
    #[arg(long, default_value = "10.96.0.0/12")]
    pub service_cluster_ip_range: String,
    /// Service-account token verification keys (PEM public keys or PKCS#8 private keys, ECDSA
    /// P-256); repeatable. The signing key always verifies too.
    #[arg(long)]
    pub service_account_key_file: Vec<String>,
    /// Service-account token signing key (PKCS#8 ECDSA P-256 → ES256); enables TokenRequest.
    #[arg(long)]
    pub service_account_signing_key_file: Option<String>,
    /// Service-account token issuer (`iss`).
    #[arg(long, default_value = crate::tokens::DEFAULT_ISSUER)]
    pub service_account_issuer: String,
    /// Audiences the API accepts in service-account tokens (default: the issuer).
    #[arg(long, value_delimiter = ',')]
    pub api_audiences: Vec<String>,
    /// Client certificate for kubelet connections (pods/log, pods/exec).
    #[arg(long)]
    pub kubelet_client_certificate: Option<String>,
    /// Client key for kubelet connections.
    #[arg(long)]
    pub kubelet_client_key: Option<String>,
    /// CA that signed kubelet serving certificates; without it they are not verified (upstream's
    /// default).
    #[arg(long)]
    pub kubelet_certificate_authority: Option<String>,
    /// Client certificate kiln presents to extension API servers (the front-proxy identity; the
    /// aggregation layer, `crate::aggregator`).
    #[arg(long)]
    pub proxy_client_cert_file: Option<String>,
    /// Key of `--proxy-client-cert-file`.
    #[arg(long)]
    pub proxy_client_key_file: Option<String>,
    /// CA that signs front-proxy client certificates; published in
    /// kube-system/extension-apiserver-authentication for extension servers.
    #[arg(long)]
    pub requestheader_client_ca_file: Option<String>,
    /// Common names a front-proxy client certificate may have (published).
    #[arg(long, value_delimiter = ',')]
    pub requestheader_allowed_names: Vec<String>,
    /// Headers that carry the user name (published).
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-User")]
    pub requestheader_username_headers: Vec<String>,
    /// Headers that carry the groups (published).
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Group")]
    pub requestheader_group_headers: Vec<String>,
    /// Header prefixes that carry extra user information (published).
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Extra-")]
    pub requestheader_extra_headers_prefix: Vec<String>,

    /// Authorization modes (accepted; the skeleton's authorizer is fixed).
    #[arg(long, default_value = "Node,RBAC")]
    pub authorization_mode: String,
    /// Allow privileged containers (accepted).
    #[arg(long)]
    pub allow_privileged: Option<bool>,

    /// Admission plugins to turn on besides the defaults (NamespaceLifecycle, NodeRestriction):
    /// `ServiceAccount`.
    #[arg(long, value_delimiter = ',')]
    pub enable_admission_plugins: Vec<String>,
    /// Default admission plugins to turn off (`NodeRestriction`).
    #[arg(long, value_delimiter = ',')]
    pub disable_admission_plugins: Vec<String>,

    /// AdmissionConfiguration file (apiserver.config.k8s.io/v1): kiln reads the PodSecurity
    /// plugin's PodSecurityConfiguration from it (defaults and exemptions).
    #[arg(long)]
    pub admission_control_config_file: Option<String>,

    /// Read-only requests in flight at once before 429s (0: no limit); watches and other
    /// long-running requests and system:masters take no seat.
    #[arg(long, default_value_t = 400)]
    pub max_requests_inflight: usize,
    /// Mutating requests in flight at once before 429s (0: no limit).
    #[arg(long, default_value_t = 200)]
    pub max_mutating_requests_inflight: usize,

    /// Audit policy (`audit.k8s.io/v1` Policy); a bad file stops the server at start.
    #[arg(long)]
    pub audit_policy_file: Option<String>,
    /// Audit log file, JSON lines (`-`: standard output); no path = no audit backend.
    #[arg(long)]
    pub audit_log_path: Option<String>,
    /// Days to keep rotated audit logs (0: no age limit).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxage: u64,
    /// Rotated audit logs to keep (0: all).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxbackup: usize,
    /// Megabytes an audit log grows to before it is rotated (0: upstream's default, 100).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxsize: u64,
    /// Encryption at rest: an `apiserver.config.k8s.io/v1` EncryptionConfiguration (aesgcm, aescbc,
    /// secretbox, identity providers).
    #[arg(long)]
    pub encryption_provider_config: Option<String>,

    /// How often the store's history is compacted (Go duration; upstream's default 5m; 0 turns it
    /// off): history of one to two intervals is kept. See `compaction.rs`.
    #[arg(long, default_value = "5m", value_parser = parse_interval)]
    pub etcd_compaction_interval: Duration,

    /// Seconds between watch BOOKMARK events for clients that allow them.
    #[arg(long, default_value_t = 60, hide = true)]
    pub watch_bookmark_interval_seconds: u64,

    /// Delete a Terminating namespace's content in-process (the namespace controller's job, so a
    /// cluster without kiln-controller-manager still empties namespaces); `false` leaves it to the
    /// controller-manager's namespace controller alone (its tests turn it off).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, hide = true)]
    pub namespace_cleanup: bool,
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    kiln_common::duration::parse_duration(s).map_err(|e| e.to_string())
}

impl Options {
    pub fn store(&self) -> StoreConfig {
        StoreConfig {
            endpoints: self.etcd_servers.clone(),
            ca_file: self.etcd_cafile.clone(),
            cert_file: self.etcd_certfile.clone(),
            key_file: self.etcd_keyfile.clone(),
        }
    }

    pub fn bookmark_interval(&self) -> Duration {
        Duration::from_secs(self.watch_bookmark_interval_seconds.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_apiserver_style_flags_parse() {
        let o = Options::parse_from([
            "kiln-apiserver",
            "--etcd-servers=https://127.0.0.1:2379,https://127.0.0.2:2379",
            "--tls-cert-file=/etc/kiln/pki/apiserver.crt",
            "--tls-private-key-file=/etc/kiln/pki/apiserver.key",
            "--client-ca-file=/etc/kiln/pki/ca.crt",
            "--service-account-key-file=/etc/kiln/pki/sa.pub",
            "--kubelet-client-certificate=/x.crt",
            "--kubelet-client-key=/x.key",
            "--bind-address=127.0.0.1",
        ]);
        assert_eq!(o.etcd_servers.len(), 2);
        assert_eq!(o.secure_port, 6443);
        assert_eq!(o.service_cluster_ip_range, "10.96.0.0/12");
        assert_eq!(o.requestheader_username_headers, ["X-Remote-User"]);
        assert_eq!(o.requestheader_group_headers, ["X-Remote-Group"]);
        assert_eq!(o.requestheader_extra_headers_prefix, ["X-Remote-Extra-"]);
        assert!(o.proxy_client_cert_file.is_none());
    }
}
