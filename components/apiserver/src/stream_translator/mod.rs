//! pods/exec and pods/attach over WebSockets with the `v5.channel.k8s.io` subprotocol (kubectl
//! ≥ 1.30's default), as upstream's StreamTranslatorHandler: the API server ends the WebSocket
//! itself and speaks SPDY (`v5`/`v4.channel.k8s.io`) to the kubelet, which hands the upgrade to the
//! container runtime's streaming server as it always did.
//!
//! Why here and not in the kubelet: runtimes' streaming servers (containerd's, CRI-O's) speak the
//! WebSocket protocols v1–v4 only, and v4 cannot half-close stdin, so `echo hi | kubectl exec -i
//! pod -- cat` would never end; someone has to turn v5 into SPDY, and upstream does it in the API
//! server, so every kubelet and runtime keeps working unchanged. Requests that do not offer v5
//! (SPDY, or older WebSocket subprotocols such as `v4.channel.k8s.io` and `channel.k8s.io`) are
//! proxied to the kubelet as before (`handlers/proxy.rs`).

pub mod channels;
pub mod counter;
pub mod session;
pub mod spdy;

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use http_body_util::BodyExt;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;

use crate::kubelet_client::KubeletClient;
use crate::status::ApiError;
use channels::Options;

/// The remote command subprotocol with the CLOSE signal.
pub const V5: &str = "v5.channel.k8s.io";
/// The SPDY protocols offered to the kubelet, best first (client-go's SPDY executor offers these
/// before v3…v1, which carry no exit codes and are not translated).
const SPDY_PROTOCOLS: &[&str] = &[V5, "v4.channel.k8s.io"];
/// A refusal body is read up to this size.
const MAX_REFUSAL: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum TranslatorError {
    #[error("{0}")]
    Spdy(String),
    #[error("{0}")]
    Kubelet(String),
}

/// Whether a request is for the translator: a WebSocket upgrade whose offered subprotocols include
/// `v5.channel.k8s.io` (upstream's IsWebSocketRequestWithStreamCloseProtocol).
pub fn wants_translation(headers: &HeaderMap) -> bool {
    let websocket = headers
        .get_all(header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.eq_ignore_ascii_case("websocket"));
    websocket
        && headers
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|p| p.trim() == V5)
}

/// The 101 answer to the client's handshake, choosing `v5.channel.k8s.io`.
fn accept(request: &HeaderMap) -> Result<Response, ApiError> {
    let mut out = Response::new(Body::empty());
    *out.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    crate::websocket_accept::accept_headers(request, Some(V5), out.headers_mut())?;
    Ok(out)
}

/// Answers the client's WebSocket handshake and runs the session in the background: dial the
/// kubelet's `kubelet_path` with a SPDY upgrade, then translate until the command ends; `counter`
/// counts the session's outcome.
pub fn serve(
    kubelet: &KubeletClient,
    counter: counter::Requests,
    addr: SocketAddr,
    kubelet_path: String,
    pairs: &[(String, String)],
    mut req: Request,
) -> Result<Response, ApiError> {
    let out = accept(req.headers())?;
    let opts = Options::from_query(pairs);
    let client_upgrade = hyper::upgrade::on(&mut req);
    let kubelet = kubelet.clone();
    tokio::spawn(async move {
        let client = match client_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(error = %e, "client websocket upgrade failed");
                counter.observe(400);
                return;
            }
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(client), Role::Server, None).await;
        let dial = dial(kubelet, addr, kubelet_path.clone());
        let code = session::run(ws, opts, dial).await;
        tracing::debug!(path = %kubelet_path, code, "stream translator session ended");
        counter.observe(code);
    });
    Ok(out)
}

/// The kubelet's SPDY upgrade (upstream's SPDY executor: POST, the protocols in X-Stream-Protocol-
/// Version). A refusal becomes the Status the client is told.
async fn dial(
    kubelet: KubeletClient,
    addr: SocketAddr,
    path: String,
) -> Result<Upgraded, (Value, u16)> {
    let internal = |e: String| (channels::internal(&e), 500);
    let mut req = http::Request::post(path)
        .header(header::HOST, addr.to_string())
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "SPDY/3.1");
    for p in SPDY_PROTOCOLS {
        req = req.header("x-stream-protocol-version", *p);
    }
    let req = req
        .body(Body::empty())
        .map_err(|e| internal(e.to_string()))?;
    let resp = kubelet
        .send(addr, req)
        .await
        .map_err(|e| internal(e.to_string()))?;
    let upgraded = resp.status() == StatusCode::SWITCHING_PROTOCOLS
        && resp
            .headers()
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("spdy/3.1"));
    if !upgraded {
        let status = resp.status().as_u16();
        let body = http_body_util::Limited::new(resp.into_body(), MAX_REFUSAL)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(channels::refusal(status, &body));
    }
    let protocol = resp
        .headers()
        .get("x-stream-protocol-version")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if !SPDY_PROTOCOLS.contains(&protocol.as_str()) {
        return Err(internal(format!(
            "the container runtime chose stream protocol {protocol:?}; only {} are translated",
            SPDY_PROTOCOLS.join(", ")
        )));
    }
    hyper::upgrade::on(resp)
        .await
        .map_err(|e| internal(format!("kubelet upgrade failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::headers;

    #[test]
    fn only_websockets_offering_v5_are_translated() {
        assert!(wants_translation(&headers(&[
            ("upgrade", "websocket"),
            ("sec-websocket-protocol", "v5.channel.k8s.io"),
        ])));
        assert!(wants_translation(&headers(&[
            ("upgrade", "WebSocket"),
            (
                "sec-websocket-protocol",
                "v4.channel.k8s.io, v5.channel.k8s.io"
            ),
        ])));
        // v4 and older WebSocket protocols go to the runtime's own WebSocket server.
        assert!(!wants_translation(&headers(&[
            ("upgrade", "websocket"),
            ("sec-websocket-protocol", "v4.channel.k8s.io"),
        ])));
        assert!(!wants_translation(&headers(&[
            ("upgrade", "SPDY/3.1"),
            ("x-stream-protocol-version", "v5.channel.k8s.io"),
        ])));
    }

    #[test]
    fn handshake_answer_chooses_v5() {
        let out = accept(&headers(&[(
            "sec-websocket-key",
            "dGhlIHNhbXBsZSBub25jZQ==",
        )]))
        .unwrap();
        assert_eq!(out.status(), StatusCode::SWITCHING_PROTOCOLS);
        // RFC 6455's example key and accept value.
        assert_eq!(
            out.headers()["sec-websocket-accept"],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(out.headers()["sec-websocket-protocol"], V5);
        assert!(accept(&HeaderMap::new()).is_err());
    }
}
