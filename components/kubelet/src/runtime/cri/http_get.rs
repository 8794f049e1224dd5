//! The kubelet's one HTTP request: a GET returning the status code, for httpGet probes and
//! lifecycle hooks, over plain TCP or (scheme HTTPS) TLS that, as upstream's prober, does not
//! verify the server's certificate — a container serves whatever certificate it has, often one
//! the kubelet could never check (upstream sets InsecureSkipVerify).

use std::sync::{Arc, OnceLock};

use kiln_common::any_server_cert::AnyServerCert;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// http:// or https://, as the probe's `scheme` says (HTTP when unset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    /// Upstream accepts the scheme case-insensitively; anything else is refused.
    pub fn parse(scheme: Option<&str>) -> Result<Scheme, String> {
        match scheme.map(str::to_ascii_uppercase).as_deref() {
            None | Some("HTTP") => Ok(Scheme::Http),
            Some("HTTPS") => Ok(Scheme::Https),
            Some(other) => Err(format!("unsupported scheme {other:?}")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

fn tls_connector() -> TlsConnector {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServerCert::new(provider)))
            .with_no_client_auth();
        Arc::new(config)
    });
    TlsConnector::from(config.clone())
}

/// GET `path` from host:port and return the response's status code.
pub async fn http_get(
    scheme: Scheme,
    host: &str,
    port: u16,
    path: &str,
    headers: &str,
) -> std::io::Result<u16> {
    let tcp = TcpStream::connect((host, port)).await?;
    match scheme {
        Scheme::Http => exchange(tcp, host, port, path, headers).await,
        Scheme::Https => {
            // A name for SNI; an IP address is sent as none, as Go's client does.
            let name = ServerName::try_from(host.to_string()).map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
            })?;
            let tls = tls_connector().connect(name, tcp).await?;
            exchange(tls, host, port, path, headers).await
        }
    }
}

/// A minimal HTTP/1.1 GET: all a probe needs is the status line.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    host: &str,
    port: u16,
    path: &str,
    headers: &str,
) -> std::io::Result<u16> {
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\n{headers}Connection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while !buf.windows(2).any(|w| w == b"\r\n") && buf.len() < 4096 {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&buf);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed HTTP response")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_as_upstream_reads_them() {
        assert_eq!(Scheme::parse(None), Ok(Scheme::Http));
        assert_eq!(Scheme::parse(Some("HTTPS")), Ok(Scheme::Https));
        assert_eq!(Scheme::parse(Some("https")), Ok(Scheme::Https));
        assert!(Scheme::parse(Some("FTP")).is_err());
    }

    /// An HTTPS server with a self-signed certificate the kubelet cannot verify still answers
    /// the probe; plain HTTP to it fails.
    #[tokio::test]
    async fn https_get_skips_certificate_verification() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["webhook.example".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buf = [0u8; 1024];
                    let n = tls.read(&mut buf).await.unwrap_or(0);
                    let ok = String::from_utf8_lossy(&buf[..n]).starts_with("GET /readyz ");
                    let line = if ok { "200 OK" } else { "404 Not Found" };
                    let _ = tls
                        .write_all(
                            format!("HTTP/1.1 {line}\r\nContent-Length: 0\r\n\r\n").as_bytes(),
                        )
                        .await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        let got = http_get(Scheme::Https, "127.0.0.1", port, "/readyz", "").await;
        assert_eq!(got.unwrap(), 200);
        let got = http_get(Scheme::Https, "127.0.0.1", port, "/nope", "").await;
        assert_eq!(got.unwrap(), 404);
        assert!(http_get(Scheme::Http, "127.0.0.1", port, "/readyz", "")
            .await
            .is_err());
    }
}
