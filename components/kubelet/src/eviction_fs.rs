//! The node's disks as the eviction manager measures them: statvfs of the kubelet's root dir (nodefs) and
//! of containerd's root (imagefs), and each pod's usage by walking its directories like `du` (allocated
//! blocks, each inode once, not crossing into other filesystems such as memory-backed volumes). A
//! container's writable layer is the upper dir of its rootfs overlay, found in /proc/self/mountinfo.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

use super::rank::{ContainerUsage, PodUsage};
use super::{Disk, EvictionError, FsStats};
use crate::runtime::PodStatus;

pub fn statvfs(path: &Path) -> Result<FsStats, EvictionError> {
    let err = |source: std::io::Error| EvictionError::Statvfs {
        path: path.display().to_string(),
        source,
    };
    let v = nix::sys::statvfs::statvfs(path).map_err(|e| err(e.into()))?;
    let device = std::fs::metadata(path).map_err(err)?.dev();
    let frsize = v.fragment_size() as u64;
    Ok(FsStats {
        capacity: v.blocks() as u64 * frsize,
        // Blocks available to unprivileged users, as cAdvisor reports "available".
        available: v.blocks_available() as u64 * frsize,
        device,
    })
}

/// Bytes allocated under `root` on the filesystem `device` (None: root's own), each inode counted once.
/// Files that vanish during the walk are skipped.
pub fn dir_usage(root: &Path, device: Option<u64>) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(root) else {
        return 0;
    };
    let device = device.unwrap_or(meta.dev());
    if meta.dev() != device {
        return 0;
    }
    let mut seen = HashSet::new();
    let mut total = 0u64;
    let mut stack = vec![(root.to_path_buf(), meta)];
    while let Some((path, meta)) = stack.pop() {
        if meta.nlink() > 1 && !meta.is_dir() && !seen.insert(meta.ino()) {
            continue;
        }
        total += meta.blocks() * 512;
        if !meta.is_dir() {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if let Ok(m) = std::fs::symlink_metadata(&p) {
                if m.dev() == device {
                    stack.push((p, m));
                }
            }
        }
    }
    total
}

/// Container id -> upper dir of its rootfs overlay, from mountinfo text. containerd mounts a task's
/// rootfs at `.../io.containerd.runtime.v2.task/<namespace>/<id>/rootfs`.
pub fn writable_layers(mountinfo: &str) -> HashMap<String, PathBuf> {
    let mut out = HashMap::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mount_point) = left.split(' ').nth(4) else {
            continue;
        };
        let mut r = right.split(' ');
        let (Some("overlay"), Some(_source), Some(options)) = (r.next(), r.next(), r.next()) else {
            continue;
        };
        let Some(dir) = mount_point.strip_suffix("/rootfs") else {
            continue;
        };
        if !dir.contains("io.containerd.runtime.v2.task/") {
            continue;
        }
        let Some(id) = dir.rsplit('/').next().filter(|s| !s.is_empty()) else {
            continue;
        };
        if let Some(upper) = options.split(',').find_map(|o| o.strip_prefix("upperdir=")) {
            out.insert(id.to_string(), PathBuf::from(upper));
        }
    }
    out
}

/// The real disks: the kubelet's root dir, containerd's root, the pods' dirs and logs.
pub struct HostDisk {
    pub pods_root: PathBuf,
    pub log_root: PathBuf,
}

impl Disk for HostDisk {
    fn fs_stats(&self, path: &Path) -> Result<FsStats, EvictionError> {
        statvfs(path)
    }

    fn pod_usage(&self, pod: &Pod, status: &PodStatus) -> PodUsage {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let pod_dir = crate::volumes::pod_dir(&self.pods_root, uid);
        let volumes = dir_usage(&pod_dir, None);
        let layers = std::fs::read_to_string("/proc/self/mountinfo")
            .map(|m| writable_layers(&m))
            .unwrap_or_default();
        let log_dir = crate::logs::pod_log_dir(&self.log_root, ns, name, uid);
        let containers = status
            .containers
            .iter()
            .map(|c| {
                let id = c.container_id.rsplit("://").next().unwrap_or_default();
                ContainerUsage {
                    name: c.name.clone(),
                    rootfs: layers.get(id).map(|d| dir_usage(d, None)).unwrap_or(0),
                    logs: dir_usage(&log_dir.join(&c.name), None),
                    memory: 0,
                }
            })
            .collect();
        PodUsage {
            volumes,
            containers,
            ..Default::default()
        }
    }
}
