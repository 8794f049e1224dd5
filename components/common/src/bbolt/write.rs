//! Writing a bbolt file in one pass, for a stream that must announce its length first: a [`Planner`]
//! is told every bucket and the size of every entry (in order), and fixes the layout; a [`Writer`] is
//! then given the same entries again and emits the pages, front to back, followed by the sha256 etcd
//! appends to a snapshot. The file is laid out as a freshly compacted bbolt file: two meta pages, an
//! empty freelist, the root bucket, then each bucket's leaf pages (filled to the page size, an entry
//! bigger than a page on overflow pages of its own) and the branch pages above them. Nothing is ever
//! updated in place, so no page is free.

use sha2::{Digest, Sha256};

use super::page::{
    fnv64a, put_header, BUCKET_HEADER, BUCKET_LEAF, ELEMENT, FLAG_BRANCH, FLAG_FREELIST, FLAG_LEAF,
    FLAG_META, HEADER, META_SUMMED,
};
use super::{BboltError, MAGIC, VERSION};

/// Page ids: 0 and 1 are the metas, 2 the freelist, the root bucket from 3.
const FREELIST_PAGE: u64 = 2;
const FIRST_DATA_PAGE: u64 = 3;

/// One planned leaf page.
#[derive(Debug, Clone)]
struct Leaf {
    count: usize,
    bytes: usize,
    first_key: Vec<u8>,
}

/// One planned branch page: children `children` of the level below.
#[derive(Debug, Clone)]
struct Branch {
    children: std::ops::Range<usize>,
    bytes: usize,
}

#[derive(Debug, Clone)]
struct PlannedBucket {
    name: Vec<u8>,
    leaves: Vec<Leaf>,
    /// Branch levels, bottom up; the last level has one page, the bucket's root (none: the single leaf
    /// is the root).
    levels: Vec<Vec<Branch>>,
    /// Page id of the bucket's first page (its pages are contiguous: leaves, then branch levels).
    first_page: u64,
    last_key: Option<Vec<u8>>,
}

impl PlannedBucket {
    fn new(name: &[u8]) -> Self {
        PlannedBucket {
            name: name.to_vec(),
            leaves: Vec::new(),
            levels: Vec::new(),
            first_page: 0,
            last_key: None,
        }
    }

    fn add(&mut self, page_size: usize, key: &[u8], value_len: usize) -> Result<(), BboltError> {
        if self.last_key.as_deref().is_some_and(|last| last >= key) {
            return Err(BboltError::Plan(format!(
                "keys of bucket {:?} out of order",
                String::from_utf8_lossy(&self.name)
            )));
        }
        // One buffer for the whole bucket: an allocation per entry costs more than the planning.
        match &mut self.last_key {
            Some(last) => {
                last.clear();
                last.extend_from_slice(key);
            }
            None => self.last_key = Some(key.to_vec()),
        }
        let size = ELEMENT + key.len() + value_len;
        match self.leaves.last_mut() {
            Some(leaf) if leaf.bytes + size <= page_size && leaf.count < 0xFFFF => {
                leaf.count += 1;
                leaf.bytes += size;
            }
            _ => self.leaves.push(Leaf {
                count: 1,
                bytes: HEADER + size,
                first_key: key.to_vec(),
            }),
        }
        Ok(())
    }

    /// Closes the plan: an empty bucket still has its (empty) root leaf; branch levels above the leaves.
    fn close(&mut self, page_size: usize) {
        if self.leaves.is_empty() {
            self.leaves.push(Leaf {
                count: 0,
                bytes: HEADER,
                first_key: Vec::new(),
            });
        }
        let mut below: Vec<usize> = self.leaves.iter().map(|l| l.first_key.len()).collect();
        while below.len() > 1 {
            let mut level: Vec<Branch> = Vec::new();
            for (i, key_len) in below.iter().enumerate() {
                let size = ELEMENT + key_len;
                match level.last_mut() {
                    Some(b) if b.bytes + size <= page_size && b.children.len() < 0xFFFF => {
                        b.children.end = i + 1;
                        b.bytes += size;
                    }
                    _ => level.push(Branch {
                        children: i..i + 1,
                        bytes: HEADER + size,
                    }),
                }
            }
            // A branch page's key is its first child's first key.
            below = level.iter().map(|b| below[b.children.start]).collect();
            self.levels.push(level);
        }
    }

    fn leaf_pages(&self, page_size: usize) -> Vec<u64> {
        self.leaves
            .iter()
            .map(|l| l.bytes.div_ceil(page_size) as u64)
            .collect()
    }

    fn page_count(&self, page_size: usize) -> u64 {
        self.leaf_pages(page_size).iter().sum::<u64>()
            + self.levels.iter().map(|l| l.len() as u64).sum::<u64>()
    }

    /// Page id of the bucket's root.
    fn root(&self, page_size: usize) -> u64 {
        if self.levels.is_empty() {
            // The single leaf, which may run on over overflow pages.
            return self.first_page;
        }
        self.first_page + self.page_count(page_size) - 1
    }

    /// The first key under each page of `level` (0: the leaves) and its page id.
    fn firsts(&self, level: usize, page_size: usize) -> Vec<(Vec<u8>, u64)> {
        let mut id = self.first_page;
        let mut leaves = Vec::new();
        for (leaf, pages) in self.leaves.iter().zip(self.leaf_pages(page_size)) {
            leaves.push((leaf.first_key.clone(), id));
            id += pages;
        }
        let mut below = leaves;
        for l in &self.levels[..level] {
            let mut next = Vec::new();
            for b in l {
                next.push((below[b.children.start].0.clone(), id));
                id += 1;
            }
            below = next;
        }
        below
    }
}

/// Learns the layout from the buckets' names and entry sizes, in order.
#[derive(Debug)]
pub struct Planner {
    page_size: usize,
    buckets: Vec<PlannedBucket>,
}

impl Planner {
    pub fn new(page_size: usize) -> Self {
        Planner {
            page_size,
            buckets: Vec::new(),
        }
    }

    /// Starts the next top-level bucket (names in strictly increasing byte order).
    pub fn bucket(&mut self, name: &[u8]) -> Result<(), BboltError> {
        if self
            .buckets
            .last()
            .is_some_and(|b| b.name.as_slice() >= name)
        {
            return Err(BboltError::Plan("buckets out of order".into()));
        }
        self.buckets.push(PlannedBucket::new(name));
        Ok(())
    }

    /// The next entry of the current bucket (keys in strictly increasing byte order).
    pub fn entry(&mut self, key: &[u8], value_len: usize) -> Result<(), BboltError> {
        let page_size = self.page_size;
        self.buckets
            .last_mut()
            .ok_or_else(|| BboltError::Plan("an entry before any bucket".into()))?
            .add(page_size, key, value_len)
    }

    pub fn finish(mut self) -> Result<Plan, BboltError> {
        let ps = self.page_size;
        let mut root = PlannedBucket::new(b"");
        for b in &mut self.buckets {
            b.close(ps);
            root.add(ps, &b.name, BUCKET_HEADER)?;
        }
        root.close(ps);
        root.first_page = FIRST_DATA_PAGE;
        let mut next = FIRST_DATA_PAGE + root.page_count(ps);
        for b in &mut self.buckets {
            b.first_page = next;
            next += b.page_count(ps);
        }
        Ok(Plan {
            page_size: ps,
            root,
            buckets: self.buckets,
            pages: next,
        })
    }
}

/// A fixed layout: what [`Writer`] fills in.
#[derive(Debug)]
pub struct Plan {
    page_size: usize,
    root: PlannedBucket,
    buckets: Vec<PlannedBucket>,
    pages: u64,
}

impl Plan {
    /// Bytes of the database (without the sha256 trailer).
    pub fn db_len(&self) -> u64 {
        self.pages * self.page_size as u64
    }

    /// Bytes of the stream: the database and its sha256.
    pub fn stream_len(&self) -> u64 {
        self.db_len() + super::SHA256_LEN as u64
    }
}

/// The most a piece buffer is made ready for at once (a caller may ask for one piece of everything).
const MAX_PIECE_RESERVE: usize = 4 << 20;

/// The leaf page being filled, in place at the end of the piece being gathered (no page buffer of
/// its own to allocate, zero and copy over).
struct OpenLeaf {
    /// Where its first page starts in the piece.
    at: usize,
    index: usize,
    count: usize,
    data_at: usize,
}

/// Emits the planned file as its entries are given again, in pieces of at least `piece` bytes (the
/// last one shorter), hashing them on the way; `sink` returns false to stop (the reader went away),
/// after which calls do nothing.
pub struct Writer<F: FnMut(Vec<u8>) -> bool> {
    plan: Plan,
    sink: F,
    piece: usize,
    out: Vec<u8>,
    digest: Sha256,
    open: bool,
    /// Index of the bucket being written (None before the first).
    bucket: Option<usize>,
    /// Index of the current leaf in the bucket, and its page.
    leaf: Option<OpenLeaf>,
    next_leaf: usize,
    next_page: u64,
}

impl<F: FnMut(Vec<u8>) -> bool> Writer<F> {
    /// Writes the meta pages, the freelist and the root bucket right away.
    pub fn new(plan: Plan, piece: usize, sink: F) -> Self {
        let mut w = Writer {
            plan,
            sink,
            piece: piece.max(1),
            out: Vec::with_capacity(piece_capacity(piece)),
            digest: Sha256::new(),
            open: true,
            bucket: None,
            leaf: None,
            next_leaf: 0,
            next_page: 0,
        };
        let ps = w.plan.page_size;
        let root = w.plan.root.root(ps);
        for txid in 0..2u64 {
            let mut page = vec![0u8; ps];
            put_header(&mut page, txid, FLAG_META, 0, 0);
            let m = &mut page[HEADER..];
            m[0..4].copy_from_slice(&MAGIC.to_le_bytes());
            m[4..8].copy_from_slice(&VERSION.to_le_bytes());
            m[8..12].copy_from_slice(&(ps as u32).to_le_bytes());
            // flags (12..16) 0; root bucket: root pgid, sequence 0.
            m[16..24].copy_from_slice(&root.to_le_bytes());
            m[32..40].copy_from_slice(&FREELIST_PAGE.to_le_bytes());
            m[40..48].copy_from_slice(&w.plan.pages.to_le_bytes());
            m[48..56].copy_from_slice(&txid.to_le_bytes());
            let sum = fnv64a(&m[..META_SUMMED]);
            m[56..64].copy_from_slice(&sum.to_le_bytes());
            w.emit(page);
        }
        let mut freelist = vec![0u8; ps];
        put_header(&mut freelist, FREELIST_PAGE, FLAG_FREELIST, 0, 0);
        w.emit(freelist);
        w.next_page = FIRST_DATA_PAGE;
        // The root bucket: one entry per bucket, its value the bucket header.
        let root_bucket = std::mem::replace(&mut w.plan.root, PlannedBucket::new(b""));
        let names: Vec<(Vec<u8>, u64)> = w
            .plan
            .buckets
            .iter()
            .map(|b| (b.name.clone(), b.root(ps)))
            .collect();
        w.write_tree(
            &root_bucket,
            names.iter().map(|(name, root)| {
                let mut header = [0u8; BUCKET_HEADER];
                header[..8].copy_from_slice(&root.to_le_bytes());
                (name.as_slice(), header)
            }),
        );
        w.plan.root = root_bucket;
        w
    }

    /// A whole bucket whose entries are all at hand (the root bucket): leaves then branches.
    fn write_tree<'k>(
        &mut self,
        bucket: &PlannedBucket,
        entries: impl Iterator<Item = (&'k [u8], [u8; BUCKET_HEADER])>,
    ) {
        let ps = self.plan.page_size;
        let mut entries = entries.peekable();
        for leaf in &bucket.leaves {
            let pages = leaf.bytes.div_ceil(ps);
            let mut page = vec![0u8; pages * ps];
            put_header(
                &mut page,
                self.next_page,
                FLAG_LEAF,
                leaf.count as u16,
                (pages - 1) as u32,
            );
            let mut data_at = HEADER + leaf.count * ELEMENT;
            for i in 0..leaf.count {
                let Some((key, value)) = entries.next() else {
                    break;
                };
                data_at = put_leaf_element(&mut page, i, data_at, BUCKET_LEAF, key, &value);
            }
            self.next_page += pages as u64;
            self.emit(page);
        }
        self.write_branches(bucket);
    }

    fn write_branches(&mut self, bucket: &PlannedBucket) {
        let ps = self.plan.page_size;
        for (level, pages) in bucket.levels.iter().enumerate() {
            let below = bucket.firsts(level, ps);
            for b in pages {
                let mut page = vec![0u8; ps];
                let count = b.children.len();
                put_header(&mut page, self.next_page, FLAG_BRANCH, count as u16, 0);
                let mut data_at = HEADER + count * ELEMENT;
                for (i, (key, pgid)) in below[b.children.clone()].iter().enumerate() {
                    let at = HEADER + i * ELEMENT;
                    page[at..at + 4].copy_from_slice(&((data_at - at) as u32).to_le_bytes());
                    page[at + 4..at + 8].copy_from_slice(&(key.len() as u32).to_le_bytes());
                    page[at + 8..at + 16].copy_from_slice(&pgid.to_le_bytes());
                    page[data_at..data_at + key.len()].copy_from_slice(key);
                    data_at += key.len();
                }
                self.next_page += 1;
                self.emit(page);
            }
        }
    }

    /// Moves on to the next bucket of the plan, named `name`.
    pub fn bucket(&mut self, name: &[u8]) -> Result<(), BboltError> {
        self.close_bucket()?;
        let next = self.bucket.map_or(0, |b| b + 1);
        match self.plan.buckets.get(next) {
            Some(b) if b.name == name => {}
            _ => return Err(BboltError::Plan("bucket not in the plan".into())),
        }
        self.bucket = Some(next);
        self.next_leaf = 0;
        Ok(())
    }

    /// The next entry of the current bucket: the same key and value size as planned.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), BboltError> {
        let ps = self.plan.page_size;
        let b = self
            .bucket
            .ok_or_else(|| BboltError::Plan("an entry before any bucket".into()))?;
        if self.leaf.is_none() {
            let leaf = self.plan.buckets[b]
                .leaves
                .get(self.next_leaf)
                .ok_or_else(|| BboltError::Plan("more entries than planned".into()))?;
            let pages = leaf.bytes.div_ceil(ps);
            let at = self.out.len();
            self.out.resize(at + pages * ps, 0);
            put_header(
                &mut self.out[at..],
                self.next_page,
                FLAG_LEAF,
                leaf.count as u16,
                (pages - 1) as u32,
            );
            self.next_page += pages as u64;
            self.leaf = Some(OpenLeaf {
                at,
                index: 0,
                count: leaf.count,
                data_at: HEADER + leaf.count * ELEMENT,
            });
            self.next_leaf += 1;
        }
        let leaf = self.leaf.as_mut().expect("opened above");
        let page = &mut self.out[leaf.at..];
        if leaf.data_at + key.len() + value.len() > page.len() {
            return Err(BboltError::Plan("an entry larger than planned".into()));
        }
        leaf.data_at = put_leaf_element(page, leaf.index, leaf.data_at, 0, key, value);
        leaf.index += 1;
        if leaf.index == leaf.count {
            self.leaf = None;
            self.send_if_full();
        }
        Ok(())
    }

    fn close_bucket(&mut self) -> Result<(), BboltError> {
        let Some(b) = self.bucket else {
            return Ok(());
        };
        let planned = &self.plan.buckets[b];
        if self.leaf.is_some() || self.next_leaf < planned.leaves.len() {
            // An empty bucket's planned leaf has no entries: written empty, as planned.
            if planned.leaves.len() == 1 && planned.leaves[0].count == 0 && self.next_leaf == 0 {
                let mut page = vec![0u8; self.plan.page_size];
                put_header(&mut page, self.next_page, FLAG_LEAF, 0, 0);
                self.next_page += 1;
                self.next_leaf = 1;
                self.emit(page);
            } else {
                return Err(BboltError::Plan("fewer entries than planned".into()));
            }
        }
        let planned = self.plan.buckets[b].clone();
        self.write_branches(&planned);
        Ok(())
    }

    /// Ends the file (every planned bucket written) and hands over the rest with the sha256.
    pub fn finish(mut self) -> Result<(), BboltError> {
        self.close_bucket()?;
        if self.bucket.map_or(0, |b| b + 1) != self.plan.buckets.len() {
            return Err(BboltError::Plan("fewer buckets than planned".into()));
        }
        if self.next_page != self.plan.pages {
            return Err(BboltError::Plan("page count differs from the plan".into()));
        }
        if self.open {
            let mut last = std::mem::take(&mut self.out);
            self.digest.update(&last);
            last.extend_from_slice(&self.digest.clone().finalize());
            (self.sink)(last);
        }
        Ok(())
    }

    fn emit(&mut self, page: Vec<u8>) {
        if !self.open {
            return;
        }
        if self.out.is_empty() && page.len() >= self.piece {
            self.out = page;
        } else {
            self.out.extend_from_slice(&page);
        }
        self.send_if_full();
    }

    /// Hands the gathered pages over once they make a piece (never while a leaf is open in them).
    fn send_if_full(&mut self) {
        if !self.open {
            self.out.clear();
            return;
        }
        if self.out.len() >= self.piece {
            let next = Vec::with_capacity(piece_capacity(self.piece));
            let full = std::mem::replace(&mut self.out, next);
            self.digest.update(&full);
            self.open = (self.sink)(full);
        }
    }

    /// Whether the sink still takes pieces.
    pub fn is_open(&self) -> bool {
        self.open
    }
}

/// Room for a piece and the page that completes it, so gathering one never reallocates.
fn piece_capacity(piece: usize) -> usize {
    piece
        .saturating_add(super::PAGE_SIZE)
        .min(MAX_PIECE_RESERVE)
}

/// Writes leaf element `i` (its key and value at `data_at`); returns where the next data goes.
fn put_leaf_element(
    page: &mut [u8],
    i: usize,
    data_at: usize,
    flags: u32,
    key: &[u8],
    value: &[u8],
) -> usize {
    let at = HEADER + i * ELEMENT;
    page[at..at + 4].copy_from_slice(&flags.to_le_bytes());
    page[at + 4..at + 8].copy_from_slice(&((data_at - at) as u32).to_le_bytes());
    page[at + 8..at + 12].copy_from_slice(&(key.len() as u32).to_le_bytes());
    page[at + 12..at + 16].copy_from_slice(&(value.len() as u32).to_le_bytes());
    let v = data_at + key.len();
    page[data_at..v].copy_from_slice(key);
    page[v..v + value.len()].copy_from_slice(value);
    v + value.len()
}

/// Entries of one bucket, in key order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// A whole file from buckets held in memory (tests and small tools): `(name, [(key, value)])`, both
/// sorted. Returns the database followed by its sha256, as etcd streams a snapshot.
pub fn write_all(page_size: usize, buckets: &[(&[u8], Entries)]) -> Result<Vec<u8>, BboltError> {
    let mut planner = Planner::new(page_size);
    for (name, entries) in buckets {
        planner.bucket(name)?;
        for (k, v) in entries {
            planner.entry(k, v.len())?;
        }
    }
    let mut out = Vec::new();
    let mut w = Writer::new(planner.finish()?, usize::MAX, |p| {
        out.extend_from_slice(&p);
        true
    });
    for (name, entries) in buckets {
        w.bucket(name)?;
        for (k, v) in entries {
            w.put(k, v)?;
        }
    }
    w.finish()?;
    Ok(out)
}
