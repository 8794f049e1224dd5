//! HTTPS to an extension API server: its caBundle as the only trust root (or no verification with
//! insecureSkipTLSVerify), the front-proxy certificate as kiln's client certificate, HTTP/1.1.
//! One connection per request, so a watch holds its own until either side ends it.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::resolve::Endpoint;
use super::{AggregatorError, Backend, FrontProxy};
use crate::tls::AnyServerCert;

/// The TLS client for one APIService.
pub fn connector(
    backend: &Backend,
    front_proxy: Option<&FrontProxy>,
) -> Result<TlsConnector, AggregatorError> {
    let error = |message: String| AggregatorError::Tls {
        name: backend.name.clone(),
        message,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| error(e.to_string()))?;
    let builder = if backend.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServerCert::new(provider)))
    } else {
        let mut roots = RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut &backend.ca_bundle[..]) {
            let cert = cert.map_err(|e| error(format!("caBundle: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| error(format!("caBundle: {e}")))?;
        }
        builder.with_root_certificates(roots)
    };
    let mut config = match front_proxy {
        Some(fp) => builder
            .with_client_auth_cert(fp.chain.clone(), fp.key.clone_key())
            .map_err(|e| error(format!("front-proxy client certificate: {e}")))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Sends one request over a fresh connection; the error text is what clients and the
/// Available condition show.
pub async fn send<B>(
    endpoint: &Endpoint,
    connector: &TlsConnector,
    req: http::Request<B>,
) -> Result<http::Response<Incoming>, String>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(|e| format!("dial tcp {}:{}: {e}", endpoint.host, endpoint.port))?;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from(endpoint.server_name.clone())
        .map_err(|e| format!("invalid server name: {e}"))?;
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "extension API server connection ended");
        }
    });
    sender.send_request(req).await.map_err(|e| e.to_string())
}
