//! Serving an axum router over plain TCP or TLS, with the peer address each handler needs (netexec's
//! `/clientip`, serve-hostname's log line), graceful shutdown, and listeners bound like Go's `":port"`.

use std::future::Future;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, UdpSocket};
use tower::ServiceExt as _;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("listening on port {port}: {source}")]
    Bind { port: u16, source: std::io::Error },
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate found")]
    NoCertificate { path: String },
    #[error("{path}: no PEM private key found")]
    NoKey { path: String },
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// The client's address as Go's `r.RemoteAddr` shows it: an IPv4 client of a dual-stack socket is
/// `1.2.3.4:5`, not `[::ffff:1.2.3.4]:5`.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// Put on a response to drop the connection instead of answering (Go's hijack-and-close): liveness's
/// `/disconnect-headers` makes the probe see a connection closed before any status line.
#[derive(Debug, Clone, Copy)]
pub struct Disconnect;

pub fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// Go's `net.Listen("tcp", ":port")`: every address, IPv4 and IPv6. A pod network without IPv6 (or a
/// kernel with it disabled) refuses `[::]`, so IPv4 alone is the fallback.
pub async fn bind_tcp(port: u16) -> Result<TcpListener, ServeError> {
    match TcpListener::bind((IpAddr::V6(Ipv6Addr::UNSPECIFIED), port)).await {
        Ok(l) => Ok(l),
        Err(_) => TcpListener::bind(("0.0.0.0", port))
            .await
            .map_err(|source| ServeError::Bind { port, source }),
    }
}

/// The UDP counterpart of [`bind_tcp`].
pub async fn bind_udp(port: u16) -> Result<UdpSocket, ServeError> {
    match UdpSocket::bind((IpAddr::V6(Ipv6Addr::UNSPECIFIED), port)).await {
        Ok(s) => Ok(s),
        Err(_) => UdpSocket::bind(("0.0.0.0", port))
            .await
            .map_err(|source| ServeError::Bind { port, source }),
    }
}

/// A rustls server configuration from a PEM certificate chain and a PEM private key, as Go's
/// `ListenAndServeTLS(certFile, keyFile)` takes them.
pub fn tls_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, ServeError> {
    let read = |p: &Path| {
        std::fs::read(p).map_err(|source| ServeError::Read {
            path: p.display().to_string(),
            source,
        })
    };
    let cert_pem = read(cert)?;
    let key_pem = read(key)?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|source| ServeError::Read {
            path: cert.display().to_string(),
            source,
        })?;
    if certs.is_empty() {
        return Err(ServeError::NoCertificate {
            path: cert.display().to_string(),
        });
    }
    let key_der = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .map_err(|source| ServeError::Read {
            path: key.display().to_string(),
            source,
        })?
        .ok_or_else(|| ServeError::NoKey {
            path: key.display().to_string(),
        })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `app` on `listener` until `shutdown` completes, then lets in-flight requests finish for at
/// most the grace period `shutdown` gave (Go's `Server.Shutdown(ctx)`). Each request carries a
/// [`Peer`] extension.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: Router,
    shutdown: impl Future<Output = Duration>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    tokio::pin!(shutdown);
    let grace;
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and the like pass; Go's server retries too.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            g = &mut shutdown => {
                grace = g;
                break;
            }
        };
        let peer = canonical(peer);
        let app = app.clone();
        let service =
            hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(Peer(peer));
                let app = app.clone();
                async move {
                    let resp = match app.oneshot(req.map(axum::body::Body::new)).await {
                        Ok(r) => r,
                        Err(never) => match never {},
                    };
                    if resp.extensions().get::<Disconnect>().is_some() {
                        // An error from the service makes hyper close the connection without writing.
                        return Err(std::io::Error::other("disconnect requested"));
                    }
                    Ok(resp)
                }
            });
        let builder = auto::Builder::new(TokioExecutor::new());
        match &acceptor {
            None => {
                let conn = builder
                    .serve_connection_with_upgrades(TokioIo::new(stream), service)
                    .into_owned();
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let stream = match acceptor.accept(stream).await {
                        Ok(s) => s,
                        Err(e) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                    };
                    let conn = builder
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .into_owned();
                    let _ = watcher.watch(conn).await;
                });
            }
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(grace, graceful.shutdown()).await;
}

/// Resolves once when SIGTERM arrives.
pub async fn sigterm() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM");
            std::future::pending::<()>().await
        }
    }
}

/// The host name as Go's `os.Hostname()` gives it (the pod name in a pod).
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default()
}
