//! The node-local load balancer to the API servers, for clusters with several control planes (what k0s
//! calls NLLB and RKE2's agent does): the kubelet listens on 127.0.0.1 (6444 by default) and forwards
//! each TCP connection to a healthy API server, so this node's kubelet and kiln-proxy keep working
//! when any one controller is gone — without an external load balancer or VIP. TLS passes through
//! untouched (the API servers' certificates carry 127.0.0.1). It runs inside the kubelet because the
//! kubelet is the first thing up on a node and needs the API before anything else does.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum LbError {
    #[error("API server load balancer: listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("API server load balancer: no backends (--apiserver-lb-backend host:port)")]
    NoBackends,
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const HEALTH_INTERVAL: Duration = Duration::from_secs(2);

struct Backends {
    addrs: Vec<String>,
    healthy: Vec<AtomicBool>,
    next: AtomicUsize,
}

impl Backends {
    /// Backends to try for one connection: healthy ones first, round-robin, then the rest (a backend
    /// marked down may be back before the next health check).
    fn order(&self) -> Vec<usize> {
        let n = self.addrs.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let rotated: Vec<usize> = (0..n).map(|i| (start + i) % n).collect();
        let (mut up, down): (Vec<usize>, Vec<usize>) = rotated
            .into_iter()
            .partition(|&i| self.healthy[i].load(Ordering::Relaxed));
        up.extend(down);
        up
    }
}

async fn connect(addr: &str) -> std::io::Result<TcpStream> {
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "connect timed out",
        )),
    }
}

/// A running balancer: its address (for tests binding port 0).
pub struct Balancer {
    pub local_addr: SocketAddr,
}

/// Binds `listen` and forwards to `backends` until `shutdown`.
pub async fn start(
    listen: SocketAddr,
    backends: Vec<String>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<Balancer, LbError> {
    if backends.is_empty() {
        return Err(LbError::NoBackends);
    }
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| LbError::Listen {
            addr: listen,
            source,
        })?;
    let local_addr = listener.local_addr().map_err(|source| LbError::Listen {
        addr: listen,
        source,
    })?;
    let b = Arc::new(Backends {
        healthy: backends.iter().map(|_| AtomicBool::new(true)).collect(),
        addrs: backends,
        next: AtomicUsize::new(0),
    });
    let health = b.clone();
    let mut health_stop = shutdown.clone();
    tokio::spawn(async move {
        loop {
            for (i, a) in health.addrs.iter().enumerate() {
                let up = connect(a).await.is_ok();
                let was = health.healthy[i].swap(up, Ordering::Relaxed);
                if was != up {
                    tracing::warn!(backend = %a, up, "API server load balancer: backend health changed");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(HEALTH_INTERVAL) => {}
                _ = health_stop.wait_for(|s| *s) => return,
            }
        }
    });
    tracing::info!(listen = %local_addr, backends = ?b.addrs, "API server load balancer listening");
    tokio::spawn(async move {
        loop {
            let (client, _) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "API server load balancer: accept");
                        continue;
                    }
                },
                _ = shutdown.wait_for(|s| *s) => return,
            };
            let b = b.clone();
            tokio::spawn(async move {
                for i in b.order() {
                    match connect(&b.addrs[i]).await {
                        Ok(server) => {
                            b.healthy[i].store(true, Ordering::Relaxed);
                            let (mut c, mut s) = (client, server);
                            let _ = tokio::io::copy_bidirectional(&mut c, &mut s).await;
                            return;
                        }
                        Err(e) => {
                            b.healthy[i].store(false, Ordering::Relaxed);
                            tracing::debug!(backend = %b.addrs[i], error = %e, "API server load balancer: backend refused");
                        }
                    }
                }
                tracing::warn!("API server load balancer: no API server reachable");
            });
        }
    });
    Ok(Balancer { local_addr })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A backend answering every connection with its name.
    async fn named(name: &'static str) -> (String, tokio::task::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let h = tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(name.as_bytes()).await;
            }
        });
        (addr, h)
    }

    async fn ask(addr: SocketAddr) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn spreads_connections_and_skips_a_dead_backend() {
        let (a, ha) = named("a").await;
        let (b, _hb) = named("b").await;
        let (_tx, rx) = watch::channel(false);
        let lb = start("127.0.0.1:0".parse().unwrap(), vec![a, b], rx)
            .await
            .unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..4 {
            seen.insert(ask(lb.local_addr).await);
        }
        assert_eq!(seen, ["a", "b"].map(String::from).into());
        // a goes away: every connection still gets an answer, from b.
        ha.abort();
        let _ = ha.await;
        for _ in 0..4 {
            assert_eq!(ask(lb.local_addr).await, "b");
        }
    }

    #[tokio::test]
    async fn no_backends_is_an_error() {
        let (_tx, rx) = watch::channel(false);
        let e = start("127.0.0.1:0".parse().unwrap(), vec![], rx)
            .await
            .err()
            .unwrap();
        assert!(e.to_string().contains("no backends"));
    }
}
