//! replicaset: keeps `spec.replicas` active pods per ReplicaSet — adopting matching orphans,
//! releasing owned pods that stopped matching, creating from the template, deleting in upstream's
//! order — and reports replicas / fullyLabeled / ready / available / observedGeneration. In-memory
//! expectations keep a reconcile that runs before the watch shows our own writes from acting twice:
//! while the cache is behind them, the pods are read from the API instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kiln_common::events::{object_reference, NORMAL};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, applier, trigger_self, Action, ReconcileRequest};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::json;

use crate::context::{spawn_reflector_with_changes, Context};
use crate::pods::{
    available_at, controller_ref, deletion_order, is_active, is_available, is_ready,
};
use crate::selector;

/// How long to wait for the watch to show our own creates/deletes before acting again anyway.
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ReplicaSetError {
    #[error("{action} for ReplicaSet {rs}: {source}")]
    Api {
        action: &'static str,
        rs: String,
        source: kube::Error,
    },
}

/// The pods a ReplicaSet owns after adoption and release.
#[derive(Debug, Default)]
pub struct Claim {
    pub owned: Vec<Arc<Pod>>,
    pub adopt: Vec<Arc<Pod>>,
    pub release: Vec<Arc<Pod>>,
}

/// Upstream's ControllerRefManager rules over the pods of the owner's namespace.
pub fn claim_pods(
    owner: &ObjectMeta,
    sel: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    pods: &[Arc<Pod>],
) -> Claim {
    let uid = owner.uid.as_deref().unwrap_or_default();
    let mut claim = Claim::default();
    for pod in pods {
        let matches = selector::matches(sel, pod.metadata.labels.as_ref());
        match controller_ref(&pod.metadata) {
            Some(r) if r.uid == uid => {
                if matches {
                    claim.owned.push(pod.clone());
                } else {
                    claim.release.push(pod.clone());
                }
            }
            Some(_) => {}
            None => {
                if matches && is_active(pod) && owner.deletion_timestamp.is_none() {
                    claim.adopt.push(pod.clone());
                }
            }
        }
    }
    claim
}

pub fn owner_reference(rs: &ReplicaSet) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: rs.metadata.name.clone().unwrap_or_default(),
        uid: rs.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A new pod from the template: template labels and annotations, `<rs>-` generateName, owned.
pub fn new_pod(rs: &ReplicaSet) -> Pod {
    let template = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", rs.metadata.name.as_deref().unwrap_or("rs"))),
            namespace: rs.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner_reference(rs)]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// +n to create, −n to delete.
pub fn diff(rs: &ReplicaSet, active: usize) -> i64 {
    let want = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1) as i64;
    want - active as i64
}

pub fn compute_status(rs: &ReplicaSet, active: &[Arc<Pod>], now: Timestamp) -> ReplicaSetStatus {
    let spec = rs.spec.as_ref();
    let min_ready = spec.and_then(|s| s.min_ready_seconds).unwrap_or(0);
    let template_labels = spec
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let fully_labeled = active
        .iter()
        .filter(|p| {
            let labels = p.metadata.labels.clone().unwrap_or_default();
            template_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
        })
        .count();
    ReplicaSetStatus {
        replicas: active.len() as i32,
        fully_labeled_replicas: Some(fully_labeled as i32),
        ready_replicas: Some(active.iter().filter(|p| is_ready(p)).count() as i32),
        available_replicas: Some(
            active
                .iter()
                .filter(|p| is_available(p, min_ready, now))
                .count() as i32,
        ),
        observed_generation: rs.metadata.generation,
        conditions: rs.status.as_ref().and_then(|s| s.conditions.clone()),
        ..Default::default()
    }
}

struct State {
    ctx: Context,
    pods: Store<Pod>,
    /// rs uid → (active pod count we expect the watch to show, give up waiting at).
    expectations: Mutex<HashMap<String, (usize, Instant)>>,
}

pub async fn run(ctx: Context) {
    // Pod events trigger reconciles only after the pod cache holds them: a reconcile run on a
    // separate watch's event could still count a pod that was just deleted, and then wait for the
    // next requeue to replace it.
    let (pods, pod_changes, _pods_task) = spawn_reflector_with_changes::<Pod>(&ctx.client);
    if pods.wait_until_ready().await.is_err() {
        return;
    }
    let (rs_store, rs_writer) = reflector::store();
    let sets = reflector::reflector(
        rs_writer,
        watcher(
            Api::<ReplicaSet>::all(ctx.client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .applied_objects();
    let owners = rs_store.clone();
    let pod_triggers = pod_changes
        .flat_map(move |pod| futures::stream::iter(owners_of(&owners, &pod)))
        .map(|rs| Ok(ReconcileRequest::from(rs)));
    let state = Arc::new(State {
        ctx: ctx.clone(),
        pods,
        expectations: Mutex::new(HashMap::new()),
    });
    applier(
        |rs, st| Box::pin(reconcile(rs, st)),
        error_policy,
        state,
        rs_store,
        futures::stream::select(trigger_self(sets, ()), pod_triggers),
        controller::Config::default(),
    )
    .for_each(|_| async {})
    .await;
}

/// The ReplicaSets a pod event concerns: its controller, or any that could adopt it.
fn owners_of(store: &Store<ReplicaSet>, pod: &Pod) -> Vec<ObjectRef<ReplicaSet>> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    if let Some(r) = controller_ref(&pod.metadata) {
        if r.kind == "ReplicaSet" {
            return vec![ObjectRef::new(&r.name).within(&ns)];
        }
        return Vec::new();
    }
    store
        .state()
        .iter()
        .filter(|rs| rs.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|rs| {
            selector::matches(
                rs.spec.as_ref().map(|s| &s.selector),
                pod.metadata.labels.as_ref(),
            )
        })
        .map(|rs| ObjectRef::from_obj(rs.as_ref()))
        .collect()
}

fn api_err<'a>(
    action: &'static str,
    rs: &'a str,
) -> impl FnOnce(kube::Error) -> ReplicaSetError + 'a {
    move |source| ReplicaSetError::Api {
        action,
        rs: rs.to_string(),
        source,
    }
}

async fn reconcile(rs: Arc<ReplicaSet>, st: Arc<State>) -> Result<Action, ReplicaSetError> {
    let ns = rs.metadata.namespace.clone().unwrap_or_default();
    let name = rs.metadata.name.clone().unwrap_or_default();
    let key = format!("{ns}/{name}");
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    let pods_api: Api<Pod> = Api::namespaced(st.ctx.client.clone(), &ns);
    let mut in_ns: Vec<Arc<Pod>> = st
        .pods
        .state()
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
        .collect();
    // Expectations: when the cache does not show our last creates/deletes yet, read the pods from
    // the API instead of waiting — waiting for an exact count can hang when a pod we made is
    // deleted before the cache ever showed it.
    let cached_active = in_ns
        .iter()
        .filter(|p| controller_ref(&p.metadata).is_some_and(|r| r.uid == uid) && is_active(p))
        .count();
    let behind = {
        let mut exp = st.expectations.lock().expect("expectations");
        let behind = matches!(exp.get(&uid), Some((count, deadline))
            if *count != cached_active && Instant::now() < *deadline);
        if !behind {
            exp.remove(&uid);
        }
        behind
    };
    if behind {
        in_ns = pods_api
            .list(&ListParams::default())
            .await
            .map_err(api_err("listing pods", &key))?
            .items
            .into_iter()
            .map(Arc::new)
            .collect();
    }
    let claim = claim_pods(&rs.metadata, rs.spec.as_ref().map(|s| &s.selector), &in_ns);
    let ours = owner_reference(&rs);
    for pod in &claim.adopt {
        let mut refs = pod.metadata.owner_references.clone().unwrap_or_default();
        refs.push(ours.clone());
        let patch = json!({"metadata": {"ownerReferences": refs, "resourceVersion": pod.metadata.resource_version}});
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        pods_api
            .patch(&pod_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_err("adopting a pod", &key))?;
        tracing::info!(rs = %key, pod = %pod_name, "adopted");
    }
    for pod in &claim.release {
        let refs: Vec<_> = pod
            .metadata
            .owner_references
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r.uid != uid)
            .collect();
        let patch = json!({"metadata": {"ownerReferences": refs, "resourceVersion": pod.metadata.resource_version}});
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        pods_api
            .patch(&pod_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_err("releasing a pod", &key))?;
    }
    let mut active: Vec<Arc<Pod>> = claim
        .owned
        .iter()
        .chain(claim.adopt.iter())
        .filter(|p| is_active(p))
        .cloned()
        .collect();
    let now = Timestamp::now();

    if rs.metadata.deletion_timestamp.is_none() {
        let d = diff(&rs, active.len());
        if d > 0 {
            let pod = new_pod(&rs);
            let pp = PostParams::default();
            let results =
                futures::future::join_all((0..d).map(|_| pods_api.create(&pp, &pod))).await;
            let created = results.iter().filter(|r| r.is_ok()).count();
            st.expectations.lock().expect("expectations").insert(
                uid.clone(),
                (
                    active.len() + created,
                    Instant::now() + EXPECTATIONS_TIMEOUT,
                ),
            );
            if created > 0 {
                let _ = st
                    .ctx
                    .recorder
                    .record(
                        &object_reference(rs.as_ref()),
                        NORMAL,
                        "SuccessfulCreate",
                        &format!("Created {created} pod(s)"),
                    )
                    .await;
            }
            if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
                return Err(api_err("creating pods", &key)(e));
            }
        } else if d < 0 {
            active.sort_by(deletion_order);
            let dp = DeleteParams::default();
            let victims: Vec<Arc<Pod>> = active.iter().take((-d) as usize).cloned().collect();
            let results = futures::future::join_all(
                victims
                    .iter()
                    .map(|p| pods_api.delete(p.metadata.name.as_deref().unwrap_or_default(), &dp)),
            )
            .await;
            let deleted = results.iter().filter(|r| r.is_ok()).count();
            st.expectations.lock().expect("expectations").insert(
                uid.clone(),
                (
                    active.len() - deleted,
                    Instant::now() + EXPECTATIONS_TIMEOUT,
                ),
            );
            for p in &victims {
                let _ = st
                    .ctx
                    .recorder
                    .record(
                        &object_reference(rs.as_ref()),
                        NORMAL,
                        "SuccessfulDelete",
                        &format!(
                            "Deleted pod: {}",
                            p.metadata.name.as_deref().unwrap_or_default()
                        ),
                    )
                    .await;
            }
        }
    }

    let status = compute_status(&rs, &active, now);
    if rs.status.as_ref() != Some(&status) {
        let rs_api: Api<ReplicaSet> = Api::namespaced(st.ctx.client.clone(), &ns);
        rs_api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
            .map_err(api_err("updating status", &key))?;
    }
    // Requeue when the next ready pod becomes available (minReadySeconds).
    let min_ready = rs
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0);
    let next = active
        .iter()
        .filter_map(|p| available_at(p, min_ready))
        .filter(|t| *t > now)
        .min();
    Ok(match next {
        Some(t) => Action::requeue(Duration::from_secs_f64(
            (t.as_second() - now.as_second()).max(1) as f64,
        )),
        // Not settled: look again soon. The pod cache is fed by a different watch than the one
        // that triggered this sync, so it may have lagged behind the change that did.
        None if status.ready_replicas != Some(status.replicas) || diff(&rs, active.len()) != 0 => {
            Action::requeue(Duration::from_secs(2))
        }
        None => Action::requeue(Duration::from_secs(300)),
    })
}

fn error_policy(_rs: Arc<ReplicaSet>, err: &ReplicaSetError, _st: Arc<State>) -> Action {
    tracing::warn!(error = %err, "replicaset");
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rs() -> ReplicaSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web-abc", "namespace": "default", "uid": "rs-uid", "generation": 2},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "abc"}},
                    "spec": {"containers": [{"name": "c", "image": "app:1"}]}}}
        }))
        .unwrap()
    }

    fn pod(name: &str, labels: serde_json::Value, owner: Option<&str>, ready: bool) -> Arc<Pod> {
        let owners = owner.map(|uid| json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": uid, "controller": true}]));
        Arc::new(serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": labels, "ownerReferences": owners},
            "spec": {"containers": []},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        })).unwrap())
    }

    #[test]
    fn claims_adopt_orphans_release_mismatches_and_skip_foreign() {
        let rs = rs();
        let pods = vec![
            pod("owned", json!({"app": "web"}), Some("rs-uid"), true),
            pod("orphan", json!({"app": "web"}), None, true),
            pod("strayed", json!({"app": "other"}), Some("rs-uid"), true),
            pod("foreign", json!({"app": "web"}), Some("other-uid"), true),
            pod("unrelated", json!({"app": "db"}), None, true),
        ];
        let c = claim_pods(&rs.metadata, rs.spec.as_ref().map(|s| &s.selector), &pods);
        let names = |v: &[Arc<Pod>]| {
            v.iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&c.owned), ["owned"]);
        assert_eq!(names(&c.adopt), ["orphan"]);
        assert_eq!(names(&c.release), ["strayed"]);
    }

    #[test]
    fn new_pods_carry_template_labels_and_controller_ref() {
        let p = new_pod(&rs());
        assert_eq!(p.metadata.generate_name.as_deref(), Some("web-abc-"));
        assert_eq!(p.metadata.labels.unwrap()["pod-template-hash"], "abc");
        let owner = &p.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.uid.as_str(), owner.controller),
            ("rs-uid", Some(true))
        );
        assert_eq!(owner.block_owner_deletion, Some(true));
        assert_eq!(diff(&rs(), 1), 2);
        assert_eq!(diff(&rs(), 5), -2);
    }

    #[test]
    fn status_counts() {
        let active = vec![
            pod(
                "a",
                json!({"app": "web", "pod-template-hash": "abc"}),
                Some("rs-uid"),
                true,
            ),
            pod("b", json!({"app": "web"}), Some("rs-uid"), false),
        ];
        let s = compute_status(&rs(), &active, Timestamp::now());
        assert_eq!(s.replicas, 2);
        assert_eq!(s.fully_labeled_replicas, Some(1));
        assert_eq!(s.ready_replicas, Some(1));
        assert_eq!(s.available_replicas, Some(1));
        assert_eq!(s.observed_generation, Some(2));
    }
}
