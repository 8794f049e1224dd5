//! One HTTP port for liveness, readiness and metrics: `/health` (CoreDNS's health plugin), `/ready`
//! (its ready plugin: 200 once the first lists of both watches are in the index), the kiln names
//! `/healthz`, `/livez`, `/readyz` for the same two answers, and Prometheus `/metrics`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("--health-bind-address {addr}: cannot listen: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Shared by the watchers (which mark the lists done), the DNS loops (metrics) and the HTTP server.
#[derive(Debug, Default)]
pub struct Health {
    services_synced: AtomicBool,
    slices_synced: AtomicBool,
    pub metrics: Arc<Metrics>,
}

/// Which watch finished its first list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    Services,
    EndpointSlices,
}

impl Health {
    pub fn new() -> Arc<Self> {
        Arc::new(Health::default())
    }

    pub fn synced(&self, what: Watched) {
        let flag = match what {
            Watched::Services => &self.services_synced,
            Watched::EndpointSlices => &self.slices_synced,
        };
        if !flag.swap(true, Ordering::SeqCst) {
            tracing::info!(?what, "first list in the index");
        }
    }

    /// Both watches have delivered their first full list.
    pub fn ready(&self) -> bool {
        self.services_synced.load(Ordering::SeqCst) && self.slices_synced.load(Ordering::SeqCst)
    }

    /// What is still missing, for the 503 body.
    fn waiting_for(&self) -> String {
        let mut w = Vec::new();
        if !self.services_synced.load(Ordering::SeqCst) {
            w.push("services");
        }
        if !self.slices_synced.load(Ordering::SeqCst) {
            w.push("endpointslices");
        }
        format!(
            "not ready: waiting for the first list of {}\n",
            w.join(", ")
        )
    }
}

async fn alive() -> &'static str {
    "OK"
}

async fn ready(State(h): State<Arc<Health>>) -> Response {
    if h.ready() {
        (StatusCode::OK, "OK").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, h.waiting_for()).into_response()
    }
}

async fn metrics(State(h): State<Arc<Health>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        h.metrics.render(h.ready()),
    )
        .into_response()
}

pub fn router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/health", get(alive))
        .route("/healthz", get(alive))
        .route("/livez", get(alive))
        .route("/ready", get(ready))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .with_state(health)
}

/// Binds `addr` and serves [`router`] in the background; returns the bound address (port 0 → real).
pub async fn serve(
    addr: SocketAddr,
    health: Arc<Health>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), HealthError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| HealthError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| HealthError::Bind { addr, source })?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(health)).await {
            tracing::error!(%local, error = %e, "health server stopped");
        }
    });
    Ok((local, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_after_both_lists() {
        let h = Health::new();
        assert!(!h.ready());
        assert_eq!(
            h.waiting_for(),
            "not ready: waiting for the first list of services, endpointslices\n"
        );
        h.synced(Watched::Services);
        assert!(!h.ready());
        assert!(h.waiting_for().ends_with("of endpointslices\n"));
        h.synced(Watched::EndpointSlices);
        assert!(h.ready());
        h.synced(Watched::EndpointSlices);
        assert!(h.ready());
    }
}
