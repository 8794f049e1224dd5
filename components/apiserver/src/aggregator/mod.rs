//! The API aggregation layer (kube-aggregator's job, in-process): APIServices with a
//! `spec.service` name another server for their group/version. `availability` checks those servers
//! and writes the Available condition, `proxy` forwards requests to them with the front-proxy
//! identity, `discovery` lists their groups, `local` keeps a Local APIService for every group/version
//! kiln serves itself, and `authentication_configmap` tells extension servers whom to trust.

pub mod authentication_configmap;
pub mod availability;
pub mod client;
pub mod discovery;
pub mod headers;
pub mod local;
pub mod proxy;
pub mod resolve;

use std::sync::{Arc, RwLock};

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;

use crate::storage::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum AggregatorError {
    #[error("reading {path}: {source}")]
    ReadFile {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Pem { path: String, message: String },
    #[error("--proxy-client-cert-file and --proxy-client-key-file must be given together")]
    HalfAPair,
    #[error("TLS client for {name}: {message}")]
    Tls { name: String, message: String },
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("building {what}: {message}")]
    Invalid { what: String, message: String },
}

/// The client certificate kiln presents to extension servers (`--proxy-client-cert-file`), which
/// they trust through `requestheader-client-ca-file` to believe the X-Remote-* headers.
#[derive(Debug)]
pub struct FrontProxy {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl FrontProxy {
    pub fn load(
        cert: Option<&str>,
        key: Option<&str>,
    ) -> Result<Option<FrontProxy>, AggregatorError> {
        let (cert, key) = match (cert, key) {
            (None, None) => return Ok(None),
            (Some(c), Some(k)) => (c, k),
            _ => return Err(AggregatorError::HalfAPair),
        };
        let read = |path: &str| {
            std::fs::read(path).map_err(|source| AggregatorError::ReadFile {
                path: path.to_string(),
                source,
            })
        };
        let pem_error = |path: &str, message: String| AggregatorError::Pem {
            path: path.to_string(),
            message,
        };
        let chain = rustls_pemfile::certs(&mut &read(cert)?[..])
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem_error(cert, e.to_string()))?;
        if chain.is_empty() {
            return Err(pem_error(cert, "no certificate found".into()));
        }
        let key_der = rustls_pemfile::private_key(&mut &read(key)?[..])
            .map_err(|e| pem_error(key, e.to_string()))?
            .ok_or_else(|| pem_error(key, "no private key found".into()))?;
        Ok(Some(FrontProxy {
            chain,
            key: key_der,
        }))
    }
}

/// `spec.service` of an APIService.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
    pub port: u16,
}

/// One service-backed APIService as the proxy and discovery see it.
#[derive(Debug, Clone)]
pub struct Backend {
    pub name: String,
    pub group: String,
    pub version: String,
    pub group_priority: i64,
    pub version_priority: i64,
    pub service: ServiceRef,
    pub ca_bundle: Vec<u8>,
    pub insecure: bool,
    /// The stored Available condition is True.
    pub available: bool,
    /// The APIResourceList the last successful discovery check returned, for `/apis`.
    pub resources: Option<Value>,
}

impl Backend {
    /// A service-backed APIService; `None` for Local ones or unusable objects.
    pub fn from_apiservice(obj: &Value) -> Option<Backend> {
        use base64::Engine;
        let spec = &obj["spec"];
        let svc = spec["service"].as_object()?;
        let ca_bundle = spec["caBundle"]
            .as_str()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .unwrap_or_default();
        let available = obj["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Available" && c["status"] == "True");
        Some(Backend {
            name: obj["metadata"]["name"].as_str()?.to_string(),
            group: spec["group"].as_str().unwrap_or("").to_string(),
            version: spec["version"].as_str()?.to_string(),
            group_priority: spec["groupPriorityMinimum"].as_i64().unwrap_or(0),
            version_priority: spec["versionPriority"].as_i64().unwrap_or(0),
            service: ServiceRef {
                namespace: svc.get("namespace")?.as_str()?.to_string(),
                name: svc.get("name")?.as_str()?.to_string(),
                port: svc
                    .get("port")
                    .and_then(Value::as_u64)
                    .and_then(|p| u16::try_from(p).ok())
                    .unwrap_or(443),
            },
            ca_bundle,
            insecure: spec["insecureSkipTLSVerify"].as_bool().unwrap_or(false),
            available,
            resources: None,
        })
    }
}

/// Shared view of the service-backed APIServices, kept current by `availability::run`; clones
/// share it.
#[derive(Debug, Clone, Default)]
pub struct Aggregator {
    backends: Arc<RwLock<Vec<Backend>>>,
    pub front_proxy: Option<Arc<FrontProxy>>,
}

impl Aggregator {
    pub fn new(front_proxy: Option<FrontProxy>) -> Aggregator {
        Aggregator {
            backends: Arc::default(),
            front_proxy: front_proxy.map(Arc::new),
        }
    }

    /// The APIService that owns group/version, if another server serves it.
    pub fn route(&self, group: &str, version: &str) -> Option<Backend> {
        self.backends()
            .into_iter()
            .find(|b| b.group == group && b.version == version)
    }

    /// Whether any service-backed APIService names this group.
    pub fn serves_group(&self, group: &str) -> bool {
        self.backends().iter().any(|b| b.group == group)
    }

    pub fn backends(&self) -> Vec<Backend> {
        self.backends
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_backends(&self, backends: Vec<Backend>) {
        *self.backends.write().unwrap_or_else(|e| e.into_inner()) = backends;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn service_backed_apiservices_become_backends_and_local_ones_do_not() {
        let obj = json!({"metadata": {"name": "v1beta1.metrics.example.com"},
            "spec": {"group": "metrics.example.com", "version": "v1beta1", "caBundle": "Y2E=",
                     "groupPriorityMinimum": 100, "versionPriority": 10,
                     "service": {"namespace": "kube-system", "name": "metrics"}},
            "status": {"conditions": [{"type": "Available", "status": "True"}]}});
        let b = Backend::from_apiservice(&obj).unwrap();
        assert_eq!(b.service.port, 443);
        assert_eq!(b.ca_bundle, b"ca");
        assert!(b.available);
        let local =
            json!({"metadata": {"name": "v1.apps"}, "spec": {"group": "apps", "version": "v1"}});
        assert!(Backend::from_apiservice(&local).is_none());
        let agg = Aggregator::default();
        agg.set_backends(vec![b]);
        assert!(agg.route("metrics.example.com", "v1beta1").is_some());
        assert!(agg.route("metrics.example.com", "v1").is_none());
        assert!(agg.serves_group("metrics.example.com"));
    }
}
