//! Multi-member clusters in-process on 127.0.0.1: peer mTLS certificates made with rcgen,
//! members started and stopped by name, and bounded waits on Raft state.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kiln_store::{Config, StoreHandle};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use super::WAIT;

/// Peer PKI written to files: a CA and one certificate used as server and client.
pub struct PeerPki {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl PeerPki {
    pub fn create(dir: &Path) -> Self {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "kiln-store-peer-ca");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, "peer");
        params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &issuer).unwrap();
        let write = |name: &str, body: String| {
            let p = dir.join(name);
            std::fs::write(&p, body).unwrap();
            p
        };
        Self {
            ca: write("peer-ca.crt", ca_cert.pem()),
            cert: write("peer.crt", cert.pem()),
            key: write("peer.key", key.serialize_pem()),
        }
    }
}

pub struct Member {
    pub name: String,
    pub peer_url: String,
    pub config: Config,
    pub handle: Option<StoreHandle>,
}

impl Member {
    pub fn handle(&self) -> &StoreHandle {
        self.handle.as_ref().expect("member is running")
    }
}

pub struct Cluster {
    pub root: tempfile::TempDir,
    pub pki: PeerPki,
    pub members: Vec<Member>,
}

/// `name=url,...` of the given members.
pub fn initial_cluster(members: &[(String, String)]) -> String {
    members
        .iter()
        .map(|(n, u)| format!("{n}={u}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl Cluster {
    /// Configs for `n` members m0..m{n-1} with https peers (mutual TLS), not started yet.
    pub fn new(n: usize, tweak: impl Fn(&mut Config)) -> Self {
        let root = tempfile::tempdir().unwrap();
        let pki = PeerPki::create(root.path());
        let names: Vec<(String, String)> = (0..n)
            .map(|i| {
                (
                    format!("m{i}"),
                    format!("https://127.0.0.1:{}", super::free_port()),
                )
            })
            .collect();
        let cluster = initial_cluster(&names);
        let mut members = Vec::new();
        for (name, url) in names {
            let mut config = member_config(root.path(), &pki, &name, &url);
            config.initial_cluster = Some(cluster.clone());
            tweak(&mut config);
            members.push(Member {
                name,
                peer_url: url,
                config,
                handle: None,
            });
        }
        Self { root, pki, members }
    }

    /// Starts every member concurrently (a lone founding member cannot form a quorum).
    pub async fn start_all(&mut self) {
        let starts = self
            .members
            .iter()
            .map(|m| kiln_store::start(m.config.clone()));
        let handles = tokio::time::timeout(WAIT, futures::future::join_all(starts))
            .await
            .expect("members start in time");
        for (m, h) in self.members.iter_mut().zip(handles) {
            m.handle = Some(h.expect("member starts"));
        }
    }

    pub async fn start(&mut self, i: usize) {
        let config = self.members[i].config.clone();
        let h = tokio::time::timeout(WAIT, kiln_store::start(config))
            .await
            .expect("member starts in time")
            .expect("member starts");
        self.members[i].handle = Some(h);
    }

    pub async fn stop(&mut self, i: usize) {
        if let Some(h) = self.members[i].handle.take() {
            h.shutdown().await;
        }
    }

    pub fn running(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|i| self.members[*i].handle.is_some())
            .collect()
    }

    /// Waits until every running member agrees on one running leader; returns its index.
    pub async fn leader(&self) -> usize {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let running = self.running();
            let leaders: Vec<Option<u64>> = running
                .iter()
                .map(|i| {
                    self.members[*i]
                        .handle()
                        .raft()
                        .metrics()
                        .borrow()
                        .current_leader
                })
                .collect();
            if let Some(Some(l)) = leaders.first() {
                if leaders.iter().all(|x| *x == Some(*l)) {
                    if let Some(i) = running
                        .iter()
                        .find(|i| self.members[**i].handle().member_id() == *l)
                    {
                        return *i;
                    }
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no agreed leader: {leaders:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn client(&self, i: usize) -> etcd_client::Client {
        super::client(self.members[i].handle().client_addr()).await
    }

    /// Waits until member `i` has applied store revision `rev`.
    pub async fn wait_revision(&self, i: usize, rev: i64) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.members[i].handle().revision() < rev {
            assert!(
                tokio::time::Instant::now() < deadline,
                "member {i} stuck at revision {} < {rev}",
                self.members[i].handle().revision()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn shutdown(mut self) {
        for i in 0..self.members.len() {
            self.stop(i).await;
        }
    }
}

/// A member config with https peer URL `peer_url` and data under `root/name`.
pub fn member_config(root: &Path, pki: &PeerPki, name: &str, peer_url: &str) -> Config {
    let mut config = Config::for_test(root.join(name));
    config.name = name.to_string();
    config.listen_peer_urls = vec![peer_url.to_string()];
    config.initial_advertise_peer_urls = vec![peer_url.to_string()];
    config.initial_cluster = Some(format!("{name}={peer_url}"));
    config.peer_cert_file = Some(pki.cert.clone());
    config.peer_key_file = Some(pki.key.clone());
    config.peer_trusted_ca_file = Some(pki.ca.clone());
    config.peer_client_cert_auth = true;
    config
}

/// Retries `op` (bounded) while it fails, e.g. during an election.
pub async fn retry<T, E: std::fmt::Debug, F, Fut>(what: &str, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{what} kept failing: {e:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
