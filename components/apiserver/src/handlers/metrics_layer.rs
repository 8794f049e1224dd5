//! The request counter as a middleware: every response's code is counted once it is known. It takes
//! the whole state, so it lives with the router rather than in `crate::metrics`.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::state::Shared;

/// Middleware: counts every request once its response code is known.
pub async fn record(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let verb = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let user = req
        .extensions()
        .get::<crate::auth::Identity>()
        .map(|i| i.name().to_string())
        .unwrap_or_else(|| "system:anonymous".into());
    let resp = next.run(req).await;
    let code = resp.status().as_u16();
    state.metrics.observe(&verb, code);
    tracing::debug!(%verb, %path, %user, code, "request");
    resp
}
