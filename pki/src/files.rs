//! Writing PKI files atomically (temp file in the same directory, fsync, rename) with the right mode,
//! so a crash never leaves a half-written key or a key that was briefly world-readable.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("creating directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Mode of private keys and kubeconfigs (which embed keys).
pub const SECRET_MODE: u32 = 0o600;
/// Mode of certificates and public keys.
pub const PUBLIC_MODE: u32 = 0o644;

/// Writes `contents` to `path` atomically with `mode`, creating parent directories.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<(), FileError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|source| FileError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{}.tmp-{}", file_name, std::process::id()));
    let err = |source| FileError::Write {
        path: path.to_path_buf(),
        source,
    };
    let result = (|| {
        // The mode is set at creation, so the key is never readable by others, not even briefly.
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        // An existing temp file keeps its old mode; force it.
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.write_all(contents)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(err)
}

pub fn read_string(path: &Path) -> Result<String, FileError> {
    fs::read_to_string(path).map_err(|source| FileError::Read {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_with_mode_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b/key");
        write_atomic(&p, b"one", SECRET_MODE).unwrap();
        write_atomic(&p, b"two", SECRET_MODE).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // No temp file is left behind.
        assert_eq!(fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
    }
}
