//! pods/log over a WebSocket (upstream's StreamObject with wsstream.Reader): the kubelet's log
//! stream, each piece one message — binary for no subprotocol or `binary.k8s.io`, base64 text for
//! `base64.binary.k8s.io` — after an empty first message, and a close at the end. No channel byte:
//! a log has one stream. A request that is not a WebSocket upgrade gets the plain HTTP stream.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use base64::Engine;
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::proxy;
use crate::request::Target;
use crate::state::AppState;
use crate::status::ApiError;

/// The reader protocols upstream serves (NewDefaultReaderProtocols): name → binary frames.
const PROTOCOLS: &[(&str, bool)] = &[
    ("", true),
    ("binary.k8s.io", true),
    ("base64.binary.k8s.io", false),
];
/// How long the client has to answer the closing handshake.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// None: not a WebSocket request. Some(Err): none of the offered subprotocols is served.
fn negotiate(headers: &HeaderMap) -> Option<Result<(&'static str, bool), ()>> {
    let websocket = headers
        .get_all(header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.eq_ignore_ascii_case("websocket"));
    if !websocket {
        return None;
    }
    let offered: Vec<&str> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if offered.is_empty() {
        return Some(Ok(PROTOCOLS[0]));
    }
    // The client's order decides, as x/net/websocket's handshake.
    Some(
        offered
            .iter()
            .find_map(|o| PROTOCOLS.iter().find(|(p, _)| p == o).copied())
            .ok_or(()),
    )
}

pub async fn serve(
    state: &AppState,
    target: &Target,
    query: &HashMap<String, String>,
    mut req: Request,
) -> Result<Response, ApiError> {
    let (protocol, binary) = match negotiate(req.headers()) {
        None => return proxy::log(state, target, query).await,
        Some(Ok(p)) => p,
        // x/net/websocket refuses a handshake it cannot satisfy with a bare 403.
        Some(Err(())) => {
            let mut out = Response::new(Body::empty());
            *out.status_mut() = StatusCode::FORBIDDEN;
            return Ok(out);
        }
    };
    // The handshake is checked before the kubelet is asked for anything.
    let mut out = Response::new(Body::empty());
    *out.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let protocol = (!protocol.is_empty()).then_some(protocol);
    crate::websocket_accept::accept_headers(req.headers(), protocol, out.headers_mut())?;
    let logs = proxy::log(state, target, query).await?;
    if !logs.status().is_success() {
        return Ok(logs);
    }
    let client_upgrade = hyper::upgrade::on(&mut req);
    let body = logs.into_body();
    tokio::spawn(async move {
        let client = match client_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(error = %e, "log websocket upgrade failed");
                return;
            }
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(client), Role::Server, None).await;
        if let Err(e) = copy(ws, body, binary).await {
            tracing::debug!(error = %e, "log websocket ended");
        }
    });
    Ok(out)
}

fn message(data: &[u8], binary: bool) -> Message {
    if binary {
        Message::Binary(data.to_vec().into())
    } else {
        Message::Text(
            base64::engine::general_purpose::STANDARD
                .encode(data)
                .into(),
        )
    }
}

/// Sends the log until it ends or the client goes away; what the client sends is ignored.
async fn copy<S>(
    ws: WebSocketStream<S>,
    body: Body,
    binary: bool,
) -> Result<(), tokio_tungstenite::tungstenite::Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut tx, mut rx) = ws.split();
    let mut chunks = body.into_data_stream();
    // upstream's ping: an empty message first.
    tx.send(message(&[], binary)).await?;
    let client_gone = async {
        while let Some(Ok(m)) = rx.next().await {
            if m.is_close() {
                break;
            }
        }
    };
    tokio::pin!(client_gone);
    loop {
        tokio::select! {
            chunk = chunks.next() => match chunk {
                Some(Ok(data)) if !data.is_empty() => tx.send(message(&data, binary)).await?,
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "kubelet log stream failed");
                    break;
                }
                None => break,
            },
            _ = &mut client_gone => return Ok(()),
        }
    }
    tx.send(normal_close()).await?;
    let _ = tokio::time::timeout(CLOSE_WAIT, client_gone).await;
    Ok(())
}

/// A close frame with status 1000: client-go reads only a normal closure as the end of the streams.
fn normal_close() -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::headers;

    #[test]
    fn subprotocols_as_upstream_reader() {
        assert_eq!(negotiate(&headers(&[])), None);
        assert_eq!(
            negotiate(&headers(&[("upgrade", "websocket")])),
            Some(Ok(("", true)))
        );
        assert_eq!(
            negotiate(&headers(&[
                ("upgrade", "websocket"),
                (
                    "sec-websocket-protocol",
                    "base64.binary.k8s.io, binary.k8s.io"
                ),
            ])),
            Some(Ok(("base64.binary.k8s.io", false)))
        );
        assert_eq!(
            negotiate(&headers(&[
                ("upgrade", "websocket"),
                ("sec-websocket-protocol", "v4.channel.k8s.io"),
            ])),
            Some(Err(()))
        );
    }

    #[tokio::test]
    async fn log_pieces_become_messages_then_close() {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let body = Body::from_stream(futures::stream::iter(vec![
            Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"container is alive\n")),
            Ok(bytes::Bytes::from_static(b"second\n")),
        ]));
        let server = tokio::spawn(async move {
            let ws = WebSocketStream::from_raw_socket(server_io, Role::Server, None).await;
            copy(ws, body, false).await
        });
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        let mut got = Vec::new();
        while let Some(Ok(m)) = client.next().await {
            match m {
                Message::Text(t) => got.push(t.to_string()),
                Message::Close(_) => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
        assert_eq!(
            got,
            vec![
                String::new(),
                b64(b"container is alive\n"),
                b64(b"second\n")
            ]
        );
        drop(client);
        server.await.unwrap().unwrap();
    }
}
