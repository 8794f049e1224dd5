//! Byte layout shared by the reader and the writer.

pub const HEADER: usize = 16;
pub const ELEMENT: usize = 16;

pub const FLAG_BRANCH: u16 = 0x01;
pub const FLAG_LEAF: u16 = 0x02;
pub const FLAG_META: u16 = 0x04;
pub const FLAG_FREELIST: u16 = 0x10;
/// A leaf element that is a nested bucket.
pub const BUCKET_LEAF: u32 = 0x01;
/// Bucket header in a bucket's leaf value: root pgid, sequence.
pub const BUCKET_HEADER: usize = 16;
/// The meta fields the checksum covers: magic, version, page size, flags, root (16), freelist, pgid, txid.
pub const META_SUMMED: usize = 56;
/// meta.freelist when the freelist is not stored (bbolt's NoFreelistSync).
pub const NO_FREELIST: u64 = u64::MAX;

/// The page size kiln writes: bbolt's default on Linux (the OS page size).
pub const PAGE_SIZE: usize = 4096;
/// etcd appends the sha256 of the database to every snapshot it streams.
pub const SHA256_LEN: usize = 32;

/// FNV-1a, 64 bits: bbolt's meta checksum (Go's hash/fnv New64a).
pub fn fnv64a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

pub fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

pub fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

pub fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Writes a page header at the start of `page`.
pub fn put_header(page: &mut [u8], id: u64, flags: u16, count: u16, overflow: u32) {
    page[0..8].copy_from_slice(&id.to_le_bytes());
    page[8..10].copy_from_slice(&flags.to_le_bytes());
    page[10..12].copy_from_slice(&count.to_le_bytes());
    page[12..16].copy_from_slice(&overflow.to_le_bytes());
}
