//! [`StoreContext`]: one member's running parts — its Raft handle, store, leases, auth, peers
//! and proposer — and what every API needs from them: writes through Raft, the linearizable
//! read barrier, the quota, response headers and the member list. Errors are
//! [`ForwardError`]s (etcd's code and text); the API adapters turn them into their own.

use std::path::PathBuf;
use std::sync::Arc;

use etcd_client::proto::{PbAlarmRequest, PbResponseHeader, PbTxnOpRequest, PbTxnRequest};
use tokio::sync::watch as tokio_watch;

use crate::command::{store_request::Op, store_response, KilnRaft, MemberNode, StoreRequest};
use crate::etcd_error::EtcdError;
use crate::member::leader;
use crate::member::lease::Lessor;
use crate::member::proposer::Proposer;
use crate::peer::client::PeerClients;
use crate::peer::forward::ForwardError;
use crate::peer::forward::{LeaderOp, LeaderReply};
use crate::storage::mvcc::{Mvcc, ALARM_NOSPACE};

/// etcd's default backend quota when --quota-backend-bytes is 0.
pub const DEFAULT_QUOTA_BYTES: i64 = 2 * 1024 * 1024 * 1024;

/// What every service needs: the Raft handle, the store, and who we are.
pub struct StoreContext {
    pub raft: KilnRaft,
    pub mvcc: Arc<Mvcc>,
    pub lessor: Arc<Lessor>,
    /// Users, roles and tokens (etcd's auth store).
    pub auth: Arc<crate::auth::AuthStore>,
    pub member_id: u64,
    pub cluster_id: u64,
    pub name: String,
    pub advertise_client_urls: Vec<String>,
    pub data_dir: PathBuf,
    pub quota_backend_bytes: i64,
    /// --max-request-bytes: the size watch fragments stay under.
    pub max_request_bytes: usize,
    /// Connections to the other members (Raft and forwarding share them).
    pub peers: Arc<PeerClients>,
    /// Group commit of client writes (used where this member leads).
    pub proposer: Proposer,
    /// Flips to true when the server shuts down; long-lived streams end then.
    pub shutdown: tokio_watch::Receiver<bool>,
}

impl StoreContext {
    /// A response header like etcd's: cluster, member, Raft term and the given revision.
    pub fn header(&self, revision: i64) -> PbResponseHeader {
        PbResponseHeader {
            cluster_id: self.cluster_id,
            member_id: self.member_id,
            revision,
            raft_term: self.raft.metrics().borrow().current_term,
        }
    }

    /// Fills cluster/member/term into a header the state machine produced (revision kept).
    pub fn fill(&self, header: &mut Option<PbResponseHeader>) {
        let revision = header
            .as_ref()
            .map_or_else(|| self.mvcc.revision(), |h| h.revision);
        *header = Some(self.header(revision));
    }

    /// Proposes a command through Raft (on the leader, wherever it is) and waits until this
    /// member applied it, so a read here right after sees the write.
    pub async fn write(&self, op: Op) -> Result<store_response::Result, ForwardError> {
        self.propose(StoreRequest::new(op)).await
    }

    /// A client's key-value or lease write: as [`Self::write`], and applying checks the
    /// caller's permission again against the auth store as it is then (`auth::recheck`).
    pub async fn write_as(
        &self,
        op: Op,
        caller: crate::command::auth::RequestAuth,
    ) -> Result<store_response::Result, ForwardError> {
        self.propose(StoreRequest::on_behalf(op, caller)).await
    }

    async fn propose(&self, req: StoreRequest) -> Result<store_response::Result, ForwardError> {
        if req.op.as_ref().is_some_and(grows) {
            self.check_quota().await?;
        }
        let reply = leader::leader_call(self, LeaderOp::Write(req)).await?;
        let LeaderReply::Write { index, response } = reply else {
            return Err(ForwardError::internal(
                "leader answered a write with something else",
            ));
        };
        leader::wait_applied(self, index).await?;
        if response.error_code != 0 {
            // The state machine's refusal, with its own gRPC code and etcd's text.
            return Err(ForwardError {
                not_leader: false,
                leader: None,
                code: response.error_code,
                message: response.error_message,
            });
        }
        response
            .result
            .ok_or_else(|| ForwardError::internal("state machine returned no result"))
    }

    /// The backend quota in bytes (etcd's default when the flag is 0).
    pub fn quota_bytes(&self) -> i64 {
        if self.quota_backend_bytes > 0 {
            self.quota_backend_bytes
        } else {
            DEFAULT_QUOTA_BYTES
        }
    }

    /// etcd's quota: with a NOSPACE alarm raised, writes that add data fail; a write that
    /// finds the backend over quota raises the alarm (through Raft, so every member sees it).
    async fn check_quota(&self) -> Result<(), ForwardError> {
        let alarms = self.mvcc.alarms();
        if alarms.iter().any(|(_, a)| *a == ALARM_NOSPACE) {
            return Err(ForwardError::etcd(EtcdError::NoSpace));
        }
        if self.mvcc.backend_size_recent() as i64 <= self.quota_bytes() {
            return Ok(());
        }
        // Over by the recent figure; the alarm is raised on the exact one.
        let size = self.mvcc.backend_size_fresh();
        if size as i64 <= self.quota_bytes() {
            return Ok(());
        }
        tracing::warn!(
            size,
            quota = self.quota_bytes(),
            "backend quota exceeded; raising NOSPACE"
        );
        let raise = Op::Alarm(PbAlarmRequest {
            action: 1,
            member_id: self.member_id,
            alarm: ALARM_NOSPACE,
        });
        let reply = leader::leader_call(self, LeaderOp::Write(StoreRequest::new(raise))).await?;
        if let LeaderReply::Write { index, .. } = reply {
            leader::wait_applied(self, index).await?;
        }
        Err(ForwardError::etcd(EtcdError::NoSpace))
    }

    /// The linearizable-read barrier (Raft read index, confirmed by a quorum on the leader):
    /// returns once this member has applied everything committed before the read began.
    pub async fn linearizable(&self) -> Result<(), ForwardError> {
        let reply = leader::leader_call(self, LeaderOp::ReadIndex).await?;
        let LeaderReply::ReadIndex { index } = reply else {
            return Err(ForwardError::internal(
                "leader answered a read index with something else",
            ));
        };
        leader::wait_applied(self, index).await
    }

    /// Members as etcd's Cluster API reports them, from the Raft membership.
    pub fn members(&self) -> Vec<etcd_client::proto::PbMember> {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership().clone();
        let learners: Vec<u64> = membership.learner_ids().collect();
        membership
            .nodes()
            .map(|(id, node): (&u64, &MemberNode)| {
                let client_urls = if *id == self.member_id {
                    self.advertise_client_urls.clone()
                } else {
                    node.client_urls.clone()
                };
                etcd_client::proto::PbMember {
                    id: *id,
                    name: node.name.clone(),
                    peer_ur_ls: node.peer_urls.clone(),
                    client_ur_ls: client_urls,
                    is_learner: learners.contains(id),
                }
            })
            .collect()
    }
}

/// Whether a write can add data (etcd refuses those while NOSPACE is raised).
fn grows(op: &Op) -> bool {
    fn txn_puts(t: &PbTxnRequest) -> bool {
        t.success
            .iter()
            .chain(&t.failure)
            .any(|o| match &o.request {
                Some(PbTxnOpRequest::RequestPut(_)) => true,
                Some(PbTxnOpRequest::RequestTxn(inner)) => txn_puts(inner),
                _ => false,
            })
    }
    match op {
        Op::Put(_) | Op::LeaseGrant(_) => true,
        Op::Txn(t) => txn_puts(t),
        _ => false,
    }
}
