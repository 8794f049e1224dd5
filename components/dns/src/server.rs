//! The network loops, thin: datagrams and length-prefixed TCP messages in, [`Resolver::handle`]
//! out. Bounded: at most [`MAX_IN_FLIGHT`] forwarded UDP requests and [`MAX_TCP_CONNECTIONS`]
//! connections at once (beyond that, packets are dropped and connections closed, rather than memory
//! growing); the rest is answered by the receive loops themselves.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio::time::timeout;

use crate::resolver::{Resolver, Step};
use crate::wire::Transport;

pub const MAX_IN_FLIGHT: usize = 1024;
pub const MAX_TCP_CONNECTIONS: usize = 256;
/// A TCP client that sends nothing for this long is disconnected (RFC 7766 suggests seconds).
pub const TCP_IDLE: Duration = Duration::from_secs(10);

/// Pause after a failing accept/recv, so a persistent error (e.g. no file descriptors) cannot spin.
const ERROR_PAUSE: Duration = Duration::from_millis(20);

/// One receive loop per runtime worker on the shared socket. A loop answers what needs no network
/// itself, on the thread that read the packet, as unbound's threads do: a task per packet cost more
/// (a spawn, a copy and a cross-thread wake-up per query) than the answer. Requests that must ask
/// the upstreams get a task each, at most [`MAX_IN_FLIGHT`] at once.
pub async fn serve_udp(socket: Arc<UdpSocket>, resolver: Arc<Resolver>) {
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let loops = tokio::runtime::Handle::current()
        .metrics()
        .num_workers()
        .max(1);
    for _ in 1..loops {
        tokio::spawn(receive_loop(
            socket.clone(),
            resolver.clone(),
            permits.clone(),
        ));
    }
    receive_loop(socket, resolver, permits).await;
}

async fn receive_loop(socket: Arc<UdpSocket>, resolver: Arc<Resolver>, permits: Arc<Semaphore>) {
    // a datagram larger than this is cut, fails to parse and gets FORMERR: fine for a DNS server
    let mut buf = vec![0u8; usize::from(u16::MAX)];
    loop {
        let (n, peer) = match socket.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!(error = %e, "udp recv failed");
                tokio::time::sleep(ERROR_PAUSE).await;
                continue;
            }
        };
        match resolver.answer_now(&buf[..n], Transport::Udp) {
            Step::Done(Some(reply)) => send(&socket, &reply, peer).await,
            Step::Done(None) => {}
            Step::Network(net) => {
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    tracing::debug!(%peer, "too many forwarded requests in flight; dropping");
                    continue;
                };
                let (socket, resolver) = (socket.clone(), resolver.clone());
                tokio::spawn(async move {
                    if let Some(reply) = resolver.answer_from_network(*net).await {
                        send(&socket, &reply, peer).await;
                    }
                    drop(permit);
                });
            }
        }
    }
}

async fn send(socket: &UdpSocket, reply: &[u8], peer: SocketAddr) {
    if let Err(e) = socket.send_to(reply, peer).await {
        tracing::debug!(%peer, error = %e, "udp send failed");
    }
}

pub async fn serve_tcp(listener: TcpListener, resolver: Arc<Resolver>) {
    let permits = Arc::new(Semaphore::new(MAX_TCP_CONNECTIONS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!(error = %e, "tcp accept failed");
                tokio::time::sleep(ERROR_PAUSE).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "too many tcp connections; closing");
            continue;
        };
        let resolver = resolver.clone();
        tokio::spawn(async move {
            serve_connection(stream, &resolver).await;
            drop(permit);
        });
    }
}

/// Answers the messages of one connection in order until the client stops, goes idle, or sends
/// something that gets no reply.
async fn serve_connection(mut stream: TcpStream, resolver: &Resolver) {
    loop {
        let mut len = [0u8; 2];
        if !matches!(
            timeout(TCP_IDLE, stream.read_exact(&mut len)).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if !matches!(
            timeout(TCP_IDLE, stream.read_exact(&mut body)).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let Some(reply) = resolver.handle(&body, Transport::Tcp).await else {
            return;
        };
        let Ok(n) = u16::try_from(reply.len()) else {
            return;
        };
        let mut framed = n.to_be_bytes().to_vec();
        framed.extend_from_slice(&reply);
        if !matches!(
            timeout(TCP_IDLE, stream.write_all(&framed)).await,
            Ok(Ok(_))
        ) {
            return;
        }
    }
}
