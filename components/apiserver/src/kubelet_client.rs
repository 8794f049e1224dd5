//! The apiserver's client to kubelets (:10250 over TLS with the apiserver-kubelet-client
//! certificate), for pods/log and pods/exec. Like upstream, the kubelet's serving certificate is
//! verified only when --kubelet-certificate-authority is given.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::tls::{load_certs, load_key, AnyServerCert, TlsError};

/// The kubelet port when the node does not report one.
pub const DEFAULT_KUBELET_PORT: u16 = 10250;

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("connecting to the kubelet at {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("kubelet at {addr}: {source}")]
    Http {
        addr: SocketAddr,
        source: hyper::Error,
    },
    #[error("no kubelet client certificate configured (--kubelet-client-certificate/--kubelet-client-key)")]
    NotConfigured,
}

#[derive(Clone)]
pub struct KubeletClient {
    connector: Option<TlsConnector>,
}

impl KubeletClient {
    /// `None` cert/key: log and exec answer 503-ish errors instead of connecting.
    pub fn new(
        cert: Option<&str>,
        key: Option<&str>,
        ca: Option<&str>,
    ) -> Result<Self, KubeletError> {
        let (Some(cert), Some(key)) = (cert, key) else {
            return Ok(KubeletClient { connector: None });
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
        let builder = match ca {
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for c in load_certs(ca)? {
                    roots.add(c)?;
                }
                builder.with_root_certificates(roots)
            }
            None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyServerCert::new(provider))),
        };
        let mut config = builder.with_client_auth_cert(load_certs(cert)?, load_key(key)?)?;
        // Upgrades (exec) need HTTP/1.1.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(KubeletClient {
            connector: Some(TlsConnector::from(Arc::new(config))),
        })
    }

    /// Sends one request on a fresh connection (upgrades included) and returns the response.
    pub async fn send(
        &self,
        addr: SocketAddr,
        req: http::Request<Body>,
    ) -> Result<http::Response<Incoming>, KubeletError> {
        let connector = self.connector.as_ref().ok_or(KubeletError::NotConfigured)?;
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|source| KubeletError::Connect { addr, source })?;
        let name = ServerName::IpAddress(addr.ip().into());
        let tls = connector
            .connect(name, tcp)
            .await
            .map_err(|source| KubeletError::Connect { addr, source })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|source| KubeletError::Http { addr, source })?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "kubelet connection ended");
            }
        });
        sender
            .send_request(req)
            .await
            .map_err(|source| KubeletError::Http { addr, source })
    }
}

/// Where a node's kubelet listens: InternalIP, then ExternalIP, then Hostname (kubeadm's
/// --kubelet-preferred-address-types), on its reported port.
pub fn kubelet_address(node: &Value) -> Option<(String, u16)> {
    let addresses = node["status"]["addresses"].as_array()?;
    let host = ["InternalIP", "ExternalIP", "Hostname"]
        .iter()
        .find_map(|t| {
            addresses
                .iter()
                .find(|a| a["type"] == *t)
                .and_then(|a| a["address"].as_str())
        })?
        .to_string();
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
        .unwrap_or(DEFAULT_KUBELET_PORT);
    Some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prefers_internal_ip_and_reported_port() {
        let n = json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"},
            {"type": "InternalIP", "address": "10.0.0.11"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10251}}}});
        assert_eq!(kubelet_address(&n), Some(("10.0.0.11".into(), 10251)));
        let n = json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"}]}});
        assert_eq!(kubelet_address(&n), Some(("n1".into(), 10250)));
        assert_eq!(kubelet_address(&json!({})), None);
    }
}
