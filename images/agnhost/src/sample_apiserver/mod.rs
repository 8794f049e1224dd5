//! `sample-apiserver`: kiln's own implementation of what the Aggregator conformance entry needs
//! from k8s.io/sample-apiserver — an extension API server for wardle.example.com/v1alpha1 (Flunder,
//! Fischer) behind an APIService. HTTPS on `--secure-port` with `--tls-cert-file` and
//! `--tls-private-key-file`; discovery; the registry verbs; `/healthz`, `/readyz`, `/livez`.
//! Like any aggregated server it trusts the cluster, not its clients: who a request comes from is
//! decided from `kube-system/extension-apiserver-authentication` ([`trust`]), what they may do by
//! a SubjectAccessReview ([`authz`]), both through the pod's in-cluster credentials ([`kube`]).
//! Objects live in memory ([`store`]): run one replica.

pub mod api;
pub mod authz;
pub mod kube;
pub mod meta;
pub mod status;
pub mod store;
pub mod tls;
pub mod trust;
pub mod wardle;

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use clap::Args;
use http_body_util::{BodyExt, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::pki_types::CertificateDer;
use tokio::net::TcpListener;

use kube::Kube;
use status::ApiError;
use trust::Trust;

#[derive(Debug, Clone, Args)]
pub struct SampleApiserverArgs {
    /// The port on which to serve HTTPS with authentication and authorization.
    #[arg(long = "secure-port", default_value_t = 443)]
    pub secure_port: u16,
    /// File containing the default x509 Certificate for HTTPS. (CA cert, if any, concatenated after
    /// server cert).
    #[arg(long = "tls-cert-file", default_value = "")]
    pub tls_cert_file: String,
    /// File containing the default x509 private key matching --tls-cert-file.
    #[arg(long = "tls-private-key-file", default_value = "")]
    pub tls_private_key_file: String,
    /// List of etcd servers to connect with. Accepted for upstream's manifests; objects are kept in
    /// memory.
    #[arg(long = "etcd-servers", value_delimiter = ',')]
    pub etcd_servers: Vec<String>,
    /// Audit flags upstream's manifest passes; accepted, no audit log is written.
    #[arg(long = "audit-log-path", default_value = "")]
    pub audit_log_path: String,
    #[arg(long = "audit-log-maxage", default_value_t = 0)]
    pub audit_log_maxage: u32,
    #[arg(long = "audit-log-maxbackup", default_value_t = 0)]
    pub audit_log_maxbackup: u32,
}

/// Where the delegated-authentication configuration is read.
pub const AUTH_CONFIGMAP: &str =
    "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication";
/// Largest request body taken (the generic apiserver's 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

pub struct State {
    pub store: store::Store,
    pub kube: Arc<dyn Kube>,
    pub trust: RwLock<Trust>,
    pub authz: authz::Authorizer,
}

impl State {
    pub fn new(kube: Arc<dyn Kube>) -> State {
        State {
            store: store::Store::default(),
            kube,
            trust: RwLock::new(Trust::default()),
            authz: authz::Authorizer::default(),
        }
    }

    /// Reads the authentication ConfigMap once; Ok(true) when a trust was loaded.
    pub async fn refresh_trust(&self) -> Result<bool, String> {
        let (code, body) = self
            .kube
            .get(AUTH_CONFIGMAP)
            .await
            .map_err(|e| e.to_string())?;
        if code != 200 {
            return Err(format!(
                "Unable to get configmap/extension-apiserver-authentication in kube-system: {code}: {}",
                body["message"].as_str().unwrap_or("")
            ));
        }
        let trust = Trust::from_configmap(&body["data"]).map_err(|e| e.to_string())?;
        let loaded = trust.is_loaded();
        *self.trust.write().unwrap_or_else(|e| e.into_inner()) = trust;
        Ok(loaded)
    }
}

/// Keeps the trust current, as upstream's dynamic CA controllers do: often until it is loaded,
/// then every half minute.
async fn refresh_trust_forever(state: Arc<State>) {
    loop {
        let wait = match state.refresh_trust().await {
            Ok(true) => Duration::from_secs(30),
            Ok(false) => Duration::from_secs(2),
            Err(e) => {
                tracing::warn!("{e}; requests are anonymous until it can be read");
                Duration::from_secs(2)
            }
        };
        tokio::time::sleep(wait).await;
    }
}

/// One request: authenticate, authorize, then serve.
pub async fn handle<B>(
    state: Arc<State>,
    chain: Arc<Vec<CertificateDer<'static>>>,
    req: http::Request<B>,
) -> Response
where
    B: hyper::body::Body<Data = bytes::Bytes> + Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().map(str::to_string);
    let target = api::parse(&path);
    let attrs = match api::attributes(&parts.method, &path, query.as_deref(), &target) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    let user = {
        let trust = state.trust.read().unwrap_or_else(|e| e.into_inner());
        trust.authenticate(&chain, &parts.headers)
    };
    let user = match user {
        Ok(u) => u,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = state
        .authz
        .authorize(state.kube.as_ref(), &user, &attrs)
        .await
    {
        tracing::info!(user = %user.name, verb = %attrs.verb, path = %path, "forbidden");
        return e.into_response();
    }
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return ApiError::bad_request(e.to_string()).into_response(),
    };
    let content_type = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let backend = api::Backend {
        store: &state.store,
        kube: state.kube.as_ref(),
    };
    let resp = api::serve(
        &backend,
        target,
        &parts.method,
        query.as_deref(),
        &content_type,
        &body,
    )
    .await;
    tracing::debug!(user = %user.name, method = %parts.method, path = %path, status = resp.status().as_u16(), "served");
    resp
}

/// Serves HTTPS on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, tls: Arc<rustls::ServerConfig>, state: Arc<State>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let stream = match acceptor.accept(stream).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let chain: Arc<Vec<CertificateDer<'static>>> = Arc::new(
                stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .map(|c| c.iter().map(|d| d.clone().into_owned()).collect())
                    .unwrap_or_default(),
            );
            let service = hyper::service::service_fn(move |req| {
                let (state, chain) = (state.clone(), chain.clone());
                async move { Ok::<_, std::convert::Infallible>(handle(state, chain, req).await) }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Starts serving; exits 1 when the certificate or the in-cluster configuration cannot be had
/// (upstream's server fails to start without either).
pub async fn run(args: SampleApiserverArgs) -> Result<i32, String> {
    if !args.etcd_servers.is_empty() {
        tracing::info!(etcd = ?args.etcd_servers, "objects are kept in memory; --etcd-servers is not used");
    }
    let tls = tls::server_config(
        Path::new(&args.tls_cert_file),
        Path::new(&args.tls_private_key_file),
    )
    .map_err(|e| e.to_string())?;
    let kube = kube::InCluster::from_env().map_err(|e| e.to_string())?;
    let state = Arc::new(State::new(Arc::new(kube)));
    tokio::spawn(refresh_trust_forever(state.clone()));
    let listener = crate::server::bind_tcp(args.secure_port)
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!("Serving securely on [::]:{}", args.secure_port);
    serve(listener, tls, state).await;
    Ok(0)
}

#[cfg(test)]
mod tests;
