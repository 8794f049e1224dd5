//! Reading kiln-store snapshots without rocksdb: what Maintenance.Snapshot streams (and `etcdctl snapshot
//! save` stores). The framing is kiln-store's `raft/snapshot.rs`: `magic ‖ (family u8, key len u32, key,
//! value len u32, value)* ‖ 0xFF ‖ zero padding ‖ sha256 of everything before it`; the `kv` family is laid
//! out as kiln-store's `mvcc/keys.rs` (escaped key, inverted revision → tag byte + etcd KeyValue protobuf).
//! This is enough for `kiln snapshot save` to read the revision a snapshot holds and its live keys at that
//! revision from the bytes it received, instead of asking the store again. Keep in step with those files:
//! the lab tests (tests/snapshot*.rs) check a restored store against what this reader recorded.
//!
//! kiln-store now streams etcd's own format (a bbolt file, `crate::etcd_db`); [`live_at_revision`] reads
//! either, told apart by content (bbolt's magic in its first meta page), so bundles saved before keep
//! reading.

use sha2::{Digest, Sha256};

const MAGIC: &[u8] = b"KILNSNAP1\n";
const END: u8 = 0xFF;
/// The column families, in the order of their tag in the framing (kiln-store's `STATE_MACHINE_CFS`).
pub const FAMILIES: [&str; 5] = ["kv", "events", "leases", "lease_keys", "sm_meta"];
pub const FAMILY_KV: u8 = 0;
pub const FAMILY_SM_META: u8 = 4;
/// The store revision, in `sm_meta` (8 bytes big-endian); a store that never wrote is at 1, as etcd.
const META_REVISION: &[u8] = b"revision";
const TAG_PUT: u8 = 0;
const TAG_TOMBSTONE: u8 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StoreSnapshotError {
    #[error("snapshot is not a kiln-store snapshot (bad magic)")]
    BadMagic,
    #[error("snapshot is truncated")]
    Truncated,
    #[error("snapshot checksum mismatch")]
    Checksum,
    #[error("snapshot names unknown column family #{0}")]
    UnknownFamily(u8),
    #[error("snapshot kv record {key:?}: {message}")]
    Corrupt { key: String, message: String },
    #[error("etcd snapshot: {0}")]
    Etcd(#[from] crate::etcd_db::EtcdDbError),
}

/// One key-value pair of one column family (`family` indexes [`FAMILIES`]).
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub family: u8,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// A live key at the snapshot's revision: its newest version, not deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveKey<'a> {
    pub key: Vec<u8>,
    pub value: &'a [u8],
    pub mod_revision: i64,
}

/// Checks the trailing sha256 (and the magic) of a whole snapshot.
pub fn verify(data: &[u8]) -> Result<(), StoreSnapshotError> {
    let (body, digest) = split(data)?;
    if Sha256::digest(body).as_slice() != digest {
        return Err(StoreSnapshotError::Checksum);
    }
    Ok(())
}

fn split(data: &[u8]) -> Result<(&[u8], &[u8]), StoreSnapshotError> {
    if data.len() < MAGIC.len() + 1 + 32 {
        return Err(StoreSnapshotError::Truncated);
    }
    let (body, digest) = data.split_at(data.len() - 32);
    if !body.starts_with(MAGIC) {
        return Err(StoreSnapshotError::BadMagic);
    }
    Ok((body, digest))
}

/// The records of a snapshot whose checksum the caller already verified (while receiving it, or with
/// [`verify`]): framing, end marker and families are checked here, the digest is not hashed again.
pub fn records(data: &[u8]) -> Result<Vec<Record<'_>>, StoreSnapshotError> {
    let (body, _) = split(data)?;
    let mut out = Vec::new();
    let mut rest = &body[MAGIC.len()..];
    loop {
        let (&family, tail) = rest.split_first().ok_or(StoreSnapshotError::Truncated)?;
        if family == END {
            return Ok(out);
        }
        if family as usize >= FAMILIES.len() {
            return Err(StoreSnapshotError::UnknownFamily(family));
        }
        let (key, tail) = field(tail)?;
        let (value, tail) = field(tail)?;
        out.push(Record { family, key, value });
        rest = tail;
    }
}

fn field(data: &[u8]) -> Result<(&[u8], &[u8]), StoreSnapshotError> {
    let (len, rest) = data
        .split_first_chunk::<4>()
        .ok_or(StoreSnapshotError::Truncated)?;
    let len = u32::from_be_bytes(*len) as usize;
    if rest.len() < len {
        return Err(StoreSnapshotError::Truncated);
    }
    Ok(rest.split_at(len))
}

/// The store revision the snapshot holds (1 when it never wrote, as kiln-store and etcd).
pub fn revision(records: &[Record<'_>]) -> i64 {
    records.iter().rev().find_map(revision_in).unwrap_or(1)
}

/// The store revision `r` states, if it is the state machine's revision record.
pub fn revision_in(r: &Record<'_>) -> Option<i64> {
    if r.family != FAMILY_SM_META || r.key != META_REVISION {
        return None;
    }
    r.value.try_into().ok().map(i64::from_be_bytes)
}

/// Every key live at `revision` whose name starts with `prefix`, in key order, as a range read at that
/// revision answers: per key the newest version at or below it, unless that version is a deletion.
pub fn live_keys<'a>(
    records: &[Record<'a>],
    prefix: &[u8],
    revision: i64,
) -> Result<Vec<LiveKey<'a>>, StoreSnapshotError> {
    let mut live = LiveKeys::new(prefix, Some(revision));
    let mut out = Vec::new();
    for r in records {
        out.extend(live.offer(r)?);
    }
    Ok(out)
}

/// The store revision a snapshot of either format holds and its keys under `prefix` live at that
/// revision, in key order (its trailing sha256 is the caller's to check).
pub fn live_at_revision<'a>(
    data: &'a [u8],
    prefix: &[u8],
) -> Result<(i64, Vec<LiveKey<'a>>), StoreSnapshotError> {
    if crate::bbolt::is_bbolt(data) {
        use crate::etcd_db::{self, EtcdDbError};
        let db = crate::bbolt::read::Db::open(data).map_err(EtcdDbError::from)?;
        let revision = etcd_db::revision(&db)?;
        let live = etcd_db::live_keys(&db, prefix, Some(revision))?
            .into_iter()
            .map(|k| LiveKey {
                key: k.key.to_vec(),
                value: k.value,
                mod_revision: k.mod_revision,
            })
            .collect();
        return Ok((revision, live));
    }
    let records = records(data)?;
    let revision = revision(&records);
    let live = live_keys(&records, prefix, revision)?;
    Ok((revision, live))
}

/// Finds live keys record by record, as [`live_keys`] does, also while a snapshot is still arriving,
/// before its revision (at its end) is known: then each key's newest version decides, and
/// [`LiveKeys::newest`] tells whether that was right (it is when no deciding version is newer than the
/// snapshot's revision, as in every snapshot kiln-store takes).
pub struct LiveKeys<'p> {
    prefix: &'p [u8],
    at: Option<i64>,
    /// Versions of one key are adjacent, newest first: the first one that counts decides.
    decided: Option<Vec<u8>>,
    newest: i64,
}

impl<'p> LiveKeys<'p> {
    /// Keys under `prefix`, at revision `at` (`None`: each key's newest version).
    pub fn new(prefix: &'p [u8], at: Option<i64>) -> Self {
        LiveKeys {
            prefix,
            at,
            decided: None,
            newest: 0,
        }
    }

    /// The next record of the snapshot (any family): the key it makes live, if it does.
    pub fn offer<'a>(&mut self, r: &Record<'a>) -> Result<Option<LiveKey<'a>>, StoreSnapshotError> {
        if r.family != FAMILY_KV {
            return Ok(None);
        }
        let corrupt = |message: &str| StoreSnapshotError::Corrupt {
            key: String::from_utf8_lossy(r.key).into_owned(),
            message: message.into(),
        };
        let (key, rev) = decode_kv_key(r.key).ok_or_else(|| corrupt("malformed key"))?;
        if self.at.is_some_and(|at| rev > at)
            || !key.starts_with(self.prefix)
            || self.decided.as_ref() == Some(&key)
        {
            return Ok(None);
        }
        self.newest = self.newest.max(rev);
        let live = match r.value.split_first() {
            Some((&TAG_TOMBSTONE, _)) => None,
            Some((&TAG_PUT, kv)) => {
                let (value, mod_revision) =
                    decode_key_value(kv).ok_or_else(|| corrupt("value is not an etcd KeyValue"))?;
                Some(LiveKey {
                    key: key.clone(),
                    value,
                    mod_revision,
                })
            }
            _ => return Err(corrupt("unknown version tag")),
        };
        self.decided = Some(key);
        Ok(live)
    }

    /// The newest revision among the versions that decided a key.
    pub fn newest(&self) -> i64 {
        self.newest
    }
}

/// Reads records while a snapshot arrives: each call returns the next record complete in `data` (every
/// byte received so far), or `None` until more arrive or after the end marker. The same framing as
/// [`records`]; the checksum, and that the framing ends before it, are the caller's to check once the
/// snapshot is whole (with [`verify`] and [`records`]).
#[derive(Debug, Default)]
pub struct Scanner {
    pos: usize,
    ended: bool,
}

impl Scanner {
    pub fn next<'a>(&mut self, data: &'a [u8]) -> Result<Option<Record<'a>>, StoreSnapshotError> {
        if self.ended {
            return Ok(None);
        }
        if self.pos == 0 {
            if data.len() < MAGIC.len() {
                return Ok(None);
            }
            if !data.starts_with(MAGIC) {
                return Err(StoreSnapshotError::BadMagic);
            }
            self.pos = MAGIC.len();
        }
        let Some((&family, rest)) = data[self.pos..].split_first() else {
            return Ok(None);
        };
        if family == END {
            self.ended = true;
            return Ok(None);
        }
        if family as usize >= FAMILIES.len() {
            return Err(StoreSnapshotError::UnknownFamily(family));
        }
        let Ok((key, rest)) = field(rest) else {
            return Ok(None);
        };
        let Ok((value, rest)) = field(rest) else {
            return Ok(None);
        };
        self.pos = data.len() - rest.len();
        Ok(Some(Record { family, key, value }))
    }

    /// Whether the end marker was read.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Whether the end marker was read, and before byte `limit` (where a snapshot's digest starts): the
    /// framing check [`records`] makes, for bytes already scanned.
    pub fn ended_before(&self, limit: usize) -> bool {
        self.ended && self.pos < limit
    }
}

/// Splits a `kv` key (`escape(key) 00 00 ‖ !revision`, 00 escaped as 00 FF) into key and revision.
fn decode_kv_key(raw: &[u8]) -> Option<(Vec<u8>, i64)> {
    if raw.len() < 10 {
        return None;
    }
    let (body, rev) = raw.split_at(raw.len() - 8);
    let mut key = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        match (body[i], body.get(i + 1)) {
            (0, Some(0xFF)) => {
                key.push(0);
                i += 2;
            }
            (0, Some(0)) if i + 2 == body.len() => {
                let rev = u64::from_be_bytes(rev.try_into().ok()?);
                return Some((key, !rev as i64));
            }
            (0, _) => return None,
            (b, _) => {
                key.push(b);
                i += 1;
            }
        }
    }
    None
}

/// (value, mod_revision) of an etcd `mvccpb.KeyValue` (field 3 mod_revision, field 5 value).
fn decode_key_value(mut buf: &[u8]) -> Option<(&[u8], i64)> {
    let (mut value, mut mod_revision): (&[u8], i64) = (&[], 0);
    while !buf.is_empty() {
        let tag = varint(&mut buf)?;
        match tag & 7 {
            0 => {
                let v = varint(&mut buf)?;
                if tag >> 3 == 3 {
                    mod_revision = v as i64;
                }
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                if buf.len() < len {
                    return None;
                }
                let (bytes, rest) = buf.split_at(len);
                if tag >> 3 == 5 {
                    value = bytes;
                }
                buf = rest;
            }
            1 => buf = buf.get(8..)?,
            5 => buf = buf.get(4..)?,
            _ => return None,
        }
    }
    Some((value, mod_revision))
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

/// A snapshot of `records` framed as kiln-store frames one (for tests of what reads snapshots).
pub fn encode(records: &[Record<'_>]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    for r in records {
        out.push(r.family);
        out.extend_from_slice(&(r.key.len() as u32).to_be_bytes());
        out.extend_from_slice(r.key);
        out.extend_from_slice(&(r.value.len() as u32).to_be_bytes());
        out.extend_from_slice(r.value);
    }
    out.push(END);
    out.resize(out.len().div_ceil(512) * 512, 0);
    let digest = Sha256::digest(&out);
    out.extend_from_slice(&digest);
    out
}

/// A `kv` record of `key` at `revision`: a put of `value` (`Some`) or a deletion (`None`), as kiln-store
/// stores them (for tests of what reads snapshots).
pub fn kv_record(key: &[u8], revision: i64, value: Option<&[u8]>) -> (Vec<u8>, Vec<u8>) {
    let mut k = Vec::with_capacity(key.len() + 10);
    for &b in key {
        k.push(b);
        if b == 0 {
            k.push(0xFF);
        }
    }
    k.extend_from_slice(&[0, 0]);
    k.extend_from_slice(&(!(revision as u64)).to_be_bytes());
    let Some(value) = value else {
        return (k, vec![TAG_TOMBSTONE]);
    };
    // mvccpb.KeyValue: key (1), mod_revision (3), value (5).
    let mut v = vec![TAG_PUT];
    for (field, bytes) in [(1u8, key), (5, value)] {
        v.push(field << 3 | 2);
        put_varint(&mut v, bytes.len() as u64);
        v.extend_from_slice(bytes);
        if field == 1 {
            v.push(3 << 3);
            put_varint(&mut v, revision as u64);
        }
    }
    (k, v)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The `sm_meta` record of the store revision.
pub fn revision_record(revision: i64) -> (Vec<u8>, Vec<u8>) {
    (META_REVISION.to_vec(), revision.to_be_bytes().to_vec())
}

/// A snapshot of the `kv` records `kv` (from [`kv_record`]) at store revision `revision` (for tests of
/// what reads snapshots).
pub fn encode_kv(kv: &[(Vec<u8>, Vec<u8>)], revision: i64) -> Vec<u8> {
    let meta = revision_record(revision);
    let mut records: Vec<Record<'_>> = kv
        .iter()
        .map(|(key, value)| Record {
            family: FAMILY_KV,
            key,
            value,
        })
        .collect();
    records.push(Record {
        family: FAMILY_SM_META,
        key: &meta.0,
        value: &meta.1,
    });
    encode(&records)
}

/// A snapshot holding at revision 4: "a" put at 2 and rewritten at 3 ("v1", then "v2"), "b\0" put at 2,
/// "c" put at 2 and deleted at 4.
#[cfg(test)]
fn sample() -> Vec<u8> {
    let kv = [
        kv_record(b"a", 3, Some(b"v2")),
        kv_record(b"a", 2, Some(b"v1")),
        kv_record(b"b\0", 2, Some(b"w")),
        kv_record(b"c", 4, None),
        kv_record(b"c", 2, Some(b"x")),
    ];
    encode_kv(&kv, 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_revision_and_live_keys_at_it() {
        let data = sample();
        verify(&data).unwrap();
        let recs = records(&data).unwrap();
        assert_eq!(recs.len(), 6);
        assert_eq!(revision(&recs), 4);
        let live = live_keys(&recs, b"", 4).unwrap();
        assert_eq!(
            live,
            vec![
                LiveKey {
                    key: b"a".to_vec(),
                    value: b"v2",
                    mod_revision: 3
                },
                LiveKey {
                    key: b"b\0".to_vec(),
                    value: b"w",
                    mod_revision: 2
                },
            ]
        );
        // At an older revision: the older version, and the key deleted later is still there.
        let old = live_keys(&recs, b"", 2).unwrap();
        let view: Vec<_> = old.iter().map(|k| (k.key.as_slice(), k.value)).collect();
        assert_eq!(
            view,
            vec![(&b"a"[..], &b"v1"[..]), (b"b\0", b"w"), (b"c", b"x")]
        );
        assert_eq!(live_keys(&recs, b"b", 4).unwrap().len(), 1);
    }

    #[test]
    fn a_snapshot_read_as_it_arrives_gives_the_same_records_and_keys() {
        let data = sample();
        let whole = records(&data).unwrap();
        for piece in [1, 7, 512, data.len()] {
            let mut scanner = Scanner::default();
            let mut live = LiveKeys::new(b"", None);
            let (mut got, mut keys) = (vec![], vec![]);
            let mut upto = 0;
            while upto < data.len() {
                upto = (upto + piece).min(data.len());
                while let Some(r) = scanner.next(&data[..upto]).unwrap() {
                    keys.extend(live.offer(&r).unwrap());
                    got.push((r.family, r.key, r.value));
                }
            }
            assert!(scanner.ended());
            let want: Vec<_> = whole.iter().map(|r| (r.family, r.key, r.value)).collect();
            assert_eq!(got, want, "pieces of {piece}");
            assert_eq!(keys, live_keys(&whole, b"", 4).unwrap());
            assert_eq!(live.newest(), 4, "c's deletion at 4 decided it");
        }
        assert!(matches!(
            Scanner::default().next(&[0u8; 64]),
            Err(StoreSnapshotError::BadMagic)
        ));
    }

    #[test]
    fn corruption_truncation_and_unknown_families_are_refused() {
        let data = sample();
        let mut flipped = data.clone();
        flipped[MAGIC.len() + 3] ^= 0xFF;
        assert!(matches!(
            verify(&flipped),
            Err(StoreSnapshotError::Checksum)
        ));
        assert!(matches!(
            verify(&data[..data.len() - 1]),
            Err(StoreSnapshotError::Checksum)
        ));
        assert!(matches!(
            verify(b"short"),
            Err(StoreSnapshotError::Truncated)
        ));
        assert!(matches!(
            verify(&[0u8; 64]),
            Err(StoreSnapshotError::BadMagic)
        ));
        let mut unknown = data.clone();
        unknown[MAGIC.len()] = 9;
        assert!(matches!(
            records(&unknown),
            Err(StoreSnapshotError::UnknownFamily(9))
        ));
        // A record cut short by the end of the body.
        let mut cut = MAGIC.to_vec();
        cut.extend_from_slice(&[0, 0, 0, 0, 9, b'k']);
        cut.extend_from_slice(&[0u8; 32]);
        assert!(matches!(records(&cut), Err(StoreSnapshotError::Truncated)));
    }
}

#[cfg(test)]
mod etcd_format_tests {
    use super::*;

    #[test]
    fn an_etcd_snapshot_and_a_kiln_snapshot_read_alike() {
        // The same history in both formats: "a" v1 at 2 and v2 at 4 (see etcd_db's sample), "b" put at
        // 3 and deleted at 5.
        let etcd = crate::etcd_db::tests_sample();
        let kiln = encode_kv(
            &[
                kv_record(b"a", 4, Some(b"v2")),
                kv_record(b"a", 2, Some(b"v1")),
                kv_record(b"b", 5, None),
                kv_record(b"b", 3, Some(b"w")),
            ],
            5,
        );
        let (rev_e, live_e) = live_at_revision(&etcd, b"").unwrap();
        let (rev_k, live_k) = live_at_revision(&kiln, b"").unwrap();
        assert_eq!((rev_e, &live_e), (rev_k, &live_k));
        assert_eq!(live_e.len(), 1);
        assert!(live_at_revision(b"neither format at all", b"").is_err());
    }
}
