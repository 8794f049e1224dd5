//! The Raft log in files of its own, as etcd's WAL keeps it: segments of preallocated space
//! that each append writes into and then fdatasyncs.
//!
//! Why not rocksdb's WAL: rocksdb grows its WAL file with every write, so each fdatasync also
//! writes the file's new size (two device writes per sync; 0.19-0.21 ms here against 0.13-0.15
//! ms into preallocated space, measured with the same 400-byte appends), and every entry went
//! through a memtable, a flush and a compaction before it was purged. The log is the only
//! fsync on a write's way to its answer, so this is the write path's floor.
//!
//! Layout: `DIR/<first index, 20 digits>.seg`, each created at its full size (fallocate, then
//! zeros written through: see [`Spare`]) and filled front to back with records:
//! `len u32 | crc32 u32 | index u64 | payload`, little endian; the crc covers the index and the
//! payload. Space not yet appended to reads as zeros, and a zero length ends a segment. On open
//! the records are read back in order; the log ends at the first record that is torn (bad
//! crc), out of sequence, or missing, and anything after it is removed.
//!
//! Truncation zeroes the dropped records before removing later segments, so a crash in between
//! never brings dropped entries back. A jump in the index (a follower that installed a
//! snapshot) starts a fresh segment once every older segment is gone.

use std::collections::{BTreeMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes preallocated per segment (etcd preallocates 64 MiB; a small member keeps less idle).
pub const SEGMENT_BYTES: u64 = 16 * 1024 * 1024;
const HEADER: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum LogFileError {
    #[error("raft log {path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("raft log {path}: entry {index} is unreadable ({reason})")]
    Corrupt {
        path: String,
        index: u64,
        reason: &'static str,
    },
    #[error("raft log: entry {index} appended after {last} (entries must follow each other)")]
    OutOfOrder { index: u64, last: u64 },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> LogFileError + '_ {
    move |source| LogFileError::Io {
        path: path.display().to_string(),
        source,
    }
}

struct Segment {
    path: PathBuf,
    file: File,
    /// Where the next record goes (the end of the written records).
    end: u64,
    /// Allocated size.
    size: u64,
}

#[derive(Clone, Copy)]
struct Loc {
    /// First index of the segment holding the record.
    segment: u64,
    offset: u64,
    len: u32,
}

/// The log: segments by first index, and where each live entry is.
pub struct LogFile {
    dir: PathBuf,
    segment_bytes: u64,
    segments: BTreeMap<u64, Segment>,
    /// Locations of entries `first..first + locs.len()`.
    locs: VecDeque<Loc>,
    first: u64,
    /// The next segment's file, being made ready in the background.
    spare: Option<Spare>,
}

/// Where the next segment is made ready: a temporary name, removed on open like any other.
const SPARE_NAME: &str = "spare.seg.tmp";

/// The next segment's file, prepared on a thread of its own while the current one fills (etcd's
/// WAL keeps a preallocated file ready the same way), so a switch costs a rename.
///
/// Prepared means allocated, zeros written through and synced. Space that is only allocated
/// (fallocate) is unwritten to ext4: the first append into each 4 KiB block converts it, and
/// that append's fdatasync then writes the file's metadata too, one more device write every ~10
/// appends (4 557 against 4 154 writes for 4 000 appends + fdatasyncs; 160 against 150 µs each,
/// bench/README.md, session 10). Writing 16 MiB of zeros takes 15-30 ms, too long to do inline.
struct Spare {
    path: PathBuf,
    size: u64,
    /// `None` when no thread could be started: the next segment is then prepared inline.
    ready: Option<std::thread::JoinHandle<io::Result<File>>>,
}

impl Spare {
    fn start(dir: &Path, size: u64) -> Self {
        let path = dir.join(SPARE_NAME);
        let at = path.clone();
        let ready = std::thread::Builder::new()
            .name("kiln-wal-spare".into())
            .spawn(move || prepare(&at, size))
            .map_err(|e| tracing::warn!(error = %e, "no thread for the raft log's spare segment"))
            .ok();
        Self { path, size, ready }
    }

    /// Waits for the file; `None` if it could not be prepared (the caller then does it inline).
    fn finish(self) -> Option<(PathBuf, u64, File)> {
        let outcome = self.ready?.join();
        match outcome {
            Ok(Ok(file)) => return Some((self.path, self.size, file)),
            Ok(Err(e)) => {
                tracing::warn!(path = %self.path.display(), error = %e, "raft log spare segment not prepared");
            }
            Err(_) => tracing::warn!("the raft log's spare segment thread panicked"),
        }
        let _ = std::fs::remove_file(&self.path);
        None
    }
}

/// Creates `path` (replacing it) at `size` bytes: allocated, zero-filled and synced.
fn prepare(path: &Path, size: u64) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    allocate(&file, size)?;
    zero(&file, 0, size)?;
    file.sync_all()?;
    Ok(file)
}

impl Drop for LogFile {
    fn drop(&mut self) {
        // Never leave a thread writing into the directory: a log opened next on it must not
        // find zeros landing in a file it has made a segment.
        if let Some(ready) = self.spare.take().and_then(|s| s.ready) {
            let _ = ready.join();
        }
    }
}

fn segment_name(first: u64) -> String {
    format!("{first:020}.seg")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    (digits.len() == 20).then(|| digits.parse().ok()).flatten()
}

fn crc(index: u64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&index.to_le_bytes());
    h.update(payload);
    h.finalize()
}

fn encode_record(out: &mut Vec<u8>, index: u64, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc(index, payload).to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(payload);
}

fn sync_dir(dir: &Path) -> Result<(), LogFileError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Records of one segment's bytes, in order, up to the first zero length or torn record.
fn scan(bytes: &[u8]) -> Vec<(u64, u64, u32)> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + HEADER <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        if len == 0 {
            break;
        }
        let sum = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        let index = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().expect("8 bytes"));
        let start = at + HEADER;
        let Some(end) = start
            .checked_add(len as usize)
            .filter(|e| *e <= bytes.len())
        else {
            break;
        };
        if crc(index, &bytes[start..end]) != sum {
            break;
        }
        out.push((index, at as u64, len));
        at = end;
    }
    out
}

impl LogFile {
    /// Opens (creating) the log in `dir`. Entries at or below `purged` are not served.
    pub fn open(dir: &Path, purged: Option<u64>) -> Result<Self, LogFileError> {
        Self::open_with(dir, purged, SEGMENT_BYTES)
    }

    pub fn open_with(
        dir: &Path,
        purged: Option<u64>,
        segment_bytes: u64,
    ) -> Result<Self, LogFileError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let mut names = Vec::new();
        for item in std::fs::read_dir(dir).map_err(io_err(dir))? {
            let item = item.map_err(io_err(dir))?;
            let name = item.file_name().to_string_lossy().into_owned();
            match parse_segment_name(&name) {
                Some(first) => names.push(first),
                // A segment being created when the process died.
                None if name.ends_with(".tmp") => {
                    let _ = std::fs::remove_file(item.path());
                }
                None => {}
            }
        }
        names.sort_unstable();
        let mut log = LogFile {
            dir: dir.to_path_buf(),
            segment_bytes,
            segments: BTreeMap::new(),
            locs: VecDeque::new(),
            first: 0,
            spare: None,
        };
        let mut ended = false;
        for first in names {
            let path = dir.join(segment_name(first));
            if ended {
                // After the log's end (a torn record or a gap): never acknowledged as a whole.
                tracing::warn!(segment = %path.display(), "raft log segment after the log's end removed");
                std::fs::remove_file(&path).map_err(io_err(&path))?;
                continue;
            }
            let bytes = std::fs::read(&path).map_err(io_err(&path))?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(io_err(&path))?;
            let records = scan(&bytes);
            let mut end = 0;
            for (index, offset, len) in records {
                let expected = log.next_index();
                if expected.is_some_and(|e| e != index) {
                    ended = true;
                    break;
                }
                if log.locs.is_empty() {
                    log.first = index;
                }
                log.locs.push_back(Loc {
                    segment: first,
                    offset,
                    len,
                });
                end = offset + HEADER as u64 + len as u64;
            }
            if end < bytes.len() as u64 && bytes[end as usize..].iter().any(|b| *b != 0) {
                // A torn or stale tail: zero it, so later appends never sit before old bytes.
                ended = true;
                zero(&file, end, bytes.len() as u64).map_err(io_err(&path))?;
                file.sync_data().map_err(io_err(&path))?;
            }
            log.segments.insert(
                first,
                Segment {
                    path,
                    file,
                    end,
                    size: bytes.len() as u64,
                },
            );
        }
        if let Some(p) = purged {
            log.drop_through(p);
        }
        log.spare = Some(Spare::start(&log.dir, log.segment_bytes));
        Ok(log)
    }

    fn next_index(&self) -> Option<u64> {
        (!self.locs.is_empty()).then(|| self.first + self.locs.len() as u64)
    }

    /// Index of the first entry served, if any.
    pub fn first_index(&self) -> Option<u64> {
        (!self.locs.is_empty()).then_some(self.first)
    }

    /// Index of the last entry, if any.
    pub fn last_index(&self) -> Option<u64> {
        self.next_index().map(|n| n - 1)
    }

    /// Appends `(index, payload)` records (consecutive, following the last entry unless the
    /// log is empty) and syncs them.
    pub fn append(&mut self, records: &[(u64, &[u8])]) -> Result<(), LogFileError> {
        let Some(&(first_new, _)) = records.first() else {
            return Ok(());
        };
        if let Some(next) = self.next_index() {
            if first_new != next {
                return Err(LogFileError::OutOfOrder {
                    index: first_new,
                    last: next - 1,
                });
            }
        }
        for pair in records.windows(2) {
            if pair[1].0 != pair[0].0 + 1 {
                return Err(LogFileError::OutOfOrder {
                    index: pair[1].0,
                    last: pair[0].0,
                });
            }
        }
        let mut buf = Vec::with_capacity(records.iter().map(|(_, p)| p.len() + HEADER).sum());
        let mut lens = Vec::with_capacity(records.len());
        for (index, payload) in records {
            encode_record(&mut buf, *index, payload);
            lens.push(payload.len() as u32);
        }
        let fresh = self.locs.is_empty();
        let fits = self
            .segments
            .values()
            .next_back()
            .is_some_and(|s| s.end + buf.len() as u64 <= s.size);
        if fresh || !fits {
            if fresh {
                // A new start (first append, or after everything was purged): nothing older
                // may stay, or a gap would end the log on the next open.
                self.remove_segments(|_| true)?;
            }
            self.create_segment(first_new, buf.len() as u64)?;
        }
        let (&seg_first, seg) = self
            .segments
            .iter_mut()
            .next_back()
            .expect("a segment was just ensured");
        seg.file
            .write_all_at(&buf, seg.end)
            .and_then(|()| seg.file.sync_data())
            .map_err(io_err(&seg.path))?;
        if fresh {
            self.first = first_new;
        }
        let mut offset = seg.end;
        for len in lens {
            self.locs.push_back(Loc {
                segment: seg_first,
                offset,
                len,
            });
            offset += HEADER as u64 + len as u64;
        }
        seg.end = offset;
        Ok(())
    }

    fn create_segment(&mut self, first: u64, at_least: u64) -> Result<(), LogFileError> {
        let wanted = self.segment_bytes.max(at_least);
        let path = self.dir.join(segment_name(first));
        // The spare if it is big enough (an entry larger than a segment needs its own).
        let ready = self
            .spare
            .take()
            .and_then(Spare::finish)
            .filter(|(spare, size, _)| {
                let fits = *size >= wanted;
                if !fits {
                    let _ = std::fs::remove_file(spare);
                }
                fits
            });
        let (tmp, size, file) = match ready {
            Some(ready) => ready,
            None => {
                let tmp = self.dir.join(format!("{}.tmp", segment_name(first)));
                let file = prepare(&tmp, wanted).map_err(io_err(&tmp))?;
                (tmp, wanted, file)
            }
        };
        std::fs::rename(&tmp, &path).map_err(io_err(&path))?;
        sync_dir(&self.dir)?;
        self.spare = Some(Spare::start(&self.dir, self.segment_bytes));
        self.segments.insert(
            first,
            Segment {
                path,
                file,
                end: 0,
                size,
            },
        );
        Ok(())
    }

    /// The payload of entry `index`, if the log holds it.
    pub fn read(&self, index: u64) -> Result<Option<Vec<u8>>, LogFileError> {
        if index < self.first {
            return Ok(None);
        }
        let Some(loc) = self.locs.get((index - self.first) as usize) else {
            return Ok(None);
        };
        let seg = self
            .segments
            .get(&loc.segment)
            .expect("every location names a kept segment");
        let mut buf = vec![0u8; HEADER + loc.len as usize];
        seg.file
            .read_exact_at(&mut buf, loc.offset)
            .map_err(io_err(&seg.path))?;
        let corrupt = |reason| LogFileError::Corrupt {
            path: seg.path.display().to_string(),
            index,
            reason,
        };
        let sum = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
        let stored = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"));
        if stored != index {
            return Err(corrupt("another entry's record"));
        }
        let payload = buf.split_off(HEADER);
        if crc(index, &payload) != sum {
            return Err(corrupt("checksum mismatch"));
        }
        Ok(Some(payload))
    }

    /// Removes entries from `index` on: zeroes their records, then removes the segments that
    /// held only such entries.
    pub fn truncate(&mut self, index: u64) -> Result<(), LogFileError> {
        let Some(last) = self.last_index() else {
            return Ok(());
        };
        if index > last {
            return Ok(());
        }
        let keep = index.saturating_sub(self.first) as usize;
        let Some(cut) = self.locs.get(keep).copied() else {
            return Ok(());
        };
        if let Some(seg) = self.segments.get_mut(&cut.segment) {
            zero(&seg.file, cut.offset, seg.end)
                .and_then(|()| seg.file.sync_data())
                .map_err(io_err(&seg.path))?;
            seg.end = cut.offset;
        }
        self.remove_segments(|first| first > cut.segment)?;
        self.locs.truncate(keep);
        Ok(())
    }

    /// Stops serving entries up to `index` inclusive and removes segments that hold nothing
    /// newer. Once nothing is left, every segment goes.
    pub fn purge(&mut self, index: u64) -> Result<(), LogFileError> {
        self.drop_through(index);
        match self.locs.front().map(|l| l.segment) {
            Some(oldest_kept) => self.remove_segments(|first| first < oldest_kept),
            None => self.remove_segments(|_| true),
        }
    }

    fn drop_through(&mut self, index: u64) {
        while !self.locs.is_empty() && self.first <= index {
            self.locs.pop_front();
            self.first += 1;
        }
    }

    fn remove_segments(&mut self, which: impl Fn(u64) -> bool) -> Result<(), LogFileError> {
        let doomed: Vec<u64> = self
            .segments
            .keys()
            .copied()
            .filter(|f| which(*f))
            .collect();
        if doomed.is_empty() {
            return Ok(());
        }
        for first in doomed {
            if let Some(seg) = self.segments.remove(&first) {
                std::fs::remove_file(&seg.path).map_err(io_err(&seg.path))?;
            }
        }
        sync_dir(&self.dir)
    }
}

/// Writes zeros over [from, to).
fn zero(file: &File, from: u64, to: u64) -> io::Result<()> {
    const CHUNK: usize = 64 * 1024;
    let zeros = [0u8; CHUNK];
    let mut at = from;
    while at < to {
        let n = ((to - at) as usize).min(CHUNK);
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Reserves `size` bytes and makes them the file's size, so appends inside never change it.
fn allocate(file: &File, size: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate on an open descriptor we own; no memory is passed.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size as libc::off_t) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EOPNOTSUPP) {
        // A filesystem without fallocate: a sized file still keeps appends from growing it.
        return file.set_len(size);
    }
    Err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: u64 = 4096;

    fn open(dir: &Path, purged: Option<u64>) -> LogFile {
        LogFile::open_with(dir, purged, SMALL).unwrap()
    }

    fn payload(i: u64) -> Vec<u8> {
        format!("entry-{i}-")
            .repeat((i % 7 + 1) as usize)
            .into_bytes()
    }

    fn append_range(log: &mut LogFile, from: u64, to: u64) {
        let payloads: Vec<(u64, Vec<u8>)> = (from..=to).map(|i| (i, payload(i))).collect();
        let records: Vec<(u64, &[u8])> = payloads.iter().map(|(i, p)| (*i, p.as_slice())).collect();
        log.append(&records).unwrap();
    }

    /// Appends in batches of ten, as openraft would, so small segments roll over.
    fn append_batches(log: &mut LogFile, from: u64, to: u64) {
        let mut start = from;
        while start <= to {
            append_range(log, start, (start + 9).min(to));
            start += 10;
        }
    }

    fn check(log: &LogFile, from: u64, to: u64) {
        assert_eq!(log.first_index(), Some(from));
        assert_eq!(log.last_index(), Some(to));
        for i in from..=to {
            assert_eq!(log.read(i).unwrap(), Some(payload(i)), "entry {i}");
        }
        assert_eq!(log.read(to + 1).unwrap(), None);
    }

    #[test]
    fn appends_span_segments_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), None);
        append_batches(&mut log, 1, 400);
        check(&log, 1, 400);
        assert!(log.segments.len() > 3, "small segments roll over");
        drop(log);
        let log = open(dir.path(), None);
        check(&log, 1, 400);
    }

    #[test]
    fn out_of_order_appends_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), None);
        append_range(&mut log, 5, 9);
        let p = payload(11);
        assert!(matches!(
            log.append(&[(11, p.as_slice())]),
            Err(LogFileError::OutOfOrder { index: 11, last: 9 })
        ));
        check(&log, 5, 9);
    }

    #[test]
    fn a_torn_tail_ends_the_log_and_later_segments_go() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), None);
        append_batches(&mut log, 1, 300);
        // Tear entry 150: flip a payload byte where it lies.
        let loc = log.locs[149];
        let path = log.segments[&loc.segment].path.clone();
        let segments_before = log.segments.len();
        drop(log);
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(b"X", loc.offset + HEADER as u64 + 1)
            .unwrap();
        let mut log = open(dir.path(), None);
        check(&log, 1, 149);
        assert!(log.segments.len() < segments_before);
        // Appends continue right after the end, and survive another reopen.
        append_range(&mut log, 150, 160);
        drop(log);
        let log = open(dir.path(), None);
        check(&log, 1, 160);
    }

    #[test]
    fn truncated_entries_never_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), None);
        append_batches(&mut log, 1, 300);
        log.truncate(120).unwrap();
        check(&log, 1, 119);
        drop(log);
        let mut log = open(dir.path(), None);
        check(&log, 1, 119);
        // New entries at the same indexes (another term's) replace them.
        append_range(&mut log, 120, 125);
        drop(log);
        let log = open(dir.path(), None);
        check(&log, 1, 125);
    }

    #[test]
    fn purge_removes_old_segments_and_a_jump_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), None);
        append_batches(&mut log, 1, 300);
        let before = log.segments.len();
        log.purge(200).unwrap();
        check(&log, 201, 300);
        assert!(log.segments.len() < before);
        drop(log);
        let log = open(dir.path(), Some(200));
        check(&log, 201, 300);
        // Everything purged (a snapshot installed), then the log resumes further on.
        let mut log = log;
        log.purge(1000).unwrap();
        assert_eq!(log.last_index(), None);
        append_range(&mut log, 1001, 1010);
        drop(log);
        let log = open(dir.path(), Some(1000));
        check(&log, 1001, 1010);
    }

    #[test]
    fn a_crash_while_creating_a_segment_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), None);
        append_range(&mut log, 1, 10);
        drop(log);
        std::fs::write(
            dir.path().join(format!("{}.tmp", segment_name(11))),
            b"junk",
        )
        .unwrap();
        let log = open(dir.path(), None);
        check(&log, 1, 10);
        assert!(!dir
            .path()
            .join(format!("{}.tmp", segment_name(11)))
            .exists());
    }

    /// Waits for the log's spare and hands it back ready, returning its file's inode.
    fn settle_spare(log: &mut LogFile) -> u64 {
        use std::os::unix::fs::MetadataExt;
        let (path, size, file) = log.spare.take().unwrap().finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, size);
        assert!(bytes.iter().all(|b| *b == 0), "a spare is zero-filled");
        let inode = file.metadata().unwrap().ino();
        log.spare = Some(Spare {
            path,
            size,
            ready: Some(std::thread::spawn(move || Ok(file))),
        });
        inode
    }

    #[test]
    fn the_next_segment_is_the_prepared_spare() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        // A stale spare from a crash is replaced, not used as it is.
        std::fs::write(dir.path().join(SPARE_NAME), b"junk").unwrap();
        let mut log = open(dir.path(), None);
        append_range(&mut log, 1, 5);
        let spare = settle_spare(&mut log);
        let segments_before = log.segments.len();
        let mut next = 6;
        while log.segments.len() == segments_before {
            append_range(&mut log, next, next + 4);
            next += 5;
        }
        let newest = log.segments.values().next_back().unwrap();
        assert_eq!(newest.file.metadata().unwrap().ino(), spare);
        // And another is on its way for the segment after.
        settle_spare(&mut log);
        drop(log);
        let log = open(dir.path(), None);
        check(&log, 1, next - 1);
    }

    #[test]
    fn an_entry_bigger_than_a_segment_gets_a_segment_of_its_own_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), None);
        append_range(&mut log, 1, 3);
        let big = vec![7u8; 3 * SMALL as usize];
        log.append(&[(4, big.as_slice())]).unwrap();
        append_range(&mut log, 5, 6);
        drop(log);
        let log = open(dir.path(), None);
        assert_eq!(log.read(4).unwrap(), Some(big));
        assert_eq!(log.read(6).unwrap(), Some(payload(6)));
        assert_eq!(log.last_index(), Some(6));
    }
}
