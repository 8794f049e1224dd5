//! Forwarding to the upstream resolvers: UDP from a fresh random port per query, a timeout per
//! attempt and the next upstream on failure, TCP when the UDP answer is truncated. Answers must match
//! our id and question, so stray or spoofed packets are ignored rather than believed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, Query, ResponseCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::{timeout_at, Instant};

use crate::answer::MAX_UDP_PAYLOAD;
use crate::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("no upstream resolvers (pass --upstream, or give --resolv-conf a nameserver)")]
    NoUpstreams,
    #[error("upstream {upstream}: {reason}")]
    Upstream {
        upstream: SocketAddr,
        reason: String,
    },
}

#[derive(Debug)]
pub struct Forwarder {
    upstreams: Vec<SocketAddr>,
    timeout: Duration,
    attempts: usize,
    metrics: Arc<Metrics>,
}

fn failed(upstream: SocketAddr, reason: impl std::fmt::Display) -> ForwardError {
    ForwardError::Upstream {
        upstream,
        reason: reason.to_string(),
    }
}

/// Whether `m` answers our query `id` for `q` (names compare case-insensitively).
fn answers(m: &Message, id: u16, q: &Query) -> bool {
    m.metadata.id == id
        && m.metadata.message_type == MessageType::Response
        && m.queries.len() == 1
        && m.queries[0].name() == q.name()
        && m.queries[0].query_type() == q.query_type()
        && m.queries[0].query_class() == q.query_class()
}

impl Forwarder {
    /// Every upstream is tried at least once and there are at least two attempts (one retry with a
    /// single upstream), each waiting `timeout`.
    pub fn new(upstreams: Vec<SocketAddr>, timeout: Duration, metrics: Arc<Metrics>) -> Self {
        let attempts = upstreams.len().max(2);
        Forwarder {
            upstreams,
            timeout,
            attempts,
            metrics,
        }
    }

    pub fn upstreams(&self) -> &[SocketAddr] {
        &self.upstreams
    }

    /// Resolves `q` upstream. SERVFAIL and REFUSED count as failures (the next upstream may know
    /// better); NXDOMAIN and the rest are answers.
    pub async fn resolve(&self, q: &Query) -> Result<Message, ForwardError> {
        if self.upstreams.is_empty() {
            return Err(ForwardError::NoUpstreams);
        }
        let mut last = ForwardError::NoUpstreams;
        for attempt in 0..self.attempts {
            let upstream = self.upstreams[attempt % self.upstreams.len()];
            let result = self.exchange(upstream, q).await;
            let result = result.and_then(|m| match m.metadata.response_code {
                ResponseCode::ServFail | ResponseCode::Refused => {
                    Err(failed(upstream, m.metadata.response_code))
                }
                _ => Ok(m),
            });
            self.metrics.forward_attempt(result.is_ok());
            match result {
                Ok(m) => return Ok(m),
                Err(e) => {
                    tracing::debug!(name = %q.name(), error = %e, attempt, "forward attempt failed");
                    last = e;
                }
            }
        }
        Err(last)
    }

    async fn exchange(&self, upstream: SocketAddr, q: &Query) -> Result<Message, ForwardError> {
        let mut req = Message::query();
        req.metadata.recursion_desired = true;
        req.add_query(q.clone());
        let mut edns = Edns::new();
        edns.set_max_payload(MAX_UDP_PAYLOAD);
        req.set_edns(edns);
        let id = req.metadata.id;
        let bytes = req.to_vec().map_err(|e| failed(upstream, e))?;
        let deadline = Instant::now() + self.timeout;
        let m = udp_exchange(upstream, &bytes, id, q, deadline).await?;
        if !m.metadata.truncation {
            return Ok(m);
        }
        // the answer did not fit in a datagram: ask again over TCP, with a fresh deadline
        tcp_exchange(upstream, &bytes, id, q, Instant::now() + self.timeout).await
    }
}

async fn udp_exchange(
    upstream: SocketAddr,
    bytes: &[u8],
    id: u16,
    q: &Query,
    deadline: Instant,
) -> Result<Message, ForwardError> {
    let local: SocketAddr = if upstream.is_ipv4() {
        "0.0.0.0:0".parse().unwrap_or(upstream)
    } else {
        "[::]:0".parse().unwrap_or(upstream)
    };
    let sock = UdpSocket::bind(local)
        .await
        .map_err(|e| failed(upstream, e))?;
    sock.connect(upstream)
        .await
        .map_err(|e| failed(upstream, e))?;
    sock.send(bytes).await.map_err(|e| failed(upstream, e))?;
    let mut buf = vec![0u8; usize::from(u16::MAX)];
    loop {
        let n = timeout_at(deadline, sock.recv(&mut buf))
            .await
            .map_err(|_| failed(upstream, "timed out (udp)"))?
            .map_err(|e| failed(upstream, e))?;
        match Message::from_vec(&buf[..n]) {
            Ok(m) if answers(&m, id, q) => return Ok(m),
            _ => tracing::debug!(%upstream, "ignoring a packet that does not answer our query"),
        }
    }
}

async fn tcp_exchange(
    upstream: SocketAddr,
    bytes: &[u8],
    id: u16,
    q: &Query,
    deadline: Instant,
) -> Result<Message, ForwardError> {
    let io = async {
        let mut s = TcpStream::connect(upstream).await?;
        let len = u16::try_from(bytes.len()).map_err(std::io::Error::other)?;
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend_from_slice(bytes);
        s.write_all(&framed).await?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len).await?;
        let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
        s.read_exact(&mut body).await?;
        Ok::<_, std::io::Error>(body)
    };
    let body = timeout_at(deadline, io)
        .await
        .map_err(|_| failed(upstream, "timed out (tcp)"))?
        .map_err(|e| failed(upstream, e))?;
    let m = Message::from_vec(&body).map_err(|e| failed(upstream, e))?;
    if !answers(&m, id, q) {
        return Err(failed(upstream, "tcp answer does not match the query"));
    }
    Ok(m)
}

#[cfg(test)]
#[path = "forward_tests.rs"]
mod tests;
