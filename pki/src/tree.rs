//! The certificate tree as data: every certificate kiln makes, who issues it, and what it is for.
//! `ensure_tree` walks this list (like kubeadm's `CertTree`), so adding a certificate is adding a row.

use std::net::IpAddr;

use crate::validity::Validity;

/// What a certificate may be used for (extended key usage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    Server,
    Client,
}

/// How the subject common name is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommonName {
    /// The same name on every host.
    Fixed(&'static str),
    /// The host's node name (store server/peer certificates, like kubeadm's etcd certs).
    NodeName,
}

/// Which subject alternative names a certificate carries; computed from [`TreeParams`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SanKind {
    None,
    /// kubernetes, kubernetes.default…, the service IP, host names/IPs, loopback, controlPlaneEndpoint.
    ApiServer,
    /// Store server and peer: node name, host names/IPs, localhost and loopback.
    Store,
}

/// One certificate of the tree. `base` is the path relative to the pki dir without extension:
/// the certificate is `<base>.crt` and its key `<base>.key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CertSpec {
    pub name: &'static str,
    pub base: &'static str,
    /// The `name` of the issuing CA spec; `None` for a self-signed CA.
    pub ca: Option<&'static str>,
    pub cn: CommonName,
    pub organizations: &'static [&'static str],
    pub usages: &'static [Usage],
    pub sans: SanKind,
}

impl CertSpec {
    pub fn is_ca(&self) -> bool {
        self.ca.is_none()
    }
    pub fn cert_file(&self) -> String {
        format!("{}.crt", self.base)
    }
    pub fn key_file(&self) -> String {
        format!("{}.key", self.base)
    }
    pub fn common_name<'a>(&self, params: &'a TreeParams) -> &'a str {
        match self.cn {
            CommonName::Fixed(cn) => cn,
            CommonName::NodeName => &params.node_name,
        }
    }
}

/// The kiln certificate tree. CAs come before the certificates they issue.
pub const CERT_TREE: &[CertSpec] = &[
    CertSpec {
        name: "ca",
        base: "ca",
        ca: None,
        cn: CommonName::Fixed("kubernetes"),
        organizations: &[],
        usages: &[],
        sans: SanKind::None,
    },
    CertSpec {
        name: "apiserver",
        base: "apiserver",
        ca: Some("ca"),
        cn: CommonName::Fixed("kube-apiserver"),
        organizations: &[],
        usages: &[Usage::Server],
        sans: SanKind::ApiServer,
    },
    CertSpec {
        name: "apiserver-kubelet-client",
        base: "apiserver-kubelet-client",
        ca: Some("ca"),
        cn: CommonName::Fixed("kube-apiserver-kubelet-client"),
        organizations: &["system:masters"],
        usages: &[Usage::Client],
        sans: SanKind::None,
    },
    CertSpec {
        name: "store-ca",
        base: "store/ca",
        ca: None,
        cn: CommonName::Fixed("kiln-store-ca"),
        organizations: &[],
        usages: &[],
        sans: SanKind::None,
    },
    CertSpec {
        name: "store-server",
        base: "store/server",
        ca: Some("store-ca"),
        cn: CommonName::NodeName,
        organizations: &[],
        usages: &[Usage::Server, Usage::Client],
        sans: SanKind::Store,
    },
    CertSpec {
        name: "store-peer",
        base: "store/peer",
        ca: Some("store-ca"),
        cn: CommonName::NodeName,
        organizations: &[],
        usages: &[Usage::Server, Usage::Client],
        sans: SanKind::Store,
    },
    CertSpec {
        name: "store-healthcheck-client",
        base: "store/healthcheck-client",
        ca: Some("store-ca"),
        cn: CommonName::Fixed("kube-etcd-healthcheck-client"),
        organizations: &[],
        usages: &[Usage::Client],
        sans: SanKind::None,
    },
    CertSpec {
        name: "apiserver-store-client",
        base: "apiserver-store-client",
        ca: Some("store-ca"),
        cn: CommonName::Fixed("kube-apiserver-etcd-client"),
        organizations: &[],
        usages: &[Usage::Client],
        sans: SanKind::None,
    },
    // The aggregation layer's own CA and the identity kiln-apiserver presents to extension API
    // servers, apart from the cluster CA as kubeadm keeps them: an extension server trusts this CA
    // for X-Remote-* headers only, so a cluster client certificate cannot impersonate through it.
    CertSpec {
        name: "front-proxy-ca",
        base: "front-proxy-ca",
        ca: None,
        cn: CommonName::Fixed("front-proxy-ca"),
        organizations: &[],
        usages: &[],
        sans: SanKind::None,
    },
    CertSpec {
        name: "front-proxy-client",
        base: "front-proxy-client",
        ca: Some("front-proxy-ca"),
        cn: CommonName::Fixed("front-proxy-client"),
        organizations: &[],
        usages: &[Usage::Client],
        sans: SanKind::None,
    },
];

/// The service-account signing key pair (`sa.key` private, `sa.pub` public), not a certificate.
pub const SA_KEY_FILE: &str = "sa.key";
pub const SA_PUB_FILE: &str = "sa.pub";

/// Looks a spec up by name.
pub fn spec(name: &str) -> Option<&'static CertSpec> {
    CERT_TREE.iter().find(|s| s.name == name)
}

/// Host-specific inputs of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeParams {
    /// The node (host) name: store certificate CN and a SAN everywhere.
    pub node_name: String,
    /// Other names and addresses of the host(s), IPs or DNS names.
    pub host_addresses: Vec<String>,
    /// `host` or `host:port`; its host part becomes an apiserver SAN.
    pub control_plane_endpoint: Option<String>,
    /// First IP of the service CIDR, the `kubernetes` Service (10.96.0.1).
    pub service_ip: IpAddr,
    pub dns_domain: String,
    pub validity: Validity,
}

impl TreeParams {
    pub fn new(node_name: impl Into<String>) -> Self {
        TreeParams {
            node_name: node_name.into(),
            host_addresses: Vec::new(),
            control_plane_endpoint: None,
            service_ip: IpAddr::from([10, 96, 0, 1]),
            dns_domain: "cluster.local".to_string(),
            validity: Validity::default(),
        }
    }

    /// The SANs (DNS names or IPs as strings, deduplicated, in a stable order) of a spec.
    pub fn sans(&self, kind: SanKind) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut push = |s: String| {
            if !s.is_empty() && !out.contains(&s) {
                out.push(s);
            }
        };
        match kind {
            SanKind::None => {}
            SanKind::ApiServer => {
                push("kubernetes".into());
                push("kubernetes.default".into());
                push("kubernetes.default.svc".into());
                push(format!("kubernetes.default.svc.{}", self.dns_domain));
                push(self.service_ip.to_string());
                push(self.node_name.clone());
                for a in &self.host_addresses {
                    push(a.clone());
                }
                push("127.0.0.1".into());
                push("localhost".into());
                if let Some(ep) = &self.control_plane_endpoint {
                    push(endpoint_host(ep).to_string());
                }
            }
            SanKind::Store => {
                push(self.node_name.clone());
                push("localhost".into());
                push("127.0.0.1".into());
                push("::1".into());
                for a in &self.host_addresses {
                    push(a.clone());
                }
            }
        }
        out
    }
}

/// The host part of `host`, `host:port`, `[v6]:port` or a bare IPv6 address.
pub fn endpoint_host(endpoint: &str) -> &str {
    if let Some(rest) = endpoint.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    if endpoint.parse::<IpAddr>().is_ok() {
        return endpoint;
    }
    match endpoint.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => endpoint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_issuer_is_a_ca_listed_before_its_leaves() {
        for (i, s) in CERT_TREE.iter().enumerate() {
            if let Some(ca) = s.ca {
                let pos = CERT_TREE
                    .iter()
                    .position(|c| c.name == ca)
                    .expect("issuer listed");
                assert!(pos < i, "{} is issued by {} listed later", s.name, ca);
                assert!(CERT_TREE[pos].is_ca());
            }
        }
    }

    #[test]
    fn apiserver_sans_cover_service_names_and_endpoint() {
        let mut p = TreeParams::new("cp1");
        p.host_addresses = vec!["10.0.0.5".into()];
        p.control_plane_endpoint = Some("k8s.example:6443".into());
        let sans = p.sans(SanKind::ApiServer);
        for want in [
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "10.96.0.1",
            "cp1",
            "10.0.0.5",
            "127.0.0.1",
            "localhost",
            "k8s.example",
        ] {
            assert!(sans.contains(&want.to_string()), "missing {want}");
        }
    }

    #[test]
    fn endpoint_host_strips_ports() {
        assert_eq!(endpoint_host("a.b:6443"), "a.b");
        assert_eq!(endpoint_host("a.b"), "a.b");
        assert_eq!(endpoint_host("[fd00::1]:6443"), "fd00::1");
        assert_eq!(endpoint_host("fd00::1"), "fd00::1");
    }
}
