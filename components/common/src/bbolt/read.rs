//! Reading a bbolt file held in memory. The bytes are untrusted (a snapshot file from anywhere): every
//! offset and length is checked against the page it lies in, page ids against the high-water mark, and a
//! walk visits each page at most once, so a loop or a shared page in a garbled file is an error and the
//! work stays bounded by the file's size.

use std::collections::HashSet;

use super::page::{
    fnv64a, u16_at, u32_at, u64_at, BUCKET_HEADER, BUCKET_LEAF, ELEMENT, FLAG_BRANCH, FLAG_LEAF,
    HEADER, META_SUMMED, NO_FREELIST,
};
use super::{BboltError, MAGIC, VERSION};

/// A branch chain this long would need more pages than any file has.
const MAX_TREE_HEIGHT: usize = 64;

/// The current meta page's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub page_size: u32,
    pub root: u64,
    pub freelist: u64,
    /// High-water mark: pages below it are in use or free.
    pub pgid: u64,
    pub txid: u64,
}

/// A bbolt file, opened read-only over its bytes (which may carry etcd's sha256 trailer past the last
/// page).
#[derive(Debug, Clone, Copy)]
pub struct Db<'a> {
    data: &'a [u8],
    page_size: usize,
    meta: Meta,
}

/// Where a bucket's tree starts: its own page, or an inline page inside its parent's leaf value.
#[derive(Debug, Clone, Copy)]
pub enum Bucket<'a> {
    Paged(u64),
    Inline(&'a [u8]),
}

/// One leaf entry of a bucket walk.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub key: &'a [u8],
    /// The value; empty for a nested bucket (bbolt's ForEach gives nil there).
    pub value: &'a [u8],
    /// The nested bucket, when the entry is one.
    pub bucket: Option<Bucket<'a>>,
}

fn meta_at(data: &[u8], offset: usize) -> Result<Meta, BboltError> {
    let m = offset
        .checked_add(HEADER)
        .ok_or(BboltError::Invalid("meta offset"))?;
    let field = |at: usize| u64_at(data, m + at).ok_or(BboltError::Invalid("file too small"));
    let word = |at: usize| u32_at(data, m + at).ok_or(BboltError::Invalid("file too small"));
    if word(0)? != MAGIC {
        return Err(BboltError::Invalid("bad magic"));
    }
    if word(4)? != VERSION {
        return Err(BboltError::Invalid("version mismatch"));
    }
    let summed = data
        .get(m..m + META_SUMMED)
        .ok_or(BboltError::Invalid("file too small"))?;
    if field(META_SUMMED)? != fnv64a(summed) {
        return Err(BboltError::Invalid("meta checksum mismatch"));
    }
    Ok(Meta {
        page_size: word(8)?,
        root: field(16)?,
        freelist: field(32)?,
        pgid: field(40)?,
        txid: field(48)?,
    })
}

impl<'a> Db<'a> {
    /// Validates the meta pages (magic, version, checksum) and picks the current one, as bbolt's Open:
    /// meta 0 gives the page size; of the valid metas the one with the higher txid wins.
    pub fn open(data: &'a [u8]) -> Result<Self, BboltError> {
        let m0 = meta_at(data, 0);
        let page_size = match &m0 {
            Ok(m) => m.page_size as usize,
            Err(_) => super::PAGE_SIZE,
        };
        if !(512..=1 << 20).contains(&page_size) || !page_size.is_power_of_two() {
            return Err(BboltError::Invalid("page size"));
        }
        if data.len() < 2 * page_size {
            return Err(BboltError::Invalid("file size too small"));
        }
        let m1 = meta_at(data, page_size);
        let meta = match (m0, m1) {
            (Ok(a), Ok(b)) => {
                if b.txid > a.txid {
                    b
                } else {
                    a
                }
            }
            (Ok(m), Err(_)) | (Err(_), Ok(m)) => m,
            (Err(e), Err(_)) => return Err(e),
        };
        if meta.page_size as usize != page_size {
            return Err(BboltError::Invalid("meta pages disagree on the page size"));
        }
        if meta.root >= meta.pgid || (meta.freelist >= meta.pgid && meta.freelist != NO_FREELIST) {
            return Err(BboltError::Invalid(
                "meta names a page above the high-water mark",
            ));
        }
        Ok(Db {
            data,
            page_size,
            meta,
        })
    }

    pub fn meta(&self) -> Meta {
        self.meta
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The database's size as bbolt reports it (Tx.Size: high-water mark × page size).
    pub fn size(&self) -> u64 {
        self.meta.pgid.saturating_mul(self.page_size as u64)
    }

    /// The root bucket, whose entries are the top-level buckets.
    pub fn root(&self) -> Bucket<'a> {
        Bucket::Paged(self.meta.root)
    }

    /// The whole page `id` (with its overflow pages).
    fn page(&self, id: u64) -> Result<&'a [u8], BboltError> {
        let bad = |message: &str| BboltError::Page {
            page: id,
            message: message.into(),
        };
        if id >= self.meta.pgid {
            return Err(bad("above the high-water mark"));
        }
        let start = usize::try_from(id)
            .ok()
            .and_then(|i| i.checked_mul(self.page_size))
            .ok_or_else(|| bad("offset overflows"))?;
        let head = self
            .data
            .get(start..start.saturating_add(HEADER))
            .ok_or_else(|| bad("beyond the end of the file"))?;
        if u64_at(head, 0) != Some(id) {
            return Err(bad("header names another page"));
        }
        let overflow = u32_at(head, 12).unwrap_or(0) as usize;
        let len = overflow
            .checked_add(1)
            .and_then(|n| n.checked_mul(self.page_size))
            .ok_or_else(|| bad("overflow too large"))?;
        let end = start
            .checked_add(len)
            .ok_or_else(|| bad("overflow too large"))?;
        self.data
            .get(start..end)
            .ok_or_else(|| bad("overflow pages beyond the end of the file"))
    }

    /// The entries of `bucket`, in key order, handed to `f` (which may stop the walk with an error of
    /// its own). Nested buckets are handed over as entries, not entered.
    pub fn for_each<E: From<BboltError>>(
        &self,
        bucket: Bucket<'a>,
        mut f: impl FnMut(Entry<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut seen = HashSet::new();
        match bucket {
            Bucket::Paged(id) => self.walk(id, 0, &mut seen, &mut f),
            Bucket::Inline(page) => leaf_entries(page, u64::MAX, &mut f),
        }
    }

    /// The top-level bucket named `name`.
    pub fn bucket(&self, name: &[u8]) -> Result<Option<Bucket<'a>>, BboltError> {
        let mut found = None;
        self.for_each::<BboltError>(self.root(), |e| {
            if e.key == name {
                found = e.bucket;
            }
            Ok(())
        })?;
        Ok(found)
    }

    fn walk<E: From<BboltError>>(
        &self,
        id: u64,
        height: usize,
        seen: &mut HashSet<u64>,
        f: &mut impl FnMut(Entry<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        let bad = |message: &str| BboltError::Page {
            page: id,
            message: message.into(),
        };
        if height > MAX_TREE_HEIGHT {
            return Err(bad("tree too high").into());
        }
        if !seen.insert(id) {
            return Err(bad("reached twice").into());
        }
        let page = self.page(id)?;
        match u16_at(page, 8) {
            Some(FLAG_LEAF) => leaf_entries(page, id, f),
            Some(FLAG_BRANCH) => {
                let count = u16_at(page, 10).unwrap_or(0) as usize;
                for i in 0..count {
                    let at = HEADER + i * ELEMENT;
                    let child = u64_at(page, at + 8).ok_or_else(|| bad("element past the page"))?;
                    self.walk(child, height + 1, seen, f)?;
                }
                Ok(())
            }
            _ => Err(bad("neither a branch nor a leaf page").into()),
        }
    }

    /// Every top-level bucket with every entry, in order: `f(bucket name, entry)` (what etcdctl's
    /// snapshot status hashes and counts).
    pub fn for_each_in_buckets<E: From<BboltError>>(
        &self,
        mut f: impl FnMut(&'a [u8], Entry<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut buckets = Vec::new();
        self.for_each::<BboltError>(self.root(), |e| {
            buckets.push(e);
            Ok(())
        })?;
        for b in buckets {
            let Some(inner) = b.bucket else {
                return Err(BboltError::Invalid("a top-level entry is not a bucket").into());
            };
            self.for_each(inner, |e| f(b.key, e))?;
        }
        Ok(())
    }
}

/// The entries of one leaf page (`id` only names it in errors).
fn leaf_entries<'a, E: From<BboltError>>(
    page: &'a [u8],
    id: u64,
    f: &mut impl FnMut(Entry<'a>) -> Result<(), E>,
) -> Result<(), E> {
    let bad = |message: &str| BboltError::Page {
        page: id,
        message: message.into(),
    };
    if u16_at(page, 8) != Some(super::page::FLAG_LEAF) {
        return Err(bad("not a leaf page").into());
    }
    let count = u16_at(page, 10).unwrap_or(0) as usize;
    for i in 0..count {
        let at = HEADER + i * ELEMENT;
        let field = |o: usize| u32_at(page, at + o).ok_or_else(|| bad("element past the page"));
        let (flags, pos, ksize, vsize) = (field(0)?, field(4)?, field(8)?, field(12)?);
        let k = at
            .checked_add(pos as usize)
            .ok_or_else(|| bad("key offset overflows"))?;
        let v = k
            .checked_add(ksize as usize)
            .ok_or_else(|| bad("key overflows"))?;
        let end = v
            .checked_add(vsize as usize)
            .ok_or_else(|| bad("value overflows"))?;
        let (key, value) = match (page.get(k..v), page.get(v..end)) {
            (Some(key), Some(value)) => (key, value),
            _ => return Err(bad("key or value past the page").into()),
        };
        let entry = if flags & BUCKET_LEAF != 0 {
            let root = u64_at(value, 0).ok_or_else(|| bad("bucket header cut short"))?;
            let bucket = if root == 0 {
                let inline = &value[BUCKET_HEADER.min(value.len())..];
                if inline.len() < HEADER {
                    return Err(bad("inline bucket cut short").into());
                }
                Bucket::Inline(inline)
            } else {
                Bucket::Paged(root)
            };
            Entry {
                key,
                value: &[],
                bucket: Some(bucket),
            }
        } else {
            Entry {
                key,
                value,
                bucket: None,
            }
        };
        f(entry)?;
    }
    Ok(())
}
