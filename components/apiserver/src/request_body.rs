//! Reading a create/update body: the size limit and the JSON/YAML/protobuf decoding, shared by the
//! handlers and the audit filter (which records request bodies).

use axum::http::HeaderMap;
use serde_json::Value;

use crate::status::ApiError;

/// Upstream's request body limit (3 MiB); larger bodies get 413.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

pub fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}")))
}

/// A create/update body as JSON, from JSON, YAML or Kubernetes protobuf (what client-go's typed
/// clientsets send, e.g. `kubectl create namespace`).
pub fn parse_body(headers: &HeaderMap, bytes: &[u8]) -> Result<Value, ApiError> {
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    match content_type.split(';').next().unwrap_or("").trim() {
        "" | "application/json" | "*/*" => parse_json(bytes),
        "application/yaml" | "application/x-yaml" | "text/yaml" => serde_norway::from_slice(bytes)
            .map_err(|e| {
                ApiError::bad_request(format!("error decoding request body as YAML: {e}"))
            }),
        "application/vnd.kubernetes.protobuf" => crate::protobuf::decode_body(bytes)
            .map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}"))),
        _ => Err(ApiError::unsupported_media_type(content_type)),
    }
}
