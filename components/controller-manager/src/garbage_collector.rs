//! garbagecollector: deletes objects whose owners are gone (background propagation) — pods of a
//! deleted ReplicaSet, ReplicaSets of a deleted Deployment, slices of a deleted Service, leases of
//! a deleted Node. Every kind the apiserver lists and watches is watched through discovery, so the
//! graph is generic, like upstream's. An owner is confirmed through the API (name and UID) before
//! anything is deleted; dependents with some owners left only lose the dangling references.
//!
//! Owners deleted with a propagation policy carry upstream's finalizers until the collector has
//! done its part: `orphan` (the dependents lose their references to the owner, then the finalizer
//! goes) and `foregroundDeletion` (the owner waits for its blocking dependents — references with
//! blockOwnerDeletion — to be gone; a dependent whose owners are all gone or waiting is deleted,
//! in the foreground itself when it has dependents, while one with another valid owner only loses
//! its reference to the waiting owner). A dependent that would close a cycle of owners waiting on
//! each other first has its references made non-blocking, and an owner waiting for its dependents
//! never re-queues one that waits for its own, as upstream breaks such cycles.
//!
//! As upstream's: the watches keep a graph (`garbage_collector_graph.rs`) and each change queues
//! only the UIDs it concerns (`garbage_collector_queue.rs`, client-go workqueue semantics); 20
//! workers (upstream's `--concurrent-gc-syncs` default) take them side by side
//! (`garbage_collector_process.rs`: attemptToDeleteItem, processDeletingDependentsItem,
//! attemptToOrphan), through the API (`garbage_collector_api.rs`, paced by a client-side token
//! bucket: `garbage_collector_rate.rs`), so a hundred dependents of one owner are deleted or
//! orphaned in parallel rather than one after another.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::discovery::{verbs, Discovery, Scope};
use kube::runtime::{watcher, WatchStreamExt};
use tokio::sync::Notify;

use crate::context::Context;

#[path = "garbage_collector_api.rs"]
mod api;
#[path = "garbage_collector_graph.rs"]
mod graph;
#[path = "garbage_collector_process.rs"]
mod process;
#[path = "garbage_collector_queue.rs"]
mod queue;
#[path = "garbage_collector_rate.rs"]
mod rate;

use graph::{Graph, Node};
use process::Collector;
use queue::WorkQueue;

/// Kinds left out of the graph: high-churn objects that never carry ownerReferences in practice.
const SKIPPED: &[&str] = &["events"];
/// Upstream's `--concurrent-gc-syncs` default: UIDs processed at once.
const WORKERS: usize = 20;
/// Every object needing attention is queued again this often: a safety net for a trigger missed
/// (an owner whose kind is not watched, a failure that ran out of retries).
const RESYNC: Duration = Duration::from_secs(30);
/// How long to wait for every kind's first list before working from a partial graph (an owner
/// of an unlisted kind looks missing, costing a GET per dependent, never a wrong deletion). Short:
/// after a lost lease the collector should be back at work while the lists of a busy API server
/// finish.
const SYNC_WAIT: Duration = Duration::from_secs(10);
/// Kinds probed (listed once) at the same time while discovering.
const DISCOVERY_PROBES: usize = 8;
/// One UID's processing is abandoned (and retried) after this long.
const ITEM_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("discovery: {0}")]
    Discovery(#[source] kube::Error),
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("{name} kept changing under the collector's patches")]
    Conflicts { name: String },
    #[error("processing took longer than {0:?}")]
    Timeout(Duration),
}

/// The finalizer of an owner deleted with propagationPolicy Orphan.
pub const ORPHAN: &str = "orphan";
/// The finalizer of an owner deleted with propagationPolicy Foreground.
pub const FOREGROUND: &str = "foregroundDeletion";

/// A watched kind.
pub struct Kind {
    resource: ApiResource,
    namespaced: bool,
}

fn node(kind: usize, obj: &DynamicObject) -> Option<Node> {
    Some(Node {
        kind,
        uid: obj.metadata.uid.clone()?,
        namespace: obj.metadata.namespace.clone(),
        name: obj.metadata.name.clone().unwrap_or_default(),
        owners: obj.metadata.owner_references.clone().unwrap_or_default(),
        finalizers: obj.metadata.finalizers.clone().unwrap_or_default(),
        deleting: obj.metadata.deletion_timestamp.is_some(),
    })
}

pub async fn run(ctx: Context) {
    loop {
        match discover(&ctx.client).await {
            Ok(kinds) => return collect(ctx, kinds).await,
            Err(e) => {
                tracing::warn!(error = %e, "garbage collector waits for discovery");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }
}

async fn discover(client: &kube::Client) -> Result<Vec<Kind>, GcError> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(GcError::Discovery)?;
    let mut candidates = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            let usable = [verbs::LIST, verbs::WATCH, verbs::DELETE, verbs::GET]
                .iter()
                .all(|v| caps.supports_operation(v));
            if usable && !SKIPPED.contains(&resource.plural.as_str()) {
                candidates.push(Kind {
                    resource,
                    namespaced: caps.scope == Scope::Namespaced,
                });
            }
        }
    }
    // Kinds our credentials may not list (RBAC) stay out of the graph rather than leaving a
    // watch failing forever. The probes go side by side: after a restart (a lost lease) the
    // collector should be back within seconds, not one round trip per kind later.
    let probes = futures::stream::iter(candidates)
        .map(|kind| async move {
            let probe: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource);
            match probe.list(&ListParams::default().limit(1)).await {
                Ok(_) => Some(kind),
                Err(e) => {
                    tracing::info!(resource = %kind.resource.plural, error = %e, "garbage collector skips a kind it cannot list");
                    None
                }
            }
        })
        .buffered(DISCOVERY_PROBES);
    Ok(probes.filter_map(std::future::ready).collect().await)
}

/// What the watches share: the graph, the queue its changes feed, and whether to feed it yet
/// (not before every kind's first list, after which everything needing attention is queued).
struct Shared {
    graph: Arc<Mutex<Graph>>,
    queue: Arc<WorkQueue>,
    ready: AtomicBool,
    synced: Vec<AtomicBool>,
    synced_changed: Notify,
}

impl Shared {
    fn apply(&self, change: impl FnOnce(&mut Graph) -> Vec<String>) {
        let triggered = change(&mut self.graph.lock().expect("gc graph"));
        if self.ready.load(Ordering::SeqCst) {
            for uid in triggered {
                self.queue.add(uid);
            }
        }
    }

    fn queue_all_needing_attention(&self) {
        let uids = self.graph.lock().expect("gc graph").all_needing_attention();
        for uid in uids {
            self.queue.add(uid);
        }
    }
}

/// Keeps the graph current with one kind's watch.
async fn watch(client: kube::Client, kind: usize, resource: ApiResource, shared: Arc<Shared>) {
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut initial = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Apply(o)) => {
                if let Some(n) = node(kind, &o) {
                    shared.apply(|g| g.upsert(n));
                }
            }
            Ok(watcher::Event::Delete(o)) => {
                if let Some(uid) = o.metadata.uid {
                    shared.apply(|g| g.remove(&uid));
                }
            }
            Ok(watcher::Event::Init) => initial.clear(),
            Ok(watcher::Event::InitApply(o)) => initial.extend(node(kind, &o)),
            Ok(watcher::Event::InitDone) => {
                let listed = std::mem::take(&mut initial);
                shared.apply(|g| g.replace_kind(kind, listed));
                shared.synced[kind].store(true, Ordering::SeqCst);
                shared.synced_changed.notify_one();
            }
            Err(e) => {
                tracing::debug!(resource = %resource.plural, error = %e, "gc watch failed; retrying")
            }
        }
    }
}

async fn collect(ctx: Context, kinds: Vec<Kind>) {
    let kinds = Arc::new(kinds);
    let shared = Arc::new(Shared {
        graph: Arc::new(Mutex::new(Graph::default())),
        queue: WorkQueue::new(),
        ready: AtomicBool::new(false),
        synced: kinds.iter().map(|_| AtomicBool::new(false)).collect(),
        synced_changed: Notify::new(),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for (i, kind) in kinds.iter().enumerate() {
        tasks.spawn(watch(
            ctx.client.clone(),
            i,
            kind.resource.clone(),
            shared.clone(),
        ));
    }

    // Wait for a complete picture, but not forever: every deletion is confirmed through the API.
    let started = Instant::now();
    loop {
        let unsynced: Vec<&str> = kinds
            .iter()
            .zip(&shared.synced)
            .filter(|(_, s)| !s.load(Ordering::SeqCst))
            .map(|(k, _)| k.resource.plural.as_str())
            .collect();
        if unsynced.is_empty() {
            break;
        }
        if started.elapsed() >= SYNC_WAIT {
            tracing::info!(
                ?unsynced,
                "garbage collector starts before every kind is listed"
            );
            break;
        }
        let _ =
            tokio::time::timeout(Duration::from_secs(1), shared.synced_changed.notified()).await;
    }
    shared.ready.store(true, Ordering::SeqCst);
    shared.queue_all_needing_attention();
    tracing::info!(
        kinds = kinds.len(),
        objects = shared.graph.lock().expect("gc graph").object_count(),
        queued = shared.queue.queued(),
        "garbage collector started"
    );

    let collector = Arc::new(Collector::new(
        shared.graph.clone(),
        shared.queue.clone(),
        api::KubeApi {
            client: ctx.client.clone(),
            kinds: kinds.clone(),
            limiter: rate::RateLimiter::new(rate::QPS, rate::BURST),
        },
    ));
    for _ in 0..WORKERS {
        tasks.spawn(worker(collector.clone()));
    }
    loop {
        tokio::time::sleep(RESYNC).await;
        shared.queue_all_needing_attention();
    }
}

/// Takes UIDs off the queue for good: a failure comes back after its back-off.
async fn worker(collector: Arc<Collector<api::KubeApi>>) {
    loop {
        let uid = collector.queue.get().await;
        let result = match tokio::time::timeout(ITEM_TIMEOUT, collector.process(&uid)).await {
            Ok(r) => r,
            Err(_) => Err(GcError::Timeout(ITEM_TIMEOUT)),
        };
        match result {
            Ok(()) => collector.queue.forget(&uid),
            Err(e) => {
                tracing::warn!(%uid, error = %e, "garbage collection failed; retrying");
                collector.queue.retry(uid.clone());
            }
        }
        collector.queue.done(&uid);
    }
}
