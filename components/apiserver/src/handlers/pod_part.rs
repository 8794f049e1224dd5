//! What the pod subresources that write one part of the spec (`ephemeralcontainers`, `resize`)
//! share: the pod kind served under the subresource's own update rule, each write the stored pod
//! with that part taken from the request ([`serve_part`]).

use std::collections::HashMap;

use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use super::crud::serve_part;
use crate::registry::lifecycle::UpdateScope;
use crate::registry::ResourceSpec;
use crate::request::Target;
use crate::state::AppState;
use crate::status::{ok_json, ApiError};

/// `spec`: the pod kind with the subresource's update rule; `take(stored, incoming)`: the pod to
/// write.
#[allow(clippy::too_many_arguments)]
pub async fn serve_pod_part(
    state: &AppState,
    target: &Target,
    spec: &'static ResourceSpec,
    verb: &str,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
    take: fn(&Value, &Value) -> Value,
) -> Result<Response, ApiError> {
    let target = &Target {
        spec,
        namespace: target.namespace.clone(),
        name: target.name.clone(),
        status: false,
        requester: target.requester.clone(),
    };
    let obj = serve_part(
        state,
        target,
        verb,
        headers,
        query,
        body,
        UpdateScope::Main,
        |old, incoming| Ok(take(old, incoming)),
    )
    .await?;
    Ok(ok_json(&obj))
}
