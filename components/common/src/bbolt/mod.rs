//! bbolt database files (go.etcd.io/bbolt), the format etcd keeps its backend in and streams as its
//! snapshot: read ([`read`], a decoder of untrusted bytes: every offset is checked, garbage is an error,
//! never a panic) and written in one pass ([`write`]: sorted buckets laid out page by page, as a freshly
//! compacted file, for a stream whose length must be known before its first byte).
//!
//! The layout (little-endian, as bbolt writes it on every platform etcd runs on): pages of `page_size`
//! bytes, each starting with a 16-byte header (`id u64, flags u16, count u16, overflow u32`), a page with
//! `overflow` n spanning n + 1 pages. Pages 0 and 1 are the two meta pages (the valid one with the higher
//! txid is current), which name the root bucket's page, the freelist page and the high-water mark. Leaf
//! pages hold `count` 16-byte elements (`flags u32, pos u32, ksize u32, vsize u32`), branch pages
//! `count` 16-byte elements (`pos u32, ksize u32, pgid u64`), each `pos` counted from the element itself
//! to its key (the value follows the key). A leaf element with flag 1 is a bucket: its value is the
//! bucket header (`root pgid u64, sequence u64`), followed by the bucket's own leaf page when root is 0
//! (an inline bucket).

mod page;
pub mod read;
pub mod write;

pub use page::{PAGE_SIZE, SHA256_LEN};

/// bbolt's magic number, first field of a meta page (0xED0CDAED).
pub const MAGIC: u32 = 0xED0C_DAED;
/// The file format version bbolt writes and reads.
pub const VERSION: u32 = 2;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BboltError {
    #[error("not a bbolt database: {0}")]
    Invalid(&'static str),
    #[error("bbolt page {page}: {message}")]
    Page { page: u64, message: String },
    #[error("bbolt writer: {0}")]
    Plan(String),
}

/// Whether `data` starts like a bbolt file: the magic in meta page 0 (right after its 16-byte header).
pub fn is_bbolt(data: &[u8]) -> bool {
    data.get(16..20)
        .is_some_and(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]) == MAGIC)
}

#[cfg(test)]
mod tests;
