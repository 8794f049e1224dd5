//! One pod on CRI: the kubelet's per-pod sync. Each `sync` step makes the sandbox (pulling the pause image
//! first), pulls images per imagePullPolicy, creates and starts containers, notices exits and restarts them
//! per restartPolicy with the crash-loop backoff (CrashLoopBackOff), and runs liveness/readiness probes.
//! Init containers run first, one at a time ([`crate::init_containers`]); volumes are set up before the
//! sandbox and API-backed ones refreshed every [`VOLUME_RESYNC`] ([`crate::volumes`]); each container's
//! env and mounts are resolved when it is created ([`crate::env`]).
//! Time is passed in, so the logic is tested with a fake CRI and no clock.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};

use super::api::{CriApi, CriState};
use super::probe::{self, Outcome, ProbeState};
use super::spec;
use crate::env;
use crate::init_containers;
use crate::pod_objects::PodObjects;
use crate::runtime::{
    Backoff, ContainerState, ContainerStatus, PodStatus, RestartPolicy, Terminated, DEFAULT_GRACE,
};
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
}

#[derive(Debug)]
struct Ctr {
    spec: Container,
    /// The pod's policy, or for an init container its own ([`init_containers::restart_policy`]).
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
    /// Terminated and not restarting (restartPolicy).
    done: bool,
    pull_failures: u32,
    pull_retry_at: Option<Instant>,
    readiness: Option<ProbeState>,
    liveness: Option<ProbeState>,
    ready: bool,
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
            done: false,
            pull_failures: 0,
            pull_retry_at: None,
            readiness: None,
            liveness: None,
            ready: false,
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
    volumes: PodVolumes,
    next_volume_refresh: Option<Instant>,
    objects: Option<Arc<dyn PodObjects>>,
    host_network: bool,
    /// The pod's terminationGracePeriodSeconds.
    pub grace: Duration,
    cfg: Arc<WorkerConfig>,
    cri: Arc<dyn CriApi>,
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
        let sandbox_config =
            spec::sandbox_config(pod, &cfg.log_root, 0).map_err(|e| invalid(e.to_string()))?;
        let volumes = PodVolumes::new(pod, &cfg.pods_root, false)
            .map_err(|e| invalid(e.to_string()))?
            .secrets_in_memory(cfg.secrets_in_memory);
        let policy = RestartPolicy::parse(spec.restart_policy.as_deref());
        let inits = spec.init_containers.clone().unwrap_or_default();
        let first = if inits.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let mut ctrs: Vec<Ctr> = inits
            .iter()
            .cloned()
            .map(|c| Ctr::new(c, init_containers::restart_policy(policy), first))
            .collect();
        ctrs.extend(
            spec.containers
                .iter()
                .cloned()
                .map(|c| Ctr::new(c, policy, first)),
        );
        Ok(PodWorker {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            key: key.clone(),
            sandbox_config,
            sandbox_id: None,
            pod_ip: None,
            started_at: SystemTime::now(),
            ctrs,
            n_init: inits.len(),
            volumes,
            next_volume_refresh: None,
            objects: None,
            host_network: spec.host_network == Some(true),
            grace: spec
                .termination_grace_period_seconds
                .map(|s| Duration::from_secs(s.max(0) as u64))
                .unwrap_or(DEFAULT_GRACE),
            pod: pod.clone(),
            cfg,
            cri,
        })
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
            .secrets_in_memory(self.cfg.secrets_in_memory);
        self.objects = Some(objects);
        Ok(self)
    }

    pub fn status(&self) -> PodStatus {
        PodStatus {
            uid: self.uid.clone(),
            started_at: self.started_at,
            pod_ip: self.pod_ip.clone(),
            containers: self.ctrs[self.n_init..].iter().map(Ctr::status).collect(),
            // An init container is ready once it has completed (upstream's report).
            init_containers: self.ctrs[..self.n_init]
                .iter()
                .map(|c| ContainerStatus {
                    ready: c.succeeded(),
                    ..c.status()
                })
                .collect(),
        }
    }

    /// One step towards the pod's desired state.
    pub async fn sync(&mut self, now: Instant) {
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
        if !self.sync_volumes(now).await {
            return;
        }
        if self.sandbox_id.is_none() {
            if let Err(message) = self.create_sandbox().await {
                tracing::warn!(pod = %self.key, error = %message, "creating pod sandbox");
                for c in self.ctrs.iter_mut().filter(|c| c.id.is_none()) {
                    c.state = waiting("ContainerCreating", Some(message.clone()));
                }
                return;
            }
        }
        // Init containers in order: the next one runs only after the previous exited 0, and app
        // containers only after all of them.
        for i in 0..self.n_init {
            if self.ctrs[i].succeeded() {
                continue;
            }
            self.sync_container(i, now).await;
            if !self.ctrs[i].succeeded() {
                return;
            }
        }
        for i in self.n_init..self.ctrs.len() {
            self.sync_container(i, now).await;
        }
    }

    /// Sets the volumes up (once; the pod waits in ContainerCreating until that works) and refreshes
    /// the API-backed ones every [`VOLUME_RESYNC`]. False: not ready to go on.
    async fn sync_volumes(&mut self, now: Instant) -> bool {
        let objects = self.objects.clone();
        if !self.volumes.is_set_up() {
            if let Err(e) = self.volumes.set_up(objects.as_deref(), unix_now()).await {
                let message = format!("MountVolume.SetUp failed: {e}");
                tracing::warn!(pod = %self.key, error = %e, "setting up volumes");
                for c in self.ctrs.iter_mut().filter(|c| c.id.is_none()) {
                    c.state = waiting("ContainerCreating", Some(message.clone()));
                }
                return false;
            }
            self.next_volume_refresh = Some(now + VOLUME_RESYNC);
            return true;
        }
        if self.next_volume_refresh.is_some_and(|at| now >= at) {
            self.next_volume_refresh = Some(now + VOLUME_RESYNC);
            match self.volumes.refresh(objects.as_deref(), unix_now()).await {
                Ok(changed) if !changed.is_empty() => {
                    tracing::info!(pod = %self.key, volumes = ?changed, "volume contents updated")
                }
                Ok(_) => {}
                // The old contents stay; the next refresh tries again.
                Err(e) => tracing::warn!(pod = %self.key, error = %e, "refreshing volumes"),
            }
        }
        true
    }

    /// The sandbox died (its pause process, or the node's network for it): remove it with its containers;
    /// the next step makes a new one, and the containers restart per restartPolicy (their old ids are gone).
    async fn drop_sandbox(&mut self, id: &str, why: &str) {
        tracing::warn!(pod = %self.key, sandbox = %id, why, "pod sandbox lost; recreating it");
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

    async fn create_sandbox(&mut self) -> Result<(), String> {
        let pause = &self.cfg.pause_image;
        let present = self
            .cri
            .image_present(pause)
            .await
            .map_err(|e| e.to_string())?;
        if !present {
            tracing::info!(pod = %self.key, image = %pause, "pulling pause image");
            self.cri
                .pull_image(pause, &self.sandbox_config)
                .await
                .map_err(|e| e.to_string())?;
        }
        let id = self
            .cri
            .run_pod_sandbox(&self.sandbox_config)
            .await
            .map_err(|e| e.to_string())?;
        self.pod_ip = if self.host_network {
            Some(self.cfg.node_ip.clone())
        } else {
            self.cri
                .pod_sandbox_status(&id)
                .await
                .map_err(|e| e.to_string())?
                .ip
        };
        tracing::info!(pod = %self.key, sandbox = %id, ip = ?self.pod_ip, "pod sandbox running");
        self.sandbox_id = Some(id);
        Ok(())
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
                Ok(st) => Terminated {
                    exit_code: st.exit_code,
                    signal: None,
                    reason: if !st.reason.is_empty() {
                        st.reason
                    } else if st.exit_code == 0 {
                        "Completed".into()
                    } else {
                        "Error".into()
                    },
                    message: Some(st.message).filter(|m| !m.is_empty()),
                    started_at: from_nanos(st.started_at),
                    finished_at: from_nanos(st.finished_at).unwrap_or_else(SystemTime::now),
                },
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
                c.last_termination = Some(exited);
                c.restart_at = Some(now + delay);
                c.backoff = delay;
            }
            if c.restart_at.is_some_and(|at| now < at) {
                // The whole back-off, not the time left: the status only changes when the state does.
                let secs = c.backoff.as_secs();
                c.state = waiting(
                    "CrashLoopBackOff",
                    Some(format!(
                        "back-off {secs}s restarting failed container={} pod={key}",
                        c.spec.name
                    )),
                );
                return;
            }
        }
        self.start_container(i, now).await;
    }

    /// Pulls (per policy), creates and starts container `i`; a failure leaves it Waiting with the
    /// kubelet's reason, to be retried on a later sync.
    async fn start_container(&mut self, i: usize, now: Instant) {
        let cri = self.cri.clone();
        let Some(sandbox_id) = self.sandbox_id.clone() else {
            return;
        };
        let backoff = self.cfg.backoff;
        let image = self.ctrs[i].spec.image.clone().unwrap_or_default();
        let present = match cri.image_present(&image).await {
            Ok(p) => p,
            Err(e) => {
                self.ctrs[i].state = waiting("ErrImagePull", Some(e.to_string()));
                return;
            }
        };
        let pull = match spec::pull_policy(&self.ctrs[i].spec) {
            "Never" if !present => {
                self.ctrs[i].state = waiting(
                    "ErrImageNeverPull",
                    Some(format!(
                        "Container image {image:?} is not present with pull policy of Never"
                    )),
                );
                return;
            }
            "Never" => false,
            "IfNotPresent" => !present,
            _ => true,
        };
        if pull {
            let c = &mut self.ctrs[i];
            if c.pull_retry_at.is_some_and(|at| now < at) {
                c.state = waiting(
                    "ImagePullBackOff",
                    Some(format!("Back-off pulling image {image:?}")),
                );
                return;
            }
            tracing::info!(pod = %self.key, container = %c.spec.name, %image, "pulling image");
            match cri.pull_image(&image, &self.sandbox_config).await {
                Ok(_) => {
                    c.pull_failures = 0;
                    c.pull_retry_at = None;
                }
                Err(e) => {
                    c.pull_failures += 1;
                    c.pull_retry_at = Some(now + backoff.delay(c.pull_failures - 1));
                    tracing::warn!(pod = %self.key, %image, error = %e, "pulling image failed");
                    c.state = waiting("ErrImagePull", Some(e.to_string()));
                    return;
                }
            }
        }
        let attempt = self.ctrs[i].runs;
        let config = match self.container_config(i, attempt).await {
            Ok(c) => c,
            Err(message) => {
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
                self.ctrs[i].state = waiting("CreateContainerError", Some(e.to_string()));
                return;
            }
        };
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
        c.restart_at = None;
        match cri.start_container(&id).await {
            Ok(()) => {
                tracing::info!(pod = %self.key, container = %c.spec.name, id = %id, restart_count = c.restart_count(), "container started");
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
                c.ready = c.readiness.is_none();
            }
            Err(e) => {
                // containerd marks the container exited (StartError); the next sync restarts it per policy.
                tracing::warn!(pod = %self.key, container = %c.spec.name, error = %e, "starting container");
                c.state = waiting("RunContainerError", Some(e.to_string()));
            }
        }
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
        let fetched = env::fetch(ns, c, self.objects.as_deref())
            .await
            .map_err(|e| e.to_string())?;
        let ctx = env::FieldContext {
            node_name: &self.cfg.node_name,
            node_ip: &self.cfg.node_ip,
            pod_ip: self.pod_ip.as_deref(),
        };
        let envs = env::build(&self.pod, c, &ctx, &fetched).map_err(|e| e.to_string())?;
        let mounts = self.volumes.mounts(c).map_err(|e| e.to_string())?;
        spec::container_config(&self.pod, c, attempt, envs, mounts).map_err(|e| e.to_string())
    }

    async fn probe(&mut self, i: usize, id: &str, now: Instant) {
        let cri = self.cri.clone();
        let pod_ip = self.pod_ip.clone();
        let grace = self.grace;
        let key = self.key.clone();
        let c = &mut self.ctrs[i];
        if let (Some(p), Some(state)) = (c.spec.liveness_probe.clone(), c.liveness.as_mut()) {
            if state.due(now) {
                let outcome = probe::run(&p, &c.spec, id, pod_ip.as_deref(), cri.as_ref()).await;
                if let Outcome::Failure(m) = &outcome {
                    tracing::info!(pod = %key, container = %c.spec.name, "liveness probe failed: {m}");
                }
                if state.record(now, outcome) && !state.result {
                    tracing::info!(pod = %key, container = %c.spec.name, "container failed liveness probe, will be restarted");
                    c.ready = false;
                    if let Err(e) = cri.stop_container(id, grace.as_secs() as i64).await {
                        tracing::warn!(pod = %key, container = %c.spec.name, error = %e, "stopping unhealthy container");
                    }
                    return;
                }
            }
        }
        match (c.spec.readiness_probe.clone(), c.readiness.as_mut()) {
            (Some(p), Some(state)) => {
                if state.due(now) {
                    let outcome =
                        probe::run(&p, &c.spec, id, pod_ip.as_deref(), cri.as_ref()).await;
                    if state.record(now, outcome) {
                        tracing::info!(pod = %key, container = %c.spec.name, ready = state.result, "readiness changed");
                    }
                }
                c.ready = state.result;
            }
            _ => c.ready = true,
        }
    }

    /// Stops every container (SIGTERM, `grace`, SIGKILL), then the sandbox, and removes them all.
    pub async fn kill(&mut self, grace: Duration) -> Result<(), WorkerError> {
        let cri = self.cri.clone();
        let secs = grace.as_secs() as i64;
        let mut errors = Vec::new();
        let running: Vec<String> = self.ctrs.iter().filter_map(|c| c.id.clone()).collect();
        // In parallel: each container may use its whole grace period.
        let stops =
            futures::future::join_all(running.iter().map(|id| cri.stop_container(id, secs))).await;
        for e in stops.into_iter().filter_map(Result::err) {
            if !e.is_not_found() {
                errors.push(e.to_string());
            }
        }
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

#[cfg(test)]
#[path = "worker_tests.rs"]
mod tests;
