//! Lease service: Grant, Revoke, KeepAlive, TimeToLive, Leases.

use std::pin::Pin;
use std::sync::Arc;

use etcd_client::proto::{
    PbLeaseGrantRequest, PbLeaseGrantResponse, PbLeaseKeepAliveRequest, PbLeaseKeepAliveResponse,
    PbLeaseLeasesRequest, PbLeaseLeasesResponse, PbLeaseRevokeRequest, PbLeaseRevokeResponse,
    PbLeaseService, PbLeaseStatus, PbLeaseTimeToLiveRequest, PbLeaseTimeToLiveResponse,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::api::grpc::kv::mvcc_status;
use crate::command::{store_request::Op, store_response::Result as Res};
use crate::member::context::StoreContext;
use crate::member::leader::leader_call;
use crate::member::lease::{MAX_TTL_SECONDS, MIN_TTL_SECONDS};
use crate::peer::forward::{LeaderOp, LeaderReply};

pub struct LeaseService {
    ctx: Arc<StoreContext>,
}

impl LeaseService {
    pub fn new(ctx: Arc<StoreContext>) -> Self {
        Self { ctx }
    }
}

fn unexpected() -> Status {
    Status::internal("state machine returned a response of another kind")
}

#[tonic::async_trait]
impl PbLeaseService for LeaseService {
    async fn lease_grant(
        &self,
        request: Request<PbLeaseGrantRequest>,
    ) -> Result<Response<PbLeaseGrantResponse>, Status> {
        // A token must be valid even where no permission is needed (etcd's AuthInfoFromCtx).
        self.ctx.auth.caller(&request)?;
        let mut r = request.into_inner();
        if r.ttl > MAX_TTL_SECONDS {
            return Err(Status::out_of_range("etcdserver: too large lease TTL"));
        }
        r.ttl = r.ttl.max(MIN_TTL_SECONDS);
        if r.id == 0 {
            // The proposer picks the ID so every member applies the same one.
            r.id = (rand::random::<u64>() >> 1).max(1) as i64;
        }
        let Res::LeaseGrant(mut resp) = self.ctx.write(Op::LeaseGrant(r)).await? else {
            return Err(unexpected());
        };
        self.ctx.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn lease_revoke(
        &self,
        request: Request<PbLeaseRevokeRequest>,
    ) -> Result<Response<PbLeaseRevokeResponse>, Status> {
        let caller = self.ctx.auth.key_writer(&request)?;
        let r = request.into_inner();
        if self.ctx.auth.state().enabled {
            // etcd's checkLeasePuts: revoking deletes the lease's keys.
            let keys = self.ctx.mvcc.lease_keys(r.id).map_err(mvcc_status)?;
            self.ctx.auth.state().check_lease_keys(
                &caller.username,
                crate::auth::perm::Access::Write,
                &keys,
            )?;
        }
        let Res::LeaseRevoke(mut resp) = self.ctx.write_as(Op::LeaseRevoke(r), caller).await?
        else {
            return Err(unexpected());
        };
        self.ctx.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    type LeaseKeepAliveStream =
        Pin<Box<dyn Stream<Item = Result<PbLeaseKeepAliveResponse, Status>> + Send + 'static>>;

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<PbLeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(64);
        let ctx = self.ctx.clone();
        tokio::spawn(async move {
            let mut shutdown = ctx.shutdown.clone();
            loop {
                let msg = tokio::select! {
                    msg = inbound.message() => msg,
                    _ = shutdown.changed() => return,
                };
                let Ok(Some(req)) = msg else { return };
                // Deadlines live on the leader: renew there. etcd answers TTL 0 for a lease
                // that does not exist (any more).
                let ttl = match leader_call(&ctx, LeaderOp::LeaseKeepAlive(req.id)).await {
                    Ok(LeaderReply::Lease { ttl }) => ttl.map_or(0, |(t, _)| t),
                    Ok(_) => 0,
                    Err(status) => {
                        let _ = tx.send(Err(status.into())).await;
                        return;
                    }
                };
                let resp = PbLeaseKeepAliveResponse {
                    header: Some(ctx.header(ctx.mvcc.revision())),
                    id: req.id,
                    ttl,
                };
                if tx.send(Ok(resp)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<PbLeaseTimeToLiveRequest>,
    ) -> Result<Response<PbLeaseTimeToLiveResponse>, Status> {
        let user = self.ctx.auth.key_caller(&request)?;
        let r = request.into_inner();
        if self.ctx.auth.state().enabled {
            // etcd's checkLeaseTimeToLive: the keys it names need READ.
            let keys = self.ctx.mvcc.lease_keys(r.id).map_err(mvcc_status)?;
            self.ctx.auth.state().check_lease_keys(
                &user,
                crate::auth::perm::Access::Read,
                &keys,
            )?;
        }
        let header = Some(self.ctx.header(self.ctx.mvcc.revision()));
        let remaining = match leader_call(&self.ctx, LeaderOp::LeaseTimeToLive(r.id)).await? {
            LeaderReply::Lease { ttl } => ttl,
            _ => None,
        };
        let Some((ttl, granted_ttl)) = remaining else {
            return Ok(Response::new(PbLeaseTimeToLiveResponse {
                header,
                id: r.id,
                ttl: -1,
                ..Default::default()
            }));
        };
        let keys = if r.keys {
            self.ctx.mvcc.lease_keys(r.id).map_err(mvcc_status)?
        } else {
            Vec::new()
        };
        Ok(Response::new(PbLeaseTimeToLiveResponse {
            header,
            id: r.id,
            ttl,
            granted_ttl,
            keys,
        }))
    }

    async fn lease_leases(
        &self,
        _request: Request<PbLeaseLeasesRequest>,
    ) -> Result<Response<PbLeaseLeasesResponse>, Status> {
        let leases = self
            .ctx
            .mvcc
            .leases()
            .map_err(mvcc_status)?
            .into_iter()
            .map(|l| PbLeaseStatus { id: l.id })
            .collect();
        Ok(Response::new(PbLeaseLeasesResponse {
            header: Some(self.ctx.header(self.ctx.mvcc.revision())),
            leases,
        }))
    }
}
