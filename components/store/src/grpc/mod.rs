//! The etcd v3 gRPC API, implemented on the server traits etcd-client generates
//! (`etcd_client::proto::Pb*Service`).

pub mod cluster;
pub mod kv;
pub mod lease;
pub mod maintenance;
pub mod watch;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::proto::{
    PbClusterServer, PbKvServer, PbLeaseServer, PbMaintenanceServer, PbResponseHeader,
    PbWatchServer,
};
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use tokio::sync::watch as tokio_watch;
use tonic::Status;

use crate::etcd_error::EtcdError;
use crate::lease::Lessor;
use crate::mvcc::Mvcc;
use crate::raft::types::{store_request::Op, store_response, KilnRaft, MemberNode, StoreRequest};

/// etcd's default request timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(7);

/// What every service needs: the Raft handle, the store, and who we are.
pub struct StoreContext {
    pub raft: KilnRaft,
    pub mvcc: Arc<Mvcc>,
    pub lessor: Arc<Lessor>,
    pub member_id: u64,
    pub cluster_id: u64,
    pub name: String,
    pub advertise_client_urls: Vec<String>,
    pub data_dir: PathBuf,
    pub quota_backend_bytes: i64,
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

    /// Proposes a command through Raft and waits until it is applied.
    pub async fn write(&self, op: Op) -> Result<store_response::Result, Status> {
        let proposed = tokio::time::timeout(
            REQUEST_TIMEOUT,
            self.raft.client_write(StoreRequest::new(op)),
        )
        .await
        .map_err(|_| EtcdError::Timeout.to_status())?;
        let resp = proposed.map_err(write_error)?;
        let data = resp.data;
        if data.error_code != 0 {
            return Err(Status::new(
                tonic::Code::from_i32(data.error_code),
                data.error_message,
            ));
        }
        data.result
            .ok_or_else(|| Status::internal("state machine returned no result"))
    }

    /// The linearizable-read barrier (Raft read index): returns once this member has applied
    /// everything committed before the read began, as confirmed by a quorum.
    pub async fn linearizable(&self) -> Result<(), Status> {
        let checked = tokio::time::timeout(REQUEST_TIMEOUT, self.raft.ensure_linearizable())
            .await
            .map_err(|_| EtcdError::Timeout.to_status())?;
        checked.map(|_| ()).map_err(read_error)
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

fn write_error(e: RaftError<u64, ClientWriteError<u64, MemberNode>>) -> Status {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => match f.leader_id {
            None => EtcdError::NoLeader.to_status(),
            Some(_) => EtcdError::NotLeader.to_status(),
        },
        RaftError::APIError(other) => Status::internal(other.to_string()),
        RaftError::Fatal(_) => EtcdError::Stopped.to_status(),
    }
}

fn read_error(e: RaftError<u64, CheckIsLeaderError<u64, MemberNode>>) -> Status {
    match e {
        RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)) => match f.leader_id {
            None => EtcdError::NoLeader.to_status(),
            Some(_) => EtcdError::NotLeader.to_status(),
        },
        RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)) => {
            EtcdError::Timeout.to_status()
        }
        RaftError::Fatal(_) => EtcdError::Stopped.to_status(),
    }
}

/// All etcd services on one context, ready to mount on a tonic server.
pub fn routes(ctx: Arc<StoreContext>) -> tonic::service::Routes {
    let mut builder = tonic::service::Routes::builder();
    builder
        .add_service(PbKvServer::new(kv::KvService::new(ctx.clone())))
        .add_service(PbWatchServer::new(watch::WatchService::new(ctx.clone())))
        .add_service(PbLeaseServer::new(lease::LeaseService::new(ctx.clone())))
        .add_service(PbClusterServer::new(cluster::ClusterService::new(
            ctx.clone(),
        )))
        .add_service(PbMaintenanceServer::new(
            maintenance::MaintenanceService::new(ctx),
        ));
    builder.routes()
}
