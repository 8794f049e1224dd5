//! statefulset: runs `spec.replicas` pods with stable identities per StatefulSet (upstream's
//! StatefulSetController over stateful_set_control.go): adopts and releases pods and
//! ControllerRevisions, records the template as a ControllerRevision, executes the steps
//! `statefulset_plan` decides, writes the status and prunes old revisions.
//!
//! Each sync reads the set's pods and revisions from the API, not from the watch caches: the
//! ordered steps (create one, wait for it) act on exact state, and a cache behind our own
//! create would only make the next create fail with AlreadyExists.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kiln_common::events::{object_reference, NORMAL, WARNING};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, applier, trigger_self, Action, ReconcileRequest};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::json;

use crate::context::{spawn_reflector_with_changes, Context};
use crate::pods::{available_at, controller_ref};
use crate::selector;
use crate::statefulset_plan::{
    self as sp, claims_for, complete_rolling_update, owner_reference, plan,
    resolve_update_revision, revisions_to_prune, sort_revisions, template_of, DeleteWhy, Revisions,
    Step, UpdateRevision,
};

#[derive(Debug, thiserror::Error)]
pub enum StatefulSetError {
    #[error("{action} for StatefulSet {set}: {source}")]
    Api {
        action: &'static str,
        set: String,
        source: kube::Error,
    },
}

struct State {
    ctx: Context,
}

pub async fn run(ctx: Context) {
    let (pods, pod_changes, _pods_task) = spawn_reflector_with_changes::<Pod>(&ctx.client);
    let (revs, rev_changes, _revs_task) =
        spawn_reflector_with_changes::<ControllerRevision>(&ctx.client);
    if pods.wait_until_ready().await.is_err() || revs.wait_until_ready().await.is_err() {
        return;
    }
    let (set_store, set_writer) = reflector::store();
    let sets = reflector::reflector(
        set_writer,
        watcher(
            Api::<StatefulSet>::all(ctx.client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .applied_objects();
    let owners = set_store.clone();
    let pod_triggers = pod_changes
        .flat_map(move |pod| futures::stream::iter(owners_of(&owners, &pod.metadata)))
        .map(|s| Ok(ReconcileRequest::from(s)));
    let owners = set_store.clone();
    let rev_triggers = rev_changes
        .flat_map(move |r| futures::stream::iter(owners_of(&owners, &r.metadata)))
        .map(|s| Ok(ReconcileRequest::from(s)));
    let state = Arc::new(State { ctx: ctx.clone() });
    applier(
        |set, st| Box::pin(reconcile(set, st)),
        error_policy,
        state,
        set_store,
        futures::stream::select(
            trigger_self(sets, ()),
            futures::stream::select(pod_triggers, rev_triggers),
        ),
        controller::Config::default(),
    )
    .for_each(|_| async {})
    .await;
}

/// The StatefulSets an object event concerns: its controller, or any that could adopt it.
fn owners_of(store: &Store<StatefulSet>, meta: &ObjectMeta) -> Vec<ObjectRef<StatefulSet>> {
    let ns = meta.namespace.clone().unwrap_or_default();
    if let Some(r) = controller_ref(meta) {
        if r.kind == "StatefulSet" {
            return vec![ObjectRef::new(&r.name).within(&ns)];
        }
        return Vec::new();
    }
    store
        .state()
        .iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|s| selector::matches(s.spec.as_ref().map(|s| &s.selector), meta.labels.as_ref()))
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

fn api_err<'a>(
    action: &'static str,
    set: &'a str,
) -> impl FnOnce(kube::Error) -> StatefulSetError + 'a {
    move |source| StatefulSetError::Api {
        action,
        set: set.to_string(),
        source,
    }
}

/// ControllerRefManager's rules: owned and matching stays, owned and not matching is released,
/// an orphan that matches is adopted (not while the set is being deleted).
enum Claim {
    Owned,
    Adopt,
    Release,
    Ignore,
}

fn claim(set: &StatefulSet, meta: &ObjectMeta, matches: bool) -> Claim {
    let uid = set.metadata.uid.as_deref().unwrap_or_default();
    match controller_ref(meta) {
        Some(r) if r.uid == uid && matches => Claim::Owned,
        Some(r) if r.uid == uid => Claim::Release,
        Some(_) => Claim::Ignore,
        None if matches && set.metadata.deletion_timestamp.is_none() => Claim::Adopt,
        None => Claim::Ignore,
    }
}

fn owner_patch(meta: &ObjectMeta, refs: Vec<OwnerReference>) -> serde_json::Value {
    json!({"metadata": {"ownerReferences": refs, "resourceVersion": meta.resource_version}})
}

/// ClaimPods / ClaimControllerRevisions: adopt matching orphans, release owned objects that stopped
/// matching (`member` adds a kind's own test to the selector), return the owned ones.
async fn claim_objects<K>(
    set: &StatefulSet,
    api: &Api<K>,
    key: &str,
    what: &'static [&'static str; 3],
    member: impl Fn(&K) -> bool,
) -> Result<Vec<Arc<K>>, StatefulSetError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let [listing, adopting, releasing] = *what;
    let all = api
        .list(&ListParams::default())
        .await
        .map_err(api_err(listing, key))?;
    let sel = set.spec.as_ref().map(|s| &s.selector);
    let mut owned = Vec::new();
    for obj in all.items {
        let meta = obj.meta().clone();
        let matches = selector::matches(sel, meta.labels.as_ref()) && member(&obj);
        let name = meta.name.clone().unwrap_or_default();
        let mut refs = meta.owner_references.clone().unwrap_or_default();
        match claim(set, &meta, matches) {
            Claim::Owned => owned.push(Arc::new(obj)),
            Claim::Adopt => {
                refs.push(owner_reference(set));
                let o = api
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(&owner_patch(&meta, refs)),
                    )
                    .await
                    .map_err(api_err(adopting, key))?;
                tracing::info!(set = %key, object = %name, "adopted");
                owned.push(Arc::new(o));
            }
            Claim::Release => {
                let uid = set.metadata.uid.clone().unwrap_or_default();
                refs.retain(|r| r.uid != uid);
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&owner_patch(&meta, refs)),
                )
                .await
                .map_err(api_err(releasing, key))?;
            }
            Claim::Ignore => {}
        }
    }
    Ok(owned)
}

/// CreateControllerRevision: on a name clash with different data the collision count grows and
/// the name changes; a clash with the same data is that revision.
async fn create_revision(
    set: &StatefulSet,
    api: &Api<ControllerRevision>,
    mut revision: ControllerRevision,
    collision_count: &mut i32,
    key: &str,
) -> Result<Arc<ControllerRevision>, StatefulSetError> {
    loop {
        let data = revision.data.clone().map(|d| d.0).unwrap_or_default();
        let hash = sp::revision_hash(&data, *collision_count);
        revision.metadata.name = Some(sp::revision_name(
            set.metadata.name.as_deref().unwrap_or_default(),
            &hash,
        ));
        if let Some(l) = revision.metadata.labels.as_mut() {
            l.insert(sp::REVISION_LABEL.into(), hash);
        }
        match api.create(&PostParams::default(), &revision).await {
            Ok(r) => return Ok(Arc::new(r)),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let name = revision.metadata.name.clone().unwrap_or_default();
                let existing = api
                    .get(&name)
                    .await
                    .map_err(api_err("reading a controllerrevision", key))?;
                if existing.data.as_ref().map(|d| &d.0) == Some(&data) {
                    return Ok(Arc::new(existing));
                }
                *collision_count += 1;
            }
            Err(e) => return Err(api_err("creating a controllerrevision", key)(e)),
        }
    }
}

/// Records in the background: an ordered rollout waits on each sync, and each sync should not
/// wait on its events.
async fn event(st: &State, set: &StatefulSet, type_: &str, reason: &str, message: String) {
    let recorder = st.ctx.recorder.clone();
    let object = object_reference(set);
    let (type_, reason) = (type_.to_string(), reason.to_string());
    tokio::spawn(async move {
        let _ = recorder.record(&object, &type_, &reason, &message).await;
    });
}

/// Does the apiserver serve persistentvolumeclaims? (kiln does not yet; then claims cannot be made.)
async fn claims_served(client: &kube::Client) -> bool {
    client
        .list_core_api_resources("v1")
        .await
        .map(|l| {
            l.resources
                .iter()
                .any(|r| r.name == "persistentvolumeclaims")
        })
        .unwrap_or(false)
}

/// createPersistentVolumeClaims: every missing claim of the pod, with upstream's events.
async fn create_claims(st: &State, set: &StatefulSet, pod: &Pod, ordinal: i32) {
    let claims = claims_for(set, ordinal);
    if claims.is_empty() {
        return;
    }
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let served = claims_served(&st.ctx.client).await;
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(st.ctx.client.clone(), &ns);
    for claim in claims {
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        if !served {
            event(
                st,
                set,
                WARNING,
                "FailedCreate",
                format!(
                    "create Claim {claim_name} for Pod {pod_name} in StatefulSet {set_name} failed error: the server does not serve persistentvolumeclaims; the pod is created without a usable volume"
                ),
            )
            .await;
            continue;
        }
        match api.get_opt(&claim_name).await {
            Ok(Some(_)) => {}
            Ok(None) => match api.create(&PostParams::default(), &claim).await {
                Ok(_) => {
                    event(
                        st,
                        set,
                        NORMAL,
                        "SuccessfulCreate",
                        format!("create Claim {claim_name} Pod {pod_name} in StatefulSet {set_name} success"),
                    )
                    .await
                }
                Err(e) => {
                    event(
                        st,
                        set,
                        WARNING,
                        "FailedCreate",
                        format!("create Claim {claim_name} for Pod {pod_name} in StatefulSet {set_name} failed error: {e}"),
                    )
                    .await
                }
            },
            Err(e) => tracing::warn!(claim = %claim_name, error = %e, "reading a claim"),
        }
    }
}

/// persistentVolumeClaimRetentionPolicy: each existing claim of each pod gets the ownerReferences
/// the policy wants (`statefulset_retention`). Failures are logged; the next sync retries.
async fn fix_claim_owners(st: &State, set: &StatefulSet, pods: &[Arc<Pod>]) {
    if claims_for(set, 0).is_empty() || !claims_served(&st.ctx.client).await {
        return;
    }
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(st.ctx.client.clone(), &ns);
    let existing = match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(e) => {
            tracing::warn!(error = %e, "listing claims for the retention policy");
            return;
        }
    };
    for pod in pods {
        let Some(ord) = sp::ordinal_of(pod) else {
            continue;
        };
        for wanted in claims_for(set, ord) {
            let Some(claim) = existing
                .iter()
                .find(|c| c.metadata.name == wanted.metadata.name)
            else {
                continue;
            };
            let Some(refs) = crate::statefulset_retention::fix(claim, set, pod) else {
                continue;
            };
            let mut updated = claim.clone();
            updated.metadata.owner_references = Some(refs);
            let name = claim.metadata.name.clone().unwrap_or_default();
            match api.replace(&name, &PostParams::default(), &updated).await {
                Ok(_) => {
                    tracing::info!(claim = %format!("{ns}/{name}"), "claim owners follow the retention policy")
                }
                Err(e) => {
                    tracing::warn!(claim = %format!("{ns}/{name}"), error = %e, "updating claim owners")
                }
            }
        }
    }
}

/// recordPodEvent: `<verb> Pod <pod> in StatefulSet <set> successful|failed error: ...`.
async fn pod_event(
    st: &State,
    set: &StatefulSet,
    verb: &str,
    pod: &str,
    err: Option<&kube::Error>,
) {
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let title = format!("{}{}", verb[..1].to_uppercase(), &verb[1..]);
    match err {
        None => {
            event(
                st,
                set,
                NORMAL,
                &format!("Successful{title}"),
                format!("{verb} Pod {pod} in StatefulSet {set_name} successful"),
            )
            .await
        }
        Some(e) => {
            event(
                st,
                set,
                WARNING,
                &format!("Failed{title}"),
                format!("{verb} Pod {pod} in StatefulSet {set_name} failed error: {e}"),
            )
            .await
        }
    }
}

async fn execute(
    st: &State,
    set: &StatefulSet,
    api: &Api<Pod>,
    step: &Step,
    key: &str,
) -> Result<(), StatefulSetError> {
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    match step {
        Step::Create(pod) => {
            let name = pod.metadata.name.clone().unwrap_or_default();
            if let Some(ord) = sp::ordinal_of(pod) {
                create_claims(st, set, pod, ord).await;
            }
            match api.create(&PostParams::default(), pod).await {
                Ok(_) => pod_event(st, set, "create", &name, None).await,
                // Still there from before (a delete in progress): the next sync waits for it.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    return Err(api_err("creating a pod", key)(kube::Error::Api(e)))
                }
                Err(e) => {
                    pod_event(st, set, "create", &name, Some(&e)).await;
                    return Err(api_err("creating a pod", key)(e));
                }
            }
        }
        Step::Delete { pod, why } => {
            match why {
                DeleteWhy::Failed => {
                    event(
                        st,
                        set,
                        WARNING,
                        "RecreatingFailedPod",
                        format!("StatefulSet {ns}/{set_name} is recreating failed Pod {pod}"),
                    )
                    .await
                }
                DeleteWhy::Succeeded => {
                    event(
                        st,
                        set,
                        NORMAL,
                        "RecreatingTerminatedPod",
                        format!("StatefulSet {ns}/{set_name} is recreating terminated Pod {pod}"),
                    )
                    .await
                }
                DeleteWhy::ScaleDown | DeleteWhy::Update => {}
            }
            match api.delete(pod, &DeleteParams::default()).await {
                Ok(_) => pod_event(st, set, "delete", pod, None).await,
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => {
                    pod_event(st, set, "delete", pod, Some(&e)).await;
                    return Err(api_err("deleting a pod", key)(e));
                }
            }
        }
        Step::Relabel { pod, labels } => {
            let patch = json!({"metadata": {"labels": labels}});
            let r = api
                .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            pod_event(st, set, "update", pod, r.as_ref().err()).await;
            r.map_err(api_err("updating a pod", key))?;
        }
    }
    Ok(())
}

async fn reconcile(set: Arc<StatefulSet>, st: Arc<State>) -> Result<Action, StatefulSetError> {
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    let name = set.metadata.name.clone().unwrap_or_default();
    let key = format!("{ns}/{name}");
    let client = st.ctx.client.clone();
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let revs_api: Api<ControllerRevision> = Api::namespaced(client.clone(), &ns);
    let sets_api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    // Act on the stored set, not the cached one: a sync started by a stale cache entry would
    // otherwise record an outdated template as the update revision.
    let Some(set) = sets_api
        .get_opt(&name)
        .await
        .map_err(api_err("reading", &key))?
    else {
        return Ok(Action::await_change());
    };
    let pods = claim_objects(
        &set,
        &pods_api,
        &key,
        &["listing pods", "adopting a pod", "releasing a pod"],
        |p: &Pod| sp::is_member(&set, p),
    )
    .await?;
    let mut revisions = claim_objects(
        &set,
        &revs_api,
        &key,
        &[
            "listing controllerrevisions",
            "adopting a controllerrevision",
            "releasing a controllerrevision",
        ],
        |_: &ControllerRevision| true,
    )
    .await?;
    sort_revisions(&mut revisions);
    let mut collision_count = set
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let update = match resolve_update_revision(&set, &revisions, collision_count) {
        UpdateRevision::Latest(r) => r,
        UpdateRevision::Renumber(r, number) => {
            let rname = r.metadata.name.clone().unwrap_or_default();
            let patched = revs_api
                .patch(
                    &rname,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"revision": number})),
                )
                .await
                .map_err(api_err("renumbering a controllerrevision", &key))?;
            Arc::new(patched)
        }
        UpdateRevision::Create(r) => {
            create_revision(&set, &revs_api, *r, &mut collision_count, &key).await?
        }
    };
    let update_name = update.metadata.name.clone().unwrap_or_default();
    let wanted_current = set.status.as_ref().and_then(|s| s.current_revision.clone());
    let current = revisions
        .iter()
        .find(|r| r.metadata.name == wanted_current)
        .cloned()
        .unwrap_or_else(|| update.clone());
    let set_template = set
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let rev = Revisions {
        current: current.metadata.name.clone().unwrap_or_default(),
        current_template: template_of(&current).unwrap_or_else(|| set_template.clone()),
        update: update_name.clone(),
        update_template: set_template,
    };
    // Claims' owners follow the retention policy before any pod goes, so a condemned pod's claims
    // are already its own when it is deleted.
    fix_claim_owners(&st, &set, &pods).await;
    let now = Timestamp::now();
    let mut p = plan(&set, &pods, &rev, collision_count, now);
    let mut failure = None;
    for step in &p.steps {
        if let Err(e) = execute(&st, &set, &pods_api, step, &key).await {
            failure = Some(e);
            break;
        }
    }
    complete_rolling_update(&set, &mut p.status);
    write_status(&set, &sets_api, p.status.clone(), &key).await?;
    if let Some(e) = failure {
        return Err(e);
    }
    // Revisions created or renumbered in this sync are in the history too.
    if !revisions
        .iter()
        .any(|r| r.metadata.name == update.metadata.name)
    {
        revisions.push(update.clone());
        sort_revisions(&mut revisions);
    }
    let status_current = p.status.current_revision.clone().unwrap_or_default();
    for old in revisions_to_prune(&set, &revisions, &pods, &status_current, &update_name) {
        match revs_api.delete(&old, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(api_err("deleting a controllerrevision", &key)(e)),
        }
    }
    Ok(requeue(&set, &pods, &p.status, !p.steps.is_empty(), now))
}

/// Writes the status when it differs (upstream's inconsistentStatus check).
async fn write_status(
    set: &StatefulSet,
    api: &Api<StatefulSet>,
    status: StatefulSetStatus,
    key: &str,
) -> Result<(), StatefulSetError> {
    let mut status = status;
    status.conditions = set.status.as_ref().and_then(|s| s.conditions.clone());
    if set.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let name = set.metadata.name.clone().unwrap_or_default();
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": status})),
    )
    .await
    .map_err(api_err("updating status", key))?;
    Ok(())
}

/// Pod and revision events start most syncs; these requeues cover what no event announces:
/// a pod becoming available after minReadySeconds, and a set that has not settled yet.
fn requeue(
    set: &StatefulSet,
    pods: &[Arc<Pod>],
    status: &StatefulSetStatus,
    acted: bool,
    now: Timestamp,
) -> Action {
    let min_ready = set
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0);
    let next = pods
        .iter()
        .filter_map(|p| available_at(p, min_ready))
        .filter(|t| *t > now)
        .min();
    let settled = !acted
        && status.replicas == sp::replicas(set)
        && status.ready_replicas == Some(status.replicas)
        && status.current_revision == status.update_revision;
    match next {
        Some(t) => Action::requeue(Duration::from_secs(
            (t.as_second() - now.as_second()).max(1) as u64,
        )),
        None if !settled => Action::requeue(Duration::from_secs(5)),
        None => Action::requeue(Duration::from_secs(300)),
    }
}

fn error_policy(_set: Arc<StatefulSet>, err: &StatefulSetError, _st: Arc<State>) -> Action {
    tracing::warn!(error = %err, "statefulset");
    Action::requeue(Duration::from_secs(2))
}
