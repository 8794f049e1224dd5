//! Maintenance service: Status (what `etcdctl endpoint status` shows), Alarm, Defragment.
//! Snapshot, Hash, HashKV, MoveLeader and Downgrade answer UNIMPLEMENTED for now.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use etcd_client::proto::{
    PbAlarmRequest, PbAlarmResponse, PbDefragmentRequest, PbDefragmentResponse, PbDowngradeRequest,
    PbDowngradeResponse, PbHashKvRequest, PbHashKvResponse, PbHashRequest, PbHashResponse,
    PbMaintenanceService, PbMoveLeaderRequest, PbMoveLeaderResponse, PbSnapshotRequest,
    PbSnapshotResponse, PbStatusRequest, PbStatusResponse,
};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::grpc::StoreContext;

/// The etcd API version kiln-store speaks (clients gate features on it).
pub const ETCD_API_VERSION: &str = "3.5.0";
/// etcd's default backend quota when --quota-backend-bytes is 0.
pub const DEFAULT_QUOTA_BYTES: i64 = 2 * 1024 * 1024 * 1024;

pub struct MaintenanceService {
    ctx: Arc<StoreContext>,
}

impl MaintenanceService {
    pub fn new(ctx: Arc<StoreContext>) -> Self {
        Self { ctx }
    }
}

/// Bytes used by the member's files under `dir` (rocksdb files and snapshots).
pub fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Builds the Status response (also used by /metrics).
pub fn status(ctx: &StoreContext) -> PbStatusResponse {
    let metrics = ctx.raft.metrics().borrow().clone();
    let size = dir_size(&ctx.data_dir) as i64;
    let is_learner = metrics
        .membership_config
        .membership()
        .learner_ids()
        .any(|l| l == ctx.member_id);
    PbStatusResponse {
        header: Some(ctx.header(ctx.mvcc.revision())),
        version: ETCD_API_VERSION.to_string(),
        db_size: size,
        leader: metrics.current_leader.unwrap_or(0),
        raft_index: metrics.last_log_index.unwrap_or(0),
        raft_term: metrics.current_term,
        raft_applied_index: metrics.last_applied.map_or(0, |l| l.index),
        errors: Vec::new(),
        db_size_in_use: size,
        is_learner,
        storage_version: String::new(),
        db_size_quota: if ctx.quota_backend_bytes > 0 {
            ctx.quota_backend_bytes
        } else {
            DEFAULT_QUOTA_BYTES
        },
        downgrade_info: None,
    }
}

#[tonic::async_trait]
impl PbMaintenanceService for MaintenanceService {
    async fn alarm(
        &self,
        _request: Request<PbAlarmRequest>,
    ) -> Result<Response<PbAlarmResponse>, Status> {
        // No alarms are raised yet (NOSPACE comes with quota enforcement).
        Ok(Response::new(PbAlarmResponse {
            header: Some(self.ctx.header(self.ctx.mvcc.revision())),
            alarms: Vec::new(),
        }))
    }

    async fn status(
        &self,
        _request: Request<PbStatusRequest>,
    ) -> Result<Response<PbStatusResponse>, Status> {
        Ok(Response::new(status(&self.ctx)))
    }

    async fn defragment(
        &self,
        _request: Request<PbDefragmentRequest>,
    ) -> Result<Response<PbDefragmentResponse>, Status> {
        let db = self.ctx.mvcc.db().clone();
        tokio::task::spawn_blocking(move || {
            for name in crate::db::STATE_MACHINE_CFS {
                db.compact_range_cf(crate::db::cf(&db, name), None::<&[u8]>, None::<&[u8]>);
            }
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(PbDefragmentResponse {
            header: Some(self.ctx.header(self.ctx.mvcc.revision())),
        }))
    }

    async fn hash(
        &self,
        _request: Request<PbHashRequest>,
    ) -> Result<Response<PbHashResponse>, Status> {
        Err(Status::unimplemented("kiln-store does not serve Hash yet"))
    }

    async fn hash_kv(
        &self,
        _request: Request<PbHashKvRequest>,
    ) -> Result<Response<PbHashKvResponse>, Status> {
        Err(Status::unimplemented(
            "kiln-store does not serve HashKV yet",
        ))
    }

    type SnapshotStream =
        Pin<Box<dyn Stream<Item = Result<PbSnapshotResponse, Status>> + Send + 'static>>;

    async fn snapshot(
        &self,
        _request: Request<PbSnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        Err(Status::unimplemented(
            "kiln-store does not serve Snapshot yet",
        ))
    }

    async fn move_leader(
        &self,
        _request: Request<PbMoveLeaderRequest>,
    ) -> Result<Response<PbMoveLeaderResponse>, Status> {
        Err(Status::unimplemented(
            "kiln-store does not serve MoveLeader yet",
        ))
    }

    async fn downgrade(
        &self,
        _request: Request<PbDowngradeRequest>,
    ) -> Result<Response<PbDowngradeResponse>, Status> {
        Err(Status::unimplemented(
            "kiln-store does not support Downgrade",
        ))
    }
}
