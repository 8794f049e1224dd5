//! Where every live key's latest version is, in memory (etcd's treeIndex plays this part).
//!
//! A put must know its key's latest version: its create revision and version carry over, its
//! lease is detached, and watchers get it as prev_kv. Finding it in `kv` took an iterator seek
//! over the memtable and every level (23-38 µs of a 1-client put's ~500, bench/README.md,
//! session 9), and for a key that does not exist yet the seek found nothing after all that.
//! With the index a new key costs no read, and an existing one a point read of its exact
//! version.
//!
//! Only the state machine's apply path (the one writer) uses it. It follows each command's
//! write, and is rebuilt from `kv` whenever the state underneath changes wholesale (open,
//! snapshot install). Reads at a revision of their own (ranges, read-only txns) never use it:
//! they must see their rocksdb snapshot, not whatever was applied since.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use etcd_client::proto::PbEvent;
use rocksdb::{IteratorMode, DB};

use crate::storage::db::{self, CF_KV};
use crate::storage::mvcc::keys::{self, Version, EVENT_PUT};
use crate::storage::mvcc::MvccError;

/// Live key → mod revision of its latest version.
#[derive(Default)]
pub struct KeyIndex {
    live: Mutex<HashMap<Vec<u8>, i64>>,
}

impl KeyIndex {
    fn live(&self) -> MutexGuard<'_, HashMap<Vec<u8>, i64>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The mod revision of `key`'s latest version, if the key is live.
    pub fn latest(&self, key: &[u8]) -> Option<i64> {
        self.live().get(key).copied()
    }

    /// Follows one written command's events: a put makes its key live at its revision, a
    /// delete removes it.
    pub fn follow(&self, events: &[PbEvent]) {
        let mut live = self.live();
        for ev in events {
            let Some(kv) = &ev.kv else { continue };
            if ev.r#type == EVENT_PUT {
                live.insert(kv.key.clone(), kv.mod_revision);
            } else {
                live.remove(&kv.key);
            }
        }
    }

    /// Rebuilds the index from `kv`: per key the newest version comes first (keys.rs), and it
    /// is live unless it is a tombstone. Values are not decoded.
    pub fn rebuild(&self, db: &DB) -> Result<(), MvccError> {
        let mut live = HashMap::new();
        let mut last: Option<Vec<u8>> = None;
        for item in db.iterator_cf(db::cf(db, CF_KV), IteratorMode::Start) {
            let (raw_key, value) = item?;
            let (key, revision) = keys::decode_kv_key(&raw_key).ok_or_else(|| {
                MvccError::Corrupt(format!("malformed kv key {}", raw_key.escape_ascii()))
            })?;
            if last.as_deref() == Some(key.as_slice()) {
                continue; // an older version of the key just seen
            }
            if !Version::is_tombstone_raw(&value) {
                live.insert(key.clone(), revision);
            }
            last = Some(key);
        }
        *self.live() = live;
        Ok(())
    }

    /// How many keys are live.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.live().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_client::proto::PbKeyValue;
    use rocksdb::WriteBatch;

    fn event(ty: i32, key: &[u8], rev: i64) -> PbEvent {
        PbEvent {
            r#type: ty,
            kv: Some(PbKeyValue {
                key: key.to_vec(),
                mod_revision: rev,
                ..Default::default()
            }),
            prev_kv: None,
        }
    }

    #[test]
    fn follows_puts_and_deletes_in_order() {
        let index = KeyIndex::default();
        index.follow(&[event(0, b"a", 2), event(0, b"b", 2)]);
        index.follow(&[event(0, b"a", 3)]);
        index.follow(&[event(1, b"b", 4)]);
        assert_eq!(index.latest(b"a"), Some(3));
        assert_eq!(index.latest(b"b"), None);
        assert_eq!(index.len(), 1);
        // Deleted and put again in later commands.
        index.follow(&[event(0, b"b", 5)]);
        assert_eq!(index.latest(b"b"), Some(5));
    }

    #[test]
    fn a_rebuild_finds_each_live_keys_newest_version() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::storage::db::open(dir.path()).unwrap();
        let kv = db::cf(&db, CF_KV);
        let put = |key: &[u8], rev: i64| {
            Version::Put(PbKeyValue {
                key: key.to_vec(),
                mod_revision: rev,
                ..Default::default()
            })
            .encode()
        };
        let mut batch = WriteBatch::default();
        batch.put_cf(kv, keys::kv_key(b"a", 2), put(b"a", 2));
        batch.put_cf(kv, keys::kv_key(b"a", 7), put(b"a", 7));
        // Deleted: its newest version is a tombstone, older puts below it.
        batch.put_cf(kv, keys::kv_key(b"b", 3), put(b"b", 3));
        batch.put_cf(kv, keys::kv_key(b"b", 5), Version::Tombstone.encode());
        // A key with a 0 byte, and one that is deleted and put again.
        batch.put_cf(kv, keys::kv_key(b"c\0d", 4), put(b"c\0d", 4));
        batch.put_cf(kv, keys::kv_key(b"e", 6), Version::Tombstone.encode());
        batch.put_cf(kv, keys::kv_key(b"e", 8), put(b"e", 8));
        db.write(batch).unwrap();

        let index = KeyIndex::default();
        index.follow(&[event(0, b"stale", 1)]);
        index.rebuild(&db).unwrap();
        assert_eq!(index.latest(b"a"), Some(7));
        assert_eq!(index.latest(b"b"), None);
        assert_eq!(index.latest(b"c\0d"), Some(4));
        assert_eq!(index.latest(b"e"), Some(8));
        assert_eq!(
            index.latest(b"stale"),
            None,
            "a rebuild replaces everything"
        );
        assert_eq!(index.len(), 3);
    }
}
