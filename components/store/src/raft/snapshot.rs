//! Raft snapshots of the state machine: every state-machine column family, framed as
//! `magic ‖ (cf u8, key len u32, key, value len u32, value)* ‖ 0xFF ‖ zero padding to 512 ‖
//! sha256`. The same blob is what Maintenance.Snapshot streams to `etcdctl snapshot save`.
//! The trailing digest lets a receiver refuse a corrupt or truncated snapshot.
//! `kiln_common::store_snapshot` reads this format (and the `kv` layout of `mvcc::keys`) without rocksdb
//! for `kiln snapshot save`: keep the two in step.

use rocksdb::{IteratorMode, WriteBatch, DB};
use sha2::{Digest, Sha256};

use crate::db::{self, STATE_MACHINE_CFS};

const MAGIC: &[u8] = b"KILNSNAP1\n";
const END: u8 = 0xFF;
const PAD: usize = 512;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("rocksdb: {0}")]
    Db(#[from] rocksdb::Error),
    #[error("snapshot is not a kiln-store snapshot (bad magic)")]
    BadMagic,
    #[error("snapshot is truncated")]
    Truncated,
    #[error("snapshot checksum mismatch")]
    Checksum,
    #[error("snapshot names unknown column family #{0}")]
    UnknownFamily(u8),
}

/// Serializes the state machine as seen by `snapshot` (a rocksdb snapshot of `db`).
pub fn encode(
    db: &DB,
    snapshot: &rocksdb::SnapshotWithThreadMode<'_, DB>,
) -> Result<Vec<u8>, SnapshotError> {
    let mut out = MAGIC.to_vec();
    for (i, name) in STATE_MACHINE_CFS.iter().enumerate() {
        for item in snapshot.iterator_cf(db::cf(db, name), IteratorMode::Start) {
            let (k, v) = item?;
            out.push(i as u8);
            out.extend_from_slice(&(k.len() as u32).to_be_bytes());
            out.extend_from_slice(&k);
            out.extend_from_slice(&(v.len() as u32).to_be_bytes());
            out.extend_from_slice(&v);
        }
    }
    out.push(END);
    // Pad to a multiple of 512 bytes: etcdctl's `snapshot save` accepts a stream only when its
    // length is 32 (the sha256) past a 512-byte boundary, as bbolt files are page-aligned.
    out.resize(out.len().div_ceil(PAD) * PAD, 0);
    let digest = Sha256::digest(&out);
    out.extend_from_slice(&digest);
    Ok(out)
}

/// One key-value pair of one column family in a snapshot.
pub struct Record<'a> {
    pub family: &'static str,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// Verifies `data` (magic, trailing sha256, framing) and returns its records.
pub fn parse(data: &[u8]) -> Result<Vec<Record<'_>>, SnapshotError> {
    if data.len() < MAGIC.len() + 1 + 32 {
        return Err(SnapshotError::Truncated);
    }
    let (body, digest) = data.split_at(data.len() - 32);
    if !body.starts_with(MAGIC) {
        return Err(SnapshotError::BadMagic);
    }
    if Sha256::digest(body).as_slice() != digest {
        return Err(SnapshotError::Checksum);
    }
    let mut records = Vec::new();
    let mut rest = &body[MAGIC.len()..];
    loop {
        let (&tag, tail) = rest.split_first().ok_or(SnapshotError::Truncated)?;
        if tag == END {
            break;
        }
        let family = STATE_MACHINE_CFS
            .get(tag as usize)
            .ok_or(SnapshotError::UnknownFamily(tag))?;
        let (key, tail) = take_field(tail)?;
        let (value, tail) = take_field(tail)?;
        records.push(Record { family, key, value });
        rest = tail;
    }
    Ok(records)
}

/// Verifies `data` and turns it into a batch that replaces the whole state machine.
pub fn decode_into_batch(db: &DB, data: &[u8]) -> Result<WriteBatch, SnapshotError> {
    let records = parse(data)?;
    let mut batch = WriteBatch::default();
    for name in STATE_MACHINE_CFS {
        let cf = db::cf(db, name);
        for item in db.iterator_cf(cf, IteratorMode::Start) {
            let (k, _) = item?;
            batch.delete_cf(cf, k);
        }
    }
    for r in records {
        batch.put_cf(db::cf(db, r.family), r.key, r.value);
    }
    Ok(batch)
}

fn take_field(data: &[u8]) -> Result<(&[u8], &[u8]), SnapshotError> {
    if data.len() < 4 {
        return Err(SnapshotError::Truncated);
    }
    let (len, rest) = data.split_at(4);
    let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
    if rest.len() < len {
        return Err(SnapshotError::Truncated);
    }
    Ok(rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::db::open(dir.path()).unwrap();
        db.put_cf(db::cf(&db, crate::db::CF_KV), b"k", b"v")
            .unwrap();
        let data = encode(&db, &db.snapshot()).unwrap();
        assert_eq!(data.len() % 512, 32, "etcdctl's size check");

        let batch = decode_into_batch(&db, &data).unwrap();
        assert_eq!(batch.len(), 2, "one delete of the old key, one put");

        let mut corrupt = data.clone();
        corrupt[MAGIC.len() + 3] ^= 0xFF;
        assert!(matches!(
            decode_into_batch(&db, &corrupt),
            Err(SnapshotError::Checksum)
        ));
        assert!(matches!(
            decode_into_batch(&db, &data[..data.len() - 1]),
            Err(SnapshotError::Checksum)
        ));
        assert!(matches!(
            decode_into_batch(&db, b"short"),
            Err(SnapshotError::Truncated)
        ));
        assert!(matches!(
            decode_into_batch(&db, &[0u8; 64]),
            Err(SnapshotError::BadMagic)
        ));
    }
}
