//! Writes a volume's files so a reader never sees a half-updated set: the files go into a fresh
//! timestamped directory `..<time>`, the `..data` symlink is pointed at it by `rename` (atomic), and each
//! top-level entry is a symlink `name -> ..data/name`. A reader holding an old path keeps the old contents
//! until it re-opens. An unchanged payload touches nothing (the periodic resync calls this often).

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

const DATA: &str = "..data";
const DATA_TMP: &str = "..data_tmp";

#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    #[error("invalid path {path:?} in volume payload: {why}")]
    InvalidPath { path: String, why: &'static str },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> WriterError + 'a {
    move |source| WriterError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// One file of a volume: contents and permission bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSpec {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// Relative path → file.
pub type Files = BTreeMap<String, FileSpec>;

/// A payload path must be relative, without `..`, and must not start with `..` (reserved for the
/// writer's own entries).
pub fn validate_path(path: &str) -> Result<(), WriterError> {
    let bad = |why| {
        Err(WriterError::InvalidPath {
            path: path.into(),
            why,
        })
    };
    if path.is_empty() {
        return bad("empty");
    }
    if path.starts_with("..") {
        return bad("must not start with '..'");
    }
    for c in Path::new(path).components() {
        match c {
            Component::Normal(_) => {}
            Component::ParentDir => return bad("must not contain '..'"),
            _ => return bad("must be a relative path"),
        }
    }
    Ok(())
}

fn first_component(path: &str) -> String {
    path.split('/')
        .find(|s| !s.is_empty())
        .unwrap_or(path)
        .to_string()
}

fn validate(files: &Files) -> Result<(), WriterError> {
    for p in files.keys() {
        validate_path(p)?;
        // A file cannot also be a directory of another file.
        let dir = format!("{}/", p.trim_end_matches('/'));
        if files.keys().any(|q| q.starts_with(&dir)) {
            return Err(WriterError::InvalidPath {
                path: p.clone(),
                why: "is both a file and a directory",
            });
        }
    }
    Ok(())
}

/// The files under `dir`, relative paths, with contents and modes.
fn read_tree(dir: &Path) -> Result<Files, WriterError> {
    let mut out = Files::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let here = dir.join(&rel);
        for entry in std::fs::read_dir(&here).map_err(io("reading", &here))? {
            let entry = entry.map_err(io("reading", &here))?;
            let rel = rel.join(entry.file_name());
            let path = dir.join(&rel);
            let meta = std::fs::symlink_metadata(&path).map_err(io("reading", &path))?;
            if meta.is_dir() {
                stack.push(rel);
            } else {
                let data = std::fs::read(&path).map_err(io("reading", &path))?;
                out.insert(
                    rel.to_string_lossy().into_owned(),
                    FileSpec {
                        data,
                        mode: meta.permissions().mode() & 0o7777,
                    },
                );
            }
        }
    }
    Ok(out)
}

fn timestamped_name() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "..{:04}_{:02}_{:02}_{:02}_{:02}_{:02}.{:09}",
        now.year(),
        now.month() as u8,
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.nanosecond()
    )
}

/// The directory `..data` points at, if any.
fn current(dir: &Path) -> Option<String> {
    std::fs::read_link(dir.join(DATA))
        .ok()
        .map(|t| t.to_string_lossy().into_owned())
}

/// Top-level user-visible entries: everything not starting with `..`.
fn visible(dir: &Path) -> Result<BTreeSet<String>, WriterError> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(dir).map_err(io("reading", dir))? {
        let e = e.map_err(io("reading", dir))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") {
            out.insert(name);
        }
    }
    Ok(out)
}

fn link_target(name: &str) -> PathBuf {
    Path::new(DATA).join(name)
}

/// Makes `dir` hold exactly `files`. Returns whether anything changed.
pub fn write(dir: &Path, files: &Files) -> Result<bool, WriterError> {
    write_owned(dir, files, None)
}

/// [`write`], and with a pod's `fsGroup` the volume is given to that group before the new payload
/// goes live (upstream's setPerms step, [`set_volume_ownership`] for a read-only volume): every
/// file gains group read (so a file's mode here is its payload mode | 0440), directories group
/// read/search and setgid.
pub fn write_owned(dir: &Path, files: &Files, fs_group: Option<u32>) -> Result<bool, WriterError> {
    validate(files)?;
    let owned: Files;
    let files = match fs_group {
        None => files,
        Some(_) => {
            owned = files
                .iter()
                .map(|(p, f)| {
                    let mode = f.mode | RO_MASK;
                    (p.clone(), FileSpec { mode, ..f.clone() })
                })
                .collect();
            &owned
        }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(io("creating", dir))?;
    let wanted_visible: BTreeSet<String> = files.keys().map(|p| first_component(p)).collect();
    let old = current(dir);
    if let Some(old) = &old {
        let same_files = read_tree(&dir.join(old)).is_ok_and(|t| t == *files);
        let links_ok = visible(dir)? == wanted_visible
            && wanted_visible
                .iter()
                .all(|n| std::fs::read_link(dir.join(n)).is_ok_and(|t| t == link_target(n)));
        if same_files && links_ok {
            return Ok(false);
        }
    }

    let ts = timestamped_name();
    let ts_dir = dir.join(&ts);
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&ts_dir)
        .map_err(io("creating", &ts_dir))?;
    for (rel, f) in files {
        let path = ts_dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(io("creating", parent))?;
        }
        std::fs::write(&path, &f.data).map_err(io("writing", &path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode))
            .map_err(io("chmod", &path))?;
    }

    if let Some(group) = fs_group {
        set_volume_ownership(dir, group, true)?;
    }

    // Swap ..data: a fresh symlink renamed over the old one.
    let tmp = dir.join(DATA_TMP);
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io("removing", &tmp)(e)),
    }
    std::os::unix::fs::symlink(&ts, &tmp).map_err(io("linking", &tmp))?;
    let data = dir.join(DATA);
    std::fs::rename(&tmp, &data).map_err(io("renaming", &data))?;

    // User-visible links for new names; stale ones go.
    for name in &wanted_visible {
        let link = dir.join(name);
        match std::fs::symlink_metadata(&link) {
            Ok(m) if m.file_type().is_symlink() => {
                if std::fs::read_link(&link).ok() != Some(link_target(name)) {
                    std::fs::remove_file(&link).map_err(io("removing", &link))?;
                    std::os::unix::fs::symlink(link_target(name), &link)
                        .map_err(io("linking", &link))?;
                }
            }
            Ok(_) => {
                return Err(WriterError::InvalidPath {
                    path: name.clone(),
                    why: "exists in the volume and is not the writer's link",
                })
            }
            Err(_) => std::os::unix::fs::symlink(link_target(name), &link)
                .map_err(io("linking", &link))?,
        }
    }
    for name in visible(dir)?.difference(&wanted_visible) {
        let link = dir.join(name);
        let ours = std::fs::read_link(&link).is_ok_and(|t| t.starts_with(DATA));
        if ours {
            std::fs::remove_file(&link).map_err(io("removing", &link))?;
        }
    }
    if let Some(old) = old.filter(|o| *o != ts && o.starts_with("..")) {
        let old_dir = dir.join(old);
        if let Err(e) = std::fs::remove_dir_all(&old_dir) {
            tracing::warn!(path = %old_dir.display(), error = %e, "removing the previous volume payload");
        }
    }
    Ok(true)
}

/// What a pod's fsGroup adds to a writable volume's files (upstream's rwMask) …
pub const RW_MASK: u32 = 0o660;
/// … to a read-only one's (configMap, secret, projected, downwardAPI: upstream's roMask) …
pub const RO_MASK: u32 = 0o440;
/// … and, with setgid, to every directory (execMask).
const EXEC_MASK: u32 = 0o110;
const SETGID: u32 = 0o2000;

/// Upstream's SetVolumeOwnership (pkg/volume/volume_linux.go): everything under `dir` (itself included,
/// symlinks not followed) is given to group `fs_group`; files gain [`RO_MASK`] (`read_only`) or
/// [`RW_MASK`], directories that and group search and setgid, so what containers create later inherits
/// the group. Symlinks are re-grouped but not chmod-ed (a chmod would reach their target).
pub fn set_volume_ownership(dir: &Path, fs_group: u32, read_only: bool) -> Result<(), WriterError> {
    let mask = if read_only { RO_MASK } else { RW_MASK };
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).map_err(io("reading", &path))?;
        std::os::unix::fs::lchown(&path, None, Some(fs_group)).map_err(io("chown", &path))?;
        if meta.file_type().is_symlink() {
            continue;
        }
        let mut add = mask;
        if meta.is_dir() {
            add |= SETGID | EXEC_MASK;
            for e in std::fs::read_dir(&path).map_err(io("reading", &path))? {
                stack.push(e.map_err(io("reading", &path))?.path());
            }
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode | add != mode {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode | add))
                .map_err(io("chmod", &path))?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "atomic_writer_tests.rs"]
mod tests;
