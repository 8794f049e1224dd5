//! Workload pods from the API server: watches the pods bound to this node (fieldSelector spec.nodeName),
//! ignores static and mirror pods, and drives the `cri` runtime towards them — start new pods, stop pods that
//! are being deleted (their grace period) and then remove the API object (delete with grace 0, as the kubelet
//! does), stop pods whose object vanished — and reports each pod's status through the status subresource.
//! The decisions are a pure function ([`plan`]), tested without an API server or a runtime.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use tokio::sync::{mpsc, watch};

use crate::manifest::{CONFIG_MIRROR, CONFIG_SOURCE};
use crate::mirror::api_status;
use crate::runtime::{Runtime, RuntimeError};
use crate::status_manager::StatusManager;

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("pod {pod}: {source}")]
    Api {
        pod: String,
        #[source]
        source: kube::Error,
    },
}

/// What the kubelet does next for one pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Start(Box<Pod>),
    /// Hand a running pod's changed object to the runtime ([`Runtime::update_pod`]).
    Update(Box<Pod>),
    /// Stop the pod's containers with this grace (None: the pod's own terminationGracePeriodSeconds).
    Stop {
        uid: String,
        grace: Option<Duration>,
    },
    /// The pod is stopped and was deleted in the API: remove the object (grace 0, precondition uid).
    Finalize {
        namespace: String,
        name: String,
        uid: String,
    },
}

fn uid(p: &Pod) -> &str {
    p.metadata.uid.as_deref().unwrap_or_default()
}

fn key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Static pods run from files and their mirrors are only reports: neither is this loop's to run.
pub fn is_static_or_mirror(p: &Pod) -> bool {
    p.metadata.annotations.as_ref().is_some_and(|a| {
        a.contains_key(CONFIG_MIRROR) || a.get(CONFIG_SOURCE).is_some_and(|s| s != "api")
    })
}

/// The workload pods of this node among what the watch returned (the server's field selector is checked
/// again here).
pub fn is_mine(p: &Pod, node: &str) -> bool {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node) && !is_static_or_mirror(p)
}

fn terminal(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

/// What a running pod is shown of its own object that can change while it runs: the labels and
/// annotations its downwardAPI volumes (whole maps or single keys) read, and the ephemeral
/// containers it is to start. The rest they expose — name,
/// namespace, uid — cannot change. None and an empty map are the same.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shown {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    /// Ephemeral containers (added by `kubectl debug` while the pod runs), by name.
    ephemeral: Vec<String>,
    /// The containers' resources as JSON (an in-place resize, `pods/resize`).
    resources: String,
}

impl Shown {
    pub fn of(p: &Pod) -> Self {
        Shown {
            labels: p.metadata.labels.clone().unwrap_or_default(),
            annotations: p.metadata.annotations.clone().unwrap_or_default(),
            ephemeral: p
                .spec
                .iter()
                .flat_map(|s| s.ephemeral_containers.iter().flatten())
                .map(|c| c.name.clone())
                .collect(),
            resources: serde_json::to_string(&crate::pod_resize::container_resources(p))
                .unwrap_or_default(),
        }
    }
}

/// Desired vs actual. `running`: pods the runtime has; `shown`: what the runtime was last handed of each
/// running pod's object (missing: not known, e.g. an adopted pod — it is handed again); `stopping`: stops
/// in progress; `refused`: pods the runtime rejected (not retried until they are gone).
pub fn plan(
    node: &str,
    pods: &[Pod],
    running: &HashSet<String>,
    shown: &HashMap<String, Shown>,
    stopping: &HashSet<String>,
    refused: &HashSet<String>,
) -> Vec<Action> {
    let mut actions = Vec::new();
    let mut wanted = HashSet::new();
    for p in pods.iter().filter(|p| is_mine(p, node)) {
        let u = uid(p).to_string();
        if u.is_empty() {
            continue;
        }
        wanted.insert(u.clone());
        let busy = stopping.contains(&u);
        if p.metadata.deletion_timestamp.is_some() {
            if running.contains(&u) && !busy {
                let grace = p
                    .metadata
                    .deletion_grace_period_seconds
                    .map(|s| Duration::from_secs(s.max(0) as u64));
                actions.push(Action::Stop { uid: u, grace });
            } else if !running.contains(&u) && !busy {
                actions.push(Action::Finalize {
                    namespace: p.metadata.namespace.clone().unwrap_or_default(),
                    name: p.metadata.name.clone().unwrap_or_default(),
                    uid: u,
                });
            }
        } else if !running.contains(&u) && !busy && !refused.contains(&u) && !terminal(p) {
            actions.push(Action::Start(Box::new(p.clone())));
        } else if running.contains(&u) && !busy && shown.get(&u) != Some(&Shown::of(p)) {
            actions.push(Action::Update(Box::new(p.clone())));
        }
    }
    let mut orphans: Vec<&String> = running
        .iter()
        .filter(|u| !wanted.contains(*u) && !stopping.contains(*u))
        .collect();
    orphans.sort();
    for u in orphans {
        actions.push(Action::Stop {
            uid: u.clone(),
            grace: None,
        });
    }
    actions
}

/// The status to post for a pod the runtime refused (a spec this kubelet cannot run yet).
pub fn refused_status(message: &str, node_ip: &str) -> ApiPodStatus {
    ApiPodStatus {
        phase: Some("Pending".into()),
        reason: Some("UnsupportedPodSpec".into()),
        message: Some(message.into()),
        host_ip: Some(node_ip.into()),
        ..Default::default()
    }
}

/// Upstream's reason and message for a pod stopped at its activeDeadlineSeconds.
pub const DEADLINE_REASON: &str = "DeadlineExceeded";
pub const DEADLINE_MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

/// Has the pod been active longer than `spec.activeDeadlineSeconds`, counted from `status.startTime`
/// as upstream's active deadline handler counts it? (No start time yet: not active yet.)
pub fn past_deadline(p: &Pod, now: k8s_openapi::jiff::Timestamp) -> bool {
    let Some(deadline) = p.spec.as_ref().and_then(|s| s.active_deadline_seconds) else {
        return false;
    };
    let Some(start) = p.status.as_ref().and_then(|s| s.start_time.as_ref()) else {
        return false;
    };
    now.as_second() - start.0.as_second() >= deadline
}

/// The status of a pod stopped at its deadline: terminal, Failed whatever its containers' exits,
/// with upstream's reason and message (a Job's DeadlineExceeded and `kubectl get pod` show them).
pub fn deadline_status(p: &Pod, node_ip: &str) -> ApiPodStatus {
    let mut status = terminal_status(p, node_ip);
    status.phase = Some("Failed".into());
    status.reason = Some(DEADLINE_REASON.into());
    status.message = Some(DEADLINE_MESSAGE.into());
    status
}

/// What was posted, to post only real changes (the status carries only runtime-given times).
fn fingerprint(s: &ApiPodStatus) -> serde_json::Value {
    serde_json::to_value(s).unwrap_or_default()
}

/// The API holds another phase or other condition values than the kubelet computed: someone else
/// wrote the status (the node lifecycle controller marks pods Ready=False while the node is silent,
/// as upstream's MarkPodsNotReady), so it is posted again even though the kubelet's own view did not
/// change — upstream's status manager compares with the API's status the same way.
fn api_disagrees(p: &Pod, computed: &ApiPodStatus) -> bool {
    let api = p.status.as_ref();
    let api_condition = |t: &str| {
        api.and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == t))
            .map(|c| c.status.as_str())
    };
    // Only what the kubelet itself computes: conditions others own (PodScheduled from the
    // scheduler, DisruptionTarget from an eviction) are theirs to differ in.
    api.and_then(|s| s.phase.as_ref()) != computed.phase.as_ref()
        || computed
            .conditions
            .iter()
            .flatten()
            .any(|c| api_condition(&c.type_) != Some(c.status.as_str()))
}

/// The status of a pod the kubelet stopped because it was deleted: Failed (Succeeded if every
/// container had already exited 0), not ready, each container terminated — one still running when
/// it was killed reports upstream's exit code 137, one that never started ContainerStatusUnknown.
pub fn terminal_status(p: &Pod, node_ip: &str) -> ApiPodStatus {
    terminal_status_after(p, None, node_ip)
}

/// [`terminal_status`] with the runtime's last word on the pod's containers
/// ([`Runtime::take_final_status`]): one the runtime saw exit when it was stopped reports that exit
/// (0/Completed for one that ended cleanly on SIGTERM), as upstream's kubelet, which inspects each
/// container before removing it.
pub fn terminal_status_after(
    p: &Pod,
    last: Option<&[crate::container_status::ContainerStatus]>,
    node_ip: &str,
) -> ApiPodStatus {
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut status = p.status.clone().unwrap_or_default();
    let mut all_ok = true;
    for c in status.container_statuses.iter_mut().flatten() {
        let state = c.state.clone().unwrap_or_default();
        let exited = last
            .and_then(|l| l.iter().find(|r| r.name == c.name))
            .and_then(|r| match &r.state {
                crate::container_status::ContainerState::Terminated(t) => Some(t),
                _ => None,
            });
        let terminated = match (exited, state.terminated, state.running) {
            (Some(t), _, _) => ContainerStateTerminated {
                container_id: c.container_id.clone(),
                ..crate::mirror::terminated(t)
            },
            (None, Some(t), _) => t,
            (None, None, Some(r)) => ContainerStateTerminated {
                exit_code: 137,
                reason: Some("Error".into()),
                started_at: r.started_at,
                finished_at: Some(now.clone()),
                container_id: c.container_id.clone(),
                ..Default::default()
            },
            (None, None, None) => ContainerStateTerminated {
                exit_code: 137,
                reason: Some("ContainerStatusUnknown".into()),
                message: Some(
                    "The container could not be located when the pod was terminated".into(),
                ),
                finished_at: Some(now.clone()),
                ..Default::default()
            },
        };
        all_ok &= terminated.exit_code == 0;
        c.state = Some(ContainerState {
            terminated: Some(terminated),
            ..Default::default()
        });
        c.ready = false;
        c.started = Some(false);
    }
    let no_containers = status.container_statuses.as_ref().is_none_or(Vec::is_empty);
    status.phase = Some(
        if all_ok && !no_containers {
            "Succeeded"
        } else {
            "Failed"
        }
        .into(),
    );
    for c in status.conditions.iter_mut().flatten() {
        if c.type_ == "Ready" || c.type_ == "ContainersReady" {
            if c.status != "False" {
                c.last_transition_time = Some(now.clone());
            }
            c.status = "False".into();
            c.reason = Some("PodCompleted".into());
        }
    }
    if status.host_ip.is_none() {
        status.host_ip = Some(node_ip.into());
    }
    status
}

/// Pods never leave a terminal phase (upstream's generateAPIPodStatus): once the API shows Failed
/// or Succeeded — written by someone else (a test failing a DaemonSet's pod for its controller to
/// replace), or earlier by this kubelet — the phase posted stays that one, and the pod is not ready
/// (upstream's mergePodStatus: reason PodFailed or PodCompleted).
pub fn keep_terminal_phase(p: &Pod, status: &mut ApiPodStatus) {
    if !terminal(p) {
        return;
    }
    let phase = p.status.as_ref().and_then(|s| s.phase.clone());
    let reason = if phase.as_deref() == Some("Failed") {
        "PodFailed"
    } else {
        "PodCompleted"
    };
    status.phase = phase;
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    for c in status.conditions.iter_mut().flatten() {
        if (c.type_ == "Ready" || c.type_ == "ContainersReady") && c.status != "False" {
            c.status = "False".into();
            c.reason = Some(reason.into());
            c.last_transition_time = Some(now.clone());
        }
    }
}

/// Conditions the kubelet computes; every other type belongs to someone else.
const KUBELET_CONDITIONS: &[&str] = &[
    "PodScheduled",
    "Initialized",
    "ContainersReady",
    "Ready",
    "PodReadyToStartContainers",
    crate::pod_resize::PENDING,
    crate::pod_resize::IN_PROGRESS,
];

/// The kubelet posts the whole status, so it carries over the conditions others wrote — an
/// eviction's DisruptionTarget, podgc's, readiness gates — as upstream's status manager does: a
/// Job's pod failure policy matches on them after the pod has failed.
pub fn keep_foreign_conditions(p: &Pod, status: &mut ApiPodStatus) {
    let Some(api) = p.status.as_ref().and_then(|s| s.conditions.as_ref()) else {
        return;
    };
    let list = status.conditions.get_or_insert_with(Vec::new);
    for c in api {
        if !KUBELET_CONDITIONS.contains(&c.type_.as_str())
            && !list.iter().any(|x| x.type_ == c.type_)
        {
            list.push(c.clone());
        }
    }
}

pub struct WorkloadPods {
    node_name: String,
    node_ip: String,
    runtime: Arc<dyn Runtime>,
    pods: HashMap<String, Pod>,
    stopping: HashSet<String>,
    refused: HashMap<String, String>,
    /// Pods stopped at their activeDeadlineSeconds, with the Failed status computed when they were
    /// (computed once, so every sync posts the same status): never started again.
    expired: HashMap<String, ApiPodStatus>,
    posted: HashMap<String, serde_json::Value>,
    /// The kubelet's conditions as last computed for each pod, whose lastTransitionTimes the next
    /// status keeps where nothing changed ([`crate::condition_times`]).
    conditions: HashMap<String, Vec<k8s_openapi::api::core::v1::PodCondition>>,
    /// What the runtime was last handed of each pod's object ([`Shown`]).
    shown: HashMap<String, Shown>,
    status: StatusManager,
    /// The first full list of this node's pods has arrived.
    listed: bool,
    /// The runtime has adopted what an earlier run left ([`Runtime::adopt`]); nothing starts before.
    adopted: bool,
    adopt_error: Option<String>,
    /// Stopped pods' last runtime status ([`Runtime::take_final_status`]), kept until their final
    /// status is posted (a failed post is retried with the same exits).
    last: HashMap<String, crate::runtime::PodStatus>,
}

impl WorkloadPods {
    pub fn new(node_name: &str, node_ip: &str, runtime: Arc<dyn Runtime>) -> Self {
        WorkloadPods {
            node_name: node_name.into(),
            node_ip: node_ip.into(),
            runtime,
            pods: HashMap::new(),
            stopping: HashSet::new(),
            refused: HashMap::new(),
            expired: HashMap::new(),
            posted: HashMap::new(),
            conditions: HashMap::new(),
            shown: HashMap::new(),
            status: StatusManager::default(),
            listed: false,
            adopted: false,
            adopt_error: None,
            last: HashMap::new(),
        }
    }

    /// Watches this node's pods until `shutdown`; pods keep running when the kubelet stops (as with the
    /// kubelet).
    pub async fn run(mut self, client: Client, mut shutdown: watch::Receiver<bool>) {
        let api: Api<Pod> = Api::all(client.clone());
        let cfg = watcher::Config::default().fields(&format!("spec.nodeName={}", self.node_name));
        let mut events = watcher(api, cfg).default_backoff().boxed();
        let mut init: Option<HashMap<String, Pod>> = None;
        let (done_tx, mut done_rx) =
            mpsc::unbounded_channel::<(String, Result<(), RuntimeError>)>();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watch_error: Option<String> = None;
        tokio::spawn(self.status.clone().run(client.clone(), shutdown.clone()));
        // Pods' status changes wake the loop at once; runtimes without notifications rely on the tick.
        let changes = self
            .runtime
            .status_changes()
            .unwrap_or_else(|| Arc::new(tokio::sync::Notify::new()));
        loop {
            tokio::select! {
                ev = events.next() => match ev {
                    Some(Ok(ev)) => {
                        watch_error = None;
                        match ev {
                            Event::Init => init = Some(HashMap::new()),
                            Event::InitApply(p) => { init.get_or_insert_with(HashMap::new).insert(uid(&p).to_string(), p); }
                            Event::InitDone => {
                                if let Some(all) = init.take() { self.pods = all; }
                                self.listed = true;
                            }
                            Event::Apply(p) => { self.pods.insert(uid(&p).to_string(), p); }
                            Event::Delete(p) => { self.pods.remove(uid(&p)); }
                        }
                    }
                    Some(Err(e)) => {
                        let msg = e.to_string();
                        if watch_error.as_ref() != Some(&msg) {
                            tracing::warn!(error = %msg, "watching this node's pods; retrying");
                            watch_error = Some(msg);
                        }
                        continue;
                    }
                    None => return,
                },
                Some((u, r)) = done_rx.recv() => {
                    self.stopping.remove(&u);
                    match r {
                        // Stopped because it left the API (a terminal pod is deleted at once,
                        // without the kubelet's finalize): nothing of it is kept.
                        Ok(()) if !self.pods.contains_key(&u) => self.runtime.forget_pod(&u),
                        Ok(()) => {}
                        Err(e) => tracing::warn!(pod_uid = %u, error = %e, "stopping pod"),
                    }
                }
                _ = tick.tick() => {}
                _ = changes.notified() => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            self.sync(&client, &done_tx).await;
        }
    }

    async fn sync(
        &mut self,
        client: &Client,
        done: &mpsc::UnboundedSender<(String, Result<(), RuntimeError>)>,
    ) {
        // Oldest first, as upstream's kubelet admits pods: when two ask for the same host port, the
        // one created first keeps it.
        let mut pods: Vec<Pod> = self.pods.values().cloned().collect();
        pods.sort_by(|a, b| {
            let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(a)
                .cmp(&created(b))
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        });
        if !self.adopted && !self.adopt(&pods).await {
            return;
        }
        let running: HashSet<String> = self.runtime.pod_uids().into_iter().collect();
        self.enforce_deadlines(&pods, &running, done);
        let refused: HashSet<String> = self
            .refused
            .keys()
            .chain(self.expired.keys())
            .cloned()
            .collect();
        let actions = plan(
            &self.node_name,
            &pods,
            &running,
            &self.shown,
            &self.stopping,
            &refused,
        );
        for a in actions {
            match a {
                Action::Start(p) => match self.runtime.run_pod(&p).await {
                    Ok(()) => {
                        tracing::info!(pod = %key(&p), "pod admitted");
                        self.shown.insert(uid(&p).to_string(), Shown::of(&p));
                    }
                    Err(e @ RuntimeError::InvalidSpec { .. }) => {
                        tracing::warn!(pod = %key(&p), error = %e, "pod refused");
                        self.refused.insert(uid(&p).to_string(), e.to_string());
                    }
                    Err(e) => tracing::warn!(pod = %key(&p), error = %e, "starting pod"),
                },
                Action::Update(p) => match self.runtime.update_pod(&p) {
                    Ok(()) => {
                        tracing::debug!(pod = %key(&p), "pod update handed to the runtime");
                        self.shown.insert(uid(&p).to_string(), Shown::of(&p));
                    }
                    Err(e) => tracing::warn!(pod = %key(&p), error = %e, "updating pod"),
                },
                Action::Stop { uid, grace } => {
                    tracing::info!(pod_uid = %uid, ?grace, "stopping pod");
                    self.stopping.insert(uid.clone());
                    let rt = self.runtime.clone();
                    let done = done.clone();
                    tokio::spawn(async move {
                        let r = rt.stop_pod(&uid, grace).await;
                        let _ = done.send((uid, r));
                    });
                }
                Action::Finalize {
                    namespace,
                    name,
                    uid,
                } => {
                    // The pod's last word before it goes: a terminal phase (upstream's kubelet
                    // never deletes a pod it has not reported Failed or Succeeded), which a
                    // Job's replacement policy and pod failure policy wait for.
                    if let Some(last) = self.runtime.take_final_status(&uid) {
                        self.last.insert(uid.clone(), last);
                    }
                    if let Some(p) = self.pods.get(&uid).filter(|p| !terminal(p)) {
                        let last = self.last.get(&uid).map(|l| l.containers.as_slice());
                        let status = terminal_status_after(p, last, &self.node_ip);
                        if let Err(e) = crate::status_manager::post_status(client, p, &status).await
                        {
                            tracing::warn!(error = %e, "posting the final status of a deleted pod");
                            continue;
                        }
                    }
                    if let Err(e) = finalize(client, &namespace, &name, &uid).await {
                        tracing::warn!(error = %e, "removing deleted pod");
                    } else {
                        tracing::info!(pod = %format!("{namespace}/{name}"), "pod terminated and removed");
                        self.runtime.forget_pod(&uid);
                        self.posted.remove(&uid);
                        self.last.remove(&uid);
                        self.status.forget(&uid);
                        self.refused.remove(&uid);
                    }
                }
            }
        }
        let mut changed = Vec::new();
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        );
        for p in &pods {
            if !is_mine(p, &self.node_name) {
                continue;
            }
            let u = uid(p);
            let mut status = match (self.refused.get(u), self.runtime.pod_status(u)) {
                _ if self.expired.contains_key(u) => self.expired[u].clone(),
                (Some(msg), _) => refused_status(msg, &self.node_ip),
                (None, Some(rt)) => api_status(&rt, &self.node_ip, rt.pod_ip.as_deref()),
                (None, None) => continue,
            };
            keep_terminal_phase(p, &mut status);
            keep_foreign_conditions(p, &mut status);
            let before = self
                .conditions
                .get(u)
                .map(Vec::as_slice)
                .or_else(|| p.status.as_ref().and_then(|s| s.conditions.as_deref()));
            crate::condition_times::settle(before, &mut status, KUBELET_CONDITIONS, &now);
            self.conditions
                .insert(u.to_string(), status.conditions.clone().unwrap_or_default());
            let fp = fingerprint(&status);
            if self.posted.get(u) == Some(&fp) && !api_disagrees(p, &status) {
                continue;
            }
            changed.push((p.clone(), status, fp));
        }
        // Handed to the status manager, which posts them beside this loop (a burst of status changes
        // must not hold up admitting the next pods).
        for (p, status, fp) in changed {
            let u = uid(&p).to_string();
            self.status.set(&u, &p, status);
            self.posted.insert(u, fp);
        }
        let live: HashSet<&String> = self.pods.keys().collect();
        self.posted.retain(|u, _| live.contains(u));
        self.conditions.retain(|u, _| live.contains(u));
        self.shown.retain(|u, _| live.contains(u));
        self.refused.retain(|u, _| live.contains(u));
        self.expired.retain(|u, _| live.contains(u));
    }

    /// Stops every running pod past its activeDeadlineSeconds (upstream's active deadline handler:
    /// the pod is killed with its grace period and ends Failed/DeadlineExceeded, never restarted).
    fn enforce_deadlines(
        &mut self,
        pods: &[Pod],
        running: &HashSet<String>,
        done: &mpsc::UnboundedSender<(String, Result<(), RuntimeError>)>,
    ) {
        let now = k8s_openapi::jiff::Timestamp::now();
        for p in pods {
            let u = uid(p);
            if !is_mine(p, &self.node_name)
                || p.metadata.deletion_timestamp.is_some()
                || terminal(p)
                || self.expired.contains_key(u)
                || !running.contains(u)
                || !past_deadline(p, now)
            {
                continue;
            }
            tracing::info!(pod = %key(p), "pod past its activeDeadlineSeconds; stopping it");
            self.expired
                .insert(u.to_string(), deadline_status(p, &self.node_ip));
            if self.stopping.insert(u.to_string()) {
                let (rt, done, u) = (self.runtime.clone(), done.clone(), u.to_string());
                tokio::spawn(async move {
                    let r = rt.stop_pod(&u, None).await;
                    let _ = done.send((u, r));
                });
            }
        }
    }
}

impl WorkloadPods {
    /// Lets the runtime adopt the pods an earlier run left, once the first full list says which pods
    /// this node should run (pods being deleted included: they are then stopped with their grace
    /// period). True once done; until then no pod is started, or it would get a second sandbox.
    async fn adopt(&mut self, pods: &[Pod]) -> bool {
        if !self.listed {
            return false;
        }
        let wanted: Vec<Pod> = pods
            .iter()
            .filter(|p| is_mine(p, &self.node_name) && !terminal(p))
            .cloned()
            .collect();
        match self.runtime.adopt(&wanted).await {
            Ok(()) => {
                self.adopted = true;
                self.adopt_error = None;
                true
            }
            Err(e) => {
                let msg = e.to_string();
                if self.adopt_error.as_ref() != Some(&msg) {
                    tracing::warn!(error = %msg, "adopting the pods the container runtime runs; retrying");
                    self.adopt_error = Some(msg);
                }
                false
            }
        }
    }
}

async fn finalize(client: &Client, ns: &str, name: &str, uid: &str) -> Result<(), WorkloadError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(WorkloadError::Api {
            pod: format!("{ns}/{name}"),
            source,
        }),
    }
}

#[cfg(test)]
#[path = "workloads_tests.rs"]
mod tests;
