//! A fault-injecting TCP proxy in front of every member's peer port.
//!
//! Each member advertises its proxy's address as its peer URL and listens for peers on a
//! private port behind it, so all Raft and forwarding traffic between members crosses the
//! proxies. A proxy learns which member opened a connection by finding the connecting socket
//! in `/proc/net/tcp` and then in the members' `/proc/<pid>/fd` (all members connect from
//! 127.0.0.1, so the address alone cannot tell). Links between two members can then be cut:
//! `Drop` closes their connections and refuses new ones at once; `Blackhole` keeps them open
//! but silently discards every byte, so the sender only learns by its own timeouts. A
//! blackholed connection stays dead after the link heals (as a TCP connection through a
//! long partition would); members must notice and reconnect.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Drop,
    Blackhole,
}

#[derive(Default)]
struct NetState {
    /// Member index → process id of its current incarnation.
    pids: Vec<Option<u32>>,
    /// Cut links as (lower index, higher index), with how they fail.
    cut: Vec<((usize, usize), Fault)>,
}

impl NetState {
    fn fault(&self, a: usize, b: usize) -> Option<Fault> {
        let key = (a.min(b), a.max(b));
        self.cut.iter().find(|(k, _)| *k == key).map(|(_, f)| *f)
    }
}

/// The network between the members: shared by all proxies.
#[derive(Clone)]
pub struct Net {
    state: Arc<Mutex<NetState>>,
    /// Bumped on every change so live connections re-check their link.
    changed: watch::Sender<u64>,
}

impl Net {
    pub fn new(members: usize) -> Self {
        let state = NetState {
            pids: vec![None; members],
            cut: Vec::new(),
        };
        Self {
            state: Arc::new(Mutex::new(state)),
            changed: watch::channel(0).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, NetState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v += 1);
    }

    pub fn set_pid(&self, member: usize, pid: Option<u32>) {
        self.lock().pids[member] = pid;
    }

    /// Cuts every link of `member` to the others.
    pub fn isolate(&self, member: usize, fault: Fault) {
        let n = self.lock().pids.len();
        {
            let mut s = self.lock();
            for other in (0..n).filter(|o| *o != member) {
                let key = (member.min(other), member.max(other));
                s.cut.retain(|(k, _)| *k != key);
                s.cut.push((key, fault));
            }
        }
        self.bump();
    }

    pub fn heal(&self) {
        self.lock().cut.clear();
        self.bump();
    }

    /// Starts a proxy for member `dst`, forwarding to `target`; returns its address.
    pub async fn proxy(&self, dst: usize, target: SocketAddr) -> (SocketAddr, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let net = self.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((inbound, peer)) = listener.accept().await else {
                    continue;
                };
                let net = net.clone();
                tokio::spawn(async move {
                    let src = net.source_of(peer, addr);
                    net.serve(inbound, src, dst, target).await;
                });
            }
        });
        (addr, task)
    }

    /// Which member's process owns the socket that connected from `peer` to `proxy`.
    fn source_of(&self, peer: SocketAddr, proxy: SocketAddr) -> Option<usize> {
        let inode = socket_inode(peer, proxy)?;
        let pids = self.lock().pids.clone();
        let needle = format!("socket:[{inode}]");
        pids.iter().position(|pid| {
            let Some(pid) = pid else { return false };
            let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                return false;
            };
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == needle)
            })
        })
    }

    fn link_fault(&self, src: Option<usize>, dst: usize) -> Option<Fault> {
        let s = self.lock();
        src.and_then(|src| s.fault(src, dst))
    }

    async fn serve(
        &self,
        mut inbound: TcpStream,
        src: Option<usize>,
        dst: usize,
        target: SocketAddr,
    ) {
        let mut changed = self.changed.subscribe();
        match self.link_fault(src, dst) {
            Some(Fault::Drop) => return,
            Some(Fault::Blackhole) => return discard(inbound, None).await,
            None => {}
        }
        let Ok(mut outbound) = TcpStream::connect(target).await else {
            return;
        };
        let _ = inbound.set_nodelay(true);
        let _ = outbound.set_nodelay(true);
        let (mut ir, mut iw) = inbound.split();
        let (mut or, mut ow) = outbound.split();
        let mut a = vec![0u8; 64 * 1024];
        let mut b = vec![0u8; 64 * 1024];
        let fault = loop {
            tokio::select! {
                r = ir.read(&mut a) => match r {
                    Ok(0) | Err(_) => return,
                    Ok(n) => if ow.write_all(&a[..n]).await.is_err() { return },
                },
                r = or.read(&mut b) => match r {
                    Ok(0) | Err(_) => return,
                    Ok(n) => if iw.write_all(&b[..n]).await.is_err() { return },
                },
                c = changed.changed() => {
                    if c.is_err() { return }
                    if let Some(f) = self.link_fault(src, dst) { break f }
                }
            }
        };
        if fault == Fault::Blackhole {
            discard(inbound, Some(outbound)).await;
        }
    }
}

/// Reads and throws away everything from both sockets until both close.
async fn discard(mut a: TcpStream, b: Option<TcpStream>) {
    let mut buf = vec![0u8; 64 * 1024];
    let drain_b = async move {
        if let Some(mut b) = b {
            let mut buf = vec![0u8; 64 * 1024];
            while matches!(b.read(&mut buf).await, Ok(n) if n > 0) {}
        }
    };
    let drain_a = async move { while matches!(a.read(&mut buf).await, Ok(n) if n > 0) {} };
    tokio::join!(drain_a, drain_b);
}

/// The inode of the IPv4 TCP socket whose local end is `local` and remote end `remote`.
fn socket_inode(local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    let hex = |a: SocketAddr| -> Option<String> {
        let SocketAddr::V4(v4) = a else { return None };
        let ip = u32::from_le_bytes(v4.ip().octets());
        Some(format!("{ip:08X}:{:04X}", v4.port()))
    };
    let (l, r) = (hex(local)?, hex(remote)?);
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        (cols.len() > 9 && cols[1] == l && cols[2] == r)
            .then(|| cols[9].parse().ok())
            .flatten()
    })
}
