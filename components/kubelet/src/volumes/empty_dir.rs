//! emptyDir: a directory that lives as long as the pod. Medium "" is a plain directory under the pod's
//! volume dir; medium "Memory" is a tmpfs mounted there (unmounted on tear-down). Secret and projected
//! volumes use the same tmpfs when the kubelet runs them in memory (so secrets never reach the disk).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use super::VolumeError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    Disk,
    Memory,
}

impl Medium {
    pub fn parse(medium: Option<&str>) -> Result<Self, String> {
        match medium.unwrap_or_default() {
            "" => Ok(Medium::Disk),
            "Memory" => Ok(Medium::Memory),
            other => Err(format!("emptyDir medium {other:?} is not supported")),
        }
    }
}

/// True when `path` is the root of a mount (its device differs from its parent's).
pub fn is_mount_point(path: &Path) -> bool {
    let (Ok(me), Some(Ok(parent))) = (
        std::fs::metadata(path),
        path.parent().map(std::fs::metadata),
    ) else {
        return false;
    };
    me.dev() != parent.dev()
}

/// Creates the directory (world-writable like upstream's, so any container user can write) and, for
/// Memory, mounts a tmpfs on it.
pub fn set_up(dir: &Path, medium: Medium) -> Result<(), VolumeError> {
    set_up_with_mode(dir, medium, 0o777)
}

/// `set_up` with the directory's mode (secret volumes in memory are not world-writable).
pub fn set_up_with_mode(dir: &Path, medium: Medium, mode: u32) -> Result<(), VolumeError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .map_err(|e| VolumeError::io("creating", dir, e))?;
    if medium == Medium::Memory && !is_mount_point(dir) {
        mount(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(format!("mode={mode:o}").as_str()),
        )
        .map_err(|e| VolumeError::io("mounting tmpfs on", dir, e.into()))?;
    }
    // The umask may have narrowed the mode.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(|e| VolumeError::io("chmod", dir, e))?;
    Ok(())
}

/// Unmounts `dir` (lazily: a process still holding a file keeps its view until it lets go).
pub fn unmount(dir: &Path) -> Result<(), VolumeError> {
    umount2(dir, MntFlags::MNT_DETACH).map_err(|e| VolumeError::io("unmounting", dir, e.into()))
}
