//! Raft log and hard state in rocksdb (openraft `RaftLogStorage`).
//!
//! Every mutation is written with a synced WriteBatch before openraft is told it is durable.
//! Entries are stored in [`entry_codec`]'s binary record. The newest entries are also kept in
//! memory ([`Tail`]): openraft reads each entry back right after appending it, to apply it
//! once committed, and serving that from memory saves a rocksdb read and a decode per entry.

// openraft's traits fix StorageError as the error type; it is large, and that is theirs to keep.
#![allow(clippy::result_large_err)]

use std::collections::VecDeque;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{Entry, EntryPayload, LogId, OptionalSend, StorageError, StorageIOError, Vote};
use rocksdb::{Direction, IteratorMode, WriteBatch, DB};

use crate::db::{self, CF_RAFT_LOG, CF_RAFT_META};
use crate::raft::entry_codec;
use crate::raft::types::TypeConfig;
use crate::waiters::Waiters;

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
    pub fn new(db: Arc<DB>, waiters: Arc<Waiters>) -> Self {
        Self {
            db,
            tail: Arc::new(Mutex::new(Tail::default())),
            waiters,
            committed_saved: Arc::new(Mutex::new(None)),
        }
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, Tail> {
        // The tail is a cache: a panic elsewhere while holding it leaves nothing half-done
        // that matters more than serving it.
        self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get_meta<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> StorageResult<Option<T>> {
        let cf = db::cf(&self.db, CF_RAFT_META);
        match self.db.get_cf(cf, key).map_err(read_err)? {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes).map_err(read_err)?)),
            None => Ok(None),
        }
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
        let cf = db::cf(&self.db, CF_RAFT_LOG);
        match self.db.iterator_cf(cf, IteratorMode::End).next() {
            Some(item) => {
                let (_, value) = item.map_err(read_err)?;
                Ok(Some(entry_codec::log_id(&value).map_err(decode_err)?))
            }
            None => Ok(None),
        }
    }
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
        let cf = db::cf(&self.db, CF_RAFT_LOG);
        let mut entries = Vec::new();
        let from = index_key(start);
        for item in self
            .db
            .iterator_cf(cf, IteratorMode::From(&from, Direction::Forward))
        {
            let (key, value) = item.map_err(read_err)?;
            let mut idx = [0u8; 8];
            idx.copy_from_slice(&key[..8]);
            if !range.contains(&u64::from_be_bytes(idx)) {
                break;
            }
            entries.push(entry_codec::decode(&value).map_err(decode_err)?);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last_purged: Option<LogId<u64>> = self.get_meta(KEY_LAST_PURGED)?;
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
        self.get_meta(KEY_VOTE)
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
        Ok(self
            .get_meta::<Option<LogId<u64>>>(KEY_COMMITTED)?
            .flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let db = self.db.clone();
        let tail = self.tail.clone();
        let waiters = self.waiters.clone();
        // Encoding and the synced write (an fsync) run on a blocking thread: done inline they
        // would hold a runtime worker for the whole fsync, and with it the task that worker
        // woke last (tokio's LIFO slot cannot be stolen) — typically a client's response.
        // openraft 0.9 waits for the callback before it appends again, so appends stay in
        // order. This one synced write is the only fsync on a write's way to its answer: the
        // commit index and the state machine ride along unsynced (see state_machine).
        let written = tokio::task::spawn_blocking(move || -> StorageResult<()> {
            let cf = db::cf(&db, CF_RAFT_LOG);
            let mut batch = WriteBatch::default();
            let mut sizes = Vec::with_capacity(entries.len());
            for entry in &entries {
                let bytes = entry_codec::encode(entry).map_err(write_err)?;
                sizes.push(bytes.len());
                batch.put_cf(cf, index_key(entry.log_id.index), bytes);
            }
            // Written, then the WAL synced on its own rather than one synced write: rocksdb
            // lets no other write start while a synced write's fsync runs, and the state
            // machine applying the previous batch would wait out this batch's fsync. The
            // sync covers everything written before it; openraft hears of the entries only
            // after it.
            let started = std::time::Instant::now();
            let written = db
                .write_opt(batch, &db::buffered_write())
                .and_then(|()| db.flush_wal(true));
            let took = started.elapsed();
            if took > SLOW_SYNC {
                // As etcd's "slow fdatasync": the disk, not the store, holds writes up.
                tracing::warn!(
                    took_ms = took.as_millis() as u64,
                    entries = sizes.len(),
                    "slow log sync"
                );
            }
            match written {
                Ok(()) => {
                    waiters.flushed(entries.iter().filter_map(|e| match &e.payload {
                        EntryPayload::Normal(req) if req.proposal != 0 => Some(req.proposal),
                        _ => None,
                    }));
                    {
                        let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
                        for (entry, size) in entries.into_iter().zip(sizes) {
                            tail.push(entry, size);
                        }
                    }
                    callback.log_io_completed(Ok(()));
                    Ok(())
                }
                Err(e) => {
                    callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                    Err(write_err(e))
                }
            }
        })
        .await;
        written.map_err(|e| write_err(std::io::Error::other(e.to_string())))?
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> StorageResult<()> {
        // Removes conflicting entries [log_id.index, ∞).
        self.tail().drop_from(log_id.index);
        let cf = db::cf(&self.db, CF_RAFT_LOG);
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(cf, index_key(log_id.index), index_key(u64::MAX));
        batch.delete_cf(cf, index_key(u64::MAX));
        self.db
            .write_opt(batch, &db::sync_write())
            .map_err(write_err)
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> StorageResult<()> {
        // Record the purge point first, so a crash in between never loses it.
        self.put_meta(KEY_LAST_PURGED, &log_id, true)?;
        self.tail().drop_through(log_id.index);
        let cf = db::cf(&self.db, CF_RAFT_LOG);
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(cf, index_key(0), index_key(log_id.index + 1));
        self.db
            .write_opt(batch, &db::sync_write())
            .map_err(write_err)
    }
}
