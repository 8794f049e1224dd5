//! garbagecollector: deletes objects whose owners are gone (background propagation) — pods of a
//! deleted ReplicaSet, ReplicaSets of a deleted Deployment, slices of a deleted Service, leases of
//! a deleted Node. Every kind the apiserver lists and watches is watched through discovery, so the
//! graph is generic, like upstream's. An owner missing from the cache is confirmed with a GET
//! (name and UID) before anything is deleted; dependents with some owners left only lose the
//! dangling references.

use std::collections::{HashMap, HashSet};
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

/// What to do with a dependent, given which of its owners still exist (None: cannot tell).
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    /// Every owner is gone: delete it (background propagation).
    Delete,
    /// Some owners are gone: drop those references (by UID), keep the object.
    RemoveOwners(Vec<String>),
}

pub fn verdict(
    owners: &[OwnerReference],
    exists: impl Fn(&OwnerReference) -> Option<bool>,
) -> Verdict {
    if owners.is_empty() {
        return Verdict::Keep;
    }
    let gone: Vec<String> = owners
        .iter()
        .filter(|o| exists(o) == Some(false))
        .map(|o| o.uid.clone())
        .collect();
    if gone.is_empty() {
        Verdict::Keep
    } else if gone.len() == owners.len() {
        Verdict::Delete
    } else {
        Verdict::RemoveOwners(gone)
    }
}

#[derive(Clone)]
struct Entry {
    kind: usize,
    namespace: Option<String>,
    name: String,
    owners: Vec<OwnerReference>,
    deleting: bool,
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
        let candidates: Vec<(String, Entry)> = {
            let g = graph.lock().expect("gc graph");
            let uids: HashSet<&String> = g.objects.iter().flat_map(|m| m.keys()).collect();
            g.objects
                .iter()
                .flat_map(|m| m.iter())
                .filter(|(uid, e)| {
                    !e.deleting
                        && !recent.contains_key(*uid)
                        && e.owners.iter().any(|o| !uids.contains(&o.uid))
                })
                .map(|(u, e)| (u.clone(), e.clone()))
                .collect()
        };
        if !candidates.is_empty() {
            wait = FOLLOW_UP;
        }
        for (uid, e) in candidates {
            recent.insert(uid.clone(), Instant::now());
            if let Err(err) = process(&ctx.client, &kinds, &e).await {
                tracing::warn!(object = %e.name, error = %err, "garbage collection failed");
            }
        }
    }
}

/// Confirms each owner through the API (the cache may lag), then acts.
async fn process(client: &kube::Client, kinds: &[Kind], e: &Entry) -> Result<(), kube::Error> {
    let mut exists: HashMap<String, Option<bool>> = HashMap::new();
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
                exists.insert(o.uid.clone(), Some(false));
                continue;
            }
            (_, false) => Api::all_with(client.clone(), &kind.resource),
        };
        let found = api.get_opt(&o.name).await?;
        let alive = found.is_some_and(|f| f.metadata.uid.as_deref() == Some(o.uid.as_str()));
        exists.insert(o.uid.clone(), Some(alive));
    }
    let kind = &kinds[e.kind];
    let api: Api<DynamicObject> = match &e.namespace {
        Some(ns) if kind.namespaced => Api::namespaced_with(client.clone(), ns, &kind.resource),
        _ => Api::all_with(client.clone(), &kind.resource),
    };
    match verdict(&e.owners, |o| exists.get(&o.uid).copied().flatten()) {
        Verdict::Keep => {}
        Verdict::Delete => {
            tracing::info!(kind = %kind.resource.kind, namespace = ?e.namespace, name = %e.name, "deleting: every owner is gone");
            match api.delete(&e.name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(err) => return Err(err),
            }
        }
        Verdict::RemoveOwners(gone) => {
            let keep: Vec<&OwnerReference> =
                e.owners.iter().filter(|o| !gone.contains(&o.uid)).collect();
            let patch = json!({"metadata": {"ownerReferences": keep}});
            tracing::info!(kind = %kind.resource.kind, name = %e.name, "removing dangling owner references");
            api.patch(&e.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
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
        let alive = |o: &OwnerReference| Some(o.uid == "alive");
        assert_eq!(verdict(&[], alive), Verdict::Keep);
        assert_eq!(verdict(&[owner("alive")], alive), Verdict::Keep);
        assert_eq!(verdict(&[owner("gone")], alive), Verdict::Delete);
        assert_eq!(
            verdict(&[owner("alive"), owner("gone")], alive),
            Verdict::RemoveOwners(vec!["gone".into()])
        );
        // An owner whose kind cannot be resolved is presumed alive.
        assert_eq!(verdict(&[owner("x")], |_| None), Verdict::Keep);
    }
}
