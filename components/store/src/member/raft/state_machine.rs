//! The Raft state machine (openraft `RaftStateMachine`): applies committed commands to the MVCC
//! store and builds/installs snapshots.
//!
//! Each entry is one atomic WriteBatch that also records the entry as applied, so a crash
//! never leaves half an entry behind. A batch entry (several client commands, see
//! `proposer`) is written one command at a time — each command reads what the one before it
//! wrote — and each of those writes records how far into the entry it got, so a crash in the
//! middle resumes the entry where it stopped instead of applying a command twice.
//!
//! Applying does not fsync. Only committed entries are applied, each of which was in a synced
//! append to the Raft log's own files (`storage::raftlog`) before it was committed — so every
//! acknowledged write is durable in the log before it is applied here. A crash may lose the
//! newest state-machine writes (a suffix of rocksdb's WAL, never a hole); the persisted
//! last_applied then goes back with them, and openraft re-applies the entries after it from
//! the log on restart. That needs those entries to still be in the log: openraft purges only
//! up to a snapshot, and building a snapshot syncs rocksdb's WAL first, so the purged prefix is
//! always covered by durable state-machine writes (purge itself is a synced write too).

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

use crate::auth::AuthStore;
use crate::command::store_request::Op;
use crate::command::{
    store_response, MemberNode, StoreBatch, StoreBatchResponse, StoreRequest, StoreResponse,
    TypeConfig,
};
use crate::member::lease::Lessor;
use crate::member::raft::apply;
use crate::member::waiters::{Callers, Waiters};
use crate::storage::db::{
    self, CF_SM_META, META_BATCH_PROGRESS, META_LAST_APPLIED, META_MEMBERSHIP,
};
use crate::storage::mvcc::apply::LeaseEffect;
use crate::storage::mvcc::{Mvcc, RevisionEvents};
use crate::storage::snapshot;

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
    /// The in-memory auth view, refreshed after auth commands (see `auth`).
    auth: Arc<AuthStore>,
    revision: i64,
    compact_revision: i64,
    snapshot_dir: PathBuf,
    /// Callers on this member waiting for the entries they proposed.
    waiters: Arc<Waiters>,
}

impl StateMachine {
    pub fn new(
        mvcc: Arc<Mvcc>,
        lessor: Arc<Lessor>,
        snapshot_dir: PathBuf,
        waiters: Arc<Waiters>,
        auth: Arc<AuthStore>,
    ) -> Self {
        Self {
            revision: mvcc.revision(),
            compact_revision: mvcc.compact_revision(),
            mvcc,
            lessor,
            auth,
            snapshot_dir,
            waiters,
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

/// What applying produced for the in-memory side: watch events and lease changes, handed
/// over once the whole apply call is written.
#[derive(Default)]
struct AppliedEffects {
    events: Vec<RevisionEvents>,
    lease_effects: Vec<LeaseEffect>,
}

/// How far into a batch entry the state machine got: the entry and how many of its commands
/// are written. Only meaningful while `log_id` is the entry after last_applied.
#[derive(Serialize, Deserialize)]
struct BatchProgress {
    log_id: LogId<u64>,
    done: usize,
}

impl StateMachine {
    /// Applies one client command, returning its batch (not yet written) and response.
    fn apply_command(
        &mut self,
        db: &DB,
        log_id: LogId<u64>,
        req: &StoreRequest,
        out: &mut AppliedEffects,
    ) -> StorageResult<(WriteBatch, StoreResponse)> {
        let applied = apply::apply(
            db,
            self.mvcc.index(),
            self.revision,
            self.compact_revision,
            &self.auth.state(),
            req,
        )
        .map_err(|e| StorageError::from(StorageIOError::apply(log_id, &e)))?;
        self.revision = applied.revision;
        self.compact_revision = applied.compact_revision;
        out.events.extend(applied.events);
        out.lease_effects.extend(applied.lease_effect);
        Ok((applied.batch, applied.response))
    }

    /// Moves the key index past a command once its batch is written, so the next command (in
    /// this entry or a later one) finds its keys where they now are.
    fn follow_written(&self, written: &[RevisionEvents]) {
        for revision in written {
            self.mvcc.index().follow(&revision.events);
        }
    }

    /// Writes an entry's last batch together with the entry's log id as last applied.
    fn finish_entry(
        &self,
        db: &DB,
        mut batch: WriteBatch,
        log_id: LogId<u64>,
    ) -> StorageResult<()> {
        batch.put_cf(
            db::cf(db, CF_SM_META),
            META_LAST_APPLIED,
            serde_json::to_vec(&Some(log_id)).map_err(sm_write_err)?,
        );
        db.write_opt(batch, &db::buffered_write())
            .map_err(sm_write_err)
    }

    /// Applies the commands of a batch entry in order, each in its own revision. Commands a
    /// previous run already wrote (a crash mid-entry) are skipped; their responses went to
    /// nobody, since no client waits across a restart.
    fn apply_batch(
        &mut self,
        db: &DB,
        log_id: LogId<u64>,
        b: &StoreBatch,
        out: &mut AppliedEffects,
    ) -> StorageResult<StoreResponse> {
        let done = match self.read_meta::<BatchProgress>(META_BATCH_PROGRESS)? {
            Some(p) if p.log_id == log_id => p.done,
            _ => 0,
        };
        let mut responses = Vec::with_capacity(b.requests.len());
        responses.resize(done.min(b.requests.len()), StoreResponse::default());
        for (i, req) in b.requests.iter().enumerate().skip(done) {
            let mark = out.events.len();
            let (mut batch, response) = self.apply_command(db, log_id, req, out)?;
            let auth_changed = matches!(req.op, Some(Op::Auth(_))) && response.error_code == 0;
            if i + 1 == b.requests.len() {
                self.finish_entry(db, batch, log_id)?;
            } else {
                let progress = BatchProgress {
                    log_id,
                    done: i + 1,
                };
                batch.put_cf(
                    db::cf(db, CF_SM_META),
                    META_BATCH_PROGRESS,
                    serde_json::to_vec(&progress).map_err(sm_write_err)?,
                );
                db.write_opt(batch, &db::buffered_write())
                    .map_err(sm_write_err)?;
            }
            self.follow_written(&out.events[mark..]);
            // The commands after it in this entry are checked against the changed auth
            // state (`auth::recheck`); the whole entry's effects follow in `applied`.
            if auth_changed {
                self.auth.reload(db).map_err(sm_read_err)?;
            }
            responses.push(response);
        }
        if b.requests.is_empty() {
            self.finish_entry(db, WriteBatch::default(), log_id)?;
        }
        Ok(StoreResponse::ok(store_response::Result::Batch(
            StoreBatchResponse { responses },
        )))
    }
}

/// Whether applying `req` may change the raised alarms (which [`Mvcc`] keeps in memory).
fn touches_alarms(req: &StoreRequest) -> bool {
    match &req.op {
        Some(Op::Alarm(_)) => true,
        Some(Op::Batch(b)) => b.requests.iter().any(touches_alarms),
        _ => false,
    }
}

/// Writes the snapshot files atomically (temp file + fsync + rename + directory fsync): once
/// openraft hears of a snapshot it may purge the log behind it, and the snapshot is then what
/// a lagging follower needs.
fn save_snapshot(
    dir: &std::path::Path,
    meta: &SnapshotMeta<u64, MemberNode>,
    data: &[u8],
) -> std::io::Result<()> {
    fn write_synced(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
        let mut f = std::fs::File::create(path)?;
        std::io::Write::write_all(&mut f, bytes)?;
        f.sync_all()
    }
    std::fs::create_dir_all(dir)?;
    let data_tmp = dir.join("current.snap.tmp");
    let meta_tmp = dir.join("current.meta.json.tmp");
    write_synced(&data_tmp, data)?;
    let meta_json = serde_json::to_vec(&StoredSnapshotMeta { meta: meta.clone() })?;
    write_synced(&meta_tmp, &meta_json)?;
    std::fs::rename(&data_tmp, dir.join("current.snap"))?;
    std::fs::rename(&meta_tmp, dir.join("current.meta.json"))?;
    std::fs::File::open(dir)?.sync_all()
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
            // Applying does not fsync; make the state this snapshot shows durable before
            // openraft learns of it and purges the log entries it covers.
            db.flush_wal(true).map_err(sm_write_err)?;
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
        let db = self.mvcc.db().clone();
        let mut applied = AppliedEffects::default();
        let mut responses = Vec::new();
        // Answers for callers waiting here; sent once everything below is visible.
        let mut direct: Vec<(Callers, (u64, StoreResponse))> = Vec::new();
        let mut last_index = 0;
        let mut alarms_touched = false;
        for entry in entries {
            last_index = entry.log_id.index;
            let response = match &entry.payload {
                EntryPayload::Blank => {
                    self.finish_entry(&db, WriteBatch::default(), entry.log_id)?;
                    StoreResponse::default()
                }
                EntryPayload::Normal(req) => {
                    alarms_touched |= touches_alarms(req);
                    let response = match &req.op {
                        Some(Op::Batch(b)) => {
                            self.apply_batch(&db, entry.log_id, b, &mut applied)?
                        }
                        _ => {
                            let mark = applied.events.len();
                            let (batch, response) =
                                self.apply_command(&db, entry.log_id, req, &mut applied)?;
                            self.finish_entry(&db, batch, entry.log_id)?;
                            self.follow_written(&applied.events[mark..]);
                            response
                        }
                    };
                    self.auth
                        .applied(&db, req, &response)
                        .map_err(sm_read_err)?;
                    match self.waiters.take(req.proposal) {
                        // openraft's copy of the answer goes nowhere then.
                        Some(callers) => {
                            direct.push((callers, (entry.log_id.index, response)));
                            StoreResponse::default()
                        }
                        None => response,
                    }
                }
                EntryPayload::Membership(m) => {
                    let stored = Membership::new(Some(entry.log_id), m.clone());
                    let mut batch = WriteBatch::default();
                    batch.put_cf(
                        db::cf(&db, CF_SM_META),
                        META_MEMBERSHIP,
                        serde_json::to_vec(&stored).map_err(sm_write_err)?,
                    );
                    self.finish_entry(&db, batch, entry.log_id)?;
                    StoreResponse::default()
                }
            };
            responses.push(response);
        }
        if alarms_touched {
            self.mvcc.reload_alarms().map_err(sm_read_err)?;
        }
        // Let readers and watchers see it (the entries are durable in the Raft log).
        self.mvcc.publish(
            last_index,
            self.revision,
            self.compact_revision,
            applied.events,
        );
        for effect in applied.lease_effects {
            match effect {
                LeaseEffect::Granted(r) => self.lessor.granted(r),
                LeaseEffect::Revoked(id) => self.lessor.revoked(id),
            }
        }
        for (callers, answer) in direct {
            callers.answer(Ok(answer));
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
        let installed = meta.last_log_id.map_or(0, |l| l.index);
        self.mvcc
            .publish(installed, self.revision, self.compact_revision, Vec::new());
        self.lessor.reset(&self.mvcc.leases().map_err(sm_read_err)?);
        self.auth.reload(&db).map_err(sm_read_err)?;
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

#[cfg(test)]
mod tests {
    use etcd_client::proto::PbPutRequest;
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;

    fn put(key: &str) -> StoreRequest {
        StoreRequest::new(Op::Put(PbPutRequest {
            key: key.as_bytes().to_vec(),
            value: b"v".to_vec(),
            ..Default::default()
        }))
    }

    fn entry(index: u64, req: StoreRequest) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(req),
        }
    }

    fn machine(dir: &std::path::Path) -> StateMachine {
        let db = crate::storage::db::open(&dir.join("member")).unwrap();
        let auth = Arc::new(AuthStore::open(&db, std::time::Duration::from_secs(300), 4).unwrap());
        let mvcc = Arc::new(Mvcc::open(db).unwrap());
        StateMachine::new(
            mvcc,
            Arc::new(Lessor::new(&[])),
            dir.join("snap"),
            Arc::new(Waiters::new()),
            auth,
        )
    }

    fn put_revision(r: &StoreResponse) -> i64 {
        match &r.result {
            Some(store_response::Result::Put(p)) => p.header.as_ref().unwrap().revision,
            other => panic!("not a put response: {other:?}"),
        }
    }

    #[tokio::test]
    async fn batch_applies_each_command_in_its_own_revision() {
        let dir = tempfile::tempdir().unwrap();
        let mut sm = machine(dir.path());
        let batch = StoreRequest::new(Op::Batch(StoreBatch {
            requests: vec![put("a"), put("a"), put("b")],
        }));
        let out = sm
            .apply(vec![entry(1, put("x")), entry(2, batch)])
            .await
            .unwrap();
        assert_eq!(put_revision(&out[0]), 2);
        let Some(store_response::Result::Batch(b)) = &out[1].result else {
            panic!("batch entry answered with {:?}", out[1]);
        };
        let revisions: Vec<i64> = b.responses.iter().map(put_revision).collect();
        assert_eq!(revisions, vec![3, 4, 5]);
        assert_eq!(sm.mvcc.revision(), 5);
        assert_eq!(sm.mvcc.applied_index(), 2);
        let (applied, _) = sm.applied_state().await.unwrap();
        assert_eq!(applied.map(|l| l.index), Some(2));
    }

    #[tokio::test]
    async fn batch_interrupted_by_a_crash_resumes_without_applying_twice() {
        let dir = tempfile::tempdir().unwrap();
        let log_id = LogId::new(CommittedLeaderId::new(1, 1), 1);
        {
            // What a crash after the first command of a 3-command batch leaves on disk.
            let mut sm = machine(dir.path());
            let db = sm.mvcc.db().clone();
            let mut effects = AppliedEffects::default();
            let (mut batch, _) = sm
                .apply_command(&db, log_id, &put("a"), &mut effects)
                .unwrap();
            let progress = BatchProgress { log_id, done: 1 };
            batch.put_cf(
                db::cf(&db, CF_SM_META),
                META_BATCH_PROGRESS,
                serde_json::to_vec(&progress).unwrap(),
            );
            db.write_opt(batch, &db::buffered_write()).unwrap();
        }
        let mut sm = machine(dir.path());
        assert_eq!(sm.mvcc.revision(), 2);
        let batch = StoreRequest::new(Op::Batch(StoreBatch {
            requests: vec![put("a"), put("b"), put("c")],
        }));
        sm.apply(vec![entry(1, batch)]).await.unwrap();
        // a once (revision 2), then b and c: nothing applied twice.
        assert_eq!(sm.mvcc.revision(), 4);
        let range = sm
            .mvcc
            .range(&etcd_client::proto::PbRangeRequest {
                key: b"a".to_vec(),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(range.kvs[0].version, 1);
    }

    /// The key's latest version as a range (which reads rocksdb, not the key index) sees it.
    fn latest(sm: &StateMachine, key: &str) -> Option<(i64, i64, i64, i64)> {
        let range = sm
            .mvcc
            .range(&etcd_client::proto::PbRangeRequest {
                key: key.as_bytes().to_vec(),
                ..Default::default()
            })
            .unwrap();
        range
            .kvs
            .first()
            .map(|kv| (kv.create_revision, kv.mod_revision, kv.version, kv.lease))
    }

    #[tokio::test]
    async fn versions_carry_over_through_the_key_index_across_every_kind_of_write() {
        use etcd_client::proto::{
            PbDeleteRequest, PbLeaseGrantRequest, PbLeaseRevokeRequest, PbTxnRequest,
            PbTxnRequestOp,
        };
        let dir = tempfile::tempdir().unwrap();
        let mut sm = machine(dir.path());
        let batch =
            |reqs: Vec<StoreRequest>| StoreRequest::new(Op::Batch(StoreBatch { requests: reqs }));
        let delete = |key: &str| {
            StoreRequest::new(Op::DeleteRange(PbDeleteRequest {
                key: key.as_bytes().to_vec(),
                ..Default::default()
            }))
        };
        // Commands of one entry see each other's writes: a at 2 then 3, b at 4.
        sm.apply(vec![entry(1, batch(vec![put("a"), put("a"), put("b")]))])
            .await
            .unwrap();
        assert_eq!(latest(&sm, "a"), Some((2, 3, 2, 0)));
        // Deleted (5), then created afresh (6) inside one batch entry.
        sm.apply(vec![entry(2, batch(vec![delete("a"), put("a")]))])
            .await
            .unwrap();
        assert_eq!(latest(&sm, "a"), Some((6, 6, 1, 0)));
        // A txn's put (7) continues b's versions.
        let txn = StoreRequest::new(Op::Txn(PbTxnRequest {
            success: vec![PbTxnRequestOp {
                request: Some(etcd_client::proto::PbTxnOpRequest::RequestPut(
                    etcd_client::proto::PbPutRequest {
                        key: b"b".to_vec(),
                        value: b"t".to_vec(),
                        ..Default::default()
                    },
                )),
            }],
            ..Default::default()
        }));
        sm.apply(vec![entry(3, txn)]).await.unwrap();
        assert_eq!(latest(&sm, "b"), Some((4, 7, 2, 0)));
        // A key on a lease goes with the lease (revoke at 9); put again it starts over (10).
        let grant = StoreRequest::new(Op::LeaseGrant(PbLeaseGrantRequest { ttl: 60, id: 42 }));
        let mut on_lease = put("c");
        if let Some(Op::Put(p)) = on_lease.op.as_mut() {
            p.lease = 42;
        }
        let revoke = StoreRequest::new(Op::LeaseRevoke(PbLeaseRevokeRequest { id: 42 }));
        sm.apply(vec![
            entry(4, grant),
            entry(5, on_lease),
            entry(6, revoke),
            entry(7, put("c")),
        ])
        .await
        .unwrap();
        assert_eq!(latest(&sm, "c"), Some((10, 10, 1, 0)));
        // A restarted member rebuilds the index from disk and carries on from it.
        drop(sm);
        let mut sm = machine(dir.path());
        assert_eq!(sm.mvcc.index().len(), 3);
        sm.apply(vec![entry(8, batch(vec![put("a"), put("b"), put("c")]))])
            .await
            .unwrap();
        assert_eq!(latest(&sm, "a"), Some((6, 11, 2, 0)));
        assert_eq!(latest(&sm, "b"), Some((4, 12, 3, 0)));
        assert_eq!(latest(&sm, "c"), Some((10, 13, 2, 0)));
    }
}
