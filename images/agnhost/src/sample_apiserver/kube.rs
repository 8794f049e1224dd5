//! What the server asks of the cluster's API server, as client-go's in-cluster config reaches it
//! (KUBERNETES_SERVICE_HOST/PORT, the cluster CA and the pod's service-account token, re-read on
//! every call because projected tokens rotate): the authentication ConfigMap, namespaces (for
//! NamespaceLifecycle) and SubjectAccessReviews. A narrow trait, so tests record the calls.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;

const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// client-go has no default deadline; one here keeps a hung API server from hanging a request.
const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
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
    #[error("{method} {path}: {reason}")]
    Request {
        method: &'static str,
        path: String,
        reason: String,
    },
}

/// One answer: the HTTP status and the body as JSON (Null when it was not JSON).
pub type Answer = (u16, Value);

pub trait Kube: Send + Sync {
    fn get<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Answer, KubeError>>;
    fn post<'a>(
        &'a self,
        path: &'a str,
        body: &'a Value,
    ) -> BoxFuture<'a, Result<Answer, KubeError>>;
}

pub struct InCluster {
    host: String,
    port: u16,
    token_file: PathBuf,
    tls: Arc<rustls::ClientConfig>,
}

fn read(path: &Path) -> Result<Vec<u8>, KubeError> {
    std::fs::read(path).map_err(|source| KubeError::Read {
        path: path.display().to_string(),
        source,
    })
}

impl InCluster {
    pub fn from_env() -> Result<InCluster, KubeError> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST").unwrap_or_default();
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_default();
        let port: u16 = port.parse().map_err(|_| KubeError::NotInCluster)?;
        if host.is_empty() {
            return Err(KubeError::NotInCluster);
        }
        let dir = Path::new(SA_DIR);
        let ca_path = dir.join("ca.crt");
        let ca = read(&ca_path)?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut &ca[..]).flatten() {
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            return Err(KubeError::NoRoots(ca_path.display().to_string()));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(InCluster {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
            token_file: dir.join("token"),
            tls: Arc::new(tls),
        })
    }

    async fn exchange(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, KubeError> {
        let fail = |reason: String| KubeError::Request {
            method,
            path: path.to_string(),
            reason,
        };
        let token = String::from_utf8_lossy(&read(&self.token_file)?)
            .trim()
            .to_string();
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| fail(format!("dial tcp {}:{}: {e}", self.host, self.port)))?;
        let name = rustls::pki_types::ServerName::try_from(self.host.clone())
            .map_err(|e| fail(e.to_string()))?;
        let stream = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| fail(format!("tls: {e}")))?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| fail(e.to_string()))?;
        tokio::spawn(conn);
        let payload = body.map(|b| b.to_string()).unwrap_or_default();
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, format!("{}:{}", self.host, self.port))
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Full::new(Bytes::from(payload)))
            .map_err(|e| fail(e.to_string()))?;
        let resp = send
            .send_request(req)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| fail(e.to_string()))?
            .to_bytes();
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }

    async fn timed(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, KubeError> {
        match tokio::time::timeout(TIMEOUT, self.exchange(method, path, body)).await {
            Ok(r) => r,
            Err(_) => Err(KubeError::Request {
                method,
                path: path.into(),
                reason: "context deadline exceeded".into(),
            }),
        }
    }
}

impl Kube for InCluster {
    fn get<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Answer, KubeError>> {
        Box::pin(self.timed("GET", path, None))
    }

    fn post<'a>(
        &'a self,
        path: &'a str,
        body: &'a Value,
    ) -> BoxFuture<'a, Result<Answer, KubeError>> {
        Box::pin(self.timed("POST", path, Some(body)))
    }
}

/// A cluster for tests: fixed answers by path, every call recorded.
#[cfg(test)]
pub mod recording {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    pub struct Recording {
        pub answers: Mutex<BTreeMap<String, Answer>>,
        /// (method, path, body)
        pub calls: Mutex<Vec<(String, String, Value)>>,
        /// Answers SubjectAccessReviews: allowed when the user is this one.
        pub allow_user: Mutex<Option<String>>,
    }

    impl Recording {
        pub fn answer(&self, path: &str, status: u16, body: Value) {
            self.answers
                .lock()
                .unwrap()
                .insert(path.into(), (status, body));
        }

        fn respond(&self, method: &str, path: &str, body: Value) -> Result<Answer, KubeError> {
            self.calls
                .lock()
                .unwrap()
                .push((method.into(), path.into(), body.clone()));
            if path.ends_with("/subjectaccessreviews") {
                let allowed =
                    self.allow_user.lock().unwrap().as_deref() == body["spec"]["user"].as_str();
                let mut review = body;
                review["status"] = serde_json::json!({"allowed": allowed});
                return Ok((201, review));
            }
            Ok(self
                .answers
                .lock()
                .unwrap()
                .get(path)
                .cloned()
                .unwrap_or((404, Value::Null)))
        }
    }

    impl Kube for Recording {
        fn get<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Answer, KubeError>> {
            Box::pin(async move { self.respond("GET", path, Value::Null) })
        }

        fn post<'a>(
            &'a self,
            path: &'a str,
            body: &'a Value,
        ) -> BoxFuture<'a, Result<Answer, KubeError>> {
            Box::pin(async move { self.respond("POST", path, body.clone()) })
        }
    }
}
