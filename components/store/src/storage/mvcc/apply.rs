//! Applying one committed Raft command to the MVCC store (deterministic: every member computes
//! the same batch from the same command).

use etcd_client::proto::{
    PbAlarmMember, PbAlarmResponse, PbCompactionResponse, PbDeleteRequest, PbLeaseGrantResponse,
    PbLeaseRevokeResponse, PbResponseHeader,
};
use rocksdb::{WriteBatch, DB};

use crate::etcd_error::EtcdError;
use crate::storage::db::{self, CF_LEASES, CF_SM_META};
use crate::storage::mvcc::index::KeyIndex;
use crate::storage::mvcc::txn::TxnWriter;
use crate::storage::mvcc::{
    compact, get_lease, lease_keys, read_alarms, write_i64, LeaseRecord, MvccError, RevisionEvents,
    META_ALARMS, META_REVISION,
};

// etcd's AlarmRequest actions.
const ALARM_ACTIVATE: i32 = 1;
const ALARM_DEACTIVATE: i32 = 2;
use crate::command::{
    store_request::Op, store_response::Result as Res, StoreRequest, StoreResponse,
};

/// A lease change the in-memory lessor must learn about once the batch is durable.
#[derive(Debug, Clone, Copy)]
pub enum LeaseEffect {
    Granted(LeaseRecord),
    Revoked(i64),
}

/// Everything applying one command produced.
pub struct Applied {
    pub response: StoreResponse,
    pub batch: WriteBatch,
    pub events: Option<RevisionEvents>,
    pub revision: i64,
    pub compact_revision: i64,
    pub lease_effect: Option<LeaseEffect>,
}

impl Applied {
    /// A command that changed nothing (refused, or failed as the client sees it): only its response,
    /// the revisions as they were and an empty batch.
    pub fn unchanged(response: StoreResponse, revision: i64, compact_revision: i64) -> Applied {
        Applied {
            response,
            batch: WriteBatch::default(),
            events: None,
            revision,
            compact_revision,
            lease_effect: None,
        }
    }
}

fn header(revision: i64) -> Option<PbResponseHeader> {
    Some(PbResponseHeader {
        revision,
        ..Default::default()
    })
}

/// Applies `req` (a key-value, lease, compaction or alarm command: auth commands and batches
/// are the state machine's, see `member::raft::apply`) on top of `revision` /
/// `compact_revision`, which `index` shows. Client-visible failures (a missing lease, a compacted revision) become error responses
/// with an empty batch; only storage failures are errors.
pub fn apply(
    db: &DB,
    index: &KeyIndex,
    revision: i64,
    compact_revision: i64,
    req: &StoreRequest,
) -> Result<Applied, MvccError> {
    let unchanged = |response| Applied::unchanged(response, revision, compact_revision);
    let result = apply_op(db, index, revision, compact_revision, req);
    match result {
        Ok(applied) => Ok(applied),
        Err(MvccError::Etcd(e)) => Ok(unchanged(StoreResponse::error(e.code(), e.to_string()))),
        Err(e) => Err(e),
    }
}

fn apply_op(
    db: &DB,
    index: &KeyIndex,
    revision: i64,
    compact_revision: i64,
    req: &StoreRequest,
) -> Result<Applied, MvccError> {
    let mut w = TxnWriter::applying(db, index, revision, compact_revision);
    let mut new_compact = compact_revision;
    let mut lease_effect = None;
    let response = match &req.op {
        Some(Op::Put(r)) => {
            if r.key.is_empty() {
                return Err(EtcdError::EmptyKey.into());
            }
            Res::Put(w.put(r)?)
        }
        Some(Op::DeleteRange(r)) => Res::DeleteRange(w.delete_range(r)?),
        Some(Op::Txn(r)) => Res::Txn(w.txn(r)?),
        Some(Op::Compact(r)) => {
            if r.revision <= compact_revision {
                return Err(EtcdError::Compacted.into());
            }
            if r.revision > revision {
                return Err(EtcdError::FutureRev.into());
            }
            let removed = compact::compact(db, w.batch_mut(), r.revision)?;
            tracing::info!(revision = r.revision, removed, "compacted");
            new_compact = r.revision;
            Res::Compact(PbCompactionResponse {
                header: header(revision),
            })
        }
        Some(Op::LeaseGrant(r)) => {
            if get_lease(db, r.id)?.is_some() {
                return Err(EtcdError::LeaseExists.into());
            }
            let record = LeaseRecord {
                id: r.id,
                ttl: r.ttl,
            };
            w.batch_mut().put_cf(
                db::cf(db, CF_LEASES),
                (r.id as u64).to_be_bytes(),
                serde_json::to_vec(&record)?,
            );
            lease_effect = Some(LeaseEffect::Granted(record));
            Res::LeaseGrant(PbLeaseGrantResponse {
                header: header(revision),
                id: r.id,
                ttl: r.ttl,
                error: String::new(),
            })
        }
        Some(Op::LeaseRevoke(r)) => {
            if get_lease(db, r.id)?.is_none() {
                return Err(EtcdError::LeaseNotFound.into());
            }
            for key in lease_keys(db, r.id)? {
                w.delete_range(&PbDeleteRequest {
                    key,
                    ..Default::default()
                })?;
            }
            w.batch_mut()
                .delete_cf(db::cf(db, CF_LEASES), (r.id as u64).to_be_bytes());
            lease_effect = Some(LeaseEffect::Revoked(r.id));
            Res::LeaseRevoke(PbLeaseRevokeResponse {
                header: header(w.rev()),
            })
        }
        Some(Op::Alarm(r)) => {
            let mut alarms = read_alarms(db)?;
            let this = (r.member_id, r.alarm);
            let changed = match r.action {
                ALARM_ACTIVATE => {
                    if !alarms.contains(&this) {
                        alarms.push(this);
                    }
                    vec![this]
                }
                ALARM_DEACTIVATE => {
                    let before = alarms.len();
                    alarms.retain(|a| *a != this);
                    if alarms.len() < before {
                        vec![this]
                    } else {
                        Vec::new()
                    }
                }
                _ => alarms.clone(),
            };
            w.batch_mut().put_cf(
                db::cf(db, CF_SM_META),
                META_ALARMS,
                serde_json::to_vec(&alarms)?,
            );
            Res::Alarm(PbAlarmResponse {
                header: header(revision),
                alarms: changed
                    .into_iter()
                    .map(|(member_id, alarm)| PbAlarmMember { member_id, alarm })
                    .collect(),
            })
        }
        Some(Op::Batch(_)) | Some(Op::Auth(_)) | None => {
            return Ok(empty(revision, compact_revision))
        }
    };
    let mut finished = w.finish();
    let events = if finished.events.is_empty() {
        None
    } else {
        write_i64(db, &mut finished.batch, META_REVISION, finished.revision);
        Some(RevisionEvents {
            revision: finished.revision,
            events: finished.events,
        })
    };
    Ok(Applied {
        response: StoreResponse::ok(response),
        batch: finished.batch,
        events,
        revision: finished.revision,
        compact_revision: new_compact,
        lease_effect,
    })
}

fn empty(revision: i64, compact_revision: i64) -> Applied {
    Applied {
        response: StoreResponse::default(),
        batch: WriteBatch::default(),
        events: None,
        revision,
        compact_revision,
        lease_effect: None,
    }
}
