//! Per-host cgroups, nested under the cgroup kiln itself runs in (so the caller's accounting is never
//! escaped), in every hierarchy the machine has: the v1 controllers and the v2 (unified) tree.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::layout::host_name;
use super::{LabError, LabLayout};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// One line of /proc/self/cgroup mapped to its mount point.
fn hierarchies() -> Vec<(PathBuf, String, bool)> {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.splitn(3, ':');
        let (Some(_id), Some(ctrls), Some(path)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let mount = if ctrls.is_empty() {
            let unified = Path::new(CGROUP_ROOT).join("unified");
            if unified.join("cgroup.procs").exists() {
                unified
            } else {
                PathBuf::from(CGROUP_ROOT)
            }
        } else {
            Path::new(CGROUP_ROOT).join(ctrls.trim_start_matches("name="))
        };
        if mount.join("cgroup.procs").exists() {
            out.push((
                mount,
                path.to_string(),
                ctrls.split(',').any(|c| c == "cpuset"),
            ));
        }
    }
    out
}

pub fn create(l: &LabLayout, n: u32) -> Result<Vec<PathBuf>, LabError> {
    let mut dirs = Vec::new();
    for (mount, own, cpuset) in hierarchies() {
        let base = mount.join(own.trim_start_matches('/'));
        let levels = [
            base.join("kiln-lab"),
            base.join("kiln-lab").join(&l.name),
            base.join("kiln-lab").join(&l.name).join(host_name(n)),
        ];
        let mut parent = base.clone();
        for d in &levels {
            // Hosts boot in parallel and share the upper levels: losing the race to create one is fine.
            match std::fs::create_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(LabError::io("creating cgroup", d)(e)),
            }
            // v1 cpuset children start with no CPUs or memory nodes: a task could not join. Fill top-down.
            if cpuset {
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let v = std::fs::read_to_string(parent.join(f))
                        .map_err(LabError::io("reading", parent.join(f)))?;
                    std::fs::write(d.join(f), v.trim())
                        .map_err(LabError::io("writing", d.join(f)))?;
                }
            }
            parent = d.clone();
        }
        dirs.push(levels[2].clone());
    }
    Ok(dirs)
}

/// Remove host cgroups depth-first (containerd and runc make children), then the lab's parents if empty.
/// Processes take a moment to leave a cgroup after they die, so retry briefly.
pub fn remove(dirs: &[PathBuf]) -> Result<(), LabError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    for d in dirs {
        loop {
            match remove_tree(d) {
                Ok(()) => break,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(cgroup = %d.display(), error = %e, "cgroup busy, retrying");
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(LabError::io("removing cgroup", d)(e)),
            }
        }
        // .../kiln-lab/<lab> and .../kiln-lab: only succeed once the last host is gone.
        if let Some(lab) = d.parent() {
            let _ = std::fs::remove_dir(lab);
            if let Some(top) = lab.parent() {
                let _ = std::fs::remove_dir(top);
            }
        }
    }
    Ok(())
}

fn remove_tree(d: &Path) -> std::io::Result<()> {
    if !d.exists() {
        return Ok(());
    }
    for e in std::fs::read_dir(d)?.flatten() {
        if e.file_type()?.is_dir() {
            remove_tree(&e.path())?;
        }
    }
    std::fs::remove_dir(d)
}
