//! sig-network API-operations entries for networking.k8s.io/v1: Ingress (with /status) and
//! IngressClass, through discovery, create, get, list, watch, patch, update, delete and
//! deletecollection, as test/e2e/network/ingress.go and ingressclass.go run them.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::ResourceExt;
use serde_json::{json, Value};

use super::api_ops::{group_discovery, update_with_retry, Kind};
use super::{case, Case};
use crate::ctx::{from_json, to_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-network] Ingress API should support creating Ingress API operations [Conformance]",
        "ingress",
        ingress_api
    ),
    case!(
        "[sig-network] IngressClass API should support creating IngressClass API operations [Conformance]",
        "ingressclass",
        ingress_class_api
    ),
];

const GROUP: &str = "networking.k8s.io";
/// Upstream's wait.ForeverTestTimeout.
const WATCH_WAIT: Duration = Duration::from_secs(30);

fn backend(name: &str) -> Value {
    json!({"service": {"name": name, "port": {"number": 8080}}})
}

fn ingress(ctx: &Ctx, host: &str) -> CaseResult<Ingress> {
    from_json(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"generateName": "e2e-example-ing", "labels": {"special-label": ctx.ns}},
        "spec": {
            "defaultBackend": backend("default-backend"),
            "rules": [{"host": host, "http": {"paths": [{
                "path": "/", "pathType": "ImplementationSpecific", "backend": backend("test-backend")
            }]}}]
        },
        "status": {"loadBalancer": {}}
    }))
}

/// Every event until the patched annotation shows MUST be MODIFIED.
async fn await_patched<K: Kind + 'static>(
    watch: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
) -> CaseResult {
    loop {
        let ev = tokio::time::timeout(WATCH_WAIT, watch.try_next())
            .await
            .map_err(|_| CaseError::Failed("timed out waiting for watch event".into()))??;
        match ev {
            Some(WatchEvent::Modified(o)) => {
                if to_json(&o).pointer("/metadata/annotations/patched") == Some(&json!("true")) {
                    return Ok(());
                }
            }
            Some(WatchEvent::Bookmark(_)) => {}
            Some(other) => {
                return Err(CaseError::Failed(format!(
                    "expected a MODIFIED event, got {other:?}"
                )))
            }
            None => return Err(CaseError::Failed("watch channel should not close".into())),
        }
    }
}

/// The annotation patch and the update every script here makes; both MUST show.
async fn patch_and_update<K: Kind>(api: &Api<K>, name: &str) -> CaseResult {
    let patched = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"patched": "true"}}})),
        )
        .await?;
    must_eq!(
        to_json(&patched).pointer("/metadata/annotations/patched"),
        Some(&json!("true")),
        "patched object should have the applied annotation"
    );
    let updated = update_with_retry(api, name, false, |o| {
        o.meta_mut()
            .annotations
            .get_or_insert_with(Default::default)
            .insert("updated".into(), "true".into());
    })
    .await?;
    must_eq!(
        to_json(&updated).pointer("/metadata/annotations/updated"),
        Some(&json!("true")),
        "updated object should have the applied annotation"
    );
    Ok(())
}

/// Ingress API: networking.k8s.io/v1 ingresses in discovery; create, get, list (namespace and
/// cluster), watch (both), patch, update; /status patch, update and get; delete and
/// deletecollection (an ingress controller's finalizer may keep objects, terminating).
async fn ingress_api(ctx: &Ctx) -> CaseResult {
    group_discovery(ctx, GROUP, "v1", &["ingresses"]).await?;
    let ings = ctx.api::<Ingress>();
    let lp = ListParams::default().labels(&format!("special-label={}", ctx.ns));
    let pp = PostParams::default();
    ings.create(&pp, &ingress(ctx, "host1.bar.com")?).await?;
    ings.create(&pp, &ingress(ctx, "host2.bar.com")?).await?;
    let created = ings.create(&pp, &ingress(ctx, "host3.bar.com")?).await?;
    let name = created.name_any();

    let got = ings.get(&name).await?;
    must_eq!(got.uid(), created.uid(), "the UID read back");
    let list = ings.list(&lp).await?;
    must_eq!(list.items.len(), 3, "filtered list should have 3 items");
    let rv = list.metadata.resource_version.unwrap_or_default();
    let wp = WatchParams::default().labels(lp.label_selector.as_deref().unwrap_or(""));
    let mut watch = ings.watch(&wp, &rv).await?.boxed();

    let cluster: Api<Ingress> = Api::all(ctx.client.clone());
    must_eq!(
        cluster.list(&lp).await?.items.len(),
        3,
        "filtered cluster-wide list should have 3 items"
    );
    drop(cluster.watch(&wp, &rv).await?);

    patch_and_update(&ings, &name).await?;
    await_patched(&mut watch).await?;
    drop(watch);

    let lb = json!({"ingress": [{"ip": "169.1.1.1"}]});
    let patched = ings
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"patchedstatus": "true"}},
                "status": {"loadBalancer": lb}
            })),
        )
        .await?;
    let pj = to_json(&patched);
    must_eq!(
        pj.pointer("/status/loadBalancer"),
        Some(&lb),
        "patched object should have the applied loadBalancer status"
    );
    must_eq!(
        pj.pointer("/metadata/annotations/patchedstatus"),
        Some(&json!("true")),
        "patched object should have the applied annotation"
    );
    let lb2 = json!({"ingress": [{"ip": "169.1.1.2"}]});
    let updated = update_with_retry(&ings, &name, true, |o| {
        if let Ok(s) = serde_json::from_value(json!({"loadBalancer": lb2})) {
            o.status = Some(s);
        }
    })
    .await?;
    must_eq!(
        to_json(&updated).pointer("/status/loadBalancer"),
        Some(&lb2),
        "updated object should have the updated loadBalancer status"
    );
    let gvk = GroupVersionKind::gvk(GROUP, "v1", "Ingress");
    let (ar, _) = kube::discovery::pinned_kind(&ctx.client, &gvk).await?;
    let dynamic: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ctx.ns, &ar);
    let via_status = dynamic.get_subresource("status", &name).await?;
    must_eq!(
        via_status.metadata.uid,
        created.uid(),
        "the object read through /status"
    );

    ings.delete(&name, &DeleteParams::default()).await?;
    let terminating = |i: &Ingress| {
        i.metadata.deletion_timestamp.is_some()
            && i.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| !f.is_empty())
    };
    if let Some(i) = ings.get_opt(&name).await? {
        must!(terminating(&i), "expected 404 or a finalizer, got {i:?}");
    }
    let left = ings.list(&lp).await?.items;
    must!(left.len() <= 3, "filtered list should have <= 3 items");
    ings.delete_collection(&DeleteParams::default(), &lp)
        .await?;
    for i in ings.list(&lp).await?.items {
        must!(terminating(&i), "expected finalizers on ingress, got {i:?}");
    }
    Ok(())
}

fn ingress_class(ctx: &Ctx, name: &str) -> CaseResult<IngressClass> {
    from_json(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": format!("{}-{name}", ctx.ns),
                     "labels": {"ingressclass": ctx.ns, "special-label": "generic"}},
        "spec": {"controller": "example.com/controller"}
    }))
}

/// IngressClass API: networking.k8s.io/v1 ingressclasses in discovery; create, get, list, watch,
/// patch, update, delete and deletecollection.
async fn ingress_class_api(ctx: &Ctx) -> CaseResult {
    group_discovery(ctx, GROUP, "v1", &["ingressclasses"]).await?;
    let ics = ctx.all::<IngressClass>();
    let mine = ListParams::default().labels(&format!("ingressclass={}", ctx.ns));
    let outcome = ingress_class_steps(ctx, &ics, &mine).await;
    let _ = ics.delete_collection(&DeleteParams::default(), &mine).await;
    outcome
}

async fn ingress_class_steps(ctx: &Ctx, ics: &Api<IngressClass>, mine: &ListParams) -> CaseResult {
    let pp = PostParams::default();
    let first = ics
        .create(&pp, &ingress_class(ctx, "ingressclass1")?)
        .await?;
    ics.create(&pp, &ingress_class(ctx, "ingressclass2")?)
        .await?;
    ics.create(&pp, &ingress_class(ctx, "ingressclass3")?)
        .await?;
    let name = first.name_any();
    must_eq!(
        ics.get(&name).await?.uid(),
        first.uid(),
        "the UID read back"
    );

    // Upstream lists by the shared label; other namespaces' runs may hold classes too, so the
    // count is of this run's.
    let generic = ics
        .list(&ListParams::default().labels("special-label=generic"))
        .await?;
    let ours = generic
        .items
        .iter()
        .filter(|c| c.labels().get("ingressclass") == Some(&ctx.ns))
        .count();
    must_eq!(ours, 3, "filtered list should have 3 items");
    let rv = generic.metadata.resource_version.unwrap_or_default();
    let wp = WatchParams::default().labels(mine.label_selector.as_deref().unwrap_or(""));
    let mut watch = ics.watch(&wp, &rv).await?.boxed();

    patch_and_update(ics, &name).await?;
    await_patched(&mut watch).await?;
    drop(watch);

    ics.delete(&name, &DeleteParams::default()).await?;
    if let Some(o) = ics.get_opt(&name).await? {
        return Err(CaseError::Failed(format!("expected 404, got {o:?}")));
    }
    must_eq!(
        ics.list(mine).await?.items.len(),
        2,
        "filtered list should have 2 items"
    );
    ics.delete_collection(&DeleteParams::default(), mine)
        .await?;
    must_eq!(
        ics.list(mine).await?.items.len(),
        0,
        "filtered list should have 0 items"
    );
    Ok(())
}
