//! `securityContext.fsGroupChangePolicy` (upstream's SetVolumeOwnership with a change policy,
//! pkg/volume/volume_linux.go): `Always` (the default) walks the whole volume on every mount;
//! `OnRootMismatch` skips the walk when the volume's root directory already has the group, the
//! permission bits and the setgid bit the walk would give it — what makes large persistent volumes
//! mount quickly. Applies to emptyDir and `local` persistent volumes (hostPath ones are not the
//! kubelet's to change, as upstream).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::atomic_writer::{set_volume_ownership, WriterError, RO_MASK, RW_MASK};

/// The pod's `spec.securityContext.fsGroupChangePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChangePolicy {
    #[default]
    Always,
    OnRootMismatch,
}

impl ChangePolicy {
    /// The field's value; anything else (the API refuses other values) is upstream's default.
    pub fn parse(value: Option<&str>) -> Self {
        match value {
            Some("OnRootMismatch") => ChangePolicy::OnRootMismatch,
            _ => ChangePolicy::Always,
        }
    }
}

/// Gives the volume at `dir` to `fs_group` unless the policy says its root already matches.
/// Returns whether the volume was walked.
pub fn apply(
    dir: &Path,
    fs_group: u32,
    read_only: bool,
    policy: ChangePolicy,
) -> Result<bool, WriterError> {
    if policy == ChangePolicy::OnRootMismatch && !requires_change(dir, fs_group, read_only) {
        tracing::debug!(dir = %dir.display(), fs_group, "volume root already matches: ownership left as is");
        return Ok(false);
    }
    set_volume_ownership(dir, fs_group, read_only)?;
    Ok(true)
}

/// Upstream's requiresPermissionChange: the root is not a directory, has another group, lacks a
/// permission bit of the mask (with group search), or lacks setgid.
fn requires_change(dir: &Path, fs_group: u32, read_only: bool) -> bool {
    let Ok(meta) = std::fs::metadata(dir) else {
        return true;
    };
    if meta.gid() != fs_group || !meta.is_dir() {
        return true;
    }
    let want = if read_only { RO_MASK } else { RW_MASK } | 0o110;
    let mode = meta.permissions().mode();
    mode & want != want || mode & 0o2000 == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group() -> u32 {
        if nix::unistd::geteuid().is_root() {
            4321
        } else {
            nix::unistd::getegid().as_raw()
        }
    }

    #[test]
    fn on_root_mismatch_walks_only_when_the_root_differs() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("vol");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("data"), "x").unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let g = group();
        // A fresh volume: the root lacks group write and setgid, so even OnRootMismatch walks it.
        assert!(apply(&dir, g, false, ChangePolicy::OnRootMismatch).unwrap());
        let file_mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(file_mode(&dir) & 0o2770, 0o2770);
        assert_eq!(std::fs::metadata(dir.join("data")).unwrap().gid(), g);
        // A file the workload made private afterwards: OnRootMismatch leaves it, Always fixes it.
        std::fs::set_permissions(dir.join("data"), std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(!apply(&dir, g, false, ChangePolicy::OnRootMismatch).unwrap());
        assert_eq!(file_mode(&dir.join("data")), 0o600);
        assert!(apply(&dir, g, false, ChangePolicy::Always).unwrap());
        assert_eq!(file_mode(&dir.join("data")), 0o660);
    }

    #[test]
    fn a_root_without_setgid_or_group_bits_is_a_mismatch() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let g = group();
        set_volume_ownership(dir, g, false).unwrap();
        assert!(!requires_change(dir, g, false));
        // Read-only volumes need only group read and search.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o2550)).unwrap();
        assert!(requires_change(dir, g, false));
        assert!(!requires_change(dir, g, true));
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o770)).unwrap();
        assert!(requires_change(dir, g, false));
        assert!(requires_change(&dir.join("missing"), g, false));
        assert_eq!(
            ChangePolicy::parse(Some("OnRootMismatch")),
            ChangePolicy::OnRootMismatch
        );
        assert_eq!(ChangePolicy::parse(None), ChangePolicy::Always);
    }
}
