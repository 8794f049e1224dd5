//! replicaset: keeps `spec.replicas` active pods per ReplicaSet — adopting matching orphans,
//! releasing owned pods that stopped matching, creating from the template, deleting in upstream's
//! order — and reports replicas / fullyLabeled / ready / available / observedGeneration and the
//! ReplicaFailure condition. In-memory expectations keep a reconcile that runs before the watch
//! shows our own writes from acting twice: while the cache is behind them, the pods are read from
//! the API instead. The loop is generic over [`ReplicaOwner`], so ReplicationControllers
//! (`replicationcontroller.rs`) run the same code, as upstream runs one ReplicaSetController for both.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use kiln_common::events::{object_reference, NORMAL, WARNING};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, applier, trigger_self, Action, ReconcileRequest};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::context::{spawn_reflector_with_changes, Context};
use crate::pods::{
    available_at, controller_ref, deletion_order, is_active, is_available, is_ready,
};
use crate::selector;

/// What the replica loop needs from a kind that keeps N copies of a pod template: ReplicaSet
/// (LabelSelector) and ReplicationController (a plain label map, read as matchLabels).
pub trait ReplicaOwner:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + serde::Serialize
    + Send
    + Sync
    + 'static
{
    const API_VERSION: &'static str;
    const KIND: &'static str;
    fn replicas(&self) -> i32;
    fn min_ready_seconds(&self) -> i32;
    fn selector(&self) -> Option<LabelSelector>;
    fn template(&self) -> Option<PodTemplateSpec>;
    /// The stored status in ReplicaSet form (both kinds' statuses have the same fields).
    fn replica_status(&self) -> Option<ReplicaSetStatus>;
}

impl ReplicaOwner for ReplicaSet {
    const API_VERSION: &'static str = "apps/v1";
    const KIND: &'static str = "ReplicaSet";
    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }
    fn min_ready_seconds(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }
    fn selector(&self) -> Option<LabelSelector> {
        self.spec.as_ref().map(|s| s.selector.clone())
    }
    fn template(&self) -> Option<PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.template.clone())
    }
    fn replica_status(&self) -> Option<ReplicaSetStatus> {
        self.status.clone()
    }
}

/// Upstream's condition type for a failed create or delete.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// How long to wait for the watch to show our own creates/deletes before acting again anyway.
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ReplicaSetError {
    #[error("{action} for {kind} {rs}: {source}")]
    Api {
        action: &'static str,
        kind: &'static str,
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

pub fn owner_reference<T: ReplicaOwner>(rs: &T) -> OwnerReference {
    OwnerReference {
        api_version: T::API_VERSION.into(),
        kind: T::KIND.into(),
        name: rs.meta().name.clone().unwrap_or_default(),
        uid: rs.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A new pod from the template: template labels and annotations, `<owner>-` generateName, owned.
pub fn new_pod<T: ReplicaOwner>(rs: &T) -> Pod {
    let template = rs.template().unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", rs.meta().name.as_deref().unwrap_or("rs"))),
            namespace: rs.meta().namespace.clone(),
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
pub fn diff<T: ReplicaOwner>(rs: &T, active: usize) -> i64 {
    rs.replicas() as i64 - active as i64
}

/// A create or delete that failed this sync: upstream's manageReplicasErr.
#[derive(Debug, Clone, PartialEq)]
pub struct ManageFailure {
    /// `FailedCreate` or `FailedDelete`.
    pub reason: &'static str,
    pub message: String,
}

/// calculateStatus: the counts, and ReplicaFailure set on a failure (kept while one is already
/// there) and removed after a sync that manages the replicas without one.
pub fn compute_status<T: ReplicaOwner>(
    rs: &T,
    active: &[Arc<Pod>],
    failure: Option<&ManageFailure>,
    now: Timestamp,
) -> ReplicaSetStatus {
    let min_ready = rs.min_ready_seconds();
    let template_labels = rs
        .template()
        .and_then(|t| t.metadata)
        .and_then(|m| m.labels)
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
    let mut conditions = rs
        .replica_status()
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    let has_failure = conditions.iter().any(|c| c.type_ == REPLICA_FAILURE);
    match failure {
        Some(f) if !has_failure => conditions.push(ReplicaSetCondition {
            type_: REPLICA_FAILURE.into(),
            status: "True".into(),
            reason: Some(f.reason.into()),
            message: Some(f.message.clone()),
            last_transition_time: Some(Time(now)),
        }),
        None if has_failure => conditions.retain(|c| c.type_ != REPLICA_FAILURE),
        _ => {}
    }
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
        observed_generation: rs.meta().generation,
        conditions: (!conditions.is_empty()).then_some(conditions),
        ..Default::default()
    }
}

/// The merge patch setting `status`: fields it leaves unset (no conditions left) are cleared
/// explicitly, or the merge would keep the stored ones (a ReplicaFailure that no longer holds).
pub fn status_patch(status: &ReplicaSetStatus) -> serde_json::Value {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    if status.conditions.is_none() {
        value["conditions"] = serde_json::Value::Null;
    }
    json!({ "status": value })
}

/// The message of a refused request (what upstream's err.Error() shows), else the error itself.
fn error_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

struct State<T: ReplicaOwner> {
    ctx: Context,
    pods: Store<Pod>,
    /// owner uid → (active pod count we expect the watch to show, give up waiting at).
    expectations: Mutex<HashMap<String, (usize, Instant)>>,
    _kind: std::marker::PhantomData<fn() -> T>,
}

pub async fn run(ctx: Context) {
    run_for::<ReplicaSet>(ctx).await
}

/// The replica loop for one kind.
pub async fn run_for<T: ReplicaOwner>(ctx: Context) {
    // Pod events trigger reconciles only after the pod cache holds them: a reconcile run on a
    // separate watch's event could still count a pod that was just deleted, and then wait for the
    // next requeue to replace it.
    let (pods, pod_changes, _pods_task) = spawn_reflector_with_changes::<Pod>(&ctx.client);
    if pods.wait_until_ready().await.is_err() {
        return;
    }
    let (rs_store, rs_writer) = reflector::store::<T>();
    let sets = reflector::reflector(
        rs_writer,
        watcher(
            Api::<T>::all(ctx.client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .applied_objects();
    let owners = rs_store.clone();
    let pod_triggers = pod_changes
        .flat_map(move |pod| futures::stream::iter(owners_of(&owners, &pod)))
        .map(|rs| Ok(ReconcileRequest::from(rs)));
    let state = Arc::new(State::<T> {
        ctx: ctx.clone(),
        pods,
        expectations: Mutex::new(HashMap::new()),
        _kind: std::marker::PhantomData,
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

/// The owners a pod event concerns: its controller, or any that could adopt it.
fn owners_of<T: ReplicaOwner>(store: &Store<T>, pod: &Pod) -> Vec<ObjectRef<T>> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    if let Some(r) = controller_ref(&pod.metadata) {
        if r.kind == T::KIND {
            return vec![ObjectRef::new(&r.name).within(&ns)];
        }
        return Vec::new();
    }
    store
        .state()
        .iter()
        .filter(|rs| rs.meta().namespace.as_deref() == Some(ns.as_str()))
        .filter(|rs| selector::matches(rs.selector().as_ref(), pod.metadata.labels.as_ref()))
        .map(|rs| ObjectRef::from_obj(rs.as_ref()))
        .collect()
}

fn api_err<'a>(
    action: &'static str,
    kind: &'static str,
    rs: &'a str,
) -> impl FnOnce(kube::Error) -> ReplicaSetError + 'a {
    move |source| ReplicaSetError::Api {
        action,
        kind,
        rs: rs.to_string(),
        source,
    }
}

async fn reconcile<T: ReplicaOwner>(
    rs: Arc<T>,
    st: Arc<State<T>>,
) -> Result<Action, ReplicaSetError> {
    let kind = T::KIND;
    let meta = rs.meta();
    let ns = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let key = format!("{ns}/{name}");
    let uid = meta.uid.clone().unwrap_or_default();
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
            .map_err(api_err("listing pods", kind, &key))?
            .items
            .into_iter()
            .map(Arc::new)
            .collect();
    }
    let claim = claim_pods(meta, rs.selector().as_ref(), &in_ns);
    let ours = owner_reference(rs.as_ref());
    for pod in &claim.adopt {
        let mut refs = pod.metadata.owner_references.clone().unwrap_or_default();
        refs.push(ours.clone());
        let patch = json!({"metadata": {"ownerReferences": refs, "resourceVersion": pod.metadata.resource_version}});
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        pods_api
            .patch(&pod_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_err("adopting a pod", kind, &key))?;
        tracing::info!(kind, owner = %key, pod = %pod_name, "adopted");
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
            .map_err(api_err("releasing a pod", kind, &key))?;
    }
    let mut active: Vec<Arc<Pod>> = claim
        .owned
        .iter()
        .chain(claim.adopt.iter())
        .filter(|p| is_active(p))
        .cloned()
        .collect();
    let now = Timestamp::now();
    let reference = object_reference(rs.as_ref());
    let mut failure: Option<ManageFailure> = None;
    let mut events: Vec<(&'static str, &'static str, String)> = Vec::new();

    if meta.deletion_timestamp.is_none() {
        let d = diff(rs.as_ref(), active.len());
        if d > 0 {
            let pod = new_pod(rs.as_ref());
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
            for result in &results {
                let (kind, reason, message) = match result {
                    Ok(p) => (
                        NORMAL,
                        "SuccessfulCreate",
                        format!(
                            "Created pod: {}",
                            p.metadata.name.as_deref().unwrap_or_default()
                        ),
                    ),
                    Err(e) => (
                        WARNING,
                        "FailedCreate",
                        format!("Error creating: {}", error_message(e)),
                    ),
                };
                events.push((kind, reason, message));
            }
            if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
                tracing::warn!(kind = T::KIND, owner = %key, error = %e, "creating pods");
                failure = Some(ManageFailure {
                    reason: "FailedCreate",
                    message: error_message(e),
                });
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
            for (p, result) in victims.iter().zip(&results) {
                let pod_name = p.metadata.name.as_deref().unwrap_or_default();
                let (kind, reason, message) = match result {
                    Ok(_) => (
                        NORMAL,
                        "SuccessfulDelete",
                        format!("Deleted pod: {pod_name}"),
                    ),
                    Err(kube::Error::Api(s)) if s.code == 404 => continue,
                    Err(e) => (
                        WARNING,
                        "FailedDelete",
                        format!("Error deleting: {}", error_message(e)),
                    ),
                };
                if reason == "FailedDelete" && failure.is_none() {
                    failure = Some(ManageFailure {
                        reason: "FailedDelete",
                        message: message.trim_start_matches("Error deleting: ").into(),
                    });
                }
                events.push((kind, reason, message));
            }
        }
    }

    // The events go out on their own, as client-go's broadcaster sends them: a slow API must
    // not hold up the status written next, nor the next sync that sees the pods just made.
    if !events.is_empty() {
        let recorder = st.ctx.recorder.clone();
        tokio::spawn(async move {
            for (kind, reason, message) in events {
                let _ = recorder.record(&reference, kind, reason, &message).await;
            }
        });
    }
    let status = compute_status(rs.as_ref(), &active, failure.as_ref(), now);
    if rs.replica_status().as_ref() != Some(&status) {
        let rs_api: Api<T> = Api::namespaced(st.ctx.client.clone(), &ns);
        rs_api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&status_patch(&status)),
            )
            .await
            .map_err(api_err("updating status", kind, &key))?;
    }
    // Requeue when the next ready pod becomes available (minReadySeconds).
    let min_ready = rs.min_ready_seconds();
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
        None if failure.is_some()
            || status.ready_replicas != Some(status.replicas)
            || diff(rs.as_ref(), active.len()) != 0 =>
        {
            Action::requeue(Duration::from_secs(2))
        }
        None => Action::requeue(Duration::from_secs(300)),
    })
}

fn error_policy<T: ReplicaOwner>(_rs: Arc<T>, err: &ReplicaSetError, _st: Arc<State<T>>) -> Action {
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
        let s = compute_status(&rs(), &active, None, Timestamp::now());
        assert_eq!(s.replicas, 2);
        assert_eq!(s.fully_labeled_replicas, Some(1));
        assert_eq!(s.ready_replicas, Some(1));
        assert_eq!(s.available_replicas, Some(1));
        assert_eq!(s.observed_generation, Some(2));
    }

    #[test]
    fn replica_failure_is_set_once_and_cleared_after_a_clean_sync() {
        let now = Timestamp::now();
        let f = ManageFailure {
            reason: "FailedCreate",
            message: "exceeded quota".into(),
        };
        let s = compute_status(&rs(), &[], Some(&f), now);
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_deref()),
            (REPLICA_FAILURE, "True", Some("FailedCreate"))
        );
        assert_eq!(c.message.as_deref(), Some("exceeded quota"));
        let mut failed = rs();
        failed.status = Some(s.clone());
        let other = ManageFailure {
            reason: "FailedDelete",
            message: "x".into(),
        };
        assert_eq!(
            compute_status(&failed, &[], Some(&other), now).conditions,
            s.conditions
        );
        let cleared = compute_status(&failed, &[], None, now);
        assert_eq!(cleared.conditions, None);
        // The patch clears the stored condition rather than leaving it out.
        assert_eq!(
            status_patch(&cleared)["status"]["conditions"],
            serde_json::Value::Null
        );
        assert!(status_patch(&cleared)["status"]
            .as_object()
            .unwrap()
            .contains_key("conditions"));
    }
}
