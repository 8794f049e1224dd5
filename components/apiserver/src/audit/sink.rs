//! The log backend (`--audit-log-path`): events go through a bounded channel to a writer thread,
//! so a request never waits for the disk. This is upstream's *batch* mode for the log backend
//! (`--audit-log-mode=batch`, buffer 10 000): when the buffer is full the event is dropped and
//! counted, never the request held. The file rotates by size and old backups are pruned by count
//! and age, as upstream's lumberjack does (`<name>-<UTC time>.<ext>` backups, 0600 files, size 0
//! meaning 100 MB).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;

/// Upstream's default batch buffer size.
pub const BUFFER: usize = 10_000;
/// lumberjack's size when none is given.
const DEFAULT_MAX_SIZE_MB: u64 = 100;
const BACKUP_TIME: &[time::format_description::FormatItem<'static>] = time::macros::format_description!(
    "[year]-[month]-[day]T[hour]-[minute]-[second].[subsecond digits:3]"
);

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("audit log {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
}

/// `--audit-log-maxsize` (MB), `--audit-log-maxbackup`, `--audit-log-maxage` (days).
#[derive(Debug, Clone, Copy, Default)]
pub struct Rotation {
    pub max_size_mb: u64,
    pub max_backups: usize,
    pub max_age_days: u64,
}

/// The sending half; cloning is not needed (one per server).
pub struct Sink {
    tx: mpsc::Sender<Vec<u8>>,
    dropped: AtomicU64,
}

impl Sink {
    /// Opens (creating) the log now, so a bad path stops the server at start.
    pub fn open(path: &str, rotation: Rotation) -> Result<Sink, SinkError> {
        let out: Box<dyn Output> = if path == "-" {
            Box::new(std::io::stdout())
        } else {
            Box::new(LogFile::open(Path::new(path), rotation).map_err(|source| {
                SinkError::Open {
                    path: path.to_string(),
                    source,
                }
            })?)
        };
        Ok(Sink::start(out, BUFFER))
    }

    fn start(mut out: Box<dyn Output>, buffer: usize) -> Sink {
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(buffer);
        let spawned = std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || {
                // Ends when the server (every sender) is gone, after writing what is queued.
                while let Some(line) = rx.blocking_recv() {
                    out.line(&line);
                    while let Ok(line) = rx.try_recv() {
                        out.line(&line);
                    }
                    out.flush_now();
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "starting the audit log writer failed");
        }
        Sink {
            tx,
            dropped: AtomicU64::new(0),
        }
    }

    /// Queues one event line (without its newline); never waits.
    pub fn send(&self, mut line: Vec<u8>) {
        line.push(b'\n');
        if self.tx.try_send(line).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::error!(dropped = n, "audit buffer queue blocked; events dropped");
            }
        }
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

trait Output: Send {
    fn line(&mut self, line: &[u8]);
    fn flush_now(&mut self);
}

impl Output for std::io::Stdout {
    fn line(&mut self, line: &[u8]) {
        let _ = self.lock().write_all(line);
    }
    fn flush_now(&mut self) {
        let _ = self.flush();
    }
}

/// A size-rotated log file.
pub struct LogFile {
    path: PathBuf,
    file: BufWriter<File>,
    size: u64,
    rotation: Rotation,
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

impl LogFile {
    pub fn open(path: &Path, rotation: Rotation) -> std::io::Result<LogFile> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(LogFile {
            path: path.to_path_buf(),
            file: BufWriter::new(file),
            size,
            rotation,
        })
    }

    fn max_size(&self) -> u64 {
        let mb = match self.rotation.max_size_mb {
            0 => DEFAULT_MAX_SIZE_MB,
            n => n,
        };
        mb * 1024 * 1024
    }

    pub fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 > self.max_size() {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    /// `<dir>/<stem>-<UTC time><ext>` of now, as lumberjack names backups.
    fn backup_name(&self, now: time::OffsetDateTime) -> PathBuf {
        let (stem, ext) = split_name(&self.path);
        let stamp = now.format(BACKUP_TIME).unwrap_or_default();
        self.path.with_file_name(format!("{stem}-{stamp}{ext}"))
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        let backup = self.backup_name(time::OffsetDateTime::now_utc());
        std::fs::rename(&self.path, &backup)?;
        self.file = BufWriter::new(open_append(&self.path)?);
        self.size = 0;
        self.prune();
        Ok(())
    }

    /// Removes backups beyond `max_backups` (newest kept) and older than `max_age_days`.
    fn prune(&self) {
        let (stem, ext) = split_name(&self.path);
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let prefix = format!("{stem}-");
        let mut backups: Vec<(time::PrimitiveDateTime, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let stamp = name.strip_prefix(&prefix)?.strip_suffix(ext.as_str())?;
                let t = time::PrimitiveDateTime::parse(stamp, BACKUP_TIME).ok()?;
                Some((t, e.path()))
            })
            .collect();
        backups.sort_by_key(|b| std::cmp::Reverse(b.0));
        let cutoff = (self.rotation.max_age_days > 0).then(|| {
            let age = Duration::from_secs(self.rotation.max_age_days * 24 * 3600);
            time::OffsetDateTime::from(SystemTime::now() - age)
        });
        for (i, (t, path)) in backups.iter().enumerate() {
            let too_many = self.rotation.max_backups > 0 && i >= self.rotation.max_backups;
            let too_old = cutoff.is_some_and(|c| t.assume_utc() < c);
            if too_many || too_old {
                if let Err(e) = std::fs::remove_file(path) {
                    tracing::warn!(path = %path.display(), error = %e, "removing an old audit log failed");
                }
            }
        }
    }
}

fn split_name(path: &Path) -> (String, String) {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.rfind('.') {
        Some(i) if i > 0 => (name[..i].to_string(), name[i..].to_string()),
        _ => (name, String::new()),
    }
}

impl Output for LogFile {
    fn line(&mut self, line: &[u8]) {
        if let Err(e) = self.write_line(line) {
            tracing::error!(path = %self.path.display(), error = %e, "writing the audit log failed");
        }
    }
    fn flush_now(&mut self) {
        let _ = self.file.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_by_size_and_prunes_by_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut log = LogFile::open(
            &path,
            Rotation {
                max_size_mb: 1,
                max_backups: 2,
                max_age_days: 0,
            },
        )
        .unwrap();
        let line = vec![b'x'; 400 * 1024];
        for _ in 0..12 {
            log.write_line(&line).unwrap();
            // Distinct backup names (millisecond stamps).
            std::thread::sleep(Duration::from_millis(3));
        }
        log.flush_now();
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(names.contains(&"audit.log".to_string()));
        for n in names.iter().filter(|n| *n != "audit.log") {
            assert!(n.starts_with("audit-") && n.ends_with(".log"), "{n}");
            // Each file stays within the limit.
            let len = std::fs::metadata(dir.path().join(n)).unwrap().len();
            assert!(len <= 1024 * 1024, "{n}: {len}");
        }
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn prunes_backups_older_than_max_age() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let old = dir.path().join("audit-2000-01-01T00-00-00.000.log");
        std::fs::write(&old, "old\n").unwrap();
        let unrelated = dir.path().join("other-2000-01-01T00-00-00.000.log");
        std::fs::write(&unrelated, "x\n").unwrap();
        let mut log = LogFile::open(
            &path,
            Rotation {
                max_size_mb: 1,
                max_backups: 0,
                max_age_days: 30,
            },
        )
        .unwrap();
        log.write_line(&vec![b'x'; 1024 * 1024]).unwrap();
        log.write_line(b"next\n").unwrap();
        assert!(!old.exists());
        assert!(unrelated.exists());
    }

    #[test]
    fn a_full_buffer_drops_instead_of_blocking() {
        struct Stuck(std::sync::mpsc::Receiver<()>);
        impl Output for Stuck {
            fn line(&mut self, _: &[u8]) {
                let _ = self.0.recv();
            }
            fn flush_now(&mut self) {}
        }
        let (release, wait) = std::sync::mpsc::channel();
        let sink = Sink::start(Box::new(Stuck(wait)), 2);
        // The writer is stuck until `release` goes: were `send` to wait for room, this loop would
        // never end; it ends, having dropped what did not fit.
        for _ in 0..10 {
            sink.send(b"{}".to_vec());
        }
        assert!(sink.dropped() >= 7, "dropped {}", sink.dropped());
        drop(release);
    }
}
