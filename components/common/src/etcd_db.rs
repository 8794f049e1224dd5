//! etcd's backend layout inside a bbolt file (etcd 3.4/3.5 `mvcc/backend`, `mvcc/kvstore.go`): what a
//! snapshot from `etcdctl snapshot save` holds, read without etcd. The `key` bucket maps a revision key
//! (8-byte big-endian main revision, `_`, 8-byte big-endian sub revision, and a trailing `t` for a
//! deletion) to an `mvccpb.KeyValue`; `meta` holds `consistent_index`, `term` (3.5) and the compaction
//! marks; `lease` maps an 8-byte big-endian id to a `leasepb.Lease`. Shared by kiln-store (which writes
//! and restores this layout) and the CLI (which reads the revision and live keys of a bundle's snapshot).

use std::collections::BTreeMap;

use crate::bbolt::read::Db;
use crate::bbolt::BboltError;

pub const BUCKET_KEY: &[u8] = b"key";
pub const BUCKET_META: &[u8] = b"meta";
pub const BUCKET_LEASE: &[u8] = b"lease";
pub const BUCKET_MEMBERS: &[u8] = b"members";
pub const BUCKET_MEMBERS_REMOVED: &[u8] = b"members_removed";
pub const BUCKET_CLUSTER: &[u8] = b"cluster";
pub const BUCKET_ALARM: &[u8] = b"alarm";
pub const BUCKET_AUTH: &[u8] = b"auth";
pub const BUCKET_AUTH_USERS: &[u8] = b"authUsers";
pub const BUCKET_AUTH_ROLES: &[u8] = b"authRoles";
/// Every bucket etcd 3.4/3.5 creates, in bbolt's (byte) order.
pub const BUCKETS: [&[u8]; 10] = [
    BUCKET_ALARM,
    BUCKET_AUTH,
    BUCKET_AUTH_ROLES,
    BUCKET_AUTH_USERS,
    BUCKET_CLUSTER,
    BUCKET_KEY,
    BUCKET_LEASE,
    BUCKET_MEMBERS,
    BUCKET_MEMBERS_REMOVED,
    BUCKET_META,
];

pub const META_CONSISTENT_INDEX: &[u8] = b"consistent_index";
pub const META_TERM: &[u8] = b"term";
pub const META_FINISHED_COMPACT: &[u8] = b"finishedCompactRev";
pub const META_SCHEDULED_COMPACT: &[u8] = b"scheduledCompactRev";
pub const CLUSTER_VERSION: &[u8] = b"clusterVersion";

/// A revision key's length, and with the tombstone mark.
pub const REV_KEY_LEN: usize = 17;
const TOMBSTONE: u8 = b't';

#[derive(Debug, thiserror::Error)]
pub enum EtcdDbError {
    #[error(transparent)]
    Bbolt(#[from] BboltError),
    #[error("etcd database: {0}")]
    Corrupt(String),
}

/// A revision key of the `key` bucket.
pub fn rev_key(main: i64, sub: i64, tombstone: bool) -> Vec<u8> {
    let mut k = Vec::with_capacity(REV_KEY_LEN + 1);
    k.extend_from_slice(&(main as u64).to_be_bytes());
    k.push(b'_');
    k.extend_from_slice(&(sub as u64).to_be_bytes());
    if tombstone {
        k.push(TOMBSTONE);
    }
    k
}

/// A `key` bucket key: (main, sub, tombstone); `None` when it is not a revision key.
pub fn parse_rev_key(k: &[u8]) -> Option<(i64, i64, bool)> {
    let tombstone = match k.len() {
        REV_KEY_LEN => false,
        18 if k[REV_KEY_LEN] == TOMBSTONE => true,
        _ => return None,
    };
    if k[8] != b'_' {
        return None;
    }
    let main = u64::from_be_bytes(k[..8].try_into().ok()?) as i64;
    let sub = u64::from_be_bytes(k[9..17].try_into().ok()?) as i64;
    Some((main, sub, tombstone))
}

/// The fields of an `mvccpb.KeyValue` (key 1, create_revision 2, mod_revision 3, version 4, value 5,
/// lease 6), borrowed from its encoding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyValue<'a> {
    pub key: &'a [u8],
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub value: &'a [u8],
    pub lease: i64,
}

/// Decodes an `mvccpb.KeyValue` (unknown fields skipped); `None` when it is not protobuf.
pub fn decode_key_value(mut buf: &[u8]) -> Option<KeyValue<'_>> {
    let mut kv = KeyValue::default();
    while !buf.is_empty() {
        let tag = varint(&mut buf)?;
        match tag & 7 {
            0 => {
                let v = varint(&mut buf)? as i64;
                match tag >> 3 {
                    2 => kv.create_revision = v,
                    3 => kv.mod_revision = v,
                    4 => kv.version = v,
                    6 => kv.lease = v,
                    _ => {}
                }
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                if buf.len() < len {
                    return None;
                }
                let (bytes, rest) = buf.split_at(len);
                match tag >> 3 {
                    1 => kv.key = bytes,
                    5 => kv.value = bytes,
                    _ => {}
                }
                buf = rest;
            }
            1 => buf = buf.get(8..)?,
            5 => buf = buf.get(4..)?,
            _ => return None,
        }
    }
    Some(kv)
}

/// The value etcd stores for a deletion: a KeyValue with only the key.
pub fn tombstone_value(key: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(key.len() + 6);
    v.push(1 << 3 | 2);
    put_varint(&mut v, key.len() as u64);
    v.extend_from_slice(key);
    v
}

/// Bytes of [`tombstone_value`] for a key of `key_len` bytes.
pub fn tombstone_value_len(key_len: usize) -> usize {
    1 + varint_len(key_len as u64) + key_len
}

/// A `leasepb.Lease` (ID 1, TTL 2, RemainingTTL 3).
pub fn encode_lease(id: i64, ttl: i64) -> Vec<u8> {
    let mut v = Vec::with_capacity(22);
    for (field, value) in [(1u8, id), (2, ttl)] {
        if value != 0 {
            v.push(field << 3);
            put_varint(&mut v, value as u64);
        }
    }
    v
}

/// (ID, TTL) of a `leasepb.Lease`.
pub fn decode_lease(mut buf: &[u8]) -> Option<(i64, i64)> {
    let (mut id, mut ttl) = (0, 0);
    while !buf.is_empty() {
        let tag = varint(&mut buf)?;
        match tag & 7 {
            0 => {
                let v = varint(&mut buf)? as i64;
                match tag >> 3 {
                    1 => id = v,
                    2 => ttl = v,
                    _ => {}
                }
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                buf = buf.get(len..)?;
            }
            1 => buf = buf.get(8..)?,
            5 => buf = buf.get(4..)?,
            _ => return None,
        }
    }
    Some((id, ttl))
}

/// An `etcdserverpb.AlarmMember` (memberID 1, alarm 2): the key of an `alarm` bucket entry.
pub fn encode_alarm(member: u64, alarm: i32) -> Vec<u8> {
    let mut v = Vec::new();
    for (field, value) in [(1u8, member), (2, alarm as i64 as u64)] {
        if value != 0 {
            v.push(field << 3);
            put_varint(&mut v, value);
        }
    }
    v
}

/// (memberID, alarm) of an `etcdserverpb.AlarmMember`.
pub fn decode_alarm(buf: &[u8]) -> Option<(u64, i32)> {
    decode_lease(buf).map(|(m, a)| (m as u64, a as i32))
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for (i, &b) in buf.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            *buf = &buf[i + 1..];
            return Some(v);
        }
    }
    None
}

/// What `etcdctl snapshot status` prints of a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// CRC-32C over every bucket's name, then its keys and values, in order.
    pub hash: u32,
    /// The main revision of the last key of the `key` bucket.
    pub revision: i64,
    /// Entries of all buckets.
    pub total_key: usize,
    /// The database's size (bbolt's high-water mark × page size).
    pub total_size: u64,
}

/// etcdctl's `snapshot status` of a bbolt file: every top-level bucket in order, its name hashed, then
/// each key and value.
pub fn status(db: &Db<'_>) -> Result<Status, EtcdDbError> {
    let mut hash = Crc32c::default();
    let (mut revision, mut total_key) = (0, 0);
    let mut buckets = Vec::new();
    db.for_each::<BboltError>(db.root(), |e| {
        buckets.push(e);
        Ok(())
    })?;
    for b in buckets {
        let inner = b
            .bucket
            .ok_or_else(|| EtcdDbError::Corrupt("a top-level entry is not a bucket".into()))?;
        hash.update(b.key);
        let is_key = b.key == BUCKET_KEY;
        db.for_each::<BboltError>(inner, |e| {
            hash.update(e.key);
            hash.update(e.value);
            if is_key {
                if let Some(main) = e.key.first_chunk::<8>() {
                    revision = u64::from_be_bytes(*main) as i64;
                }
            }
            total_key += 1;
            Ok(())
        })?;
    }
    Ok(Status {
        hash: hash.0,
        revision,
        total_key,
        total_size: db.size(),
    })
}

/// CRC-32C (Castagnoli), as Go's hash/crc32 with the Castagnoli table computes it.
#[derive(Default)]
struct Crc32c(u32);

static CRC32C_TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();

impl Crc32c {
    fn update(&mut self, bytes: &[u8]) {
        let table = CRC32C_TABLE.get_or_init(|| {
            let mut t = [0u32; 256];
            for (i, slot) in t.iter_mut().enumerate() {
                let mut c = i as u32;
                for _ in 0..8 {
                    c = if c & 1 != 0 {
                        (c >> 1) ^ 0x82F6_3B78
                    } else {
                        c >> 1
                    };
                }
                *slot = c;
            }
            t
        });
        let mut crc = !self.0;
        for &b in bytes {
            crc = table[((crc ^ u32::from(b)) & 0xFF) as usize] ^ (crc >> 8);
        }
        self.0 = !crc;
    }
}

/// A key live at a revision: its newest version at or below it, not a deletion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveKey<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub mod_revision: i64,
}

/// The revision an etcd database is at: the newest main revision in `key`, and at least the compacted
/// one (as etcd's restore sets currentRev); 1 for an empty store.
pub fn revision(db: &Db<'_>) -> Result<i64, EtcdDbError> {
    let mut rev = 1;
    if let Some(b) = db.bucket(BUCKET_KEY)? {
        db.for_each::<BboltError>(b, |e| {
            if let Some(main) = e.key.first_chunk::<8>() {
                rev = rev.max(u64::from_be_bytes(*main) as i64);
            }
            Ok(())
        })?;
    }
    Ok(rev.max(compacted(db)?))
}

/// The finished compaction's revision (0 when never compacted).
pub fn compacted(db: &Db<'_>) -> Result<i64, EtcdDbError> {
    let mut rev = 0;
    if let Some(b) = db.bucket(BUCKET_META)? {
        db.for_each::<BboltError>(b, |e| {
            if e.key == META_FINISHED_COMPACT {
                rev = parse_rev_key(e.value).map_or(0, |(main, _, _)| main);
            }
            Ok(())
        })?;
    }
    Ok(rev)
}

/// Every key under `prefix` live at `at` (`None`: the newest), in key order, as a range read answers.
pub fn live_keys<'a>(
    db: &Db<'a>,
    prefix: &[u8],
    at: Option<i64>,
) -> Result<Vec<LiveKey<'a>>, EtcdDbError> {
    let mut latest: BTreeMap<&'a [u8], Option<LiveKey<'a>>> = BTreeMap::new();
    let Some(b) = db.bucket(BUCKET_KEY)? else {
        return Ok(Vec::new());
    };
    db.for_each::<EtcdDbError>(b, |e| {
        let (main, _, tombstone) = parse_rev_key(e.key)
            .ok_or_else(|| EtcdDbError::Corrupt("a key bucket key is no revision".into()))?;
        if at.is_some_and(|at| main > at) {
            return Ok(());
        }
        let kv = decode_key_value(e.value)
            .ok_or_else(|| EtcdDbError::Corrupt("a key bucket value is no KeyValue".into()))?;
        if !kv.key.starts_with(prefix) {
            return Ok(());
        }
        let live = (!tombstone).then_some(LiveKey {
            key: kv.key,
            value: kv.value,
            mod_revision: main,
        });
        latest.insert(kv.key, live);
        Ok(())
    })?;
    Ok(latest.into_values().flatten().collect())
}

/// A small etcd database for tests of what reads one (see `tests::sample`).
#[cfg(test)]
pub(crate) fn tests_sample() -> Vec<u8> {
    tests::sample()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bbolt::write::write_all;
    use crate::bbolt::PAGE_SIZE;

    fn kv(key: &[u8], create: i64, modr: i64, version: i64, value: &[u8], lease: i64) -> Vec<u8> {
        let mut v = Vec::new();
        v.push(1 << 3 | 2);
        put_varint(&mut v, key.len() as u64);
        v.extend_from_slice(key);
        for (field, n) in [(2u8, create), (3, modr), (4, version)] {
            v.push(field << 3);
            put_varint(&mut v, n as u64);
        }
        v.push(5 << 3 | 2);
        put_varint(&mut v, value.len() as u64);
        v.extend_from_slice(value);
        if lease != 0 {
            v.push(6 << 3);
            put_varint(&mut v, lease as u64);
        }
        v
    }

    /// At revision 5: "a" put at 2 and 4, "b" put at 3 (lease 7) and deleted at 5; compacted at 2.
    pub(crate) fn sample() -> Vec<u8> {
        let key = vec![
            (rev_key(2, 0, false), kv(b"a", 2, 2, 1, b"v1", 0)),
            (rev_key(3, 0, false), kv(b"b", 3, 3, 1, b"w", 7)),
            (rev_key(4, 0, false), kv(b"a", 2, 4, 2, b"v2", 0)),
            (rev_key(5, 0, true), tombstone_value(b"b")),
        ];
        let meta = vec![(META_FINISHED_COMPACT.to_vec(), rev_key(2, 0, false))];
        write_all(
            PAGE_SIZE,
            &[
                (BUCKET_KEY, key),
                (
                    BUCKET_LEASE,
                    vec![(7u64.to_be_bytes().to_vec(), encode_lease(7, 60))],
                ),
                (BUCKET_META, meta),
            ],
        )
        .unwrap()
    }

    #[test]
    fn revision_keys_values_and_leases_round_trip() {
        assert_eq!(parse_rev_key(&rev_key(5, 3, true)), Some((5, 3, true)));
        assert_eq!(parse_rev_key(&rev_key(9, 0, false)), Some((9, 0, false)));
        assert_eq!(parse_rev_key(b"short"), None);
        let raw = kv(b"k", 2, 3, 4, b"val", 9);
        let d = decode_key_value(&raw).unwrap();
        assert_eq!(
            (
                d.key,
                d.create_revision,
                d.mod_revision,
                d.version,
                d.value,
                d.lease
            ),
            (&b"k"[..], 2, 3, 4, &b"val"[..], 9)
        );
        assert_eq!(tombstone_value(b"key").len(), tombstone_value_len(3));
        assert_eq!(
            decode_key_value(&tombstone_value(b"key")).unwrap().key,
            b"key"
        );
        assert_eq!(decode_lease(&encode_lease(-5, 60)), Some((-5, 60)));
        assert_eq!(decode_alarm(&encode_alarm(42, 1)), Some((42, 1)));
    }

    #[test]
    fn status_revision_and_live_keys_as_etcd_reads_them() {
        let data = sample();
        let db = Db::open(&data).unwrap();
        let s = status(&db).unwrap();
        assert_eq!((s.revision, s.total_key), (5, 6));
        assert_eq!(s.total_size, (data.len() - 32) as u64);
        assert_eq!(revision(&db).unwrap(), 5);
        assert_eq!(compacted(&db).unwrap(), 2);
        let now = live_keys(&db, b"", Some(5)).unwrap();
        assert_eq!(
            now,
            vec![LiveKey {
                key: b"a",
                value: b"v2",
                mod_revision: 4
            }]
        );
        let then = live_keys(&db, b"", Some(3)).unwrap();
        assert_eq!(then.len(), 2, "b was still there at 3");
        assert!(live_keys(&db, b"b", None).unwrap().is_empty());
    }
}
