//! sig-node entries about the API lifecycle of pods, Secrets, ConfigMaps and Leases: create, watch,
//! update, patch, list by label, delete and delete a collection. Each case restates the entry's MUSTs
//! in its doc comment.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::json;

use super::{case, Case};
use crate::ctx::{by_label, describe_status, from_json, phase, Ctx, POD_START};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-node] Pods should be submitted and removed [NodeConformance] [Conformance]",
        "pods",
        pods_submitted_and_removed
    ),
    case!(
        "[sig-node] Pods should be updated [NodeConformance] [Conformance]",
        "pods",
        pods_updated
    ),
    case!(
        "[sig-node] Pods should delete a collection of pods [Conformance]",
        "pods",
        pods_delete_collection
    ),
    case!(
        "[sig-node] Pods should allow activeDeadlineSeconds to be updated [NodeConformance] [Conformance]",
        "pods",
        pods_active_deadline
    ),
    case!(
        "[sig-node] Secrets should patch a secret [Conformance]",
        "secrets",
        secret_patch
    ),
    case!(
        "[sig-node] ConfigMap should run through a ConfigMap lifecycle [Conformance]",
        "configmap",
        configmap_lifecycle
    ),
    case!(
        "[sig-node] Lease lease API should be available [Conformance]",
        "lease-test",
        lease_api
    ),
];

fn pause_pod(ctx: &Ctx, name: &str, labels: serde_json::Value) -> CaseResult<Pod> {
    from_json(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "pause", "image": ctx.images().pause()}]},
    }))
}

fn unique() -> String {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos().to_string())
        .unwrap_or_default()
}

/// Pods, lifecycle: a pod created after a watch started MUST be seen ADDED by the watch, MUST run,
/// and after a graceful delete the watch MUST see it DELETED (having carried a deletionTimestamp and a
/// non-zero grace period); a list by its label MUST then be empty.
async fn pods_submitted_and_removed(ctx: &Ctx) -> CaseResult {
    let pods: Api<Pod> = ctx.api();
    let value = unique();
    let lp = by_label("time", &value);
    let before = pods.list(&lp).await?;
    must!(
        before.items.is_empty(),
        "pods with label time={value} exist before the create"
    );
    let rv = before.metadata.resource_version.unwrap_or_default();
    let wp = WatchParams::default().labels(&format!("time={value}"));
    let mut watch = pods.watch(&wp, &rv).await?.boxed();

    let pod = pause_pod(
        ctx,
        "pod-submit-remove",
        json!({"name": "foo", "time": value}),
    )?;
    ctx.create_pod(&pod).await?;
    let added = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(ev) = watch.try_next().await? {
            if let WatchEvent::Added(p) = ev {
                return Ok::<_, CaseError>(Some(p));
            }
        }
        Ok(None)
    })
    .await
    .map_err(|_| CaseError::Failed("no ADDED event within 60s".into()))??;
    must!(added.is_some(), "the watch ended without an ADDED event");
    ctx.wait_running("pod-submit-remove").await?;

    pods.delete(
        "pod-submit-remove",
        &DeleteParams::default().grace_period(30),
    )
    .await?;
    let mut saw_graceful = false;
    let deleted = tokio::time::timeout(POD_START, async {
        while let Some(ev) = watch.try_next().await? {
            match ev {
                WatchEvent::Modified(p)
                    if p.metadata.deletion_timestamp.is_some()
                        && p.metadata.deletion_grace_period_seconds.unwrap_or(0) > 0 =>
                {
                    saw_graceful = true;
                }
                WatchEvent::Deleted(p) => return Ok::<_, CaseError>(Some(p)),
                _ => {}
            }
        }
        Ok(None)
    })
    .await
    .map_err(|_| CaseError::Failed("no DELETED event in time".into()))??;
    let deleted =
        deleted.ok_or_else(|| CaseError::Failed("the watch ended before DELETED".into()))?;
    must!(
        saw_graceful || deleted.metadata.deletion_timestamp.is_some(),
        "the pod was never seen with a deletionTimestamp"
    );
    let grace = deleted
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(0);
    must!(
        grace != 0,
        "the deleted pod's terminationGracePeriodSeconds is 0"
    );
    let after = pods.list(&lp).await?;
    must!(
        after.items.is_empty(),
        "pods with label time={value} remain after the delete"
    );
    Ok(())
}

/// Pods, update: after changing a running pod's label, a list by the new label MUST find it.
async fn pods_updated(ctx: &Ctx) -> CaseResult {
    let pods: Api<Pod> = ctx.api();
    let value = unique();
    let pod = pause_pod(ctx, "pod-update", json!({"name": "foo", "time": value}))?;
    ctx.create_pod(&pod).await?;
    ctx.wait_running("pod-update").await?;
    let mut current = pods.get("pod-update").await?;
    let new_value = format!("{value}-updated");
    current
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("time".into(), new_value.clone());
    pods.replace("pod-update", &PostParams::default(), &current)
        .await?;
    let found = pods.list(&by_label("time", &new_value)).await?;
    must_eq!(found.items.len(), 1, "pods listed by the updated label");
    Ok(())
}

/// Pods, delete a collection: three pods labelled type=Testing MUST all be gone after a
/// deletecollection with that label selector.
async fn pods_delete_collection(ctx: &Ctx) -> CaseResult {
    let pods: Api<Pod> = ctx.api();
    for i in 1..=3 {
        let pod = pause_pod(ctx, &format!("test-pod-{i}"), json!({"type": "Testing"}))?;
        ctx.create_pod(&pod).await?;
    }
    for i in 1..=3 {
        ctx.wait_running(&format!("test-pod-{i}")).await?;
    }
    pods.delete_collection(&DeleteParams::default(), &by_label("type", "Testing"))
        .await?;
    ctx.wait("the pods to be deleted", POD_START, || async {
        let left = pods.list(&by_label("type", "Testing")).await?;
        Ok(if left.items.is_empty() {
            Ok(())
        } else {
            Err(format!("{} left", left.items.len()))
        })
    })
    .await
}

/// Pods, ActiveDeadlineSeconds: after setting activeDeadlineSeconds to 5 on a running pod, the pod MUST
/// fail with reason DeadlineExceeded.
async fn pods_active_deadline(ctx: &Ctx) -> CaseResult {
    let pods: Api<Pod> = ctx.api();
    let pod = pause_pod(ctx, "pod-active-deadline", json!({"name": "foo"}))?;
    ctx.create_pod(&pod).await?;
    ctx.wait_running("pod-active-deadline").await?;
    pods.patch(
        "pod-active-deadline",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"activeDeadlineSeconds": 5}})),
    )
    .await?;
    ctx.wait(
        "the pod to fail with DeadlineExceeded",
        // The deadline is 5 s and the kubelet checks it on every sync: a minute is ample.
        Duration::from_secs(60),
        || async {
            let pod = pods.get("pod-active-deadline").await?;
            let reason = pod.status.as_ref().and_then(|s| s.reason.clone());
            Ok(
                if phase(&pod) == "Failed" && reason.as_deref() == Some("DeadlineExceeded") {
                    Ok(())
                } else {
                    Err(describe_status(&pod))
                },
            )
        },
    )
    .await
}

/// Secrets, patching: a Secret labelled testsecret-constant=true MUST be listed by that label; after a
/// patch of its data and labels, a get MUST return the new values; after a deletecollection by the
/// label, the list MUST no longer include it.
async fn secret_patch(ctx: &Ctx) -> CaseResult {
    let secrets: Api<Secret> = ctx.api();
    let s: Secret = from_json(json!({
        "metadata": {"name": "test-secret", "labels": {"testsecret-constant": "true"}},
        "type": "Opaque",
        "data": {"key": "dmFsdWU="},
    }))?;
    secrets.create(&PostParams::default(), &s).await?;
    let listed = secrets
        .list(&by_label("testsecret-constant", "true"))
        .await?;
    must!(
        listed
            .items
            .iter()
            .any(|s| s.metadata.name.as_deref() == Some("test-secret")),
        "the Secret is not listed by its label"
    );
    secrets
        .patch(
            "test-secret",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"labels": {"testsecret": "true"}},
                "data": {"key": "dmFsdWUx"},
            })),
        )
        .await?;
    let got = secrets.get("test-secret").await?;
    let value = got
        .data
        .as_ref()
        .and_then(|d| d.get("key"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned());
    must_eq!(value.as_deref(), Some("value1"), "the patched data");
    let label = got
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("testsecret"))
        .cloned();
    must_eq!(label.as_deref(), Some("true"), "the patched label");
    secrets
        .delete_collection(
            &DeleteParams::default(),
            &by_label("testsecret-constant", "true"),
        )
        .await?;
    let after = secrets
        .list(&by_label("testsecret-constant", "true"))
        .await?;
    must!(
        after.items.is_empty(),
        "the Secret is still listed after deletecollection"
    );
    Ok(())
}

/// ConfigMap lifecycle: create (labelled test-configmap-static=true), patch labels and data, get MUST
/// show the patch, a list across all namespaces by label MUST find it, deletecollection by label MUST
/// remove it.
async fn configmap_lifecycle(ctx: &Ctx) -> CaseResult {
    let cms: Api<ConfigMap> = ctx.api();
    let cm: ConfigMap = from_json(json!({
        "metadata": {"name": "test-configmap", "labels": {"test-configmap-static": "true"}},
        "data": {"valueName": "value"},
    }))?;
    cms.create(&PostParams::default(), &cm).await?;
    cms.patch(
        "test-configmap",
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"labels": {"test-configmap": "patched"}},
            "data": {"valueName": "value1"},
        })),
    )
    .await?;
    let got = cms.get("test-configmap").await?;
    let value = got.data.as_ref().and_then(|d| d.get("valueName")).cloned();
    must_eq!(value.as_deref(), Some("value1"), "the patched data");
    let label = got
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("test-configmap"))
        .cloned();
    must_eq!(label.as_deref(), Some("patched"), "the patched label");
    let all: Api<ConfigMap> = Api::all(ctx.client.clone());
    let listed = all.list(&by_label("test-configmap-static", "true")).await?;
    must!(
        listed
            .items
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some("test-configmap")
                && c.metadata.namespace.as_deref() == Some(ctx.ns.as_str())),
        "the ConfigMap is not listed across namespaces by its label"
    );
    cms.delete_collection(
        &DeleteParams::default(),
        &by_label("test-configmap-static", "true"),
    )
    .await?;
    let after = cms.list(&by_label("test-configmap-static", "true")).await?;
    must!(
        after.items.is_empty(),
        "the ConfigMap is still listed after deletecollection"
    );
    Ok(())
}

/// Lease API: create, get (MUST equal what was created), update, patch (each MUST be read back), list
/// by label (MUST find exactly the labelled ones), deletecollection by label, delete (a get MUST then
/// be NotFound).
async fn lease_api(ctx: &Ctx) -> CaseResult {
    let leases: Api<Lease> = ctx.api();
    let lease = |name: &str, holder: &str, labels: serde_json::Value| -> CaseResult<Lease> {
        from_json(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": 30,
                "acquireTime": "2024-01-01T00:00:00.000000Z",
                "renewTime": "2024-01-01T00:00:00.000000Z",
            },
        }))
    };
    let created = leases
        .create(
            &PostParams::default(),
            &lease("lease", "holder", json!({}))?,
        )
        .await?;
    let got = leases.get("lease").await?;
    must_eq!(got.spec, created.spec, "the lease read back");
    let mut updated = got.clone();
    if let Some(spec) = updated.spec.as_mut() {
        spec.holder_identity = Some("holder2".into());
    }
    leases
        .replace("lease", &PostParams::default(), &updated)
        .await?;
    let got = leases.get("lease").await?;
    let holder = got.spec.as_ref().and_then(|s| s.holder_identity.clone());
    must_eq!(
        holder.as_deref(),
        Some("holder2"),
        "the holder after update"
    );
    leases
        .patch(
            "lease",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"holderIdentity": "holder3", "leaseDurationSeconds": 60}}),
            ),
        )
        .await?;
    let got = leases.get("lease").await?;
    let spec = got.spec.clone().unwrap_or_default();
    must_eq!(
        spec.holder_identity.as_deref(),
        Some("holder3"),
        "the holder after patch"
    );
    must_eq!(
        spec.lease_duration_seconds,
        Some(60),
        "the duration after patch"
    );

    for name in ["lease2", "lease3"] {
        leases
            .create(
                &PostParams::default(),
                &lease(name, "holder", json!({"deletecollection": "true"}))?,
            )
            .await?;
    }
    let labelled = leases.list(&by_label("deletecollection", "true")).await?;
    must_eq!(labelled.items.len(), 2, "leases listed by label");
    leases
        .delete_collection(
            &DeleteParams::default(),
            &by_label("deletecollection", "true"),
        )
        .await?;
    let labelled = leases.list(&by_label("deletecollection", "true")).await?;
    must!(
        labelled.items.is_empty(),
        "labelled leases remain after deletecollection"
    );
    let all = leases.list(&ListParams::default()).await?;
    must_eq!(all.items.len(), 1, "leases left in the namespace");
    leases.delete("lease", &DeleteParams::default()).await?;
    let gone = leases.get_opt("lease").await?;
    must!(gone.is_none(), "the lease is still there after delete");
    Ok(())
}
