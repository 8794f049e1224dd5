//! sig-storage entries. So far the API-only ones: immutable ConfigMaps and Secrets. (The volume entries
//! run agnhost's mounttest.) Each case restates the entry's MUSTs in its doc comment.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;

use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::CaseResult;
use crate::must;

pub const CASES: &[Case] = &[
    case!(
        "[sig-storage] ConfigMap should be immutable if `immutable` field is set [Conformance]",
        "configmap",
        configmap_immutable
    ),
    case!(
        "[sig-storage] Secrets should be immutable if `immutable` field is set [Conformance]",
        "secrets",
        secret_immutable
    ),
];

/// The shared script: change the data (MUST succeed), mark immutable (MUST succeed), change the data
/// (MUST fail), unmark immutable (MUST fail), change the labels (MUST succeed), delete (MUST succeed).
async fn immutable_script<K>(
    api: Api<K>,
    name: &str,
    data: (&str, serde_json::Value, serde_json::Value),
) -> CaseResult
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    <K as Resource>::DynamicType: Default,
{
    let (field, first, second) = data;
    let pp = PatchParams::default();
    let patch = |v: serde_json::Value| Patch::Merge(v);
    api.patch(name, &pp, &patch(json!({ field: first })))
        .await?;
    api.patch(name, &pp, &patch(json!({"immutable": true})))
        .await?;
    let changed = api.patch(name, &pp, &patch(json!({ field: second }))).await;
    must!(changed.is_err(), "the data of an immutable object changed");
    let unmarked = api
        .patch(name, &pp, &patch(json!({"immutable": false})))
        .await;
    must!(
        unmarked.is_err(),
        "an immutable object was made mutable again"
    );
    api.patch(
        name,
        &pp,
        &patch(json!({"metadata": {"labels": {"label1": "value1"}}})),
    )
    .await?;
    api.delete(name, &DeleteParams::default()).await?;
    Ok(())
}

/// ConfigMap, immutability: see [`immutable_script`].
async fn configmap_immutable(ctx: &Ctx) -> CaseResult {
    let cm: ConfigMap = from_json(json!({
        "metadata": {"name": "immutable"}, "data": {"data-1": "value-1"},
    }))?;
    let api: Api<ConfigMap> = ctx.api();
    api.create(&PostParams::default(), &cm).await?;
    immutable_script(
        api,
        "immutable",
        (
            "data",
            json!({"data-2": "value-2"}),
            json!({"data-3": "value-3"}),
        ),
    )
    .await
}

/// Secret, immutability: see [`immutable_script`].
async fn secret_immutable(ctx: &Ctx) -> CaseResult {
    let s: Secret = from_json(json!({
        "metadata": {"name": "immutable"}, "data": {"data-1": "dmFsdWUtMQ=="},
    }))?;
    let api: Api<Secret> = ctx.api();
    api.create(&PostParams::default(), &s).await?;
    immutable_script(
        api,
        "immutable",
        (
            "data",
            json!({"data-2": "dmFsdWUtMg=="}),
            json!({"data-3": "dmFsdWUtMw=="}),
        ),
    )
    .await
}
