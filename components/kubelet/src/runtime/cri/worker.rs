//! One pod on CRI: the kubelet's per-pod sync. Each `sync` step makes the sandbox (pulling the pause image
//! first), pulls images per imagePullPolicy, creates and starts containers, notices exits and restarts them
//! per restartPolicy with the crash-loop backoff (CrashLoopBackOff), and runs liveness/readiness probes.
//! Init containers run first, one at a time ([`crate::init_containers`]; sidecars, startup probes:
//! [`init_sync`]); volumes are set up before the
//! sandbox and API-backed ones refreshed every [`VOLUME_RESYNC`] ([`crate::volumes`]); each container's
//! env and mounts are resolved when it is created ([`crate::env`]), with the Service variables and the
//! kubelet's /etc/hosts; the sandbox gets the pod's host name and DNS config ([`dns_hosts`]). Lifecycle hooks run right after
//! StartContainer (postStart: a failure kills the container) and before StopContainer (preStop, within
//! the grace period) ([`hooks`]). Each step is reported as the kubelet's Events ([`crate::events`]).
//! Time is passed in, so the logic is tested with a fake CRI and no clock.
//!
//! Each sync observes, plans, then acts: what the sandbox and each container were seen to be becomes
//! the sync's actions in [`pod_plan`] (pure data, upstream's computePodActions), which the worker takes
//! through its CRI client. By concern: the sandbox ([`sandbox`]), the volumes ([`volume_sync`]), each
//! container's sync ([`containers`]) and start ([`start`]), probes ([`probes`], startup ones in
//! [`init_sync`]), killing ([`kill`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};

use super::api::{CriApi, CriError, CriState};
use super::hooks;
use super::probe::{self, Outcome, ProbeState};
use super::spec;
use crate::container_status::{
    ContainerState, ContainerStatus, LinuxUser, RestartPolicy, Terminated,
};
use crate::dns_config::{DnsNotice, DnsSettings};
use crate::env;
use crate::env_resources::NodeAllocatable;
use crate::events::{EventRecorder, EventType, NoopRecorder, ObjectRef};
use crate::pod_objects::PodObjects;
use crate::runtime::{Backoff, PodStatus, DEFAULT_GRACE};
use crate::services::ServiceLister;
use crate::sidecars;
use crate::volumes::PodVolumes;
use pod_plan::{
    ContainerSeen, ContainerStep, ExitPlan, PodSeen, RestartTrack, SandboxSeen, VolumeStep,
};

/// How often configMap, secret and projected volumes are re-read (changes show within a minute).
pub const VOLUME_RESYNC: Duration = Duration::from_secs(10);

/// Node-wide settings every pod worker shares.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub log_root: PathBuf,
    /// Pulled before the first sandbox; containerd's `sandbox_image` must name the same image.
    pub pause_image: String,
    pub backoff: Backoff,
    pub node_name: String,
    pub node_ip: String,
    /// `<root-dir>/pods`: each pod's volumes live under `<uid>/volumes/`.
    pub pods_root: PathBuf,
    /// Secret and projected volumes on tmpfs (needs root).
    pub secrets_in_memory: bool,
    /// What resourceFieldRef limits read when a container has none (upstream's default).
    pub allocatable: NodeAllocatable,
    /// Pods' DNS (cluster DNS, cluster domain, the host's resolv.conf).
    pub dns: DnsSettings,
    /// The node's hosts file, which hostNetwork pods' /etc/hosts copies.
    pub node_hosts_file: PathBuf,
    /// Makes and limits pods' cgroups ([`crate::qos_cgroups`]); None: containerd's runc makes them
    /// unlimited (in-process test kubelets, which must not touch the host's cgroups).
    pub cgroups: Option<Arc<dyn crate::cgroupfs::Cgroups>>,
    /// `--pod-max-pids`.
    pub pod_pids_limit: Option<i64>,
}

#[derive(Debug)]
struct Ctr {
    spec: Container,
    /// The pod's policy, or for an init container its own ([`sidecars::init_policy`]).
    policy: RestartPolicy,
    /// The current (latest) container.
    id: Option<String>,
    /// The exited container before it, kept so its log stays for `kubectl logs --previous`.
    previous: Option<String>,
    /// Containers created so far; the next one's attempt number.
    runs: u32,
    state: ContainerState,
    last_termination: Option<Terminated>,
    /// The exit of `id` has been acted on.
    exit_handled: bool,
    restart_at: Option<Instant>,
    /// The back-off before `restart_at`, shown in the CrashLoopBackOff message.
    backoff: Duration,
    /// Until then the state still shows the exit (Terminated) before it turns to CrashLoopBackOff.
    exit_shown_until: Option<Instant>,
    /// Terminated and not restarting (restartPolicy).
    done: bool,
    pull_failures: u32,
    pull_retry_at: Option<Instant>,
    /// The run (`runs`) whose Pulling/Pulled events were recorded: a create that keeps failing (config
    /// error) retries every sync, and would otherwise record them every time.
    image_reported: Option<u32>,
    readiness: Option<ProbeState>,
    liveness: Option<ProbeState>,
    ready: bool,
    /// The startup probe of the current run; liveness and readiness wait for it ([`init_sync`]).
    startup: Option<ProbeState>,
    /// The current run passed its startup probe (or has none).
    started: bool,
    /// An init container with restartPolicy Always: a sidecar ([`crate::sidecars`]).
    restartable: bool,
    /// What the runtime last reported as the current run's user (CRI ContainerStatus `user`).
    user: Option<LinuxUser>,
}

impl Ctr {
    fn new(spec: Container, policy: RestartPolicy, first_reason: &str) -> Self {
        Ctr {
            spec,
            policy,
            id: None,
            previous: None,
            runs: 0,
            state: waiting(first_reason, None),
            last_termination: None,
            exit_handled: false,
            restart_at: None,
            backoff: Duration::ZERO,
            exit_shown_until: None,
            done: false,
            pull_failures: 0,
            pull_retry_at: None,
            image_reported: None,
            readiness: None,
            liveness: None,
            ready: false,
            startup: None,
            started: false,
            restartable: false,
            user: None,
        }
    }

    fn restart_count(&self) -> i32 {
        self.runs.saturating_sub(1) as i32
    }

    /// Exited 0 and not to be restarted (a completed init container).
    fn succeeded(&self) -> bool {
        self.done && matches!(&self.state, ContainerState::Terminated(t) if t.exit_code == 0)
    }

    fn status(&self) -> ContainerStatus {
        ContainerStatus {
            name: self.spec.name.clone(),
            image: self.spec.image.clone().unwrap_or_default(),
            container_id: self
                .id
                .as_ref()
                .map(|id| format!("containerd://{id}"))
                .unwrap_or_default(),
            restart_count: self.restart_count(),
            state: self.state.clone(),
            last_termination: self.last_termination.clone(),
            ready: self.ready,
            restarting: !self.done && matches!(self.state, ContainerState::Terminated(_)),
            started: self.started && matches!(self.state, ContainerState::Running { .. }),
            restartable: self.restartable,
            user: self.user.clone(),
        }
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

fn waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState::Waiting {
        reason: reason.into(),
        message,
    }
}

fn from_nanos(ns: i64) -> Option<SystemTime> {
    (ns > 0).then(|| UNIX_EPOCH + Duration::from_nanos(ns as u64))
}

pub struct PodWorker {
    pod: Pod,
    uid: String,
    key: String,
    sandbox_config: cri::PodSandboxConfig,
    sandbox_id: Option<String>,
    pod_ip: Option<String>,
    started_at: SystemTime,
    /// Init containers first (`n_init` of them), then the app containers.
    ctrs: Vec<Ctr>,
    n_init: usize,
    /// The init sequence has completed once ([`init_sync`]): only sidecars are synced from then on.
    initialized: bool,
    volumes: PodVolumes,
    next_volume_refresh: Option<Instant>,
    objects: Option<Arc<dyn PodObjects>>,
    /// The cluster's Services, for containers' Service variables (none without an API).
    services: Option<Arc<dyn ServiceLister>>,
    /// The DNS notices last recorded as events (a sandbox retried every sync would repeat them).
    dns_reported: Vec<DnsNotice>,
    host_network: bool,
    /// spec.runtimeClassName: its RuntimeClass's handler is asked of CRI for the sandbox.
    runtime_class: Option<String>,
    /// The pod's terminationGracePeriodSeconds.
    pub grace: Duration,
    cfg: Arc<WorkerConfig>,
    cri: Arc<dyn CriApi>,
    recorder: Arc<dyn EventRecorder>,
    /// The pod as its events name it.
    obj: ObjectRef,
    /// Ephemeral containers (`kubectl debug`), started once each ([`ephemeral`]).
    ephemeral: ephemeral::Ephemeral,
    /// Why the last in-place resize could not be applied ([`resize`]).
    resize_error: Option<String>,
    /// The pod ended and its sandbox was stopped ([`terminal_sandbox`]): syncing stops.
    sandbox_released: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("pod {pod}: {message}")]
    Spec { pod: String, message: String },
    #[error("pod {pod}: {message}")]
    Cleanup { pod: String, message: String },
}

impl PodWorker {
    pub fn new(
        pod: &Pod,
        cfg: Arc<WorkerConfig>,
        cri: Arc<dyn CriApi>,
    ) -> Result<Self, WorkerError> {
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        let invalid = |message: String| WorkerError::Spec {
            pod: key.clone(),
            message,
        };
        let spec = pod.spec.as_ref().ok_or_else(|| invalid("no spec".into()))?;
        if spec.containers.is_empty() {
            return Err(invalid("no containers".into()));
        }
        // An invalid name fails the sandbox (with upstream's message) when it is made; the config
        // carries the name from the start, since CreateContainer sends it too (containerd's HOSTNAME).
        let hostname =
            crate::pod_hostname::sandbox_hostname(pod, &cfg.dns.cluster_domain).unwrap_or_default();
        let sandbox_config = spec::sandbox_config(pod, &cfg.log_root, 0, &hostname)
            .map_err(|e| invalid(e.to_string()))?;
        let volumes = PodVolumes::new(pod, &cfg.pods_root, false)
            .map_err(|e| invalid(e.to_string()))?
            .secrets_in_memory(cfg.secrets_in_memory)
            .node_allocatable(cfg.allocatable.clone());
        let policy = RestartPolicy::parse(spec.restart_policy.as_deref());
        let inits = spec.init_containers.clone().unwrap_or_default();
        let first = if inits.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let mut ctrs: Vec<Ctr> = inits
            .iter()
            .map(|c| Ctr {
                restartable: sidecars::is_restartable(c),
                ..Ctr::new(c.clone(), sidecars::init_policy(c, policy), first)
            })
            .collect();
        ctrs.extend(
            spec.containers
                .iter()
                .cloned()
                .map(|c| Ctr::new(c, policy, first)),
        );
        let mut w = PodWorker {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            key: key.clone(),
            sandbox_config,
            sandbox_id: None,
            pod_ip: None,
            started_at: SystemTime::now(),
            ctrs,
            n_init: inits.len(),
            initialized: false,
            volumes,
            next_volume_refresh: None,
            objects: None,
            services: None,
            dns_reported: Vec::new(),
            host_network: spec.host_network == Some(true),
            runtime_class: spec.runtime_class_name.clone().filter(|c| !c.is_empty()),
            grace: spec
                .termination_grace_period_seconds
                .map(|s| Duration::from_secs(s.max(0) as u64))
                .unwrap_or(DEFAULT_GRACE),
            pod: pod.clone(),
            cfg,
            cri,
            recorder: Arc::new(NoopRecorder),
            obj: ObjectRef::pod(pod),
            ephemeral: Default::default(),
            resize_error: None,
            sandbox_released: false,
        };
        w.add_ephemeral(pod);
        Ok(w)
    }

    /// Where this pod's events go (none without).
    pub fn with_recorder(mut self, recorder: Arc<dyn EventRecorder>) -> Self {
        self.recorder = recorder;
        self
    }

    /// Records an event about container `i`, or the pod itself.
    fn event(&self, i: Option<usize>, type_: EventType, reason: &str, message: String) {
        let obj = match i {
            Some(i) => self.obj.container(&self.ctrs[i].spec.name, i < self.n_init),
            None => self.obj.clone(),
        };
        self.recorder.record(&obj, type_, reason, message);
    }

    /// A warning for a failure that repeats every sync until it goes away: recorded when container `i`'s
    /// waiting message changes to `waiting_message`, not on every retry (they would use up the pod's
    /// event budget).
    fn warn_on_change(&self, i: usize, reason: &str, waiting_message: &str, message: String) {
        let same = matches!(&self.ctrs[i].state, ContainerState::Waiting { message: Some(m), .. } if m == waiting_message);
        if !same {
            self.event(Some(i), EventType::Warning, reason, message);
        }
    }

    /// `<pod>_<namespace>(<uid>)`, as upstream names a pod in messages.
    fn pod_desc(&self) -> String {
        format!("{}_{}({})", self.obj.name, self.obj.namespace, self.uid)
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// Gives the worker the API objects its env and volumes read; with them it also mounts the
    /// service-account volume (unless the pod opts out).
    pub fn with_objects(mut self, objects: Arc<dyn PodObjects>) -> Result<Self, WorkerError> {
        self.volumes = PodVolumes::new(&self.pod, &self.cfg.pods_root, true)
            .map_err(|e| WorkerError::Spec {
                pod: self.key.clone(),
                message: e.to_string(),
            })?
            .secrets_in_memory(self.cfg.secrets_in_memory)
            .node_allocatable(self.cfg.allocatable.clone());
        self.objects = Some(objects);
        Ok(self)
    }

    /// Gives the worker the cluster's Services for its containers' Service variables.
    pub fn with_services(mut self, services: Arc<dyn ServiceLister>) -> Self {
        self.services = Some(services);
        self
    }

    pub fn status(&self) -> PodStatus {
        PodStatus {
            uid: self.uid.clone(),
            started_at: self.started_at,
            pod_ip: self.pod_ip.clone(),
            containers: self.ctrs[self.n_init..].iter().map(Ctr::status).collect(),
            // A regular init container is ready once it has completed (upstream's report).
            init_containers: self.ctrs[..self.n_init]
                .iter()
                .map(|c| ContainerStatus {
                    // A sidecar is ready per its readiness probe, like an app container.
                    ready: if c.restartable {
                        c.ready
                    } else {
                        c.succeeded()
                    },
                    ..c.status()
                })
                .collect(),
            ephemeral_containers: self.ephemeral_statuses(),
            resize: self.resize_status(),
        }
    }

    /// One step towards the pod's desired state; an ended pod's last step gives its sandbox back.
    pub async fn sync(&mut self, now: Instant) {
        if self.is_finished() {
            return;
        }
        self.sync_pod(now).await;
        self.release_terminal_sandbox().await;
    }

    /// Observes the sandbox, plans ([`pod_plan::compute_pod_actions`]) and acts: kill a lost sandbox,
    /// the volumes, a new sandbox; then the containers, the init containers first (a regular one to its
    /// successful exit, a sidecar until started: [`init_sync`]), the app containers once all have.
    async fn sync_pod(&mut self, now: Instant) {
        let seen = PodSeen {
            sandbox: self.observe_sandbox().await,
            volumes_set_up: self.volumes.is_set_up(),
            volume_refresh_due: self.next_volume_refresh.is_some_and(|at| now >= at),
        };
        let actions = pod_plan::compute_pod_actions(&seen);
        if actions.wait {
            return;
        }
        if let (Some(why), Some(sb)) = (actions.kill_sandbox, self.sandbox_id.clone()) {
            self.drop_sandbox(&sb, why).await;
        }
        if actions.volumes == VolumeStep::SetUpBesideSandbox {
            if !self.set_up_beside_sandbox(now).await {
                return;
            }
        } else {
            if !self.sync_volumes(actions.volumes, now).await {
                return;
            }
            if actions.create_sandbox && !self.create_sandbox().await {
                return;
            }
        }
        if !self.sync_init(now).await {
            return;
        }
        for i in self.n_init..self.ctrs.len() {
            self.sync_container(i, now).await;
        }
        self.finish_sidecars(now).await;
        self.sync_ephemeral(now).await;
    }

    /// The pod's object changed in the API: its labels and annotations are taken (containers created
    /// from now on read them, as upstream's pod workers sync the latest pod) and its downwardAPI
    /// volumes rewritten at once, without waiting for the resync.
    pub async fn update_pod(&mut self, pod: &Pod) {
        // Ephemeral containers only ever get added; the next sync starts them.
        self.add_ephemeral(pod);
        // Admitted in-place resizes (the runtime hands over allocated resources only).
        self.resize(pod).await;
        let (labels, annotations) = (&pod.metadata.labels, &pod.metadata.annotations);
        if self.pod.metadata.labels == *labels && self.pod.metadata.annotations == *annotations {
            return;
        }
        self.pod.metadata.labels = labels.clone();
        self.pod.metadata.annotations = annotations.clone();
        self.volumes.update_pod(pod);
        if self.volumes.is_set_up() {
            self.refresh_volumes().await;
        }
    }
}

// The worker by concern; each a child, to use its private state.
#[path = "pod_plan.rs"]
mod pod_plan;

#[path = "worker_sandbox.rs"]
mod sandbox;

#[path = "worker_volumes.rs"]
mod volume_sync;

#[path = "worker_containers.rs"]
mod containers;

#[path = "worker_start.rs"]
mod start;

#[path = "worker_probes.rs"]
mod probes;

#[path = "worker_kill.rs"]
mod kill;

#[cfg(test)]
#[path = "worker_tests.rs"]
mod tests;

#[path = "adopt.rs"]
mod adopt;

#[path = "dns_hosts.rs"]
mod dns_hosts;

#[path = "worker_security.rs"]
mod worker_security;

#[path = "pod_cgroup.rs"]
mod pod_cgroup;

#[path = "resize.rs"]
mod resize;

#[cfg(test)]
#[path = "resize_tests.rs"]
mod resize_tests;

#[path = "init_sync.rs"]
mod init_sync;

#[path = "termination.rs"]
mod termination;

#[path = "kill_status.rs"]
mod kill_status;

#[path = "initial_delay.rs"]
mod initial_delay;

#[path = "ephemeral.rs"]
mod ephemeral;

#[path = "terminal_sandbox.rs"]
mod terminal_sandbox;

#[cfg(test)]
#[path = "worker_events_tests.rs"]
mod events_tests;

#[cfg(test)]
#[path = "worker_mounts_tests.rs"]
mod mounts_tests;

#[cfg(test)]
#[path = "terminal_sandbox_tests.rs"]
mod terminal_sandbox_tests;
