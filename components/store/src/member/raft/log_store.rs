//! Raft log (openraft `RaftLogStorage`): entries in the log's own files ([`LogFile`]), hard
//! state (vote, commit hint, purge point) in rocksdb.
//!
//! Every mutation is synced before openraft is told it is durable. Entries are stored in
//! [`entry_codec`]'s binary record. The newest entries are also kept in memory ([`Tail`]):
//! openraft reads each entry back right after appending it, to apply it once committed, and
//! serving that from memory saves a file read and a decode per entry.
//!
//! The state machine's rocksdb writes are not synced on the write path: after a power loss
//! rocksdb comes back at an earlier consistent point (data and last-applied id move
//! together) and openraft applies the rest again from this log. So entries are only purged
//! once a synced rocksdb write has made everything applied before them durable.

// openraft's traits fix StorageError as the error type; it is large, and that is theirs to keep.
#![allow(clippy::result_large_err)]

use std::collections::VecDeque;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{Entry, EntryPayload, LogId, OptionalSend, StorageError, StorageIOError, Vote};
use rocksdb::{IteratorMode, WriteBatch, DB};

use crate::command::TypeConfig;
use crate::member::raft::entry_codec;
use crate::member::waiters::Waiters;
use crate::storage::db::{self, CF_RAFT_LOG, CF_RAFT_META};
use crate::storage::raftlog::{LogFile, LogFileError};

const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

type StorageResult<T> = Result<T, StorageError<u64>>;

/// A log append plus its sync taking longer than this is logged (etcd warns at 1 s).
const SLOW_SYNC: std::time::Duration = std::time::Duration::from_secs(1);

/// How often the commit index (a hint) is written at most.
const COMMITTED_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Entries the tail keeps, and the encoded bytes it holds at most: enough for the entries
/// between an append and their apply, small next to the store's memory.
const TAIL_ENTRIES: usize = 256;
const TAIL_BYTES: usize = 2 * 1024 * 1024;

/// The newest log entries, consecutive, as they were appended (a copy of what rocksdb holds).
#[derive(Default)]
struct Tail {
    entries: VecDeque<(Entry<TypeConfig>, usize)>,
    bytes: usize,
}

impl Tail {
    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|(e, _)| e.log_id.index)
    }

    fn push(&mut self, entry: Entry<TypeConfig>, size: usize) {
        let next = self.entries.back().map(|(e, _)| e.log_id.index + 1);
        if next.is_some_and(|n| n != entry.log_id.index) {
            self.clear();
        }
        self.bytes += size;
        self.entries.push_back((entry, size));
        while self.entries.len() > TAIL_ENTRIES || self.bytes > TAIL_BYTES {
            let Some((_, s)) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= s;
        }
    }

    /// Drops entries from `index` on (truncate).
    fn drop_from(&mut self, index: u64) {
        while self
            .entries
            .back()
            .is_some_and(|(e, _)| e.log_id.index >= index)
        {
            if let Some((_, s)) = self.entries.pop_back() {
                self.bytes -= s;
            }
        }
    }

    /// Drops entries up to `index` inclusive (purge).
    fn drop_through(&mut self, index: u64) {
        while self
            .entries
            .front()
            .is_some_and(|(e, _)| e.log_id.index <= index)
        {
            if let Some((_, s)) = self.entries.pop_front() {
                self.bytes -= s;
            }
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// The entries in [start, end) if the tail holds all of them.
    fn get(&self, start: u64, end: u64) -> Option<Vec<Entry<TypeConfig>>> {
        let first = self.first_index()?;
        let last = self.entries.back()?.0.log_id.index;
        if start < first || end > last + 1 || start >= end {
            return None;
        }
        let from = (start - first) as usize;
        let to = (end - first) as usize;
        Some(
            self.entries
                .range(from..to)
                .map(|(e, _)| e.clone())
                .collect(),
        )
    }
}

/// Raft log store; cheap to clone (the reader openraft asks for is a clone).
#[derive(Clone)]
pub struct LogStore {
    db: Arc<DB>,
    /// The entries. Held across an append's write and sync: openraft makes one log change at a
    /// time, and reads mostly come from the tail.
    file: Arc<Mutex<LogFile>>,
    tail: Arc<Mutex<Tail>>,
    /// Told which proposals are synced, so the proposer can cut the next batch.
    waiters: Arc<Waiters>,
    /// When the commit index was last written (see save_committed).
    committed_saved: Arc<Mutex<Option<std::time::Instant>>>,
}

fn decode_err(e: entry_codec::EntryCodecError) -> StorageError<u64> {
    read_err(e)
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn read_err(e: impl std::error::Error + 'static) -> StorageError<u64> {
    StorageIOError::read_logs(&e).into()
}

fn write_err(e: impl std::error::Error + 'static) -> StorageError<u64> {
    StorageIOError::write_logs(&e).into()
}

impl LogStore {
    /// Opens the log in `dir`, moving entries an older kiln-store kept in rocksdb into it.
    pub fn open(db: Arc<DB>, dir: &Path, waiters: Arc<Waiters>) -> Result<Self, LogFileError> {
        let purged: Option<LogId<u64>> =
            read_meta(&db, KEY_LAST_PURGED).map_err(|e| LogFileError::Io {
                path: dir.display().to_string(),
                source: std::io::Error::other(format!("reading the purge point: {e}")),
            })?;
        let mut file = LogFile::open(dir, purged.map(|p| p.index))?;
        migrate_from_rocksdb(&db, &mut file, dir)?;
        Ok(Self {
            db,
            file: Arc::new(Mutex::new(file)),
            tail: Arc::new(Mutex::new(Tail::default())),
            waiters,
            committed_saved: Arc::new(Mutex::new(None)),
        })
    }

    fn file(&self) -> std::sync::MutexGuard<'_, LogFile> {
        // A panic while holding it happened before or after a whole file operation, each of
        // which leaves the files consistent; its in-memory view is only ever updated after.
        self.file.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, Tail> {
        // The tail is a cache: a panic elsewhere while holding it leaves nothing half-done
        // that matters more than serving it.
        self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn put_meta<T: serde::Serialize>(
        &self,
        key: &[u8],
        value: &T,
        sync: bool,
    ) -> StorageResult<()> {
        let cf = db::cf(&self.db, CF_RAFT_META);
        let bytes = serde_json::to_vec(value).map_err(write_err)?;
        let mut batch = WriteBatch::default();
        batch.put_cf(cf, key, bytes);
        let opts = if sync {
            db::sync_write()
        } else {
            db::buffered_write()
        };
        self.db.write_opt(batch, &opts).map_err(write_err)
    }

    fn last_entry_log_id(&self) -> StorageResult<Option<LogId<u64>>> {
        let file = self.file();
        let Some(last) = file.last_index() else {
            return Ok(None);
        };
        match file.read(last).map_err(read_err)? {
            Some(bytes) => Ok(Some(entry_codec::log_id(&bytes).map_err(decode_err)?)),
            None => Ok(None),
        }
    }
}

fn read_meta<T: serde::de::DeserializeOwned>(db: &DB, key: &[u8]) -> StorageResult<Option<T>> {
    let cf = db::cf(db, CF_RAFT_META);
    match db.get_cf(cf, key).map_err(read_err)? {
        Some(bytes) => Ok(Some(serde_json::from_slice(&bytes).map_err(read_err)?)),
        None => Ok(None),
    }
}

/// Entries kept in rocksdb's `raft_log` family by kiln-store before the log had files of its
/// own: copied into the file log (as stored; the codec reads both formats), synced, then
/// deleted from rocksdb. A crash in between copies them again into an empty log.
fn migrate_from_rocksdb(db: &DB, file: &mut LogFile, dir: &Path) -> Result<(), LogFileError> {
    let cf = db::cf(db, CF_RAFT_LOG);
    let failed = |e: rocksdb::Error| LogFileError::Io {
        path: dir.display().to_string(),
        source: std::io::Error::other(format!("moving the log out of rocksdb: {e}")),
    };
    let mut entries: Vec<(u64, Vec<u8>)> = Vec::new();
    for item in db.iterator_cf(cf, IteratorMode::Start) {
        let (key, value) = item.map_err(failed)?;
        let mut idx = [0u8; 8];
        idx.copy_from_slice(&key[..8]);
        entries.push((u64::from_be_bytes(idx), value.to_vec()));
    }
    if entries.is_empty() {
        return Ok(());
    }
    if file.last_index().is_none() {
        let records: Vec<(u64, &[u8])> = entries.iter().map(|(i, v)| (*i, v.as_slice())).collect();
        file.append(&records)?;
        tracing::info!(
            entries = records.len(),
            "raft log moved out of rocksdb into its own files"
        );
    }
    let mut batch = WriteBatch::default();
    batch.delete_range_cf(cf, index_key(0), index_key(u64::MAX));
    batch.delete_cf(cf, index_key(u64::MAX));
    db.write_opt(batch, &db::sync_write()).map_err(failed)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => Some(i.saturating_add(1)),
            Bound::Excluded(i) => Some(*i),
            Bound::Unbounded => None,
        };
        if let Some(entries) = end.and_then(|end| self.tail().get(start, end)) {
            return Ok(entries);
        }
        let file = self.file();
        let Some(last) = file.last_index() else {
            return Ok(Vec::new());
        };
        let from = start.max(file.first_index().unwrap_or(start));
        // Exclusive: openraft's first entry has index 0, so [0, 0) must stay empty.
        let until = end.map_or(last + 1, |e| e.min(last + 1));
        let mut entries = Vec::new();
        for index in from..until {
            match file.read(index).map_err(read_err)? {
                Some(bytes) => entries.push(entry_codec::decode(&bytes).map_err(decode_err)?),
                None => break,
            }
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last_purged: Option<LogId<u64>> = read_meta(&self.db, KEY_LAST_PURGED)?;
        let last = self.last_entry_log_id()?.or(last_purged);
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> StorageResult<()> {
        self.put_meta(KEY_VOTE, vote, true)
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<u64>>> {
        read_meta(&self.db, KEY_VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> StorageResult<()> {
        // A hint only: losing it after a crash just means re-learning the commit index, so it
        // rides on the next synced write instead of costing an fsync of its own. openraft
        // saves it after every commit; writing it at most every COMMITTED_EVERY (always when
        // there is none yet) spares the core a rocksdb write per batch, and a restart then
        // re-applies from a commit index at most that much older.
        let now = std::time::Instant::now();
        {
            let mut last = self
                .committed_saved
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|at| now.duration_since(at) < COMMITTED_EVERY) {
                return Ok(());
            }
            *last = Some(now);
        }
        self.put_meta(KEY_COMMITTED, &committed, false)
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<u64>>> {
        Ok(read_meta::<Option<LogId<u64>>>(&self.db, KEY_COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        // The write and its fdatasync run right here, on the Raft thread (raft/thread.rs):
        // openraft 0.9's core waits for the callback before it does anything else anyway, and
        // a blocking thread would cost a wakeup there and one back per append. This sync is the
        // only one on a write's way to its answer: the commit index and the state machine ride
        // along unsynced (see the module's comment).
        let mut encoded = Vec::with_capacity(entries.len());
        for entry in &entries {
            encoded.push(entry_codec::encode(entry).map_err(write_err)?);
        }
        let records: Vec<(u64, &[u8])> = entries
            .iter()
            .zip(&encoded)
            .map(|(e, b)| (e.log_id.index, b.as_slice()))
            .collect();
        let started = std::time::Instant::now();
        let written = self.file().append(&records);
        let took = started.elapsed();
        if took > SLOW_SYNC {
            // As etcd's "slow fdatasync": the disk, not the store, holds writes up.
            tracing::warn!(
                took_ms = took.as_millis() as u64,
                entries = records.len(),
                "slow log sync"
            );
        }
        if let Err(e) = written {
            callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
            return Err(write_err(e));
        }
        self.waiters
            .flushed(entries.iter().filter_map(|e| match &e.payload {
                EntryPayload::Normal(req) if req.proposal != 0 => Some(req.proposal),
                _ => None,
            }));
        let mut tail = self.tail();
        for (entry, bytes) in entries.into_iter().zip(&encoded) {
            tail.push(entry, bytes.len());
        }
        drop(tail);
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> StorageResult<()> {
        // Removes conflicting entries [log_id.index, ∞).
        self.tail().drop_from(log_id.index);
        self.file().truncate(log_id.index).map_err(write_err)
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> StorageResult<()> {
        // Record the purge point first, so a crash in between never loses it. The write is
        // synced, and with it everything rocksdb holds before it: the state machine's writes
        // of the entries purged here are durable before the entries go.
        self.put_meta(KEY_LAST_PURGED, &log_id, true)?;
        self.tail().drop_through(log_id.index);
        self.file().purge(log_id.index).map_err(write_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{store_request::Op, StoreRequest};
    use etcd_client::proto::PbPutRequest;
    use openraft::CommittedLeaderId;

    fn entry(index: u64) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(2, 1), index),
            payload: EntryPayload::Normal(StoreRequest::new(Op::Put(PbPutRequest {
                key: format!("/k/{index}").into_bytes(),
                value: b"v".to_vec(),
                ..Default::default()
            }))),
        }
    }

    #[tokio::test]
    async fn entries_an_older_store_kept_in_rocksdb_move_to_the_file_log() {
        let dir = tempfile::tempdir().unwrap();
        let db = db::open(&dir.path().join("member")).unwrap();
        // As kiln-store wrote them before: JSON for the oldest, binary after.
        let cf = db::cf(&db, CF_RAFT_LOG);
        for i in 0..5u64 {
            let bytes = if i < 2 {
                serde_json::to_vec(&entry(i)).unwrap()
            } else {
                entry_codec::encode(&entry(i)).unwrap()
            };
            db.put_cf(cf, index_key(i), bytes).unwrap();
        }
        let wal = dir.path().join("member").join("wal");
        let mut store = LogStore::open(db.clone(), &wal, Arc::new(Waiters::new())).unwrap();
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(entry(4).log_id));
        let got = store.try_get_log_entries(0..5).await.unwrap();
        let keys: Vec<u64> = got.iter().map(|e| e.log_id.index).collect();
        assert_eq!(keys, vec![0, 1, 2, 3, 4]);
        assert_eq!(store.try_get_log_entries(0..0).await.unwrap().len(), 0);
        let cf = db::cf(&db, CF_RAFT_LOG);
        assert!(
            db.iterator_cf(cf, IteratorMode::Start).next().is_none(),
            "rocksdb keeps no entries once they moved"
        );
        // Reopened: the entries are served from the files alone.
        drop(store);
        let mut store = LogStore::open(db, &wal, Arc::new(Waiters::new())).unwrap();
        assert_eq!(store.try_get_log_entries(3..=4).await.unwrap().len(), 2);
    }
}
