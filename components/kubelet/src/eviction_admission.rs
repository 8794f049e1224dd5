//! The eviction manager's hold on the workload loop, and the terminal statuses it writes.
//!
//! [`AdmissionGate`] wraps the workload runtime: under node pressure a new pod is rejected as upstream's
//! eviction admit handler does (phase Failed, reason Evicted, "Pod was rejected: The node had
//! condition: [DiskPressure]. "): DiskPressure and PIDPressure reject every pod, MemoryPressure alone
//! only BestEffort pods that do not tolerate the `node.kubernetes.io/memory-pressure` NoSchedule taint;
//! critical pods are always admitted. An evicted pod is never started
//! again even when the workload loop sees it gone from the runtime before it sees its Failed phase.
//! [`ApiFailer`] posts those statuses.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, Pod, PodCondition, PodStatus as ApiPodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::watch;

use super::rank::is_critical;
use super::thresholds::Condition;
use super::{EvictionError, PodFailer, Pressure, REASON};
use crate::events::{EventRecorder, EventType, ObjectRef};
use crate::host_ports::{self, fits, host_ports, HostPort};
use crate::runtime::{PodStatus, Runtime, RuntimeError};

/// Upstream's admission message under disk pressure.
pub const REJECT_MESSAGE: &str = "The node had condition: [DiskPressure]. ";

/// The taint a BestEffort pod must tolerate to be admitted under memory pressure.
pub const MEMORY_PRESSURE_TAINT: &str = "node.kubernetes.io/memory-pressure";

/// Upstream's admission message: the conditions as Go prints a slice (`[MemoryPressure DiskPressure]`).
pub fn reject_message(conditions: &[Condition]) -> String {
    let names: Vec<&str> = conditions.iter().map(|c| c.as_str()).collect();
    format!("The node had condition: [{}]. ", names.join(" "))
}

/// Upstream's eviction `Admit`: None admits the pod, Some carries the conditions it is rejected for.
pub fn admit(pressure: &Pressure, pod: &Pod) -> Option<Vec<Condition>> {
    let conditions = pressure.conditions();
    if conditions.is_empty() || is_critical(pod) {
        return None;
    }
    if conditions == [Condition::MemoryPressure] {
        let value = serde_json::to_value(pod).unwrap_or_default();
        if kiln_common::quota::qos_class(&value) != "BestEffort" {
            return None;
        }
        let taint = k8s_openapi::api::core::v1::Taint {
            key: MEMORY_PRESSURE_TAINT.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref());
        if kiln_common::node_matching::tolerated(tolerations.unwrap_or_default(), &taint) {
            return None;
        }
    }
    Some(conditions)
}

/// What a pod is failed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: String,
    pub message: String,
    /// Adds the DisruptionTarget condition (the kubelet ended a running pod).
    pub disruption: bool,
}

/// The pod's status after `failure`: phase Failed, not ready, its containers terminated (killed).
pub fn failed_status(current: Option<ApiPodStatus>, f: &Failure, now: &Time) -> ApiPodStatus {
    let mut s = current.unwrap_or_default();
    s.phase = Some("Failed".into());
    s.reason = Some(f.reason.clone());
    s.message = Some(f.message.clone());
    let mut conditions: Vec<PodCondition> = s.conditions.take().unwrap_or_default();
    let mut set = |type_: &str, status: &str, reason: &str, message: Option<&str>| {
        let c = PodCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: message.map(String::from),
            last_transition_time: Some(now.clone()),
            ..Default::default()
        };
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(old) if old.status == status => {
                old.reason = c.reason;
                old.message = c.message;
            }
            Some(old) => *old = c,
            None => conditions.push(c),
        }
    };
    set("Ready", "False", "PodCompleted", None);
    set("ContainersReady", "False", "PodCompleted", None);
    if f.disruption {
        set(
            "DisruptionTarget",
            "True",
            "TerminationByKubelet",
            Some(&f.message),
        );
    }
    s.conditions = Some(conditions);
    for c in s
        .container_statuses
        .iter_mut()
        .flatten()
        .chain(s.init_container_statuses.iter_mut().flatten())
    {
        c.ready = false;
        c.started = Some(false);
        let running = c.state.as_ref().and_then(|st| st.running.as_ref());
        if c.state.as_ref().is_some_and(|st| st.terminated.is_some()) {
            continue;
        }
        let started_at = running.and_then(|r| r.started_at.clone());
        c.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 137,
                reason: Some("Error".into()),
                started_at,
                finished_at: Some(now.clone()),
                container_id: c.container_id.clone(),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    s
}

/// Posts terminal statuses through the API (GET + PUT of the status subresource; conflicts retried).
pub struct ApiFailer {
    pub client: Client,
}

const CONFLICT_ATTEMPTS: u32 = 5;

#[async_trait]
impl PodFailer for ApiFailer {
    async fn fail(&self, pod: &Pod, f: &Failure) -> Result<(), EvictionError> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let err = |source| EvictionError::Api {
            pod: format!("{ns}/{name}"),
            source,
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut current = match api.get_status(name).await {
                Ok(c) => c,
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => return Err(err(e)),
            };
            if current.metadata.uid != pod.metadata.uid {
                return Ok(());
            }
            current.status = Some(failed_status(current.status.take(), f, &crate::node::now()));
            match api
                .replace_status(name, &PostParams::default(), &current)
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < CONFLICT_ATTEMPTS => {}
                Err(e) => return Err(err(e)),
            }
        }
    }
}

/// Shared between the eviction manager and the gate: the pods it evicted, with what they were failed with.
#[derive(Clone, Default)]
pub struct Evicted(Arc<Mutex<HashMap<String, Failure>>>);

impl Evicted {
    pub fn insert(&self, uid: &str, failure: &Failure) {
        self.lock().insert(uid.to_string(), failure.clone());
    }

    pub fn get(&self, uid: &str) -> Option<Failure> {
        self.lock().get(uid).cloned()
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.lock().contains_key(uid)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Failure>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A [`Runtime`] that admits pods as [`admit`] decides and never restarts an evicted pod; everything else
/// goes to the wrapped runtime.
pub struct AdmissionGate {
    inner: Arc<dyn Runtime>,
    pressure: watch::Receiver<Pressure>,
    evicted: Evicted,
    /// Pods rejected at admission, with why (their Failed status may still be on its way).
    rejected: Mutex<HashMap<String, Failure>>,
    /// The host ports of the pods this gate admitted, by UID (NodePorts admission).
    ports: Mutex<HashMap<String, Vec<HostPort>>>,
    /// When each refused pod's Failed status was last posted from here.
    posted: Mutex<HashMap<String, Instant>>,
    failer: Arc<dyn PodFailer>,
    recorder: Arc<dyn EventRecorder>,
    /// The other admit handlers (sysctls, AppArmor, ...), run on each new pod after eviction's.
    handlers: Vec<Arc<dyn crate::pod_admit::AdmitHandler>>,
}

/// Posting a Failed status: attempts and the pause between them (the API server may be briefly away).
const POST_ATTEMPTS: u32 = 10;
const POST_RETRY: Duration = Duration::from_secs(1);
/// A refused pod the workload loop still wants to start has a non-terminal phase in the API (a status
/// posted from the pod's earlier life landed after the Failed one): posted again, at most this often.
const REPOST_AFTER: Duration = Duration::from_secs(5);

impl AdmissionGate {
    pub fn new(
        inner: Arc<dyn Runtime>,
        pressure: watch::Receiver<Pressure>,
        evicted: Evicted,
        failer: Arc<dyn PodFailer>,
        recorder: Arc<dyn EventRecorder>,
    ) -> Self {
        AdmissionGate {
            inner,
            pressure,
            evicted,
            rejected: Mutex::new(HashMap::new()),
            ports: Mutex::new(HashMap::new()),
            posted: Mutex::new(HashMap::new()),
            failer,
            recorder,
            handlers: Vec::new(),
        }
    }

    /// Adds the admit handlers new pods must pass besides eviction and host ports.
    pub fn with_handlers(mut self, handlers: Vec<Arc<dyn crate::pod_admit::AdmitHandler>>) -> Self {
        self.handlers = handlers;
        self
    }

    fn refuse(&self, pod: &Pod, why: &str) -> RuntimeError {
        RuntimeError::NotReady {
            handler: self.inner.handler(),
            message: format!(
                "pod {}/{} {why}",
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.name.as_deref().unwrap_or_default()
            ),
        }
    }

    /// Posts `failure` as the pod's status beside the workload loop, unless posted from here lately.
    fn post_failed(&self, pod: &Pod, uid: &str, failure: Failure) {
        {
            let mut posted = self.posted.lock().unwrap_or_else(|p| p.into_inner());
            if posted.get(uid).is_some_and(|t| t.elapsed() < REPOST_AFTER) {
                return;
            }
            posted.insert(uid.to_string(), Instant::now());
        }
        let failer = self.failer.clone();
        let pod = pod.clone();
        tokio::spawn(async move {
            for attempt in 1..=POST_ATTEMPTS {
                match failer.fail(&pod, &failure).await {
                    Ok(()) => return,
                    Err(e) if attempt == POST_ATTEMPTS => {
                        tracing::warn!(error = %e, "posting a refused pod's Failed status")
                    }
                    Err(_) => tokio::time::sleep(POST_RETRY).await,
                }
            }
        });
    }

    /// Rejects `pod` with `failure` (upstream's rejectPod): a Warning event with the reason the first
    /// time, and its Failed status.
    fn reject(&self, pod: &Pod, uid: &str, failure: Failure, event_message: &str) {
        let first = self
            .rejected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid.to_string(), failure.clone())
            .is_none();
        if first {
            tracing::warn!(pod = %ObjectRef::pod(pod).name, reason = %failure.reason, "pod rejected");
            self.recorder.record(
                &ObjectRef::pod(pod),
                EventType::Warning,
                &failure.reason,
                event_message.to_string(),
            );
        }
        self.post_failed(pod, uid, failure);
    }

    /// Does the pod fit the host ports the pods still running here hold?
    fn ports_fit(&self, pod: &Pod, uid: &str) -> bool {
        let wanted = host_ports(pod);
        let mut held = self.ports.lock().unwrap_or_else(|p| p.into_inner());
        let live: HashSet<String> = self.inner.pod_uids().into_iter().collect();
        held.retain(|u, _| live.contains(u));
        wanted.is_empty()
            || fits(
                &wanted,
                held.iter().filter(|(u, _)| *u != uid).flat_map(|(_, p)| p),
            )
    }

    fn hold_ports(&self, pod: &Pod, uid: &str) {
        let wanted = host_ports(pod);
        if !wanted.is_empty() {
            self.ports
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(uid.to_string(), wanted);
        }
    }
}

#[async_trait]
impl Runtime for AdmissionGate {
    fn handler(&self) -> &'static str {
        self.inner.handler()
    }

    fn version(&self) -> String {
        self.inner.version()
    }

    async fn ready(&self) -> Result<(), RuntimeError> {
        self.inner.ready().await
    }

    async fn run_pod(&self, pod: &Pod) -> Result<(), RuntimeError> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if let Some(failure) = self.evicted.get(uid) {
            self.post_failed(pod, uid, failure);
            return Err(self.refuse(pod, "was evicted"));
        }
        let earlier = self
            .rejected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .cloned();
        if let Some(failure) = earlier {
            self.post_failed(pod, uid, failure);
            return Err(self.refuse(pod, "was rejected"));
        }
        let pressure = *self.pressure.borrow();
        if let Some(conditions) = admit(&pressure, pod) {
            let message = reject_message(&conditions);
            let failure = Failure {
                reason: REASON.into(),
                message: format!("Pod was rejected: {message}"),
                disruption: false,
            };
            self.reject(pod, uid, failure, &message);
            let names: Vec<&str> = conditions.iter().map(|c| c.as_str()).collect();
            return Err(self.refuse(
                pod,
                &format!("was rejected: the node has {}", names.join(", ")),
            ));
        }
        // A running pod is admitted once; only a new one is checked against the ports others hold.
        let known = self.inner.pod_uids().iter().any(|u| u == uid);
        if let Some(r) = (!known)
            .then(|| crate::pod_admit::first_refusal(&self.handlers, pod))
            .flatten()
        {
            let failure = Failure {
                reason: r.reason.clone(),
                message: format!("Pod was rejected: {}", r.message),
                disruption: false,
            };
            self.reject(pod, uid, failure, &r.message);
            return Err(self.refuse(pod, &format!("was rejected: {}", r.message)));
        }
        if !known && !self.ports_fit(pod, uid) {
            let failure = Failure {
                reason: host_ports::REASON.into(),
                message: format!("Pod was rejected: {}", host_ports::MESSAGE),
                disruption: false,
            };
            self.reject(pod, uid, failure, host_ports::MESSAGE);
            return Err(self.refuse(pod, "was rejected: a host port it asks for is taken"));
        }
        self.inner.run_pod(pod).await?;
        self.hold_ports(pod, uid);
        Ok(())
    }

    async fn stop_pod(&self, uid: &str, grace: Option<Duration>) -> Result<(), RuntimeError> {
        self.inner.stop_pod(uid, grace).await
    }

    fn update_pod(&self, pod: &Pod) -> Result<(), RuntimeError> {
        self.inner.update_pod(pod)
    }

    fn pod_status(&self, uid: &str) -> Option<PodStatus> {
        self.inner.pod_status(uid)
    }

    fn pod_uids(&self) -> Vec<String> {
        self.inner.pod_uids()
    }

    async fn adopt(&self, wanted: &[Pod]) -> Result<(), RuntimeError> {
        self.inner.adopt(wanted).await?;
        // Pods an earlier run left keep the host ports they hold.
        let live: HashSet<String> = self.inner.pod_uids().into_iter().collect();
        for p in wanted {
            let uid = p.metadata.uid.as_deref().unwrap_or_default();
            if live.contains(uid) {
                self.hold_ports(p, uid);
            }
        }
        Ok(())
    }

    fn status_changes(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.inner.status_changes()
    }

    fn forget_pod(&self, uid: &str) {
        self.inner.forget_pod(uid)
    }

    fn take_final_status(&self, uid: &str) -> Option<PodStatus> {
        self.inner.take_final_status(uid)
    }
}
