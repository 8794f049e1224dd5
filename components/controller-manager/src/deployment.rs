//! deployment: rolls a Deployment's pod template out through ReplicaSets named
//! `<deployment>-<pod-template-hash>` — RollingUpdate within maxSurge / maxUnavailable, or
//! Recreate — numbering revisions (`deployment.kubernetes.io/revision`, what `kubectl rollout
//! history / undo` read), pruning old sets beyond revisionHistoryLimit, and reporting the status
//! `kubectl rollout status` waits on. The arithmetic lives in `deployment_plan`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::jiff::Timestamp;
use kiln_common::events::{object_reference, NORMAL};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::json;

use crate::context::Context;
use crate::deployment_plan::{
    fenceposts, is_recreate, is_scaling_event, new_replicaset, new_rs_replicas, next_revision,
    owner_reference, replicas, replicas_annotated, revision, rs_replicas, same_template,
    scale_down_old, scale_sizes, template_hash, to_prune, DESIRED_REPLICAS, MAX_REPLICAS, REVISION,
};
use crate::deployment_status::compute_status;
use crate::pods::controller_ref;
use crate::selector;

#[derive(Debug, thiserror::Error)]
pub enum DeploymentError {
    #[error("{action} for Deployment {key}: {source}")]
    Api {
        action: &'static str,
        key: String,
        source: kube::Error,
    },
}

struct State {
    ctx: Context,
}

pub async fn run(ctx: Context) {
    let api: Api<Deployment> = Api::all(ctx.client.clone());
    let state = Arc::new(State { ctx: ctx.clone() });
    Controller::new(api, watcher::Config::default())
        .owns(
            Api::<ReplicaSet>::all(ctx.client.clone()),
            watcher::Config::default(),
        )
        .run(reconcile, error_policy, state)
        .for_each(|_| async {})
        .await;
}

struct Sync<'a> {
    st: &'a State,
    d: &'a Deployment,
    key: String,
    sets: Api<ReplicaSet>,
}

impl Sync<'_> {
    fn err(&self, action: &'static str) -> impl FnOnce(kube::Error) -> DeploymentError + '_ {
        move |source| DeploymentError::Api {
            action,
            key: self.key.clone(),
            source,
        }
    }

    async fn event(&self, reason: &str, message: String) {
        let _ = self
            .st
            .ctx
            .recorder
            .record(&object_reference(self.d), NORMAL, reason, &message)
            .await;
    }

    /// Sets a ReplicaSet's replicas and the desired- and max-replicas annotations (upstream's
    /// scaleReplicaSet), with an event when the size changes.
    async fn scale(&self, rs: &ReplicaSet, to: i32) -> Result<(), DeploymentError> {
        let name = rs.metadata.name.clone().unwrap_or_default();
        let from = rs_replicas(rs);
        let patch = json!({
            "metadata": {"annotations": {
                DESIRED_REPLICAS: replicas(self.d).to_string(),
                MAX_REPLICAS: (replicas(self.d) + fenceposts(self.d).0).to_string()}},
            "spec": {"replicas": to}
        });
        self.sets
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(self.err("scaling a ReplicaSet"))?;
        if to == from {
            return Ok(());
        }
        let dir = if to > from { "up" } else { "down" };
        tracing::info!(deployment = %self.key, rs = %name, from, to, "scaled");
        self.event(
            "ScalingReplicaSet",
            format!("Scaled {dir} replica set {name} from {from} to {to}"),
        )
        .await;
        Ok(())
    }
}

async fn reconcile(d: Arc<Deployment>, st: Arc<State>) -> Result<Action, DeploymentError> {
    if d.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = d.metadata.namespace.clone().unwrap_or_default();
    let name = d.metadata.name.clone().unwrap_or_default();
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let sync = Sync {
        st: &st,
        d: &d,
        key: format!("{ns}/{name}"),
        sets: Api::namespaced(st.ctx.client.clone(), &ns),
    };
    let sel = d.spec.as_ref().map(|s| &s.selector);
    // Claim: our sets, plus matching orphans (adopted). Listed from the API rather than the
    // cache, so replica counts we just wrote are never seen stale (which could scale an old set
    // back up).
    let Some(sel_string) = sel.map(selector::to_string) else {
        return Ok(Action::await_change());
    };
    let listed = sync
        .sets
        .list(&ListParams::default().labels(&sel_string))
        .await
        .map_err(sync.err("listing ReplicaSets"))?;
    let mut owned: Vec<Arc<ReplicaSet>> = Vec::new();
    for rs in listed.items.into_iter().map(Arc::new) {
        match controller_ref(&rs.metadata) {
            Some(r) if r.uid == uid => owned.push(rs),
            None if rs.metadata.deletion_timestamp.is_none()
                && selector::matches(sel, rs.metadata.labels.as_ref()) =>
            {
                let mut refs = rs.metadata.owner_references.clone().unwrap_or_default();
                refs.push(owner_reference(&d));
                let patch = json!({"metadata": {"ownerReferences": refs,
                    "resourceVersion": rs.metadata.resource_version}});
                let adopted = sync
                    .sets
                    .patch(
                        rs.metadata.name.as_deref().unwrap_or_default(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(sync.err("adopting a ReplicaSet"))?;
                owned.push(Arc::new(adopted));
            }
            _ => {}
        }
    }
    let mut new_rs: Option<ReplicaSet> = owned
        .iter()
        .filter(|rs| same_template(&d, rs))
        .min_by_key(|rs| rs.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .map(|rs| (**rs).clone());
    let new_name = new_rs.as_ref().and_then(|rs| rs.metadata.name.clone());
    let old: Vec<&ReplicaSet> = owned
        .iter()
        .map(|rs| rs.as_ref())
        .filter(|rs| rs.metadata.name != new_name || new_name.is_none())
        .collect();
    let paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
    let want = replicas(&d);
    let mut progressed = false;
    let mut requeue = Duration::from_secs(300);

    let all_sets: Vec<&ReplicaSet> = owned.iter().map(|rs| rs.as_ref()).collect();
    if paused || is_scaling_event(&d, &all_sets) {
        // Upstream's sync: no rollout while paused or just scaled; the sets are sized (in
        // proportion, mid-rollout) to spec.replicas, and the rollout goes on at the next sync.
        for (rs_name, to) in scale_sizes(&d, new_rs.as_ref(), &old) {
            let Some(rs) = all_sets
                .iter()
                .find(|rs| rs.metadata.name.as_deref() == Some(&rs_name))
            else {
                continue;
            };
            if rs_replicas(rs) != to || !replicas_annotated(&d, rs) {
                sync.scale(rs, to).await?;
            }
        }
    } else {
        let rev = next_revision(&old);
        // Recreate: every old pod gone before the new set scales up.
        let old_running = old
            .iter()
            .any(|rs| rs_replicas(rs) > 0 || rs.status.as_ref().is_some_and(|s| s.replicas > 0));
        if is_recreate(&d) {
            for rs in &old {
                if rs_replicas(rs) > 0 {
                    sync.scale(rs, 0).await?;
                    progressed = true;
                }
            }
        }
        match &new_rs {
            None => {
                let initial = if is_recreate(&d) && old_running {
                    0
                } else {
                    new_rs_replicas(&d, None, &old)
                };
                let collisions = d.status.as_ref().and_then(|s| s.collision_count);
                let template = d.spec.clone().unwrap_or_default().template;
                let hash = template_hash(&template, collisions);
                let rs = new_replicaset(&d, &hash, rev, initial);
                match sync.sets.create(&PostParams::default(), &rs).await {
                    Ok(created) => {
                        let n = created.metadata.name.clone().unwrap_or_default();
                        tracing::info!(deployment = %sync.key, rs = %n, revision = rev, "new replica set");
                        sync.event(
                            "ScalingReplicaSet",
                            format!("Scaled up replica set {n} from 0 to {initial}"),
                        )
                        .await;
                        new_rs = Some(created);
                        progressed = true;
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        // A set of that name that is not ours for this template: hash again with
                        // a bumped collisionCount (upstream's answer to hash clashes).
                        let existing = sync
                            .sets
                            .get_opt(rs.metadata.name.as_deref().unwrap_or_default())
                            .await
                            .map_err(sync.err("reading a ReplicaSet"))?;
                        let ours = existing.as_ref().is_some_and(|e| {
                            controller_ref(&e.metadata).is_some_and(|r| r.uid == uid)
                                && same_template(&d, e)
                        });
                        if !ours {
                            let patch =
                                json!({"status": {"collisionCount": collisions.unwrap_or(0) + 1}});
                            Api::<Deployment>::namespaced(st.ctx.client.clone(), &ns)
                                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                                .await
                                .map_err(sync.err("recording a hash collision"))?;
                        }
                        return Ok(Action::requeue(Duration::from_secs(1)));
                    }
                    Err(e) => return Err(sync.err("creating a ReplicaSet")(e)),
                }
            }
            Some(rs) if revision(&rs.metadata) < rev => {
                // An old template came back (rollout undo): it becomes the newest revision.
                let patch = json!({"metadata": {"annotations": {REVISION: rev.to_string()}}});
                let updated = sync
                    .sets
                    .patch(
                        rs.metadata.name.as_deref().unwrap_or_default(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(sync.err("updating the revision"))?;
                new_rs = Some(updated);
                progressed = true;
            }
            Some(_) => {}
        }
        let Some(mut new) = new_rs.clone() else {
            return Ok(Action::requeue(Duration::from_secs(1)));
        };
        tracing::debug!(deployment = %sync.key, new = ?(rs_replicas(&new), new.status.as_ref().map(|s| (s.replicas, s.available_replicas))),
            old = ?old.iter().map(|rs| (rs_replicas(rs), rs.status.as_ref().map(|s| (s.replicas, s.available_replicas)))).collect::<Vec<_>>(), "rolling");
        if is_recreate(&d) {
            if !old_running && rs_replicas(&new) != want {
                sync.scale(&new, want).await?;
                progressed = true;
            } else if old_running {
                requeue = Duration::from_secs(1);
            }
        } else {
            let target = new_rs_replicas(&d, Some(&new), &old);
            if target != rs_replicas(&new) {
                sync.scale(&new, target).await?;
                new.spec.get_or_insert_with(Default::default).replicas = Some(target);
                progressed = true;
            }
            for (rs_name, to) in scale_down_old(&d, &new, &old) {
                if let Some(rs) = old
                    .iter()
                    .find(|rs| rs.metadata.name.as_deref() == Some(&rs_name))
                {
                    sync.scale(rs, to).await?;
                    progressed = true;
                }
            }
        }
        for victim in to_prune(&d, &old) {
            match sync.sets.delete(&victim, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(sync.err("pruning an old ReplicaSet")(e)),
            }
        }
        new_rs = Some(new);
    }

    // The Deployment carries the revision of its newest set.
    let d_api: Api<Deployment> = Api::namespaced(st.ctx.client.clone(), &ns);
    if let Some(rs) = &new_rs {
        let rev = revision(&rs.metadata);
        if rev > 0 && revision(&d.metadata) != rev {
            let patch = json!({"metadata": {"annotations": {REVISION: rev.to_string()}}});
            d_api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(sync.err("annotating the revision"))?;
        }
    }
    let all: Vec<&ReplicaSet> = owned
        .iter()
        .map(|rs| rs.as_ref())
        .filter(|rs| rs.metadata.name != new_rs.as_ref().and_then(|n| n.metadata.name.clone()))
        .chain(new_rs.iter())
        .collect();
    let status = compute_status(&d, new_rs.as_ref(), &all, progressed, Timestamp::now());
    if d.status.as_ref() != Some(&status) {
        d_api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
            .map_err(sync.err("updating status"))?;
    }
    let complete = status.updated_replicas == Some(want)
        && status.replicas == Some(want)
        && status.available_replicas == Some(want);
    if !complete && !paused {
        // Re-check the progress deadline even when nothing else happens.
        requeue = requeue.min(Duration::from_secs(10));
    }
    Ok(Action::requeue(requeue))
}

fn error_policy(_d: Arc<Deployment>, err: &DeploymentError, _st: Arc<State>) -> Action {
    tracing::warn!(error = %err, "deployment");
    Action::requeue(Duration::from_secs(2))
}
