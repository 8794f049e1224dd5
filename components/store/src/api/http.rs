//! Plain-HTTP /health and /metrics on --listen-metrics-urls, like etcd's metrics listener
//! (kubeadm's liveness probe calls http://127.0.0.1:2381/health).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::api::grpc::maintenance;
use crate::member::context::StoreContext;

const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

pub fn router(ctx: Arc<StoreContext>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/readyz", get(health))
        .route("/healthz", get(health))
        .route("/livez", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .with_state(ctx)
}

/// Healthy when a leader exists and a linearizable read barrier succeeds, as etcd checks.
async fn health(State(ctx): State<Arc<StoreContext>>) -> impl IntoResponse {
    let has_leader = ctx.raft.metrics().borrow().current_leader.is_some();
    let reason = if !has_leader {
        Some("RAFT NO LEADER".to_string())
    } else {
        match tokio::time::timeout(HEALTH_TIMEOUT, ctx.linearizable()).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.message),
            Err(_) => Some("timed out".to_string()),
        }
    };
    let (code, body) = match reason {
        None => (
            StatusCode::OK,
            r#"{"health":"true","reason":""}"#.to_string(),
        ),
        Some(r) => (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"health": "false", "reason": r}).to_string(),
        ),
    };
    (code, [(header::CONTENT_TYPE, "application/json")], body)
}

async fn metrics(State(ctx): State<Arc<StoreContext>>) -> impl IntoResponse {
    let m = ctx.raft.metrics().borrow().clone();
    let status = maintenance::status(&ctx);
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: i64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    };
    gauge(
        "etcd_server_has_leader",
        "Whether or not a leader exists. 1 is existence, 0 is not.",
        i64::from(m.current_leader.is_some()),
    );
    gauge(
        "etcd_server_is_leader",
        "Whether or not this member is a leader. 1 if is, 0 otherwise.",
        i64::from(m.current_leader == Some(m.id)),
    );
    gauge(
        "etcd_mvcc_db_total_size_in_bytes",
        "Total size of the underlying database physically allocated in bytes.",
        status.db_size,
    );
    gauge(
        "etcd_debugging_mvcc_current_revision",
        "The current revision of store.",
        ctx.mvcc.revision(),
    );
    gauge(
        "etcd_debugging_mvcc_compact_revision",
        "The revision of the last compaction in store.",
        ctx.mvcc.compact_revision(),
    );
    gauge(
        "etcd_server_proposals_applied_total",
        "The total number of consensus proposals applied.",
        status.raft_applied_index as i64,
    );
    gauge(
        "etcd_server_proposals_committed_total",
        "The total number of consensus proposals committed.",
        status.raft_index as i64,
    );
    gauge(
        "etcd_server_quota_backend_bytes",
        "Current backend storage quota size in bytes.",
        status.db_size_quota,
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}
