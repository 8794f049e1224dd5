//! daemonset: one pod per node that should run it, pinned to the node with node affinity (the
//! scheduler binds it), replaced template by template within maxUnavailable, removed from nodes
//! that stop qualifying or go away; status counts for `kubectl rollout status`. The decisions live
//! in `daemonset_plan`; in-flight creates are remembered so a pod is never made twice for a node.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kiln_common::events::{object_reference, NORMAL};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use serde_json::json;

use crate::context::Context;
use crate::daemonset_plan::{compute_status, current_hash, new_pod, plan, pod_node};
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
    let now = Timestamp::now();
    let todo = plan(&ds, &nodes, &pods, &pending, now);
    let hash = current_hash(&ds);
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
    let status = compute_status(&ds, &nodes, &pods, now);
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
