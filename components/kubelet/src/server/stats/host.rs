//! The real [`StatsSource`]: the node's usage from its root cgroup (cgroup v1 `cpuacct.usage`,
//! `memory.usage_in_bytes` − `total_inactive_file` as cAdvisor's working set; v2 `cpu.stat`), falling
//! back to /proc (`stat`, `meminfo`) where a controller is missing; the root filesystem from statvfs
//! of the kubelet's root dir; containers from CRI ListContainerStats (containerd 1.6 serves it).
//! File reads go through [`Files`], so the parsing and the fallbacks are tested on fixtures.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_cri::v1 as cri;

use super::{
    ContainerSample, CpuSample, FsSample, MemorySample, NodeSample, StatsError, StatsSource,
};
use crate::runtime::cri::spec::{
    LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID,
};
use crate::runtime::cri::GrpcCri;

/// The node's files, as a trait so the readers are tested without a host.
pub trait Files: Send + Sync {
    fn read(&self, path: &str) -> std::io::Result<String>;
    /// (capacity, available, inodes, free inodes) of the filesystem holding `path`.
    fn statvfs(&self, path: &Path) -> std::io::Result<(u64, u64, u64, u64)>;
}

pub struct RealFiles;

impl Files for RealFiles {
    fn read(&self, path: &str) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }
    fn statvfs(&self, path: &Path) -> std::io::Result<(u64, u64, u64, u64)> {
        let v = nix::sys::statvfs::statvfs(path).map_err(std::io::Error::from)?;
        let frsize = v.fragment_size() as u64;
        Ok((
            v.blocks() as u64 * frsize,
            v.blocks_available() as u64 * frsize,
            v.files() as u64,
            v.files_free() as u64,
        ))
    }
}

/// `key value` lines (memory.stat, cpu.stat) or `Key: value kB` lines (meminfo, in bytes).
pub fn parse_kv(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let key = it.next()?.trim_end_matches(':').to_string();
            let value: u64 = it.next()?.parse().ok()?;
            let value = match it.next() {
                Some("kB") => value * 1024,
                _ => value,
            };
            Some((key, value))
        })
        .collect()
}

/// /proc/stat's aggregate `cpu` line as core-nanoseconds of non-idle time (USER_HZ = 100 on Linux).
pub fn proc_stat_cpu_nanos(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: all but idle and iowait.
    let busy: u64 = [0usize, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| f.get(*i))
        .sum();
    Some(busy * 10_000_000)
}

pub fn proc_stat_boot_time(text: &str) -> Option<SystemTime> {
    let secs: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

const CGROUP: &str = "/sys/fs/cgroup";

fn first_readable(files: &dyn Files, paths: &[String]) -> Option<String> {
    paths.iter().find_map(|p| files.read(p).ok())
}

/// The node's cumulative CPU time: the root cgroup's (v1 cpuacct, v2 cpu.stat), else /proc/stat.
pub fn node_cpu(files: &dyn Files, now: SystemTime) -> Result<CpuSample, StatsError> {
    let v1 = [
        format!("{CGROUP}/cpuacct/cpuacct.usage"),
        format!("{CGROUP}/cpu,cpuacct/cpuacct.usage"),
        format!("{CGROUP}/cpuacct,cpu/cpuacct.usage"),
    ];
    if let Some(n) = first_readable(files, &v1).and_then(|t| t.trim().parse::<u64>().ok()) {
        return Ok(CpuSample {
            time: now,
            usage_core_nanos: n,
        });
    }
    if let Ok(t) = files.read(&format!("{CGROUP}/cpu.stat")) {
        if let Some(us) = parse_kv(&t).get("usage_usec") {
            return Ok(CpuSample {
                time: now,
                usage_core_nanos: us * 1000,
            });
        }
    }
    let stat = files
        .read("/proc/stat")
        .map_err(|source| StatsError::Read {
            path: "/proc/stat".into(),
            source,
        })?;
    let n = proc_stat_cpu_nanos(&stat).ok_or_else(|| StatsError::Parse {
        path: "/proc/stat".into(),
        message: "no cpu line".into(),
    })?;
    Ok(CpuSample {
        time: now,
        usage_core_nanos: n,
    })
}

/// The node's memory: the root memory cgroup (v1) where there is one, else /proc/meminfo; the
/// capacity is MemTotal or a smaller root cgroup limit (a lab host's), `available` = capacity −
/// working set.
pub fn node_memory(files: &dyn Files, now: SystemTime) -> Result<MemorySample, StatsError> {
    let meminfo = files
        .read("/proc/meminfo")
        .map(|t| parse_kv(&t))
        .map_err(|source| StatsError::Read {
            path: "/proc/meminfo".into(),
            source,
        })?;
    let total = meminfo.get("MemTotal").copied().unwrap_or(0);
    let mem = format!("{CGROUP}/memory");
    let usage = files
        .read(&format!("{mem}/memory.usage_in_bytes"))
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok());
    let sample = match usage {
        Some(usage) => {
            let stat = files
                .read(&format!("{mem}/memory.stat"))
                .map(|t| parse_kv(&t))
                .unwrap_or_default();
            let limit = files
                .read(&format!("{mem}/memory.limit_in_bytes"))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .filter(|l| *l > 0 && *l < total)
                .unwrap_or(total);
            let inactive = stat.get("total_inactive_file").copied().unwrap_or(0);
            let working_set = usage.saturating_sub(inactive);
            MemorySample {
                time: now,
                working_set,
                usage: Some(usage),
                rss: stat.get("total_rss").copied(),
                available: Some(limit.saturating_sub(working_set)),
                page_faults: stat.get("total_pgfault").copied(),
                major_page_faults: stat.get("total_pgmajfault").copied(),
            }
        }
        None => {
            let free = meminfo.get("MemFree").copied().unwrap_or(0);
            let usage = total.saturating_sub(free);
            let inactive = meminfo.get("Inactive(file)").copied().unwrap_or(0);
            let working_set = usage.saturating_sub(inactive);
            MemorySample {
                time: now,
                working_set,
                usage: Some(usage),
                rss: meminfo.get("AnonPages").copied(),
                available: Some(total.saturating_sub(working_set)),
                page_faults: None,
                major_page_faults: None,
            }
        }
    };
    Ok(sample)
}

pub fn node_fs(files: &dyn Files, path: &Path, now: SystemTime) -> Result<FsSample, StatsError> {
    let (capacity, available, inodes, free) =
        files.statvfs(path).map_err(|source| StatsError::Read {
            path: path.display().to_string(),
            source,
        })?;
    Ok(FsSample {
        time: now,
        capacity,
        available,
        used: capacity.saturating_sub(available),
        inodes: Some(inodes),
        inodes_free: Some(free),
    })
}

fn nanos_to_time(ns: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64)
}

/// One CRI ContainerStats as a sample; None without the pod labels (not a kubelet container).
pub fn container_sample(s: &cri::ContainerStats, now: SystemTime) -> Option<ContainerSample> {
    let attrs = s.attributes.as_ref()?;
    let label = |k: &str| attrs.labels.get(k).cloned();
    let name = attrs
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .filter(|n| !n.is_empty())
        .or_else(|| label(LABEL_CONTAINER_NAME))?;
    let time = |ts: i64| if ts > 0 { nanos_to_time(ts) } else { now };
    let cpu = s.cpu.as_ref().and_then(|c| {
        Some(CpuSample {
            time: time(c.timestamp),
            usage_core_nanos: c.usage_core_nano_seconds.as_ref()?.value,
        })
    });
    let memory = s.memory.as_ref().and_then(|m| {
        Some(MemorySample {
            time: time(m.timestamp),
            working_set: m.working_set_bytes.as_ref()?.value,
            usage: m.usage_bytes.as_ref().map(|v| v.value),
            rss: m.rss_bytes.as_ref().map(|v| v.value),
            available: m.available_bytes.as_ref().map(|v| v.value),
            page_faults: m.page_faults.as_ref().map(|v| v.value),
            major_page_faults: m.major_page_faults.as_ref().map(|v| v.value),
        })
    });
    Some(ContainerSample {
        id: attrs.id.clone(),
        namespace: label(LABEL_POD_NAMESPACE)?,
        pod: label(LABEL_POD_NAME)?,
        pod_uid: label(LABEL_POD_UID)?,
        name,
        cpu,
        memory,
        rootfs_used: s
            .writable_layer
            .as_ref()
            .and_then(|w| w.used_bytes.as_ref())
            .map(|v| v.value),
    })
}

/// utime + stime + cutime + cstime of `/proc/<pid>/stat`, in nanoseconds (USER_HZ = 100).
pub fn proc_pid_cpu_nanos(stat: &str) -> Option<u64> {
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = (11..=14)
        .map(|i| f.get(i).and_then(|v| v.parse::<u64>().ok()))
        .sum::<Option<u64>>()?;
    Some(ticks * 10_000_000)
}

/// A host process as a container: CPU from its stat, working set = its resident memory (VmRSS).
pub fn process_sample(
    files: &dyn Files,
    pid: u32,
    now: SystemTime,
) -> Option<(CpuSample, MemorySample)> {
    let cpu = proc_pid_cpu_nanos(&files.read(&format!("/proc/{pid}/stat")).ok()?)?;
    let status = parse_kv(&files.read(&format!("/proc/{pid}/status")).ok()?);
    let rss = status.get("VmRSS").copied()?;
    Some((
        CpuSample {
            time: now,
            usage_core_nanos: cpu,
        },
        MemorySample {
            time: now,
            working_set: rss,
            usage: Some(rss),
            rss: Some(rss),
            available: None,
            page_faults: None,
            major_page_faults: None,
        },
    ))
}

/// The kubelet's node: its files, its root dir's filesystem, its CRI runtime (if any).
pub struct HostStats {
    pub files: Arc<dyn Files>,
    pub root_dir: PathBuf,
    pub cri: Option<Arc<GrpcCri>>,
}

#[async_trait]
impl StatsSource for HostStats {
    fn node(&self) -> Result<NodeSample, StatsError> {
        let now = SystemTime::now();
        let files = self.files.as_ref();
        Ok(NodeSample {
            cpu: Some(node_cpu(files, now)?),
            memory: Some(node_memory(files, now)?),
            fs: node_fs(files, &self.root_dir, now).ok(),
            boot_time: files
                .read("/proc/stat")
                .ok()
                .and_then(|t| proc_stat_boot_time(&t)),
        })
    }

    fn process(&self, pid: u32) -> Option<(CpuSample, MemorySample)> {
        process_sample(self.files.as_ref(), pid, SystemTime::now())
    }

    async fn containers(&self) -> Result<Vec<ContainerSample>, StatsError> {
        let Some(cri) = &self.cri else {
            return Ok(Vec::new());
        };
        let now = SystemTime::now();
        Ok(cri
            .list_container_stats()
            .await?
            .iter()
            .filter_map(|s| container_sample(s, now))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct FakeFiles(HashMap<&'static str, &'static str>);

    impl Files for FakeFiles {
        fn read(&self, path: &str) -> std::io::Result<String> {
            self.0
                .get(path)
                .map(|s| s.to_string())
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
        }
        fn statvfs(&self, _: &Path) -> std::io::Result<(u64, u64, u64, u64)> {
            Ok((1000, 250, 10, 4))
        }
    }

    const MEMINFO: &str =
        "MemTotal:       24000000 kB\nMemFree:         4000000 kB\nInactive(file):  2000000 kB\nAnonPages:       1000000 kB\n";

    #[test]
    fn cgroup_v1_root_is_read_like_cadvisor() {
        let files = FakeFiles(HashMap::from([
            ("/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage", "123456789\n"),
            ("/sys/fs/cgroup/memory/memory.usage_in_bytes", "1000000\n"),
            (
                "/sys/fs/cgroup/memory/memory.stat",
                "cache 5\ntotal_rss 300000\ntotal_inactive_file 200000\ntotal_pgfault 9\ntotal_pgmajfault 1\n",
            ),
            // A lab host's limit, smaller than the machine's memory.
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "4000000\n"),
            ("/proc/meminfo", MEMINFO),
        ]));
        let now = SystemTime::UNIX_EPOCH;
        assert_eq!(node_cpu(&files, now).unwrap().usage_core_nanos, 123456789);
        let m = node_memory(&files, now).unwrap();
        assert_eq!(m.working_set, 800000);
        assert_eq!(m.usage, Some(1000000));
        assert_eq!(m.rss, Some(300000));
        assert_eq!(m.available, Some(3200000));
        assert_eq!((m.page_faults, m.major_page_faults), (Some(9), Some(1)));
        let fs = node_fs(&files, Path::new("/var/lib/kiln/kubelet"), now).unwrap();
        assert_eq!((fs.used, fs.inodes_free), (750, Some(4)));
    }

    #[test]
    fn without_cgroup_v1_falls_back_to_v2_and_proc() {
        let files = FakeFiles(HashMap::from([
            ("/sys/fs/cgroup/cpu.stat", "usage_usec 5000\nuser_usec 1\n"),
            ("/proc/meminfo", MEMINFO),
        ]));
        let now = SystemTime::UNIX_EPOCH;
        assert_eq!(node_cpu(&files, now).unwrap().usage_core_nanos, 5_000_000);
        let m = node_memory(&files, now).unwrap();
        // (24 − 4 − 2) GB in kB units.
        assert_eq!(m.working_set, 18_000_000 * 1024);
        assert_eq!(m.available, Some(6_000_000 * 1024));
        assert_eq!(m.rss, Some(1_000_000 * 1024));
        let proc_only = FakeFiles(HashMap::from([(
            "/proc/stat",
            "cpu  100 5 50 9000 20 1 2 3 0 0\ncpu0 1 1 1 1\nbtime 1700000000\n",
        )]));
        // (100+5+50+1+2+3) ticks of 10 ms.
        assert_eq!(
            node_cpu(&proc_only, now).unwrap().usage_core_nanos,
            161 * 10_000_000
        );
        assert_eq!(
            proc_stat_boot_time("btime 1700000000\n"),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
    }

    #[test]
    fn host_processes_are_read_from_proc() {
        let files = FakeFiles(HashMap::from([
            (
                "/proc/42/stat",
                "42 (kiln (api) server) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 3 2 20 0 8 0 100 0 0",
            ),
            ("/proc/42/status", "Name:\tkiln\nVmRSS:\t  2048 kB\n"),
        ]));
        let (cpu, mem) = process_sample(&files, 42, SystemTime::UNIX_EPOCH).unwrap();
        // (250 + 50 + 3 + 2) ticks of 10 ms.
        assert_eq!(cpu.usage_core_nanos, 305 * 10_000_000);
        assert_eq!(mem.working_set, 2048 * 1024);
        assert!(process_sample(&files, 7, SystemTime::UNIX_EPOCH).is_none());
    }

    #[test]
    fn cri_stats_become_samples() {
        let s = cri::ContainerStats {
            attributes: Some(cri::ContainerAttributes {
                id: "abc".into(),
                metadata: Some(cri::ContainerMetadata {
                    name: "app".into(),
                    attempt: 0,
                }),
                labels: HashMap::from([
                    (LABEL_POD_NAME.to_string(), "web".to_string()),
                    (LABEL_POD_NAMESPACE.to_string(), "default".to_string()),
                    (LABEL_POD_UID.to_string(), "u1".to_string()),
                ]),
                annotations: HashMap::new(),
            }),
            cpu: Some(cri::CpuUsage {
                timestamp: 2_000_000_000,
                usage_core_nano_seconds: Some(cri::UInt64Value { value: 77 }),
                usage_nano_cores: None,
            }),
            memory: Some(cri::MemoryUsage {
                timestamp: 2_000_000_000,
                working_set_bytes: Some(cri::UInt64Value { value: 4096 }),
                ..Default::default()
            }),
            writable_layer: None,
            swap: None,
        };
        let c = container_sample(&s, SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(
            (c.id.as_str(), c.pod.as_str(), c.name.as_str()),
            ("abc", "web", "app")
        );
        assert_eq!(c.cpu.unwrap().usage_core_nanos, 77);
        assert_eq!(
            c.cpu.unwrap().time,
            SystemTime::UNIX_EPOCH + Duration::from_secs(2)
        );
        assert_eq!(c.memory.unwrap().working_set, 4096);
        let mut unlabelled = s.clone();
        unlabelled.attributes.as_mut().unwrap().labels.clear();
        assert!(container_sample(&unlabelled, SystemTime::UNIX_EPOCH).is_none());
    }
}
