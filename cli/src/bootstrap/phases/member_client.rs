//! The operator's etcd-v3 client for store membership (MemberList/Add/Promote, Maintenance Status) on
//! one member: mTLS with the store CA and the API server's store client certificate from the state
//! directory. Every call is bounded, so a dead member or a store without quorum cannot hang a join.

use std::path::Path;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, MemberAddOptions, TlsOptions};

/// Bound on connecting and on each call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error("reading {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("store {endpoint}: {message}")]
    Store { endpoint: String, message: String },
}

/// One member of the store as MemberList shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    /// Empty until the member has started and published itself (etcd semantics).
    pub name: String,
    pub peer_urls: Vec<String>,
    pub learner: bool,
}

/// Maintenance Status of the member a client is connected to.
#[derive(Debug, Clone, Copy)]
pub struct Status {
    pub leader: u64,
    pub applied_index: u64,
    pub learner: bool,
}

pub struct MemberClient {
    pub endpoint: String,
    client: Client,
}

impl MemberClient {
    /// Connect to the member at `addr` (its client port 2379) with the client certificate under `pki`.
    pub async fn connect(addr: &str, pki: &Path) -> Result<MemberClient, MemberError> {
        let host = if addr.contains(':') {
            format!("[{addr}]")
        } else {
            addr.to_string()
        };
        let endpoint = format!("https://{host}:2379");
        let read = |rel: &str| {
            let p = pki.join(rel);
            std::fs::read(&p).map_err(|source| MemberError::Read { path: p, source })
        };
        let tls = TlsOptions::new()
            .domain_name(addr.to_string())
            .ca_certificate(Certificate::from_pem(read("store/ca.crt")?))
            .identity(Identity::from_pem(
                read("apiserver-store-client.crt")?,
                read("apiserver-store-client.key")?,
            ));
        let opts = ConnectOptions::new()
            .with_tls(tls)
            .with_connect_timeout(CALL_TIMEOUT)
            .with_timeout(CALL_TIMEOUT);
        let fail = |message: String| MemberError::Store {
            endpoint: endpoint.clone(),
            message,
        };
        let client = tokio::time::timeout(
            CALL_TIMEOUT,
            Client::connect([endpoint.clone()], Some(opts)),
        )
        .await
        .map_err(|_| fail(format!("no answer within {CALL_TIMEOUT:?}")))?
        .map_err(|e| fail(e.to_string()))?;
        Ok(MemberClient { endpoint, client })
    }

    fn err(&self, e: impl std::fmt::Display) -> MemberError {
        MemberError::Store {
            endpoint: self.endpoint.clone(),
            message: e.to_string(),
        }
    }

    async fn bounded<T, E: std::fmt::Display>(
        &self,
        f: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, MemberError> {
        match tokio::time::timeout(CALL_TIMEOUT, f).await {
            Ok(r) => r.map_err(|e| self.err(e)),
            Err(_) => Err(self.err(format!("no answer within {CALL_TIMEOUT:?}"))),
        }
    }

    pub async fn members(&mut self) -> Result<Vec<Member>, MemberError> {
        let mut c = self.client.clone();
        let r = self.bounded(c.member_list()).await?;
        Ok(r.members()
            .iter()
            .map(|m| Member {
                id: m.id(),
                name: m.name().to_string(),
                peer_urls: m.peer_urls().to_vec(),
                learner: m.is_learner(),
            })
            .collect())
    }

    /// MemberAdd as a learner (it gets the log without counting for quorum until promoted).
    pub async fn add_learner(&mut self, peer_url: &str) -> Result<u64, MemberError> {
        let mut c = self.client.clone();
        let r = self
            .bounded(c.member_add(
                [peer_url.to_string()],
                Some(MemberAddOptions::new().with_is_learner()),
            ))
            .await?;
        r.member()
            .map(|m| m.id())
            .ok_or_else(|| self.err("MemberAdd answered without the new member"))
    }

    pub async fn promote(&mut self, id: u64) -> Result<(), MemberError> {
        let mut c = self.client.clone();
        self.bounded(c.member_promote(id)).await.map(|_| ())
    }

    /// A linearizable read (what `etcdctl endpoint health` does): only a store with a quorum answers;
    /// a member cut off from it may still name the leader it last knew in its Status.
    pub async fn quorum_read(&mut self) -> Result<(), MemberError> {
        let mut c = self.client.clone();
        self.bounded(c.get("health", None)).await.map(|_| ())
    }

    /// Removes the member named `name` (MemberList, then MemberRemove); false when there is no such
    /// member.
    pub async fn remove_member(&mut self, name: &str) -> Result<bool, MemberError> {
        let Some(id) = self
            .members()
            .await?
            .into_iter()
            .find(|m| m.name == name)
            .map(|m| m.id)
        else {
            return Ok(false);
        };
        let mut c = self.client.clone();
        self.bounded(c.member_remove(id)).await.map(|_| true)
    }

    pub async fn status(&mut self) -> Result<Status, MemberError> {
        let mut c = self.client.clone();
        let s = self.bounded(c.status()).await?;
        Ok(Status {
            leader: s.leader(),
            applied_index: s.raft_applied_index(),
            learner: s.is_learner(),
        })
    }
}
