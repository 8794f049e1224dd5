//! `pods/<name>/portforward`: authorized as `create` (like exec), admitted as CONNECT with
//! PodPortForwardOptions, then proxied to the pod's kubelet (`/portForward/<ns>/<pod>`), which hands
//! it to the container runtime's streaming server.
//!
//! Two ways in, as upstream's API server:
//! - SPDY (`Upgrade: SPDY/3.1`, `X-Stream-Protocol-Version: portforward.k8s.io`; kubectl ≤ 1.30, and
//!   any WebSocket client of the old channel protocol): the upgrade is forwarded and the two upgraded
//!   connections spliced, as for exec.
//! - A WebSocket whose subprotocol is `SPDY/3.1+portforward.k8s.io` (kubectl ≥ 1.31,
//!   PortForwardWebsockets): SPDY tunnelled in binary WebSocket messages. The API server ends the
//!   WebSocket, speaks a plain SPDY upgrade to the kubelet, and copies the SPDY bytes between the two
//!   (upstream's TunnelingHandler); the kubelet and the runtime only ever see SPDY. A kubelet that does
//!   not upgrade has its answer passed back as it is, so kubectl falls back to SPDY and shows the error.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::crud::read;
use super::proxy::{copy_upgrade_headers, encode, kubelet_error, kubelet_of};
use crate::admission::webhook::connect;
use crate::request::Target;
use crate::state::AppState;
use crate::status::ApiError;

/// The WebSocket subprotocol prefix of a SPDY tunnel (upstream's WebsocketsSPDYTunnelingPrefix).
const TUNNEL_PREFIX: &str = "SPDY/3.1+";
/// Only Kubernetes' own stream protocols are tunnelled (upstream's KubernetesSuffix).
const KUBERNETES_SUFFIX: &str = ".k8s.io";

/// The SPDY protocols a tunnelling WebSocket request offers (`SPDY/3.1+portforward.k8s.io` →
/// `portforward.k8s.io`); empty for any other request.
pub fn tunneled_protocols(headers: &HeaderMap) -> Vec<String> {
    let websocket = headers
        .get_all(header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.eq_ignore_ascii_case("websocket"));
    if !websocket {
        return Vec::new();
    }
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| p.starts_with(TUNNEL_PREFIX) && p.ends_with(KUBERNETES_SUFFIX))
        .map(|p| p[TUNNEL_PREFIX.len()..].to_string())
        .collect()
}

/// PodPortForwardOptions as the kubelet reads them: each of `ports` (repeated or comma-separated)
/// becomes a `port` (upstream's streamParams).
pub fn kubelet_query(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .filter(|(k, _)| k == "ports")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| format!("port={}", encode(p)))
        .collect::<Vec<_>>()
        .join("&")
}

pub async fn serve(
    state: &AppState,
    target: &Target,
    _query: &HashMap<String, String>,
    mut req: Request,
) -> Result<Response, ApiError> {
    let name = target.name.as_deref().unwrap_or("");
    let (pod, _) = read(state, target, name).await?;
    let addr = kubelet_of(state, name, &pod).await?;
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let pairs: Vec<(String, String)> = axum::extract::Query::try_from_uri(req.uri())
        .map(|axum::extract::Query(p)| p)
        .unwrap_or_default();
    if let Some(options) = connect::options_object("portforward", &pairs) {
        connect::admit_connect(&state.admission_context(), target, "portforward", options).await?;
    }
    let uri = format!(
        "/portForward/{}/{}?{}",
        encode(ns),
        encode(name),
        kubelet_query(&pairs)
    );
    let client_upgrade = hyper::upgrade::on(&mut req);
    let tunneled = tunneled_protocols(req.headers());
    let mut upstream = http::Request::builder()
        .method(req.method().clone())
        .uri(uri)
        .header(header::HOST, addr.to_string())
        .body(Body::empty())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    if tunneled.is_empty() {
        copy_upgrade_headers(req.headers(), upstream.headers_mut());
    } else {
        spdy_upgrade(upstream.headers_mut(), &tunneled);
        *upstream.method_mut() = http::Method::POST;
    }
    let resp = state
        .kubelet
        .send(addr, upstream)
        .await
        .map_err(kubelet_error)?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(super::proxy::refusal(resp));
    }
    let mut out = Response::new(Body::empty());
    *out.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    if tunneled.is_empty() {
        copy_upgrade_headers(resp.headers(), out.headers_mut());
    } else {
        let upgraded_to_spdy = resp
            .headers()
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("spdy/3.1"));
        if !upgraded_to_spdy {
            return Err(ApiError::internal(
                "unable to upgrade: missing upgrade headers in response",
            ));
        }
        websocket_accept(req.headers(), resp.headers(), out.headers_mut())?;
    }
    let key = format!("{ns}/{name}");
    tokio::spawn(async move {
        let upstream = match hyper::upgrade::on(resp).await {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(pod = %key, error = %e, "kubelet port-forward upgrade failed");
                return;
            }
        };
        let client = match client_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(pod = %key, error = %e, "client port-forward upgrade failed");
                return;
            }
        };
        let ended = if tunneled.is_empty() {
            let mut a = TokioIo::new(client);
            let mut b = TokioIo::new(upstream);
            tokio::io::copy_bidirectional(&mut a, &mut b)
                .await
                .map(|_| ())
        } else {
            tunnel(client, upstream).await
        };
        if let Err(e) = ended {
            tracing::debug!(pod = %key, error = %e, "port-forward stream ended");
        }
    });
    Ok(out)
}

/// The kubelet request of a tunnel: a SPDY upgrade offering the tunnelled protocols (upstream's
/// createSPDYRequest; the WebSocket headers are not copied).
fn spdy_upgrade(headers: &mut HeaderMap, protocols: &[String]) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    for p in protocols {
        if let Ok(v) = HeaderValue::from_str(p) {
            headers.append("x-stream-protocol-version", v);
        }
    }
}

/// The WebSocket handshake answer: the accept key, and the kubelet's chosen SPDY protocol as the
/// tunnel's subprotocol.
fn websocket_accept(
    request: &HeaderMap,
    kubelet: &HeaderMap,
    out: &mut HeaderMap,
) -> Result<(), ApiError> {
    let chosen = kubelet
        .get("x-stream-protocol-version")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|p| !p.is_empty());
    let protocol = chosen.map(|p| format!("{TUNNEL_PREFIX}{p}"));
    crate::websocket_accept::accept_headers(request, protocol.as_deref(), out)
}

/// Copies SPDY bytes between the client's WebSocket (each binary message a piece of the stream)
/// and the kubelet's upgraded connection until either side ends.
async fn tunnel(client: Upgraded, kubelet: Upgraded) -> std::io::Result<()> {
    let ws = WebSocketStream::from_raw_socket(TokioIo::new(client), Role::Server, None).await;
    let (mut ws_tx, mut ws_rx) = ws.split();
    let (mut k_rx, mut k_tx) = tokio::io::split(TokioIo::new(kubelet));
    let to_kubelet = async {
        while let Some(msg) = ws_rx.next().await {
            match msg.map_err(std::io::Error::other)? {
                Message::Binary(data) => k_tx.write_all(&data).await?,
                Message::Close(_) => break,
                // Pings are answered by the WebSocket layer; text is not part of a tunnel.
                Message::Text(_) => {
                    return Err(std::io::Error::other("invalid message type received"))
                }
                _ => {}
            }
        }
        k_tx.shutdown().await
    };
    let to_client = async {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            let n = k_rx.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            ws_tx
                .send(Message::Binary(buf[..n].to_vec().into()))
                .await
                .map_err(std::io::Error::other)?;
        }
        let _ = ws_tx.send(Message::Close(None)).await;
        ws_tx.close().await.map_err(std::io::Error::other)
    };
    // Either direction ending ends the tunnel (the SPDY session is over).
    tokio::select! {
        r = to_kubelet => r,
        r = to_client => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::headers;

    #[test]
    fn only_websockets_offering_a_spdy_tunnel_are_tunnelled() {
        let ws = headers(&[
            ("upgrade", "websocket"),
            (
                "sec-websocket-protocol",
                "SPDY/3.1+portforward.k8s.io, v4.channel.k8s.io",
            ),
        ]);
        assert_eq!(tunneled_protocols(&ws), ["portforward.k8s.io"]);
        let plain_ws = headers(&[
            ("upgrade", "websocket"),
            ("sec-websocket-protocol", "v4.channel.k8s.io"),
        ]);
        assert!(tunneled_protocols(&plain_ws).is_empty());
        let spdy = headers(&[
            ("upgrade", "SPDY/3.1"),
            ("x-stream-protocol-version", "portforward.k8s.io"),
        ]);
        assert!(tunneled_protocols(&spdy).is_empty());
        let foreign = headers(&[
            ("upgrade", "websocket"),
            ("sec-websocket-protocol", "SPDY/3.1+example.com"),
        ]);
        assert!(tunneled_protocols(&foreign).is_empty());
    }

    #[test]
    fn ports_become_the_kubelets_port_params() {
        let pairs = vec![
            ("ports".to_string(), "80,8080".to_string()),
            ("ports".to_string(), "9000".to_string()),
            ("other".to_string(), "x".to_string()),
        ];
        assert_eq!(kubelet_query(&pairs), "port=80&port=8080&port=9000");
        assert_eq!(kubelet_query(&[]), "");
    }

    #[test]
    fn the_handshake_names_the_kubelets_protocol() {
        let req = headers(&[("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")]);
        let kubelet = headers(&[("x-stream-protocol-version", "portforward.k8s.io")]);
        let mut out = HeaderMap::new();
        websocket_accept(&req, &kubelet, &mut out).unwrap();
        // RFC 6455's example key.
        assert_eq!(out["sec-websocket-accept"], "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert_eq!(out["sec-websocket-protocol"], "SPDY/3.1+portforward.k8s.io");
        let mut spdy = HeaderMap::new();
        spdy_upgrade(&mut spdy, &["portforward.k8s.io".to_string()]);
        assert_eq!(spdy["upgrade"], "SPDY/3.1");
        assert_eq!(spdy["x-stream-protocol-version"], "portforward.k8s.io");
    }
}
