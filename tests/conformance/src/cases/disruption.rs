//! sig-apps DisruptionController entries: the PodDisruptionBudget API (create, update, patch,
//! delete, list across namespaces, delete a collection, status update and patch), the disruption
//! controller's status, and the eviction API blocking and then allowing evictions as the budget
//! changes — from upstream's test/e2e/apps/disruption.go. Each case restates its MUSTs.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use super::{case, Case};
use crate::ctx::{from_json, is_ready, to_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-apps] DisruptionController Listing PodDisruptionBudgets for all namespaces should list and delete a collection of PodDisruptionBudgets [Conformance]",
        "disruption",
        list_and_delete_collection
    ),
    case!(
        "[sig-apps] DisruptionController should create a PodDisruptionBudget [Conformance]",
        "disruption",
        create_update_patch_delete
    ),
    case!(
        "[sig-apps] DisruptionController should observe PodDisruptionBudget status updated [Conformance]",
        "disruption",
        status_updated
    ),
    case!(
        "[sig-apps] DisruptionController should update/patch PodDisruptionBudget status [Conformance]",
        "disruption",
        update_patch_status
    ),
    case!(
        "[sig-apps] DisruptionController should block an eviction until the PDB is updated to allow it [Conformance]",
        "disruption",
        block_eviction_until_allowed
    ),
];

/// Upstream's schedulingTimeout and the status poll's timeout.
const SCHEDULING: Duration = Duration::from_secs(600);
const STATUS: Duration = Duration::from_secs(60);

fn budget(
    name: &str,
    labels: Value,
    min_available: Option<Value>,
    max_unavailable: Option<Value>,
) -> CaseResult<PodDisruptionBudget> {
    let mut spec = json!({"selector": {"matchLabels": {"foo": "bar"}}});
    if let Some(v) = min_available {
        spec["minAvailable"] = v;
    }
    if let Some(v) = max_unavailable {
        spec["maxUnavailable"] = v;
    }
    from_json(json!({"metadata": {"name": name, "labels": labels}, "spec": spec}))
}

/// Upstream's waitForPdbToBeProcessed: the controller observed the budget's generation.
async fn wait_processed(ctx: &Ctx, api: &Api<PodDisruptionBudget>, name: &str) -> CaseResult {
    ctx.wait(
        &format!("PodDisruptionBudget {name} to be processed"),
        SCHEDULING,
        || async {
            let pdb = api.get(name).await?;
            let observed = pdb
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            let generation = pdb.metadata.generation.unwrap_or(0);
            Ok(if observed >= generation {
                Ok(())
            } else {
                Err(format!(
                    "observedGeneration {observed} < generation {generation}"
                ))
            })
        },
    )
    .await
}

/// Upstream's createPDBMinAvailableOrDie / createPDBMaxUnavailableOrDie.
async fn create_budget(
    ctx: &Ctx,
    api: &Api<PodDisruptionBudget>,
    pdb: &PodDisruptionBudget,
) -> CaseResult {
    let name = pdb.metadata.name.clone().unwrap_or_default();
    api.create(&PostParams::default(), pdb).await?;
    wait_processed(ctx, api, &name).await
}

/// Upstream's updatePDBOrDie: get, change, update (again on a conflict), then wait to be processed.
async fn update_budget(
    ctx: &Ctx,
    api: &Api<PodDisruptionBudget>,
    name: &str,
    status: bool,
    change: impl Fn(&mut PodDisruptionBudget),
) -> CaseResult<PodDisruptionBudget> {
    let mut last = None;
    for _ in 0..5 {
        let mut pdb = api.get(name).await?;
        change(&mut pdb);
        let result = if status {
            api.replace_status(name, &PostParams::default(), &pdb).await
        } else {
            api.replace(name, &PostParams::default(), &pdb).await
        };
        match result {
            Ok(updated) => {
                wait_processed(ctx, api, name).await?;
                return Ok(updated);
            }
            Err(kube::Error::Api(e)) if e.code == 409 => last = Some(kube::Error::Api(e)),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last
        .map(CaseError::from)
        .unwrap_or_else(|| CaseError::Failed("update kept conflicting".into())))
}

/// Upstream's patchPDBOrDie: a merge patch of the budget (or of its status), then wait.
async fn patch_budget(
    ctx: &Ctx,
    api: &Api<PodDisruptionBudget>,
    name: &str,
    status: bool,
    patch: Value,
) -> CaseResult<PodDisruptionBudget> {
    let pp = PatchParams::default();
    let patched = if status {
        api.patch_status(name, &pp, &Patch::Merge(&patch)).await?
    } else {
        api.patch(name, &pp, &Patch::Merge(&patch)).await?
    };
    wait_processed(ctx, api, name).await?;
    Ok(patched)
}

async fn delete_budget(ctx: &Ctx, api: &Api<PodDisruptionBudget>, name: &str) -> CaseResult {
    api.delete(name, &DeleteParams::default()).await?;
    ctx.wait(
        &format!("PodDisruptionBudget {name} to be deleted"),
        SCHEDULING,
        || async {
            Ok(match api.get_opt(name).await? {
                None => Ok(()),
                Some(_) => Err("still there"),
            })
        },
    )
    .await
}

fn min_available(pdb: &PodDisruptionBudget) -> String {
    match pdb.spec.as_ref().and_then(|s| s.min_available.as_ref()) {
        Some(IntOrString::Int(n)) => n.to_string(),
        Some(IntOrString::String(s)) => s.clone(),
        None => String::new(),
    }
}

/// Upstream's createPodsOrDie: `pod-0` … with label foo=bar, running pause.
async fn create_pods(ctx: &Ctx, n: usize) -> CaseResult {
    for i in 0..n {
        let pod: Pod = from_json(json!({
            "metadata": {"name": format!("pod-{i}"), "labels": {"foo": "bar"}},
            "spec": {"containers": [{"name": "donothing", "image": ctx.images().pause()}],
                     "restartPolicy": "Always"}
        }))?;
        ctx.create_pod(&pod).await?;
    }
    Ok(())
}

/// Upstream's createReplicaSetOrDie (not exclusive: no host port).
async fn create_replica_set(ctx: &Ctx, replicas: i32) -> CaseResult {
    let rs: ReplicaSet = from_json(json!({
        "metadata": {"name": "rs"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"foo": "bar"}},
                 "template": {"metadata": {"labels": {"foo": "bar"}},
                              "spec": {"containers": [{"name": "donothing", "image": ctx.images().pause()}]}}}
    }))?;
    ctx.api::<ReplicaSet>()
        .create(&PostParams::default(), &rs)
        .await?;
    Ok(())
}

fn usable(p: &Pod) -> bool {
    is_ready(p) && p.metadata.deletion_timestamp.is_none()
}

/// Upstream's waitForPodsOrDie: at least `n` pods labelled foo=bar Ready and not being deleted.
async fn wait_ready_pods(ctx: &Ctx, n: usize) -> CaseResult {
    let pods: Api<Pod> = ctx.api();
    ctx.wait(&format!("{n} pods to be ready"), SCHEDULING, || async {
        let list = pods.list(&ListParams::default().labels("foo=bar")).await?;
        let ready = list.items.iter().filter(|p| usable(p)).count();
        Ok(if ready >= n {
            Ok(())
        } else {
            Err(format!("{ready} of {} ready", list.items.len()))
        })
    })
    .await
}

/// Upstream's locateRunningPod: any Ready pod of the namespace not being deleted.
async fn locate_running_pod(ctx: &Ctx) -> CaseResult<String> {
    let pods: Api<Pod> = ctx.api();
    ctx.wait("a running pod", SCHEDULING, || async {
        let list = pods.list(&ListParams::default()).await?;
        Ok(list
            .items
            .iter()
            .find(|p| usable(p))
            .and_then(|p| p.metadata.name.clone())
            .ok_or("none ready"))
    })
    .await
}

/// The pods of the case's namespace through a client that, like the e2e framework's client-go,
/// does not resend a 429 by itself (kube-rs's default policy retries it for minutes).
async fn evicting_pods(ctx: &Ctx) -> CaseResult<Api<Pod>> {
    let config_error = |e: &dyn std::fmt::Display| CaseError::Failed(format!("kubeconfig: {e}"));
    let mut config = match &ctx.cluster.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| config_error(&e))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| config_error(&e))?
        }
        None => kube::Config::infer().await.map_err(|e| config_error(&e))?,
    };
    config.default_retry = false;
    let client = kube::Client::try_from(config)?;
    Ok(Api::namespaced(client, &ctx.ns))
}

/// An eviction the budget MUST refuse, with the DisruptionBudget cause.
async fn expect_refused(ctx: &Ctx, pod: &str) -> CaseResult {
    let pods = evicting_pods(ctx).await?;
    match pods.evict(pod, &EvictParams::default()).await {
        Ok(_) => Err(CaseError::Failed(format!(
            "evicting {pod} succeeded; the budget should have refused it"
        ))),
        Err(kube::Error::Api(e)) => {
            let has_cause = e
                .details
                .as_ref()
                .is_some_and(|d| d.causes.iter().any(|c| c.reason == "DisruptionBudget"));
            must!(
                has_cause,
                "pod eviction should fail with DisruptionBudget cause. The error was \"{}\" ({})",
                e.message,
                e.code
            );
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

async fn evict(ctx: &Ctx, pod: &str) -> CaseResult {
    evicting_pods(ctx)
        .await?
        .evict(pod, &EvictParams::default())
        .await?;
    Ok(())
}

/// PodDisruptionBudget: list and delete collection — the API MUST support list (across all
/// namespaces and in one, by label) and deletecollection.
async fn list_and_delete_collection(ctx: &Ctx) -> CaseResult {
    // Upstream's second framework: another namespace of the run.
    let other = format!("disruption-2-{}", &ctx.ns[ctx.ns.len() - 5..]);
    let namespaces: Api<Namespace> = ctx.all();
    namespaces
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": other,
                "labels": {"e2e-framework": "disruption-2", "e2e-run": "kiln-conformance"}}}))?,
        )
        .await?;
    let result = list_and_delete_in(ctx, &other).await;
    let _ = namespaces.delete(&other, &DeleteParams::background()).await;
    result
}

async fn list_and_delete_in(ctx: &Ctx, other: &str) -> CaseResult {
    let labels = json!({"foo_pdb": "bar_pdb"});
    let api: Api<PodDisruptionBudget> = ctx.api();
    let elsewhere: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), other);
    create_budget(
        ctx,
        &api,
        &budget("foo", labels.clone(), Some(json!(2)), None)?,
    )
    .await?;
    create_budget(
        ctx,
        &api,
        &budget("foo2", labels.clone(), Some(json!("1%")), None)?,
    )
    .await?;
    create_budget(
        ctx,
        &elsewhere,
        &budget("foo3", labels, Some(json!(2)), None)?,
    )
    .await?;

    let by_label = ListParams::default().labels("foo_pdb=bar_pdb");
    let names = |list: kube::core::ObjectList<PodDisruptionBudget>| -> BTreeSet<String> {
        list.items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect()
    };
    let all: Api<PodDisruptionBudget> = Api::all(ctx.client.clone());
    let everywhere = all.list(&by_label).await?;
    must_eq!(
        everywhere.items.len(),
        3,
        "PDBs listed across all namespaces"
    );
    must_eq!(
        names(everywhere),
        BTreeSet::from(["foo".to_string(), "foo2".into(), "foo3".into()]),
        "PDBs listed across all namespaces"
    );
    let here = api.list(&by_label).await?;
    must_eq!(here.items.len(), 2, "PDBs listed in namespace {}", ctx.ns);
    must_eq!(
        names(here),
        BTreeSet::from(["foo".to_string(), "foo2".into()]),
        "PDBs listed in namespace {}",
        ctx.ns
    );

    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    ctx.wait("the PDB collection to be deleted", SCHEDULING, || async {
        let left = api.list(&ListParams::default()).await?.items.len();
        Ok(if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} left"))
        })
    })
    .await
}

/// PodDisruptionBudget: create, update, patch, and delete — each MUST take effect: the update to
/// minAvailable 2% and the patch to 3% read back, and the budget is gone after the delete.
async fn create_update_patch_delete(ctx: &Ctx) -> CaseResult {
    let api: Api<PodDisruptionBudget> = ctx.api();
    create_budget(
        ctx,
        &api,
        &budget("foo", json!({"foo": "bar"}), Some(json!("1%")), None)?,
    )
    .await?;
    let updated = update_budget(ctx, &api, "foo", false, |pdb| {
        if let Some(spec) = pdb.spec.as_mut() {
            spec.min_available = Some(IntOrString::String("2%".into()));
        }
    })
    .await?;
    must_eq!(
        min_available(&updated),
        "2%",
        "minAvailable after the update"
    );
    // Upstream reads the budget through the status subresource before patching.
    api.get_status("foo").await?;
    let patched = patch_budget(
        ctx,
        &api,
        "foo",
        false,
        json!({"spec": {"minAvailable": "3%"}}),
    )
    .await?;
    must_eq!(
        min_available(&patched),
        "3%",
        "minAvailable after the patch"
    );
    delete_budget(ctx, &api, "foo").await
}

/// PodDisruptionBudget: Status updates — the disruption controller MUST update the budget's status
/// with how many disruptions are allowed (minAvailable 1 of 3 running pods: positive).
async fn status_updated(ctx: &Ctx) -> CaseResult {
    let api: Api<PodDisruptionBudget> = ctx.api();
    create_budget(
        ctx,
        &api,
        &budget("foo", json!({"foo": "bar"}), Some(json!(1)), None)?,
    )
    .await?;
    create_pods(ctx, 3).await?;
    wait_ready_pods(ctx, 3).await?;
    ctx.wait("disruptionsAllowed > 0", STATUS, || async {
        let pdb = api.get("foo").await?;
        let status = pdb.status.unwrap_or_default();
        Ok(if status.disruptions_allowed > 0 {
            Ok(())
        } else {
            Err(format!(
                "disruptionsAllowed {} (currentHealthy {}, desiredHealthy {})",
                status.disruptions_allowed, status.current_healthy, status.desired_healthy
            ))
        })
    })
    .await
}

/// PodDisruptionBudget: update and patch status — an update of status.disruptedPods MUST read
/// back through the status subresource, and a merge patch of the status that empties it MUST
/// answer with no disrupted pods.
async fn update_patch_status(ctx: &Ctx) -> CaseResult {
    let api: Api<PodDisruptionBudget> = ctx.api();
    create_budget(
        ctx,
        &api,
        &budget("foo", json!({"foo": "bar"}), Some(json!(1)), None)?,
    )
    .await?;
    create_pods(ctx, 1).await?;
    wait_ready_pods(ctx, 1).await?;
    let pod = locate_running_pod(ctx).await?;
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    update_budget(ctx, &api, "foo", true, |pdb| {
        let status = pdb.status.get_or_insert_with(Default::default);
        status.disrupted_pods = Some([(pod.clone(), now.clone())].into());
    })
    .await?;
    let updated = api.get_status("foo").await?;
    let disrupted = updated
        .status
        .and_then(|s| s.disrupted_pods)
        .unwrap_or_default();
    must!(
        disrupted.contains_key(&pod),
        "Expecting the DisruptedPods have {pod}; it has {:?}",
        disrupted.keys().collect::<Vec<_>>()
    );

    // The merge patch between the status as read and the same status without disrupted pods.
    let old = to_json(&api.get_status("foo").await?);
    let mut new = old.clone();
    if let Some(s) = new["status"].as_object_mut() {
        s.remove("disruptedPods");
    }
    let patch = merge_patch(&old, &new);
    let patched = patch_budget(ctx, &api, "foo", true, patch).await?;
    let left = patched
        .status
        .and_then(|s| s.disrupted_pods)
        .unwrap_or_default();
    must!(
        left.is_empty(),
        "Expecting the PodDisruptionBudget's be empty; it has {:?}",
        left.keys().collect::<Vec<_>>()
    );
    Ok(())
}

/// RFC 7386's patch from `old` to `new` (what upstream's jsonpatch.CreateMergePatch makes).
fn merge_patch(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = serde_json::Map::new();
            for (k, v) in n {
                match o.get(k) {
                    Some(ov) if ov == v => {}
                    Some(ov) if ov.is_object() && v.is_object() => {
                        patch.insert(k.clone(), merge_patch(ov, v));
                    }
                    _ => {
                        patch.insert(k.clone(), v.clone());
                    }
                }
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                patch.insert(k.clone(), Value::Null);
            }
            Value::Object(patch)
        }
        (_, n) => n.clone(),
    }
}

/// PodDisruptionBudget: block an eviction until the PDB is updated to allow it — with
/// minAvailable 3 of 3 an eviction MUST fail with the DisruptionBudget cause; after the update to
/// 2 it MUST succeed; after the patch to maxUnavailable 0 it MUST fail again; once the budget is
/// deleted it MUST succeed.
async fn block_eviction_until_allowed(ctx: &Ctx) -> CaseResult {
    let api: Api<PodDisruptionBudget> = ctx.api();
    create_budget(
        ctx,
        &api,
        &budget("foo", json!({"foo": "bar"}), Some(json!(3)), None)?,
    )
    .await?;
    create_replica_set(ctx, 3).await?;
    wait_ready_pods(ctx, 3).await?;
    let pod = locate_running_pod(ctx).await?;
    expect_refused(ctx, &pod).await?;

    update_budget(ctx, &api, "foo", false, |pdb| {
        if let Some(spec) = pdb.spec.as_mut() {
            spec.min_available = Some(IntOrString::Int(2));
        }
    })
    .await?;
    wait_ready_pods(ctx, 3).await?;
    ctx.wait("the pdb to observe 3 healthy pods", STATUS, || async {
        let current = api
            .get("foo")
            .await?
            .status
            .map(|s| s.current_healthy)
            .unwrap_or(0);
        Ok(if current == 3 {
            Ok(())
        } else {
            Err(format!("currentHealthy {current}"))
        })
    })
    .await?;
    evict(ctx, &pod).await?;

    let old = to_json(&api.get_status("foo").await?);
    let mut new = old.clone();
    if let Some(s) = new["spec"].as_object_mut() {
        s.remove("minAvailable");
    }
    new["spec"]["maxUnavailable"] = json!(0);
    patch_budget(ctx, &api, "foo", false, merge_patch(&old, &new)).await?;
    wait_ready_pods(ctx, 3).await?;
    let pod = locate_running_pod(ctx).await?;
    expect_refused(ctx, &pod).await?;

    delete_budget(ctx, &api, "foo").await?;
    wait_ready_pods(ctx, 3).await?;
    evict(ctx, &pod).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patches_remove_and_replace() {
        let old = json!({"spec": {"minAvailable": 2, "selector": {"a": 1}}, "status": {"disruptedPods": {"p": "t"}, "x": 1}});
        let new = json!({"spec": {"maxUnavailable": 0, "selector": {"a": 1}}, "status": {"x": 1}});
        assert_eq!(
            merge_patch(&old, &new),
            json!({"spec": {"maxUnavailable": 0, "minAvailable": null}, "status": {"disruptedPods": null}})
        );
    }
}
