//! The network loops, thin: datagrams and length-prefixed TCP messages in, [`Resolver::handle`]
//! out. Bounded: at most [`MAX_IN_FLIGHT`] forwarded UDP requests and [`MAX_TCP_CONNECTIONS`]
//! connections at once (beyond that, packets are dropped and connections closed, rather than memory
//! growing); the rest is answered by the UDP receive threads themselves.

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
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

/// How long an idle receive thread waits before it looks whether it should stop.
const STOP_POLL: Duration = Duration::from_millis(100);

/// Sets the flag when dropped: the serving task was aborted (or its runtime shut down).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One receive thread per runtime worker on the shared socket, each blocking in `recvfrom` and
/// answering what needs no network itself, as unbound's threads do. Own threads rather than
/// runtime tasks: a task per packet cost more (a spawn, a copy and a cross-thread wake-up) than
/// the answer, and receive loops as runtime tasks went through epoll and tokio's wake-ups for every
/// burst, and could end up on one worker. Requests that must ask the upstreams get a runtime task
/// each, at most [`MAX_IN_FLIGHT`] at once. The threads stop when this future is dropped (its task
/// aborted), within [`STOP_POLL`].
pub async fn serve_udp(socket: UdpSocket, resolver: Arc<Resolver>) {
    let rt = tokio::runtime::Handle::current();
    let threads = rt.metrics().num_workers().max(1);
    let socket = match blocking(socket) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            tracing::error!(error = %e, "cannot use the UDP socket; not serving UDP");
            return;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_when_dropped = StopOnDrop(stop.clone());
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    for i in 0..threads {
        let (socket, resolver, permits, stop, rt) = (
            socket.clone(),
            resolver.clone(),
            permits.clone(),
            stop.clone(),
            rt.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name(format!("dns-udp-{i}"))
            .spawn(move || receive_loop(&socket, &resolver, &permits, &stop, &rt));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start a UDP receive thread");
        }
    }
    std::future::pending::<()>().await;
}

/// The socket as a blocking one with a receive timeout (so a thread notices it should stop).
fn blocking(socket: UdpSocket) -> std::io::Result<StdUdpSocket> {
    let s = socket.into_std()?;
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(STOP_POLL))?;
    Ok(s)
}

fn receive_loop(
    socket: &Arc<StdUdpSocket>,
    resolver: &Arc<Resolver>,
    permits: &Arc<Semaphore>,
    stop: &AtomicBool,
    rt: &tokio::runtime::Handle,
) {
    // a datagram larger than this is cut, fails to parse and gets FORMERR: fine for a DNS server
    let mut buf = vec![0u8; usize::from(u16::MAX)];
    while !stop.load(Ordering::Relaxed) {
        let (n, peer) = match socket.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                tracing::debug!(error = %e, "udp recv failed");
                std::thread::sleep(ERROR_PAUSE);
                continue;
            }
        };
        match resolver.answer_now(&buf[..n], Transport::Udp) {
            Step::Done(Some(reply)) => send(socket, &reply, peer),
            Step::Done(None) => {}
            Step::Network(net) => {
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    tracing::debug!(%peer, "too many forwarded requests in flight; dropping");
                    continue;
                };
                let (socket, resolver) = (socket.clone(), resolver.clone());
                rt.spawn(async move {
                    if let Some(reply) = resolver.answer_from_network(*net).await {
                        // a UDP send does not wait for the peer; at worst for socket buffer space
                        send(&socket, &reply, peer);
                    }
                    drop(permit);
                });
            }
        }
    }
}

fn send(socket: &StdUdpSocket, reply: &[u8], peer: SocketAddr) {
    if let Err(e) = socket.send_to(reply, peer) {
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
