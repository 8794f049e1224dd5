//! Memory and processes as the eviction manager measures them, after upstream's summary stats (cAdvisor
//! and `pkg/kubelet/stats/pidlimit`):
//!
//! - a cgroup's memory working set is its usage less its inactive file pages (page cache the kernel
//!   reclaims first). The usage is `memory.usage_in_bytes` on cgroup v1 and `memory.current` on v2; the
//!   v2 root cgroup has no `memory.current`, and there, as runc does, `anon + file` of its `memory.stat`
//!   stands in. The node's working set is the root cgroup's (on a lab host: its cgroup namespace's root);
//!   a pod's is its pod cgroup's ([`crate::qos_cgroups::pod_cgroup`]), a container's the cgroup
//!   containerd made for it below that (named by its id).
//! - the task limit is the lower of `kernel.pid_max` and `kernel.threads-max`. Upstream counts the
//!   kernel's tasks from /proc/loadavg, which is the whole machine's; here the tasks (threads) under
//!   /proc are counted, which is the same on a host with the machine's pid namespace and the host's own
//!   in a namespace. A pod's processes are its pod cgroup's `pids.current`.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

use super::{EvictionError, NodeResources, PidStats};
use crate::runtime::PodStatus;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// A value of a `memory.stat` (`key value` lines).
pub fn stat_value(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The working set from a cgroup's usage (None: the v2 root, use `anon + file`) and its memory.stat.
pub fn working_set(usage: Option<u64>, stat: &str, v2: bool) -> u64 {
    let inactive_key = if v2 {
        "inactive_file"
    } else {
        "total_inactive_file"
    };
    let usage = usage.unwrap_or_else(|| {
        stat_value(stat, "anon").unwrap_or(0) + stat_value(stat, "file").unwrap_or(0)
    });
    usage.saturating_sub(stat_value(stat, inactive_key).unwrap_or(0))
}

/// The first field of `kernel.pid_max` and `kernel.threads-max` texts: the lower one.
pub fn task_limit(pid_max: &str, threads_max: &str) -> Option<u64> {
    let a: u64 = pid_max.trim().parse().ok()?;
    let b: u64 = threads_max.trim().parse().ok()?;
    Some(a.min(b))
}

/// The tasks (threads) of every process under `proc`.
pub fn count_tasks(proc: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(proc) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        // A process that ends during the walk has no task dir any more: not counted.
        .map(|e| {
            std::fs::read_dir(e.path().join("task"))
                .map(|t| t.count() as u64)
                .unwrap_or(0)
        })
        .sum()
}

/// The host's cgroup filesystem and /proc.
pub struct HostResources {
    root: PathBuf,
    proc: PathBuf,
    v2: bool,
}

impl HostResources {
    pub fn detect() -> HostResources {
        HostResources::under(Path::new(CGROUP_ROOT), Path::new("/proc"))
    }

    pub fn under(root: &Path, proc: &Path) -> HostResources {
        HostResources {
            root: root.to_path_buf(),
            proc: proc.to_path_buf(),
            v2: root.join("cgroup.controllers").exists(),
        }
    }

    /// The directory of `cgroup` (`/kubepods/...`, "" the root) in the controller's hierarchy.
    fn dir(&self, controller: &str, cgroup: &str) -> PathBuf {
        let rel = cgroup.trim_start_matches('/');
        if self.v2 {
            self.root.join(rel)
        } else {
            self.root.join(controller).join(rel)
        }
    }

    fn read(path: &Path) -> Result<String, EvictionError> {
        std::fs::read_to_string(path).map_err(|source| EvictionError::Read {
            path: path.display().to_string(),
            source,
        })
    }

    fn cgroup_working_set(&self, cgroup: &str) -> Result<u64, EvictionError> {
        let dir = self.dir("memory", cgroup);
        let stat = Self::read(&dir.join("memory.stat"))?;
        let usage_file = if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        let usage = match std::fs::read_to_string(dir.join(usage_file)) {
            Ok(u) => Some(u.trim().parse().map_err(|_| EvictionError::Read {
                path: dir.join(usage_file).display().to_string(),
                source: std::io::ErrorKind::InvalidData.into(),
            })?),
            // The v2 root cgroup has no memory.current.
            Err(_) if self.v2 && cgroup.trim_matches('/').is_empty() => None,
            Err(source) => {
                return Err(EvictionError::Read {
                    path: dir.join(usage_file).display().to_string(),
                    source,
                })
            }
        };
        Ok(working_set(usage, &stat, self.v2))
    }
}

impl NodeResources for HostResources {
    fn memory_working_set(&self) -> Result<u64, EvictionError> {
        self.cgroup_working_set("")
    }

    fn pids(&self) -> Result<PidStats, EvictionError> {
        let pid_max = Self::read(&self.proc.join("sys/kernel/pid_max"))?;
        let threads_max = Self::read(&self.proc.join("sys/kernel/threads-max"))?;
        let max = task_limit(&pid_max, &threads_max).ok_or_else(|| EvictionError::Read {
            path: self.proc.join("sys/kernel/pid_max").display().to_string(),
            source: std::io::ErrorKind::InvalidData.into(),
        })?;
        Ok(PidStats {
            max,
            running: count_tasks(&self.proc),
        })
    }

    fn pod_memory(&self, pod: &Pod, status: &PodStatus) -> (u64, Vec<(String, u64)>) {
        let cgroup = crate::qos_cgroups::pod_cgroup(pod);
        let total = self.cgroup_working_set(&cgroup).unwrap_or(0);
        let containers = status
            .containers
            .iter()
            .filter_map(|c| {
                let id = c.container_id.rsplit("://").next()?;
                let ws = self.cgroup_working_set(&format!("{cgroup}/{id}")).ok()?;
                Some((c.name.clone(), ws))
            })
            .collect();
        (total, containers)
    }

    fn pod_processes(&self, pod: &Pod) -> u64 {
        let dir = self.dir("pids", &crate::qos_cgroups::pod_cgroup(pod));
        std::fs::read_to_string(dir.join("pids.current"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
}
