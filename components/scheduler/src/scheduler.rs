//! The scheduling loop: kube-rs watchers (with reflectors) feed the cache and the queue; each cycle
//! pops a pod, runs the pure algorithm, assumes the result in the cache and binds in the background,
//! so the next cycle already sees the previous decision. A pod with unbound WaitForFirstConsumer
//! claims has them reserved (assumed in the volume cache) and its bind task first writes and waits
//! for the volume bindings (`volume_prebind`), without holding up other pods. A pod that fits
//! nowhere may preempt pods of lower priority (`preempting`: the victims are evicted in the
//! background, the pod is nominated to their node and retried once they are gone).

mod preempting;

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kiln_common::events::{object_reference, EventRecorder, NORMAL, WARNING};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::mpsc;

use crate::algorithm::schedule_from;
use crate::cache::{assigned_node, is_terminal, Cache};
use crate::config::{COMPONENT, SCHEDULER_NAMES};
use crate::fit_error::ScheduleError;
use crate::metrics::{AttemptResult, Metrics};
use crate::pod_info::{pod_key, PodKey};
use crate::pod_status;
use crate::queue::SchedulingQueue;
use crate::volume_binding::{self, Reservation};
use crate::volume_cache::claim_key_of;
use crate::volume_filters;
use crate::volume_prebind::{self, KubeVolumeWriter, StoreView};

/// Concurrent bindings, like upstream's parallel binding cycles but bounded.
const BINDS_IN_FLIGHT: usize = 64;
/// Concurrent Scheduled-event writes.
const EVENTS_IN_FLIGHT: usize = 16;

/// Pods handled per drain before events are looked at again, so a long backlog does not starve
/// the watch (and the cache stays current).
const DRAIN_BATCH: usize = 256;

/// Is this an unbound pod that this scheduler should place?
pub fn wants_scheduling(pod: &Pod) -> bool {
    let name = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or("default-scheduler");
    assigned_node(pod).is_none()
        && !is_terminal(pod)
        && pod.metadata.deletion_timestamp.is_none()
        && SCHEDULER_NAMES.contains(&name)
}

fn hash_of<T: Hash>(value: T) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// What of a pending pod matters to scheduling: spec and labels (not status, so our own condition
/// writes do not count as updates).
fn pod_fingerprint(pod: &Pod) -> u64 {
    hash_of((
        serde_json::to_string(&pod.spec).unwrap_or_default(),
        serde_json::to_string(&pod.metadata.labels).unwrap_or_default(),
    ))
}

/// What of a node matters to scheduling (heartbeats do not).
fn node_fingerprint(node: &Node) -> u64 {
    let status = node.status.as_ref();
    hash_of((
        serde_json::to_string(&node.metadata.labels).unwrap_or_default(),
        serde_json::to_string(&node.spec).unwrap_or_default(),
        serde_json::to_string(&status.map(|s| (&s.allocatable, &s.images))).unwrap_or_default(),
    ))
}

#[derive(Debug, thiserror::Error)]
enum BindFailure {
    /// upstream's PreBind failure text.
    #[error("running PreBind plugin \"VolumeBinding\": {0}")]
    Volumes(String),
    #[error(transparent)]
    Pod(#[from] pod_status::PodWriteError),
}

struct BindOutcome {
    key: PodKey,
    started: Instant,
    result: Result<(), BindFailure>,
}

/// Which watches have delivered their first full list; scheduling waits for all of them, as
/// upstream waits for its informers.
#[derive(Debug, Default)]
struct Synced {
    pods: bool,
    nodes: bool,
    claims: bool,
    volumes: bool,
    classes: bool,
    pdbs: bool,
}

impl Synced {
    fn all(&self) -> bool {
        self.pods && self.nodes && self.claims && self.volumes && self.classes && self.pdbs
    }
}

pub struct SchedulingLoop {
    client: kube::Client,
    cache: Cache,
    queue: SchedulingQueue,
    pods: Store<Pod>,
    recorder: Arc<EventRecorder>,
    metrics: Arc<Metrics>,
    rng: StdRng,
    /// Where the next pod's node search starts (upstream's nextStartNodeIndex).
    next_start: usize,
    /// Bindings in flight at once.
    bind_slots: Arc<tokio::sync::Semaphore>,
    /// Scheduled events in flight at once (written after their binding, off its path).
    event_slots: Arc<tokio::sync::Semaphore>,
    node_fingerprints: HashMap<String, u64>,
    bind_tx: mpsc::UnboundedSender<BindOutcome>,
    synced: Synced,
    relist_pods: Option<HashSet<PodKey>>,
    relist_nodes: Option<HashSet<String>>,
    relist_claims: Option<HashSet<String>>,
    relist_volumes: Option<HashSet<String>>,
    relist_classes: Option<HashSet<String>>,
    relist_pdbs: Option<HashSet<String>>,
    /// Pods whose preemption's API calls are in flight: not scheduled until they finish
    /// (upstream's PreEnqueue check for asynchronous preemption).
    preempting: HashSet<PodKey>,
    preempt_tx: mpsc::UnboundedSender<preempting::PreemptionDone>,
    /// What each pod's volume binding assumed, until its bind task reports.
    reservations: HashMap<PodKey, Reservation>,
    view: StoreView,
    bind_timeout: Duration,
}

impl SchedulingLoop {
    pub async fn run(
        client: kube::Client,
        identity: &str,
        metrics: Arc<Metrics>,
        bind_timeout: Duration,
    ) {
        let (pod_store, pod_writer) = reflector::store();
        let pod_events = reflector::reflector(
            pod_writer,
            watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()),
        )
        .default_backoff();
        let (node_store, node_writer) = reflector::store();
        let node_events = reflector::reflector(
            node_writer,
            watcher(Api::<Node>::all(client.clone()), watcher::Config::default()),
        )
        .default_backoff();
        let (claim_store, claim_writer) = reflector::store();
        let claim_events = reflector::reflector(
            claim_writer,
            watcher(
                Api::<PersistentVolumeClaim>::all(client.clone()),
                watcher::Config::default(),
            ),
        )
        .default_backoff();
        let (volume_store, volume_writer) = reflector::store();
        let volume_events = reflector::reflector(
            volume_writer,
            watcher(
                Api::<PersistentVolume>::all(client.clone()),
                watcher::Config::default(),
            ),
        )
        .default_backoff();
        let class_events = watcher(
            Api::<StorageClass>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff();
        let pdb_events = watcher(
            Api::<PodDisruptionBudget>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff();
        let view = StoreView {
            pods: pod_store.clone(),
            nodes: node_store,
            volumes: volume_store,
            claims: claim_store,
        };
        let (bind_tx, mut bind_rx) = mpsc::unbounded_channel();
        let (preempt_tx, mut preempt_rx) = mpsc::unbounded_channel();
        let mut this = SchedulingLoop {
            recorder: Arc::new(EventRecorder::new(client.clone(), COMPONENT, identity)),
            client,
            cache: Cache::default(),
            queue: SchedulingQueue::default(),
            pods: pod_store,
            metrics,
            rng: StdRng::from_os_rng(),
            next_start: 0,
            bind_slots: Arc::new(tokio::sync::Semaphore::new(BINDS_IN_FLIGHT)),
            event_slots: Arc::new(tokio::sync::Semaphore::new(EVENTS_IN_FLIGHT)),
            node_fingerprints: HashMap::new(),
            bind_tx,
            synced: Synced::default(),
            relist_pods: None,
            relist_nodes: None,
            relist_claims: None,
            relist_volumes: None,
            relist_classes: None,
            relist_pdbs: None,
            preempting: HashSet::new(),
            preempt_tx,
            reservations: HashMap::new(),
            view,
            bind_timeout,
        };
        let mut pod_events = std::pin::pin!(pod_events);
        let mut node_events = std::pin::pin!(node_events);
        let mut claim_events = std::pin::pin!(claim_events);
        let mut volume_events = std::pin::pin!(volume_events);
        let mut class_events = std::pin::pin!(class_events);
        let mut pdb_events = std::pin::pin!(pdb_events);
        loop {
            if this.synced.all() {
                let now = Instant::now();
                for _ in 0..DRAIN_BATCH {
                    let Some(key) = this.queue.pop(now) else {
                        break;
                    };
                    this.schedule_one(&key);
                }
            }
            this.metrics.set_pending(this.queue.lengths());
            let wake = this
                .queue
                .next_wakeup()
                .map(tokio::time::Instant::from_std)
                .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
            let busy = this.queue.lengths().active > 0 && this.synced.all();
            tokio::select! {
                ev = pod_events.next() => match ev {
                    Some(Ok(ev)) => this.on_pod_event(ev),
                    Some(Err(e)) => tracing::warn!(error = %e, "pod watch failed; retrying"),
                    None => return,
                },
                ev = node_events.next() => match ev {
                    Some(Ok(ev)) => this.on_node_event(ev),
                    Some(Err(e)) => tracing::warn!(error = %e, "node watch failed; retrying"),
                    None => return,
                },
                ev = claim_events.next() => match ev {
                    Some(Ok(ev)) => this.on_claim_event(ev),
                    Some(Err(e)) => tracing::warn!(error = %e, "persistentvolumeclaim watch failed; retrying"),
                    None => return,
                },
                ev = volume_events.next() => match ev {
                    Some(Ok(ev)) => this.on_volume_event(ev),
                    Some(Err(e)) => tracing::warn!(error = %e, "persistentvolume watch failed; retrying"),
                    None => return,
                },
                ev = class_events.next() => match ev {
                    Some(Ok(ev)) => this.on_class_event(ev),
                    Some(Err(e)) => tracing::warn!(error = %e, "storageclass watch failed; retrying"),
                    None => return,
                },
                ev = pdb_events.next() => match ev {
                    Some(Ok(ev)) => this.on_pdb_event(ev),
                    Some(Err(e)) => tracing::warn!(error = %e, "poddisruptionbudget watch failed; retrying"),
                    None => return,
                },
                Some(outcome) = bind_rx.recv() => this.on_bind_outcome(outcome),
                Some(done) = preempt_rx.recv() => this.on_preemption_done(done),
                _ = tokio::time::sleep_until(wake) => {}
                // More pods are ready: loop straight back to the drain.
                _ = std::future::ready(()), if busy => {}
            }
        }
    }

    fn on_pod_event(&mut self, ev: watcher::Event<Pod>) {
        let now = Instant::now();
        match ev {
            watcher::Event::Init => self.relist_pods = Some(HashSet::new()),
            watcher::Event::InitApply(pod) => {
                if let Some(seen) = self.relist_pods.as_mut() {
                    seen.insert(pod_key(&pod));
                }
                self.apply_pod(&pod, now);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.relist_pods.take() {
                    for key in self.cache.placed_keys() {
                        if !seen.contains(&key) && !self.cache.is_assumed(&key) {
                            self.cache.remove_pod(&key);
                        }
                    }
                    self.queue.retain(|k| seen.contains(k));
                }
                self.synced.pods = true;
                self.queue.move_all_to_active_or_backoff(now);
            }
            watcher::Event::Apply(pod) => self.apply_pod(&pod, now),
            watcher::Event::Delete(pod) => {
                let key = pod_key(&pod);
                let freed = self.cache.is_placed(&key);
                self.cache.remove_pod(&key);
                self.cache.nominator_mut().remove(&key);
                self.queue.remove(&key);
                if freed {
                    self.queue.move_all_to_active_or_backoff(now);
                }
            }
        }
    }

    fn apply_pod(&mut self, pod: &Pod, now: Instant) {
        let key = pod_key(pod);
        let was_placed = self.cache.is_placed(&key);
        self.cache.upsert_pod(pod);
        // A pod whose binding is in flight waits for nothing (its nomination ended at assume).
        let pending = wants_scheduling(pod) && !self.cache.is_assumed(&key);
        self.cache.nominator_mut().update_from_pod(pod, pending);
        if wants_scheduling(pod) {
            self.queue.add_or_update(&key, pod_fingerprint(pod), now);
        } else {
            self.queue.remove(&key);
            // A placed pod that finished frees its resources.
            if was_placed && !self.cache.is_placed(&key) {
                self.queue.move_all_to_active_or_backoff(now);
            }
        }
    }

    fn on_node_event(&mut self, ev: watcher::Event<Node>) {
        let now = Instant::now();
        match ev {
            watcher::Event::Init => self.relist_nodes = Some(HashSet::new()),
            watcher::Event::InitApply(node) | watcher::Event::Apply(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                if let Some(seen) = self.relist_nodes.as_mut() {
                    seen.insert(name.clone());
                }
                let fp = node_fingerprint(&node);
                let changed = self.node_fingerprints.insert(name, fp) != Some(fp);
                self.cache.upsert_node(node);
                if changed {
                    self.queue.move_all_to_active_or_backoff(now);
                }
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.relist_nodes.take() {
                    let gone: Vec<String> = self
                        .node_fingerprints
                        .keys()
                        .filter(|n| !seen.contains(*n))
                        .cloned()
                        .collect();
                    for name in gone {
                        self.node_fingerprints.remove(&name);
                        self.cache.remove_node(&name);
                    }
                }
                self.synced.nodes = true;
                self.queue.move_all_to_active_or_backoff(now);
            }
            watcher::Event::Delete(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                self.node_fingerprints.remove(&name);
                self.cache.remove_node(&name);
            }
        }
    }

    /// A claim appeared, changed or went: pods waiting for it may fit now (upstream queues on any
    /// PVC add or update).
    fn on_claim_event(&mut self, ev: watcher::Event<PersistentVolumeClaim>) {
        let now = Instant::now();
        let volumes = self.cache.volumes_mut();
        match ev {
            watcher::Event::Init => self.relist_claims = Some(HashSet::new()),
            watcher::Event::InitApply(c) => {
                if let Some(seen) = self.relist_claims.as_mut() {
                    seen.insert(claim_key_of(&c));
                }
                volumes.upsert_claim(c);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.relist_claims.take() {
                    volumes.retain_claims(|k| seen.contains(k));
                }
                self.synced.claims = true;
                self.queue.move_all_to_active_or_backoff(now);
            }
            watcher::Event::Apply(c) => {
                volumes.upsert_claim(c);
                self.queue.move_all_to_active_or_backoff(now);
            }
            watcher::Event::Delete(c) => volumes.remove_claim(&claim_key_of(&c)),
        }
    }

    fn on_volume_event(&mut self, ev: watcher::Event<PersistentVolume>) {
        let now = Instant::now();
        let volumes = self.cache.volumes_mut();
        let name = |v: &PersistentVolume| v.metadata.name.clone().unwrap_or_default();
        match ev {
            watcher::Event::Init => self.relist_volumes = Some(HashSet::new()),
            watcher::Event::InitApply(v) => {
                if let Some(seen) = self.relist_volumes.as_mut() {
                    seen.insert(name(&v));
                }
                volumes.upsert_volume(v);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.relist_volumes.take() {
                    volumes.retain_volumes(|k| seen.contains(k));
                }
                self.synced.volumes = true;
                self.queue.move_all_to_active_or_backoff(now);
            }
            watcher::Event::Apply(v) => {
                volumes.upsert_volume(v);
                self.queue.move_all_to_active_or_backoff(now);
            }
            watcher::Event::Delete(v) => volumes.remove_volume(&name(&v)),
        }
    }

    fn on_class_event(&mut self, ev: watcher::Event<StorageClass>) {
        let now = Instant::now();
        let volumes = self.cache.volumes_mut();
        let name = |c: &StorageClass| c.metadata.name.clone().unwrap_or_default();
        match ev {
            watcher::Event::Init => self.relist_classes = Some(HashSet::new()),
            watcher::Event::InitApply(c) => {
                if let Some(seen) = self.relist_classes.as_mut() {
                    seen.insert(name(&c));
                }
                volumes.upsert_class(c);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.relist_classes.take() {
                    volumes.retain_classes(|k| seen.contains(k));
                }
                self.synced.classes = true;
                self.queue.move_all_to_active_or_backoff(now);
            }
            watcher::Event::Apply(c) => {
                volumes.upsert_class(c);
                self.queue.move_all_to_active_or_backoff(now);
            }
            watcher::Event::Delete(c) => volumes.remove_class(&name(&c)),
        }
    }

    /// Reserve: the chosen node's volume plan, assumed in the cache.
    fn reserve_volumes(&mut self, pod: &Pod, node: &str) -> Reservation {
        let cache = &self.cache;
        let volumes = volume_filters::pre_filter(pod, cache.volumes(), &|c| cache.claim_in_use(c));
        let plan = match (volumes, cache.node(node).and_then(|n| n.node.clone())) {
            (Ok(v), Some(n)) => volume_filters::node_plan(&v, &n),
            _ => Default::default(),
        };
        if plan.is_empty() {
            return Reservation::default();
        }
        tracing::info!(pod = %pod_key(pod), %node, volumes = %volume_binding::describe(&plan), "reserving volumes");
        volume_binding::reserve(self.cache.volumes_mut(), node, &plan)
    }

    fn schedule_one(&mut self, key: &str) {
        let Some((namespace, name)) = key.split_once('/') else {
            return;
        };
        let Some(pod) = self.pods.get(&ObjectRef::new(name).within(namespace)) else {
            self.queue.remove(key);
            return;
        };
        if !wants_scheduling(&pod) {
            self.queue.remove(key);
            return;
        }
        // A binding for it is in flight: its outcome decides what happens next.
        if self.cache.is_assumed(key) {
            return;
        }
        // Its preemption's API calls are in flight: parked until they finish.
        if self.preempting.contains(key) {
            self.queue.mark_unschedulable(key, Instant::now());
            return;
        }
        let started = Instant::now();
        match schedule_from(&pod, &self.cache, &mut self.rng, &mut self.next_start) {
            Ok(node) => {
                self.cache.assume(&pod, &node);
                let reservation = self.reserve_volumes(&pod, &node);
                if !reservation.is_empty() {
                    self.reservations
                        .insert(key.to_string(), reservation.clone());
                }
                let view = self.view.clone();
                let bind_timeout = self.bind_timeout;
                let client = self.client.clone();
                let recorder = self.recorder.clone();
                let tx = self.bind_tx.clone();
                let key = key.to_string();
                let slots = self.bind_slots.clone();
                let event_slots = self.event_slots.clone();
                tokio::spawn(async move {
                    // PreBind: the volume bindings first (no bind slot held while waiting on them).
                    if !reservation.is_empty() {
                        let writer = KubeVolumeWriter(client.clone());
                        if let Err(e) = volume_prebind::bind_volumes(
                            &writer,
                            &view,
                            &pod,
                            &node,
                            &reservation,
                            bind_timeout,
                            volume_prebind::POLL_INTERVAL,
                        )
                        .await
                        {
                            let _ = tx.send(BindOutcome {
                                key,
                                started,
                                result: Err(BindFailure::Volumes(e)),
                            });
                            return;
                        }
                    }
                    // Bounded in flight: each request needs a connection, and a burst of thousands
                    // would open (and TLS-handshake) thousands of them.
                    let slot = slots.acquire_owned().await;
                    let result = pod_status::bind(client, &pod, &node)
                        .await
                        .map_err(BindFailure::from);
                    drop(slot);
                    let bound = result.is_ok();
                    let _ = tx.send(BindOutcome {
                        key: key.clone(),
                        started,
                        result,
                    });
                    if bound {
                        tracing::info!(pod = %key, node = %node, "bound");
                        // The event is best effort and must not hold up the next bindings.
                        let _slot = event_slots.acquire_owned().await;
                        let message = format!("Successfully assigned {key} to {node}");
                        if let Err(e) = recorder
                            .record(
                                &object_reference(pod.as_ref()),
                                NORMAL,
                                "Scheduled",
                                &message,
                            )
                            .await
                        {
                            tracing::warn!(error = %e, "writing the Scheduled event failed");
                        }
                    }
                });
            }
            Err(ScheduleError::Internal(message)) => {
                // A plugin error, not a verdict on the nodes: retried after backoff.
                tracing::warn!(pod = %key, %message, "scheduling attempt failed");
                self.metrics
                    .attempt(AttemptResult::Error, started.elapsed().as_secs_f64());
                self.queue.mark_error(key, Instant::now());
                self.record_failed_scheduling(pod, message);
            }
            Err(err) => {
                self.metrics.attempt(
                    AttemptResult::Unschedulable,
                    started.elapsed().as_secs_f64(),
                );
                self.queue.mark_unschedulable(key, Instant::now());
                let nominated = match &err {
                    ScheduleError::Unfit(fit) => self.post_filter_outcome(&pod, fit),
                    _ => None,
                };
                self.report_unschedulable(pod, err, nominated);
            }
        }
    }

    /// `nominated`: the node to write as `status.nominatedNodeName` (`""` clears it), or None to
    /// leave it.
    fn report_unschedulable(&self, pod: Arc<Pod>, err: ScheduleError, nominated: Option<String>) {
        let message = err.message();
        tracing::info!(pod = %pod_key(&pod), %message, "unschedulable");
        let client = self.client.clone();
        let recorder = self.recorder.clone();
        tokio::spawn(async move {
            if let Err(e) = recorder
                .record(
                    &object_reference(pod.as_ref()),
                    WARNING,
                    "FailedScheduling",
                    &message,
                )
                .await
            {
                tracing::warn!(error = %e, "writing the FailedScheduling event failed");
            }
            if let Err(e) =
                pod_status::mark_unschedulable(client, &pod, &message, nominated.as_deref()).await
            {
                tracing::warn!(error = %e, "updating the pod condition failed");
            }
        });
    }

    /// A binding cycle that failed (the volume binding's PreBind, or the binding itself), as
    /// upstream's handleSchedulingFailure with an error status: the FailedScheduling event, then
    /// PodScheduled=False/SchedulerError with the same message, and the nomination cleared.
    fn report_scheduler_error(&self, pod: Arc<Pod>, message: String) {
        let client = self.client.clone();
        let recorder = self.recorder.clone();
        tokio::spawn(async move {
            if let Err(e) = recorder
                .record(
                    &object_reference(pod.as_ref()),
                    WARNING,
                    "FailedScheduling",
                    &message,
                )
                .await
            {
                tracing::warn!(error = %e, "writing the FailedScheduling event failed");
            }
            let reason = pod_status::SCHEDULER_ERROR;
            if let Err(e) =
                pod_status::mark_not_scheduled(client, &pod, reason, &message, Some("")).await
            {
                tracing::warn!(error = %e, "updating the pod condition failed");
            }
        });
    }

    fn record_failed_scheduling(&self, pod: Arc<Pod>, message: String) {
        let recorder = self.recorder.clone();
        tokio::spawn(async move {
            let _ = recorder
                .record(
                    &object_reference(pod.as_ref()),
                    WARNING,
                    "FailedScheduling",
                    &message,
                )
                .await;
        });
    }

    fn on_bind_outcome(&mut self, outcome: BindOutcome) {
        let seconds = outcome.started.elapsed().as_secs_f64();
        let reservation = self.reservations.remove(&outcome.key);
        match outcome.result {
            Ok(()) => self.metrics.attempt(AttemptResult::Scheduled, seconds),
            Err(e) => {
                tracing::warn!(pod = %outcome.key, error = %e, "binding failed; retrying after backoff");
                self.metrics.attempt(AttemptResult::Error, seconds);
                // Unreserve: the pod and its volume assumptions no longer count.
                self.cache.forget_assumed(&outcome.key);
                if let Some(r) = &reservation {
                    volume_binding::unreserve(self.cache.volumes_mut(), r);
                }
                self.queue.mark_error(&outcome.key, Instant::now());
                if let Some((ns, name)) = outcome.key.split_once('/') {
                    if let Some(pod) = self.pods.get(&ObjectRef::new(name).within(ns)) {
                        let message = match &e {
                            BindFailure::Volumes(_) => e.to_string(),
                            BindFailure::Pod(_) => format!("Binding rejected: {e}"),
                        };
                        self.report_scheduler_error(pod, message);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_our_unbound_live_pods_are_scheduled() {
        let base = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        assert!(wants_scheduling(&pod(base.clone())));
        assert!(wants_scheduling(&pod(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [], "schedulerName": "kiln-scheduler"}})
        )));
        assert!(!wants_scheduling(&pod(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [], "schedulerName": "other"}})
        )));
        assert!(!wants_scheduling(&pod(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [], "nodeName": "n1"}})
        )));
        assert!(!wants_scheduling(&pod(
            json!({"metadata": {"name": "p", "deletionTimestamp": "2025-01-01T00:00:00Z"}, "spec": {"containers": []}})
        )));
        assert!(!wants_scheduling(&pod(
            json!({"metadata": {"name": "p"}, "spec": {"containers": []}, "status": {"phase": "Failed"}})
        )));
    }

    #[test]
    fn status_writes_do_not_change_the_fingerprint() {
        let a = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": []}}));
        let mut b = a.clone();
        b.status = Some(Default::default());
        assert_eq!(pod_fingerprint(&a), pod_fingerprint(&b));
        let mut c = a.clone();
        c.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
        assert_ne!(pod_fingerprint(&a), pod_fingerprint(&c));
    }
}
