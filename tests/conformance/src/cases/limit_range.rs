//! sig-scheduling LimitRange entries (test/e2e/scheduling/limit_range.go): defaults applied to
//! pods, min/max refusals, and the API operations. Each case restates the entry's MUSTs in its doc
//! comment.

use std::time::Duration;

use k8s_openapi::api::core::v1::{LimitRange, Namespace, Pod};
use kiln_common::quantity;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use super::{case, Case};
use crate::ctx::{from_json, to_json, Ctx};
use crate::error::CaseResult;
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-scheduling] LimitRange should create a LimitRange with defaults and ensure pod has those defaults applied. [Conformance]",
        "limitrange",
        defaults_applied
    ),
    case!(
        "[sig-scheduling] LimitRange should list, patch and delete a LimitRange by collection [Conformance]",
        "limitrange",
        list_patch_delete_collection
    ),
];

/// Upstream's getResourceList: cpu, memory and ephemeral-storage, empty ones left out.
fn resources(cpu: &str, memory: &str, storage: &str) -> Value {
    let mut out = json!({});
    for (k, v) in [
        ("cpu", cpu),
        ("memory", memory),
        ("ephemeral-storage", storage),
    ] {
        if !v.is_empty() {
            out[k] = json!(v);
        }
    }
    out
}

fn container_range(name: &str, labels: Value) -> Value {
    json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"limits": [{
            "type": "Container",
            "min": resources("50m", "100Mi", "100Gi"),
            "max": resources("500m", "500Mi", "500Gi"),
            "default": resources("500m", "500Mi", "500Gi"),
            "defaultRequest": resources("100m", "200Mi", "200Gi"),
            "maxLimitRequestRatio": {},
        }]},
    })
}

/// Two ResourceLists hold the same quantities, however spelled.
fn same_list(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a.as_object().is_none_or(|o| o.is_empty())
            && b.as_object().is_none_or(|o| o.is_empty());
    };
    a.len() == b.len()
        && a.iter().all(|(k, v)| {
            b.get(k)
                .is_some_and(|w| quantity::of(v).is_some() && quantity::of(v) == quantity::of(w))
        })
}

/// Upstream's newTestPod: a pause container with the given requests and limits.
fn test_pod(ctx: &Ctx, name: &str, requests: Value, limits: Value) -> CaseResult<Pod> {
    from_json(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "pause", "image": ctx.images().pause(),
            "resources": {"requests": requests, "limits": limits}}]},
    }))
}

/// Every container of the created pod MUST carry `requests` and `limits`.
async fn expect_resources(ctx: &Ctx, name: &str, requests: &Value, limits: &Value) -> CaseResult {
    let pod = to_json(&ctx.api::<Pod>().get(name).await?);
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        let r = &c["resources"];
        must!(
            same_list(&r["requests"], requests) && same_list(&r["limits"], limits),
            "pod {name} container {} has resources {r}; want requests {requests} limits {limits}",
            c["name"]
        );
    }
    Ok(())
}

/// LimitRange, resources: a created LimitRange MUST be observed by a watch and read back with its
/// defaults; a pod without resources MUST get the defaults; a pod with some MUST get the rest (a
/// request defaults to its own limit first); pods below min or above max MUST be refused; after
/// lowering min, the smaller pod MUST be admitted and the bigger still refused; once the range is
/// deleted, the bigger pod MUST be admitted.
async fn defaults_applied(ctx: &Ctx) -> CaseResult {
    let api = ctx.api::<LimitRange>();
    let value = ctx.ns.clone();
    let selector = ListParams::default().labels(&format!("time={value}"));
    must!(
        api.list(&selector).await?.items.is_empty(),
        "a LimitRange with the new label exists before it was created"
    );
    let before = api.list(&ListParams::default()).await?;
    let rv = before.metadata.resource_version.clone().unwrap_or_default();
    let range: LimitRange = from_json(container_range("limit-range", json!({"time": value})))?;
    api.create(&PostParams::default(), &range).await?;
    // The watch from before the create MUST report it ADDED.
    let wp = kube::api::WatchParams::default()
        .labels(&format!("time={value}"))
        .timeout(30);
    let mut stream = Box::pin(api.watch(&wp, &rv).await?);
    use futures::StreamExt;
    let first = tokio::time::timeout(Duration::from_secs(30), stream.next()).await;
    match first {
        Ok(Some(Ok(kube::api::WatchEvent::Added(_)))) => {}
        other => must!(
            false,
            "the LimitRange creation was not observed as ADDED: {other:?}"
        ),
    }

    let got = to_json(&api.get("limit-range").await?);
    let (default_request, default_limit) = (
        resources("100m", "200Mi", "200Gi"),
        resources("500m", "500Mi", "500Gi"),
    );
    must!(
        same_list(
            &got["spec"]["limits"][0]["defaultRequest"],
            &default_request
        ) && same_list(&got["spec"]["limits"][0]["default"], &default_limit),
        "the LimitRange read back: {}",
        got["spec"]
    );

    let pods = ctx.api::<Pod>();
    let pp = PostParams::default();
    pods.create(
        &pp,
        &test_pod(ctx, "pod-no-resources", json!({}), json!({}))?,
    )
    .await?;
    expect_resources(ctx, "pod-no-resources", &default_request, &default_limit).await?;

    pods.create(
        &pp,
        &test_pod(
            ctx,
            "pod-partial-resources",
            resources("", "150Mi", "150Gi"),
            resources("300m", "", ""),
        )?,
    )
    .await?;
    expect_resources(
        ctx,
        "pod-partial-resources",
        &resources("300m", "150Mi", "150Gi"),
        &resources("300m", "500Mi", "500Gi"),
    )
    .await?;

    let small = test_pod(ctx, "pfpod", resources("10m", "50Mi", "50Gi"), json!({}))?;
    must!(
        pods.create(&pp, &small).await.is_err(),
        "a pod below the LimitRange's min was created"
    );
    let big = test_pod(ctx, "pfpod", resources("600m", "600Mi", "600Gi"), json!({}))?;
    must!(
        pods.create(&pp, &big).await.is_err(),
        "a pod above the LimitRange's max was created"
    );

    let mut lowered = api.get("limit-range").await?;
    let new_min = resources("9m", "49Mi", "49Gi");
    if let Some(item) = lowered.spec.as_mut().and_then(|s| s.limits.first_mut()) {
        item.min = Some(from_json(new_min.clone())?);
    }
    api.replace("limit-range", &pp, &lowered).await?;
    let got = to_json(&api.get("limit-range").await?);
    must!(
        same_list(&got["spec"]["limits"][0]["min"], &new_min),
        "the updated min: {}",
        got["spec"]["limits"][0]["min"]
    );
    pods.create(&pp, &small).await?;
    must!(
        pods.create(&pp, &big).await.is_err(),
        "a pod above the LimitRange's max was created after min was lowered"
    );

    api.delete("limit-range", &DeleteParams::default().grace_period(30))
        .await?;
    ctx.wait("the LimitRange gone", Duration::from_secs(60), || async {
        let left = api.list(&ListParams::default()).await?.items.len();
        Ok(if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} left"))
        })
    })
    .await?;
    let big2 = test_pod(
        ctx,
        "pfpod2",
        resources("600m", "600Mi", "600Gi"),
        json!({}),
    )?;
    ctx.wait(
        "the big pod admitted once the LimitRange is gone",
        Duration::from_secs(30),
        || async {
            Ok(match pods.create(&pp, &big2).await {
                Ok(_) => Ok(()),
                Err(e) => Err(e.to_string()),
            })
        },
    )
    .await
}

/// LimitRange, list, patch and delete by collection: LimitRanges created in two namespaces MUST
/// both be listed across namespaces by label; a patch of the first MUST show its new label and
/// min; a deletecollection by the patched label MUST delete only that one.
async fn list_patch_delete_collection(ctx: &Ctx) -> CaseResult {
    let name = format!("e2e-limitrange-{}", &ctx.ns[ctx.ns.len() - 5..]);
    let labels = json!({"e2e-test": name, name.as_str(): "created"});
    let range: LimitRange = from_json(container_range(&name, labels))?;
    let api = ctx.api::<LimitRange>();
    let pp = PostParams::default();
    let created = api.create(&pp, &range).await?;

    let other_ns = format!("{}-2", ctx.ns);
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    namespaces
        .create(&pp, &from_json(json!({"metadata": {"name": other_ns}}))?)
        .await?;
    let result = async {
        let other: Api<LimitRange> = Api::namespaced(ctx.client.clone(), &other_ns);
        other.create(&pp, &range).await?;
        let all: Api<LimitRange> = Api::all(ctx.client.clone());
        let listed = all
            .list(&ListParams::default().labels(&format!("e2e-test={name}")))
            .await?;
        must_eq!(
            listed.items.len(),
            2,
            "LimitRanges listed by label across namespaces"
        );

        let mut limits = to_json(&created)["spec"]["limits"].clone();
        let new_min = resources("9m", "49Mi", "49Gi");
        limits[0]["min"] = new_min.clone();
        let patched = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Strategic(json!({"metadata": {"labels": {name.as_str(): "patched"}},
                    "spec": {"limits": limits}})),
            )
            .await?;
        let patched = to_json(&patched);
        must_eq!(
            patched["metadata"]["labels"][name.as_str()].as_str(),
            Some("patched"),
            "the patched label"
        );
        must!(
            same_list(&patched["spec"]["limits"][0]["min"], &new_min),
            "the patched min: {}",
            patched["spec"]["limits"][0]["min"]
        );
        let by_patched = ListParams::default().labels(&format!("{name}=patched"));
        api.delete_collection(&DeleteParams::default(), &by_patched)
            .await?;
        ctx.wait(
            "the patched LimitRange deleted",
            Duration::from_secs(10),
            || async {
                let n = all.list(&by_patched).await?.items.len();
                Ok(if n == 0 {
                    Ok(())
                } else {
                    Err(format!("{n} left"))
                })
            },
        )
        .await?;
        let left = all
            .list(&ListParams::default().labels(&format!("e2e-test={name}")))
            .await?;
        must_eq!(
            left.items.len(),
            1,
            "LimitRanges left with the e2e-test label"
        );
        Ok(())
    }
    .await;
    let _ = namespaces
        .delete(&other_ns, &DeleteParams::background())
        .await;
    result
}
