//! The cgroups the kubelet itself makes and limits — `kubepods`, its QoS tiers and each pod's
//! ([`crate::qos_cgroups`] says which and with what) — behind a narrow trait, so the workers are
//! tested with [`Recording`]. [`HostCgroups`] writes them through the cgroup filesystem the way runc's
//! cgroupfs driver (containerd's, and so the containers' below them) lays them out: on a cgroup v1
//! host one directory per hierarchy (`/sys/fs/cgroup/memory/kubepods/...`), on a v2 (unified) host one
//! tree, with the controllers enabled down to it.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::qos_cgroups::{CgroupResources, CPU_PERIOD};

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("creating cgroup {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: std::io::Error,
    },
    #[error("removing cgroup {path}: {source}")]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Makes, limits and removes cgroups named like CRI's `cgroup_parent` (`/kubepods/burstable/pod<uid>`).
pub trait Cgroups: Send + Sync + std::fmt::Debug {
    /// Creates the cgroup (and its parents) if missing and sets its limits (unset ones to unlimited).
    fn ensure(&self, path: &str, resources: &CgroupResources) -> Result<(), CgroupError>;
    /// Removes the cgroup and the empty cgroups left below it (a gone cgroup is not an error).
    fn remove(&self, path: &str) -> Result<(), CgroupError>;
    /// The names of the cgroup's child cgroups.
    fn children(&self, path: &str) -> Vec<String>;
}

const ROOT: &str = "/sys/fs/cgroup";
/// The v1 hierarchies whose files the kubelet writes; containerd's runc makes the others.
const V1_LIMITED: &[&str] = &["cpu", "memory", "pids"];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Layout {
    /// Mount point of each v1 hierarchy, with the controllers it holds.
    V1(Vec<(PathBuf, Vec<String>)>),
    /// The unified tree's mount point.
    V2(PathBuf),
}

/// The host's cgroup filesystem.
#[derive(Debug)]
pub struct HostCgroups {
    layout: Layout,
}

impl HostCgroups {
    /// Reads how the host mounts its cgroups (v2 when the root is the unified tree).
    pub fn detect() -> HostCgroups {
        HostCgroups::under(Path::new(ROOT))
    }

    fn under(root: &Path) -> HostCgroups {
        if root.join("cgroup.controllers").exists() {
            return HostCgroups {
                layout: Layout::V2(root.to_path_buf()),
            };
        }
        let mut hierarchies = Vec::new();
        for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
            let path = entry.path();
            // cpu -> cpu,cpuacct style links name a hierarchy already listed.
            let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
            if is_link || !path.join("cgroup.procs").exists() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let controllers = name
                .trim_start_matches("name=")
                .split(',')
                .map(str::to_string)
                .collect();
            hierarchies.push((path, controllers));
        }
        hierarchies.sort();
        HostCgroups {
            layout: Layout::V1(hierarchies),
        }
    }

    /// Every directory `path` has in the host's hierarchies.
    fn dirs(&self, path: &str) -> Vec<PathBuf> {
        let rel = path.trim_start_matches('/');
        match &self.layout {
            Layout::V2(root) => vec![root.join(rel)],
            Layout::V1(h) => h.iter().map(|(m, _)| m.join(rel)).collect(),
        }
    }

    fn v1_mount(&self, controller: &str) -> Option<&Path> {
        match &self.layout {
            Layout::V1(h) => h
                .iter()
                .find(|(_, c)| c.iter().any(|c| c == controller))
                .map(|(m, _)| m.as_path()),
            Layout::V2(_) => None,
        }
    }
}

fn write(path: PathBuf, value: String) -> Result<(), CgroupError> {
    std::fs::write(&path, &value).map_err(|source| CgroupError::Write {
        path,
        value,
        source,
    })
}

fn create(path: &Path) -> Result<(), CgroupError> {
    std::fs::create_dir_all(path).map_err(|source| CgroupError::Create {
        path: path.to_path_buf(),
        source,
    })
}

/// upstream's CpuSharesToCpuWeight (cgroup v2's cpu.weight from v1 shares).
fn weight(shares: u64) -> u64 {
    1 + (shares.saturating_sub(2) * 9999) / 262_142
}

/// The v1 files and values `r` sets, per controller. Period before quota: the kernel checks a quota
/// against the period in force.
fn v1_files(r: &CgroupResources) -> Vec<(&'static str, &'static str, String)> {
    let mut out = Vec::new();
    if let Some(s) = r.cpu_shares {
        out.push(("cpu", "cpu.shares", s.to_string()));
    }
    out.push(("cpu", "cpu.cfs_period_us", CPU_PERIOD.to_string()));
    out.push((
        "cpu",
        "cpu.cfs_quota_us",
        r.cpu_quota.unwrap_or(-1).to_string(),
    ));
    out.push((
        "memory",
        "memory.limit_in_bytes",
        r.memory_limit.unwrap_or(-1).to_string(),
    ));
    out.push((
        "pids",
        "pids.max",
        r.pids_limit.map_or("max".into(), |p| p.to_string()),
    ));
    out
}

fn v2_files(r: &CgroupResources) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(s) = r.cpu_shares {
        out.push(("cpu.weight", weight(s).to_string()));
    }
    let quota = r.cpu_quota.map_or("max".into(), |q| q.to_string());
    out.push(("cpu.max", format!("{quota} {CPU_PERIOD}")));
    out.push((
        "memory.max",
        r.memory_limit.map_or("max".into(), |m| m.to_string()),
    ));
    out.push((
        "pids.max",
        r.pids_limit.map_or("max".into(), |p| p.to_string()),
    ));
    out
}

/// Removes `dir` and the (empty) cgroups below it, deepest first; rmdir of a cgroup with processes
/// fails with EBUSY, which is reported.
fn remove_tree(dir: &Path) -> Result<(), CgroupError> {
    let children = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(CgroupError::Remove {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    for entry in children.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path())?;
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(source) => Err(CgroupError::Remove {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

impl Cgroups for HostCgroups {
    fn ensure(&self, path: &str, r: &CgroupResources) -> Result<(), CgroupError> {
        let rel = path.trim_start_matches('/');
        match &self.layout {
            Layout::V2(root) => {
                // A v2 cgroup has only the controllers its parent delegates: enable them on the way.
                let mut dir = root.clone();
                for part in rel.split('/').filter(|p| !p.is_empty()) {
                    for c in ["+cpu", "+memory", "+pids"] {
                        // One at a time: a controller the host lacks must not block the others.
                        let _ = std::fs::write(dir.join("cgroup.subtree_control"), c);
                    }
                    dir = dir.join(part);
                    create(&dir)?;
                }
                for (file, value) in v2_files(r) {
                    write(dir.join(file), value)?;
                }
            }
            Layout::V1(_) => {
                for dir in self.dirs(path) {
                    create(&dir)?;
                }
                for (controller, file, value) in v1_files(r) {
                    if !V1_LIMITED.contains(&controller) {
                        continue;
                    }
                    if let Some(mount) = self.v1_mount(controller) {
                        write(mount.join(rel).join(file), value)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn remove(&self, path: &str) -> Result<(), CgroupError> {
        let mut first = None;
        for dir in self.dirs(path) {
            if let Err(e) = remove_tree(&dir) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn children(&self, path: &str) -> Vec<String> {
        let Some(dir) = self.dirs(path).into_iter().next() else {
            return Vec::new();
        };
        let mut out: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        out.sort();
        out
    }
}

/// What a [`Recording`] double was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Ensure(String, CgroupResources),
    Remove(String),
}

/// A test double that records calls and keeps the set of cgroups it was asked to make.
#[derive(Debug, Default)]
pub struct Recording {
    pub ops: Mutex<Vec<Op>>,
}

impl Recording {
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap().clone()
    }
}

impl Cgroups for Recording {
    fn ensure(&self, path: &str, r: &CgroupResources) -> Result<(), CgroupError> {
        self.ops
            .lock()
            .unwrap()
            .push(Op::Ensure(path.to_string(), r.clone()));
        Ok(())
    }

    fn remove(&self, path: &str) -> Result<(), CgroupError> {
        self.ops.lock().unwrap().push(Op::Remove(path.to_string()));
        Ok(())
    }

    fn children(&self, path: &str) -> Vec<String> {
        let prefix = format!("{}/", path.trim_end_matches('/'));
        let mut live: Vec<String> = Vec::new();
        for op in self.ops.lock().unwrap().iter() {
            match op {
                Op::Ensure(p, _) => {
                    if let Some(rest) = p.strip_prefix(&prefix) {
                        let name = rest.split('/').next().unwrap_or_default().to_string();
                        if !live.contains(&name) {
                            live.push(name);
                        }
                    }
                }
                Op::Remove(p) => {
                    if let Some(rest) = p.strip_prefix(&prefix) {
                        live.retain(|n| n != rest);
                    }
                }
            }
        }
        live.sort();
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v1-shaped tree in a temp dir (plain directories and files stand in for cgroupfs).
    fn v1_root() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for h in ["cpu", "memory", "pids", "freezer"] {
            std::fs::create_dir_all(d.path().join(h)).unwrap();
            std::fs::write(d.path().join(h).join("cgroup.procs"), "").unwrap();
        }
        d
    }

    #[test]
    fn v1_limits_go_to_their_hierarchies() {
        let root = v1_root();
        let cg = HostCgroups::under(root.path());
        let r = CgroupResources {
            cpu_shares: Some(512),
            cpu_quota: Some(50_000),
            memory_limit: Some(64 << 20),
            pids_limit: None,
        };
        cg.ensure("/kubepods/podu1", &r).unwrap();
        let read = |p: &str| std::fs::read_to_string(root.path().join(p)).unwrap();
        assert_eq!(read("cpu/kubepods/podu1/cpu.shares"), "512");
        assert_eq!(read("cpu/kubepods/podu1/cpu.cfs_quota_us"), "50000");
        assert_eq!(read("cpu/kubepods/podu1/cpu.cfs_period_us"), "100000");
        assert_eq!(
            read("memory/kubepods/podu1/memory.limit_in_bytes"),
            "67108864"
        );
        assert_eq!(read("pids/kubepods/podu1/pids.max"), "max");
        assert!(root.path().join("freezer/kubepods/podu1").is_dir());
        assert_eq!(cg.children("/kubepods"), vec!["podu1".to_string()]);

        // A container cgroup runc left behind is removed with the pod's.
        std::fs::create_dir_all(root.path().join("freezer/kubepods/podu1/ctr")).unwrap();
        std::fs::remove_file(root.path().join("cpu/kubepods/podu1/cpu.shares")).unwrap();
        for f in ["cpu.cfs_quota_us", "cpu.cfs_period_us"] {
            std::fs::remove_file(root.path().join("cpu/kubepods/podu1").join(f)).unwrap();
        }
        std::fs::remove_file(
            root.path()
                .join("memory/kubepods/podu1/memory.limit_in_bytes"),
        )
        .unwrap();
        std::fs::remove_file(root.path().join("pids/kubepods/podu1/pids.max")).unwrap();
        cg.remove("/kubepods/podu1").unwrap();
        assert!(!root.path().join("freezer/kubepods/podu1").exists());
        assert!(!root.path().join("cpu/kubepods/podu1").exists());
        cg.remove("/kubepods/podu1").unwrap();
    }

    #[test]
    fn v2_enables_controllers_down_to_the_cgroup() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.controllers"), "cpu memory pids").unwrap();
        let cg = HostCgroups::under(root.path());
        let r = CgroupResources {
            cpu_shares: Some(1024),
            cpu_quota: None,
            memory_limit: Some(1 << 30),
            pids_limit: Some(100),
        };
        cg.ensure("/kubepods/burstable", &r).unwrap();
        let read = |p: &str| std::fs::read_to_string(root.path().join(p)).unwrap();
        assert_eq!(read("kubepods/burstable/cpu.weight"), "39");
        assert_eq!(read("kubepods/burstable/cpu.max"), "max 100000");
        assert_eq!(read("kubepods/burstable/memory.max"), "1073741824");
        assert_eq!(read("kubepods/burstable/pids.max"), "100");
        assert!(root.path().join("kubepods/cgroup.subtree_control").exists());
    }

    #[test]
    fn upstream_share_to_weight_conversion() {
        assert_eq!(weight(2), 1);
        assert_eq!(weight(1024), 39);
        assert_eq!(weight(262_144), 10_000);
    }

    #[test]
    fn the_double_tracks_live_cgroups() {
        let r = Recording::default();
        r.ensure("/kubepods/burstable/poda", &CgroupResources::default())
            .unwrap();
        r.ensure("/kubepods/burstable/podb", &CgroupResources::default())
            .unwrap();
        r.remove("/kubepods/burstable/poda").unwrap();
        assert_eq!(r.children("/kubepods/burstable"), vec!["podb".to_string()]);
    }
}
