//! The `cri` runtime: workload pods on containerd over CRI v1. Each pod gets a [`worker::PodWorker`] driven
//! by its own task (one sync per `sync_period`, so a slow pull or probe delays only its pod); the kubelet reads
//! the published status and asks for a stop with a grace period.

pub mod api;
#[cfg(test)]
pub mod fake;
pub mod grpc;
pub mod hooks;
pub mod http_get;
pub mod image_pull;
pub mod keyring;
pub mod probe;
pub mod reconcile;
pub mod resources;
pub mod security_context;
pub mod spec;
pub mod worker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use super::{PodStatus, Runtime, RuntimeError};
use crate::events::{EventRecorder, NoopRecorder};
use crate::pod_objects::PodObjects;
use crate::services::ServiceLister;
pub use api::CriApi;
pub use grpc::GrpcCri;
pub use worker::{PodWorker, WorkerConfig};

pub const HANDLER: &str = "cri";

struct CriPod {
    /// The pod as it was started, with its latest labels and annotations (the kubelet server's /pods,
    /// logs and exec look pods up here).
    pod: Pod,
    status: Arc<Mutex<PodStatus>>,
    /// `Some(grace)` asks the pod's task to kill the pod and end.
    stop: watch::Sender<Option<Duration>>,
    /// The pod's latest object, handed to its worker ([`PodWorker::update_pod`]).
    update: watch::Sender<Pod>,
    task: JoinHandle<Result<(), worker::WorkerError>>,
    grace: Duration,
    /// An in-place resize not admitted yet, with the pod that asks for it (a Deferred one is
    /// retried when another pod leaves).
    resize: Option<(crate::pod_resize::Pending, Pod)>,
}

pub struct CriRuntime {
    cri: Arc<dyn CriApi>,
    cfg: Arc<WorkerConfig>,
    sync_period: Duration,
    pods: Mutex<HashMap<String, CriPod>>,
    version: Mutex<String>,
    /// ConfigMaps, Secrets and tokens for env and volumes, once the API client exists.
    objects: Mutex<Option<Arc<dyn PodObjects>>>,
    /// The cluster's Services (containers' Service variables), once the API client exists.
    services: Mutex<Option<Arc<dyn ServiceLister>>>,
    /// Where pods started from now on report their events.
    recorder: Mutex<Arc<dyn EventRecorder>>,
    /// Told by every pod task whose status changed.
    changed: Arc<Notify>,
    /// True once [`Runtime::adopt`] succeeded: what an earlier run left is adopted or removed.
    adopted: watch::Sender<bool>,
    /// The last status of each stopped pod (its containers' real exits), until the kubelet takes it
    /// for the pod's final report ([`Runtime::take_final_status`]).
    finals: Mutex<HashMap<String, PodStatus>>,
}

impl CriRuntime {
    pub fn new(cri: Arc<dyn CriApi>, cfg: WorkerConfig, sync_period: Duration) -> Self {
        CriRuntime {
            cri,
            cfg: Arc::new(cfg),
            sync_period,
            pods: Mutex::new(HashMap::new()),
            version: Mutex::new(format!("{HANDLER}://unknown")),
            objects: Mutex::new(None),
            services: Mutex::new(None),
            recorder: Mutex::new(Arc::new(NoopRecorder)),
            changed: Arc::new(Notify::new()),
            adopted: watch::Sender::new(false),
            finals: Mutex::new(HashMap::new()),
        }
    }

    /// The node-wide settings its pod workers share.
    pub fn worker_config(&self) -> &WorkerConfig {
        &self.cfg
    }

    /// Turns true once the start-up adoption ([`Runtime::adopt`]) has succeeded: from then on every
    /// sandbox CRI lists is one this runtime runs or one made after (the CNI IP GC waits for it).
    pub fn adopted(&self) -> watch::Receiver<bool> {
        self.adopted.subscribe()
    }

    /// The API objects pods started from now on read (env references, volumes, tokens).
    pub fn set_objects(&self, objects: Arc<dyn PodObjects>) {
        *self.objects.lock().unwrap_or_else(|p| p.into_inner()) = Some(objects);
    }

    /// The Services whose variables containers created from now on get.
    pub fn set_services(&self, services: Arc<dyn ServiceLister>) {
        *self.services.lock().unwrap_or_else(|p| p.into_inner()) = Some(services);
    }

    /// The event recorder pods started from now on use.
    pub fn set_recorder(&self, recorder: Arc<dyn EventRecorder>) {
        *self.recorder.lock().unwrap_or_else(|p| p.into_inner()) = recorder;
    }

    pub fn cri(&self) -> &Arc<dyn CriApi> {
        &self.cri
    }

    fn pods(&self) -> std::sync::MutexGuard<'_, HashMap<String, CriPod>> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops and removes every sandbox this kubelet made that this runtime does not run (`--cleanup`; a
    /// starting kubelet adopts instead, [`CriRuntime::reconcile`]). Returns how many were removed.
    pub async fn remove_unknown_sandboxes(&self) -> Result<usize, RuntimeError> {
        let labels = HashMap::from([(
            spec::LABEL_MANAGED_BY.to_string(),
            spec::MANAGED_BY.to_string(),
        )]);
        let list = self
            .cri
            .list_pod_sandboxes(labels)
            .await
            .map_err(|e| self.not_ready(e.to_string()))?;
        let known: Vec<String> = self.pod_uids();
        let mut removed = 0;
        for sb in list {
            let uid = sb
                .labels
                .get(spec::LABEL_POD_UID)
                .cloned()
                .unwrap_or_default();
            if known.contains(&uid) {
                continue;
            }
            tracing::info!(sandbox = %sb.id, pod_uid = %uid, "removing a sandbox this kubelet does not know");
            // RemovePodSandbox also removes the sandbox's containers.
            let _ = self.cri.stop_pod_sandbox(&sb.id).await;
            self.cri
                .remove_pod_sandbox(&sb.id)
                .await
                .map_err(|e| self.not_ready(e.to_string()))?;
            removed += 1;
        }
        Ok(removed)
    }

    /// A worker for `pod` with the runtime's current recorder and API objects.
    fn make_worker(&self, pod: &Pod) -> Result<PodWorker, RuntimeError> {
        let invalid = |e: worker::WorkerError| RuntimeError::InvalidSpec {
            pod: match &e {
                worker::WorkerError::Spec { pod, .. }
                | worker::WorkerError::Cleanup { pod, .. } => pod.clone(),
            },
            message: e.to_string(),
        };
        let recorder = self
            .recorder
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut w = PodWorker::new(pod, self.cfg.clone(), self.cri.clone())
            .map_err(invalid)?
            .with_recorder(recorder);
        let objects = self
            .objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(objects) = objects {
            w = w.with_objects(objects).map_err(invalid)?;
        }
        let services = self
            .services
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(services) = services {
            w = w.with_services(services);
        }
        Ok(w)
    }

    /// Runs `w`'s sync loop as `pod`'s task.
    fn spawn_worker(&self, pod: &Pod, w: PodWorker) -> Result<(), RuntimeError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut pods = self.pods();
        if pods.contains_key(&uid) {
            return Err(RuntimeError::AlreadyRunning(w.key().to_string()));
        }
        tracing::info!(pod = %w.key(), "starting pod on CRI");
        let status = Arc::new(Mutex::new(w.status()));
        let (stop, stop_rx) = watch::channel(None);
        let (update, update_rx) = watch::channel(pod.clone());
        let grace = w.grace;
        let task = tokio::spawn(pod_loop(
            w,
            status.clone(),
            Signals {
                stop: stop_rx,
                update: update_rx,
            },
            self.sync_period,
            self.changed.clone(),
        ));
        pods.insert(
            uid,
            CriPod {
                pod: pod.clone(),
                status,
                stop,
                update,
                task,
                grace,
                resize: None,
            },
        );
        Ok(())
    }

    /// Every pod this runtime runs, with its latest status.
    pub fn pods_with_status(&self) -> Vec<(Pod, PodStatus)> {
        self.pods()
            .values()
            .map(|p| {
                let st = p.status.lock().unwrap_or_else(|e| e.into_inner()).clone();
                (p.pod.clone(), st)
            })
            .collect()
    }

    /// upstream's resize admission: `pod` as the worker of `uid` is to get it — with the resources
    /// asked for when they fit the node beside the other pods, else with those it runs with and the
    /// resize recorded as pending (PodResizePending).
    fn admit_resize(
        &self,
        pods: &mut HashMap<String, CriPod>,
        uid: &str,
        pod: &Pod,
    ) -> Result<Pod, RuntimeError> {
        let others: Vec<Pod> = pods
            .iter()
            .filter(|(u, _)| u.as_str() != uid)
            .map(|(_, p)| p.pod.clone())
            .collect();
        let running = pods
            .get_mut(uid)
            .ok_or_else(|| RuntimeError::NotFound(uid.into()))?;
        let others: Vec<&Pod> = others.iter().collect();
        let decision = crate::pod_resize::admit(&running.pod, pod, &self.cfg.allocatable, &others);
        Ok(match decision {
            crate::pod_resize::Decision::Unchanged => {
                running.resize = None;
                pod.clone()
            }
            crate::pod_resize::Decision::Admit => {
                tracing::info!(pod = ?pod.metadata.name, "in-place resize admitted");
                running.resize = None;
                running.pod = crate::pod_resize::with_resources_of(&running.pod, pod);
                pod.clone()
            }
            crate::pod_resize::Decision::Pending(p) => {
                tracing::info!(pod = ?pod.metadata.name, reason = p.reason, message = %p.message, "in-place resize pending");
                running.resize = Some((p, pod.clone()));
                crate::pod_resize::with_resources_of(pod, &running.pod)
            }
        })
    }

    /// Another pod left: Deferred resizes may fit now.
    fn retry_deferred_resizes(&self) {
        let waiting: Vec<Pod> = self
            .pods()
            .values()
            .filter_map(|p| p.resize.as_ref())
            .filter(|(p, _)| p.reason == crate::pod_resize::DEFERRED)
            .map(|(_, pod)| pod.clone())
            .collect();
        for pod in waiting {
            if let Err(e) = self.update_pod(&pod) {
                tracing::debug!(error = %e, "retrying a deferred resize");
            }
        }
    }

    fn not_ready(&self, message: String) -> RuntimeError {
        RuntimeError::NotReady {
            handler: HANDLER,
            message,
        }
    }
}

/// What a pod's task is told between its syncs.
struct Signals {
    /// `Some(grace)`: kill the pod and end.
    stop: watch::Receiver<Option<Duration>>,
    /// The pod's latest object.
    update: watch::Receiver<Pod>,
}

async fn pod_loop(
    mut w: PodWorker,
    status: Arc<Mutex<PodStatus>>,
    Signals {
        mut stop,
        update: mut updates,
    }: Signals,
    period: Duration,
    changed: Arc<Notify>,
) -> Result<(), worker::WorkerError> {
    let mut updated = false;
    loop {
        let requested = *stop.borrow();
        if let Some(grace) = requested {
            let killed = w.kill(grace).await;
            // The containers' exits as the kill left them: the pod's final status.
            *status.lock().unwrap_or_else(|p| p.into_inner()) = w.status();
            return killed;
        }
        if std::mem::take(&mut updated) {
            let pod = updates.borrow_and_update().clone();
            w.update_pod(&pod).await;
        }
        w.sync(Instant::now()).await;
        let now = w.status();
        let was_changed = {
            let mut current = status.lock().unwrap_or_else(|p| p.into_inner());
            let c = *current != now;
            *current = now;
            c
        };
        if was_changed {
            changed.notify_one();
        }
        // A closed update channel (the pod is being stopped) only disables its branch.
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stop.changed() => {}
            Ok(()) = updates.changed() => updated = true,
        }
    }
}

#[async_trait]
impl Runtime for CriRuntime {
    fn handler(&self) -> &'static str {
        HANDLER
    }

    fn version(&self) -> String {
        self.version
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    async fn ready(&self) -> Result<(), RuntimeError> {
        let v = self
            .cri
            .version()
            .await
            .map_err(|e| self.not_ready(e.to_string()))?;
        *self.version.lock().unwrap_or_else(|p| p.into_inner()) = v;
        let conds = self
            .cri
            .conditions()
            .await
            .map_err(|e| self.not_ready(e.to_string()))?;
        let failing: Vec<String> = conds
            .into_iter()
            .filter(|(_, ok, _)| !ok)
            .map(|(t, _, m)| format!("{t}=false: {m}"))
            .collect();
        if failing.is_empty() {
            Ok(())
        } else {
            Err(self.not_ready(failing.join("; ")))
        }
    }

    async fn run_pod(&self, pod: &Pod) -> Result<(), RuntimeError> {
        let w = self.make_worker(pod)?;
        self.spawn_worker(pod, w)
    }

    async fn adopt(&self, wanted: &[Pod]) -> Result<(), RuntimeError> {
        let done = self.reconcile(wanted).await?;
        tracing::info!(
            adopted = done.adopted.len(),
            removed = done.removed,
            "reconciled with the pods the container runtime runs"
        );
        self.adopted.send_replace(true);
        Ok(())
    }

    async fn stop_pod(&self, uid: &str, grace: Option<Duration>) -> Result<(), RuntimeError> {
        let pod = self
            .pods()
            .remove(uid)
            .ok_or_else(|| RuntimeError::NotFound(uid.into()))?;
        let grace = grace.unwrap_or(pod.grace);
        let _ = pod.stop.send(Some(grace));
        self.retry_deferred_resizes();
        // The task finishes its current sync, then kills; bound the wait anyway.
        let bound = grace + Duration::from_secs(120);
        let mut task = pod.task;
        let finished = tokio::time::timeout(bound, &mut task).await;
        if matches!(finished, Ok(Ok(_))) {
            let last = pod.status.lock().unwrap_or_else(|p| p.into_inner()).clone();
            self.finals
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(uid.to_string(), last);
        }
        match finished {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(self.not_ready(e.to_string())),
            Ok(Err(e)) => Err(self.not_ready(format!("pod task: {e}"))),
            Err(_) => {
                task.abort();
                Err(self.not_ready(format!("stopping pod {uid} took longer than {bound:?}")))
            }
        }
    }

    fn update_pod(&self, pod: &Pod) -> Result<(), RuntimeError> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let mut pods = self.pods();
        let pod = &self.admit_resize(&mut pods, uid, pod)?;
        let running = pods
            .get_mut(uid)
            .ok_or_else(|| RuntimeError::NotFound(uid.into()))?;
        running.pod.metadata.labels = pod.metadata.labels.clone();
        running.pod.metadata.annotations = pod.metadata.annotations.clone();
        // Added ephemeral containers: the server's exec, attach and logs look them up here.
        if let (Some(spec), Some(new)) = (running.pod.spec.as_mut(), pod.spec.as_ref()) {
            spec.ephemeral_containers = new.ephemeral_containers.clone();
        }
        running.update.send_replace(pod.clone());
        Ok(())
    }

    fn pod_status(&self, uid: &str) -> Option<PodStatus> {
        self.pods().get(uid).map(|p| {
            let mut st = p.status.lock().unwrap_or_else(|p| p.into_inner()).clone();
            st.resize.pending = p.resize.as_ref().map(|(pending, _)| pending.clone());
            st
        })
    }

    fn status_changes(&self) -> Option<Arc<Notify>> {
        Some(self.changed.clone())
    }

    fn take_final_status(&self, uid: &str) -> Option<PodStatus> {
        self.finals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid)
    }

    fn forget_pod(&self, uid: &str) {
        for dir in crate::logs::pod_log_dirs_of(&self.cfg.log_root, uid) {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => tracing::debug!(dir = %dir.display(), "removed a deleted pod's logs"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "removing a deleted pod's logs")
                }
            }
        }
    }

    fn pod_uids(&self) -> Vec<String> {
        self.pods().keys().cloned().collect()
    }
}
