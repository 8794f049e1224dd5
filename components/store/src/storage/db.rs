//! The one rocksdb database of a member: column families and write options.
//!
//! Raft log, Raft hard state and the state machine live in one database (separate column
//! families) so a single WAL fsync makes a whole apply batch durable.

use std::path::Path;
use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, Options, WriteOptions, DB,
};

/// Raft log entries: big-endian index → JSON entry.
pub const CF_RAFT_LOG: &str = "raft_log";
/// Raft hard state: vote, committed, last purged log id.
pub const CF_RAFT_META: &str = "raft_meta";
/// MVCC key history: (escaped key, inverted revision) → put or tombstone.
pub const CF_KV: &str = "kv";
/// MVCC events by revision: (revision, sub revision) → mvccpb.Event, for watches.
pub const CF_EVENTS: &str = "events";
/// Leases: big-endian id → lease record.
pub const CF_LEASES: &str = "leases";
/// Keys attached to a lease: (big-endian id, key) → empty.
pub const CF_LEASE_KEYS: &str = "lease_keys";
/// State-machine metadata: revisions, last applied log id, membership, member identity.
pub const CF_SM_META: &str = "sm_meta";

const ALL_CFS: [&str; 7] = [
    CF_RAFT_LOG,
    CF_RAFT_META,
    CF_KV,
    CF_EVENTS,
    CF_LEASES,
    CF_LEASE_KEYS,
    CF_SM_META,
];

/// The Raft state machine's own keys in [`CF_SM_META`] (kept here, beside the families, because
/// snapshot tools read them too): the last applied log id and the membership, as JSON.
pub const META_LAST_APPLIED: &[u8] = b"last_applied";
pub const META_MEMBERSHIP: &[u8] = b"membership";
/// The `BatchProgress` of a batch entry being applied (`member::raft::state_machine`).
pub const META_BATCH_PROGRESS: &[u8] = b"batch_progress";

/// Column families that make up the state machine (what a Raft snapshot carries).
pub const STATE_MACHINE_CFS: [&str; 5] = [CF_KV, CF_EVENTS, CF_LEASES, CF_LEASE_KEYS, CF_SM_META];

const ARENA_BLOCK_BYTES: usize = 16 * 1024;
/// Memory bounds (etcd's bbolt keeps its whole file mapped; this keeps a member at or under
/// that): one block cache shared by every column family (rocksdb would otherwise give each
/// family a cache of its own), and one budget for all memtables, past which the largest is
/// flushed. Reads mostly hit the memtables and the page cache; writes see no difference.
const BLOCK_CACHE_BYTES: usize = 8 * 1024 * 1024;
const MEMTABLE_BUDGET_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("cannot create data dir {path}: {source}")]
    CreateDir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot open rocksdb at {path}: {source}")]
    Open {
        path: String,
        source: rocksdb::Error,
    },
}

/// Opens (creating if needed) the member database under `dir`.
pub fn open(dir: &Path) -> Result<Arc<DB>, DbError> {
    std::fs::create_dir_all(dir).map_err(|source| DbError::CreateDir {
        path: dir.display().to_string(),
        source,
    })?;
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    opts.set_db_write_buffer_size(MEMTABLE_BUDGET_BYTES);
    let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
    let cfs = ALL_CFS.iter().map(|name| {
        let mut cf_opts = Options::default();
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        cf_opts.set_block_based_table_factory(&table);
        if STATE_MACHINE_CFS.contains(name) {
            // Small arena blocks keep the memtable's reported memory close to the data in it:
            // that figure is part of the backend size --quota-backend-bytes limits.
            cf_opts.set_arena_block_size(ARENA_BLOCK_BYTES);
        }
        ColumnFamilyDescriptor::new(*name, cf_opts)
    });
    let db = DB::open_cf_descriptors(&opts, dir, cfs).map_err(|source| DbError::Open {
        path: dir.display().to_string(),
        source,
    })?;
    Ok(Arc::new(db))
}

/// Column family handle; every family is created at open, so a missing one is a bug.
pub fn cf<'a>(db: &'a DB, name: &str) -> &'a ColumnFamily {
    db.cf_handle(name)
        .unwrap_or_else(|| panic!("column family {name} is created at open"))
}

/// Write options that fsync the WAL before returning: nothing is acknowledged before it is
/// on disk.
pub fn sync_write() -> WriteOptions {
    let mut wo = WriteOptions::default();
    wo.set_sync(true);
    wo
}

/// Write options without fsync, for writes that a later synced write (or WAL flush) covers.
pub fn buffered_write() -> WriteOptions {
    WriteOptions::default()
}
