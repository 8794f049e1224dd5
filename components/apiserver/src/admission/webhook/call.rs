//! The real `Caller`: POSTs the AdmissionReview over HTTPS (rustls, the webhook's caBundle as the only
//! trust root) to its URL, or to a ready endpoint of its Service (the Service port's EndpointSlice
//! port, TLS server name `<svc>.<ns>.svc`), within timeoutSeconds.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::dispatch::Caller;
use super::hook::{Endpoint, Hook};
use super::WebhookError;
use crate::registry::lifecycle::from_stored;
use crate::registry::services::{ready_slice_endpoint, ENDPOINT_SLICES, SERVICES};
use crate::storage::Store;

/// Largest webhook answer read (upstream's request body limit).
const MAX_RESPONSE: usize = 3 * 1024 * 1024;

/// Where one call goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub host: String,
    pub port: u16,
    /// What the certificate must name.
    pub server_name: String,
    /// Path and query, `?timeout=<n>s` included as upstream sends it.
    pub path: String,
    /// The URL as error messages show it.
    pub url: String,
}

/// `https://host[:port]/path` → destination (the registry already checked the form).
pub fn url_destination(url: &str, timeout_secs: u64) -> Result<Destination, WebhookError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|_| WebhookError::BadUrl(url.to_string()))?;
    let host = uri
        .host()
        .ok_or_else(|| WebhookError::BadUrl(url.to_string()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    let path = format!("{}?timeout={timeout_secs}s", uri.path());
    Ok(Destination {
        url: format!(
            "{}?timeout={timeout_secs}s",
            url.split('?').next().unwrap_or(url)
        ),
        server_name: host.clone(),
        host,
        port,
        path,
    })
}

/// A ready endpoint of the Service and the EndpointSlice port behind the Service port.
pub(crate) async fn service_destination(
    store: &Store,
    namespace: &str,
    name: &str,
    path: &str,
    port: u16,
    timeout_secs: u64,
) -> Result<Destination, WebhookError> {
    let svc = store
        .get(&SERVICES.key(Some(namespace), name))
        .await
        .map_err(|e| WebhookError::Resolve(e.to_string()))?
        .ok_or_else(|| WebhookError::Resolve(format!("service {name:?} not found")))?;
    let svc =
        from_stored(&svc.value, svc.mod_revision).map_err(|e| WebhookError::Resolve(e.message))?;
    let svc_port = svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_u64() == Some(u64::from(port)))
        .ok_or_else(|| {
            WebhookError::Resolve(format!("no service port {port} found for service {name:?}"))
        })?;
    let port_name = svc_port["name"].as_str().unwrap_or("");
    let (slices, _) = store
        .list(&ENDPOINT_SLICES.key_prefix(Some(namespace)))
        .await
        .map_err(|e| WebhookError::Resolve(e.to_string()))?;
    let found = slices.iter().find_map(|s| {
        let slice = from_stored(&s.value, s.mod_revision).ok()?;
        if slice["metadata"]["labels"]["kubernetes.io/service-name"] != name {
            return None;
        }
        ready_slice_endpoint(&slice, port_name)
    });
    let (host, target) = found.ok_or_else(|| {
        WebhookError::Resolve(format!("no endpoints available for service {name:?}"))
    })?;
    let server_name = format!("{name}.{namespace}.svc");
    Ok(Destination {
        url: format!("https://{server_name}:{port}{path}?timeout={timeout_secs}s"),
        path: format!("{path}?timeout={timeout_secs}s"),
        server_name,
        host,
        port: target,
    })
}

fn connector(ca_bundle: &[u8]) -> Result<TlsConnector, WebhookError> {
    let mut roots = RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut &ca_bundle[..]) {
        let cert = cert.map_err(|e| WebhookError::Config(format!("caBundle: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| WebhookError::Config(format!("caBundle: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| WebhookError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

pub(crate) async fn post(
    dest: &Destination,
    ca_bundle: &[u8],
    body: Vec<u8>,
) -> Result<Value, WebhookError> {
    let transport = |reason: String| WebhookError::Transport {
        url: dest.url.clone(),
        reason,
    };
    let tcp = TcpStream::connect((dest.host.as_str(), dest.port))
        .await
        .map_err(|e| transport(format!("dial tcp {}:{}: {e}", dest.host, dest.port)))?;
    let name = ServerName::try_from(dest.server_name.clone())
        .map_err(|e| transport(format!("invalid server name: {e}")))?;
    let tls = connector(ca_bundle)?
        .connect(name, tcp)
        .await
        .map_err(|e| transport(format!("tls: {e}")))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| transport(e.to_string()))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "webhook connection ended");
        }
    });
    let req = http::Request::post(&dest.path)
        .header(
            http::header::HOST,
            format!("{}:{}", dest.server_name, dest.port),
        )
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| transport(e.to_string()))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| transport(e.to_string()))?;
    let status = resp.status();
    let body = http_body_util::Limited::new(resp.into_body(), MAX_RESPONSE)
        .collect()
        .await
        .map_err(|e| transport(e.to_string()))?
        .to_bytes();
    if !status.is_success() {
        return Err(WebhookError::Status {
            code: status.as_u16(),
            body: String::from_utf8_lossy(&body).chars().take(256).collect(),
        });
    }
    serde_json::from_slice(&body).map_err(|e| transport(format!("decoding the response: {e}")))
}

/// Calls webhooks for real; Service endpoints are looked up in the store per call.
#[derive(Clone)]
pub struct HttpsCaller {
    pub store: Store,
}

impl Caller for HttpsCaller {
    async fn call(&self, hook: &Hook, review: &Value) -> Result<Value, WebhookError> {
        let secs = hook.timeout.as_secs();
        let body = serde_json::to_vec(review).unwrap_or_default();
        let url_for_timeout = match &hook.endpoint {
            Endpoint::Url(u) => format!("{}?timeout={secs}s", u.split('?').next().unwrap_or(u)),
            Endpoint::Service {
                namespace,
                name,
                path,
                port,
            } => format!("https://{name}.{namespace}.svc:{port}{path}?timeout={secs}s"),
        };
        let attempt = async {
            let dest = match &hook.endpoint {
                Endpoint::Url(u) => url_destination(u, secs)?,
                Endpoint::Service {
                    namespace,
                    name,
                    path,
                    port,
                } => service_destination(&self.store, namespace, name, path, *port, secs).await?,
            };
            post(&dest, &hook.ca_bundle, body).await
        };
        tokio::time::timeout(hook.timeout, attempt)
            .await
            .map_err(|_| WebhookError::Timeout(url_for_timeout))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_destinations_carry_upstreams_timeout_parameter() {
        let d = url_destination("https://127.0.0.1:9443/mutate", 5).unwrap();
        assert_eq!(
            d,
            Destination {
                host: "127.0.0.1".into(),
                port: 9443,
                server_name: "127.0.0.1".into(),
                path: "/mutate?timeout=5s".into(),
                url: "https://127.0.0.1:9443/mutate?timeout=5s".into(),
            }
        );
        let d = url_destination("https://hooks.example.com", 10).unwrap();
        assert_eq!((d.port, d.path.as_str()), (443, "/?timeout=10s"));
    }

    #[test]
    fn ca_bundle_must_be_pem_certificates() {
        assert!(
            connector(b"").is_ok(),
            "no roots: the handshake fails, not the setup"
        );
        assert!(
            connector(b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
                .is_err()
        );
    }
}
