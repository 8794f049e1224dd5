//! garbagecollector: deletes objects whose owners are gone (background propagation) — pods of a
//! deleted ReplicaSet, ReplicaSets of a deleted Deployment, slices of a deleted Service, leases of
//! a deleted Node. Every kind the apiserver lists and watches is watched through discovery, so the
//! graph is generic, like upstream's. An owner missing from the cache is confirmed with a GET
//! (name and UID) before anything is deleted; dependents with some owners left only lose the
//! dangling references.
//!
//! Owners deleted with a propagation policy carry upstream's finalizers until the collector has
//! done its part: `orphan` (the dependents lose their references to the owner, then the finalizer
//! goes) and `foregroundDeletion` (the owner waits for its blocking dependents — references with
//! blockOwnerDeletion — to be deleted; a dependent whose owners are all gone or waiting is deleted,
//! in the foreground itself when it has dependents, while one with another valid owner only loses
//! its reference to the waiting owner). A dependent that would close a cycle of owners waiting on
//! each other first has its references made non-blocking, as upstream breaks such cycles.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::{verbs, Discovery, Scope};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::json;
use tokio::sync::Notify;

use crate::context::Context;

/// Kinds left out of the graph: high-churn objects that never carry ownerReferences in practice.
const SKIPPED: &[&str] = &["events"];
/// How long to leave a dependent alone after acting on it (the watch catches up meanwhile).
const BACKOFF: Duration = Duration::from_secs(5);
/// Rescan this often even without events (owners confirmed present may go later).
const RESYNC: Duration = Duration::from_secs(10);
/// After acting, look again soon: a controller with a stale cache may have just made a new
/// dependent of the owner we saw go (a ReplicaSet replacing the pod we deleted).
const FOLLOW_UP: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("discovery: {0}")]
    Discovery(#[source] kube::Error),
}

/// The finalizer of an owner deleted with propagationPolicy Orphan.
pub const ORPHAN: &str = "orphan";
/// The finalizer of an owner deleted with propagationPolicy Foreground.
pub const FOREGROUND: &str = "foregroundDeletion";

/// What an owner reference points at, as the API says now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    /// No object of that name and UID.
    Gone,
    /// Being deleted in the foreground: waiting for its dependents to go.
    Waiting,
    /// A valid owner.
    Solid,
}

/// What to do with a dependent, given its owners' states (None: cannot tell).
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    /// Every owner is gone or waiting: delete it, in the foreground when an owner waits for it and
    /// it has dependents of its own (upstream's attemptToDeleteItem).
    Delete {
        foreground: bool,
    },
    /// Some owners are valid: drop the references (by UID) to the gone and waiting ones.
    RemoveOwners(Vec<String>),
}

pub fn verdict(
    owners: &[OwnerReference],
    state: impl Fn(&OwnerReference) -> Option<OwnerState>,
    has_dependents: bool,
) -> Verdict {
    if owners.is_empty() {
        return Verdict::Keep;
    }
    let states: Vec<Option<OwnerState>> = owners.iter().map(&state).collect();
    let not_solid: Vec<String> = owners
        .iter()
        .zip(&states)
        .filter(|(_, s)| matches!(s, Some(OwnerState::Gone | OwnerState::Waiting)))
        .map(|(o, _)| o.uid.clone())
        .collect();
    if not_solid.is_empty() {
        Verdict::Keep
    } else if not_solid.len() == owners.len() {
        let waited_for = states.contains(&Some(OwnerState::Waiting));
        Verdict::Delete {
            foreground: waited_for && has_dependents,
        }
    } else {
        Verdict::RemoveOwners(not_solid)
    }
}

#[derive(Clone, Debug)]
struct Entry {
    kind: usize,
    namespace: Option<String>,
    name: String,
    owners: Vec<OwnerReference>,
    finalizers: Vec<String>,
    deleting: bool,
}

impl Entry {
    /// Being deleted with `finalizer` still on it.
    fn held_by(&self, finalizer: &str) -> bool {
        self.deleting && self.finalizers.iter().any(|f| f == finalizer)
    }

    fn owned_by(&self, uid: &str) -> bool {
        self.owners.iter().any(|o| o.uid == uid)
    }

    fn blocks(&self, uid: &str) -> bool {
        self.owners
            .iter()
            .any(|o| o.uid == uid && o.block_owner_deletion == Some(true))
    }
}

/// One step of the collector's work, planned from the graph and then done through the API.
#[derive(Debug)]
enum Work {
    /// A dependent whose owners may be gone or waiting for it; `has_dependents` and `cycle` (one
    /// of its own dependents is waiting for its dependents too) shape a foreground deletion.
    Dependent {
        entry: Entry,
        has_dependents: bool,
        cycle: bool,
    },
    /// An owner deleted with Orphan: strip its references from `dependents`, then its finalizer.
    Orphan {
        owner: Entry,
        uid: String,
        dependents: Vec<Entry>,
    },
    /// An owner deleted in the foreground with no blocking dependent left: drop its finalizer.
    Release { owner: Entry },
}

/// What to do now, by UID (UIDs in `skip` were acted on moments ago).
fn plan(
    objects: &[HashMap<String, Entry>],
    skip: &HashMap<String, Instant>,
) -> Vec<(String, Work)> {
    let all: HashMap<&String, &Entry> = objects.iter().flat_map(|m| m.iter()).collect();
    // Only owners being deleted and unsettled dependents ask: a scan each is cheap enough.
    let dependents_of =
        |uid: &str| -> Vec<&Entry> { all.values().copied().filter(|d| d.owned_by(uid)).collect() };
    let mut work = Vec::new();
    for (uid, e) in &all {
        if skip.contains_key(*uid) {
            continue;
        }
        if e.held_by(ORPHAN) {
            let dependents = dependents_of(uid).into_iter().cloned().collect();
            work.push((
                (*uid).clone(),
                Work::Orphan {
                    owner: (*e).clone(),
                    uid: (*uid).clone(),
                    dependents,
                },
            ));
            continue;
        }
        if e.held_by(FOREGROUND) && !dependents_of(uid).iter().any(|d| d.blocks(uid)) {
            work.push((
                (*uid).clone(),
                Work::Release {
                    owner: (*e).clone(),
                },
            ));
            continue;
        }
        if e.deleting {
            continue;
        }
        let unsettled = e.owners.iter().any(|o| match all.get(&o.uid) {
            None => true,
            Some(owner) => owner.held_by(FOREGROUND),
        });
        if unsettled {
            let dependents = dependents_of(uid);
            let has_dependents = !dependents.is_empty();
            let cycle = dependents.iter().any(|d| d.held_by(FOREGROUND));
            work.push((
                (*uid).clone(),
                Work::Dependent {
                    entry: (*e).clone(),
                    has_dependents,
                    cycle,
                },
            ));
        }
    }
    work
}

#[derive(Default)]
struct Graph {
    /// per watched kind: uid → entry
    objects: Vec<HashMap<String, Entry>>,
}

struct Kind {
    resource: ApiResource,
    namespaced: bool,
}

fn entry(kind: usize, obj: &DynamicObject) -> Option<(String, Entry)> {
    let uid = obj.metadata.uid.clone()?;
    Some((
        uid,
        Entry {
            kind,
            namespace: obj.metadata.namespace.clone(),
            name: obj.metadata.name.clone().unwrap_or_default(),
            owners: obj.metadata.owner_references.clone().unwrap_or_default(),
            finalizers: obj.metadata.finalizers.clone().unwrap_or_default(),
            deleting: obj.metadata.deletion_timestamp.is_some(),
        },
    ))
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
    let mut kinds = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            let usable = [verbs::LIST, verbs::WATCH, verbs::DELETE, verbs::GET]
                .iter()
                .all(|v| caps.supports_operation(v));
            if !usable || SKIPPED.contains(&resource.plural.as_str()) {
                continue;
            }
            // Kinds our credentials may not list (RBAC) stay out of the graph rather than
            // leaving a watch failing forever.
            let probe: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            if let Err(e) = probe.list(&ListParams::default().limit(1)).await {
                tracing::info!(resource = %resource.plural, error = %e, "garbage collector skips a kind it cannot list");
                continue;
            }
            kinds.push(Kind {
                resource,
                namespaced: caps.scope == Scope::Namespaced,
            });
        }
    }
    Ok(kinds)
}

async fn collect(ctx: Context, kinds: Vec<Kind>) {
    let graph = Arc::new(Mutex::new(Graph {
        objects: vec![HashMap::new(); kinds.len()],
    }));
    let changed = Arc::new(Notify::new());
    let mut watches = tokio::task::JoinSet::new();
    let synced: Arc<Vec<AtomicBool>> =
        Arc::new(kinds.iter().map(|_| AtomicBool::new(false)).collect());
    for (i, kind) in kinds.iter().enumerate() {
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &kind.resource);
        let (graph, changed, synced) = (graph.clone(), changed.clone(), synced.clone());
        watches.spawn(async move {
            let stream = watcher(api, watcher::Config::default()).default_backoff();
            let mut stream = std::pin::pin!(stream);
            let mut initial = HashMap::new();
            while let Some(event) = stream.next().await {
                let mut g = graph.lock().expect("gc graph");
                match event {
                    Ok(watcher::Event::Apply(o)) => {
                        if let Some((uid, e)) = entry(i, &o) {
                            g.objects[i].insert(uid, e);
                        }
                    }
                    Ok(watcher::Event::Delete(o)) => {
                        if let Some(uid) = &o.metadata.uid {
                            g.objects[i].remove(uid);
                        }
                    }
                    Ok(watcher::Event::Init) => initial.clear(),
                    Ok(watcher::Event::InitApply(o)) => {
                        if let Some((uid, e)) = entry(i, &o) {
                            initial.insert(uid, e);
                        }
                    }
                    Ok(watcher::Event::InitDone) => {
                        g.objects[i] = std::mem::take(&mut initial);
                        synced[i].store(true, Ordering::SeqCst);
                    }
                    Err(e) => tracing::debug!(error = %e, "gc watch failed; retrying"),
                }
                drop(g);
                changed.notify_one();
            }
        });
    }
    let kinds = Arc::new(kinds);
    let mut recent: HashMap<String, Instant> = HashMap::new();
    let started = Instant::now();
    let mut wait = RESYNC;
    loop {
        let _ = tokio::time::timeout(wait, changed.notified()).await;
        wait = RESYNC;
        // Wait for a complete picture (an unsynced kind makes owners look missing, costing GETs),
        // but not forever: every deletion is confirmed through the API anyway.
        let unsynced: Vec<&str> = kinds
            .iter()
            .zip(synced.iter())
            .filter(|(_, s)| !s.load(Ordering::SeqCst))
            .map(|(k, _)| k.resource.plural.as_str())
            .collect();
        if !unsynced.is_empty() {
            if started.elapsed() < Duration::from_secs(30) {
                continue;
            }
            tracing::debug!(?unsynced, "collecting before every kind is watched");
        }
        recent.retain(|_, at| at.elapsed() < BACKOFF);
        let work = plan(&graph.lock().expect("gc graph").objects, &recent);
        if !work.is_empty() {
            wait = FOLLOW_UP;
        }
        for (uid, w) in work {
            recent.insert(uid, Instant::now());
            let result = match &w {
                Work::Dependent {
                    entry,
                    has_dependents,
                    cycle,
                } => process(&ctx.client, &kinds, entry, *has_dependents, *cycle).await,
                Work::Orphan {
                    owner,
                    uid,
                    dependents,
                } => orphan(&ctx.client, &kinds, owner, uid, dependents).await,
                Work::Release { owner } => {
                    remove_finalizer(&api_for(&ctx.client, &kinds, owner), owner, FOREGROUND).await
                }
            };
            if let Err(err) = result {
                tracing::warn!(work = ?w, error = %err, "garbage collection failed");
            }
        }
    }
}

/// A handle on the entry's kind, in its namespace.
fn api_for(client: &kube::Client, kinds: &[Kind], e: &Entry) -> Api<DynamicObject> {
    let kind = &kinds[e.kind];
    match &e.namespace {
        Some(ns) if kind.namespaced => Api::namespaced_with(client.clone(), ns, &kind.resource),
        _ => Api::all_with(client.clone(), &kind.resource),
    }
}

/// Sets the object's ownerReferences to `owners` (a merge patch replaces the list).
async fn set_owners(
    api: &Api<DynamicObject>,
    e: &Entry,
    owners: &[OwnerReference],
) -> Result<(), kube::Error> {
    let patch = json!({"metadata": {"ownerReferences": owners}});
    match api
        .patch(&e.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(err) => Err(err),
    }
}

/// Drops `finalizer` from the object as it is now (the resourceVersion guards the list).
async fn remove_finalizer(
    api: &Api<DynamicObject>,
    e: &Entry,
    finalizer: &str,
) -> Result<(), kube::Error> {
    let Some(now) = api.get_opt(&e.name).await? else {
        return Ok(());
    };
    let finalizers = now.metadata.finalizers.unwrap_or_default();
    if !finalizers.iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let keep: Vec<&String> = finalizers.iter().filter(|f| *f != finalizer).collect();
    let patch = json!({"metadata": {
        "finalizers": keep,
        "resourceVersion": now.metadata.resource_version,
    }});
    tracing::info!(kind = %api.resource_url(), name = %e.name, finalizer, "removing the finalizer: dependents handled");
    match api
        .patch(&e.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(err) => Err(err),
    }
}

/// Orphan propagation (upstream's orphanDependents): every dependent loses its references to the
/// owner, then the owner's `orphan` finalizer goes and its deletion completes.
async fn orphan(
    client: &kube::Client,
    kinds: &[Kind],
    owner: &Entry,
    uid: &str,
    dependents: &[Entry],
) -> Result<(), kube::Error> {
    for d in dependents {
        let keep: Vec<OwnerReference> = d.owners.iter().filter(|o| o.uid != uid).cloned().collect();
        tracing::info!(name = %d.name, owner = %owner.name, "orphaning a dependent");
        set_owners(&api_for(client, kinds, d), d, &keep).await?;
    }
    remove_finalizer(&api_for(client, kinds, owner), owner, ORPHAN).await
}

/// Confirms each owner through the API (the cache may lag), then acts.
async fn process(
    client: &kube::Client,
    kinds: &[Kind],
    e: &Entry,
    has_dependents: bool,
    cycle: bool,
) -> Result<(), kube::Error> {
    let mut exists: HashMap<String, Option<OwnerState>> = HashMap::new();
    for o in &e.owners {
        let (group, _) = o
            .api_version
            .split_once('/')
            .unwrap_or(("", &o.api_version));
        let Some(kind) = kinds
            .iter()
            .find(|k| k.resource.group == group && k.resource.kind == o.kind)
        else {
            exists.insert(o.uid.clone(), None);
            continue;
        };
        let api: Api<DynamicObject> = match (&e.namespace, kind.namespaced) {
            (Some(ns), true) => Api::namespaced_with(client.clone(), ns, &kind.resource),
            (None, true) => {
                // A cluster-scoped object cannot have a namespaced owner: that reference is invalid.
                exists.insert(o.uid.clone(), Some(OwnerState::Gone));
                continue;
            }
            (_, false) => Api::all_with(client.clone(), &kind.resource),
        };
        let found = api
            .get_opt(&o.name)
            .await?
            .filter(|f| f.metadata.uid.as_deref() == Some(o.uid.as_str()));
        let state = match found {
            None => OwnerState::Gone,
            Some(f)
                if f.metadata.deletion_timestamp.is_some()
                    && f.metadata
                        .finalizers
                        .iter()
                        .flatten()
                        .any(|x| x == FOREGROUND) =>
            {
                OwnerState::Waiting
            }
            Some(_) => OwnerState::Solid,
        };
        exists.insert(o.uid.clone(), Some(state));
    }
    let kind = &kinds[e.kind];
    let api = api_for(client, kinds, e);
    match verdict(
        &e.owners,
        |o| exists.get(&o.uid).copied().flatten(),
        has_dependents,
    ) {
        Verdict::Keep => {}
        Verdict::Delete { foreground } => {
            if foreground && cycle {
                // One of its dependents waits for its own dependents: blocking references here
                // would close a cycle of owners waiting on each other.
                let unblocked: Vec<OwnerReference> = e
                    .owners
                    .iter()
                    .map(|o| OwnerReference {
                        block_owner_deletion: o.block_owner_deletion.map(|_| false),
                        ..o.clone()
                    })
                    .collect();
                set_owners(&api, e, &unblocked).await?;
            }
            tracing::info!(kind = %kind.resource.kind, namespace = ?e.namespace, name = %e.name, foreground, "deleting: every owner is gone or waiting for its dependents");
            let params = if foreground {
                DeleteParams::foreground()
            } else {
                DeleteParams::background()
            };
            match api.delete(&e.name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(err) => return Err(err),
            }
        }
        Verdict::RemoveOwners(gone) => {
            let keep: Vec<OwnerReference> = e
                .owners
                .iter()
                .filter(|o| !gone.contains(&o.uid))
                .cloned()
                .collect();
            tracing::info!(kind = %kind.resource.kind, name = %e.name, "removing references to gone or waiting owners");
            set_owners(&api, e, &keep).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: format!("rs-{uid}"),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    #[test]
    fn verdicts() {
        use OwnerState::*;
        let state = |o: &OwnerReference| match o.uid.as_str() {
            "alive" => Some(Solid),
            "waiting" => Some(Waiting),
            "gone" => Some(Gone),
            _ => None,
        };
        assert_eq!(verdict(&[], state, false), Verdict::Keep);
        assert_eq!(verdict(&[owner("alive")], state, false), Verdict::Keep);
        assert_eq!(
            verdict(&[owner("gone")], state, true),
            Verdict::Delete { foreground: false }
        );
        assert_eq!(
            verdict(&[owner("alive"), owner("gone")], state, false),
            Verdict::RemoveOwners(vec!["gone".into()])
        );
        // An owner whose kind cannot be resolved is presumed alive.
        assert_eq!(verdict(&[owner("x")], |_| None, false), Verdict::Keep);
        // Foreground: a dependent with a valid owner only loses the waiting one…
        assert_eq!(
            verdict(&[owner("waiting"), owner("alive")], state, false),
            Verdict::RemoveOwners(vec!["waiting".into()])
        );
        // …one without goes, in the foreground itself when it has dependents.
        assert_eq!(
            verdict(&[owner("waiting")], state, false),
            Verdict::Delete { foreground: false }
        );
        assert_eq!(
            verdict(&[owner("waiting"), owner("gone")], state, true),
            Verdict::Delete { foreground: true }
        );
    }

    fn entry(name: &str, owners: &[&str], deleting: bool, finalizers: &[&str]) -> Entry {
        Entry {
            kind: 0,
            namespace: Some("ns".into()),
            name: name.into(),
            owners: owners.iter().map(|u| owner(u)).collect(),
            finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
            deleting,
        }
    }

    fn graph(entries: Vec<Entry>) -> Vec<HashMap<String, Entry>> {
        vec![entries.into_iter().map(|e| (e.name.clone(), e)).collect()]
    }

    /// The plan as "what uid" lines, sorted.
    fn planned(objects: &[HashMap<String, Entry>]) -> Vec<String> {
        let mut out: Vec<String> = plan(objects, &HashMap::new())
            .into_iter()
            .map(|(uid, w)| match w {
                Work::Dependent {
                    cycle,
                    has_dependents,
                    ..
                } => {
                    format!("dependent {uid} deps={has_dependents} cycle={cycle}")
                }
                Work::Orphan { dependents, .. } => {
                    let mut names: Vec<String> = dependents.into_iter().map(|d| d.name).collect();
                    names.sort();
                    format!("orphan {uid} {names:?}")
                }
                Work::Release { .. } => format!("release {uid}"),
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn an_orphaning_owner_strips_its_dependents_then_its_finalizer() {
        let g = graph(vec![
            entry("rc", &[], true, &[ORPHAN]),
            entry("p1", &["rc"], false, &[]),
            entry("p2", &["rc", "other"], false, &[]),
            entry("other", &[], false, &[]),
        ]);
        // p1 and p2 are not collected: their owner is being orphaned, not gone.
        assert_eq!(planned(&g), ["orphan rc [\"p1\", \"p2\"]"]);
    }

    #[test]
    fn a_foreground_owner_waits_for_its_blocking_dependents() {
        let g = graph(vec![
            entry("rc", &[], true, &[FOREGROUND]),
            entry("p1", &["rc"], false, &[]),
            entry("p2", &["rc"], true, &[]),
        ]);
        // p1 is deleted; p2 is already going; rc keeps its finalizer meanwhile.
        assert_eq!(planned(&g), ["dependent p1 deps=false cycle=false"]);
        let g = graph(vec![entry("rc", &[], true, &[FOREGROUND])]);
        assert_eq!(planned(&g), ["release rc"]);
        // A non-blocking reference does not hold the owner.
        let mut loose = entry("p1", &["rc"], false, &[]);
        loose.owners[0].block_owner_deletion = Some(false);
        let g = graph(vec![entry("rc", &[], true, &[FOREGROUND]), loose]);
        assert_eq!(
            planned(&g),
            ["dependent p1 deps=false cycle=false", "release rc"]
        );
    }

    #[test]
    fn a_cycle_of_owners_is_seen() {
        // pod1 ← pod3, pod2 ← pod1, pod3 ← pod2; pod1 and pod2 are deleted in the foreground.
        let g = graph(vec![
            entry("pod1", &["pod3"], true, &[FOREGROUND]),
            entry("pod2", &["pod1"], true, &[FOREGROUND]),
            entry("pod3", &["pod2"], false, &[]),
        ]);
        // pod3 has a dependent (pod1) waiting for its own: it must unblock before it goes.
        assert_eq!(planned(&g), ["dependent pod3 deps=true cycle=true"]);
    }

    #[test]
    fn a_dependent_of_a_vanished_owner_is_collected() {
        let g = graph(vec![entry("p1", &["gone"], false, &[])]);
        assert_eq!(planned(&g), ["dependent p1 deps=false cycle=false"]);
        let g = graph(vec![
            entry("rs", &[], false, &[]),
            entry("p1", &["rs"], false, &[]),
        ]);
        assert!(planned(&g).is_empty());
    }
}
