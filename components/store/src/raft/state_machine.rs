//! The Raft state machine (openraft `RaftStateMachine`): applies committed commands to the MVCC
//! store and builds/installs snapshots.
//!
//! Each entry is one atomic WriteBatch that also records the entry as applied, so a crash
//! never leaves half an entry behind; the last batch of an apply call is fsynced (which syncs
//! the WAL for all before it) before openraft hears the result.

// openraft's traits fix StorageError as the error type; it is large, and that is theirs to keep.
#![allow(clippy::result_large_err)]

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::Arc;

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::{
    Entry, EntryPayload, LogId, OptionalSend, Snapshot, SnapshotMeta, StorageError, StorageIOError,
    StoredMembership,
};
use rocksdb::{WriteBatch, DB};
use serde::{Deserialize, Serialize};

use crate::db::{self, CF_SM_META};
use crate::lease::Lessor;
use crate::mvcc::apply::{self, LeaseEffect};
use crate::mvcc::Mvcc;
use crate::raft::snapshot;
use crate::raft::types::{MemberNode, StoreResponse, TypeConfig};

pub const META_LAST_APPLIED: &[u8] = b"last_applied";
pub const META_MEMBERSHIP: &[u8] = b"membership";

type StorageResult<T> = Result<T, StorageError<u64>>;
type Membership = StoredMembership<u64, MemberNode>;

fn sm_read_err(e: impl std::error::Error + 'static) -> StorageError<u64> {
    StorageIOError::read_state_machine(&e).into()
}

fn sm_write_err(e: impl std::error::Error + 'static) -> StorageError<u64> {
    StorageIOError::write_state_machine(&e).into()
}

fn snap_err(e: impl std::error::Error + 'static) -> StorageError<u64> {
    StorageIOError::write_snapshot(None, &e).into()
}

/// The current snapshot as kept on disk, so a restarted member can still send it.
#[derive(Serialize, Deserialize)]
struct StoredSnapshotMeta {
    meta: SnapshotMeta<u64, MemberNode>,
}

pub struct StateMachine {
    mvcc: Arc<Mvcc>,
    lessor: Arc<Lessor>,
    revision: i64,
    compact_revision: i64,
    snapshot_dir: PathBuf,
}

impl StateMachine {
    pub fn new(mvcc: Arc<Mvcc>, lessor: Arc<Lessor>, snapshot_dir: PathBuf) -> Self {
        Self {
            revision: mvcc.revision(),
            compact_revision: mvcc.compact_revision(),
            mvcc,
            lessor,
            snapshot_dir,
        }
    }

    fn db(&self) -> &DB {
        self.mvcc.db()
    }

    fn read_meta<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> StorageResult<Option<T>> {
        let db = self.db();
        match db
            .get_cf(db::cf(db, CF_SM_META), key)
            .map_err(sm_read_err)?
        {
            Some(v) => Ok(Some(serde_json::from_slice(&v).map_err(sm_read_err)?)),
            None => Ok(None),
        }
    }

    fn snapshot_paths(&self) -> (PathBuf, PathBuf) {
        (
            self.snapshot_dir.join("current.snap"),
            self.snapshot_dir.join("current.meta.json"),
        )
    }
}

/// Writes the snapshot files atomically (temp file + rename).
fn save_snapshot(
    dir: &std::path::Path,
    meta: &SnapshotMeta<u64, MemberNode>,
    data: &[u8],
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let data_tmp = dir.join("current.snap.tmp");
    let meta_tmp = dir.join("current.meta.json.tmp");
    std::fs::write(&data_tmp, data)?;
    let meta_json = serde_json::to_vec(&StoredSnapshotMeta { meta: meta.clone() })?;
    std::fs::write(&meta_tmp, meta_json)?;
    std::fs::rename(&data_tmp, dir.join("current.snap"))?;
    std::fs::rename(&meta_tmp, dir.join("current.meta.json"))?;
    Ok(())
}

/// Builds snapshots from a rocksdb snapshot, concurrently with applying.
pub struct SnapshotBuilder {
    mvcc: Arc<Mvcc>,
    snapshot_dir: PathBuf,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let db = self.mvcc.db().clone();
        let dir = self.snapshot_dir.clone();
        // Serializing the whole store is blocking work; keep it off the async workers.
        let built = tokio::task::spawn_blocking(move || -> StorageResult<Snapshot<TypeConfig>> {
            let snap = db.snapshot();
            let meta_cf = db::cf(&db, CF_SM_META);
            let read = |key: &[u8]| snap.get_cf(meta_cf, key).map_err(sm_read_err);
            let last_applied: Option<LogId<u64>> = match read(META_LAST_APPLIED)? {
                Some(v) => serde_json::from_slice(&v).map_err(sm_read_err)?,
                None => None,
            };
            let membership: Membership = match read(META_MEMBERSHIP)? {
                Some(v) => serde_json::from_slice(&v).map_err(sm_read_err)?,
                None => Membership::default(),
            };
            let data = snapshot::encode(&db, &snap).map_err(snap_err)?;
            let snapshot_id = match &last_applied {
                Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, data.len()),
                None => format!("0-0-{}", data.len()),
            };
            let meta = SnapshotMeta {
                last_log_id: last_applied,
                last_membership: membership,
                snapshot_id,
            };
            save_snapshot(&dir, &meta, &data).map_err(snap_err)?;
            Ok(Snapshot {
                meta,
                snapshot: Box::new(Cursor::new(data)),
            })
        })
        .await
        .map_err(|e| snap_err(std::io::Error::other(e.to_string())))??;
        tracing::info!(snapshot = %built.meta, "built raft snapshot");
        Ok(built)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> StorageResult<(Option<LogId<u64>>, Membership)> {
        let applied: Option<LogId<u64>> = self.read_meta(META_LAST_APPLIED)?.flatten();
        let membership: Membership = self.read_meta(META_MEMBERSHIP)?.unwrap_or_default();
        Ok((applied, membership))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<StoreResponse>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut entries = entries.into_iter().peekable();
        let mut responses = Vec::new();
        let mut published = Vec::new();
        let mut lease_effects = Vec::new();
        while let Some(entry) = entries.next() {
            let db = self.mvcc.db().clone();
            let (mut batch, response) = match &entry.payload {
                EntryPayload::Blank => (WriteBatch::default(), StoreResponse::default()),
                EntryPayload::Normal(req) => {
                    let applied = apply::apply(&db, self.revision, self.compact_revision, req)
                        .map_err(|e| StorageError::from(StorageIOError::apply(entry.log_id, &e)))?;
                    self.revision = applied.revision;
                    self.compact_revision = applied.compact_revision;
                    published.extend(applied.events);
                    lease_effects.extend(applied.lease_effect);
                    (applied.batch, applied.response)
                }
                EntryPayload::Membership(m) => {
                    let stored = Membership::new(Some(entry.log_id), m.clone());
                    let mut batch = WriteBatch::default();
                    batch.put_cf(
                        db::cf(&db, CF_SM_META),
                        META_MEMBERSHIP,
                        serde_json::to_vec(&stored).map_err(sm_write_err)?,
                    );
                    (batch, StoreResponse::default())
                }
            };
            batch.put_cf(
                db::cf(&db, CF_SM_META),
                META_LAST_APPLIED,
                serde_json::to_vec(&Some(entry.log_id)).map_err(sm_write_err)?,
            );
            let opts = if entries.peek().is_none() {
                db::sync_write()
            } else {
                db::buffered_write()
            };
            db.write_opt(batch, &opts).map_err(sm_write_err)?;
            responses.push(response);
        }
        // Durable now: let readers and watchers see it.
        self.mvcc
            .publish(self.revision, self.compact_revision, published);
        for effect in lease_effects {
            match effect {
                LeaseEffect::Granted(r) => self.lessor.granted(r),
                LeaseEffect::Revoked(id) => self.lessor.revoked(id),
            }
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            mvcc: self.mvcc.clone(),
            snapshot_dir: self.snapshot_dir.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, MemberNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let data = snapshot.into_inner();
        let db = self.mvcc.db().clone();
        let batch = snapshot::decode_into_batch(&db, &data).map_err(snap_err)?;
        db.write_opt(batch, &db::sync_write())
            .map_err(sm_write_err)?;
        save_snapshot(&self.snapshot_dir, meta, &data).map_err(snap_err)?;
        self.mvcc.reload().map_err(sm_read_err)?;
        self.revision = self.mvcc.revision();
        self.compact_revision = self.mvcc.compact_revision();
        self.lessor.reset(&self.mvcc.leases().map_err(sm_read_err)?);
        self.mvcc.resync();
        tracing::info!(snapshot = %meta, "installed raft snapshot");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let (data_path, meta_path) = self.snapshot_paths();
        let meta_bytes = match std::fs::read(&meta_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(sm_read_err(e)),
        };
        let stored: StoredSnapshotMeta =
            serde_json::from_slice(&meta_bytes).map_err(sm_read_err)?;
        let data = std::fs::read(&data_path).map_err(sm_read_err)?;
        Ok(Some(Snapshot {
            meta: stored.meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}
