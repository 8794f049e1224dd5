//! sig-api-machinery Garbage collector entries (upstream's test/e2e/apimachinery/garbage_collector.go):
//! deleting an owner with propagationPolicy Background, Orphan or Foreground, owners being deleted
//! next to valid ones, and ownership cycles; and the Namespaces entry that sets and clears a
//! namespace finalizer through the finalize subresource (namespace.go).
//!
//! Upstream's pods run nginx; the pods here run the pause image (only their existence matters).

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ReplicationController};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{json, Value};

use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-api-machinery] Garbage collector should delete pods created by rc when not orphaning [Conformance]",
        "gc",
        rc_background
    ),
    case!(
        "[sig-api-machinery] Garbage collector should orphan pods created by rc if delete options say so [Conformance]",
        "gc",
        rc_orphan
    ),
    case!(
        "[sig-api-machinery] Garbage collector should delete RS created by deployment when not orphaning [Conformance]",
        "gc",
        deployment_background
    ),
    case!(
        "[sig-api-machinery] Garbage collector should orphan RS created by deployment when deleteOptions.PropagationPolicy is Orphan [Conformance]",
        "gc",
        deployment_orphan
    ),
    case!(
        "[sig-api-machinery] Garbage collector should keep the rc around until all its pods are deleted if the deleteOptions says so [Conformance]",
        "gc",
        rc_foreground
    ),
    case!(
        "[sig-api-machinery] Garbage collector should not delete dependents that have both valid owner and owner that's waiting for dependents to be deleted [Conformance]",
        "gc",
        valid_and_pending_owners
    ),
    case!(
        "[sig-api-machinery] Garbage collector should not be blocked by dependency circle [Conformance]",
        "gc",
        dependency_circle
    ),
    case!(
        "[sig-api-machinery] Namespaces [Serial] should apply a finalizer to a Namespace [Conformance]",
        "namespaces",
        namespace_finalizer
    ),
];

/// upstream's gcInformerResyncRetryTimeout, added to its waits for the collector.
const RESYNC_RETRY: Duration = Duration::from_secs(60);
/// upstream's replicaSyncTimeout: an RC reaching its replicas.
const REPLICA_SYNC: Duration = Duration::from_secs(120);
const MINUTE: Duration = Duration::from_secs(60);

/// upstream's getPodTemplateSpec: the labels, one container named nginx, grace period 0.
fn pod_template(ctx: &Ctx, labels: &Value) -> Value {
    json!({
        "metadata": {"labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "nginx", "image": ctx.images().pause()}],
        },
    })
}

/// upstream's newOwnerRC.
fn new_rc(
    ctx: &Ctx,
    name: &str,
    replicas: i32,
    labels: Value,
) -> CaseResult<ReplicationController> {
    from_json(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": labels, "template": pod_template(ctx, &labels)},
    }))
}

/// upstream's newOwnerDeployment (e2edeployment.NewDeployment): 2 replicas, RollingUpdate.
fn new_deployment(ctx: &Ctx, name: &str, labels: Value) -> CaseResult<Deployment> {
    from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "RollingUpdate"},
            "template": pod_template(ctx, &labels),
        },
    }))
}

/// DeleteOptions with the policy and a UID precondition, as every entry deletes its owner.
fn delete_params(policy: fn() -> DeleteParams, uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..policy()
    }
}

/// The entries whose RC takes `estimate_maximum_pods` replicas: each fills half of what the
/// nodes allow, so two at once (or one with the orphaned pods of another still terminating) leave
/// every other entry's pods Pending with "Too many pods". The runner gives them one slot
/// (`runner::POD_HEAVY_SLOTS`) and waits for their namespace to be gone before the next starts.
pub const POD_HEAVY: &[&str] = &[
    "[sig-api-machinery] Garbage collector should orphan pods created by rc if delete options say so [Conformance]",
    "[sig-api-machinery] Garbage collector should keep the rc around until all its pods are deleted if the deleteOptions says so [Conformance]",
    "[sig-api-machinery] Garbage collector should not delete dependents that have both valid owner and owner that's waiting for dependents to be deleted [Conformance]",
];

/// upstream's estimateMaximumPods: half the pods the ready, schedulable, untainted nodes allow
/// (10 for a node that does not say), bounded to [min, max].
async fn estimate_maximum_pods(ctx: &Ctx, min: i32, max: i32) -> CaseResult<i32> {
    let nodes = ctx.all::<Node>().list(&ListParams::default()).await?;
    let mut available = 0i64;
    for n in &nodes.items {
        let spec = n.spec.clone().unwrap_or_default();
        let tainted = spec
            .taints
            .iter()
            .flatten()
            .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute");
        let ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if tainted || !ready || spec.unschedulable.unwrap_or(false) {
            continue;
        }
        let pods = n
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get("pods"))
            .and_then(|q| q.0.parse::<i64>().ok());
        available += pods.unwrap_or(10);
    }
    Ok(((available as f64 * 0.5) as i64).clamp(min as i64, max as i64) as i32)
}

/// upstream's waitForReplicas: the RC's status.replicas reaches its spec.
async fn wait_for_replicas(ctx: &Ctx, name: &str, want: i32) -> CaseResult {
    let rcs: Api<ReplicationController> = ctx.api();
    ctx.wait(
        &format!("status.replicas {want} of {name}"),
        REPLICA_SYNC,
        || async {
            let rc = rcs.get(name).await?;
            let got = rc.status.map(|s| s.replicas).unwrap_or(0);
            Ok(if got == want {
                Ok(())
            } else {
                Err(format!("status.replicas {got}"))
            })
        },
    )
    .await
}

/// How many objects of a kind the namespace holds (upstream's verifyRemainingObjects kinds).
#[derive(Debug, Clone, Copy)]
enum Kind {
    Pods,
    Deployments,
    ReplicaSets,
    ReplicationControllers,
}

async fn count(ctx: &Ctx, kind: Kind) -> CaseResult<usize> {
    let lp = ListParams::default();
    Ok(match kind {
        Kind::Pods => ctx.api::<Pod>().list_metadata(&lp).await?.items.len(),
        Kind::Deployments => ctx
            .api::<Deployment>()
            .list_metadata(&lp)
            .await?
            .items
            .len(),
        Kind::ReplicaSets => ctx
            .api::<ReplicaSet>()
            .list_metadata(&lp)
            .await?
            .items
            .len(),
        Kind::ReplicationControllers => ctx
            .api::<ReplicationController>()
            .list_metadata(&lp)
            .await?
            .items
            .len(),
    })
}

/// "kind count, …" of the namespace now, and whether every count is the wanted one.
async fn remaining(ctx: &Ctx, want: &[(Kind, usize)]) -> CaseResult<(bool, String)> {
    let mut all = true;
    let mut seen = Vec::new();
    for (kind, n) in want {
        let got = count(ctx, *kind).await?;
        all &= got == *n;
        seen.push(format!("{kind:?} {got} (want {n})"));
    }
    Ok((all, seen.join(", ")))
}

/// Wait until the namespace holds exactly the wanted numbers of objects.
async fn wait_remaining(ctx: &Ctx, timeout: Duration, want: &[(Kind, usize)]) -> CaseResult {
    ctx.wait("the remaining objects", timeout, || async {
        let (ok, seen) = remaining(ctx, want).await?;
        Ok(if ok { Ok(()) } else { Err(seen) })
    })
    .await
}

/// Wait until `name` is gone from `api`, describing the namespace's pods meanwhile.
async fn wait_gone<K>(ctx: &Ctx, api: &Api<K>, name: &str, timeout: Duration) -> CaseResult
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    ctx.wait(&format!("{name} deleted"), timeout, || async {
        if api.get_opt(name).await?.is_none() {
            return Ok(Ok(()));
        }
        let pods = ctx.api::<Pod>().list(&ListParams::default()).await?.items;
        let alive = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .count();
        Ok(Err(format!(
            "{name} still exists; {} pods remain, {alive} without a deletionTimestamp",
            pods.len()
        )))
    })
    .await
}

/// The pods' names whose ownerReferences still name `uid`.
fn still_owned_by(pods: &[Pod], uid: &str) -> Vec<String> {
    pods.iter()
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid)
        })
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect()
}

/// Garbage Collector, delete replication controller, propagation policy background: once the RC
/// (2 replicas) has made some pods, deleting it with propagationPolicy Background MUST delete the
/// pods it made (no RC and no pod remain).
async fn rc_background(ctx: &Ctx) -> CaseResult {
    let rcs: Api<ReplicationController> = ctx.api();
    let rc = new_rc(ctx, "simpletest.rc", 2, json!({"gctest": "delete_pods"}))?;
    let rc = rcs.create(&PostParams::default(), &rc).await?;
    // Upstream deliberately deletes before the RC reaches its replicas.
    ctx.wait(
        "the rc to create some pods",
        Duration::from_secs(30),
        || async {
            let n = count(ctx, Kind::Pods).await?;
            Ok(if n > 0 { Ok(()) } else { Err("no pods") })
        },
    )
    .await?;
    rcs.delete(
        "simpletest.rc",
        &delete_params(DeleteParams::background, rc.metadata.uid),
    )
    .await?;
    wait_remaining(
        ctx,
        MINUTE + RESYNC_RETRY,
        &[(Kind::ReplicationControllers, 0), (Kind::Pods, 0)],
    )
    .await
}

/// Garbage Collector, delete replication controller, propagation policy orphan: an RC of 10-100
/// replicas (half what the nodes allow) reaches them; deleting it with propagationPolicy Orphan
/// MUST delete the RC and orphan its pods: 30 s later every pod still exists, no longer owned by
/// the RC.
async fn rc_orphan(ctx: &Ctx) -> CaseResult {
    let rcs: Api<ReplicationController> = ctx.api();
    let replicas = estimate_maximum_pods(ctx, 10, 100).await?;
    let rc = new_rc(
        ctx,
        "simpletest.rc",
        replicas,
        json!({"gctest": "orphan_pods"}),
    )?;
    let rc = rcs.create(&PostParams::default(), &rc).await?;
    wait_for_replicas(ctx, "simpletest.rc", replicas).await?;
    let uid = rc.metadata.uid.clone().unwrap_or_default();
    rcs.delete(
        "simpletest.rc",
        &delete_params(DeleteParams::orphan, Some(uid.clone())),
    )
    .await?;
    wait_remaining(
        ctx,
        Duration::from_secs(120) + RESYNC_RETRY,
        &[(Kind::ReplicationControllers, 0)],
    )
    .await?;
    // Upstream waits 30 s to see whether the collector deletes the pods by mistake.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let pods = ctx.api::<Pod>().list(&ListParams::default()).await?.items;
    must_eq!(
        pods.len(),
        replicas as usize,
        "pods left 30 s after their RC was deleted with propagationPolicy Orphan"
    );
    let owned = still_owned_by(&pods, &uid);
    must!(
        owned.is_empty(),
        "pods still owned by the deleted RC (not orphaned): {owned:?}"
    );
    Ok(())
}

/// Wait for the Deployment to create a ReplicaSet; returns the first one listed.
async fn first_replicaset(ctx: &Ctx) -> CaseResult<ReplicaSet> {
    let rss: Api<ReplicaSet> = ctx.api();
    ctx.wait("the Deployment to create a ReplicaSet", MINUTE, || async {
        Ok(rss
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .next()
            .ok_or("no ReplicaSet"))
    })
    .await
}

/// Garbage Collector, delete deployment, propagation policy background: once the Deployment has
/// a ReplicaSet, deleting it with propagationPolicy Background MUST delete that ReplicaSet and the
/// Deployment's pods (no Deployment, ReplicaSet or pod remains).
async fn deployment_background(ctx: &Ctx) -> CaseResult {
    let deployments: Api<Deployment> = ctx.api();
    let d = new_deployment(ctx, "simpletest.deployment", json!({"gctest": "delete_rs"}))?;
    let d = deployments.create(&PostParams::default(), &d).await?;
    first_replicaset(ctx).await?;
    deployments
        .delete(
            "simpletest.deployment",
            &delete_params(DeleteParams::background, d.metadata.uid),
        )
        .await?;
    wait_remaining(
        ctx,
        MINUTE + RESYNC_RETRY,
        &[
            (Kind::Deployments, 0),
            (Kind::ReplicaSets, 0),
            (Kind::Pods, 0),
        ],
    )
    .await
}

/// Garbage Collector, delete deployment, propagation policy orphan: once the Deployment's
/// ReplicaSet has its 2 replicas, deleting the Deployment with propagationPolicy Orphan MUST
/// orphan the ReplicaSet and its pods: once the Deployment is gone, 1 ReplicaSet (with no
/// controller reference) and 2 pods remain.
async fn deployment_orphan(ctx: &Ctx) -> CaseResult {
    let deployments: Api<Deployment> = ctx.api();
    let rss: Api<ReplicaSet> = ctx.api();
    let d = new_deployment(ctx, "simpletest.deployment", json!({"gctest": "orphan_rs"}))?;
    let d = deployments.create(&PostParams::default(), &d).await?;
    let rs = first_replicaset(ctx).await?;
    let rs_name = rs.metadata.name.clone().unwrap_or_default();
    let generation = rs.metadata.generation.unwrap_or(0);
    let want = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    ctx.wait(
        &format!("ReplicaSet {rs_name} to have {want} replicas"),
        MINUTE,
        || async {
            let rs = rss.get(&rs_name).await?;
            let status = rs.status.unwrap_or_default();
            Ok(
                if status.observed_generation.unwrap_or(0) >= generation && status.replicas == want
                {
                    Ok(())
                } else {
                    Err(format!(
                        "observedGeneration {:?}, replicas {}",
                        status.observed_generation, status.replicas
                    ))
                },
            )
        },
    )
    .await?;
    deployments
        .delete(
            "simpletest.deployment",
            &delete_params(DeleteParams::orphan, d.metadata.uid),
        )
        .await?;
    wait_remaining(ctx, MINUTE + RESYNC_RETRY, &[(Kind::Deployments, 0)]).await?;
    let (ok, seen) = remaining(
        ctx,
        &[
            (Kind::Deployments, 0),
            (Kind::ReplicaSets, 1),
            (Kind::Pods, 2),
        ],
    )
    .await?;
    must!(
        ok,
        "after the Deployment was deleted with propagationPolicy Orphan: {seen}"
    );
    for rs in rss.list(&ListParams::default()).await?.items {
        let controller = rs
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| format!("{} {}", o.kind, o.name));
        must_eq!(
            controller,
            None,
            "controller of ReplicaSet {:?}",
            rs.metadata.name
        );
    }
    Ok(())
}

/// Garbage Collector, delete replication controller, after owned pods: an RC of 10-100 replicas
/// reaches them; deleting it with propagationPolicy Foreground MUST delete its pods before the RC:
/// once the RC is gone, no pod remains.
async fn rc_foreground(ctx: &Ctx) -> CaseResult {
    let rcs: Api<ReplicationController> = ctx.api();
    let replicas = estimate_maximum_pods(ctx, 10, 100).await?;
    let rc = new_rc(
        ctx,
        "simpletest.rc",
        replicas,
        json!({"gctest": "delete_pods_foreground"}),
    )?;
    let rc = rcs.create(&PostParams::default(), &rc).await?;
    wait_for_replicas(ctx, "simpletest.rc", replicas).await?;
    rcs.delete(
        "simpletest.rc",
        &delete_params(DeleteParams::foreground, rc.metadata.uid),
    )
    .await?;
    wait_gone(
        ctx,
        &rcs,
        "simpletest.rc",
        Duration::from_secs(30) + RESYNC_RETRY,
    )
    .await?;
    let pods = ctx.api::<Pod>().list(&ListParams::default()).await?.items;
    let names: Vec<_> = pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    must!(
        pods.is_empty(),
        "the RC deleted with propagationPolicy Foreground is gone but {} of its pods remain: {names:?}",
        pods.len()
    );
    Ok(())
}

/// Garbage Collector, multiple owners: RC1 (10-100 replicas) and RC2 (0 replicas); half of RC1's
/// pods also get RC2 as an owner; deleting RC1 with propagationPolicy Foreground MUST delete only
/// the pods RC1 alone owns: once RC1 is gone, the half owned by RC2 too remain, none with a
/// deletionTimestamp, each with one ownerReference left.
async fn valid_and_pending_owners(ctx: &Ctx) -> CaseResult {
    let rcs: Api<ReplicationController> = ctx.api();
    let pods: Api<Pod> = ctx.api();
    let replicas = estimate_maximum_pods(ctx, 10, 100).await?;
    let half = (replicas / 2) as usize;
    let rc1_name = "simpletest-rc-to-be-deleted";
    let rc1 = new_rc(
        ctx,
        rc1_name,
        replicas,
        json!({"gctest_d": "valid_and_pending_owners_d"}),
    )?;
    let rc1 = rcs.create(&PostParams::default(), &rc1).await?;
    let rc2 = new_rc(
        ctx,
        "simpletest-rc-to-stay",
        0,
        json!({"gctest_s": "valid_and_pending_owners_s"}),
    )?;
    let rc2 = rcs.create(&PostParams::default(), &rc2).await?;
    wait_for_replicas(ctx, rc1_name, replicas).await?;
    let patch = json!({"metadata": {"ownerReferences": [{
        "apiVersion": "v1", "kind": "ReplicationController",
        "name": "simpletest-rc-to-stay", "uid": rc2.metadata.uid,
    }]}});
    let list = pods.list(&ListParams::default()).await?.items;
    for pod in list.iter().take(half) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        pods.patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await?;
    }
    rcs.delete(
        rc1_name,
        &delete_params(DeleteParams::foreground, rc1.metadata.uid),
    )
    .await?;
    wait_gone(ctx, &rcs, rc1_name, Duration::from_secs(90)).await?;
    let left = pods.list(&ListParams::default()).await?.items;
    must_eq!(left.len(), half, "pods left once {rc1_name} is gone");
    for pod in &left {
        let name = pod.metadata.name.clone().unwrap_or_default();
        must!(
            pod.metadata.deletion_timestamp.is_none(),
            "pod {name}, owned by the remaining RC too, is being deleted"
        );
        let owners = pod.metadata.owner_references.clone().unwrap_or_default();
        must!(
            owners.len() == 1,
            "pod {name} should have 1 owner left, has {owners:?}"
        );
    }
    Ok(())
}

/// Garbage Collector, dependency cycle: pod1 is owned by pod3, pod2 by pod1, pod3 by pod2 (each a
/// blocking controller reference); deleting pod1 with propagationPolicy Foreground MUST delete all
/// three — the cycle MUST NOT block the collection.
async fn dependency_circle(ctx: &Ctx) -> CaseResult {
    let pods: Api<Pod> = ctx.api();
    let mut uids = Vec::new();
    for name in ["pod1", "pod2", "pod3"] {
        let pod: Pod = from_json(json!({
            "metadata": {"name": name},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "nginx", "image": ctx.images().pause()}],
            },
        }))?;
        let pod = pods.create(&PostParams::default(), &pod).await?;
        uids.push(pod.metadata.uid.unwrap_or_default());
    }
    // pod1 ← pod3, pod2 ← pod1, pod3 ← pod2.
    for (dependent, owner) in [(0, 2), (1, 0), (2, 1)] {
        let patch = json!({"metadata": {"ownerReferences": [{
            "apiVersion": "v1", "kind": "Pod", "name": format!("pod{}", owner + 1),
            "uid": uids[owner], "controller": true, "blockOwnerDeletion": true,
        }]}});
        pods.patch(
            &format!("pod{}", dependent + 1),
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await?;
    }
    pods.delete(
        "pod1",
        &delete_params(DeleteParams::foreground, Some(uids[0].clone())),
    )
    .await?;
    ctx.wait(
        "every pod of the cycle deleted",
        Duration::from_secs(90) + RESYNC_RETRY,
        || async {
            let left: Vec<String> = pods
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .map(|p| {
                    format!(
                        "{} (finalizers {:?}, deleting {})",
                        p.metadata.name.unwrap_or_default(),
                        p.metadata.finalizers.unwrap_or_default(),
                        p.metadata.deletion_timestamp.is_some()
                    )
                })
                .collect();
            Ok(if left.is_empty() {
                Ok(())
            } else {
                Err(left.join("; "))
            })
        },
    )
    .await
}

const FAKE_FINALIZER: &str = "e2e.example.com/fakeFinalizer";

/// The namespace's spec.finalizers.
fn finalizers(ns: &Namespace) -> Vec<String> {
    ns.spec
        .as_ref()
        .and_then(|s| s.finalizers.clone())
        .unwrap_or_default()
}

/// Get the namespace, change its spec.finalizers, PUT it to /finalize (retried on conflict as
/// upstream's RetryOnConflict); returns what the PUT answered.
async fn finalize(
    namespaces: &Api<Namespace>,
    name: &str,
    change: impl Fn(Vec<String>) -> Vec<String>,
) -> CaseResult<Namespace> {
    let mut last = None;
    for _ in 0..5 {
        let mut ns = namespaces.get(name).await?;
        let list = change(finalizers(&ns));
        ns.spec.get_or_insert_with(Default::default).finalizers = Some(list);
        match namespaces
            .replace_subresource("finalize", name, &PostParams::default(), &ns)
            .await
        {
            Ok(done) => return Ok(done),
            Err(kube::Error::Api(e)) if e.code == 409 => last = Some(e.message),
            Err(e) => return Err(e.into()),
        }
    }
    Err(CaseError::Failed(format!(
        "finalize of {name} kept conflicting: {last:?}"
    )))
}

/// Namespace, apply finalizer to a namespace: creating a namespace MUST succeed; adding a fake
/// finalizer through the finalize subresource MUST succeed and the finalizer MUST be found;
/// removing it the same way MUST succeed and it MUST NOT be found.
async fn namespace_finalizer(ctx: &Ctx) -> CaseResult {
    let name = super::api_machinery::extra_namespace(ctx, "e2e-ns").await?;
    let namespaces: Api<Namespace> = ctx.all();
    let result = async {
        let added = finalize(&namespaces, &name, |mut f| {
            f.push(FAKE_FINALIZER.to_string());
            f
        })
        .await?;
        must!(
            finalizers(&added).iter().any(|f| f == FAKE_FINALIZER),
            "finalizer {FAKE_FINALIZER} not found; namespace {name} has {:?}",
            finalizers(&added)
        );
        let removed = finalize(&namespaces, &name, |f| {
            f.into_iter().filter(|x| x != FAKE_FINALIZER).collect()
        })
        .await?;
        must!(
            !finalizers(&removed).iter().any(|f| f == FAKE_FINALIZER),
            "finalizer {FAKE_FINALIZER} still found; namespace {name} has {:?}",
            finalizers(&removed)
        );
        Ok::<(), CaseError>(())
    }
    .await;
    let _ = namespaces.delete(&name, &DeleteParams::background()).await;
    result
}
