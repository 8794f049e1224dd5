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

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};

use super::api::{CriApi, CriError, CriState};
use super::hooks;
use super::probe::{self, Outcome, ProbeState};
use super::spec;
use crate::container_status::{ContainerState, ContainerStatus, RestartPolicy, Terminated};
use crate::dns_config::{DnsNotice, DnsSettings};
use crate::env;
use crate::env_resources::NodeAllocatable;
use crate::events::{EventRecorder, EventType, NoopRecorder, ObjectRef};
use crate::pod_objects::PodObjects;
use crate::runtime::{Backoff, PodStatus, DEFAULT_GRACE};
use crate::services::ServiceLister;
use crate::sidecars;
use crate::volumes::PodVolumes;

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

    /// The CRI handler of the pod's RuntimeClass ("" without one), read each time a sandbox is
    /// made, as upstream's runtimeClassManager; the error is upstream's sandbox failure text.
    async fn runtime_handler(&self) -> Result<String, String> {
        let Some(class) = &self.runtime_class else {
            return Ok(String::new());
        };
        let not_found = || format!("runtimeclass.node.k8s.io {class:?} not found");
        let Some(objects) = &self.objects else {
            return Err(not_found());
        };
        match objects.runtime_handler(class).await {
            Ok(Some(h)) => Ok(h),
            Ok(None) => Err(not_found()),
            Err(e) => Err(format!("failed to lookup RuntimeClass {class}: {e}")),
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

    async fn sync_pod(&mut self, now: Instant) {
        if let Some(sb) = self.sandbox_id.clone() {
            match self.cri.pod_sandbox_status(&sb).await {
                Ok(s) if s.ready => {}
                Ok(_) => self.drop_sandbox(&sb, "not ready").await,
                Err(e) if e.is_not_found() => self.drop_sandbox(&sb, "gone").await,
                Err(e) => {
                    tracing::warn!(pod = %self.key, error = %e, "pod sandbox status");
                    return;
                }
            }
        }
        if self.sandbox_id.is_none() && !self.volumes.is_set_up() {
            // A new pod: its volumes and its sandbox do not depend on each other, so they are set up
            // side by side (the first sync costs the slower of the two, not their sum).
            let objects = self.objects.clone();
            let prepared = match self.runtime_handler().await {
                Ok(h) => self.prepare_pod().map(|()| h),
                Err(e) => Err(e),
            };
            let (cri, cfg, config, key) = (
                self.cri.as_ref(),
                &self.cfg,
                &self.sandbox_config,
                &self.key,
            );
            let host_network = self.host_network;
            let (volumes, sandbox) = tokio::join!(
                self.volumes.set_up(objects.as_deref(), unix_now()),
                async move {
                    let handler = prepared?;
                    new_sandbox(cri, cfg, config, &handler, host_network, key).await
                },
            );
            match sandbox {
                Ok((id, ip)) => self.sandbox_ready(id, ip),
                Err(message) => self.sandbox_failed(message),
            }
            match volumes {
                Ok(()) => self.next_volume_refresh = Some(now + VOLUME_RESYNC),
                Err(e) => {
                    self.volumes_failed(e);
                    return;
                }
            }
            if self.sandbox_id.is_none() {
                return;
            }
        } else {
            if !self.sync_volumes(now).await {
                return;
            }
            if self.sandbox_id.is_none() {
                let handler = match self.runtime_handler().await {
                    Ok(h) => h,
                    Err(message) => {
                        self.sandbox_failed(message);
                        return;
                    }
                };
                if let Err(message) = self.prepare_pod() {
                    self.sandbox_failed(message);
                    return;
                }
                let made = new_sandbox(
                    self.cri.as_ref(),
                    &self.cfg,
                    &self.sandbox_config,
                    &handler,
                    self.host_network,
                    &self.key,
                )
                .await;
                match made {
                    Ok((id, ip)) => self.sandbox_ready(id, ip),
                    Err(message) => {
                        self.sandbox_failed(message);
                        return;
                    }
                }
            }
        }
        // Init containers in order (a regular one to its successful exit, a sidecar until started),
        // and app containers only after all of them ([`init_sync`]).
        if !self.sync_init(now).await {
            return;
        }
        for i in self.n_init..self.ctrs.len() {
            self.sync_container(i, now).await;
        }
        self.finish_sidecars(now).await;
        self.sync_ephemeral(now).await;
    }

    /// Sets the volumes up (once; the pod waits in ContainerCreating until that works) and refreshes
    /// the API-backed ones every [`VOLUME_RESYNC`]. False: not ready to go on.
    async fn sync_volumes(&mut self, now: Instant) -> bool {
        let objects = self.objects.clone();
        if !self.volumes.is_set_up() {
            if let Err(e) = self.volumes.set_up(objects.as_deref(), unix_now()).await {
                self.volumes_failed(e);
                return false;
            }
            self.next_volume_refresh = Some(now + VOLUME_RESYNC);
            return true;
        }
        if self.next_volume_refresh.is_some_and(|at| now >= at) {
            self.next_volume_refresh = Some(now + VOLUME_RESYNC);
            self.refresh_volumes().await;
        }
        true
    }

    /// Rewrites the API-backed volumes from the current objects and the pod's current metadata.
    async fn refresh_volumes(&mut self) {
        let objects = self.objects.clone();
        match self.volumes.refresh(objects.as_deref(), unix_now()).await {
            Ok(changed) if !changed.is_empty() => {
                tracing::info!(pod = %self.key, volumes = ?changed, "volume contents updated")
            }
            Ok(_) => {}
            // The old contents stay; the next refresh tries again.
            Err(e) => tracing::warn!(pod = %self.key, error = %e, "refreshing volumes"),
        }
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

    /// The sandbox died (its pause process, or the node's network for it): remove it with its containers;
    /// the next step makes a new one, and the containers restart per restartPolicy (their old ids are gone).
    async fn drop_sandbox(&mut self, id: &str, why: &str) {
        tracing::warn!(pod = %self.key, sandbox = %id, why, "pod sandbox lost; recreating it");
        self.event(
            None,
            EventType::Normal,
            "SandboxChanged",
            "Pod sandbox changed, it will be killed and re-created.".into(),
        );
        let _ = self.cri.stop_pod_sandbox(id).await;
        if let Err(e) = self.cri.remove_pod_sandbox(id).await {
            if !e.is_not_found() {
                tracing::warn!(pod = %self.key, sandbox = %id, error = %e, "removing lost sandbox");
            }
        }
        self.sandbox_id = None;
        self.pod_ip = None;
        if let Some(m) = self.sandbox_config.metadata.as_mut() {
            m.attempt += 1;
        }
        // A new sandbox runs the init containers again before app containers restart (upstream).
        if self.ctrs[self.n_init..].iter().any(|c| !c.done) {
            self.initialized = false;
            for c in &mut self.ctrs[..self.n_init] {
                c.done = false;
                c.id = None;
                c.previous = None;
                c.ready = false;
                c.state = waiting("PodInitializing", None);
            }
            if self.n_init > 0 {
                // Their containers went with the sandbox; they restart (per policy) after init.
                for c in self.ctrs[self.n_init..].iter_mut().filter(|c| !c.done) {
                    c.ready = false;
                    c.state = waiting("PodInitializing", None);
                }
            }
        }
    }

    /// The pod waits in ContainerCreating until its volumes can be set up.
    fn volumes_failed(&mut self, e: crate::volumes::VolumeError) {
        let message = format!("MountVolume.SetUp failed: {e}");
        tracing::warn!(pod = %self.key, error = %e, "setting up volumes");
        let same = matches!(&self.ctrs[0].state, ContainerState::Waiting { message: Some(m), .. } if *m == message);
        if !same {
            self.event(None, EventType::Warning, "FailedMount", message.clone());
        }
        for c in self.ctrs.iter_mut().filter(|c| c.id.is_none()) {
            c.state = waiting("ContainerCreating", Some(message.clone()));
        }
    }

    fn sandbox_ready(&mut self, id: String, ip: Option<String>) {
        tracing::info!(pod = %self.key, sandbox = %id, ip = ?ip, "pod sandbox running");
        self.pod_ip = ip;
        self.sandbox_id = Some(id);
    }

    /// The pod waits in ContainerCreating; the next sync tries again.
    fn sandbox_failed(&mut self, message: String) {
        tracing::warn!(pod = %self.key, error = %message, "creating pod sandbox");
        let same = matches!(&self.ctrs[0].state, ContainerState::Waiting { message: Some(m), .. } if *m == message);
        if !same {
            self.event(
                None,
                EventType::Warning,
                "FailedCreatePodSandBox",
                format!("Failed to create pod sandbox: {message}"),
            );
        }
        for c in self.ctrs.iter_mut().filter(|c| c.id.is_none()) {
            c.state = waiting("ContainerCreating", Some(message.clone()));
        }
    }

    async fn sync_container(&mut self, i: usize, now: Instant) {
        let cri = self.cri.clone();
        if self.ctrs[i].done {
            return;
        }
        if let Some(id) = self.ctrs[i].id.clone() {
            let exited = match cri.container_status(&id).await {
                Ok(st) if st.state == CriState::Running => {
                    let started_at = from_nanos(st.started_at).unwrap_or_else(SystemTime::now);
                    self.ctrs[i].state = ContainerState::Running { pid: 0, started_at };
                    self.hold_probes_for_initial_delay(i, started_at, now);
                    self.probe(i, &id, now).await;
                    return;
                }
                Ok(st) if st.state == CriState::Created => {
                    // Created but not started: StartContainer is retried below by recreating.
                    Terminated {
                        exit_code: 128,
                        signal: None,
                        reason: "StartError".into(),
                        message: Some(st.message).filter(|m| !m.is_empty()),
                        started_at: None,
                        finished_at: SystemTime::now(),
                    }
                }
                // The message is read once, when the exit is first seen: only then is it used.
                Ok(st) => kill_status::terminated(
                    &st,
                    if self.ctrs[i].exit_handled {
                        None
                    } else {
                        self.exit_message(i, &st)
                    },
                ),
                Err(e) if e.is_not_found() => Terminated {
                    exit_code: 137,
                    signal: None,
                    reason: "ContainerStatusUnknown".into(),
                    message: Some("the container could not be located".into()),
                    started_at: None,
                    finished_at: SystemTime::now(),
                },
                Err(e) => {
                    tracing::warn!(pod = %self.key, container = %self.ctrs[i].spec.name, error = %e, "container status");
                    return;
                }
            };
            let backoff = self.cfg.backoff;
            let policy = self.ctrs[i].policy;
            let key = self.key.clone();
            let c = &mut self.ctrs[i];
            if !c.exit_handled {
                c.exit_handled = true;
                c.ready = false;
                c.readiness = None;
                c.liveness = None;
                tracing::info!(pod = %key, container = %c.spec.name, exit_code = exited.exit_code, reason = %exited.reason, "container exited");
                if !policy.restarts_after(exited.exit_code) {
                    c.state = ContainerState::Terminated(exited);
                    c.done = true;
                    return;
                }
                // The first restart is immediate, then base, doubling up to max (the kubelet's backoff).
                let delay = match c.restart_count() {
                    0 => Duration::ZERO,
                    n => backoff.delay(n as u32 - 1),
                };
                c.restart_at = Some(now + delay);
                c.backoff = delay;
                if delay.is_zero() {
                    c.last_termination = Some(exited);
                } else {
                    // Upstream's kubelet reports an exit in the sync that sees it and the back-off
                    // only in its pod worker's next sync (~10 s on): `kubectl get pods` shows Error
                    // before CrashLoopBackOff, and a client waiting for state.terminated sees it.
                    c.state = ContainerState::Terminated(exited);
                    c.exit_shown_until = Some(now + (delay / 2).min(EXIT_SHOWN_FOR));
                    return;
                }
            }
            if c.exit_shown_until.is_some_and(|until| now < until) {
                return;
            }
            if c.exit_shown_until.take().is_some() {
                if let ContainerState::Terminated(t) = &c.state {
                    c.last_termination = Some(t.clone());
                }
            }
            if c.restart_at.is_some_and(|at| now < at) {
                // The whole back-off, not the time left: the status only changes when the state does.
                let secs = c.backoff.as_secs();
                let entering = !matches!(&c.state, ContainerState::Waiting { reason, .. } if reason == "CrashLoopBackOff");
                c.state = waiting(
                    "CrashLoopBackOff",
                    Some(format!(
                        "back-off {secs}s restarting failed container={} pod={key}",
                        c.spec.name
                    )),
                );
                if entering {
                    let name = c.spec.name.clone();
                    let message = format!(
                        "Back-off restarting failed container {name} in pod {}",
                        self.pod_desc()
                    );
                    self.event(Some(i), EventType::Warning, "BackOff", message);
                }
                return;
            }
        }
        self.start_container(i, now).await;
    }

    /// Pulls (per policy), creates and starts container `i`, then runs its postStart hook; a failure
    /// leaves it Waiting with the kubelet's reason, to be retried on a later sync.
    async fn start_container(&mut self, i: usize, now: Instant) {
        let cri = self.cri.clone();
        let Some(sandbox_id) = self.sandbox_id.clone() else {
            return;
        };
        let backoff = self.cfg.backoff;
        let image = self.ctrs[i].spec.image.clone().unwrap_or_default();
        let name = self.ctrs[i].spec.name.clone();
        let present = match cri.image_present(&image).await {
            Ok(p) => p,
            Err(e) => {
                self.ctrs[i].state = waiting("ErrImagePull", Some(e.to_string()));
                return;
            }
        };
        let pull = match spec::pull_policy(&self.ctrs[i].spec) {
            "Never" if !present => {
                let message =
                    format!("Container image {image:?} is not present with pull policy of Never");
                self.warn_on_change(i, "ErrImageNeverPull", &message, message.clone());
                self.ctrs[i].state = waiting("ErrImageNeverPull", Some(message));
                return;
            }
            "Never" => false,
            "IfNotPresent" => !present,
            _ => true,
        };
        let quiet = self.ctrs[i].image_reported == Some(self.ctrs[i].runs);
        if pull {
            if self.ctrs[i].pull_retry_at.is_some_and(|at| now < at) {
                let message = format!("Back-off pulling image {image:?}");
                let entering = !matches!(&self.ctrs[i].state, ContainerState::Waiting { reason, .. } if reason == "ImagePullBackOff");
                if entering {
                    self.event(Some(i), EventType::Normal, "BackOff", message.clone());
                }
                self.ctrs[i].state = waiting("ImagePullBackOff", Some(message));
                return;
            }
            tracing::info!(pod = %self.key, container = %name, %image, "pulling image");
            if !quiet {
                self.event(
                    Some(i),
                    EventType::Normal,
                    "Pulling",
                    format!("Pulling image {image:?}"),
                );
            }
            let started = Instant::now();
            match self.pull_image(&image).await {
                Ok(_) => {
                    let c = &mut self.ctrs[i];
                    c.pull_failures = 0;
                    c.pull_retry_at = None;
                    c.image_reported = Some(c.runs);
                    if !quiet {
                        self.event(
                            Some(i),
                            EventType::Normal,
                            "Pulled",
                            format!(
                                "Successfully pulled image {image:?} in {:.3}s",
                                started.elapsed().as_secs_f64()
                            ),
                        );
                    }
                }
                Err(e) => {
                    let c = &mut self.ctrs[i];
                    c.pull_failures += 1;
                    c.pull_retry_at = Some(now + backoff.delay(c.pull_failures - 1));
                    tracing::warn!(pod = %self.key, %image, error = %e, "pulling image failed");
                    c.state = waiting("ErrImagePull", Some(e.to_string()));
                    self.event(
                        Some(i),
                        EventType::Warning,
                        "Failed",
                        format!("Failed to pull image {image:?}: {e}"),
                    );
                    self.event(
                        Some(i),
                        EventType::Warning,
                        "Failed",
                        "Error: ErrImagePull".into(),
                    );
                    return;
                }
            }
        } else if !quiet {
            self.ctrs[i].image_reported = Some(self.ctrs[i].runs);
            self.event(
                Some(i),
                EventType::Normal,
                "Pulled",
                format!("Container image {image:?} already present on machine"),
            );
        }
        let attempt = self.ctrs[i].runs;
        let config = match self.container_config(i, attempt).await {
            Ok(c) => c,
            Err(message) => {
                self.warn_on_change(i, "Failed", &message, format!("Error: {message}"));
                self.ctrs[i].state = waiting("CreateContainerConfigError", Some(message));
                return;
            }
        };
        let id = match cri
            .create_container(&sandbox_id, &config, &self.sandbox_config)
            .await
        {
            Ok(id) => id,
            Err(e) => {
                self.warn_on_change(i, "Failed", &e.to_string(), format!("Error: {e}"));
                self.ctrs[i].state = waiting("CreateContainerError", Some(e.to_string()));
                return;
            }
        };
        self.event(
            Some(i),
            EventType::Normal,
            "Created",
            format!("Created container {name}"),
        );
        let c = &mut self.ctrs[i];
        c.runs += 1;
        // Keep one dead container (the run before this one) for its log; remove older ones.
        if let Some(old) = c.previous.take() {
            if let Err(e) = cri.remove_container(&old).await {
                if !e.is_not_found() {
                    tracing::warn!(pod = %self.key, container = %old, error = %e, "removing dead container");
                }
            }
        }
        c.previous = c.id.replace(id.clone());
        c.exit_handled = false;
        c.started = false;
        c.restart_at = None;
        c.exit_shown_until = None;
        if let Err(e) = cri.start_container(&id).await {
            // containerd marks the container exited (StartError); the next sync restarts it per policy.
            tracing::warn!(pod = %self.key, container = %name, error = %e, "starting container");
            self.ctrs[i].state = waiting("RunContainerError", Some(e.to_string()));
            self.event(Some(i), EventType::Warning, "Failed", format!("Error: {e}"));
            return;
        }
        tracing::info!(pod = %self.key, container = %name, id = %id, restart_count = self.ctrs[i].restart_count(), "container started");
        self.event(
            Some(i),
            EventType::Normal,
            "Started",
            format!("Started container {name}"),
        );
        if !self.post_start(i, &id).await {
            return;
        }
        let c = &mut self.ctrs[i];
        c.state = ContainerState::Running {
            pid: 0,
            started_at: SystemTime::now(),
        };
        c.readiness = c
            .spec
            .readiness_probe
            .as_ref()
            .map(|p| ProbeState::new(p, now, false));
        c.liveness = c
            .spec
            .liveness_probe
            .as_ref()
            .map(|p| ProbeState::new(p, now, true));
        c.startup = c
            .spec
            .startup_probe
            .as_ref()
            .map(|p| ProbeState::new(p, now, false));
        c.started = c.startup.is_none();
        c.ready = c.readiness.is_none() && c.started;
    }

    /// Runs container `i`'s postStart hook (if any) right after it started; on failure the container is
    /// killed (the next sync restarts it per policy, with back-off) and false is returned.
    async fn post_start(&mut self, i: usize, id: &str) -> bool {
        let Some(h) = self.ctrs[i]
            .spec
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.clone())
        else {
            return true;
        };
        let spec = self.ctrs[i].spec.clone();
        // Upstream does not bound postStart; this does, so a hung hook cannot wedge the pod's worker
        // (deleting the pod waits for the current sync).
        let limit = Some(POST_START_LIMIT);
        let Err(e) = hooks::run(
            &h,
            &spec,
            id,
            self.pod_ip.as_deref(),
            self.cri.as_ref(),
            limit,
        )
        .await
        else {
            return true;
        };
        let message = format!(
            "{} for Container {:?} in Pod {:?} failed - error: {e}",
            hooks::describe(&h),
            spec.name,
            self.pod_desc()
        );
        tracing::warn!(pod = %self.key, container = %spec.name, error = %e, "postStart hook failed; killing the container");
        self.event(
            Some(i),
            EventType::Warning,
            "FailedPostStartHook",
            message.clone(),
        );
        let grace = self.grace;
        let why = format!("FailedPostStartHook: container {} is killed", spec.name);
        if let Err(e) = self.stop_one(i, id, grace, why).await {
            tracing::warn!(pod = %self.key, container = %spec.name, error = %e, "stopping container after its postStart hook failed");
        }
        self.ctrs[i].state = waiting("PostStartHookError", Some(message));
        false
    }

    /// Stops container `i` (`id`) as the kubelet kills one: a Killing event (`why`), its preStop hook
    /// within the grace period, then StopContainer with what is left of it.
    async fn stop_one(
        &self,
        i: usize,
        id: &str,
        grace: Duration,
        why: String,
    ) -> Result<(), CriError> {
        self.stop_in_turn(i, id, grace, why, None).await
    }

    /// [`PodWorker::stop_one`]; while the pod is killed, after its preStop hook the container waits
    /// its turn in `order` (a sidecar outlives the app containers and the sidecars after it).
    async fn stop_in_turn(
        &self,
        i: usize,
        id: &str,
        grace: Duration,
        why: String,
        order: Option<&init_sync::TerminationOrder>,
    ) -> Result<(), CriError> {
        let c = &self.ctrs[i].spec;
        self.event(Some(i), EventType::Normal, "Killing", why);
        stop_container(
            self.cri.as_ref(),
            &StopCtx {
                recorder: self.recorder.as_ref(),
                obj: self.obj.container(&c.name, i < self.n_init),
                pod_desc: self.pod_desc(),
                pod_ip: self.pod_ip.as_deref(),
                turn: order.map(|o| (o, i)),
            },
            c,
            id,
            grace,
        )
        .await
    }

    /// Container `i`'s CRI config with its env (reading the ConfigMaps and Secrets it refers to) and
    /// mounts; an error is the CreateContainerConfigError message.
    async fn container_config(
        &self,
        i: usize,
        attempt: u32,
    ) -> Result<cri::ContainerConfig, String> {
        let c = &self.ctrs[i].spec;
        let ns = self.pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut fetched = env::fetch(ns, c, self.objects.as_deref())
            .await
            .map_err(|e| e.to_string())?;
        fetched.service_env = self.service_env()?;
        let ctx = env::FieldContext {
            node_name: &self.cfg.node_name,
            node_ip: &self.cfg.node_ip,
            pod_ip: self.pod_ip.as_deref(),
            allocatable: Some(&self.cfg.allocatable),
        };
        let envs = env::build(&self.pod, c, &ctx, &fetched).map_err(|e| e.to_string())?;
        let mut mounts = self
            .volumes
            .container_mounts(c, &envs)
            .map_err(|e| e.to_string())?;
        mounts.extend(self.hosts_mount(c)?);
        mounts.extend(self.termination_mount(i, attempt));
        let mut config = spec::container_config(&self.pod, c, attempt, envs, mounts)
            .map_err(|e| e.to_string())?;
        self.complete_security_context(c, &mut config).await?;
        // Requests and limits become the container's cgroup settings (enforced by containerd).
        let memory =
            kiln_common::quantity::parse(&self.cfg.allocatable.memory).map_or(0, |m| m.0 / 1000);
        if let Some(linux) = config.linux.as_mut() {
            linux.resources = Some(super::resources::linux_resources(&self.pod, c, memory));
        }
        self.ephemeral_namespaces(i, &mut config);
        Ok(config)
    }

    async fn probe(&mut self, i: usize, id: &str, now: Instant) {
        // Liveness and readiness wait for the startup probe.
        if !self.startup_probe(i, id, now).await {
            return;
        }
        let cri = self.cri.clone();
        let pod_ip = self.pod_ip.clone();
        let key = self.key.clone();
        let spec = self.ctrs[i].spec.clone();
        if let (Some(p), true) = (
            spec.liveness_probe.clone(),
            self.ctrs[i].liveness.as_ref().is_some_and(|s| s.due(now)),
        ) {
            let outcome = probe::run(&p, &spec, id, pod_ip.as_deref(), cri.as_ref()).await;
            if let Outcome::Failure(m) = &outcome {
                tracing::info!(pod = %key, container = %spec.name, "liveness probe failed: {m}");
                self.event(
                    Some(i),
                    EventType::Warning,
                    "Unhealthy",
                    format!("Liveness probe failed: {m}"),
                );
            }
            let state = self.ctrs[i].liveness.as_mut().expect("checked above");
            if state.record(now, outcome) && !state.result {
                let why = self.probe_kill_message(i, "liveness");
                tracing::info!(pod = %key, container = %spec.name, "{why}");
                self.ctrs[i].ready = false;
                if let Err(e) = self.stop_one(i, id, self.grace, why).await {
                    tracing::warn!(pod = %key, container = %spec.name, error = %e, "stopping unhealthy container");
                }
                return;
            }
        }
        let Some(p) = spec.readiness_probe.clone() else {
            self.ctrs[i].ready = true;
            return;
        };
        let Some(due) = self.ctrs[i].readiness.as_ref().map(|s| s.due(now)) else {
            self.ctrs[i].ready = true;
            return;
        };
        if due {
            let outcome = probe::run(&p, &spec, id, pod_ip.as_deref(), cri.as_ref()).await;
            if let Outcome::Failure(m) = &outcome {
                self.event(
                    Some(i),
                    EventType::Warning,
                    "Unhealthy",
                    format!("Readiness probe failed: {m}"),
                );
            }
            let state = self.ctrs[i].readiness.as_mut().expect("checked above");
            if state.record(now, outcome) {
                tracing::info!(pod = %key, container = %spec.name, ready = state.result, "readiness changed");
            }
        }
        let c = &mut self.ctrs[i];
        c.ready = c.readiness.as_ref().is_some_and(|s| s.result);
    }

    /// Stops every container (Killing event, preStop hook, SIGTERM, what is left of `grace`, SIGKILL),
    /// then the sandbox, and removes them all.
    pub async fn kill(&mut self, grace: Duration) -> Result<(), WorkerError> {
        self.merge_ephemeral_for_kill();
        let mut errors = Vec::new();
        // Only a running container gets its preStop hook and a Killing event; exited ones are just
        // removed below (StopContainer on them is a no-op).
        let running: Vec<(usize, String)> = self
            .ctrs
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.id.clone().map(|id| (i, id)))
            .collect();
        let live: Vec<usize> = running
            .iter()
            .map(|(i, _)| *i)
            .filter(|&i| matches!(self.ctrs[i].state, ContainerState::Running { .. }))
            .collect();
        let order = init_sync::TerminationOrder::new(self, &live);
        // In parallel: each container may use its whole grace period (sidecars wait their turn).
        let this = &*self;
        let order = &order;
        let stops = futures::future::join_all(running.iter().map(|(i, id)| async move {
            if matches!(this.ctrs[*i].state, ContainerState::Running { .. }) {
                let why = format!("Stopping container {}", this.ctrs[*i].spec.name);
                this.stop_in_turn(*i, id, grace, why, Some(order)).await
            } else {
                this.cri.stop_container(id, grace.as_secs() as i64).await
            }
        }))
        .await;
        for e in stops.into_iter().filter_map(Result::err) {
            if !e.is_not_found() {
                errors.push(e.to_string());
            }
        }
        self.record_final_states(&running).await;
        let cri = self.cri.clone();
        if let Some(sb) = &self.sandbox_id {
            if let Err(e) = cri.stop_pod_sandbox(sb).await {
                if !e.is_not_found() {
                    errors.push(e.to_string());
                }
            }
        }
        for c in &mut self.ctrs {
            for id in [c.id.take(), c.previous.take()].into_iter().flatten() {
                if let Err(e) = cri.remove_container(&id).await {
                    if !e.is_not_found() {
                        errors.push(e.to_string());
                    }
                }
            }
            c.ready = false;
            c.done = true;
        }
        if let Some(sb) = self.sandbox_id.take() {
            if let Err(e) = cri.remove_pod_sandbox(&sb).await {
                if !e.is_not_found() {
                    errors.push(e.to_string());
                }
            }
        }
        // Volumes go only once no container can still use them.
        if errors.is_empty() {
            if let Err(e) = self.volumes.tear_down() {
                errors.push(e.to_string());
            }
            self.remove_pod_cgroup();
        }
        if errors.is_empty() {
            tracing::info!(pod = %self.key, "pod stopped and removed");
            Ok(())
        } else {
            Err(WorkerError::Cleanup {
                pod: self.key.clone(),
                message: errors.join("; "),
            })
        }
    }
}

/// How long an exit that will be restarted after a back-off is shown as such (at most half the
/// back-off): upstream's pod worker retries a crash-looping pod's sync every ~10 s.
const EXIT_SHOWN_FOR: Duration = Duration::from_secs(5);

/// A container's shutdown window after its preStop hook: never less than this (upstream's minimum), so
/// a hook that used the whole grace period does not turn into an immediate SIGKILL.
const MIN_GRACE_AFTER_PRE_STOP: Duration = Duration::from_secs(2);
/// The bound on a postStart hook (see [`PodWorker::post_start`]).
const POST_START_LIMIT: Duration = Duration::from_secs(120);

/// What a container stop reports its preStop failure with.
struct StopCtx<'a> {
    recorder: &'a dyn EventRecorder,
    obj: ObjectRef,
    pod_desc: String,
    pod_ip: Option<&'a str>,
    /// While the pod is killed: the termination order and this container's place in it.
    turn: Option<(&'a init_sync::TerminationOrder, usize)>,
}

/// The preStop hook (bounded by `grace`, its time counted against it), the wait for its turn (what
/// is left of `grace`), then StopContainer.
async fn stop_container(
    cri: &dyn CriApi,
    ctx: &StopCtx<'_>,
    c: &Container,
    id: &str,
    grace: Duration,
) -> Result<(), CriError> {
    let mut left = grace;
    let pre_stop = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref());
    if let Some(h) = pre_stop.filter(|_| !grace.is_zero()) {
        let started = Instant::now();
        if let Err(e) = hooks::run(h, c, id, ctx.pod_ip, cri, Some(grace)).await {
            tracing::warn!(pod = %ctx.pod_desc, container = %c.name, error = %e, "preStop hook failed");
            ctx.recorder.record(
                &ctx.obj,
                EventType::Warning,
                "FailedPreStopHook",
                format!(
                    "{} for Container {:?} in Pod {:?} failed - error: {e}",
                    hooks::describe(h),
                    c.name,
                    ctx.pod_desc
                ),
            );
        }
        left = grace
            .saturating_sub(started.elapsed())
            .max(MIN_GRACE_AFTER_PRE_STOP);
    }
    if let Some((order, i)) = ctx.turn {
        let waited = order.wait_for_turn(i, left).await;
        if !waited.is_zero() {
            left = left.saturating_sub(waited).max(MIN_GRACE_AFTER_PRE_STOP);
        }
    }
    // Whole seconds, rounded up: CRI's timeout unit.
    let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    let stopped = cri.stop_container(id, secs as i64).await;
    if let Some((order, i)) = ctx.turn {
        order.terminated(i);
    }
    stopped
}

/// Pulls the pause image if missing and runs the pod's sandbox; returns its id and the pod's IP (the
/// node's with hostNetwork).
async fn new_sandbox(
    cri: &dyn CriApi,
    cfg: &WorkerConfig,
    config: &cri::PodSandboxConfig,
    handler: &str,
    host_network: bool,
    pod: &str,
) -> Result<(String, Option<String>), String> {
    let pause = &cfg.pause_image;
    let present = cri.image_present(pause).await.map_err(|e| e.to_string())?;
    if !present {
        tracing::info!(%pod, image = %pause, "pulling pause image");
        cri.pull_image(pause, config)
            .await
            .map_err(|e| e.to_string())?;
    }
    let id = cri
        .run_pod_sandbox(config, handler)
        .await
        .map_err(|e| e.to_string())?;
    let ip = if host_network {
        Some(cfg.node_ip.clone())
    } else {
        match cri.pod_sandbox_status(&id).await {
            Ok(s) => s.ip,
            Err(e) => {
                // The sandbox runs but is unusable without its address: remove it, try again later.
                let _ = cri.stop_pod_sandbox(&id).await;
                let _ = cri.remove_pod_sandbox(&id).await;
                return Err(e.to_string());
            }
        }
    };
    Ok((id, ip))
}

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
