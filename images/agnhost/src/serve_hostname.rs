//! `serve-hostname`: answers every HTTP request, TCP connection or UDP datagram with the host name (the
//! pod's name), on port 9376 by default. The Service e2e tests count distinct answers to see which
//! endpoints a Service reaches.

use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use clap::{ArgAction, Args};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, UdpSocket};

use crate::server::{self, Peer, ServeError};

#[derive(Debug, Args)]
pub struct ServeHostnameArgs {
    /// Serve raw over TCP.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false,
          default_missing_value = "true", action = ArgAction::Set)]
    pub tcp: bool,
    /// Serve raw over UDP.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false,
          default_missing_value = "true", action = ArgAction::Set)]
    pub udp: bool,
    /// Serve HTTP (on by default: give --http=false with --tcp or --udp).
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = true,
          default_missing_value = "true", action = ArgAction::Set)]
    pub http: bool,
    /// Close the connection after each HTTP request.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false,
          default_missing_value = "true", action = ArgAction::Set)]
    pub close: bool,
    /// Port number.
    #[arg(long, default_value_t = 9376)]
    pub port: u16,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeHostnameError {
    #[error("Can't server TCP/UDP mode and HTTP mode at the same time")]
    Exclusive,
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// Every path answers with the host name; `close` adds `Connection: close` so each request needs a new
/// connection (and so may reach another endpoint of a Service).
pub fn router(hostname: String, close: bool) -> Router {
    let hostname = Arc::new(hostname);
    Router::new().fallback(move |Extension(Peer(peer)): Extension<Peer>| {
        let hostname = hostname.clone();
        async move {
            tracing::info!("HTTP request from {peer}");
            let mut resp: Response = hostname.as_str().to_owned().into_response();
            if close {
                resp.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            resp
        }
    })
}

/// Raw TCP: write the name, close.
pub async fn serve_tcp(listener: TcpListener, hostname: Arc<String>) {
    loop {
        match listener.accept().await {
            Ok((mut stream, peer)) => {
                tracing::info!("TCP request from {}", server::canonical(peer));
                let hostname = hostname.clone();
                tokio::spawn(async move {
                    let _ = stream.write_all(hostname.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
            Err(e) => {
                tracing::error!("Error from Accept(): {e}");
                return;
            }
        }
    }
}

/// Raw UDP: each datagram (whatever it holds) gets the name back.
pub async fn serve_udp(sock: UdpSocket, hostname: Arc<String>) {
    let mut buf = [0u8; 16];
    loop {
        match sock.recv_from(&mut buf).await {
            Ok((_, peer)) => {
                tracing::info!("UDP request from {}", server::canonical(peer));
                let _ = sock.send_to(hostname.as_bytes(), peer).await;
            }
            Err(e) => {
                tracing::error!("Error from ReadFrom(): {e}");
                return;
            }
        }
    }
}

pub async fn run(args: ServeHostnameArgs) -> Result<i32, ServeHostnameError> {
    if args.http && (args.tcp || args.udp) {
        return Err(ServeHostnameError::Exclusive);
    }
    let hostname = Arc::new(server::hostname());
    if args.tcp {
        let l = server::bind_tcp(args.port).await?;
        tokio::spawn(serve_tcp(l, hostname.clone()));
    }
    if args.udp {
        let s = server::bind_udp(args.port).await?;
        tokio::spawn(serve_udp(s, hostname.clone()));
    }
    if args.http {
        let l = server::bind_tcp(args.port).await?;
        let app = router(hostname.to_string(), args.close);
        tokio::spawn(server::serve(l, None, app, std::future::pending()));
    }
    tracing::info!("Serving on port {}.", args.port);
    server::sigterm().await;
    tracing::info!("Shutting down after receiving signal: terminated.");
    // Upstream keeps answering until the kubelet kills it, so a Service keeps a terminating endpoint's
    // answers for the grace period.
    tracing::info!("Awaiting pod deletion.");
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{get, spawn_router};
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn http_answers_the_hostname_on_every_path() {
        let addr = spawn_router(router("pod-a".into(), false)).await;
        let (status, _, body) = get(addr, "/").await;
        assert_eq!((status, body.as_str()), (200, "pod-a"));
        let (_, _, body) = get(addr, "/anything/else").await;
        assert_eq!(body, "pod-a");
    }

    #[tokio::test]
    async fn close_asks_for_a_new_connection() {
        let addr = spawn_router(router("pod-a".into(), true)).await;
        let (_, headers, _) = get(addr, "/").await;
        assert_eq!(headers.get("connection").unwrap(), "close");
    }

    #[tokio::test]
    async fn tcp_writes_the_name_and_closes() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(serve_tcp(l, Arc::new("pod-b".into())));
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "pod-b");
    }

    #[tokio::test]
    async fn udp_answers_any_datagram() {
        let srv = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = srv.local_addr().unwrap();
        tokio::spawn(serve_udp(srv, Arc::new("pod-c".into())));
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        c.send_to(b"hi", addr).await.unwrap();
        let mut buf = [0u8; 64];
        let (n, _) = c.recv_from(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"pod-c");
    }
}
