//! Starting and stopping the server: connect the store, create the default namespaces, then accept
//! TLS connections; each connection's client certificate becomes the request identity.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use crate::allocator::{ServiceAllocator, NODE_PORTS};
use crate::auth::{user_from_certificate, Identity};
use crate::config::Options;
use crate::handlers::router;
use crate::metrics::Metrics;
use crate::registry::lifecycle::{prepare_create, to_stored, FieldValidation};
use crate::registry::priority_classes::{PRIORITY_CLASSES, SYSTEM_CLASSES};
use crate::registry::resources::{BUILTIN_RUNTIME_CLASSES, DEFAULT_NAMESPACES, NAMESPACES};
use crate::registry::runtime_classes::RUNTIME_CLASSES;
use crate::registry::strategy::ResourceSpec;
use crate::registry::Registry;
use crate::state::AppState;
use crate::storage::{Store, StoreError};
use crate::tls::{server_config, TlsError};
use crate::tokens::jwt::ServiceAccountKeys;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long start-up waits for the store before giving up.
const STORE_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("creating default namespace {name}: {message}")]
    Bootstrap { name: String, message: String },
    #[error("{0}")]
    Allocator(#[from] crate::allocator::AllocatorError),
    #[error("kubelet client: {0}")]
    Kubelet(#[from] crate::kubelet_client::KubeletError),
    #[error("service-account keys: {0}")]
    Keys(#[from] crate::tokens::jwt::JwtError),
    #[error("bootstrap RBAC policy: {0}")]
    Policy(#[from] crate::rbac::RbacError),
    #[error("bootstrap objects: {0}")]
    Objects(#[from] crate::bootstrap::BootstrapError),
    #[error("{0}")]
    Admission(#[from] crate::admission::AdmissionError),
    #[error(transparent)]
    PodSecurityConfig(#[from] crate::admission::pod_security::config::ConfigError),
    #[error("aggregation layer: {0}")]
    Aggregator(#[from] crate::aggregator::AggregatorError),
    #[error("{0}")]
    Audit(#[from] crate::audit::AuditError),
    #[error("{0}")]
    Encryption(#[from] crate::encryption::ConfigError),
}

/// A running server; dropping it (or `shutdown`) stops accepting and closes every connection.
pub struct RunningServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl RunningServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Waits until the server stops (it only stops through `shutdown` / drop).
    pub async fn wait(&mut self) {
        if let Some(task) = self.task.as_mut() {
            let _ = task.await;
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn connect_store(
    options: &Options,
    encryption: Option<Arc<crate::encryption::Transformers>>,
) -> Result<Store, ServerError> {
    let deadline = tokio::time::Instant::now() + STORE_WAIT;
    loop {
        let attempt = async {
            let store = Store::connect(&options.store())
                .await?
                .with_encryption(encryption.clone());
            ensure_default_namespaces(&store).await?;
            Ok::<_, ServerError>(store)
        };
        match attempt.await {
            Ok(store) => return Ok(store),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, "store not ready yet, retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Creates the objects every cluster has when they do not exist: the namespaces default,
/// kube-system, kube-public and kube-node-lease, kiln's built-in RuntimeClasses and upstream's
/// system PriorityClasses. An existing
/// object is left as it is (an operator may have labelled or annotated it).
pub async fn ensure_default_namespaces(store: &Store) -> Result<(), ServerError> {
    for name in DEFAULT_NAMESPACES {
        let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        ensure_object(store, &NAMESPACES, name, ns).await?;
    }
    for (name, handler) in BUILTIN_RUNTIME_CLASSES {
        let class = serde_json::json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": name, "labels": {"kiln.dev/builtin": "true"}},
            "handler": handler});
        ensure_object(store, &RUNTIME_CLASSES, name, class).await?;
    }
    for (name, value, description) in SYSTEM_CLASSES {
        let class = serde_json::json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "description": description});
        ensure_object(store, &PRIORITY_CLASSES, name, class).await?;
    }
    Ok(())
}

async fn ensure_object(
    store: &Store,
    spec: &ResourceSpec,
    name: &str,
    obj: serde_json::Value,
) -> Result<(), ServerError> {
    let obj = prepare_create(spec, None, obj, FieldValidation::Strict).map_err(|e| {
        ServerError::Bootstrap {
            name: name.to_string(),
            message: e.message,
        }
    })?;
    match store.create(&spec.key(None, name), to_stored(&obj)).await {
        Ok(_) => tracing::info!(resource = spec.plural, name, "created built-in object"),
        Err(StoreError::AlreadyExists) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

pub async fn start(options: Options) -> Result<RunningServer, ServerError> {
    let tls = server_config(
        &options.tls_cert_file,
        &options.tls_private_key_file,
        options.client_ca_file.as_deref(),
    )?;
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let allocator = ServiceAllocator::new(&options.service_cluster_ip_range, NODE_PORTS)?;
    // Read before the store is reached, so a bad file stops the start at once.
    let pod_security_config = crate::admission::pod_security::config::load(
        options.admission_control_config_file.as_deref(),
    )?;
    let sa_keys = if options.service_account_signing_key_file.is_some()
        || !options.service_account_key_file.is_empty()
    {
        let audiences = if options.api_audiences.is_empty() {
            vec![options.service_account_issuer.clone()]
        } else {
            options.api_audiences.clone()
        };
        Some(ServiceAccountKeys::load(
            options.service_account_signing_key_file.as_deref(),
            &options.service_account_key_file,
            &options.service_account_issuer,
            audiences,
        )?)
    } else {
        None
    };
    let kubelet = crate::kubelet_client::KubeletClient::new(
        options.kubelet_client_certificate.as_deref(),
        options.kubelet_client_key.as_deref(),
        options.kubelet_certificate_authority.as_deref(),
    )?;
    let front_proxy = crate::aggregator::FrontProxy::load(
        options.proxy_client_cert_file.as_deref(),
        options.proxy_client_key_file.as_deref(),
    )?;
    let authentication_info =
        crate::aggregator::authentication_configmap::AuthenticationInfo::from_flags(
            options.client_ca_file.as_deref(),
            options.requestheader_client_ca_file.as_deref(),
            &options.requestheader_allowed_names,
            &options.requestheader_username_headers,
            &options.requestheader_group_headers,
            &options.requestheader_extra_headers_prefix,
        )?;
    // Audit policy and encryption configuration: a bad file stops the start, naming the field.
    let auditor = crate::audit::Auditor::from_options(&options)?;
    let encryption = match options.encryption_provider_config.as_deref() {
        Some(path) => {
            let entries = crate::encryption::load(std::path::Path::new(path))?;
            tracing::info!(path, "encryption at rest on");
            Some(Arc::new(crate::encryption::Transformers::new(
                entries,
                &Registry::default().all(),
            )))
        }
        None => None,
    };
    let store = connect_store(&options, encryption).await?;

    let bind = SocketAddr::new(options.bind_address, options.secure_port);
    let listener = TcpListener::bind(bind)
        .await
        .map_err(|source| ServerError::Bind { addr: bind, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| ServerError::Bind { addr: bind, source })?;
    let advertise_ip = options.advertise_address.unwrap_or(addr.ip());
    let advertise = SocketAddr::new(advertise_ip, addr.port());
    crate::bootstrap::kubernetes_service(&store, &allocator, advertise).await?;
    crate::rbac::ensure_bootstrap_policy(&store).await?;
    if let Err(e) = crate::flowcontrol::bootstrap::ensure_defaults(&store).await {
        // Serving matters more than the APF objects; the next start tries again.
        tracing::warn!(error = %e, "creating the flow-control objects failed");
    }
    let (terminating, terminating_rx) = tokio::sync::mpsc::unbounded_channel();
    let admission = crate::admission::Plugins::from_flags(
        &options.enable_admission_plugins,
        &options.disable_admission_plugins,
        options.service_account_signing_key_file.is_some(),
    )?;
    let pod_security = crate::admission::pod_security::PodSecurity {
        enabled: admission.pod_security,
        config: pod_security_config,
    };
    let (stop, stopped) = watch::channel(false);
    let webhooks =
        crate::admission::webhook::Webhooks::start(store.clone(), stopped.clone()).await?;
    let state = Arc::new(AppState {
        store: store.clone(),
        registry: Registry::default(),
        metrics: Metrics::default(),
        advertise: advertise.to_string(),
        bookmark_interval: options.bookmark_interval(),
        allocator,
        authorizer: crate::rbac::Authorizer::cached(store.clone(), stopped.clone()),
        tokens: crate::tokens::TokenAuthenticator::new(store.clone(), sa_keys),
        kubelet,
        terminating,
        admission,
        pod_security,
        webhooks,
        aggregator: crate::aggregator::Aggregator::new(front_proxy),
        resource_metrics: Default::default(),
        limits: crate::flowcontrol::limiter::Limits::new(
            options.max_requests_inflight,
            options.max_mutating_requests_inflight,
        ),
    });
    if options.namespace_cleanup {
        tokio::spawn(crate::handlers::namespaces::run(
            state.clone(),
            terminating_rx,
            stopped.clone(),
        ));
    }
    tokio::spawn(crate::compaction::run(
        store.etcd_client(),
        options.etcd_compaction_interval,
        stopped.clone(),
    ));
    // Established CRDs are served from the first request on, also after a restart.
    if let Err(e) = crate::crd::controller::load(&store, &state.registry).await {
        tracing::warn!(error = %e, "loading CRDs failed; the CRD controller retries");
    }
    tokio::spawn(crate::crd::controller::run(
        store.clone(),
        state.registry.clone(),
        stopped.clone(),
    ));
    // ValidatingAdmissionPolicies' status.typeChecking (upstream's policy status controller).
    tokio::spawn(crate::policy_status::run(
        store.clone(),
        state.registry.clone(),
        stopped.clone(),
    ));
    // The aggregation layer: extension servers' trust anchors, the last written availability
    // (so a restart proxies at once), then the availability controller.
    if let Err(e) =
        crate::aggregator::authentication_configmap::publish(&store, &authentication_info).await
    {
        tracing::warn!(error = %e, "publishing extension-apiserver-authentication failed");
    }
    if let Err(e) = crate::aggregator::availability::load(&store, &state.aggregator).await {
        tracing::warn!(error = %e, "loading APIServices failed; the availability controller retries");
    }
    tokio::spawn(crate::aggregator::availability::run(
        store.clone(),
        state.registry.clone(),
        state.aggregator.clone(),
        stopped.clone(),
    ));
    let app = crate::audit::layer(router(state), auditor);
    tracing::info!(%addr, "serving the Kubernetes API");
    let task = tokio::spawn(accept_loop(listener, acceptor, app, stopped));
    Ok(RunningServer {
        addr,
        stop,
        task: Some(task),
    })
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: axum::Router,
    mut stopped: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let (tcp, peer) = tokio::select! {
            _ = stopped.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Usually EMFILE; back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // Nagle off: a small response or watch event written behind another unacknowledged one
        // would otherwise wait for the client's delayed ACK (~40 ms).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "setting TCP_NODELAY failed");
        }
        let acceptor = acceptor.clone();
        let app = app.clone();
        let mut conn_stopped = stopped.clone();
        connections.spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let client_cert = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
            let cert_left = client_cert
                .and_then(|c| crate::auth::certificate_not_after(c))
                .map(|t| {
                    t.duration_since(std::time::SystemTime::now())
                        .unwrap_or_default()
                });
            let identity = match client_cert {
                Some(cert) => match user_from_certificate(cert) {
                    Ok(user) => Identity::User(user),
                    Err(e) => {
                        tracing::warn!(%peer, error = %e, "unusable client certificate");
                        Identity::Anonymous
                    }
                },
                None => Identity::Anonymous,
            };
            let service = TowerToHyperService::new(
                app.layer(Extension(identity))
                    .layer(Extension(crate::audit::SourceIp(peer.ip()))),
            );
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            tokio::select! {
                res = conn => {
                    if let Err(e) = res {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                }
                _ = conn_stopped.changed() => {}
                // The certificate that authenticated this connection expired: end it.
                _ = async {
                    match cert_left {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending().await,
                    }
                } => {
                    tracing::info!(%peer, "client certificate expired; closing its connection");
                }
            }
        });
    }
    connections.shutdown().await;
}
