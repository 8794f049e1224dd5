//! Cluster service: MemberList from the Raft membership; MemberAdd / Remove / Update / Promote
//! as openraft membership changes, done by the leader (forwarded there from any member).

use std::sync::Arc;

use etcd_client::proto::{
    PbClusterService, PbMember, PbMemberAddRequest, PbMemberAddResponse, PbMemberListRequest,
    PbMemberListResponse, PbMemberPromoteRequest, PbMemberPromoteResponse, PbMemberRemoveRequest,
    PbMemberRemoveResponse, PbMemberUpdateRequest, PbMemberUpdateResponse,
};
use tonic::{Request, Response, Status};

use crate::command::MemberNode;
use crate::config::ListenUrl;
use crate::identity;
use crate::member::context::StoreContext;
use crate::member::leader;
use crate::peer::forward::{LeaderOp, LeaderReply, MemberChange};

pub struct ClusterService {
    ctx: Arc<StoreContext>,
}

impl ClusterService {
    pub fn new(ctx: Arc<StoreContext>) -> Self {
        Self { ctx }
    }

    /// Runs a membership change on the leader and waits until this member applied it, so the
    /// member list in the answer already shows it.
    async fn change(&self, change: MemberChange) -> Result<Vec<PbMember>, Status> {
        let reply = leader::leader_call(&self.ctx, LeaderOp::Member(change)).await?;
        let LeaderReply::Member { index } = reply else {
            return Err(Status::internal(
                "leader answered a member change with something else",
            ));
        };
        leader::wait_applied(&self.ctx, index).await?;
        Ok(self.ctx.members())
    }
}

fn check_peer_urls(urls: &[String]) -> Result<(), Status> {
    if urls.is_empty() {
        return Err(Status::invalid_argument(
            "etcdserver: member peer URLs are empty",
        ));
    }
    for u in urls {
        ListenUrl::parse(u).map_err(|e| Status::invalid_argument(e.to_string()))?;
    }
    Ok(())
}

#[tonic::async_trait]
impl PbClusterService for ClusterService {
    async fn member_add(
        &self,
        request: Request<PbMemberAddRequest>,
    ) -> Result<Response<PbMemberAddResponse>, Status> {
        self.ctx.auth.require_root(&request)?;
        let r = request.into_inner();
        check_peer_urls(&r.peer_ur_ls)?;
        // Unique per addition, like etcd's (peer URLs, cluster, time) member IDs.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let id = identity::member_id(&r.peer_ur_ls, &format!("{:x}-{nanos}", self.ctx.cluster_id));
        let node = MemberNode {
            name: String::new(),
            peer_urls: r.peer_ur_ls.clone(),
            client_urls: Vec::new(),
        };
        let members = self
            .change(MemberChange::Add {
                id,
                node,
                learner: r.is_learner,
            })
            .await?;
        tracing::info!(member = %format!("{id:x}"), learner = r.is_learner, "member added");
        Ok(Response::new(PbMemberAddResponse {
            header: Some(self.ctx.header(self.ctx.mvcc.revision())),
            member: Some(PbMember {
                id,
                name: String::new(),
                peer_ur_ls: r.peer_ur_ls,
                client_ur_ls: Vec::new(),
                is_learner: r.is_learner,
            }),
            members,
        }))
    }

    async fn member_remove(
        &self,
        request: Request<PbMemberRemoveRequest>,
    ) -> Result<Response<PbMemberRemoveResponse>, Status> {
        self.ctx.auth.require_root(&request)?;
        let id = request.into_inner().id;
        let members = self.change(MemberChange::Remove { id }).await?;
        tracing::info!(member = %format!("{id:x}"), "member removed");
        Ok(Response::new(PbMemberRemoveResponse {
            header: Some(self.ctx.header(self.ctx.mvcc.revision())),
            members,
        }))
    }

    async fn member_update(
        &self,
        request: Request<PbMemberUpdateRequest>,
    ) -> Result<Response<PbMemberUpdateResponse>, Status> {
        self.ctx.auth.require_root(&request)?;
        let r = request.into_inner();
        check_peer_urls(&r.peer_ur_ls)?;
        let members = self
            .change(MemberChange::Update {
                id: r.id,
                peer_urls: r.peer_ur_ls,
            })
            .await?;
        Ok(Response::new(PbMemberUpdateResponse {
            header: Some(self.ctx.header(self.ctx.mvcc.revision())),
            members,
        }))
    }

    async fn member_list(
        &self,
        request: Request<PbMemberListRequest>,
    ) -> Result<Response<PbMemberListResponse>, Status> {
        if request.get_ref().linearizable {
            self.ctx.linearizable().await?;
        }
        Ok(Response::new(PbMemberListResponse {
            header: Some(self.ctx.header(self.ctx.mvcc.revision())),
            members: self.ctx.members(),
        }))
    }

    async fn member_promote(
        &self,
        request: Request<PbMemberPromoteRequest>,
    ) -> Result<Response<PbMemberPromoteResponse>, Status> {
        self.ctx.auth.require_root(&request)?;
        let id = request.into_inner().id;
        let members = self.change(MemberChange::Promote { id }).await?;
        tracing::info!(member = %format!("{id:x}"), "learner promoted");
        Ok(Response::new(PbMemberPromoteResponse {
            header: Some(self.ctx.header(self.ctx.mvcc.revision())),
            members,
        }))
    }
}
