//! Reads over the MVCC history at a revision: single keys, ranges and event history.

use etcd_client::proto::{PbEvent, PbKeyValue};
use rocksdb::{DBRawIteratorWithThreadMode, SnapshotWithThreadMode, DB};

use crate::storage::db::{self, CF_EVENTS, CF_KV};
use crate::storage::mvcc::keys::{self, StoredEvent, Version, EVENT_DELETE};

use crate::storage::mvcc::MvccError;

/// The upper end of a key range, decoded from etcd's `range_end` conventions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeEnd {
    /// Empty `range_end`: just `key`.
    Single,
    /// `range_end` = "\0": every key ≥ `key`.
    Unbounded,
    /// Keys in [`key`, end).
    Until(Vec<u8>),
}

impl RangeEnd {
    pub fn from_request(range_end: &[u8]) -> Self {
        match range_end {
            [] => RangeEnd::Single,
            [0] => RangeEnd::Unbounded,
            end => RangeEnd::Until(end.to_vec()),
        }
    }

    /// Whether `candidate` lies in the range that starts at `key`.
    pub fn contains(&self, key: &[u8], candidate: &[u8]) -> bool {
        match self {
            RangeEnd::Single => candidate == key,
            RangeEnd::Unbounded => candidate >= key,
            RangeEnd::Until(end) => candidate >= key && candidate < end.as_slice(),
        }
    }
}

/// A consistent point-in-time view of the database (a rocksdb snapshot).
pub struct ReadView<'a> {
    db: &'a DB,
    snapshot: SnapshotWithThreadMode<'a, DB>,
}

/// Result of scanning a key range at a revision.
#[derive(Debug, Default)]
pub struct Scan {
    /// Live key-values in key order, at most the scan limit of them.
    pub kvs: Vec<PbKeyValue>,
    /// Number of live keys in the whole range (etcd's `count`).
    pub count: i64,
}

impl<'a> ReadView<'a> {
    pub fn new(db: &'a DB) -> Self {
        Self {
            db,
            snapshot: db.snapshot(),
        }
    }

    fn iter(&self, cf: &str) -> DBRawIteratorWithThreadMode<'_, DB> {
        self.snapshot.raw_iterator_cf(db::cf(self.db, cf))
    }

    /// The live version of `key` at `revision`, if any.
    pub fn get(&self, key: &[u8], revision: i64) -> Result<Option<PbKeyValue>, MvccError> {
        let prefix = keys::key_prefix(key);
        let mut it = self.iter(CF_KV);
        it.seek(keys::kv_seek(key, revision));
        if let (Some(k), Some(v)) = (it.key(), it.value()) {
            if k.len() == prefix.len() + 8 && k.starts_with(&prefix) {
                return match Version::decode(v)? {
                    Version::Put(kv) => Ok(Some(kv)),
                    Version::Tombstone => Ok(None),
                };
            }
        }
        it.status()?;
        Ok(None)
    }

    /// Live keys in [key, end) at `revision`; values are decoded for the first `limit` keys
    /// (`None` = all), the rest are only counted.
    pub fn scan(
        &self,
        key: &[u8],
        end: &RangeEnd,
        revision: i64,
        limit: Option<usize>,
    ) -> Result<Scan, MvccError> {
        let mut out = Scan::default();
        if let RangeEnd::Single = end {
            if let Some(kv) = self.get(key, revision)? {
                out.count = 1;
                if limit != Some(0) {
                    out.kvs.push(kv);
                }
            }
            return Ok(out);
        }
        if let RangeEnd::Until(e) = end {
            if e.as_slice() <= key {
                return Ok(out);
            }
        }
        let mut it = self.iter(CF_KV);
        it.seek(keys::key_prefix(key));
        while it.valid() {
            let raw_key = it.key().unwrap_or_default();
            let Some((user_key, rev)) = keys::decode_kv_key(raw_key) else {
                return Err(MvccError::Corrupt("malformed kv key".into()));
            };
            if !end.contains(key, &user_key) {
                break;
            }
            if rev > revision {
                // Newer than the read revision: jump to the newest version at or below it.
                it.seek(keys::kv_seek(&user_key, revision));
                let same_key = it
                    .key()
                    .and_then(keys::decode_kv_key)
                    .is_some_and(|(k, _)| k == user_key);
                if !same_key {
                    continue;
                }
            }
            let value = it.value().unwrap_or_default();
            if !Version::is_tombstone_raw(value) {
                out.count += 1;
                if limit.is_none_or(|l| out.kvs.len() < l) {
                    if let Version::Put(kv) = Version::decode(value)? {
                        out.kvs.push(kv);
                    }
                }
            }
            it.seek(keys::kv_after(&user_key));
        }
        it.status()?;
        Ok(out)
    }

    /// Events with revision in [from, to], in order, at most `max` of them (whole revisions
    /// are never split: the last revision is completed even past `max`).
    pub fn events(&self, from: i64, to: i64, max: usize) -> Result<Vec<PbEvent>, MvccError> {
        let mut out = Vec::new();
        let mut it = self.iter(CF_EVENTS);
        it.seek(keys::event_key(from.max(0), 0));
        let mut kv_it = self.iter(CF_KV);
        let mut last_rev = 0;
        while it.valid() {
            let raw_key = it.key().unwrap_or_default();
            let rev = keys::event_revision(raw_key);
            if rev > to || (out.len() >= max && rev != last_rev) {
                break;
            }
            let event = match keys::decode_event(it.value().unwrap_or_default())? {
                StoredEvent::Whole(ev) => ev,
                StoredEvent::Ref { ty, key } => Self::event_at(&mut kv_it, ty, key, rev)?,
            };
            out.push(event);
            last_rev = rev;
            it.next();
        }
        it.status()?;
        Ok(out)
    }

    /// The event of type `ty` on `key` at `rev`. A deletion is all in its reference (etcd's delete
    /// event carries the key and revision only; its tombstone may be compacted away at the compaction
    /// revision, where the event stays). A put's key-value is `key`'s version at `rev` in `kv`.
    fn event_at(
        kv_it: &mut DBRawIteratorWithThreadMode<'_, DB>,
        ty: i32,
        key: &[u8],
        rev: i64,
    ) -> Result<PbEvent, MvccError> {
        if ty == EVENT_DELETE {
            return Ok(PbEvent {
                r#type: ty,
                kv: Some(PbKeyValue {
                    key: key.to_vec(),
                    mod_revision: rev,
                    ..Default::default()
                }),
                prev_kv: None,
            });
        }
        let want = keys::kv_key(key, rev);
        kv_it.seek(&want);
        let value = match (kv_it.key(), kv_it.value()) {
            (Some(k), Some(v)) if k == want.as_slice() => v,
            _ => {
                kv_it.status()?;
                return Err(MvccError::Corrupt(format!(
                    "the put of {} at revision {rev} has no version in kv",
                    String::from_utf8_lossy(key)
                )));
            }
        };
        match Version::decode(value)? {
            Version::Put(kv) => Ok(PbEvent {
                r#type: ty,
                kv: Some(kv),
                prev_kv: None,
            }),
            Version::Tombstone => Err(MvccError::Corrupt(format!(
                "the put of {} at revision {rev} is a tombstone in kv",
                String::from_utf8_lossy(key)
            ))),
        }
    }
}
