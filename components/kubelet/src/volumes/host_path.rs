//! hostPath: a path of the node, mounted as is after the `type` check upstream makes (DirectoryOrCreate
//! and FileOrCreate create it; the others only check what is there).

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

use super::VolumeError;

/// Checks (and for the *OrCreate types, makes) the host path for its declared type.
pub fn check(path: &Path, type_: Option<&str>) -> Result<(), VolumeError> {
    let failed = |what: &str| VolumeError::HostPathType {
        path: path.display().to_string(),
        message: what.to_string(),
    };
    if !path.is_absolute() {
        return Err(failed("is not an absolute path"));
    }
    let meta = std::fs::metadata(path);
    match type_.unwrap_or_default() {
        "" => Ok(()),
        "DirectoryOrCreate" => match meta {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(failed("is not a directory")),
            Err(_) => std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(path)
                .map_err(|e| VolumeError::io("creating", path, e)),
        },
        "Directory" => match meta {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(failed("is not a directory")),
            Err(_) => Err(failed("does not exist")),
        },
        "FileOrCreate" => match meta {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => Err(failed("is not a file")),
            // Upstream does not create the parent directory either.
            Err(_) => std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(path)
                .map(|_| ())
                .map_err(|e| VolumeError::io("creating", path, e)),
        },
        "File" => match meta {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => Err(failed("is not a file")),
            Err(_) => Err(failed("does not exist")),
        },
        "Socket" => match meta {
            Ok(m) if m.file_type().is_socket() => Ok(()),
            _ => Err(failed("is not a socket file")),
        },
        "CharDevice" => match meta {
            Ok(m) if m.file_type().is_char_device() => Ok(()),
            _ => Err(failed("is not a character device")),
        },
        "BlockDevice" => match meta {
            Ok(m) if m.file_type().is_block_device() => Ok(()),
            _ => Err(failed("is not a block device")),
        },
        other => Err(failed(&format!("has unknown hostPath type {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_checked_and_or_create_creates() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("d");
        let f = tmp.path().join("f");
        assert!(check(&d, Some("Directory"))
            .unwrap_err()
            .to_string()
            .contains("does not exist"));
        check(&d, Some("DirectoryOrCreate")).unwrap();
        assert!(d.is_dir());
        check(&d, Some("Directory")).unwrap();
        assert!(check(&d, Some("File"))
            .unwrap_err()
            .to_string()
            .contains("is not a file"));
        check(&f, Some("FileOrCreate")).unwrap();
        assert!(f.is_file());
        check(&f, Some("File")).unwrap();
        assert!(check(&f, Some("DirectoryOrCreate")).is_err());
        check(&tmp.path().join("anything"), None).unwrap();
        check(&tmp.path().join("anything"), Some("")).unwrap();
        assert!(check(Path::new("relative"), None).is_err());
        assert!(check(&f, Some("Socket")).is_err());
    }
}
