//! One request to a proxy backend on a connection of its own (so an upgrade can take the
//! connection over): plain HTTP, HTTPS that accepts any certificate (pods and services are
//! reached by IP, as upstream's proxy transport skips verification), or the node's kubelet through
//! the apiserver's kubelet client (its client certificate).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::location::{Backend, Transport};
use crate::kubelet_client::{KubeletClient, KubeletError};
use crate::tls::AnyServerCert;

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("dial tcp {addr}: unknown port")]
    UnknownPort { addr: String },
    #[error("dial tcp {addr}: {source}")]
    Resolve {
        addr: String,
        source: std::io::Error,
    },
    #[error("dial tcp {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("tls handshake with {addr}: {source}")]
    Tls {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{addr}: {source}")]
    Http {
        addr: SocketAddr,
        source: hyper::Error,
    },
    #[error("TLS configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Kubelet(#[from] KubeletError),
}

/// The client side of HTTPS to pods: any certificate, HTTP/1.1 (upgrades need it).
fn insecure_connector() -> Result<TlsConnector, SendError> {
    static CONNECTOR: OnceLock<Result<TlsConnector, String>> = OnceLock::new();
    CONNECTOR
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = ClientConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
                .map_err(|e| e.to_string())?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyServerCert::new(provider)))
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(TlsConnector::from(Arc::new(config)))
        })
        .clone()
        .map_err(SendError::Config)
}

/// The backend's socket address (nodes may report a host name).
pub async fn resolve(backend: &Backend) -> Result<Vec<SocketAddr>, SendError> {
    let port = backend.dial_port().ok_or_else(|| SendError::UnknownPort {
        addr: backend.authority(),
    })?;
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((backend.host.as_str(), port))
        .await
        .map_err(|source| SendError::Resolve {
            addr: backend.authority(),
            source,
        })?
        .collect();
    if addrs.is_empty() {
        return Err(SendError::Resolve {
            addr: backend.authority(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such host"),
        });
    }
    Ok(addrs)
}

async fn handshake<S>(
    addr: SocketAddr,
    io: S,
    req: http::Request<Body>,
) -> Result<http::Response<Incoming>, SendError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|source| SendError::Http { addr, source })?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "proxy backend connection ended");
        }
    });
    sender
        .send_request(req)
        .await
        .map_err(|source| SendError::Http { addr, source })
}

/// Sends `req` (origin-form URI, headers final) to the backend at `addr`.
pub async fn send(
    kubelet: &KubeletClient,
    transport: Transport,
    addr: SocketAddr,
    req: http::Request<Body>,
) -> Result<http::Response<Incoming>, SendError> {
    if transport == Transport::Kubelet {
        return Ok(kubelet.send(addr, req).await?);
    }
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|source| SendError::Connect { addr, source })?;
    let _ = tcp.set_nodelay(true);
    match transport {
        Transport::Http => handshake(addr, tcp, req).await,
        _ => {
            let tls = insecure_connector()?
                .connect(ServerName::IpAddress(addr.ip().into()), tcp)
                .await
                .map_err(|source| SendError::Tls { addr, source })?;
            handshake(addr, tls, req).await
        }
    }
}
