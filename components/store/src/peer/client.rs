//! Calling other members: one lazily connected tonic channel per peer URL, with mutual TLS for
//! https peer URLs.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::config::Config;
use crate::peer::codec::FrameCodec;
use crate::peer::{encode_request, PeerError, PeerRequest, CALL_PATH, MAX_FRAME_BYTES};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// HTTP/2 pings on every peer connection, also while idle: a connection that a partition or a
/// stateful firewall silently killed would otherwise stay in the channel forever (every RPC on
/// it timing out, nothing reconnecting); an unanswered ping closes it and the next call dials
/// afresh.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Shared by the Raft network and the forwarding code; cheap to call from many tasks.
pub struct PeerClients {
    tls: Option<ClientTlsConfig>,
    channels: Mutex<HashMap<String, Channel>>,
}

fn read(path: &std::path::Path) -> Result<Vec<u8>, PeerError> {
    std::fs::read(path).map_err(|source| PeerError::TlsFile {
        path: path.display().to_string(),
        source,
    })
}

impl PeerClients {
    /// Client side of peer TLS: our peer certificate as client identity, the peer CA as the
    /// only trust root.
    pub fn new(config: &Config) -> Result<Self, PeerError> {
        let tls = match (
            &config.peer_cert_file,
            &config.peer_key_file,
            &config.peer_trusted_ca_file,
        ) {
            (Some(cert), Some(key), Some(ca)) => Some(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(read(ca)?))
                    .identity(Identity::from_pem(read(cert)?, read(key)?)),
            ),
            _ => None,
        };
        Ok(Self {
            tls,
            channels: Mutex::new(HashMap::new()),
        })
    }

    fn channel(&self, url: &str) -> Result<Channel, PeerError> {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = channels.get(url) {
            return Ok(c.clone());
        }
        let bad = |message: String| PeerError::Endpoint {
            url: url.to_string(),
            message,
        };
        let mut endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .tcp_nodelay(true);
        if url.starts_with("https://") {
            let tls = self.tls.clone().ok_or(PeerError::TlsMissing)?;
            endpoint = endpoint.tls_config(tls).map_err(|e| bad(e.to_string()))?;
        }
        let channel = endpoint.connect_lazy();
        channels.insert(url.to_string(), channel.clone());
        Ok(channel)
    }

    /// Sends `req` to the member reachable at `urls` (first URL that answers) and decodes
    /// its JSON answer as `T`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        urls: &[String],
        req: PeerRequest,
        timeout: Duration,
    ) -> Result<T, PeerError> {
        let frame = encode_request(req)?;
        let mut last = PeerError::NoUrl;
        for url in urls {
            match self.call_one(url, frame.clone(), timeout).await {
                Ok(answer) => {
                    return serde_json::from_slice(&answer.json)
                        .map_err(|e| PeerError::Codec(e.to_string()))
                }
                Err(e) => {
                    let retry_elsewhere = e.not_sent();
                    last = e;
                    if !retry_elsewhere {
                        break;
                    }
                }
            }
        }
        Err(last)
    }

    async fn call_one(
        &self,
        url: &str,
        frame: crate::peer::Frame,
        timeout: Duration,
    ) -> Result<crate::peer::Frame, PeerError> {
        let transport = |message: String| call_error(url, message);
        let channel = self.channel(url)?;
        let mut grpc = tonic::client::Grpc::new(channel)
            .max_decoding_message_size(MAX_FRAME_BYTES)
            .max_encoding_message_size(MAX_FRAME_BYTES);
        let call = async {
            grpc.ready().await.map_err(|e| PeerError::Connect {
                url: url.to_string(),
                message: error_chain(&e),
            })?;
            let request = tonic::Request::new(frame);
            grpc.unary(request, PathAndQuery::from_static(CALL_PATH), FrameCodec)
                .await
                .map(|r| r.into_inner())
                .map_err(|s| transport(status_text(&s)))
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(transport("timed out".into())),
        }
    }
}

/// The error of a call that failed once under way. A lazy channel dials when the request is
/// processed, so a refused connection shows up here too; only the connector's own errors
/// prove that nothing was sent (a reset or a protocol error after the dial may follow a
/// served call, and retrying that could apply a write twice).
fn call_error(url: &str, message: String) -> PeerError {
    let m = message.to_ascii_lowercase();
    if m.contains("tcp connect error") || m.contains("dns error") {
        PeerError::Connect {
            url: url.to_string(),
            message,
        }
    } else {
        PeerError::Transport {
            url: url.to_string(),
            message,
        }
    }
}

fn status_text(s: &tonic::Status) -> String {
    use std::error::Error as _;
    match s.source() {
        Some(src) => format!("{}: {}", s.message(), error_chain(src)),
        None => s.message().to_string(),
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failed_dials_count_as_not_sent() {
        let e = |m: &str| call_error("http://p", m.to_string());
        assert!(
            e("transport error: tcp connect error: Connection refused (os error 111)").not_sent()
        );
        assert!(e("dns error: failed to lookup address").not_sent());
        // The request may have been served: never retried.
        assert!(!e("transport error: connection reset by peer").not_sent());
        assert!(!e("h2 protocol error: error reading a body from connection").not_sent());
        assert!(!e("timed out").not_sent());
    }
}
