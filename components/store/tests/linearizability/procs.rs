//! A cluster of real kiln-store processes on 127.0.0.1, peers behind the fault-injecting
//! proxies, that the test kills (SIGKILL by PID) and restarts on the same data directory.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use tokio::task::JoinHandle;

use crate::proxy::Net;

/// Raft timing for the test members: short, so a run sees several elections.
const HEARTBEAT_MS: u64 = 50;
const ELECTION_MS: u64 = 400;
/// Bound on waits for the cluster to settle.
pub const SETTLE: Duration = Duration::from_secs(30);

pub struct Member {
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
    pub client_url: String,
}

pub struct ProcCluster {
    /// Data directories and logs; removed with the cluster.
    _root: tempfile::TempDir,
    pub net: Net,
    pub members: Vec<Member>,
    /// Member IDs by index (learned from the first Status answers).
    pub ids: Vec<u64>,
    proxies: Vec<JoinHandle<()>>,
}

fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// Client options for one-shot requests: short timeouts, so a dead or cut-off member costs
/// little.
pub fn connect_options() -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(500))
        .with_timeout(Duration::from_secs(2))
}

impl ProcCluster {
    /// Starts `n` members (proxies first, so every peer URL answers from the start).
    pub async fn start(n: usize, token: &str) -> Self {
        Self::start_with(n, token, &[]).await
    }

    /// Like [`Self::start`], with extra kiln-store flags for every member.
    pub async fn start_with(n: usize, token: &str, extra: &[String]) -> Self {
        let root = tempfile::tempdir().expect("temp dir");
        let net = Net::new(n);
        let mut proxies = Vec::new();
        let mut peer_ports = Vec::new();
        let mut proxy_addrs: Vec<SocketAddr> = Vec::new();
        for i in 0..n {
            let peer_port = crate::common::free_port();
            let target: SocketAddr = format!("127.0.0.1:{peer_port}").parse().unwrap();
            let (addr, task) = net.proxy(i, target).await;
            peer_ports.push(peer_port);
            proxy_addrs.push(addr);
            proxies.push(task);
        }
        let initial_cluster = (0..n)
            .map(|i| format!("m{i}={}", url(proxy_addrs[i].port())))
            .collect::<Vec<_>>()
            .join(",");
        let members = (0..n)
            .map(|i| {
                let client_url = url(crate::common::free_port());
                let mut args = vec![
                    format!("--name=m{i}"),
                    format!("--data-dir={}", root.path().join(format!("m{i}")).display()),
                    format!("--listen-client-urls={client_url}"),
                    format!("--advertise-client-urls={client_url}"),
                    format!("--listen-peer-urls={}", url(peer_ports[i])),
                    format!(
                        "--initial-advertise-peer-urls={}",
                        url(proxy_addrs[i].port())
                    ),
                    format!("--initial-cluster={initial_cluster}"),
                    format!("--initial-cluster-token={token}"),
                    format!("--heartbeat-interval={HEARTBEAT_MS}"),
                    format!("--election-timeout={ELECTION_MS}"),
                ];
                args.extend(extra.iter().cloned());
                Member {
                    args,
                    log: root.path().join(format!("m{i}.log")),
                    child: None,
                    client_url,
                }
            })
            .collect();
        let mut cluster = Self {
            _root: root,
            net,
            members,
            ids: Vec::new(),
            proxies,
        };
        for i in 0..n {
            cluster.spawn(i);
        }
        cluster.settle().await;
        cluster
    }

    fn spawn(&mut self, i: usize) {
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .expect("member log");
        let child = Command::new(env!("CARGO_BIN_EXE_kiln-store"))
            .args(&m.args)
            .env(
                "RUST_LOG",
                std::env::var("KILN_LIN_LOG").unwrap_or_else(|_| "info,openraft=warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("kiln-store runs");
        self.net.set_pid(i, Some(child.id()));
        m.child = Some(child);
    }

    pub fn running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// SIGKILL, by PID: no shutdown code runs, as in a crash.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.net.set_pid(i, None);
    }

    pub fn restart(&mut self, i: usize) {
        if !self.running(i) {
            self.spawn(i);
        }
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    pub async fn client(&self, i: usize) -> Option<Client> {
        Client::connect(
            [self.members[i].client_url.clone()],
            Some(connect_options()),
        )
        .await
        .ok()
    }

    /// The member that running members name as leader, if a running member leads.
    pub async fn leader(&self) -> Option<usize> {
        for i in (0..self.members.len()).filter(|i| self.running(*i)) {
            let Some(mut c) = self.client(i).await else {
                continue;
            };
            let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(700), c.status()).await
            else {
                continue;
            };
            if let Some(l) = self.ids.iter().position(|id| *id == s.leader()) {
                if self.running(l) {
                    return Some(l);
                }
            }
        }
        None
    }

    /// Heals the network, restarts dead members and waits until every member answers a
    /// linearizable read and all agree on one leader.
    pub async fn settle(&mut self) {
        self.net.heal();
        for i in 0..self.members.len() {
            self.restart(i);
        }
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            match self.agreed_leader().await {
                Ok(()) => return,
                Err(why) => assert!(
                    tokio::time::Instant::now() < deadline,
                    "cluster did not settle: {why}; logs in {}",
                    self.keep_logs().display()
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn agreed_leader(&mut self) -> Result<(), String> {
        let mut ids = Vec::new();
        let mut leaders = Vec::new();
        for i in 0..self.members.len() {
            let mut c = self.client(i).await.ok_or(format!("m{i}: no client"))?;
            let s = tokio::time::timeout(Duration::from_secs(1), c.status())
                .await
                .map_err(|_| format!("m{i}: status timed out"))?
                .map_err(|e| format!("m{i}: {e}"))?;
            tokio::time::timeout(Duration::from_secs(1), c.get("/settle", None))
                .await
                .map_err(|_| format!("m{i}: read timed out"))?
                .map_err(|e| format!("m{i}: {e}"))?;
            ids.push(s.header().map_or(0, |h| h.member_id()));
            leaders.push(s.leader());
        }
        if leaders.iter().any(|l| *l == 0 || *l != leaders[0]) || !ids.contains(&leaders[0]) {
            return Err(format!("leaders {leaders:x?} of {ids:x?}"));
        }
        self.ids = ids;
        Ok(())
    }

    /// What member `i` logged so far.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.members[i].log).unwrap_or_default()
    }

    /// Copies the member logs somewhere that outlives the test; returns the directory.
    pub fn keep_logs(&self) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kiln-linearizability-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        for m in &self.members {
            if let Some(name) = m.log.file_name() {
                let _ = std::fs::copy(&m.log, dir.join(name));
            }
        }
        dir
    }
}

impl Drop for ProcCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        for p in &self.proxies {
            p.abort();
        }
    }
}
