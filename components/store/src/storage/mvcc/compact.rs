//! Compaction: drop history below a revision, keeping what reads at or after it still need.

use rocksdb::{IteratorMode, WriteBatch, DB};

use crate::storage::db::{self, CF_EVENTS, CF_KV};
use crate::storage::mvcc::keys::{self, Version};
use crate::storage::mvcc::{write_i64, MvccError, META_COMPACT_REVISION};

/// Adds to `batch` the deletions that compact the store at `revision`: for every key, the
/// newest version at or below `revision` survives if it is live (reads at `revision` need it);
/// everything older, and a tombstone in that place, goes. Events below `revision` go too, so
/// watches may start at `revision` itself, as in etcd.
pub fn compact(db: &DB, batch: &mut WriteBatch, revision: i64) -> Result<usize, MvccError> {
    let kv_cf = db::cf(db, CF_KV);
    let mut removed = 0;
    let mut current_key: Option<Vec<u8>> = None;
    let mut kept_one = false;
    for item in db.iterator_cf(kv_cf, IteratorMode::Start) {
        let (raw_key, value) = item?;
        let Some((user_key, rev)) = keys::decode_kv_key(&raw_key) else {
            return Err(MvccError::Corrupt("malformed kv key".into()));
        };
        if current_key.as_deref() != Some(user_key.as_slice()) {
            current_key = Some(user_key);
            kept_one = false;
        }
        if rev > revision {
            continue;
        }
        if !kept_one && !Version::is_tombstone_raw(&value) {
            kept_one = true;
            continue;
        }
        kept_one = true;
        batch.delete_cf(kv_cf, &raw_key);
        removed += 1;
    }
    batch.delete_range_cf(
        db::cf(db, CF_EVENTS),
        keys::event_key(0, 0),
        keys::event_key(revision, 0),
    );
    write_i64(db, batch, META_COMPACT_REVISION, revision);
    Ok(removed)
}
