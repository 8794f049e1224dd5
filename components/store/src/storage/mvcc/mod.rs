//! etcd's multi-version key-value model on rocksdb.
//!
//! Every write transaction bumps the store revision by one; each key version records
//! create/mod revision and version exactly as etcd does. History stays in rocksdb keyed by
//! (key, revision) for reads at past revisions, and by revision for watches, until compacted.

pub mod apply;
pub mod compact;
pub mod hash;
pub mod index;
pub mod keys;
pub mod range;
pub mod read;
pub mod txn;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::proto::{PbEvent, PbRangeRequest, PbRangeResponse, PbTxnRequest, PbTxnResponse};
use rocksdb::{WriteBatch, DB};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::etcd_error::EtcdError;
use crate::storage::db::{self, CF_LEASES, CF_LEASE_KEYS, CF_SM_META};
use index::KeyIndex;
use read::ReadView;
use txn::TxnWriter;

#[derive(Debug, thiserror::Error)]
pub enum MvccError {
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    #[error("rocksdb: {0}")]
    Db(#[from] rocksdb::Error),
    #[error("decoding stored protobuf: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("decoding stored json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("corrupt store: {0}")]
    Corrupt(String),
}

/// The events of one committed revision, as watchers receive them (prev_kv always filled when
/// a previous version existed; watchers that did not ask for it drop it).
#[derive(Debug, Clone)]
pub struct RevisionEvents {
    pub revision: i64,
    pub events: Vec<PbEvent>,
}

/// A lease as the state machine stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    pub id: i64,
    /// TTL in seconds granted at creation.
    pub ttl: i64,
}

pub const META_REVISION: &[u8] = b"revision";
pub const META_COMPACT_REVISION: &[u8] = b"compact_revision";
/// Raised alarms as JSON `[(member id, alarm type)]`; replicated like etcd's alarm bucket.
pub const META_ALARMS: &[u8] = b"alarms";
/// etcd's AlarmType NOSPACE.
pub const ALARM_NOSPACE: i32 = 1;

/// Shared handle on the MVCC store: reads for the API, revision bookkeeping and the event feed
/// for watches. Writes happen only in the Raft state machine.
pub struct Mvcc {
    db: Arc<DB>,
    revision: AtomicI64,
    compact_revision: AtomicI64,
    /// Raft log index the state machine applied last in this process (0 before the first
    /// apply): lets a write that was applied here skip waiting on Raft's metrics.
    applied_index: AtomicU64,
    events: broadcast::Sender<Arc<RevisionEvents>>,
    /// Raised alarms, as written: every write checks them, so they are kept here rather than
    /// read and parsed from rocksdb each time. Reloaded whenever an alarm command is applied
    /// and when the state machine is replaced.
    alarms: Mutex<Vec<(u64, i32)>>,
    /// The backend size and when it was measured (see [`Mvcc::backend_size_recent`]).
    size: Mutex<Option<(Instant, u64)>>,
    /// Every live key's latest version, for the apply path (index.rs).
    index: KeyIndex,
}

/// How old a backend size the quota check may use: measuring it asks rocksdb for ten
/// properties, which cost more than the rest of a small put's apply. A burst can overshoot
/// the quota by this much of writes before NOSPACE is raised; etcd's own check is likewise
/// an estimate (the size plus the request's own bytes).
const SIZE_MAX_AGE: Duration = Duration::from_millis(50);

impl Mvcc {
    pub fn open(db: Arc<DB>) -> Result<Self, MvccError> {
        let (events, _) = broadcast::channel(1024);
        let mvcc = Self {
            db,
            revision: AtomicI64::new(0),
            compact_revision: AtomicI64::new(0),
            applied_index: AtomicU64::new(0),
            events,
            alarms: Mutex::new(Vec::new()),
            size: Mutex::new(None),
            index: KeyIndex::default(),
        };
        mvcc.reload()?;
        Ok(mvcc)
    }

    /// Re-reads revisions and the key index from disk (at open and after a snapshot is
    /// installed).
    pub fn reload(&self) -> Result<(), MvccError> {
        self.index.rebuild(&self.db)?;
        let revision = read_i64(&self.db, META_REVISION)?.unwrap_or(1);
        let compact = read_i64(&self.db, META_COMPACT_REVISION)?.unwrap_or(0);
        self.revision.store(revision, Ordering::SeqCst);
        self.compact_revision.store(compact, Ordering::SeqCst);
        self.reload_alarms()?;
        *lock(&self.size) = None;
        Ok(())
    }

    /// Re-reads the raised alarms (after an alarm command is written).
    pub fn reload_alarms(&self) -> Result<(), MvccError> {
        *lock(&self.alarms) = read_alarms(&self.db)?;
        Ok(())
    }

    pub fn db(&self) -> &Arc<DB> {
        &self.db
    }

    /// The key index; only the state machine's apply path may use it (index.rs).
    pub fn index(&self) -> &KeyIndex {
        &self.index
    }

    /// The newest revision whose writes are applied (and durable in the Raft log). A fresh
    /// store is at 1, as etcd.
    pub fn revision(&self) -> i64 {
        self.revision.load(Ordering::SeqCst)
    }

    /// The Raft log index this member's state machine has applied, as far as it has applied
    /// anything since the process started (0 otherwise).
    pub fn applied_index(&self) -> u64 {
        self.applied_index.load(Ordering::SeqCst)
    }

    pub fn compact_revision(&self) -> i64 {
        self.compact_revision.load(Ordering::SeqCst)
    }

    /// Called by the state machine after it wrote the entries up to Raft log index `applied`
    /// (durable in the Raft log): moves the revisions forward and feeds watchers, in revision
    /// order.
    pub fn publish(
        &self,
        applied: u64,
        revision: i64,
        compact_revision: i64,
        batches: Vec<RevisionEvents>,
    ) {
        self.compact_revision
            .store(compact_revision, Ordering::SeqCst);
        self.revision.store(revision, Ordering::SeqCst);
        self.applied_index.fetch_max(applied, Ordering::SeqCst);
        for batch in batches {
            // No receivers is fine: nobody watches.
            let _ = self.events.send(Arc::new(batch));
        }
    }

    /// Tells watchers that the store jumped (a Raft snapshot was installed): the revisions in
    /// between never passed through the feed. An empty batch is that signal; watchers re-read
    /// what they miss from history (or learn it was compacted away).
    pub fn resync(&self) {
        let _ = self.events.send(Arc::new(RevisionEvents {
            revision: self.revision(),
            events: Vec::new(),
        }));
    }

    /// Subscribes to committed events. Subscribe before reading history, so nothing falls in
    /// between.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<RevisionEvents>> {
        self.events.subscribe()
    }

    pub fn view(&self) -> ReadView<'_> {
        ReadView::new(&self.db)
    }

    /// Serves a Range at the current revision (the caller has done the linearizable-read
    /// barrier when one is needed).
    pub fn range(&self, req: &PbRangeRequest) -> Result<PbRangeResponse, MvccError> {
        let current = self.revision();
        let writer = TxnWriter::new(&self.db, current, self.compact_revision());
        writer.range(req)
    }

    /// Evaluates a transaction without writes locally (etcd serves read-only txns this way).
    pub fn read_only_txn(&self, req: &PbTxnRequest) -> Result<PbTxnResponse, MvccError> {
        let current = self.revision();
        let mut writer = TxnWriter::new(&self.db, current, self.compact_revision());
        let mut resp = writer.txn(req)?;
        if let Some(h) = resp.header.as_mut() {
            h.revision = current;
        }
        Ok(resp)
    }

    /// Raised alarms as (member id, alarm type).
    pub fn alarms(&self) -> Vec<(u64, i32)> {
        lock(&self.alarms).clone()
    }

    /// [`Mvcc::backend_size`], measured at most [`SIZE_MAX_AGE`] ago: for the quota check on
    /// every write. Status and the alarm itself use the exact figure.
    pub fn backend_size_recent(&self) -> u64 {
        // Measured under the lock, so writers that find the figure stale do not all measure.
        let mut cached = lock(&self.size);
        match *cached {
            Some((at, size)) if at.elapsed() < SIZE_MAX_AGE => size,
            _ => self.remeasure(&mut cached),
        }
    }

    /// [`Mvcc::backend_size`] measured now, and kept as the recent figure: a write that found
    /// the store over quota by a stale figure then lets the writes after it go by the fresh one.
    pub fn backend_size_fresh(&self) -> u64 {
        self.remeasure(&mut lock(&self.size))
    }

    fn remeasure(&self, cached: &mut Option<(Instant, u64)>) -> u64 {
        let size = self.backend_size();
        *cached = Some((Instant::now(), size));
        size
    }

    /// Bytes the state machine occupies (live SST files plus memtables of its column
    /// families): what --quota-backend-bytes limits. Shrinks after compaction + defragment.
    pub fn backend_size(&self) -> u64 {
        db::STATE_MACHINE_CFS
            .iter()
            .map(|name| {
                let cf = db::cf(&self.db, name);
                let prop = |p: &str| {
                    self.db
                        .property_int_value_cf(cf, p)
                        .ok()
                        .flatten()
                        .unwrap_or(0)
                };
                prop("rocksdb.live-sst-files-size") + prop("rocksdb.cur-size-all-mem-tables")
            })
            .sum()
    }

    pub fn leases(&self) -> Result<Vec<LeaseRecord>, MvccError> {
        let cf = db::cf(&self.db, CF_LEASES);
        let mut out = Vec::new();
        for item in self.db.iterator_cf(cf, rocksdb::IteratorMode::Start) {
            let (_, v) = item?;
            out.push(serde_json::from_slice(&v)?);
        }
        Ok(out)
    }

    /// Keys attached to lease `id`.
    pub fn lease_keys(&self, id: i64) -> Result<Vec<Vec<u8>>, MvccError> {
        lease_keys(&self.db, id)
    }
}

pub fn read_i64(db: &DB, key: &[u8]) -> Result<Option<i64>, MvccError> {
    match db.get_cf(db::cf(db, CF_SM_META), key)? {
        Some(v) if v.len() == 8 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(&v);
            Ok(Some(i64::from_be_bytes(b)))
        }
        Some(_) => Err(MvccError::Corrupt(format!(
            "meta {} is not 8 bytes",
            String::from_utf8_lossy(key)
        ))),
        None => Ok(None),
    }
}

pub fn write_i64(db: &DB, batch: &mut WriteBatch, key: &[u8], value: i64) {
    batch.put_cf(db::cf(db, CF_SM_META), key, value.to_be_bytes());
}

/// The cached values behind these locks are whole after any panic (each is one assignment).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn read_alarms(db: &DB) -> Result<Vec<(u64, i32)>, MvccError> {
    match db.get_cf(db::cf(db, CF_SM_META), META_ALARMS)? {
        Some(v) => Ok(serde_json::from_slice(&v)?),
        None => Ok(Vec::new()),
    }
}

pub fn get_lease(db: &DB, id: i64) -> Result<Option<LeaseRecord>, MvccError> {
    match db.get_cf(db::cf(db, CF_LEASES), (id as u64).to_be_bytes())? {
        Some(v) => Ok(Some(serde_json::from_slice(&v)?)),
        None => Ok(None),
    }
}

pub fn lease_keys(db: &DB, id: i64) -> Result<Vec<Vec<u8>>, MvccError> {
    let cf = db::cf(db, CF_LEASE_KEYS);
    let prefix = (id as u64).to_be_bytes();
    let mut out = Vec::new();
    let mode = rocksdb::IteratorMode::From(&prefix, rocksdb::Direction::Forward);
    for item in db.iterator_cf(cf, mode) {
        let (k, _) = item?;
        if !k.starts_with(&prefix) {
            break;
        }
        out.push(k[8..].to_vec());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_size_replaces_the_recent_figure() {
        let dir = tempfile::tempdir().unwrap();
        let mvcc = Mvcc::open(crate::storage::db::open(dir.path()).unwrap()).unwrap();
        // A stale figure far over any quota, as if measured just before a defragment.
        *lock(&mvcc.size) = Some((Instant::now(), u64::MAX));
        assert_eq!(mvcc.backend_size_recent(), u64::MAX);
        let fresh = mvcc.backend_size_fresh();
        assert!(fresh < u64::MAX);
        assert_eq!(mvcc.backend_size_recent(), fresh);
    }
}
