//! Cluster service: MemberList from the Raft membership. Changing membership needs the peer
//! transport (see raft::network) and answers UNIMPLEMENTED until then.

use std::sync::Arc;

use etcd_client::proto::{
    PbClusterService, PbMemberAddRequest, PbMemberAddResponse, PbMemberListRequest,
    PbMemberListResponse, PbMemberPromoteRequest, PbMemberPromoteResponse, PbMemberRemoveRequest,
    PbMemberRemoveResponse, PbMemberUpdateRequest, PbMemberUpdateResponse,
};
use tonic::{Request, Response, Status};

use crate::grpc::StoreContext;

pub struct ClusterService {
    ctx: Arc<StoreContext>,
}

impl ClusterService {
    pub fn new(ctx: Arc<StoreContext>) -> Self {
        Self { ctx }
    }
}

fn no_membership_changes() -> Status {
    Status::unimplemented("kiln-store: membership changes need the peer transport, not built yet")
}

#[tonic::async_trait]
impl PbClusterService for ClusterService {
    async fn member_add(
        &self,
        _request: Request<PbMemberAddRequest>,
    ) -> Result<Response<PbMemberAddResponse>, Status> {
        Err(no_membership_changes())
    }

    async fn member_remove(
        &self,
        _request: Request<PbMemberRemoveRequest>,
    ) -> Result<Response<PbMemberRemoveResponse>, Status> {
        Err(no_membership_changes())
    }

    async fn member_update(
        &self,
        _request: Request<PbMemberUpdateRequest>,
    ) -> Result<Response<PbMemberUpdateResponse>, Status> {
        Err(no_membership_changes())
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
        _request: Request<PbMemberPromoteRequest>,
    ) -> Result<Response<PbMemberPromoteResponse>, Status> {
        Err(no_membership_changes())
    }
}
