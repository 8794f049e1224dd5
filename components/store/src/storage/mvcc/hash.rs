//! Consistency hashes for Maintenance Hash and HashKV: CRC-32C (Castagnoli, as etcd uses) over
//! a rocksdb snapshot. Members that applied the same entries hold the same bytes, so they
//! report the same hash; a member whose data diverged does not.

use rocksdb::{IteratorMode, DB};

use crate::etcd_error::EtcdError;
use crate::storage::db::{self, CF_KV, CF_SM_META, STATE_MACHINE_CFS};
use crate::storage::mvcc::keys;
use crate::storage::mvcc::{MvccError, META_COMPACT_REVISION};

/// CRC-32C, reflected polynomial 0x82F63B78; the table is built at compile time.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// A running CRC-32C.
#[derive(Debug, Clone, Copy)]
pub struct Crc32c(u32);

impl Default for Crc32c {
    fn default() -> Self {
        Crc32c(!0)
    }
}

impl Crc32c {
    pub fn update(&mut self, bytes: &[u8]) {
        let mut c = self.0;
        for &b in bytes {
            c = CRC32C_TABLE[((c ^ b as u32) & 0xFF) as usize] ^ (c >> 8);
        }
        self.0 = c;
    }

    pub fn finish(self) -> u32 {
        !self.0
    }
}

/// HashKV's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvHash {
    pub hash: u32,
    pub compact_revision: i64,
    /// The revision the hash covers.
    pub revision: i64,
}

/// Hash of the MVCC key space up to `revision` (0 = `current`): every stored version
/// (key, revision, value or tombstone) at or below it, in key order.
pub fn hash_kv(db: &DB, revision: i64, current: i64) -> Result<KvHash, MvccError> {
    let snap = db.snapshot();
    // The compact revision as of the same snapshot the hash reads.
    let compact = match snap.get_cf(db::cf(db, CF_SM_META), META_COMPACT_REVISION)? {
        Some(v) => i64::from_be_bytes(
            v.as_slice()
                .try_into()
                .map_err(|_| MvccError::Corrupt("compact revision is not 8 bytes".into()))?,
        ),
        None => 0,
    };
    let revision = if revision <= 0 { current } else { revision };
    if revision > current {
        return Err(EtcdError::FutureRev.into());
    }
    if revision < compact {
        return Err(EtcdError::Compacted.into());
    }
    let mut crc = Crc32c::default();
    for item in snap.iterator_cf(db::cf(db, CF_KV), IteratorMode::Start) {
        let (k, v) = item?;
        let Some((_, rev)) = keys::decode_kv_key(&k) else {
            return Err(MvccError::Corrupt("malformed kv key".into()));
        };
        if rev <= revision {
            crc.update(&k);
            crc.update(&v);
        }
    }
    Ok(KvHash {
        hash: crc.finish(),
        compact_revision: compact,
        revision,
    })
}

/// Hash of the whole state machine: every key and value of its column families.
pub fn hash_all(db: &DB) -> Result<u32, MvccError> {
    let snap = db.snapshot();
    let mut crc = Crc32c::default();
    for name in STATE_MACHINE_CFS {
        crc.update(name.as_bytes());
        for item in snap.iterator_cf(db::cf(db, name), IteratorMode::Start) {
            let (k, v) = item?;
            crc.update(&(k.len() as u64).to_be_bytes());
            crc.update(&k);
            crc.update(&(v.len() as u64).to_be_bytes());
            crc.update(&v);
        }
    }
    Ok(crc.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        let mut c = Crc32c::default();
        c.update(b"123456789");
        assert_eq!(c.finish(), 0xE306_9283);
        let mut split = Crc32c::default();
        split.update(b"1234");
        split.update(b"56789");
        assert_eq!(split.finish(), 0xE306_9283);
    }
}
