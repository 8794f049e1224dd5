//! Serving `/kiln.store.Peer/Call`: Raft RPCs go to openraft, forwarded requests to the leader
//! code, which answers "not leader" when leadership moved meanwhile (the caller retries).

use std::convert::Infallible;
use std::sync::Arc;

use openraft::error::{InstallSnapshotError, RaftError};
use serde::Serialize;
use tonic::codegen::{http, Body, BoxFuture, Context, Poll, Service, StdError};
use tonic::{Request, Response, Status};

use crate::member::context::StoreContext;
use crate::member::leader;
use crate::peer::codec::FrameCodec;
use crate::peer::{decode_request, ClusterInfo, Frame, PeerRequest, CALL_PATH, MAX_FRAME_BYTES};

/// The peer gRPC service; mount with `Server::builder().add_service(PeerServer::new(ctx))`.
#[derive(Clone)]
pub struct PeerServer {
    ctx: Arc<StoreContext>,
}

impl PeerServer {
    pub fn new(ctx: Arc<StoreContext>) -> Self {
        Self { ctx }
    }
}

impl tonic::server::NamedService for PeerServer {
    const NAME: &'static str = crate::peer::SERVICE_NAME;
}

struct CallSvc(Arc<StoreContext>);

impl tonic::server::UnaryService<Frame> for CallSvc {
    type Response = Frame;
    type Future = BoxFuture<Response<Frame>, Status>;

    fn call(&mut self, request: Request<Frame>) -> Self::Future {
        let ctx = self.0.clone();
        Box::pin(async move {
            let req = decode_request(request.into_inner())
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            let json = handle(&ctx, req).await?;
            Ok(Response::new(Frame {
                json,
                data: Vec::new(),
            }))
        })
    }
}

fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>, Status> {
    serde_json::to_vec(value).map_err(|e| Status::internal(e.to_string()))
}

async fn handle(ctx: &StoreContext, req: PeerRequest) -> Result<Vec<u8>, Status> {
    match req {
        PeerRequest::AppendEntries(r) => to_json(&ctx.raft.append_entries(r).await),
        PeerRequest::Vote(r) => to_json(&ctx.raft.vote(r).await),
        PeerRequest::InstallSnapshot(r) => {
            let answer: Result<_, RaftError<u64, InstallSnapshotError>> =
                ctx.raft.install_snapshot(r).await;
            to_json(&answer)
        }
        PeerRequest::Leader(op) => to_json(&leader::execute_local(ctx, op).await),
        PeerRequest::Campaign => to_json(&crate::member::transfer::campaign(ctx).await),
        PeerRequest::ClusterInfo => to_json(&ClusterInfo {
            cluster_id: ctx.cluster_id,
            members: ctx
                .raft
                .metrics()
                .borrow()
                .membership_config
                .membership()
                .nodes()
                .map(|(id, n)| (*id, n.clone()))
                .collect(),
        }),
    }
}

impl<B> Service<http::Request<B>> for PeerServer
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != CALL_PATH {
            return Box::pin(async {
                Ok(Status::unimplemented("unknown kiln peer method").into_http())
            });
        }
        let ctx = self.ctx.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(FrameCodec)
                .apply_max_message_size_config(Some(MAX_FRAME_BYTES), Some(MAX_FRAME_BYTES));
            Ok(grpc.unary(CallSvc(ctx), req).await)
        })
    }
}
