//! Resource usage for `/stats/summary` (upstream's statsapi Summary) and `/metrics/resource` (the
//! Prometheus text metrics-server reads): the node's cumulative CPU time, memory and root filesystem
//! from its cgroup and /proc files, each workload container's from CRI ListContainerStats.
//!
//! CPU *rates* (`usageNanoCores`) need two samples: a sampler takes one every [`SAMPLE_PERIOD`] and
//! keeps the last two, so the Summary always reports the rate over the last full period (cAdvisor's
//! housekeeping does the same). `/metrics/resource` serves a fresh sample: its counters carry their
//! own timestamps and the scraper computes rates.
//!
//! The side effects (files, CRI) sit behind [`StatsSource`]; everything else is computed from
//! [`Sample`]s and tested on fixtures.

pub mod host;
pub mod resource_metrics;
pub mod summary;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use super::pods::{PodRuntime, PodSource};
use crate::container_status::ContainerState;

/// How often the sampler takes a sample (metrics-server's default resolution is 15 s; its scrapes
/// then always find a rate at most this old).
pub const SAMPLE_PERIOD: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("parsing {path}: {message}")]
    Parse { path: String, message: String },
    #[error(transparent)]
    Cri(#[from] crate::runtime::cri::api::CriError),
}

/// Cumulative CPU time at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSample {
    pub time: SystemTime,
    pub usage_core_nanos: u64,
}

/// Memory at one instant; fields a source cannot tell are None.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemorySample {
    pub time: SystemTime,
    pub working_set: u64,
    pub usage: Option<u64>,
    pub rss: Option<u64>,
    pub available: Option<u64>,
    pub page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsSample {
    pub time: SystemTime,
    pub capacity: u64,
    pub available: u64,
    pub used: u64,
    pub inodes: Option<u64>,
    pub inodes_free: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSample {
    pub cpu: Option<CpuSample>,
    pub memory: Option<MemorySample>,
    pub fs: Option<FsSample>,
    /// When the node booted (the Summary's node startTime).
    pub boot_time: Option<SystemTime>,
}

/// One container's usage as the runtime reports it, with the pod it belongs to (CRI labels).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSample {
    pub id: String,
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub name: String,
    pub cpu: Option<CpuSample>,
    pub memory: Option<MemorySample>,
    /// Bytes of the writable layer.
    pub rootfs_used: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sample {
    pub node: NodeSample,
    pub containers: Vec<ContainerSample>,
    /// The containers could not be read (`resource_scrape_error 1`).
    pub container_error: bool,
}

/// Where samples come from: the node's files and the runtime; a recording fake in tests.
#[async_trait]
pub trait StatsSource: Send + Sync {
    fn node(&self) -> Result<NodeSample, StatsError>;
    async fn containers(&self) -> Result<Vec<ContainerSample>, StatsError>;
    /// The CPU time and memory of one host process (a `kiln-host` static pod's container).
    fn process(&self, _pid: u32) -> Option<(CpuSample, MemorySample)> {
        None
    }
}

/// Cores used between two samples, in billionths of a core (`usageNanoCores`); None when the
/// counter went backwards (a restarted container) or no time passed.
pub fn nano_cores(prev: &CpuSample, cur: &CpuSample) -> Option<u64> {
    let dt = cur.time.duration_since(prev.time).ok()?.as_nanos();
    let used = cur.usage_core_nanos.checked_sub(prev.usage_core_nanos)? as u128;
    if dt == 0 {
        return None;
    }
    u64::try_from(used * 1_000_000_000 / dt).ok()
}

/// The sampler: the last two samples, and fresh ones on demand.
pub struct Stats {
    source: Arc<dyn StatsSource>,
    pods: Arc<dyn PodSource>,
    history: Mutex<VecDeque<Sample>>,
}

impl Stats {
    pub fn new(source: Arc<dyn StatsSource>, pods: Arc<dyn PodSource>) -> Self {
        Stats {
            source,
            pods,
            history: Mutex::new(VecDeque::with_capacity(2)),
        }
    }

    /// A fresh sample; a failing part is left out (and logged) rather than failing the rest.
    pub async fn sample(&self) -> Sample {
        let node = self.source.node().unwrap_or_else(|e| {
            tracing::debug!(error = %e, "node stats");
            NodeSample::default()
        });
        let (mut containers, container_error) = match self.source.containers().await {
            Ok(c) => (c, false),
            Err(e) => {
                tracing::debug!(error = %e, "container stats");
                (Vec::new(), true)
            }
        };
        // Static pods on the host runtime are processes: their /proc numbers stand in for a
        // container's cgroup.
        for p in self.pods.pods() {
            if p.runtime != PodRuntime::Host {
                continue;
            }
            for c in p.status.iter().flat_map(|s| s.containers.iter()) {
                let ContainerState::Running { pid, .. } = c.state else {
                    continue;
                };
                if let Some((cpu, memory)) = self.source.process(pid) {
                    containers.push(ContainerSample {
                        id: summary::container_key(&p, c),
                        namespace: p.namespace().to_string(),
                        pod: p.name().to_string(),
                        pod_uid: p.uid().to_string(),
                        name: c.name.clone(),
                        cpu: Some(cpu),
                        memory: Some(memory),
                        rootfs_used: None,
                    });
                }
            }
        }
        Sample {
            node,
            containers,
            container_error,
        }
    }

    /// Takes a sample into the history (keeps two).
    pub async fn tick(&self) {
        let s = self.sample().await;
        let mut h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        if h.len() == 2 {
            h.pop_front();
        }
        h.push_back(s);
    }

    /// Samples every [`SAMPLE_PERIOD`] until `shutdown` turns true.
    pub async fn run(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        loop {
            self.tick().await;
            tokio::select! {
                _ = tokio::time::sleep(SAMPLE_PERIOD) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }

    /// The latest sample and the one before it (None until two were taken).
    fn latest(&self) -> Option<(Option<Sample>, Sample)> {
        let h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        let cur = h.back()?.clone();
        let prev = (h.len() == 2).then(|| h[0].clone());
        Some((prev, cur))
    }

    /// `/stats/summary`: the latest sample, with rates over the sampling period.
    pub async fn summary(&self, node_name: &str) -> serde_json::Value {
        let (prev, cur) = match self.latest() {
            Some(v) => v,
            None => {
                self.tick().await;
                self.latest().unwrap_or_default()
            }
        };
        summary::render(node_name, prev.as_ref(), &cur, &self.pods.pods())
    }

    /// `/metrics/resource`: a fresh sample of the cumulative counters.
    pub async fn resource_metrics(&self) -> String {
        let s = self.sample().await;
        resource_metrics::render(&s, &self.pods.pods())
    }
}

/// Milliseconds since the epoch (Prometheus sample timestamps).
pub fn unix_millis(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// RFC 3339 with seconds, as metav1.Time marshals.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|d| {
            d.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    pub fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    #[test]
    fn nano_cores_is_the_rate_between_samples() {
        let a = CpuSample {
            time: at(0),
            usage_core_nanos: 1_000_000_000,
        };
        let b = CpuSample {
            time: at(10),
            usage_core_nanos: 6_000_000_000,
        };
        // 5 core-seconds in 10 s = half a core.
        assert_eq!(nano_cores(&a, &b), Some(500_000_000));
        assert_eq!(nano_cores(&b, &a), None, "time went backwards");
        let restarted = CpuSample {
            time: at(20),
            usage_core_nanos: 10,
        };
        assert_eq!(nano_cores(&b, &restarted), None);
        assert_eq!(nano_cores(&a, &a), None);
    }

    /// A source whose node counter grows by one core-second per call.
    struct Counting(AtomicU64);

    #[async_trait]
    impl StatsSource for Counting {
        fn node(&self) -> Result<NodeSample, StatsError> {
            let n = self.0.fetch_add(1, Ordering::SeqCst);
            Ok(NodeSample {
                cpu: Some(CpuSample {
                    time: at(n * 10),
                    usage_core_nanos: n * 1_000_000_000,
                }),
                ..Default::default()
            })
        }
        async fn containers(&self) -> Result<Vec<ContainerSample>, StatsError> {
            Err(StatsError::Parse {
                path: "cri".into(),
                message: "down".into(),
            })
        }
    }

    struct NoPods;
    impl PodSource for NoPods {
        fn pods(&self) -> Vec<super::super::pods::NodePod> {
            Vec::new()
        }
    }

    /// A host process (pid 7) using one core-second per sample.
    struct HostProcess(AtomicU64);

    #[async_trait]
    impl StatsSource for HostProcess {
        fn node(&self) -> Result<NodeSample, StatsError> {
            Ok(NodeSample::default())
        }
        async fn containers(&self) -> Result<Vec<ContainerSample>, StatsError> {
            Ok(Vec::new())
        }
        fn process(&self, pid: u32) -> Option<(CpuSample, MemorySample)> {
            let n = self.0.fetch_add(1, Ordering::SeqCst);
            (pid == 7).then(|| {
                (
                    CpuSample {
                        time: at(n * 10),
                        usage_core_nanos: n * 1_000_000_000,
                    },
                    MemorySample {
                        time: at(n * 10),
                        working_set: 4096,
                        usage: None,
                        rss: None,
                        available: None,
                        page_faults: None,
                        major_page_faults: None,
                    },
                )
            })
        }
    }

    struct StaticPod;
    impl PodSource for StaticPod {
        fn pods(&self) -> Vec<super::super::pods::NodePod> {
            let mut c = summary::tests::running("kiln-apiserver", "");
            c.container_id.clear();
            c.state = ContainerState::Running {
                pid: 7,
                started_at: at(0),
            };
            let mut p =
                summary::tests::node_pod("kube-system", "kiln-apiserver-host1", "s1", vec![c]);
            p.runtime = PodRuntime::Host;
            vec![p]
        }
    }

    #[tokio::test]
    async fn static_pods_are_measured_as_processes() {
        let stats = Stats::new(
            Arc::new(HostProcess(AtomicU64::new(0))),
            Arc::new(StaticPod),
        );
        stats.tick().await;
        stats.tick().await;
        let s = stats.summary("host1").await;
        let pod = &s["pods"][0];
        assert_eq!(pod["podRef"]["name"], "kiln-apiserver-host1");
        assert_eq!(pod["containers"][0]["name"], "kiln-apiserver");
        assert_eq!(pod["containers"][0]["cpu"]["usageNanoCores"], 100_000_000);
        assert_eq!(pod["memory"]["workingSetBytes"], 4096);
        let text = stats.resource_metrics().await;
        assert!(
            text.contains("pod_memory_working_set_bytes{namespace=\"kube-system\",pod=\"kiln-apiserver-host1\"} 4096"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn summary_rate_needs_two_samples() {
        let stats = Stats::new(Arc::new(Counting(AtomicU64::new(0))), Arc::new(NoPods));
        let first = stats.summary("n1").await;
        assert_eq!(first["node"]["cpu"]["usageCoreNanoSeconds"], 0);
        assert!(first["node"]["cpu"].get("usageNanoCores").is_none());
        stats.tick().await;
        let second = stats.summary("n1").await;
        // 1 core-second over 10 s.
        assert_eq!(second["node"]["cpu"]["usageNanoCores"], 100_000_000);
        assert_eq!(
            second["node"]["cpu"]["usageCoreNanoSeconds"],
            1_000_000_000u64
        );
        let text = stats.resource_metrics().await;
        assert!(text.contains("resource_scrape_error 1"), "{text}");
    }
}
