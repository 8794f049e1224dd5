//! `/healthz`, `/livez`, `/readyz` and Prometheus `/metrics` for a control-plane component.
//! Plain HTTP for now (upstream serves HTTPS with delegated authn on 10259/10257); bind it to
//! 127.0.0.1 until TLS arrives. Used by kiln-scheduler and kiln-controller-manager.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;

#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Renders the metrics page on each scrape.
pub type MetricsFn = Arc<dyn Fn() -> String + Send + Sync>;

/// A running health/metrics server; stops when dropped.
pub struct HealthServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl HealthServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for HealthServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn serve(addr: SocketAddr, metrics: MetricsFn) -> Result<HealthServer, ServingError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServingError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ServingError::Bind { addr, source })?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        metrics(),
                    )
                }
            }),
        );
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "health server stopped");
        }
    });
    tracing::info!(addr = %bound, "serving /healthz and /metrics (plain HTTP)");
    Ok(HealthServer { addr: bound, task })
}
