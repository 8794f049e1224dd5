//! sig-node RuntimeClass entries: pods naming a missing or deleted class are refused at admission
//! (403, checked with a server-side dry run as upstream), pods naming an existing class are
//! scheduled and get the class's overhead, and the node.k8s.io API supports every verb.
//!
//! The scheduling entries use upstream's preconfigured handler name, `test-handler`; they check
//! scheduling only (whether the node's runtime has that handler is outside the entry, as upstream
//! says), so the pod may well stay Pending with FailedCreatePodSandBox on a lab node.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent};
use kube::ResourceExt;
use serde_json::json;

use super::api_ops::{group_discovery, update_with_retry};
use super::{case, Case};
use crate::ctx::{from_json, Ctx, POD_START};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-node] RuntimeClass should reject a Pod requesting a non-existent RuntimeClass [NodeConformance] [Conformance]",
        "runtimeclass",
        rejects_missing
    ),
    case!(
        "[sig-node] RuntimeClass should reject a Pod requesting a deleted RuntimeClass [NodeConformance] [Conformance]",
        "runtimeclass",
        rejects_deleted
    ),
    case!(
        "[sig-node] RuntimeClass should schedule a Pod requesting a RuntimeClass without PodOverhead [NodeConformance] [Conformance]",
        "runtimeclass",
        schedules_without_overhead
    ),
    case!(
        "[sig-node] RuntimeClass should schedule a Pod requesting a RuntimeClass and initialize its Overhead [NodeConformance] [Conformance]",
        "runtimeclass",
        schedules_with_overhead
    ),
    case!(
        "[sig-node] RuntimeClass should support RuntimeClasses API operations [Conformance]",
        "runtimeclass",
        api_operations
    ),
];

/// e2eruntimeclass.PreconfiguredRuntimeClassHandler.
const PRECONFIGURED_HANDLER: &str = "test-handler";
const WATCH_WAIT: Duration = Duration::from_secs(30);

fn runtime_class(
    name: &str,
    handler: &str,
    overhead: Option<serde_json::Value>,
) -> CaseResult<RuntimeClass> {
    let mut rc = json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": name}, "handler": handler});
    if let Some(o) = overhead {
        rc["overhead"] = json!({"podFixed": o});
    }
    from_json(rc)
}

/// createRuntimeClass: the class's name is `<namespace>-<name>` (classes are cluster-scoped).
async fn create_class(
    ctx: &Ctx,
    name: &str,
    handler: &str,
    overhead: Option<serde_json::Value>,
) -> CaseResult<String> {
    let rc = runtime_class(&format!("{}-{name}", ctx.ns), handler, overhead)?;
    let made = ctx
        .all::<RuntimeClass>()
        .create(&PostParams::default(), &rc)
        .await?;
    Ok(made.name_any())
}

/// e2eruntimeclass.NewRuntimeClassPod.
fn class_pod(ctx: &Ctx, class: &str) -> CaseResult<Pod> {
    from_json(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "test-runtimeclass-"},
        "spec": {
            "runtimeClassName": class,
            "containers": [{"name": "test", "image": ctx.images().busybox(), "command": ["true"]}],
            "restartPolicy": "Never",
            "automountServiceAccountToken": false
        }
    }))
}

/// expectPodRejection: a dry-run create of the class's pod MUST fail with 403 Forbidden.
async fn expect_rejection(ctx: &Ctx, class: &str) -> CaseResult<Result<(), String>> {
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match ctx.api::<Pod>().create(&pp, &class_pod(ctx, class)?).await {
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Ok(())),
        Err(kube::Error::Api(s)) => Err(CaseError::Failed(format!(
            "expected 403 Forbidden, got {}: {}",
            s.code, s.message
        ))),
        Err(e) => Err(e.into()),
        Ok(_) => Ok(Err("should get forbidden error".into())),
    }
}

/// Pod with a non-existing RuntimeClass: the pod MUST be rejected.
async fn rejects_missing(ctx: &Ctx) -> CaseResult {
    let class = format!("{}-nonexistent", ctx.ns);
    match expect_rejection(ctx, &class).await? {
        Ok(()) => Ok(()),
        Err(e) => Err(CaseError::Failed(e)),
    }
}

/// Pod with a deleted RuntimeClass: once the class is gone, the pod MUST be rejected.
async fn rejects_deleted(ctx: &Ctx) -> CaseResult {
    let class = create_class(ctx, "delete-me", "runc", None).await?;
    let rcs = ctx.all::<RuntimeClass>();
    rcs.delete(&class, &DeleteParams::default()).await?;
    ctx.wait(
        "the RuntimeClass to disappear",
        Duration::from_secs(60),
        || async {
            Ok(match rcs.get_opt(&class).await? {
                None => Ok(()),
                Some(_) => Err(format!("{class} is still there")),
            })
        },
    )
    .await?;
    ctx.wait("the pod to be rejected", Duration::from_secs(60), || {
        expect_rejection(ctx, &class)
    })
    .await
}

/// WaitForPodsWithLabelScheduled for the namespace's one pod: the pod, once it has a node.
async fn scheduled_pod(ctx: &Ctx, name: &str) -> CaseResult<Pod> {
    let pods = ctx.api::<Pod>();
    let list = ctx
        .wait("the pod to be scheduled", POD_START, || async {
            let list = pods.list(&ListParams::default()).await?;
            let scheduled = list.items.iter().all(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some_and(|n| !n.is_empty())
            });
            Ok(if scheduled && !list.items.is_empty() {
                Ok(list.items)
            } else {
                Err(format!("{} pods, not all scheduled", list.items.len()))
            })
        })
        .await?;
    must_eq!(list.len(), 1, "pods in the namespace");
    must_eq!(list[0].name_any(), name, "the scheduled pod");
    Ok(list[0].clone())
}

/// Can schedule a pod requesting existing RuntimeClass: it MUST be scheduled, with no overhead.
async fn schedules_without_overhead(ctx: &Ctx) -> CaseResult {
    let class = create_class(ctx, "preconfigured-handler", PRECONFIGURED_HANDLER, None).await?;
    let outcome = async {
        let pod = ctx.create_pod(&class_pod(ctx, &class)?).await?;
        let scheduled = scheduled_pod(ctx, &pod.name_any()).await?;
        let overhead = scheduled.spec.and_then(|s| s.overhead).unwrap_or_default();
        must!(
            overhead.is_empty(),
            "overhead should not be set: {overhead:?}"
        );
        Ok(())
    }
    .await;
    ctx.all::<RuntimeClass>()
        .delete(&class, &DeleteParams::default())
        .await?;
    outcome
}

/// RuntimeClass Overhead: the scheduled pod MUST carry the class's overhead (10m cpu, 1Mi memory).
async fn schedules_with_overhead(ctx: &Ctx) -> CaseResult {
    let class = create_class(
        ctx,
        "preconfigured-handler",
        PRECONFIGURED_HANDLER,
        Some(json!({"cpu": "10m", "memory": "1Mi"})),
    )
    .await?;
    let outcome = async {
        let pod = ctx.create_pod(&class_pod(ctx, &class)?).await?;
        let scheduled = scheduled_pod(ctx, &pod.name_any()).await?;
        let overhead = scheduled.spec.and_then(|s| s.overhead).unwrap_or_default();
        let get = |k: &str| overhead.get(k).map(|q| q.0.clone());
        must_eq!(
            (get("cpu"), get("memory")),
            (Some("10m".to_string()), Some("1Mi".to_string())),
            "the pod's overhead"
        );
        Ok(())
    }
    .await;
    ctx.all::<RuntimeClass>()
        .delete(&class, &DeleteParams::default())
        .await?;
    outcome
}

/// RuntimeClass API: node.k8s.io/v1 runtimeclasses in discovery; create (a second create 409),
/// watch, get, list, patch, update, delete and deletecollection.
async fn api_operations(ctx: &Ctx) -> CaseResult {
    group_discovery(ctx, "node.k8s.io", "v1", &["runtimeclasses"]).await?;
    let rcs = ctx.all::<RuntimeClass>();
    let selector = format!("test={}", ctx.ns);
    let lp = ListParams::default().labels(&selector);
    let outcome = api_steps(ctx, &rcs, &lp).await;
    let _ = rcs.delete_collection(&DeleteParams::default(), &lp).await;
    outcome
}

async fn api_steps(ctx: &Ctx, rcs: &Api<RuntimeClass>, lp: &ListParams) -> CaseResult {
    let labelled = |suffix: &str| -> CaseResult<RuntimeClass> {
        let mut rc = runtime_class(
            &format!("{}-conformance-runtime-class{suffix}", ctx.ns),
            &format!("{}-handler{suffix}", ctx.ns),
            None,
        )?;
        rc.metadata.labels = Some([("test".to_string(), ctx.ns.clone())].into());
        Ok(rc)
    };
    let (rc, rc2, rc3) = (labelled("")?, labelled("2")?, labelled("3")?);
    let pp = PostParams::default();
    let created = rcs.create(&pp, &rc).await?;
    match rcs.create(&pp, &rc).await {
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        other => return Err(CaseError::Failed(format!("expected 409, got {other:?}"))),
    }
    rcs.create(&pp, &rc2).await?;

    let wp = kube::api::WatchParams::default().labels(lp.label_selector.as_deref().unwrap_or(""));
    let mut watch = rcs.watch(&wp, "0").await?.boxed();
    rcs.create(&pp, &rc3).await?;

    let got = rcs.get(&created.name_any()).await?;
    must_eq!(got.uid(), created.uid(), "the UID read back");
    must_eq!(
        rcs.list(lp).await?.items.len(),
        3,
        "filtered list should have 3 items"
    );

    let patched = rcs
        .patch(
            &created.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"patched": "true"}}})),
        )
        .await?;
    must_eq!(
        patched.annotations().get("patched").map(String::as_str),
        Some("true"),
        "patched object should have the applied annotation"
    );
    let updated = update_with_retry(rcs, &created.name_any(), false, |o| {
        o.annotations_mut().insert("updated".into(), "true".into());
    })
    .await?;
    must_eq!(
        updated.annotations().get("updated").map(String::as_str),
        Some("true"),
        "updated object should have the applied annotation"
    );

    // Upstream's loop ends at the first ADDED or annotated MODIFIED event; the watch MUST deliver one.
    loop {
        let ev = tokio::time::timeout(WATCH_WAIT, watch.try_next())
            .await
            .map_err(|_| CaseError::Failed("timed out waiting for watch event".into()))??;
        match ev {
            Some(WatchEvent::Added(_)) => break,
            Some(WatchEvent::Modified(o))
                if o.annotations().contains_key("patched")
                    || o.annotations().contains_key("updated") =>
            {
                break
            }
            Some(WatchEvent::Modified(_) | WatchEvent::Bookmark(_)) => {}
            Some(other) => {
                return Err(CaseError::Failed(format!(
                    "unexpected watch event {other:?}"
                )))
            }
            None => return Err(CaseError::Failed("watch channel should not close".into())),
        }
    }
    drop(watch);

    rcs.delete(&created.name_any(), &DeleteParams::default())
        .await?;
    if let Some(o) = rcs.get_opt(&created.name_any()).await? {
        return Err(CaseError::Failed(format!("expected 404, got {o:?}")));
    }
    must_eq!(
        rcs.list(lp).await?.items.len(),
        2,
        "filtered list should have 2 items"
    );
    rcs.delete_collection(&DeleteParams::default(), lp).await?;
    must_eq!(
        rcs.list(lp).await?.items.len(),
        0,
        "filtered list should have 0 items"
    );
    Ok(())
}
