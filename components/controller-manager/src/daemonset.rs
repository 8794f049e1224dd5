//! daemonset: one pod per node that should run it, pinned to the node with node affinity (the
//! scheduler binds it), replaced template by template within maxUnavailable, removed from nodes
//! that stop qualifying or go away; status counts for `kubectl rollout status`. Each template is
//! recorded as a ControllerRevision (`daemonset_history`) whose hash labels the pods made from it,
//! so `kubectl rollout history|undo` work and an undo does not replace pods already on the old
//! template. The decisions live in `daemonset_plan` and `daemonset_history`; in-flight creates are
//! remembered so a pod is never made twice for a node.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kiln_common::events::{object_reference, NORMAL};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use serde_json::json;

use crate::context::Context;
use crate::daemonset_history::{
    plan_history, revision_data, revision_hash_of, revisions_to_prune, Current,
};
use crate::daemonset_plan::{
    compute_status, current_hash, new_pod, owner_reference, plan, pod_node, HASH_LABEL,
};
use crate::pods::controller_ref;
use crate::selector;

/// How long a create counts as in flight when the watch does not show the pod.
const PENDING_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum DaemonSetError {
    #[error("{action} for DaemonSet {key}: {source}")]
    Api {
        action: &'static str,
        key: String,
        source: kube::Error,
    },
    #[error("found a stale collision count ({seen:?}, expected {expected:?}) of DaemonSet {key} while processing; will retry until it is updated")]
    StaleCollisionCount {
        key: String,
        seen: Option<i32>,
        expected: Option<i32>,
    },
    #[error(
        "hash collision on ControllerRevision {name} of DaemonSet {key}: collisionCount bumped"
    )]
    HashCollision { key: String, name: String },
}

struct State {
    ctx: Context,
    /// ds uid → node → create sent at
    pending: Mutex<HashMap<String, HashMap<String, Instant>>>,
}

pub async fn run(ctx: Context) {
    let controller = Controller::new(
        Api::<DaemonSet>::all(ctx.client.clone()),
        watcher::Config::default(),
    );
    let ds_store = controller.store();
    let state = Arc::new(State {
        ctx: ctx.clone(),
        pending: Mutex::new(HashMap::new()),
    });
    controller
        .owns(
            Api::<Pod>::all(ctx.client.clone()),
            watcher::Config::default(),
        )
        .watches(
            Api::<Node>::all(ctx.client.clone()),
            watcher::Config::default(),
            move |_node: Node| {
                ds_store
                    .state()
                    .iter()
                    .map(|ds| ObjectRef::from_obj(ds.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .run(reconcile, error_policy, state)
        .for_each(|_| async {})
        .await;
}

async fn reconcile(ds: Arc<DaemonSet>, st: Arc<State>) -> Result<Action, DaemonSetError> {
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = ds.metadata.namespace.clone().unwrap_or_default();
    let name = ds.metadata.name.clone().unwrap_or_default();
    let key = format!("{ns}/{name}");
    let uid = ds.metadata.uid.clone().unwrap_or_default();
    let err = |action| {
        let key = key.clone();
        move |source| DaemonSetError::Api {
            action,
            key,
            source,
        }
    };
    // Listed from the API, not caches: the triggering event comes from another watch, and a
    // cache behind it would make this sync act on stale pods with nothing to correct it.
    let pods_api: Api<Pod> = Api::namespaced(st.ctx.client.clone(), &ns);
    let Some(sel) = ds.spec.as_ref().map(|s| selector::to_string(&s.selector)) else {
        return Ok(Action::await_change());
    };
    let pods: Vec<Arc<Pod>> = pods_api
        .list(&ListParams::default().labels(&sel))
        .await
        .map_err(err("listing pods"))?
        .items
        .into_iter()
        .filter(|p| controller_ref(&p.metadata).is_some_and(|r| r.uid == uid))
        .map(Arc::new)
        .collect();
    let nodes: Vec<Arc<Node>> = Api::<Node>::all(st.ctx.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(err("listing nodes"))?
        .items
        .into_iter()
        .map(Arc::new)
        .collect();
    let pending: BTreeSet<String> = {
        let mut all = st.pending.lock().expect("pending creates");
        let mine = all.entry(uid.clone()).or_default();
        mine.retain(|node, at| {
            at.elapsed() < PENDING_TIMEOUT
                && !pods
                    .iter()
                    .any(|p| pod_node(p).as_deref() == Some(node.as_str()))
        });
        mine.keys().cloned().collect()
    };
    let revs_api: Api<ControllerRevision> = Api::namespaced(st.ctx.client.clone(), &ns);
    let revisions = own_revisions(&ds, &revs_api, &sel, &key).await?;
    let current = current_revision(&st.ctx.client, &ds, &revs_api, &revisions, &key).await?;
    let hash = revision_hash_of(&current)
        .map(str::to_string)
        .unwrap_or_else(|| current_hash(&ds));
    let now = Timestamp::now();
    let todo = plan(&ds, &nodes, &pods, &pending, &hash, now);
    for node in &todo.create {
        st.pending
            .lock()
            .expect("pending creates")
            .entry(uid.clone())
            .or_default()
            .insert(node.clone(), Instant::now());
        let created = pods_api
            .create(&PostParams::default(), &new_pod(&ds, node, &hash))
            .await;
        match created {
            Ok(p) => {
                let msg = format!(
                    "Created pod: {}",
                    p.metadata.name.as_deref().unwrap_or_default()
                );
                let _ = st
                    .ctx
                    .recorder
                    .record(
                        &object_reference(ds.as_ref()),
                        NORMAL,
                        "SuccessfulCreate",
                        &msg,
                    )
                    .await;
            }
            Err(e) => {
                if let Some(m) = st.pending.lock().expect("pending creates").get_mut(&uid) {
                    m.remove(node);
                }
                return Err(err("creating a pod")(e));
            }
        }
    }
    for pod in &todo.delete {
        match pods_api.delete(pod, &DeleteParams::default()).await {
            Ok(_) => {
                let _ = st
                    .ctx
                    .recorder
                    .record(
                        &object_reference(ds.as_ref()),
                        NORMAL,
                        "SuccessfulDelete",
                        &format!("Deleted pod: {pod}"),
                    )
                    .await;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(err("deleting a pod")(e)),
        }
    }
    // cleanupHistory, over the pods that are left.
    let remaining: Vec<Arc<Pod>> = pods
        .iter()
        .filter(|p| {
            !todo
                .delete
                .iter()
                .any(|d| p.metadata.name.as_ref() == Some(d))
        })
        .cloned()
        .collect();
    let current_name = current.metadata.name.clone().unwrap_or_default();
    let mut all_revisions = revisions.clone();
    all_revisions.retain(|r| r.metadata.name != current.metadata.name);
    all_revisions.push(current.clone());
    for old in revisions_to_prune(&ds, &all_revisions, &current_name, &remaining) {
        match revs_api.delete(&old, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(err("deleting a controllerrevision")(e)),
        }
    }
    let status = compute_status(&ds, &nodes, &pods, &hash, now);
    if ds.status.as_ref() != Some(&status) {
        Api::<DaemonSet>::namespaced(st.ctx.client.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
            .map_err(err("updating status"))?;
    }
    let busy = !todo.create.is_empty()
        || !todo.delete.is_empty()
        || status.number_available != Some(status.desired_number_scheduled);
    Ok(Action::requeue(Duration::from_secs(if busy {
        5
    } else {
        300
    })))
}

fn error_policy(_ds: Arc<DaemonSet>, err: &DaemonSetError, _st: Arc<State>) -> Action {
    tracing::warn!(error = %err, "daemonset");
    Action::requeue(Duration::from_secs(2))
}

fn api_err<'a>(
    action: &'static str,
    key: &'a str,
) -> impl FnOnce(kube::Error) -> DaemonSetError + 'a {
    move |source| DaemonSetError::Api {
        action,
        key: key.to_string(),
        source,
    }
}

/// ClaimControllerRevisions: the set's own revisions, adopting orphans its selector matches.
async fn own_revisions(
    ds: &DaemonSet,
    api: &Api<ControllerRevision>,
    sel: &str,
    key: &str,
) -> Result<Vec<Arc<ControllerRevision>>, DaemonSetError> {
    let uid = ds.metadata.uid.clone().unwrap_or_default();
    let listed = api
        .list(&ListParams::default().labels(sel))
        .await
        .map_err(api_err("listing controllerrevisions", key))?
        .items;
    let mut out = Vec::new();
    for r in listed {
        match controller_ref(&r.metadata) {
            Some(o) if o.uid == uid => out.push(Arc::new(r)),
            Some(_) => {}
            None if ds.metadata.deletion_timestamp.is_none() => {
                let mut refs = r.metadata.owner_references.clone().unwrap_or_default();
                refs.push(owner_reference(ds));
                let patch = json!({"metadata": {"ownerReferences": refs,
                    "resourceVersion": r.metadata.resource_version}});
                let name = r.metadata.name.clone().unwrap_or_default();
                let adopted = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(api_err("adopting a controllerrevision", key))?;
                out.push(Arc::new(adopted));
            }
            None => {}
        }
    }
    Ok(out)
}

/// constructHistory: the revision of the current template — kept, renumbered (an undo) or
/// created (a name taken by other data bumps status.collisionCount and retries) — with
/// duplicates of it folded in.
async fn current_revision(
    client: &kube::Client,
    ds: &DaemonSet,
    api: &Api<ControllerRevision>,
    revisions: &[Arc<ControllerRevision>],
    key: &str,
) -> Result<Arc<ControllerRevision>, DaemonSetError> {
    let history = plan_history(ds, revisions);
    let current = match history.current {
        Current::Latest(r) => r,
        Current::Renumber(r, number) => {
            let name = r.metadata.name.clone().unwrap_or_default();
            let renumbered = api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"revision": number})),
                )
                .await
                .map_err(api_err("renumbering a controllerrevision", key))?;
            tracing::info!(daemonset = %key, revision = %name, number, "rolled back to an earlier revision");
            Arc::new(renumbered)
        }
        Current::Create(r) => match api.create(&PostParams::default(), &r).await {
            Ok(created) => Arc::new(created),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let name = r.metadata.name.clone().unwrap_or_default();
                let existing = api
                    .get(&name)
                    .await
                    .map_err(api_err("reading a controllerrevision", key))?;
                if existing.data.as_ref().map(|d| &d.0) == Some(&revision_data(ds)) {
                    Arc::new(existing)
                } else {
                    return Err(bump_collision_count(client, ds, key, name).await?);
                }
            }
            Err(e) => return Err(api_err("creating a controllerrevision", key)(e)),
        },
    };
    let hash = revision_hash_of(&current).unwrap_or_default().to_string();
    for dup in &history.duplicates {
        // Pods of a duplicate take the kept revision's hash before the duplicate goes.
        if let Some(dup_hash) = revision_hash_of(dup) {
            let pods_api: Api<Pod> = Api::namespaced(
                client.clone(),
                ds.metadata.namespace.as_deref().unwrap_or_default(),
            );
            let pods = pods_api
                .list(&ListParams::default().labels(&format!("{HASH_LABEL}={dup_hash}")))
                .await
                .map_err(api_err("listing pods", key))?;
            for p in pods.items {
                let patch = json!({"metadata": {"labels": {HASH_LABEL: hash}}});
                pods_api
                    .patch(
                        p.metadata.name.as_deref().unwrap_or_default(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(api_err("relabelling a pod", key))?;
            }
        }
        let name = dup.metadata.name.clone().unwrap_or_default();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(api_err("deleting a controllerrevision", key)(e)),
        }
    }
    Ok(current)
}

/// A revision name taken by another template: count the collision in the set's status (only when
/// the count this sync hashed with is the stored one), so the next sync hashes differently.
async fn bump_collision_count(
    client: &kube::Client,
    ds: &DaemonSet,
    key: &str,
    name: String,
) -> Result<DaemonSetError, DaemonSetError> {
    let ns = ds.metadata.namespace.clone().unwrap_or_default();
    let ds_name = ds.metadata.name.clone().unwrap_or_default();
    let client = Api::<DaemonSet>::namespaced(client.clone(), &ns);
    let live = client
        .get(&ds_name)
        .await
        .map_err(api_err("reading the daemonset", key))?;
    let seen = live.status.as_ref().and_then(|s| s.collision_count);
    let expected = ds.status.as_ref().and_then(|s| s.collision_count);
    if seen != expected {
        return Ok(DaemonSetError::StaleCollisionCount {
            key: key.to_string(),
            seen,
            expected,
        });
    }
    client
        .patch_status(
            &ds_name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"collisionCount": seen.unwrap_or(0) + 1}})),
        )
        .await
        .map_err(api_err("bumping collisionCount", key))?;
    tracing::info!(daemonset = %key, revision = %name, "hash collision; bumped collisionCount");
    Ok(DaemonSetError::HashCollision {
        key: key.to_string(),
        name,
    })
}
