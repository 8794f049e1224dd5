//! Raft snapshots of the state machine: every state-machine column family, framed as
//! `magic ‖ (cf u8, key len u32, key, value len u32, value)* ‖ 0xFF ‖ zero padding to 512 ‖
//! sha256`. The same blob is what Maintenance.Snapshot streams to `etcdctl snapshot save`.
//! The trailing digest lets a receiver refuse a corrupt or truncated snapshot.
//! `kiln_common::store_snapshot` reads this format (and the `kv` layout of `mvcc::keys`) without rocksdb
//! for `kiln snapshot save`: keep the two in step.

use rocksdb::{IteratorMode, WriteBatch, DB};
use sha2::{Digest, Sha256};

use crate::storage::db::{self, STATE_MACHINE_CFS};

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

type Snapshot<'a> = rocksdb::SnapshotWithThreadMode<'a, DB>;

/// Every record of the state machine as seen by `snapshot`, in snapshot order: `(family, key, value)`.
fn for_each_record(
    db: &DB,
    snapshot: &Snapshot<'_>,
    mut f: impl FnMut(u8, &[u8], &[u8]) -> bool,
) -> Result<(), SnapshotError> {
    for (i, name) in STATE_MACHINE_CFS.iter().enumerate() {
        // One sequential pass over everything: read ahead, and leave the block cache to the hot keys
        // (a snapshot passing through it would evict them and grow the process by the cache's size).
        let mut opts = rocksdb::ReadOptions::default();
        opts.fill_cache(false);
        opts.set_readahead_size(2 << 20);
        for item in snapshot.iterator_cf_opt(db::cf(db, name), opts, IteratorMode::Start) {
            let (k, v) = item?;
            if !f(i as u8, &k, &v) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The exact length of the snapshot of `snapshot`, digest included (what a stream announces as its
/// remaining bytes before the first piece is cut).
#[cfg(test)]
pub fn encoded_len(db: &DB, snapshot: &Snapshot<'_>) -> Result<usize, SnapshotError> {
    let mut len = MAGIC.len() + 1;
    for_each_record(db, snapshot, |_, k, v| {
        len += 1 + 4 + k.len() + 4 + v.len();
        true
    })?;
    Ok(len.div_ceil(PAD) * PAD + 32)
}

/// The snapshot being written: pieces cut off as they fill, hashed on the way out.
struct Pieces<F> {
    buf: Vec<u8>,
    piece: usize,
    digest: Sha256,
    written: usize,
    sink: F,
    open: bool,
}

impl<F: FnMut(Vec<u8>) -> bool> Pieces<F> {
    fn fresh(piece: usize) -> Vec<u8> {
        Vec::with_capacity(piece.min(1 << 20) + 4096)
    }

    /// Hands the buffer to the sink once it holds a piece.
    fn cut_if_full(&mut self) {
        if self.buf.len() >= self.piece {
            let full = std::mem::replace(&mut self.buf, Self::fresh(self.piece));
            self.digest.update(&full);
            self.written += full.len();
            self.open = (self.sink)(full);
        }
    }

    /// Ends the body (end mark, padding) and hands over the rest with the digest.
    fn finish(mut self) {
        self.buf.push(END);
        // Pad to a multiple of 512 bytes: etcdctl's `snapshot save` accepts a stream only when its
        // length is 32 (the sha256) past a 512-byte boundary, as bbolt files are page-aligned.
        let body = self.written + self.buf.len();
        self.buf
            .resize(self.buf.len() + body.div_ceil(PAD) * PAD - body, 0);
        self.digest.update(&self.buf);
        let mut last = self.buf;
        last.extend_from_slice(&self.digest.finalize());
        (self.sink)(last);
    }
}

/// Serializes the state machine as seen by `snapshot` (a rocksdb snapshot of `db`), handing it to
/// `sink` in pieces of at least `piece` bytes (the last one may be smaller) as it is written, the
/// sha256 computed along the way: nothing is held whole, and the first bytes can leave before the
/// last are read. `sink` returns false to stop early (the receiver went away).
pub fn encode_to(
    db: &DB,
    snapshot: &Snapshot<'_>,
    piece: usize,
    sink: impl FnMut(Vec<u8>) -> bool,
) -> Result<(), SnapshotError> {
    let mut out = Pieces {
        buf: Pieces::<fn(Vec<u8>) -> bool>::fresh(piece),
        piece,
        digest: Sha256::new(),
        written: 0,
        sink,
        open: true,
    };
    out.buf.extend_from_slice(MAGIC);
    for_each_record(db, snapshot, |family, k, v| {
        let buf = &mut out.buf;
        buf.push(family);
        buf.extend_from_slice(&(k.len() as u32).to_be_bytes());
        buf.extend_from_slice(k);
        buf.extend_from_slice(&(v.len() as u32).to_be_bytes());
        buf.extend_from_slice(v);
        out.cut_if_full();
        out.open
    })?;
    if out.open {
        out.finish();
    }
    Ok(())
}

/// Serializes the state machine as seen by `snapshot` into one blob.
pub fn encode(db: &DB, snapshot: &Snapshot<'_>) -> Result<Vec<u8>, SnapshotError> {
    let mut out = Vec::new();
    encode_to(db, snapshot, usize::MAX, |whole| {
        out = whole;
        true
    })?;
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
    // The digest is checked beside the framing (two cores, one pass each); a checksum mismatch is the
    // answer whenever there is one, as it explains any framing error too.
    std::thread::scope(|s| {
        let checked = s.spawn(|| Sha256::digest(body).as_slice() == digest);
        let records = frame(&body[MAGIC.len()..]);
        if !checked.join().expect("hashing does not panic") {
            return Err(SnapshotError::Checksum);
        }
        records
    })
}

/// The records of a snapshot body (after the magic).
fn frame(mut rest: &[u8]) -> Result<Vec<Record<'_>>, SnapshotError> {
    let mut records = Vec::new();
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
        let db = crate::storage::db::open(dir.path()).unwrap();
        db.put_cf(db::cf(&db, crate::storage::db::CF_KV), b"k", b"v")
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

    #[test]
    fn pieces_make_the_whole_and_the_announced_length() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::storage::db::open(dir.path()).unwrap();
        for i in 0..300u32 {
            let value = vec![b'v'; 100 + i as usize];
            db.put_cf(
                db::cf(&db, crate::storage::db::CF_KV),
                i.to_be_bytes(),
                &value,
            )
            .unwrap();
        }
        let snap = db.snapshot();
        let whole = encode(&db, &snap).unwrap();
        assert_eq!(encoded_len(&db, &snap).unwrap(), whole.len());
        let mut pieces = Vec::new();
        encode_to(&db, &snap, 4096, |p| {
            pieces.push(p);
            true
        })
        .unwrap();
        assert!(pieces.len() > 10, "cut into pieces: {}", pieces.len());
        assert!(pieces[..pieces.len() - 1].iter().all(|p| p.len() >= 4096));
        assert_eq!(pieces.concat(), whole);
        assert_eq!(parse(&whole).unwrap().len(), 300);

        // A receiver that goes away stops the writing.
        let mut calls = 0;
        encode_to(&db, &snap, 4096, |_| {
            calls += 1;
            false
        })
        .unwrap();
        assert_eq!(calls, 1);
    }
}
