//! Maintenance service: Status (what `etcdctl endpoint status` shows), Alarm (NOSPACE from
//! --quota-backend-bytes), Defragment, and Snapshot: the state machine as the bbolt file etcd
//! would stream for it (`etcd_snapshot::save`, ending in the sha256 of everything before it, as
//! etcd's stream does), streamed in chunks; `etcdctl snapshot status|restore` and
//! `kiln-store snapshot restore` read it.
//! Hash and HashKV are CRC-32C over the state machine (`storage::mvcc::hash`), so members
//! holding the same data answer the same; MoveLeader hands leadership over
//! (`crate::member::transfer`). Downgrade answers UNIMPLEMENTED: there is no older kiln-store
//! storage format to go back to.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use etcd_client::proto::{
    PbAlarmMember, PbAlarmRequest, PbAlarmResponse, PbDefragmentRequest, PbDefragmentResponse,
    PbDowngradeRequest, PbDowngradeResponse, PbHashKvRequest, PbHashKvResponse, PbHashRequest,
    PbHashResponse, PbMaintenanceService, PbMoveLeaderRequest, PbMoveLeaderResponse,
    PbSnapshotRequest, PbSnapshotResponse, PbStatusRequest, PbStatusResponse,
};
use tokio_stream::{Stream, StreamExt as _};
use tonic::{Request, Response, Status};

use crate::api::grpc::kv::mvcc_status;
use crate::command::{store_request::Op, store_response::Result as Res};
use crate::etcd_snapshot;
use crate::member::context::StoreContext;
use crate::member::leader;
use crate::peer::forward::LeaderOp;
use crate::storage::mvcc::hash;

/// etcd streams snapshots in 32 KiB pieces; bigger ones cost less per byte on both ends, and every
/// etcd client accepts them (etcdctl's limit is 2 GiB, tonic's 4 MiB).
const SNAPSHOT_CHUNK: usize = 256 * 1024;
/// Pieces cut ahead of the network (32 MiB): the writer goes on while the length is read.
const SNAPSHOT_AHEAD: usize = 128;
const ALARM_GET: i32 = 0;

fn alarm_name(alarm: i32) -> &'static str {
    match alarm {
        1 => "NOSPACE",
        2 => "CORRUPT",
        _ => "NONE",
    }
}

/// The etcd API version kiln-store speaks (clients gate features on it).
pub const ETCD_API_VERSION: &str = "3.5.0";

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
        errors: ctx
            .mvcc
            .alarms()
            .iter()
            .map(|(member, alarm)| format!("memberID:{member} alarm:{} ", alarm_name(*alarm)))
            .collect(),
        db_size_in_use: ctx.mvcc.backend_size() as i64,
        is_learner,
        storage_version: String::new(),
        db_size_quota: ctx.quota_bytes(),
        downgrade_info: None,
    }
}

#[tonic::async_trait]
impl PbMaintenanceService for MaintenanceService {
    async fn alarm(
        &self,
        request: Request<PbAlarmRequest>,
    ) -> Result<Response<PbAlarmResponse>, Status> {
        let r = request.into_inner();
        if r.action == ALARM_GET {
            let alarms = self
                .ctx
                .mvcc
                .alarms()
                .into_iter()
                .filter(|(m, a)| {
                    (r.member_id == 0 || *m == r.member_id) && (r.alarm == 0 || *a == r.alarm)
                })
                .map(|(member_id, alarm)| PbAlarmMember { member_id, alarm })
                .collect();
            return Ok(Response::new(PbAlarmResponse {
                header: Some(self.ctx.header(self.ctx.mvcc.revision())),
                alarms,
            }));
        }
        let Res::Alarm(mut resp) = self.ctx.write(Op::Alarm(r)).await? else {
            return Err(Status::internal(
                "state machine answered an alarm with something else",
            ));
        };
        self.ctx.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn status(
        &self,
        request: Request<PbStatusRequest>,
    ) -> Result<Response<PbStatusResponse>, Status> {
        self.ctx.auth.require_root(&request)?;
        Ok(Response::new(status(&self.ctx)))
    }

    async fn defragment(
        &self,
        request: Request<PbDefragmentRequest>,
    ) -> Result<Response<PbDefragmentResponse>, Status> {
        self.ctx.auth.require_root(&request)?;
        let db = self.ctx.mvcc.db().clone();
        tokio::task::spawn_blocking(move || -> Result<(), rocksdb::Error> {
            // Flush first so deleted and compacted-away history leaves the memtables too.
            for name in crate::storage::db::STATE_MACHINE_CFS {
                let cf = crate::storage::db::cf(&db, name);
                db.flush_cf(cf)?;
                db.compact_range_cf(cf, None::<&[u8]>, None::<&[u8]>);
            }
            Ok(())
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::internal(format!("defragment: {e}")))?;
        Ok(Response::new(PbDefragmentResponse {
            header: Some(self.ctx.header(self.ctx.mvcc.revision())),
        }))
    }

    async fn hash(
        &self,
        request: Request<PbHashRequest>,
    ) -> Result<Response<PbHashResponse>, Status> {
        self.ctx.auth.require_root(&request)?;
        let revision = self.ctx.mvcc.revision();
        let db = self.ctx.mvcc.db().clone();
        let hash = tokio::task::spawn_blocking(move || hash::hash_all(&db))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(mvcc_status)?;
        Ok(Response::new(PbHashResponse {
            header: Some(self.ctx.header(revision)),
            hash,
        }))
    }

    async fn hash_kv(
        &self,
        request: Request<PbHashKvRequest>,
    ) -> Result<Response<PbHashKvResponse>, Status> {
        self.ctx.auth.require_root(&request)?;
        let wanted = request.into_inner().revision;
        let current = self.ctx.mvcc.revision();
        let db = self.ctx.mvcc.db().clone();
        let h = tokio::task::spawn_blocking(move || hash::hash_kv(&db, wanted, current))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(mvcc_status)?;
        Ok(Response::new(PbHashKvResponse {
            header: Some(self.ctx.header(current)),
            hash: h.hash,
            compact_revision: h.compact_revision,
            hash_revision: h.revision,
        }))
    }

    type SnapshotStream =
        Pin<Box<dyn Stream<Item = Result<PbSnapshotResponse, Status>> + Send + 'static>>;

    async fn snapshot(
        &self,
        request: Request<PbSnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        self.ctx.auth.require_root(&request)?;
        let header = self.ctx.header(self.ctx.mvcc.revision());
        let db = self.ctx.mvcc.db().clone();
        // etcd's own format (a bbolt file and its sha256), so etcd's tools read and restore it. Two
        // passes over one rocksdb snapshot: the first fixes the layout, and with it the exact length
        // (announced in remaining_bytes from the first message on, as etcd does); the second writes the
        // pages, cut into pieces that are sent while later ones are written.
        let (len_tx, len_rx) = tokio::sync::oneshot::channel();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, Status>>(SNAPSHOT_AHEAD);
        tokio::task::spawn_blocking(move || {
            let snap = db.snapshot();
            let t = std::time::Instant::now();
            let prepared = match etcd_snapshot::save::prepare(&db, &snap) {
                Ok(p) => p,
                Err(e) => {
                    let _ = len_tx.send(Err(Status::internal(format!("snapshot: {e}"))));
                    return;
                }
            };
            tracing::debug!(seconds = t.elapsed().as_secs_f64(), "snapshot laid out");
            let _ = len_tx.send(Ok(prepared.stream_len() as usize));
            let t = std::time::Instant::now();
            let sent =
                etcd_snapshot::save::write_to(&db, &snap, prepared, SNAPSHOT_CHUNK, |piece| {
                    tx.blocking_send(Ok(piece)).is_ok()
                });
            tracing::debug!(seconds = t.elapsed().as_secs_f64(), "snapshot written");
            if let Err(e) = sent {
                let _ = tx.blocking_send(Err(Status::internal(format!("snapshot: {e}"))));
            }
        });
        let total = len_rx
            .await
            .map_err(|_| Status::internal("snapshot: the writer stopped"))??;
        tracing::info!(bytes = total, "sending snapshot");
        let mut header = Some(header);
        let mut remaining = total;
        let messages = tokio_stream::wrappers::ReceiverStream::new(rx).map(move |piece| {
            let blob = piece?;
            remaining = remaining.saturating_sub(blob.len());
            Ok(PbSnapshotResponse {
                header: header.take(),
                remaining_bytes: remaining as u64,
                blob,
                version: ETCD_API_VERSION.to_string(),
            })
        });
        Ok(Response::new(Box::pin(messages)))
    }

    async fn move_leader(
        &self,
        request: Request<PbMoveLeaderRequest>,
    ) -> Result<Response<PbMoveLeaderResponse>, Status> {
        self.ctx.auth.require_root(&request)?;
        let target = request.into_inner().target_id;
        leader::leader_call(&self.ctx, LeaderOp::MoveLeader(target)).await?;
        Ok(Response::new(PbMoveLeaderResponse {
            header: Some(self.ctx.header(self.ctx.mvcc.revision())),
        }))
    }

    async fn downgrade(
        &self,
        _request: Request<PbDowngradeRequest>,
    ) -> Result<Response<PbDowngradeResponse>, Status> {
        // etcd 3.4 has no Downgrade: grpc-go's answer for a method a server does not know.
        Err(Status::unimplemented(
            "unknown method Downgrade for service etcdserverpb.Maintenance",
        ))
    }
}
