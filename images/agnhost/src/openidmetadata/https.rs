//! The HTTPS GETs of the discovery check, as client-go's in-cluster transport makes them (the
//! cluster CA trusted, the pod's service-account token as bearer) or as Go's default client does
//! for an external issuer (the system's roots, no credentials).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

use super::Fetch;

/// Where rest.InClusterConfig reads the pod's credentials.
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The system root bundle (Debian's path, where Go looks first).
const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Go's default client has no deadline; one here keeps a hung endpoint from hanging the pod.
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum HttpsError {
    #[error("unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined")]
    NotInCluster,
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("no usable certificate in {0}")]
    NoRoots(String),
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("Get {url:?}: {reason}")]
    Get { url: String, reason: String },
    #[error("{status}: {body}")]
    Status {
        status: http::StatusCode,
        body: String,
    },
}

pub struct Https {
    tls: Arc<rustls::ClientConfig>,
    bearer: Option<String>,
}

fn read(path: &Path) -> Result<Vec<u8>, HttpsError> {
    std::fs::read(path).map_err(|source| HttpsError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn tls(roots_pem: &[u8], from: &str) -> Result<Arc<rustls::ClientConfig>, HttpsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut &roots_pem[..]).flatten() {
        // A bundle may hold certificates rustls cannot use; the others still count.
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(HttpsError::NoRoots(from.into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

impl Https {
    /// rest.InClusterConfig + rest.TransportFor: the cluster CA and the pod's token.
    pub fn in_cluster() -> Result<Https, HttpsError> {
        Self::in_cluster_from(Path::new(SA_DIR), |v| std::env::var(v).ok())
    }

    fn in_cluster_from(
        dir: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Https, HttpsError> {
        let set = |v: &str| env(v).is_some_and(|s| !s.is_empty());
        if !set("KUBERNETES_SERVICE_HOST") || !set("KUBERNETES_SERVICE_PORT") {
            return Err(HttpsError::NotInCluster);
        }
        let token = String::from_utf8_lossy(&read(&dir.join("token"))?)
            .trim()
            .to_string();
        let ca = dir.join("ca.crt");
        Ok(Https {
            tls: tls(&read(&ca)?, &ca.display().to_string())?,
            bearer: Some(token),
        })
    }

    /// http.DefaultTransport: the system's roots, no credentials.
    pub fn external() -> Result<Https, HttpsError> {
        Ok(Https {
            tls: tls(&read(Path::new(SYSTEM_ROOTS))?, SYSTEM_ROOTS)?,
            bearer: None,
        })
    }

    async fn exchange(&self, url: &str) -> Result<Vec<u8>, HttpsError> {
        let fail = |reason: String| HttpsError::Get {
            url: url.into(),
            reason,
        };
        let uri: http::Uri = url.parse().map_err(|e| fail(format!("{e}")))?;
        if uri.scheme_str() != Some("https") {
            return Err(fail("only https URLs are fetched".into()));
        }
        let host = uri.host().unwrap_or_default().to_string();
        let port = uri.port_u16().unwrap_or(443);
        let bare = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let tcp = tokio::net::TcpStream::connect((bare.as_str(), port))
            .await
            .map_err(|e| fail(format!("dial tcp {host}:{port}: {e}")))?;
        let name = rustls::pki_types::ServerName::try_from(bare.clone())
            .map_err(|e| fail(format!("{e}")))?;
        let stream = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| fail(format!("tls: {e}")))?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| fail(format!("{e}")))?;
        tokio::spawn(conn);
        let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let mut req = http::Request::get(path)
            .header(
                http::header::HOST,
                uri.authority().map(|a| a.as_str()).unwrap_or(""),
            )
            .header(http::header::ACCEPT, "application/json");
        if let Some(token) = &self.bearer {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let req = req
            .body(Empty::<Bytes>::new())
            .map_err(|e| fail(format!("{e}")))?;
        let resp = send
            .send_request(req)
            .await
            .map_err(|e| fail(format!("{e}")))?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| fail(format!("{e}")))?
            .to_bytes();
        if status != http::StatusCode::OK {
            return Err(HttpsError::Status {
                status,
                body: String::from_utf8_lossy(&body).into_owned(),
            });
        }
        Ok(body.to_vec())
    }
}

impl Fetch for Https {
    type Error = HttpsError;

    async fn get(&self, url: &str) -> Result<Vec<u8>, HttpsError> {
        match tokio::time::timeout(TIMEOUT, self.exchange(url)).await {
            Ok(r) => r,
            Err(_) => Err(HttpsError::Get {
                url: url.into(),
                reason: "context deadline exceeded".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_without_certificates_is_refused() {
        let e = tls(b"not a certificate", "bundle").unwrap_err();
        assert!(
            matches!(e, HttpsError::NoRoots(ref p) if p == "bundle"),
            "{e}"
        );
    }

    #[test]
    fn the_cluster_ca_and_token_make_the_in_cluster_client() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let ca = rcgen::CertificateParams::new(vec!["kubernetes".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.path().join("ca.crt"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("token"), "abc\n").unwrap();
        let env = |v: &str| match v {
            "KUBERNETES_SERVICE_HOST" => Some("10.96.0.1".to_string()),
            "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
            _ => None,
        };
        let client = Https::in_cluster_from(dir.path(), env).unwrap();
        assert_eq!(client.bearer.as_deref(), Some("abc"));
        let outside = Https::in_cluster_from(dir.path(), |_| None).err();
        assert!(matches!(outside, Some(HttpsError::NotInCluster)));
    }
}
