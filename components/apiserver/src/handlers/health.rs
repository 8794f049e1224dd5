//! /healthz, /livez (process up), /readyz (the store answers), /metrics.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;

use crate::state::Shared;

const STORE_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

pub async fn healthz() -> Response {
    (StatusCode::OK, "ok").into_response()
}

pub async fn readyz(
    State(state): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let store_ok = matches!(
        tokio::time::timeout(STORE_CHECK_TIMEOUT, state.store.revision()).await,
        Ok(Ok(_))
    );
    let verbose = query.contains_key("verbose");
    let (code, body) = match (store_ok, verbose) {
        (true, false) => (StatusCode::OK, "ok".to_string()),
        (true, true) => (
            StatusCode::OK,
            "[+]ping ok\n[+]etcd ok\nreadyz check passed\n".to_string(),
        ),
        (false, _) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed\n".to_string(),
        ),
    };
    (code, body).into_response()
}

pub async fn metrics(State(state): State<Shared>) -> Response {
    (
        StatusCode::OK,
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}
