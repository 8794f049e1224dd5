//! The server's side of a WebSocket handshake (RFC 6455 §4.2.2), shared by every handler that
//! answers one: logs, exec translated from v5, and port-forward tunnels.

use axum::http::{header, HeaderMap, HeaderValue};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use crate::status::ApiError;

/// Writes the 101 answer's headers into `out`: Upgrade, the accept key derived from the client's
/// Sec-WebSocket-Key, and the chosen subprotocol if there is one.
pub(crate) fn accept_headers(
    request: &HeaderMap,
    protocol: Option<&str>,
    out: &mut HeaderMap,
) -> Result<(), ApiError> {
    let key = request
        .get(header::SEC_WEBSOCKET_KEY)
        .ok_or_else(|| ApiError::bad_request("missing Sec-WebSocket-Key"))?;
    out.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    out.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    out.insert(
        header::SEC_WEBSOCKET_ACCEPT,
        HeaderValue::from_str(&derive_accept_key(key.as_bytes()))
            .map_err(|e| ApiError::internal(e.to_string()))?,
    );
    if let Some(p) = protocol {
        let v = HeaderValue::from_str(p).map_err(|e| ApiError::internal(e.to_string()))?;
        out.insert(header::SEC_WEBSOCKET_PROTOCOL, v);
    }
    Ok(())
}
