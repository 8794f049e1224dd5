//! pods.go's two WebSocket entries: `pods/exec` and `pods/log` read over a WebSocket opened by
//! hand with upstream's subprotocols (`channel.k8s.io` for exec, `binary.k8s.io` for logs), so
//! what is tested is the API server's WebSocket handling, not a client library's.

use futures::StreamExt;
use http::header;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio_tungstenite::tungstenite::handshake::client::generate_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-node] Pods should support remote command execution over websockets [NodeConformance] [Conformance]",
        "pods",
        exec_over_websocket
    ),
    case!(
        "[sig-node] Pods should support retrieving logs from the container over websockets [NodeConformance] [Conformance]",
        "pods",
        logs_over_websocket
    ),
];

/// The e2e pods' container `main`: busybox saying it is alive, then sleeping.
fn alive_pod(ctx: &Ctx, name: &str, sleep: u32) -> CaseResult<Pod> {
    from_json(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{
            "name": "main",
            "image": ctx.images().busybox(),
            "command": ["/bin/sh", "-c", format!("echo container is alive; sleep {sleep}")],
        }]},
    }))
}

/// A WebSocket to an API path (with query), offering `protocols`, as the e2e framework's
/// OpenWebSocketForURL: the client's credentials, an upgrade the server must accept.
async fn open(
    ctx: &Ctx,
    path: &str,
    protocols: &[&str],
) -> CaseResult<WebSocketStream<TokioIo<Upgraded>>> {
    let req = http::Request::get(path)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_VERSION, "13")
        .header(header::SEC_WEBSOCKET_KEY, generate_key())
        .header(header::SEC_WEBSOCKET_PROTOCOL, protocols.join(", "))
        .body(kube::client::Body::from(Vec::new()))
        .map_err(|e| CaseError::Failed(format!("request for {path}: {e}")))?;
    let resp = ctx.client.send(req).await?;
    must_eq!(
        resp.status(),
        http::StatusCode::SWITCHING_PROTOCOLS,
        "opening a websocket to {path}"
    );
    let upgraded = hyper::upgrade::on(resp)
        .await
        .map_err(|e| CaseError::Failed(format!("websocket to {path}: {e}")))?;
    Ok(WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Client, None).await)
}

/// Every data message until the server closes the connection.
async fn read_all(
    ws: &mut WebSocketStream<TokioIo<Upgraded>>,
    path: &str,
) -> CaseResult<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    while let Some(msg) = ws.next().await {
        match msg {
            Ok(Message::Binary(b)) => out.push(b.to_vec()),
            Ok(Message::Text(t)) => out.push(t.as_bytes().to_vec()),
            Ok(Message::Close(_)) => break,
            Ok(_) => {}
            Err(e) => {
                return Err(CaseError::Failed(format!(
                    "Failed to read completely from websocket {path}: {e}"
                )))
            }
        }
    }
    Ok(out)
}

/// Pods, remote command execution over websocket: `echo "remote execution test"` through
/// pods/exec on a `channel.k8s.io` WebSocket MUST print exactly that on channel 1 (stdout); any
/// other channel may only carry empty messages.
async fn exec_over_websocket(ctx: &Ctx) -> CaseResult {
    let name = "pod-exec-websocket";
    ctx.create_pod(&alive_pod(ctx, name, 600)?).await?;
    ctx.wait_running(name).await?;
    let path = format!(
        "/api/v1/namespaces/{}/pods/{name}/exec?stderr=1&stdout=1&container=main&command=echo&command=remote+execution+test",
        ctx.ns
    );
    let mut ws = open(ctx, &path, &["channel.k8s.io"]).await?;
    let mut stdout = Vec::new();
    for msg in read_all(&mut ws, &path).await? {
        let Some((&channel, data)) = msg.split_first() else {
            continue;
        };
        if channel != 1 {
            must!(
                data.is_empty(),
                "Got message from server that didn't start with channel 1 (STDOUT): {msg:?}"
            );
            continue;
        }
        stdout.extend_from_slice(data);
    }
    must_eq!(
        String::from_utf8_lossy(&stdout),
        "remote execution test\n",
        "output of the command over the websocket"
    );
    Ok(())
}

/// Pods, logs from websockets: pods/log on a `binary.k8s.io` WebSocket MUST carry the
/// container's log, `container is alive\n` (blank messages aside), and end.
async fn logs_over_websocket(ctx: &Ctx) -> CaseResult {
    let name = "pod-logs-websocket";
    ctx.create_pod(&alive_pod(ctx, name, 10000)?).await?;
    ctx.wait_running(name).await?;
    let path = format!(
        "/api/v1/namespaces/{}/pods/{name}/log?container=main",
        ctx.ns
    );
    // The log line may follow the Running status by a moment: read until it is there, as often as
    // upstream's pod start leaves room for (each read ends with the log's current end).
    let mut last = String::new();
    for _ in 0..10 {
        let mut ws = open(ctx, &path, &["binary.k8s.io"]).await?;
        last = read_all(&mut ws, &path)
            .await?
            .into_iter()
            .filter(|m| !String::from_utf8_lossy(m).trim().is_empty())
            .map(|m| String::from_utf8_lossy(&m).into_owned())
            .collect();
        if !last.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    must_eq!(last, "container is alive\n", "Unexpected websocket logs");
    Ok(())
}
