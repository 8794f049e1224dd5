//! The eviction manager, after upstream's: every monitoring interval it observes the node's available
//! memory (capacity less the root cgroup's working set), the free space of nodefs (the kubelet's root dir)
//! and imagefs (containerd's root), and the PIDs left ([`host`]), and compares them with `--eviction-hard`.
//! A threshold crossed sets its node condition (MemoryPressure, DiskPressure, PIDPressure) — each kept
//! until none of its thresholds has been crossed for `--eviction-pressure-transition-period` — and evicts
//! one workload pod per interval (memory first), ranked as upstream ranks them ([`rank`]): an event
//! (Warning, Evicted), the pod killed with upstream's one-second grace for hard thresholds, and its status
//! set to phase Failed, reason Evicted, "The node was low on resource: memory. …". Critical pods (static,
//! mirror, system-critical priority) are never evicted; new pods are not admitted under pressure as
//! upstream's admit handler decides ([`admission::AdmissionGate`]). The taints
//! (`node.kubernetes.io/memory-pressure` etc.) follow the conditions in the controller-manager's node
//! lifecycle controller (a kubelet may not change its Node's taints).
//!
//! The side effects sit behind traits ([`Disk`], [`NodeResources`], [`ActivePods`], [`PodFailer`], the
//! event recorder), so
//! [`Manager::synchronize`] is tested with fakes. Node-level reclaim (image and dead-container garbage
//! collection before evicting) is not implemented. Soft thresholds (`--eviction-soft`) set the condition at
//! once and evict after their grace period, with a pod grace of at most `--eviction-max-pod-grace-period`.

#[path = "eviction_admission.rs"]
pub mod admission;
#[path = "eviction_fs.rs"]
pub mod fs;
#[path = "eviction_host.rs"]
pub mod host;
#[path = "eviction_rank.rs"]
pub mod rank;
#[path = "eviction_thresholds.rs"]
pub mod thresholds;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::events::{EventRecorder, EventType, ObjectRef};
use crate::runtime::{PodStatus, Runtime, RuntimeError};
use admission::{Evicted, Failure};
use rank::{Candidate, Measure, PodUsage};
use thresholds::{Condition, Signal, Threshold};

/// The reason of evicted and rejected pods and of their events.
pub const REASON: &str = "Evicted";
/// Upstream's grace for evictions on hard thresholds (`immediateEvictionGracePeriodSeconds`).
pub const HARD_EVICTION_GRACE: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum EvictionError {
    #[error("eviction threshold {input:?}: {message}")]
    Threshold { input: String, message: String },
    #[error("invalid duration {0:?}: expected e.g. 10s, 5m, 1m30s")]
    Duration(String),
    #[error("statvfs {path}: {source}")]
    Statvfs {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("pod {pod}: {source}")]
    Api {
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("stopping pod {pod}: {source}")]
    Stop {
        pod: String,
        #[source]
        source: RuntimeError,
    },
}

/// The eviction settings, resolved from the flags.
#[derive(Debug, Clone, PartialEq)]
pub struct EvictionConfig {
    pub hard: Vec<Threshold>,
    /// Soft thresholds: evict only once crossed for their grace period, with a grace of at most
    /// `max_pod_grace_period`.
    pub soft: Vec<Threshold>,
    pub max_pod_grace_period: Duration,
    pub pressure_transition_period: Duration,
    pub monitoring_interval: Duration,
    /// The filesystem of containerd's root (imagefs).
    pub imagefs_dir: PathBuf,
}

impl Default for EvictionConfig {
    fn default() -> Self {
        EvictionConfig {
            hard: thresholds::parse_thresholds(thresholds::DEFAULT_EVICTION_HARD)
                .map(|t| t.enforced)
                .unwrap_or_default(),
            soft: Vec::new(),
            max_pod_grace_period: Duration::ZERO,
            pressure_transition_period: Duration::from_secs(300),
            monitoring_interval: Duration::from_secs(10),
            imagefs_dir: PathBuf::from("/var/lib/containerd"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStats {
    pub capacity: u64,
    pub available: u64,
    /// st_dev of the directory: two dirs on one filesystem share it.
    pub device: u64,
}

/// The node's disks (statvfs, per-pod usage).
pub trait Disk: Send + Sync {
    fn fs_stats(&self, path: &Path) -> Result<FsStats, EvictionError>;
    fn pod_usage(&self, pod: &Pod, status: &PodStatus) -> PodUsage;
}

/// The kernel's task limit and the tasks running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidStats {
    pub max: u64,
    pub running: u64,
}

/// The node's memory and processes, and each pod's ([`host::HostResources`] reads them).
pub trait NodeResources: Send + Sync {
    /// The node's (root cgroup's) memory working set in bytes.
    fn memory_working_set(&self) -> Result<u64, EvictionError>;
    fn pids(&self) -> Result<PidStats, EvictionError>;
    /// The pod's memory working set, and each of its containers' by name (unmeasurable ones left out).
    fn pod_memory(&self, pod: &Pod, status: &PodStatus) -> (u64, Vec<(String, u64)>);
    /// The processes in the pod's cgroup.
    fn pod_processes(&self, pod: &Pod) -> u64;
}

/// The workload pods the runtime runs, and how one is killed.
#[async_trait]
pub trait ActivePods: Send + Sync {
    fn active_pods(&self) -> Vec<(Pod, PodStatus)>;
    async fn kill(&self, uid: &str, grace: Duration) -> Result<(), RuntimeError>;
}

#[async_trait]
impl ActivePods for crate::runtime::CriRuntime {
    fn active_pods(&self) -> Vec<(Pod, PodStatus)> {
        self.pods_with_status()
    }

    async fn kill(&self, uid: &str, grace: Duration) -> Result<(), RuntimeError> {
        self.stop_pod(uid, Some(grace)).await
    }
}

/// Writes a pod's terminal status.
#[async_trait]
pub trait PodFailer: Send + Sync {
    async fn fail(&self, pod: &Pod, failure: &Failure) -> Result<(), EvictionError>;
}

/// A threshold crossed, with the numbers the eviction message quotes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Met {
    /// The threshold's place in the manager's list (hard, then soft).
    pub index: usize,
    pub signal: Signal,
    pub threshold: u64,
    pub available: u64,
    /// Zero: a hard threshold.
    pub grace_period: Duration,
}

/// A signal's capacity and what of it is available (bytes, or tasks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    pub capacity: u64,
    pub available: u64,
}

/// The observed filesystems: nodefs, and imagefs when it is a filesystem of its own; memory and PIDs
/// when observed (None: not measured, their thresholds are not met, as upstream skips a signal it has
/// no observation for).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observations {
    pub nodefs: FsStats,
    pub imagefs: FsStats,
    pub memory: Option<Observed>,
    pub pids: Option<Observed>,
}

impl Observations {
    pub fn dedicated_imagefs(&self) -> bool {
        self.nodefs.device != self.imagefs.device
    }

    /// Which pod usages relieve `signal`.
    pub fn measure(&self, signal: Signal) -> Measure {
        match (self.dedicated_imagefs(), signal) {
            (false, _) => Measure::All,
            (true, Signal::NodeFsAvailable) => Measure::VolumesAndLogs,
            (true, Signal::ImageFsAvailable) => Measure::Rootfs,
            (true, Signal::MemoryAvailable | Signal::PidAvailable) => Measure::All,
        }
    }
}

/// The thresholds crossed now: memory first (upstream's `byEvictionPriority`), then nodefs (it holds the
/// pods' own data, the cheaper reclaim), imagefs, PIDs; hard before soft.
pub fn thresholds_met(thresholds: &[Threshold], obs: &Observations) -> Vec<Met> {
    let mut met: Vec<Met> = thresholds
        .iter()
        .enumerate()
        .filter_map(|(index, t)| {
            let fs = |f: FsStats| Observed {
                capacity: f.capacity,
                available: f.available,
            };
            let o = match t.signal {
                Signal::NodeFsAvailable => fs(obs.nodefs),
                Signal::ImageFsAvailable => fs(obs.imagefs),
                Signal::MemoryAvailable => obs.memory?,
                Signal::PidAvailable => obs.pids?,
            };
            let threshold = t.bytes(o.capacity);
            (o.available < threshold).then_some(Met {
                index,
                signal: t.signal,
                threshold,
                available: o.available,
                grace_period: t.grace_period,
            })
        })
        .collect();
    met.sort_by_key(|m| (m.signal, m.grace_period));
    met
}

/// The grace a pod is killed with: upstream's one second for hard thresholds; for soft ones
/// `--eviction-max-pod-grace-period`, or the pod's own terminationGracePeriodSeconds if shorter.
pub fn kill_grace(met: &Met, pod: &Pod, max_pod_grace_period: Duration) -> Duration {
    if met.grace_period.is_zero() {
        return HARD_EVICTION_GRACE;
    }
    let own = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .map(|s| Duration::from_secs(s.max(0) as u64));
    own.map_or(max_pod_grace_period, |o| o.min(max_pod_grace_period))
}

/// The node conditions the eviction manager sets, as the node status and the admission gate read them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
}

impl Pressure {
    pub fn get(&self, c: Condition) -> bool {
        match c {
            Condition::MemoryPressure => self.memory,
            Condition::DiskPressure => self.disk,
            Condition::PidPressure => self.pid,
        }
    }

    fn set(&mut self, c: Condition, on: bool) {
        match c {
            Condition::MemoryPressure => self.memory = on,
            Condition::DiskPressure => self.disk = on,
            Condition::PidPressure => self.pid = on,
        }
    }

    pub fn any(&self) -> bool {
        self.memory || self.disk || self.pid
    }

    /// The conditions that are True, in the order upstream lists them.
    pub fn conditions(&self) -> Vec<Condition> {
        [
            Condition::MemoryPressure,
            Condition::DiskPressure,
            Condition::PidPressure,
        ]
        .into_iter()
        .filter(|c| self.get(*c))
        .collect()
    }
}

/// What one pass decided, for logs and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Any pressure condition is True.
    pub pressure: bool,
    /// `namespace/name` of the pod evicted in this pass.
    pub evicted: Option<String>,
}

pub struct Manager {
    cfg: EvictionConfig,
    nodefs_dir: PathBuf,
    disk: Arc<dyn Disk>,
    pods: Arc<dyn ActivePods>,
    failer: Arc<dyn PodFailer>,
    recorder: Arc<dyn EventRecorder>,
    pressure: watch::Sender<Pressure>,
    evicted: Evicted,
    /// Memory and PIDs; None: not observed (their thresholds are never met).
    resources: Option<Arc<dyn NodeResources>>,
    /// The node's memory capacity in bytes (`--capacity-memory`).
    capacity_memory: u64,
    /// When each condition's thresholds were last seen crossed (it holds for the transition period after).
    last_met: HashMap<Condition, Instant>,
    /// The last memory/PID observation error logged (not repeated every pass).
    observe_error: std::sync::Mutex<Option<String>>,
    /// Since when each threshold (by index) has been crossed without a break.
    first_observed: HashMap<usize, Instant>,
    last_error: Option<String>,
    /// "Nothing to evict" was logged for the current stretch of pressure.
    reported_stuck: bool,
}

/// The pressure conditions the node status and the admission gate read.
pub fn pressure_channel() -> (watch::Sender<Pressure>, watch::Receiver<Pressure>) {
    watch::channel(Pressure::default())
}

impl Manager {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: EvictionConfig,
        nodefs_dir: &Path,
        disk: Arc<dyn Disk>,
        pods: Arc<dyn ActivePods>,
        failer: Arc<dyn PodFailer>,
        recorder: Arc<dyn EventRecorder>,
        pressure: watch::Sender<Pressure>,
        evicted: Evicted,
    ) -> Self {
        Manager {
            cfg,
            nodefs_dir: nodefs_dir.to_path_buf(),
            disk,
            pods,
            failer,
            recorder,
            pressure,
            evicted,
            resources: None,
            capacity_memory: 0,
            last_met: HashMap::new(),
            observe_error: std::sync::Mutex::new(None),
            first_observed: HashMap::new(),
            last_error: None,
            reported_stuck: false,
        }
    }

    /// Observes memory (of a node with `capacity_memory` bytes) and PIDs through `resources` too.
    pub fn with_resources(
        mut self,
        resources: Arc<dyn NodeResources>,
        capacity_memory: u64,
    ) -> Self {
        self.resources = Some(resources);
        self.capacity_memory = capacity_memory;
        self
    }

    /// Every monitoring interval until `shutdown`.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        tracing::info!(
            hard = ?self.cfg.hard,
            soft = ?self.cfg.soft,
            interval = ?self.cfg.monitoring_interval,
            transition = ?self.cfg.pressure_transition_period,
            "eviction manager started"
        );
        let mut tick = tokio::time::interval(self.cfg.monitoring_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            let r = tokio::select! {
                r = self.synchronize(Instant::now()) => r,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            match r {
                Ok(_) => self.last_error = None,
                Err(e) => {
                    let msg = e.to_string();
                    if self.last_error.as_ref() != Some(&msg) {
                        tracing::warn!(error = %msg, "eviction manager");
                        self.last_error = Some(msg);
                    }
                }
            }
        }
    }

    fn observe(&self) -> Result<Observations, EvictionError> {
        let wanted = |s: Signal| {
            self.cfg
                .hard
                .iter()
                .chain(&self.cfg.soft)
                .any(|t| t.signal == s)
        };
        let mut memory = None;
        let mut pids = None;
        if let Some(r) = &self.resources {
            // A failed memory or PID reading must not stop disk eviction: that signal sits this pass out.
            let mut errors = Vec::new();
            // No capacity (an unparsable --capacity-memory): nothing to measure availability against.
            if wanted(Signal::MemoryAvailable) && self.capacity_memory > 0 {
                match r.memory_working_set() {
                    Ok(ws) => {
                        memory = Some(Observed {
                            capacity: self.capacity_memory,
                            available: self.capacity_memory.saturating_sub(ws),
                        })
                    }
                    Err(e) => errors.push(e.to_string()),
                }
            }
            if wanted(Signal::PidAvailable) {
                match r.pids() {
                    Ok(p) => {
                        pids = Some(Observed {
                            capacity: p.max,
                            available: p.max.saturating_sub(p.running),
                        })
                    }
                    Err(e) => errors.push(e.to_string()),
                }
            }
            let error = (!errors.is_empty()).then(|| errors.join("; "));
            let mut last = self.observe_error.lock().unwrap_or_else(|p| p.into_inner());
            if error.is_some() && *last != error {
                tracing::warn!(
                    error = error.as_deref().unwrap_or_default(),
                    "eviction manager: observing memory/PIDs"
                );
            }
            *last = error;
        }
        Ok(Observations {
            nodefs: self.disk.fs_stats(&self.nodefs_dir)?,
            imagefs: self.disk.fs_stats(&self.cfg.imagefs_dir)?,
            memory,
            pids,
        })
    }

    /// What a pod uses of what `signal` starves of.
    fn usage(&self, signal: Signal, pod: &Pod, status: &PodStatus) -> PodUsage {
        match (signal, &self.resources) {
            (Signal::MemoryAvailable, Some(r)) => {
                let (memory, containers) = r.pod_memory(pod, status);
                PodUsage {
                    memory,
                    containers: containers
                        .into_iter()
                        .map(|(name, memory)| rank::ContainerUsage {
                            name,
                            memory,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }
            }
            (Signal::PidAvailable, Some(r)) => PodUsage {
                processes: r.pod_processes(pod),
                ..Default::default()
            },
            _ => self.disk.pod_usage(pod, status),
        }
    }

    /// One pass: observe, update the condition, evict at most one pod.
    pub async fn synchronize(&mut self, now: Instant) -> Result<Outcome, EvictionError> {
        let obs = self.observe()?;
        let all: Vec<Threshold> = self
            .cfg
            .hard
            .iter()
            .chain(&self.cfg.soft)
            .copied()
            .collect();
        let met = thresholds_met(&all, &obs);
        for m in &met {
            self.last_met.insert(m.signal.condition(), now);
        }
        self.first_observed
            .retain(|i, _| met.iter().any(|m| m.index == *i));
        for m in &met {
            self.first_observed.entry(m.index).or_insert(now);
        }
        // Each condition holds while one of its thresholds is crossed and for the transition period after.
        let mut pressure = Pressure::default();
        for (c, t) in &self.last_met {
            let on = now.duration_since(*t) < self.cfg.pressure_transition_period
                || met.iter().any(|m| m.signal.condition() == *c);
            pressure.set(*c, on);
        }
        let was = *self.pressure.borrow();
        if was != pressure {
            for c in [
                Condition::MemoryPressure,
                Condition::DiskPressure,
                Condition::PidPressure,
            ] {
                if was.get(c) != pressure.get(c) {
                    tracing::info!(
                        ?met,
                        "node condition {} is now {}",
                        c.as_str(),
                        if pressure.get(c) { "True" } else { "False" }
                    );
                }
            }
            self.pressure.send_replace(pressure);
        }
        let mut outcome = Outcome {
            pressure: pressure.any(),
            evicted: None,
        };
        // The condition follows every crossing at once; evictions wait for soft thresholds' grace.
        let due = met.iter().find(|m| {
            self.first_observed
                .get(&m.index)
                .is_some_and(|t| now.duration_since(*t) >= m.grace_period)
        });
        let Some(starved) = due.copied() else {
            self.reported_stuck = false;
            return Ok(outcome);
        };
        let m = obs.measure(starved.signal);
        let candidates: Vec<Candidate> = self
            .pods
            .active_pods()
            .into_iter()
            .filter(|(p, _)| {
                !self
                    .evicted
                    .contains(p.metadata.uid.as_deref().unwrap_or_default())
            })
            .map(|(pod, status)| Candidate {
                usage: self.usage(starved.signal, &pod, &status),
                pod,
            })
            .collect();
        for c in rank::rank_for(candidates, starved.signal, m) {
            let key = pod_key(&c.pod);
            if rank::is_critical(&c.pod) {
                tracing::debug!(pod = %key, "not evicting a critical pod");
                continue;
            }
            let message = rank::eviction_message_for(
                starved.signal,
                &c.pod,
                &c.usage,
                starved.threshold,
                starved.available,
            );
            let grace = kill_grace(&starved, &c.pod, self.cfg.max_pod_grace_period);
            self.evict(&c.pod, &message, grace).await?;
            tracing::warn!(pod = %key, signal = starved.signal.as_str(), "evicted pod: {message}");
            outcome.evicted = Some(key);
            break;
        }
        if outcome.evicted.is_some() {
            self.reported_stuck = false;
        } else if !self.reported_stuck {
            self.reported_stuck = true;
            tracing::warn!(
                signal = starved.signal.as_str(),
                available = starved.available,
                threshold = starved.threshold,
                "threshold crossed and no pod that may be evicted"
            );
        }
        Ok(outcome)
    }

    async fn evict(&self, pod: &Pod, message: &str, grace: Duration) -> Result<(), EvictionError> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let failure = Failure {
            reason: REASON.into(),
            message: message.to_string(),
            disruption: true,
        };
        // First: from now on the workload loop cannot start it again.
        self.evicted.insert(uid, &failure);
        self.recorder.record(
            &ObjectRef::pod(pod),
            EventType::Warning,
            REASON,
            message.to_string(),
        );
        let killed = self.pods.kill(uid, grace).await;
        // The status is posted even when the kill reported an error: the pod is out of the runtime.
        self.failer.fail(pod, &failure).await?;
        match killed {
            Ok(()) | Err(RuntimeError::NotFound(_)) => Ok(()),
            Err(source) => Err(EvictionError::Stop {
                pod: pod_key(pod),
                source,
            }),
        }
    }
}

fn pod_key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The gate the workload loop runs pods through while this manager watches the node.
pub fn gate(
    inner: Arc<dyn Runtime>,
    pressure: watch::Receiver<Pressure>,
    evicted: Evicted,
    failer: Arc<dyn PodFailer>,
    recorder: Arc<dyn EventRecorder>,
) -> Arc<dyn Runtime> {
    Arc::new(admission::AdmissionGate::new(
        inner, pressure, evicted, failer, recorder,
    ))
}

#[cfg(test)]
#[path = "eviction_pressure_tests.rs"]
mod pressure_tests;
#[cfg(test)]
#[path = "eviction_tests.rs"]
mod tests;
