//! sig-api-machinery entries: watches, namespaces, discovery.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::json;

use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-api-machinery] Watchers should observe add, update, and delete watch notifications on configmaps [Conformance]",
        "watch",
        watch_notifications
    ),
    case!(
        "[sig-api-machinery] Namespaces [Serial] should patch a Namespace [Conformance]",
        "namespaces",
        patch_namespace
    ),
    case!(
        "[sig-api-machinery] Namespaces [Serial] should apply an update to a Namespace [Conformance]",
        "namespaces",
        update_namespace
    ),
    case!(
        "[sig-api-machinery] Namespaces [Serial] should apply changes to a namespace status [Conformance]",
        "namespaces",
        namespace_status
    ),
    case!(
        "[sig-api-machinery] Namespaces [Serial] should ensure that all pods are removed when a namespace is deleted [Conformance]",
        "namespaces",
        namespace_deletes_pods
    ),
    case!(
        "[sig-api-machinery] Namespaces [Serial] should ensure that all services are removed when a namespace is deleted [Conformance]",
        "namespaces",
        namespace_deletes_services
    ),
];

/// The label upstream's watch entries select configmaps by.
pub(super) const WATCH_LABEL: &str = "watch-this-configmap";

/// Watchers, configmaps: three watches (label A, label B, A or B). Creating, modifying twice and
/// deleting a configmap labelled A MUST be seen as ADDED, MODIFIED, MODIFIED, DELETED by watches A and
/// A-or-B; creating and deleting one labelled B MUST be seen by B and A-or-B; watch A MUST NOT see B.
async fn watch_notifications(ctx: &Ctx) -> CaseResult {
    let cms: Api<ConfigMap> = ctx.api();
    let rv = cms
        .list_metadata(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let (a, b) = ("multiple-watchers-A", "multiple-watchers-B");
    let mut wa = watch_configmaps(&cms, &rv, &[a]).await?;
    let mut wb = watch_configmaps(&cms, &rv, &[b]).await?;
    let mut wab = watch_configmaps(&cms, &rv, &[a, b]).await?;

    let make = |name: &str, label: &str| {
        from_json::<ConfigMap>(json!({"metadata": {"name": name, "labels": {WATCH_LABEL: label}}}))
    };
    cms.create(
        &PostParams::default(),
        &make("e2e-watch-test-configmap-a", a)?,
    )
    .await?;
    for n in 1..=2 {
        let patch = json!({"data": {"mutation": n.to_string()}});
        cms.patch(
            "e2e-watch-test-configmap-a",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    cms.delete("e2e-watch-test-configmap-a", &DeleteParams::default())
        .await?;
    cms.create(
        &PostParams::default(),
        &make("e2e-watch-test-configmap-b", b)?,
    )
    .await?;
    cms.delete("e2e-watch-test-configmap-b", &DeleteParams::default())
        .await?;

    let want_a = ["ADDED a", "MODIFIED a 1", "MODIFIED a 2", "DELETED a 2"];
    let want_b = ["ADDED b", "DELETED b"];
    let got_a = next_events(&mut wa, want_a.len()).await?;
    must_eq!(got_a, want_a, "watch A");
    let got_b = next_events(&mut wb, want_b.len()).await?;
    must_eq!(got_b, want_b, "watch B");
    let got_ab = next_events(&mut wab, want_a.len() + want_b.len()).await?;
    let mut want_ab: Vec<&str> = want_a.to_vec();
    want_ab.extend(want_b);
    must_eq!(got_ab, want_ab, "watch A or B");
    // Nothing more arrives on A: B's configmap is not its business.
    let extra = tokio::time::timeout(Duration::from_secs(2), wa.next()).await;
    must!(
        !matches!(
            extra,
            Ok(Some(Ok(WatchEvent::Added(_)
                | WatchEvent::Modified(_)
                | WatchEvent::Deleted(_))))
        ),
        "watch A saw an event it did not select: {extra:?}"
    );
    Ok(())
}

pub(super) type EventStream =
    futures::stream::BoxStream<'static, kube::Result<WatchEvent<ConfigMap>>>;

/// Upstream's watchConfigMaps: a watch on the namespace's configmaps whose `WATCH_LABEL` is one of
/// `values` (a set-based selector), from resourceVersion `rv`.
pub(super) async fn watch_configmaps(
    cms: &Api<ConfigMap>,
    rv: &str,
    values: &[&str],
) -> CaseResult<EventStream> {
    let selector = format!("{WATCH_LABEL} in ({})", values.join(","));
    Ok(cms
        .watch(&WatchParams::default().labels(&selector), rv)
        .await?
        .boxed())
}

/// The next add/modify/delete event (bookmarks skipped) as "TYPE <last part of the name>
/// [mutation]", with its object; `seen` (the events before it) goes into the failure message.
pub(super) async fn next_event(
    w: &mut EventStream,
    seen: &[String],
) -> CaseResult<(String, ConfigMap)> {
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(30), w.try_next())
            .await
            .map_err(|_| CaseError::Failed(format!("no watch event after {seen:?}")))??;
        let (kind, cm) = match ev {
            Some(WatchEvent::Added(cm)) => ("ADDED", cm),
            Some(WatchEvent::Modified(cm)) => ("MODIFIED", cm),
            Some(WatchEvent::Deleted(cm)) => ("DELETED", cm),
            Some(WatchEvent::Bookmark(_)) => continue,
            Some(WatchEvent::Error(e)) => {
                return Err(CaseError::Failed(format!("watch error: {}", e.message)))
            }
            None => return Err(CaseError::Failed(format!("the watch ended after {seen:?}"))),
        };
        let name = cm.metadata.name.as_deref().unwrap_or_default();
        let which = name.rsplit('-').next().unwrap_or_default();
        let mutation = cm
            .data
            .as_ref()
            .and_then(|d| d.get("mutation"))
            .map(|m| format!(" {m}"))
            .unwrap_or_default();
        return Ok((format!("{kind} {which}{mutation}"), cm));
    }
}

/// The next `n` add/modify/delete events, described as `next_event` does.
pub(super) async fn next_events(w: &mut EventStream, n: usize) -> CaseResult<Vec<String>> {
    let mut out = Vec::new();
    while out.len() < n {
        let (what, _) = next_event(w, &out).await?;
        out.push(what);
    }
    Ok(out)
}

/// Namespace patching: a merge patch adding a label MUST be applied (read back with it).
async fn patch_namespace(ctx: &Ctx) -> CaseResult {
    let namespaces: Api<Namespace> = ctx.all();
    let patch = json!({"metadata": {"labels": {"testLabel": "testValue"}}});
    namespaces
        .patch(&ctx.ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let ns = namespaces.get(&ctx.ns).await?;
    let label = ns.metadata.labels.and_then(|l| l.get("testLabel").cloned());
    must_eq!(label.as_deref(), Some("testValue"), "the patched label");
    Ok(())
}

/// Namespace, update: after a get and an update adding label e2e=updated, a get MUST show the label.
async fn update_namespace(ctx: &Ctx) -> CaseResult {
    let namespaces: Api<Namespace> = ctx.all();
    let mut ns = namespaces.get(&ctx.ns).await?;
    ns.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("e2e-ns-update".into(), "updated".into());
    namespaces
        .replace(&ctx.ns, &PostParams::default(), &ns)
        .await?;
    let got = namespaces.get(&ctx.ns).await?;
    let label = got
        .metadata
        .labels
        .and_then(|l| l.get("e2e-ns-update").cloned());
    must_eq!(label.as_deref(), Some("updated"), "the updated label");
    Ok(())
}

/// Namespace, apply changes to a namespace status: a patch of /status adding condition StatusPatch MUST
/// be read back through /status; an update of /status adding condition StatusUpdate MUST be too.
async fn namespace_status(ctx: &Ctx) -> CaseResult {
    let namespaces: Api<Namespace> = ctx.all();
    let has = |ns: &Namespace, t: &str| {
        ns.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == t && c.status == "True"))
    };
    let patch = json!({"status": {"conditions": [{
        "type": "StatusPatch", "status": "True", "reason": "E2E", "message": "Patched by an e2e test"
    }]}});
    namespaces
        .patch_status(&ctx.ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let got = namespaces.get_status(&ctx.ns).await?;
    must!(
        has(&got, "StatusPatch"),
        "the patched condition is not in the status: {:?}",
        got.status
    );
    let mut updated = got.clone();
    if let Some(conds) = updated.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        conds.push(from_json(json!({
            "type": "StatusUpdate", "status": "True", "reason": "E2E", "message": "Updated by an e2e test"
        }))?);
    }
    namespaces
        .replace_status(&ctx.ns, &PostParams::default(), &updated)
        .await?;
    let got = namespaces.get_status(&ctx.ns).await?;
    must!(
        has(&got, "StatusUpdate") && has(&got, "StatusPatch"),
        "the updated status lacks a condition: {:?}",
        got.status
    );
    Ok(())
}

/// A second namespace of the case's own, deleted at the end whatever happens.
pub(super) async fn extra_namespace(ctx: &Ctx, base: &str) -> CaseResult<String> {
    let name = format!("{base}-{}", ctx.ns.rsplit('-').next().unwrap_or("x"));
    let obj: Namespace = from_json(json!({"metadata": {"name": name}}))?;
    ctx.all::<Namespace>()
        .create(&PostParams::default(), &obj)
        .await?;
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(ctx.client.clone(), &name);
    ctx.wait(
        "the default ServiceAccount",
        Duration::from_secs(60),
        || async { Ok(sas.get_opt("default").await?.ok_or("not yet")) },
    )
    .await?;
    Ok(name)
}

/// Delete `ns` and wait until it is gone (upstream allows 3 minutes).
async fn delete_namespace_and_wait(ctx: &Ctx, ns: &str) -> CaseResult {
    let namespaces: Api<Namespace> = ctx.all();
    namespaces.delete(ns, &DeleteParams::default()).await?;
    ctx.wait(
        &format!("namespace {ns} gone"),
        Duration::from_secs(180),
        || async {
            Ok(match namespaces.get_opt(ns).await? {
                None => Ok(()),
                Some(n) => Err(format!("phase {:?}", n.status.and_then(|s| s.phase))),
            })
        },
    )
    .await
}

/// Namespace api, pods removed: deleting a namespace MUST remove its pods, and a namespace re-created
/// with the same name MUST have none.
async fn namespace_deletes_pods(ctx: &Ctx) -> CaseResult {
    let ns = extra_namespace(ctx, "nsdeletetest").await?;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pod: Pod = from_json(json!({
        "metadata": {"name": "test-pod"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "nginx", "image": ctx.images().pause()}]},
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    ctx.wait("test-pod Running", crate::ctx::POD_START, || async {
        let p = pods.get("test-pod").await?;
        Ok(if crate::ctx::phase(&p) == "Running" {
            Ok(())
        } else {
            Err(crate::ctx::describe_status(&p))
        })
    })
    .await?;
    delete_namespace_and_wait(ctx, &ns).await?;
    let again = extra_namespace(ctx, "nsdeletetest").await?;
    let left = pods.list(&ListParams::default()).await?.items.len();
    let result = if left == 0 {
        Ok(())
    } else {
        Err(CaseError::Failed(format!(
            "the re-created namespace {again} holds {left} pods"
        )))
    };
    let _ = ctx
        .all::<Namespace>()
        .delete(&again, &DeleteParams::background())
        .await;
    result
}

/// Namespace api, services removed: deleting a namespace MUST remove its Services, and a namespace
/// re-created with the same name MUST have none.
async fn namespace_deletes_services(ctx: &Ctx) -> CaseResult {
    let ns = extra_namespace(ctx, "nsdeletetest").await?;
    let svcs: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
    let svc: Service = from_json(json!({
        "metadata": {"name": "test-service"},
        "spec": {"selector": {"foo": "bar", "baz": "blah"}, "ports": [{"port": 80, "targetPort": 80}]},
    }))?;
    svcs.create(&PostParams::default(), &svc).await?;
    delete_namespace_and_wait(ctx, &ns).await?;
    let again = extra_namespace(ctx, "nsdeletetest").await?;
    let left = svcs.list(&ListParams::default()).await?.items.len();
    let result = if left == 0 {
        Ok(())
    } else {
        Err(CaseError::Failed(format!(
            "the re-created namespace {again} holds {left} Services"
        )))
    };
    let _ = ctx
        .all::<Namespace>()
        .delete(&again, &DeleteParams::background())
        .await;
    result
}
